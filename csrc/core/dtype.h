/* Element types the device supports: every dtype PyTorch programs commonly
 * put on an accelerator. The numbering is ours (not ATen's, not PJRT's);
 * the C++ layer and the PJRT layer each map to it in one place. */
#ifndef TORCHTPU_CORE_DTYPE_H_
#define TORCHTPU_CORE_DTYPE_H_

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tpu_dtype_e {
  TPU_DTYPE_BOOL = 0,
  TPU_DTYPE_UINT8,
  TPU_DTYPE_INT8,
  TPU_DTYPE_INT16,
  TPU_DTYPE_INT32,
  TPU_DTYPE_INT64,
  TPU_DTYPE_FLOAT16,
  TPU_DTYPE_BFLOAT16,
  TPU_DTYPE_FLOAT32,
  TPU_DTYPE_FLOAT64,
  TPU_DTYPE_COMPLEX64,
  /* Appended, not sorted in: codes already in disk-cache keys keep their
   * meaning. Whether a platform holds them: tpu_dtype_supported_on. */
  TPU_DTYPE_UINT16,
  TPU_DTYPE_UINT32,
  TPU_DTYPE_UINT64,
  TPU_DTYPE_COMPLEX128,
  TPU_DTYPE_COUNT, /* not a dtype: the number of them */
  TPU_DTYPE_INVALID = -1,
} tpu_dtype_t;

/* Bytes per element; 0 for an invalid dtype. */
size_t tpu_dtype_size(tpu_dtype_t dtype);
/* PyTorch's spelling: "float32", "bfloat16", "bool" ... */
const char* tpu_dtype_name(tpu_dtype_t dtype);
/* MLIR element type: "f32", "bf16", "i1", "ui8", "complex<f32>" ... */
const char* tpu_dtype_mlir(tpu_dtype_t dtype);
bool tpu_dtype_is_valid(tpu_dtype_t dtype);
bool tpu_dtype_is_floating(tpu_dtype_t dtype); /* f16 bf16 f32 f64 */
bool tpu_dtype_is_complex(tpu_dtype_t dtype); /* complex64 complex128 */
bool tpu_dtype_is_integral(tpu_dtype_t dtype); /* excludes bool */
bool tpu_dtype_is_unsigned(tpu_dtype_t dtype); /* uint8 .. uint64 */
/* uint16/32/64: PyTorch gives them only a "barebones" op set (CPU kernels
 * raise NotImplementedError for most ops), unlike uint8. */
bool tpu_dtype_is_barebones_unsigned(tpu_dtype_t dtype);
/* complex64 -> float32, complex128 -> float64; other dtypes unchanged. */
tpu_dtype_t tpu_dtype_complex_part(tpu_dtype_t dtype);
/* float64 -> complex128, other floats -> complex64; complex unchanged. */
tpu_dtype_t tpu_dtype_to_complex(tpu_dtype_t dtype);

/* Whether a PJRT platform ("cpu", "cuda", "rocm", "tpu", as the client
 * reports it) holds and computes `dtype`. A table by platform, because PJRT
 * has no query for it: TPUs have no complex128 (XLA:TPU rejects C128, as
 * torch_xla's own dtype tests note); the other platforms named, and unknown
 * ones, take every dtype. */
bool tpu_dtype_supported_on(const char* platform, tpu_dtype_t dtype);

#ifdef __cplusplus
}
#endif
#endif /* TORCHTPU_CORE_DTYPE_H_ */
