#include "common.h"

#include <atomic>
#include <mutex>

#include <ATen/Context.h>
#include <c10/core/Allocator.h>
#include <c10/core/StorageImpl.h>

extern "C" {
#include "core/runtime.h"
}

namespace torchtpu {

namespace {
// Process-wide like PyTorch's own setting (which is not per thread either).
std::atomic<int> g_precision_override{TPU_HLO_PRECISION_UNSET};
}  // namespace

tpu_hlo_precision_t matmul_precision() {
  int o = g_precision_override.load(std::memory_order_relaxed);
  if (o != TPU_HLO_PRECISION_UNSET) return static_cast<tpu_hlo_precision_t>(o);
  switch (at::globalContext().float32MatmulPrecision()) {
    case at::Float32MatmulPrecision::HIGHEST: return TPU_HLO_PRECISION_HIGHEST;
    case at::Float32MatmulPrecision::HIGH: return TPU_HLO_PRECISION_HIGH;
    case at::Float32MatmulPrecision::MEDIUM: return TPU_HLO_PRECISION_DEFAULT;
  }
  return TPU_HLO_PRECISION_HIGHEST;
}

tpu_hlo_precision_t precision_override() {
  return static_cast<tpu_hlo_precision_t>(g_precision_override.load(std::memory_order_relaxed));
}

void set_precision_override(tpu_hlo_precision_t precision) {
  g_precision_override.store(precision, std::memory_order_relaxed);
}


namespace {
std::mutex g_path_lock;
std::string g_default_plugin_path;
std::atomic<bool> g_runtime_ready{false};
// -1 until the thread sets one: then the runtime's default (LOCAL_RANK).
thread_local c10::DeviceIndex t_current_device = -1;
}  // namespace

void throw_status(tpu_status_t status, const std::string& context) {
  std::string message = "torchtpu: " + context + ": " + tpu_status_message(status);
  tpu_status_code_t code = tpu_status_code(status);
  tpu_status_free(status);
  switch (code) {
    case TPU_STATUS_OUT_OF_RANGE: TORCH_CHECK_INDEX(false, message);
    // A declined lowering: callers (the compile path) run the op another way.
    case TPU_STATUS_UNIMPLEMENTED: TORCH_CHECK_NOT_IMPLEMENTED(false, message);
    // The device (or the host staging for it) ran out of memory: CUDA's
    // exception type, which callers catch to retry with smaller batches.
    case TPU_STATUS_RESOURCE_EXHAUSTED: TORCH_CHECK_WITH(OutOfMemoryError, false, message);
    default: TORCH_CHECK(false, message);
  }
}

void throw_out_of_memory(const std::string& message) {
  TORCH_CHECK_WITH(OutOfMemoryError, false, message);
}

std::string default_plugin_path() {
  std::lock_guard<std::mutex> guard(g_path_lock);
  return g_default_plugin_path;
}

void set_default_plugin_path(const std::string& path) {
  std::lock_guard<std::mutex> guard(g_path_lock);
  g_default_plugin_path = path;
}

void check_not_forked() {
  TORCH_CHECK(!tpu_runtime_in_bad_fork(),
              "Cannot re-initialize TPU in forked subprocess. To use TPU with "
              "multiprocessing, you must use the 'spawn' start method");
}

void ensure_runtime() {
  check_not_forked();
  if (g_runtime_ready.load(std::memory_order_acquire)) return;
  std::string path;
  {
    std::lock_guard<std::mutex> guard(g_path_lock);
    path = g_default_plugin_path;
  }
  TPU_CHECK(tpu_runtime_init(path.empty() ? nullptr : path.c_str()),
            "cannot start the tpu runtime");
  g_runtime_ready.store(true, std::memory_order_release);
}

c10::DeviceIndex device_count_noexcept() {
  try {
    ensure_runtime();
  } catch (...) {
    return 0;
  }
  return static_cast<c10::DeviceIndex>(tpu_runtime_device_count());
}

c10::DeviceIndex current_device() {
  if (t_current_device >= 0) return t_current_device;
  // The default depends on the device count, so it needs the runtime; until
  // that starts, say 0 and remember nothing (a failed start may be retried).
  if (device_count_noexcept() <= 0) return 0;
  t_current_device = static_cast<c10::DeviceIndex>(tpu_runtime_default_device());
  return t_current_device;
}

void set_current_device(c10::DeviceIndex index) {
  ensure_runtime();
  TPU_CHECK(tpu_runtime_check_device(index), "cannot set the current device");
  t_current_device = index;
}

namespace {
// Both directions from one table, in tpu_dtype_t order.
constexpr c10::ScalarType kScalarTypes[TPU_DTYPE_COUNT] = {
    c10::kBool, c10::kByte, c10::kChar, c10::kShort, c10::kInt, c10::kLong,
    c10::kHalf, c10::kBFloat16, c10::kFloat, c10::kDouble, c10::kComplexFloat,
    c10::kUInt16, c10::kUInt32, c10::kUInt64, c10::kComplexDouble};

tpu_dtype_t lookup_dtype(c10::ScalarType type) {
  for (int d = 0; d < TPU_DTYPE_COUNT; d++)
    if (kScalarTypes[d] == type) return static_cast<tpu_dtype_t>(d);
  return TPU_DTYPE_INVALID;
}
}  // namespace

tpu_dtype_t to_tpu_dtype(c10::ScalarType type) {
  tpu_dtype_t d = lookup_dtype(type);
  TORCH_CHECK_TYPE(d != TPU_DTYPE_INVALID, "torchtpu: dtype ", c10::toString(type),
                   " is not supported on the tpu device (supported: bool, "
                   "uint8, uint16, uint32, uint64, int8, int16, int32, int64, "
                   "float16, bfloat16, float32, float64, complex64, complex128)");
  return d;
}

bool is_supported_dtype(c10::ScalarType type) {
  return lookup_dtype(type) != TPU_DTYPE_INVALID;
}

tpu_dtype_t to_tpu_dtype_on_device(c10::ScalarType type) {
  tpu_dtype_t d = to_tpu_dtype(type);
  ensure_runtime();
  TORCH_CHECK_TYPE(tpu_runtime_supports_dtype(d), "torchtpu: dtype ",
                   tpu_dtype_name(d), " is not supported on this device's "
                   "platform '", tpu_runtime_dtype_platform(), "'");
  return d;
}

c10::ScalarType to_scalar_type(tpu_dtype_t dtype) {
  TORCH_CHECK(tpu_dtype_is_valid(dtype), "torchtpu: invalid dtype code ",
              static_cast<int>(dtype));
  return kScalarTypes[dtype];
}

tpu_storage_t* storage_of(const c10::Storage& storage) {
  const c10::DataPtr& ptr = storage.data_ptr();
  TORCH_CHECK(ptr.get_deleter() == &delete_storage,
              "torchtpu: this tensor's storage was not allocated by the tpu "
              "allocator (device ", ptr.device(), ")");
  return static_cast<tpu_storage_t*>(ptr.get_context());
}

void resize_storage_bytes(const c10::Storage& storage, size_t nbytes) {
  TORCH_CHECK(storage.resizable(),
              "Trying to resize storage that is not resizable");
  tpu_storage_t* old_storage = storage_of(storage);
  c10::DataPtr fresh = storage.allocator()->allocate(nbytes);
  TPU_CHECK(tpu_storage_copy_prefix(static_cast<tpu_storage_t*>(fresh.get_context()),
                                    old_storage),
            "resizing a storage");
  c10::StorageImpl* impl = storage.unsafeGetStorageImpl();
  impl->set_data_ptr_noswap(std::move(fresh));
  impl->set_nbytes(nbytes);
}

}  // namespace torchtpu
