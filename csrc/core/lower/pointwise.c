/* Pointwise family: elementwise float math and special functions, abs /
 * neg / sign and rounding, where, pow, remainder / fmod / floor_divide,
 * atan2, copysign, hypot, logaddexp, lerp, addcmul / addcdiv, nan_to_num,
 * masked_fill. Activations and their backwards are in activation.c;
 * comparisons, logical, bitwise and shift ops, min / max and clamp in
 * compare.c; the helpers the three share in pointwise.h. (Dtype conversion
 * reaches the backend as copy_, in basic.c: _to_copy is decomposed before
 * it.)
 *
 * Numerics follow PyTorch's CPU kernels: half and bfloat16 compute in
 * float32 and round once at the end (PyTorch's opmath type); Python scalars
 * are first cast to the common dtype, as TensorIterator does; integer ops
 * keep C/Python integer semantics exactly. StableHLO lacks a few functions
 * (erf, erfinv, asin, sinh, ...): those use CHLO ops, which every PJRT
 * compiler legalizes (JAX emits them too). */
#include <float.h>
#include <math.h>
#include <string.h>

#include "emit.h"
#include "families.h"
#include "lowering.h"
#include "pointwise.h"

/* trunc for floats: round toward zero. */
static tpu_hlo_value_t trunc_f(tpu_hlo_builder_t* b, tpu_hlo_value_t x) {
  return sel(b, cmp(b, "LT", x, tpu_emit_splat(b, x, 0)), un(b, "stablehlo.ceil", x),
             un(b, "stablehlo.floor", x));
}

/* The common dtype of operands 0 and 1, integer and bool results promoted
 * to the output's float dtype (ops like atan2 on integers). */
static tpu_dtype_t float_dtype(tpu_lower_ctx_t* ctx) {
  tpu_dtype_t d = binary_dtype(ctx);
  if (!is_float(d) && !tpu_dtype_is_complex(d)) {
    tpu_dtype_t out = tpu_lower_output_type(ctx, 0).dtype;
    d = is_float(out) ? out : TPU_DTYPE_FLOAT32;
  }
  return d;
}

/* ---- float math: one function of x, computed in the math dtype ---------- */

typedef tpu_hlo_value_t (*math_fn_t)(tpu_hlo_builder_t* b, tpu_hlo_value_t x);

/* Unary float op, x -> fn(x), or the one StableHLO / CHLO op `op` when fn
 * is NULL: integer and bool inputs become the (float) output dtype; a float
 * input computes in its own dtype, then converts (a float16 input into a
 * float64 out= is computed in float16, as on the CPU). */
static tpu_status_t unary_math(tpu_lower_ctx_t* ctx, math_fn_t fn, const char* op) {
  tpu_dtype_t out = tpu_lower_output_type(ctx, 0).dtype;
  if (!is_float(out)) return tpu_lower_decline(ctx, "%s output", tpu_dtype_name(out));
  tpu_dtype_t in = tpu_lower_arg(ctx, 0)->type.dtype;
  tpu_dtype_t d = is_float(in) ? in : out;
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_value_t x = tpu_emit_convert(b, tpu_lower_tensor(ctx, 0), d);
  x = tpu_emit_convert(b, x, math_dtype(d));
  return finish(ctx, tpu_emit_convert(b, fn ? fn(b, x) : un(b, op, x), d));
}
/* Rows: data is the math_fn_t (lower_math) or the op's name (lower_math_op). */
static tpu_status_t lower_math(tpu_lower_ctx_t* ctx) {
  return unary_math(ctx, (math_fn_t)tpu_lower_data(ctx), NULL);
}
static tpu_status_t lower_math_op(tpu_lower_ctx_t* ctx) {
  return unary_math(ctx, NULL, (const char*)tpu_lower_data(ctx));
}

/* tanh; in float32 XLA's approximation is 1.0 from |x| ~ 7.9 on, where
 * tanh(x) still rounds below 1 up to |x| ~ 9 (CPU's tanh(8) is 0.99999976:
 * truncated to an integer, 0, not 1). From |x| = 4 on,
 * 1 - 2 / (exp(2|x|) + 1) with x's sign is within an ulp: the subtracted
 * term is small, so exp's error barely reaches the result. */
tpu_hlo_value_t tpu_emit_tanh(tpu_hlo_builder_t* b, tpu_hlo_value_t x) {
  tpu_hlo_value_t r = un(b, "stablehlo.tanh", x);
  if (tpu_hlo_value_type(b, x).dtype != TPU_DTYPE_FLOAT32) return r;
  tpu_hlo_value_t a = un(b, "stablehlo.abs", x);
  tpu_hlo_value_t e = un(b, "stablehlo.exponential", tpu_emit_add(b, a, a));
  tpu_hlo_value_t tail = tpu_emit_sub(
      b, tpu_emit_splat(b, x, 1),
      tpu_emit_div(b, tpu_emit_splat(b, x, 2), tpu_emit_add(b, e, tpu_emit_splat(b, x, 1))));
  tail = sel(b, sign_bit(b, x), un(b, "stablehlo.negate", tail), tail);
  return sel(b, cmp(b, "GE", a, tpu_emit_splat(b, x, 4)), tail, r);
}

/* erf; in float32 (and the half types' float32 math) erf(x) rounds to
 * +-1 beyond |x| ~ 3.914, where CHLO's approximation stays a little under
 * 1: saturate there, as libm's erff does. */
tpu_hlo_value_t tpu_emit_erf(tpu_hlo_builder_t* b, tpu_hlo_value_t x) {
  tpu_hlo_value_t r = un(b, "chlo.erf", x);
  if (tpu_hlo_value_type(b, x).dtype != TPU_DTYPE_FLOAT32) return r;
  tpu_hlo_value_t big = cmp(b, "GE", un(b, "stablehlo.abs", x), tpu_emit_splat(b, x, 3.92));
  tpu_hlo_value_t one = sel(b, sign_bit(b, x), tpu_emit_splat(b, x, -1), tpu_emit_splat(b, x, 1));
  return sel(b, big, one, r);
}

static tpu_hlo_value_t f_exp2(tpu_hlo_builder_t* b, tpu_hlo_value_t x) {
  return tpu_emit_binary(b, "stablehlo.power", tpu_emit_splat(b, x, 2), x);
}
static tpu_hlo_value_t f_log2(tpu_hlo_builder_t* b, tpu_hlo_value_t x) {
  return tpu_emit_div(b, un(b, "stablehlo.log", x), tpu_emit_splat(b, x, M_LN2));
}
static tpu_hlo_value_t f_log10(tpu_hlo_builder_t* b, tpu_hlo_value_t x) {
  return tpu_emit_div(b, un(b, "stablehlo.log", x), tpu_emit_splat(b, x, M_LN10));
}
static tpu_hlo_value_t f_atan(tpu_hlo_builder_t* b, tpu_hlo_value_t x) {
  return tpu_emit_binary(b, "stablehlo.atan2", x, tpu_emit_splat(b, x, 1));
}
static tpu_hlo_value_t f_reciprocal(tpu_hlo_builder_t* b, tpu_hlo_value_t x) {
  return tpu_emit_div(b, tpu_emit_splat(b, x, 1), x);
}
static tpu_hlo_value_t f_frac(tpu_hlo_builder_t* b, tpu_hlo_value_t x) {
  return tpu_emit_sub(b, x, trunc_f(b, x));
}
/* x * tanh(softplus(x)), softplus without PyTorch's threshold (as mish). */
static tpu_hlo_value_t f_mish(tpu_hlo_builder_t* b, tpu_hlo_value_t x) {
  tpu_hlo_value_t softplus = un(b, "stablehlo.log_plus_one", un(b, "stablehlo.exponential", x));
  return tpu_emit_mul(b, x, tpu_emit_tanh(b, softplus));
}
static tpu_hlo_value_t f_silu(tpu_hlo_builder_t* b, tpu_hlo_value_t x) {
  return tpu_emit_mul(b, x, un(b, "stablehlo.logistic", x));
}
/* min(max(x + 3, 0), 6) / 6, NaN propagating like std::min/std::max. */
static tpu_hlo_value_t f_hardsigmoid(tpu_hlo_builder_t* b, tpu_hlo_value_t x) {
  tpu_hlo_value_t r = max_nan(b, tpu_emit_add(b, x, tpu_emit_splat(b, x, 3)), tpu_emit_splat(b, x, 0));
  return tpu_emit_div(b, min_nan(b, r, tpu_emit_splat(b, x, 6)), tpu_emit_splat(b, x, 6));
}
static tpu_hlo_value_t f_hardswish(tpu_hlo_builder_t* b, tpu_hlo_value_t x) {
  tpu_hlo_value_t r = max_nan(b, tpu_emit_add(b, x, tpu_emit_splat(b, x, 3)), tpu_emit_splat(b, x, 0));
  return tpu_emit_div(b, tpu_emit_mul(b, x, min_nan(b, r, tpu_emit_splat(b, x, 6))), tpu_emit_splat(b, x, 6));
}

/* entr: -x log x for x > 0, 0 at 0, -inf below, NaN kept. */
static tpu_hlo_value_t f_entr(tpu_hlo_builder_t* b, tpu_hlo_value_t x) {
  tpu_hlo_value_t zero = tpu_emit_splat(b, x, 0);
  tpu_hlo_value_t r = un(b, "stablehlo.negate", tpu_emit_mul(b, x, un(b, "stablehlo.log", x)));
  r = sel(b, cmp(b, "EQ", x, zero), zero, r);
  return sel(b, cmp(b, "LT", x, zero), tpu_emit_splat(b, x, -INFINITY), r);
}

/* sinc: sin(pi x) / (pi x), 1 at 0. */
static tpu_hlo_value_t f_sinc(tpu_hlo_builder_t* b, tpu_hlo_value_t x) {
  tpu_hlo_value_t px = tpu_emit_mul(b, tpu_emit_splat(b, x, M_PI), x);
  return sel(b, cmp(b, "EQ", x, tpu_emit_splat(b, x, 0)), tpu_emit_splat(b, x, 1), tpu_emit_div(b, un(b, "stablehlo.sine", px), px));
}

/* digamma: PyTorch gives -inf at +0 and +inf at -0 (CHLO gives NaN). */
tpu_hlo_value_t tpu_emit_digamma(tpu_hlo_builder_t* b, tpu_hlo_value_t x) {
  tpu_hlo_value_t at_zero = sel(b, sign_bit(b, x), tpu_emit_splat(b, x, INFINITY), tpu_emit_splat(b, x, -INFINITY));
  return sel(b, cmp(b, "EQ", x, tpu_emit_splat(b, x, 0)), at_zero, un(b, "chlo.digamma", x));
}

/* angle of a real number: pi for negatives, 0 otherwise, NaN kept. */
static tpu_hlo_value_t f_angle(tpu_hlo_builder_t* b, tpu_hlo_value_t x) {
  tpu_hlo_value_t r = sel(b, cmp(b, "LT", x, tpu_emit_splat(b, x, 0)), tpu_emit_splat(b, x, M_PI), tpu_emit_splat(b, x, 0));
  return sel(b, is_nan(b, x), x, r);
}
/* angle of a complex number: atan2(imag, real), in its part type. */
static tpu_status_t lower_angle(tpu_lower_ctx_t* ctx) {
  const tpu_lower_arg_t* a = tpu_lower_arg(ctx, 0);
  if (a->kind != TPU_ARG_TENSOR || !tpu_dtype_is_complex(a->type.dtype)) return unary_math(ctx, f_angle, NULL);
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_value_t z = tpu_lower_tensor(ctx, 0);
  tpu_hlo_type_t pt = a->type;
  pt.dtype = tpu_dtype_complex_part(pt.dtype);
  tpu_hlo_value_t re = tpu_hlo_op(b, "stablehlo.real", &z, 1, pt, NULL);
  tpu_hlo_value_t im = tpu_hlo_op(b, "stablehlo.imag", &z, 1, pt, NULL);
  return finish(ctx, tpu_emit_binary(b, "stablehlo.atan2", im, re));
}

/* rsqrt: CPU's float16 / bfloat16 kernel is correctly rounded in its
 * vectorised loop but its scalar loop computes 1 / sqrt(x) in the half
 * type (sqrt rounded, then the quotient: 1 ulp off for 1 in 7 values).
 * TensorIterator runs contiguous tensors of fewer than 32 elements (every
 * x86 vector width) through the scalar loop only; those get its formula. */
static tpu_status_t lower_rsqrt(tpu_lower_ctx_t* ctx) {
  tpu_hlo_type_t out = tpu_lower_output_type(ctx, 0);
  tpu_dtype_t in = tpu_lower_arg(ctx, 0)->type.dtype;
  int64_t n = 1;
  for (int i = 0; i < out.rank; i++) n *= out.dims[i];
  if (in != out.dtype || (in != TPU_DTYPE_BFLOAT16 && in != TPU_DTYPE_FLOAT16) || n >= 32)
    return unary_math(ctx, NULL, "stablehlo.rsqrt");
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_value_t x = tpu_emit_convert(b, tpu_lower_tensor(ctx, 0), TPU_DTYPE_FLOAT32);
  tpu_hlo_value_t root = tpu_emit_convert(b, tpu_emit_convert(b, un(b, "stablehlo.sqrt", x), in),
                                          TPU_DTYPE_FLOAT32);
  tpu_hlo_type_t ft = tpu_hlo_value_type(b, root);
  tpu_hlo_value_t r = tpu_emit_binary(b, "stablehlo.divide", tpu_emit_const_like(b, &ft, 1.0), root);
  return finish(ctx, tpu_emit_convert(b, r, in));
}

/* ---- exact unary ops (any dtype they accept) ---------------------------- */

static tpu_status_t lower_abs(tpu_lower_ctx_t* ctx) {
  tpu_hlo_value_t x = tpu_lower_tensor(ctx, 0);
  tpu_dtype_t d = tpu_lower_arg(ctx, 0)->type.dtype;
  if (d == TPU_DTYPE_BOOL || tpu_dtype_is_complex(d))
    return tpu_lower_decline(ctx, "abs of %s", tpu_dtype_name(d));
  if (d == TPU_DTYPE_UINT8) return finish(ctx, x);
  return finish(ctx, un(tpu_lower_builder(ctx), "stablehlo.abs", x));
}

static tpu_status_t lower_neg(tpu_lower_ctx_t* ctx) {
  tpu_dtype_t d = tpu_lower_arg(ctx, 0)->type.dtype;
  if (d == TPU_DTYPE_BOOL) return tpu_lower_decline(ctx, "negation of bool");
  return finish(ctx, un(tpu_lower_builder(ctx), "stablehlo.negate", tpu_lower_tensor(ctx, 0)));
}

/* sign / sgn (real): PyTorch gives 0 for NaN and for unsigned compares
 * against zero, so build it from comparisons rather than stablehlo.sign. */
static tpu_status_t lower_sign(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_value_t x = tpu_lower_tensor(ctx, 0);
  tpu_dtype_t d = tpu_hlo_value_type(b, x).dtype;
  if (tpu_dtype_is_complex(d)) return tpu_lower_decline(ctx, "complex sign");
  if (d == TPU_DTYPE_BOOL) return finish(ctx, x);
  tpu_hlo_value_t zero = tpu_emit_splat(b, x, 0);
  tpu_hlo_value_t pos = tpu_emit_convert(b, cmp(b, "GT", x, zero), d);
  if (d == TPU_DTYPE_UINT8) return finish(ctx, pos);
  return finish(ctx, tpu_emit_sub(b, pos, tpu_emit_convert(b, cmp(b, "LT", x, zero), d)));
}

/* floor / ceil / trunc / round: the op, NULL for trunc; integers are
 * returned unchanged. */
static tpu_status_t rounding(tpu_lower_ctx_t* ctx, const char* op) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_value_t x = tpu_lower_tensor(ctx, 0);
  tpu_dtype_t d = tpu_hlo_value_type(b, x).dtype;
  if (tpu_dtype_is_complex(d)) return tpu_lower_decline(ctx, "complex rounding");
  /* CPU has no bool floor / ceil / trunc kernel (NotImplementedError). */
  if (d == TPU_DTYPE_BOOL) return tpu_lower_decline(ctx, "rounding of bool");
  if (!is_float(d)) return finish(ctx, x);
  return finish(ctx, op ? un(b, op, x) : trunc_f(b, x));
}
/* Rows: data is the op. */
static tpu_status_t lower_rounding(tpu_lower_ctx_t* ctx) {
  return rounding(ctx, (const char*)tpu_lower_data(ctx));
}

/* round(x) is half-to-even; round(x, decimals) scales by 10^|decimals| in
 * the math dtype like PyTorch's kernel (divide for negative decimals). */
static tpu_status_t lower_round(tpu_lower_ctx_t* ctx) {
  /* CPU has no bool kernel (NotImplementedError); the fallback raises it. */
  if (tpu_lower_arg(ctx, 0)->type.dtype == TPU_DTYPE_BOOL)
    return tpu_lower_decline(ctx, "round of bool");
  const tpu_lower_arg_t* dec = tpu_lower_arg(ctx, 1);
  int64_t decimals = dec->kind == TPU_ARG_INT ? dec->i : 0;
  if (decimals == 0) return rounding(ctx, "stablehlo.round_nearest_even");
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_dtype_t d = tpu_lower_arg(ctx, 0)->type.dtype;
  if (!is_float(d)) return tpu_lower_decline(ctx, "round with decimals on %s", tpu_dtype_name(d));
  tpu_hlo_value_t x = tpu_emit_convert(b, tpu_lower_tensor(ctx, 0), math_dtype(d));
  double p = pow(10.0, (double)(decimals < 0 ? -decimals : decimals));
  if (math_dtype(d) == TPU_DTYPE_FLOAT32) p = (float)p;
  tpu_hlo_value_t scale = tpu_emit_splat(b, x, p);
  tpu_hlo_value_t r =
      decimals < 0
          ? tpu_emit_mul(b, un(b, "stablehlo.round_nearest_even", tpu_emit_div(b, x, scale)), scale)
          : tpu_emit_div(b, un(b, "stablehlo.round_nearest_even", tpu_emit_mul(b, x, scale)), scale);
  return finish(ctx, r);
}

/* ---- binary arithmetic --------------------------------------------------- */

/* where.self(cond, self, other): selects in the output dtype (the promoted
 * one; two Python numbers give the default float, not float64). */
static tpu_status_t lower_where(tpu_lower_ctx_t* ctx) {
  tpu_dtype_t d = tpu_lower_output_type(ctx, 0).dtype;
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  return finish(ctx, sel(b, operand(ctx, 0, TPU_DTYPE_BOOL), operand(ctx, 1, d),
                         operand(ctx, 2, d)));
}

/* fmod (C: sign of the dividend) and remainder (Python: sign of the
 * divisor; data 1), on integers exactly and on floats in the math dtype. */
static tpu_status_t lower_mod(tpu_lower_ctx_t* ctx) {
  bool python = tpu_lower_data(ctx);
  tpu_dtype_t d = binary_dtype(ctx);
  if (d == TPU_DTYPE_BOOL || tpu_dtype_is_complex(d))
    return tpu_lower_decline(ctx, "%s of %s", python ? "remainder" : "fmod", tpu_dtype_name(d));
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_value_t x = math_operand(ctx, 0, d), y = math_operand(ctx, 1, d);
  tpu_hlo_value_t r = tpu_emit_binary(b, "stablehlo.remainder", x, y);
  if (python) {
    tpu_hlo_value_t zero = tpu_emit_splat(b, r, 0);
    tpu_hlo_value_t fix =
        tpu_emit_binary(b, "stablehlo.and", cmp(b, "NE", r, zero),
                        cmp(b, "NE", cmp(b, "LT", r, zero), cmp(b, "LT", y, zero)));
    r = sel(b, fix, tpu_emit_add(b, r, y), r);
  }
  return finish(ctx, r);
}

/* atan2, with both-zero operands answered by a select: XLA's CPU compiler
 * gave NaN for atan2(0, 0) where the zeros were known only after its own
 * simplification (atan2(v, v), v = float(a ^ a), fused by defer_and_fuse).
 * atan2(+-0, +0) = +-0 and atan2(+-0, -0) = +-pi, as C's. */
static tpu_status_t lower_atan2(tpu_lower_ctx_t* ctx) {
  tpu_dtype_t d = float_dtype(ctx);
  if (!is_float(d)) return tpu_lower_decline(ctx, "atan2 of %s", tpu_dtype_name(d));
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_value_t y = math_operand(ctx, 0, d), x = math_operand(ctx, 1, d);
  tpu_hlo_value_t r = tpu_emit_binary(b, "stablehlo.atan2", y, x);
  tpu_hlo_value_t zero = tpu_emit_splat(b, r, 0);
  tpu_hlo_value_t both = tpu_emit_binary(b, "stablehlo.and", cmp(b, "EQ", y, zero),
                                         cmp(b, "EQ", x, zero));
  tpu_hlo_value_t pi = tpu_emit_splat(b, r, 3.14159265358979323846);
  tpu_hlo_value_t signed_pi = sel(b, sign_bit(b, y), un(b, "stablehlo.negate", pi), pi);
  return finish(ctx, sel(b, both, sel(b, sign_bit(b, x), signed_pi, y), r));
}

/* copysign: |x| with y's sign bit (-0.0 and signed NaN count), exact in
 * the common float dtype. */
static tpu_status_t lower_copysign(tpu_lower_ctx_t* ctx) {
  tpu_dtype_t d = float_dtype(ctx);
  if (!is_float(d)) return tpu_lower_decline(ctx, "copysign of %s", tpu_dtype_name(d));
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_value_t mag = un(b, "stablehlo.abs", operand(ctx, 0, d));
  return finish(ctx, sel(b, sign_bit(b, operand(ctx, 1, d)), un(b, "stablehlo.negate", mag), mag));
}

/* x ** y for integers, y >= 0: square-and-multiply over every bit of y
 * with wrapping products, as PyTorch's powi. (XLA's integer power looks at
 * only the low 6 bits of the exponent: 3 ** 64 gave 1.) A loop over the
 * dtype's value bits: unrolled, its 63 steps of int64 made XLA's CPU
 * compiler take minutes once fused with other ops (a defer_and_fuse run). */
static tpu_hlo_value_t int_power(tpu_hlo_builder_t* b, tpu_hlo_value_t x, tpu_hlo_value_t y) {
  tpu_dtype_t d = tpu_hlo_value_type(b, x).dtype;
  int bits = 8 * (int)tpu_dtype_size(d) - (d == TPU_DTYPE_UINT8 ? 0 : 1);
  tpu_hlo_type_t types[4] = {tpu_hlo_value_type(b, x), tpu_hlo_value_type(b, x),
                             tpu_hlo_value_type(b, y), tpu_hlo_type_scalar(TPU_DTYPE_INT32)};
  tpu_hlo_value_t init[4] = {tpu_emit_splat(b, x, 1), x, y, tpu_emit_const(b, TPU_DTYPE_INT32, 0)};
  tpu_hlo_region_op_begin(b, "stablehlo.while", init, 4, types, 4, NULL);
  tpu_hlo_value_t s[4];
  tpu_hlo_block_begin(b, types, 4, s); /* cond: step < bits */
  tpu_hlo_value_t more = cmp(b, "LT", s[3], tpu_emit_const(b, TPU_DTYPE_INT32, bits));
  tpu_hlo_block_return(b, &more, 1);
  tpu_hlo_block_begin(b, types, 4, s); /* body: one bit of e */
  tpu_hlo_value_t zero = tpu_emit_splat(b, s[2], 0), one = tpu_emit_splat(b, s[2], 1);
  tpu_hlo_value_t bit = cmp(b, "NE", tpu_emit_binary(b, "stablehlo.and", s[2], one), zero);
  tpu_hlo_value_t next[4] = {
      sel(b, bit, tpu_emit_mul(b, s[0], s[1]), s[0]), tpu_emit_mul(b, s[1], s[1]),
      tpu_emit_binary(b, "stablehlo.shift_right_logical", s[2], one),
      tpu_emit_add(b, s[3], tpu_emit_const(b, TPU_DTYPE_INT32, 1))};
  tpu_hlo_block_return(b, next, 4);
  tpu_hlo_value_t out[4];
  tpu_hlo_region_op_end(b, out);
  return out[0];
}

/* pow(tensor, scalar) of floats: CPU's kernel (PowKernel.cpp) computes
 * these exponents otherwise than std::pow, with other special values:
 * 0.5 is sqrt (NaN for -inf, -0.0 for -0.0, where pow gives +inf and
 * +0.0), -0.5 is 1 / sqrt, -1 is 1 / x (float32, float64, bfloat16); and,
 * in float32 / float64, 2 is x * x, 3 is x * x * x, -2 is 1 / (x * x).
 * d: the result dtype; r: stablehlo.power's result, for the others. */
static tpu_hlo_value_t scalar_power(tpu_hlo_builder_t* b, tpu_hlo_value_t x, tpu_hlo_value_t y,
                                    tpu_dtype_t d, tpu_hlo_value_t r) {
  if (d == TPU_DTYPE_FLOAT16) return r;
  tpu_hlo_value_t one = tpu_emit_splat(b, x, 1);
  tpu_hlo_value_t sq = un(b, "stablehlo.sqrt", x);
  r = sel(b, cmp(b, "EQ", y, tpu_emit_splat(b, y, 0.5)), sq, r);
  r = sel(b, cmp(b, "EQ", y, tpu_emit_splat(b, y, -0.5)), tpu_emit_div(b, one, sq), r);
  r = sel(b, cmp(b, "EQ", y, tpu_emit_splat(b, y, -1)), tpu_emit_div(b, one, x), r);
  if (d != TPU_DTYPE_FLOAT32 && d != TPU_DTYPE_FLOAT64) return r;
  tpu_hlo_value_t x2 = tpu_emit_mul(b, x, x);
  r = sel(b, cmp(b, "EQ", y, tpu_emit_splat(b, y, 2)), x2, r);
  r = sel(b, cmp(b, "EQ", y, tpu_emit_splat(b, y, 3)), tpu_emit_mul(b, x2, x), r);
  return sel(b, cmp(b, "EQ", y, tpu_emit_splat(b, y, -2)), tpu_emit_div(b, one, x2), r);
}

/* pow: floats through stablehlo.power in the math dtype; integers by
 * squaring (int_power), with PyTorch's rule for negative exponents: 1 for
 * base 1, +-1 for base -1, else 0. */
static tpu_status_t lower_pow(tpu_lower_ctx_t* ctx) {
  tpu_dtype_t d = binary_dtype(ctx);
  if (d == TPU_DTYPE_BOOL || tpu_dtype_is_complex(d))
    return tpu_lower_decline(ctx, "pow of %s", tpu_dtype_name(d));
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_value_t x = math_operand(ctx, 0, d), y = math_operand(ctx, 1, d);
  if (is_float(d)) {
    tpu_hlo_value_t r = tpu_emit_binary(b, "stablehlo.power", x, y);
    if (strstr(tpu_lower_op_name(ctx), "Tensor_Scalar") || strstr(tpu_lower_op_name(ctx), "_.Scalar"))
      r = scalar_power(b, x, y, d, r);
    return finish(ctx, r);
  }
  tpu_hlo_value_t zero = tpu_emit_splat(b, x, 0), one = tpu_emit_splat(b, x, 1);
  tpu_hlo_value_t negative = cmp(b, "LT", y, zero);
  tpu_hlo_value_t r = int_power(b, x, sel(b, negative, zero, y));
  if (d == TPU_DTYPE_UINT8) return finish(ctx, r);
  tpu_hlo_value_t odd = cmp(b, "NE", tpu_emit_binary(b, "stablehlo.remainder", y, tpu_emit_splat(b, y, 2)),
                            zero);
  tpu_hlo_value_t minus_one = tpu_emit_splat(b, x, -1);
  tpu_hlo_value_t neg_r = sel(b, cmp(b, "EQ", x, one), one,
                              sel(b, cmp(b, "EQ", x, minus_one),
                                  sel(b, odd, minus_one, one), zero));
  return finish(ctx, sel(b, negative, neg_r, r));
}

/* lerp: weight < 0.5 in magnitude ? self + w * (end - self)
 *                                   : end - (end - self) * (1 - w) */
static tpu_status_t lower_lerp(tpu_lower_ctx_t* ctx) {
  tpu_dtype_t d = tpu_lower_output_type(ctx, 0).dtype;
  if (!is_float(d)) return tpu_lower_decline(ctx, "lerp of %s", tpu_dtype_name(d));
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_dtype_t m = math_dtype(d);
  tpu_hlo_value_t x = math_operand(ctx, 0, d), e = math_operand(ctx, 1, d);
  /* A Scalar weight converts straight to the math dtype, a tensor one is
   * widened from its dtype. */
  tpu_hlo_value_t w = tpu_lower_arg(ctx, 2)->kind == TPU_ARG_TENSOR ? math_operand(ctx, 2, d)
                                                                   : operand(ctx, 2, m);
  tpu_hlo_value_t diff = tpu_emit_sub(b, e, x);
  tpu_hlo_value_t small = cmp(b, "LT", un(b, "stablehlo.abs", w), tpu_emit_splat(b, w, 0.5));
  tpu_hlo_value_t lo = tpu_emit_add(b, x, tpu_emit_mul(b, w, diff));
  tpu_hlo_value_t hi = tpu_emit_sub(b, e, tpu_emit_mul(b, diff, tpu_emit_sub(b, tpu_emit_splat(b, w, 1), w)));
  return finish(ctx, sel(b, small, lo, hi));
}

/* addcmul: self + value * t1 * t2; addcdiv (data 1): self + value * t1 / t2. */
static tpu_status_t lower_addc(tpu_lower_ctx_t* ctx) {
  bool divide = tpu_lower_data(ctx);
  static const int idx[3] = {0, 1, 2};
  tpu_dtype_t d = tpu_lower_result_type(ctx, idx, 3);
  if (tpu_dtype_is_complex(d) || d == TPU_DTYPE_BOOL || (divide && !is_float(d)))
    return tpu_lower_decline(ctx, "%s of %s", divide ? "addcdiv" : "addcmul", tpu_dtype_name(d));
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_dtype_t m = math_dtype(d);
  tpu_hlo_value_t x = math_operand(ctx, 0, d), t1 = math_operand(ctx, 1, d);
  tpu_hlo_value_t t2 = math_operand(ctx, 2, d);
  tpu_hlo_value_t scaled = tpu_emit_mul(b, operand(ctx, 3, m), t1);
  return finish(ctx, tpu_emit_add(b, x, divide ? tpu_emit_div(b, scaled, t2) : tpu_emit_mul(b, scaled, t2)));
}

/* nan_to_num(self, nan?, posinf?, neginf?): defaults 0 and the dtype's
 * largest / lowest finite value; integers pass through. */
static tpu_status_t lower_nan_to_num(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_value_t x = tpu_lower_tensor(ctx, 0);
  tpu_dtype_t d = tpu_hlo_value_type(b, x).dtype;
  if (tpu_dtype_is_complex(d)) return tpu_lower_decline(ctx, "complex nan_to_num");
  if (!is_float(d)) return finish(ctx, x);
  double big = d == TPU_DTYPE_FLOAT64   ? DBL_MAX
               : d == TPU_DTYPE_FLOAT32 ? FLT_MAX
               : d == TPU_DTYPE_FLOAT16 ? 65504.0
                                        : ldexp(255.0, 120); /* bfloat16: (2 - 2^-7) * 2^127 */
  const tpu_lower_arg_t* a[3] = {tpu_lower_arg(ctx, 1), tpu_lower_arg(ctx, 2),
                                 tpu_lower_arg(ctx, 3)};
  double nan_v = a[0]->kind == TPU_ARG_FLOAT ? a[0]->f : 0.0;
  double pos_v = a[1]->kind == TPU_ARG_FLOAT ? a[1]->f : big;
  double neg_v = a[2]->kind == TPU_ARG_FLOAT ? a[2]->f : -big;
  tpu_hlo_value_t r = sel(b, is_nan(b, x), tpu_emit_splat(b, x, nan_v), x);
  r = sel(b, cmp(b, "EQ", x, tpu_emit_splat(b, x, INFINITY)), tpu_emit_splat(b, x, pos_v), r);
  r = sel(b, cmp(b, "EQ", x, tpu_emit_splat(b, x, -INFINITY)), tpu_emit_splat(b, x, neg_v), r);
  return finish(ctx, r);
}

/* masked_fill(self, mask, value): value is a Scalar or a 0-dim tensor. */
static tpu_status_t lower_masked_fill(tpu_lower_ctx_t* ctx) {
  tpu_dtype_t d = tpu_lower_output_type(ctx, 0).dtype;
  const tpu_lower_arg_t* v = tpu_lower_arg(ctx, 2);
  if (v->kind == TPU_ARG_TENSOR && v->type.rank != 0)
    return tpu_lower_decline(ctx, "value with %d dims", v->type.rank);
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  return finish(ctx, sel(b, operand(ctx, 1, TPU_DTYPE_BOOL), operand(ctx, 2, d),
                         operand(ctx, 0, d)));
}

/* ---- more binary float math --------------------------------------------- */

/* Both operands of a binary float op in the math dtype of their common
 * (float-promoted) dtype; declines unless that is a float dtype. */
static tpu_status_t float_operands(tpu_lower_ctx_t* ctx, tpu_hlo_value_t* out_x,
                                   tpu_hlo_value_t* out_y) {
  tpu_dtype_t d = float_dtype(ctx);
  if (!is_float(d)) return tpu_lower_decline(ctx, "%s operands", tpu_dtype_name(d));
  *out_x = math_operand(ctx, 0, d);
  *out_y = math_operand(ctx, 1, d);
  return NULL;
}

/* xlogy / xlog1py: NaN if y is NaN, else 0 where x == 0, else x * log(y)
 * (data: the log op, log or log_plus_one). */
static tpu_status_t lower_xlog(tpu_lower_ctx_t* ctx) {
  tpu_hlo_value_t x, y;
  tpu_status_t s = float_operands(ctx, &x, &y);
  if (s) return s;
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_value_t r = sel(b, cmp(b, "EQ", x, tpu_emit_splat(b, x, 0)), tpu_emit_splat(b, x, 0), tpu_emit_mul(b, x, un(b, (const char*)tpu_lower_data(ctx), y)));
  return finish(ctx, sel(b, is_nan(b, y), y, r));
}

/* polar(abs, angle): abs * (cos(angle) + i sin(angle)), in the output's
 * complex dtype (abs and angle share its part dtype). */
static tpu_status_t lower_polar(tpu_lower_ctx_t* ctx) {
  tpu_hlo_type_t out = tpu_lower_output_type(ctx, 0);
  if (!tpu_dtype_is_complex(out.dtype)) return tpu_lower_decline(ctx, "polar into a real tensor");
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_dtype_t part = tpu_dtype_complex_part(out.dtype);
  tpu_hlo_value_t r = operand(ctx, 0, part), theta = operand(ctx, 1, part);
  tpu_hlo_value_t parts[2] = {tpu_emit_mul(b, r, un(b, "stablehlo.cosine", theta)),
                              tpu_emit_mul(b, r, un(b, "stablehlo.sine", theta))};
  tpu_lower_set_output(ctx, 0, tpu_hlo_op(b, "stablehlo.complex", parts, 2, out, NULL));
  return NULL;
}

/* conj_physical: the conjugate, computed (a lazy conj view's contents are
 * materialised through it); real tensors are their own conjugate. */
static tpu_status_t lower_conj_physical(tpu_lower_ctx_t* ctx) {
  const tpu_lower_arg_t* a = tpu_lower_arg(ctx, 0);
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_value_t z = tpu_lower_tensor(ctx, 0);
  if (!tpu_dtype_is_complex(a->type.dtype)) return finish(ctx, z);
  tpu_hlo_type_t pt = a->type;
  pt.dtype = tpu_dtype_complex_part(pt.dtype);
  tpu_hlo_value_t re = tpu_hlo_op(b, "stablehlo.real", &z, 1, pt, NULL);
  tpu_hlo_value_t im = tpu_hlo_op(b, "stablehlo.imag", &z, 1, pt, NULL);
  tpu_hlo_value_t parts[2] = {re, un(b, "stablehlo.negate", im)};
  return finish(ctx, tpu_hlo_op(b, "stablehlo.complex", parts, 2, a->type, NULL));
}

/* hypot without overflow: m * sqrt(1 + (n/m)^2), m = max(|x|, |y|); inf
 * wins over NaN like std::hypot. */
static tpu_status_t lower_hypot(tpu_lower_ctx_t* ctx) {
  /* CPU has no integer kernel (NotImplementedError); the fallback raises it. */
  if (!is_float(tpu_lower_output_type(ctx, 0).dtype))
    return tpu_lower_decline(ctx, "hypot of integers");
  tpu_hlo_value_t x, y;
  tpu_status_t s = float_operands(ctx, &x, &y);
  if (s) return s;
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_value_t ax = un(b, "stablehlo.abs", x), ay = un(b, "stablehlo.abs", y);
  tpu_hlo_value_t m = max_nan(b, ax, ay), n = min_nan(b, ax, ay), zero = tpu_emit_splat(b, x, 0);
  tpu_hlo_value_t q = tpu_emit_div(b, n, m);
  tpu_hlo_value_t r = tpu_emit_mul(b, m, un(b, "stablehlo.sqrt", tpu_emit_add(b, tpu_emit_splat(b, x, 1), tpu_emit_mul(b, q, q))));
  r = sel(b, cmp(b, "EQ", m, zero), zero, r);
  tpu_hlo_value_t inf = tpu_emit_splat(b, x, INFINITY);
  tpu_hlo_value_t any_inf = tpu_emit_binary(b, "stablehlo.or", cmp(b, "EQ", ax, inf),
                                            cmp(b, "EQ", ay, inf));
  return finish(ctx, sel(b, any_inf, inf, r));
}

/* logaddexp(2): equal infinities return themselves; else
 * max + log1p(exp(-|x - y|)) (base 2, data 1: exp2, scaled by 1/ln 2). */
static tpu_status_t lower_logaddexp(tpu_lower_ctx_t* ctx) {
  bool base2 = tpu_lower_data(ctx);
  /* CPU has no integer or bool kernel (NotImplementedError). */
  if (!is_float(tpu_lower_output_type(ctx, 0).dtype)) return tpu_lower_decline(ctx, "logaddexp of integers");
  tpu_hlo_value_t x, y;
  tpu_status_t s = float_operands(ctx, &x, &y);
  if (s) return s;
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_value_t m = tpu_emit_binary(b, "stablehlo.maximum", x, y);
  tpu_hlo_value_t neg = un(b, "stablehlo.negate", un(b, "stablehlo.abs", tpu_emit_sub(b, x, y)));
  tpu_hlo_value_t r = base2 ? tpu_emit_mul(b, un(b, "stablehlo.log_plus_one", f_exp2(b, neg)),
                                           tpu_emit_splat(b, x, 1 / M_LN2))
                            : un(b, "stablehlo.log_plus_one", un(b, "stablehlo.exponential", neg));
  r = tpu_emit_add(b, m, r);
  tpu_hlo_value_t same_inf = tpu_emit_binary(
      b, "stablehlo.and", cmp(b, "EQ", un(b, "stablehlo.abs", x), tpu_emit_splat(b, x, INFINITY)),
      cmp(b, "EQ", x, y));
  return finish(ctx, sel(b, same_inf, x, r));
}

/* nextafter is exact in the input dtype: no widening. */
static tpu_status_t lower_nextafter(tpu_lower_ctx_t* ctx) {
  tpu_dtype_t d = binary_dtype(ctx);
  if (!is_float(d)) return tpu_lower_decline(ctx, "nextafter of %s", tpu_dtype_name(d));
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  return finish(ctx, tpu_emit_binary(b, "chlo.next_after", operand(ctx, 0, d), operand(ctx, 1, d)));
}

/* heaviside(x, values): values where x == 0, else x > 0; any real dtype. */
static tpu_status_t lower_heaviside(tpu_lower_ctx_t* ctx) {
  tpu_dtype_t d = binary_dtype(ctx);
  if (tpu_dtype_is_complex(d)) return tpu_lower_decline(ctx, "complex heaviside");
  /* CPU refuses operands of two dtypes (RuntimeError). */
  if (tpu_lower_arg(ctx, 1)->kind == TPU_ARG_TENSOR &&
      tpu_lower_arg(ctx, 0)->type.dtype != tpu_lower_arg(ctx, 1)->type.dtype)
    return tpu_lower_decline(ctx, "heaviside of two dtypes");
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_value_t x = operand(ctx, 0, d), zero = tpu_emit_splat(b, x, 0);
  tpu_hlo_value_t step = tpu_emit_convert(b, cmp(b, "GT", x, zero), d);
  return finish(ctx, sel(b, cmp(b, "EQ", x, zero), operand(ctx, 1, d), step));
}

/* floor_divide: Python's //. Floats follow PyTorch's div_floor_floating
 * (fmod-based, so the quotient is not rounded before flooring); integers
 * adjust C's truncating division. */
tpu_status_t tpu_lower_floor_divide(tpu_lower_ctx_t* ctx) {
  tpu_dtype_t d = binary_dtype(ctx);
  if (d == TPU_DTYPE_BOOL || tpu_dtype_is_complex(d))
    return tpu_lower_decline(ctx, "floor_divide of %s", tpu_dtype_name(d));
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_value_t x = math_operand(ctx, 0, d), y = math_operand(ctx, 1, d);
  if (is_float(d)) return finish(ctx, tpu_emit_floor_divide_float(b, x, y));
  tpu_hlo_value_t zero = tpu_emit_splat(b, x, 0), one = tpu_emit_splat(b, x, 1);
  tpu_hlo_value_t mod = tpu_emit_binary(b, "stablehlo.remainder", x, y);
  tpu_hlo_value_t fix = tpu_emit_binary(b, "stablehlo.and", cmp(b, "NE", mod, zero),
                                        cmp(b, "NE", cmp(b, "LT", mod, zero), cmp(b, "LT", y, zero)));
  tpu_hlo_value_t q = tpu_emit_div(b, x, y);
  return finish(ctx, sel(b, fix, tpu_emit_sub(b, q, one), q));
}

const tpu_lowering_t tpu_lowerings_pointwise[] = {
    /* float math: data is the function (lower_math) or the one op (lower_math_op) */
    {"exp", lower_math_op, 0, (intptr_t)"stablehlo.exponential"},
    {"exp2", lower_math, 0, (intptr_t)f_exp2},
    {"expm1", lower_math_op, 0, (intptr_t)"stablehlo.exponential_minus_one"},
    {"log", lower_math_op, 0, (intptr_t)"stablehlo.log"},
    {"log1p", lower_math_op, 0, (intptr_t)"stablehlo.log_plus_one"},
    {"log2", lower_math, 0, (intptr_t)f_log2},
    {"log10", lower_math, 0, (intptr_t)f_log10},
    {"sin", lower_math_op, 0, (intptr_t)"stablehlo.sine"},
    {"cos", lower_math_op, 0, (intptr_t)"stablehlo.cosine"},
    {"tan", lower_math_op, 0, (intptr_t)"stablehlo.tan"},
    {"asin", lower_math_op, 0, (intptr_t)"chlo.asin"},
    {"acos", lower_math_op, 0, (intptr_t)"chlo.acos"},
    {"atan", lower_math, 0, (intptr_t)f_atan},
    {"sinh", lower_math_op, 0, (intptr_t)"chlo.sinh"},
    {"cosh", lower_math_op, 0, (intptr_t)"chlo.cosh"},
    {"tanh", lower_math, 0, (intptr_t)tpu_emit_tanh},
    {"asinh", lower_math_op, 0, (intptr_t)"chlo.asinh"},
    {"acosh", lower_math_op, 0, (intptr_t)"chlo.acosh"},
    {"atanh", lower_math_op, 0, (intptr_t)"chlo.atanh"},
    {"sqrt", lower_math_op, 0, (intptr_t)"stablehlo.sqrt"},
    {"rsqrt", lower_rsqrt, 0},
    {"reciprocal", lower_math, 0, (intptr_t)f_reciprocal},
    {"erf", lower_math, 0, (intptr_t)tpu_emit_erf},
    {"erfc", lower_math_op, 0, (intptr_t)"chlo.erfc"},
    {"erfinv", lower_math_op, 0, (intptr_t)"chlo.erf_inv"},
    {"sigmoid", lower_math_op, 0, (intptr_t)"stablehlo.logistic"},
    {"frac", lower_math, 0, (intptr_t)f_frac},
    {"silu", lower_math, 0, (intptr_t)f_silu},
    {"mish", lower_math, 0, (intptr_t)f_mish},
    {"hardswish", lower_math, 0, (intptr_t)f_hardswish},
    {"hardsigmoid", lower_math, 0, (intptr_t)f_hardsigmoid},
    {"special_entr", lower_math, 0, (intptr_t)f_entr},
    {"sinc", lower_math, 0, (intptr_t)f_sinc},
    {"lgamma", lower_math_op, 0, (intptr_t)"chlo.lgamma"},
    {"digamma", lower_math, 0, (intptr_t)tpu_emit_digamma},
    {"angle", lower_angle, 0},
    /* exact unary; rounding: data is the op (NULL: trunc) */
    {"abs", lower_abs, 0},
    {"neg", lower_neg, 0},
    {"conj_physical", lower_conj_physical, 0},
    {"sign", lower_sign, 0},
    {"sgn", lower_sign, 0},
    {"floor", lower_rounding, 0, (intptr_t)"stablehlo.floor"},
    {"ceil", lower_rounding, 0, (intptr_t)"stablehlo.ceil"},
    {"trunc", lower_rounding, 0},
    {"round", lower_round, 0},
    /* binary and ternary arithmetic */
    {"where", lower_where, 0},
    {"remainder", lower_mod, 0, 1},
    {"fmod", lower_mod, 0},
    {"atan2", lower_atan2, 0},
    {"copysign", lower_copysign, 0},
    {"pow", lower_pow, 0},
    {"lerp", lower_lerp, 0},
    {"addcmul", lower_addc, 0},
    {"addcdiv", lower_addc, 0, 1},
    {"nan_to_num", lower_nan_to_num, 0},
    {"masked_fill", lower_masked_fill, 0},
    /* more binary float math */
    {"xlogy", lower_xlog, 0, (intptr_t)"stablehlo.log"},
    {"special_xlog1py", lower_xlog, 0, (intptr_t)"stablehlo.log_plus_one"},
    {"hypot", lower_hypot, 0},
    {"polar", lower_polar, 0},
    {"logaddexp", lower_logaddexp, 0},
    {"logaddexp2", lower_logaddexp, 0, 1},
    {"nextafter", lower_nextafter, 0},
    {"heaviside", lower_heaviside, 0},
    {"floor_divide", tpu_lower_floor_divide, 0},
};
const size_t tpu_lowerings_pointwise_count =
    sizeof tpu_lowerings_pointwise / sizeof tpu_lowerings_pointwise[0];
