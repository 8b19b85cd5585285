/* Test support pointwise_test.c, activation_test.c and compare_test.c
 * share: [N]-shaped arguments, one-output runs and a tolerance check. */
#ifndef TORCHTPU_CORE_LOWER_POINTWISE_TESTING_H_
#define TORCHTPU_CORE_LOWER_POINTWISE_TESTING_H_

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "../testing.h"
#include "lower_testing.h"

#define N 8
static const int64_t kDims[1] = {N};

static inline tpu_lower_arg_t tensor(tpu_dtype_t d) { return tpu_test_tensor_arg(d, 1, kDims); }
static inline tpu_hlo_type_t out_type(tpu_dtype_t d) { return tpu_hlo_type_make(d, 1, kDims); }

/* Runs `op` with one output of `out` dtype and shape [N]. */
static inline tpu_status_t run(const char* op, const tpu_lower_arg_t* args, int nargs,
                               const void* const* data, tpu_dtype_t out, void** result) {
  tpu_hlo_type_t t = out_type(out);
  return tpu_test_run_op(op, args, nargs, NULL, data, &t, 1, result);
}

/* |got - want| within rel * |want| + abs; NaN matches NaN, inf matches inf. */
static inline bool near(double got, double want, double rel, double abs_tol) {
  if (isnan(want)) return isnan(got);
  if (isinf(want)) return got == want;
  return fabs(got - want) <= rel * fabs(want) + abs_tol;
}

#endif  // TORCHTPU_CORE_LOWER_POINTWISE_TESTING_H_
