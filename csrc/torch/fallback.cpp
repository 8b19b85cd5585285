// CPU fallback for ops without a tpu lowering: copy inputs to the CPU, run
// PyTorch's CPU kernel, copy results back. Counted per op in the metrics
// ("fallback::aten::<op>"), warned once per op, or refused with
// TORCHTPU_FALLBACK=error.
#include <ATen/ATen.h>
#include <ATen/native/CPUFallback.h>
#include <torch/library.h>

#include <ATen/core/dispatch/Dispatcher.h>

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_set>

#include "args.h"
#include "common.h"
#include "placement.h"

extern "C" {
#include "core/env.h"
#include "core/lower/lowering.h"
#include "core/metrics.h"
}

namespace torchtpu {

namespace {
thread_local int t_quiet_depth = 0;
std::mutex g_warned_lock;
std::unordered_set<std::string> g_warned;
}  // namespace

// Printing a tensor runs a handful of ops (abs, masked_select, ...) whose
// fallback warnings would only be noise to the user; Python mutes them there.
void set_fallback_quiet(bool quiet) { t_quiet_depth += quiet ? 1 : -1; }

namespace {

enum class Policy { kWarn, kSilent, kError };

Policy policy() {
  static const Policy value = [] {
    std::string text = tpu_env_get("TORCHTPU_FALLBACK");
    if (text == "error") return Policy::kError;
    if (text == "silent") return Policy::kSilent;
    return Policy::kWarn;
  }();
  return value;
}

}  // namespace

bool try_run_on_device(const c10::OperatorHandle& op, torch::jit::Stack* stack);
void cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack);

namespace {

// PyTorch's fallback copies each tensor argument to the host on its own, so
// two arguments sharing device memory become two host tensors: an op that
// writes one while reading the other (a1.expand(1).add_(a1)) then neither
// sees CPU's overlap checks nor reads what it writes. When a written
// argument shares its storage with another argument, copy each shared
// storage once, make the host arguments views of that one copy as they are
// of the device storage, run the CPU kernel, and write the storages back.
// Only for ops whose results are all their written arguments (in-place and
// out= ops): there aliasing is what decides the result.
bool run_aliased_on_cpu(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& schema = op.schema();
  for (const auto& r : schema.returns())
    if (!r.alias_info() || !r.alias_info()->isWrite()) return false;
  const size_t n = schema.arguments().size();
  auto args = torch::jit::last(*stack, n);
  std::vector<const c10::StorageImpl*> written;
  for (size_t i = 0; i < n; i++) {
    const auto* alias = schema.arguments()[i].alias_info();
    if (alias && alias->isWrite() && args[i].isTensor() && args[i].toTensor().defined())
      written.push_back(args[i].toTensor().storage().unsafeGetStorageImpl());
  }
  bool shared = false;
  for (size_t i = 0; i < n && !shared; i++) {
    if (args[i].isTensorList() || args[i].isOptionalTensorList()) {
      for (const c10::IValue& e : args[i].toListRef())
        if (e.isTensor())
          for (const auto* w : written)
            shared |= e.toTensor().storage().unsafeGetStorageImpl() == w;
      continue;
    }
    if (!args[i].isTensor() || !args[i].toTensor().defined()) continue;
    const auto* alias = schema.arguments()[i].alias_info();
    if (alias && alias->isWrite()) continue;
    for (const auto* w : written) shared |= args[i].toTensor().storage().unsafeGetStorageImpl() == w;
  }
  if (!shared) return false;
  for (size_t i = 0; i < n; i++)  // lists keep PyTorch's path (rare; not aliased above)
    if (args[i].isTensorList() || args[i].isOptionalTensorList()) return false;
  // One host copy per device storage, as bytes.
  std::vector<std::pair<const c10::StorageImpl*, at::Tensor>> images;
  auto image_of = [&](const at::Tensor& t) {
    const auto* impl = t.storage().unsafeGetStorageImpl();
    for (auto& [k, v] : images)
      if (k == impl) return v;
    at::Tensor bytes = at::empty({0}, t.options().dtype(at::kByte))
                           .set_(t.storage(), 0, {static_cast<int64_t>(t.storage().nbytes())}, {1});
    at::Tensor host = bytes.cpu();
    images.emplace_back(impl, host);
    return host;
  };
  std::vector<at::Tensor> originals(n);
  for (size_t i = 0; i < n; i++) {
    if (!args[i].isTensor() || !args[i].toTensor().defined()) continue;
    const at::Tensor t = args[i].toTensor();
    if (!t.device().is_privateuseone()) continue;
    originals[i] = t;
    at::Tensor image = image_of(t);
    (*stack)[stack->size() - n + i] =
        at::empty({0}, image.options().dtype(t.scalar_type()))
            .set_(image.storage(), t.storage_offset(), t.sizes(), t.strides());
  }
  op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
  // Every written storage goes back whole (its image took every write).
  for (const auto* w : written)
    for (auto& [k, v] : images)
      if (k == w) {
        for (size_t i = 0; i < n; i++)
          if (originals[i].defined() && originals[i].storage().unsafeGetStorageImpl() == k) {
            const at::Tensor& t = originals[i];
            at::empty({0}, t.options().dtype(at::kByte))
                .set_(t.storage(), 0, {static_cast<int64_t>(t.storage().nbytes())}, {1})
                .copy_(v);
            break;
          }
      }
  // The results are the written arguments: hand back the device tensors.
  const size_t nret = schema.returns().size();
  for (size_t r = 0; r < nret; r++) {
    const auto* ra = schema.returns()[r].alias_info();
    for (size_t i = 0; i < n; i++) {
      const auto* aa = schema.arguments()[i].alias_info();
      if (aa && originals[i].defined() && aa->beforeSets() == ra->beforeSets()) {
        (*stack)[stack->size() - nret + r] = originals[i];
        break;
      }
    }
  }
  return true;
}

// PyTorch's fallback copies a tensor argument to the host with to(cpu),
// which keeps the layout only of a dense tensor: an expanded or strided
// argument arrives contiguous, and a CPU kernel whose result follows its
// inputs' layout (TensorIterator) then gives other strides than CPU would
// (bool a.expand(4, 3) + b.t()). For functional ops with such an argument,
// the host arguments are views, with the device tensors' sizes and strides,
// of a host copy of the storage span each one covers; results go to the
// device with their layout.
bool run_strided_on_cpu(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& schema = op.schema();
  for (const auto& a : schema.arguments())
    if (a.alias_info() && a.alias_info()->isWrite()) return false;
  for (const auto& r : schema.returns())
    if (r.alias_info()) return false;
  const size_t n = schema.arguments().size();
  auto args = torch::jit::last(*stack, n);
  bool strided = false;
  std::optional<c10::Device> device;
  for (size_t i = 0; i < n; i++) {
    if (args[i].isTensorList() || args[i].isOptionalTensorList()) return false;
    if (!args[i].isTensor() || !args[i].toTensor().defined()) continue;
    const at::Tensor& t = args[i].toTensor();
    if (!t.device().is_privateuseone()) continue;
    if (!device) device = t.device();
    strided |= !t.is_non_overlapping_and_dense();
  }
  if (!strided) return false;
  for (size_t i = 0; i < n; i++) {
    if (!args[i].isTensor() || !args[i].toTensor().defined()) continue;
    const at::Tensor t = args[i].toTensor();
    if (!t.device().is_privateuseone()) continue;
    at::Tensor host;
    if (t.numel() == 0) {
      host = at::empty_strided(t.sizes(), t.strides(), t.options().device(at::kCPU));
    } else {
      int64_t span = 1;
      for (int64_t d = 0; d < t.dim(); d++) span += (t.size(d) - 1) * t.stride(d);
      const int64_t es = static_cast<int64_t>(t.element_size());
      at::Tensor image = at::empty({0}, t.options().dtype(at::kByte))
                             .set_(t.storage(), t.storage_offset() * es, {span * es}, {1})
                             .cpu();
      host = at::empty({0}, image.options().dtype(t.scalar_type()))
                 .set_(image.storage(), 0, t.sizes(), t.strides());
    }
    (*stack)[stack->size() - n + i] = host;
  }
  op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
  auto to_device = [&](const at::Tensor& r) {
    return r.defined() && r.device().is_cpu() ? r.to(*device) : r;
  };
  const size_t nret = schema.returns().size();
  for (size_t r = 0; r < nret; r++) {
    c10::IValue& v = (*stack)[stack->size() - nret + r];
    if (v.isTensor()) {
      v = to_device(v.toTensor());
    } else if (v.isTensorList()) {
      std::vector<at::Tensor> moved;
      for (const at::Tensor& e : v.toTensorVector()) moved.push_back(to_device(e));
      v = c10::IValue(moved);
    }
  }
  return true;
}

}  // namespace

// Every op without its own kernel lands here: the lowering table first,
// then the CPU.
void debug_boxed_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack);

namespace {
// The tensors of the Tensor[] arguments an op writes (the _foreach_*_ ops),
// with their version counters before the call.
std::vector<std::pair<at::Tensor, uint32_t>> written_lists(const c10::OperatorHandle& op,
                                                         const torch::jit::Stack& stack) {
  std::vector<std::pair<at::Tensor, uint32_t>> out;
  const auto& args = op.schema().arguments();
  for (size_t i = 0; i < args.size(); i++) {
    const auto* info = args[i].alias_info();
    if (!info || !info->isWrite()) continue;
    const c10::IValue& v = stack[stack.size() - args.size() + i];
    if (!v.isTensorList()) continue;
    for (const at::Tensor& t : v.toTensorVector())
      if (t.defined()) out.emplace_back(t, t._version());
  }
  return out;
}

void run_op(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  if (eager_mode() == EagerMode::kDebug) return debug_boxed_kernel(op, stack);
  if (try_run_on_device(op, stack)) return;
  cpu_fallback(op, stack);
}
}  // namespace

void tpu_boxed_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  check_not_forked();
  // A write bumps the tensor's version counter, so autograd sees a saved
  // tensor modified and caches keyed by version (torchtpu.spmd's shards)
  // see new contents. ADInplaceOrView bumps a written Tensor argument but
  // not the elements of a written Tensor[] (CUDA's foreach kernels bump
  // them themselves): an optimizer's foreach step left parameters at their
  // old version.
  auto lists = written_lists(op, *stack);
  run_op(op, stack);
  for (auto& [t, before] : lists)
    if (t._version() == before) t.unsafeGetTensorImpl()->bump_version();
}

void cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& name = op.schema().operator_name();
  std::string full = name.name;
  if (!name.overload_name.empty()) full += "." + name.overload_name;
  // Placement is decided here, never by the fallback: mixed devices raise
  // as on CUDA before anything is copied.
  check_placement(op, torch::jit::last(*stack, op.schema().arguments().size()));
  // A copy is not a view: a view op without a tpu kernel is an error.
  for (const auto& r : op.schema().returns())
    TORCH_CHECK_NOT_IMPLEMENTED(!r.alias_info() || r.alias_info()->isWrite(), "torchtpu: ",
                                full, " returns a view and has no tpu kernel; running it on "
                                "the CPU would return a copy, so it is refused");
  const bool lowered = tpu_lowering_find(name.name.c_str()) != nullptr;
  Policy p = policy();
  TORCH_CHECK_NOT_IMPLEMENTED(
      p != Policy::kError, "torchtpu: ", full,
      lowered ? " is not lowered for these arguments" : " has no tpu lowering",
      " and TORCHTPU_FALLBACK=error forbids running it on the CPU");
  tpu_metrics_add(("fallback::" + full).c_str(), 1);
  if (p == Policy::kWarn && t_quiet_depth == 0) {
    bool first;
    {
      std::lock_guard<std::mutex> guard(g_warned_lock);
      first = g_warned.insert(full).second;
    }
    if (first)
      TORCH_WARN("torchtpu: ", full,
                 lowered ? " is not lowered for these arguments (see "
                           "torchtpu.metrics.fallback_reasons())"
                         : " has no tpu lowering yet",
                 "; running it on the CPU (this copies its tensors to the host and back)");
  }
  // The CPU needs the inputs' contents: a pending deferred run flushes here.
  DeferBarrier barrier;
  if (run_aliased_on_cpu(op, stack) || run_strided_on_cpu(op, stack)) return;
  at::native::cpu_fallback(op, stack);
}

namespace {
TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&tpu_boxed_kernel>());
}
}  // namespace
}  // namespace torchtpu

namespace torchtpu {
namespace {
// Ops that must keep PyTorch's own kernels even though the table has a row
// for their base name: copy_ routes host<->device copies through
// _copy_from, and _to_copy may change device.
bool keep_pytorch_kernel(const std::string& base) {
  return base == "copy" || base == "_to_copy" || base == "to";
}
}  // namespace

// Registers the boxed kernel directly for every aten overload the table
// lowers. Without this, structured functional ops (add.Tensor, ...) reach
// the backend through a composite that allocates an output and calls the
// .out overload: two programs per op instead of one. Overloads with a
// CompositeImplicitAutograd kernel are left alone (their decompositions
// carry autograd). Returns how many were registered.
int register_lowered_ops() {
  static std::unique_ptr<torch::Library> lib;
  static int registered = 0;
  if (lib) return registered;
  lib = std::make_unique<torch::Library>(torch::Library::IMPL, "aten",
                                         c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
  auto& dispatcher = c10::Dispatcher::singleton();
  for (const c10::OperatorName& name : dispatcher.getAllOpNames()) {
    if (name.name.rfind("aten::", 0) != 0) continue;
    std::string base = name.name.substr(6);
    if (!base.empty() && base.back() == '_' && !(base.size() > 2 && base[base.size() - 2] == '_'))
      base.pop_back();
    if (keep_pytorch_kernel(base) || !tpu_lowering_find(name.name.c_str())) continue;
    auto op = dispatcher.findOp(name);
    if (!op || !op->hasSchema()) continue;
    if (op->hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd) ||
        op->hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1))
      continue;
    // Factories (no tensor argument) keep PyTorch's composite, which
    // allocates on the requested device and calls the .out overload.
    bool takes_tensor = false;
    for (const auto& arg : op->schema().arguments()) takes_tensor |= holds_tensors(classify(arg));
    if (!takes_tensor) continue;
    std::string schema_name = name.name + (name.overload_name.empty() ? "" : "." + name.overload_name);
    lib->impl(schema_name.c_str(), torch::CppFunction::makeFromBoxedFunction<&tpu_boxed_kernel>());
    registered++;
  }
  return registered;
}
}  // namespace torchtpu
