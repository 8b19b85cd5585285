/* What the pointwise families (pointwise.c, activation.c, compare.c) share:
 * reading an operand in the common dtype and widening it to PyTorch's
 * opmath type, setting output 0, NaN-propagating maximum / minimum, the
 * sign bit. Header-only helpers, for those three files. */
#ifndef TORCHTPU_CORE_LOWER_POINTWISE_H_
#define TORCHTPU_CORE_LOWER_POINTWISE_H_

#include "emit.h"
#include "lowering.h"

static inline bool is_float(tpu_dtype_t d) { return tpu_dtype_is_floating(d); }

/* The dtype PyTorch computes in: half types widen to float32. */
static inline tpu_dtype_t math_dtype(tpu_dtype_t d) {
  return d == TPU_DTYPE_FLOAT16 || d == TPU_DTYPE_BFLOAT16 ? TPU_DTYPE_FLOAT32 : d;
}

static inline tpu_hlo_value_t un(tpu_hlo_builder_t* b, const char* op, tpu_hlo_value_t x) {
  return tpu_emit_unary(b, op, x);
}
static inline tpu_hlo_value_t cmp(tpu_hlo_builder_t* b, const char* dir, tpu_hlo_value_t x,
                                  tpu_hlo_value_t y) {
  return tpu_emit_compare(b, dir, x, y);
}
static inline tpu_hlo_value_t sel(tpu_hlo_builder_t* b, tpu_hlo_value_t p, tpu_hlo_value_t t,
                                  tpu_hlo_value_t f) {
  return tpu_emit_select(b, p, t, f);
}
static inline tpu_hlo_value_t is_nan(tpu_hlo_builder_t* b, tpu_hlo_value_t x) {
  return cmp(b, "NE", x, x);
}

/* maximum / minimum that return NaN when either side is NaN, like PyTorch
 * (XLA:CPU's max returns the second operand's number when only it is NaN). */
static inline tpu_hlo_value_t max_nan(tpu_hlo_builder_t* b, tpu_hlo_value_t x, tpu_hlo_value_t y) {
  tpu_hlo_value_t m = tpu_emit_binary(b, "stablehlo.maximum", x, y);
  if (!is_float(tpu_hlo_value_type(b, x).dtype)) return m;
  return sel(b, is_nan(b, x), x, sel(b, is_nan(b, y), y, m));
}
static inline tpu_hlo_value_t min_nan(tpu_hlo_builder_t* b, tpu_hlo_value_t x, tpu_hlo_value_t y) {
  tpu_hlo_value_t m = tpu_emit_binary(b, "stablehlo.minimum", x, y);
  if (!is_float(tpu_hlo_value_type(b, x).dtype)) return m;
  return sel(b, is_nan(b, x), x, sel(b, is_nan(b, y), y, m));
}

/* The sign bit of a float, NaN and -0.0 included: bitcast to a signed
 * integer of the same width and test < 0. */
static inline tpu_hlo_value_t sign_bit(tpu_hlo_builder_t* b, tpu_hlo_value_t x) {
  tpu_hlo_type_t t = tpu_hlo_value_type(b, x);
  size_t size = tpu_dtype_size(t.dtype);
  t.dtype = size == 8 ? TPU_DTYPE_INT64 : size == 4 ? TPU_DTYPE_INT32 : TPU_DTYPE_INT16;
  tpu_hlo_value_t bits = tpu_hlo_op(b, "stablehlo.bitcast_convert", &x, 1, t, NULL);
  return cmp(b, "LT", bits, tpu_emit_splat(b, bits, 0));
}

/* Argument i (tensor or scalar) cast to `dtype` and broadcast to output 0's
 * shape. Scalars convert straight to dtype, as PyTorch casts a Scalar to the
 * common dtype. Also a Scalar parameter (beta, alpha, slope ...) in the
 * math dtype. */
static inline tpu_hlo_value_t operand(tpu_lower_ctx_t* ctx, int i, tpu_dtype_t dtype) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_type_t out = tpu_lower_output_type(ctx, 0);
  out.dtype = dtype;
  const tpu_lower_arg_t* a = tpu_lower_arg(ctx, i);
  tpu_hlo_value_t v = a->kind == TPU_ARG_TENSOR && a->type.rank > 0
                          ? tpu_lower_tensor(ctx, i)
                          : tpu_lower_scalar(ctx, i, dtype);
  return tpu_emit_cast_to(b, v, &out);
}

/* Argument i in the common dtype `common`, then widened to its math dtype
 * (a bfloat16 operand is rounded to bfloat16 first, like PyTorch). */
static inline tpu_hlo_value_t math_operand(tpu_lower_ctx_t* ctx, int i, tpu_dtype_t common) {
  return tpu_emit_convert(tpu_lower_builder(ctx), operand(ctx, i, common), math_dtype(common));
}

/* The common dtype of operands 0 and 1 (PyTorch's result_type). */
static inline tpu_dtype_t binary_dtype(tpu_lower_ctx_t* ctx) {
  static const int idx[2] = {0, 1};
  return tpu_lower_result_type(ctx, idx, 2);
}

/* Sets output 0 to v converted to its dtype. */
static inline tpu_status_t finish(tpu_lower_ctx_t* ctx, tpu_hlo_value_t v) {
  tpu_hlo_type_t out = tpu_lower_output_type(ctx, 0);
  tpu_lower_set_output(ctx, 0, tpu_emit_cast_to(tpu_lower_builder(ctx), v, &out));
  return NULL;
}

static inline bool present(tpu_lower_ctx_t* ctx, int i) {
  return tpu_lower_arg(ctx, i)->kind != TPU_ARG_NONE;
}

/* Float math of pointwise.c that activations build on: tanh with its
 * float32 tail, erf saturating where libm's does. */
tpu_hlo_value_t tpu_emit_tanh(tpu_hlo_builder_t* b, tpu_hlo_value_t x);
tpu_hlo_value_t tpu_emit_erf(tpu_hlo_builder_t* b, tpu_hlo_value_t x);

#endif
