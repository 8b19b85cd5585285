// Python binding of the local collectives (core/collective.h): tensors on
// distinct tpu devices of this process, combined by one XLA program. Only
// conversion and argument checks here; torchtpu/comm.py is the API.
#include <ATen/ATen.h>
#include <torch/csrc/utils/pybind.h>

#include <string>
#include <vector>

#include "common.h"

extern "C" {
#include "core/collective.h"
}

namespace py = pybind11;

namespace torchtpu {
namespace {

// A tensor that is exactly its storage (contiguous, offset 0, no slack):
// the program reads and writes whole flat storages.
bool is_whole(const at::Tensor& t) {
  return t.is_contiguous() && t.storage_offset() == 0 &&
         t.storage().nbytes() == static_cast<size_t>(t.numel()) * t.itemsize();
}

// kind: "all_reduce" | "all_gather" | "reduce_scatter"; op: the
// tpu_collective_op_t value. outputs are fresh tensors (comm.py makes
// them), one per input, on the input's device.
void collective(const std::string& kind, int op, const std::vector<at::Tensor>& inputs,
                const std::vector<at::Tensor>& outputs) {
  tpu_collective_kind_t k;
  if (kind == "all_reduce") k = TPU_COLLECTIVE_ALL_REDUCE;
  else if (kind == "all_gather") k = TPU_COLLECTIVE_ALL_GATHER;
  else if (kind == "reduce_scatter") k = TPU_COLLECTIVE_REDUCE_SCATTER;
  else throw py::value_error("torchtpu: unknown collective " + kind);
  const size_t n = inputs.size();
  if (n == 0 || outputs.size() != n)
    throw py::value_error("torchtpu: " + kind + " takes one output per input, and at least one");
  std::vector<at::Tensor> keep;
  std::vector<tpu_storage_t*> in(n), out(n);
  for (size_t i = 0; i < n; i++) {
    const at::Tensor& t = inputs[i];
    const at::Tensor& o = outputs[i];
    if (!t.defined() || !t.device().is_privateuseone())
      throw py::value_error("torchtpu: " + kind + " input " + std::to_string(i) +
                            " is not a tpu tensor");
    // The core checks its flat buffers; shapes are only known here.
    if (t.scalar_type() != inputs[0].scalar_type() || t.sizes() != inputs[0].sizes())
      throw std::runtime_error("torchtpu: torch.tpu.comm." + kind + ": input " + std::to_string(i) +
                               " is " + std::string(c10::toString(t.scalar_type())) +
                               c10::str(t.sizes()) + " but input 0 is " +
                               c10::toString(inputs[0].scalar_type()) + c10::str(inputs[0].sizes()) +
                               ": every input must have the same dtype and shape");
    if (!o.defined() || o.device() != t.device() || o.scalar_type() != t.scalar_type() ||
        !is_whole(o))
      throw py::value_error("torchtpu: " + kind + " output " + std::to_string(i) +
                            " must be a contiguous tensor of the input's dtype on its device");
    // A view that is not its whole storage is first copied into one (an
    // eager op on its device).
    keep.push_back(is_whole(t) ? t : t.clone(at::MemoryFormat::Contiguous));
    in[i] = storage_of(keep.back().storage());
    out[i] = storage_of(o.storage());
  }
  tpu_dtype_t dtype = to_tpu_dtype_on_device(inputs[0].scalar_type());
  tpu_status_t s;
  {
    py::gil_scoped_release release;
    s = tpu_collective_run_storages(k, static_cast<tpu_collective_op_t>(op), in.data(), dtype,
                                    inputs[0].numel(), static_cast<int>(n), out.data());
  }
  if (s) throw_status(s, "torch.tpu.comm");
}

}  // namespace

void init_comm_bindings(py::module& m) {
  m.def("_collective", &collective, py::arg("kind"), py::arg("op"), py::arg("inputs"),
        py::arg("outputs"));
}

}  // namespace torchtpu
