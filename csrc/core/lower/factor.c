/* factor family of the lowering table (see lowering.h): the triangular
 * factorizations XLA has no HLO for, written as StableHLO while loops over
 * the columns, so they run on the device (the CPU plugin has no LAPACK
 * custom calls, and neither does a TPU). Each follows the LAPACK routine
 * CPU PyTorch calls, step for step where the step decides a result (which
 * row pivots), so an LU, which is not unique mathematically, is CPU's, not
 * just an equivalent one. The orthogonal factorizations (QR, SVD, eigh)
 * are orthogonal.c.
 *
 *   LU, partial pivoting (getrf): linalg_lu_factor_ex, linalg_lu,
 *     lu_unpack, linalg_lu_solve. det, slogdet, solve and inv are CPU's
 *     compositions of these (csrc/torch/linalg_ops.cpp): which matrix CPU
 *     factorizes (A or A^T) depends on A's layout, which a lowering does
 *     not see.
 *   Cholesky solves (potrs, potri): _cholesky_solve_helper,
 *     cholesky_inverse (the factorization itself is stablehlo.cholesky,
 *     linalg.c).
 *
 * Matrices are read as [B, m, n] (matrix.h); complex and half dtypes are
 * declined (CPU has no half LAPACK either: the fallback raises its error),
 * as is check_errors=True (CPU raises by reading info; the fallback
 * does). */
#include "matrix.h"

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
    {"_cholesky_solve_helper", lower_cholesky_solve_helper, 0},
    {"cholesky_inverse", lower_cholesky_inverse, 0},
};
const size_t tpu_lowerings_factor_count = sizeof tpu_lowerings_factor / sizeof tpu_lowerings_factor[0];
