#include "eager.h"
#include "recompile.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arena.h"
#include "defer.h"
#include "hash.h"
#include "launcher.h"
#include "lower/ctx_internal.h"
#include "lower/emit.h"
#include "metrics.h"
#include "program.h"
#include "rng.h"
#include "runtime.h"

/* ---- cache --------------------------------------------------------------- */

struct tpu_eager_entry_s {
  void* user; /* the caller's per-entry data (see tpu_eager_entry_user) */
  void (*user_free)(void*);
  uint8_t* key;
  size_t key_len;
  uint64_t hash;
  struct tpu_eager_entry_s* next;
  bool fallback;
  char* fallback_reason;
  tpu_program_t* program;
  int num_outputs;
  tpu_eager_output_t* outputs;
  int num_written;   /* program results 0..num_written-1: new flat storages */
  int* written_slot; /* which slot each of those replaces */
  /* Slots the program never reads (a whole overwrite: fill_, zero_, copy_,
   * out= of the full size): contents that were lost or failed are no
   * input of it, so such an op repairs the storage. */
  bool* slot_unread;
  /* Then one result per fresh output, in output order; then, with
   * needs_rng, the new generator state. */
  bool needs_rng;
  /* The module, kept for DeferAndFuse (runs are fused from their ops'
   * modules) and for compiling on first Strict use after a program cache
   * clear. defer_op points into these; its parameter and result counts
   * size Strict's argument lists too. */
  char* text;
  size_t text_len;
  unsigned program_generation;
  tpu_hlo_type_t* param_types;
  tpu_hlo_type_t* result_types;
  tpu_defer_op_t defer_op;
  char* name;
};

/* Lookups (every op) read the chains without the lock: an entry is
 * complete before insert publishes it (release), its key and next never
 * change, and entries are freed only by tpu_eager_cache_clear, which no
 * op may race (the entry a lookup returns is used after it anyway).
 * Inserts and clears take the lock. */
#define BUCKETS 4096
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static tpu_eager_entry_t* _Atomic g_buckets[BUCKETS];
static size_t g_count;


static tpu_eager_entry_t* find(const tpu_eager_key_t* k, uint64_t h) {
  for (tpu_eager_entry_t* e = atomic_load_explicit(&g_buckets[h % BUCKETS], memory_order_acquire);
       e; e = e->next)
    if (e->hash == h && e->key_len == k->len && memcmp(e->key, k->data, k->len) == 0) return e;
  return NULL;
}

tpu_eager_entry_t* tpu_eager_lookup(const tpu_eager_call_t* call) {
  uint8_t stack_key[1024];
  tpu_eager_key_t k;
  tpu_status_t status = tpu_eager_call_key(call, stack_key, sizeof stack_key, &k);
  tpu_eager_entry_t* e = status ? NULL : find(&k, tpu_hash_bytes(k.data, k.len));
  tpu_eager_key_free(&k);
  if (status) { /* out of memory: a miss, and the compile will say */
    tpu_status_free(status);
    return NULL;
  }
  if (e) TPU_METRICS_BUMP("eager_cache_hits", 1);
  else TPU_METRICS_BUMP("eager_cache_misses", 1);
  return e;
}

static void entry_free(tpu_eager_entry_t* e) {
  if (!e) return;
  if (e->user_free) e->user_free(e->user);
  free(e->key);
  free(e->fallback_reason);
  free(e->outputs);
  free(e->written_slot);
  free(e->slot_unread);
  free(e->text);
  free(e->name);
  free(e->param_types);
  free(e->result_types);
  free(e);
}

/* The entry's program, compiled on first need (and again after a program
 * cache clear). */
static tpu_status_t entry_program(tpu_eager_entry_t* e, tpu_program_t** out) {
  unsigned generation = tpu_program_cache_generation();
  if (!e->program || e->program_generation != generation) {
    tpu_program_t* p = NULL;
    const char* label = tpu_runtime_op_label();
    tpu_runtime_set_op_label(e->name); /* names the compile in a trace */
    tpu_status_t s = tpu_program_get(e->text, e->text_len, &p);
    tpu_runtime_set_op_label(label);
    TPU_RETURN_IF_ERROR(s);
    e->program = p;
    e->program_generation = generation;
  }
  *out = e->program;
  return NULL;
}

/* Inserts e under the call's key (or returns the entry already there). */
static tpu_eager_entry_t* insert(const tpu_eager_call_t* call, tpu_eager_entry_t* e) {
  tpu_eager_key_t k;
  tpu_status_t status = tpu_eager_call_key(call, NULL, 0, &k);
  if (status) {
    tpu_status_free(status);
    tpu_eager_key_free(&k);
    return e; /* uncached but usable */
  }
  e->key = k.data; /* malloc'd (no buffer given): the entry's now */
  e->key_len = k.len;
  e->hash = tpu_hash_bytes(k.data, k.len);
  pthread_mutex_lock(&g_lock);
  tpu_eager_entry_t* existing = find(&k, e->hash);
  if (!existing) {
    _Atomic(tpu_eager_entry_t*)* bucket = &g_buckets[e->hash % BUCKETS];
    e->next = atomic_load_explicit(bucket, memory_order_relaxed);
    atomic_store_explicit(bucket, e, memory_order_release);
    g_count++;
  }
  pthread_mutex_unlock(&g_lock);
  if (existing) {
    entry_free(e);
    return existing;
  }
  return e;
}

tpu_eager_entry_t* tpu_eager_mark_fallback(const tpu_eager_call_t* call, const char* why) {
  tpu_eager_entry_t* e = calloc(1, sizeof *e);
  if (!e) return NULL;
  e->fallback = true;
  e->fallback_reason = strdup(why ? why : "");
  return insert(call, e);
}

bool tpu_eager_entry_is_fallback(const tpu_eager_entry_t* e) { return e->fallback; }
const char* tpu_eager_entry_fallback_reason(const tpu_eager_entry_t* e) {
  return e->fallback_reason ? e->fallback_reason : "";
}
int tpu_eager_entry_num_outputs(const tpu_eager_entry_t* e) { return e->num_outputs; }
const tpu_eager_output_t* tpu_eager_entry_output(const tpu_eager_entry_t* e, int i) {
  return &e->outputs[i];
}

void* tpu_eager_entry_user(const tpu_eager_entry_t* e) {
  return __atomic_load_n(&((tpu_eager_entry_t*)e)->user, __ATOMIC_ACQUIRE);
}

void* tpu_eager_entry_set_user(tpu_eager_entry_t* e, void* user, void (*user_free)(void*)) {
  pthread_mutex_lock(&g_lock);
  void* kept = e->user;
  if (!kept) {
    e->user_free = user_free;
    __atomic_store_n(&e->user, user, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&g_lock);
  if (!kept) return user;
  /* Another thread set it first: readers may hold that one; keep it. */
  if (user && user_free) user_free(user);
  return kept;
}

size_t tpu_eager_cache_size(void) {
  pthread_mutex_lock(&g_lock);
  size_t n = g_count;
  pthread_mutex_unlock(&g_lock);
  return n;
}

void tpu_eager_cache_clear(void) {
  /* Pending runs and fused programs refer to entries: settle them first. */
  tpu_defer_cache_clear();
  pthread_mutex_lock(&g_lock);
  for (size_t b = 0; b < BUCKETS; b++) {
    tpu_eager_entry_t* e = atomic_exchange_explicit(&g_buckets[b], NULL, memory_order_relaxed);
    while (e) {
      tpu_eager_entry_t* next = e->next;
      entry_free(e);
      e = next;
    }
  }
  g_count = 0;
  pthread_mutex_unlock(&g_lock);
}

/* ---- building the program ------------------------------------------------ */

/* Scalars and scalar lists are program parameters (new values never
 * recompile), after the storages. */
static bool is_runtime_scalar(const tpu_eager_arg_t* a) {
  return a->lower.kind == TPU_ARG_SCALAR || a->lower.kind == TPU_ARG_SCALARS;
}

static const tpu_eager_tensor_t* output_target(const tpu_eager_call_t* call,
                                               const tpu_eager_output_t* o) {
  const tpu_eager_arg_t* a = &call->args[o->alias_arg];
  if (a->lower.kind == TPU_ARG_TENSORS) return &call->list[a->list_start + o->alias_list];
  return &a->tensor;
}

/* TORCHTPU_LOG=recompiles: which part of the key changed since the op's
 * last compile. */
static void log_recompile(const tpu_eager_call_t* call) {
  const char* parts[TPU_EAGER_CALL_MAX_PARTS];
  int n = 0;
  char* texts = tpu_eager_call_describe(call, parts, &n);
  char* change = texts ? tpu_recompile_note(call->op_name, parts, n) : NULL;
  if (change) fprintf(stderr, "torchtpu: recompile %s: %s\n", call->op_name, change);
  free(change);
  free(texts);
}

/* ---- compiling a call ---------------------------------------------------- */

/* One compile's working state. Its arrays live in `arena` (the slots keep
 * their own), freed once when the compile ends, whatever happened; only
 * `e`, the entry being filled, and e's fields outlive it: the cache keeps
 * them. */
typedef struct {
  const tpu_eager_call_t* call;
  const tpu_eager_output_t* outputs; /* as the caller planned them */
  int num_outputs;
  tpu_arena_t arena;
  tpu_eager_slots_t slots; /* the call's storages, computed once */
  int* arg_slot;  /* per argument: its tensor's slot, -1 for other kinds */
  int* list_slot; /* per list tensor: its slot */
  tpu_eager_entry_t* e;
  tpu_hlo_builder_t* b;
  tpu_hlo_value_t* params;      /* @main's, in order: slot i's is params[i] */
  int num_params;
  tpu_hlo_value_t* slot_values; /* each storage's latest flat value */
  /* The lowering's operands and outputs, laid out as tpu_lower_ctx_t's. */
  tpu_hlo_value_t* arg_values;
  int* list_offset;
  tpu_hlo_value_t* list_values;
  tpu_hlo_type_t* list_types;
  tpu_hlo_type_t* out_types;
  tpu_hlo_value_t* out_values;
  tpu_hlo_value_t rng;       /* the generator state parameter, or id -1 */
  tpu_hlo_value_t rng_after; /* the state as the lowering left it */
  tpu_hlo_value_t* results;
  int num_results;
} compile_t;

/* Room for n zeroed elements of *ptr's type, from the compile's arena. */
#define SCRATCH(c, n, ptr) \
  tpu_arena_alloc(&(c)->arena, (size_t)(n), sizeof *(ptr), (void**)&(ptr))

/* The call's storage slots, in the key's order. Each tensor's slot is kept,
 * so reading operands and writing outputs never search for it again. */
static tpu_status_t compile_collect_slots(compile_t* c) {
  TPU_RETURN_IF_ERROR(SCRATCH(c, c->call->num_args + 1, c->arg_slot));
  TPU_RETURN_IF_ERROR(SCRATCH(c, c->call->num_list + 1, c->list_slot));
  return tpu_eager_call_slots(c->call, &c->slots, c->arg_slot, c->list_slot);
}

/* The slot an aliased output writes (-1: it names no tensor). */
static int output_slot(const compile_t* c, const tpu_eager_output_t* o) {
  const tpu_eager_arg_t* a = &c->call->args[o->alias_arg];
  if (a->lower.kind == TPU_ARG_TENSORS) return c->list_slot[a->list_start + o->alias_list];
  return c->arg_slot[o->alias_arg];
}

/* The entry being filled, with its per-output and per-slot arrays. */
static tpu_status_t compile_new_entry(compile_t* c) {
  tpu_eager_entry_t* e = c->e = calloc(1, sizeof *e);
  if (!e) return tpu_status_oom(NULL);
  e->outputs = calloc((size_t)c->num_outputs + 1, sizeof *e->outputs);
  e->written_slot = calloc((size_t)c->slots.count + 1, sizeof *e->written_slot);
  if (!e->outputs || !e->written_slot) return tpu_status_oom(NULL);
  return NULL;
}

/* Parameters: flat storages, then scalars, then the generator state. */
static tpu_status_t compile_declare_params(compile_t* c, const tpu_lowering_t* row) {
  const tpu_eager_call_t* call = c->call;
  const tpu_eager_slots_t* s = &c->slots;
  TPU_RETURN_IF_ERROR(SCRATCH(c, s->count + call->num_args + 2, c->params));
  TPU_RETURN_IF_ERROR(SCRATCH(c, s->count + 1, c->slot_values));
  TPU_RETURN_IF_ERROR(SCRATCH(c, call->num_args + 1, c->arg_values));
  TPU_RETURN_IF_ERROR(tpu_hlo_builder_create(&c->b));
  tpu_hlo_builder_set_precision(c->b, call->precision);
  for (int i = 0; i < s->count; i++)
    c->slot_values[i] = c->params[c->num_params++] =
        tpu_hlo_arg(c->b, tpu_hlo_type_make(s->dtypes[i], 1, &s->numels[i]), NULL);
  for (int i = 0; i < call->num_args; i++)
    if (is_runtime_scalar(&call->args[i]))
      c->arg_values[i] = c->params[c->num_params++] =
          tpu_hlo_arg(c->b, call->args[i].lower.type, NULL);
  c->rng = (tpu_hlo_value_t){-1};
  if (row->flags & TPU_LOWER_NEEDS_RNG) {
    int64_t two = 2;
    c->rng = c->params[c->num_params++] =
        tpu_hlo_arg(c->b, tpu_hlo_type_make(TPU_DTYPE_INT64, 1, &two), NULL);
  }
  return NULL;
}

/* Operands: every tensor read through its view of its storage. */
static tpu_status_t compile_read_operands(compile_t* c) {
  const tpu_eager_call_t* call = c->call;
  TPU_RETURN_IF_ERROR(SCRATCH(c, call->num_args + 1, c->list_offset));
  TPU_RETURN_IF_ERROR(SCRATCH(c, call->num_list + 1, c->list_values));
  TPU_RETURN_IF_ERROR(SCRATCH(c, call->num_list + 1, c->list_types));
  for (int i = 0; i < call->num_args; i++) {
    const tpu_eager_arg_t* a = &call->args[i];
    if (a->lower.kind == TPU_ARG_TENSOR) {
      c->arg_values[i] = tpu_view_emit_read(c->b, c->slot_values[c->arg_slot[i]], &a->tensor.view);
    } else if (a->lower.kind == TPU_ARG_TENSORS) {
      c->list_offset[i] = a->list_start;
      for (int j = 0; j < a->lower.num_tensors; j++) {
        int k = a->list_start + j;
        const tpu_view_t* v = &call->list[k].view;
        c->list_values[k] = tpu_view_emit_read(c->b, c->slot_values[c->list_slot[k]], v);
        c->list_types[k] = tpu_hlo_type_make(v->dtype, v->rank, v->sizes);
      }
    }
  }
  return NULL;
}

/* The entry's outputs (an aliased one takes the geometry of the tensor it
 * writes) and the types the lowering must produce. */
static tpu_status_t compile_plan_outputs(compile_t* c) {
  TPU_RETURN_IF_ERROR(SCRATCH(c, c->num_outputs + 1, c->out_types));
  TPU_RETURN_IF_ERROR(SCRATCH(c, c->num_outputs + 1, c->out_values));
  for (int o = 0; o < c->num_outputs; o++) {
    tpu_eager_output_t* out = &c->e->outputs[o];
    *out = c->outputs[o];
    if (out->alias_arg >= 0) {
      const tpu_eager_tensor_t* t = output_target(c->call, out);
      out->view = t->view;
      out->storage_numel = t->storage_numel;
    }
    c->out_types[o] = tpu_hlo_type_make(out->view.dtype, out->view.rank, out->view.sizes);
  }
  return NULL;
}

/* Runs the row's lowering over the operands; UNIMPLEMENTED means it
 * declined the call. */
static tpu_status_t compile_lower_row(compile_t* c, const tpu_lowering_t* row) {
  const tpu_eager_call_t* call = c->call;
  tpu_lower_arg_t* lower_args = NULL;
  TPU_RETURN_IF_ERROR(SCRATCH(c, call->num_args + 1, lower_args));
  for (int i = 0; i < call->num_args; i++) lower_args[i] = call->args[i].lower;
  tpu_lower_ctx_t ctx = {
      .b = c->b, .op_name = call->op_name, .args = lower_args, .num_args = call->num_args,
      .arg_values = c->arg_values, .list_offset = c->list_offset, .list_values = c->list_values,
      .list_types = c->list_types, .num_outputs = c->num_outputs, .output_types = c->out_types,
      .outputs = c->out_values, .rng_state = c->rng};
  tpu_status_t status = tpu_lower_ctx_run(&ctx, row);
  c->rng_after = ctx.rng_state;
  return status;
}

/* A fresh output's whole storage: the value when its view covers it (in
 * its own shape where tpu_storage_shapes_free: a flattened result makes
 * XLA write it in one flat loop, scalar code over a broadcast such as
 * x * w, 2x slower), else written into zeros of the flat storage. */
static tpu_hlo_value_t fresh_result(tpu_hlo_builder_t* b, const tpu_eager_output_t* out,
                                    tpu_hlo_value_t value) {
  int64_t n = out->storage_numel;
  if (tpu_view_is_contiguous(&out->view) && out->view.offset == 0 &&
      tpu_view_numel(&out->view) == n)
    return out->view.rank > 1 && tpu_storage_shapes_free() ? value
                                                            : tpu_emit_reshape(b, value, &n, 1);
  tpu_hlo_type_t flat_type = tpu_hlo_type_make(out->view.dtype, 1, &n);
  return tpu_view_emit_write(b, tpu_emit_const_like(b, &flat_type, 0), &out->view, value);
}

/* Results: each written storage's new flat value (aliased outputs write
 * through their views, in order), each fresh output's storage, then the
 * new generator state. Also which storages the program never reads. */
static tpu_status_t compile_collect_results(compile_t* c) {
  tpu_eager_entry_t* e = c->e;
  const tpu_eager_slots_t* s = &c->slots;
  bool* written = NULL;
  TPU_RETURN_IF_ERROR(SCRATCH(c, s->count + 1, written));
  TPU_RETURN_IF_ERROR(SCRATCH(c, s->count + c->num_outputs + 2, c->results));
  for (int o = 0; o < c->num_outputs; o++) {
    int slot = c->outputs[o].alias_arg < 0 ? -1 : output_slot(c, &c->outputs[o]);
    if (slot < 0) continue;
    const tpu_eager_tensor_t* t = output_target(c->call, &c->outputs[o]);
    c->slot_values[slot] =
        tpu_view_emit_write(c->b, c->slot_values[slot], &t->view, c->out_values[o]);
    written[slot] = true;
  }
  for (int i = 0; i < s->count; i++)
    if (written[i]) {
      e->written_slot[e->num_written++] = i;
      c->results[c->num_results++] = c->slot_values[i];
    }
  for (int o = 0; o < c->num_outputs; o++)
    if (c->outputs[o].alias_arg < 0)
      c->results[c->num_results++] = fresh_result(c->b, &e->outputs[o], c->out_values[o]);
  if (c->rng.id >= 0) {
    c->results[c->num_results++] = c->rng_after;
    e->needs_rng = true;
  }
  tpu_hlo_return(c->b, c->results, c->num_results);
  e->slot_unread = calloc((size_t)s->count + 1, sizeof *e->slot_unread);
  if (!e->slot_unread) return tpu_status_oom(NULL);
  for (int i = 0; i < s->count; i++) e->slot_unread[i] = !tpu_hlo_value_used(c->b, c->params[i]);
  return NULL;
}

/* Fills e->defer_op: the module's parameter and result types, as the
 * builder declared them. */
static tpu_status_t describe_for_defer(compile_t* c) {
  tpu_eager_entry_t* e = c->e;
  e->param_types = calloc((size_t)c->num_params + 1, sizeof *e->param_types);
  e->result_types = calloc((size_t)c->num_results + 1, sizeof *e->result_types);
  e->name = strdup(c->call->op_name);
  if (!e->param_types || !e->result_types || !e->name) return tpu_status_oom(NULL);
  for (int p = 0; p < c->num_params; p++)
    e->param_types[p] = tpu_hlo_value_type(c->b, c->params[p]);
  for (int r = 0; r < c->num_results; r++)
    e->result_types[r] = tpu_hlo_value_type(c->b, c->results[r]);
  e->defer_op = (tpu_defer_op_t){.name = e->name, .text = e->text, .len = e->text_len,
                                 .num_params = c->num_params, .params = e->param_types,
                                 .num_results = c->num_results, .results = e->result_types};
  return NULL;
}

/* The module's text, its description for DeferAndFuse and, for Strict and
 * Debug (which run it now), its executable, so compile errors come from
 * here. A deferred op is only compiled if it ever runs alone. */
static tpu_status_t compile_program(compile_t* c) {
  tpu_eager_entry_t* e = c->e;
  tpu_status_t status = tpu_hlo_builder_finish(c->b, &e->text, &e->text_len);
  if (!status) status = describe_for_defer(c);
  if (!status && !c->call->defer) {
    tpu_program_t* p = NULL;
    status = entry_program(e, &p);
  }
  if (status) status = tpu_status_annotate(status, "lowering %s: ", c->call->op_name);
  return status;
}

tpu_status_t tpu_eager_compile(const tpu_eager_call_t* call, const tpu_eager_output_t* outputs,
                               int num_outputs, tpu_eager_entry_t** out_entry) {
  const tpu_lowering_t* row = tpu_lowering_find_row(call->op_name);
  if (!row) {
    *out_entry = tpu_eager_mark_fallback(call, "no lowering");
    return NULL;
  }
  if (tpu_recompile_logging()) log_recompile(call);
  compile_t c = {.call = call, .outputs = outputs, .num_outputs = num_outputs};
  tpu_arena_init(&c.arena, 0);
  tpu_status_t status = compile_collect_slots(&c);
  if (!status && c.slots.conflict) {
    *out_entry = tpu_eager_mark_fallback(call, "a storage viewed with two dtypes");
    goto done;
  }
  if (!status) status = compile_new_entry(&c);
  if (!status) status = compile_declare_params(&c, row);
  if (!status) status = compile_read_operands(&c);
  if (!status) status = compile_plan_outputs(&c);
  if (!status) {
    status = compile_lower_row(&c, row);
    if (tpu_status_code(status) == TPU_STATUS_UNIMPLEMENTED) {
      /* The lowering declined this call: remember, and run it on the CPU. */
      *out_entry = tpu_eager_mark_fallback(call, tpu_status_message(status));
      tpu_status_free(status);
      status = NULL;
      goto done;
    }
  }
  if (!status) status = compile_collect_results(&c);
  if (!status) status = compile_program(&c);
  if (!status) {
    c.e->num_outputs = num_outputs;
    *out_entry = insert(call, c.e);
    c.e = NULL; /* the cache's now (or freed by insert, a twin already there) */
  }
done:
  tpu_hlo_builder_destroy(c.b);
  entry_free(c.e);
  tpu_eager_slots_free(&c.slots);
  tpu_arena_free(&c.arena);
  return status;
}

/* ---- execution ----------------------------------------------------------- */

/* A device buffer of zeros: for storages never written (PyTorch's empty),
 * made on the device instead of uploading zeros. */
#define ZEROS_CACHE 64
typedef struct {
  tpu_dtype_t dtype;
  int64_t n;
  unsigned generation;
  tpu_program_t* program;
} zeros_slot_t;
static pthread_mutex_t g_zeros_lock = PTHREAD_MUTEX_INITIALIZER;
static zeros_slot_t g_zeros[ZEROS_CACHE];

static tpu_status_t zeros_buffer_unlabeled(int device, tpu_dtype_t dtype, int64_t n,
                                           tpu_buffer_t** out) {
  /* Storages made by empty() and then filled (zeros_like = empty + zero_)
   * come by the dozen per training step: remember the program per shape
   * instead of building its text each time. */
  unsigned generation = tpu_program_cache_generation();
  zeros_slot_t* slot = &g_zeros[((uint64_t)n * 31 + (uint64_t)dtype) % ZEROS_CACHE];
  pthread_mutex_lock(&g_zeros_lock);
  tpu_program_t* cached = slot->program && slot->dtype == dtype && slot->n == n &&
                                  slot->generation == generation
                              ? slot->program
                              : NULL;
  pthread_mutex_unlock(&g_zeros_lock);
  if (cached) return tpu_program_execute(cached, device, NULL, 0, out);
  tpu_hlo_builder_t* b = NULL;
  TPU_RETURN_IF_ERROR(tpu_hlo_builder_create(&b));
  tpu_hlo_type_t t = tpu_hlo_type_make(dtype, 1, &n);
  tpu_hlo_value_t z = tpu_emit_const_like(b, &t, 0);
  tpu_hlo_return(b, &z, 1);
  char* text = NULL;
  size_t len = 0;
  tpu_status_t s = tpu_hlo_builder_finish(b, &text, &len);
  tpu_hlo_builder_destroy(b);
  TPU_RETURN_IF_ERROR(s);
  tpu_program_t* p = NULL;
  s = tpu_program_get(text, len, &p);
  free(text);
  TPU_RETURN_IF_ERROR(s);
  pthread_mutex_lock(&g_zeros_lock);
  *slot = (zeros_slot_t){.dtype = dtype, .n = n, .generation = generation, .program = p};
  pthread_mutex_unlock(&g_zeros_lock);
  return tpu_program_execute(p, device, NULL, 0, out);
}

/* Named in errors and traces as the zero fill it is, unless an op is. */
static tpu_status_t zeros_buffer(int device, tpu_dtype_t dtype, int64_t n, tpu_buffer_t** out) {
  const char* label = tpu_runtime_op_label();
  if (!label) tpu_runtime_set_op_label("a zero fill");
  tpu_status_t s = zeros_buffer_unlabeled(device, dtype, n, out);
  tpu_runtime_set_op_label(label);
  return s;
}

/* The storage's buffer as flat [n] of dtype. `unread`: the program only
 * overwrites it, so contents that were lost or are known failed give way
 * to zeros (a whole overwrite repairs); lost ones it reads raise. */
static tpu_status_t flat_buffer(tpu_storage_t* storage, int device, tpu_dtype_t dtype, int64_t n,
                                bool unread, tpu_buffer_t** out) {
  /* Contents a deferred run is still computing: run it first. */
  TPU_RETURN_IF_ERROR(tpu_storage_settle(storage));
  tpu_buffer_t* current = tpu_storage_buffer(storage);
  bool fits = (size_t)n * tpu_dtype_size(dtype) == tpu_storage_nbytes(storage);
  bool lost = tpu_storage_is_lost(storage);
  bool failed = unread && (lost || (current && tpu_buffer_poll_failed(current)));
  if (fits && (failed || (!current && !lost))) {
    tpu_buffer_t* z = NULL;
    TPU_RETURN_IF_ERROR(zeros_buffer(device, dtype, n, &z));
    TPU_RETURN_IF_ERROR(tpu_storage_set_buffer(storage, z));
    if (failed) TPU_METRICS_BUMP("failed_contents_overwritten", 1);
  }
  return tpu_storage_buffer_as(storage, dtype, &n, 1, out);
}

/* Rank-0 scalar buffers by (device, dtype, value): programs never donate
 * their arguments, so one upload of alpha=1 or lr=1e-3 serves every call.
 * Direct-mapped; a collision just uploads again. */
#define SCALAR_CACHE 256
typedef struct {
  _Atomic bool used; /* set (release) once the fields below are final */
  int device;
  tpu_dtype_t dtype;
  uint8_t bytes[16];
  tpu_buffer_t* buffer;
} scalar_slot_t;
static pthread_mutex_t g_scalar_lock = PTHREAD_MUTEX_INITIALIZER; /* fills */
static scalar_slot_t g_scalars[SCALAR_CACHE];

/* A borrowed buffer holding the scalar. A filled slot never changes and
 * lives as long as the process, so hits read it without the lock. */
static tpu_status_t scalar_buffer(int device, tpu_dtype_t dtype, const uint8_t* bytes,
                                  tpu_buffer_t** out_owned_or_null, tpu_buffer_t** out) {
  size_t n = tpu_dtype_size(dtype);
  uint64_t h = tpu_hash_bytes(bytes, n) ^ ((uint64_t)dtype * 0x9E3779B97F4A7C15ull) ^ (uint64_t)device;
  scalar_slot_t* slot = &g_scalars[h % SCALAR_CACHE];
  *out_owned_or_null = NULL;
  if (atomic_load_explicit(&slot->used, memory_order_acquire) && slot->device == device &&
      slot->dtype == dtype && memcmp(slot->bytes, bytes, n) == 0) {
    *out = slot->buffer;
    return NULL;
  }
  tpu_buffer_t* b = NULL;
  TPU_RETURN_IF_ERROR(
      tpu_buffer_from_host(tpu_runtime_client(), device, bytes, dtype, NULL, 0, NULL, &b));
  /* Not cached when the slot is taken: the caller owns and frees it. */
  pthread_mutex_lock(&g_scalar_lock);
  if (!atomic_load_explicit(&slot->used, memory_order_relaxed)) {
    slot->device = device;
    slot->dtype = dtype;
    memcpy(slot->bytes, bytes, n);
    slot->buffer = b;
    atomic_store_explicit(&slot->used, true, memory_order_release);
  } else {
    *out_owned_or_null = b;
  }
  pthread_mutex_unlock(&g_scalar_lock);
  *out = b;
  return NULL;
}

/* The buffer of one run-time scalar argument: a cached upload (borrowed)
 * or a new one the caller owns (*owned set). */
static tpu_status_t scalar_arg(const tpu_eager_call_t* call, const tpu_eager_arg_t* a,
                               tpu_buffer_t** out, tpu_buffer_t** owned) {
  *owned = NULL;
  if (a->lower.kind == TPU_ARG_SCALARS) {
    int64_t n = a->lower.num_tensors;
    TPU_RETURN_IF_ERROR(tpu_buffer_from_host(tpu_runtime_client(), call->device, a->scalars,
                                             TPU_DTYPE_FLOAT64, &n, 1, NULL, owned));
    *out = *owned;
    return NULL;
  }
  return scalar_buffer(call->device, a->lower.type.dtype, a->scalar, owned, out);
}

/* DeferAndFuse: the call joins the device's run instead of executing. */
static tpu_status_t record_deferred(tpu_eager_entry_t* e, const tpu_eager_call_t* call,
                                    const tpu_eager_slots_t* s, tpu_storage_t* const* fresh) {
  const tpu_defer_op_t* op = &e->defer_op;
  enum { INLINE = 32 };
  tpu_defer_operand_t inline_params[INLINE];
  tpu_storage_t* inline_results[INLINE];
  bool small = op->num_params < INLINE && op->num_results < INLINE;
  tpu_defer_operand_t* params =
      small ? inline_params : calloc((size_t)op->num_params + 1, sizeof *params);
  tpu_storage_t** results = small ? inline_results : calloc((size_t)op->num_results + 1, sizeof *results);
  tpu_status_t status = NULL;
  int k = 0;
  if (!params || !results) {
    status = tpu_status_oom(NULL);
    goto done;
  }
  tpu_storage_t* rng = NULL;
  if (e->needs_rng) status = tpu_rng_storage(call->device, &rng);
  /* Lost or failed contents not in the run that the op only overwrites:
   * zeros, as in Strict. Storages never written are the run's to fill
   * (defer.c makes their zeros inside the fused program). */
  for (int i = 0; i < s->count && !status; i++) {
    tpu_storage_t* st = s->storages[i];
    bool unread = e->slot_unread && e->slot_unread[i];
    if (tpu_storage_defer_value(st) < 0 && unread && (tpu_storage_buffer(st) || tpu_storage_is_lost(st))) {
      tpu_buffer_t* ignored = NULL;
      status = flat_buffer(st, call->device, s->dtypes[i], s->numels[i], unread, &ignored);
    }
    params[k++] = (tpu_defer_operand_t){.storage = st};
  }
  for (int i = 0; i < call->num_args && !status; i++) {
    const tpu_eager_arg_t* a = &call->args[i];
    if (!is_runtime_scalar(a)) continue;
    tpu_buffer_t *buffer = NULL, *owned = NULL;
    status = scalar_arg(call, a, &buffer, &owned);
    if (!status) params[k++] = (tpu_defer_operand_t){.buffer = buffer, .owned = owned != NULL};
  }
  if (!status && rng) params[k++] = (tpu_defer_operand_t){.storage = rng};
  if (status) {
    for (int i = 0; i < k; i++)
      if (params[i].owned) tpu_buffer_destroy(params[i].buffer);
    goto done;
  }
  int r = 0;
  for (int w = 0; w < e->num_written; w++) results[r++] = s->storages[e->written_slot[w]];
  for (int o = 0; o < e->num_outputs; o++)
    if (e->outputs[o].alias_arg < 0) results[r++] = fresh[o];
  if (rng) results[r++] = rng;
  status = tpu_defer_record(call->device, op, params, results);
done:
  if (!small) {
    free(params);
    free(results);
  }
  return status;
}

tpu_status_t tpu_eager_execute(tpu_eager_entry_t* e, const tpu_eager_call_t* call,
                               tpu_storage_t* const* fresh) {
  if (e->fallback)
    return tpu_status_make(TPU_STATUS_FAILED_PRECONDITION, "%s runs on the CPU fallback",
                           call->op_name);
  for (int o = 0; o < e->num_outputs; o++)
    if (e->outputs[o].alias_arg < 0 && !fresh[o])
      return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT,
                             "%s: fresh output %d has no storage", call->op_name, o);
  tpu_eager_slots_t s;
  tpu_status_t status = tpu_eager_call_slots(call, &s, NULL, NULL);
  if (!status && call->defer) {
    status = record_deferred(e, call, &s, fresh);
    if (status) status = tpu_status_annotate(status, "deferring %s: ", call->op_name);
  }
  if (status || call->defer) {
    tpu_eager_slots_free(&s);
    return status;
  }
  int nargs = e->defer_op.num_params, nres = e->defer_op.num_results;
  /* Small calls (nearly all) keep their lists on the stack. */
  enum { INLINE = 32 };
  tpu_buffer_t* inline_args[INLINE];
  tpu_buffer_t* inline_owned[INLINE];
  tpu_buffer_t* inline_results[INLINE];
  bool small = nargs < INLINE && nres < INLINE;
  tpu_buffer_t** args = small ? inline_args : calloc((size_t)nargs + 1, sizeof *args);
  tpu_buffer_t** owned = small ? inline_owned : calloc((size_t)nargs + 1, sizeof *owned);
  tpu_buffer_t** results = small ? inline_results : calloc((size_t)nres + 1, sizeof *results);
  /* Only the results are read before written (the cleanup below); args and
   * owned are filled in order up to k and nowned. */
  if (small) memset(inline_results, 0, sizeof *inline_results * (size_t)nres);
  tpu_program_t* program = NULL;
  tpu_storage_t* rng = NULL;
  bool rng_locked = false;
  int k = 0, nowned = 0;
  if (!args || !owned || !results) {
    status = tpu_status_oom(NULL);
    goto done;
  }
  status = entry_program(e, &program);
  if (status) status = tpu_status_annotate(status, "lowering %s: ", call->op_name);
  for (int i = 0; i < s.count && !status; i++)
    status = flat_buffer(s.storages[i], call->device, s.dtypes[i], s.numels[i],
                         e->slot_unread && e->slot_unread[i], &args[k++]);
  for (int i = 0; i < call->num_args && !status; i++) {
    const tpu_eager_arg_t* a = &call->args[i];
    if (!is_runtime_scalar(a)) continue;
    status = scalar_arg(call, a, &args[k++], &owned[nowned]);
    if (owned[nowned]) nowned++;
  }
  if (!status && e->needs_rng) {
    status = tpu_rng_storage(call->device, &rng);
    if (!status) {
      /* Held through execution so concurrent RNG ops serialise. */
      tpu_rng_lock();
      rng_locked = true;
      int64_t two = 2;
      status = tpu_storage_buffer_as(rng, TPU_DTYPE_INT64, &two, 1, &args[k++]);
    }
  }
  if (!status) {
    tpu_runtime_set_op_label(call->op_name);
    status = call->synchronous
                 ? tpu_program_execute_sync(program, call->device, args, k, results)
                 : tpu_launcher_execute(program, call->device, args, k, results, call->op_name);
    if (status) status = tpu_status_annotate(status, "running %s: ", call->op_name);
    tpu_runtime_set_op_label(NULL);
    for (int r = 0; !status && r < nres; r++) tpu_buffer_set_producer(results[r], call->op_name);
  }
  if (!status && rng) {
    status = tpu_storage_set_buffer(rng, results[nres - 1]);
    results[nres - 1] = NULL;
  }
  if (rng_locked) tpu_rng_unlock();
  if (status) goto done;
  for (int w = 0; w < e->num_written && !status; w++) {
    status = tpu_storage_set_buffer(s.storages[e->written_slot[w]], results[w]);
    results[w] = NULL;
  }
  int r = e->num_written;
  for (int o = 0; o < e->num_outputs && !status; o++) {
    if (e->outputs[o].alias_arg >= 0) continue;
    status = tpu_storage_set_buffer(fresh[o], results[r]);
    results[r++] = NULL;
  }
done:
  for (int i = 0; i < nres && results; i++) tpu_buffer_destroy(results[i]);
  for (int i = 0; i < nowned; i++) tpu_buffer_destroy(owned[i]);
  if (!small) {
    free(args);
    free(owned);
    free(results);
  }
  tpu_eager_slots_free(&s);
  return status;
}
