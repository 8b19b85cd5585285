/* DeferAndFuse: a per-device trace of recorded ops, flushed as ONE program.
 *
 * Recording an op costs no device work: its operands become values of the
 * run (a storage's contents on first use, then whatever the run last wrote
 * to it; run-time scalars as inputs), its results become new values, and
 * the storages it writes are marked with their new value (storage.h's
 * defer_value). Nothing reads a marked storage without flushing first: the
 * storage's settle hook flushes the run on any access to its contents.
 *
 * A flush keeps only the results still visible outside the run: the last
 * value of each written storage whose tensor is still alive. Values that die
 * inside the run (temporaries, overwritten contents) are never returned, so
 * XLA never materialises them. The fused program is the recorded ops' own
 * modules as private functions called in order from one @main; XLA inlines
 * and fuses across them. Fused programs are cached by structure (the ops'
 * identities, how values flow between them, which results are kept), so a
 * training step that records the same ops compiles once. A one-op run uses
 * that op's own program (shared with Strict mode).
 *
 * A run is flushed:
 *   SYNC     on a host read (item, cpu, print, ...) of a storage in the run,
 *            or torch.tpu.synchronize;
 *   BARRIER  when an op that cannot be deferred (CPU fallback, data-dependent
 *            shape) touches a storage in the run;
 *   LOOP     when the run ends with the same ops twice in a row (repeat.h),
 *            or when a compiled graph the run already holds comes again;
 *   CAP      at TORCHTPU_DEFER_MAX_OPS recorded ops, or before a compiled
 *            graph beyond TPU_DEFER_MAX_GRAPHS (graphs are whole programs: a
 *            loop over many distinct ones, shapes or graph breaks, with no
 *            host read would compile ever larger fused programs).
 * Each flush counts metrics defer_flushes and defer_flush::<reason>.
 *
 * Errors: an op that does not compile fails the flush, which names that op
 * (the fused program is bisected by compiling the ops one by one); the
 * storages the run would have written are marked lost and raise on read. */
#ifndef TORCHTPU_CORE_DEFER_H_
#define TORCHTPU_CORE_DEFER_H_

#include <stdbool.h>
#include <stddef.h>

#include "hlo/builder.h"
#include "pjrt/buffer.h"
#include "status.h"
#include "storage.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What an op contributes to a run; owned by the caller (an engine entry)
 * and alive until tpu_defer_cache_clear. Its identity (address) is part of
 * the fused programs' structural keys. */
typedef struct tpu_defer_op_s {
  const char* name;  /* the ATen op, for errors */
  const char* text;  /* its StableHLO module with one public @main */
  size_t len;
  int num_params;
  const tpu_hlo_type_t* params;
  int num_results;
  const tpu_hlo_type_t* results;
  /* A whole compiled graph (graph.h), not one ATen op: recording it into
   * a run that already holds it flushes the run first. A graph called
   * again is the next step of a loop; without this, a loop of graph calls
   * with no host read would fuse one graph per call into a growing
   * program until TORCHTPU_DEFER_MAX_OPS. */
  bool whole_graph;
} tpu_defer_op_t;

/* One parameter: a storage's contents (as the parameter's type: flat
 * [numel] of a dtype), or a run-time value such as a scalar. */
typedef struct tpu_defer_operand_s {
  tpu_storage_t* storage;
  tpu_buffer_t* buffer; /* when storage is NULL: borrowed unless owned */
  bool owned;           /* the run takes the buffer and destroys it */
} tpu_defer_operand_t;

enum { TPU_DEFER_MAX_GRAPHS = 16 }; /* compiled graphs in one run */

typedef enum {
  TPU_DEFER_SYNC = 0,
  TPU_DEFER_BARRIER,
  TPU_DEFER_LOOP,
  TPU_DEFER_CAP,
  TPU_DEFER_NUM_REASONS,
} tpu_defer_reason_t;

const char* tpu_defer_reason_name(tpu_defer_reason_t reason);

/* Records `op` on `device`'s run. results[i] is the storage that receives
 * result i (a written operand, a fresh output, the generator state). Owned
 * operand buffers pass to the run even on error. May flush (LOOP, CAP, or
 * first, when an operand's storage holds a value of another type). */
tpu_status_t tpu_defer_record(int device, const tpu_defer_op_t* op,
                              const tpu_defer_operand_t* params,
                              tpu_storage_t* const* results);

/* Runs `device`'s pending ops now (nothing if none). */
tpu_status_t tpu_defer_flush(int device, tpu_defer_reason_t reason);
tpu_status_t tpu_defer_flush_all(tpu_defer_reason_t reason);
/* Ops recorded and not yet flushed on `device`. */
int tpu_defer_pending_ops(int device);

/* The reason the calling thread's settle-triggered flushes report (SYNC
 * unless an op that cannot be deferred is running: BARRIER). Returns the
 * previous one, to restore. */
tpu_defer_reason_t tpu_defer_set_thread_reason(tpu_defer_reason_t reason);

/* Limits (TORCHTPU_DEFER_MAX_OPS, TORCHTPU_DEFER_MIN_REPEAT by default);
 * values <= 0 keep the current one. For tests and tuning. */
void tpu_defer_configure(int max_ops, int min_repeat);

size_t tpu_defer_cache_size(void);
/* Flushes every run, then forgets the fused programs. */
void tpu_defer_cache_clear(void);

#ifdef __cplusplus
}
#endif
#endif
