/* The lowering table: every family's rows, searched by ATen base name.
 * Each family lives in its own file (pointwise.c, reduce.c, ...) and
 * exports one array; adding a family means adding one line here. */
#include <stdlib.h>
#include <string.h>

#include "families.h"
#include "ctx_internal.h"
#include "lowering.h"

typedef struct {
  const tpu_lowering_t* rows;
  const size_t* count;
} family_t;

static const family_t kFamilies[] = {
#define TPU_FAMILY(name) {tpu_lowerings_##name, &tpu_lowerings_##name##_count},
    TPU_LOWERING_FAMILIES
#undef TPU_FAMILY
};

/* Rows replaced by tpu_lowering_override_for_testing (a handful at most). */
#define MAX_OVERRIDES 8
static tpu_lowering_t g_overrides[MAX_OVERRIDES];
static char g_override_names[MAX_OVERRIDES][64];
static size_t g_num_overrides;

static const tpu_lowering_t* find_in_table(const char* name, size_t n) {
  for (size_t f = 0; f < sizeof kFamilies / sizeof kFamilies[0]; f++)
    for (size_t r = 0; r < *kFamilies[f].count; r++) {
      const tpu_lowering_t* row = &kFamilies[f].rows[r];
      if (strlen(row->name) == n && memcmp(row->name, name, n) == 0) return row;
    }
  return NULL;
}

const tpu_lowering_t* tpu_lowering_find_graph_row(const char* op_name) {
  const char* name;
  size_t n = tpu_lowering_base_name(op_name, &name);
  for (size_t i = 0; i < g_num_overrides; i++)
    if (strlen(g_override_names[i]) == n && memcmp(g_override_names[i], name, n) == 0)
      return &g_overrides[i];
  return find_in_table(name, n);
}

const tpu_lowering_t* tpu_lowering_find_row(const char* op_name) {
  const tpu_lowering_t* row = tpu_lowering_find_graph_row(op_name);
  return row && !(row->flags & TPU_LOWER_GRAPH_ONLY) ? row : NULL;
}

/* "!invalid_program": a lowering whose module the builder accepts and the
 * compiler rejects (an add whose declared result type is wrong), so tests
 * can see how a compile error inside a run is reported. */
static tpu_status_t lower_invalid_program(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_type_t out = tpu_lower_output_type(ctx, 0);
  tpu_hlo_type_t wrong = out;
  wrong.rank = 1;
  wrong.dims[0] = 7; /* never the operand's shape in the tests */
  tpu_hlo_value_t x = tpu_lower_tensor(ctx, 0);
  tpu_hlo_value_t xs[2] = {x, x};
  tpu_hlo_value_t bad = tpu_hlo_op(b, "stablehlo.add", xs, 2, wrong, NULL);
  int64_t n = 1;
  for (int i = 0; i < out.rank; i++) n *= out.dims[i];
  tpu_hlo_value_t fixed = tpu_hlo_op(b, "stablehlo.slice", &bad, 1,
                                     tpu_hlo_type_make(out.dtype, 1, &n),
                                     "start_indices = array<i64: 0>, limit_indices = "
                                     "array<i64: 1>, strides = array<i64: 1>");
  tpu_lower_set_output(ctx, 0, tpu_hlo_op(b, "stablehlo.reshape", &fixed, 1, out, NULL));
  return NULL;
}

bool tpu_lowering_override_for_testing(const char* op, const char* with) {
  if (!op) {
    g_num_overrides = 0;
    return true;
  }
  const char *name, *other;
  size_t n = tpu_lowering_base_name(op, &name), m = tpu_lowering_base_name(with, &other);
  const tpu_lowering_t* target = find_in_table(name, n);
  static const tpu_lowering_t kInvalid = {.name = "!invalid_program", .fn = lower_invalid_program};
  const tpu_lowering_t* source =
      strcmp(with, "!invalid_program") == 0 ? &kInvalid : find_in_table(other, m);
  if (!target || !source || n >= sizeof g_override_names[0] || g_num_overrides == MAX_OVERRIDES)
    return false;
  memcpy(g_override_names[g_num_overrides], name, n);
  g_override_names[g_num_overrides][n] = '\0';
  g_overrides[g_num_overrides] = *target;
  g_overrides[g_num_overrides].name = g_override_names[g_num_overrides];
  g_overrides[g_num_overrides].fn = source->fn;
  g_overrides[g_num_overrides].data = source->data;
  g_num_overrides++;
  return true;
}

tpu_lower_fn_t tpu_lowering_find(const char* op_name) {
  const tpu_lowering_t* row = tpu_lowering_find_row(op_name);
  return row ? row->fn : NULL;
}

size_t tpu_lowering_count(void) {
  size_t n = 0;
  for (size_t f = 0; f < sizeof kFamilies / sizeof kFamilies[0]; f++)
    n += *kFamilies[f].count;
  return n;
}

const tpu_lowering_t* tpu_lowering_at(size_t i) {
  for (size_t f = 0; f < sizeof kFamilies / sizeof kFamilies[0]; f++) {
    if (i < *kFamilies[f].count) return &kFamilies[f].rows[i];
    i -= *kFamilies[f].count;
  }
  return NULL;
}


tpu_status_t tpu_lower_program_plain(const char* op_name, const tpu_lower_arg_t* args,
                                     int num_args, const tpu_hlo_type_t* list_types,
                                     const tpu_hlo_type_t* output_types, int num_outputs,
                                     char** out_text, size_t* out_len) {
  const tpu_lowering_t* row = tpu_lowering_find_graph_row(op_name);
  if (!row)
    return tpu_status_make(TPU_STATUS_UNIMPLEMENTED, "%s has no lowering", op_name);
  tpu_hlo_builder_t* b = NULL;
  TPU_RETURN_IF_ERROR(tpu_hlo_builder_create(&b));
  int num_list = 0;
  for (int i = 0; i < num_args; i++)
    if (args[i].kind == TPU_ARG_TENSORS) num_list += args[i].num_tensors;
  tpu_hlo_value_t* arg_values = calloc((size_t)num_args + 1, sizeof *arg_values);
  int* list_offset = calloc((size_t)num_args + 1, sizeof *list_offset);
  tpu_hlo_value_t* list_values = calloc((size_t)num_list + 1, sizeof *list_values);
  tpu_hlo_value_t* outputs = calloc((size_t)num_outputs + 1, sizeof *outputs);
  tpu_status_t s = NULL;
  if (!arg_values || !list_offset || !list_values || !outputs) {
    s = tpu_status_oom(NULL);
    goto done;
  }
  /* Parameters: tensors (and list tensors) in order, then scalars, then rng. */
  int k = 0;
  for (int i = 0; i < num_args; i++) {
    arg_values[i] = (tpu_hlo_value_t){-1};
    if (args[i].kind == TPU_ARG_TENSOR) arg_values[i] = tpu_hlo_arg(b, args[i].type, NULL);
    if (args[i].kind == TPU_ARG_TENSORS) {
      list_offset[i] = k;
      for (int j = 0; j < args[i].num_tensors; j++, k++)
        list_values[k] = tpu_hlo_arg(b, list_types[k], NULL);
    }
  }
  for (int i = 0; i < num_args; i++)
    if (args[i].kind == TPU_ARG_SCALAR || args[i].kind == TPU_ARG_SCALARS)
      arg_values[i] = tpu_hlo_arg(b, args[i].type, NULL);
  tpu_lower_ctx_t ctx = {
      .b = b, .op_name = op_name, .args = args, .num_args = num_args,
      .arg_values = arg_values, .list_offset = list_offset, .list_values = list_values,
      .list_types = list_types, .num_outputs = num_outputs, .output_types = output_types,
      .outputs = outputs, .rng_state = (tpu_hlo_value_t){-1}};
  if (row->flags & TPU_LOWER_NEEDS_RNG) {
    /* Generator state: two 64-bit words, the last parameter. */
    int64_t two = 2;
    ctx.rng_state = tpu_hlo_arg(b, tpu_hlo_type_make(TPU_DTYPE_INT64, 1, &two), NULL);
  }
  s = tpu_lower_ctx_run(&ctx, row);
  if (!s) {
    tpu_hlo_return(b, outputs, num_outputs);
    s = tpu_hlo_builder_finish(b, out_text, out_len);
  }
done:
  free(arg_values);
  free(list_offset);
  free(list_values);
  free(outputs);
  tpu_hlo_builder_destroy(b);
  return s;
}
