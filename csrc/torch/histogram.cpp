// torch.histogram / torch.histogramdd on the device, as CPU composes them
// (Histogram.cpp, cpu/HistogramKernel.cpp), from lowered ops: the outer
// edges (the range, or the input's min and max: one host read, as CPU's
// aminmax), the edges by linspace, each value's bin by searchsorted
// (upper_bound - 1, the rightmost bin closed; values outside the edges or
// NaN are skipped), and the counts (or weights) by index_add. Density
// divides by the total and by each bin's width, as CPU. float32 and
// float64 only; other dtypes take the ordinary path (the CPU fallback,
// which raises CPU's dtype errors).
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <cmath>
#include <numeric>

#include "common.h"

namespace torchtpu {
void tpu_boxed_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack);

namespace {

bool on_device_dtype(const at::Tensor& t) {
  return t.defined() && t.device().is_privateuseone() &&
         (t.scalar_type() == at::kFloat || t.scalar_type() == at::kDouble);
}

// histogramdd_check_inputs
void check_inputs(const at::Tensor& input, at::TensorList bins, const std::optional<at::Tensor>& weight) {
  TORCH_CHECK(input.dim() >= 2, "torch.histogramdd: input tensor should have at least 2 dimensions, but got ",
              input.dim());
  const int64_t N = input.size(-1);
  TORCH_CHECK(static_cast<int64_t>(bins.size()) == N, "torch.histogramdd: expected ", N,
              " sequences of bin edges for a ", N, "-dimensional histogram but got ", bins.size());
  for (int64_t dim = 0; dim < N; dim++) {
    const at::Tensor& b = bins[dim];
    TORCH_CHECK(input.dtype() == b.dtype(), "torch.histogramdd: input tensor and bins tensors should",
                " have the same dtype, but got input with dtype ", input.dtype(), " and bins for dimension ",
                dim, " with dtype ", b.dtype());
    TORCH_CHECK(b.dim() == 1, "torch.histogramdd: bins tensor should have one dimension,", " but got ",
                b.dim(), " dimensions in the bins tensor for dimension ", dim);
    TORCH_CHECK(b.numel() > 0, "torch.histogramdd: bins tensor should have at least 1 element,", " but got ",
                b.numel(), " elements in the bins tensor for dimension ", dim);
  }
  if (weight.has_value() && weight->defined()) {
    TORCH_CHECK(input.dtype() == weight->dtype(), "torch.histogramdd: if weight tensor is provided,"
                " input tensor and weight tensor should have the same dtype, but got input(", input.dtype(),
                ")", ", and weight(", weight->dtype(), ")");
    auto in = input.sizes().vec();
    in.pop_back();
    auto ws = weight->sizes().vec();
    if (ws.empty()) ws = {1};
    TORCH_CHECK(in == ws, "torch.histogramdd: if weight tensor is provided it should have"
                " the same shape as the input tensor excluding its innermost dimension, but got input with shape ",
                input.sizes(), " and weight with shape ", weight->sizes());
  }
}

// select_outer_bin_edges for input [M, N].
std::pair<std::vector<double>, std::vector<double>> outer_edges(const at::Tensor& input,
                                                                std::optional<c10::ArrayRef<double>> range) {
  const int64_t N = input.size(-1);
  std::vector<double> lo(N, 0.), hi(N, 1.);
  if (range.has_value()) {
    TORCH_CHECK(static_cast<int64_t>(range->size()) == 2 * N, "torch.histogramdd: for a ", N,
                "-dimensional histogram", " range should have ", 2 * N, " elements, but got ", range->size());
    for (int64_t d = 0; d < N; d++) lo[d] = (*range)[2 * d], hi[d] = (*range)[2 * d + 1];
  } else if (input.numel() > 0) {
    auto [mn, mx] = at::aminmax(input, 0);
    at::Tensor both = at::stack({mn, mx}).to(at::kDouble).cpu();  // the one host read
    for (int64_t d = 0; d < N; d++) {
      // CPU reads them in the input dtype, then widens
      lo[d] = both[0][d].item<double>();
      hi[d] = both[1][d].item<double>();
    }
  }
  for (int64_t d = 0; d < N; d++) {
    TORCH_CHECK(std::isfinite(lo[d]) && std::isfinite(hi[d]), "torch.histogramdd: dimension ", d,
                "'s range [", lo[d], ", ", hi[d], "] is not finite");
    TORCH_CHECK(lo[d] <= hi[d], "torch.histogramdd: min should not exceed max, but got", " min ", lo[d],
                " max ", hi[d], " for dimension ", d);
    if (lo[d] == hi[d]) lo[d] -= 0.5, hi[d] += 0.5;
  }
  return {lo, hi};
}

std::vector<at::Tensor> edges_from_counts(const at::Tensor& input, at::IntArrayRef bin_ct,
                                          std::optional<c10::ArrayRef<double>> range) {
  TORCH_CHECK(input.dim() >= 2, "torch.histogramdd: input tensor should have at least 2 dimensions");
  const int64_t N = input.size(-1);
  TORCH_CHECK(static_cast<int64_t>(bin_ct.size()) == N, "torch.histogramdd: expected ", N,
              " sequences of bin edges for a ", N, "-dimensional histogram but got ", bin_ct.size());
  for (int64_t d = 0; d < N; d++)
    TORCH_CHECK(bin_ct[d] > 0, "torch.histogram(): bins must be > 0, but got ", bin_ct[d], " for dimension ",
                d);
  at::Tensor flat = input.reshape({-1, N});
  auto [lo, hi] = outer_edges(flat, range);
  std::vector<at::Tensor> edges;
  for (int64_t d = 0; d < N; d++) edges.push_back(at::linspace(lo[d], hi[d], bin_ct[d] + 1, input.options()));
  return edges;
}

// The histogram of input [..., N] over `edges` (N increasing 1-D tensors).
at::Tensor hist_from_edges(const at::Tensor& input, at::TensorList edges, const std::optional<at::Tensor>& weight,
                           bool density) {
  check_inputs(input, edges, weight);
  const int64_t N = input.size(-1);
  at::Tensor x = input.reshape({-1, N});
  const int64_t M = x.size(0);
  std::vector<int64_t> sizes;
  for (const at::Tensor& e : edges) sizes.push_back(e.numel() - 1);
  const int64_t total = std::accumulate(sizes.begin(), sizes.end(), int64_t{1}, std::multiplies<int64_t>());
  at::Tensor hist = at::zeros({total}, input.options());
  if (M > 0 && total > 0) {
    at::Tensor index = at::zeros({M}, input.options().dtype(at::kLong));
    at::Tensor keep = at::ones({M}, input.options().dtype(at::kBool));
    int64_t stride = total;
    for (int64_t d = 0; d < N; d++) {
      const at::Tensor e = edges[d].contiguous();
      const int64_t nb = sizes[d];
      stride /= nb;
      at::Tensor v = x.select(1, d).contiguous();
      keep = keep & (v >= e.narrow(0, 0, 1)) & (v <= e.narrow(0, nb, 1));
      at::Tensor pos = at::searchsorted(e, v, /*out_int32=*/false, /*right=*/true) - 1;
      pos = pos.clamp(0, nb - 1);  // the rightmost edge falls in the last bin
      index = index + pos * stride;
    }
    at::Tensor w = weight.has_value() && weight->defined() ? weight->reshape({M}) : at::ones({M}, input.options());
    w = at::where(keep, w, at::zeros({}, input.options()));
    hist.index_add_(0, index, w);
  }
  hist = hist.reshape(sizes);
  if (density) {
    hist = hist / hist.sum();
    for (int64_t d = 0; d < N; d++) {
      std::vector<int64_t> shape(N, 1);
      shape[d] = sizes[d];
      hist = hist / edges[d].diff().reshape(shape);
    }
  }
  return hist;
}

std::optional<c10::ArrayRef<double>> opt_range(const c10::IValue& v, std::vector<double>* keep) {
  if (v.isNone()) return std::nullopt;
  *keep = v.toDoubleVector();
  return c10::ArrayRef<double>(*keep);
}

std::optional<at::Tensor> opt_tensor(const c10::IValue& v) {
  if (v.isNone()) return std::nullopt;
  return v.toTensor();
}

// histogram.bin_ct(self, bins=100, *, range=None, weight=None, density=False) -> (hist, bin_edges)
void histogram_bin_ct(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  auto a = torch::jit::last(*stack, 5);
  const at::Tensor self = a[0].toTensor();
  if (!on_device_dtype(self)) return tpu_boxed_kernel(op, stack);
  std::vector<double> r;
  auto range = opt_range(a[2], &r);
  const int64_t bins = a[1].toInt();
  at::Tensor x = self.reshape({self.numel(), 1});
  auto weight = opt_tensor(a[3]);
  if (weight) weight = weight->reshape({self.numel()});
  std::vector<at::Tensor> edges = edges_from_counts(x, {bins}, range);
  at::Tensor hist = hist_from_edges(x, edges, weight, a[4].toBool());
  torch::jit::drop(*stack, 5);
  stack->emplace_back(hist);
  stack->emplace_back(edges[0]);
}

// histogram.bins_tensor(self, bins, *, weight=None, density=False) -> (hist, bin_edges)
void histogram_bins_tensor(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  auto a = torch::jit::last(*stack, 4);
  const at::Tensor self = a[0].toTensor(), bins = a[1].toTensor();
  if (!on_device_dtype(self) || !on_device_dtype(bins)) return tpu_boxed_kernel(op, stack);
  at::Tensor x = self.reshape({self.numel(), 1});
  auto weight = opt_tensor(a[2]);
  if (weight) weight = weight->reshape({self.numel()});
  at::Tensor hist = hist_from_edges(x, {bins}, weight, a[3].toBool());
  at::Tensor edges = bins.clone();
  torch::jit::drop(*stack, 4);
  stack->emplace_back(hist);
  stack->emplace_back(edges);
}

// The edges of (self, bins int[], range, ...) arguments.
std::vector<at::Tensor> edges_of_args(const at::Tensor& self, c10::ArrayRef<c10::IValue> a) {
  std::vector<double> r;
  auto range = opt_range(a[2], &r);
  return edges_from_counts(self, a[1].toIntVector(), range);
}

// _histogramdd_bin_edges(self, bins, *, range=None, weight=None, density=False) -> Tensor[]
void histogramdd_bin_edges(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  auto a = torch::jit::last(*stack, 5);
  const at::Tensor self = a[0].toTensor();
  if (!on_device_dtype(self)) return tpu_boxed_kernel(op, stack);
  std::vector<at::Tensor> edges = edges_of_args(self, a);
  torch::jit::drop(*stack, 5);
  stack->emplace_back(edges);
}

// _histogramdd_from_bin_cts(self, bins, *, range=None, weight=None, density=False) -> Tensor
void histogramdd_from_bin_cts(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  auto a = torch::jit::last(*stack, 5);
  const at::Tensor self = a[0].toTensor();
  if (!on_device_dtype(self)) return tpu_boxed_kernel(op, stack);
  std::vector<at::Tensor> edges = edges_of_args(self, a);
  at::Tensor hist = hist_from_edges(self, edges, opt_tensor(a[3]), a[4].toBool());
  torch::jit::drop(*stack, 5);
  stack->emplace_back(hist);
}

// _histogramdd_from_bin_tensors(self, bins, *, weight=None, density=False) -> Tensor
void histogramdd_from_bin_tensors(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  auto a = torch::jit::last(*stack, 4);
  const at::Tensor self = a[0].toTensor();
  const std::vector<at::Tensor> bins = a[1].toTensorVector();
  bool ok = on_device_dtype(self);
  for (const at::Tensor& b : bins) ok = ok && on_device_dtype(b);
  if (!ok) return tpu_boxed_kernel(op, stack);
  at::Tensor hist = hist_from_edges(self, bins, opt_tensor(a[2]), a[3].toBool());
  torch::jit::drop(*stack, 4);
  stack->emplace_back(hist);
}

template <void (*kernel)(const c10::OperatorHandle&, torch::jit::Stack*)>
torch::CppFunction boxed() {
  return torch::CppFunction::makeFromBoxedFunction<kernel>();
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("histogram.bin_ct", boxed<&histogram_bin_ct>());
  m.impl("histogram.bins_tensor", boxed<&histogram_bins_tensor>());
  m.impl("_histogramdd_bin_edges", boxed<&histogramdd_bin_edges>());
  m.impl("_histogramdd_from_bin_cts", boxed<&histogramdd_from_bin_cts>());
  m.impl("_histogramdd_from_bin_tensors", boxed<&histogramdd_from_bin_tensors>());
}

}  // namespace
}  // namespace torchtpu
