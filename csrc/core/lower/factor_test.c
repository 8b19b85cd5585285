/* factor family on the XLA CPU plugin against factorizations worked by
 * hand (LAPACK's pivoting). */
#include <math.h>

#include "../testing.h"
#include "lower_testing.h"

static bool near(double a, double b) { return fabs(a - b) < 1e-5; }

/* A = [[1, 2], [3, 4]]: row 1 pivots (|3| > |1|), L = [[1, 0], [1/3, 1]],
 * U = [[3, 4], [0, 2 - 4/3]]; pivots (1-based) [2, 2]; info 0. */
static void test_lu_factor(void) {
  const int64_t dims[2] = {2, 2}, k = 2;
  float a[4] = {1, 2, 3, 4};
  tpu_lower_arg_t args[3] = {tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 2, dims),
                             {.kind = TPU_ARG_BOOL, .i = 1}, {.kind = TPU_ARG_BOOL, .i = 0}};
  const void* data[1] = {a};
  tpu_hlo_type_t out[3] = {tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 2, dims),
                           tpu_hlo_type_make(TPU_DTYPE_INT32, 1, &k),
                           tpu_hlo_type_make(TPU_DTYPE_INT32, 0, NULL)};
  void* r[3];
  CHECK_OK(tpu_test_run_op("aten::linalg_lu_factor_ex", args, 3, NULL, data, out, 3, r));
  float* lu = r[0];
  int32_t* piv = r[1];
  CHECK(near(lu[0], 3) && near(lu[1], 4) && near(lu[2], 1.0 / 3) && near(lu[3], 2 - 4.0 / 3));
  CHECK(piv[0] == 2 && piv[1] == 2 && *(int32_t*)r[2] == 0);
  for (int i = 0; i < 3; i++) free(r[i]);
  /* a zero column: info names it, nothing pivots */
  float s[4] = {0, 1, 0, 2};
  data[0] = s;
  CHECK_OK(tpu_test_run_op("aten::linalg_lu_factor_ex", args, 3, NULL, data, out, 3, r));
  CHECK(*(int32_t*)r[2] == 1 && ((int32_t*)r[1])[0] == 1);
  for (int i = 0; i < 3; i++) free(r[i]);
}

TPU_TEST_MAIN(TPU_TEST(test_lu_factor))
