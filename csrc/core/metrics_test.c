#include "metrics.h"

#include <stdio.h>
#include <stdlib.h>

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
  tpu_metrics_entry_t none[1];
  size_t before = tpu_metrics_snapshot(none, 0); /* counters of earlier tests */
  char name[32];
  for (int i = 0; i < 500; i++) {
    snprintf(name, sizeof name, "c%d", i);
    tpu_metrics_add(name, i);
  }
  for (int i = 0; i < 500; i += 37) {
    snprintf(name, sizeof name, "c%d", i);
    CHECK_EQ(tpu_metrics_get(name), i);
  }
  tpu_metrics_entry_t* all = calloc(before + 500, sizeof *all);
  CHECK_EQ(tpu_metrics_snapshot(all, before + 500), before + 500);
  CHECK(strcmp(all[before].name, "c0") == 0);
  CHECK_EQ(all[before + 499].value, 499);
  free(all);
}

static void test_counter_handles(void) {
  tpu_metrics_counter_t* h = tpu_metrics_counter("handle_counter");
  CHECK(h != NULL);
  CHECK(tpu_metrics_counter("handle_counter") == h);
  tpu_metrics_bump(h, 4);
  tpu_metrics_add("handle_counter", 1);
  for (int i = 0; i < 3; i++) TPU_METRICS_BUMP("handle_counter", 10);
  CHECK_EQ(tpu_metrics_get("handle_counter"), 35);
  /* The handle survives the table growing underneath it. */
  char name[32];
  for (int i = 0; i < 300; i++) {
    snprintf(name, sizeof name, "grow_%d", i);
    tpu_metrics_add(name, 1);
  }
  tpu_metrics_bump(h, 1);
  CHECK_EQ(tpu_metrics_get("handle_counter"), 36);
  tpu_metrics_reset();
  CHECK_EQ(tpu_metrics_get("handle_counter"), 0);
  tpu_metrics_bump(NULL, 1); /* ignored */
}

TPU_TEST_MAIN(TPU_TEST(test_add_get_snapshot_reset), TPU_TEST(test_counter_handles),
              TPU_TEST(test_many_counters_survive_growth))
