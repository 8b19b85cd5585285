/* shape family: each lowering run on the CPU plugin against values worked
 * out by hand. */
#include "../testing.h"
#include "lower_testing.h"

/* cat of f32 and int64 into f32 along dim 1, skipping a legacy empty [0]. */
static void test_cat(void) {
  int64_t ad[2] = {2, 1}, bd[2] = {2, 2}, ed[1] = {0}, od[2] = {2, 3};
  float a[2] = {1, 2};
  int64_t bb[4] = {3, 4, 5, 6};
  tpu_hlo_type_t lt[3] = {tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 2, ad),
                          tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 1, ed),
                          tpu_hlo_type_make(TPU_DTYPE_INT64, 2, bd)};
  tpu_lower_arg_t args[2] = {{.kind = TPU_ARG_TENSORS, .num_tensors = 3}, int_arg(-1)};
  const void* data[3] = {a, NULL, bb};
  tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 2, od);
  void* r[1];
  CHECK_OK(tpu_test_run_op("aten::cat", args, 2, lt, data, &out, 1, r));
  float* g = r[0];
  CHECK(g[0] == 1 && g[1] == 3 && g[2] == 4 && g[3] == 2 && g[4] == 5 && g[5] == 6);
  free(r[0]);
}

static void test_flip_roll_repeat(void) {
  int64_t xd[2] = {2, 3};
  float x[6] = {1, 2, 3, 4, 5, 6};
  const void* data[1] = {x};
  tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 2, xd);
  void* r[1];
  int64_t fd[2] = {0, -1};
  tpu_lower_arg_t fargs[2] = {tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 2, xd), ints_arg(2, fd)};
  CHECK_OK(tpu_test_run_op("aten::flip", fargs, 2, NULL, data, &out, 1, r));
  float* g = r[0];
  for (int i = 0; i < 6; i++) CHECK(g[i] == 6 - i);
  free(r[0]);
  /* roll by -1 along dim 1: [2 3 1; 5 6 4]; flattened roll by 2: [5 6 1 2 3 4]. */
  int64_t sh[1] = {-1}, dm[1] = {1}, sh2[1] = {2};
  tpu_lower_arg_t rargs[3] = {fargs[0], ints_arg(1, sh), ints_arg(1, dm)};
  CHECK_OK(tpu_test_run_op("aten::roll", rargs, 3, NULL, data, &out, 1, r));
  g = r[0];
  CHECK(g[0] == 2 && g[1] == 3 && g[2] == 1 && g[3] == 5 && g[5] == 4);
  free(r[0]);
  rargs[1] = ints_arg(1, sh2);
  rargs[2] = ints_arg(0, NULL);
  CHECK_OK(tpu_test_run_op("aten::roll", rargs, 3, NULL, data, &out, 1, r));
  g = r[0];
  CHECK(g[0] == 5 && g[1] == 6 && g[2] == 1 && g[5] == 4);
  free(r[0]);
  /* repeat([2, 1, 2]) of [2, 3] -> [2, 2, 6]. */
  int64_t reps[3] = {2, 1, 2}, od[3] = {2, 2, 6};
  tpu_lower_arg_t pargs[2] = {fargs[0], ints_arg(3, reps)};
  tpu_hlo_type_t rout = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 3, od);
  CHECK_OK(tpu_test_run_op("aten::repeat", pargs, 2, NULL, data, &rout, 1, r));
  g = r[0];
  for (int a = 0; a < 2; a++)
    for (int i = 0; i < 2; i++)
      for (int j = 0; j < 6; j++) CHECK(g[(a * 2 + i) * 6 + j] == x[i * 3 + j % 3]);
  free(r[0]);
}

/* constant_pad_nd with a crop; reflection and replication pads. */
static void test_pads(void) {
  int64_t xd[2] = {2, 3};
  float x[6] = {1, 2, 3, 4, 5, 6};
  const void* data[2] = {x, NULL};
  void* r[1];
  int64_t pad[4] = {1, -1, 0, 1}, pd[2] = {3, 3};
  double v = 9;
  data[1] = &v;
  tpu_lower_arg_t cargs[3] = {tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 2, xd), ints_arg(4, pad),
                              tpu_test_scalar_arg(TPU_DTYPE_FLOAT64, true)};
  tpu_hlo_type_t cout = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 2, pd);
  CHECK_OK(tpu_test_run_op("aten::constant_pad_nd", cargs, 3, NULL, data, &cout, 1, r));
  float* g = r[0];
  float want[9] = {9, 1, 2, 9, 4, 5, 9, 9, 9};
  for (int i = 0; i < 9; i++) CHECK(g[i] == want[i]);
  free(r[0]);
  /* reflection_pad1d (2, 1) on rows of 3: [3 2 1 2 3 2]. */
  int64_t rp[2] = {2, 1}, rd[2] = {2, 6};
  tpu_lower_arg_t pargs[2] = {cargs[0], ints_arg(2, rp)};
  tpu_hlo_type_t rout = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 2, rd);
  CHECK_OK(tpu_test_run_op("aten::reflection_pad1d", pargs, 2, NULL, data, &rout, 1, r));
  g = r[0];
  float want_r[6] = {3, 2, 1, 2, 3, 2};
  for (int i = 0; i < 6; i++) CHECK(g[i] == want_r[i] && g[6 + i] == want_r[i] + 3);
  free(r[0]);
  CHECK_OK(tpu_test_run_op("aten::replication_pad1d", pargs, 2, NULL, data, &rout, 1, r));
  g = r[0];
  float want_c[6] = {1, 1, 1, 2, 3, 3};
  for (int i = 0; i < 6; i++) CHECK(g[i] == want_c[i]);
  free(r[0]);
  /* Backward of reflection_pad1d (2, 1) with ones: input 0 gets 1, input 1
   * gets 3 (itself and both reflections), input 2 gets 2. */
  float ones[12];
  for (int i = 0; i < 12; i++) ones[i] = 1;
  tpu_lower_arg_t bargs[3] = {tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 2, rd),
                              tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 2, xd), ints_arg(2, rp)};
  const void* bdata[2] = {ones, x};
  tpu_hlo_type_t bout = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 2, xd);
  CHECK_OK(tpu_test_run_op("aten::reflection_pad1d_backward", bargs, 3, NULL, bdata, &bout, 1, r));
  g = r[0];
  CHECK(g[0] == 1 && g[1] == 3 && g[2] == 2 && g[3] == 1 && g[4] == 3 && g[5] == 2);
  free(r[0]);
  /* replication_pad2d (1, 0, 0, 1) backward: column 0 gets 2 per row, the
   * last row gets doubled. */
  int64_t p2[4] = {1, 0, 0, 1}, gd[3] = {1, 3, 4}, sd[3] = {1, 2, 3};
  tpu_lower_arg_t b2[3] = {tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 3, gd),
                           tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 3, sd), ints_arg(4, p2)};
  tpu_hlo_type_t b2out = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 3, sd);
  CHECK_OK(tpu_test_run_op("aten::replication_pad2d_backward", b2, 3, NULL, bdata, &b2out, 1, r));
  g = r[0];
  CHECK(g[0] == 2 && g[1] == 1 && g[2] == 1 && g[3] == 4 && g[4] == 2 && g[5] == 2);
  free(r[0]);
}

static void test_tril_triu(void) {
  int64_t xd[2] = {3, 3};
  int64_t x[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  const void* data[1] = {x};
  tpu_lower_arg_t args[2] = {tpu_test_tensor_arg(TPU_DTYPE_INT64, 2, xd), int_arg(-1)};
  tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_INT64, 2, xd);
  void* r[1];
  CHECK_OK(tpu_test_run_op("aten::tril", args, 2, NULL, data, &out, 1, r));
  int64_t* g = r[0];
  int64_t want[9] = {0, 0, 0, 4, 0, 0, 7, 8, 0};
  for (int i = 0; i < 9; i++) CHECK(g[i] == want[i]);
  free(r[0]);
  args[1] = int_arg(1);
  CHECK_OK(tpu_test_run_op("aten::triu_", args, 2, NULL, data, &out, 1, r));
  g = r[0];
  int64_t want_u[9] = {0, 2, 3, 0, 0, 6, 0, 0, 0};
  for (int i = 0; i < 9; i++) CHECK(g[i] == want_u[i]);
  free(r[0]);
}

static void test_stack(void) {
  void* r[1];
  int64_t ad[1] = {2}, od[2] = {2, 2};
  float a[2] = {1, 2}, b[2] = {3, 4};
  tpu_hlo_type_t lt[2] = {tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 1, ad),
                          tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 1, ad)};
  tpu_lower_arg_t sargs[2] = {{.kind = TPU_ARG_TENSORS, .num_tensors = 2}, int_arg(1)};
  const void* sdata[2] = {a, b};
  tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 2, od);
  CHECK_OK(tpu_test_run_op("aten::stack", sargs, 2, lt, sdata, &out, 1, r));
  float* g = r[0];
  CHECK(g[0] == 1 && g[1] == 3 && g[2] == 2 && g[3] == 4);
  free(r[0]);
}

/* select/slice backward and scatter: writes into one slice. */
static void test_slice_writes(void) {
  int64_t xd[2] = {2, 5}, gd[1] = {2}, sd[2] = {2, 2}, sizes[2] = {2, 5};
  float x[10] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, gsel[2] = {7, 8}, gsl[4] = {1, 2, 3, 4};
  tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 2, xd);
  void* r[1];
  tpu_lower_arg_t a1[4] = {tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 1, gd), ints_arg(2, sizes),
                           int_arg(1), int_arg(-2)};
  const void* d1[1] = {gsel};
  CHECK_OK(tpu_test_run_op("aten::select_backward", a1, 4, NULL, d1, &out, 1, r));
  float* g = r[0];
  for (int i = 0; i < 10; i++) CHECK(g[i] == (i == 3 ? 7 : i == 8 ? 8 : 0));
  free(r[0]);
  /* x[:, 1:5:2] backward. */
  tpu_lower_arg_t a2[6] = {tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 2, sd), ints_arg(2, sizes),
                           int_arg(1), int_arg(1), int_arg(5), int_arg(2)};
  const void* d2[1] = {gsl};
  CHECK_OK(tpu_test_run_op("aten::slice_backward", a2, 6, NULL, d2, &out, 1, r));
  g = r[0];
  float want2[10] = {0, 1, 0, 2, 0, 0, 3, 0, 4, 0};
  for (int i = 0; i < 10; i++) CHECK(g[i] == want2[i]);
  free(r[0]);
  tpu_lower_arg_t a3[6] = {tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 2, xd),
                           tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 2, sd), int_arg(1),
                           int_arg(-4), {.kind = TPU_ARG_NONE}, int_arg(2)};
  const void* d3[2] = {x, gsl};
  CHECK_OK(tpu_test_run_op("aten::slice_scatter", a3, 6, NULL, d3, &out, 1, r));
  g = r[0];
  float want3[10] = {0, 1, 2, 2, 4, 5, 3, 7, 4, 9};
  for (int i = 0; i < 10; i++) CHECK(g[i] == want3[i]);
  free(r[0]);
  tpu_lower_arg_t a4[4] = {tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 2, xd),
                           tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 1, gd), int_arg(1), int_arg(0)};
  const void* d4[2] = {x, gsel};
  CHECK_OK(tpu_test_run_op("aten::select_scatter", a4, 4, NULL, d4, &out, 1, r));
  g = r[0];
  for (int i = 0; i < 10; i++) CHECK(g[i] == (i == 0 ? 7 : i == 5 ? 8 : i));
  free(r[0]);
}

/* diagonal_scatter on a [3, 4] with offset 1 and on dims (1, 0) with -1. */
static void test_diagonal_scatter(void) {
  int64_t xd[2] = {3, 4}, sd[1] = {3};
  float x[12] = {0}, src[3] = {1, 2, 3};
  tpu_lower_arg_t args[5] = {tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 2, xd),
                             tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 1, sd), int_arg(1), int_arg(0),
                             int_arg(1)};
  const void* data[2] = {x, src};
  tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 2, xd);
  void* r[1];
  CHECK_OK(tpu_test_run_op("aten::diagonal_scatter", args, 5, NULL, data, &out, 1, r));
  float* g = r[0];
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 4; j++) CHECK(g[i * 4 + j] == (j == i + 1 ? src[i] : 0));
  free(r[0]);
  /* dim1 = 1 (cols), dim2 = 0 (rows), offset -1: element k sits at col
   * k + 1, row k (torch.diagonal_scatter agrees). */
  args[2] = int_arg(-1);
  args[3] = int_arg(1);
  args[4] = int_arg(0);
  CHECK_OK(tpu_test_run_op("aten::diagonal_scatter", args, 5, NULL, data, &out, 1, r));
  g = r[0];
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 4; j++) CHECK(g[i * 4 + j] == (j == i + 1 ? src[i] : 0));
  free(r[0]);
}

/* unfold_backward on [2, 3] along dim 1, size 2, step 1 (overlapping):
 * grad_in [2, 2, 2]; the middle column gets two contributions. */
static void test_unfold_backward(void) {
  int64_t gd[3] = {2, 2, 2}, sizes[2] = {2, 3};
  float g[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  tpu_lower_arg_t args[5] = {tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 3, gd), ints_arg(2, sizes),
                             int_arg(1), int_arg(2), int_arg(1)};
  const void* data[1] = {g};
  tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 2, sizes);
  void* r[1];
  CHECK_OK(tpu_test_run_op("aten::unfold_backward", args, 5, NULL, data, &out, 1, r));
  float* o = r[0];
  CHECK(o[0] == 1 && o[1] == 5 && o[2] == 4 && o[3] == 5 && o[4] == 13 && o[5] == 8);
  free(r[0]);
}

TPU_TEST_MAIN(TPU_TEST(test_unfold_backward), TPU_TEST(test_diagonal_scatter), TPU_TEST(test_slice_writes), TPU_TEST(test_cat), TPU_TEST(test_flip_roll_repeat), TPU_TEST(test_pads),
              TPU_TEST(test_tril_triu), TPU_TEST(test_stack))
