/* loss family: each lowering run on the XLA CPU plugin against values
 * computed here in double precision. */
#include <math.h>

#include "../testing.h"
#include "nn_testing.h"

static void test_nll_loss(void) {
  enum { N = 4, C = 3 };
  int64_t d[2] = {N, C}, n1[1] = {N}, c1[1] = {C};
  float x[N * C], w[C] = {0.5f, 1.0f, 2.0f};
  fill(x, N * C, 13);
  int64_t t[N] = {2, -100, 0, 2};
  tpu_lower_arg_t args[5] = {f32(2, d), tpu_test_tensor_arg(TPU_DTYPE_INT64, 1, n1),
                             f32(1, c1), int_arg(1), int_arg(-100)};
  const void* data[3] = {x, t, w};
  double num = 0, den = 0, per[N];
  for (int i = 0; i < N; i++) {
    per[i] = t[i] < 0 ? 0 : -(double)x[i * C + t[i]] * w[t[i]];
    num += per[i];
    den += t[i] < 0 ? 0 : w[t[i]];
  }
  tpu_hlo_type_t scalar = tpu_hlo_type_scalar(TPU_DTYPE_FLOAT32);
  tpu_hlo_type_t outs[2] = {scalar, scalar};
  void* r[2];
  CHECK_OK(tpu_test_run_op("aten::nll_loss_forward", args, 5, NULL, data, outs, 2, r));
  double want_mean = num / den, want_den = den;
  check_all(r[0], &want_mean, 1, 1e-6);
  check_all(r[1], &want_den, 1, 1e-6);
  float tw = *(float*)r[1];
  free(r[0]);
  free(r[1]);
  /* reduction none: per-sample losses, total_weight 0. */
  args[3] = int_arg(0);
  tpu_hlo_type_t nouts[2] = {tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 1, n1), scalar};
  CHECK_OK(tpu_test_run_op("aten::nll_loss_forward", args, 5, NULL, data, nouts, 2, r));
  check_all(r[0], per, N, 1e-6);
  double zero = 0;
  check_all(r[1], &zero, 1, 0);
  free(r[0]);
  free(r[1]);

  /* Backward, mean: -w[t] g / total_weight at the target class. */
  float g = 2.0f;
  tpu_lower_arg_t bargs[7] = {tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 0, NULL), f32(2, d),
                              tpu_test_tensor_arg(TPU_DTYPE_INT64, 1, n1), f32(1, c1),
                              int_arg(1), int_arg(-100),
                              tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 0, NULL)};
  const void* bdata[5] = {&g, x, t, w, &tw};
  tpu_hlo_type_t bout = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 2, d);
  double want[N * C] = {0};
  for (int i = 0; i < N; i++)
    if (t[i] >= 0) want[i * C + t[i]] = -(double)w[t[i]] * g / tw;
  CHECK_OK(tpu_test_run_op("aten::nll_loss_backward", bargs, 7, NULL, bdata, &bout, 1, r));
  check_all(r[0], want, N * C, 1e-6);
  free(r[0]);
}

static void test_losses_mse_bce_smooth(void) {
  enum { N = 6 };
  int64_t d[1] = {N};
  float x[N] = {0.1f, 0.5f, 0.9f, 0.0f, 1.0f, 0.3f}, y[N] = {0, 1, 0.5f, 1, 0, 0.3f};
  tpu_hlo_type_t scalar = tpu_hlo_type_scalar(TPU_DTYPE_FLOAT32);
  tpu_hlo_type_t vec = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 1, d);
  const void* data[2] = {x, y};
  void* r[1];
  /* mse, sum. */
  tpu_lower_arg_t margs[3] = {f32(1, d), f32(1, d), int_arg(2)};
  double want = 0;
  for (int i = 0; i < N; i++) want += pow((double)x[i] - y[i], 2);
  CHECK_OK(tpu_test_run_op("aten::mse_loss", margs, 3, NULL, data, &scalar, 1, r));
  check_all(r[0], &want, 1, 1e-6);
  free(r[0]);
  /* bce, none: log terms clamp at -100 for x = 0 and 1. */
  tpu_lower_arg_t bargs[4] = {f32(1, d), f32(1, d), none_arg(), int_arg(0)};
  double bce[N];
  for (int i = 0; i < N; i++)
    bce[i] = (y[i] - 1) * fmax(log1p(-(double)x[i]), -100) - y[i] * fmax(log((double)x[i]), -100);
  CHECK_OK(tpu_test_run_op("aten::binary_cross_entropy", bargs, 4, NULL, data, &vec, 1, r));
  check_all(r[0], bce, N, 1e-5);
  free(r[0]);
  /* smooth_l1 (beta 0.5) and huber (delta 0.5), mean. */
  tpu_lower_arg_t sargs[4] = {f32(1, d), f32(1, d), int_arg(1), float_arg(0.5)};
  double sl = 0, hu = 0;
  for (int i = 0; i < N; i++) {
    double z = fabs((double)x[i] - y[i]);
    sl += z < 0.5 ? 0.5 * z * z / 0.5 : z - 0.25;
    hu += z < 0.5 ? 0.5 * z * z : 0.5 * (z - 0.25);
  }
  sl /= N;
  hu /= N;
  CHECK_OK(tpu_test_run_op("aten::smooth_l1_loss", sargs, 4, NULL, data, &scalar, 1, r));
  check_all(r[0], &sl, 1, 1e-6);
  free(r[0]);
  CHECK_OK(tpu_test_run_op("aten::huber_loss", sargs, 4, NULL, data, &scalar, 1, r));
  check_all(r[0], &hu, 1, 1e-6);
  free(r[0]);
  /* Backwards with a scalar grad (reduction mean). */
  float g = 3.0f;
  const void* gdata[3] = {&g, x, y};
  tpu_lower_arg_t gm[4] = {tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 0, NULL), f32(1, d), f32(1, d),
                           int_arg(1)};
  double wm[N], wb[N], ws[N], wh[N];
  for (int i = 0; i < N; i++) {
    double dd = (double)x[i] - y[i];
    wm[i] = 2 * dd * g / N;
    wb[i] = g * dd / fmax((1 - (double)x[i]) * x[i], 1e-12) / N;
    ws[i] = (fabs(dd) < 0.5 ? dd / 0.5 : (dd > 0) - (dd < 0)) * g / N;
    wh[i] = fmin(fmax(dd, -0.5), 0.5) * g / N;
  }
  CHECK_OK(tpu_test_run_op("aten::mse_loss_backward", gm, 4, NULL, gdata, &vec, 1, r));
  check_all(r[0], wm, N, 1e-6);
  free(r[0]);
  tpu_lower_arg_t gb[5] = {gm[0], gm[1], gm[2], none_arg(), int_arg(1)};
  CHECK_OK(tpu_test_run_op("aten::binary_cross_entropy_backward", gb, 5, NULL, gdata, &vec, 1, r));
  check_all(r[0], wb, N, 1e-5);
  free(r[0]);
  tpu_lower_arg_t gs[5] = {gm[0], gm[1], gm[2], int_arg(1), float_arg(0.5)};
  CHECK_OK(tpu_test_run_op("aten::smooth_l1_loss_backward", gs, 5, NULL, gdata, &vec, 1, r));
  check_all(r[0], ws, N, 1e-6);
  free(r[0]);
  CHECK_OK(tpu_test_run_op("aten::huber_loss_backward.out", gs, 5, NULL, gdata, &vec, 1, r));
  check_all(r[0], wh, N, 1e-6);
  free(r[0]);
}

/* nll_loss2d: class dim 1 of [N, C, H, W], reduction sum, no weight, an
 * in-range ignore_index; backward with reduction none. */
static void test_nll_loss2d(void) {
  enum { N = 2, C = 3, H = 2, W = 2 };
  int64_t d[4] = {N, C, H, W}, td[3] = {N, H, W};
  float x[N * C * H * W];
  fill(x, N * C * H * W, 17);
  int64_t t[N * H * W] = {0, 1, 2, 1, 2, 2, 0, 1};
  const int ignore = 1;
  double want = 0;
  for (int n = 0; n < N; n++)
    for (int p = 0; p < H * W; p++) {
      int64_t ti = t[n * H * W + p];
      if (ti != ignore) want -= x[(n * C + ti) * H * W + p];
    }
  tpu_lower_arg_t args[5] = {f32(4, d), tpu_test_tensor_arg(TPU_DTYPE_INT64, 3, td), none_arg(),
                             int_arg(2), int_arg(ignore)};
  const void* data[2] = {x, t};
  tpu_hlo_type_t scalar = tpu_hlo_type_scalar(TPU_DTYPE_FLOAT32);
  tpu_hlo_type_t outs[2] = {scalar, scalar};
  void* r[2];
  CHECK_OK(tpu_test_run_op("aten::nll_loss2d_forward", args, 5, NULL, data, outs, 2, r));
  double count = 5;
  check_all(r[0], &want, 1, 1e-6);
  check_all(r[1], &count, 1, 0);
  free(r[0]);
  free(r[1]);
  float g[N * H * W], tw = 0;
  fill(g, N * H * W, 18);
  tpu_lower_arg_t bargs[7] = {f32(3, td), f32(4, d), tpu_test_tensor_arg(TPU_DTYPE_INT64, 3, td),
                              none_arg(), int_arg(0), int_arg(ignore),
                              tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 0, NULL)};
  const void* bdata[4] = {g, x, t, &tw};
  tpu_hlo_type_t bout = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 4, d);
  double gw[N * C * H * W] = {0};
  for (int n = 0; n < N; n++)
    for (int p = 0; p < H * W; p++) {
      int64_t ti = t[n * H * W + p];
      if (ti != ignore) gw[(n * C + ti) * H * W + p] = -g[n * H * W + p];
    }
  CHECK_OK(tpu_test_run_op("aten::nll_loss2d_backward", bargs, 7, NULL, bdata, &bout, 1, r));
  check_all(r[0], gw, N * C * H * W, 0);
  free(r[0]);
}

TPU_TEST_MAIN(TPU_TEST(test_nll_loss), TPU_TEST(test_losses_mse_bce_smooth), TPU_TEST(test_nll_loss2d))
