/* Reads the parameter and result types of @main from StableHLO text, so
 * callers can check tensors against a module they did not build. PJRT
 * checks arguments only by byte size (a 2x3 i32 passes for a 2x3 f32), so
 * without this a wrong dtype would be silently reinterpreted. */
#ifndef TORCHTPU_CORE_HLO_SIGNATURE_H_
#define TORCHTPU_CORE_HLO_SIGNATURE_H_

#include <stddef.h>
#include <stdint.h>

#include "../status.h"
#include "builder.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Parses `func.func ... @main(...)`'s argument types into out_params
 * (capacity entries; *out_num_params gets the true count). Understands
 * tensor<AxBxT> with T one of our dtypes; anything else (dynamic dims,
 * tuples, tokens) is INVALID_ARGUMENT naming the argument. */
tpu_status_t tpu_hlo_parse_main_params(const char* text, size_t len,
                                       tpu_hlo_type_t* out_params,
                                       size_t capacity, size_t* out_num_params);

/* Parses one type such as "tensor<2x3xf32>" or "tensor<complex<f32>>". */
tpu_status_t tpu_hlo_parse_type(const char* text, size_t len,
                                tpu_hlo_type_t* out_type);

/* Bytes of the largest ranked tensor type written anywhere in the module
 * (arguments, results, intermediates); types it cannot read (dynamic
 * dims, tokens) count as 0. */
int64_t tpu_hlo_largest_tensor_bytes(const char* text, size_t len);

#ifdef __cplusplus
}
#endif
#endif
