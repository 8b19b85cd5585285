/* compare family of the lowering table (see lowering.h): comparisons
 * (eq ... ge, isin), logical and bitwise ops, shifts, the float classes
 * (isnan ... signbit), maximum / minimum / fmax / fmin and clamp. Operands
 * meet in their common dtype (PyTorch's result_type); NaN propagates as on
 * the CPU. Rows carry the variant as data: the comparison direction, the
 * StableHLO op, which bound or float class. */
#include <math.h>
#include <string.h>

#include "emit.h"
#include "lowering.h"
#include "pointwise.h"

/* Compares in the common dtype of (self, other) in the direction that is
 * the data; the output is bool, or the self dtype for in-place forms (eq_). */
static tpu_status_t lower_compare(tpu_lower_ctx_t* ctx) {
  const char* dir = (const char*)tpu_lower_data(ctx);
  tpu_dtype_t d = binary_dtype(ctx);
  if (tpu_dtype_is_complex(d) && strcmp(dir, "EQ") != 0 && strcmp(dir, "NE") != 0)
    return tpu_lower_decline(ctx, "ordered comparison of complex");
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  return finish(ctx, cmp(b, dir, operand(ctx, 0, d), operand(ctx, 1, d)));
}

/* logical_*: operands as truth values (nonzero, NaN included); data is the
 * op, NULL for logical_not. */
static tpu_status_t lower_logical(tpu_lower_ctx_t* ctx) {
  const char* op = (const char*)tpu_lower_data(ctx);
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_value_t x = operand(ctx, 0, TPU_DTYPE_BOOL);
  if (!op) return finish(ctx, un(b, "stablehlo.not", x));
  return finish(ctx, tpu_emit_binary(b, op, x, operand(ctx, 1, TPU_DTYPE_BOOL)));
}

/* bitwise_*: integers and bool, in the common dtype; data is the op, NULL
 * for bitwise_not. */
static tpu_status_t lower_bitwise(tpu_lower_ctx_t* ctx) {
  const char* op = (const char*)tpu_lower_data(ctx);
  static const int idx[2] = {0, 1};
  tpu_dtype_t d = tpu_lower_result_type(ctx, idx, op ? 2 : 1);
  if (is_float(d) || tpu_dtype_is_complex(d))
    return tpu_lower_decline(ctx, "bitwise op on %s", tpu_dtype_name(d));
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_value_t x = operand(ctx, 0, d);
  if (!op) return finish(ctx, un(b, "stablehlo.not", x));
  return finish(ctx, tpu_emit_binary(b, op, x, operand(ctx, 1, d)));
}

/* isnan / isinf / isposinf / isneginf / signbit (data: which): bool
 * results; integers are never NaN or infinite. (isfinite decomposes into
 * isnan/abs/ne.) */
typedef enum { IS_NAN, IS_INF, IS_POSINF, IS_NEGINF, SIGN_BIT } float_class_t;

static tpu_status_t lower_float_class(tpu_lower_ctx_t* ctx) {
  float_class_t which = (float_class_t)tpu_lower_data(ctx);
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_value_t x = tpu_lower_tensor(ctx, 0);
  tpu_dtype_t d = tpu_hlo_value_type(b, x).dtype;
  if (tpu_dtype_is_complex(d)) return tpu_lower_decline(ctx, "complex input");
  if (!is_float(d)) {
    tpu_hlo_type_t out = tpu_lower_output_type(ctx, 0);
    if (which == SIGN_BIT) return finish(ctx, cmp(b, "LT", x, tpu_emit_splat(b, x, 0)));
    return finish(ctx, tpu_emit_const_like(b, &out, 0));
  }
  tpu_hlo_value_t inf = tpu_emit_splat(b, x, INFINITY);
  switch (which) {
    case IS_NAN: return finish(ctx, is_nan(b, x));
    case IS_INF: return finish(ctx, cmp(b, "EQ", un(b, "stablehlo.abs", x), inf));
    case IS_POSINF: return finish(ctx, cmp(b, "EQ", x, inf));
    case IS_NEGINF: return finish(ctx, cmp(b, "EQ", x, tpu_emit_splat(b, x, -INFINITY)));
    default: return finish(ctx, sign_bit(b, x));
  }
}
/* maximum / minimum, and fmax / fmin (IGNORE_NAN); data: the flags. */
enum { MAXIMUM = 1, IGNORE_NAN = 2 };

static tpu_status_t lower_min_max(tpu_lower_ctx_t* ctx) {
  bool is_max = tpu_lower_data(ctx) & MAXIMUM, ignore_nan = tpu_lower_data(ctx) & IGNORE_NAN;
  tpu_dtype_t d = binary_dtype(ctx);
  if (tpu_dtype_is_complex(d)) return tpu_lower_decline(ctx, "complex min/max");
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_value_t x = operand(ctx, 0, d), y = operand(ctx, 1, d);
  tpu_hlo_value_t r = is_max ? max_nan(b, x, y) : min_nan(b, x, y);
  /* fmax / fmin: a NaN loses to a number. */
  if (ignore_nan && is_float(d)) r = sel(b, is_nan(b, x), y, sel(b, is_nan(b, y), x, r));
  return finish(ctx, r);
}

/* clamp(self, min?, max?) (Scalar or Tensor bounds), clamp_min, clamp_max:
 * min then max, NaN propagating from every operand, in the common dtype.
 * data: the bounds the op takes, which follow self in that order. */
enum { CLAMP_MIN = 1, CLAMP_MAX = 2 };

static tpu_status_t lower_clamp(tpu_lower_ctx_t* ctx) {
  intptr_t bounds = tpu_lower_data(ctx);
  int min_arg = bounds & CLAMP_MIN ? 1 : 0, max_arg = bounds & CLAMP_MAX ? min_arg + 1 : 0;
  int idx[3] = {0}, n = 1;
  if (min_arg > 0 && present(ctx, min_arg)) idx[n++] = min_arg;
  if (max_arg > 0 && present(ctx, max_arg)) idx[n++] = max_arg;
  tpu_dtype_t d = tpu_lower_result_type(ctx, idx, n);
  /* CPU clamps bools only by one tensor bound (clamp_min.Tensor,
   * clamp_max.Tensor, clamp.Tensor with one bound): maximum / minimum.
   * Its scalar and two-bound kernels refuse bool; the fallback raises
   * that. */
  const char* overload = strchr(tpu_lower_op_name(ctx), '.');
  bool bool_ok = d == TPU_DTYPE_BOOL && n == 2 &&
                 (tpu_lower_arg(ctx, idx[1])->kind == TPU_ARG_TENSOR ||
                  (overload && strncmp(overload, ".Tensor", 7) == 0));
  if ((d == TPU_DTYPE_BOOL && !bool_ok) || tpu_dtype_is_complex(d))
    return tpu_lower_decline(ctx, "clamp of %s", tpu_dtype_name(d));
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_value_t r = operand(ctx, 0, d);
  if (min_arg > 0 && present(ctx, min_arg)) r = max_nan(b, r, operand(ctx, min_arg, d));
  if (max_arg > 0 && present(ctx, max_arg)) r = min_nan(b, r, operand(ctx, max_arg, d));
  return finish(ctx, r);
}

/* Shifts, PyTorch's rules: a shift by a negative amount or by the bit width
 * or more gives 0 (left, data 1), or the sign fill (right, signed types). */
static tpu_status_t lower_shift(tpu_lower_ctx_t* ctx) {
  bool left = tpu_lower_data(ctx);
  tpu_dtype_t d = binary_dtype(ctx);
  if (!tpu_dtype_is_integral(d)) return tpu_lower_decline(ctx, "shift of %s", tpu_dtype_name(d));
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_value_t x = operand(ctx, 0, d), y = operand(ctx, 1, d);
  bool is_unsigned = d == TPU_DTYPE_UINT8;
  double bits = 8.0 * (double)tpu_dtype_size(d);
  tpu_hlo_value_t over = cmp(b, "GE", y, tpu_emit_splat(b, y, bits));
  if (!is_unsigned) over = tpu_emit_binary(b, "stablehlo.or", over, cmp(b, "LT", y, tpu_emit_splat(b, y, 0)));
  tpu_hlo_value_t safe = sel(b, over, tpu_emit_splat(b, y, 0), y);
  if (left)
    return finish(ctx, sel(b, over, tpu_emit_splat(b, x, 0),
                           tpu_emit_binary(b, "stablehlo.shift_left", x, safe)));
  const char* op = is_unsigned ? "stablehlo.shift_right_logical" : "stablehlo.shift_right_arithmetic";
  tpu_hlo_value_t fill = is_unsigned ? tpu_emit_splat(b, x, 0)
                                     : tpu_emit_binary(b, op, x, tpu_emit_splat(b, y, bits - 1));
  return finish(ctx, sel(b, over, fill, tpu_emit_binary(b, op, x, safe)));
}

/* isin(elements, test_elements, *, assume_unique, invert) and its Scalar
 * forms: every element against every test element in their common dtype
 * (CPU promotes as for eq: uint8 elements wrap an int test value), then an
 * OR over the test elements; NaN is in nothing. That is CPU's brute-force
 * kernel; its sorting kernel (large test sets) gives the same booleans.
 * Past 2^26 comparisons the lowering declines (the fallback sorts). CPU
 * refuses bool and complex operands; so does the fallback. */
static tpu_status_t lower_isin(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  int64_t count[2];
  for (int i = 0; i < 2; i++) {
    const tpu_lower_arg_t* a = tpu_lower_arg(ctx, i);
    if (a->kind != TPU_ARG_TENSOR && a->kind != TPU_ARG_SCALAR)
      return tpu_lower_decline(ctx, "isin of a %s argument", "non-tensor");
    if (a->type.dtype == TPU_DTYPE_BOOL || tpu_dtype_is_complex(a->type.dtype))
      return tpu_lower_decline(ctx, "isin of %s", tpu_dtype_name(a->type.dtype));
    count[i] = 1;
    for (int k = 0; k < a->type.rank; k++) count[i] *= a->type.dims[k];
  }
  tpu_dtype_t d = binary_dtype(ctx);
  if (d == TPU_DTYPE_BOOL || tpu_dtype_is_complex(d))
    return tpu_lower_decline(ctx, "isin of %s", tpu_dtype_name(d));
  if (count[0] * count[1] > ((int64_t)1 << 26))
    return tpu_lower_decline(ctx, "isin of %lld x %lld elements", (long long)count[0],
                             (long long)count[1]);
  tpu_hlo_value_t v[2];
  for (int i = 0; i < 2; i++) {
    const tpu_lower_arg_t* a = tpu_lower_arg(ctx, i);
    tpu_hlo_value_t x = a->kind == TPU_ARG_TENSOR ? tpu_emit_convert(b, tpu_lower_tensor(ctx, i), d)
                                                  : tpu_lower_scalar(ctx, i, d);
    const int64_t shape[2] = {count[0], 1};
    v[i] = i == 0 ? tpu_emit_reshape(b, x, shape, 2) : tpu_emit_reshape(b, x, &count[1], 1);
  }
  tpu_hlo_type_t pairs = tpu_hlo_type_make(d, 2, count);
  tpu_hlo_value_t eq = cmp(b, "EQ", tpu_emit_broadcast_to(b, v[0], &pairs),
                           tpu_emit_broadcast_to(b, v[1], &pairs));
  const int64_t over = 1;
  tpu_hlo_value_t any = tpu_emit_reduce(b, eq, tpu_emit_const(b, TPU_DTYPE_BOOL, 0), &over, 1,
                                        "stablehlo.or");
  const tpu_lower_arg_t* invert = tpu_lower_arg(ctx, 3);
  if (invert->kind == TPU_ARG_BOOL && invert->i) any = un(b, "stablehlo.not", any);
  tpu_hlo_type_t out = tpu_lower_output_type(ctx, 0);
  return finish(ctx, tpu_emit_reshape(b, any, out.dims, out.rank));
}

const tpu_lowering_t tpu_lowerings_compare[] = {
    {"eq", lower_compare, 0, (intptr_t)"EQ"},
    {"isin", lower_isin, 0},
    {"ne", lower_compare, 0, (intptr_t)"NE"},
    {"lt", lower_compare, 0, (intptr_t)"LT"},
    {"le", lower_compare, 0, (intptr_t)"LE"},
    {"gt", lower_compare, 0, (intptr_t)"GT"},
    {"ge", lower_compare, 0, (intptr_t)"GE"},
    {"logical_and", lower_logical, 0, (intptr_t)"stablehlo.and"},
    {"logical_or", lower_logical, 0, (intptr_t)"stablehlo.or"},
    {"logical_xor", lower_logical, 0, (intptr_t)"stablehlo.xor"},
    {"logical_not", lower_logical, 0},
    {"bitwise_and", lower_bitwise, 0, (intptr_t)"stablehlo.and"},
    {"bitwise_or", lower_bitwise, 0, (intptr_t)"stablehlo.or"},
    {"bitwise_xor", lower_bitwise, 0, (intptr_t)"stablehlo.xor"},
    {"bitwise_not", lower_bitwise, 0},
    {"__lshift__", lower_shift, 0, 1},
    {"__ilshift__", lower_shift, 0, 1},
    {"bitwise_left_shift", lower_shift, 0, 1},
    {"__rshift__", lower_shift, 0},
    {"__irshift__", lower_shift, 0},
    {"bitwise_right_shift", lower_shift, 0},
    {"isnan", lower_float_class, 0, IS_NAN},
    {"isinf", lower_float_class, 0, IS_INF},
    {"isposinf", lower_float_class, 0, IS_POSINF},
    {"isneginf", lower_float_class, 0, IS_NEGINF},
    {"signbit", lower_float_class, 0, SIGN_BIT},
    {"maximum", lower_min_max, 0, MAXIMUM},
    {"minimum", lower_min_max, 0},
    {"fmax", lower_min_max, 0, MAXIMUM | IGNORE_NAN},
    {"fmin", lower_min_max, 0, IGNORE_NAN},
    {"clamp", lower_clamp, 0, CLAMP_MIN | CLAMP_MAX},
    {"clamp_min", lower_clamp, 0, CLAMP_MIN},
    {"clamp_max", lower_clamp, 0, CLAMP_MAX},
};
const size_t tpu_lowerings_compare_count =
    sizeof tpu_lowerings_compare / sizeof tpu_lowerings_compare[0];
