/* nn family of the lowering table: softmax / log_softmax, normalizations
 * (layer, group, batch), embedding backward, dropout, log_sigmoid and glu,
 * each with its backward. The losses are loss.c; what the two share is
 * nn_internal.h (half types compute in float32 and round once). */
#include <math.h>
#include <stdio.h>

#include "../hostrow.h"
#include "emit.h"
#include "lowering.h"
#include "nn_internal.h"

static int wrap_dim(int64_t d, int rank) {
  if (rank == 0) return 0;
  return (int)(d < 0 ? d + rank : d);
}

/* A value reduced over `dims` of `full`, put back to full's shape (the
 * reduced dims become size 1, then expand). */
static tpu_hlo_value_t expand_back(tpu_hlo_builder_t* b, tpu_hlo_value_t reduced,
                                   const tpu_hlo_type_t* full, const int64_t* dims, int n) {
  int64_t keep[TPU_HLO_MAX_RANK];
  for (int d = 0; d < full->rank; d++) {
    keep[d] = full->dims[d];
    for (int k = 0; k < n; k++)
      if (dims[k] == d) keep[d] = 1;
  }
  tpu_hlo_value_t r = tpu_emit_reshape(b, reduced, keep, full->rank);
  return tpu_emit_broadcast_to(b, r, full);
}

/* output_mask entry k (bool[3]); absent = true. */
static bool mask_at(tpu_lower_ctx_t* ctx, int i, int k) {
  const tpu_lower_arg_t* a = tpu_lower_arg(ctx, i);
  if (a->kind == TPU_ARG_INTS && k < a->num_ints) return a->ints[k] != 0;
  return true;
}

/* Sets gradient i of a (dx, dweight, dbias) backward. With all three
 * outputs, one that output_mask leaves out gets zeros; with fewer (an
 * engine that drops PyTorch's undefined outputs), the outputs are the
 * requested gradients in order. */
static void set_grad(tpu_lower_ctx_t* ctx, int mask_arg, int i, tpu_hlo_value_t v) {
  if (tpu_lower_num_outputs(ctx) < 3) {
    if (!mask_at(ctx, mask_arg, i)) return;
    int o = 0;
    for (int k = 0; k < i; k++) o += mask_at(ctx, mask_arg, k);
    set_out(ctx, o, v);
    return;
  }
  if (mask_at(ctx, mask_arg, i)) {
    set_out(ctx, i, v);
    return;
  }
  tpu_hlo_type_t out = tpu_lower_output_type(ctx, i);
  if (out.dtype != TPU_DTYPE_INVALID)
    tpu_lower_set_output(ctx, i, tpu_emit_const_like(tpu_lower_builder(ctx), &out, 0));
}

/* Dropped outputs can only be mapped back with a known output_mask. */
static bool grads_mappable(tpu_lower_ctx_t* ctx, int mask_arg) {
  return tpu_lower_num_outputs(ctx) >= 3 || tpu_lower_arg(ctx, mask_arg)->kind == TPU_ARG_INTS;
}

/* ---- softmax / log_softmax ---- */

/* Rank-0 tensors are treated as [1] (softmax over one element). */
static tpu_hlo_value_t at_least_1d(tpu_hlo_builder_t* b, tpu_hlo_value_t v) {
  if (type_of(b, v).rank > 0) return v;
  int64_t one = 1;
  return tpu_emit_reshape(b, v, &one, 1);
}

/* The stable softmax's parts along dim d of x: the max m and the sum s of
 * exp(x - m) (reduced shapes), x - m and exp(x - m). */
typedef struct {
  tpu_hlo_value_t m, shifted, e, s;
} softmax_parts_t;

static softmax_parts_t softmax_parts(tpu_hlo_builder_t* b, tpu_hlo_value_t x, int64_t d) {
  tpu_hlo_type_t xt = type_of(b, x);
  softmax_parts_t p;
  p.m = reduce_with(b, x, &d, 1, "stablehlo.maximum", -INFINITY);
  p.shifted = tpu_emit_sub(b, x, expand_back(b, p.m, &xt, &d, 1));
  p.e = tpu_emit_unary(b, "stablehlo.exponential", p.shifted);
  p.s = sum_dims(b, p.e, &d, 1);
  return p;
}

/* The attribute marking the op that gives `word` (a kind of the CPU
 * plugin's host kernels, core/hostrow.h) of operands v[0..n) over their
 * last dim d, naming them; NULL (no mark) when d is not the last dim. */
static const char* row_mark(tpu_hlo_builder_t* b, const char* word, const tpu_hlo_value_t* v,
                            int n, int64_t d, char* buf, size_t cap) {
  if (d != type_of(b, v[0]).rank - 1) return NULL;
  char names[2][32] = {"", ""};
  for (int i = 0; i < n && i < 2; i++) tpu_hlo_value_name(b, v[i], names[i], sizeof names[i]);
  snprintf(buf, cap, "mhlo.frontend_attributes = {torchtpu_row = \"%s %s%s%s\"}", word,
           names[0], n > 1 ? " " : "", names[1]);
  return buf;
}

/* exp(x - m) / s as exp(x - m) * (1 / s), as PyTorch's CPU kernel does: one
 * divide a row instead of one an element (a vector divide costs ~10x a
 * multiply; 128x512 strict 81 -> 62 us). log_softmax takes log(s) on the
 * row, not on s broadcast. `mark`: the result's attributes, or NULL. */
static tpu_hlo_value_t softmax_of(tpu_hlo_builder_t* b, const softmax_parts_t* p, int64_t d,
                                  const char* mark) {
  tpu_hlo_type_t xt = type_of(b, p->e);
  tpu_hlo_value_t inv = tpu_emit_div(b, tpu_emit_splat(b, p->s, 1.0), p->s);
  tpu_hlo_value_t operands[2] = {p->e, expand_back(b, inv, &xt, &d, 1)};
  return tpu_hlo_op(b, "stablehlo.multiply", operands, 2, xt, mark);
}

/* _softmax / _log_softmax(self, dim, half_to_float), the data word telling
 * log: stable form exp(x - max) / sum, in float32 for halves. */
static tpu_status_t lower_softmax(tpu_lower_ctx_t* ctx) {
  bool log = tpu_lower_data(ctx);
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  if (!floating_out(ctx)) return tpu_lower_decline(ctx, "non-floating softmax");
  tpu_hlo_value_t x = at_least_1d(b, acc_tensor(ctx, 0));
  int64_t d = wrap_dim(int_arg(ctx, 1, -1), tpu_lower_arg(ctx, 0)->type.rank);
  softmax_parts_t p = softmax_parts(b, x, d);
  tpu_hlo_type_t xt = type_of(b, x);
  char buf[96];
  tpu_hostrow_kind_t kind = log ? TPU_HOSTROW_LOG_SOFTMAX : TPU_HOSTROW_SOFTMAX;
  const char* mark = row_mark(b, tpu_hostrow_kind_name(kind), &x, 1, d, buf, sizeof buf);
  tpu_hlo_value_t r;
  if (log) {
    tpu_hlo_value_t operands[2] = {
        p.shifted, expand_back(b, tpu_emit_unary(b, "stablehlo.log", p.s), &xt, &d, 1)};
    r = tpu_hlo_op(b, "stablehlo.subtract", operands, 2, xt, mark);
  } else {
    r = softmax_of(b, &p, d, mark);
  }
  set_out(ctx, 0, r);
  return NULL;
}

/* _safe_softmax(self, dim, dtype): softmax, except that a row with every
 * element -inf (a fully masked attention row) is zeros, not NaN. PyTorch's
 * composite tests the input (eq -inf, all over the row, where); the row's
 * max is -inf exactly then, so the test is on the max XLA computes anyway:
 * one op and no extra pass over the scores. Computed in the output dtype's
 * accumulation type (dtype= converts first, as softmax does). */
static tpu_status_t lower_safe_softmax(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  if (!floating_out(ctx)) return tpu_lower_decline(ctx, "non-floating softmax");
  tpu_dtype_t acc = acc_dtype(tpu_lower_output_type(ctx, 0).dtype);
  tpu_hlo_value_t x = at_least_1d(b, tpu_emit_convert(b, tpu_lower_tensor(ctx, 0), acc));
  tpu_hlo_type_t xt = type_of(b, x);
  int64_t d = wrap_dim(int_arg(ctx, 1, -1), tpu_lower_arg(ctx, 0)->type.rank);
  softmax_parts_t p = softmax_parts(b, x, d);
  tpu_hlo_value_t masked = tpu_emit_compare(b, "EQ", p.m, tpu_emit_splat(b, p.m, -INFINITY));
  tpu_hlo_value_t r = softmax_of(b, &p, d, NULL);
  tpu_hlo_value_t all_masked = expand_back(b, masked, &xt, &d, 1);
  char buf[96];
  tpu_hlo_value_t operands[3] = {all_masked, tpu_emit_splat(b, r, 0), r};
  set_out(ctx, 0, tpu_hlo_op(b, "stablehlo.select", operands, 3, xt,
                             row_mark(b, tpu_hostrow_kind_name(TPU_HOSTROW_SAFE_SOFTMAX), &x, 1,
                                      d, buf, sizeof buf)));
  return NULL;
}

/* _softmax_backward_data(grad, output, dim, input_dtype):
 * y * (g - sum(g * y)); log form (data word): g - exp(y) * sum(g). */
static tpu_status_t lower_softmax_bwd(tpu_lower_ctx_t* ctx) {
  bool log = tpu_lower_data(ctx);
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  if (!floating_out(ctx)) return tpu_lower_decline(ctx, "non-floating softmax backward");
  tpu_hlo_value_t g = at_least_1d(b, acc_tensor(ctx, 0));
  tpu_hlo_value_t y = at_least_1d(b, acc_tensor(ctx, 1));
  tpu_hlo_type_t t = type_of(b, g);
  int64_t d = wrap_dim(int_arg(ctx, 2, -1), tpu_lower_arg(ctx, 0)->type.rank);
  tpu_hlo_value_t r;
  char buf[128];
  const char* mark = row_mark(b, log ? "log_softmax_bwd" : "softmax_bwd",
                              (tpu_hlo_value_t[]){g, y}, 2, d, buf, sizeof buf);
  if (log) {
    tpu_hlo_value_t s = expand_back(b, sum_dims(b, g, &d, 1), &t, &d, 1);
    tpu_hlo_value_t e = tpu_emit_mul(b, tpu_emit_unary(b, "stablehlo.exponential", y), s);
    r = tpu_hlo_op(b, "stablehlo.subtract", (tpu_hlo_value_t[]){g, e}, 2, t, mark);
  } else {
    tpu_hlo_value_t s = expand_back(b, sum_dims(b, tpu_emit_mul(b, g, y), &d, 1), &t, &d, 1);
    r = tpu_hlo_op(b, "stablehlo.multiply", (tpu_hlo_value_t[]){y, tpu_emit_sub(b, g, s)}, 2, t,
                   mark);
  }
  set_out(ctx, 0, r);
  return NULL;
}

/* ---- normalizations ---- */

/* Mean and biased variance over `dims`; returns centered x, sets *mean and
 * *rstd (reduced shapes). */
static tpu_hlo_value_t moments(tpu_hlo_builder_t* b, tpu_hlo_value_t x, const int64_t* dims,
                               int n, double eps, tpu_hlo_value_t* mean, tpu_hlo_value_t* var,
                               tpu_hlo_value_t* rstd) {
  tpu_hlo_type_t t = type_of(b, x);
  double count = 1;
  for (int k = 0; k < n; k++) count *= (double)t.dims[dims[k]];
  tpu_hlo_value_t s = sum_dims(b, x, dims, n);
  *mean = tpu_emit_div(b, s, tpu_emit_splat(b, s, count));
  tpu_hlo_value_t xc = tpu_emit_sub(b, x, expand_back(b, *mean, &t, dims, n));
  tpu_hlo_value_t ss = sum_dims(b, tpu_emit_mul(b, xc, xc), dims, n);
  *var = tpu_emit_div(b, ss, tpu_emit_splat(b, ss, count));
  *rstd = tpu_emit_unary(b, "stablehlo.rsqrt", tpu_emit_add(b, *var, tpu_emit_splat(b, *var, eps)));
  return xc;
}

/* sqrt(var + eps): normalizations divide by it rather than multiply by
 * rstd, on purpose. XLA:CPU fuses cheap elementwise producers into every
 * consumer, so in a chain of normalizations (a deferred run, a compiled
 * graph) each one's scale-and-shift was recomputed inside the next one's
 * reductions and outputs, and those again in the next: quadratic work (a
 * deferred chain of 50 layer_norms took 2.5x strict's time). A divide is
 * expensive to XLA's fusion heuristics, so the normalized value is
 * computed once and read. */
static tpu_hlo_value_t stddev(tpu_hlo_builder_t* b, tpu_hlo_value_t var, double eps) {
  return tpu_emit_unary(b, "stablehlo.sqrt", tpu_emit_add(b, var, tpu_emit_splat(b, var, eps)));
}

/* The attribute marking native_layer_norm's last result for the CPU
 * plugin's host kernel (core/hostrow.h), or NULL: float32 input (after the
 * accumulation convert), weight and bias float32 when present, no bias
 * without a weight. y and mean are the other results' values. */
static const char* layer_norm_mark(tpu_lower_ctx_t* ctx, tpu_hlo_value_t x, int k, double eps,
                                   tpu_hlo_value_t y, tpu_hlo_value_t mean, char* buf,
                                   size_t cap) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  char names[5][32] = {"-", "-", "-", "-", "-"};
  tpu_hlo_value_name(b, x, names[0], sizeof names[0]);
  for (int i = 0; i < 2; i++) {
    if (!is_tensor(ctx, 2 + i)) continue;
    tpu_hlo_value_t v = tpu_lower_tensor(ctx, 2 + i);
    if (type_of(b, v).dtype != TPU_DTYPE_FLOAT32) return NULL;
    tpu_hlo_value_name(b, v, names[1 + i], sizeof names[1 + i]);
  }
  tpu_hlo_value_name(b, y, names[3], sizeof names[3]);
  tpu_hlo_value_name(b, mean, names[4], sizeof names[4]);
  if (type_of(b, x).dtype != TPU_DTYPE_FLOAT32 || (names[1][0] == '-' && names[2][0] != '-'))
    return NULL;
  snprintf(buf, cap,
           "mhlo.frontend_attributes = {torchtpu_row = \"layer_norm %s %s %s %d %.9g %s %s\"}",
           names[0], names[1], names[2], k, eps, names[3], names[4]);
  return buf;
}

/* v as a new value of the same type: a reshape XLA folds away. */
static tpu_hlo_value_t same(tpu_hlo_builder_t* b, tpu_hlo_value_t v, const char* attrs) {
  return tpu_hlo_op(b, "stablehlo.reshape", &v, 1, type_of(b, v), attrs);
}

/* native_layer_norm(input, normalized_shape, weight?, bias?, eps)
 * -> (out, mean, rstd); mean / rstd keep the normalized dims as size 1. */
static tpu_status_t lower_layer_norm(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  if (!floating_out(ctx)) return tpu_lower_decline(ctx, "non-floating layer_norm");
  tpu_hlo_value_t x = acc_tensor(ctx, 0);
  tpu_hlo_type_t xt = type_of(b, x);
  int k = tpu_lower_arg(ctx, 1)->num_ints, axis = xt.rank - k;
  if (axis < 0) return tpu_lower_decline(ctx, "normalized_shape longer than input");
  int64_t dims[TPU_HLO_MAX_RANK];
  for (int i = 0; i < k; i++) dims[i] = axis + i;
  tpu_hlo_value_t mean, var, rstd;
  double eps = float_arg(ctx, 4, 1e-5);
  tpu_hlo_value_t xc = moments(b, x, dims, k, eps, &mean, &var, &rstd);
  tpu_hlo_value_t y = tpu_emit_div(b, xc, expand_back(b, stddev(b, var, eps), &xt, dims, k));
  if (is_tensor(ctx, 2)) y = tpu_emit_mul(b, y, tpu_emit_cast_to(b, tpu_lower_tensor(ctx, 2), &xt));
  if (is_tensor(ctx, 3)) y = tpu_emit_add(b, y, tpu_emit_cast_to(b, tpu_lower_tensor(ctx, 3), &xt));
  /* The three results named last, in this order, for the host kernel's
   * rewrite: its call defines them where the mark is. */
  mean = same(b, mean, NULL);
  char buf[224];
  rstd = same(b, rstd, layer_norm_mark(ctx, x, k, eps, y, mean, buf, sizeof buf));
  set_out(ctx, 0, y);
  set_out(ctx, 1, mean);
  set_out(ctx, 2, rstd);
  return NULL;
}

/* dx of a normalization over `dims` given gw = grad * weight and xhat:
 * rstd * (gw - mean(gw) - xhat * mean(gw * xhat)). */
static tpu_hlo_value_t norm_dx(tpu_hlo_builder_t* b, tpu_hlo_value_t gw, tpu_hlo_value_t xhat,
                               tpu_hlo_value_t rstd_full, const int64_t* dims, int n) {
  tpu_hlo_type_t t = type_of(b, gw);
  double count = 1;
  for (int k = 0; k < n; k++) count *= (double)t.dims[dims[k]];
  tpu_hlo_value_t a = sum_dims(b, gw, dims, n);
  a = expand_back(b, tpu_emit_div(b, a, tpu_emit_splat(b, a, count)), &t, dims, n);
  tpu_hlo_value_t c = sum_dims(b, tpu_emit_mul(b, gw, xhat), dims, n);
  c = expand_back(b, tpu_emit_div(b, c, tpu_emit_splat(b, c, count)), &t, dims, n);
  return tpu_emit_mul(b, rstd_full, tpu_emit_sub(b, tpu_emit_sub(b, gw, a), tpu_emit_mul(b, xhat, c)));
}

/* v's elements as a [rows] value, always a line of its own (the rewrite
 * reads its type there). */
static tpu_hlo_value_t rows_of(tpu_hlo_builder_t* b, tpu_hlo_value_t v, int64_t rows) {
  tpu_hlo_type_t t = type_of(b, v);
  t.rank = 1;
  t.dims[0] = rows;
  return tpu_hlo_op(b, "stablehlo.reshape", &v, 1, t, NULL);
}

/* Names the gradients (dx, dw, db) by identities, the last marked for the
 * CPU plugin's host kernel (core/hostnorm.h), when the operands are
 * float32 (after the accumulation convert), mean and rstd (as the
 * op's arguments, not broadcast) one a row and the weight of the
 * normalized shape. */
static void layer_norm_bwd_mark(tpu_lower_ctx_t* ctx, tpu_hlo_value_t g, tpu_hlo_value_t x,
                                tpu_hlo_value_t mean, tpu_hlo_value_t rstd,
                                const tpu_hlo_value_t* w, int k, tpu_hlo_value_t* grads) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_type_t xt = type_of(b, x), gt = type_of(b, grads[2]);
  int64_t n = tpu_hlo_type_numel(&gt), total = tpu_hlo_type_numel(&xt);
  if (xt.dtype != TPU_DTYPE_FLOAT32 || type_of(b, g).dtype != TPU_DTYPE_FLOAT32 || n < 1 ||
      total % n || gt.rank != k)
    return;
  tpu_hlo_type_t mt = type_of(b, mean), rt = type_of(b, rstd);
  if (tpu_hlo_type_numel(&mt) != total / n || tpu_hlo_type_numel(&rt) != total / n) return;
  tpu_hlo_value_t wf = {0};
  if (w) {
    wf = tpu_emit_convert(b, *w, TPU_DTYPE_FLOAT32);
    tpu_hlo_type_t wt = type_of(b, wf);
    if (!tpu_hlo_type_equal(&wt, &gt)) return;
  }
  mean = tpu_emit_convert(b, mean, TPU_DTYPE_FLOAT32);
  rstd = tpu_emit_convert(b, rstd, TPU_DTYPE_FLOAT32);
  char names[7][32];
  tpu_hlo_value_t m = rows_of(b, mean, total / n), r = rows_of(b, rstd, total / n);
  grads[0] = same(b, grads[0], NULL);
  grads[1] = same(b, grads[1], NULL);
  tpu_hlo_value_t v[7] = {g, x, m, r, w ? wf : g, grads[0], grads[1]};
  for (int i = 0; i < 7; i++) tpu_hlo_value_name(b, v[i], names[i], sizeof names[i]);
  if (!w) snprintf(names[4], sizeof names[4], "-");
  char buf[320];
  snprintf(buf, sizeof buf,
           "mhlo.frontend_attributes = {torchtpu_norm = \"layer_norm_bwd %s %s %s %s %s %s %s\"}",
           names[0], names[1], names[2], names[3], names[4], names[5], names[6]);
  grads[2] = same(b, grads[2], buf);
}

/* native_layer_norm_backward(grad_out, input, normalized_shape, mean, rstd,
 * weight?, bias?, output_mask) -> (dx, dweight, dbias). */
static tpu_status_t lower_layer_norm_bwd(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  if (!floating_out(ctx)) return tpu_lower_decline(ctx, "non-floating layer_norm");
  if (!grads_mappable(ctx, 7)) return tpu_lower_decline(ctx, "output_mask unknown");
  tpu_hlo_value_t g = acc_tensor(ctx, 0), x = acc_tensor(ctx, 1);
  tpu_hlo_type_t xt = type_of(b, x);
  int k = tpu_lower_arg(ctx, 2)->num_ints, axis = xt.rank - k;
  if (axis < 0) return tpu_lower_decline(ctx, "normalized_shape longer than input");
  int64_t dims[TPU_HLO_MAX_RANK], outer[TPU_HLO_MAX_RANK];
  for (int i = 0; i < k; i++) dims[i] = axis + i;
  for (int i = 0; i < axis; i++) outer[i] = i;
  /* mean / rstd: outer dims then size-1 normalized dims (same rank). */
  tpu_hlo_value_t mean = tpu_emit_cast_to(b, tpu_lower_tensor(ctx, 3), &xt);
  tpu_hlo_value_t rstd = tpu_emit_cast_to(b, tpu_lower_tensor(ctx, 4), &xt);
  tpu_hlo_value_t xhat = tpu_emit_mul(b, tpu_emit_sub(b, x, mean), rstd);
  tpu_hlo_value_t gw = g, w = {0};
  if (is_tensor(ctx, 5)) {
    w = tpu_lower_tensor(ctx, 5);
    gw = tpu_emit_mul(b, g, tpu_emit_cast_to(b, w, &xt));
  }
  tpu_hlo_value_t grads[3] = {norm_dx(b, gw, xhat, rstd, dims, k),
                              sum_dims(b, tpu_emit_mul(b, g, xhat), outer, axis),
                              sum_dims(b, g, outer, axis)};
  layer_norm_bwd_mark(ctx, g, x, tpu_lower_tensor(ctx, 3), tpu_lower_tensor(ctx, 4),
                      is_tensor(ctx, 5) ? &w : NULL, k, grads);
  for (int i = 0; i < 3; i++) set_grad(ctx, 7, i, grads[i]);
  return NULL;
}

/* native_group_norm(input, weight?, bias?, N, C, HxW, group, eps)
 * -> (out, mean [N, G], rstd [N, G]). */
static tpu_status_t lower_group_norm(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  if (!floating_out(ctx)) return tpu_lower_decline(ctx, "non-floating group_norm");
  int64_t n = int_arg(ctx, 3, 0), c = int_arg(ctx, 4, 0), hw = int_arg(ctx, 5, 0);
  int64_t g = int_arg(ctx, 6, 1);
  if (g <= 0 || c % g != 0) return tpu_lower_decline(ctx, "channels not divisible by groups");
  tpu_hlo_value_t x = acc_tensor(ctx, 0);
  int64_t grouped[3] = {n, g, c / g * hw}, chw[3] = {n, c, hw}, last = 2;
  tpu_hlo_value_t xg = tpu_emit_reshape(b, x, grouped, 3);
  tpu_hlo_type_t gt = type_of(b, xg);
  tpu_hlo_value_t mean, var, rstd;
  double eps = float_arg(ctx, 7, 1e-5);
  tpu_hlo_value_t xc = moments(b, xg, &last, 1, eps, &mean, &var, &rstd);
  tpu_hlo_value_t sd = expand_back(b, stddev(b, var, eps), &gt, &last, 1);
  tpu_hlo_value_t y = tpu_emit_reshape(b, tpu_emit_div(b, xc, sd), chw, 3);
  tpu_hlo_type_t yt = type_of(b, y);
  if (is_tensor(ctx, 1))
    y = tpu_emit_mul(b, y, along(b, tpu_emit_convert(b, tpu_lower_tensor(ctx, 1), yt.dtype), &yt, 1));
  if (is_tensor(ctx, 2))
    y = tpu_emit_add(b, y, along(b, tpu_emit_convert(b, tpu_lower_tensor(ctx, 2), yt.dtype), &yt, 1));
  set_out(ctx, 0, y);
  set_out(ctx, 1, mean);
  set_out(ctx, 2, rstd);
  return NULL;
}

/* native_group_norm_backward(grad_out, input, mean, rstd, weight?, N, C,
 * HxW, group, output_mask) -> (dx, dweight [C], dbias [C]). */
static tpu_status_t lower_group_norm_bwd(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  if (!floating_out(ctx)) return tpu_lower_decline(ctx, "non-floating group_norm");
  if (!grads_mappable(ctx, 9)) return tpu_lower_decline(ctx, "output_mask unknown");
  int64_t n = int_arg(ctx, 5, 0), c = int_arg(ctx, 6, 0), hw = int_arg(ctx, 7, 0);
  int64_t g = int_arg(ctx, 8, 1);
  if (g <= 0 || c % g != 0) return tpu_lower_decline(ctx, "channels not divisible by groups");
  int64_t chw[3] = {n, c, hw}, grouped[3] = {n, g, c / g * hw}, ng1[3] = {n, g, 1};
  int64_t last = 2, nhw[2] = {0, 2};
  tpu_hlo_value_t g3 = tpu_emit_reshape(b, acc_tensor(ctx, 0), chw, 3);
  tpu_hlo_value_t x = tpu_emit_reshape(b, acc_tensor(ctx, 1), grouped, 3);
  tpu_hlo_type_t gt = type_of(b, x), ct = type_of(b, g3);
  tpu_hlo_value_t mean = tpu_emit_reshape(b, tpu_emit_convert(b, tpu_lower_tensor(ctx, 2), gt.dtype), ng1, 3);
  tpu_hlo_value_t rstd = tpu_emit_reshape(b, tpu_emit_convert(b, tpu_lower_tensor(ctx, 3), gt.dtype), ng1, 3);
  mean = tpu_emit_broadcast_to(b, mean, &gt);
  rstd = tpu_emit_broadcast_to(b, rstd, &gt);
  tpu_hlo_value_t xhat = tpu_emit_mul(b, tpu_emit_sub(b, x, mean), rstd);
  tpu_hlo_value_t gw = g3;
  if (is_tensor(ctx, 4))
    gw = tpu_emit_mul(b, g3, along(b, tpu_emit_convert(b, tpu_lower_tensor(ctx, 4), ct.dtype), &ct, 1));
  gw = tpu_emit_reshape(b, gw, grouped, 3);
  set_grad(ctx, 9, 0, norm_dx(b, gw, xhat, rstd, &last, 1));
  tpu_hlo_value_t xhat3 = tpu_emit_reshape(b, xhat, chw, 3);
  set_grad(ctx, 9, 1, sum_dims(b, tpu_emit_mul(b, g3, xhat3), nhw, 2));
  set_grad(ctx, 9, 2, sum_dims(b, g3, nhw, 2));
  return NULL;
}

/* Batch norm over every dim but 1 (channels). rm / rv: argument indices of
 * running_mean / running_var (-1: none). Outputs (out, save_mean,
 * save_invstd[, running_mean_out, running_var_out]). */
static tpu_status_t batch_norm(tpu_lower_ctx_t* ctx, int rm, int rv, bool training,
                               double momentum, double eps) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  if (!floating_out(ctx)) return tpu_lower_decline(ctx, "non-floating batch_norm");
  tpu_hlo_value_t x = acc_tensor(ctx, 0);
  tpu_hlo_type_t xt = type_of(b, x);
  if (xt.rank < 2) return tpu_lower_decline(ctx, "batch_norm input of rank < 2");
  bool stats = rm >= 0 && is_tensor(ctx, rm) && is_tensor(ctx, rv);
  bool stats_out = tpu_lower_num_outputs(ctx) >= 5;
  int64_t dims[TPU_HLO_MAX_RANK];
  int n = 0;
  for (int d = 0; d < xt.rank; d++)
    if (d != 1) dims[n++] = d;
  tpu_hlo_value_t mean, var, invstd, xc;
  if (training) {
    /* The running-stat update is a write to arguments that are not
     * outputs; only the functional form returns them. */
    if (stats && !stats_out)
      return tpu_lower_decline(ctx, "running-stat update needs the stats as outputs");
    xc = moments(b, x, dims, n, eps, &mean, &var, &invstd);
  } else {
    if (!stats) return tpu_lower_decline(ctx, "evaluation without running stats");
    mean = tpu_emit_convert(b, tpu_lower_tensor(ctx, rm), xt.dtype);
    var = tpu_emit_convert(b, tpu_lower_tensor(ctx, rv), xt.dtype);
    invstd = tpu_emit_unary(b, "stablehlo.rsqrt", tpu_emit_add(b, var, tpu_emit_splat(b, var, eps)));
    xc = tpu_emit_sub(b, x, along(b, mean, &xt, 1));
  }
  tpu_hlo_value_t y = tpu_emit_div(b, xc, along(b, stddev(b, var, eps), &xt, 1));
  if (is_tensor(ctx, 1))
    y = tpu_emit_mul(b, y, along(b, tpu_emit_convert(b, tpu_lower_tensor(ctx, 1), xt.dtype), &xt, 1));
  if (is_tensor(ctx, 2))
    y = tpu_emit_add(b, y, along(b, tpu_emit_convert(b, tpu_lower_tensor(ctx, 2), xt.dtype), &xt, 1));
  set_out(ctx, 0, y);
  set_out(ctx, 1, mean);
  set_out(ctx, 2, invstd);
  if (stats_out) {
    if (!stats) return tpu_lower_decline(ctx, "functional batch_norm without running stats");
    tpu_hlo_value_t new_rm = tpu_lower_tensor(ctx, rm), new_rv = tpu_lower_tensor(ctx, rv);
    if (training) {
      /* running = (1 - momentum) * running + momentum * batch stat, with the
       * unbiased variance. */
      double count = (double)(numel(&xt) / xt.dims[1]);
      double unbias = count > 1 ? count / (count - 1) : INFINITY;
      tpu_hlo_value_t m0 = tpu_emit_convert(b, new_rm, xt.dtype);
      tpu_hlo_value_t v0 = tpu_emit_convert(b, new_rv, xt.dtype);
      new_rm = tpu_emit_add(b, mul_c(b, m0, 1 - momentum), mul_c(b, mean, momentum));
      new_rv = tpu_emit_add(b, mul_c(b, v0, 1 - momentum), mul_c(b, mul_c(b, var, unbias), momentum));
    }
    set_out(ctx, 3, new_rm);
    set_out(ctx, 4, new_rv);
  }
  return NULL;
}

/* native_batch_norm / _native_batch_norm_legit(_functional)(input, weight?,
 * bias?, running_mean?, running_var?, training, momentum, eps); the
 * no_stats overload drops the two running stats. */
static tpu_status_t lower_native_batch_norm(tpu_lower_ctx_t* ctx) {
  if (tpu_lower_arg(ctx, 3)->kind == TPU_ARG_BOOL)
    return batch_norm(ctx, -1, -1, int_arg(ctx, 3, 1) != 0, float_arg(ctx, 4, 0.1),
                      float_arg(ctx, 5, 1e-5));
  return batch_norm(ctx, 3, 4, int_arg(ctx, 5, 1) != 0, float_arg(ctx, 6, 0.1),
                    float_arg(ctx, 7, 1e-5));
}

/* _native_batch_norm_legit_no_training(input, weight?, bias?, running_mean,
 * running_var, momentum, eps). */
static tpu_status_t lower_batch_norm_no_training(tpu_lower_ctx_t* ctx) {
  return batch_norm(ctx, 3, 4, false, float_arg(ctx, 5, 0.1), float_arg(ctx, 6, 1e-5));
}

/* native_batch_norm_backward(grad_out, input, weight?, running_mean?,
 * running_var?, save_mean?, save_invstd?, train, eps, output_mask); also
 * batch_norm_backward, whose arguments match up to output_mask (its
 * save_var is the saved invstd, as on CPU). */
static tpu_status_t lower_batch_norm_bwd(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  if (!floating_out(ctx)) return tpu_lower_decline(ctx, "non-floating batch_norm");
  if (!grads_mappable(ctx, 9)) return tpu_lower_decline(ctx, "output_mask unknown");
  tpu_hlo_value_t g = acc_tensor(ctx, 0), x = acc_tensor(ctx, 1);
  tpu_hlo_type_t xt = type_of(b, x);
  if (xt.rank < 2) return tpu_lower_decline(ctx, "batch_norm input of rank < 2");
  bool train = int_arg(ctx, 7, 1) != 0;
  double eps = float_arg(ctx, 8, 1e-5);
  tpu_hlo_value_t mean, invstd;
  if (train) {
    if (!is_tensor(ctx, 5) || !is_tensor(ctx, 6))
      return tpu_lower_decline(ctx, "training backward without saved stats");
    mean = tpu_emit_convert(b, tpu_lower_tensor(ctx, 5), xt.dtype);
    invstd = tpu_emit_convert(b, tpu_lower_tensor(ctx, 6), xt.dtype);
  } else {
    if (!is_tensor(ctx, 3) || !is_tensor(ctx, 4))
      return tpu_lower_decline(ctx, "evaluation backward without running stats");
    mean = tpu_emit_convert(b, tpu_lower_tensor(ctx, 3), xt.dtype);
    tpu_hlo_value_t var = tpu_emit_convert(b, tpu_lower_tensor(ctx, 4), xt.dtype);
    invstd = tpu_emit_unary(b, "stablehlo.rsqrt", tpu_emit_add(b, var, tpu_emit_splat(b, var, eps)));
  }
  int64_t dims[TPU_HLO_MAX_RANK];
  int n = 0;
  for (int d = 0; d < xt.rank; d++)
    if (d != 1) dims[n++] = d;
  tpu_hlo_value_t xhat = tpu_emit_mul(b, tpu_emit_sub(b, x, along(b, mean, &xt, 1)), along(b, invstd, &xt, 1));
  tpu_hlo_value_t dbias = sum_dims(b, g, dims, n);
  tpu_hlo_value_t dweight = sum_dims(b, tpu_emit_mul(b, g, xhat), dims, n);
  tpu_hlo_value_t scale = invstd;
  if (is_tensor(ctx, 2))
    scale = tpu_emit_mul(b, scale, tpu_emit_convert(b, tpu_lower_tensor(ctx, 2), xt.dtype));
  tpu_hlo_value_t dx;
  if (train) {
    double count = (double)(numel(&xt) / xt.dims[1]);
    tpu_hlo_value_t mb = along(b, mul_c(b, dbias, 1 / count), &xt, 1);
    tpu_hlo_value_t mw = along(b, mul_c(b, dweight, 1 / count), &xt, 1);
    dx = tpu_emit_mul(b, along(b, scale, &xt, 1), tpu_emit_sub(b, tpu_emit_sub(b, g, mb), tpu_emit_mul(b, xhat, mw)));
  } else {
    dx = tpu_emit_mul(b, g, along(b, scale, &xt, 1));
  }
  set_grad(ctx, 9, 0, dx);
  set_grad(ctx, 9, 1, dweight);
  set_grad(ctx, 9, 2, dbias);
  return NULL;
}

/* ---- embedding backward ---- */

/* Adds rows of `updates` [K, D] (or elements, [K]) into `operand` at the
 * row indices `idx` [K, 1]. */
static tpu_hlo_value_t scatter_add_rows(tpu_hlo_builder_t* b, tpu_hlo_value_t operand,
                                        tpu_hlo_value_t idx, tpu_hlo_value_t updates) {
  const int64_t zero = 0, one = 1;
  return tpu_emit_scatter(b, operand, idx, updates, &one, type_of(b, operand).rank - 1, &zero, &zero,
                          1, "stablehlo.add");
}

/* embedding_dense_backward(grad_output, indices, num_weights, padding_idx,
 * scale_grad_by_freq): scatter-add of grad rows by index; the padding row
 * gets nothing; with scale_grad_by_freq each row is divided by its index
 * count. */
static tpu_status_t lower_embedding_bwd(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_type_t out = tpu_lower_output_type(ctx, 0);
  if (!tpu_dtype_is_floating(out.dtype) || out.rank != 2)
    return tpu_lower_decline(ctx, "non-floating embedding grad");
  tpu_hlo_value_t g = acc_tensor(ctx, 0);
  tpu_hlo_type_t it = tpu_lower_arg(ctx, 1)->type;
  int64_t k = numel(&it), d = out.dims[1];
  int64_t kd[2] = {k, d}, k1[2] = {k, 1};
  int64_t pad = int_arg(ctx, 3, -1);
  g = tpu_emit_reshape(b, g, kd, 2);
  tpu_hlo_value_t idx = tpu_emit_reshape(
      b, tpu_emit_convert(b, tpu_lower_tensor(ctx, 1), TPU_DTYPE_INT64), k1, 2);
  tpu_hlo_type_t gt = type_of(b, g);
  if (pad >= 0) {
    tpu_hlo_value_t keep = tpu_emit_compare(b, "NE", idx, tpu_emit_splat(b, idx, (double)pad));
    g = tpu_emit_select(b, tpu_emit_broadcast_to(b, keep, &gt), g, tpu_emit_splat(b, g, 0));
  }
  tpu_hlo_type_t acc_out = out;
  acc_out.dtype = gt.dtype;
  tpu_hlo_value_t r = scatter_add_rows(b, tpu_emit_const_like(b, &acc_out, 0), idx, g);
  if (int_arg(ctx, 4, 0)) {
    tpu_hlo_type_t cnt_t = tpu_hlo_type_make(gt.dtype, 1, &out.dims[0]);
    tpu_hlo_type_t ones_t = tpu_hlo_type_make(gt.dtype, 1, &k);
    tpu_hlo_value_t counts = scatter_add_rows(b, tpu_emit_const_like(b, &cnt_t, 0), idx,
                                              tpu_emit_const_like(b, &ones_t, 1));
    counts = tpu_emit_binary(b, "stablehlo.maximum", counts, tpu_emit_splat(b, counts, 1));
    r = tpu_emit_div(b, r, along(b, counts, &acc_out, 0));
  }
  set_out(ctx, 0, r);
  return NULL;
}

/* ---- dropout ---- */

/* native_dropout(input, p, train?) -> (output, mask): keeps an element with
 * probability 1 - p and scales kept ones by
 * 1 / (1 - p); train = False is the identity with an all-true mask. */
static tpu_status_t lower_native_dropout(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  if (!floating_out(ctx)) return tpu_lower_decline(ctx, "non-floating dropout");
  tpu_hlo_value_t x = tpu_lower_tensor(ctx, 0);
  tpu_hlo_type_t xt = type_of(b, x);
  const tpu_lower_arg_t* train = tpu_lower_arg(ctx, 2);
  double p = float_arg(ctx, 1, 0.5);
  tpu_hlo_type_t mt = xt;
  mt.dtype = TPU_DTYPE_BOOL;
  /* The random draw happens even when it is not needed, so the generator
   * advances the same way for every call of this op. */
  tpu_hlo_value_t bits = tpu_lower_random_bits(ctx, &xt, TPU_DTYPE_INT32);
  if (train->kind == TPU_ARG_BOOL && !train->i) {
    tpu_lower_set_output(ctx, 0, x);
    tpu_lower_set_output(ctx, 1, tpu_emit_const_like(b, &mt, 1));
    return NULL;
  }
  /* uniform in [0, 1) from 32 bits. Only a convert touches the bits: the
   * XLA CPU plugin types rng_bit_generator's i32 result as u32 inside, so
   * any binary op on it fails to compile, and the convert reads it as
   * unsigned; a signed reading is folded back by adding 2^32. */
  tpu_hlo_value_t u = tpu_emit_convert(b, bits, TPU_DTYPE_FLOAT32);
  tpu_hlo_value_t neg = tpu_emit_compare(b, "LT", u, tpu_emit_splat(b, u, 0));
  u = tpu_emit_select(b, neg, tpu_emit_add(b, u, tpu_emit_splat(b, u, 4294967296.0)), u);
  u = mul_c(b, u, 1.0 / 4294967296.0);
  tpu_hlo_value_t keep = p <= 0 ? tpu_emit_const_like(b, &mt, 1)
                                : tpu_emit_compare(b, "LT", u, tpu_emit_splat(b, u, 1.0 - p));
  tpu_dtype_t acc = acc_dtype(xt.dtype);
  tpu_hlo_value_t xa = tpu_emit_convert(b, x, acc);
  double scale = p >= 1 ? 0.0 : 1.0 / (1.0 - p);
  tpu_hlo_value_t y = tpu_emit_select(b, keep, mul_c(b, xa, scale), tpu_emit_splat(b, xa, 0));
  set_out(ctx, 0, y);
  tpu_lower_set_output(ctx, 1, keep);
  return NULL;
}

/* native_dropout_backward(grad_output, mask, scale): g * mask * scale,
 * the two broadcast to the result's shape as CPU's product does. */
static tpu_status_t lower_native_dropout_bwd(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  if (!floating_out(ctx)) return tpu_lower_decline(ctx, "non-floating dropout");
  tpu_hlo_value_t g = acc_tensor(ctx, 0);
  tpu_hlo_type_t gt = tpu_lower_output_type(ctx, 0);
  gt.dtype = type_of(b, g).dtype;
  g = tpu_emit_broadcast_to(b, g, &gt);
  tpu_hlo_value_t m = tpu_emit_cast_to(b, tpu_lower_tensor(ctx, 1), &gt);
  set_out(ctx, 0, tpu_emit_mul(b, g, mul_c(b, m, float_arg(ctx, 2, 1.0))));
  return NULL;
}

/* ---- log_sigmoid (F.logsigmoid, and binary_cross_entropy_with_logits'
 * decomposition) ---- */

/* log_sigmoid_forward(self) -> (output, buffer): output = min(x, 0) -
 * log1p(exp(-|x|)); buffer = exp(-|x|) as on CPU. */
static tpu_status_t lower_log_sigmoid(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  if (!floating_out(ctx)) return tpu_lower_decline(ctx, "non-floating log_sigmoid");
  tpu_hlo_value_t x = acc_tensor(ctx, 0);
  tpu_hlo_value_t z = tpu_emit_unary(
      b, "stablehlo.exponential",
      tpu_emit_unary(b, "stablehlo.negate", tpu_emit_unary(b, "stablehlo.abs", x)));
  tpu_hlo_value_t m = tpu_emit_binary(b, "stablehlo.minimum", x, tpu_emit_splat(b, x, 0));
  set_out(ctx, 0, tpu_emit_sub(b, m, tpu_emit_unary(b, "stablehlo.log_plus_one", z)));
  set_out(ctx, 1, z);
  return NULL;
}

/* log_sigmoid_backward(grad_output, self, buffer): g * (x < 0 ? 1 - z / (1 +
 * z) : z / (1 + z)) with z = exp(-|x|), recomputed (the buffer may be
 * empty where another backend produced it). */
static tpu_status_t lower_log_sigmoid_bwd(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  if (!floating_out(ctx)) return tpu_lower_decline(ctx, "non-floating log_sigmoid");
  tpu_hlo_value_t g = acc_tensor(ctx, 0), x = acc_tensor(ctx, 1);
  tpu_hlo_value_t z = tpu_emit_unary(
      b, "stablehlo.exponential",
      tpu_emit_unary(b, "stablehlo.negate", tpu_emit_unary(b, "stablehlo.abs", x)));
  tpu_hlo_value_t q = tpu_emit_div(b, z, tpu_emit_add(b, tpu_emit_splat(b, z, 1), z));
  tpu_hlo_value_t neg = tpu_emit_compare(b, "LT", x, tpu_emit_splat(b, x, 0));
  tpu_hlo_value_t d = tpu_emit_select(b, neg, tpu_emit_sub(b, tpu_emit_splat(b, q, 1), q), q);
  set_out(ctx, 0, tpu_emit_mul(b, g, d));
  return NULL;
}

/* ---- glu ---- */

/* The two halves of `v` along `dim`. */
static void halves(tpu_hlo_builder_t* b, tpu_hlo_value_t v, int dim, tpu_hlo_value_t* first,
                   tpu_hlo_value_t* second) {
  tpu_hlo_type_t t = type_of(b, v);
  int64_t start[TPU_HLO_MAX_RANK] = {0}, limit[TPU_HLO_MAX_RANK], stride[TPU_HLO_MAX_RANK];
  for (int d = 0; d < t.rank; d++) limit[d] = t.dims[d], stride[d] = 1;
  limit[dim] = t.dims[dim] / 2;
  *first = tpu_emit_slice(b, v, start, limit, stride);
  start[dim] = t.dims[dim] / 2;
  limit[dim] = t.dims[dim];
  *second = tpu_emit_slice(b, v, start, limit, stride);
}

/* glu(self, dim): a * sigmoid(b) over the two halves. */
static tpu_status_t lower_glu(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  if (!floating_out(ctx)) return tpu_lower_decline(ctx, "non-floating glu");
  tpu_hlo_value_t x = acc_tensor(ctx, 0), first, second;
  int dim = wrap_dim(int_arg(ctx, 1, -1), type_of(b, x).rank);
  halves(b, x, dim, &first, &second);
  set_out(ctx, 0, tpu_emit_mul(b, first, tpu_emit_unary(b, "stablehlo.logistic", second)));
  return NULL;
}

/* glu_backward(grad_output, self, dim): [g s, g a s (1 - s)] with s =
 * sigmoid(b), joined along dim. */
static tpu_status_t lower_glu_bwd(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  if (!floating_out(ctx)) return tpu_lower_decline(ctx, "non-floating glu");
  tpu_hlo_value_t g = acc_tensor(ctx, 0), x = acc_tensor(ctx, 1), first, second;
  tpu_hlo_type_t xt = type_of(b, x);
  int dim = wrap_dim(int_arg(ctx, 2, -1), xt.rank);
  halves(b, x, dim, &first, &second);
  tpu_hlo_value_t sg = tpu_emit_unary(b, "stablehlo.logistic", second);
  tpu_hlo_value_t ga = tpu_emit_mul(b, g, sg);
  tpu_hlo_value_t gb = tpu_emit_mul(b, tpu_emit_mul(b, ga, first), tpu_emit_sub(b, tpu_emit_splat(b, sg, 1), sg));
  char attrs[48];
  snprintf(attrs, sizeof attrs, "dimension = %d : i64", dim);
  tpu_hlo_value_t parts[2] = {ga, gb};
  set_out(ctx, 0, tpu_hlo_op(b, "stablehlo.concatenate", parts, 2, xt, attrs));
  return NULL;
}

const tpu_lowering_t tpu_lowerings_nn[] = {
    {"_softmax", lower_softmax, 0, false},
    {"_log_softmax", lower_softmax, 0, true},
    {"_safe_softmax", lower_safe_softmax, 0, false},
    {"_softmax_backward_data", lower_softmax_bwd, 0, false},
    {"_log_softmax_backward_data", lower_softmax_bwd, 0, true},
    {"native_layer_norm", lower_layer_norm, 0},
    {"native_layer_norm_backward", lower_layer_norm_bwd, 0},
    {"native_group_norm", lower_group_norm, 0},
    {"native_group_norm_backward", lower_group_norm_bwd, 0},
    {"native_batch_norm", lower_native_batch_norm, 0},
    {"_native_batch_norm_legit", lower_native_batch_norm, 0},
    {"_native_batch_norm_legit_functional", lower_native_batch_norm, 0},
    {"_native_batch_norm_legit_no_training", lower_batch_norm_no_training, 0},
    {"native_batch_norm_backward", lower_batch_norm_bwd, 0},
    {"batch_norm_backward", lower_batch_norm_bwd, 0},
    {"embedding_dense_backward", lower_embedding_bwd, 0},
    {"native_dropout", lower_native_dropout, TPU_LOWER_NEEDS_RNG},
    {"native_dropout_backward", lower_native_dropout_bwd, 0},
    {"log_sigmoid_forward", lower_log_sigmoid, 0},
    {"log_sigmoid_backward", lower_log_sigmoid_bwd, 0},
    {"glu", lower_glu, 0},
    {"glu_backward", lower_glu_bwd, 0},
};
const size_t tpu_lowerings_nn_count = sizeof tpu_lowerings_nn / sizeof tpu_lowerings_nn[0];
