/* Row softmax, log_softmax and layer_norm on the CPU plugin in host code.
 *
 * XLA:CPU computes a softmax over short rows (attention's [16,4,64,64]) in
 * three passes with exp computed twice and scalar row reductions: 350-460
 * us where PyTorch CPU takes 95, and a strict 128x512 softmax at 2.4x
 * PyTorch's time. The lowering (lower/nn.c) emits the generic StableHLO
 * form everywhere and marks the op giving the result with
 *   mhlo.frontend_attributes = {torchtpu_row = "<kind> <input>"}
 * (kind softmax, log_softmax or safe_softmax; input the SSA name of the
 * float32 operand the softmax is over its last dim of), or
 *   torchtpu_row = "layer_norm <input> <weight|-> <bias|-> <k> <eps>"
 * on native_layer_norm's output (normalized over the last k dims; float32
 * weight and bias of those dims, or - when absent; on its rstd, the last
 * result, see hostrow.c), or
 *   torchtpu_row = "<softmax_bwd|log_softmax_bwd> <grad> <output>"
 * on _softmax_backward_data's / _log_softmax_backward_data's result. Just before a
 * one-device program is compiled on the CPU plugin, tpu_hostrow_rewrite
 * turns each marked line into a typed-FFI custom call whose handler
 * computes the rows in one pass each with AVX2; XLA drops the generic ops
 * it no longer needs. A layer_norm's row moments (saved for its backward)
 * stay XLA's reductions; the kernel recomputes them on its rows, which
 * are in L1 (a strict 128x512 layer_norm took 2.2-2.6x PyTorch CPU's time
 * as XLA's). Every other plugin, and XLA's SPMD partitioner,
 * read the marker as an attribute they ignore.
 *
 * TORCHTPU_HOST_ROW=0 (or TORCHTPU_HOST_GEMM=0) leaves them to XLA. */
#ifndef TORCHTPU_CORE_HOSTROW_H_
#define TORCHTPU_CORE_HOSTROW_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pjrt/pjrt.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tpu_hostrow_kind_e {
  TPU_HOSTROW_SOFTMAX = 0,
  TPU_HOSTROW_LOG_SOFTMAX,
  TPU_HOSTROW_SAFE_SOFTMAX, /* a row of -inf only gives zeros, not NaN */
  TPU_HOSTROW_NUM_KINDS
} tpu_hostrow_kind_t;

/* The marker's kind word ("softmax", ...). */
const char* tpu_hostrow_kind_name(tpu_hostrow_kind_t kind);

/* y = kind(x) over each row of n floats, rows one after another (y may
 * not overlap x). The handlers' kernel, exposed for its C test. */
void tpu_hostrow_compute(tpu_hostrow_kind_t kind, const float* x, float* y, int64_t rows,
                         int64_t n);

/* y = (x - mean) * rstd [* w] [+ b] over each row of n floats (mean and
 * biased variance of the row, rstd = 1 / sqrt(var + eps)), and each row's
 * mean and rstd (one float a row; NULL: not wanted); w and b, of n
 * floats, may be NULL. The layer_norm handler's kernel. */
void tpu_hostrow_layer_norm(const float* x, const float* w, const float* b, float eps,
                            float* y, float* mean, float* rstd, int64_t rows, int64_t n);

/* The softmaxes' gradients over each row of n floats: out = y * (g -
 * sum(g * y)) for softmax's output y, g - exp(y) * sum(g) for (log) the
 * log_softmax's. The backward handlers' kernel. */
void tpu_hostrow_softmax_backward(bool log, const float* g, const float* y, float* out,
                                  int64_t rows, int64_t n);

/* Registers the handlers when the client is XLA:CPU and neither
 * TORCHTPU_HOST_ROW nor TORCHTPU_HOST_GEMM is 0. Called once by the
 * runtime after creating the client. */
void tpu_hostrow_register(tpu_client_t* client);

/* Whether programs compiled from now on get the rewrite. */
bool tpu_hostrow_active(void);

/* The program text with each marked line whose value is float32 of at
 * least 4096 elements turned into the custom call. *out_text is NULL when
 * nothing was; else a malloc'ed copy (*out_len bytes, NUL-terminated) the
 * caller frees. Only for programs of one device. */
tpu_status_t tpu_hostrow_rewrite(const char* text, size_t len, char** out_text,
                                 size_t* out_len);

#ifdef __cplusplus
}
#endif
#endif
