// The tpu allocator: each allocation is one C storage (no device memory
// until first written). The DataPtr's data is the storage's fake address
// (never dereferenced), its context the storage. Stats come from our own
// byte accounting, since PJRT's CPU plugin reports none.
#include <c10/core/CachingDeviceAllocator.h>

#include "common.h"

extern "C" {
#include "core/memory.h"
#include "core/runtime.h"
}

namespace torchtpu {

void delete_storage(void* ctx) {
  tpu_storage_release(static_cast<tpu_storage_t*>(ctx));
}

namespace {

using c10::CachingDeviceAllocator::DeviceStats;
using c10::CachingDeviceAllocator::StatType;

class TpuAllocator final : public c10::DeviceAllocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    ensure_runtime();
    c10::DeviceIndex device = current_device();
    tpu_storage_t* storage = nullptr;
    TPU_CHECK(tpu_storage_create(device, nbytes, &storage),
              "allocating device memory");
    void* address = reinterpret_cast<void*>(tpu_storage_address(storage));
    return {address, storage, &delete_storage,
            c10::Device(c10::DeviceType::PrivateUse1, device)};
  }

  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    TORCH_CHECK(false,
                "torchtpu: raw byte copies between tpu data pointers are not "
                "supported; copy tensors instead");
  }

  bool initialized() override { return device_count_noexcept() > 0; }
  void emptyCache(c10::MempoolId_t) override {}  // nothing is cached
  void recordStream(const c10::DataPtr&, c10::Stream) override {}

  DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    tpu_memory_stats_t s;
    tpu_memory_stats_get(device, &s);
    DeviceStats stats;
    for (auto* array : {&stats.allocated_bytes, &stats.active_bytes,
                        &stats.reserved_bytes, &stats.requested_bytes}) {
      auto& all = (*array)[static_cast<size_t>(StatType::AGGREGATE)];
      all.current = s.allocated_bytes;
      all.peak = s.peak_allocated_bytes;
      all.allocated = s.total_allocated_bytes;
      all.freed = s.total_freed_bytes;
    }
    stats.num_ooms = s.num_ooms;
    for (auto* array : {&stats.allocation, &stats.active, &stats.segment}) {
      auto& all = (*array)[static_cast<size_t>(StatType::AGGREGATE)];
      all.current = s.live_allocations;
      all.allocated = s.num_allocs;
      all.freed = s.num_frees;
    }
    return stats;
  }

  // (free, total) for torch.accelerator.get_memory_info and
  // torch.tpu.mem_get_info; see tpu_runtime_memory_info.
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override {
    ensure_runtime();
    int64_t free_bytes = 0, total = 0;
    TPU_CHECK(tpu_runtime_memory_info(device, &free_bytes, &total),
              "reading device memory");
    return {static_cast<size_t>(free_bytes), static_cast<size_t>(total)};
  }

  void resetAccumulatedStats(c10::DeviceIndex device) override {
    tpu_memory_reset_accumulated(device);
  }
  void resetPeakStats(c10::DeviceIndex device) override {
    tpu_memory_reset_peak(device);
  }
};

TpuAllocator g_allocator;
REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &g_allocator);

}  // namespace
}  // namespace torchtpu
