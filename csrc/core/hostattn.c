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
#include "hostview.h"
#include "metrics.h"
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

/* out[r][e] = sum_j p[r][j] y[j][e] for r < nr, e < cols, j < n (y's
 * rows ldy apart). */
KERNEL static inline __attribute__((always_inline)) void tile_nn_k(const float* p, int64_t ldp, int nr, int64_t n, const float* y,
                           int64_t ldy, int64_t cols, float* out, int64_t ldo) {
  for (int64_t e = 0; e < cols; e += 8) {
    __m256i m = lanes(cols - e < 8 ? cols - e : 8);
    __m256 acc[TR] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                      _mm256_setzero_ps()};
    for (int64_t j = 0; j < n; j++) {
      __m256 v = _mm256_maskload_ps(y + j * ldy + e, m);
      #pragma GCC unroll 4
      for (int r = 0; r < nr; r++)
        acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(p[r * ldp + j]), v, acc[r]);
    }
    #pragma GCC unroll 4
    for (int r = 0; r < nr; r++) _mm256_maskstore_ps(out + r * ldo + e, m, acc[r]);
  }
}

/* out[j][e] += sum_r p[r][j] x[r][e] for j < n, r < nr, e < cols (x's
 * rows ldx apart, out's ldo). */
KERNEL static inline __attribute__((always_inline)) void tile_tn_k(const float* p, int64_t ldp, int nr, int64_t n, const float* x,
                           int64_t ldx, int64_t cols, float* out, int64_t ldo) {
  for (int64_t e = 0; e < cols; e += 8) {
    __m256i m = lanes(cols - e < 8 ? cols - e : 8);
    __m256 xr[TR];
    #pragma GCC unroll 4
    for (int r = 0; r < nr; r++) xr[r] = _mm256_maskload_ps(x + r * ldx + e, m);
    for (int64_t j = 0; j < n; j++) {
      __m256 acc = _mm256_maskload_ps(out + j * ldo + e, m);
      #pragma GCC unroll 4
      for (int r = 0; r < nr; r++) acc = _mm256_fmadd_ps(_mm256_set1_ps(p[r * ldp + j]), xr[r], acc);
      _mm256_maskstore_ps(out + j * ldo + e, m, acc);
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
                           int64_t ldy, int64_t cols, float* out, int64_t ldo) {
#define CALL(k) tile_nn_k(p, ldp, k, n, y, ldy, cols, out, ldo)
  BY_ROWS(CALL)
#undef CALL
}

KERNEL static void tile_tn(const float* p, int64_t ldp, int nr, int64_t n, const float* x,
                           int64_t ldx, int64_t cols, float* out, int64_t ldo) {
#define CALL(k) tile_tn_k(p, ldp, k, n, x, ldx, cols, out, ldo)
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

/* t[c][r] = x[r][c] for x of rows x cols, its rows ldx apart (t's ld). */
static void transpose(const float* x, int64_t ldx, int64_t rows, int64_t cols, float* t,
                      int64_t ld) {
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < cols; c++) t[c * ld + r] = x[r * ldx + c];
}

/* Slice b of operand p ([bh, rows, cols] as layout l says), and the
 * distance of its rows. */
static const float* slice_of(const tpu_hostattn_t* a, const float* p,
                             const tpu_hostattn_layout_t* l, int64_t b, int64_t rows,
                             int64_t cols) {
  if (!l->row) return p + b * rows * cols;
  int64_t h = a->heads > 0 ? a->heads : 1;
  return p + (b / h) * l->batch + (b % h) * l->head;
}
static int64_t rows_apart(const tpu_hostattn_layout_t* l, int64_t cols) {
  return l->row ? l->row : cols;
}

/* Scores of rows [i, i + nr) of slice b into w->sc: keys [0, n) (the
 * causal ones of the tile's last row), bias added, keys after a row's
 * position -inf when causal. Returns n. */
KERNEL static int64_t scores(const tpu_hostattn_t* a, const scratch_t* w, int64_t b, int64_t i,
                             int nr) {
  int64_t n = a->causal && i + nr < a->s ? i + nr : a->s;
  int64_t ldq = rows_apart(&a->lq, a->d);
  tile_nt(slice_of(a, a->q, &a->lq, b, a->l, a->d) + i * ldq, ldq, nr, w->kt, w->sp, n, a->d,
          a->scale, w->sc, w->sp);
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
  const int64_t ldk = rows_apart(&a->lk, a->d), ldv = rows_apart(&a->lv, a->dv),
                ldo = rows_apart(&a->lout, a->dv);
  for (int64_t b = lo; b < hi; b++) {
    transpose(slice_of(a, a->k, &a->lk, b, a->s, a->d), ldk, a->s, a->d, w.kt, w.sp);
    const float* v = slice_of(a, a->v, &a->lv, b, a->s, a->dv);
    float* outb = (float*)slice_of(a, a->out, &a->lout, b, a->l, a->dv);
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
      float* out = outb + i * ldo;
      tile_nn(w.sc, w.sp, nr, n, v, ldv, a->dv, out, ldo);
      for (int r = 0; r < nr; r++)
        for (int64_t e = 0; e < a->dv; e++) out[r * ldo + e] *= inv[r];
    }
  }
  free(w.kt);
  return true;
}

KERNEL bool tpu_hostattn_backward(const tpu_hostattn_t* a, int64_t lo, int64_t hi) {
  scratch_t w;
  if (!scratch_make(&w, a)) return false;
  const int64_t ldk = rows_apart(&a->lk, a->d), ldv = rows_apart(&a->lv, a->dv),
                ldq = rows_apart(&a->lq, a->d), ldg = rows_apart(&a->lg, a->dv),
                ldo = rows_apart(&a->lo, a->dv), lddq = rows_apart(&a->ldq, a->d),
                lddk = rows_apart(&a->ldk, a->d), lddv = rows_apart(&a->ldv, a->dv);
  for (int64_t b = lo; b < hi; b++) {
    const float* k = slice_of(a, a->k, &a->lk, b, a->s, a->d);
    transpose(k, ldk, a->s, a->d, w.kt, w.sp);
    transpose(slice_of(a, a->v, &a->lv, b, a->s, a->dv), ldv, a->s, a->dv, w.vt, w.sp);
    const float *qb = slice_of(a, a->q, &a->lq, b, a->l, a->d),
                *gb = slice_of(a, a->g, &a->lg, b, a->l, a->dv),
                *ob = slice_of(a, a->fwd_out, &a->lo, b, a->l, a->dv);
    float* dq = (float*)slice_of(a, a->dq, &a->ldq, b, a->l, a->d);
    float* dk = (float*)slice_of(a, a->dk, &a->ldk, b, a->s, a->d);
    float* dv = (float*)slice_of(a, a->dvv, &a->ldv, b, a->s, a->dv);
    for (int64_t j = 0; j < a->s; j++) {
      memset(dk + j * lddk, 0, (size_t)a->d * sizeof(float));
      memset(dv + j * lddv, 0, (size_t)a->dv * sizeof(float));
    }
    for (int64_t i = 0; i < a->l; i += TR) {
      int nr = a->l - i < TR ? (int)(a->l - i) : TR;
      const int64_t r0 = b * a->l + i;
      const float *g = gb + i * ldg, *q = qb + i * ldq;
      int64_t n = scores(a, &w, b, i, nr);
      tile_nt(g, ldg, nr, w.vt, w.sp, n, a->dv, 1.0f, w.dp, w.sp); /* g v^T */
      for (int r = 0; r < nr; r++) {
        float *p = w.sc + r * w.sp, *ds = w.dp + r * w.sp, lse = a->fwd_lse[r0 + r];
        if (lse == -INFINITY) { /* a masked row: no gradient */
          memset(p, 0, (size_t)n * sizeof(float));
          memset(ds, 0, (size_t)n * sizeof(float));
          continue;
        }
        exp_shift(p, (n + 7) / 8 * 8, lse);
        float rowsum = 0;
        const float *gr = g + r * ldg, *o = ob + (i + r) * ldo;
        for (int64_t e = 0; e < a->dv; e++) rowsum += gr[e] * o[e];
        softmax_grad(p, ds, (n + 7) / 8 * 8, rowsum, a->scale);
      }
      tile_nn(w.dp, w.sp, nr, n, k, ldk, a->d, dq + i * lddq, lddq); /* ds k */
      tile_tn(w.dp, w.sp, nr, n, q, ldq, a->d, dk, lddk);            /* ds^T q */
      tile_tn(w.sc, w.sp, nr, n, g, ldg, a->dv, dv, lddv);           /* p^T g */
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

/* a's slices, cut in parts across the pool. */
static XLA_FFI_Error* run_slices(const XLA_FFI_CallFrame* f, const tpu_hostattn_t* a,
                                 bool backward) {
  job_t j = {.a = a, .backward = backward};
  int threads = tpu_hostffi_threads(f);
  j.parts = a->bh < threads ? (int)a->bh : threads;
  atomic_init(&j.failed, false);
  tpu_hostffi_parallel(f, j.parts, job_part, &j);
  if (atomic_load(&j.failed)) return tpu_hostffi_error(f, "torchtpu host attention: out of memory");
  return NULL;
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

static int64_t buf_numel(const XLA_FFI_Buffer* b) {
  int64_t n = 1;
  for (int64_t d = 0; d < b->rank; d++) n *= b->dims[d];
  return n;
}

/* Whether a view {offset, batch, head, row} of [B, H, rows, cols] stays in
 * buffer b (float32 of any shape). */
static bool view_fits(const XLA_FFI_Buffer* b, const int64_t* v, const int64_t* dims,
                      int64_t rows, int64_t cols) {
  if (!b || b->dtype != XLA_FFI_DataType_F32 || v[0] < 0 || v[1] < 0 || v[2] < 0 || v[3] < 0)
    return false;
  int64_t last = v[0] + (dims[0] - 1) * v[1] + (dims[1] - 1) * v[2] + (rows - 1) * v[3] + cols;
  return last <= buf_numel(b);
}

/* A result's layout {batch, head, row} of [B, H, rows, cols]: row-major
 * or [B, rows, H, cols] (what the rewrite declares), nothing else. */
static bool result_layout(const int64_t* l, const int64_t* dims, int64_t rows, int64_t cols,
                          tpu_hostattn_layout_t* out, bool* blhd) {
  int64_t h = dims[1];
  bool bhld = l[0] == h * rows * cols && l[1] == rows * cols && l[2] == cols;
  *blhd = !bhld && l[0] == rows * h * cols && l[1] == cols && l[2] == h * cols;
  *out = (tpu_hostattn_layout_t){l[0], l[1], l[2]};
  return bhld || *blhd;
}

/* The rewrite's strided form (rank 4, no bias): q, k, v (and g, the
 * forward's out) are base buffers read at views {offset, batch, head,
 * row} (attribute views), dims = [B, H, L, S, D, DV], results laid out as
 * outs says. */
static XLA_FFI_Error* run_strided(XLA_FFI_CallFrame* f, bool backward, const int64_t* dims,
                                  bool causal, float scale) {
  static const char kBad[] = "torchtpu host attention: unexpected strided operands";
  int64_t views[20], outs[9];
  int nin = backward ? 5 : 3, nout = backward ? 3 : 1;
  if (f->args.size != nin + backward || f->rets.size != (backward ? 3 : 2) ||
      tpu_hostffi_int_array_attr(f, "views", views, 20) != 4 * nin ||
      tpu_hostffi_int_array_attr(f, "outs", outs, 9) != 3 * nout)
    return tpu_hostffi_error(f, kBad);
  for (int i = 0; i < 6; i++)
    if (dims[i] < 1) return tpu_hostffi_error(f, kBad);
  tpu_hostattn_t a = {.bh = dims[0] * dims[1], .heads = dims[1], .l = dims[2], .s = dims[3],
                      .d = dims[4], .dv = dims[5], .causal = causal, .scale = scale};
  /* rows and cols of q, k, v, g, out */
  const int64_t rows[5] = {a.l, a.s, a.s, a.l, a.l}, cols[5] = {a.d, a.d, a.dv, a.dv, a.dv};
  tpu_hostattn_layout_t* in_l[5] = {&a.lq, &a.lk, &a.lv, &a.lg, &a.lo};
  const float* in_p[5];
  for (int i = 0; i < nin; i++) {
    const XLA_FFI_Buffer* b =
        f->args.types[i] == XLA_FFI_ArgType_BUFFER ? f->args.args[i] : NULL;
    if (!view_fits(b, views + 4 * i, dims, rows[i], cols[i])) return tpu_hostffi_error(f, kBad);
    in_p[i] = (const float*)b->data + views[4 * i];
    *in_l[i] = (tpu_hostattn_layout_t){views[4 * i + 1], views[4 * i + 2], views[4 * i + 3]};
  }
  a.q = in_p[0], a.k = in_p[1], a.v = in_p[2];
  int64_t lse_dims[3] = {dims[0], dims[1], a.l};
  const XLA_FFI_Buffer* lse = f32_buf(f, !backward, backward ? 5 : 1, 3);
  if (!lse) return tpu_hostffi_error(f, kBad);
  for (int d = 0; d < 3; d++)
    if (lse->dims[d] != lse_dims[d]) return tpu_hostffi_error(f, kBad);
  tpu_hostattn_layout_t* out_l[3] = {backward ? &a.ldq : &a.lout, &a.ldk, &a.ldv};
  float* out_p[3];
  const int64_t orow[3] = {a.l, a.s, a.s}, ocol[3] = {backward ? a.d : a.dv, a.d, a.dv};
  for (int i = 0; i < nout; i++) {
    const XLA_FFI_Buffer* o = f32_buf(f, true, i, 4);
    bool blhd = false;
    if (!o || !result_layout(outs + 3 * i, dims, orow[i], ocol[i], out_l[i], &blhd))
      return tpu_hostffi_error(f, kBad);
    /* a [B, rows, H, cols] result is made as such */
    int64_t want[4] = {dims[0], blhd ? orow[i] : dims[1], blhd ? dims[1] : orow[i], ocol[i]};
    for (int d = 0; d < 4; d++)
      if (o->dims[d] != want[d]) return tpu_hostffi_error(f, kBad);
    out_p[i] = o->data;
  }
  if (backward) {
    a.g = in_p[3], a.fwd_out = in_p[4], a.fwd_lse = lse->data;
    a.dq = out_p[0], a.dk = out_p[1], a.dvv = out_p[2];
  } else {
    a.out = out_p[0], a.lse = lse->data;
  }
  return run_slices(f, &a, backward);
}

/* fwd(q, k, v[, bias]) {causal, scale} -> (out, lse);
 * bwd(q, k, v[, bias], g, out, lse) {causal, scale} -> (dq, dk, dv);
 * or their strided forms (run_strided). */
static XLA_FFI_Error* run(XLA_FFI_CallFrame* f, bool backward) {
  if (tpu_hostffi_answer_metadata(f)) return NULL;
  if (f->stage != XLA_FFI_ExecutionStage_EXECUTE) return NULL;
  static const char kBad[] = "torchtpu host attention: unexpected operands";
  int64_t causal;
  float scale;
  int64_t dims[6];
  if (tpu_hostffi_int_array_attr(f, "dims", dims, 6) == 6) {
    if (!tpu_hostffi_scalar_attr(f, "causal", XLA_FFI_DataType_S64, &causal) ||
        !tpu_hostffi_scalar_attr(f, "scale", XLA_FFI_DataType_F32, &scale))
      return tpu_hostffi_error(f, kBad);
    return run_strided(f, backward, dims, causal != 0, scale);
  }
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
  return run_slices(f, &a, backward);
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
  /* The strided form (rank 4, no bias): q, k, v (bwd: g, out) read
   * through their views; each result [B, L, H, cols] when the program
   * transposes it to that next. */
  bool strided;
  tpu_hostview_t view[5];
  bool blhd[3];
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
  /* A result read next as [B, rows, H, cols] is made so, and named
   * [B, H, rows, cols] by a transpose XLA cancels with that one's. */
  tpu_hlo_type_t phys[3];
  const tpu_hlo_type_t* res[3];
  for (int i = 0; i < nout; i++) {
    res[i] = out[i];
    if (p->strided && i < (p->backward ? 3 : 1) && p->blhd[i]) {
      phys[i] = *out[i];
      phys[i].dims[1] = out[i]->dims[2];
      phys[i].dims[2] = out[i]->dims[1];
      res[i] = &phys[i];
    }
  }
  int flags = p->backward ? 10 : 6; /* causal, scale */
  /* the strided form reads the views' bases */
  const char* opname[7];
  int oplen[7];
  for (int i = 0; i < n; i++) {
    int v = i; /* no bias here: bwd's g and out are views 3 and 4, lse none */
    bool base = p->strided && (i < 3 || (p->backward && i < 5));
    opname[i] = base ? p->view[v].base : p->word[word[i]];
    oplen[i] = base ? (int)p->view[v].base_len : (int)p->len[word[i]];
    if (base) in[i] = &p->view[v].base_type;
  }
  tpu_strbuf_appendf(sb, "%*s%%attn%.*s:%d = \"stablehlo.custom_call\"(", indent, "",
                     name_len - 1, name + 1, nout);
  for (int i = 0; i < n; i++) tpu_strbuf_appendf(sb, "%s%.*s", i ? ", " : "", oplen[i], opname[i]);
  tpu_strbuf_appendf(sb, ") {api_version = 4 : i32, backend_config = {causal = %.*s : i64, ",
                     (int)p->len[flags], p->word[flags]);
  if (p->strided) {
    tpu_strbuf_appendf(sb, "dims = array<i64: %lld, %lld, %lld, %lld, %lld, %lld>, outs = ",
                       (long long)p->batch[0], (long long)p->batch[1], (long long)p->l,
                       (long long)p->s, (long long)p->d, (long long)p->dv);
    int64_t h = p->batch[1];
    for (int i = 0; i < (p->backward ? 3 : 1); i++) {
      int64_t rows = out[i]->dims[2], cols = out[i]->dims[3];
      if (p->blhd[i])
        tpu_strbuf_appendf(sb, "%s%lld, %lld, %lld", i ? ", " : "array<i64: ",
                           (long long)(rows * h * cols), (long long)cols, (long long)(h * cols));
      else
        tpu_strbuf_appendf(sb, "%s%lld, %lld, %lld", i ? ", " : "array<i64: ",
                           (long long)(h * rows * cols), (long long)(rows * cols), (long long)cols);
    }
    tpu_strbuf_append(sb, ">, ");
  }
  tpu_strbuf_appendf(sb, "scale = %.*s : f32", (int)p->len[flags + 1], p->word[flags + 1]);
  if (p->strided) {
    tpu_strbuf_append(sb, ", views = array<i64: ");
    for (int i = 0; i < (p->backward ? 5 : 3); i++) {
      const tpu_hostview_t* w = &p->view[i];
      tpu_strbuf_appendf(sb, "%s%lld, %lld, %lld, %lld", i ? ", " : "", (long long)w->offset,
                         (long long)w->strides[0], (long long)w->strides[1],
                         (long long)w->strides[2]);
    }
    tpu_strbuf_append(sb, ">");
  }
  tpu_strbuf_appendf(sb, "}, call_target_name = \"%s\", operand_layouts = [",
                     kTargets[p->backward]);
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
    tpu_hlo_type_append(sb, res[i]);
  }
  tpu_strbuf_append(sb, ")\n");
  /* the results under their names: fwd out (word 5) and the marked
   * line's; bwd dq (8), dk (9) and the marked line's */
  for (int i = 0; i < nout; i++) {
    bool last = i == nout - 1;
    int w = p->backward ? 8 + i : 5;
    bool t = res[i] != out[i];
    tpu_strbuf_appendf(sb, "%*s%.*s = \"stablehlo.%s\"(%%attn%.*s#%d)%s : (", indent, "",
                       last ? name_len : (int)p->len[w], last ? name : p->word[w],
                       t ? "transpose" : "reshape", name_len - 1, name + 1, i,
                       t ? " {permutation = array<i64: 0, 2, 1, 3>}" : "");
    tpu_hlo_type_append(sb, res[i]);
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

/* The strided form's views: each operand's view must keep its columns
 * adjacent and stay in its base. */
static bool plan_views(plan_t* p, const char* fn, const char* fn_end) {
  if (p->nb != 2 || has_bias(p)) return false;
  tpu_hlo_type_t q = f32_type(p, p->l, p->d), k = f32_type(p, p->s, p->d),
                 v = f32_type(p, p->s, p->dv), o = f32_type(p, p->l, p->dv);
  const tpu_hlo_type_t* types[5] = {&q, &k, &v, &o, &o};
  const int words[5] = {1, 2, 3, 5, 6};
  for (int i = 0; i < (p->backward ? 5 : 3); i++) {
    tpu_hostview_t* w = &p->view[i];
    tpu_hostview_resolve(fn, p->line, p->word[words[i]], p->len[words[i]], types[i], w);
    if (w->base_type.dtype != TPU_DTYPE_FLOAT32 || !tpu_hostview_rows_of_columns(w)) return false;
  }
  /* results: fwd out (word 5); bwd dq, dk (8, 9) and the marked line's */
  const char* name = p->line;
  while (*name == ' ') name++;
  const char* op = memmem(p->line, (size_t)(p->eol - p->line), " = \"stablehlo.", 14);
  for (int i = 0; i < (p->backward ? 3 : 1); i++) {
    int w = p->backward ? 8 + i : 5;
    bool own = p->backward && i == 2;
    static const int64_t kBLHD[4] = {0, 2, 1, 3};
    p->blhd[i] = tpu_hostview_transposed_next(p->eol, fn_end, own ? name : p->word[w],
                                              own ? (size_t)(op - name) : p->len[w], kBLHD, 4);
  }
  return true;
}

static bool plan_any(void* plan, const char* fn, const char* fn_end, const char* line,
                     const char* eol) {
  plan_t* p = plan;
  if (!plan_line(p, line, eol)) return false;
  p->strided = plan_views(p, fn, fn_end);
  if (p->strided) TPU_METRICS_BUMP("host_attn_strided", 1);
  return true;
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
