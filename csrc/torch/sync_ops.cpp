// Ops whose result size depends on the data, on the device with one host
// sync each: nonzero (argwhere, nonzero(as_tuple=True)), masked_select,
// unique (_unique2, _unique, unique_dim, unique_consecutive,
// unique_dim_consecutive), and boolean-mask indexing x[mask] /
// x[mask] = v; equal (a bool read back).
//
// A device program (the lowering table's dynamic family, reached through
// the internal ops torchtpu::*_padded defined here with their meta
// kernels) computes the result at its largest possible size, compacted to
// the front, plus the count. The kernel reads the count (8 bytes: the one
// host sync, counted by _local_scalar_dense) and returns the leading slice
// as a view, so a new count never compiles anything. The view keeps the
// padded storage alive: the price of not copying.
//
// Masks in index / index_put become index tensors (a mask's nonzero
// columns) as PyTorch's expandTensors does, then the ordinary device kernel
// runs. x[mask] with one mask over the leading dims is a masked_select,
// and x[mask] = scalar a masked_fill_ (no sync), as PyTorch's CPU kernel
// does. Anything the device cannot run goes to the CPU fallback whole.
#include <ATen/ATen.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/native/Resize.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <optional>
#include <vector>

#include "common.h"

namespace torchtpu {
bool try_run_on_device(const c10::OperatorHandle& op, torch::jit::Stack* stack);
void cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack);
void tpu_boxed_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack);

namespace {

using IndexList = c10::List<std::optional<at::Tensor>>;

bool is_tpu(const at::Tensor& t) { return t.defined() && t.device().is_privateuseone(); }

// ---- the padded programs ------------------------------------------------

c10::OperatorHandle padded_op(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "");
}

// Runs a torchtpu::*_padded op on the device: its outputs, or none when
// the device cannot run it (the caller falls back).
std::vector<at::Tensor> run_padded(const c10::OperatorHandle& op, torch::jit::Stack args) {
  if (!try_run_on_device(op, &args)) return {};
  std::vector<at::Tensor> out;
  for (const auto& v : args) out.push_back(v.toTensor());
  return out;
}

// The count the program left on the device: the op's one host sync.
int64_t read_count(const at::Tensor& count) {
  DeferBarrier barrier;  // a data-dependent shape ends a deferred run
  return count.item<int64_t>();
}

// nonzero of a tpu tensor, or undefined when the device cannot run it.
// Column-major like CPU's result (strides (1, n), so where()'s tensors
// are its columns): the program places column j at j * n of its flat
// padded result.
at::Tensor nonzero_on_device(const at::Tensor& self) {
  static const c10::OperatorHandle op = padded_op("torchtpu::nonzero_padded");
  auto r = run_padded(op, {self});
  if (r.empty()) return {};
  const int64_t n = read_count(r[1]);
  return r[0].as_strided({n, self.dim()}, {1, n});
}

at::Tensor masked_select_on_device(const at::Tensor& self, const at::Tensor& mask) {
  static const c10::OperatorHandle op = padded_op("torchtpu::masked_select_padded");
  if (!is_tpu(self) || !is_tpu(mask)) return {};
  auto r = run_padded(op, {self, mask});
  if (r.empty()) return {};
  return r[0].narrow(0, 0, read_count(r[1]));
}

// (values, inverse, counts) of unique over the flattened self; empty when
// the device cannot run it.
std::vector<at::Tensor> unique_on_device(const at::Tensor& self, bool consecutive,
                                         bool return_inverse, bool return_counts) {
  static const c10::OperatorHandle op = padded_op("torchtpu::unique_padded");
  auto r = run_padded(op, {self, consecutive, return_inverse, return_counts});
  if (r.empty()) return {};
  int64_t n = read_count(r[3]);
  return {r[0].narrow(0, 0, n), r[1], return_counts ? r[2].narrow(0, 0, n) : r[2]};
}

// (values, inverse, counts) of unique over the slices along dim.
std::vector<at::Tensor> unique_dim_on_device(const at::Tensor& self, int64_t dim,
                                             bool consecutive) {
  static const c10::OperatorHandle op = padded_op("torchtpu::unique_dim_padded");
  if (self.dim() == 0) return {};
  dim = c10::maybe_wrap_dim(dim, self.dim());
  auto r = run_padded(op, {self, dim, consecutive});
  if (r.empty()) return {};
  int64_t n = read_count(r[3]);
  return {r[0].narrow(dim, 0, n), r[1], r[2].narrow(0, 0, n)};
}

// ---- boxed kernels: the fallback gets the original op and stack ----------

// Replaces the op's arguments on the stack with its returns.
void set_returns(const c10::OperatorHandle& op, torch::jit::Stack* stack,
                 std::vector<c10::IValue> returns) {
  torch::jit::drop(*stack, op.schema().arguments().size());
  for (auto& r : returns) stack->push_back(std::move(r));
}

c10::ArrayRef<c10::IValue> args_of(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  return torch::jit::last(*stack, op.schema().arguments().size());
}

// out= variants: the result computed, then written like PyTorch's kernels
// write theirs (resized when its shape differs).
void write_out(const at::Tensor& out, const at::Tensor& result) {
  at::native::resize_output(out, result.sizes());
  out.copy_(result);
}

// nonzero(self) and nonzero.out(self, out). As CPU's kernel, an out of
// the result's shape keeps its strides; one that is resized becomes
// column-major like a new result.
void nonzero_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  auto args = args_of(op, stack);
  if (args.size() == 2) {
    // CPU's checks, before the device runs anything.
    const at::Tensor& out = args[1].toTensor();
    TORCH_CHECK(out.scalar_type() == at::kLong,
                "nonzero: Expected out tensor to have scalar type Long but got scalar type",
                out.scalar_type());
    at::assert_no_internal_overlap(out);
    at::assert_no_overlap(out, args[0].toTensor());
  }
  at::Tensor r = nonzero_on_device(args[0].toTensor());
  if (!r.defined()) return cpu_fallback(op, stack);
  if (args.size() == 2) {
    at::Tensor out = args[1].toTensor();
    if (at::native::resize_output(out, r.sizes())) out.as_strided_(r.sizes(), r.strides());
    out.copy_(r);
    r = out;
  }
  set_returns(op, stack, {r});
}

// masked_select(self, mask) and masked_select.out(self, mask, out).
void masked_select_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  auto args = args_of(op, stack);
  at::Tensor r = masked_select_on_device(args[0].toTensor(), args[1].toTensor());
  if (!r.defined()) return cpu_fallback(op, stack);
  if (args.size() == 3) {
    at::Tensor out = args[2].toTensor();
    // CPU's checks (its kernel would have refused before computing)
    TORCH_CHECK(out.scalar_type() == r.scalar_type(),
                "masked_select(): self and result must have the same scalar type");
    at::assert_no_internal_overlap(out);
    at::assert_no_overlap(out, args[0].toTensor());
    at::assert_no_overlap(out, args[1].toTensor());
    write_out(out, r);
    r = out;
  }
  set_returns(op, stack, {r});
}

// _unique2(self, sorted, return_inverse, return_counts) -> 3 tensors, and
// _unique(self, sorted, return_inverse) -> 2. Always sorted, like the CPU
// kernel.
void unique2_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  auto args = args_of(op, stack);
  bool with_counts = args.size() == 4;
  auto r = unique_on_device(args[0].toTensor(), false, args[2].toBool(),
                            with_counts && args[3].toBool());
  if (r.empty()) return cpu_fallback(op, stack);
  if (with_counts) set_returns(op, stack, {r[0], r[1], r[2]});
  else set_returns(op, stack, {r[0], r[1]});
}

// unique_consecutive(self, return_inverse, return_counts, dim=None): over
// the flattened self unless a dim is given (as the CPU kernel, dim 0 of a
// 1-D tensor counts as none).
void unique_consecutive_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  auto args = args_of(op, stack);
  const at::Tensor& self = args[0].toTensor();
  std::vector<at::Tensor> r;
  if (args[3].isNone() || (args[3].toInt() == 0 && self.dim() == 1))
    r = unique_on_device(self, true, args[1].toBool(), args[2].toBool());
  else
    r = unique_dim_on_device(self, args[3].toInt(), true);
  if (r.empty()) return cpu_fallback(op, stack);
  set_returns(op, stack, {r[0], r[1], r[2]});
}

// unique_dim(self, dim, sorted, return_inverse, return_counts) and
// unique_dim_consecutive(self, dim, return_inverse, return_counts): the CPU
// kernels return inverse and counts whatever the flags say.
void unique_dim_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  auto args = args_of(op, stack);
  bool consecutive = op.schema().name() == "aten::unique_dim_consecutive";
  auto r = unique_dim_on_device(args[0].toTensor(), args[1].toInt(), consecutive);
  if (r.empty()) return cpu_fallback(op, stack);
  set_returns(op, stack, {r[0], r[1], r[2]});
}

// ---- boolean-mask indexing ----------------------------------------------

bool is_mask(const std::optional<at::Tensor>& t) {
  return t && t->defined() &&
         (t->scalar_type() == at::kBool || t->scalar_type() == at::kByte);
}

bool has_mask(const IndexList& indices) {
  for (size_t i = 0; i < indices.size(); i++)
    if (is_mask(indices.get(i))) return true;
  return false;
}

// The indices with each k-dim mask replaced by k index tensors (its
// nonzero columns), as PyTorch's expandTensors; nullopt when a mask does
// not fit self (the CPU kernel then raises) or the device cannot run it.
std::optional<IndexList> expand_masks(const at::Tensor& self, const IndexList& indices) {
  IndexList out;
  for (size_t i = 0; i < indices.size(); i++) {
    std::optional<at::Tensor> index = indices.get(i);
    if (!is_mask(index)) {
      out.push_back(index && index->defined() ? index : std::nullopt);
      continue;
    }
    const at::Tensor& mask = *index;
    int64_t at = static_cast<int64_t>(out.size());
    if (mask.dim() == 0 || at + mask.dim() > self.dim()) return std::nullopt;
    for (int64_t j = 0; j < mask.dim(); j++)
      if (mask.size(j) != self.size(at + j)) return std::nullopt;
    // A CPU mask is expanded on the CPU: no device sync at all.
    at::Tensor nz = is_tpu(mask) ? nonzero_on_device(mask) : mask.nonzero().to(self.device());
    if (!nz.defined()) return std::nullopt;
    for (int64_t j = 0; j < mask.dim(); j++) {
      at::Tensor column = nz.select(1, j);
      trust_mask_index(column);
      out.push_back(column);
    }
  }
  return out;
}

// The single mask of indices and the self dim it starts at, or undefined
// when indices hold anything besides one mask and Nones.
at::Tensor single_mask(const IndexList& indices, int64_t* out_first_dim) {
  at::Tensor mask;
  int64_t dim = 0;
  for (size_t i = 0; i < indices.size(); i++) {
    std::optional<at::Tensor> index = indices.get(i);
    if (!index || !index->defined()) {
      if (!mask.defined()) dim++;
      continue;
    }
    if (!is_mask(index) || mask.defined()) return {};
    mask = *index;
  }
  *out_first_dim = dim;
  return mask;
}

bool mask_fits(const at::Tensor& self, const at::Tensor& mask, int64_t first_dim) {
  if (mask.dim() == 0 || first_dim + mask.dim() > self.dim()) return false;
  for (int64_t j = 0; j < mask.dim(); j++)
    if (mask.size(j) != self.size(first_dim + j)) return false;
  return true;
}

// mask (over self's dims from first_dim) with size-1 dims appended so it
// broadcasts against self.
at::Tensor broadcastable_mask(const at::Tensor& self, const at::Tensor& mask, int64_t first_dim) {
  std::vector<int64_t> shape(mask.sizes().begin(), mask.sizes().end());
  shape.resize(self.dim() - first_dim, 1);
  return mask.to(at::kBool).view(shape);
}

// x[mask] with one mask over the leading dims: a masked_select of the
// broadcast mask, whose padded program does not depend on the count.
at::Tensor index_by_leading_mask(const at::Tensor& self, const at::Tensor& mask) {
  std::vector<int64_t> rest(self.sizes().begin() + mask.dim(), self.sizes().end());
  int64_t row = 1;
  for (int64_t s : rest) row *= s;
  if (row == 0) return {};
  at::Tensor flat = masked_select_on_device(self, broadcastable_mask(self, mask, 0));
  if (!flat.defined()) return {};
  rest.insert(rest.begin(), flat.numel() / row);
  return flat.view(rest);
}

// index.Tensor(self, indices).
void index_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  auto args = args_of(op, stack);
  IndexList indices = args[1].to<IndexList>();
  if (!has_mask(indices)) return tpu_boxed_kernel(op, stack);
  const at::Tensor& self = args[0].toTensor();
  int64_t first = 0;
  at::Tensor mask = single_mask(indices, &first);
  if (mask.defined() && first == 0 && is_tpu(self) && is_tpu(mask) && mask_fits(self, mask, 0)) {
    at::Tensor r = index_by_leading_mask(self, mask);
    if (r.defined()) return set_returns(op, stack, {r});
  }
  auto expanded = expand_masks(self, indices);
  if (!expanded) return cpu_fallback(op, stack);
  (*stack)[stack->size() - args.size() + 1] = *expanded;
  struct Clear {
    ~Clear() { clear_trusted_mask_indices(); }
  } clear;
  tpu_boxed_kernel(op, stack);
}

// index_put_ / index_put / _index_put_impl_(self, indices, values,
// accumulate[, unsafe]).
// An accumulating write into an expand()ed self: the CPU kernel adds each
// update into memory, so the elements an expand shares sum every update
// any of them gets. Their deltas are summed over the expanded dims and
// added to the memory once (a logical result written back would keep one
// element's sum). False when self is not expanded.
bool accumulate_into_expanded(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  auto args = args_of(op, stack);
  const at::Tensor& self = args[0].toTensor();
  if (!args[3].toBool() || op.schema().name() == "aten::index_put" || !is_tpu(self)) return false;
  std::vector<int64_t> dims, base_sizes = self.sizes().vec();
  for (int64_t d = 0; d < self.dim(); d++)
    if (self.stride(d) == 0 && self.size(d) > 1) dims.push_back(d), base_sizes[d] = 1;
  if (dims.empty()) return false;
  TORCH_WARN("Use of index_put_ on expanded tensors is deprecated. Please clone() the tensor "
             "before performing this operation. This also applies to advanced indexing e.g. "
             "tensor[indices] = tensor");
  at::Tensor delta = at::zeros(self.sizes(), self.options())
                         .index_put_(args[1].to<IndexList>(), args[2].toTensor(), true);
  self.as_strided(base_sizes, self.strides(), self.storage_offset())
      .add_(delta.sum(dims, /*keepdim=*/true, self.scalar_type()));
  at::Tensor result = self;
  set_returns(op, stack, {result});
  return true;
}

void index_put_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  auto args = args_of(op, stack);
  IndexList indices = args[1].to<IndexList>();
  {
    // A 0-dim CPU values tensor moves to the device as it is, as on CUDA:
    // the argument converter would read it as a scalar of self's dtype and
    // skip CPU's "source and destination dtypes match" check.
    const at::Tensor& self = args[0].toTensor();
    const at::Tensor& values = args[2].toTensor();
    if (is_tpu(self) && values.defined() && !is_tpu(values) && values.dim() == 0 &&
        values.scalar_type() != self.scalar_type())
      (*stack)[stack->size() - args.size() + 2] = values.to(self.device());
  }
  if (!has_mask(indices)) {
    if (accumulate_into_expanded(op, stack)) return;
    return tpu_boxed_kernel(op, stack);
  }
  const at::Tensor& self = args[0].toTensor();
  const at::Tensor& values = args[2].toTensor();
  bool accumulate = args[3].toBool();
  int64_t first = 0;
  at::Tensor mask = single_mask(indices, &first);
  if (!accumulate && values.numel() == 1 && mask.defined() && is_tpu(self) && is_tpu(mask) &&
      mask_fits(self, mask, first)) {
    // One value under one mask: a masked_fill_, as the CPU kernel does.
    at::Tensor m = broadcastable_mask(self, mask, first);
    at::Tensor v = values.reshape({});
    bool in_place = op.schema().name() != "aten::index_put";
    at::Tensor target = in_place ? self : self.clone();
    // CPU fills value.item() with the overflow check (uint8 <- 300 raises):
    // masked_fill_ with a 0-d value makes that check, and reads a device
    // value back only when its dtype can hold what self's cannot.
    if (is_tpu(v)) target.masked_fill_(m, v);
    else target.masked_fill_(m, v.item());
    return set_returns(op, stack, {target});
  }
  auto expanded = expand_masks(self, indices);
  if (!expanded) return cpu_fallback(op, stack);
  (*stack)[stack->size() - args.size() + 1] = *expanded;
  struct Clear {
    ~Clear() { clear_trusted_mask_indices(); }
  } clear;
  if (accumulate_into_expanded(op, stack)) return;
  tpu_boxed_kernel(op, stack);
}

// ---- the internal padded ops: schemas and meta kernels -------------------

at::TensorOptions meta(c10::ScalarType dtype) {
  return at::TensorOptions().dtype(dtype).device(at::kMeta);
}

std::tuple<at::Tensor, at::Tensor> nonzero_padded_meta(const at::Tensor& self) {
  return {at::empty({self.numel() * self.dim()}, meta(at::kLong)), at::empty({}, meta(at::kLong))};
}

std::tuple<at::Tensor, at::Tensor> masked_select_padded_meta(const at::Tensor& self,
                                                             const at::Tensor& mask) {
  int64_t n = c10::multiply_integers(at::infer_size(self.sizes(), mask.sizes()));
  return {at::empty({n}, meta(self.scalar_type())), at::empty({}, meta(at::kLong))};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> unique_padded_meta(
    const at::Tensor& self, bool consecutive, bool return_inverse, bool return_counts) {
  int64_t n = self.numel();
  return {at::empty({n}, meta(self.scalar_type())),
          return_inverse ? at::empty(self.sizes(), meta(at::kLong)) : at::empty({0}, meta(at::kLong)),
          at::empty({return_counts ? n : 0}, meta(at::kLong)), at::empty({}, meta(at::kLong))};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> unique_dim_padded_meta(
    const at::Tensor& self, int64_t dim, bool consecutive) {
  int64_t s = self.size(dim);
  return {at::empty(self.sizes(), meta(self.scalar_type())), at::empty({s}, meta(at::kLong)),
          at::empty({s}, meta(at::kLong)), at::empty({}, meta(at::kLong))};
}

TORCH_LIBRARY_FRAGMENT(torchtpu, m) {
  // Padded results plus the count (see csrc/core/lower/dynamic.c);
  // nonzero_padded's is flat, column-major.
  m.def("nonzero_padded(Tensor self) -> (Tensor, Tensor)");
  m.def("masked_select_padded(Tensor self, Tensor mask) -> (Tensor, Tensor)");
  m.def("unique_padded(Tensor self, bool consecutive, bool return_inverse, bool return_counts)"
        " -> (Tensor, Tensor, Tensor, Tensor)");
  m.def("unique_dim_padded(Tensor self, int dim, bool consecutive)"
        " -> (Tensor, Tensor, Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(torchtpu, Meta, m) {
  m.impl("nonzero_padded", nonzero_padded_meta);
  m.impl("masked_select_padded", masked_select_padded_meta);
  m.impl("unique_padded", unique_padded_meta);
  m.impl("unique_dim_padded", unique_dim_padded_meta);
}

// torch.equal: the same sizes and every element equal in the promoted
// dtype (NaN equals nothing), as CPU's cpu_equal; one host sync reads the
// answer. Two devices are refused in CUDA's words.
bool equal_kernel(const at::Tensor& self, const at::Tensor& other) {
  TORCH_CHECK(self.device() == other.device(), "Cannot compare two tensors on different devices. Got: ",
              self.device(), " and ", other.device());
  if (!self.is_same_size(other)) return false;
  if (self.numel() == 0) return true;
  return at::eq(self, other).all().item<bool>();
}

template <void (*kernel)(const c10::OperatorHandle&, torch::jit::Stack*)>
torch::CppFunction boxed() {
  return torch::CppFunction::makeFromBoxedFunction<kernel>();
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("nonzero", boxed<&nonzero_kernel>());
  m.impl("nonzero.out", boxed<&nonzero_kernel>());
  m.impl("masked_select", boxed<&masked_select_kernel>());
  m.impl("masked_select.out", boxed<&masked_select_kernel>());
  m.impl("_unique2", boxed<&unique2_kernel>());
  m.impl("_unique", boxed<&unique2_kernel>());
  m.impl("unique_consecutive", boxed<&unique_consecutive_kernel>());
  m.impl("unique_dim", boxed<&unique_dim_kernel>());
  m.impl("unique_dim_consecutive", boxed<&unique_dim_kernel>());
  m.impl("index.Tensor", boxed<&index_kernel>());
  m.impl("index_put_", boxed<&index_put_kernel>());
  m.impl("index_put", boxed<&index_put_kernel>());
  m.impl("_index_put_impl_", boxed<&index_put_kernel>());
  m.impl("equal", equal_kernel);
}

}  // namespace
}  // namespace torchtpu
