#include "spmd.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "env.h"
#include "hash.h"
#include "metrics.h"
#include "runtime.h"

struct tpu_spmd_program_s {
  uint64_t hash;
  char* text;
  size_t len;
  int n;
  int devices[TPU_SPMD_MAX_DEVICES];
  tpu_executable_t* executable;
  struct tpu_spmd_program_s* next;
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static tpu_spmd_program_t* g_programs;

static uint64_t key_hash(const char* text, size_t len, const int* devices, int n) {
  uint64_t h = tpu_hash_bytes(text, len);
  return h ^ (tpu_hash_bytes(devices, (size_t)n * sizeof *devices) * 0x9e3779b97f4a7c15ull);
}

static tpu_spmd_program_t* find(uint64_t hash, const char* text, size_t len, const int* devices,
                                int n) {
  for (tpu_spmd_program_t* p = g_programs; p; p = p->next)
    if (p->hash == hash && p->len == len && p->n == n &&
        memcmp(p->devices, devices, (size_t)n * sizeof *devices) == 0 &&
        memcmp(p->text, text, len) == 0)
      return p;
  return NULL;
}

static tpu_status_t check_devices(tpu_client_t* client, const int* devices, int n, int* ids) {
  if (!client)
    return tpu_status_make(TPU_STATUS_FAILED_PRECONDITION, "spmd: the runtime is not initialized");
  if (!devices || n < 1 || n > TPU_SPMD_MAX_DEVICES || n > tpu_client_device_count(client))
    return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT,
                           "spmd: %d devices asked for; the client has %d (at most %d)", n,
                           tpu_client_device_count(client), TPU_SPMD_MAX_DEVICES);
  for (int i = 0; i < n; i++) {
    for (int j = 0; j < i; j++)
      if (devices[j] == devices[i])
        return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT,
                               "spmd: device %d is listed twice (partitions %d and %d)",
                               devices[i], j, i);
    tpu_device_t* device = NULL;
    TPU_RETURN_IF_ERROR(tpu_client_device(client, devices[i], &device));
    ids[i] = tpu_device_id(device);
  }
  return NULL;
}

tpu_status_t tpu_spmd_program_get(const char* text, size_t len, const int* devices, int n,
                                  tpu_spmd_program_t** out_program) {
  *out_program = NULL;
  tpu_client_t* client = tpu_runtime_client();
  int ids[TPU_SPMD_MAX_DEVICES];
  TPU_RETURN_IF_ERROR(check_devices(client, devices, n, ids));
  uint64_t hash = key_hash(text, len, devices, n);
  pthread_mutex_lock(&g_lock);
  tpu_spmd_program_t* hit = find(hash, text, len, devices, n);
  pthread_mutex_unlock(&g_lock);
  if (hit) {
    TPU_METRICS_BUMP("spmd_cache_hits", 1);
    *out_program = hit;
    return NULL;
  }
  if (tpu_env_log_enabled("programs"))
    fprintf(stderr, "torchtpu: spmd program on %d devices:\n%.*s\n", n, (int)len, text);
  /* One replica, n partitions: XLA's partitioner splits the program by the
   * parameters' shardings (a replicated program would run it whole on
   * every device). Not through the disk cache, whose entries are
   * single-device programs. */
  tpu_compile_options_t options = {.num_replicas = 1, .num_partitions = n, .spmd = true,
                                   .device_ids = ids, .num_device_ids = n};
  tpu_executable_t* executable = NULL;
  tpu_status_t s = tpu_executable_compile(client, text, len, &options, &executable);
  if (s) return tpu_status_annotate(s, "compiling a program partitioned over %d devices: ", n);
  TPU_METRICS_BUMP("spmd_compiles", 1);
  for (int i = 0; i < n; i++) {
    int placed = tpu_executable_device_index(executable, i);
    if (placed != devices[i]) {
      tpu_executable_destroy(executable);
      return tpu_status_make(TPU_STATUS_INTERNAL,
                             "spmd: the plugin placed partition %d on device %d, not on %d", i,
                             placed, devices[i]);
    }
  }
  tpu_spmd_program_t* p = calloc(1, sizeof *p);
  char* copy = malloc(len + 1);
  if (!p || !copy) {
    free(p);
    free(copy);
    tpu_executable_destroy(executable);
    return tpu_status_oom("caching a partitioned program");
  }
  memcpy(copy, text, len);
  copy[len] = '\0';
  *p = (tpu_spmd_program_t){.hash = hash, .text = copy, .len = len, .n = n,
                            .executable = executable};
  memcpy(p->devices, devices, (size_t)n * sizeof *devices);
  pthread_mutex_lock(&g_lock);
  tpu_spmd_program_t* raced = find(hash, text, len, devices, n);
  if (!raced) {
    p->next = g_programs;
    g_programs = p;
  }
  pthread_mutex_unlock(&g_lock);
  if (raced) { /* another thread compiled it meanwhile: keep theirs */
    tpu_executable_destroy(p->executable);
    free(p->text);
    free(p);
    p = raced;
  }
  *out_program = p;
  return NULL;
}

int tpu_spmd_program_num_devices(const tpu_spmd_program_t* p) { return p->n; }

int tpu_spmd_program_num_outputs(const tpu_spmd_program_t* p) {
  return tpu_executable_num_outputs(p->executable);
}

tpu_hlo_type_t tpu_spmd_program_output_type(const tpu_spmd_program_t* p, int k) {
  return tpu_hlo_type_make(tpu_executable_output_dtype(p->executable, k),
                           tpu_executable_output_rank(p->executable, k),
                           tpu_executable_output_dims(p->executable, k));
}

tpu_status_t tpu_spmd_program_run(tpu_spmd_program_t* p, tpu_storage_t* const* inputs,
                                  const tpu_hlo_type_t* input_types, int nargs,
                                  tpu_storage_t* const* outputs, int nouts) {
  int n = p->n;
  if (nargs < 0 || nouts != tpu_spmd_program_num_outputs(p) || (nargs && (!inputs || !input_types)) ||
      (nouts && !outputs))
    return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT,
                           "spmd: the program returns %d values, the call expects %d",
                           tpu_spmd_program_num_outputs(p), nouts);
  for (int d = 0; d < n; d++) {
    for (int i = 0; i < nargs; i++)
      if (tpu_storage_device(inputs[d * nargs + i]) != p->devices[d])
        return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT,
                               "spmd: argument %d of partition %d is on device %d, not on %d", i,
                               d, tpu_storage_device(inputs[d * nargs + i]), p->devices[d]);
    for (int k = 0; k < nouts; k++)
      if (tpu_storage_device(outputs[d * nouts + k]) != p->devices[d])
        return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT,
                               "spmd: output %d of partition %d is on device %d, not on %d", k,
                               d, tpu_storage_device(outputs[d * nouts + k]), p->devices[d]);
  }
  size_t na = (size_t)n * (size_t)nargs + 1, no = (size_t)n * (size_t)nouts + 1;
  tpu_buffer_t** args = calloc(na, sizeof *args);
  tpu_buffer_t** results = calloc(no, sizeof *results);
  tpu_buffer_t* const** lists = calloc((size_t)n, sizeof *lists);
  tpu_event_t** done = calloc((size_t)n, sizeof *done);
  tpu_status_t s = NULL;
  if (!args || !results || !lists || !done) s = tpu_status_oom("running a partitioned program");
  /* buffer_as settles deferred contents and retypes a storage last
   * written with another shape (a flat eager result). */
  for (int j = 0; !s && j < n * nargs; j++) {
    const tpu_hlo_type_t* t = &input_types[j];
    s = tpu_storage_buffer_as(inputs[j], t->dtype, t->dims, t->rank, &args[j]);
  }
  for (int d = 0; !s && d < n; d++) lists[d] = args + (size_t)d * (size_t)nargs;
  tpu_runtime_set_op_label("a partitioned graph");
  if (!s) s = tpu_executable_execute_multi(p->executable, n, lists, nargs, results, done);
  tpu_runtime_set_op_label(NULL);
  if (!s) {
    TPU_METRICS_BUMP("spmd_executions", 1);
    for (int d = 0; d < n; d++) tpu_runtime_track(p->devices[d], done[d]);
    for (int j = 0; j < n * nouts; j++) {
      tpu_buffer_set_producer(results[j], "a partitioned graph");
      tpu_status_t w = tpu_storage_set_buffer(outputs[j], results[j]); /* owns it */
      if (w && !s) s = w;
      else tpu_status_free(w);
    }
  }
  free(args);
  free(results);
  free(lists);
  free(done);
  return s;
}

void tpu_spmd_cache_clear(void) {
  pthread_mutex_lock(&g_lock);
  tpu_spmd_program_t* p = g_programs;
  g_programs = NULL;
  pthread_mutex_unlock(&g_lock);
  while (p) {
    tpu_spmd_program_t* next = p->next;
    tpu_executable_destroy(p->executable);
    free(p->text);
    free(p);
    p = next;
  }
}
