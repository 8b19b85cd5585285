/* Comparison, logical, bitwise, min / max and clamp lowerings (compare.c)
 * run on the XLA CPU plugin, checked against values PyTorch's CPU kernels
 * give. */
#include "pointwise_testing.h"

static void test_comparisons_promote(void) {
  int32_t a[N] = {1, 2, 3, 4, -1, 0, 2, 3};
  tpu_lower_arg_t args[2] = {tensor(TPU_DTYPE_INT32), tpu_test_scalar_arg(TPU_DTYPE_FLOAT64, true)};
  double s = 2.5;
  const void* data[2] = {a, &s};
  void* result[1];
  /* int32 < 2.5 compares in float32, not after truncating 2.5 to 2. */
  CHECK_OK(run("aten::lt.Scalar", args, 2, data, TPU_DTYPE_BOOL, result));
  bool want[N] = {1, 1, 0, 0, 1, 1, 1, 0};
  CHECK(memcmp(result[0], want, sizeof want) == 0);
  free(result[0]);
  /* uint8 vs int8 compares in int16 (200 > -1). */
  uint8_t u[N] = {200, 0, 1, 255, 5, 5, 0, 128};
  int8_t i8[N] = {-1, 0, 2, -128, 5, 6, -1, 127};
  tpu_lower_arg_t margs[2] = {tensor(TPU_DTYPE_UINT8), tensor(TPU_DTYPE_INT8)};
  const void* mdata[2] = {u, i8};
  CHECK_OK(run("aten::gt.Tensor", margs, 2, mdata, TPU_DTYPE_BOOL, result));
  bool gw[N] = {1, 0, 0, 1, 0, 0, 1, 1};
  CHECK(memcmp(result[0], gw, sizeof gw) == 0);
  free(result[0]);
  /* eq_ on a float tensor writes 1.0 / 0.0; NaN != NaN. */
  float f[N] = {1, NAN, 3, 4, 5, 6, 7, 8}, g[N] = {1, NAN, 0, 4, 0, 6, 0, 8};
  tpu_lower_arg_t fargs[2] = {tensor(TPU_DTYPE_FLOAT32), tensor(TPU_DTYPE_FLOAT32)};
  const void* fdata[2] = {f, g};
  CHECK_OK(run("aten::eq_.Tensor", fargs, 2, fdata, TPU_DTYPE_FLOAT32, result));
  float ew[N] = {1, 0, 0, 1, 0, 1, 0, 1};
  CHECK(memcmp(result[0], ew, sizeof ew) == 0);
  free(result[0]);
  const char* ops[4] = {"aten::ne.Tensor", "aten::le.Tensor", "aten::ge.Tensor", "aten::gt.Tensor"};
  bool expect[4][N] = {{0, 1, 1, 0, 1, 0, 1, 0}, {1, 0, 0, 1, 0, 1, 0, 1},
                       {1, 0, 1, 1, 1, 1, 1, 1}, {0, 0, 1, 0, 1, 0, 1, 0}};
  for (int k = 0; k < 4; k++) {
    CHECK_OK(run(ops[k], fargs, 2, fdata, TPU_DTYPE_BOOL, result));
    CHECK(memcmp(result[0], expect[k], N) == 0);
    free(result[0]);
  }
}

static void test_min_max_nan(void) {
  float a[N] = {NAN, 1, 2, NAN, -0.5f, 3, INFINITY, 0};
  float b[N] = {1, NAN, 5, NAN, -1, 3, 2, -INFINITY};
  tpu_lower_arg_t args[2] = {tensor(TPU_DTYPE_FLOAT32), tensor(TPU_DTYPE_FLOAT32)};
  const void* data[2] = {a, b};
  void* result[1];
  CHECK_OK(run("aten::maximum", args, 2, data, TPU_DTYPE_FLOAT32, result));
  float* r = result[0];
  CHECK(isnan(r[0]) && isnan(r[1]) && r[2] == 5 && isnan(r[3]) && r[4] == -0.5f && r[6] == INFINITY);
  free(result[0]);
  CHECK_OK(run("aten::minimum", args, 2, data, TPU_DTYPE_FLOAT32, result));
  r = result[0];
  CHECK(isnan(r[0]) && isnan(r[1]) && r[2] == 2 && r[4] == -1 && r[7] == -INFINITY);
  free(result[0]);
  CHECK_OK(run("aten::fmax", args, 2, data, TPU_DTYPE_FLOAT32, result));
  r = result[0];
  CHECK(r[0] == 1 && r[1] == 1 && r[2] == 5 && isnan(r[3]));
  free(result[0]);
  CHECK_OK(run("aten::fmin", args, 2, data, TPU_DTYPE_FLOAT32, result));
  r = result[0];
  CHECK(r[0] == 1 && r[1] == 1 && r[2] == 2 && isnan(r[3]) && r[4] == -1);
  free(result[0]);
}

static void test_clamp(void) {
  float x[N] = {-3, -1, 0, 0.5f, 1, 2, NAN, 10};
  /* clamp(x, min=-1.5) with no max. */
  tpu_lower_arg_t args[3] = {tensor(TPU_DTYPE_FLOAT32), tpu_test_scalar_arg(TPU_DTYPE_FLOAT64, true),
                             {.kind = TPU_ARG_NONE}};
  double lo = -1.5;
  const void* data[2] = {x, &lo};
  void* result[1];
  CHECK_OK(run("aten::clamp", args, 3, data, TPU_DTYPE_FLOAT32, result));
  float* r = result[0];
  CHECK(r[0] == -1.5f && r[1] == -1 && r[7] == 10 && isnan(r[6]));
  free(result[0]);
  /* clamp.Tensor with a broadcast rank-0... min and max tensors. */
  float mn[N] = {0, 0, 0, 0, 0, 0, 0, NAN}, mx[N] = {1, 1, 1, 1, 1, 1, 1, 1};
  tpu_lower_arg_t targs[3] = {tensor(TPU_DTYPE_FLOAT32), tensor(TPU_DTYPE_FLOAT32),
                              tensor(TPU_DTYPE_FLOAT32)};
  const void* tdata[3] = {x, mn, mx};
  CHECK_OK(run("aten::clamp.Tensor", targs, 3, tdata, TPU_DTYPE_FLOAT32, result));
  r = result[0];
  CHECK(r[0] == 0 && r[3] == 0.5f && r[5] == 1 && isnan(r[6]) && isnan(r[7]));
  free(result[0]);
  /* clamp_max on int64 with a python int; min > max gives max. */
  int64_t xi[N] = {-5, 0, 5, 10, 15, 20, 25, 30};
  tpu_lower_arg_t iargs[2] = {tensor(TPU_DTYPE_INT64), tpu_test_scalar_arg(TPU_DTYPE_INT64, true)};
  int64_t hi = 12;
  const void* idata[2] = {xi, &hi};
  CHECK_OK(run("aten::clamp_max", iargs, 2, idata, TPU_DTYPE_INT64, result));
  int64_t want[N] = {-5, 0, 5, 10, 12, 12, 12, 12};
  CHECK(memcmp(result[0], want, sizeof want) == 0);
  free(result[0]);
  CHECK_OK(run("aten::clamp_min_", iargs, 2, idata, TPU_DTYPE_INT64, result));
  CHECK(((int64_t*)result[0])[0] == 12 && ((int64_t*)result[0])[7] == 30);
  free(result[0]);
}

static void test_logical_and_bitwise(void) {
  float a[N] = {0, 1, NAN, -0.0f, 2, 0, 3, 0};
  int32_t b[N] = {0, 0, 1, 1, 5, 3, 0, -1};
  tpu_lower_arg_t args[2] = {tensor(TPU_DTYPE_FLOAT32), tensor(TPU_DTYPE_INT32)};
  const void* data[2] = {a, b};
  void* result[1];
  const char* ops[3] = {"aten::logical_and", "aten::logical_or", "aten::logical_xor"};
  bool want[3][N] = {{0, 0, 1, 0, 1, 0, 0, 0}, {0, 1, 1, 1, 1, 1, 1, 1}, {0, 1, 0, 1, 0, 1, 1, 1}};
  for (int k = 0; k < 3; k++) {
    CHECK_OK(run(ops[k], args, 2, data, TPU_DTYPE_BOOL, result));
    CHECK(memcmp(result[0], want[k], N) == 0);
    free(result[0]);
  }
  CHECK_OK(run("aten::logical_not", args, 1, data, TPU_DTYPE_BOOL, result));
  bool nw[N] = {1, 0, 0, 1, 0, 1, 0, 1};
  CHECK(memcmp(result[0], nw, N) == 0);
  free(result[0]);
  int64_t x[N] = {0xF0, -1, 12, 7, 0, 1, 2, 3};
  tpu_lower_arg_t iargs[2] = {tensor(TPU_DTYPE_INT64), tpu_test_scalar_arg(TPU_DTYPE_INT64, true)};
  int64_t mask = 0x3C;
  const void* idata[2] = {x, &mask};
  CHECK_OK(run("aten::bitwise_and.Scalar", iargs, 2, idata, TPU_DTYPE_INT64, result));
  for (int i = 0; i < N; i++) CHECK(((int64_t*)result[0])[i] == (x[i] & 0x3C));
  free(result[0]);
  CHECK_OK(run("aten::bitwise_xor.Scalar", iargs, 2, idata, TPU_DTYPE_INT64, result));
  for (int i = 0; i < N; i++) CHECK(((int64_t*)result[0])[i] == (x[i] ^ 0x3C));
  free(result[0]);
  CHECK_OK(run("aten::bitwise_not", iargs, 1, idata, TPU_DTYPE_INT64, result));
  for (int i = 0; i < N; i++) CHECK(((int64_t*)result[0])[i] == ~x[i]);
  free(result[0]);
  bool p[N] = {0, 0, 1, 1, 0, 1, 0, 1}, q[N] = {0, 1, 0, 1, 1, 1, 0, 0};
  tpu_lower_arg_t bargs[2] = {tensor(TPU_DTYPE_BOOL), tensor(TPU_DTYPE_BOOL)};
  const void* bdata[2] = {p, q};
  CHECK_OK(run("aten::bitwise_or.Tensor", bargs, 2, bdata, TPU_DTYPE_BOOL, result));
  for (int i = 0; i < N; i++) CHECK(((bool*)result[0])[i] == (p[i] || q[i]));
  free(result[0]);
  CHECK_OK(run("aten::bitwise_not", bargs, 1, bdata, TPU_DTYPE_BOOL, result));
  for (int i = 0; i < N; i++) CHECK(((bool*)result[0])[i] == !p[i]);
  free(result[0]);
}

static void test_float_classes(void) {
  float x[N] = {NAN, INFINITY, -INFINITY, -0.0f, 0.0f, -2, 3, -NAN};
  tpu_lower_arg_t args[1] = {tensor(TPU_DTYPE_FLOAT32)};
  const void* data[1] = {x};
  void* result[1];
  const char* ops[5] = {"aten::isnan", "aten::isinf", "aten::isposinf", "aten::isneginf",
                        "aten::signbit"};
  bool want[5][N] = {{1, 0, 0, 0, 0, 0, 0, 1}, {0, 1, 1, 0, 0, 0, 0, 0},
                     {0, 1, 0, 0, 0, 0, 0, 0}, {0, 0, 1, 0, 0, 0, 0, 0},
                     {0, 0, 1, 1, 0, 1, 0, 1}};
  for (int k = 0; k < 5; k++) {
    CHECK_OK(run(ops[k], args, 1, data, TPU_DTYPE_BOOL, result));
    CHECK(memcmp(result[0], want[k], N) == 0);
    free(result[0]);
  }
}

/* Values from torch: shifts by negative or >= 64 amounts. */
static void test_shifts(void) {
  int64_t a[N] = {1, -8, 5, -1, 7, 3, -5, 1}, s[N] = {3, 1, 63, 64, -1, 100, 70, 0};
  tpu_lower_arg_t args[2] = {tensor(TPU_DTYPE_INT64), tensor(TPU_DTYPE_INT64)};
  const void* data[2] = {a, s};
  void* result[1];
  CHECK_OK(run("aten::bitwise_left_shift.Tensor", args, 2, data, TPU_DTYPE_INT64, result));
  int64_t lw[N] = {8, -16, INT64_MIN, 0, 0, 0, 0, 1};
  CHECK(memcmp(result[0], lw, sizeof lw) == 0);
  free(result[0]);
  CHECK_OK(run("aten::__rshift__.Tensor", args, 2, data, TPU_DTYPE_INT64, result));
  int64_t rw[N] = {0, -4, 0, -1, 0, 0, -1, 1};
  CHECK(memcmp(result[0], rw, sizeof rw) == 0);
  free(result[0]);
}

/* isin: int64 elements [N] against float32 test values (compared in
 * float32: 2.5 matches nothing), invert, a wrapped scalar, NaN in nothing,
 * and bool operands declined (CPU refuses them). */
static void test_isin(void) {
  int64_t e[N] = {1, 2, 3, 4, 5, 6, 7, 8};
  float t[3] = {2.0f, 7.0f, 2.5f};
  const int64_t three = 3;
  tpu_lower_arg_t args[4] = {tensor(TPU_DTYPE_INT64), tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 1, &three),
                             {.kind = TPU_ARG_BOOL, .i = 0}, {.kind = TPU_ARG_BOOL, .i = 0}};
  const void* data[2] = {e, t};
  void* result[1];
  CHECK_OK(run("aten::isin.Tensor_Tensor", args, 4, data, TPU_DTYPE_BOOL, result));
  bool want[N] = {0, 1, 0, 0, 0, 0, 1, 0};
  CHECK(memcmp(result[0], want, sizeof want) == 0);
  free(result[0]);
  args[3].i = 1;
  CHECK_OK(run("aten::isin.Tensor_Tensor", args, 4, data, TPU_DTYPE_BOOL, result));
  for (int k = 0; k < N; k++) CHECK(((bool*)result[0])[k] == !want[k]);
  free(result[0]);
  float f[N] = {NAN, 1, 2, 3, 4, 5, 6, 7};
  double s = NAN;
  tpu_lower_arg_t sargs[4] = {tensor(TPU_DTYPE_FLOAT32), tpu_test_scalar_arg(TPU_DTYPE_FLOAT64, true),
                              {.kind = TPU_ARG_BOOL, .i = 0}, {.kind = TPU_ARG_BOOL, .i = 0}};
  const void* sdata[2] = {f, &s};
  CHECK_OK(run("aten::isin.Tensor_Scalar", sargs, 4, sdata, TPU_DTYPE_BOOL, result));
  for (int k = 0; k < N; k++) CHECK(!((bool*)result[0])[k]);
  free(result[0]);
  s = 3;
  CHECK_OK(run("aten::isin.Tensor_Scalar", sargs, 4, sdata, TPU_DTYPE_BOOL, result));
  for (int k = 0; k < N; k++) CHECK(((bool*)result[0])[k] == (k == 3));
  free(result[0]);
  tpu_lower_arg_t bargs[4] = {tensor(TPU_DTYPE_BOOL), tensor(TPU_DTYPE_BOOL),
                              {.kind = TPU_ARG_BOOL, .i = 0}, {.kind = TPU_ARG_BOOL, .i = 0}};
  tpu_hlo_type_t bout = out_type(TPU_DTYPE_BOOL);
  char* text = NULL;
  size_t len = 0;
  tpu_status_t st = tpu_lower_program_plain("aten::isin.Tensor_Tensor", bargs, 4, NULL, &bout, 1, &text, &len);
  CHECK(st != NULL && tpu_status_code(st) == TPU_STATUS_UNIMPLEMENTED);
  tpu_status_free(st);
}

static void test_declines(void) {
  tpu_lower_arg_t fargs[2] = {tensor(TPU_DTYPE_FLOAT32), tensor(TPU_DTYPE_FLOAT32)};
  tpu_hlo_type_t fout = out_type(TPU_DTYPE_FLOAT32);
  char* text = NULL;
  size_t len;
  tpu_status_t s = tpu_lower_program_plain("aten::bitwise_and.Tensor", fargs, 2, NULL, &fout, 1,
                                           &text, &len);
  CHECK(s != NULL && tpu_status_code(s) == TPU_STATUS_UNIMPLEMENTED);
  tpu_status_free(s);
  CHECK(tpu_lowering_find("aten::clamp_min_") != NULL);
}

TPU_TEST_MAIN(TPU_TEST(test_comparisons_promote), TPU_TEST(test_isin), TPU_TEST(test_min_max_nan),
              TPU_TEST(test_clamp), TPU_TEST(test_logical_and_bitwise), TPU_TEST(test_float_classes),
              TPU_TEST(test_shifts), TPU_TEST(test_declines))
