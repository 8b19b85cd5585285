// Device guard for "tpu": a thread-local current device and one in-order
// stream per device (PJRT orders work per device for us).
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include "common.h"

namespace torchtpu {
namespace {

constexpr c10::DeviceType kTpu = c10::DeviceType::PrivateUse1;

class TpuGuardImpl final : public c10::impl::DeviceGuardImplInterface {
 public:
  c10::DeviceType type() const override { return kTpu; }

  c10::Device exchangeDevice(c10::Device device) const override {
    c10::Device old = getDevice();
    if (old.index() != device.index()) setDevice(device);
    return old;
  }
  c10::Device getDevice() const override {
    return c10::Device(kTpu, current_device());
  }
  void setDevice(c10::Device device) const override {
    TORCH_CHECK(device.type() == kTpu, "torchtpu: expected a tpu device, got ",
                device);
    if (device.index() >= 0) set_current_device(device.index());
  }
  void uncheckedSetDevice(c10::Device device) const noexcept override {
    try {
      if (device.index() >= 0) set_current_device(device.index());
    } catch (...) {
    }
  }
  c10::Stream getStream(c10::Device device) const override {
    return c10::Stream(c10::Stream::DEFAULT, device);
  }
  c10::Stream getDefaultStream(c10::Device device) const override {
    return c10::Stream(c10::Stream::DEFAULT, device);
  }
  c10::Stream exchangeStream(c10::Stream stream) const override {
    return c10::Stream(c10::Stream::DEFAULT, stream.device());
  }
  c10::DeviceIndex deviceCount() const noexcept override {
    return device_count_noexcept();
  }
  // Work on a device completes in order and every host read waits for the
  // data it needs, so events have nothing to track yet.
  void record(void**, const c10::Stream&, const c10::DeviceIndex,
              const c10::EventFlag) const override {}
  void block(void*, const c10::Stream&) const override {}
  bool queryEvent(void*) const override { return true; }
  void destroyEvent(void*, const c10::DeviceIndex) const noexcept override {}
  bool queryStream(const c10::Stream&) const override { return true; }
  void synchronizeStream(const c10::Stream&) const override {}
  void synchronizeDevice(const c10::DeviceIndex) const override {}
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, TpuGuardImpl);

}  // namespace
}  // namespace torchtpu
