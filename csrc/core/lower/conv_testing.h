/* Test support conv_test.c and pool_test.c share: argument constructors,
 * small-integer data and an elementwise comparison. */
#ifndef TORCHTPU_CORE_LOWER_CONV_TESTING_H_
#define TORCHTPU_CORE_LOWER_CONV_TESTING_H_

#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include "lower_testing.h"

static inline tpu_lower_arg_t f32_arg(int rank, const int64_t* dims) {
  return tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, rank, dims);
}

/* Small integers in [-3, 3] (ties for the max pools, exact sums). */
static inline void fill(float* a, int64_t n, uint32_t seed) {
  for (int64_t i = 0; i < n; i++) {
    seed = seed * 1664525u + 1013904223u;
    a[i] = (float)((int)((seed >> 16) % 7) - 3);
  }
}

static inline bool close_to(const float* got, const float* want, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    bool both_nan = isnan(got[i]) && isnan(want[i]);
    if (!both_nan && !(fabsf(got[i] - want[i]) <= 1e-4f * (1 + fabsf(want[i])))) {
      fprintf(stderr, "  element %lld: got %g want %g\n", (long long)i, got[i], want[i]);
      return false;
    }
  }
  return true;
}

#endif
