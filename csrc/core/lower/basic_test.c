#include <math.h>

#include "../testing.h"
#include "emit.h"
#include "ctx_internal.h"
#include "lower_testing.h"

static void test_add_with_alpha_scalar_and_broadcast(void) {
  int64_t d2[2] = {2, 3}, d1[1] = {3};
  tpu_lower_arg_t args[3] = {tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 2, d2),
                             tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 1, d1),
                             tpu_test_scalar_arg(TPU_DTYPE_FLOAT64, true)};
  float a[6] = {1, 2, 3, 4, 5, 6}, b[3] = {10, 20, 30};
  double alpha = 0.5;
  const void* data[3] = {a, b, &alpha};
  tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 2, d2);
  void* result[1];
  CHECK_OK(tpu_test_run_op("aten::add.Tensor", args, 3, NULL, data, &out, 1, result));
  float* r = result[0];
  for (int i = 0; i < 6; i++) CHECK(r[i] == a[i] + 0.5f * b[i % 3]);
  free(result[0]);
  /* sub_ shares the row. */
  CHECK_OK(tpu_test_run_op("aten::sub_.Tensor", args, 3, NULL, data, &out, 1, result));
  r = result[0];
  for (int i = 0; i < 6; i++) CHECK(r[i] == a[i] - 0.5f * b[i % 3]);
  free(result[0]);
}

static void test_div_floor_on_integers(void) {
  int64_t d[1] = {4};
  tpu_lower_arg_t args[3] = {tpu_test_tensor_arg(TPU_DTYPE_INT64, 1, d),
                             tpu_test_tensor_arg(TPU_DTYPE_INT64, 1, d),
                             {.kind = TPU_ARG_STRING, .str = "floor"}};
  int64_t a[4] = {7, -7, 7, -7}, b[4] = {2, 2, -2, -2};
  const void* data[2] = {a, b};
  tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_INT64, 1, d);
  void* result[1];
  CHECK_OK(tpu_test_run_op("aten::div.Tensor_mode", args, 3, NULL, data, &out, 1, result));
  int64_t* r = result[0];
  CHECK(r[0] == 3 && r[1] == -4 && r[2] == -4 && r[3] == 3);
  free(result[0]);
}

/* A bool operand promoted to float multiplies as IEEE does (False * NaN
 * is NaN, False * -2 is -0.0): XLA's simplifier turned multiply(convert(
 * pred), x) into a select of x and 0. A bool operand of sub declines (CPU
 * raises). */
static void test_bool_times_float_keeps_nan(void) {
  int64_t d[1] = {3};
  tpu_lower_arg_t args[2] = {tpu_test_tensor_arg(TPU_DTYPE_BOOL, 1, d),
                             tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 1, d)};
  bool a[3] = {false, true, false};
  float b[3] = {NAN, INFINITY, -2.0f};
  const void* data[2] = {a, b};
  tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 1, d);
  void* result[1];
  CHECK_OK(tpu_test_run_op("aten::mul.Tensor", args, 2, NULL, data, &out, 1, result));
  float* r = result[0];
  CHECK(isnan(r[0]) && r[1] == INFINITY && r[2] == 0 && signbit(r[2]));
  free(result[0]);
  char* text = NULL;
  size_t len;
  tpu_lower_arg_t sargs[3] = {args[1], args[0], tpu_test_scalar_arg(TPU_DTYPE_INT64, true)};
  tpu_status_t s = tpu_lower_program_plain("aten::sub.Tensor", sargs, 3, NULL, &out, 1, &text, &len);
  CHECK(s != NULL && tpu_status_code(s) == TPU_STATUS_UNIMPLEMENTED);
  tpu_status_free(s);
}

static void test_wrong_output_type_is_reported(void) {
  int64_t d[1] = {4}, e[1] = {5};
  tpu_lower_arg_t args[1] = {tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 1, d)};
  tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 1, e);
  char* text = NULL;
  size_t len;
  tpu_status_t s = tpu_lower_program_plain("aten::zero_", args, 1, NULL, &out, 1, &text, &len);
  CHECK_OK(s); /* zero_ emits exactly the requested type */
  free(text);
  tpu_hlo_type_t bad = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 1, d);
  tpu_lower_arg_t mm_args[2] = {tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 1, d),
                                tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 1, d)};
  s = tpu_lower_program_plain("aten::fill_.Scalar", mm_args, 1, NULL, &bad, 1, &text, &len);
  CHECK(s != NULL); /* argument 1 is missing: not a scalar */
  tpu_status_free(s);
}

static void test_table_lookup_names(void) {
  CHECK(tpu_lowering_find("aten::add") != NULL);
  CHECK(tpu_lowering_find("aten::add_") == tpu_lowering_find("add"));
  CHECK(tpu_lowering_find("aten::nonexistent_op") == NULL);
  CHECK(tpu_lowering_count() >= 7);
}

static tpu_dtype_t result_type_of(const tpu_lower_arg_t* args, int n) {
  struct tpu_lower_ctx_s ctx = {.op_name = "t", .args = args, .num_args = n};
  int idx[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  return tpu_lower_result_type(&ctx, idx, n);
}

static void test_result_type_rules(void) {
  int64_t d[1] = {3};
  tpu_lower_arg_t i32 = tpu_test_tensor_arg(TPU_DTYPE_INT32, 1, d);
  tpu_lower_arg_t bf16_0d = tpu_test_tensor_arg(TPU_DTYPE_BFLOAT16, 0, NULL);
  tpu_lower_arg_t f64_0d = tpu_test_tensor_arg(TPU_DTYPE_FLOAT64, 0, NULL);
  tpu_lower_arg_t bool1 = tpu_test_tensor_arg(TPU_DTYPE_BOOL, 1, d);
  tpu_lower_arg_t u8 = tpu_test_tensor_arg(TPU_DTYPE_UINT8, 1, d);
  tpu_lower_arg_t i8 = tpu_test_tensor_arg(TPU_DTYPE_INT8, 1, d);
  tpu_lower_arg_t f16 = tpu_test_tensor_arg(TPU_DTYPE_FLOAT16, 1, d);
  tpu_lower_arg_t bf16 = tpu_test_tensor_arg(TPU_DTYPE_BFLOAT16, 1, d);
  tpu_lower_arg_t py_float = tpu_test_scalar_arg(TPU_DTYPE_FLOAT64, true);
  tpu_lower_arg_t py_int = tpu_test_scalar_arg(TPU_DTYPE_INT64, true);
  /* Values checked against torch.result_type. */
  CHECK_EQ(result_type_of((tpu_lower_arg_t[]){i32, py_float}, 2), TPU_DTYPE_FLOAT32);
  CHECK_EQ(result_type_of((tpu_lower_arg_t[]){i32, bf16_0d}, 2), TPU_DTYPE_BFLOAT16);
  CHECK_EQ(result_type_of((tpu_lower_arg_t[]){i32, f64_0d}, 2), TPU_DTYPE_FLOAT64);
  CHECK_EQ(result_type_of((tpu_lower_arg_t[]){bool1, py_int}, 2), TPU_DTYPE_INT64);
  CHECK_EQ(result_type_of((tpu_lower_arg_t[]){u8, i8}, 2), TPU_DTYPE_INT16);
  CHECK_EQ(result_type_of((tpu_lower_arg_t[]){f16, bf16}, 2), TPU_DTYPE_FLOAT32);
  CHECK_EQ(result_type_of((tpu_lower_arg_t[]){bf16, f64_0d}, 2), TPU_DTYPE_BFLOAT16);
  CHECK_EQ(result_type_of((tpu_lower_arg_t[]){u8, py_int}, 2), TPU_DTYPE_UINT8);
}

static void test_override_for_testing(void) {
  tpu_lower_fn_t add = tpu_lowering_find("aten::add.Tensor");
  tpu_lower_fn_t mul = tpu_lowering_find("aten::mul.Tensor");
  CHECK(add && mul && add != mul);
  CHECK(tpu_lowering_override_for_testing("aten::mul.Tensor", "aten::add.Tensor"));
  CHECK(tpu_lowering_find("aten::mul_.Tensor") == add); /* in-place shares the row */
  CHECK(tpu_lowering_find("aten::add.Tensor") == add);
  CHECK(!tpu_lowering_override_for_testing("aten::mul", "aten::no_such_op"));
  CHECK(tpu_lowering_override_for_testing(NULL, NULL));
  CHECK(tpu_lowering_find("aten::mul.Tensor") == mul);
}

TPU_TEST_MAIN(TPU_TEST(test_add_with_alpha_scalar_and_broadcast), TPU_TEST(test_override_for_testing),
              TPU_TEST(test_div_floor_on_integers), TPU_TEST(test_wrong_output_type_is_reported),
              TPU_TEST(test_table_lookup_names), TPU_TEST(test_result_type_rules), TPU_TEST(test_bool_times_float_keeps_nan))
