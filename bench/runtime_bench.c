/* Runtime overheads of the PJRT plugin through our C layer, without Python:
 * dlopen + client creation, compile of a one-op program, median execute
 * overhead of a cached one-op program, host<->device copy bandwidth.
 * Built and run by `make bench`. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/lower/lowering.h"
#include "core/pjrt/pjrt.h"
#include "core/status.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

static double median(double* v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return v[n / 2];
}

#define DIE_IF(expr)                                                    \
  do {                                                                  \
    tpu_status_t s_ = (expr);                                           \
    if (s_) {                                                           \
      fprintf(stderr, "%s: %s\n", #expr, tpu_status_message(s_));       \
      exit(1);                                                          \
    }                                                                   \
  } while (0)

int main(void) {
  setenv("TF_CPP_MIN_LOG_LEVEL", "1", 0); /* keep XLA's INFO lines quiet */
  char path[PATH_MAX];
  DIE_IF(tpu_plugin_resolve_path(NULL, path, sizeof path));
  double t0 = now_s();
  tpu_plugin_t* plugin = NULL;
  DIE_IF(tpu_plugin_load(path, &plugin));
  double t1 = now_s();
  tpu_client_t* client = NULL;
  tpu_client_options_t options = {.cpu_device_count = 1};
  DIE_IF(tpu_client_create(plugin, &options, &client));
  double t2 = now_s();
  printf("plugin: %s\n", path);
  printf("platform: %s, xla_version %s, PJRT API %d.%d\n",
         tpu_client_platform_name(client), tpu_plugin_attribute(plugin, "xla_version"),
         tpu_plugin_api_major(plugin), tpu_plugin_api_minor(plugin));
  printf("dlopen + initialize:        %8.1f ms\n", (t1 - t0) * 1e3);
  printf("client create:              %8.1f ms\n", (t2 - t1) * 1e3);

  /* A one-op program: f32[1] + f32[1]. */
  int64_t one = 1;
  tpu_hlo_type_t t = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 1, &one);
  char* text = NULL;
  size_t len = 0;
  tpu_lower_arg_t add_args[2] = {{.kind = TPU_ARG_TENSOR, .type = t}, {.kind = TPU_ARG_TENSOR, .type = t}};
  DIE_IF(tpu_lower_program_plain("aten::add.Tensor", add_args, 2, NULL, &t, 1, &text, &len));
  double compile[5];
  tpu_executable_t* exe = NULL;
  for (int i = 0; i < 5; i++) {
    if (exe) tpu_executable_destroy(exe);
    double c0 = now_s();
    DIE_IF(tpu_executable_compile(client, text, len, NULL, &exe));
    compile[i] = now_s() - c0;
  }
  printf("compile one-op program:     %8.2f ms (median of 5)\n", median(compile, 5) * 1e3);
  free(text);

  float x = 1.5f;
  tpu_buffer_t* a = NULL;
  DIE_IF(tpu_buffer_from_host(client, 0, &x, TPU_DTYPE_FLOAT32, &one, 1, NULL, &a));
  tpu_buffer_t* args[2] = {a, a};
  enum { N = 2000 };
  static double exec_t[N], roundtrip_t[N];
  for (int i = 0; i < N; i++) {
    tpu_buffer_t* out = NULL;
    tpu_event_t* done = NULL;
    double e0 = now_s();
    DIE_IF(tpu_executable_execute(exe, 0, args, 2, NULL, &out, &done));
    double e1 = now_s();
    DIE_IF(tpu_event_await(done));
    double e2 = now_s();
    exec_t[i] = e1 - e0;
    roundtrip_t[i] = e2 - e0;
    tpu_event_destroy(done);
    tpu_buffer_destroy(out);
  }
  printf("execute (enqueue), cached:  %8.2f us (median of %d)\n", median(exec_t, N) * 1e6, N);
  printf("execute + wait, cached:     %8.2f us (median of %d)\n", median(roundtrip_t, N) * 1e6, N);
  tpu_buffer_destroy(a);

  /* Bandwidth: 64 MiB float32 each way, median of 5. */
  int64_t n = 16 * 1024 * 1024;
  size_t bytes = (size_t)n * 4;
  float* host = malloc(bytes);
  for (int64_t i = 0; i < n; i++) host[i] = (float)i;
  double h2d[5], d2h[5];
  for (int r = 0; r < 5; r++) {
    tpu_buffer_t* b = NULL;
    double b0 = now_s();
    DIE_IF(tpu_buffer_from_host(client, 0, host, TPU_DTYPE_FLOAT32, &n, 1, NULL, &b));
    DIE_IF(tpu_buffer_await_ready(b));
    double b1 = now_s();
    DIE_IF(tpu_buffer_to_host(b, host, bytes));
    double b2 = now_s();
    h2d[r] = (double)bytes / (b1 - b0) / 1e9;
    d2h[r] = (double)bytes / (b2 - b1) / 1e9;
    tpu_buffer_destroy(b);
  }
  printf("host->device bandwidth:     %8.2f GB/s (64 MiB, median of 5)\n", median(h2d, 5));
  printf("device->host bandwidth:     %8.2f GB/s (64 MiB, median of 5)\n", median(d2h, 5));
  free(host);
  tpu_executable_destroy(exe);
  tpu_client_destroy(client);
  tpu_plugin_release(plugin);
  return 0;
}
