/* tpu_hlo_constant_*: "stablehlo.constant" with exactly printed values. */
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "builder.h"
#include "builder_internal.h"
#include "literal.h"
#include "strbuf.h"

/* Hex-string constants are the host's bytes; MLIR reads them little-endian. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "tpu_hlo_constant_dense assumes a little-endian host"
#endif

tpu_hlo_value_t tpu_hlo_emit_constant_(tpu_hlo_builder_t* b,
                                       tpu_hlo_type_t type,
                                       tpu_strbuf_t* literal) {
  tpu_hlo_value_t invalid = {-1};
  tpu_strbuf_t attrs = {0};
  tpu_strbuf_append(&attrs, "value = ");
  tpu_strbuf_append(&attrs, literal->data ? literal->data : "");
  tpu_strbuf_append(&attrs, " : ");
  tpu_hlo_type_append(&attrs, &type);
  if (literal->failed || attrs.failed) {
    tpu_hlo_fail_(b, TPU_STATUS_RESOURCE_EXHAUSTED,
                  "HLO builder: out of host memory printing a constant");
    tpu_strbuf_free(&attrs);
    return invalid;
  }
  tpu_hlo_value_t v = tpu_hlo_op(b, "stablehlo.constant", NULL, 0, type,
                                 attrs.data);
  tpu_strbuf_free(&attrs);
  return v;
}

/* Checks the type and that its dtype is one of the kinds a constant_* entry
 * point can print. */
static bool check(tpu_hlo_builder_t* b, const tpu_hlo_type_t* type,
                  const char* what) {
  return tpu_hlo_ok_(b) && tpu_hlo_check_type_(b, type, what);
}

static tpu_hlo_value_t emit(tpu_hlo_builder_t* b, tpu_hlo_type_t type,
                            tpu_strbuf_t* literal) {
  tpu_hlo_value_t v = tpu_hlo_emit_constant_(b, type, literal);
  tpu_strbuf_free(literal);
  return v;
}

/* Integer ranges as (min, max) of a signed view plus an unsigned max. */
static bool int_fits(tpu_dtype_t dtype, bool negative, uint64_t magnitude) {
  uint64_t max_pos = 0, max_neg = 0; /* largest magnitudes allowed */
  switch (dtype) {
    case TPU_DTYPE_BOOL: max_pos = 1; break;
    case TPU_DTYPE_UINT8: max_pos = UINT8_MAX; break;
    case TPU_DTYPE_UINT16: max_pos = UINT16_MAX; break;
    case TPU_DTYPE_UINT32: max_pos = UINT32_MAX; break;
    case TPU_DTYPE_UINT64: max_pos = UINT64_MAX; break;
    case TPU_DTYPE_INT8: max_pos = INT8_MAX; max_neg = 128; break;
    case TPU_DTYPE_INT16: max_pos = INT16_MAX; max_neg = 32768; break;
    case TPU_DTYPE_INT32: max_pos = INT32_MAX; max_neg = UINT64_C(1) << 31; break;
    case TPU_DTYPE_INT64: max_pos = INT64_MAX; max_neg = UINT64_C(1) << 63; break;
    default: return false;
  }
  return negative ? magnitude <= max_neg : magnitude <= max_pos;
}

/* An integer as a double that still rounds correctly to `dtype`: f64 gets
 * the nearest double; narrower formats get it exact below 2^53, else
 * rounded to odd (truncated with a sticky low bit), which keeps their later
 * round-to-nearest-even from rounding twice. */
static double integer_as_double(tpu_dtype_t dtype, bool negative,
                                uint64_t magnitude) {
  double value = (double)magnitude;
  if (tpu_dtype_complex_part(dtype) != TPU_DTYPE_FLOAT64 && magnitude >> 53) {
    int shift = 64 - 53 - __builtin_clzll(magnitude); /* 1 .. 11 */
    uint64_t kept = magnitude >> shift;
    if (magnitude & ((UINT64_C(1) << shift) - 1)) kept |= 1;
    value = ldexp((double)kept, shift);
  }
  return negative ? -value : value;
}

/* An integer given as sign and magnitude, so int64 min and uint64 max both
 * print exactly. Integral and bool dtypes are range-checked; float and
 * complex dtypes get the value converted. */
static tpu_hlo_value_t constant_integer(tpu_hlo_builder_t* b,
                                        tpu_hlo_type_t type, bool negative,
                                        uint64_t magnitude, const char* what) {
  tpu_hlo_value_t invalid = {-1};
  if (!check(b, &type, what)) return invalid;
  tpu_strbuf_t lit = {0};
  tpu_strbuf_append(&lit, "dense<");
  if (tpu_dtype_is_floating(type.dtype)) {
    tpu_hlo_append_float_literal(
        &lit, type.dtype, integer_as_double(type.dtype, negative, magnitude));
  } else if (tpu_dtype_is_complex(type.dtype)) {
    double real = integer_as_double(type.dtype, negative, magnitude);
    tpu_hlo_append_complex_literal(&lit, type.dtype, real, 0.0);
  } else if (!int_fits(type.dtype, negative, magnitude)) {
    tpu_hlo_fail_(b, TPU_STATUS_OUT_OF_RANGE,
                  "%s: %s%" PRIu64 " does not fit in %s", what,
                  negative ? "-" : "", magnitude, tpu_dtype_name(type.dtype));
    tpu_strbuf_free(&lit);
    return invalid;
  } else if (type.dtype == TPU_DTYPE_BOOL) {
    tpu_strbuf_append(&lit, magnitude ? "true" : "false");
  } else {
    tpu_strbuf_appendf(&lit, "%s%" PRIu64, negative ? "-" : "", magnitude);
  }
  tpu_strbuf_append(&lit, ">");
  return emit(b, type, &lit);
}

tpu_hlo_value_t tpu_hlo_constant_int(tpu_hlo_builder_t* b, tpu_hlo_type_t type,
                                     int64_t value) {
  /* Magnitude computed in unsigned arithmetic: -INT64_MIN overflows. */
  uint64_t magnitude = value < 0 ? 0 - (uint64_t)value : (uint64_t)value;
  return constant_integer(b, type, value < 0, magnitude,
                          "tpu_hlo_constant_int");
}

tpu_hlo_value_t tpu_hlo_constant_uint(tpu_hlo_builder_t* b,
                                      tpu_hlo_type_t type, uint64_t value) {
  return constant_integer(b, type, false, value, "tpu_hlo_constant_uint");
}

tpu_hlo_value_t tpu_hlo_constant_bool(tpu_hlo_builder_t* b,
                                      tpu_hlo_type_t type, bool value) {
  return constant_integer(b, type, false, value ? 1 : 0,
                          "tpu_hlo_constant_bool");
}

tpu_hlo_value_t tpu_hlo_constant_float(tpu_hlo_builder_t* b,
                                       tpu_hlo_type_t type, double value) {
  static const char kWhat[] = "tpu_hlo_constant_float";
  tpu_hlo_value_t invalid = {-1};
  if (!check(b, &type, kWhat)) return invalid;
  if (!tpu_dtype_is_floating(type.dtype) && !tpu_dtype_is_complex(type.dtype)) {
    /* Integral targets take only values they hold exactly. */
    if (isfinite(value) && value == trunc(value) && fabs(value) < 0x1p64) {
      uint64_t magnitude = (uint64_t)fabs(value);
      return constant_integer(b, type, value < 0, magnitude, kWhat);
    }
    tpu_hlo_fail_(b, TPU_STATUS_INVALID_ARGUMENT,
                  "%s: %g is not representable in %s", kWhat, value,
                  tpu_dtype_name(type.dtype));
    return invalid;
  }
  tpu_strbuf_t lit = {0};
  tpu_strbuf_append(&lit, "dense<");
  if (tpu_dtype_is_complex(type.dtype)) {
    tpu_hlo_append_complex_literal(&lit, type.dtype, value, 0.0);
  } else {
    tpu_hlo_append_float_literal(&lit, type.dtype, value);
  }
  tpu_strbuf_append(&lit, ">");
  return emit(b, type, &lit);
}

tpu_hlo_value_t tpu_hlo_constant_complex(tpu_hlo_builder_t* b,
                                         tpu_hlo_type_t type, double real,
                                         double imag) {
  static const char kWhat[] = "tpu_hlo_constant_complex";
  tpu_hlo_value_t invalid = {-1};
  if (!check(b, &type, kWhat)) return invalid;
  if (!tpu_dtype_is_complex(type.dtype)) {
    tpu_hlo_fail_(b, TPU_STATUS_INVALID_ARGUMENT,
                  "%s: dtype %s is not complex", kWhat,
                  tpu_dtype_name(type.dtype));
    return invalid;
  }
  tpu_strbuf_t lit = {0};
  tpu_strbuf_append(&lit, "dense<");
  tpu_hlo_append_complex_literal(&lit, type.dtype, real, imag);
  tpu_strbuf_append(&lit, ">");
  return emit(b, type, &lit);
}

/* Bool elements as a nested list of true/false (one host byte each). */
static void append_bool_list(tpu_strbuf_t* sb, const tpu_hlo_type_t* type,
                             int dim, const uint8_t** data) {
  if (dim == type->rank) {
    tpu_strbuf_append(sb, **data ? "true" : "false");
    (*data)++;
    return;
  }
  tpu_strbuf_append(sb, "[");
  for (int64_t i = 0; i < type->dims[dim] && !sb->failed; i++) {
    if (i > 0) tpu_strbuf_append(sb, ", ");
    append_bool_list(sb, type, dim + 1, data);
  }
  tpu_strbuf_append(sb, "]");
}

tpu_hlo_value_t tpu_hlo_constant_dense(tpu_hlo_builder_t* b,
                                       tpu_hlo_type_t type, const void* data) {
  static const char kWhat[] = "tpu_hlo_constant_dense";
  tpu_hlo_value_t invalid = {-1};
  if (!check(b, &type, kWhat)) return invalid;
  int64_t numel = tpu_hlo_numel_(b, &type);
  if (numel < 0) return invalid;
  if (numel > 0 && !data) {
    tpu_hlo_fail_(b, TPU_STATUS_INVALID_ARGUMENT, "%s: data is NULL", kWhat);
    return invalid;
  }
  tpu_strbuf_t lit = {0};
  tpu_strbuf_append(&lit, "dense<");
  if (numel == 0) {
    /* An empty tensor has no elements to print: dense<>. */
  } else if (type.dtype == TPU_DTYPE_BOOL) {
    const uint8_t* p = data;
    append_bool_list(&lit, &type, 0, &p);
  } else {
    /* The raw little-endian bytes: exact for every element type. */
    static const char kHex[] = "0123456789ABCDEF";
    size_t nbytes = (size_t)numel * tpu_dtype_size(type.dtype);
    const uint8_t* bytes = data;
    tpu_strbuf_append(&lit, "\"0x");
    size_t start = lit.len;
    tpu_strbuf_append_char(&lit, '0', 2 * nbytes);
    if (!lit.failed) {
      char* out = lit.data + start;
      for (size_t i = 0; i < nbytes; i++) {
        out[2 * i] = kHex[bytes[i] >> 4];
        out[2 * i + 1] = kHex[bytes[i] & 15];
      }
    }
    tpu_strbuf_append(&lit, "\"");
  }
  tpu_strbuf_append(&lit, ">");
  return emit(b, type, &lit);
}
