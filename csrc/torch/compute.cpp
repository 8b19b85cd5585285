// torchtpu::run_stablehlo: a user-supplied StableHLO module run over tpu
// tensors. Its operands are staged into buffers of the declared shapes
// (storages keep their flat buffers).
#include <ATen/ATen.h>
#include <torch/library.h>

#include <vector>

#include "common.h"

extern "C" {
#include "core/hlo/signature.h"
#include "core/program.h"
#include "core/runtime.h"
}

namespace torchtpu {

namespace {

// Device operands: the tensors (kept alive until the work is enqueued) and
// their buffers shaped as the program declares them.
struct Operands {
  std::vector<at::Tensor> keep;
  std::vector<tpu_buffer_t*> buffers;

  void add_tensor(const at::Tensor& t) {
    // A private copy: reshaping its buffer must not disturb t's storage.
    at::Tensor dense = at::empty(t.sizes(), t.options());
    dense.copy_(t);
    tpu_buffer_t* buffer = nullptr;
    TPU_CHECK(tpu_storage_buffer_as(storage_of(dense.storage()),
                                    to_tpu_dtype(dense.scalar_type()),
                                    dense.sizes().data(),
                                    static_cast<int>(dense.dim()), &buffer),
              "preparing an operand");
    keep.push_back(std::move(dense));
    buffers.push_back(buffer);
  }
};

// torchtpu::run_stablehlo(str module, Tensor[] inputs) -> Tensor[]
std::vector<at::Tensor> run_stablehlo(c10::string_view module,
                                      at::TensorList inputs) {
  ensure_runtime();
  c10::Device device(c10::DeviceType::PrivateUse1, current_device());
  tpu_program_t* program = nullptr;
  TPU_CHECK(tpu_program_get(module.data(), module.size(), &program),
            "run_stablehlo: the module does not compile");
  // PJRT checks arguments by byte size only; check dtype and shape here so
  // a mismatch is an error instead of reinterpreted bits.
  std::vector<tpu_hlo_type_t> params(inputs.size() + 1);
  size_t num_params = 0;
  TPU_CHECK(tpu_hlo_parse_main_params(module.data(), module.size(), params.data(),
                                      params.size(), &num_params),
            "run_stablehlo: reading the module's @main signature");
  TORCH_CHECK(num_params == inputs.size(), "torchtpu.run_stablehlo: @main takes ",
              num_params, " arguments, got ", inputs.size(), " tensors");
  for (size_t i = 0; i < inputs.size(); i++) {
    const auto& t = inputs[i];
    const tpu_hlo_type_t& p = params[i];
    bool same = is_supported_dtype(t.scalar_type()) &&
                to_tpu_dtype(t.scalar_type()) == p.dtype && t.dim() == p.rank;
    for (int d = 0; same && d < p.rank; d++) same = t.size(d) == p.dims[d];
    if (!same) {
      char declared[256];
      tpu_hlo_type_print(&p, declared, sizeof declared);
      TORCH_CHECK(false, "torchtpu.run_stablehlo: argument ", i, " is declared ",
                  declared, " but the tensor is ", t.scalar_type(), t.sizes());
    }
  }
  Operands operands;
  for (const auto& t : inputs) {
    TORCH_CHECK(t.device().is_privateuseone(),
                "torchtpu.run_stablehlo: inputs must be tpu tensors, got one on ",
                t.device());
    device = t.device();
    operands.add_tensor(t);
  }
  tpu_executable_t* exe = tpu_program_executable(program);
  int n = tpu_program_num_outputs(program);
  std::vector<tpu_buffer_t*> results(n, nullptr);
  static const char kLabel[] = "torchtpu.run_stablehlo (a kernel)";
  tpu_runtime_set_op_label(kLabel);
  tpu_status_t run_status =
      tpu_program_execute(program, device.index(), operands.buffers.data(),
                          static_cast<int>(operands.buffers.size()), results.data());
  tpu_runtime_set_op_label(nullptr);
  TPU_CHECK(run_status, "run_stablehlo");
  for (tpu_buffer_t* r : results) tpu_buffer_set_producer(r, kLabel);
  std::vector<at::Tensor> outs;
  for (int i = 0; i < n; i++) {
    const int64_t* dims = tpu_executable_output_dims(exe, i);
    int rank = tpu_executable_output_rank(exe, i);
    c10::ScalarType dtype = to_scalar_type(tpu_executable_output_dtype(exe, i));
    at::Tensor out = at::empty(c10::IntArrayRef(dims, rank),
                               at::TensorOptions().dtype(dtype).device(device));
    tpu_status_t s = tpu_storage_set_buffer(storage_of(out.storage()), results[i]);
    results[i] = nullptr;
    if (s) {
      for (auto* r : results) tpu_buffer_destroy(r);
      throw_status(s, "run_stablehlo");
    }
    outs.push_back(std::move(out));
  }
  return outs;
}

TORCH_LIBRARY(torchtpu, m) {
  m.def("run_stablehlo(str module, Tensor[] inputs) -> Tensor[]");
}

TORCH_LIBRARY_IMPL(torchtpu, PrivateUse1, m) {
  m.impl("run_stablehlo", run_stablehlo);
}

}  // namespace
}  // namespace torchtpu
