/* index family: each lowering run on the CPU plugin against values worked
 * out by hand (or by a loop here). */
#include <math.h>

#include "../testing.h"
#include "lower_testing.h"

static tpu_lower_arg_t str_arg(const char* s) {
  return (tpu_lower_arg_t){.kind = TPU_ARG_STRING, .str = s};
}

/* gather along dim 1 with a negative index. */
static void test_gather(void) {
  int64_t xd[2] = {2, 3}, id[2] = {2, 2};
  tpu_lower_arg_t args[4] = {tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 2, xd), int_arg(1),
                             tpu_test_tensor_arg(TPU_DTYPE_INT64, 2, id), bool_arg(false)};
  float x[6] = {1, 2, 3, 4, 5, 6};
  int64_t idx[4] = {2, 0, -1, 1};
  const void* data[2] = {x, idx};
  tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 2, id);
  void* r[1];
  CHECK_OK(tpu_test_run_op("aten::gather", args, 4, NULL, data, &out, 1, r));
  float* g = r[0];
  CHECK(g[0] == 3 && g[1] == 1 && g[2] == 6 && g[3] == 5);
  free(r[0]);
}

/* scatter_add with duplicates; scatter.value; scatter.reduce multiply. */
static void test_scatter_variants(void) {
  int64_t xd[1] = {4}, id[1] = {3}, sd[1] = {5};
  float x[4] = {1, 1, 1, 1}, src[5] = {10, 20, 30, 40, 50};
  int64_t idx[3] = {0, 0, -1};
  tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 1, xd);
  void* r[1];
  tpu_lower_arg_t args[5] = {tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 1, xd), int_arg(0),
                             tpu_test_tensor_arg(TPU_DTYPE_INT64, 1, id),
                             tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 1, sd), str_arg("multiply")};
  const void* data[3] = {x, idx, src};
  CHECK_OK(tpu_test_run_op("aten::scatter_add", args, 4, NULL, data, &out, 1, r));
  float* g = r[0];
  CHECK(g[0] == 31 && g[1] == 1 && g[2] == 1 && g[3] == 31);
  free(r[0]);
  CHECK_OK(tpu_test_run_op("aten::scatter.reduce", args, 5, NULL, data, &out, 1, r));
  g = r[0];
  CHECK(g[0] == 200 && g[1] == 1 && g[3] == 30);
  free(r[0]);
  tpu_lower_arg_t vargs[4] = {args[0], args[1], args[2], tpu_test_scalar_arg(TPU_DTYPE_FLOAT64, true)};
  double v = 7;
  const void* vdata[3] = {x, idx, &v};
  CHECK_OK(tpu_test_run_op("aten::scatter_.value", vargs, 4, NULL, vdata, &out, 1, r));
  g = r[0];
  CHECK(g[0] == 7 && g[1] == 1 && g[2] == 1 && g[3] == 7);
  free(r[0]);
}

/* scatter_reduce: amax without self, mean with self on int64 (floors). */
static void test_scatter_reduce(void) {
  int64_t xd[1] = {3}, id[1] = {4};
  int64_t idx[4] = {0, 0, 2, 2};
  float xf[3] = {100, 5, -100}, sf[4] = {1, 3, -2, -7};
  tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 1, xd);
  tpu_lower_arg_t args[6] = {tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 1, xd), int_arg(0),
                             tpu_test_tensor_arg(TPU_DTYPE_INT64, 1, id),
                             tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 1, id), str_arg("amax"),
                             bool_arg(false)};
  const void* data[3] = {xf, idx, sf};
  void* r[1];
  CHECK_OK(tpu_test_run_op("aten::scatter_reduce.two", args, 6, NULL, data, &out, 1, r));
  float* g = r[0];
  CHECK(g[0] == 3 && g[1] == 5 && g[2] == -2);
  free(r[0]);
  /* NaN propagates through amax / amin like PyTorch, in either order. */
  float xn[3] = {NAN, 5, 1}, sn[4] = {1, 3, NAN, 2};
  const void* ndata[3] = {xn, idx, sn};
  args[5] = bool_arg(true);
  CHECK_OK(tpu_test_run_op("aten::scatter_reduce.two", args, 6, NULL, ndata, &out, 1, r));
  g = r[0];
  CHECK(isnan(g[0]) && g[1] == 5 && isnan(g[2]));
  free(r[0]);
  args[4] = str_arg("amin");
  CHECK_OK(tpu_test_run_op("aten::scatter_reduce.two", args, 6, NULL, ndata, &out, 1, r));
  g = r[0];
  CHECK(isnan(g[0]) && g[1] == 5 && isnan(g[2]));
  free(r[0]);
  /* int64 mean including self: (100+1+3)/3 = 34.67 -> 34; (-100-2-7)/3 =
   * -36.33 -> -37; untouched 5 stays. */
  int64_t xi[3] = {100, 5, -100}, si[4] = {1, 3, -2, -7};
  args[0].type.dtype = TPU_DTYPE_INT64;
  args[3].type.dtype = TPU_DTYPE_INT64;
  args[4] = str_arg("mean");
  args[5] = bool_arg(true);
  const void* idata[3] = {xi, idx, si};
  out.dtype = TPU_DTYPE_INT64;
  CHECK_OK(tpu_test_run_op("aten::scatter_reduce.two", args, 6, NULL, idata, &out, 1, r));
  int64_t* gi = r[0];
  CHECK(gi[0] == 34 && gi[1] == 5 && gi[2] == -37);
  free(r[0]);
}

/* x[i, j] with broadcast index tensors (adjacent dims 0, 1 of a 3-D x). */
static void test_index_tensor(void) {
  int64_t xd[3] = {3, 4, 2}, i0d[2] = {2, 1}, i1d[1] = {3};
  float x[24];
  for (int k = 0; k < 24; k++) x[k] = (float)k;
  int64_t i0[2] = {0, -1}, i1[3] = {1, 2, 3};
  tpu_hlo_type_t lt[2] = {tpu_hlo_type_make(TPU_DTYPE_INT64, 2, i0d),
                          tpu_hlo_type_make(TPU_DTYPE_INT64, 1, i1d)};
  tpu_lower_arg_t args[2] = {tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 3, xd),
                             {.kind = TPU_ARG_TENSORS, .num_tensors = 2}};
  const void* data[3] = {x, i0, i1};
  int64_t od[3] = {2, 3, 2};
  tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 3, od);
  void* r[1];
  CHECK_OK(tpu_test_run_op("aten::index.Tensor", args, 2, lt, data, &out, 1, r));
  float* g = r[0];
  for (int a = 0; a < 2; a++)
    for (int c = 0; c < 3; c++)
      for (int e = 0; e < 2; e++) {
        int row = a == 0 ? 0 : 2;
        CHECK(g[(a * 3 + c) * 2 + e] == x[(row * 4 + i1[c]) * 2 + e]);
      }
  free(r[0]);
}

/* index_put_ accumulate with a repeated index, and without. */
/* x[i, :, j] on [3, 4, 2]: indices at list positions 0 and 2 (a None
 * between), not adjacent, so the index dims go first: result [2, 4]. */
static void test_index_tensor_with_none(void) {
  int64_t xd[3] = {3, 4, 2}, id[1] = {2};
  float x[24];
  for (int k = 0; k < 24; k++) x[k] = (float)k;
  int64_t i0[2] = {2, 0}, i2[2] = {-1, 0};
  tpu_hlo_type_t lt[2] = {tpu_hlo_type_make(TPU_DTYPE_INT64, 1, id),
                          tpu_hlo_type_make(TPU_DTYPE_INT64, 1, id)};
  tpu_lower_arg_t args[2] = {tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 3, xd),
                             {.kind = TPU_ARG_TENSORS, .num_tensors = 2, .num_ints = 3,
                              .ints = {0, 2}}};
  const void* data[3] = {x, i0, i2};
  int64_t od[2] = {2, 4};
  tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 2, od);
  void* r[1];
  CHECK_OK(tpu_test_run_op("aten::index.Tensor", args, 2, lt, data, &out, 1, r));
  float* g = r[0];
  for (int a = 0; a < 2; a++)
    for (int c = 0; c < 4; c++) CHECK(g[a * 4 + c] == x[(i0[a] * 4 + c) * 2 + (a == 0 ? 1 : 0)]);
  free(r[0]);
  /* x[:, i] (position 1 only): adjacent, result [3, 2, 2]. */
  tpu_lower_arg_t args1[2] = {args[0], {.kind = TPU_ARG_TENSORS, .num_tensors = 1, .num_ints = 2,
                                        .ints = {1}}};
  int64_t i1[2] = {3, -4};
  const void* data1[2] = {x, i1};
  int64_t od1[3] = {3, 2, 2};
  tpu_hlo_type_t out1 = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 3, od1);
  CHECK_OK(tpu_test_run_op("aten::index.Tensor", args1, 2, lt, data1, &out1, 1, r));
  g = r[0];
  for (int a = 0; a < 3; a++)
    for (int c = 0; c < 2; c++)
      for (int e = 0; e < 2; e++) CHECK(g[(a * 2 + c) * 2 + e] == x[(a * 4 + (c ? 0 : 3)) * 2 + e]);
  free(r[0]);
}

static void test_index_put(void) {
  int64_t xd[2] = {3, 2}, id[1] = {3}, vd[1] = {2};
  float x[6] = {0, 0, 0, 0, 0, 0}, v[2] = {1, 2};
  int64_t idx[3] = {0, 2, 0};
  tpu_hlo_type_t lt[1] = {tpu_hlo_type_make(TPU_DTYPE_INT64, 1, id)};
  tpu_lower_arg_t args[4] = {tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 2, xd),
                             {.kind = TPU_ARG_TENSORS, .num_tensors = 1},
                             tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 1, vd), bool_arg(true)};
  const void* data[3] = {x, idx, v};
  tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 2, xd);
  void* r[1];
  CHECK_OK(tpu_test_run_op("aten::_index_put_impl_", args, 4, lt, data, &out, 1, r));
  float* g = r[0];
  CHECK(g[0] == 2 && g[1] == 4 && g[2] == 0 && g[3] == 0 && g[4] == 1 && g[5] == 2);
  free(r[0]);
  args[3] = bool_arg(false);
  CHECK_OK(tpu_test_run_op("aten::index_put_", args, 4, lt, data, &out, 1, r));
  g = r[0];
  CHECK(g[0] == 1 && g[1] == 2 && g[2] == 0 && g[4] == 1 && g[5] == 2);
  free(r[0]);
}

/* index_select / index_add(alpha) / index_copy / index_fill on dim 1. */
static void test_index_dim_ops(void) {
  int64_t xd[2] = {2, 3}, id[1] = {2}, sd[2] = {2, 2};
  float x[6] = {1, 2, 3, 4, 5, 6}, s[4] = {10, 20, 30, 40};
  int64_t idx[2] = {-1, 0};
  void* r[1];
  tpu_lower_arg_t args[5] = {tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 2, xd), int_arg(1),
                             tpu_test_tensor_arg(TPU_DTYPE_INT64, 1, id),
                             tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 2, sd),
                             tpu_test_scalar_arg(TPU_DTYPE_FLOAT64, true)};
  tpu_hlo_type_t sel = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 2, sd);
  const void* data[4] = {x, idx, s, NULL};
  CHECK_OK(tpu_test_run_op("aten::index_select", args, 3, NULL, data, &sel, 1, r));
  float* g = r[0];
  CHECK(g[0] == 3 && g[1] == 1 && g[2] == 6 && g[3] == 4);
  free(r[0]);
  double alpha = 2;
  data[3] = &alpha;
  tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 2, xd);
  CHECK_OK(tpu_test_run_op("aten::index_add_", args, 5, NULL, data, &out, 1, r));
  g = r[0];
  CHECK(g[0] == 41 && g[1] == 2 && g[2] == 23 && g[3] == 84 && g[5] == 66);
  free(r[0]);
  CHECK_OK(tpu_test_run_op("aten::index_copy", args, 4, NULL, data, &out, 1, r));
  g = r[0];
  CHECK(g[0] == 20 && g[1] == 2 && g[2] == 10 && g[3] == 40 && g[5] == 30);
  free(r[0]);
  tpu_lower_arg_t fargs[4] = {args[0], args[1], args[2], tpu_test_scalar_arg(TPU_DTYPE_FLOAT64, true)};
  double v = -1;
  const void* fdata[3] = {x, idx, &v};
  CHECK_OK(tpu_test_run_op("aten::index_fill_.int_Scalar", fargs, 4, NULL, fdata, &out, 1, r));
  g = r[0];
  CHECK(g[0] == -1 && g[1] == 2 && g[2] == -1 && g[3] == -1 && g[4] == 5 && g[5] == -1);
  free(r[0]);
}

static void test_take(void) {
  int64_t xd[2] = {2, 3}, id[2] = {2, 2};
  float x[6] = {1, 2, 3, 4, 5, 6};
  int64_t idx[4] = {5, -6, 1, 1};
  tpu_lower_arg_t args[2] = {tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 2, xd),
                             tpu_test_tensor_arg(TPU_DTYPE_INT64, 2, id)};
  const void* data[2] = {x, idx};
  tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 2, id);
  void* r[1];
  CHECK_OK(tpu_test_run_op("aten::take", args, 2, NULL, data, &out, 1, r));
  float* g = r[0];
  CHECK(g[0] == 6 && g[1] == 1 && g[2] == 2 && g[3] == 2);
  free(r[0]);
}

/* put_ with accumulate (and a repeated, negative index). */
static void test_put(void) {
  int64_t xd[2] = {2, 2}, id[1] = {3};
  float x[4] = {1, 2, 3, 4}, src[3] = {10, 20, 30};
  int64_t idx[3] = {-1, 0, 3};
  tpu_lower_arg_t args[4] = {tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 2, xd),
                             tpu_test_tensor_arg(TPU_DTYPE_INT64, 1, id),
                             tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 1, id), bool_arg(true)};
  const void* data[3] = {x, idx, src};
  tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 2, xd);
  void* r[1];
  CHECK_OK(tpu_test_run_op("aten::put_", args, 4, NULL, data, &out, 1, r));
  float* g = r[0];
  CHECK(g[0] == 21 && g[1] == 2 && g[2] == 3 && g[3] == 44);
  free(r[0]);
}

static void test_mask_index_declines(void) {
  int64_t xd[1] = {3};
  tpu_hlo_type_t lt[1] = {tpu_hlo_type_make(TPU_DTYPE_BOOL, 1, xd)};
  tpu_lower_arg_t args[2] = {tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 1, xd),
                             {.kind = TPU_ARG_TENSORS, .num_tensors = 1}};
  tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 1, xd);
  char* text = NULL;
  size_t len;
  tpu_status_t s = tpu_lower_program_plain("aten::index.Tensor", args, 2, lt, &out, 1, &text, &len);
  CHECK(s != NULL && tpu_status_code(s) == TPU_STATUS_UNIMPLEMENTED);
  tpu_status_free(s);
}

/* masked_scatter_ with a broadcast mask; index_reduce amin without self. */
static void test_masked_scatter_and_index_reduce(void) {
  int64_t xd[2] = {2, 3}, md[1] = {3}, sd[1] = {5};
  float x[6] = {1, 2, 3, 4, 5, 6}, src[5] = {10, 20, 30, 40, 50};
  bool mask[3] = {true, false, true};
  tpu_lower_arg_t args[3] = {tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 2, xd),
                             tpu_test_tensor_arg(TPU_DTYPE_BOOL, 1, md),
                             tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 1, sd)};
  const void* data[3] = {x, mask, src};
  tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 2, xd);
  void* r[1];
  CHECK_OK(tpu_test_run_op("aten::masked_scatter_", args, 3, NULL, data, &out, 1, r));
  float* g = r[0];
  CHECK(g[0] == 10 && g[1] == 2 && g[2] == 20 && g[3] == 30 && g[4] == 5 && g[5] == 40);
  free(r[0]);
  /* index_reduce amin on dim 0 of [3, 2], index [2, 2, 0], include_self=False. */
  int64_t yd[2] = {3, 2}, id[1] = {3}, ud[2] = {3, 2};
  float y[6] = {100, 100, 100, 100, 100, 100}, u[6] = {5, -1, 3, 7, 9, 8};
  int64_t idx[3] = {2, 2, 0};
  tpu_lower_arg_t rargs[6] = {tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 2, yd), int_arg(0),
                              tpu_test_tensor_arg(TPU_DTYPE_INT64, 1, id),
                              tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 2, ud), str_arg("amin"),
                              bool_arg(false)};
  const void* rdata[3] = {y, idx, u};
  tpu_hlo_type_t rout = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 2, yd);
  CHECK_OK(tpu_test_run_op("aten::index_reduce", rargs, 6, NULL, rdata, &rout, 1, r));
  g = r[0];
  CHECK(g[0] == 9 && g[1] == 8 && g[2] == 100 && g[3] == 100 && g[4] == 3 && g[5] == -1);
  free(r[0]);
}

/* Indices into an empty axis decline (CPU's kernel raises its error);
 * an empty index into one still lowers. */
static void test_empty_axis_declines(void) {
  int64_t xd[2] = {0, 3}, id[1] = {1}, none[1] = {0}, od[2] = {1, 3}, eod[2] = {0, 3};
  tpu_lower_arg_t args[3] = {tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 2, xd), int_arg(0),
                             tpu_test_tensor_arg(TPU_DTYPE_INT64, 1, id)};
  tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 2, od);
  char* text = NULL;
  size_t len;
  tpu_status_t s = tpu_lower_program_plain("aten::index_select", args, 3, NULL, &out, 1, &text, &len);
  CHECK(s != NULL && tpu_status_code(s) == TPU_STATUS_UNIMPLEMENTED);
  tpu_status_free(s);
  args[2] = tpu_test_tensor_arg(TPU_DTYPE_INT64, 1, none);
  out = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 2, eod);
  CHECK_OK(tpu_lower_program_plain("aten::index_select", args, 3, NULL, &out, 1, &text, &len));
  free(text);
}

TPU_TEST_MAIN(TPU_TEST(test_masked_scatter_and_index_reduce), TPU_TEST(test_empty_axis_declines), TPU_TEST(test_gather), TPU_TEST(test_scatter_variants),
              TPU_TEST(test_scatter_reduce), TPU_TEST(test_index_tensor), TPU_TEST(test_index_tensor_with_none),
              TPU_TEST(test_index_put), TPU_TEST(test_index_dim_ops),
              TPU_TEST(test_take), TPU_TEST(test_put), TPU_TEST(test_mask_index_declines))
