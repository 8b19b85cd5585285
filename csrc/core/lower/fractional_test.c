/* fractional family on the XLA CPU plugin against a pooling worked by hand. */
#include <math.h>
#include <string.h>

#include "../testing.h"
#include "lower_testing.h"

/* A 1 x 1 x 4 x 4 plane (values 0..15), pool 2 x 2 to 2 x 2: alpha =
 * (4 - 2) / (2 - 1) = 2, so with u = 0 the starts are [0, 2] along both
 * dims: the maxima are 5, 7, 13, 15 at their own flat indices. */
static void test_pool(void) {
  const int64_t in_dims[4] = {1, 1, 4, 4}, rs_dims[3] = {1, 1, 2}, out_dims[4] = {1, 1, 2, 2};
  float x[16], rs[2] = {0, 0};
  for (int i = 0; i < 16; i++) x[i] = (float)i;
  tpu_lower_arg_t args[4] = {tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 4, in_dims),
                             {.kind = TPU_ARG_INTS, .num_ints = 2, .ints = {2, 2}},
                             {.kind = TPU_ARG_INTS, .num_ints = 2, .ints = {2, 2}},
                             tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 3, rs_dims)};
  const void* data[2] = {x, rs};
  tpu_hlo_type_t outs[2] = {tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 4, out_dims),
                            tpu_hlo_type_make(TPU_DTYPE_INT64, 4, out_dims)};
  void* r[2];
  CHECK_OK(tpu_test_run_op("aten::fractional_max_pool2d", args, 4, NULL, data, outs, 2, r));
  float* v = r[0];
  int64_t* idx = r[1];
  CHECK(v[0] == 5 && v[1] == 7 && v[2] == 13 && v[3] == 15);
  CHECK(idx[0] == 5 && idx[1] == 7 && idx[2] == 13 && idx[3] == 15);
  free(r[0]), free(r[1]);
}

TPU_TEST_MAIN(TPU_TEST(test_pool))
