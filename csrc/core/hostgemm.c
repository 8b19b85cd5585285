#include "hostgemm.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "env.h"
#include "hlo/signature.h"
#include "hlo/strbuf.h"
#include "hlo/type.h"
#include "hostffi.h"

static _Atomic(tpu_hostgemm_fn_t) g_fn;
static atomic_bool g_registered;

void tpu_hostgemm_install(tpu_hostgemm_fn_t fn) { atomic_store(&g_fn, fn); }

bool tpu_hostgemm_active(void) {
  return atomic_load(&g_registered) && atomic_load(&g_fn) != NULL;
}

/* ---- big products on XLA's threads ------------------------------------------- */

/* The installed gemm runs on one thread (BLAS threads of its own would
 * oversubscribe XLA's pool and spin against it): fastest for a training
 * step's many mid-sized products, which XLA runs side by side, but a big
 * product alone would use one core of many (2048^2: 176 GFLOP/s against
 * XLA's 322 on two cores). So a product of at least kSplitMacs
 * multiply-adds is cut into one block of rows (or columns) of the result
 * per thread of XLA's pool; blocks are offered to the pool, and the calling
 * thread takes whichever no pool thread has started (all of them when the
 * pool is busy with the program's other work: no thread is ever added).
 * The blocks depend on the shape and the pool's size alone, so results
 * never depend on who computed them. A batch of products (attention's
 * [64, 64, 16] x [64, 16, 64]: 66 us on one thread, PyTorch's 30 on two)
 * is cut the same way into runs of whole products when it has at least as
 * many as the pool has threads. */
enum { kSplitMacs = 1 << 21, kMaxParts = TPU_HOSTFFI_MAX_PARTS };

/* `count` products, the first `g`, the next ones `stride_*` bytes on. */
typedef struct {
  tpu_hostgemm_t g;
  int64_t count;
  size_t stride_a, stride_b, stride_c;
} run_t;

/* g moved on to the next product of r's batch. */
static void next_product(tpu_hostgemm_t* g, const run_t* r) {
  g->a = (const char*)g->a + r->stride_a;
  g->b = (const char*)g->b + r->stride_b;
  g->c = (char*)g->c + r->stride_c;
}

static void run_products(tpu_hostgemm_fn_t fn, const run_t* r) {
  tpu_hostgemm_t g = r->g;
  for (int64_t i = 0; i < r->count; i++, next_product(&g, r)) fn(&g);
}

/* The blocks of one call, run by tpu_hostffi_parallel. */
typedef struct {
  tpu_hostgemm_fn_t fn;
  run_t block[kMaxParts];
} blocks_t;

static void block_work(void* ctx, int i) {
  const blocks_t* b = ctx;
  run_products(b->fn, &b->block[i]);
}

/* Block `i` of `parts` of g along its longer side of the result. */
static tpu_hostgemm_t block(const tpu_hostgemm_t* g, int i, int parts) {
  size_t elem = g->dtype == TPU_DTYPE_FLOAT32 ? 4 : 8;
  tpu_hostgemm_t b = *g;
  bool rows = g->m >= g->n;
  int64_t len = rows ? g->m : g->n, lo = len * i / parts, hi = len * (i + 1) / parts;
  if (rows) { /* rows of c: rows (or, transposed, columns) of a */
    b.m = hi - lo;
    b.a = (const char*)g->a + (size_t)(g->trans_a ? lo : lo * g->lda) * elem;
    b.c = (char*)g->c + (size_t)(lo * g->ldc) * elem;
  } else { /* columns of c: columns (or, transposed, rows) of b */
    b.n = hi - lo;
    b.b = (const char*)g->b + (size_t)(g->trans_b ? lo * g->ldb : lo) * elem;
    b.c = (char*)g->c + (size_t)lo * elem;
  }
  return b;
}

/* One product, cut into blocks of rows or columns when big. */
static void run_product(const XLA_FFI_CallFrame* frame, tpu_hostgemm_fn_t fn,
                        const tpu_hostgemm_t* g, int threads) {
  int64_t len = g->m >= g->n ? g->m : g->n;
  int parts = len / 16 < threads ? (int)(len / 16) : threads; /* blocks of >= 16 */
  if (parts < 2 || g->m * g->n * g->k < kSplitMacs) {
    fn(g);
    return;
  }
  blocks_t j = {.fn = fn};
  for (int i = 0; i < parts; i++) j.block[i] = (run_t){.g = block(g, i, parts), .count = 1};
  tpu_hostffi_parallel(frame, parts, block_work, &j);
}

/* `batch` products of g's shape, one after another in memory: runs of
 * whole products on the pool's threads when there are enough of them and
 * the whole is big; else one at a time. */
static void run_batch(const XLA_FFI_CallFrame* frame, tpu_hostgemm_fn_t fn,
                      const tpu_hostgemm_t* g, int64_t batch, int threads) {
  size_t elem = g->dtype == TPU_DTYPE_FLOAT32 ? 4 : 8;
  run_t all = {.g = *g,
               .count = batch,
               .stride_a = (size_t)(g->m * g->k) * elem,
               .stride_b = (size_t)(g->k * g->n) * elem,
               .stride_c = (size_t)(g->m * g->n) * elem};
  if (threads >= 2 && batch >= threads && batch * g->m * g->n * g->k >= kSplitMacs) {
    blocks_t j = {.fn = fn};
    for (int i = 0; i < threads; i++) {
      int64_t lo = batch * i / threads, hi = batch * (i + 1) / threads;
      j.block[i] = all;
      j.block[i].count = hi - lo;
      j.block[i].g.a = (const char*)g->a + (size_t)lo * all.stride_a;
      j.block[i].g.b = (const char*)g->b + (size_t)lo * all.stride_b;
      j.block[i].g.c = (char*)g->c + (size_t)lo * all.stride_c;
    }
    tpu_hostffi_parallel(frame, threads, block_work, &j);
    return;
  }
  tpu_hostgemm_t one = *g;
  for (int64_t i = 0; i < batch; i++, next_product(&one, &all)) run_product(frame, fn, &one, threads);
}

/* ---- the FFI handlers ------------------------------------------------------ */

static XLA_FFI_Error* run_gemm(XLA_FFI_CallFrame* frame, bool trans_a, bool trans_b) {
  if (tpu_hostffi_answer_metadata(frame)) return NULL;
  if (frame->stage != XLA_FFI_ExecutionStage_EXECUTE) return NULL;
  tpu_hostgemm_fn_t fn = atomic_load(&g_fn);
  if (!fn) return tpu_hostffi_error(frame, "torchtpu host gemm: no gemm is installed");
  if (frame->args.size != 2 || frame->rets.size != 1 ||
      frame->args.types[0] != XLA_FFI_ArgType_BUFFER ||
      frame->args.types[1] != XLA_FFI_ArgType_BUFFER ||
      frame->rets.types[0] != XLA_FFI_RetType_BUFFER)
    return tpu_hostffi_error(frame, "torchtpu host gemm: expected two buffers in, one out");
  const XLA_FFI_Buffer* a = frame->args.args[0];
  const XLA_FFI_Buffer* b = frame->args.args[1];
  const XLA_FFI_Buffer* c = frame->rets.rets[0];
  int64_t r = c->rank;
  if (r < 2 || a->rank != r || b->rank != r || a->dtype != c->dtype || b->dtype != c->dtype ||
      (c->dtype != XLA_FFI_DataType_F32 && c->dtype != XLA_FFI_DataType_F64))
    return tpu_hostffi_error(frame, "torchtpu host gemm: operands do not match the product");
  int64_t batch = 1;
  for (int64_t d = 0; d < r - 2; d++) batch *= c->dims[d];
  int64_t m = c->dims[r - 2], n = c->dims[r - 1];
  int64_t k = trans_a ? a->dims[r - 2] : a->dims[r - 1];
  size_t elem = c->dtype == XLA_FFI_DataType_F32 ? 4 : 8;
  if (batch == 0 || m == 0 || n == 0) return NULL;
  if (k == 0) { /* an empty sum */
    memset(c->data, 0, (size_t)(batch * m * n) * elem);
    return NULL;
  }
  tpu_hostgemm_t g = {.dtype = elem == 4 ? TPU_DTYPE_FLOAT32 : TPU_DTYPE_FLOAT64,
                      .trans_a = trans_a,
                      .trans_b = trans_b,
                      .m = m,
                      .n = n,
                      .k = k,
                      .lda = trans_a ? m : k,
                      .ldb = trans_b ? k : n,
                      .ldc = n};
  g.a = a->data;
  g.b = b->data;
  g.c = c->data;
  run_batch(frame, fn, &g, batch, tpu_hostffi_threads(frame));
  return NULL;
}

static XLA_FFI_Error* gemm_nn(XLA_FFI_CallFrame* f) { return run_gemm(f, false, false); }
static XLA_FFI_Error* gemm_nt(XLA_FFI_CallFrame* f) { return run_gemm(f, false, true); }
static XLA_FFI_Error* gemm_tn(XLA_FFI_CallFrame* f) { return run_gemm(f, true, false); }
static XLA_FFI_Error* gemm_tt(XLA_FFI_CallFrame* f) { return run_gemm(f, true, true); }

/* Indexed by trans_a * 2 + trans_b. */
static const char* const kTargets[4] = {"torchtpu_gemm_nn", "torchtpu_gemm_nt",
                                        "torchtpu_gemm_tn", "torchtpu_gemm_tt"};
static XLA_FFI_Handler* const kHandlers[4] = {gemm_nn, gemm_nt, gemm_tn, gemm_tt};

/* Compiled once before the rewrite is turned on (tpu_hostffi_register). */
static const char kProbe[] =
    "module @torchtpu_gemm_probe {\n"
    "  func.func public @main(%arg0: tensor<2x2xf32>, %arg1: tensor<2x2xf32>) -> "
    "(tensor<2x2xf32>) {\n"
    "    %0 = \"stablehlo.custom_call\"(%arg0, %arg1) {api_version = 4 : i32, "
    "call_target_name = \"torchtpu_gemm_nn\"} : (tensor<2x2xf32>, tensor<2x2xf32>) -> "
    "tensor<2x2xf32>\n"
    "    \"func.return\"(%0) : (tensor<2x2xf32>) -> ()\n"
    "  }\n"
    "}\n";

void tpu_hostgemm_register(tpu_client_t* client) {
  if (!client || !tpu_client_is_cpu(client) || !atomic_load(&g_fn) ||
      tpu_env_get_int("TORCHTPU_HOST_GEMM", 1) == 0)
    return;
  atomic_store(&g_registered,
               tpu_hostffi_register(client, kTargets, kHandlers, 4, kProbe, "host gemm"));
}

/* ---- the text rewrite ------------------------------------------------------- */

/* Parses "[0, 1]" (or "[]") at p into dims; the count, or -1. */
static int parse_dim_list(const char* p, const char* end, int64_t* dims, int cap) {
  if (p >= end || *p != '[') return -1;
  return tpu_hostffi_int_list(p + 1, end, ']', dims, cap);
}

/* The list after `key = ` inside the dot attribute [start, end); absent: 0. */
static int dim_list(const char* start, const char* end, const char* key, int64_t* dims) {
  size_t kl = strlen(key);
  for (const char* p = start; p + kl + 3 < end; p++)
    if (memcmp(p, key, kl) == 0 && memcmp(p + kl, " = ", 3) == 0)
      return parse_dim_list(p + kl + 3, end, dims, TPU_HLO_MAX_RANK);
  return 0;
}

/* The types of "(T, T) -> T" at p (end of line at end). */
static bool parse_signature(const char* p, const char* end, tpu_hlo_type_t types[3]) {
  static const char* const kSeps[3] = {"(", ", ", ") -> "};
  for (int i = 0; i < 3; i++) {
    size_t sl = strlen(kSeps[i]);
    if ((size_t)(end - p) < sl || memcmp(p, kSeps[i], sl) != 0) return false;
    p += sl;
    /* A ranked float tensor type has no nested '<' or ','. */
    const char* close = memchr(p, '>', (size_t)(end - p));
    if (!close) return false;
    tpu_status_t s = tpu_hlo_parse_type(p, (size_t)(close + 1 - p), &types[i]);
    if (s) { /* not one of ours (complex, dynamic): the dot stays XLA's */
      tpu_status_free(s);
      return false;
    }
    p = close + 1;
  }
  return true;
}

/* Whether the dot at [attr_start, attr_end) with these types is a (batched)
 * gemm the handlers compute; sets the transposes. */
static bool gemm_form(const char* as, const char* ae, const tpu_hlo_type_t t[3], bool* trans_a,
                      bool* trans_b) {
  int64_t lb[TPU_HLO_MAX_RANK], rb[TPU_HLO_MAX_RANK], lc[TPU_HLO_MAX_RANK], rc[TPU_HLO_MAX_RANK];
  int nlb = dim_list(as, ae, "lhs_batching_dimensions", lb);
  int nrb = dim_list(as, ae, "rhs_batching_dimensions", rb);
  int nlc = dim_list(as, ae, "lhs_contracting_dimensions", lc);
  int nrc = dim_list(as, ae, "rhs_contracting_dimensions", rc);
  int r = t[2].rank;
  if (nlb < 0 || nlb != nrb || nlc != 1 || nrc != 1 || r != nlb + 2 || t[0].rank != r ||
      t[1].rank != r)
    return false;
  if (t[2].dtype != TPU_DTYPE_FLOAT32 && t[2].dtype != TPU_DTYPE_FLOAT64) return false;
  if (t[0].dtype != t[2].dtype || t[1].dtype != t[2].dtype) return false;
  for (int i = 0; i < nlb; i++)
    if (lb[i] != i || rb[i] != i) return false;
  if ((lc[0] != r - 2 && lc[0] != r - 1) || (rc[0] != r - 2 && rc[0] != r - 1)) return false;
  for (int i = 0; i < 3; i++) /* the BLAS takes 32-bit sizes */
    for (int d = 0; d < r; d++)
      if (t[i].dims[d] < 0 || t[i].dims[d] > INT32_MAX) return false;
  *trans_a = lc[0] == r - 2;
  *trans_b = rc[0] == r - 1;
  int64_t k = t[0].dims[lc[0]];
  /* Tiny products stay XLA's (it fuses them with their neighbours), and so
   * do sums of one product: XLA turns them into multiplies whose -0.0 the
   * lowering relies on (linalg.c set_product). */
  return k >= 2 && t[2].dims[r - 2] * t[2].dims[r - 1] * k >= 4096;
}

static const char kDot[] = "\"stablehlo.dot_general\"(";

/* Where each SSA value %N of the function being read is defined: its
 * op's text (after "%N = ") and the end of its line. Values are numbered
 * per function (a fused program has one function per op), so the table
 * restarts at each func.func and a dot only sees the values before it. */
typedef struct defs_s {
  const char** op; /* [id]: the op's text, or NULL */
  const char** eol;
  int64_t count, cap;
} defs_t;

/* Records line [line, eol) if it starts a function or defines a value;
 * false when out of memory. */
static bool note_line(defs_t* d, const char* line, const char* eol) {
  const char* p = line;
  while (p < eol && *p == ' ') p++;
  if ((size_t)(eol - p) > 9 && memcmp(p, "func.func", 9) == 0) {
    if (d->count) memset(d->op, 0, (size_t)d->count * sizeof *d->op);
    d->count = 0;
    return true;
  }
  if (p + 1 >= eol || *p != '%' || p[1] < '0' || p[1] > '9') return true;
  int64_t id = 0;
  for (p++; p < eol && *p >= '0' && *p <= '9' && id < (1 << 24); p++) id = id * 10 + (*p - '0');
  if ((size_t)(eol - p) < 3 || memcmp(p, " = ", 3) != 0) return true;
  if (id >= d->cap) {
    int64_t grown = (id + 1) * 2;
    const char** op = realloc(d->op, (size_t)grown * sizeof *op);
    if (op) d->op = op;
    const char** ends = realloc(d->eol, (size_t)grown * sizeof *ends);
    if (ends) d->eol = ends;
    if (!op || !ends) return false;
    memset(op + d->cap, 0, (size_t)(grown - d->cap) * sizeof *op);
    d->cap = grown;
  }
  d->op[id] = p + 3;
  d->eol[id] = eol;
  if (id + 1 > d->count) d->count = id + 1;
  return true;
}

/* The single operand and the "(T) -> T" signature of the op at `op`, when
 * it is named `name`; its attributes (if any) in [*attrs, *attrs_end). */
static bool unary(const char* op, const char* eol, const char* name, const char** operand,
                  size_t* operand_len, tpu_hlo_type_t types[2], const char** attrs,
                  const char** attrs_end) {
  size_t nl = strlen(name);
  if ((size_t)(eol - op) < nl + 3 || op[0] != '"' || memcmp(op + 1, name, nl) != 0 ||
      op[nl + 1] != '"' || op[nl + 2] != '(')
    return false;
  *operand = op + nl + 3;
  const char* close = memchr(*operand, ')', (size_t)(eol - *operand));
  if (!close || memchr(*operand, ',', (size_t)(close - *operand))) return false;
  *operand_len = (size_t)(close - *operand);
  const char* sig = memmem(close, (size_t)(eol - close), " : (", 4);
  if (!sig) return false;
  *attrs = close + 1;
  *attrs_end = sig;
  const char* arrow = memmem(sig, (size_t)(eol - sig), ") -> ", 5);
  if (!arrow) return false;
  tpu_status_t s = tpu_hlo_parse_type(sig + 4, (size_t)(arrow - sig - 4), &types[0]);
  if (!s) s = tpu_hlo_parse_type(arrow + 5, (size_t)(eol - arrow - 5), &types[1]);
  if (s) {
    tpu_status_free(s);
    return false;
  }
  return true;
}

/* Whether the list after `key = array<i64: ` in [a, e) is 0, 1, ..., r-1
 * with the last two swapped (swap) or not. */
static bool is_permutation(const char* a, const char* e, const char* key, int r, bool swap) {
  const char* p = memmem(a, (size_t)(e - a), key, strlen(key));
  if (!p) return false;
  p += strlen(key);
  for (int i = 0; i < r; i++) {
    char* next;
    long long v = strtoll(p, &next, 10);
    if (next == p) return false;
    long long want = swap && i >= r - 2 ? (i == r - 2 ? r - 1 : r - 2) : i;
    if (v != want) return false;
    p = next;
    while (*p == ',' || *p == ' ') p++;
  }
  return *p == '>';
}

/* Follows operand %name back through ops that do not move elements
 * (same-type reshape, identity broadcast_in_dim) and swaps of its last two
 * dims (stablehlo.transpose, leading dims kept): the gemm reads the swapped
 * operand's source in place with its transpose flag flipped, where XLA
 * would otherwise write the transpose out for the custom call (XLA folds
 * it into its own dots). Updates *name, *len, *type and *trans. */
static void see_through(const defs_t* d, const char** name, size_t* len, tpu_hlo_type_t* type,
                        bool* trans) {
  for (int hops = 0; hops < 8; hops++) {
    if (*len < 2 || (*name)[0] != '%' || (*name)[1] < '0' || (*name)[1] > '9') return;
    char* after;
    long long id = strtoll(*name + 1, &after, 10);
    if (after != *name + *len || id >= d->count || !d->op[id]) return;
    const char *operand, *attrs, *attrs_end;
    size_t operand_len;
    tpu_hlo_type_t t[2];
    int r = type->rank;
    bool swap = false;
    if (unary(d->op[id], d->eol[id], "stablehlo.transpose", &operand, &operand_len, t, &attrs, &attrs_end) &&
        is_permutation(attrs, attrs_end, "permutation = array<i64: ", r, true))
      swap = true;
    else if (unary(d->op[id], d->eol[id], "stablehlo.broadcast_in_dim", &operand, &operand_len, t, &attrs,
                   &attrs_end) &&
             tpu_hlo_type_equal(&t[0], &t[1]) &&
             is_permutation(attrs, attrs_end, "broadcast_dimensions = array<i64: ", r, false))
      swap = false;
    else if (!(unary(d->op[id], d->eol[id], "stablehlo.reshape", &operand, &operand_len, t, &attrs,
                     &attrs_end) &&
               tpu_hlo_type_equal(&t[0], &t[1])))
      return;
    if (t[0].rank != r) return;
    *name = operand;
    *len = operand_len;
    *type = t[0];
    *trans ^= swap;
  }
}

/* Appends the custom call replacing the dot line [line, eol), or returns
 * false when the line is not an eligible dot. */
static bool rewrite_line(tpu_strbuf_t* sb, const defs_t* d, const char* line, const char* eol) {
  const char* op = memmem(line, (size_t)(eol - line), kDot, sizeof kDot - 1);
  const char* operands = op + sizeof kDot - 1;
  const char* close = memchr(operands, ')', (size_t)(eol - operands));
  if (!close || (size_t)(eol - close) < 3 || memcmp(close, ") {", 3) != 0) return false;
  const char* comma = memmem(operands, (size_t)(close - operands), ", ", 2);
  const char* attrs = close + 3;
  const char* sig = memmem(attrs, (size_t)(eol - attrs), "} : (", 5);
  if (!sig || !comma) return false;
  tpu_hlo_type_t t[3];
  bool trans[2];
  /* A dot that names its algorithm (e.g. bf16 passes) keeps XLA's. */
  if (memmem(attrs, (size_t)(sig - attrs), "algorithm", 9)) return false;
  if (!parse_signature(sig + 4, eol, t) || !gemm_form(attrs, sig, t, &trans[0], &trans[1]))
    return false;
  const char* name[2] = {operands, comma + 2};
  size_t len[2] = {(size_t)(comma - operands), (size_t)(close - comma - 2)};
  for (int i = 0; i < 2; i++) see_through(d, &name[i], &len[i], &t[i], &trans[i]);
  tpu_strbuf_append_n(sb, line, (size_t)(op - line));
  tpu_strbuf_append(sb, "\"stablehlo.custom_call\"(");
  tpu_strbuf_append_n(sb, name[0], len[0]);
  tpu_strbuf_append(sb, ", ");
  tpu_strbuf_append_n(sb, name[1], len[1]);
  tpu_strbuf_appendf(sb, ") {api_version = 4 : i32, call_target_name = \"%s\", operand_layouts = [",
                     kTargets[trans[0] * 2 + trans[1]]);
  tpu_hostffi_append_layout(sb, t[0].rank);
  tpu_strbuf_append(sb, ", ");
  tpu_hostffi_append_layout(sb, t[1].rank);
  tpu_strbuf_append(sb, "], result_layouts = [");
  tpu_hostffi_append_layout(sb, t[2].rank);
  tpu_strbuf_append(sb, "]} : (");
  tpu_hlo_type_append(sb, &t[0]);
  tpu_strbuf_append(sb, ", ");
  tpu_hlo_type_append(sb, &t[1]);
  tpu_strbuf_append(sb, ") -> ");
  tpu_hlo_type_append(sb, &t[2]);
  return true;
}

tpu_status_t tpu_hostgemm_rewrite(const char* text, size_t len, char** out_text,
                                  size_t* out_len) {
  *out_text = NULL;
  *out_len = 0;
  const char* end = text + len;
  if (!memmem(text, len, kDot, sizeof kDot - 1)) return NULL;
  defs_t defs = {0};
  tpu_strbuf_t sb = {0};
  const char* copied = text; /* text before this is in sb */
  bool changed = false, oom = false;
  for (const char* line = text; line < end && !oom;) {
    const char* eol = memchr(line, '\n', (size_t)(end - line));
    if (!eol) eol = end;
    oom = !note_line(&defs, line, eol);
    if (!oom && memmem(line, (size_t)(eol - line), kDot, sizeof kDot - 1)) {
      size_t mark = sb.len;
      tpu_strbuf_append_n(&sb, copied, (size_t)(line - copied));
      if (rewrite_line(&sb, &defs, line, eol)) {
        changed = true;
        copied = eol;
      } else { /* keep the line as it is */
        sb.len = mark;
        if (sb.data) sb.data[mark] = '\0';
      }
    }
    line = eol + 1;
  }
  free(defs.op);
  free(defs.eol);
  if (oom || !changed) {
    tpu_strbuf_free(&sb);
    return oom ? tpu_status_oom("rewriting a program's dots") : NULL;
  }
  tpu_strbuf_append_n(&sb, copied, (size_t)(end - copied));
  char* out = tpu_strbuf_take(&sb, out_len);
  if (!out) return tpu_status_oom("rewriting a program's dots");
  *out_text = out;
  return NULL;
}
