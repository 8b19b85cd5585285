/* pool family of the lowering table (see lowering.h): max / avg /
 * adaptive pooling with their backward ops, 1-3 spatial dims (PyTorch
 * reaches us with the 2-D and 3-D ops, 1-D ones are views of 2-D; a row's
 * data word is its count), and max_unpool. An input [*lead, *sp] is read
 * as [B, *sp] planes. Half types compute in float32 and round once. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conv_internal.h"
#include "emit.h"
#include "lowering.h"

/* Pool input [*lead, *sp] as [B, *sp]. */
typedef struct pool_shape_s {
  int nsp;
  int64_t batch;
  int64_t in[MAX_SP], out[MAX_SP];
} pool_shape_t;

static bool pool_shape(const tpu_hlo_type_t* in, const tpu_hlo_type_t* out, int nsp,
                       pool_shape_t* s) {
  if (in->rank < nsp + 1 || in->rank > nsp + 2 || out->rank != in->rank) return false;
  s->nsp = nsp;
  s->batch = product(in->dims, in->rank - nsp);
  for (int i = 0; i < nsp; i++) {
    s->in[i] = in->dims[in->rank - nsp + i];
    s->out[i] = out->dims[out->rank - nsp + i];
  }
  return true;
}

static tpu_hlo_value_t as_batched(tpu_hlo_builder_t* b, tpu_hlo_value_t v, int64_t batch,
                                  const int64_t* sp, int nsp) {
  int64_t d[MAX_SP + 1] = {batch};
  memcpy(d + 1, sp, sizeof(int64_t) * (size_t)nsp);
  return tpu_emit_reshape(b, v, d, nsp + 1);
}

/* The smallest value of dtype (the identity of max). */
static tpu_hlo_value_t lowest(tpu_hlo_builder_t* b, tpu_dtype_t d) {
  tpu_hlo_type_t t = tpu_hlo_type_scalar(d);
  if (tpu_dtype_is_floating(d)) return tpu_hlo_constant_float(b, t, -INFINITY);
  switch (d) {
    case TPU_DTYPE_UINT8: case TPU_DTYPE_BOOL: return tpu_hlo_constant_int(b, t, 0);
    case TPU_DTYPE_INT8: return tpu_hlo_constant_int(b, t, INT8_MIN);
    case TPU_DTYPE_INT16: return tpu_hlo_constant_int(b, t, INT16_MIN);
    case TPU_DTYPE_INT32: return tpu_hlo_constant_int(b, t, INT32_MIN);
    default: return tpu_hlo_constant_int(b, t, INT64_MIN);
  }
}

/* The block of a (value, index) max: NaN beats everything; equal values
 * keep the smaller flat index (PyTorch scans in order and replaces only on
 * '>'), so the first maximum wins. A total order, hence associative. */
static void pair_max_block(tpu_hlo_builder_t* b, tpu_dtype_t dtype) {
  tpu_hlo_type_t sv = tpu_hlo_type_scalar(dtype), si = tpu_hlo_type_scalar(TPU_DTYPE_INT64);
  tpu_hlo_type_t types[4] = {sv, si, sv, si};
  tpu_hlo_value_t a[4];
  tpu_hlo_block_begin(b, types, 4, a);
  tpu_hlo_value_t an = tpu_emit_compare(b, "NE", a[0], a[0]);
  tpu_hlo_value_t bn = tpu_emit_compare(b, "NE", a[2], a[2]);
  tpu_hlo_value_t gt = tpu_emit_compare(b, "GT", a[2], a[0]);
  tpu_hlo_value_t eq = tpu_emit_compare(b, "EQ", a[2], a[0]);
  tpu_hlo_value_t first = tpu_emit_compare(b, "LT", a[3], a[1]);
  tpu_hlo_value_t later = tpu_emit_compare(b, "GT", a[3], a[1]);
  /* numbers: b > a, or b == a with a smaller index; NaNs: b NaN and (a not
   * NaN or b's index larger: PyTorch replaces on every NaN, so the last
   * one wins). */
  tpu_hlo_value_t take_num = tpu_emit_binary(
      b, "stablehlo.or", gt, tpu_emit_binary(b, "stablehlo.and", eq, first));
  tpu_hlo_value_t take_nan = tpu_emit_binary(
      b, "stablehlo.and", bn, tpu_emit_binary(b, "stablehlo.or", tpu_emit_unary(b, "stablehlo.not", an), later));
  tpu_hlo_value_t take = tpu_emit_select(b, an, take_nan, tpu_emit_binary(b, "stablehlo.or", bn, take_num));
  tpu_hlo_value_t r[2] = {tpu_emit_select(b, take, a[2], a[0]), tpu_emit_select(b, take, a[3], a[1])};
  tpu_hlo_block_return(b, r, 2);
}

/* Flat per-plane indices (row-major over the spatial dims) of [B, *sp]. */
static tpu_hlo_value_t plane_indices(tpu_hlo_builder_t* b, int64_t batch, const int64_t* sp, int nsp) {
  int64_t d2[2] = {batch, product(sp, nsp)};
  tpu_hlo_type_t t = tpu_hlo_type_make(TPU_DTYPE_INT64, 2, d2);
  return as_batched(b, tpu_emit_iota(b, &t, 1), batch, sp, nsp);
}

static void window_attrs(char* out, size_t cap, const int64_t* win, const int64_t* strides,
                         const int64_t* wdil, int rank) {
  char a0[256], a1[256], a2[256];
  tpu_emit_i64_array(a0, sizeof a0, win, rank);
  tpu_emit_i64_array(a1, sizeof a1, strides, rank);
  tpu_emit_i64_array(a2, sizeof a2, wdil, rank);
  snprintf(out, cap, "window_dilations = %s, window_dimensions = %s, window_strides = %s", a2, a0, a1);
}

/* Max pooling with indices over [B, *sp] already padded: values, indices. */
static void max_window(tpu_hlo_builder_t* b, tpu_hlo_value_t x, tpu_hlo_value_t idx,
                       const int64_t* k, const int64_t* s, const int64_t* d, int nsp,
                       const int64_t* out_sp, tpu_hlo_value_t* res) {
  tpu_hlo_type_t xt = tpu_hlo_value_type(b, x);
  int64_t win[MAX_SP + 1] = {1}, str[MAX_SP + 1] = {1}, dil[MAX_SP + 1] = {1};
  for (int i = 0; i < nsp; i++) win[1 + i] = k[i], str[1 + i] = s[i], dil[1 + i] = d[i];
  char attrs[900];
  window_attrs(attrs, sizeof attrs, win, str, dil, nsp + 1);
  tpu_hlo_type_t types[2];
  types[0] = xt;
  for (int i = 0; i < nsp; i++) types[0].dims[1 + i] = out_sp[i];
  types[1] = types[0];
  types[1].dtype = TPU_DTYPE_INT64;
  tpu_hlo_value_t ops[4] = {x, idx, lowest(b, xt.dtype), tpu_emit_const(b, TPU_DTYPE_INT64, 0)};
  ops[3] = tpu_hlo_constant_int(b, tpu_hlo_type_scalar(TPU_DTYPE_INT64), INT64_MAX);
  tpu_hlo_region_op_begin(b, "stablehlo.reduce_window", ops, 4, types, 2, attrs);
  pair_max_block(b, xt.dtype);
  tpu_hlo_region_op_end(b, res);
}

/* Pads x ([B, *sp]) so windows of size (k-1)*d+1 at stride s give `out`. */
static tpu_hlo_value_t pad_for_windows(tpu_hlo_builder_t* b, tpu_hlo_value_t x, tpu_hlo_value_t pv,
                                       const pool_shape_t* s, const int64_t* k, const int64_t* st,
                                       const int64_t* d, const int64_t* p) {
  int64_t lo[MAX_SP + 1] = {0}, hi[MAX_SP + 1] = {0};
  for (int i = 0; i < s->nsp; i++) {
    int64_t need = s->out[i] > 0 ? (s->out[i] - 1) * st[i] + (k[i] - 1) * d[i] + 1 : 0;
    lo[1 + i] = p[i];
    hi[1 + i] = need - s->in[i] - p[i];
  }
  return tpu_emit_pad(b, x, pv, lo, hi, NULL);
}

typedef struct pool_params_s {
  int64_t k[MAX_SP], s[MAX_SP], p[MAX_SP], d[MAX_SP];
} pool_params_t;

/* kernel_size, stride (empty = kernel), padding, dilation from `first`;
 * dilation_at < 0: none. */
static bool read_pool_params(tpu_lower_ctx_t* ctx, int first, int dilation_at, int nsp,
                             pool_params_t* pp) {
  if (!read_ints(tpu_lower_arg(ctx, first), nsp, NULL, 1, pp->k) ||
      !read_ints(tpu_lower_arg(ctx, first + 1), nsp, pp->k, 1, pp->s) ||
      !read_ints(tpu_lower_arg(ctx, first + 2), nsp, NULL, 0, pp->p))
    return false;
  if (dilation_at < 0) {
    for (int i = 0; i < nsp; i++) pp->d[i] = 1;
    return true;
  }
  return read_ints(tpu_lower_arg(ctx, dilation_at), nsp, NULL, 1, pp->d);
}

static bool max_dtype_ok(tpu_dtype_t d) { return !tpu_dtype_is_complex(d) && d != TPU_DTYPE_BOOL; }

/* One pooling call. */
typedef struct pool_call_s {
  tpu_hlo_type_t out; /* output 0 */
  tpu_dtype_t acc;    /* out's compute dtype */
  pool_shape_t s;     /* of the pooling's input and output */
  pool_params_t pp;
} pool_call_t;

/* The setup pooling shares: declines calls with zero-element tensors;
 * ("unsupported <what> call") calls where `ok` is false, argument 0 is not
 * a tensor, or the shapes or window parameters (from argument params_at,
 * dilation at dilation_at; params_at < 0: none) do not read; and output
 * dtypes dtype_ok refuses. Argument 0 is the input, or (backward) the
 * gradient of the output, and output 0 the input's gradient. The row's data
 * word is the spatial dim count. */
static tpu_status_t pool_setup(tpu_lower_ctx_t* ctx, const char* what, bool backward, bool ok,
                               int params_at, int dilation_at, bool (*dtype_ok)(tpu_dtype_t),
                               pool_call_t* c) {
  if (any_empty(ctx)) return tpu_lower_decline(ctx, "zero-element tensors");
  const tpu_lower_arg_t* a = tpu_lower_arg(ctx, 0);
  c->out = tpu_lower_output_type(ctx, 0);
  c->acc = compute_dtype(c->out.dtype);
  int nsp = (int)tpu_lower_data(ctx);
  if (!ok || a->kind != TPU_ARG_TENSOR ||
      !pool_shape(backward ? &c->out : &a->type, backward ? &a->type : &c->out, nsp, &c->s) ||
      (params_at >= 0 && !read_pool_params(ctx, params_at, dilation_at, nsp, &c->pp)))
    return tpu_lower_decline(ctx, "unsupported %s call", what);
  if (!dtype_ok(c->out.dtype)) return tpu_lower_decline(ctx, "dtype %d", (int)c->out.dtype);
  return NULL;
}

/* max_pool{2,3}d_with_indices(self, kernel_size, stride, padding, dilation,
 * ceil_mode) -> (values, indices); the output sizes (ceil_mode) come from
 * PyTorch's meta kernel. */
static tpu_status_t lower_max_pool_with_indices(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  pool_call_t c;
  bool ok = tpu_lower_num_outputs(ctx) >= 2;
  TPU_RETURN_IF_ERROR(pool_setup(ctx, "max pooling", false, ok, 1, 4, max_dtype_ok, &c));
  tpu_hlo_value_t x = as_batched(b, tpu_lower_tensor(ctx, 0), c.s.batch, c.s.in, c.s.nsp);
  tpu_hlo_value_t idx = plane_indices(b, c.s.batch, c.s.in, c.s.nsp);
  x = pad_for_windows(b, x, lowest(b, c.out.dtype), &c.s, c.pp.k, c.pp.s, c.pp.d, c.pp.p);
  /* Padding never wins a tie: it has the largest index. */
  idx = pad_for_windows(b, idx, tpu_hlo_constant_int(b, tpu_hlo_type_scalar(TPU_DTYPE_INT64), INT64_MAX),
                        &c.s, c.pp.k, c.pp.s, c.pp.d, c.pp.p);
  tpu_hlo_value_t res[2];
  max_window(b, x, idx, c.pp.k, c.pp.s, c.pp.d, c.s.nsp, c.s.out, res);
  tpu_hlo_type_t it = tpu_lower_output_type(ctx, 1);
  tpu_lower_set_output(ctx, 0, reshape_to(b, res[0], &c.out));
  tpu_lower_set_output(ctx, 1, tpu_emit_convert(b, reshape_to(b, res[1], &it), it.dtype));
  return NULL;
}

/* grad_input[plane, indices[o]] += grad_output[o]: the backward of every
 * max pooling. g and indices have the output's shape, `in` the input's. */
static tpu_hlo_value_t scatter_to_indices(tpu_hlo_builder_t* b, tpu_hlo_value_t g,
                                          tpu_hlo_value_t indices, const pool_shape_t* s,
                                          tpu_dtype_t acc) {
  int64_t P = product(s->in, s->nsp), OP = product(s->out, s->nsp);
  int64_t flat = s->batch * OP, d2[2] = {s->batch, OP}, col[2] = {flat, 1};
  tpu_hlo_value_t gi = tpu_emit_reshape(b, tpu_emit_convert(b, g, acc), &flat, 1);
  tpu_hlo_value_t ix = tpu_emit_reshape(b, tpu_emit_convert(b, indices, TPU_DTYPE_INT64), d2, 2);
  /* Plane offsets turn per-plane indices into indices of the flat input. */
  tpu_hlo_type_t t2 = tpu_hlo_type_make(TPU_DTYPE_INT64, 2, d2);
  tpu_hlo_value_t base = tpu_emit_binary(b, "stablehlo.multiply", tpu_emit_iota(b, &t2, 0),
                                         tpu_emit_const_like(b, &t2, (double)P));
  ix = tpu_emit_reshape(b, tpu_emit_binary(b, "stablehlo.add", ix, base), col, 2);
  int64_t total = s->batch * P;
  tpu_hlo_type_t zt = tpu_hlo_type_make(acc, 1, &total);
  const int64_t zero = 0;
  return tpu_emit_scatter(b, tpu_emit_const_like(b, &zt, 0), ix, gi, NULL, 0, &zero, &zero, 1,
                          "stablehlo.add");
}

/* max_pool{2,3}d_with_indices_backward(grad_output, self, kernel_size,
 * stride, padding, dilation, ceil_mode, indices) and
 * adaptive_max_pool{2,3}d_backward(grad_output, self, indices). */
static tpu_status_t lower_max_pool_backward(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  int ind = strstr(tpu_lower_op_name(ctx), "adaptive") ? 2 : 7;
  pool_call_t c;
  bool ok = tpu_lower_arg(ctx, ind)->kind == TPU_ARG_TENSOR;
  TPU_RETURN_IF_ERROR(pool_setup(ctx, "max pooling backward", true, ok, -1, -1, tpu_dtype_is_floating, &c));
  tpu_hlo_value_t r = scatter_to_indices(b, tpu_lower_tensor(ctx, 0), tpu_lower_tensor(ctx, ind), &c.s, c.acc);
  tpu_lower_set_output(ctx, 0, tpu_emit_convert(b, reshape_to(b, r, &c.out), c.out.dtype));
  return NULL;
}

/* avg_pool divisors per output position (row-major over the output's
 * spatial dims), as PyTorch computes them: the window clipped to the padded
 * input (count_include_pad) or to the input itself. */
static double* avg_divisors(const pool_shape_t* s, const pool_params_t* pp, bool include_pad) {
  int64_t n = product(s->out, s->nsp);
  double* div = malloc(sizeof(double) * (size_t)(n ? n : 1));
  if (!div) return NULL;
  for (int64_t o = 0; o < n; o++) {
    int64_t rest = o;
    double f = 1;
    for (int i = s->nsp - 1; i >= 0; i--) {
      int64_t oi = rest % s->out[i];
      rest /= s->out[i];
      int64_t start = oi * pp->s[i] - pp->p[i];
      int64_t end = start + pp->k[i];
      if (end > s->in[i] + pp->p[i]) end = s->in[i] + pp->p[i];
      int64_t whole = end - start;
      if (start < 0) start = 0;
      if (end > s->in[i]) end = s->in[i];
      f *= (double)(include_pad ? whole : end - start);
    }
    /* An empty window sums to 0; PyTorch outputs 0 there, not 0/0. */
    div[o] = f > 0 ? f : 1;
  }
  return div;
}

/* A [B, *osp]-broadcast constant of the divisors in `dtype`. */
static tpu_hlo_value_t divisor_const(tpu_hlo_builder_t* b, const double* div, const pool_shape_t* s,
                                     tpu_dtype_t dtype) {
  int64_t n = product(s->out, s->nsp);
  tpu_hlo_type_t t = tpu_hlo_type_make(dtype, s->nsp, s->out);
  void* data = malloc((size_t)(n ? n : 1) * 8);
  for (int64_t i = 0; i < n && data; i++) {
    if (dtype == TPU_DTYPE_FLOAT32) ((float*)data)[i] = (float)div[i];
    else if (dtype == TPU_DTYPE_FLOAT64) ((double*)data)[i] = div[i];
    else ((int64_t*)data)[i] = (int64_t)div[i];
  }
  tpu_hlo_value_t c = tpu_hlo_constant_dense(b, t, data);
  free(data);
  int64_t full[MAX_SP + 1] = {s->batch};
  memcpy(full + 1, s->out, sizeof(int64_t) * (size_t)s->nsp);
  tpu_hlo_type_t ft = tpu_hlo_type_make(dtype, s->nsp + 1, full);
  return tpu_emit_broadcast_to(b, c, &ft);
}

/* Reads avg_pool's options from `first` (ceil_mode): ceil_mode,
 * count_include_pad, divisor_override; returns the divisors (NULL for
 * out of memory). */
static tpu_hlo_value_t avg_divisor(tpu_lower_ctx_t* ctx, int first, const pool_shape_t* s,
                                   const pool_params_t* pp, tpu_dtype_t acc, bool* ok) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  const tpu_lower_arg_t* inc = tpu_lower_arg(ctx, first + 1);
  const tpu_lower_arg_t* ovr = tpu_lower_arg(ctx, first + 2);
  int64_t full[MAX_SP + 1] = {s->batch};
  memcpy(full + 1, s->out, sizeof(int64_t) * (size_t)s->nsp);
  tpu_hlo_type_t ft = tpu_hlo_type_make(acc, s->nsp + 1, full);
  *ok = true;
  if (ovr->kind == TPU_ARG_INT) return tpu_emit_const_like(b, &ft, (double)ovr->i);
  double* div = avg_divisors(s, pp, inc->kind != TPU_ARG_BOOL || inc->i != 0);
  if (!div) {
    *ok = false;
    return tpu_emit_const_like(b, &ft, 1);
  }
  tpu_hlo_value_t c = divisor_const(b, div, s, acc);
  free(div);
  return c;
}

static tpu_hlo_value_t sum_window(tpu_hlo_builder_t* b, tpu_hlo_value_t x, const int64_t* k,
                                  const int64_t* st, int nsp, const int64_t* out_sp) {
  tpu_hlo_type_t t = tpu_hlo_value_type(b, x);
  int64_t win[MAX_SP + 1] = {1}, str[MAX_SP + 1] = {1}, dil[MAX_SP + 1] = {1, 1, 1, 1};
  for (int i = 0; i < nsp; i++) win[1 + i] = k[i], str[1 + i] = st[i], t.dims[1 + i] = out_sp[i];
  char attrs[900];
  window_attrs(attrs, sizeof attrs, win, str, dil, nsp + 1);
  tpu_hlo_value_t ops[2] = {x, tpu_emit_const(b, t.dtype, 0)};
  tpu_hlo_region_op_begin(b, "stablehlo.reduce_window", ops, 2, &t, 1, attrs);
  tpu_hlo_type_t sc = tpu_hlo_type_scalar(t.dtype), bt[2] = {sc, sc};
  tpu_hlo_value_t a[2];
  tpu_hlo_block_begin(b, bt, 2, a);
  tpu_hlo_value_t sum = tpu_emit_binary(b, "stablehlo.add", a[0], a[1]);
  tpu_hlo_block_return(b, &sum, 1);
  tpu_hlo_value_t r;
  tpu_hlo_region_op_end(b, &r);
  return r;
}

static bool avg_dtype_ok(tpu_dtype_t d) { return conv_dtype_ok(d) || d == TPU_DTYPE_INT64; }

/* avg_pool{2,3}d(self, kernel_size, stride, padding, ceil_mode,
 * count_include_pad, divisor_override). Integer inputs divide with
 * truncation, like PyTorch. */
static tpu_status_t lower_avg_pool(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  pool_call_t c;
  TPU_RETURN_IF_ERROR(pool_setup(ctx, "avg pooling", false, true, 1, -1, avg_dtype_ok, &c));
  tpu_hlo_value_t x = as_batched(b, operand_in(ctx, 0, c.acc), c.s.batch, c.s.in, c.s.nsp);
  x = pad_for_windows(b, x, tpu_emit_const(b, c.acc, 0), &c.s, c.pp.k, c.pp.s, c.pp.d, c.pp.p);
  tpu_hlo_value_t sum = sum_window(b, x, c.pp.k, c.pp.s, c.s.nsp, c.s.out);
  bool ok;
  tpu_hlo_value_t div = avg_divisor(ctx, 4, &c.s, &c.pp, c.acc, &ok);
  if (!ok) return tpu_lower_decline(ctx, "out of host memory");
  tpu_hlo_value_t r = tpu_emit_binary(b, "stablehlo.divide", sum, div);
  tpu_lower_set_output(ctx, 0, tpu_emit_convert(b, reshape_to(b, r, &c.out), c.out.dtype));
  return NULL;
}

/* avg_pool{2,3}d_backward(grad_output, self, kernel_size, stride, padding,
 * ceil_mode, count_include_pad, divisor_override): each input position sums
 * grad/divisor over the windows covering it, i.e. a stride-1 window sum over
 * the stride-dilated, (k-1-p)-padded gradient. */
static tpu_status_t lower_avg_pool_backward(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  pool_call_t c;
  TPU_RETURN_IF_ERROR(pool_setup(ctx, "avg pooling backward", true, true, 2, -1, conv_dtype_ok, &c));
  bool ok;
  tpu_hlo_value_t div = avg_divisor(ctx, 5, &c.s, &c.pp, c.acc, &ok);
  if (!ok) return tpu_lower_decline(ctx, "out of host memory");
  tpu_hlo_value_t g = as_batched(b, operand_in(ctx, 0, c.acc), c.s.batch, c.s.out, c.s.nsp);
  g = tpu_emit_binary(b, "stablehlo.divide", g, div);
  int64_t lo[MAX_SP + 1] = {0}, hi[MAX_SP + 1] = {0}, inner[MAX_SP + 1] = {0}, one[MAX_SP] = {1, 1, 1};
  for (int i = 0; i < c.s.nsp; i++) {
    lo[1 + i] = c.pp.k[i] - 1 - c.pp.p[i];
    inner[1 + i] = c.pp.s[i] - 1;
    int64_t dil = c.s.out[i] > 0 ? (c.s.out[i] - 1) * c.pp.s[i] + 1 : 0;
    hi[1 + i] = c.s.in[i] + c.pp.k[i] - 1 - dil - lo[1 + i];
    if (lo[1 + i] < 0) return tpu_lower_decline(ctx, "padding larger than the window");
  }
  g = tpu_emit_pad(b, g, tpu_emit_const(b, c.acc, 0), lo, hi, inner);
  tpu_hlo_value_t r = sum_window(b, g, c.pp.k, one, c.s.nsp, c.s.in);
  tpu_lower_set_output(ctx, 0, tpu_emit_convert(b, reshape_to(b, r, &c.out), c.out.dtype));
  return NULL;
}

/* Adaptive windows along one dim: [floor(o*L/O), ceil((o+1)*L/O)). */
static int64_t adaptive_start(int64_t o, int64_t L, int64_t O) { return (o * L) / O; }
static int64_t adaptive_end(int64_t o, int64_t L, int64_t O) { return ((o + 1) * L + O - 1) / O; }

/* The 0/1 [O, L] matrix of adaptive windows in dtype. */
static tpu_hlo_value_t window_matrix(tpu_hlo_builder_t* b, int64_t L, int64_t O, tpu_dtype_t dtype) {
  int64_t d[2] = {O, L};
  size_t es = tpu_dtype_size(dtype);
  unsigned char* data = calloc((size_t)(O * L > 0 ? O * L : 1), es);
  tpu_hlo_type_t t = tpu_hlo_type_make(dtype, 2, d);
  if (!data) return tpu_emit_const_like(b, &t, 0);
  for (int64_t o = 0; o < O; o++)
    for (int64_t l = adaptive_start(o, L, O); l < adaptive_end(o, L, O); l++) {
      if (dtype == TPU_DTYPE_FLOAT64) ((double*)data)[o * L + l] = 1.0;
      else ((float*)data)[o * L + l] = 1.0f;
    }
  tpu_hlo_value_t c = tpu_hlo_constant_dense(b, t, data);
  free(data);
  return c;
}

/* Contracts dim 1 of x [B, d1, ...] with m's dim `mdim`; the new dim goes
 * last, so nsp rounds rotate back to [B, new dims in order]. */
static tpu_hlo_value_t contract_first_spatial(tpu_hlo_builder_t* b, tpu_hlo_value_t x,
                                              tpu_hlo_value_t m, int mdim) {
  tpu_hlo_type_t xt = tpu_hlo_value_type(b, x), mt = tpu_hlo_value_type(b, m);
  tpu_hlo_type_t out = {.dtype = xt.dtype, .rank = xt.rank};
  out.dims[0] = xt.dims[0];
  for (int i = 2; i < xt.rank; i++) out.dims[i - 1] = xt.dims[i];
  out.dims[xt.rank - 1] = mt.dims[1 - mdim];
  char attrs[160];
  snprintf(attrs, sizeof attrs,
           "dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [1], "
           "rhs_contracting_dimensions = [%d]>",
           mdim);
  tpu_hlo_value_t ops[2] = {x, m};
  return tpu_hlo_op(b, "stablehlo.dot_general", ops, 2, out, attrs);
}

static tpu_hlo_value_t adaptive_counts(tpu_hlo_builder_t* b, const pool_shape_t* s, tpu_dtype_t acc) {
  int64_t n = product(s->out, s->nsp);
  double* div = malloc(sizeof(double) * (size_t)(n ? n : 1));
  for (int64_t o = 0; o < n && div; o++) {
    int64_t rest = o;
    double f = 1;
    for (int i = s->nsp - 1; i >= 0; i--) {
      int64_t oi = rest % s->out[i];
      rest /= s->out[i];
      f *= (double)(adaptive_end(oi, s->in[i], s->out[i]) - adaptive_start(oi, s->in[i], s->out[i]));
    }
    div[o] = f;
  }
  if (!div) return (tpu_hlo_value_t){-1};
  tpu_hlo_value_t c = divisor_const(b, div, s, acc);
  free(div);
  return c;
}

/* _adaptive_avg_pool{2,3}d(self, output_size): window sums as products with
 * 0/1 window matrices per dim, then the window sizes divide. */
static tpu_status_t lower_adaptive_avg_pool(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  pool_call_t c;
  TPU_RETURN_IF_ERROR(pool_setup(ctx, "adaptive avg pooling", false, true, -1, -1, conv_dtype_ok, &c));
  tpu_hlo_value_t x = as_batched(b, operand_in(ctx, 0, c.acc), c.s.batch, c.s.in, c.s.nsp);
  for (int i = 0; i < c.s.nsp; i++)
    x = contract_first_spatial(b, x, window_matrix(b, c.s.in[i], c.s.out[i], c.acc), 1);
  tpu_hlo_value_t div = adaptive_counts(b, &c.s, c.acc);
  if (div.id < 0) return tpu_lower_decline(ctx, "out of host memory");
  x = tpu_emit_binary(b, "stablehlo.divide", x, div);
  tpu_lower_set_output(ctx, 0, tpu_emit_convert(b, reshape_to(b, x, &c.out), c.out.dtype));
  return NULL;
}

/* _adaptive_avg_pool{2,3}d_backward(grad_output, self). */
static tpu_status_t lower_adaptive_avg_pool_backward(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  pool_call_t c;
  TPU_RETURN_IF_ERROR(
      pool_setup(ctx, "adaptive avg pooling backward", true, true, -1, -1, conv_dtype_ok, &c));
  tpu_hlo_value_t div = adaptive_counts(b, &c.s, c.acc);
  if (div.id < 0) return tpu_lower_decline(ctx, "out of host memory");
  tpu_hlo_value_t g = as_batched(b, operand_in(ctx, 0, c.acc), c.s.batch, c.s.out, c.s.nsp);
  g = tpu_emit_binary(b, "stablehlo.divide", g, div);
  for (int i = 0; i < c.s.nsp; i++)
    g = contract_first_spatial(b, g, window_matrix(b, c.s.in[i], c.s.out[i], c.acc), 0);
  tpu_lower_set_output(ctx, 0, tpu_emit_convert(b, reshape_to(b, g, &c.out), c.out.dtype));
  return NULL;
}

/* adaptive_max_pool{2,3}d(self, output_size) -> (values, indices). Max is
 * separable and the (value, index) order is total, so one dim at a time:
 * gather each output's window (padded to the widest window, extra slots
 * masked to the lowest value) and reduce it with the pair max. */
static tpu_status_t lower_adaptive_max_pool(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  pool_call_t c;
  bool ok = tpu_lower_num_outputs(ctx) >= 2;
  TPU_RETURN_IF_ERROR(pool_setup(ctx, "adaptive max pooling", false, ok, -1, -1, tpu_dtype_is_floating, &c));
  tpu_hlo_value_t v = as_batched(b, tpu_lower_tensor(ctx, 0), c.s.batch, c.s.in, c.s.nsp);
  tpu_hlo_value_t ix = plane_indices(b, c.s.batch, c.s.in, c.s.nsp);
  for (int i = 0; i < c.s.nsp; i++) {
    int64_t L = c.s.in[i], O = c.s.out[i], K = 0;
    for (int64_t o = 0; o < O; o++) {
      int64_t w = adaptive_end(o, L, O) - adaptive_start(o, L, O);
      if (w > K) K = w;
    }
    /* Row o, slot t reads start(o) + t; slots past the window read the
     * padding row L. */
    int64_t* rows = malloc(sizeof(int64_t) * (size_t)(O * K > 0 ? O * K : 1));
    if (!rows) return tpu_lower_decline(ctx, "out of host memory");
    for (int64_t o = 0; o < O; o++)
      for (int64_t t = 0; t < K; t++) {
        int64_t r = adaptive_start(o, L, O) + t;
        rows[o * K + t] = r < adaptive_end(o, L, O) ? r : L;
      }
    int64_t idims[3] = {O, K, 1};
    tpu_hlo_value_t sel = tpu_hlo_constant_dense(b, tpu_hlo_type_make(TPU_DTYPE_INT64, 3, idims), rows);
    free(rows);
    int64_t lo[MAX_SP + 1] = {0}, hi[MAX_SP + 1] = {0};
    hi[1 + i] = 1;
    tpu_hlo_value_t vp = tpu_emit_pad(b, v, lowest(b, c.out.dtype), lo, hi, NULL);
    tpu_hlo_value_t ip = tpu_emit_pad(b, ix, tpu_hlo_constant_int(b, tpu_hlo_type_scalar(TPU_DTYPE_INT64), INT64_MAX), lo, hi, NULL);
    /* gather along dim 1+i: result [B, ..before.., O, K, ..after..]. */
    tpu_hlo_type_t vt = tpu_hlo_value_type(b, vp);
    int rank = vt.rank;
    tpu_hlo_type_t gt = {.dtype = vt.dtype, .rank = rank + 1};
    int64_t slice[MAX_SP + 1];
    char offs[64] = "", sizes[160];
    for (int d = 0, k = 0, len = 0; d < rank; d++) {
      slice[d] = d == 1 + i ? 1 : vt.dims[d];
      if (d == 1 + i) {
        gt.dims[k++] = O;
        gt.dims[k++] = K;
      } else {
        len += snprintf(offs + len, sizeof offs - (size_t)len, "%s%d", len ? ", " : "", k);
        gt.dims[k++] = vt.dims[d];
      }
    }
    tpu_emit_i64_array(sizes, sizeof sizes, slice, rank);
    char attrs[512];
    snprintf(attrs, sizeof attrs,
             "dimension_numbers = #stablehlo.gather<offset_dims = [%s], collapsed_slice_dims = "
             "[%d], start_index_map = [%d], index_vector_dim = 2>, indices_are_sorted = false, "
             "slice_sizes = %s",
             offs, 1 + i, 1 + i, sizes);
    tpu_hlo_value_t gops[2] = {vp, sel};
    tpu_hlo_value_t gv = tpu_hlo_op(b, "stablehlo.gather", gops, 2, gt, attrs);
    gops[0] = ip;
    tpu_hlo_type_t git = gt;
    git.dtype = TPU_DTYPE_INT64;
    tpu_hlo_value_t gi = tpu_hlo_op(b, "stablehlo.gather", gops, 2, git, attrs);
    /* Reduce the K slots (dim 2+i). */
    tpu_hlo_type_t rt[2];
    rt[0] = vt;
    rt[0].dims[1 + i] = O;
    rt[1] = rt[0];
    rt[1].dtype = TPU_DTYPE_INT64;
    char rattrs[64];
    snprintf(rattrs, sizeof rattrs, "dimensions = array<i64: %d>", 2 + i);
    tpu_hlo_value_t rops[4] = {gv, gi, lowest(b, c.out.dtype),
                               tpu_hlo_constant_int(b, tpu_hlo_type_scalar(TPU_DTYPE_INT64), INT64_MAX)};
    tpu_hlo_region_op_begin(b, "stablehlo.reduce", rops, 4, rt, 2, rattrs);
    pair_max_block(b, c.out.dtype);
    tpu_hlo_value_t res[2];
    tpu_hlo_region_op_end(b, res);
    v = res[0];
    ix = res[1];
  }
  tpu_hlo_type_t it = tpu_lower_output_type(ctx, 1);
  tpu_lower_set_output(ctx, 0, reshape_to(b, v, &c.out));
  tpu_lower_set_output(ctx, 1, tpu_emit_convert(b, reshape_to(b, ix, &it), it.dtype));
  return NULL;
}

/* max_unpool2d(self, indices, output_size) / max_unpool3d(..., stride,
 * padding): every element of a (batch, channel) plane of self written to
 * its flat index in the output plane, zeros elsewhere (one scatter over
 * all planes). Indices out of the plane are refused before this runs
 * (dispatch.cpp check_unpool_indices), as CPU refuses them; 3d's stride and
 * padding only feed CPU's shape checks, so a call those would refuse is
 * declined to the fallback. Duplicate indices: any one write wins, as on
 * CUDA (from max_pool they carry equal values). */
static tpu_status_t lower_max_unpool(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  const tpu_lower_arg_t *x = tpu_lower_arg(ctx, 0), *idx = tpu_lower_arg(ctx, 1);
  tpu_hlo_type_t out = tpu_lower_output_type(ctx, 0);
  int nsp = (int)tpu_lower_data(ctx);
  if (x->kind != TPU_ARG_TENSOR || idx->kind != TPU_ARG_TENSOR || idx->type.dtype != TPU_DTYPE_INT64 ||
      x->type.rank != out.rank || x->type.rank < nsp + 1 || x->type.dtype != out.dtype)
    return tpu_lower_decline(ctx, "unsupported max_unpool call");
  if (nsp == 3) {
    for (int a = 3; a <= 4; a++) {
      const tpu_lower_arg_t* v = tpu_lower_arg(ctx, a);
      if (v->kind != TPU_ARG_INTS || v->num_ints != 3) return tpu_lower_decline(ctx, "stride / padding");
      for (int k = 0; k < 3; k++)
        if (a == 3 && v->ints[k] <= 0) return tpu_lower_decline(ctx, "stride %lld", (long long)v->ints[k]);
    }
    for (int k = 0; k < 3; k++)
      if (out.dims[out.rank - 3 + k] <= 0) return tpu_lower_decline(ctx, "empty output volume");
  }
  if (product(out.dims, out.rank) == 0) {
    tpu_lower_set_output(ctx, 0, tpu_emit_const_like(b, &out, 0));
    return NULL;
  }
  int64_t planes = product(x->type.dims, x->type.rank - nsp);
  int64_t in_plane = product(x->type.dims + x->type.rank - nsp, nsp);
  int64_t out_plane = product(out.dims + out.rank - nsp, nsp);
  const int64_t pd[2] = {planes, in_plane}, flat = planes * in_plane, pairs[2] = {flat, 1};
  tpu_hlo_type_t pt = tpu_hlo_type_make(TPU_DTYPE_INT64, 2, pd);
  tpu_hlo_value_t where = tpu_emit_add(
      b, tpu_emit_reshape(b, tpu_lower_tensor(ctx, 1), pd, 2),
      tpu_emit_mul(b, tpu_emit_iota(b, &pt, 0), tpu_emit_const_like(b, &pt, (double)out_plane)));
  where = tpu_emit_reshape(b, where, pairs, 2);
  const int64_t total = planes * out_plane, zero = 0;
  tpu_hlo_type_t ot = tpu_hlo_type_make(out.dtype, 1, &total);
  tpu_hlo_value_t r = tpu_emit_scatter(b, tpu_emit_const_like(b, &ot, 0), where,
                                       tpu_emit_reshape(b, tpu_lower_tensor(ctx, 0), &flat, 1), NULL, 0,
                                       &zero, &zero, 1, NULL);
  tpu_lower_set_output(ctx, 0, tpu_emit_reshape(b, r, out.dims, out.rank));
  return NULL;
}


const tpu_lowering_t tpu_lowerings_pool[] = {
    {"max_pool2d_with_indices", lower_max_pool_with_indices, 0, 2},
    {"max_pool3d_with_indices", lower_max_pool_with_indices, 0, 3},
    {"max_pool2d_with_indices_backward", lower_max_pool_backward, 0, 2},
    {"max_pool3d_with_indices_backward", lower_max_pool_backward, 0, 3},
    {"adaptive_max_pool2d", lower_adaptive_max_pool, 0, 2},
    {"adaptive_max_pool3d", lower_adaptive_max_pool, 0, 3},
    {"adaptive_max_pool2d_backward", lower_max_pool_backward, 0, 2},
    {"adaptive_max_pool3d_backward", lower_max_pool_backward, 0, 3},
    {"avg_pool2d", lower_avg_pool, 0, 2},
    {"avg_pool3d", lower_avg_pool, 0, 3},
    {"avg_pool2d_backward", lower_avg_pool_backward, 0, 2},
    {"avg_pool3d_backward", lower_avg_pool_backward, 0, 3},
    {"_adaptive_avg_pool2d", lower_adaptive_avg_pool, 0, 2},
    {"_adaptive_avg_pool3d", lower_adaptive_avg_pool, 0, 3},
    {"_adaptive_avg_pool2d_backward", lower_adaptive_avg_pool_backward, 0, 2},
    {"_adaptive_avg_pool3d_backward", lower_adaptive_avg_pool_backward, 0, 3},
    {"max_unpool2d", lower_max_unpool, 0, 2},
    {"max_unpool3d", lower_max_unpool, 0, 3},
};
const size_t tpu_lowerings_pool_count = sizeof tpu_lowerings_pool / sizeof tpu_lowerings_pool[0];
