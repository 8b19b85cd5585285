/* conv family of the lowering table (see lowering.h): convolution (forward,
 * transposed, backward) and pooling (max / avg / adaptive, 1-3 spatial
 * dims; PyTorch reaches us with the 2-D and 3-D ops, 1-D ones are views of
 * 2-D).
 *
 * Convolution layouts are PyTorch's: input [N, C, *sp], weight [O, C/g, *k]
 * (transposed: [C, O/g, *k]). Everything is one stablehlo.convolution in a
 * few shapes:
 *   forward          conv(x, w)
 *   transposed / dx  conv with lhs_dilation = stride and the kernel flipped
 *                    and its feature dims swapped per group
 *   dw               conv of x by dy with batch and feature dims exchanged
 *                    (batch_group_count = groups), as XLA's own autodiff does.
 * Half types compute in float32 and round once. im2col / col2im (F.unfold /
 * F.fold) are strided slices and interior-padded sums, no arithmetic on the
 * forward side. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emit.h"
#include "lowering.h"

#define MAX_SP 3 /* spatial dims we handle */

/* ---- small helpers ---------------------------------------------------- */

static bool is_half(tpu_dtype_t d) { return d == TPU_DTYPE_FLOAT16 || d == TPU_DTYPE_BFLOAT16; }

static tpu_dtype_t compute_dtype(tpu_dtype_t d) { return is_half(d) ? TPU_DTYPE_FLOAT32 : d; }

/* Reads an int / int[] argument as n values: a single value repeats; an
 * empty list (or None) gives `dflt` (NULL: fill with `fill`). False when the
 * list has another length. */
static bool read_ints(const tpu_lower_arg_t* a, int n, const int64_t* dflt, int64_t fill,
                      int64_t* out) {
  if (a->kind == TPU_ARG_INT) {
    for (int i = 0; i < n; i++) out[i] = a->i;
    return true;
  }
  if (a->kind == TPU_ARG_NONE || (a->kind == TPU_ARG_INTS && a->num_ints == 0)) {
    for (int i = 0; i < n; i++) out[i] = dflt ? dflt[i] : fill;
    return true;
  }
  if (a->kind != TPU_ARG_INTS) return false;
  if (a->num_ints == 1) {
    for (int i = 0; i < n; i++) out[i] = a->ints[0];
    return true;
  }
  if (a->num_ints != n) return false;
  memcpy(out, a->ints, sizeof(int64_t) * (size_t)n);
  return true;
}

/* "dense<[[a, b], [c, d]]> : tensor<2x2xi64>" */
static void padding_attr(char* out, size_t cap, const int64_t* lo, const int64_t* hi, int n) {
  int len = snprintf(out, cap, "dense<[");
  for (int i = 0; i < n && (size_t)len < cap; i++)
    len += snprintf(out + len, cap - (size_t)len, "%s[%lld, %lld]", i ? ", " : "",
                    (long long)lo[i], (long long)hi[i]);
  if ((size_t)len < cap) snprintf(out + len, cap - (size_t)len, "]> : tensor<%dx2xi64>", n);
}

static int64_t product(const int64_t* v, int n) {
  int64_t p = 1;
  for (int i = 0; i < n; i++) p *= v[i];
  return p;
}

/* Zero-element operands or results go to the CPU: XLA rejects some empty
 * windows and scatters, and there is nothing to compute. */
static bool any_empty(const tpu_lower_ctx_t* ctx) {
  for (int i = 0; i < tpu_lower_num_args(ctx); i++) {
    const tpu_lower_arg_t* a = tpu_lower_arg(ctx, i);
    if (a->kind == TPU_ARG_TENSOR && product(a->type.dims, a->type.rank) == 0) return true;
  }
  for (int i = 0; i < tpu_lower_num_outputs(ctx); i++) {
    tpu_hlo_type_t t = tpu_lower_output_type(ctx, i);
    if (product(t.dims, t.rank) == 0) return true;
  }
  return false;
}

/* ---- convolution ------------------------------------------------------ */

typedef struct conv_cfg_s {
  int nsp;
  int64_t stride[MAX_SP], lo[MAX_SP], hi[MAX_SP], lhs_dil[MAX_SP], rhs_dil[MAX_SP];
  int64_t feature_groups, batch_groups;
  /* Weight-gradient layout: lhs [N, C, sp] read as batch = C, feature = N;
   * rhs (dy) [N, O, sp] as input feature = N, output feature = O; result
   * [O, C/g, k]. */
  bool weight_grad;
} conv_cfg_t;

static tpu_hlo_value_t emit_conv(tpu_hlo_builder_t* b, tpu_hlo_value_t lhs, tpu_hlo_value_t rhs,
                                 const conv_cfg_t* c) {
  tpu_hlo_type_t lt = tpu_hlo_value_type(b, lhs), rt = tpu_hlo_value_type(b, rhs);
  int n = c->nsp;
  int in_b = c->weight_grad ? 1 : 0, in_f = 1 - in_b;
  int k_i = c->weight_grad ? 0 : 1, k_o = 1 - k_i;
  int out_b = in_b, out_f = in_f;
  tpu_hlo_type_t out = {.dtype = lt.dtype, .rank = n + 2};
  out.dims[out_b] = lt.dims[in_b] / c->batch_groups;
  out.dims[out_f] = rt.dims[k_o];
  for (int i = 0; i < n; i++) {
    int64_t len = lt.dims[2 + i] > 0 ? (lt.dims[2 + i] - 1) * c->lhs_dil[i] + 1 : 0;
    len += c->lo[i] + c->hi[i];
    int64_t eff = (rt.dims[2 + i] - 1) * c->rhs_dil[i] + 1;
    out.dims[2 + i] = len < eff ? 0 : (len - eff) / c->stride[i] + 1;
  }
  char sp[64] = "", ws[128], ld[128], rd[128], pad[512], attrs[2048];
  for (int i = 0, len = 0; i < n; i++)
    len += snprintf(sp + len, sizeof sp - (size_t)len, "%s%d", i ? ", " : "", 2 + i);
  tpu_emit_i64_array(ws, sizeof ws, c->stride, n);
  tpu_emit_i64_array(ld, sizeof ld, c->lhs_dil, n);
  tpu_emit_i64_array(rd, sizeof rd, c->rhs_dil, n);
  padding_attr(pad, sizeof pad, c->lo, c->hi, n);
  snprintf(attrs, sizeof attrs,
           "batch_group_count = %lld : i64, dimension_numbers = #stablehlo.conv<raw "
           "input_batch_dimension = %d, input_feature_dimension = %d, "
           "input_spatial_dimensions = [%s], kernel_input_feature_dimension = %d, "
           "kernel_output_feature_dimension = %d, kernel_spatial_dimensions = [%s], "
           "output_batch_dimension = %d, output_feature_dimension = %d, "
           "output_spatial_dimensions = [%s]>, feature_group_count = %lld : i64, "
           "lhs_dilation = %s, padding = %s, rhs_dilation = %s, window_strides = %s",
           (long long)c->batch_groups, in_b, in_f, sp, k_i, k_o, sp, out_b, out_f, sp,
           (long long)c->feature_groups, ld, pad, rd, ws);
  tpu_hlo_value_t ops[2] = {lhs, rhs};
  return tpu_hlo_op(b, "stablehlo.convolution", ops, 2, out, attrs);
}

/* Stride, padding, dilation, groups of one convolution call. */
typedef struct conv_params_s {
  int nsp;
  int64_t stride[MAX_SP], padding[MAX_SP], dilation[MAX_SP], output_padding[MAX_SP];
  bool transposed;
  int64_t groups;
} conv_params_t;

/* Reads the params starting at argument `first` (stride), laid out as
 * stride, padding, dilation, transposed, output_padding, groups. */
static bool read_conv_params(tpu_lower_ctx_t* ctx, int first, int nsp, conv_params_t* p) {
  p->nsp = nsp;
  if (nsp < 1 || nsp > MAX_SP) return false;
  if (!read_ints(tpu_lower_arg(ctx, first), nsp, NULL, 1, p->stride) ||
      !read_ints(tpu_lower_arg(ctx, first + 1), nsp, NULL, 0, p->padding) ||
      !read_ints(tpu_lower_arg(ctx, first + 2), nsp, NULL, 1, p->dilation) ||
      !read_ints(tpu_lower_arg(ctx, first + 4), nsp, NULL, 0, p->output_padding))
    return false;
  p->transposed = tpu_lower_arg(ctx, first + 3)->i != 0;
  p->groups = tpu_lower_arg(ctx, first + 5)->kind == TPU_ARG_INT ? tpu_lower_arg(ctx, first + 5)->i : 1;
  return p->groups >= 1;
}

/* conv(x, w): x [N, C, sp], w [O, C/g, k]. */
static tpu_hlo_value_t conv_forward(tpu_hlo_builder_t* b, tpu_hlo_value_t x, tpu_hlo_value_t w,
                                    const conv_params_t* p) {
  conv_cfg_t c = {.nsp = p->nsp, .feature_groups = p->groups, .batch_groups = 1};
  for (int i = 0; i < p->nsp; i++) {
    c.stride[i] = p->stride[i];
    c.lo[i] = c.hi[i] = p->padding[i];
    c.lhs_dil[i] = 1;
    c.rhs_dil[i] = p->dilation[i];
  }
  return emit_conv(b, x, w, &c);
}

/* The adjoint of conv(., w) applied to x: x [N, A, sp], w [A, B/g... ] laid
 * out [A, B, k] (A = x's channels); result [N, g*B, target]. Serves
 * conv_transpose and the input gradient of conv. */
static tpu_hlo_value_t conv_adjoint(tpu_hlo_builder_t* b, tpu_hlo_value_t x, tpu_hlo_value_t w,
                                    const conv_params_t* p, const int64_t* target) {
  tpu_hlo_type_t xt = tpu_hlo_value_type(b, x), wt = tpu_hlo_value_type(b, w);
  int n = p->nsp;
  int64_t g = p->groups, A = wt.dims[0], B = wt.dims[1];
  /* Flip the kernel spatially, then per group swap its feature dims:
   * [g, A/g, B, k] -> [g, B, A/g, k] -> [g*B, A/g, k]. */
  int64_t rev[MAX_SP];
  for (int i = 0; i < n; i++) rev[i] = 2 + i;
  char arr[128], attrs[160];
  tpu_emit_i64_array(arr, sizeof arr, rev, n);
  snprintf(attrs, sizeof attrs, "dimensions = %s", arr);
  tpu_hlo_value_t k = tpu_hlo_op(b, "stablehlo.reverse", &w, 1, wt, attrs);
  int64_t d5[MAX_SP + 3] = {g, A / g, B}, perm[MAX_SP + 3] = {0, 2, 1};
  for (int i = 0; i < n; i++) d5[3 + i] = wt.dims[2 + i], perm[3 + i] = 3 + i;
  k = tpu_emit_transpose(b, tpu_emit_reshape(b, k, d5, n + 3), perm);
  int64_t d4[MAX_SP + 2] = {g * B, A / g};
  for (int i = 0; i < n; i++) d4[2 + i] = wt.dims[2 + i];
  k = tpu_emit_reshape(b, k, d4, n + 2);
  conv_cfg_t c = {.nsp = n, .feature_groups = g, .batch_groups = 1};
  for (int i = 0; i < n; i++) {
    int64_t span = p->dilation[i] * (wt.dims[2 + i] - 1);
    c.stride[i] = 1;
    c.lhs_dil[i] = p->stride[i];
    c.rhs_dil[i] = p->dilation[i];
    c.lo[i] = span - p->padding[i];
    c.hi[i] = target[i] - (xt.dims[2 + i] - 1) * p->stride[i] - 1 + p->padding[i];
  }
  return emit_conv(b, x, k, &c);
}

/* The weight gradient of y = conv(x, w) given dy: [O, C/g, k]. */
static tpu_hlo_value_t conv_weight_grad(tpu_hlo_builder_t* b, tpu_hlo_value_t x,
                                        tpu_hlo_value_t dy, const conv_params_t* p,
                                        const int64_t* ksize) {
  tpu_hlo_type_t xt = tpu_hlo_value_type(b, x), gt = tpu_hlo_value_type(b, dy);
  conv_cfg_t c = {.nsp = p->nsp, .feature_groups = 1, .batch_groups = p->groups,
                  .weight_grad = true};
  for (int i = 0; i < p->nsp; i++) {
    c.stride[i] = p->dilation[i];
    c.lhs_dil[i] = 1;
    c.rhs_dil[i] = p->stride[i];
    c.lo[i] = p->padding[i];
    c.hi[i] = (gt.dims[2 + i] - 1) * p->stride[i] + 1 - xt.dims[2 + i] +
              p->dilation[i] * (ksize[i] - 1) - p->padding[i];
  }
  return emit_conv(b, x, dy, &c);
}

static tpu_hlo_value_t operand_in(tpu_lower_ctx_t* ctx, int i, tpu_dtype_t dtype) {
  return tpu_emit_convert(tpu_lower_builder(ctx), tpu_lower_tensor(ctx, i), dtype);
}

/* Integers are declined: XLA:CPU's s64 stablehlo.convolution returns
 * wrong values (checked against CPU's exact slow path), so integer
 * convolutions stay on the fallback until they are written as a dot. */
static bool conv_dtype_ok(tpu_dtype_t d) {
  return d == TPU_DTYPE_FLOAT32 || d == TPU_DTYPE_FLOAT64 || is_half(d);
}

/* convolution / _convolution / convolution_overrideable:
 * (input, weight, bias?, stride, padding, dilation, transposed,
 *  output_padding, groups, ...). */
static tpu_status_t lower_convolution(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  if (any_empty(ctx)) return tpu_lower_decline(ctx, "zero-element tensors");
  tpu_hlo_type_t out = tpu_lower_output_type(ctx, 0);
  const tpu_lower_arg_t* in = tpu_lower_arg(ctx, 0);
  const tpu_lower_arg_t* wa = tpu_lower_arg(ctx, 1);
  if (in->kind != TPU_ARG_TENSOR || wa->kind != TPU_ARG_TENSOR)
    return tpu_lower_decline(ctx, "input and weight must be tensors");
  if (!conv_dtype_ok(out.dtype)) return tpu_lower_decline(ctx, "dtype %d", (int)out.dtype);
  if (in->type.rank != wa->type.rank || out.rank != in->type.rank)
    return tpu_lower_decline(ctx, "unbatched or mismatched ranks");
  conv_params_t p;
  if (!read_conv_params(ctx, 3, in->type.rank - 2, &p))
    return tpu_lower_decline(ctx, "unsupported convolution parameters");
  tpu_dtype_t acc = compute_dtype(out.dtype);
  tpu_hlo_value_t x = operand_in(ctx, 0, acc), w = operand_in(ctx, 1, acc);
  tpu_hlo_value_t y = p.transposed ? conv_adjoint(b, x, w, &p, out.dims + 2)
                                   : conv_forward(b, x, w, &p);
  if (tpu_lower_arg(ctx, 2)->kind == TPU_ARG_TENSOR) {
    tpu_hlo_value_t bias = operand_in(ctx, 2, acc);
    tpu_hlo_type_t yt = tpu_hlo_value_type(b, y);
    char attrs[64];
    snprintf(attrs, sizeof attrs, "broadcast_dimensions = array<i64: 1>");
    y = tpu_emit_binary(b, "stablehlo.add", y,
                        tpu_hlo_op(b, "stablehlo.broadcast_in_dim", &bias, 1, yt, attrs));
  }
  tpu_lower_set_output(ctx, 0, tpu_emit_convert(b, y, out.dtype));
  return NULL;
}

static bool same_type(const tpu_hlo_type_t* a, const tpu_hlo_type_t* b) {
  return a->rank == b->rank && memcmp(a->dims, b->dims, sizeof(int64_t) * (size_t)a->rank) == 0;
}

/* output_mask when the engine passes it opaquely and drops undefined
 * outputs: the one subset of (grad_input, grad_weight, grad_bias) whose
 * shapes match the declared outputs in order; false if none or several. */
static bool infer_mask(const tpu_lower_ctx_t* ctx, const tpu_hlo_type_t* in,
                       const tpu_hlo_type_t* w, bool* want) {
  int64_t O = w->dims[0];
  tpu_hlo_type_t bias = tpu_hlo_type_make(in->dtype, 1, &O);
  const tpu_hlo_type_t* shapes[3] = {in, w, &bias};
  int nout = tpu_lower_num_outputs(ctx), found = 0;
  for (int m = 1; m < 8; m++) {
    int k = 0;
    bool ok = true;
    for (int i = 0; i < 3 && ok; i++) {
      if (!(m >> i & 1)) continue;
      tpu_hlo_type_t t = tpu_lower_output_type(ctx, k++);
      ok = k <= nout && same_type(&t, shapes[i]);
    }
    if (!ok || k != nout) continue;
    if (found++) return false;
    for (int i = 0; i < 3; i++) want[i] = m >> i & 1;
  }
  return found == 1;
}

/* convolution_backward(grad_output, input, weight, bias_sizes?, stride,
 * padding, dilation, transposed, output_padding, groups, output_mask) and
 * convolution_backward_overrideable (the same without bias_sizes). Outputs:
 * grad_input, grad_weight, grad_bias. */
static tpu_status_t lower_convolution_backward(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  if (any_empty(ctx)) return tpu_lower_decline(ctx, "zero-element tensors");
  bool overrideable = strstr(tpu_lower_op_name(ctx), "overrideable") != NULL;
  int first = overrideable ? 3 : 4;
  const tpu_lower_arg_t* ga = tpu_lower_arg(ctx, 0);
  const tpu_lower_arg_t* in = tpu_lower_arg(ctx, 1);
  const tpu_lower_arg_t* wa = tpu_lower_arg(ctx, 2);
  if (ga->kind != TPU_ARG_TENSOR || in->kind != TPU_ARG_TENSOR || wa->kind != TPU_ARG_TENSOR)
    return tpu_lower_decline(ctx, "operands must be tensors");
  tpu_dtype_t dtype = in->type.dtype;
  if (!conv_dtype_ok(dtype)) return tpu_lower_decline(ctx, "dtype %d", (int)dtype);
  if (in->type.rank != wa->type.rank || ga->type.rank != in->type.rank)
    return tpu_lower_decline(ctx, "mismatched ranks");
  conv_params_t p;
  if (!read_conv_params(ctx, first, in->type.rank - 2, &p))
    return tpu_lower_decline(ctx, "unsupported convolution parameters");
  const tpu_lower_arg_t* mask = tpu_lower_arg(ctx, first + 6);
  bool want[3] = {true, true, true};
  int nout = tpu_lower_num_outputs(ctx);
  if (mask->kind == TPU_ARG_INTS) {
    for (int i = 0; i < 3 && i < mask->num_ints; i++) want[i] = mask->ints[i] != 0;
  } else if (nout < 3 && !infer_mask(ctx, &in->type, &wa->type, want)) {
    return tpu_lower_decline(ctx, "output_mask unknown");
  }
  tpu_dtype_t acc = compute_dtype(dtype);
  tpu_hlo_value_t g = operand_in(ctx, 0, acc), x = operand_in(ctx, 1, acc),
                  w = operand_in(ctx, 2, acc);
  int n = p.nsp;
  tpu_hlo_value_t res[3];
  if (want[0])
    res[0] = p.transposed ? conv_forward(b, g, w, &p) : conv_adjoint(b, g, w, &p, in->type.dims + 2);
  if (want[1])
    /* Transposed conv is the adjoint of conv(., w): its weight gradient is
     * conv's with the roles of input and output gradient exchanged. */
    res[1] = p.transposed ? conv_weight_grad(b, g, x, &p, wa->type.dims + 2)
                          : conv_weight_grad(b, x, g, &p, wa->type.dims + 2);
  if (want[2]) {
    int64_t dims[MAX_SP + 1] = {0};
    for (int i = 0; i < n; i++) dims[1 + i] = 2 + i;
    res[2] = tpu_emit_reduce(b, g, tpu_emit_const(b, acc, 0), dims, n + 1, "stablehlo.add");
  }
  if (nout >= 3) {
    for (int i = 0; i < 3; i++) {
      tpu_hlo_type_t t = tpu_lower_output_type(ctx, i);
      /* An output left out of output_mask is undefined in PyTorch: give it
       * zeros of whatever type the engine declared. */
      tpu_lower_set_output(ctx, i, want[i] ? tpu_emit_convert(b, res[i], t.dtype)
                                           : tpu_emit_const_like(b, &t, 0));
    }
    return NULL;
  }
  /* Fewer outputs: the engine dropped the undefined ones; the rest are the
   * requested results in order. */
  for (int i = 0, k = 0; i < 3 && k < nout; i++)
    if (want[i]) {
      tpu_hlo_type_t t = tpu_lower_output_type(ctx, k);
      tpu_lower_set_output(ctx, k++, tpu_emit_convert(b, res[i], t.dtype));
    }
  return NULL;
}

/* ---- pooling ----------------------------------------------------------- */

/* Pool input [*lead, *sp] as [B, *sp]. */
typedef struct pool_shape_s {
  int nsp;
  int64_t batch;
  int64_t in[MAX_SP], out[MAX_SP];
} pool_shape_t;

static int pool_nsp(const char* op_name) {
  if (strstr(op_name, "3d")) return 3;
  if (strstr(op_name, "1d")) return 1;
  return 2;
}

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

static tpu_hlo_value_t reshape_to(tpu_hlo_builder_t* b, tpu_hlo_value_t v, const tpu_hlo_type_t* t) {
  return tpu_emit_reshape(b, v, t->dims, t->rank);
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

/* max_pool{2,3}d_with_indices(self, kernel_size, stride, padding, dilation,
 * ceil_mode) -> (values, indices); the output sizes (ceil_mode) come from
 * PyTorch's meta kernel. */
static tpu_status_t lower_max_pool_with_indices(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  if (any_empty(ctx)) return tpu_lower_decline(ctx, "zero-element tensors");
  const tpu_lower_arg_t* in = tpu_lower_arg(ctx, 0);
  tpu_hlo_type_t out = tpu_lower_output_type(ctx, 0), it = tpu_lower_output_type(ctx, 1);
  int nsp = pool_nsp(tpu_lower_op_name(ctx));
  pool_shape_t s;
  pool_params_t pp;
  if (in->kind != TPU_ARG_TENSOR || tpu_lower_num_outputs(ctx) < 2 ||
      !pool_shape(&in->type, &out, nsp, &s) || !read_pool_params(ctx, 1, 4, nsp, &pp))
    return tpu_lower_decline(ctx, "unsupported max pooling call");
  if (tpu_dtype_is_complex(out.dtype) || out.dtype == TPU_DTYPE_BOOL)
    return tpu_lower_decline(ctx, "dtype %d", (int)out.dtype);
  tpu_hlo_value_t x = as_batched(b, tpu_lower_tensor(ctx, 0), s.batch, s.in, nsp);
  tpu_hlo_value_t idx = plane_indices(b, s.batch, s.in, nsp);
  x = pad_for_windows(b, x, lowest(b, out.dtype), &s, pp.k, pp.s, pp.d, pp.p);
  /* Padding never wins a tie: it has the largest index. */
  idx = pad_for_windows(b, idx, tpu_hlo_constant_int(b, tpu_hlo_type_scalar(TPU_DTYPE_INT64), INT64_MAX),
                        &s, pp.k, pp.s, pp.d, pp.p);
  tpu_hlo_value_t res[2];
  max_window(b, x, idx, pp.k, pp.s, pp.d, nsp, s.out, res);
  tpu_lower_set_output(ctx, 0, reshape_to(b, res[0], &out));
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
  tpu_hlo_value_t ops[3] = {tpu_emit_const_like(b, &zt, 0), ix, gi};
  tpu_hlo_region_op_begin(
      b, "stablehlo.scatter", ops, 3, &zt, 1,
      "indices_are_sorted = false, scatter_dimension_numbers = #stablehlo.scatter<"
      "inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 1>, "
      "unique_indices = false");
  tpu_hlo_type_t sc = tpu_hlo_type_scalar(acc), bt[2] = {sc, sc};
  tpu_hlo_value_t a[2];
  tpu_hlo_block_begin(b, bt, 2, a);
  tpu_hlo_value_t sum = tpu_emit_binary(b, "stablehlo.add", a[0], a[1]);
  tpu_hlo_block_return(b, &sum, 1);
  tpu_hlo_value_t r;
  tpu_hlo_region_op_end(b, &r);
  return r;
}

/* max_pool{2,3}d_with_indices_backward(grad_output, self, kernel_size,
 * stride, padding, dilation, ceil_mode, indices) and
 * adaptive_max_pool{2,3}d_backward(grad_output, self, indices). */
static tpu_status_t lower_max_pool_backward(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  if (any_empty(ctx)) return tpu_lower_decline(ctx, "zero-element tensors");
  bool adaptive = strstr(tpu_lower_op_name(ctx), "adaptive") != NULL;
  int ind = adaptive ? 2 : 7;
  const tpu_lower_arg_t* ga = tpu_lower_arg(ctx, 0);
  tpu_hlo_type_t out = tpu_lower_output_type(ctx, 0);
  pool_shape_t s;
  if (ga->kind != TPU_ARG_TENSOR || tpu_lower_arg(ctx, ind)->kind != TPU_ARG_TENSOR ||
      !pool_shape(&out, &ga->type, pool_nsp(tpu_lower_op_name(ctx)), &s))
    return tpu_lower_decline(ctx, "unsupported max pooling backward call");
  if (!tpu_dtype_is_floating(out.dtype)) return tpu_lower_decline(ctx, "dtype %d", (int)out.dtype);
  tpu_hlo_value_t r = scatter_to_indices(b, tpu_lower_tensor(ctx, 0), tpu_lower_tensor(ctx, ind),
                                         &s, compute_dtype(out.dtype));
  tpu_lower_set_output(ctx, 0, tpu_emit_convert(b, reshape_to(b, r, &out), out.dtype));
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
  if (any_empty(ctx)) return tpu_lower_decline(ctx, "zero-element tensors");
  const tpu_lower_arg_t* in = tpu_lower_arg(ctx, 0);
  tpu_hlo_type_t out = tpu_lower_output_type(ctx, 0);
  int nsp = pool_nsp(tpu_lower_op_name(ctx));
  pool_shape_t s;
  pool_params_t pp;
  if (in->kind != TPU_ARG_TENSOR || !pool_shape(&in->type, &out, nsp, &s) ||
      !read_pool_params(ctx, 1, -1, nsp, &pp))
    return tpu_lower_decline(ctx, "unsupported avg pooling call");
  if (!avg_dtype_ok(out.dtype)) return tpu_lower_decline(ctx, "dtype %d", (int)out.dtype);
  tpu_dtype_t acc = compute_dtype(out.dtype);
  tpu_hlo_value_t x = as_batched(b, operand_in(ctx, 0, acc), s.batch, s.in, nsp);
  x = pad_for_windows(b, x, tpu_emit_const(b, acc, 0), &s, pp.k, pp.s, pp.d, pp.p);
  tpu_hlo_value_t sum = sum_window(b, x, pp.k, pp.s, nsp, s.out);
  bool ok;
  tpu_hlo_value_t div = avg_divisor(ctx, 4, &s, &pp, acc, &ok);
  if (!ok) return tpu_lower_decline(ctx, "out of host memory");
  tpu_hlo_value_t r = tpu_emit_binary(b, "stablehlo.divide", sum, div);
  tpu_lower_set_output(ctx, 0, tpu_emit_convert(b, reshape_to(b, r, &out), out.dtype));
  return NULL;
}

/* avg_pool{2,3}d_backward(grad_output, self, kernel_size, stride, padding,
 * ceil_mode, count_include_pad, divisor_override): each input position sums
 * grad/divisor over the windows covering it, i.e. a stride-1 window sum over
 * the stride-dilated, (k-1-p)-padded gradient. */
static tpu_status_t lower_avg_pool_backward(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  if (any_empty(ctx)) return tpu_lower_decline(ctx, "zero-element tensors");
  const tpu_lower_arg_t* ga = tpu_lower_arg(ctx, 0);
  tpu_hlo_type_t out = tpu_lower_output_type(ctx, 0);
  int nsp = pool_nsp(tpu_lower_op_name(ctx));
  pool_shape_t s;
  pool_params_t pp;
  if (ga->kind != TPU_ARG_TENSOR || !pool_shape(&out, &ga->type, nsp, &s) ||
      !read_pool_params(ctx, 2, -1, nsp, &pp))
    return tpu_lower_decline(ctx, "unsupported avg pooling backward call");
  if (!conv_dtype_ok(out.dtype)) return tpu_lower_decline(ctx, "dtype %d", (int)out.dtype);
  tpu_dtype_t acc = compute_dtype(out.dtype);
  bool ok;
  tpu_hlo_value_t div = avg_divisor(ctx, 5, &s, &pp, acc, &ok);
  if (!ok) return tpu_lower_decline(ctx, "out of host memory");
  tpu_hlo_value_t g = as_batched(b, operand_in(ctx, 0, acc), s.batch, s.out, nsp);
  g = tpu_emit_binary(b, "stablehlo.divide", g, div);
  int64_t lo[MAX_SP + 1] = {0}, hi[MAX_SP + 1] = {0}, inner[MAX_SP + 1] = {0}, one[MAX_SP] = {1, 1, 1};
  for (int i = 0; i < nsp; i++) {
    lo[1 + i] = pp.k[i] - 1 - pp.p[i];
    inner[1 + i] = pp.s[i] - 1;
    int64_t dil = s.out[i] > 0 ? (s.out[i] - 1) * pp.s[i] + 1 : 0;
    hi[1 + i] = s.in[i] + pp.k[i] - 1 - dil - lo[1 + i];
    if (lo[1 + i] < 0) return tpu_lower_decline(ctx, "padding larger than the window");
  }
  g = tpu_emit_pad(b, g, tpu_emit_const(b, acc, 0), lo, hi, inner);
  tpu_hlo_value_t r = sum_window(b, g, pp.k, one, nsp, s.in);
  tpu_lower_set_output(ctx, 0, tpu_emit_convert(b, reshape_to(b, r, &out), out.dtype));
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
  if (any_empty(ctx)) return tpu_lower_decline(ctx, "zero-element tensors");
  const tpu_lower_arg_t* in = tpu_lower_arg(ctx, 0);
  tpu_hlo_type_t out = tpu_lower_output_type(ctx, 0);
  int nsp = pool_nsp(tpu_lower_op_name(ctx));
  pool_shape_t s;
  if (in->kind != TPU_ARG_TENSOR || !pool_shape(&in->type, &out, nsp, &s))
    return tpu_lower_decline(ctx, "unsupported adaptive avg pooling call");
  if (!conv_dtype_ok(out.dtype)) return tpu_lower_decline(ctx, "dtype %d", (int)out.dtype);
  tpu_dtype_t acc = compute_dtype(out.dtype);
  tpu_hlo_value_t x = as_batched(b, operand_in(ctx, 0, acc), s.batch, s.in, nsp);
  for (int i = 0; i < nsp; i++)
    x = contract_first_spatial(b, x, window_matrix(b, s.in[i], s.out[i], acc), 1);
  tpu_hlo_value_t div = adaptive_counts(b, &s, acc);
  if (div.id < 0) return tpu_lower_decline(ctx, "out of host memory");
  x = tpu_emit_binary(b, "stablehlo.divide", x, div);
  tpu_lower_set_output(ctx, 0, tpu_emit_convert(b, reshape_to(b, x, &out), out.dtype));
  return NULL;
}

/* _adaptive_avg_pool{2,3}d_backward(grad_output, self). */
static tpu_status_t lower_adaptive_avg_pool_backward(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  if (any_empty(ctx)) return tpu_lower_decline(ctx, "zero-element tensors");
  const tpu_lower_arg_t* ga = tpu_lower_arg(ctx, 0);
  tpu_hlo_type_t out = tpu_lower_output_type(ctx, 0);
  int nsp = pool_nsp(tpu_lower_op_name(ctx));
  pool_shape_t s;
  if (ga->kind != TPU_ARG_TENSOR || !pool_shape(&out, &ga->type, nsp, &s))
    return tpu_lower_decline(ctx, "unsupported adaptive avg pooling backward call");
  if (!conv_dtype_ok(out.dtype)) return tpu_lower_decline(ctx, "dtype %d", (int)out.dtype);
  tpu_dtype_t acc = compute_dtype(out.dtype);
  tpu_hlo_value_t div = adaptive_counts(b, &s, acc);
  if (div.id < 0) return tpu_lower_decline(ctx, "out of host memory");
  tpu_hlo_value_t g = as_batched(b, operand_in(ctx, 0, acc), s.batch, s.out, nsp);
  g = tpu_emit_binary(b, "stablehlo.divide", g, div);
  for (int i = 0; i < nsp; i++)
    g = contract_first_spatial(b, g, window_matrix(b, s.in[i], s.out[i], acc), 0);
  tpu_lower_set_output(ctx, 0, tpu_emit_convert(b, reshape_to(b, g, &out), out.dtype));
  return NULL;
}

/* adaptive_max_pool{2,3}d(self, output_size) -> (values, indices). Max is
 * separable and the (value, index) order is total, so one dim at a time:
 * gather each output's window (padded to the widest window, extra slots
 * masked to the lowest value) and reduce it with the pair max. */
static tpu_status_t lower_adaptive_max_pool(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  if (any_empty(ctx)) return tpu_lower_decline(ctx, "zero-element tensors");
  const tpu_lower_arg_t* in = tpu_lower_arg(ctx, 0);
  tpu_hlo_type_t out = tpu_lower_output_type(ctx, 0), it = tpu_lower_output_type(ctx, 1);
  int nsp = pool_nsp(tpu_lower_op_name(ctx));
  pool_shape_t s;
  if (in->kind != TPU_ARG_TENSOR || tpu_lower_num_outputs(ctx) < 2 ||
      !pool_shape(&in->type, &out, nsp, &s))
    return tpu_lower_decline(ctx, "unsupported adaptive max pooling call");
  if (!tpu_dtype_is_floating(out.dtype)) return tpu_lower_decline(ctx, "dtype %d", (int)out.dtype);
  tpu_hlo_value_t v = as_batched(b, tpu_lower_tensor(ctx, 0), s.batch, s.in, nsp);
  tpu_hlo_value_t ix = plane_indices(b, s.batch, s.in, nsp);
  for (int i = 0; i < nsp; i++) {
    int64_t L = s.in[i], O = s.out[i], K = 0;
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
    tpu_hlo_value_t vp = tpu_emit_pad(b, v, lowest(b, out.dtype), lo, hi, NULL);
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
    tpu_hlo_value_t rops[4] = {gv, gi, lowest(b, out.dtype),
                               tpu_hlo_constant_int(b, tpu_hlo_type_scalar(TPU_DTYPE_INT64), INT64_MAX)};
    tpu_hlo_region_op_begin(b, "stablehlo.reduce", rops, 4, rt, 2, rattrs);
    pair_max_block(b, out.dtype);
    tpu_hlo_value_t res[2];
    tpu_hlo_region_op_end(b, res);
    v = res[0];
    ix = res[1];
  }
  tpu_lower_set_output(ctx, 0, reshape_to(b, v, &out));
  tpu_lower_set_output(ctx, 1, tpu_emit_convert(b, reshape_to(b, ix, &it), it.dtype));
  return NULL;
}

/* ---- im2col / col2im (F.unfold / F.fold) -------------------------------- */

/* kernel_size, dilation, padding, stride (2 each) from argument `first`. */
static bool read_unfold_params(tpu_lower_ctx_t* ctx, int first, int64_t* k, int64_t* d,
                               int64_t* p, int64_t* s) {
  return read_ints(tpu_lower_arg(ctx, first), 2, NULL, 1, k) &&
         read_ints(tpu_lower_arg(ctx, first + 1), 2, NULL, 1, d) &&
         read_ints(tpu_lower_arg(ctx, first + 2), 2, NULL, 0, p) &&
         read_ints(tpu_lower_arg(ctx, first + 3), 2, NULL, 1, s);
}

/* im2col(self [N?, C, H, W], kernel_size, dilation, padding, stride) ->
 * [N?, C*kh*kw, L]: one strided slice of the padded input per kernel
 * offset, stacked after the channel dim (exact: no arithmetic). */
/* im2col / col2im of an empty batch (the one empty input CPU accepts:
 * batch 0, every other dim nonzero): the empty result. Other empty inputs
 * are declined; the fallback raises CPU's error. */
static tpu_status_t lower_unfold_empty_batch(tpu_lower_ctx_t* ctx, int batched_rank) {
  const tpu_lower_arg_t* in = tpu_lower_arg(ctx, 0);
  tpu_hlo_type_t out = tpu_lower_output_type(ctx, 0);
  bool ok = in->kind == TPU_ARG_TENSOR && in->type.rank == batched_rank && in->type.dims[0] == 0;
  for (int d = 1; ok && d < in->type.rank; d++) ok = in->type.dims[d] > 0;
  if (!ok || product(out.dims, out.rank) != 0) return tpu_lower_decline(ctx, "zero-element tensors");
  tpu_lower_set_output(ctx, 0, tpu_emit_const_like(tpu_lower_builder(ctx), &out, 0));
  return NULL;
}

static tpu_status_t lower_im2col(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  if (any_empty(ctx)) return lower_unfold_empty_batch(ctx, 4);
  const tpu_lower_arg_t* in = tpu_lower_arg(ctx, 0);
  tpu_hlo_type_t out = tpu_lower_output_type(ctx, 0);
  int64_t k[2], d[2], p[2], s[2];
  if (in->kind != TPU_ARG_TENSOR || (in->type.rank != 3 && in->type.rank != 4) ||
      !read_unfold_params(ctx, 1, k, d, p, s))
    return tpu_lower_decline(ctx, "unsupported im2col call");
  /* Data movement only: bool too (padding with false). */
  if (!conv_dtype_ok(out.dtype) && out.dtype != TPU_DTYPE_BOOL)
    return tpu_lower_decline(ctx, "dtype %d", (int)out.dtype);
  const int64_t* sp = in->type.dims + in->type.rank - 2;
  int64_t C = in->type.dims[in->type.rank - 3], N = in->type.rank == 4 ? in->type.dims[0] : 1;
  int64_t oh = (sp[0] + 2 * p[0] - d[0] * (k[0] - 1) - 1) / s[0] + 1;
  int64_t ow = (sp[1] + 2 * p[1] - d[1] * (k[1] - 1) - 1) / s[1] + 1;
  int64_t d4[4] = {N, C, sp[0], sp[1]}, lo[4] = {0, 0, p[0], p[1]}, hi[4] = {0, 0, p[0], p[1]};
  tpu_hlo_value_t x = tpu_emit_reshape(b, tpu_lower_tensor(ctx, 0), d4, 4);
  x = tpu_emit_pad(b, x, tpu_emit_const(b, out.dtype, 0), lo, hi, NULL);
  int64_t K = k[0] * k[1];
  tpu_hlo_value_t* parts = malloc(sizeof *parts * (size_t)K);
  if (!parts) return tpu_lower_decline(ctx, "out of host memory");
  int64_t one[4] = {N, C, 1, oh * ow}, step[4] = {1, 1, s[0], s[1]};
  for (int64_t i = 0; i < k[0]; i++)
    for (int64_t j = 0; j < k[1]; j++) {
      int64_t start[4] = {0, 0, i * d[0], j * d[1]};
      int64_t limit[4] = {N, C, start[2] + (oh - 1) * s[0] + 1, start[3] + (ow - 1) * s[1] + 1};
      parts[i * k[1] + j] = tpu_emit_reshape(b, tpu_emit_slice(b, x, start, limit, step), one, 4);
    }
  tpu_hlo_type_t ct = tpu_hlo_type_make(out.dtype, 4, (int64_t[]){N, C, K, oh * ow});
  tpu_hlo_value_t r = tpu_hlo_op(b, "stablehlo.concatenate", parts, (int)K, ct, "dimension = 2 : i64");
  free(parts);
  tpu_lower_set_output(ctx, 0, reshape_to(b, r, &out));
  return NULL;
}

/* col2im(self [N?, C*kh*kw, L], output_size, kernel_size, dilation,
 * padding, stride) -> [N?, C, H, W]: each kernel offset's block goes back to
 * its strided place in the padded image (pad with interior padding), the
 * blocks add up, the padding is cut off. */
static tpu_status_t lower_col2im(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  if (any_empty(ctx)) return lower_unfold_empty_batch(ctx, 3);
  const tpu_lower_arg_t* in = tpu_lower_arg(ctx, 0);
  tpu_hlo_type_t out = tpu_lower_output_type(ctx, 0);
  int64_t size[2], k[2], d[2], p[2], s[2];
  if (in->kind != TPU_ARG_TENSOR || (in->type.rank != 2 && in->type.rank != 3) ||
      !read_ints(tpu_lower_arg(ctx, 1), 2, NULL, 1, size) || !read_unfold_params(ctx, 2, k, d, p, s))
    return tpu_lower_decline(ctx, "unsupported col2im call");
  if (!conv_dtype_ok(out.dtype)) return tpu_lower_decline(ctx, "dtype %d", (int)out.dtype);
  int64_t K = k[0] * k[1], N = in->type.rank == 3 ? in->type.dims[0] : 1;
  int64_t C = in->type.dims[in->type.rank - 2] / K;
  int64_t oh = (size[0] + 2 * p[0] - d[0] * (k[0] - 1) - 1) / s[0] + 1;
  int64_t ow = (size[1] + 2 * p[1] - d[1] * (k[1] - 1) - 1) / s[1] + 1;
  if (oh * ow != in->type.dims[in->type.rank - 1] || oh <= 0 || ow <= 0)
    return tpu_lower_decline(ctx, "block count does not match output_size");
  tpu_dtype_t acc = compute_dtype(out.dtype);
  int64_t d5[5] = {N, C, K, oh, ow};
  tpu_hlo_value_t cols = tpu_emit_reshape(b, operand_in(ctx, 0, acc), d5, 5);
  int64_t H = size[0] + 2 * p[0], W = size[1] + 2 * p[1];
  tpu_hlo_value_t sum = {-1}, zero = tpu_emit_const(b, acc, 0);
  for (int64_t i = 0; i < k[0]; i++)
    for (int64_t j = 0; j < k[1]; j++) {
      int64_t kk = i * k[1] + j;
      int64_t start[5] = {0, 0, kk, 0, 0}, limit[5] = {N, C, kk + 1, oh, ow},
              step[5] = {1, 1, 1, 1, 1}, d4[4] = {N, C, oh, ow};
      tpu_hlo_value_t blk = tpu_emit_reshape(b, tpu_emit_slice(b, cols, start, limit, step), d4, 4);
      int64_t lo[4] = {0, 0, i * d[0], j * d[1]}, inner[4] = {0, 0, s[0] - 1, s[1] - 1};
      int64_t hi[4] = {0, 0, H - lo[2] - (oh - 1) * s[0] - 1, W - lo[3] - (ow - 1) * s[1] - 1};
      blk = tpu_emit_pad(b, blk, zero, lo, hi, inner);
      sum = sum.id < 0 ? blk : tpu_emit_binary(b, "stablehlo.add", sum, blk);
    }
  int64_t start[4] = {0, 0, p[0], p[1]}, limit[4] = {N, C, p[0] + size[0], p[1] + size[1]},
          step[4] = {1, 1, 1, 1};
  sum = tpu_emit_slice(b, sum, start, limit, step);
  tpu_lower_set_output(ctx, 0, tpu_emit_convert(b, reshape_to(b, sum, &out), out.dtype));
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
  int nsp = strstr(tpu_lower_op_name(ctx), "3d") ? 3 : 2;
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

const tpu_lowering_t tpu_lowerings_conv[] = {
    {"convolution", lower_convolution, 0},
    {"_convolution", lower_convolution, 0},
    {"convolution_overrideable", lower_convolution, 0},
    {"convolution_backward", lower_convolution_backward, 0},
    {"convolution_backward_overrideable", lower_convolution_backward, 0},
    {"max_pool2d_with_indices", lower_max_pool_with_indices, 0},
    {"max_pool3d_with_indices", lower_max_pool_with_indices, 0},
    {"max_pool2d_with_indices_backward", lower_max_pool_backward, 0},
    {"max_pool3d_with_indices_backward", lower_max_pool_backward, 0},
    {"adaptive_max_pool2d", lower_adaptive_max_pool, 0},
    {"adaptive_max_pool3d", lower_adaptive_max_pool, 0},
    {"adaptive_max_pool2d_backward", lower_max_pool_backward, 0},
    {"adaptive_max_pool3d_backward", lower_max_pool_backward, 0},
    {"avg_pool2d", lower_avg_pool, 0},
    {"avg_pool3d", lower_avg_pool, 0},
    {"avg_pool2d_backward", lower_avg_pool_backward, 0},
    {"avg_pool3d_backward", lower_avg_pool_backward, 0},
    {"_adaptive_avg_pool2d", lower_adaptive_avg_pool, 0},
    {"_adaptive_avg_pool3d", lower_adaptive_avg_pool, 0},
    {"_adaptive_avg_pool2d_backward", lower_adaptive_avg_pool_backward, 0},
    {"_adaptive_avg_pool3d_backward", lower_adaptive_avg_pool_backward, 0},
    {"im2col", lower_im2col, 0},
    {"max_unpool2d", lower_max_unpool, 0},
    {"max_unpool3d", lower_max_unpool, 0},
    {"col2im", lower_col2im, 0},
};
const size_t tpu_lowerings_conv_count = sizeof tpu_lowerings_conv / sizeof tpu_lowerings_conv[0];
