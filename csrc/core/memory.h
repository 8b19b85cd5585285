/* Per-device byte accounting. PJRT's CPU plugin reports no memory stats
 * (PJRT_Device_MemoryStats is unimplemented there), so torch.tpu.memory_*
 * is backed by our own counts of live storage bytes. Thread-safe. */
#ifndef TORCHTPU_CORE_MEMORY_H_
#define TORCHTPU_CORE_MEMORY_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TPU_MAX_DEVICES 64

typedef struct tpu_memory_stats_s {
  int64_t allocated_bytes;      /* live now */
  int64_t peak_allocated_bytes; /* since start or the last reset_peak */
  int64_t total_allocated_bytes; /* cumulative */
  int64_t total_freed_bytes;
  int64_t num_allocs;
  int64_t num_frees;
  int64_t live_allocations;
  int64_t peak_live_allocations; /* since start or the last reset_peak */
  int64_t num_ooms; /* allocations refused for want of capacity */
} tpu_memory_stats_t;

void tpu_memory_record_alloc(int device, size_t nbytes);
/* The most bytes the device may hold (0: no limit, the default). */
void tpu_memory_set_capacity(int device, int64_t capacity_bytes);
int64_t tpu_memory_capacity(int device);
/* Records an allocation of nbytes unless it would take the live bytes past
 * the capacity; false (nothing recorded) then. */
bool tpu_memory_try_record_alloc(int device, size_t nbytes);
void tpu_memory_record_free(int device, size_t nbytes);
/* Zeroed stats for a device index out of range. */
void tpu_memory_stats_get(int device, tpu_memory_stats_t* out_stats);
/* Peak := current. */
void tpu_memory_reset_peak(int device);
/* Cumulative counters := 0 (live and peak untouched). */
void tpu_memory_reset_accumulated(int device);

#ifdef __cplusplus
}
#endif
#endif
