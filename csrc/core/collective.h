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
#include "storage.h"
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

typedef enum tpu_collective_kind_e {
  TPU_COLLECTIVE_ALL_REDUCE = 0,
  TPU_COLLECTIVE_ALL_GATHER,
  TPU_COLLECTIVE_REDUCE_SCATTER,
} tpu_collective_kind_t;

#define TPU_COLLECTIVE_MAX_DEVICES 64

/* The same over storages, as the torch layer holds tensors: each input
 * storage holds `numel` elements of `dtype` (its flat buffer, as storages
 * keep them: deferred contents settled, a queued producer waited for by
 * the execution, never staged through the host); result i becomes output
 * storage i's buffer. On flat buffers all_gather concatenates and
 * reduce_scatter splits the storages' element order, as NCCL does. `op`
 * is ignored for all_gather. */
tpu_status_t tpu_collective_run_storages(tpu_collective_kind_t kind, tpu_collective_op_t op,
                                         tpu_storage_t* const* inputs, tpu_dtype_t dtype,
                                         int64_t numel, int n, tpu_storage_t* const* outputs);

/* Number of compiled collective programs held. */
size_t tpu_collective_cache_size(void);
/* Destroys them (tests and shutdown). Call before tpu_runtime_shutdown:
 * they belong to its client. No collective may be running. */
void tpu_collective_cache_clear(void);

#ifdef __cplusplus
}
#endif
#endif
