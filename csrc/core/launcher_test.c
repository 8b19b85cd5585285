/* The launch queue: back-to-back executions go through the worker in
 * order, their results are pending until filled, inputs freed right after
 * submission stay valid for the queued reader (ASan checks that in
 * ctest-asan), failures reach readers and synchronize naming the op, and
 * switched off everything runs directly. */
#include "launcher.h"

#include "lower/lowering.h"
#include "metrics.h"
#include "pjrt/pjrt.h"
#include "runtime.h"
#include "testing.h"

/* For helpers that return a value (CHECK returns from the function): counts
 * a failure and goes on. */
static bool ok(tpu_status_t s, const char* what) {
  if (!s) return true;
  fprintf(stderr, "%s failed: %s\n", what, tpu_status_message(s));
  tpu_status_free(s);
  tpu_test_failures_++;
  return false;
}

static void add_program(tpu_program_t** out) {
  int64_t one = 1;
  tpu_hlo_type_t t = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 1, &one);
  tpu_lower_arg_t args[2] = {{.kind = TPU_ARG_TENSOR, .type = t},
                             {.kind = TPU_ARG_TENSOR, .type = t}};
  char* text = NULL;
  size_t len = 0;
  CHECK_OK(tpu_lower_program_plain("aten::add.Tensor", args, 2, NULL, &t, 1, &text, &len));
  tpu_status_t s = tpu_program_get(text, len, out);
  free(text);
  CHECK_OK(s);
}

static tpu_buffer_t* scalar_f32(float v) {
  int64_t one = 1;
  tpu_buffer_t* b = NULL;
  ok(tpu_buffer_from_host(tpu_runtime_client(), 0, &v, TPU_DTYPE_FLOAT32, &one, 1, NULL, &b),
     "upload");
  return b;
}

static float read_f32(tpu_buffer_t* b) {
  float v = -1;
  ok(tpu_buffer_to_host(b, &v, sizeof v), "read back");
  return v;
}

/* x = x + 1, n times through the launcher, freeing each input at once. */
static tpu_buffer_t* chain(tpu_program_t* p, tpu_buffer_t* x, tpu_buffer_t* inc, int n,
                           tpu_buffer_t** keep_at_10) {
  for (int i = 0; i < n; i++) {
    tpu_buffer_t* in[2] = {x, inc};
    tpu_buffer_t* out = NULL;
    if (!ok(tpu_launcher_execute(p, 0, in, 2, &out, "test::add"), "execute")) return x;
    if (keep_at_10 && i == 9) *keep_at_10 = x; /* holds 9: kept, not freed */
    else tpu_buffer_destroy(x);
    x = out;
  }
  return x;
}

static void test_back_to_back_executions_are_queued_in_order(void) {
  CHECK_OK(tpu_runtime_init(NULL));
  if (!tpu_launcher_enabled()) {
    printf("  (one CPU or TORCHTPU_LAUNCHER=0: the queue is off; checking the direct path)\n");
  }
  tpu_program_t* p = NULL;
  add_program(&p);
  tpu_buffer_t* inc = scalar_f32(1);
  tpu_buffer_t* kept = NULL;
  long queued = tpu_launcher_queued();
  tpu_buffer_t* x = chain(p, scalar_f32(0), inc, 2000, &kept);
  if (tpu_launcher_enabled()) CHECK(tpu_launcher_queued() - queued > 1000);
  else CHECK_EQ(tpu_launcher_queued(), queued);
  CHECK(read_f32(kept) == 9.0f);  /* waits for that result only */
  CHECK(read_f32(x) == 2000.0f);
  CHECK_OK(tpu_runtime_synchronize(0));
  CHECK_EQ(tpu_buffer_state(x), TPU_BUFFER_READY);
  tpu_buffer_destroy(kept);
  tpu_buffer_destroy(x);
  tpu_buffer_destroy(inc);
}

static void test_failure_reaches_readers_and_synchronize(void) {
  CHECK_OK(tpu_runtime_init(NULL));
  tpu_status_free(tpu_runtime_synchronize(0));
  tpu_program_t* p = NULL;
  add_program(&p);
  tpu_buffer_t* inc = scalar_f32(1);
  int64_t one = 1;
  tpu_buffer_t* broken = NULL;
  CHECK_OK(tpu_buffer_make_pending(tpu_runtime_client(), 0, TPU_DTYPE_FLOAT32, &one, 1, &broken));
  CHECK_EQ(tpu_buffer_state(broken), TPU_BUFFER_PENDING);
  tpu_buffer_fail(broken, tpu_status_make(TPU_STATUS_INTERNAL, "the producer broke"));
  /* A stream first, so the worker is awake and the next call is queued. */
  tpu_buffer_t* x = chain(p, scalar_f32(0), inc, 200, NULL);
  long queued = tpu_launcher_queued();
  tpu_buffer_t* in[2] = {broken, inc};
  tpu_buffer_t* out = NULL;
  tpu_status_t s = tpu_launcher_execute(p, 0, in, 2, &out, "test::consumer");
  if (tpu_launcher_queued() > queued) {
    CHECK(s == NULL);
    float v;
    tpu_status_t r = tpu_buffer_to_host(out, &v, sizeof v);
    CHECK(r != NULL);
    CHECK_STR_CONTAINS(tpu_status_message(r), "running test::consumer");
    CHECK_STR_CONTAINS(tpu_status_message(r), "the producer broke");
    tpu_status_free(r);
    tpu_status_t sync = tpu_runtime_synchronize(0);
    CHECK(sync != NULL);
    CHECK_STR_CONTAINS(tpu_status_message(sync), "test::consumer");
    tpu_status_free(sync);
    tpu_buffer_destroy(out);
  } else {
    /* Ran directly (the queue is off): the error comes back at once. */
    CHECK(s != NULL);
    CHECK_STR_CONTAINS(tpu_status_message(s), "the producer broke");
    tpu_status_free(s);
  }
  CHECK(read_f32(x) == 200.0f); /* the rest of the stream is unaffected */
  tpu_buffer_destroy(x);
  tpu_buffer_destroy(broken);
  tpu_buffer_destroy(inc);
}

static void test_switched_off_runs_directly(void) {
  CHECK_OK(tpu_runtime_init(NULL));
  bool was = tpu_launcher_enabled();
  tpu_launcher_set_enabled(false);
  tpu_program_t* p = NULL;
  add_program(&p);
  tpu_buffer_t* inc = scalar_f32(1);
  long queued = tpu_launcher_queued();
  tpu_buffer_t* x = chain(p, scalar_f32(0), inc, 300, NULL);
  CHECK_EQ(tpu_launcher_queued(), queued);
  CHECK_EQ(tpu_buffer_state(x), TPU_BUFFER_READY); /* never pending */
  CHECK(read_f32(x) == 300.0f);
  tpu_buffer_destroy(x);
  tpu_buffer_destroy(inc);
  tpu_launcher_set_enabled(was);
}

static void test_cleanup(void) {
  tpu_launcher_shutdown();
  tpu_program_cache_clear();
  tpu_runtime_shutdown();
}

TPU_TEST_MAIN(TPU_TEST(test_back_to_back_executions_are_queued_in_order),
              TPU_TEST(test_failure_reaches_readers_and_synchronize),
              TPU_TEST(test_switched_off_runs_directly), TPU_TEST(test_cleanup))
