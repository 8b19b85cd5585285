/* AVX2 pieces the CPU plugin's host kernels share (hostrow, hostattn):
 * exp of 8 floats and horizontal sums and maxima, and their AVX-512 forms
 * on 16. Header-only, each function compiled for its instruction set:
 * callers check first (__builtin_cpu_supports, tpu_hostffi_wide). */
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

/* exp8's steps on 16 floats (AVX-512F): the same operations lane by lane,
 * so each lane's result is exp8's, bit for bit. */
__attribute__((target("avx512f"))) static inline __m512 exp16(__m512 x) {
  const __m512 lo = _mm512_set1_ps(-87.33654f);
  __mmask16 tiny = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ); /* false for NaN */
  x = _mm512_mask_blend_ps(tiny, x, lo);
  __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                  _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
  __m512 v = _mm512_maskz_mov_ps((__mmask16)~tiny, _mm512_mul_ps(p, _mm512_castsi512_ps(e)));
  __mmask16 huge = _mm512_cmp_ps_mask(x, _mm512_set1_ps(88.72283f), _CMP_GT_OQ);
  return _mm512_mask_blend_ps(huge, v, _mm512_set1_ps(INFINITY));
}

/* Sums and maxima of 16 floats: the two halves combined, then hsum8's or
 * hmax8's steps. */
__attribute__((target("avx512f,avx2,fma"))) static inline float hsum16(__m512 v) {
  return hsum8(_mm256_add_ps(_mm512_castps512_ps256(v),
                             _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))));
}

__attribute__((target("avx512f,avx2,fma"))) static inline float hmax16(__m512 v) {
  return hmax8(_mm256_max_ps(_mm512_castps512_ps256(v),
                             _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))));
}

#endif
