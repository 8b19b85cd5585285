/* The eager engine end to end on the default plugin: the cache (a hit
 * needs no compile; new scalar values reuse the program; eager_call_test.c
 * tests the keys themselves), outputs into fresh buffers and through
 * views, the caller's per-entry data, and ops the table does not lower. */
#include "eager.h"

#include <stdlib.h>
#include <string.h>

#include "eager_testing.h"
#include "metrics.h"
#include "runtime.h"
#include "testing.h"

static tpu_storage_t* make_storage(const float* values, int64_t n) {
  tpu_storage_t* s = NULL;
  if (tpu_storage_create(0, sizeof(float) * (size_t)n, &s)) return NULL;
  tpu_status_t st = tpu_storage_write_host(s, values, TPU_DTYPE_FLOAT32, &n, 1, NULL);
  if (st) {
    tpu_status_free(st);
    tpu_storage_release(s);
    return NULL;
  }
  return s;
}

/* out = x + alpha * y into a fresh rank-1 output; checks the values. */
static void run_add(tpu_eager_entry_t** entry, tpu_storage_t* x, tpu_storage_t* y, double alpha,
                    const float* expect) {
  tpu_eager_arg_t args[3] = {tensor_arg(contiguous(x, 4)), tensor_arg(contiguous(y, 4)),
                             double_arg(alpha)};
  tpu_eager_call_t call = {.op_name = "aten::add.Tensor", .device = 0, .num_args = 3, .args = args};
  *entry = tpu_eager_lookup(&call);
  if (!*entry) {
    tpu_eager_output_t out;
    memset(&out, 0, sizeof out);
    out.alias_arg = -1;
    out.alias_list = -1;
    out.view = contiguous(NULL, 4).view;
    out.storage_numel = 4;
    CHECK_OK(tpu_eager_compile(&call, &out, 1, entry));
  }
  CHECK(!tpu_eager_entry_is_fallback(*entry));
  CHECK_EQ(tpu_eager_entry_num_outputs(*entry), 1);
  tpu_storage_t* fresh[1] = {NULL};
  CHECK_OK(tpu_storage_create(0, 4 * sizeof(float), &fresh[0]));
  tpu_status_t st = tpu_eager_execute(*entry, &call, fresh);
  float got[4] = {0};
  if (!st) st = tpu_storage_read_bytes(fresh[0], got, sizeof got);
  tpu_storage_release(fresh[0]);
  CHECK_OK(st);
  for (int i = 0; i < 4; i++) CHECK_EQ(got[i], expect[i]);
}

static void test_hit_reuses_the_program_for_new_scalars(void) {
  CHECK_OK(tpu_runtime_init(NULL));
  const float xs[4] = {1, 2, 3, 4}, ys[4] = {10, 20, 30, 40};
  tpu_storage_t* x = make_storage(xs, 4);
  tpu_storage_t* y = make_storage(ys, 4);
  CHECK(x && y);
  tpu_eager_entry_t *first = NULL, *second = NULL;
  const float e1[4] = {11, 22, 33, 44}, e2[4] = {-4, -8, -12, -16};
  run_add(&first, x, y, 1.0, e1);
  int64_t compiles = tpu_metrics_get("compiles");
  int64_t hits = tpu_metrics_get("eager_cache_hits");
  run_add(&second, x, y, -0.5, e2); /* a new alpha: same key, no compile */
  CHECK(first == second);
  CHECK_EQ(tpu_metrics_get("compiles"), compiles);
  CHECK_EQ(tpu_metrics_get("eager_cache_hits"), hits + 1);
  /* The same storage twice is another key (one slot, not two). */
  tpu_eager_entry_t* same = NULL;
  const float e3[4] = {3, 6, 9, 12};
  run_add(&same, x, x, 2.0, e3);
  CHECK(same != first);
  tpu_storage_release(x);
  tpu_storage_release(y);
}

/* add_ into every other element of a storage: the write lands only there
 * and the storage's next buffer holds it. */
static void test_write_through_a_strided_view(void) {
  CHECK_OK(tpu_runtime_init(NULL));
  const float base[8] = {0, 1, 2, 3, 4, 5, 6, 7}, ones[4] = {1, 1, 1, 1};
  tpu_storage_t* b = make_storage(base, 8);
  tpu_storage_t* o = make_storage(ones, 4);
  CHECK(b && o);
  tpu_eager_tensor_t view = contiguous(b, 4);
  view.view.strides[0] = 2;
  view.view.offset = 1;
  view.storage_numel = 8;
  tpu_eager_arg_t args[3] = {tensor_arg(view), tensor_arg(contiguous(o, 4)), double_arg(100)};
  tpu_eager_call_t call = {.op_name = "aten::add_.Tensor", .device = 0, .num_args = 3, .args = args};
  tpu_eager_entry_t* e = tpu_eager_lookup(&call);
  if (!e) {
    tpu_eager_output_t out;
    memset(&out, 0, sizeof out);
    out.alias_arg = 0;
    out.alias_list = -1;
    out.view = view.view;
    out.storage_numel = 8;
    CHECK_OK(tpu_eager_compile(&call, &out, 1, &e));
  }
  tpu_storage_t* fresh[1] = {NULL}; /* aliased: no fresh storage needed */
  CHECK_OK(tpu_eager_execute(e, &call, fresh));
  float got[8];
  CHECK_OK(tpu_storage_read_bytes(b, got, sizeof got));
  const float expect[8] = {0, 101, 2, 103, 4, 105, 6, 107};
  for (int i = 0; i < 8; i++) CHECK_EQ(got[i], expect[i]);
  tpu_storage_release(b);
  tpu_storage_release(o);
}

static int g_freed;
static void count_free(void* p) {
  g_freed++;
  free(p);
}

static void test_user_data_first_wins_and_is_freed_with_the_entry(void) {
  CHECK_OK(tpu_runtime_init(NULL));
  const float xs[4] = {1, 2, 3, 4};
  tpu_storage_t* x = make_storage(xs, 4);
  CHECK(x != NULL);
  tpu_eager_entry_t* e = NULL;
  const float e1[4] = {2, 4, 6, 8};
  run_add(&e, x, x, 1.0, e1);
  CHECK(e != NULL);
  CHECK(tpu_eager_entry_user(e) == NULL);
  g_freed = 0;
  int* a = malloc(sizeof *a);
  int* b = malloc(sizeof *b);
  CHECK(tpu_eager_entry_set_user(e, a, count_free) == a);
  CHECK(tpu_eager_entry_set_user(e, b, count_free) == a); /* b freed at once */
  CHECK_EQ(g_freed, 1);
  CHECK(tpu_eager_entry_user(e) == a);
  tpu_eager_cache_clear();
  CHECK_EQ(g_freed, 2);
  CHECK_EQ(tpu_eager_cache_size(), 0u);
  tpu_storage_release(x);
}

static void test_unlowered_op_is_a_cached_fallback(void) {
  CHECK_OK(tpu_runtime_init(NULL));
  const float xs[4] = {1, 2, 3, 4};
  tpu_storage_t* x = make_storage(xs, 4);
  CHECK(x != NULL);
  tpu_eager_arg_t args[1] = {tensor_arg(contiguous(x, 4))};
  tpu_eager_call_t call = {.op_name = "aten::no_such_op", .device = 0, .num_args = 1, .args = args};
  CHECK(tpu_eager_lookup(&call) == NULL);
  tpu_eager_output_t out;
  memset(&out, 0, sizeof out);
  out.alias_arg = -1;
  out.alias_list = -1;
  out.view = contiguous(NULL, 4).view;
  out.storage_numel = 4;
  tpu_eager_entry_t* e = NULL;
  CHECK_OK(tpu_eager_compile(&call, &out, 1, &e));
  CHECK(e && tpu_eager_entry_is_fallback(e));
  CHECK(tpu_eager_lookup(&call) == e); /* decided once per key */
  tpu_storage_t* fresh[1] = {NULL};
  tpu_status_t s = tpu_eager_execute(e, &call, fresh);
  CHECK(s != NULL);
  if (s) {
    CHECK_STR_CONTAINS(tpu_status_message(s), "aten::no_such_op");
    tpu_status_free(s);
  }
  tpu_storage_release(x);
}

TPU_TEST_MAIN(TPU_TEST(test_hit_reuses_the_program_for_new_scalars),
              TPU_TEST(test_write_through_a_strided_view),
              TPU_TEST(test_user_data_first_wins_and_is_freed_with_the_entry),
              TPU_TEST(test_unlowered_op_is_a_cached_fallback))
