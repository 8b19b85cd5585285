/* The device trace: timestamped spans of what the core does for the device
 * (PJRT executions, compiles, host<->device transfers, defer_and_fuse
 * flushes), recorded only while a trace is on, for torch.profiler.
 *
 * Off (the normal state) costs one relaxed atomic load per would-be span
 * (tpu_trace_enabled). On, each span is kept in a bounded in-memory list
 * (read back with tpu_trace_read) and reported to one listener at its
 * begin and end, on the thread where the work happens: the C++ layer's
 * listener turns them into RecordFunction ranges, which is what makes
 * them land in the profiler's own timeline (csrc/torch/profiler.cpp). */
#ifndef TORCHTPU_CORE_TRACE_H_
#define TORCHTPU_CORE_TRACE_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tpu_trace_kind_e {
  TPU_TRACE_NONE = 0,    /* a span begun while tracing was off: ignored */
  TPU_TRACE_EXECUTE,     /* one PJRT execution (name: the op it came from) */
  TPU_TRACE_COMPILE,     /* a program compiled or loaded from the disk caches */
  TPU_TRACE_TO_DEVICE,   /* host -> device transfer */
  TPU_TRACE_TO_HOST,     /* device -> host transfer */
  TPU_TRACE_FLUSH,       /* a defer_and_fuse run flushed (name: its reason) */
  TPU_TRACE_KIND_COUNT
} tpu_trace_kind_t;

/* One span. Callers keep it on their stack between begin and end. */
typedef struct tpu_trace_span_s {
  tpu_trace_kind_t kind;
  const char* name;       /* borrowed until end; interned copies are kept */
  int64_t start_ns;       /* CLOCK_MONOTONIC */
  int64_t end_ns;
  int64_t wait_ns;        /* executions run by the launcher: time queued */
  int64_t bytes;          /* transfers: bytes moved */
  uint64_t thread_id;     /* the OS thread id (gettid) */
  void* listener_data;    /* the listener's, from its begin to its end */
} tpu_trace_span_t;

/* Called on the thread where the span happens; begin after start_ns is
 * set, end before it is recorded (end_ns set). Must not call back into
 * the trace. */
typedef struct tpu_trace_listener_s {
  void (*begin)(tpu_trace_span_t* span);
  void (*end)(tpu_trace_span_t* span);
} tpu_trace_listener_t;

/* Whether a trace is on: the only cost of a span while it is off (inline
 * in C; a call from C++, which has no <stdatomic.h> before C++23). */
#ifndef __cplusplus
#include <stdatomic.h>
extern atomic_bool tpu_trace_on_;
static inline bool tpu_trace_enabled(void) {
  return atomic_load_explicit(&tpu_trace_on_, memory_order_relaxed);
}
#endif
bool tpu_trace_is_on(void);

/* Starts a trace (dropping the spans of the previous one) that keeps at
 * most `capacity` spans; later ones are counted as dropped. Starting while
 * on restarts. */
tpu_status_t tpu_trace_start(size_t capacity);
/* Stops recording; the spans stay readable until the next start. */
void tpu_trace_stop(void);
/* Bumped by every start: threads that adopt a profiling session per trace
 * (the launcher's) compare it. */
unsigned tpu_trace_generation(void);

/* Copies up to `capacity` spans (in the order they ended) into out_spans
 * (names interned: valid for the life of the process; listener_data
 * NULL) and returns how many the trace holds. */
size_t tpu_trace_read(tpu_trace_span_t* out_spans, size_t capacity);
size_t tpu_trace_dropped(void);

/* Opens `span` when tracing is on (kind NONE otherwise: end ignores it). */
void tpu_trace_begin(tpu_trace_span_t* span, tpu_trace_kind_t kind, const char* name);
/* The same for a transfer of `bytes` (known to the listener at begin). */
void tpu_trace_begin_sized(tpu_trace_span_t* span, tpu_trace_kind_t kind, const char* name,
                           int64_t bytes);
/* Closes and records it. */
void tpu_trace_end(tpu_trace_span_t* span);

/* The launcher tells the next execution span begun on this thread how
 * long its item waited in the queue. */
void tpu_trace_set_next_wait(int64_t wait_ns);

/* Sets (NULL clears) the listener; it is borrowed for the process. */
void tpu_trace_set_listener(const tpu_trace_listener_t* listener);

const char* tpu_trace_kind_name(tpu_trace_kind_t kind); /* "execute", ... */
int64_t tpu_trace_now_ns(void);                         /* CLOCK_MONOTONIC */

#ifdef __cplusplus
}
#endif
#endif
