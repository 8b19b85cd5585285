/* orthogonal family of the lowering table (see lowering.h): the
 * factorizations into orthogonal matrices, as StableHLO while loops like
 * factor.c's LU (neither the CPU plugin nor a TPU has LAPACK):
 *
 *   Householder QR (geqrf / dgeqr2): geqrf, linalg_householder_product
 *     (orgqr), ormqr, linalg_qr, step for step as LAPACK where the step
 *     decides a result (the sign of a reflector), so Q and R, which are not
 *     unique mathematically, are CPU's.
 *   Jacobi: _linalg_svd (one-sided, then QR for U), _linalg_eigh
 *     (two-sided). Singular / eigen vectors are unique only up to sign;
 *     theirs may differ from CPU's LAPACK, as CUDA's do.
 *
 * Matrices are read as [B, m, n] (matrix.h); complex and half dtypes are
 * declined, as in factor.c. */
#include "matrix.h"

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
  int64_t B = t.dims[0], C = t.dims[2];
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
  int64_t d0 = 0;
  tpu_hlo_value_t any = tpu_emit_reduce(b, tpu_emit_convert(b, not1(b, skip), TPU_DTYPE_INT32),
                                        tpu_emit_const(b, TPU_DTYPE_INT32, 0), &d0, 1, "stablehlo.maximum");
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

const tpu_lowering_t tpu_lowerings_orthogonal[] = {
    {"geqrf", lower_geqrf, 0},
    {"linalg_householder_product", lower_householder_product, 0},
    {"ormqr", lower_ormqr, 0},
    {"linalg_qr", lower_linalg_qr, 0},
    {"_linalg_svd", lower_linalg_svd, 0},
    {"_linalg_eigh", lower_linalg_eigh, 0},
};
const size_t tpu_lowerings_orthogonal_count =
    sizeof tpu_lowerings_orthogonal / sizeof tpu_lowerings_orthogonal[0];
