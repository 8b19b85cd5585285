/* Collectives across devices of the runtime's client, inside one process:
 * N buffers, one per distinct device, combined by ONE XLA program run on
 * those N devices at once (N replicas, replica i on the device of input i),
 * as a device backend's process group does with NCCL. Programs are
 * compiled once per (collective, op, dtype, shape, ordered device list) and
 * kept in this module's cache; execution is asynchronous (its completion is
 * tracked per device for tpu_runtime_synchronize), so results may be used
 * at once. */
#ifndef TORCHTPU_CORE_COLLECTIVE_H_
#define TORCHTPU_CORE_COLLECTIVE_H_

#include <stddef.h>

#include "pjrt/pjrt.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* torch.distributed.ReduceOp's arithmetic ops. AVG is SUM then a division
 * by N (floating and complex only: PyTorch rejects it for integers). MIN
 * and MAX are refused for complex. Bool follows NCCL: SUM and MAX are a
 * logical or, PROD and MIN a logical and. */
typedef enum tpu_collective_op_e {
  TPU_COLLECTIVE_SUM = 0,
  TPU_COLLECTIVE_PROD,
  TPU_COLLECTIVE_MIN,
  TPU_COLLECTIVE_MAX,
  TPU_COLLECTIVE_AVG,
} tpu_collective_op_t;

const char* tpu_collective_op_name(tpu_collective_op_t op); /* "sum" ... */

/* The inputs of every collective: `n` buffers (borrowed) of one dtype and
 * shape, on n distinct devices of the runtime's client, in rank order
 * (input i is rank i). out_results receives n new buffers, result i on
 * input i's device, owned by the caller. Inputs that break these rules are
 * INVALID_ARGUMENT naming the inputs and what differs; nothing runs. */

/* Every result is the elementwise reduction of all inputs. */
tpu_status_t tpu_collective_all_reduce(tpu_buffer_t* const* inputs, int n,
                                       tpu_collective_op_t op,
                                       tpu_buffer_t** out_results);
/* Every result is the inputs concatenated along dim 0 in rank order:
 * [n * d0, ...] (a scalar input gives [n]). */
tpu_status_t tpu_collective_all_gather(tpu_buffer_t* const* inputs, int n,
                                       tpu_buffer_t** out_results);
/* The reduction of all inputs, split along dim 0 into n equal blocks:
 * result i is block i, [d0 / n, ...]. d0 must be divisible by n. */
tpu_status_t tpu_collective_reduce_scatter(tpu_buffer_t* const* inputs, int n,
                                           tpu_collective_op_t op,
                                           tpu_buffer_t** out_results);

/* Number of compiled collective programs held. */
size_t tpu_collective_cache_size(void);
/* Destroys them (tests and shutdown). Call before tpu_runtime_shutdown:
 * they belong to its client. No collective may be running. */
void tpu_collective_cache_clear(void);

#ifdef __cplusplus
}
#endif
#endif
