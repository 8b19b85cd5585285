/* Batched matrices for the factorization families (factor.c: LU and the
 * Cholesky solves; orthogonal.c: QR, SVD, eigh): an operand read as
 * [B, m, n] (its batch dims flattened), its rows, columns and elements at
 * run-time indices (a column loop's counter), and the operand checks and
 * output writes both families make. Header-only: small helpers each
 * family compiles in. */
#ifndef TORCHTPU_CORE_LOWER_MATRIX_H_
#define TORCHTPU_CORE_LOWER_MATRIX_H_

#include "emit.h"
#include "lowering.h"

static inline bool real_solver_dtype(tpu_dtype_t d) {
  return d == TPU_DTYPE_FLOAT32 || d == TPU_DTYPE_FLOAT64;
}

static inline int64_t numel_of(const tpu_hlo_type_t* t) {
  int64_t n = 1;
  for (int d = 0; d < t->rank; d++) n *= t->dims[d];
  return n;
}

static inline tpu_hlo_type_t type3(tpu_dtype_t d, int64_t b0, int64_t b1, int64_t b2) {
  int64_t dims[3] = {b0, b1, b2};
  return tpu_hlo_type_make(d, 3, dims);
}

static inline tpu_hlo_type_t type2(tpu_dtype_t d, int64_t b0, int64_t b1) {
  int64_t dims[2] = {b0, b1};
  return tpu_hlo_type_make(d, 2, dims);
}

static inline tpu_hlo_value_t i64(tpu_hlo_builder_t* b, int64_t v) {
  return tpu_emit_const(b, TPU_DTYPE_INT64, (double)v);
}

static inline tpu_hlo_value_t and2(tpu_hlo_builder_t* b, tpu_hlo_value_t x, tpu_hlo_value_t y) {
  return tpu_emit_binary(b, "stablehlo.and", x, y);
}

static inline tpu_hlo_value_t reshape3(tpu_hlo_builder_t* b, tpu_hlo_value_t x, int64_t d0, int64_t d1,
                                int64_t d2) {
  int64_t dims[3] = {d0, d1, d2};
  return tpu_emit_reshape(b, x, dims, 3);
}

static inline tpu_hlo_value_t reshape2(tpu_hlo_builder_t* b, tpu_hlo_value_t x, int64_t d0, int64_t d1) {
  int64_t dims[2] = {d0, d1};
  return tpu_emit_reshape(b, x, dims, 2);
}

static inline tpu_hlo_value_t reshape1(tpu_hlo_builder_t* b, tpu_hlo_value_t x, int64_t d0) {
  return tpu_emit_reshape(b, x, &d0, 1);
}

/* x (rank r) to `type`'s shape, x's dims placed at type's first r dims
 * (the rest broadcast), unlike numpy's right alignment. */
static inline tpu_hlo_value_t spread(tpu_hlo_builder_t* b, tpu_hlo_value_t x, tpu_hlo_type_t type) {
  tpu_hlo_type_t t = tpu_hlo_value_type(b, x);
  int64_t dims[TPU_HLO_MAX_RANK];
  for (int d = 0; d < type.rank; d++) dims[d] = d < t.rank ? t.dims[d] : 1;
  type.dtype = t.dtype;
  return tpu_emit_broadcast_to(b, tpu_emit_reshape(b, x, dims, type.rank), &type);
}

/* Column j of x [B, m, n] as [B, m]; row j as [B, n]. */
static inline tpu_hlo_value_t column(tpu_hlo_builder_t* b, tpu_hlo_value_t x, tpu_hlo_value_t j) {
  tpu_hlo_type_t t = tpu_hlo_value_type(b, x);
  tpu_hlo_value_t z = i64(b, 0), st[3] = {z, z, j};
  int64_t sz[3] = {t.dims[0], t.dims[1], 1};
  return reshape2(b, tpu_emit_dynamic_slice(b, x, st, sz), t.dims[0], t.dims[1]);
}

static inline tpu_hlo_value_t row(tpu_hlo_builder_t* b, tpu_hlo_value_t x, tpu_hlo_value_t j) {
  tpu_hlo_type_t t = tpu_hlo_value_type(b, x);
  tpu_hlo_value_t z = i64(b, 0), st[3] = {z, j, z};
  int64_t sz[3] = {t.dims[0], 1, t.dims[2]};
  return reshape2(b, tpu_emit_dynamic_slice(b, x, st, sz), t.dims[0], t.dims[2]);
}

static inline tpu_hlo_value_t set_column(tpu_hlo_builder_t* b, tpu_hlo_value_t x, tpu_hlo_value_t j,
                                  tpu_hlo_value_t col) {
  tpu_hlo_type_t t = tpu_hlo_value_type(b, x);
  tpu_hlo_value_t z = i64(b, 0), st[3] = {z, z, j};
  return tpu_emit_dynamic_update_slice(b, x, reshape3(b, col, t.dims[0], t.dims[1], 1), st);
}

/* Element j of each row of v [B, n], as [B]. */
static inline tpu_hlo_value_t element(tpu_hlo_builder_t* b, tpu_hlo_value_t v, tpu_hlo_value_t j) {
  tpu_hlo_type_t t = tpu_hlo_value_type(b, v);
  tpu_hlo_value_t st[2] = {i64(b, 0), j};
  int64_t sz[2] = {t.dims[0], 1};
  return reshape1(b, tpu_emit_dynamic_slice(b, v, st, sz), t.dims[0]);
}

/* Rows idx [B, K] (int64) of x [B, R, C], as [B, K, C] (a gather, so
 * values move exactly: no arithmetic on them). */
static inline tpu_hlo_value_t gather_rows(tpu_hlo_builder_t* b, tpu_hlo_value_t x, tpu_hlo_value_t idx) {
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
static inline tpu_hlo_value_t gather_columns(tpu_hlo_builder_t* b, tpu_hlo_value_t x, tpu_hlo_value_t idx) {
  const int64_t perm[3] = {0, 2, 1};
  return tpu_emit_transpose(b, gather_rows(b, tpu_emit_transpose(b, x, perm), idx), perm);
}

/* Reads tensor argument i as [B, m, n]. */
static inline tpu_hlo_value_t matrices(tpu_lower_ctx_t* ctx, int i, int64_t* B, int64_t* m, int64_t* n) {
  const tpu_hlo_type_t* t = &tpu_lower_arg(ctx, i)->type;
  *m = t->dims[t->rank - 2], *n = t->dims[t->rank - 1];
  *B = 1;
  for (int d = 0; d + 2 < t->rank; d++) *B *= t->dims[d];
  return reshape3(tpu_lower_builder(ctx), tpu_lower_tensor(ctx, i), *B, *m, *n);
}

static inline void set_output(tpu_lower_ctx_t* ctx, int i, tpu_hlo_value_t v) {
  tpu_hlo_type_t t = tpu_lower_output_type(ctx, i);
  tpu_lower_set_output(ctx, i, tpu_emit_reshape(tpu_lower_builder(ctx), v, t.dims, t.rank));
}

static inline void set_zero_output(tpu_lower_ctx_t* ctx, int i) {
  tpu_hlo_type_t t = tpu_lower_output_type(ctx, i);
  tpu_lower_set_output(ctx, i, tpu_emit_const_like(tpu_lower_builder(ctx), &t, 0));
}

static inline tpu_hlo_value_t transpose2(tpu_hlo_builder_t* b, tpu_hlo_value_t x) {
  const int64_t perm[3] = {0, 2, 1};
  return tpu_emit_transpose(b, x, perm);
}

/* BOOL argument i, or dflt when it is left out. */
static inline bool flag(tpu_lower_ctx_t* ctx, int i, bool dflt) {
  const tpu_lower_arg_t* a = tpu_lower_arg(ctx, i);
  return a->kind == TPU_ARG_BOOL ? a->i != 0 : dflt;
}

/* Declines unless argument i is a float32 / float64 tensor of matrices. */
static inline tpu_status_t check_matrix(tpu_lower_ctx_t* ctx, int i, const char* what) {
  const tpu_lower_arg_t* a = tpu_lower_arg(ctx, i);
  if (a->kind != TPU_ARG_TENSOR || a->type.rank < 2 || !real_solver_dtype(a->type.dtype))
    return tpu_lower_decline(ctx, "%s of %s", what, a->kind == TPU_ARG_TENSOR ? tpu_dtype_name(a->type.dtype) : "a non-tensor");
  return NULL;
}

#endif
