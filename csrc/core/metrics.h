/* Named counters (compiles, executions, bytes moved, CPU fallbacks per op
 * ...), thread-safe, readable as a snapshot. Names are copied on first use;
 * a counter never disappears, so snapshots stay comparable over time. */
#ifndef TORCHTPU_CORE_METRICS_H_
#define TORCHTPU_CORE_METRICS_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

void tpu_metrics_add(const char* name, int64_t delta);
int64_t tpu_metrics_get(const char* name); /* 0 when never counted */

/* A handle on one counter, for the dispatch path: tpu_metrics_bump adds to
 * it without a lock or a name lookup. Handles stay valid for the life of
 * the process; NULL (out of memory) is accepted by bump and ignored. */
typedef struct tpu_metrics_counter_s tpu_metrics_counter_t;
tpu_metrics_counter_t* tpu_metrics_counter(const char* name);
void tpu_metrics_bump(tpu_metrics_counter_t* counter, int64_t delta);

/* Bumps the named counter through a handle looked up once per call site. */
#define TPU_METRICS_BUMP(name, delta)                                           \
  do {                                                                        \
    static tpu_metrics_counter_t* _Atomic tpu_metrics_site_;                  \
    tpu_metrics_counter_t* tpu_metrics_c_ = tpu_metrics_site_;                \
    if (!tpu_metrics_c_) tpu_metrics_site_ = tpu_metrics_c_ = tpu_metrics_counter(name); \
    tpu_metrics_bump(tpu_metrics_c_, (delta));                                \
  } while (0)

typedef struct tpu_metrics_entry_s {
  const char* name; /* valid for the life of the process */
  int64_t value;
} tpu_metrics_entry_t;

/* Copies up to `capacity` counters into out_entries (in creation order) and
 * returns how many counters exist. */
size_t tpu_metrics_snapshot(tpu_metrics_entry_t* out_entries, size_t capacity);
/* Sets every counter to zero. */
void tpu_metrics_reset(void);

#ifdef __cplusplus
}
#endif
#endif
