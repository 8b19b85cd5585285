/* The device generator: state (0, 0) on first use and not counted as user
 * memory, seed and set/get round trips, one storage per device, a bad
 * device index is an error. */
#include "rng.h"

#include "memory.h"
#include "runtime.h"
#include "testing.h"

static void test_first_use_seed_and_state_round_trip(void) {
  CHECK_OK(tpu_runtime_init(NULL));
  tpu_memory_stats_t before, after;
  tpu_memory_stats_get(0, &before);
  int64_t state[2] = {-1, -1};
  CHECK_OK(tpu_rng_get_state(0, state));
  CHECK(state[0] == 0 && state[1] == 0);
  tpu_memory_stats_get(0, &after);
  CHECK_EQ(after.allocated_bytes, before.allocated_bytes);
  CHECK_OK(tpu_rng_seed(0, 1234));
  CHECK_OK(tpu_rng_get_state(0, state));
  CHECK(state[0] == 1234 && state[1] == 0);
  int64_t set[2] = {7, 42};
  CHECK_OK(tpu_rng_set_state(0, set));
  CHECK_OK(tpu_rng_get_state(0, state));
  CHECK(state[0] == 7 && state[1] == 42);
  tpu_storage_t *a = NULL, *b = NULL;
  CHECK_OK(tpu_rng_storage(0, &a));
  CHECK_OK(tpu_rng_storage(0, &b));
  CHECK(a && a == b);
}

static void test_bad_device(void) {
  CHECK_OK(tpu_runtime_init(NULL));
  int64_t state[2];
  tpu_status_t s = tpu_rng_get_state(tpu_runtime_device_count(), state);
  CHECK(s && tpu_status_code(s) == TPU_STATUS_OUT_OF_RANGE);
  tpu_status_free(s);
}

TPU_TEST_MAIN(TPU_TEST(test_first_use_seed_and_state_round_trip), TPU_TEST(test_bad_device))
