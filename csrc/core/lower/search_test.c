#include <math.h>
#include <string.h>

#include "../testing.h"
#include "lower_testing.h"

/* searchsorted(seq, values, out_int32, right, side, sorter) with a 1-D or
 * batched sequence, left and right, against values worked by hand. */
/* out: the malloc'd int64 result (zeros when the run failed: the check
 * has counted it, and the caller's comparisons stay safe). */
static void run_search(const char* op, const tpu_lower_arg_t* args, int nargs,
                       const void* const* data, int rank, const int64_t* dims, int64_t** out) {
  tpu_hlo_type_t o = tpu_hlo_type_make(TPU_DTYPE_INT64, rank, dims);
  void* r[1] = {NULL};
  *out = calloc((size_t)(rank > 1 ? dims[0] * dims[1] : rank ? dims[0] : 1), sizeof(int64_t));
  CHECK_OK(tpu_test_run_op(op, args, nargs, NULL, data, &o, 1, r));
  free(*out);
  *out = r[0];
}

static void test_searchsorted_left_right_batched(void) {
  const int64_t sd[1] = {5}, vd[1] = {7};
  float seq[5] = {1, 3, 3, 5, 7};
  float v[7] = {0, 1, 2, 3, 6, 7, 8};
  tpu_lower_arg_t args[6] = {tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 1, sd),
                             tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 1, vd),
                             {.kind = TPU_ARG_BOOL, .i = 0}, {.kind = TPU_ARG_BOOL, .i = 0},
                             {.kind = TPU_ARG_NONE}, {.kind = TPU_ARG_NONE}};
  const void* data[2] = {seq, v};
  int64_t* r;
  run_search("aten::searchsorted.Tensor", args, 6, data, 1, vd, &r);
  const int64_t left[7] = {0, 0, 1, 1, 4, 4, 5}, right[7] = {0, 1, 1, 3, 4, 5, 5};
  CHECK(memcmp(r, left, sizeof left) == 0);
  free(r);
  args[3].i = 1;
  run_search("aten::searchsorted.Tensor", args, 6, data, 1, vd, &r);
  CHECK(memcmp(r, right, sizeof right) == 0);
  free(r);
  /* side="right" alone is right too. */
  args[3].i = 0;
  args[4] = (tpu_lower_arg_t){.kind = TPU_ARG_STRING, .str = "right"};
  run_search("aten::searchsorted.Tensor", args, 6, data, 1, vd, &r);
  CHECK(memcmp(r, right, sizeof right) == 0);
  free(r);
  /* Batched: each row of values in its own row of the sequence. */
  const int64_t bs[2] = {2, 3}, bv[2] = {2, 2};
  int64_t bseq[6] = {1, 2, 3, 10, 20, 30};
  int64_t bval[4] = {2, 4, 2, 25};
  tpu_lower_arg_t bargs[6] = {tpu_test_tensor_arg(TPU_DTYPE_INT64, 2, bs),
                              tpu_test_tensor_arg(TPU_DTYPE_INT64, 2, bv),
                              {.kind = TPU_ARG_BOOL, .i = 0}, {.kind = TPU_ARG_BOOL, .i = 0},
                              {.kind = TPU_ARG_NONE}, {.kind = TPU_ARG_NONE}};
  const void* bdata[2] = {bseq, bval};
  run_search("aten::searchsorted.Tensor", bargs, 6, bdata, 2, bv, &r);
  const int64_t want[4] = {1, 3, 0, 2};
  CHECK(memcmp(r, want, sizeof want) == 0);
  free(r);
}

/* NaN values go past the end (CPU's !(mid >= v) is true for NaN); a sorter
 * reads the sequence through its permutation. */
static void test_searchsorted_nan_and_sorter(void) {
  const int64_t sd[1] = {4}, vd[1] = {3};
  float seq[4] = {5, 1, 7, 3};
  int64_t sorter[4] = {1, 3, 0, 2};
  float v[3] = {NAN, 4, 5};
  tpu_lower_arg_t args[6] = {tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 1, sd),
                             tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 1, vd),
                             {.kind = TPU_ARG_BOOL, .i = 0}, {.kind = TPU_ARG_BOOL, .i = 0},
                             {.kind = TPU_ARG_NONE}, tpu_test_tensor_arg(TPU_DTYPE_INT64, 1, sd)};
  const void* data[3] = {seq, v, sorter};
  int64_t* r;
  run_search("aten::searchsorted.Tensor", args, 6, data, 1, vd, &r);
  const int64_t want[3] = {4, 2, 2};
  CHECK(memcmp(r, want, sizeof want) == 0);
  free(r);
}

/* bucketize(values, boundaries) with a Python number, and the declines that
 * leave CPU's errors to the fallback: 2-D boundaries, an unknown side. */
static void test_bucketize_and_declines(void) {
  const int64_t bd[1] = {3};
  double x = 2.5;
  int32_t bounds[3] = {1, 2, 3};
  tpu_lower_arg_t args[4] = {tpu_test_scalar_arg(TPU_DTYPE_FLOAT64, true),
                             tpu_test_tensor_arg(TPU_DTYPE_INT32, 1, bd),
                             {.kind = TPU_ARG_BOOL, .i = 1}, {.kind = TPU_ARG_BOOL, .i = 0}};
  const void* data[2] = {bounds, &x};
  tpu_hlo_type_t o = tpu_hlo_type_make(TPU_DTYPE_INT32, 0, NULL);
  void* r[1];
  CHECK_OK(tpu_test_run_op("aten::bucketize.Scalar", args, 4, NULL, data, &o, 1, r));
  CHECK(*(int32_t*)r[0] == 2);
  free(r[0]);
  const int64_t b2[2] = {1, 3};
  args[1] = tpu_test_tensor_arg(TPU_DTYPE_INT32, 2, b2);
  char* text = NULL;
  size_t len = 0;
  tpu_status_t st = tpu_lower_program_plain("aten::bucketize.Scalar", args, 4, NULL, &o, 1, &text, &len);
  CHECK(st != NULL && tpu_status_code(st) == TPU_STATUS_UNIMPLEMENTED);
  tpu_status_free(st);
  const int64_t sd[1] = {3};
  tpu_lower_arg_t sargs[6] = {tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 1, sd),
                              tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 1, sd),
                              {.kind = TPU_ARG_BOOL, .i = 0}, {.kind = TPU_ARG_BOOL, .i = 0},
                              {.kind = TPU_ARG_STRING, .str = "middle"}, {.kind = TPU_ARG_NONE}};
  tpu_hlo_type_t so = tpu_hlo_type_make(TPU_DTYPE_INT64, 1, sd);
  st = tpu_lower_program_plain("aten::searchsorted.Tensor", sargs, 6, NULL, &so, 1, &text, &len);
  CHECK(st != NULL && tpu_status_code(st) == TPU_STATUS_UNIMPLEMENTED);
  tpu_status_free(st);
}

TPU_TEST_MAIN(TPU_TEST(test_searchsorted_left_right_batched), TPU_TEST(test_searchsorted_nan_and_sorter),
              TPU_TEST(test_bucketize_and_declines))
