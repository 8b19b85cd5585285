/* Matrix products on the CPU plugin through the host's BLAS.
 *
 * XLA:CPU computes a float32 dot with Eigen kernels built into the plugin
 * for a generic x86-64: on a training step's skinny shapes ([1024,64] x
 * [64,256]) they run at a third of the host BLAS's speed, and dots were
 * half of a fused step's time. So on the CPU plugin, a single-device
 * program's plain float dots (one contracting dim, leading batch dims)
 * are compiled as a typed-FFI custom call whose handler runs the gemm that
 * tpu_hostgemm_install supplied (the PyTorch extension installs PyTorch's
 * CPU BLAS). The lowering stays one table: the rewrite is applied to the
 * program text just before compiling (program.c), so graph texts handed to
 * XLA's SPMD partitioner keep their dot_generals.
 *
 * TORCHTPU_HOST_GEMM=0 leaves every dot to XLA. */
#ifndef TORCHTPU_CORE_HOSTGEMM_H_
#define TORCHTPU_CORE_HOSTGEMM_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dtype.h"
#include "pjrt/pjrt.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One row-major product c[m,n] = op(a) op(b): op(a) is [m,k], stored as
 * [m,k] (lda = k) or, when trans_a, as [k,m] (lda = m); op(b) is [k,n],
 * stored as [k,n] (ldb = n) or, when trans_b, as [n,k] (ldb = k); ldc = n.
 * m, n, k >= 1. dtype: TPU_DTYPE_FLOAT32 or TPU_DTYPE_FLOAT64. */
typedef struct tpu_hostgemm_s {
  tpu_dtype_t dtype;
  bool trans_a, trans_b;
  int64_t m, n, k;
  const void* a;
  int64_t lda;
  const void* b;
  int64_t ldb;
  void* c;
  int64_t ldc;
} tpu_hostgemm_t;

typedef void (*tpu_hostgemm_fn_t)(const tpu_hostgemm_t* gemm);

/* Supplies the gemm (process-wide, before the runtime starts; NULL
 * removes it). It is called on XLA's threads, several at once. */
void tpu_hostgemm_install(tpu_hostgemm_fn_t fn);

/* Registers the custom calls with the plugin when the client is XLA:CPU,
 * a gemm is installed and TORCHTPU_HOST_GEMM is not 0; otherwise (or when
 * the plugin cannot register FFI handlers) dots stay XLA's. Called once
 * by the runtime after creating the client. */
void tpu_hostgemm_register(tpu_client_t* client);

/* Whether programs compiled from now on get the rewrite. */
bool tpu_hostgemm_active(void);

/* The program text with every eligible stablehlo.dot_general (generic
 * form, float32/float64, static shapes, leading batch dims, one
 * contracting dim each side, m*n*k >= 4096) replaced by the custom call.
 * *out_text is NULL when nothing was eligible; else a malloc'ed copy
 * (*out_len bytes, NUL-terminated) the caller frees. Only for programs of
 * one device: XLA's partitioner cannot split a custom call. */
tpu_status_t tpu_hostgemm_rewrite(const char* text, size_t len, char** out_text,
                                  size_t* out_len);

#ifdef __cplusplus
}
#endif
#endif
