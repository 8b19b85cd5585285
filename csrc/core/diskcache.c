#include "diskcache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "env.h"
#include "hash.h"
#include "metrics.h"
#include "version.h"

/* ---- keys ------------------------------------------------------------------- */

static uint8_t* put_field(uint8_t* out, const void* data, size_t len) {
  uint64_t n = len; /* length-prefixed: ("ab","c") and ("a","bc") differ */
  memcpy(out, &n, 8);
  if (len) memcpy(out + 8, data, len);
  return out + 8 + len;
}

/* Seeds of the key's independent check: not the name's hashes. */
static const uint64_t kCheckSeeds[2] = {0x6b6579636865636bull, 0x746f726368747075ull};

void tpu_diskcache_key_make(const char* mlir, size_t mlir_len,
                            const uint8_t* options, size_t options_len,
                            const char* identity,
                            tpu_diskcache_key_t* out_key) {
  static const char kDomain[] = "torchtpu executable cache key";
  const void* fields[] = {kDomain, mlir, options, identity, TPU_VERSION};
  const size_t lens[] = {sizeof kDomain - 1, mlir_len, options_len,
                         identity ? strlen(identity) : 0, strlen(TPU_VERSION)};
  size_t total = 0;
  for (size_t i = 0; i < 5; i++) total += 8 + lens[i];
  uint8_t* buffer = malloc(total);
  uint64_t a, b;
  if (buffer) {
    uint8_t* at = buffer;
    for (size_t i = 0; i < 5; i++) at = put_field(at, fields[i], lens[i]);
    a = tpu_hash_xxh64(buffer, total, 0);
    b = tpu_hash_fnv1a(buffer, total);
    out_key->check[0] = tpu_hash_xxh64(buffer, total, kCheckSeeds[0]);
    out_key->check[1] = tpu_hash_xxh64(buffer, total, kCheckSeeds[1]);
    free(buffer);
  } else {
    /* Out of memory: hash the fields one by one (still deterministic). */
    a = b = 0;
    uint64_t c0 = kCheckSeeds[0], c1 = kCheckSeeds[1];
    for (size_t i = 0; i < 5; i++) {
      a = tpu_hash_xxh64(fields[i], lens[i], a + lens[i]);
      b = b * 31 + tpu_hash_fnv1a(fields[i], lens[i]) + lens[i];
      c0 = tpu_hash_xxh64(fields[i], lens[i], c0 + lens[i]);
      c1 = tpu_hash_xxh64(fields[i], lens[i], c1 ^ lens[i]);
    }
    out_key->check[0] = c0;
    out_key->check[1] = c1;
  }
  snprintf(out_key->hex, sizeof out_key->hex, "%016llx%016llx",
           (unsigned long long)a, (unsigned long long)b);
}

size_t tpu_diskcache_identity(const tpu_client_t* client, char* out_text,
                              size_t capacity) {
  tpu_plugin_t* plugin = tpu_client_plugin(client);
  tpu_device_t* device = NULL;
  tpu_status_t status = tpu_client_device(client, 0, &device);
  tpu_status_free(status);
  /* The plugins read their compiler flags from these (XLA's DebugOptions,
   * libtpu's arguments): an executable compiled under other flags is
   * another program, so the flags are part of the key (the registry lists
   * them as external variables). */
  const char* xla_flags = tpu_env_get("XLA_FLAGS");
  const char* libtpu_args = tpu_env_get("LIBTPU_INIT_ARGS");
  int n = snprintf(out_text, capacity,
                   "platform=%s\nplatform_version=%s\nxla_version=%s\n"
                   "pjrt_api=%d.%d\ndevice_kind=%s\nxla_flags=%s\n"
                   "libtpu_init_args=%s\n",
                   tpu_client_platform_name(client),
                   tpu_client_platform_version(client),
                   tpu_plugin_attribute(plugin, "xla_version"),
                   tpu_plugin_api_major(plugin), tpu_plugin_api_minor(plugin),
                   device ? tpu_device_kind(device) : "", xla_flags ? xla_flags : "",
                   libtpu_args ? libtpu_args : "");
  return n < 0 ? 0 : (size_t)n;
}

/* ---- entry format ------------------------------------------------------------
 * Little-endian header, then the payload:
 *   0  magic "TORCHTPU"        8
 *   8  format version u32      12  header length u32
 *   16 key (32 hex digits)
 *   48 payload length u64      56 payload checksum (xxh64) u64
 *   64 compile time ns i64     72 header checksum (xxh64 of bytes 0..71)
 * The payload (covered by its checksum): the key's check (2 x u64), then
 * the serialized executable. Version 1 entries had no check: they are
 * rejected and rewritten. */

#define MAGIC "TORCHTPU"
#define FORMAT_VERSION 2u
#define HEADER_LEN 80
#define CHECK_LEN 16
#define ENTRY_SUFFIX ".entry"
#define LOCK_SUFFIX ".lock"
#define TEMP_SUFFIX ".tmp"
/* Temporary files of processes that died mid-write are removed after this. */
#define STALE_TEMP_SECONDS 3600

static void put_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void put_u64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get_u32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; i++) v |= (uint32_t)p[i] << (8 * i);
  return v;
}
static uint64_t get_u64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
  return v;
}

/* payload: the check then the executable (len bytes in all). */
static void encode_header(uint8_t header[HEADER_LEN],
                          const tpu_diskcache_key_t* key, const void* payload,
                          size_t len, int64_t compile_ns) {
  memcpy(header, MAGIC, 8);
  put_u32(header + 8, FORMAT_VERSION);
  put_u32(header + 12, HEADER_LEN);
  memcpy(header + 16, key->hex, TPU_DISKCACHE_KEY_HEX);
  put_u64(header + 48, len);
  put_u64(header + 56, tpu_hash_xxh64(payload, len, 0));
  put_u64(header + 64, (uint64_t)compile_ns);
  put_u64(header + 72, tpu_hash_xxh64(header, 72, 0));
}

/* ---- one directory ------------------------------------------------------------ */

struct tpu_diskcache_s {
  char* dir;
  int64_t max_bytes;
  pthread_mutex_t lock; /* guards the fields below */
  /* Bytes of the entries as of our last scan plus what we wrote since: a
   * directory scan after every write would cost O(entries) per compile. */
  int64_t estimate; /* -1: never scanned */
  int writes_since_scan;
};

/* Another process's writes are not in our estimate: rescan this often. */
#define WRITES_PER_SCAN 32

static tpu_status_t errno_status(const char* what, const char* path) {
  int err = errno;
  return tpu_status_make(err == ENOSPC || err == EDQUOT
                             ? TPU_STATUS_RESOURCE_EXHAUSTED
                             : TPU_STATUS_UNAVAILABLE,
                         "%s %s: %s", what, path, strerror(err));
}

static tpu_status_t make_dirs(const char* dir) {
  char* path = strdup(dir);
  if (!path) return tpu_status_make(TPU_STATUS_RESOURCE_EXHAUSTED, "out of memory");
  tpu_status_t status = NULL;
  for (char* p = path + 1;; p++) {
    if (*p != '/' && *p != '\0') continue;
    char saved = *p;
    *p = '\0';
    if (mkdir(path, 0755) != 0 && errno != EEXIST) {
      status = errno_status("cannot create cache directory", path);
      break;
    }
    *p = saved;
    if (!saved) break;
  }
  free(path);
  if (status) return status;
  struct stat st;
  if (stat(dir, &st) != 0) return errno_status("cannot use cache directory", dir);
  if (!S_ISDIR(st.st_mode)) {
    return tpu_status_make(TPU_STATUS_FAILED_PRECONDITION,
                           "cache directory %s is not a directory", dir);
  }
  return NULL;
}

tpu_status_t tpu_diskcache_open(const char* dir, int64_t max_bytes,
                                tpu_diskcache_t** out_cache) {
  *out_cache = NULL;
  if (!dir || dir[0] != '/') {
    return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT,
                           "cache directory must be an absolute path, not '%s'",
                           dir ? dir : "(null)");
  }
  TPU_RETURN_IF_ERROR(make_dirs(dir));
  tpu_diskcache_t* cache = calloc(1, sizeof *cache);
  char* copy = strdup(dir);
  if (!cache || !copy) {
    free(cache);
    free(copy);
    return tpu_status_make(TPU_STATUS_RESOURCE_EXHAUSTED, "out of memory");
  }
  size_t n = strlen(copy);
  while (n > 1 && copy[n - 1] == '/') copy[--n] = '\0';
  cache->dir = copy;
  cache->max_bytes = max_bytes;
  cache->estimate = -1;
  pthread_mutex_init(&cache->lock, NULL);
  *out_cache = cache;
  return NULL;
}

void tpu_diskcache_close(tpu_diskcache_t* cache) {
  if (!cache) return;
  pthread_mutex_destroy(&cache->lock);
  free(cache->dir);
  free(cache);
}

const char* tpu_diskcache_dir(const tpu_diskcache_t* cache) { return cache->dir; }

static bool key_path(const tpu_diskcache_t* cache, const tpu_diskcache_key_t* key,
                     const char* suffix, char* out, size_t capacity) {
  int n = snprintf(out, capacity, "%s/%s%s", cache->dir, key->hex, suffix);
  return n > 0 && (size_t)n < capacity;
}

bool tpu_diskcache_entry_path(const tpu_diskcache_t* cache,
                              const tpu_diskcache_key_t* key, char* out_path,
                              size_t capacity) {
  return key_path(cache, key, ENTRY_SUFFIX, out_path, capacity);
}

static bool read_all(int fd, void* data, size_t len, off_t offset) {
  uint8_t* p = data;
  while (len) {
    ssize_t n = pread(fd, p, len, offset);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    offset += n;
    len -= (size_t)n;
  }
  return true;
}

static bool write_all(int fd, const void* data, size_t len) {
  const uint8_t* p = data;
  while (len) {
    ssize_t n = write(fd, p, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    len -= (size_t)n;
  }
  return true;
}

/* Deletes a rejected entry unless another process has meanwhile renamed a
 * fresh one into its place (then the path names a different file). */
static void remove_rejected(const char* path, const struct stat* opened) {
  struct stat now;
  if (stat(path, &now) == 0 && now.st_ino == opened->st_ino &&
      now.st_dev == opened->st_dev)
    unlink(path);
  TPU_METRICS_BUMP("cache_entries_rejected", 1);
}

/* True when `header` is a version-1 header for `key` describing a payload of
 * exactly file_size - HEADER_LEN bytes. */
static bool header_valid(const uint8_t header[HEADER_LEN],
                         const tpu_diskcache_key_t* key, off_t file_size) {
  return memcmp(header, MAGIC, 8) == 0 && get_u32(header + 8) == FORMAT_VERSION &&
         get_u32(header + 12) == HEADER_LEN &&
         get_u64(header + 72) == tpu_hash_xxh64(header, 72, 0) &&
         memcmp(header + 16, key->hex, TPU_DISKCACHE_KEY_HEX) == 0 &&
         get_u64(header + 48) == (uint64_t)(file_size - HEADER_LEN);
}

bool tpu_diskcache_read(tpu_diskcache_t* cache, const tpu_diskcache_key_t* key,
                        void** out_payload, size_t* out_len,
                        int64_t* out_compile_ns) {
  *out_payload = NULL;
  *out_len = 0;
  *out_compile_ns = 0;
  char path[4096];
  if (!key_path(cache, key, ENTRY_SUFFIX, path, sizeof path)) return false;
  /* Non-blocking: a FIFO (or a device) at the entry's path would block the
   * open until a writer came; it is no entry. (No effect on a file.) */
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return false; /* a miss (or unreadable: the same to us) */
  struct stat st;
  if (fstat(fd, &st) != 0) {
    close(fd); /* cannot tell what it is: leave it alone */
    return false;
  }
  uint8_t header[HEADER_LEN];
  bool ok = S_ISREG(st.st_mode) && st.st_size >= HEADER_LEN + CHECK_LEN &&
            read_all(fd, header, HEADER_LEN, 0) && header_valid(header, key, st.st_size);
  size_t len = ok ? (size_t)get_u64(header + 48) : 0;
  uint8_t* payload = ok ? malloc(len ? len : 1) : NULL;
  if (ok && !payload) {
    close(fd); /* out of memory says nothing about the entry: a plain miss */
    return false;
  }
  ok = ok && read_all(fd, payload, len, HEADER_LEN) &&
       tpu_hash_xxh64(payload, len, 0) == get_u64(header + 56);
  if (ok && (get_u64(payload) != key->check[0] || get_u64(payload + 8) != key->check[1])) {
    /* Sound, but another program's executable. */
    TPU_METRICS_BUMP("cache_entries_foreign", 1);
    ok = false;
  }
  if (!ok) {
    free(payload);
    remove_rejected(path, &st);
    close(fd);
    return false;
  }
  len -= CHECK_LEN;
  memmove(payload, payload + CHECK_LEN, len);
  /* Mark it recently used for LRU eviction (fails harmlessly on a read-only
   * shared directory). */
  futimens(fd, NULL);
  close(fd);
  *out_payload = payload;
  *out_len = len;
  *out_compile_ns = (int64_t)get_u64(header + 64);
  return true;
}

void tpu_diskcache_reject(tpu_diskcache_t* cache, const tpu_diskcache_key_t* key) {
  char path[4096];
  if (key_path(cache, key, ENTRY_SUFFIX, path, sizeof path)) unlink(path);
  TPU_METRICS_BUMP("cache_entries_rejected", 1);
}

/* ---- eviction ------------------------------------------------------------------ */

typedef struct {
  char name[TPU_DISKCACHE_KEY_HEX + sizeof ENTRY_SUFFIX];
  struct timespec used;
  int64_t bytes;
} entry_info_t;

static bool is_entry_name(const char* name) {
  for (int i = 0; i < TPU_DISKCACHE_KEY_HEX; i++) {
    char c = name[i];
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return strcmp(name + TPU_DISKCACHE_KEY_HEX, ENTRY_SUFFIX) == 0;
}

static bool is_temp_name(const char* name) {
  size_t n = strlen(name);
  return name[0] == '.' && n > sizeof TEMP_SUFFIX &&
         strcmp(name + n - (sizeof TEMP_SUFFIX - 1), TEMP_SUFFIX) == 0;
}

static int older_first(const void* a, const void* b) {
  const entry_info_t* x = a;
  const entry_info_t* y = b;
  if (x->used.tv_sec != y->used.tv_sec) return x->used.tv_sec < y->used.tv_sec ? -1 : 1;
  if (x->used.tv_nsec != y->used.tv_nsec) return x->used.tv_nsec < y->used.tv_nsec ? -1 : 1;
  return strcmp(x->name, y->name);
}

/* Lists the entries (and removes stale temporary files); returns their total
 * bytes, or -1 when the directory cannot be read. *out_entries (may be
 * NULL) receives a malloc'd array of *out_count entries. */
static int64_t scan(const tpu_diskcache_t* cache, entry_info_t** out_entries,
                    size_t* out_count) {
  if (out_entries) *out_entries = NULL;
  if (out_count) *out_count = 0;
  DIR* dir = opendir(cache->dir);
  if (!dir) return -1;
  int dfd = dirfd(dir);
  entry_info_t* entries = NULL;
  size_t count = 0, capacity = 0;
  int64_t total = 0;
  time_t now = time(NULL);
  struct dirent* d;
  while ((d = readdir(dir)) != NULL) {
    bool entry = is_entry_name(d->d_name);
    if (!entry && !is_temp_name(d->d_name)) continue;
    struct stat st;
    if (fstatat(dfd, d->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (!entry) {
      if (now - st.st_mtime > STALE_TEMP_SECONDS) unlinkat(dfd, d->d_name, 0);
      continue;
    }
    total += st.st_size;
    if (!out_entries) continue;
    if (count == capacity) {
      size_t grown = capacity ? capacity * 2 : 64;
      entry_info_t* more = realloc(entries, grown * sizeof *more);
      if (!more) continue; /* an entry we do not consider for eviction */
      entries = more;
      capacity = grown;
    }
    entry_info_t* e = &entries[count++];
    memcpy(e->name, d->d_name, sizeof e->name);
    e->used = st.st_mtim;
    e->bytes = st.st_size;
  }
  closedir(dir);
  if (out_entries) {
    *out_entries = entries;
    *out_count = count;
  } else {
    free(entries);
  }
  return total;
}

int64_t tpu_diskcache_bytes(tpu_diskcache_t* cache) {
  int64_t total = scan(cache, NULL, NULL);
  return total < 0 ? 0 : total;
}

/* Removes least recently used entries until the directory is under the
 * cap. Concurrent evictors may remove the same file; that is harmless. */
static int64_t evict(tpu_diskcache_t* cache) {
  entry_info_t* entries = NULL;
  size_t count = 0;
  int64_t total = scan(cache, &entries, &count);
  if (total < 0) return 0;
  if (total > cache->max_bytes) {
    qsort(entries, count, sizeof *entries, older_first);
    for (size_t i = 0; i < count && total > cache->max_bytes; i++) {
      char path[4096];
      snprintf(path, sizeof path, "%s/%s", cache->dir, entries[i].name);
      if (unlink(path) == 0) TPU_METRICS_BUMP("cache_evictions", 1);
      total -= entries[i].bytes;
    }
  }
  free(entries);
  return total;
}

/* ---- writing -------------------------------------------------------------------- */

static _Atomic uint64_t g_temp_counter;

tpu_status_t tpu_diskcache_write(tpu_diskcache_t* cache,
                                 const tpu_diskcache_key_t* key,
                                 const void* payload, size_t len,
                                 int64_t compile_ns) {
  int64_t bytes = (int64_t)(HEADER_LEN + CHECK_LEN + len);
  if (cache->max_bytes > 0 && bytes > cache->max_bytes) return NULL;
  char path[4096], temp[4096];
  int n = snprintf(temp, sizeof temp, "%s/.%s.%ld.%llu%s", cache->dir, key->hex,
                   (long)getpid(),
                   (unsigned long long)atomic_fetch_add(&g_temp_counter, 1),
                   TEMP_SUFFIX);
  if (n <= 0 || (size_t)n >= sizeof temp ||
      !key_path(cache, key, ENTRY_SUFFIX, path, sizeof path)) {
    return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT,
                           "cache directory path too long: %s", cache->dir);
  }
  uint8_t* body = malloc(CHECK_LEN + len);
  if (!body)
    return tpu_status_make(TPU_STATUS_RESOURCE_EXHAUSTED, "out of host memory writing %s", path);
  put_u64(body, key->check[0]);
  put_u64(body + 8, key->check[1]);
  if (len) memcpy(body + CHECK_LEN, payload, len);
  uint8_t header[HEADER_LEN];
  encode_header(header, key, body, CHECK_LEN + len, compile_ns);
  int fd = open(temp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    free(body);
    return errno_status("cannot create", temp);
  }
  /* No fsync: after a crash a torn entry fails its checksum and is
   * recompiled, which is cheaper than syncing every compile. */
  bool ok = write_all(fd, header, HEADER_LEN) && write_all(fd, body, CHECK_LEN + len);
  free(body);
  tpu_status_t status = ok ? NULL : errno_status("cannot write", temp);
  if (close(fd) != 0 && !status) status = errno_status("cannot write", temp);
  if (!status && rename(temp, path) != 0) status = errno_status("cannot rename", temp);
  if (status) {
    unlink(temp);
    return status;
  }
  if (cache->max_bytes <= 0) return NULL;
  pthread_mutex_lock(&cache->lock);
  bool rescan = cache->estimate < 0 || cache->estimate + bytes > cache->max_bytes ||
                ++cache->writes_since_scan >= WRITES_PER_SCAN;
  if (rescan) {
    cache->estimate = evict(cache);
    cache->writes_since_scan = 0;
  } else {
    cache->estimate += bytes;
  }
  pthread_mutex_unlock(&cache->lock);
  return NULL;
}

/* ---- locks ------------------------------------------------------------------------ */

tpu_status_t tpu_diskcache_lock(tpu_diskcache_t* cache,
                                const tpu_diskcache_key_t* key, int* out_fd) {
  *out_fd = -1;
  char path[4096];
  if (!key_path(cache, key, LOCK_SUFFIX, path, sizeof path)) {
    return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT,
                           "cache directory path too long: %s", cache->dir);
  }
  for (;;) {
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return errno_status("cannot open lock file", path);
    while (flock(fd, LOCK_EX) != 0) {
      if (errno == EINTR) continue;
      tpu_status_t status = errno_status("cannot lock", path);
      close(fd);
      return status;
    }
    /* The holder before us unlinks the lock file before releasing it, so
     * the directory does not fill with lock files. If ours was unlinked,
     * a newer file may be locked by someone else: start again on it. */
    struct stat held, current;
    if (fstat(fd, &held) == 0 && stat(path, &current) == 0 &&
        held.st_ino == current.st_ino && held.st_dev == current.st_dev) {
      *out_fd = fd;
      return NULL;
    }
    close(fd);
  }
}

void tpu_diskcache_unlock(tpu_diskcache_t* cache, const tpu_diskcache_key_t* key,
                          int fd) {
  if (fd < 0) return;
  char path[4096];
  if (key_path(cache, key, LOCK_SUFFIX, path, sizeof path)) unlink(path);
  close(fd); /* releases the flock */
}

/* ---- the process's tiers ----------------------------------------------------------- */

static pthread_mutex_t g_tiers_lock = PTHREAD_MUTEX_INITIALIZER;
static bool g_tiers_loaded;
static tpu_diskcache_t* g_local;
static tpu_diskcache_t* g_shared;
static int64_t g_max_bytes;

#define DEFAULT_MAX_BYTES (10ll << 30)

/* $XDG_CACHE_HOME/torchtpu, else ~/.cache/torchtpu; NULL when neither is
 * known. */
static char* default_local_dir(void) {
  const char* xdg = tpu_env_get("XDG_CACHE_HOME");
  const char* home = tpu_env_get("HOME");
  char buffer[4096];
  int n;
  if (xdg && xdg[0] == '/') n = snprintf(buffer, sizeof buffer, "%s/torchtpu", xdg);
  else if (home && home[0] == '/') n = snprintf(buffer, sizeof buffer, "%s/.cache/torchtpu", home);
  else return NULL;
  return n > 0 && (size_t)n < sizeof buffer ? strdup(buffer) : NULL;
}

/* A tier whose directory cannot be used is off: the cache must never stop
 * a program from running. */
static tpu_diskcache_t* open_tier(const char* dir, int64_t max_bytes) {
  if (!dir || !dir[0]) return NULL;
  tpu_diskcache_t* cache = NULL;
  tpu_status_t status = tpu_diskcache_open(dir, max_bytes, &cache);
  if (status) {
    TPU_METRICS_BUMP("cache_dir_errors", 1);
    tpu_status_free(status);
    return NULL;
  }
  return cache;
}

static void load_tiers_locked(void) {
  tpu_diskcache_close(g_local);
  tpu_diskcache_close(g_shared);
  g_local = g_shared = NULL;
  g_tiers_loaded = true;
  g_max_bytes = tpu_env_get_int("TORCHTPU_CACHE_MAX_BYTES", DEFAULT_MAX_BYTES);
  if (strcmp(tpu_env_get("TORCHTPU_CACHE"), "0") == 0) return;
  const char* local = tpu_env_get("TORCHTPU_CACHE_DIR");
  if (local[0]) {
    g_local = open_tier(local, g_max_bytes);
  } else {
    char* fallback = default_local_dir();
    g_local = open_tier(fallback, g_max_bytes);
    free(fallback);
  }
  g_shared = open_tier(tpu_env_get("TORCHTPU_SHARED_CACHE_DIR"), g_max_bytes);
}

static void tiers(tpu_diskcache_t** out_local, tpu_diskcache_t** out_shared) {
  pthread_mutex_lock(&g_tiers_lock);
  if (!g_tiers_loaded) load_tiers_locked();
  *out_local = g_local;
  *out_shared = g_shared;
  pthread_mutex_unlock(&g_tiers_lock);
}

void tpu_diskcache_reload(void) {
  pthread_mutex_lock(&g_tiers_lock);
  load_tiers_locked();
  pthread_mutex_unlock(&g_tiers_lock);
}

const char* tpu_diskcache_local_dir(void) {
  tpu_diskcache_t *local, *shared;
  tiers(&local, &shared);
  return local ? local->dir : "";
}

const char* tpu_diskcache_shared_dir(void) {
  tpu_diskcache_t *local, *shared;
  tiers(&local, &shared);
  return shared ? shared->dir : "";
}

int64_t tpu_diskcache_max_bytes(void) {
  tpu_diskcache_t *local, *shared;
  tiers(&local, &shared);
  return g_max_bytes;
}

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static tpu_status_t compile_counted(tpu_client_t* client, const char* mlir,
                                    size_t mlir_len,
                                    const tpu_compile_options_t* options,
                                    tpu_executable_t** out_executable,
                                    int64_t* out_ns) {
  int64_t start = now_ns();
  TPU_RETURN_IF_ERROR(
      tpu_executable_compile(client, mlir, mlir_len, options, out_executable));
  *out_ns = now_ns() - start;
  tpu_metrics_add("compiles", 1);
  tpu_metrics_add("compile_ns", *out_ns);
  return NULL;
}

static void write_counted(tpu_diskcache_t* cache, const tpu_diskcache_key_t* key,
                          const void* payload, size_t len, int64_t compile_ns) {
  if (!cache) return;
  tpu_status_t status = tpu_diskcache_write(cache, key, payload, len, compile_ns);
  if (status) {
    TPU_METRICS_BUMP("cache_write_failures", 1);
    tpu_status_free(status);
  }
}

/* Loads the key's entry from `cache` (a shared hit is copied to `copy_to`).
 * An entry the plugin refuses is rejected like a damaged one. */
static bool load_from(tpu_diskcache_t* cache, tpu_metrics_counter_t* hits,
                      tpu_client_t* client, const tpu_diskcache_key_t* key,
                      tpu_diskcache_t* copy_to, tpu_executable_t** out_executable) {
  void* payload = NULL;
  size_t len = 0;
  int64_t compile_ns = 0;
  if (!cache || !tpu_diskcache_read(cache, key, &payload, &len, &compile_ns))
    return false;
  tpu_status_t status = tpu_executable_deserialize(client, payload, len, out_executable);
  if (status) {
    tpu_status_free(status);
    tpu_diskcache_reject(cache, key);
    free(payload);
    return false;
  }
  tpu_metrics_bump(hits, 1);
  TPU_METRICS_BUMP("compile_ns_saved", compile_ns);
  write_counted(copy_to, key, payload, len, compile_ns);
  free(payload);
  return true;
}

static bool load_tiers(tpu_diskcache_t* local, tpu_diskcache_t* shared,
                       tpu_client_t* client, const tpu_diskcache_key_t* key,
                       tpu_executable_t** out_executable) {
  static tpu_metrics_counter_t* _Atomic local_hits;
  static tpu_metrics_counter_t* _Atomic shared_hits;
  if (!local_hits) local_hits = tpu_metrics_counter("cache_hits::local");
  if (!shared_hits) shared_hits = tpu_metrics_counter("cache_hits::shared");
  return load_from(local, local_hits, client, key, NULL, out_executable) ||
         load_from(shared, shared_hits, client, key, local, out_executable);
}

tpu_status_t tpu_diskcache_load_or_compile(tpu_client_t* client,
                                           const char* mlir, size_t mlir_len,
                                           const tpu_compile_options_t* options,
                                           tpu_executable_t** out_executable) {
  *out_executable = NULL;
  int64_t compile_ns = 0;
  tpu_diskcache_t *local, *shared;
  tiers(&local, &shared);
  if (!local && !shared) {
    return compile_counted(client, mlir, mlir_len, options, out_executable,
                           &compile_ns);
  }
  /* The key hashes every option byte (a device list can be long). */
  size_t option_len = tpu_compile_options_encode(options, NULL, 0);
  uint8_t* option_bytes = malloc(option_len);
  size_t identity_len = tpu_diskcache_identity(client, NULL, 0);
  char* identity = malloc(identity_len + 1);
  if (!identity || !option_bytes) {
    free(identity);
    free(option_bytes);
    return compile_counted(client, mlir, mlir_len, options, out_executable,
                           &compile_ns);
  }
  tpu_compile_options_encode(options, option_bytes, option_len);
  tpu_diskcache_identity(client, identity, identity_len + 1);
  tpu_diskcache_key_t key;
  tpu_diskcache_key_make(mlir, mlir_len, option_bytes, option_len, identity, &key);
  free(identity);
  free(option_bytes);

  /* The key hashes this very text, so it describes a loaded entry too. */
  if (load_tiers(local, shared, client, &key, out_executable)) {
    tpu_executable_note_text(*out_executable, mlir, mlir_len);
    return NULL;
  }

  /* Miss: one process per host compiles the key while the others wait on
   * its lock, then load what it wrote. Without a lock (e.g. a file system
   * without flock) we just compile. */
  tpu_diskcache_t* lock_dir = local ? local : shared;
  int lock_fd = -1;
  tpu_status_free(tpu_diskcache_lock(lock_dir, &key, &lock_fd));
  if (lock_fd >= 0 && load_tiers(local, shared, client, &key, out_executable)) {
    tpu_executable_note_text(*out_executable, mlir, mlir_len);
    tpu_diskcache_unlock(lock_dir, &key, lock_fd);
    return NULL;
  }
  TPU_METRICS_BUMP("cache_misses::disk", 1);
  tpu_status_t status = compile_counted(client, mlir, mlir_len, options,
                                        out_executable, &compile_ns);
  if (!status) {
    void* payload = NULL;
    size_t len = 0;
    tpu_status_t serialized = tpu_executable_serialize(*out_executable, &payload, &len);
    if (serialized || len == 0) {
      TPU_METRICS_BUMP("cache_write_failures", 1);
      tpu_status_free(serialized);
    } else {
      write_counted(local, &key, payload, len, compile_ns);
      write_counted(shared, &key, payload, len, compile_ns);
    }
    free(payload);
  }
  tpu_diskcache_unlock(lock_dir, &key, lock_fd);
  return status;
}
