/* resample family on the XLA CPU plugin against interpolations worked by
 * hand. */
#include <math.h>
#include <string.h>

#include "../testing.h"
#include "lower_testing.h"

/* linear [0, 10] to 3 with align_corners: [0, 5, 10]; an inf reaches only
 * the outputs whose taps read it: [inf, 2] to 4 (half-pixel), the first
 * output reads inf alone and the last reads 2 alone (a product with an
 * interpolation matrix made every output NaN). */
static void test_linear(void) {
  const int64_t in_dims[3] = {1, 1, 2}, out_dims[3] = {1, 1, 3};
  float x[2] = {0, 10};
  tpu_lower_arg_t args[4] = {tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 3, in_dims),
                             {.kind = TPU_ARG_INTS, .num_ints = 1, .ints = {3}},
                             {.kind = TPU_ARG_BOOL, .i = 1}, {.kind = TPU_ARG_NONE}};
  const void* data[1] = {x};
  tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 3, out_dims);
  void* r[1];
  CHECK_OK(tpu_test_run_op("aten::upsample_linear1d", args, 4, NULL, data, &out, 1, r));
  float* y = r[0];
  CHECK(y[0] == 0 && y[1] == 5 && y[2] == 10);
  free(r[0]);
  float z[2] = {INFINITY, 2};
  const int64_t out4[3] = {1, 1, 4};
  args[1].ints[0] = 4;
  args[2].i = 0;
  data[0] = z;
  out = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 3, out4);
  CHECK_OK(tpu_test_run_op("aten::upsample_linear1d", args, 4, NULL, data, &out, 1, r));
  y = r[0];
  CHECK(isinf(y[0]) && y[3] == 2);
  free(r[0]);
}

/* grid_sample of a 2 x 2 image at its centre (align_corners) is the mean. */
static void test_grid_sample(void) {
  const int64_t in_dims[4] = {1, 1, 2, 2}, g_dims[4] = {1, 1, 1, 2}, o_dims[4] = {1, 1, 1, 1};
  float x[4] = {1, 2, 3, 4}, grid[2] = {0, 0};
  tpu_lower_arg_t args[5] = {tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 4, in_dims),
                             tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 4, g_dims),
                             {.kind = TPU_ARG_INT, .i = 0}, {.kind = TPU_ARG_INT, .i = 0},
                             {.kind = TPU_ARG_BOOL, .i = 1}};
  const void* data[2] = {x, grid};
  tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 4, o_dims);
  void* r[1];
  CHECK_OK(tpu_test_run_op("aten::grid_sampler_2d", args, 5, NULL, data, &out, 1, r));
  CHECK(fabsf(((float*)r[0])[0] - 2.5f) < 1e-6f);
  free(r[0]);
}

TPU_TEST_MAIN(TPU_TEST(test_linear), TPU_TEST(test_grid_sample))
