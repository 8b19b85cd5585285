/* A tiny test harness for the C core's *_test.c files: each test file is its
 * own executable; TPU_TEST functions run from main via TPU_TEST_MAIN. */
#ifndef TORCHTPU_CORE_TESTING_H_
#define TORCHTPU_CORE_TESTING_H_

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "status.h"

typedef void (*tpu_test_fn_t)(void);
extern int tpu_test_failures_;

#define TPU_CHECK_(cond, text)                                              \
  do {                                                                      \
    if (!(cond)) {                                                          \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, text); \
      tpu_test_failures_++;                                                 \
      return;                                                               \
    }                                                                       \
  } while (0)

#define CHECK(cond) TPU_CHECK_(cond, #cond)
#define CHECK_EQ(a, b) TPU_CHECK_((a) == (b), #a " == " #b)
#define CHECK_STR_CONTAINS(haystack, needle)                       \
  TPU_CHECK_((haystack) && strstr((haystack), (needle)) != NULL, \
             #haystack " contains " #needle)

/* Fails the test (and frees the status) unless expr returns OK. */
#define CHECK_OK(expr)                                                   \
  do {                                                                   \
    tpu_status_t s_ = (expr);                                            \
    if (s_) {                                                            \
      fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #expr, \
              tpu_status_message(s_));                                   \
      tpu_status_free(s_);                                               \
      tpu_test_failures_++;                                              \
      return;                                                            \
    }                                                                    \
  } while (0)

#define TPU_TEST_MAIN(...)                                          \
  int tpu_test_failures_ = 0;                                       \
  int main(void) {                                                  \
    static const struct {                                           \
      const char* name;                                             \
      tpu_test_fn_t fn;                                             \
    } tests[] = {__VA_ARGS__};                                      \
    int run = 0;                                                    \
    for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++) {   \
      int before = tpu_test_failures_;                              \
      tests[i].fn();                                                \
      run++;                                                        \
      printf("[%s] %s\n", tpu_test_failures_ == before ? "ok" : "FAIL", \
             tests[i].name);                                        \
    }                                                               \
    printf("%d tests, %d failed\n", run, tpu_test_failures_);       \
    return tpu_test_failures_ ? 1 : 0;                              \
  }
#define TPU_TEST(fn) {#fn, fn}

#endif
