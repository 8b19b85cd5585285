// The boxed kernel behind every tpu op: ATen arguments -> C descriptors ->
// the eager engine (csrc/core/eager.c). On a cache miss the outputs'
// metadata comes from PyTorch's meta kernel (once per key); ops the table
// does not lower, or calls a lowering declines, go to the CPU fallback.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/Dispatch_v2.h>
#include <ATen/EmptyTensor.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/TensorIterator.h>
#include <ATen/native/TypeProperties.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/native/CPUFallback.h>
#include <torch/library.h>

#include <c10/core/DeviceGuard.h>
#include <c10/util/SmallVector.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <deque>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "args.h"
#include "common.h"
#include "placement.h"

extern "C" {
#include "core/eager.h"
#include "core/metrics.h"
#include "core/runtime.h"
}

namespace torchtpu {
void cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack);

namespace {

using c10::TypeKind;

bool is_tpu(const at::Tensor& t) { return t.defined() && t.device().is_privateuseone(); }

// What the boxed path needs to know about an operator, computed on its
// first call: its name for the engine, whether the table lowers it, and
// how to read each argument.
// CPU kernels read some numbers with Scalar::to<scalar_t>(), which refuses
// a value the dtype cannot hold ("value cannot be converted to type uint8_t
// without overflow"): kSelf ops convert to self's dtype (fill_,
// masked_fill_, threshold...), kResult ops to the computation dtype of
// their operands (clamp's limits, pow's exponent, add's alpha...).
// kSelfOpmath ops are float kernels that convert to float for float16 and
// bfloat16 (lerp's weight, leaky_relu's slope, addcmul's value...).
// kRange factories (linspace, logspace) convert start and end to their
// dtype, when they make at least one element.
enum class ScalarFit { kNone, kSelf, kSelfOpmath, kResult, kResultOpmath, kRange };

ScalarFit scalar_fit_of(const std::string& name) {
  std::string base = name.substr(0, name.find('.'));
  if (base.size() > 1 && base.back() == '_') base.pop_back();
  static const std::pair<const char*, ScalarFit> kOps[] = {
      {"aten::fill", ScalarFit::kSelf},          {"aten::masked_fill", ScalarFit::kSelf},
      {"aten::index_fill", ScalarFit::kSelf},    {"aten::scatter", ScalarFit::kSelf},
      {"aten::threshold", ScalarFit::kSelf},     {"aten::hardtanh", ScalarFit::kSelf},
      {"aten::full_like", ScalarFit::kSelf},     {"aten::new_full", ScalarFit::kSelf},
      {"aten::full", ScalarFit::kSelf},
      {"aten::scalar_tensor", ScalarFit::kSelfOpmath},
      {"aten::lerp", ScalarFit::kSelfOpmath},    {"aten::leaky_relu", ScalarFit::kSelfOpmath},
      {"aten::elu", ScalarFit::kSelfOpmath},     {"aten::celu", ScalarFit::kSelfOpmath},
      {"aten::hardshrink", ScalarFit::kSelfOpmath}, {"aten::softshrink", ScalarFit::kSelfOpmath},
      {"aten::softplus", ScalarFit::kSelfOpmath},
      {"aten::clamp", ScalarFit::kResult},       {"aten::clamp_min", ScalarFit::kResult},
      {"aten::clamp_max", ScalarFit::kResult},   {"aten::pow", ScalarFit::kResult},
      {"aten::add", ScalarFit::kResult},         {"aten::sub", ScalarFit::kResult},
      {"aten::rsub", ScalarFit::kResult},
      {"aten::addcmul", ScalarFit::kResultOpmath}, {"aten::addcdiv", ScalarFit::kResultOpmath},
      {"aten::linspace", ScalarFit::kRange},     {"aten::logspace", ScalarFit::kRange}};
  for (const auto& [k, fit] : kOps)
    if (base == k) return fit;
  return ScalarFit::kNone;
}

struct OpFacts {
  std::string name;  // "aten::add.Tensor"
  bool lowered = false;
  bool foreach = false;
  // Integer division, modulo or rounding division: a zero divisor raises
  // (see check_integer_divisor).
  bool int_division = false;
  // pow(Tensor, Scalar): an integer self to a negative integer power raises
  // (see check_pow_exponent).
  bool pow_scalar = false;
  // Ops whose CPU kernels read their operands' values to refuse bad input
  // (multinomial's probabilities, searchsorted's sorter): the same reads
  // before the lowered program runs, a host sync as on CPU and CUDA.
  void (*check_values)(c10::ArrayRef<c10::IValue>) = nullptr;
  // CPU kernels that allow an overlapping (expanded) self: nullptr, "" (no
  // warning) or the op named in PyTorch's deprecation warning.
  const char* overlap_ok = nullptr;
  // How CPU's kernel converts this op's fill / limit / alpha numbers (see
  // check_scalars_fit).
  ScalarFit scalar_fit = ScalarFit::kNone;
  // arange / range: the result's size comes from the values of run-time
  // Scalar arguments, which the cache key does not hold, so the out= is
  // sized before the lookup (presize_range).
  bool sized_by_scalars = false;
  // out= kernels that refuse any overlap of out with an input, a full one
  // included (CPU's assert_no_overlap: cat, gather, index_select, take).
  bool no_overlap = false;
  // Which bounds check runs after the op (record_index_check): decided
  // once here, so ops without one pay nothing per call.
  int index_check = 0;  // IndexCheck
  int index_rule = -1;  // kIndexRules entry for IndexCheck::kRule
  std::vector<ArgClass> args;
};

// The ops whose CPU kernels check their alpha's type (alpha_check).
static bool is_alpha_checked(const std::string& name) {
  std::string base = name.substr(0, name.find('.'));
  if (!base.empty() && base.back() == '_') base.pop_back();
  return base == "aten::add" || base == "aten::sub" || base == "aten::rsub" ||
         base == "aten::_foreach_add" || base == "aten::_foreach_sub";
}

// What the CPU kernels of facts.name do with an expanded self: fill_ and
// zero_ write one value per element; masked_fill_, index_fill_ and
// index_put_ warn that it is deprecated and write anyway.
const char* overlap_policy(const std::string& name) {
  if (name == "aten::fill_.Scalar" || name == "aten::zero_") return "";
  if (name.rfind("aten::masked_fill_.", 0) == 0) return "masked_fill_";
  if (name.rfind("aten::index_fill_.", 0) == 0) return "index_fill_";
  if (name == "aten::index_put_" || name == "aten::_index_put_impl_") return "index_put_";
  return nullptr;
}

bool is_int_division(const std::string& name) {
  const std::string base = name.substr(0, name.find('.'));
  if (base == "aten::div" || base == "aten::div_")
    return name.find("mode") != std::string::npos;  // true division gives floats
  return base == "aten::floor_divide" || base == "aten::floor_divide_" ||
         base == "aten::remainder" || base == "aten::remainder_" || base == "aten::fmod" ||
         base == "aten::fmod_";
}

void check_multinomial(c10::ArrayRef<c10::IValue> inputs);
void check_sorter(c10::ArrayRef<c10::IValue> inputs);
void check_unpool_indices(c10::ArrayRef<c10::IValue> inputs);
void check_logspace_fill(c10::ArrayRef<c10::IValue> inputs);
void check_segment_lengths(c10::ArrayRef<c10::IValue> inputs);
int index_check_of(const std::string& name, int* rule);

// The value check of facts.name, or nullptr.
auto value_check_of(const std::string& name) -> void (*)(c10::ArrayRef<c10::IValue>) {
  if (name == "aten::multinomial" || name == "aten::multinomial.out") return &check_multinomial;
  if (name.rfind("aten::searchsorted.", 0) == 0) return &check_sorter;
  if (name.rfind("aten::max_unpool2d", 0) == 0 || name.rfind("aten::max_unpool3d", 0) == 0)
    return &check_unpool_indices;
  if (name.rfind("aten::logspace", 0) == 0) return &check_logspace_fill;
  if (name == "aten::segment_reduce") return &check_segment_lengths;
  return nullptr;
}

const OpFacts& facts_of(const c10::OperatorHandle& op) {
  // The schema lives in the dispatcher's operator entry: a stable address.
  const void* key = &op.schema();
  // Every op asks: a direct-mapped memo per thread answers without hashing
  // into the map (a collision just asks the map).
  struct Memo {
    const void* key;
    const OpFacts* facts;
  };
  thread_local Memo t_memo[64];
  Memo& memo = t_memo[(reinterpret_cast<uintptr_t>(key) >> 4) % 64];
  if (memo.key == key) return *memo.facts;
  thread_local std::unordered_map<const void*, const OpFacts*> t_facts;
  auto hit = t_facts.find(key);
  if (hit != t_facts.end()) {
    memo = {key, hit->second};
    return *hit->second;
  }
  static std::mutex lock;
  static std::unordered_map<const void*, std::unique_ptr<OpFacts>> all;
  std::lock_guard<std::mutex> guard(lock);
  auto& slot = all[key];
  if (!slot) {
    auto f = std::make_unique<OpFacts>();
    const auto& name = op.schema().operator_name();
    f->name = name.name + (name.overload_name.empty() ? "" : "." + name.overload_name);
    f->lowered = tpu_lowering_find(f->name.c_str()) != nullptr;
    f->foreach = f->name.find("::_foreach_") != std::string::npos;
    f->int_division = is_int_division(f->name);
    f->pow_scalar = f->name == "aten::pow.Tensor_Scalar" || f->name == "aten::pow_.Scalar" ||
                    f->name == "aten::pow.Tensor_Scalar_out";
    f->overlap_ok = overlap_policy(f->name);
    f->check_values = value_check_of(f->name);
    f->scalar_fit = scalar_fit_of(f->name);
    f->sized_by_scalars = f->name.rfind("aten::arange", 0) == 0 || f->name.rfind("aten::range", 0) == 0;
    f->index_check = index_check_of(f->name, &f->index_rule);
    f->no_overlap = f->name == "aten::cat.out" || f->name == "aten::gather.out" ||
                    f->name == "aten::index_select.out" || f->name == "aten::take.out" ||
                    f->name == "aten::stack.out";
    for (const auto& a : op.schema().arguments()) f->args.push_back(classify(a));
    slot = std::move(f);
  }
  t_facts.emplace(key, slot.get());
  memo = {key, slot.get()};
  return *slot;
}

// Global settings that PyTorch's meta kernels or our lowerings read, for
// the engine's key: the default dtype decides the result type of integer
// true division and of int-tensor-with-float-scalar arithmetic; the
// deterministic flags are read by kernels that choose an algorithm.
uint32_t process_state() {
  const auto& ctx = at::globalContext();
  return static_cast<uint32_t>(c10::typeMetaToScalarType(c10::get_default_dtype())) |
         (ctx.deterministicAlgorithms() ? 1u << 8 : 0u) |
         (ctx.deterministicAlgorithmsWarnOnly() ? 1u << 9 : 0u) |
         (ctx.deterministicFillUninitializedMemory() ? 1u << 10 : 0u);
}

// Everything a call needs kept alive while the engine reads it. Builders
// are reused per thread (see BuilderLease) so a cache hit allocates nothing
// here: vectors keep their capacity between calls.
struct CallBuilder {
  const OpFacts* facts = nullptr;
  // Slots 0..num_args-1 are this call's; later ones are kept from earlier
  // calls so next_arg need not value-initialise (zero) a whole slot.
  std::vector<tpu_eager_arg_t> args;
  size_t num_args = 0;
  std::vector<tpu_eager_tensor_t> list;
  ArgStore store;
  int device = -1;
  bool ok = true;  // false: the call cannot run on the device (fallback)
  // A tensor on another device was seen: check_placement decides whether
  // that is an error (as on CUDA) or allowed (CPU indices, a device move).
  bool foreign = false;
  // A tensor with a lazy conjugate or negative bit was seen: the engine
  // reads raw storage, so resolve_lazy_bits materialises it first.
  bool lazy_bits = false;
  std::string why;

  void reset(const OpFacts& f) {
    facts = &f;
    num_args = 0;
    list.clear();
    store.clear();
    device = -1;
    ok = true;
    foreign = false;
    lazy_bits = false;
    why.clear();
  }

  const std::string& op_name() const { return facts->name; }

  void refuse(std::string reason) {
    if (ok) why = std::move(reason);
    ok = false;
  }

  // The next argument slot, its fields zeroed. The dimension arrays (most
  // of a slot's ~650 bytes) keep old values: every reader stops at the
  // rank or count written with them.
  tpu_eager_arg_t& next_arg() {
    if (num_args == args.size()) {
      args.emplace_back();
      return args[num_args++];
    }
    tpu_eager_arg_t& a = args[num_args++];
    tpu_lower_arg_t& l = a.lower;
    l.kind = TPU_ARG_NONE;
    l.type.dtype = tpu_dtype_t{};
    l.type.rank = 0;
    l.wrapped_number = false;
    l.num_tensors = 0;
    l.i = 0;
    l.f = 0;
    l.num_ints = 0;
    l.dtype = tpu_dtype_t{};
    l.str = nullptr;
    a.tensor.storage = nullptr;
    a.tensor.view.dtype = tpu_dtype_t{};
    a.tensor.view.rank = 0;
    a.tensor.view.offset = 0;
    a.tensor.storage_numel = 0;
    a.list_start = 0;
    std::memset(a.scalar, 0, sizeof a.scalar);
    a.scalars = nullptr;
    return a;
  }

  void describe(const at::Tensor& t, tpu_eager_tensor_t* d) {
    if (!is_supported_dtype(t.scalar_type())) {
      refuse("unsupported dtype");
      return;
    }
    const int rank = static_cast<int>(t.dim());
    if (rank > TPU_HLO_MAX_RANK) {
      refuse("rank too high");
      return;
    }
    const int index = t.device().index();
    if (device < 0) device = index;
    else if (device != index) {
      foreign = true;
      refuse("tensors on different tpu devices");
    }
    const c10::Storage& storage = t.storage();
    d->storage = storage_of(storage);
    d->view.dtype = to_tpu_dtype(t.scalar_type());
    d->view.rank = rank;
    const int64_t* sizes = t.sizes().data();
    const int64_t* strides = t.strides().data();
    for (int i = 0; i < rank; i++) {
      d->view.sizes[i] = sizes[i];
      d->view.strides[i] = strides[i];
    }
    d->view.offset = t.storage_offset();
    d->storage_numel = static_cast<int64_t>(storage.nbytes() / t.itemsize());
  }

  void add_tensor(const at::Tensor& t) {
    tpu_eager_arg_t& a = next_arg();
    if (!t.defined()) {
      a.lower.kind = TPU_ARG_NONE;
    } else if (is_tpu(t)) {
      a.lower.kind = TPU_ARG_TENSOR;
      lazy_bits |= t.is_conj() || t.is_neg();
      describe(t, &a.tensor);
      a.lower.type.dtype = a.tensor.view.dtype;
      a.lower.type.rank = a.tensor.view.rank;
      std::memcpy(a.lower.type.dims, a.tensor.view.sizes,
                  sizeof(int64_t) * static_cast<size_t>(a.tensor.view.rank));
    } else if (t.device().is_cpu() && t.dim() == 0 && is_supported_dtype(t.scalar_type())) {
      // A CPU scalar tensor (wrapped Python number or 0-dim tensor): a
      // run-time argument.
      a.lower.kind = TPU_ARG_SCALAR;
      a.lower.type = tpu_hlo_type_scalar(to_tpu_dtype(t.scalar_type()));
      a.lower.wrapped_number = t.unsafeGetTensorImpl()->is_wrapped_number();
      std::memcpy(a.scalar, t.const_data_ptr(), t.itemsize());
    } else if (t.device().is_cpu() && t.dim() == 1 && facts->foreach) {
      // _foreach_*.Tensor ops take their per-tensor scalars as a 1-D CPU
      // tensor: run-time scalars, like a ScalarList.
      a.lower.kind = TPU_ARG_SCALARS;
      at::Tensor values = t.to(at::kDouble).contiguous();
      const double* p = values.data_ptr<double>();
      store.scalar_lists.emplace_back(p, p + values.numel());
      a.lower.num_tensors = static_cast<int>(values.numel());
      int64_t n = a.lower.num_tensors;
      a.lower.type = tpu_hlo_type_make(TPU_DTYPE_FLOAT64, 1, &n);
      a.scalars = store.scalar_lists.back().data();
    } else {
      foreign = true;
      refuse("a non-scalar tensor on " + t.device().str());
    }
  }

  // A Tensor[] or Tensor?[] (whose absent elements it leaves out).
  void add_tensors(tpu_eager_arg_t& a, bool optional, c10::ArrayRef<c10::IValue> elems) {
    a.lower.kind = TPU_ARG_TENSORS;
    a.list_start = static_cast<int>(list.size());
    if (optional && elems.size() > TPU_LOWER_MAX_INTS) return refuse("optional tensor list too long");
    // The key reads num_ints positions though only the present ones are
    // written below: the rest must not keep an earlier call's.
    if (optional) std::fill(a.lower.ints, a.lower.ints + elems.size(), 0);
    int present = 0;
    for (size_t i = 0; i < elems.size(); i++) {
      if (elems[i].isNone() || !elems[i].toTensor().defined()) continue;
      const at::Tensor& t = elems[i].toTensor();
      if (!is_tpu(t)) {
        foreign = true;
        refuse("a list tensor on " + t.device().str());
        continue;
      }
      list.emplace_back();
      describe(t, &list.back());
      if (optional) a.lower.ints[present] = static_cast<int64_t>(i);
      present++;
    }
    a.lower.num_tensors = present;
    if (optional) a.lower.num_ints = static_cast<int>(elems.size());
  }

  void add(ArgClass cls, const c10::IValue& v) {
    if (v.isNone()) {
      next_arg().lower.kind = TPU_ARG_NONE;
      return;
    }
    if (cls == ArgClass::kTensor) return add_tensor(v.toTensor());
    tpu_eager_arg_t& a = next_arg();
    if (cls == ArgClass::kTensorList || cls == ArgClass::kOptTensorList)
      return add_tensors(a, cls == ArgClass::kOptTensorList, v.toListRef());
    if (const char* why = to_lower_arg(cls, v, store, a.lower, a.scalar, &a.scalars)) refuse(why);
    // A factory's tpu device says where the call runs.
    if (cls == ArgClass::kDevice && v.isDevice() && v.toDevice().is_privateuseone() && device < 0)
      device = v.toDevice().has_index() ? v.toDevice().index() : current_device();
  }

  tpu_eager_call_t call() {
    tpu_eager_call_t c{};
    c.op_name = facts->name.c_str();
    c.device = device < 0 ? current_device() : device;
    c.num_args = static_cast<int>(num_args);
    c.args = args.data();
    c.num_list = static_cast<int>(list.size());
    c.list = list.data();
    // Debug mode waits for each execution so its errors surface here.
    const EagerMode mode = eager_mode();
    c.synchronous = mode == EagerMode::kDebug;
    // DeferAndFuse records the op in the device's run instead.
    c.defer = mode == EagerMode::kDeferAndFuse;
    c.state = process_state();
    c.precision = matmul_precision();
    return c;
  }
};

// A builder from this thread's pool, one per nesting level (an op's CPU
// fallback or a resize can re-enter the boxed path).
class BuilderLease {
 public:
  BuilderLease() {
    if (t_depth == t_pool.size()) t_pool.push_back(std::make_unique<CallBuilder>());
    builder_ = t_pool[t_depth++].get();
  }
  ~BuilderLease() { t_depth--; }
  BuilderLease(const BuilderLease&) = delete;
  BuilderLease& operator=(const BuilderLease&) = delete;
  CallBuilder& operator*() { return *builder_; }
  CallBuilder* operator->() { return builder_; }

 private:
  static thread_local std::vector<std::unique_ptr<CallBuilder>> t_pool;
  static thread_local size_t t_depth;
  CallBuilder* builder_;
};
thread_local std::vector<std::unique_ptr<CallBuilder>> BuilderLease::t_pool;
thread_local size_t BuilderLease::t_depth = 0;

// ---- meta: the outputs' metadata from PyTorch's meta kernels -------------

// A meta tensor of t's sizes, strides and dtype (storage offset 0).
at::Tensor meta_like(const at::Tensor& t) {
  return at::empty_strided(t.sizes(), t.strides(),
                           at::TensorOptions().dtype(t.scalar_type()).device(at::kMeta));
}

c10::IValue to_meta(const c10::IValue& v) {
  if (v.isDevice() && v.toDevice().is_privateuseone()) return c10::Device(at::kMeta);
  if (v.isTensor()) {
    const at::Tensor& t = v.toTensor();
    if (t.defined() && t.device().is_cpu() && t.dim() == 0 &&
        !t.unsafeGetTensorImpl()->is_wrapped_number()) {
      // A 0-dim CPU tensor: some meta kernels (masked_fill_) want every
      // tensor on one device. Wrapped Python numbers must stay on the CPU.
      return meta_like(t);
    }
    if (!is_tpu(t)) return v;
    at::Tensor m = meta_like(t);
    if (t.storage_offset() != 0) {
      // Same geometry within a storage as large as the real one.
      at::Tensor base = at::empty({static_cast<int64_t>(t.storage().nbytes() / t.itemsize())},
                                  at::TensorOptions().dtype(t.scalar_type()).device(at::kMeta));
      m = base.as_strided(t.sizes(), t.strides(), t.storage_offset());
    }
    return m;
  }
  if (v.isTensorList()) {
    std::vector<at::Tensor> out;
    for (const at::Tensor& t : v.toTensorVector()) out.push_back(to_meta(t).toTensor());
    return out;
  }
  if (v.isList()) {
    auto list = v.toList();
    if (list.elementType()->kind() == TypeKind::OptionalType &&
        unwrap_optional(list.elementType())->kind() == TypeKind::TensorType) {
      c10::List<std::optional<at::Tensor>> out;
      for (size_t i = 0; i < list.size(); i++) {
        c10::IValue e = list.get(i);
        if (e.isNone()) out.push_back(std::nullopt);
        else out.push_back(to_meta(e.toTensor()).toTensor());
      }
      return out;
    }
  }
  return v;
}

struct OutputPlan {
  std::vector<tpu_eager_output_t> outputs;
  // out= arguments the meta kernel resized: the argument index, its new
  // sizes and the strides it gets (empty: contiguous).
  struct Resize {
    int index;
    std::vector<int64_t> sizes, strides;
  };
  std::vector<Resize> resizes;
  // For building the result stack: per schema return, the output indices.
  std::vector<std::vector<int>> per_return;
  // Per schema return: the number an int return (SymInt max_q of the fused
  // attention) gives, from the meta kernel; per_return holds kIntReturn.
  std::vector<int64_t> ints;
};

// per_return's mark for an int return (ReturnPlan::ints holds its value).
constexpr int kIntReturn = -2;

// Which argument (and list element) an alias set names, or -1.
int find_alias_arg(const c10::FunctionSchema& schema, const c10::AliasInfo& info) {
  for (size_t i = 0; i < schema.arguments().size(); i++) {
    const auto* a = schema.arguments()[i].alias_info();
    if (a && a->isWrite() && a->beforeSets() == info.beforeSets()) return static_cast<int>(i);
  }
  return -1;
}

tpu_view_t meta_view(const at::Tensor& m, int64_t* storage_numel) {
  tpu_view_t v{};
  v.dtype = to_tpu_dtype(m.scalar_type());
  v.rank = static_cast<int>(m.dim());
  for (int i = 0; i < v.rank; i++) {
    v.sizes[i] = m.size(i);
    v.strides[i] = m.stride(i);
  }
  v.offset = m.storage_offset();
  *storage_numel = static_cast<int64_t>(at::detail::computeStorageNbytes(
                       m.sizes(), m.strides(), m.itemsize(), m.storage_offset())) /
                   static_cast<int64_t>(m.itemsize());
  return v;
}

// Elementwise ops PyTorch does not tag pointwise whose CPU kernels are one
// TensorIterator over their tensor arguments (found by
// tests/stride_sweep.py --extra).
bool untagged_iterator(const std::string& name) {
  static const char* const kOps[] = {
      "aten::floor_divide",        "aten::elu_backward",        "aten::hardshrink_backward",
      "aten::hardsigmoid_backward", "aten::hardswish",          "aten::hardswish_backward",
      "aten::hardtanh_backward",   "aten::softplus_backward",   "aten::softshrink_backward",
      "aten::leaky_relu_backward", "aten::mse_loss",            "aten::smooth_l1_loss"};
  for (const char* k : kOps)
    if (name == k) return true;
  return false;
}

// The out= overloads with a written composite kernel (not autogenerated)
// that wraps the Scalar and calls the Tensor overload's structured out=
// kernel, which restrides a resized out as a new result.
bool wraps_a_scalar(const c10::OperatorName& name) {
  static const char* const kOverloads[][2] = {
      {"aten::copysign", "Scalar_out"},          {"aten::xlogy", "OutScalar_Self"},
      {"aten::xlogy", "OutScalar_Other"},        {"aten::bitwise_and", "Scalar_out"},
      {"aten::bitwise_or", "Scalar_out"},        {"aten::bitwise_xor", "Scalar_out"},
      {"aten::bitwise_left_shift", "Tensor_Scalar_out"},
      {"aten::bitwise_right_shift", "Tensor_Scalar_out"},
      {"aten::fmod", "Scalar_out"},              {"aten::remainder", "Scalar_out"},
      {"aten::special_xlog1py", "self_scalar_out"},
      {"aten::special_xlog1py", "other_scalar_out"}};
  for (const auto& o : kOverloads)
    if (name.name == o[0] && name.overload_name == o[1]) return true;
  return false;
}

// How CPU lays out a pointwise op's new result.
enum class CpuLayout {
  kMeta,        // as the meta kernel says
  kContiguous,  // allocated contiguous
  kIndex,       // index.Tensor: CPU's iterator over the restrided self
  kIterator,    // by one TensorIterator over its tensor arguments
};

// nonzero_static's result is contiguous. The ops tagged pointwise, and
// out= overloads of those (elu.out is
// untagged, elu is), are laid out by an iterator, but for: masked_fill
// (its self cloned contiguous, then filled: as its meta kernel says);
// pow.Scalar (allocated contiguous, then pow.Tensor_Tensor runs into it);
// an out= overload without its own CPU kernel, autogenerated (the
// functional's result copied into the out resized contiguous).
CpuLayout cpu_layout(const c10::OperatorHandle& op) {
  const auto& name = op.schema().operator_name();
  // Not pointwise: its meta kernel says column-major like nonzero's, CPU's
  // kernel allocates it contiguous.
  if (name.name == "aten::nonzero_static") return CpuLayout::kContiguous;
  if (name.name == "aten::masked_fill") return CpuLayout::kMeta;
  if (name.name == "aten::index" && name.overload_name == "Tensor") return CpuLayout::kIndex;
  if (name.name == "aten::pow" && name.overload_name.rfind("Scalar", 0) == 0)
    return CpuLayout::kContiguous;
  const bool out = op.hasTag(at::Tag::out);
  if (out && !op.hasKernelForDispatchKey(c10::DispatchKey::CPU) && !wraps_a_scalar(name))
    return CpuLayout::kContiguous;
  if (op.hasTag(at::Tag::pointwise) || untagged_iterator(name.name)) return CpuLayout::kIterator;
  if (!out) return CpuLayout::kMeta;
  const std::string& ov = name.overload_name;
  std::string functional = ov == "out" ? "" : ov;
  if (functional.size() > 4 && functional.compare(functional.size() - 4, 4, "_out") == 0)
    functional.resize(functional.size() - 4);
  else if (ov != "out")
    return CpuLayout::kMeta;
  auto f = c10::Dispatcher::singleton().findOp({name.name, functional});
  return f && f->hasTag(at::Tag::pointwise) ? CpuLayout::kIterator : CpuLayout::kMeta;
}

// The tensor arguments of the iterators whose CPU kernels do not take
// them in schema order (an empty name ends the list).
const char* const* iterator_order(const std::string& name) {
  static const char* const kThreshold[] = {"self", "grad_output", ""};
  if (name == "aten::threshold_backward" || name == "aten::leaky_relu_backward") return kThreshold;
  return nullptr;
}

// The result an iterator over `operands` allocates (meta): no dtype,
// device or overlap checks (the meta kernel made those). Undefined if it
// cannot be built.
at::Tensor iterator_result(const std::vector<at::Tensor>& operands, c10::ScalarType dtype) {
  at::TensorIteratorConfig config;
  config.set_check_mem_overlap(false)
      .check_all_same_dtype(false)
      .check_all_same_device(false)
      .declare_static_dtype_and_device(dtype, at::kMeta)
      .add_owned_output(at::Tensor());
  for (const at::Tensor& m : operands) config.add_owned_const_input(m);
  try {
    at::TensorIterator iter = config.build();
    return iter.output(0);
  } catch (const std::exception&) {
    return {};
  }
}

// The strides CPU PyTorch gives a pointwise op's new result: its
// TensorIterator orders the result's dimensions by its operands' strides
// (the first operand with an opinion decides) and allocates it dense in
// that order. Some meta kernels are Python references whose layout rule
// differs (copysign's ref is where(signbit(b), ...), so b's layout wins;
// add with an alpha multiplies first), so eager results would get other
// strides than CPU's. The same iterator, built over meta copies of the
// tensor arguments in schema order (out= arguments left out, as CPU's
// iterator ignores an out= it resizes), gives CPU's answer.
//
// On the CPU the iterator first replaces each operand whose dtype is not
// the common one by a converted copy (`to`, which keeps a dense layout but
// not an expanded or sliced one), so a broadcast operand of another dtype
// orders dimensions as a dense one would; that is done here too. The
// common dtype is the operands' promoted type, or the default float type
// for an integral one when the result is floating (the float ops: sin of
// an int, true division, copysign). where's condition takes no part (only
// a uint8 one becomes bool). native_dropout_backward's CPU kernel is
// grad * mask * scale: the product promotes to no float, and the scale (a
// Python number: an operand of rank 0, which only keeps the iterator off
// its fast path) comes after.
//
// Empty when the meta kernel's layout stands: the op's CPU kernel is no
// such iterator, or the iterator's shape is not `sizes`.
// index.Tensor's result on the CPU: its TensorIterator runs over self
// with the indexed dims replaced by the index shape at stride 0, and the
// index tensors viewed into that shape (ATen's AdvancedIndex; the indexed
// dims moved to the front first when they are not adjacent). Python's meta
// kernel orders the result's dims otherwise for some layouts (fuzz seed
// 1303586: a (1, 1, 2) bool self with strides (1, 2, 1) indexed on dim 1:
// CPU (6, 2, 1), meta (1, 1, 3)). Masks are long indices by now. Empty:
// not such a call (the meta kernel's layout stands).
std::vector<int64_t> index_strides(const torch::jit::Stack& inputs, c10::ScalarType dtype,
                                   c10::IntArrayRef sizes) {
  if (inputs.size() < 2 || !inputs[0].isTensor() || !inputs[1].isList()) return {};
  std::vector<at::Tensor> indices;
  for (const c10::IValue& e : inputs[1].toListRef()) {
    if (e.isNone() || (e.isTensor() && !e.toTensor().defined())) {
      indices.emplace_back();
      continue;
    }
    if (!e.isTensor()) return {};
    indices.push_back(e.toTensor());
  }
  return index_result_strides(inputs[0].toTensor(), indices, dtype, sizes);
}

}  // namespace

// (Shared with torch.compile's layout pass: _compile.py.)
std::vector<int64_t> index_result_strides(const at::Tensor& self,
                                          const std::vector<at::Tensor>& index_list,
                                          c10::ScalarType dtype, c10::IntArrayRef sizes) {
  at::Tensor src = meta_like(self);
  std::vector<at::Tensor> indices;
  for (const at::Tensor& t : index_list) {
    if (!t.defined()) {
      indices.emplace_back();
      continue;
    }
    if (t.scalar_type() == at::kBool || t.scalar_type() == at::kByte) return {};
    indices.push_back(meta_like(t));
  }
  if (indices.size() > static_cast<size_t>(src.dim())) return {};
  {  // broadcast the defined indices together
    std::vector<at::Tensor> defined;
    for (const at::Tensor& t : indices)
      if (t.defined()) defined.push_back(t);
    if (defined.empty()) return {};
    try {
      defined = at::expand_outplace(defined);
    } catch (const std::exception&) {
      return {};
    }
    size_t k = 0;
    for (at::Tensor& t : indices)
      if (t.defined()) t = defined[k++];
  }
  while (indices.size() < static_cast<size_t>(src.dim())) indices.emplace_back();
  // Not adjacent: the indexed dims (in order) first, then the others.
  int runs = 0;
  for (size_t d = 0; d < indices.size(); d++)
    if (indices[d].defined() && (d == 0 || !indices[d - 1].defined())) runs++;
  if (runs > 1) {
    std::vector<int64_t> perm;
    std::vector<at::Tensor> moved;
    for (size_t d = 0; d < indices.size(); d++)
      if (indices[d].defined()) perm.push_back(static_cast<int64_t>(d)), moved.push_back(indices[d]);
    for (size_t d = 0; d < indices.size(); d++)
      if (!indices[d].defined()) perm.push_back(static_cast<int64_t>(d)), moved.emplace_back();
    src = src.permute(perm);
    indices = moved;
  }
  int64_t before = 0, after = 0, indexed = 0;
  c10::IntArrayRef replacement;
  for (const at::Tensor& t : indices) {
    if (t.defined()) {
      indexed++;
      replacement = t.sizes();
    } else if (indexed == 0) {
      before++;
    } else {
      after++;
    }
  }
  std::vector<int64_t> shape(src.sizes().begin(), src.sizes().begin() + before);
  std::vector<int64_t> strides(src.strides().begin(), src.strides().begin() + before);
  shape.insert(shape.end(), replacement.begin(), replacement.end());
  strides.insert(strides.end(), replacement.size(), 0);
  shape.insert(shape.end(), src.sizes().begin() + before + indexed, src.sizes().end());
  strides.insert(strides.end(), src.strides().begin() + before + indexed, src.strides().end());
  std::vector<at::Tensor> operands{src.as_strided(shape, strides, 0)};
  for (const at::Tensor& t : indices) {
    if (!t.defined()) continue;
    std::vector<int64_t> view(static_cast<size_t>(before), 1);
    view.insert(view.end(), t.sizes().begin(), t.sizes().end());
    view.insert(view.end(), static_cast<size_t>(after), 1);
    operands.push_back(t.reshape(view));
  }
  at::Tensor r = iterator_result(operands, dtype);
  if (!r.defined() || r.sizes() != sizes) return {};
  return r.strides().vec();
}

namespace {

std::vector<int64_t> cpu_strides(const c10::OperatorHandle& op,
                                      const torch::jit::Stack& inputs, c10::ScalarType dtype,
                                      c10::IntArrayRef sizes) {
  const auto& schema = op.schema();
  switch (cpu_layout(op)) {
    case CpuLayout::kMeta: return {};
    case CpuLayout::kIndex: return index_strides(inputs, dtype, sizes);
    case CpuLayout::kContiguous: {
      std::vector<int64_t> strides(sizes.size());
      int64_t next = 1;
      for (size_t d = sizes.size(); d-- > 0;) {
        strides[d] = next;
        next *= std::max<int64_t>(sizes[d], 1);
      }
      return strides;
    }
    case CpuLayout::kIterator: break;
  }
  const at::Tensor number = at::empty({}, at::TensorOptions().dtype(dtype).device(at::kMeta));
  const bool is_where = schema.name() == "aten::where";
  const bool float_ops = schema.name() != "aten::native_dropout_backward";
  std::vector<at::Tensor> operands;
  std::vector<bool> promoted;  // takes part in the common dtype
  at::native::ResultTypeState state{};
  for (size_t i = 0; i < schema.arguments().size() && i < inputs.size(); i++) {
    const c10::Argument& arg = schema.arguments()[i];
    const auto* info = arg.alias_info();
    if (info && info->isWrite()) continue;
    const c10::IValue& v = inputs[i];
    if (v.isTensorList() || v.isList()) return {};  // not one iterator over its arguments
    // A memory_format argument (clone's) other than preserve decides the
    // layout itself.
    if (unwrap_optional(arg.real_type())->kind() == TypeKind::MemoryFormatType && !v.isNone() &&
        v.toMemoryFormat() != c10::MemoryFormat::Preserve)
      return {};
    if (!v.isTensor() || !v.toTensor().defined()) continue;
    const at::Tensor& t = v.toTensor();
    const bool takes_part = !(is_where && arg.name() == "condition");
    if (takes_part) state = at::native::update_result_type_state(t, state);
    at::Tensor m = at::empty_strided(t.sizes(), t.strides(),
                                     at::TensorOptions().dtype(t.scalar_type()).device(at::kMeta));
    operands.push_back(m);
    promoted.push_back(takes_part);
  }
  if (operands.empty()) return {};
  c10::ScalarType common = at::native::result_type(state);
  if (float_ops && at::isIntegralType(common, /*includeBool=*/true) &&
      (at::isFloatingType(dtype) || at::isComplexType(dtype)))
    common = c10::typeMetaToScalarType(c10::get_default_dtype());
  for (size_t k = 0; k < operands.size(); k++) {
    at::Tensor& m = operands[k];
    const c10::ScalarType want = promoted[k] ? common : at::kBool;
    if (m.dim() > 0 && m.scalar_type() != want && (promoted[k] || m.scalar_type() == at::kByte))
      m = m.to(want);
  }
  if (const char* const* order = iterator_order(schema.name())) {
    // Reorder by argument name (after their conversions; operands are the tensor arguments
    // present, in schema order).
    std::vector<std::string> names;
    for (size_t i = 0; i < schema.arguments().size() && i < inputs.size(); i++) {
      const auto* info = schema.arguments()[i].alias_info();
      if (info && info->isWrite()) continue;
      if (inputs[i].isTensor() && inputs[i].toTensor().defined())
        names.push_back(schema.arguments()[i].name());
    }
    std::vector<at::Tensor> ordered;
    for (const char* const* n = order; **n; n++)
      for (size_t k = 0; k < names.size(); k++)
        if (names[k] == *n) ordered.push_back(operands[k]);
    if (ordered.size() != operands.size()) return {};
    operands = std::move(ordered);
  }
  at::Tensor out = iterator_result(operands, float_ops ? dtype : common);
  if (!float_ops && out.defined()) out = iterator_result({out.to(dtype), number}, dtype);  // * scale
  if (!out.defined() || out.sizes() != sizes) return {};
  return out.strides().vec();
}

// arange.out resizes a wrong-sized out= with its own warning (CPU's
// arange_out), where its meta kernel would give resize_output's. The size
// comes from arange on the meta device; range's from range. Done before
// the cache lookup: start / end / step are run-time arguments, so one
// cached call (and its output plan) serves every range of one out= size,
// and arange(1, 1) followed by arange(1, 4) would otherwise reuse the
// empty result's plan.
void presize_range(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> inputs) {
  const auto& args = op.schema().arguments();
  int out = -1;
  std::vector<c10::Scalar> range;
  for (size_t i = 0; i < args.size() && i < inputs.size(); i++) {
    if (args[i].is_out() && inputs[i].isTensor()) out = static_cast<int>(i);
    else if (inputs[i].isScalar()) range.push_back(inputs[i].toScalar());
  }
  if (out < 0 || range.empty() || range.size() > 3) return;
  const at::Tensor& t = inputs[out].toTensor();
  const auto meta = at::TensorOptions().dtype(t.scalar_type()).device(at::kMeta);
  const bool is_range = op.schema().name() == "aten::range";
  int64_t size;
  try {
    if (is_range)
      size = (range.size() == 2 ? at::range(range[0], range[1], meta)
                                : at::range(range[0], range[1], range[2], meta)).numel();
    else
      size = (range.size() == 1 ? at::arange(range[0], meta)
              : range.size() == 2 ? at::arange(range[0], range[1], meta)
                                  : at::arange(range[0], range[1], range[2], meta)).numel();
  } catch (const std::exception&) {
    return;  // the meta kernel raises it again
  }
  if (t.numel() == size) return;
  if (!is_range && t.numel() > 0 && t.numel() != size)
    TORCH_WARN("The number of elements in the out tensor of shape ", t.sizes(), " is ", t.numel(),
               " which does not match the computed number of elements ", size,
               ". Note that this may occur as a result of rounding error. "
               "The out tensor will be resized to a tensor of shape (", size, ",).");
  t.resize_({size});
}

// linspace, logspace, randperm and eye resize an out= of the wrong size
// without a word on the CPU (resize_, not resize_output); their Python meta
// kernels warn as resize_output does. Such an out= reaches the meta kernel
// empty, which it resizes silently.
// Kernels that resize a wrong-sized out= with resize_ (no warning) on the
// CPU, where their meta kernels use resize_output (which warns): every
// out= reaches the meta kernel empty, so it plans the size silently.
bool resizes_out_silently(const c10::OperatorHandle& op) {
  const auto& n = op.operator_name();
  return (n.name == "aten::addbmm" && n.overload_name == "out") ||
         (n.name == "aten::log_sigmoid_forward" && n.overload_name == "output") ||
         (n.name == "aten::multinomial" && n.overload_name == "out") ||
         (n.name == "aten::bernoulli" && n.overload_name == "out");
}

void quiet_factory_resize(const c10::OperatorHandle& op, const torch::jit::Stack& inputs,
                          torch::jit::Stack* meta_stack) {
  const auto& schema = op.schema();
  const std::string& name = schema.name();
  if (resizes_out_silently(op)) {
    const auto& args = schema.arguments();
    for (size_t i = 0; i < args.size() && i < inputs.size(); i++)
      if (args[i].is_out() && inputs[i].isTensor()) {
        const at::Tensor& t = inputs[i].toTensor();
        (*meta_stack)[i] = at::empty({0}, at::TensorOptions().dtype(t.scalar_type()).device(at::kMeta));
      }
    return;
  }
  if (name != "aten::linspace" && name != "aten::logspace" && name != "aten::randperm" &&
      name != "aten::eye")
    return;
  int64_t want = -1, cols = -1;
  int out = -1;
  const auto& args = schema.arguments();
  for (size_t i = 0; i < args.size() && i < inputs.size(); i++) {
    const std::string& a = args[i].name();
    if (args[i].is_out() && inputs[i].isTensor()) out = static_cast<int>(i);
    else if ((a == "steps" || a == "n") && inputs[i].isInt()) want = inputs[i].toInt();
    else if (a == "m" && inputs[i].isInt()) cols = inputs[i].toInt();
  }
  if (out < 0 || want < 0) return;
  if (cols >= 0) want *= cols;
  else if (name == "aten::eye") want *= want;
  const at::Tensor& t = inputs[out].toTensor();
  if (t.numel() == want) return;
  (*meta_stack)[out] = at::empty({0}, at::TensorOptions().dtype(t.scalar_type()).device(at::kMeta));
}

// Runs the op on meta tensors and maps its returns (and mutated arguments)
// to engine outputs. False if there is no meta kernel or it fails.
bool plan_outputs(const c10::OperatorHandle& op, const torch::jit::Stack& inputs,
                  OutputPlan* plan, std::string* why) {
  const auto& schema = op.schema();
  torch::jit::Stack meta_stack;
  for (const auto& v : inputs) meta_stack.push_back(to_meta(v));
  quiet_factory_resize(op, inputs, &meta_stack);
  try {
    op.callBoxed(&meta_stack);
  } catch (const std::exception& e) {
    std::string what = e.what();
    *why = "meta: " + what.substr(0, what.find('\n'));
    return false;
  }
  std::vector<bool> arg_covered(schema.arguments().size(), false);
  const auto& returns = schema.returns();
  if (meta_stack.size() != returns.size()) {
    *why = "unexpected return count";
    return false;
  }
  auto add_output = [&](const at::Tensor& m, int alias_arg, int alias_list) -> bool {
    if (!m.defined() || !is_supported_dtype(m.scalar_type()) || m.dim() > TPU_HLO_MAX_RANK)
      return false;
    tpu_eager_output_t o{};
    o.alias_arg = alias_arg;
    o.alias_list = alias_list;
    o.view = meta_view(m, &o.storage_numel);
    const bool resized = alias_arg >= 0 && alias_list < 0 && inputs[alias_arg].isTensor() &&
                         inputs[alias_arg].toTensor().sizes() != m.sizes();
    // A new result (or an out= that gets resized, which CPU restrides as
    // it would allocate a new one) of a pointwise op: CPU's strides.
    std::vector<int64_t> strides;  // empty: the meta kernel's (fresh), contiguous (resized)
    if ((alias_arg < 0 || resized) && o.view.offset == 0) {
      strides = cpu_strides(op, inputs, m.scalar_type(), m.sizes());
      if (!strides.empty() && alias_arg < 0 && c10::IntArrayRef(strides) != m.strides()) {
        const std::vector<int64_t>& cpu = strides;
        for (int d = 0; d < o.view.rank; d++) o.view.strides[d] = cpu[d];
        o.storage_numel = static_cast<int64_t>(at::detail::computeStorageNbytes(
                              m.sizes(), cpu, m.itemsize(), 0)) /
                          static_cast<int64_t>(m.itemsize());
      }
    }
    if (resized) plan->resizes.push_back({alias_arg, m.sizes().vec(), std::move(strides)});
    plan->outputs.push_back(o);
    return true;
  };
  plan->ints.assign(returns.size(), 0);
  for (size_t r = 0; r < returns.size(); r++) {
    plan->per_return.emplace_back();
    int alias = returns[r].alias_info() ? find_alias_arg(schema, *returns[r].alias_info()) : -1;
    if (alias >= 0) arg_covered[alias] = true;
    const c10::IValue& v = meta_stack[r];
    if (v.isTensor() && !v.toTensor().defined()) {
      plan->per_return.back().push_back(-1);  // an undefined return
    } else if (v.isTensor()) {
      plan->per_return.back().push_back(static_cast<int>(plan->outputs.size()));
      if (!add_output(v.toTensor(), alias, -1)) {
        *why = "unsupported output";
        return false;
      }
    } else if (v.isTensorList()) {
      auto ts = v.toTensorVector();
      for (size_t k = 0; k < ts.size(); k++) {
        plan->per_return.back().push_back(static_cast<int>(plan->outputs.size()));
        if (!add_output(ts[k], alias, alias >= 0 ? static_cast<int>(k) : -1)) {
          *why = "unsupported output";
          return false;
        }
      }
    } else if (v.isNone()) {
      // An undefined tensor (e.g. a backward op's output_mask says skip):
      // no engine output; the result is undefined too.
      plan->per_return.back().push_back(-1);
    } else if (v.isInt() && returns[r].real_type()->kind() == TypeKind::SymIntType) {
      // A size the op reports (attention's max_q / max_k): a function of
      // the shapes, which the cache key holds.
      plan->per_return.back().push_back(kIntReturn);
      plan->ints[r] = v.toInt();
    } else {
      *why = "non-tensor return";
      return false;
    }
  }
  // Mutated arguments that no return aliases (e.g. _foreach_add_, running
  // stats of batch_norm) are outputs too, after the returns.
  // native_batch_norm updates running_mean/var (args 3, 4) in training
  // although its schema does not mark them (a!).
  const bool batch_norm_stats = schema.name() == "aten::native_batch_norm" &&
                                inputs.size() > 5 && inputs[5].isBool() && inputs[5].toBool();
  for (size_t i = 0; i < schema.arguments().size(); i++) {
    const auto* info = schema.arguments()[i].alias_info();
    bool mutated = (info && info->isWrite()) || (batch_norm_stats && (i == 3 || i == 4));
    if (!mutated || arg_covered[i]) continue;
    const c10::IValue& v = inputs[i];
    if (v.isTensor()) {
      if (!v.toTensor().defined()) continue;
      if (!add_output(to_meta(v).toTensor(), static_cast<int>(i), -1)) {
        *why = "unsupported mutated argument";
        return false;
      }
    } else if (v.isTensorList()) {
      auto ts = v.toTensorVector();
      for (size_t k = 0; k < ts.size(); k++)
        if (!add_output(to_meta(ts[k]).toTensor(), static_cast<int>(i), static_cast<int>(k))) {
          *why = "unsupported mutated argument";
          return false;
        }
    }
  }
  return true;
}

// A fresh output tensor, its storage still without contents (the engine
// fills it). Built directly (not through the dispatcher's empty_strided):
// this runs for every result.
at::Tensor make_fresh(const tpu_eager_output_t& o, int device) {
  const tpu_view_t& v = o.view;
  std::optional<c10::DeviceGuard> guard;
  if (device != current_device()) guard.emplace(c10::Device(c10::kPrivateUse1, device));
  if (v.offset != 0) {
    // A result at an offset in its storage (the *_scatter ops clone their
    // input's whole storage and keep its geometry): the storage holds
    // storage_numel elements, offset included.
    int64_t n = o.storage_numel;
    at::Tensor base = at::detail::empty_strided_generic(
        c10::IntArrayRef(&n, 1), c10::IntArrayRef(std::array<int64_t, 1>{1}),
        c10::GetAllocator(c10::kPrivateUse1), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
        to_scalar_type(v.dtype));
    return base.as_strided(c10::IntArrayRef(v.sizes, v.rank), c10::IntArrayRef(v.strides, v.rank),
                           v.offset);
  }
  return at::detail::empty_strided_generic(
      c10::IntArrayRef(v.sizes, v.rank), c10::IntArrayRef(v.strides, v.rank),
      c10::GetAllocator(c10::kPrivateUse1), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
      to_scalar_type(v.dtype));
}

// How an entry's outputs become the schema's returns, kept with the engine
// entry (tpu_eager_entry_user) so a cache hit reads it without a lookup.
struct ReturnPlan {
  std::vector<std::vector<int>> per_return;  // output indices; -1 = undefined
  std::vector<int64_t> ints;                 // the numbers of kIntReturn returns
  std::vector<bool> is_list;
};

void free_return_plan(void* p) { delete static_cast<ReturnPlan*>(p); }

// Integer division by zero raises on the CPU (RuntimeError
// "ZeroDivisionError"); XLA returns arbitrary values. A Python number is
// checked here; a tensor divisor is read back (a host sync, only for
// integer division), which works the same in every eager mode.
void check_integer_divisor(const OpFacts& facts, c10::ArrayRef<c10::IValue> inputs) {
  if (inputs.size() < 2) return;
  const c10::IValue& x = inputs[0];
  const c10::IValue& y = inputs[1];
  // div's rounding_mode=None is true division.
  if (facts.name.rfind("aten::div", 0) == 0 && (inputs.size() < 3 || inputs[2].isNone())) return;
  c10::ScalarType common;
  if (x.isTensor() && y.isTensor()) common = at::result_type(x.toTensor(), y.toTensor());
  else if (x.isTensor() && y.isScalar()) common = at::result_type(x.toTensor(), y.toScalar());
  else if (x.isScalar() && y.isTensor()) common = at::result_type(x.toScalar(), y.toTensor());
  else return;
  if (!at::isIntegralType(common, /*includeBool=*/false)) return;
  // Nothing is divided when the (broadcast) result is empty.
  for (const c10::IValue* v : {&x, &y})
    if (v->isTensor() && v->toTensor().defined() && v->toTensor().numel() == 0) return;
  bool zero;
  if (y.isScalar()) {
    // CPU's kernel reads the divisor as the common dtype, wrapping: a
    // uint8 tensor // 256 divides by 0 (so does one by a 0-dim 256).
    int64_t v = y.toScalar().toLong();
    switch (common) {
      case c10::ScalarType::Byte: zero = static_cast<uint8_t>(v) == 0; break;
      case c10::ScalarType::Char: zero = static_cast<int8_t>(v) == 0; break;
      case c10::ScalarType::Short: zero = static_cast<int16_t>(v) == 0; break;
      case c10::ScalarType::Int: zero = static_cast<int32_t>(v) == 0; break;
      case c10::ScalarType::UInt16: zero = static_cast<uint16_t>(v) == 0; break;
      case c10::ScalarType::UInt32: zero = static_cast<uint32_t>(v) == 0; break;
      default: zero = v == 0;
    }
  }
  else if (!y.toTensor().defined() || y.toTensor().numel() == 0) return;
  else zero = y.toTensor().to(common).eq(0).any().item<bool>();  // (as read: wrapped too)
  TORCH_CHECK(!zero, "ZeroDivisionError");
}

// multinomial's probabilities, refused as CPU's kernels refuse them (the
// lowering has already declined what CPU refuses by shape or dtype).
// Without replacement or for one sample (Distributions.cpp): any inf, NaN
// or negative entry, then a row summing to 0. With replacement
// (MultinomialKernel.cpp), row by row: the first entry that is not >= 0
// (NaN included) or not finite, else a row sum <= 0. One sync reads the
// first failing row's code.
void check_multinomial(c10::ArrayRef<c10::IValue> inputs) {
  const at::Tensor& p = inputs[0].toTensor();
  const bool replacement = inputs[2].toBool();
  if (!replacement || inputs[1].toInt() == 1) {
    bool ok = ((p.max() < std::numeric_limits<double>::infinity()) & (p.min() >= 0)).item<bool>();
    TORCH_CHECK(ok, "probability tensor contains either `inf`, `nan` or element < 0");
    bool zero = p.dim() == 1 ? (p.sum() == 0).item<bool>() : (p.sum(1) == 0).any().item<bool>();
    TORCH_CHECK(!zero, "invalid multinomial distribution (sum of probabilities <= 0)");
    return;
  }
  const at::Tensor rows = p.dim() == 1 ? p.unsqueeze(0) : p;
  const at::Tensor negative = (rows >= 0).logical_not();
  const at::Tensor bad = negative | rows.isinf();
  const at::Tensor first_bad = bad.to(at::kByte).argmax(1, /*keepdim=*/true);
  const at::Tensor code =
      at::where(bad.any(1), at::where(negative.gather(1, first_bad).squeeze(1), 1, 2),
                at::where(rows.sum(1) <= 0, 3, 0));
  const int64_t first = code.gather(0, code.ne(0).to(at::kByte).argmax(0, true)).item<int64_t>();
  TORCH_CHECK(first != 1, "invalid multinomial distribution (encountering probability entry < 0)");
  TORCH_CHECK(first != 2,
              "invalid multinomial distribution (encountering probability entry = infinity or NaN)");
  TORCH_CHECK(first != 3, "invalid multinomial distribution (sum of probabilities <= 0)");
}

// One-step logspace into an integer dtype is fill_(base ** start) on the
// CPU (RangeFactories.cpp), and fill_ refuses a value the dtype cannot
// hold ("value cannot be converted to type int64_t without overflow").
// inputs: start, end, steps, base, then out= (a tensor) or dtype.
void check_logspace_fill(c10::ArrayRef<c10::IValue> inputs) {
  if (inputs.size() < 5 || !inputs[2].isInt() || inputs[2].toInt() != 1) return;
  at::ScalarType dtype;
  if (inputs[4].isTensor()) dtype = inputs[4].toTensor().scalar_type();
  else if (inputs[4].isInt()) dtype = static_cast<at::ScalarType>(inputs[4].toInt());
  else return;  // the default dtype: floating
  if (!at::isIntegralType(dtype, /*includeBool=*/false)) return;
  const double start = inputs[0].isTensor() ? inputs[0].toTensor().item<double>() : inputs[0].toScalar().toDouble();
  const double base = inputs[3].isDouble() ? inputs[3].toDouble() : 10.0;
  const c10::Scalar value(std::pow(base, start));
  AT_DISPATCH_INTEGRAL_TYPES(dtype, "logspace", [&] { (void)value.to<scalar_t>(); });
}

// segment_reduce with lengths and unsafe=False reads them on the CPU
// (SegmentReduce.cpp): none negative, and each row summing to the data's
// size along the axis. inputs: data, reduce, lengths, indices, offsets,
// axis, unsafe, initial. One read for both checks.
void check_segment_lengths(c10::ArrayRef<c10::IValue> inputs) {
  if (inputs.size() < 7 || !inputs[2].isTensor() || inputs[6].toBool()) return;
  const at::Tensor& lengths = inputs[2].toTensor();
  const at::Tensor& data = inputs[0].toTensor();
  int64_t axis = inputs[5].toInt();
  if (axis < 0) axis += data.dim();
  if (lengths.numel() == 0 || axis < 0 || axis >= data.dim()) return;
  const at::Tensor both = at::stack({lengths.min().to(at::kLong),
                                     (lengths.sum({-1}) == data.size(axis)).all().to(at::kLong)}).cpu();
  TORCH_CHECK(both[0].item<int64_t>() >= 0, "lengths contains negative value!");
  TORCH_CHECK(both[1].item<int64_t>() != 0, "segment_reduce(): Expected all rows of lengths along axis ",
              "to sum to data.size(lengths.dim()-1) when !unsafe.");
}

// max_unpool's indices must fall in the output plane (CPU's kernel reads
// them: "Found an invalid max index"). The first bad one in order is
// named.
void check_unpool_indices(c10::ArrayRef<c10::IValue> inputs) {
  if (inputs.size() < 3 || !inputs[1].isTensor() || !inputs[2].isIntList()) return;
  const at::Tensor& idx = inputs[1].toTensor();
  const std::vector<int64_t> size = inputs[2].toIntVector();
  if (idx.numel() == 0) return;
  int64_t plane = 1;
  for (int64_t s : size) plane *= s;
  const at::Tensor bad = (idx < 0) | (idx >= plane);
  const at::Tensor flat = idx.reshape({-1});
  const at::Tensor first = bad.reshape({-1}).to(at::kByte).argmax(0, true);
  const at::Tensor both = at::stack({bad.any().to(at::kLong), flat.gather(0, first).squeeze(0)}).cpu();
  if (both[0].item<int64_t>() == 0) return;
  std::string sizes;
  for (size_t d = 0; d < size.size(); d++) sizes += (d ? "x" : "") + std::to_string(size[d]);
  TORCH_CHECK(false, "Found an invalid max index: ", both[1].item<int64_t>(),
              " (output volumes are of size ", sizes, ")");
}

// searchsorted's sorter must index its row (Bucketization.cpp reads its
// min and max).
void check_sorter(c10::ArrayRef<c10::IValue> inputs) {
  if (inputs.size() < 6 || !inputs[5].isTensor()) return;
  const at::Tensor& sorter = inputs[5].toTensor();
  if (!sorter.defined() || sorter.numel() == 0) return;
  auto [lo, hi] = sorter.aminmax();
  const bool ok = (lo.ge(0) & hi.lt(sorter.size(-1))).item<bool>();
  TORCH_CHECK(ok, "torch.searchsorted(): sorter index out of range");
}

// CPU's pow meta refuses an integer (or bool) self to a negative integer
// Scalar power; the engine runs meta kernels once per key, not per value.
void check_pow_exponent(c10::ArrayRef<c10::IValue> inputs) {
  if (inputs.size() < 2 || !inputs[0].isTensor() || !inputs[1].isScalar()) return;
  const c10::Scalar e = inputs[1].toScalar();
  TORCH_CHECK(!(at::isIntegralType(inputs[0].toTensor().scalar_type(), /*includeBool=*/true) &&
                e.isIntegral(/*includeBool=*/true) && e.toLong() < 0),
              "Integers to negative integer powers are not allowed.");
}

tpu_metrics_counter_t* device_ops_counter() {
  static tpu_metrics_counter_t* counter = tpu_metrics_counter("device_ops");
  return counter;
}

}  // namespace

// Ops PyTorch lets through its Conjugate / Negative fallbacks (clone, copy_,
// mm, dot, ...) see tensors whose conj or neg bit is still set; their
// contents are the storage's conjugated or negated. The engine reads raw
// storage, so each such read-only argument is replaced by its materialised
// value (conj_physical / neg of the bit-cleared view, on the device).
// Returns false when nothing was replaced (e.g. only a written argument
// carries a bit), so the caller never loops.
// In-place arithmetic whose result type cannot be cast to self's dtype
// (`int_tensor.mul_(0.5)`) raises as CPU's TensorIterator does; PyTorch's
// meta kernels skip that check, so the device would write truncated
// values. Checked on a cache miss only: a key that passes stays valid.
static void check_inplace_cast(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> inputs) {
  static const char* const kOps[] = {
      "aten::add_",   "aten::sub_",       "aten::mul_",       "aten::div_",
      "aten::true_divide_", "aten::floor_divide_", "aten::remainder_", "aten::fmod_",
      "aten::pow_",   "aten::atan2_",     "aten::hypot_",     "aten::copysign_",
      "aten::clamp_", "aten::clamp_min_", "aten::clamp_max_", "aten::lerp_",
      "aten::addcmul_", "aten::addcdiv_", "aten::xlogy_",     "aten::rsub_"};
  const std::string& name = op.schema().name();
  if (name.empty() || name.back() != '_') return;
  bool listed = false;
  for (const char* k : kOps) listed |= name == k;
  if (!listed || inputs.empty() || !inputs[0].isTensor()) return;
  const at::Tensor& self = inputs[0].toTensor();
  at::native::ResultTypeState state{};
  for (size_t i = 0; i < inputs.size(); i++) {
    if (op.schema().arguments()[i].kwarg_only()) break;  // alpha / value do not promote
    if (inputs[i].isTensor() && inputs[i].toTensor().defined())
      state = at::native::update_result_type_state(inputs[i].toTensor(), state);
    else if (inputs[i].isScalar())
      state = at::native::update_result_type_state(inputs[i].toScalar(), state);
  }
  const c10::ScalarType result = at::native::result_type(state);
  TORCH_CHECK(c10::canCast(result, self.scalar_type()), "result type ", result,
              " can't be cast to the desired output type ", self.scalar_type());
}

// Whether every value of dtype `from` fits `to` by c10's overflow rule
// (bool and complex targets take anything; floats take their infinities
// and NaN), so a device-resident 0-d value need not be read back.
static bool always_fits(c10::ScalarType from, c10::ScalarType to) {
  if (from == to || to == at::kBool || at::isComplexType(to) || from == at::kBool) return true;
  if (at::isComplexType(from)) return false;
  if (to == at::kDouble) return true;
  if (to == at::kFloat) return from != at::kDouble;
  if (to == at::kBFloat16) return !at::isFloatingType(from) || from == at::kHalf;
  if (to == at::kHalf) return false;  // int16 and wider, float32 exceed 65504
  if (at::isFloatingType(from)) return false;
  return at::elementSize(from) < at::elementSize(to) &&
         (at::isSignedType(to) || !at::isSignedType(from));
}

// Raises CPU's error for a number its kernel cannot convert to the dtype it
// computes in (see ScalarFit). Checked on every call: numbers are not part
// of the engine's key.
static void check_scalars_fit(const c10::OperatorHandle& op, const OpFacts& facts,
                              c10::ArrayRef<c10::IValue> inputs) {
  const auto& schema_args = op.schema().arguments();
  const ScalarFit fit = facts.scalar_fit;
  const bool self_rule = fit == ScalarFit::kSelf || fit == ScalarFit::kSelfOpmath;
  c10::ScalarType target = c10::ScalarType::Undefined;
  if (fit == ScalarFit::kRange) {
    target = at::get_default_dtype_as_scalartype();
    for (size_t i = 0; i < inputs.size(); i++) {
      if (schema_args[i].name() == "dtype" && inputs[i].isInt())
        target = static_cast<c10::ScalarType>(inputs[i].toInt());
      if (schema_args[i].name() == "out" && inputs[i].isTensor())  // (the .out overload)
        target = inputs[i].toTensor().scalar_type();
      if (schema_args[i].name() == "steps" && inputs[i].isInt() && inputs[i].toInt() == 0) return;
    }
  } else if (self_rule) {
    // The dtype argument of a factory, else self's.
    for (size_t i = 0; i < inputs.size(); i++)
      if (schema_args[i].name() == "dtype" && inputs[i].isInt())
        target = static_cast<c10::ScalarType>(inputs[i].toInt());
    if (target == c10::ScalarType::Undefined && schema_args[0].name() == "self" &&
        inputs[0].isTensor())
      target = inputs[0].toTensor().scalar_type();
    if (target == c10::ScalarType::Undefined) {  // full: the fill value's type decides
      for (size_t i = 0; i < inputs.size(); i++)
        if (schema_args[i].name() == "fill_value" && inputs[i].isScalar()) {
          const c10::Scalar v = inputs[i].toScalar();
          target = v.isBoolean() ? at::kBool
                   : v.isIntegral(false) ? at::kLong
                   : v.isComplex() ? c10::toComplexType(at::get_default_dtype_as_scalartype())
                                   : at::get_default_dtype_as_scalartype();
        }
      if (target == c10::ScalarType::Undefined) return;
    }
  } else {
    at::native::ResultTypeState state{};
    for (size_t i = 0; i < inputs.size(); i++) {
      if (schema_args[i].kwarg_only()) break;  // alpha / value do not promote
      if (inputs[i].isTensor() && inputs[i].toTensor().defined())
        state = at::native::update_result_type_state(inputs[i].toTensor(), state);
      else if (inputs[i].isScalar())
        state = at::native::update_result_type_state(inputs[i].toScalar(), state);
    }
    target = at::native::result_type(state);
  }
  if (fit == ScalarFit::kSelfOpmath || fit == ScalarFit::kResultOpmath) {
    // Float kernels: other dtypes have none (the lowering or fallback says
    // so); half types compute in float.
    if (fit == ScalarFit::kSelfOpmath && facts.name != "aten::scalar_tensor" &&
        !at::isFloatingType(target))
      return;
    if (target == at::kHalf || target == at::kBFloat16) target = at::kFloat;
  }
  // pow's float and double kernels read the exponent as a double.
  if (facts.name.rfind("aten::pow", 0) == 0 && (target == at::kFloat || target == at::kDouble))
    return;
  // Other dtypes (float8, complex32, quantized) are not checked.
  const bool checked = at::isIntegralType(target, /*includeBool=*/true) || target == at::kHalf ||
                       target == at::kBFloat16 || target == at::kFloat || target == at::kDouble ||
                       target == at::kComplexFloat || target == at::kComplexDouble;
  if (!checked) return;
  auto fits = [&](const c10::Scalar& v) {
    AT_DISPATCH_V2(target, "check_scalars_fit", AT_WRAP([&] { (void)v.to<scalar_t>(); }),
                   AT_EXPAND(AT_ALL_TYPES_AND_COMPLEX), at::kHalf, at::kBFloat16, at::kBool,
                   AT_EXPAND(AT_BAREBONES_UNSIGNED_TYPES));
  };
  for (size_t i = 0; i < inputs.size(); i++) {
    const std::string& name = schema_args[i].name();
    // The numbers the kernels convert: fills, limits, slopes, exponents and
    // alpha / value multipliers (add.Scalar's `other` is wrapped instead).
    static const char* const kConverted[] = {"value", "fill_value", "s", "min", "max", "min_val",
                                             "max_val", "threshold", "negative_slope", "weight",
                                             "exponent", "alpha", "lambd", "beta", "scale",
                                             "input_scale"};
    bool converted = fit == ScalarFit::kRange && (name == "start" || name == "end");
    for (const char* k : kConverted) converted |= name == k;
    if (!converted) continue;
    const c10::IValue& v = inputs[i];
    if (v.isScalar()) {
      const c10::Scalar s = v.toScalar();
      if (!self_rule && name == "alpha" && s.isBoolean())
        TORCH_CHECK(target == at::kBool, "Boolean alpha only supported for Boolean results.");
      // CPU's alpha_check of add / sub / rsub (addmm & co. take any alpha).
      if (!self_rule && name == "alpha" && is_alpha_checked(facts.name)) {
        TORCH_CHECK(!at::isIntegralType(target, /*includeBool=*/true) || s.isIntegral(/*includeBool=*/true),
                    "For integral input tensors, argument alpha must not be a floating point number.");
        TORCH_CHECK(!s.isComplex() || at::isComplexType(target),
                    "For non-complex input tensors, argument alpha must not be a complex number.");
      }
      fits(s);
    } else if (v.isTensor() && name == "value" &&
               (facts.name.rfind("aten::masked_fill", 0) == 0 ||
                facts.name.rfind("aten::index_fill", 0) == 0)) {
      // A 0-d value tensor: these kernels read value.item() (fill_'s does
      // not check); a device one is read back only when its dtype can hold
      // a value the target cannot.
      const at::Tensor& t = v.toTensor();
      if (!t.defined() || t.dim() != 0) continue;
      // (a compiled graph's value: known only when the program runs)
      if (t.is_meta() || t.key_set().has(c10::DispatchKey::Python)) continue;
      if (is_tpu(t) && always_fits(t.scalar_type(), target)) continue;
      fits(t.item());
    }
  }
}

// Out-of-range indices: XLA clamps them, CPU raises. An index op that ran
// on the device leaves a device-side flag (any index < 0 or >= size; it
// fuses into the same run in defer_and_fuse), read before the next host
// read; a true flag raises CPU's error for that op. Per thread: the op's
// thread is the one that reads its results.
// How CPU words an out-of-range index, per op family.
enum class IndexMessage {
  kInSelf,        // IndexError "index out of range in self"
  kDataBounds,    // RuntimeError "INDICES element is out of DATA bounds, id=.. axis_dim=.."
  kBoundsIndex,   // IndexError "index 5 is out of bounds for dimension 0 with size 3"
  kBoundsRuntime, // the same words as a RuntimeError
  kFlat,          // IndexError "out of range: tried to access index 9 on a tensor of 6 elements."
  kSourceTooSmall,  // masked_scatter: RuntimeError "Number of elements of source < number of ones in mask"
};
struct PendingIndexCheck {
  at::Tensor bad;    // 0-d bool on the device
  at::Tensor index;  // for the message
  int64_t lo, size;  // valid: lo <= index < size
  int64_t dim;
  IndexMessage message;
  const char* prefix;  // before kBounds* words ("index_copy_(): ")
};
thread_local std::vector<PendingIndexCheck> t_pending_index_checks;

// nll_loss(self, target, weight, reduction, ignore_index): a target outside
// [0, classes) other than ignore_index raises IndexError "Target 3 is out
// of bounds." on CPU; XLA's one-hot would give it no class (a wrong loss).
// One flag per thread, or-ed with each new check: a training loop that
// never reads the host adds the same ops every step (a defer_and_fuse run
// keeps its shape) instead of reading a pile of flags now and then. The
// last targets are kept for the message.
struct PendingTargetCheck {
  at::Tensor target;
  int64_t classes, ignore;
};
thread_local at::Tensor t_target_bad;
thread_local std::deque<PendingTargetCheck> t_target_checks;

static void record_target_check(c10::ArrayRef<c10::IValue> inputs) {
  if (inputs.size() < 5 || !inputs[0].isTensor() || !inputs[1].isTensor() || !inputs[4].isInt())
    return;
  const at::Tensor& self = inputs[0].toTensor();
  const at::Tensor& target = inputs[1].toTensor();
  if (!target.defined() || target.numel() == 0 || !is_tpu(target) || self.dim() < 1) return;
  const int64_t classes = self.size(self.dim() == 1 ? 0 : 1);
  const int64_t ignore = inputs[4].toInt();
  at::Tensor bad =
      at::logical_and(at::logical_or(target.lt(0), target.ge(classes)), target.ne(ignore)).any();
  t_target_bad = t_target_bad.defined() ? at::logical_or(t_target_bad, bad) : bad;
  t_target_checks.push_back({target, classes, ignore});
  if (t_target_checks.size() > 64) t_target_checks.pop_front();
}

// Raises the error of a failed target check (its flag read true).
static void raise_target_errors(const std::deque<PendingTargetCheck>& kept) {
  for (const PendingTargetCheck& c : kept) {
    at::Tensor host = c.target.cpu().reshape(-1).to(at::kLong);
    const int64_t* v = host.const_data_ptr<int64_t>();
    for (int64_t i = 0; i < host.numel(); i++)
      TORCH_CHECK_INDEX((v[i] >= 0 && v[i] < c.classes) || v[i] == c.ignore, "Target ", v[i],
                        " is out of bounds.");
  }
  TORCH_CHECK_INDEX(false, "Target is out of bounds.");  // (its targets are no longer kept)
}

thread_local std::vector<const c10::TensorImpl*> t_trusted_indices;

void trust_mask_index(const at::Tensor& index) { t_trusted_indices.push_back(index.unsafeGetTensorImpl()); }
void clear_trusted_mask_indices() { t_trusted_indices.clear(); }

static void push_index_check(const at::Tensor& index, int64_t lo, int64_t size, int64_t dim,
                             IndexMessage message, const char* prefix = "") {
  if (!index.defined() || index.numel() == 0 || !is_tpu(index) ||
      !at::isIntegralType(index.scalar_type(), /*includeBool=*/false))
    return;
  for (const c10::TensorImpl* t : t_trusted_indices)
    if (t == index.unsafeGetTensorImpl()) return;
  at::Tensor bad = at::logical_or(index.lt(lo), index.ge(size)).any();
  t_pending_index_checks.push_back({bad, index, lo, size, dim, message, prefix});
  // Nothing reads results for a long time: check now rather than grow.
  if (t_pending_index_checks.size() > 64) check_pending_index_errors();
}

// The ops that take indices into self, where an index fell: (index
// argument, dim argument or -1 for a flat index, lowest valid index as 0
// or -size, CPU's message).
struct IndexRule {
  const char* base;  // "aten::gather"
  int index_arg, dim_arg;
  bool negative_ok;
  IndexMessage message;
  const char* prefix;
};
static const IndexRule kIndexRules[] = {
    {"aten::gather", 2, 1, false, IndexMessage::kBoundsRuntime, ""},
    {"aten::scatter", 2, 1, false, IndexMessage::kBoundsRuntime, ""},
    {"aten::scatter_", 2, 1, false, IndexMessage::kBoundsRuntime, ""},
    {"aten::scatter_add", 2, 1, false, IndexMessage::kBoundsRuntime, ""},
    {"aten::scatter_add_", 2, 1, false, IndexMessage::kBoundsRuntime, ""},
    {"aten::scatter_reduce", 2, 1, false, IndexMessage::kBoundsRuntime, ""},
    {"aten::scatter_reduce_", 2, 1, false, IndexMessage::kBoundsRuntime, ""},
    {"aten::index_add", 2, 1, false, IndexMessage::kBoundsRuntime, ""},
    {"aten::index_add_", 2, 1, false, IndexMessage::kBoundsRuntime, ""},
    {"aten::index_copy", 2, 1, false, IndexMessage::kBoundsIndex, "index_copy_(): "},
    {"aten::index_copy_", 2, 1, false, IndexMessage::kBoundsIndex, "index_copy_(): "},
    {"aten::index_fill", 2, 1, true, IndexMessage::kBoundsIndex, ""},
    {"aten::index_fill_", 2, 1, true, IndexMessage::kBoundsIndex, ""},
    {"aten::index_reduce", 2, 1, false, IndexMessage::kInSelf, ""},
    {"aten::index_reduce_", 2, 1, false, IndexMessage::kInSelf, ""},
    {"aten::take", 1, -1, true, IndexMessage::kFlat, ""},
    {"aten::put", 1, -1, true, IndexMessage::kFlat, ""},
    {"aten::put_", 1, -1, true, IndexMessage::kFlat, ""},
};

enum IndexCheck { kNoIndexCheck = 0, kTargets, kMaskedScatter, kIndexList, kRule, kSelect, kEmbedding };

namespace {  // declared with the other per-op facts above
int index_check_of(const std::string& name, int* rule) {
  if (name == "aten::nll_loss_forward" || name == "aten::nll_loss2d_forward") return kTargets;
  if (name == "aten::index_select" || name == "aten::index_select.out") return kSelect;
  if (name == "aten::embedding") return kEmbedding;
  const std::string base = name.substr(0, name.find('.'));
  if (base == "aten::masked_scatter" || base == "aten::masked_scatter_") return kMaskedScatter;
  if (base == "aten::index" || base == "aten::index_put" || base == "aten::index_put_" ||
      base == "aten::_index_put_impl_" || base == "aten::_unsafe_index")
    return kIndexList;
  for (size_t i = 0; i < sizeof kIndexRules / sizeof kIndexRules[0]; i++)
    if (base == kIndexRules[i].base) {
      *rule = static_cast<int>(i);
      return kRule;
    }
  return kNoIndexCheck;
}
}  // namespace

static void record_index_check(const OpFacts& facts, c10::ArrayRef<c10::IValue> inputs) {
  if (facts.index_check == kNoIndexCheck) return;
  if (facts.index_check == kTargets) {
    if (eager_mode() != EagerMode::kDebug) record_target_check(inputs);
    return;
  }
  if (inputs.empty() || !inputs[0].isTensor()) return;
  const at::Tensor& self = inputs[0].toTensor();
  if (!self.defined()) return;
  // masked_scatter(self, mask, source): CPU refuses a source with fewer
  // elements than the mask has ones (XLA would reuse its last element).
  if (facts.index_check == kMaskedScatter) {
    if (eager_mode() == EagerMode::kDebug || inputs.size() < 3 || !inputs[1].isTensor() || !inputs[2].isTensor())
      return;
    const at::Tensor& mask = inputs[1].toTensor();
    if (!mask.defined() || mask.numel() == 0 || !is_tpu(mask)) return;
    // the count of ones as the "index": valid while <= source.numel()
    push_index_check(mask.sum(at::kLong).reshape({1}), 0, inputs[2].toTensor().numel() + 1, 0,
                     IndexMessage::kSourceTooSmall);
    return;
  }
  // index / index_put (self, indices, ...): index k indexes dim k of self.
  if (facts.index_check == kIndexList) {
    if (eager_mode() == EagerMode::kDebug || inputs.size() < 2 || !inputs[1].isList()) return;
    auto list = inputs[1].toList();
    for (size_t k = 0; k < list.size() && static_cast<int64_t>(k) < self.dim(); k++) {
      c10::IValue e = list.get(k);
      if (!e.isTensor()) continue;
      const int64_t size = self.size(static_cast<int64_t>(k));
      push_index_check(e.toTensor(), -size, size, static_cast<int64_t>(k), IndexMessage::kBoundsIndex);
    }
    return;
  }
  if (facts.index_check == kRule) {
    const IndexRule& r = kIndexRules[facts.index_rule];
    if (eager_mode() == EagerMode::kDebug || inputs.size() <= static_cast<size_t>(r.index_arg) ||
        !inputs[r.index_arg].isTensor())
      return;
    int64_t size, dim = 0;
    if (r.dim_arg < 0) {
      size = self.numel();
    } else {
      if (!inputs[r.dim_arg].isInt()) return;
      dim = c10::maybe_wrap_dim(inputs[r.dim_arg].toInt(), std::max<int64_t>(self.dim(), 1));
      size = self.dim() == 0 ? 1 : self.size(dim);
    }
    push_index_check(inputs[r.index_arg].toTensor(), r.negative_ok ? -size : 0, size, dim, r.message,
                     r.prefix);
    return;
  }
  // index_select(self, dim, index): CPU raises a RuntimeError naming the
  // bad index for dim 1 of an n-d self (into a contiguous result) and for
  // an empty n-d self, IndexError for the rest.
  // embedding(weight, indices): IndexError (rows of dim 0).
  const bool select = facts.index_check == kSelect;
  const size_t at = select ? 2 : 1;
  if (select && inputs.size() > at && inputs[at].isTensor())
    TORCH_CHECK_INDEX(inputs[at].toTensor().dim() <= 1,
                      "index_select(): Index is supposed to be a vector");
  if (eager_mode() == EagerMode::kDebug) return;  // Debug ran CPU's kernel first
  if (inputs.size() <= at || !inputs[at].isTensor()) return;
  const at::Tensor& index = inputs[at].toTensor();
  const int64_t rank = self.dim();
  const int64_t dim =
      select ? c10::maybe_wrap_dim(inputs[1].toInt(), std::max<int64_t>(rank, 1)) : 0;
  const int64_t size = rank == 0 ? 1 : self.size(dim);
  const bool contiguous_out = facts.name == "aten::index_select" ||
                              (inputs.size() > 3 && inputs[3].isTensor() &&
                               inputs[3].toTensor().is_contiguous());
  const bool runtime_error =
      select && rank > 1 && ((dim == 1 && contiguous_out) || self.numel() == 0);
  push_index_check(index, 0, size, dim, runtime_error ? IndexMessage::kDataBounds : IndexMessage::kInSelf);
}

static bool resolve_lazy_bits(const c10::OperatorHandle& op, torch::jit::Stack* stack, size_t num_args) {
  const auto& args = op.schema().arguments();
  const size_t first = stack->size() - num_args;
  bool replaced = false;
  for (size_t i = 0; i < num_args; i++) {
    c10::IValue& v = (*stack)[first + i];
    if (!v.isTensor()) continue;
    const at::Tensor& t = v.toTensor();
    if (!t.defined() || !(t.is_conj() || t.is_neg())) continue;
    const auto* info = args[i].alias_info();
    if (info && info->isWrite()) continue;
    at::Tensor value = t;
    if (value.is_conj()) value = at::conj_physical(at::_conj(value));
    if (value.is_neg()) value = at::neg(at::_neg_view(value));
    v = value;
    replaced = true;
  }
  return replaced;
}

// Eager's checks of an op's literal numbers (check_scalars_fit) for a node
// of a compiled graph, whose tensors are FakeTensors read for their dtypes.
void check_literal_scalars(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> inputs) {
  const OpFacts& facts = facts_of(op);
  if (facts.scalar_fit != ScalarFit::kNone) check_scalars_fit(op, facts, inputs);
}

// Runs `op` on the device if the table lowers it; returns false to mean "use
// the CPU fallback" (stack untouched).
bool try_run_on_device(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  check_not_forked();
  const OpFacts& facts = facts_of(op);
  if (!facts.lowered) return false;
  if (facts.scalar_fit != ScalarFit::kNone) check_scalars_fit(op, facts, torch::jit::last(*stack, facts.args.size()));
  if (facts.sized_by_scalars) presize_range(op, torch::jit::last(*stack, facts.args.size()));
  BuilderLease lease;
  CallBuilder& builder = *lease;
  builder.reset(facts);
  const size_t num_args = facts.args.size();
  auto inputs = torch::jit::last(*stack, num_args);
  for (size_t i = 0; i < num_args; i++) builder.add(facts.args[i], inputs[i]);
  if (builder.foreign) {
    // Raises for a device mismatch; CPU indices of an index op move to
    // the device (as CUDA moves them) and the call is read again.
    if (check_placement(op, inputs)) {
      move_cpu_indices(op, stack, num_args);
      return try_run_on_device(op, stack);
    }
  }
  if (builder.lazy_bits && resolve_lazy_bits(op, stack, num_args))
    return try_run_on_device(op, stack);
  if (!builder.ok || builder.device < 0) return false;
  tpu_eager_call_t call = builder.call();
  tpu_eager_entry_t* entry = tpu_eager_lookup(&call);
  const ReturnPlan* plan = nullptr;
  if (!entry) {
    check_inplace_cast(op, inputs);
    OutputPlan outputs;
    std::string why;
    torch::jit::Stack input_copy(inputs.begin(), inputs.end());
    if (!plan_outputs(op, input_copy, &outputs, &why)) {
      tpu_eager_mark_fallback(&call, why.c_str());
      tpu_metrics_add(("fallback_reason::" + facts.name + ": " + why).c_str(), 0);
      return false;
    }
    if (!outputs.resizes.empty()) {
      // Only out= tensors may be resized; an in-place op's self must already
      // have the broadcast shape (some Python meta kernels resize it).
      // An out= that is also an input (maximum(a, b, out=a)) cannot be
      // resized either, as on the CPU.
      for (const auto& [index, sizes, strides] : outputs.resizes) {
        const at::Tensor& target = inputs[index].toTensor();
        bool is_input = false;
        for (size_t i = 0; i < inputs.size(); i++)
          is_input |= static_cast<int>(i) != index && inputs[i].isTensor() &&
                      inputs[i].toTensor().is_same(target);
        TORCH_CHECK(op.schema().arguments()[index].is_out() && !is_input, "output with shape ",
                    target.sizes(), " doesn't match the broadcast shape ", c10::IntArrayRef(sizes));
      }
      // An out= tensor of the wrong size: resize it as the kernel would
      // (with the strides the kernel gives it: a pointwise op's follow its
      // operands), then run again with the new geometry.
      // TensorIterator kernels (and index_select's) refuse an out= whose
      // elements share memory before they resize it; others resize it.
      const bool overlap_first = !facts.overlap_ok && (cpu_layout(op) == CpuLayout::kIterator ||
                                                        facts.name == "aten::index_select.out");
      for (const auto& [index, sizes, strides] : outputs.resizes) {
        const at::Tensor& target = inputs[index].toTensor();
        if (overlap_first) at::assert_no_internal_overlap(target);
        target.resize_(sizes);
        if (!strides.empty() && target.strides() != c10::IntArrayRef(strides))
          target.as_strided_(sizes, strides);
      }
      return try_run_on_device(op, stack);
    }
    TPU_CHECK(tpu_eager_compile(&call, outputs.outputs.data(),
                                static_cast<int>(outputs.outputs.size()), &entry),
              facts.name.c_str());
    if (!tpu_eager_entry_is_fallback(entry)) {
      auto fresh_plan = std::make_unique<ReturnPlan>();
      fresh_plan->per_return = std::move(outputs.per_return);
      fresh_plan->ints = std::move(outputs.ints);
      for (const auto& r : op.schema().returns())
        fresh_plan->is_list.push_back(is_list(classify(r)));
      plan = static_cast<const ReturnPlan*>(
          tpu_eager_entry_set_user(entry, fresh_plan.release(), &free_return_plan));
    }
  }
  if (tpu_eager_entry_is_fallback(entry)) {
    // Why this call runs on the CPU, for torchtpu.metrics.fallback_reasons().
    tpu_metrics_add(("fallback_reason::" + facts.name + ": " +
                     tpu_eager_entry_fallback_reason(entry)).c_str(), 0);
    return false;
  }
  if (!plan) plan = static_cast<const ReturnPlan*>(tpu_eager_entry_user(entry));
  TORCH_INTERNAL_ASSERT(plan, "torchtpu: ", facts.name, ": cached entry without a return plan");
  const int n = tpu_eager_entry_num_outputs(entry);
  if (facts.int_division) check_integer_divisor(facts, inputs);
  if (facts.pow_scalar) check_pow_exponent(inputs);
  if (facts.check_values) facts.check_values(inputs);
  // Writes into a tensor whose elements share memory (an expanded view)
  // are refused exactly as PyTorch's CPU kernels refuse them; the few that
  // allow it write through the view (duplicates take a changed value).
  for (int o = 0; o < n; o++) {
    const tpu_eager_output_t* out = tpu_eager_entry_output(entry, o);
    if (out->alias_arg < 0) continue;
    const c10::IValue& a = inputs[out->alias_arg];
    // A copy: toTensorVector() is a temporary.
    const at::Tensor target = a.isTensor() ? a.toTensor() : a.toTensorVector()[out->alias_list];
    if (facts.overlap_ok && out->alias_arg == 0) {
      if (*facts.overlap_ok && at::has_internal_overlap(target) == at::MemOverlap::Yes)
        TORCH_WARN("Use of ", facts.overlap_ok,
                   " on expanded tensors is deprecated. Please clone() the tensor before "
                   "performing this operation. This also applies to advanced indexing e.g. ",
                   std::strcmp(facts.overlap_ok, "index_put_") == 0 ? "tensor[indices] = tensor"
                                                                   : "tensor[mask] = scalar");
      continue;
    }
    at::assert_no_internal_overlap(target);
  }
  // An input that partly overlaps a written tensor (`t[1:].mul_(t[:-1])`)
  // would read values the write already changed on the CPU; PyTorch
  // refuses it there, and so do we (a full overlap, `x.add_(x)`, is fine).
  for (int o = 0; o < n; o++) {
    const tpu_eager_output_t* out = tpu_eager_entry_output(entry, o);
    if (out->alias_arg < 0 || !inputs[out->alias_arg].isTensor()) continue;
    const at::Tensor& written = inputs[out->alias_arg].toTensor();
    for (size_t i = 0; i < num_args; i++) {
      if (static_cast<int>(i) == out->alias_arg) continue;
      if (facts.no_overlap && inputs[i].isTensorList()) {
        for (const at::Tensor& t : inputs[i].toTensorVector())
          if (t.defined() && is_tpu(t)) at::assert_no_overlap(written, t);
        continue;
      }
      if (!inputs[i].isTensor() || !inputs[i].toTensor().defined() || !is_tpu(inputs[i].toTensor()))
        continue;
      if (facts.no_overlap) at::assert_no_overlap(written, inputs[i].toTensor());
      else at::assert_no_partial_overlap(written, inputs[i].toTensor());
    }
  }
  // Fresh outputs get their tensors first; the engine fills their storages
  // (or, deferred, marks them with the run's value).
  c10::SmallVector<at::Tensor, 4> fresh(static_cast<size_t>(n));
  c10::SmallVector<tpu_storage_t*, 4> fresh_storage(static_cast<size_t>(n), nullptr);
  for (int o = 0; o < n; o++) {
    const tpu_eager_output_t* out = tpu_eager_entry_output(entry, o);
    if (out->alias_arg >= 0) continue;
    fresh[o] = make_fresh(*out, call.device);
    fresh_storage[o] = storage_of(fresh[o].storage());
  }
  TPU_CHECK(tpu_eager_execute(entry, &call, fresh_storage.data()), facts.name.c_str());
  // Results: aliased returns are the argument itself, fresh ones new tensors.
  // Built before the arguments leave the stack (aliases refer to them).
  c10::SmallVector<c10::IValue, 4> results;
  for (size_t r = 0; r < plan->per_return.size(); r++) {
    const auto& idx = plan->per_return[r];
    auto tensor_of = [&](int o) -> at::Tensor {
      if (o < 0) return at::Tensor();
      const tpu_eager_output_t* out = tpu_eager_entry_output(entry, o);
      if (out->alias_arg >= 0) {
        const c10::IValue& a = inputs[out->alias_arg];
        return a.isTensor() ? a.toTensor() : a.toTensorVector()[out->alias_list];
      }
      return std::move(fresh[o]);
    };
    if (plan->is_list[r]) {
      std::vector<at::Tensor> tensors;
      tensors.reserve(idx.size());
      for (int o : idx) tensors.push_back(tensor_of(o));
      results.emplace_back(std::move(tensors));
    } else if (idx.at(0) == kIntReturn) {
      results.emplace_back(plan->ints[r]);
    } else {
      results.emplace_back(tensor_of(idx.at(0)));  // may be undefined (a masked output)
    }
  }
  record_index_check(facts, inputs);
  torch::jit::drop(*stack, num_args);
  for (auto& v : results) stack->push_back(std::move(v));
  tpu_metrics_bump(device_ops_counter(), 1);
  return true;
}

// A compiled graph's checks (torchtpu/_compile.py: an index out of range,
// an integer divisor of 0, ...) when the graph joined a deferred run: its
// 0-d bool flags are read before the next host read, as eager's are, so
// the run is not flushed at every call. Process-wide, not per thread: a
// backward graph runs on autograd's thread, its results are read on the
// caller's.
struct PendingGraphCheck {
  at::Tensor bad;
  int kind;  // 0 RuntimeError, 1 IndexError, 2 ValueError
  std::string message;
};
static std::mutex g_graph_checks_lock;
static std::vector<PendingGraphCheck> g_graph_checks;

static void raise_graph_errors(const std::vector<PendingGraphCheck>& pending) {
  for (const PendingGraphCheck& c : pending) {
    if (!c.bad.item<bool>()) continue;
    TORCH_CHECK_INDEX(c.kind != 1, c.message);
    TORCH_CHECK_VALUE(c.kind != 2, c.message);
    TORCH_CHECK(false, c.message);
  }
}

void push_graph_check(const at::Tensor& bad, int kind, const std::string& message) {
  size_t n;
  {
    std::lock_guard<std::mutex> lock(g_graph_checks_lock);
    g_graph_checks.push_back({bad, kind, message});
    n = g_graph_checks.size();
  }
  // Nothing reads results for a long time: check now rather than grow.
  if (n > 64) check_pending_index_errors();
}

static void raise_index_errors(const std::vector<PendingIndexCheck>& pending);

// Whether any of the flags is true: one host read per device in the common
// case. A deferred run's host read waits only for what it reads (copy.cpp
// reads these flags with the value it is for), so the flags go together:
// read one by one, the first would wait for the rest of the run.
static bool any_flag(const std::vector<at::Tensor>& flags) {
  if (flags.empty()) return false;
  bool one_device = true;
  for (const at::Tensor& f : flags) one_device = one_device && f.device() == flags[0].device();
  if (flags.size() == 1) return flags[0].item<bool>();
  if (one_device) return at::cat(flags).any().item<bool>();
  for (const at::Tensor& f : flags)
    if (f.item<bool>()) return true;
  return false;
}

void check_pending_index_errors() {
  // Taken first: reading a flag is itself a host read.
  std::vector<PendingGraphCheck> graph;
  {
    std::lock_guard<std::mutex> lock(g_graph_checks_lock);
    graph.swap(g_graph_checks);
  }
  at::Tensor target_bad = std::move(t_target_bad);
  t_target_bad = at::Tensor();
  std::deque<PendingTargetCheck> targets;
  targets.swap(t_target_checks);
  std::vector<PendingIndexCheck> pending;
  pending.swap(t_pending_index_checks);
  std::vector<at::Tensor> flags;
  for (const PendingGraphCheck& c : graph) flags.push_back(c.bad.reshape({1}));
  if (target_bad.defined()) flags.push_back(target_bad.reshape({1}));
  for (const PendingIndexCheck& c : pending) flags.push_back(c.bad.reshape({1}));
  if (!any_flag(flags)) return;
  raise_graph_errors(graph);
  if (target_bad.defined() && target_bad.item<bool>()) raise_target_errors(targets);
  raise_index_errors(pending);
}

static void raise_index_errors(const std::vector<PendingIndexCheck>& pending) {
  for (const PendingIndexCheck& c : pending) {
    if (!c.bad.item<bool>()) continue;
    TORCH_CHECK_INDEX(c.message != IndexMessage::kInSelf, "index out of range in self");
    at::Tensor host = c.index.cpu().reshape(-1).to(at::kLong);
    const int64_t* v = host.const_data_ptr<int64_t>();
    int64_t id = 0;
    for (int64_t i = 0; i < host.numel(); i++)
      if (v[i] < c.lo || v[i] >= c.size) {
        id = v[i];
        break;
      }
    switch (c.message) {
      case IndexMessage::kDataBounds:
        TORCH_CHECK(false, "INDICES element is out of DATA bounds, id=", id, " axis_dim=", c.size);
      case IndexMessage::kBoundsIndex:
        TORCH_CHECK_INDEX(false, c.prefix, "index ", id, " is out of bounds for dimension ", c.dim,
                          " with size ", c.size);
      case IndexMessage::kSourceTooSmall:
        TORCH_CHECK(false, "Number of elements of source < number of ones in mask");
      case IndexMessage::kBoundsRuntime:
        TORCH_CHECK(false, c.prefix, "index ", id, " is out of bounds for dimension ", c.dim, " with size ",
                    c.size);
      default:
        TORCH_CHECK_INDEX(false, "out of range: tried to access index ", id, " on a tensor of ", c.size,
                          " elements.");
    }
  }
}

// tpu->tpu copy (or any device-side write of `src` into `dst`'s view).
void device_copy(const at::Tensor& dst, const at::Tensor& src) {
  static const c10::OperatorHandle op =
      c10::Dispatcher::singleton().findSchemaOrThrow("aten::copy_", "");
  torch::jit::Stack stack{dst, src, false};
  TORCH_CHECK(try_run_on_device(op, &stack), "torchtpu: device copy of ", src.scalar_type(),
              src.sizes(), " into ", dst.scalar_type(), dst.sizes(), " is not supported");
}

}  // namespace torchtpu
