#include "memory.h"

#include <pthread.h>
#include <string.h>

/* A mutex rather than atomics: peak must move together with the live count. */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static tpu_memory_stats_t g_stats[TPU_MAX_DEVICES];
static int64_t g_capacity[TPU_MAX_DEVICES]; /* 0: no limit */

static int valid(int device) { return device >= 0 && device < TPU_MAX_DEVICES; }

static void record_alloc_locked(tpu_memory_stats_t* s, size_t nbytes) {
  s->allocated_bytes += (int64_t)nbytes;
  s->total_allocated_bytes += (int64_t)nbytes;
  s->num_allocs++;
  s->live_allocations++;
  if (s->allocated_bytes > s->peak_allocated_bytes)
    s->peak_allocated_bytes = s->allocated_bytes;
  if (s->live_allocations > s->peak_live_allocations)
    s->peak_live_allocations = s->live_allocations;
}

void tpu_memory_record_alloc(int device, size_t nbytes) {
  if (!valid(device)) return;
  pthread_mutex_lock(&g_lock);
  record_alloc_locked(&g_stats[device], nbytes);
  pthread_mutex_unlock(&g_lock);
}

bool tpu_memory_try_record_alloc(int device, size_t nbytes) {
  if (!valid(device)) return true;
  pthread_mutex_lock(&g_lock);
  tpu_memory_stats_t* s = &g_stats[device];
  int64_t cap = g_capacity[device];
  /* Compared as "left < asked" so a huge request cannot overflow the sum. */
  bool fits = cap <= 0 || (s->allocated_bytes <= cap &&
                           (uint64_t)(cap - s->allocated_bytes) >= (uint64_t)nbytes);
  if (fits) record_alloc_locked(s, nbytes);
  else s->num_ooms++;
  pthread_mutex_unlock(&g_lock);
  return fits;
}

void tpu_memory_set_capacity(int device, int64_t capacity_bytes) {
  if (!valid(device)) return;
  pthread_mutex_lock(&g_lock);
  g_capacity[device] = capacity_bytes > 0 ? capacity_bytes : 0;
  pthread_mutex_unlock(&g_lock);
}

int64_t tpu_memory_capacity(int device) {
  if (!valid(device)) return 0;
  pthread_mutex_lock(&g_lock);
  int64_t cap = g_capacity[device];
  pthread_mutex_unlock(&g_lock);
  return cap;
}

void tpu_memory_record_free(int device, size_t nbytes) {
  if (!valid(device)) return;
  pthread_mutex_lock(&g_lock);
  tpu_memory_stats_t* s = &g_stats[device];
  s->allocated_bytes -= (int64_t)nbytes;
  s->total_freed_bytes += (int64_t)nbytes;
  s->num_frees++;
  s->live_allocations--;
  pthread_mutex_unlock(&g_lock);
}

void tpu_memory_stats_get(int device, tpu_memory_stats_t* out_stats) {
  memset(out_stats, 0, sizeof *out_stats);
  if (!valid(device)) return;
  pthread_mutex_lock(&g_lock);
  *out_stats = g_stats[device];
  pthread_mutex_unlock(&g_lock);
}

void tpu_memory_reset_peak(int device) {
  if (!valid(device)) return;
  pthread_mutex_lock(&g_lock);
  g_stats[device].peak_allocated_bytes = g_stats[device].allocated_bytes;
  g_stats[device].peak_live_allocations = g_stats[device].live_allocations;
  pthread_mutex_unlock(&g_lock);
}

void tpu_memory_reset_accumulated(int device) {
  if (!valid(device)) return;
  pthread_mutex_lock(&g_lock);
  tpu_memory_stats_t* s = &g_stats[device];
  s->total_allocated_bytes = 0;
  s->total_freed_bytes = 0;
  s->num_allocs = 0;
  s->num_frees = 0;
  pthread_mutex_unlock(&g_lock);
}
