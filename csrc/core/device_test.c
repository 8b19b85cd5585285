/* tpu_device_synchronize: before the runtime starts it has nothing to wait
 * for, a bad index is an error, and it flushes the device's deferred run
 * (one "sync" flush) before waiting. */
#include "device.h"

#include <stdlib.h>

#include "defer.h"
#include "hlo/builder.h"
#include "metrics.h"
#include "runtime.h"
#include "storage.h"
#include "testing.h"

static void test_before_init_and_bad_index(void) {
  CHECK(!tpu_runtime_is_initialized());
  CHECK_OK(tpu_device_synchronize(0)); /* nothing issued yet */
  CHECK_OK(tpu_runtime_init(NULL));
  tpu_status_t s = tpu_device_synchronize(tpu_runtime_device_count());
  CHECK(s && tpu_status_code(s) == TPU_STATUS_OUT_OF_RANGE);
  tpu_status_free(s);
  CHECK_OK(tpu_device_synchronize(0));
}

static void test_flushes_the_deferred_run(void) {
  CHECK_OK(tpu_runtime_init(NULL));
  int64_t n = 4;
  tpu_hlo_type_t f = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 1, &n);
  tpu_hlo_builder_t* b = NULL;
  CHECK_OK(tpu_hlo_builder_create(&b));
  tpu_hlo_value_t a = tpu_hlo_arg(b, f, NULL);
  tpu_hlo_value_t r = tpu_hlo_op(b, "stablehlo.negate", &a, 1, f, NULL);
  tpu_hlo_return(b, &r, 1);
  char* text = NULL;
  size_t len = 0;
  tpu_status_t built = tpu_hlo_builder_finish(b, &text, &len);
  tpu_hlo_builder_destroy(b);
  CHECK_OK(built);
  tpu_defer_op_t op = {.name = "neg", .text = text, .len = len, .num_params = 1,
                       .params = &f, .num_results = 1, .results = &f};
  float xs[4] = {1, 2, 3, 4}, ys[4] = {0};
  tpu_storage_t *x = NULL, *y = NULL;
  CHECK_OK(tpu_storage_create(0, sizeof xs, &x));
  CHECK_OK(tpu_storage_create(0, sizeof ys, &y));
  CHECK_OK(tpu_storage_write_host(x, xs, TPU_DTYPE_FLOAT32, &n, 1, NULL));
  tpu_defer_operand_t p = {.storage = x};
  CHECK_OK(tpu_defer_record(0, &op, &p, &y));
  CHECK_EQ(tpu_defer_pending_ops(0), 1);
  int64_t flushes = tpu_metrics_get("defer_flush::sync");
  CHECK_OK(tpu_device_synchronize(0));
  CHECK_EQ(tpu_defer_pending_ops(0), 0);
  CHECK_EQ(tpu_metrics_get("defer_flush::sync"), flushes + 1);
  CHECK_OK(tpu_storage_read_bytes(y, ys, sizeof ys));
  CHECK(ys[0] == -1 && ys[3] == -4);
  tpu_storage_release(x);
  tpu_storage_release(y);
  free(text);
}

TPU_TEST_MAIN(TPU_TEST(test_before_init_and_bad_index), TPU_TEST(test_flushes_the_deferred_run))
