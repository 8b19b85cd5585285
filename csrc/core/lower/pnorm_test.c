/* pnorm family: norm, dist and cdist run on the XLA CPU plugin against
 * values computed here. */
#include <math.h>
#include <stdint.h>

#include "../testing.h"
#include "lower_testing.h"

static bool close(double a, double b, double tol) {
  return fabs(a - b) <= tol * (1 + fabs(b));
}

static void test_norms_with_runtime_p(void) {
  int64_t d[2] = {2, 3}, od[1] = {2}, one = 1;
  tpu_lower_arg_t args[5] = {tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 2, d),
                             tpu_test_scalar_arg(TPU_DTYPE_FLOAT64, true), ints_arg(1, &one),
                             bool_arg(false), kNone};
  float x[6] = {3, -4, 0, 1, -2, 2};
  double ps[6] = {2, 1, INFINITY, -INFINITY, 0, 3};
  double want[6][2] = {{5, 3},
                       {7, 5},
                       {4, 2},
                       {0, 1},
                       {2, 3},
                       {cbrt(91.0), cbrt(17.0)}};
  tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 1, od);
  for (int k = 0; k < 6; k++) {
    const void* data[2] = {x, &ps[k]};
    void* r[1];
    CHECK_OK(tpu_test_run_op("aten::linalg_vector_norm", args, 5, NULL, data, &out, 1, r));
    float* v = r[0];
    bool ok = close(v[0], want[k][0], 1e-6) && close(v[1], want[k][1], 1e-6);
    if (!ok) fprintf(stderr, "p=%g: %g %g\n", ps[k], v[0], v[1]);
    free(r[0]);
    CHECK(ok);
  }
  /* norm.ScalarOpt_dim with p=None is the 2-norm. */
  args[1] = kNone;
  const void* data[1] = {x};
  void* r[1];
  CHECK_OK(tpu_test_run_op("aten::norm.ScalarOpt_dim", args, 4, NULL, data, &out, 1, r));
  bool ok = close(((float*)r[0])[0], 5, 1e-6) && close(((float*)r[0])[1], 3, 1e-6);
  free(r[0]);
  CHECK(ok);
}

static void test_dist(void) {
  int64_t da[2] = {2, 3}, db[1] = {3};
  float a[6] = {1, 2, 3, 4, 5, 6}, b[3] = {1, 0, 3};
  tpu_lower_arg_t dargs[3] = {tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 2, da),
                              tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 1, db),
                              tpu_test_scalar_arg(TPU_DTYPE_INT64, true)};
  int64_t p = 1;
  const void* ddata[3] = {a, b, &p};
  tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 0, NULL);
  void* r[1];
  CHECK_OK(tpu_test_run_op("aten::dist", dargs, 3, NULL, ddata, &out, 1, r));
  bool ok = *(float*)r[0] == 0 + 2 + 0 + 3 + 5 + 3;
  free(r[0]);
  CHECK(ok);
}

static void test_cdist_forward_backward(void) {
  int64_t d[2] = {2, 2};
  float x1[4] = {0, 0, 1, 1}, x2[4] = {0, 0, 3, 4}, g[4] = {1, 1, 1, 1};
  tpu_lower_arg_t args[4] = {tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 2, d),
                             tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 2, d),
                             {.kind = TPU_ARG_FLOAT, .f = 2}, kNone};
  const void* data[2] = {x1, x2};
  tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 2, d);
  void* r[1];
  CHECK_OK(tpu_test_run_op("aten::_cdist_forward", args, 4, NULL, data, &out, 1, r));
  float* v = r[0];
  float dist[4] = {v[0], v[1], v[2], v[3]};
  bool ok = v[0] == 0 && v[1] == 5 && close(v[2], sqrt(2.0), 1e-6) && close(v[3], sqrt(13.0), 1e-6);
  free(r[0]);
  CHECK(ok);
  /* d/dx1 of sum of distances: sum_j (x1_i - x2_j) / dist_ij, 0 where dist is 0. */
  tpu_lower_arg_t bargs[5] = {tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 2, d),
                              tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 2, d),
                              tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 2, d),
                              {.kind = TPU_ARG_FLOAT, .f = 2},
                              tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 2, d)};
  const void* bdata[4] = {g, x1, x2, dist};
  CHECK_OK(tpu_test_run_op("aten::_cdist_backward", bargs, 5, NULL, bdata, &out, 1, r));
  v = r[0];
  double want[4] = {-3 / 5.0, -4 / 5.0, 1 / sqrt(2.0) - 2 / sqrt(13.0), 1 / sqrt(2.0) - 3 / sqrt(13.0)};
  ok = true;
  for (int k = 0; k < 4; k++) ok &= close(v[k], want[k], 1e-6);
  free(r[0]);
  CHECK(ok);
}

TPU_TEST_MAIN(TPU_TEST(test_norms_with_runtime_p), TPU_TEST(test_dist), TPU_TEST(test_cdist_forward_backward))
