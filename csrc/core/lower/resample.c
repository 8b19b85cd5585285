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

/* upsample_nearest{1,2,3}d / _upsample_nearest_exact{1,2,3}d(self,
 * output_size, scales...): a gather per spatial dim. */
static tpu_status_t lower_upsample_nearest_common(tpu_lower_ctx_t* ctx, bool exact) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  /* CPU's and CUDA's kernels take floats and uint8 only: the fallback
   * raises their NotImplementedError for the rest. */
  tpu_dtype_t dt = tpu_lower_arg(ctx, 0)->type.dtype;
  if (!tpu_dtype_is_floating(dt) && dt != TPU_DTYPE_UINT8)
    return tpu_lower_decline(ctx, "%s", tpu_dtype_name(dt));
  const tpu_lower_arg_t* osz = tpu_lower_arg(ctx, 1);
  if (osz->kind != TPU_ARG_INTS) return tpu_lower_decline(ctx, "output_size not given");
  tpu_hlo_value_t v = tpu_lower_tensor(ctx, 0);
  tpu_hlo_type_t t = tpu_hlo_value_type(b, v);
  int k = osz->num_ints;
  int64_t idx[MAX_UPSAMPLE]; /* 32 KiB on the stack: lowerings may run on several threads */
  for (int i = 0; i < k; i++) {
    int dim = t.rank - k + i;
    int64_t in = t.dims[dim], out = osz->ints[i];
    if (out > MAX_UPSAMPLE) return tpu_lower_decline(ctx, "output size over %d", MAX_UPSAMPLE);
    if (in == out) continue;
    nearest_indices(in, out, tpu_lower_arg(ctx, 2 + i), exact, idx);
    v = gather_dim(b, v, dim, idx, out);
  }
  tpu_lower_set_output(ctx, 0, v);
  return NULL;
}
static tpu_status_t lower_upsample_nearest(tpu_lower_ctx_t* ctx) {
  return lower_upsample_nearest_common(ctx, false);
}
static tpu_status_t lower_upsample_nearest_exact(tpu_lower_ctx_t* ctx) {
  return lower_upsample_nearest_common(ctx, true);
}

/* ..._backward(grad_output, output_size, input_size, scales...): the
 * scatter-add transpose, in float32 for halves. */
static tpu_status_t lower_upsample_nearest_bwd_common(tpu_lower_ctx_t* ctx, bool exact) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  if (!tpu_dtype_is_floating(tpu_lower_output_type(ctx, 0).dtype))
    return tpu_lower_decline(ctx, "non-floating upsample grad");
  const tpu_lower_arg_t* osz = tpu_lower_arg(ctx, 1);
  const tpu_lower_arg_t* isz = tpu_lower_arg(ctx, 2);
  if (osz->kind != TPU_ARG_INTS || isz->kind != TPU_ARG_INTS)
    return tpu_lower_decline(ctx, "sizes not given");
  tpu_dtype_t od = tpu_lower_output_type(ctx, 0).dtype;
  tpu_hlo_value_t g = tpu_emit_convert(b, tpu_lower_tensor(ctx, 0), math_dtype(od));
  tpu_hlo_type_t t = tpu_hlo_value_type(b, g);
  int k = osz->num_ints;
  int64_t idx[MAX_UPSAMPLE]; /* 32 KiB on the stack: lowerings may run on several threads */
  for (int i = 0; i < k; i++) {
    int dim = t.rank - k + i;
    int64_t in = isz->ints[dim], out = osz->ints[i];
    if (out > MAX_UPSAMPLE) return tpu_lower_decline(ctx, "output size over %d", MAX_UPSAMPLE);
    if (in == out) continue;
    nearest_indices(in, out, tpu_lower_arg(ctx, 3 + i), exact, idx);
    g = scatter_add_dim(b, g, dim, idx, out, in);
  }
  tpu_lower_set_output(ctx, 0, tpu_emit_convert(b, g, od));
  return NULL;
}
static tpu_status_t lower_upsample_nearest_bwd(tpu_lower_ctx_t* ctx) {
  return lower_upsample_nearest_bwd_common(ctx, false);
}
static tpu_status_t lower_upsample_nearest_exact_bwd(tpu_lower_ctx_t* ctx) {
  return lower_upsample_nearest_bwd_common(ctx, true);
}

/* ---- linear and cubic ---- */


/* upsample_{linear1d,bilinear2d,trilinear3d,bicubic2d}(self, output_size,
 * align_corners, scales...) and their _backward(grad_output, output_size,
 * input_size, align_corners, scales...). */
static tpu_status_t resample(tpu_lower_ctx_t* ctx, bool cubic, bool backward) {
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

static tpu_status_t lower_upsample_linear(tpu_lower_ctx_t* ctx) { return resample(ctx, false, false); }
static tpu_status_t lower_upsample_linear_bwd(tpu_lower_ctx_t* ctx) { return resample(ctx, false, true); }
static tpu_status_t lower_upsample_cubic(tpu_lower_ctx_t* ctx) { return resample(ctx, true, false); }
static tpu_status_t lower_upsample_cubic_bwd(tpu_lower_ctx_t* ctx) { return resample(ctx, true, true); }

const tpu_lowering_t tpu_lowerings_resample[] = {
    {"upsample_nearest1d", lower_upsample_nearest, 0},
    {"upsample_nearest2d", lower_upsample_nearest, 0},
    {"upsample_nearest3d", lower_upsample_nearest, 0},
    {"_upsample_nearest_exact1d", lower_upsample_nearest_exact, 0},
    {"_upsample_nearest_exact2d", lower_upsample_nearest_exact, 0},
    {"_upsample_nearest_exact3d", lower_upsample_nearest_exact, 0},
    {"upsample_nearest1d_backward", lower_upsample_nearest_bwd, 0},
    {"upsample_nearest2d_backward", lower_upsample_nearest_bwd, 0},
    {"upsample_nearest3d_backward", lower_upsample_nearest_bwd, 0},
    {"_upsample_nearest_exact1d_backward", lower_upsample_nearest_exact_bwd, 0},
    {"_upsample_nearest_exact2d_backward", lower_upsample_nearest_exact_bwd, 0},
    {"_upsample_nearest_exact3d_backward", lower_upsample_nearest_exact_bwd, 0},
    {"upsample_linear1d", lower_upsample_linear, 0},
    {"upsample_bilinear2d", lower_upsample_linear, 0},
    {"upsample_trilinear3d", lower_upsample_linear, 0},
    {"upsample_linear1d_backward", lower_upsample_linear_bwd, 0},
    {"upsample_bilinear2d_backward", lower_upsample_linear_bwd, 0},
    {"upsample_trilinear3d_backward", lower_upsample_linear_bwd, 0},
    {"upsample_bicubic2d", lower_upsample_cubic, 0},
    {"upsample_bicubic2d_backward", lower_upsample_cubic_bwd, 0},
};
const size_t tpu_lowerings_resample_count = sizeof tpu_lowerings_resample / sizeof tpu_lowerings_resample[0];
