/* activation family of the lowering table (see lowering.h): the
 * activations that take parameters or need their own formula (relu, gelu,
 * softplus, elu, leaky_relu, hardtanh, threshold, logit, the shrinks,
 * prelu) and the backwards of every activation; those that are one function
 * of x (sigmoid, tanh, silu, mish, hardswish, hardsigmoid) are pointwise.c's
 * float math. As there, half types compute in float32 and round once, and
 * Scalar parameters convert straight to the math dtype. */
#include <math.h>
#include <string.h>

#include "emit.h"
#include "lowering.h"
#include "pointwise.h"

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
    tpu_hlo_value_t cdf = tpu_emit_mul(b, half, tpu_emit_add(b, one, tpu_emit_erf(b, tpu_emit_mul(b, x, tpu_emit_splat(b, x, M_SQRT1_2)))));
    if (out_derivative) {
      tpu_hlo_value_t pdf = tpu_emit_mul(b, un(b, "stablehlo.exponential", tpu_emit_mul(b, tpu_emit_splat(b, x, -0.5), tpu_emit_mul(b, x, x))),
                                tpu_emit_splat(b, x, 0.5 * M_2_SQRTPI * M_SQRT1_2));
      *out_derivative = tpu_emit_add(b, cdf, tpu_emit_mul(b, x, pdf));
    }
    return tpu_emit_mul(b, x, cdf);
  }
  tpu_hlo_value_t beta = tpu_emit_splat(b, x, M_SQRT2 * M_2_SQRTPI * 0.5), kappa = tpu_emit_splat(b, x, 0.044715);
  tpu_hlo_value_t x_sq = tpu_emit_mul(b, x, x);
  tpu_hlo_value_t inner = tpu_emit_mul(b, beta, tpu_emit_add(b, x, tpu_emit_mul(b, kappa, tpu_emit_mul(b, x_sq, x))));
  tpu_hlo_value_t t = tpu_emit_tanh(b, inner);
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
  const tpu_lower_arg_t* arg = tpu_lower_arg(ctx, i);
  const char* a = arg->kind == TPU_ARG_STRING && arg->str ? arg->str : "none";
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
  tpu_hlo_value_t s = un(b, "stablehlo.logistic", x), one = tpu_emit_splat(b, x, 1);
  return finish(ctx, tpu_emit_mul(b, tpu_emit_mul(b, g, s), tpu_emit_add(b, one, tpu_emit_mul(b, x, tpu_emit_sub(b, one, s)))));
}

/* (x*beta) > threshold ? x : log1p(exp(x*beta)) / beta */
static tpu_status_t lower_softplus(tpu_lower_ctx_t* ctx) {
  FLOAT_OUT_OR_DECLINE(ctx, d);
  tpu_dtype_t m = math_dtype(d);
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_value_t x = math_operand(ctx, 0, d);
  tpu_hlo_value_t beta = operand(ctx, 1, m), threshold = operand(ctx, 2, m);
  tpu_hlo_value_t xb = tpu_emit_mul(b, x, beta);
  tpu_hlo_value_t soft = tpu_emit_div(b, un(b, "stablehlo.log_plus_one", un(b, "stablehlo.exponential", xb)), beta);
  return finish(ctx, sel(b, cmp(b, "GT", xb, threshold), x, soft));
}

/* (x*beta) > threshold ? grad : grad * z / (z + 1), z = exp(x*beta) */
static tpu_status_t lower_softplus_backward(tpu_lower_ctx_t* ctx) {
  FLOAT_OUT_OR_DECLINE(ctx, d);
  tpu_dtype_t m = math_dtype(d);
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_value_t g = math_operand(ctx, 0, d), x = math_operand(ctx, 1, d);
  tpu_hlo_value_t beta = operand(ctx, 2, m), threshold = operand(ctx, 3, m);
  tpu_hlo_value_t xb = tpu_emit_mul(b, x, beta), z = un(b, "stablehlo.exponential", xb);
  tpu_hlo_value_t soft = tpu_emit_div(b, tpu_emit_mul(b, g, z), tpu_emit_add(b, z, tpu_emit_splat(b, z, 1)));
  return finish(ctx, sel(b, cmp(b, "GT", xb, threshold), g, soft));
}

/* x <= 0 ? expm1(x * input_scale) * alpha * scale : x * scale */
static tpu_status_t lower_elu(tpu_lower_ctx_t* ctx) {
  FLOAT_OUT_OR_DECLINE(ctx, d);
  tpu_dtype_t m = math_dtype(d);
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_value_t x = math_operand(ctx, 0, d);
  tpu_hlo_value_t alpha = operand(ctx, 1, m), scale = operand(ctx, 2, m), in_scale = operand(ctx, 3, m);
  tpu_hlo_value_t neg = tpu_emit_mul(b, un(b, "stablehlo.exponential_minus_one", tpu_emit_mul(b, x, in_scale)), tpu_emit_mul(b, alpha, scale));
  return finish(ctx, sel(b, cmp(b, "LE", x, tpu_emit_splat(b, x, 0)), neg, tpu_emit_mul(b, x, scale)));
}

/* elu_backward(grad, alpha, scale, input_scale, is_result, self_or_result) */
static tpu_status_t lower_elu_backward(tpu_lower_ctx_t* ctx) {
  FLOAT_OUT_OR_DECLINE(ctx, d);
  tpu_dtype_t m = math_dtype(d);
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_value_t g = math_operand(ctx, 0, d), x = math_operand(ctx, 5, d);
  tpu_hlo_value_t alpha = operand(ctx, 1, m), scale = operand(ctx, 2, m), in_scale = operand(ctx, 3, m);
  tpu_hlo_value_t negcoef = tpu_emit_mul(b, alpha, scale);
  tpu_hlo_value_t neg =
      tpu_lower_arg(ctx, 4)->i
          ? tpu_emit_mul(b, tpu_emit_mul(b, g, in_scale), tpu_emit_add(b, x, negcoef))
          : tpu_emit_mul(b, tpu_emit_mul(b, tpu_emit_mul(b, g, in_scale), negcoef), un(b, "stablehlo.exponential", tpu_emit_mul(b, x, in_scale)));
  return finish(ctx, sel(b, cmp(b, "LE", x, tpu_emit_splat(b, x, 0)), neg, tpu_emit_mul(b, g, scale)));
}

static tpu_status_t lower_leaky_relu(tpu_lower_ctx_t* ctx) {
  FLOAT_OUT_OR_DECLINE(ctx, d);
  tpu_dtype_t m = math_dtype(d);
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_value_t x = math_operand(ctx, 0, d), slope = operand(ctx, 1, m);
  return finish(ctx, sel(b, cmp(b, "GT", x, tpu_emit_splat(b, x, 0)), x, tpu_emit_mul(b, x, slope)));
}

static tpu_status_t lower_leaky_relu_backward(tpu_lower_ctx_t* ctx) {
  FLOAT_OUT_OR_DECLINE(ctx, d);
  tpu_dtype_t m = math_dtype(d);
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_value_t g = math_operand(ctx, 0, d), x = math_operand(ctx, 1, d);
  tpu_hlo_value_t slope = operand(ctx, 2, m);
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
  tpu_hlo_value_t outside = tpu_emit_binary(b, "stablehlo.or", cmp(b, "LE", x, operand(ctx, 2, m)),
                                            cmp(b, "GE", x, operand(ctx, 3, m)));
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
  return finish(ctx, sel(b, cmp(b, "LE", x, operand(ctx, 1, m)), operand(ctx, 2, m), x));
}

/* threshold_backward(grad, self, th) = self <= th ? 0 : grad (relu's). */
static tpu_status_t lower_threshold_backward(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_dtype_t d = tpu_lower_output_type(ctx, 0).dtype;
  if (d == TPU_DTYPE_BOOL || tpu_dtype_is_complex(d))
    return tpu_lower_decline(ctx, "threshold_backward of %s", tpu_dtype_name(d));
  tpu_dtype_t m = math_dtype(d);
  tpu_hlo_value_t g = math_operand(ctx, 0, d), x = math_operand(ctx, 1, d);
  return finish(ctx, sel(b, cmp(b, "LE", x, operand(ctx, 2, m)), tpu_emit_splat(b, g, 0), g));
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
    tpu_hlo_value_t lo = operand(ctx, 1, m), hi = tpu_emit_sub(b, tpu_emit_splat(b, x, 1), lo);
    x = sel(b, cmp(b, "LT", x, lo), lo, sel(b, cmp(b, "GT", x, hi), hi, x));
  }
  return finish(ctx, un(b, "stablehlo.log", tpu_emit_div(b, x, tpu_emit_sub(b, tpu_emit_splat(b, x, 1), x))));
}

/* grad / (x * (1 - x)); outside [0, 1] NaN, or outside [eps, 1 - eps] 0. */
static tpu_status_t lower_logit_backward(tpu_lower_ctx_t* ctx) {
  FLOAT_OUT_OR_DECLINE(ctx, d);
  tpu_dtype_t m = math_dtype(d);
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_value_t g = math_operand(ctx, 0, d), x = math_operand(ctx, 1, d);
  bool has_eps = present(ctx, 2) && tpu_lower_arg(ctx, 2)->f >= 0;
  tpu_hlo_value_t lo = has_eps ? operand(ctx, 2, m) : tpu_emit_splat(b, x, 0);
  tpu_hlo_value_t hi = tpu_emit_sub(b, tpu_emit_splat(b, x, 1), lo);
  tpu_hlo_value_t outside =
      tpu_emit_binary(b, "stablehlo.or", cmp(b, "LT", x, lo), cmp(b, "GT", x, hi));
  tpu_hlo_value_t r = tpu_emit_div(b, g, tpu_emit_mul(b, x, tpu_emit_sub(b, tpu_emit_splat(b, x, 1), x)));
  return finish(ctx, sel(b, outside, tpu_emit_splat(b, x, has_eps ? 0 : NAN), r));
}

/* softshrink: x - l above l, x + l below -l, else x * 0 (keeps NaN). */
static tpu_status_t lower_softshrink(tpu_lower_ctx_t* ctx) {
  FLOAT_OUT_OR_DECLINE(ctx, d);
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_value_t x = math_operand(ctx, 0, d), l = operand(ctx, 1, math_dtype(d));
  tpu_hlo_value_t r = sel(b, cmp(b, "LT", x, un(b, "stablehlo.negate", l)), tpu_emit_add(b, x, l),
                          tpu_emit_mul(b, x, tpu_emit_splat(b, x, 0)));
  return finish(ctx, sel(b, cmp(b, "GT", x, l), tpu_emit_sub(b, x, l), r));
}

/* hardshrink(x, l) = 0 inside [-l, l] else x; the backwards of both shrinks
 * (data 1) are 0 inside [-l, l] else grad. */
static tpu_status_t lower_shrink(tpu_lower_ctx_t* ctx) {
  bool backward = tpu_lower_data(ctx);
  FLOAT_OUT_OR_DECLINE(ctx, d);
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  int self = backward ? 1 : 0;
  tpu_hlo_value_t x = math_operand(ctx, self, d), l = operand(ctx, self + 1, math_dtype(d));
  tpu_hlo_value_t inside = tpu_emit_binary(b, "stablehlo.and",
                                           cmp(b, "GE", x, un(b, "stablehlo.negate", l)),
                                           cmp(b, "LE", x, l));
  tpu_hlo_value_t keep = backward ? math_operand(ctx, 0, d) : x;
  return finish(ctx, sel(b, inside, tpu_emit_splat(b, keep, 0), keep));
}

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

const tpu_lowering_t tpu_lowerings_activation[] = {
    {"relu", lower_relu, 0},
    {"gelu", lower_gelu, 0},
    {"gelu_backward", lower_gelu_backward, 0},
    {"silu_backward", lower_silu_backward, 0},
    {"softplus", lower_softplus, 0},
    {"softplus_backward", lower_softplus_backward, 0},
    {"elu", lower_elu, 0},
    {"elu_backward", lower_elu_backward, 0},
    {"leaky_relu", lower_leaky_relu, 0},
    {"leaky_relu_backward", lower_leaky_relu_backward, 0},
    {"hardswish_backward", lower_hardswish_backward, 0},
    {"hardsigmoid_backward", lower_hardsigmoid_backward, 0},
    {"hardtanh", lower_hardtanh, 0},
    {"hardtanh_backward", lower_hardtanh_backward, 0},
    {"threshold", lower_threshold, 0},
    {"threshold_backward", lower_threshold_backward, 0},
    {"sigmoid_backward", lower_sigmoid_backward, 0},
    {"tanh_backward", lower_tanh_backward, 0},
    {"logit", lower_logit, 0},
    {"logit_backward", lower_logit_backward, 0},
    {"softshrink", lower_softshrink, 0},
    {"softshrink_backward", lower_shrink, 0, 1},
    {"hardshrink", lower_shrink, 0},
    {"hardshrink_backward", lower_shrink, 0, 1},
    {"_prelu_kernel", lower_prelu_kernel, 0},
    {"_prelu_kernel_backward", lower_prelu_kernel_backward, 0},
};
const size_t tpu_lowerings_activation_count =
    sizeof tpu_lowerings_activation / sizeof tpu_lowerings_activation[0];
