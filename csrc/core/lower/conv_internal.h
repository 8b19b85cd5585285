/* What the conv family's files (conv.c, pool.c) share: reading int[]
 * parameters, the zero-element check, and the compute dtype (half types
 * compute in float32 and round once). */
#ifndef TORCHTPU_CORE_LOWER_CONV_INTERNAL_H_
#define TORCHTPU_CORE_LOWER_CONV_INTERNAL_H_

#include <stdint.h>
#include <string.h>

#include "emit.h"
#include "lowering.h"

#define MAX_SP 3 /* spatial dims we handle */

static inline bool is_half(tpu_dtype_t d) { return d == TPU_DTYPE_FLOAT16 || d == TPU_DTYPE_BFLOAT16; }

static inline tpu_dtype_t compute_dtype(tpu_dtype_t d) { return is_half(d) ? TPU_DTYPE_FLOAT32 : d; }

/* Reads an int / int[] argument as n values: a single value repeats; an
 * empty list (or None) gives `dflt` (NULL: fill with `fill`). False when the
 * list has another length. */
static inline bool read_ints(const tpu_lower_arg_t* a, int n, const int64_t* dflt, int64_t fill,
                             int64_t* out) {
  if (a->kind == TPU_ARG_INT) {
    for (int i = 0; i < n; i++) out[i] = a->i;
    return true;
  }
  if (a->kind == TPU_ARG_NONE || (a->kind == TPU_ARG_INTS && a->num_ints == 0)) {
    for (int i = 0; i < n; i++) out[i] = dflt ? dflt[i] : fill;
    return true;
  }
  if (a->kind != TPU_ARG_INTS) return false;
  if (a->num_ints == 1) {
    for (int i = 0; i < n; i++) out[i] = a->ints[0];
    return true;
  }
  if (a->num_ints != n) return false;
  memcpy(out, a->ints, sizeof(int64_t) * (size_t)n);
  return true;
}

static inline int64_t product(const int64_t* v, int n) {
  int64_t p = 1;
  for (int i = 0; i < n; i++) p *= v[i];
  return p;
}

/* Zero-element operands or results go to the CPU: XLA rejects some empty
 * windows and scatters, and there is nothing to compute. */
static inline bool any_empty(const tpu_lower_ctx_t* ctx) {
  for (int i = 0; i < tpu_lower_num_args(ctx); i++) {
    const tpu_lower_arg_t* a = tpu_lower_arg(ctx, i);
    if (a->kind == TPU_ARG_TENSOR && product(a->type.dims, a->type.rank) == 0) return true;
  }
  for (int i = 0; i < tpu_lower_num_outputs(ctx); i++) {
    tpu_hlo_type_t t = tpu_lower_output_type(ctx, i);
    if (product(t.dims, t.rank) == 0) return true;
  }
  return false;
}

static inline tpu_hlo_value_t operand_in(tpu_lower_ctx_t* ctx, int i, tpu_dtype_t dtype) {
  return tpu_emit_convert(tpu_lower_builder(ctx), tpu_lower_tensor(ctx, i), dtype);
}

/* Integers are declined: XLA:CPU's s64 stablehlo.convolution returns
 * wrong values (checked against CPU's exact slow path), so integer
 * convolutions stay on the fallback until they are written as a dot. */
static inline bool conv_dtype_ok(tpu_dtype_t d) {
  return d == TPU_DTYPE_FLOAT32 || d == TPU_DTYPE_FLOAT64 || is_half(d);
}

static inline tpu_hlo_value_t reshape_to(tpu_hlo_builder_t* b, tpu_hlo_value_t v, const tpu_hlo_type_t* t) {
  return tpu_emit_reshape(b, v, t->dims, t->rank);
}

#endif
