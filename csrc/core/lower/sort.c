/* sort family of the lowering table (see lowering.h): sort, topk,
 * kthvalue, median and nanmedian, each a stable tpu_emit_sort along one dim
 * (values with their indices) and the positions it keeps. */
#include <stdio.h>
#include <string.h>

#include "emit.h"
#include "lowering.h"

#define ARR_CAP (24 * TPU_HLO_MAX_RANK + 16)

/* Argument i as a dim of a rank-`rank` tensor, wrapped; left out: the
 * last. */
static int dim_arg(tpu_lower_ctx_t* ctx, int i, int rank) {
  const tpu_lower_arg_t* a = tpu_lower_arg(ctx, i);
  int64_t dim = a->kind == TPU_ARG_INT ? a->i : -1;
  if (rank == 0) rank = 1;
  return (int)(dim < 0 ? dim + rank : dim);
}

/* One position `pos` of x along dim, reshaped to `out`. */
static tpu_hlo_value_t pick(tpu_hlo_builder_t* b, tpu_hlo_value_t x, int dim, int64_t pos,
                            const tpu_hlo_type_t* out) {
  tpu_hlo_value_t v = tpu_emit_slice_dim(b, x, dim, pos, pos + 1);
  return tpu_emit_reshape(b, v, out->dims, out->rank);
}

/* sort(self, dim, descending) and sort.stable(self, stable, dim,
 * descending) -> (values, indices). Always stable: PyTorch's unstable sort
 * may order ties either way. */
static tpu_status_t lower_sort(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  int at = strstr(tpu_lower_op_name(ctx), "stable") ? 2 : 1;
  tpu_hlo_type_t t = tpu_lower_arg(ctx, 0)->type;
  tpu_hlo_value_t x = tpu_lower_tensor(ctx, 0);
  int dim = dim_arg(ctx, at, t.rank);
  bool desc = tpu_lower_arg(ctx, at + 1)->kind == TPU_ARG_BOOL && tpu_lower_arg(ctx, at + 1)->i;
  tpu_hlo_value_t v, i;
  if (t.rank == 0) {
    v = x;
    i = tpu_emit_const(b, TPU_DTYPE_INT64, 0);
  } else {
    tpu_emit_sort(b, x, dim, desc ? TPU_SORT_DESCENDING : TPU_SORT_ASCENDING, &v, &i);
  }
  tpu_lower_set_output(ctx, 0, v);
  tpu_lower_set_output(ctx, 1, i);
  return NULL;
}

/* topk(self, k, dim, largest, sorted): always sorted. */
static tpu_status_t lower_topk(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_type_t t = tpu_lower_arg(ctx, 0)->type;
  /* CPU has no bool kernel; the fallback raises its error. */
  if (t.dtype == TPU_DTYPE_BOOL) return tpu_lower_decline(ctx, "topk of bool");
  tpu_hlo_type_t out = tpu_lower_output_type(ctx, 0);
  int64_t k = tpu_lower_arg(ctx, 1)->i;
  int dim = dim_arg(ctx, 2, t.rank);
  bool largest = tpu_lower_arg(ctx, 3)->kind != TPU_ARG_BOOL || tpu_lower_arg(ctx, 3)->i;
  tpu_hlo_value_t x = tpu_lower_tensor(ctx, 0), v, i;
  /* A 0-d input's result is the input itself for k = 0 as for k = 1 (CPU's
   * kernel: the output keeps the input's one element). */
  if (t.rank == 0) {
    tpu_lower_set_output(ctx, 0, x);
    tpu_lower_set_output(ctx, 1, tpu_emit_const(b, TPU_DTYPE_INT64, 0));
    return NULL;
  }
  tpu_emit_sort(b, x, dim, largest ? TPU_SORT_DESCENDING : TPU_SORT_ASCENDING, &v, &i);
  v = tpu_emit_slice_dim(b, v, dim, 0, k);
  i = tpu_emit_slice_dim(b, i, dim, 0, k);
  tpu_lower_set_output(ctx, 0, tpu_emit_reshape(b, v, out.dims, out.rank));
  tpu_lower_set_output(ctx, 1, tpu_emit_reshape(b, i, out.dims, out.rank));
  return NULL;
}

/* kthvalue(self, k, dim, keepdim): the k-th smallest (NaN largest). */
static tpu_status_t lower_kthvalue(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_type_t t = tpu_lower_arg(ctx, 0)->type;
  /* CPU has no bool kernel (NotImplementedError). */
  if (t.dtype == TPU_DTYPE_BOOL) return tpu_lower_decline(ctx, "kthvalue of bool");
  tpu_hlo_type_t out = tpu_lower_output_type(ctx, 0), iout = tpu_lower_output_type(ctx, 1);
  int64_t k = tpu_lower_arg(ctx, 1)->i;
  int dim = dim_arg(ctx, 2, t.rank);
  tpu_hlo_value_t x = tpu_lower_tensor(ctx, 0), v, i;
  if (t.rank == 0) {
    int64_t one = 1;
    x = tpu_emit_reshape(b, x, &one, 1);
    dim = 0;
  }
  tpu_hlo_type_t xt = tpu_hlo_value_type(b, x);
  if (k < 1 || k > xt.dims[dim]) return tpu_lower_decline(ctx, "k out of range");
  tpu_emit_sort(b, x, dim, TPU_SORT_ASCENDING, &v, &i);
  tpu_lower_set_output(ctx, 0, pick(b, v, dim, k - 1, &out));
  tpu_lower_set_output(ctx, 1, pick(b, i, dim, k - 1, &iout));
  return NULL;
}

/* The operand of median / nanmedian(self) and their .dim(self, dim,
 * keepdim) overloads: self along *out_dim, flattened when there is no dim
 * or self is 0-d. An empty slice declines. */
static tpu_status_t median_operand(tpu_lower_ctx_t* ctx, tpu_hlo_value_t* out_x, int* out_dim) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_type_t t = tpu_lower_arg(ctx, 0)->type;
  bool has_dim = tpu_lower_arg(ctx, 1)->kind == TPU_ARG_INT;
  tpu_hlo_value_t x = tpu_lower_tensor(ctx, 0);
  int dim = dim_arg(ctx, 1, t.rank);
  if (!has_dim || t.rank == 0) {
    int64_t n = 1;
    for (int d = 0; d < t.rank; d++) n *= t.dims[d];
    x = tpu_emit_reshape(b, x, &n, 1);
    dim = 0;
  }
  if (tpu_hlo_value_type(b, x).dims[dim] == 0) return tpu_lower_decline(ctx, "empty");
  *out_x = x;
  *out_dim = dim;
  return NULL;
}

/* median: the lower median; a slice holding NaN gives NaN at its first
 * NaN's index. Sorting with NaN first makes that position 0, and otherwise
 * changes nothing. */
static tpu_status_t lower_median(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_type_t t = tpu_lower_arg(ctx, 0)->type;
  /* CPU has no bool kernel (NotImplementedError). */
  if (t.dtype == TPU_DTYPE_BOOL) return tpu_lower_decline(ctx, "median of bool");
  tpu_hlo_type_t out = tpu_lower_output_type(ctx, 0);
  tpu_hlo_value_t x, v, i;
  int dim;
  tpu_status_t s = median_operand(ctx, &x, &dim);
  if (s) return s;
  int64_t n = tpu_hlo_value_type(b, x).dims[dim];
  tpu_emit_sort(b, x, dim, TPU_SORT_ASCENDING_NAN_FIRST, &v, &i);
  tpu_hlo_type_t it = out;
  it.dtype = TPU_DTYPE_INT64;
  tpu_hlo_value_t mv = pick(b, v, dim, (n - 1) / 2, &out);
  tpu_hlo_value_t mi = pick(b, i, dim, (n - 1) / 2, &it);
  if (tpu_dtype_is_floating(t.dtype)) {
    tpu_hlo_value_t first = pick(b, v, dim, 0, &out);
    tpu_hlo_value_t nan = tpu_emit_compare(b, "NE", first, first);
    mv = tpu_emit_select(b, nan, first, mv);
    mi = tpu_emit_select(b, nan, pick(b, i, dim, 0, &it), mi);
  }
  tpu_lower_set_output(ctx, 0, mv);
  if (tpu_lower_num_outputs(ctx) > 1) tpu_lower_set_output(ctx, 1, mi);
  return NULL;
}

/* nanmedian: the lower median of the non-NaN values (NaN, at the first
 * NaN, when all are NaN). With NaN sorted last the position depends on each
 * slice's NaN count, so it is picked with a one-hot select and a
 * max-reduce (every other entry -inf). */
static tpu_status_t lower_nanmedian(tpu_lower_ctx_t* ctx) {
  tpu_hlo_type_t t = tpu_lower_arg(ctx, 0)->type;
  if (!tpu_dtype_is_floating(t.dtype)) return lower_median(ctx);
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_type_t out = tpu_lower_output_type(ctx, 0);
  tpu_hlo_value_t x, v, i;
  int dim;
  tpu_status_t s = median_operand(ctx, &x, &dim);
  if (s) return s;
  tpu_hlo_type_t xt = tpu_hlo_value_type(b, x);
  tpu_emit_sort(b, x, dim, TPU_SORT_ASCENDING, &v, &i);
  tpu_hlo_type_t it = xt;
  it.dtype = TPU_DTYPE_INT64;
  int64_t d64 = dim;
  tpu_hlo_value_t not_nan = tpu_emit_convert(b, tpu_emit_compare(b, "EQ", x, x), TPU_DTYPE_INT64);
  tpu_hlo_value_t count = tpu_emit_reduce(b, not_nan, tpu_emit_const(b, TPU_DTYPE_INT64, 0),
                                          &d64, 1, "stablehlo.add");
  tpu_hlo_type_t ct = tpu_hlo_value_type(b, count);
  /* (count - 1) / 2, or 0 for an all-NaN slice. */
  tpu_hlo_value_t pos = tpu_emit_binary(b, "stablehlo.divide",
                                        tpu_emit_binary(b, "stablehlo.subtract", count,
                                                        tpu_emit_const_like(b, &ct, 1)),
                                        tpu_emit_const_like(b, &ct, 2));
  pos = tpu_emit_select(b, tpu_emit_compare(b, "LT", pos, tpu_emit_const_like(b, &ct, 0)),
                        tpu_emit_const_like(b, &ct, 0), pos);
  int64_t map[TPU_HLO_MAX_RANK];
  for (int d = 0, k = 0; d < xt.rank; d++)
    if (d != dim) map[k++] = d;
  char arr[ARR_CAP], attrs[ARR_CAP + 32];
  tpu_emit_i64_array(arr, sizeof arr, map, xt.rank - 1);
  snprintf(attrs, sizeof attrs, "broadcast_dimensions = %s", arr);
  pos = tpu_hlo_op(b, "stablehlo.broadcast_in_dim", &pos, 1, it, attrs);
  tpu_hlo_value_t hit = tpu_emit_compare(b, "EQ", tpu_emit_iota(b, &it, dim), pos);
  tpu_hlo_type_t vt = tpu_hlo_value_type(b, v);
  tpu_hlo_value_t mv = tpu_emit_reduce(
      b, tpu_emit_select(b, hit, v, tpu_emit_const_like(b, &vt, -__builtin_inf())),
      tpu_emit_const(b, vt.dtype, -__builtin_inf()), &d64, 1, "stablehlo.maximum");
  tpu_hlo_value_t mi = tpu_emit_reduce(b, tpu_emit_select(b, hit, i, tpu_emit_const_like(b, &it, 0)),
                                       tpu_emit_const(b, TPU_DTYPE_INT64, 0), &d64, 1,
                                       "stablehlo.add");
  /* XLA:CPU's reduce maximum drops a NaN against -inf: all-NaN slices are
   * set explicitly. */
  tpu_hlo_value_t none = tpu_emit_compare(b, "EQ", count, tpu_emit_const_like(b, &ct, 0));
  tpu_hlo_type_t mt = tpu_hlo_value_type(b, mv);
  mv = tpu_emit_select(b, none, tpu_emit_const_like(b, &mt, __builtin_nan("")), mv);
  tpu_lower_set_output(ctx, 0, tpu_emit_reshape(b, mv, out.dims, out.rank));
  if (tpu_lower_num_outputs(ctx) > 1) {
    tpu_hlo_type_t io = tpu_lower_output_type(ctx, 1);
    tpu_lower_set_output(ctx, 1, tpu_emit_reshape(b, mi, io.dims, io.rank));
  }
  return NULL;
}

const tpu_lowering_t tpu_lowerings_sort[] = {
    {"sort", lower_sort, 0},
    {"topk", lower_topk, 0},
    {"kthvalue", lower_kthvalue, 0},
    {"median", lower_median, 0},
    {"nanmedian", lower_nanmedian, 0},
};
const size_t tpu_lowerings_sort_count = sizeof tpu_lowerings_sort / sizeof tpu_lowerings_sort[0];
