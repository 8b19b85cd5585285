/* AVX2 pieces the CPU plugin's host kernels share (hostrow, hostattn):
 * exp of 8 floats and horizontal sums and maxima. Header-only, each
 * function compiled for AVX2+FMA: callers check
 * __builtin_cpu_supports first. */
#ifndef TORCHTPU_CORE_HOSTSIMD_H_
#define TORCHTPU_CORE_HOSTSIMD_H_

#include <immintrin.h>
#include <math.h>

/* exp of 8 floats, Cephes' expf: x = n ln2 + r with |r| <= ln2/2, exp(r)
 * by its degree-7 polynomial, times 2^n made in the exponent bits. Within
 * 2 ulp of expf; x < -87.3 (results below FLT_MIN, exp(-inf) = 0 among
 * them) gives 0, x past 88.72 inf; NaN stays NaN. */
__attribute__((target("avx2,fma"))) static inline __m256 exp8(__m256 x) {
  const __m256 lo = _mm256_set1_ps(-87.33654f);
  __m256 tiny = _mm256_cmp_ps(x, lo, _CMP_LT_OQ); /* false for NaN */
  x = _mm256_blendv_ps(x, lo, tiny);
  __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                             _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  __m256 v = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
  v = _mm256_andnot_ps(tiny, v);
  __m256 huge = _mm256_cmp_ps(x, _mm256_set1_ps(88.72283f), _CMP_GT_OQ);
  return _mm256_blendv_ps(v, _mm256_set1_ps(INFINITY), huge);
}

__attribute__((target("avx2,fma"))) static inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

__attribute__((target("avx2,fma"))) static inline float hmax8(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

#endif
