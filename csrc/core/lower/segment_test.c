/* segment family on the XLA CPU plugin against reductions worked by hand. */
#include <math.h>
#include <string.h>

#include "../testing.h"
#include "lower_testing.h"

/* data [1, 2, 3, 4, 5], lengths [2, 0, 3]: sum [3, 0, 12], max [2, -inf,
 * 5], mean [1.5, NaN, 4] (an empty segment's mean is NaN). */
static void test_segment_reduce(void) {
  const int64_t n = 5, s = 3;
  float data[5] = {1, 2, 3, 4, 5};
  int64_t lengths[3] = {2, 0, 3};
  const char* kinds[3] = {"sum", "max", "mean"};
  float want[3][3] = {{3, 0, 12}, {2, -INFINITY, 5}, {1.5f, NAN, 4}};
  for (int k = 0; k < 3; k++) {
    tpu_lower_arg_t args[8] = {tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 1, &n),
                               {.kind = TPU_ARG_STRING, .str = kinds[k]},
                               tpu_test_tensor_arg(TPU_DTYPE_INT64, 1, &s),
                               {.kind = TPU_ARG_NONE}, {.kind = TPU_ARG_NONE},
                               {.kind = TPU_ARG_INT, .i = 0}, {.kind = TPU_ARG_BOOL, .i = 0},
                               {.kind = TPU_ARG_NONE}};
    const void* in[2] = {data, lengths};
    tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 1, &s);
    void* r[1];
    CHECK_OK(tpu_test_run_op("aten::segment_reduce", args, 8, NULL, in, &out, 1, r));
    float* got = r[0];
    for (int i = 0; i < 3; i++) CHECK(isnan(want[k][i]) ? isnan(got[i]) : got[i] == want[k][i]);
    free(r[0]);
  }
}

TPU_TEST_MAIN(TPU_TEST(test_segment_reduce))
