/* factor family of the lowering table (see lowering.h): the matrix
 * factorizations XLA has no HLO for, written as StableHLO while loops over
 * the columns, so they run on the device (the CPU plugin has no LAPACK
 * custom calls, and neither does a TPU). Each follows the LAPACK routine
 * CPU PyTorch calls, step for step where the step decides a result (which
 * row pivots, the sign of a Householder reflector), so outputs that are
 * not unique mathematically (LU, QR) are CPU's, not just equivalent ones.
 *
 *   LU, partial pivoting (getrf): linalg_lu_factor_ex, linalg_lu,
 *     lu_unpack, linalg_lu_solve. det, slogdet, solve and inv are CPU's
 *     compositions of these (csrc/torch/linalg_ops.cpp): which matrix CPU
 *     factorizes (A or A^T) depends on A's layout, which a lowering does
 *     not see.
 *   Householder QR (geqrf / dgeqr2): geqrf, linalg_householder_product
 *     (orgqr), ormqr, linalg_qr.
 *   Jacobi: _linalg_svd (one-sided, then QR for U), _linalg_eigh
 *     (two-sided). Singular / eigen vectors are unique only up to sign;
 *     theirs may differ from CPU's LAPACK, as CUDA's do.
 *   Cholesky solves (potrs, potri): _cholesky_solve_helper,
 *     cholesky_inverse (the factorization itself is stablehlo.cholesky,
 *     linalg.c).
 *
 * Matrices are read as [B, m, n] (the batch dims flattened); complex and
 * half dtypes are declined (CPU has no half LAPACK either: the fallback
 * raises its error), as is check_errors=True (CPU raises by reading info;
 * the fallback does). */
#include <stdio.h>
#include <string.h>

#include "emit.h"
#include "lowering.h"

static bool real_solver_dtype(tpu_dtype_t d) {
  return d == TPU_DTYPE_FLOAT32 || d == TPU_DTYPE_FLOAT64;
}

static int64_t numel_of(const tpu_hlo_type_t* t) {
  int64_t n = 1;
  for (int d = 0; d < t->rank; d++) n *= t->dims[d];
  return n;
}

static tpu_hlo_type_t type3(tpu_dtype_t d, int64_t b0, int64_t b1, int64_t b2) {
  int64_t dims[3] = {b0, b1, b2};
  return tpu_hlo_type_make(d, 3, dims);
}

static tpu_hlo_type_t type2(tpu_dtype_t d, int64_t b0, int64_t b1) {
  int64_t dims[2] = {b0, b1};
  return tpu_hlo_type_make(d, 2, dims);
}

static tpu_hlo_value_t i64(tpu_hlo_builder_t* b, int64_t v) {
  return tpu_emit_const(b, TPU_DTYPE_INT64, (double)v);
}

static tpu_hlo_value_t and2(tpu_hlo_builder_t* b, tpu_hlo_value_t x, tpu_hlo_value_t y) {
  return tpu_emit_binary(b, "stablehlo.and", x, y);
}

static tpu_hlo_value_t reshape3(tpu_hlo_builder_t* b, tpu_hlo_value_t x, int64_t d0, int64_t d1,
                                int64_t d2) {
  int64_t dims[3] = {d0, d1, d2};
  return tpu_emit_reshape(b, x, dims, 3);
}

static tpu_hlo_value_t reshape2(tpu_hlo_builder_t* b, tpu_hlo_value_t x, int64_t d0, int64_t d1) {
  int64_t dims[2] = {d0, d1};
  return tpu_emit_reshape(b, x, dims, 2);
}

static tpu_hlo_value_t reshape1(tpu_hlo_builder_t* b, tpu_hlo_value_t x, int64_t d0) {
  return tpu_emit_reshape(b, x, &d0, 1);
}

/* x (rank r) to `type`'s shape, x's dims placed at type's first r dims
 * (the rest broadcast), unlike numpy's right alignment. */
static tpu_hlo_value_t spread(tpu_hlo_builder_t* b, tpu_hlo_value_t x, tpu_hlo_type_t type) {
  tpu_hlo_type_t t = tpu_hlo_value_type(b, x);
  int64_t dims[TPU_HLO_MAX_RANK];
  for (int d = 0; d < type.rank; d++) dims[d] = d < t.rank ? t.dims[d] : 1;
  type.dtype = t.dtype;
  return tpu_emit_broadcast_to(b, tpu_emit_reshape(b, x, dims, type.rank), &type);
}

/* Column j of x [B, m, n] as [B, m]; row j as [B, n]. */
static tpu_hlo_value_t column(tpu_hlo_builder_t* b, tpu_hlo_value_t x, tpu_hlo_value_t j) {
  tpu_hlo_type_t t = tpu_hlo_value_type(b, x);
  tpu_hlo_value_t z = i64(b, 0), st[3] = {z, z, j};
  int64_t sz[3] = {t.dims[0], t.dims[1], 1};
  return reshape2(b, tpu_emit_dynamic_slice(b, x, st, sz), t.dims[0], t.dims[1]);
}

static tpu_hlo_value_t row(tpu_hlo_builder_t* b, tpu_hlo_value_t x, tpu_hlo_value_t j) {
  tpu_hlo_type_t t = tpu_hlo_value_type(b, x);
  tpu_hlo_value_t z = i64(b, 0), st[3] = {z, j, z};
  int64_t sz[3] = {t.dims[0], 1, t.dims[2]};
  return reshape2(b, tpu_emit_dynamic_slice(b, x, st, sz), t.dims[0], t.dims[2]);
}

static tpu_hlo_value_t set_column(tpu_hlo_builder_t* b, tpu_hlo_value_t x, tpu_hlo_value_t j,
                                  tpu_hlo_value_t col) {
  tpu_hlo_type_t t = tpu_hlo_value_type(b, x);
  tpu_hlo_value_t z = i64(b, 0), st[3] = {z, z, j};
  return tpu_emit_dynamic_update_slice(b, x, reshape3(b, col, t.dims[0], t.dims[1], 1), st);
}

/* Element j of each row of v [B, n], as [B]. */
static tpu_hlo_value_t element(tpu_hlo_builder_t* b, tpu_hlo_value_t v, tpu_hlo_value_t j) {
  tpu_hlo_type_t t = tpu_hlo_value_type(b, v);
  tpu_hlo_value_t st[2] = {i64(b, 0), j};
  int64_t sz[2] = {t.dims[0], 1};
  return reshape1(b, tpu_emit_dynamic_slice(b, v, st, sz), t.dims[0]);
}

/* Rows idx [B, K] (int64) of x [B, R, C], as [B, K, C] (a gather, so
 * values move exactly: no arithmetic on them). */
static tpu_hlo_value_t gather_rows(tpu_hlo_builder_t* b, tpu_hlo_value_t x, tpu_hlo_value_t idx) {
  tpu_hlo_type_t xt = tpu_hlo_value_type(b, x), it = tpu_hlo_value_type(b, idx);
  int64_t B = it.dims[0], K = it.dims[1];
  tpu_hlo_type_t bt = it;
  tpu_hlo_value_t bi = tpu_emit_iota(b, &bt, 0);
  tpu_hlo_type_t pair = type3(TPU_DTYPE_INT64, B, K, 2);
  tpu_hlo_value_t parts[2] = {reshape3(b, bi, B, K, 1), reshape3(b, idx, B, K, 1)};
  tpu_hlo_value_t ind = tpu_hlo_op(b, "stablehlo.concatenate", parts, 2, pair, "dimension = 2 : i64");
  int64_t offset = 2, collapsed[2] = {0, 1}, sizes[3] = {1, 1, xt.dims[2]};
  return tpu_emit_gather(b, x, ind, type3(xt.dtype, B, K, xt.dims[2]), &offset, 1, collapsed,
                         collapsed, 2, sizes);
}

/* Columns idx [B, K] of x [B, R, C], as [B, R, K]. */
static tpu_hlo_value_t gather_columns(tpu_hlo_builder_t* b, tpu_hlo_value_t x, tpu_hlo_value_t idx) {
  const int64_t perm[3] = {0, 2, 1};
  return tpu_emit_transpose(b, gather_rows(b, tpu_emit_transpose(b, x, perm), idx), perm);
}

/* Reads tensor argument i as [B, m, n]. */
static tpu_hlo_value_t matrices(tpu_lower_ctx_t* ctx, int i, int64_t* B, int64_t* m, int64_t* n) {
  const tpu_hlo_type_t* t = &tpu_lower_arg(ctx, i)->type;
  *m = t->dims[t->rank - 2], *n = t->dims[t->rank - 1];
  *B = 1;
  for (int d = 0; d + 2 < t->rank; d++) *B *= t->dims[d];
  return reshape3(tpu_lower_builder(ctx), tpu_lower_tensor(ctx, i), *B, *m, *n);
}

static void set_output(tpu_lower_ctx_t* ctx, int i, tpu_hlo_value_t v) {
  tpu_hlo_type_t t = tpu_lower_output_type(ctx, i);
  tpu_lower_set_output(ctx, i, tpu_emit_reshape(tpu_lower_builder(ctx), v, t.dims, t.rank));
}

static void set_zero_output(tpu_lower_ctx_t* ctx, int i) {
  tpu_hlo_type_t t = tpu_lower_output_type(ctx, i);
  tpu_lower_set_output(ctx, i, tpu_emit_const_like(tpu_lower_builder(ctx), &t, 0));
}

/* ---- LU with partial pivoting ---- */

/* One column step of getrf on state {A [B, m, n], pivots int32 [B, k],
 * info int32 [B]}: the pivot is the first row >= j of largest |A[., j]|
 * (BLAS i?amax; a NaN never wins, and a NaN on the diagonal keeps row j);
 * rows j and p swap; below the diagonal the column is multiplied by
 * 1 / pivot (LAPACK scales by the reciprocal); the trailing block takes
 * the rank-1 update. A zero pivot sets info (first one only), swaps and
 * updates nothing, as dgetf2. */
static void lu_step(tpu_hlo_builder_t* b, tpu_hlo_value_t j, tpu_hlo_value_t* s, const void* arg) {
  (void)arg;
  tpu_hlo_value_t A = s[0];
  tpu_hlo_type_t t = tpu_hlo_value_type(b, A);
  int64_t B = t.dims[0], m = t.dims[1];
  tpu_hlo_type_t im = type2(TPU_DTYPE_INT64, B, m), i3 = t;
  i3.dtype = TPU_DTYPE_INT64;
  tpu_hlo_value_t rows = tpu_emit_iota(b, &im, 1);
  tpu_hlo_value_t jm = tpu_emit_broadcast_to(b, j, &im);
  tpu_hlo_value_t col = column(b, A, j), mag = tpu_emit_unary(b, "stablehlo.abs", col);
  tpu_hlo_value_t below = tpu_emit_compare(b, "GE", rows, jm);
  tpu_hlo_value_t nan = tpu_emit_compare(b, "NE", mag, mag);
  tpu_hlo_value_t cand = tpu_emit_select(b, and2(b, below, tpu_emit_unary(b, "stablehlo.not", nan)),
                                         mag, tpu_emit_splat(b, mag, -1));
  int64_t d1 = 1;
  tpu_hlo_value_t best = tpu_emit_reduce(b, cand, tpu_emit_const(b, t.dtype, -1), &d1, 1,
                                         "stablehlo.maximum");
  tpu_hlo_value_t hit = and2(b, below, tpu_emit_compare(b, "EQ", cand, spread(b, best, im)));
  tpu_hlo_value_t p = tpu_emit_reduce(b, tpu_emit_select(b, hit, rows, tpu_emit_splat(b, rows, (double)m)),
                                      i64(b, m), &d1, 1, "stablehlo.minimum");
  tpu_hlo_type_t ib = type2(TPU_DTYPE_INT64, B, 1);
  ib.rank = 1;
  tpu_hlo_value_t jb = tpu_emit_broadcast_to(b, j, &ib);
  tpu_hlo_value_t diag_nan = element(b, nan, j);
  p = tpu_emit_select(b, tpu_emit_binary(b, "stablehlo.or", diag_nan,
                                         tpu_emit_compare(b, "EQ", p, tpu_emit_splat(b, p, (double)m))),
                      jb, p);
  tpu_hlo_value_t prow = reshape2(b, gather_rows(b, A, reshape2(b, p, B, 1)), B, t.dims[2]);
  tpu_hlo_value_t pivot = element(b, prow, j);
  tpu_hlo_value_t nz = tpu_emit_compare(b, "NE", pivot, tpu_emit_splat(b, pivot, 0));
  p = tpu_emit_select(b, nz, p, jb);
  prow = tpu_emit_select(b, spread(b, nz, tpu_hlo_value_type(b, prow)), prow, row(b, A, j));
  tpu_hlo_value_t rowj = row(b, A, j);
  tpu_hlo_value_t r3 = tpu_emit_iota(b, &i3, 1), c3 = tpu_emit_iota(b, &i3, 2);
  tpu_hlo_value_t j3 = tpu_emit_broadcast_to(b, j, &i3);
  A = tpu_emit_select(b, tpu_emit_compare(b, "EQ", r3, j3), spread(b, reshape3(b, prow, B, 1, t.dims[2]), t),
                      tpu_emit_select(b, tpu_emit_compare(b, "EQ", r3, spread(b, p, i3)),
                                      spread(b, reshape3(b, rowj, B, 1, t.dims[2]), t), A));
  /* multipliers below the diagonal */
  tpu_hlo_value_t colj = column(b, A, j);
  tpu_hlo_value_t recip = tpu_emit_div(b, tpu_emit_splat(b, pivot, 1), pivot);
  tpu_hlo_value_t scale = and2(b, tpu_emit_compare(b, "GT", rows, jm), spread(b, nz, im));
  tpu_hlo_value_t l = tpu_emit_select(b, scale, tpu_emit_mul(b, colj, spread(b, recip, tpu_hlo_value_type(b, colj))), colj);
  A = set_column(b, A, j, l);
  tpu_hlo_value_t upd = and2(b, and2(b, tpu_emit_compare(b, "GT", r3, j3), tpu_emit_compare(b, "GT", c3, j3)),
                             spread(b, nz, i3));
  tpu_hlo_value_t prod = tpu_emit_mul(b, spread(b, l, t), spread(b, reshape3(b, prow, B, 1, t.dims[2]), t));
  /* spread puts l's [B, m] at dims 0, 1 and prow's [B, 1, n] as is */
  A = tpu_emit_select(b, upd, tpu_emit_sub(b, A, prod), A);
  tpu_hlo_value_t piv = s[1], info = s[2];
  tpu_hlo_value_t st[2] = {i64(b, 0), j};
  piv = tpu_emit_dynamic_update_slice(b, piv, reshape2(b, tpu_emit_convert(b, tpu_emit_add(b, p, tpu_emit_splat(b, p, 1)),
                                                        TPU_DTYPE_INT32), B, 1), st);
  tpu_hlo_value_t first = and2(b, tpu_emit_unary(b, "stablehlo.not", nz),
                               tpu_emit_compare(b, "EQ", info, tpu_emit_splat(b, info, 0)));
  tpu_hlo_value_t j1 = tpu_emit_convert(b, tpu_emit_add(b, jb, tpu_emit_splat(b, jb, 1)), TPU_DTYPE_INT32);
  s[0] = A, s[1] = piv, s[2] = tpu_emit_select(b, first, j1, info);
}

typedef struct {
  tpu_hlo_value_t lu, pivots, info; /* [B, m, n], int32 [B, k], int32 [B] */
} lu_t;

static lu_t lu_factor(tpu_hlo_builder_t* b, tpu_hlo_value_t A) {
  tpu_hlo_type_t t = tpu_hlo_value_type(b, A);
  int64_t B = t.dims[0], k = t.dims[1] < t.dims[2] ? t.dims[1] : t.dims[2];
  tpu_hlo_type_t pt = type2(TPU_DTYPE_INT32, B, k), it = type2(TPU_DTYPE_INT32, B, 1);
  it.rank = 1;
  tpu_hlo_value_t s[3] = {A, tpu_emit_const_like(b, &pt, 0), tpu_emit_const_like(b, &it, 0)};
  tpu_emit_for_loop(b, 0, k, 1, s, 3, lu_step, NULL);
  return (lu_t){s[0], s[1], s[2]};
}

/* The permutation the pivots apply, as int64 [B, m]: perm[i] is the row of
 * A that lands in row i of P^T A = L U (swaps j <-> pivots[j] - 1 applied
 * to 0..m-1 in order; in reverse order, the inverse permutation). Pivots
 * out of range were refused before the call (check_values). */
typedef struct {
  tpu_hlo_value_t pivots;
} perm_arg_t;

static void perm_step(tpu_hlo_builder_t* b, tpu_hlo_value_t j, tpu_hlo_value_t* s, const void* arg) {
  const perm_arg_t* a = arg;
  tpu_hlo_value_t perm = s[0];
  tpu_hlo_type_t t = tpu_hlo_value_type(b, perm);
  tpu_hlo_value_t p = tpu_emit_convert(b, element(b, a->pivots, j), TPU_DTYPE_INT64);
  p = tpu_emit_sub(b, p, tpu_emit_splat(b, p, 1));
  tpu_hlo_value_t rows = tpu_emit_iota(b, &t, 1);
  tpu_hlo_value_t at_j = element(b, perm, j);
  tpu_hlo_value_t at_p = reshape1(b, gather_rows(b, reshape3(b, perm, t.dims[0], t.dims[1], 1),
                                                 reshape2(b, p, t.dims[0], 1)),
                                  t.dims[0]);
  tpu_hlo_value_t jm = tpu_emit_broadcast_to(b, j, &t);
  s[0] = tpu_emit_select(b, tpu_emit_compare(b, "EQ", rows, jm), spread(b, at_p, t),
                         tpu_emit_select(b, tpu_emit_compare(b, "EQ", rows, spread(b, p, t)),
                                         spread(b, at_j, t), perm));
}

static tpu_hlo_value_t pivot_permutation(tpu_hlo_builder_t* b, tpu_hlo_value_t pivots, int64_t m,
                                         bool inverse) {
  tpu_hlo_type_t pt = tpu_hlo_value_type(b, pivots);
  tpu_hlo_type_t t = type2(TPU_DTYPE_INT64, pt.dims[0], m);
  tpu_hlo_value_t perm = tpu_emit_iota(b, &t, 1);
  perm_arg_t a = {pivots};
  int64_t k = pt.dims[1];
  if (inverse)
    tpu_emit_for_loop(b, k - 1, -1, -1, &perm, 1, perm_step, &a);
  else
    tpu_emit_for_loop(b, 0, k, 1, &perm, 1, perm_step, &a);
  return perm;
}

/* P [B, m, m] of A = P L U: P[perm[i], i] = 1. */
static tpu_hlo_value_t permutation_matrix(tpu_hlo_builder_t* b, tpu_hlo_value_t perm, tpu_dtype_t d) {
  tpu_hlo_type_t pt = tpu_hlo_value_type(b, perm);
  int64_t B = pt.dims[0], m = pt.dims[1];
  tpu_hlo_type_t t = type3(TPU_DTYPE_INT64, B, m, m);
  tpu_hlo_value_t r = tpu_emit_iota(b, &t, 1);
  tpu_hlo_value_t pi = tpu_emit_broadcast_to(b, reshape3(b, perm, B, 1, m), &t);
  return tpu_emit_convert(b, tpu_emit_compare(b, "EQ", r, pi), d);
}

/* L [B, m, k] (unit lower) and U [B, k, n] from LU [B, m, n], k = min(m,
 * n): LU's leading block with the other triangle zeroed (and L's diagonal
 * 1). */
static tpu_hlo_value_t unpack(tpu_hlo_builder_t* b, tpu_hlo_value_t lu, bool lower) {
  tpu_hlo_type_t t = tpu_hlo_value_type(b, lu);
  int64_t B = t.dims[0], m = t.dims[1], n = t.dims[2], k = m < n ? m : n;
  int64_t start[3] = {0, 0, 0}, limit[3] = {B, lower ? m : k, lower ? k : n}, stride[3] = {1, 1, 1};
  tpu_hlo_value_t x = tpu_emit_slice(b, lu, start, limit, stride);
  tpu_hlo_type_t xt = tpu_hlo_value_type(b, x), it = xt;
  it.dtype = TPU_DTYPE_INT64;
  tpu_hlo_value_t r = tpu_emit_iota(b, &it, 1), c = tpu_emit_iota(b, &it, 2);
  tpu_hlo_value_t zero = tpu_emit_const_like(b, &xt, 0);
  if (!lower) return tpu_emit_select(b, tpu_emit_compare(b, "LE", r, c), x, zero);
  return tpu_emit_select(b, tpu_emit_compare(b, "GT", r, c), x,
                         tpu_emit_select(b, tpu_emit_compare(b, "EQ", r, c), tpu_emit_const_like(b, &xt, 1), zero));
}


/* X from LU [B, n, n], pivots [B, n] and R [B, n, r] (left) or [B, r, n]:
 *   left, !adjoint:  A X = R    X = U^-1 L^-1 P^T R
 *   left, adjoint:   A^T X = R  X = P L^-T U^-T R
 *   right, !adjoint: X A = R    X = R U^-1 L^-1 P^T
 *   right, adjoint:  X A^T = R  X = R P L^-T U^-T */
static tpu_hlo_value_t lu_solve(tpu_hlo_builder_t* b, tpu_hlo_value_t lu, tpu_hlo_value_t pivots,
                                tpu_hlo_value_t r, bool left, bool adjoint) {
  int64_t n = tpu_hlo_value_type(b, lu).dims[1];
  if (left && !adjoint) {
    r = gather_rows(b, r, pivot_permutation(b, pivots, n, false));
    r = tpu_emit_triangular_solve(b, lu, r, true, true, true, false);
    return tpu_emit_triangular_solve(b, lu, r, true, false, false, false);
  }
  if (left) {
    r = tpu_emit_triangular_solve(b, lu, r, true, false, false, true);
    r = tpu_emit_triangular_solve(b, lu, r, true, true, true, true);
    return gather_rows(b, r, pivot_permutation(b, pivots, n, true));
  }
  if (!adjoint) {
    r = tpu_emit_triangular_solve(b, lu, r, false, false, false, false);
    r = tpu_emit_triangular_solve(b, lu, r, false, true, true, false);
    return gather_columns(b, r, pivot_permutation(b, pivots, n, true));
  }
  r = gather_columns(b, r, pivot_permutation(b, pivots, n, false));
  r = tpu_emit_triangular_solve(b, lu, r, false, true, true, true);
  return tpu_emit_triangular_solve(b, lu, r, false, false, false, true);
}

static bool flag(tpu_lower_ctx_t* ctx, int i, bool dflt) {
  const tpu_lower_arg_t* a = tpu_lower_arg(ctx, i);
  return a->kind == TPU_ARG_BOOL ? a->i != 0 : dflt;
}

static tpu_status_t check_matrix(tpu_lower_ctx_t* ctx, int i, const char* what) {
  const tpu_lower_arg_t* a = tpu_lower_arg(ctx, i);
  if (a->kind != TPU_ARG_TENSOR || a->type.rank < 2 || !real_solver_dtype(a->type.dtype))
    return tpu_lower_decline(ctx, "%s of %s", what, a->kind == TPU_ARG_TENSOR ? tpu_dtype_name(a->type.dtype) : "a non-tensor");
  return NULL;
}

/* linalg_lu_factor_ex(A, *, pivot=True, check_errors=False) -> (LU,
 * pivots, info). pivot=False: CPU refuses (the fallback raises). */
static tpu_status_t lower_lu_factor_ex(tpu_lower_ctx_t* ctx) {
  tpu_status_t st = check_matrix(ctx, 0, "lu_factor");
  if (st) return st;
  if (!flag(ctx, 1, true) || flag(ctx, 2, false))
    return tpu_lower_decline(ctx, "lu_factor without pivoting or with check_errors");
  int64_t B, m, n;
  tpu_hlo_value_t A = matrices(ctx, 0, &B, &m, &n);
  if (B * m * n == 0) {
    set_zero_output(ctx, 0), set_zero_output(ctx, 1), set_zero_output(ctx, 2);
    return NULL;
  }
  lu_t f = lu_factor(tpu_lower_builder(ctx), A);
  set_output(ctx, 0, f.lu), set_output(ctx, 1, f.pivots), set_output(ctx, 2, f.info);
  return NULL;
}

/* P, L, U outputs 0..2 from LU [B, m, n] and pivots [B, k]; an output
 * PyTorch made empty (unpack_data / unpack_pivots false) stays empty. */
static void set_plu(tpu_lower_ctx_t* ctx, tpu_hlo_value_t lu, tpu_hlo_value_t pivots, int64_t m) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_type_t pt = tpu_lower_output_type(ctx, 0), lt = tpu_lower_output_type(ctx, 1),
                 ut = tpu_lower_output_type(ctx, 2);
  if (numel_of(&pt) == 0) set_zero_output(ctx, 0);
  else set_output(ctx, 0, permutation_matrix(b, pivot_permutation(b, pivots, m, false), pt.dtype));
  if (numel_of(&lt) == 0) set_zero_output(ctx, 1);
  else set_output(ctx, 1, unpack(b, lu, true));
  if (numel_of(&ut) == 0) set_zero_output(ctx, 2);
  else set_output(ctx, 2, unpack(b, lu, false));
}

/* P, L, U of an empty factorization: P is still the identity (no swaps,
 * m x m), L and U have no elements. */
static tpu_status_t set_empty_plu(tpu_lower_ctx_t* ctx, int64_t B, int64_t m) {
  tpu_hlo_type_t pt = tpu_lower_output_type(ctx, 0);
  if (numel_of(&pt) > 0) {
    tpu_hlo_type_t it = type2(TPU_DTYPE_INT64, B, m);
    set_output(ctx, 0, permutation_matrix(tpu_lower_builder(ctx), tpu_emit_iota(tpu_lower_builder(ctx), &it, 1), pt.dtype));
  } else {
    set_zero_output(ctx, 0);
  }
  set_zero_output(ctx, 1), set_zero_output(ctx, 2);
  return NULL;
}

/* linalg_lu(A, *, pivot=True) -> (P, L, U). */
static tpu_status_t lower_linalg_lu(tpu_lower_ctx_t* ctx) {
  tpu_status_t st = check_matrix(ctx, 0, "lu");
  if (st) return st;
  if (!flag(ctx, 1, true)) return tpu_lower_decline(ctx, "lu without pivoting");
  int64_t B, m, n;
  tpu_hlo_value_t A = matrices(ctx, 0, &B, &m, &n);
  if (B * m * n == 0) return set_empty_plu(ctx, B, m);
  lu_t f = lu_factor(tpu_lower_builder(ctx), A);
  set_plu(ctx, f.lu, f.pivots, m);
  return NULL;
}

/* lu_unpack(LU, pivots, unpack_data=True, unpack_pivots=True) -> (P, L, U). */
static tpu_status_t lower_lu_unpack(tpu_lower_ctx_t* ctx) {
  tpu_status_t st = check_matrix(ctx, 0, "lu_unpack");
  if (st) return st;
  const tpu_lower_arg_t* pv = tpu_lower_arg(ctx, 1);
  if (pv->kind != TPU_ARG_TENSOR || pv->type.dtype != TPU_DTYPE_INT32)
    return tpu_lower_decline(ctx, "lu_unpack with pivots that are not int32");
  int64_t B, m, n;
  tpu_hlo_value_t lu = matrices(ctx, 0, &B, &m, &n);
  int64_t k = m < n ? m : n;
  const tpu_hlo_type_t* p = &pv->type;
  int64_t pb = 1;
  for (int d = 0; d + 1 < p->rank; d++) pb *= p->dims[d];
  if (pb != B || p->dims[p->rank - 1] != k)
    return tpu_lower_decline(ctx, "lu_unpack pivots of another shape");
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  if (B * m * n == 0) return set_empty_plu(ctx, B, m);
  set_plu(ctx, lu, reshape2(b, tpu_lower_tensor(ctx, 1), B, k), m);
  return NULL;
}

/* Tensor argument i broadcast to the batch dims of `out` ([..., r, c]),
 * keeping its own last two dims, as [B, r_i, c_i]. */
static tpu_hlo_value_t batched(tpu_lower_ctx_t* ctx, int i, const tpu_hlo_type_t* out, int64_t* B) {
  tpu_hlo_value_t v = tpu_lower_batched_matrix(ctx, i, out);
  tpu_hlo_type_t t = tpu_hlo_value_type(tpu_lower_builder(ctx), v);
  *B = 1;
  for (int d = 0; d + 2 < t.rank; d++) *B *= t.dims[d];
  return reshape3(tpu_lower_builder(ctx), v, *B, t.dims[t.rank - 2], t.dims[t.rank - 1]);
}

/* linalg_lu_solve(LU, pivots, B, *, left=True, adjoint=False) -> X. */
static tpu_status_t lower_lu_solve(tpu_lower_ctx_t* ctx) {
  tpu_status_t st = check_matrix(ctx, 0, "lu_solve");
  if (!st) st = check_matrix(ctx, 2, "lu_solve");
  if (st) return st;
  const tpu_lower_arg_t* pv = tpu_lower_arg(ctx, 1);
  tpu_hlo_type_t out = tpu_lower_output_type(ctx, 0);
  if (pv->kind != TPU_ARG_TENSOR || pv->type.dtype != TPU_DTYPE_INT32 ||
      tpu_lower_arg(ctx, 0)->type.dtype != tpu_lower_arg(ctx, 2)->type.dtype || out.rank < 2)
    return tpu_lower_decline(ctx, "lu_solve of these operands");
  if (numel_of(&out) == 0) {
    set_zero_output(ctx, 0);
    return NULL;
  }
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  int64_t B;
  tpu_hlo_value_t lu = batched(ctx, 0, &out, &B), rhs = batched(ctx, 2, &out, &B);
  int64_t n = tpu_hlo_value_type(b, lu).dims[1];
  /* pivots [..., n] to the output's batch */
  tpu_hlo_type_t pt = out;
  pt.rank = out.rank - 1;
  pt.dims[pt.rank - 1] = n;
  pt.dtype = TPU_DTYPE_INT32;
  tpu_hlo_value_t piv = reshape2(b, tpu_emit_broadcast_to(b, tpu_lower_tensor(ctx, 1), &pt), B, n);
  set_output(ctx, 0, lu_solve(b, lu, piv, rhs, flag(ctx, 3, true), flag(ctx, 4, false)));
  return NULL;
}


/* ---- Householder QR (geqrf, orgqr, ormqr) ---- */

static tpu_hlo_value_t not1(tpu_hlo_builder_t* b, tpu_hlo_value_t x) {
  return tpu_emit_unary(b, "stablehlo.not", x);
}

/* sum over dim 1 of x [B, R, C] (or [B, R]). */
static tpu_hlo_value_t sum_dim(tpu_hlo_builder_t* b, tpu_hlo_value_t x, int64_t dim) {
  tpu_hlo_type_t t = tpu_hlo_value_type(b, x);
  return tpu_emit_reduce(b, x, tpu_emit_const(b, t.dtype, 0), &dim, 1, "stablehlo.add");
}

/* The Householder vector of column j of x [B, m, n]: v[r] = x[r, j]
 * below row j, 1 at row j, 0 above (LAPACK keeps v's implicit 1 out of
 * the matrix). */
static tpu_hlo_value_t reflector(tpu_hlo_builder_t* b, tpu_hlo_value_t x, tpu_hlo_value_t j) {
  tpu_hlo_value_t col = column(b, x, j);
  tpu_hlo_type_t ct = tpu_hlo_value_type(b, col), it = ct;
  it.dtype = TPU_DTYPE_INT64;
  tpu_hlo_value_t rows = tpu_emit_iota(b, &it, 1), jm = tpu_emit_broadcast_to(b, j, &it);
  return tpu_emit_select(b, tpu_emit_compare(b, "GT", rows, jm), col,
                         tpu_emit_select(b, tpu_emit_compare(b, "EQ", rows, jm),
                                         tpu_emit_const_like(b, &ct, 1), tpu_emit_const_like(b, &ct, 0)));
}

/* dlarf: H = I - tau v v^T applied to c [B, R, C] from the left (v [B, R])
 * or the right (v [B, C]), touching only the rows (left) / columns (right)
 * where `keep` is false: w = c^T v (or c v); c += v (-tau w)^T as dger. */
static tpu_hlo_value_t apply_reflector(tpu_hlo_builder_t* b, tpu_hlo_value_t c, tpu_hlo_value_t v,
                                       tpu_hlo_value_t tau, bool left, tpu_hlo_value_t mask) {
  tpu_hlo_type_t t = tpu_hlo_value_type(b, c);
  int64_t B = t.dims[0], R = t.dims[1], C = t.dims[2];
  tpu_hlo_value_t prod, w, upd;
  if (left) {
    prod = tpu_emit_mul(b, c, spread(b, v, t));             /* v over rows */
    w = sum_dim(b, prod, 1);                                /* [B, C] */
    tpu_hlo_value_t tw = tpu_emit_mul(b, tpu_emit_unary(b, "stablehlo.negate", spread(b, tau, tpu_hlo_value_type(b, w))), w);
    upd = tpu_emit_mul(b, spread(b, v, t), tpu_emit_broadcast_to(b, reshape3(b, tw, B, 1, C), &t));
  } else {
    prod = tpu_emit_mul(b, c, tpu_emit_broadcast_to(b, reshape3(b, v, B, 1, C), &t));
    w = sum_dim(b, prod, 2);                                /* [B, R] */
    tpu_hlo_value_t tw = tpu_emit_mul(b, tpu_emit_unary(b, "stablehlo.negate", spread(b, tau, tpu_hlo_value_type(b, w))), w);
    upd = tpu_emit_mul(b, tpu_emit_broadcast_to(b, reshape3(b, v, B, 1, C), &t), spread(b, tw, t));
  }
  (void)R;
  return tpu_emit_select(b, mask, tpu_emit_add(b, c, upd), c);
}

/* One step of dgeqr2 on {A [B, m, n], tau [B, k]}: dlarfg makes the
 * reflector that zeroes column j below the diagonal (beta = -sign(alpha)
 * * |(alpha, x)|, tau = (beta - alpha) / beta, v = x / (alpha - beta); a
 * column already zero below the diagonal gets tau 0 and stays), then
 * dlarf applies it to the columns right of j. */
static void qr_step(tpu_hlo_builder_t* b, tpu_hlo_value_t j, tpu_hlo_value_t* s, const void* arg) {
  (void)arg;
  tpu_hlo_value_t A = s[0];
  tpu_hlo_type_t t = tpu_hlo_value_type(b, A), i3 = t;
  i3.dtype = TPU_DTYPE_INT64;
  int64_t B = t.dims[0], m = t.dims[1];
  tpu_hlo_type_t im = type2(TPU_DTYPE_INT64, B, m);
  tpu_hlo_value_t rows = tpu_emit_iota(b, &im, 1), jm = tpu_emit_broadcast_to(b, j, &im);
  tpu_hlo_value_t col = column(b, A, j);
  tpu_hlo_type_t ct = tpu_hlo_value_type(b, col);
  tpu_hlo_value_t below = tpu_emit_compare(b, "GT", rows, jm);
  tpu_hlo_value_t x = tpu_emit_select(b, below, col, tpu_emit_const_like(b, &ct, 0));
  tpu_hlo_value_t alpha = element(b, col, j);
  tpu_hlo_value_t xnorm = tpu_emit_unary(b, "stablehlo.sqrt", sum_dim(b, tpu_emit_mul(b, x, x), 1));
  /* dlapy2: max * sqrt(1 + (min / max)^2) */
  tpu_hlo_value_t aa = tpu_emit_unary(b, "stablehlo.abs", alpha);
  tpu_hlo_value_t hi = tpu_emit_binary(b, "stablehlo.maximum", aa, xnorm);
  tpu_hlo_value_t lo = tpu_emit_binary(b, "stablehlo.minimum", aa, xnorm);
  tpu_hlo_value_t q = tpu_emit_div(b, lo, hi);
  tpu_hlo_value_t norm = tpu_emit_mul(b, hi, tpu_emit_unary(b, "stablehlo.sqrt",
                                                           tpu_emit_add(b, tpu_emit_splat(b, q, 1), tpu_emit_mul(b, q, q))));
  tpu_hlo_value_t neg = tpu_emit_compare(b, "LT", alpha, tpu_emit_splat(b, alpha, 0));
  tpu_hlo_value_t beta = tpu_emit_select(b, neg, norm, tpu_emit_unary(b, "stablehlo.negate", norm));
  tpu_hlo_value_t trivial = tpu_emit_compare(b, "EQ", xnorm, tpu_emit_splat(b, xnorm, 0));
  tpu_hlo_value_t tau = tpu_emit_select(b, trivial, tpu_emit_splat(b, alpha, 0),
                                        tpu_emit_div(b, tpu_emit_sub(b, beta, alpha), beta));
  beta = tpu_emit_select(b, trivial, alpha, beta);
  tpu_hlo_value_t scal = tpu_emit_div(b, tpu_emit_splat(b, alpha, 1), tpu_emit_sub(b, alpha, beta));
  tpu_hlo_value_t v = tpu_emit_select(b, and2(b, below, not1(b, spread(b, trivial, im))),
                                      tpu_emit_mul(b, x, spread(b, scal, ct)), col);
  v = tpu_emit_select(b, tpu_emit_compare(b, "EQ", rows, jm), spread(b, beta, ct), v);
  A = set_column(b, A, j, v);
  /* apply H to the columns right of j, rows >= j */
  tpu_hlo_value_t vf = reflector(b, A, j);
  tpu_hlo_value_t r3 = tpu_emit_iota(b, &i3, 1), c3 = tpu_emit_iota(b, &i3, 2), j3 = tpu_emit_broadcast_to(b, j, &i3);
  tpu_hlo_value_t mask = and2(b, tpu_emit_compare(b, "GE", r3, j3), tpu_emit_compare(b, "GT", c3, j3));
  A = apply_reflector(b, A, vf, tau, true, mask);
  tpu_hlo_value_t st[2] = {i64(b, 0), j};
  s[0] = A;
  s[1] = tpu_emit_dynamic_update_slice(b, s[1], reshape2(b, tau, B, 1), st);
}

typedef struct {
  tpu_hlo_value_t a, tau;
} qr_t;

static qr_t geqrf(tpu_hlo_builder_t* b, tpu_hlo_value_t A) {
  tpu_hlo_type_t t = tpu_hlo_value_type(b, A);
  int64_t B = t.dims[0], k = t.dims[1] < t.dims[2] ? t.dims[1] : t.dims[2];
  tpu_hlo_type_t tt = type2(t.dtype, B, k);
  tpu_hlo_value_t s[2] = {A, tpu_emit_const_like(b, &tt, 0)};
  tpu_emit_for_loop(b, 0, k, 1, s, 2, qr_step, NULL);
  return (qr_t){s[0], s[1]};
}

typedef struct {
  tpu_hlo_value_t tau;
  tpu_hlo_value_t v; /* ormqr: the reflectors' matrix */
  bool left;
} reflect_arg_t;

/* dorg2r step i on Q [B, m, n] (columns < k hold the reflectors, the rest
 * unit columns): H(i) applied to the columns right of i, then column i
 * becomes -tau v below the diagonal, 1 - tau on it, 0 above. */
static void orgqr_step(tpu_hlo_builder_t* b, tpu_hlo_value_t i, tpu_hlo_value_t* s, const void* arg) {
  const reflect_arg_t* a = arg;
  tpu_hlo_value_t Q = s[0];
  tpu_hlo_type_t t = tpu_hlo_value_type(b, Q), i3 = t;
  i3.dtype = TPU_DTYPE_INT64;
  tpu_hlo_value_t tau = element(b, a->tau, i);
  tpu_hlo_value_t v = reflector(b, Q, i);
  tpu_hlo_value_t r3 = tpu_emit_iota(b, &i3, 1), c3 = tpu_emit_iota(b, &i3, 2), j3 = tpu_emit_broadcast_to(b, i, &i3);
  tpu_hlo_value_t mask = and2(b, tpu_emit_compare(b, "GE", r3, j3), tpu_emit_compare(b, "GT", c3, j3));
  Q = apply_reflector(b, Q, v, tau, true, mask);
  tpu_hlo_type_t vt = tpu_hlo_value_type(b, v), it = vt;
  it.dtype = TPU_DTYPE_INT64;
  tpu_hlo_value_t rows = tpu_emit_iota(b, &it, 1), im = tpu_emit_broadcast_to(b, i, &it);
  tpu_hlo_value_t taum = spread(b, tau, vt);
  tpu_hlo_value_t col = tpu_emit_select(
      b, tpu_emit_compare(b, "GT", rows, im), tpu_emit_mul(b, tpu_emit_unary(b, "stablehlo.negate", taum), v),
      tpu_emit_select(b, tpu_emit_compare(b, "EQ", rows, im), tpu_emit_sub(b, tpu_emit_splat(b, taum, 1), taum),
                      tpu_emit_const_like(b, &vt, 0)));
  s[0] = set_column(b, Q, i, col);
}

/* orgqr: Q [B, m, n] from reflectors a [B, m, >= n'] (first min(n,
 * cols) columns used) and tau [B, k]. */
static tpu_hlo_value_t orgqr(tpu_hlo_builder_t* b, tpu_hlo_value_t a, tpu_hlo_value_t tau, int64_t n) {
  tpu_hlo_type_t t = tpu_hlo_value_type(b, a);
  int64_t B = t.dims[0], m = t.dims[1], cols = t.dims[2], k = tpu_hlo_value_type(b, tau).dims[1];
  tpu_hlo_value_t q;
  if (cols >= n) {
    int64_t st[3] = {0, 0, 0}, lim[3] = {B, m, n}, str[3] = {1, 1, 1};
    q = tpu_emit_slice(b, a, st, lim, str);
  } else {
    int64_t lo[3] = {0, 0, 0}, hi[3] = {0, 0, n - cols};
    q = tpu_emit_pad(b, a, tpu_emit_const(b, t.dtype, 0), lo, hi, NULL);
  }
  tpu_hlo_type_t qt = type3(t.dtype, B, m, n), i3 = qt;
  i3.dtype = TPU_DTYPE_INT64;
  tpu_hlo_value_t r3 = tpu_emit_iota(b, &i3, 1), c3 = tpu_emit_iota(b, &i3, 2);
  tpu_hlo_value_t unit = tpu_emit_select(b, tpu_emit_compare(b, "EQ", r3, c3), tpu_emit_const_like(b, &qt, 1),
                                         tpu_emit_const_like(b, &qt, 0));
  q = tpu_emit_select(b, tpu_emit_compare(b, "LT", c3, tpu_emit_const_like(b, &i3, (double)k)), q, unit);
  reflect_arg_t arg = {tau, {0}, true};
  tpu_emit_for_loop(b, k - 1, -1, -1, &q, 1, orgqr_step, &arg);
  return q;
}

/* dorm2r step i on C: H(i) (reflector i of arg->v) from the left
 * (rows >= i) or the right (columns >= i). */
static void ormqr_step(tpu_hlo_builder_t* b, tpu_hlo_value_t i, tpu_hlo_value_t* s, const void* arg) {
  const reflect_arg_t* a = arg;
  tpu_hlo_value_t C = s[0];
  tpu_hlo_type_t t = tpu_hlo_value_type(b, C), i3 = t;
  i3.dtype = TPU_DTYPE_INT64;
  tpu_hlo_value_t tau = element(b, a->tau, i);
  tpu_hlo_value_t v = reflector(b, a->v, i);
  tpu_hlo_value_t at = tpu_emit_iota(b, &i3, a->left ? 1 : 2), j3 = tpu_emit_broadcast_to(b, i, &i3);
  s[0] = apply_reflector(b, C, v, tau, a->left, tpu_emit_compare(b, "GE", at, j3));
}

static tpu_status_t check_pair(tpu_lower_ctx_t* ctx, int a, int t, const char* what) {
  tpu_status_t st = check_matrix(ctx, a, what);
  if (st) return st;
  const tpu_lower_arg_t* tau = tpu_lower_arg(ctx, t);
  if (tau->kind != TPU_ARG_TENSOR || tau->type.dtype != tpu_lower_arg(ctx, a)->type.dtype ||
      tau->type.rank != tpu_lower_arg(ctx, a)->type.rank - 1)
    return tpu_lower_decline(ctx, "%s with this tau", what);
  return NULL;
}

static tpu_hlo_value_t taus(tpu_lower_ctx_t* ctx, int i, int64_t B) {
  const tpu_hlo_type_t* t = &tpu_lower_arg(ctx, i)->type;
  return reshape2(tpu_lower_builder(ctx), tpu_lower_tensor(ctx, i), B, t->dims[t->rank - 1]);
}

/* geqrf(A) -> (a, tau) */
static tpu_status_t lower_geqrf(tpu_lower_ctx_t* ctx) {
  tpu_status_t st = check_matrix(ctx, 0, "geqrf");
  if (st) return st;
  int64_t B, m, n;
  tpu_hlo_value_t A = matrices(ctx, 0, &B, &m, &n);
  if (B * m * n == 0) {
    set_zero_output(ctx, 0), set_zero_output(ctx, 1);
    return NULL;
  }
  qr_t f = geqrf(tpu_lower_builder(ctx), A);
  set_output(ctx, 0, f.a), set_output(ctx, 1, f.tau);
  return NULL;
}

/* linalg_householder_product(input [.., m, n], tau [.., k]) -> Q [.., m, n] */
static tpu_status_t lower_householder_product(tpu_lower_ctx_t* ctx) {
  tpu_status_t st = check_pair(ctx, 0, 1, "householder_product");
  if (st) return st;
  int64_t B, m, n;
  tpu_hlo_value_t A = matrices(ctx, 0, &B, &m, &n);
  if (B * m * n == 0) {
    set_zero_output(ctx, 0);
    return NULL;
  }
  set_output(ctx, 0, orgqr(tpu_lower_builder(ctx), A, taus(ctx, 1, B), n));
  return NULL;
}

/* ormqr(input, tau, other, left=True, transpose=False): Q other, Q^T
 * other, other Q or other Q^T, Q = H(0) ... H(k-1) (dorm2r's order). */
static tpu_status_t lower_ormqr(tpu_lower_ctx_t* ctx) {
  tpu_status_t st = check_pair(ctx, 0, 1, "ormqr");
  if (!st) st = check_matrix(ctx, 2, "ormqr");
  if (st) return st;
  if (tpu_lower_arg(ctx, 2)->type.dtype != tpu_lower_arg(ctx, 0)->type.dtype)
    return tpu_lower_decline(ctx, "ormqr of two dtypes");
  int64_t B, m, n, B2, mc, nc;
  tpu_hlo_value_t V = matrices(ctx, 0, &B, &m, &n);
  tpu_hlo_value_t C = matrices(ctx, 2, &B2, &mc, &nc);
  if (B != B2) return tpu_lower_decline(ctx, "ormqr batches that differ");
  if (B2 * mc * nc == 0) {
    set_zero_output(ctx, 0);
    return NULL;
  }
  tpu_hlo_value_t tau = taus(ctx, 1, B);
  int64_t k = tpu_hlo_value_type(tpu_lower_builder(ctx), tau).dims[1];
  bool left = flag(ctx, 3, true), trans = flag(ctx, 4, false);
  reflect_arg_t arg = {tau, V, left};
  if (left != trans)  /* Q C and C Q^T apply H(k-1) first */
    tpu_emit_for_loop(tpu_lower_builder(ctx), k - 1, -1, -1, &C, 1, ormqr_step, &arg);
  else
    tpu_emit_for_loop(tpu_lower_builder(ctx), 0, k, 1, &C, 1, ormqr_step, &arg);
  set_output(ctx, 0, C);
  return NULL;
}

static tpu_hlo_value_t triu(tpu_hlo_builder_t* b, tpu_hlo_value_t x) {
  tpu_hlo_type_t t = tpu_hlo_value_type(b, x), it = t;
  it.dtype = TPU_DTYPE_INT64;
  return tpu_emit_select(b, tpu_emit_compare(b, "LE", tpu_emit_iota(b, &it, 1), tpu_emit_iota(b, &it, 2)), x,
                         tpu_emit_const_like(b, &t, 0));
}

/* linalg_qr(A, mode) -> (Q, R): geqrf, R its upper triangle (k or, in
 * "complete" mode, m rows), Q orgqr of its reflectors (m x k, m x m, or
 * empty in "r" mode): LAPACK's own signs, as CPU. */
static tpu_status_t lower_linalg_qr(tpu_lower_ctx_t* ctx) {
  tpu_status_t st = check_matrix(ctx, 0, "linalg_qr");
  if (st) return st;
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_type_t qt = tpu_lower_output_type(ctx, 0), rt = tpu_lower_output_type(ctx, 1);
  int64_t B, m, n;
  tpu_hlo_value_t A = matrices(ctx, 0, &B, &m, &n);
  if (B * m * n == 0) {
    /* Q of a matrix with no columns: the identity's first columns */
    if (numel_of(&qt) > 0) {
      int64_t qn = qt.dims[qt.rank - 1];
      tpu_hlo_type_t t3 = type3(qt.dtype, B, m, qn), i3 = t3;
      i3.dtype = TPU_DTYPE_INT64;
      set_output(ctx, 0, tpu_emit_select(b, tpu_emit_compare(b, "EQ", tpu_emit_iota(b, &i3, 1), tpu_emit_iota(b, &i3, 2)),
                                         tpu_emit_const_like(b, &t3, 1), tpu_emit_const_like(b, &t3, 0)));
    } else {
      set_zero_output(ctx, 0);
    }
    set_zero_output(ctx, 1);
    return NULL;
  }
  qr_t f = geqrf(b, A);
  int64_t rrows = rt.dims[rt.rank - 2];
  tpu_hlo_value_t r;
  if (rrows <= m) {
    int64_t s0[3] = {0, 0, 0}, lim[3] = {B, rrows, n}, str[3] = {1, 1, 1};
    r = tpu_emit_slice(b, f.a, s0, lim, str);
  } else {
    return tpu_lower_decline(ctx, "qr with more R rows than A has");
  }
  set_output(ctx, 1, triu(b, r));
  if (numel_of(&qt) == 0) set_zero_output(ctx, 0);
  else set_output(ctx, 0, orgqr(b, f.a, f.tau, qt.dims[qt.rank - 1]));
  return NULL;
}


/* ---- Jacobi SVD and symmetric eigendecomposition ---- */

/* The first k diagonal entries of x [B, R, C] (k <= R, C) as [B, k]: a
 * max-reduce over -inf off the diagonal moves the values exactly. */
static tpu_hlo_value_t diagonal_of(tpu_hlo_builder_t* b, tpu_hlo_value_t x, int64_t k) {
  tpu_hlo_type_t t = tpu_hlo_value_type(b, x);
  int64_t st[3] = {0, 0, 0}, lim[3] = {t.dims[0], k, k}, str[3] = {1, 1, 1};
  tpu_hlo_value_t sq = tpu_emit_slice(b, x, st, lim, str);
  tpu_hlo_type_t qt = tpu_hlo_value_type(b, sq), it = qt;
  it.dtype = TPU_DTYPE_INT64;
  tpu_hlo_value_t on = tpu_emit_compare(b, "EQ", tpu_emit_iota(b, &it, 1), tpu_emit_iota(b, &it, 2));
  tpu_hlo_value_t v = tpu_emit_select(b, on, sq, tpu_emit_const_like(b, &qt, -__builtin_inf()));
  int64_t d2 = 2;
  return tpu_emit_reduce(b, v, tpu_emit_const(b, t.dtype, -__builtin_inf()), &d2, 1, "stablehlo.maximum");
}

/* Pair t of the cyclic-by-rows order over n columns ((0, 1), (0, 2), ...,
 * (n - 2, n - 1)): p from the closed form, corrected by one step either
 * way for the float rounding of the square root. */
static void pair_of(tpu_hlo_builder_t* b, tpu_hlo_value_t t, int64_t n, tpu_hlo_value_t* p_out,
                    tpu_hlo_value_t* q_out) {
  tpu_hlo_value_t tf = tpu_emit_convert(b, t, TPU_DTYPE_FLOAT64);
  double w = 2.0 * (double)n - 1.0;
  tpu_hlo_value_t disc = tpu_emit_sub(b, tpu_emit_const(b, TPU_DTYPE_FLOAT64, w * w),
                                      tpu_emit_mul(b, tpu_emit_const(b, TPU_DTYPE_FLOAT64, 8), tf));
  tpu_hlo_value_t pf = tpu_emit_unary(
      b, "stablehlo.floor",
      tpu_emit_mul(b, tpu_emit_sub(b, tpu_emit_const(b, TPU_DTYPE_FLOAT64, w), tpu_emit_unary(b, "stablehlo.sqrt", disc)),
                   tpu_emit_const(b, TPU_DTYPE_FLOAT64, 0.5)));
  tpu_hlo_value_t p = tpu_emit_convert(b, pf, TPU_DTYPE_INT64);
  /* start(p) = p (2n - p - 1) / 2 */
  for (int fix = 0; fix < 2; fix++) {
    tpu_hlo_value_t start = tpu_emit_div(b, tpu_emit_mul(b, p, tpu_emit_sub(b, i64(b, 2 * n - 1), p)), i64(b, 2));
    tpu_hlo_value_t p1 = tpu_emit_add(b, p, i64(b, 1));
    tpu_hlo_value_t next = tpu_emit_div(b, tpu_emit_mul(b, p1, tpu_emit_sub(b, i64(b, 2 * n - 1), p1)), i64(b, 2));
    p = tpu_emit_select(b, tpu_emit_compare(b, "LE", next, t), p1,
                        tpu_emit_select(b, tpu_emit_compare(b, "GT", start, t), tpu_emit_sub(b, p, i64(b, 1)), p));
  }
  tpu_hlo_value_t start = tpu_emit_div(b, tpu_emit_mul(b, p, tpu_emit_sub(b, i64(b, 2 * n - 1), p)), i64(b, 2));
  *p_out = p;
  *q_out = tpu_emit_add(b, tpu_emit_sub(b, t, start), tpu_emit_add(b, p, i64(b, 1)));
}

/* The Jacobi rotation (c, s) that zeroes the off-diagonal `gamma` of the
 * symmetric 2x2 [[alpha, gamma], [gamma, beta]]: zeta = (beta - alpha) /
 * (2 gamma), t = sign(zeta) / (|zeta| + sqrt(1 + zeta^2)), c = 1 /
 * sqrt(1 + t^2), s = c t; (1, 0) where `skip`. */
static void rotation(tpu_hlo_builder_t* b, tpu_hlo_value_t alpha, tpu_hlo_value_t beta, tpu_hlo_value_t gamma,
                     tpu_hlo_value_t skip, tpu_hlo_value_t* c_out, tpu_hlo_value_t* s_out,
                     tpu_hlo_value_t* t_out) {
  tpu_hlo_value_t one = tpu_emit_splat(b, alpha, 1);
  tpu_hlo_value_t g = tpu_emit_select(b, skip, one, gamma);
  tpu_hlo_value_t zeta = tpu_emit_div(b, tpu_emit_sub(b, beta, alpha), tpu_emit_mul(b, tpu_emit_splat(b, g, 2), g));
  tpu_hlo_value_t az = tpu_emit_unary(b, "stablehlo.abs", zeta);
  tpu_hlo_value_t root = tpu_emit_unary(b, "stablehlo.sqrt", tpu_emit_add(b, one, tpu_emit_mul(b, zeta, zeta)));
  /* for a huge zeta, zeta^2 overflows: t = 1 / (2 |zeta|) */
  root = tpu_emit_select(b, tpu_emit_compare(b, "GT", az, tpu_emit_splat(b, az, 1e15)), az, root);
  tpu_hlo_value_t t = tpu_emit_div(b, one, tpu_emit_add(b, az, root));
  t = tpu_emit_select(b, tpu_emit_compare(b, "LT", zeta, tpu_emit_splat(b, zeta, 0)),
                      tpu_emit_unary(b, "stablehlo.negate", t), t);
  tpu_hlo_value_t c = tpu_emit_div(b, one, tpu_emit_unary(b, "stablehlo.sqrt", tpu_emit_add(b, one, tpu_emit_mul(b, t, t))));
  *t_out = tpu_emit_select(b, skip, tpu_emit_splat(b, alpha, 0), t);
  *c_out = tpu_emit_select(b, skip, one, c);
  *s_out = tpu_emit_select(b, skip, tpu_emit_splat(b, alpha, 0), tpu_emit_mul(b, c, t));
}

/* Columns p, q of x [B, R, C] replaced by c x_p - s x_q and s x_p + c x_q
 * (c, s [B]). */
static tpu_hlo_value_t rotate_columns(tpu_hlo_builder_t* b, tpu_hlo_value_t x, tpu_hlo_value_t p, tpu_hlo_value_t q,
                                      tpu_hlo_value_t c, tpu_hlo_value_t s) {
  tpu_hlo_value_t xp = column(b, x, p), xq = column(b, x, q);
  tpu_hlo_type_t ct = tpu_hlo_value_type(b, xp);
  tpu_hlo_value_t cc = spread(b, c, ct), ss = spread(b, s, ct);
  tpu_hlo_value_t np = tpu_emit_sub(b, tpu_emit_mul(b, cc, xp), tpu_emit_mul(b, ss, xq));
  tpu_hlo_value_t nq = tpu_emit_add(b, tpu_emit_mul(b, ss, xp), tpu_emit_mul(b, cc, xq));
  return set_column(b, set_column(b, x, p, np), q, nq);
}

static tpu_hlo_value_t transpose2(tpu_hlo_builder_t* b, tpu_hlo_value_t x) {
  const int64_t perm[3] = {0, 2, 1};
  return tpu_emit_transpose(b, x, perm);
}

typedef struct {
  int64_t n;
  double tol;
  bool symmetric; /* two-sided (eigh) rather than one-sided (svd) */
} jacobi_arg_t;

/* One pair of a Jacobi sweep on {X, V, changed}: one-sided (X [B, m, n],
 * columns p and q made orthogonal: Hestenes) or two-sided (X symmetric
 * [B, n, n], X[p, q] zeroed: J^T X J); V accumulates the rotations. A pair
 * already orthogonal to tol (|gamma| <= tol sqrt(alpha beta)) is left. */
static void jacobi_step(tpu_hlo_builder_t* b, tpu_hlo_value_t t, tpu_hlo_value_t* st, const void* arg) {
  const jacobi_arg_t* a = arg;
  tpu_hlo_value_t X = st[0], V = st[1];
  tpu_hlo_value_t p, q;
  pair_of(b, t, a->n, &p, &q);
  tpu_hlo_value_t alpha, beta, gamma;
  if (a->symmetric) {
    tpu_hlo_value_t rp = row(b, X, p), rq = row(b, X, q);
    alpha = element(b, rp, p), beta = element(b, rq, q), gamma = element(b, rp, q);
  } else {
    tpu_hlo_value_t xp = column(b, X, p), xq = column(b, X, q);
    alpha = sum_dim(b, tpu_emit_mul(b, xp, xp), 1);
    beta = sum_dim(b, tpu_emit_mul(b, xq, xq), 1);
    gamma = sum_dim(b, tpu_emit_mul(b, xp, xq), 1);
  }
  tpu_hlo_value_t scale = tpu_emit_unary(b, "stablehlo.sqrt", tpu_emit_unary(b, "stablehlo.abs", tpu_emit_mul(b, alpha, beta)));
  tpu_hlo_value_t ag = tpu_emit_unary(b, "stablehlo.abs", gamma);
  tpu_hlo_value_t small = tpu_emit_compare(b, "LE", ag, tpu_emit_mul(b, tpu_emit_splat(b, scale, a->tol), scale));
  /* NaN never rotates (and never converges: the sweep limit stops it) */
  tpu_hlo_value_t skip = tpu_emit_binary(b, "stablehlo.or", small,
                                         tpu_emit_compare(b, "EQ", ag, tpu_emit_splat(b, ag, 0)));
  tpu_hlo_value_t c, s, tt;
  rotation(b, alpha, beta, gamma, skip, &c, &s, &tt);
  if (a->symmetric) {
    X = rotate_columns(b, X, p, q, c, s);
    X = transpose2(b, rotate_columns(b, transpose2(b, X), p, q, c, s));
    /* the zeroed pair exactly 0 */
    tpu_hlo_type_t xt = tpu_hlo_value_type(b, X), i3 = xt;
    i3.dtype = TPU_DTYPE_INT64;
    tpu_hlo_value_t r3 = tpu_emit_iota(b, &i3, 1), c3 = tpu_emit_iota(b, &i3, 2);
    tpu_hlo_value_t p3 = tpu_emit_broadcast_to(b, p, &i3), q3 = tpu_emit_broadcast_to(b, q, &i3);
    tpu_hlo_value_t at = tpu_emit_binary(b, "stablehlo.or",
                                         and2(b, tpu_emit_compare(b, "EQ", r3, p3), tpu_emit_compare(b, "EQ", c3, q3)),
                                         and2(b, tpu_emit_compare(b, "EQ", r3, q3), tpu_emit_compare(b, "EQ", c3, p3)));
    X = tpu_emit_select(b, and2(b, at, not1(b, spread(b, skip, xt))), tpu_emit_const_like(b, &xt, 0), X);
    /* the new diagonal pair as app - t apq and aqq + t apq: one rounding
     * each, where rotating rows and columns would accumulate several */
    tpu_hlo_value_t tg = tpu_emit_mul(b, tt, gamma);
    tpu_hlo_value_t np = spread(b, tpu_emit_sub(b, alpha, tg), xt), nq = spread(b, tpu_emit_add(b, beta, tg), xt);
    X = tpu_emit_select(b, and2(b, and2(b, tpu_emit_compare(b, "EQ", r3, p3), tpu_emit_compare(b, "EQ", c3, p3)),
                                not1(b, spread(b, skip, xt))), np, X);
    X = tpu_emit_select(b, and2(b, and2(b, tpu_emit_compare(b, "EQ", r3, q3), tpu_emit_compare(b, "EQ", c3, q3)),
                                not1(b, spread(b, skip, xt))), nq, X);
  } else {
    X = rotate_columns(b, X, p, q, c, s);
  }
  st[0] = X;
  st[1] = rotate_columns(b, V, p, q, c, s);
  tpu_hlo_type_t bt = tpu_hlo_value_type(b, skip);
  int64_t d0 = 0;
  tpu_hlo_value_t any = tpu_emit_reduce(b, tpu_emit_convert(b, not1(b, skip), TPU_DTYPE_INT32),
                                        tpu_emit_const(b, TPU_DTYPE_INT32, 0), &d0, 1, "stablehlo.maximum");
  (void)bt;
  st[2] = tpu_emit_binary(b, "stablehlo.or", st[2], tpu_emit_compare(b, "NE", any, tpu_emit_const(b, TPU_DTYPE_INT32, 0)));
}

/* Sweeps of Jacobi pairs until one changes nothing (at most 40). Returns
 * X and V (V starts as the n x n identity). */
static void jacobi(tpu_hlo_builder_t* b, tpu_hlo_value_t* X, tpu_hlo_value_t* V, bool symmetric) {
  tpu_hlo_type_t t = tpu_hlo_value_type(b, *X);
  int64_t B = t.dims[0], m = t.dims[1], n = t.dims[2];
  tpu_hlo_type_t vt = type3(t.dtype, B, n, n), i3 = vt;
  i3.dtype = TPU_DTYPE_INT64;
  *V = tpu_emit_select(b, tpu_emit_compare(b, "EQ", tpu_emit_iota(b, &i3, 1), tpu_emit_iota(b, &i3, 2)),
                       tpu_emit_const_like(b, &vt, 1), tpu_emit_const_like(b, &vt, 0));
  int64_t pairs = n * (n - 1) / 2;
  if (pairs == 0) return;
  double eps = t.dtype == TPU_DTYPE_FLOAT64 ? 2.220446049250313e-16 : 1.1920928955078125e-07;
  jacobi_arg_t arg = {n, eps * (symmetric ? 1.0 : __builtin_sqrt((double)m)), symmetric};
  /* outer while: {X, V, changed, sweep} */
  tpu_hlo_type_t types[4] = {t, vt, tpu_hlo_type_scalar(TPU_DTYPE_BOOL), tpu_hlo_type_scalar(TPU_DTYPE_INT64)};
  tpu_hlo_value_t init[4] = {*X, *V, tpu_emit_const(b, TPU_DTYPE_BOOL, 1), i64(b, 0)}, s[4];
  tpu_hlo_region_op_begin(b, "stablehlo.while", init, 4, types, 4, NULL);
  tpu_hlo_block_begin(b, types, 4, s);
  tpu_hlo_value_t more = and2(b, s[2], tpu_emit_compare(b, "LT", s[3], i64(b, 40)));
  tpu_hlo_block_return(b, &more, 1);
  tpu_hlo_block_begin(b, types, 4, s);
  tpu_hlo_value_t inner[3] = {s[0], s[1], tpu_emit_const(b, TPU_DTYPE_BOOL, 0)};
  tpu_emit_for_loop(b, 0, pairs, 1, inner, 3, jacobi_step, &arg);
  tpu_hlo_value_t next[4] = {inner[0], inner[1], inner[2], tpu_emit_add(b, s[3], i64(b, 1))};
  tpu_hlo_block_return(b, next, 4);
  tpu_hlo_value_t out[4];
  tpu_hlo_region_op_end(b, out);
  *X = out[0], *V = out[1];
}

/* sign(x) with sign(0) = 1, as a multiplier. */
static tpu_hlo_value_t sign1(tpu_hlo_builder_t* b, tpu_hlo_value_t x) {
  return tpu_emit_select(b, tpu_emit_compare(b, "LT", x, tpu_emit_splat(b, x, 0)), tpu_emit_splat(b, x, -1),
                         tpu_emit_splat(b, x, 1));
}

/* _linalg_svd(A, full_matrices=False, compute_uv=True, *, driver=None) ->
 * (U, S, Vh): one-sided Jacobi (Hestenes) on A (A^T when it is wide)
 * accumulating V; S the column norms, sorted descending; U from a
 * Householder QR of the rotated columns (their directions, and in full
 * mode the orthonormal completion), signs fixed by R's diagonal. U and V
 * are unique up to signs: CPU's (gesdd) may differ, as CUDA's do. */
static tpu_status_t lower_linalg_svd(tpu_lower_ctx_t* ctx) {
  tpu_status_t st = check_matrix(ctx, 0, "svd");
  if (st) return st;
  if (tpu_lower_arg(ctx, 3)->kind == TPU_ARG_STRING)
    return tpu_lower_decline(ctx, "svd with a driver (CPU refuses it)");
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  bool compute_uv = flag(ctx, 2, true), full = flag(ctx, 1, false);
  int64_t B, m, n;
  tpu_hlo_value_t A = matrices(ctx, 0, &B, &m, &n);
  tpu_hlo_type_t ut = tpu_lower_output_type(ctx, 0), vt = tpu_lower_output_type(ctx, 2);
  if (B * m * n == 0) {
    /* CPU: U and Vh the identity's first columns (full mode), S empty */
    for (int i = 0; i < 3; i += 2) {
      tpu_hlo_type_t ot = tpu_lower_output_type(ctx, i);
      if (numel_of(&ot) == 0) {
        set_zero_output(ctx, i);
        continue;
      }
      tpu_hlo_type_t i3 = ot;
      i3.dtype = TPU_DTYPE_INT64;
      tpu_lower_set_output(ctx, i, tpu_emit_select(b, tpu_emit_compare(b, "EQ", tpu_emit_iota(b, &i3, ot.rank - 2),
                                                                       tpu_emit_iota(b, &i3, ot.rank - 1)),
                                                   tpu_emit_const_like(b, &ot, 1), tpu_emit_const_like(b, &ot, 0)));
    }
    set_zero_output(ctx, 1);
    return NULL;
  }
  bool wide = m < n;
  tpu_hlo_value_t X = wide ? transpose2(b, A) : A, V;
  int64_t rows = wide ? n : m, cols = wide ? m : n;
  jacobi(b, &X, &V, false);
  tpu_hlo_value_t sig = tpu_emit_unary(b, "stablehlo.sqrt", sum_dim(b, tpu_emit_mul(b, X, X), 1)); /* [B, cols] */
  tpu_hlo_value_t sorted, order;
  tpu_emit_sort(b, sig, 1, TPU_SORT_DESCENDING, &sorted, &order);
  set_output(ctx, 1, sorted);
  if (!compute_uv) {
    set_zero_output(ctx, 0), set_zero_output(ctx, 2);
    return NULL;
  }
  X = gather_columns(b, X, order);
  V = gather_columns(b, V, order);
  /* left vectors of the (possibly transposed) problem: rows x (full ? rows : cols) */
  qr_t f = geqrf(b, X);
  int64_t qcols = full ? rows : cols;
  tpu_hlo_value_t Q = orgqr(b, f.a, f.tau, qcols);
  tpu_hlo_value_t sg = sign1(b, diagonal_of(b, f.a, cols)); /* [B, cols] */
  if (qcols > cols) {
    int64_t lo[2] = {0, 0}, hi[2] = {0, qcols - cols};
    sg = tpu_emit_pad(b, sg, tpu_emit_const(b, tpu_hlo_value_type(b, sg).dtype, 1), lo, hi, NULL);
  }
  tpu_hlo_type_t qt = tpu_hlo_value_type(b, Q);
  Q = tpu_emit_mul(b, Q, tpu_emit_broadcast_to(b, reshape3(b, sg, B, 1, qcols), &qt));
  (void)ut, (void)vt;
  if (!wide) {
    set_output(ctx, 0, Q);
    set_output(ctx, 2, transpose2(b, V));
  } else {
    set_output(ctx, 0, V);
    set_output(ctx, 2, transpose2(b, Q));
  }
  return NULL;
}

/* _linalg_eigh(A, UPLO="L", compute_v=True) -> (eigenvalues, eigenvectors):
 * the triangle UPLO names mirrored to a symmetric matrix, two-sided cyclic
 * Jacobi, eigenvalues ascending with their vectors (signs may differ from
 * CPU's syevd, as CUDA's do). */
static tpu_status_t lower_linalg_eigh(tpu_lower_ctx_t* ctx) {
  tpu_status_t st = check_matrix(ctx, 0, "eigh");
  if (st) return st;
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  const tpu_lower_arg_t* uplo = tpu_lower_arg(ctx, 1);
  bool upper = uplo->kind == TPU_ARG_STRING && (uplo->str[0] == 'U' || uplo->str[0] == 'u');
  bool compute_v = flag(ctx, 2, true);
  int64_t B, m, n;
  tpu_hlo_value_t A = matrices(ctx, 0, &B, &m, &n);
  if (m != n) return tpu_lower_decline(ctx, "eigh of a non-square matrix");
  if (B * n == 0) {
    set_zero_output(ctx, 0), set_zero_output(ctx, 1);
    return NULL;
  }
  tpu_hlo_type_t t = tpu_hlo_value_type(b, A), i3 = t;
  i3.dtype = TPU_DTYPE_INT64;
  tpu_hlo_value_t r3 = tpu_emit_iota(b, &i3, 1), c3 = tpu_emit_iota(b, &i3, 2);
  tpu_hlo_value_t mine = tpu_emit_compare(b, upper ? "LE" : "GE", r3, c3);
  tpu_hlo_value_t X = tpu_emit_select(b, mine, A, transpose2(b, A)), V;
  jacobi(b, &X, &V, true);
  tpu_hlo_value_t w = diagonal_of(b, X, n), sorted, order;
  tpu_emit_sort(b, w, 1, TPU_SORT_ASCENDING, &sorted, &order);
  set_output(ctx, 0, sorted);
  if (!compute_v) set_zero_output(ctx, 1);
  else set_output(ctx, 1, gather_columns(b, V, order));
  return NULL;
}


/* ---- Cholesky solves ---- */

/* _cholesky_solve_helper(B, L, upper) -> X with A X = B, A = L L^T
 * (lower) or U^T U (upper): two triangular solves (potrs). The operands
 * arrive broadcast by cholesky_solve. */
static tpu_status_t lower_cholesky_solve_helper(tpu_lower_ctx_t* ctx) {
  tpu_status_t st = check_matrix(ctx, 0, "cholesky_solve");
  if (!st) st = check_matrix(ctx, 1, "cholesky_solve");
  if (st) return st;
  tpu_hlo_type_t out = tpu_lower_output_type(ctx, 0);
  if (tpu_lower_arg(ctx, 0)->type.dtype != tpu_lower_arg(ctx, 1)->type.dtype || out.rank < 2)
    return tpu_lower_decline(ctx, "cholesky_solve of two dtypes");
  if (numel_of(&out) == 0) {
    set_zero_output(ctx, 0);
    return NULL;
  }
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  int64_t B;
  tpu_hlo_value_t rhs = batched(ctx, 0, &out, &B), l = batched(ctx, 1, &out, &B);
  bool upper = flag(ctx, 2, false);
  /* lower: L Y = B, L^T X = Y; upper: U^T Y = B, U X = Y */
  tpu_hlo_value_t y = tpu_emit_triangular_solve(b, l, rhs, true, !upper, false, upper);
  set_output(ctx, 0, tpu_emit_triangular_solve(b, l, y, true, !upper, false, !upper));
  return NULL;
}

/* cholesky_inverse(L, upper) -> A^-1 for A = L L^T (U^T U): the identity
 * solved as _cholesky_solve_helper, then the triangle LAPACK's potri
 * computes (lower, or upper) mirrored into the other, so the result is
 * exactly symmetric as CPU's. */
static tpu_status_t lower_cholesky_inverse(tpu_lower_ctx_t* ctx) {
  tpu_status_t st = check_matrix(ctx, 0, "cholesky_inverse");
  if (st) return st;
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  int64_t B, m, n;
  tpu_hlo_value_t l = matrices(ctx, 0, &B, &m, &n);
  if (m != n) return tpu_lower_decline(ctx, "cholesky_inverse of a non-square matrix");
  if (B * n == 0) {
    set_zero_output(ctx, 0);
    return NULL;
  }
  bool upper = flag(ctx, 1, false);
  tpu_hlo_type_t t = tpu_hlo_value_type(b, l), i3 = t;
  i3.dtype = TPU_DTYPE_INT64;
  tpu_hlo_value_t r3 = tpu_emit_iota(b, &i3, 1), c3 = tpu_emit_iota(b, &i3, 2);
  tpu_hlo_value_t eye = tpu_emit_select(b, tpu_emit_compare(b, "EQ", r3, c3), tpu_emit_const_like(b, &t, 1),
                                        tpu_emit_const_like(b, &t, 0));
  tpu_hlo_value_t y = tpu_emit_triangular_solve(b, l, eye, true, !upper, false, upper);
  tpu_hlo_value_t x = tpu_emit_triangular_solve(b, l, y, true, !upper, false, !upper);
  tpu_hlo_value_t mine = tpu_emit_compare(b, upper ? "LE" : "GE", r3, c3);
  set_output(ctx, 0, tpu_emit_select(b, mine, x, transpose2(b, x)));
  return NULL;
}

const tpu_lowering_t tpu_lowerings_factor[] = {
    {"linalg_lu_factor_ex", lower_lu_factor_ex, 0},
    {"linalg_lu", lower_linalg_lu, 0},
    {"lu_unpack", lower_lu_unpack, 0},
    {"linalg_lu_solve", lower_lu_solve, 0},
    {"geqrf", lower_geqrf, 0},
    {"linalg_householder_product", lower_householder_product, 0},
    {"ormqr", lower_ormqr, 0},
    {"linalg_qr", lower_linalg_qr, 0},
    {"_linalg_svd", lower_linalg_svd, 0},
    {"_linalg_eigh", lower_linalg_eigh, 0},
    {"_cholesky_solve_helper", lower_cholesky_solve_helper, 0},
    {"cholesky_inverse", lower_cholesky_inverse, 0},
};
const size_t tpu_lowerings_factor_count = sizeof tpu_lowerings_factor / sizeof tpu_lowerings_factor[0];
