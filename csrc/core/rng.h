/* The device generator: per device, a state of two int64 words (seed,
 * offset) in a storage of its own, so a program that draws random bits (an
 * eager op, a deferred run, a compiled graph) takes it as an argument and
 * returns the advanced state, like any tensor's contents. The eager engine
 * and the graph builder both thread it; PyTorch's generator (csrc/torch)
 * seeds and reads it. */
#ifndef TORCHTPU_CORE_RNG_H_
#define TORCHTPU_CORE_RNG_H_

#include <stdint.h>

#include "status.h"
#include "storage.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The state's storage (2 x int64; borrowed: it lives as long as the
 * process), created with state (0, 0) on first use. Its 16 bytes are not
 * user memory: they are not counted in the device's allocated bytes.
 * OUT_OF_RANGE for a bad device index. */
tpu_status_t tpu_rng_storage(int device, tpu_storage_t** out_storage);

/* Seeds the generator: state (seed, 0). */
tpu_status_t tpu_rng_seed(int device, uint64_t seed);
/* Current (seed, offset) words, for get_rng_state. */
tpu_status_t tpu_rng_get_state(int device, int64_t out_state[2]);
tpu_status_t tpu_rng_set_state(int device, const int64_t state[2]);

/* Held by an execution from taking the state to storing the advanced one,
 * so concurrent draws (and a set_state) serialise. Not recursive. */
void tpu_rng_lock(void);
void tpu_rng_unlock(void);

#ifdef __cplusplus
}
#endif
#endif
