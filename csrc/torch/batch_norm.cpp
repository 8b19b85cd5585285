// _batch_norm_with_update / _batch_norm_no_update (what torch.compile's
// graphs and BatchNorm under functionalization call) on the device, as
// CPU's kernels compose them: native_batch_norm in training (updating the
// running stats in place) or in eval, and an empty uint8 reserve. The
// functional variant returns the new running stats instead of writing
// them. Dtypes the lowered native_batch_norm declines take its fallback.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include "common.h"

namespace torchtpu {
namespace {

at::Tensor reserve_of(const at::Tensor& input) { return at::empty({0}, input.options().dtype(at::kByte)); }

// CPU's kernels save the statistics in the input's dtype (bfloat16 /
// float16 too), where native_batch_norm's meta kernel keeps float32.
at::Tensor saved(const at::Tensor& stat, const at::Tensor& input) {
  return stat.scalar_type() == input.scalar_type() ? stat : stat.to(input.scalar_type());
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> with_update(
    const at::Tensor& input, const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
    at::Tensor& running_mean, at::Tensor& running_var, double momentum, double eps) {
  auto [out, mean, invstd] =
      at::native_batch_norm(input, weight, bias, running_mean, running_var, /*training=*/true, momentum, eps);
  return {out, saved(mean, input), saved(invstd, input), reserve_of(input)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> with_update_functional(
    const at::Tensor& input, const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
    const at::Tensor& running_mean, const at::Tensor& running_var, double momentum, double eps) {
  at::Tensor rm = running_mean.clone(), rv = running_var.clone();
  auto [out, mean, invstd] = at::native_batch_norm(input, weight, bias, rm, rv, /*training=*/true, momentum, eps);
  return {out, saved(mean, input), saved(invstd, input), reserve_of(input), rm, rv};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> no_update(
    const at::Tensor& input, const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
    const std::optional<at::Tensor>& running_mean, const std::optional<at::Tensor>& running_var, double momentum,
    double eps) {
  // CPU: training when there are no running stats to use
  const bool train = !running_mean.has_value() || !running_mean->defined();
  auto [out, mean, invstd] =
      at::native_batch_norm(input, weight, bias, running_mean, running_var, train, momentum, eps);
  if (!train) {  // CPU's eval kernel saves no statistics
    mean = at::empty({0}, mean.options());
    invstd = at::empty({0}, invstd.options());
  }
  return {out, saved(mean, input), saved(invstd, input), reserve_of(input)};
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_batch_norm_with_update", with_update);
  m.impl("_batch_norm_with_update_functional", with_update_functional);
  m.impl("_batch_norm_no_update", no_update);
}

}  // namespace
}  // namespace torchtpu
