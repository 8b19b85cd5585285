/* The tier-1 program cache: one compile per text, scalars as run-time
 * arguments, a program that does not compile is reported and not cached. */
#include "program.h"

#include "lower/lower_testing.h"
#include "metrics.h"
#include "runtime.h"
#include "testing.h"

static void test_same_text_compiles_once(void) {
  int64_t d[2] = {2, 3};
  tpu_lower_arg_t args[2] = {tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 2, d),
                             tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 2, d)};
  tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 2, d);
  float a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {10, 20, 30, 40, 50, 60};
  const void* data[2] = {a, b};
  void* result[1];
  CHECK_OK(tpu_test_run_op("aten::mul.Tensor", args, 2, NULL, data, &out, 1, result));
  free(result[0]);
  int64_t compiles = tpu_metrics_get("compiles");
  size_t programs = tpu_program_cache_size();
  CHECK_OK(tpu_test_run_op("aten::mul.Tensor", args, 2, NULL, data, &out, 1, result));
  float* r = result[0];
  for (int i = 0; i < 6; i++) CHECK(r[i] == a[i] * b[i]);
  free(result[0]);
  CHECK_EQ(tpu_metrics_get("compiles"), compiles);
  CHECK_EQ(tpu_program_cache_size(), programs);
}

static void test_scalar_is_a_runtime_argument(void) {
  int64_t d[1] = {4};
  tpu_lower_arg_t args[2] = {tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 1, d),
                             tpu_test_scalar_arg(TPU_DTYPE_FLOAT64, true)};
  tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 1, d);
  float x[4] = {1, 2, 3, 4};
  double values[2] = {2.5, -7.0};
  size_t programs = 0;
  for (int k = 0; k < 2; k++) {
    const void* data[2] = {x, &values[k]};
    void* result[1];
    CHECK_OK(tpu_test_run_op("aten::fill_.Scalar", args, 2, NULL, data, &out, 1, result));
    float* r = result[0];
    CHECK(r[0] == (float)values[k] && r[3] == (float)values[k]);
    free(result[0]);
    if (k == 0) programs = tpu_program_cache_size();
  }
  CHECK_EQ(tpu_program_cache_size(), programs);
}

static void test_bad_program_is_not_cached(void) {
  CHECK_OK(tpu_runtime_init(NULL));
  size_t before = tpu_program_cache_size();
  tpu_program_t* p = NULL;
  const char* bad = "module { func.func @main() { nonsense } }";
  tpu_status_t s = tpu_program_get(bad, strlen(bad), &p);
  CHECK(s != NULL);
  tpu_status_free(s);
  CHECK_EQ(tpu_program_cache_size(), before);
}

static void test_cleanup(void) {
  tpu_program_cache_clear();
  tpu_runtime_shutdown();
}

TPU_TEST_MAIN(TPU_TEST(test_same_text_compiles_once), TPU_TEST(test_scalar_is_a_runtime_argument),
              TPU_TEST(test_bad_program_is_not_cached), TPU_TEST(test_cleanup))
