#include "program.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "diskcache.h"
#include "env.h"
#include "hash.h"
#include "hlo/signature.h"
#include "hostattn.h"
#include "hostgemm.h"
#include "hostnorm.h"
#include "hostrow.h"
#include "metrics.h"
#include "runtime.h"
#include "trace.h"

struct tpu_program_s {
  char* text;
  size_t len;
  uint64_t hash;
  tpu_executable_t* executable;
  struct tpu_program_s* next; /* bucket chain */
  /* The counters below are written by every execution, on the launch
   * queue's thread; the fields above are read by the op thread for every
   * launch. A cache line apart, or each op moves the line twice. */
  char pad[64];
  /* Whether executions finish inside Execute (see execute()). Relaxed
   * atomics: racing threads can only make a check happen once more. */
  _Atomic int finished_inline; /* executions seen to (never reset) */
  _Atomic bool runs_async;     /* one did not, with every input ready */
  _Atomic unsigned runs;
};

/* The cap on loaded executables. Each holds code and memory maps of its
 * own (the CPU plugin's JIT: about four maps per program), and a process
 * that compiles without end -- a shape per call, a fuzzer -- runs out of
 * maps (65530) after some 15,000 programs, where LLVM fails with "Cannot
 * allocate memory". So the cache keeps two sets: the live one and the one
 * before it. When the live set reaches half the cap it becomes the old
 * one and the old one is destroyed; a lookup that finds a program in the
 * old set moves it back to the live one. A program is destroyed only
 * after a whole period (cap/2 new programs) without use: a second-chance
 * LRU at the granularity of a period.
 *
 * Holders of program pointers (eager entries, fused runs, compiled
 * graphs) keep the generation they fetched under and fetch again when it
 * changed; every rotation bumps it. A pointer fetched in one period stays
 * valid through the next (it is then in the old set, not yet destroyed),
 * so an op between its fetch and its launch survives one rotation; queued
 * launches are drained before the old set is destroyed. */
#define BUCKETS 1024
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static tpu_program_t* g_buckets[BUCKETS];
static tpu_program_t* g_old_buckets[BUCKETS];
static size_t g_count, g_old_count;
static _Atomic unsigned g_generation = 1;

unsigned tpu_program_cache_generation(void) { return g_generation; }

static _Atomic long long g_cap = -1; /* -1: not read yet */

static size_t cache_cap(void) {
  long long c = atomic_load_explicit(&g_cap, memory_order_relaxed);
  if (c < 0) {
    c = tpu_env_get_int("TORCHTPU_PROGRAM_CACHE_MAX", 4096);
    if (c < 0) c = 0;
    atomic_store_explicit(&g_cap, c, memory_order_relaxed);
  }
  return (size_t)c;
}

void tpu_program_cache_set_max(size_t max) {
  atomic_store_explicit(&g_cap, (long long)max, memory_order_relaxed);
}

/* Executables hold memory maps (XLA:CPU's JIT: several per program, more
 * for a big fused one), and the kernel caps a process's maps
 * (vm.max_map_count, 65530 by default). Past it LLVM cannot map the next
 * program and the process dies: a defer_and_fuse fuzz run of 5,000
 * programs did, 4,096 programs being more than 65,530 maps. So the cache
 * also rotates when the process holds more than 60% of the limit, read
 * every 32 new programs (Linux; elsewhere the count cap alone). */
static _Atomic long g_map_limit = -1; /* -1: not read yet; 0: unknown */
static _Atomic unsigned g_inserts = 0;

void tpu_program_cache_set_map_limit(long limit) {
  atomic_store_explicit(&g_map_limit, limit, memory_order_relaxed);
}

static long map_limit(void) {
  long limit = atomic_load_explicit(&g_map_limit, memory_order_relaxed);
  if (limit < 0) {
    limit = 0;
    FILE* f = fopen("/proc/sys/vm/max_map_count", "r");
    if (f) {
      if (fscanf(f, "%ld", &limit) != 1) limit = 0;
      fclose(f);
    }
    atomic_store_explicit(&g_map_limit, limit, memory_order_relaxed);
  }
  return limit;
}

static long maps_held(void) {
  FILE* f = fopen("/proc/self/maps", "r");
  if (!f) return 0;
  char buf[65536];
  long lines = 0;
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0)
    for (size_t i = 0; i < n; i++) lines += buf[i] == '\n';
  fclose(f);
  return lines;
}

static bool maps_pressure(void) {
  if (atomic_fetch_add_explicit(&g_inserts, 1, memory_order_relaxed) % 32 != 0) return false;
  long limit = map_limit();
  return limit > 0 && maps_held() > limit / 10 * 6;
}

static void destroy_chain(tpu_program_t* p) {
  while (p) {
    tpu_program_t* next = p->next;
    tpu_executable_destroy(p->executable);
    free(p->text);
    free(p);
    p = next;
  }
}

static tpu_program_t* find(tpu_program_t* const* buckets, uint64_t hash, const char* mlir,
                           size_t len) {
  for (tpu_program_t* p = buckets[hash % BUCKETS]; p; p = p->next)
    if (p->hash == hash && p->len == len && memcmp(p->text, mlir, len) == 0)
      return p;
  return NULL;
}

/* The program for this text, live or old (moved back to the live set).
 * Under g_lock. */
static tpu_program_t* lookup(uint64_t hash, const char* mlir, size_t len) {
  tpu_program_t* p = find(g_buckets, hash, mlir, len);
  if (p || !g_old_count) return p;
  for (tpu_program_t** at = &g_old_buckets[hash % BUCKETS]; *at; at = &(*at)->next) {
    p = *at;
    if (p->hash == hash && p->len == len && memcmp(p->text, mlir, len) == 0) {
      *at = p->next;
      g_old_count--;
      p->next = g_buckets[hash % BUCKETS];
      g_buckets[hash % BUCKETS] = p;
      g_count++;
      return p;
    }
  }
  return NULL;
}

/* The live set becomes the old one; the old one is destroyed. Under
 * g_lock, with the launch queue drained. */
static void rotate(void) {
  size_t dropped = g_old_count;
  for (size_t b = 0; b < BUCKETS; b++) {
    destroy_chain(g_old_buckets[b]);
    g_old_buckets[b] = g_buckets[b];
    g_buckets[b] = NULL;
  }
  g_old_count = g_count;
  g_count = 0;
  g_generation++;
  TPU_METRICS_BUMP("program_cache_evictions", (int64_t)dropped);
}

/* XLA:CPU splits a kernel touching >= ~512 KiB into tasks for its thread
 * pool. For a program whose every array is this small, the hand-offs cost
 * more than the split saves (softmax of 128x512 f32, one op: 135 us split,
 * 80 us not; 4 MiB arrays gain from the split), so such programs compile
 * with every kernel on one thread (compile_options.h serial_kernels). */
enum { kSerialKernelBytes = 256 << 10 };
tpu_compile_options_t tpu_program_compile_options(const tpu_client_t* client, const char* mlir,
                                                  size_t mlir_len) {
  /* With a single device, programs are bound to it: the plugin's execute
   * for portable programs copies the compile options and builds a device
   * assignment on every call. Otherwise one portable program serves every
   * device. */
  return (tpu_compile_options_t){
      .portable = !tpu_client_is_single_device(client),
      .serial_kernels = tpu_client_is_cpu(client) &&
                        tpu_hlo_largest_tensor_bytes(mlir, mlir_len) <= kSerialKernelBytes};
}


tpu_status_t tpu_program_get(const char* mlir, size_t mlir_len,
                             tpu_program_t** out_program) {
  tpu_client_t* client = tpu_runtime_client();
  if (!client)
    return tpu_status_make(TPU_STATUS_FAILED_PRECONDITION,
                           "the runtime is not initialized");
  uint64_t hash = tpu_hash_fnv1a(mlir, mlir_len);
  pthread_mutex_lock(&g_lock);
  tpu_program_t* found = lookup(hash, mlir, mlir_len);
  pthread_mutex_unlock(&g_lock);
  if (found) {
    TPU_METRICS_BUMP("program_cache_hits", 1);
    *out_program = found;
    return NULL;
  }
  /* Load or compile outside the lock: compiles take milliseconds to
   * seconds. Threads racing on one text meet at the disk cache's key lock
   * (one compiles, the others load); the loser's copy is dropped below. */
  if (tpu_env_log_enabled("programs"))
    fprintf(stderr, "torchtpu: program %016llx:\n%.*s\n", (unsigned long long)hash, (int)mlir_len,
            mlir);
  tpu_compile_options_t options = tpu_program_compile_options(client, mlir, mlir_len);
  tpu_executable_t* executable = NULL;
  tpu_trace_span_t span;
  const char* label = tpu_runtime_op_label();
  tpu_trace_begin(&span, TPU_TRACE_COMPILE, label ? label : "a program");
  /* The cache keys on the text compiled, so rewritten programs never meet
   * a process that compiles dots with XLA (TORCHTPU_HOST_GEMM=0). */
  /* Attention first: its marked generic form holds dots the gemm rewrite
   * would otherwise turn into calls XLA then drops. */
  char* attn_text = NULL;
  size_t attn_len = 0;
  tpu_status_t compiled = tpu_hostattn_active()
                              ? tpu_hostattn_rewrite(mlir, mlir_len, &attn_text, &attn_len)
                              : NULL;
  if (attn_text) TPU_METRICS_BUMP("host_attn_programs", 1);
  const char* source = attn_text ? attn_text : mlir;
  size_t source_len = attn_text ? attn_len : mlir_len;
  char* gemm_text = NULL;
  size_t gemm_len = 0;
  if (!compiled && tpu_hostgemm_active())
    compiled = tpu_hostgemm_rewrite(source, source_len, &gemm_text, &gemm_len);
  if (gemm_text) TPU_METRICS_BUMP("host_gemm_programs", 1);
  const char* rewritten = gemm_text ? gemm_text : source;
  size_t rewritten_len = gemm_text ? gemm_len : source_len;
  char* row_text = NULL;
  size_t row_len = 0;
  if (!compiled && tpu_hostrow_active())
    compiled = tpu_hostrow_rewrite(rewritten, rewritten_len, &row_text, &row_len);
  if (row_text) TPU_METRICS_BUMP("host_row_programs", 1);
  if (row_text) rewritten = row_text, rewritten_len = row_len;
  char* norm_text = NULL;
  size_t norm_len = 0;
  if (!compiled && tpu_hostnorm_active())
    compiled = tpu_hostnorm_rewrite(rewritten, rewritten_len, &norm_text, &norm_len);
  if (norm_text) TPU_METRICS_BUMP("host_norm_programs", 1);
  if (!compiled)
    compiled = tpu_diskcache_load_or_compile(client, norm_text ? norm_text : rewritten,
                                             norm_text ? norm_len : rewritten_len, &options,
                                             &executable);
  free(attn_text);
  free(gemm_text);
  free(row_text);
  free(norm_text);
  tpu_trace_end(&span);
  TPU_RETURN_IF_ERROR(compiled);
  tpu_program_t* program = calloc(1, sizeof *program);
  char* text = malloc(mlir_len + 1);
  if (!program || !text) {
    free(program);
    free(text);
    tpu_executable_destroy(executable);
    return tpu_status_oom("caching a program");
  }
  memcpy(text, mlir, mlir_len);
  text[mlir_len] = '\0';
  program->text = text;
  program->len = mlir_len;
  program->hash = hash;
  program->executable = executable;
  size_t cap = cache_cap();
  bool pressure = maps_pressure();
  if (cap || pressure) {
    /* Queued launches hold program pointers: drain them before a rotation
     * destroys any (outside the lock: the queue's thread never takes it,
     * but a drain can take a while). */
    pthread_mutex_lock(&g_lock);
    bool full = pressure || g_count + 1 > cap / 2;
    pthread_mutex_unlock(&g_lock);
    if (full) tpu_runtime_drain_queue();
  }
  pthread_mutex_lock(&g_lock);
  found = lookup(hash, mlir, mlir_len);
  if (!found && (pressure || (cap && g_count + 1 > cap / 2))) rotate();
  if (!found) {
    program->next = g_buckets[hash % BUCKETS];
    g_buckets[hash % BUCKETS] = program;
    g_count++;
  }
  pthread_mutex_unlock(&g_lock);
  if (found) {
    tpu_executable_destroy(program->executable);
    free(program->text);
    free(program);
    program = found;
  }
  *out_program = program;
  return NULL;
}

tpu_executable_t* tpu_program_executable(const tpu_program_t* program) {
  return program->executable;
}

int tpu_program_num_outputs(const tpu_program_t* program) {
  return tpu_executable_num_outputs(program->executable);
}

/* Completion events and inline programs. A completion event per execution
 * costs the plugin an allocation and a future, and us its tracking: about
 * a sixth of a cache-hit eager op on the CPU plugin, which runs small
 * programs to completion inside Execute when their inputs are ready. So a
 * program whose executions were all seen finished on return (its event
 * ready, INLINE_TRUST times running) skips the event when every input is
 * presumed ready, and marks its outputs presumed ready; synchronize has
 * no event of it to wait for. Presumed, not known: the plugin runs
 * a program XLA does not estimate cheap on its pool, and a small one often
 * finishes before Execute returns, yet not under load. So reads still wait
 * for PJRT's event (buffer.c). Every RECHECK-th run asks for the event
 * again, and a program once seen still running with ready inputs always
 * asks. Plugins that execute asynchronously (GPU, TPU) never
 * return a ready event, so their programs never skip; nor do synchronous
 * (Debug) executions, whose event carries the op's error. */
#define INLINE_TRUST 8
#define RECHECK 64

static bool inputs_presumed_ready(tpu_buffer_t* const* args, int nargs, bool poll) {
  for (int i = 0; i < nargs; i++)
    if (!tpu_buffer_presumed_ready(args[i]) && !(poll && tpu_buffer_poll_ready(args[i])))
      return false;
  return true;
}

/* Enqueues one execution; `wait` awaits it and returns its error, else its
 * completion event is tracked for tpu_runtime_synchronize. */
bool tpu_program_runs_inline(const tpu_program_t* program) {
  return !atomic_load_explicit(&program->runs_async, memory_order_relaxed) &&
         atomic_load_explicit(&program->finished_inline, memory_order_relaxed) >= INLINE_TRUST;
}

static tpu_status_t run_program(tpu_program_t* program, int device_index, tpu_buffer_t* const* args,
                        int nargs, tpu_buffer_t** out_results, tpu_event_t** done, bool into) {
  return into ? tpu_executable_execute_into(program->executable, device_index, args, nargs,
                                            out_results, done)
              : tpu_executable_execute(program->executable, device_index, args, nargs, NULL,
                                       out_results, done);
}

/* `into`: out_results are pending buffers to fill (tpu_program_execute_into). */
static tpu_status_t execute_untraced(tpu_program_t* program, int device_index,
                            tpu_buffer_t* const* args, int nargs,
                            tpu_buffer_t** out_results, bool wait, bool into) {
  const int nout = tpu_executable_num_outputs(program->executable);
  unsigned run = atomic_fetch_add_explicit(&program->runs, 1, memory_order_relaxed);
  bool trusted = tpu_program_runs_inline(program);
  /* Polling asks the plugin about inputs not yet known: only for
   * programs that would use the answer. */
  if (!wait && trusted && run % RECHECK != 0 &&
      inputs_presumed_ready(args, nargs, /*poll=*/true)) {
    TPU_RETURN_IF_ERROR(run_program(program, device_index, args, nargs, out_results, NULL, into));
    TPU_METRICS_BUMP("executions", 1);
    TPU_METRICS_BUMP("executions_without_event", 1);
    for (int i = 0; i < nout; i++) tpu_buffer_set_presumed_ready(out_results[i]);
    return NULL;
  }
  bool ready_inputs = inputs_presumed_ready(args, nargs, /*poll=*/false);
  tpu_event_t* done = NULL;
  TPU_RETURN_IF_ERROR(run_program(program, device_index, args, nargs, out_results, &done, into));
  TPU_METRICS_BUMP("executions", 1);
  if (done && tpu_event_is_ready(done)) {
    /* Finished already: no tracking, its error (if any) reported now. */
    tpu_status_t status = tpu_event_await(done);
    tpu_event_destroy(done);
    if (!status) {
      atomic_fetch_add_explicit(&program->finished_inline, 1, memory_order_relaxed);
      for (int i = 0; i < nout; i++) tpu_buffer_set_known_ready(out_results[i]);
    }
    if (wait) return status;
    tpu_runtime_record_error(device_index, status);
    return NULL;
  }
  if (done && ready_inputs) atomic_store_explicit(&program->runs_async, true, memory_order_relaxed);
  if (!wait) {
    tpu_runtime_track(device_index, done);
    return NULL;
  }
  if (!done) return NULL;
  tpu_status_t status = tpu_event_await(done);
  tpu_event_destroy(done);
  return status;
}

/* One execution span: from the call into PJRT's execute until it returns
 * (or, when waiting, until the execution finished). On the CPU plugin a
 * small program runs inside the call, so that is its run time; on
 * asynchronous plugins it is the launch. Named by the op label. */
static tpu_status_t execute(tpu_program_t* program, int device_index,
                            tpu_buffer_t* const* args, int nargs,
                            tpu_buffer_t** out_results, bool wait, bool into) {
  if (!tpu_trace_enabled())
    return execute_untraced(program, device_index, args, nargs, out_results, wait, into);
  tpu_trace_span_t span;
  const char* label = tpu_runtime_op_label();
  tpu_trace_begin(&span, TPU_TRACE_EXECUTE, label ? label : "a program");
  tpu_status_t s = execute_untraced(program, device_index, args, nargs, out_results, wait, into);
  tpu_trace_end(&span);
  return s;
}

tpu_status_t tpu_program_execute(tpu_program_t* program, int device_index,
                                 tpu_buffer_t* const* args, int nargs,
                                 tpu_buffer_t** out_results) {
  return execute(program, device_index, args, nargs, out_results, false, false);
}

tpu_status_t tpu_program_execute_into(tpu_program_t* program, int device_index,
                                      tpu_buffer_t* const* args, int nargs,
                                      tpu_buffer_t** pending_results) {
  return execute(program, device_index, args, nargs, pending_results, false, true);
}

tpu_status_t tpu_program_execute_sync(tpu_program_t* program, int device_index,
                                      tpu_buffer_t* const* args, int nargs,
                                      tpu_buffer_t** out_results) {
  return execute(program, device_index, args, nargs, out_results, true, false);
}

size_t tpu_program_cache_size(void) {
  pthread_mutex_lock(&g_lock);
  size_t n = g_count + g_old_count;
  pthread_mutex_unlock(&g_lock);
  return n;
}

void tpu_program_cache_clear(void) {
  tpu_runtime_drain_queue(); /* queued executions hold program pointers */
  pthread_mutex_lock(&g_lock);
  for (size_t b = 0; b < BUCKETS; b++) {
    destroy_chain(g_buckets[b]);
    destroy_chain(g_old_buckets[b]);
    g_buckets[b] = g_old_buckets[b] = NULL;
  }
  g_count = g_old_count = 0;
  g_generation++;
  pthread_mutex_unlock(&g_lock);
}
