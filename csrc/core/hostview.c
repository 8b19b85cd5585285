#include "hostview.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hlo/signature.h"
#include "hostffi.h"

/* Chains longer than this are left materialised (a view read is four or
 * five ops). */
enum { kMaxDepth = 32 };

static void row_major(tpu_hostview_t* v, const char* name, size_t len,
                      const tpu_hlo_type_t* t) {
  v->base = name;
  v->base_len = len;
  v->base_type = *t;
  v->type = *t;
  v->offset = 0;
  int64_t s = 1;
  for (int d = t->rank - 1; d >= 0; d--) {
    v->strides[d] = s;
    s *= t->dims[d];
  }
}

/* The line of [fn, limit) defining [name, name + len), or NULL. */
static const char* def_line(const char* fn, const char* limit, const char* name, size_t len,
                            const char** eol) {
  for (const char* l = fn; l < limit;) {
    const char* e = memchr(l, '\n', (size_t)(limit - l));
    if (!e) e = limit;
    if (tpu_hostffi_defines(l, e, name, len)) {
      *eol = e;
      return l;
    }
    l = e + 1;
  }
  return NULL;
}

/* The last occurrence of [s, s + n) in [p, end), or NULL. */
static const char* last_of(const char* p, const char* end, const char* s, size_t n) {
  const char* found = NULL;
  for (const char* q = p; (q = memmem(q, (size_t)(end - q), s, n)); q += n) found = q;
  return found;
}

static bool parse_type(const char* p, const char* end, tpu_hlo_type_t* t) {
  tpu_status_t s = tpu_hlo_parse_type(p, (size_t)(end - p), t);
  if (s) tpu_status_free(s);
  return !s;
}

/* "key = array<i64: a, b, ...>" (or "array<i64>", empty) of the line:
 * the count, or -1. */
static int int_array(const char* line, const char* eol, const char* key, int64_t* out,
                     int max) {
  const char* k = memmem(line, (size_t)(eol - line), key, strlen(key));
  if (!k) return -1;
  const char* p = k + strlen(key);
  static const char kArr[] = " = array<i64";
  if ((size_t)(eol - p) < sizeof kArr - 1 || memcmp(p, kArr, sizeof kArr - 1) != 0) return -1;
  p += sizeof kArr - 1;
  if (*p == '>') return 0;
  if (*p != ':') return -1;
  return tpu_hostffi_int_list(p + 1, eol, '>', out, max);
}

/* Strides of the same elements seen as new dims, or false when they are
 * not a view of the old ones (PyTorch's computeStride). */
static bool reshape_strides(const tpu_hlo_type_t* from, const int64_t* os,
                            const tpu_hlo_type_t* to, int64_t* ns) {
  if (tpu_hlo_type_numel(from) != tpu_hlo_type_numel(to) || tpu_hlo_type_numel(to) == 0)
    return false;
  for (int d = 0; d < to->rank; d++) ns[d] = 0;
  if (from->rank == 0) return true; /* one element: every new dim is 1 */
  int view_d = to->rank - 1;
  int64_t chunk = os[from->rank - 1], tensor_numel = 1, view_numel = 1;
  for (int d = from->rank - 1; d >= 0; d--) {
    tensor_numel *= from->dims[d];
    if (d == 0 || (from->dims[d - 1] != 1 && os[d - 1] != tensor_numel * chunk)) {
      while (view_d >= 0 && (view_numel < tensor_numel || to->dims[view_d] == 1)) {
        ns[view_d] = view_numel * chunk;
        view_numel *= to->dims[view_d];
        view_d--;
      }
      if (view_numel != tensor_numel) return false;
      if (d > 0) {
        chunk = os[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  return view_d == -1;
}

/* v (the operand's view) moved through the line's op to its result of
 * type t; false when the op is not one that only moves elements. */
static bool apply(const char* line, const char* eol, const char* op, size_t op_len,
                  const tpu_hlo_type_t* from, const tpu_hlo_type_t* t, tpu_hostview_t* v) {
  int64_t ns[TPU_HLO_MAX_RANK], a[TPU_HLO_MAX_RANK], b[TPU_HLO_MAX_RANK], c[TPU_HLO_MAX_RANK];
  int r = t->rank;
#define OP_IS(s) (op_len == sizeof(s) - 1 && memcmp(op, s, op_len) == 0)
  if (OP_IS("reshape")) {
    if (!reshape_strides(from, v->strides, t, ns)) return false;
  } else if (OP_IS("transpose")) {
    if (int_array(line, eol, "permutation", a, TPU_HLO_MAX_RANK) != r || from->rank != r)
      return false;
    for (int d = 0; d < r; d++) {
      if (a[d] < 0 || a[d] >= r || t->dims[d] != from->dims[a[d]]) return false;
      ns[d] = v->strides[a[d]];
    }
  } else if (OP_IS("slice")) {
    if (from->rank != r || int_array(line, eol, "start_indices", a, r) != r ||
        int_array(line, eol, "limit_indices", b, r) != r ||
        int_array(line, eol, "strides", c, r) != r)
      return false;
    for (int d = 0; d < r; d++) {
      if (a[d] < 0 || c[d] < 1 || b[d] > from->dims[d] ||
          (b[d] - a[d] + c[d] - 1) / c[d] != t->dims[d])
        return false;
      v->offset += a[d] * v->strides[d];
      ns[d] = v->strides[d] * c[d];
    }
  } else if (OP_IS("broadcast_in_dim")) {
    int n = int_array(line, eol, "broadcast_dimensions", a, TPU_HLO_MAX_RANK);
    if (n != from->rank) return false;
    for (int d = 0; d < r; d++) ns[d] = 0;
    for (int i = 0; i < n; i++) {
      if (a[i] < 0 || a[i] >= r) return false;
      if (from->dims[i] == t->dims[a[i]]) ns[a[i]] = v->strides[i];
      else if (from->dims[i] != 1) return false;
    }
  } else {
    return false;
  }
#undef OP_IS
  memcpy(v->strides, ns, sizeof(int64_t) * (size_t)r);
  v->type = *t;
  return true;
}

static void resolve(const char* fn, const char* limit, const char* name, size_t len,
                    const tpu_hlo_type_t* type, tpu_hostview_t* out, int depth) {
  row_major(out, name, len, type);
  const char* eol;
  const char* line = depth < kMaxDepth ? def_line(fn, limit, name, len, &eol) : NULL;
  if (!line) return;
  static const char kOp[] = " = \"stablehlo.";
  const char* op = memmem(line, (size_t)(eol - line), kOp, sizeof kOp - 1);
  if (!op) return;
  op += sizeof kOp - 1;
  const char* op_end = memchr(op, '"', (size_t)(eol - op));
  if (!op_end || op_end[1] != '(' || op_end[2] != '%') return;
  const char* arg = op_end + 2;
  const char* arg_end = arg;
  while (arg_end < eol && *arg_end != ')' && *arg_end != ',') arg_end++;
  if (arg_end == eol || *arg_end != ')') return; /* one operand */
  /* "... : (T1) -> T" at the line's end */
  const char* colon = last_of(line, eol, " : (", 4);
  const char* arrow = last_of(line, eol, ") -> ", 5);
  tpu_hlo_type_t from, t;
  if (!colon || !arrow || arrow < colon || !parse_type(colon + 4, arrow, &from) ||
      !parse_type(arrow + 5, eol, &t) || !tpu_hlo_type_equal(&t, type) ||
      from.dtype != t.dtype)
    return;
  tpu_hostview_t in;
  resolve(fn, line, arg, (size_t)(arg_end - arg), &from, &in, depth + 1);
  if (apply(line, eol, op, (size_t)(op_end - op), &from, &t, &in)) *out = in;
}

void tpu_hostview_resolve(const char* fn, const char* limit, const char* name, size_t len,
                          const tpu_hlo_type_t* type, tpu_hostview_t* out) {
  resolve(fn, limit, name, len, type, out, 0);
}

bool tpu_hostview_rows_of_columns(const tpu_hostview_t* v) {
  const tpu_hlo_type_t* t = &v->type;
  if (t->rank < 1 || v->offset < 0 || tpu_hlo_type_numel(t) == 0) return false;
  if (t->dims[t->rank - 1] > 1 && v->strides[t->rank - 1] != 1) return false;
  int64_t last = v->offset;
  for (int d = 0; d < t->rank; d++) {
    if (v->strides[d] < 0) return false;
    last += (t->dims[d] - 1) * v->strides[d];
  }
  return last < tpu_hlo_type_numel(&v->base_type);
}

bool tpu_hostview_transposed_next(const char* p, const char* end, const char* name, size_t len,
                                  const int64_t* perm, int rank) {
  char want[256];
  int n = snprintf(want, sizeof want, ") {permutation = array<i64: ");
  for (int d = 0; d < rank && n < (int)sizeof want - 32; d++)
    n += snprintf(want + n, sizeof want - (size_t)n, "%s%lld", d ? ", " : "", (long long)perm[d]);
  n += snprintf(want + n, sizeof want - (size_t)n, ">}");
  static const char kT[] = "\"stablehlo.transpose\"(";
  for (const char* q = p; (q = memmem(q, (size_t)(end - q), kT, sizeof kT - 1)); q++) {
    const char* a = q + sizeof kT - 1;
    if ((size_t)(end - a) > len + (size_t)n && memcmp(a, name, len) == 0 &&
        memcmp(a + len, want, (size_t)n) == 0)
      return true;
  }
  return false;
}
