// F.scaled_dot_product_attention on tpu as one op per direction.
//
// PyTorch's SDPA asks the device's _fused_sdp_choice_stub which backend
// serves a call; a device without one gets the math path, about twelve
// ops (mask, scale, bmm, add, _safe_softmax, bmm) that became transposing
// copies and a materialised mask in every program. Here the stub answers
// "overrideable" for the calls the lowering (core/lower/attention.c)
// serves, so SDPA calls _scaled_dot_product_fused_attention_overrideable,
// whose autograd formula calls its _backward: both are rows of the table,
// lowered once for strict, debug, defer_and_fuse and torch.compile (under
// AOTAutograd the same choice puts the same op in the graph).
//
// Everything else keeps the math path, as CPU does for what its flash
// kernel refuses: dropout (the math path draws the mask from the device
// generator), grouped-query attention, broadcast batch dims, empty
// sequences... And as on CPU and CUDA,
// torch.nn.attention.sdpa_kernel decides: without OVERRIDEABLE enabled the
// math path serves, and with neither an error names the cause.
//
// The two ops also get CPU kernels (PyTorch registers none: its composite
// raises NotImplementedError): Debug mode's shadow check runs an op again
// on the CPU, and the CPU fallback would, so both compute the reference
// the same way in ATen.
#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/SDPBackend.h>
#include <ATen/native/transformers/attention.h>
#include <torch/library.h>

#include <cmath>
#include <limits>
#include <optional>
#include <tuple>

namespace torchtpu {
namespace {

bool floating_attention_dtype(at::ScalarType t) {
  return t == at::kFloat || t == at::kDouble || t == at::kBFloat16 || t == at::kHalf;
}

// Whether the fused op serves this call (the lowering's own checks, and
// nothing it would decline). Sizes may be symbolic (torch.compile with
// dynamic shapes): the comparisons guard on them.
bool fused_serves(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                  const std::optional<at::Tensor>& mask, double dropout_p, bool enable_gqa) {
  if (dropout_p != 0.0) return false;
  if (q.is_nested() || k.is_nested() || v.is_nested()) return false;
  if (!q.device().is_privateuseone() || k.device() != q.device() || v.device() != q.device())
    return false;
  if (q.dim() != 4 && q.dim() != 3) return false;
  if (k.dim() != q.dim() || v.dim() != q.dim()) return false;
  if (!floating_attention_dtype(q.scalar_type()) || k.scalar_type() != q.scalar_type() ||
      v.scalar_type() != q.scalar_type())
    return false;
  const int64_t r = q.dim();
  for (int64_t d = 0; d < r - 2; d++)
    // GQA and broadcast batch dims
    if (k.sym_size(d) != q.sym_size(d) || v.sym_size(d) != q.sym_size(d)) return false;
  (void)enable_gqa;  // equal heads: GQA or not, the same attention
  if (k.sym_size(-1) != q.sym_size(-1) || v.sym_size(-2) != k.sym_size(-2)) return false;
  if (q.sym_numel() == 0 || k.sym_numel() == 0 || v.sym_numel() == 0) return false;
  if (mask && mask->defined()) {
    const at::Tensor& m = *mask;
    if (m.dim() > r) return false;
    if (m.scalar_type() != at::kBool && m.scalar_type() != q.scalar_type()) return false;
    const c10::SymInt full[4] = {r == 4 ? q.sym_size(0) : c10::SymInt(0), q.sym_size(-3),
                                 q.sym_size(-2), k.sym_size(-2)};
    for (int64_t d = 0; d < m.dim(); d++) {
      const c10::SymInt& want = full[4 - m.dim() + d];
      if (m.sym_size(d) != 1 && m.sym_size(d) != want) return false;
    }
  }
  return true;
}

}  // namespace

int64_t fused_sdp_choice(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                         const std::optional<at::Tensor>& mask, double dropout_p, bool is_causal,
                         std::optional<double> scale, bool enable_gqa) {
  (void)is_causal;
  (void)scale;
  auto& ctx = at::globalContext();
  if (ctx.userEnabledOverrideableSDP() && fused_serves(q, k, v, mask, dropout_p, enable_gqa))
    return static_cast<int64_t>(at::SDPBackend::overrideable);
  TORCH_CHECK(ctx.userEnabledMathSDP(),
              "No viable backend for scaled_dot_product_attention was found. This is likely "
              "due to turning off both the math kernel and the fused kernels.");
  return static_cast<int64_t>(at::SDPBackend::math);
}

namespace {

// The reference both CPU kernels share: the masked, scaled scores in the
// compute dtype (float32 for halves, as the math path computes).
at::Tensor reference_scores(const at::Tensor& q, const at::Tensor& k,
                            const std::optional<at::Tensor>& bias, bool is_causal, double scale) {
  at::Tensor s = at::matmul(q, k.transpose(-2, -1)) * scale;
  if (is_causal) {
    at::Tensor later = at::ones({s.size(-2), s.size(-1)}, s.options().dtype(at::kBool)).triu(1);
    s = s.masked_fill(later, -std::numeric_limits<double>::infinity());
  }
  if (bias && bias->defined()) s = s + bias->to(s.scalar_type());
  return s;
}

at::ScalarType compute_dtype(const at::Tensor& q) {
  return q.scalar_type() == at::kHalf || q.scalar_type() == at::kBFloat16 ? at::kFloat
                                                                           : q.scalar_type();
}

double scale_of(const at::Tensor& q, std::optional<double> scale) {
  return scale ? *scale : 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, c10::SymInt, c10::SymInt, at::Tensor,
           at::Tensor, at::Tensor>
fused_attention_cpu(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                    const std::optional<at::Tensor>& attn_bias, double dropout_p, bool is_causal,
                    bool return_debug_mask, std::optional<double> scale) {
  TORCH_CHECK(dropout_p == 0.0, "_scaled_dot_product_fused_attention_overrideable: dropout is "
                                "not supported");
  TORCH_CHECK(query.dim() == 3 || query.dim() == 4, "query must be 3D or 4D");
  (void)return_debug_mask;
  const at::ScalarType acc = compute_dtype(query);
  at::Tensor q = query.to(acc), k = key.to(acc), v = value.to(acc);
  at::Tensor s = reference_scores(q, k, attn_bias, is_causal, scale_of(query, scale));
  at::Tensor m = s.amax(-1, true);
  at::Tensor masked = m == -std::numeric_limits<double>::infinity();
  m = m.masked_fill(masked, 0);
  at::Tensor e = (s - m).exp();
  at::Tensor sum = e.sum(-1, true);
  at::Tensor p = (e / sum).masked_fill(masked, 0);
  at::Tensor out = at::matmul(p, v).to(query.scalar_type());
  const int64_t L = query.size(-2), S = key.size(-2);
  const int64_t B = query.dim() == 4 ? query.size(0) : 1, H = query.size(-3);
  at::Tensor lse = (m + sum.log()).squeeze(-1).to(at::kFloat).reshape({B, H, L});
  at::Tensor zero = at::zeros({}, query.options().dtype(at::kLong));
  return {out, lse, at::Tensor(), at::Tensor(), c10::SymInt(L), c10::SymInt(S), zero,
          zero.clone(), at::Tensor()};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> fused_attention_backward_cpu(
    const at::Tensor& grad_out, const at::Tensor& query, const at::Tensor& key,
    const at::Tensor& value, const at::Tensor& attn_bias, std::array<bool, 4> grad_input_mask,
    const at::Tensor& out, const at::Tensor& logsumexp, const at::Tensor& cum_seq_q,
    const at::Tensor& cum_seq_k, c10::SymInt max_q, c10::SymInt max_k, double dropout_p,
    bool is_causal, const at::Tensor& philox_seed, const at::Tensor& philox_offset,
    std::optional<double> scale) {
  (void)grad_input_mask, (void)cum_seq_q, (void)cum_seq_k, (void)max_q, (void)max_k;
  (void)philox_seed, (void)philox_offset;
  TORCH_CHECK(dropout_p == 0.0, "_scaled_dot_product_fused_attention_overrideable_backward: "
                                "dropout is not supported");
  const at::ScalarType acc = compute_dtype(query);
  const double sc = scale_of(query, scale);
  at::Tensor q = query.to(acc), k = key.to(acc), v = value.to(acc), g = grad_out.to(acc);
  std::optional<at::Tensor> bias;
  if (attn_bias.defined()) bias = attn_bias;
  at::Tensor s = reference_scores(q, k, bias, is_causal, sc);
  at::Tensor lse = logsumexp.to(acc).reshape(s.sizes().slice(0, s.dim() - 1)).unsqueeze(-1);
  at::Tensor masked = lse == -std::numeric_limits<double>::infinity();
  at::Tensor p = (s - lse.masked_fill(masked, 0)).exp().masked_fill(masked, 0);
  at::Tensor dv = at::matmul(p.transpose(-2, -1), g);
  at::Tensor dp = at::matmul(g, v.transpose(-2, -1));
  at::Tensor rowsum = (g * out.to(acc)).sum(-1, true);
  at::Tensor ds = p * (dp - rowsum);
  at::Tensor dq = at::matmul(ds, k) * sc, dk = at::matmul(ds.transpose(-2, -1), q) * sc;
  at::Tensor dbias;
  if (attn_bias.defined()) dbias = at::sum_to(ds, attn_bias.sizes()).to(attn_bias.scalar_type());
  return {dq.to(query.scalar_type()), dk.to(key.scalar_type()), dv.to(value.scalar_type()),
          dbias};
}

TORCH_LIBRARY_IMPL(aten, CPU, m) {
  m.impl("_scaled_dot_product_fused_attention_overrideable", &fused_attention_cpu);
  m.impl("_scaled_dot_product_fused_attention_overrideable_backward",
         &fused_attention_backward_cpu);
}

}  // namespace
}  // namespace torchtpu

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &torchtpu::fused_sdp_choice)
}  // namespace at::native
