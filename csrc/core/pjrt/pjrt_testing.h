/* Helpers shared by the PJRT layer's *_test.c files (header-only: each test
 * is its own executable). */
#ifndef TORCHTPU_CORE_PJRT_PJRT_TESTING_H_
#define TORCHTPU_CORE_PJRT_PJRT_TESTING_H_

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "../testing.h"
#include "internal.h"
#include "pjrt.h"

/* The default plugin, loaded once per test binary and never released
 * (plugins live for the process anyway). NULL after printing why. */
__attribute__((unused)) static tpu_plugin_t* test_plugin(void) {
  static tpu_plugin_t* plugin;
  if (plugin) return plugin;
  char path[4096];
  tpu_status_t s = tpu_plugin_resolve_path(NULL, path, sizeof path);
  if (!s) s = tpu_plugin_load(path, &plugin);
  if (s) {
    fprintf(stderr, "cannot load the default plugin: %s\n",
            tpu_status_message(s));
    tpu_status_free(s);
    return NULL;
  }
  return plugin;
}

__attribute__((unused)) static tpu_client_t* test_client(int64_t devices) {
  tpu_plugin_t* plugin = test_plugin();
  if (!plugin) return NULL;
  tpu_client_options_t options = {.cpu_device_count = devices};
  tpu_client_t* client = NULL;
  tpu_status_t s = tpu_client_create(plugin, &options, &client);
  if (s) {
    fprintf(stderr, "cannot create a client: %s\n", tpu_status_message(s));
    tpu_status_free(s);
    return NULL;
  }
  return client;
}

/* Every PJRT handle the layer created has been destroyed. */
__attribute__((unused)) static int test_no_live_handles(void) {
  int ok = 1;
  static const char* names[] = {"client", "buffer", "executable", "event"};
  for (int k = 0; k < TPU_PJRT_HANDLE_KIND_COUNT; k++) {
    long n = tpu_pjrt_live((tpu_pjrt_handle_kind_t)k);
    if (n != 0) {
      fprintf(stderr, "%ld live %s handle(s)\n", n, names[k]);
      ok = 0;
    }
  }
  return ok;
}

__attribute__((unused)) static double test_now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

#define CHECK_STATUS_CODE(expr, code)                                        \
  do {                                                                       \
    tpu_status_t s2_ = (expr);                                               \
    if (tpu_status_code(s2_) != (code)) {                                    \
      fprintf(stderr, "%s:%d: %s gave %s (%s), expected %s\n", __FILE__,     \
              __LINE__, #expr, tpu_status_code_name(tpu_status_code(s2_)),   \
              tpu_status_message(s2_), tpu_status_code_name(code));          \
      tpu_status_free(s2_);                                                  \
      tpu_test_failures_++;                                                  \
      return;                                                                \
    }                                                                        \
    tpu_status_free(s2_);                                                    \
  } while (0)

#endif
