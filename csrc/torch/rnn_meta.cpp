// Meta kernels for the fused GRU cell ops. PyTorch's RNN code sends every
// GRUCell step of a tpu input (nn.GRU layers included) to
// _thnn_fused_gru_cell and its backward, which have kernels only for CUDA
// and no meta kernel (the LSTM pair has Python ones in
// torch/_meta_registrations.py). The dispatcher takes output metadata from
// meta kernels (dispatch.cpp plan_outputs), and FakeTensor under
// torch.compile needs them too. Shapes and checks follow CUDA's RNN.cu:
// hy like hx, a [B, 5H] workspace; the backward gives the two [B, 3H] gate
// gradients, grad_hx like grad_hy, and bias gradients only with has_bias.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <optional>
#include <tuple>

namespace torchtpu {
namespace {

constexpr int64_t kGruWorkspaceChunks = 5;

std::tuple<at::Tensor, at::Tensor> fused_gru_cell_meta(
    const at::Tensor& input_gates, const at::Tensor& hidden_gates, const at::Tensor& hx,
    const std::optional<at::Tensor>& input_bias, const std::optional<at::Tensor>& hidden_bias) {
  TORCH_CHECK(input_gates.dim() == 2, "_thnn_fused_gru_cell: input_gates must be 2-D, got ",
              input_gates.dim(), "-D");
  TORCH_CHECK(input_gates.sizes() == hidden_gates.sizes(),
              "_thnn_fused_gru_cell: input_gates ", input_gates.sizes(),
              " and hidden_gates ", hidden_gates.sizes(), " differ");
  const int64_t gates_size = input_gates.size(1);
  if (input_bias.has_value() && input_bias->defined()) {
    TORCH_CHECK(input_bias->dim() == 1 && input_bias->numel() == gates_size,
                "_thnn_fused_gru_cell: input_bias must have ", gates_size, " elements");
    TORCH_CHECK(hidden_bias.has_value() && hidden_bias->defined() &&
                    hidden_bias->sizes() == input_bias->sizes(),
                "_thnn_fused_gru_cell: hidden_bias must match input_bias");
  }
  TORCH_CHECK(hx.dim() == 2 && hx.numel() == input_gates.size(0) * gates_size / 3,
              "_thnn_fused_gru_cell: hx ", hx.sizes(), " does not match gates ",
              input_gates.sizes());
  auto opts = hx.options();
  return {at::empty(hx.sizes(), opts),
          at::empty({hx.size(0), hx.size(1) * kGruWorkspaceChunks}, opts)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>
fused_gru_cell_backward_meta(const at::Tensor& grad_hy, const at::Tensor& workspace,
                             bool has_bias) {
  TORCH_CHECK(grad_hy.dim() == 2 && workspace.dim() == 2 &&
                  workspace.numel() == grad_hy.numel() * kGruWorkspaceChunks,
              "_thnn_fused_gru_cell_backward: grad_hy ", grad_hy.sizes(),
              " does not match workspace ", workspace.sizes());
  auto opts = workspace.options();
  const int64_t batch = workspace.size(0), hidden = grad_hy.size(1);
  at::Tensor grad_input_gates = at::empty({batch, 3 * hidden}, opts);
  at::Tensor grad_hidden_gates = at::empty({batch, 3 * hidden}, opts);
  at::Tensor grad_hx = at::empty(grad_hy.sizes(), grad_hy.options());
  at::Tensor grad_input_bias, grad_hidden_bias;
  if (has_bias) {
    grad_input_bias = at::empty({3 * hidden}, opts);
    grad_hidden_bias = at::empty({3 * hidden}, opts);
  }
  return {grad_input_gates, grad_hidden_gates, grad_hx, grad_input_bias, grad_hidden_bias};
}

TORCH_LIBRARY_IMPL(aten, Meta, m) {
  m.impl("_thnn_fused_gru_cell", fused_gru_cell_meta);
  m.impl("_thnn_fused_gru_cell_backward", fused_gru_cell_backward_meta);
}

}  // namespace
}  // namespace torchtpu
