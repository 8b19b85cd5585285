#include "lower.h"

#include <stdio.h>
#include <string.h>

static tpu_status_t finish(tpu_hlo_builder_t* b, char** out_text,
                           size_t* out_len) {
  tpu_status_t s = tpu_hlo_builder_finish(b, out_text, out_len);
  tpu_hlo_builder_destroy(b);
  return s;
}

static const char* const kBinaryOpNames[TPU_BINARY_COUNT] = {
    [TPU_BINARY_ADD] = "stablehlo.add",     [TPU_BINARY_SUB] = "stablehlo.subtract",
    [TPU_BINARY_MUL] = "stablehlo.multiply", [TPU_BINARY_DIV] = "stablehlo.divide",
    [TPU_BINARY_MAX] = "stablehlo.maximum", [TPU_BINARY_MIN] = "stablehlo.minimum",
};

tpu_status_t tpu_lower_binary(tpu_binary_op_t op, const tpu_hlo_type_t* lhs,
                              const tpu_hlo_type_t* rhs,
                              const tpu_hlo_type_t* out, char** out_text,
                              size_t* out_len) {
  if (op < 0 || op >= TPU_BINARY_COUNT)
    return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT, "unknown binary op %d",
                           (int)op);
  if (op == TPU_BINARY_DIV && !tpu_dtype_is_floating(out->dtype) &&
      !tpu_dtype_is_complex(out->dtype))
    return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT,
                           "true division needs a floating dtype, got %s",
                           tpu_dtype_name(out->dtype));
  tpu_hlo_builder_t* b = NULL;
  TPU_RETURN_IF_ERROR(tpu_hlo_builder_create(&b));
  tpu_hlo_value_t x = tpu_hlo_arg(b, *lhs, NULL);
  tpu_hlo_value_t y = tpu_hlo_arg(b, *rhs, NULL);
  tpu_hlo_value_t operands[2] = {
      tpu_emit_broadcast_to(b, tpu_emit_convert(b, x, out->dtype), out),
      tpu_emit_broadcast_to(b, tpu_emit_convert(b, y, out->dtype), out)};
  tpu_hlo_value_t r = tpu_hlo_op(b, kBinaryOpNames[op], operands, 2, *out, NULL);
  tpu_hlo_return(b, &r, 1);
  return finish(b, out_text, out_len);
}

tpu_status_t tpu_lower_matmul(const tpu_hlo_type_t* lhs,
                              const tpu_hlo_type_t* rhs, char** out_text,
                              size_t* out_len) {
  if (lhs->rank != 2 || rhs->rank != 2 || lhs->dims[1] != rhs->dims[0] ||
      lhs->dtype != rhs->dtype)
    return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT,
                           "matmul needs [m,k] @ [k,n] of one dtype");
  tpu_dtype_t dtype = lhs->dtype;
  bool half = dtype == TPU_DTYPE_FLOAT16 || dtype == TPU_DTYPE_BFLOAT16;
  tpu_dtype_t acc = half ? TPU_DTYPE_FLOAT32 : dtype;
  tpu_hlo_builder_t* b = NULL;
  TPU_RETURN_IF_ERROR(tpu_hlo_builder_create(&b));
  tpu_hlo_value_t x = tpu_hlo_arg(b, *lhs, NULL);
  tpu_hlo_value_t y = tpu_hlo_arg(b, *rhs, NULL);
  tpu_hlo_value_t operands[2] = {tpu_emit_convert(b, x, acc),
                                 tpu_emit_convert(b, y, acc)};
  int64_t dims[2] = {lhs->dims[0], rhs->dims[1]};
  tpu_hlo_value_t r = tpu_hlo_op(
      b, "stablehlo.dot_general", operands, 2, tpu_hlo_type_make(acc, 2, dims),
      "dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = "
      "[1], rhs_contracting_dimensions = [0]>");
  r = tpu_emit_convert(b, r, dtype);
  tpu_hlo_return(b, &r, 1);
  return finish(b, out_text, out_len);
}

tpu_status_t tpu_lower_fill(const tpu_hlo_type_t* out, char** out_text,
                            size_t* out_len) {
  tpu_hlo_builder_t* b = NULL;
  TPU_RETURN_IF_ERROR(tpu_hlo_builder_create(&b));
  tpu_hlo_value_t value = tpu_hlo_arg(b, tpu_hlo_type_scalar(out->dtype), NULL);
  tpu_hlo_value_t r = tpu_emit_broadcast_to(b, value, out);
  tpu_hlo_return(b, &r, 1);
  return finish(b, out_text, out_len);
}
