#include "buffer_type.h"

#include <string.h>

#include "../testing.h"

/* Every dtype has a PJRT type that maps back to it, and no two share one. */
static void test_every_dtype_round_trips(void) {
  for (int d = 0; d < TPU_DTYPE_COUNT; d++) {
    PJRT_Buffer_Type type = tpu_pjrt_buffer_type((tpu_dtype_t)d);
    CHECK(type != PJRT_Buffer_Type_INVALID);
    CHECK_EQ(tpu_pjrt_dtype(type), d);
    CHECK(strcmp(tpu_pjrt_buffer_type_name(type), "an 8/4/2-bit type") != 0);
  }
  CHECK_EQ(tpu_pjrt_buffer_type(TPU_DTYPE_COUNT), PJRT_Buffer_Type_INVALID);
  CHECK_EQ(tpu_pjrt_buffer_type(TPU_DTYPE_INVALID), PJRT_Buffer_Type_INVALID);
}

/* Types with no dtype: INVALID one way, still named for the error. */
static void test_unmapped_types_are_named(void) {
  CHECK_EQ(tpu_pjrt_dtype(PJRT_Buffer_Type_INVALID), TPU_DTYPE_INVALID);
  CHECK_EQ(tpu_pjrt_dtype(PJRT_Buffer_Type_TOKEN), TPU_DTYPE_INVALID);
  CHECK(strcmp(tpu_pjrt_buffer_type_name(PJRT_Buffer_Type_TOKEN), "token") == 0);
  CHECK_EQ(tpu_pjrt_dtype(PJRT_Buffer_Type_F8E4M3FN), TPU_DTYPE_INVALID);
  CHECK(strcmp(tpu_pjrt_buffer_type_name(PJRT_Buffer_Type_F8E4M3FN), "an 8/4/2-bit type") == 0);
  CHECK(strcmp(tpu_pjrt_buffer_type_name(PJRT_Buffer_Type_F32), "f32") == 0);
  CHECK(strcmp(tpu_pjrt_buffer_type_name(PJRT_Buffer_Type_BF16), "bf16") == 0);
}

TPU_TEST_MAIN(TPU_TEST(test_every_dtype_round_trips), TPU_TEST(test_unmapped_types_are_named))
