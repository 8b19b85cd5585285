/* polynomial family on the XLA CPU plugin against values worked by hand. */
#include <math.h>
#include <string.h>

#include "../testing.h"
#include "lower_testing.h"

static bool near(double a, double b) { return fabs(a - b) < 1e-4 * (1 + fabs(b)); }

/* T_3(x) = 4x^3 - 3x, H_3(x) = 8x^3 - 12x, P_2(x) = (3x^2 - 1) / 2 at x =
 * 2 (the recurrence), n < 0 gives 0, T_n(1) = 1, T_8(0.5) = cos(8 pi / 3)
 * (the closed form). */
static void test_values(void) {
  const int64_t n = 5;
  float x[5] = {2, 2, 1, 0.5f, 2}, deg[5] = {3, -1, 7, 8, 0};
  tpu_lower_arg_t args[2] = {tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 1, &n),
                             tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 1, &n)};
  const void* data[2] = {x, deg};
  tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 1, &n);
  void* r[1];
  CHECK_OK(tpu_test_run_op("aten::special_chebyshev_polynomial_t", args, 2, NULL, data, &out, 1, r));
  float* t = r[0];
  CHECK(near(t[0], 26) && t[1] == 0 && t[2] == 1 && near(t[3], cos(8 * M_PI / 3)) && t[4] == 1);
  free(r[0]);
  CHECK_OK(tpu_test_run_op("aten::special_hermite_polynomial_h", args, 2, NULL, data, &out, 1, r));
  CHECK(near(((float*)r[0])[0], 40));
  free(r[0]);
  float two[5] = {2, 2, 2, 2, 2};
  data[1] = two;
  CHECK_OK(tpu_test_run_op("aten::special_legendre_polynomial_p", args, 2, NULL, data, &out, 1, r));
  CHECK(near(((float*)r[0])[0], 5.5) && near(((float*)r[0])[3], -0.125));
  free(r[0]);
}

TPU_TEST_MAIN(TPU_TEST(test_values))
