// torchtpu._C: the Python entry points of the runtime. Plain pybind11 types
// only (no ATen headers), so this unit compiles quickly.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>

#include <stdexcept>
#include <string>
#include <vector>

#include "common.h"

namespace torchtpu {
pybind11::tuple memory_snapshot(int num_devices);  // allocator.cpp
}

extern "C" {
#include "core/defer.h"
#include "core/device.h"
#include "core/diskcache.h"
#include "core/eager.h"
#include "core/env.h"
#include "core/hostheap.h"
#include "core/lower/lowering.h"
#include "core/memory.h"
#include "core/launcher.h"
#include "core/metrics.h"
#include "core/pjrt/pjrt.h"
#include "core/program.h"
#include "core/rng.h"
#include "core/runtime.h"
}

namespace torchtpu {
void set_default_plugin_path(const std::string& path);
void ensure_runtime();
void check_pending_index_errors();  // dispatch.cpp
void set_fallback_quiet(bool quiet);
int register_lowered_ops();
void install_host_gemm();  // host_gemm.cpp
// Eager modes (debug.cpp); names rather than the enum keep this file free
// of c10 headers.
std::string get_eager_mode_name();
void set_eager_mode(const std::string& mode, bool this_thread_only);
void clear_thread_eager_mode();
std::string thread_eager_mode_override();
bool debug_shadow();
void set_debug_shadow(bool on);
void init_graph_bindings(pybind11::module& m);  // graph.cpp
void init_comm_bindings(pybind11::module& m);  // comm.cpp
void init_tpudist_bindings(pybind11::module& m);  // tpudist.cpp
void init_profiler_bindings(pybind11::module& m);  // profiler.cpp
}  // namespace torchtpu

namespace py = pybind11;

namespace {

void init_runtime() {
  try {
    torchtpu::ensure_runtime();
  } catch (const std::exception& e) {
    // c10::Error::what() may carry a C++ backtrace; keep the first line.
    std::string what = e.what();
    throw std::runtime_error(what.substr(0, what.find('\n')));
  }
}

tpu_client_t* client() {
  init_runtime();
  return tpu_runtime_client();
}

// What the plugin itself says (path, PJRT API versions, attributes).
py::dict describe_plugin(tpu_plugin_t* p) {
  py::dict info;
  info["path"] = tpu_plugin_path(p);
  info["api_version"] = std::to_string(tpu_plugin_api_major(p)) + "." +
                        std::to_string(tpu_plugin_api_minor(p));
  info["header_api_version"] = std::to_string(tpu_plugin_header_api_major()) +
                               "." + std::to_string(tpu_plugin_header_api_minor());
  py::dict attributes;
  for (size_t i = 0; i < tpu_plugin_attribute_count(p); i++) {
    const char *name, *value;
    tpu_plugin_attribute_at(p, i, &name, &value);
    attributes[name] = value;
  }
  info["attributes"] = attributes;
  return info;
}

py::dict plugin_info() {
  tpu_client_t* c = client();
  py::dict info = describe_plugin(tpu_runtime_plugin());
  info["platform_name"] = tpu_client_platform_name(c);
  info["platform_version"] = tpu_client_platform_version(c);
  return info;
}

// The plugin alone (GetPjrtApi, PJRT_Plugin_Initialize, its attributes),
// without a client: what info prints when the client cannot start.
py::dict probe_plugin() {
  std::string fallback = torchtpu::default_plugin_path();
  char path[4096];
  tpu_status_t s = tpu_plugin_resolve_path(fallback.empty() ? nullptr : fallback.c_str(),
                                           path, sizeof path);
  tpu_plugin_t* p = nullptr;
  if (!s) s = tpu_plugin_load(path, &p);
  if (s) torchtpu::throw_status(s, "loading the plugin");
  py::dict info = describe_plugin(p);
  tpu_plugin_release(p);
  return info;
}

py::list devices_info() {
  tpu_client_t* c = client();
  py::list out;
  for (int i = 0; i < tpu_client_device_count(c); i++) {
    tpu_device_t* d = nullptr;
    tpu_status_t s = tpu_client_device(c, i, &d);
    if (s) torchtpu::throw_status(s, "listing devices");
    py::dict info;
    info["index"] = i;
    info["id"] = tpu_device_id(d);
    info["kind"] = tpu_device_kind(d);
    info["description"] = tpu_device_to_string(d);
    info["process_index"] = tpu_device_process_index(d);
    py::dict attributes;
    for (size_t k = 0; k < tpu_device_attribute_count(d); k++) {
      const tpu_device_attribute_t* a = tpu_device_attribute_at(d, k);
      switch (a->kind) {
        case TPU_DEVICE_ATTRIBUTE_STRING: attributes[a->name] = a->string_value; break;
        case TPU_DEVICE_ATTRIBUTE_INT64: attributes[a->name] = a->int64_value; break;
        case TPU_DEVICE_ATTRIBUTE_BOOL: attributes[a->name] = a->int64_value != 0; break;
        case TPU_DEVICE_ATTRIBUTE_FLOAT: attributes[a->name] = a->float_value; break;
        case TPU_DEVICE_ATTRIBUTE_INT64_LIST:
          attributes[a->name] = std::vector<int64_t>(a->int64_list, a->int64_list + a->int64_list_size);
          break;
      }
    }
    info["attributes"] = attributes;
    out.append(info);
  }
  return out;
}

py::dict memory_stats(int device) {
  tpu_memory_stats_t s;
  tpu_memory_stats_get(device, &s);
  py::dict d;
  d["allocated_bytes"] = s.allocated_bytes;
  d["peak_allocated_bytes"] = s.peak_allocated_bytes;
  d["total_allocated_bytes"] = s.total_allocated_bytes;
  d["total_freed_bytes"] = s.total_freed_bytes;
  d["num_allocs"] = s.num_allocs;
  d["num_frees"] = s.num_frees;
  d["live_allocations"] = s.live_allocations;
  d["peak_live_allocations"] = s.peak_live_allocations;
  d["num_ooms"] = s.num_ooms;
  return d;
}

py::dict metrics() {
  // Queued executions count when they run: report them all.
  tpu_launcher_drain();
  std::vector<tpu_metrics_entry_t> entries(256);
  size_t n = tpu_metrics_snapshot(entries.data(), entries.size());
  if (n > entries.size()) {
    entries.resize(n + 64);
    n = std::min(tpu_metrics_snapshot(entries.data(), entries.size()), entries.size());
  }
  py::dict d;
  for (size_t i = 0; i < n; i++) d[entries[i].name] = entries[i].value;
  return d;
}

py::list env_vars() {
  py::list out;
  for (size_t i = 0; i < tpu_env_count(); i++) {
    const tpu_env_var_t* v = tpu_env_at(i);
    out.append(py::make_tuple(v->name, v->default_value, v->meaning, v->stability));
  }
  return out;
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "torchtpu runtime bindings";
  // Before the runtime starts: it registers the CPU plugin's custom calls.
  torchtpu::install_host_gemm();
  torchtpu::init_graph_bindings(m);
  torchtpu::init_comm_bindings(m);
  torchtpu::init_tpudist_bindings(m);
  torchtpu::init_profiler_bindings(m);
  m.def("_set_default_plugin_path", &torchtpu::set_default_plugin_path);
  m.def("_init", &init_runtime, "Start the runtime (load plugin, create client)");
  m.def("_is_initialized", [] { return tpu_runtime_is_initialized(); });
  m.def("_is_in_bad_fork", [] { return tpu_runtime_in_bad_fork(); });
  m.def("_device_count", [] {
    try {
      init_runtime();
    } catch (const std::exception&) {
      return 0;
    }
    return tpu_runtime_device_count();
  });
  m.def("_plugin_info", &plugin_info);
  m.def("_devices_info", &devices_info);
  m.def("_probe_plugin", &probe_plugin);
  m.def("_memory_stats", &memory_stats);
  // The host heap keeps freed buffers (hostheap.h): empty_cache gives the
  // free pages back.
  m.def("_empty_cache", []() { tpu_hostheap_release(); });
  m.def("_host_heap_configured", []() { return tpu_hostheap_configured(); });
  // 0 unset (override only), 1 DEFAULT, 2 HIGH, 3 HIGHEST: tpu_hlo_precision_t.
  m.def("_matmul_precision", []() { return static_cast<int>(torchtpu::matmul_precision()); });
  m.def("_precision_override", []() { return static_cast<int>(torchtpu::precision_override()); });
  m.def("_set_precision_override", [](int p) {
    if (p < TPU_HLO_PRECISION_UNSET || p > TPU_HLO_PRECISION_HIGHEST)
      throw py::value_error("precision code out of range");
    torchtpu::set_precision_override(static_cast<tpu_hlo_precision_t>(p));
  });
  m.def("_record_memory_history", &torchtpu::record_memory_history);
  m.def("_memory_snapshot", [](int num_devices) {
    return torchtpu::memory_snapshot(num_devices);
  });
  m.def("_mem_get_info", [](int device) {
    torchtpu::ensure_runtime();
    int64_t free_bytes = 0, total = 0;
    TPU_CHECK(tpu_runtime_memory_info(device, &free_bytes, &total),
              "reading device memory");
    return py::make_tuple(free_bytes, total);
  });
  m.def("_reset_peak_memory_stats", [](int d) { tpu_memory_reset_peak(d); });
  m.def("_reset_accumulated_memory_stats", [](int d) { tpu_memory_reset_accumulated(d); });
  m.def("_metrics", &metrics);
  m.def("_reset_metrics", [] {
    tpu_launcher_drain();
    tpu_metrics_reset();
  });
  m.def("_launcher_enabled", [] { return tpu_launcher_enabled(); });
  m.def("_launcher_set_enabled", [](bool on) {
    py::gil_scoped_release release;
    tpu_launcher_set_enabled(on);
  });
  m.def("_launcher_queued", [] { return tpu_launcher_queued(); });
  m.def("_launcher_set_always_queue", [](bool on) { tpu_launcher_set_always_queue(on); });
  m.def("_env_vars", &env_vars);
  // Python reads configuration through the same registry as the core.
  m.def("_env_get", [](const std::string& name) {
    if (!tpu_env_find(name.c_str()))
      throw py::key_error("torchtpu: " + name + " is not in the environment registry (csrc/core/env.c)");
    return std::string(tpu_env_get(name.c_str()));
  });
  m.def("_log_enabled", [](const std::string& what) { return tpu_env_log_enabled(what.c_str()); });
  m.def("_cache_dirs", [] {  // persistent executable caches; "" = off
    return py::make_tuple(tpu_diskcache_local_dir(), tpu_diskcache_shared_dir(),
                          tpu_diskcache_max_bytes());
  });
  m.def("_set_fallback_quiet", &torchtpu::set_fallback_quiet);
  m.def("_manual_seed", [](int device, uint64_t seed) {
    init_runtime();
    tpu_status_t s = tpu_rng_seed(device, seed);
    if (s) torchtpu::throw_status(s, "manual_seed");
  });
  m.def("_get_rng_state", [](int device) {
    init_runtime();
    int64_t state[2];
    tpu_status_t s = tpu_rng_get_state(device, state);
    if (s) torchtpu::throw_status(s, "get_rng_state");
    return std::vector<int64_t>{state[0], state[1]};
  });
  m.def("_set_rng_state", [](int device, std::vector<int64_t> state) {
    init_runtime();
    if (state.size() != 2) throw std::invalid_argument("torchtpu: an rng state has 2 words");
    tpu_status_t s = tpu_rng_set_state(device, state.data());
    if (s) torchtpu::throw_status(s, "set_rng_state");
  });
  m.def("_lowerings", [] {
    std::vector<std::string> names;
    for (size_t i = 0; i < tpu_lowering_count(); i++) names.push_back(tpu_lowering_at(i)->name);
    return names;
  });
  m.def("_register_lowered_ops", &torchtpu::register_lowered_ops);
  m.def("_eager_cache_size", [] { return tpu_eager_cache_size(); });
  m.def("_eager_cache_clear", [] { tpu_eager_cache_clear(); });
  m.def("_program_cache_size", [] { return tpu_program_cache_size(); });
  m.def("_get_eager_mode", &torchtpu::get_eager_mode_name);
  m.def("_set_eager_mode", &torchtpu::set_eager_mode, py::arg("mode"),
        py::arg("this_thread_only") = false);
  m.def("_clear_thread_eager_mode", &torchtpu::clear_thread_eager_mode);
  m.def("_thread_eager_mode_override", &torchtpu::thread_eager_mode_override);
  m.def("_debug_shadow", &torchtpu::debug_shadow);
  m.def("_set_debug_shadow", &torchtpu::set_debug_shadow);
  m.def("_override_lowering_for_testing", [](std::optional<std::string> op, std::string with) {
    // Cached programs were built with the old lowering: drop them.
    tpu_eager_cache_clear();
    return tpu_lowering_override_for_testing(op ? op->c_str() : nullptr, with.c_str());
  });
  m.def("_defer_flush", [](int device) {
    tpu_status_t s = NULL;
    {
      py::gil_scoped_release release;
      s = tpu_defer_flush(device, TPU_DEFER_SYNC);
    }
    if (s) torchtpu::throw_status(s, "flushing deferred ops");
  });
  m.def("_defer_pending_ops", [](int device) { return tpu_defer_pending_ops(device); });
  m.def("_defer_configure", [](int max_ops, int min_repeat) {
    tpu_defer_configure(max_ops, min_repeat);
  }, py::arg("max_ops") = 0, py::arg("min_repeat") = 0);
  m.def("_defer_cache_size", [] { return tpu_defer_cache_size(); });
  m.def("_synchronize", [](int device) {
    init_runtime();
    tpu_status_t s = tpu_runtime_check_device(device);
    if (s) torchtpu::throw_status(s, "synchronize");
    py::gil_scoped_release release;
    // The same as every other synchronize (torchtpu::synchronize_device),
    // with this entry point's error wording.
    s = tpu_device_synchronize(device);
    if (s) {
      py::gil_scoped_acquire acquire;
      torchtpu::throw_status(s, "synchronize");
    }
    // The ops' own checks (an index out of range, a class target) raise
    // here too, as CUDA's device-side asserts do at a synchronize.
    py::gil_scoped_acquire acquire;
    torchtpu::check_pending_index_errors();
  });
}
