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

/* XXH64, the public xxHash algorithm (written out here; hash_test.c checks
 * the published values). Persisted: disk cache checksums and half of each
 * key (diskcache.c). Words are read in host order: little-endian on the
 * x86 and Arm hosts we run on. */
#define TPU_XXH_P1 0x9E3779B185EBCA87ull
#define TPU_XXH_P2 0xC2B2AE3D27D4EB4Full
#define TPU_XXH_P3 0x165667B19E3779F9ull
#define TPU_XXH_P4 0x85EBCA77C2B2AE63ull
#define TPU_XXH_P5 0x27D4EB2F165667C5ull

static inline uint64_t tpu_xxh_rotl_(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

static inline uint64_t tpu_xxh_read_(const unsigned char* p) {
  uint64_t v;
  memcpy(&v, p, 8);
  return v;
}

static inline uint64_t tpu_xxh_round_(uint64_t acc, uint64_t input) {
  return tpu_xxh_rotl_(acc + input * TPU_XXH_P2, 31) * TPU_XXH_P1;
}

static inline uint64_t tpu_xxh_merge_(uint64_t acc, uint64_t v) {
  return (acc ^ tpu_xxh_round_(0, v)) * TPU_XXH_P1 + TPU_XXH_P4;
}

static inline uint64_t tpu_hash_xxh64(const void* data, size_t len, uint64_t seed) {
  const unsigned char* p = (const unsigned char*)data;
  const unsigned char* end = p + len;
  uint64_t h;
  if (len >= 32) {
    uint64_t v1 = seed + TPU_XXH_P1 + TPU_XXH_P2, v2 = seed + TPU_XXH_P2, v3 = seed;
    uint64_t v4 = seed - TPU_XXH_P1;
    for (; p + 32 <= end; p += 32) {
      v1 = tpu_xxh_round_(v1, tpu_xxh_read_(p));
      v2 = tpu_xxh_round_(v2, tpu_xxh_read_(p + 8));
      v3 = tpu_xxh_round_(v3, tpu_xxh_read_(p + 16));
      v4 = tpu_xxh_round_(v4, tpu_xxh_read_(p + 24));
    }
    h = tpu_xxh_rotl_(v1, 1) + tpu_xxh_rotl_(v2, 7) + tpu_xxh_rotl_(v3, 12) + tpu_xxh_rotl_(v4, 18);
    h = tpu_xxh_merge_(tpu_xxh_merge_(h, v1), v2);
    h = tpu_xxh_merge_(tpu_xxh_merge_(h, v3), v4);
  } else {
    h = seed + TPU_XXH_P5;
  }
  h += len;
  for (; p + 8 <= end; p += 8)
    h = tpu_xxh_rotl_(h ^ tpu_xxh_round_(0, tpu_xxh_read_(p)), 27) * TPU_XXH_P1 + TPU_XXH_P4;
  if (p + 4 <= end) {
    uint32_t w;
    memcpy(&w, p, 4);
    h = tpu_xxh_rotl_(h ^ (uint64_t)w * TPU_XXH_P1, 23) * TPU_XXH_P2 + TPU_XXH_P3;
    p += 4;
  }
  for (; p < end; p++) h = tpu_xxh_rotl_(h ^ *p * TPU_XXH_P5, 11) * TPU_XXH_P1;
  h ^= h >> 33;
  h *= TPU_XXH_P2;
  h ^= h >> 29;
  h *= TPU_XXH_P3;
  return h ^ (h >> 32);
}

#endif
