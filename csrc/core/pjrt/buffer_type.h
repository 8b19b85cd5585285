/* The element types of PJRT buffers and the dtypes they carry. Private to
 * the PJRT layer (it names pjrt_c_api.h types). */
#ifndef TORCHTPU_CORE_PJRT_BUFFER_TYPE_H_
#define TORCHTPU_CORE_PJRT_BUFFER_TYPE_H_

#include "../dtype.h"
#include "pjrt_c_api.h"

PJRT_Buffer_Type tpu_pjrt_buffer_type(tpu_dtype_t dtype); /* INVALID if not a dtype */
tpu_dtype_t tpu_pjrt_dtype(PJRT_Buffer_Type type);        /* INVALID if unmapped */
/* Short names as XLA spells them ("f32"), for errors about unmapped types. */
const char* tpu_pjrt_buffer_type_name(PJRT_Buffer_Type type);

#endif  // TORCHTPU_CORE_PJRT_BUFFER_TYPE_H_
