/* Pointwise lowerings (pointwise.c) run on the XLA CPU plugin, checked
 * against libm in double precision and against values PyTorch's CPU
 * kernels give. Activations: activation_test.c; comparisons, logical,
 * bitwise, min / max and clamp: compare_test.c. */
#include <float.h>

#include "pointwise_testing.h"

/* ---- references ---- */
static double r_rsqrt(double x) { return 1 / sqrt(x); }
static double r_recip(double x) { return 1 / x; }
static double r_sigmoid(double x) { return 1 / (1 + exp(-x)); }
static double r_frac(double x) { return x - trunc(x); }
static double r_silu(double x) { return x / (1 + exp(-x)); }
static double r_mish(double x) { return x * tanh(log1p(exp(x))); }
static double r_hardsigmoid(double x) { return fmin(fmax(x + 3, 0), 6) / 6; }
static double r_hardswish(double x) { return x * fmin(fmax(x + 3, 0), 6) / 6; }
static double r_erfinv(double y) {
  if (fabs(y) >= 1) return y == 1 ? INFINITY : y == -1 ? -INFINITY : NAN;
  double x = 0;
  for (int i = 0; i < 100; i++) x -= (erf(x) - y) / (2 / sqrt(M_PI) * exp(-x * x));
  return x;
}

enum { ANY, POSITIVE, UNIT, ABOVE_ONE };
static const float kInputs[4][N] = {
    {-3.5f, -1.2f, -0.3f, 0.0f, 0.25f, 0.7f, 1.5f, 4.0f},
    {0.01f, 0.3f, 1.0f, 2.5f, 7.0f, 100.0f, 1e-6f, 3e4f},
    {-0.99f, -0.5f, -0.1f, 0.0f, 0.3f, 0.6f, 0.9f, 0.999f},
    {1.0f, 1.001f, 1.5f, 2.0f, 10.0f, 100.0f, 1e4f, 3.0f},
};

static const struct {
  const char* op;
  double (*ref)(double);
  int domain;
} kMath[] = {
    {"aten::exp", exp, ANY},           {"aten::exp2", exp2, ANY},
    {"aten::expm1", expm1, ANY},       {"aten::log", log, POSITIVE},
    {"aten::log1p", log1p, POSITIVE},  {"aten::log2", log2, POSITIVE},
    {"aten::log10", log10, POSITIVE},  {"aten::sin", sin, ANY},
    {"aten::cos", cos, ANY},           {"aten::tan", tan, ANY},
    {"aten::asin", asin, UNIT},        {"aten::acos", acos, UNIT},
    {"aten::atan", atan, ANY},         {"aten::sinh", sinh, ANY},
    {"aten::cosh", cosh, ANY},         {"aten::tanh", tanh, ANY},
    {"aten::asinh", asinh, ANY},       {"aten::acosh", acosh, ABOVE_ONE},
    {"aten::atanh", atanh, UNIT},      {"aten::sqrt", sqrt, POSITIVE},
    {"aten::rsqrt", r_rsqrt, POSITIVE}, {"aten::reciprocal", r_recip, ANY},
    {"aten::erf", erf, ANY},           {"aten::erfc", erfc, ANY},
    {"aten::erfinv", r_erfinv, UNIT},  {"aten::sigmoid", r_sigmoid, ANY},
    {"aten::frac", r_frac, ANY},       {"aten::silu", r_silu, ANY},
    {"aten::mish", r_mish, ANY},       {"aten::hardsigmoid", r_hardsigmoid, ANY},
    {"aten::hardswish", r_hardswish, ANY}, {"aten::exp_", exp, ANY},
    {"aten::sqrt.out", sqrt, POSITIVE},
};

static void test_float_math_matches_libm(void) {
  tpu_lower_arg_t args[1] = {tensor(TPU_DTYPE_FLOAT32)};
  for (size_t k = 0; k < sizeof kMath / sizeof kMath[0]; k++) {
    const float* x = kInputs[kMath[k].domain];
    const void* data[1] = {x};
    void* result[1];
    CHECK_OK(run(kMath[k].op, args, 1, data, TPU_DTYPE_FLOAT32, result));
    const float* r = result[0];
    for (int i = 0; i < N; i++) {
      double want = kMath[k].ref(x[i]);
      if (!near(r[i], want, 4e-6, 1e-7)) {
        fprintf(stderr, "%s(%.9g) = %.9g, want %.9g\n", kMath[k].op, x[i], r[i], want);
        tpu_test_failures_++;
        break;
      }
    }
    free(result[0]);
  }
}

/* exp of int64 gives float32. */
static void test_integer_input(void) {
  void* result[1];
  int64_t xi[N] = {-3, -2, -1, 0, 1, 2, 3, 10};
  tpu_lower_arg_t iargs[1] = {tensor(TPU_DTYPE_INT64)};
  const void* idata[1] = {xi};
  CHECK_OK(run("aten::exp", iargs, 1, idata, TPU_DTYPE_FLOAT32, result));
  for (int i = 0; i < N; i++) CHECK(near(((float*)result[0])[i], exp((double)xi[i]), 4e-6, 0));
  free(result[0]);
}

/* bfloat16 math computes in float32 and rounds once, like PyTorch. */
static void test_bfloat16_rounds_once(void) {
  uint16_t x[N];
  for (int i = 0; i < N; i++) x[i] = to_bf16(kInputs[ANY][i]);
  tpu_lower_arg_t args[1] = {tensor(TPU_DTYPE_BFLOAT16)};
  const void* data[1] = {x};
  void* result[1];
  CHECK_OK(run("aten::tanh", args, 1, data, TPU_DTYPE_BFLOAT16, result));
  const uint16_t* r = result[0];
  for (int i = 0; i < N; i++) {
    float want = from_bf16(to_bf16(tanhf(from_bf16(x[i]))));
    CHECK(fabsf(from_bf16(r[i]) - want) <= fabsf(want) * (1.0f / 128));
  }
  free(result[0]);
}

static void test_sign_abs_neg(void) {
  float x[N] = {NAN, -0.0f, 0.0f, -2.0f, 3.0f, -INFINITY, INFINITY, 0.5f};
  tpu_lower_arg_t args[1] = {tensor(TPU_DTYPE_FLOAT32)};
  const void* data[1] = {x};
  void* result[1];
  CHECK_OK(run("aten::sign", args, 1, data, TPU_DTYPE_FLOAT32, result));
  float want[N] = {0, 0, 0, -1, 1, -1, 1, 1}; /* PyTorch: sign(NaN) = 0 */
  CHECK(memcmp(result[0], want, sizeof want) == 0);
  free(result[0]);
  int64_t xi[N] = {INT64_MIN, -5, 0, 7, -1, 1, 2, -2};
  tpu_lower_arg_t iargs[1] = {tensor(TPU_DTYPE_INT64)};
  const void* idata[1] = {xi};
  CHECK_OK(run("aten::sgn", iargs, 1, idata, TPU_DTYPE_INT64, result));
  int64_t iwant[N] = {-1, -1, 0, 1, -1, 1, 1, -1};
  CHECK(memcmp(result[0], iwant, sizeof iwant) == 0);
  free(result[0]);
  CHECK_OK(run("aten::abs", iargs, 1, idata, TPU_DTYPE_INT64, result));
  CHECK(((int64_t*)result[0])[0] == INT64_MIN && ((int64_t*)result[0])[1] == 5);
  free(result[0]);
  uint8_t u[N] = {0, 1, 2, 255, 128, 7, 0, 3};
  tpu_lower_arg_t uargs[1] = {tensor(TPU_DTYPE_UINT8)};
  const void* udata[1] = {u};
  CHECK_OK(run("aten::neg", uargs, 1, udata, TPU_DTYPE_UINT8, result));
  uint8_t uwant[N] = {0, 255, 254, 1, 128, 249, 0, 253};
  CHECK(memcmp(result[0], uwant, sizeof uwant) == 0);
  free(result[0]);
  CHECK_OK(run("aten::sign", uargs, 1, udata, TPU_DTYPE_UINT8, result));
  uint8_t swant[N] = {0, 1, 1, 1, 1, 1, 0, 1};
  CHECK(memcmp(result[0], swant, sizeof swant) == 0);
  free(result[0]);
}

static void test_rounding(void) {
  float x[N] = {0.5f, 1.5f, 2.5f, -0.5f, -1.7f, 1.2345f, -123.45f, NAN};
  tpu_lower_arg_t args[2] = {tensor(TPU_DTYPE_FLOAT32), {.kind = TPU_ARG_NONE}};
  const void* data[1] = {x};
  void* result[1];
  CHECK_OK(run("aten::round", args, 1, data, TPU_DTYPE_FLOAT32, result));
  float* r = result[0];
  CHECK(r[0] == 0 && r[1] == 2 && r[2] == 2 && r[3] == 0 && r[4] == -2 && isnan(r[7]));
  free(result[0]);
  CHECK_OK(run("aten::trunc", args, 1, data, TPU_DTYPE_FLOAT32, result));
  r = result[0];
  CHECK(r[2] == 2 && r[4] == -1 && r[6] == -123 && signbit(r[3]));
  free(result[0]);
  CHECK_OK(run("aten::floor", args, 1, data, TPU_DTYPE_FLOAT32, result));
  CHECK(((float*)result[0])[4] == -2);
  free(result[0]);
  CHECK_OK(run("aten::ceil_", args, 1, data, TPU_DTYPE_FLOAT32, result));
  CHECK(((float*)result[0])[4] == -1);
  free(result[0]);
  /* round(x, decimals): nearbyint(x * 10^d) / 10^d in float32. */
  args[1] = (tpu_lower_arg_t){.kind = TPU_ARG_INT, .i = 2};
  CHECK_OK(run("aten::round.decimals", args, 2, data, TPU_DTYPE_FLOAT32, result));
  r = result[0];
  CHECK(r[5] == nearbyintf(1.2345f * 100.0f) / 100.0f && r[6] == -123.45f);
  free(result[0]);
  args[1].i = -1;
  CHECK_OK(run("aten::round.decimals", args, 2, data, TPU_DTYPE_FLOAT32, result));
  r = result[0];
  CHECK(r[6] == -120.0f && r[1] == 0.0f);
  free(result[0]);
  /* Integers are returned unchanged. */
  int32_t xi[N] = {1, -2, 3, -4, 5, 6, 7, 2147483647};
  tpu_lower_arg_t iargs[1] = {tensor(TPU_DTYPE_INT32)};
  const void* idata[1] = {xi};
  CHECK_OK(run("aten::floor", iargs, 1, idata, TPU_DTYPE_INT32, result));
  CHECK(memcmp(result[0], xi, sizeof xi) == 0);
  free(result[0]);
}

/* Values from torch.pow on int64 tensors. */
static void test_integer_pow(void) {
  int64_t a[N] = {2, -1, -1, 1, 0, 3, -3, 5};
  int64_t e[N] = {-1, -3, -2, -5, -1, 40, 3, 0};
  int64_t want[N] = {0, -1, 1, 1, 0, -6289078614652622815LL, -27, 1};
  tpu_lower_arg_t args[2] = {tensor(TPU_DTYPE_INT64), tensor(TPU_DTYPE_INT64)};
  const void* data[2] = {a, e};
  void* result[1];
  CHECK_OK(run("aten::pow.Tensor_Tensor", args, 2, data, TPU_DTYPE_INT64, result));
  CHECK(memcmp(result[0], want, sizeof want) == 0);
  free(result[0]);
  /* Tensor_Scalar: float tensor ** python int, and Scalar base ** tensor. */
  float x[N] = {-2, -1.5f, 0, 0.5f, 1, 2, 3, 10};
  tpu_lower_arg_t fargs[2] = {tensor(TPU_DTYPE_FLOAT32), tpu_test_scalar_arg(TPU_DTYPE_INT64, true)};
  int64_t three = 3;
  const void* fdata[2] = {x, &three};
  CHECK_OK(run("aten::pow.Tensor_Scalar", fargs, 2, fdata, TPU_DTYPE_FLOAT32, result));
  for (int i = 0; i < N; i++) CHECK(near(((float*)result[0])[i], pow(x[i], 3), 2e-7, 0));
  free(result[0]);
  tpu_lower_arg_t sargs[2] = {tpu_test_scalar_arg(TPU_DTYPE_FLOAT64, true), tensor(TPU_DTYPE_FLOAT32)};
  double two = 2;
  const void* sdata[2] = {x, &two}; /* tensor first, then scalars */
  CHECK_OK(run("aten::pow.Scalar", sargs, 2, sdata, TPU_DTYPE_FLOAT32, result));
  for (int i = 0; i < N; i++) CHECK(near(((float*)result[0])[i], exp2(x[i]), 2e-7, 0));
  free(result[0]);
}

/* pow(tensor, scalar) exponents CPU computes otherwise than std::pow:
 * sqrt for 0.5 (NaN at -inf, -0.0 kept), 1/sqrt for -0.5, 1/x for -1. */
static void test_pow_scalar_special_exponents(void) {
  float x[N] = {-INFINITY, -0.0f, 0.0f, INFINITY, 4, 0.25f, -2, 9};
  tpu_lower_arg_t args[2] = {tensor(TPU_DTYPE_FLOAT32), tpu_test_scalar_arg(TPU_DTYPE_FLOAT64, true)};
  const double exps[3] = {0.5, -0.5, -1};
  for (int k = 0; k < 3; k++) {
    const void* data[2] = {x, &exps[k]};
    void* result[1];
    CHECK_OK(run("aten::pow.Tensor_Scalar", args, 2, data, TPU_DTYPE_FLOAT32, result));
    const float* y = result[0];
    for (int i = 0; i < N; i++) {
      double want = k == 0 ? sqrt(x[i]) : k == 1 ? 1 / sqrt(x[i]) : 1.0 / x[i];
      CHECK(isnan(want) ? isnan(y[i]) : (y[i] == (float)want && !signbit(y[i]) == !signbit(want)));
    }
    free(result[0]);
  }
}

/* tanh's float32 tail rounds below 1 where tanh does (to |x| ~ 9). */
static void test_tanh_tail(void) {
  float x[N] = {4, 5.5f, 7.9f, 8, -8, 8.5f, 9.5f, -12};
  tpu_lower_arg_t args[1] = {tensor(TPU_DTYPE_FLOAT32)};
  const void* data[1] = {x};
  void* result[1];
  CHECK_OK(run("aten::tanh", args, 1, data, TPU_DTYPE_FLOAT32, result));
  const float* y = result[0];
  for (int i = 0; i < N; i++) CHECK(near(y[i], tanh(x[i]), 1.2e-7, 0));
  CHECK(y[3] < 1.0f && y[4] > -1.0f);
  free(result[0]);
}

static void test_remainder_and_fmod(void) {
  int64_t a[N] = {5, -5, 5, -5, 0, 7, -7, 6};
  int64_t b[N] = {3, 3, -3, -3, 4, 7, 2, -4};
  tpu_lower_arg_t args[2] = {tensor(TPU_DTYPE_INT64), tensor(TPU_DTYPE_INT64)};
  const void* data[2] = {a, b};
  void* result[1];
  CHECK_OK(run("aten::remainder.Tensor", args, 2, data, TPU_DTYPE_INT64, result));
  int64_t py[N] = {2, 1, -1, -2, 0, 0, 1, -2};
  CHECK(memcmp(result[0], py, sizeof py) == 0);
  free(result[0]);
  CHECK_OK(run("aten::fmod.Tensor", args, 2, data, TPU_DTYPE_INT64, result));
  int64_t c[N] = {2, -2, 2, -2, 0, 0, -1, 2};
  CHECK(memcmp(result[0], c, sizeof c) == 0);
  free(result[0]);
  float fa[N] = {5.5f, -5.5f, 5.5f, -5.5f, 1, INFINITY, 3, -0.0f};
  tpu_lower_arg_t fargs[2] = {tensor(TPU_DTYPE_FLOAT32), tpu_test_scalar_arg(TPU_DTYPE_FLOAT64, true)};
  double m = -2.0;
  const void* fdata[2] = {fa, &m};
  CHECK_OK(run("aten::remainder.Scalar", fargs, 2, fdata, TPU_DTYPE_FLOAT32, result));
  float* r = result[0];
  CHECK(r[0] == -0.5f && r[1] == -1.5f && r[4] == -1.0f && isnan(r[5]) && r[6] == -1.0f);
  free(result[0]);
  CHECK_OK(run("aten::fmod.Scalar", fargs, 2, fdata, TPU_DTYPE_FLOAT32, result));
  r = result[0];
  CHECK(r[0] == 1.5f && r[1] == -1.5f && r[4] == 1.0f && r[6] == 1.0f);
  free(result[0]);
}

static void test_where_and_masked_fill(void) {
  bool c[N] = {1, 0, 1, 0, 1, 0, 1, 0};
  int32_t a[N] = {1, 2, 3, 4, 5, 6, 7, 8};
  /* where(cond, int32 tensor, python float) -> float32. */
  tpu_lower_arg_t args[3] = {tensor(TPU_DTYPE_BOOL), tensor(TPU_DTYPE_INT32),
                             tpu_test_scalar_arg(TPU_DTYPE_FLOAT64, true)};
  double other = -0.5;
  const void* data[3] = {c, a, &other};
  void* result[1];
  CHECK_OK(run("aten::where.self", args, 3, data, TPU_DTYPE_FLOAT32, result));
  float want[N] = {1, -0.5f, 3, -0.5f, 5, -0.5f, 7, -0.5f};
  CHECK(memcmp(result[0], want, sizeof want) == 0);
  free(result[0]);
  tpu_lower_arg_t margs[3] = {tensor(TPU_DTYPE_INT32), tensor(TPU_DTYPE_BOOL),
                              tpu_test_scalar_arg(TPU_DTYPE_INT64, true)};
  int64_t v = -9;
  const void* mdata[3] = {a, c, &v};
  CHECK_OK(run("aten::masked_fill_.Scalar", margs, 3, mdata, TPU_DTYPE_INT32, result));
  int32_t mw[N] = {-9, 2, -9, 4, -9, 6, -9, 8};
  CHECK(memcmp(result[0], mw, sizeof mw) == 0);
  free(result[0]);
}

static void test_copysign_and_nan_to_num(void) {
  float x[N] = {NAN, INFINITY, -INFINITY, -0.0f, 0.0f, -2, 3, -NAN};
  tpu_lower_arg_t args[2] = {tensor(TPU_DTYPE_FLOAT32), tensor(TPU_DTYPE_FLOAT32)};
  const void* data[1] = {x};
  void* result[1];
  float mag[N] = {1, 2, 3, 4, 5, 6, 7, 8};
  const void* cdata[2] = {mag, x};
  CHECK_OK(run("aten::copysign.Tensor", args, 2, cdata, TPU_DTYPE_FLOAT32, result));
  float cw[N] = {1, 2, -3, -4, 5, -6, 7, -8};
  CHECK(memcmp(result[0], cw, sizeof cw) == 0);
  free(result[0]);
  /* nan_to_num defaults: 0, +-FLT_MAX; bfloat16 uses its own max. */
  tpu_lower_arg_t nargs[4] = {tensor(TPU_DTYPE_FLOAT32), {.kind = TPU_ARG_NONE},
                              {.kind = TPU_ARG_NONE}, {.kind = TPU_ARG_FLOAT, .f = -7.0}};
  CHECK_OK(run("aten::nan_to_num", nargs, 4, data, TPU_DTYPE_FLOAT32, result));
  float* r = result[0];
  CHECK(r[0] == 0 && r[1] == FLT_MAX && r[2] == -7 && r[6] == 3);
  free(result[0]);
  uint16_t xb[N];
  for (int i = 0; i < N; i++) xb[i] = to_bf16(x[i]);
  nargs[0] = tensor(TPU_DTYPE_BFLOAT16);
  nargs[3] = (tpu_lower_arg_t){.kind = TPU_ARG_NONE};
  const void* bdata[1] = {xb};
  CHECK_OK(run("aten::nan_to_num", nargs, 4, bdata, TPU_DTYPE_BFLOAT16, result));
  CHECK(((uint16_t*)result[0])[1] == 0x7F7F && ((uint16_t*)result[0])[2] == 0xFF7F);
  free(result[0]);
}

static void test_lerp_addcmul_addcdiv(void) {
  float a[N] = {0, 1, 2, 3, -1, 10, 5, 0};
  float b[N] = {10, 3, -2, 3, 1, 20, 6, 1};
  float w[N] = {0, 0.25f, 0.5f, 1, 0.75f, -1, 2, 0.4999f};
  tpu_lower_arg_t args[3] = {tensor(TPU_DTYPE_FLOAT32), tensor(TPU_DTYPE_FLOAT32),
                             tensor(TPU_DTYPE_FLOAT32)};
  const void* data[3] = {a, b, w};
  void* result[1];
  CHECK_OK(run("aten::lerp.Tensor", args, 3, data, TPU_DTYPE_FLOAT32, result));
  for (int i = 0; i < N; i++) {
    float want = fabsf(w[i]) < 0.5f ? a[i] + w[i] * (b[i] - a[i])
                                    : b[i] - (b[i] - a[i]) * (1 - w[i]);
    CHECK(((float*)result[0])[i] == want);
  }
  free(result[0]);
  tpu_lower_arg_t sargs[3] = {tensor(TPU_DTYPE_FLOAT32), tensor(TPU_DTYPE_FLOAT32),
                              tpu_test_scalar_arg(TPU_DTYPE_FLOAT64, true)};
  double ws = 0.75;
  const void* sdata[3] = {a, b, &ws};
  CHECK_OK(run("aten::lerp.Scalar", sargs, 3, sdata, TPU_DTYPE_FLOAT32, result));
  for (int i = 0; i < N; i++)
    CHECK(((float*)result[0])[i] == b[i] - (b[i] - a[i]) * (1 - 0.75f));
  free(result[0]);
  tpu_lower_arg_t cargs[4] = {tensor(TPU_DTYPE_FLOAT32), tensor(TPU_DTYPE_FLOAT32),
                              tensor(TPU_DTYPE_FLOAT32), tpu_test_scalar_arg(TPU_DTYPE_FLOAT64, true)};
  double value = -0.5;
  const void* cdata[4] = {a, b, w, &value};
  CHECK_OK(run("aten::addcmul", cargs, 4, cdata, TPU_DTYPE_FLOAT32, result));
  for (int i = 0; i < N; i++) CHECK(((float*)result[0])[i] == a[i] + -0.5f * b[i] * w[i]);
  free(result[0]);
  CHECK_OK(run("aten::addcdiv_", cargs, 4, cdata, TPU_DTYPE_FLOAT32, result));
  for (int i = 0; i < N; i++) CHECK(((float*)result[0])[i] == a[i] + -0.5f * b[i] / w[i]);
  free(result[0]);
  /* Integer addcmul is exact. */
  int64_t ia[N] = {1, 2, 3, 4, 5, 6, 7, 8}, ib[N] = {-1, 0, 1, 2, 3, 4, 5, 1LL << 40};
  tpu_lower_arg_t iargs[4] = {tensor(TPU_DTYPE_INT64), tensor(TPU_DTYPE_INT64),
                              tensor(TPU_DTYPE_INT64), tpu_test_scalar_arg(TPU_DTYPE_INT64, true)};
  int64_t iv = 3;
  const void* idata[4] = {ia, ib, ib, &iv};
  CHECK_OK(run("aten::addcmul", iargs, 4, idata, TPU_DTYPE_INT64, result));
  /* 2^40 squared wraps, as in PyTorch: compute the expectation unsigned. */
  for (int i = 0; i < N; i++)
    CHECK(((int64_t*)result[0])[i] ==
          (int64_t)((uint64_t)ia[i] + 3u * (uint64_t)ib[i] * (uint64_t)ib[i]));
  free(result[0]);
}

/* Values from torch.pow: exponents of 64 and more are exact with wrapping
 * products (XLA's integer power only looked at the exponent's low bits). */
static void test_integer_pow_large_exponents(void) {
  int64_t a[N] = {3, 3, 3, 3, 3, 3, 3, 2};
  int64_t e[N] = {64, 100, 256, 63, 65, 127, 128, 64};
  int64_t want[N] = {8733086111712066817LL, -2984622845537545263LL, -3310041070528564223LL,
                     -3237885987332494933LL, 7752514261426648835LL, 3080657310641694891LL,
                     -9204772141784466943LL, 0};
  tpu_lower_arg_t args[2] = {tensor(TPU_DTYPE_INT64), tensor(TPU_DTYPE_INT64)};
  const void* data[2] = {a, e};
  void* result[1];
  CHECK_OK(run("aten::pow.Tensor_Tensor", args, 2, data, TPU_DTYPE_INT64, result));
  CHECK(memcmp(result[0], want, sizeof want) == 0);
  free(result[0]);
  int32_t a32[N] = {3, -3, 2, 5, 7, -1, 0, 1};
  int32_t e32[N] = {64, 65, 100, 1000, 33, 2147483647, 40, 99};
  int32_t want32[N] = {2038349057, -1820079875, 0, -412211615, 100179207, -1, 0, 1};
  tpu_lower_arg_t args32[2] = {tensor(TPU_DTYPE_INT32), tensor(TPU_DTYPE_INT32)};
  const void* data32[2] = {a32, e32};
  CHECK_OK(run("aten::pow.Tensor_Tensor", args32, 2, data32, TPU_DTYPE_INT32, result));
  CHECK(memcmp(result[0], want32, sizeof want32) == 0);
  free(result[0]);
}

/* div(rounding_mode="floor") on floats follows floor_divide (torch values):
 * 1 / inf floors to 0, -1 / inf to -1, inf / 2 is NaN. */
static void test_div_floor_float(void) {
  float x[N] = {1, -1, INFINITY, -INFINITY, -7.8125f, 5, -5, 0};
  float y[N] = {INFINITY, INFINITY, 2, 2, -2.609375f, 0, 0, -3};
  tpu_lower_arg_t args[3] = {tensor(TPU_DTYPE_FLOAT32), tensor(TPU_DTYPE_FLOAT32),
                             {.kind = TPU_ARG_STRING, .str = "floor"}};
  const void* data[2] = {x, y};
  void* result[1];
  CHECK_OK(run("aten::div.Tensor_mode", args, 3, data, TPU_DTYPE_FLOAT32, result));
  float* r = result[0];
  CHECK(r[0] == 0 && !signbit(r[0]) && r[1] == -1 && isnan(r[2]) && isnan(r[3]) && r[4] == 2 &&
        r[5] == INFINITY && r[6] == -INFINITY && r[7] == 0 && signbit(r[7]));
  free(result[0]);
}

/* Values from torch: floor_divide (the float case that rounding the
 * quotient first gets wrong), hypot and xlogy special values. */
static void test_floor_divide_hypot_xlogy(void) {
  int64_t a[N] = {1, -8, 5, -1, 7, 3, -5, 1};
  tpu_lower_arg_t args[2] = {tensor(TPU_DTYPE_INT64), tensor(TPU_DTYPE_INT64)};
  void* result[1];
  int64_t d[N] = {3, 3, -3, -3, 1, 7, 2, -4};
  const void* ddata[2] = {a, d};
  CHECK_OK(run("aten::floor_divide", args, 2, ddata, TPU_DTYPE_INT64, result));
  int64_t dw[N] = {0, -3, -2, 0, 7, 0, -3, -1};
  CHECK(memcmp(result[0], dw, sizeof dw) == 0);
  free(result[0]);
  float x[N] = {-7.8125f, 1, -1, 0, INFINITY, 5, 7, -0.5f};
  float y[N] = {-2.609375f, 0, 0, -3, 2, INFINITY, 0.7f, 2};
  tpu_lower_arg_t fargs[2] = {tensor(TPU_DTYPE_FLOAT32), tensor(TPU_DTYPE_FLOAT32)};
  const void* fdata[2] = {x, y};
  CHECK_OK(run("aten::floor_divide", fargs, 2, fdata, TPU_DTYPE_FLOAT32, result));
  float* r = result[0];
  CHECK(r[0] == 2 && r[1] == INFINITY && r[2] == -INFINITY && r[3] == 0 && signbit(r[3]) &&
        isnan(r[4]) && r[5] == 0 && r[6] == 10 && r[7] == -1);
  free(result[0]);
  float hx[N] = {3, 1e38f, INFINITY, NAN, 0, -5, 1e-30f, 0};
  float hy[N] = {4, 2e38f, NAN, 1, 0, 12, 1e-30f, -2};
  const void* hdata[2] = {hx, hy};
  CHECK_OK(run("aten::hypot", fargs, 2, hdata, TPU_DTYPE_FLOAT32, result));
  r = result[0];
  CHECK(near(r[0], 5, 1e-7, 0) && near(r[1], hypot(1e38f, 2e38f), 1e-6, 0) && r[2] == INFINITY &&
        isnan(r[3]) && r[4] == 0 && near(r[5], 13, 1e-7, 0) && r[7] == 2);
  free(result[0]);
  CHECK_OK(run("aten::xlogy.Tensor", fargs, 2, hdata, TPU_DTYPE_FLOAT32, result));
  r = result[0];
  CHECK(near(r[0], 3 * log(4.0), 1e-6, 0) && isnan(r[2]) && isnan(r[3]) && r[4] == 0 &&
        near(r[5], -5 * log(12.0), 1e-6, 0) && r[7] == 0);
  free(result[0]);
}

static void test_declines(void) {
  tpu_lower_arg_t args[2] = {tensor(TPU_DTYPE_BOOL), tensor(TPU_DTYPE_BOOL)};
  tpu_hlo_type_t out = out_type(TPU_DTYPE_BOOL);
  char* text = NULL;
  size_t len;
  const char* ops[2] = {"aten::abs", "aten::neg"};
  for (int k = 0; k < 2; k++) {
    tpu_status_t s = tpu_lower_program_plain(ops[k], args, 1, NULL, &out, 1, &text, &len);
    CHECK(s != NULL && tpu_status_code(s) == TPU_STATUS_UNIMPLEMENTED);
    tpu_status_free(s);
  }
  /* Dtypes CPU has no kernel for decline, so the fallback raises CPU's
   * error: round of bool, hypot of integers. */
  tpu_status_t s = tpu_lower_program_plain("aten::round", args, 1, NULL, &out, 1, &text, &len);
  CHECK(s != NULL && tpu_status_code(s) == TPU_STATUS_UNIMPLEMENTED);
  tpu_status_free(s);
  tpu_lower_arg_t iargs[2] = {tensor(TPU_DTYPE_INT64), tensor(TPU_DTYPE_INT64)};
  tpu_hlo_type_t iout = out_type(TPU_DTYPE_INT64);
  s = tpu_lower_program_plain("aten::hypot", iargs, 2, NULL, &iout, 1, &text, &len);
  CHECK(s != NULL && tpu_status_code(s) == TPU_STATUS_UNIMPLEMENTED);
  tpu_status_free(s);
  /* floor of bool, logaddexp of integers, heaviside of two dtypes. */
  s = tpu_lower_program_plain("aten::floor", args, 1, NULL, &out, 1, &text, &len);
  CHECK(s != NULL && tpu_status_code(s) == TPU_STATUS_UNIMPLEMENTED);
  tpu_status_free(s);
  s = tpu_lower_program_plain("aten::logaddexp", iargs, 2, NULL, &iout, 1, &text, &len);
  CHECK(s != NULL && tpu_status_code(s) == TPU_STATUS_UNIMPLEMENTED);
  tpu_status_free(s);
  tpu_lower_arg_t hargs[2] = {tensor(TPU_DTYPE_INT64), tensor(TPU_DTYPE_FLOAT32)};
  tpu_hlo_type_t hout = out_type(TPU_DTYPE_FLOAT32);
  s = tpu_lower_program_plain("aten::heaviside", hargs, 2, NULL, &hout, 1, &text, &len);
  CHECK(s != NULL && tpu_status_code(s) == TPU_STATUS_UNIMPLEMENTED);
  tpu_status_free(s);
}

TPU_TEST_MAIN(TPU_TEST(test_float_math_matches_libm), TPU_TEST(test_integer_input),
              TPU_TEST(test_bfloat16_rounds_once), TPU_TEST(test_sign_abs_neg),
              TPU_TEST(test_rounding), TPU_TEST(test_integer_pow), TPU_TEST(test_integer_pow_large_exponents),
              TPU_TEST(test_pow_scalar_special_exponents), TPU_TEST(test_tanh_tail),
              TPU_TEST(test_div_floor_float), TPU_TEST(test_remainder_and_fmod),
              TPU_TEST(test_where_and_masked_fill), TPU_TEST(test_copysign_and_nan_to_num),
              TPU_TEST(test_lerp_addcmul_addcdiv), TPU_TEST(test_floor_divide_hypot_xlogy),
              TPU_TEST(test_declines))
