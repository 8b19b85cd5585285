// Meta kernels PyTorch lacks for ops the device lowers: the engine plans
// every lowered op's outputs on the meta device, so without one the op
// could only run on the CPU fallback. Each gives CPU's checks and output
// shapes.
#include <ATen/ATen.h>
#include <torch/library.h>

namespace torchtpu {
namespace {

// geqrf has no meta kernel in PyTorch, and the engine plans every
// lowered op's outputs on the meta device: CPU's checks and shapes (a in
// LAPACK's column-major layout, tau [..., min(m, n)]).
std::tuple<at::Tensor, at::Tensor> geqrf_meta(const at::Tensor& self) {
  TORCH_CHECK(self.dim() >= 2, "torch.geqrf: input must have at least 2 dimensions.");
  TORCH_CHECK(at::isFloatingType(self.scalar_type()) || at::isComplexType(self.scalar_type()),
              "torch.geqrf: Expected a floating point or complex tensor as input. Got ", self.scalar_type());
  std::vector<int64_t> t = self.sizes().vec();
  std::swap(t[t.size() - 1], t[t.size() - 2]);
  at::Tensor a = at::empty(t, self.options()).mT();
  std::vector<int64_t> tau(self.sizes().begin(), self.sizes().end() - 2);
  tau.push_back(std::min(self.size(-2), self.size(-1)));
  return {a, at::empty(tau, self.options())};
}

// fractional_max_pool3d_backward: the gradient has self's shape.
at::Tensor fractional_max_pool3d_backward_meta(const at::Tensor& grad_output, const at::Tensor& self,
                                               at::IntArrayRef kernel_size, at::IntArrayRef output_size,
                                               const at::Tensor& indices) {
  TORCH_CHECK(grad_output.dim() == self.dim(), "fractional_max_pool3d_backward(): grad_output and input must ",
              "have the same number of dimensions");
  return at::empty_like(self);
}

TORCH_LIBRARY_IMPL(aten, Meta, m) {
  m.impl("geqrf", geqrf_meta);
  m.impl("fractional_max_pool3d_backward", fractional_max_pool3d_backward_meta);
}

}  // namespace
}  // namespace torchtpu
