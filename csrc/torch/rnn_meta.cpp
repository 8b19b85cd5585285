// Meta kernels for the fused RNN cell ops. PyTorch's RNN code sends every
// LSTMCell / GRUCell step of a tpu input (nn.LSTM / nn.GRU layers included)
// to _thnn_fused_lstm_cell / _thnn_fused_gru_cell, which have kernels only
// for CUDA. The dispatcher takes output metadata from meta kernels
// (dispatch.cpp plan_outputs), and FakeTensor under torch.compile needs them
// too. The GRU pair has no meta kernel at all; the LSTM cell's Python one
// (torch/_meta_registrations.py) compares the devices of its optional
// biases without checking for None, so every bias=False LSTM fails in it:
// this one replaces it. (The LSTM backward's Python meta is fine.) Shapes and
// checks follow CUDA's RNN.cu: hy / cy like the state, a [B, 4H] (LSTM) or
// [B, 5H] (GRU) workspace; the GRU backward gives the two [B, 3H] gate
// gradients, grad_hx like grad_hy, and bias gradients only with has_bias.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <optional>
#include <tuple>

namespace torchtpu {
namespace {

constexpr int64_t kGruWorkspaceChunks = 5;

// CUDA's checkSizes: 2-D gates of one shape, 1-D biases of the gates' width,
// a state with batch * gates / chunks elements.
void check_cell_sizes(const char* op, const at::Tensor& input_gates,
                      const at::Tensor& hidden_gates, const std::optional<at::Tensor>& input_bias,
                      const std::optional<at::Tensor>& hidden_bias, int64_t chunks,
                      const at::Tensor& state) {
  TORCH_CHECK(input_gates.dim() == 2, op, ": input_gates must be 2-D, got ", input_gates.dim(),
              "-D");
  TORCH_CHECK(input_gates.sizes() == hidden_gates.sizes(), op, ": input_gates ",
              input_gates.sizes(), " and hidden_gates ", hidden_gates.sizes(), " differ");
  const int64_t gates_size = input_gates.size(1);
  if (input_bias.has_value() && input_bias->defined()) {
    TORCH_CHECK(input_bias->dim() == 1 && input_bias->numel() == gates_size, op,
                ": input_bias must have ", gates_size, " elements");
    TORCH_CHECK(hidden_bias.has_value() && hidden_bias->defined() &&
                    hidden_bias->sizes() == input_bias->sizes(),
                op, ": hidden_bias must match input_bias");
  }
  TORCH_CHECK(state.dim() == 2 && state.numel() == input_gates.size(0) * gates_size / chunks, op,
              ": state ", state.sizes(), " does not match gates ", input_gates.sizes());
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> fused_lstm_cell_meta(
    const at::Tensor& input_gates, const at::Tensor& hidden_gates, const at::Tensor& cx,
    const std::optional<at::Tensor>& input_bias, const std::optional<at::Tensor>& hidden_bias) {
  check_cell_sizes("_thnn_fused_lstm_cell", input_gates, hidden_gates, input_bias, hidden_bias, 4,
                   cx);
  return {at::empty(cx.sizes(), cx.options()), at::empty(cx.sizes(), cx.options()),
          at::empty(input_gates.sizes(), input_gates.options())};
}

std::tuple<at::Tensor, at::Tensor> fused_gru_cell_meta(
    const at::Tensor& input_gates, const at::Tensor& hidden_gates, const at::Tensor& hx,
    const std::optional<at::Tensor>& input_bias, const std::optional<at::Tensor>& hidden_bias) {
  check_cell_sizes("_thnn_fused_gru_cell", input_gates, hidden_gates, input_bias, hidden_bias, 3,
                   hx);
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
  m.impl("_thnn_fused_lstm_cell", fused_lstm_cell_meta);
  m.impl("_thnn_fused_gru_cell", fused_gru_cell_meta);
  m.impl("_thnn_fused_gru_cell_backward", fused_gru_cell_backward_meta);
}

}  // namespace
}  // namespace torchtpu
