/* Eager calls for the C tests (eager_call_test.c, eager_test.c): whole,
 * contiguous float32 storages and Python-float scalars. */
#ifndef TORCHTPU_CORE_EAGER_TESTING_H_
#define TORCHTPU_CORE_EAGER_TESTING_H_

#include <string.h>

#include "eager_call.h"

__attribute__((unused)) static tpu_eager_tensor_t contiguous(tpu_storage_t* s, int64_t n) {
  return (tpu_eager_tensor_t){
      .storage = s,
      .view = {.dtype = TPU_DTYPE_FLOAT32, .rank = 1, .sizes = {n}, .strides = {1}},
      .storage_numel = n};
}

__attribute__((unused)) static tpu_eager_arg_t tensor_arg(tpu_eager_tensor_t t) {
  tpu_eager_arg_t a;
  memset(&a, 0, sizeof a);
  a.lower.kind = TPU_ARG_TENSOR;
  a.tensor = t;
  a.lower.type = tpu_hlo_type_make(t.view.dtype, t.view.rank, t.view.sizes);
  return a;
}

__attribute__((unused)) static tpu_eager_arg_t double_arg(double v) {
  tpu_eager_arg_t a;
  memset(&a, 0, sizeof a);
  a.lower.kind = TPU_ARG_SCALAR;
  a.lower.type = tpu_hlo_type_scalar(TPU_DTYPE_FLOAT64);
  a.lower.wrapped_number = true;
  memcpy(a.scalar, &v, sizeof v);
  return a;
}

#endif
