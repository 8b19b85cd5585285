/* orthogonal family on the XLA CPU plugin against factorizations worked
 * by hand (LAPACK's Householder signs). */
#include <math.h>

#include "../testing.h"
#include "lower_testing.h"

static bool near(double a, double b) { return fabs(a - b) < 1e-5; }

/* geqrf of [[3], [4]]: alpha 3 > 0 so beta = -5, tau = (beta - alpha) /
 * beta = 1.6, v = 4 / (alpha - beta) = 0.5. */
static void test_geqrf(void) {
  const int64_t dims[2] = {2, 1}, k = 1;
  float a[2] = {3, 4};
  tpu_lower_arg_t args[1] = {tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 2, dims)};
  const void* data[1] = {a};
  tpu_hlo_type_t out[2] = {tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 2, dims),
                           tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 1, &k)};
  void* r[2];
  CHECK_OK(tpu_test_run_op("aten::geqrf", args, 1, NULL, data, out, 2, r));
  float* qr = r[0];
  CHECK(near(qr[0], -5) && near(qr[1], 0.5) && near(((float*)r[1])[0], 1.6));
  free(r[0]), free(r[1]);
}

/* svd of diag(1, 3) (permuted): S = [3, 1], descending. */
static void test_svd_values(void) {
  const int64_t dims[2] = {2, 2}, k = 2, none = 0;
  float a[4] = {0, 1, 3, 0};
  tpu_lower_arg_t args[4] = {tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 2, dims),
                             {.kind = TPU_ARG_BOOL, .i = 0}, {.kind = TPU_ARG_BOOL, .i = 0},
                             {.kind = TPU_ARG_NONE}};
  const void* data[1] = {a};
  tpu_hlo_type_t out[3] = {tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 1, &none),
                           tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 1, &k),
                           tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 1, &none)};
  void* r[3];
  CHECK_OK(tpu_test_run_op("aten::_linalg_svd", args, 4, NULL, data, out, 3, r));
  float* s = r[1];
  CHECK(near(s[0], 3) && near(s[1], 1));
  for (int i = 0; i < 3; i++) free(r[i]);
}

TPU_TEST_MAIN(TPU_TEST(test_geqrf), TPU_TEST(test_svd_values))
