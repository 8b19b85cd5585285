/* Test support nn_test.c and loss_test.c share: argument constructors,
 * pseudo-random data and comparison against double-precision values. */
#ifndef TORCHTPU_CORE_LOWER_NN_TESTING_H_
#define TORCHTPU_CORE_LOWER_NN_TESTING_H_

#include <math.h>
#include <string.h>

#include "../testing.h"
#include "lower_testing.h"

static inline tpu_lower_arg_t f32(int rank, const int64_t* dims) {
  return tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, rank, dims);
}

static inline bool close_to(double got, double want, double tol) {
  if (isnan(want)) return isnan(got);
  if (isinf(want)) return got == want;
  return fabs(got - want) <= tol * (1 + fabs(want));
}

static inline void check_all(const float* got, const double* want, int n, double tol) {
  for (int i = 0; i < n; i++) {
    if (!close_to(got[i], want[i], tol)) {
      fprintf(stderr, "  element %d: got %.8g want %.8g\n", i, got[i], want[i]);
      CHECK(false);
      return;
    }
  }
}

/* Pseudo-random test data in [-2, 2]. */
static inline void fill(float* x, int n, unsigned seed) {
  for (int i = 0; i < n; i++) {
    seed = seed * 1103515245u + 12345u;
    x[i] = (float)((seed >> 8) % 4001) / 1000.0f - 2.0f;
  }
}

#endif
