// PrivateUse1 hooks: what torch.accelerator and generic PyTorch code ask of
// the "tpu" backend.
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/CPUAllocator.h>

#include "common.h"

extern "C" {
#include "core/runtime.h"
}

namespace torchtpu {
namespace {

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
  bool isPinnedPtr(const void*) const override { return false; }
  c10::Allocator* getPinnedMemoryAllocator() const override {
    // Host memory needs no pinning for PJRT transfers.
    return c10::GetCPUAllocator();
  }
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
