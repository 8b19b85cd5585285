/* The literal rules on their own: f16 / bf16 rounding against a reference
 * search, exact float and complex element text, and a print / strtod round
 * trip over random bit patterns. */
#include "literal.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "../testing.h"
#include "strbuf.h"

static double half_value(uint16_t bits) {
  int e = (bits >> 10) & 0x1F, m = bits & 0x3FF;
  double v = e == 0 ? ldexp(m, -24) : e == 31 ? INFINITY : ldexp(1024 + m, e - 25);
  return bits & 0x8000 ? -v : v;
}

static double bf16_value(uint16_t bits) {
  uint32_t f32 = (uint32_t)bits << 16;
  float f;
  memcpy(&f, &f32, sizeof f);
  return f;
}

/* Reference rounding by search: the nearest of all positive values of the
 * format (bits 0 .. inf, monotone; inf stands for the next power of two
 * past the maximum), ties to the even bit pattern. */
static uint16_t nearest_ref(double x, double (*value)(uint16_t),
                            uint16_t inf_bits, double inf_as) {
  double ax = fabs(x);
  uint16_t sign = signbit(x) ? 0x8000 : 0;
  uint16_t lo = 0, hi = inf_bits;
  double hi_value = inf_as;
  if (ax >= inf_as) return sign | inf_bits;
  while (hi - lo > 1) { /* invariant: value(lo) <= ax < value(hi) */
    uint16_t mid = (uint16_t)((lo + hi) / 2);
    if (value(mid) <= ax) lo = mid; else hi = mid;
  }
  if (hi == inf_bits) hi_value = inf_as; else hi_value = value(hi);
  double below = ax - value(lo), above = hi_value - ax; /* exact */
  uint16_t pick = below < above ? lo : above < below ? hi : (lo & 1 ? hi : lo);
  return sign | pick;
}

static uint64_t rng_state = 0x9E3779B97F4A7C15u;
static uint64_t rng(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return rng_state;
}

static void test_half_bits(void) {
  CHECK_EQ(tpu_hlo_half_bits(1.0), 0x3C00);
  CHECK_EQ(tpu_hlo_half_bits(-2.0), 0xC000);
  CHECK_EQ(tpu_hlo_half_bits(65504.0), 0x7BFF);
  CHECK_EQ(tpu_hlo_half_bits(65519.99), 0x7BFF);
  CHECK_EQ(tpu_hlo_half_bits(65520.0), 0x7C00); /* tie rounds to even: inf */
  CHECK_EQ(tpu_hlo_half_bits(1e300), 0x7C00);
  CHECK_EQ(tpu_hlo_half_bits(-INFINITY), 0xFC00);
  CHECK_EQ(tpu_hlo_half_bits(NAN), 0x7E00);
  CHECK_EQ(tpu_hlo_half_bits(-0.0), 0x8000);
  CHECK_EQ(tpu_hlo_half_bits(0x1p-24), 0x0001);    /* smallest subnormal */
  CHECK_EQ(tpu_hlo_half_bits(0x1p-25), 0x0000);    /* tie -> even (0) */
  CHECK_EQ(tpu_hlo_half_bits(0x1.000001p-25), 0x0001);
  CHECK_EQ(tpu_hlo_half_bits(0x3p-25), 0x0002);    /* 1.5 ulp -> 2 */
  CHECK_EQ(tpu_hlo_half_bits(0x1p-14), 0x0400);    /* smallest normal */
  CHECK_EQ(tpu_hlo_half_bits(0x1p-14 - 0x1p-25), 0x0400); /* carry up */
  CHECK_EQ(tpu_hlo_half_bits(1.0 + 0x1p-11), 0x3C00);
  CHECK_EQ(tpu_hlo_half_bits(1.0 + 0x3p-11), 0x3C02);
  CHECK_EQ(tpu_hlo_half_bits(1.0 / 3.0), 0x3555);
  CHECK_EQ(tpu_hlo_half_bits(DBL_TRUE_MIN), 0x0000);
  /* Every half value and every midpoint, then random doubles, against the
   * search reference (and the compiler's own conversion where it has one). */
  int bad = 0;
  for (uint32_t h = 0; h < 0x7C00 && bad < 5; h++) {
    double v = half_value((uint16_t)h), next = half_value((uint16_t)(h + 1));
    double probes[4] = {v, -v, (v + next) / 2, nextafter((v + next) / 2, 0)};
    for (int k = 0; k < 4; k++) {
      uint16_t want = nearest_ref(probes[k], half_value, 0x7C00, 65536.0);
      if (tpu_hlo_half_bits(probes[k]) != want) {
        fprintf(stderr, "half(%a) = %04X, want %04X\n", probes[k],
                tpu_hlo_half_bits(probes[k]), want);
        bad++;
      }
    }
  }
  for (int i = 0; i < 200000 && bad < 5; i++) {
    double x = ldexp((double)(rng() >> 11) / 0x1p53, (int)(rng() % 50) - 30);
    if (rng() & 1) x = -x;
    uint16_t want = nearest_ref(x, half_value, 0x7C00, 65536.0);
#ifdef __FLT16_MAX__
    _Float16 h = (_Float16)x;
    uint16_t compiler;
    memcpy(&compiler, &h, sizeof compiler);
    if (compiler != want) {
      fprintf(stderr, "reference disagrees with _Float16 for %a\n", x);
      bad++;
    }
#endif
    if (tpu_hlo_half_bits(x) != want) {
      fprintf(stderr, "half(%a) = %04X, want %04X\n", x, tpu_hlo_half_bits(x),
              want);
      bad++;
    }
  }
  CHECK_EQ(bad, 0);
}

static void test_bfloat16_bits(void) {
  CHECK_EQ(tpu_hlo_bfloat16_bits(1.0), 0x3F80);
  CHECK_EQ(tpu_hlo_bfloat16_bits(M_PI), 0x4049);
  CHECK_EQ(tpu_hlo_bfloat16_bits(1.0 + 0x1p-8), 0x3F80);  /* tie -> even */
  CHECK_EQ(tpu_hlo_bfloat16_bits(1.0 + 0x3p-8), 0x3F82);
  /* Just above the tie: double rounding through float would give 0x3F80. */
  CHECK_EQ(tpu_hlo_bfloat16_bits(1.0 + 0x1p-8 + 0x1p-40), 0x3F81);
  CHECK_EQ(tpu_hlo_bfloat16_bits(0x1.fep127), 0x7F7F);     /* max */
  CHECK_EQ(tpu_hlo_bfloat16_bits(0x1.ffp127), 0x7F80);     /* tie -> inf */
  CHECK_EQ(tpu_hlo_bfloat16_bits(0x1p-133), 0x0001);       /* min subnormal */
  CHECK_EQ(tpu_hlo_bfloat16_bits(0x1p-134), 0x0000);
  CHECK_EQ(tpu_hlo_bfloat16_bits(NAN), 0x7FC0);
  CHECK_EQ(tpu_hlo_bfloat16_bits(-NAN), 0xFFC0);
  CHECK_EQ(tpu_hlo_bfloat16_bits(INFINITY), 0x7F80);
  CHECK_EQ(tpu_hlo_bfloat16_bits(-0.0), 0x8000);
  int bad = 0;
  for (uint32_t h = 0; h < 0x7F80 && bad < 5; h++) {
    double v = bf16_value((uint16_t)h), next = bf16_value((uint16_t)(h + 1));
    if (h + 1 == 0x7F80) next = 0x1p128;
    double probes[4] = {v, -v, (v + next) / 2, nextafter((v + next) / 2, 0)};
    for (int k = 0; k < 4; k++) {
      uint16_t want = nearest_ref(probes[k], bf16_value, 0x7F80, 0x1p128);
      if (tpu_hlo_bfloat16_bits(probes[k]) != want) {
        fprintf(stderr, "bf16(%a) = %04X, want %04X\n", probes[k],
                tpu_hlo_bfloat16_bits(probes[k]), want);
        bad++;
      }
    }
  }
  for (int i = 0; i < 200000 && bad < 5; i++) {
    double x = ldexp((double)(rng() >> 11) / 0x1p53, (int)(rng() % 280) - 140);
    uint16_t want = nearest_ref(x, bf16_value, 0x7F80, 0x1p128);
    if (tpu_hlo_bfloat16_bits(x) != want) {
      fprintf(stderr, "bf16(%a) = %04X, want %04X\n", x,
              tpu_hlo_bfloat16_bits(x), want);
      bad++;
    }
  }
  CHECK_EQ(bad, 0);
}

static bool literal_is(tpu_dtype_t dtype, double value, const char* want) {
  tpu_strbuf_t sb = {0};
  tpu_hlo_append_float_literal(&sb, dtype, value);
  bool same = sb.data && strcmp(sb.data, want) == 0;
  if (!same) {
    fprintf(stderr, "literal(%s, %a) = %s, want %s\n", tpu_dtype_name(dtype),
            value, sb.data ? sb.data : "(null)", want);
  }
  tpu_strbuf_free(&sb);
  return same;
}

static void test_float_literals(void) {
  CHECK(literal_is(TPU_DTYPE_FLOAT32, 1.0, "1.0"));
  CHECK(literal_is(TPU_DTYPE_FLOAT32, -0.0, "-0.0"));
  CHECK(literal_is(TPU_DTYPE_FLOAT32, 1.5, "1.5"));
  CHECK(literal_is(TPU_DTYPE_FLOAT32, 0.1, "0.100000001"));
  CHECK(literal_is(TPU_DTYPE_FLOAT32, 1e10, "1.0e+10"));
  CHECK(literal_is(TPU_DTYPE_FLOAT32, 16777216.0, "16777216.0"));
  CHECK(literal_is(TPU_DTYPE_FLOAT32, FLT_MAX, "3.40282347e+38"));
  CHECK(literal_is(TPU_DTYPE_FLOAT32, FLT_TRUE_MIN, "1.40129846e-45"));
  CHECK(literal_is(TPU_DTYPE_FLOAT32, 1e39, "0x7F800000")); /* rounds to inf */
  CHECK(literal_is(TPU_DTYPE_FLOAT32, NAN, "0x7FC00000"));
  CHECK(literal_is(TPU_DTYPE_FLOAT32, -INFINITY, "0xFF800000"));
  CHECK(literal_is(TPU_DTYPE_FLOAT64, 0.1, "0.10000000000000001"));
  CHECK(literal_is(TPU_DTYPE_FLOAT64, 1e22, "1.0e+22"));
  CHECK(literal_is(TPU_DTYPE_FLOAT64, DBL_TRUE_MIN, "4.9406564584124654e-324"));
  CHECK(literal_is(TPU_DTYPE_FLOAT64, -0.0, "-0.0"));
  CHECK(literal_is(TPU_DTYPE_FLOAT64, NAN, "0x7FF8000000000000"));
  CHECK(literal_is(TPU_DTYPE_FLOAT64, -INFINITY, "0xFFF0000000000000"));
  CHECK(literal_is(TPU_DTYPE_FLOAT16, 1.0, "0x3C00"));
  CHECK(literal_is(TPU_DTYPE_FLOAT16, NAN, "0x7E00"));
  CHECK(literal_is(TPU_DTYPE_BFLOAT16, -1.0, "0xBF80"));
  CHECK(literal_is(TPU_DTYPE_BFLOAT16, INFINITY, "0x7F80"));
  tpu_strbuf_t sb = {0};
  tpu_hlo_append_complex_literal(&sb, TPU_DTYPE_COMPLEX64, 1.0f, -2.5f);
  tpu_hlo_append_complex_literal(&sb, TPU_DTYPE_COMPLEX64, NAN, INFINITY);
  CHECK(sb.data && strcmp(sb.data, "(1.0,-2.5)(0x7FC00000,0x7F800000)") == 0);
  tpu_strbuf_free(&sb);
  sb = (tpu_strbuf_t){0};
  /* complex128 parts keep double precision. */
  tpu_hlo_append_complex_literal(&sb, TPU_DTYPE_COMPLEX128, 0.1, -INFINITY);
  CHECK(sb.data && strcmp(sb.data, "(0.10000000000000001,0xFFF0000000000000)") == 0);
  tpu_strbuf_free(&sb);
}

/* Random finite floats/doubles read back as MLIR reads them (strtod, then
 * round to the element type) must give the same bits. */
static void test_float_literals_round_trip(void) {
  int bad = 0;
  for (int i = 0; i < 200000 && bad < 5; i++) {
    uint32_t bits32 = (uint32_t)rng();
    float f;
    memcpy(&f, &bits32, sizeof f);
    if (!isfinite(f)) continue;
    tpu_strbuf_t sb = {0};
    tpu_hlo_append_float_literal(&sb, TPU_DTYPE_FLOAT32, f);
    float back = (float)strtod(sb.data, NULL);
    if (memcmp(&back, &f, sizeof f) != 0 || !strchr(sb.data, '.')) {
      fprintf(stderr, "f32 %08X printed %s\n", bits32, sb.data);
      bad++;
    }
    tpu_strbuf_free(&sb);
    uint64_t bits64 = rng();
    double d;
    memcpy(&d, &bits64, sizeof d);
    if (!isfinite(d)) continue;
    tpu_hlo_append_float_literal(&sb, TPU_DTYPE_FLOAT64, d);
    double back64 = strtod(sb.data, NULL);
    if (memcmp(&back64, &d, sizeof d) != 0 || !strchr(sb.data, '.')) {
      fprintf(stderr, "f64 %016llX printed %s\n", (unsigned long long)bits64,
              sb.data);
      bad++;
    }
    tpu_strbuf_free(&sb);
  }
  CHECK_EQ(bad, 0);
}

TPU_TEST_MAIN(TPU_TEST(test_half_bits), TPU_TEST(test_bfloat16_bits),
              TPU_TEST(test_float_literals), TPU_TEST(test_float_literals_round_trip))
