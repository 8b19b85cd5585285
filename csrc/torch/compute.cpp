// Ops that run on the device through the lowering table: the binary
// arithmetic family, mm, fill_/zero_, and torchtpu::run_stablehlo (a
// user-supplied StableHLO module over tpu tensors). Anything these kernels
// do not cover goes to the CPU fallback, counted as usual.
#include <ATen/ATen.h>
#include <ATen/ExpandUtils.h>
#include <ATen/Operators.h>
#include <ATen/native/CPUFallback.h>
#include <torch/library.h>

#include <vector>

#include "common.h"

extern "C" {
#include "core/hlo/signature.h"
#include "core/lower.h"
#include "core/program.h"
#include "core/runtime.h"
}

namespace torchtpu {
void cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack);

namespace {

tpu_hlo_type_t hlo_type(c10::ScalarType dtype, c10::IntArrayRef sizes) {
  TORCH_CHECK(sizes.size() <= TPU_HLO_MAX_RANK, "torchtpu: rank ", sizes.size(),
              " exceeds the supported ", TPU_HLO_MAX_RANK);
  return tpu_hlo_type_make(to_tpu_dtype(dtype), static_cast<int>(sizes.size()),
                           sizes.data());
}

bool covers_dense_contiguous(const at::Tensor& t) {
  return t.storage_offset() == 0 && t.is_contiguous() &&
         static_cast<size_t>(t.numel()) * t.itemsize() == t.storage().nbytes();
}

// Device operands: the tensors (kept alive until the work is enqueued) and
// their buffers shaped as the program declares them.
struct Operands {
  std::vector<at::Tensor> keep;
  std::vector<tpu_buffer_t*> buffers;
  std::vector<tpu_buffer_t*> owned;  // scalar uploads, destroyed after enqueue
  ~Operands() {
    for (auto* b : owned) tpu_buffer_destroy(b);
  }

  void add_tensor(const at::Tensor& t) {
    at::Tensor dense = t;
    if (!covers_dense_contiguous(dense)) {
      dense = at::empty(t.sizes(), t.options());
      dense.copy_(t);
    }
    tpu_buffer_t* buffer = nullptr;
    TPU_CHECK(tpu_storage_buffer_as(storage_of(dense.storage()),
                                    to_tpu_dtype(dense.scalar_type()),
                                    dense.sizes().data(),
                                    static_cast<int>(dense.dim()), &buffer),
              "preparing an operand");
    keep.push_back(std::move(dense));
    buffers.push_back(buffer);
  }

  // A host scalar as a rank-0 runtime argument (so new values never recompile).
  void add_scalar(const at::Scalar& value, c10::ScalarType dtype, int device) {
    at::Tensor host = at::scalar_tensor(value, at::TensorOptions().dtype(dtype));
    tpu_buffer_t* buffer = nullptr;
    TPU_CHECK(tpu_buffer_from_host(tpu_runtime_client(), device, host.data_ptr(),
                                   to_tpu_dtype(dtype), nullptr, 0, nullptr, &buffer),
              "uploading a scalar argument");
    owned.push_back(buffer);
    buffers.push_back(buffer);
  }
};

// Compiles (or finds) `text` and enqueues it; returns its single output.
tpu_buffer_t* run_program(char* text, size_t len, Operands& operands,
                          c10::Device device, const char* op_name) {
  tpu_program_t* program = nullptr;
  tpu_status_t s = tpu_program_get(text, len, &program);
  free(text);
  if (s) throw_status(tpu_status_annotate(s, "%s: ", op_name), "compiling");
  tpu_buffer_t* result = nullptr;
  TPU_CHECK(tpu_program_execute(program, device.index(), operands.buffers.data(),
                                static_cast<int>(operands.buffers.size()), &result),
            op_name);
  return result;
}

// Makes `buffer` (owned) the contents of tensor `t`'s whole storage.
void install(const at::Tensor& t, tpu_buffer_t* buffer, const char* op_name) {
  TPU_CHECK(tpu_storage_set_buffer(storage_of(t.storage()), buffer), op_name);
}

at::Tensor run_single(char* text, size_t len, Operands& operands,
                      c10::IntArrayRef sizes, c10::ScalarType dtype,
                      c10::Device device, const char* op_name) {
  at::Tensor out = at::empty(sizes, at::TensorOptions().dtype(dtype).device(device));
  install(out, run_program(text, len, operands, device, op_name), op_name);
  return out;
}

bool native_dtype(c10::ScalarType t) {
  return t == c10::kFloat || t == c10::kBFloat16 || t == c10::kHalf ||
         t == c10::kDouble || t == c10::kInt || t == c10::kLong;
}

// a <op> b on the device when both are tpu tensors of one dtype (or b is a
// CPU scalar that does not change the result dtype); else nullopt.
std::optional<at::Tensor> try_binary(tpu_binary_op_t op, const at::Tensor& a,
                                     const at::Tensor& b, const at::Scalar& alpha,
                                     const char* name) {
  if (!alpha.equal(1) || !a.device().is_privateuseone()) return std::nullopt;
  c10::ScalarType dtype = a.scalar_type();
  if (!native_dtype(dtype) || at::result_type(a, b) != dtype) return std::nullopt;
  if (op == TPU_BINARY_DIV && !c10::isFloatingType(dtype)) return std::nullopt;
  bool b_scalar = b.device().is_cpu() && b.dim() == 0;
  if (!b_scalar && (b.device() != a.device() || b.scalar_type() != dtype))
    return std::nullopt;
  auto out_sizes = at::infer_size(a.sizes(), b.sizes());
  if (a.numel() == 0 || b.numel() == 0) return std::nullopt;
  Operands operands;
  operands.add_tensor(a);
  tpu_hlo_type_t lhs = hlo_type(dtype, a.sizes());
  tpu_hlo_type_t rhs = hlo_type(dtype, b_scalar ? c10::IntArrayRef{} : b.sizes());
  if (b_scalar) operands.add_scalar(b.item(), dtype, a.device().index());
  else operands.add_tensor(b);
  tpu_hlo_type_t out = hlo_type(dtype, out_sizes);
  char* text = nullptr;
  size_t len = 0;
  TPU_CHECK(tpu_lower_binary(op, &lhs, &rhs, &out, &text, &len), name);
  return run_single(text, len, operands, out_sizes, dtype, a.device(), name);
}

#define BINARY_KERNEL(fn, op, aten_op)                                       \
  at::Tensor fn(const at::Tensor& a, const at::Tensor& b,                    \
                const at::Scalar& alpha) {                                   \
    if (auto r = try_binary(op, a, b, alpha, #aten_op)) return *r;           \
    return at::native::call_fallback_fn<&cpu_fallback, ATEN_OP(aten_op)>::call( \
        a, b, alpha);                                                        \
  }
BINARY_KERNEL(add_tensor, TPU_BINARY_ADD, add_Tensor)
BINARY_KERNEL(sub_tensor, TPU_BINARY_SUB, sub_Tensor)
#undef BINARY_KERNEL

at::Tensor mul_tensor(const at::Tensor& a, const at::Tensor& b) {
  if (auto r = try_binary(TPU_BINARY_MUL, a, b, 1, "mul.Tensor")) return *r;
  return at::native::call_fallback_fn<&cpu_fallback, ATEN_OP(mul_Tensor)>::call(a, b);
}

at::Tensor div_tensor(const at::Tensor& a, const at::Tensor& b) {
  if (auto r = try_binary(TPU_BINARY_DIV, a, b, 1, "div.Tensor")) return *r;
  return at::native::call_fallback_fn<&cpu_fallback, ATEN_OP(div_Tensor)>::call(a, b);
}

at::Tensor mm(const at::Tensor& a, const at::Tensor& b) {
  c10::ScalarType dtype = a.scalar_type();
  bool ok = a.dim() == 2 && b.dim() == 2 && a.size(1) == b.size(0) &&
            b.scalar_type() == dtype && b.device() == a.device() &&
            c10::isFloatingType(dtype) && a.numel() > 0 && b.numel() > 0;
  if (!ok)
    return at::native::call_fallback_fn<&cpu_fallback, ATEN_OP(mm)>::call(a, b);
  Operands operands;
  operands.add_tensor(a);
  operands.add_tensor(b);
  tpu_hlo_type_t lhs = hlo_type(dtype, a.sizes()), rhs = hlo_type(dtype, b.sizes());
  char* text = nullptr;
  size_t len = 0;
  TPU_CHECK(tpu_lower_matmul(&lhs, &rhs, &text, &len), "mm");
  return run_single(text, len, operands, {a.size(0), b.size(1)}, dtype, a.device(),
                    "mm");
}

at::Tensor& fill_scalar(at::Tensor& self, const at::Scalar& value) {
  if (self.numel() == 0) return self;
  c10::ScalarType dtype = self.scalar_type();
  Operands operands;
  operands.add_scalar(value, dtype, self.device().index());
  tpu_hlo_type_t out = hlo_type(dtype, self.sizes());
  char* text = nullptr;
  size_t len = 0;
  TPU_CHECK(tpu_lower_fill(&out, &text, &len), "fill_");
  if (covers_dense_contiguous(self)) {
    install(self, run_program(text, len, operands, self.device(), "fill_"), "fill_");
  } else {
    // A view: computed whole, then written through its base.
    self.copy_(run_single(text, len, operands, self.sizes(), dtype, self.device(),
                          "fill_"));
  }
  return self;
}

at::Tensor& zero_(at::Tensor& self) { return fill_scalar(self, 0); }

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
  TPU_CHECK(tpu_program_execute(program, device.index(), operands.buffers.data(),
                                static_cast<int>(operands.buffers.size()),
                                results.data()),
            "run_stablehlo");
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

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("add.Tensor", add_tensor);
  m.impl("sub.Tensor", sub_tensor);
  m.impl("mul.Tensor", mul_tensor);
  m.impl("div.Tensor", div_tensor);
  m.impl("mm", mm);
  m.impl("fill_.Scalar", fill_scalar);
  m.impl("zero_", zero_);
}

TORCH_LIBRARY(torchtpu, m) {
  m.def("run_stablehlo(str module, Tensor[] inputs) -> Tensor[]");
}

TORCH_LIBRARY_IMPL(torchtpu, PrivateUse1, m) {
  m.impl("run_stablehlo", run_stablehlo);
}

}  // namespace
}  // namespace torchtpu
