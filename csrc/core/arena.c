#include "arena.h"

#include <stdalign.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Under AddressSanitizer the unused part of a block and a redzone after
 * each allocation stay poisoned, so an overflow from one array into the
 * next is still caught, as it was when each array was its own malloc. */
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define ARENA_REDZONE 16
#define ARENA_POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define ARENA_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define ARENA_REDZONE 0
#define ARENA_POISON(p, n) ((void)(p), (void)(n))
#define ARENA_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

#define ARENA_DEFAULT_BLOCK ((size_t)16 * 1024)
#define ARENA_ALIGN alignof(max_align_t)

struct tpu_arena_block_s {
  tpu_arena_block_t* prev;
  size_t used, cap; /* bytes of data */
  max_align_t data[];
};

void tpu_arena_init(tpu_arena_t* arena, size_t block_size) {
  arena->block = NULL;
  arena->block_size = block_size ? block_size : ARENA_DEFAULT_BLOCK;
}

static size_t round_up(size_t n) { return (n + ARENA_ALIGN - 1) & ~(ARENA_ALIGN - 1); }

/* A new newest block with room for at least `need` bytes. */
static tpu_arena_block_t* arena_grow(tpu_arena_t* arena, size_t need) {
  size_t cap = arena->block_size > need ? arena->block_size : need;
  if (cap > SIZE_MAX - sizeof(tpu_arena_block_t)) return NULL;
  tpu_arena_block_t* block = malloc(sizeof *block + cap);
  if (!block) return NULL;
  block->prev = arena->block;
  block->used = 0;
  block->cap = cap;
  ARENA_POISON(block->data, cap);
  arena->block = block;
  /* Doubling keeps the number of blocks logarithmic in what a job uses. */
  if (arena->block_size <= SIZE_MAX / 2) arena->block_size *= 2;
  return block;
}

tpu_status_t tpu_arena_alloc(tpu_arena_t* arena, size_t count, size_t size, void** out_ptr) {
  *out_ptr = NULL;
  if (size && count > SIZE_MAX / size) return tpu_status_oom(NULL);
  size_t bytes = count * size;
  if (bytes > SIZE_MAX - ARENA_ALIGN - ARENA_REDZONE) return tpu_status_oom(NULL);
  size_t span = round_up(bytes + ARENA_REDZONE);
  tpu_arena_block_t* block = arena->block;
  if (!block || block->cap - block->used < span) block = arena_grow(arena, span);
  if (!block) return tpu_status_oom(NULL);
  unsigned char* p = (unsigned char*)block->data + block->used;
  block->used += span;
  ARENA_UNPOISON(p, bytes);
  memset(p, 0, bytes);
  *out_ptr = p;
  return NULL;
}

void tpu_arena_free(tpu_arena_t* arena) {
  tpu_arena_block_t* block = arena->block;
  while (block) {
    tpu_arena_block_t* prev = block->prev;
    ARENA_UNPOISON(block->data, block->cap); /* malloc's own memory again */
    free(block);
    block = prev;
  }
  arena->block = NULL;
}
