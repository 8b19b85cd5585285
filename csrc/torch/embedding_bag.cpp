// nn.EmbeddingBag on the device, as CPU computes it (EmbeddingBag.cpp),
// from lowered ops: each index's bag from the offsets (searchsorted), its
// row gathered (index_select, which checks the indices), and the rows
// summed (index_add), averaged, or maxed (scatter_reduce) per bag; padding
// entries skip. The auxiliary outputs are CPU's: offset2bag (empty for a
// sum without padding_idx), bag_size (zeros for a sum), max_indices (the
// bag sizes for mean, each maximum's row for max, zeros for sum). The
// backward of the weight and of per_sample_weights likewise. sparse=True
// and unsupported dtypes take the ordinary path (the CPU fallback).
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include "common.h"

namespace torchtpu {
void tpu_boxed_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack);

namespace {

enum { kSum = 0, kMean = 1, kMax = 2 };

std::optional<at::Tensor> optional_tensor(const c10::IValue& v) {
  if (!v.isTensor() || !v.toTensor().defined()) return std::nullopt;
  return v.toTensor();
}

bool floating_on_device(const at::Tensor& t) {
  return t.defined() && t.device().is_privateuseone() && at::isFloatingType(t.scalar_type());
}

struct Bags {
  at::Tensor bag;    // [N] int64: each index's bag (-1: none)
  at::Tensor valid;  // [N] bool: counted (in a bag, not padding)
  int64_t count;     // B
};

Bags bags_of(const at::Tensor& indices, const at::Tensor& offsets, bool include_last_offset,
             int64_t padding_idx) {
  const int64_t n = indices.numel();
  const int64_t b = include_last_offset ? offsets.numel() - 1 : offsets.numel();
  at::Tensor starts = offsets.to(at::kLong).narrow(0, 0, std::max<int64_t>(b, 0)).contiguous();
  at::Tensor pos = at::arange(n, indices.options().dtype(at::kLong));
  at::Tensor bag = b > 0 ? at::searchsorted(starts, pos, /*out_int32=*/false, /*right=*/true) - 1
                         : at::full({n}, -1, pos.options());
  at::Tensor valid = bag >= 0;
  if (include_last_offset && b >= 0) valid = valid & (pos < offsets.to(at::kLong).narrow(0, b, 1));
  if (padding_idx >= 0) valid = valid & (indices != padding_idx);
  return {bag, valid, std::max<int64_t>(b, 0)};
}

// _embedding_bag / _embedding_bag_forward_only(weight, indices, offsets,
// scale_grad_by_freq, mode, sparse, per_sample_weights,
// include_last_offset, padding_idx) -> (output, offset2bag, bag_size,
// max_indices)
void embedding_bag_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  auto a = torch::jit::last(*stack, 9);
  const at::Tensor weight = a[0].toTensor(), indices = a[1].toTensor(), offsets = a[2].toTensor();
  const int64_t mode = a[4].toInt();
  const bool include_last = a[7].toBool();
  const int64_t padding_idx = a[8].toInt();
  const std::optional<at::Tensor> psw = optional_tensor(a[6]);
  if (!floating_on_device(weight) || indices.dim() != 1 || offsets.dim() != 1 || mode < kSum || mode > kMax ||
      (psw && (mode != kSum || !floating_on_device(*psw))) || !indices.device().is_privateuseone())
    return tpu_boxed_kernel(op, stack);
  const int64_t d = weight.size(1);
  Bags g = bags_of(indices, offsets, include_last, padding_idx);
  const auto lopt = indices.options().dtype(at::kLong);
  at::Tensor rows = weight.index_select(0, indices);  // [N, D]; checks the indices
  at::Tensor bag = g.bag.clamp_min(0);
  at::Tensor valid2 = g.valid.unsqueeze(1);
  at::Tensor zero = at::zeros({}, weight.options());
  at::Tensor bag_size = at::zeros({g.count}, lopt).index_add_(0, bag, g.valid.to(at::kLong));
  at::Tensor output, max_indices;
  if (mode == kMax) {
    at::Tensor lowest = at::full({}, -std::numeric_limits<double>::infinity(), weight.options());
    at::Tensor idx2 = bag.unsqueeze(1).expand({indices.numel(), d});
    at::Tensor best = at::full({g.count, d}, -std::numeric_limits<double>::infinity(), weight.options())
                          .scatter_reduce(0, idx2, at::where(valid2, rows, lowest), "amax", /*include_self=*/true);
    // each maximum's first occurrence in the bag, as CPU's strict > loop
    const int64_t n = indices.numel();
    at::Tensor pos = at::arange(n, lopt).unsqueeze(1).expand({n, d});
    at::Tensor hit = valid2 & (rows == best.index_select(0, bag));
    at::Tensor first = at::full({g.count, d}, n, lopt)
                           .scatter_reduce(0, idx2, at::where(hit, pos, at::full({}, n, lopt)), "amin", true);
    at::Tensor empty = (bag_size == 0).unsqueeze(1);
    at::Tensor padded = at::cat({indices.to(at::kLong), at::zeros({1}, lopt)});
    max_indices = at::where(empty, at::zeros({}, lopt), padded.index_select(0, first.reshape(-1)).reshape({g.count, d}));
    output = at::where(empty, zero, best);
  } else {
    // half types accumulate in float32 and round once, as CPU's kernel
    const bool half = weight.scalar_type() == at::kBFloat16 || weight.scalar_type() == at::kHalf;
    const auto acc = half ? weight.options().dtype(at::kFloat) : weight.options();
    at::Tensor r = half ? rows.to(at::kFloat) : rows;
    at::Tensor contrib = psw ? r * (half ? psw->to(at::kFloat) : *psw).unsqueeze(1) : r;
    at::Tensor z = at::zeros({}, acc);
    output = at::zeros({g.count, d}, acc).index_add_(0, bag, at::where(valid2, contrib, z));
    if (mode == kMean) {
      at::Tensor denom = bag_size.unsqueeze(1);
      output = at::where(denom > 0, output / denom.to(acc.dtype()), z);
      max_indices = bag_size.clone();
    } else {
      max_indices = at::zeros({g.count}, lopt);
    }
    output = output.to(weight.scalar_type());
  }
  at::Tensor offset2bag = mode == kSum && padding_idx < 0 ? at::empty({0}, lopt) : g.bag;
  if (mode == kSum) bag_size = at::zeros({g.count}, lopt);
  torch::jit::drop(*stack, 9);
  stack->emplace_back(output);
  stack->emplace_back(offset2bag);
  stack->emplace_back(bag_size);
  stack->emplace_back(max_indices);
}

// _embedding_bag_backward(grad, indices, offsets, offset2bag, bag_size,
// maximum_indices, num_weights, scale_grad_by_freq, mode, sparse,
// per_sample_weights, padding_idx) -> grad_weight [num_weights, D]
void embedding_bag_backward_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  auto a = torch::jit::last(*stack, 12);
  const at::Tensor grad = a[0].toTensor(), indices = a[1].toTensor(), offsets = a[2].toTensor();
  const at::Tensor bag_size = a[4].toTensor(), max_indices = a[5].toTensor();
  const int64_t num_weights = a[6].toInt(), mode = a[8].toInt(), padding_idx = a[11].toInt();
  const bool scale_by_freq = a[7].toBool(), sparse = a[9].toBool();
  const std::optional<at::Tensor> psw = optional_tensor(a[10]);
  if (sparse || !floating_on_device(grad) || indices.dim() != 1 || offsets.dim() != 1)
    return tpu_boxed_kernel(op, stack);
  const int64_t d = grad.size(1), n = indices.numel();
  const auto lopt = indices.options().dtype(at::kLong);
  at::Tensor gw = at::zeros({num_weights, d}, grad.options());
  at::Tensor idx = indices.to(at::kLong);
  if (mode == kMax) {
    at::Tensor keep = (bag_size > 0).unsqueeze(1).expand_as(max_indices);
    at::Tensor rows = at::where(keep, max_indices, at::zeros({}, lopt));
    at::Tensor cols = at::arange(d, lopt).unsqueeze(0).expand_as(max_indices);
    at::Tensor flat = (rows * d + cols).reshape(-1);
    gw = gw.reshape(-1).index_add_(0, flat, at::where(keep, grad, at::zeros({}, grad.options())).reshape(-1))
             .reshape({num_weights, d});
  } else {
    // include_last_offset does not reach the backward: the bags come from
    // the offsets as the forward had them (extra trailing offsets end bags)
    Bags g = bags_of(indices, offsets, /*include_last_offset=*/false, padding_idx);
    const int64_t b = grad.size(0);
    at::Tensor bag = g.bag.clamp(0, std::max<int64_t>(b - 1, 0));
    at::Tensor valid = g.valid & (g.bag < b);
    at::Tensor per = grad.index_select(0, bag);  // [N, D]
    if (mode == kMean) per = per / bag_size.index_select(0, bag).clamp_min(1).unsqueeze(1).to(grad.scalar_type());
    if (psw) per = per * psw->unsqueeze(1);
    if (scale_by_freq) {
      at::Tensor counts = at::zeros({num_weights}, lopt).index_add_(0, idx, valid.to(at::kLong));
      per = per / counts.index_select(0, idx).clamp_min(1).unsqueeze(1).to(grad.scalar_type());
    }
    gw.index_add_(0, idx, at::where(valid.unsqueeze(1), per, at::zeros({}, grad.options())));
  }
  (void)n;
  torch::jit::drop(*stack, 12);
  stack->emplace_back(gw);
}

// _embedding_bag_per_sample_weights_backward(grad, weight, indices,
// offsets, offset2bag, mode, padding_idx) -> [N]: grad[bag] . weight[index]
void per_sample_weights_backward_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  auto a = torch::jit::last(*stack, 7);
  const at::Tensor grad = a[0].toTensor(), weight = a[1].toTensor(), indices = a[2].toTensor(),
                   offsets = a[3].toTensor();
  const int64_t mode = a[5].toInt(), padding_idx = a[6].toInt();
  if (mode != kSum || !floating_on_device(grad) || !floating_on_device(weight) || indices.dim() != 1)
    return tpu_boxed_kernel(op, stack);
  Bags g = bags_of(indices, offsets, false, padding_idx);
  const int64_t b = grad.size(0);
  at::Tensor bag = g.bag.clamp(0, std::max<int64_t>(b - 1, 0));
  at::Tensor dot = (grad.index_select(0, bag) * weight.index_select(0, indices)).sum(1);
  at::Tensor r = at::where(g.valid & (g.bag < b), dot, at::zeros({}, grad.options()));
  torch::jit::drop(*stack, 7);
  stack->emplace_back(r);
}

// embedding_renorm_(self, indices, max_norm, norm_type): each row some
// index names whose norm exceeds max_norm is scaled by max_norm / (norm +
// 1e-7), as CPU's loop over the unique indices (rows nobody names keep).
void embedding_renorm_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  auto a = torch::jit::last(*stack, 4);
  at::Tensor self = a[0].toTensor();
  const at::Tensor indices = a[1].toTensor();
  if (!floating_on_device(self) || self.dim() != 2 || !indices.device().is_privateuseone())
    return tpu_boxed_kernel(op, stack);
  const double max_norm = a[2].toDouble(), norm_type = a[3].toDouble();
  TORCH_CHECK(indices.dim() == 1 || indices.numel() >= 0, "embedding_renorm_: indices must be a tensor");
  at::Tensor named = at::zeros({self.size(0)}, indices.options().dtype(at::kLong))
                         .index_add_(0, indices.reshape(-1).to(at::kLong),
                                     at::ones({indices.numel()}, indices.options().dtype(at::kLong))) > 0;
  at::Tensor norm = at::linalg_vector_norm(self, norm_type, {1}, /*keepdim=*/false);
  at::Tensor scale = at::where(named & (norm > max_norm), max_norm / (norm + 1e-7), at::ones({}, norm.options()));
  self.mul_(scale.unsqueeze(1));
  torch::jit::drop(*stack, 4);
  stack->emplace_back(self);
}

template <void (*kernel)(const c10::OperatorHandle&, torch::jit::Stack*)>
torch::CppFunction boxed() {
  return torch::CppFunction::makeFromBoxedFunction<kernel>();
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_embedding_bag", boxed<&embedding_bag_kernel>());
  m.impl("_embedding_bag_forward_only", boxed<&embedding_bag_kernel>());
  m.impl("_embedding_bag_backward", boxed<&embedding_bag_backward_kernel>());
  m.impl("_embedding_bag_per_sample_weights_backward", boxed<&per_sample_weights_backward_kernel>());
  m.impl("embedding_renorm_", boxed<&embedding_renorm_kernel>());
}

}  // namespace
}  // namespace torchtpu
