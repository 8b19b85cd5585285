#include "literal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* Rounds a double to a binary float with `ebits` exponent bits and `mbits`
 * stored mantissa bits (both IEEE-style: bias 2^(ebits-1)-1, subnormals,
 * all-ones exponent for inf/NaN). Returns the bit pattern. */
static uint32_t narrow_double(double value, int ebits, int mbits) {
  uint64_t d;
  memcpy(&d, &value, sizeof d);
  uint32_t sign = (uint32_t)(d >> 63) << (ebits + mbits);
  int dexp = (int)((d >> 52) & 0x7FF);
  uint64_t dman = d & ((UINT64_C(1) << 52) - 1);
  uint64_t inf_bits = (((UINT64_C(1) << ebits) - 1)) << mbits;

  if (dexp == 0x7FF) {
    if (dman == 0) return sign | (uint32_t)inf_bits;
    /* NaN: quiet, keeping the payload bits that fit. */
    uint64_t payload = dman >> (52 - mbits);
    return sign | (uint32_t)(inf_bits | payload | (UINT64_C(1) << (mbits - 1)));
  }
  /* Double subnormals are far below the smallest f16/bf16 subnormal. */
  if (dexp == 0) return sign;

  int bias = (1 << (ebits - 1)) - 1;
  int e = dexp - 1023;                        /* value = sig * 2^(e-52) */
  uint64_t sig = (UINT64_C(1) << 52) | dman;  /* 53 significant bits */
  int min_normal_e = 1 - bias;
  /* The target's unit in the last place is 2^(q); drop the bits below it. */
  int q = (e > min_normal_e ? e : min_normal_e) - mbits;
  int shift = q - (e - 52);
  uint64_t m;
  if (shift > 54) {
    m = 0; /* below half the smallest subnormal */
  } else {
    m = sig >> shift;
    uint64_t rest = sig & ((UINT64_C(1) << shift) - 1);
    uint64_t half = UINT64_C(1) << (shift - 1);
    if (rest > half || (rest == half && (m & 1))) m++;
  }
  uint64_t bits;
  if (e >= min_normal_e) {
    /* m in [2^mbits, 2^(mbits+1)]; a carry out bumps the exponent. */
    bits = ((uint64_t)(e + bias) << mbits) + (m - (UINT64_C(1) << mbits));
  } else {
    bits = m; /* subnormal; m == 2^mbits is exactly the smallest normal */
  }
  if (bits > inf_bits) bits = inf_bits;
  return sign | (uint32_t)bits;
}

uint16_t tpu_hlo_half_bits(double value) {
  return (uint16_t)narrow_double(value, 5, 10);
}

uint16_t tpu_hlo_bfloat16_bits(double value) {
  return (uint16_t)narrow_double(value, 8, 7);
}

/* MLIR lexes a number as a float only if it has a '.', so "1" and "1e+10"
 * become "1.0" and "1.0e+10". */
static void append_decimal(tpu_strbuf_t* sb, const char* text) {
  if (strchr(text, '.')) {
    tpu_strbuf_append(sb, text);
    return;
  }
  const char* exp = strpbrk(text, "eE");
  size_t mantissa = exp ? (size_t)(exp - text) : strlen(text);
  tpu_strbuf_append_n(sb, text, mantissa);
  tpu_strbuf_append(sb, ".0");
  if (exp) tpu_strbuf_append(sb, exp);
}

static void append_f32(tpu_strbuf_t* sb, float f) {
  if (!isfinite(f)) {
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    tpu_strbuf_appendf(sb, "0x%08X", bits);
    return;
  }
  char text[32];
  snprintf(text, sizeof text, "%.9g", (double)f);
  append_decimal(sb, text);
}

void tpu_hlo_append_float_literal(tpu_strbuf_t* sb, tpu_dtype_t dtype,
                                  double value) {
  switch (dtype) {
    case TPU_DTYPE_FLOAT16:
      tpu_strbuf_appendf(sb, "0x%04X", tpu_hlo_half_bits(value));
      return;
    case TPU_DTYPE_BFLOAT16:
      tpu_strbuf_appendf(sb, "0x%04X", tpu_hlo_bfloat16_bits(value));
      return;
    case TPU_DTYPE_FLOAT32:
      append_f32(sb, (float)value);
      return;
    case TPU_DTYPE_FLOAT64:
      if (!isfinite(value)) {
        uint64_t bits;
        memcpy(&bits, &value, sizeof bits);
        tpu_strbuf_appendf(sb, "0x%016llX", (unsigned long long)bits);
      } else {
        char text[40];
        snprintf(text, sizeof text, "%.17g", value);
        append_decimal(sb, text);
      }
      return;
    default:
      tpu_strbuf_append(sb, "<not a float dtype>");
      return;
  }
}

void tpu_hlo_append_complex_literal(tpu_strbuf_t* sb, tpu_dtype_t dtype,
                                    double real, double imag) {
  tpu_dtype_t part = tpu_dtype_complex_part(dtype);
  if (part != TPU_DTYPE_FLOAT64) part = TPU_DTYPE_FLOAT32;
  tpu_strbuf_append(sb, "(");
  tpu_hlo_append_float_literal(sb, part, real);
  tpu_strbuf_append(sb, ",");
  tpu_hlo_append_float_literal(sb, part, imag);
  tpu_strbuf_append(sb, ")");
}
