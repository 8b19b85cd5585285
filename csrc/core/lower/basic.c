/* Basic family: arithmetic (+ - * /), mm, fill_ and zero_: the ops every
 * program touches first. */
#include <string.h>

#include "emit.h"
#include "families.h"
#include "lowering.h"

/* The dtype TensorIterator computes in: the operands' common dtype. It
 * differs from the output's only for an out= of another dtype (float16
 * inputs into a float64 out= add in float16, then convert). */
static tpu_dtype_t compute_dtype(tpu_lower_ctx_t* ctx) {
  static const int idx[2] = {0, 1};
  return tpu_lower_result_type(ctx, idx, 2);
}

static bool is_half(tpu_dtype_t d) { return d == TPU_DTYPE_FLOAT16 || d == TPU_DTYPE_BFLOAT16; }
/* PyTorch's opmath: half types compute in float32. */
static tpu_dtype_t opmath(tpu_dtype_t d) { return is_half(d) ? TPU_DTYPE_FLOAT32 : d; }

/* Operand i in `dtype`'s opmath and the output's shape: a tensor is cast
 * to `dtype` first; a Scalar goes straight to the opmath dtype, as CPU
 * kernels keep it (x_f16 * 3.3 multiplies by 3.3f, not by 3.3 rounded to
 * float16). */
static tpu_hlo_value_t operand_as(tpu_lower_ctx_t* ctx, int i, tpu_dtype_t dtype) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_type_t out = tpu_lower_output_type(ctx, 0);
  out.dtype = dtype;
  const tpu_lower_arg_t* a = tpu_lower_arg(ctx, i);
  tpu_hlo_value_t v = a->kind == TPU_ARG_TENSOR ? tpu_emit_cast_to(b, tpu_lower_tensor(ctx, i), &out)
                                                : tpu_lower_scalar(ctx, i, opmath(dtype));
  out.dtype = opmath(dtype);
  return tpu_emit_cast_to(b, v, &out);
}

/* add / sub: self (+|-) alpha * other; rsub: other - alpha * self. The row
 * says which. */
enum { ADD, SUB, RSUB };

static tpu_status_t lower_add_sub(tpu_lower_ctx_t* ctx) {
  const char* op = tpu_lower_data(ctx) == ADD ? "stablehlo.add" : "stablehlo.subtract";
  bool swap = tpu_lower_data(ctx) == RSUB;
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_type_t out = tpu_lower_output_type(ctx, 0);
  tpu_hlo_type_t t = out;
  t.dtype = compute_dtype(ctx);
  /* Bool addition is CPU's bool(self + bool(alpha) * other): self | (alpha
   * & other). Bool inputs into a wider out= convert the bool sum. */
  if (t.dtype == TPU_DTYPE_BOOL && strcmp(op, "stablehlo.add") == 0) {
    tpu_hlo_value_t x = operand_as(ctx, 0, TPU_DTYPE_BOOL);
    tpu_hlo_value_t y = operand_as(ctx, 1, TPU_DTYPE_BOOL);
    const tpu_lower_arg_t* alpha = tpu_lower_arg(ctx, 2);
    if (alpha->kind == TPU_ARG_SCALAR || alpha->kind == TPU_ARG_INT || alpha->kind == TPU_ARG_BOOL ||
        alpha->kind == TPU_ARG_FLOAT)
      y = tpu_emit_binary(b, "stablehlo.and", y,
                          tpu_emit_broadcast_to(b, tpu_lower_scalar(ctx, 2, TPU_DTYPE_BOOL), &t));
    tpu_lower_set_output(ctx, 0, tpu_emit_convert(b, tpu_emit_binary(b, "stablehlo.or", x, y), out.dtype));
    return NULL;
  }
  /* A non-bool sum into a bool out= is refused by CPU (the fallback raises
   * its error), as is bool subtraction below. */
  if (out.dtype == TPU_DTYPE_BOOL || t.dtype == TPU_DTYPE_BOOL)
    return tpu_lower_decline(ctx, "bool arithmetic");
  /* CPU refuses a bool operand of a subtraction (use ~ / logical_not);
   * the fallback raises its error. */
  if (strcmp(op, "stablehlo.subtract") == 0)
    for (int i = 0; i < 2; i++)
      if (tpu_lower_arg(ctx, i)->type.dtype == TPU_DTYPE_BOOL &&
          (tpu_lower_arg(ctx, i)->kind == TPU_ARG_TENSOR || tpu_lower_arg(ctx, i)->kind == TPU_ARG_SCALAR))
        return tpu_lower_decline(ctx, "subtraction of a bool");
  tpu_hlo_value_t x = operand_as(ctx, swap ? 1 : 0, t.dtype);
  tpu_hlo_value_t y = operand_as(ctx, swap ? 0 : 1, t.dtype);
  tpu_dtype_t common = t.dtype;
  t.dtype = opmath(common);
  if (tpu_lower_arg(ctx, 2)->kind == TPU_ARG_SCALAR ||
      tpu_lower_arg(ctx, 2)->kind == TPU_ARG_INT || tpu_lower_arg(ctx, 2)->kind == TPU_ARG_FLOAT) {
    /* CPU's kernel reads alpha as the operands' dtype (a bfloat16 alpha
     * is rounded), then computes in opmath. */
    tpu_hlo_value_t alpha = tpu_emit_convert(b, tpu_lower_scalar(ctx, 2, common), t.dtype);
    alpha = tpu_emit_broadcast_to(b, alpha, &t);
    y = tpu_emit_binary(b, "stablehlo.multiply", y, alpha);
  }
  tpu_hlo_value_t r = tpu_emit_convert(b, tpu_emit_binary(b, op, x, y), common);
  tpu_lower_set_output(ctx, 0, tpu_emit_convert(b, r, out.dtype));
  return NULL;
}

static tpu_status_t lower_mul(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_type_t out = tpu_lower_output_type(ctx, 0);
  tpu_dtype_t d = compute_dtype(ctx);
  tpu_hlo_value_t x = operand_as(ctx, 0, d), y = operand_as(ctx, 1, d);
  const char* op = d == TPU_DTYPE_BOOL ? "stablehlo.and" : "stablehlo.multiply";
  tpu_hlo_value_t r = tpu_emit_convert(b, tpu_emit_binary(b, op, x, y), d);
  tpu_lower_set_output(ctx, 0, tpu_emit_convert(b, r, out.dtype));
  return NULL;
}

/* div, with rounding_mode None / "trunc" / "floor". */
static tpu_status_t lower_div(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_type_t out = tpu_lower_output_type(ctx, 0);
  const tpu_lower_arg_t* mode = tpu_lower_arg(ctx, 2);
  const char* rounding = mode->kind == TPU_ARG_STRING ? mode->str : NULL;
  if (out.dtype == TPU_DTYPE_BOOL) return tpu_lower_decline(ctx, "bool division");
  /* CPU has no rounded complex division (it raises; so does the fallback). */
  if (rounding && tpu_dtype_is_complex(out.dtype)) return tpu_lower_decline(ctx, "rounded complex division");
  /* The operands' common dtype, except that true division of integers
   * computes in the (float) output dtype. */
  tpu_dtype_t common = compute_dtype(ctx);
  bool common_float = tpu_dtype_is_floating(common) || tpu_dtype_is_complex(common);
  if (common_float || rounding) out.dtype = common;
  if (out.dtype == TPU_DTYPE_BOOL) return tpu_lower_decline(ctx, "bool division");
  tpu_hlo_value_t x = operand_as(ctx, 0, out.dtype), y = operand_as(ctx, 1, out.dtype);
  /* Half types divide and round in float32, then round once (PyTorch's CPU
   * kernels do; rounding the quotient first can flip floor()). */
  tpu_hlo_type_t result_type = out;
  out.dtype = opmath(out.dtype); /* operand_as gave opmath values */
  tpu_hlo_value_t q = tpu_emit_binary(b, "stablehlo.divide", x, y);
  if (rounding && tpu_dtype_is_floating(out.dtype)) {
    /* floor: floor(x / y) differs at infinities and where x / y rounds up
     * to an integer; PyTorch uses floor_divide's formula. */
    if (strcmp(rounding, "floor") == 0) q = tpu_emit_floor_divide_float(b, x, y);
    else if (strcmp(rounding, "trunc") == 0) {
      /* trunc = sign(q) * floor(|q|) */
      tpu_hlo_value_t mag = tpu_emit_unary(b, "stablehlo.floor", tpu_emit_unary(b, "stablehlo.abs", q));
      q = tpu_emit_binary(b, "stablehlo.multiply", tpu_emit_unary(b, "stablehlo.sign", q), mag);
    }
  } else if (rounding && strcmp(rounding, "floor") == 0) {
    /* Integer division truncates; floor differs when the remainder is
     * nonzero and the operands' signs differ. */
    tpu_hlo_value_t r = tpu_emit_binary(b, "stablehlo.remainder", x, y);
    tpu_hlo_value_t zero = tpu_emit_const_like(b, &out, 0);
    tpu_hlo_value_t r_nonzero = tpu_emit_compare(b, "NE", r, zero);
    tpu_hlo_value_t signs_differ = tpu_emit_compare(b, "NE", tpu_emit_compare(b, "LT", r, zero),
                                                    tpu_emit_compare(b, "LT", y, zero));
    tpu_hlo_value_t adjust = tpu_emit_binary(b, "stablehlo.and", r_nonzero, signs_differ);
    tpu_hlo_value_t one = tpu_emit_const_like(b, &out, 1);
    q = tpu_emit_select(b, adjust, tpu_emit_binary(b, "stablehlo.subtract", q, one), q);
  } else if (!rounding && !tpu_dtype_is_floating(out.dtype) && !tpu_dtype_is_complex(out.dtype)) {
    return tpu_lower_decline(ctx, "true division into an integer output");
  }
  q = tpu_emit_convert(b, q, result_type.dtype); /* rounds a half quotient once */
  tpu_lower_set_output(ctx, 0, tpu_emit_convert(b, q, tpu_lower_output_type(ctx, 0).dtype));
  return NULL;
}

/* mm: [m,k] @ [k,n]; half types accumulate in float32 like PyTorch's CPU. */
static tpu_status_t lower_mm(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_type_t out = tpu_lower_output_type(ctx, 0);
  /* CPU refuses two dtypes; its kernel (on the fallback) raises that. */
  if (tpu_lower_arg(ctx, 0)->type.dtype != tpu_lower_arg(ctx, 1)->type.dtype)
    return tpu_lower_decline(ctx, "matmul of two dtypes");
  /* CPU has no bool kernel (NotImplementedError). */
  if (tpu_lower_arg(ctx, 0)->type.dtype == TPU_DTYPE_BOOL) return tpu_lower_decline(ctx, "matmul of bool");
  bool half = out.dtype == TPU_DTYPE_FLOAT16 || out.dtype == TPU_DTYPE_BFLOAT16;
  tpu_dtype_t acc = half ? TPU_DTYPE_FLOAT32 : out.dtype;
  tpu_hlo_value_t operands[2] = {tpu_emit_convert(b, tpu_lower_tensor(ctx, 0), acc),
                                 tpu_emit_convert(b, tpu_lower_tensor(ctx, 1), acc)};
  tpu_hlo_type_t acc_type = out;
  acc_type.dtype = acc;
  tpu_hlo_value_t r = tpu_hlo_op(b, "stablehlo.dot_general", operands, 2, acc_type,
                                 "dot_dimension_numbers = #stablehlo.dot<"
                                 "lhs_contracting_dimensions = [1], "
                                 "rhs_contracting_dimensions = [0]>");
  /* A sum of one product keeps XLA's -0.0 where CPU's gemm does (float32
   * and float64 of more than one row and column); CPU's half-type gemm and
   * its vector paths (one row or column) sum from +0.0 (fuzz seed
   * 1230705: bfloat16 [4,1] @ [1,4]). */
  const tpu_hlo_type_t* l = &tpu_lower_arg(ctx, 0)->type;
  if (l->rank == 2 && l->dims[1] == 1 && out.rank == 2 &&
      (half || out.dims[0] == 1 || out.dims[1] == 1))
    r = tpu_emit_positive_zeros(b, r);
  tpu_lower_set_output(ctx, 0, tpu_emit_convert(b, r, out.dtype));
  return NULL;
}

/* fill_(self, value): value is a Scalar or a 0-dim tensor. */
static tpu_status_t lower_fill(tpu_lower_ctx_t* ctx) {
  tpu_hlo_type_t out = tpu_lower_output_type(ctx, 0);
  tpu_lower_set_output(ctx, 0, tpu_emit_broadcast_to(tpu_lower_builder(ctx),
                                                     tpu_lower_scalar(ctx, 1, out.dtype), &out));
  return NULL;
}

static tpu_status_t lower_zero(tpu_lower_ctx_t* ctx) {
  tpu_hlo_type_t out = tpu_lower_output_type(ctx, 0);
  tpu_lower_set_output(ctx, 0, tpu_emit_const_like(tpu_lower_builder(ctx), &out, 0));
  return NULL;
}

/* copy_(self, src): src converted and broadcast into self (the engine
 * writes it through self's view). Also tpu->tpu copies and view writes. */
static tpu_status_t lower_copy(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_type_t out = tpu_lower_output_type(ctx, 0);
  tpu_hlo_value_t src = tpu_lower_tensor(ctx, 1);
  tpu_dtype_t from = tpu_hlo_value_type(b, src).dtype;
  /* stablehlo.convert saturates float -> small int; PyTorch's cast wraps
   * (-3.7 -> uint8 253), which going through int64 reproduces. */
  if (tpu_dtype_is_floating(from) && tpu_dtype_is_integral(out.dtype) &&
      (tpu_dtype_size(out.dtype) < 4 || out.dtype == TPU_DTYPE_UINT32))
    src = tpu_emit_convert(b, src, TPU_DTYPE_INT64);
  /* float -> uint64: negatives wrap through int64 (-1.0 -> 2^64-1, as on
   * CPU); the rest convert directly, so values past 2^63 stay exact. */
  if (tpu_dtype_is_floating(from) && out.dtype == TPU_DTYPE_UINT64) {
    tpu_hlo_type_t st = tpu_hlo_value_type(b, src);
    tpu_hlo_value_t is_neg = tpu_emit_compare(b, "LT", src, tpu_emit_const_like(b, &st, 0.0));
    tpu_hlo_value_t wrapped = tpu_emit_convert(b, tpu_emit_convert(b, src, TPU_DTYPE_INT64), out.dtype);
    src = tpu_emit_select(b, is_neg, wrapped, tpu_emit_convert(b, src, out.dtype));
  }
  tpu_lower_set_output(ctx, 0, tpu_emit_cast_to(b, src, &out));
  return NULL;
}

const tpu_lowering_t tpu_lowerings_basic[] = {
    {"copy", lower_copy, 0},
    {"add", lower_add_sub, 0, ADD},  {"sub", lower_add_sub, 0, SUB}, {"mul", lower_mul, 0},
    {"div", lower_div, 0},           {"mm", lower_mm, 0},             {"fill", lower_fill, 0},
    {"zero", lower_zero, 0},         {"rsub", lower_add_sub, 0, RSUB},
};
const size_t tpu_lowerings_basic_count = sizeof tpu_lowerings_basic / sizeof tpu_lowerings_basic[0];
