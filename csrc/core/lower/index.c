/* index family of the lowering table (see lowering.h): gather / scatter in
 * all their ATen spellings, advanced indexing, index_put, index_add/copy/
 * fill, take, embedding (its backward, embedding_dense_backward, is the nn
 * family's).
 *
 * Two shapes of stablehlo.gather/scatter cover every op here:
 *  - "point" ops (gather, scatter*, scatter_reduce): every element of the
 *    index tensor names one element of self; the full coordinate of each is
 *    built from iotas plus the index along `dim`.
 *  - "advanced" ops (index.Tensor, index_put, index_select, index_add, take,
 *    embedding ...): a few dims are indexed by broadcast index tensors and
 *    the other dims are carried whole as gather/scatter windows.
 * Bool-mask indices are declined here (the meta kernel cannot size them):
 * csrc/torch/sync_ops.cpp first turns masks into index tensors with the
 * dynamic family's nonzero. Out-of-range indices cannot raise on the
 * device (gather clamps, scatter drops them). */
#include <stdio.h>
#include <string.h>

#include "emit.h"
#include "lowering.h"

static int wrap_dim(int64_t dim, int rank) {
  if (rank == 0) rank = 1;
  return (int)(dim < 0 ? dim + rank : dim);
}

/* Index values as int64 with negatives wrapped by the dim size, like
 * PyTorch. */
static tpu_hlo_value_t wrap_index(tpu_hlo_builder_t* b, tpu_hlo_value_t idx, int64_t size) {
  idx = tpu_emit_convert(b, idx, TPU_DTYPE_INT64);
  tpu_hlo_type_t t = tpu_hlo_value_type(b, idx);
  tpu_hlo_value_t neg = tpu_emit_compare(b, "LT", idx, tpu_emit_const_like(b, &t, 0));
  tpu_hlo_value_t up = tpu_emit_binary(b, "stablehlo.add", idx, tpu_emit_const_like(b, &t, (double)size));
  return tpu_emit_select(b, neg, up, idx);
}

/* `x` reshaped to its shape + [1], for concatenating index vectors. */
static tpu_hlo_value_t append_unit_dim(tpu_hlo_builder_t* b, tpu_hlo_value_t x) {
  tpu_hlo_type_t t = tpu_hlo_value_type(b, x);
  t.dims[t.rank++] = 1;
  return tpu_emit_reshape(b, x, t.dims, t.rank);
}

/* Concatenates n index tensors of one shape S into S + [n]. */
static tpu_hlo_value_t stack_indices(tpu_hlo_builder_t* b, const tpu_hlo_value_t* idx, int n) {
  tpu_hlo_value_t parts[TPU_HLO_MAX_RANK];
  for (int k = 0; k < n; k++) parts[k] = append_unit_dim(b, idx[k]);
  if (n == 1) return parts[0];
  tpu_hlo_type_t t = tpu_hlo_value_type(b, parts[0]);
  t.dims[t.rank - 1] = n;
  char attrs[48];
  snprintf(attrs, sizeof attrs, "dimension = %d : i64", t.rank - 1);
  return tpu_hlo_op(b, "stablehlo.concatenate", parts, n, t, attrs);
}

/* The binary op that combines scatter updates, by dtype; NULL = replace. */
static const char* combiner(tpu_dtype_t dtype, const char* kind) {
  bool is_bool = dtype == TPU_DTYPE_BOOL;
  if (!kind) return NULL;
  if (strcmp(kind, "sum") == 0 || strcmp(kind, "add") == 0 || strcmp(kind, "mean") == 0)
    return is_bool ? "stablehlo.or" : "stablehlo.add";
  if (strcmp(kind, "prod") == 0 || strcmp(kind, "multiply") == 0)
    return is_bool ? "stablehlo.and" : "stablehlo.multiply";
  if (strcmp(kind, "amax") == 0) return is_bool ? "stablehlo.or" : "stablehlo.maximum";
  if (strcmp(kind, "amin") == 0) return is_bool ? "stablehlo.and" : "stablehlo.minimum";
  return "";
}

/* ---- point ops: one index element names one element of self. ---- */

/* Full coordinates (shape S + [rank]) for index tensor `idx` of shape S
 * along `dim`: the other coordinates are the element's own position. */
static tpu_hlo_value_t point_coords(tpu_hlo_builder_t* b, tpu_hlo_value_t idx, int dim,
                                    int64_t dim_size) {
  tpu_hlo_type_t s = tpu_hlo_value_type(b, idx);
  s.dtype = TPU_DTYPE_INT64;
  tpu_hlo_value_t c[TPU_HLO_MAX_RANK];
  for (int d = 0; d < s.rank; d++)
    c[d] = d == dim ? wrap_index(b, idx, dim_size) : tpu_emit_iota(b, &s, d);
  return stack_indices(b, c, s.rank);
}

static tpu_hlo_value_t point_gather(tpu_hlo_builder_t* b, tpu_hlo_value_t x,
                                    tpu_hlo_value_t coords, tpu_hlo_type_t out) {
  int r = tpu_hlo_value_type(b, x).rank;
  int64_t all[TPU_HLO_MAX_RANK], ones[TPU_HLO_MAX_RANK];
  for (int d = 0; d < r; d++) all[d] = d, ones[d] = 1;
  return tpu_emit_gather(b, x, coords, out, NULL, 0, all, all, r, ones);
}

static tpu_hlo_value_t point_scatter(tpu_hlo_builder_t* b, tpu_hlo_value_t x,
                                     tpu_hlo_value_t coords, tpu_hlo_value_t updates,
                                     const char* op) {
  int r = tpu_hlo_value_type(b, x).rank;
  int64_t all[TPU_HLO_MAX_RANK];
  for (int d = 0; d < r; d++) all[d] = d;
  return tpu_emit_scatter(b, x, coords, updates, NULL, 0, all, all, r, op);
}

/* Rank-0 operands are treated as [1] (PyTorch allows dim 0 / -1 on them). */
static tpu_hlo_value_t at_least_1d(tpu_hlo_builder_t* b, tpu_hlo_value_t x) {
  tpu_hlo_type_t t = tpu_hlo_value_type(b, x);
  int64_t one = 1;
  return t.rank == 0 ? tpu_emit_reshape(b, x, &one, 1) : x;
}

static void set_output_reshaped(tpu_lower_ctx_t* ctx, tpu_hlo_value_t v) {
  tpu_hlo_type_t out = tpu_lower_output_type(ctx, 0);
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  v = tpu_emit_convert(b, v, out.dtype);
  tpu_lower_set_output(ctx, 0, tpu_emit_reshape(b, v, out.dims, out.rank));
}

/* gather(self, dim, index, sparse_grad). */
static tpu_status_t lower_gather(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_value_t x = at_least_1d(b, tpu_lower_tensor(ctx, 0));
  tpu_hlo_value_t idx = at_least_1d(b, tpu_lower_tensor(ctx, 2));
  tpu_hlo_type_t xt = tpu_hlo_value_type(b, x), it = tpu_hlo_value_type(b, idx);
  int dim = wrap_dim(tpu_lower_arg(ctx, 1)->i, xt.rank);
  if (it.rank != xt.rank) return tpu_lower_decline(ctx, "index rank differs from self");
  tpu_hlo_type_t out = tpu_lower_output_type(ctx, 0);
  int64_t out_numel = 1;
  for (int d = 0; d < out.rank; d++) out_numel *= out.dims[d];
  /* An empty result (e.g. over a zero-size dim): a gather with zero-size
   * slices would not compile, and there is nothing to read. */
  if (out_numel == 0) {
    tpu_lower_set_output(ctx, 0, tpu_emit_const_like(b, &out, 0));
    return NULL;
  }
  tpu_hlo_value_t coords = point_coords(b, idx, dim, xt.dims[dim]);
  set_output_reshaped(ctx, point_gather(b, x, coords, it));
  return NULL;
}

/* Identity of a scatter_reduce reduction, as a splat of `t`. */
static tpu_hlo_value_t reduce_identity(tpu_hlo_builder_t* b, const tpu_hlo_type_t* t,
                                       const char* kind) {
  if (strcmp(kind, "prod") == 0) return tpu_emit_const_like(b, t, 1);
  if (strcmp(kind, "amax") == 0 || strcmp(kind, "amin") == 0) {
    bool mx = strcmp(kind, "amax") == 0;
    if (t->dtype == TPU_DTYPE_BOOL) return tpu_emit_const_like(b, t, mx ? 0 : 1);
    if (tpu_dtype_is_floating(t->dtype))
      return tpu_emit_const_like(b, t, mx ? -__builtin_inf() : __builtin_inf());
    static const double lo[] = {[TPU_DTYPE_UINT8] = 0, [TPU_DTYPE_INT8] = -128,
                                [TPU_DTYPE_INT16] = -32768, [TPU_DTYPE_INT32] = -2147483648.0};
    static const double hi[] = {[TPU_DTYPE_UINT8] = 255, [TPU_DTYPE_INT8] = 127,
                                [TPU_DTYPE_INT16] = 32767, [TPU_DTYPE_INT32] = 2147483647.0};
    if (t->dtype == TPU_DTYPE_INT64)
      return tpu_hlo_constant_int(b, *t, mx ? INT64_MIN : INT64_MAX);
    return tpu_emit_const_like(b, t, mx ? lo[t->dtype] : hi[t->dtype]);
  }
  return tpu_emit_const_like(b, t, 0);
}

/* The scatter family: scatter.src / .value / .reduce / .value_reduce,
 * scatter_add, scatter_reduce.two, and index_reduce (`slices`). Schema:
 * (self, dim, index, src|value, [reduce], [include_self]). */
static tpu_status_t lower_scatter_common(tpu_lower_ctx_t* ctx, const char* kind,
                                         bool include_self, bool slices) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_value_t x = at_least_1d(b, tpu_lower_tensor(ctx, 0));
  tpu_hlo_value_t idx = at_least_1d(b, tpu_lower_tensor(ctx, 2));
  tpu_hlo_type_t xt = tpu_hlo_value_type(b, x);
  int dim = wrap_dim(tpu_lower_arg(ctx, 1)->i, xt.rank);
  if (slices) {
    /* index_reduce's 1-D index picks whole slices: as a point index it is
     * the index broadcast over source's shape along dim. */
    tpu_hlo_type_t st = tpu_lower_arg(ctx, 3)->type;
    if (st.rank == 0) st = tpu_hlo_value_type(b, idx);
    st.dtype = tpu_hlo_value_type(b, idx).dtype;
    char attrs[64];
    snprintf(attrs, sizeof attrs, "broadcast_dimensions = array<i64: %d>", dim);
    idx = tpu_hlo_op(b, "stablehlo.broadcast_in_dim", &idx, 1, st, attrs);
  }
  tpu_hlo_type_t it = tpu_hlo_value_type(b, idx);
  const char* op = combiner(xt.dtype, kind);
  if (op && !*op) return tpu_lower_decline(ctx, "reduce=%s", kind);
  if (it.rank != xt.rank) return tpu_lower_decline(ctx, "index rank differs from self");
  tpu_hlo_type_t ut = it;
  ut.dtype = xt.dtype;
  tpu_hlo_value_t upd;
  if (tpu_lower_arg(ctx, 3)->kind == TPU_ARG_TENSOR && tpu_lower_arg(ctx, 3)->type.rank > 0) {
    /* src may be larger than index: only its leading corner is used. */
    tpu_hlo_value_t src = tpu_emit_convert(b, tpu_lower_tensor(ctx, 3), xt.dtype);
    int64_t start[TPU_HLO_MAX_RANK] = {0}, stride[TPU_HLO_MAX_RANK];
    for (int d = 0; d < it.rank; d++) stride[d] = 1;
    upd = tpu_emit_slice(b, src, start, it.dims, stride);
  } else {
    upd = tpu_emit_broadcast_to(b, tpu_lower_scalar(ctx, 3, xt.dtype), &ut);
  }
  tpu_hlo_value_t coords = point_coords(b, idx, dim, xt.dims[dim]);
  bool mean = kind && strcmp(kind, "mean") == 0;
  tpu_hlo_value_t base = x;
  if (!include_self)
    /* Positions that receive updates start from the reduction's identity. */
    base = point_scatter(b, x, coords, reduce_identity(b, &ut, kind), NULL);
  tpu_hlo_value_t r = point_scatter(b, base, coords, upd, op);
  if (mean) {
    tpu_hlo_value_t count = point_scatter(b, tpu_emit_const_like(b, &xt, include_self ? 1 : 0),
                                          coords, tpu_emit_const_like(b, &ut, 1), "stablehlo.add");
    tpu_hlo_value_t zero = tpu_emit_const_like(b, &xt, 0);
    count = tpu_emit_select(b, tpu_emit_compare(b, "EQ", count, zero),
                            tpu_emit_const_like(b, &xt, 1), count);
    tpu_hlo_value_t q = tpu_emit_binary(b, "stablehlo.divide", r, count);
    if (!tpu_dtype_is_floating(xt.dtype)) {
      /* Integer mean floors (PyTorch divides with rounding_mode="floor"). */
      tpu_hlo_value_t rem = tpu_emit_binary(b, "stablehlo.remainder", r, count);
      tpu_hlo_value_t fix = tpu_emit_binary(
          b, "stablehlo.and", tpu_emit_compare(b, "NE", rem, zero),
          tpu_emit_compare(b, "NE", tpu_emit_compare(b, "LT", rem, zero),
                           tpu_emit_compare(b, "LT", count, zero)));
      q = tpu_emit_select(b, fix, tpu_emit_binary(b, "stablehlo.subtract", q,
                                                  tpu_emit_const_like(b, &xt, 1)), q);
    }
    r = q;
  }
  set_output_reshaped(ctx, r);
  return NULL;
}

/* scatter(self, dim, index, src|value[, reduce]); scatter_add, whose row's
 * data word is its fixed reduction ("sum"). */
static tpu_status_t lower_scatter(tpu_lower_ctx_t* ctx) {
  const char* fixed = (const char*)tpu_lower_data(ctx);
  if (fixed) return lower_scatter_common(ctx, fixed, true, false);
  const tpu_lower_arg_t* reduce = tpu_lower_arg(ctx, 4);
  const char* kind = reduce->kind == TPU_ARG_STRING ? reduce->str : NULL;
  if (kind && strcmp(kind, "add") != 0 && strcmp(kind, "multiply") != 0)
    return tpu_lower_decline(ctx, "reduce=%s", kind);
  return lower_scatter_common(ctx, kind, true, false);
}

/* scatter_reduce.two and index_reduce(self, dim, index, src|source, reduce,
 * include_self); index_reduce's row has data word 1 (its index picks
 * slices). */
static tpu_status_t lower_scatter_reduce(tpu_lower_ctx_t* ctx) {
  const tpu_lower_arg_t* reduce = tpu_lower_arg(ctx, 4);
  if (reduce->kind != TPU_ARG_STRING) return tpu_lower_decline(ctx, "no reduce");
  const tpu_lower_arg_t* inc = tpu_lower_arg(ctx, 5);
  bool include_self = inc->kind == TPU_ARG_BOOL ? inc->i != 0 : true;
  if (strcmp(reduce->str, "mean") == 0 && tpu_lower_output_type(ctx, 0).dtype == TPU_DTYPE_BOOL)
    return tpu_lower_decline(ctx, "mean of bool");
  return lower_scatter_common(ctx, reduce->str, include_self, tpu_lower_data(ctx) != 0);
}

/* ---- advanced indexing: some dims indexed by broadcast tensors. ---- */

typedef struct adv_s {
  int n;                               /* indexed dims */
  int64_t dims[TPU_HLO_MAX_RANK];      /* ascending */
  tpu_hlo_value_t idx[TPU_HLO_MAX_RANK]; /* int64, wrapped, shape B */
  tpu_hlo_type_t bshape;               /* the broadcast index shape */
} adv_t;

/* The gather/scatter layout of x[adv]: the result's type, where the
 * non-indexed dims go (offset / window dims), and slice sizes. PyTorch puts
 * the index dims in place of the indexed dims when those are adjacent, else
 * in front. */
typedef struct adv_layout_s {
  tpu_hlo_type_t result;
  int num_offset;
  int64_t offset[TPU_HLO_MAX_RANK];
  int64_t slice[TPU_HLO_MAX_RANK];
  tpu_hlo_value_t indices;
} adv_layout_t;

static bool adv_layout(tpu_hlo_builder_t* b, const tpu_hlo_type_t* xt, const adv_t* a,
                       adv_layout_t* l) {
  bool adjacent = a->dims[a->n - 1] - a->dims[0] == a->n - 1;
  int out_rank = xt->rank - a->n + a->bshape.rank;
  if (out_rank > TPU_HLO_MAX_RANK) return false;
  l->result = (tpu_hlo_type_t){.dtype = xt->dtype, .rank = out_rank};
  l->num_offset = 0;
  int pos = 0;
  bool placed = false;
  for (int d = 0; d <= xt->rank; d++) {
    bool indexed = false;
    for (int k = 0; k < a->n; k++) indexed |= a->dims[k] == d;
    if (!placed && (!adjacent || indexed)) {
      for (int j = 0; j < a->bshape.rank; j++) l->result.dims[pos++] = a->bshape.dims[j];
      placed = true;
    }
    if (d == xt->rank) break;
    l->slice[d] = indexed ? 1 : xt->dims[d];
    if (!indexed) {
      l->offset[l->num_offset++] = pos;
      l->result.dims[pos++] = xt->dims[d];
    }
  }
  l->indices = stack_indices(b, a->idx, a->n);
  return true;
}

static tpu_hlo_value_t adv_gather(tpu_hlo_builder_t* b, tpu_hlo_value_t x, const adv_t* a,
                                  tpu_hlo_type_t* out_type) {
  tpu_hlo_type_t xt = tpu_hlo_value_type(b, x);
  adv_layout_t l;
  if (!adv_layout(b, &xt, a, &l)) return (tpu_hlo_value_t){-1};
  if (out_type) *out_type = l.result;
  return tpu_emit_gather(b, x, l.indices, l.result, l.offset, l.num_offset, a->dims, a->dims,
                     a->n, l.slice);
}

/* Scatters `updates` (broadcast to the shape x[adv] would have) into x. */
static tpu_hlo_value_t adv_scatter(tpu_hlo_builder_t* b, tpu_hlo_value_t x, const adv_t* a,
                                   tpu_hlo_value_t updates, const char* op) {
  tpu_hlo_type_t xt = tpu_hlo_value_type(b, x);
  adv_layout_t l;
  if (!adv_layout(b, &xt, a, &l)) return (tpu_hlo_value_t){-1};
  updates = tpu_emit_cast_to(b, updates, &l.result);
  return tpu_emit_scatter(b, x, l.indices, updates, l.offset, l.num_offset, a->dims, a->dims, a->n,
                      op);
}

/* One indexed dim: x.index_select(dim, idx) style (idx of any shape). */
static adv_t adv_one(tpu_hlo_builder_t* b, tpu_hlo_value_t idx, int dim, int64_t size) {
  adv_t a = {.n = 1};
  a.dims[0] = dim;
  a.idx[0] = wrap_index(b, idx, size);
  a.bshape = tpu_hlo_value_type(b, a.idx[0]);
  return a;
}

/* Reads a Tensor?[] argument into an adv_t; false (with *why) to decline.
 * The list holds the present tensors; ints[k] is the list position (the
 * indexed dim) of the k-th (see lowering.h), or k when ints are absent. */
static bool read_indices(tpu_lower_ctx_t* ctx, int arg, const tpu_hlo_type_t* xt, adv_t* a,
                         const char** why) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  const tpu_lower_arg_t* list = tpu_lower_arg(ctx, arg);
  a->n = 0;
  a->bshape = (tpu_hlo_type_t){.dtype = TPU_DTYPE_INT64, .rank = 0};
  if (list->kind != TPU_ARG_TENSORS) return *why = "indices are not a tensor list", false;
  bool positions = list->num_ints > 0;
  if ((positions ? list->num_ints : list->num_tensors) > xt->rank)
    return *why = "too many indices", false;
  for (int k = 0; k < list->num_tensors; k++) {
    tpu_hlo_type_t t = tpu_lower_list_type(ctx, arg, k);
    int64_t dim = positions ? list->ints[k] : k;
    if (t.dtype == TPU_DTYPE_BOOL || t.dtype == TPU_DTYPE_UINT8)
      return *why = "mask index (data-dependent shape)", false;
    if (!tpu_dtype_is_integral(t.dtype)) return *why = "non-integer index", false;
    if (dim < 0 || dim >= xt->rank || (a->n && dim <= a->dims[a->n - 1]))
      return *why = "index positions out of order", false;
    a->dims[a->n] = dim;
    a->idx[a->n++] = wrap_index(b, tpu_lower_list_tensor(ctx, arg, k), xt->dims[dim]);
    /* Broadcast shape of all index tensors (numpy rules). */
    tpu_hlo_type_t s = a->bshape;
    int r = t.rank > s.rank ? t.rank : s.rank;
    tpu_hlo_type_t m = {.dtype = TPU_DTYPE_INT64, .rank = r};
    for (int d = 0; d < r; d++) {
      int64_t u = d - (r - s.rank) >= 0 ? s.dims[d - (r - s.rank)] : 1;
      int64_t v = d - (r - t.rank) >= 0 ? t.dims[d - (r - t.rank)] : 1;
      m.dims[d] = u == 1 ? v : u;
    }
    a->bshape = m;
  }
  if (a->n == 0) return *why = "no index tensors", false;
  for (int k = 0; k < a->n; k++) a->idx[k] = tpu_emit_broadcast_to(b, a->idx[k], &a->bshape);
  return true;
}

/* index.Tensor(self, indices). */
static tpu_status_t lower_index(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_value_t x = tpu_lower_tensor(ctx, 0);
  tpu_hlo_type_t xt = tpu_lower_arg(ctx, 0)->type;
  adv_t a;
  const char* why = NULL;
  if (!read_indices(ctx, 1, &xt, &a, &why)) return tpu_lower_decline(ctx, "%s", why);
  set_output_reshaped(ctx, adv_gather(b, x, &a, NULL));
  return NULL;
}

/* index_put / index_put_ / _index_put_impl_(self, indices, values,
 * accumulate[, unsafe]). */
static tpu_status_t lower_index_put(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_value_t x = tpu_lower_tensor(ctx, 0);
  tpu_hlo_type_t xt = tpu_lower_arg(ctx, 0)->type;
  /* CPU requires a values tensor of self's dtype ("Index put requires the
   * source and destination dtypes match"); the fallback raises that. */
  if (tpu_lower_arg(ctx, 2)->kind == TPU_ARG_TENSOR && tpu_lower_arg(ctx, 2)->type.dtype != xt.dtype)
    return tpu_lower_decline(ctx, "values of another dtype");
  adv_t a;
  const char* why = NULL;
  if (!read_indices(ctx, 1, &xt, &a, &why)) return tpu_lower_decline(ctx, "%s", why);
  const tpu_lower_arg_t* acc = tpu_lower_arg(ctx, 3);
  bool accumulate = acc->kind == TPU_ARG_BOOL && acc->i;
  tpu_hlo_value_t v = tpu_lower_arg(ctx, 2)->kind == TPU_ARG_TENSOR
                          ? tpu_emit_convert(b, tpu_lower_tensor(ctx, 2), xt.dtype)
                          : tpu_lower_scalar(ctx, 2, xt.dtype);
  set_output_reshaped(ctx, adv_scatter(b, x, &a, v, accumulate ? combiner(xt.dtype, "sum") : NULL));
  return NULL;
}

/* The setup of index_select / index_add / _copy / _fill(self, dim, index,
 * ...): self (at least 1-d) and its index along dim. Indices into an empty
 * axis decline: every one is out of range, and a gather or scatter of
 * slices from nothing does not compile. CPU's kernel raises its own error
 * (IndexError, or "self indexing axis dim should be positive"), which the
 * fallback gives. */
static tpu_status_t index_along_dim(tpu_lower_ctx_t* ctx, tpu_hlo_value_t* out_x, adv_t* out_a) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_value_t x = at_least_1d(b, tpu_lower_tensor(ctx, 0));
  tpu_hlo_type_t xt = tpu_hlo_value_type(b, x);
  int dim = wrap_dim(tpu_lower_arg(ctx, 1)->i, xt.rank);
  const tpu_hlo_type_t* it = &tpu_lower_arg(ctx, 2)->type;
  int64_t n = 1;
  for (int d = 0; d < it->rank; d++) n *= it->dims[d];
  if (xt.dims[dim] == 0 && n > 0) return tpu_lower_decline(ctx, "indices into an empty axis");
  tpu_hlo_value_t idx = at_least_1d(b, tpu_lower_tensor(ctx, 2));
  *out_x = x;
  *out_a = adv_one(b, idx, dim, xt.dims[dim]);
  return NULL;
}

/* index_select(self, dim, index). */
static tpu_status_t lower_index_select(tpu_lower_ctx_t* ctx) {
  tpu_hlo_value_t x;
  adv_t a;
  tpu_status_t s = index_along_dim(ctx, &x, &a);
  if (s) return s;
  set_output_reshaped(ctx, adv_gather(tpu_lower_builder(ctx), x, &a, NULL));
  return NULL;
}

/* index_add(self, dim, index, source, alpha), index_copy(self, dim, index,
 * source), index_fill(self, dim, index, value): the row's data word says
 * which. */
enum { INDEX_COPY, INDEX_ADD, INDEX_FILL };
static tpu_status_t lower_index_update(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  intptr_t which = tpu_lower_data(ctx);
  tpu_hlo_value_t x;
  adv_t a;
  tpu_status_t s = index_along_dim(ctx, &x, &a);
  if (s) return s;
  tpu_hlo_type_t xt = tpu_hlo_value_type(b, x);
  tpu_hlo_value_t upd;
  if (which == INDEX_FILL) {
    upd = tpu_lower_scalar(ctx, 3, xt.dtype);
  } else {
    upd = at_least_1d(b, tpu_emit_convert(b, tpu_lower_tensor(ctx, 3), xt.dtype));
    const tpu_lower_arg_t* alpha = tpu_lower_arg(ctx, 4);
    if (alpha->kind == TPU_ARG_SCALAR || alpha->kind == TPU_ARG_INT ||
        alpha->kind == TPU_ARG_FLOAT) {
      tpu_hlo_type_t ut = tpu_hlo_value_type(b, upd);
      tpu_hlo_value_t s = tpu_emit_broadcast_to(b, tpu_lower_scalar(ctx, 4, xt.dtype), &ut);
      upd = tpu_emit_binary(b, xt.dtype == TPU_DTYPE_BOOL ? "stablehlo.and" : "stablehlo.multiply",
                            upd, s);
    }
  }
  const char* op = which == INDEX_ADD ? combiner(xt.dtype, "sum") : NULL;
  set_output_reshaped(ctx, adv_scatter(b, x, &a, upd, op));
  return NULL;
}

/* take(self, index): indexes the flattened self. */
static tpu_status_t lower_take(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_type_t xt = tpu_lower_arg(ctx, 0)->type;
  int64_t n = 1;
  for (int d = 0; d < xt.rank; d++) n *= xt.dims[d];
  if (n == 0) {
    /* nothing to read: any index is out of range, which the dispatcher's
     * flag raises (CPU's IndexError); the values are never seen */
    tpu_hlo_type_t out = tpu_lower_output_type(ctx, 0);
    tpu_lower_set_output(ctx, 0, tpu_emit_const_like(b, &out, 0));
    return NULL;
  }
  tpu_hlo_value_t flat = tpu_emit_reshape(b, tpu_lower_tensor(ctx, 0), &n, 1);
  adv_t a = adv_one(b, tpu_lower_tensor(ctx, 1), 0, n);
  set_output_reshaped(ctx, adv_gather(b, flat, &a, NULL));
  return NULL;
}

/* put(self, index, source, accumulate): take's inverse (and its
 * backward), on the flattened self. */
static tpu_status_t lower_put(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_type_t xt = tpu_lower_arg(ctx, 0)->type;
  int64_t n = 1, m = 1;
  for (int d = 0; d < xt.rank; d++) n *= xt.dims[d];
  tpu_hlo_type_t it = tpu_lower_arg(ctx, 1)->type;
  for (int d = 0; d < it.rank; d++) m *= it.dims[d];
  tpu_hlo_value_t flat = tpu_emit_reshape(b, tpu_lower_tensor(ctx, 0), &n, 1);
  if (m == 0 || n == 0) {
    set_output_reshaped(ctx, flat);
    return NULL;
  }
  tpu_hlo_value_t idx = tpu_emit_reshape(b, tpu_lower_tensor(ctx, 1), &m, 1);
  tpu_hlo_value_t src = tpu_emit_reshape(
      b, tpu_emit_convert(b, tpu_lower_tensor(ctx, 2), xt.dtype), &m, 1);
  adv_t a = adv_one(b, idx, 0, n);
  const tpu_lower_arg_t* acc = tpu_lower_arg(ctx, 3);
  const char* op = acc->kind == TPU_ARG_BOOL && acc->i ? combiner(xt.dtype, "sum") : NULL;
  set_output_reshaped(ctx, adv_scatter(b, flat, &a, src, op));
  return NULL;
}

/* embedding(weight, indices, padding_idx, scale_grad_by_freq, sparse). */
static tpu_status_t lower_embedding(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_type_t wt = tpu_lower_arg(ctx, 0)->type;
  if (wt.rank != 2) return tpu_lower_decline(ctx, "weight is not 2-D");
  adv_t a = adv_one(b, tpu_lower_tensor(ctx, 1), 0, wt.dims[0]);
  set_output_reshaped(ctx, adv_gather(b, tpu_lower_tensor(ctx, 0), &a, NULL));
  return NULL;
}

/* masked_scatter_(self, mask, source): the k-th true position of the
 * (broadcast) mask takes source's k-th element, in row-major order. */
static tpu_status_t lower_masked_scatter(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_type_t out = tpu_lower_output_type(ctx, 0);
  tpu_hlo_type_t st = tpu_lower_arg(ctx, 2)->type;
  /* self broadcasts to the mask's shape out of place (masked_scatter) */
  tpu_hlo_value_t x = tpu_emit_cast_to(b, tpu_lower_tensor(ctx, 0), &out);
  int64_t n = 1, m = 1;
  for (int d = 0; d < out.rank; d++) n *= out.dims[d];
  for (int d = 0; d < st.rank; d++) m *= st.dims[d];
  if (m == 0 || n == 0) {
    tpu_lower_set_output(ctx, 0, x); /* the mask must be all false */
    return NULL;
  }
  tpu_hlo_type_t mt = out;
  mt.dtype = TPU_DTYPE_BOOL;
  tpu_hlo_value_t mask = tpu_emit_cast_to(b, tpu_lower_tensor(ctx, 1), &mt);
  tpu_hlo_value_t pos = tpu_emit_convert(b, tpu_emit_reshape(b, mask, &n, 1), TPU_DTYPE_INT64);
  pos = tpu_emit_binary(b, "stablehlo.subtract", tpu_emit_prefix_sum(b, pos),
                        tpu_emit_const_like(b, &(tpu_hlo_type_t){TPU_DTYPE_INT64, 1, {n}}, 1));
  tpu_hlo_value_t src = tpu_emit_convert(b, tpu_emit_reshape(b, tpu_lower_tensor(ctx, 2), &m, 1),
                                         out.dtype);
  /* Positions before the first true are -1: clamp (they are not selected). */
  tpu_hlo_type_t pt = tpu_hlo_value_type(b, pos);
  pos = tpu_emit_select(b, tpu_emit_compare(b, "LT", pos, tpu_emit_const_like(b, &pt, 0)),
                        tpu_emit_const_like(b, &pt, 0), pos);
  adv_t a = {.n = 1, .dims = {0}, .idx = {pos}, .bshape = pt};
  tpu_hlo_value_t picked = adv_gather(b, src, &a, NULL);
  picked = tpu_emit_reshape(b, picked, out.dims, out.rank);
  tpu_lower_set_output(ctx, 0, tpu_emit_select(b, mask, picked, x));
  return NULL;
}

const tpu_lowering_t tpu_lowerings_index[] = {
    {"masked_scatter", lower_masked_scatter, 0},
    {"index_reduce", lower_scatter_reduce, 0, 1},
    {"gather", lower_gather, 0},
    {"scatter", lower_scatter, 0},
    {"scatter_add", lower_scatter, 0, (intptr_t)"sum"},
    {"scatter_reduce", lower_scatter_reduce, 0},
    {"index", lower_index, 0},
    {"index_put", lower_index_put, 0},
    {"_index_put_impl", lower_index_put, 0},
    {"index_select", lower_index_select, 0},
    {"index_add", lower_index_update, 0, INDEX_ADD},
    {"index_copy", lower_index_update, 0, INDEX_COPY},
    {"index_fill", lower_index_update, 0, INDEX_FILL},
    {"take", lower_take, 0},
    {"put", lower_put, 0},
    {"embedding", lower_embedding, 0},
};
const size_t tpu_lowerings_index_count = sizeof tpu_lowerings_index / sizeof tpu_lowerings_index[0];
