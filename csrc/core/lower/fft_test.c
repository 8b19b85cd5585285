/* fft family on the XLA CPU plugin against transforms worked by hand. */
#include <math.h>
#include <string.h>

#include "../testing.h"
#include "lower_testing.h"

static bool near(double a, double b) { return fabs(a - b) < 1e-5; }

/* rfft([1, 2, 3, 4]) = [10, -2 + 2i, -2]; norm=2 divides by 4; the
 * two-sided form adds the conjugate bin -2 - 2i. */
static void test_r2c(void) {
  const int64_t n = 4, half = 3;
  float x[4] = {1, 2, 3, 4};
  for (int onesided = 1; onesided >= 0; onesided--) {
    tpu_lower_arg_t args[4] = {tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 1, &n),
                               {.kind = TPU_ARG_INTS, .num_ints = 1, .ints = {0}},
                               {.kind = TPU_ARG_INT, .i = 2}, {.kind = TPU_ARG_BOOL, .i = onesided}};
    const void* data[1] = {x};
    tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_COMPLEX64, 1, onesided ? &half : &n);
    void* r[1];
    CHECK_OK(tpu_test_run_op("aten::_fft_r2c", args, 4, NULL, data, &out, 1, r));
    float* c = r[0];
    CHECK(near(c[0], 2.5) && near(c[1], 0) && near(c[2], -0.5) && near(c[3], 0.5) && near(c[4], -0.5) &&
          near(c[5], 0));
    if (!onesided) CHECK(near(c[6], -0.5) && near(c[7], -0.5));
    free(r[0]);
  }
}

/* The inverse of [10, -2 + 2i, -2, -2 - 2i] unnormalized (norm 0) is 4 x
 * [1, 2, 3, 4]; c2r of the one-sided bins with norm 2 is [1, 2, 3, 4]. */
static void test_c2c_and_c2r(void) {
  const int64_t n = 4, half = 3;
  float spec[8] = {10, 0, -2, 2, -2, 0, -2, -2};
  tpu_lower_arg_t args[4] = {tpu_test_tensor_arg(TPU_DTYPE_COMPLEX64, 1, &n),
                             {.kind = TPU_ARG_INTS, .num_ints = 1, .ints = {-1}},
                             {.kind = TPU_ARG_INT, .i = 0}, {.kind = TPU_ARG_BOOL, .i = 0}};
  const void* data[1] = {spec};
  tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_COMPLEX64, 1, &n);
  void* r[1];
  CHECK_OK(tpu_test_run_op("aten::_fft_c2c", args, 4, NULL, data, &out, 1, r));
  float* c = r[0];
  for (int k = 0; k < 4; k++) CHECK(near(c[2 * k], 4.0 * (k + 1)) && near(c[2 * k + 1], 0));
  free(r[0]);
  tpu_lower_arg_t rargs[4] = {tpu_test_tensor_arg(TPU_DTYPE_COMPLEX64, 1, &half),
                              {.kind = TPU_ARG_INTS, .num_ints = 1, .ints = {0}},
                              {.kind = TPU_ARG_INT, .i = 2}, {.kind = TPU_ARG_INT, .i = 4}};
  tpu_hlo_type_t rout = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 1, &n);
  CHECK_OK(tpu_test_run_op("aten::_fft_c2r", rargs, 4, NULL, data, &rout, 1, r));
  float* y = r[0];
  for (int k = 0; k < 4; k++) CHECK(near(y[k], k + 1));
  free(r[0]);
}

TPU_TEST_MAIN(TPU_TEST(test_r2c), TPU_TEST(test_c2c_and_c2r))
