// torch.profiler integration: the core's device-trace spans (executions,
// compiles, transfers, defer_and_fuse flushes; csrc/core/trace.h) become
// RecordFunction ranges, opened and closed on the thread where the work
// happens.
//
// Why RecordFunction ranges emitted live: they are what torch.profiler
// collects on the CPU activity that every profile() has (Kineto's CPU
// events), so they land in key_averages() and in export_chrome_trace()
// with the profiler's own clock, thread lanes and nesting (a compile
// inside aten::mm, an execution inside record_function("my_range") when
// it ran then) with no conversion of ours. Two other routes were weighed:
// Kineto's PrivateUse1 activity-profiler plugin (2.13's
// PrivateUse1ProfilerRegistry) is used only when the user asks for
// ProfilerActivity.PrivateUse1, not by a plain profile(); and events added
// when the profile stops (reportBackendEventToActiveKinetoProfiler) land
// on the stopping thread's lane, with microsecond times.
//
// The launcher's thread (csrc/core/launcher.c) is ours, not PyTorch's, so
// it has no profiler state: profile() registers its collection callback
// for the thread that started it (and PyTorch propagates it to autograd's
// threads). When a trace starts, the starting thread's profiler state
// (debug info holding the profiler state, and its RecordFunction
// callbacks) is captured; a thread with no profiler of its own adopts it
// at its first span of that trace. That is what PyTorch's own propagation
// (at::ThreadLocalState) does, minus the Python parts of that state,
// which must not be released on a thread that cannot take the GIL.
// The profile stops only after the launcher is drained (torchtpu/profiler.py
// wraps torch's _disable_profiler), so no span is being written while
// the profiler reads its per-thread queues.

#include <ATen/record_function.h>
#include <c10/util/ApproximateClock.h>
#include <c10/util/ThreadLocalDebugInfo.h>
#include <pybind11/pybind11.h>
#include <torch/csrc/profiler/stubs/base.h>

#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "torch/common.h"

extern "C" {
#include "core/launcher.h"
#include "core/runtime.h"
#include "core/trace.h"
}

namespace py = pybind11;

namespace torchtpu {
namespace {

constexpr size_t kTraceCapacity = 1 << 18;  // spans kept per trace (16 MiB)

// A RecordFunction names its event by pointer: names live for the process.
std::mutex g_names_lock;
std::unordered_set<std::string> g_names;

const char* event_name(const tpu_trace_span_t* s) {
  std::string name;
  switch (s->kind) {
    case TPU_TRACE_EXECUTE: name = std::string("tpu::execute ") + s->name; break;
    case TPU_TRACE_COMPILE: name = std::string("tpu::compile ") + s->name; break;
    case TPU_TRACE_TO_DEVICE: name = "tpu::to_device"; break;
    case TPU_TRACE_TO_HOST: name = "tpu::to_host"; break;
    case TPU_TRACE_FLUSH: name = std::string("tpu::flush ") + s->name; break;
    default: name = "tpu::span"; break;
  }
  std::lock_guard<std::mutex> lock(g_names_lock);
  return g_names.insert(std::move(name)).first->c_str();
}

// The profiling thread's state, captured at trace start.
struct Captured {
  std::shared_ptr<c10::ThreadLocalDebugInfo> debug_info;
  at::RecordFunctionTLS callbacks;
};
std::mutex g_capture_lock;
std::shared_ptr<const Captured> g_capture;
unsigned g_capture_generation;

// Per thread: whether it adopted a captured state, for which trace, and
// what it had before.
struct Adoption {
  unsigned generation = 0;
  bool adopted = false;
  std::shared_ptr<c10::ThreadLocalDebugInfo> own_debug_info;
  at::RecordFunctionTLS own_callbacks;
};
thread_local Adoption t_adoption;

void adopt_profiler_state() {
  unsigned gen = tpu_trace_generation();
  Adoption& a = t_adoption;
  if (a.generation == gen) return;
  a.generation = gen;
  if (!a.adopted) {
    // A thread the profiler already covers (the one that started it,
    // autograd's) keeps its own state.
    if (c10::ThreadLocalDebugInfo::get(c10::DebugInfoKind::PROFILER_STATE)) return;
    a.own_debug_info = c10::ThreadLocalDebugInfo::current();
    a.own_callbacks = at::get_record_function_tls_();
  }
  std::shared_ptr<const Captured> c;
  {
    std::lock_guard<std::mutex> lock(g_capture_lock);
    if (g_capture_generation == gen) c = g_capture;
  }
  if (c) {
    c10::ThreadLocalDebugInfo::_forceCurrentDebugInfo(c->debug_info);
    at::set_record_function_tls_(c->callbacks);
    a.adopted = true;
  } else if (a.adopted) {
    c10::ThreadLocalDebugInfo::_forceCurrentDebugInfo(a.own_debug_info);
    at::set_record_function_tls_(a.own_callbacks);
    a.adopted = false;
  }
}

struct Open {
  at::RecordFunction rf{at::RecordScope::FUNCTION};
  std::unordered_map<std::string, c10::IValue> kwargs;
};

void on_begin(tpu_trace_span_t* span) {
  adopt_profiler_state();
  auto* open = new Open();
  span->listener_data = open;
  if (!open->rf.isActive()) return;
  // Shown as the event's arguments when the profile records shapes.
  if (span->kind == TPU_TRACE_EXECUTE)
    open->kwargs.emplace("queue_wait_ns", static_cast<int64_t>(span->wait_ns));
  if (span->kind == TPU_TRACE_TO_DEVICE || span->kind == TPU_TRACE_TO_HOST)
    open->kwargs.emplace("bytes", static_cast<int64_t>(span->bytes));
  open->rf.before(std::string_view(event_name(span)), &open->kwargs);
}

void on_end(tpu_trace_span_t* span) {
  auto* open = static_cast<Open*>(span->listener_data);
  if (!open) return;
  delete open;  // ~RecordFunction ends the range
}

const tpu_trace_listener_t kListener = {on_begin, on_end};

// The profiler's device-event hooks (torch::profiler::impl::ProfilerStubs),
// used by the fallback profiler states: torch.autograd.profiler.profile(
// use_device="tpu") records an event at each op's start and end and shows
// their distance as the op's device time. The device runs in order from
// one host queue, with no timestamps of its own that PJRT exposes, so an
// event is the host time at which it is recorded (as torch.tpu.Event's
// elapsed_time is); what the device did is in the tpu::execute ranges.
struct TpuProfilerStubs final : torch::profiler::impl::ProfilerStubs {
  void record(c10::DeviceIndex* device, torch::profiler::impl::ProfilerVoidEventStub* event,
              int64_t* cpu_ns) const override {
    if (device) *device = tpu_runtime_is_initialized() ? current_device() : 0;
    if (cpu_ns) *cpu_ns = c10::getTime();
    if (event) *event = std::make_shared<int64_t>(tpu_trace_now_ns());
  }
  float elapsed(const torch::profiler::impl::ProfilerVoidEventStub* a,
                const torch::profiler::impl::ProfilerVoidEventStub* b) const override {
    if (!a || !b || !*a || !*b) return 0.f;
    int64_t ns = *static_cast<const int64_t*>(b->get()) - *static_cast<const int64_t*>(a->get());
    return static_cast<float>(ns) / 1e3f;  // microseconds, as the callers read it
  }
  void mark(const char*) const override {}
  void rangePush(const char*) const override {}
  void rangePop() const override {}
  bool enabled() const override { return true; }
  void onEachDevice(std::function<void(int)> op) const override {
    int n = tpu_runtime_is_initialized() ? tpu_runtime_device_count() : 0;
    for (int d = 0; d < n; d++) op(d);
  }
  // Waits for the launcher's queue only: a device synchronize would take
  // (and so hide) an asynchronous error that the user's next one raises.
  void synchronize() const override { tpu_launcher_drain(); }
};
TpuProfilerStubs g_stubs;

}  // namespace

void init_profiler_bindings(py::module& m) {
  tpu_trace_set_listener(&kListener);
  torch::profiler::impl::registerPrivateUse1Methods(&g_stubs);
  // Called by torchtpu/profiler.py right after torch's profiler started on
  // this thread (record=True) or to trace without one (record=False).
  m.def("_trace_start", [](bool capture_profiler) {
    auto c = std::make_shared<Captured>();
    if (capture_profiler) {
      c->debug_info = c10::ThreadLocalDebugInfo::current();
      c->callbacks = at::get_record_function_tls_();
    }
    tpu_status_t s = tpu_trace_start(kTraceCapacity);
    if (s) throw_status(s, "starting the device trace");
    std::lock_guard<std::mutex> lock(g_capture_lock);
    g_capture = capture_profiler ? c : nullptr;
    g_capture_generation = tpu_trace_generation();
  });
  // Before torch's profiler stops: no span may be open on the launcher's
  // thread while the profiler collects the threads' events.
  m.def("_trace_stop", [] {
    {
      py::gil_scoped_release release;
      tpu_launcher_drain();
      tpu_trace_stop();
    }
    std::lock_guard<std::mutex> lock(g_capture_lock);
    g_capture = nullptr;
  });
  m.def("_trace_enabled", [] { return tpu_trace_is_on(); });
  m.def("_trace_spans", [] {
    size_t n = tpu_trace_read(nullptr, 0);
    std::unique_ptr<tpu_trace_span_t[]> spans(new tpu_trace_span_t[n + 1]);
    n = std::min(n, tpu_trace_read(spans.get(), n));
    py::list out;
    for (size_t i = 0; i < n; i++) {
      const tpu_trace_span_t& s = spans[i];
      py::dict d;
      d["kind"] = tpu_trace_kind_name(s.kind);
      d["name"] = s.name;
      d["start_ns"] = s.start_ns;
      d["end_ns"] = s.end_ns;
      d["wait_ns"] = s.wait_ns;
      d["bytes"] = s.bytes;
      d["thread_id"] = s.thread_id;
      out.append(d);
    }
    return out;
  });
  m.def("_trace_dropped", [] { return tpu_trace_dropped(); });
  m.def("_trace_now_ns", [] { return tpu_trace_now_ns(); });
}

}  // namespace torchtpu
