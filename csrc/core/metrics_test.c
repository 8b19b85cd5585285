#include "metrics.h"

#include <stdio.h>

#include "testing.h"

static void test_add_get_snapshot_reset(void) {
  CHECK_EQ(tpu_metrics_get("never"), 0);
  tpu_metrics_add("compiles", 1);
  tpu_metrics_add("compiles", 2);
  tpu_metrics_add("fallback::aten::sort", 5);
  CHECK_EQ(tpu_metrics_get("compiles"), 3);
  tpu_metrics_entry_t entries[8];
  size_t n = tpu_metrics_snapshot(entries, 8);
  CHECK_EQ(n, 2u);
  CHECK(strcmp(entries[0].name, "compiles") == 0);
  CHECK_EQ(entries[1].value, 5);
  tpu_metrics_reset();
  CHECK_EQ(tpu_metrics_get("compiles"), 0);
  CHECK_EQ(tpu_metrics_snapshot(entries, 8), 2u);
}

static void test_many_counters_survive_growth(void) {
  char name[32];
  for (int i = 0; i < 500; i++) {
    snprintf(name, sizeof name, "c%d", i);
    tpu_metrics_add(name, i);
  }
  for (int i = 0; i < 500; i += 37) {
    snprintf(name, sizeof name, "c%d", i);
    CHECK_EQ(tpu_metrics_get(name), i);
  }
  tpu_metrics_entry_t small[4];
  CHECK_EQ(tpu_metrics_snapshot(small, 4), 502u);
  CHECK(strcmp(small[2].name, "c0") == 0);
}

TPU_TEST_MAIN(TPU_TEST(test_add_get_snapshot_reset),
              TPU_TEST(test_many_counters_survive_growth))
