/* Pointwise lowerings run on the XLA CPU plugin, checked against libm in
 * double precision and against values PyTorch's CPU kernels give. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "../testing.h"
#include "lower_testing.h"

#define N 8
static const int64_t kDims[1] = {N};

static tpu_lower_arg_t tensor(tpu_dtype_t d) { return tpu_test_tensor_arg(d, 1, kDims); }
static tpu_hlo_type_t out_type(tpu_dtype_t d) { return tpu_hlo_type_make(d, 1, kDims); }

/* Runs `op` with one output of `out` dtype and shape [N]. */
static tpu_status_t run(const char* op, const tpu_lower_arg_t* args, int nargs,
                        const void* const* data, tpu_dtype_t out, void** result) {
  tpu_hlo_type_t t = out_type(out);
  return tpu_test_run_op(op, args, nargs, NULL, data, &t, 1, result);
}

/* |got - want| within rel * |want| + abs; NaN matches NaN, inf matches inf. */
static bool near(double got, double want, double rel, double abs_tol) {
  if (isnan(want)) return isnan(got);
  if (isinf(want)) return got == want;
  return fabs(got - want) <= rel * fabs(want) + abs_tol;
}

static uint16_t to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if (isnan(f)) return 0x7fc0;
  u += 0x7fff + ((u >> 16) & 1);
  return (uint16_t)(u >> 16);
}
static float from_bf16(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* ---- references ---- */
static double r_rsqrt(double x) { return 1 / sqrt(x); }
static double r_recip(double x) { return 1 / x; }
static double r_sigmoid(double x) { return 1 / (1 + exp(-x)); }
static double r_frac(double x) { return x - trunc(x); }
static double r_silu(double x) { return x / (1 + exp(-x)); }
static double r_mish(double x) { return x * tanh(log1p(exp(x))); }
static double r_hardsigmoid(double x) { return fmin(fmax(x + 3, 0), 6) / 6; }
static double r_hardswish(double x) { return x * fmin(fmax(x + 3, 0), 6) / 6; }
static double r_gelu(double x) { return 0.5 * x * (1 + erf(x / sqrt(2.0))); }
static double r_gelu_tanh(double x) {
  return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}
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
    {"aten::hardswish", r_hardswish, ANY}, {"aten::gelu", r_gelu, ANY},
    {"aten::exp_", exp, ANY},          {"aten::sqrt.out", sqrt, POSITIVE},
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

static void test_gelu_tanh_and_integer_input(void) {
  tpu_lower_arg_t args[2] = {tensor(TPU_DTYPE_FLOAT32), {.kind = TPU_ARG_STRING, .str = "tanh"}};
  const float* x = kInputs[ANY];
  const void* data[1] = {x};
  void* result[1];
  CHECK_OK(run("aten::gelu", args, 2, data, TPU_DTYPE_FLOAT32, result));
  for (int i = 0; i < N; i++) CHECK(near(((float*)result[0])[i], r_gelu_tanh(x[i]), 4e-6, 1e-7));
  free(result[0]);
  /* exp of int64 gives float32. */
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

static void test_comparisons_promote(void) {
  int32_t a[N] = {1, 2, 3, 4, -1, 0, 2, 3};
  tpu_lower_arg_t args[2] = {tensor(TPU_DTYPE_INT32), tpu_test_scalar_arg(TPU_DTYPE_FLOAT64, true)};
  double s = 2.5;
  const void* data[2] = {a, &s};
  void* result[1];
  /* int32 < 2.5 compares in float32, not after truncating 2.5 to 2. */
  CHECK_OK(run("aten::lt.Scalar", args, 2, data, TPU_DTYPE_BOOL, result));
  bool want[N] = {1, 1, 0, 0, 1, 1, 1, 0};
  CHECK(memcmp(result[0], want, sizeof want) == 0);
  free(result[0]);
  /* uint8 vs int8 compares in int16 (200 > -1). */
  uint8_t u[N] = {200, 0, 1, 255, 5, 5, 0, 128};
  int8_t i8[N] = {-1, 0, 2, -128, 5, 6, -1, 127};
  tpu_lower_arg_t margs[2] = {tensor(TPU_DTYPE_UINT8), tensor(TPU_DTYPE_INT8)};
  const void* mdata[2] = {u, i8};
  CHECK_OK(run("aten::gt.Tensor", margs, 2, mdata, TPU_DTYPE_BOOL, result));
  bool gw[N] = {1, 0, 0, 1, 0, 0, 1, 1};
  CHECK(memcmp(result[0], gw, sizeof gw) == 0);
  free(result[0]);
  /* eq_ on a float tensor writes 1.0 / 0.0; NaN != NaN. */
  float f[N] = {1, NAN, 3, 4, 5, 6, 7, 8}, g[N] = {1, NAN, 0, 4, 0, 6, 0, 8};
  tpu_lower_arg_t fargs[2] = {tensor(TPU_DTYPE_FLOAT32), tensor(TPU_DTYPE_FLOAT32)};
  const void* fdata[2] = {f, g};
  CHECK_OK(run("aten::eq_.Tensor", fargs, 2, fdata, TPU_DTYPE_FLOAT32, result));
  float ew[N] = {1, 0, 0, 1, 0, 1, 0, 1};
  CHECK(memcmp(result[0], ew, sizeof ew) == 0);
  free(result[0]);
  const char* ops[4] = {"aten::ne.Tensor", "aten::le.Tensor", "aten::ge.Tensor", "aten::gt.Tensor"};
  bool expect[4][N] = {{0, 1, 1, 0, 1, 0, 1, 0}, {1, 0, 0, 1, 0, 1, 0, 1},
                       {1, 0, 1, 1, 1, 1, 1, 1}, {0, 0, 1, 0, 1, 0, 1, 0}};
  for (int k = 0; k < 4; k++) {
    CHECK_OK(run(ops[k], fargs, 2, fdata, TPU_DTYPE_BOOL, result));
    CHECK(memcmp(result[0], expect[k], N) == 0);
    free(result[0]);
  }
}

static void test_min_max_nan(void) {
  float a[N] = {NAN, 1, 2, NAN, -0.5f, 3, INFINITY, 0};
  float b[N] = {1, NAN, 5, NAN, -1, 3, 2, -INFINITY};
  tpu_lower_arg_t args[2] = {tensor(TPU_DTYPE_FLOAT32), tensor(TPU_DTYPE_FLOAT32)};
  const void* data[2] = {a, b};
  void* result[1];
  CHECK_OK(run("aten::maximum", args, 2, data, TPU_DTYPE_FLOAT32, result));
  float* r = result[0];
  CHECK(isnan(r[0]) && isnan(r[1]) && r[2] == 5 && isnan(r[3]) && r[4] == -0.5f && r[6] == INFINITY);
  free(result[0]);
  CHECK_OK(run("aten::minimum", args, 2, data, TPU_DTYPE_FLOAT32, result));
  r = result[0];
  CHECK(isnan(r[0]) && isnan(r[1]) && r[2] == 2 && r[4] == -1 && r[7] == -INFINITY);
  free(result[0]);
  CHECK_OK(run("aten::fmax", args, 2, data, TPU_DTYPE_FLOAT32, result));
  r = result[0];
  CHECK(r[0] == 1 && r[1] == 1 && r[2] == 5 && isnan(r[3]));
  free(result[0]);
  CHECK_OK(run("aten::fmin", args, 2, data, TPU_DTYPE_FLOAT32, result));
  r = result[0];
  CHECK(r[0] == 1 && r[1] == 1 && r[2] == 2 && isnan(r[3]) && r[4] == -1);
  free(result[0]);
}

static void test_clamp(void) {
  float x[N] = {-3, -1, 0, 0.5f, 1, 2, NAN, 10};
  /* clamp(x, min=-1.5) with no max. */
  tpu_lower_arg_t args[3] = {tensor(TPU_DTYPE_FLOAT32), tpu_test_scalar_arg(TPU_DTYPE_FLOAT64, true),
                             {.kind = TPU_ARG_NONE}};
  double lo = -1.5;
  const void* data[2] = {x, &lo};
  void* result[1];
  CHECK_OK(run("aten::clamp", args, 3, data, TPU_DTYPE_FLOAT32, result));
  float* r = result[0];
  CHECK(r[0] == -1.5f && r[1] == -1 && r[7] == 10 && isnan(r[6]));
  free(result[0]);
  /* clamp.Tensor with a broadcast rank-0... min and max tensors. */
  float mn[N] = {0, 0, 0, 0, 0, 0, 0, NAN}, mx[N] = {1, 1, 1, 1, 1, 1, 1, 1};
  tpu_lower_arg_t targs[3] = {tensor(TPU_DTYPE_FLOAT32), tensor(TPU_DTYPE_FLOAT32),
                              tensor(TPU_DTYPE_FLOAT32)};
  const void* tdata[3] = {x, mn, mx};
  CHECK_OK(run("aten::clamp.Tensor", targs, 3, tdata, TPU_DTYPE_FLOAT32, result));
  r = result[0];
  CHECK(r[0] == 0 && r[3] == 0.5f && r[5] == 1 && isnan(r[6]) && isnan(r[7]));
  free(result[0]);
  /* clamp_max on int64 with a python int; min > max gives max. */
  int64_t xi[N] = {-5, 0, 5, 10, 15, 20, 25, 30};
  tpu_lower_arg_t iargs[2] = {tensor(TPU_DTYPE_INT64), tpu_test_scalar_arg(TPU_DTYPE_INT64, true)};
  int64_t hi = 12;
  const void* idata[2] = {xi, &hi};
  CHECK_OK(run("aten::clamp_max", iargs, 2, idata, TPU_DTYPE_INT64, result));
  int64_t want[N] = {-5, 0, 5, 10, 12, 12, 12, 12};
  CHECK(memcmp(result[0], want, sizeof want) == 0);
  free(result[0]);
  CHECK_OK(run("aten::clamp_min_", iargs, 2, idata, TPU_DTYPE_INT64, result));
  CHECK(((int64_t*)result[0])[0] == 12 && ((int64_t*)result[0])[7] == 30);
  free(result[0]);
  /* hardtanh is a clamp with two scalars. */
  tpu_lower_arg_t hargs[3] = {tensor(TPU_DTYPE_FLOAT32), tpu_test_scalar_arg(TPU_DTYPE_INT64, true),
                              tpu_test_scalar_arg(TPU_DTYPE_INT64, true)};
  int64_t m1 = -1, p1 = 1;
  const void* hdata[3] = {x, &m1, &p1};
  CHECK_OK(run("aten::hardtanh", hargs, 3, hdata, TPU_DTYPE_FLOAT32, result));
  r = result[0];
  CHECK(r[0] == -1 && r[3] == 0.5f && r[7] == 1 && isnan(r[6]));
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

static void test_logical_and_bitwise(void) {
  float a[N] = {0, 1, NAN, -0.0f, 2, 0, 3, 0};
  int32_t b[N] = {0, 0, 1, 1, 5, 3, 0, -1};
  tpu_lower_arg_t args[2] = {tensor(TPU_DTYPE_FLOAT32), tensor(TPU_DTYPE_INT32)};
  const void* data[2] = {a, b};
  void* result[1];
  const char* ops[3] = {"aten::logical_and", "aten::logical_or", "aten::logical_xor"};
  bool want[3][N] = {{0, 0, 1, 0, 1, 0, 0, 0}, {0, 1, 1, 1, 1, 1, 1, 1}, {0, 1, 0, 1, 0, 1, 1, 1}};
  for (int k = 0; k < 3; k++) {
    CHECK_OK(run(ops[k], args, 2, data, TPU_DTYPE_BOOL, result));
    CHECK(memcmp(result[0], want[k], N) == 0);
    free(result[0]);
  }
  CHECK_OK(run("aten::logical_not", args, 1, data, TPU_DTYPE_BOOL, result));
  bool nw[N] = {1, 0, 0, 1, 0, 1, 0, 1};
  CHECK(memcmp(result[0], nw, N) == 0);
  free(result[0]);
  int64_t x[N] = {0xF0, -1, 12, 7, 0, 1, 2, 3};
  tpu_lower_arg_t iargs[2] = {tensor(TPU_DTYPE_INT64), tpu_test_scalar_arg(TPU_DTYPE_INT64, true)};
  int64_t mask = 0x3C;
  const void* idata[2] = {x, &mask};
  CHECK_OK(run("aten::bitwise_and.Scalar", iargs, 2, idata, TPU_DTYPE_INT64, result));
  for (int i = 0; i < N; i++) CHECK(((int64_t*)result[0])[i] == (x[i] & 0x3C));
  free(result[0]);
  CHECK_OK(run("aten::bitwise_xor.Scalar", iargs, 2, idata, TPU_DTYPE_INT64, result));
  for (int i = 0; i < N; i++) CHECK(((int64_t*)result[0])[i] == (x[i] ^ 0x3C));
  free(result[0]);
  CHECK_OK(run("aten::bitwise_not", iargs, 1, idata, TPU_DTYPE_INT64, result));
  for (int i = 0; i < N; i++) CHECK(((int64_t*)result[0])[i] == ~x[i]);
  free(result[0]);
  bool p[N] = {0, 0, 1, 1, 0, 1, 0, 1}, q[N] = {0, 1, 0, 1, 1, 1, 0, 0};
  tpu_lower_arg_t bargs[2] = {tensor(TPU_DTYPE_BOOL), tensor(TPU_DTYPE_BOOL)};
  const void* bdata[2] = {p, q};
  CHECK_OK(run("aten::bitwise_or.Tensor", bargs, 2, bdata, TPU_DTYPE_BOOL, result));
  for (int i = 0; i < N; i++) CHECK(((bool*)result[0])[i] == (p[i] || q[i]));
  free(result[0]);
  CHECK_OK(run("aten::bitwise_not", bargs, 1, bdata, TPU_DTYPE_BOOL, result));
  for (int i = 0; i < N; i++) CHECK(((bool*)result[0])[i] == !p[i]);
  free(result[0]);
}

static void test_float_classes_and_copysign(void) {
  float x[N] = {NAN, INFINITY, -INFINITY, -0.0f, 0.0f, -2, 3, -NAN};
  tpu_lower_arg_t args[2] = {tensor(TPU_DTYPE_FLOAT32), tensor(TPU_DTYPE_FLOAT32)};
  const void* data[1] = {x};
  void* result[1];
  const char* ops[5] = {"aten::isnan", "aten::isinf", "aten::isposinf", "aten::isneginf",
                        "aten::signbit"};
  bool want[5][N] = {{1, 0, 0, 0, 0, 0, 0, 1}, {0, 1, 1, 0, 0, 0, 0, 0},
                     {0, 1, 0, 0, 0, 0, 0, 0}, {0, 0, 1, 0, 0, 0, 0, 0},
                     {0, 0, 1, 1, 0, 1, 0, 1}};
  for (int k = 0; k < 5; k++) {
    CHECK_OK(run(ops[k], args, 1, data, TPU_DTYPE_BOOL, result));
    CHECK(memcmp(result[0], want[k], N) == 0);
    free(result[0]);
  }
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

/* Backward ops checked against the derivative of the forward reference. */
static double r_elu(double x) { return x <= 0 ? 1.5 * 2.0 * expm1(x * 0.5) : 2.0 * x; }
/* elu's derivative, the x <= 0 side at 0 like PyTorch. */
static double r_elu_grad(double x) { return x <= 0 ? 0.5 * 3.0 * exp(x * 0.5) : 2.0; }
static double r_softplus(double x) { return x * 2 > 20 ? x : log1p(exp(x * 2)) / 2; }
static double deriv(double (*f)(double), double x) {
  double h = 1e-5 * fmax(1, fabs(x));
  return (f(x + h) - f(x - h)) / (2 * h);
}

static void test_activation_backwards(void) {
  const float* x = kInputs[ANY];
  float g[N] = {1, -2, 0.5f, 3, -1, 2, 1, 0.25f};
  void* result[1];
  tpu_lower_arg_t two[2] = {tensor(TPU_DTYPE_FLOAT32), tensor(TPU_DTYPE_FLOAT32)};
  const void* data[2] = {g, x};
  static const struct {
    const char* op;
    double (*f)(double);
  } simple[] = {{"aten::silu_backward.grad_input", r_silu},
                {"aten::hardswish_backward", r_hardswish},
                {"aten::hardsigmoid_backward", r_hardsigmoid}};
  for (size_t k = 0; k < sizeof simple / sizeof simple[0]; k++) {
    CHECK_OK(run(simple[k].op, two, 2, data, TPU_DTYPE_FLOAT32, result));
    for (int i = 0; i < N; i++) {
      double want = g[i] * deriv(simple[k].f, x[i]);
      if (!near(((float*)result[0])[i], want, 1e-4, 1e-5)) {
        fprintf(stderr, "%s at %g: %g, want %g\n", simple[k].op, x[i], ((float*)result[0])[i], want);
        tpu_test_failures_++;
        break;
      }
    }
    free(result[0]);
  }
  /* gelu_backward, both approximations. */
  tpu_lower_arg_t gargs[3] = {tensor(TPU_DTYPE_FLOAT32), tensor(TPU_DTYPE_FLOAT32),
                              {.kind = TPU_ARG_STRING, .str = "none"}};
  for (int tanh_mode = 0; tanh_mode < 2; tanh_mode++) {
    gargs[2].str = tanh_mode ? "tanh" : "none";
    CHECK_OK(run("aten::gelu_backward", gargs, 3, data, TPU_DTYPE_FLOAT32, result));
    for (int i = 0; i < N; i++)
      CHECK(near(((float*)result[0])[i], g[i] * deriv(tanh_mode ? r_gelu_tanh : r_gelu, x[i]),
                 1e-4, 1e-5));
    free(result[0]);
  }
  /* sigmoid_backward / tanh_backward take the forward output. */
  float y[N] = {0.1f, 0.5f, 0.9f, 0, 1, -0.5f, 0.25f, 0.75f};
  const void* ydata[2] = {g, y};
  CHECK_OK(run("aten::sigmoid_backward", two, 2, ydata, TPU_DTYPE_FLOAT32, result));
  for (int i = 0; i < N; i++) CHECK(((float*)result[0])[i] == g[i] * (1 - y[i]) * y[i]);
  free(result[0]);
  CHECK_OK(run("aten::tanh_backward", two, 2, ydata, TPU_DTYPE_FLOAT32, result));
  /* XLA may fuse 1 - y*y into an FMA: allow an ulp. */
  for (int i = 0; i < N; i++)
    CHECK(near(((float*)result[0])[i], g[i] * (1 - (double)y[i] * y[i]), 2e-7, 0));
  free(result[0]);
  /* Scalar-parameter forms: elu(alpha=1.5, scale=2, input_scale=0.5),
   * softplus(beta=2, threshold=20), leaky_relu(0.2), threshold(0.25). */
  double alpha = 1.5, scale = 2, in_scale = 0.5;
  tpu_lower_arg_t eargs[6] = {tensor(TPU_DTYPE_FLOAT32), tpu_test_scalar_arg(TPU_DTYPE_FLOAT64, true),
                              tpu_test_scalar_arg(TPU_DTYPE_FLOAT64, true),
                              tpu_test_scalar_arg(TPU_DTYPE_FLOAT64, true),
                              {.kind = TPU_ARG_BOOL, .i = 0}, tensor(TPU_DTYPE_FLOAT32)};
  const void* edata[5] = {g, x, &alpha, &scale, &in_scale};
  CHECK_OK(run("aten::elu_backward", eargs, 6, edata, TPU_DTYPE_FLOAT32, result));
  for (int i = 0; i < N; i++)
    CHECK(near(((float*)result[0])[i], g[i] * r_elu_grad(x[i]), 1e-6, 1e-7));
  free(result[0]);
  const void* fdata[4] = {x, &alpha, &scale, &in_scale};
  CHECK_OK(run("aten::elu", eargs, 4, fdata, TPU_DTYPE_FLOAT32, result));
  for (int i = 0; i < N; i++) CHECK(near(((float*)result[0])[i], r_elu(x[i]), 4e-6, 1e-7));
  free(result[0]);
  /* is_result: the derivative from the output y = elu(x). */
  float ex[N];
  for (int i = 0; i < N; i++) ex[i] = (float)r_elu(x[i]);
  eargs[4].i = 1;
  const void* rdata[5] = {g, ex, &alpha, &scale, &in_scale};
  CHECK_OK(run("aten::elu_backward", eargs, 6, rdata, TPU_DTYPE_FLOAT32, result));
  for (int i = 0; i < N; i++)
    CHECK(near(((float*)result[0])[i], g[i] * r_elu_grad(x[i]), 1e-6, 1e-7));
  free(result[0]);
  double beta = 2, thr = 20;
  tpu_lower_arg_t sargs[4] = {tensor(TPU_DTYPE_FLOAT32), tensor(TPU_DTYPE_FLOAT32),
                              tpu_test_scalar_arg(TPU_DTYPE_FLOAT64, true),
                              tpu_test_scalar_arg(TPU_DTYPE_FLOAT64, true)};
  const void* sdata[4] = {g, x, &beta, &thr};
  CHECK_OK(run("aten::softplus_backward", sargs, 4, sdata, TPU_DTYPE_FLOAT32, result));
  for (int i = 0; i < N; i++)
    CHECK(near(((float*)result[0])[i], g[i] * deriv(r_softplus, x[i]), 1e-4, 1e-5));
  free(result[0]);
  tpu_lower_arg_t sfargs[3] = {sargs[0], sargs[2], sargs[3]};
  const void* sfdata[3] = {x, &beta, &thr};
  CHECK_OK(run("aten::softplus", sfargs, 3, sfdata, TPU_DTYPE_FLOAT32, result));
  for (int i = 0; i < N; i++) CHECK(near(((float*)result[0])[i], r_softplus(x[i]), 4e-6, 1e-7));
  free(result[0]);
  double slope = 0.2;
  tpu_lower_arg_t largs[4] = {tensor(TPU_DTYPE_FLOAT32), tensor(TPU_DTYPE_FLOAT32),
                              tpu_test_scalar_arg(TPU_DTYPE_FLOAT64, true),
                              {.kind = TPU_ARG_BOOL, .i = 0}};
  const void* ldata[3] = {g, x, &slope};
  CHECK_OK(run("aten::leaky_relu_backward", largs, 4, ldata, TPU_DTYPE_FLOAT32, result));
  for (int i = 0; i < N; i++) CHECK(((float*)result[0])[i] == (x[i] > 0 ? g[i] : g[i] * 0.2f));
  free(result[0]);
  CHECK_OK(run("aten::threshold_backward", largs, 3, ldata, TPU_DTYPE_FLOAT32, result));
  for (int i = 0; i < N; i++) CHECK(((float*)result[0])[i] == (x[i] <= 0.2f ? 0 : g[i]));
  free(result[0]);
  tpu_lower_arg_t hargs[4] = {tensor(TPU_DTYPE_FLOAT32), tensor(TPU_DTYPE_FLOAT32),
                              tpu_test_scalar_arg(TPU_DTYPE_INT64, true),
                              tpu_test_scalar_arg(TPU_DTYPE_INT64, true)};
  int64_t lo = -1, hi = 1;
  const void* hdata[4] = {g, x, &lo, &hi};
  CHECK_OK(run("aten::hardtanh_backward", hargs, 4, hdata, TPU_DTYPE_FLOAT32, result));
  for (int i = 0; i < N; i++)
    CHECK(((float*)result[0])[i] == (x[i] <= -1 || x[i] >= 1 ? 0 : g[i]));
  free(result[0]);
}

static void test_relu_threshold_logit(void) {
  float x[N] = {-2, -0.5f, 0, 0.3f, NAN, 0.9f, 1, 5};
  tpu_lower_arg_t args[3] = {tensor(TPU_DTYPE_FLOAT32), tpu_test_scalar_arg(TPU_DTYPE_FLOAT64, true),
                             tpu_test_scalar_arg(TPU_DTYPE_FLOAT64, true)};
  const void* data[1] = {x};
  void* result[1];
  CHECK_OK(run("aten::relu_", args, 1, data, TPU_DTYPE_FLOAT32, result));
  float* r = result[0];
  CHECK(r[0] == 0 && r[3] == 0.3f && isnan(r[4]) && r[7] == 5);
  free(result[0]);
  double th = 0.3, val = -9;
  const void* tdata[3] = {x, &th, &val};
  CHECK_OK(run("aten::threshold", args, 3, tdata, TPU_DTYPE_FLOAT32, result));
  r = result[0];
  CHECK(r[0] == -9 && r[3] == -9 && isnan(r[4]) && r[5] == 0.9f);
  free(result[0]);
  /* logit with eps clamps to [eps, 1 - eps]; without eps, outside is NaN. */
  tpu_lower_arg_t largs[2] = {tensor(TPU_DTYPE_FLOAT32), {.kind = TPU_ARG_FLOAT, .f = 0.1}};
  CHECK_OK(run("aten::logit", largs, 2, data, TPU_DTYPE_FLOAT32, result));
  r = result[0];
  CHECK(near(r[0], log(0.1 / 0.9), 1e-6, 0) && near(r[7], log(0.9 / 0.1), 1e-6, 0) && isnan(r[4]));
  free(result[0]);
  largs[1] = (tpu_lower_arg_t){.kind = TPU_ARG_NONE};
  CHECK_OK(run("aten::logit", largs, 2, data, TPU_DTYPE_FLOAT32, result));
  r = result[0];
  CHECK(isnan(r[0]) && r[6] == INFINITY && near(r[3], log(0.3 / 0.7), 1e-6, 0));
  free(result[0]);
  float g[N] = {1, 1, 1, 1, 1, 1, 1, 1};
  tpu_lower_arg_t bargs[3] = {tensor(TPU_DTYPE_FLOAT32), tensor(TPU_DTYPE_FLOAT32),
                              {.kind = TPU_ARG_NONE}};
  const void* bdata[2] = {g, x};
  CHECK_OK(run("aten::logit_backward", bargs, 3, bdata, TPU_DTYPE_FLOAT32, result));
  r = result[0];
  CHECK(isnan(r[0]) && near(r[3], 1 / (0.3 * 0.7), 1e-6, 0) && r[2] == INFINITY);
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

/* Values from torch: shifts by negative or >= 64 amounts, floor_divide
 * (the float case that rounding the quotient first gets wrong), hypot and
 * xlogy special values. */
static void test_shifts_floor_divide_hypot_xlogy(void) {
  int64_t a[N] = {1, -8, 5, -1, 7, 3, -5, 1}, s[N] = {3, 1, 63, 64, -1, 100, 70, 0};
  tpu_lower_arg_t args[2] = {tensor(TPU_DTYPE_INT64), tensor(TPU_DTYPE_INT64)};
  const void* data[2] = {a, s};
  void* result[1];
  CHECK_OK(run("aten::bitwise_left_shift.Tensor", args, 2, data, TPU_DTYPE_INT64, result));
  int64_t lw[N] = {8, -16, INT64_MIN, 0, 0, 0, 0, 1};
  CHECK(memcmp(result[0], lw, sizeof lw) == 0);
  free(result[0]);
  CHECK_OK(run("aten::__rshift__.Tensor", args, 2, data, TPU_DTYPE_INT64, result));
  int64_t rw[N] = {0, -4, 0, -1, 0, 0, -1, 1};
  CHECK(memcmp(result[0], rw, sizeof rw) == 0);
  free(result[0]);
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
  const char* ops[3] = {"aten::abs", "aten::neg", "aten::relu"};
  for (int k = 0; k < 3; k++) {
    tpu_status_t s = tpu_lower_program_plain(ops[k], args, 1, NULL, &out, 1, &text, &len);
    CHECK(s != NULL && tpu_status_code(s) == TPU_STATUS_UNIMPLEMENTED);
    tpu_status_free(s);
  }
  tpu_lower_arg_t fargs[2] = {tensor(TPU_DTYPE_FLOAT32), tensor(TPU_DTYPE_FLOAT32)};
  tpu_hlo_type_t fout = out_type(TPU_DTYPE_FLOAT32);
  tpu_status_t s = tpu_lower_program_plain("aten::bitwise_and.Tensor", fargs, 2, NULL, &fout, 1,
                                           &text, &len);
  CHECK(s != NULL && tpu_status_code(s) == TPU_STATUS_UNIMPLEMENTED);
  tpu_status_free(s);
  CHECK(tpu_lowering_find("aten::clamp_min_") != NULL);
  CHECK(tpu_lowering_find("aten::threshold_backward") != NULL);
  /* Dtypes CPU has no kernel for decline, so the fallback raises CPU's
   * error: round of bool, hypot of integers. */
  s = tpu_lower_program_plain("aten::round", args, 1, NULL, &out, 1, &text, &len);
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

/* isin: int64 elements [N] against float32 test values (compared in
 * float32: 2.5 matches nothing), invert, a wrapped scalar, NaN in nothing,
 * and bool operands declined (CPU refuses them). */
static void test_isin(void) {
  int64_t e[N] = {1, 2, 3, 4, 5, 6, 7, 8};
  float t[3] = {2.0f, 7.0f, 2.5f};
  const int64_t three = 3;
  tpu_lower_arg_t args[4] = {tensor(TPU_DTYPE_INT64), tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 1, &three),
                             {.kind = TPU_ARG_BOOL, .i = 0}, {.kind = TPU_ARG_BOOL, .i = 0}};
  const void* data[2] = {e, t};
  void* result[1];
  CHECK_OK(run("aten::isin.Tensor_Tensor", args, 4, data, TPU_DTYPE_BOOL, result));
  bool want[N] = {0, 1, 0, 0, 0, 0, 1, 0};
  CHECK(memcmp(result[0], want, sizeof want) == 0);
  free(result[0]);
  args[3].i = 1;
  CHECK_OK(run("aten::isin.Tensor_Tensor", args, 4, data, TPU_DTYPE_BOOL, result));
  for (int k = 0; k < N; k++) CHECK(((bool*)result[0])[k] == !want[k]);
  free(result[0]);
  float f[N] = {NAN, 1, 2, 3, 4, 5, 6, 7};
  double s = NAN;
  tpu_lower_arg_t sargs[4] = {tensor(TPU_DTYPE_FLOAT32), tpu_test_scalar_arg(TPU_DTYPE_FLOAT64, true),
                              {.kind = TPU_ARG_BOOL, .i = 0}, {.kind = TPU_ARG_BOOL, .i = 0}};
  const void* sdata[2] = {f, &s};
  CHECK_OK(run("aten::isin.Tensor_Scalar", sargs, 4, sdata, TPU_DTYPE_BOOL, result));
  for (int k = 0; k < N; k++) CHECK(!((bool*)result[0])[k]);
  free(result[0]);
  s = 3;
  CHECK_OK(run("aten::isin.Tensor_Scalar", sargs, 4, sdata, TPU_DTYPE_BOOL, result));
  for (int k = 0; k < N; k++) CHECK(((bool*)result[0])[k] == (k == 3));
  free(result[0]);
  tpu_lower_arg_t bargs[4] = {tensor(TPU_DTYPE_BOOL), tensor(TPU_DTYPE_BOOL),
                              {.kind = TPU_ARG_BOOL, .i = 0}, {.kind = TPU_ARG_BOOL, .i = 0}};
  tpu_hlo_type_t bout = out_type(TPU_DTYPE_BOOL);
  char* text = NULL;
  size_t len = 0;
  tpu_status_t st = tpu_lower_program_plain("aten::isin.Tensor_Tensor", bargs, 4, NULL, &bout, 1, &text, &len);
  CHECK(st != NULL && tpu_status_code(st) == TPU_STATUS_UNIMPLEMENTED);
  tpu_status_free(st);
}

TPU_TEST_MAIN(TPU_TEST(test_float_math_matches_libm), TPU_TEST(test_gelu_tanh_and_integer_input),
              TPU_TEST(test_bfloat16_rounds_once), TPU_TEST(test_sign_abs_neg),
              TPU_TEST(test_rounding), TPU_TEST(test_integer_pow), TPU_TEST(test_integer_pow_large_exponents),
              TPU_TEST(test_pow_scalar_special_exponents), TPU_TEST(test_tanh_tail),
              TPU_TEST(test_div_floor_float),
              TPU_TEST(test_remainder_and_fmod), TPU_TEST(test_comparisons_promote), TPU_TEST(test_isin),
              TPU_TEST(test_min_max_nan), TPU_TEST(test_clamp),
              TPU_TEST(test_where_and_masked_fill), TPU_TEST(test_logical_and_bitwise),
              TPU_TEST(test_float_classes_and_copysign), TPU_TEST(test_lerp_addcmul_addcdiv),
              TPU_TEST(test_activation_backwards), TPU_TEST(test_relu_threshold_logit),
              TPU_TEST(test_shifts_floor_divide_hypot_xlogy), TPU_TEST(test_declines))
