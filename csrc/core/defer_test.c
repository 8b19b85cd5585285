/* DeferAndFuse runs on the default plugin, with hand-built ops: recording
 * does no device work, reads flush, dead values are not returned, equal
 * structures reuse one fused program, loop and cap cuts, the view-dtype
 * barrier, and a broken op named by the flush's error. */
#include "defer.h"

#include <stdlib.h>
#include <string.h>

#include "hlo/builder.h"
#include "metrics.h"
#include "runtime.h"
#include "testing.h"

#define N 4

/* An op over flat f32[N] storages: "add" (a, b) -> a + b, "scale"
 * (a, s: f64 scalar) -> a * s, "bad" (a) -> a with a broken body. */
typedef struct {
  tpu_defer_op_t op;
  char* text;
  tpu_hlo_type_t params[2];
  tpu_hlo_type_t results[1];
} test_op_t;

static test_op_t g_add, g_scale, g_bad, g_neg_i32;

static tpu_status_t build(test_op_t* t, const char* kind) {
  int64_t n = N;
  tpu_hlo_type_t f = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 1, &n);
  tpu_hlo_type_t i32 = tpu_hlo_type_make(TPU_DTYPE_INT32, 1, &n);
  tpu_hlo_builder_t* b = NULL;
  TPU_RETURN_IF_ERROR(tpu_hlo_builder_create(&b));
  tpu_hlo_value_t r;
  int np = 1;
  if (!strcmp(kind, "add")) {
    tpu_hlo_value_t x[2] = {tpu_hlo_arg(b, f, NULL), tpu_hlo_arg(b, f, NULL)};
    t->params[0] = t->params[1] = f;
    np = 2;
    r = tpu_hlo_op(b, "stablehlo.add", x, 2, f, NULL);
  } else if (!strcmp(kind, "scale")) {
    tpu_hlo_type_t d = tpu_hlo_type_scalar(TPU_DTYPE_FLOAT64);
    tpu_hlo_value_t a = tpu_hlo_arg(b, f, NULL);
    tpu_hlo_value_t s = tpu_hlo_arg(b, d, NULL);
    t->params[0] = f;
    t->params[1] = d;
    np = 2;
    tpu_hlo_value_t sf = tpu_hlo_op(b, "stablehlo.convert", &s, 1, tpu_hlo_type_scalar(TPU_DTYPE_FLOAT32), NULL);
    tpu_hlo_value_t bs =
        tpu_hlo_op(b, "stablehlo.broadcast_in_dim", &sf, 1, f, "broadcast_dimensions = array<i64>");
    tpu_hlo_value_t x[2] = {a, bs};
    r = tpu_hlo_op(b, "stablehlo.multiply", x, 2, f, NULL);
  } else if (!strcmp(kind, "neg_i32")) {
    tpu_hlo_value_t a = tpu_hlo_arg(b, i32, NULL);
    t->params[0] = i32;
    r = tpu_hlo_op(b, "stablehlo.negate", &a, 1, i32, NULL);
    f = i32;
  } else {
    /* "bad": a reshape to an impossible shape; the builder accepts it, the
     * compiler does not. */
    tpu_hlo_value_t a = tpu_hlo_arg(b, f, NULL);
    t->params[0] = f;
    int64_t five = 5;
    r = tpu_hlo_op(b, "stablehlo.reshape", &a, 1, tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 1, &five), NULL);
    r = tpu_hlo_op(b, "stablehlo.slice", &r, 1, f,
                   "start_indices = array<i64: 0>, limit_indices = array<i64: 4>, strides = array<i64: 1>");
  }
  tpu_hlo_return(b, &r, 1);
  size_t len = 0;
  tpu_status_t s = tpu_hlo_builder_finish(b, &t->text, &len);
  tpu_hlo_builder_destroy(b);
  TPU_RETURN_IF_ERROR(s);
  t->results[0] = f;
  t->op = (tpu_defer_op_t){.name = kind, .text = t->text, .len = len, .num_params = np,
                           .params = t->params, .num_results = 1, .results = t->results};
  return NULL;
}

static tpu_status_t setup(void) {
  TPU_RETURN_IF_ERROR(tpu_runtime_init(NULL));
  if (!g_add.text) {
    TPU_RETURN_IF_ERROR(build(&g_add, "add"));
    TPU_RETURN_IF_ERROR(build(&g_scale, "scale"));
    TPU_RETURN_IF_ERROR(build(&g_bad, "bad"));
    TPU_RETURN_IF_ERROR(build(&g_neg_i32, "neg_i32"));
  }
  tpu_defer_configure(4096, 1000);
  return tpu_defer_flush_all(TPU_DEFER_SYNC);
}

static tpu_storage_t* filled(float v) {
  float xs[N];
  for (int i = 0; i < N; i++) xs[i] = v + (float)i;
  tpu_storage_t* s = NULL;
  int64_t n = N;
  if (tpu_storage_create(0, sizeof xs, &s)) return NULL;
  tpu_status_t st = tpu_storage_write_host(s, xs, TPU_DTYPE_FLOAT32, &n, 1, NULL);
  if (st) {
    tpu_status_free(st);
    tpu_storage_release(s);
    return NULL;
  }
  return s;
}

static tpu_storage_t* empty(void) {
  tpu_storage_t* s = NULL;
  return tpu_storage_create(0, N * sizeof(float), &s) ? NULL : s;
}

static tpu_status_t add(tpu_storage_t* a, tpu_storage_t* b, tpu_storage_t* out) {
  tpu_defer_operand_t p[2] = {{.storage = a}, {.storage = b}};
  return tpu_defer_record(0, &g_add.op, p, &out);
}

static tpu_status_t scale(tpu_storage_t* a, double s, tpu_storage_t* out) {
  tpu_buffer_t* sb = NULL;
  TPU_RETURN_IF_ERROR(
      tpu_buffer_from_host(tpu_runtime_client(), 0, &s, TPU_DTYPE_FLOAT64, NULL, 0, NULL, &sb));
  tpu_defer_operand_t p[2] = {{.storage = a}, {.buffer = sb, .owned = true}};
  return tpu_defer_record(0, &g_scale.op, p, &out);
}

/* ((x + x) * s) + y, the middle value dead. */
static tpu_status_t chain(tpu_storage_t* x, tpu_storage_t* y, double s, tpu_storage_t* out) {
  tpu_storage_t* t1 = empty();
  tpu_storage_t* t2 = empty();
  tpu_status_t st = add(x, x, t1);
  if (!st) st = scale(t1, s, t2);
  if (!st) st = add(t2, y, out);
  tpu_storage_release(t1); /* the temporaries die inside the run */
  tpu_storage_release(t2);
  return st;
}

static void test_record_then_flush_on_read(void) {
  CHECK_OK(setup());
  tpu_storage_t *x = filled(1), *y = filled(10), *out = empty();
  CHECK(x && y && out);
  int64_t execs = tpu_metrics_get("executions");
  int64_t elided = tpu_metrics_get("defer_values_elided");
  CHECK_OK(chain(x, y, 3.0, out));
  CHECK_EQ(tpu_defer_pending_ops(0), 3);
  CHECK_EQ(tpu_metrics_get("executions"), execs); /* nothing ran yet */
  float got[N];
  CHECK_OK(tpu_storage_read_bytes(out, got, sizeof got)); /* flushes */
  CHECK_EQ(tpu_defer_pending_ops(0), 0);
  CHECK_EQ(tpu_metrics_get("executions"), execs + 1); /* one program */
  CHECK_EQ(tpu_metrics_get("defer_values_elided"), elided + 2);
  for (int i = 0; i < N; i++) CHECK_EQ(got[i], (float)((1 + i) * 2 * 3 + 10 + i));
  tpu_storage_release(x);
  tpu_storage_release(y);
  tpu_storage_release(out);
}

static void test_same_structure_reuses_the_program(void) {
  CHECK_OK(setup());
  for (int round = 0; round < 3; round++) {
    tpu_storage_t *x = filled((float)round), *y = filled(5), *out = empty();
    int64_t compiles = tpu_metrics_get("compiles");
    CHECK_OK(chain(x, y, 0.5 + round, out)); /* new storages, new scalar */
    float got[N];
    CHECK_OK(tpu_storage_read_bytes(out, got, sizeof got));
    for (int i = 0; i < N; i++)
      CHECK_EQ(got[i], (float)((round + i) * 2 * (0.5 + round) + 5 + i));
    if (round > 0) CHECK_EQ(tpu_metrics_get("compiles"), compiles);
    tpu_storage_release(x);
    tpu_storage_release(y);
    tpu_storage_release(out);
  }
}

static void test_in_place_writes_and_reads_of_inputs(void) {
  CHECK_OK(setup());
  /* x += y twice, then a read of y (an input only) also flushes. */
  tpu_storage_t *x = filled(0), *y = filled(1);
  CHECK_OK(add(x, y, x));
  CHECK_OK(add(x, y, x));
  float gy[N], gx[N];
  CHECK_OK(tpu_storage_read_bytes(y, gy, sizeof gy));
  CHECK_EQ(tpu_defer_pending_ops(0), 0);
  CHECK_OK(tpu_storage_read_bytes(x, gx, sizeof gx));
  for (int i = 0; i < N; i++) {
    CHECK_EQ(gy[i], (float)(1 + i));
    CHECK_EQ(gx[i], (float)(i + 2 * (1 + i)));
  }
  /* A write from outside (an upload) into a storage the run reads: the run
   * sees the old contents. */
  CHECK_OK(add(y, y, x));
  float twenty[N] = {20, 20, 20, 20};
  int64_t n = N;
  CHECK_OK(tpu_storage_write_host(y, twenty, TPU_DTYPE_FLOAT32, &n, 1, NULL));
  CHECK_OK(tpu_storage_read_bytes(x, gx, sizeof gx));
  for (int i = 0; i < N; i++) CHECK_EQ(gx[i], (float)(2 * (1 + i)));
  tpu_storage_release(x);
  tpu_storage_release(y);
}

static void test_loop_and_cap_cuts(void) {
  CHECK_OK(setup());
  tpu_defer_configure(4096, 2);
  tpu_storage_t *x = filled(0), *y = filled(1);
  int64_t loops = tpu_metrics_get("defer_flush::loop");
  /* x = (x + y) * 1 per "step": the second step repeats the first. */
  for (int step = 0; step < 2; step++) {
    CHECK_OK(add(x, y, x));
    CHECK_OK(scale(x, 1.0, x));
  }
  CHECK_EQ(tpu_metrics_get("defer_flush::loop"), loops + 1);
  CHECK_EQ(tpu_defer_pending_ops(0), 0);
  tpu_defer_configure(3, 1000);
  int64_t caps = tpu_metrics_get("defer_flush::cap");
  for (int i = 0; i < 3; i++) CHECK_OK(add(x, y, x));
  CHECK_EQ(tpu_metrics_get("defer_flush::cap"), caps + 1);
  float gx[N];
  CHECK_OK(tpu_storage_read_bytes(x, gx, sizeof gx));
  for (int i = 0; i < N; i++) CHECK_EQ(gx[i], (float)(i + 5 * (1 + i)));
  tpu_storage_release(x);
  tpu_storage_release(y);
}

static void test_value_read_as_another_dtype_flushes_first(void) {
  CHECK_OK(setup());
  tpu_storage_t *x = filled(0), *y = filled(1);
  CHECK_OK(add(x, y, x));
  int64_t barriers = tpu_metrics_get("defer_flush::barrier");
  /* The same bytes read as int32 (a view of another dtype). */
  tpu_storage_t* out = NULL;
  CHECK_OK(tpu_storage_create(0, N * 4, &out));
  tpu_defer_operand_t p[1] = {{.storage = x}};
  CHECK_OK(tpu_defer_record(0, &g_neg_i32.op, p, &out));
  CHECK_EQ(tpu_metrics_get("defer_flush::barrier"), barriers + 1);
  int32_t got[N];
  CHECK_OK(tpu_storage_read_bytes(out, got, sizeof got));
  for (int i = 0; i < N; i++) {
    float f = (float)(i + 1 + i);
    int32_t bits;
    memcpy(&bits, &f, 4);
    CHECK_EQ(got[i], -bits);
  }
  tpu_storage_release(x);
  tpu_storage_release(y);
  tpu_storage_release(out);
}

static void test_a_broken_op_is_named_and_only_its_results_lost(void) {
  CHECK_OK(setup());
  tpu_storage_t *x = filled(0), *y = filled(1), *out = empty(), *bad = empty();
  CHECK_OK(add(x, y, out));
  tpu_defer_operand_t p[1] = {{.storage = out}};
  CHECK_OK(tpu_defer_record(0, &g_bad.op, p, &bad)); /* recording succeeds */
  float got[N];
  tpu_status_t s = tpu_storage_read_bytes(bad, got, sizeof got);
  CHECK(s != NULL);
  if (s) {
    CHECK_STR_CONTAINS(tpu_status_message(s), "deferred op bad (op 2 of a run of 2)");
    tpu_status_free(s);
  }
  /* The op before the broken one took effect (the run was replayed op by
   * op); the broken op's result is lost, naming it. */
  CHECK_OK(tpu_storage_read_bytes(out, got, sizeof got));
  for (int i = 0; i < N; i++) CHECK_EQ(got[i], (float)(2 * i + 1));
  s = tpu_storage_read_bytes(bad, got, sizeof got);
  CHECK(s != NULL);
  if (s) {
    CHECK_STR_CONTAINS(tpu_status_message(s), "were lost");
    CHECK_STR_CONTAINS(tpu_status_message(s), "deferred op bad");
    tpu_status_free(s);
  }
  /* Writing the storage again makes it usable. */
  CHECK_OK(add(x, y, out));
  CHECK_OK(tpu_storage_read_bytes(out, got, sizeof got));
  for (int i = 0; i < N; i++) CHECK_EQ(got[i], (float)(2 * i + 1));
  tpu_storage_release(x);
  tpu_storage_release(y);
  tpu_storage_release(out);
  tpu_storage_release(bad);
}

static void test_never_written_contents_are_zeros_made_in_the_run(void) {
  CHECK_OK(setup());
  tpu_storage_t *x = filled(1), *e = empty(), *out = empty(), *out2 = empty();
  CHECK(x && e && out && out2);
  for (int round = 0; round < 2; round++) {
    /* Alone (its own program cannot serve: no argument for e), then in a
     * run of two. */
    int64_t execs = tpu_metrics_get("executions");
    CHECK_OK(add(e, x, out));
    if (round) CHECK_OK(add(out, e, out2));
    float got[N];
    CHECK_OK(tpu_storage_read_bytes(round ? out2 : out, got, sizeof got));
    CHECK_EQ(tpu_metrics_get("executions"), execs + 1); /* no zero fill of its own */
    for (int i = 0; i < N; i++) CHECK_EQ(got[i], (float)(1 + i));
    CHECK(tpu_storage_buffer(e) == NULL); /* read, not written: still empty */
  }
  /* A run that fails is replayed op by op: its zeros are uploaded then. */
  tpu_storage_t* bad = empty();
  CHECK_OK(add(e, x, out));
  tpu_defer_operand_t p[1] = {{.storage = out}};
  CHECK_OK(tpu_defer_record(0, &g_bad.op, p, &bad));
  float got[N];
  tpu_status_t st = tpu_storage_read_bytes(bad, got, sizeof got);
  CHECK(st != NULL);
  tpu_status_free(st);
  CHECK_OK(tpu_storage_read_bytes(out, got, sizeof got));
  for (int i = 0; i < N; i++) CHECK_EQ(got[i], (float)(1 + i));
  tpu_storage_release(bad);
  /* The same structure with written contents is another program. */
  tpu_storage_t* five = filled(5);
  CHECK_OK(add(five, x, out));
  CHECK_OK(tpu_storage_read_bytes(out, got, sizeof got));
  for (int i = 0; i < N; i++) CHECK_EQ(got[i], (float)(6 + 2 * i));
  tpu_storage_release(x);
  tpu_storage_release(e);
  tpu_storage_release(out);
  tpu_storage_release(out2);
  tpu_storage_release(five);
}

TPU_TEST_MAIN(TPU_TEST(test_record_then_flush_on_read), TPU_TEST(test_same_structure_reuses_the_program),
              TPU_TEST(test_in_place_writes_and_reads_of_inputs), TPU_TEST(test_loop_and_cap_cuts),
              TPU_TEST(test_value_read_as_another_dtype_flushes_first),
              TPU_TEST(test_a_broken_op_is_named_and_only_its_results_lost),
              TPU_TEST(test_never_written_contents_are_zeros_made_in_the_run))
