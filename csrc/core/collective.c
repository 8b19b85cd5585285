#include "collective.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "env.h"
#include "hlo/builder.h"
#include "metrics.h"
#include "runtime.h"

typedef tpu_collective_kind_t kind_t;
#define ALL_REDUCE TPU_COLLECTIVE_ALL_REDUCE
#define ALL_GATHER TPU_COLLECTIVE_ALL_GATHER
#define REDUCE_SCATTER TPU_COLLECTIVE_REDUCE_SCATTER

static const char* const kKindNames[] = {"all_reduce", "all_gather", "reduce_scatter"};

const char* tpu_collective_op_name(tpu_collective_op_t op) {
  static const char* const names[] = {"sum", "prod", "min", "max", "avg"};
  return (unsigned)op < sizeof names / sizeof names[0] ? names[op] : "unknown";
}

/* ---- the cache ------------------------------------------------------------------
 * One program per (client, collective, op, dtype, shape, ordered devices):
 * the device list is compiled into the program's device assignment.
 * Collective shapes are few (a model's gradient buckets), so a list. */
typedef struct collective_key_s {
  tpu_client_t* client;
  kind_t kind;
  tpu_collective_op_t op; /* SUM for all_gather */
  tpu_dtype_t dtype;
  int rank;
  int64_t dims[TPU_MAX_RANK];
  int n;
  const int* devices; /* n client device indices, in rank order */
} collective_key_t;

typedef struct entry_s {
  collective_key_t key; /* key.devices owned */
  tpu_executable_t* executable;
  struct entry_s* next;
} entry_t;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static entry_t* g_entries;
static size_t g_count;

static bool same_key(const collective_key_t* a, const collective_key_t* b) {
  return a->client == b->client && a->kind == b->kind && a->op == b->op &&
         a->dtype == b->dtype && a->rank == b->rank && a->n == b->n &&
         memcmp(a->dims, b->dims, (size_t)a->rank * sizeof(int64_t)) == 0 &&
         memcmp(a->devices, b->devices, (size_t)a->n * sizeof(int)) == 0;
}

/* Under g_lock. */
static tpu_executable_t* find(const collective_key_t* key) {
  for (entry_t* e = g_entries; e; e = e->next)
    if (same_key(&e->key, key)) return e->executable;
  return NULL;
}

size_t tpu_collective_cache_size(void) {
  pthread_mutex_lock(&g_lock);
  size_t n = g_count;
  pthread_mutex_unlock(&g_lock);
  return n;
}

void tpu_collective_cache_clear(void) {
  pthread_mutex_lock(&g_lock);
  entry_t* e = g_entries;
  g_entries = NULL;
  g_count = 0;
  pthread_mutex_unlock(&g_lock);
  while (e) {
    entry_t* next = e->next;
    tpu_executable_destroy(e->executable);
    free((int*)e->key.devices);
    free(e);
    e = next;
  }
}

/* Keeps `executable` (taken) under `key` (copied) and returns the cached
 * one: a thread that compiled the same key first wins, ours is destroyed. */
static tpu_status_t insert(const collective_key_t* key, tpu_executable_t** executable) {
  entry_t* entry = calloc(1, sizeof *entry);
  int* devices = malloc((size_t)key->n * sizeof *devices);
  if (!entry || !devices) {
    free(entry);
    free(devices);
    tpu_executable_destroy(*executable);
    *executable = NULL;
    return tpu_status_oom("caching a collective program");
  }
  memcpy(devices, key->devices, (size_t)key->n * sizeof *devices);
  entry->key = *key;
  entry->key.devices = devices;
  entry->executable = *executable;
  pthread_mutex_lock(&g_lock);
  tpu_executable_t* found = find(key);
  if (!found) {
    entry->next = g_entries;
    g_entries = entry;
    g_count++;
  }
  pthread_mutex_unlock(&g_lock);
  if (found) {
    tpu_executable_destroy(entry->executable);
    free(devices);
    free(entry);
    *executable = found;
  }
  return NULL;
}

/* ---- the program ----------------------------------------------------------------- */

/* The reduction region's op on scalars of the element type (so bfloat16
 * accumulates as XLA's bfloat16 all_reduce does). */
static const char* reduction_op(tpu_collective_op_t op, tpu_dtype_t dtype) {
  bool logical = dtype == TPU_DTYPE_BOOL;
  switch (op) {
    case TPU_COLLECTIVE_SUM:
    case TPU_COLLECTIVE_AVG: return logical ? "stablehlo.or" : "stablehlo.add";
    case TPU_COLLECTIVE_PROD: return logical ? "stablehlo.and" : "stablehlo.multiply";
    case TPU_COLLECTIVE_MIN: return logical ? "stablehlo.and" : "stablehlo.minimum";
    case TPU_COLLECTIVE_MAX: return logical ? "stablehlo.or" : "stablehlo.maximum";
  }
  return NULL;
}

/* The collective op with its reduction region when it has one. */
static tpu_hlo_value_t emit_collective(tpu_hlo_builder_t* b, const collective_key_t* key,
                                       tpu_hlo_value_t x, tpu_hlo_type_t out,
                                       const char* attrs) {
  tpu_hlo_value_t result;
  if (key->kind == ALL_GATHER) {
    tpu_hlo_op_multi(b, "stablehlo.all_gather", &x, 1, &out, 1, attrs, &result);
    return result;
  }
  const char* name = key->kind == ALL_REDUCE ? "stablehlo.all_reduce" : "stablehlo.reduce_scatter";
  tpu_hlo_region_op_begin(b, name, &x, 1, &out, 1, attrs);
  tpu_hlo_type_t scalar = tpu_hlo_type_scalar(key->dtype);
  tpu_hlo_type_t block_types[2] = {scalar, scalar};
  tpu_hlo_value_t block_args[2];
  tpu_hlo_block_begin(b, block_types, 2, block_args);
  tpu_hlo_value_t r = tpu_hlo_op(b, reduction_op(key->op, key->dtype), block_args, 2, scalar, NULL);
  tpu_hlo_block_return(b, &r, 1);
  tpu_hlo_region_op_end(b, &result);
  return result;
}

/* The StableHLO one replica runs: its input in, its result out. Replicas
 * are addressed by replica id (no channel: cross-replica mode), all n in
 * one group. */
static tpu_status_t build_text(const collective_key_t* key, char** out_text, size_t* out_len) {
  const int n = key->n;
  size_t cap = 96 + (size_t)n * 8;
  char* attrs = malloc(cap);
  if (!attrs) return tpu_status_oom("building a collective program");
  size_t len = (size_t)snprintf(attrs, cap, "%sreplica_groups = dense<[[",
                                key->kind == ALL_GATHER       ? "all_gather_dim = 0 : i64, "
                                : key->kind == REDUCE_SCATTER ? "scatter_dimension = 0 : i64, "
                                                              : "");
  for (int i = 0; i < n; i++) len += (size_t)snprintf(attrs + len, cap - len, "%s%d", i ? ", " : "", i);
  snprintf(attrs + len, cap - len, "]]> : tensor<1x%dxi64>", n);

  tpu_hlo_builder_t* b = NULL;
  tpu_status_t status = tpu_hlo_builder_create(&b);
  if (status) {
    free(attrs);
    return status;
  }
  tpu_hlo_type_t in = tpu_hlo_type_make(key->dtype, key->rank, key->dims);
  tpu_hlo_value_t x = tpu_hlo_arg(b, in, NULL);
  tpu_hlo_type_t out = in;
  if (key->kind == ALL_GATHER && in.rank == 0) { /* scalars gather as [1] pieces */
    out = tpu_hlo_type_make(key->dtype, 1, (const int64_t[]){1});
    x = tpu_hlo_op(b, "stablehlo.reshape", &x, 1, out, NULL);
  }
  if (key->kind == ALL_GATHER) out.dims[0] *= n;
  if (key->kind == REDUCE_SCATTER) out.dims[0] /= n;
  tpu_hlo_value_t result = emit_collective(b, key, x, out, attrs);
  if (key->op == TPU_COLLECTIVE_AVG) {
    tpu_hlo_value_t divisor = tpu_dtype_is_complex(key->dtype)
                                  ? tpu_hlo_constant_complex(b, out, n, 0)
                                  : tpu_hlo_constant_float(b, out, n);
    tpu_hlo_value_t operands[2] = {result, divisor};
    result = tpu_hlo_op(b, "stablehlo.divide", operands, 2, out, NULL);
  }
  tpu_hlo_return(b, &result, 1);
  status = tpu_hlo_builder_finish(b, out_text, out_len);
  tpu_hlo_builder_destroy(b);
  free(attrs);
  return status;
}

/* The cached program for `key`, compiled on a miss for the key's devices
 * (one replica each, replica i on devices[i]). */
static tpu_status_t get_program(const collective_key_t* key, tpu_executable_t** out_executable) {
  pthread_mutex_lock(&g_lock);
  *out_executable = find(key);
  pthread_mutex_unlock(&g_lock);
  if (*out_executable) {
    TPU_METRICS_BUMP("collective_cache_hits", 1);
    return NULL;
  }
  int* ids = malloc((size_t)key->n * sizeof *ids);
  if (!ids) return tpu_status_oom("compiling a collective program");
  for (int i = 0; i < key->n; i++) {
    tpu_device_t* device = NULL;
    tpu_status_t s = tpu_client_device(key->client, key->devices[i], &device);
    if (s) {
      free(ids);
      return s;
    }
    ids[i] = tpu_device_id(device);
  }
  char* text = NULL;
  size_t len = 0;
  tpu_status_t status = build_text(key, &text, &len);
  if (!status && tpu_env_log_enabled("programs"))
    fprintf(stderr, "torchtpu: %s program on %d devices:\n%.*s\n", kKindNames[key->kind], key->n,
            (int)len, text);
  /* Compiled outside the lock: a compile takes milliseconds or more. Not
   * through the disk cache: its entries are tpu_program_get's single-device
   * programs, and these few compile in milliseconds. */
  tpu_compile_options_t options = {.num_replicas = key->n, .device_ids = ids,
                                   .num_device_ids = key->n};
  tpu_executable_t* executable = NULL;
  if (!status) status = tpu_executable_compile(key->client, text, len, &options, &executable);
  free(text);
  free(ids);
  if (status) return tpu_status_annotate(status, "compiling %s: ", kKindNames[key->kind]);
  TPU_METRICS_BUMP("collective_compiles", 1);
  /* Execution lists follow the plugin's order of the program's devices:
   * it must be the assignment's, or inputs would meet the wrong replicas. */
  for (int i = 0; i < key->n; i++) {
    int placed = tpu_executable_device_index(executable, i);
    if (placed != key->devices[i]) {
      tpu_executable_destroy(executable);
      return tpu_status_make(TPU_STATUS_INTERNAL,
                             "%s: the plugin placed replica %d on device %d, not on device %d",
                             kKindNames[key->kind], i, placed, key->devices[i]);
    }
  }
  TPU_RETURN_IF_ERROR(insert(key, &executable));
  *out_executable = executable;
  return NULL;
}

/* ---- the calls ------------------------------------------------------------------- */

static void shape_text(const tpu_buffer_t* buffer, char* out, size_t cap) {
  tpu_hlo_type_t type =
      tpu_hlo_type_make(tpu_buffer_dtype(buffer), tpu_buffer_rank(buffer), tpu_buffer_dims(buffer));
  tpu_hlo_type_print(&type, out, cap);
}

/* The inputs' rules (collective.h) and the op's dtypes; fills `key`. */
static tpu_status_t check_inputs(kind_t kind, tpu_collective_op_t op,
                                 tpu_buffer_t* const* inputs, int n,
                                 tpu_buffer_t** out_results, int* devices, collective_key_t* key) {
  const char* what = kKindNames[kind];
  tpu_client_t* client = tpu_runtime_client();
  if (!client)
    return tpu_status_make(TPU_STATUS_FAILED_PRECONDITION, "%s: the runtime is not initialized",
                           what);
  if (!inputs || !out_results || n < 1 || n > tpu_client_device_count(client))
    return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT,
                           "%s: %d input(s) for %d device(s), or no input or result list", what,
                           n, tpu_client_device_count(client));
  if ((unsigned)op > TPU_COLLECTIVE_AVG)
    return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT, "%s: unknown reduce op %d", what, (int)op);
  for (int i = 0; i < n; i++)
    if (!inputs[i])
      return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT, "%s: input %d is NULL", what, i);
  const tpu_buffer_t* first = inputs[0];
  *key = (collective_key_t){.client = client, .kind = kind, .op = op, .dtype = tpu_buffer_dtype(first),
                 .rank = tpu_buffer_rank(first), .n = n, .devices = devices};
  memcpy(key->dims, tpu_buffer_dims(first), (size_t)key->rank * sizeof(int64_t));
  for (int i = 0; i < n; i++) {
    const tpu_buffer_t* in = inputs[i];
    if (tpu_buffer_dtype(in) != key->dtype || tpu_buffer_rank(in) != key->rank ||
        memcmp(tpu_buffer_dims(in), key->dims, (size_t)key->rank * sizeof(int64_t)) != 0) {
      char have[128], want[128];
      shape_text(in, have, sizeof have);
      shape_text(first, want, sizeof want);
      return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT,
                             "%s: input %d is %s but input 0 is %s: every input must have "
                             "the same dtype and shape",
                             what, i, have, want);
    }
    devices[i] = tpu_buffer_device_index(in);
    for (int j = 0; j < i; j++)
      if (devices[j] == devices[i])
        return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT,
                               "%s: inputs %d and %d are both on device %d; each input must "
                               "be on its own device",
                               what, j, i, devices[i]);
  }
  tpu_dtype_t dtype = key->dtype;
  bool exact = tpu_dtype_is_integral(dtype) || dtype == TPU_DTYPE_BOOL;
  if (op == TPU_COLLECTIVE_AVG && exact)
    return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT,
                           "%s: avg is not supported for %s (integer and bool tensors); "
                           "use sum and divide",
                           what, tpu_dtype_name(dtype));
  if ((op == TPU_COLLECTIVE_MIN || op == TPU_COLLECTIVE_MAX) && tpu_dtype_is_complex(dtype))
    return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT, "%s: %s is not defined for %s", what,
                           tpu_collective_op_name(op), tpu_dtype_name(dtype));
  if (kind == REDUCE_SCATTER && (key->rank == 0 || key->dims[0] % n != 0))
    return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT,
                           "%s: dim 0 of the inputs (size %lld) must divide into %d equal "
                           "blocks, one per device",
                           what, key->rank ? (long long)key->dims[0] : 0LL, n);
  return NULL;
}

static tpu_status_t run(kind_t kind, tpu_collective_op_t op, tpu_buffer_t* const* inputs, int n,
                        tpu_buffer_t** out_results) {
  /* Per device: its index, its argument list (input i alone), its event. */
  size_t count = n > 0 ? (size_t)n : 1;
  void* scratch = malloc(count * (sizeof(int) + sizeof(tpu_buffer_t* const*) + sizeof(tpu_event_t*)));
  if (!scratch) return tpu_status_oom("running a collective");
  tpu_buffer_t* const** lists = scratch;
  tpu_event_t** done = (tpu_event_t**)(lists + count);
  int* devices = (int*)(done + count);
  collective_key_t key;
  tpu_executable_t* executable = NULL;
  tpu_status_t status = check_inputs(kind, op, inputs, n, out_results, devices, &key);
  if (!status) status = get_program(&key, &executable);
  for (int i = 0; !status && i < n; i++) lists[i] = &inputs[i];
  if (!status) status = tpu_executable_execute_multi(executable, n, lists, 1, out_results, done);
  if (!status) {
    TPU_METRICS_BUMP("collective_executions", 1);
    for (int i = 0; i < n; i++) {
      tpu_buffer_set_producer(out_results[i], kKindNames[kind]);
      tpu_runtime_track(devices[i], done[i]); /* for synchronize, and its errors */
    }
  }
  free(scratch);
  return status;
}

tpu_status_t tpu_collective_all_reduce(tpu_buffer_t* const* inputs, int n,
                                       tpu_collective_op_t op, tpu_buffer_t** out_results) {
  return run(ALL_REDUCE, op, inputs, n, out_results);
}

tpu_status_t tpu_collective_all_gather(tpu_buffer_t* const* inputs, int n,
                                       tpu_buffer_t** out_results) {
  return run(ALL_GATHER, TPU_COLLECTIVE_SUM, inputs, n, out_results);
}

tpu_status_t tpu_collective_reduce_scatter(tpu_buffer_t* const* inputs, int n,
                                           tpu_collective_op_t op, tpu_buffer_t** out_results) {
  return run(REDUCE_SCATTER, op, inputs, n, out_results);
}

tpu_status_t tpu_collective_run_storages(tpu_collective_kind_t kind, tpu_collective_op_t op,
                                         tpu_storage_t* const* inputs, tpu_dtype_t dtype,
                                         int64_t numel, int n, tpu_storage_t* const* outputs) {
  if ((unsigned)kind > TPU_COLLECTIVE_REDUCE_SCATTER || !inputs || !outputs || n < 1 ||
      n > TPU_COLLECTIVE_MAX_DEVICES)
    return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT,
                           "collective: unknown kind %d, or %d inputs (1 to %d)", (int)kind, n,
                           TPU_COLLECTIVE_MAX_DEVICES);
  tpu_buffer_t* in[TPU_COLLECTIVE_MAX_DEVICES];
  tpu_buffer_t* out[TPU_COLLECTIVE_MAX_DEVICES] = {0};
  tpu_status_t s = NULL;
  for (int i = 0; i < n && !s; i++) s = tpu_storage_buffer_as(inputs[i], dtype, &numel, 1, &in[i]);
  if (!s) s = run(kind, kind == ALL_GATHER ? TPU_COLLECTIVE_SUM : op, in, n, out);
  if (s) return s;
  for (int i = 0; i < n; i++) {
    tpu_status_t w = tpu_storage_set_buffer(outputs[i], out[i]); /* owns it, even on failure */
    if (w && !s) s = w;
    else tpu_status_free(w);
  }
  return s;
}
