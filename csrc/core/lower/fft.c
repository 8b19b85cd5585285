/* fft family of the lowering table (see lowering.h): _fft_r2c, _fft_c2c,
 * _fft_c2r, which every torch.fft function reaches, as stablehlo.fft
 * (FFT, IFFT, RFFT, IRFFT over the trailing dims: the transformed dims are
 * moved there, in order, and back). HLO's inverse transforms divide by the
 * signal size and its forward ones do not; PyTorch's normalization
 * (0: none, 1: 1/sqrt(n), 2: 1/n, n the product of the transformed sizes)
 * applies to the unnormalized transform in both directions. Up to three
 * dims (HLO's limit) per call; more are declined. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "emit.h"
#include "lowering.h"

typedef struct fft_dims_s {
  int n;                          /* transformed dims, in call order */
  int dims[3];
  int perm[TPU_HLO_MAX_RANK];     /* to the trailing position */
  int64_t iperm[TPU_HLO_MAX_RANK];
} fft_dims_t;

static bool read_dims(const tpu_lower_arg_t* a, int rank, fft_dims_t* f) {
  if (a->kind != TPU_ARG_INTS || a->num_ints < 1 || a->num_ints > 3 || rank < 1) return false;
  bool used[TPU_HLO_MAX_RANK] = {0};
  f->n = a->num_ints;
  for (int k = 0; k < f->n; k++) {
    int64_t d = a->ints[k] < 0 ? a->ints[k] + rank : a->ints[k];
    if (d < 0 || d >= rank || used[d]) return false;
    used[d] = true;
    f->dims[k] = (int)d;
  }
  int p = 0;
  for (int d = 0; d < rank; d++)
    if (!used[d]) f->perm[p++] = d;
  for (int k = 0; k < f->n; k++) f->perm[p++] = f->dims[k];
  for (int d = 0; d < rank; d++) f->iperm[f->perm[d]] = d;
  return true;
}

static tpu_hlo_value_t permute(tpu_hlo_builder_t* b, tpu_hlo_value_t x, const int* perm) {
  tpu_hlo_type_t t = tpu_hlo_value_type(b, x);
  int64_t p[TPU_HLO_MAX_RANK];
  for (int d = 0; d < t.rank; d++) p[d] = perm[d];
  return tpu_emit_transpose(b, x, p);
}

static tpu_hlo_value_t unpermute(tpu_hlo_builder_t* b, tpu_hlo_value_t x, const fft_dims_t* f) {
  return tpu_emit_transpose(b, x, f->iperm);
}

/* stablehlo.fft of the trailing f->n dims of x, `lengths` the signal sizes
 * (IRFFT: the real output's), into `out` (its type after the transform). */
static tpu_hlo_value_t fft(tpu_hlo_builder_t* b, tpu_hlo_value_t x, const char* kind,
                           const int64_t* lengths, int n, tpu_hlo_type_t out) {
  char len[96], attrs[160];
  tpu_emit_i64_array(len, sizeof len, lengths, n);
  snprintf(attrs, sizeof attrs, "fft_type = #stablehlo<fft_type %s>, fft_length = %s", kind, len);
  return tpu_hlo_op(b, "stablehlo.fft", &x, 1, out, attrs);
}

/* PyTorch's scale for normalization mode `norm` over a signal of `count`
 * elements, times `extra` (n, to undo HLO's 1/n on inverse transforms). */
static tpu_hlo_value_t scale(tpu_hlo_builder_t* b, tpu_hlo_value_t x, int64_t norm, double count,
                             double extra) {
  double s = extra * (norm == 1 ? 1.0 / sqrt(count) : norm == 2 ? 1.0 / count : 1.0);
  if (s == 1.0) return x;
  tpu_hlo_type_t t = tpu_hlo_value_type(b, x);
  return tpu_emit_mul(b, x, tpu_emit_const_like(b, &t, s));
}

static bool is_complex_of(tpu_dtype_t c, tpu_dtype_t r) {
  return (c == TPU_DTYPE_COMPLEX64 && r == TPU_DTYPE_FLOAT32) ||
         (c == TPU_DTYPE_COMPLEX128 && r == TPU_DTYPE_FLOAT64);
}

/* The signal sizes of the transformed dims, read from `sizes` (the
 * input's, or for c2r the real output's); returns their product. */
static double signal(const fft_dims_t* f, const int64_t* sizes, int64_t* lengths) {
  double count = 1;
  for (int k = 0; k < f->n; k++) lengths[k] = sizes[f->dims[k]], count *= (double)lengths[k];
  return count;
}

static int64_t numel(const tpu_hlo_type_t* t) {
  int64_t n = 1;
  for (int d = 0; d < t->rank; d++) n *= t->dims[d];
  return n;
}

/* What every transform reads: self, dim, normalization, the output type. */
typedef struct fft_call_s {
  tpu_hlo_builder_t* b;
  const tpu_lower_arg_t* x;
  tpu_hlo_type_t out;
  fft_dims_t f;
  int64_t norm;
} fft_call_t;

/* False (the caller declines) unless self is a non-empty tensor and dim
 * names at most three distinct dims of it. */
static bool read_call(tpu_lower_ctx_t* ctx, fft_call_t* c) {
  c->b = tpu_lower_builder(ctx);
  c->x = tpu_lower_arg(ctx, 0);
  c->out = tpu_lower_output_type(ctx, 0);
  c->norm = tpu_lower_arg(ctx, 2)->i;
  return c->x->kind == TPU_ARG_TENSOR && read_dims(tpu_lower_arg(ctx, 1), c->x->type.rank, &c->f) &&
         numel(&c->x->type) > 0 && numel(&c->out) > 0;
}

/* _fft_r2c(self, dim, normalization, onesided): real -> complex; the last
 * transformed dim keeps n/2 + 1 bins when onesided, else all (a complex
 * FFT of the real signal). */
static tpu_status_t lower_fft_r2c(tpu_lower_ctx_t* ctx) {
  fft_call_t c;
  if (!read_call(ctx, &c) || !is_complex_of(c.out.dtype, c.x->type.dtype))
    return tpu_lower_decline(ctx, "r2c of %s", tpu_dtype_name(c.x->type.dtype));
  tpu_hlo_builder_t* b = c.b;
  fft_dims_t f = c.f;
  bool onesided = tpu_lower_arg(ctx, 3)->i != 0;
  int64_t lengths[3];
  double count = signal(&f, c.x->type.dims, lengths);
  tpu_hlo_value_t v = permute(b, tpu_lower_tensor(ctx, 0), f.perm);
  tpu_hlo_type_t vt = tpu_hlo_value_type(b, v);
  tpu_hlo_type_t ft = vt;
  ft.dtype = c.out.dtype;
  if (onesided) {
    ft.dims[ft.rank - 1] = lengths[f.n - 1] / 2 + 1;
    v = fft(b, v, "RFFT", lengths, f.n, ft);
  } else {
    v = fft(b, tpu_emit_convert(b, v, c.out.dtype), "FFT", lengths, f.n, ft);
  }
  tpu_lower_set_output(ctx, 0, unpermute(b, scale(b, v, c.norm, count, 1.0), &f));
  return NULL;
}

/* _fft_c2c(self, dim, normalization, forward). */
static tpu_status_t lower_fft_c2c(tpu_lower_ctx_t* ctx) {
  fft_call_t c;
  if (!read_call(ctx, &c) || !tpu_dtype_is_complex(c.x->type.dtype) || c.out.dtype != c.x->type.dtype)
    return tpu_lower_decline(ctx, "c2c of %s", tpu_dtype_name(c.x->type.dtype));
  tpu_hlo_builder_t* b = c.b;
  fft_dims_t f = c.f;
  bool forward = tpu_lower_arg(ctx, 3)->i != 0;
  int64_t lengths[3];
  double count = signal(&f, c.x->type.dims, lengths);
  tpu_hlo_value_t v = permute(b, tpu_lower_tensor(ctx, 0), f.perm);
  v = fft(b, v, forward ? "FFT" : "IFFT", lengths, f.n, tpu_hlo_value_type(b, v));
  tpu_lower_set_output(ctx, 0, unpermute(b, scale(b, v, c.norm, count, forward ? 1.0 : count), &f));
  return NULL;
}

/* _fft_c2r(self, dim, normalization, last_dim_size): the inverse of a
 * one-sided transform, the last dim's real length last_dim_size (its
 * input bins cut or zero-padded to last_dim_size / 2 + 1, as PyTorch's
 * kernels read them). */
static tpu_status_t lower_fft_c2r(tpu_lower_ctx_t* ctx) {
  fft_call_t c;
  if (!read_call(ctx, &c) || !is_complex_of(c.x->type.dtype, c.out.dtype))
    return tpu_lower_decline(ctx, "c2r of %s", tpu_dtype_name(c.x->type.dtype));
  tpu_hlo_builder_t* b = c.b;
  fft_dims_t f = c.f;
  int64_t lengths[3];
  double count = signal(&f, c.out.dims, lengths);
  tpu_hlo_value_t v = permute(b, tpu_lower_tensor(ctx, 0), f.perm);
  tpu_hlo_type_t vt = tpu_hlo_value_type(b, v);
  int64_t bins = lengths[f.n - 1] / 2 + 1, have = vt.dims[vt.rank - 1];
  if (have != bins) {
    /* cut, or pad with zeros */
    int64_t start[TPU_HLO_MAX_RANK] = {0}, limit[TPU_HLO_MAX_RANK], stride[TPU_HLO_MAX_RANK];
    for (int d = 0; d < vt.rank; d++) limit[d] = vt.dims[d], stride[d] = 1;
    if (have > bins) {
      limit[vt.rank - 1] = bins;
      v = tpu_emit_slice(b, v, start, limit, stride);
    } else {
      tpu_hlo_type_t pt = vt;
      pt.dims[pt.rank - 1] = bins - have;
      tpu_hlo_type_t ct = vt;
      ct.dims[ct.rank - 1] = bins;
      tpu_hlo_value_t parts[2] = {v, tpu_emit_const_like(b, &pt, 0)};
      char attrs[40];
      snprintf(attrs, sizeof attrs, "dimension = %d : i64", vt.rank - 1);
      v = tpu_hlo_op(b, "stablehlo.concatenate", parts, 2, ct, attrs);
    }
  }
  tpu_hlo_type_t rt = tpu_hlo_value_type(b, v);
  rt.dtype = c.out.dtype;
  rt.dims[rt.rank - 1] = lengths[f.n - 1];
  v = fft(b, v, "IRFFT", lengths, f.n, rt);
  tpu_lower_set_output(ctx, 0, unpermute(b, scale(b, v, c.norm, count, count), &f));
  return NULL;
}

const tpu_lowering_t tpu_lowerings_fft[] = {
    {"_fft_r2c", lower_fft_r2c, 0},
    {"_fft_c2c", lower_fft_c2c, 0},
    {"_fft_c2r", lower_fft_c2r, 0},
};
const size_t tpu_lowerings_fft_count = sizeof tpu_lowerings_fft / sizeof tpu_lowerings_fft[0];
