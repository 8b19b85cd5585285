// Autocast for "tpu" (torch.autocast("tpu", dtype=torch.bfloat16)): PyTorch's
// own op lists and policies, registered for the AutocastPrivateUse1 key as
// CUDA registers them for AutocastCUDA: matmuls and convolutions run in the
// autocast dtype; reductions, softmax, norms, losses and pointwise
// transcendental ops in float32; ops mixing dtypes promote.
#include <ATen/autocast_mode.h>
#include <torch/library.h>

// The op-list macros name ATen types unqualified: they expand inside
// at::autocast, as PyTorch's own registrations do.
namespace at {
namespace autocast {
namespace {

// Every other op passes through autocast unchanged.
TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) { m.fallback(torch::CppFunction::makeFallthrough()); }

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
#define TPU_LOWER_PRECISION_FP(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
  AT_FORALL_LOWER_PRECISION_FP(TPU_LOWER_PRECISION_FP)
#undef TPU_LOWER_PRECISION_FP
#define TPU_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
  AT_FORALL_FP32(TPU_FP32)
#undef TPU_FP32
#define TPU_FP32_SET_OPT_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
  AT_FORALL_FP32_SET_OPT_DTYPE(TPU_FP32_SET_OPT_DTYPE)
#undef TPU_FP32_SET_OPT_DTYPE
  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE)
#define TPU_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)
  AT_FORALL_PROMOTE(TPU_PROMOTE)
#undef TPU_PROMOTE
}

}  // namespace
}  // namespace autocast
}  // namespace at
