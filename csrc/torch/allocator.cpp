// The tpu allocator: each allocation is one C storage (no device memory
// until first written). The DataPtr's data is the storage's fake address
// (never dereferenced), its context the storage. Stats come from our own
// byte accounting, since PJRT's CPU plugin reports none.
#include <c10/core/CachingDeviceAllocator.h>
#include <torch/csrc/profiler/combined_traceback.h>
#include <torch/csrc/utils/pybind.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <mutex>
#include <unordered_map>

#include "common.h"

extern "C" {
#include "core/memory.h"
#include "core/runtime.h"
}

namespace torch {
// From torch/csrc/profiler/python/combined_traceback.h (libtorch_python),
// whose header needs nlohmann/json, which the wheel does not ship.
TORCH_API std::vector<pybind11::object> py_symbolize(
    std::vector<CapturedTraceback*>& to_symbolize);
}  // namespace torch

namespace torchtpu {

namespace {

// ---- memory history: torch.tpu.memory._record_memory_history / _snapshot --
// The live blocks (always: a snapshot lists every allocation, as CUDA's
// does, with frames for those made while recording) and, while recording,
// a bounded trace of alloc/free events with the Python stack of each, in
// the shape PyTorch's memory_viz reads.
struct Block {
  size_t size;
  c10::DeviceIndex device;
  std::shared_ptr<torch::CapturedTraceback> frames;  // null: not recorded
};
struct TraceEvent {
  const char* action;  // "alloc" | "free_completed"
  uint64_t addr;
  size_t size;
  c10::DeviceIndex device;
  int64_t time_us;
  std::shared_ptr<torch::CapturedTraceback> frames;
};
std::mutex g_history_lock;
std::unordered_map<uint64_t, Block> g_blocks;
std::deque<TraceEvent> g_trace;
std::atomic<bool> g_recording{false};
size_t g_max_entries = 0;

int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void note_event(const char* action, uint64_t addr, size_t size, c10::DeviceIndex device,
                const std::shared_ptr<torch::CapturedTraceback>& frames) {
  g_trace.push_back({action, addr, size, device, now_us(), frames});
  while (g_trace.size() > g_max_entries) g_trace.pop_front();
}

void note_alloc(uint64_t addr, size_t size, c10::DeviceIndex device) {
  std::shared_ptr<torch::CapturedTraceback> frames;
  bool recording = g_recording.load(std::memory_order_relaxed);
  // Gathered outside the lock: it walks the Python stack.
  if (recording) frames = torch::CapturedTraceback::gather(/*python=*/true, false, false);
  std::lock_guard<std::mutex> guard(g_history_lock);
  g_blocks[addr] = Block{size, device, frames};
  if (recording) note_event("alloc", addr, size, device, frames);
}

void note_free(uint64_t addr) {
  bool recording = g_recording.load(std::memory_order_relaxed);
  std::shared_ptr<torch::CapturedTraceback> frames;
  if (recording) frames = torch::CapturedTraceback::gather(true, false, false);
  std::lock_guard<std::mutex> guard(g_history_lock);
  auto it = g_blocks.find(addr);
  if (it == g_blocks.end()) return;
  if (recording) note_event("free_completed", addr, it->second.size, it->second.device, frames);
  g_blocks.erase(it);
}

}  // namespace

void delete_storage(void* ctx) {
  auto* storage = static_cast<tpu_storage_t*>(ctx);
  note_free(tpu_storage_address(storage));
  tpu_storage_release(storage);
}

void record_memory_history(bool enabled, size_t max_entries) {
  std::lock_guard<std::mutex> guard(g_history_lock);
  g_max_entries = max_entries;
  if (!enabled) g_trace.clear();
  g_recording.store(enabled, std::memory_order_relaxed);
}

// (segments, device_traces) as torch.cuda.memory._snapshot() has them: one
// segment per allocation (the allocator does not pool), one trace per device.
py::tuple memory_snapshot(int num_devices) {
  std::vector<Block> blocks;
  std::vector<uint64_t> addrs;
  std::vector<TraceEvent> events;
  {
    std::lock_guard<std::mutex> guard(g_history_lock);
    for (const auto& [addr, b] : g_blocks) {
      addrs.push_back(addr);
      blocks.push_back(b);
    }
    events.assign(g_trace.begin(), g_trace.end());
  }
  std::vector<torch::CapturedTraceback*> to_symbolize;
  for (auto& b : blocks)
    if (b.frames) to_symbolize.push_back(b.frames.get());
  for (auto& e : events)
    if (e.frames) to_symbolize.push_back(e.frames.get());
  std::vector<py::object> symbolized = torch::py_symbolize(to_symbolize);
  size_t next = 0;
  auto frames_of = [&](const std::shared_ptr<torch::CapturedTraceback>& f) -> py::object {
    return f ? symbolized.at(next++) : py::list();
  };
  py::list segments;
  for (size_t i = 0; i < blocks.size(); i++) {
    const Block& b = blocks[i];
    py::object frames = frames_of(b.frames);
    py::dict block;
    block["address"] = addrs[i];
    block["size"] = b.size;
    block["requested_size"] = b.size;
    block["state"] = "active_allocated";
    block["frames"] = frames;
    py::dict seg;
    seg["device"] = static_cast<int>(b.device);
    seg["address"] = addrs[i];
    seg["total_size"] = b.size;
    seg["allocated_size"] = b.size;
    seg["active_size"] = b.size;
    seg["requested_size"] = b.size;
    seg["stream"] = 0;
    seg["segment_type"] = "large";
    seg["segment_pool_id"] = py::make_tuple(0, 0);
    seg["is_expandable"] = false;
    seg["frames"] = frames;
    seg["blocks"] = py::list(py::make_tuple(block));
    segments.append(seg);
  }
  py::list traces;
  for (int d = 0; d < num_devices; d++) traces.append(py::list());
  for (const auto& e : events) {
    py::object frames = frames_of(e.frames);
    if (e.device < 0 || e.device >= num_devices) continue;
    py::dict ev;
    ev["action"] = e.action;
    ev["addr"] = e.addr;
    ev["size"] = e.size;
    ev["stream"] = 0;
    ev["time_us"] = e.time_us;
    ev["frames"] = frames;
    traces[e.device].cast<py::list>().append(ev);
  }
  return py::make_tuple(segments, traces);
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
    note_alloc(tpu_storage_address(storage), nbytes, device);
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
      all.peak = s.peak_live_allocations;
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
