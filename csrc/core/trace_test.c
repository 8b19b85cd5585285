/* The device trace: nothing is recorded (nor reported) while it is off;
 * on, spans carry kind, name, ordered times, thread and queue wait, names
 * outlive their sources, the capacity bounds it, a restart clears it;
 * and a real workload through the runtime (upload, compile, executions
 * through the launcher, read back) records one span of each kind. */
#include "trace.h"

#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "launcher.h"
#include "lower/lowering.h"
#include "pjrt/pjrt.h"
#include "program.h"
#include "runtime.h"
#include "testing.h"

static int g_begins, g_ends, g_mismatched;

static void on_begin(tpu_trace_span_t* span) {
  g_begins++;
  span->listener_data = &g_begins;
}
static void on_end(tpu_trace_span_t* span) {
  g_ends++;
  if (span->listener_data != &g_begins || span->end_ns < span->start_ns) g_mismatched++;
}
static const tpu_trace_listener_t kListener = {on_begin, on_end};

static size_t read_all(tpu_trace_span_t** out) {
  size_t n = tpu_trace_read(NULL, 0);
  *out = calloc(n + 1, sizeof **out);
  return tpu_trace_read(*out, n);
}

static void test_off_records_nothing(void) {
  tpu_trace_set_listener(&kListener);
  g_begins = g_ends = 0;
  CHECK_OK(tpu_trace_start(16));
  tpu_trace_stop();
  CHECK(!tpu_trace_enabled());
  tpu_trace_span_t span;
  tpu_trace_begin(&span, TPU_TRACE_EXECUTE, "aten::mm");
  tpu_trace_end(&span);
  CHECK_EQ(span.kind, TPU_TRACE_NONE);
  CHECK_EQ(tpu_trace_read(NULL, 0), 0u);
  CHECK_EQ(g_begins, 0);
  CHECK_EQ(g_ends, 0);
  tpu_trace_set_listener(NULL);
}

static void test_spans_recorded_in_order_with_names_interned(void) {
  tpu_trace_set_listener(&kListener);
  g_begins = g_ends = g_mismatched = 0;
  unsigned gen = tpu_trace_generation();
  CHECK_OK(tpu_trace_start(16));
  CHECK(tpu_trace_enabled());
  CHECK(tpu_trace_generation() != gen);
  char* name = strdup("aten::addmm");
  tpu_trace_span_t outer, inner;
  tpu_trace_begin(&outer, TPU_TRACE_FLUSH, "sync");
  tpu_trace_set_next_wait(1234);
  tpu_trace_begin(&inner, TPU_TRACE_EXECUTE, name);
  tpu_trace_end(&inner);
  tpu_trace_end(&outer);
  memset(name, 'x', strlen(name)); /* the trace kept its own copy */
  free(name);
  tpu_trace_span_t compile;
  tpu_trace_begin(&compile, TPU_TRACE_COMPILE, "aten::addmm");
  tpu_trace_end(&compile);
  tpu_trace_stop();
  CHECK_EQ(g_begins, 3);
  CHECK_EQ(g_ends, 3);
  CHECK_EQ(g_mismatched, 0);
  tpu_trace_span_t* s = NULL;
  size_t n = read_all(&s);
  CHECK_EQ(n, 3u);
  CHECK_EQ(s[0].kind, TPU_TRACE_EXECUTE); /* in the order they ended */
  CHECK(strcmp(s[0].name, "aten::addmm") == 0);
  CHECK_EQ(s[0].wait_ns, 1234);
  CHECK_EQ(s[1].kind, TPU_TRACE_FLUSH);
  CHECK_EQ(s[1].wait_ns, 0);
  CHECK(s[1].start_ns <= s[0].start_ns && s[0].end_ns <= s[1].end_ns); /* nested */
  CHECK(s[2].name == s[0].name); /* one interned copy per name */
  CHECK_EQ(s[2].wait_ns, 0);     /* the wait went to one execution only */
  CHECK_EQ(s[0].thread_id, (uint64_t)syscall(SYS_gettid));
  CHECK(strcmp(tpu_trace_kind_name(s[2].kind), "compile") == 0);
  free(s);
  tpu_trace_set_listener(NULL);
}

static void test_capacity_drops_and_restart_clears(void) {
  CHECK_OK(tpu_trace_start(2));
  for (int i = 0; i < 5; i++) {
    tpu_trace_span_t span;
    tpu_trace_begin(&span, TPU_TRACE_TO_HOST, "f32");
    tpu_trace_end(&span);
  }
  CHECK_EQ(tpu_trace_read(NULL, 0), 2u);
  CHECK_EQ(tpu_trace_dropped(), 3u);
  CHECK_OK(tpu_trace_start(4));
  CHECK_EQ(tpu_trace_read(NULL, 0), 0u);
  CHECK_EQ(tpu_trace_dropped(), 0u);
  tpu_trace_stop();
  tpu_status_t s = tpu_trace_start(0);
  CHECK(s != NULL);
  tpu_status_free(s);
}

/* Uploads, compiles, runs `n` back-to-back adds through the launcher and
 * reads the result back. */
static void workload(int n, float* out_value) {
  int64_t one = 1;
  tpu_hlo_type_t t = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 1, &one);
  tpu_lower_arg_t args[2] = {{.kind = TPU_ARG_TENSOR, .type = t},
                             {.kind = TPU_ARG_TENSOR, .type = t}};
  char* text = NULL;
  size_t len = 0;
  CHECK_OK(tpu_lower_program_plain("aten::add.Tensor", args, 2, NULL, &t, 1, &text, &len));
  tpu_program_t* p = NULL;
  tpu_status_t st = tpu_program_get(text, len, &p);
  free(text);
  CHECK_OK(st);
  float v0 = 0, v1 = 1;
  tpu_buffer_t *x = NULL, *inc = NULL;
  CHECK_OK(tpu_buffer_from_host(tpu_runtime_client(), 0, &v0, TPU_DTYPE_FLOAT32, &one, 1, NULL, &x));
  CHECK_OK(tpu_buffer_from_host(tpu_runtime_client(), 0, &v1, TPU_DTYPE_FLOAT32, &one, 1, NULL, &inc));
  for (int i = 0; i < n; i++) {
    tpu_buffer_t* in[2] = {x, inc};
    tpu_buffer_t* y = NULL;
    CHECK_OK(tpu_launcher_execute(p, 0, in, 2, &y, "test::add"));
    tpu_buffer_destroy(x);
    x = y;
  }
  CHECK_OK(tpu_buffer_to_host(x, out_value, sizeof *out_value));
  tpu_buffer_destroy(x);
  tpu_buffer_destroy(inc);
}

static void test_runtime_workload_records_each_kind(void) {
  CHECK_OK(tpu_runtime_init(NULL));
  tpu_program_cache_clear(); /* so the workload compiles (or loads) its program */
  CHECK_OK(tpu_trace_start(1 << 16));
  float v = 0;
  workload(500, &v);
  CHECK_OK(tpu_runtime_synchronize(0));
  tpu_trace_stop();
  CHECK(v == 500.0f);
  tpu_trace_span_t* s = NULL;
  size_t n = read_all(&s);
  int count[TPU_TRACE_KIND_COUNT] = {0};
  int queued = 0, waited = 0;
  uint64_t me = (uint64_t)syscall(SYS_gettid);
  for (size_t i = 0; i < n; i++) {
    count[s[i].kind]++;
    CHECK(s[i].end_ns >= s[i].start_ns);
    if (s[i].kind == TPU_TRACE_EXECUTE) {
      CHECK(strcmp(s[i].name, "test::add") == 0);
      if (s[i].thread_id != me) queued++;  /* run by the launcher's thread */
      if (s[i].wait_ns > 0) waited++;
    }
    if (s[i].kind == TPU_TRACE_TO_DEVICE || s[i].kind == TPU_TRACE_TO_HOST)
      CHECK_EQ(s[i].bytes, 4);
  }
  CHECK_EQ(count[TPU_TRACE_EXECUTE], 500);
  CHECK_EQ(count[TPU_TRACE_COMPILE], 1);
  CHECK_EQ(count[TPU_TRACE_TO_DEVICE], 2);
  CHECK_EQ(count[TPU_TRACE_TO_HOST], 1);
  if (tpu_launcher_enabled()) {
    CHECK(queued > 0);
    CHECK_EQ(waited, queued); /* every queued execution knows its wait */
  }
  free(s);
  /* The same workload with the trace off records nothing. */
  CHECK_OK(tpu_trace_start(16));
  tpu_trace_stop();
  workload(50, &v);
  CHECK_OK(tpu_runtime_synchronize(0));
  CHECK_EQ(tpu_trace_read(NULL, 0), 0u);
}

TPU_TEST_MAIN(TPU_TEST(test_off_records_nothing),
              TPU_TEST(test_spans_recorded_in_order_with_names_interned),
              TPU_TEST(test_capacity_drops_and_restart_clears),
              TPU_TEST(test_runtime_workload_records_each_kind))
