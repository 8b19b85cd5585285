#include "metrics.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "hash.h"

/* Open-addressing hash table; grows by doubling. Counters are few (tens to
 * hundreds) and updated from the dispatch path, so lookups must be cheap. */
/* Each counter's value lives in its own cell, which never moves when the
 * table grows: hot paths keep a handle (tpu_metrics_counter) and add to it
 * atomically, without the lock or a lookup. */
struct tpu_metrics_counter_s {
  _Atomic int64_t value;
};

typedef struct {
  char* name;
  tpu_metrics_counter_t* cell;
  size_t order; /* creation order, for stable snapshots */
} slot_t;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static slot_t* g_slots;
static size_t g_capacity;
static size_t g_count;

static slot_t* find_slot(slot_t* slots, size_t capacity, const char* name) {
  size_t i = tpu_hash_fnv1a_str(name) & (capacity - 1);
  while (slots[i].name && strcmp(slots[i].name, name) != 0)
    i = (i + 1) & (capacity - 1);
  return &slots[i];
}

static int grow(void) {
  size_t capacity = g_capacity ? g_capacity * 2 : 64;
  slot_t* slots = calloc(capacity, sizeof *slots);
  if (!slots) return 0;
  for (size_t i = 0; i < g_capacity; i++)
    if (g_slots[i].name) *find_slot(slots, capacity, g_slots[i].name) = g_slots[i];
  free(g_slots);
  g_slots = slots;
  g_capacity = capacity;
  return 1;
}

tpu_metrics_counter_t* tpu_metrics_counter(const char* name) {
  tpu_metrics_counter_t* cell = NULL;
  pthread_mutex_lock(&g_lock);
  if ((g_count + 1) * 2 > g_capacity && !grow()) goto done;
  slot_t* slot = find_slot(g_slots, g_capacity, name);
  if (!slot->name) {
    /* A cache line each: the op thread and the launch queue's worker
     * bump different counters, which must not share a line. */
    tpu_metrics_counter_t* fresh = aligned_alloc(64, 64);
    if (fresh) memset(fresh, 0, 64);
    char* copy = strdup(name);
    if (!fresh || !copy) {
      free(fresh);
      free(copy);
      goto done;
    }
    slot->name = copy;
    slot->cell = fresh;
    slot->order = g_count++;
  }
  cell = slot->cell;
done:
  pthread_mutex_unlock(&g_lock);
  return cell;
}

void tpu_metrics_bump(tpu_metrics_counter_t* counter, int64_t delta) {
  if (counter) atomic_fetch_add_explicit(&counter->value, delta, memory_order_relaxed);
}

void tpu_metrics_add(const char* name, int64_t delta) {
  tpu_metrics_bump(tpu_metrics_counter(name), delta);
}

int64_t tpu_metrics_get(const char* name) {
  int64_t value = 0;
  pthread_mutex_lock(&g_lock);
  if (g_capacity) {
    slot_t* slot = find_slot(g_slots, g_capacity, name);
    if (slot->name) value = atomic_load_explicit(&slot->cell->value, memory_order_relaxed);
  }
  pthread_mutex_unlock(&g_lock);
  return value;
}

size_t tpu_metrics_snapshot(tpu_metrics_entry_t* out_entries, size_t capacity) {
  pthread_mutex_lock(&g_lock);
  size_t count = g_count;
  for (size_t i = 0; i < g_capacity; i++) {
    if (!g_slots[i].name || g_slots[i].order >= capacity) continue;
    out_entries[g_slots[i].order].name = g_slots[i].name;
    out_entries[g_slots[i].order].value =
        atomic_load_explicit(&g_slots[i].cell->value, memory_order_relaxed);
  }
  pthread_mutex_unlock(&g_lock);
  return count;
}

void tpu_metrics_reset(void) {
  pthread_mutex_lock(&g_lock);
  for (size_t i = 0; i < g_capacity; i++)
    if (g_slots[i].name) atomic_store_explicit(&g_slots[i].cell->value, 0, memory_order_relaxed);
  pthread_mutex_unlock(&g_lock);
}
