// PrivateUse1 hooks: what torch.accelerator and generic PyTorch code ask of
// the "tpu" backend.
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/CPUAllocator.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_set>

#include "common.h"

extern "C" {
#include "core/runtime.h"
}

namespace torchtpu {
namespace {

// Pinned host memory: PJRT transfers need no page locking on the plugins
// we serve, but PyTorch code checks is_pinned() (DataLoader(pin_memory=True),
// non_blocking copies), so pinned allocations are ordinary aligned host
// memory that we remember as pinned.
std::mutex g_pinned_lock;
std::unordered_set<const void*> g_pinned;

void free_pinned(void* p) {
  {
    std::lock_guard<std::mutex> guard(g_pinned_lock);
    g_pinned.erase(p);
  }
  free(p);
}

class PinnedAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t n) override {
    void* p = nullptr;
    if (n && posix_memalign(&p, 64, n) != 0) TORCH_CHECK(false, "torchtpu: out of pinned host memory");
    if (p) {
      std::lock_guard<std::mutex> guard(g_pinned_lock);
      g_pinned.insert(p);
    }
    return {p, p, &free_pinned, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &free_pinned; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }
};

PinnedAllocator g_pinned_allocator;

class TpuHooks final : public at::PrivateUse1HooksInterface {
 public:
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return device_count_noexcept() > 0; }
  bool hasPrimaryContext(c10::DeviceIndex) const override {
    return tpu_runtime_is_initialized();
  }
  void init() const override { ensure_runtime(); }
  c10::DeviceIndex deviceCount() const override {
    return device_count_noexcept();
  }
  void setCurrentDevice(c10::DeviceIndex device) const override {
    set_current_device(device);
  }
  c10::DeviceIndex getCurrentDevice() const override { return current_device(); }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex device) const override {
    c10::DeviceIndex old = current_device();
    if (device != old) set_current_device(device);
    return old;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex device) const override {
    return exchangeDevice(device);
  }
  at::Device getDeviceFromPtr(void* data) const override {
    int device = tpu_storage_device_from_address(reinterpret_cast<uintptr_t>(data));
    TORCH_CHECK(device >= 0, "torchtpu: ", data, " is not a tpu data pointer");
    return at::Device(c10::DeviceType::PrivateUse1,
                      static_cast<c10::DeviceIndex>(device));
  }
  bool isPinnedPtr(const void* data) const override {
    std::lock_guard<std::mutex> guard(g_pinned_lock);
    return g_pinned.count(data) != 0;
  }
  c10::Allocator* getPinnedMemoryAllocator() const override { return &g_pinned_allocator; }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex) const override {
    TORCH_CHECK_NOT_IMPLEMENTED(
        false, "torchtpu: device random number generators are not available yet");
  }
  void resizePrivateUse1Bytes(const c10::Storage& storage,
                              size_t newsize) const override {
    resize_storage_bytes(storage, newsize);
  }
};

const bool g_registered = [] {
  at::RegisterPrivateUse1HooksInterface(new TpuHooks());
  return true;
}();

}  // namespace
}  // namespace torchtpu
