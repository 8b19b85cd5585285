/* The op families of the lowering table. Each family file defines
 *   const tpu_lowering_t tpu_lowerings_<name>[];
 *   const size_t tpu_lowerings_<name>_count;
 * Add a family: one TPU_FAMILY line here, one file beside this. */
#ifndef TORCHTPU_CORE_LOWER_FAMILIES_H_
#define TORCHTPU_CORE_LOWER_FAMILIES_H_

#include <stddef.h>

#include "lowering.h"

#define TPU_LOWERING_FAMILIES \
  TPU_FAMILY(basic) \
  TPU_FAMILY(pointwise) \
  TPU_FAMILY(activation) \
  TPU_FAMILY(compare) \
  TPU_FAMILY(reduce) \
  TPU_FAMILY(pnorm) \
  TPU_FAMILY(linalg) \
  TPU_FAMILY(nn) \
  TPU_FAMILY(attention) \
  TPU_FAMILY(loss) \
  TPU_FAMILY(rnn) \
  TPU_FAMILY(conv) \
  TPU_FAMILY(pool) \
  TPU_FAMILY(index) \
  TPU_FAMILY(dynamic) \
  TPU_FAMILY(shape) \
  TPU_FAMILY(sort) \
  TPU_FAMILY(search) \
  TPU_FAMILY(fft) \
  TPU_FAMILY(factor) \
  TPU_FAMILY(orthogonal) \
  TPU_FAMILY(polynomial) \
  TPU_FAMILY(segment) \
  TPU_FAMILY(special) \
  TPU_FAMILY(resample) \
  TPU_FAMILY(fractional) \
  TPU_FAMILY(factory) \
  TPU_FAMILY(foreach) \
  TPU_FAMILY(view_values)

#define TPU_FAMILY(name)                            \
  extern const tpu_lowering_t tpu_lowerings_##name[]; \
  extern const size_t tpu_lowerings_##name##_count;
TPU_LOWERING_FAMILIES
#undef TPU_FAMILY

/* Rows one family shares with another. */
/* Python's // of operands 0 and 1 (pointwise.c): div's rounding_mode="floor"
 * of floats is the same (PyTorch's div_floor_floating for both). */
tpu_status_t tpu_lower_floor_divide(tpu_lower_ctx_t* ctx);
/* digamma as PyTorch (pointwise.c): -inf at +0, +inf at -0; polygamma's
 * order 0 (special.c). */
tpu_hlo_value_t tpu_emit_digamma(tpu_hlo_builder_t* b, tpu_hlo_value_t x);

#endif
