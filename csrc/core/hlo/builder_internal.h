/* Shared between builder.c and constant.c; not part of the public API. */
#ifndef TORCHTPU_CORE_HLO_BUILDER_INTERNAL_H_
#define TORCHTPU_CORE_HLO_BUILDER_INTERNAL_H_

#include <stdbool.h>

#include "builder.h"
#include "strbuf.h"

/* Records `code: message` as the builder's error unless one is recorded. */
void tpu_hlo_fail_(tpu_hlo_builder_t* b, tpu_status_code_t code,
                   const char* fmt, ...) __attribute__((format(printf, 3, 4)));
/* True when b is usable (not NULL, no error recorded). */
bool tpu_hlo_ok_(const tpu_hlo_builder_t* b);
/* Checks dtype, rank and dims; records an error naming `what` otherwise. */
bool tpu_hlo_check_type_(tpu_hlo_builder_t* b, const tpu_hlo_type_t* type,
                         const char* what);
/* Number of elements; the type must have passed tpu_hlo_check_type_. Records
 * an error and returns -1 when it does not fit in size_t-sized bytes. */
int64_t tpu_hlo_numel_(tpu_hlo_builder_t* b, const tpu_hlo_type_t* type);
/* Emits %N = "stablehlo.constant"() {value = <literal> : <type>}. */
tpu_hlo_value_t tpu_hlo_emit_constant_(tpu_hlo_builder_t* b,
                                       tpu_hlo_type_t type,
                                       tpu_strbuf_t* literal);

#endif
