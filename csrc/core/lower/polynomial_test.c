/* polynomial family on the XLA CPU plugin against values worked by hand. */
#include <math.h>
#include <stdio.h>

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

/* Every row lowers its own polynomial (its data word): each at x = 0.3,
 * n = 3, as torch.special gives them on CPU. */
static void test_each_row(void) {
  static const struct { const char* op; double want; } kRows[] = {
      {"chebyshev_polynomial_t", -0.792}, {"chebyshev_polynomial_u", -0.984},
      {"chebyshev_polynomial_v", -0.344}, {"chebyshev_polynomial_w", -1.624},
      {"shifted_chebyshev_polynomial_t", 0.944}, {"shifted_chebyshev_polynomial_u", 1.088},
      {"shifted_chebyshev_polynomial_v", 1.448}, {"shifted_chebyshev_polynomial_w", 0.728},
      {"hermite_polynomial_h", -3.384}, {"hermite_polynomial_he", -0.873},
      {"laguerre_polynomial_l", 0.2305}, {"legendre_polynomial_p", -0.3825}};
  double x = 0.3, deg = 3;
  const void* data[2] = {&x, &deg};
  tpu_lower_arg_t a = tpu_test_tensor_arg(TPU_DTYPE_FLOAT64, 0, NULL), args[2] = {a, a};
  tpu_hlo_type_t out = tpu_hlo_type_scalar(TPU_DTYPE_FLOAT64);
  for (size_t k = 0; k < sizeof kRows / sizeof kRows[0]; k++) {
    char op[64];
    snprintf(op, sizeof op, "aten::special_%s", kRows[k].op);
    void* r[1];
    CHECK_OK(tpu_test_run_op(op, args, 2, NULL, data, &out, 1, r));
    CHECK(near(*(double*)r[0], kRows[k].want));
    free(r[0]);
  }
}

TPU_TEST_MAIN(TPU_TEST(test_values), TPU_TEST(test_each_row))
