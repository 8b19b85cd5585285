// The inference fast path of nn.TransformerEncoderLayer and
// nn.MultiheadAttention (eval, no grad) calls two fused ATen ops,
// _transformer_encoder_layer_fwd and _native_multi_head_attention, whose
// only kernels are CPU/CUDA/nested ones: on tpu they took the CPU fallback,
// a host round trip per layer. Here they are composed, for tpu tensors, of
// ops the lowering table runs on the device, step for step as PyTorch's CPU
// kernels compute them (transformers/attention.cpp, transformer.cpp): the
// packed qkv projection, q = (q + q_bias) / sqrt(head_dim), scores softmaxed
// under the merged mask (read as bool, as CPU does: a float mask's nonzeros
// mask out; a fully masked row is NaN, as CPU's _masked_softmax gives), the
// output projection, residuals and layer norms.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <cmath>
#include <limits>
#include <optional>
#include <tuple>

namespace torchtpu {
namespace {

// CPU's masked_softmax over the last dim. mask_type 0: an (L, L) attention
// mask; 1: a (B, L) key padding mask; 2 (or any mask that is not 2-D over
// 4-D scores): the scores' shape. True = masked out.
at::Tensor masked_softmax(const at::Tensor& scores, const std::optional<at::Tensor>& mask_in,
                          std::optional<int64_t> mask_type) {
  if (!mask_in || !mask_in->defined()) return at::softmax(scores, -1);
  at::Tensor mask = mask_in->to(at::kBool);
  int64_t type = mask_type.value_or(-1);
  if (mask.dim() != 2 || scores.dim() != 4) type = 2;
  if (type == 2) {
    TORCH_CHECK(scores.sizes() == mask.sizes(),
                "For mask_type == 2 mask shape should match input shape");
  } else if (type == 1) {
    TORCH_CHECK(scores.size(0) == mask.size(0) && scores.size(2) == mask.size(1),
                "For mask_type == 1 mask shape should be (B, L)");
    mask = mask.view({scores.size(0), 1, 1, scores.size(2)});
  } else if (type == 0) {
    TORCH_CHECK(scores.size(2) == mask.size(0) && scores.size(2) == mask.size(1),
                "For mask_type == 0 mask shape should be (L, L)");
    mask = mask.view({1, 1, scores.size(2), scores.size(2)});
  }
  mask = mask.expand(scores.sizes());
  // A row with every key masked is NaN, as CPU's kernel gives.
  return at::softmax(scores.masked_fill(mask, -std::numeric_limits<double>::infinity()), -1);
}

std::tuple<at::Tensor, at::Tensor> native_multi_head_attention(
    const at::Tensor& query, const at::Tensor& key, const at::Tensor& value, int64_t embed_dim,
    int64_t num_head, const at::Tensor& qkv_weight, const at::Tensor& qkv_bias,
    const at::Tensor& proj_weight, const at::Tensor& proj_bias, const std::optional<at::Tensor>& mask,
    bool need_weights, bool average_attn_weights, std::optional<int64_t> mask_type) {
  const int64_t D = embed_dim;
  // CPU's argument checks, in its order and words.
  TORCH_CHECK(query.dim() == 3, "expected 3-D `query`, got ", query.dim(), "-D tensor");
  TORCH_CHECK(query.size(2) == embed_dim, "passed-in embed_dim ", embed_dim,
              " didn't match last dim of query ", query.size(2));
  TORCH_CHECK(key.dim() == 3, "expected 3-D `key`, got ", key.dim(), "-D tensor");
  TORCH_CHECK(value.dim() == 3, "expected 3-D `value`, got ", value.dim(), "-D tensor");
  TORCH_CHECK(query.sizes() == key.sizes() && key.sizes() == value.sizes(),
              "expected `query`/`key`/`value` shapes to match");
  TORCH_CHECK(qkv_weight.dim() == 2, "expected 2-D `qkv_weight`, got ", qkv_weight.dim(), "-D tensor");
  TORCH_CHECK(D * 3 == qkv_weight.size(0), "expected `qkv_weight` first dim to be 3x embed_dim");
  TORCH_CHECK(D == qkv_weight.size(1), "expected `qkv_weight` second dim to be embed_Dim");
  TORCH_CHECK(qkv_bias.dim() == 1, "expected 1-D `qkv_bias`, got ", qkv_bias.dim(), "-D tensor");
  TORCH_CHECK(qkv_bias.size(0) == 3 * D,
              "expected `qkv_bias` first dim and first dim of query to be equal");
  TORCH_CHECK(D % num_head == 0, "`embed_dim` must divide evenly by `num_heads`");
  const int64_t B = query.size(0), T = query.size(1), dh = D / num_head;
  // [B, T, 3D]: one product for self-attention, else per projection.
  at::Tensor qkv;
  if (key.is_same(value) && query.is_same(key)) {
    qkv = at::matmul(query, qkv_weight.t());
  } else {
    auto w = qkv_weight.split(D, 0);
    qkv = at::cat({at::matmul(query, w[0].t()), at::matmul(key, w[1].t()), at::matmul(value, w[2].t())}, 2);
  }
  if (qkv.numel() == 0) return std::make_tuple(at::empty_like(query), at::Tensor());
  // 3 x [B, heads, T, dh]; CPU scales by its scalar type's 1 / sqrt(dh).
  at::Tensor parts = (qkv + qkv_bias).view({B, T, 3, num_head, dh}).permute({2, 0, 3, 1, 4});
  const double inv_sqrt = 1.0 / std::sqrt(static_cast<double>(static_cast<float>(dh)));
  at::Tensor q = parts[0] * static_cast<double>(static_cast<float>(inv_sqrt));
  at::Tensor k = parts[1], v = parts[2];
  at::Tensor weights = masked_softmax(at::matmul(q, k.transpose(-1, -2)), mask, mask_type);
  at::Tensor ctx = at::matmul(weights, v);  // [B, heads, T, dh]
  at::Tensor proj = at::linear(ctx.permute({0, 2, 1, 3}).reshape({B, T, D}), proj_weight, proj_bias);
  if (!need_weights) return std::make_tuple(proj, at::Tensor());
  if (average_attn_weights) weights = weights.sum(1) / num_head;
  return std::make_tuple(proj, weights);
}

at::Tensor transformer_encoder_layer_fwd(
    const at::Tensor& src, int64_t embed_dim, int64_t num_heads, const at::Tensor& qkv_weight,
    const at::Tensor& qkv_bias, const at::Tensor& proj_weight, const at::Tensor& proj_bias,
    bool use_gelu, bool norm_first, double eps, const at::Tensor& norm_weight_1,
    const at::Tensor& norm_bias_1, const at::Tensor& norm_weight_2, const at::Tensor& norm_bias_2,
    const at::Tensor& ffn_weight_1, const at::Tensor& ffn_bias_1, const at::Tensor& ffn_weight_2,
    const at::Tensor& ffn_bias_2, const std::optional<at::Tensor>& mask,
    std::optional<int64_t> mask_type) {
  TORCH_CHECK(!src.is_nested(), "torchtpu: nested tensors are not supported");
  if (src.numel() == 0) return src.clone();
  auto norm = [&](const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
    return at::layer_norm(x, {embed_dim}, w, b, eps);
  };
  at::Tensor x = norm_first ? norm(src, norm_weight_1, norm_bias_1) : src;
  x = std::get<0>(native_multi_head_attention(x, x, x, embed_dim, num_heads, qkv_weight, qkv_bias,
                                              proj_weight, proj_bias, mask, false, true, mask_type));
  x = x + src;
  if (!norm_first) x = norm(x, norm_weight_1, norm_bias_1);
  const at::Tensor residual = x;
  if (norm_first) x = norm(x, norm_weight_2, norm_bias_2);
  // CPU: addmm then gelu (exact) or relu, then addmm.
  TORCH_CHECK(x.dim() == 3, "batched input size should be 3");
  at::Tensor h = at::linear(x, ffn_weight_1, ffn_bias_1);
  h = use_gelu ? at::gelu(h) : at::relu(h);
  x = at::linear(h, ffn_weight_2, ffn_bias_2) + residual;
  if (!norm_first) x = norm(x, norm_weight_2, norm_bias_2);
  return x;
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_native_multi_head_attention", native_multi_head_attention);
  m.impl("_transformer_encoder_layer_fwd", transformer_encoder_layer_fwd);
}

}  // namespace
}  // namespace torchtpu
