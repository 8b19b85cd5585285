// det, slogdet, solve and inv on the device, as CPU PyTorch composes them
// from an LU factorization (BatchLinearAlgebra.cpp, LinearAlgebra.cpp).
// det and slogdet return (and their backward formulas read) the LU and
// pivots of A^T when A is contiguous and real, else of A (checked against
// torch 2.13's CPU: its solve always factorizes A), so which matrix is
// factorized depends on A's layout. A lowering sees values, not layouts;
// these kernels see the tensor, decide as CPU does, and call the
// lowered linalg_lu_factor_ex / linalg_lu_solve (csrc/core/lower/factor.c).
// CPU's meta kernel runs first on meta copies, so bad input raises CPU's
// error. Complex, half and other dtypes the factor family declines take
// the ordinary path (the CPU fallback, which raises CPU's dtype errors).
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include "common.h"

namespace torchtpu {
void tpu_boxed_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack);

namespace {

bool factorable(const at::Tensor& A) {
  return A.defined() && A.device().is_privateuseone() &&
         (A.scalar_type() == at::kFloat || A.scalar_type() == at::kDouble);
}

at::Tensor meta_of(const at::Tensor& t) {
  return at::empty_strided(t.sizes(), t.strides(), t.options().device(at::kMeta));
}

// LU of A as CPU's det/slogdet/solve take it.
std::tuple<at::Tensor, at::Tensor, at::Tensor> cpu_lu(const at::Tensor& A) {
  return at::linalg_lu_factor_ex(A.is_contiguous() ? A.mT() : A);
}

// sign of the permutation the pivots make: (-1)^#{i : pivots[i] != i + 1}.
at::Tensor lu_det_P(const at::Tensor& pivots) {
  return (at::arange(1, pivots.size(-1) + 1, pivots.options()) != pivots)
      .sum(-1, false, at::kLong)
      .fmod_(2)
      .mul_(-2)
      .add_(1);
}

void push3(torch::jit::Stack* stack, at::Tensor a, at::Tensor b, at::Tensor c) {
  stack->emplace_back(std::move(a));
  stack->emplace_back(std::move(b));
  stack->emplace_back(std::move(c));
}

// _linalg_det(A) -> (det, LU, pivots)
void det_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const at::Tensor A = stack->back().toTensor();
  if (!factorable(A)) return tpu_boxed_kernel(op, stack);
  at::_ops::_linalg_det::call(meta_of(A));
  auto [LU, pivots, info] = cpu_lu(A);
  at::Tensor det = at::mul(lu_det_P(pivots), at::prod(LU.diagonal(0, -2, -1), -1));
  torch::jit::drop(*stack, 1);
  push3(stack, det, LU, pivots);
}

// _linalg_slogdet(A) -> (sign, logabsdet, LU, pivots)
void slogdet_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const at::Tensor A = stack->back().toTensor();
  if (!factorable(A)) return tpu_boxed_kernel(op, stack);
  at::_ops::_linalg_slogdet::call(meta_of(A));
  auto [LU, pivots, info] = cpu_lu(A);
  at::Tensor diag = LU.diagonal(0, -2, -1);
  at::Tensor sign = at::mul(diag.sgn().prod(-1), lu_det_P(pivots));
  at::Tensor logabsdet = diag.abs().log_().sum(-1);
  torch::jit::drop(*stack, 1);
  stack->emplace_back(sign);
  push3(stack, logabsdet, LU, pivots);
}

// CPU's linalg_solve_is_vector_rhs.
bool vector_rhs(const at::Tensor& LU, const at::Tensor& B) {
  auto shape = LU.sizes().slice(0, LU.dim() - 1);
  return B.dim() == 1 || (LU.dim() - 1 == B.dim() && B.sizes() == shape);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> solve(const at::Tensor& A, const at::Tensor& B,
                                                                 bool left, bool check_errors) {
  auto [LU, pivots, info] = at::linalg_lu_factor_ex(A);
  if (check_errors) at::_linalg_check_errors(info, "torch.linalg.solve_ex", A.dim() == 2);
  const bool vector_case = vector_rhs(LU, B);
  at::Tensor X = at::linalg_lu_solve(LU, pivots, vector_case ? B.unsqueeze(-1) : B, left, /*adjoint=*/false);
  if (vector_case) X = X.squeeze(-1);
  return {X, LU, pivots, info};
}

// _linalg_solve_ex(A, B, *, left=True, check_errors=False) -> (result, LU, pivots, info)
void solve_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  auto args = torch::jit::last(*stack, 4);
  const at::Tensor A = args[0].toTensor(), B = args[1].toTensor();
  const bool left = args[2].toBool(), check_errors = args[3].toBool();
  if (!factorable(A) || !factorable(B)) return tpu_boxed_kernel(op, stack);
  at::_ops::_linalg_solve_ex::call(meta_of(A), meta_of(B), left, check_errors);
  auto [X, LU, pivots, info] = solve(A, B, left, check_errors);
  torch::jit::drop(*stack, 4);
  stack->emplace_back(X);
  push3(stack, LU, pivots, info);
}

// linalg_inv_ex(A, *, check_errors=False) -> (inverse, info): A X = I.
void inv_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  auto args = torch::jit::last(*stack, 2);
  const at::Tensor A = args[0].toTensor();
  const bool check_errors = args[1].toBool();
  if (!factorable(A)) return tpu_boxed_kernel(op, stack);
  at::_ops::linalg_inv_ex::call(meta_of(A), check_errors);
  at::Tensor eye = at::eye(A.size(-1), A.options()).expand(A.sizes());
  auto [X, LU, pivots, info] = solve(A, eye, /*left=*/true, /*check_errors=*/false);
  if (check_errors) at::_linalg_check_errors(info, "linalg.inv_ex", A.dim() == 2);
  torch::jit::drop(*stack, 2);
  stack->emplace_back(X);
  stack->emplace_back(info);
}

// cholesky(A, upper=False): CPU's old API is linalg_cholesky_ex, then an
// error for a matrix that is not positive-definite (its info read).
void cholesky_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  auto args = torch::jit::last(*stack, 2);
  const at::Tensor A = args[0].toTensor();
  const bool upper = args[1].toBool();
  if (!factorable(A)) return tpu_boxed_kernel(op, stack);
  TORCH_WARN_ONCE(
      "torch.cholesky is deprecated in favor of torch.linalg.cholesky and will be ",
      "removed in a future PyTorch release.\n",
      "L = torch.cholesky(A)\n",
      "should be replaced with\n",
      "L = torch.linalg.cholesky(A)\n",
      "and\n"
      "U = torch.cholesky(A, upper=True)\n",
      "should be replaced with\n",
      "U = torch.linalg.cholesky(A).mH\n"
      "This transform will produce equivalent results for all valid (symmetric positive definite) inputs.");
  at::_ops::cholesky::call(meta_of(A), upper);
  auto [L, info] = at::linalg_cholesky_ex(A, upper, /*check_errors=*/false);
  at::_linalg_check_errors(info, "cholesky", A.dim() == 2);
  torch::jit::drop(*stack, 2);
  stack->emplace_back(L);
}

// linalg_lstsq(A, B, rcond=None, *, driver=None) -> (solution, residuals,
// rank, singular_values), as CPU's drivers define the outputs (gelsy by
// default): the minimum-norm solution from the (lowered) SVD with
// singular values below rcond * max(S) dropped, which is what gelsy,
// gelsd and gelss compute and what gels computes for a full-rank A; rank
// except for gels; singular values for gelsd and gelss; residuals (the
// squared error per column) for a tall A except with gelsy, and with
// gelsd / gelss only when every matrix has full rank (read back: the
// result's shape depends on it, as on the CPU).
void lstsq_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  auto args = torch::jit::last(*stack, 4);
  const at::Tensor A = args[0].toTensor(), B = args[1].toTensor();
  if (!factorable(A) || !factorable(B)) return tpu_boxed_kernel(op, stack);
  const std::string driver = args[3].isNone() ? "gelsy" : args[3].toStringRef();
  TORCH_CHECK(driver == "gels" || driver == "gelsy" || driver == "gelsd" || driver == "gelss",
              "torch.linalg.lstsq: parameter `driver` should be one of (gels, gelsy, gelsd, gelss)");
  TORCH_CHECK(A.dim() >= 2, "torch.linalg.lstsq: input must have at least 2 dimensions.");
  TORCH_CHECK(B.dim() >= 1, "torch.linalg.lstsq: other must have at least 1 dimension.");
  TORCH_CHECK(A.scalar_type() == B.scalar_type(), "torch.linalg.lstsq: Expected input and other to have the same dtype, ",
              "but got input with dtype ", A.scalar_type(), " and other with dtype ", B.scalar_type());
  const int64_t dim_diff = A.dim() - B.dim();
  TORCH_CHECK(0 <= dim_diff && dim_diff <= 1,
              "torch.linalg.lstsq: input.dim() must be greater or equal to other.dim() and (input.dim() - other.dim()) <= 1");
  const bool vector_case = dim_diff == 1;
  const at::Tensor rhs = vector_case ? B.unsqueeze(-1) : B;
  TORCH_CHECK(A.size(-2) == rhs.size(-2), vector_case
                  ? "torch.linalg.lstsq: input.size(-2) should match other.size(-1) when other is a vector"
                  : "torch.linalg.lstsq: input.size(-2) should match other.size(-2)");
  const int64_t m = A.size(-2), n = A.size(-1);
  const double eps = A.scalar_type() == at::kFloat ? 1.1920928955078125e-07 : 2.220446049250313e-16;
  const double rcond = args[2].isNone() ? eps * static_cast<double>(std::max(m, n)) : args[2].toDouble();
  auto [U, S, Vh] = at::linalg_svd(A, /*full_matrices=*/false);
  at::Tensor keep = S > S.amax(-1, /*keepdim=*/true) * rcond;
  if (S.size(-1) == 0) keep = S > 0;
  at::Tensor inv = at::where(keep, S.reciprocal(), at::zeros({}, S.options()));
  at::Tensor X = at::matmul(Vh.mT(), inv.unsqueeze(-1) * at::matmul(U.mT(), rhs));
  at::Tensor rank = keep.sum(-1);
  at::Tensor empty = at::empty({0}, A.options());
  at::Tensor residuals = empty;
  bool want_residuals = m > n && driver != "gelsy";
  if (want_residuals && (driver == "gelsd" || driver == "gelss"))
    want_residuals = (rank == n).all().item<bool>();
  if (want_residuals) residuals = (at::matmul(A, X) - rhs).pow(2).sum(-2);
  if (vector_case) X = X.squeeze(-1);
  torch::jit::drop(*stack, 4);
  stack->emplace_back(X);
  stack->emplace_back(residuals);
  stack->emplace_back(driver == "gels" ? at::empty({0}, A.options().dtype(at::kLong)) : rank);
  stack->emplace_back(driver == "gelsd" || driver == "gelss" ? S : empty);
}

template <void (*kernel)(const c10::OperatorHandle&, torch::jit::Stack*)>
torch::CppFunction boxed() {
  return torch::CppFunction::makeFromBoxedFunction<kernel>();
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_linalg_det", boxed<&det_kernel>());
  m.impl("_linalg_slogdet", boxed<&slogdet_kernel>());
  m.impl("_linalg_solve_ex", boxed<&solve_kernel>());
  m.impl("linalg_inv_ex", boxed<&inv_kernel>());
  m.impl("cholesky", boxed<&cholesky_kernel>());
  m.impl("linalg_lstsq", boxed<&lstsq_kernel>());
}

}  // namespace
}  // namespace torchtpu
