#include "dtype.h"

#include "testing.h"

static void test_sizes_and_names(void) {
  CHECK_EQ(tpu_dtype_size(TPU_DTYPE_BOOL), 1u);
  CHECK_EQ(tpu_dtype_size(TPU_DTYPE_BFLOAT16), 2u);
  CHECK_EQ(tpu_dtype_size(TPU_DTYPE_INT64), 8u);
  CHECK_EQ(tpu_dtype_size(TPU_DTYPE_COMPLEX64), 8u);
  CHECK(strcmp(tpu_dtype_mlir(TPU_DTYPE_UINT8), "ui8") == 0);
  CHECK(strcmp(tpu_dtype_mlir(TPU_DTYPE_BOOL), "i1") == 0);
  CHECK(strcmp(tpu_dtype_name(TPU_DTYPE_FLOAT16), "float16") == 0);
  CHECK_EQ(tpu_dtype_size(TPU_DTYPE_INVALID), 0u);
  CHECK(!tpu_dtype_is_valid(TPU_DTYPE_COUNT));
}

static void test_every_dtype_has_info(void) {
  for (int d = 0; d < TPU_DTYPE_COUNT; d++) {
    CHECK(tpu_dtype_size((tpu_dtype_t)d) > 0);
    CHECK(strcmp(tpu_dtype_mlir((tpu_dtype_t)d), "invalid") != 0);
  }
}

static void test_unsigned_and_complex128(void) {
  CHECK_EQ(tpu_dtype_size(TPU_DTYPE_UINT16), 2u);
  CHECK_EQ(tpu_dtype_size(TPU_DTYPE_UINT32), 4u);
  CHECK_EQ(tpu_dtype_size(TPU_DTYPE_UINT64), 8u);
  CHECK_EQ(tpu_dtype_size(TPU_DTYPE_COMPLEX128), 16u);
  CHECK(strcmp(tpu_dtype_mlir(TPU_DTYPE_UINT32), "ui32") == 0);
  CHECK(strcmp(tpu_dtype_mlir(TPU_DTYPE_COMPLEX128), "complex<f64>") == 0);
  CHECK(strcmp(tpu_dtype_name(TPU_DTYPE_UINT64), "uint64") == 0);
  CHECK(tpu_dtype_is_integral(TPU_DTYPE_UINT64) && tpu_dtype_is_unsigned(TPU_DTYPE_UINT16));
  CHECK(tpu_dtype_is_unsigned(TPU_DTYPE_UINT8) && !tpu_dtype_is_barebones_unsigned(TPU_DTYPE_UINT8));
  CHECK(!tpu_dtype_is_unsigned(TPU_DTYPE_INT64) && !tpu_dtype_is_integral(TPU_DTYPE_BOOL));
  CHECK(tpu_dtype_is_complex(TPU_DTYPE_COMPLEX128) && !tpu_dtype_is_floating(TPU_DTYPE_COMPLEX128));
  CHECK_EQ(tpu_dtype_complex_part(TPU_DTYPE_COMPLEX128), TPU_DTYPE_FLOAT64);
  CHECK_EQ(tpu_dtype_complex_part(TPU_DTYPE_COMPLEX64), TPU_DTYPE_FLOAT32);
  CHECK_EQ(tpu_dtype_to_complex(TPU_DTYPE_FLOAT64), TPU_DTYPE_COMPLEX128);
  CHECK_EQ(tpu_dtype_to_complex(TPU_DTYPE_FLOAT32), TPU_DTYPE_COMPLEX64);
}

static void test_platform_table(void) {
  for (int d = 0; d < TPU_DTYPE_COUNT; d++) {
    CHECK(tpu_dtype_supported_on("cpu", (tpu_dtype_t)d));
    CHECK(tpu_dtype_supported_on("cuda", (tpu_dtype_t)d));
    CHECK(tpu_dtype_supported_on("tpu", (tpu_dtype_t)d) == (d != TPU_DTYPE_COMPLEX128));
  }
  CHECK(tpu_dtype_supported_on("tpu", TPU_DTYPE_FLOAT64)); /* emulated by XLA:TPU */
  CHECK(tpu_dtype_supported_on(NULL, TPU_DTYPE_COMPLEX128));
  CHECK(!tpu_dtype_supported_on("cpu", TPU_DTYPE_INVALID));
}

TPU_TEST_MAIN(TPU_TEST(test_sizes_and_names), TPU_TEST(test_every_dtype_has_info),
              TPU_TEST(test_unsigned_and_complex128), TPU_TEST(test_platform_table))
