// The boxed kernel behind every tpu op: ATen arguments -> C descriptors ->
// the eager engine (csrc/core/eager.c). On a cache miss the outputs'
// metadata comes from PyTorch's meta kernel (once per key); ops the table
// does not lower, or calls a lowering declines, go to the CPU fallback.
#include <ATen/ATen.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/native/CPUFallback.h>
#include <torch/library.h>

#include <deque>
#include <string>
#include <vector>

#include "common.h"

extern "C" {
#include "core/eager.h"
#include "core/metrics.h"
#include "core/runtime.h"
}

namespace torchtpu {
void cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack);

namespace {

using c10::TypeKind;

c10::TypePtr unwrap_optional(const c10::TypePtr& t) {
  if (t->kind() == TypeKind::OptionalType) return t->castRaw<c10::OptionalType>()->getElementType();
  return t;
}

bool is_tpu(const at::Tensor& t) { return t.defined() && t.device().is_privateuseone(); }

// Everything a call needs kept alive while the engine reads it.
struct CallBuilder {
  std::string op_name;
  std::vector<tpu_eager_arg_t> args;
  std::vector<tpu_eager_tensor_t> list;
  std::deque<std::vector<double>> scalar_lists;
  std::deque<std::string> strings;
  int device = -1;
  bool ok = true;  // false: the call cannot run on the device (fallback)
  std::string why;

  void refuse(std::string reason) {
    if (ok) why = std::move(reason);
    ok = false;
  }

  tpu_eager_tensor_t describe(const at::Tensor& t) {
    tpu_eager_tensor_t d{};
    if (!is_supported_dtype(t.scalar_type())) {
      refuse("unsupported dtype");
      return d;
    }
    if (t.dim() > TPU_HLO_MAX_RANK) {
      refuse("rank too high");
      return d;
    }
    if (device < 0) device = t.device().index();
    else if (device != t.device().index()) refuse("tensors on different tpu devices");
    d.storage = storage_of(t.storage());
    d.view.dtype = to_tpu_dtype(t.scalar_type());
    d.view.rank = static_cast<int>(t.dim());
    for (int i = 0; i < d.view.rank; i++) {
      d.view.sizes[i] = t.size(i);
      d.view.strides[i] = t.stride(i);
    }
    d.view.offset = t.storage_offset();
    d.storage_numel = static_cast<int64_t>(t.storage().nbytes() / t.itemsize());
    return d;
  }

  void add_tensor(const at::Tensor& t) {
    tpu_eager_arg_t a{};
    if (!t.defined()) {
      a.lower.kind = TPU_ARG_NONE;
    } else if (is_tpu(t)) {
      a.lower.kind = TPU_ARG_TENSOR;
      a.tensor = describe(t);
      a.lower.type = tpu_hlo_type_make(a.tensor.view.dtype, a.tensor.view.rank, a.tensor.view.sizes);
    } else if (t.device().is_cpu() && t.dim() == 0 && is_supported_dtype(t.scalar_type())) {
      // A CPU scalar tensor (wrapped Python number or 0-dim tensor): a
      // run-time argument.
      a.lower.kind = TPU_ARG_SCALAR;
      a.lower.type = tpu_hlo_type_scalar(to_tpu_dtype(t.scalar_type()));
      a.lower.wrapped_number = t.unsafeGetTensorImpl()->is_wrapped_number();
      std::memcpy(a.scalar, t.const_data_ptr(), t.itemsize());
    } else if (t.device().is_cpu() && t.dim() == 1 && op_name.find("::_foreach_") != std::string::npos) {
      // _foreach_*.Tensor ops take their per-tensor scalars as a 1-D CPU
      // tensor: run-time scalars, like a ScalarList.
      a.lower.kind = TPU_ARG_SCALARS;
      at::Tensor values = t.to(at::kDouble).contiguous();
      scalar_lists.emplace_back(values.data_ptr<double>(), values.data_ptr<double>() + values.numel());
      a.lower.num_tensors = static_cast<int>(values.numel());
      int64_t n = a.lower.num_tensors;
      a.lower.type = tpu_hlo_type_make(TPU_DTYPE_FLOAT64, 1, &n);
      a.scalars = scalar_lists.back().data();
    } else {
      refuse("a non-scalar tensor on " + t.device().str());
    }
    args.push_back(a);
  }

  void add_scalar(const at::Scalar& s) {
    tpu_eager_arg_t a{};
    a.lower.kind = TPU_ARG_SCALAR;
    if (s.isBoolean()) {
      a.lower.type = tpu_hlo_type_scalar(TPU_DTYPE_BOOL);
      bool v = s.toBool();
      std::memcpy(a.scalar, &v, 1);
    } else if (s.isIntegral(false)) {
      a.lower.type = tpu_hlo_type_scalar(TPU_DTYPE_INT64);
      int64_t v = s.toLong();
      std::memcpy(a.scalar, &v, 8);
    } else if (s.isComplex()) {
      a.lower.type = tpu_hlo_type_scalar(TPU_DTYPE_COMPLEX64);
      c10::complex<float> v = s.toComplexFloat();
      std::memcpy(a.scalar, &v, 8);
    } else {
      a.lower.type = tpu_hlo_type_scalar(TPU_DTYPE_FLOAT64);
      double v = s.toDouble();
      std::memcpy(a.scalar, &v, 8);
    }
    a.lower.wrapped_number = true;
    args.push_back(a);
  }

  void add(const c10::Argument& schema_arg, const c10::IValue& v) {
    // real_type(): the declared type (ScalarType, Layout...), which type()
    // erases to int.
    c10::TypePtr type = unwrap_optional(schema_arg.real_type());
    tpu_eager_arg_t a{};
    if (v.isNone()) {
      a.lower.kind = TPU_ARG_NONE;
      args.push_back(a);
      return;
    }
    switch (type->kind()) {
      case TypeKind::TensorType:
        add_tensor(v.toTensor());
        return;
      case TypeKind::NumberType:
        add_scalar(v.toScalar());
        return;
      case TypeKind::IntType:
      case TypeKind::SymIntType:
        a.lower.kind = TPU_ARG_INT;
        a.lower.i = v.isSymInt() ? v.toSymInt().expect_int() : v.toInt();
        break;
      case TypeKind::FloatType:
        a.lower.kind = TPU_ARG_FLOAT;
        a.lower.f = v.toDouble();
        break;
      case TypeKind::BoolType:
        a.lower.kind = TPU_ARG_BOOL;
        a.lower.i = v.toBool();
        break;
      case TypeKind::ScalarTypeType: {
        a.lower.kind = TPU_ARG_DTYPE;
        auto st = static_cast<c10::ScalarType>(v.toInt());
        a.lower.dtype = is_supported_dtype(st) ? to_tpu_dtype(st) : TPU_DTYPE_INVALID;
        break;
      }
      case TypeKind::StringType:
        a.lower.kind = TPU_ARG_STRING;
        strings.push_back(std::string(v.toStringRef()));
        a.lower.str = strings.back().c_str();
        break;
      case TypeKind::ListType: {
        c10::TypePtr elem = type->castRaw<c10::ListType>()->getElementType();
        c10::TypePtr inner = unwrap_optional(elem);
        if (elem->kind() == TypeKind::BoolType) {
          // bool[] (e.g. a backward's output_mask) as 0/1 INTS.
          auto bools = v.toBoolList();
          if (bools.size() > TPU_LOWER_MAX_INTS) {
            refuse("bool list too long");
            break;
          }
          a.lower.kind = TPU_ARG_INTS;
          a.lower.num_ints = static_cast<int>(bools.size());
          for (size_t i = 0; i < bools.size(); i++) a.lower.ints[i] = bools.get(i) ? 1 : 0;
        } else if (elem->kind() == TypeKind::IntType || elem->kind() == TypeKind::SymIntType) {
          std::vector<int64_t> ints;
          if (v.isIntList()) {
            ints = v.toIntVector();
          } else {
            for (const auto& e : v.toSymIntList()) ints.push_back(c10::SymInt(e).expect_int());
          }
          if (ints.size() > TPU_LOWER_MAX_INTS) {
            refuse("int list too long");
            break;
          }
          a.lower.kind = TPU_ARG_INTS;
          a.lower.num_ints = static_cast<int>(ints.size());
          for (size_t i = 0; i < ints.size(); i++) a.lower.ints[i] = ints[i];
        } else if (inner->kind() == TypeKind::TensorType) {
          a.lower.kind = TPU_ARG_TENSORS;
          a.list_start = static_cast<int>(list.size());
          auto elems = v.toListRef();
          bool optional = elem->kind() == TypeKind::OptionalType;
          if (optional && elems.size() > TPU_LOWER_MAX_INTS) {
            refuse("optional tensor list too long");
            break;
          }
          int present = 0;
          for (size_t i = 0; i < elems.size(); i++) {
            if (elems[i].isNone() || !elems[i].toTensor().defined()) continue;
            const at::Tensor& t = elems[i].toTensor();
            if (!is_tpu(t)) {
              refuse("a list tensor on " + t.device().str());
              continue;
            }
            list.push_back(describe(t));
            if (optional) a.lower.ints[present] = static_cast<int64_t>(i);
            present++;
          }
          a.lower.num_tensors = present;
          if (optional) a.lower.num_ints = static_cast<int>(elems.size());
        } else if (elem->kind() == TypeKind::FloatType || elem->kind() == TypeKind::NumberType) {
          a.lower.kind = TPU_ARG_SCALARS;
          std::vector<double> values;
          for (const auto& e : v.toListRef()) values.push_back(e.toScalar().toDouble());
          a.lower.num_tensors = static_cast<int>(values.size());
          int64_t n = a.lower.num_tensors;
          a.lower.type = tpu_hlo_type_make(TPU_DTYPE_FLOAT64, 1, &n);
          scalar_lists.push_back(std::move(values));
          a.scalars = scalar_lists.back().data();
        } else {
          a.lower.kind = TPU_ARG_OTHER;
        }
        break;
      }
      case TypeKind::DeviceObjType:
        a.lower.kind = TPU_ARG_OTHER;
        if (v.isDevice() && v.toDevice().is_privateuseone() && device < 0)
          device = v.toDevice().has_index() ? v.toDevice().index() : current_device();
        break;
      default:
        a.lower.kind = TPU_ARG_OTHER;
    }
    args.push_back(a);
  }

  tpu_eager_call_t call() {
    tpu_eager_call_t c{};
    c.op_name = op_name.c_str();
    c.device = device < 0 ? current_device() : device;
    c.num_args = static_cast<int>(args.size());
    c.args = args.data();
    c.num_list = static_cast<int>(list.size());
    c.list = list.data();
    return c;
  }
};

// ---- meta: the outputs' metadata from PyTorch's meta kernels -------------

c10::IValue to_meta(const c10::IValue& v) {
  if (v.isDevice() && v.toDevice().is_privateuseone()) return c10::Device(at::kMeta);
  if (v.isTensor()) {
    const at::Tensor& t = v.toTensor();
    if (t.defined() && t.device().is_cpu() && t.dim() == 0 &&
        !t.unsafeGetTensorImpl()->is_wrapped_number()) {
      // A 0-dim CPU tensor: some meta kernels (masked_fill_) want every
      // tensor on one device. Wrapped Python numbers must stay on the CPU.
      return at::empty({}, at::TensorOptions().dtype(t.scalar_type()).device(at::kMeta));
    }
    if (!is_tpu(t)) return v;
    at::Tensor m = at::empty_strided(t.sizes(), t.strides(),
                                     at::TensorOptions().dtype(t.scalar_type()).device(at::kMeta));
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
  // out= arguments the meta kernel resized: (argument index, new sizes).
  std::vector<std::pair<int, std::vector<int64_t>>> resizes;
  // For building the result stack: per schema return, the output indices.
  std::vector<std::vector<int>> per_return;
};

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

// Runs the op on meta tensors and maps its returns (and mutated arguments)
// to engine outputs. False if there is no meta kernel or it fails.
bool plan_outputs(const c10::OperatorHandle& op, const torch::jit::Stack& inputs,
                  OutputPlan* plan, std::string* why) {
  const auto& schema = op.schema();
  torch::jit::Stack meta_stack;
  for (const auto& v : inputs) meta_stack.push_back(to_meta(v));
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
    if (alias_arg >= 0 && alias_list < 0 && inputs[alias_arg].isTensor() &&
        inputs[alias_arg].toTensor().sizes() != m.sizes())
      plan->resizes.emplace_back(alias_arg, m.sizes().vec());
    plan->outputs.push_back(o);
    return true;
  };
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

// Fresh output tensors from the engine's buffers.
at::Tensor make_fresh(const tpu_eager_output_t& o, tpu_buffer_t* buffer, int device) {
  const tpu_view_t& v = o.view;
  at::Tensor t = at::empty_strided(
      c10::IntArrayRef(v.sizes, v.rank), c10::IntArrayRef(v.strides, v.rank),
      at::TensorOptions().dtype(to_scalar_type(v.dtype)).device(c10::kPrivateUse1, device));
  if (v.offset != 0) t = t.as_strided(t.sizes(), t.strides(), v.offset);
  if (buffer) TPU_CHECK(tpu_storage_set_buffer(storage_of(t.storage()), buffer), "installing an output");
  return t;
}

// The per-op plan cached beside the engine entry: how returns map to
// outputs. Keyed by the entry pointer (entries live forever).
std::mutex g_plans_lock;
std::unordered_map<const tpu_eager_entry_t*, std::vector<std::vector<int>>> g_plans;

}  // namespace

// Runs `op` on the device if the table lowers it; returns false to mean "use
// the CPU fallback" (stack untouched).
bool try_run_on_device(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& schema = op.schema();
  const auto& name = schema.operator_name();
  CallBuilder builder;
  builder.op_name = name.name + (name.overload_name.empty() ? "" : "." + name.overload_name);
  if (!tpu_lowering_find(builder.op_name.c_str())) return false;
  size_t num_args = schema.arguments().size();
  auto inputs = torch::jit::last(*stack, num_args);
  for (size_t i = 0; i < num_args; i++) builder.add(schema.arguments()[i], inputs[i]);
  if (!builder.ok || builder.device < 0) return false;
  tpu_eager_call_t call = builder.call();
  tpu_eager_entry_t* entry = tpu_eager_lookup(&call);
  if (!entry) {
    OutputPlan plan;
    std::string why;
    torch::jit::Stack input_copy(inputs.begin(), inputs.end());
    if (!plan_outputs(op, input_copy, &plan, &why)) {
      tpu_eager_mark_fallback(&call, why.c_str());
      tpu_metrics_add(("fallback_reason::" + builder.op_name + ": " + why).c_str(), 0);
      return false;
    }
    if (!plan.resizes.empty()) {
      // An out= tensor of the wrong size: resize it as the kernel would,
      // then run again with the new geometry.
      for (const auto& [index, sizes] : plan.resizes) inputs[index].toTensor().resize_(sizes);
      return try_run_on_device(op, stack);
    }
    TPU_CHECK(tpu_eager_compile(&call, plan.outputs.data(), static_cast<int>(plan.outputs.size()),
                                &entry),
              builder.op_name.c_str());
    if (!tpu_eager_entry_is_fallback(entry)) {
      std::lock_guard<std::mutex> guard(g_plans_lock);
      g_plans.emplace(entry, std::move(plan.per_return));
    }
  }
  if (tpu_eager_entry_is_fallback(entry)) {
    // Why this call runs on the CPU, for torchtpu.metrics.fallback_reasons().
    tpu_metrics_add(("fallback_reason::" + builder.op_name + ": " +
                     tpu_eager_entry_fallback_reason(entry)).c_str(), 0);
    return false;
  }
  const std::vector<std::vector<int>>* plan_ptr;
  {
    // Map nodes are stable and never erased: the pointer stays valid.
    std::lock_guard<std::mutex> guard(g_plans_lock);
    plan_ptr = &g_plans.at(entry);
  }
  const auto& per_return = *plan_ptr;
  int n = tpu_eager_entry_num_outputs(entry);
  // Writes into a tensor whose elements share memory (an expanded view)
  // are refused exactly as PyTorch's CPU kernels refuse them.
  for (int o = 0; o < n; o++) {
    const tpu_eager_output_t* out = tpu_eager_entry_output(entry, o);
    if (out->alias_arg < 0) continue;
    const c10::IValue& a = inputs[out->alias_arg];
    at::assert_no_internal_overlap(a.isTensor() ? a.toTensor()
                                                : a.toTensorVector()[out->alias_list]);
  }
  std::vector<tpu_buffer_t*> fresh(n, nullptr);
  TPU_CHECK(tpu_eager_execute(entry, &call, fresh.data()), builder.op_name.c_str());
  // Results: aliased returns are the argument itself, fresh ones new tensors.
  std::vector<c10::IValue> arg_values(inputs.begin(), inputs.end());
  torch::jit::drop(*stack, num_args);
  const auto& returns = schema.returns();
  for (size_t r = 0; r < returns.size(); r++) {
    const auto& idx = per_return[r];
    bool is_list = returns[r].type()->kind() == TypeKind::ListType;
    std::vector<at::Tensor> tensors;
    for (int o : idx) {
      if (o < 0) {
        tensors.emplace_back();
        continue;
      }
      const tpu_eager_output_t* out = tpu_eager_entry_output(entry, o);
      if (out->alias_arg >= 0) {
        const c10::IValue& a = arg_values[out->alias_arg];
        tensors.push_back(a.isTensor() ? a.toTensor() : a.toTensorVector()[out->alias_list]);
      } else {
        tensors.push_back(make_fresh(*out, fresh[o], call.device));
        fresh[o] = nullptr;
      }
    }
    if (is_list) stack->emplace_back(tensors);
    else stack->emplace_back(tensors.at(0));  // may be undefined (a masked output)
  }
  for (auto* b : fresh) tpu_buffer_destroy(b);
  tpu_metrics_add("device_ops", 1);
  return true;
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
