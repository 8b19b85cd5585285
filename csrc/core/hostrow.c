#include "hostrow.h"

#include <immintrin.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "env.h"
#include "hlo/signature.h"
#include "hlo/strbuf.h"
#include "hlo/type.h"
#include "hostffi.h"
#include "hostsimd.h"

static atomic_bool g_registered;

/* The handlers' targets and the markers' kind words, by target: the
 * softmaxes' kinds, then layer_norm and the softmaxes' gradients. */
static const char* const kTargets[TPU_HOSTROW_NUM_KINDS + 3] = {
    "torchtpu_row_softmax",    "torchtpu_row_log_softmax",    "torchtpu_row_safe_softmax",
    "torchtpu_row_layer_norm", "torchtpu_row_softmax_bwd", "torchtpu_row_log_softmax_bwd"};
static const char* const kWords[TPU_HOSTROW_NUM_KINDS + 3] = {
    "softmax", "log_softmax", "safe_softmax", "layer_norm", "softmax_bwd", "log_softmax_bwd"};

const char* tpu_hostrow_kind_name(tpu_hostrow_kind_t kind) {
  return kind >= 0 && kind < TPU_HOSTROW_NUM_KINDS ? kWords[kind] : "?";
}

bool tpu_hostrow_active(void) { return atomic_load(&g_registered); }

/* ---- the kernel ------------------------------------------------------------- */

/* Whether a row whose max came out -inf is all -inf: a NaN the max
 * skipped makes it a row of NaN instead (PyTorch tests x == -inf). */
static bool all_minus_inf(const float* x, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    if (x[i] != -INFINITY) return false;
  return true;
}

/* One row, scalar (no AVX2, and the tails of the AVX2 rows). The stable
 * forms of lower/nn.c: m = max, e = exp(x - m), s = sum e; softmax e * (1 /
 * s), log_softmax (x - m) - log(s). A NaN anywhere gives a row of NaN, as
 * there (x - m or s is NaN); a row of -inf gives NaN (-inf - -inf), or
 * zeros for safe_softmax. */
static void row_scalar(tpu_hostrow_kind_t kind, const float* x, float* y, int64_t n) {
  float m = -INFINITY;
  for (int64_t i = 0; i < n; i++) m = x[i] > m ? x[i] : m;
  if (kind == TPU_HOSTROW_SAFE_SOFTMAX && m == -INFINITY && all_minus_inf(x, n)) {
    memset(y, 0, (size_t)n * sizeof *y);
    return;
  }
  float s = 0;
  for (int64_t i = 0; i < n; i++) s += expf(x[i] - m);
  if (kind == TPU_HOSTROW_LOG_SOFTMAX) {
    float ls = logf(s);
    for (int64_t i = 0; i < n; i++) y[i] = (x[i] - m) - ls;
    return;
  }
  float inv = 1.0f / s;
  for (int64_t i = 0; i < n; i++) y[i] = expf(x[i] - m) * inv;
}

/* One row in 8-float vectors (n >= 8), the tail scalar. The row stays in
 * L1 between its passes: max, then exp and its sum (stored for softmax),
 * then the scaling. */
__attribute__((target("avx2,fma"))) static void row_avx2(tpu_hostrow_kind_t kind,
                                                         const float* x, float* y, int64_t n) {
  int64_t nv = n & ~(int64_t)7;
  /* Two accumulators hide the max's latency; a NaN may be dropped from
   * the max, but then x - m is NaN and so is the row, as wanted. */
  __m256 m0 = _mm256_set1_ps(-INFINITY), m1 = m0;
  int64_t i = 0;
  for (; i + 16 <= nv; i += 16) {
    m0 = _mm256_max_ps(m0, _mm256_loadu_ps(x + i));
    m1 = _mm256_max_ps(m1, _mm256_loadu_ps(x + i + 8));
  }
  if (i < nv) m0 = _mm256_max_ps(m0, _mm256_loadu_ps(x + i));
  float m = hmax8(_mm256_max_ps(m0, m1));
  for (i = nv; i < n; i++) m = x[i] > m ? x[i] : m;
  if (kind == TPU_HOSTROW_SAFE_SOFTMAX && m == -INFINITY && all_minus_inf(x, n)) {
    memset(y, 0, (size_t)n * sizeof *y);
    return;
  }
  __m256 vm = _mm256_set1_ps(m), s8 = _mm256_setzero_ps();
  bool store = kind != TPU_HOSTROW_LOG_SOFTMAX;
  for (i = 0; i < nv; i += 8) {
    __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm));
    if (store) _mm256_storeu_ps(y + i, e);
    s8 = _mm256_add_ps(s8, e);
  }
  float s = hsum8(s8);
  for (i = nv; i < n; i++) {
    float e = expf(x[i] - m);
    if (store) y[i] = e;
    s += e;
  }
  if (!store) {
    __m256 ls = _mm256_set1_ps(logf(s));
    for (i = 0; i < nv; i += 8)
      _mm256_storeu_ps(y + i, _mm256_sub_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm), ls));
    for (i = nv; i < n; i++) y[i] = (x[i] - m) - logf(s);
    return;
  }
  __m256 inv = _mm256_set1_ps(1.0f / s);
  for (i = 0; i < nv; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(y + i), inv));
  for (i = nv; i < n; i++) y[i] *= 1.0f / s;
}

#define WIDE __attribute__((target("avx512f,avx2,fma")))

/* The lanes [0, left) of 16 (all when left >= 16). */
WIDE static __mmask16 lanes16(int64_t left) {
  return left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1);
}

/* row_avx2's passes in 16-float vectors, the tail in masked ones: the
 * exp pass is most of a softmax, and AVX-512 does it in half the
 * instructions (128x512 on one thread: 44 us in AVX2). */
WIDE static void row_avx512(tpu_hostrow_kind_t kind, const float* x, float* y, int64_t n) {
  __m512 m0 = _mm512_set1_ps(-INFINITY), m1 = m0;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    m0 = _mm512_max_ps(m0, _mm512_loadu_ps(x + i));
    m1 = _mm512_max_ps(m1, _mm512_loadu_ps(x + i + 16));
  }
  for (; i < n; i += 16) {
    __mmask16 k = lanes16(n - i);
    m0 = _mm512_mask_max_ps(m0, k, m0, _mm512_maskz_loadu_ps(k, x + i));
  }
  float m = hmax16(_mm512_max_ps(m0, m1));
  if (kind == TPU_HOSTROW_SAFE_SOFTMAX && m == -INFINITY && all_minus_inf(x, n)) {
    memset(y, 0, (size_t)n * sizeof *y);
    return;
  }
  __m512 vm = _mm512_set1_ps(m), s16 = _mm512_setzero_ps();
  bool store = kind != TPU_HOSTROW_LOG_SOFTMAX;
  for (i = 0; i < n; i += 16) {
    __mmask16 k = lanes16(n - i);
    __m512 e = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + i), vm));
    if (store) _mm512_mask_storeu_ps(y + i, k, e);
    s16 = _mm512_mask_add_ps(s16, k, s16, e);
  }
  float s = hsum16(s16);
  if (!store) {
    __m512 ls = _mm512_set1_ps(logf(s));
    for (i = 0; i < n; i += 16) {
      __mmask16 k = lanes16(n - i);
      __m512 v = _mm512_sub_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + i), vm), ls);
      _mm512_mask_storeu_ps(y + i, k, v);
    }
    return;
  }
  __m512 inv = _mm512_set1_ps(1.0f / s);
  for (i = 0; i < n; i += 16) {
    __mmask16 k = lanes16(n - i);
    _mm512_mask_storeu_ps(y + i, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, y + i), inv));
  }
}

void tpu_hostrow_compute(tpu_hostrow_kind_t kind, const float* x, float* y, int64_t rows,
                         int64_t n) {
  bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  bool wide = tpu_hostffi_wide();
  for (int64_t r = 0; r < rows; r++) {
    if (wide && n >= 16) row_avx512(kind, x + r * n, y + r * n, n);
    else if (avx2 && n >= 8) row_avx2(kind, x + r * n, y + r * n, n);
    else row_scalar(kind, x + r * n, y + r * n, n);
  }
}

static void norm_scalar(const float* x, const float* w, const float* b, float eps, float* y,
                        float* mean_out, float* rstd_out, int64_t n) {
  float s = 0, ss = 0;
  for (int64_t i = 0; i < n; i++) s += x[i];
  float mean = s / (float)n;
  for (int64_t i = 0; i < n; i++) ss += (x[i] - mean) * (x[i] - mean);
  float rstd = 1.0f / sqrtf(ss / (float)n + eps);
  *mean_out = mean;
  *rstd_out = rstd;
  for (int64_t i = 0; i < n; i++) {
    float v = (x[i] - mean) * rstd;
    if (w) v *= w[i];
    if (b) v += b[i];
    y[i] = v;
  }
}

/* Two passes for the moments (the mean, then the centered squares), as
 * lower/nn.c's moments: no cancellation for rows far from zero. */
__attribute__((target("avx2,fma"))) static void norm_avx2(const float* x, const float* w,
                                                          const float* b, float eps, float* y,
                                                          float* mean_out, float* rstd_out,
                                                          int64_t n) {
  int64_t nv = n & ~(int64_t)7, i;
  /* Four accumulators per sum, in registers: one would wait out the
   * add's latency on every vector (a 128x512 layer_norm took 30 us). */
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (i = 0; i + 32 <= nv; i += 32) {
    a0 = _mm256_add_ps(a0, _mm256_loadu_ps(x + i));
    a1 = _mm256_add_ps(a1, _mm256_loadu_ps(x + i + 8));
    a2 = _mm256_add_ps(a2, _mm256_loadu_ps(x + i + 16));
    a3 = _mm256_add_ps(a3, _mm256_loadu_ps(x + i + 24));
  }
  for (; i < nv; i += 8) a0 = _mm256_add_ps(a0, _mm256_loadu_ps(x + i));
  float s = hsum8(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
  for (i = nv; i < n; i++) s += x[i];
  float mean = s / (float)n;
  __m256 vm = _mm256_set1_ps(mean);
  a0 = a1 = a2 = a3 = _mm256_setzero_ps();
  for (i = 0; i + 32 <= nv; i += 32) {
    __m256 d0 = _mm256_sub_ps(_mm256_loadu_ps(x + i), vm);
    __m256 d1 = _mm256_sub_ps(_mm256_loadu_ps(x + i + 8), vm);
    __m256 d2 = _mm256_sub_ps(_mm256_loadu_ps(x + i + 16), vm);
    __m256 d3 = _mm256_sub_ps(_mm256_loadu_ps(x + i + 24), vm);
    a0 = _mm256_fmadd_ps(d0, d0, a0);
    a1 = _mm256_fmadd_ps(d1, d1, a1);
    a2 = _mm256_fmadd_ps(d2, d2, a2);
    a3 = _mm256_fmadd_ps(d3, d3, a3);
  }
  for (; i < nv; i += 8) {
    __m256 d = _mm256_sub_ps(_mm256_loadu_ps(x + i), vm);
    a0 = _mm256_fmadd_ps(d, d, a0);
  }
  float ss = hsum8(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
  for (i = nv; i < n; i++) ss += (x[i] - mean) * (x[i] - mean);
  float rstd = 1.0f / sqrtf(ss / (float)n + eps);
  *mean_out = mean;
  *rstd_out = rstd;
  __m256 vr = _mm256_set1_ps(rstd);
  for (i = 0; i < nv; i += 8) {
    __m256 v = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm), vr);
    if (w) v = _mm256_mul_ps(v, _mm256_loadu_ps(w + i));
    if (b) v = _mm256_add_ps(v, _mm256_loadu_ps(b + i));
    _mm256_storeu_ps(y + i, v);
  }
  for (i = nv; i < n; i++) {
    float v = (x[i] - mean) * rstd;
    if (w) v *= w[i];
    if (b) v += b[i];
    y[i] = v;
  }
}

void tpu_hostrow_layer_norm(const float* x, const float* w, const float* b, float eps,
                            float* y, float* mean, float* rstd, int64_t rows, int64_t n) {
  bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  for (int64_t r = 0; r < rows; r++) {
    float m, rs;
    if (avx2 && n >= 8) norm_avx2(x + r * n, w, b, eps, y + r * n, &m, &rs, n);
    else norm_scalar(x + r * n, w, b, eps, y + r * n, &m, &rs, n);
    if (mean) mean[r] = m;
    if (rstd) rstd[r] = rs;
  }
}

/* The softmaxes' gradients over one row: softmax y * (g - sum(g * y)),
 * log_softmax g - exp(y) * sum(g), as lower/nn.c's forms. */
static void bwd_scalar(bool log, const float* g, const float* y, float* out, int64_t n) {
  float s = 0;
  for (int64_t i = 0; i < n; i++) s += log ? g[i] : g[i] * y[i];
  for (int64_t i = 0; i < n; i++) out[i] = log ? g[i] - expf(y[i]) * s : y[i] * (g[i] - s);
}

__attribute__((target("avx2,fma"))) static void bwd_avx2(bool log, const float* g,
                                                         const float* y, float* out, int64_t n) {
  int64_t nv = n & ~(int64_t)7, i;
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0; /* four: see norm_avx2 */
  if (log) {
    for (i = 0; i + 32 <= nv; i += 32) {
      a0 = _mm256_add_ps(a0, _mm256_loadu_ps(g + i));
      a1 = _mm256_add_ps(a1, _mm256_loadu_ps(g + i + 8));
      a2 = _mm256_add_ps(a2, _mm256_loadu_ps(g + i + 16));
      a3 = _mm256_add_ps(a3, _mm256_loadu_ps(g + i + 24));
    }
    for (; i < nv; i += 8) a0 = _mm256_add_ps(a0, _mm256_loadu_ps(g + i));
  } else {
    for (i = 0; i + 32 <= nv; i += 32) {
      a0 = _mm256_fmadd_ps(_mm256_loadu_ps(g + i), _mm256_loadu_ps(y + i), a0);
      a1 = _mm256_fmadd_ps(_mm256_loadu_ps(g + i + 8), _mm256_loadu_ps(y + i + 8), a1);
      a2 = _mm256_fmadd_ps(_mm256_loadu_ps(g + i + 16), _mm256_loadu_ps(y + i + 16), a2);
      a3 = _mm256_fmadd_ps(_mm256_loadu_ps(g + i + 24), _mm256_loadu_ps(y + i + 24), a3);
    }
    for (; i < nv; i += 8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(g + i), _mm256_loadu_ps(y + i), a0);
  }
  float s = hsum8(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
  for (i = nv; i < n; i++) s += log ? g[i] : g[i] * y[i];
  __m256 vs = _mm256_set1_ps(s);
  for (i = 0; i < nv; i += 8) {
    __m256 gv = _mm256_loadu_ps(g + i), yv = _mm256_loadu_ps(y + i);
    _mm256_storeu_ps(out + i, log ? _mm256_fnmadd_ps(exp8(yv), vs, gv)
                                  : _mm256_mul_ps(yv, _mm256_sub_ps(gv, vs)));
  }
  for (i = nv; i < n; i++) out[i] = log ? g[i] - expf(y[i]) * s : y[i] * (g[i] - s);
}

/* bwd_avx2 in 16-float vectors, the tail masked. */
WIDE static void bwd_avx512(bool log, const float* g, const float* y, float* out, int64_t n) {
  __m512 a0 = _mm512_setzero_ps(), a1 = a0;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m512 g0 = _mm512_loadu_ps(g + i), g1 = _mm512_loadu_ps(g + i + 16);
    a0 = log ? _mm512_add_ps(a0, g0) : _mm512_fmadd_ps(g0, _mm512_loadu_ps(y + i), a0);
    a1 = log ? _mm512_add_ps(a1, g1) : _mm512_fmadd_ps(g1, _mm512_loadu_ps(y + i + 16), a1);
  }
  for (; i < n; i += 16) {
    __mmask16 k = lanes16(n - i);
    __m512 gv = _mm512_maskz_loadu_ps(k, g + i);
    a0 = log ? _mm512_add_ps(a0, gv) : _mm512_fmadd_ps(gv, _mm512_maskz_loadu_ps(k, y + i), a0);
  }
  __m512 vs = _mm512_set1_ps(hsum16(_mm512_add_ps(a0, a1)));
  for (i = 0; i < n; i += 16) {
    __mmask16 k = lanes16(n - i);
    __m512 gv = _mm512_maskz_loadu_ps(k, g + i), yv = _mm512_maskz_loadu_ps(k, y + i);
    _mm512_mask_storeu_ps(out + i, k, log ? _mm512_fnmadd_ps(exp16(yv), vs, gv)
                                          : _mm512_mul_ps(yv, _mm512_sub_ps(gv, vs)));
  }
}

void tpu_hostrow_softmax_backward(bool log, const float* g, const float* y, float* out,
                                  int64_t rows, int64_t n) {
  bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  bool wide = tpu_hostffi_wide();
  for (int64_t r = 0; r < rows; r++) {
    if (wide && n >= 16) bwd_avx512(log, g + r * n, y + r * n, out + r * n, n);
    else if (avx2 && n >= 8) bwd_avx2(log, g + r * n, y + r * n, out + r * n, n);
    else bwd_scalar(log, g + r * n, y + r * n, out + r * n, n);
  }
}

/* ---- the FFI handlers ------------------------------------------------------- */

/* Parts of at least this many elements (15-40 us of work each). Handing
 * a part to a pool thread costs waking it, and in Strict mode that thread
 * takes the core the host needs for the next op: with parts of 16384
 * (4 us of a layer_norm) a stream of 128x512 layer_norms ran at 27-49 us
 * an op, on one thread at 23. */
enum { kPartElems = 65536, kMinElems = 4096 };

typedef struct {
  int kind; /* a tpu_hostrow_kind_t, or one of the targets past them */
  const float *x, *w, *b;
  float eps;
  float *y, *mean, *rstd;
  int64_t rows, n;
  int parts;
} rows_job_t;

/* Targets past the softmaxes' kinds. */
enum { kLayerNorm = TPU_HOSTROW_NUM_KINDS, kSoftmaxBwd, kLogSoftmaxBwd, kNumTargets };

static void rows_part(void* ctx, int part) {
  const rows_job_t* j = ctx;
  int64_t lo = j->rows * part / j->parts, hi = j->rows * (part + 1) / j->parts;
  if (j->kind == kSoftmaxBwd || j->kind == kLogSoftmaxBwd) /* x: the gradient, w: the output */
    tpu_hostrow_softmax_backward(j->kind == kLogSoftmaxBwd, j->x + lo * j->n, j->w + lo * j->n,
                                 j->y + lo * j->n, hi - lo, j->n);
  else if (j->kind == kLayerNorm)
    tpu_hostrow_layer_norm(j->x + lo * j->n, j->w, j->b, j->eps, j->y + lo * j->n, j->mean + lo,
                           j->rstd + lo, hi - lo, j->n);
  else
    tpu_hostrow_compute(j->kind, j->x + lo * j->n, j->y + lo * j->n, hi - lo, j->n);
}

/* Cuts the job in parts of at least kPartElems elements, at most one per
 * pool thread, and runs them. */
static void run_job(XLA_FFI_CallFrame* frame, rows_job_t* j) {
  int64_t by_size = j->rows * j->n / kPartElems;
  int threads = tpu_hostffi_threads(frame);
  j->parts = by_size < threads ? (int)(by_size < 1 ? 1 : by_size) : threads;
  if (j->parts > j->rows) j->parts = (int)j->rows;
  tpu_hostffi_parallel(frame, j->parts, rows_part, j);
}

/* The softmaxes (x) and their gradients (g, y): float32 operands shaped
 * as the result, rows of its last dim. */
static XLA_FFI_Error* run_rows(XLA_FFI_CallFrame* frame, int kind) {
  if (tpu_hostffi_answer_metadata(frame)) return NULL;
  if (frame->stage != XLA_FFI_ExecutionStage_EXECUTE) return NULL;
  int64_t nargs = kind == kSoftmaxBwd || kind == kLogSoftmaxBwd ? 2 : 1;
  if (frame->args.size != nargs || frame->rets.size != 1 ||
      frame->rets.types[0] != XLA_FFI_RetType_BUFFER)
    return tpu_hostffi_error(frame, "torchtpu host softmax: expected its buffers in, one out");
  const XLA_FFI_Buffer* out = frame->rets.rets[0];
  int64_t r = out->rank, rows = 1;
  if (r < 1 || out->dtype != XLA_FFI_DataType_F32)
    return tpu_hostffi_error(frame, "torchtpu host softmax: expected a float32 result");
  for (int64_t i = 0; i < nargs; i++) {
    const XLA_FFI_Buffer* in = frame->args.args[i];
    if (frame->args.types[i] != XLA_FFI_ArgType_BUFFER || in->dtype != XLA_FFI_DataType_F32 ||
        in->rank != r)
      return tpu_hostffi_error(frame, "torchtpu host softmax: expected float32 tensors alike");
    for (int64_t d = 0; d < r; d++)
      if (in->dims[d] != out->dims[d])
        return tpu_hostffi_error(frame, "torchtpu host softmax: shapes differ");
  }
  for (int64_t d = 0; d < r - 1; d++) rows *= out->dims[d];
  int64_t n = out->dims[r - 1];
  if (rows == 0 || n == 0) return NULL;
  /* the gradients: x is g, w is y */
  rows_job_t j = {.kind = kind,
                  .x = ((const XLA_FFI_Buffer*)frame->args.args[0])->data,
                  .w = nargs == 2 ? ((const XLA_FFI_Buffer*)frame->args.args[1])->data : NULL,
                  .y = out->data,
                  .rows = rows,
                  .n = n};
  run_job(frame, &j);
  return NULL;
}

static XLA_FFI_Error* softmax_handler(XLA_FFI_CallFrame* f) {
  return run_rows(f, TPU_HOSTROW_SOFTMAX);
}
static XLA_FFI_Error* log_softmax_handler(XLA_FFI_CallFrame* f) {
  return run_rows(f, TPU_HOSTROW_LOG_SOFTMAX);
}
static XLA_FFI_Error* safe_softmax_handler(XLA_FFI_CallFrame* f) {
  return run_rows(f, TPU_HOSTROW_SAFE_SOFTMAX);
}
static XLA_FFI_Error* softmax_bwd_handler(XLA_FFI_CallFrame* f) {
  return run_rows(f, kSoftmaxBwd);
}
static XLA_FFI_Error* log_softmax_bwd_handler(XLA_FFI_CallFrame* f) {
  return run_rows(f, kLogSoftmaxBwd);
}

/* layer_norm(x[, w[, b]]) {eps: f32, n: i64} -> (y, mean, rstd): rows
 * of n; mean and rstd one float a row. */
static XLA_FFI_Error* layer_norm_handler(XLA_FFI_CallFrame* frame) {
  if (tpu_hostffi_answer_metadata(frame)) return NULL;
  if (frame->stage != XLA_FFI_ExecutionStage_EXECUTE) return NULL;
  float eps;
  int64_t n;
  int64_t nargs = frame->args.size;
  if (nargs < 1 || nargs > 3 || frame->rets.size != 3 ||
      !tpu_hostffi_scalar_attr(frame, "eps", XLA_FFI_DataType_F32, &eps) ||
      !tpu_hostffi_scalar_attr(frame, "n", XLA_FFI_DataType_S64, &n) || n < 1)
    return tpu_hostffi_error(frame, "torchtpu host layer_norm: expected x[, w[, b]], eps, n");
  const XLA_FFI_Buffer* in[3] = {NULL, NULL, NULL};
  for (int64_t i = 0; i < nargs; i++) {
    if (frame->args.types[i] != XLA_FFI_ArgType_BUFFER)
      return tpu_hostffi_error(frame, "torchtpu host layer_norm: expected buffers");
    in[i] = frame->args.args[i];
    if (in[i]->dtype != XLA_FFI_DataType_F32)
      return tpu_hostffi_error(frame, "torchtpu host layer_norm: expected float32");
  }
  const XLA_FFI_Buffer* out[3];
  int64_t count[3];
  for (int i = 0; i < 3; i++) {
    if (frame->rets.types[i] != XLA_FFI_RetType_BUFFER)
      return tpu_hostffi_error(frame, "torchtpu host layer_norm: expected buffers");
    out[i] = frame->rets.rets[i];
    count[i] = 1;
    for (int64_t d = 0; d < out[i]->rank; d++) count[i] *= out[i]->dims[d];
    if (out[i]->dtype != XLA_FFI_DataType_F32)
      return tpu_hostffi_error(frame, "torchtpu host layer_norm: expected float32");
  }
  int64_t numel = count[0];
  for (int i = 1; i < nargs; i++) {
    int64_t wn = 1;
    for (int64_t d = 0; d < in[i]->rank; d++) wn *= in[i]->dims[d];
    if (wn != n) return tpu_hostffi_error(frame, "torchtpu host layer_norm: weight size != n");
  }
  if (numel % n || count[1] != numel / n || count[2] != numel / n)
    return tpu_hostffi_error(frame, "torchtpu host layer_norm: results do not match");
  if (numel == 0) return NULL;
  rows_job_t j = {.kind = kLayerNorm,
                  .x = in[0]->data,
                  .w = in[1] ? in[1]->data : NULL,
                  .b = in[2] ? in[2]->data : NULL,
                  .eps = eps,
                  .y = out[0]->data,
                  .mean = out[1]->data,
                  .rstd = out[2]->data,
                  .rows = numel / n,
                  .n = n};
  run_job(frame, &j);
  return NULL;
}

/* The softmaxes by kind, then layer_norm and the softmaxes' gradients. */
static XLA_FFI_Handler* const kHandlers[kNumTargets] = {
    softmax_handler,    log_softmax_handler,     safe_softmax_handler,
    layer_norm_handler, softmax_bwd_handler, log_softmax_bwd_handler};

/* Compiled once before the rewrite is turned on (tpu_hostffi_register). */
static const char kProbe[] =
    "module @torchtpu_row_probe {\n"
    "  func.func public @main(%arg0: tensor<2x2xf32>) -> (tensor<2x2xf32>) {\n"
    "    %0 = \"stablehlo.custom_call\"(%arg0) {api_version = 4 : i32, "
    "call_target_name = \"torchtpu_row_softmax\"} : (tensor<2x2xf32>) -> tensor<2x2xf32>\n"
    "    \"func.return\"(%0) : (tensor<2x2xf32>) -> ()\n"
    "  }\n"
    "}\n";

void tpu_hostrow_register(tpu_client_t* client) {
  if (!client || !tpu_client_is_cpu(client) || tpu_env_get_int("TORCHTPU_HOST_ROW", 1) == 0 ||
      tpu_env_get_int("TORCHTPU_HOST_GEMM", 1) == 0)
    return;
  atomic_store(&g_registered, tpu_hostffi_register(client, kTargets, kHandlers,
                                                   kNumTargets, kProbe,
                                                   "host softmax"));
}

/* ---- the text rewrite ------------------------------------------------------- */

static const char kMark[] = "torchtpu_row = \"";

/* The marker's words (kind, operands, ...): up to kMaxWords. */
enum { kMaxWords = 8 };
static int marker_words(const char* mark, const char* eol, const char** word, size_t* len) {
  return tpu_hostffi_marker_words(mark + sizeof kMark - 1, eol, word, len, kMaxWords);
}

static bool word_is(const char* w, size_t len, const char* s) {
  return len == strlen(s) && memcmp(w, s, len) == 0;
}


/* One marked line to rewrite. A layer_norm is marked on the last of its
 * three results (rstd, an identity reshape emitted after the output and
 * the mean's identity): the call, made there, defines all three, and the
 * lines that defined the other two (nothing reads them before) are
 * dropped. */
typedef struct {
  const char* line;
  const char* eol;
  int kind, nops;
  const char* word[kMaxWords];
  size_t len[kMaxWords];
  tpu_hlo_type_t t, w, m; /* input/output, weight, mean/rstd */
  int64_t n;
  double eps;
} plan_t;

/* Fills p for marked line [line, eol) of the function [fn, fn_end); false
 * when it is not one to rewrite. */
static bool plan_line(plan_t* p, const char* fn, const char* fn_end, const char* line,
                      const char* eol) {
  const char* mark = memmem(line, (size_t)(eol - line), kMark, sizeof kMark - 1);
  const char* op = memmem(line, (size_t)(eol - line), " = \"stablehlo.", 14);
  if (!mark || !op || op > mark) return false;
  *p = (plan_t){.line = line, .eol = eol, .kind = -1, .nops = 1};
  int nw = marker_words(mark, eol, p->word, p->len);
  if (nw < 2 || p->word[1][0] != '%') return false;
  for (int k = 0; k < kNumTargets; k++)
    if (word_is(p->word[0], p->len[0], kWords[k])) p->kind = k;
  bool bwd = p->kind == kSoftmaxBwd || p->kind == kLogSoftmaxBwd;
  if (p->kind < 0 || nw != (p->kind == kLayerNorm ? 8 : bwd ? 3 : 2)) return false;
  if (bwd && p->word[2][0] != '%') return false;
  p->nops = bwd ? 2 : 1;
  if (p->kind != kLayerNorm) {
    return tpu_hostffi_result_type(line, eol, &p->t) && p->t.dtype == TPU_DTYPE_FLOAT32 &&
           p->t.rank >= 1 && tpu_hlo_type_numel(&p->t) >= kMinElems;
  }
  /* layer_norm x w|- b|- k eps y mean: the output's type from its line */
  if (!tpu_hostffi_result_type(line, eol, &p->m) || p->m.dtype != TPU_DTYPE_FLOAT32) return false;
  bool found = false;
  for (const char* l = fn; l < line && !found;) {
    const char* e = memchr(l, '\n', (size_t)(fn_end - l));
    if (!e) e = fn_end;
    if (tpu_hostffi_defines(l, e, p->word[6], p->len[6]))
      found = tpu_hostffi_result_type(l, e, &p->t);
    l = e + 1;
  }
  char num[64];
  if (!found || p->t.dtype != TPU_DTYPE_FLOAT32 || tpu_hlo_type_numel(&p->t) < kMinElems ||
      p->len[4] >= sizeof num || p->len[5] >= sizeof num)
    return false;
  memcpy(num, p->word[4], p->len[4]);
  num[p->len[4]] = '\0';
  int k = atoi(num);
  memcpy(num, p->word[5], p->len[5]);
  num[p->len[5]] = '\0';
  p->eps = strtod(num, NULL);
  bool has_w = !word_is(p->word[2], p->len[2], "-"), has_b = !word_is(p->word[3], p->len[3], "-");
  if (k < 1 || k > p->t.rank || (has_b && !has_w)) return false;
  p->nops = 1 + has_w + has_b;
  p->w = p->t;
  p->w.rank = k;
  p->n = 1;
  for (int d = 0; d < k; d++) p->n *= p->w.dims[d] = p->t.dims[p->t.rank - k + d];
  return tpu_hlo_type_numel(&p->m) * p->n == tpu_hlo_type_numel(&p->t);
}

/* The custom call of plan p (and, for layer_norm, the identities naming
 * its three results), replacing p's line. */
static void append_call(tpu_strbuf_t* sb, const plan_t* p) {
  const char* op = memmem(p->line, (size_t)(p->eol - p->line), " = \"stablehlo.", 14);
  bool ln = p->kind == kLayerNorm;
  const char* name = p->line;
  while (*name == ' ') name++;
  int indent = (int)(name - p->line);
  int name_len = (int)(op - name);
  if (ln) tpu_strbuf_appendf(sb, "%*s%%ln%.*s:3", indent, "", name_len - 1, name + 1);
  else tpu_strbuf_append_n(sb, p->line, (size_t)(op - p->line));
  tpu_strbuf_append(sb, ln ? " = \"stablehlo.custom_call\"(" : " = \"stablehlo.custom_call\"(");
  for (int i = 0; i < p->nops; i++) {
    if (i) tpu_strbuf_append(sb, ", ");
    tpu_strbuf_append_n(sb, p->word[1 + i], p->len[1 + i]);
  }
  tpu_strbuf_append(sb, ") {api_version = 4 : i32, ");
  if (ln)
    tpu_strbuf_appendf(sb, "backend_config = {eps = %.9e : f32, n = %lld : i64}, ", p->eps,
                       (long long)p->n);
  tpu_strbuf_appendf(sb, "call_target_name = \"%s\", operand_layouts = [", kTargets[p->kind]);
  for (int i = 0; i < p->nops; i++) {
    if (i) tpu_strbuf_append(sb, ", ");
    tpu_hostffi_append_layout(sb, i && ln ? p->w.rank : p->t.rank);
  }
  tpu_strbuf_append(sb, "], result_layouts = [");
  tpu_hostffi_append_layout(sb, p->t.rank);
  if (ln) {
    tpu_strbuf_append(sb, ", ");
    tpu_hostffi_append_layout(sb, p->m.rank);
    tpu_strbuf_append(sb, ", ");
    tpu_hostffi_append_layout(sb, p->m.rank);
  }
  tpu_strbuf_append(sb, "]} : (");
  for (int i = 0; i < p->nops; i++) {
    if (i) tpu_strbuf_append(sb, ", ");
    tpu_hlo_type_append(sb, i && ln ? &p->w : &p->t);
  }
  tpu_strbuf_append(sb, ") -> ");
  if (!ln) {
    tpu_hlo_type_append(sb, &p->t);
    return;
  }
  tpu_strbuf_append(sb, "(");
  tpu_hlo_type_append(sb, &p->t);
  tpu_strbuf_append(sb, ", ");
  tpu_hlo_type_append(sb, &p->m);
  tpu_strbuf_append(sb, ", ");
  tpu_hlo_type_append(sb, &p->m);
  tpu_strbuf_append(sb, ")\n");
  /* y, mean, rstd under their names */
  const char* names[3] = {p->word[6], p->word[7], name};
  size_t lens[3] = {p->len[6], p->len[7], (size_t)name_len};
  const tpu_hlo_type_t* types[3] = {&p->t, &p->m, &p->m};
  tpu_hostffi_append_results(sb, indent, "ln", name + 1, name_len - 1, names, lens, types, 3);
}

/* A layer_norm's call also defines its output and mean: their lines go. */
static bool drops(const void* plan, const char* line, const char* eol) {
  const plan_t* p = plan;
  return p->kind == kLayerNorm && (tpu_hostffi_defines(line, eol, p->word[6], p->len[6]) ||
                                   tpu_hostffi_defines(line, eol, p->word[7], p->len[7]));
}

static bool plan_any(void* plan, const char* fn, const char* fn_end, const char* line,
                     const char* eol) {
  return plan_line(plan, fn, fn_end, line, eol);
}

static void append_any(tpu_strbuf_t* sb, const void* plan) { append_call(sb, plan); }

tpu_status_t tpu_hostrow_rewrite(const char* text, size_t len, char** out_text,
                                 size_t* out_len) {
  static const tpu_hostffi_rewriter_t kRewriter = {
      .mark = kMark, .plan_size = sizeof(plan_t), .plan_line = plan_any, .drops = drops,
      .append = append_any, .what = "rewriting a program's softmaxes and layer_norms"};
  return tpu_hostffi_rewrite(&kRewriter, text, len, out_text, out_len);
}
