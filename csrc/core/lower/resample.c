/* resample family of the lowering table (see lowering.h): linear,
 * bilinear, trilinear and bicubic upsampling and their backwards, as
 * PyTorch's CPU kernels (UpSample.h) compute them: per spatial dim, each
 * output element reads a few input taps (2 linear, 4 cubic) at indices and
 * weights fixed by the sizes, computed here as CPU does (source index
 * from area_pixel_compute_scale / _source_index, in the op math dtype:
 * float for float and half types, double for double). The taps are
 * gathered, so an inf or NaN reaches only the outputs whose taps read it,
 * as on the CPU (a product with an interpolation matrix spread it over
 * whole rows: 0 * inf is NaN). Dims are resampled last to first, as
 * CPU's separable loops combine them; the backward scatters the gradient
 * to the same taps with the same weights, first dim first. Nearest
 * (and nearest-exact) upsampling gathers one tap per output, CPU's
 * float index arithmetic. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emit.h"
#include "lowering.h"

#define MAX_TAPS 4
#define MAX_OUT (1 << 22)

typedef struct {
  int64_t in, out;
  int taps;
  int64_t* idx; /* [taps][out] */
  double* w;    /* [taps][out] */
} taps_t;

static double rnd(double x, bool f32) { return f32 ? (double)(float)x : x; }

/* area_pixel_compute_scale */
static double area_scale(int64_t in, int64_t out, bool align, const tpu_lower_arg_t* scale, bool f32) {
  if (align) return out > 1 ? rnd(rnd((double)(in - 1), f32) / (double)(out - 1), f32) : 0.0;
  if (scale->kind == TPU_ARG_FLOAT && scale->f > 0) return rnd(1.0 / scale->f, f32);
  return rnd(rnd((double)in, f32) / (double)out, f32);
}

/* area_pixel_compute_source_index */
static double source_index(double scale, int64_t j, bool align, bool cubic, bool f32) {
  if (align) return rnd(scale * (double)j, f32);
  double src = rnd(rnd(scale * rnd((double)j + 0.5, f32), f32) - 0.5, f32);
  return !cubic && src < 0 ? 0.0 : src;
}

static double cubic1(double x, double A, bool f32) { /* ((A + 2) x - (A + 3)) x x + 1 */
  double r = rnd(rnd(rnd((A + 2) * x, f32) - (A + 3), f32) * x, f32);
  return rnd(rnd(r * x, f32) + 1, f32);
}

static double cubic2(double x, double A, bool f32) { /* ((A x - 5A) x + 8A) x - 4A */
  double r = rnd(rnd(A * x, f32) - 5 * A, f32);
  r = rnd(rnd(r * x, f32) + 8 * A, f32);
  return rnd(rnd(r * x, f32) - 4 * A, f32);
}

static bool make_taps(taps_t* t, int64_t in, int64_t out, bool align, const tpu_lower_arg_t* scale, bool cubic,
                      bool f32) {
  t->in = in, t->out = out, t->taps = cubic ? 4 : 2;
  t->idx = malloc(sizeof(int64_t) * (size_t)(t->taps * out));
  t->w = malloc(sizeof(double) * (size_t)(t->taps * out));
  if (!t->idx || !t->w) return false;
  double s = area_scale(in, out, align, scale, f32);
  for (int64_t j = 0; j < out; j++) {
    double src = source_index(s, j, align, cubic, f32);
    if (!cubic) {
      int64_t i0 = (int64_t)src, i1 = i0 < in - 1 ? i0 + 1 : i0;
      double l1 = rnd(src - (double)i0, f32), l0 = rnd(1.0 - l1, f32);
      t->idx[j] = i0, t->idx[out + j] = i1;
      t->w[j] = l0, t->w[out + j] = l1;
    } else {
      /* guard_index_and_lambda: the index at most in - 1, lambda in [0, 1] */
      double fl = floor(src);
      if (fl > (double)(in - 1)) fl = (double)(in - 1);
      double tt = rnd(src - fl, f32);
      tt = tt < 0 ? 0 : tt > 1 ? 1 : tt;
      const double A = -0.75;
      double c[4] = {cubic2(rnd(tt + 1, f32), A, f32), cubic1(tt, A, f32), cubic1(rnd(1 - tt, f32), A, f32),
                     cubic2(rnd(rnd(1 - tt, f32) + 1, f32), A, f32)};
      for (int k = 0; k < 4; k++) {
        int64_t i = (int64_t)fl - 1 + k;
        t->idx[k * out + j] = i < 0 ? 0 : i > in - 1 ? in - 1 : i;
        t->w[k * out + j] = c[k];
      }
    }
  }
  return true;
}

static void free_taps(taps_t* t) {
  free(t->idx);
  free(t->w);
}

static tpu_hlo_value_t index_constant(tpu_hlo_builder_t* b, const int64_t* idx, int64_t n) {
  int64_t dims[2] = {n, 1};
  return tpu_hlo_constant_dense(b, tpu_hlo_type_make(TPU_DTYPE_INT64, 2, dims), idx);
}

/* "[a, b, c]" of every dim but `skip` below `rank`. */
static void dims_except(char* out, size_t cap, int rank, int skip) {
  int len = snprintf(out, cap, "[");
  for (int d = 0, first = 1; d < rank; d++) {
    if (d == skip) continue;
    len += snprintf(out + len, cap - (size_t)len, "%s%d", first ? "" : ", ", d);
    first = 0;
  }
  snprintf(out + len, cap - (size_t)len, "]");
}

/* v gathered along `dim` at constant indices idx[0..n). */
static tpu_hlo_value_t gather_dim(tpu_hlo_builder_t* b, tpu_hlo_value_t v, int dim, const int64_t* idx, int64_t n) {
  tpu_hlo_type_t t = tpu_hlo_value_type(b, v), out = t;
  out.dims[dim] = n;
  int64_t sizes[TPU_HLO_MAX_RANK];
  for (int d = 0; d < t.rank; d++) sizes[d] = d == dim ? 1 : t.dims[d];
  char offs[24 * TPU_HLO_MAX_RANK], ss[24 * TPU_HLO_MAX_RANK + 16], attrs[sizeof offs + sizeof ss + 256];
  dims_except(offs, sizeof offs, t.rank, dim);
  tpu_emit_i64_array(ss, sizeof ss, sizes, t.rank);
  snprintf(attrs, sizeof attrs,
           "dimension_numbers = #stablehlo.gather<offset_dims = %s, collapsed_slice_dims = [%d], "
           "start_index_map = [%d], index_vector_dim = 1>, slice_sizes = %s, "
           "indices_are_sorted = false",
           offs, dim, dim, ss);
  tpu_hlo_value_t operands[2] = {v, index_constant(b, idx, n)};
  return tpu_hlo_op(b, "stablehlo.gather", operands, 2, out, attrs);
}

/* g's slices along `dim` added into a zero tensor whose `dim` has `in`
 * elements, at constant indices idx[0..n) (gather_dim's transpose). */
static tpu_hlo_value_t scatter_add_dim(tpu_hlo_builder_t* b, tpu_hlo_value_t g, int dim, const int64_t* idx,
                                       int64_t n, int64_t in) {
  tpu_hlo_type_t t = tpu_hlo_value_type(b, g), out = t;
  out.dims[dim] = in;
  int64_t win[TPU_HLO_MAX_RANK], k = 0;
  for (int d = 0; d < t.rank; d++)
    if (d != dim) win[k++] = d;
  int64_t ins = dim, map = dim;
  return tpu_emit_scatter(b, tpu_emit_const_like(b, &out, 0), index_constant(b, idx, n), g, win, (int)k, &ins,
                          &map, 1, "stablehlo.add");
}

/* w [n] as a constant broadcast along `dim` of `t`. */
static tpu_hlo_value_t weights(tpu_hlo_builder_t* b, const double* w, int64_t n, int dim, tpu_hlo_type_t t) {
  tpu_hlo_value_t c = tpu_hlo_constant_dense(b, tpu_hlo_type_make(TPU_DTYPE_FLOAT64, 1, &n), w);
  c = tpu_emit_convert(b, c, t.dtype);
  char attrs[64];
  snprintf(attrs, sizeof attrs, "broadcast_dimensions = array<i64: %d>", dim);
  return tpu_hlo_op(b, "stablehlo.broadcast_in_dim", &c, 1, t, attrs);
}

/* sum_k w_k * v[idx_k] along dim, taps added in order. */
static tpu_hlo_value_t resample_dim(tpu_hlo_builder_t* b, tpu_hlo_value_t v, int dim, const taps_t* t) {
  tpu_hlo_value_t acc = {-1};
  for (int k = 0; k < t->taps; k++) {
    tpu_hlo_value_t g = gather_dim(b, v, dim, t->idx + k * t->out, t->out);
    tpu_hlo_value_t term = tpu_emit_mul(b, weights(b, t->w + k * t->out, t->out, dim, tpu_hlo_value_type(b, g)), g);
    acc = k == 0 ? term : tpu_emit_add(b, acc, term);
  }
  return acc;
}

/* The transpose: g [.., out, ..] to [.., in, ..]. */
static tpu_hlo_value_t resample_dim_backward(tpu_hlo_builder_t* b, tpu_hlo_value_t g, int dim, const taps_t* t) {
  tpu_hlo_value_t acc = {-1};
  for (int k = 0; k < t->taps; k++) {
    tpu_hlo_value_t term = tpu_emit_mul(b, weights(b, t->w + k * t->out, t->out, dim, tpu_hlo_value_type(b, g)), g);
    tpu_hlo_value_t s = scatter_add_dim(b, term, dim, t->idx + k * t->out, t->out, t->in);
    acc = k == 0 ? s : tpu_emit_add(b, acc, s);
  }
  return acc;
}

static tpu_dtype_t math_dtype(tpu_dtype_t d) { return d == TPU_DTYPE_FLOAT64 ? d : TPU_DTYPE_FLOAT32; }

/* ---- nearest ---- */

/* Source index of each output index along one dim, as PyTorch's CPU
 * kernels compute it in float: scale = 1 / scale_factor when given, else
 * in / out; nearest: floor(dst * scale); nearest-exact: floor((dst + 0.5)
 * * scale); clamped to in - 1. */
static void nearest_indices(int64_t in, int64_t out, const tpu_lower_arg_t* scale_arg,
                            bool exact, int64_t* idx) {
  float scale = scale_arg->kind == TPU_ARG_FLOAT && scale_arg->f > 0
                    ? (float)(1.0 / scale_arg->f)
                    : (float)in / (float)out;
  for (int64_t j = 0; j < out; j++) {
    float src = exact ? floorf(((float)j + 0.5f) * scale) : floorf((float)j * scale);
    int64_t s = (int64_t)src;
    idx[j] = s < in - 1 ? s : in - 1;
  }
}

#define MAX_UPSAMPLE 4096

/* A row's data word: the _backward ops, nearest-exact (not nearest), cubic
 * (not linear). */
enum { RESAMPLE_BACKWARD = 1, RESAMPLE_EXACT = 2, RESAMPLE_CUBIC = 4 };

/* upsample_nearest{1,2,3}d / _upsample_nearest_exact{1,2,3}d(self,
 * output_size, scales...): a gather per spatial dim; their
 * _backward(grad_output, output_size, input_size, scales...): the
 * scatter-add transpose, in float32 for halves. */
static tpu_status_t lower_upsample_nearest(tpu_lower_ctx_t* ctx) {
  intptr_t kind = tpu_lower_data(ctx);
  bool exact = kind & RESAMPLE_EXACT, backward = kind & RESAMPLE_BACKWARD;
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_dtype_t dt = tpu_lower_arg(ctx, 0)->type.dtype, od = tpu_lower_output_type(ctx, 0).dtype;
  if (backward && !tpu_dtype_is_floating(od)) return tpu_lower_decline(ctx, "non-floating upsample grad");
  /* CPU's and CUDA's kernels take floats and uint8 only: the fallback
   * raises their NotImplementedError for the rest. */
  if (!backward && !tpu_dtype_is_floating(dt) && dt != TPU_DTYPE_UINT8)
    return tpu_lower_decline(ctx, "%s", tpu_dtype_name(dt));
  const tpu_lower_arg_t* osz = tpu_lower_arg(ctx, 1);
  const tpu_lower_arg_t* isz = backward ? tpu_lower_arg(ctx, 2) : NULL;
  if (osz->kind != TPU_ARG_INTS || (isz && isz->kind != TPU_ARG_INTS))
    return tpu_lower_decline(ctx, backward ? "sizes not given" : "output_size not given");
  tpu_hlo_value_t v = tpu_lower_tensor(ctx, 0);
  if (backward) v = tpu_emit_convert(b, v, math_dtype(od));
  tpu_hlo_type_t t = tpu_hlo_value_type(b, v);
  int k = osz->num_ints;
  int64_t idx[MAX_UPSAMPLE]; /* 32 KiB on the stack: lowerings may run on several threads */
  for (int i = 0; i < k; i++) {
    int dim = t.rank - k + i;
    int64_t in = backward ? isz->ints[dim] : t.dims[dim], out = osz->ints[i];
    if (out > MAX_UPSAMPLE) return tpu_lower_decline(ctx, "output size over %d", MAX_UPSAMPLE);
    if (in == out) continue;
    nearest_indices(in, out, tpu_lower_arg(ctx, (backward ? 3 : 2) + i), exact, idx);
    v = backward ? scatter_add_dim(b, v, dim, idx, out, in) : gather_dim(b, v, dim, idx, out);
  }
  tpu_lower_set_output(ctx, 0, backward ? tpu_emit_convert(b, v, od) : v);
  return NULL;
}

/* ---- linear and cubic ---- */

/* upsample_{linear1d,bilinear2d,trilinear3d,bicubic2d}(self, output_size,
 * align_corners, scales...) and their _backward(grad_output, output_size,
 * input_size, align_corners, scales...). */
static tpu_status_t lower_upsample_taps(tpu_lower_ctx_t* ctx) {
  intptr_t kind = tpu_lower_data(ctx);
  bool cubic = kind & RESAMPLE_CUBIC, backward = kind & RESAMPLE_BACKWARD;
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_type_t out = tpu_lower_output_type(ctx, 0);
  if (!tpu_dtype_is_floating(out.dtype) || tpu_lower_arg(ctx, 0)->kind != TPU_ARG_TENSOR)
    return tpu_lower_decline(ctx, "non-floating interpolation");
  const tpu_lower_arg_t* osz = tpu_lower_arg(ctx, 1);
  const tpu_lower_arg_t* isz = backward ? tpu_lower_arg(ctx, 2) : NULL;
  if (osz->kind != TPU_ARG_INTS || (isz && isz->kind != TPU_ARG_INTS))
    return tpu_lower_decline(ctx, "sizes not given");
  int first_scale = backward ? 4 : 3;
  const tpu_lower_arg_t* al = tpu_lower_arg(ctx, first_scale - 1);
  bool align = (al->kind == TPU_ARG_BOOL || al->kind == TPU_ARG_INT) && al->i != 0;
  tpu_dtype_t md = math_dtype(out.dtype);
  bool f32 = md == TPU_DTYPE_FLOAT32;
  tpu_hlo_value_t v = tpu_emit_convert(b, tpu_lower_tensor(ctx, 0), md);
  tpu_hlo_type_t vt = tpu_hlo_value_type(b, v);
  int nd = osz->num_ints;
  for (int i = 0; i < nd; i++) {
    /* forward: last dim first; backward: first dim first */
    int k = backward ? i : nd - 1 - i;
    int dim = vt.rank - nd + k;
    int64_t in = backward ? isz->ints[dim] : vt.dims[dim], o = osz->ints[k];
    if (in <= 0 || o <= 0 || o > MAX_OUT) {
      tpu_lower_set_output(ctx, 0, tpu_emit_const_like(b, &out, 0));
      return NULL;
    }
    taps_t t = {0};
    if (!make_taps(&t, in, o, align, tpu_lower_arg(ctx, first_scale + k), cubic, f32)) {
      free_taps(&t);
      return tpu_lower_decline(ctx, "out of memory for interpolation taps");
    }
    v = backward ? resample_dim_backward(b, v, dim, &t) : resample_dim(b, v, dim, &t);
    free_taps(&t);
  }
  tpu_lower_set_output(ctx, 0, tpu_emit_convert(b, v, out.dtype));
  return NULL;
}

/* ---- grid_sampler_2d / 3d ---- */

/* grid_sample as CPU's kernels (GridSampler.cpp / GridSamplerKernel.cpp):
 * input [N, C, *S] read as [N, P, C] rows, grid [N, *O, nd] as per-dim
 * coordinates [N, Q] (grid's last entry is the innermost dim: x is W).
 * A coordinate is unnormalized ((c + 1) / 2 * (size - 1) with
 * align_corners, else ((c + 1) * size - 1) / 2), then padded (border
 * clips, reflection reflects then clips; bicubic pads each tap instead).
 * Each corner (2^nd for bilinear / trilinear, the nearest for nearest,
 * 4 x 4 for bicubic) is gathered where it lies inside and counts 0
 * outside; corners add in CPU's order. The backward scatters the output
 * gradient to the same corners and differentiates the weights for the
 * grid, times the padding's derivative (0 where clipped, -1 where
 * reflected back). */

enum { GS_BILINEAR = 0, GS_NEAREST = 1, GS_BICUBIC = 2 };
enum { GS_ZEROS = 0, GS_BORDER = 1, GS_REFLECTION = 2 };

typedef struct {
  tpu_hlo_builder_t* b;
  int nd;                 /* spatial dims */
  int64_t N, C, P, Q;
  int64_t size[3];        /* spatial sizes, outer to inner */
  int mode, padding;
  bool align;
  tpu_dtype_t d;          /* math dtype */
  tpu_hlo_value_t rows;   /* input [N*P, C] */
  tpu_hlo_value_t coord[3]; /* [N, Q] per spatial dim, outer to inner */
} gs_t;

static tpu_hlo_value_t gs_c(const gs_t* g, double v) {
  tpu_hlo_type_t t = tpu_hlo_type_make(g->d, 2, (int64_t[]){g->N, g->Q});
  return tpu_emit_const_like(g->b, &t, v);
}

static tpu_hlo_value_t gs_unnormalize(const gs_t* g, tpu_hlo_value_t c, int64_t size) {
  tpu_hlo_builder_t* b = g->b;
  tpu_hlo_value_t one = gs_c(g, 1);
  if (g->align)
    return tpu_emit_mul(b, tpu_emit_div(b, tpu_emit_add(b, c, one), gs_c(g, 2)), gs_c(g, (double)(size - 1)));
  return tpu_emit_div(b, tpu_emit_sub(b, tpu_emit_mul(b, tpu_emit_add(b, c, one), gs_c(g, (double)size)), one),
                      gs_c(g, 2));
}

/* clip to [0, size - 1]; *grad (when asked) 0 where clipped, else 1 */
static tpu_hlo_value_t gs_clip(const gs_t* g, tpu_hlo_value_t x, int64_t size, tpu_hlo_value_t* grad) {
  tpu_hlo_builder_t* b = g->b;
  tpu_hlo_value_t lo = gs_c(g, 0), hi = gs_c(g, (double)(size - 1));
  if (grad) {
    tpu_hlo_value_t inside = tpu_emit_binary(b, "stablehlo.and", tpu_emit_compare(b, "GT", x, lo),
                                             tpu_emit_compare(b, "LT", x, hi));
    *grad = tpu_emit_select(b, inside, gs_c(g, 1), gs_c(g, 0));
  }
  return tpu_emit_binary(b, "stablehlo.minimum", tpu_emit_binary(b, "stablehlo.maximum", x, lo), hi);
}

/* reflect_coordinates(in, twice_low, twice_high); *grad: +1 or -1 */
static tpu_hlo_value_t gs_reflect(const gs_t* g, tpu_hlo_value_t x, int64_t twice_low, int64_t twice_high,
                                  tpu_hlo_value_t* grad) {
  tpu_hlo_builder_t* b = g->b;
  if (twice_low == twice_high) {
    if (grad) *grad = gs_c(g, 0);
    return gs_c(g, 0);
  }
  double mn = (double)twice_low / 2, span = (double)(twice_high - twice_low) / 2;
  tpu_hlo_value_t in = tpu_emit_sub(b, x, gs_c(g, mn));
  tpu_hlo_value_t neg = tpu_emit_compare(b, "LT", in, gs_c(g, 0));
  in = tpu_emit_unary(b, "stablehlo.abs", in);
  tpu_hlo_value_t extra = tpu_emit_binary(b, "stablehlo.remainder", in, gs_c(g, span));
  tpu_hlo_value_t flips = tpu_emit_unary(b, "stablehlo.floor", tpu_emit_div(b, in, gs_c(g, span)));
  tpu_hlo_value_t even = tpu_emit_compare(b, "EQ", tpu_emit_binary(b, "stablehlo.remainder", flips, gs_c(g, 2)),
                                          gs_c(g, 0));
  if (grad) {
    tpu_hlo_value_t m = tpu_emit_select(b, neg, gs_c(g, -1), gs_c(g, 1));
    *grad = tpu_emit_select(b, even, m, tpu_emit_unary(b, "stablehlo.negate", m));
  }
  return tpu_emit_select(b, even, tpu_emit_add(b, extra, gs_c(g, mn)),
                         tpu_emit_add(b, tpu_emit_sub(b, gs_c(g, span), extra), gs_c(g, mn)));
}

/* the padding of an unnormalized coordinate; *grad: its derivative */
static tpu_hlo_value_t gs_pad(const gs_t* g, tpu_hlo_value_t x, int64_t size, tpu_hlo_value_t* grad) {
  tpu_hlo_builder_t* b = g->b;
  if (g->padding == GS_BORDER) return gs_clip(g, x, size, grad);
  if (g->padding == GS_REFLECTION) {
    tpu_hlo_value_t g1, g2;
    x = g->align ? gs_reflect(g, x, 0, 2 * (size - 1), grad ? &g1 : NULL)
                 : gs_reflect(g, x, -1, 2 * size - 1, grad ? &g1 : NULL);
    x = gs_clip(g, x, size, grad ? &g2 : NULL);
    if (grad) *grad = tpu_emit_mul(b, g1, g2);
    return x;
  }
  if (grad) *grad = gs_c(g, 1);
  return x;
}

/* The value at integer coordinates ic[k] (int64 [N, Q]) as [N, Q, C], 0
 * outside; *inside: the mask. */
static tpu_hlo_value_t gs_fetch(const gs_t* g, const tpu_hlo_value_t* ic, tpu_hlo_value_t* inside_out,
                                tpu_hlo_value_t* flat_out) {
  tpu_hlo_builder_t* b = g->b;
  tpu_hlo_type_t it = tpu_hlo_type_make(TPU_DTYPE_INT64, 2, (int64_t[]){g->N, g->Q});
  tpu_hlo_value_t inside = tpu_emit_const_like(b, &(tpu_hlo_type_t){.dtype = TPU_DTYPE_BOOL, .rank = 2, .dims = {g->N, g->Q}}, 1);
  tpu_hlo_value_t flat = tpu_emit_mul(b, tpu_emit_iota(b, &it, 0), tpu_emit_const_like(b, &it, (double)g->P));
  int64_t stride = g->P;
  for (int k = 0; k < g->nd; k++) {
    stride /= g->size[k];
    tpu_hlo_value_t in_k = tpu_emit_binary(b, "stablehlo.and", tpu_emit_compare(b, "GE", ic[k], tpu_emit_const_like(b, &it, 0)),
                                           tpu_emit_compare(b, "LT", ic[k], tpu_emit_const_like(b, &it, (double)g->size[k])));
    inside = tpu_emit_binary(b, "stablehlo.and", inside, in_k);
    tpu_hlo_value_t safe = tpu_emit_select(b, in_k, ic[k], tpu_emit_const_like(b, &it, 0));
    flat = tpu_emit_add(b, flat, tpu_emit_mul(b, safe, tpu_emit_const_like(b, &it, (double)stride)));
  }
  int64_t nq = g->N * g->Q, two[2] = {nq, 1};
  tpu_hlo_value_t idx = tpu_emit_reshape(b, flat, two, 2);
  int64_t offset = 1, collapsed = 0, sizes[2] = {1, g->C};
  tpu_hlo_value_t v = tpu_emit_gather(b, g->rows, idx, tpu_hlo_type_make(g->d, 2, (int64_t[]){nq, g->C}), &offset, 1,
                                      &collapsed, &collapsed, 1, sizes);
  v = tpu_emit_reshape(b, v, (int64_t[]){g->N, g->Q, g->C}, 3);
  tpu_hlo_type_t vt = tpu_hlo_value_type(b, v);
  tpu_hlo_type_t mt = vt;
  mt.dtype = TPU_DTYPE_BOOL;
  tpu_hlo_value_t m3 = tpu_emit_broadcast_to(b, tpu_emit_reshape(b, inside, (int64_t[]){g->N, g->Q, 1}, 3), &mt);
  if (inside_out) *inside_out = inside;
  if (flat_out) *flat_out = flat;
  return tpu_emit_select(b, m3, v, tpu_emit_const_like(b, &vt, 0));
}

static tpu_hlo_value_t gs_times(const gs_t* g, tpu_hlo_value_t v3, tpu_hlo_value_t w2) {
  tpu_hlo_type_t vt = tpu_hlo_value_type(g->b, v3);
  return tpu_emit_mul(g->b, v3, tpu_emit_broadcast_to(g->b, tpu_emit_reshape(g->b, w2, (int64_t[]){g->N, g->Q, 1}, 3), &vt));
}


/* cubic convolution coefficients of t (A = -0.75), as emitted values */
static void gs_cubic(const gs_t* g, tpu_hlo_value_t t, tpu_hlo_value_t* c) {
  tpu_hlo_builder_t* b = g->b;
  const double A = -0.75;
  tpu_hlo_value_t x1 = tpu_emit_add(b, t, gs_c(g, 1)), x2 = tpu_emit_sub(b, gs_c(g, 1), t);
  tpu_hlo_value_t x3 = tpu_emit_add(b, x2, gs_c(g, 1));
  /* cc1(x) = ((A + 2) x - (A + 3)) x x + 1; cc2(x) = ((A x - 5A) x + 8A) x - 4A */
#define CC1(x) tpu_emit_add(b, tpu_emit_mul(b, tpu_emit_mul(b, tpu_emit_sub(b, tpu_emit_mul(b, gs_c(g, A + 2), x), gs_c(g, A + 3)), x), x), gs_c(g, 1))
#define CC2(x) tpu_emit_sub(b, tpu_emit_mul(b, tpu_emit_add(b, tpu_emit_mul(b, tpu_emit_sub(b, tpu_emit_mul(b, gs_c(g, A), x), gs_c(g, 5 * A)), x), gs_c(g, 8 * A)), x), gs_c(g, 4 * A))
  c[0] = CC2(x1);
  c[1] = CC1(t);
  c[2] = CC1(x2);
  c[3] = CC2(x3);
#undef CC1
#undef CC2
}

/* Reads the arguments common to forward and backward. */
static tpu_status_t gs_read(tpu_lower_ctx_t* ctx, int in_i, int grid_i, int mode_i, gs_t* g) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  const tpu_lower_arg_t* in = tpu_lower_arg(ctx, in_i);
  const tpu_lower_arg_t* gr = tpu_lower_arg(ctx, grid_i);
  if (in->kind != TPU_ARG_TENSOR || gr->kind != TPU_ARG_TENSOR || !tpu_dtype_is_floating(in->type.dtype) ||
      gr->type.dtype != in->type.dtype || in->type.rank < 4 || in->type.rank > 5 || gr->type.rank != in->type.rank)
    return tpu_lower_decline(ctx, "grid_sampler of these operands");
  g->b = b;
  g->nd = in->type.rank - 2;
  g->mode = (int)tpu_lower_arg(ctx, mode_i)->i;
  g->padding = (int)tpu_lower_arg(ctx, mode_i + 1)->i;
  g->align = tpu_lower_arg(ctx, mode_i + 2)->i != 0;
  if (g->mode < 0 || g->mode > 2 || g->padding < 0 || g->padding > 2 || (g->mode == GS_BICUBIC && g->nd != 2))
    return tpu_lower_decline(ctx, "grid_sampler mode %d padding %d", g->mode, g->padding);
  g->N = in->type.dims[0], g->C = in->type.dims[1], g->P = 1, g->Q = 1;
  for (int k = 0; k < g->nd; k++) g->size[k] = in->type.dims[2 + k], g->P *= g->size[k];
  for (int k = 0; k < g->nd; k++) g->Q *= gr->type.dims[1 + k];
  if (gr->type.dims[gr->type.rank - 1] != g->nd) return tpu_lower_decline(ctx, "grid's last dim");
  /* CPU computes in the input dtype, half types too (each step rounded) */
  g->d = in->type.dtype;
  if (g->N * g->C * g->P * g->Q == 0) return NULL;
  tpu_hlo_value_t x = tpu_emit_convert(b, tpu_lower_tensor(ctx, in_i), g->d);
  /* [N, C, P] -> [N, P, C] -> [N*P, C] */
  x = tpu_emit_reshape(b, x, (int64_t[]){g->N, g->C, g->P}, 3);
  x = tpu_emit_transpose(b, x, (int64_t[]){0, 2, 1});
  g->rows = tpu_emit_reshape(b, x, (int64_t[]){g->N * g->P, g->C}, 2);
  tpu_hlo_value_t grid = tpu_emit_convert(b, tpu_lower_tensor(ctx, grid_i), g->d);
  grid = tpu_emit_reshape(b, grid, (int64_t[]){g->N, g->Q, g->nd}, 3);
  for (int k = 0; k < g->nd; k++) {
    int e = g->nd - 1 - k;  /* grid entry of spatial dim k */
    tpu_hlo_value_t c = tpu_emit_slice(b, grid, (int64_t[]){0, 0, e}, (int64_t[]){g->N, g->Q, e + 1},
                                       (int64_t[]){1, 1, 1});
    g->coord[k] = tpu_emit_reshape(b, c, (int64_t[]){g->N, g->Q}, 2);
  }
  return NULL;
}

/* [N, Q, C] -> the output [N, C, *O] */
static void gs_set(tpu_lower_ctx_t* ctx, int i, const gs_t* g, tpu_hlo_value_t v) {
  tpu_hlo_type_t out = tpu_lower_output_type(ctx, i);
  v = tpu_emit_transpose(g->b, v, (int64_t[]){0, 2, 1});
  tpu_lower_set_output(ctx, i, tpu_emit_convert(g->b, tpu_emit_reshape(g->b, v, out.dims, out.rank), out.dtype));
}

/* grid_sampler_2d / grid_sampler_3d(input, grid, interpolation_mode,
 * padding_mode, align_corners) */
static tpu_status_t lower_grid_sampler(tpu_lower_ctx_t* ctx) {
  gs_t g;
  tpu_status_t st = gs_read(ctx, 0, 1, 2, &g);
  if (st) return st;
  if (g.N * g.C * g.P * g.Q == 0) {
    tpu_hlo_type_t out = tpu_lower_output_type(ctx, 0);
    tpu_lower_set_output(ctx, 0, tpu_emit_const_like(g.b, &out, 0));
    return NULL;
  }
  tpu_hlo_builder_t* b = g.b;
  tpu_hlo_value_t acc = {-1};
  if (g.mode == GS_BICUBIC) {
    tpu_hlo_value_t ux = gs_unnormalize(&g, g.coord[1], g.size[1]), uy = gs_unnormalize(&g, g.coord[0], g.size[0]);
    tpu_hlo_value_t fx = tpu_emit_unary(b, "stablehlo.floor", ux), fy = tpu_emit_unary(b, "stablehlo.floor", uy);
    tpu_hlo_value_t cx[4], cy[4];
    gs_cubic(&g, tpu_emit_sub(b, ux, fx), cx);
    gs_cubic(&g, tpu_emit_sub(b, uy, fy), cy);
    for (int j = 0; j < 4; j++) {
      tpu_hlo_value_t row = {-1};
      for (int i = 0; i < 4; i++) {
        /* each tap's coordinate padded as a float, then truncated */
        tpu_hlo_value_t tx = gs_pad(&g, tpu_emit_add(b, fx, gs_c(&g, i - 1)), g.size[1], NULL);
        tpu_hlo_value_t ty = gs_pad(&g, tpu_emit_add(b, fy, gs_c(&g, j - 1)), g.size[0], NULL);
        tpu_hlo_value_t ic[2] = {tpu_emit_convert(b, ty, TPU_DTYPE_INT64), tpu_emit_convert(b, tx, TPU_DTYPE_INT64)};
        tpu_hlo_value_t term = gs_times(&g, gs_fetch(&g, ic, NULL, NULL), cx[i]);
        row = i == 0 ? term : tpu_emit_add(b, row, term);
      }
      tpu_hlo_value_t term = gs_times(&g, row, cy[j]);
      acc = j == 0 ? term : tpu_emit_add(b, acc, term);
    }
    gs_set(ctx, 0, &g, acc);
    return NULL;
  }
  tpu_hlo_value_t src[3];
  for (int k = 0; k < g.nd; k++) src[k] = gs_pad(&g, gs_unnormalize(&g, g.coord[k], g.size[k]), g.size[k], NULL);
  if (g.mode == GS_NEAREST) {
    tpu_hlo_value_t ic[3];
    for (int k = 0; k < g.nd; k++)
      ic[k] = tpu_emit_convert(b, tpu_emit_unary(b, "stablehlo.round_nearest_even", src[k]), TPU_DTYPE_INT64);
    gs_set(ctx, 0, &g, gs_fetch(&g, ic, NULL, NULL));
    return NULL;
  }
  /* bilinear / trilinear: corners with the outer dim most significant */
  tpu_hlo_value_t lo[3], hi_w[3], lo_w[3], i0[3];
  tpu_hlo_type_t it = tpu_hlo_type_make(TPU_DTYPE_INT64, 2, (int64_t[]){g.N, g.Q});
  for (int k = 0; k < g.nd; k++) {
    lo[k] = tpu_emit_unary(b, "stablehlo.floor", src[k]);
    i0[k] = tpu_emit_convert(b, lo[k], TPU_DTYPE_INT64);
    hi_w[k] = tpu_emit_sub(b, src[k], lo[k]);                           /* weight of the upper corner */
    lo_w[k] = tpu_emit_sub(b, tpu_emit_add(b, lo[k], gs_c(&g, 1)), src[k]); /* of the lower */
  }
  for (int corner = 0; corner < (1 << g.nd); corner++) {
    tpu_hlo_value_t ic[3], w = {-1};
    for (int k = 0; k < g.nd; k++) {
      bool up = corner >> (g.nd - 1 - k) & 1;
      ic[k] = up ? tpu_emit_add(b, i0[k], tpu_emit_const_like(b, &it, 1)) : i0[k];
    }
    for (int k = g.nd - 1; k >= 0; k--) {  /* x's factor first, as CPU multiplies */
      bool up = corner >> (g.nd - 1 - k) & 1;
      tpu_hlo_value_t f = up ? hi_w[k] : lo_w[k];
      w = k == g.nd - 1 ? f : tpu_emit_mul(b, w, f);
    }
    tpu_hlo_value_t term = gs_times(&g, gs_fetch(&g, ic, NULL, NULL), w);
    acc = corner == 0 ? term : tpu_emit_add(b, acc, term);
  }
  gs_set(ctx, 0, &g, acc);
  return NULL;
}

/* grid_sampler_{2,3}d_backward(grad_output, input, grid, interpolation,
 * padding, align_corners, output_mask) -> (grad_input, grad_grid);
 * bilinear / trilinear and nearest (bicubic declines). */
static tpu_status_t lower_grid_sampler_backward(tpu_lower_ctx_t* ctx) {
  gs_t g;
  tpu_status_t st = gs_read(ctx, 1, 2, 3, &g);
  if (st) return st;
  if (g.mode == GS_BICUBIC) return tpu_lower_decline(ctx, "bicubic grid_sampler backward");
  const tpu_lower_arg_t* mask = tpu_lower_arg(ctx, 6);
  bool want[2] = {true, true};
  if (mask->kind == TPU_ARG_INTS)
    for (int i = 0; i < 2 && i < mask->num_ints; i++) want[i] = mask->ints[i] != 0;
  int nout = tpu_lower_num_outputs(ctx);
  if (nout != (int)want[0] + (int)want[1] && nout != 2) return tpu_lower_decline(ctx, "output_mask unknown");
  tpu_hlo_builder_t* b = g.b;
  if (g.N * g.C * g.P * g.Q == 0) {
    for (int i = 0; i < nout; i++) {
      tpu_hlo_type_t t = tpu_lower_output_type(ctx, i);
      tpu_lower_set_output(ctx, i, tpu_emit_const_like(b, &t, 0));
    }
    return NULL;
  }
  /* grad [N, C, *O] -> [N, Q, C] */
  tpu_hlo_value_t go = tpu_emit_convert(b, tpu_lower_tensor(ctx, 0), g.d);
  go = tpu_emit_transpose(b, tpu_emit_reshape(b, go, (int64_t[]){g.N, g.C, g.Q}, 3), (int64_t[]){0, 2, 1});
  tpu_hlo_type_t rows_t = tpu_hlo_type_make(g.d, 2, (int64_t[]){g.N * g.P, g.C});
  tpu_hlo_value_t gin = tpu_emit_const_like(b, &rows_t, 0);
  tpu_hlo_value_t src[3], mult[3];
  for (int k = 0; k < g.nd; k++) {
    tpu_hlo_value_t u = gs_unnormalize(&g, g.coord[k], g.size[k]);
    src[k] = gs_pad(&g, u, g.size[k], &mult[k]);
    double um = g.align ? (double)(g.size[k] - 1) / 2 : (double)g.size[k] / 2;
    mult[k] = tpu_emit_mul(b, mult[k], gs_c(&g, um));
  }
  tpu_hlo_value_t ggrid[3] = {gs_c(&g, 0), gs_c(&g, 0), gs_c(&g, 0)};
  tpu_hlo_type_t it = tpu_hlo_type_make(TPU_DTYPE_INT64, 2, (int64_t[]){g.N, g.Q});
  int64_t nq = g.N * g.Q;
  int corners = g.mode == GS_NEAREST ? 1 : 1 << g.nd;
  tpu_hlo_value_t lo[3], i0[3], hi_w[3], lo_w[3];
  for (int k = 0; k < g.nd; k++) {
    if (g.mode == GS_NEAREST) {
      i0[k] = tpu_emit_convert(b, tpu_emit_unary(b, "stablehlo.round_nearest_even", src[k]), TPU_DTYPE_INT64);
      continue;
    }
    lo[k] = tpu_emit_unary(b, "stablehlo.floor", src[k]);
    i0[k] = tpu_emit_convert(b, lo[k], TPU_DTYPE_INT64);
    hi_w[k] = tpu_emit_sub(b, src[k], lo[k]);
    lo_w[k] = tpu_emit_sub(b, tpu_emit_add(b, lo[k], gs_c(&g, 1)), src[k]);
  }
  for (int corner = 0; corner < corners; corner++) {
    tpu_hlo_value_t ic[3], w = gs_c(&g, 1);
    for (int k = 0; k < g.nd; k++) {
      bool up = g.mode != GS_NEAREST && (corner >> (g.nd - 1 - k) & 1);
      ic[k] = up ? tpu_emit_add(b, i0[k], tpu_emit_const_like(b, &it, 1)) : i0[k];
      if (g.mode != GS_NEAREST) w = tpu_emit_mul(b, w, up ? hi_w[k] : lo_w[k]);
    }
    tpu_hlo_value_t inside, flat;
    tpu_hlo_value_t val = gs_fetch(&g, ic, &inside, &flat);  /* [N, Q, C] */
    if (want[0]) {
      tpu_hlo_value_t contrib = gs_times(&g, go, tpu_emit_select(b, inside, w, gs_c(&g, 0)));
      contrib = tpu_emit_reshape(b, contrib, (int64_t[]){nq, g.C}, 2);
      int64_t win = 1, ins = 0;
      gin = tpu_emit_add(b, gin, tpu_emit_scatter(b, tpu_emit_const_like(b, &rows_t, 0),
                                                   tpu_emit_reshape(b, flat, (int64_t[]){nq, 1}, 2), contrib, &win, 1,
                                                   &ins, &ins, 1, "stablehlo.add"));
    }
    if (want[1] && g.mode != GS_NEAREST) {
      /* d value / d src_k = +-(product of the other dims' weights) */
      int64_t dc = 2;
      tpu_hlo_value_t vg = tpu_emit_reduce(b, tpu_emit_mul(b, val, go), tpu_emit_const(b, g.d, 0), &dc, 1,
                                           "stablehlo.add"); /* [N, Q] */
      for (int k = 0; k < g.nd; k++) {
        bool up = corner >> (g.nd - 1 - k) & 1;
        tpu_hlo_value_t others = gs_c(&g, 1);
        for (int j = 0; j < g.nd; j++)
          if (j != k) others = tpu_emit_mul(b, others, (corner >> (g.nd - 1 - j) & 1) ? hi_w[j] : lo_w[j]);
        tpu_hlo_value_t t = tpu_emit_mul(b, vg, others);
        ggrid[k] = up ? tpu_emit_add(b, ggrid[k], t) : tpu_emit_sub(b, ggrid[k], t);
      }
    }
  }
  int k_out = 0;
  if (want[0]) {
    tpu_hlo_type_t t = tpu_lower_output_type(ctx, k_out);
    tpu_hlo_value_t v = tpu_emit_reshape(b, gin, (int64_t[]){g.N, g.P, g.C}, 3);
    v = tpu_emit_transpose(b, v, (int64_t[]){0, 2, 1});
    tpu_lower_set_output(ctx, k_out++, tpu_emit_convert(b, tpu_emit_reshape(b, v, t.dims, t.rank), t.dtype));
  } else if (nout == 2) {
    tpu_hlo_type_t t = tpu_lower_output_type(ctx, k_out++);
    tpu_lower_set_output(ctx, 0, tpu_emit_const_like(b, &t, 0));
  }
  if (want[1] || nout == 2) {
    tpu_hlo_type_t t = tpu_lower_output_type(ctx, k_out);
    tpu_hlo_value_t parts[3];
    for (int e = 0; e < g.nd; e++) {  /* grid entry e is spatial dim nd - 1 - e */
      int k = g.nd - 1 - e;
      tpu_hlo_value_t v = tpu_emit_mul(b, ggrid[k], mult[k]);
      parts[e] = tpu_emit_reshape(b, v, (int64_t[]){g.N, g.Q, 1}, 3);
    }
    tpu_hlo_value_t cat = tpu_hlo_op(b, "stablehlo.concatenate", parts, g.nd,
                                     tpu_hlo_type_make(g.d, 3, (int64_t[]){g.N, g.Q, g.nd}), "dimension = 2 : i64");
    if (!want[1] || g.mode == GS_NEAREST) cat = tpu_emit_const_like(b, &(tpu_hlo_type_t){.dtype = g.d, .rank = 3, .dims = {g.N, g.Q, g.nd}}, 0);
    tpu_lower_set_output(ctx, k_out, tpu_emit_convert(b, tpu_emit_reshape(b, cat, t.dims, t.rank), t.dtype));
  }
  return NULL;
}

const tpu_lowering_t tpu_lowerings_resample[] = {
    {"upsample_nearest1d", lower_upsample_nearest, 0, 0},
    {"upsample_nearest2d", lower_upsample_nearest, 0, 0},
    {"upsample_nearest3d", lower_upsample_nearest, 0, 0},
    {"_upsample_nearest_exact1d", lower_upsample_nearest, 0, RESAMPLE_EXACT},
    {"_upsample_nearest_exact2d", lower_upsample_nearest, 0, RESAMPLE_EXACT},
    {"_upsample_nearest_exact3d", lower_upsample_nearest, 0, RESAMPLE_EXACT},
    {"upsample_nearest1d_backward", lower_upsample_nearest, 0, RESAMPLE_BACKWARD},
    {"upsample_nearest2d_backward", lower_upsample_nearest, 0, RESAMPLE_BACKWARD},
    {"upsample_nearest3d_backward", lower_upsample_nearest, 0, RESAMPLE_BACKWARD},
    {"_upsample_nearest_exact1d_backward", lower_upsample_nearest, 0, RESAMPLE_EXACT | RESAMPLE_BACKWARD},
    {"_upsample_nearest_exact2d_backward", lower_upsample_nearest, 0, RESAMPLE_EXACT | RESAMPLE_BACKWARD},
    {"_upsample_nearest_exact3d_backward", lower_upsample_nearest, 0, RESAMPLE_EXACT | RESAMPLE_BACKWARD},
    {"upsample_linear1d", lower_upsample_taps, 0, 0},
    {"upsample_bilinear2d", lower_upsample_taps, 0, 0},
    {"upsample_trilinear3d", lower_upsample_taps, 0, 0},
    {"upsample_linear1d_backward", lower_upsample_taps, 0, RESAMPLE_BACKWARD},
    {"upsample_bilinear2d_backward", lower_upsample_taps, 0, RESAMPLE_BACKWARD},
    {"upsample_trilinear3d_backward", lower_upsample_taps, 0, RESAMPLE_BACKWARD},
    {"upsample_bicubic2d", lower_upsample_taps, 0, RESAMPLE_CUBIC},
    {"upsample_bicubic2d_backward", lower_upsample_taps, 0, RESAMPLE_CUBIC | RESAMPLE_BACKWARD},
    {"grid_sampler_2d", lower_grid_sampler, 0},
    {"grid_sampler_3d", lower_grid_sampler, 0},
    {"grid_sampler_2d_backward", lower_grid_sampler_backward, 0},
    {"grid_sampler_3d_backward", lower_grid_sampler_backward, 0},
};
const size_t tpu_lowerings_resample_count = sizeof tpu_lowerings_resample / sizeof tpu_lowerings_resample[0];
