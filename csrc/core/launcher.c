#include "launcher.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "env.h"
#include "runtime.h"
#include "trace.h"

/* A bounded ring of cells, many producers (any thread running ops) and one
 * consumer (the worker). Each cell's sequence number says whose turn it
 * is: pos (free for the producer claiming pos), pos + 1 (filled, for the
 * worker), pos + CAPACITY (free again, next lap). */
/* An item is two cache lines: what the op thread writes and the worker
 * reads per op. Calls with more arguments or results run directly. */
enum { CAPACITY = 1024, MAX_ARGS = 8, MAX_RESULTS = 4 };
enum { KIND_EXECUTE = 1, KIND_FREE = 2 };

/* The worker stays awake this long after its last item, and an op this
 * soon after the previous one is queued: back-to-back ops (a few
 * microseconds apart) stream through the queue; a lone op does not pay
 * for waking a thread. */
#define AWAKE_NS 50000
#define RECENT_NS 20000
/* Waiting for the queue spins this long before it sleeps. */
#define SPIN_NS 500000

typedef struct {
  int kind, device, nargs, nres;
  tpu_program_t* program;
  tpu_buffer_t* args[MAX_ARGS];
  tpu_buffer_t* results[MAX_RESULTS]; /* pending until this item runs */
  const char* op_name;                 /* static (dispatch's op names live on) */
  long long submit_ns;                 /* tracing: when it was queued, else 0 */
} item_t;

typedef struct {
  atomic_size_t seq;
  item_t item;
} cell_t;

static cell_t g_cells[CAPACITY];
static atomic_size_t g_enqueue_pos; /* cells claimed: everything submitted */
static size_t g_dequeue_pos;        /* the worker's */
static atomic_size_t g_completed;   /* cells the worker finished */

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_wake = PTHREAD_COND_INITIALIZER;    /* worker sleeps */
static pthread_cond_t g_done = PTHREAD_COND_INITIALIZER;    /* drains sleep */
static atomic_int g_drain_sleepers;
static atomic_bool g_started, g_awake, g_stop;
static pthread_t g_thread;
static atomic_int g_enabled = -1; /* -1: not yet read from the environment */
static atomic_llong g_last_ns;
static atomic_bool g_always_queue;
static atomic_long g_queued;
static _Thread_local bool t_is_worker;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static long long now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

static bool filled(size_t pos) {
  return atomic_load_explicit(&g_cells[pos % CAPACITY].seq, memory_order_acquire) == pos + 1;
}

/* Claims the next cell and publishes `it` there; false when the ring is
 * full. */
static bool push(const item_t* it) {
  size_t pos = atomic_load_explicit(&g_enqueue_pos, memory_order_relaxed);
  for (;;) {
    cell_t* c = &g_cells[pos % CAPACITY];
    size_t seq = atomic_load_explicit(&c->seq, memory_order_acquire);
    intptr_t dif = (intptr_t)seq - (intptr_t)pos;
    if (dif == 0) {
      if (atomic_compare_exchange_weak_explicit(&g_enqueue_pos, &pos, pos + 1,
                                                memory_order_relaxed, memory_order_relaxed)) {
        c->item = *it;
        atomic_store_explicit(&c->seq, pos + 1, memory_order_release);
        return true;
      }
    } else if (dif < 0) {
      return false;
    } else {
      pos = atomic_load_explicit(&g_enqueue_pos, memory_order_relaxed);
    }
  }
}

static void run_execute(item_t* it) {
  tpu_runtime_set_op_label(it->op_name);
  if (it->submit_ns && tpu_trace_enabled()) tpu_trace_set_next_wait(now_ns() - it->submit_ns);
  tpu_status_t status =
      tpu_program_execute_into(it->program, it->device, it->args, it->nargs, it->results);
  if (status) status = tpu_status_annotate(status, "running %s: ", it->op_name);
  for (int r = 0; r < it->nres && status; r++) {
    if (tpu_buffer_state(it->results[r]) == TPU_BUFFER_PENDING)
      tpu_buffer_fail(it->results[r], tpu_status_make(tpu_status_code(status), "%s",
                                                      tpu_status_message(status)));
  }
  /* The error also reaches the device's next synchronize, as an
   * asynchronous execution's would. */
  tpu_runtime_record_error(it->device, status);
  tpu_runtime_set_op_label(NULL);
}

/* Runs the next item if there is one. */
static bool run_one(void) {
  size_t pos = g_dequeue_pos;
  if (!filled(pos)) return false;
  cell_t* c = &g_cells[pos % CAPACITY];
  if (c->item.kind == KIND_FREE) tpu_buffer_free(c->item.args[0]);
  else run_execute(&c->item);
  atomic_store_explicit(&c->seq, pos + CAPACITY, memory_order_release);
  g_dequeue_pos = pos + 1;
  atomic_store(&g_completed, pos + 1); /* seq_cst: pairs with g_drain_sleepers */
  if (atomic_load(&g_drain_sleepers) > 0) {
    pthread_mutex_lock(&g_lock);
    pthread_cond_broadcast(&g_done);
    pthread_mutex_unlock(&g_lock);
  }
  return true;
}

static void* worker_main(void* unused) {
  (void)unused;
  t_is_worker = true;
  for (;;) {
    if (run_one()) continue;
    long long idle_since = now_ns();
    bool more = false;
    for (int spin = 0; !more && now_ns() - idle_since < AWAKE_NS; spin++) {
      if (spin < 64) cpu_relax();
      else sched_yield(); /* the plugin's threads may need this CPU */
      more = filled(g_dequeue_pos);
    }
    if (more) continue;
    pthread_mutex_lock(&g_lock);
    atomic_store(&g_awake, false);
    atomic_thread_fence(memory_order_seq_cst); /* then look: pairs with submit */
    while (!filled(g_dequeue_pos) && !atomic_load(&g_stop)) pthread_cond_wait(&g_wake, &g_lock);
    atomic_store(&g_awake, true);
    bool stop = atomic_load(&g_stop) && !filled(g_dequeue_pos);
    pthread_mutex_unlock(&g_lock);
    if (stop) return NULL;
  }
}

/* Forking while the worker runs would leave the child a queue nobody
 * serves: drain first, and the child starts its own worker on demand. The
 * lock is held across the fork so the child never inherits it taken. */
static void before_fork(void) {
  tpu_launcher_drain();
  pthread_mutex_lock(&g_lock);
}
static void in_parent(void) { pthread_mutex_unlock(&g_lock); }
static void in_child(void) {
  atomic_store(&g_started, false);
  atomic_store(&g_awake, false);
  pthread_mutex_unlock(&g_lock);
}

static void init_once(void) {
  for (size_t i = 0; i < CAPACITY; i++) atomic_init(&g_cells[i].seq, i);
  pthread_atfork(before_fork, in_parent, in_child);
  atexit(tpu_launcher_shutdown); /* drains and joins the worker */
  /* The runtime and the program cache wait for the queue through these
   * (they sit below this layer and do not call up into it). */
  tpu_runtime_set_queue_hooks(
      (tpu_runtime_queue_hooks_t){.drain = tpu_launcher_drain, .stop = tpu_launcher_shutdown});
}

/* Starts the worker if it is not running; false if it cannot. */
static bool ensure_worker(void) {
  if (atomic_load_explicit(&g_started, memory_order_acquire)) return true;
  pthread_once(&g_once, init_once);
  pthread_mutex_lock(&g_lock);
  bool ok = atomic_load(&g_started);
  if (!ok) {
    atomic_store(&g_stop, false);
    atomic_store(&g_awake, true);
    ok = pthread_create(&g_thread, NULL, worker_main, NULL) == 0;
    if (!ok) atomic_store(&g_awake, false);
    atomic_store_explicit(&g_started, ok, memory_order_release);
  }
  pthread_mutex_unlock(&g_lock);
  return ok;
}

static void submit(const item_t* it) {
  while (!push(it)) sched_yield(); /* full: the awake worker is emptying it */
  atomic_thread_fence(memory_order_seq_cst); /* published, then look: pairs with the worker */
  if (!atomic_load_explicit(&g_awake, memory_order_relaxed)) {
    pthread_mutex_lock(&g_lock);
    pthread_cond_signal(&g_wake);
    pthread_mutex_unlock(&g_lock);
  }
}

static int cpu_count(void) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}

bool tpu_launcher_enabled(void) {
  int enabled = atomic_load_explicit(&g_enabled, memory_order_relaxed);
  if (enabled < 0) {
    /* One CPU: the worker could only take turns with the caller. */
    enabled = tpu_env_get_int("TORCHTPU_LAUNCHER", 1) != 0 && cpu_count() > 1;
    atomic_store(&g_enabled, enabled);
  }
  return enabled;
}

void tpu_launcher_set_enabled(bool enabled) {
  if (!enabled) tpu_launcher_drain();
  atomic_store(&g_enabled, enabled ? 1 : 0);
}

long tpu_launcher_queued(void) { return atomic_load(&g_queued); }

/* Whether this execution goes through the queue:
 * - an argument is still pending: running directly would wait for it;
 * - else only programs the plugin runs inside its execute call: for the
 *   others the plugin's execute returns at once and its own threads
 *   compute (our worker would only compete with them for CPUs);
 * - and then while the worker has items left, or when the previous op came
 *   moments ago (a stream). An op after a pause (say, after a synchronize)
 *   runs directly: handing it over would only add latency. */
static bool use_queue(tpu_program_t* program, tpu_buffer_t* const* args, int nargs) {
  if (!tpu_launcher_enabled()) return false;
  long long now = now_ns();
  long long last = atomic_exchange_explicit(&g_last_ns, now, memory_order_relaxed);
  bool started = atomic_load_explicit(&g_started, memory_order_acquire);
  if (started) {
    for (int i = 0; i < nargs; i++)
      if (tpu_buffer_state(args[i]) == TPU_BUFFER_PENDING) return true;
  }
  /* (the test knob queues every execution, whatever the program: which
   * programs prove to run inline depends on the machine's load) */
  bool always = atomic_load_explicit(&g_always_queue, memory_order_relaxed);
  if (!always && !tpu_program_runs_inline(program)) return false;
  if (started && atomic_load(&g_completed) != atomic_load(&g_enqueue_pos)) return true;
  return (now - last < RECENT_NS || always) && ensure_worker();
}

void tpu_launcher_set_always_queue(bool always) { atomic_store(&g_always_queue, always); }

/* The free hook. Queued items borrow their buffers (no reference counts:
 * counting on one thread and uncounting on the other moved each shared
 * buffer's cache line across cores twice per op). Instead a buffer
 * destroyed while items are in flight is freed through the queue: it runs
 * after every item queued before it, the only ones that can use it. That
 * also moves PJRT's buffer teardown off the op thread. */
static bool free_later(tpu_buffer_t* buffer) {
  if (t_is_worker || !atomic_load_explicit(&g_started, memory_order_acquire)) return false;
  if (atomic_load(&g_completed) == atomic_load(&g_enqueue_pos)) return false; /* idle */
  item_t it = {.kind = KIND_FREE};
  it.args[0] = buffer;
  submit(&it);
  return true;
}

tpu_status_t tpu_launcher_execute(tpu_program_t* program, int device_index,
                                  tpu_buffer_t* const* args, int nargs,
                                  tpu_buffer_t** out_results, const char* op_name) {
  tpu_executable_t* exe = tpu_program_executable(program);
  const int nres = tpu_executable_num_outputs(exe);
  if (nargs > MAX_ARGS || nres > MAX_RESULTS || t_is_worker || !use_queue(program, args, nargs)) {
    const char* label = tpu_runtime_op_label();
    if (op_name) tpu_runtime_set_op_label(op_name); /* names it in errors and traces */
    tpu_status_t s = tpu_program_execute(program, device_index, args, nargs, out_results);
    tpu_runtime_set_op_label(label);
    return s;
  }
  static atomic_bool hooked;
  if (!atomic_load_explicit(&hooked, memory_order_relaxed) && !atomic_exchange(&hooked, true))
    tpu_buffer_set_free_hook(free_later);
  item_t it = {.kind = KIND_EXECUTE, .device = device_index, .nargs = nargs, .nres = nres,
               .program = program};
  it.op_name = op_name ? op_name : "an op";
  tpu_client_t* client = tpu_runtime_client();
  for (int r = 0; r < nres; r++) {
    tpu_status_t status = tpu_buffer_make_pending(
        client, device_index, tpu_executable_output_dtype(exe, r), tpu_executable_output_dims(exe, r),
        tpu_executable_output_rank(exe, r), &out_results[r]);
    if (status) {
      for (int k = 0; k < r; k++) {
        tpu_buffer_destroy(out_results[k]); /* never queued */
        out_results[k] = NULL;
      }
      return status;
    }
  }
  memcpy(it.results, out_results, (size_t)nres * sizeof *out_results);
  memcpy(it.args, args, (size_t)nargs * sizeof *args);
  if (tpu_trace_enabled()) it.submit_ns = now_ns(); /* same clock as the trace's */
  submit(&it);
  atomic_fetch_add_explicit(&g_queued, 1, memory_order_relaxed);
  return NULL;
}

void tpu_launcher_drain(void) {
  if (t_is_worker) return;
  size_t target = atomic_load(&g_enqueue_pos);
  if (atomic_load(&g_completed) >= target) return;
  /* Spin, yielding the CPU to any other runnable thread (the plugin's
   * own, computing what we wait for), before sleeping: waking a sleeper
   * takes tens of microseconds, more than most waits here. */
  long long until = now_ns() + SPIN_NS;
  for (int spin = 0; atomic_load(&g_completed) < target; spin++) {
    if (spin < 64) {
      cpu_relax();
    } else {
      if (now_ns() > until) break;
      sched_yield();
    }
  }
  if (atomic_load(&g_completed) >= target) return;
  pthread_mutex_lock(&g_lock);
  atomic_fetch_add(&g_drain_sleepers, 1);
  while (atomic_load(&g_completed) < target) pthread_cond_wait(&g_done, &g_lock);
  atomic_fetch_sub(&g_drain_sleepers, 1);
  pthread_mutex_unlock(&g_lock);
}

void tpu_launcher_shutdown(void) {
  if (t_is_worker || !atomic_load(&g_started)) return;
  tpu_launcher_drain();
  pthread_mutex_lock(&g_lock);
  atomic_store(&g_stop, true);
  pthread_cond_signal(&g_wake);
  pthread_mutex_unlock(&g_lock);
  pthread_join(g_thread, NULL);
  atomic_store(&g_started, false);
  atomic_store(&g_awake, false);
}
