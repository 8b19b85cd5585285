/* Linear-algebra family: bmm, addmm, baddbmm, addbmm, dot, vdot, mv,
 * addmv, addr, _unsafe_view. (mm is in basic.c; matmul, linear, einsum,
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
  return set_product(ctx, dot(ctx, 0, 1, "0", "0", "2", "1"), one && !gemm);
}

/* addmm(self, mat1, mat2[, out_dtype], *, beta, alpha). */
static tpu_status_t lower_addmm(tpu_lower_ctx_t* ctx) {
  tpu_status_t s = check_dtype(ctx, 1, 2);
  if (s) return s;
  return set_scaled_sum(ctx, dot(ctx, 1, 2, "", "", "1", "0"), beta_index(ctx));
}

/* baddbmm(self, batch1, batch2[, out_dtype], *, beta, alpha). */
static tpu_status_t lower_baddbmm(tpu_lower_ctx_t* ctx) {
  tpu_status_t s = check_dtype(ctx, 1, 2);
  if (s) return s;
  return set_scaled_sum(ctx, dot(ctx, 1, 2, "0", "0", "2", "1"), beta_index(ctx));
}

/* addbmm(self, batch1, batch2, *, beta, alpha): the batch sum is one more
 * contracting dim. */
static tpu_status_t lower_addbmm(tpu_lower_ctx_t* ctx) {
  tpu_status_t s = check_dtype(ctx, 1, 2);
  if (s) return s;
  return set_scaled_sum(ctx, dot(ctx, 1, 2, "", "", "0, 2", "0, 1"), beta_index(ctx));
}

/* dot / vdot(self, other): 1-D . 1-D (vdot conjugates self, a no-op for the
 * real dtypes lowered here). */
static tpu_status_t lower_dot(tpu_lower_ctx_t* ctx) {
  tpu_status_t s = check_dtype(ctx, 0, 1);
  if (s) return s;
  const tpu_hlo_type_t* l = &tpu_lower_arg(ctx, 0)->type;
  return set_product(ctx, dot(ctx, 0, 1, "", "", "0", "0"), l->rank == 1 && l->dims[0] == 1);
}

/* mv(self, vec): [n,m] x [m]. */
static tpu_status_t lower_mv(tpu_lower_ctx_t* ctx) {
  tpu_status_t s = check_dtype(ctx, 0, 1);
  if (s) return s;
  const tpu_hlo_type_t* l = &tpu_lower_arg(ctx, 0)->type;
  return set_product(ctx, dot(ctx, 0, 1, "", "", "1", "0"), l->rank == 2 && l->dims[1] == 1);
}

/* addmv(self, mat, vec, *, beta, alpha). */
static tpu_status_t lower_addmv(tpu_lower_ctx_t* ctx) {
  tpu_status_t s = check_dtype(ctx, 1, 2);
  if (s) return s;
  return set_scaled_sum(ctx, dot(ctx, 1, 2, "", "", "1", "0"), 3);
}

/* addr(self, vec1, vec2, *, beta, alpha): the outer product is a
 * dot_general without contracting dims. */
static tpu_status_t lower_addr(tpu_lower_ctx_t* ctx) {
  tpu_status_t s = check_dtype(ctx, 1, 2);
  if (s) return s;
  return set_scaled_sum(ctx, dot(ctx, 1, 2, "", "", "", ""), 3);
}

/* _unsafe_view(self, size): a reshape of the logical value (views are
 * already folded in, so contiguity does not matter here). */
static tpu_status_t lower_unsafe_view(tpu_lower_ctx_t* ctx) {
  tpu_hlo_type_t out = tpu_lower_output_type(ctx, 0);
  tpu_lower_set_output(ctx, 0, tpu_emit_reshape(tpu_lower_builder(ctx), tpu_lower_tensor(ctx, 0),
                                                out.dims, out.rank));
  return NULL;
}

const tpu_lowering_t tpu_lowerings_linalg[] = {
    {"bmm", lower_bmm, 0},       {"addmm", lower_addmm, 0}, {"baddbmm", lower_baddbmm, 0},
    {"addbmm", lower_addbmm, 0}, {"dot", lower_dot, 0},     {"vdot", lower_dot, 0},
    {"mv", lower_mv, 0},         {"addmv", lower_addmv, 0},
    {"addr", lower_addr, 0}, {"_unsafe_view", lower_unsafe_view, 0},
};
const size_t tpu_lowerings_linalg_count = sizeof tpu_lowerings_linalg / sizeof tpu_lowerings_linalg[0];
