// Python bindings of the graph builder (core/graph.h) for the Dynamo
// backend: marshal FX nodes' arguments into C descriptors, and run a
// compiled graph on tpu tensors' storages. All the logic is in C; this file
// only converts.
#include <ATen/ATen.h>
#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/csrc/utils/pybind.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "args.h"
#include "common.h"

extern "C" {
#include "core/env.h"
#include "core/graph.h"
#include "core/kernel.h"
#include "core/metrics.h"
#include "core/program.h"
#include "core/runtime.h"
#include "core/spmd.h"
}

namespace py = pybind11;

namespace torchtpu {
namespace {

// (dtype, shape) -> the C type; a TypeError names an unsupported dtype.
tpu_hlo_type_t type_of(const py::handle& spec) {
  auto t = spec.cast<py::tuple>();
  auto shape = t[1].cast<std::vector<int64_t>>();
  if (shape.size() > TPU_HLO_MAX_RANK) throw py::value_error("torchtpu: rank too high for a graph");
  return tpu_hlo_type_make(to_tpu_dtype(t[0].cast<c10::ScalarType>()),
                           static_cast<int>(shape.size()), shape.data());
}

std::vector<tpu_hlo_type_t> types_of(const py::list& specs) {
  std::vector<tpu_hlo_type_t> types;
  for (const auto& s : specs) types.push_back(type_of(s));
  return types;
}

// An FX node's value among add_node's arguments: a bare id could be a
// Python number where the schema says Tensor (x + 1).
struct GraphValue {
  int id;
};

bool is_value(py::handle h) { return py::isinstance<GraphValue>(h); }

[[noreturn]] void not_a_tensor(py::handle h) {
  throw py::type_error("torchtpu: a constant " + std::string(Py_TYPE(h.ptr())->tp_name) +
                       " where a tensor was expected");
}

// A Tensor[] or Tensor?[] of GraphValues (None: absent): the ids go to
// values, and, as eager lists them, the present ones' positions to ints.
void add_tensors(tpu_graph_arg_t& a, bool optional, py::handle list, std::vector<int>* values) {
  a.lower.kind = TPU_ARG_TENSORS;
  a.list_start = static_cast<int>(values->size());
  int pos = 0;
  for (py::handle e : list) {
    if (optional && pos == TPU_LOWER_MAX_INTS)
      throw py::value_error("torchtpu: optional tensor list too long");
    if (!e.is_none()) {
      if (!is_value(e)) not_a_tensor(e);
      values->push_back(e.cast<GraphValue>().id);
      if (optional) a.lower.ints[a.lower.num_tensors] = pos;
      a.lower.num_tensors++;
    }
    pos++;
  }
  if (optional) a.lower.num_ints = pos;
}

py::object dtype_object(tpu_dtype_t d) {
  return py::reinterpret_borrow<py::object>(
      reinterpret_cast<PyObject*>(torch::getTHPDtype(to_scalar_type(d))));
}

py::list specs_of(const tpu_kernel_t* k, bool results) {
  py::list out;
  int n = results ? tpu_kernel_num_results(k) : tpu_kernel_num_params(k);
  for (int i = 0; i < n; i++) {
    tpu_hlo_type_t t = results ? tpu_kernel_result(k, i) : tpu_kernel_param(k, i);
    out.append(py::make_tuple(dtype_object(t.dtype),
                              std::vector<int64_t>(t.dims, t.dims + t.rank)));
  }
  return out;
}

// A parsed user kernel (core/kernel.h).
class Kernel {
 public:
  Kernel(const std::string& name, const std::string& text) {
    tpu_status_t s = tpu_kernel_create(name.c_str(), text.data(), text.size(), &k_);
    if (s) throw_status(s, "parsing a kernel");
  }
  ~Kernel() { tpu_kernel_destroy(k_); }
  py::list params() const { return specs_of(k_, false); }
  py::list results() const { return specs_of(k_, true); }
  py::bytes flat_module() const {
    char* text = nullptr;
    size_t len = 0;
    tpu_status_t s = tpu_kernel_flat_module(k_, &text, &len);
    if (s) throw_status(s, "building a kernel's wrapper");
    py::bytes out(text, len);
    free(text);
    return out;
  }
  const tpu_kernel_t* get() const { return k_; }

 private:
  tpu_kernel_t* k_ = nullptr;
};

class Graph {
 public:
  Graph(const py::list& inputs, bool with_rng) {
    auto types = types_of(inputs);
    tpu_status_t s = tpu_graph_create(types.data(), static_cast<int>(types.size()), with_rng, &g_);
    if (s) throw_status(s, "creating a graph");
    tpu_graph_set_precision(g_, matmul_precision());
  }
  ~Graph() { tpu_graph_destroy(g_); }

  // args: per argument of op's schema (a prefix: the builder's own nodes
  // leave defaults out), its Python value, FX nodes as GraphValues.
  std::vector<int> add_node(const std::string& op, const py::list& args, const py::list& outputs) {
    const std::string name = op.substr(0, op.find('.'));
    const char* overload = op.size() > name.size() ? op.c_str() + name.size() + 1 : "";
    const auto& schema = c10::Dispatcher::singleton().findSchemaOrThrow(name.c_str(), overload).schema();
    std::vector<tpu_graph_arg_t> cargs(args.size());
    std::vector<int> vals;  // the tensor lists' elements
    ArgStore store;
    for (size_t i = 0; i < args.size(); i++) {
      const c10::Argument& sa = schema.arguments().at(i);
      ArgClass cls = classify(sa);
      py::handle h = args[i];
      tpu_graph_arg_t& a = cargs[i];
      if (h.is_none()) continue;  // NONE: zero
      if (cls == ArgClass::kTensorList || cls == ArgClass::kOptTensorList) {
        add_tensors(a, cls == ArgClass::kOptTensorList, h, &vals);
        continue;
      }
      if (is_value(h)) {  // traced: a tensor (as an int[]'s element it fails toIValue)
        if (cls != ArgClass::kTensor) throw py::type_error("torchtpu: " + sa.name() + " is traced");
        a.lower.kind = TPU_ARG_TENSOR;
        a.value = h.cast<GraphValue>().id;
        continue;
      }
      c10::TypePtr type = sa.real_type();
      if (cls == ArgClass::kTensor) {
        // A number (x + 1): a run-time scalar, as eager's wrapped 0-dim CPU tensor.
        if (!PyLong_Check(h.ptr()) && !PyFloat_Check(h.ptr()) && !PyComplex_Check(h.ptr()))
          not_a_tensor(h);
        cls = ArgClass::kNumber;
        type = c10::NumberType::get();
      }
      // (OTHER reads no value: a Generator would not convert)
      c10::IValue v = cls == ArgClass::kOther || cls == ArgClass::kDevice
                          ? c10::IValue()
                          : torch::jit::toIValue(h, type, sa.N());
      uint8_t scalar[16] = {};
      if (const char* why = to_lower_arg(cls, v, store, a.lower, scalar, &a.scalars))
        throw py::value_error(std::string("torchtpu: ") + why);
      if (a.lower.kind != TPU_ARG_SCALAR) continue;
      // graph.h's constant fields from the scalar's bytes
      if (a.lower.type.dtype == TPU_DTYPE_BOOL) a.i = scalar[0];
      else if (a.lower.type.dtype == TPU_DTYPE_INT64) std::memcpy(&a.i, scalar, 8);
      else std::memcpy(&a.f, scalar, 8), std::memcpy(&a.f_imag, scalar + 8, 8);
    }
    auto out_types = types_of(outputs);
    std::vector<int> out_ids(out_types.size());
    tpu_status_t s = tpu_graph_add_node(g_, op.c_str(), cargs.data(), static_cast<int>(cargs.size()),
                                        vals.data(), static_cast<int>(vals.size()), out_types.data(),
                                        static_cast<int>(out_types.size()), out_ids.data());
    if (s) throw_status(s, "lowering " + op);
    return out_ids;
  }

  std::vector<int> add_kernel(const Kernel& kernel, const std::vector<int>& args) {
    std::vector<int> out(static_cast<size_t>(tpu_kernel_num_results(kernel.get())));
    tpu_status_t s = tpu_graph_add_kernel(g_, kernel.get(), args.data(),
                                          static_cast<int>(args.size()), out.data());
    if (s) throw_status(s, "inlining a kernel");
    return out;
  }

  py::bytes finish(const std::vector<int>& outputs) {
    char* text = nullptr;
    size_t len = 0;
    tpu_status_t s =
        tpu_graph_finish(g_, outputs.data(), static_cast<int>(outputs.size()), &text, &len);
    if (s) throw_status(s, "finishing a graph");
    py::bytes result(text, len);
    free(text);
    return result;
  }

 private:
  tpu_graph_t* g_ = nullptr;
};

// Whether compiled graphs join the device's deferred run (core/graph.h's
// tpu_graph_defer_op) outside Debug mode: TORCHTPU_GRAPH_FUSION, changed by
// _C._set_graph_fusion (tests, benchmarks). -1: not read yet.
std::atomic<int> g_graph_fusion{-1};

bool graph_fusion() {
  int v = g_graph_fusion.load(std::memory_order_relaxed);
  if (v < 0) {
    v = tpu_env_get_int("TORCHTPU_GRAPH_FUSION", 1) != 0;
    g_graph_fusion.store(v, std::memory_order_relaxed);
  }
  return v != 0;
}

// The calling thread's eager mode set to `mode` (nullptr: unchanged) for a
// scope, the previous override restored after.
class ThreadEagerMode {
 public:
  explicit ThreadEagerMode(const char* mode) : active_(mode != nullptr) {
    if (!active_) return;
    previous_ = thread_eager_mode_override();
    set_eager_mode(mode, /*this_thread_only=*/true);
  }
  ~ThreadEagerMode() {
    if (!active_) return;
    if (previous_.empty()) clear_thread_eager_mode();
    else set_eager_mode(previous_, /*this_thread_only=*/true);
  }
  ThreadEagerMode(const ThreadEagerMode&) = delete;
  ThreadEagerMode& operator=(const ThreadEagerMode&) = delete;

 private:
  bool active_;
  std::string previous_;
};

// A compiled graph: its program (re-fetched from the program cache if that
// was cleared), its input/output types and whether it threads the RNG.
class Compiled {
 public:
  Compiled(std::string text, const py::list& inputs, const py::list& outputs, bool with_rng)
      : text_(std::move(text)), inputs_(types_of(inputs)), outputs_(types_of(outputs)),
        with_rng_(with_rng) {
    program();  // compile now: errors belong to compile time
  }

  tpu_program_t* program() {
    unsigned gen = tpu_program_cache_generation();
    if (!program_ || gen != generation_) {
      ensure_runtime();
      tpu_program_t* p = nullptr;
      tpu_status_t s;
      {
        py::gil_scoped_release release;
        tpu_runtime_set_op_label("a compiled graph or kernel");  // names the compile in a trace
        s = tpu_program_get(text_.data(), text_.size(), &p);
        tpu_runtime_set_op_label(nullptr);
      }
      if (s) throw_status(s, "compiling a graph");
      program_ = p;
      generation_ = gen;
    }
    return program_;
  }

  // writes[i] >= 0: output i is the new contents of input writes[i] (an
  // input mutation): installed as that input's storage's next buffer, so
  // every view of it sees the write, with no copy.
  std::vector<at::Tensor> run(const std::vector<at::Tensor>& args, const std::vector<int>& writes) {
    check_not_forked();
    if (args.size() != inputs_.size())
      throw py::value_error("torchtpu: compiled graph takes " + std::to_string(inputs_.size()) +
                            " tensors, got " + std::to_string(args.size()));
    if (!writes.empty() && writes.size() != outputs_.size())
      throw py::value_error("torchtpu: compiled graph: one write target per output");
    int device = -1;
    const bool defer = deferring();
    std::vector<at::Tensor> keep;  // the tensors whose storages are read
    keep.reserve(args.size());
    std::vector<bool> whole(args.size());
    std::vector<tpu_storage_t*> in(args.size());
    for (size_t i = 0; i < args.size(); i++) {
      const at::Tensor& t = args[i];
      if (!t.defined() || !t.device().is_privateuseone())
        throw py::value_error("torchtpu: compiled graph input " + std::to_string(i) +
                              " is not a tpu tensor");
      if (device < 0) device = t.device().index();
      else if (device != t.device().index())
        throw py::value_error("torchtpu: compiled graph inputs are on different tpu devices");
      const tpu_hlo_type_t& want = inputs_[i];
      if (to_tpu_dtype(t.scalar_type()) != want.dtype || t.dim() != want.rank)
        throw py::value_error("torchtpu: compiled graph input " + std::to_string(i) +
                              " has another dtype or rank than it was compiled for");
      for (int d = 0; d < want.rank; d++)
        if (t.size(d) != want.dims[d])
          throw py::value_error("torchtpu: compiled graph input " + std::to_string(i) +
                                " has another shape than it was compiled for");
      // The program reads whole flat storages: a view that is not exactly
      // its storage is first copied into one (an eager op).
      whole[i] = t.is_contiguous() && t.storage_offset() == 0 &&
                 t.storage().nbytes() == static_cast<size_t>(t.numel()) * t.itemsize();
      if (whole[i]) {
        keep.push_back(t);
      } else {
        // When the graph joins the run, so does the copy: a strict copy of
        // a storage the run reads would flush the run here.
        ThreadEagerMode scoped(defer ? "defer_and_fuse" : nullptr);
        keep.push_back(t.clone(at::MemoryFormat::Contiguous));
      }
      in[i] = storage_of(keep.back().storage());
    }
    if (device < 0) device = current_device();
    std::vector<at::Tensor> results;
    std::vector<tpu_storage_t*> out;
    auto options = at::TensorOptions().device(c10::Device(c10::kPrivateUse1, device));
    for (size_t k = 0; k < outputs_.size(); k++) {
      const auto& o = outputs_[k];
      int w = writes.empty() ? -1 : writes[k];
      if (w >= 0 && static_cast<size_t>(w) < args.size() && whole[w]) {
        results.push_back(args[w]);
      } else {
        // A view input cannot take a whole buffer: the caller copies.
        results.push_back(at::empty(c10::IntArrayRef(o.dims, o.rank),
                                    options.dtype(to_scalar_type(o.dtype))));
      }
      out.push_back(storage_of(results.back().storage()));
    }
    tpu_program_t* p = program();
    const tpu_defer_op_t* op = defer ? defer_op() : nullptr;
    tpu_status_t s;
    {
      py::gil_scoped_release release;
      if (op)  // joins the run; the program above stays for one-graph runs
        s = tpu_graph_record(op, device, in.data(), static_cast<int>(in.size()), with_rng_,
                             out.data(), static_cast<int>(out.size()));
      else
        s = tpu_graph_run(p, device, in.data(), inputs_.data(), static_cast<int>(in.size()),
                          with_rng_, out.data(), static_cast<int>(out.size()));
    }
    if (s) throw_status(s, "running a compiled graph");
    return results;
  }

  bool deferring() { return eager_mode() != EagerMode::kDebug && graph_fusion() && defer_op(); }

  // The graph as an op of a deferred run; nullptr when it cannot be one.
  const tpu_defer_op_t* defer_op() {
    if (!defer_checked_) {
      tpu_status_t s = tpu_graph_defer_op(text_.data(), text_.size(), inputs_.data(),
                                          static_cast<int>(inputs_.size()), outputs_.data(),
                                          static_cast<int>(outputs_.size()), with_rng_, &defer_op_);
      if (s) throw_status(s, "running a compiled graph");
      defer_checked_ = true;
    }
    return defer_op_;
  }

  const std::string& text() const { return text_; }

 private:
  std::string text_;
  std::vector<tpu_hlo_type_t> inputs_, outputs_;
  bool with_rng_;
  tpu_program_t* program_ = nullptr;
  unsigned generation_ = 0;
  const tpu_defer_op_t* defer_op_ = nullptr;
  bool defer_checked_ = false;
};

// A graph partitioned by XLA over local devices (core/spmd.h): run with
// one list of shards per device, returning one list of results per device.
class SpmdProgram {
 public:
  SpmdProgram(const std::string& text, const std::vector<int>& devices) : devices_(devices) {
    ensure_runtime();
    tpu_status_t s;
    {
      py::gil_scoped_release release;
      s = tpu_spmd_program_get(text.data(), text.size(), devices_.data(),
                               static_cast<int>(devices_.size()), &p_);
    }
    if (s) throw_status(s, "compiling a partitioned graph");
  }

  std::vector<std::vector<at::Tensor>> run(const std::vector<std::vector<at::Tensor>>& shards) {
    check_not_forked();
    size_t n = devices_.size();
    if (shards.size() != n)
      throw py::value_error("torchtpu: a partitioned graph takes one list of shards per device (" +
                            std::to_string(n) + "), got " + std::to_string(shards.size()));
    size_t nargs = shards[0].size();
    std::vector<at::Tensor> keep;
    std::vector<tpu_storage_t*> in;
    std::vector<tpu_hlo_type_t> types;
    for (size_t d = 0; d < n; d++) {
      if (shards[d].size() != nargs)
        throw py::value_error("torchtpu: every device takes the same number of shards");
      for (size_t i = 0; i < nargs; i++) {
        const at::Tensor& t = shards[d][i];
        if (!t.defined() || !t.device().is_privateuseone() || t.device().index() != devices_[d])
          throw py::value_error("torchtpu: shard " + std::to_string(i) + " of partition " +
                                std::to_string(d) + " is not on tpu:" + std::to_string(devices_[d]));
        bool whole = t.is_contiguous() && t.storage_offset() == 0 &&
                     t.storage().nbytes() == static_cast<size_t>(t.numel()) * t.itemsize();
        keep.push_back(whole ? t : t.clone(at::MemoryFormat::Contiguous));
        in.push_back(storage_of(keep.back().storage()));
        auto sizes = t.sizes();
        types.push_back(tpu_hlo_type_make(to_tpu_dtype(t.scalar_type()), static_cast<int>(t.dim()),
                                          sizes.data()));
      }
    }
    int nouts = tpu_spmd_program_num_outputs(p_);
    std::vector<std::vector<at::Tensor>> results(n);
    std::vector<tpu_storage_t*> out;
    for (size_t d = 0; d < n; d++) {
      auto options = at::TensorOptions().device(c10::Device(c10::kPrivateUse1, devices_[d]));
      for (int k = 0; k < nouts; k++) {
        tpu_hlo_type_t o = tpu_spmd_program_output_type(p_, k);
        results[d].push_back(at::empty(c10::IntArrayRef(o.dims, o.rank),
                                       options.dtype(to_scalar_type(o.dtype))));
        out.push_back(storage_of(results[d].back().storage()));
      }
    }
    tpu_status_t s;
    {
      py::gil_scoped_release release;
      s = tpu_spmd_program_run(p_, in.data(), types.data(), static_cast<int>(nargs), out.data(),
                               nouts);
    }
    if (s) throw_status(s, "running a partitioned graph");
    return results;
  }

 private:
  std::vector<int> devices_;
  tpu_spmd_program_t* p_ = nullptr;
};

}  // namespace

void init_graph_bindings(py::module& m) {
  py::class_<GraphValue>(m, "_GraphValue").def(py::init<int>());
  py::class_<Graph>(m, "_Graph")
      .def(py::init<const py::list&, bool>(), py::arg("inputs"), py::arg("with_rng"))
      .def("add_node", &Graph::add_node)
      .def("add_kernel", &Graph::add_kernel)
      .def("finish", &Graph::finish);
  py::class_<Kernel>(m, "_Kernel")
      .def(py::init<const std::string&, const std::string&>(), py::arg("name"), py::arg("text"))
      .def_property_readonly("params", &Kernel::params)
      .def_property_readonly("results", &Kernel::results)
      .def("flat_module", &Kernel::flat_module);
  // A compiled graph's text prepared for partitioning (core/graph.h).
  m.def("_shard_graph_text", [](const py::bytes& text, const py::list& inputs,
                                const py::list& shardings) {
    auto types = types_of(inputs);
    if (shardings.size() != types.size())
      throw py::value_error("torchtpu: one sharding per graph input");
    std::vector<std::string> texts;
    for (const auto& h : shardings) texts.push_back(h.is_none() ? std::string() : h.cast<std::string>());
    std::vector<const char*> ptrs;
    for (const auto& t : texts) ptrs.push_back(t.empty() ? nullptr : t.c_str());
    std::string src = text;
    char* out = nullptr;
    size_t len = 0;
    tpu_status_t s = tpu_graph_shard_text(src.data(), src.size(), types.data(), ptrs.data(),
                                          static_cast<int>(types.size()), &out, &len);
    if (s) throw_status(s, "sharding a graph");
    py::bytes result(out, len);
    free(out);
    return result;
  });
  py::class_<SpmdProgram>(m, "_SpmdProgram")
      .def(py::init<const std::string&, const std::vector<int>&>(), py::arg("text"),
           py::arg("devices"))
      .def("run", &SpmdProgram::run);
  py::class_<Compiled>(m, "_CompiledGraph")
      .def(py::init<std::string, const py::list&, const py::list&, bool>(), py::arg("text"),
           py::arg("inputs"), py::arg("outputs"), py::arg("with_rng"))
      .def("run", &Compiled::run)
      // Whether a run() now joins the device's deferred run (its checks are
      // then read before the next host read, not at once).
      .def("deferring", &Compiled::deferring)
      .def_property_readonly("text", [](const Compiled& c) { return py::bytes(c.text()); });
  // index.Tensor's CPU result strides for (meta) self and indices: the
  // eager rule (dispatch.cpp), for the compile layout pass. None: the
  // traced layout stands.
  m.def("_index_result_strides",
        [](const at::Tensor& self, const std::vector<std::optional<at::Tensor>>& indices,
           const std::vector<int64_t>& sizes) -> std::optional<std::vector<int64_t>> {
          std::vector<at::Tensor> list;
          for (const auto& t : indices) list.push_back(t ? *t : at::Tensor());
          std::vector<int64_t> strides = index_result_strides(self, list, self.scalar_type(), sizes);
          if (strides.empty() && !sizes.empty()) return std::nullopt;
          return strides;
        });
  m.def("_metrics_add", [](const std::string& name, int64_t delta) {
    tpu_metrics_add(name.c_str(), delta);
  });
  // The message of CPU's error for a node's literal numbers its dtype
  // cannot hold (None when they fit, or when the arguments cannot be read
  // against the schema: symbolic sizes). Tensors are the nodes' FakeTensors.
  m.def("_literal_scalar_error", [](const std::string& name, const std::string& overload,
                                    py::args args, py::kwargs kwargs) -> py::object {
    auto op = c10::Dispatcher::singleton().findSchema({name, overload});
    if (!op) return py::none();
    torch::jit::Stack stack;
    try {
      // (a number where the schema has a Tensor: a wrapped number, as
      // calling the OpOverload makes it)
      torch::jit::ToIValueAllowNumbersAsTensors numbers(true);
      stack = torch::jit::createStackForSchema(op->schema(), args, kwargs, std::nullopt);
    } catch (const std::exception&) {
      return py::none();
    }
    try {
      torchtpu::check_literal_scalars(*op, stack);
    } catch (python_error&) {
      throw;  // a Python error (its state is set): Python raises it
    } catch (const c10::Error& e) {
      return py::str(e.what_without_backtrace());
    } catch (const std::exception& e) {
      return py::str(e.what());
    }
    return py::none();
  });
  m.def("_push_graph_check", [](const at::Tensor& bad, int kind, const std::string& message) {
    push_graph_check(bad, kind, message);
  });
  m.def("_set_graph_fusion", [](bool on) {
    bool was = graph_fusion();
    g_graph_fusion.store(on ? 1 : 0, std::memory_order_relaxed);
    return was;
  });
  m.def("_graph_op_supported", [](const std::string& op) { return tpu_graph_op_supported(op.c_str()); });
  m.def("_graph_op_needs_rng", [](const std::string& op) { return tpu_graph_op_needs_rng(op.c_str()); });
}

}  // namespace torchtpu
