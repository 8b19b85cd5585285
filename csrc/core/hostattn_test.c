/* The host attention kernel against attention computed here in double
 * precision (sizes off the vector width, causal with more keys than
 * queries and the other way round, a bias that masks whole rows, a NaN
 * score), and the text rewrite of a marked forward and backward. */
#include "hostattn.h"
#include "hostffi.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testing.h"

static void fill(float* x, int64_t n, unsigned seed) {
  for (int64_t i = 0; i < n; i++) {
    seed = seed * 1103515245u + 12345u;
    x[i] = (float)((seed >> 8) % 4001) / 1000.0f - 2.0f;
  }
}

static bool near(double got, double want, double tol) {
  if (isnan(want)) return isnan(got);
  if (isinf(want)) return got == want;
  return fabs(got - want) <= tol * (1 + fabs(want));
}

static bool all_near(const float* got, const double* want, int64_t n, const char* what) {
  for (int64_t i = 0; i < n; i++)
    if (!near(got[i], want[i], 2e-5)) {
      fprintf(stderr, "  %s[%lld]: got %.8g want %.8g\n", what, (long long)i, got[i], want[i]);
      return false;
    }
  return true;
}

/* Forward and backward of a in double precision into the want arrays. */
static void reference(const tpu_hostattn_t* a, double* out, double* lse, double* dq, double* dk,
                      double* dv) {
  int64_t L = a->l, S = a->s, D = a->d, DV = a->dv;
  memset(dq, 0, sizeof(double) * (size_t)(a->bh * L * D));
  memset(dk, 0, sizeof(double) * (size_t)(a->bh * S * D));
  memset(dv, 0, sizeof(double) * (size_t)(a->bh * S * DV));
  double* p = malloc(sizeof(double) * (size_t)S);
  for (int64_t b = 0; b < a->bh; b++)
    for (int64_t i = 0; i < L; i++) {
      const int64_t r = b * L + i;
      double m = -INFINITY, sum = 0;
      bool nan = false;
      for (int64_t j = 0; j < S; j++) {
        double s = 0;
        for (int64_t c = 0; c < D; c++) s += (double)a->q[r * D + c] * a->k[(b * S + j) * D + c];
        s = s * a->scale + (a->bias ? a->bias[r * S + j] : 0);
        if (a->causal && j > i) s = -INFINITY;
        p[j] = s;
        nan |= isnan(s);
        if (s > m) m = s;
      }
      if (nan) m = NAN;
      for (int64_t j = 0; j < S; j++) sum += (p[j] = m == -INFINITY ? 0 : exp(p[j] - m));
      for (int64_t j = 0; j < S; j++) p[j] = m == -INFINITY ? 0 : p[j] / sum;
      lse[r] = m == -INFINITY ? -INFINITY : m + log(sum);
      for (int64_t e = 0; e < DV; e++) {
        out[r * DV + e] = 0;
        for (int64_t j = 0; j < S; j++) out[r * DV + e] += p[j] * a->v[(b * S + j) * DV + e];
      }
      double rowsum = 0;
      for (int64_t e = 0; e < DV; e++) rowsum += (double)a->g[r * DV + e] * out[r * DV + e];
      for (int64_t j = 0; j < S; j++) {
        double dp = 0;
        for (int64_t e = 0; e < DV; e++) dp += (double)a->g[r * DV + e] * a->v[(b * S + j) * DV + e];
        double ds = p[j] * (dp - rowsum) * a->scale;
        for (int64_t c = 0; c < D; c++) {
          dq[r * D + c] += ds * a->k[(b * S + j) * D + c];
          dk[(b * S + j) * D + c] += ds * a->q[r * D + c];
        }
        for (int64_t e = 0; e < DV; e++) dv[(b * S + j) * DV + e] += p[j] * a->g[r * DV + e];
      }
    }
  free(p);
}

static void run_case(int64_t bh, int64_t l, int64_t s, int64_t d, int64_t dv, bool causal,
                     bool bias, bool nan_row) {
  tpu_hostattn_t a = {.bh = bh, .l = l, .s = s, .d = d, .dv = dv, .causal = causal,
                      .scale = 0.4f};
  float* mem = calloc((size_t)(bh * (2 * l * d + 2 * s * d + 2 * s * dv + 3 * l * dv + l * s + 2 * l)),
                      sizeof(float));
  float* p = mem;
  float *q = p, *k = (p += bh * l * d), *v = (p += bh * s * d), *m = (p += bh * s * dv),
        *g = (p += bh * l * s), *out = (p += bh * l * dv), *lse = (p += bh * l * dv),
        *dq = (p += bh * l), *dk = (p += bh * l * d), *dvv = (p += bh * s * d);
  fill(q, bh * l * d, 1);
  fill(k, bh * s * d, 2);
  fill(v, bh * s * dv, 3);
  fill(g, bh * l * dv, 4);
  fill(m, bh * l * s, 5);
  for (int64_t j = 0; j < s; j++) m[1 * s + j] = -INFINITY; /* slice 0, query 1: all masked */
  if (nan_row) q[2 * d] = NAN;                               /* slice 0, query 2: NaN scores */
  a.q = q, a.k = k, a.v = v, a.bias = bias ? m : NULL, a.g = g;
  a.out = out, a.lse = lse, a.dq = dq, a.dk = dk, a.dvv = dvv;
  a.fwd_out = out, a.fwd_lse = lse;
  double* want = malloc(sizeof(double) * (size_t)(bh * (l * dv + l + l * d + s * d + s * dv)));
  double *wo = want, *wl = wo + bh * l * dv, *wq = wl + bh * l, *wk = wq + bh * l * d,
         *wv = wk + bh * s * d;
  reference(&a, wo, wl, wq, wk, wv);
  CHECK(tpu_hostattn_forward(&a, 0, bh));
  CHECK(all_near(out, wo, bh * l * dv, "out"));
  CHECK(all_near(lse, wl, bh * l, "lse"));
  /* the backward reads the forward's results; NaN rows stay out of it */
  if (!nan_row) {
    CHECK(tpu_hostattn_backward(&a, 0, bh));
    CHECK(all_near(dq, wq, bh * l * d, "dq"));
    CHECK(all_near(dk, wk, bh * s * d, "dk"));
    CHECK(all_near(dvv, wv, bh * s * dv, "dv"));
  }
  free(want);
  free(mem);
}

static bool avx2(void) { return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"); }

static void test_kernel_matches_double_precision(void) {
  if (!avx2()) return; /* the kernel is only registered with AVX2 */
  run_case(3, 10, 13, 5, 3, false, false, false);
  run_case(3, 10, 13, 5, 3, true, false, false);  /* causal, more keys */
  run_case(2, 17, 9, 16, 16, true, true, false);  /* causal, more queries, masked row */
  run_case(2, 64, 64, 16, 16, true, false, false); /* the demo's slice */
  run_case(1, 5, 24, 8, 9, false, true, false);
}

static void test_nan_and_masked_rows(void) {
  if (!avx2()) return;
  run_case(2, 6, 11, 4, 5, false, true, true);
}

/* A marked forward and backward (as lower/attention.c emits them) become
 * the two calls, the results' other lines dropped; unmarked text stays. */
static void test_rewrite_text(void) {
  const char* text =
      "module @m {\n"
      "  func.func public @main(%arg0: tensor<2x3x4xf32>) -> tensor<2x3xf32> {\n"
      "    %0 = \"stablehlo.reshape\"(%arg0) : (tensor<2x3x4xf32>) -> tensor<2x3x4xf32>\n"
      "    %1 = \"stablehlo.reshape\"(%x) {mhlo.frontend_attributes = {torchtpu_attn = "
      "\"fwd %arg0 %arg0 %arg0 - %0 1 0.5 2 3 3 4 4\"}} : (tensor<2x3xf32>) -> tensor<2x3xf32>\n"
      "    %2 = \"stablehlo.reshape\"(%arg0) : (tensor<2x3x4xf32>) -> tensor<2x3x4xf32>\n"
      "    %3 = \"stablehlo.reshape\"(%arg0) : (tensor<2x3x4xf32>) -> tensor<2x3x4xf32>\n"
      "    %4 = \"stablehlo.reshape\"(%arg0) {mhlo.frontend_attributes = {torchtpu_attn = "
      "\"bwd %arg0 %arg0 %arg0 - %0 %0 %1 %2 %3 0 0.5 2 3 3 4 4\"}} : (tensor<2x3x4xf32>) -> "
      "tensor<2x3x4xf32>\n"
      "    \"func.return\"(%1) : (tensor<2x3xf32>) -> ()\n"
      "  }\n"
      "}\n";
  char* out = NULL;
  size_t len = 0;
  CHECK_OK(tpu_hostattn_rewrite(text, strlen(text), &out, &len));
  CHECK(out != NULL);
  if (!out) return;
  CHECK_STR_CONTAINS(out, "%attn1:2 = \"stablehlo.custom_call\"(%arg0, %arg0, %arg0) {api_version "
                          "= 4 : i32, backend_config = {causal = 1 : i64, scale = 0.5 : f32}, "
                          "call_target_name = \"torchtpu_attn_fwd\"");
  CHECK_STR_CONTAINS(out, "-> (tensor<2x3x4xf32>, tensor<2x3xf32>)");
  CHECK_STR_CONTAINS(out, "%0 = \"stablehlo.reshape\"(%attn1#0)");
  CHECK_STR_CONTAINS(out, "%1 = \"stablehlo.reshape\"(%attn1#1)");
  CHECK_STR_CONTAINS(out, "%attn4:3 = \"stablehlo.custom_call\"(%arg0, %arg0, %arg0, %0, %0, %1)");
  CHECK_STR_CONTAINS(out, "%2 = \"stablehlo.reshape\"(%attn4#0)");
  CHECK_STR_CONTAINS(out, "%3 = \"stablehlo.reshape\"(%attn4#1)");
  CHECK_STR_CONTAINS(out, "%4 = \"stablehlo.reshape\"(%attn4#2)");
  CHECK(strstr(out, "%0 = \"stablehlo.reshape\"(%arg0)") == NULL);
  CHECK(strstr(out, "%2 = \"stablehlo.reshape\"(%arg0)") == NULL);
  CHECK(strstr(out, "torchtpu_attn = ") == NULL);
  free(out);
  /* batch dims kept: [2, 5, L, D] operands, no merged reshape */
  const char* four =
      "  func.func public @main() {\n"
      "    %7 = \"stablehlo.reshape\"(%6) : (tensor<2x5x3x4xf32>) -> tensor<2x5x3x4xf32>\n"
      "    %8 = \"stablehlo.reshape\"(%5) {mhlo.frontend_attributes = {torchtpu_attn = "
      "\"fwd %1 %2 %3 %4 %7 0 0.25 2x5 3 6 4 4\"}} : (tensor<2x5x3xf32>) -> tensor<2x5x3xf32>\n";
  CHECK_OK(tpu_hostattn_rewrite(four, strlen(four), &out, &len));
  CHECK(out != NULL);
  if (!out) return;
  CHECK_STR_CONTAINS(out, "(%1, %2, %3, %4) {api_version");
  CHECK_STR_CONTAINS(out, ": (tensor<2x5x3x4xf32>, tensor<2x5x6x4xf32>, tensor<2x5x6x4xf32>, "
                          "tensor<2x5x3x6xf32>) -> (tensor<2x5x3x4xf32>, tensor<2x5x3xf32>)");
  free(out);
  const char* plain = "module @m {\n}\n";
  CHECK_OK(tpu_hostattn_rewrite(plain, strlen(plain), &out, &len));
  CHECK(out == NULL);
}

/* Layouts: q, k, v read from one packed [B, L, 3, H, D] projection, g and
 * the forward's out from [B, L, H, D], every result written [B, L, H,
 * D]: the same numbers, bit for bit, as the row-major run (each slice's
 * arithmetic is the same, only where it reads and writes moves). */
static void test_strided_layouts_match_contiguous(void) {
  if (!avx2()) return;
  enum { B = 2, H = 3, L = 17, D = 5 };
  const int64_t bh = B * H, n = bh * L * D;
  float* qkv = malloc(sizeof(float) * (size_t)(3 * n));
  float* g_blhd = malloc(sizeof(float) * (size_t)n);
  float* mem = calloc((size_t)(16 * n), sizeof(float));
  float *q = mem, *k = q + n, *v = k + n, *g = v + n, *out = g + n, *dq = out + n, *dk = dq + n,
        *dv = dk + n, *s_out = dv + n, *s_dq = s_out + n, *s_dk = s_dq + n, *s_dv = s_dk + n;
  float lse[B * H * L], s_lse[B * H * L];
  fill(qkv, 3 * n, 7);
  fill(g_blhd, n, 8);
  /* element (b, h, l, d) of q/k/v (which 0..2) and of a [B, L, H, D] */
#define PACKED(which, b, h, l, d) (((((b) * L + (l)) * 3 + (which)) * H + (h)) * D + (d))
#define BLHD(b, h, l, d) ((((b) * L + (l)) * H + (h)) * D + (d))
#define BHLD(b, h, l, d) ((((b) * H + (h)) * L + (l)) * D + (d))
  for (int b = 0; b < B; b++)
    for (int h = 0; h < H; h++)
      for (int l = 0; l < L; l++)
        for (int d = 0; d < D; d++) {
          q[BHLD(b, h, l, d)] = qkv[PACKED(0, b, h, l, d)];
          k[BHLD(b, h, l, d)] = qkv[PACKED(1, b, h, l, d)];
          v[BHLD(b, h, l, d)] = qkv[PACKED(2, b, h, l, d)];
          g[BHLD(b, h, l, d)] = g_blhd[BLHD(b, h, l, d)];
        }
  tpu_hostattn_t a = {.bh = bh, .l = L, .s = L, .d = D, .dv = D, .causal = true, .scale = 0.3f,
                      .q = q, .k = k, .v = v, .g = g, .out = out, .lse = lse, .fwd_out = out,
                      .fwd_lse = lse, .dq = dq, .dk = dk, .dvv = dv};
  CHECK(tpu_hostattn_forward(&a, 0, bh));
  CHECK(tpu_hostattn_backward(&a, 0, bh));
  const tpu_hostattn_layout_t packed = {L * 3 * H * D, D, 3 * H * D}, blhd = {L * H * D, D, H * D};
  tpu_hostattn_t s = {.bh = bh, .heads = H, .l = L, .s = L, .d = D, .dv = D, .causal = true,
                      .scale = 0.3f, .q = qkv, .k = qkv + H * D, .v = qkv + 2 * H * D,
                      .g = g_blhd, .out = s_out, .lse = s_lse, .fwd_out = s_out,
                      .fwd_lse = s_lse, .dq = s_dq, .dk = s_dk, .dvv = s_dv,
                      .lq = packed, .lk = packed, .lv = packed, .lg = blhd, .lo = blhd,
                      .lout = blhd, .ldq = blhd, .ldk = blhd, .ldv = blhd};
  /* two parts, as the pool cuts it */
  CHECK(tpu_hostattn_forward(&s, 0, 2) && tpu_hostattn_forward(&s, 2, bh));
  CHECK(tpu_hostattn_backward(&s, 0, 3) && tpu_hostattn_backward(&s, 3, bh));
  int wrong = 0;
  for (int b = 0; b < B; b++)
    for (int h = 0; h < H; h++)
      for (int l = 0; l < L; l++) {
        wrong += s_lse[(b * H + h) * L + l] != lse[(b * H + h) * L + l];
        for (int d = 0; d < D; d++)
          wrong += s_out[BLHD(b, h, l, d)] != out[BHLD(b, h, l, d)] ||
                   s_dq[BLHD(b, h, l, d)] != dq[BHLD(b, h, l, d)] ||
                   s_dk[BLHD(b, h, l, d)] != dk[BHLD(b, h, l, d)] ||
                   s_dv[BLHD(b, h, l, d)] != dv[BHLD(b, h, l, d)];
      }
#undef PACKED
#undef BLHD
#undef BHLD
  CHECK_EQ(wrong, 0);
  free(qkv), free(g_blhd), free(mem);
}

/* The strided form: q, k, v seen through a view read's chain to the
 * projection's value, their views in the attributes; a result the program
 * transposes to [B, L, H, D] next is made so and named by the inverse
 * transpose; a bias keeps the plain form. */
/* The rewrite of a program whose attention reads q, k, v as the demo's
 * view reads, its bias word `bias`. */
static char* rewrite_views(const char* bias) {
  static const char kView[] =
      "    %%%d = \"stablehlo.reshape\"(%%arg0) : (tensor<196608xf32>) -> "
      "tensor<16x64x12x16x1xf32>\n"
      "    %%%d = \"stablehlo.slice\"(%%%d) {start_indices = array<i64: 0, 0, %d, 0, 0>, "
      "limit_indices = array<i64: 16, 64, %d, 16, 1>, strides = array<i64: 1, 1, 1, 1, 1>} : "
      "(tensor<16x64x12x16x1xf32>) -> tensor<16x64x4x16x1xf32>\n"
      "    %%%d = \"stablehlo.reshape\"(%%%d) : (tensor<16x64x4x16x1xf32>) -> "
      "tensor<16x64x4x16xf32>\n"
      "    %%%d = \"stablehlo.transpose\"(%%%d) {permutation = array<i64: 0, 2, 1, 3>} : "
      "(tensor<16x64x4x16xf32>) -> tensor<16x4x64x16xf32>\n";
  char text[8192];
  int n = snprintf(text, sizeof text, "  func.func private @f1(%%arg0: tensor<196608xf32>) {\n");
  for (int i = 0; i < 3; i++)
    n += snprintf(text + n, sizeof text - (size_t)n, kView, 10 * i, 10 * i + 1, 10 * i, 4 * i,
                  4 * i + 4, 10 * i + 2, 10 * i + 1, 10 * i + 3, 10 * i + 2);
  n += snprintf(text + n, sizeof text - (size_t)n,
                "    %%40 = \"stablehlo.reshape\"(%%3) : (tensor<16x4x64x16xf32>) -> "
                "tensor<16x4x64x16xf32>\n"
                "    %%41 = \"stablehlo.reshape\"(%%39) {mhlo.frontend_attributes = "
                "{torchtpu_attn = \"fwd %%3 %%13 %%23 %s %%40 1 0.25 16x4 64 64 16 16\"}} : "
                "(tensor<16x4x64xf32>) -> tensor<16x4x64xf32>\n"
                "    %%42 = \"stablehlo.transpose\"(%%40) {permutation = array<i64: 0, 2, 1, 3>} "
                ": (tensor<16x4x64x16xf32>) -> tensor<16x64x4x16xf32>\n  }\n",
                bias);
  char* out = NULL;
  size_t len = 0;
  tpu_status_t st = tpu_hostattn_rewrite(text, strlen(text), &out, &len);
  if (st) tpu_status_free(st);
  return st ? NULL : out;
}

static void test_rewrite_strided(void) {
  char* out = rewrite_views("-");
  CHECK(out != NULL);
  if (!out) return;
  CHECK_STR_CONTAINS(out, "%attn41:2 = \"stablehlo.custom_call\"(%arg0, %arg0, %arg0) {");
  CHECK_STR_CONTAINS(out, "dims = array<i64: 16, 4, 64, 64, 16, 16>, outs = array<i64: 4096, "
                          "16, 64>, scale = 0.25 : f32, views = array<i64: 0, 12288, 16, 192, 64, "
                          "12288, 16, 192, 128, 12288, 16, 192>}");
  CHECK_STR_CONTAINS(out, ": (tensor<196608xf32>, tensor<196608xf32>, tensor<196608xf32>) -> "
                          "(tensor<16x64x4x16xf32>, tensor<16x4x64xf32>)\n");
  CHECK_STR_CONTAINS(out, "%40 = \"stablehlo.transpose\"(%attn41#0) {permutation = array<i64: 0, "
                          "2, 1, 3>} : (tensor<16x64x4x16xf32>) -> tensor<16x4x64x16xf32>\n");
  free(out);
  /* a bias: the plain form, q, k, v as they are */
  out = rewrite_views("%9");
  CHECK(out && strstr(out, "custom_call\"(%3, %13, %23, %9) {") && !strstr(out, "views ="));
  free(out);
}

/* On an AVX-512 CPU the tests above ran the wide exps: the AVX2 ones too. */
static void test_avx2_forms_match_double_precision(void) {
  tpu_hostffi_set_wide(false);
  test_kernel_matches_double_precision();
  test_nan_and_masked_rows();
  tpu_hostffi_set_wide(true);
}

TPU_TEST_MAIN(TPU_TEST(test_kernel_matches_double_precision), TPU_TEST(test_nan_and_masked_rows),
              TPU_TEST(test_avx2_forms_match_double_precision), TPU_TEST(test_rewrite_text),
              TPU_TEST(test_strided_layouts_match_contiguous), TPU_TEST(test_rewrite_strided))
