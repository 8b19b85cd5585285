#include "signature.h"

#include "../testing.h"

static void test_parses_params_with_attributes(void) {
  const char* text =
      "module @m {\n func.func public @main(%arg0: tensor<2x3xf32>, %arg1: tensor<i64> "
      "{tf.aliasing_output = 0 : i32}, %b: tensor<4xcomplex<f32>>, %c: tensor<0x1xi1>) "
      "-> (tensor<2x3xf32>) {\n }\n}";
  tpu_hlo_type_t params[8];
  size_t n = 0;
  CHECK_OK(tpu_hlo_parse_main_params(text, strlen(text), params, 8, &n));
  CHECK_EQ(n, 4u);
  CHECK_EQ(params[0].dtype, TPU_DTYPE_FLOAT32);
  CHECK_EQ(params[0].rank, 2);
  CHECK_EQ(params[0].dims[1], 3);
  CHECK_EQ(params[1].dtype, TPU_DTYPE_INT64);
  CHECK_EQ(params[1].rank, 0);
  CHECK_EQ(params[2].dtype, TPU_DTYPE_COMPLEX64);
  CHECK_EQ(params[2].dims[0], 4);
  CHECK_EQ(params[3].dtype, TPU_DTYPE_BOOL);
  CHECK_EQ(params[3].dims[0], 0);
}

static void test_no_params_and_errors(void) {
  tpu_hlo_type_t params[2];
  size_t n = 7;
  const char* empty = "func.func @main() -> tensor<f32> {}";
  CHECK_OK(tpu_hlo_parse_main_params(empty, strlen(empty), params, 2, &n));
  CHECK_EQ(n, 0u);
  const char* dynamic = "func.func @main(%a: tensor<?x3xf32>) {}";
  tpu_status_t s = tpu_hlo_parse_main_params(dynamic, strlen(dynamic), params, 2, &n);
  CHECK(s != NULL);
  CHECK_STR_CONTAINS(tpu_status_message(s), "argument 0");
  tpu_status_free(s);
  const char* none = "module {}";
  s = tpu_hlo_parse_main_params(none, strlen(none), params, 2, &n);
  CHECK(s != NULL);
  CHECK_STR_CONTAINS(tpu_status_message(s), "no @main");
  tpu_status_free(s);
}

static void test_builder_output_round_trips(void) {
  tpu_hlo_builder_t* b = NULL;
  CHECK_OK(tpu_hlo_builder_create(&b));
  int64_t dims[3] = {5, 1, 2};
  tpu_hlo_type_t t = tpu_hlo_type_make(TPU_DTYPE_BFLOAT16, 3, dims);
  tpu_hlo_value_t a = tpu_hlo_arg(b, t, NULL);
  tpu_hlo_arg(b, tpu_hlo_type_scalar(TPU_DTYPE_UINT8), "tf.aliasing_output = 0 : i32");
  tpu_hlo_return(b, &a, 1);
  char* text = NULL;
  size_t len = 0;
  CHECK_OK(tpu_hlo_builder_finish(b, &text, &len));
  tpu_hlo_builder_destroy(b);
  tpu_hlo_type_t params[4];
  size_t n = 0;
  tpu_status_t s = tpu_hlo_parse_main_params(text, len, params, 4, &n);
  free(text);
  CHECK_OK(s);
  CHECK_EQ(n, 2u);
  CHECK_EQ(params[0].dtype, TPU_DTYPE_BFLOAT16);
  CHECK_EQ(params[0].dims[2], 2);
  CHECK_EQ(params[1].dtype, TPU_DTYPE_UINT8);
}

TPU_TEST_MAIN(TPU_TEST(test_parses_params_with_attributes),
              TPU_TEST(test_no_params_and_errors), TPU_TEST(test_builder_output_round_trips))
