#include "dtype.h"

#include <string.h>

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
    [TPU_DTYPE_UINT16] = {2, "uint16", "ui16"},
    [TPU_DTYPE_UINT32] = {4, "uint32", "ui32"},
    [TPU_DTYPE_UINT64] = {8, "uint64", "ui64"},
    [TPU_DTYPE_COMPLEX128] = {16, "complex128", "complex<f64>"},
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
  return dtype == TPU_DTYPE_COMPLEX64 || dtype == TPU_DTYPE_COMPLEX128;
}

bool tpu_dtype_is_barebones_unsigned(tpu_dtype_t dtype) {
  return dtype == TPU_DTYPE_UINT16 || dtype == TPU_DTYPE_UINT32 || dtype == TPU_DTYPE_UINT64;
}

bool tpu_dtype_is_unsigned(tpu_dtype_t dtype) {
  return dtype == TPU_DTYPE_UINT8 || tpu_dtype_is_barebones_unsigned(dtype);
}

bool tpu_dtype_is_integral(tpu_dtype_t dtype) {
  return (dtype >= TPU_DTYPE_UINT8 && dtype <= TPU_DTYPE_INT64) ||
         tpu_dtype_is_barebones_unsigned(dtype);
}

tpu_dtype_t tpu_dtype_complex_part(tpu_dtype_t dtype) {
  if (dtype == TPU_DTYPE_COMPLEX64) return TPU_DTYPE_FLOAT32;
  if (dtype == TPU_DTYPE_COMPLEX128) return TPU_DTYPE_FLOAT64;
  return dtype;
}

tpu_dtype_t tpu_dtype_to_complex(tpu_dtype_t dtype) {
  if (tpu_dtype_is_complex(dtype)) return dtype;
  return dtype == TPU_DTYPE_FLOAT64 ? TPU_DTYPE_COMPLEX128 : TPU_DTYPE_COMPLEX64;
}

bool tpu_dtype_supported_on(const char* platform, tpu_dtype_t dtype) {
  if (!tpu_dtype_is_valid(dtype)) return false;
  if (platform && strcmp(platform, "tpu") == 0) return dtype != TPU_DTYPE_COMPLEX128;
  return true;
}
