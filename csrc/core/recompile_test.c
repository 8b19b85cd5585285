#include "recompile.h"

#include <stdlib.h>

#include "metrics.h"
#include "testing.h"

static void test_first_compile_is_not_a_recompile(void) {
  tpu_recompile_reset();
  const char* parts[2] = {"arg 0: f32[4,5]", "arg 1: scalar f64"};
  CHECK(tpu_recompile_note("aten::add.Tensor", parts, 2) == NULL);
  /* another op is another name */
  CHECK(tpu_recompile_note("aten::mul.Tensor", parts, 2) == NULL);
}

static void test_the_changed_part_is_named(void) {
  tpu_recompile_reset();
  int64_t before = tpu_metrics_get("recompiles");
  const char* a[2] = {"arg 0: f32[4,5]", "arg 1: scalar f64"};
  const char* b[2] = {"arg 0: f32[4,7]", "arg 1: scalar f64"};
  const char* c[2] = {"arg 0: f32[4,7]", "arg 1: scalar i64"};
  CHECK(tpu_recompile_note("op", a, 2) == NULL);
  char* d = tpu_recompile_note("op", b, 2);
  CHECK(d && strcmp(d, "arg 0: f32[4,5] -> f32[4,7]") == 0);
  free(d);
  d = tpu_recompile_note("op", c, 2);
  CHECK(d && strcmp(d, "arg 1: scalar f64 -> scalar i64") == 0);
  free(d);
  /* a longer key: the new part */
  const char* e[3] = {"arg 0: f32[4,7]", "arg 1: scalar i64", "arg 2: int 3"};
  d = tpu_recompile_note("op", e, 3);
  CHECK(d && strcmp(d, "new arg 2: int 3") == 0);
  free(d);
  CHECK_EQ(tpu_metrics_get("recompiles") - before, 3);
  tpu_recompile_reset();
}

TPU_TEST_MAIN(TPU_TEST(test_first_compile_is_not_a_recompile), TPU_TEST(test_the_changed_part_is_named))
