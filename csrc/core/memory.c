#include "memory.h"

#include <pthread.h>
#include <string.h>

/* A mutex rather than atomics: peak must move together with the live count. */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static tpu_memory_stats_t g_stats[TPU_MAX_DEVICES];

static int valid(int device) { return device >= 0 && device < TPU_MAX_DEVICES; }

void tpu_memory_record_alloc(int device, size_t nbytes) {
  if (!valid(device)) return;
  pthread_mutex_lock(&g_lock);
  tpu_memory_stats_t* s = &g_stats[device];
  s->allocated_bytes += (int64_t)nbytes;
  s->total_allocated_bytes += (int64_t)nbytes;
  s->num_allocs++;
  s->live_allocations++;
  if (s->allocated_bytes > s->peak_allocated_bytes)
    s->peak_allocated_bytes = s->allocated_bytes;
  pthread_mutex_unlock(&g_lock);
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
