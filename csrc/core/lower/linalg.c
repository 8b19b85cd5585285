/* Linear-algebra family: bmm, addmm, baddbmm, addbmm, dot, vdot, mv,
 * addmv, addr; the solvers XLA has as HLO (triangular_solve,
 * cholesky): linalg_solve_triangular, triangular_solve,
 * linalg_cholesky_ex. (mm is in basic.c; matmul, linear, einsum,
 * tensordot, outer decompose into these before reaching the backend.)
 *
 * Half types are converted to float32, multiplied and combined with
 * beta/alpha there, and rounded once, as PyTorch's CPU kernels do. */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "emit.h"
#include "lowering.h"

static tpu_dtype_t acc_of(tpu_dtype_t d) {
  return d == TPU_DTYPE_FLOAT16 || d == TPU_DTYPE_BFLOAT16 ? TPU_DTYPE_FLOAT32 : d;
}

/* The product's operands l and r: CPU refuses two dtypes ("expected m1
 * and m2 to have the same dtype"), so such a call declines to the fallback,
 * whose CPU kernel raises that error, instead of computing a promotion. */
static tpu_status_t check_dtype(tpu_lower_ctx_t* ctx, int l, int r) {
  tpu_dtype_t d = tpu_lower_output_type(ctx, 0).dtype;
  if (d == TPU_DTYPE_BOOL || tpu_dtype_is_complex(d))
    return tpu_lower_decline(ctx, "%s matmul", tpu_dtype_name(d));
  tpu_dtype_t dl = tpu_lower_arg(ctx, l)->type.dtype, dr = tpu_lower_arg(ctx, r)->type.dtype;
  if (dl != dr)
    return tpu_lower_decline(ctx, "matmul of %s and %s", tpu_dtype_name(dl), tpu_dtype_name(dr));
  return NULL;
}

/* stablehlo.dot_general of tensor args l and r (converted to the output's
 * accumulation dtype) with the given batching/contracting dims; the result
 * is in that accumulation dtype. */
static tpu_hlo_value_t dot(tpu_lower_ctx_t* ctx, int l, int r, const char* batch_l,
                           const char* batch_r, const char* contract_l, const char* contract_r) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_dtype_t acc = acc_of(tpu_lower_output_type(ctx, 0).dtype);
  tpu_hlo_value_t ops[2] = {tpu_emit_convert(b, tpu_lower_tensor(ctx, l), acc),
                            tpu_emit_convert(b, tpu_lower_tensor(ctx, r), acc)};
  tpu_hlo_type_t lt = tpu_hlo_value_type(b, ops[0]), rt = tpu_hlo_value_type(b, ops[1]);
  /* Result dims: batch, then lhs free, then rhs free (dot_general's order). */
  tpu_hlo_type_t out = {.dtype = acc};
  bool used_l[TPU_HLO_MAX_RANK] = {0}, used_r[TPU_HLO_MAX_RANK] = {0};
  for (const char* p = batch_l; *p; p++)
    if (*p >= '0' && *p <= '9') used_l[*p - '0'] = true, out.dims[out.rank++] = lt.dims[*p - '0'];
  for (const char* p = batch_r; *p; p++)
    if (*p >= '0' && *p <= '9') used_r[*p - '0'] = true;
  for (const char* p = contract_l; *p; p++)
    if (*p >= '0' && *p <= '9') used_l[*p - '0'] = true;
  for (const char* p = contract_r; *p; p++)
    if (*p >= '0' && *p <= '9') used_r[*p - '0'] = true;
  for (int d = 0; d < lt.rank; d++)
    if (!used_l[d]) out.dims[out.rank++] = lt.dims[d];
  for (int d = 0; d < rt.rank; d++)
    if (!used_r[d]) out.dims[out.rank++] = rt.dims[d];
  char attrs[256];
  snprintf(attrs, sizeof attrs,
           "dot_dimension_numbers = #stablehlo.dot<lhs_batching_dimensions = [%s], "
           "rhs_batching_dimensions = [%s], lhs_contracting_dimensions = [%s], "
           "rhs_contracting_dimensions = [%s]>",
           batch_l, batch_r, contract_l, contract_r);
  return tpu_hlo_op(b, "stablehlo.dot_general", ops, 2, out, attrs);
}

/* The result of a plain product: rounded to the output dtype.
 *
 * positive_zeros: a sum of one product (contraction size 1), which XLA
 * turns into a plain multiply, keeps a product's -0.0; CPU's kernels for
 * dot, mv and the small or batched bmm add it to a zeroed accumulator,
 * giving +0.0 (its gemm, used by mm and a large single bmm, gives -0.0 as
 * XLA does). signbit, copysign and atan2 turn the sign into another value.
 * Longer sums start from +0.0 in XLA as on CPU, and their dots are left
 * alone: anything after a dot changes how XLA fuses it. */
static tpu_status_t set_product(tpu_lower_ctx_t* ctx, tpu_hlo_value_t p, bool positive_zeros) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_type_t out = tpu_lower_output_type(ctx, 0);
  if (positive_zeros) p = tpu_emit_positive_zeros(b, p);
  p = tpu_emit_convert(b, p, out.dtype);
  tpu_lower_set_output(ctx, 0, tpu_emit_reshape(b, p, out.dims, out.rank));
  return NULL;
}

/* beta * self + alpha * product, with self broadcast to the output. Like
 * PyTorch, beta == 0 ignores self entirely (NaN/inf in it do not leak).
 * beta and alpha are run-time Scalars at args beta_i and beta_i + 1 (or
 * absent: 1). */
static tpu_status_t set_scaled_sum(tpu_lower_ctx_t* ctx, tpu_hlo_value_t product, int beta_i) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_type_t out = tpu_lower_output_type(ctx, 0);
  tpu_hlo_type_t acc = out;
  acc.dtype = acc_of(out.dtype);
  product = tpu_emit_reshape(b, product, acc.dims, acc.rank);
  tpu_hlo_value_t self = tpu_emit_cast_to(b, tpu_lower_tensor(ctx, 0), &acc);
  if (tpu_lower_arg(ctx, beta_i + 1)->kind != TPU_ARG_NONE) {
    tpu_hlo_value_t alpha = tpu_emit_broadcast_to(b, tpu_lower_scalar(ctx, beta_i + 1, acc.dtype), &acc);
    product = tpu_emit_binary(b, "stablehlo.multiply", alpha, product);
  }
  if (tpu_lower_arg(ctx, beta_i)->kind != TPU_ARG_NONE) {
    tpu_hlo_value_t beta = tpu_emit_broadcast_to(b, tpu_lower_scalar(ctx, beta_i, acc.dtype), &acc);
    tpu_hlo_value_t zero = tpu_emit_const_like(b, &acc, 0);
    self = tpu_emit_select(b, tpu_emit_compare(b, "EQ", beta, zero), zero,
                           tpu_emit_binary(b, "stablehlo.multiply", beta, self));
  }
  tpu_hlo_value_t r = tpu_emit_binary(b, "stablehlo.add", self, product);
  tpu_lower_set_output(ctx, 0, tpu_emit_convert(b, r, out.dtype));
  return NULL;
}

/* Index of beta in addmm-like schemas: after the 3 tensors, or one later in
 * the .dtype overloads (out_dtype comes first). */
static int beta_index(tpu_lower_ctx_t* ctx) {
  /* beta is a Scalar; anything else there is out_dtype (a DTYPE, or an INT
   * from an engine that reads ScalarType as its schema's int). */
  tpu_arg_kind_t k = tpu_lower_arg(ctx, 3)->kind;
  return k == TPU_ARG_DTYPE || k == TPU_ARG_INT ? 4 : 3;
}

/* bmm(self, mat2[, out_dtype]): [b,n,m] x [b,m,p]. */
static tpu_status_t lower_bmm(tpu_lower_ctx_t* ctx) {
  tpu_status_t s = check_dtype(ctx, 0, 1);
  if (s) return s;
  /* CPU: a single [n,1] x [1,p] of n*p >= 400 goes to gemm (-0.0 kept),
   * the rest to a loop summing from zero. */
  const tpu_hlo_type_t* l = &tpu_lower_arg(ctx, 0)->type;
  const tpu_hlo_type_t* r = &tpu_lower_arg(ctx, 1)->type;
  bool one = l->rank == 3 && r->rank == 3 && l->dims[2] == 1;
  bool gemm = one && l->dims[0] == 1 &&
              (l->dims[1] < 0 || r->dims[2] < 0 || l->dims[1] * r->dims[2] >= 400);
  /* CPU's half-type gemm sums from +0.0 too. */
  tpu_dtype_t d = tpu_lower_output_type(ctx, 0).dtype;
  bool half = d == TPU_DTYPE_BFLOAT16 || d == TPU_DTYPE_FLOAT16;
  return set_product(ctx, dot(ctx, 0, 1, "0", "0", "2", "1"), one && (!gemm || half));
}

/* The data word of a scaled product's row: dot_general's dims for args 1
 * and 2, and beta's index, or 0 where an out_dtype overload moves it
 * (beta_index). */
typedef struct {
  const char *batch_l, *batch_r, *contract_l, *contract_r;
  int beta;
} scaled_product_t;

/* addmm(self, mat1, mat2[, out_dtype], *, beta, alpha). */
static const scaled_product_t kAddmm = {"", "", "1", "0"};
/* baddbmm(self, batch1, batch2[, out_dtype], *, beta, alpha). */
static const scaled_product_t kBaddbmm = {"0", "0", "2", "1"};
/* addbmm(self, batch1, batch2, *, beta, alpha): the batch sum is one more
 * contracting dim. */
static const scaled_product_t kAddbmm = {"", "", "0, 2", "0, 1"};
/* addmv(self, mat, vec, *, beta, alpha). */
static const scaled_product_t kAddmv = {"", "", "1", "0", 3};
/* addr(self, vec1, vec2, *, beta, alpha): the outer product is a
 * dot_general without contracting dims. */
static const scaled_product_t kAddr = {"", "", "", "", 3};

/* beta * self + alpha * (arg 1 x arg 2), as the row's scaled_product_t. */
static tpu_status_t lower_scaled_product(tpu_lower_ctx_t* ctx) {
  const scaled_product_t* p = (const scaled_product_t*)tpu_lower_data(ctx);
  tpu_status_t s = check_dtype(ctx, 1, 2);
  if (s) return s;
  return set_scaled_sum(ctx, dot(ctx, 1, 2, p->batch_l, p->batch_r, p->contract_l, p->contract_r),
                        p->beta ? p->beta : beta_index(ctx));
}

/* dot / vdot(self, other): 1-D . 1-D (vdot conjugates self, a no-op for
 * the real dtypes lowered here), and mv(self, vec): [n,m] x [m]. The row's
 * data word is self's rank; its last dim is contracted. */
static tpu_status_t lower_vector_product(tpu_lower_ctx_t* ctx) {
  int rank = (int)tpu_lower_data(ctx);
  tpu_status_t s = check_dtype(ctx, 0, 1);
  if (s) return s;
  const tpu_hlo_type_t* l = &tpu_lower_arg(ctx, 0)->type;
  return set_product(ctx, dot(ctx, 0, 1, "", "", rank == 1 ? "0" : "1", "0"),
                     l->rank == rank && l->dims[rank - 1] == 1);
}

/* ---- factorizations XLA has as HLO ---- */

static bool solver_dtype(tpu_dtype_t d) {
  return d == TPU_DTYPE_FLOAT32 || d == TPU_DTYPE_FLOAT64 || d == TPU_DTYPE_COMPLEX64 ||
         d == TPU_DTYPE_COMPLEX128;
}

static int64_t numel_of(const tpu_hlo_type_t* t) {
  int64_t n = 1;
  for (int d = 0; d < t->rank; d++) n *= t->dims[d];
  return n;
}

/* linalg_solve_triangular(A, B, *, upper, left, unitriangular): A X = B
 * (left) or X A = B, batch dims broadcast; stablehlo.triangular_solve
 * reads only A's triangle, as LAPACK's trsm does. Dtypes CPU refuses
 * (or two different ones) are declined: the fallback raises CPU's error. */
static tpu_status_t lower_linalg_solve_triangular(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_type_t out = tpu_lower_output_type(ctx, 0);
  const tpu_lower_arg_t *a = tpu_lower_arg(ctx, 0), *rhs = tpu_lower_arg(ctx, 1);
  if (a->kind != TPU_ARG_TENSOR || rhs->kind != TPU_ARG_TENSOR || a->type.dtype != rhs->type.dtype ||
      !solver_dtype(a->type.dtype) || out.dtype != a->type.dtype || out.rank < 2 ||
      a->type.rank < 2 || rhs->type.rank < 2)
    return tpu_lower_decline(ctx, "solve_triangular of %s and %s", tpu_dtype_name(a->type.dtype),
                             tpu_dtype_name(rhs->type.dtype));
  if (numel_of(&out) == 0) {
    tpu_lower_set_output(ctx, 0, tpu_emit_const_like(b, &out, 0));
    return NULL;
  }
  bool upper = tpu_lower_arg(ctx, 2)->i != 0;
  bool left = tpu_lower_arg(ctx, 3)->kind != TPU_ARG_BOOL || tpu_lower_arg(ctx, 3)->i != 0;
  bool unit = tpu_lower_arg(ctx, 4)->kind == TPU_ARG_BOOL && tpu_lower_arg(ctx, 4)->i != 0;
  tpu_lower_set_output(ctx, 0, tpu_emit_triangular_solve(b, tpu_lower_batched_matrix(ctx, 0, &out), tpu_lower_batched_matrix(ctx, 1, &out),
                                                left, !upper, unit, false));
  return NULL;
}

/* tpu_emit_triangular_solve(b, A, upper, transpose, unitriangular) -> (solution,
 * cloned_coefficient): A X = b (A^T X = b when transpose), batch dims
 * broadcast; the second output is A broadcast. */
static tpu_status_t lower_triangular_solve(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_type_t out = tpu_lower_output_type(ctx, 0), coeff = tpu_lower_output_type(ctx, 1);
  const tpu_lower_arg_t *rhs = tpu_lower_arg(ctx, 0), *a = tpu_lower_arg(ctx, 1);
  if (a->kind != TPU_ARG_TENSOR || rhs->kind != TPU_ARG_TENSOR || a->type.dtype != rhs->type.dtype ||
      !solver_dtype(a->type.dtype) || out.dtype != a->type.dtype || out.rank < 2 ||
      a->type.rank < 2 || rhs->type.rank < 2 || tpu_lower_num_outputs(ctx) != 2)
    return tpu_lower_decline(ctx, "triangular_solve of %s and %s", tpu_dtype_name(rhs->type.dtype),
                             tpu_dtype_name(a->type.dtype));
  tpu_hlo_value_t coefficient = tpu_lower_batched_matrix(ctx, 1, &out);
  if (numel_of(&out) == 0) {
    tpu_lower_set_output(ctx, 0, tpu_emit_const_like(b, &out, 0));
  } else {
    bool upper = tpu_lower_arg(ctx, 2)->kind != TPU_ARG_BOOL || tpu_lower_arg(ctx, 2)->i != 0;
    bool transpose = tpu_lower_arg(ctx, 3)->kind == TPU_ARG_BOOL && tpu_lower_arg(ctx, 3)->i != 0;
    bool unit = tpu_lower_arg(ctx, 4)->kind == TPU_ARG_BOOL && tpu_lower_arg(ctx, 4)->i != 0;
    tpu_lower_set_output(ctx, 0, tpu_emit_triangular_solve(b, coefficient, tpu_lower_batched_matrix(ctx, 0, &out), true,
                                                  !upper, unit, transpose));
  }
  tpu_lower_set_output(ctx, 1, tpu_emit_reshape(b, coefficient, coeff.dims, coeff.rank));
  return NULL;
}

/* LAPACK's potrf info for A [..., n, n]: the first j (1-based) whose
 * pivot is not > 0 (NaN included), else 0, as int32 [...]. XLA's
 * cholesky fills a failed factorization with NaN, so the pivots are
 * recomputed: n steps of Gaussian elimination without pivoting (the
 * pivots of a Cholesky factorization are the squares of L's diagonal). */
static tpu_hlo_value_t cholesky_info(tpu_hlo_builder_t* b, tpu_hlo_value_t a) {
  tpu_hlo_type_t t = tpu_hlo_value_type(b, a);
  int r = t.rank;
  int64_t n = t.dims[r - 1];
  tpu_hlo_type_t bt = t;  /* the batch shape */
  bt.rank = r - 2;
  bt.dtype = TPU_DTYPE_INT64;
  tpu_hlo_value_t info = tpu_emit_const_like(b, &bt, 0);
  int64_t start[TPU_HLO_MAX_RANK] = {0}, limit[TPU_HLO_MAX_RANK], stride[TPU_HLO_MAX_RANK];
  for (int d = 0; d < r; d++) limit[d] = t.dims[d], stride[d] = 1;
  tpu_hlo_value_t s = a;
  for (int64_t j = 0; j < n; j++) {
    start[r - 2] = j, limit[r - 2] = j + 1, start[r - 1] = 0, limit[r - 1] = n;
    tpu_hlo_value_t row = tpu_emit_slice(b, s, start, limit, stride);
    start[r - 2] = 0, limit[r - 2] = n, start[r - 1] = j, limit[r - 1] = j + 1;
    tpu_hlo_value_t col = tpu_emit_slice(b, s, start, limit, stride);
    start[r - 2] = j, limit[r - 2] = j + 1;
    tpu_hlo_value_t pivot = tpu_emit_slice(b, s, start, limit, stride); /* [..., 1, 1] */
    tpu_hlo_value_t re = tpu_dtype_is_complex(t.dtype) ? tpu_emit_unary(b, "stablehlo.real", pivot) : pivot;
    tpu_hlo_type_t pt = tpu_hlo_value_type(b, re);
    tpu_hlo_value_t bad = tpu_emit_unary(b, "stablehlo.not",
                                         tpu_emit_compare(b, "GT", re, tpu_emit_const_like(b, &pt, 0)));
    bad = tpu_emit_reshape(b, bad, bt.dims, bt.rank);
    tpu_hlo_value_t first = tpu_emit_binary(
        b, "stablehlo.and", bad, tpu_emit_compare(b, "EQ", info, tpu_emit_const_like(b, &bt, 0)));
    info = tpu_emit_select(b, first, tpu_emit_const_like(b, &bt, (double)(j + 1)), info);
    if (j + 1 < n)
      s = tpu_emit_sub(b, s, tpu_emit_div(b, tpu_emit_mul(b, tpu_emit_broadcast_to(b, col, &t),
                                                          tpu_emit_broadcast_to(b, row, &t)),
                                          tpu_emit_broadcast_to(b, pivot, &t)));
  }
  return tpu_emit_convert(b, info, TPU_DTYPE_INT32);
}

/* linalg_cholesky_ex(A, *, upper, check_errors=False) -> (L, info):
 * stablehlo.cholesky, the other triangle zeroed (HLO leaves it
 * unspecified), and LAPACK's info (cholesky_info). Past 64 x 64 the info
 * steps would make a large program: declined, as is check_errors=True
 * (CPU raises by reading info; the fallback does). */
static tpu_status_t lower_linalg_cholesky_ex(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  const tpu_lower_arg_t* a = tpu_lower_arg(ctx, 0);
  tpu_hlo_type_t out = tpu_lower_output_type(ctx, 0), info_t = tpu_lower_output_type(ctx, 1);
  bool check = tpu_lower_arg(ctx, 2)->kind == TPU_ARG_BOOL && tpu_lower_arg(ctx, 2)->i != 0;
  if (a->kind != TPU_ARG_TENSOR || !solver_dtype(a->type.dtype) || a->type.rank < 2 || check ||
      out.dtype != a->type.dtype || info_t.dtype != TPU_DTYPE_INT32 ||
      tpu_lower_num_outputs(ctx) != 2 || out.dims[out.rank - 1] > 64)
    return tpu_lower_decline(ctx, "cholesky of %s", tpu_dtype_name(a->type.dtype));
  bool upper = tpu_lower_arg(ctx, 1)->kind == TPU_ARG_BOOL && tpu_lower_arg(ctx, 1)->i != 0;
  if (numel_of(&out) == 0) {
    tpu_lower_set_output(ctx, 0, tpu_emit_const_like(b, &out, 0));
    tpu_lower_set_output(ctx, 1, tpu_emit_const_like(b, &info_t, 0));
    return NULL;
  }
  tpu_hlo_value_t x = tpu_lower_tensor(ctx, 0);
  tpu_hlo_value_t l = tpu_hlo_op(b, "stablehlo.cholesky", &x, 1, out, upper ? "lower = false" : "lower = true");
  tpu_hlo_type_t it = out;
  it.dtype = TPU_DTYPE_INT64;
  tpu_hlo_value_t keep = tpu_emit_compare(b, upper ? "LE" : "GE", tpu_emit_iota(b, &it, out.rank - 2),
                                          tpu_emit_iota(b, &it, out.rank - 1));
  tpu_lower_set_output(ctx, 0, tpu_emit_select(b, keep, l, tpu_emit_const_like(b, &out, 0)));
  tpu_lower_set_output(ctx, 1, tpu_emit_reshape(b, cholesky_info(b, x), info_t.dims, info_t.rank));
  return NULL;
}

const tpu_lowering_t tpu_lowerings_linalg[] = {
    {"bmm", lower_bmm, 0},
    {"addmm", lower_scaled_product, 0, (intptr_t)&kAddmm},
    {"baddbmm", lower_scaled_product, 0, (intptr_t)&kBaddbmm},
    {"addbmm", lower_scaled_product, 0, (intptr_t)&kAddbmm},
    {"dot", lower_vector_product, 0, 1},
    {"vdot", lower_vector_product, 0, 1},
    {"mv", lower_vector_product, 0, 2},
    {"addmv", lower_scaled_product, 0, (intptr_t)&kAddmv},
    {"addr", lower_scaled_product, 0, (intptr_t)&kAddr},
    {"linalg_solve_triangular", lower_linalg_solve_triangular, 0},
    {"triangular_solve", lower_triangular_solve, 0},
    {"linalg_cholesky_ex", lower_linalg_cholesky_ex, 0},
};
const size_t tpu_lowerings_linalg_count = sizeof tpu_lowerings_linalg / sizeof tpu_lowerings_linalg[0];
