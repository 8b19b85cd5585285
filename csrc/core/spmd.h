/* Programs that XLA partitions over several local devices (SPMD, GSPMD's
 * partitioner): the text of a sharded graph (graph.h,
 * tpu_graph_create_sharded: parameters carry `mhlo.sharding`) compiled once
 * with num_partitions = N and use_spmd_partitioning for an ordered device
 * list (partition p on devices[p]), and run on every device at once in one
 * PJRT execution. XLA splits the work and inserts the collectives
 * (all-reduce, all-gather, ...) into the program; the bytes never leave the
 * devices. Programs are cached by (text, devices) for the process. */
#ifndef TORCHTPU_CORE_SPMD_H_
#define TORCHTPU_CORE_SPMD_H_

#include <stddef.h>

#include "hlo/type.h"
#include "status.h"
#include "storage.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TPU_SPMD_MAX_DEVICES 64

typedef struct tpu_spmd_program_s tpu_spmd_program_t;

/* The program for `text` on devices[0..n) (distinct client device indices,
 * 1 <= n <= TPU_SPMD_MAX_DEVICES), compiled on first use. Borrowed: the
 * cache owns it until tpu_spmd_cache_clear. A text XLA cannot partition is
 * INVALID_ARGUMENT with its diagnostic. */
tpu_status_t tpu_spmd_program_get(const char* text, size_t len, const int* devices, int n,
                                  tpu_spmd_program_t** out_program);

int tpu_spmd_program_num_devices(const tpu_spmd_program_t* program);
int tpu_spmd_program_num_outputs(const tpu_spmd_program_t* program);
/* Output k's type on one device (its shard: for a replicated output, the
 * whole value). */
tpu_hlo_type_t tpu_spmd_program_output_type(const tpu_spmd_program_t* program, int k);

/* Runs the program: inputs[d * nargs + i] holds argument i's shard on the
 * program's d-th device (a storage on that device of exactly its elements,
 * typed as input_types[d * nargs + i]); outputs[d * nouts + k] are storages
 * on device d of output k's bytes that receive the results. A storage on
 * another device, or a count the program does not take, is
 * INVALID_ARGUMENT naming it. Asynchronous like eager execution (every
 * device's completion is tracked for synchronize). */
tpu_status_t tpu_spmd_program_run(tpu_spmd_program_t* program, tpu_storage_t* const* inputs,
                                  const tpu_hlo_type_t* input_types, int nargs,
                                  tpu_storage_t* const* outputs, int nouts);

/* Destroys every cached program (before tpu_runtime_shutdown). */
void tpu_spmd_cache_clear(void);

#ifdef __cplusplus
}
#endif
#endif
