// Eager modes and the Debug mode's checks.
//
// The mode is process-wide (TORCHTPU_EAGER_MODE, torchtpu.set_eager_mode)
// with a per-thread override (torchtpu.eager_mode(...) context manager).
// Debug differs from Strict in three ways, all here or keyed off
// eager_mode():
//   - every device execution is waited for, so an XLA error surfaces at the
//     op that caused it (dispatch.cpp sets call.synchronous);
//   - indexing ops first run PyTorch's CPU kernel on host copies of their
//     inputs, so an out-of-range index raises IndexError / RuntimeError
//     exactly as on the CPU instead of reading clamped garbage on device;
//   - with the shadow check on, every op that ran on the device is run again
//     on the CPU and the first result that differs beyond tolerance raises,
//     naming the op, shapes, dtypes and the errors.
// Every error raised in Debug names the ATen op and the user's Python line.
#include <Python.h>
#include <frameobject.h>

#include <ATen/ATen.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "common.h"
#include "placement.h"

extern "C" {
#include "core/defer.h"
#include "core/env.h"
#include "core/lower/lowering.h"
#include "core/metrics.h"
}

namespace torchtpu {

bool try_run_on_device(const c10::OperatorHandle& op, torch::jit::Stack* stack);
void cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack);

namespace {

EagerMode parse_mode(const std::string& text, bool* ok) {
  *ok = true;
  if (text == "strict") return EagerMode::kStrict;
  if (text == "debug") return EagerMode::kDebug;
  if (text == "defer_and_fuse") return EagerMode::kDeferAndFuse;
  *ok = false;
  return EagerMode::kStrict;
}

std::atomic<int> g_mode{-1};  // -1: not read from the environment yet
thread_local int t_mode_override = -1;
std::atomic<int> g_shadow{-1};

int process_mode() {
  int m = g_mode.load(std::memory_order_relaxed);
  if (m >= 0) return m;
  bool ok = false;
  std::string text = tpu_env_get("TORCHTPU_EAGER_MODE");
  EagerMode mode = parse_mode(text, &ok);
  if (!ok)
    TORCH_WARN("torchtpu: TORCHTPU_EAGER_MODE=", text,
               " is not a mode (strict, debug, defer_and_fuse); using strict");
  int expected = -1;
  g_mode.compare_exchange_strong(expected, static_cast<int>(mode));
  return g_mode.load();
}

// The first Python frame outside torch and torchtpu: the user's line.
std::string python_location_locked();

std::string python_location() {
  if (!Py_IsInitialized() || _Py_IsFinalizing()) return "";
  // PyTorch's bindings release the GIL around ops: take it back (only on
  // this error path) to read the calling thread's frames.
  PyGILState_STATE gil = PyGILState_Ensure();
  std::string where = python_location_locked();
  PyGILState_Release(gil);
  return where;
}

std::string python_location_locked() {
  static const std::vector<std::string> skip = [] {
    std::vector<std::string> dirs;
    for (const char* name : {"torch", "torchtpu"}) {
      PyObject* mod = PyImport_ImportModule(name);
      PyObject* file = mod ? PyObject_GetAttrString(mod, "__file__") : nullptr;
      const char* path = file ? PyUnicode_AsUTF8(file) : nullptr;
      if (path) {
        std::string p(path);
        dirs.push_back(p.substr(0, p.rfind('/') + 1));
      }
      Py_XDECREF(file);
      Py_XDECREF(mod);
    }
    PyErr_Clear();
    return dirs;
  }();
  PyFrameObject* frame = PyEval_GetFrame();  // borrowed
  Py_XINCREF(frame);
  std::string where;
  while (frame) {
    PyCodeObject* code = PyFrame_GetCode(frame);
    PyObject* file = PyObject_GetAttrString(reinterpret_cast<PyObject*>(code), "co_filename");
    const char* path = file ? PyUnicode_AsUTF8(file) : nullptr;
    bool internal = !path || path[0] == '<';
    for (const auto& dir : skip)
      if (path && std::string(path).rfind(dir, 0) == 0) internal = true;
    if (!internal) where = std::string(path) + ":" + std::to_string(PyFrame_GetLineNumber(frame));
    Py_XDECREF(file);
    Py_DECREF(code);
    PyFrameObject* back = PyFrame_GetBack(frame);
    Py_DECREF(frame);
    frame = back;
    if (!where.empty()) {
      Py_XDECREF(frame);
      break;
    }
  }
  PyErr_Clear();
  return where;
}

std::string op_name_of(const c10::OperatorHandle& op) {
  const auto& name = op.schema().operator_name();
  return name.name + (name.overload_name.empty() ? "" : "." + name.overload_name);
}

// Ops whose indices Debug checks on the host before running on the device.
bool is_index_op(const std::string& base) {
  static const char* const kOps[] = {
      "aten::index",        "aten::_index_put_impl_", "aten::index_put",  "aten::index_put_",
      "aten::index_select", "aten::gather",           "aten::scatter",    "aten::scatter_",
      "aten::scatter_add",  "aten::scatter_add_",     "aten::scatter_reduce",
      "aten::scatter_reduce_", "aten::embedding",     "aten::take",       "aten::index_add",
      "aten::index_add_",   "aten::index_copy",       "aten::index_copy_", "aten::index_fill",
      "aten::index_fill_",  "aten::one_hot",          "aten::embedding_dense_backward",
      "aten::take_along_dim", "aten::nll_loss_forward", "aten::nll_loss2d_forward",
      "aten::nll_loss_backward", "aten::nll_loss2d_backward"};
  for (const char* op : kOps)
    if (base == op) return true;
  return false;
}

// v with each tensor in it (a tensor, a list of tensors or of optional
// tensors) replaced by fn(tensor), and a device argument naming ours by
// `device`.
template <typename F>
c10::IValue map_tensors(const c10::IValue& v, F fn, c10::Device device) {
  if (v.isTensor()) return v.toTensor().defined() ? c10::IValue(fn(v.toTensor())) : v;
  if (v.isTensorList()) {
    std::vector<at::Tensor> out;
    for (const at::Tensor& t : v.toTensorVector()) out.push_back(fn(t));
    return out;
  }
  if (v.isList() && v.toList().elementType()->kind() == c10::TypeKind::OptionalType) {
    auto list = v.toList();
    c10::List<std::optional<at::Tensor>> out;
    for (size_t i = 0; i < list.size(); i++) {
      c10::IValue e = list.get(i);
      if (e.isNone()) out.push_back(std::nullopt);
      else out.push_back(fn(e.toTensor()));
    }
    return out;
  }
  if (v.isDevice() && v.toDevice().is_privateuseone()) return device;
  return v;
}

at::Tensor host_copy(const at::Tensor& t) {
  if (!t.defined() || !t.device().is_privateuseone()) return t;
  // An expanded tensor (fill_ / index_put_ allow one as self): the
  // elements it spans copied and viewed with its strides, so a write
  // through one alias shows in the others as on the device (copy_ into
  // an expanded host tensor would raise).
  if (at::has_internal_overlap(t) == at::MemOverlap::Yes) {
    int64_t span = 1;
    for (int64_t d = 0; d < t.dim(); d++)
      if (t.size(d) == 0) return t.cpu();
      else span += (t.size(d) - 1) * t.stride(d);
    at::Tensor flat = t.as_strided({span}, {1}, t.storage_offset()).cpu();
    return flat.as_strided(t.sizes(), t.strides(), 0);
  }
  // A conjugate or negative view (its bit set, data unchanged): the data
  // copied as it is and the bit set again on the host. Copying the view
  // itself would resolve it on the device, through a clone this kernel
  // would shadow-check by copying the view again, without end.
  if (t.is_conj() || t.is_neg()) {
    at::Tensor raw = t.is_conj() ? t.conj() : t;
    if (raw.is_neg()) raw = raw._neg_view();
    at::Tensor host = host_copy(raw);
    if (t.is_neg()) host = host._neg_view();
    return t.is_conj() ? host.conj() : host;
  }
  // A detached host copy with the same strides, so in-place kernels and
  // view semantics behave as they would have on the CPU.
  at::Tensor host = at::empty_strided(t.sizes(), t.strides(), t.options().device(at::kCPU));
  host.copy_(t);
  return host;
}

c10::IValue to_host(const c10::IValue& v) { return map_tensors(v, host_copy, at::kCPU); }

torch::jit::Stack host_inputs(const torch::jit::Stack& stack, size_t n) {
  torch::jit::Stack out;
  for (size_t i = stack.size() - n; i < stack.size(); i++) out.push_back(to_host(stack[i]));
  return out;
}

struct Tolerance {
  double atol, rtol;
};

Tolerance tolerance_for(at::ScalarType t) {
  switch (t) {
    case at::kBFloat16: return {2e-2, 2e-2};
    case at::kHalf: return {2e-3, 2e-3};
    case at::kFloat:
    case at::kComplexFloat: return {1e-4, 1e-4};
    default: return {1e-7, 1e-7};
  }
}

std::string describe_inputs(const torch::jit::Stack& inputs) {
  std::ostringstream os;
  bool first = true;
  for (const auto& v : inputs) {
    if (!v.isTensor() || !v.toTensor().defined()) continue;
    const at::Tensor& t = v.toTensor();
    os << (first ? "" : ", ") << t.scalar_type() << t.sizes();
    first = false;
  }
  return os.str();
}

// Compares one device result with the CPU's; returns "" when they agree,
// else what differs. `meta`: the result PyTorch's meta kernel gives (NULL
// when unknown). Where the CPU kernel differs from it, the device may
// follow the meta kernel, as CUDA does:
//  - dtype: native_layer_norm's mean and rstd stay bfloat16 on the CPU and
//    are float32 in the meta kernel; the values are compared at the coarser
//    dtype's tolerance;
//  - shape: native_batch_norm's save_mean in eval mode is [0] on the CPU
//    and [C] in the meta kernel; there are no values to compare.
std::string compare(const at::Tensor& device, const at::Tensor& ref,
                    const at::Tensor* meta = nullptr, bool nonfinite_agree = false) {
  if (device.defined() != ref.defined()) return "one result is undefined";
  if (!device.defined()) return "";
  const bool has_meta = meta && meta->defined();
  if (device.sizes() != ref.sizes()) {
    if (has_meta && meta->sizes() == device.sizes() && meta->scalar_type() == device.scalar_type())
      return "";
    std::ostringstream os;
    os << "shape " << device.sizes() << " vs CPU " << ref.sizes();
    return os.str();
  }
  const bool as_meta = has_meta && device.scalar_type() == meta->scalar_type() &&
                       at::isFloatingType(device.scalar_type()) &&
                       at::isFloatingType(ref.scalar_type());
  if (device.scalar_type() != ref.scalar_type() && !as_meta) {
    std::ostringstream os;
    os << "dtype " << device.scalar_type() << " vs CPU " << ref.scalar_type();
    return os.str();
  }
  if (device.numel() == 0) return "";
  at::Tensor got = device.cpu();
  if (!at::isFloatingType(ref.scalar_type()) && !at::isComplexType(ref.scalar_type())) {
    if (at::equal(got, ref)) return "";
    at::Tensor diff = (got.to(at::kDouble) - ref.to(at::kDouble)).abs();
    std::ostringstream os;
    os << "shape " << ref.sizes() << ", dtype " << ref.scalar_type() << ": "
       << diff.ne(0).sum().item<int64_t>() << " element(s) differ, max abs error "
       << diff.max().item<double>();
    return os.str();
  }
  Tolerance tol = tolerance_for(ref.scalar_type());
  Tolerance own = tolerance_for(got.scalar_type());
  tol = {std::max(tol.atol, own.atol), std::max(tol.rtol, own.rtol)};
  at::Tensor g = at::isComplexType(ref.scalar_type()) ? at::view_as_real(got).to(at::kDouble)
                                                      : got.to(at::kDouble);
  at::Tensor r = at::isComplexType(ref.scalar_type()) ? at::view_as_real(ref).to(at::kDouble)
                                                      : ref.to(at::kDouble);
  // NaN where the CPU has NaN, the same infinities, the rest within tolerance.
  at::Tensor both_nan = g.isnan().logical_and(r.isnan());
  at::Tensor same_inf = g.isinf().logical_and(g.eq(r));
  if (nonfinite_agree)  // any non-finite value for a non-finite one
    same_inf = same_inf.logical_or(g.isfinite().logical_not().logical_and(r.isfinite().logical_not()));
  at::Tensor abs_err = (g - r).abs().masked_fill(both_nan.logical_or(same_inf), 0);
  at::Tensor bad = abs_err.gt(r.abs().mul(tol.rtol).add(tol.atol)).logical_or(
      abs_err.isnan());
  if (!bad.any().item<bool>()) return "";
  at::Tensor rel = abs_err.div(r.abs().clamp_min(1e-30));
  std::ostringstream os;
  os << "shape " << ref.sizes() << ", dtype " << ref.scalar_type() << ": "
     << bad.sum().item<int64_t>() << " element(s) beyond atol=" << tol.atol
     << " rtol=" << tol.rtol << ", max abs error " << abs_err.nan_to_num(INFINITY).max().item<double>()
     << ", max rel error " << rel.nan_to_num(INFINITY).max().item<double>();
  return os.str();
}

std::vector<at::Tensor> tensors_in(const c10::IValue& v) {
  if (v.isTensor()) return {v.toTensor()};
  if (v.isTensorList()) return v.toTensorVector();
  return {};
}

c10::IValue to_meta(const c10::IValue& v) {
  return map_tensors(
      v,
      [](const at::Tensor& t) {
        return at::empty_strided(t.sizes(), t.strides(), t.options().device(at::kMeta));
      },
      at::kMeta);
}

// Swallows warnings: the device op gave the user its own already.
struct SilentWarnings : c10::WarningHandler {
  void process(const c10::Warning&) override {}
};

// The op's results from PyTorch's meta kernel for the device inputs, or
// none when it has no meta kernel (the dtype check then stays the CPU's).
torch::jit::Stack meta_results(const c10::OperatorHandle& op, const torch::jit::Stack& inputs) {
  SilentWarnings silent;
  c10::WarningUtils::WarningHandlerGuard quiet(&silent);
  torch::jit::Stack stack;
  for (const auto& v : inputs) stack.push_back(to_meta(v));
  try {
    op.callBoxed(&stack);
  } catch (const c10::Error&) {
    return {};
  }
  return stack;
}

bool writes_an_argument(const c10::FunctionSchema& schema) {
  for (const auto& a : schema.arguments())
    if (a.alias_info() && a.alias_info()->isWrite()) return true;
  return false;
}

// Runs the CPU kernel on `inputs` into *out; false when there is no CPU
// kernel for this op or dtype (the fused LSTM/GRU cells are CUDA's only;
// histc of integers): nothing to compare with. A backward op's CPU kernel
// that rejects float32 statistics beside bfloat16/float16 data (the norms'
// backwards, whose saved mean and rstd the device's forward made float32
// as the meta kernel and CUDA do) runs again with every floating input in
// the widest of their dtypes, as the device computes, when the op writes
// no argument (its results are then compared at the coarser dtype's
// tolerance). Any other CPU error is the shadow check's finding: the CPU
// raises for inputs the device accepted.
bool run_reference(const c10::OperatorHandle& op, const torch::jit::Stack& inputs,
                   torch::jit::Stack* out) {
  SilentWarnings silent;
  c10::WarningUtils::WarningHandlerGuard quiet(&silent);
  *out = inputs;
  try {
    op.callBoxed(out);
    return true;
  } catch (const c10::NotImplementedError&) {
    return false;
  } catch (const c10::Error&) {
    std::optional<at::ScalarType> widest;
    bool mixed = false;
    for (const auto& v : inputs) {
      if (!v.isTensor() || !v.toTensor().defined()) continue;
      at::ScalarType t = v.toTensor().scalar_type();
      if (!at::isFloatingType(t)) continue;
      mixed = mixed || (widest && t != *widest);
      if (!widest || c10::elementSize(t) > c10::elementSize(*widest)) widest = t;
    }
    const std::string& name = op.schema().name();
    const bool backward = name.size() > 9 && name.compare(name.size() - 9, 9, "_backward") == 0;
    if (!mixed || !backward || writes_an_argument(op.schema())) throw;
    torch::jit::Stack cast;
    for (const auto& v : inputs) {
      bool recast = v.isTensor() && v.toTensor().defined() &&
                    at::isFloatingType(v.toTensor().scalar_type());
      cast.push_back(recast ? c10::IValue(v.toTensor().to(*widest)) : v);
    }
    std::exception_ptr first_error = std::current_exception();
    try {
      op.callBoxed(&cast);
    } catch (const c10::Error&) {
      std::rethrow_exception(first_error);  // the CPU's own complaint
    }
    *out = std::move(cast);
    return true;
  }
}

int return_named(const c10::FunctionSchema& schema, const char* name) {
  for (size_t i = 0; i < schema.returns().size(); i++)
    if (schema.returns()[i].name() == name) return static_cast<int>(i);
  return -1;
}

// Results a correct device may give otherwise than the CPU, made
// comparable (dev and ref: the single-tensor results by index):
//  - singular vectors (_linalg_svd's U, Vh) and eigenvectors (eigh's) are
//    unique only up to each vector's sign, and within a repeated value up
//    to any rotation: what compares is the matrix they make again (U diag(S)
//    Vh, Q diag(L) Q^H, in U's or Q's place), the values as they are;
//  - median, nanmedian, mode, kthvalue: the index of a tie (below);
//  - where a factorization failed (a nonzero `info`: not positive-definite,
//    singular), its other results are unspecified (LAPACK leaves a partial
//    factor, XLA NaN): only the batch elements whose info is 0 compare.
void make_comparable(const c10::FunctionSchema& schema, const torch::jit::Stack& inputs,
                     std::vector<at::Tensor>& dev, std::vector<at::Tensor>& ref) {
  auto usable_any = [&](int i) {
    return i >= 0 && i < static_cast<int>(dev.size()) && i < static_cast<int>(ref.size()) &&
           dev[i].defined() && ref[i].defined() && dev[i].sizes() == ref[i].sizes();
  };
  auto usable = [&](int i) { return usable_any(i) && dev[i].numel() > 0 && dev[i].dim() >= 2; };
  int u = return_named(schema, "U"), vh = return_named(schema, "Vh"), sv = return_named(schema, "S");
  int q = return_named(schema, "eigenvectors"), l = return_named(schema, "eigenvalues");
  auto remade = [](const at::Tensor& left, const at::Tensor& values, const at::Tensor& right) {
    int64_t k = values.size(-1);
    return (left.cpu().narrow(-1, 0, k) * values.cpu().unsqueeze(-2).to(left.scalar_type())).matmul(
        right.cpu().narrow(-2, 0, k));
  };
  if (schema.name() == "aten::_linalg_svd" && usable(u) && usable(vh) && sv >= 0) {
    dev[u] = remade(dev[u], dev[sv], dev[vh]);
    ref[u] = remade(ref[u], ref[sv], ref[vh]);
    dev[vh] = ref[vh] = at::empty({0});
  }
  if (schema.name() == "aten::_linalg_eigh" && usable(q) && l >= 0) {
    dev[q] = remade(dev[q], dev[l], dev[q].cpu().mH());
    ref[q] = remade(ref[q], ref[l], ref[q].mH());
  }
  // median, nanmedian, mode, kthvalue: with ties, which index is
  // implementation-defined; the input at the device's indices compares
  // with the CPU's values.
  int vals = return_named(schema, "values"), idx = return_named(schema, "indices");
  const std::string& op = schema.name();
  if ((op == "aten::median" || op == "aten::nanmedian" || op == "aten::mode" ||
       op == "aten::kthvalue") && vals >= 0 && usable_any(idx) && !inputs.empty() &&
      inputs[0].isTensor()) {
    const at::Tensor& self = inputs[0].toTensor();
    auto dim_arg = schema.argumentIndexWithName("dim");
    auto keep_arg = schema.argumentIndexWithName("keepdim");
    if (dim_arg && self.dim() > 0) {
      int64_t dim = c10::maybe_wrap_dim(inputs[*dim_arg].toInt(), self.dim());
      bool keep = keep_arg && inputs[*keep_arg].toBool();
      at::Tensor i = dev[idx].cpu();
      at::Tensor picked = self.gather(dim, keep ? i : i.unsqueeze(dim));
      dev[idx] = keep ? picked : picked.squeeze(dim);
      ref[idx] = ref[vals];
    }
  }
  int info = return_named(schema, "info");
  if (info < 0 || info >= static_cast<int>(ref.size()) || !ref[info].defined()) return;
  at::Tensor ok = ref[info].eq(0);
  if (ok.all().item<bool>()) return;
  for (size_t r = 0; r < dev.size() && r < ref.size(); r++) {
    if (static_cast<int>(r) == info || !dev[r].defined() || !ref[r].defined()) continue;
    if (dev[r].dim() < ok.dim() || dev[r].sizes().slice(0, ok.dim()) != ok.sizes()) continue;
    dev[r] = dev[r].cpu().index({ok});
    ref[r] = ref[r].index({ok});
  }
}

// The shadow run: `ref_stack` holds the CPU inputs (consumed), `results`
// the device op's returns, `mutated` the device arguments it wrote.
void shadow_compare(const c10::OperatorHandle& op, const std::string& name,
                    torch::jit::Stack ref_inputs, const torch::jit::Stack& device_inputs,
                    const torch::jit::Stack& results) {
  const auto& schema = op.schema();
  std::string what = describe_inputs(device_inputs);
  torch::jit::Stack ref_stack;
  if (!run_reference(op, ref_inputs, &ref_stack)) {
    tpu_metrics_add("shadow_skipped_ops", 1);
    return;
  }
  std::optional<torch::jit::Stack> meta;  // made at the first difference
  std::vector<at::Tensor> dev_one, ref_one;   // single-tensor results, by index
  for (size_t r = 0; r < results.size() && r < ref_stack.size(); r++) {
    dev_one.push_back(results[r].isTensor() ? results[r].toTensor() : at::Tensor());
    ref_one.push_back(ref_stack[r].isTensor() ? ref_stack[r].toTensor() : at::Tensor());
  }
  make_comparable(schema, ref_inputs, dev_one, ref_one);
  // Failed factorizations' leftovers (solving with a singular LU) hold
  // infinities and NaNs in an order of operations' own way.
  const bool linalg = schema.name().rfind("aten::linalg_", 0) == 0 ||
                      schema.name().rfind("aten::_linalg_", 0) == 0;
  for (size_t r = 0; r < results.size() && r < ref_stack.size(); r++) {
    auto dev = dev_one[r].defined() ? std::vector<at::Tensor>{dev_one[r]} : tensors_in(results[r]);
    auto ref = ref_one[r].defined() ? std::vector<at::Tensor>{ref_one[r]} : tensors_in(ref_stack[r]);
    for (size_t k = 0; k < dev.size() && k < ref.size(); k++) {
      std::vector<at::Tensor> m;
      if (dev[k].defined() && ref[k].defined() &&
          (dev[k].scalar_type() != ref[k].scalar_type() || dev[k].sizes() != ref[k].sizes())) {
        if (!meta) meta = meta_results(op, device_inputs);
        if (r < meta->size()) m = tensors_in((*meta)[r]);
      }
      std::string diff = compare(dev[k], ref[k], k < m.size() ? &m[k] : nullptr, linalg);
      TORCH_CHECK(diff.empty(), "torchtpu shadow check: ", name, " output ", r,
                  dev.size() > 1 ? "[" + std::to_string(k) + "]" : std::string(),
                  " differs from the CPU: ", diff, " (inputs: ", what, ")");
    }
  }
  // Arguments the op writes (in-place, out=, running stats) must agree too.
  for (size_t i = 0; i < schema.arguments().size(); i++) {
    const auto* info = schema.arguments()[i].alias_info();
    if (!info || !info->isWrite()) continue;
    auto dev = tensors_in(device_inputs[i]);
    auto ref = tensors_in(ref_inputs[i]);
    for (size_t k = 0; k < dev.size() && k < ref.size(); k++) {
      std::string diff = compare(dev[k], ref[k]);
      TORCH_CHECK(diff.empty(), "torchtpu shadow check: ", name, " argument '",
                  schema.arguments()[i].name(), "' differs from the CPU after the op: ", diff,
                  " (inputs: ", what, ")");
    }
  }
  tpu_metrics_add("shadow_checked_ops", 1);
}

bool needs_rng(const std::string& name) {
  const tpu_lowering_t* row = tpu_lowering_find_row(name.c_str());
  return row && (row->flags & TPU_LOWER_NEEDS_RNG);
}

}  // namespace

EagerMode eager_mode() {
  int m = t_mode_override >= 0 ? t_mode_override : process_mode();
  return static_cast<EagerMode>(m);
}

void set_eager_mode(const std::string& mode, bool this_thread_only) {
  bool ok = false;
  EagerMode m = parse_mode(mode, &ok);
  TORCH_CHECK_VALUE(ok, "torchtpu: unknown eager mode '", mode,
                    "'; expected 'strict', 'debug' or 'defer_and_fuse'");
  if (this_thread_only) t_mode_override = static_cast<int>(m);
  else g_mode.store(static_cast<int>(m));
}

void clear_thread_eager_mode() { t_mode_override = -1; }

std::string thread_eager_mode_override() {
  return t_mode_override >= 0 ? eager_mode_name(static_cast<EagerMode>(t_mode_override)) : "";
}

std::string eager_mode_name(EagerMode mode) {
  switch (mode) {
    case EagerMode::kDebug: return "debug";
    case EagerMode::kDeferAndFuse: return "defer_and_fuse";
    default: return "strict";
  }
}

DeferBarrier::DeferBarrier() : previous_(tpu_defer_set_thread_reason(TPU_DEFER_BARRIER)) {}
DeferBarrier::~DeferBarrier() {
  tpu_defer_set_thread_reason(static_cast<tpu_defer_reason_t>(previous_));
}

std::string get_eager_mode_name() { return eager_mode_name(eager_mode()); }

bool debug_shadow() {
  int s = g_shadow.load(std::memory_order_relaxed);
  if (s >= 0) return s;
  int from_env = tpu_env_get_int("TORCHTPU_DEBUG_SHADOW", 0) != 0;
  int expected = -1;
  g_shadow.compare_exchange_strong(expected, from_env);
  return g_shadow.load();
}

void set_debug_shadow(bool on) { g_shadow.store(on ? 1 : 0); }

// Debug mode's boxed kernel: index checks on the host, the op (on the
// device, synchronously, or on the CPU fallback), then the shadow check.
void debug_boxed_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const std::string name = op_name_of(op);
  const size_t n = op.schema().arguments().size();
  try {
    check_placement(op, torch::jit::last(*stack, n));
    const bool shadow = debug_shadow() && !needs_rng(name);
    const bool index_op = is_index_op(op.schema().name());
    std::optional<torch::jit::Stack> host;
    if (shadow || index_op) host = host_inputs(*stack, n);
    if (index_op && !shadow) {
      // PyTorch's CPU kernel checks the indices and raises as on the CPU.
      torch::jit::Stack check = *host;
      op.callBoxed(&check);
    }
    torch::jit::Stack device_inputs(stack->end() - static_cast<std::ptrdiff_t>(n), stack->end());
    if (!try_run_on_device(op, stack)) {
      cpu_fallback(op, stack);
      return;  // ran on the CPU: nothing to shadow
    }
    if (shadow) {
      torch::jit::Stack results(stack->end() - static_cast<std::ptrdiff_t>(op.schema().returns().size()),
                                stack->end());
      shadow_compare(op, name, std::move(*host), device_inputs, results);
    }
  } catch (c10::Error& e) {
    std::string where = python_location();
    e.add_context("torchtpu debug mode: raised by " + name +
                  (where.empty() ? std::string() : " at " + where));
    throw;
  }
}

}  // namespace torchtpu
