/* The runtime singleton: start-up on the default plugin, device range
 * checks, and tracking of outstanding executions (pruned as they finish,
 * all awaited by synchronize). */
#include "runtime.h"

#include <string.h>

#include "metrics.h"
#include "program.h"
#include "testing.h"

static const char kAddOne[] =
    "func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {\n"
    "  %one = stablehlo.constant dense<1.0> : tensor<4xf32>\n"
    "  %y = stablehlo.add %x, %one : tensor<4xf32>\n"
    "  return %y : tensor<4xf32>\n"
    "}\n";

static void test_init_and_device_checks(void) {
  CHECK_OK(tpu_runtime_init(NULL));
  CHECK(tpu_runtime_is_initialized());
  CHECK(tpu_runtime_client() != NULL);
  CHECK(tpu_runtime_device_count() >= 1);
  CHECK_OK(tpu_runtime_check_device(0));
  tpu_status_t s = tpu_runtime_check_device(tpu_runtime_device_count());
  CHECK(s != NULL && tpu_status_code(s) == TPU_STATUS_OUT_OF_RANGE);
  if (s) CHECK_STR_CONTAINS(tpu_status_message(s), "out of range");
  tpu_status_free(s);
  s = tpu_runtime_check_device(-1);
  CHECK(s != NULL);
  tpu_status_free(s);
}

/* 200 chained executions tracked (more than the prune threshold), then one
 * synchronize: every result is ready and correct. */
static void test_many_tracked_executions_then_synchronize(void) {
  CHECK_OK(tpu_runtime_init(NULL));
  tpu_program_t* program = NULL;
  CHECK_OK(tpu_program_get(kAddOne, strlen(kAddOne), &program));
  const float start[4] = {0, 1, 2, 3};
  int64_t four = 4;
  tpu_buffer_t* x = NULL;
  CHECK_OK(tpu_buffer_from_host(tpu_runtime_client(), 0, start, TPU_DTYPE_FLOAT32, &four, 1,
                                NULL, &x));
  for (int i = 0; i < 200; i++) {
    tpu_buffer_t* y = NULL;
    CHECK_OK(tpu_program_execute(program, 0, &x, 1, &y)); /* tracked */
    tpu_buffer_destroy(x);
    x = y;
  }
  CHECK_OK(tpu_runtime_synchronize(0));
  CHECK_OK(tpu_runtime_synchronize(0)); /* nothing left: fine */
  float got[4];
  CHECK_OK(tpu_buffer_to_host(x, got, sizeof got));
  for (int i = 0; i < 4; i++) CHECK_EQ(got[i], start[i] + 200);
  tpu_buffer_destroy(x);
  /* The synchronous variant waits itself. */
  tpu_buffer_t* y = NULL;
  CHECK_OK(tpu_buffer_from_host(tpu_runtime_client(), 0, start, TPU_DTYPE_FLOAT32, &four, 1,
                                NULL, &x));
  CHECK_OK(tpu_program_execute_sync(program, 0, &x, 1, &y));
  CHECK_OK(tpu_buffer_to_host(y, got, sizeof got));
  CHECK_EQ(got[3], 4.0f);
  tpu_buffer_destroy(x);
  tpu_buffer_destroy(y);
  /* Out-of-range devices have nothing to wait for. */
  CHECK_OK(tpu_runtime_synchronize(-1));
}

TPU_TEST_MAIN(TPU_TEST(test_init_and_device_checks),
              TPU_TEST(test_many_tracked_executions_then_synchronize))
