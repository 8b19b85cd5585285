/* view_values family of the lowering table (see lowering.h): the values of
 * view ops (view, reshape, squeeze, permute, expand, slice, select, split,
 * unbind, alias) and of _to_copy, for graphs only (TPU_LOWER_GRAPH_ONLY).
 * In eager these ops must alias their input, which PyTorch's own kernels
 * do and the engine folds into later reads; in AOTAutograd's functional
 * graphs they are plain values, so each lowers to the one StableHLO op that
 * computes the view's elements. The output types come from the meta
 * kernels, so shape arithmetic is mostly reading them. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "emit.h"
#include "lowering.h"

static int wrap_dim(int64_t dim, int rank) {
  if (rank == 0) rank = 1;
  return (int)(dim < 0 ? dim + rank : dim);
}

/* Elements in row-major order do not move: view, reshape, _unsafe_view,
 * (un)squeeze, flatten, alias, detach. */
static tpu_status_t lower_reshape_to_output(tpu_lower_ctx_t* ctx) {
  tpu_hlo_type_t out = tpu_lower_output_type(ctx, 0);
  tpu_lower_set_output(ctx, 0,
                       tpu_emit_reshape(tpu_lower_builder(ctx), tpu_lower_tensor(ctx, 0), out.dims,
                                        out.rank));
  return NULL;
}

static tpu_status_t lower_permute(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_value_t x = tpu_lower_tensor(ctx, 0);
  int rank = tpu_lower_arg(ctx, 0)->type.rank;
  int64_t perm[TPU_HLO_MAX_RANK];
  for (int d = 0; d < rank; d++) perm[d] = d;
  const tpu_lower_arg_t* a1 = tpu_lower_arg(ctx, 1);
  if (a1->kind == TPU_ARG_INTS) { /* permute(dims) */
    if (a1->num_ints != rank) return tpu_lower_decline(ctx, "permutation of the wrong length");
    for (int d = 0; d < rank; d++) perm[d] = wrap_dim(a1->ints[d], rank);
  } else if (a1->kind == TPU_ARG_INT) { /* transpose(dim0, dim1) */
    int d0 = wrap_dim(a1->i, rank), d1 = wrap_dim(tpu_lower_arg(ctx, 2)->i, rank);
    if (rank > 0) perm[d0] = d1, perm[d1] = d0;
  } else if (rank == 2) { /* t */
    perm[0] = 1, perm[1] = 0;
  }
  tpu_lower_set_output(ctx, 0, rank < 2 ? x : tpu_emit_transpose(b, x, perm));
  return NULL;
}

static tpu_status_t lower_expand(tpu_lower_ctx_t* ctx) {
  tpu_hlo_type_t out = tpu_lower_output_type(ctx, 0);
  tpu_lower_set_output(ctx, 0,
                       tpu_emit_broadcast_to(tpu_lower_builder(ctx), tpu_lower_tensor(ctx, 0), &out));
  return NULL;
}

/* x[lo : lo + (n-1)*step + 1 : step] along `dim`, n = the output's size. */
static tpu_hlo_value_t strided_dim(tpu_hlo_builder_t* b, tpu_hlo_value_t x, int dim, int64_t lo,
                                   int64_t n, int64_t step) {
  tpu_hlo_type_t t = tpu_hlo_value_type(b, x);
  int64_t start[TPU_HLO_MAX_RANK] = {0}, limit[TPU_HLO_MAX_RANK], stride[TPU_HLO_MAX_RANK];
  for (int d = 0; d < t.rank; d++) limit[d] = t.dims[d], stride[d] = 1;
  start[dim] = lo;
  limit[dim] = n > 0 ? lo + (n - 1) * step + 1 : lo;
  stride[dim] = step;
  return tpu_emit_slice(b, x, start, limit, stride);
}

/* slice.Tensor(self, dim, start?, end?, step): start normalised as PyTorch
 * does (negative from the end, clamped); the length is the output's. */
static tpu_status_t lower_slice(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_type_t in = tpu_lower_arg(ctx, 0)->type, out = tpu_lower_output_type(ctx, 0);
  if (in.rank == 0) return tpu_lower_decline(ctx, "slice of a 0-dim tensor");
  int dim = wrap_dim(tpu_lower_arg(ctx, 1)->i, in.rank);
  const tpu_lower_arg_t* a_start = tpu_lower_arg(ctx, 2);
  const tpu_lower_arg_t* a_step = tpu_lower_arg(ctx, 4);
  int64_t size = in.dims[dim];
  int64_t start = a_start->kind == TPU_ARG_INT ? a_start->i : 0;
  int64_t step = a_step->kind == TPU_ARG_INT ? a_step->i : 1;
  if (step <= 0) return tpu_lower_decline(ctx, "slice step must be positive");
  if (start < 0) start += size;
  if (start < 0) start = 0;
  if (start > size) start = size;
  tpu_lower_set_output(ctx, 0, strided_dim(b, tpu_lower_tensor(ctx, 0), dim, start, out.dims[dim], step));
  return NULL;
}

/* select.int(self, dim, index). */
static tpu_status_t lower_select(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_type_t in = tpu_lower_arg(ctx, 0)->type, out = tpu_lower_output_type(ctx, 0);
  if (in.rank == 0) return tpu_lower_decline(ctx, "select of a 0-dim tensor");
  int dim = wrap_dim(tpu_lower_arg(ctx, 1)->i, in.rank);
  int64_t index = tpu_lower_arg(ctx, 2)->i;
  if (index < 0) index += in.dims[dim];
  if (index < 0 || index >= in.dims[dim])
    return tpu_lower_decline(ctx, "index %lld out of range for size %lld", (long long)index,
                             (long long)in.dims[dim]);
  tpu_hlo_value_t one = strided_dim(b, tpu_lower_tensor(ctx, 0), dim, index, 1, 1);
  tpu_lower_set_output(ctx, 0, tpu_emit_reshape(b, one, out.dims, out.rank));
  return NULL;
}

/* split.Tensor / split_with_sizes / unbind: consecutive pieces along dim,
 * each as long as its output (unbind's outputs drop the dim: length 1). */
static tpu_status_t lower_split(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_type_t in = tpu_lower_arg(ctx, 0)->type;
  if (in.rank == 0) return tpu_lower_decline(ctx, "split of a 0-dim tensor");
  /* unbind(self, dim); split(self, split_size, dim); split_with_sizes(self, sizes, dim). */
  const tpu_lower_arg_t* a1 = tpu_lower_arg(ctx, 1);
  bool unbind = tpu_lower_num_args(ctx) == 2 && a1->kind == TPU_ARG_INT;
  int64_t dim_arg = unbind ? a1->i : tpu_lower_arg(ctx, 2)->i;
  int dim = wrap_dim(dim_arg, in.rank);
  tpu_hlo_value_t x = tpu_lower_tensor(ctx, 0);
  int64_t offset = 0;
  for (int k = 0; k < tpu_lower_num_outputs(ctx); k++) {
    tpu_hlo_type_t out = tpu_lower_output_type(ctx, k);
    int64_t n = out.rank == in.rank ? out.dims[dim] : 1;
    tpu_hlo_value_t piece = strided_dim(b, x, dim, offset, n, 1);
    tpu_lower_set_output(ctx, k, tpu_emit_reshape(b, piece, out.dims, out.rank));
    offset += n;
  }
  if (offset != in.dims[dim]) return tpu_lower_decline(ctx, "split pieces do not cover the input");
  return NULL;
}

/* _to_copy(self, dtype?, layout?, device?, ...): a dtype conversion on the
 * device (a copy to another device never reaches a graph of ours: its
 * output would not be a tpu tensor). */
static tpu_status_t lower_to_copy(tpu_lower_ctx_t* ctx) {
  tpu_hlo_type_t out = tpu_lower_output_type(ctx, 0);
  tpu_lower_set_output(ctx, 0,
                       tpu_emit_convert(tpu_lower_builder(ctx), tpu_lower_tensor(ctx, 0), out.dtype));
  return NULL;
}

/* The output's elements at flat positions offset + sum(i_k * stride_k) of
 * input 0's row-major contents (a graph value is its own contiguous
 * storage): one gather over the flat value. */
static tpu_status_t set_strided_gather(tpu_lower_ctx_t* ctx, int64_t offset,
                                       const int64_t* stride) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_type_t in = tpu_lower_arg(ctx, 0)->type, out = tpu_lower_output_type(ctx, 0);
  int64_t n_in = 1, m = 1;
  for (int d = 0; d < in.rank; d++) n_in *= in.dims[d];
  for (int d = 0; d < out.rank; d++) m *= out.dims[d];
  int64_t last = offset;
  for (int d = 0; d < out.rank; d++)
    if (out.dims[d] > 0) last += (out.dims[d] - 1) * stride[d];
  if (m == 0) { /* no elements (the input may have none to gather from) */
    tpu_lower_set_output(ctx, 0, tpu_emit_const_like(b, &out, 0));
    return NULL;
  }
  if (offset < 0 || last >= n_in) return tpu_lower_decline(ctx, "a view reaching outside its input");
  tpu_hlo_type_t it = out;
  it.dtype = TPU_DTYPE_INT64;
  tpu_hlo_value_t idx = tpu_emit_const_like(b, &it, (double)offset);
  for (int d = 0; d < out.rank; d++)
    idx = tpu_emit_add(b, idx, tpu_emit_mul(b, tpu_emit_iota(b, &it, d),
                                            tpu_emit_const_like(b, &it, (double)stride[d])));
  int64_t m1[2] = {m, 1};
  tpu_hlo_value_t flat = tpu_emit_reshape(b, tpu_lower_tensor(ctx, 0), &n_in, 1);
  tpu_hlo_value_t indices = tpu_emit_reshape(b, idx, m1, 2);
  int64_t zero = 0, one = 1;
  tpu_hlo_type_t gt = tpu_hlo_type_make(in.dtype, 1, &m);
  tpu_hlo_value_t g = tpu_emit_gather(b, flat, indices, gt, NULL, 0, &zero, &zero, 1, &one);
  tpu_lower_set_output(ctx, 0, tpu_emit_reshape(b, g, out.dims, out.rank));
  return NULL;
}

/* view_as_complex(x[..., 2]) -> complex[...]: element k is x[..., k, 0] +
 * i x[..., k, 1]. */
static tpu_status_t lower_view_as_complex(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_type_t in = tpu_lower_arg(ctx, 0)->type, out = tpu_lower_output_type(ctx, 0);
  if (!tpu_dtype_is_complex(out.dtype) || in.rank != out.rank + 1 || in.dims[in.rank - 1] != 2)
    return tpu_lower_decline(ctx, "view_as_complex of a tensor whose last dim is not 2");
  tpu_hlo_value_t x = tpu_lower_tensor(ctx, 0);
  tpu_hlo_type_t pt = out;
  pt.dtype = tpu_dtype_complex_part(out.dtype);
  tpu_hlo_value_t parts[2];
  for (int k = 0; k < 2; k++)
    parts[k] = tpu_emit_reshape(b, strided_dim(b, x, in.rank - 1, k, 1, 1), pt.dims, pt.rank);
  tpu_lower_set_output(ctx, 0, tpu_hlo_op(b, "stablehlo.complex", parts, 2, out, NULL));
  return NULL;
}

/* view_as_real(z[...]) -> real[..., 2]: (real, imag) along a new last dim. */
static tpu_status_t lower_view_as_real(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_type_t in = tpu_lower_arg(ctx, 0)->type, out = tpu_lower_output_type(ctx, 0);
  if (!tpu_dtype_is_complex(in.dtype) || out.rank != in.rank + 1)
    return tpu_lower_decline(ctx, "view_as_real of a real tensor");
  tpu_hlo_value_t z = tpu_lower_tensor(ctx, 0);
  tpu_hlo_type_t pt = in, one = out;
  pt.dtype = out.dtype;
  one.dims[one.rank - 1] = 1;
  tpu_hlo_value_t parts[2] = {
      tpu_emit_reshape(b, tpu_hlo_op(b, "stablehlo.real", &z, 1, pt, NULL), one.dims, one.rank),
      tpu_emit_reshape(b, tpu_hlo_op(b, "stablehlo.imag", &z, 1, pt, NULL), one.dims, one.rank)};
  char dim[48];
  snprintf(dim, sizeof dim, "dimension = %d : i64", out.rank - 1);
  tpu_lower_set_output(ctx, 0, tpu_hlo_op(b, "stablehlo.concatenate", parts, 2, out, dim));
  return NULL;
}

/* _conj (a lazy conjugate view in eager; complex products' backward uses
 * it) and resolve_conj (data 1): in a graph, the conjugate's value (real
 * tensors are their own conjugate) and the value itself. */
static tpu_status_t lower_conj(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_type_t t = tpu_lower_arg(ctx, 0)->type;
  tpu_hlo_value_t z = tpu_lower_tensor(ctx, 0);
  if (!tpu_dtype_is_complex(t.dtype) || tpu_lower_data(ctx)) {
    tpu_lower_set_output(ctx, 0, z);
    return NULL;
  }
  tpu_hlo_type_t pt = t;
  pt.dtype = tpu_dtype_complex_part(t.dtype);
  tpu_hlo_value_t parts[2] = {
      tpu_hlo_op(b, "stablehlo.real", &z, 1, pt, NULL),
      tpu_emit_unary(b, "stablehlo.negate", tpu_hlo_op(b, "stablehlo.imag", &z, 1, pt, NULL))};
  tpu_lower_set_output(ctx, 0, tpu_hlo_op(b, "stablehlo.complex", parts, 2, t, NULL));
  return NULL;
}

/* as_strided(self, size, stride, offset?). */
static tpu_status_t lower_as_strided(tpu_lower_ctx_t* ctx) {
  tpu_hlo_type_t out = tpu_lower_output_type(ctx, 0);
  const tpu_lower_arg_t* size = tpu_lower_arg(ctx, 1);
  const tpu_lower_arg_t* stride = tpu_lower_arg(ctx, 2);
  const tpu_lower_arg_t* off = tpu_lower_arg(ctx, 3);
  if (size->kind != TPU_ARG_INTS || stride->kind != TPU_ARG_INTS || size->num_ints != out.rank ||
      stride->num_ints != out.rank)
    return tpu_lower_decline(ctx, "as_strided sizes and strides");
  return set_strided_gather(ctx, off->kind == TPU_ARG_INT ? off->i : 0, stride->ints);
}

/* unfold(self, dimension, size, step): windows of `size` elements every
 * `step` along dimension, in a new last dim -- self's contiguous strides,
 * dimension's times step, then dimension's own for the window. */
static tpu_status_t lower_unfold(tpu_lower_ctx_t* ctx) {
  tpu_hlo_type_t in = tpu_lower_arg(ctx, 0)->type, out = tpu_lower_output_type(ctx, 0);
  const tpu_lower_arg_t* dim = tpu_lower_arg(ctx, 1);
  const tpu_lower_arg_t* step = tpu_lower_arg(ctx, 3);
  if (dim->kind != TPU_ARG_INT || step->kind != TPU_ARG_INT || out.rank != in.rank + 1 ||
      out.rank > TPU_HLO_MAX_RANK)
    return tpu_lower_decline(ctx, "unfold arguments");
  int64_t contiguous[TPU_HLO_MAX_RANK], stride[TPU_HLO_MAX_RANK];
  int64_t run = 1;
  for (int d = in.rank - 1; d >= 0; d--) contiguous[d] = run, run *= in.dims[d];
  int dd = in.rank == 0 ? 0 : wrap_dim(dim->i, in.rank);
  for (int d = 0; d < in.rank; d++) stride[d] = contiguous[d] * (d == dd ? step->i : 1);
  stride[in.rank] = in.rank == 0 ? 1 : contiguous[dd];
  return set_strided_gather(ctx, 0, stride);
}

/* Factories in graphs: full(size, value), full_like(self, value),
 * scalar_tensor(value): the value (a constant of the graph) splatted over
 * the output. empty / empty_like / empty_strided / new_empty: zeros, so a
 * graph's results never depend on stale memory. In eager these run as
 * PyTorch's composites (allocate, then a fill op of the table). A full
 * row's data word: the value's argument index. */
static tpu_status_t lower_full(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_type_t out = tpu_lower_output_type(ctx, 0);
  tpu_hlo_value_t v = tpu_lower_scalar(ctx, (int)tpu_lower_data(ctx), out.dtype);
  tpu_lower_set_output(ctx, 0, tpu_emit_broadcast_to(b, v, &out));
  return NULL;
}

static tpu_status_t lower_empty(tpu_lower_ctx_t* ctx) {
  tpu_hlo_type_t out = tpu_lower_output_type(ctx, 0);
  tpu_lower_set_output(ctx, 0, tpu_emit_const_like(tpu_lower_builder(ctx), &out, 0.0));
  return NULL;
}

#define G TPU_LOWER_GRAPH_ONLY
const tpu_lowering_t tpu_lowerings_view_values[] = {
    {"view", lower_reshape_to_output, G},
    /* _unsafe_view returns a view (it only skips autograd's view
     * tracking): eager must keep PyTorch's aliasing kernel, or kron's
     * out= (a mul_out into _unsafe_view(out)) wrote into a copy */
    {"_unsafe_view", lower_reshape_to_output, G},
    {"reshape", lower_reshape_to_output, G},   {"view_copy", lower_reshape_to_output, G},
    {"_reshape_alias", lower_reshape_to_output, G},
    {"unsqueeze", lower_reshape_to_output, G}, {"squeeze", lower_reshape_to_output, G},
    {"flatten", lower_reshape_to_output, G},   {"alias", lower_reshape_to_output, G},
    {"detach", lower_reshape_to_output, G},    {"lift_fresh_copy", lower_reshape_to_output, G},
    {"permute", lower_permute, G},             {"transpose", lower_permute, G},
    {"t", lower_permute, G},                   {"expand", lower_expand, G},
    {"slice", lower_slice, G},                 {"select", lower_select, G},
    {"split", lower_split, G},                 {"split_with_sizes", lower_split, G},
    {"unbind", lower_split, G},                {"_to_copy", lower_to_copy, G},
    /* prims::convert_element_type: left by decompositions traced under
     * symbolic shapes (native_group_norm_backward's) */
    {"convert_element_type", lower_to_copy, G},
    {"as_strided", lower_as_strided, G},       {"as_strided_copy", lower_as_strided, G},
    {"unfold", lower_unfold, G},               {"unfold_copy", lower_unfold, G},
    {"view_as_complex", lower_view_as_complex, G}, {"view_as_real", lower_view_as_real, G},
    {"_conj", lower_conj, G},                  {"resolve_conj", lower_conj, G, 1},
    {"full", lower_full, G, 1},                {"full_like", lower_full, G, 1},
    {"scalar_tensor", lower_full, G, 0},       {"empty", lower_empty, G},
    {"empty_like", lower_empty, G},            {"empty_strided", lower_empty, G},
    {"new_empty", lower_empty, G},             {"new_empty_strided", lower_empty, G},
    /* a graph value has no layout of its own: the permutation only
     * matters for an output, which takes eager's layout (_compile.py) */
    {"empty_permuted", lower_empty, G},
};
#undef G
const size_t tpu_lowerings_view_values_count =
    sizeof tpu_lowerings_view_values / sizeof tpu_lowerings_view_values[0];
