#include "repeat.h"

#include "testing.h"

static int push_all(tpu_repeat_t* r, const uint64_t* s, int n) {
  int last = 0;
  for (int i = 0; i < n; i++) {
    last = tpu_repeat_push(r, s[i]);
    if (last && i != n - 1) return -(i + 1); /* fired early, at i */
  }
  return last;
}

static void test_detects_step_repeat_after_warmup(void) {
  tpu_repeat_t* r = NULL;
  CHECK_OK(tpu_repeat_create(4, 0, &r));
  /* warm-up W (2 ops) then step S (6 ops, with an op recurring inside). */
  uint64_t seq[] = {100, 101, 1, 2, 3, 2, 4, 5, 1, 2, 3, 2, 4, 5};
  int got = push_all(r, seq, 14);
  CHECK_EQ(got, 6);
  tpu_repeat_destroy(r);
}

static void test_ignores_short_periods(void) {
  tpu_repeat_t* r = NULL;
  CHECK_OK(tpu_repeat_create(4, 0, &r));
  /* A per-parameter loop of period 2 never reaches min_period... */
  uint64_t seq[] = {7, 8, 7, 8, 7, 8, 7, 8};
  for (int i = 0; i < 6; i++) CHECK_EQ(tpu_repeat_push(r, seq[i]), 0);
  /* ...but period 4 (7 8 7 8 | 7 8 7 8) does: the shortest qualifying one. */
  tpu_repeat_reset(r);
  CHECK_EQ(push_all(r, seq, 8), 4);
  tpu_repeat_destroy(r);
}

static void test_min_period_square(void) {
  tpu_repeat_t* r = NULL;
  CHECK_OK(tpu_repeat_create(4, 0, &r));
  uint64_t seq[] = {1, 2, 3, 4, 1, 2, 3, 4};
  CHECK_EQ(push_all(r, seq, 8), 4);
  /* After a reset nothing of the old sequence remains. */
  tpu_repeat_reset(r);
  CHECK_EQ(tpu_repeat_length(r), 0);
  uint64_t half[] = {1, 2, 3, 4};
  CHECK_EQ(push_all(r, half, 4), 0);
  tpu_repeat_destroy(r);
}

static void test_no_false_positive_on_near_repeat(void) {
  tpu_repeat_t* r = NULL;
  CHECK_OK(tpu_repeat_create(3, 0, &r));
  uint64_t seq[] = {1, 2, 3, 4, 1, 2, 9, 4};
  for (int i = 0; i < 8; i++) CHECK_EQ(tpu_repeat_push(r, seq[i]), 0);
  tpu_repeat_destroy(r);
}

static void test_long_sequences(void) {
  tpu_repeat_t* r = NULL;
  CHECK_OK(tpu_repeat_create(32, 0, &r));
  /* A 300-op step drawn from 20 distinct ops (so each recurs ~15 times),
   * after 50 warm-up ops: the cut comes exactly at the end of the second
   * step. */
  uint64_t step[300];
  uint64_t x = 12345;
  for (int k = 0; k < 300; k++) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    step[k] = (x >> 33) % 20;
  }
  int fired_at = -1, period = 0;
  for (int i = 0; i < 50 + 3 * 300 && fired_at < 0; i++) {
    uint64_t sym = i < 50 ? (uint64_t)(1000 + i) : step[(i - 50) % 300];
    if (i >= 50 && (i - 50) % 300 == 299) sym = 555; /* the step's last op */
    int L = tpu_repeat_push(r, sym);
    if (L) {
      fired_at = i;
      period = L;
    }
  }
  CHECK_EQ(period, 300);
  CHECK_EQ(fired_at, 50 + 2 * 300 - 1);
  tpu_repeat_destroy(r);
}

/* Layers repeat inside a step: with any_after, a square that is not the
 * whole sequence is ignored until the sequence is that long. */
static void test_whole_sequence_squares_until_any_after(void) {
  tpu_repeat_t* r = NULL;
  CHECK_OK(tpu_repeat_create(3, 20, &r));
  /* emb, layer(1 2 3), layer(1 2 3), head: no cut at the layer square. */
  uint64_t step[] = {9, 1, 2, 3, 1, 2, 3, 8};
  for (int i = 0; i < 8; i++) CHECK_EQ(tpu_repeat_push(r, step[i]), 0);
  /* The second step makes the whole sequence a square: cut, period 8. */
  for (int i = 0; i < 7; i++) CHECK_EQ(tpu_repeat_push(r, step[i]), 0);
  CHECK_EQ(tpu_repeat_push(r, step[7]), 8);
  /* A one-off warm-up op first: no whole-sequence square until any_after,
   * then the first square anywhere cuts: from length 20 on, the loop's. */
  tpu_repeat_reset(r);
  CHECK_EQ(tpu_repeat_push(r, 77), 0);
  int fired = 0, at = 0;
  for (int k = 0; k < 40 && !fired; k++) {
    fired = tpu_repeat_push(r, step[k % 8]);
    at = tpu_repeat_length(r);
  }
  CHECK_EQ(fired, 8);
  CHECK_EQ(at, 20);
  tpu_repeat_destroy(r);
}

TPU_TEST_MAIN(TPU_TEST(test_whole_sequence_squares_until_any_after), TPU_TEST(test_detects_step_repeat_after_warmup), TPU_TEST(test_ignores_short_periods),
              TPU_TEST(test_min_period_square), TPU_TEST(test_no_false_positive_on_near_repeat),
              TPU_TEST(test_long_sequences))
