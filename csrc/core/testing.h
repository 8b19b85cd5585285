/* A tiny test harness for the C core's *_test.c files: each test file is its
 * own executable; TPU_TEST functions run from main via TPU_TEST_MAIN. */
#ifndef TORCHTPU_CORE_TESTING_H_
#define TORCHTPU_CORE_TESTING_H_

#include <ftw.h>
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

/* Tests never write the user's executable cache: unless TORCHTPU_CACHE_DIR
 * is set, each test binary gets a fresh temporary one, removed at exit.
 * (Tests that fork must end their children with _exit, which skips it.) */
static char tpu_test_cache_dir_[64];

__attribute__((unused)) static int tpu_test_remove_entry_(
    const char* path, const struct stat* st, int type, struct FTW* ftw) {
  remove(path);
  return 0;
}

__attribute__((unused)) static void tpu_test_remove_cache_dir_(void) {
  if (tpu_test_cache_dir_[0])
    nftw(tpu_test_cache_dir_, tpu_test_remove_entry_, 16, FTW_DEPTH | FTW_PHYS);
}

__attribute__((unused)) static void tpu_test_use_temp_cache_dir_(void) {
  const char* set = getenv("TORCHTPU_CACHE_DIR");
  if (set && set[0]) return;
  const char* tmp = getenv("TMPDIR");
  snprintf(tpu_test_cache_dir_, sizeof tpu_test_cache_dir_, "%s/torchtpu-ctest-XXXXXX",
           tmp && tmp[0] == '/' && strlen(tmp) < 32 ? tmp : "/tmp");
  if (!mkdtemp(tpu_test_cache_dir_)) {
    tpu_test_cache_dir_[0] = '\0';
    setenv("TORCHTPU_CACHE", "0", 1); /* no temp dir: no disk cache at all */
    return;
  }
  setenv("TORCHTPU_CACHE_DIR", tpu_test_cache_dir_, 1);
  atexit(tpu_test_remove_cache_dir_);
}

#define TPU_TEST_MAIN(...)                                          \
  int tpu_test_failures_ = 0;                                       \
  int main(void) {                                                  \
    tpu_test_use_temp_cache_dir_();                                 \
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
