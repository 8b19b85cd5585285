#include "runtime.h"

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "env.h"
#include "hostattn.h"
#include "hostgemm.h"
#include "hostnorm.h"
#include "hostrow.h"
#include "hostheap.h"
#include "lower/emit.h"
#include "memory.h"

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static tpu_plugin_t* g_plugin;
static tpu_client_t* g_client;

/* An execution's op (static; may be NULL) and its place in issue order. */
typedef struct {
  const char* label;
  uint64_t seq;
} tag_t;
static _Atomic uint64_t g_seq;

/* Outstanding completion events per device (guarded by g_pending_lock). */
typedef struct {
  tpu_event_t** events;
  tag_t* labels; /* the op each event completes, and when it was issued */
  size_t count, capacity;
  tpu_status_t error; /* first failure among pruned events, for synchronize */
  /* The latest failures of named executions that are no longer tracked
   * events, so that a read can still name the op (a ring; cleared by
   * synchronize). */
  tpu_status_t recent[8];
  uint64_t recent_seq[8];
  unsigned recent_next;
  /* Failures a read has raised since the last synchronize: that raise
   * reported them, so synchronize does not raise them again. */
  tpu_status_t surfaced[4];
  unsigned surfaced_next;
} pending_t;
static pthread_mutex_t g_pending_lock = PTHREAD_MUTEX_INITIALIZER;
static pending_t g_pending[TPU_MAX_DEVICES];

/* Keeps `failed` as the device's error for synchronize unless it already
 * has one (caller holds g_pending_lock; takes ownership). */
static void keep_first_error(pending_t* p, tpu_status_t failed, uint64_t seq) {
  if (failed && strstr(tpu_status_message(failed), " failed on the device: ")) {
    unsigned slot = p->recent_next++ % 8;
    tpu_status_free(p->recent[slot]);
    p->recent[slot] = tpu_status_make(tpu_status_code(failed), "%s", tpu_status_message(failed));
    p->recent_seq[slot] = seq;
  }
  if (failed && !p->error) p->error = failed;
  else tpu_status_free(failed);
}

/* The op the calling thread is executing, for errors that surface later. */
static _Thread_local const char* t_op_label;

void tpu_runtime_set_op_label(const char* label) { t_op_label = label; }
const char* tpu_runtime_op_label(void) { return t_op_label; }

/* A failure of the execution of `label`, named so. */
static tpu_status_t labeled(tpu_status_t failed, const char* label) {
  if (!failed || !label || strstr(tpu_status_message(failed), " failed on the device: ") ||
      strstr(tpu_status_message(failed), label))  /* named already ("running <op>: ") */
    return failed;
  return tpu_status_annotate(failed, "%s failed on the device: ", label);
}

/* Whether `text` reports the failure `failed` reports: a dependent
 * execution's or a read's error carries the failed execution's message at
 * its end under other prefixes ("context: ..."), so compare the last
 * segment after ": " (when it says enough), else the last 48 characters. */
static bool same_failure(const char* text, const char* failed) {
  size_t n = strlen(text), k = strlen(failed);
  const char* last = NULL;
  for (const char* p = strstr(failed, ": "); p; p = strstr(p + 2, ": ")) last = p + 2;
  size_t keep = last && strlen(last) >= 16 ? strlen(last) : (k < 48 ? k : 48);
  return keep > 0 && n >= keep && memcmp(text + n - keep, failed + k - keep, keep) == 0;
}

static int g_default_device;

/* A child forked after the runtime started inherits a client whose threads
 * (the plugin's, the launch queue's) did not come along: its first wait
 * would never return. It is marked here, and every device use in it
 * refuses (as CUDA does: use the 'spawn' start method). */
static volatile bool g_in_bad_fork;
static void mark_bad_fork(void) { g_in_bad_fork = true; }
static pthread_once_t g_fork_once = PTHREAD_ONCE_INIT;
static void register_fork_handler(void) { pthread_atfork(NULL, NULL, mark_bad_fork); }

bool tpu_runtime_in_bad_fork(void) { return g_in_bad_fork; }

/* torchrun starts one process per device on a host and tells each its
 * LOCAL_RANK; spreading them over the devices needs no code in the script.
 * torchrun's variable (an external one in the registry); ignored unless it
 * is a non-negative integer. */
static int local_rank_device(int device_count) {
  const char* text = tpu_env_get("LOCAL_RANK");
  if (!text || !text[0] || device_count <= 0) return 0;
  char* end = NULL;
  long rank = strtol(text, &end, 10);
  if (*end || rank < 0) return 0;
  return (int)(rank % device_count);
}

/* A "Name:  N kB" line of /proc/meminfo in bytes; -1 when absent. */
static int64_t meminfo_bytes(const char* name) {
  FILE* f = fopen("/proc/meminfo", "r");
  if (!f) return -1;
  char line[256];
  int64_t bytes = -1;
  size_t n = strlen(name);
  while (fgets(line, sizeof line, f)) {
    long long kb;
    if (strncmp(line, name, n) == 0 && line[n] == ':' &&
        sscanf(line + n + 1, "%lld", &kb) == 1) {
      bytes = (int64_t)kb * 1024;
      break;
    }
  }
  fclose(f);
  return bytes;
}

/* The host memory this process can use: physical memory, lowered to the
 * cgroup's limit in a container. */
static int64_t host_total_bytes(void) {
  int64_t total = meminfo_bytes("MemTotal");
  if (total < 0) {
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    total = pages > 0 && page > 0 ? (int64_t)pages * page : 0;
  }
  FILE* f = fopen("/sys/fs/cgroup/memory.max", "r");
  if (f) {
    long long limit;
    if (fscanf(f, "%lld", &limit) == 1 && limit > 0 && limit < total) total = limit;
    fclose(f);
  }
  return total;
}

/* What a device may hold: TORCHTPU_MEMORY_LIMIT, else the plugin's limit,
 * else the host's memory. */
static int64_t device_capacity(tpu_client_t* client, int index) {
  int64_t limit = tpu_env_get_int("TORCHTPU_MEMORY_LIMIT", 0);
  int64_t in_use = 0, plugin_limit = 0;
  tpu_device_t* device = NULL;
  if (!tpu_client_device(client, index, &device)) {
    tpu_status_t s = tpu_device_memory_stats(device, &in_use, &plugin_limit);
    if (s) plugin_limit = 0;
    tpu_status_free(s);
  }
  int64_t capacity = plugin_limit > 0 ? plugin_limit : host_total_bytes();
  return limit > 0 && (capacity <= 0 || limit < capacity) ? limit : capacity;
}

bool tpu_runtime_prepare_plugin_env(const char* plugin_path, const char* dmi_product) {
  const char* base = strrchr(plugin_path, '/');
  base = base ? base + 1 : plugin_path;
  if (!strstr(base, "libtpu") || tpu_env_get("TPU_SKIP_MDS_QUERY")[0]) return false;
  if (dmi_product && strstr(dmi_product, "Google")) return false; /* a Cloud VM */
  setenv("TPU_SKIP_MDS_QUERY", "1", /*overwrite=*/0);
  return true;
}

/* The machine's DMI product name ("Google Compute Engine" on Cloud VMs). */
static void read_dmi_product(char* out, size_t size) {
  out[0] = 0;
  FILE* f = fopen("/sys/class/dmi/id/product_name", "r");
  if (!f) return;
  if (!fgets(out, (int)size, f)) out[0] = 0;
  fclose(f);
}

tpu_status_t tpu_runtime_init(const char* fallback_plugin_path) {
  pthread_mutex_lock(&g_lock);
  tpu_status_t status = NULL;
  if (g_client) goto done;
  /* XLA logs INFO lines to stderr through absl before anyone initialises
   * logging; keep user output clean unless the user asked for them. */
  setenv("TF_CPP_MIN_LOG_LEVEL", "1", /*overwrite=*/0);
  char path[PATH_MAX];
  status = tpu_plugin_resolve_path(fallback_plugin_path, path, sizeof path);
  if (status) goto done;
  char product[128];
  read_dmi_product(product, sizeof product);
  tpu_runtime_prepare_plugin_env(path, product);
  tpu_plugin_t* plugin = NULL;
  status = tpu_plugin_load(path, &plugin);
  if (status) goto done;
  int64_t num_devices = tpu_env_get_int("TORCHTPU_NUM_DEVICES", -1);
  if (num_devices < 1 || num_devices > 1024) {
    status = tpu_status_make(
        TPU_STATUS_INVALID_ARGUMENT,
        "TORCHTPU_NUM_DEVICES must be an integer in [1, 1024], got '%s'",
        tpu_env_get("TORCHTPU_NUM_DEVICES"));
    tpu_plugin_release(plugin);
    goto done;
  }
  int visible[TPU_MAX_DEVICES];
  int visible_count = 0;
  /* 1024: the CPU plugin creates max index + 1 devices; cap it as above. */
  status = tpu_env_get_index_list("TORCHTPU_VISIBLE_DEVICES", 1024,
                                  TPU_MAX_DEVICES, visible, &visible_count);
  if (status) {
    tpu_plugin_release(plugin);
    goto done;
  }
  tpu_client_options_t options = {.cpu_device_count = num_devices,
                                  .visible_devices = visible,
                                  .visible_device_count = visible_count};
  tpu_client_t* client = NULL;
  status = tpu_client_create(plugin, &options, &client);
  if (status) {
    if (visible_count > 0) {
      status = tpu_status_annotate(status, "with TORCHTPU_VISIBLE_DEVICES='%s': ",
                                   tpu_env_get("TORCHTPU_VISIBLE_DEVICES"));
    }
    tpu_plugin_release(plugin);
    goto done;
  }
  /* The CPU plugin's device memory is this process's heap. */
  if (strcmp(tpu_client_platform_name(client), "cpu") == 0) {
    tpu_hostheap_configure();
    tpu_emit_set_merge_reduced_dims(true);
  }
  tpu_hostgemm_register(client);
  tpu_hostrow_register(client);
  tpu_hostnorm_register(client);
  tpu_hostattn_register(client);
  g_default_device =
      visible_count > 0 ? 0 : local_rank_device(tpu_client_device_count(client));
  g_plugin = plugin;
  g_client = client;
  for (int i = 0; i < tpu_client_device_count(client) && i < TPU_MAX_DEVICES; i++)
    tpu_memory_set_capacity(i, device_capacity(client, i));
  pthread_once(&g_fork_once, register_fork_handler);
done:
  pthread_mutex_unlock(&g_lock);
  return status;
}

bool tpu_runtime_is_initialized(void) {
  pthread_mutex_lock(&g_lock);
  bool ready = g_client != NULL;
  pthread_mutex_unlock(&g_lock);
  return ready;
}

tpu_client_t* tpu_runtime_client(void) { return g_client; }

const char* tpu_runtime_dtype_platform(void) {
  const char* forced = tpu_env_get("TORCHTPU_DTYPE_PLATFORM");
  if (forced[0]) return forced;
  tpu_client_t* client = g_client;
  return client ? tpu_client_platform_name(client) : "";
}

bool tpu_runtime_supports_dtype(tpu_dtype_t dtype) {
  return tpu_dtype_supported_on(tpu_runtime_dtype_platform(), dtype);
}
tpu_plugin_t* tpu_runtime_plugin(void) { return g_plugin; }

int tpu_runtime_device_count(void) {
  return g_client ? tpu_client_device_count(g_client) : 0;
}

int tpu_runtime_default_device(void) { return g_client ? g_default_device : 0; }

tpu_status_t tpu_runtime_memory_info(int device_index, int64_t* out_free,
                                     int64_t* out_total) {
  TPU_RETURN_IF_ERROR(tpu_runtime_check_device(device_index));
  int64_t total = tpu_memory_capacity(device_index);
  tpu_memory_stats_t stats;
  tpu_memory_stats_get(device_index, &stats);
  int64_t free_bytes = total - stats.allocated_bytes;
  int64_t in_use = 0, plugin_limit = 0;
  tpu_device_t* device = NULL;
  tpu_status_t s = tpu_client_device(g_client, device_index, &device);
  if (!s) s = tpu_device_memory_stats(device, &in_use, &plugin_limit);
  if (!s) {
    if (plugin_limit - in_use < free_bytes) free_bytes = plugin_limit - in_use;
  } else {
    /* The host's memory: others use it too. */
    int64_t available = meminfo_bytes("MemAvailable");
    if (available >= 0 && available < free_bytes) free_bytes = available;
  }
  tpu_status_free(s);
  *out_free = free_bytes > 0 ? free_bytes : 0;
  *out_total = total;
  return NULL;
}

tpu_status_t tpu_runtime_check_device(int device_index) {
  int count = tpu_runtime_device_count();
  if (device_index < 0 || device_index >= count)
    return tpu_status_make(TPU_STATUS_OUT_OF_RANGE,
                           "tpu device index %d is out of range: %d device%s "
                           "available",
                           device_index, count, count == 1 ? "" : "s");
  return NULL;
}

void tpu_runtime_track(int device_index, tpu_event_t* event) {
  if (!event) return;
  if (device_index < 0 || device_index >= TPU_MAX_DEVICES) {
    tpu_status_free(tpu_event_await(event));
    tpu_event_destroy(event);
    return;
  }
  pthread_mutex_lock(&g_pending_lock);
  pending_t* p = &g_pending[device_index];
  size_t kept = p->count;
  /* Pruning walks the list: do it only when it has grown, so tracking
   * stays O(1) amortised on the dispatch path. */
  if (p->count >= 64) kept = 0;
  for (size_t i = 0; p->count >= 64 && i < p->count; i++) {
    if (tpu_event_is_ready(p->events[i])) {
      /* A failed execution's error waits for the next synchronize. */
      keep_first_error(p, labeled(tpu_event_await(p->events[i]), p->labels[i].label),
                       p->labels[i].seq);
      tpu_event_destroy(p->events[i]);
    } else {
      p->labels[kept] = p->labels[i];
      p->events[kept++] = p->events[i];
    }
  }
  p->count = kept;
  if (p->count == p->capacity) {
    size_t capacity = p->capacity ? p->capacity * 2 : 16;
    tpu_event_t** grown = realloc(p->events, capacity * sizeof *grown);
    if (grown) p->events = grown;
    tag_t* grown_labels = grown ? realloc(p->labels, capacity * sizeof *grown_labels) : NULL;
    if (grown_labels) p->labels = grown_labels;
    if (!grown || !grown_labels) { /* cannot track: wait now instead */
      pthread_mutex_unlock(&g_pending_lock);
      tpu_status_free(tpu_event_await(event));
      tpu_event_destroy(event);
      return;
    }
    p->capacity = capacity;
  }
  p->labels[p->count] = (tag_t){.label = t_op_label, .seq = atomic_fetch_add(&g_seq, 1)};
  p->events[p->count++] = event;
  pthread_mutex_unlock(&g_pending_lock);
}

void tpu_runtime_record_error(int device_index, tpu_status_t status) {
  if (!status) return;
  if (device_index < 0 || device_index >= TPU_MAX_DEVICES) {
    tpu_status_free(status);
    return;
  }
  status = labeled(status, t_op_label);
  pthread_mutex_lock(&g_pending_lock);
  keep_first_error(&g_pending[device_index], status, atomic_fetch_add(&g_seq, 1));
  pthread_mutex_unlock(&g_pending_lock);
}

/* NULL for a failure a read already raised (see pending_t.surfaced). */
static tpu_status_t unless_surfaced(tpu_status_t s, tpu_status_t* const surfaced) {
  for (int k = 0; s && k < 4; k++)
    if (surfaced[k] && same_failure(tpu_status_message(s), tpu_status_message(surfaced[k]))) {
      tpu_status_free(s);
      return NULL;
    }
  return s;
}

static void (*_Atomic g_queue_drain)(void);
static void (*_Atomic g_queue_stop)(void);

void tpu_runtime_set_queue_hooks(tpu_runtime_queue_hooks_t hooks) {
  atomic_store(&g_queue_drain, hooks.drain);
  atomic_store(&g_queue_stop, hooks.stop);
}

void tpu_runtime_drain_queue(void) {
  void (*drain)(void) = atomic_load(&g_queue_drain);
  if (drain) drain();
}

tpu_status_t tpu_runtime_synchronize(int device_index) {
  if (device_index < 0 || device_index >= TPU_MAX_DEVICES) return NULL;
  tpu_runtime_drain_queue(); /* queued executions first: they track their events */
  pthread_mutex_lock(&g_pending_lock);
  pending_t* p = &g_pending[device_index];
  tpu_event_t** events = p->events;
  tag_t* labels = p->labels;
  size_t count = p->count;
  tpu_status_t first = p->error; /* from an execution pruned earlier */
  p->events = NULL;
  p->labels = NULL;
  p->error = NULL;
  p->count = p->capacity = 0;
  for (int i = 0; i < 8; i++) {
    tpu_status_free(p->recent[i]);
    p->recent[i] = NULL;
  }
  tpu_status_t surfaced[4];
  memcpy(surfaced, p->surfaced, sizeof surfaced);
  memset(p->surfaced, 0, sizeof p->surfaced);
  pthread_mutex_unlock(&g_pending_lock);
  first = unless_surfaced(first, surfaced);
  for (size_t i = 0; i < count; i++) {
    tpu_status_t s = unless_surfaced(tpu_event_await(events[i]), surfaced);
    if (s && !first) first = labeled(s, labels[i].label); else tpu_status_free(s);
    tpu_event_destroy(events[i]);
  }
  for (int k = 0; k < 4; k++) tpu_status_free(surfaced[k]);
  free(events);
  free(labels);
  return first;
}

tpu_status_t tpu_runtime_name_failure(int device_index, tpu_status_t status,
                                      const char* producer) {
  if (!status || strstr(tpu_status_message(status), " failed on the device: "))
    return status;
  const char* origin = NULL;
  if (device_index >= 0 && device_index < TPU_MAX_DEVICES) {
    pthread_mutex_lock(&g_pending_lock);
    pending_t* p = &g_pending[device_index];
    /* The earliest execution (in issue order) that failed with this error:
     * the one that caused it (later ones only read its poisoned results).
     * Candidates: recent named failures and failed tracked events. */
    uint64_t best = UINT64_MAX;
    for (unsigned i = 0; i < 8; i++) {
      tpu_status_t r = p->recent[i];
      if (!r || p->recent_seq[i] >= best ||
          !same_failure(tpu_status_message(status), tpu_status_message(r)))
        continue;
      const char* m = tpu_status_message(r);
      const char* end = strstr(m, " failed on the device: ");
      static _Thread_local char name[160];
      if (end && (size_t)(end - m) < sizeof name) {
        memcpy(name, m, (size_t)(end - m));
        name[end - m] = 0;
        origin = name;
        best = p->recent_seq[i];
      }
    }
    for (size_t i = 0; i < p->count; i++) {
      if (!p->labels[i].label || p->labels[i].seq >= best || !tpu_event_is_ready(p->events[i]))
        continue;
      tpu_status_t s = tpu_event_await(p->events[i]);
      if (s && same_failure(tpu_status_message(status), tpu_status_message(s))) {
        origin = p->labels[i].label;
        best = p->labels[i].seq;
      }
      tpu_status_free(s);
    }
    pthread_mutex_unlock(&g_pending_lock);
  }
  if (device_index >= 0 && device_index < TPU_MAX_DEVICES) {
    pthread_mutex_lock(&g_pending_lock);
    pending_t* p = &g_pending[device_index];
    unsigned slot = p->surfaced_next++ % 4;
    tpu_status_free(p->surfaced[slot]);
    p->surfaced[slot] = tpu_status_make(tpu_status_code(status), "%s", tpu_status_message(status));
    pthread_mutex_unlock(&g_pending_lock);
  }
  if (!origin) origin = producer;
  /* An error that names its op already (a launch that failed at once). */
  if (!origin || strstr(tpu_status_message(status), origin)) return status;
  return tpu_status_annotate(status, "%s failed on the device: ", origin);
}

void tpu_runtime_shutdown(void) {
  for (int d = 0; d < TPU_MAX_DEVICES; d++)
    tpu_status_free(tpu_runtime_synchronize(d));
  void (*stop)(void) = atomic_load(&g_queue_stop);
  if (stop) stop(); /* the queue's thread calls into the client */
  pthread_mutex_lock(&g_lock);
  tpu_client_destroy(g_client);
  tpu_plugin_release(g_plugin);
  g_client = NULL;
  g_plugin = NULL;
  g_default_device = 0;
  pthread_mutex_unlock(&g_lock);
}
