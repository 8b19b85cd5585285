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
