/* The tier-1 program cache: one compile per text, scalars as run-time
 * arguments, a program that does not compile is reported and not cached. */
#include "program.h"

#include "lower/lower_testing.h"
#include "lower/lowering.h"
#include "pjrt/pjrt.h"
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

/* A chain of one-op executions: the CPU plugin finishes them inside
 * Execute, so after a few seen to (their events ready on return) the rest
 * skip their completion events, and the result is still right. */
/* The cached program of a two-operand float32 [n] op. */
static tpu_status_t binary_f32_program(const char* op, int64_t n, tpu_program_t** out) {
  tpu_hlo_type_t t = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 1, &n);
  tpu_lower_arg_t args[2] = {{.kind = TPU_ARG_TENSOR, .type = t},
                             {.kind = TPU_ARG_TENSOR, .type = t}};
  char* text = NULL;
  size_t len = 0;
  TPU_RETURN_IF_ERROR(tpu_lower_program_plain(op, args, 2, NULL, &t, 1, &text, &len));
  tpu_status_t s = tpu_program_get(text, len, out);
  free(text);
  return s;
}

static void test_inline_programs_skip_completion_events(void) {
  CHECK_OK(tpu_runtime_init(NULL));
  int64_t one = 1;
  tpu_program_t* p = NULL;
  CHECK_OK(binary_f32_program("aten::add.Tensor", one, &p));
  float zero = 0, step = 1;
  tpu_buffer_t *x = NULL, *inc = NULL;
  CHECK_OK(tpu_buffer_from_host(tpu_runtime_client(), 0, &zero, TPU_DTYPE_FLOAT32, &one, 1,
                                NULL, &x));
  CHECK_OK(tpu_buffer_from_host(tpu_runtime_client(), 0, &step, TPU_DTYPE_FLOAT32, &one, 1,
                                NULL, &inc));
  CHECK(!tpu_buffer_known_ready(inc)); /* nobody asked yet */
  int64_t skipped = tpu_metrics_get("executions_without_event");
  for (int i = 0; i < 100; i++) {
    tpu_buffer_t* in[2] = {x, inc};
    tpu_buffer_t* out = NULL;
    CHECK_OK(tpu_program_execute(p, 0, in, 2, &out));
    tpu_buffer_destroy(x);
    x = out;
  }
  CHECK_OK(tpu_runtime_synchronize(0));
  CHECK(tpu_buffer_known_ready(inc)); /* polled once trusted */
  CHECK(tpu_buffer_presumed_ready(x) && !tpu_buffer_known_ready(x));
  CHECK(tpu_metrics_get("executions_without_event") - skipped > 50);
  float got = 0;
  CHECK_OK(tpu_buffer_to_host(x, &got, sizeof got));
  CHECK(got == 100.0f);
  CHECK(tpu_buffer_known_ready(x)); /* the read asked PJRT */
  tpu_buffer_destroy(x);
  tpu_buffer_destroy(inc);
}

/* A presumption can be wrong: the plugin runs a program it does not
 * estimate cheap on its pool, however often it finished inside Execute
 * before. A read of an output presumed ready still waits for it (the
 * memcpy read once did not, and read what the memory held before). */
static void test_read_of_presumed_output_waits_for_it(void) {
  CHECK_OK(tpu_runtime_init(NULL));
  int64_t n = 8 << 20; /* ~10 ms of multiplies: still running on return */
  tpu_program_t* p = NULL;
  CHECK_OK(binary_f32_program("aten::mul.Tensor", n, &p));
  float* host = malloc((size_t)n * sizeof *host);
  CHECK(host != NULL);
  for (int64_t i = 0; i < n; i++) host[i] = (float)(i % 1000);
  tpu_buffer_t *a = NULL, *out = NULL;
  CHECK_OK(tpu_buffer_from_host(tpu_runtime_client(), 0, host, TPU_DTYPE_FLOAT32, &n, 1, NULL,
                                &a));
  for (int round = 0; round < 3; round++) {
    tpu_buffer_t* in[2] = {a, a};
    CHECK_OK(tpu_program_execute(p, 0, in, 2, &out));
    tpu_buffer_set_presumed_ready(out); /* what program.c does for a trusted program */
    CHECK(!tpu_buffer_known_ready(out));
    memset(host, 0xff, (size_t)n * sizeof *host);
    CHECK_OK(tpu_buffer_to_host(out, host, (size_t)n * sizeof *host));
    int64_t wrong = 0;
    for (int64_t i = 0; i < n; i++) wrong += host[i] != (float)(i % 1000) * (float)(i % 1000);
    CHECK_EQ(wrong, 0);
    tpu_buffer_destroy(out);
    /* An element read (x[i].item()) of a presumed output waits alike. */
    tpu_buffer_t* in2[2] = {a, a};
    CHECK_OK(tpu_program_execute(p, 0, in2, 2, &out));
    tpu_buffer_set_presumed_ready(out);
    float tail[4] = {-1, -1, -1, -1};
    CHECK_OK(tpu_buffer_to_host_range(out, (size_t)(n - 4) * sizeof(float), tail, sizeof tail));
    for (int i = 0; i < 4; i++) {
      float v = (float)((n - 4 + i) % 1000);
      CHECK(tail[i] == v * v);
    }
    tpu_buffer_destroy(out);
    for (int64_t i = 0; i < n; i++) host[i] = (float)(i % 1000);
  }
  tpu_buffer_destroy(a);
  free(host);
  CHECK_OK(tpu_runtime_synchronize(0));
}

/* One device: programs are bound to it (the plugin's cheaper execute). */
static void test_single_device_programs_are_bound(void) {
  CHECK_OK(tpu_runtime_init(NULL));
  CHECK(tpu_client_is_single_device(tpu_runtime_client()) == (tpu_runtime_device_count() == 1));
  int64_t d[1] = {3};
  tpu_lower_arg_t args[2] = {tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 1, d),
                             tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 1, d)};
  tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 1, d);
  tpu_program_t* p = NULL;
  CHECK_OK(binary_f32_program("aten::sub.Tensor", d[0], &p));
  CHECK(tpu_executable_portable(tpu_program_executable(p)) ==
        !tpu_client_is_single_device(tpu_runtime_client()));
  float a[3] = {5, 7, 9}, b[3] = {1, 2, 3}, r[3];
  const void* data[2] = {a, b};
  void* result[1];
  CHECK_OK(tpu_test_run_op("aten::sub.Tensor", args, 2, NULL, data, &out, 1, result));
  memcpy(r, result[0], sizeof r);
  free(result[0]);
  for (int i = 0; i < 3; i++) CHECK(r[i] == a[i] - b[i]);
}

/* Memory-map pressure rotates the cache even without a count cap: with a
 * limit the process is already past, every 32nd new program rotates (and
 * the second rotation unloads the first period's programs). */
static void test_map_pressure_rotates(void) {
  CHECK_OK(tpu_runtime_init(NULL));
  tpu_program_cache_clear();
  tpu_program_cache_set_max(0);
  tpu_program_cache_set_map_limit(10);
  unsigned gen = tpu_program_cache_generation();
  int64_t evicted = tpu_metrics_get("program_cache_evictions");
  tpu_program_t* p = NULL;
  for (int i = 0; i < 70; i++) CHECK_OK(binary_f32_program("aten::mul.Tensor", 300 + i, &p));
  CHECK(tpu_program_cache_generation() != gen);
  CHECK(tpu_program_cache_size() < 70);
  CHECK(tpu_metrics_get("program_cache_evictions") > evicted);
  tpu_program_cache_set_map_limit(0);
  gen = tpu_program_cache_generation();
  for (int i = 0; i < 40; i++) CHECK_OK(binary_f32_program("aten::mul.Tensor", 400 + i, &p));
  CHECK(tpu_program_cache_generation() == gen);
  tpu_program_cache_set_max(4096);
  tpu_program_cache_set_map_limit(-1);
}

/* The cap: programs unused for a period (cap/2 new ones) are unloaded; a
 * program used in the period before is kept (the same pointer) and one
 * unloaded compiles again; each rotation bumps the generation. */
static void test_cap_unloads_programs_unused_for_a_period(void) {
  CHECK_OK(tpu_runtime_init(NULL));
  tpu_program_cache_clear();
  tpu_program_cache_set_max(8);
  tpu_program_t* p[10] = {0};
  int64_t evicted = tpu_metrics_get("program_cache_evictions");
  for (int i = 1; i <= 4; i++) CHECK_OK(binary_f32_program("aten::add.Tensor", 100 + i, &p[i]));
  CHECK_EQ(tpu_program_cache_size(), 4);
  unsigned gen = tpu_program_cache_generation();
  CHECK_OK(binary_f32_program("aten::add.Tensor", 105, &p[5])); /* rotation: 1..4 old */
  CHECK(tpu_program_cache_generation() != gen);
  CHECK_EQ(tpu_program_cache_size(), 5);
  tpu_program_t* again = NULL;
  CHECK_OK(binary_f32_program("aten::add.Tensor", 102, &again)); /* back to the live set */
  CHECK(again == p[2]);
  for (int i = 6; i <= 7; i++) CHECK_OK(binary_f32_program("aten::add.Tensor", 100 + i, &p[i]));
  CHECK_EQ(tpu_program_cache_size(), 7); /* live 5, 2, 6, 7; old 1, 3, 4 */
  CHECK_OK(binary_f32_program("aten::add.Tensor", 108, &p[8])); /* 1, 3, 4 unloaded */
  CHECK_EQ(tpu_program_cache_size(), 5);
  CHECK_EQ(tpu_metrics_get("program_cache_evictions") - evicted, 3);
  CHECK_OK(binary_f32_program("aten::add.Tensor", 102, &again));
  CHECK(again == p[2]);
  CHECK_OK(binary_f32_program("aten::add.Tensor", 101, &again)); /* loaded anew, and runs */
  int64_t n = 101;
  float x[101];
  for (int i = 0; i < 101; i++) x[i] = (float)i;
  tpu_buffer_t* in = NULL;
  CHECK_OK(tpu_buffer_from_host(tpu_runtime_client(), 0, x, TPU_DTYPE_FLOAT32, &n, 1, NULL, &in));
  tpu_buffer_t* args[2] = {in, in};
  tpu_buffer_t* out = NULL;
  CHECK_OK(tpu_program_execute_sync(again, 0, args, 2, &out));
  float y[101];
  CHECK_OK(tpu_buffer_to_host(out, y, sizeof y));
  for (int i = 0; i < 101; i++) CHECK(y[i] == 2.0f * (float)i);
  tpu_buffer_destroy(out);
  tpu_buffer_destroy(in);
  tpu_program_cache_set_max(0);
}

static void test_cleanup(void) {
  tpu_program_cache_clear();
  tpu_runtime_shutdown();
}

TPU_TEST_MAIN(TPU_TEST(test_map_pressure_rotates), TPU_TEST(test_same_text_compiles_once), TPU_TEST(test_scalar_is_a_runtime_argument),
              TPU_TEST(test_bad_program_is_not_cached),
              TPU_TEST(test_inline_programs_skip_completion_events),
              TPU_TEST(test_read_of_presumed_output_waits_for_it),
              TPU_TEST(test_single_device_programs_are_bound),
              TPU_TEST(test_cap_unloads_programs_unused_for_a_period), TPU_TEST(test_cleanup))
