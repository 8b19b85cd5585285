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

TPU_TEST_MAIN(TPU_TEST(test_sizes_and_names), TPU_TEST(test_every_dtype_has_info))
