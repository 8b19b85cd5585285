/* The persistent executable caches (DESIGN.md, "Executable caches"): tier 2,
 * a directory on this host (TORCHTPU_CACHE_DIR), and tier 3, a directory
 * shared by many hosts (TORCHTPU_SHARED_CACHE_DIR), both holding serialized
 * executables in the same entry format.
 *
 * An entry is one file, <key>.entry: a fixed header (magic, format version,
 * key, payload length and checksum, the original compile time, a header
 * checksum) then the payload: the key's independent check (16 bytes) and
 * the plugin's serialized executable. Entries are written to
 * a temporary file in the same directory and renamed into place, so readers
 * see a whole entry or none. An entry that fails any check is deleted and
 * treated as a miss: the cache is never trusted and never fatal.
 *
 * Keys hash the StableHLO text, the compile-option bytes, the plugin
 * identity (platform name and version, xla_version, PJRT API version,
 * device kind) and TPU_VERSION: serialized executables only load into the
 * plugin build that wrote them. */
#ifndef TORCHTPU_CORE_DISKCACHE_H_
#define TORCHTPU_CORE_DISKCACHE_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pjrt/pjrt.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 128 bits as 32 lowercase hex digits (two independent 64-bit hashes). */
#define TPU_DISKCACHE_KEY_HEX 32
typedef struct tpu_diskcache_key_s {
  char hex[TPU_DISKCACHE_KEY_HEX + 1];
  /* A second, independent hash of the same key material, stored at the
   * start of the entry's payload and compared on load: an entry whose
   * payload is another program's (moved, swapped, or a colliding name) is
   * foreign ("cache_entries_foreign"), rejected and recompiled. */
  uint64_t check[2];
} tpu_diskcache_key_t;

/* The key of compiling `mlir` with `options` bytes for the plugin named by
 * `identity` (tpu_diskcache_identity) in this torchtpu version. */
void tpu_diskcache_key_make(const char* mlir, size_t mlir_len,
                            const uint8_t* options, size_t options_len,
                            const char* identity,
                            tpu_diskcache_key_t* out_key);
/* The plugin identity of `client` as text (platform, platform version,
 * xla_version, PJRT API major.minor, kind of device 0). Writes at most
 * `capacity` bytes (NUL included) and returns the full length. */
size_t tpu_diskcache_identity(const tpu_client_t* client, char* out_text,
                              size_t capacity);

/* ---- one cache directory ------------------------------------------------- */

typedef struct tpu_diskcache_s tpu_diskcache_t;

/* Opens (creating it and its parents when missing) a cache directory whose
 * entries are kept under `max_bytes` in total by LRU eviction (<= 0: no
 * cap). Fails when the directory cannot be created or written. */
tpu_status_t tpu_diskcache_open(const char* dir, int64_t max_bytes,
                                tpu_diskcache_t** out_cache);
void tpu_diskcache_close(tpu_diskcache_t* cache); /* NULL is fine */
const char* tpu_diskcache_dir(const tpu_diskcache_t* cache); /* borrowed */

/* Path of the entry file for `key` (written to out_path, at most `capacity`
 * bytes). Returns false when it does not fit. */
bool tpu_diskcache_entry_path(const tpu_diskcache_t* cache,
                              const tpu_diskcache_key_t* key, char* out_path,
                              size_t capacity);

/* Reads the entry for `key`. On a hit returns true, *out_payload (malloc'd,
 * the caller frees it), its length and the compile time stored with it, and
 * marks the entry recently used. A missing entry is a miss; a damaged,
 * truncated or foreign one is also deleted and counted in
 * "cache_entries_rejected". Never fails otherwise. */
bool tpu_diskcache_read(tpu_diskcache_t* cache, const tpu_diskcache_key_t* key,
                        void** out_payload, size_t* out_len,
                        int64_t* out_compile_ns);
/* Writes (replaces) the entry atomically, then evicts least recently used
 * entries until the directory is under its cap ("cache_evictions"). An
 * entry larger than the cap is not written. */
tpu_status_t tpu_diskcache_write(tpu_diskcache_t* cache,
                                 const tpu_diskcache_key_t* key,
                                 const void* payload, size_t len,
                                 int64_t compile_ns);
/* Deletes the entry (one the plugin refused to load), counting it in
 * "cache_entries_rejected". */
void tpu_diskcache_reject(tpu_diskcache_t* cache,
                          const tpu_diskcache_key_t* key);
/* Total bytes of the entries now in the directory. */
int64_t tpu_diskcache_bytes(tpu_diskcache_t* cache);

/* Blocks until this process holds the inter-process lock for `key`
 * (flock on <key>.lock): whoever holds it compiles the key while the others
 * wait, then find the entry. Threads of one process exclude each other too.
 * A process that dies releases its locks. */
tpu_status_t tpu_diskcache_lock(tpu_diskcache_t* cache,
                                const tpu_diskcache_key_t* key, int* out_fd);
/* Releases the lock taken by tpu_diskcache_lock and removes the lock file. */
void tpu_diskcache_unlock(tpu_diskcache_t* cache,
                          const tpu_diskcache_key_t* key, int fd);

/* ---- the process's tiers ----------------------------------------------- */

/* The executable for `mlir` compiled with `options` (NULL = portable), from
 * the local tier, else the shared tier (copied into the local one), else
 * compiled under the key's lock and written to both. Counts "compiles",
 * "compile_ns", "cache_hits::local", "cache_hits::shared",
 * "cache_misses::disk", "compile_ns_saved" (the stored compile time of each
 * disk hit) and "cache_write_failures". With both tiers off this is a
 * compile. Only compile errors are returned; cache trouble is a miss. */
tpu_status_t tpu_diskcache_load_or_compile(tpu_client_t* client,
                                           const char* mlir, size_t mlir_len,
                                           const tpu_compile_options_t* options,
                                           tpu_executable_t** out_executable);

/* The tiers' directories: "" when the tier is off (TORCHTPU_CACHE=0, unset,
 * or not creatable). Read from the environment on first use; the strings
 * stay valid until tpu_diskcache_reload. */
const char* tpu_diskcache_local_dir(void);
const char* tpu_diskcache_shared_dir(void);
/* The size cap of each tier, in bytes (<= 0: none). */
int64_t tpu_diskcache_max_bytes(void);
/* Reads the environment again (tests; not while other threads use the
 * caches). */
void tpu_diskcache_reload(void);

#ifdef __cplusplus
}
#endif
#endif
