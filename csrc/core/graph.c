#include "graph.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hash.h"
#include "rng.h"
#include "runtime.h"
#include "hlo/builder.h"
#include "hlo/strbuf.h"
#include "lower/ctx_internal.h"
#include "lower/emit.h"

struct tpu_graph_s {
  tpu_hlo_builder_t* b;
  tpu_hlo_value_t* values; /* id -> builder value */
  int num_values, cap_values;
  bool with_rng;
  tpu_hlo_value_t rng_state; /* the generator state, threaded through nodes */
  tpu_status_t broken;       /* first failure: later calls repeat it */
  const tpu_kernel_t* kernels[64]; /* whose functions the module holds */
  int num_kernels;
};

static tpu_hlo_value_t invalid(void) { return (tpu_hlo_value_t){-1}; }

static tpu_status_t oom(void) {
  return tpu_status_oom("building a graph");
}

static bool push_value(tpu_graph_t* g, tpu_hlo_value_t v) {
  if (g->num_values == g->cap_values) {
    int cap = g->cap_values ? 2 * g->cap_values : 64;
    tpu_hlo_value_t* grown = realloc(g->values, sizeof *grown * (size_t)cap);
    if (!grown) return false;
    g->values = grown;
    g->cap_values = cap;
  }
  g->values[g->num_values++] = v;
  return true;
}

tpu_status_t tpu_graph_create(const tpu_hlo_type_t* input_types, int num_inputs, bool with_rng,
                              tpu_graph_t** out_graph) {
  *out_graph = NULL;
  if (num_inputs < 0 || (num_inputs > 0 && !input_types))
    return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT, "graph inputs missing");
  tpu_graph_t* g = calloc(1, sizeof *g);
  if (!g) return oom();
  tpu_status_t s = tpu_hlo_builder_create(&g->b);
  if (s) {
    free(g);
    return s;
  }
  g->with_rng = with_rng;
  g->rng_state = invalid();
  /* Every parameter first (the builder wants them before any op). */
  tpu_hlo_value_t* params = calloc((size_t)num_inputs + 1, sizeof *params);
  if (!params) {
    tpu_graph_destroy(g);
    return oom();
  }
  for (int i = 0; i < num_inputs; i++)
    params[i] = tpu_hlo_arg(g->b, tpu_hlo_type_flat(&input_types[i]), NULL);
  if (with_rng) {
    int64_t two = 2;
    g->rng_state = tpu_hlo_arg(g->b, tpu_hlo_type_make(TPU_DTYPE_INT64, 1, &two), NULL);
  }
  for (int i = 0; i < num_inputs; i++) {
    tpu_hlo_value_t v = tpu_emit_reshape(g->b, params[i], input_types[i].dims, input_types[i].rank);
    if (!push_value(g, v)) {
      free(params);
      tpu_graph_destroy(g);
      return oom();
    }
  }
  free(params);
  *out_graph = g;
  return NULL;
}

void tpu_graph_set_precision(tpu_graph_t* g, tpu_hlo_precision_t precision) {
  if (g) tpu_hlo_builder_set_precision(g->b, precision);
}

void tpu_graph_destroy(tpu_graph_t* g) {
  if (!g) return;
  tpu_hlo_builder_destroy(g->b);
  tpu_status_free(g->broken);
  free(g->values);
  free(g);
}

bool tpu_graph_op_supported(const char* op_name) { return tpu_lowering_find_graph_row(op_name) != NULL; }

bool tpu_graph_op_needs_rng(const char* op_name) {
  const tpu_lowering_t* row = tpu_lowering_find_graph_row(op_name);
  return row && (row->flags & TPU_LOWER_NEEDS_RNG);
}

int tpu_graph_num_values(const tpu_graph_t* g) { return g->num_values; }

tpu_hlo_type_t tpu_graph_value_type(const tpu_graph_t* g, int id) {
  if (id < 0 || id >= g->num_values) return (tpu_hlo_type_t){.dtype = TPU_DTYPE_INVALID};
  return tpu_hlo_value_type(g->b, g->values[id]);
}

/* Keeps the first failure; a graph that failed once stays failed (its
 * builder may hold half a node). Returns a copy for the caller. */
static tpu_status_t fail(tpu_graph_t* g, tpu_status_t s) {
  if (!g->broken)
    g->broken = tpu_status_make(tpu_status_code(s), "%s", tpu_status_message(s));
  return s;
}

static tpu_hlo_value_t value_of(tpu_graph_t* g, int id) {
  return id >= 0 && id < g->num_values ? g->values[id] : invalid();
}

/* A SCALAR argument's constant, in the scalar's own dtype: the lowering
 * converts it (tpu_lower_scalar) exactly as it converts eager's run-time
 * scalar parameter. */
static tpu_hlo_value_t scalar_constant(tpu_hlo_builder_t* b, const tpu_graph_arg_t* a) {
  tpu_hlo_type_t t = tpu_hlo_type_scalar(a->lower.type.dtype);
  switch (a->lower.type.dtype) {
    case TPU_DTYPE_BOOL: return tpu_hlo_constant_bool(b, t, a->i != 0);
    case TPU_DTYPE_COMPLEX64:
    case TPU_DTYPE_COMPLEX128: return tpu_hlo_constant_complex(b, t, a->f, a->f_imag);
    default:
      if (tpu_dtype_is_floating(t.dtype)) return tpu_hlo_constant_float(b, t, a->f);
      return tpu_hlo_constant_int(b, t, a->i);
  }
}

tpu_status_t tpu_graph_add_node(tpu_graph_t* g, const char* op_name, const tpu_graph_arg_t* args,
                                int num_args, const int* values, int num_values,
                                const tpu_hlo_type_t* output_types, int num_outputs,
                                int* out_values) {
  if (g->broken)
    return tpu_status_make(tpu_status_code(g->broken), "%s", tpu_status_message(g->broken));
  const tpu_lowering_t* row = tpu_lowering_find_graph_row(op_name);
  if (!row)
    return fail(g, tpu_status_make(TPU_STATUS_UNIMPLEMENTED, "%s has no lowering", op_name));
  if ((row->flags & TPU_LOWER_NEEDS_RNG) && !g->with_rng)
    return fail(g, tpu_status_make(TPU_STATUS_FAILED_PRECONDITION,
                                   "%s draws random bits but the graph has no generator state",
                                   op_name));
  tpu_hlo_builder_t* b = g->b;
  tpu_lower_arg_t* largs = calloc((size_t)num_args + 1, sizeof *largs);
  tpu_hlo_value_t* arg_values = calloc((size_t)num_args + 1, sizeof *arg_values);
  int* list_offset = calloc((size_t)num_args + 1, sizeof *list_offset);
  tpu_hlo_value_t* list_values = calloc((size_t)num_values + 1, sizeof *list_values);
  tpu_hlo_type_t* list_types = calloc((size_t)num_values + 1, sizeof *list_types);
  tpu_hlo_value_t* outputs = calloc((size_t)num_outputs + 1, sizeof *outputs);
  tpu_status_t s = NULL;
  if (!largs || !arg_values || !list_offset || !list_values || !list_types || !outputs) {
    s = oom();
    goto done;
  }
  for (int k = 0; k < num_values; k++) {
    list_values[k] = value_of(g, values[k]);
    if (list_values[k].id < 0) {
      s = tpu_status_make(TPU_STATUS_INVALID_ARGUMENT, "%s: list value %d is unknown", op_name,
                          values[k]);
      goto done;
    }
    list_types[k] = tpu_hlo_value_type(b, list_values[k]);
  }
  for (int i = 0; i < num_args; i++) {
    const tpu_graph_arg_t* a = &args[i];
    largs[i] = a->lower;
    arg_values[i] = invalid();
    switch (a->lower.kind) {
      case TPU_ARG_TENSOR:
        arg_values[i] = value_of(g, a->value);
        if (arg_values[i].id < 0) {
          s = tpu_status_make(TPU_STATUS_INVALID_ARGUMENT, "%s: argument %d names unknown value %d",
                              op_name, i, a->value);
          goto done;
        }
        largs[i].type = tpu_hlo_value_type(b, arg_values[i]);
        break;
      case TPU_ARG_TENSORS:
        if (a->list_start < 0 || a->list_start + a->lower.num_tensors > num_values) {
          s = tpu_status_make(TPU_STATUS_INVALID_ARGUMENT, "%s: argument %d's list is out of range",
                              op_name, i);
          goto done;
        }
        list_offset[i] = a->list_start;
        break;
      case TPU_ARG_SCALAR:
        largs[i].type = tpu_hlo_type_scalar(a->lower.type.dtype);
        arg_values[i] = scalar_constant(b, a);
        break;
      case TPU_ARG_SCALARS: {
        int64_t n = a->lower.num_tensors;
        largs[i].type = tpu_hlo_type_make(TPU_DTYPE_FLOAT64, 1, &n);
        arg_values[i] = tpu_hlo_constant_dense(b, largs[i].type, a->scalars);
        break;
      }
      default:
        break;
    }
  }
  tpu_lower_ctx_t ctx = {.b = b,
                         .op_name = op_name,
                         .args = largs,
                         .num_args = num_args,
                         .arg_values = arg_values,
                         .list_offset = list_offset,
                         .list_values = list_values,
                         .list_types = list_types,
                         .num_outputs = num_outputs,
                         .output_types = output_types,
                         .outputs = outputs,
                         .rng_state = (row->flags & TPU_LOWER_NEEDS_RNG) ? g->rng_state : invalid()};
  s = tpu_lower_ctx_run(&ctx, row);
  if (s) goto done;
  if (row->flags & TPU_LOWER_NEEDS_RNG) g->rng_state = ctx.rng_state;
  for (int i = 0; i < num_outputs; i++) {
    out_values[i] = g->num_values;
    if (!push_value(g, outputs[i])) {
      s = oom();
      goto done;
    }
  }
done:
  free(largs);
  free(arg_values);
  free(list_offset);
  free(list_values);
  free(list_types);
  free(outputs);
  return s ? fail(g, s) : NULL;
}

tpu_status_t tpu_graph_finish(tpu_graph_t* g, const int* outputs, int num_outputs,
                              char** out_text, size_t* out_len) {
  *out_text = NULL;
  if (g->broken)
    return tpu_status_make(tpu_status_code(g->broken), "%s", tpu_status_message(g->broken));
  int n = num_outputs + (g->with_rng ? 1 : 0);
  tpu_hlo_value_t* results = calloc((size_t)n + 1, sizeof *results);
  if (!results) return oom();
  for (int i = 0; i < num_outputs; i++) {
    tpu_hlo_value_t v = value_of(g, outputs[i]);
    if (v.id < 0) {
      free(results);
      return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT, "graph output %d names unknown value %d",
                             i, outputs[i]);
    }
    tpu_hlo_type_t t = tpu_hlo_value_type(g->b, v);
    int64_t n = tpu_hlo_type_numel(&t);
    /* In its own shape where buffers may be (eager.c fresh_result: why) */
    results[i] = tpu_storage_shapes_free() ? v : tpu_emit_reshape(g->b, v, &n, 1);
  }
  if (g->with_rng) results[num_outputs] = g->rng_state;
  tpu_hlo_return(g->b, results, n);
  free(results);
  return tpu_hlo_builder_finish(g->b, out_text, out_len);
}

tpu_status_t tpu_graph_run(tpu_program_t* program, int device, tpu_storage_t* const* inputs,
                           const tpu_hlo_type_t* input_types, int num_inputs, bool with_rng,
                           tpu_storage_t* const* outputs, int num_outputs) {
  int nargs = num_inputs + (with_rng ? 1 : 0);
  int nres = num_outputs + (with_rng ? 1 : 0);
  if (tpu_program_num_outputs(program) != nres)
    return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT,
                           "the compiled graph returns %d values, the call expects %d",
                           tpu_program_num_outputs(program), nres);
  tpu_buffer_t** args = calloc((size_t)nargs + 1, sizeof *args);
  tpu_buffer_t** results = calloc((size_t)nres + 1, sizeof *results);
  tpu_status_t s = NULL;
  if (!args || !results) {
    s = oom();
    goto done;
  }
  /* buffer_as settles deferred contents and retypes a storage last written
   * as another dtype; the usual case is a borrowed buffer as it is. */
  for (int i = 0; i < num_inputs && !s; i++) {
    int64_t n = tpu_hlo_type_numel(&input_types[i]);
    s = tpu_storage_buffer_as(inputs[i], input_types[i].dtype, &n, 1, &args[i]);
  }
  tpu_storage_t* rng = NULL;
  if (!s && with_rng) {
    int64_t two = 2;
    s = tpu_rng_storage(device, &rng);
    if (!s) s = tpu_storage_buffer_as(rng, TPU_DTYPE_INT64, &two, 1, &args[num_inputs]);
  }
  tpu_runtime_set_op_label("a compiled graph or kernel");
  if (!s) s = tpu_program_execute(program, device, args, nargs, results);
  tpu_runtime_set_op_label(NULL);
  if (s) goto done;
  for (int i = 0; i < num_outputs; i++) tpu_buffer_set_producer(results[i], "a compiled graph or kernel");
  for (int i = 0; i < nres; i++) { /* the outputs, then the generator state */
    tpu_status_t w = tpu_storage_set_buffer(i < num_outputs ? outputs[i] : rng, results[i]);
    results[i] = NULL; /* the storage owns it, even on failure */
    if (w && !s) s = w;
    else tpu_status_free(w);
  }
done:
  if (results)
    for (int i = 0; i < nres; i++) tpu_buffer_destroy(results[i]);
  free(args);
  free(results);
  return s;
}

tpu_status_t tpu_graph_add_kernel(tpu_graph_t* g, const tpu_kernel_t* kernel, const int* args,
                                  int num_args, int* out_values) {
  if (g->broken)
    return tpu_status_make(tpu_status_code(g->broken), "%s", tpu_status_message(g->broken));
  int np = tpu_kernel_num_params(kernel), nr = tpu_kernel_num_results(kernel);
  if (num_args != np)
    return fail(g, tpu_status_make(TPU_STATUS_INVALID_ARGUMENT,
                                   "kernel %s takes %d tensors, got %d", tpu_kernel_entry(kernel),
                                   np, num_args));
  tpu_hlo_value_t in[64], out[64];
  tpu_hlo_type_t types[64];
  if (np > 64 || nr > 64)
    return fail(g, tpu_status_make(TPU_STATUS_INVALID_ARGUMENT, "kernel has too many tensors"));
  for (int i = 0; i < np; i++) {
    in[i] = value_of(g, args[i]);
    tpu_hlo_type_t have = tpu_hlo_value_type(g->b, in[i]), want = tpu_kernel_param(kernel, i);
    if (in[i].id < 0 || !tpu_hlo_type_equal(&have, &want)) {
      char h[128], w[128];
      tpu_hlo_type_print(&have, h, sizeof h);
      tpu_hlo_type_print(&want, w, sizeof w);
      return fail(g, tpu_status_make(TPU_STATUS_INVALID_ARGUMENT,
                                     "kernel argument %d is %s, the kernel declares %s", i, h, w));
    }
  }
  for (int i = 0; i < nr; i++) types[i] = tpu_kernel_result(kernel, i);
  bool added = false;
  for (int i = 0; i < g->num_kernels && !added; i++) added = g->kernels[i] == kernel;
  if (!added) {
    if (g->num_kernels == 64)
      return fail(g, tpu_status_make(TPU_STATUS_RESOURCE_EXHAUSTED, "too many kernels in a graph"));
    g->kernels[g->num_kernels++] = kernel;
    tpu_hlo_add_functions(g->b, tpu_kernel_functions(kernel));
  }
  char attrs[80];
  snprintf(attrs, sizeof attrs, "callee = @%s", tpu_kernel_entry(kernel));
  tpu_hlo_op_multi(g->b, "func.call", in, np, types, nr, attrs, out);
  for (int i = 0; i < nr; i++) {
    out_values[i] = g->num_values;
    if (!push_value(g, out[i])) return fail(g, oom());
  }
  return NULL;
}

/* Replaces the one occurrence of `find` in *text (absent: false). */
static bool replace_once(char** text, size_t* len, const char* find, const char* repl,
                         tpu_status_t* error) {
  char* at = strstr(*text, find);
  if (!at) return false;
  tpu_strbuf_t sb = {0};
  tpu_strbuf_append_n(&sb, *text, (size_t)(at - *text));
  tpu_strbuf_append(&sb, repl);
  tpu_strbuf_append(&sb, at + strlen(find));
  char* next = tpu_strbuf_take(&sb, len);
  if (!next) {
    *error = oom();
    return true;
  }
  free(*text);
  *text = next;
  return true;
}

tpu_status_t tpu_graph_shard_text(const char* text, size_t len, const tpu_hlo_type_t* input_types,
                                  const char* const* shardings, int num_inputs, char** out_text,
                                  size_t* out_len) {
  *out_text = NULL;
  for (int i = 0; shardings && i < num_inputs; i++)
    if (shardings[i] && (strpbrk(shardings[i], "\"\\") || strlen(shardings[i]) > 1000))
      return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT,
                             "the sharding of graph input %d is not a GSPMD sharding: %s", i,
                             shardings[i]);
  char* s = malloc(len + 1);
  if (!s) return oom();
  memcpy(s, text, len);
  s[len] = '\0';
  tpu_status_t error = NULL;
  for (int i = 0; i < num_inputs && !error; i++) {
    char flat[96], shaped[96], find[1200], repl[1200];
    tpu_hlo_type_t f = tpu_hlo_type_flat(&input_types[i]);
    tpu_hlo_type_print(&f, flat, sizeof flat);
    tpu_hlo_type_print(&input_types[i], shaped, sizeof shaped);
    const char* sharding = shardings && shardings[i] ? shardings[i] : "{replicated}";
    /* the signature: "%argI: tensor<N x T>" followed by "," or ")" */
    bool found = false;
    for (int end = 0; end < 2 && !found && !error; end++) {
      char next = end ? ')' : ',';
      snprintf(find, sizeof find, "%%arg%d: %s%c", i, flat, next);
      snprintf(repl, sizeof repl, "%%arg%d: %s {mhlo.sharding = \"%s\"}%c", i, shaped, sharding,
               next);
      found = replace_once(&s, &len, find, repl, &error);
    }
    if (!found && !error) {
      error = tpu_status_make(TPU_STATUS_INVALID_ARGUMENT,
                              "not a graph's text: parameter %d is not %s", i, flat);
      break;
    }
    /* the graph reads each parameter through one reshape to its shape
     * (none when the flat form is the shape) */
    snprintf(find, sizeof find, "\"stablehlo.reshape\"(%%arg%d) : (%s)", i, flat);
    snprintf(repl, sizeof repl, "\"stablehlo.reshape\"(%%arg%d) : (%s)", i, shaped);
    if (!error) replace_once(&s, &len, find, repl, &error);
  }
  if (error) {
    free(s);
    return error;
  }
  *out_text = s;
  *out_len = len;
  return NULL;
}

/* ---- compiled graphs in deferred runs ------------------------------------- */

typedef struct graph_op_s {
  tpu_defer_op_t op;
  uint64_t hash;
  struct graph_op_s* next;
} graph_op_t;

#define GRAPH_OP_BUCKETS 256
static pthread_mutex_t g_graph_ops_lock = PTHREAD_MUTEX_INITIALIZER;
static graph_op_t* g_graph_ops[GRAPH_OP_BUCKETS];

/* A new op for this graph (NULL when out of memory). */
static graph_op_t* graph_op_new(const char* text, size_t len, uint64_t hash,
                                const tpu_hlo_type_t* input_types, int num_inputs,
                                const tpu_hlo_type_t* output_types, int num_outputs,
                                bool with_rng) {
  int np = num_inputs + (with_rng ? 1 : 0), nr = num_outputs + (with_rng ? 1 : 0);
  graph_op_t* g = calloc(1, sizeof *g);
  char* copy = malloc(len + 1);
  tpu_hlo_type_t* params = calloc((size_t)np + 1, sizeof *params);
  tpu_hlo_type_t* results = calloc((size_t)nr + 1, sizeof *results);
  if (!g || !copy || !params || !results) {
    free(g);
    free(copy);
    free(params);
    free(results);
    return NULL;
  }
  memcpy(copy, text, len);
  copy[len] = '\0';
  int64_t two = 2;
  tpu_hlo_type_t state = tpu_hlo_type_make(TPU_DTYPE_INT64, 1, &two);
  for (int i = 0; i < num_inputs; i++) params[i] = tpu_hlo_type_flat(&input_types[i]);
  for (int i = 0; i < num_outputs; i++) /* as tpu_graph_finish returns them */
    results[i] = tpu_storage_shapes_free() ? output_types[i] : tpu_hlo_type_flat(&output_types[i]);
  if (with_rng) {
    params[num_inputs] = state;
    results[num_outputs] = state;
  }
  g->op = (tpu_defer_op_t){.name = "a compiled graph or kernel", .text = copy, .len = len,
                           .num_params = np, .params = params, .num_results = nr,
                           .results = results, .whole_graph = true};
  g->hash = hash;
  return g;
}

tpu_status_t tpu_graph_defer_op(const char* text, size_t len, const tpu_hlo_type_t* input_types,
                                int num_inputs, const tpu_hlo_type_t* output_types,
                                int num_outputs, bool with_rng, const tpu_defer_op_t** out_op) {
  *out_op = NULL;
  /* Kernels' functions follow @main: such a graph runs on its own. */
  const char* first = strstr(text, "func.func");
  if (!first || strstr(first + 1, "func.func")) return NULL;
  uint64_t h = tpu_hash_bytes(text, len);
  pthread_mutex_lock(&g_graph_ops_lock);
  graph_op_t** bucket = &g_graph_ops[h % GRAPH_OP_BUCKETS];
  graph_op_t* g = *bucket;
  while (g && !(g->hash == h && g->op.len == len && memcmp(g->op.text, text, len) == 0))
    g = g->next;
  if (!g) {
    g = graph_op_new(text, len, h, input_types, num_inputs, output_types, num_outputs, with_rng);
    if (g) {
      g->next = *bucket;
      *bucket = g;
    }
  }
  pthread_mutex_unlock(&g_graph_ops_lock);
  if (!g) return oom();
  *out_op = &g->op;
  return NULL;
}

tpu_status_t tpu_graph_record(const tpu_defer_op_t* op, int device, tpu_storage_t* const* inputs,
                              int num_inputs, bool with_rng, tpu_storage_t* const* outputs,
                              int num_outputs) {
  int np = num_inputs + (with_rng ? 1 : 0), nr = num_outputs + (with_rng ? 1 : 0);
  if (op->num_params != np || op->num_results != nr)
    return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT,
                           "the compiled graph takes %d and returns %d values, the call has %d "
                           "and %d",
                           op->num_params, op->num_results, np, nr);
  tpu_defer_operand_t* params = calloc((size_t)np + 1, sizeof *params);
  tpu_storage_t** results = calloc((size_t)nr + 1, sizeof *results);
  tpu_status_t s = NULL;
  if (!params || !results) s = oom();
  tpu_storage_t* rng = NULL;
  if (!s && with_rng) s = tpu_rng_storage(device, &rng);
  if (!s) {
    for (int i = 0; i < num_inputs; i++) params[i] = (tpu_defer_operand_t){.storage = inputs[i]};
    for (int i = 0; i < num_outputs; i++) results[i] = outputs[i];
    if (rng) {
      params[num_inputs] = (tpu_defer_operand_t){.storage = rng};
      results[num_outputs] = rng;
    }
    s = tpu_defer_record(device, op, params, results);
  }
  free(params);
  free(results);
  return s;
}
