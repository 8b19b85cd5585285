/* A scratch arena: a bump allocator for temporaries that all die together
 * (one compile's arrays). One free releases everything, so a multi-step
 * job's error paths need no cleanup of their own, and a handful of arrays
 * cost one malloc instead of one each.
 *
 *   tpu_arena_t arena;
 *   tpu_arena_init(&arena, 0);
 *   int* xs = NULL;
 *   TPU_RETURN_IF_ERROR(tpu_arena_alloc(&arena, n, sizeof *xs, (void**)&xs));
 *   ...
 *   tpu_arena_free(&arena);
 *
 * Memory that outlives the job does not belong here. An arena has one
 * owner: it is not thread-safe. */
#ifndef TORCHTPU_CORE_ARENA_H_
#define TORCHTPU_CORE_ARENA_H_

#include <stddef.h>

#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tpu_arena_block_s tpu_arena_block_t;

typedef struct tpu_arena_s {
  tpu_arena_block_t* block; /* the newest block, which allocations bump; owned */
  size_t block_size;        /* bytes of the next block (doubles per block) */
} tpu_arena_t;

/* An empty arena; nothing is allocated until the first tpu_arena_alloc.
 * block_size 0 picks a default (16 KiB) that holds a typical job in one
 * block. */
void tpu_arena_init(tpu_arena_t* arena, size_t block_size);

/* *out_ptr: count * size zeroed bytes (like calloc), aligned for any type,
 * valid until tpu_arena_free. count 0 gives a valid pointer to no bytes.
 * RESOURCE_EXHAUSTED ("out of host memory", *out_ptr NULL) when the host
 * has no memory or count * size overflows. */
tpu_status_t tpu_arena_alloc(tpu_arena_t* arena, size_t count, size_t size, void** out_ptr);

/* Frees everything the arena allocated; the arena is empty again and may be
 * used anew. */
void tpu_arena_free(tpu_arena_t* arena);

#ifdef __cplusplus
}
#endif
#endif /* TORCHTPU_CORE_ARENA_H_ */
