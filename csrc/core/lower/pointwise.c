/* Pointwise family: elementwise math and special functions, activations and
 * their backwards, comparisons, logical, bitwise and shift ops, clamp, where,
 * pow, remainder / fmod / floor_divide, lerp, addcmul / addcdiv and
 * masked_fill. (Dtype conversion reaches the backend as copy_, in basic.c:
 * _to_copy is decomposed before it.)
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

/* ---- small helpers ------------------------------------------------------ */

static bool is_float(tpu_dtype_t d) { return tpu_dtype_is_floating(d); }

/* The dtype PyTorch computes in: half types widen to float32. */
static tpu_dtype_t math_dtype(tpu_dtype_t d) {
  return d == TPU_DTYPE_FLOAT16 || d == TPU_DTYPE_BFLOAT16 ? TPU_DTYPE_FLOAT32 : d;
}


static tpu_hlo_value_t un(tpu_hlo_builder_t* b, const char* op, tpu_hlo_value_t x) {
  return tpu_emit_unary(b, op, x);
}
static tpu_hlo_value_t cmp(tpu_hlo_builder_t* b, const char* dir, tpu_hlo_value_t x,
                           tpu_hlo_value_t y) {
  return tpu_emit_compare(b, dir, x, y);
}
static tpu_hlo_value_t sel(tpu_hlo_builder_t* b, tpu_hlo_value_t p, tpu_hlo_value_t t,
                           tpu_hlo_value_t f) {
  return tpu_emit_select(b, p, t, f);
}
static tpu_hlo_value_t is_nan(tpu_hlo_builder_t* b, tpu_hlo_value_t x) {
  return cmp(b, "NE", x, x);
}

/* maximum / minimum that return NaN when either side is NaN, like PyTorch
 * (XLA:CPU's max returns the second operand's number when only it is NaN). */
static tpu_hlo_value_t max_nan(tpu_hlo_builder_t* b, tpu_hlo_value_t x, tpu_hlo_value_t y) {
  tpu_hlo_value_t m = tpu_emit_binary(b, "stablehlo.maximum", x, y);
  if (!is_float(tpu_hlo_value_type(b, x).dtype)) return m;
  return sel(b, is_nan(b, x), x, sel(b, is_nan(b, y), y, m));
}
static tpu_hlo_value_t min_nan(tpu_hlo_builder_t* b, tpu_hlo_value_t x, tpu_hlo_value_t y) {
  tpu_hlo_value_t m = tpu_emit_binary(b, "stablehlo.minimum", x, y);
  if (!is_float(tpu_hlo_value_type(b, x).dtype)) return m;
  return sel(b, is_nan(b, x), x, sel(b, is_nan(b, y), y, m));
}

/* The sign bit of a float, NaN and -0.0 included: bitcast to a signed
 * integer of the same width and test < 0. */
static tpu_hlo_value_t sign_bit(tpu_hlo_builder_t* b, tpu_hlo_value_t x) {
  tpu_hlo_type_t t = tpu_hlo_value_type(b, x);
  size_t size = tpu_dtype_size(t.dtype);
  t.dtype = size == 8 ? TPU_DTYPE_INT64 : size == 4 ? TPU_DTYPE_INT32 : TPU_DTYPE_INT16;
  tpu_hlo_value_t bits = tpu_hlo_op(b, "stablehlo.bitcast_convert", &x, 1, t, NULL);
  return cmp(b, "LT", bits, tpu_emit_splat(b, bits, 0));
}

/* trunc for floats: round toward zero. */
static tpu_hlo_value_t trunc_f(tpu_hlo_builder_t* b, tpu_hlo_value_t x) {
  return sel(b, cmp(b, "LT", x, tpu_emit_splat(b, x, 0)), un(b, "stablehlo.ceil", x),
             un(b, "stablehlo.floor", x));
}

/* Argument i (tensor or scalar) cast to `dtype` and broadcast to output 0's
 * shape. Scalars convert straight to dtype, as PyTorch casts a Scalar to the
 * common dtype. */
static tpu_hlo_value_t operand(tpu_lower_ctx_t* ctx, int i, tpu_dtype_t dtype) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_type_t out = tpu_lower_output_type(ctx, 0);
  out.dtype = dtype;
  const tpu_lower_arg_t* a = tpu_lower_arg(ctx, i);
  tpu_hlo_value_t v = a->kind == TPU_ARG_TENSOR && a->type.rank > 0
                          ? tpu_lower_tensor(ctx, i)
                          : tpu_lower_scalar(ctx, i, dtype);
  return tpu_emit_cast_to(b, v, &out);
}

/* Argument i in the common dtype `common`, then widened to its math dtype
 * (a bfloat16 operand is rounded to bfloat16 first, like PyTorch). */
static tpu_hlo_value_t math_operand(tpu_lower_ctx_t* ctx, int i, tpu_dtype_t common) {
  return tpu_emit_convert(tpu_lower_builder(ctx), operand(ctx, i, common),
                          math_dtype(common));
}

/* A Scalar parameter (beta, alpha, slope ...) in the math dtype, broadcast
 * to output 0's shape. */
static tpu_hlo_value_t param(tpu_lower_ctx_t* ctx, int i, tpu_dtype_t dtype) {
  return operand(ctx, i, dtype);
}

/* Sets output 0 to v converted to its dtype. */
static tpu_status_t finish(tpu_lower_ctx_t* ctx, tpu_hlo_value_t v) {
  tpu_hlo_type_t out = tpu_lower_output_type(ctx, 0);
  tpu_lower_set_output(ctx, 0, tpu_emit_cast_to(tpu_lower_builder(ctx), v, &out));
  return NULL;
}

/* Common dtype of the listed args; `to_float` promotes integer and bool
 * results to the output's float dtype (ops like atan2 on integers). */
static tpu_dtype_t common_dtype(tpu_lower_ctx_t* ctx, const int* idx, int n, bool to_float) {
  tpu_dtype_t d = tpu_lower_result_type(ctx, idx, n);
  if (to_float && !is_float(d) && !tpu_dtype_is_complex(d)) {
    tpu_dtype_t out = tpu_lower_output_type(ctx, 0).dtype;
    d = is_float(out) ? out : TPU_DTYPE_FLOAT32;
  }
  return d;
}

static const char* string_arg(tpu_lower_ctx_t* ctx, int i, const char* dflt) {
  const tpu_lower_arg_t* a = tpu_lower_arg(ctx, i);
  return a->kind == TPU_ARG_STRING && a->str ? a->str : dflt;
}

static bool present(tpu_lower_ctx_t* ctx, int i) {
  return tpu_lower_arg(ctx, i)->kind != TPU_ARG_NONE;
}

/* ---- float math: one function of x, computed in the math dtype ---------- */

typedef tpu_hlo_value_t (*math_fn_t)(tpu_hlo_builder_t* b, tpu_hlo_value_t x);

/* Unary float op: integer and bool inputs become the (float) output dtype;
 * a float input computes in its own dtype, then converts (a float16 input
 * into a float64 out= is computed in float16, as on the CPU). */
static tpu_status_t unary_math(tpu_lower_ctx_t* ctx, math_fn_t fn) {
  tpu_dtype_t out = tpu_lower_output_type(ctx, 0).dtype;
  if (!is_float(out)) return tpu_lower_decline(ctx, "%s output", tpu_dtype_name(out));
  tpu_dtype_t in = tpu_lower_arg(ctx, 0)->type.dtype;
  tpu_dtype_t d = is_float(in) ? in : out;
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_value_t x = tpu_emit_convert(b, tpu_lower_tensor(ctx, 0), d);
  return finish(ctx, tpu_emit_convert(b, fn(b, tpu_emit_convert(b, x, math_dtype(d))), d));
}

#define HLO_FN(name, op) \
  static tpu_hlo_value_t name(tpu_hlo_builder_t* b, tpu_hlo_value_t x) { return un(b, op, x); }
HLO_FN(f_exp, "stablehlo.exponential")
HLO_FN(f_expm1, "stablehlo.exponential_minus_one")
HLO_FN(f_log, "stablehlo.log")
HLO_FN(f_log1p, "stablehlo.log_plus_one")
HLO_FN(f_sin, "stablehlo.sine")
HLO_FN(f_cos, "stablehlo.cosine")
HLO_FN(f_tan, "stablehlo.tan")
HLO_FN(f_sqrt, "stablehlo.sqrt")
HLO_FN(f_rsqrt, "stablehlo.rsqrt")
HLO_FN(f_sigmoid, "stablehlo.logistic")
HLO_FN(f_asin, "chlo.asin")
HLO_FN(f_acos, "chlo.acos")
HLO_FN(f_sinh, "chlo.sinh")
HLO_FN(f_cosh, "chlo.cosh")
HLO_FN(f_asinh, "chlo.asinh")
HLO_FN(f_acosh, "chlo.acosh")
HLO_FN(f_atanh, "chlo.atanh")
HLO_FN(f_erfc, "chlo.erfc")
HLO_FN(f_erfinv, "chlo.erf_inv")
#undef HLO_FN

/* tanh; in float32 XLA's approximation is 1.0 from |x| ~ 7.9 on, where
 * tanh(x) still rounds below 1 up to |x| ~ 9 (CPU's tanh(8) is 0.99999976:
 * truncated to an integer, 0, not 1). From |x| = 4 on,
 * 1 - 2 / (exp(2|x|) + 1) with x's sign is within an ulp: the subtracted
 * term is small, so exp's error barely reaches the result. */
static tpu_hlo_value_t f_tanh(tpu_hlo_builder_t* b, tpu_hlo_value_t x) {
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
static tpu_hlo_value_t f_erf(tpu_hlo_builder_t* b, tpu_hlo_value_t x) {
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
  return tpu_emit_div(b, f_log(b, x), tpu_emit_splat(b, x, M_LN2));
}
static tpu_hlo_value_t f_log10(tpu_hlo_builder_t* b, tpu_hlo_value_t x) {
  return tpu_emit_div(b, f_log(b, x), tpu_emit_splat(b, x, M_LN10));
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
static tpu_hlo_value_t f_tanh_softplus(tpu_hlo_builder_t* b, tpu_hlo_value_t x) {
  return f_tanh(b, f_log1p(b, f_exp(b, x)));
}
static tpu_hlo_value_t f_mish(tpu_hlo_builder_t* b, tpu_hlo_value_t x) {
  return tpu_emit_mul(b, x, f_tanh_softplus(b, x));
}
static tpu_hlo_value_t f_silu(tpu_hlo_builder_t* b, tpu_hlo_value_t x) {
  return tpu_emit_mul(b, x, f_sigmoid(b, x));
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

#define MATH_ROW(name) \
  static tpu_status_t lower_##name(tpu_lower_ctx_t* ctx) { return unary_math(ctx, f_##name); }
MATH_ROW(exp)
MATH_ROW(exp2)
MATH_ROW(expm1)
MATH_ROW(log)
MATH_ROW(log1p)
MATH_ROW(log2)
MATH_ROW(log10)
MATH_ROW(sin)
MATH_ROW(cos)
MATH_ROW(tan)
MATH_ROW(asin)
MATH_ROW(acos)
MATH_ROW(atan)
MATH_ROW(sinh)
MATH_ROW(cosh)
MATH_ROW(tanh)
MATH_ROW(asinh)
MATH_ROW(acosh)
MATH_ROW(atanh)
MATH_ROW(sqrt)
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
    return unary_math(ctx, f_rsqrt);
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_value_t x = tpu_emit_convert(b, tpu_lower_tensor(ctx, 0), TPU_DTYPE_FLOAT32);
  tpu_hlo_value_t root = tpu_emit_convert(b, tpu_emit_convert(b, un(b, "stablehlo.sqrt", x), in),
                                          TPU_DTYPE_FLOAT32);
  tpu_hlo_type_t ft = tpu_hlo_value_type(b, root);
  tpu_hlo_value_t r = tpu_emit_binary(b, "stablehlo.divide", tpu_emit_const_like(b, &ft, 1.0), root);
  return finish(ctx, tpu_emit_convert(b, r, in));
}
MATH_ROW(reciprocal)
MATH_ROW(erf)
MATH_ROW(erfc)
MATH_ROW(erfinv)
MATH_ROW(sigmoid)
MATH_ROW(frac)
MATH_ROW(silu)
MATH_ROW(mish)
MATH_ROW(hardsigmoid)
MATH_ROW(hardswish)
#undef MATH_ROW

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

/* floor / ceil / trunc / round: integers are returned unchanged. */
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
static tpu_status_t lower_floor(tpu_lower_ctx_t* ctx) {
  return rounding(ctx, "stablehlo.floor");
}
static tpu_status_t lower_ceil(tpu_lower_ctx_t* ctx) { return rounding(ctx, "stablehlo.ceil"); }
static tpu_status_t lower_trunc(tpu_lower_ctx_t* ctx) { return rounding(ctx, NULL); }

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

/* ---- activations with parameters, and backwards -------------------------- */

/* Declares `d` = output 0's dtype; declines unless it is a float dtype. */
#define FLOAT_OUT_OR_DECLINE(ctx, d)                \
  tpu_dtype_t d = tpu_lower_output_type(ctx, 0).dtype; \
  if (!is_float(d)) return tpu_lower_decline(ctx, "%s output", tpu_dtype_name(d))

static tpu_status_t lower_relu(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_value_t x = tpu_lower_tensor(ctx, 0);
  tpu_dtype_t d = tpu_hlo_value_type(b, x).dtype;
  if (d == TPU_DTYPE_BOOL || tpu_dtype_is_complex(d))
    return tpu_lower_decline(ctx, "relu of %s", tpu_dtype_name(d));
  /* select keeps NaN (NaN < 0 is false). */
  return finish(ctx, sel(b, cmp(b, "LT", x, tpu_emit_splat(b, x, 0)), tpu_emit_splat(b, x, 0), x));
}

static tpu_hlo_value_t gelu_cdf_pdf(tpu_hlo_builder_t* b, tpu_hlo_value_t x, bool tanh_approx,
                                    tpu_hlo_value_t* out_derivative) {
  tpu_hlo_value_t half = tpu_emit_splat(b, x, 0.5), one = tpu_emit_splat(b, x, 1);
  if (!tanh_approx) {
    /* gelu = x * Phi(x); gelu' = Phi(x) + x * phi(x). */
    tpu_hlo_value_t cdf = tpu_emit_mul(b, half, tpu_emit_add(b, one, f_erf(b, tpu_emit_mul(b, x, tpu_emit_splat(b, x, M_SQRT1_2)))));
    if (out_derivative) {
      tpu_hlo_value_t pdf = tpu_emit_mul(b, f_exp(b, tpu_emit_mul(b, tpu_emit_splat(b, x, -0.5), tpu_emit_mul(b, x, x))),
                                tpu_emit_splat(b, x, 0.5 * M_2_SQRTPI * M_SQRT1_2));
      *out_derivative = tpu_emit_add(b, cdf, tpu_emit_mul(b, x, pdf));
    }
    return tpu_emit_mul(b, x, cdf);
  }
  tpu_hlo_value_t beta = tpu_emit_splat(b, x, M_SQRT2 * M_2_SQRTPI * 0.5), kappa = tpu_emit_splat(b, x, 0.044715);
  tpu_hlo_value_t x_sq = tpu_emit_mul(b, x, x);
  tpu_hlo_value_t inner = tpu_emit_mul(b, beta, tpu_emit_add(b, x, tpu_emit_mul(b, kappa, tpu_emit_mul(b, x_sq, x))));
  tpu_hlo_value_t t = f_tanh(b, inner);
  tpu_hlo_value_t right = tpu_emit_add(b, one, t);
  if (out_derivative) {
    tpu_hlo_value_t left = tpu_emit_mul(b, half, x);
    tpu_hlo_value_t dinner = tpu_emit_mul(b, beta, tpu_emit_add(b, one, tpu_emit_mul(b, tpu_emit_splat(b, x, 3 * 0.044715), x_sq)));
    tpu_hlo_value_t right_d = tpu_emit_mul(b, tpu_emit_mul(b, left, tpu_emit_sub(b, one, tpu_emit_mul(b, t, t))), dinner);
    *out_derivative = tpu_emit_add(b, tpu_emit_mul(b, half, right), right_d);
  }
  return tpu_emit_mul(b, tpu_emit_mul(b, half, x), right);
}

static bool gelu_is_tanh(tpu_lower_ctx_t* ctx, int i, tpu_status_t* out_status) {
  const char* a = string_arg(ctx, i, "none");
  *out_status = NULL;
  if (strcmp(a, "tanh") == 0) return true;
  if (strcmp(a, "none") != 0) *out_status = tpu_lower_decline(ctx, "approximate='%s'", a);
  return false;
}

static tpu_status_t lower_gelu(tpu_lower_ctx_t* ctx) {
  FLOAT_OUT_OR_DECLINE(ctx, d);
  tpu_status_t s;
  bool approx = gelu_is_tanh(ctx, 1, &s);
  if (s) return s;
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  return finish(ctx, gelu_cdf_pdf(b, math_operand(ctx, 0, d), approx, NULL));
}

static tpu_status_t lower_gelu_backward(tpu_lower_ctx_t* ctx) {
  FLOAT_OUT_OR_DECLINE(ctx, d);
  tpu_status_t s;
  bool approx = gelu_is_tanh(ctx, 2, &s);
  if (s) return s;
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_value_t deriv;
  gelu_cdf_pdf(b, math_operand(ctx, 1, d), approx, &deriv);
  return finish(ctx, tpu_emit_mul(b, math_operand(ctx, 0, d), deriv));
}

/* grad * s * (1 + x * (1 - s)), s = sigmoid(x). */
static tpu_status_t lower_silu_backward(tpu_lower_ctx_t* ctx) {
  FLOAT_OUT_OR_DECLINE(ctx, d);
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_value_t g = math_operand(ctx, 0, d), x = math_operand(ctx, 1, d);
  tpu_hlo_value_t s = f_sigmoid(b, x), one = tpu_emit_splat(b, x, 1);
  return finish(ctx, tpu_emit_mul(b, tpu_emit_mul(b, g, s), tpu_emit_add(b, one, tpu_emit_mul(b, x, tpu_emit_sub(b, one, s)))));
}

/* (x*beta) > threshold ? x : log1p(exp(x*beta)) / beta */
static tpu_status_t lower_softplus(tpu_lower_ctx_t* ctx) {
  FLOAT_OUT_OR_DECLINE(ctx, d);
  tpu_dtype_t m = math_dtype(d);
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_value_t x = math_operand(ctx, 0, d);
  tpu_hlo_value_t beta = param(ctx, 1, m), threshold = param(ctx, 2, m);
  tpu_hlo_value_t xb = tpu_emit_mul(b, x, beta);
  tpu_hlo_value_t soft = tpu_emit_div(b, f_log1p(b, f_exp(b, xb)), beta);
  return finish(ctx, sel(b, cmp(b, "GT", xb, threshold), x, soft));
}

/* (x*beta) > threshold ? grad : grad * z / (z + 1), z = exp(x*beta) */
static tpu_status_t lower_softplus_backward(tpu_lower_ctx_t* ctx) {
  FLOAT_OUT_OR_DECLINE(ctx, d);
  tpu_dtype_t m = math_dtype(d);
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_value_t g = math_operand(ctx, 0, d), x = math_operand(ctx, 1, d);
  tpu_hlo_value_t beta = param(ctx, 2, m), threshold = param(ctx, 3, m);
  tpu_hlo_value_t xb = tpu_emit_mul(b, x, beta), z = f_exp(b, xb);
  tpu_hlo_value_t soft = tpu_emit_div(b, tpu_emit_mul(b, g, z), tpu_emit_add(b, z, tpu_emit_splat(b, z, 1)));
  return finish(ctx, sel(b, cmp(b, "GT", xb, threshold), g, soft));
}

/* x <= 0 ? expm1(x * input_scale) * alpha * scale : x * scale */
static tpu_status_t lower_elu(tpu_lower_ctx_t* ctx) {
  FLOAT_OUT_OR_DECLINE(ctx, d);
  tpu_dtype_t m = math_dtype(d);
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_value_t x = math_operand(ctx, 0, d);
  tpu_hlo_value_t alpha = param(ctx, 1, m), scale = param(ctx, 2, m), in_scale = param(ctx, 3, m);
  tpu_hlo_value_t neg = tpu_emit_mul(b, f_expm1(b, tpu_emit_mul(b, x, in_scale)), tpu_emit_mul(b, alpha, scale));
  return finish(ctx, sel(b, cmp(b, "LE", x, tpu_emit_splat(b, x, 0)), neg, tpu_emit_mul(b, x, scale)));
}

/* elu_backward(grad, alpha, scale, input_scale, is_result, self_or_result) */
static tpu_status_t lower_elu_backward(tpu_lower_ctx_t* ctx) {
  FLOAT_OUT_OR_DECLINE(ctx, d);
  tpu_dtype_t m = math_dtype(d);
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_value_t g = math_operand(ctx, 0, d), x = math_operand(ctx, 5, d);
  tpu_hlo_value_t alpha = param(ctx, 1, m), scale = param(ctx, 2, m), in_scale = param(ctx, 3, m);
  tpu_hlo_value_t negcoef = tpu_emit_mul(b, alpha, scale);
  tpu_hlo_value_t neg =
      tpu_lower_arg(ctx, 4)->i
          ? tpu_emit_mul(b, tpu_emit_mul(b, g, in_scale), tpu_emit_add(b, x, negcoef))
          : tpu_emit_mul(b, tpu_emit_mul(b, tpu_emit_mul(b, g, in_scale), negcoef), f_exp(b, tpu_emit_mul(b, x, in_scale)));
  return finish(ctx, sel(b, cmp(b, "LE", x, tpu_emit_splat(b, x, 0)), neg, tpu_emit_mul(b, g, scale)));
}

static tpu_status_t lower_leaky_relu(tpu_lower_ctx_t* ctx) {
  FLOAT_OUT_OR_DECLINE(ctx, d);
  tpu_dtype_t m = math_dtype(d);
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_value_t x = math_operand(ctx, 0, d), slope = param(ctx, 1, m);
  return finish(ctx, sel(b, cmp(b, "GT", x, tpu_emit_splat(b, x, 0)), x, tpu_emit_mul(b, x, slope)));
}

static tpu_status_t lower_leaky_relu_backward(tpu_lower_ctx_t* ctx) {
  FLOAT_OUT_OR_DECLINE(ctx, d);
  tpu_dtype_t m = math_dtype(d);
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_value_t g = math_operand(ctx, 0, d), x = math_operand(ctx, 1, d);
  tpu_hlo_value_t slope = param(ctx, 2, m);
  return finish(ctx, sel(b, cmp(b, "GT", x, tpu_emit_splat(b, x, 0)), g, tpu_emit_mul(b, g, slope)));
}

static tpu_status_t lower_hardswish_backward(tpu_lower_ctx_t* ctx) {
  FLOAT_OUT_OR_DECLINE(ctx, d);
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_value_t g = math_operand(ctx, 0, d), x = math_operand(ctx, 1, d);
  tpu_hlo_value_t mid = tpu_emit_mul(b, g, tpu_emit_add(b, tpu_emit_div(b, x, tpu_emit_splat(b, x, 3)), tpu_emit_splat(b, x, 0.5)));
  tpu_hlo_value_t r = sel(b, cmp(b, "LE", x, tpu_emit_splat(b, x, 3)), mid, g);
  return finish(ctx, sel(b, cmp(b, "LT", x, tpu_emit_splat(b, x, -3)), tpu_emit_splat(b, x, 0), r));
}

static tpu_status_t lower_hardsigmoid_backward(tpu_lower_ctx_t* ctx) {
  FLOAT_OUT_OR_DECLINE(ctx, d);
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_value_t g = math_operand(ctx, 0, d), x = math_operand(ctx, 1, d);
  tpu_hlo_value_t inside = tpu_emit_binary(b, "stablehlo.and", cmp(b, "GT", x, tpu_emit_splat(b, x, -3)),
                                           cmp(b, "LT", x, tpu_emit_splat(b, x, 3)));
  return finish(ctx, sel(b, inside, tpu_emit_mul(b, g, tpu_emit_splat(b, g, 1.0 / 6.0)), tpu_emit_splat(b, g, 0)));
}

/* hardtanh = clamp(x, min_val, max_val) in the input dtype. */
static tpu_status_t lower_hardtanh(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_dtype_t d = tpu_lower_output_type(ctx, 0).dtype;
  if (d == TPU_DTYPE_BOOL || tpu_dtype_is_complex(d))
    return tpu_lower_decline(ctx, "hardtanh of %s", tpu_dtype_name(d));
  tpu_hlo_value_t x = operand(ctx, 0, d);
  return finish(ctx, min_nan(b, max_nan(b, x, operand(ctx, 1, d)), operand(ctx, 2, d)));
}

/* (x <= min_val || x >= max_val) ? 0 : grad */
static tpu_status_t lower_hardtanh_backward(tpu_lower_ctx_t* ctx) {
  FLOAT_OUT_OR_DECLINE(ctx, d);
  tpu_dtype_t m = math_dtype(d);
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_value_t g = math_operand(ctx, 0, d), x = math_operand(ctx, 1, d);
  tpu_hlo_value_t outside = tpu_emit_binary(b, "stablehlo.or", cmp(b, "LE", x, param(ctx, 2, m)),
                                            cmp(b, "GE", x, param(ctx, 3, m)));
  return finish(ctx, sel(b, outside, tpu_emit_splat(b, g, 0), g));
}

/* threshold(x, th, value) = x <= th ? value : x, for any real dtype. */
static tpu_status_t lower_threshold(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_dtype_t d = tpu_lower_output_type(ctx, 0).dtype;
  if (d == TPU_DTYPE_BOOL || tpu_dtype_is_complex(d))
    return tpu_lower_decline(ctx, "threshold of %s", tpu_dtype_name(d));
  tpu_dtype_t m = math_dtype(d);
  tpu_hlo_value_t x = math_operand(ctx, 0, d);
  return finish(ctx, sel(b, cmp(b, "LE", x, param(ctx, 1, m)), param(ctx, 2, m), x));
}

/* threshold_backward(grad, self, th) = self <= th ? 0 : grad (relu's). */
static tpu_status_t lower_threshold_backward(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_dtype_t d = tpu_lower_output_type(ctx, 0).dtype;
  if (d == TPU_DTYPE_BOOL || tpu_dtype_is_complex(d))
    return tpu_lower_decline(ctx, "threshold_backward of %s", tpu_dtype_name(d));
  tpu_dtype_t m = math_dtype(d);
  tpu_hlo_value_t g = math_operand(ctx, 0, d), x = math_operand(ctx, 1, d);
  return finish(ctx, sel(b, cmp(b, "LE", x, param(ctx, 2, m)), tpu_emit_splat(b, g, 0), g));
}

/* grad * (1 - y) * y */
static tpu_status_t lower_sigmoid_backward(tpu_lower_ctx_t* ctx) {
  FLOAT_OUT_OR_DECLINE(ctx, d);
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_value_t g = math_operand(ctx, 0, d), y = math_operand(ctx, 1, d);
  return finish(ctx, tpu_emit_mul(b, tpu_emit_mul(b, g, tpu_emit_sub(b, tpu_emit_splat(b, y, 1), y)), y));
}

/* grad * (1 - y * y) */
static tpu_status_t lower_tanh_backward(tpu_lower_ctx_t* ctx) {
  FLOAT_OUT_OR_DECLINE(ctx, d);
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_value_t g = math_operand(ctx, 0, d), y = math_operand(ctx, 1, d);
  return finish(ctx, tpu_emit_mul(b, g, tpu_emit_sub(b, tpu_emit_splat(b, y, 1), tpu_emit_mul(b, y, y))));
}

/* logit(x, eps) = log(x / (1 - x)), x clamped to [eps, 1 - eps] when eps is
 * given (NaN kept). */
static tpu_status_t lower_logit(tpu_lower_ctx_t* ctx) {
  FLOAT_OUT_OR_DECLINE(ctx, d);
  tpu_dtype_t m = math_dtype(d);
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_value_t x = math_operand(ctx, 0, d);
  if (present(ctx, 1) && tpu_lower_arg(ctx, 1)->f >= 0) {
    tpu_hlo_value_t lo = param(ctx, 1, m), hi = tpu_emit_sub(b, tpu_emit_splat(b, x, 1), lo);
    x = sel(b, cmp(b, "LT", x, lo), lo, sel(b, cmp(b, "GT", x, hi), hi, x));
  }
  return finish(ctx, f_log(b, tpu_emit_div(b, x, tpu_emit_sub(b, tpu_emit_splat(b, x, 1), x))));
}

/* grad / (x * (1 - x)); outside [0, 1] NaN, or outside [eps, 1 - eps] 0. */
static tpu_status_t lower_logit_backward(tpu_lower_ctx_t* ctx) {
  FLOAT_OUT_OR_DECLINE(ctx, d);
  tpu_dtype_t m = math_dtype(d);
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_value_t g = math_operand(ctx, 0, d), x = math_operand(ctx, 1, d);
  bool has_eps = present(ctx, 2) && tpu_lower_arg(ctx, 2)->f >= 0;
  tpu_hlo_value_t lo = has_eps ? param(ctx, 2, m) : tpu_emit_splat(b, x, 0);
  tpu_hlo_value_t hi = tpu_emit_sub(b, tpu_emit_splat(b, x, 1), lo);
  tpu_hlo_value_t outside =
      tpu_emit_binary(b, "stablehlo.or", cmp(b, "LT", x, lo), cmp(b, "GT", x, hi));
  tpu_hlo_value_t r = tpu_emit_div(b, g, tpu_emit_mul(b, x, tpu_emit_sub(b, tpu_emit_splat(b, x, 1), x)));
  return finish(ctx, sel(b, outside, tpu_emit_splat(b, x, has_eps ? 0 : NAN), r));
}

/* ---- comparisons, logical and bitwise ops ------------------------------- */

/* Compares in the common dtype of (self, other); the output is bool, or the
 * self dtype for in-place forms (eq_). */
static tpu_status_t compare_op(tpu_lower_ctx_t* ctx, const char* dir) {
  static const int idx[2] = {0, 1};
  tpu_dtype_t d = tpu_lower_result_type(ctx, idx, 2);
  if (tpu_dtype_is_complex(d) && strcmp(dir, "EQ") != 0 && strcmp(dir, "NE") != 0)
    return tpu_lower_decline(ctx, "ordered comparison of complex");
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  return finish(ctx, cmp(b, dir, operand(ctx, 0, d), operand(ctx, 1, d)));
}
static tpu_status_t lower_eq(tpu_lower_ctx_t* ctx) { return compare_op(ctx, "EQ"); }
static tpu_status_t lower_ne(tpu_lower_ctx_t* ctx) { return compare_op(ctx, "NE"); }
static tpu_status_t lower_lt(tpu_lower_ctx_t* ctx) { return compare_op(ctx, "LT"); }
static tpu_status_t lower_le(tpu_lower_ctx_t* ctx) { return compare_op(ctx, "LE"); }
static tpu_status_t lower_gt(tpu_lower_ctx_t* ctx) { return compare_op(ctx, "GT"); }
static tpu_status_t lower_ge(tpu_lower_ctx_t* ctx) { return compare_op(ctx, "GE"); }

/* logical_*: operands as truth values (nonzero, NaN included). */
static tpu_status_t logical_op(tpu_lower_ctx_t* ctx, const char* op) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_value_t x = operand(ctx, 0, TPU_DTYPE_BOOL);
  if (!op) return finish(ctx, un(b, "stablehlo.not", x));
  return finish(ctx, tpu_emit_binary(b, op, x, operand(ctx, 1, TPU_DTYPE_BOOL)));
}
static tpu_status_t lower_logical_and(tpu_lower_ctx_t* ctx) {
  return logical_op(ctx, "stablehlo.and");
}
static tpu_status_t lower_logical_or(tpu_lower_ctx_t* ctx) {
  return logical_op(ctx, "stablehlo.or");
}
static tpu_status_t lower_logical_xor(tpu_lower_ctx_t* ctx) {
  return logical_op(ctx, "stablehlo.xor");
}
static tpu_status_t lower_logical_not(tpu_lower_ctx_t* ctx) { return logical_op(ctx, NULL); }

/* bitwise_*: integers and bool, in the common dtype. */
static tpu_status_t bitwise_op(tpu_lower_ctx_t* ctx, const char* op) {
  static const int idx[2] = {0, 1};
  tpu_dtype_t d = tpu_lower_result_type(ctx, idx, op ? 2 : 1);
  if (is_float(d) || tpu_dtype_is_complex(d))
    return tpu_lower_decline(ctx, "bitwise op on %s", tpu_dtype_name(d));
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_value_t x = operand(ctx, 0, d);
  if (!op) return finish(ctx, un(b, "stablehlo.not", x));
  return finish(ctx, tpu_emit_binary(b, op, x, operand(ctx, 1, d)));
}
static tpu_status_t lower_bitwise_and(tpu_lower_ctx_t* ctx) {
  return bitwise_op(ctx, "stablehlo.and");
}
static tpu_status_t lower_bitwise_or(tpu_lower_ctx_t* ctx) {
  return bitwise_op(ctx, "stablehlo.or");
}
static tpu_status_t lower_bitwise_xor(tpu_lower_ctx_t* ctx) {
  return bitwise_op(ctx, "stablehlo.xor");
}
static tpu_status_t lower_bitwise_not(tpu_lower_ctx_t* ctx) { return bitwise_op(ctx, NULL); }

/* isnan / isinf / isposinf / isneginf / signbit: bool results; integers
 * are never NaN or infinite. (isfinite decomposes into isnan/abs/ne.) */
typedef enum { IS_NAN, IS_INF, IS_POSINF, IS_NEGINF, SIGN_BIT } float_class_t;

static tpu_status_t float_class(tpu_lower_ctx_t* ctx, float_class_t which) {
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
static tpu_status_t lower_isnan(tpu_lower_ctx_t* ctx) { return float_class(ctx, IS_NAN); }
static tpu_status_t lower_isinf(tpu_lower_ctx_t* ctx) { return float_class(ctx, IS_INF); }
static tpu_status_t lower_isposinf(tpu_lower_ctx_t* ctx) { return float_class(ctx, IS_POSINF); }
static tpu_status_t lower_isneginf(tpu_lower_ctx_t* ctx) { return float_class(ctx, IS_NEGINF); }
static tpu_status_t lower_signbit(tpu_lower_ctx_t* ctx) { return float_class(ctx, SIGN_BIT); }

/* ---- binary arithmetic --------------------------------------------------- */

/* where.self(cond, self, other): selects in the output dtype (the promoted
 * one; two Python numbers give the default float, not float64). */
static tpu_status_t lower_where(tpu_lower_ctx_t* ctx) {
  tpu_dtype_t d = tpu_lower_output_type(ctx, 0).dtype;
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  return finish(ctx, sel(b, operand(ctx, 0, TPU_DTYPE_BOOL), operand(ctx, 1, d),
                         operand(ctx, 2, d)));
}

static tpu_status_t min_max(tpu_lower_ctx_t* ctx, bool is_max, bool ignore_nan) {
  static const int idx[2] = {0, 1};
  tpu_dtype_t d = tpu_lower_result_type(ctx, idx, 2);
  if (tpu_dtype_is_complex(d)) return tpu_lower_decline(ctx, "complex min/max");
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_value_t x = operand(ctx, 0, d), y = operand(ctx, 1, d);
  tpu_hlo_value_t r = is_max ? max_nan(b, x, y) : min_nan(b, x, y);
  /* fmax / fmin: a NaN loses to a number. */
  if (ignore_nan && is_float(d)) r = sel(b, is_nan(b, x), y, sel(b, is_nan(b, y), x, r));
  return finish(ctx, r);
}
static tpu_status_t lower_maximum(tpu_lower_ctx_t* ctx) { return min_max(ctx, true, false); }
static tpu_status_t lower_minimum(tpu_lower_ctx_t* ctx) { return min_max(ctx, false, false); }
static tpu_status_t lower_fmax(tpu_lower_ctx_t* ctx) { return min_max(ctx, true, true); }
static tpu_status_t lower_fmin(tpu_lower_ctx_t* ctx) { return min_max(ctx, false, true); }

/* clamp(self, min?, max?) (Scalar or Tensor bounds), clamp_min, clamp_max:
 * min then max, NaN propagating from every operand, in the common dtype. */
static tpu_status_t clamp_op(tpu_lower_ctx_t* ctx, int min_arg, int max_arg) {
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
static tpu_status_t lower_clamp(tpu_lower_ctx_t* ctx) { return clamp_op(ctx, 1, 2); }
static tpu_status_t lower_clamp_min(tpu_lower_ctx_t* ctx) { return clamp_op(ctx, 1, 0); }
static tpu_status_t lower_clamp_max(tpu_lower_ctx_t* ctx) { return clamp_op(ctx, 0, 1); }

/* fmod (C: sign of the dividend) and remainder (Python: sign of the
 * divisor), on integers exactly and on floats in the math dtype. */
static tpu_status_t mod_op(tpu_lower_ctx_t* ctx, bool python) {
  static const int idx[2] = {0, 1};
  tpu_dtype_t d = tpu_lower_result_type(ctx, idx, 2);
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
static tpu_status_t lower_remainder(tpu_lower_ctx_t* ctx) { return mod_op(ctx, true); }
static tpu_status_t lower_fmod(tpu_lower_ctx_t* ctx) { return mod_op(ctx, false); }

/* atan2, with both-zero operands answered by a select: XLA's CPU compiler
 * gave NaN for atan2(0, 0) where the zeros were known only after its own
 * simplification (atan2(v, v), v = float(a ^ a), fused by defer_and_fuse).
 * atan2(+-0, +0) = +-0 and atan2(+-0, -0) = +-pi, as C's. */
static tpu_status_t lower_atan2(tpu_lower_ctx_t* ctx) {
  static const int idx[2] = {0, 1};
  tpu_dtype_t d = common_dtype(ctx, idx, 2, true);
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
  static const int idx[2] = {0, 1};
  tpu_dtype_t d = common_dtype(ctx, idx, 2, true);
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
  static const int idx[2] = {0, 1};
  tpu_dtype_t d = tpu_lower_result_type(ctx, idx, 2);
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
                                                                   : param(ctx, 2, m);
  tpu_hlo_value_t diff = tpu_emit_sub(b, e, x);
  tpu_hlo_value_t small = cmp(b, "LT", un(b, "stablehlo.abs", w), tpu_emit_splat(b, w, 0.5));
  tpu_hlo_value_t lo = tpu_emit_add(b, x, tpu_emit_mul(b, w, diff));
  tpu_hlo_value_t hi = tpu_emit_sub(b, e, tpu_emit_mul(b, diff, tpu_emit_sub(b, tpu_emit_splat(b, w, 1), w)));
  return finish(ctx, sel(b, small, lo, hi));
}

/* addcmul: self + value * t1 * t2; addcdiv: self + value * t1 / t2. */
static tpu_status_t addc_op(tpu_lower_ctx_t* ctx, bool divide) {
  static const int idx[3] = {0, 1, 2};
  tpu_dtype_t d = tpu_lower_result_type(ctx, idx, 3);
  if (tpu_dtype_is_complex(d) || d == TPU_DTYPE_BOOL || (divide && !is_float(d)))
    return tpu_lower_decline(ctx, "%s of %s", divide ? "addcdiv" : "addcmul", tpu_dtype_name(d));
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_dtype_t m = math_dtype(d);
  tpu_hlo_value_t x = math_operand(ctx, 0, d), t1 = math_operand(ctx, 1, d);
  tpu_hlo_value_t t2 = math_operand(ctx, 2, d);
  tpu_hlo_value_t scaled = tpu_emit_mul(b, param(ctx, 3, m), t1);
  return finish(ctx, tpu_emit_add(b, x, divide ? tpu_emit_div(b, scaled, t2) : tpu_emit_mul(b, scaled, t2)));
}
static tpu_status_t lower_addcmul(tpu_lower_ctx_t* ctx) { return addc_op(ctx, false); }
static tpu_status_t lower_addcdiv(tpu_lower_ctx_t* ctx) { return addc_op(ctx, true); }

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
  static const int idx[2] = {0, 1};
  tpu_dtype_t d = common_dtype(ctx, idx, 2, true);
  if (!is_float(d)) return tpu_lower_decline(ctx, "%s operands", tpu_dtype_name(d));
  *out_x = math_operand(ctx, 0, d);
  *out_y = math_operand(ctx, 1, d);
  return NULL;
}

/* xlogy / xlog1py: NaN if y is NaN, else 0 where x == 0, else x * log(y). */
static tpu_status_t xlog_op(tpu_lower_ctx_t* ctx, math_fn_t log_fn) {
  tpu_hlo_value_t x, y;
  tpu_status_t s = float_operands(ctx, &x, &y);
  if (s) return s;
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_value_t r = sel(b, cmp(b, "EQ", x, tpu_emit_splat(b, x, 0)), tpu_emit_splat(b, x, 0), tpu_emit_mul(b, x, log_fn(b, y)));
  return finish(ctx, sel(b, is_nan(b, y), y, r));
}
static tpu_status_t lower_xlogy(tpu_lower_ctx_t* ctx) { return xlog_op(ctx, f_log); }
static tpu_status_t lower_xlog1py(tpu_lower_ctx_t* ctx) { return xlog_op(ctx, f_log1p); }

/* entr: -x log x for x > 0, 0 at 0, -inf below, NaN kept. */
static tpu_hlo_value_t f_entr(tpu_hlo_builder_t* b, tpu_hlo_value_t x) {
  tpu_hlo_value_t zero = tpu_emit_splat(b, x, 0);
  tpu_hlo_value_t r = un(b, "stablehlo.negate", tpu_emit_mul(b, x, f_log(b, x)));
  r = sel(b, cmp(b, "EQ", x, zero), zero, r);
  return sel(b, cmp(b, "LT", x, zero), tpu_emit_splat(b, x, -INFINITY), r);
}
static tpu_status_t lower_entr(tpu_lower_ctx_t* ctx) { return unary_math(ctx, f_entr); }

/* sinc: sin(pi x) / (pi x), 1 at 0. */
static tpu_hlo_value_t f_sinc(tpu_hlo_builder_t* b, tpu_hlo_value_t x) {
  tpu_hlo_value_t px = tpu_emit_mul(b, tpu_emit_splat(b, x, M_PI), x);
  return sel(b, cmp(b, "EQ", x, tpu_emit_splat(b, x, 0)), tpu_emit_splat(b, x, 1), tpu_emit_div(b, f_sin(b, px), px));
}
static tpu_status_t lower_sinc(tpu_lower_ctx_t* ctx) { return unary_math(ctx, f_sinc); }

static tpu_hlo_value_t f_lgamma(tpu_hlo_builder_t* b, tpu_hlo_value_t x) {
  return un(b, "chlo.lgamma", x);
}
static tpu_status_t lower_lgamma(tpu_lower_ctx_t* ctx) { return unary_math(ctx, f_lgamma); }

/* digamma: PyTorch gives -inf at +0 and +inf at -0 (CHLO gives NaN). */
static tpu_hlo_value_t f_digamma(tpu_hlo_builder_t* b, tpu_hlo_value_t x) {
  tpu_hlo_value_t at_zero = sel(b, sign_bit(b, x), tpu_emit_splat(b, x, INFINITY), tpu_emit_splat(b, x, -INFINITY));
  return sel(b, cmp(b, "EQ", x, tpu_emit_splat(b, x, 0)), at_zero, un(b, "chlo.digamma", x));
}
static tpu_status_t lower_digamma(tpu_lower_ctx_t* ctx) { return unary_math(ctx, f_digamma); }
tpu_hlo_value_t tpu_emit_digamma(tpu_hlo_builder_t* b, tpu_hlo_value_t x) { return f_digamma(b, x); }

/* angle of a real number: pi for negatives, 0 otherwise, NaN kept. */
static tpu_hlo_value_t f_angle(tpu_hlo_builder_t* b, tpu_hlo_value_t x) {
  tpu_hlo_value_t r = sel(b, cmp(b, "LT", x, tpu_emit_splat(b, x, 0)), tpu_emit_splat(b, x, M_PI), tpu_emit_splat(b, x, 0));
  return sel(b, is_nan(b, x), x, r);
}
/* angle of a complex number: atan2(imag, real), in its part type. */
static tpu_status_t lower_angle(tpu_lower_ctx_t* ctx) {
  const tpu_lower_arg_t* a = tpu_lower_arg(ctx, 0);
  if (a->kind != TPU_ARG_TENSOR || !tpu_dtype_is_complex(a->type.dtype)) return unary_math(ctx, f_angle);
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_value_t z = tpu_lower_tensor(ctx, 0);
  tpu_hlo_type_t pt = a->type;
  pt.dtype = tpu_dtype_complex_part(pt.dtype);
  tpu_hlo_value_t re = tpu_hlo_op(b, "stablehlo.real", &z, 1, pt, NULL);
  tpu_hlo_value_t im = tpu_hlo_op(b, "stablehlo.imag", &z, 1, pt, NULL);
  return finish(ctx, tpu_emit_binary(b, "stablehlo.atan2", im, re));
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
  tpu_hlo_value_t r = tpu_emit_mul(b, m, f_sqrt(b, tpu_emit_add(b, tpu_emit_splat(b, x, 1), tpu_emit_mul(b, q, q))));
  r = sel(b, cmp(b, "EQ", m, zero), zero, r);
  tpu_hlo_value_t inf = tpu_emit_splat(b, x, INFINITY);
  tpu_hlo_value_t any_inf = tpu_emit_binary(b, "stablehlo.or", cmp(b, "EQ", ax, inf),
                                            cmp(b, "EQ", ay, inf));
  return finish(ctx, sel(b, any_inf, inf, r));
}

/* logaddexp(2): equal infinities return themselves; else
 * max + log1p(exp(-|x - y|)) (base 2: exp2, scaled by 1/ln 2). */
static tpu_status_t logaddexp_op(tpu_lower_ctx_t* ctx, bool base2) {
  /* CPU has no integer or bool kernel (NotImplementedError). */
  if (!is_float(tpu_lower_output_type(ctx, 0).dtype)) return tpu_lower_decline(ctx, "logaddexp of integers");
  tpu_hlo_value_t x, y;
  tpu_status_t s = float_operands(ctx, &x, &y);
  if (s) return s;
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_value_t m = tpu_emit_binary(b, "stablehlo.maximum", x, y);
  tpu_hlo_value_t neg = un(b, "stablehlo.negate", un(b, "stablehlo.abs", tpu_emit_sub(b, x, y)));
  tpu_hlo_value_t r = base2 ? tpu_emit_mul(b, f_log1p(b, f_exp2(b, neg)), tpu_emit_splat(b, x, 1 / M_LN2))
                            : f_log1p(b, f_exp(b, neg));
  r = tpu_emit_add(b, m, r);
  tpu_hlo_value_t same_inf = tpu_emit_binary(
      b, "stablehlo.and", cmp(b, "EQ", un(b, "stablehlo.abs", x), tpu_emit_splat(b, x, INFINITY)),
      cmp(b, "EQ", x, y));
  return finish(ctx, sel(b, same_inf, x, r));
}
static tpu_status_t lower_logaddexp(tpu_lower_ctx_t* ctx) { return logaddexp_op(ctx, false); }
static tpu_status_t lower_logaddexp2(tpu_lower_ctx_t* ctx) { return logaddexp_op(ctx, true); }

/* nextafter is exact in the input dtype: no widening. */
static tpu_status_t lower_nextafter(tpu_lower_ctx_t* ctx) {
  static const int idx[2] = {0, 1};
  tpu_dtype_t d = tpu_lower_result_type(ctx, idx, 2);
  if (!is_float(d)) return tpu_lower_decline(ctx, "nextafter of %s", tpu_dtype_name(d));
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  return finish(ctx, tpu_emit_binary(b, "chlo.next_after", operand(ctx, 0, d), operand(ctx, 1, d)));
}

/* heaviside(x, values): values where x == 0, else x > 0; any real dtype. */
static tpu_status_t lower_heaviside(tpu_lower_ctx_t* ctx) {
  static const int idx[2] = {0, 1};
  tpu_dtype_t d = tpu_lower_result_type(ctx, idx, 2);
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
  static const int idx[2] = {0, 1};
  tpu_dtype_t d = tpu_lower_result_type(ctx, idx, 2);
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

/* Shifts, PyTorch's rules: a shift by a negative amount or by the bit width
 * or more gives 0 (left), or the sign fill (right, signed types). */
static tpu_status_t shift_op(tpu_lower_ctx_t* ctx, bool left) {
  static const int idx[2] = {0, 1};
  tpu_dtype_t d = tpu_lower_result_type(ctx, idx, 2);
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
static tpu_status_t lower_shift_left(tpu_lower_ctx_t* ctx) { return shift_op(ctx, true); }
static tpu_status_t lower_shift_right(tpu_lower_ctx_t* ctx) { return shift_op(ctx, false); }

/* softshrink: x - l above l, x + l below -l, else x * 0 (keeps NaN). */
static tpu_status_t lower_softshrink(tpu_lower_ctx_t* ctx) {
  FLOAT_OUT_OR_DECLINE(ctx, d);
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_value_t x = math_operand(ctx, 0, d), l = param(ctx, 1, math_dtype(d));
  tpu_hlo_value_t r = sel(b, cmp(b, "LT", x, un(b, "stablehlo.negate", l)), tpu_emit_add(b, x, l),
                          tpu_emit_mul(b, x, tpu_emit_splat(b, x, 0)));
  return finish(ctx, sel(b, cmp(b, "GT", x, l), tpu_emit_sub(b, x, l), r));
}

/* hardshrink(x, l) = 0 inside [-l, l] else x; the backwards of both shrinks
 * are 0 inside [-l, l] else grad. */
static tpu_status_t shrink_op(tpu_lower_ctx_t* ctx, bool backward) {
  FLOAT_OUT_OR_DECLINE(ctx, d);
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  int self = backward ? 1 : 0;
  tpu_hlo_value_t x = math_operand(ctx, self, d), l = param(ctx, self + 1, math_dtype(d));
  tpu_hlo_value_t inside = tpu_emit_binary(b, "stablehlo.and",
                                           cmp(b, "GE", x, un(b, "stablehlo.negate", l)),
                                           cmp(b, "LE", x, l));
  tpu_hlo_value_t keep = backward ? math_operand(ctx, 0, d) : x;
  return finish(ctx, sel(b, inside, tpu_emit_splat(b, keep, 0), keep));
}
static tpu_status_t lower_hardshrink(tpu_lower_ctx_t* ctx) { return shrink_op(ctx, false); }
static tpu_status_t lower_shrink_backward(tpu_lower_ctx_t* ctx) { return shrink_op(ctx, true); }

/* _prelu_kernel(x, w) = x > 0 ? x : w * x (w broadcast by the caller). */
static tpu_status_t lower_prelu_kernel(tpu_lower_ctx_t* ctx) {
  FLOAT_OUT_OR_DECLINE(ctx, d);
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_value_t x = math_operand(ctx, 0, d), w = math_operand(ctx, 1, d);
  return finish(ctx, sel(b, cmp(b, "GT", x, tpu_emit_splat(b, x, 0)), x, tpu_emit_mul(b, w, x)));
}

/* _prelu_kernel_backward -> (grad_input, grad_weight), both broadcast
 * shaped (autograd sums grad_weight down to the weight). */
static tpu_status_t lower_prelu_kernel_backward(tpu_lower_ctx_t* ctx) {
  FLOAT_OUT_OR_DECLINE(ctx, d);
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_value_t g = math_operand(ctx, 0, d), x = math_operand(ctx, 1, d);
  tpu_hlo_value_t w = math_operand(ctx, 2, d);
  tpu_hlo_value_t pos = cmp(b, "GT", x, tpu_emit_splat(b, x, 0));
  tpu_hlo_type_t t1 = tpu_lower_output_type(ctx, 1);
  tpu_lower_set_output(ctx, 1, tpu_emit_cast_to(b, sel(b, pos, tpu_emit_splat(b, x, 0), tpu_emit_mul(b, x, g)), &t1));
  return finish(ctx, sel(b, pos, g, tpu_emit_mul(b, w, g)));
}

/* isin(elements, test_elements, *, assume_unique, invert) and its Scalar
 * forms: every element against every test element in their common dtype
 * (CPU promotes as for eq: uint8 elements wrap an int test value), then an
 * OR over the test elements; NaN is in nothing. That is CPU's brute-force
 * kernel; its sorting kernel (large test sets) gives the same booleans.
 * Past 2^26 comparisons the lowering declines (the fallback sorts). CPU
 * refuses bool and complex operands; so does the fallback. */
static tpu_status_t lower_isin(tpu_lower_ctx_t* ctx) {
  static const int idx[2] = {0, 1};
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
  tpu_dtype_t d = tpu_lower_result_type(ctx, idx, 2);
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

const tpu_lowering_t tpu_lowerings_pointwise[] = {
    /* float math */
    {"exp", lower_exp, 0},
    {"exp2", lower_exp2, 0},
    {"expm1", lower_expm1, 0},
    {"log", lower_log, 0},
    {"log1p", lower_log1p, 0},
    {"log2", lower_log2, 0},
    {"log10", lower_log10, 0},
    {"sin", lower_sin, 0},
    {"cos", lower_cos, 0},
    {"tan", lower_tan, 0},
    {"asin", lower_asin, 0},
    {"acos", lower_acos, 0},
    {"atan", lower_atan, 0},
    {"sinh", lower_sinh, 0},
    {"cosh", lower_cosh, 0},
    {"tanh", lower_tanh, 0},
    {"asinh", lower_asinh, 0},
    {"acosh", lower_acosh, 0},
    {"atanh", lower_atanh, 0},
    {"sqrt", lower_sqrt, 0},
    {"rsqrt", lower_rsqrt, 0},
    {"reciprocal", lower_reciprocal, 0},
    {"erf", lower_erf, 0},
    {"erfc", lower_erfc, 0},
    {"erfinv", lower_erfinv, 0},
    {"sigmoid", lower_sigmoid, 0},
    {"frac", lower_frac, 0},
    /* exact unary */
    {"abs", lower_abs, 0},
    {"neg", lower_neg, 0},
    {"conj_physical", lower_conj_physical, 0},
    {"sign", lower_sign, 0},
    {"sgn", lower_sign, 0},
    {"floor", lower_floor, 0},
    {"ceil", lower_ceil, 0},
    {"trunc", lower_trunc, 0},
    {"round", lower_round, 0},
    /* activations and their backwards */
    {"relu", lower_relu, 0},
    {"gelu", lower_gelu, 0},
    {"gelu_backward", lower_gelu_backward, 0},
    {"silu", lower_silu, 0},
    {"silu_backward", lower_silu_backward, 0},
    {"mish", lower_mish, 0},
    {"softplus", lower_softplus, 0},
    {"softplus_backward", lower_softplus_backward, 0},
    {"elu", lower_elu, 0},
    {"elu_backward", lower_elu_backward, 0},
    {"leaky_relu", lower_leaky_relu, 0},
    {"leaky_relu_backward", lower_leaky_relu_backward, 0},
    {"hardswish", lower_hardswish, 0},
    {"hardswish_backward", lower_hardswish_backward, 0},
    {"hardsigmoid", lower_hardsigmoid, 0},
    {"hardsigmoid_backward", lower_hardsigmoid_backward, 0},
    {"hardtanh", lower_hardtanh, 0},
    {"hardtanh_backward", lower_hardtanh_backward, 0},
    {"threshold", lower_threshold, 0},
    {"threshold_backward", lower_threshold_backward, 0},
    {"sigmoid_backward", lower_sigmoid_backward, 0},
    {"tanh_backward", lower_tanh_backward, 0},
    {"logit", lower_logit, 0},
    {"logit_backward", lower_logit_backward, 0},
    /* comparisons, logical, bitwise, classification */
    {"eq", lower_eq, 0},
    {"isin", lower_isin, 0},
    {"ne", lower_ne, 0},
    {"lt", lower_lt, 0},
    {"le", lower_le, 0},
    {"gt", lower_gt, 0},
    {"ge", lower_ge, 0},
    {"logical_and", lower_logical_and, 0},
    {"logical_or", lower_logical_or, 0},
    {"logical_xor", lower_logical_xor, 0},
    {"logical_not", lower_logical_not, 0},
    {"bitwise_and", lower_bitwise_and, 0},
    {"bitwise_or", lower_bitwise_or, 0},
    {"bitwise_xor", lower_bitwise_xor, 0},
    {"bitwise_not", lower_bitwise_not, 0},
    {"isnan", lower_isnan, 0},
    {"isinf", lower_isinf, 0},
    {"isposinf", lower_isposinf, 0},
    {"isneginf", lower_isneginf, 0},
    {"signbit", lower_signbit, 0},
    /* binary and ternary arithmetic */
    {"where", lower_where, 0},
    {"maximum", lower_maximum, 0},
    {"minimum", lower_minimum, 0},
    {"fmax", lower_fmax, 0},
    {"fmin", lower_fmin, 0},
    {"clamp", lower_clamp, 0},
    {"clamp_min", lower_clamp_min, 0},
    {"clamp_max", lower_clamp_max, 0},
    {"remainder", lower_remainder, 0},
    {"fmod", lower_fmod, 0},
    {"atan2", lower_atan2, 0},
    {"copysign", lower_copysign, 0},
    {"pow", lower_pow, 0},
    {"lerp", lower_lerp, 0},
    {"addcmul", lower_addcmul, 0},
    {"addcdiv", lower_addcdiv, 0},
    {"nan_to_num", lower_nan_to_num, 0},
    {"masked_fill", lower_masked_fill, 0},
    /* more float math, shifts, shrinks, prelu */
    {"xlogy", lower_xlogy, 0},
    {"special_xlog1py", lower_xlog1py, 0},
    {"special_entr", lower_entr, 0},
    {"sinc", lower_sinc, 0},
    {"lgamma", lower_lgamma, 0},
    {"digamma", lower_digamma, 0},
    {"angle", lower_angle, 0},
    {"hypot", lower_hypot, 0},
    {"polar", lower_polar, 0},
    {"logaddexp", lower_logaddexp, 0},
    {"logaddexp2", lower_logaddexp2, 0},
    {"nextafter", lower_nextafter, 0},
    {"heaviside", lower_heaviside, 0},
    {"floor_divide", tpu_lower_floor_divide, 0},
    {"__lshift__", lower_shift_left, 0},
    {"__ilshift__", lower_shift_left, 0},
    {"bitwise_left_shift", lower_shift_left, 0},
    {"__rshift__", lower_shift_right, 0},
    {"__irshift__", lower_shift_right, 0},
    {"bitwise_right_shift", lower_shift_right, 0},
    {"softshrink", lower_softshrink, 0},
    {"softshrink_backward", lower_shrink_backward, 0},
    {"hardshrink", lower_hardshrink, 0},
    {"hardshrink_backward", lower_shrink_backward, 0},
    {"_prelu_kernel", lower_prelu_kernel, 0},
    {"_prelu_kernel_backward", lower_prelu_kernel_backward, 0},
};
const size_t tpu_lowerings_pointwise_count =
    sizeof tpu_lowerings_pointwise / sizeof tpu_lowerings_pointwise[0];
