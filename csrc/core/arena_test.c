/* The scratch arena: zeroed, aligned, distinct allocations across blocks,
 * large requests, overflow refused, reuse after free. Run under ASan
 * (make ctest-asan), every block must be freed. */
#include "arena.h"

#include <stdalign.h>
#include <stdint.h>

#include "testing.h"

static void test_zeroed_aligned_and_distinct(void) {
  tpu_arena_t arena;
  tpu_arena_init(&arena, 64); /* small blocks: the loop spans many */
  unsigned char* prev = NULL;
  for (size_t n = 1; n < 200; n++) {
    unsigned char* p = NULL;
    CHECK_OK(tpu_arena_alloc(&arena, n, 1, (void**)&p));
    CHECK(p != NULL);
    CHECK_EQ((uintptr_t)p % alignof(max_align_t), 0u);
    for (size_t i = 0; i < n; i++) CHECK_EQ(p[i], 0);
    memset(p, 0xAB, n); /* must not reach any other allocation */
    if (prev) CHECK_EQ(prev[0], 0xAB);
    prev = p;
  }
  tpu_arena_free(&arena);
}

static void test_typed_arrays(void) {
  tpu_arena_t arena;
  tpu_arena_init(&arena, 0);
  int64_t* a = NULL;
  double* b = NULL;
  CHECK_OK(tpu_arena_alloc(&arena, 100, sizeof *a, (void**)&a));
  CHECK_OK(tpu_arena_alloc(&arena, 100, sizeof *b, (void**)&b));
  for (int i = 0; i < 100; i++) {
    a[i] = i;
    b[i] = -i;
  }
  int64_t sum = 0;
  for (int i = 0; i < 100; i++) sum += a[i] + (int64_t)b[i];
  CHECK_EQ(sum, 0);
  tpu_arena_free(&arena);
}

static void test_larger_than_a_block(void) {
  tpu_arena_t arena;
  tpu_arena_init(&arena, 32);
  char* big = NULL;
  CHECK_OK(tpu_arena_alloc(&arena, 1 << 20, 1, (void**)&big));
  big[(1 << 20) - 1] = 1;
  char* small = NULL;
  CHECK_OK(tpu_arena_alloc(&arena, 8, 1, (void**)&small));
  CHECK(small != NULL);
  tpu_arena_free(&arena);
}

static void test_zero_count(void) {
  tpu_arena_t arena;
  tpu_arena_init(&arena, 0);
  void* p = NULL;
  CHECK_OK(tpu_arena_alloc(&arena, 0, 8, &p));
  CHECK(p != NULL);
  tpu_arena_free(&arena);
}

static void test_overflow_is_out_of_memory(void) {
  tpu_arena_t arena;
  tpu_arena_init(&arena, 0);
  void* p = (void*)&arena;
  tpu_status_t s = tpu_arena_alloc(&arena, SIZE_MAX / 2, 4, &p);
  CHECK_EQ(tpu_status_code(s), TPU_STATUS_RESOURCE_EXHAUSTED);
  CHECK(strcmp(tpu_status_message(s), "out of host memory") == 0);
  CHECK(p == NULL);
  tpu_status_free(s);
  s = tpu_arena_alloc(&arena, 1, SIZE_MAX - 4, &p);
  CHECK_EQ(tpu_status_code(s), TPU_STATUS_RESOURCE_EXHAUSTED);
  tpu_status_free(s);
  tpu_arena_free(&arena);
}

static void test_reuse_after_free(void) {
  tpu_arena_t arena;
  tpu_arena_init(&arena, 0);
  for (int round = 0; round < 3; round++) {
    int* p = NULL;
    CHECK_OK(tpu_arena_alloc(&arena, 10, sizeof *p, (void**)&p));
    CHECK_EQ(p[9], 0);
    p[9] = 7;
    tpu_arena_free(&arena);
    CHECK(arena.block == NULL);
  }
  tpu_arena_free(&arena); /* freeing an empty arena is fine */
}

TPU_TEST_MAIN(TPU_TEST(test_zeroed_aligned_and_distinct), TPU_TEST(test_typed_arrays),
              TPU_TEST(test_larger_than_a_block), TPU_TEST(test_zero_count),
              TPU_TEST(test_overflow_is_out_of_memory), TPU_TEST(test_reuse_after_free))
