#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctx_internal.h"
#include "unsigned_ops.h"
#include "emit.h"

static const tpu_lower_arg_t kNoneArg = {.kind = TPU_ARG_NONE};

size_t tpu_lowering_base_name(const char* op_name, const char** out_start) {
  const char* s = strstr(op_name, "::");
  s = s ? s + 2 : op_name;
  size_t n = strcspn(s, ".");
  if (n > 1 && s[n - 1] == '_' && !(n > 2 && s[n - 2] == '_')) n--;
  *out_start = s;
  return n;
}

tpu_hlo_builder_t* tpu_lower_builder(tpu_lower_ctx_t* ctx) { return ctx->b; }
const char* tpu_lower_op_name(const tpu_lower_ctx_t* ctx) { return ctx->op_name; }
int tpu_lower_num_args(const tpu_lower_ctx_t* ctx) { return ctx->num_args; }
intptr_t tpu_lower_data(const tpu_lower_ctx_t* ctx) { return ctx->data; }

const tpu_lower_arg_t* tpu_lower_arg(const tpu_lower_ctx_t* ctx, int i) {
  return i >= 0 && i < ctx->num_args ? &ctx->args[i] : &kNoneArg;
}

static tpu_hlo_value_t invalid(void) { return (tpu_hlo_value_t){-1}; }

tpu_hlo_value_t tpu_lower_tensor(tpu_lower_ctx_t* ctx, int i) {
  if (tpu_lower_arg(ctx, i)->kind != TPU_ARG_TENSOR) {
    if (!ctx->declined)
      ctx->declined = tpu_status_make(TPU_STATUS_INVALID_ARGUMENT,
                                      "%s: argument %d is not a tensor", ctx->op_name, i);
    return invalid();
  }
  return ctx->arg_values[i];
}

tpu_hlo_value_t tpu_lower_list_tensor(tpu_lower_ctx_t* ctx, int i, int k) {
  const tpu_lower_arg_t* a = tpu_lower_arg(ctx, i);
  if (a->kind != TPU_ARG_TENSORS || k < 0 || k >= a->num_tensors) {
    if (!ctx->declined)
      ctx->declined = tpu_status_make(TPU_STATUS_INVALID_ARGUMENT,
                                      "%s: argument %d has no tensor %d", ctx->op_name, i, k);
    return invalid();
  }
  return ctx->list_values[ctx->list_offset[i] + k];
}

tpu_hlo_type_t tpu_lower_list_type(const tpu_lower_ctx_t* ctx, int i, int k) {
  const tpu_lower_arg_t* a = tpu_lower_arg(ctx, i);
  if (a->kind != TPU_ARG_TENSORS || k < 0 || k >= a->num_tensors)
    return (tpu_hlo_type_t){.dtype = TPU_DTYPE_INVALID};
  return ctx->list_types[ctx->list_offset[i] + k];
}

tpu_hlo_value_t tpu_lower_scalar(tpu_lower_ctx_t* ctx, int i, tpu_dtype_t dtype) {
  const tpu_lower_arg_t* a = tpu_lower_arg(ctx, i);
  tpu_hlo_builder_t* b = ctx->b;
  switch (a->kind) {
    case TPU_ARG_SCALAR:
      return tpu_emit_convert(b, ctx->arg_values[i], dtype);
    case TPU_ARG_TENSOR:
      if (a->type.rank == 0) return tpu_emit_convert(b, ctx->arg_values[i], dtype);
      break;
    case TPU_ARG_INT:
    case TPU_ARG_BOOL: {
      tpu_hlo_type_t t = tpu_hlo_type_scalar(dtype);
      if (tpu_dtype_is_floating(dtype)) return tpu_hlo_constant_float(b, t, (double)a->i);
      if (dtype == TPU_DTYPE_BOOL) return tpu_hlo_constant_bool(b, t, a->i != 0);
      if (tpu_dtype_is_complex(dtype)) return tpu_hlo_constant_complex(b, t, (double)a->i, 0);
      return tpu_hlo_constant_int(b, t, a->i);
    }
    case TPU_ARG_FLOAT:
      return tpu_emit_const(b, dtype, a->f);
    default:
      break;
  }
  if (!ctx->declined)
    ctx->declined = tpu_status_make(TPU_STATUS_INVALID_ARGUMENT,
                                    "%s: argument %d is not a scalar", ctx->op_name, i);
  return invalid();
}

tpu_hlo_value_t tpu_lower_scalar_at(tpu_lower_ctx_t* ctx, int i, int k, tpu_dtype_t dtype) {
  const tpu_lower_arg_t* a = tpu_lower_arg(ctx, i);
  if (a->kind != TPU_ARG_SCALARS || k < 0 || k >= a->num_tensors) {
    if (!ctx->declined)
      ctx->declined = tpu_status_make(TPU_STATUS_INVALID_ARGUMENT,
                                      "%s: argument %d has no scalar %d", ctx->op_name, i, k);
    return invalid();
  }
  int64_t start = k, limit = k + 1, stride = 1;
  tpu_hlo_value_t one = tpu_emit_slice(ctx->b, ctx->arg_values[i], &start, &limit, &stride);
  return tpu_emit_convert(ctx->b, tpu_emit_reshape(ctx->b, one, NULL, 0), dtype);
}

int tpu_lower_num_outputs(const tpu_lower_ctx_t* ctx) { return ctx->num_outputs; }

tpu_hlo_type_t tpu_lower_output_type(const tpu_lower_ctx_t* ctx, int i) {
  if (i < 0 || i >= ctx->num_outputs) return (tpu_hlo_type_t){.dtype = TPU_DTYPE_INVALID};
  return ctx->output_types[i];
}

void tpu_lower_set_output(tpu_lower_ctx_t* ctx, int i, tpu_hlo_value_t value) {
  if (i >= 0 && i < ctx->num_outputs) ctx->outputs[i] = value;
}

/* ---- random bits ----
 *
 * stablehlo.rng_bit_generator on the engine's 2 x int64 state is rejected
 * by the XLA CPU plugin: its THREE_FRY / PHILOX expansion
 * needs a ui64 state ("Binary op add with different element types: s64[2,1]
 * and u64[2,1]") and returns unsigned bits, and tpu_dtype_t has no unsigned
 * 32/64-bit types to bitcast through. So we compute
 * Threefry-2x32 (20 rounds, Salmon et al. 2011) itself with int32
 * arithmetic, which wraps like uint32: key = state[0], counter = state[1] +
 * element index, and the op advances state[1] by the elements it drew. The
 * state stays the engine's 2 x int64 program parameter. */

static tpu_hlo_value_t i32_const(tpu_hlo_builder_t* b, const tpu_hlo_type_t* t, uint32_t v) {
  return tpu_hlo_constant_int(b, *t, (int32_t)v);
}

static tpu_hlo_value_t rotl32(tpu_hlo_builder_t* b, tpu_hlo_value_t x, int r) {
  tpu_hlo_type_t t = tpu_hlo_value_type(b, x);
  tpu_hlo_value_t l = tpu_emit_binary(b, "stablehlo.shift_left", x, i32_const(b, &t, (uint32_t)r));
  tpu_hlo_value_t h =
      tpu_emit_binary(b, "stablehlo.shift_right_logical", x, i32_const(b, &t, (uint32_t)(32 - r)));
  return tpu_emit_binary(b, "stablehlo.or", l, h);
}

/* Word w (0 = state[0], 1 = state[1]) of the generator state, rank 0. */
static tpu_hlo_value_t state_word(tpu_lower_ctx_t* ctx, int w) {
  int64_t start = w, limit = w + 1, stride = 1;
  tpu_hlo_builder_t* b = ctx->b;
  return tpu_emit_reshape(b, tpu_emit_slice(b, ctx->rng_state, &start, &limit, &stride), NULL, 0);
}

/* Low / high 32 bits of an int64 value (integer convert truncates). */
static tpu_hlo_value_t lo32(tpu_hlo_builder_t* b, tpu_hlo_value_t x) {
  return tpu_emit_convert(b, x, TPU_DTYPE_INT32);
}
static tpu_hlo_value_t hi32(tpu_hlo_builder_t* b, tpu_hlo_value_t x) {
  tpu_hlo_type_t t = tpu_hlo_value_type(b, x);
  return lo32(b, tpu_emit_binary(b, "stablehlo.shift_right_logical", x,
                                 tpu_hlo_constant_int(b, t, 32)));
}

/* Threefry-2x32 of one counter per element of `shape`: two int32 words. */
static void threefry_words(tpu_lower_ctx_t* ctx, const tpu_hlo_type_t* shape,
                           tpu_hlo_value_t out[2]) {
  tpu_hlo_builder_t* b = ctx->b;
  int64_t n = 1;
  tpu_hlo_type_t i64 = *shape, i32 = *shape;
  i64.dtype = TPU_DTYPE_INT64;
  i32.dtype = TPU_DTYPE_INT32;
  for (int d = 0; d < shape->rank; d++) n *= shape->dims[d];
  /* Counter: state[1] + row-major element index. */
  tpu_hlo_type_t flat = tpu_hlo_type_make(TPU_DTYPE_INT64, 1, &n);
  tpu_hlo_value_t index = tpu_emit_reshape(b, tpu_emit_iota(b, &flat, 0), shape->dims, shape->rank);
  tpu_hlo_value_t base = state_word(ctx, 1), key = state_word(ctx, 0);
  tpu_hlo_value_t ctr = tpu_emit_binary(b, "stablehlo.add", index, tpu_emit_broadcast_to(b, base, &i64));
  tpu_hlo_value_t ks[3];
  ks[0] = tpu_emit_broadcast_to(b, lo32(b, key), &i32);
  ks[1] = tpu_emit_broadcast_to(b, hi32(b, key), &i32);
  ks[2] = tpu_emit_binary(b, "stablehlo.xor", tpu_emit_binary(b, "stablehlo.xor", ks[0], ks[1]),
                          i32_const(b, &i32, 0x1BD11BDAu));
  tpu_hlo_value_t x0 = tpu_emit_binary(b, "stablehlo.add", lo32(b, ctr), ks[0]);
  tpu_hlo_value_t x1 = tpu_emit_binary(b, "stablehlo.add", hi32(b, ctr), ks[1]);
  static const int kRot[8] = {13, 15, 26, 6, 17, 29, 16, 24};
  for (int r = 0; r < 20; r++) {
    x0 = tpu_emit_binary(b, "stablehlo.add", x0, x1);
    x1 = tpu_emit_binary(b, "stablehlo.xor", rotl32(b, x1, kRot[r % 8]), x0);
    if (r % 4 == 3) {
      int s = r / 4 + 1;
      x0 = tpu_emit_binary(b, "stablehlo.add", x0, ks[s % 3]);
      x1 = tpu_emit_binary(b, "stablehlo.add",
                           tpu_emit_binary(b, "stablehlo.add", x1, ks[(s + 1) % 3]),
                           i32_const(b, &i32, (uint32_t)s));
    }
  }
  /* Advance the counter past the elements drawn. */
  int64_t two = 2, step[2] = {0, n};
  tpu_hlo_value_t inc = tpu_hlo_constant_dense(b, tpu_hlo_type_make(TPU_DTYPE_INT64, 1, &two), step);
  ctx->rng_state = tpu_emit_binary(b, "stablehlo.add", ctx->rng_state, inc);
  out[0] = x0;
  out[1] = x1;
}

tpu_hlo_value_t tpu_lower_random_bits(tpu_lower_ctx_t* ctx, const tpu_hlo_type_t* shape_type,
                                      tpu_dtype_t bits_dtype) {
  if (ctx->rng_state.id < 0) {
    if (!ctx->declined)
      ctx->declined = tpu_status_make(TPU_STATUS_INTERNAL,
                                      "%s: random bits requested but the table row lacks "
                                      "TPU_LOWER_NEEDS_RNG",
                                      ctx->op_name);
    return invalid();
  }
  tpu_hlo_builder_t* b = ctx->b;
  tpu_hlo_value_t w[2];
  threefry_words(ctx, shape_type, w);
  if (bits_dtype == TPU_DTYPE_INT32) return w[0];
  if (bits_dtype != TPU_DTYPE_INT64) {
    if (!ctx->declined)
      ctx->declined = tpu_status_make(TPU_STATUS_INVALID_ARGUMENT,
                                      "%s: random bits come as int32 or int64", ctx->op_name);
    return invalid();
  }
  tpu_hlo_type_t t = *shape_type;
  t.dtype = TPU_DTYPE_INT64;
  /* lo: zero-extend the int32 word (convert sign-extends, so mask). */
  tpu_hlo_value_t lo = tpu_emit_binary(b, "stablehlo.and", tpu_emit_convert(b, w[0], TPU_DTYPE_INT64),
                                       tpu_hlo_constant_int(b, t, 0xffffffffLL));
  tpu_hlo_value_t hi = tpu_emit_binary(b, "stablehlo.shift_left",
                                       tpu_emit_convert(b, w[1], TPU_DTYPE_INT64),
                                       tpu_hlo_constant_int(b, t, 32));
  return tpu_emit_binary(b, "stablehlo.or", hi, lo);
}

tpu_status_t tpu_lower_decline(tpu_lower_ctx_t* ctx, const char* fmt, ...) {
  char why[256];
  va_list args;
  va_start(args, fmt);
  vsnprintf(why, sizeof why, fmt, args);
  va_end(args);
  return tpu_status_make(TPU_STATUS_UNIMPLEMENTED, "%s: %s", ctx->op_name, why);
}

/* Whether any tensor or scalar operand, list element or output is
 * uint16/32/64 (see unsigned_ops.h). */
static bool involves_barebones_unsigned(const tpu_lower_ctx_t* ctx) {
  for (int i = 0; i < ctx->num_args; i++) {
    const tpu_lower_arg_t* a = &ctx->args[i];
    if ((a->kind == TPU_ARG_TENSOR || a->kind == TPU_ARG_SCALAR) &&
        tpu_dtype_is_barebones_unsigned(a->type.dtype))
      return true;
    if (a->kind == TPU_ARG_TENSORS)
      for (int k = 0; k < a->num_tensors; k++)
        if (tpu_dtype_is_barebones_unsigned(tpu_lower_list_type(ctx, i, k).dtype)) return true;
  }
  for (int o = 0; o < ctx->num_outputs; o++)
    if (tpu_dtype_is_barebones_unsigned(ctx->output_types[o].dtype)) return true;
  return false;
}

tpu_status_t tpu_lower_ctx_run(tpu_lower_ctx_t* ctx, const tpu_lowering_t* row) {
  for (int i = 0; i < ctx->num_outputs; i++) ctx->outputs[i] = invalid();
  /* Ops CPU does not compute for uint16/32/64 go to the CPU fallback, which
   * raises as CPU does. */
  const char* base;
  size_t base_len = tpu_lowering_base_name(ctx->op_name, &base);
  if (involves_barebones_unsigned(ctx) &&
      !tpu_unsigned_op_allowed(base, base_len, ctx->args, ctx->num_args))
    return tpu_lower_decline(ctx, "not computed for uint16/32/64 (as on CPU)");
  ctx->data = row->data;
  tpu_status_t s = row->fn(ctx);
  if (s) {
    tpu_status_free(ctx->declined);
    ctx->declined = NULL;
    return s;
  }
  if (ctx->declined) {
    s = ctx->declined;
    ctx->declined = NULL;
    return s;
  }
  for (int i = 0; i < ctx->num_outputs; i++) {
    tpu_hlo_type_t got = tpu_hlo_value_type(ctx->b, ctx->outputs[i]);
    const tpu_hlo_type_t* want = &ctx->output_types[i];
    if (ctx->outputs[i].id < 0)
      return tpu_status_make(TPU_STATUS_INTERNAL, "%s: output %d was not set", ctx->op_name, i);
    if (got.dtype != want->dtype || got.rank != want->rank ||
        memcmp(got.dims, want->dims, sizeof(int64_t) * (size_t)want->rank) != 0) {
      char g[128], w[128];
      tpu_hlo_type_print(&got, g, sizeof g);
      tpu_hlo_type_print(want, w, sizeof w);
      return tpu_status_make(TPU_STATUS_INTERNAL, "%s: output %d is %s but PyTorch expects %s",
                             ctx->op_name, i, g, w);
    }
  }
  return NULL;
}

/* ---- helpers that read the call ---- */

/* Promotion categories and widths. */
static int category(tpu_dtype_t d) {
  if (d == TPU_DTYPE_BOOL) return 0;
  if (tpu_dtype_is_integral(d)) return 1;
  if (tpu_dtype_is_floating(d)) return 2;
  return 3;
}

/* Promotes two dtypes of one tier like torch.promote_types. */
static tpu_dtype_t promote(tpu_dtype_t a, tpu_dtype_t b) {
  if (a == b) return a;
  int ca = category(a), cb = category(b);
  if (ca != cb) {
    tpu_dtype_t hi = ca > cb ? a : b, lo = ca > cb ? b : a;
    /* float64 with complex64 -> complex128. */
    if (tpu_dtype_is_complex(hi) && lo == TPU_DTYPE_FLOAT64) return TPU_DTYPE_COMPLEX128;
    return hi;
  }
  if (ca == 1) {
    /* uint8 with a signed type: the smallest signed type holding both. */
    if (a == TPU_DTYPE_UINT8 || b == TPU_DTYPE_UINT8) {
      tpu_dtype_t other = a == TPU_DTYPE_UINT8 ? b : a;
      return other == TPU_DTYPE_INT8 ? TPU_DTYPE_INT16 : other;
    }
    return tpu_dtype_size(a) >= tpu_dtype_size(b) ? a : b;
  }
  if (ca == 2) {
    /* float16 with bfloat16 -> float32. */
    if (tpu_dtype_size(a) == 2 && tpu_dtype_size(b) == 2) return TPU_DTYPE_FLOAT32;
    return tpu_dtype_size(a) >= tpu_dtype_size(b) ? a : b;
  }
  return tpu_dtype_size(a) >= tpu_dtype_size(b) ? a : b; /* complex */
}

tpu_dtype_t tpu_lower_result_type(const tpu_lower_ctx_t* ctx, const int* arg_indices,
                                  int n) {
  /* tiers: 0 = dim>0 tensors, 1 = 0-dim tensors, 2 = wrapped numbers */
  tpu_dtype_t tier[3] = {TPU_DTYPE_INVALID, TPU_DTYPE_INVALID, TPU_DTYPE_INVALID};
  for (int k = 0; k < n; k++) {
    const tpu_lower_arg_t* a = tpu_lower_arg(ctx, arg_indices[k]);
    int t;
    if (a->kind == TPU_ARG_TENSOR) t = a->type.rank > 0 ? 0 : 1;
    else if (a->kind == TPU_ARG_SCALAR) t = a->wrapped_number ? 2 : 1;
    else continue;
    tier[t] = tier[t] == TPU_DTYPE_INVALID ? a->type.dtype : promote(tier[t], a->type.dtype);
  }
  tpu_dtype_t result = TPU_DTYPE_INVALID;
  for (int t = 0; t < 3; t++) {
    if (tier[t] == TPU_DTYPE_INVALID) continue;
    if (result == TPU_DTYPE_INVALID) {
      result = tier[t];
    } else if (category(tier[t]) > category(result)) {
      /* A lower tier only raises the category, using the default dtype for
       * wrapped numbers (float32 / complex64 here). */
      static const tpu_dtype_t kWrappedDefault[4] = {
          TPU_DTYPE_BOOL, TPU_DTYPE_INT64, TPU_DTYPE_FLOAT32, TPU_DTYPE_COMPLEX64};
      tpu_dtype_t raised = t == 2 ? kWrappedDefault[category(tier[t])] : tier[t];
      /* A complex number with a float64 tensor keeps its precision. */
      if (tpu_dtype_is_complex(raised) && result == TPU_DTYPE_FLOAT64)
        raised = TPU_DTYPE_COMPLEX128;
      result = raised;
    }
  }
  return result;
}

tpu_hlo_value_t tpu_lower_batched_matrix(tpu_lower_ctx_t* ctx, int i, const tpu_hlo_type_t* batch) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  const tpu_hlo_type_t* t = &tpu_lower_arg(ctx, i)->type;
  tpu_hlo_type_t to = *batch;
  to.dtype = t->dtype;
  to.dims[to.rank - 2] = t->dims[t->rank - 2];
  to.dims[to.rank - 1] = t->dims[t->rank - 1];
  return tpu_emit_broadcast_to(b, tpu_lower_tensor(ctx, i), &to);
}
