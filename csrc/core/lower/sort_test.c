/* sort family: each lowering run on the CPU plugin against values worked
 * out by hand. */
#include <math.h>

#include "../testing.h"
#include "lower_testing.h"

/* sort (NaN largest, stable ties), descending, topk, kthvalue, median. */
static void test_sorting(void) {
  int64_t xd[1] = {5};
  float nan = NAN;
  float x[5] = {2, nan, 1, 2, -3};
  const void* data[1] = {x};
  tpu_hlo_type_t outs[2] = {tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 1, xd),
                            tpu_hlo_type_make(TPU_DTYPE_INT64, 1, xd)};
  void* r[2];
  tpu_lower_arg_t args[4] = {tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 1, xd), int_arg(0),
                             bool_arg(false)};
  CHECK_OK(tpu_test_run_op("aten::sort", args, 3, NULL, data, outs, 2, r));
  float* v = r[0];
  int64_t* i = r[1];
  CHECK(v[0] == -3 && v[1] == 1 && v[2] == 2 && v[3] == 2 && isnan(v[4]));
  CHECK(i[0] == 4 && i[1] == 2 && i[2] == 0 && i[3] == 3 && i[4] == 1);
  free(r[0]);
  free(r[1]);
  tpu_lower_arg_t sargs[4] = {args[0], bool_arg(true), int_arg(-1), bool_arg(true)};
  CHECK_OK(tpu_test_run_op("aten::sort.stable", sargs, 4, NULL, data, outs, 2, r));
  v = r[0];
  i = r[1];
  CHECK(isnan(v[0]) && v[1] == 2 && v[2] == 2 && v[3] == 1 && v[4] == -3);
  CHECK(i[0] == 1 && i[1] == 0 && i[2] == 3 && i[3] == 2 && i[4] == 4);
  free(r[0]);
  free(r[1]);
  int64_t kd[1] = {2};
  tpu_hlo_type_t kouts[2] = {tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 1, kd),
                             tpu_hlo_type_make(TPU_DTYPE_INT64, 1, kd)};
  tpu_lower_arg_t targs[5] = {args[0], int_arg(2), int_arg(-1), bool_arg(false), bool_arg(true)};
  CHECK_OK(tpu_test_run_op("aten::topk", targs, 5, NULL, data, kouts, 2, r));
  v = r[0];
  i = r[1];
  CHECK(v[0] == -3 && v[1] == 1 && i[0] == 4 && i[1] == 2);
  free(r[0]);
  free(r[1]);
  tpu_hlo_type_t s_outs[2] = {tpu_hlo_type_scalar(TPU_DTYPE_FLOAT32),
                              tpu_hlo_type_scalar(TPU_DTYPE_INT64)};
  /* topk of a 0-d input keeps its element for k = 0 as for k = 1 (CPU). */
  float one_x = 1.5f;
  const void* one_data[1] = {&one_x};
  tpu_lower_arg_t t0args[5] = {tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 0, NULL), int_arg(0),
                               int_arg(0), bool_arg(false), bool_arg(true)};
  CHECK_OK(tpu_test_run_op("aten::topk", t0args, 5, NULL, one_data, s_outs, 2, r));
  CHECK(*(float*)r[0] == 1.5f && *(int64_t*)r[1] == 0);
  free(r[0]);
  free(r[1]);
  tpu_lower_arg_t kargs[4] = {args[0], int_arg(4), int_arg(0), bool_arg(false)};
  CHECK_OK(tpu_test_run_op("aten::kthvalue", kargs, 4, NULL, data, s_outs, 2, r));
  CHECK(*(float*)r[0] == 2 && *(int64_t*)r[1] == 3);
  free(r[0]);
  free(r[1]);
  /* kthvalue of bool declines: CPU has no kernel for it. */
  kargs[0].type.dtype = TPU_DTYPE_BOOL;
  char* ktext = NULL;
  size_t klen;
  tpu_status_t ks = tpu_lower_program_plain("aten::kthvalue", kargs, 4, NULL, s_outs, 2, &ktext, &klen);
  CHECK(ks != NULL && tpu_status_code(ks) == TPU_STATUS_UNIMPLEMENTED);
  tpu_status_free(ks);
  /* median.dim with a NaN: NaN at the first NaN's index; without: lower
   * median. */
  tpu_lower_arg_t margs[3] = {args[0], int_arg(0), bool_arg(false)};
  CHECK_OK(tpu_test_run_op("aten::median.dim", margs, 3, NULL, data, s_outs, 2, r));
  CHECK(isnan(*(float*)r[0]) && *(int64_t*)r[1] == 1);
  free(r[0]);
  free(r[1]);
  float y[4] = {4, -1, 3, 0};
  int64_t yd[1] = {4};
  tpu_lower_arg_t m1[1] = {tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 1, yd)};
  const void* ydata[1] = {y};
  CHECK_OK(tpu_test_run_op("aten::median", m1, 1, NULL, ydata, s_outs, 1, r));
  CHECK(*(float*)r[0] == 0);
  free(r[0]);
}

static void test_sort_bool(void) {
  int64_t xd[1] = {4};
  bool x[4] = {true, false, true, false};
  const void* data[1] = {x};
  tpu_hlo_type_t outs[2] = {tpu_hlo_type_make(TPU_DTYPE_BOOL, 1, xd),
                            tpu_hlo_type_make(TPU_DTYPE_INT64, 1, xd)};
  tpu_lower_arg_t args[3] = {tpu_test_tensor_arg(TPU_DTYPE_BOOL, 1, xd), int_arg(0),
                             bool_arg(false)};
  void* r[2];
  CHECK_OK(tpu_test_run_op("aten::sort", args, 3, NULL, data, outs, 2, r));
  bool* v = r[0];
  int64_t* i = r[1];
  CHECK(!v[0] && !v[1] && v[2] && v[3] && i[0] == 1 && i[1] == 3 && i[2] == 0 && i[3] == 2);
  free(r[0]);
  free(r[1]);
}

/* nanmedian.dim over rows: all-NaN, one NaN, none. */
static void test_nanmedian(void) {
  float n = NAN;
  int64_t xd[2] = {3, 3}, od[1] = {3};
  float x[9] = {n, n, n, 3, n, 1, 4, 2, 5};
  const void* data[1] = {x};
  tpu_lower_arg_t args[3] = {tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 2, xd), int_arg(1),
                             bool_arg(false)};
  tpu_hlo_type_t outs[2] = {tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 1, od),
                            tpu_hlo_type_make(TPU_DTYPE_INT64, 1, od)};
  void* r[2];
  CHECK_OK(tpu_test_run_op("aten::nanmedian.dim", args, 3, NULL, data, outs, 2, r));
  float* v = r[0];
  int64_t* i = r[1];
  CHECK(isnan(v[0]) && i[0] == 0 && v[1] == 1 && i[1] == 2 && v[2] == 4 && i[2] == 0);
  free(r[0]);
  free(r[1]);
  tpu_hlo_type_t s = tpu_hlo_type_scalar(TPU_DTYPE_FLOAT32);
  CHECK_OK(tpu_test_run_op("aten::nanmedian", args, 1, NULL, data, &s, 1, r));
  CHECK(*(float*)r[0] == 3);
  free(r[0]);
}

TPU_TEST_MAIN(TPU_TEST(test_sorting), TPU_TEST(test_sort_bool), TPU_TEST(test_nanmedian))
