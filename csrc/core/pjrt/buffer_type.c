/* PJRT_Buffer_Type <-> tpu_dtype_t: one table both directions read, so a
 * dtype added to one side cannot be missing from the other. */
#include "buffer_type.h"

static const PJRT_Buffer_Type kBufferTypes[TPU_DTYPE_COUNT] = {
    [TPU_DTYPE_BOOL] = PJRT_Buffer_Type_PRED,
    [TPU_DTYPE_UINT8] = PJRT_Buffer_Type_U8,
    [TPU_DTYPE_INT8] = PJRT_Buffer_Type_S8,
    [TPU_DTYPE_INT16] = PJRT_Buffer_Type_S16,
    [TPU_DTYPE_INT32] = PJRT_Buffer_Type_S32,
    [TPU_DTYPE_INT64] = PJRT_Buffer_Type_S64,
    [TPU_DTYPE_FLOAT16] = PJRT_Buffer_Type_F16,
    [TPU_DTYPE_BFLOAT16] = PJRT_Buffer_Type_BF16,
    [TPU_DTYPE_FLOAT32] = PJRT_Buffer_Type_F32,
    [TPU_DTYPE_FLOAT64] = PJRT_Buffer_Type_F64,
    [TPU_DTYPE_COMPLEX64] = PJRT_Buffer_Type_C64,
    [TPU_DTYPE_UINT16] = PJRT_Buffer_Type_U16,
    [TPU_DTYPE_UINT32] = PJRT_Buffer_Type_U32,
    [TPU_DTYPE_UINT64] = PJRT_Buffer_Type_U64,
    [TPU_DTYPE_COMPLEX128] = PJRT_Buffer_Type_C128,
};

PJRT_Buffer_Type tpu_pjrt_buffer_type(tpu_dtype_t dtype) {
  return tpu_dtype_is_valid(dtype) ? kBufferTypes[dtype]
                                   : PJRT_Buffer_Type_INVALID;
}

tpu_dtype_t tpu_pjrt_dtype(PJRT_Buffer_Type type) {
  if (type == PJRT_Buffer_Type_INVALID) return TPU_DTYPE_INVALID;
  for (int d = 0; d < TPU_DTYPE_COUNT; d++)
    if (kBufferTypes[d] == type) return (tpu_dtype_t)d;
  return TPU_DTYPE_INVALID;
}

const char* tpu_pjrt_buffer_type_name(PJRT_Buffer_Type type) {
  switch (type) {
    case PJRT_Buffer_Type_INVALID: return "invalid";
    case PJRT_Buffer_Type_PRED: return "pred";
    case PJRT_Buffer_Type_S8: return "s8";
    case PJRT_Buffer_Type_S16: return "s16";
    case PJRT_Buffer_Type_S32: return "s32";
    case PJRT_Buffer_Type_S64: return "s64";
    case PJRT_Buffer_Type_U8: return "u8";
    case PJRT_Buffer_Type_U16: return "u16";
    case PJRT_Buffer_Type_U32: return "u32";
    case PJRT_Buffer_Type_U64: return "u64";
    case PJRT_Buffer_Type_F16: return "f16";
    case PJRT_Buffer_Type_F32: return "f32";
    case PJRT_Buffer_Type_F64: return "f64";
    case PJRT_Buffer_Type_BF16: return "bf16";
    case PJRT_Buffer_Type_C64: return "c64";
    case PJRT_Buffer_Type_C128: return "c128";
    case PJRT_Buffer_Type_TOKEN: return "token";
    default: return "an 8/4/2-bit type";
  }
}
