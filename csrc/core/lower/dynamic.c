/* dynamic family of the lowering table (see lowering.h): ops whose result
 * size depends on the data (nonzero, masked_select, unique,
 * unique_consecutive, unique_dim).
 *
 * A program cannot return a value of unknown shape, so each row computes
 * the result at its largest possible size with the valid part compacted to
 * the front (a prefix sum gives every kept element its slot; a scatter
 * with out-of-range slots for the rest moves them there), plus the valid
 * count as an int64 scalar. The rows serve the internal ops
 * torchtpu::*_padded, whose schemas and meta kernels live in
 * csrc/torch/sync_ops.cpp with the kernels that read the count (the op's
 * one host sync) and narrow the padded results. nonzero_static, whose size
 * the caller fixes, needs no sync: it is lowered for aten directly. */

#include "emit.h"
#include "lowering.h"

static int64_t numel(const tpu_hlo_type_t* t) {
  int64_t n = 1;
  for (int d = 0; d < t->rank; d++) n *= t->dims[d];
  return n;
}

static tpu_hlo_type_t vec_type(tpu_dtype_t dtype, int64_t n) {
  return tpu_hlo_type_make(dtype, 1, &n);
}

/* Scatters rows [N, W...] into base [M, W...] at row `slots` [N] (int64);
 * rows whose slot is out of range (>= M) are dropped. op: NULL replaces. */
static tpu_hlo_value_t scatter_rows(tpu_hlo_builder_t* b, tpu_hlo_value_t base,
                                    tpu_hlo_value_t slots, tpu_hlo_value_t rows,
                                    const char* op) {
  tpu_hlo_type_t rt = tpu_hlo_value_type(b, rows);
  int64_t n = rt.dims[0], shape[2] = {n, 1};
  tpu_hlo_value_t idx = tpu_emit_reshape(b, slots, shape, 2);
  int64_t window[TPU_HLO_MAX_RANK], zero = 0;
  for (int d = 1; d < rt.rank; d++) window[d - 1] = d;
  return tpu_emit_scatter(b, base, idx, rows, window, rt.rank - 1, &zero, &zero, 1, op);
}

/* Rows [N, W...] of `rows` at row positions `pos` [N] (clamped). */
static tpu_hlo_value_t gather_rows(tpu_hlo_builder_t* b, tpu_hlo_value_t rows,
                                   tpu_hlo_value_t pos) {
  tpu_hlo_type_t rt = tpu_hlo_value_type(b, rows);
  int64_t n = tpu_hlo_value_type(b, pos).dims[0], shape[2] = {n, 1};
  int64_t offset[TPU_HLO_MAX_RANK], sizes[TPU_HLO_MAX_RANK], zero = 0;
  tpu_hlo_type_t out = rt;
  out.dims[0] = n;
  sizes[0] = 1;
  for (int d = 1; d < rt.rank; d++) offset[d - 1] = d, sizes[d] = rt.dims[d];
  return tpu_emit_gather(b, rows, tpu_emit_reshape(b, pos, shape, 2), out, offset, rt.rank - 1,
                         &zero, &zero, 1, sizes);
}

/* Compaction of the rows where keep [N] (bool) is true: out_slots gets each
 * kept row's slot (its rank among kept rows) and N for the others (out of
 * range: dropped by scatter_rows); out_count the number kept (int64, rank
 * 0); out_seen (may be NULL) the number kept up to each row, inclusive.
 * Needs N >= 1. */
static void compaction(tpu_hlo_builder_t* b, tpu_hlo_value_t keep, tpu_hlo_value_t* out_slots,
                       tpu_hlo_value_t* out_count, tpu_hlo_value_t* out_seen) {
  int64_t n = tpu_hlo_value_type(b, keep).dims[0];
  tpu_hlo_type_t it = vec_type(TPU_DTYPE_INT64, n);
  tpu_hlo_value_t seen = tpu_emit_prefix_sum(b, tpu_emit_convert(b, keep, TPU_DTYPE_INT64));
  int64_t lo = n - 1, hi = n, one = 1;
  *out_count = tpu_emit_reshape(b, tpu_emit_slice(b, seen, &lo, &hi, &one), NULL, 0);
  if (out_seen) *out_seen = seen;
  tpu_hlo_value_t rank = tpu_emit_sub(b, seen, tpu_emit_const_like(b, &it, 1));
  *out_slots = tpu_emit_select(b, keep, rank, tpu_emit_const_like(b, &it, (double)n));
}

/* The coordinates [N, rank] of every element of shape `t`, row-major. */
static tpu_hlo_value_t coordinates(tpu_hlo_builder_t* b, const tpu_hlo_type_t* t) {
  tpu_hlo_type_t it = *t;
  it.dtype = TPU_DTYPE_INT64;
  int64_t n = numel(t), col[2] = {n, 1};
  tpu_hlo_value_t c[TPU_HLO_MAX_RANK];
  for (int d = 0; d < t->rank; d++) c[d] = tpu_emit_reshape(b, tpu_emit_iota(b, &it, d), col, 2);
  if (t->rank == 1) return c[0];
  tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_INT64, 2, (int64_t[]){n, t->rank});
  return tpu_hlo_op(b, "stablehlo.concatenate", c, t->rank, out, "dimension = 1 : i64");
}

/* The indices [N, rank] of x's nonzero elements in row-major order, padded
 * after the count with zeros. */
static tpu_hlo_value_t nonzero_padded(tpu_hlo_builder_t* b, tpu_hlo_value_t x,
                                      tpu_hlo_value_t* out_count) {
  tpu_hlo_type_t t = tpu_hlo_value_type(b, x);
  int64_t n = numel(&t);
  tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_INT64, 2, (int64_t[]){n, t.rank});
  if (n == 0 || t.rank == 0) {
    /* No elements, or a scalar: [N, 0] holds nothing; only the count. */
    *out_count = n == 0 ? tpu_emit_const(b, TPU_DTYPE_INT64, 0)
                        : tpu_emit_convert(b, tpu_emit_convert(b, x, TPU_DTYPE_BOOL),
                                           TPU_DTYPE_INT64);
    return tpu_emit_const_like(b, &out, 0);
  }
  tpu_hlo_value_t keep = tpu_emit_convert(b, tpu_emit_reshape(b, x, &n, 1), TPU_DTYPE_BOOL);
  tpu_hlo_value_t slots;
  compaction(b, keep, &slots, out_count, NULL);
  return scatter_rows(b, tpu_emit_const_like(b, &out, 0), slots, coordinates(b, &t), NULL);
}

/* The indices of x's nonzero elements laid out as CPU PyTorch lays out
 * its (count, rank) nonzero result, column-major (strides (1, count)):
 * index j of the i-th nonzero element at j * count + i of a flat
 * [N * rank] array, zeros after the last column. The count is only known
 * in the program, so each kept element's slot is placed column by column
 * there. */
static tpu_hlo_value_t nonzero_column_major(tpu_hlo_builder_t* b, tpu_hlo_value_t x,
                                            tpu_hlo_value_t* out_count) {
  tpu_hlo_type_t t = tpu_hlo_value_type(b, x);
  int64_t n = numel(&t), r = t.rank, total = n * r;
  tpu_hlo_type_t flat = vec_type(TPU_DTYPE_INT64, total);
  if (n == 0 || r == 0) {
    *out_count = n == 0 ? tpu_emit_const(b, TPU_DTYPE_INT64, 0)
                        : tpu_emit_convert(b, tpu_emit_convert(b, x, TPU_DTYPE_BOOL),
                                           TPU_DTYPE_INT64);
    return tpu_emit_const_like(b, &flat, 0);
  }
  tpu_hlo_value_t keep = tpu_emit_convert(b, tpu_emit_reshape(b, x, &n, 1), TPU_DTYPE_BOOL);
  tpu_hlo_value_t slots;
  compaction(b, keep, &slots, out_count, NULL);
  /* [rank, N]: row j holds dim j of every element's coordinates, and its
   * place j * count + slot (out of range for the elements not kept). */
  tpu_hlo_type_t grid = tpu_hlo_type_make(TPU_DTYPE_INT64, 2, (int64_t[]){r, n});
  int64_t swap[2] = {1, 0};
  tpu_hlo_value_t coords = tpu_emit_transpose(b, coordinates(b, &t), swap);
  coords = tpu_emit_reshape(b, coords, grid.dims, 2); /* rank 1: [N, 1] -> [1, N] */
  tpu_hlo_value_t column = tpu_emit_iota(b, &grid, 0);
  tpu_hlo_value_t place = tpu_emit_add(
      b, tpu_emit_broadcast_to(b, slots, &grid),
      tpu_emit_mul(b, column, tpu_emit_broadcast_to(b, *out_count, &grid)));
  tpu_hlo_type_t kept_grid = grid;
  kept_grid.dtype = TPU_DTYPE_BOOL;
  place = tpu_emit_select(b, tpu_emit_broadcast_to(b, keep, &kept_grid), place,
                          tpu_emit_const_like(b, &grid, (double)total));
  return scatter_rows(b, tpu_emit_const_like(b, &flat, 0), tpu_emit_reshape(b, place, &total, 1),
                      tpu_emit_reshape(b, coords, &total, 1), NULL);
}

/* nonzero_padded(self) -> (indices [N * rank] int64 column-major, count). */
static tpu_status_t lower_nonzero_padded(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  if (tpu_lower_arg(ctx, 0)->kind != TPU_ARG_TENSOR) return tpu_lower_decline(ctx, "no tensor");
  tpu_hlo_value_t count;
  tpu_lower_set_output(ctx, 0, nonzero_column_major(b, tpu_lower_tensor(ctx, 0), &count));
  tpu_lower_set_output(ctx, 1, count);
  return NULL;
}

/* nonzero_static(self, size, fill_value): the first `size` indices, rows
 * past the count filled with fill_value. */
static tpu_status_t lower_nonzero_static(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_type_t out = tpu_lower_output_type(ctx, 0);
  tpu_hlo_type_t t = tpu_lower_arg(ctx, 0)->type;
  const tpu_lower_arg_t* fill = tpu_lower_arg(ctx, 2);
  if (out.rank != 2 || fill->kind != TPU_ARG_INT) return tpu_lower_decline(ctx, "signature");
  tpu_hlo_value_t count, idx = nonzero_padded(b, tpu_lower_tensor(ctx, 0), &count);
  int64_t n = numel(&t), size = out.dims[0];
  if (size <= n) {
    int64_t lo[2] = {0, 0}, hi[2] = {size, t.rank}, one[2] = {1, 1};
    idx = tpu_emit_slice(b, idx, lo, hi, one);
  } else {
    tpu_hlo_type_t pad = tpu_hlo_type_make(TPU_DTYPE_INT64, 2, (int64_t[]){size - n, t.rank});
    tpu_hlo_value_t parts[2] = {idx, tpu_emit_const_like(b, &pad, 0)};
    idx = tpu_hlo_op(b, "stablehlo.concatenate", parts, 2, out, "dimension = 0 : i64");
  }
  tpu_hlo_value_t row = tpu_emit_iota(b, &out, 0);
  tpu_hlo_value_t valid = tpu_emit_compare(b, "LT", row, tpu_emit_broadcast_to(b, count, &out));
  tpu_hlo_value_t filler = tpu_hlo_constant_int(b, out, fill->i);
  tpu_lower_set_output(ctx, 0, tpu_emit_select(b, valid, idx, filler));
  return NULL;
}

/* The numpy broadcast of two shapes. */
static tpu_hlo_type_t broadcast_shape(const tpu_hlo_type_t* x, const tpu_hlo_type_t* y) {
  int r = x->rank > y->rank ? x->rank : y->rank;
  tpu_hlo_type_t m = {.dtype = x->dtype, .rank = r};
  for (int d = 0; d < r; d++) {
    int64_t u = d - (r - x->rank) >= 0 ? x->dims[d - (r - x->rank)] : 1;
    int64_t v = d - (r - y->rank) >= 0 ? y->dims[d - (r - y->rank)] : 1;
    m.dims[d] = u == 1 ? v : u;
  }
  return m;
}

/* masked_select_padded(self, mask) -> (values [N], count): self's elements
 * where the mask is true, both broadcast, in row-major order. */
static tpu_status_t lower_masked_select_padded(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  const tpu_lower_arg_t* self = tpu_lower_arg(ctx, 0);
  const tpu_lower_arg_t* mask = tpu_lower_arg(ctx, 1);
  if (self->kind != TPU_ARG_TENSOR || mask->kind != TPU_ARG_TENSOR)
    return tpu_lower_decline(ctx, "operands are not both tpu tensors");
  if (mask->type.dtype != TPU_DTYPE_BOOL) return tpu_lower_decline(ctx, "mask is not bool");
  tpu_hlo_type_t shape = broadcast_shape(&self->type, &mask->type);
  tpu_hlo_type_t out = tpu_lower_output_type(ctx, 0);
  int64_t n = numel(&shape);
  if (n == 0) {
    tpu_lower_set_output(ctx, 0, tpu_emit_const_like(b, &out, 0));
    tpu_lower_set_output(ctx, 1, tpu_emit_const(b, TPU_DTYPE_INT64, 0));
    return NULL;
  }
  tpu_hlo_value_t x = tpu_emit_reshape(b, tpu_emit_broadcast_to(b, tpu_lower_tensor(ctx, 0), &shape),
                                       &n, 1);
  tpu_hlo_value_t keep = tpu_emit_reshape(
      b, tpu_emit_broadcast_to(b, tpu_lower_tensor(ctx, 1), &shape), &n, 1);
  tpu_hlo_value_t slots, count;
  compaction(b, keep, &slots, &count, NULL);
  tpu_lower_set_output(ctx, 0, scatter_rows(b, tpu_emit_const_like(b, &out, 0), slots, x, NULL));
  tpu_lower_set_output(ctx, 1, count);
  return NULL;
}

/* ---- unique: rows [N, K] grouped into runs of equal rows ---- */

/* x moved so `dim` leads, flattened to rows [S, K]. */
static tpu_hlo_value_t as_rows(tpu_hlo_builder_t* b, tpu_hlo_value_t x, int dim) {
  tpu_hlo_type_t t = tpu_hlo_value_type(b, x);
  int64_t perm[TPU_HLO_MAX_RANK], shape[2] = {t.dims[dim], 1};
  perm[0] = dim;
  for (int d = 0, k = 1; d < t.rank; d++)
    if (d != dim) perm[k++] = d, shape[1] *= t.dims[d];
  return tpu_emit_reshape(b, tpu_emit_transpose(b, x, perm), shape, 2);
}

/* The inverse of as_rows for rows [S, K] of x's shape `t` along dim. */
static tpu_hlo_value_t from_rows(tpu_hlo_builder_t* b, tpu_hlo_value_t rows, int dim,
                                 const tpu_hlo_type_t* t) {
  int64_t moved[TPU_HLO_MAX_RANK], perm[TPU_HLO_MAX_RANK];
  moved[0] = t->dims[dim];
  for (int d = 0, k = 1; d < t->rank; d++)
    if (d != dim) moved[k++] = t->dims[d];
  rows = tpu_emit_reshape(b, rows, moved, t->rank);
  /* moved order is (dim, others...): put dim back in place. */
  for (int d = 0; d < t->rank; d++) perm[d] = d < dim ? d + 1 : d == dim ? 0 : d;
  return tpu_emit_transpose(b, rows, perm);
}

/* Sorts rows [S, K] lexicographically (a stable sort with K keys); the
 * rows' original positions go to out_perm. */
static tpu_hlo_value_t sort_rows(tpu_hlo_builder_t* b, tpu_hlo_value_t rows,
                                 tpu_hlo_value_t* out_perm) {
  tpu_hlo_type_t t = tpu_hlo_value_type(b, rows);
  int64_t s = t.dims[0], k = t.dims[1];
  if (k == 1) {
    tpu_hlo_value_t v;
    tpu_emit_sort(b, tpu_emit_reshape(b, rows, &s, 1), 0, TPU_SORT_ASCENDING, &v, out_perm);
    return tpu_emit_reshape(b, v, t.dims, 2);
  }
  /* Keys: the columns (bools as ui8), then the positions. */
  tpu_hlo_value_t cols = rows;
  if (t.dtype == TPU_DTYPE_BOOL) cols = tpu_emit_convert(b, cols, TPU_DTYPE_UINT8);
  tpu_dtype_t kd = tpu_hlo_value_type(b, cols).dtype;
  tpu_hlo_value_t ops[TPU_LOWER_MAX_INTS * 4 + 1];
  tpu_hlo_type_t types[TPU_LOWER_MAX_INTS * 4 + 1];
  for (int64_t c = 0; c < k; c++) {
    int64_t lo[2] = {0, c}, hi[2] = {s, c + 1}, one[2] = {1, 1};
    ops[c] = tpu_emit_reshape(b, tpu_emit_slice(b, cols, lo, hi, one), &s, 1);
    types[c] = vec_type(kd, s);
  }
  types[k] = vec_type(TPU_DTYPE_INT64, s);
  ops[k] = tpu_emit_iota(b, &types[k], 0);
  tpu_hlo_region_op_begin(b, "stablehlo.sort", ops, (int)k + 1, types, (int)k + 1,
                          "dimension = 0 : i64, is_stable = true");
  tpu_hlo_type_t bt[2 * (TPU_LOWER_MAX_INTS * 4 + 1)];
  tpu_hlo_value_t a[2 * (TPU_LOWER_MAX_INTS * 4 + 1)];
  for (int64_t c = 0; c <= k; c++)
    bt[2 * c] = bt[2 * c + 1] = tpu_hlo_type_scalar(c < k ? kd : TPU_DTYPE_INT64);
  tpu_hlo_block_begin(b, bt, 2 * ((int)k + 1), a);
  /* a < b on the first column where they differ. */
  tpu_hlo_value_t before = tpu_hlo_constant_bool(b, tpu_hlo_type_scalar(TPU_DTYPE_BOOL), false);
  for (int64_t c = k - 1; c >= 0; c--) {
    tpu_hlo_value_t lt = tpu_emit_compare(b, "LT", a[2 * c], a[2 * c + 1]);
    tpu_hlo_value_t eq = tpu_emit_compare(b, "EQ", a[2 * c], a[2 * c + 1]);
    before = tpu_emit_binary(b, "stablehlo.or", lt, tpu_emit_binary(b, "stablehlo.and", eq, before));
  }
  tpu_hlo_block_return(b, &before, 1);
  tpu_hlo_value_t r[TPU_LOWER_MAX_INTS * 4 + 1];
  tpu_hlo_region_op_end(b, r);
  *out_perm = r[k];
  return gather_rows(b, rows, r[k]);
}

/* The most columns a lexicographic row sort takes (one sort key each). */
#define MAX_SORT_COLUMNS (TPU_LOWER_MAX_INTS * 4)

/* One pass of sort_wide_rows on {perm}: a stable sort of the permutation
 * by column c of the rows it orders. */
static void sort_pass(tpu_hlo_builder_t* b, tpu_hlo_value_t c, tpu_hlo_value_t* st, const void* arg) {
  tpu_hlo_value_t cols = *(const tpu_hlo_value_t*)arg;
  tpu_hlo_type_t t = tpu_hlo_value_type(b, cols);
  int64_t s = t.dims[0], sizes[2] = {s, 1};
  tpu_hlo_value_t starts[2] = {tpu_emit_const(b, TPU_DTYPE_INT64, 0), c};
  tpu_hlo_value_t key = gather_rows(b, tpu_emit_reshape(b, tpu_emit_dynamic_slice(b, cols, starts, sizes), &s, 1),
                                    st[0]);
  tpu_hlo_value_t ops[2] = {key, st[0]};
  tpu_hlo_type_t types[2] = {vec_type(t.dtype, s), vec_type(TPU_DTYPE_INT64, s)};
  tpu_hlo_region_op_begin(b, "stablehlo.sort", ops, 2, types, 2, "dimension = 0 : i64, is_stable = true");
  tpu_hlo_type_t bt[4] = {tpu_hlo_type_scalar(t.dtype), tpu_hlo_type_scalar(t.dtype),
                          tpu_hlo_type_scalar(TPU_DTYPE_INT64), tpu_hlo_type_scalar(TPU_DTYPE_INT64)};
  tpu_hlo_value_t a[4];
  tpu_hlo_block_begin(b, bt, 4, a);
  tpu_hlo_value_t lt = tpu_emit_compare(b, "LT", a[0], a[1]);
  tpu_hlo_block_return(b, &lt, 1);
  tpu_hlo_value_t r[2];
  tpu_hlo_region_op_end(b, r);
  st[0] = r[1];
}

/* sort_rows for rows too wide for one sort's keys: least significant
 * column first, one stable single-key sort per column in a while loop (the
 * same order as one lexicographic sort). */
static tpu_hlo_value_t sort_wide_rows(tpu_hlo_builder_t* b, tpu_hlo_value_t rows,
                                      tpu_hlo_value_t* out_perm) {
  tpu_hlo_type_t t = tpu_hlo_value_type(b, rows);
  tpu_hlo_value_t cols = t.dtype == TPU_DTYPE_BOOL ? tpu_emit_convert(b, rows, TPU_DTYPE_UINT8) : rows;
  tpu_hlo_type_t it = vec_type(TPU_DTYPE_INT64, t.dims[0]);
  tpu_hlo_value_t perm = tpu_emit_iota(b, &it, 0);
  tpu_emit_for_loop(b, t.dims[1] - 1, -1, -1, &perm, 1, sort_pass, &cols);
  *out_perm = perm;
  return gather_rows(b, rows, perm);
}

typedef struct groups_s {
  tpu_hlo_value_t values; /* [S, K]: the first row of each run, compacted */
  tpu_hlo_value_t inverse; /* [S]: each input row's run */
  tpu_hlo_value_t counts;  /* [S]: run lengths, compacted */
  tpu_hlo_value_t count;   /* rank 0: the number of runs */
} groups_t;

/* Runs of equal adjacent rows of rows [S, K] (S >= 1); sorted first unless
 * `consecutive`. Rows differ when any element differs (NaN never equals). */
static groups_t group_rows(tpu_hlo_builder_t* b, tpu_hlo_value_t rows, bool consecutive) {
  tpu_hlo_type_t t = tpu_hlo_value_type(b, rows);
  int64_t s = t.dims[0];
  tpu_hlo_type_t it = vec_type(TPU_DTYPE_INT64, s);
  tpu_hlo_value_t perm = {-1};
  if (!consecutive)
    rows = t.dims[1] > MAX_SORT_COLUMNS ? sort_wide_rows(b, rows, &perm) : sort_rows(b, rows, &perm);
  /* A run starts at row 0 and wherever a row differs from the one before. */
  tpu_hlo_value_t prev;
  if (s > 1) {
    int64_t lo[2] = {0, 0}, hi[2] = {s - 1, t.dims[1]}, one[2] = {1, 1};
    int64_t lo0[2] = {0, 0}, hi0[2] = {1, t.dims[1]};
    tpu_hlo_value_t parts[2] = {tpu_emit_slice(b, rows, lo0, hi0, one),
                                tpu_emit_slice(b, rows, lo, hi, one)};
    prev = tpu_hlo_op(b, "stablehlo.concatenate", parts, 2, t, "dimension = 0 : i64");
  } else {
    prev = rows;
  }
  tpu_hlo_value_t ne = tpu_emit_compare(b, "NE", rows, prev), starts;
  int64_t one_dim = 1;
  if (t.dims[1] == 1)
    starts = tpu_emit_reshape(b, ne, &s, 1);
  else
    starts = tpu_emit_reduce(b, ne, tpu_emit_const(b, TPU_DTYPE_BOOL, 0), &one_dim, 1,
                             "stablehlo.or");
  starts = tpu_emit_binary(b, "stablehlo.or", starts,
                           tpu_emit_compare(b, "EQ", tpu_emit_iota(b, &it, 0),
                                            tpu_emit_const_like(b, &it, 0)));
  groups_t g;
  tpu_hlo_value_t slots, seen;
  compaction(b, starts, &slots, &g.count, &seen);
  /* Each row's run: the number of run starts up to it, minus one. */
  tpu_hlo_value_t run = tpu_emit_sub(b, seen, tpu_emit_const_like(b, &it, 1));
  g.values = scatter_rows(b, tpu_emit_const_like(b, &t, 0), slots, rows, NULL);
  g.counts = scatter_rows(b, tpu_emit_const_like(b, &it, 0), run, tpu_emit_const_like(b, &it, 1),
                          "stablehlo.add");
  g.inverse = consecutive ? run : scatter_rows(b, tpu_emit_const_like(b, &it, 0), perm, run, NULL);
  return g;
}

/* unique_padded(self, consecutive, return_inverse, return_counts) ->
 * (values [N], inverse (self's shape, or [0]), counts ([N] or [0]), count):
 * _unique2 (always sorted, as PyTorch's CPU kernel) and unique_consecutive
 * over the flattened self. */
static tpu_status_t lower_unique_padded(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  if (tpu_lower_arg(ctx, 0)->kind != TPU_ARG_TENSOR) return tpu_lower_decline(ctx, "no tensor");
  tpu_hlo_type_t t = tpu_lower_arg(ctx, 0)->type;
  bool consecutive = tpu_lower_arg(ctx, 1)->i != 0;
  bool want_inverse = tpu_lower_arg(ctx, 2)->i != 0, want_counts = tpu_lower_arg(ctx, 3)->i != 0;
  tpu_hlo_type_t vt = tpu_lower_output_type(ctx, 0), inv_t = tpu_lower_output_type(ctx, 1),
                 ct = tpu_lower_output_type(ctx, 2);
  int64_t n = numel(&t);
  if (n == 0) {
    tpu_lower_set_output(ctx, 0, tpu_emit_const_like(b, &vt, 0));
    tpu_lower_set_output(ctx, 1, tpu_emit_const_like(b, &inv_t, 0));
    tpu_lower_set_output(ctx, 2, tpu_emit_const_like(b, &ct, 0));
    tpu_lower_set_output(ctx, 3, tpu_emit_const(b, TPU_DTYPE_INT64, 0));
    return NULL;
  }
  int64_t col[2] = {n, 1};
  tpu_hlo_value_t rows = tpu_emit_reshape(b, tpu_lower_tensor(ctx, 0), col, 2);
  groups_t g = group_rows(b, rows, consecutive);
  tpu_lower_set_output(ctx, 0, tpu_emit_reshape(b, g.values, &n, 1));
  tpu_lower_set_output(ctx, 1, want_inverse ? tpu_emit_reshape(b, g.inverse, t.dims, t.rank)
                                            : tpu_emit_const_like(b, &inv_t, 0));
  tpu_lower_set_output(ctx, 2, want_counts ? g.counts : tpu_emit_const_like(b, &ct, 0));
  tpu_lower_set_output(ctx, 3, g.count);
  return NULL;
}

/* unique_dim_padded(self, dim, consecutive) -> (values (self's shape),
 * inverse [S], counts [S], count): unique_dim / unique_consecutive with a
 * dim, over the slices along dim (S of them). Slices sort
 * lexicographically: one sort with a key per element, or for wide slices
 * one stable sort per element (sort_wide_rows). */
static tpu_status_t lower_unique_dim_padded(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  const tpu_lower_arg_t* self = tpu_lower_arg(ctx, 0);
  if (self->kind != TPU_ARG_TENSOR || self->type.rank == 0)
    return tpu_lower_decline(ctx, "needs a tensor with dims");
  tpu_hlo_type_t t = self->type;
  int64_t d = tpu_lower_arg(ctx, 1)->i;
  int dim = (int)(d < 0 ? d + t.rank : d);
  bool consecutive = tpu_lower_arg(ctx, 2)->i != 0;
  int64_t n = numel(&t);
  if (n == 0) {
    /* no slices: every result empty. Empty slices along a non-empty dim
     * CPU refuses ("0 sized dimensions ... aren't selected"). */
    if (t.dims[dim] != 0) return tpu_lower_decline(ctx, "empty slices");
    for (int i = 0; i < 3; i++) {
      tpu_hlo_type_t ot = tpu_lower_output_type(ctx, i);
      tpu_lower_set_output(ctx, i, tpu_emit_const_like(b, &ot, 0));
    }
    tpu_lower_set_output(ctx, 3, tpu_emit_const(b, TPU_DTYPE_INT64, 0));
    return NULL;
  }
  groups_t g = group_rows(b, as_rows(b, tpu_lower_tensor(ctx, 0), dim), consecutive);
  tpu_lower_set_output(ctx, 0, from_rows(b, g.values, dim, &t));
  tpu_lower_set_output(ctx, 1, g.inverse);
  tpu_lower_set_output(ctx, 2, g.counts);
  tpu_lower_set_output(ctx, 3, g.count);
  return NULL;
}

const tpu_lowering_t tpu_lowerings_dynamic[] = {
    {"nonzero_padded", lower_nonzero_padded, 0},
    {"nonzero_static", lower_nonzero_static, 0},
    {"masked_select_padded", lower_masked_select_padded, 0},
    {"unique_padded", lower_unique_padded, 0},
    {"unique_dim_padded", lower_unique_dim_padded, 0},
};
const size_t tpu_lowerings_dynamic_count =
    sizeof tpu_lowerings_dynamic / sizeof tpu_lowerings_dynamic[0];
