/* layer_norm's backward on the CPU plugin in host code.
 *
 * XLA:CPU computes native_layer_norm_backward (lower/nn.c) as eight
 * kernels: two row reductions cut in partial sums, the input gradient,
 * and each of the weight's and the bias's column sums as a reduce-window
 * and a reduce (XLA's tree rewrite of a long reduction). In the demo's
 * training step each of its five layer_norm backwards, [16,64,64], took
 * 100-170 us of the fused program, and 118 us as a strict op, where
 * PyTorch CPU takes 45. The kernel here does a row at a time with the row
 * in L1: its two sums, its input gradient and its share of the weight's
 * and bias's gradients in two passes.
 *
 * The lowering emits the generic StableHLO everywhere, names the three
 * gradients by identity reshapes (dx, then dweight, then dbias, the last
 * carrying the marker) and marks the last one with
 *   mhlo.frontend_attributes = {torchtpu_norm = "layer_norm_bwd <g> <x>
 *     <mean> <rstd> <weight|-> <dx> <dweight>"}
 * (g and x float32 of x's shape [outer..., normalized...]; mean and rstd
 * float32 [rows], one a row; weight float32 of the normalized dims, or -
 * when absent). Just before a one-device program is compiled on the CPU
 * plugin, tpu_hostnorm_rewrite turns the marked line into a typed-FFI
 * custom call defining the three gradients and drops the lines that
 * defined dx and dweight; XLA drops the generic ops no longer read. Every
 * other plugin, and XLA's SPMD partitioner, read the marker as an
 * attribute they ignore.
 *
 * TORCHTPU_HOST_ROW=0 (or TORCHTPU_HOST_GEMM=0) leaves it to XLA. */
#ifndef TORCHTPU_CORE_HOSTNORM_H_
#define TORCHTPU_CORE_HOSTNORM_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pjrt/pjrt.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The gradients of y = (x - mean) * rstd [* w] [+ b] over `rows` rows of
 * n floats given y's gradient g: with xhat = (x - mean) * rstd and gw = g
 * [* w],
 *   dx = rstd * (gw - mean(gw) - xhat * mean(gw * xhat))   (rows x n)
 *   dw = sum over rows of g * xhat,  db = sum over rows of g   (n each)
 * mean and rstd one float a row; w NULL when absent (dw is then still
 * the weight's gradient of a weight of ones). dw and db are overwritten.
 * The handler's kernel, exposed for its C test; false: out of memory for
 * its scratch (nothing written). */
bool tpu_hostnorm_layer_norm_backward(const float* g, const float* x, const float* mean,
                                      const float* rstd, const float* w, float* dx, float* dw,
                                      float* db, int64_t rows, int64_t n);

/* Registers the handler when the client is XLA:CPU, the CPU has AVX2 and
 * FMA, and neither TORCHTPU_HOST_ROW nor TORCHTPU_HOST_GEMM is 0. Called
 * once by the runtime after creating the client. */
void tpu_hostnorm_register(tpu_client_t* client);

/* Whether programs compiled from now on get the rewrite. */
bool tpu_hostnorm_active(void);

/* The program text with each marked line whose x is float32 of at least
 * 4096 elements turned into the custom call. *out_text is NULL when
 * nothing was; else a malloc'ed copy (*out_len bytes, NUL-terminated) the
 * caller frees. Only for programs of one device. */
tpu_status_t tpu_hostnorm_rewrite(const char* text, size_t len, char** out_text,
                                  size_t* out_len);

#ifdef __cplusplus
}
#endif

#endif
