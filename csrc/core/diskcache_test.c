/* The persistent executable caches: round trips through the local and shared
 * tiers, damaged/truncated/foreign entries rejected and recompiled, LRU
 * eviction under a cap, and one compile per key across processes. */
#include "diskcache.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "metrics.h"
#include "program.h"
#include "runtime.h"
#include "testing.h"

static char g_base[64]; /* this binary's scratch directory */

static const char* make_base(void) {
  if (!g_base[0]) {
    snprintf(g_base, sizeof g_base, "/tmp/torchtpu-diskcache-test-XXXXXX");
    if (!mkdtemp(g_base)) g_base[0] = '\0';
  }
  return g_base;
}

/* A fresh directory path under the scratch directory (not created). */
static const char* fresh_dir(const char* name) {
  static char path[4][256];
  static int next;
  char* out = path[next++ % 4];
  snprintf(out, sizeof path[0], "%s/%s", make_base(), name);
  return out;
}

/* Points the process's tiers at `local` and `shared` (NULL: off) with a
 * cap, and empties tier 1 so the next get goes to disk. */
static void use_tiers(const char* local, const char* shared, const char* max_bytes) {
  setenv("TORCHTPU_CACHE", "1", 1);
  setenv("TORCHTPU_CACHE_DIR", local ? local : "", 1);
  if (shared) setenv("TORCHTPU_SHARED_CACHE_DIR", shared, 1);
  else unsetenv("TORCHTPU_SHARED_CACHE_DIR");
  if (max_bytes) setenv("TORCHTPU_CACHE_MAX_BYTES", max_bytes, 1);
  else unsetenv("TORCHTPU_CACHE_MAX_BYTES");
  tpu_diskcache_reload();
  tpu_program_cache_clear();
}

/* y = x * k for x: f32[4]; a different k is a different program (key). */
static void program_text(int k, char* out, size_t capacity) {
  snprintf(out, capacity,
           "module @m {\n"
           "  func.func public @main(%%arg0: tensor<4xf32>) -> tensor<4xf32> {\n"
           "    %%c = stablehlo.constant dense<%d.0> : tensor<4xf32>\n"
           "    %%0 = stablehlo.multiply %%arg0, %%c : tensor<4xf32>\n"
           "    return %%0 : tensor<4xf32>\n"
           "  }\n"
           "}\n",
           k);
}

static void key_of(const char* text, tpu_diskcache_key_t* out_key) {
  uint8_t options[256];
  tpu_compile_options_t compile = tpu_program_compile_options(tpu_runtime_client(), text, strlen(text));
  size_t options_len = tpu_compile_options_encode(&compile, options, sizeof options);
  char identity[2048];
  tpu_diskcache_identity(tpu_runtime_client(), identity, sizeof identity);
  tpu_diskcache_key_make(text, strlen(text), options, options_len, identity, out_key);
}

static void entry_path_of(const char* dir, const char* text, char* out, size_t capacity) {
  tpu_diskcache_key_t key;
  key_of(text, &key);
  snprintf(out, capacity, "%s/%s.entry", dir, key.hex);
}

/* Gets program k through the caches and checks what it computes. */
static tpu_status_t run_program(int k) {
  char text[512];
  program_text(k, text, sizeof text);
  tpu_program_t* program = NULL;
  TPU_RETURN_IF_ERROR(tpu_program_get(text, strlen(text), &program));
  const float x[4] = {1, -2, 3.5f, 0.25f};
  const int64_t dims[1] = {4};
  tpu_buffer_t* in = NULL;
  tpu_buffer_t* out = NULL;
  TPU_RETURN_IF_ERROR(tpu_buffer_from_host(tpu_runtime_client(), 0, x,
                                           TPU_DTYPE_FLOAT32, dims, 1, NULL, &in));
  tpu_status_t status = tpu_program_execute_sync(program, 0, &in, 1, &out);
  float y[4] = {0};
  if (!status) status = tpu_buffer_to_host(out, y, sizeof y);
  tpu_buffer_destroy(in);
  tpu_buffer_destroy(out);
  TPU_RETURN_IF_ERROR(status);
  for (int i = 0; i < 4; i++) {
    if (y[i] != x[i] * (float)k) {
      return tpu_status_make(TPU_STATUS_INTERNAL, "program %d: y[%d] = %g, want %g",
                             k, i, y[i], x[i] * (float)k);
    }
  }
  return NULL;
}

static bool file_exists(const char* path) {
  struct stat st;
  return stat(path, &st) == 0;
}

static int64_t file_size(const char* path) {
  struct stat st;
  return stat(path, &st) == 0 ? st.st_size : -1;
}

/* Number of names in `dir` ending in `suffix`. */
static int count_files(const char* dir, const char* suffix) {
  char command[512];
  snprintf(command, sizeof command, "ls -a %s 2>/dev/null | grep -c '%s$'", dir, suffix);
  FILE* pipe = popen(command, "r");
  int n = -1;
  if (pipe) {
    if (fscanf(pipe, "%d", &n) != 1) n = -1;
    pclose(pipe);
  }
  return n;
}

/* ---- many processes, one compile per key ------------------------------------
 * Runs first: children are forked before this process starts a PJRT client
 * (forking a process with a live client's threads is not safe). */

enum { kChildren = 3, kPrograms = 4 };

static void child(int ready_fd, int report_fd) {
  char go;
  /* Wait for the parent's signal so the children start together. */
  if (read(ready_fd, &go, 1) != 1) _exit(2);
  tpu_status_t status = tpu_runtime_init(NULL);
  for (int k = 1; !status && k <= kPrograms; k++) status = run_program(k + 10);
  int64_t report[3] = {status ? 1 : 0, tpu_metrics_get("compiles"),
                       tpu_metrics_get("cache_hits::local")};
  if (status) fprintf(stderr, "child: %s\n", tpu_status_message(status));
  tpu_status_free(status);
  ssize_t written = write(report_fd, report, sizeof report);
  _exit(written == (ssize_t)sizeof report ? 0 : 3);
}

static void test_processes_compile_each_key_once(void) {
  CHECK(!tpu_runtime_is_initialized());
  const char* dir = fresh_dir("fork");
  use_tiers(dir, NULL, NULL);
  int ready[2], report[2];
  CHECK(pipe(ready) == 0 && pipe(report) == 0);
  pid_t pids[kChildren];
  for (int i = 0; i < kChildren; i++) {
    pids[i] = fork();
    CHECK(pids[i] >= 0);
    if (pids[i] == 0) child(ready[0], report[1]);
  }
  char go[kChildren] = {0};
  CHECK(write(ready[1], go, sizeof go) == (ssize_t)sizeof go);
  int64_t compiles = 0, hits = 0;
  bool all_ok = true;
  for (int i = 0; i < kChildren; i++) {
    int64_t r[3];
    if (read(report[0], r, sizeof r) != (ssize_t)sizeof r) {
      all_ok = false;
      continue;
    }
    all_ok = all_ok && r[0] == 0;
    compiles += r[1];
    hits += r[2];
  }
  for (int i = 0; i < kChildren; i++) {
    int wstatus = 0;
    CHECK(waitpid(pids[i], &wstatus, 0) == pids[i]);
    CHECK(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0);
  }
  close(ready[0]), close(ready[1]), close(report[0]), close(report[1]);
  CHECK(all_ok);
  /* Every child ran every program; together they compiled each once and
   * loaded the rest from the entries the compiling one wrote. */
  CHECK_EQ(compiles, kPrograms);
  CHECK_EQ(hits, (int64_t)(kChildren - 1) * kPrograms);
  CHECK_EQ(count_files(dir, ".entry"), kPrograms);
  CHECK_EQ(count_files(dir, ".lock"), 0);
  CHECK_EQ(count_files(dir, ".tmp"), 0);
}

/* ---- one process -------------------------------------------------------------- */

static void test_keys(void) {
  CHECK_OK(tpu_runtime_init(NULL));
  char identity[2048];
  size_t n = tpu_diskcache_identity(tpu_runtime_client(), identity, sizeof identity);
  CHECK(n > 0 && n < sizeof identity);
  const char* text = identity;
  CHECK_STR_CONTAINS(text, "platform=cpu");
  CHECK_STR_CONTAINS(text, "xla_version=");
  const uint8_t opt_a[2] = {1, 2}, opt_b[2] = {1, 3};
  tpu_diskcache_key_t k[6];
  tpu_diskcache_key_make("abc", 3, opt_a, 2, identity, &k[0]);
  tpu_diskcache_key_make("abc", 3, opt_a, 2, identity, &k[1]);
  tpu_diskcache_key_make("abd", 3, opt_a, 2, identity, &k[2]);
  tpu_diskcache_key_make("abc", 3, opt_b, 2, identity, &k[3]);
  tpu_diskcache_key_make("abc", 3, opt_a, 2, "platform=gpu\n", &k[4]);
  /* Fields are length-delimited: moving a byte across a boundary matters. */
  tpu_diskcache_key_make("ab", 2, (const uint8_t*)"c\1\2", 3, identity, &k[5]);
  CHECK_EQ(strlen(k[0].hex), (size_t)TPU_DISKCACHE_KEY_HEX);
  CHECK(strspn(k[0].hex, "0123456789abcdef") == TPU_DISKCACHE_KEY_HEX);
  CHECK(strcmp(k[0].hex, k[1].hex) == 0);
  for (int i = 2; i < 6; i++)
    for (int j = 0; j < i; j++) CHECK(strcmp(k[i].hex, k[j].hex) != 0);

  /* The plugin's compiler flags are part of the identity, so an entry
   * compiled under other XLA_FLAGS is not reused. (The plugin read its
   * flags at start-up; changing the variable now only changes the key.) */
  const char* saved = getenv("XLA_FLAGS");
  char* saved_copy = saved ? strdup(saved) : NULL;
  setenv("XLA_FLAGS", "--xla_cpu_enable_fast_math=true", 1);
  char flagged[2048];
  tpu_diskcache_identity(tpu_runtime_client(), flagged, sizeof flagged);
  if (saved_copy) setenv("XLA_FLAGS", saved_copy, 1);
  else unsetenv("XLA_FLAGS");
  free(saved_copy);
  CHECK_STR_CONTAINS(flagged, "xla_flags=--xla_cpu_enable_fast_math=true\n");
  tpu_diskcache_key_t with_flags;
  tpu_diskcache_key_make("abc", 3, opt_a, 2, flagged, &with_flags);
  CHECK(strcmp(with_flags.hex, k[0].hex) != 0);
}

static void test_round_trip(void) {
  CHECK_OK(tpu_runtime_init(NULL));
  const char* dir = fresh_dir("round_trip");
  use_tiers(dir, NULL, NULL);
  CHECK(strcmp(tpu_diskcache_local_dir(), dir) == 0);
  CHECK(strcmp(tpu_diskcache_shared_dir(), "") == 0);
  CHECK_EQ(tpu_diskcache_max_bytes(), 10ll << 30);
  int64_t compiles = tpu_metrics_get("compiles");
  int64_t misses = tpu_metrics_get("cache_misses::disk");
  CHECK_OK(run_program(3));
  CHECK_EQ(tpu_metrics_get("compiles"), compiles + 1);
  CHECK_EQ(tpu_metrics_get("cache_misses::disk"), misses + 1);
  char text[512], path[512];
  program_text(3, text, sizeof text);
  entry_path_of(dir, text, path, sizeof path);
  CHECK(file_size(path) > 80);

  /* A new "process" (empty tier 1) loads it instead of compiling. */
  tpu_program_cache_clear();
  int64_t hits = tpu_metrics_get("cache_hits::local");
  int64_t saved = tpu_metrics_get("compile_ns_saved");
  CHECK_OK(run_program(3));
  CHECK_EQ(tpu_metrics_get("compiles"), compiles + 1);
  CHECK_EQ(tpu_metrics_get("cache_hits::local"), hits + 1);
  CHECK(tpu_metrics_get("compile_ns_saved") > saved);
  /* And tier 1 serves it from then on. */
  int64_t tier1 = tpu_metrics_get("program_cache_hits");
  CHECK_OK(run_program(3));
  CHECK_EQ(tpu_metrics_get("program_cache_hits"), tier1 + 1);
  CHECK_EQ(tpu_metrics_get("cache_hits::local"), hits + 1);
}

/* Damages program k's entry with `damage`, then checks that the next get
 * rejects it, recompiles, computes the right thing and rewrites a good
 * entry. */
static void expect_rejected_and_replaced(int k, void (*damage)(const char* path)) {
  const char* dir = tpu_diskcache_local_dir();
  char text[512], path[512];
  program_text(k, text, sizeof text);
  entry_path_of(dir, text, path, sizeof path);
  tpu_program_cache_clear();
  CHECK_OK(run_program(k));
  int64_t good_size = file_size(path);
  CHECK(good_size > 80);
  damage(path);
  tpu_program_cache_clear();
  int64_t compiles = tpu_metrics_get("compiles");
  int64_t rejected = tpu_metrics_get("cache_entries_rejected");
  CHECK_OK(run_program(k));
  CHECK_EQ(tpu_metrics_get("compiles"), compiles + 1);
  CHECK_EQ(tpu_metrics_get("cache_entries_rejected"), rejected + 1);
  CHECK_EQ(file_size(path), good_size);
  /* The replacement is good: the next process loads it. */
  tpu_program_cache_clear();
  int64_t hits = tpu_metrics_get("cache_hits::local");
  CHECK_OK(run_program(k));
  CHECK_EQ(tpu_metrics_get("compiles"), compiles + 1);
  CHECK_EQ(tpu_metrics_get("cache_hits::local"), hits + 1);
}

static void flip_byte_at(const char* path, off_t offset) {
  int fd = open(path, O_RDWR);
  unsigned char byte = 0;
  if (fd < 0) return;
  if (pread(fd, &byte, 1, offset) == 1) {
    byte ^= 0x40;
    if (pwrite(fd, &byte, 1, offset) != 1) fprintf(stderr, "pwrite failed\n");
  }
  close(fd);
}

static void flip_payload_byte(const char* path) { flip_byte_at(path, file_size(path) / 2 + 40); }
static void flip_magic(const char* path) { flip_byte_at(path, 0); }
static void flip_compile_time(const char* path) { flip_byte_at(path, 64); }
static void truncate_payload(const char* path) {
  if (truncate(path, file_size(path) - 7) != 0) fprintf(stderr, "truncate failed\n");
}
static void truncate_header(const char* path) {
  if (truncate(path, 40) != 0) fprintf(stderr, "truncate failed\n");
}
static void make_empty(const char* path) {
  if (truncate(path, 0) != 0) fprintf(stderr, "truncate failed\n");
}
/* Another key's (valid) entry under this key's name. */
static void replace_with_foreign(const char* path) {
  char other_text[512], other[512];
  program_text(99, other_text, sizeof other_text);
  entry_path_of(tpu_diskcache_local_dir(), other_text, other, sizeof other);
  if (run_program(99) == NULL && rename(other, path) != 0)
    fprintf(stderr, "rename failed\n");
}
/* A well-formed entry whose payload the plugin cannot load. */
static void replace_payload_with_garbage(const char* path) {
  tpu_diskcache_t* cache = NULL;
  tpu_status_t s = tpu_diskcache_open(tpu_diskcache_local_dir(), 0, &cache);
  if (s) {
    tpu_status_free(s);
    return;
  }
  tpu_diskcache_key_t key;
  const char* name = strrchr(path, '/') + 1;
  memcpy(key.hex, name, TPU_DISKCACHE_KEY_HEX);
  key.hex[TPU_DISKCACHE_KEY_HEX] = '\0';
  /* The entry's own key check (after the 80-byte header): sound, not
   * foreign, only its executable is garbage. */
  int fd = open(path, O_RDONLY);
  bool read_check = fd >= 0 && pread(fd, key.check, sizeof key.check, 80) == sizeof key.check;
  if (fd >= 0) close(fd);
  if (!read_check) fprintf(stderr, "cannot read the key check of %s\n", path);
  static const char kGarbage[] = "this is not an executable";
  tpu_status_free(tpu_diskcache_write(cache, &key, kGarbage, sizeof kGarbage, 1));
  tpu_diskcache_close(cache);
}

/* The entry's payload (key check and executable) swapped for another
 * program's under a sound header: foreign. */
static void swap_in_foreign_payload(const char* path) {
  char other_text[512];
  program_text(98, other_text, sizeof other_text);
  if (run_program(98) != NULL) return;
  tpu_diskcache_t* cache = NULL;
  tpu_status_t s = tpu_diskcache_open(tpu_diskcache_local_dir(), 0, &cache);
  if (s) {
    tpu_status_free(s);
    return;
  }
  tpu_diskcache_key_t other;
  key_of(other_text, &other);
  void* payload = NULL;
  size_t len = 0;
  int64_t ns = 0;
  if (tpu_diskcache_read(cache, &other, &payload, &len, &ns)) {
    tpu_diskcache_key_t forged = other; /* the other's check, under this name */
    const char* name = strrchr(path, '/') + 1;
    memcpy(forged.hex, name, TPU_DISKCACHE_KEY_HEX);
    tpu_status_free(tpu_diskcache_write(cache, &forged, payload, len, ns));
  }
  free(payload);
  tpu_diskcache_close(cache);
}
/* A FIFO at the entry's path: rejected without blocking in open(). */
static void make_fifo(const char* path) {
  unlink(path);
  if (mkfifo(path, 0644) != 0) fprintf(stderr, "mkfifo failed\n");
}

static void test_damaged_entries_are_recompiled(void) {
  CHECK_OK(tpu_runtime_init(NULL));
  use_tiers(fresh_dir("damaged"), NULL, NULL);
  expect_rejected_and_replaced(4, flip_payload_byte);
  expect_rejected_and_replaced(4, flip_magic);
  expect_rejected_and_replaced(4, flip_compile_time);
  expect_rejected_and_replaced(4, truncate_payload);
  expect_rejected_and_replaced(4, truncate_header);
  expect_rejected_and_replaced(4, make_empty);
  expect_rejected_and_replaced(4, replace_with_foreign);
  expect_rejected_and_replaced(4, replace_payload_with_garbage);
  int64_t foreign = tpu_metrics_get("cache_entries_foreign");
  expect_rejected_and_replaced(4, swap_in_foreign_payload);
  CHECK_EQ(tpu_metrics_get("cache_entries_foreign"), foreign + 1);
  expect_rejected_and_replaced(4, make_fifo);
}

static void test_shared_tier(void) {
  CHECK_OK(tpu_runtime_init(NULL));
  const char* shared = fresh_dir("shared");
  const char* host_a = fresh_dir("host_a");
  use_tiers(host_a, shared, NULL);
  CHECK(strcmp(tpu_diskcache_shared_dir(), shared) == 0);
  int64_t compiles = tpu_metrics_get("compiles");
  CHECK_OK(run_program(5));
  CHECK_EQ(tpu_metrics_get("compiles"), compiles + 1);
  char text[512], path[512];
  program_text(5, text, sizeof text);
  entry_path_of(shared, text, path, sizeof path);
  CHECK(file_exists(path)); /* written to both tiers */
  entry_path_of(host_a, text, path, sizeof path);
  CHECK(file_exists(path));

  /* Another host: its local tier is empty, the shared one has the entry. */
  const char* host_b = fresh_dir("host_b");
  use_tiers(host_b, shared, NULL);
  int64_t shared_hits = tpu_metrics_get("cache_hits::shared");
  CHECK_OK(run_program(5));
  CHECK_EQ(tpu_metrics_get("compiles"), compiles + 1);
  CHECK_EQ(tpu_metrics_get("cache_hits::shared"), shared_hits + 1);
  entry_path_of(host_b, text, path, sizeof path);
  CHECK(file_exists(path)); /* copied into the local tier */
  tpu_program_cache_clear();
  int64_t local_hits = tpu_metrics_get("cache_hits::local");
  CHECK_OK(run_program(5));
  CHECK_EQ(tpu_metrics_get("cache_hits::local"), local_hits + 1);
  CHECK_EQ(tpu_metrics_get("cache_hits::shared"), shared_hits + 1);
}

static void test_cache_off_and_unusable_dirs(void) {
  CHECK_OK(tpu_runtime_init(NULL));
  const char* dir = fresh_dir("off");
  setenv("TORCHTPU_CACHE_DIR", dir, 1);
  setenv("TORCHTPU_CACHE", "0", 1);
  tpu_diskcache_reload();
  tpu_program_cache_clear();
  CHECK(strcmp(tpu_diskcache_local_dir(), "") == 0);
  int64_t compiles = tpu_metrics_get("compiles");
  int64_t misses = tpu_metrics_get("cache_misses::disk");
  CHECK_OK(run_program(6));
  CHECK_EQ(tpu_metrics_get("compiles"), compiles + 1);
  CHECK_EQ(tpu_metrics_get("cache_misses::disk"), misses);
  CHECK(!file_exists(dir));

  /* A directory that cannot be created turns the tier off, nothing more. */
  use_tiers("/proc/torchtpu-cannot-exist", NULL, NULL);
  CHECK(strcmp(tpu_diskcache_local_dir(), "") == 0);
  CHECK_OK(run_program(6));
  use_tiers("relative/dir", NULL, NULL);
  CHECK(strcmp(tpu_diskcache_local_dir(), "") == 0);
  CHECK_OK(run_program(6));
}

static void sleep_ms(int ms) {
  struct timespec t = {0, ms * 1000000L};
  nanosleep(&t, NULL);
}

static void test_lru_eviction(void) {
  const size_t kPayload = 1000;
  const int64_t entry = 80 + 16 + (int64_t)kPayload; /* header, key check, payload */
  tpu_diskcache_t* cache = NULL;
  CHECK_OK(tpu_diskcache_open(fresh_dir("lru"), 3 * entry + entry / 2, &cache));
  char payload[1000];
  tpu_diskcache_key_t keys[10];
  int64_t evictions = tpu_metrics_get("cache_evictions");
  for (int i = 0; i < 10; i++) {
    char text[16];
    snprintf(text, sizeof text, "entry %d", i);
    tpu_diskcache_key_make(text, strlen(text), NULL, 0, "test", &keys[i]);
    memset(payload, 'a' + i, sizeof payload);
    /* File times are coarse (a clock tick): space the writes out so their
     * order is visible to LRU. */
    sleep_ms(15);
    CHECK_OK(tpu_diskcache_write(cache, &keys[i], payload, sizeof payload, 1000 + i));
    CHECK(tpu_diskcache_bytes(cache) <= 3 * entry + entry / 2);
    if (i == 2) {
      /* Reading entry 0 makes it the most recently used. */
      sleep_ms(15);
      void* got = NULL;
      size_t len = 0;
      int64_t ns = 0;
      CHECK(tpu_diskcache_read(cache, &keys[0], &got, &len, &ns));
      CHECK(len == kPayload && ns == 1000 && ((char*)got)[999] == 'a');
      free(got);
    }
  }
  CHECK_EQ(tpu_diskcache_bytes(cache), 3 * entry);
  CHECK_EQ(tpu_metrics_get("cache_evictions"), evictions + 7);
  /* The three newest survive; entry 0 was used after 1 and 2, yet later
   * writes still pushed it out. */
  for (int i = 0; i < 10; i++) {
    void* got = NULL;
    size_t len = 0;
    int64_t ns = 0;
    bool hit = tpu_diskcache_read(cache, &keys[i], &got, &len, &ns);
    free(got);
    CHECK_EQ(hit, i >= 7);
  }
  /* An entry larger than the cap is not written at all. */
  char big[4000] = {0};
  CHECK_OK(tpu_diskcache_write(cache, &keys[0], big, sizeof big, 1));
  CHECK_EQ(tpu_diskcache_bytes(cache), 3 * entry);
  tpu_diskcache_close(cache);
}

static void test_recently_used_entry_survives(void) {
  const int64_t entry = 80 + 16 + 100;
  tpu_diskcache_t* cache = NULL;
  CHECK_OK(tpu_diskcache_open(fresh_dir("lru_touch"), 3 * entry, &cache));
  char payload[100] = {1};
  tpu_diskcache_key_t keys[4];
  for (int i = 0; i < 4; i++) {
    char text[16];
    snprintf(text, sizeof text, "touch %d", i);
    tpu_diskcache_key_make(text, strlen(text), NULL, 0, "test", &keys[i]);
  }
  for (int i = 0; i < 3; i++) {
    sleep_ms(15);
    CHECK_OK(tpu_diskcache_write(cache, &keys[i], payload, sizeof payload, 1));
  }
  sleep_ms(15);
  void* got = NULL;
  size_t len = 0;
  int64_t ns = 0;
  CHECK(tpu_diskcache_read(cache, &keys[0], &got, &len, &ns)); /* 0 is now newest */
  free(got);
  sleep_ms(15);
  CHECK_OK(tpu_diskcache_write(cache, &keys[3], payload, sizeof payload, 1));
  bool hits[4];
  for (int i = 0; i < 4; i++) {
    hits[i] = tpu_diskcache_read(cache, &keys[i], &got, &len, &ns);
    free(got);
  }
  CHECK(hits[0] && !hits[1] && hits[2] && hits[3]);
  tpu_diskcache_close(cache);
}

static void test_small_cap_through_programs(void) {
  CHECK_OK(tpu_runtime_init(NULL));
  const char* dir = fresh_dir("small_cap");
  use_tiers(dir, NULL, NULL);
  CHECK_OK(run_program(20));
  char text[512], path[512];
  program_text(20, text, sizeof text);
  entry_path_of(dir, text, path, sizeof path);
  int64_t one = file_size(path);
  CHECK(one > 80);
  /* Room for two entries of these programs. */
  char cap[32];
  snprintf(cap, sizeof cap, "%lld", (long long)(2 * one + one / 2));
  use_tiers(dir, NULL, cap);
  int64_t evictions = tpu_metrics_get("cache_evictions");
  tpu_diskcache_t* view = NULL;
  CHECK_OK(tpu_diskcache_open(dir, 0, &view));
  for (int k = 21; k < 27; k++) {
    sleep_ms(5);
    CHECK_OK(run_program(k));
    CHECK(tpu_diskcache_bytes(view) <= 2 * one + one / 2);
  }
  tpu_diskcache_close(view);
  CHECK(tpu_metrics_get("cache_evictions") >= evictions + 4);
  CHECK_EQ(count_files(dir, ".entry"), 2);
}

static void test_lock_is_exclusive_and_cleaned_up(void) {
  tpu_diskcache_t* cache = NULL;
  const char* dir = fresh_dir("locks");
  CHECK_OK(tpu_diskcache_open(dir, 0, &cache));
  tpu_diskcache_key_t key;
  tpu_diskcache_key_make("lock", 4, NULL, 0, "test", &key);
  int fd = -1;
  CHECK_OK(tpu_diskcache_lock(cache, &key, &fd));
  CHECK(fd >= 0);
  CHECK_EQ(count_files(dir, ".lock"), 1);
  /* A second open file description cannot take it while we hold it. */
  char path[512];
  snprintf(path, sizeof path, "%s/%s.lock", dir, key.hex);
  int other = open(path, O_RDWR);
  CHECK(other >= 0);
  CHECK(flock(other, LOCK_EX | LOCK_NB) != 0);
  close(other);
  tpu_diskcache_unlock(cache, &key, fd);
  CHECK_EQ(count_files(dir, ".lock"), 0);
  CHECK_OK(tpu_diskcache_lock(cache, &key, &fd));
  tpu_diskcache_unlock(cache, &key, fd);
  tpu_diskcache_close(cache);
}

static void test_cleanup(void) {
  setenv("TORCHTPU_CACHE", "0", 1);
  tpu_diskcache_reload();
  tpu_program_cache_clear();
  tpu_runtime_shutdown();
  char command[128];
  if (g_base[0]) {
    snprintf(command, sizeof command, "rm -rf %s", g_base);
    CHECK(system(command) == 0);
  }
}

TPU_TEST_MAIN(TPU_TEST(test_processes_compile_each_key_once), TPU_TEST(test_keys),
              TPU_TEST(test_round_trip), TPU_TEST(test_damaged_entries_are_recompiled),
              TPU_TEST(test_shared_tier), TPU_TEST(test_cache_off_and_unusable_dirs),
              TPU_TEST(test_lru_eviction), TPU_TEST(test_recently_used_entry_survives),
              TPU_TEST(test_small_cap_through_programs),
              TPU_TEST(test_lock_is_exclusive_and_cleaned_up), TPU_TEST(test_cleanup))
