// Host <-> device copies and reading scalars.
//
// A write that covers its whole storage densely uploads straight from the
// source's memory (any strides: PJRT takes byte strides). A write into part
// of a storage (a view) uploads a dense tensor and writes the view from it
// on the device. Between tpu devices the plugin copies device to device.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "common.h"

extern "C" {
#include "core/metrics.h"
}

namespace torchtpu {
void device_copy(const at::Tensor& dst, const at::Tensor& src);

namespace {

// The bytes of `t`'s storage that its elements span, as a CPU uint8 tensor,
// and the element offset where that span starts. Only those bytes move
// (x[5].item() of a 512 MiB tensor reads 4 bytes, not the storage).
struct SpanImage {
  at::Tensor image;
  int64_t first;  // element offset of image[0] in the storage
};

SpanImage read_span_image(const at::Tensor& t) {
  check_pending_index_errors();
  tpu_storage_t* storage = storage_of(t.storage());
  int64_t item = static_cast<int64_t>(t.itemsize());
  int64_t first = t.storage_offset(), last = t.storage_offset();
  for (int64_t d = 0; d < t.dim(); d++) last += (t.size(d) - 1) * t.stride(d);
  if (t.numel() == 0) last = first - 1;
  size_t nbytes = static_cast<size_t>((last - first + 1) * item);
  at::Tensor image = at::empty({static_cast<int64_t>(nbytes)},
                               at::TensorOptions().dtype(at::kByte));
  TPU_CHECK(tpu_storage_read_range(storage, static_cast<size_t>(first * item),
                                   image.data_ptr(), nbytes),
            "copying a tensor to the host");
  tpu_metrics_add("bytes_to_host", static_cast<int64_t>(nbytes));
  return {image, first};
}

// A CPU tensor aliasing `t`'s elements inside a host image of its span.
at::Tensor host_view(const at::Tensor& t, const SpanImage& span) {
  at::Tensor image = span.image;
  auto* base = static_cast<uint8_t*>(image.data_ptr()) +
               (t.storage_offset() - span.first) * static_cast<int64_t>(t.itemsize());
  return at::from_blob(base, t.sizes(), t.strides(), [image](void*) {},
                       at::TensorOptions().dtype(t.scalar_type()));
}

bool covers_storage_densely(const at::Tensor& t) {
  return t.storage_offset() == 0 && t.is_non_overlapping_and_dense() &&
         static_cast<size_t>(t.numel()) * t.itemsize() == t.storage().nbytes();
}

// Writes CPU tensor `src` (any dtype, broadcastable) into tpu tensor `dst`.
void write_from_host(const at::Tensor& dst, const at::Tensor& src_any) {
  tpu_dtype_t dtype = to_tpu_dtype(dst.scalar_type());
  if (dst.numel() == 0) return;
  at::Tensor src = src_any.to(dst.scalar_type()).resolve_conj().resolve_neg();
  src = src.expand(dst.sizes());
  if (!covers_storage_densely(dst)) {
    // Upload whole, then write it through dst's view on the device.
    at::Tensor staged = at::empty(dst.sizes(), dst.options());
    write_from_host(staged, src);
    device_copy(dst, staged);
    return;
  }
  // Storages hold flat buffers in dst's memory order: pack src that way
  // (free when it already is) and upload it as one run.
  int rank = static_cast<int>(dst.dim());
  std::vector<int64_t> order(rank);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return dst.stride(a) > dst.stride(b);
  });
  at::Tensor packed = src.permute(order).contiguous();
  TPU_CHECK(tpu_storage_write_bytes(storage_of(dst.storage()), packed.const_data_ptr(), dtype),
            "copying a tensor to the tpu device");
  tpu_metrics_add("bytes_to_device", static_cast<int64_t>(packed.nbytes()));
}

// Reads tpu tensor `src` into CPU tensor `dst` (converting dtype, broadcasting).
void read_to_host(const at::Tensor& src, const at::Tensor& dst) {
  check_pending_index_errors();
  if (dst.numel() == 0) return;
  to_tpu_dtype(src.scalar_type());
  if (covers_storage_densely(src) && src.is_contiguous() && dst.is_contiguous() &&
      dst.scalar_type() == src.scalar_type() && dst.sizes() == src.sizes()) {
    size_t nbytes = src.storage().nbytes();
    TPU_CHECK(tpu_storage_read_bytes(storage_of(src.storage()), dst.data_ptr(),
                                     nbytes),
              "copying a tensor to the host");
    tpu_metrics_add("bytes_to_host", static_cast<int64_t>(nbytes));
    return;
  }
  dst.copy_(host_view(src, read_span_image(src)));
}

// tpu:i -> tpu:j: the plugin copies the bytes device to device (nothing
// staged through host memory, as CUDA's peer copies). The source is first
// made a dense tensor of dst's dtype and shape on its own device (an eager
// op when it is a view, another dtype or broadcast), the copy lands in a
// dense tensor on dst's device, and a dst view is written from that there.
void copy_between_devices(const at::Tensor& dst, const at::Tensor& self) {
  if (dst.numel() == 0) return;
  at::Tensor src = self.to(dst.scalar_type()).expand(dst.sizes());
  if (!(covers_storage_densely(src) && src.is_contiguous()))
    src = src.clone(at::MemoryFormat::Contiguous);
  bool direct = covers_storage_densely(dst) && dst.is_contiguous();
  at::Tensor landing = direct ? dst : at::empty(dst.sizes(), dst.options());
  TPU_CHECK(tpu_storage_copy_to_device(storage_of(landing.storage()), storage_of(src.storage())),
            "copying a tensor between tpu devices");
  if (!direct) device_copy(dst, landing);
}

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst,
                     bool non_blocking) {
  TORCH_CHECK(self.defined() && dst.defined(),
              "torchtpu: copy_ needs defined tensors");
  check_not_forked();
  // The conjugate and negative bits are _copy_from's to honour. A bit on
  // dst: write its raw (bit-free) alias with the source toggled alike. A bit
  // on the source: copy its raw values, then apply the bit to dst.
  if (dst.is_conj()) return copy_from(self.conj(), dst.conj(), non_blocking), dst;
  if (dst.is_neg()) return copy_from(self._neg_view(), dst._neg_view(), non_blocking), dst;
  if (self.is_conj() || self.is_neg()) {
    at::Tensor raw = self.is_conj() ? self.conj() : self;
    if (raw.is_neg()) raw = raw._neg_view();
    copy_from(raw, dst, non_blocking);
    if (self.is_conj()) dst.conj_physical_();
    if (self.is_neg()) dst.neg_();
    return dst;
  }
  bool src_tpu = self.device().is_privateuseone();
  bool dst_tpu = dst.device().is_privateuseone();
  if (dst_tpu && !src_tpu) {
    TORCH_CHECK(self.device().is_cpu(), "torchtpu: cannot copy from ",
                self.device(), " to tpu; go through the CPU");
    write_from_host(dst, self);
  } else if (src_tpu && !dst_tpu) {
    TORCH_CHECK(dst.device().is_cpu(), "torchtpu: cannot copy from tpu to ",
                dst.device(), "; go through the CPU");
    read_to_host(self, dst);
  } else if (self.device() == dst.device()) {
    device_copy(dst, self);
  } else {
    copy_between_devices(dst, self);
  }
  return dst;
}

// The CPU fallback's write-back of an out= argument the CPU kernel resized:
// the device tensor takes the host result's layout too, as CPU's resized
// out= follows its inputs' (special_bessel_j0(x.t(), out=empty) is
// column-major there).
at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  if (dst.sizes() != self.sizes()) {
    dst.resize_(self.sizes());
    if (self.is_non_overlapping_and_dense() && !self.is_contiguous())
      dst.as_strided_(self.sizes(), self.strides(), dst.storage_offset());
  }
  return copy_from(self, dst, false);
}

at::Scalar local_scalar_dense(const at::Tensor& self) {
  TORCH_CHECK(self.numel() == 1, "torchtpu: a Tensor with ", self.numel(),
              " elements cannot be converted to Scalar");
  check_not_forked();
  at::Tensor host = at::empty({}, at::TensorOptions().dtype(self.scalar_type()));
  read_to_host(self.reshape({}), host);
  tpu_metrics_add("host_syncs", 1);
  return host.item();
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_copy_from", copy_from);
  m.impl("_copy_from_and_resize", copy_from_and_resize);
  m.impl("_local_scalar_dense", local_scalar_dense);
}

}  // namespace
}  // namespace torchtpu
