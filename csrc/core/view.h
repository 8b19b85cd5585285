/* Views over flat storages, in StableHLO. A storage's buffer is always a
 * flat 1-D array; a tensor is (sizes, strides, offset) over it. Reading a
 * tensor folds those steps into the consuming program (slice, reshape,
 * transpose, broadcast; gather only when nothing else fits); writing one
 * produces the storage's next flat array (a plain replace when the view
 * covers the storage, dynamic_update_slice for a contiguous slab, scatter
 * otherwise). */
#ifndef TORCHTPU_CORE_VIEW_H_
#define TORCHTPU_CORE_VIEW_H_

#include <stdbool.h>
#include <stdint.h>

#include "hlo/builder.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tpu_view_s {
  tpu_dtype_t dtype;
  int rank;
  int64_t sizes[TPU_HLO_MAX_RANK];
  int64_t strides[TPU_HLO_MAX_RANK]; /* in elements */
  int64_t offset;                    /* in elements */
} tpu_view_t;

/* The logical value of `view` read from `flat` (tensor<N x dtype>). */
tpu_hlo_value_t tpu_view_emit_read(tpu_hlo_builder_t* b, tpu_hlo_value_t flat,
                                   const tpu_view_t* view);
/* `flat` with `view`'s elements replaced by `value` (sizes of the view). */
tpu_hlo_value_t tpu_view_emit_write(tpu_hlo_builder_t* b, tpu_hlo_value_t flat,
                                    const tpu_view_t* view, tpu_hlo_value_t value);
/* True when the view is row-major contiguous (size-1 dims ignored). */
bool tpu_view_is_contiguous(const tpu_view_t* view);
int64_t tpu_view_numel(const tpu_view_t* view);

#ifdef __cplusplus
}
#endif
#endif
