/* The eager engine: one path for every op on the device.
 *
 *   call -> key (op, argument dtypes/views/storage sharing, structural
 *   values, scalar kinds) -> cache hit: execute; miss: the caller supplies
 *   the outputs' metadata (PyTorch's meta kernels, once per key), the
 *   engine builds the program (flat storages in, views folded, the table's
 *   lowering, writes out), compiles it, caches it, executes.
 *
 * Scalars are program arguments, so new values never recompile. Execution
 * is asynchronous: outputs are PJRT buffers whose contents arrive later;
 * reads wait for them. */
#ifndef TORCHTPU_CORE_EAGER_H_
#define TORCHTPU_CORE_EAGER_H_

#include <stdbool.h>
#include <stdint.h>

#include "eager_call.h"
#include "pjrt/buffer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tpu_eager_output_s {
  /* -1: a fresh tensor. Else the argument it writes (in-place / out=), and
   * for a TENSORS argument the element (alias_list), else -1. */
  int alias_arg;
  int alias_list;
  /* Fresh outputs: the geometry PyTorch's meta kernel gives. Aliased ones:
   * the written tensor's (filled by the engine). */
  tpu_view_t view;
  int64_t storage_numel;
} tpu_eager_output_t;

typedef struct tpu_eager_entry_s tpu_eager_entry_t;

/* The cached entry for this call, or NULL (a miss). */
tpu_eager_entry_t* tpu_eager_lookup(const tpu_eager_call_t* call);

/* Lowers and compiles the call with these outputs and caches the result
 * under the call's key. A lowering that declines (or a table without the
 * op) yields an entry marked fallback, also cached, so the decision is made
 * once per key. Errors from the compiler name the op. */
tpu_status_t tpu_eager_compile(const tpu_eager_call_t* call,
                               const tpu_eager_output_t* outputs, int num_outputs,
                               tpu_eager_entry_t** out_entry);

/* Caches "run this key on the CPU fallback" (e.g. no meta kernel). */
tpu_eager_entry_t* tpu_eager_mark_fallback(const tpu_eager_call_t* call, const char* why);

bool tpu_eager_entry_is_fallback(const tpu_eager_entry_t* entry);
const char* tpu_eager_entry_fallback_reason(const tpu_eager_entry_t* entry);
int tpu_eager_entry_num_outputs(const tpu_eager_entry_t* entry);
const tpu_eager_output_t* tpu_eager_entry_output(const tpu_eager_entry_t* entry, int i);

/* The caller's data kept with an entry (the C++ side keeps how schema
 * returns map to outputs), so a cache hit needs no second lookup. Freed
 * with the entry through user_free. The first value set wins: a later one
 * is freed at once (readers may hold the first). Returns the kept value. */
void* tpu_eager_entry_user(const tpu_eager_entry_t* entry);
void* tpu_eager_entry_set_user(tpu_eager_entry_t* entry, void* user, void (*user_free)(void*));

/* Runs the entry on the call's operands (or, with call->defer, records it
 * in the device's deferred run). Writes to aliased outputs go to their
 * storages; fresh output i goes to fresh[i], a new storage of its
 * storage_numel elements made by the caller (ignored for aliased outputs). */
tpu_status_t tpu_eager_execute(tpu_eager_entry_t* entry, const tpu_eager_call_t* call,
                               tpu_storage_t* const* fresh);

size_t tpu_eager_cache_size(void);
void tpu_eager_cache_clear(void);

#ifdef __cplusplus
}
#endif
#endif
