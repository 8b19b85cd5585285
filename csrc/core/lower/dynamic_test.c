/* dynamic family: padded results and counts run on the CPU plugin against
 * values worked out by hand. */
#include <math.h>

#include "../testing.h"
#include "lower_testing.h"

static void free_all(void** r, int n) {
  for (int i = 0; i < n; i++) free(r[i]);
}

/* The nonzeros (NaN counts) in row-major order, their indices laid out
 * column-major as CPU's result: dim j of the i-th at j * count + i, zeros
 * after the last column. */
static void test_nonzero_padded(void) {
  int64_t xd[2] = {2, 3}, od[1] = {12};
  float x[6] = {0, 1, 0, 2, 0, NAN};
  tpu_lower_arg_t args[1] = {tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 2, xd)};
  const void* data[1] = {x};
  tpu_hlo_type_t outs[2] = {tpu_hlo_type_make(TPU_DTYPE_INT64, 1, od),
                            tpu_hlo_type_scalar(TPU_DTYPE_INT64)};
  void* r[2];
  CHECK_OK(tpu_test_run_op("torchtpu::nonzero_padded", args, 1, NULL, data, outs, 2, r));
  int64_t* idx = r[0];
  CHECK_EQ(*(int64_t*)r[1], 3);
  /* (0, 1), (1, 0), (1, 2): rows 0 1 1, then columns 1 0 2 */
  int64_t want[6] = {0, 1, 1, 1, 0, 2};
  for (int i = 0; i < 6; i++) CHECK_EQ(idx[i], want[i]);
  for (int i = 6; i < 12; i++) CHECK_EQ(idx[i], 0);
  free_all(r, 2);
}

/* Rank 3 and rank 1: every column starts at its multiple of the count. */
static void test_nonzero_padded_columns(void) {
  int64_t xd[3] = {2, 1, 2}, od[1] = {12};
  int32_t x[4] = {5, 0, 0, 7};
  tpu_lower_arg_t args[1] = {tpu_test_tensor_arg(TPU_DTYPE_INT32, 3, xd)};
  const void* data[1] = {x};
  tpu_hlo_type_t outs[2] = {tpu_hlo_type_make(TPU_DTYPE_INT64, 1, od),
                            tpu_hlo_type_scalar(TPU_DTYPE_INT64)};
  void* r[2];
  CHECK_OK(tpu_test_run_op("torchtpu::nonzero_padded", args, 1, NULL, data, outs, 2, r));
  int64_t* idx = r[0];
  CHECK_EQ(*(int64_t*)r[1], 2);
  /* (0, 0, 0), (1, 0, 1) */
  int64_t want[12] = {0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0};
  for (int i = 0; i < 12; i++) CHECK_EQ(idx[i], want[i]);
  free_all(r, 2);
  int64_t vd[1] = {4}, vod[1] = {4};
  args[0] = tpu_test_tensor_arg(TPU_DTYPE_INT32, 1, vd);
  outs[0] = tpu_hlo_type_make(TPU_DTYPE_INT64, 1, vod);
  CHECK_OK(tpu_test_run_op("torchtpu::nonzero_padded", args, 1, NULL, data, outs, 2, r));
  idx = r[0];
  CHECK_EQ(*(int64_t*)r[1], 2);
  CHECK(idx[0] == 0 && idx[1] == 3 && idx[2] == 0 && idx[3] == 0);
  free_all(r, 2);
}

/* A scalar has one (empty) index when nonzero; an empty tensor none. */
static void test_nonzero_padded_scalar_and_empty(void) {
  int64_t none_d[1] = {0}, ed[2] = {0, 3};
  bool v = true;
  tpu_lower_arg_t args[1] = {tpu_test_tensor_arg(TPU_DTYPE_BOOL, 0, NULL)};
  const void* data[1] = {&v};
  tpu_hlo_type_t outs[2] = {tpu_hlo_type_make(TPU_DTYPE_INT64, 1, none_d),
                            tpu_hlo_type_scalar(TPU_DTYPE_INT64)};
  void* r[2];
  CHECK_OK(tpu_test_run_op("torchtpu::nonzero_padded", args, 1, NULL, data, outs, 2, r));
  CHECK_EQ(*(int64_t*)r[1], 1);
  free_all(r, 2);
  float none[1] = {0};
  args[0] = tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 2, ed);
  data[0] = none;
  outs[0] = tpu_hlo_type_make(TPU_DTYPE_INT64, 1, none_d);
  CHECK_OK(tpu_test_run_op("torchtpu::nonzero_padded", args, 1, NULL, data, outs, 2, r));
  CHECK_EQ(*(int64_t*)r[1], 0);
  free_all(r, 2);
}

/* nonzero_static pads with fill_value past the count, or truncates. */
static void test_nonzero_static(void) {
  int64_t xd[1] = {5}, od[2] = {4, 1};
  int64_t x[5] = {0, 3, 0, -4, 5};
  tpu_lower_arg_t args[3] = {tpu_test_tensor_arg(TPU_DTYPE_INT64, 1, xd), int_arg(4), int_arg(-1)};
  const void* data[1] = {x};
  tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_INT64, 2, od);
  void* r[1];
  CHECK_OK(tpu_test_run_op("aten::nonzero_static", args, 3, NULL, data, &out, 1, r));
  int64_t* g = r[0];
  CHECK(g[0] == 1 && g[1] == 3 && g[2] == 4 && g[3] == -1);
  free(r[0]);
  od[0] = 7;
  args[1] = int_arg(7);
  out = tpu_hlo_type_make(TPU_DTYPE_INT64, 2, od);
  CHECK_OK(tpu_test_run_op("aten::nonzero_static", args, 3, NULL, data, &out, 1, r));
  g = r[0];
  CHECK(g[0] == 1 && g[1] == 3 && g[2] == 4 && g[3] == -1 && g[6] == -1);
  free(r[0]);
  od[0] = 2;
  args[1] = int_arg(2);
  out = tpu_hlo_type_make(TPU_DTYPE_INT64, 2, od);
  CHECK_OK(tpu_test_run_op("aten::nonzero_static", args, 3, NULL, data, &out, 1, r));
  g = r[0];
  CHECK(g[0] == 1 && g[1] == 3);
  free(r[0]);
}

/* masked_select with the mask broadcast over rows. */
static void test_masked_select_padded(void) {
  int64_t xd[2] = {2, 3}, md[1] = {3}, od[1] = {6};
  float x[6] = {1, 2, 3, 4, 5, 6};
  bool mask[3] = {true, false, true};
  tpu_lower_arg_t args[2] = {tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 2, xd),
                             tpu_test_tensor_arg(TPU_DTYPE_BOOL, 1, md)};
  const void* data[2] = {x, mask};
  tpu_hlo_type_t outs[2] = {tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 1, od),
                            tpu_hlo_type_scalar(TPU_DTYPE_INT64)};
  void* r[2];
  CHECK_OK(tpu_test_run_op("torchtpu::masked_select_padded", args, 2, NULL, data, outs, 2, r));
  float* g = r[0];
  CHECK_EQ(*(int64_t*)r[1], 4);
  CHECK(g[0] == 1 && g[1] == 3 && g[2] == 4 && g[3] == 6);
  free_all(r, 2);
}

/* Sorted unique: NaNs last and each its own value (in input order). */
static void test_unique_sorted(void) {
  int64_t xd[2] = {2, 4}, nd[1] = {8};
  float x[8] = {3, 1, NAN, 1, 2, 3, NAN, 0};
  tpu_lower_arg_t args[4] = {tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 2, xd), bool_arg(false),
                             bool_arg(true), bool_arg(true)};
  const void* data[1] = {x};
  tpu_hlo_type_t outs[4] = {tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 1, nd),
                            tpu_hlo_type_make(TPU_DTYPE_INT64, 2, xd),
                            tpu_hlo_type_make(TPU_DTYPE_INT64, 1, nd),
                            tpu_hlo_type_scalar(TPU_DTYPE_INT64)};
  void* r[4];
  CHECK_OK(tpu_test_run_op("torchtpu::unique_padded", args, 4, NULL, data, outs, 4, r));
  float* v = r[0];
  int64_t *inv = r[1], *cnt = r[2];
  CHECK_EQ(*(int64_t*)r[3], 6);
  CHECK(v[0] == 0 && v[1] == 1 && v[2] == 2 && v[3] == 3 && isnan(v[4]) && isnan(v[5]));
  int64_t want_inv[8] = {3, 1, 4, 1, 2, 3, 5, 0}, want_cnt[6] = {1, 2, 1, 2, 1, 1};
  for (int i = 0; i < 8; i++) CHECK_EQ(inv[i], want_inv[i]);
  for (int i = 0; i < 6; i++) CHECK_EQ(cnt[i], want_cnt[i]);
  free_all(r, 4);
}

/* unique_consecutive: runs in input order; inverse not asked for is [0]. */
static void test_unique_consecutive(void) {
  int64_t xd[1] = {8}, zd[1] = {0};
  int64_t x[8] = {1, 1, 2, 2, 2, 1, 3, 3};
  tpu_lower_arg_t args[4] = {tpu_test_tensor_arg(TPU_DTYPE_INT64, 1, xd), bool_arg(true),
                             bool_arg(false), bool_arg(true)};
  const void* data[1] = {x};
  tpu_hlo_type_t outs[4] = {tpu_hlo_type_make(TPU_DTYPE_INT64, 1, xd),
                            tpu_hlo_type_make(TPU_DTYPE_INT64, 1, zd),
                            tpu_hlo_type_make(TPU_DTYPE_INT64, 1, xd),
                            tpu_hlo_type_scalar(TPU_DTYPE_INT64)};
  void* r[4];
  CHECK_OK(tpu_test_run_op("torchtpu::unique_padded", args, 4, NULL, data, outs, 4, r));
  int64_t *v = r[0], *cnt = r[2];
  CHECK_EQ(*(int64_t*)r[3], 4);
  CHECK(v[0] == 1 && v[1] == 2 && v[2] == 1 && v[3] == 3);
  CHECK(cnt[0] == 2 && cnt[1] == 3 && cnt[2] == 1 && cnt[3] == 2);
  free_all(r, 4);
}

/* unique_dim over rows (dim 0) and columns (dim 1), sorted
 * lexicographically; consecutive runs of bool rows. */
static void test_unique_dim(void) {
  int64_t xd[2] = {3, 2}, sd[1] = {3};
  int64_t x[6] = {2, 1, 1, 5, 2, 1};
  tpu_lower_arg_t args[3] = {tpu_test_tensor_arg(TPU_DTYPE_INT64, 2, xd), int_arg(0),
                             bool_arg(false)};
  const void* data[1] = {x};
  tpu_hlo_type_t outs[4] = {tpu_hlo_type_make(TPU_DTYPE_INT64, 2, xd),
                            tpu_hlo_type_make(TPU_DTYPE_INT64, 1, sd),
                            tpu_hlo_type_make(TPU_DTYPE_INT64, 1, sd),
                            tpu_hlo_type_scalar(TPU_DTYPE_INT64)};
  void* r[4];
  CHECK_OK(tpu_test_run_op("torchtpu::unique_dim_padded", args, 3, NULL, data, outs, 4, r));
  int64_t *v = r[0], *inv = r[1], *cnt = r[2];
  CHECK_EQ(*(int64_t*)r[3], 2);
  CHECK(v[0] == 1 && v[1] == 5 && v[2] == 2 && v[3] == 1);
  CHECK(inv[0] == 1 && inv[1] == 0 && inv[2] == 1 && cnt[0] == 1 && cnt[1] == 2);
  free_all(r, 4);
  /* Columns of [[1, 0, 1], [2, 3, 2]]: (1,2), (0,3), (1,2). */
  int64_t yd[2] = {2, 3};
  int64_t y[6] = {1, 0, 1, 2, 3, 2};
  args[0] = tpu_test_tensor_arg(TPU_DTYPE_INT64, 2, yd);
  args[1] = int_arg(-1);
  data[0] = y;
  outs[0] = tpu_hlo_type_make(TPU_DTYPE_INT64, 2, yd);
  CHECK_OK(tpu_test_run_op("torchtpu::unique_dim_padded", args, 3, NULL, data, outs, 4, r));
  v = r[0], inv = r[1], cnt = r[2];
  CHECK_EQ(*(int64_t*)r[3], 2);
  CHECK(v[0] == 0 && v[1] == 1 && v[3] == 3 && v[4] == 2);
  CHECK(inv[0] == 1 && inv[1] == 0 && inv[2] == 1 && cnt[0] == 1 && cnt[1] == 2);
  free_all(r, 4);
  /* Consecutive bool rows: (1,0), (1,0), (0,1) -> 2 runs. */
  bool z[6] = {true, false, true, false, false, true};
  args[0] = tpu_test_tensor_arg(TPU_DTYPE_BOOL, 2, xd);
  args[1] = int_arg(0);
  args[2] = bool_arg(true);
  data[0] = z;
  outs[0] = tpu_hlo_type_make(TPU_DTYPE_BOOL, 2, xd);
  CHECK_OK(tpu_test_run_op("torchtpu::unique_dim_padded", args, 3, NULL, data, outs, 4, r));
  bool* bv = r[0];
  inv = r[1], cnt = r[2];
  CHECK_EQ(*(int64_t*)r[3], 2);
  CHECK(bv[0] && !bv[1] && !bv[2] && bv[3]);
  CHECK(inv[0] == 0 && inv[1] == 0 && inv[2] == 1 && cnt[0] == 2 && cnt[1] == 1);
  free_all(r, 4);
}

/* Compaction over lengths that exercise every odd/even case of the prefix
 * sum: position k keeps when k % 3 != 1. */
static void test_masked_select_lengths(void) {
  for (int64_t n = 1; n <= 70; n++) {
    int64_t x[70];
    bool mask[70];
    int64_t want = 0;
    for (int64_t k = 0; k < n; k++) x[k] = k, mask[k] = k % 3 != 1, want += mask[k];
    tpu_lower_arg_t args[2] = {tpu_test_tensor_arg(TPU_DTYPE_INT64, 1, &n),
                               tpu_test_tensor_arg(TPU_DTYPE_BOOL, 1, &n)};
    const void* data[2] = {x, mask};
    tpu_hlo_type_t outs[2] = {tpu_hlo_type_make(TPU_DTYPE_INT64, 1, &n),
                              tpu_hlo_type_scalar(TPU_DTYPE_INT64)};
    void* r[2];
    CHECK_OK(tpu_test_run_op("torchtpu::masked_select_padded", args, 2, NULL, data, outs, 2, r));
    CHECK_EQ(*(int64_t*)r[1], want);
    int64_t* g = r[0];
    for (int64_t k = 0, j = 0; k < n; k++)
      if (mask[k]) CHECK_EQ(g[j++], k);
    free_all(r, 2);
  }
}

TPU_TEST_MAIN(TPU_TEST(test_nonzero_padded), TPU_TEST(test_nonzero_padded_columns),
              TPU_TEST(test_masked_select_lengths), TPU_TEST(test_nonzero_padded_scalar_and_empty),
              TPU_TEST(test_nonzero_static), TPU_TEST(test_masked_select_padded),
              TPU_TEST(test_unique_sorted), TPU_TEST(test_unique_consecutive),
              TPU_TEST(test_unique_dim))
