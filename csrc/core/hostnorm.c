#include "hostnorm.h"

#include <immintrin.h>
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

bool tpu_hostnorm_active(void) { return atomic_load(&g_registered); }

/* ---- the kernel ------------------------------------------------------------- */

/* The weight's and bias's gradients are sums over every row: summed row
 * after row into one float per column, the rounding error of a column
 * would grow with the rows (1024 of them in the demo's step). Rows are
 * summed in blocks of kBlockRows into a block's sums, added to the totals
 * once a block ends: the two-level sum XLA's tree rewrite makes of the
 * same reduction (windows of 32), and what PyTorch's per-thread buffers
 * approach. */
enum { kBlockRows = 32 };

/* One row's two sums, sum(gw) and sum(gw * xhat), and its share of the
 * block sums bw += g * xhat, bb += g; scalar (the tails of the vectors,
 * and CPUs without AVX2). */
static void row_sums_scalar(const float* g, const float* x, float m, float rs, const float* w,
                            float* bw, float* bb, int64_t from, int64_t n, float* s1,
                            float* s2) {
  for (int64_t i = from; i < n; i++) {
    float xh = (x[i] - m) * rs, gw = w ? g[i] * w[i] : g[i];
    *s1 += gw;
    *s2 += gw * xh;
    bw[i] += g[i] * xh;
    bb[i] += g[i];
  }
}

static void row_dx_scalar(const float* g, const float* x, float m, float rs, const float* w,
                          float a, float c, float* dx, int64_t from, int64_t n) {
  for (int64_t i = from; i < n; i++) {
    float xh = (x[i] - m) * rs, gw = w ? g[i] * w[i] : g[i];
    dx[i] = rs * (gw - a - xh * c);
  }
}

/* A row in 8-float vectors: the same operations as the scalar form lane
 * by lane, two accumulators per sum (one would wait out the add's latency
 * on every vector). */
__attribute__((target("avx2,fma"))) static void row_avx2(const float* g, const float* x,
                                                         float m, float rs, const float* w,
                                                         float* bw, float* bb, float* dx,
                                                         int64_t n) {
  int64_t nv = n & ~(int64_t)7, i;
  __m256 vm = _mm256_set1_ps(m), vr = _mm256_set1_ps(rs);
  __m256 s1a = _mm256_setzero_ps(), s1b = s1a, s2a = s1a, s2b = s1a;
  for (i = 0; i < nv; i += 8) {
    __m256 gv = _mm256_loadu_ps(g + i);
    __m256 xh = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm), vr);
    __m256 gw = w ? _mm256_mul_ps(gv, _mm256_loadu_ps(w + i)) : gv;
    if (i & 8) {
      s1b = _mm256_add_ps(s1b, gw);
      s2b = _mm256_fmadd_ps(gw, xh, s2b);
    } else {
      s1a = _mm256_add_ps(s1a, gw);
      s2a = _mm256_fmadd_ps(gw, xh, s2a);
    }
    _mm256_storeu_ps(bw + i, _mm256_fmadd_ps(gv, xh, _mm256_loadu_ps(bw + i)));
    _mm256_storeu_ps(bb + i, _mm256_add_ps(_mm256_loadu_ps(bb + i), gv));
  }
  float s1 = hsum8(_mm256_add_ps(s1a, s1b)), s2 = hsum8(_mm256_add_ps(s2a, s2b));
  row_sums_scalar(g, x, m, rs, w, bw, bb, nv, n, &s1, &s2);
  float a = s1 / (float)n, c = s2 / (float)n;
  __m256 va = _mm256_set1_ps(a), vc = _mm256_set1_ps(c);
  for (i = 0; i < nv; i += 8) {
    __m256 gv = _mm256_loadu_ps(g + i);
    __m256 xh = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm), vr);
    __m256 gw = w ? _mm256_mul_ps(gv, _mm256_loadu_ps(w + i)) : gv;
    __m256 d = _mm256_sub_ps(_mm256_sub_ps(gw, va), _mm256_mul_ps(xh, vc));
    _mm256_storeu_ps(dx + i, _mm256_mul_ps(vr, d));
  }
  row_dx_scalar(g, x, m, rs, w, a, c, dx, nv, n);
}

static void row_any(bool avx2, const float* g, const float* x, float m, float rs,
                    const float* w, float* bw, float* bb, float* dx, int64_t n) {
  if (avx2) {
    row_avx2(g, x, m, rs, w, bw, bb, dx, n);
    return;
  }
  float s1 = 0, s2 = 0;
  row_sums_scalar(g, x, m, rs, w, bw, bb, 0, n, &s1, &s2);
  row_dx_scalar(g, x, m, rs, w, s1 / (float)n, s2 / (float)n, dx, 0, n);
}

/* Rows [lo, hi): dx, and their column sums into tw, tb (n each,
 * overwritten); blk: 2n floats of scratch for a block's sums. */
static void rows_run(const float* g, const float* x, const float* mean, const float* rstd,
                     const float* w, float* dx, float* tw, float* tb, float* blk, int64_t lo,
                     int64_t hi, int64_t n) {
  bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  float *bw = blk, *bb = blk + n;
  memset(tw, 0, (size_t)n * sizeof(float));
  memset(tb, 0, (size_t)n * sizeof(float));
  for (int64_t r0 = lo; r0 < hi; r0 += kBlockRows) {
    int64_t r1 = r0 + kBlockRows < hi ? r0 + kBlockRows : hi;
    memset(blk, 0, 2 * (size_t)n * sizeof(float));
    for (int64_t r = r0; r < r1; r++)
      row_any(avx2, g + r * n, x + r * n, mean[r], rstd[r], w, bw, bb, dx + r * n, n);
    for (int64_t i = 0; i < n; i++) tw[i] += bw[i], tb[i] += bb[i];
  }
}

bool tpu_hostnorm_layer_norm_backward(const float* g, const float* x, const float* mean,
                                      const float* rstd, const float* w, float* dx, float* dw,
                                      float* db, int64_t rows, int64_t n) {
  float* blk = malloc(2 * (size_t)n * sizeof(float));
  if (!blk) return false;
  rows_run(g, x, mean, rstd, w, dx, dw, db, blk, 0, rows, n);
  free(blk);
  return true;
}

/* ---- the FFI handler --------------------------------------------------------- */

/* Parts of at least this many elements, as hostrow's (a pool thread woken
 * for a few microseconds of work costs more than it gives). */
enum { kPartElems = 65536, kMinElems = 4096 };

typedef struct {
  const float *g, *x, *mean, *rstd, *w;
  float* dx;
  int64_t rows, n;
  int parts;
  float* scratch; /* per part: its column sums (2n), then its block's (2n) */
} job_t;

static void job_part(void* ctx, int part) {
  const job_t* j = ctx;
  int64_t lo = j->rows * part / j->parts, hi = j->rows * (part + 1) / j->parts;
  float* s = j->scratch + (size_t)part * 4 * (size_t)j->n;
  rows_run(j->g, j->x, j->mean, j->rstd, j->w, j->dx, s, s + j->n, s + 2 * j->n, lo, hi, j->n);
}

static int64_t numel(const XLA_FFI_Buffer* b) {
  int64_t c = 1;
  for (int64_t d = 0; d < b->rank; d++) c *= b->dims[d];
  return c;
}

/* layer_norm_bwd(g, x, mean, rstd[, w]) {n: i64} -> (dx, dw, db). */
static XLA_FFI_Error* layer_norm_bwd(XLA_FFI_CallFrame* f) {
  if (tpu_hostffi_answer_metadata(f)) return NULL;
  if (f->stage != XLA_FFI_ExecutionStage_EXECUTE) return NULL;
  static const char kBad[] = "torchtpu host layer_norm backward: unexpected operands";
  int64_t n, nargs = f->args.size;
  if ((nargs != 4 && nargs != 5) || f->rets.size != 3 ||
      !tpu_hostffi_scalar_attr(f, "n", XLA_FFI_DataType_S64, &n) || n < 1)
    return tpu_hostffi_error(f, kBad);
  const XLA_FFI_Buffer *in[5] = {0}, *out[3];
  for (int64_t i = 0; i < nargs; i++) {
    if (f->args.types[i] != XLA_FFI_ArgType_BUFFER) return tpu_hostffi_error(f, kBad);
    in[i] = f->args.args[i];
    if (in[i]->dtype != XLA_FFI_DataType_F32) return tpu_hostffi_error(f, kBad);
  }
  for (int i = 0; i < 3; i++) {
    if (f->rets.types[i] != XLA_FFI_RetType_BUFFER) return tpu_hostffi_error(f, kBad);
    out[i] = f->rets.rets[i];
    if (out[i]->dtype != XLA_FFI_DataType_F32) return tpu_hostffi_error(f, kBad);
  }
  int64_t total = numel(in[0]), rows = total / n;
  if (total % n || numel(in[1]) != total || numel(out[0]) != total || numel(in[2]) != rows ||
      numel(in[3]) != rows || (in[4] && numel(in[4]) != n) || numel(out[1]) != n ||
      numel(out[2]) != n)
    return tpu_hostffi_error(f, kBad);
  float *dw = out[1]->data, *db = out[2]->data;
  if (rows == 0) {
    memset(dw, 0, (size_t)n * sizeof(float));
    memset(db, 0, (size_t)n * sizeof(float));
    return NULL;
  }
  int64_t by_size = total / kPartElems;
  int threads = tpu_hostffi_threads(f);
  job_t j = {.g = in[0]->data, .x = in[1]->data, .mean = in[2]->data, .rstd = in[3]->data,
             .w = in[4] ? in[4]->data : NULL, .dx = out[0]->data, .rows = rows, .n = n};
  j.parts = by_size < threads ? (int)(by_size < 1 ? 1 : by_size) : threads;
  if (j.parts > rows) j.parts = (int)rows;
  j.scratch = malloc((size_t)j.parts * 4 * (size_t)n * sizeof(float));
  if (!j.scratch) return tpu_hostffi_error(f, "torchtpu host layer_norm backward: out of memory");
  tpu_hostffi_parallel(f, j.parts, job_part, &j);
  /* The parts' sums in part order: the same result whoever ran them. */
  for (int64_t i = 0; i < n; i++) {
    float sw = 0, sb = 0;
    for (int p = 0; p < j.parts; p++) {
      const float* s = j.scratch + (size_t)p * 4 * (size_t)n;
      sw += s[i];
      sb += s[n + i];
    }
    dw[i] = sw;
    db[i] = sb;
  }
  free(j.scratch);
  return NULL;
}

static const char* const kTargets[1] = {"torchtpu_norm_layer_norm_bwd"};
static XLA_FFI_Handler* const kHandlers[1] = {layer_norm_bwd};

/* Compiled once before the rewrite is turned on (tpu_hostffi_register). */
static const char kProbe[] =
    "module @torchtpu_norm_probe {\n"
    "  func.func public @main(%arg0: tensor<2x2xf32>, %arg1: tensor<2xf32>) -> "
    "(tensor<2x2xf32>) {\n"
    "    %0:3 = \"stablehlo.custom_call\"(%arg0, %arg0, %arg1, %arg1) {api_version = 4 : i32, "
    "backend_config = {n = 2 : i64}, call_target_name = \"torchtpu_norm_layer_norm_bwd\"} : "
    "(tensor<2x2xf32>, tensor<2x2xf32>, tensor<2xf32>, tensor<2xf32>) -> (tensor<2x2xf32>, "
    "tensor<2xf32>, tensor<2xf32>)\n"
    "    \"func.return\"(%0#0) : (tensor<2x2xf32>) -> ()\n"
    "  }\n"
    "}\n";

void tpu_hostnorm_register(tpu_client_t* client) {
  if (!client || !tpu_client_is_cpu(client) ||
      !(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) ||
      tpu_env_get_int("TORCHTPU_HOST_ROW", 1) == 0 || tpu_env_get_int("TORCHTPU_HOST_GEMM", 1) == 0)
    return;
  atomic_store(&g_registered, tpu_hostffi_register(client, kTargets, kHandlers, 1, kProbe,
                                                   "host layer_norm backward"));
}

/* ---- the text rewrite ------------------------------------------------------- */

static const char kMark[] = "torchtpu_norm = \"";

/* layer_norm_bwd g x mean rstd w|- dx dw (hostnorm.h) */
enum { kWords = 8, kG = 1, kX, kMean, kRstd, kW, kDx, kDw };

typedef struct {
  const char* line;
  const char* eol;
  const char* word[kWords];
  size_t len[kWords];
  tpu_hlo_type_t x, m, w; /* x (g, dx), mean (rstd), the weight's (dw, db) */
  bool has_w;
} plan_t;


/* The type of value `w` (word i of p) from the line of [fn, p->line)
 * defining it. */
static bool type_of_word(const plan_t* p, int i, const char* fn, tpu_hlo_type_t* t) {
  for (const char* l = fn; l < p->line;) {
    const char* e = memchr(l, '\n', (size_t)(p->line - l));
    if (!e) e = p->line;
    if (tpu_hostffi_defines(l, e, p->word[i], p->len[i])) return tpu_hostffi_result_type(l, e, t);
    l = e + 1;
  }
  return false;
}

static bool plan_line(void* plan, const char* fn, const char* fn_end, const char* line,
                      const char* eol) {
  (void)fn_end;
  plan_t* p = plan;
  const char* mark = memmem(line, (size_t)(eol - line), kMark, sizeof kMark - 1);
  const char* op = memmem(line, (size_t)(eol - line), " = \"stablehlo.", 14);
  if (!mark || !op || op > mark) return false;
  *p = (plan_t){.line = line, .eol = eol};
  if (tpu_hostffi_marker_words(mark + sizeof kMark - 1, eol, p->word, p->len, kWords) != kWords ||
      p->len[0] != 14 || memcmp(p->word[0], "layer_norm_bwd", 14) != 0)
    return false;
  p->has_w = !(p->len[kW] == 1 && p->word[kW][0] == '-');
  for (int i = kG; i <= kDw; i++)
    if (p->word[i][0] != '%' && !(i == kW && !p->has_w)) return false;
  tpu_hlo_type_t r;
  if (!tpu_hostffi_result_type(line, eol, &p->w) || !type_of_word(p, kDx, fn, &p->x) ||
      !type_of_word(p, kMean, fn, &p->m) || !type_of_word(p, kRstd, fn, &r) ||
      !type_of_word(p, kDw, fn, &r) || !tpu_hlo_type_equal(&r, &p->w))
    return false;
  int k = p->w.rank;
  int64_t n = tpu_hlo_type_numel(&p->w), total = tpu_hlo_type_numel(&p->x);
  if (p->x.dtype != TPU_DTYPE_FLOAT32 || p->w.dtype != TPU_DTYPE_FLOAT32 ||
      p->m.dtype != TPU_DTYPE_FLOAT32 || p->m.rank != 1 || k < 1 || k > p->x.rank || n < 1 ||
      total < kMinElems || p->m.dims[0] * n != total)
    return false;
  for (int d = 0; d < k; d++)
    if (p->w.dims[d] != p->x.dims[p->x.rank - k + d]) return false;
  return true;
}

/* The call, replacing the marked line, and the identities naming its
 * three results (dx, dw under their names, db under the line's). */
static void append_call(tpu_strbuf_t* sb, const void* plan) {
  const plan_t* p = plan;
  const char* op = memmem(p->line, (size_t)(p->eol - p->line), " = \"stablehlo.", 14);
  const char* name = p->line;
  while (*name == ' ') name++;
  int indent = (int)(name - p->line), name_len = (int)(op - name);
  int nops = 4 + p->has_w;
  const tpu_hlo_type_t* types[5] = {&p->x, &p->x, &p->m, &p->m, &p->w};
  tpu_strbuf_appendf(sb, "%*s%%lnb%.*s:3 = \"stablehlo.custom_call\"(", indent, "",
                     name_len - 1, name + 1);
  for (int i = 0; i < nops; i++) {
    if (i) tpu_strbuf_append(sb, ", ");
    tpu_strbuf_append_n(sb, p->word[kG + i], p->len[kG + i]);
  }
  tpu_strbuf_appendf(sb,
                     ") {api_version = 4 : i32, backend_config = {n = %lld : i64}, "
                     "call_target_name = \"%s\", operand_layouts = [",
                     (long long)tpu_hlo_type_numel(&p->w), kTargets[0]);
  for (int i = 0; i < nops; i++) {
    if (i) tpu_strbuf_append(sb, ", ");
    tpu_hostffi_append_layout(sb, types[i]->rank);
  }
  tpu_strbuf_append(sb, "], result_layouts = [");
  for (int i = 0; i < 3; i++) {
    if (i) tpu_strbuf_append(sb, ", ");
    tpu_hostffi_append_layout(sb, i ? p->w.rank : p->x.rank);
  }
  tpu_strbuf_append(sb, "]} : (");
  for (int i = 0; i < nops; i++) {
    if (i) tpu_strbuf_append(sb, ", ");
    tpu_hlo_type_append(sb, types[i]);
  }
  tpu_strbuf_append(sb, ") -> (");
  for (int i = 0; i < 3; i++) {
    if (i) tpu_strbuf_append(sb, ", ");
    tpu_hlo_type_append(sb, i ? &p->w : &p->x);
  }
  tpu_strbuf_append(sb, ")\n");
  const char* names[3] = {p->word[kDx], p->word[kDw], name};
  size_t lens[3] = {p->len[kDx], p->len[kDw], (size_t)name_len};
  const tpu_hlo_type_t* results[3] = {&p->x, &p->w, &p->w};
  tpu_hostffi_append_results(sb, indent, "lnb", name + 1, name_len - 1, names, lens, results, 3);
}

/* The call also defines dx and dw: their lines go. */
static bool drops(const void* plan, const char* line, const char* eol) {
  const plan_t* p = plan;
  return tpu_hostffi_defines(line, eol, p->word[kDx], p->len[kDx]) ||
         tpu_hostffi_defines(line, eol, p->word[kDw], p->len[kDw]);
}

tpu_status_t tpu_hostnorm_rewrite(const char* text, size_t len, char** out_text,
                                  size_t* out_len) {
  static const tpu_hostffi_rewriter_t kRewriter = {
      .mark = kMark, .plan_size = sizeof(plan_t), .plan_line = plan_line, .drops = drops,
      .append = append_call, .what = "rewriting a program's layer_norm backwards"};
  return tpu_hostffi_rewrite(&kRewriter, text, len, out_text, out_len);
}
