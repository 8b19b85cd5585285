/* The lowering table: ATen-level ops -> StableHLO programs, one small
 * function per op family built from shared emit helpers (broadcast,
 * conversion). Every mode of the device (and torch.compile later) lowers
 * through here, so a fix here is a fix everywhere.
 *
 * Each function returns a whole module whose @main takes the op's tensor
 * operands (and runtime scalars as rank-0 arguments, so changing a scalar
 * never changes the program) and returns its result. */
#ifndef TORCHTPU_CORE_LOWER_H_
#define TORCHTPU_CORE_LOWER_H_

#include <stddef.h>

#include "hlo/builder.h"
#include "lower/emit.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tpu_binary_op_e {
  TPU_BINARY_ADD,
  TPU_BINARY_SUB,
  TPU_BINARY_MUL,
  TPU_BINARY_DIV, /* true division: floating dtypes only */
  TPU_BINARY_MAX,
  TPU_BINARY_MIN,
  TPU_BINARY_COUNT,
} tpu_binary_op_t;

/* out = lhs <op> rhs with numpy broadcasting; all three share `out`'s
 * dtype (the caller has already promoted). *out_text is malloc'd. */
tpu_status_t tpu_lower_binary(tpu_binary_op_t op, const tpu_hlo_type_t* lhs,
                              const tpu_hlo_type_t* rhs,
                              const tpu_hlo_type_t* out, char** out_text,
                              size_t* out_len);

/* out[m, n] = lhs[m, k] @ rhs[k, n]. Half-precision inputs accumulate in
 * float32, as PyTorch's CPU kernels do. */
tpu_status_t tpu_lower_matmul(const tpu_hlo_type_t* lhs,
                              const tpu_hlo_type_t* rhs, char** out_text,
                              size_t* out_len);

/* out = broadcast of a rank-0 runtime argument of out's dtype. */
tpu_status_t tpu_lower_fill(const tpu_hlo_type_t* out, char** out_text,
                            size_t* out_len);

#ifdef __cplusplus
}
#endif
#endif
