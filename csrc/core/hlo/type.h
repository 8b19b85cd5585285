/* A tensor type as StableHLO spells it (tensor<2x3xf32>): a dtype and
 * static dims. A plain value that needs no builder, so code that only
 * compares or prints types (kernel signatures, fused deferred modules)
 * depends on this alone. */
#ifndef TORCHTPU_CORE_HLO_TYPE_H_
#define TORCHTPU_CORE_HLO_TYPE_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TPU_HLO_MAX_RANK 16

typedef struct tpu_hlo_type_s {
  tpu_dtype_t dtype;
  int rank; /* 0 = scalar */
  int64_t dims[TPU_HLO_MAX_RANK];
} tpu_hlo_type_t;

/* An out-of-range rank is kept and missing dims (dims NULL) become -1, so
 * the builder that receives the type reports them. */
tpu_hlo_type_t tpu_hlo_type_make(tpu_dtype_t dtype, int rank,
                                 const int64_t* dims);
tpu_hlo_type_t tpu_hlo_type_scalar(tpu_dtype_t dtype);
bool tpu_hlo_type_equal(const tpu_hlo_type_t* a, const tpu_hlo_type_t* b);
int64_t tpu_hlo_type_numel(const tpu_hlo_type_t* type);
/* Same dtype and element count: one is a reshape of the other. */
bool tpu_hlo_type_same_elements(const tpu_hlo_type_t* a, const tpu_hlo_type_t* b);
/* The same elements as one dimension (how storages and flat programs hold
 * them). */
tpu_hlo_type_t tpu_hlo_type_flat(const tpu_hlo_type_t* type);

/* Appends "tensor<2x3xf32>" to sb (strbuf.h). */
struct tpu_strbuf_s;
void tpu_hlo_type_append(struct tpu_strbuf_s* sb, const tpu_hlo_type_t* type);
/* Writes "tensor<2x3xf32>" into out (NUL-terminated, truncated to cap). */
void tpu_hlo_type_print(const tpu_hlo_type_t* type, char* out, size_t cap);

#ifdef __cplusplus
}
#endif
#endif
