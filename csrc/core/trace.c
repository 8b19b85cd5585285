#include "trace.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "hash.h"

atomic_bool tpu_trace_on_;

/* Spans are appended under one lock: tracing is a diagnostic mode, and a
 * lock per span (tens of nanoseconds uncontended) is small beside the
 * work a span covers. Names are interned so that a span outlives the
 * object its name came from (an evicted eager entry's op name). */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static tpu_trace_span_t* g_spans;
static size_t g_count, g_capacity, g_dropped;
static _Atomic unsigned g_generation;
static const tpu_trace_listener_t* _Atomic g_listener;
static _Thread_local int64_t t_next_wait = -1;

enum { NAME_BUCKETS = 256 };
typedef struct name_s {
  struct name_s* next;
  char text[];
} name_t;
static name_t* g_names[NAME_BUCKETS]; /* never freed: names stay valid */

static const char* intern_locked(const char* s) {
  if (!s) s = "";
  uint64_t h = tpu_hash_fnv1a_str(s);
  name_t** head = &g_names[h % NAME_BUCKETS];
  for (name_t* n = *head; n; n = n->next)
    if (strcmp(n->text, s) == 0) return n->text;
  size_t len = strlen(s);
  name_t* n = malloc(sizeof *n + len + 1);
  if (!n) return "?";
  memcpy(n->text, s, len + 1);
  n->next = *head;
  *head = n;
  return n->text;
}

int64_t tpu_trace_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

bool tpu_trace_is_on(void) { return tpu_trace_enabled(); }

tpu_status_t tpu_trace_start(size_t capacity) {
  if (capacity == 0)
    return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT, "a trace needs room for a span");
  tpu_trace_span_t* spans = malloc(capacity * sizeof *spans);
  if (!spans)
    return tpu_status_make(TPU_STATUS_RESOURCE_EXHAUSTED,
                           "out of host memory for a trace of %zu spans", capacity);
  pthread_mutex_lock(&g_lock);
  free(g_spans);
  g_spans = spans;
  g_capacity = capacity;
  g_count = g_dropped = 0;
  atomic_fetch_add(&g_generation, 1);
  atomic_store(&tpu_trace_on_, true);
  pthread_mutex_unlock(&g_lock);
  return NULL;
}

void tpu_trace_stop(void) { atomic_store(&tpu_trace_on_, false); }

unsigned tpu_trace_generation(void) { return atomic_load(&g_generation); }

size_t tpu_trace_read(tpu_trace_span_t* out_spans, size_t capacity) {
  pthread_mutex_lock(&g_lock);
  size_t n = g_count < capacity ? g_count : capacity;
  if (n) memcpy(out_spans, g_spans, n * sizeof *out_spans);
  size_t count = g_count;
  pthread_mutex_unlock(&g_lock);
  return count;
}

size_t tpu_trace_dropped(void) {
  pthread_mutex_lock(&g_lock);
  size_t n = g_dropped;
  pthread_mutex_unlock(&g_lock);
  return n;
}

void tpu_trace_set_next_wait(int64_t wait_ns) { t_next_wait = wait_ns; }

void tpu_trace_set_listener(const tpu_trace_listener_t* listener) {
  atomic_store(&g_listener, listener);
}

void tpu_trace_begin(tpu_trace_span_t* span, tpu_trace_kind_t kind, const char* name) {
  tpu_trace_begin_sized(span, kind, name, 0);
}

void tpu_trace_begin_sized(tpu_trace_span_t* span, tpu_trace_kind_t kind, const char* name,
                           int64_t bytes) {
  if (!tpu_trace_enabled()) {
    span->kind = TPU_TRACE_NONE;
    return;
  }
  static _Thread_local uint64_t t_tid;
  if (!t_tid) t_tid = (uint64_t)syscall(SYS_gettid);
  *span = (tpu_trace_span_t){.kind = kind, .name = name ? name : "", .thread_id = t_tid,
                             .bytes = bytes};
  if (kind == TPU_TRACE_EXECUTE && t_next_wait >= 0) {
    span->wait_ns = t_next_wait;
    t_next_wait = -1;
  }
  span->start_ns = tpu_trace_now_ns();
  const tpu_trace_listener_t* l = atomic_load(&g_listener);
  if (l && l->begin) l->begin(span);
}

void tpu_trace_end(tpu_trace_span_t* span) {
  if (span->kind == TPU_TRACE_NONE) return;
  const tpu_trace_listener_t* l = atomic_load(&g_listener);
  span->end_ns = tpu_trace_now_ns();
  if (l && l->end) l->end(span);
  span->listener_data = NULL;
  /* A span that began before a stop is still recorded: it belongs to the
   * trace that was on when it began. */
  pthread_mutex_lock(&g_lock);
  if (g_count < g_capacity) {
    tpu_trace_span_t* s = &g_spans[g_count++];
    *s = *span;
    s->name = intern_locked(span->name);
  } else {
    g_dropped++;
  }
  pthread_mutex_unlock(&g_lock);
}

const char* tpu_trace_kind_name(tpu_trace_kind_t kind) {
  switch (kind) {
    case TPU_TRACE_EXECUTE: return "execute";
    case TPU_TRACE_COMPILE: return "compile";
    case TPU_TRACE_TO_DEVICE: return "to_device";
    case TPU_TRACE_TO_HOST: return "to_host";
    case TPU_TRACE_FLUSH: return "flush";
    default: return "none";
  }
}
