/* special family on the XLA CPU plugin against known values. */
#include <math.h>
#include <string.h>

#include "../testing.h"
#include "lower_testing.h"

static bool near(double a, double b) { return fabs(a - b) <= 1e-5 * (1 + fabs(b)); }

/* trigamma(1) = pi^2 / 6; trigamma(-0.5) = pi^2 / 2 + 4 (reflection);
 * polygamma(2, 1) = -2 zeta(3); zeta(2, 1) = pi^2 / 6. */
static void test_polygamma_and_zeta(void) {
  const int64_t n = 2;
  float x[2] = {1.0f, -0.5f};
  tpu_lower_arg_t args[2] = {{.kind = TPU_ARG_INT, .i = 1}, tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 1, &n)};
  const void* data[1] = {x};
  tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 1, &n);
  void* r[1];
  CHECK_OK(tpu_test_run_op("aten::polygamma", args, 2, NULL, data, &out, 1, r));
  CHECK(near(((float*)r[0])[0], M_PI * M_PI / 6) && near(((float*)r[0])[1], M_PI * M_PI / 2 + 4));
  free(r[0]);
  args[0].i = 2;
  CHECK_OK(tpu_test_run_op("aten::polygamma", args, 2, NULL, data, &out, 1, r));
  CHECK(near(((float*)r[0])[0], -2 * 1.2020569031595942));
  free(r[0]);
  float s[2] = {2, 2}, q[2] = {1, 2};
  tpu_lower_arg_t zargs[2] = {tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 1, &n),
                              tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 1, &n)};
  const void* zdata[2] = {s, q};
  CHECK_OK(tpu_test_run_op("aten::special_zeta", zargs, 2, NULL, zdata, &out, 1, r));
  CHECK(near(((float*)r[0])[0], M_PI * M_PI / 6) && near(((float*)r[0])[1], M_PI * M_PI / 6 - 1));
  free(r[0]);
}

TPU_TEST_MAIN(TPU_TEST(test_polygamma_and_zeta))
