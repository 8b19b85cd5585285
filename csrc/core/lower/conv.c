/* conv family of the lowering table (see lowering.h): convolution (forward,
 * transposed, backward) and im2col / col2im (F.unfold / F.fold). Pooling
 * is pool.c; what the two share is conv_internal.h.
 *
 * Convolution layouts are PyTorch's: input [N, C, *sp], weight [O, C/g, *k]
 * (transposed: [C, O/g, *k]). Everything is one stablehlo.convolution in a
 * few shapes:
 *   forward          conv(x, w)
 *   transposed / dx  conv with lhs_dilation = stride and the kernel flipped
 *                    and its feature dims swapped per group
 *   dw               conv of x by dy with batch and feature dims exchanged
 *                    (batch_group_count = groups), as XLA's own autodiff does.
 * Half types compute in float32 and round once. im2col / col2im are
 * strided slices and interior-padded sums, no arithmetic on the forward
 * side. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conv_internal.h"
#include "emit.h"
#include "lowering.h"

/* "dense<[[a, b], [c, d]]> : tensor<2x2xi64>" */
static void padding_attr(char* out, size_t cap, const int64_t* lo, const int64_t* hi, int n) {
  int len = snprintf(out, cap, "dense<[");
  for (int i = 0; i < n && (size_t)len < cap; i++)
    len += snprintf(out + len, cap - (size_t)len, "%s[%lld, %lld]", i ? ", " : "",
                    (long long)lo[i], (long long)hi[i]);
  if ((size_t)len < cap) snprintf(out + len, cap - (size_t)len, "]> : tensor<%dx2xi64>", n);
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

const tpu_lowering_t tpu_lowerings_conv[] = {
    {"convolution", lower_convolution, 0},
    {"_convolution", lower_convolution, 0},
    {"convolution_overrideable", lower_convolution, 0},
    {"convolution_backward", lower_convolution_backward, 0},
    {"convolution_backward_overrideable", lower_convolution_backward, 0},
    {"im2col", lower_im2col, 0},
    {"col2im", lower_col2im, 0},
};
const size_t tpu_lowerings_conv_count = sizeof tpu_lowerings_conv / sizeof tpu_lowerings_conv[0];
