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

static atomic_bool g_registered;

static const char* const kNames[TPU_HOSTROW_NUM_KINDS] = {"softmax", "log_softmax",
                                                          "safe_softmax"};
static const char* const kTargets[TPU_HOSTROW_NUM_KINDS] = {
    "torchtpu_row_softmax", "torchtpu_row_log_softmax", "torchtpu_row_safe_softmax"};

const char* tpu_hostrow_kind_name(tpu_hostrow_kind_t kind) {
  return kind >= 0 && kind < TPU_HOSTROW_NUM_KINDS ? kNames[kind] : "?";
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

/* exp of 8 floats, Cephes' expf: x = n ln2 + r with |r| <= ln2/2, exp(r)
 * by its degree-7 polynomial, times 2^n made in the exponent bits. Within
 * 2 ulp of expf; x < -87.3 (results below FLT_MIN, exp(-inf) = 0 among
 * them) gives 0; NaN stays NaN. Only called with x <= 0. */
__attribute__((target("avx2,fma"))) static inline __m256 exp8(__m256 x) {
  const __m256 lo = _mm256_set1_ps(-87.33654f);
  __m256 tiny = _mm256_cmp_ps(x, lo, _CMP_LT_OQ); /* false for NaN */
  x = _mm256_blendv_ps(x, lo, tiny);
  __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                             _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  __m256 v = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
  return _mm256_andnot_ps(tiny, v);
}

__attribute__((target("avx2,fma"))) static inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

__attribute__((target("avx2,fma"))) static inline float hmax8(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
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

void tpu_hostrow_compute(tpu_hostrow_kind_t kind, const float* x, float* y, int64_t rows,
                         int64_t n) {
  static int avx2 = -1;
  if (avx2 < 0) avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  for (int64_t r = 0; r < rows; r++) {
    if (avx2 && n >= 8) row_avx2(kind, x + r * n, y + r * n, n);
    else row_scalar(kind, x + r * n, y + r * n, n);
  }
}

/* ---- the FFI handlers ------------------------------------------------------- */

/* Parts of at least this many elements (about 10 us of work each). */
enum { kPartElems = 16384, kMinElems = 4096 };

typedef struct {
  tpu_hostrow_kind_t kind;
  const float* x;
  float* y;
  int64_t rows, n;
  int parts;
} rows_job_t;

static void rows_part(void* ctx, int part) {
  const rows_job_t* j = ctx;
  int64_t lo = j->rows * part / j->parts, hi = j->rows * (part + 1) / j->parts;
  tpu_hostrow_compute(j->kind, j->x + lo * j->n, j->y + lo * j->n, hi - lo, j->n);
}

static XLA_FFI_Error* run_rows(XLA_FFI_CallFrame* frame, tpu_hostrow_kind_t kind) {
  if (tpu_hostffi_answer_metadata(frame)) return NULL;
  if (frame->stage != XLA_FFI_ExecutionStage_EXECUTE) return NULL;
  if (frame->args.size != 1 || frame->rets.size != 1 ||
      frame->args.types[0] != XLA_FFI_ArgType_BUFFER ||
      frame->rets.types[0] != XLA_FFI_RetType_BUFFER)
    return tpu_hostffi_error(frame, "torchtpu host softmax: expected one buffer in, one out");
  const XLA_FFI_Buffer* x = frame->args.args[0];
  const XLA_FFI_Buffer* y = frame->rets.rets[0];
  if (x->dtype != XLA_FFI_DataType_F32 || y->dtype != XLA_FFI_DataType_F32 || x->rank < 1 ||
      y->rank != x->rank)
    return tpu_hostffi_error(frame, "torchtpu host softmax: expected float32 tensors alike");
  int64_t rows = 1;
  for (int64_t d = 0; d < x->rank; d++) {
    if (x->dims[d] != y->dims[d])
      return tpu_hostffi_error(frame, "torchtpu host softmax: result shape differs");
    if (d < x->rank - 1) rows *= x->dims[d];
  }
  int64_t n = x->dims[x->rank - 1];
  if (rows == 0 || n == 0) return NULL;
  rows_job_t j = {.kind = kind, .x = x->data, .y = y->data, .rows = rows, .n = n};
  int64_t by_size = rows * n / kPartElems;
  int threads = tpu_hostffi_threads(frame);
  j.parts = by_size < threads ? (int)(by_size < 1 ? 1 : by_size) : threads;
  if (j.parts > rows) j.parts = (int)rows;
  tpu_hostffi_parallel(frame, j.parts, rows_part, &j);
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
static XLA_FFI_Handler* const kHandlers[TPU_HOSTROW_NUM_KINDS] = {
    softmax_handler, log_softmax_handler, safe_softmax_handler};

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
                                                   TPU_HOSTROW_NUM_KINDS, kProbe,
                                                   "host softmax"));
}

/* ---- the text rewrite ------------------------------------------------------- */

static const char kMark[] = "torchtpu_row = \"";

/* The custom call for marked line [line, eol), appended to sb; false
 * (nothing appended) when the line is not one to rewrite. */
static bool rewrite_line(tpu_strbuf_t* sb, const char* line, const char* eol) {
  const char* mark = memmem(line, (size_t)(eol - line), kMark, sizeof kMark - 1);
  const char* op = memmem(line, (size_t)(eol - line), " = \"stablehlo.", 14);
  const char* arrow = NULL;
  for (const char* p = line; (p = memmem(p, (size_t)(eol - p), ") -> ", 5)); p += 5) arrow = p;
  if (!mark || !op || !arrow || op > mark) return false;
  const char* kind_start = mark + sizeof kMark - 1;
  const char* space = memchr(kind_start, ' ', (size_t)(eol - kind_start));
  const char* quote = space ? memchr(space, '"', (size_t)(eol - space)) : NULL;
  if (!quote || quote - space < 3 || space[1] != '%') return false;
  int kind = -1;
  for (int k = 0; k < TPU_HOSTROW_NUM_KINDS; k++)
    if ((size_t)(space - kind_start) == strlen(kNames[k]) &&
        memcmp(kind_start, kNames[k], (size_t)(space - kind_start)) == 0)
      kind = k;
  tpu_hlo_type_t t;
  const char* type = arrow + 5;
  tpu_status_t s = tpu_hlo_parse_type(type, (size_t)(eol - type), &t);
  if (s) {
    tpu_status_free(s);
    return false;
  }
  if (kind < 0 || t.dtype != TPU_DTYPE_FLOAT32 || t.rank < 1 ||
      tpu_hlo_type_numel(&t) < kMinElems)
    return false;
  tpu_strbuf_append_n(sb, line, (size_t)(op + 3 - line));
  tpu_strbuf_append(sb, "\"stablehlo.custom_call\"(");
  tpu_strbuf_append_n(sb, space + 1, (size_t)(quote - space - 1));
  tpu_strbuf_appendf(sb, ") {api_version = 4 : i32, call_target_name = \"%s\", operand_layouts = [",
                     kTargets[kind]);
  tpu_strbuf_append(sb, "dense<[");
  for (int d = t.rank - 1; d >= 0; d--) tpu_strbuf_appendf(sb, "%d%s", d, d ? ", " : "");
  tpu_strbuf_appendf(sb, "]> : tensor<%dxindex>], result_layouts = [dense<[", t.rank);
  for (int d = t.rank - 1; d >= 0; d--) tpu_strbuf_appendf(sb, "%d%s", d, d ? ", " : "");
  tpu_strbuf_appendf(sb, "]> : tensor<%dxindex>]} : (", t.rank);
  tpu_hlo_type_append(sb, &t);
  tpu_strbuf_append(sb, ") -> ");
  tpu_hlo_type_append(sb, &t);
  return true;
}

tpu_status_t tpu_hostrow_rewrite(const char* text, size_t len, char** out_text,
                                 size_t* out_len) {
  *out_text = NULL;
  *out_len = 0;
  const char* end = text + len;
  if (!memmem(text, len, kMark, sizeof kMark - 1)) return NULL;
  tpu_strbuf_t sb = {0};
  const char* copied = text; /* text before this is in sb */
  bool changed = false;
  for (const char* line = text; line < end;) {
    const char* eol = memchr(line, '\n', (size_t)(end - line));
    if (!eol) eol = end;
    if (memmem(line, (size_t)(eol - line), kMark, sizeof kMark - 1)) {
      size_t mark = sb.len;
      tpu_strbuf_append_n(&sb, copied, (size_t)(line - copied));
      if (rewrite_line(&sb, line, eol)) {
        changed = true;
        copied = eol;
      } else { /* keep the line as it is */
        sb.len = mark;
        if (sb.data) sb.data[mark] = '\0';
      }
    }
    line = eol + 1;
  }
  if (!changed) {
    tpu_strbuf_free(&sb);
    return NULL;
  }
  tpu_strbuf_append_n(&sb, copied, (size_t)(end - copied));
  char* out = tpu_strbuf_take(&sb, out_len);
  if (!out) return tpu_status_oom("rewriting a program's softmaxes");
  *out_text = out;
  return NULL;
}
