/* Each lowering compiled and run on the default plugin, checked against
 * values computed here; also the program cache's reuse. */
#include "lower.h"

#include <math.h>

#include "metrics.h"
#include "program.h"
#include "runtime.h"
#include "testing.h"

static tpu_hlo_type_t f32(int rank, int64_t d0, int64_t d1) {
  int64_t dims[2] = {d0, d1};
  return tpu_hlo_type_make(TPU_DTYPE_FLOAT32, rank, dims);
}

/* Runs text with float32 host inputs, downloads output 0 into out. */
static tpu_status_t run_f32(const char* text, size_t len, const float* const* inputs,
                            const tpu_hlo_type_t* types, int n, float* out,
                            size_t out_bytes) {
  TPU_RETURN_IF_ERROR(tpu_runtime_init(NULL));
  tpu_program_t* program = NULL;
  TPU_RETURN_IF_ERROR(tpu_program_get(text, len, &program));
  tpu_buffer_t* args[4] = {0};
  tpu_status_t s = NULL;
  for (int i = 0; i < n && !s; i++)
    s = tpu_buffer_from_host(tpu_runtime_client(), 0, inputs[i], types[i].dtype,
                             types[i].dims, types[i].rank, NULL, &args[i]);
  tpu_buffer_t* result = NULL;
  if (!s) s = tpu_program_execute(program, 0, args, n, &result);
  if (!s) s = tpu_buffer_to_host(result, out, out_bytes);
  tpu_buffer_destroy(result);
  for (int i = 0; i < n; i++) tpu_buffer_destroy(args[i]);
  return s;
}

static void test_binary_broadcast_each_op(void) {
  tpu_hlo_type_t lhs = f32(2, 2, 3), rhs = f32(1, 3, 0), out = f32(2, 2, 3);
  float a[6] = {1, 2, 3, 4, 5, 6}, b[3] = {10, -2, 0.5f};
  const float* in[2] = {a, b};
  tpu_hlo_type_t types[2] = {lhs, rhs};
  for (int op = 0; op < TPU_BINARY_COUNT; op++) {
    char* text = NULL;
    size_t len = 0;
    CHECK_OK(tpu_lower_binary((tpu_binary_op_t)op, &lhs, &rhs, &out, &text, &len));
    float r[6];
    tpu_status_t s = run_f32(text, len, in, types, 2, r, sizeof r);
    free(text);
    CHECK_OK(s);
    for (int i = 0; i < 6; i++) {
      float x = a[i], y = b[i % 3], want = 0;
      switch (op) {
        case TPU_BINARY_ADD: want = x + y; break;
        case TPU_BINARY_SUB: want = x - y; break;
        case TPU_BINARY_MUL: want = x * y; break;
        case TPU_BINARY_DIV: want = x / y; break;
        case TPU_BINARY_MAX: want = fmaxf(x, y); break;
        case TPU_BINARY_MIN: want = fminf(x, y); break;
      }
      CHECK(r[i] == want);
    }
  }
}

static void test_integer_division_is_refused(void) {
  int64_t d[1] = {2};
  tpu_hlo_type_t t = tpu_hlo_type_make(TPU_DTYPE_INT32, 1, d);
  char* text = NULL;
  size_t len;
  tpu_status_t s = tpu_lower_binary(TPU_BINARY_DIV, &t, &t, &t, &text, &len);
  CHECK(s != NULL);
  CHECK_STR_CONTAINS(tpu_status_message(s), "floating");
  tpu_status_free(s);
}

static void test_matmul_and_cache_reuse(void) {
  tpu_hlo_type_t lhs = f32(2, 2, 3), rhs = f32(2, 3, 2);
  float a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {7, 8, 9, 10, 11, 12};
  const float* in[2] = {a, b};
  tpu_hlo_type_t types[2] = {lhs, rhs};
  char* text = NULL;
  size_t len = 0;
  CHECK_OK(tpu_lower_matmul(&lhs, &rhs, &text, &len));
  float r[4];
  int64_t compiles = tpu_metrics_get("compiles");
  tpu_status_t s = run_f32(text, len, in, types, 2, r, sizeof r);
  if (!s) s = run_f32(text, len, in, types, 2, r, sizeof r);
  free(text);
  CHECK_OK(s);
  CHECK(r[0] == 58 && r[1] == 64 && r[2] == 139 && r[3] == 154);
  CHECK_EQ(tpu_metrics_get("compiles") - compiles, 1); /* second run: cache hit */
}

static void test_half_matmul_accumulates_in_f32(void) {
  int64_t d[2] = {1, 2};
  tpu_hlo_type_t lhs = tpu_hlo_type_make(TPU_DTYPE_BFLOAT16, 2, d);
  int64_t e[2] = {2, 1};
  tpu_hlo_type_t rhs = tpu_hlo_type_make(TPU_DTYPE_BFLOAT16, 2, e);
  char* text = NULL;
  size_t len = 0;
  CHECK_OK(tpu_lower_matmul(&lhs, &rhs, &text, &len));
  CHECK_STR_CONTAINS(text, "stablehlo.convert");
  CHECK_STR_CONTAINS(text, "-> tensor<1x1xf32>");
  free(text);
}

static void test_fill_scalar_is_a_runtime_argument(void) {
  tpu_hlo_type_t out = f32(2, 2, 2);
  char* text = NULL;
  size_t len = 0;
  CHECK_OK(tpu_lower_fill(&out, &text, &len));
  tpu_hlo_type_t scalar = tpu_hlo_type_scalar(TPU_DTYPE_FLOAT32);
  float v1 = 2.5f, v2 = -7.0f, r[4];
  const float* in1[1] = {&v1};
  const float* in2[1] = {&v2};
  size_t programs = 0;
  tpu_status_t s = run_f32(text, len, in1, &scalar, 1, r, sizeof r);
  if (!s) {
    CHECK(r[0] == 2.5f && r[3] == 2.5f);
    programs = tpu_program_cache_size();
    s = run_f32(text, len, in2, &scalar, 1, r, sizeof r);
  }
  free(text);
  CHECK_OK(s);
  CHECK(r[0] == -7.0f && r[3] == -7.0f);
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

TPU_TEST_MAIN(TPU_TEST(test_binary_broadcast_each_op),
              TPU_TEST(test_integer_division_is_refused),
              TPU_TEST(test_matmul_and_cache_reuse),
              TPU_TEST(test_half_matmul_accumulates_in_f32),
              TPU_TEST(test_fill_scalar_is_a_runtime_argument),
              TPU_TEST(test_bad_program_is_not_cached), TPU_TEST(test_cleanup))
