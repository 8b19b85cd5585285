// Device guard for "tpu": a thread-local current device, and streams and
// events for stream-using code (FSDP2, transformers, accelerate). The device
// runs work in order (PJRT orders work per device), so every stream is a
// name for that one queue: new streams get their own ids, a thread's
// current stream is remembered per device, and waiting on any stream or
// event waits for the device's queue.
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <atomic>
#include <chrono>

#include "common.h"

extern "C" {
#include "core/device.h"
#include "core/runtime.h"
}

namespace torchtpu {

void synchronize_device(c10::DeviceIndex device) {
  TPU_CHECK(tpu_device_synchronize(device), "synchronizing the tpu device");
  check_pending_index_errors();
}

namespace {

constexpr c10::DeviceType kTpu = c10::DeviceType::PrivateUse1;
constexpr int kMaxDevices = 64;

thread_local c10::StreamId t_current_stream[kMaxDevices] = {};
std::atomic<c10::StreamId> g_next_stream{1};

// An event: the device it was recorded on and when (host clock; elapsed
// times are host-side, measured between the records).
struct TpuEvent {
  c10::DeviceIndex device = -1;
  int64_t recorded_ns = 0;
};

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void sync_device(c10::DeviceIndex device) {
  if (!tpu_runtime_is_initialized()) return;
  synchronize_device(device < 0 ? current_device() : device);
}

int slot(c10::DeviceIndex d) { return d >= 0 && d < kMaxDevices ? d : 0; }

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
    c10::DeviceIndex d = device.index() >= 0 ? device.index() : current_device();
    return c10::Stream(c10::Stream::UNSAFE, c10::Device(kTpu, d), t_current_stream[slot(d)]);
  }
  c10::Stream getDefaultStream(c10::Device device) const override {
    return c10::Stream(c10::Stream::DEFAULT, device);
  }
  c10::Stream getNewStream(c10::Device device, int priority) const override {
    c10::DeviceIndex d = device.index() >= 0 ? device.index() : current_device();
    return c10::Stream(c10::Stream::UNSAFE, c10::Device(kTpu, d), g_next_stream++);
  }
  c10::Stream getStreamFromGlobalPool(c10::Device device, bool) const override {
    return getNewStream(device, 0);
  }
  c10::Stream exchangeStream(c10::Stream stream) const override {
    c10::Stream old = getStream(stream.device());
    t_current_stream[slot(stream.device_index())] = stream.id();
    return old;
  }
  c10::DeviceIndex deviceCount() const noexcept override {
    return device_count_noexcept();
  }
  // Events. Work on the device completes in order, so a stream waiting on
  // an event (block) needs nothing; a host waiting on one (synchronize,
  // query) waits for the device's queue, which includes the event's work.
  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex device_index,
              const c10::EventFlag) const override {
    if (!*event) *event = new TpuEvent();
    auto* e = static_cast<TpuEvent*>(*event);
    e->device = stream.device_index() >= 0 ? stream.device_index() : device_index;
    e->recorded_ns = now_ns();
  }
  void block(void*, const c10::Stream&) const override {}
  bool queryEvent(void* event) const override {
    if (!event) return true;  // never recorded
    sync_device(static_cast<TpuEvent*>(event)->device);
    return true;
  }
  void synchronizeEvent(void* event) const override {
    if (event) sync_device(static_cast<TpuEvent*>(event)->device);
  }
  double elapsedTime(void* start, void* end, const c10::DeviceIndex) const override {
    TORCH_CHECK(start && end, "torchtpu: both events must be recorded before elapsed_time");
    sync_device(static_cast<TpuEvent*>(end)->device);
    return static_cast<double>(static_cast<TpuEvent*>(end)->recorded_ns -
                               static_cast<TpuEvent*>(start)->recorded_ns) /
           1e6;
  }
  void destroyEvent(void* event, const c10::DeviceIndex) const noexcept override {
    delete static_cast<TpuEvent*>(event);
  }
  bool queryStream(const c10::Stream& stream) const override {
    sync_device(stream.device_index());
    return true;
  }
  void synchronizeStream(const c10::Stream& stream) const override {
    sync_device(stream.device_index());
  }
  void synchronizeDevice(const c10::DeviceIndex device) const override { sync_device(device); }
  void recordDataPtrOnStream(const c10::DataPtr&, const c10::Stream&) const override {}
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, TpuGuardImpl);

}  // namespace
}  // namespace torchtpu
