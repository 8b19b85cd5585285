// Tensor creation and metadata-only kernels: empty, views, resize_, set_.
// Views only touch sizes/strides/offset, so PyTorch's generic kernels serve;
// creation checks the dtype early so an unsupported one fails at the call.
#include <ATen/Context.h>
#include <ATen/EmptyTensor.h>
#include <ATen/native/ResizeCommon.h>
#include <ATen/native/TensorFactories.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/set_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "common.h"

namespace torchtpu {
namespace {

void check_options(std::optional<c10::Layout> layout,
                   std::optional<bool> pin_memory, c10::ScalarType dtype) {
  TORCH_CHECK(c10::layout_or_default(layout) == c10::Layout::Strided,
              "torchtpu: only strided tensors are supported on tpu");
  TORCH_CHECK(!c10::pinned_memory_or_default(pin_memory),
              "torchtpu: pin_memory applies to CPU tensors only");
  // A TypeError for dtypes we or the platform do not support, at the call.
  to_tpu_dtype_on_device(dtype);
}

// Under torch.use_deterministic_algorithms(True) (with
// torch.utils.deterministic.fill_uninitialized_memory, its default), CPU and
// CUDA fill the memory that empty, empty_strided and a growing resize_ hand
// out with NaN (floats, complex) or the dtype's largest value (integers,
// bool), so that reading it before writing shows. The same fills here, by
// PyTorch's own helpers (a fill_ on the device).
bool fill_uninitialized() {
  const auto& ctx = at::globalContext();
  return ctx.deterministicAlgorithms() && ctx.deterministicFillUninitializedMemory();
}

at::Tensor filled_if_deterministic(at::Tensor t) {
  if (fill_uninitialized() && t.numel() > 0) at::native::fill_empty_deterministic_(t);
  return t;
}

at::Tensor empty_memory_format(c10::IntArrayRef size,
                               std::optional<c10::ScalarType> dtype,
                               std::optional<c10::Layout> layout,
                               std::optional<c10::Device> device,
                               std::optional<bool> pin_memory,
                               std::optional<c10::MemoryFormat> memory_format) {
  auto type = c10::dtype_or_default(dtype);
  check_options(layout, pin_memory, type);
  const c10::DeviceGuard guard(c10::device_or_default(device));
  return filled_if_deterministic(at::detail::empty_generic(
      size, c10::GetAllocator(c10::kPrivateUse1),
      c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), type, memory_format));
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride,
                         std::optional<c10::ScalarType> dtype,
                         std::optional<c10::Layout> layout,
                         std::optional<c10::Device> device,
                         std::optional<bool> pin_memory) {
  auto type = c10::dtype_or_default(dtype);
  check_options(layout, pin_memory, type);
  const c10::DeviceGuard guard(c10::device_or_default(device));
  return filled_if_deterministic(at::detail::empty_strided_generic(
      size, stride, c10::GetAllocator(c10::kPrivateUse1),
      c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), type));
}

at::Tensor as_strided(const at::Tensor& self, c10::SymIntArrayRef size,
                      c10::SymIntArrayRef stride,
                      std::optional<c10::SymInt> storage_offset) {
  std::optional<int64_t> offset;
  if (storage_offset) offset = storage_offset->expect_int();
  return at::native::as_strided_tensorimpl(self, C10_AS_INTARRAYREF_SLOW(size),
                                           C10_AS_INTARRAYREF_SLOW(stride), offset);
}

at::Tensor view(const at::Tensor& self, c10::SymIntArrayRef size) {
  return at::native::view(self, C10_AS_INTARRAYREF_SLOW(size));
}

at::Tensor reshape_alias(const at::Tensor& self, c10::SymIntArrayRef size,
                         c10::SymIntArrayRef stride) {
  return at::native::_reshape_alias(self, C10_AS_INTARRAYREF_SLOW(size),
                                    C10_AS_INTARRAYREF_SLOW(stride));
}

// Grows the storage when the new geometry needs more bytes than it has.
void ensure_storage_fits(const at::Tensor& self) {
  auto* impl = self.unsafeGetTensorImpl();
  if (impl->numel() == 0) return;
  size_t needed = at::detail::computeStorageNbytes(
      impl->sizes(), impl->strides(), impl->itemsize(), impl->storage_offset());
  if (needed > impl->storage().nbytes())
    resize_storage_bytes(impl->storage(), needed);
}

const at::Tensor& resize_(const at::Tensor& self, c10::SymIntArrayRef size,
                          std::optional<c10::MemoryFormat> memory_format) {
  auto sizes = C10_AS_INTARRAYREF_SLOW(size);
  auto* impl = self.unsafeGetTensorImpl();
  for (auto s : sizes)
    TORCH_CHECK(s >= 0, "torchtpu: resize_ got a negative size ", sizes);
  if (impl->sizes() != sizes) impl->set_sizes_contiguous(sizes);
  if (memory_format && *memory_format != c10::MemoryFormat::Preserve)
    impl->empty_tensor_restride(*memory_format);
  int64_t old_nbytes = static_cast<int64_t>(impl->storage().nbytes());
  ensure_storage_fits(self);
  // The bytes the storage grew by, as CPU's resize_ fills them.
  if (fill_uninitialized() && static_cast<int64_t>(impl->storage().nbytes()) > old_nbytes)
    at::native::fill_resize_deterministic_(self, old_nbytes);
  return self;
}

at::Tensor& set_source_storage_offset(at::Tensor& self, c10::Storage source,
                                      int64_t storage_offset,
                                      c10::IntArrayRef size,
                                      c10::IntArrayRef stride) {
  TORCH_CHECK(storage_offset >= 0, "torchtpu: set_ got a negative storage "
              "offset ", storage_offset);
  TORCH_CHECK(size.size() == stride.size(), "torchtpu: set_ got ", size.size(),
              " sizes and ", stride.size(), " strides");
  TORCH_CHECK(source.device_type() == c10::DeviceType::PrivateUse1,
              "torchtpu: set_ needs a tpu storage, got one on ", source.device());
  auto* impl = self.unsafeGetTensorImpl();
  if (!impl->storage().is_alias_of(source))
    impl->set_storage_keep_dtype(std::move(source));
  impl->set_sizes_and_strides(size, stride, storage_offset);
  ensure_storage_fits(self);
  return self;
}

at::Tensor& set_source_storage(at::Tensor& self, c10::Storage source) {
  size_t itemsize = self.dtype().itemsize();
  int64_t numel = static_cast<int64_t>(source.nbytes() / itemsize);
  return set_source_storage_offset(self, std::move(source), 0, {numel}, {1});
}

at::Tensor& set_source_tensor(at::Tensor& self, const at::Tensor& source) {
  if (self.unsafeGetTensorImpl() == source.unsafeGetTensorImpl()) return self;
  return set_source_storage_offset(self, source.storage(), source.storage_offset(),
                                   source.sizes(), source.strides());
}

at::Tensor& set_empty(at::Tensor& self) {
  c10::Storage fresh(c10::Storage::use_byte_size_t(), 0,
                     c10::GetAllocator(c10::kPrivateUse1), /*resizable=*/true);
  return set_source_storage_offset(self, fresh, 0, {0}, {1});
}

// PyTorch's TensorImpl lists only its own dense backends as shallow-copy
// compatible, so Module.to("tpu") made new Parameters (untying shared
// weights, orphaning optimizers built before the move). PyTorch asks this
// op instead for PrivateUse1: dense strided tensors of the CPU and the tpu
// device swap contents through `param.data = moved`, as CPU and CUDA do.
bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  auto dense = [](const at::Tensor& t) {
    const c10::Device d = t.device();
    return t.layout() == c10::kStrided && (d.is_cpu() || d.is_privateuseone()) &&
           !t.is_nested() && !t.unsafeGetTensorImpl()->is_python_dispatch();
  };
  if (dense(self) && dense(from)) return true;
  return self.unsafeGetTensorImpl()->has_compatible_shallow_copy_type(from.key_set());
}

// where(cond, x, number) and x[i] = number make the number a tensor here.
// CPU's kernel rounds a float16 / bfloat16 one from double without the
// overflow check fill_ makes (70000 is inf), and checks other dtypes as
// fill_ does (256 into uint8 raises); PyTorch's composite is empty + fill_,
// which would refuse the half-precision overflow too.
at::Tensor scalar_tensor(const at::Scalar& s, std::optional<c10::ScalarType> dtype,
                         std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                         std::optional<bool> pin_memory) {
  auto type = c10::dtype_or_default(dtype);
  at::Tensor out = empty_memory_format({}, type, layout, device, pin_memory, std::nullopt);
  if (type == at::kHalf && !s.isComplex())
    return out.fill_(static_cast<double>(static_cast<at::Half>(s.toDouble())));
  if (type == at::kBFloat16 && !s.isComplex())
    return out.fill_(static_cast<double>(static_cast<at::BFloat16>(s.toDouble())));
  return out.fill_(s);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_has_compatible_shallow_copy_type", has_compatible_shallow_copy_type);
  m.impl("scalar_tensor", scalar_tensor);
  m.impl("empty.memory_format", empty_memory_format);
  m.impl("empty_strided", empty_strided);
  m.impl("as_strided", as_strided);
  m.impl("view", view);
  m.impl("_reshape_alias", reshape_alias);
  // Views PyTorch registers per backend (CPU, CUDA, Meta) rather than as
  // composites: without these they reached the CPU fallback and came back
  // as copies. Every other ATen view op is a composite over as_strided /
  // view (checked by tests/test_views.py::test_every_aten_view_op_has_a_kernel).
  m.impl("unfold", at::native::unfold);
  m.impl("view_as_real", at::native::view_as_real);
  m.impl("view_as_complex", at::native::view_as_complex);
  m.impl("resize_", resize_);
  m.impl("set_.source_Storage_storage_offset", set_source_storage_offset);
  m.impl("set_.source_Storage", set_source_storage);
  m.impl("set_.source_Tensor", set_source_tensor);
  m.impl("set_", set_empty);
}

}  // namespace
}  // namespace torchtpu
