/* Reduce family: sum, mean, prod, nansum, amax/amin, max/min (full and .dim
 * with indices), argmax/argmin, var/std (and *_mean), trace, logsumexp,
 * cumsum/cumprod/logcumsumexp/cummax/cummin, count_nonzero, aminmax,
 * all/any, histc. The p-norms (norm, dist, cdist) are pnorm.c; shape and
 * dtype handling and the shared setup: reduce_internal.h. A row's data word
 * picks the variant: true for max (not min), all, nansum, std, cumsum. */
#include <math.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>

#include "emit.h"
#include "lowering.h"
#include "reduce_internal.h"

static int64_t count_of(const tpu_hlo_type_t* t, const int64_t* dims, int n) {
  int64_t c = 1;
  for (int k = 0; k < n; k++) c *= t->dims[dims[k]];
  return c;
}

/* The reduced value with the reduced dims kept as 1s, broadcast back over
 * `full` (for x - mean and x - max). */
static tpu_hlo_value_t expand_back(tpu_hlo_builder_t* b, tpu_hlo_value_t r,
                                   const tpu_hlo_type_t* full, const int64_t* dims, int n) {
  tpu_hlo_type_t kept = *full;
  for (int k = 0; k < n; k++) kept.dims[dims[k]] = 1;
  r = tpu_emit_reshape(b, r, kept.dims, kept.rank);
  return tpu_emit_broadcast_to(b, r, full);
}

/* ---- sum / nansum / prod / mean ---- */

/* sum(self, dtype) / sum.dim_IntList(self, dim, keepdim, dtype): arg 1 is a
 * dim list only in the second form; otherwise every dim. */
static tpu_status_t lower_sum(tpu_lower_ctx_t* ctx) {
  bool nan_as_zero = tpu_lower_data(ctx);
  reduce_call_t r;
  TPU_RETURN_IF_ERROR(reduce_setup(ctx, NULL, true, list_arg(ctx, 1), &r));
  if (nan_as_zero && tpu_dtype_is_floating(r.t.dtype))
    r.x = tpu_emit_select(r.b, tpu_emit_compare(r.b, "NE", r.x, r.x), tpu_emit_const_like(r.b, &r.t, 0), r.x);
  const char* op = r.t.dtype == TPU_DTYPE_BOOL ? "stablehlo.or" : "stablehlo.add";
  set_out(ctx, 0, reduce(r.b, r.x, 0, r.dims, r.n, op));
  return NULL;
}

/* prod(self, dtype) / prod.dim_int(self, dim, keepdim, dtype): the int
 * dim is told from a dtype by the keepdim bool after it. */
static tpu_status_t lower_prod(tpu_lower_ctx_t* ctx) {
  reduce_call_t r;
  TPU_RETURN_IF_ERROR(
      reduce_setup(ctx, NULL, true, tpu_lower_arg(ctx, 2)->kind == TPU_ARG_BOOL ? 1 : -1, &r));
  const char* op = r.t.dtype == TPU_DTYPE_BOOL ? "stablehlo.and" : "stablehlo.multiply";
  set_out(ctx, 0, reduce(r.b, r.x, 1, r.dims, r.n, op));
  return NULL;
}

/* mean(self, dtype) / mean.dim(self, dim, keepdim, dtype). */
static tpu_status_t lower_mean(tpu_lower_ctx_t* ctx) {
  reduce_call_t r;
  TPU_RETURN_IF_ERROR(reduce_setup(ctx, "mean into a non-floating dtype", true, list_arg(ctx, 1), &r));
  tpu_hlo_value_t sum = reduce(r.b, r.x, 0, r.dims, r.n, "stablehlo.add");
  /* sum / n as CPU divides (not XLA's sum * (1 / n)). */
  set_out(ctx, 0, tpu_emit_div_by_const(r.b, sum, (double)count_of(&r.t, r.dims, r.n)));
  return NULL;
}

/* ---- max / min family ---- */

/* Values and first-occurrence indices of the max (min) along `dim`, NaN
 * counting as the largest (and smallest: PyTorch's min also returns NaN).
 * A variadic reduce over (value, index) pairs ordered by value, then by
 * lower index, is associative and commutative, so XLA may reduce in any
 * order. */
static void arg_reduce(tpu_hlo_builder_t* b, tpu_hlo_value_t x, int dim, bool is_max,
                       tpu_hlo_value_t* out_values, tpu_hlo_value_t* out_indices) {
  tpu_hlo_type_t t = tpu_hlo_value_type(b, x);
  tpu_hlo_type_t it = t;
  it.dtype = TPU_DTYPE_INT64;
  tpu_hlo_value_t idx = tpu_emit_iota(b, &it, dim);
  tpu_hlo_type_t sv = tpu_hlo_type_scalar(t.dtype), si = tpu_hlo_type_scalar(TPU_DTYPE_INT64);
  tpu_hlo_type_t outs[2] = {{.dtype = t.dtype}, {.dtype = TPU_DTYPE_INT64}};
  for (int d = 0; d < t.rank; d++)
    if (d != dim) outs[0].dims[outs[0].rank++] = t.dims[d];
  outs[1].rank = outs[0].rank;
  memcpy(outs[1].dims, outs[0].dims, sizeof outs[0].dims);
  tpu_hlo_value_t operands[4] = {x, idx, extreme_init(b, t.dtype, is_max),
                                 tpu_hlo_constant_int(b, si, INT64_MAX)};
  char attrs[64];
  snprintf(attrs, sizeof attrs, "dimensions = array<i64: %d>", dim);
  tpu_hlo_region_op_begin(b, "stablehlo.reduce", operands, 4, outs, 2, attrs);
  tpu_hlo_type_t bt[4] = {sv, si, sv, si};
  tpu_hlo_value_t a[4];
  tpu_hlo_block_begin(b, bt, 4, a);
  tpu_hlo_value_t better = tpu_emit_compare(b, is_max ? "GT" : "LT", a[0], a[2]);
  tpu_hlo_value_t equal = tpu_emit_compare(b, "EQ", a[0], a[2]);
  if (tpu_dtype_is_floating(t.dtype)) {
    tpu_hlo_value_t an = tpu_emit_compare(b, "NE", a[0], a[0]);
    tpu_hlo_value_t bn = tpu_emit_compare(b, "NE", a[2], a[2]);
    tpu_hlo_value_t only_a = tpu_emit_binary(b, "stablehlo.and", an,
                                             tpu_emit_unary(b, "stablehlo.not", bn));
    better = tpu_emit_binary(b, "stablehlo.or", better, only_a);
    equal = tpu_emit_binary(b, "stablehlo.or", equal, tpu_emit_binary(b, "stablehlo.and", an, bn));
  }
  tpu_hlo_value_t first = tpu_emit_binary(b, "stablehlo.and", equal,
                                          tpu_emit_compare(b, "LT", a[1], a[3]));
  tpu_hlo_value_t take_a = tpu_emit_binary(b, "stablehlo.or", better, first);
  tpu_hlo_value_t r[2] = {tpu_emit_select(b, take_a, a[0], a[2]),
                          tpu_emit_select(b, take_a, a[1], a[3])};
  tpu_hlo_block_return(b, r, 2);
  tpu_hlo_value_t res[2];
  tpu_hlo_region_op_end(b, res);
  *out_values = res[0];
  *out_indices = res[1];
}

/* max(self) / max.dim(self, dim, keepdim) -> (values, indices) /
 * max.out(self, other) (the binary form, when an out= is given). */
static tpu_status_t lower_max_min(tpu_lower_ctx_t* ctx) {
  bool is_max = tpu_lower_data(ctx);
  reduce_call_t r;
  TPU_RETURN_IF_ERROR(reduce_setup(ctx, NULL, false, -1, &r));
  /* max.unary_out(self, out): its second argument is the out= tensor,
   * not max.other's other */
  bool unary_out = strstr(tpu_lower_op_name(ctx), "unary_out") != NULL;
  const tpu_lower_arg_t* a1 = unary_out ? tpu_lower_arg(ctx, -1) : tpu_lower_arg(ctx, 1);
  if (a1->kind == TPU_ARG_TENSOR || a1->kind == TPU_ARG_SCALAR) {
    tpu_hlo_type_t out = tpu_lower_output_type(ctx, 0);
    if (out.dtype == TPU_DTYPE_BOOL) return tpu_lower_decline(ctx, "bool maximum");
    tpu_hlo_value_t y = a1->kind == TPU_ARG_TENSOR ? tpu_lower_tensor(ctx, 1)
                                                   : tpu_lower_scalar(ctx, 1, out.dtype);
    y = tpu_emit_cast_to(r.b, y, &out);
    r.x = tpu_emit_cast_to(r.b, r.x, &out);
    tpu_lower_set_output(ctx, 0, tpu_emit_binary(r.b, is_max ? "stablehlo.maximum" : "stablehlo.minimum",
                                                 r.x, y));
    return NULL;
  }
  const char* name = is_max ? "max" : "min";
  if (a1->kind == TPU_ARG_INT) {
    int dim = r.t.rank ? (int)((a1->i % r.t.rank + r.t.rank) % r.t.rank) : 0;
    /* No identity: the CPU raises (PyTorch's Python meta kernel does not). */
    if (r.t.rank > 0 && r.t.dims[dim] == 0)
      return tpu_status_make(TPU_STATUS_OUT_OF_RANGE,
                             "%s(): Expected reduction dim %d to have non-zero size.", name, dim);
    if (r.t.rank == 0) {
      set_out(ctx, 0, r.x);
      set_out(ctx, 1, tpu_emit_const(r.b, TPU_DTYPE_INT64, 0));
      return NULL;
    }
    tpu_hlo_value_t v, i;
    arg_reduce(r.b, r.x, dim, is_max, &v, &i);
    set_out(ctx, 0, v);
    set_out(ctx, 1, i);
    return NULL;
  }
  if (count_of(&r.t, r.dims, r.n) == 0)
    return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT,
                           "%s(): Expected reduction dim to be specified for input.numel() == 0. "
                           "Specify the reduction dim with the 'dim' argument.", name);
  set_out(ctx, 0, reduce_extreme(r.b, r.x, r.dims, r.n, is_max));
  return NULL;
}

/* c10's name of a dtype ("Float"), for messages that match the CPU's. */
static const char* c10_dtype_name(tpu_dtype_t d) {
  static const char* const names[TPU_DTYPE_COUNT] = {
      [TPU_DTYPE_BOOL] = "Bool",   [TPU_DTYPE_UINT8] = "Byte",       [TPU_DTYPE_INT8] = "Char",
      [TPU_DTYPE_INT16] = "Short", [TPU_DTYPE_INT32] = "Int",        [TPU_DTYPE_INT64] = "Long",
      [TPU_DTYPE_FLOAT16] = "Half", [TPU_DTYPE_BFLOAT16] = "BFloat16", [TPU_DTYPE_FLOAT32] = "Float",
      [TPU_DTYPE_FLOAT64] = "Double", [TPU_DTYPE_COMPLEX64] = "ComplexFloat"};
  return d >= 0 && d < TPU_DTYPE_COUNT ? names[d] : "?";
}

/* amax / amin(self, dim=[], keepdim): [] means every dim. */
static tpu_status_t lower_amax_amin(tpu_lower_ctx_t* ctx) {
  reduce_call_t r;
  TPU_RETURN_IF_ERROR(reduce_setup(ctx, NULL, false, 1, &r));
  /* An out= of another dtype: the CPU raises (PyTorch's Python meta
   * kernel accepts it). */
  tpu_dtype_t out = tpu_lower_output_type(ctx, 0).dtype;
  if (out != r.t.dtype)
    return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT,
                           "Expected the dtype for input and out to match, but got %s for "
                           "input's dtype and %s for out's dtype.",
                           c10_dtype_name(r.t.dtype), c10_dtype_name(out));
  set_out(ctx, 0, reduce_extreme(r.b, r.x, r.dims, r.n, tpu_lower_data(ctx)));
  return NULL;
}

/* argmax / argmin(self, dim=None, keepdim): None flattens. CPU refuses
 * bool input (RuntimeError). */
static tpu_status_t lower_arg_extreme(tpu_lower_ctx_t* ctx) {
  bool is_max = tpu_lower_data(ctx);
  if (tpu_lower_arg(ctx, 0)->type.dtype == TPU_DTYPE_BOOL)
    return tpu_lower_decline(ctx, "%s of bool", is_max ? "argmax" : "argmin");
  reduce_call_t r;
  TPU_RETURN_IF_ERROR(reduce_setup(ctx, NULL, false, -1, &r));
  const tpu_lower_arg_t* a1 = tpu_lower_arg(ctx, 1);
  int dim = 0;
  if (a1->kind == TPU_ARG_INT && r.t.rank > 0) {
    dim = (int)((a1->i % r.t.rank + r.t.rank) % r.t.rank);
  } else {
    int64_t n = count_of(&r.t, r.dims, r.n);
    r.x = tpu_emit_reshape(r.b, r.x, &n, 1);
  }
  tpu_hlo_value_t v, i;
  arg_reduce(r.b, r.x, dim, is_max, &v, &i);
  set_out(ctx, 0, i);
  return NULL;
}

/* ---- var / std ---- */

/* A power of two near max |v| over dims (shape of the reduction, kept dims
 * dropped), 1 where that max is 0, subnormal, inf or NaN: var/std divide by
 * it before they square and multiply back after, so their float sums do not
 * overflow where CPU's double accumulation does not (std of values near the
 * float max). A power of two scales exactly: in the normal range results
 * are bit for bit those of the unscaled sums (sqrt included: the scale's
 * square is an even power). */
static tpu_hlo_value_t pow2_scale(tpu_hlo_builder_t* b, tpu_hlo_value_t v, const int64_t* dims,
                                  int n) {
  tpu_hlo_value_t m = reduce(b, tpu_emit_unary(b, "stablehlo.abs", v), 0, dims, n,
                             "stablehlo.maximum");
  tpu_hlo_type_t ft = tpu_hlo_value_type(b, m), it = ft;
  it.dtype = TPU_DTYPE_INT32; /* (f32 accumulations only) */
  tpu_hlo_value_t bits = tpu_hlo_op(b, "stablehlo.bitcast_convert", &m, 1, it, NULL);
  tpu_hlo_value_t mask = tpu_emit_const_like(b, &it, (double)0x7F800000);
  tpu_hlo_value_t e = tpu_emit_binary(b, "stablehlo.and", bits, mask);
  tpu_hlo_value_t p = tpu_hlo_op(b, "stablehlo.bitcast_convert", &e, 1, ft, NULL);
  tpu_hlo_value_t ok = tpu_emit_binary(b, "stablehlo.and",
                                       tpu_emit_compare(b, "NE", e, tpu_emit_const_like(b, &it, 0)),
                                       tpu_emit_compare(b, "NE", e, mask));
  return tpu_emit_select(b, ok, p, tpu_emit_const_like(b, &ft, 1));
}

/* var.correction(self, dim, *, correction=None, keepdim) and std, var_mean,
 * std_mean (outputs: (var|std, mean)). The divisor max(N - correction, 0)
 * is computed in the program since correction is a run-time Scalar. */
static tpu_status_t lower_var_std(tpu_lower_ctx_t* ctx) {
  bool take_sqrt = tpu_lower_data(ctx);
  reduce_call_t r;
  TPU_RETURN_IF_ERROR(reduce_setup(ctx, "var of a non-floating dtype", true, 1, &r));
  if (tpu_lower_arg(ctx, 2)->kind == TPU_ARG_BOOL)
    return tpu_lower_decline(ctx, "unbiased= overload (decomposed before the backend)");
  tpu_hlo_builder_t* b = r.b;
  /* CPU accumulates in double, so float accumulations are scaled here
   * (pow2_scale) where an unscaled sum would overflow: the squared
   * deviations always, the mean where CPU's is a double one too (Welford:
   * var_mean/std_mean, half types, and var/std with more than one result;
   * float var/std to one number take a float mean, whose overflow gives inf
   * there too).
   * Double accumulations are as exposed to overflow as CPU's. */
  bool scaled = r.t.dtype == TPU_DTYPE_FLOAT32 && r.n > 0;
  const tpu_hlo_value_t none = {-1};
  tpu_hlo_value_t sum = reduce(b, r.x, 0, r.dims, r.n, "stablehlo.add");
  tpu_hlo_type_t st = tpu_hlo_value_type(b, sum);
  double count = (double)count_of(&r.t, r.dims, r.n);
  tpu_hlo_value_t cnt = tpu_emit_broadcast_to(b, tpu_emit_opaque(b, tpu_emit_const(b, st.dtype, count)), &st);
  tpu_hlo_value_t mean = tpu_emit_binary(b, "stablehlo.divide", sum, cnt);
  int64_t results = 1;
  for (int k = 0; k < st.rank; k++) results *= st.dims[k];
  if (scaled && (tpu_lower_num_outputs(ctx) > 1 || results != 1 ||
                 tpu_lower_arg(ctx, 0)->type.dtype != TPU_DTYPE_FLOAT32)) {
    /* the scaled mean only where the plain one overflowed: it loses the
     * elements the scale makes subnormal */
    tpu_hlo_value_t s0 = pow2_scale(b, r.x, r.dims, r.n);
    tpu_hlo_value_t xs = tpu_emit_binary(b, "stablehlo.divide", r.x, expand_back(b, s0, &r.t, r.dims, r.n));
    tpu_hlo_value_t big = tpu_emit_binary(
        b, "stablehlo.multiply",
        tpu_emit_binary(b, "stablehlo.divide", reduce(b, xs, 0, r.dims, r.n, "stablehlo.add"), cnt), s0);
    tpu_hlo_value_t inf = tpu_emit_const_like(b, &st, INFINITY);
    tpu_hlo_value_t overflowed = tpu_emit_compare(
        b, "EQ", tpu_emit_unary(b, "stablehlo.abs", mean), inf);
    tpu_hlo_value_t finite_in = tpu_emit_compare(
        b, "NE", reduce(b, tpu_emit_unary(b, "stablehlo.abs", r.x), 0, r.dims, r.n, "stablehlo.maximum"),
        inf);
    mean = tpu_emit_select(b, tpu_emit_binary(b, "stablehlo.and", overflowed, finite_in), big, mean);
  }
  tpu_hlo_value_t dev = tpu_emit_binary(b, "stablehlo.subtract", r.x, expand_back(b, mean, &r.t, r.dims, r.n));
  tpu_hlo_value_t s1 = scaled ? pow2_scale(b, dev, r.dims, r.n) : none;
  if (scaled) dev = tpu_emit_binary(b, "stablehlo.divide", dev, expand_back(b, s1, &r.t, r.dims, r.n));
  tpu_hlo_value_t sq = reduce(b, tpu_emit_binary(b, "stablehlo.multiply", dev, dev), 0, r.dims, r.n,
                              "stablehlo.add");
  tpu_hlo_value_t correction = tpu_lower_arg(ctx, 2)->kind == TPU_ARG_NONE
                                   ? tpu_emit_const(b, r.t.dtype, 1)
                                   : tpu_lower_scalar(ctx, 2, r.t.dtype);
  tpu_hlo_value_t div = tpu_emit_binary(b, "stablehlo.maximum",
                                        tpu_emit_binary(b, "stablehlo.subtract",
                                                        tpu_emit_const(b, r.t.dtype, count), correction),
                                        tpu_emit_const(b, r.t.dtype, 0));
  div = tpu_emit_opaque(b, div); /* a division, as CPU's */
  tpu_hlo_value_t var = tpu_emit_binary(b, "stablehlo.divide", sq, tpu_emit_broadcast_to(b, div, &st));
  tpu_hlo_value_t res = take_sqrt ? tpu_emit_unary(b, "stablehlo.sqrt", var) : var;
  if (scaled) { /* (var * s) * s: no overflow before the result's own */
    res = tpu_emit_binary(b, "stablehlo.multiply", res, s1);
    if (!take_sqrt) res = tpu_emit_binary(b, "stablehlo.multiply", res, s1);
  }
  set_out(ctx, 0, res);
  if (tpu_lower_num_outputs(ctx) > 1) set_out(ctx, 1, mean);
  return NULL;
}

/* trace(self): the sum of a matrix's diagonal (ints promote to int64, as
 * the output type says). */
static tpu_status_t lower_trace(tpu_lower_ctx_t* ctx) {
  /* CPU has no bool kernel (NotImplementedError). */
  if (tpu_lower_arg(ctx, 0)->type.dtype == TPU_DTYPE_BOOL) return tpu_lower_decline(ctx, "trace of bool");
  reduce_call_t r;
  TPU_RETURN_IF_ERROR(reduce_setup(ctx, NULL, true, -1, &r));
  if (r.t.rank != 2) return tpu_lower_decline(ctx, "trace of a non-matrix");
  tpu_hlo_type_t it = r.t;
  it.dtype = TPU_DTYPE_INT64;
  tpu_hlo_value_t diag = tpu_emit_compare(r.b, "EQ", tpu_emit_iota(r.b, &it, 0), tpu_emit_iota(r.b, &it, 1));
  r.x = tpu_emit_select(r.b, diag, r.x, tpu_emit_const_like(r.b, &r.t, 0));
  const char* op = r.t.dtype == TPU_DTYPE_BOOL ? "stablehlo.or" : "stablehlo.add";
  set_out(ctx, 0, reduce(r.b, r.x, 0, r.dims, r.n, op)); /* both dims */
  return NULL;
}

/* v rounded to the half dtype `half` and back (a no-op for other dtypes):
 * a step CPU's composite stores in the output dtype. */
static tpu_hlo_value_t stored_as(tpu_hlo_builder_t* b, tpu_hlo_value_t v, tpu_dtype_t half) {
  tpu_dtype_t d = tpu_hlo_value_type(b, v).dtype;
  if (half != TPU_DTYPE_BFLOAT16 && half != TPU_DTYPE_FLOAT16) return v;
  return tpu_emit_convert(b, tpu_emit_convert(b, v, half), d);
}

/* logsumexp(self, dim, keepdim) = log(sum(exp(x - m))) + m with m the max
 * (0 where it is infinite, as PyTorch does, so all -inf gives -inf). For
 * the half types each step is rounded to the dtype, as CPU's composite
 * (x - m, exp_, sum_out, log_, add_ on half tensors) rounds it: one
 * rounding at the end differed by an ulp, which frac() or a cast makes
 * large (fuzz seed 101559). */
static tpu_status_t lower_logsumexp(tpu_lower_ctx_t* ctx) {
  reduce_call_t r;
  TPU_RETURN_IF_ERROR(reduce_setup(ctx, "logsumexp into a non-floating dtype", true, 1, &r));
  tpu_hlo_builder_t* b = r.b;
  tpu_hlo_value_t m = reduce(b, r.x, -INFINITY, r.dims, r.n, "stablehlo.maximum");
  tpu_hlo_type_t mt = tpu_hlo_value_type(b, m);
  tpu_hlo_value_t inf = tpu_emit_const_like(b, &mt, INFINITY);
  m = tpu_emit_select(b, tpu_emit_compare(b, "EQ", tpu_emit_unary(b, "stablehlo.abs", m), inf),
                      tpu_emit_const_like(b, &mt, 0), m);
  tpu_dtype_t od = tpu_lower_output_type(ctx, 0).dtype;
  tpu_hlo_value_t e = stored_as(
      b,
      tpu_emit_unary(b, "stablehlo.exponential",
                     stored_as(b, tpu_emit_binary(b, "stablehlo.subtract", r.x,
                                                  expand_back(b, m, &r.t, r.dims, r.n)),
                               od)),
      od);
  tpu_hlo_value_t lse = stored_as(
      b,
      tpu_emit_unary(b, "stablehlo.log",
                     stored_as(b, reduce(b, e, 0, r.dims, r.n, "stablehlo.add"), od)),
      od);
  set_out(ctx, 0, tpu_emit_binary(b, "stablehlo.add", lse, m));
  return NULL;
}

/* ---- scans ---- */

/* Running max (min) and its index along dim, as PyTorch's CPU cummax: an
 * element replaces the running value when it is >= (<=) it or NaN, so ties
 * take the later index and NaN sticks. Scanned over (value, index) pairs;
 * "later unless the earlier wins strictly" is associative. */
static void emit_cum_extreme(tpu_hlo_builder_t* b, tpu_hlo_value_t v, int dim, bool is_max,
                             tpu_hlo_value_t* out_v, tpu_hlo_value_t* out_i) {
  tpu_hlo_type_t t = tpu_hlo_value_type(b, v), it = t;
  it.dtype = TPU_DTYPE_INT64;
  tpu_hlo_value_t i = tpu_emit_iota(b, &it, dim);
  for (int64_t s = 1; s < t.dims[dim]; s *= 2) {
    tpu_hlo_value_t ev = tpu_emit_shift(b, v, dim, s, extreme_init(b, t.dtype, is_max));
    tpu_hlo_value_t ei = tpu_emit_shift(b, i, dim, s, tpu_emit_const(b, TPU_DTYPE_INT64, -1));
    tpu_hlo_value_t later = tpu_emit_compare(b, is_max ? "GE" : "LE", v, ev);
    if (tpu_dtype_is_floating(t.dtype))
      later = tpu_emit_binary(b, "stablehlo.or", later, tpu_emit_compare(b, "NE", v, v));
    v = tpu_emit_select(b, later, v, ev);
    i = tpu_emit_select(b, later, i, ei);
  }
  *out_v = v;
  *out_i = i;
}

/* log(exp(x) + exp(y)) as PyTorch's CPU scan computes it: max + log1p(exp(min -
 * max)), except when both are the same infinity (then that infinity). */
static tpu_hlo_value_t log_add_exp(tpu_hlo_builder_t* b, const char* unused, tpu_hlo_value_t x,
                                   tpu_hlo_value_t y) {
  tpu_hlo_type_t t = tpu_hlo_value_type(b, x);
  tpu_hlo_value_t y_nan = tpu_emit_compare(b, "NE", y, y);
  tpu_hlo_value_t mn = tpu_emit_select(b, y_nan, y, tpu_emit_binary(b, "stablehlo.minimum", x, y));
  tpu_hlo_value_t mx = tpu_emit_select(b, y_nan, y, tpu_emit_binary(b, "stablehlo.maximum", x, y));
  tpu_hlo_value_t r = tpu_emit_binary(
      b, "stablehlo.add", mx,
      tpu_emit_unary(b, "stablehlo.log_plus_one",
                     tpu_emit_unary(b, "stablehlo.exponential",
                                    tpu_emit_binary(b, "stablehlo.subtract", mn, mx))));
  tpu_hlo_value_t finite = tpu_emit_compare(b, "NE", tpu_emit_unary(b, "stablehlo.abs", mn),
                                            tpu_emit_const_like(b, &t, INFINITY));
  tpu_hlo_value_t use_r = tpu_emit_binary(b, "stablehlo.or", tpu_emit_compare(b, "NE", mn, mx), finite);
  return tpu_emit_select(b, use_r, r, x);
}

/* cumsum / cumprod(self, dim, *, dtype=None). */
static tpu_status_t lower_cum(tpu_lower_ctx_t* ctx) {
  bool is_sum = tpu_lower_data(ctx);
  reduce_call_t r;
  TPU_RETURN_IF_ERROR(reduce_setup(ctx, NULL, true, -1, &r));
  if (tpu_lower_output_type(ctx, 0).dtype == TPU_DTYPE_BOOL)
    return tpu_lower_decline(ctx, "bool scan output");
  const tpu_lower_arg_t* a1 = tpu_lower_arg(ctx, 1);
  if (a1->kind != TPU_ARG_INT) return tpu_lower_decline(ctx, "scan dim is not an int");
  if (r.t.rank > 0) {
    int dim = (int)((a1->i % r.t.rank + r.t.rank) % r.t.rank);
    r.x = tpu_emit_scan(r.b, r.x, dim, is_sum ? 0 : 1, is_sum ? "stablehlo.add" : "stablehlo.multiply",
                        tpu_emit_binary);
  }
  set_out(ctx, 0, r.x);
  return NULL;
}
/* logcumsumexp / _logcumsumexp(self, dim): a scan of log_add_exp
 * starting from -inf. */
static tpu_status_t lower_logcumsumexp(tpu_lower_ctx_t* ctx) {
  reduce_call_t r;
  TPU_RETURN_IF_ERROR(reduce_setup(ctx, "logcumsumexp into a non-floating dtype", true, -1, &r));
  const tpu_lower_arg_t* a1 = tpu_lower_arg(ctx, 1);
  if (a1->kind != TPU_ARG_INT) return tpu_lower_decline(ctx, "scan dim is not an int");
  if (r.t.rank > 0) {
    int dim = (int)((a1->i % r.t.rank + r.t.rank) % r.t.rank);
    r.x = tpu_emit_scan(r.b, r.x, dim, -INFINITY, NULL, log_add_exp);
  }
  set_out(ctx, 0, r.x);
  return NULL;
}

/* cummax / cummin(self, dim) -> (values, indices), and their kernels'
 * _cummax_helper / _cummin_helper(self, values!, indices!, dim), whose
 * outputs are the new values and indices (the helpers have no Meta kernel,
 * so the engine reaches them only if it can type them). */
static tpu_status_t lower_cum_extreme(tpu_lower_ctx_t* ctx) {
  reduce_call_t r;
  TPU_RETURN_IF_ERROR(reduce_setup(ctx, NULL, false, -1, &r));
  const tpu_lower_arg_t* a3 = tpu_lower_arg(ctx, tpu_lower_arg(ctx, 1)->kind == TPU_ARG_INT ? 1 : 3);
  if (a3->kind != TPU_ARG_INT || tpu_lower_num_outputs(ctx) != 2)
    return tpu_lower_decline(ctx, "unexpected cummax helper call");
  tpu_hlo_value_t v = r.x, i = tpu_emit_const_like(r.b, &(tpu_hlo_type_t){.dtype = TPU_DTYPE_INT64}, 0);
  if (r.t.rank > 0)
    emit_cum_extreme(r.b, r.x, (int)((a3->i % r.t.rank + r.t.rank) % r.t.rank), tpu_lower_data(ctx), &v, &i);
  set_out(ctx, 0, v);
  set_out(ctx, 1, i);
  return NULL;
}

/* count_nonzero.dim_IntList(self, dim) / count_nonzero(self, dim?): int64. */
static tpu_status_t lower_count_nonzero(tpu_lower_ctx_t* ctx) {
  reduce_call_t r;
  TPU_RETURN_IF_ERROR(reduce_setup(ctx, NULL, false, 1, &r));
  tpu_hlo_value_t x = tpu_emit_convert(r.b, tpu_emit_convert(r.b, r.x, TPU_DTYPE_BOOL), TPU_DTYPE_INT64);
  set_out(ctx, 0, reduce(r.b, x, 0, r.dims, r.n, "stablehlo.add"));
  return NULL;
}

/* aminmax(self, *, dim=None, keepdim) -> (min, max). */
static tpu_status_t lower_aminmax(tpu_lower_ctx_t* ctx) {
  reduce_call_t r;
  TPU_RETURN_IF_ERROR(reduce_setup(ctx, NULL, false, 1, &r));
  set_out(ctx, 0, reduce_extreme(r.b, r.x, r.dims, r.n, false));
  set_out(ctx, 1, reduce_extreme(r.b, r.x, r.dims, r.n, true));
  return NULL;
}

/* ---- all / any ---- */

/* all(self) / all.dim(self, dim, keepdim) / all.dims(self, dim?, keepdim):
 * nonzero test (NaN counts as true), then and/or. Output is bool, or uint8
 * for uint8 input, as the output type says. */
static tpu_status_t lower_all_any(tpu_lower_ctx_t* ctx) {
  bool is_all = tpu_lower_data(ctx);
  reduce_call_t r;
  TPU_RETURN_IF_ERROR(reduce_setup(ctx, NULL, false, -1, &r));
  tpu_dtype_t out = tpu_lower_output_type(ctx, 0).dtype;
  if (out != TPU_DTYPE_BOOL && out != TPU_DTYPE_UINT8)
    return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT,
                           "%s only supports bool tensor for result, got: %s",
                           is_all ? "all" : "any", c10_dtype_name(out));
  tpu_hlo_value_t x = tpu_emit_convert(r.b, r.x, TPU_DTYPE_BOOL);
  r.n = read_dims(ctx, 1, r.t.rank, true, r.dims); /* [] reduces nothing here */
  set_out(ctx, 0, reduce(r.b, x, is_all ? 1 : 0, r.dims, r.n, is_all ? "stablehlo.and" : "stablehlo.or"));
  return NULL;
}

/* histc(self, bins, min, max): counts per equal-width bin over [min, max]
 * (both 0: the data's own min and max, as PyTorch does); values outside
 * are not counted, max itself falls in the last bin. min and max are
 * run-time scalars, so each bin index is computed in the program: a one-hot
 * [n, bins] comparison summed over n (MoE routers count tokens per expert
 * this way; n is small there). */
static tpu_status_t lower_histc(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_type_t xt = tpu_lower_arg(ctx, 0)->type, out = tpu_lower_output_type(ctx, 0);
  int64_t bins = tpu_lower_arg(ctx, 1)->i;
  /* Integers are counted as CUDA does (MoE routers count tokens per
   * expert; CPU has floating kernels only); bool has no kernel on either. */
  if (xt.dtype == TPU_DTYPE_BOOL) return tpu_lower_decline(ctx, "histc of bool");
  if (bins <= 0 || out.rank != 1 || out.dims[0] != bins)
    return tpu_lower_decline(ctx, "bins must be positive");
  int64_t n = 1;
  for (int d = 0; d < xt.rank; d++) n *= xt.dims[d];
  const tpu_dtype_t f = TPU_DTYPE_FLOAT64;
  tpu_hlo_value_t x = tpu_emit_convert(b, tpu_emit_reshape(b, tpu_lower_tensor(ctx, 0), &n, 1), f);
  tpu_hlo_value_t lo = tpu_lower_scalar(ctx, 2, f), hi = tpu_lower_scalar(ctx, 3, f);
  if (n > 0) {
    int64_t all = 0;
    tpu_hlo_value_t dmin = tpu_emit_reduce(b, x, tpu_emit_const(b, f, 1.0 / 0.0), &all, 1,
                                           "stablehlo.minimum");
    tpu_hlo_value_t dmax = tpu_emit_reduce(b, x, tpu_emit_const(b, f, -1.0 / 0.0), &all, 1,
                                           "stablehlo.maximum");
    tpu_hlo_value_t same = tpu_emit_compare(b, "EQ", lo, hi);
    tpu_hlo_value_t lo2 = tpu_emit_select(b, same, dmin, lo);
    hi = tpu_emit_select(b, same, dmax, hi);
    lo = lo2;
    /* all values equal: PyTorch widens the range by one on each side */
    tpu_hlo_value_t flat = tpu_emit_compare(b, "EQ", lo, hi);
    lo = tpu_emit_select(b, flat, tpu_emit_sub(b, lo, tpu_emit_const(b, f, 1)), lo);
    hi = tpu_emit_select(b, flat, tpu_emit_add(b, hi, tpu_emit_const(b, f, 1)), hi);
  }
  /* CPU's kernel (HistogramKernel.cpp, LINEAR_INTERPOLATION): the edges
   * are linspace(lo, hi) in the input dtype, so lo and hi rounded to it;
   * the bin is (x - lo) * bins / (hi - lo) in the input dtype, each step
   * rounded (bfloat16 at the bin edges lands in CPU's bin), truncated; x
   * == hi falls in the last bin; NaN and values outside are skipped.
   * Integer inputs (CUDA's kernel; CPU has none) stay in float64. */
  tpu_dtype_t cd = tpu_dtype_is_floating(xt.dtype) ? xt.dtype : f;
  tpu_hlo_value_t xc = tpu_emit_convert(b, x, cd);
  tpu_hlo_type_t xt1 = tpu_hlo_type_make(cd, 1, &n);
  tpu_hlo_value_t lob = tpu_emit_broadcast_to(b, tpu_emit_convert(b, lo, cd), &xt1),
                  hib = tpu_emit_broadcast_to(b, tpu_emit_convert(b, hi, cd), &xt1);
  tpu_hlo_value_t scaled = tpu_emit_div(
      b, tpu_emit_mul(b, tpu_emit_sub(b, xc, lob), tpu_emit_const_like(b, &xt1, (double)bins)),
      tpu_emit_sub(b, hib, lob));
  tpu_hlo_value_t idx = tpu_emit_convert(b, tpu_emit_unary(b, "stablehlo.floor", scaled),
                                         TPU_DTYPE_INT64);
  tpu_hlo_type_t it1 = tpu_hlo_type_make(TPU_DTYPE_INT64, 1, &n);
  idx = tpu_emit_select(b, tpu_emit_compare(b, "GE", idx, tpu_emit_const_like(b, &it1, (double)bins)),
                        tpu_emit_const_like(b, &it1, (double)(bins - 1)), idx);
  tpu_hlo_value_t inside = tpu_emit_binary(b, "stablehlo.and", tpu_emit_compare(b, "GE", xc, lob),
                                           tpu_emit_compare(b, "LE", xc, hib));
  idx = tpu_emit_select(b, inside, idx, tpu_emit_const_like(b, &it1, -1.0));
  int64_t nb[2] = {n, bins};
  tpu_hlo_type_t grid = tpu_hlo_type_make(TPU_DTYPE_INT64, 2, nb);
  tpu_hlo_value_t col = tpu_emit_iota(b, &grid, 1);
  int64_t n1[2] = {n, 1};
  tpu_hlo_value_t idx2 = tpu_emit_reshape(b, idx, n1, 2);
  tpu_hlo_value_t hot = tpu_emit_compare(b, "EQ", col, tpu_emit_broadcast_to(b, idx2, &grid));
  tpu_hlo_value_t ones = tpu_emit_convert(b, hot, out.dtype);
  int64_t dim0 = 0;
  tpu_lower_set_output(ctx, 0, tpu_emit_reduce(b, ones, tpu_emit_const(b, out.dtype, 0), &dim0, 1,
                                               "stablehlo.add"));
  return NULL;
}

const tpu_lowering_t tpu_lowerings_reduce[] = {
    {"sum", lower_sum, 0, false},
    {"histc", lower_histc, 0},
    {"nansum", lower_sum, 0, true},
    {"prod", lower_prod, 0},
    {"mean", lower_mean, 0},
    {"max", lower_max_min, 0, true},
    {"min", lower_max_min, 0, false},
    {"amax", lower_amax_amin, 0, true},
    {"amin", lower_amax_amin, 0, false},
    {"argmax", lower_arg_extreme, 0, true},
    {"argmin", lower_arg_extreme, 0, false},
    {"var", lower_var_std, 0, false},
    {"std", lower_var_std, 0, true},
    {"var_mean", lower_var_std, 0, false},
    {"std_mean", lower_var_std, 0, true},
    {"trace", lower_trace, 0},
    {"logsumexp", lower_logsumexp, 0},
    {"cumsum", lower_cum, 0, true},
    {"cumprod", lower_cum, 0, false},
    {"logcumsumexp", lower_logcumsumexp, 0},
    {"_logcumsumexp", lower_logcumsumexp, 0},
    {"cummax", lower_cum_extreme, 0, true},
    {"cummin", lower_cum_extreme, 0, false},
    {"_cummax_helper", lower_cum_extreme, 0, true},
    {"_cummin_helper", lower_cum_extreme, 0, false},
    {"count_nonzero", lower_count_nonzero, 0},
    {"aminmax", lower_aminmax, 0},
    {"all", lower_all_any, 0, true},
    {"any", lower_all_any, 0, false},
};
const size_t tpu_lowerings_reduce_count = sizeof tpu_lowerings_reduce / sizeof tpu_lowerings_reduce[0];
