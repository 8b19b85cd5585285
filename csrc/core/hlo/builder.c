#include "builder.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "builder_internal.h"
#include "strbuf.h"

/* A value id is (builder tag << kTagShift) | index into the value table, so
 * a value from another builder is caught (unless the 8-bit tags collide). */
enum { kTagShift = 23, kMaxValues = 1 << kTagShift, kTagCount = 255 };

typedef enum { VALUE_ARG, VALUE_RESULT, VALUE_BLOCK_ARG } value_kind_t;

typedef struct {
  tpu_hlo_type_t type;
  int block;  /* defining block; 0 is @main's body, never closed */
  value_kind_t kind;
  int number; /* N of %argN, %N or %bN */
  int result; /* i of %N#i, or -1 for an op's only result */
  /* Liveness (tpu_hlo_value_used): `used` marks a use that counts as such
   * directly (return, block return, region ops and the ops inside them);
   * a plain op of @main's body, `def_op`, counts its operands as used only
   * if one of its results is (its operands are operand_list[first,
   * first + count) of the builder). */
  bool used;
  int def_op; /* index into the builder's plain ops, or -1 */
} value_info_t;

typedef struct {
  int first, count; /* into operand_list */
} plain_op_t;

/* One level of nesting: @main's body (frames[0]) or a region op whose
 * regions are being built. Ops go to the innermost frame's text. */
typedef struct {
  tpu_strbuf_t text; /* @main's body, or this op's "{...}, {...}" so far */
  int indent;        /* spaces before the ops of the open block */
  int block;         /* the open block's id, -1 between blocks */
  /* Region ops only, printed when the op ends: */
  char* name;
  tpu_strbuf_t operands; /* "%0, %2" */
  tpu_strbuf_t operand_types;
  char* attrs; /* NULL or the attribute-dict body */
  tpu_hlo_type_t* result_types;
  int num_results;
  int number; /* the %N its results get, reserved at begin so the printed
                 numbers ascend in text order */
  int num_regions;
} frame_t;

struct tpu_hlo_builder_s {
  int tag;
  tpu_status_t error; /* the first error, sticky */
  value_info_t* values;
  int num_values, cap_values;
  bool* block_open; /* by block id */
  int num_blocks, cap_blocks;
  frame_t* frames;
  int num_frames, cap_frames;
  tpu_strbuf_t signature;   /* "%arg0: tensor<f32>, ..." */
  tpu_strbuf_t result_sig;  /* set by tpu_hlo_return */
  tpu_strbuf_t functions;   /* extra func.func text after @main */
  /* Result counts of every region_op_begin call not yet ended, kept even
   * after an error so region_op_end can always fill its out_results. */
  int* region_results;
  int num_region_results, cap_region_results;
  int num_args, next_result, next_block_arg;
  bool has_ops, returned;
  plain_op_t* plain_ops; /* liveness of @main's body (see value_info_t) */
  int num_plain_ops, cap_plain_ops;
  int* operand_list;     /* value indices */
  int num_operand_list, cap_operand_list;
  tpu_hlo_precision_t precision; /* of dot_general / convolution */
};

static const tpu_hlo_value_t kInvalid = {-1};

/* ---- errors and small helpers ------------------------------------------- */

void tpu_hlo_fail_(tpu_hlo_builder_t* b, tpu_status_code_t code,
                   const char* fmt, ...) {
  if (!b || b->error) return;
  va_list args;
  va_start(args, fmt);
  b->error = tpu_status_makev(code, fmt, args);
  va_end(args);
}

bool tpu_hlo_ok_(const tpu_hlo_builder_t* b) { return b && !b->error; }

/* Grows an array to hold `need` items; returns it (possibly moved), or NULL
 * with the error recorded and the old array untouched. */
static void* grow(tpu_hlo_builder_t* b, void* items, int* cap, int need,
                  size_t item_size) {
  if (need <= *cap) return items;
  int new_cap = *cap ? *cap * 2 : 16;
  while (new_cap < need) new_cap *= 2;
  void* grown = realloc(items, (size_t)new_cap * item_size);
  if (!grown) {
    tpu_hlo_fail_(b, TPU_STATUS_RESOURCE_EXHAUSTED,
                  "HLO builder: out of host memory");
    return NULL;
  }
  *cap = new_cap;
  return grown;
}

static char* dup_or_null(tpu_hlo_builder_t* b, const char* text) {
  if (!text || !*text) return NULL;
  char* copy = strdup(text);
  if (!copy) {
    tpu_hlo_fail_(b, TPU_STATUS_RESOURCE_EXHAUSTED,
                  "HLO builder: out of host memory");
  }
  return copy;
}

/* A strbuf that failed to grow becomes the builder's error. */
static bool sb_ok(tpu_hlo_builder_t* b, const tpu_strbuf_t* sb) {
  if (sb->failed) {
    tpu_hlo_fail_(b, TPU_STATUS_RESOURCE_EXHAUSTED,
                  "HLO builder: out of host memory while printing");
  }
  return !sb->failed;
}

/* ---- checking types ----------------------------------------------------- */

bool tpu_hlo_check_type_(tpu_hlo_builder_t* b, const tpu_hlo_type_t* type,
                         const char* what) {
  if (!tpu_dtype_is_valid(type->dtype)) {
    tpu_hlo_fail_(b, TPU_STATUS_INVALID_ARGUMENT,
                  "%s: invalid dtype %d (not a tpu_dtype_t)", what,
                  (int)type->dtype);
    return false;
  }
  if (type->rank < 0 || type->rank > TPU_HLO_MAX_RANK) {
    tpu_hlo_fail_(b, TPU_STATUS_INVALID_ARGUMENT,
                  "%s: rank %d is outside [0, TPU_HLO_MAX_RANK=%d]", what,
                  type->rank, TPU_HLO_MAX_RANK);
    return false;
  }
  for (int i = 0; i < type->rank; i++) {
    if (type->dims[i] < 0) {
      tpu_hlo_fail_(b, TPU_STATUS_INVALID_ARGUMENT,
                    "%s: dimension %d is %lld (dynamic or negative sizes are "
                    "not supported)",
                    what, i, (long long)type->dims[i]);
      return false;
    }
  }
  return true;
}

int64_t tpu_hlo_numel_(tpu_hlo_builder_t* b, const tpu_hlo_type_t* type) {
  /* Limit so that the hex text (2 chars a byte) still fits comfortably. */
  const int64_t limit = INT64_MAX / 64;
  int64_t n = 1;
  for (int i = 0; i < type->rank; i++) {
    if (type->dims[i] != 0 && n > limit / type->dims[i]) {
      tpu_hlo_fail_(b, TPU_STATUS_OUT_OF_RANGE,
                    "HLO builder: element count of a %d-d shape overflows",
                    type->rank);
      return -1;
    }
    n *= type->dims[i];
  }
  return n;
}

/* ---- values ------------------------------------------------------------- */

static tpu_hlo_value_t add_value(tpu_hlo_builder_t* b,
                                 const tpu_hlo_type_t* type, int block,
                                 value_kind_t kind, int number, int result) {
  if (b->num_values >= kMaxValues) {
    tpu_hlo_fail_(b, TPU_STATUS_RESOURCE_EXHAUSTED,
                  "HLO builder: more than %d values", kMaxValues);
    return kInvalid;
  }
  value_info_t* values = grow(b, b->values, &b->cap_values,
                              b->num_values + 1, sizeof *values);
  if (!values) return kInvalid;
  b->values = values;
  value_info_t* v = &b->values[b->num_values];
  v->type = *type;
  v->block = block;
  v->kind = kind;
  v->number = number;
  v->result = result;
  v->used = false;
  v->def_op = -1;
  tpu_hlo_value_t handle = {(b->tag << kTagShift) | b->num_values};
  b->num_values++;
  return handle;
}

/* The table entry of a value this builder made, or NULL. */
static const value_info_t* find_value(const tpu_hlo_builder_t* b,
                                      tpu_hlo_value_t value) {
  if (!b || value.id < 0 || (value.id >> kTagShift) != b->tag) return NULL;
  int index = value.id & (kMaxValues - 1);
  return index < b->num_values ? &b->values[index] : NULL;
}

static void append_value_name(tpu_strbuf_t* sb, const value_info_t* v) {
  switch (v->kind) {
    case VALUE_ARG:
      tpu_strbuf_appendf(sb, "%%arg%d", v->number);
      break;
    case VALUE_BLOCK_ARG:
      tpu_strbuf_appendf(sb, "%%b%d", v->number);
      break;
    case VALUE_RESULT:
      if (v->result < 0) {
        tpu_strbuf_appendf(sb, "%%%d", v->number);
      } else {
        tpu_strbuf_appendf(sb, "%%%d#%d", v->number, v->result);
      }
      break;
  }
}

/* Checks that operands belong to b and are visible here, and prints
 * "%a, %b" into names and their types into types. `plain`: the index of
 * the plain @main op these are operands of (their use counts only if the
 * op's results do), or -1: a direct use. */
static bool use_operands(tpu_hlo_builder_t* b, const char* what,
                         const tpu_hlo_value_t* operands, int n,
                         tpu_strbuf_t* names, tpu_strbuf_t* types, int plain) {
  if (n < 0 || (n > 0 && !operands)) {
    tpu_hlo_fail_(b, TPU_STATUS_INVALID_ARGUMENT,
                  "%s: %d operands with a %s array", what, n,
                  operands ? "non-NULL" : "NULL");
    return false;
  }
  for (int i = 0; i < n; i++) {
    const value_info_t* v = find_value(b, operands[i]);
    if (!v) {
      tpu_hlo_fail_(b, TPU_STATUS_INVALID_ARGUMENT,
                    "%s: operand %d (id %d) is %s", what, i, operands[i].id,
                    operands[i].id < 0 ? "an invalid value"
                                       : "not a value of this builder");
      return false;
    }
    if (!b->block_open[v->block]) {
      tpu_strbuf_t name = {0};
      append_value_name(&name, v);
      tpu_hlo_fail_(b, TPU_STATUS_INVALID_ARGUMENT,
                    "%s: operand %d (%s) was defined inside a block that has "
                    "ended, so it is not visible here",
                    what, i, name.data ? name.data : "?");
      tpu_strbuf_free(&name);
      return false;
    }
    if (i > 0) {
      tpu_strbuf_append(names, ", ");
      tpu_strbuf_append(types, ", ");
    }
    int index = (int)(v - b->values);
    if (plain < 0) {
      b->values[index].used = true;
    } else {
      int* list = grow(b, b->operand_list, &b->cap_operand_list, b->num_operand_list + 1,
                       sizeof *list);
      if (!list) return false;
      b->operand_list = list;
      b->operand_list[b->num_operand_list++] = index;
      b->plain_ops[plain].count++;
    }
    append_value_name(names, v);
    tpu_hlo_type_append(types, &v->type);
  }
  return sb_ok(b, names) && sb_ok(b, types);
}

bool tpu_hlo_value_used(const tpu_hlo_builder_t* b, tpu_hlo_value_t value) {
  const value_info_t* v = find_value(b, value);
  if (!v) return false;
  if (v->used) return true;
  /* Live values: the direct uses, and the operands of plain ops with a
   * live result, walking back (operands precede their users, so one pass
   * from the last value down settles it). */
  bool* live = calloc((size_t)b->num_values + 1, sizeof *live);
  if (!live) return true; /* unknown: say used */
  for (int i = 0; i < b->num_values; i++) live[i] = b->values[i].used;
  bool* op_live = calloc((size_t)b->num_plain_ops + 1, sizeof *op_live);
  if (!op_live) {
    free(live);
    return true;
  }
  for (int i = b->num_values - 1; i >= 0; i--) {
    int op = b->values[i].def_op;
    if (!live[i] || op < 0 || op_live[op]) continue;
    op_live[op] = true;
    const plain_op_t* p = &b->plain_ops[op];
    for (int k = 0; k < p->count; k++) live[b->operand_list[p->first + k]] = true;
  }
  bool used = live[v - b->values];
  free(live);
  free(op_live);
  return used;
}

tpu_hlo_type_t tpu_hlo_value_type(const tpu_hlo_builder_t* b,
                                  tpu_hlo_value_t value) {
  const value_info_t* v = find_value(b, value);
  if (v) return v->type;
  tpu_hlo_type_t invalid;
  memset(&invalid, 0, sizeof invalid);
  invalid.dtype = TPU_DTYPE_INVALID;
  return invalid;
}

void tpu_hlo_value_name(const tpu_hlo_builder_t* b, tpu_hlo_value_t value, char* out,
                        size_t cap) {
  if (!cap) return;
  out[0] = '\0';
  const value_info_t* v = find_value(b, value);
  if (!v) return;
  tpu_strbuf_t sb = {0};
  append_value_name(&sb, v);
  if (sb.data) snprintf(out, cap, "%s", sb.data);
  tpu_strbuf_free(&sb);
}

/* ---- builder lifetime --------------------------------------------------- */

static void frame_free(frame_t* f) {
  tpu_strbuf_free(&f->text);
  tpu_strbuf_free(&f->operands);
  tpu_strbuf_free(&f->operand_types);
  free(f->name);
  free(f->attrs);
  free(f->result_types);
}

tpu_status_t tpu_hlo_builder_create(tpu_hlo_builder_t** out_builder) {
  static atomic_int next_tag = 0;
  if (!out_builder) {
    return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT,
                           "tpu_hlo_builder_create: out_builder is NULL");
  }
  *out_builder = NULL;
  tpu_hlo_builder_t* b = calloc(1, sizeof *b);
  if (!b) goto oom;
  b->tag = 1 + atomic_fetch_add(&next_tag, 1) % kTagCount;
  b->frames = calloc(4, sizeof *b->frames);
  b->block_open = calloc(16, sizeof *b->block_open);
  if (!b->frames || !b->block_open) goto oom;
  b->cap_frames = 4;
  b->cap_blocks = 16;
  b->num_frames = 1; /* @main's body */
  b->frames[0].indent = 4;
  b->frames[0].block = 0;
  b->num_blocks = 1;
  b->block_open[0] = true;
  *out_builder = b;
  return NULL;
oom:
  if (b) {
    free(b->frames);
    free(b->block_open);
    free(b);
  }
  return tpu_status_make(TPU_STATUS_RESOURCE_EXHAUSTED,
                         "tpu_hlo_builder_create: out of host memory");
}

void tpu_hlo_builder_set_precision(tpu_hlo_builder_t* b, tpu_hlo_precision_t precision) {
  if (b) b->precision = precision;
}

/* attrs with the builder's precision_config appended when `name` is an op
 * that multiplies (one attribute for both operands: PyTorch has one knob).
 * Returns attrs itself when nothing is added, else `buf`. */
static const char* with_precision(tpu_hlo_builder_t* b, const char* name,
                                  const char* attrs, char* buf, size_t cap) {
  static const char* const kNames[] = {"", "DEFAULT", "HIGH", "HIGHEST"};
  if (b->precision <= TPU_HLO_PRECISION_UNSET || b->precision > TPU_HLO_PRECISION_HIGHEST ||
      (strcmp(name, "stablehlo.dot_general") != 0 && strcmp(name, "stablehlo.convolution") != 0))
    return attrs;
  const char* p = kNames[b->precision];
  int n = snprintf(buf, cap,
                   "%s%sprecision_config = [#stablehlo<precision %s>, #stablehlo<precision %s>]",
                   attrs ? attrs : "", attrs && *attrs ? ", " : "", p, p);
  if (n < 0 || (size_t)n >= cap)
    tpu_hlo_fail_(b, TPU_STATUS_INTERNAL, "HLO builder: %s attributes too long", name);
  return buf;
}

void tpu_hlo_builder_destroy(tpu_hlo_builder_t* b) {
  if (!b) return;
  for (int i = 0; i < b->num_frames; i++) frame_free(&b->frames[i]);
  free(b->frames);
  free(b->values);
  free(b->block_open);
  free(b->region_results);
  free(b->plain_ops);
  free(b->operand_list);
  tpu_strbuf_free(&b->signature);
  tpu_strbuf_free(&b->result_sig);
  tpu_strbuf_free(&b->functions);
  tpu_status_free(b->error);
  free(b);
}

/* ---- emitting ops ------------------------------------------------------- */

/* The frame new ops go to, or NULL (error recorded) if ops cannot go
 * anywhere now. */
static frame_t* op_frame(tpu_hlo_builder_t* b, const char* what) {
  if (b->returned) {
    tpu_hlo_fail_(b, TPU_STATUS_FAILED_PRECONDITION,
                  "%s: @main has already returned", what);
    return NULL;
  }
  frame_t* f = &b->frames[b->num_frames - 1];
  if (f->block < 0) {
    tpu_hlo_fail_(b, TPU_STATUS_FAILED_PRECONDITION,
                  "%s: region op %s has no open block (call "
                  "tpu_hlo_block_begin or tpu_hlo_region_op_end)",
                  what, f->name);
    return NULL;
  }
  return f;
}

static bool check_op_name(tpu_hlo_builder_t* b, const char* name) {
  bool valid = name && *name;
  for (const char* p = name; valid && *p; p++) {
    valid = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
            (*p >= '0' && *p <= '9') || *p == '_' || *p == '.' || *p == '$' ||
            *p == '-';
  }
  if (!valid) {
    tpu_hlo_fail_(b, TPU_STATUS_INVALID_ARGUMENT,
                  "HLO builder: invalid op name \"%s\"", name ? name : "(null)");
  }
  return valid;
}

static bool check_results(tpu_hlo_builder_t* b, const char* what,
                          const tpu_hlo_type_t* types, int n) {
  if (n < 0 || (n > 0 && !types)) {
    tpu_hlo_fail_(b, TPU_STATUS_INVALID_ARGUMENT,
                  "%s: %d results with a %s type array", what, n,
                  types ? "non-NULL" : "NULL");
    return false;
  }
  for (int i = 0; i < n; i++) {
    if (!tpu_hlo_check_type_(b, &types[i], what)) return false;
  }
  return true;
}

static void append_result_types(tpu_strbuf_t* sb, const tpu_hlo_type_t* types,
                                int n) {
  if (n != 1) tpu_strbuf_append(sb, "(");
  for (int i = 0; i < n; i++) {
    if (i > 0) tpu_strbuf_append(sb, ", ");
    tpu_hlo_type_append(sb, &types[i]);
  }
  if (n != 1) tpu_strbuf_append(sb, ")");
}

/* Prints one complete op into frame f and registers its results in f's
 * open block. `regions` is the "{...}, {...}" text or NULL. */
static void finish_op(tpu_hlo_builder_t* b, frame_t* f, int number,
                      const char* name,
                      const char* operand_names, const char* operand_types,
                      const char* regions, const char* attrs,
                      const tpu_hlo_type_t* result_types, int num_results,
                      tpu_hlo_value_t* out_results) {
  tpu_strbuf_t* sb = &f->text;
  tpu_strbuf_append_char(sb, ' ', (size_t)f->indent);
  if (num_results == 1) tpu_strbuf_appendf(sb, "%%%d = ", number);
  if (num_results > 1) tpu_strbuf_appendf(sb, "%%%d:%d = ", number, num_results);
  tpu_strbuf_appendf(sb, "\"%s\"(%s)", name, operand_names);
  if (regions) tpu_strbuf_appendf(sb, " (%s)", regions);
  if (attrs && *attrs) tpu_strbuf_appendf(sb, " {%s}", attrs);
  tpu_strbuf_appendf(sb, " : (%s) -> ", operand_types);
  append_result_types(sb, result_types, num_results);
  tpu_strbuf_append(sb, "\n");
  if (!sb_ok(b, sb)) return;
  b->has_ops = true;
  for (int i = 0; i < num_results; i++) {
    tpu_hlo_value_t v = add_value(b, &result_types[i], f->block, VALUE_RESULT,
                                  number, num_results == 1 ? -1 : i);
    if (out_results) out_results[i] = v;
  }
}

static void fill_invalid(tpu_hlo_value_t* out, int n) {
  for (int i = 0; out && i < n; i++) out[i] = kInvalid;
}

void tpu_hlo_op_multi(tpu_hlo_builder_t* b, const char* name,
                      const tpu_hlo_value_t* operands, int num_operands,
                      const tpu_hlo_type_t* result_types, int num_results,
                      const char* attrs, tpu_hlo_value_t* out_results) {
  fill_invalid(out_results, num_results);
  if (!tpu_hlo_ok_(b) || !check_op_name(b, name)) return;
  char attrs_buf[4096];
  attrs = with_precision(b, name, attrs, attrs_buf, sizeof attrs_buf);
  if (!tpu_hlo_ok_(b)) return;
  frame_t* f = op_frame(b, name);
  if (!f || !check_results(b, name, result_types, num_results)) return;
  tpu_strbuf_t names = {0}, types = {0};
  /* An op of @main's body with results: its operands are used only if its
   * results are. Ops without results, and ops inside regions, use theirs. */
  int plain = -1;
  if (b->num_frames == 1 && num_results > 0) {
    plain_op_t* ops = grow(b, b->plain_ops, &b->cap_plain_ops, b->num_plain_ops + 1,
                           sizeof *ops);
    if (!ops) return;
    b->plain_ops = ops;
    plain = b->num_plain_ops++;
    b->plain_ops[plain] = (plain_op_t){.first = b->num_operand_list, .count = 0};
  }
  if (use_operands(b, name, operands, num_operands, &names, &types, plain)) {
    int first_value = b->num_values;
    finish_op(b, f, b->next_result++, name, names.data ? names.data : "",
              types.data ? types.data : "", NULL, attrs, result_types,
              num_results, out_results);
    for (int v = first_value; plain >= 0 && v < b->num_values; v++) b->values[v].def_op = plain;
  }
  tpu_strbuf_free(&names);
  tpu_strbuf_free(&types);
}

tpu_hlo_value_t tpu_hlo_op(tpu_hlo_builder_t* b, const char* name,
                           const tpu_hlo_value_t* operands, int num_operands,
                           tpu_hlo_type_t result_type, const char* attrs) {
  tpu_hlo_value_t result = kInvalid;
  tpu_hlo_op_multi(b, name, operands, num_operands, &result_type, 1, attrs,
                   &result);
  return result;
}

/* ---- region ops --------------------------------------------------------- */

void tpu_hlo_region_op_begin(tpu_hlo_builder_t* b, const char* name,
                             const tpu_hlo_value_t* operands, int num_operands,
                             const tpu_hlo_type_t* result_types,
                             int num_results, const char* attrs) {
  if (!b) return;
  int* counts = grow(b, b->region_results, &b->cap_region_results,
                     b->num_region_results + 1, sizeof *counts);
  if (counts) {
    b->region_results = counts;
    b->region_results[b->num_region_results++] =
        num_results > 0 ? num_results : 0;
  }
  if (!tpu_hlo_ok_(b) || !check_op_name(b, name)) return;
  frame_t* parent = op_frame(b, name);
  if (!parent || !check_results(b, name, result_types, num_results)) return;
  frame_t* frames = grow(b, b->frames, &b->cap_frames, b->num_frames + 1,
                         sizeof *frames);
  if (!frames) return;
  b->frames = frames;
  parent = &b->frames[b->num_frames - 1]; /* frames may have moved */
  frame_t f;
  memset(&f, 0, sizeof f);
  f.indent = parent->indent + 2;
  f.block = -1;
  f.num_results = num_results;
  f.name = dup_or_null(b, name);
  f.attrs = dup_or_null(b, attrs);
  if (num_results > 0) {
    f.result_types = malloc((size_t)num_results * sizeof *result_types);
    if (f.result_types) {
      memcpy(f.result_types, result_types,
             (size_t)num_results * sizeof *result_types);
    } else {
      tpu_hlo_fail_(b, TPU_STATUS_RESOURCE_EXHAUSTED,
                    "HLO builder: out of host memory");
    }
  }
  if (!tpu_hlo_ok_(b) || !use_operands(b, name, operands, num_operands,
                                       &f.operands, &f.operand_types, -1)) {
    frame_free(&f);
    return;
  }
  f.number = b->next_result++;
  b->frames[b->num_frames++] = f;
}

/* The region op being built, or NULL (error recorded). */
static frame_t* region_frame(tpu_hlo_builder_t* b, const char* what,
                             bool want_open_block) {
  if (b->num_frames < 2) {
    tpu_hlo_fail_(b, TPU_STATUS_FAILED_PRECONDITION,
                  "%s: no region op is being built", what);
    return NULL;
  }
  frame_t* f = &b->frames[b->num_frames - 1];
  if ((f->block >= 0) != want_open_block) {
    tpu_hlo_fail_(b, TPU_STATUS_FAILED_PRECONDITION,
                  want_open_block ? "%s: %s has no open block"
                                  : "%s: %s still has an open block (end it "
                                    "with tpu_hlo_block_return)",
                  what, f->name);
    return NULL;
  }
  return f;
}

void tpu_hlo_block_begin(tpu_hlo_builder_t* b, const tpu_hlo_type_t* arg_types,
                         int num_args, tpu_hlo_value_t* out_args) {
  static const char kWhat[] = "tpu_hlo_block_begin";
  fill_invalid(out_args, num_args);
  if (!tpu_hlo_ok_(b)) return;
  frame_t* f = region_frame(b, kWhat, false);
  if (!f || !check_results(b, kWhat, arg_types, num_args)) return;
  bool* open = grow(b, b->block_open, &b->cap_blocks, b->num_blocks + 1,
                    sizeof *open);
  if (!open) return;
  b->block_open = open;
  int block = b->num_blocks++;
  b->block_open[block] = true;
  tpu_strbuf_t* sb = &f->text;
  tpu_strbuf_append(sb, f->num_regions > 0 ? ", {\n" : "{\n");
  if (num_args > 0) {
    /* Block labels sit at the op's own indentation, as MLIR prints them. */
    tpu_strbuf_append_char(sb, ' ', (size_t)f->indent - 2);
    tpu_strbuf_append(sb, "^bb0(");
  }
  for (int i = 0; i < num_args; i++) {
    int number = b->next_block_arg++;
    tpu_strbuf_appendf(sb, "%s%%b%d: ", i > 0 ? ", " : "", number);
    tpu_hlo_type_append(sb, &arg_types[i]);
    tpu_hlo_value_t v =
        add_value(b, &arg_types[i], block, VALUE_BLOCK_ARG, number, -1);
    if (out_args) out_args[i] = v;
  }
  if (num_args > 0) tpu_strbuf_append(sb, "):\n");
  f->block = block;
  f->num_regions++;
  sb_ok(b, sb);
}

void tpu_hlo_block_return(tpu_hlo_builder_t* b, const tpu_hlo_value_t* values,
                          int num_values) {
  static const char kWhat[] = "tpu_hlo_block_return";
  if (!tpu_hlo_ok_(b)) return;
  frame_t* f = region_frame(b, kWhat, true);
  if (!f) return;
  tpu_strbuf_t names = {0}, types = {0};
  if (use_operands(b, kWhat, values, num_values, &names, &types, -1)) {
    tpu_strbuf_append_char(&f->text, ' ', (size_t)f->indent);
    tpu_strbuf_appendf(&f->text, "\"stablehlo.return\"(%s) : (%s) -> ()\n",
                       names.data ? names.data : "",
                       types.data ? types.data : "");
    tpu_strbuf_append_char(&f->text, ' ', (size_t)f->indent - 2);
    tpu_strbuf_append(&f->text, "}");
    b->block_open[f->block] = false;
    f->block = -1;
    sb_ok(b, &f->text);
  }
  tpu_strbuf_free(&names);
  tpu_strbuf_free(&types);
}

void tpu_hlo_region_op_end(tpu_hlo_builder_t* b, tpu_hlo_value_t* out_results) {
  if (!b) return;
  if (b->num_region_results > 0) {
    fill_invalid(out_results, b->region_results[--b->num_region_results]);
  }
  if (!tpu_hlo_ok_(b)) return;
  frame_t* f = region_frame(b, "tpu_hlo_region_op_end", false);
  if (!f) return;
  frame_t op = *f;
  b->num_frames--;
  finish_op(b, &b->frames[b->num_frames - 1], op.number, op.name,
            op.operands.data ? op.operands.data : "",
            op.operand_types.data ? op.operand_types.data : "",
            op.num_regions > 0 && op.text.data ? op.text.data : NULL, op.attrs,
            op.result_types, op.num_results, out_results);
  frame_free(&op);
}

/* ---- @main -------------------------------------------------------------- */

tpu_hlo_value_t tpu_hlo_arg(tpu_hlo_builder_t* b, tpu_hlo_type_t type,
                            const char* attrs) {
  if (!tpu_hlo_ok_(b)) return kInvalid;
  if (b->has_ops || b->returned) {
    tpu_hlo_fail_(b, TPU_STATUS_FAILED_PRECONDITION,
                  "tpu_hlo_arg: arguments must all be added before the first "
                  "op (argument %d comes after one)",
                  b->num_args);
    return kInvalid;
  }
  if (!tpu_hlo_check_type_(b, &type, "tpu_hlo_arg")) return kInvalid;
  tpu_strbuf_t* sb = &b->signature;
  tpu_strbuf_appendf(sb, "%s%%arg%d: ", b->num_args > 0 ? ", " : "",
                     b->num_args);
  tpu_hlo_type_append(sb, &type);
  if (attrs && *attrs) tpu_strbuf_appendf(sb, " {%s}", attrs);
  if (!sb_ok(b, sb)) return kInvalid;
  return add_value(b, &type, 0, VALUE_ARG, b->num_args++, -1);
}

void tpu_hlo_return(tpu_hlo_builder_t* b, const tpu_hlo_value_t* values,
                    int num_values) {
  static const char kWhat[] = "tpu_hlo_return";
  if (!tpu_hlo_ok_(b)) return;
  if (b->returned) {
    tpu_hlo_fail_(b, TPU_STATUS_FAILED_PRECONDITION,
                  "%s: @main has already returned", kWhat);
    return;
  }
  if (b->num_frames > 1) {
    tpu_hlo_fail_(b, TPU_STATUS_FAILED_PRECONDITION,
                  "%s: region op %s is still open", kWhat,
                  b->frames[b->num_frames - 1].name);
    return;
  }
  tpu_strbuf_t names = {0}, types = {0};
  if (use_operands(b, kWhat, values, num_values, &names, &types, -1)) {
    frame_t* f = &b->frames[0];
    tpu_strbuf_append_char(&f->text, ' ', (size_t)f->indent);
    tpu_strbuf_appendf(&f->text, "\"func.return\"(%s) : (%s) -> ()\n",
                       names.data ? names.data : "",
                       types.data ? types.data : "");
    tpu_strbuf_appendf(&b->result_sig, "(%s)", types.data ? types.data : "");
    if (sb_ok(b, &f->text) && sb_ok(b, &b->result_sig)) b->returned = true;
  }
  tpu_strbuf_free(&names);
  tpu_strbuf_free(&types);
}

void tpu_hlo_add_functions(tpu_hlo_builder_t* b, const char* text) {
  if (!tpu_hlo_ok_(b)) return;
  tpu_strbuf_append(&b->functions, text);
}

tpu_status_t tpu_hlo_builder_finish(tpu_hlo_builder_t* b, char** out_text,
                                    size_t* out_len) {
  if (out_text) *out_text = NULL;
  if (out_len) *out_len = 0;
  if (!b || !out_text) {
    return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT,
                           "tpu_hlo_builder_finish: %s is NULL",
                           b ? "out_text" : "builder");
  }
  if (b->error) {
    /* A copy, so the builder keeps its own and finish can be repeated. */
    return tpu_status_make(tpu_status_code(b->error), "%s",
                           tpu_status_message(b->error));
  }
  if (!b->returned) {
    return tpu_status_make(TPU_STATUS_FAILED_PRECONDITION,
                           "tpu_hlo_builder_finish: @main has no "
                           "tpu_hlo_return");
  }
  tpu_strbuf_t sb = {0};
  tpu_strbuf_appendf(&sb,
                     "module @torchtpu {\n"
                     "  func.func public @main(%s) -> %s {\n",
                     b->signature.data ? b->signature.data : "",
                     b->result_sig.data);
  tpu_strbuf_append(&sb, b->frames[0].text.data);
  tpu_strbuf_append(&sb, "  }\n");
  if (b->functions.data) tpu_strbuf_append(&sb, b->functions.data);
  tpu_strbuf_append(&sb, "}\n");
  char* text = tpu_strbuf_take(&sb, out_len);
  tpu_strbuf_free(&sb);
  if (!text) {
    return tpu_status_make(TPU_STATUS_RESOURCE_EXHAUSTED,
                           "tpu_hlo_builder_finish: out of host memory");
  }
  *out_text = text;
  return NULL;
}
