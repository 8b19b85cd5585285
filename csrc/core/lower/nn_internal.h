/* What the nn family's files (nn.c, loss.c) share: operands in the
 * compute dtype (float32 for float16 / bfloat16, which round once at the
 * end, like PyTorch's CPU kernels: XLA:CPU would reduce them in bf16),
 * sums, scalar arguments with defaults, and setting an output from a value
 * of its element count. */
#ifndef TORCHTPU_CORE_LOWER_NN_INTERNAL_H_
#define TORCHTPU_CORE_LOWER_NN_INTERNAL_H_

#include "emit.h"
#include "lowering.h"

static inline tpu_dtype_t acc_dtype(tpu_dtype_t d) {
  return d == TPU_DTYPE_FLOAT16 || d == TPU_DTYPE_BFLOAT16 ? TPU_DTYPE_FLOAT32 : d;
}

static inline tpu_hlo_type_t type_of(tpu_hlo_builder_t* b, tpu_hlo_value_t v) {
  return tpu_hlo_value_type(b, v);
}

/* Tensor argument i converted to its compute dtype (float32 for halves). */
static inline tpu_hlo_value_t acc_tensor(tpu_lower_ctx_t* ctx, int i) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_value_t v = tpu_lower_tensor(ctx, i);
  return tpu_emit_convert(b, v, acc_dtype(type_of(b, v).dtype));
}

static inline bool is_tensor(tpu_lower_ctx_t* ctx, int i) {
  return tpu_lower_arg(ctx, i)->kind == TPU_ARG_TENSOR;
}

static inline int64_t numel(const tpu_hlo_type_t* t) {
  int64_t n = 1;
  for (int d = 0; d < t->rank; d++) n *= t->dims[d];
  return n;
}

static inline tpu_hlo_value_t mul_c(tpu_hlo_builder_t* b, tpu_hlo_value_t x, double c) {
  return tpu_emit_mul(b, x, tpu_emit_splat(b, x, c));
}

static inline tpu_hlo_value_t reduce_with(tpu_hlo_builder_t* b, tpu_hlo_value_t v,
                                          const int64_t* dims, int n, const char* op, double init) {
  tpu_dtype_t dt = type_of(b, v).dtype;
  return tpu_emit_reduce(b, v, tpu_emit_const(b, dt, init), dims, n, op);
}
static inline tpu_hlo_value_t sum_dims(tpu_hlo_builder_t* b, tpu_hlo_value_t v, const int64_t* dims,
                                       int n) {
  return reduce_with(b, v, dims, n, "stablehlo.add", 0.0);
}
static inline tpu_hlo_value_t sum_all(tpu_hlo_builder_t* b, tpu_hlo_value_t v) {
  tpu_hlo_type_t t = type_of(b, v);
  int64_t dims[TPU_HLO_MAX_RANK];
  for (int d = 0; d < t.rank; d++) dims[d] = d;
  return sum_dims(b, v, dims, t.rank);
}

/* A [C] vector laid along dimension `dim` of `full` and expanded to it. */
static inline tpu_hlo_value_t along(tpu_hlo_builder_t* b, tpu_hlo_value_t vec,
                                    const tpu_hlo_type_t* full, int dim) {
  int64_t shape[TPU_HLO_MAX_RANK];
  for (int d = 0; d < full->rank; d++) shape[d] = d == dim ? full->dims[d] : 1;
  return tpu_emit_broadcast_to(b, tpu_emit_reshape(b, vec, shape, full->rank), full);
}

/* Sets output i from a value with the same element count (reshaped and
 * converted to PyTorch's type). A zero-element output (a saved statistic
 * PyTorch leaves empty) gets an empty constant. */
static inline void set_out(tpu_lower_ctx_t* ctx, int i, tpu_hlo_value_t v) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_type_t out = tpu_lower_output_type(ctx, i);
  if (out.dtype == TPU_DTYPE_INVALID) return;
  tpu_hlo_type_t vt = type_of(b, v);
  if (numel(&out) == 0 && numel(&vt) != 0) {
    tpu_lower_set_output(ctx, i, tpu_emit_const_like(b, &out, 0));
    return;
  }
  v = tpu_emit_reshape(b, v, out.dims, out.rank);
  tpu_lower_set_output(ctx, i, tpu_emit_convert(b, v, out.dtype));
}

static inline double float_arg(tpu_lower_ctx_t* ctx, int i, double dflt) {
  const tpu_lower_arg_t* a = tpu_lower_arg(ctx, i);
  if (a->kind == TPU_ARG_FLOAT) return a->f;
  if (a->kind == TPU_ARG_INT || a->kind == TPU_ARG_BOOL) return (double)a->i;
  return dflt;
}

static inline int64_t int_arg(tpu_lower_ctx_t* ctx, int i, int64_t dflt) {
  const tpu_lower_arg_t* a = tpu_lower_arg(ctx, i);
  return a->kind == TPU_ARG_INT || a->kind == TPU_ARG_BOOL ? a->i : dflt;
}

static inline bool floating_out(tpu_lower_ctx_t* ctx) {
  return tpu_dtype_is_floating(tpu_lower_output_type(ctx, 0).dtype);
}

#endif
