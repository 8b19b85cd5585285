#include "storage.h"

#include "memory.h"
#include "runtime.h"
#include "testing.h"

static void test_fresh_storage_reads_zero_and_counts_bytes(void) {
  CHECK_OK(tpu_runtime_init(NULL));
  tpu_memory_stats_t before, during, after;
  tpu_memory_stats_get(0, &before);
  tpu_storage_t* s = NULL;
  CHECK_OK(tpu_storage_create(0, 24, &s));
  tpu_memory_stats_get(0, &during);
  CHECK_EQ(during.allocated_bytes - before.allocated_bytes, 24);
  CHECK(tpu_storage_buffer(s) == NULL);
  unsigned char out[24];
  memset(out, 0xAB, sizeof out);
  CHECK_OK(tpu_storage_read_bytes(s, out, sizeof out));
  for (int i = 0; i < 24; i++) CHECK_EQ(out[i], 0);
  CHECK_EQ(tpu_storage_device_from_address(tpu_storage_address(s)), 0);
  tpu_storage_release(s);
  tpu_memory_stats_get(0, &after);
  CHECK_EQ(after.allocated_bytes, before.allocated_bytes);
}

/* A deferred value whose last holder is its run (tpu_storage_retain by the
 * run, defer_value set) returns its bytes when the user's reference goes,
 * and not again when the run lets go; one with contents (a buffer) keeps
 * them until the run lets go, since the run may still read them. */
static void test_deferred_value_held_only_by_its_run_returns_its_bytes(void) {
  CHECK_OK(tpu_runtime_init(NULL));
  tpu_memory_stats_t before, mid, after;
  tpu_memory_stats_get(0, &before);
  tpu_storage_t* s = NULL;
  CHECK_OK(tpu_storage_create(0, 64, &s));
  tpu_storage_retain(s); /* the run's reference */
  tpu_storage_set_defer_value(s, 0);
  tpu_storage_release(s); /* the tensor dies inside the run */
  tpu_memory_stats_get(0, &mid);
  CHECK_EQ(mid.allocated_bytes, before.allocated_bytes);
  tpu_storage_set_defer_value(s, -1);
  tpu_storage_release(s); /* the run flushes */
  tpu_memory_stats_get(0, &after);
  CHECK_EQ(after.allocated_bytes, before.allocated_bytes);

  float v[16] = {0};
  int64_t n = 16;
  CHECK_OK(tpu_storage_create(0, sizeof v, &s));
  CHECK_OK(tpu_storage_write_host(s, v, TPU_DTYPE_FLOAT32, &n, 1, NULL));
  tpu_storage_retain(s);
  tpu_storage_set_defer_value(s, 0);
  tpu_storage_release(s);
  tpu_memory_stats_get(0, &mid);
  CHECK_EQ(mid.allocated_bytes - before.allocated_bytes, (int64_t)sizeof v);
  tpu_storage_set_defer_value(s, -1);
  tpu_storage_release(s);
  tpu_memory_stats_get(0, &after);
  CHECK_EQ(after.allocated_bytes, before.allocated_bytes);
}

static void test_write_then_read_and_typed_buffer(void) {
  CHECK_OK(tpu_runtime_init(NULL));
  tpu_storage_t* s = NULL;
  CHECK_OK(tpu_storage_create(0, 6 * sizeof(float), &s));
  float host[6] = {1.5f, -2, 3, 4e30f, -0.0f, 7};
  int64_t dims[2] = {2, 3};
  CHECK_OK(tpu_storage_write_host(s, host, TPU_DTYPE_FLOAT32, dims, 2, NULL));
  CHECK_EQ(tpu_buffer_dtype(tpu_storage_buffer(s)), TPU_DTYPE_FLOAT32);
  float back[6];
  CHECK_OK(tpu_storage_read_bytes(s, back, sizeof back));
  CHECK(memcmp(host, back, sizeof host) == 0);
  /* Wrong coverage is refused and leaves the contents alone. */
  int64_t small[1] = {5};
  tpu_status_t st = tpu_storage_write_host(s, host, TPU_DTYPE_FLOAT32, small, 1, NULL);
  CHECK(st != NULL);
  CHECK_STR_CONTAINS(tpu_status_message(st), "does not cover");
  tpu_status_free(st);
  CHECK_OK(tpu_storage_read_bytes(s, back, sizeof back));
  CHECK(memcmp(host, back, sizeof host) == 0);
  tpu_storage_release(s);
}

/* A byte range reads that part of the contents (of a 2-D typed buffer too,
 * and as zeros before any write); one past the end is refused. */
static void test_read_range(void) {
  CHECK_OK(tpu_runtime_init(NULL));
  tpu_storage_t* s = NULL;
  CHECK_OK(tpu_storage_create(0, 6 * sizeof(float), &s));
  float zeros[2] = {1, 1};
  CHECK_OK(tpu_storage_read_range(s, 4, zeros, sizeof zeros));
  CHECK(zeros[0] == 0 && zeros[1] == 0);
  float host[6] = {1.5f, -2, 3, 4e30f, -0.0f, 7};
  int64_t dims[2] = {2, 3};
  CHECK_OK(tpu_storage_write_host(s, host, TPU_DTYPE_FLOAT32, dims, 2, NULL));
  float part[3];
  CHECK_OK(tpu_storage_read_range(s, 2 * sizeof(float), part, sizeof part));
  CHECK(memcmp(part, host + 2, sizeof part) == 0);
  tpu_status_t st = tpu_storage_read_range(s, 5 * sizeof(float), part, sizeof part);
  CHECK_EQ(tpu_status_code(st), TPU_STATUS_OUT_OF_RANGE);
  tpu_status_free(st);
  tpu_storage_release(s);
}
static void test_copy_prefix_grows_and_shrinks(void) {
  CHECK_OK(tpu_runtime_init(NULL));
  tpu_storage_t *a = NULL, *b = NULL, *c = NULL;
  CHECK_OK(tpu_storage_create(0, 8, &a));
  CHECK_OK(tpu_storage_create(0, 12, &b));
  CHECK_OK(tpu_storage_create(0, 4, &c));
  int32_t va[2] = {11, 22};
  CHECK_OK(tpu_storage_write_bytes(a, va, TPU_DTYPE_INT32));
  CHECK_OK(tpu_storage_copy_prefix(b, a));
  CHECK_OK(tpu_storage_copy_prefix(c, a));
  int32_t vb[3], vc[1];
  CHECK_OK(tpu_storage_read_bytes(b, vb, sizeof vb));
  CHECK_OK(tpu_storage_read_bytes(c, vc, sizeof vc));
  CHECK_EQ(vb[0], 11);
  CHECK_EQ(vb[1], 22);
  CHECK_EQ(vb[2], 0);
  CHECK_EQ(vc[0], 11);
  tpu_storage_release(a);
  tpu_storage_release(b);
  tpu_storage_release(c);
}

static void test_bad_device_is_an_error(void) {
  CHECK_OK(tpu_runtime_init(NULL));
  tpu_storage_t* s = NULL;
  tpu_status_t st = tpu_storage_create(99, 4, &s);
  CHECK(st != NULL);
  CHECK_STR_CONTAINS(tpu_status_message(st), "out of range");
  tpu_status_free(st);
}

static void test_shutdown(void) { tpu_runtime_shutdown(); }

TPU_TEST_MAIN(TPU_TEST(test_fresh_storage_reads_zero_and_counts_bytes),
              TPU_TEST(test_deferred_value_held_only_by_its_run_returns_its_bytes),
              TPU_TEST(test_read_range),
              TPU_TEST(test_write_then_read_and_typed_buffer),
              TPU_TEST(test_copy_prefix_grows_and_shrinks),
              TPU_TEST(test_bad_device_is_an_error), TPU_TEST(test_shutdown))
