#include "dtype.h"

typedef struct {
  size_t size;
  const char* name;
  const char* mlir;
} dtype_info_t;

/* Indexed by tpu_dtype_t. */
static const dtype_info_t kDtypes[TPU_DTYPE_COUNT] = {
    [TPU_DTYPE_BOOL] = {1, "bool", "i1"},
    [TPU_DTYPE_UINT8] = {1, "uint8", "ui8"},
    [TPU_DTYPE_INT8] = {1, "int8", "i8"},
    [TPU_DTYPE_INT16] = {2, "int16", "i16"},
    [TPU_DTYPE_INT32] = {4, "int32", "i32"},
    [TPU_DTYPE_INT64] = {8, "int64", "i64"},
    [TPU_DTYPE_FLOAT16] = {2, "float16", "f16"},
    [TPU_DTYPE_BFLOAT16] = {2, "bfloat16", "bf16"},
    [TPU_DTYPE_FLOAT32] = {4, "float32", "f32"},
    [TPU_DTYPE_FLOAT64] = {8, "float64", "f64"},
    [TPU_DTYPE_COMPLEX64] = {8, "complex64", "complex<f32>"},
};

bool tpu_dtype_is_valid(tpu_dtype_t dtype) {
  return dtype >= 0 && dtype < TPU_DTYPE_COUNT;
}

size_t tpu_dtype_size(tpu_dtype_t dtype) {
  return tpu_dtype_is_valid(dtype) ? kDtypes[dtype].size : 0;
}

const char* tpu_dtype_name(tpu_dtype_t dtype) {
  return tpu_dtype_is_valid(dtype) ? kDtypes[dtype].name : "invalid";
}

const char* tpu_dtype_mlir(tpu_dtype_t dtype) {
  return tpu_dtype_is_valid(dtype) ? kDtypes[dtype].mlir : "invalid";
}

bool tpu_dtype_is_floating(tpu_dtype_t dtype) {
  return dtype == TPU_DTYPE_FLOAT16 || dtype == TPU_DTYPE_BFLOAT16 ||
         dtype == TPU_DTYPE_FLOAT32 || dtype == TPU_DTYPE_FLOAT64;
}

bool tpu_dtype_is_complex(tpu_dtype_t dtype) {
  return dtype == TPU_DTYPE_COMPLEX64;
}

bool tpu_dtype_is_integral(tpu_dtype_t dtype) {
  return dtype >= TPU_DTYPE_UINT8 && dtype <= TPU_DTYPE_INT64;
}
