/* The lowering table: every family's rows, searched by ATen base name.
 * Each family lives in its own file (pointwise.c, reduce.c, ...) and
 * exports one array; adding a family means adding one line here. */
#include <string.h>

#include "families.h"
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

size_t tpu_lowering_base_name(const char* op_name, const char** out_start) {
  const char* s = strstr(op_name, "::");
  s = s ? s + 2 : op_name;
  size_t n = strcspn(s, ".");
  if (n > 1 && s[n - 1] == '_' && !(n > 2 && s[n - 2] == '_')) n--;
  *out_start = s;
  return n;
}

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
