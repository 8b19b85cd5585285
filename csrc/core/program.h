/* Compiled programs and the in-process executable cache (tier 1): a
 * StableHLO text is compiled at most once per process; later requests for
 * the same text return the same program. At most
 * TORCHTPU_PROGRAM_CACHE_MAX programs stay loaded: those unused for a
 * period are destroyed (program.c), and every such rotation bumps
 * tpu_program_cache_generation, so holders of program pointers fetch
 * theirs again. Behind this tier sit
 * the persistent ones (diskcache.h). Execution is asynchronous; its
 * completion is tracked for tpu_runtime_synchronize. */
#ifndef TORCHTPU_CORE_PROGRAM_H_
#define TORCHTPU_CORE_PROGRAM_H_

#include <stdbool.h>
#include <stddef.h>

#include "pjrt/pjrt.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tpu_program_s tpu_program_t;

/* The program for `mlir` (borrowed result). A miss here (tier 1) loads it
 * from the disk caches or compiles it (tpu_diskcache_load_or_compile, which
 * counts "compiles", "compile_ns" and the disk tiers' metrics); a hit counts
 * "program_cache_hits". A program that does not compile returns the
 * compiler's message and is not cached. */
/* The options the program `mlir` compiles with on this client (part of its
 * disk cache key): bound to the device when there is only one; on the CPU
 * plugin, small programs' kernels on one thread (serial_kernels). */
tpu_compile_options_t tpu_program_compile_options(const tpu_client_t* client, const char* mlir,
                                                  size_t mlir_len);

tpu_status_t tpu_program_get(const char* mlir, size_t mlir_len,
                             tpu_program_t** out_program);

tpu_executable_t* tpu_program_executable(const tpu_program_t* program);
int tpu_program_num_outputs(const tpu_program_t* program);

/* Enqueues the program on device_index with borrowed args; out_results
 * (num_outputs entries) receives new buffers. No argument is donated.
 * Counts "executions". */
tpu_status_t tpu_program_execute(tpu_program_t* program, int device_index,
                                 tpu_buffer_t* const* args, int nargs,
                                 tpu_buffer_t** out_results);
/* The same into pending buffers of the program's output types (filled,
 * not made: tpu_executable_execute_into). */
tpu_status_t tpu_program_execute_into(tpu_program_t* program, int device_index,
                                      tpu_buffer_t* const* args, int nargs,
                                      tpu_buffer_t** pending_results);
/* The same, then waits for the execution to finish and returns its error
 * (Debug mode: errors surface at the op that caused them). */
tpu_status_t tpu_program_execute_sync(tpu_program_t* program, int device_index,
                                      tpu_buffer_t* const* args, int nargs,
                                      tpu_buffer_t** out_results);

/* Whether the plugin is seen to run this program to completion inside its
 * execute call (the CPU plugin does for small programs whose inputs are
 * ready); such executions skip their completion events (program.c). */
bool tpu_program_runs_inline(const tpu_program_t* program);

/* Number of loaded programs. */
size_t tpu_program_cache_size(void);
/* Overrides TORCHTPU_PROGRAM_CACHE_MAX (tests); 0: no cap. */
void tpu_program_cache_set_max(size_t max);
/* The process's memory-map limit the cache keeps 40% below (rotating when
 * more are held, checked every 32 new programs); read from
 * /proc/sys/vm/max_map_count unless set. 0: not watched. Testing. */
void tpu_program_cache_set_map_limit(long limit);
/* Destroys every cached program (tests and shutdown only). */
void tpu_program_cache_clear(void);
/* Bumped by every clear and rotation: holders of program pointers (engine entries,
 * fused runs) compare it to know theirs are gone. */
unsigned tpu_program_cache_generation(void);

#ifdef __cplusplus
}
#endif
#endif
