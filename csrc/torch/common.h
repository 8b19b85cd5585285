// Shared helpers for the C++ glue: status -> c10::Error, dtype mapping,
// storage lookup, lazy runtime start. Kept header-light on purpose.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>
#include <c10/core/Storage.h>
#include <c10/util/ArrayRef.h>
#include <c10/util/Exception.h>

#include <string>
#include <vector>

extern "C" {
#include "core/dtype.h"
#include "core/hlo/builder.h"
#include "core/status.h"
#include "core/storage.h"
}

namespace c10 {
class OperatorHandle;
struct IValue;
}  // namespace c10
namespace at {
class Tensor;
}  // namespace at

namespace torchtpu {

// The one way a C status becomes an exception: takes ownership of `status`
// and throws the c10 error its code matches, which Python sees as
// IndexError (OUT_OF_RANGE), NotImplementedError (UNIMPLEMENTED: a declined
// lowering), torch.OutOfMemoryError (RESOURCE_EXHAUSTED) or RuntimeError
// (everything else: XLA reports a program it rejects as INVALID_ARGUMENT),
// with "torchtpu: <context>: <message>".
[[noreturn]] void throw_status(tpu_status_t status, const std::string& context);
// Throws c10::OutOfMemoryError (torch.OutOfMemoryError in Python, as
// CUDA's), for bindings that raise their own errors.
[[noreturn]] void throw_out_of_memory(const std::string& message);

// Converts a C status into a PyTorch error naming what we were doing.
#define TPU_CHECK(expr, context)                              \
  do {                                                        \
    tpu_status_t tpu_check_status_ = (expr);                  \
    if (tpu_check_status_) ::torchtpu::throw_status(tpu_check_status_, context); \
  } while (0)

// Loads the plugin and creates the client on first use; throws on failure.
void ensure_runtime();
// Raises CUDA's "Cannot re-initialize ... in forked subprocess" error in a
// child forked after the runtime started (its client cannot be used).
void check_not_forked();
// The plugin path Python found (installed xla-cpu-pjrt); may be empty.
void set_default_plugin_path(const std::string& path);
std::string default_plugin_path();

// Precision of float32 products for the programs built now: the override
// of torch.tpu.precision(...) if one is active, else PyTorch's
// torch.set_float32_matmul_precision ("highest" -> HIGHEST, "high" -> HIGH,
// "medium" -> DEFAULT). Read per op: it is part of every program's key.
tpu_hlo_precision_t matmul_precision();
// TPU_HLO_PRECISION_UNSET clears the override.
void set_precision_override(tpu_hlo_precision_t precision);
tpu_hlo_precision_t precision_override();

// The calling thread's current tpu device index.
c10::DeviceIndex current_device();
void set_current_device(c10::DeviceIndex index);  // checks the range
c10::DeviceIndex device_count_noexcept();

// dtype mapping; throws a TypeError naming the dtype if unsupported.
tpu_dtype_t to_tpu_dtype(c10::ScalarType type);
c10::ScalarType to_scalar_type(tpu_dtype_t dtype);
bool is_supported_dtype(c10::ScalarType type);
// to_tpu_dtype, and also a TypeError naming the dtype and the platform when
// the plugin's platform cannot hold it (complex128 on TPU); starts the
// runtime. For the calls that create tensors.
tpu_dtype_t to_tpu_dtype_on_device(c10::ScalarType type);

// The C storage behind a tpu tensor's storage; throws if it is not ours.
tpu_storage_t* storage_of(const c10::Storage& storage);

// The allocator's deleter, to recognise our DataPtrs.
void delete_storage(void* ctx);
// torch.tpu.memory._record_memory_history / _snapshot (allocator.cpp).
void record_memory_history(bool enabled, size_t max_entries);

// Replaces `storage`'s bytes with a fresh allocation of `nbytes`, keeping the
// common prefix (used by resize_ and set_ when a storage must grow).
void resize_storage_bytes(const c10::Storage& storage, size_t nbytes);

// Raises CPU's error for an index op that ran on the device with an index
// out of range (dispatch.cpp records a device-side "any index bad" flag per
// op; it is read here, before a host read, so the error surfaces at the
// next sync in strict and defer_and_fuse; debug raises at the op).
void check_pending_index_errors();
// Queues a compiled graph's check flag (0-d bool on the device), read with
// the pending index checks: a true flag raises `message` as RuntimeError
// (kind 0), IndexError (1) or ValueError (2).
void push_graph_check(const at::Tensor& bad, int kind, const std::string& message);
// What every synchronize entry point of a stream, an event or
// torch.accelerator does (guard.cpp; torch.tpu.synchronize the same, with
// its own error wording): tpu_device_synchronize (flushes the deferred
// run, drains the launch queue, waits), then the ops' pending checks raise.
void synchronize_device(c10::DeviceIndex device);
// Index tensors made from a mask (its nonzero columns) are in range by
// construction: their bounds checks are skipped (see record_index_check).
void trust_mask_index(const at::Tensor& index);
void clear_trusted_mask_indices();

// Raises CPU's error for a literal number `op` cannot convert to its dtype
// ("value cannot be converted to type uint8_t without overflow"), as eager
// does before it runs an op: the compiled-graph builder calls it per node.
void check_literal_scalars(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> inputs);

// The strides CPU's index.Tensor gives a result of `sizes` (its
// TensorIterator over self and the indices: dispatch.cpp); undefined
// tensors are the Nones of the index list. Empty: masks or anything that
// is not such a call (the meta kernel's layout stands). Eager dispatch and
// torch.compile's layout pass (_compile.py) both ask it.
std::vector<int64_t> index_result_strides(const at::Tensor& self,
                                          const std::vector<at::Tensor>& indices,
                                          c10::ScalarType dtype, c10::IntArrayRef sizes);

// Eager modes (debug.cpp): process-wide, with a per-thread override.
enum class EagerMode { kStrict = 0, kDebug = 1, kDeferAndFuse = 2 };
EagerMode eager_mode();  // the calling thread's
// Throws ValueError for an unknown name.
void set_eager_mode(const std::string& mode, bool this_thread_only);
void clear_thread_eager_mode();
// The calling thread's override, or "" when it follows the process mode.
std::string thread_eager_mode_override();
std::string eager_mode_name(EagerMode mode);
// Debug mode's CPU shadow check (TORCHTPU_DEBUG_SHADOW).
bool debug_shadow();

// While alive, flushes of deferred runs this thread triggers are counted as
// "barrier" (an op that cannot be deferred needs the contents), not "sync".
class DeferBarrier {
 public:
  DeferBarrier();
  ~DeferBarrier();
  DeferBarrier(const DeferBarrier&) = delete;
  DeferBarrier& operator=(const DeferBarrier&) = delete;

 private:
  int previous_;
};
void set_debug_shadow(bool on);

}  // namespace torchtpu
