#include "status.h"

#include "testing.h"

static void test_ok_is_null(void) {
  CHECK_EQ(tpu_status_code(NULL), TPU_STATUS_OK);
  CHECK(strcmp(tpu_status_message(NULL), "") == 0);
  tpu_status_free(NULL);
}

static void test_message_and_annotate(void) {
  tpu_status_t s = tpu_status_make(TPU_STATUS_NOT_FOUND, "no plugin at %s", "/x.so");
  CHECK_EQ(tpu_status_code(s), TPU_STATUS_NOT_FOUND);
  s = tpu_status_annotate(s, "while loading %d: ", 3);
  CHECK(strcmp(tpu_status_message(s), "while loading 3: no plugin at /x.so") == 0);
  CHECK(strcmp(tpu_status_code_name(tpu_status_code(s)), "NOT_FOUND") == 0);
  tpu_status_free(s);
}

static tpu_status_t fails_then_returns(int* reached) {
  TPU_RETURN_IF_ERROR(tpu_status_make(TPU_STATUS_INTERNAL, "boom"));
  *reached = 1;
  return NULL;
}

static void test_return_if_error(void) {
  int reached = 0;
  tpu_status_t s = fails_then_returns(&reached);
  CHECK_EQ(reached, 0);
  CHECK(strcmp(tpu_status_message(s), "boom") == 0);
  tpu_status_free(s);
}

/* The exact text callers produced with tpu_status_make before the helper
 * existed: tests and users match it. */
static void test_oom(void) {
  const char* plain[] = {NULL, ""};
  for (int i = 0; i < 2; i++) {
    tpu_status_t s = tpu_status_oom(plain[i]);
    CHECK_EQ(tpu_status_code(s), TPU_STATUS_RESOURCE_EXHAUSTED);
    CHECK(strcmp(tpu_status_message(s), "out of host memory") == 0);
    tpu_status_free(s);
  }
  tpu_status_t s = tpu_status_oom("building a graph");
  CHECK_EQ(tpu_status_code(s), TPU_STATUS_RESOURCE_EXHAUSTED);
  CHECK(strcmp(tpu_status_message(s), "out of host memory building a graph") == 0);
  tpu_status_free(s);
}

TPU_TEST_MAIN(TPU_TEST(test_ok_is_null), TPU_TEST(test_message_and_annotate),
              TPU_TEST(test_return_if_error), TPU_TEST(test_oom))
