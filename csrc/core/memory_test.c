#include "memory.h"

#include <stdint.h>

#include "testing.h"

static void test_alloc_free_peak(void) {
  tpu_memory_stats_t s;
  tpu_memory_record_alloc(3, 100);
  tpu_memory_record_alloc(3, 50);
  tpu_memory_record_free(3, 100);
  tpu_memory_stats_get(3, &s);
  CHECK_EQ(s.allocated_bytes, 50);
  CHECK_EQ(s.peak_allocated_bytes, 150);
  CHECK_EQ(s.num_allocs, 2);
  CHECK_EQ(s.num_frees, 1);
  CHECK_EQ(s.live_allocations, 1);
  CHECK_EQ(s.peak_live_allocations, 2);
  tpu_memory_reset_peak(3);
  tpu_memory_stats_get(3, &s);
  CHECK_EQ(s.peak_allocated_bytes, 50);
  CHECK_EQ(s.peak_live_allocations, 1);
  tpu_memory_reset_accumulated(3);
  tpu_memory_stats_get(3, &s);
  CHECK_EQ(s.num_allocs, 0);
  CHECK_EQ(s.allocated_bytes, 50);
  tpu_memory_stats_get(2, &s);
  CHECK_EQ(s.allocated_bytes, 0);
}

static void test_out_of_range_device_is_ignored(void) {
  tpu_memory_stats_t s;
  tpu_memory_record_alloc(-1, 10);
  tpu_memory_record_alloc(TPU_MAX_DEVICES, 10);
  tpu_memory_stats_get(TPU_MAX_DEVICES, &s);
  CHECK_EQ(s.allocated_bytes, 0);
}

/* A capacity refuses what would not fit (a huge request too, without
 * overflow) and records nothing for it; freeing makes room again. */
static void test_capacity(void) {
  tpu_memory_stats_t s;
  CHECK(tpu_memory_try_record_alloc(5, 1000)); /* no capacity: no limit */
  tpu_memory_set_capacity(5, 1500);
  CHECK_EQ(tpu_memory_capacity(5), 1500);
  CHECK(!tpu_memory_try_record_alloc(5, 501));
  CHECK(!tpu_memory_try_record_alloc(5, SIZE_MAX));
  CHECK(tpu_memory_try_record_alloc(5, 500));
  tpu_memory_stats_get(5, &s);
  CHECK_EQ(s.allocated_bytes, 1500);
  CHECK_EQ(s.num_allocs, 2);
  CHECK_EQ(s.num_ooms, 2);
  CHECK(!tpu_memory_try_record_alloc(5, 1));
  tpu_memory_record_free(5, 1000);
  CHECK(tpu_memory_try_record_alloc(5, 1000));
  tpu_memory_set_capacity(5, 0);
  CHECK(tpu_memory_try_record_alloc(5, 1u << 30));
}

TPU_TEST_MAIN(TPU_TEST(test_alloc_free_peak),
              TPU_TEST(test_capacity),
              TPU_TEST(test_out_of_range_device_is_ignored))
