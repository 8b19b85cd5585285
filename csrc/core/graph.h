/* The graph builder for torch.compile: a whole FX graph (AOTAutograd's
 * functional ATen graph) becomes ONE StableHLO module, every node lowered
 * by the same table the eager modes use.
 *
 *   tpu_graph_create(input types, with_rng)  -> @main parameters
 *   tpu_graph_add_node(op, args, outputs)    -> the row's lowering, emitted
 *                                               on the graph's values
 *   tpu_graph_finish(outputs)                -> module text
 *
 * Parameters and results are flat (tensor<N x dtype>), like storages'
 * buffers, so a run passes storages' buffers straight in and installs the
 * results as fresh storages' contents; the reshapes to and from the
 * logical types are free in XLA.
 *
 * Values are small dense ids: inputs are 0..num_inputs-1, each node's
 * outputs take the next ids. A node's tensor arguments name values;
 * its scalars are constants of the graph (a graph is specialised on them,
 * as Dynamo specialises Python numbers), structural arguments are as in
 * eager. With with_rng, the device generator's state (2 x int64) is the
 * last parameter and its final value the last result, so RNG nodes draw
 * from and advance the same generator as eager ops. */
#ifndef TORCHTPU_CORE_GRAPH_H_
#define TORCHTPU_CORE_GRAPH_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "defer.h"
#include "kernel.h"
#include "lower/lowering.h"
#include "program.h"
#include "status.h"
#include "storage.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tpu_graph_s tpu_graph_t;

/* One argument of a node. lower.kind says which fields count:
 *   TENSOR   value (lower.type is taken from the value)
 *   TENSORS  lower.num_tensors values from values[] starting at list_start
 *            (and lower.ints/num_ints for an optional list, as in eager)
 *   SCALAR   a constant: lower.type.dtype is FLOAT64 (f), INT64 / BOOL (i)
 *            or COMPLEX64 (f, f_imag)
 *   SCALARS  lower.num_tensors constants from scalars[]
 *   others   lower's structural payload, as in eager */
typedef struct tpu_graph_arg_s {
  tpu_lower_arg_t lower;
  int value;
  int list_start;
  double f, f_imag;
  int64_t i;
  const double* scalars;
} tpu_graph_arg_t;

tpu_status_t tpu_graph_create(const tpu_hlo_type_t* input_types, int num_inputs, bool with_rng,
                              tpu_graph_t** out_graph);
void tpu_graph_destroy(tpu_graph_t* graph); /* NULL is fine */

/* Precision of the float32 products of nodes added from now on (the eager
 * engine's, see tpu_hlo_builder_set_precision). */
void tpu_graph_set_precision(tpu_graph_t* graph, tpu_hlo_precision_t precision);

/* Whether the table row for `op_name` ("aten::bernoulli.p") draws random
 * bits (the graph then needs with_rng), and whether the table has it. */
bool tpu_graph_op_supported(const char* op_name);
bool tpu_graph_op_needs_rng(const char* op_name);

/* Lowers one node. values[] holds the value ids TENSORS args point into.
 * output_types are the node's results (PyTorch's fake tensors say them);
 * out_values receives their ids. Fails (naming the op) when the table has
 * no row, the row declines, or a value id is unknown; the graph is then
 * unusable (its builder error is sticky). */
tpu_status_t tpu_graph_add_node(tpu_graph_t* graph, const char* op_name,
                                const tpu_graph_arg_t* args, int num_args, const int* values,
                                int num_values, const tpu_hlo_type_t* output_types,
                                int num_outputs, int* out_values);

/* Calls a custom kernel (kernel.h) inside the graph on values
 * args[0..num_params) (their types must equal the kernel's parameters);
 * out_values receives its results' ids. */
tpu_status_t tpu_graph_add_kernel(tpu_graph_t* graph, const tpu_kernel_t* kernel, const int* args,
                                  int num_args, int* out_values);

int tpu_graph_num_values(const tpu_graph_t* graph);
/* The type of value `id` (dtype INVALID when unknown). */
tpu_hlo_type_t tpu_graph_value_type(const tpu_graph_t* graph, int id);

/* Ends the graph returning these values (then the generator state, with
 * with_rng) and gives the module text (malloc'd; caller frees). */
tpu_status_t tpu_graph_finish(tpu_graph_t* graph, const int* outputs, int num_outputs,
                              char** out_text, size_t* out_len);

/* The text of a finished graph (no generator state) prepared for XLA's SPMD
 * partitioner (spmd.h): parameter i takes its shape, input_types[i], in
 * place of its flat form and carries shardings[i] as `mhlo.sharding`
 * (GSPMD's text form, "{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}";
 * NULL: "{replicated}"); the reshape that read it becomes a no-op. Results
 * stay flat and are replicated (every device gets the whole value). A
 * sharding with a quote or backslash, or a text that is not such a graph's,
 * is INVALID_ARGUMENT. *out_text is malloc'd. */
tpu_status_t tpu_graph_shard_text(const char* text, size_t len, const tpu_hlo_type_t* input_types,
                                  const char* const* shardings, int num_inputs, char** out_text,
                                  size_t* out_len);

/* Runs a compiled graph (program.h) on `device`. inputs[i] holds input i's
 * contents (a storage of exactly its elements, as input_types[i].dtype);
 * outputs[i] are fresh storages of output i's bytes that receive the
 * results. With with_rng the device generator's state goes in last and its
 * new value replaces it. Asynchronous like eager execution. */
tpu_status_t tpu_graph_run(tpu_program_t* program, int device, tpu_storage_t* const* inputs,
                           const tpu_hlo_type_t* input_types, int num_inputs, bool with_rng,
                           tpu_storage_t* const* outputs, int num_outputs);

/* A compiled graph as an op of a device's deferred run (defer.h), so that
 * graphs called one after another (a training step's forward, backward and
 * optimizer step) run as ONE fused program at the next host read, as a
 * DeferAndFuse run of eager ops does: XLA then fuses across them and never
 * materialises what only the next graph reads. `text` is the graph's
 * module, the types its logical inputs and outputs (the op's parameters
 * and results are their flat forms, then the generator state with
 * with_rng). *out_op is NULL (and the status OK) for a graph that cannot
 * join a run: one that calls custom kernels, whose functions two graphs
 * would define twice in one module. Ops are interned by text and live as
 * long as the process: a run's fused programs are keyed by op identity,
 * so an op is never freed and its address never reused for another graph. */
tpu_status_t tpu_graph_defer_op(const char* text, size_t len, const tpu_hlo_type_t* input_types,
                                int num_inputs, const tpu_hlo_type_t* output_types,
                                int num_outputs, bool with_rng, const tpu_defer_op_t** out_op);

/* Records a run of `op` (from tpu_graph_defer_op) in `device`'s run, with
 * tpu_graph_run's inputs and outputs: the outputs' storages hold the
 * results once the run is flushed (any access to them flushes it). */
tpu_status_t tpu_graph_record(const tpu_defer_op_t* op, int device, tpu_storage_t* const* inputs,
                              int num_inputs, bool with_rng, tpu_storage_t* const* outputs,
                              int num_outputs);

#ifdef __cplusplus
}
#endif
#endif
