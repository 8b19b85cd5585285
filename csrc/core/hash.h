/* The core's hashes, one definition each. */
#ifndef TORCHTPU_CORE_HASH_H_
#define TORCHTPU_CORE_HASH_H_

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* FNV-1a's 64-bit prime, and an offset basis that is NOT the published one
 * (14695981039346656037): this one is a digit short, as the core has
 * always written it. Disk cache keys are made with it (diskcache.c), so it
 * stays: changing it would orphan every entry on disk. */
#define TPU_HASH_FNV_OFFSET 1469598103934665603ull
#define TPU_HASH_FNV_PRIME 1099511628211ull /* 0x100000001b3 */

/* FNV-1a, 64-bit (with the offset above), of `len` bytes. Persisted: its
 * values must never change (hash_test.c pins them). */
static inline uint64_t tpu_hash_fnv1a(const void* data, size_t len) {
  const unsigned char* p = (const unsigned char*)data;
  uint64_t h = TPU_HASH_FNV_OFFSET;
  for (size_t i = 0; i < len; i++) h = (h ^ p[i]) * TPU_HASH_FNV_PRIME;
  return h;
}

/* The same of a NUL-terminated string (without the NUL). */
static inline uint64_t tpu_hash_fnv1a_str(const char* s) {
  uint64_t h = TPU_HASH_FNV_OFFSET;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * TPU_HASH_FNV_PRIME;
  return h;
}

/* For in-process tables whose keys are hashed on every op (a few hundred
 * bytes): 8 bytes a step (an FNV-style multiply), the tail byte-wise, then
 * a final avalanche. Never persisted: free to change. */
static inline uint64_t tpu_hash_bytes(const void* data, size_t n) {
  const unsigned char* p = (const unsigned char*)data;
  uint64_t h = TPU_HASH_FNV_OFFSET ^ n;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    memcpy(&w, p + i, 8);
    h = (h ^ w) * TPU_HASH_FNV_PRIME;
    h ^= h >> 29;
  }
  for (; i < n; i++) h = (h ^ p[i]) * TPU_HASH_FNV_PRIME;
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  return h;
}

#endif
