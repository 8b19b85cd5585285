/* The text of a deferred run's fused module (see defer_internal.h). */
#include "defer_internal.h"

#include <stdlib.h>
#include <string.h>

#include "hlo/strbuf.h"

/* The op's @main as a private function named @f<index>. */
static void append_function(tpu_strbuf_t* sb, const tpu_defer_op_t* op, int index) {
  static const char kMain[] = "func.func public @main";
  const char* start = strstr(op->text, kMain);
  const char* end = op->text + op->len;
  /* Drop the module's closing brace: the text ends "  }\n}\n". */
  while (end > op->text && (end[-1] == '\n' || end[-1] == ' ')) end--;
  if (end > op->text && end[-1] == '}') end--;
  if (!start || start >= end) return; /* not ours: the compile will say */
  tpu_strbuf_appendf(sb, "  func.func private @f%d", index);
  start += sizeof kMain - 1;
  tpu_strbuf_append_n(sb, start, (size_t)(end - start));
  tpu_strbuf_append(sb, "\n");
}

static void append_value(tpu_strbuf_t* sb, const trace_t* tr, int v) {
  const value_t* val = &tr->values[v];
  if (val->op == VALUE_INPUT) {
    tpu_strbuf_appendf(sb, "%%arg%d", val->index);
    return;
  }
  if (val->op == VALUE_ZEROS) {
    tpu_strbuf_appendf(sb, "%%z%d", v);
    return;
  }
  const op_rec_t* o = &tr->ops[val->op];
  if (o->op->num_results == 1) tpu_strbuf_appendf(sb, "%%c%d", val->op);
  else tpu_strbuf_appendf(sb, "%%c%d#%d", val->op, val->index);
}

/* %z<v> = zeros of the value's type. Bool as a word, empty tensors as
 * no elements, the rest as one element's bytes in hex (a splat; exact
 * for every float and complex type). */
static void append_zeros(tpu_strbuf_t* sb, const trace_t* tr, int v) {
  const tpu_hlo_type_t* type = &tr->values[v].type;
  int64_t numel = tpu_hlo_type_numel(type);
  tpu_strbuf_appendf(sb, "    %%z%d = \"stablehlo.constant\"() {value = dense<", v);
  if (numel == 0) {
  } else if (type->dtype == TPU_DTYPE_BOOL) {
    tpu_strbuf_append(sb, "false");
  } else {
    tpu_strbuf_append(sb, "\"0x");
    tpu_strbuf_append_char(sb, '0', 2 * tpu_dtype_size(type->dtype));
    tpu_strbuf_append(sb, "\"");
  }
  tpu_strbuf_append(sb, "> : ");
  tpu_hlo_type_append(sb, type);
  tpu_strbuf_append(sb, "} : () -> ");
  tpu_hlo_type_append(sb, type);
  tpu_strbuf_append(sb, "\n");
}

/* "%a, %b" for values vs[0..n) of the run, or (as_types) their types. */
static void append_values(tpu_strbuf_t* sb, const trace_t* tr, const int* vs, int n,
                          bool as_types) {
  for (int i = 0; i < n; i++) {
    if (i) tpu_strbuf_append(sb, ", ");
    if (as_types) tpu_hlo_type_append(sb, &tr->values[vs[i]].type);
    else append_value(sb, tr, vs[i]);
  }
}

static void append_types(tpu_strbuf_t* sb, const tpu_hlo_type_t* types, int n) {
  for (int i = 0; i < n; i++) {
    if (i) tpu_strbuf_append(sb, ", ");
    tpu_hlo_type_append(sb, &types[i]);
  }
}

/* The fused module: each distinct op once as a function, @main calls them
 * in recorded order and returns the kept values. */
char* tpu_defer_fused_text(const trace_t* tr, const int* kept, int num_kept, size_t* out_len) {
  tpu_strbuf_t sb = {0};
  const tpu_defer_op_t** distinct = calloc((size_t)tr->num_ops, sizeof *distinct);
  int* fn = calloc((size_t)tr->num_ops, sizeof *fn);
  if (!distinct || !fn) {
    free(distinct);
    free(fn);
    return NULL;
  }
  int nd = 0;
  tpu_strbuf_append(&sb, "module @torchtpu_fused {\n");
  for (int i = 0; i < tr->num_ops; i++) {
    int j = 0;
    while (j < nd && distinct[j] != tr->ops[i].op) j++;
    if (j == nd) {
      distinct[nd++] = tr->ops[i].op;
      append_function(&sb, tr->ops[i].op, j);
    }
    fn[i] = j;
  }
  tpu_strbuf_append(&sb, "  func.func public @main(");
  for (int i = 0; i < tr->num_values; i++) {
    if (tr->values[i].op != VALUE_INPUT) continue;
    if (tr->values[i].index) tpu_strbuf_append(&sb, ", ");
    tpu_strbuf_appendf(&sb, "%%arg%d: ", tr->values[i].index);
    tpu_hlo_type_append(&sb, &tr->values[i].type);
  }
  tpu_strbuf_append(&sb, ") -> (");
  append_values(&sb, tr, kept, num_kept, true);
  tpu_strbuf_append(&sb, ") {\n");
  for (int v = 0; v < tr->num_values; v++)
    if (tr->values[v].op == VALUE_ZEROS) append_zeros(&sb, tr, v);
  for (int i = 0; i < tr->num_ops; i++) {
    const op_rec_t* o = &tr->ops[i];
    const tpu_defer_op_t* op = o->op;
    const int* vs = &tr->params[o->first_param];
    /* A value of another shape than the op declares (a result kept in its
     * own shape, read by an op that takes the storage flat): reshaped,
     * which XLA does for free. The recorder allows only equal elements. */
    for (int p = 0; p < op->num_params; p++)
      if (!tpu_hlo_type_equal(&tr->values[vs[p]].type, &op->params[p])) {
        tpu_strbuf_appendf(&sb, "    %%r%d_%d = \"stablehlo.reshape\"(", i, p);
        append_value(&sb, tr, vs[p]);
        tpu_strbuf_append(&sb, ") : (");
        tpu_hlo_type_append(&sb, &tr->values[vs[p]].type);
        tpu_strbuf_append(&sb, ") -> ");
        tpu_hlo_type_append(&sb, &op->params[p]);
        tpu_strbuf_append(&sb, "\n");
      }
    tpu_strbuf_append(&sb, "    ");
    if (op->num_results == 1) tpu_strbuf_appendf(&sb, "%%c%d = ", i);
    else if (op->num_results > 1) tpu_strbuf_appendf(&sb, "%%c%d:%d = ", i, op->num_results);
    tpu_strbuf_append(&sb, "\"func.call\"(");
    for (int p = 0; p < op->num_params; p++) {
      if (p) tpu_strbuf_append(&sb, ", ");
      if (tpu_hlo_type_equal(&tr->values[vs[p]].type, &op->params[p])) append_value(&sb, tr, vs[p]);
      else tpu_strbuf_appendf(&sb, "%%r%d_%d", i, p);
    }
    tpu_strbuf_appendf(&sb, ") {callee = @f%d} : (", fn[i]);
    append_types(&sb, op->params, op->num_params);
    tpu_strbuf_append(&sb, ") -> (");
    append_types(&sb, op->results, op->num_results);
    tpu_strbuf_append(&sb, ")\n");
  }
  tpu_strbuf_append(&sb, "    \"func.return\"(");
  append_values(&sb, tr, kept, num_kept, false);
  tpu_strbuf_append(&sb, ") : (");
  append_values(&sb, tr, kept, num_kept, true);
  tpu_strbuf_append(&sb, ") -> ()\n  }\n}\n");
  free(distinct);
  free(fn);
  char* text = tpu_strbuf_take(&sb, out_len);
  tpu_strbuf_free(&sb);
  return text;
}

