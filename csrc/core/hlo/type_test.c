/* Types as MLIR spells them, for every dtype family; sizes; equality. */
#include "type.h"

#include <string.h>

#include "../testing.h"

static void test_print(void) {
  char text[64];
  int64_t d23[2] = {2, 3}, d03[2] = {0, 3}, big[2] = {1000, 1000};
  tpu_hlo_type_t t = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 2, d23);
  tpu_hlo_type_print(&t, text, sizeof text);
  CHECK(strcmp(text, "tensor<2x3xf32>") == 0);
  t = tpu_hlo_type_scalar(TPU_DTYPE_FLOAT32);
  tpu_hlo_type_print(&t, text, sizeof text);
  CHECK(strcmp(text, "tensor<f32>") == 0);
  t = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 2, d03);
  tpu_hlo_type_print(&t, text, sizeof text);
  CHECK(strcmp(text, "tensor<0x3xf32>") == 0);
  const struct {
    tpu_dtype_t dtype;
    const char* text;
  } kCases[] = {{TPU_DTYPE_BOOL, "tensor<i1>"},
                {TPU_DTYPE_UINT8, "tensor<ui8>"},
                {TPU_DTYPE_INT64, "tensor<i64>"},
                {TPU_DTYPE_BFLOAT16, "tensor<bf16>"},
                {TPU_DTYPE_COMPLEX64, "tensor<complex<f32>>"}};
  for (size_t i = 0; i < sizeof kCases / sizeof kCases[0]; i++) {
    t = tpu_hlo_type_scalar(kCases[i].dtype);
    tpu_hlo_type_print(&t, text, sizeof text);
    CHECK(strcmp(text, kCases[i].text) == 0);
  }
  t = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 2, big);
  tpu_hlo_type_print(&t, text, 8); /* truncated, still terminated */
  CHECK(strcmp(text, "tensor<") == 0);
}

static void test_numel_and_flat(void) {
  int64_t d23[2] = {2, 3};
  tpu_hlo_type_t t = tpu_hlo_type_make(TPU_DTYPE_INT8, 2, d23), flat = tpu_hlo_type_flat(&t);
  tpu_hlo_type_t s = tpu_hlo_type_scalar(TPU_DTYPE_INT8);
  CHECK(tpu_hlo_type_numel(&t) == 6 && tpu_hlo_type_numel(&s) == 1);
  CHECK(flat.dtype == TPU_DTYPE_INT8 && flat.rank == 1 && flat.dims[0] == 6);
}

/* Dims past the rank are not compared: types made by hand may leave them. */
static void test_equal(void) {
  int64_t d23[2] = {2, 3}, d24[2] = {2, 4};
  tpu_hlo_type_t a = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 2, d23), b = a;
  b.dims[5] = 7;
  CHECK(tpu_hlo_type_equal(&a, &b));
  b = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 2, d24);
  CHECK(!tpu_hlo_type_equal(&a, &b));
  b = tpu_hlo_type_make(TPU_DTYPE_INT32, 2, d23);
  CHECK(!tpu_hlo_type_equal(&a, &b));
  b = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 1, d23);
  CHECK(!tpu_hlo_type_equal(&a, &b));
}

TPU_TEST_MAIN(TPU_TEST(test_print), TPU_TEST(test_numel_and_flat), TPU_TEST(test_equal))
