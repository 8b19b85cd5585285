#include <string.h>

#include "../testing.h"
#include "lower_testing.h"

static tpu_lower_arg_t i_arg(int64_t v) { return (tpu_lower_arg_t){.kind = TPU_ARG_INT, .i = v}; }

/* x = arange(24) as [2,3,4] (float). */
static float g_x[24];
static const int64_t kDims[3] = {2, 3, 4};

static float at(int i, int j, int k) { return g_x[(i * 3 + j) * 4 + k]; }

static void test_permute_transpose_t(void) {
  tpu_lower_arg_t args[2] = {tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 3, kDims),
                             {.kind = TPU_ARG_INTS, .num_ints = 3, .ints = {2, 0, -2}}};
  int64_t od[3] = {4, 2, 3};
  tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 3, od);
  const void* data[1] = {g_x};
  void* r[1];
  CHECK_OK(tpu_test_run_op("aten::permute", args, 2, NULL, data, &out, 1, r));
  float* y = r[0];
  for (int k = 0; k < 4; k++)
    for (int i = 0; i < 2; i++)
      for (int j = 0; j < 3; j++) CHECK(y[(k * 2 + i) * 3 + j] == at(i, j, k));
  free(r[0]);
  tpu_lower_arg_t targs[3] = {args[0], i_arg(0), i_arg(-1)};
  int64_t td[3] = {4, 3, 2};
  out = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 3, td);
  CHECK_OK(tpu_test_run_op("aten::transpose.int", targs, 3, NULL, data, &out, 1, r));
  y = r[0];
  for (int k = 0; k < 4; k++)
    for (int j = 0; j < 3; j++)
      for (int i = 0; i < 2; i++) CHECK(y[(k * 3 + j) * 2 + i] == at(i, j, k));
  free(r[0]);
}

static void test_slice_select_split(void) {
  const void* data[1] = {g_x};
  void* r[3];
  /* x[:, :, -3::2] -> [2,3,2]: k = 1, 3. */
  tpu_lower_arg_t sargs[5] = {tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 3, kDims), i_arg(2), i_arg(-3),
                              {.kind = TPU_ARG_NONE}, i_arg(2)};
  int64_t sd[3] = {2, 3, 2};
  tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 3, sd);
  CHECK_OK(tpu_test_run_op("aten::slice.Tensor", sargs, 5, NULL, data, &out, 1, r));
  float* y = r[0];
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 3; j++)
      for (int m = 0; m < 2; m++) CHECK(y[(i * 3 + j) * 2 + m] == at(i, j, 1 + 2 * m));
  free(r[0]);
  /* x.select(1, -1) -> [2,4]. */
  tpu_lower_arg_t selargs[3] = {sargs[0], i_arg(1), i_arg(-1)};
  int64_t d24[2] = {2, 4};
  out = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 2, d24);
  CHECK_OK(tpu_test_run_op("aten::select.int", selargs, 3, NULL, data, &out, 1, r));
  y = r[0];
  for (int i = 0; i < 2; i++)
    for (int k = 0; k < 4; k++) CHECK(y[i * 4 + k] == at(i, 2, k));
  free(r[0]);
  /* split_with_sizes(x, [1, 3], dim=2). */
  tpu_lower_arg_t spargs[3] = {sargs[0], {.kind = TPU_ARG_INTS, .num_ints = 2, .ints = {1, 3}},
                               i_arg(2)};
  int64_t p0[3] = {2, 3, 1}, p1[3] = {2, 3, 3};
  tpu_hlo_type_t outs[2] = {tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 3, p0),
                            tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 3, p1)};
  CHECK_OK(tpu_test_run_op("aten::split_with_sizes", spargs, 3, NULL, data, outs, 2, r));
  float *a = r[0], *c = r[1];
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 3; j++) {
      CHECK(a[i * 3 + j] == at(i, j, 0));
      for (int k = 0; k < 3; k++) CHECK(c[(i * 3 + j) * 3 + k] == at(i, j, k + 1));
    }
  free(r[0]);
  free(r[1]);
  /* unbind(x, 0) -> two [3,4]. */
  tpu_lower_arg_t uargs[2] = {sargs[0], i_arg(0)};
  int64_t d34[2] = {3, 4};
  tpu_hlo_type_t uouts[2] = {tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 2, d34),
                             tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 2, d34)};
  CHECK_OK(tpu_test_run_op("aten::unbind.int", uargs, 2, NULL, data, uouts, 2, r));
  for (int u = 0; u < 2; u++) {
    float* piece = r[u];
    for (int j = 0; j < 3; j++)
      for (int k = 0; k < 4; k++) CHECK(piece[j * 4 + k] == at(u, j, k));
    free(r[u]);
  }
}

static void test_expand_and_to_copy(void) {
  int64_t d1[2] = {3, 1}, d34[2] = {3, 4};
  float v[3] = {1.5f, -2.25f, 3};
  const void* data[1] = {v};
  void* r[1];
  tpu_lower_arg_t eargs[2] = {tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 2, d1),
                              {.kind = TPU_ARG_INTS, .num_ints = 2, .ints = {-1, 4}}};
  tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 2, d34);
  CHECK_OK(tpu_test_run_op("aten::expand", eargs, 2, NULL, data, &out, 1, r));
  float* y = r[0];
  for (int j = 0; j < 3; j++)
    for (int k = 0; k < 4; k++) CHECK(y[j * 4 + k] == v[j]);
  free(r[0]);
  tpu_lower_arg_t cargs[2] = {tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 2, d1),
                              {.kind = TPU_ARG_DTYPE, .dtype = TPU_DTYPE_INT32}};
  out = tpu_hlo_type_make(TPU_DTYPE_INT32, 2, d1);
  CHECK_OK(tpu_test_run_op("aten::_to_copy", cargs, 2, NULL, data, &out, 1, r));
  int32_t* z = r[0];
  CHECK(z[0] == 1 && z[1] == -2 && z[2] == 3);
  free(r[0]);
}

/* Eager must never see these rows: PyTorch's view kernels keep aliasing. */
/* x.unfold(1, 2, 1) -> [2,2,4,2]: windows of j, j+1 (overlapping); and
 * x.unfold(-1, 3, 2) -> [2,3,1,3]: one window k = 0..2. */
static void test_unfold(void) {
  const void* data[1] = {g_x};
  void* r[1];
  tpu_lower_arg_t args[4] = {tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 3, kDims), i_arg(1), i_arg(2),
                             i_arg(1)};
  int64_t od[4] = {2, 2, 4, 2};
  tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 4, od);
  CHECK_OK(tpu_test_run_op("aten::unfold", args, 4, NULL, data, &out, 1, r));
  float* y = r[0];
  for (int i = 0; i < 2; i++)
    for (int w = 0; w < 2; w++)
      for (int k = 0; k < 4; k++)
        for (int e = 0; e < 2; e++) CHECK(y[((i * 2 + w) * 4 + k) * 2 + e] == at(i, w + e, k));
  free(r[0]);
  tpu_lower_arg_t args2[4] = {args[0], i_arg(-1), i_arg(3), i_arg(2)};
  int64_t od2[4] = {2, 3, 1, 3};
  out = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 4, od2);
  CHECK_OK(tpu_test_run_op("aten::unfold", args2, 4, NULL, data, &out, 1, r));
  y = r[0];
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 3; j++)
      for (int e = 0; e < 3; e++) CHECK(y[(i * 3 + j) * 3 + e] == at(i, j, e));
  free(r[0]);
  /* an empty input: [1,0] unfold(0, 1, 2) -> [1,0,1] (fuzz seed 70051) */
  int64_t ed[2] = {1, 0}, eod[3] = {1, 0, 1};
  tpu_lower_arg_t args3[4] = {tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 2, ed), i_arg(0), i_arg(1),
                              i_arg(2)};
  out = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 3, eod);
  CHECK_OK(tpu_test_run_op("aten::unfold", args3, 4, NULL, data, &out, 1, r));
  free(r[0]);
}

/* _unsafe_view: a reshape, as view. */
static void test_unsafe_view(void) {
  int64_t d[2] = {2, 3}, od[3] = {3, 1, 2};
  tpu_lower_arg_t args[2] = {tpu_test_tensor_arg(TPU_DTYPE_INT32, 2, d),
                             {.kind = TPU_ARG_INTS, .num_ints = 3, .ints = {3, 1, 2}}};
  int32_t x[6] = {1, 2, 3, 4, 5, 6};
  const void* data[1] = {x};
  tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_INT32, 3, od);
  void* r[1];
  CHECK_OK(tpu_test_run_op("aten::_unsafe_view", args, 2, NULL, data, &out, 1, r));
  bool ok = memcmp(r[0], x, sizeof x) == 0;
  free(r[0]);
  CHECK(ok);
}

/* Graphs name ops "aten::resolve_conj": a value's resolve_conj is itself,
 * _conj its conjugate. */
static void test_conj_and_resolve_conj(void) {
  int64_t d[1] = {2};
  tpu_lower_arg_t args[1] = {tpu_test_tensor_arg(TPU_DTYPE_COMPLEX64, 1, d)};
  float x[4] = {1, 2, 3, -4}, conj[4] = {1, -2, 3, 4};
  const void* data[1] = {x};
  tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_COMPLEX64, 1, d);
  void* r[1];
  CHECK_OK(tpu_test_run_op("aten::resolve_conj", args, 1, NULL, data, &out, 1, r));
  CHECK(memcmp(r[0], x, sizeof x) == 0);
  free(r[0]);
  CHECK_OK(tpu_test_run_op("aten::_conj", args, 1, NULL, data, &out, 1, r));
  CHECK(memcmp(r[0], conj, sizeof conj) == 0);
  free(r[0]);
}

static void test_graph_only_rows_hidden_from_eager(void) {
  CHECK(tpu_lowering_find_row("aten::view") == NULL);
  CHECK(tpu_lowering_find("aten::permute") == NULL);
  CHECK(tpu_lowering_find_graph_row("aten::view") != NULL);
  CHECK(tpu_lowering_find_graph_row("aten::add.Tensor") == tpu_lowering_find_row("aten::add.Tensor"));
}

static void setup(void) {
  for (int i = 0; i < 24; i++) g_x[i] = (float)i;
}

TPU_TEST_MAIN(TPU_TEST(setup), TPU_TEST(test_permute_transpose_t), TPU_TEST(test_slice_select_split),
              TPU_TEST(test_expand_and_to_copy), TPU_TEST(test_unfold), TPU_TEST(test_unsafe_view),
              TPU_TEST(test_conj_and_resolve_conj), TPU_TEST(test_graph_only_rows_hidden_from_eager))
