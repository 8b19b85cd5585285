/* The lowering context's layout, shared by the code that builds programs
 * around a lowering (the plain builder in table.c, the eager engine). */
#ifndef TORCHTPU_CORE_LOWER_CTX_INTERNAL_H_
#define TORCHTPU_CORE_LOWER_CTX_INTERNAL_H_

#include "lowering.h"

struct tpu_lower_ctx_s {
  tpu_hlo_builder_t* b;
  const char* op_name;
  const tpu_lower_arg_t* args;
  int num_args;
  tpu_hlo_value_t* arg_values;  /* per arg: TENSOR value, or SCALAR value */
  int* list_offset;             /* per arg: first index into list_values */
  tpu_hlo_value_t* list_values; /* TENSORS args, flattened */
  const tpu_hlo_type_t* list_types;
  int num_outputs;
  const tpu_hlo_type_t* output_types;
  tpu_hlo_value_t* outputs;
  tpu_hlo_value_t rng_state; /* tensor<2xui64>, invalid when the op has none */
  tpu_status_t declined;     /* set by tpu_lower_decline */
  intptr_t data;             /* the row's data word */
};

/* Runs `row`'s lowering over a prepared ctx and checks every output was set
 * with its declared type. */
tpu_status_t tpu_lower_ctx_run(tpu_lower_ctx_t* ctx, const tpu_lowering_t* row);

#endif
