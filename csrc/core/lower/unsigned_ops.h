/* Which ops take uint16/uint32/uint64 operands.
 *
 * PyTorch gives these dtypes a "barebones" op set: its CPU kernels raise
 * NotImplementedError ("add_stub" not implemented for 'UInt32') for most
 * ops, add and comparisons other than eq/ne included. A device that computed
 * those would disagree with CPU, so a lowering runs for such operands only
 * when the op is in the list below (what CPU PyTorch 2.13 computes for
 * them); any other call is declined, runs on the CPU fallback, and raises
 * there exactly as CPU does. */
#ifndef TORCHTPU_CORE_LOWER_UNSIGNED_OPS_H_
#define TORCHTPU_CORE_LOWER_UNSIGNED_OPS_H_

#include <stdbool.h>

#include "lowering.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Whether the op of base name `base` (its `len` bytes: "mul", "sum", "eq",
 * see tpu_lowering_base_name) may lower with barebones-unsigned operands;
 * args is the call's arguments (div takes them only without a rounding
 * mode). */
bool tpu_unsigned_op_allowed(const char* base, size_t len, const tpu_lower_arg_t* args,
                             int num_args);

#ifdef __cplusplus
}
#endif
#endif
