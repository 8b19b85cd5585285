/* Exact text for StableHLO constant elements, and the float narrowing the
 * printer needs (double -> f16 / bf16 with round-to-nearest-even), kept apart
 * from the builder so each rule is tested on its own. */
#ifndef TORCHTPU_CORE_HLO_LITERAL_H_
#define TORCHTPU_CORE_HLO_LITERAL_H_

#include <stdint.h>

#include "../dtype.h"
#include "strbuf.h"

/* IEEE binary16 / bfloat16 bits of `value`, rounded to nearest even
 * (overflow -> inf; NaN -> quiet NaN keeping sign and top payload bits). */
uint16_t tpu_hlo_half_bits(double value);
uint16_t tpu_hlo_bfloat16_bits(double value);

/* Appends one float element as MLIR parses it back bit-exactly:
 *   f32: the value rounded to float, finite -> "%.9g" with a '.' (1.0, 1.0e+10)
 *   f64: finite -> "%.17g" with a '.'
 *   non-finite f32/f64 and every f16/bf16 value -> hex bits (0x7FC00000).
 * `dtype` must be floating. */
void tpu_hlo_append_float_literal(tpu_strbuf_t* sb, tpu_dtype_t dtype,
                                  double value);

/* Appends "(re,im)" for a complex element of `dtype` (complex64 or
 * complex128), each part as a literal of its part type (f32 or f64). */
void tpu_hlo_append_complex_literal(tpu_strbuf_t* sb, tpu_dtype_t dtype,
                                    double real, double imag);

#endif
