// Device placement: an op whose tensors live on different devices raises as
// it does on CUDA, before anything runs. Without this the CPU fallback took
// such calls and the result landed wherever the first tensor was, so code
// that forgot a .to("tpu") silently computed on the CPU.
//
// What PyTorch allows, and so do we:
// - 0-dim CPU tensors (wrapped numbers, `torch.tensor(2.)`) act as scalars;
// - index lists (`Tensor?[]`, the indices of index / index_put) may live on
//   the CPU or on the indexed tensor's device (check_indices_on_cpu_or_
//   selfdevice in PyTorch's advanced indexing);
// - the per-tensor scalars of _foreach_*.Tensor ops are a 1-D CPU tensor;
// - copies and device moves (copy_, _to_copy, to, ops with a device
//   argument) exist to cross devices.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <optional>
#include <string>

#include "args.h"
#include "common.h"
#include "placement.h"

namespace torchtpu {
namespace {

bool crosses_devices(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> inputs) {
  const std::string& name = op.schema().name();
  if (name == "aten::copy_" || name == "aten::_copy_from" ||
      name == "aten::_copy_from_and_resize" || name == "aten::_to_copy" || name == "aten::to" ||
      name == "aten::set_" || name == "aten::_has_compatible_shallow_copy_type" ||
      name == "aten::is_same_size" || name == "aten::is_set_to")
    return true;
  const auto& args = op.schema().arguments();
  for (size_t i = 0; i < args.size() && i < inputs.size(); i++) {
    c10::TypePtr t = args[i].real_type();
    if (t->kind() == c10::TypeKind::OptionalType)
      t = t->castRaw<c10::OptionalType>()->getElementType();
    if (t->kind() == c10::TypeKind::DeviceObjType && !inputs[i].isNone()) return true;
  }
  return false;
}

bool is_index_list(const c10::Argument& arg) {
  return classify(arg) == ArgClass::kOptTensorList;
}

std::string op_name(const c10::OperatorHandle& op) {
  const auto& n = op.schema().operator_name();
  return n.name + (n.overload_name.empty() ? "" : "." + n.overload_name);
}

// The first tensor argument: the "self" an index list refers to.
std::optional<c10::Device> self_device(c10::ArrayRef<c10::IValue> inputs) {
  for (const auto& v : inputs)
    if (v.isTensor() && v.toTensor().defined()) return v.toTensor().device();
  return std::nullopt;
}

struct Seen {
  std::optional<c10::Device> device;  // the op's device: the first non-scalar one
  const at::Tensor* first = nullptr;
  std::optional<c10::Device> other;  // a second device, if any
  std::string other_arg;
};

void visit(const at::Tensor& t, const std::string& arg, bool foreach_scalars, Seen* seen) {
  if (!t.defined()) return;
  if (t.device().is_cpu() && (t.dim() == 0 || (foreach_scalars && t.dim() == 1))) return;
  if (!seen->device) {
    seen->device = t.device();
    return;
  }
  if (t.device() == *seen->device || seen->other) return;
  seen->other = t.device();
  seen->other_arg = arg;
}

}  // namespace

bool check_placement(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> inputs) {
  if (crosses_devices(op, inputs)) return false;
  const auto& args = op.schema().arguments();
  const bool foreach = op.schema().name().find("::_foreach_") != std::string::npos;
  Seen seen;
  bool cpu_indices = false;
  std::optional<c10::Device> self;
  for (size_t i = 0; i < args.size() && i < inputs.size(); i++) {
    const c10::IValue& v = inputs[i];
    if (v.isTensor()) {
      visit(v.toTensor(), args[i].name(), foreach, &seen);
    } else if (v.isTensorList()) {
      for (const at::Tensor& t : v.toTensorVector()) visit(t, args[i].name(), false, &seen);
    } else if (v.isList() && is_index_list(args[i])) {
      if (!self) self = self_device(inputs);
      auto list = v.toList();
      for (size_t k = 0; k < list.size(); k++) {
        c10::IValue e = list.get(k);
        if (e.isNone() || !e.toTensor().defined()) continue;
        const c10::Device d = e.toTensor().device();
        if (d.is_cpu() && !(self && self->is_cpu())) {
          cpu_indices = true;
          continue;
        }
        // PyTorch's own wording and type (IndexError).
        TORCH_CHECK_INDEX(self && d == *self, "indices should be either on cpu or on the same "
                          "device as the indexed tensor (", self ? self->str() : "none",
                          ") (in method ", op_name(op), ")");
      }
    }
  }
  if (seen.other) {
    // CUDA's wording, the device of the op (a tpu one) first.
    c10::Device a = *seen.device, b = *seen.other;
    if (!a.is_privateuseone() && b.is_privateuseone()) std::swap(a, b);
    TORCH_CHECK(false, "Expected all tensors to be on the same device, but found at least two "
                "devices, ", a, " and ", b, "! (when checking argument for argument ",
                seen.other_arg, " in method ", op_name(op), ")");
  }
  return cpu_indices;
}

void move_cpu_indices(const c10::OperatorHandle& op, torch::jit::Stack* stack, size_t num_args) {
  const auto& args = op.schema().arguments();
  const size_t first = stack->size() - num_args;
  std::optional<c10::Device> device =
      self_device(c10::ArrayRef<c10::IValue>(stack->data() + first, num_args));
  if (!device || !device->is_privateuseone()) return;
  for (size_t i = 0; i < num_args; i++) {
    c10::IValue& v = (*stack)[first + i];
    if (!v.isList() || !is_index_list(args[i])) continue;
    auto list = v.toList();
    c10::List<std::optional<at::Tensor>> moved;
    for (size_t k = 0; k < list.size(); k++) {
      c10::IValue e = list.get(k);
      if (e.isNone() || !e.toTensor().defined()) {
        moved.push_back(std::nullopt);
        continue;
      }
      const at::Tensor& t = e.toTensor();
      moved.push_back(t.device().is_cpu() ? t.to(*device) : t);
    }
    v = c10::IValue(std::move(moved));
  }
}

}  // namespace torchtpu
