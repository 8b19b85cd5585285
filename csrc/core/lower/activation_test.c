/* Activation lowerings (activation.c) run on the XLA CPU plugin, checked
 * against libm references in double precision, backwards against the
 * forward reference's derivative. */
#include "pointwise_testing.h"

static const float kX[N] = {-3.5f, -1.2f, -0.3f, 0.0f, 0.25f, 0.7f, 1.5f, 4.0f};

static double r_silu(double x) { return x / (1 + exp(-x)); }
static double r_hardsigmoid(double x) { return fmin(fmax(x + 3, 0), 6) / 6; }
static double r_hardswish(double x) { return x * fmin(fmax(x + 3, 0), 6) / 6; }
static double r_gelu(double x) { return 0.5 * x * (1 + erf(x / sqrt(2.0))); }
static double r_gelu_tanh(double x) {
  return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}

static void test_gelu(void) {
  tpu_lower_arg_t args[2] = {tensor(TPU_DTYPE_FLOAT32), {.kind = TPU_ARG_STRING, .str = "tanh"}};
  const void* data[1] = {kX};
  void* result[1];
  CHECK_OK(run("aten::gelu", args, 1, data, TPU_DTYPE_FLOAT32, result));
  for (int i = 0; i < N; i++) CHECK(near(((float*)result[0])[i], r_gelu(kX[i]), 4e-6, 1e-7));
  free(result[0]);
  CHECK_OK(run("aten::gelu", args, 2, data, TPU_DTYPE_FLOAT32, result));
  for (int i = 0; i < N; i++) CHECK(near(((float*)result[0])[i], r_gelu_tanh(kX[i]), 4e-6, 1e-7));
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
  const float* x = kX;
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

/* hardtanh is a clamp with two scalars. */
static void test_hardtanh(void) {
  float x[N] = {-3, -1, 0, 0.5f, 1, 2, NAN, 10};
  tpu_lower_arg_t hargs[3] = {tensor(TPU_DTYPE_FLOAT32), tpu_test_scalar_arg(TPU_DTYPE_INT64, true),
                              tpu_test_scalar_arg(TPU_DTYPE_INT64, true)};
  int64_t m1 = -1, p1 = 1;
  const void* hdata[3] = {x, &m1, &p1};
  void* result[1];
  CHECK_OK(run("aten::hardtanh", hargs, 3, hdata, TPU_DTYPE_FLOAT32, result));
  float* r = result[0];
  CHECK(r[0] == -1 && r[3] == 0.5f && r[7] == 1 && isnan(r[6]));
  free(result[0]);
}

static void test_declines(void) {
  tpu_lower_arg_t args[1] = {tensor(TPU_DTYPE_BOOL)};
  tpu_hlo_type_t out = out_type(TPU_DTYPE_BOOL);
  char* text = NULL;
  size_t len;
  tpu_status_t s = tpu_lower_program_plain("aten::relu", args, 1, NULL, &out, 1, &text, &len);
  CHECK(s != NULL && tpu_status_code(s) == TPU_STATUS_UNIMPLEMENTED);
  tpu_status_free(s);
  CHECK(tpu_lowering_find("aten::threshold_backward") != NULL);
}

TPU_TEST_MAIN(TPU_TEST(test_gelu), TPU_TEST(test_activation_backwards),
              TPU_TEST(test_relu_threshold_logit), TPU_TEST(test_hardtanh), TPU_TEST(test_declines))
