#include "defer.h"
#include "defer_internal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "env.h"
#include "hash.h"
#include "memory.h"
#include "metrics.h"
#include "program.h"
#include "repeat.h"
#include "runtime.h"
#include "trace.h"

/* ---- the run (types in defer_internal.h) ---------------------------------- */

#define GROW(arr, n, cap)                                                \
  ((n) < (cap) ? true                                                    \
               : grow_array((void**)&(arr), &(cap), sizeof *(arr), (n) + 1))

static bool grow_array(void** arr, int* cap, size_t elem, int need) {
  int c = *cap ? *cap : 64;
  while (c < need) c *= 2;
  void* p = realloc(*arr, elem * (size_t)c);
  if (!p) return false;
  *arr = p;
  *cap = c;
  return true;
}


/* Loop cuts (repeat.h): a run shorter than this is cut only when it is
 * entirely two copies of one stretch, so a model's repeated layers do not
 * split a step; a longer one (a loop that began with a one-off warm-up) is
 * cut at any square. */
enum { kRepeatAnywhereAfter = 256 };

static trace_t g_traces[TPU_MAX_DEVICES];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static _Atomic int g_max_ops = 0;
static _Atomic int g_min_repeat = 0;
static _Thread_local tpu_defer_reason_t t_reason = TPU_DEFER_SYNC;

static tpu_status_t settle_hook(tpu_storage_t* storage);

static void init_once(void) {
  for (int d = 0; d < TPU_MAX_DEVICES; d++) {
    pthread_mutex_init(&g_traces[d].lock, NULL);
    g_traces[d].device = d;
  }
  if (!g_max_ops) g_max_ops = (int)tpu_env_get_int("TORCHTPU_DEFER_MAX_OPS", 4096);
  if (!g_min_repeat) g_min_repeat = (int)tpu_env_get_int("TORCHTPU_DEFER_MIN_REPEAT", 32);
  if (g_max_ops < 1) g_max_ops = 4096;
  if (g_min_repeat < 1) g_min_repeat = 32;
  tpu_storage_set_settle_hook(settle_hook);
}

void tpu_defer_configure(int max_ops, int min_repeat) {
  pthread_once(&g_once, init_once);
  if (max_ops > 0) g_max_ops = max_ops;
  if (min_repeat > 0) {
    g_min_repeat = min_repeat;
    /* Repeat trackers are made with the period: drop them (empty runs only
     * are affected; a pending run keeps its tracker until its flush). */
    for (int d = 0; d < TPU_MAX_DEVICES; d++) {
      pthread_mutex_lock(&g_traces[d].lock);
      if (g_traces[d].num_ops == 0) {
        tpu_repeat_destroy(g_traces[d].repeat);
        g_traces[d].repeat = NULL;
      }
      pthread_mutex_unlock(&g_traces[d].lock);
    }
  }
}

const char* tpu_defer_reason_name(tpu_defer_reason_t reason) {
  switch (reason) {
    case TPU_DEFER_SYNC: return "sync";
    case TPU_DEFER_BARRIER: return "barrier";
    case TPU_DEFER_LOOP: return "loop";
    case TPU_DEFER_CAP: return "cap";
    default: return "unknown";
  }
}

tpu_defer_reason_t tpu_defer_set_thread_reason(tpu_defer_reason_t reason) {
  tpu_defer_reason_t old = t_reason;
  t_reason = reason;
  return old;
}

/* ---- fused programs ------------------------------------------------------ */

typedef struct fused_s {
  int64_t* key;
  size_t key_len;
  uint64_t hash;
  tpu_program_t* program;
  unsigned generation;
  int* result_of; /* program result index of each kept value */
  int num_kept;
  struct fused_s* next;
} fused_t;

#define FUSED_BUCKETS 512
static pthread_mutex_t g_fused_lock = PTHREAD_MUTEX_INITIALIZER;
static fused_t* g_fused[FUSED_BUCKETS];
static size_t g_fused_count;

static fused_t* fused_lookup(const int64_t* key, size_t n, uint64_t hash) {
  for (fused_t* f = g_fused[hash % FUSED_BUCKETS]; f; f = f->next)
    if (f->hash == hash && f->key_len == n && memcmp(f->key, key, n * sizeof *key) == 0) return f;
  return NULL;
}

static void fused_free(fused_t* f) {
  if (!f) return;
  free(f->key);
  free(f->result_of);
  free(f);
}

size_t tpu_defer_cache_size(void) {
  pthread_mutex_lock(&g_fused_lock);
  size_t n = g_fused_count;
  pthread_mutex_unlock(&g_fused_lock);
  return n;
}

void tpu_defer_cache_clear(void) {
  tpu_status_free(tpu_defer_flush_all(TPU_DEFER_SYNC));
  pthread_mutex_lock(&g_fused_lock);
  for (int b = 0; b < FUSED_BUCKETS; b++) {
    fused_t* f = g_fused[b];
    while (f) {
      fused_t* next = f->next;
      fused_free(f);
      f = next;
    }
    g_fused[b] = NULL;
  }
  g_fused_count = 0;
  pthread_mutex_unlock(&g_fused_lock);
}

/* A fused program that does not compile: find the op that does not, so the
 * error names it (each op's module is compiled alone, the cache keeps the
 * ones that work). */
static tpu_status_t blame(const trace_t* tr, tpu_status_t fused_error) {
  for (int i = 0; i < tr->num_ops; i++) {
    const tpu_defer_op_t* op = tr->ops[i].op;
    tpu_program_t* p = NULL;
    tpu_status_t s = tpu_program_get(op->text, op->len, &p);
    if (s) {
      tpu_status_free(fused_error);
      return tpu_status_annotate(s, "deferred op %s (op %d of a run of %d): ", op->name, i + 1,
                                 tr->num_ops);
    }
  }
  return tpu_status_annotate(fused_error, "fusing a deferred run of %d ops (first %s): ",
                             tr->num_ops, tr->ops[0].op->name);
}

/* A one-op run uses that op's own program, which takes every operand as
 * an argument: not when the run makes one of them (zeros). */
static bool own_program(const trace_t* tr) {
  return tr->num_ops == 1 && tr->num_zeros == 0;
}

/* The program for this run with these kept values, compiled on a miss. */
static tpu_status_t fused_get(const trace_t* tr, const int* kept, int num_kept, fused_t** out) {
  /* Key: per op its identity and where each operand comes from; then the
   * kept values. Value ids are assigned in recording order, so equal
   * structures give equal keys whatever the storages were. */
  size_t n = 2 + (size_t)tr->num_ops * 2 + (size_t)tr->num_params + (size_t)num_kept;
  int64_t* key = malloc(n * sizeof *key);
  if (!key) return tpu_status_oom(NULL);
  size_t k = 0;
  key[k++] = tr->num_ops;
  for (int i = 0; i < tr->num_ops; i++) {
    const op_rec_t* o = &tr->ops[i];
    key[k++] = (int64_t)(intptr_t)o->op;
    key[k++] = o->op->num_params;
    for (int p = 0; p < o->op->num_params; p++) {
      /* Zeros are made in the program, an input is passed: another one. */
      int v = tr->params[o->first_param + p];
      key[k++] = tr->values[v].op == VALUE_ZEROS ? -1 - (int64_t)v : v;
    }
  }
  key[k++] = num_kept;
  for (int i = 0; i < num_kept; i++) key[k++] = kept[i];
  uint64_t hash = tpu_hash_bytes(key, k * sizeof *key);
  unsigned generation = tpu_program_cache_generation();
  pthread_mutex_lock(&g_fused_lock);
  fused_t* f = fused_lookup(key, k, hash);
  pthread_mutex_unlock(&g_fused_lock);
  if (f && f->generation == generation) {
    free(key);
    TPU_METRICS_BUMP("defer_cache_hits", 1);
    *out = f;
    return NULL;
  }
  bool fresh = f == NULL;
  if (fresh) {
    f = calloc(1, sizeof *f);
    if (f) f->result_of = calloc((size_t)num_kept + 1, sizeof *f->result_of);
    if (!f || !f->result_of) {
      fused_free(f);
      free(key);
      return tpu_status_oom(NULL);
    }
    f->key = key;
    f->key_len = k;
    f->hash = hash;
    f->num_kept = num_kept;
  } else {
    free(key);
  }
  tpu_status_t status = NULL;
  tpu_program_t* program = NULL;
  if (own_program(tr)) {
    /* One op: its own program (Strict mode's), results picked by index. */
    const tpu_defer_op_t* op = tr->ops[0].op;
    const char* label = tpu_runtime_op_label();
    tpu_runtime_set_op_label(op->name);
    status = tpu_program_get(op->text, op->len, &program);
    tpu_runtime_set_op_label(label);
    if (status)
      status = tpu_status_annotate(status, "deferred op %s: ", op->name);
    for (int i = 0; i < num_kept; i++) f->result_of[i] = tr->values[kept[i]].index;
  } else {
    size_t len = 0;
    char* text = tpu_defer_fused_text(tr, kept, num_kept, &len);
    const char* label = tpu_runtime_op_label();
    tpu_runtime_set_op_label("a defer_and_fuse run"); /* names the compile in a trace */
    if (!text) status = tpu_status_oom(NULL);
    else status = tpu_program_get(text, len, &program);
    tpu_runtime_set_op_label(label);
    free(text);
    if (status) status = blame(tr, status);
    for (int i = 0; i < num_kept; i++) f->result_of[i] = i;
  }
  if (status) {
    if (fresh) fused_free(f);
    return status;
  }
  pthread_mutex_lock(&g_fused_lock);
  f->program = program;
  f->generation = generation;
  if (fresh) {
    fused_t* raced = fused_lookup(f->key, f->key_len, f->hash);
    if (raced) {
      fused_free(f);
      f = raced;
      f->program = program;
      f->generation = generation;
    } else {
      f->next = g_fused[hash % FUSED_BUCKETS];
      g_fused[hash % FUSED_BUCKETS] = f;
      g_fused_count++;
    }
  }
  pthread_mutex_unlock(&g_fused_lock);
  *out = f;
  return NULL;
}

/* ---- flush --------------------------------------------------------------- */

static void trace_reset(trace_t* tr) {
  for (int i = 0; i < tr->num_members; i++) {
    tpu_storage_set_defer_value(tr->members[i].storage, -1);
    tpu_storage_release(tr->members[i].storage);
  }
  for (int i = 0; i < tr->num_inputs; i++)
    if (tr->inputs[i].owned) tpu_buffer_destroy(tr->inputs[i].buffer);
  tr->num_values = tr->num_inputs = tr->num_ops = tr->num_params = tr->num_members = 0;
  tr->num_zeros = 0;
  if (tr->repeat) tpu_repeat_reset(tr->repeat);
}

/* After the fused program failed: runs the ops one at a time, in order,
 * each with its own module, as Strict mode would have. An op whose operand
 * failed fails too; the others run. The kept storages whose values were
 * computed get them; the rest are marked lost. Returns the first op's
 * failure, naming it, or NULL when every op ran alone (the fused program
 * alone failed, e.g. it needed more memory at once). Takes fused_error. */
static tpu_status_t replay(trace_t* tr, const int* kept, tpu_storage_t* const* kept_storage,
                           int num_kept, tpu_status_t fused_error) {
  int nv = tr->num_values;
  tpu_buffer_t** bufs = calloc((size_t)nv + 1, sizeof *bufs);
  bool* owned = calloc((size_t)nv + 1, sizeof *owned);
  /* result_value[first_result[o] + r]: the value of op o's result r. */
  int* first_result = calloc((size_t)tr->num_ops + 1, sizeof *first_result);
  int* result_value = calloc((size_t)nv + 1, sizeof *result_value);
  if (!bufs || !owned || !first_result || !result_value) {
    free(bufs);
    free(owned);
    free(first_result);
    free(result_value);
    return fused_error;
  }
  for (int o = 0, at = 0; o < tr->num_ops; o++) {
    first_result[o] = at;
    at += tr->ops[o].op->num_results;
  }
  tpu_status_t first = NULL;
  for (int v = 0; v < nv; v++) {
    const value_t* val = &tr->values[v];
    if (val->op == VALUE_INPUT) {
      bufs[v] = tr->inputs[val->index].buffer;
    } else if (val->op == VALUE_ZEROS) {
      /* Uploaded: this path is for failures, not speed. */
      size_t nbytes = (size_t)tpu_hlo_type_numel(&val->type) * tpu_dtype_size(val->type.dtype);
      void* zeros = calloc(1, nbytes + 1);
      tpu_status_t s = zeros ? tpu_buffer_from_host(tpu_runtime_client(), tr->device, zeros,
                                                    val->type.dtype, val->type.dims,
                                                    val->type.rank, NULL, &bufs[v])
                             : tpu_status_oom(NULL);
      free(zeros);
      owned[v] = bufs[v] != NULL;
      if (s && !first) first = s;
      else tpu_status_free(s);
    } else {
      result_value[first_result[val->op] + val->index] = v;
    }
  }
  tpu_buffer_t* args[64];
  tpu_buffer_t* res[64];
  for (int o = 0; o < tr->num_ops; o++) {
    const tpu_defer_op_t* op = tr->ops[o].op;
    bool ready = op->num_params <= 64 && op->num_results <= 64;
    for (int p = 0; ready && p < op->num_params; p++) {
      args[p] = bufs[tr->params[tr->ops[o].first_param + p]];
      ready = args[p] != NULL; /* NULL: computed by an op that failed */
    }
    if (!ready) continue;
    tpu_program_t* program = NULL;
    tpu_status_t s = tpu_program_get(op->text, op->len, &program);
    if (s) {
      s = tpu_status_annotate(s, "deferred op %s (op %d of a run of %d): ", op->name, o + 1,
                              tr->num_ops);
    } else {
      memset(res, 0, sizeof res);
      tpu_runtime_set_op_label(op->name);
      s = tpu_program_execute_sync(program, tr->device, args, op->num_params, res);
      tpu_runtime_set_op_label(NULL);
      if (s) s = tpu_status_annotate(s, "running deferred op %s (op %d of a run of %d): ",
                                     op->name, o + 1, tr->num_ops);
    }
    if (s) {
      if (!first) first = s;
      else tpu_status_free(s);
      continue;
    }
    TPU_METRICS_BUMP("defer_replayed_ops", 1);
    for (int r = 0; r < op->num_results; r++) {
      int v = result_value[first_result[o] + r];
      tpu_buffer_set_producer(res[r], op->name);
      bufs[v] = res[r];
      owned[v] = true;
    }
  }
  tpu_status_free(fused_error);
  for (int i = 0; i < num_kept; i++) {
    tpu_storage_set_defer_value(kept_storage[i], -1);
    int v = kept[i];
    if (bufs[v] && owned[v]) {
      tpu_status_t s = tpu_storage_set_buffer(kept_storage[i], bufs[v]);
      owned[v] = false;
      if (s && !first) first = s;
      else tpu_status_free(s);
    } else if (!bufs[v]) {
      tpu_storage_set_lost(kept_storage[i], first ? tpu_status_message(first)
                                                  : "an op it depends on failed");
    }
  }
  for (int v = 0; v < nv; v++)
    if (owned[v]) tpu_buffer_destroy(bufs[v]);
  free(bufs);
  free(owned);
  free(first_result);
  free(result_value);
  return first;
}

static tpu_status_t flush_locked(trace_t* tr, tpu_defer_reason_t reason) {
  if (tr->num_ops == 0) {
    trace_reset(tr);
    return NULL;
  }
  /* Kept: the last value of every written storage something else still
   * holds. The run's own reference is one; a dead tensor leaves only it. */
  int* kept = calloc((size_t)tr->num_members + 1, sizeof *kept);
  tpu_storage_t** kept_storage = calloc((size_t)tr->num_members + 1, sizeof *kept_storage);
  tpu_buffer_t** args = calloc((size_t)tr->num_inputs + 1, sizeof *args);
  tpu_buffer_t** results = NULL;
  tpu_status_t status = NULL;
  bool replayed = false; /* replay settled the kept storages */
  int num_kept = 0;
  if (!kept || !kept_storage || !args) {
    status = tpu_status_oom(NULL);
    goto done;
  }
  for (int i = 0; i < tr->num_members; i++) {
    const member_t* m = &tr->members[i];
    if (!m->written || tpu_storage_refcount(m->storage) <= 1) continue;
    kept_storage[num_kept] = m->storage;
    kept[num_kept++] = tpu_storage_defer_value(m->storage);
  }
  tpu_metrics_add("defer_flushes", 1);
  {
    char name[64];
    snprintf(name, sizeof name, "defer_flush::%s", tpu_defer_reason_name(reason));
    tpu_metrics_add(name, 1);
  }
  tpu_metrics_add("defer_values_elided",
                  (int64_t)(tr->num_values - tr->num_inputs - tr->num_zeros) - num_kept);
  if (num_kept == 0) goto done; /* nothing observable: nothing to run */
  fused_t* f = NULL;
  status = fused_get(tr, kept, num_kept, &f);
  if (status) {
    status = replay(tr, kept, kept_storage, num_kept, status);
    replayed = true;
    goto done;
  }
  int nargs = tr->num_inputs;
  if (own_program(tr)) {
    /* The op's own program takes its parameters, which may name one input
     * twice. */
    const op_rec_t* o = &tr->ops[0];
    nargs = o->op->num_params;
    tpu_buffer_t** grown = realloc(args, sizeof *args * ((size_t)nargs + 1));
    if (!grown) {
      status = tpu_status_oom(NULL);
      goto done;
    }
    args = grown;
    for (int p = 0; p < nargs; p++)
      args[p] = tr->inputs[tr->values[tr->params[o->first_param + p]].index].buffer;
  } else {
    for (int i = 0; i < tr->num_inputs; i++) args[i] = tr->inputs[i].buffer;
  }
  int nres = tpu_program_num_outputs(f->program);
  results = calloc((size_t)nres + 1, sizeof *results);
  if (!results) {
    status = tpu_status_oom(NULL);
    goto done;
  }
  const char* label = tr->num_ops == 1 && tr->ops[0].op->whole_graph  /* a lone graph: its name */
                          ? tr->ops[0].op->name : "a defer_and_fuse run";
  tpu_runtime_set_op_label(label);
  /* A flush for a host read or a fallback op waits for the run (the host
   * waits for it next anyway), so a failure is known here and recovered
   * from; loop and cap flushes keep the host running ahead. */
  bool wait = reason == TPU_DEFER_SYNC || reason == TPU_DEFER_BARRIER;
  status = wait ? tpu_program_execute_sync(f->program, tr->device, args, nargs, results)
                : tpu_program_execute(f->program, tr->device, args, nargs, results);
  tpu_runtime_set_op_label(NULL);
  if (status) {
    for (int i = 0; i < nres; i++) {
      tpu_buffer_destroy(results[i]);
      results[i] = NULL;
    }
    status = tpu_status_annotate(status, "running a deferred run of %d ops (first %s): ",
                                 tr->num_ops, tr->ops[0].op->name);
    status = replay(tr, kept, kept_storage, num_kept, status);
    replayed = true;
    goto done;
  }
  TPU_METRICS_BUMP("defer_programs", 1);
  for (int i = 0; i < nres; i++) tpu_buffer_set_producer(results[i], label);
  for (int i = 0; i < num_kept && !status; i++) {
    tpu_storage_set_defer_value(kept_storage[i], -1);
    status = tpu_storage_set_buffer(kept_storage[i], results[f->result_of[i]]);
    results[f->result_of[i]] = NULL;
  }
  for (int i = 0; i < nres; i++) tpu_buffer_destroy(results[i]);
done:
  if (status && !replayed) {
    /* What the run would have written is gone: say so on every read. */
    for (int i = 0; i < tr->num_members; i++) {
      if (!tr->members[i].written) continue;
      tpu_storage_set_defer_value(tr->members[i].storage, -1);
      tpu_storage_set_lost(tr->members[i].storage, tpu_status_message(status));
    }
  }
  free(kept);
  free(kept_storage);
  free(args);
  free(results);
  trace_reset(tr);
  return status;
}

tpu_status_t tpu_defer_flush(int device, tpu_defer_reason_t reason) {
  if (device < 0 || device >= TPU_MAX_DEVICES) return NULL;
  pthread_once(&g_once, init_once);
  trace_t* tr = &g_traces[device];
  pthread_mutex_lock(&tr->lock);
  /* Only runs with ops are worth a span: empty flushes happen at every
   * host read. */
  tpu_trace_span_t span = {.kind = TPU_TRACE_NONE};
  if (tpu_trace_enabled() && tr->num_ops > 0)
    tpu_trace_begin(&span, TPU_TRACE_FLUSH, tpu_defer_reason_name(reason));
  tpu_status_t s = flush_locked(tr, reason);
  tpu_trace_end(&span);
  pthread_mutex_unlock(&tr->lock);
  return s;
}

tpu_status_t tpu_defer_flush_all(tpu_defer_reason_t reason) {
  tpu_status_t first = NULL;
  for (int d = 0; d < TPU_MAX_DEVICES; d++) {
    tpu_status_t s = tpu_defer_flush(d, reason);
    if (s && !first) first = s;
    else tpu_status_free(s);
  }
  return first;
}

int tpu_defer_pending_ops(int device) {
  if (device < 0 || device >= TPU_MAX_DEVICES) return 0;
  pthread_once(&g_once, init_once);
  pthread_mutex_lock(&g_traces[device].lock);
  int n = g_traces[device].num_ops;
  pthread_mutex_unlock(&g_traces[device].lock);
  return n;
}

static tpu_status_t settle_hook(tpu_storage_t* storage) {
  return tpu_defer_flush(tpu_storage_device(storage), t_reason);
}

/* ---- record -------------------------------------------------------------- */

static int new_value(trace_t* tr, const tpu_hlo_type_t* type, int op, int index) {
  if (!GROW(tr->values, tr->num_values, tr->cap_values)) return -1;
  tr->values[tr->num_values] = (value_t){.type = *type, .op = op, .index = index};
  return tr->num_values++;
}

static int member_add(trace_t* tr, tpu_storage_t* storage) {
  if (!GROW(tr->members, tr->num_members, tr->cap_members)) return -1;
  tpu_storage_retain(storage);
  tr->members[tr->num_members] = (member_t){.storage = storage, .written = false};
  return tr->num_members++;
}

static tpu_status_t oom(void) {
  return tpu_status_oom("recording an op");
}

/* The value operand p reads, adding an input for contents not in the run. */
static tpu_status_t operand_value(trace_t* tr, const tpu_hlo_type_t* type,
                                  const tpu_defer_operand_t* operand, bool* taken, int* out) {
  if (!operand->storage) {
    int v = new_value(tr, type, -1, tr->num_inputs);
    if (v < 0 || !GROW(tr->inputs, tr->num_inputs, tr->cap_inputs)) return oom();
    tr->inputs[tr->num_inputs++] =
        (input_t){.buffer = operand->buffer, .owned = operand->owned};
    *taken = true;
    *out = v;
    return NULL;
  }
  int v = tpu_storage_defer_value(operand->storage);
  if (v >= 0) {
    *out = v;
    return NULL;
  }
  /* Contents never written (PyTorch's empty; torch.ones is empty + fill_):
   * zeros made inside the program, as Strict's zero fill would have
   * uploaded none either, but without running a program of their own
   * first. Not for lost contents: reading those must raise. */
  if (!tpu_storage_buffer(operand->storage) && !tpu_storage_is_lost(operand->storage) &&
      tpu_storage_nbytes(operand->storage) ==
          (size_t)tpu_hlo_type_numel(type) * tpu_dtype_size(type->dtype)) {
    v = new_value(tr, type, VALUE_ZEROS, 0);
    if (v < 0 || member_add(tr, operand->storage) < 0) return oom();
    tr->num_zeros++;
    tpu_storage_set_defer_value(operand->storage, v);
    *out = v;
    return NULL;
  }
  /* First use in this run: its current contents, as the parameter's type
   * (not in a run, so this does not flush). */
  tpu_buffer_t* buffer = NULL;
  TPU_RETURN_IF_ERROR(tpu_storage_buffer_as(operand->storage, type->dtype, type->dims,
                                            type->rank, &buffer));
  v = new_value(tr, type, -1, tr->num_inputs);
  if (v < 0 || !GROW(tr->inputs, tr->num_inputs, tr->cap_inputs) || member_add(tr, operand->storage) < 0)
    return oom();
  tr->inputs[tr->num_inputs++] = (input_t){.buffer = buffer};
  tpu_storage_set_defer_value(operand->storage, v);
  *out = v;
  return NULL;
}

tpu_status_t tpu_defer_record(int device, const tpu_defer_op_t* op,
                              const tpu_defer_operand_t* params,
                              tpu_storage_t* const* results) {
  pthread_once(&g_once, init_once);
  tpu_status_t status = tpu_runtime_check_device(device);
  /* Which owned operand buffers the run took: on the stack for small ops
   * (nearly all; this runs once per recorded op). */
  bool inline_taken[32] = {false};
  bool* taken = op->num_params < 32 ? inline_taken
                                    : calloc((size_t)op->num_params + 1, sizeof *taken);
  if (!status && !taken) status = oom();
  if (status) goto fail;
  trace_t* tr = &g_traces[device];
  pthread_mutex_lock(&tr->lock);
  if (!tr->repeat) {
    status = tpu_repeat_create(g_min_repeat, kRepeatAnywhereAfter, &tr->repeat);
    if (status) {
      pthread_mutex_unlock(&tr->lock);
      goto fail;
    }
  }
  /* A graph the run holds is a loop's next step; <= TPU_DEFER_MAX_GRAPHS a run. */
  for (int i = 0, graphs = 0; op->whole_graph && i < tr->num_ops && !status; i++)
    if (tr->ops[i].op == op) status = flush_locked(tr, TPU_DEFER_LOOP);
    else if (tr->ops[i].op->whole_graph && ++graphs == TPU_DEFER_MAX_GRAPHS)
      status = flush_locked(tr, TPU_DEFER_CAP);
  /* An operand whose run value has another dtype or size (a storage read
   * through a view of another dtype): run what is pending first, then read
   * it afresh. Another shape of the same elements is reshaped in the fused
   * module (defer_text.c). */
  for (int p = 0; p < op->num_params && !status; p++) {
    tpu_storage_t* s = params[p].storage;
    int v = s ? tpu_storage_defer_value(s) : -1;
    if (v >= 0 && !tpu_hlo_type_same_elements(&tr->values[v].type, &op->params[p])) {
      status = flush_locked(tr, TPU_DEFER_BARRIER);
      break;
    }
  }
  for (int r = 0; r < op->num_results && !status; r++) {
    /* Results written into a storage the run holds with another type. */
    int v = tpu_storage_defer_value(results[r]);
    if (v >= 0 && !tpu_hlo_type_same_elements(&tr->values[v].type, &op->results[r]))
      status = flush_locked(tr, TPU_DEFER_BARRIER);
  }
  int first_param = tr->num_params;
  for (int p = 0; p < op->num_params && !status; p++) {
    int v = -1;
    status = operand_value(tr, &op->params[p], &params[p], &taken[p], &v);
    if (!status && !GROW(tr->params, tr->num_params, tr->cap_params)) status = oom();
    if (!status) tr->params[tr->num_params++] = v;
  }
  if (!status && !GROW(tr->ops, tr->num_ops, tr->cap_ops)) status = oom();
  if (status) {
    /* Undo this op's partial record: its params only (inputs added for it
     * stay harmlessly unused until the flush). */
    tr->num_params = first_param;
    pthread_mutex_unlock(&tr->lock);
    goto fail;
  }
  int index = tr->num_ops++;
  tr->ops[index] = (op_rec_t){.op = op, .first_param = first_param};
  for (int r = 0; r < op->num_results; r++) {
    int v = new_value(tr, &op->results[r], index, r);
    tpu_storage_t* s = results[r];
    int m = -1;
    if (v >= 0) {
      if (tpu_storage_defer_value(s) >= 0) {
        for (int i = tr->num_members - 1; i >= 0; i--)
          if (tr->members[i].storage == s) {
            m = i;
            break;
          }
      } else {
        m = member_add(tr, s);
      }
    }
    if (v < 0 || m < 0) {
      status = oom();
      break;
    }
    tr->members[m].written = true;
    tpu_storage_set_defer_value(s, v);
  }
  TPU_METRICS_BUMP("defer_ops", 1);
  if (!status) {
    if (tpu_repeat_push(tr->repeat, (uint64_t)(uintptr_t)op) > 0)
      status = flush_locked(tr, TPU_DEFER_LOOP);
    else if (tr->num_ops >= g_max_ops)
      status = flush_locked(tr, TPU_DEFER_CAP);
  } else {
    tpu_status_free(flush_locked(tr, TPU_DEFER_BARRIER));
  }
  pthread_mutex_unlock(&tr->lock);
  if (taken != inline_taken) free(taken);
  return status;
fail:
  for (int p = 0; p < op->num_params; p++)
    if (params[p].owned && !(taken && taken[p])) tpu_buffer_destroy(params[p].buffer);
  if (taken != inline_taken) free(taken);
  return status;
}
