/* Host softmaxes: the kernel against a double-precision reference (row
 * lengths around the vector width, -inf, NaN, rows of -inf), the text
 * rewrite (which marked lines, what stays XLA's), and the custom call run
 * by the CPU plugin, in parts on its pool. */
#include "hostrow.h"

#include <math.h>
#include <stdlib.h>

#include "hostffi.h"
#include "program.h"
#include "runtime.h"
#include "testing.h"

/* softmax / log_softmax of row x[0..n) in double. */
static void reference(tpu_hostrow_kind_t kind, const float* x, double* y, int64_t n) {
  double m = -INFINITY;
  bool nan = false;
  for (int64_t i = 0; i < n; i++) {
    nan |= isnan(x[i]);
    if (x[i] > m) m = x[i];
  }
  if (kind == TPU_HOSTROW_SAFE_SOFTMAX && m == -INFINITY && !nan) {
    for (int64_t i = 0; i < n; i++) y[i] = 0;
    return;
  }
  double s = 0;
  for (int64_t i = 0; i < n; i++) s += exp((double)x[i] - m);
  for (int64_t i = 0; i < n; i++) {
    double v = kind == TPU_HOSTROW_LOG_SOFTMAX ? ((double)x[i] - m) - log(s)
                                               : exp((double)x[i] - m) / s;
    y[i] = nan || m == -INFINITY || m == INFINITY ? NAN : v;
  }
}

/* Mismatches of kind over `rows` rows of n (relative 2e-6, absolute 1e-7;
 * NaN where the reference has NaN; infinities and zeros exact). */
static int mismatches(tpu_hostrow_kind_t kind, const float* x, int64_t rows, int64_t n) {
  float* got = malloc(sizeof(float) * (size_t)(rows * n));
  double* want = malloc(sizeof(double) * (size_t)n);
  tpu_hostrow_compute(kind, x, got, rows, n);
  int wrong = 0;
  for (int64_t r = 0; r < rows; r++) {
    reference(kind, x + r * n, want, n);
    for (int64_t i = 0; i < n; i++) {
      double g = got[r * n + i], w = want[i];
      bool ok = isnan(w) ? isnan(g)
                : isinf(w) || w == 0 ? g == w
                : fabs(g - w) <= 2e-6 * fabs(w) + 1e-7;
      if (!ok && wrong++ < 3)
        fprintf(stderr, "  %s n=%lld row %lld [%lld]: got %.9g want %.9g\n",
                tpu_hostrow_kind_name(kind), (long long)n, (long long)r, (long long)i, g, w);
    }
  }
  free(got);
  free(want);
  return wrong;
}

static void test_kernel_matches_reference(void) {
  static const int64_t kLens[] = {1, 5, 8, 13, 16, 24, 64, 100, 513};
  for (size_t l = 0; l < sizeof kLens / sizeof kLens[0]; l++) {
    int64_t n = kLens[l], rows = 6;
    float* x = malloc(sizeof(float) * (size_t)(rows * n));
    for (int64_t i = 0; i < rows * n; i++) x[i] = (float)((i * 37 % 101) - 50) / 6.0f;
    /* row 1: wide range, exps underflowing; row 2: some -inf (masked) */
    for (int64_t i = 0; i < n; i++) x[n + i] = (float)(i % 2 ? -120.0 + i : 30.0 - i);
    for (int64_t i = 0; i < n; i += 3) x[2 * n + i] = -INFINITY;
    if (n > 1) x[2 * n + 1] = 0.5f; /* keep one finite */
    /* row 3: all -inf; row 4: a NaN; row 5: +inf */
    for (int64_t i = 0; i < n; i++) x[3 * n + i] = -INFINITY;
    x[4 * n + n / 2] = NAN;
    x[5 * n + n - 1] = INFINITY;
    for (int k = 0; k < TPU_HOSTROW_NUM_KINDS; k++) CHECK_EQ(mismatches(k, x, rows, n), 0);
    free(x);
  }
}

/* layer_norm rows against double-precision moments (float32 sums of rows
 * near 2000 round the mean by ~1e-5 relative: 1e-4), with and without
 * weight and bias, rows far from zero (cancellation), n around the vector
 * width. */
static void test_layer_norm_matches_reference(void) {
  static const int64_t kLens[] = {1, 7, 8, 19, 64, 512};
  for (size_t l = 0; l < sizeof kLens / sizeof kLens[0]; l++) {
    int64_t n = kLens[l], rows = 3;
    float* x = malloc(sizeof(float) * (size_t)(rows * n));
    float* w = malloc(sizeof(float) * (size_t)n);
    float* b = malloc(sizeof(float) * (size_t)n);
    float* y = malloc(sizeof(float) * (size_t)(rows * n));
    for (int64_t i = 0; i < rows * n; i++) x[i] = (float)((i * 29 % 83) - 41) / 7.0f + (i / n) * 1000.0f;
    for (int64_t i = 0; i < n; i++) w[i] = (float)(i % 5) / 2 - 1, b[i] = (float)(i % 3) - 1;
    for (int form = 0; form < 3; form++) {
      const float* wp = form >= 1 ? w : NULL;
      const float* bp = form == 2 ? b : NULL;
      float mean[3], rstd[3];
      tpu_hostrow_layer_norm(x, wp, bp, 1e-5f, y, mean, rstd, rows, n);
      int wrong = 0;
      for (int64_t r = 0; r < rows; r++) {
        double s = 0, ss = 0;
        for (int64_t i = 0; i < n; i++) s += x[r * n + i];
        double m = s / n;
        for (int64_t i = 0; i < n; i++) ss += (x[r * n + i] - m) * (x[r * n + i] - m);
        double rs = 1 / sqrt(ss / n + 1e-5);
        wrong += fabs(mean[r] - m) > 1e-5 * (1 + fabs(m)) || fabs(rstd[r] - rs) > 1e-4 * rs;
        for (int64_t i = 0; i < n; i++) {
          double want = (x[r * n + i] - m) * rs * (wp ? wp[i] : 1) + (bp ? bp[i] : 0);
          if (fabs(y[r * n + i] - want) > 1e-4 * (1 + fabs(want)) && wrong++ < 2)
            fprintf(stderr, "  n=%lld form %d row %lld [%lld]: got %.9g want %.9g\n",
                    (long long)n, form, (long long)r, (long long)i, y[r * n + i], want);
        }
      }
      CHECK_EQ(wrong, 0);
    }
    free(x), free(w), free(b), free(y);
  }
}

/* The softmaxes' gradients against double-precision sums. */
static void test_softmax_backward_matches_reference(void) {
  static const int64_t kLens[] = {1, 7, 8, 19, 64, 500};
  for (size_t l = 0; l < sizeof kLens / sizeof kLens[0]; l++) {
    int64_t n = kLens[l], rows = 3;
    float* g = malloc(sizeof(float) * (size_t)(rows * n));
    float* y = malloc(sizeof(float) * (size_t)(rows * n));
    float* out = malloc(sizeof(float) * (size_t)(rows * n));
    for (int64_t i = 0; i < rows * n; i++) {
      g[i] = (float)((i * 29 % 83) - 41) / 17.0f;
      y[i] = (float)((i * 13 % 31) + 1) / 40.0f; /* softmax-like: (0, 1) */
    }
    for (int log = 0; log < 2; log++) {
      if (log)
        for (int64_t i = 0; i < rows * n; i++) y[i] = logf(y[i]);
      tpu_hostrow_softmax_backward(log, g, y, out, rows, n);
      int wrong = 0;
      for (int64_t r = 0; r < rows; r++) {
        double sum = 0;
        for (int64_t i = 0; i < n; i++) sum += log ? g[r * n + i] : (double)g[r * n + i] * y[r * n + i];
        for (int64_t i = 0; i < n; i++) {
          int64_t k = r * n + i;
          double want = log ? g[k] - exp((double)y[k]) * sum : y[k] * (g[k] - sum);
          wrong += fabs(out[k] - want) > 1e-5 * (1 + fabs(want));
        }
      }
      CHECK_EQ(wrong, 0);
    }
    free(g), free(y), free(out);
  }
}

static bool rewrites_to(const char* kind, const char* type, const char* target) {
  char line[512];
  snprintf(line, sizeof line,
           "    %%7 = \"stablehlo.multiply\"(%%5, %%6) {mhlo.frontend_attributes = "
           "{torchtpu_row = \"%s\"}} : (%s, %s) -> %s\n",
           kind, type, type, type);
  char* out = NULL;
  size_t len = 0;
  tpu_status_t s = tpu_hostrow_rewrite(line, strlen(line), &out, &len);
  if (s) {
    tpu_status_free(s);
    return false;
  }
  bool ok = target ? out && strstr(out, target) && strstr(out, "%7 = \"stablehlo.custom_call\"(%2") &&
                         !strstr(out, "multiply") && strlen(out) == len && out[len - 1] == '\n'
                   : out == NULL;
  free(out);
  return ok;
}

static void test_rewrite_picks_marked_float_rows(void) {
  CHECK(rewrites_to("softmax %2", "tensor<16x4x64x64xf32>", "\"torchtpu_row_softmax\""));
  CHECK(rewrites_to("log_softmax %2", "tensor<128x512xf32>", "\"torchtpu_row_log_softmax\""));
  CHECK(rewrites_to("safe_softmax %2", "tensor<64x64xf32>", "\"torchtpu_row_safe_softmax\""));
  CHECK(rewrites_to("softmax %2", "tensor<16x4x64x64xf32>",
                    "result_layouts = [dense<[3, 2, 1, 0]> : tensor<4xindex>]"));
  /* What stays XLA's: other dtypes, small tensors, kinds not known. */
  CHECK(rewrites_to("softmax %2", "tensor<128x512xf64>", NULL));
  CHECK(rewrites_to("softmax %2", "tensor<128x512xbf16>", NULL));
  CHECK(rewrites_to("softmax %2", "tensor<8x64xf32>", NULL));
  CHECK(rewrites_to("sparsemax %2", "tensor<128x512xf32>", NULL));
  /* the gradients: two operands */
  CHECK(rewrites_to("softmax_bwd %2 %arg1", "tensor<16x4x64x64xf32>",
                    "custom_call\"(%2, %arg1) {api_version = 4 : i32, call_target_name = "
                    "\"torchtpu_row_softmax_bwd\", operand_layouts = [dense<[3, 2, 1, 0]> : "
                    "tensor<4xindex>, dense<[3, 2, 1, 0]> : tensor<4xindex>]"));
  CHECK(rewrites_to("log_softmax_bwd %2 %3", "tensor<128x512xf32>",
                    ": (tensor<128x512xf32>, tensor<128x512xf32>) -> tensor<128x512xf32>"));
  CHECK(rewrites_to("softmax_bwd %2", "tensor<128x512xf32>", NULL));
  CHECK(rewrites_to("softmax_bwd %2 -", "tensor<128x512xf32>", NULL));
  /* Unmarked text is not copied. */
  char* out = NULL;
  size_t len = 0;
  static const char kPlain[] = "    %1 = \"stablehlo.exponential\"(%0) : (tensor<4096xf32>) -> "
                               "tensor<4096xf32>\n";
  CHECK_OK(tpu_hostrow_rewrite(kPlain, sizeof kPlain - 1, &out, &len));
  CHECK(out == NULL);
}

/* A program whose marked op is x * x: XLA would square x, the rewrite
 * makes it kind(x); run on the plugin against the reference. */
static void check_program(tpu_hostrow_kind_t kind, int64_t rows, int64_t n) {
  char type[64], text[1024];
  snprintf(type, sizeof type, "tensor<%lldx%lldxf32>", (long long)rows, (long long)n);
  snprintf(text, sizeof text,
           "module @m {\n  func.func public @main(%%arg0: %s) -> (%s) {\n"
           "    %%0 = \"stablehlo.multiply\"(%%arg0, %%arg0) {mhlo.frontend_attributes = "
           "{torchtpu_row = \"%s %%arg0\"}} : (%s, %s) -> %s\n"
           "    \"func.return\"(%%0) : (%s) -> ()\n  }\n}\n",
           type, type, tpu_hostrow_kind_name(kind), type, type, type, type);
  float* x = malloc(sizeof(float) * (size_t)(rows * n));
  float* got = malloc(sizeof(float) * (size_t)(rows * n));
  float* want = malloc(sizeof(float) * (size_t)(rows * n));
  for (int64_t i = 0; i < rows * n; i++) x[i] = (float)((i * 13 % 97) - 48) / 5.0f;
  for (int64_t i = 0; i < n; i++) x[i] = -INFINITY; /* a fully masked row */
  tpu_hostrow_compute(kind, x, want, rows, n);
  tpu_program_t* p = NULL;
  tpu_buffer_t *in = NULL, *res = NULL;
  int64_t dims[2] = {rows, n};
  tpu_status_t s = tpu_program_get(text, strlen(text), &p);
  if (!s) s = tpu_buffer_from_host(tpu_runtime_client(), 0, x, TPU_DTYPE_FLOAT32, dims, 2, NULL, &in);
  if (!s) s = tpu_program_execute(p, 0, &in, 1, &res);
  if (!s) s = tpu_buffer_to_host(res, got, sizeof(float) * (size_t)(rows * n));
  tpu_buffer_destroy(in);
  tpu_buffer_destroy(res);
  int wrong = 0;
  for (int64_t i = 0; !s && i < rows * n; i++)
    wrong += !(got[i] == want[i] || (isnan(got[i]) && isnan(want[i])));
  free(x), free(got), free(want);
  CHECK_OK(s);
  CHECK_EQ(wrong, 0);
}

static void test_custom_calls_compute_rows(void) {
  CHECK(tpu_hostrow_active());
  for (int k = 0; k < TPU_HOSTROW_NUM_KINDS; k++) {
    check_program(k, 64, 64);    /* one part */
    check_program(k, 1024, 64);  /* in parts on the pool */
    check_program(k, 9, 1000);   /* few long rows */
  }
}

/* The layer_norm marker on the last of the op's three results: one call
 * defining all three under their names, the lines that defined the other
 * two gone; or, when not eligible, the text as it was. */
static bool ln_rewrites_to(const char* words, const char* type, const char* want1,
                           const char* want2) {
  char text[1024];
  snprintf(text, sizeof text,
           "  func.func public @main(%%arg0: %s, %%arg1: tensor<64xf32>, %%arg2: tensor<64xf32>) {\n"
           "    %%5 = \"stablehlo.add\"(%%3, %%4) : (%s, %s) -> %s\n"
           "    %%6 = \"stablehlo.reshape\"(%%1) : (tensor<16x64x1xf32>) -> tensor<16x64x1xf32>\n"
           "    %%7 = \"stablehlo.reshape\"(%%2) {mhlo.frontend_attributes = {torchtpu_row = "
           "\"%s\"}} : (tensor<16x64x1xf32>) -> tensor<16x64x1xf32>\n"
           "  }\n",
           type, type, type, type, words);
  char* out = NULL;
  size_t len = 0;
  tpu_status_t s = tpu_hostrow_rewrite(text, strlen(text), &out, &len);
  if (s) {
    tpu_status_free(s);
    return false;
  }
  bool ok = want1 ? out && strstr(out, want1) && (!want2 || strstr(out, want2)) &&
                        !strstr(out, "\"stablehlo.add\"") && !strstr(out, "reshape\"(%1)") &&
                        strstr(out, "    %5 = \"stablehlo.reshape\"(%ln7#0) : (") &&
                        strstr(out, "    %6 = \"stablehlo.reshape\"(%ln7#1) : (") &&
                        strstr(out, "    %7 = \"stablehlo.reshape\"(%ln7#2) : (") &&
                        strlen(out) == len
                  : out == NULL;
  if (!ok && out) fprintf(stderr, "%s", out);
  free(out);
  return ok;
}

static void test_rewrite_layer_norm(void) {
  const char* t = "tensor<16x64x64xf32>";
  CHECK(ln_rewrites_to("layer_norm %0 %arg1 %arg2 1 1e-05 %5 %6", t,
                       "    %ln7:3 = \"stablehlo.custom_call\"(%0, %arg1, %arg2) {api_version = "
                       "4 : i32, backend_config = {eps = 1.000000000e-05 : f32, n = 64 : i64}, "
                       "call_target_name = \"torchtpu_row_layer_norm\"",
                       ": (tensor<16x64x64xf32>, tensor<64xf32>, tensor<64xf32>) -> "
                       "(tensor<16x64x64xf32>, tensor<16x64x1xf32>, tensor<16x64x1xf32>)\n"));
  CHECK(ln_rewrites_to("layer_norm %0 - - 1 1e-05 %5 %6", t, "custom_call\"(%0) {",
                       "n = 64 : i64"));
  /* What stays XLA's: bias without weight, k past the rank, mean and
   * rstd not one a row, words missing, small tensors. */
  CHECK(ln_rewrites_to("layer_norm %0 - %arg2 1 1e-05 %5 %6", t, NULL, NULL));
  CHECK(ln_rewrites_to("layer_norm %0 %arg1 %arg2 4 1e-05 %5 %6", t, NULL, NULL));
  CHECK(ln_rewrites_to("layer_norm %0 %arg1 %arg2 2 1e-05 %5 %6", t, NULL, NULL));
  CHECK(ln_rewrites_to("layer_norm %0 %arg1 %arg2 1 1e-05 %5", t, NULL, NULL));
  CHECK(ln_rewrites_to("layer_norm %0 %arg1 %arg2 1 1e-05 %9 %6", t, NULL, NULL));
  CHECK(ln_rewrites_to("layer_norm %0 %arg1 %arg2 1 1e-05 %5 %6", "tensor<16x64x2xf32>", NULL,
                       NULL));
}

/* A program whose marked op is a slice of x made (y, mean, rstd) =
 * layer_norm(x, w, b) over rows of 64 (attributes eps and n through the
 * FFI), in parts on the pool. */
static void test_custom_call_layer_norm(void) {
  enum { R = 512, N = 64 };
  static const char kText[] =
      "module @m {\n  func.func public @main(%arg0: tensor<512x64xf32>, %arg1: tensor<64xf32>, "
      "%arg2: tensor<64xf32>) -> (tensor<512x64xf32>, tensor<512x1xf32>, tensor<512x1xf32>) {\n"
      "    %0 = \"stablehlo.multiply\"(%arg0, %arg0) : (tensor<512x64xf32>, "
      "tensor<512x64xf32>) -> tensor<512x64xf32>\n"
      "    %1 = \"stablehlo.slice\"(%arg0) {start_indices = array<i64: 0, 0>, limit_indices = "
      "array<i64: 512, 1>, strides = array<i64: 1, 1>} : (tensor<512x64xf32>) -> "
      "tensor<512x1xf32>\n"
      "    %2 = \"stablehlo.reshape\"(%1) : (tensor<512x1xf32>) -> tensor<512x1xf32>\n"
      "    %3 = \"stablehlo.reshape\"(%1) {mhlo.frontend_attributes = {torchtpu_row = "
      "\"layer_norm %arg0 %arg1 %arg2 1 0.001 %0 %2\"}} : (tensor<512x1xf32>) -> "
      "tensor<512x1xf32>\n"
      "    \"func.return\"(%0, %2, %3) : (tensor<512x64xf32>, tensor<512x1xf32>, "
      "tensor<512x1xf32>) -> ()\n  }\n}\n";
  static float x[R * N], w[N], b[N], got[R * N], want[R * N];
  static float mean[R], rstd[R], got_mean[R], got_rstd[R];
  for (int i = 0; i < R * N; i++) x[i] = (float)((i * 13 % 97) - 48) / 5.0f;
  for (int i = 0; i < N; i++) w[i] = (float)(i % 7) / 3, b[i] = (float)(i % 4) - 2;
  tpu_hostrow_layer_norm(x, w, b, 0.001f, want, mean, rstd, R, N);
  tpu_program_t* p = NULL;
  tpu_buffer_t *in[3] = {0}, *res[3] = {0};
  int64_t xd[2] = {R, N}, wd[1] = {N};
  tpu_client_t* c = tpu_runtime_client();
  tpu_status_t s = tpu_program_get(kText, sizeof kText - 1, &p);
  if (!s) s = tpu_buffer_from_host(c, 0, x, TPU_DTYPE_FLOAT32, xd, 2, NULL, &in[0]);
  if (!s) s = tpu_buffer_from_host(c, 0, w, TPU_DTYPE_FLOAT32, wd, 1, NULL, &in[1]);
  if (!s) s = tpu_buffer_from_host(c, 0, b, TPU_DTYPE_FLOAT32, wd, 1, NULL, &in[2]);
  if (!s) s = tpu_program_execute(p, 0, in, 3, res);
  if (!s) s = tpu_buffer_to_host(res[0], got, sizeof got);
  if (!s) s = tpu_buffer_to_host(res[1], got_mean, sizeof got_mean);
  if (!s) s = tpu_buffer_to_host(res[2], got_rstd, sizeof got_rstd);
  for (int i = 0; i < 3; i++) tpu_buffer_destroy(in[i]), tpu_buffer_destroy(res[i]);
  CHECK_OK(s);
  int wrong = 0;
  for (int i = 0; i < R * N; i++) wrong += got[i] != want[i];
  for (int i = 0; i < R; i++) wrong += got_mean[i] != mean[i] || got_rstd[i] != rstd[i];
  CHECK_EQ(wrong, 0);
}

/* A program whose marked op is g * y made the softmax's and the
 * log_softmax's gradient, in parts on the pool. */
static void test_custom_call_softmax_backward(void) {
  enum { R = 1024, N = 64 };
  static float g[R * N], y[R * N], got[R * N], want[R * N];
  for (int i = 0; i < R * N; i++) g[i] = (float)((i * 13 % 97) - 48) / 5.0f, y[i] = (float)(i % 9) / 10;
  for (int log = 0; log < 2; log++) {
    char text[1024];
    snprintf(text, sizeof text,
             "module @m {\n  func.func public @main(%%arg0: tensor<1024x64xf32>, %%arg1: "
             "tensor<1024x64xf32>) -> (tensor<1024x64xf32>) {\n"
             "    %%0 = \"stablehlo.multiply\"(%%arg0, %%arg1) {mhlo.frontend_attributes = "
             "{torchtpu_row = \"%s %%arg0 %%arg1\"}} : (tensor<1024x64xf32>, "
             "tensor<1024x64xf32>) -> tensor<1024x64xf32>\n"
             "    \"func.return\"(%%0) : (tensor<1024x64xf32>) -> ()\n  }\n}\n",
             log ? "log_softmax_bwd" : "softmax_bwd");
    tpu_hostrow_softmax_backward(log, g, y, want, R, N);
    tpu_program_t* p = NULL;
    tpu_buffer_t *in[2] = {0}, *res = NULL;
    int64_t d[2] = {R, N};
    tpu_client_t* c = tpu_runtime_client();
    tpu_status_t s = tpu_program_get(text, strlen(text), &p);
    if (!s) s = tpu_buffer_from_host(c, 0, g, TPU_DTYPE_FLOAT32, d, 2, NULL, &in[0]);
    if (!s) s = tpu_buffer_from_host(c, 0, y, TPU_DTYPE_FLOAT32, d, 2, NULL, &in[1]);
    if (!s) s = tpu_program_execute(p, 0, in, 2, &res);
    if (!s) s = tpu_buffer_to_host(res, got, sizeof got);
    for (int i = 0; i < 2; i++) tpu_buffer_destroy(in[i]);
    tpu_buffer_destroy(res);
    CHECK_OK(s);
    int wrong = 0;
    for (int i = 0; i < R * N; i++) wrong += got[i] != want[i];
    CHECK_EQ(wrong, 0);
  }
}

static void test_setup(void) {
  tpu_status_t s = tpu_runtime_init(NULL);
  if (s) {
    fprintf(stderr, "runtime init failed: %s\n", tpu_status_message(s));
    tpu_status_free(s);
  }
  CHECK(tpu_runtime_is_initialized());
}

/* On an AVX-512 CPU the tests above ran the wide forms: the AVX2 ones too. */
static void test_avx2_forms_match_reference(void) {
  tpu_hostffi_set_wide(false);
  test_kernel_matches_reference();
  test_softmax_backward_matches_reference();
  tpu_hostffi_set_wide(true);
}

TPU_TEST_MAIN(TPU_TEST(test_kernel_matches_reference), TPU_TEST(test_layer_norm_matches_reference),
              TPU_TEST(test_softmax_backward_matches_reference),
              TPU_TEST(test_avx2_forms_match_reference),
              TPU_TEST(test_rewrite_picks_marked_float_rows), TPU_TEST(test_rewrite_layer_norm),
              TPU_TEST(test_setup),
              TPU_TEST(test_custom_calls_compute_rows), TPU_TEST(test_custom_call_layer_norm),
              TPU_TEST(test_custom_call_softmax_backward))
