/* Custom kernels: a user's StableHLO module (written by hand or lowered
 * from JAX / Pallas) made callable inside our programs.
 *
 * The module's functions are renamed under a prefix unique to the kernel
 * (@main becomes the private @k<id>_main, every other symbol @k<id>_<name>)
 * so they can sit beside other code in one module:
 *   - eager: a wrapper module whose @main takes flat storages' buffers,
 *     reshapes them, calls the kernel and returns flat results, so a call
 *     runs on the tensors' storages with no copy (graph.h's tpu_graph_run);
 *   - torch.compile: graph.h's tpu_graph_add_kernel inlines it into a graph
 *     (XLA inlines the call and fuses across it); graph.h includes this
 *     header, never the reverse. */
#ifndef TORCHTPU_CORE_KERNEL_H_
#define TORCHTPU_CORE_KERNEL_H_

#include <stddef.h>

#include "hlo/builder.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tpu_kernel_s tpu_kernel_t;

/* Parses `text` (a module, or bare func.func definitions, with a public
 * @main of static tensor types). Errors name the kernel: `name` is only for
 * messages. */
tpu_status_t tpu_kernel_create(const char* name, const char* text, size_t len,
                               tpu_kernel_t** out_kernel);
void tpu_kernel_destroy(tpu_kernel_t* kernel); /* NULL is fine */

int tpu_kernel_num_params(const tpu_kernel_t* kernel);
int tpu_kernel_num_results(const tpu_kernel_t* kernel);
tpu_hlo_type_t tpu_kernel_param(const tpu_kernel_t* kernel, int i);
tpu_hlo_type_t tpu_kernel_result(const tpu_kernel_t* kernel, int i);
/* The renamed functions, and the name of the entry among them. */
const char* tpu_kernel_functions(const tpu_kernel_t* kernel);
const char* tpu_kernel_entry(const tpu_kernel_t* kernel);

/* The eager wrapper: flat parameters and results (malloc'd text). */
tpu_status_t tpu_kernel_flat_module(const tpu_kernel_t* kernel, char** out_text,
                                    size_t* out_len);

#ifdef __cplusplus
}
#endif
#endif
