/* uint16/32/64 and complex128 through the lowering table: the barebones
 * gate, wrap-around, casts, complex128 precision. */
#include <complex.h>
#include <math.h>
#include <stdlib.h>

#include "../testing.h"
#include "lower_testing.h"
#include "unsigned_ops.h"

/* The gate as ctx_run asks it: by base name. */
static bool allowed(const char* op, const tpu_lower_arg_t* args, int n) {
  const char* base;
  size_t len = tpu_lowering_base_name(op, &base);
  return tpu_unsigned_op_allowed(base, len, args, n);
}

static void test_allow_list_names(void) {
  tpu_lower_arg_t none[1] = {{.kind = TPU_ARG_NONE}};
  CHECK(allowed("aten::mul.Tensor", none, 1));
  CHECK(allowed("mul_.Scalar", none, 1));
  CHECK(allowed("aten::sum.dim_IntList", none, 1));
  CHECK(allowed("aten::_to_copy", none, 1));
  CHECK(!allowed("aten::add.Tensor", none, 1));
  CHECK(!allowed("aten::lt.Tensor", none, 1));
  CHECK(!allowed("aten::__lshift__.Scalar", none, 1));
  CHECK(!allowed("aten::multiply.Tensor", none, 1)); /* whole names only */
  tpu_lower_arg_t mode[3] = {{.kind = TPU_ARG_TENSOR}, {.kind = TPU_ARG_TENSOR},
                             {.kind = TPU_ARG_STRING, .str = "trunc"}};
  CHECK(allowed("aten::div.Tensor", mode, 2));
  CHECK(!allowed("aten::div.Tensor_mode", mode, 3));
}

static void test_mul_wraps_and_add_declines(void) {
  int64_t d[1] = {3};
  tpu_lower_arg_t args[2] = {tpu_test_tensor_arg(TPU_DTYPE_UINT32, 1, d),
                             tpu_test_tensor_arg(TPU_DTYPE_UINT32, 1, d)};
  uint32_t a[3] = {UINT32_MAX, 4000000000u, 7}, b[3] = {2, 3, 5};
  const void* data[2] = {a, b};
  tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_UINT32, 1, d);
  void* result[1];
  CHECK_OK(tpu_test_run_op("aten::mul.Tensor", args, 2, NULL, data, &out, 1, result));
  uint32_t* r = result[0];
  for (int i = 0; i < 3; i++) CHECK(r[i] == (uint32_t)(a[i] * b[i]));
  free(result[0]);
  /* CPU has no add for uint32: the lowering declines (-> CPU fallback). */
  tpu_status_t s = tpu_test_run_op("aten::add.Tensor", args, 2, NULL, data, &out, 1, result);
  CHECK(s && tpu_status_code(s) == TPU_STATUS_UNIMPLEMENTED);
  tpu_status_free(s);
  /* uint8 keeps its full op set. */
  args[0].type.dtype = args[1].type.dtype = TPU_DTYPE_UINT8;
  out.dtype = TPU_DTYPE_UINT8;
  uint8_t c[3] = {250, 1, 2}, e[3] = {10, 1, 2};
  const void* data8[2] = {c, e};
  CHECK_OK(tpu_test_run_op("aten::add.Tensor", args, 2, NULL, data8, &out, 1, result));
  CHECK(((uint8_t*)result[0])[0] == 4);
  free(result[0]);
}

static void test_uint64_sum_is_int64_and_wraps(void) {
  int64_t d[1] = {2};
  tpu_lower_arg_t args[2] = {tpu_test_tensor_arg(TPU_DTYPE_UINT64, 1, d),
                             {.kind = TPU_ARG_NONE}};
  uint64_t a[2] = {UINT64_MAX, 5};
  const void* data[1] = {a};
  tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_INT64, 0, NULL);
  void* result[1];
  CHECK_OK(tpu_test_run_op("aten::sum", args, 2, NULL, data, &out, 1, result));
  CHECK(*(int64_t*)result[0] == 4); /* (2^64 - 1) + 5 wraps, as on CPU */
  free(result[0]);
}

static void test_negative_float_to_unsigned_wraps(void) {
  int64_t d[1] = {3};
  tpu_lower_arg_t args[2] = {tpu_test_tensor_arg(TPU_DTYPE_UINT64, 1, d),
                             tpu_test_tensor_arg(TPU_DTYPE_FLOAT64, 1, d)};
  uint64_t dst[3] = {0};
  double src[3] = {-1.0, 1e19, 2.5};
  const void* data[2] = {dst, src};
  tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_UINT64, 1, d);
  void* result[1];
  CHECK_OK(tpu_test_run_op("aten::copy_", args, 2, NULL, data, &out, 1, result));
  uint64_t* r = result[0];
  CHECK(r[0] == UINT64_MAX && r[1] == 10000000000000000000ull && r[2] == 2);
  free(result[0]);
  args[0].type.dtype = out.dtype = TPU_DTYPE_UINT32;
  uint32_t dst32[3] = {0};
  const void* data32[2] = {dst32, src};
  src[1] = 3e9;
  CHECK_OK(tpu_test_run_op("aten::copy_", args, 2, NULL, data32, &out, 1, result));
  uint32_t* r32 = result[0];
  CHECK(r32[0] == UINT32_MAX && r32[1] == 3000000000u && r32[2] == 2);
  free(result[0]);
}

static void test_complex128_keeps_double_parts(void) {
  int64_t d[1] = {2};
  tpu_lower_arg_t args[2] = {tpu_test_tensor_arg(TPU_DTYPE_COMPLEX128, 1, d),
                             tpu_test_scalar_arg(TPU_DTYPE_COMPLEX128, true)};
  double complex a[2] = {1 + 1e-12 * I, -3 + 0.5 * I}, k = 1 + 1e-13 * I;
  const void* data[2] = {a, &k};
  tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_COMPLEX128, 1, d);
  void* result[1];
  CHECK_OK(tpu_test_run_op("aten::mul.Tensor", args, 2, NULL, data, &out, 1, result));
  double complex* r = result[0];
  for (int i = 0; i < 2; i++) CHECK(cabs(r[i] - a[i] * k) <= 1e-15 * cabs(a[i] * k));
  free(result[0]);
  /* angle = atan2(imag, real) in float64. */
  tpu_hlo_type_t real = tpu_hlo_type_make(TPU_DTYPE_FLOAT64, 1, d);
  CHECK_OK(tpu_test_run_op("aten::angle", args, 1, NULL, data, &real, 1, result));
  double* ang = result[0];
  for (int i = 0; i < 2; i++) CHECK(fabs(ang[i] - carg(a[i])) <= 1e-15);
  free(result[0]);
}

static void test_promotion_with_complex128(void) {
  /* float64 tensor * complex number -> complex128, as torch promotes. */
  int64_t d[1] = {2};
  tpu_lower_arg_t args[2] = {tpu_test_tensor_arg(TPU_DTYPE_FLOAT64, 1, d),
                             tpu_test_scalar_arg(TPU_DTYPE_COMPLEX128, true)};
  double a[2] = {0.1, 2};
  double complex k = 0.3 + 0.7 * I;
  const void* data[2] = {a, &k};
  tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_COMPLEX128, 1, d);
  void* result[1];
  CHECK_OK(tpu_test_run_op("aten::mul.Tensor", args, 2, NULL, data, &out, 1, result));
  double complex* r = result[0];
  for (int i = 0; i < 2; i++) CHECK(r[i] == a[i] * k);
  free(result[0]);
}

TPU_TEST_MAIN(TPU_TEST(test_allow_list_names), TPU_TEST(test_mul_wraps_and_add_declines),
              TPU_TEST(test_uint64_sum_is_int64_and_wraps),
              TPU_TEST(test_negative_float_to_unsigned_wraps),
              TPU_TEST(test_complex128_keeps_double_parts),
              TPU_TEST(test_promotion_with_complex128))
