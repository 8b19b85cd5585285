#include "hostattn.h"

#include <immintrin.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "env.h"
#include "hlo/strbuf.h"
#include "hlo/type.h"
#include "hostffi.h"
#include "hostsimd.h"

static atomic_bool g_registered;

bool tpu_hostattn_active(void) { return atomic_load(&g_registered); }

/* ---- the kernel ------------------------------------------------------------- */

/* The kernel is compiled for AVX2 and FMA, and only registered where the
 * CPU has them (XLA keeps attention elsewhere). It works on tiles of TR
 * query rows: their scores against 8 keys at a time stay in registers
 * while the head dim is summed (a key vector loaded once serves TR rows),
 * and the products with v, k and q go 8 columns at a time the same way. */
#define KERNEL __attribute__((target("avx2,fma")))
enum { TR = 4 };

static bool cpu_has_avx2(void) {
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

/* Mask of the first n (< 8) lanes. */
KERNEL static inline __m256i lanes(int64_t n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* out[r][j] = alpha * sum_c x[r][c] yt[c][j] for r < nr, j < n (yt: rows
 * of ldy >= n rounded up to 8, zero past n). */
KERNEL static inline __attribute__((always_inline)) void tile_nt_k(const float* x, int64_t ldx, int nr, const float* yt, int64_t ldy,
                           int64_t n, int64_t kdim, float alpha, float* out, int64_t ldo) {
  for (int64_t j = 0; j < n; j += 8) {
    __m256 acc[TR] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                      _mm256_setzero_ps()};
    for (int64_t c = 0; c < kdim; c++) {
      __m256 y = _mm256_loadu_ps(yt + c * ldy + j);
      #pragma GCC unroll 4
      for (int r = 0; r < nr; r++)
        acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(x[r * ldx + c]), y, acc[r]);
    }
    #pragma GCC unroll 4
    for (int r = 0; r < nr; r++)
      _mm256_storeu_ps(out + r * ldo + j, _mm256_mul_ps(acc[r], _mm256_set1_ps(alpha)));
  }
}

/* out[r][e] = sum_j p[r][j] y[j][e] for r < nr, e < cols, j < n. */
KERNEL static inline __attribute__((always_inline)) void tile_nn_k(const float* p, int64_t ldp, int nr, int64_t n, const float* y,
                           int64_t cols, float* out, int64_t ldo) {
  for (int64_t e = 0; e < cols; e += 8) {
    __m256i m = lanes(cols - e < 8 ? cols - e : 8);
    __m256 acc[TR] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                      _mm256_setzero_ps()};
    for (int64_t j = 0; j < n; j++) {
      __m256 v = _mm256_maskload_ps(y + j * cols + e, m);
      #pragma GCC unroll 4
      for (int r = 0; r < nr; r++)
        acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(p[r * ldp + j]), v, acc[r]);
    }
    #pragma GCC unroll 4
    for (int r = 0; r < nr; r++) _mm256_maskstore_ps(out + r * ldo + e, m, acc[r]);
  }
}

/* out[j][e] += sum_r p[r][j] x[r][e] for j < n, r < nr, e < cols. */
KERNEL static inline __attribute__((always_inline)) void tile_tn_k(const float* p, int64_t ldp, int nr, int64_t n, const float* x,
                           int64_t cols, float* out) {
  for (int64_t e = 0; e < cols; e += 8) {
    __m256i m = lanes(cols - e < 8 ? cols - e : 8);
    __m256 xr[TR];
    #pragma GCC unroll 4
    for (int r = 0; r < nr; r++) xr[r] = _mm256_maskload_ps(x + r * cols + e, m);
    for (int64_t j = 0; j < n; j++) {
      __m256 acc = _mm256_maskload_ps(out + j * cols + e, m);
      #pragma GCC unroll 4
      for (int r = 0; r < nr; r++) acc = _mm256_fmadd_ps(_mm256_set1_ps(p[r * ldp + j]), xr[r], acc);
      _mm256_maskstore_ps(out + j * cols + e, m, acc);
    }
  }
}

/* The tiles with the row count a constant, so the row loops unroll and
 * the accumulators stay in registers. */
#define BY_ROWS(call) \
  switch (nr) {       \
    case 1: call(1); break; \
    case 2: call(2); break; \
    case 3: call(3); break; \
    default: call(TR); break; \
  }

KERNEL static void tile_nt(const float* x, int64_t ldx, int nr, const float* yt, int64_t ldy,
                           int64_t n, int64_t kdim, float alpha, float* out, int64_t ldo) {
#define CALL(k) tile_nt_k(x, ldx, k, yt, ldy, n, kdim, alpha, out, ldo)
  BY_ROWS(CALL)
#undef CALL
}

KERNEL static void tile_nn(const float* p, int64_t ldp, int nr, int64_t n, const float* y,
                           int64_t cols, float* out, int64_t ldo) {
#define CALL(k) tile_nn_k(p, ldp, k, n, y, cols, out, ldo)
  BY_ROWS(CALL)
#undef CALL
}

KERNEL static void tile_tn(const float* p, int64_t ldp, int nr, int64_t n, const float* x,
                           int64_t cols, float* out) {
#define CALL(k) tile_tn_k(p, ldp, k, n, x, cols, out)
  BY_ROWS(CALL)
#undef CALL
}

/* exp_shift's 16-float vectors (AVX-512: half the instructions for the
 * exps, a quarter of the kernel's time), the last 8 in AVX2. */
__attribute__((target("avx512f,avx2,fma"))) static float exp_shift_wide(float* x, int64_t n,
                                                                       float m) {
  __m512 vm = _mm512_set1_ps(m), acc = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(x + i), vm));
    _mm512_storeu_ps(x + i, e);
    acc = _mm512_add_ps(acc, e);
  }
  float sum = hsum16(acc);
  if (i < n) {
    __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), _mm256_set1_ps(m)));
    _mm256_storeu_ps(x + i, e);
    sum += hsum8(e);
  }
  return sum;
}

/* e = exp(x - m) in place over n floats (a multiple of 8); returns
 * their sum. */
KERNEL static float exp_shift(float* x, int64_t n, float m) {
  if (tpu_hostffi_wide()) return exp_shift_wide(x, n, m);
  __m256 vm = _mm256_set1_ps(m), acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n; i += 8) {
    __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm));
    _mm256_storeu_ps(x + i, e);
    acc = _mm256_add_ps(acc, e);
  }
  return hsum8(acc);
}

/* The max of n floats (a multiple of 8): -inf for a row of -inf, NaN
 * when it holds a NaN (which a max would skip). */
KERNEL static float row_max(const float* x, int64_t n) {
  __m256 m = _mm256_set1_ps(-INFINITY), nan = _mm256_setzero_ps();
  for (int64_t i = 0; i < n; i += 8) {
    __m256 v = _mm256_loadu_ps(x + i);
    m = _mm256_max_ps(m, v);
    nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  }
  return _mm256_movemask_ps(nan) ? NAN : hmax8(m);
}

/* ds = p * (ds - rowsum) * scale over n floats (a multiple of 8). */
KERNEL static void softmax_grad(const float* p, float* ds, int64_t n, float rowsum, float scale) {
  __m256 vr = _mm256_set1_ps(rowsum), vs = _mm256_set1_ps(scale);
  for (int64_t i = 0; i < n; i += 8) {
    __m256 d = _mm256_sub_ps(_mm256_loadu_ps(ds + i), vr);
    _mm256_storeu_ps(ds + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(p + i), d), vs));
  }
}

/* One slice's working set: k^T and v^T with rows padded to sp (a
 * multiple of 8, zeros past s), a tile's scores and (backward) dp. */
typedef struct {
  int64_t sp;
  float *kt, *vt, *sc, *dp; /* [d][sp], [dv][sp], [TR][sp], [TR][sp] */
} scratch_t;

static bool scratch_make(scratch_t* w, const tpu_hostattn_t* a) {
  w->sp = (a->s + 7) / 8 * 8;
  size_t n = (size_t)(a->d + a->dv + 2 * TR) * (size_t)w->sp;
  float* mem = calloc(n, sizeof(float));
  if (!mem) return false;
  w->kt = mem;
  w->vt = mem + a->d * w->sp;
  w->sc = w->vt + a->dv * w->sp;
  w->dp = w->sc + TR * w->sp;
  return true;
}

/* t[c][r] = x[r][c] for x of rows x cols (t's rows ld apart). */
static void transpose(const float* x, int64_t rows, int64_t cols, float* t, int64_t ld) {
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < cols; c++) t[c * ld + r] = x[r * cols + c];
}

/* Scores of rows [i, i + nr) of slice b into w->sc: keys [0, n) (the
 * causal ones of the tile's last row), bias added, keys after a row's
 * position -inf when causal. Returns n. */
KERNEL static int64_t scores(const tpu_hostattn_t* a, const scratch_t* w, int64_t b, int64_t i,
                             int nr) {
  int64_t n = a->causal && i + nr < a->s ? i + nr : a->s;
  tile_nt(a->q + (b * a->l + i) * a->d, a->d, nr, w->kt, w->sp, n, a->d, a->scale, w->sc, w->sp);
  for (int r = 0; r < nr; r++) {
    float* row = w->sc + r * w->sp;
    if (a->bias) {
      const float* m = a->bias + (b * a->l + i + r) * a->s;
      for (int64_t j = 0; j < n; j++) row[j] += m[j];
    }
    /* keys after the row's position, and the padding to 8 */
    int64_t first = a->causal && i + r + 1 < n ? i + r + 1 : n;
    for (int64_t j = first; j < (n + 7) / 8 * 8; j++) row[j] = -INFINITY;
  }
  return n;
}

KERNEL bool tpu_hostattn_forward(const tpu_hostattn_t* a, int64_t lo, int64_t hi) {
  scratch_t w;
  if (!scratch_make(&w, a)) return false;
  for (int64_t b = lo; b < hi; b++) {
    transpose(a->k + b * a->s * a->d, a->s, a->d, w.kt, w.sp);
    const float* v = a->v + b * a->s * a->dv;
    for (int64_t i = 0; i < a->l; i += TR) {
      int nr = a->l - i < TR ? (int)(a->l - i) : TR;
      int64_t n = scores(a, &w, b, i, nr);
      const int64_t n8 = (n + 7) / 8 * 8;
      float inv[TR];
      for (int r = 0; r < nr; r++) {
        float* row = w.sc + r * w.sp;
        float m = row_max(row, n8), *lse = a->lse + b * a->l + i + r;
        if (m == -INFINITY || m != m) {
          /* every key masked: zeros; a NaN among the scores: NaN */
          memset(row, 0, (size_t)n8 * sizeof(float));
          inv[r] = m != m ? NAN : 0;
          *lse = m;
          continue;
        }
        float sum = exp_shift(row, n8, m);
        inv[r] = 1.0f / sum;
        *lse = m + logf(sum);
      }
      float* out = a->out + (b * a->l + i) * a->dv;
      tile_nn(w.sc, w.sp, nr, n, v, a->dv, out, a->dv);
      for (int r = 0; r < nr; r++)
        for (int64_t e = 0; e < a->dv; e++) out[r * a->dv + e] *= inv[r];
    }
  }
  free(w.kt);
  return true;
}

KERNEL bool tpu_hostattn_backward(const tpu_hostattn_t* a, int64_t lo, int64_t hi) {
  scratch_t w;
  if (!scratch_make(&w, a)) return false;
  for (int64_t b = lo; b < hi; b++) {
    transpose(a->k + b * a->s * a->d, a->s, a->d, w.kt, w.sp);
    transpose(a->v + b * a->s * a->dv, a->s, a->dv, w.vt, w.sp);
    const float* k = a->k + b * a->s * a->d;
    float* dk = a->dk + b * a->s * a->d;
    float* dv = a->dvv + b * a->s * a->dv;
    memset(dk, 0, (size_t)(a->s * a->d) * sizeof(float));
    memset(dv, 0, (size_t)(a->s * a->dv) * sizeof(float));
    for (int64_t i = 0; i < a->l; i += TR) {
      int nr = a->l - i < TR ? (int)(a->l - i) : TR;
      const int64_t r0 = b * a->l + i;
      const float *g = a->g + r0 * a->dv, *q = a->q + r0 * a->d;
      int64_t n = scores(a, &w, b, i, nr);
      tile_nt(g, a->dv, nr, w.vt, w.sp, n, a->dv, 1.0f, w.dp, w.sp); /* g v^T */
      for (int r = 0; r < nr; r++) {
        float *p = w.sc + r * w.sp, *ds = w.dp + r * w.sp, lse = a->fwd_lse[r0 + r];
        if (lse == -INFINITY) { /* a masked row: no gradient */
          memset(p, 0, (size_t)n * sizeof(float));
          memset(ds, 0, (size_t)n * sizeof(float));
          continue;
        }
        exp_shift(p, (n + 7) / 8 * 8, lse);
        float rowsum = 0;
        const float *gr = g + r * a->dv, *o = a->fwd_out + (r0 + r) * a->dv;
        for (int64_t e = 0; e < a->dv; e++) rowsum += gr[e] * o[e];
        softmax_grad(p, ds, (n + 7) / 8 * 8, rowsum, a->scale);
      }
      tile_nn(w.dp, w.sp, nr, n, k, a->d, a->dq + r0 * a->d, a->d); /* ds k */
      tile_tn(w.dp, w.sp, nr, n, q, a->d, dk);                      /* ds^T q */
      tile_tn(w.sc, w.sp, nr, n, g, a->dv, dv);                     /* p^T g */
    }
  }
  free(w.kt);
  return true;
}

/* ---- the handlers ------------------------------------------------------------ */

typedef struct {
  const tpu_hostattn_t* a;
  bool backward;
  int parts;
  atomic_bool failed;
} job_t;

static void job_part(void* ctx, int part) {
  job_t* j = ctx;
  int64_t lo = j->a->bh * part / j->parts, hi = j->a->bh * (part + 1) / j->parts;
  bool ok = j->backward ? tpu_hostattn_backward(j->a, lo, hi) : tpu_hostattn_forward(j->a, lo, hi);
  if (!ok) atomic_store(&j->failed, true);
}

/* A float32 buffer of `rank` dims (the call's argument i, or result i
 * when ret), or NULL. */
static const XLA_FFI_Buffer* f32_buf(const XLA_FFI_CallFrame* f, bool ret, int64_t i,
                                     int64_t rank) {
  if (i >= (ret ? f->rets.size : f->args.size)) return NULL;
  if (ret ? f->rets.types[i] != XLA_FFI_RetType_BUFFER : f->args.types[i] != XLA_FFI_ArgType_BUFFER)
    return NULL;
  const XLA_FFI_Buffer* b = ret ? f->rets.rets[i] : f->args.args[i];
  return b->dtype == XLA_FFI_DataType_F32 && b->rank == rank ? b : NULL;
}

/* Whether b is [batch..., d0(, d1)] with q's batch dims (nb of them);
 * d1 < 0: no last dim. */
static bool dims_are(const XLA_FFI_Buffer* b, const XLA_FFI_Buffer* q, int64_t nb, int64_t d0,
                     int64_t d1) {
  if (!b) return false;
  for (int64_t i = 0; i < nb; i++)
    if (b->dims[i] != q->dims[i]) return false;
  return b->dims[nb] == d0 && (d1 < 0 || b->dims[nb + 1] == d1);
}

/* fwd(q, k, v[, bias]) {causal, scale} -> (out, lse);
 * bwd(q, k, v[, bias], g, out, lse) {causal, scale} -> (dq, dk, dv). */
static XLA_FFI_Error* run(XLA_FFI_CallFrame* f, bool backward) {
  if (tpu_hostffi_answer_metadata(f)) return NULL;
  if (f->stage != XLA_FFI_ExecutionStage_EXECUTE) return NULL;
  static const char kBad[] = "torchtpu host attention: unexpected operands";
  int64_t causal;
  float scale;
  int64_t base = backward ? 3 : 0; /* g, out, lse after q, k, v[, bias] */
  bool bias = f->args.size == (backward ? 7 : 4);
  if (f->args.size != (backward ? 6 : 3) + bias ||
      !tpu_hostffi_scalar_attr(f, "causal", XLA_FFI_DataType_S64, &causal) ||
      !tpu_hostffi_scalar_attr(f, "scale", XLA_FFI_DataType_F32, &scale))
    return tpu_hostffi_error(f, kBad);
  /* q, k, v, out, bias: [batch..., rows, cols] of one rank; lse one less */
  const XLA_FFI_Buffer* q = f->args.size ? f->args.args[0] : NULL;
  int64_t r = q && f->args.types[0] == XLA_FFI_ArgType_BUFFER ? q->rank : 0;
  if (r < 3 || !(q = f32_buf(f, false, 0, r))) return tpu_hostffi_error(f, kBad);
  const XLA_FFI_Buffer *k = f32_buf(f, false, 1, r), *v = f32_buf(f, false, 2, r);
  const int64_t nb = r - 2;
  if (!k || !v) return tpu_hostffi_error(f, kBad);
  tpu_hostattn_t a = {.bh = 1, .l = q->dims[nb], .d = q->dims[nb + 1], .s = k->dims[nb],
                      .dv = v->dims[nb + 1], .causal = causal != 0, .scale = scale,
                      .q = q->data, .k = k->data, .v = v->data};
  for (int64_t i = 0; i < nb; i++) a.bh *= q->dims[i];
  if (!dims_are(k, q, nb, a.s, a.d) || !dims_are(v, q, nb, a.s, a.dv))
    return tpu_hostffi_error(f, kBad);
  if (bias) {
    const XLA_FFI_Buffer* m = f32_buf(f, false, 3, r);
    if (!dims_are(m, q, nb, a.l, a.s)) return tpu_hostffi_error(f, kBad);
    a.bias = m->data;
  }
  if (backward) {
    const XLA_FFI_Buffer *g = f32_buf(f, false, base + bias, r),
                         *o = f32_buf(f, false, base + bias + 1, r),
                         *lse = f32_buf(f, false, base + bias + 2, r - 1);
    if (!dims_are(g, q, nb, a.l, a.dv) || !dims_are(o, q, nb, a.l, a.dv) ||
        !dims_are(lse, q, nb, a.l, -1))
      return tpu_hostffi_error(f, kBad);
    a.g = g->data, a.fwd_out = o->data, a.fwd_lse = lse->data;
    const XLA_FFI_Buffer *dq = f32_buf(f, true, 0, r), *dk = f32_buf(f, true, 1, r),
                         *dv = f32_buf(f, true, 2, r);
    if (f->rets.size != 3 || !dims_are(dq, q, nb, a.l, a.d) || !dims_are(dk, q, nb, a.s, a.d) ||
        !dims_are(dv, q, nb, a.s, a.dv))
      return tpu_hostffi_error(f, kBad);
    a.dq = dq->data, a.dk = dk->data, a.dvv = dv->data;
  } else {
    const XLA_FFI_Buffer *o = f32_buf(f, true, 0, r), *lse = f32_buf(f, true, 1, r - 1);
    if (f->rets.size != 2 || !dims_are(o, q, nb, a.l, a.dv) || !dims_are(lse, q, nb, a.l, -1))
      return tpu_hostffi_error(f, kBad);
    a.out = o->data, a.lse = lse->data;
  }
  if (a.bh == 0 || a.l == 0) return NULL;
  job_t j = {.a = &a, .backward = backward};
  int threads = tpu_hostffi_threads(f);
  j.parts = a.bh < threads ? (int)a.bh : threads;
  atomic_init(&j.failed, false);
  tpu_hostffi_parallel(f, j.parts, job_part, &j);
  if (atomic_load(&j.failed)) return tpu_hostffi_error(f, "torchtpu host attention: out of memory");
  return NULL;
}

static XLA_FFI_Error* fwd_handler(XLA_FFI_CallFrame* f) { return run(f, false); }
static XLA_FFI_Error* bwd_handler(XLA_FFI_CallFrame* f) { return run(f, true); }

static const char* const kTargets[2] = {"torchtpu_attn_fwd", "torchtpu_attn_bwd"};
static XLA_FFI_Handler* const kHandlers[2] = {fwd_handler, bwd_handler};

static const char kProbe[] =
    "module @torchtpu_attn_probe {\n"
    "  func.func public @main(%arg0: tensor<1x2x2xf32>) -> (tensor<1x2x2xf32>) {\n"
    "    %0:2 = \"stablehlo.custom_call\"(%arg0, %arg0, %arg0) {api_version = 4 : i32, "
    "backend_config = {causal = 1 : i64, scale = 1.0 : f32}, "
    "call_target_name = \"torchtpu_attn_fwd\"} : (tensor<1x2x2xf32>, tensor<1x2x2xf32>, "
    "tensor<1x2x2xf32>) -> (tensor<1x2x2xf32>, tensor<1x2xf32>)\n"
    "    \"func.return\"(%0#0) : (tensor<1x2x2xf32>) -> ()\n"
    "  }\n"
    "}\n";

void tpu_hostattn_register(tpu_client_t* client) {
  if (!client || !tpu_client_is_cpu(client) || !cpu_has_avx2() ||
      tpu_env_get_int("TORCHTPU_HOST_ATTN", 1) == 0 ||
      tpu_env_get_int("TORCHTPU_HOST_GEMM", 1) == 0)
    return;
  atomic_store(&g_registered,
               tpu_hostffi_register(client, kTargets, kHandlers, 2, kProbe, "host attention"));
}

/* ---- the text rewrite ------------------------------------------------------- */

static const char kMark[] = "torchtpu_attn = \"";

/* A marked line: its words (fwd: 13, bwd: 17; see hostattn.h). */
enum { kMaxWords = 17 };
typedef struct {
  const char* line;
  const char* eol;
  bool backward;
  int nw;
  const char* word[kMaxWords];
  size_t len[kMaxWords];
  int nb;                           /* batch dims */
  int64_t batch[TPU_HLO_MAX_RANK], l, s, d, dv;
} plan_t;

static bool word_int(const char* w, size_t len, int64_t* out) {
  char num[32];
  if (len == 0 || len >= sizeof num) return false;
  memcpy(num, w, len);
  num[len] = '\0';
  char* end;
  *out = strtoll(num, &end, 10);
  return *end == '\0';
}

static bool plan_line(plan_t* p, const char* line, const char* eol) {
  const char* mark = memmem(line, (size_t)(eol - line), kMark, sizeof kMark - 1);
  const char* op = memmem(line, (size_t)(eol - line), " = \"stablehlo.", 14);
  if (!mark || !op || op > mark) return false;
  *p = (plan_t){.line = line, .eol = eol};
  p->nw = tpu_hostffi_marker_words(mark + sizeof kMark - 1, eol, p->word, p->len, kMaxWords);
  if (p->nw < 1) return false;
  p->backward = p->len[0] == 3 && memcmp(p->word[0], "bwd", 3) == 0;
  bool fwd = p->len[0] == 3 && memcmp(p->word[0], "fwd", 3) == 0;
  if (!(fwd && p->nw == 13) && !(p->backward && p->nw == 17)) return false;
  int dims = p->nw - 5;
  /* the batch dims, "16x4" */
  const char *w = p->word[dims], *end = w + p->len[dims];
  while (w < end) {
    const char* x = memchr(w, 'x', (size_t)(end - w));
    if (!x) x = end;
    if (p->nb == TPU_HLO_MAX_RANK - 2 || !word_int(w, (size_t)(x - w), &p->batch[p->nb++]))
      return false;
    w = x < end ? x + 1 : x;
  }
  return p->nb > 0 && word_int(p->word[dims + 1], p->len[dims + 1], &p->l) &&
         word_int(p->word[dims + 2], p->len[dims + 2], &p->s) &&
         word_int(p->word[dims + 3], p->len[dims + 3], &p->d) &&
         word_int(p->word[dims + 4], p->len[dims + 4], &p->dv);
}

static bool has_bias(const plan_t* p) { return !(p->len[4] == 1 && p->word[4][0] == '-'); }

/* float32 [batch..., d0(, d1)]; d1 < 0: no last dim. */
static tpu_hlo_type_t f32_type(const plan_t* p, int64_t d0, int64_t d1) {
  int64_t dims[TPU_HLO_MAX_RANK];
  int n = 0;
  for (int i = 0; i < p->nb; i++) dims[n++] = p->batch[i];
  dims[n++] = d0;
  if (d1 >= 0) dims[n++] = d1;
  return tpu_hlo_type_make(TPU_DTYPE_FLOAT32, n, dims);
}

/* The call of plan p and the identity reshapes naming its results,
 * replacing p's line. */
static void append_call(tpu_strbuf_t* sb, const plan_t* p) {
  const char* op = memmem(p->line, (size_t)(p->eol - p->line), " = \"stablehlo.", 14);
  const char* name = p->line;
  while (*name == ' ') name++;
  int indent = (int)(name - p->line), name_len = (int)(op - name);
  tpu_hlo_type_t q = f32_type(p, p->l, p->d), k = f32_type(p, p->s, p->d),
                 v = f32_type(p, p->s, p->dv), m = f32_type(p, p->l, p->s),
                 o = f32_type(p, p->l, p->dv), lse = f32_type(p, p->l, -1);
  /* operands: q k v [bias] (then g out lse); results */
  const tpu_hlo_type_t* in[7] = {&q, &k, &v};
  int word[7] = {1, 2, 3}, n = 3;
  if (has_bias(p)) in[n] = &m, word[n++] = 4;
  if (p->backward) {
    in[n] = &o, word[n++] = 5;
    in[n] = &o, word[n++] = 6;
    in[n] = &lse, word[n++] = 7;
  }
  const tpu_hlo_type_t* out_bwd[3] = {&q, &k, &v};
  const tpu_hlo_type_t* out_fwd[2] = {&o, &lse};
  const tpu_hlo_type_t* const* out = p->backward ? out_bwd : out_fwd;
  int nout = p->backward ? 3 : 2;
  int flags = p->backward ? 10 : 6; /* causal, scale */
  tpu_strbuf_appendf(sb, "%*s%%attn%.*s:%d = \"stablehlo.custom_call\"(", indent, "",
                     name_len - 1, name + 1, nout);
  for (int i = 0; i < n; i++)
    tpu_strbuf_appendf(sb, "%s%.*s", i ? ", " : "", (int)p->len[word[i]], p->word[word[i]]);
  tpu_strbuf_appendf(sb,
                     ") {api_version = 4 : i32, backend_config = {causal = %.*s : i64, "
                     "scale = %.*s : f32}, call_target_name = \"%s\", operand_layouts = [",
                     (int)p->len[flags], p->word[flags], (int)p->len[flags + 1],
                     p->word[flags + 1], kTargets[p->backward]);
  for (int i = 0; i < n; i++) {
    if (i) tpu_strbuf_append(sb, ", ");
    tpu_hostffi_append_layout(sb, in[i]->rank);
  }
  tpu_strbuf_append(sb, "], result_layouts = [");
  for (int i = 0; i < nout; i++) {
    if (i) tpu_strbuf_append(sb, ", ");
    tpu_hostffi_append_layout(sb, out[i]->rank);
  }
  tpu_strbuf_append(sb, "]} : (");
  for (int i = 0; i < n; i++) {
    if (i) tpu_strbuf_append(sb, ", ");
    tpu_hlo_type_append(sb, in[i]);
  }
  tpu_strbuf_append(sb, ") -> (");
  for (int i = 0; i < nout; i++) {
    if (i) tpu_strbuf_append(sb, ", ");
    tpu_hlo_type_append(sb, out[i]);
  }
  tpu_strbuf_append(sb, ")\n");
  /* the results under their names: fwd out (word 5) and the marked
   * line's; bwd dq (8), dk (9) and the marked line's */
  for (int i = 0; i < nout; i++) {
    bool last = i == nout - 1;
    int w = p->backward ? 8 + i : 5;
    tpu_strbuf_appendf(sb, "%*s%.*s = \"stablehlo.reshape\"(%%attn%.*s#%d) : (", indent, "",
                       last ? name_len : (int)p->len[w], last ? name : p->word[w], name_len - 1,
                       name + 1, i);
    tpu_hlo_type_append(sb, out[i]);
    tpu_strbuf_append(sb, ") -> ");
    tpu_hlo_type_append(sb, out[i]);
    if (!last) tpu_strbuf_append(sb, "\n");
  }
}

/* Whether line [line, eol) defines a result plan p's call now defines. */
static bool defined_by(const plan_t* p, const char* line, const char* eol) {
  if (!p->backward) return tpu_hostffi_defines(line, eol, p->word[5], p->len[5]);
  return tpu_hostffi_defines(line, eol, p->word[8], p->len[8]) ||
         tpu_hostffi_defines(line, eol, p->word[9], p->len[9]);
}

static bool plan_any(void* plan, const char* fn, const char* fn_end, const char* line,
                     const char* eol) {
  return plan_line(plan, line, eol);
}

static bool drops(const void* plan, const char* line, const char* eol) {
  return defined_by(plan, line, eol);
}

static void append_any(tpu_strbuf_t* sb, const void* plan) { append_call(sb, plan); }

tpu_status_t tpu_hostattn_rewrite(const char* text, size_t len, char** out_text,
                                  size_t* out_len) {
  static const tpu_hostffi_rewriter_t kRewriter = {
      .mark = kMark, .plan_size = sizeof(plan_t), .plan_line = plan_any, .drops = drops,
      .append = append_any, .what = "rewriting a program's attentions"};
  return tpu_hostffi_rewrite(&kRewriter, text, len, out_text, out_len);
}
