/* What the reduce family's files (reduce.c, pnorm.c) share: the dims a call
 * reduces, the reduce ops, and the setup every reduction starts with.
 *
 * A lowering computes its result over the reduced dims (dropping them) and
 * then reshapes to the output type PyTorch gives, which inserts the keepdim
 * 1s. Output dtypes (sum's int64 promotion, dtype= args, bool sums) are
 * also read from the output type rather than re-derived. Half types are
 * reduced in float32 and rounded once (XLA:CPU would accumulate a bf16
 * reduce in bf16). */
#ifndef TORCHTPU_CORE_LOWER_REDUCE_INTERNAL_H_
#define TORCHTPU_CORE_LOWER_REDUCE_INTERNAL_H_

#include <math.h>
#include <stdint.h>

#include "emit.h"
#include "lowering.h"

static inline tpu_dtype_t acc_of(tpu_dtype_t d) {
  return d == TPU_DTYPE_FLOAT16 || d == TPU_DTYPE_BFLOAT16 ? TPU_DTYPE_FLOAT32 : d;
}

/* The dims to reduce, from argument i (int, int[] or None), normalized and
 * ascending. None means every dim; an empty list means every dim too unless
 * empty_is_none (any/all.dims treat [] as "reduce nothing"). */
static inline int read_dims(tpu_lower_ctx_t* ctx, int i, int rank, bool empty_is_none, int64_t* dims) {
  const tpu_lower_arg_t* a = tpu_lower_arg(ctx, i);
  bool mask[TPU_HLO_MAX_RANK] = {0};
  if (a->kind == TPU_ARG_INT) {
    if (rank > 0) mask[(a->i % rank + rank) % rank] = true;
  } else if (a->kind == TPU_ARG_INTS && (a->num_ints > 0 || empty_is_none)) {
    for (int k = 0; k < a->num_ints && rank > 0; k++) mask[(a->ints[k] % rank + rank) % rank] = true;
  } else {
    for (int d = 0; d < rank; d++) mask[d] = true;
  }
  int n = 0;
  for (int d = 0; d < rank; d++)
    if (mask[d]) dims[n++] = d;
  return n;
}

/* Argument i when it is a dim list, else -1 (every dim). Where a schema's
 * default overload has a ScalarType in the dim list's slot (sum(self,
 * dtype), norm.ScalarOpt_dtype), a dtype must not be read as a dim, and
 * the engine may pass a ScalarType as an INT. */
static inline int list_arg(tpu_lower_ctx_t* ctx, int i) {
  return tpu_lower_arg(ctx, i)->kind == TPU_ARG_INTS ? i : -1;
}

/* stablehlo.reduce, or the value itself when no dim is reduced. */
static inline tpu_hlo_value_t reduce(tpu_hlo_builder_t* b, tpu_hlo_value_t x, double init,
                                     const int64_t* dims, int n, const char* op) {
  if (n == 0) return x;
  tpu_dtype_t d = tpu_hlo_value_type(b, x).dtype;
  return tpu_emit_reduce(b, x, tpu_emit_const(b, d, init), dims, n, op);
}

/* Sets output i from a value of its element count: converts to its dtype and
 * reshapes (adds the keepdim 1s). */
static inline void set_out(tpu_lower_ctx_t* ctx, int i, tpu_hlo_value_t v) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_type_t out = tpu_lower_output_type(ctx, i);
  v = tpu_emit_convert(b, v, out.dtype);
  tpu_lower_set_output(ctx, i, tpu_emit_reshape(b, v, out.dims, out.rank));
}

/* The identity of max (is_max) or min for dtype: -inf / +inf, the integer
 * limits, false / true. */
static inline tpu_hlo_value_t extreme_init(tpu_hlo_builder_t* b, tpu_dtype_t d, bool is_max) {
  tpu_hlo_type_t t = tpu_hlo_type_scalar(d);
  if (tpu_dtype_is_floating(d)) return tpu_hlo_constant_float(b, t, is_max ? -INFINITY : INFINITY);
  if (d == TPU_DTYPE_BOOL) return tpu_hlo_constant_bool(b, t, !is_max);
  int bits = (int)tpu_dtype_size(d) * 8;
  if (d == TPU_DTYPE_UINT8) return tpu_hlo_constant_int(b, t, is_max ? 0 : 255);
  int64_t hi = bits == 64 ? INT64_MAX : (((int64_t)1 << (bits - 1)) - 1);
  return tpu_hlo_constant_int(b, t, is_max ? -hi - 1 : hi);
}

/* max/min over dims; bools use or/and. Floats propagate NaN like PyTorch:
 * XLA:CPU's reduce with maximum drops NaNs (elementwise maximum keeps
 * them), so a separate "any NaN" reduce selects NaN. */
static inline tpu_hlo_value_t reduce_extreme(tpu_hlo_builder_t* b, tpu_hlo_value_t x,
                                             const int64_t* dims, int n, bool is_max) {
  if (n == 0) return x;
  tpu_dtype_t d = tpu_hlo_value_type(b, x).dtype;
  const char* op = d == TPU_DTYPE_BOOL ? (is_max ? "stablehlo.or" : "stablehlo.and")
                                       : (is_max ? "stablehlo.maximum" : "stablehlo.minimum");
  tpu_hlo_value_t r = tpu_emit_reduce(b, x, extreme_init(b, d, is_max), dims, n, op);
  if (!tpu_dtype_is_floating(d)) return r;
  tpu_hlo_value_t nan = reduce(b, tpu_emit_compare(b, "NE", x, x), 0, dims, n, "stablehlo.or");
  tpu_hlo_type_t rt = tpu_hlo_value_type(b, r);
  return tpu_emit_select(b, nan, tpu_emit_const_like(b, &rt, NAN), r);
}

static inline tpu_status_t decline_complex(tpu_lower_ctx_t* ctx) {
  if (tpu_dtype_is_complex(tpu_lower_arg(ctx, 0)->type.dtype) ||
      tpu_dtype_is_complex(tpu_lower_output_type(ctx, 0).dtype))
    return tpu_lower_decline(ctx, "complex reductions");
  return NULL;
}

/* One reduction call: its operand and the dims it reduces. */
typedef struct reduce_call_s {
  tpu_hlo_builder_t* b;
  tpu_hlo_value_t x; /* argument 0 (as_acc: see reduce_setup) */
  tpu_hlo_type_t t;  /* x's type */
  int64_t dims[TPU_HLO_MAX_RANK];
  int n;
} reduce_call_t;

/* The setup reductions share: declines complex calls and, when
 * `non_floating` is given (the decline's reason), a non-floating output;
 * reads argument 0, with as_acc cast to output 0's dtype (PyTorch casts
 * before reducing when a dtype= is given, and promotes ints/bools to int64
 * for sum/prod) and then to its accumulation dtype; reads the dims from
 * argument dims_arg (read_dims; -1: every dim). */
static inline tpu_status_t reduce_setup(tpu_lower_ctx_t* ctx, const char* non_floating, bool as_acc,
                                        int dims_arg, reduce_call_t* r) {
  TPU_RETURN_IF_ERROR(decline_complex(ctx));
  tpu_dtype_t out = tpu_lower_output_type(ctx, 0).dtype;
  if (non_floating && !tpu_dtype_is_floating(out)) return tpu_lower_decline(ctx, "%s", non_floating);
  r->b = tpu_lower_builder(ctx);
  r->x = tpu_lower_tensor(ctx, 0);
  if (as_acc) r->x = tpu_emit_convert(r->b, tpu_emit_convert(r->b, r->x, out), acc_of(out));
  r->t = tpu_hlo_value_type(r->b, r->x);
  r->n = read_dims(ctx, dims_arg, r->t.rank, false, r->dims);
  return NULL;
}

#endif
