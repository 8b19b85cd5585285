/* An op call as the eager engine receives it (the boxed C++ kernel fills
 * one per op), and what follows from the call alone, before any compile:
 * the storages it touches, its cache key, and that key's parts as text.
 *
 * Slots: a program takes one flat parameter per distinct storage, not per
 * tensor, so two views of one storage read and write one buffer. The key
 * names each tensor's slot: x + x and x + y are different programs. */
#ifndef TORCHTPU_CORE_EAGER_CALL_H_
#define TORCHTPU_CORE_EAGER_CALL_H_

#include <stdbool.h>
#include <stdint.h>

#include "lower/lowering.h"
#include "status.h"
#include "storage.h"
#include "view.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tpu_eager_tensor_s {
  tpu_storage_t* storage; /* borrowed */
  tpu_view_t view;
  int64_t storage_numel; /* storage bytes / element size */
} tpu_eager_tensor_t;

typedef struct tpu_eager_arg_s {
  /* Kind and structural payload. TENSOR: lower.type is the logical type. */
  tpu_lower_arg_t lower;
  tpu_eager_tensor_t tensor; /* TENSOR */
  int list_start;            /* TENSORS: first index into call->list */
  uint8_t scalar[16];        /* SCALAR: its value as lower.type.dtype */
  const double* scalars;     /* SCALARS: lower.num_tensors values (borrowed) */
} tpu_eager_arg_t;

typedef struct tpu_eager_call_s {
  const char* op_name; /* "aten::add.out"; static: a queued execution names it later */
  int device;
  int num_args;
  tpu_eager_arg_t* args;
  int num_list;
  tpu_eager_tensor_t* list; /* every TENSORS argument's tensors */
  /* Wait for the execution and return its error (Debug mode) instead of
   * enqueueing it. Not part of the key: the program is the same. */
  bool synchronous;
  /* DeferAndFuse: record the call in the device's run (defer.h) instead of
   * executing it. Not part of the key either. */
  bool defer;
  /* Process state that changes an op's results or its outputs' metadata
   * (PyTorch's default dtype, deterministic mode: see dispatch.cpp),
   * packed by the caller. Part of the key: an entry compiled under one
   * setting never serves another. */
  uint32_t state;
  /* Precision of float32 products (torch.set_float32_matmul_precision,
   * torch.tpu.precision): put on the op's dot_general / convolution. Part
   * of the key, and so of a deferred run's. */
  tpu_hlo_precision_t precision;
} tpu_eager_call_t;

/* The call's distinct storages in first-use order (arguments in order, a
 * TENSORS argument's tensors in place), each with the element type and
 * size it is read as. Few storages (nearly every call) stay inline: this
 * runs on every op. */
#define TPU_EAGER_SLOTS_INLINE 32
typedef struct tpu_eager_slots_s {
  int count;
  tpu_storage_t** storages; /* borrowed */
  tpu_dtype_t* dtypes;
  int64_t* numels;
  bool conflict; /* one storage viewed with two element types */
  tpu_storage_t* inline_storages[TPU_EAGER_SLOTS_INLINE];
  tpu_dtype_t inline_dtypes[TPU_EAGER_SLOTS_INLINE];
  int64_t inline_numels[TPU_EAGER_SLOTS_INLINE];
} tpu_eager_slots_t;

/* Fills *out_slots; free them with tpu_eager_slots_free, after an error
 * too. When given, out_arg_slot[i] receives argument i's slot (-1 unless
 * a TENSOR) and out_list_slot[k] list tensor k's. */
tpu_status_t tpu_eager_call_slots(const tpu_eager_call_t* call, tpu_eager_slots_t* out_slots,
                                  int* out_arg_slot, int* out_list_slot);
void tpu_eager_slots_free(tpu_eager_slots_t* slots);

/* The bytes two calls share exactly when one program serves both: op,
 * state, precision and each argument's kind and structure (a tensor's slot
 * and view, ints, dtypes, strings; a scalar's type, never its value). */
typedef struct tpu_eager_key_s {
  uint8_t* data; /* the caller's buffer, until the key outgrows it */
  size_t len, cap;
  bool on_heap; /* data is malloc'd: tpu_eager_key_free frees it */
  bool failed;
} tpu_eager_key_t;

/* Builds the call's key in buf[0..cap) (NULL and 0: malloc'd from the
 * start), moving to the heap if it outgrows it. Free it with
 * tpu_eager_key_free, after an error too. */
tpu_status_t tpu_eager_call_key(const tpu_eager_call_t* call, void* buf, size_t cap,
                                tpu_eager_key_t* out_key);
void tpu_eager_key_free(tpu_eager_key_t* key);

/* For the recompile log (recompile.h): the key as parts, one per argument
 * ("arg 0: float32[4] strides [1] offset 0 of 4") then the settings
 * ("settings: matmul precision unset, state 0x0"), at most
 * TPU_EAGER_CALL_MAX_PARTS.
 * Returns the malloc'd block out_parts point into (NULL: out of memory). */
#define TPU_EAGER_CALL_MAX_PARTS 64
char* tpu_eager_call_describe(const tpu_eager_call_t* call, const char** out_parts,
                              int* out_num_parts);

#ifdef __cplusplus
}
#endif
#endif
