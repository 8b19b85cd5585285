/* Scaled dot-product attention on the CPU plugin in host code.
 *
 * XLA:CPU computes the fused attention of lower/attention.c as a dozen
 * kernels, seven of them passes over the [B, H, L, S] scores (each
 * product a separate host gemm, the softmax's passes between): a strict
 * causal attention of the demo's [16, 4, 64, 16] took 663 us forward and
 * 2.3 ms with its backward, against CPU's flash kernel's 0.2 and 0.8. The
 * kernel here does one (batch, head) at a time with its scores in L1: a
 * row's scores, softmax and output in one go, the backward's gradients
 * accumulated row by row.
 *
 * The lowering emits the generic StableHLO everywhere and marks it, as
 * hostrow does: the forward's logsumexp [B..., L] (an identity reshape)
 * with
 *   mhlo.frontend_attributes = {torchtpu_attn = "fwd <q> <k> <v> <bias|->
 *     <out> <causal> <scale> <B> <L> <S> <D> <DV>"}
 * (q [B..., L, D], k [B..., S, D], v [B..., S, DV], the bias broadcast to
 * [B..., L, S], out the identity reshape of the output [B..., L, DV] just
 * before; <B> the batch dims as one word, "16x4"), and the backward's
 * grad_value with
 *   torchtpu_attn = "bwd <q> <k> <v> <bias|-> <g> <out> <lse> <dq> <dk>
 *     <causal> <scale> <B> <L> <S> <D> <DV>"
 * (dq, dk: the identity reshapes just before it). Just before a one-device
 * program is compiled on the CPU plugin, tpu_hostattn_rewrite turns each
 * marked line into a typed-FFI custom call defining all its results, and
 * drops the lines that defined the other results; XLA drops the generic
 * ops no longer read. Every other plugin, and XLA's partitioner, ignore
 * the attribute (values keep their shapes, so a batch-sharded attention
 * partitions as before). Values are float32 (halves are converted
 * before).
 *
 * TORCHTPU_HOST_ATTN=0 (or TORCHTPU_HOST_GEMM=0) leaves attention to XLA. */
#ifndef TORCHTPU_CORE_HOSTATTN_H_
#define TORCHTPU_CORE_HOSTATTN_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pjrt/pjrt.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One attention over bh (the batch dims' product) slices, row-major
 * float32:
 * q [bh, l, d], k [bh, s, d], v [bh, s, dv], bias [bh, l, s] or NULL.
 * Scores are q k^T * scale + bias, keys after a query's position -inf
 * when causal (top-left aligned); a row with every score -inf gives a
 * zero output, zero gradients and a logsumexp of -inf. */
/* Where an operand's element (slice b, row i, column c) lives: at its
 * pointer + (b / heads) * batch + (b % heads) * head + i * row + c. A
 * zero layout (row 0) is the operand's row-major [bh, rows, cols]. */
typedef struct tpu_hostattn_layout_s {
  int64_t batch, head, row;
} tpu_hostattn_layout_t;

typedef struct tpu_hostattn_s {
  int64_t bh, l, s, d, dv;
  /* the last batch dim (the heads), for the layouts; 0 counts as 1 */
  int64_t heads;
  /* q, k, v, g, the forward's out (backward), out (forward), dq, dk, dv;
   * lse, fwd_lse and bias are always row-major */
  tpu_hostattn_layout_t lq, lk, lv, lg, lo, lout, ldq, ldk, ldv;
  const float *q, *k, *v, *bias;
  bool causal;
  float scale;
  /* forward results: out [bh, l, dv], lse [bh, l] */
  float *out, *lse;
  /* backward inputs: g (out's gradient) [bh, l, dv], the forward's out
   * and lse; results dq [bh, l, d], dk [bh, s, d], dvv [bh, s, dv] */
  const float *g, *fwd_out, *fwd_lse;
  float *dq, *dk, *dvv;
} tpu_hostattn_t;

/* The forward of slices [lo, hi) (out, lse). false: out of memory for
 * its scratch (nothing written). Both need a CPU with AVX2 and FMA (the
 * handlers are only registered on one). */
bool tpu_hostattn_forward(const tpu_hostattn_t* a, int64_t lo, int64_t hi);
/* The backward of slices [lo, hi) (dq, dk, dvv). */
bool tpu_hostattn_backward(const tpu_hostattn_t* a, int64_t lo, int64_t hi);

/* Registers the handlers when the client is XLA:CPU, the CPU has AVX2
 * and FMA, and neither
 * TORCHTPU_HOST_ATTN nor TORCHTPU_HOST_GEMM is 0. Called once by the
 * runtime after creating the client. */
void tpu_hostattn_register(tpu_client_t* client);

/* Whether programs compiled from now on get the rewrite. */
bool tpu_hostattn_active(void);

/* The program text with each marked line turned into the custom call.
 * *out_text is NULL when nothing was; else a malloc'ed copy (*out_len
 * bytes, NUL-terminated) the caller frees. Only for programs of one
 * device. */
tpu_status_t tpu_hostattn_rewrite(const char* text, size_t len, char** out_text,
                                  size_t* out_len);

#ifdef __cplusplus
}
#endif
#endif
