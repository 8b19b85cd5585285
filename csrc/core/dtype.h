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
bool tpu_dtype_is_complex(tpu_dtype_t dtype);
bool tpu_dtype_is_integral(tpu_dtype_t dtype); /* excludes bool */

#ifdef __cplusplus
}
#endif
#endif /* TORCHTPU_CORE_DTYPE_H_ */
