/* Host layer_norm backward: the kernel against a double-precision
 * reference (row lengths around the vector width, with and without a
 * weight, more rows than a block), the text rewrite (which marked lines,
 * what stays XLA's), and the custom call run by the CPU plugin, in parts
 * on its pool. */
#include "hostnorm.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "program.h"
#include "runtime.h"
#include "runtime_testing.h"
#include "testing.h"

/* Inputs of rows x n: g, x, w, and each row's mean and rstd. */
typedef struct {
  int64_t rows, n;
  float *g, *x, *w, *mean, *rstd;
} case_t;

static case_t case_make(int64_t rows, int64_t n) {
  case_t c = {.rows = rows, .n = n};
  c.g = malloc(sizeof(float) * (size_t)(rows * n));
  c.x = malloc(sizeof(float) * (size_t)(rows * n));
  c.w = malloc(sizeof(float) * (size_t)n);
  c.mean = malloc(sizeof(float) * (size_t)rows);
  c.rstd = malloc(sizeof(float) * (size_t)rows);
  uint32_t seed = 12345;
  for (int64_t i = 0; i < rows * n; i++) {
    seed = seed * 1664525u + 1013904223u; /* no pattern the column sums cancel */
    c.g[i] = (float)(seed >> 8) / (float)(1 << 24) * 4 - 1.5f;
    c.x[i] = (float)((i * 29 % 83) - 41) / 7.0f + (float)(i / n % 5);
  }
  for (int64_t i = 0; i < n; i++) c.w[i] = (float)(i % 5) / 2 - 1.2f;
  for (int64_t r = 0; r < rows; r++) {
    double s = 0, ss = 0;
    for (int64_t i = 0; i < n; i++) s += c.x[r * n + i];
    double m = s / (double)n;
    for (int64_t i = 0; i < n; i++) ss += (c.x[r * n + i] - m) * (c.x[r * n + i] - m);
    c.mean[r] = (float)m;
    c.rstd[r] = (float)(1 / sqrt(ss / (double)n + 1e-5));
  }
  return c;
}

static void case_free(case_t* c) { free(c->g), free(c->x), free(c->w), free(c->mean), free(c->rstd); }

/* Mismatches of dx (rows x n), dw, db (n) against double-precision sums
 * (dx relative 1e-4, the column sums 2e-6, of their terms' size: the
 * sums cancel). */
static int mismatches(const case_t* c, const float* w, const float* dx, const float* dw,
                      const float* db) {
  int64_t n = c->n;
  double* sw = calloc((size_t)n, sizeof(double));
  double* sb = calloc((size_t)n, sizeof(double));
  double* mag = calloc((size_t)n, sizeof(double));
  int wrong = 0;
  for (int64_t r = 0; r < c->rows; r++) {
    const float *g = c->g + r * n, *x = c->x + r * n;
    double m = c->mean[r], rs = c->rstd[r], a = 0, cc = 0, big = 0;
    for (int64_t i = 0; i < n; i++) {
      double xh = (x[i] - m) * rs, gw = g[i] * (w ? w[i] : 1.0);
      a += gw, cc += gw * xh, big += fabs(gw) + fabs(gw * xh);
      sw[i] += g[i] * xh, sb[i] += g[i], mag[i] += fabs(g[i] * xh) + fabs(g[i]);
    }
    a /= (double)n, cc /= (double)n, big /= (double)n;
    for (int64_t i = 0; i < n; i++) {
      double xh = (x[i] - m) * rs, gw = g[i] * (w ? w[i] : 1.0);
      double want = rs * (gw - a - xh * cc);
      if (fabs(dx[r * n + i] - want) > 1e-4 * rs * (1 + fabs(gw) + big) && wrong++ < 3)
        fprintf(stderr, "  n=%lld row %lld [%lld]: dx %.9g want %.9g\n", (long long)n,
                (long long)r, (long long)i, dx[r * n + i], want);
    }
  }
  for (int64_t i = 0; i < n; i++) {
    if ((fabs(dw[i] - sw[i]) > 2e-6 * (1 + mag[i]) || fabs(db[i] - sb[i]) > 2e-6 * (1 + mag[i])) &&
        wrong++ < 3)
      fprintf(stderr, "  n=%lld [%lld]: dw %.9g want %.9g, db %.9g want %.9g\n", (long long)n,
              (long long)i, dw[i], sw[i], db[i], sb[i]);
  }
  free(sw), free(sb), free(mag);
  return wrong;
}

static void test_kernel_matches_reference(void) {
  static const int64_t kLens[] = {1, 7, 8, 17, 64, 100};
  static const int64_t kRows[] = {1, 3, 70};
  for (size_t l = 0; l < sizeof kLens / sizeof kLens[0]; l++)
    for (size_t r = 0; r < sizeof kRows / sizeof kRows[0]; r++) {
      case_t c = case_make(kRows[r], kLens[l]);
      float* dx = malloc(sizeof(float) * (size_t)(c.rows * c.n));
      float* dw = malloc(sizeof(float) * (size_t)c.n);
      float* db = malloc(sizeof(float) * (size_t)c.n);
      for (int with_w = 0; with_w < 2; with_w++) {
        const float* w = with_w ? c.w : NULL;
        CHECK(tpu_hostnorm_layer_norm_backward(c.g, c.x, c.mean, c.rstd, w, dx, dw, db, c.rows,
                                               c.n));
        CHECK_EQ(mismatches(&c, w, dx, dw, db), 0);
      }
      free(dx), free(dw), free(db);
      case_free(&c);
    }
}

/* The rewrite of a program of x `xtype` (dx, %3), mean and rstd (%1, %2)
 * [mean_rows] on lines of their own, the weight %arg2 [64] (dw %4), and
 * db's identity %5 marked with `words`: its text, NULL when it left the
 * program alone, "ERR" when it failed. */
static char* rewrite(const char* xtype, int mean_rows, const char* words) {
  char text[2048];
  snprintf(text, sizeof text,
           "  func.func public @main(%%arg0: %s, %%arg1: %s, %%arg2: tensor<64xf32>, %%arg3: "
           "tensor<%dx1xf32>) {\n"
           "    %%1 = \"stablehlo.reshape\"(%%arg3) : (tensor<%dx1xf32>) -> tensor<%dxf32>\n"
           "    %%2 = \"stablehlo.reshape\"(%%arg3) : (tensor<%dx1xf32>) -> tensor<%dxf32>\n"
           "    %%3 = \"stablehlo.add\"(%%arg0, %%arg1) : (%s, %s) -> %s\n"
           "    %%4 = \"stablehlo.reshape\"(%%arg2) : (tensor<64xf32>) -> tensor<64xf32>\n"
           "    %%5 = \"stablehlo.reshape\"(%%4) {mhlo.frontend_attributes = {torchtpu_norm = "
           "\"%s\"}} : (tensor<64xf32>) -> tensor<64xf32>\n"
           "    \"func.return\"(%%3, %%4, %%5) : (%s, tensor<64xf32>, tensor<64xf32>) -> ()\n"
           "  }\n",
           xtype, xtype, mean_rows, mean_rows, mean_rows, mean_rows, mean_rows, xtype, xtype,
           xtype, words, xtype);
  char* out = NULL;
  size_t len = 0;
  tpu_status_t s = tpu_hostnorm_rewrite(text, strlen(text), &out, &len);
  if (s || (out && strlen(out) != len)) {
    tpu_status_free(s);
    free(out);
    return strdup("ERR");
  }
  return out;
}

static const char kX[] = "tensor<1024x64xf32>";

static void test_rewrite(void) {
  char* out = rewrite(kX, 1024, "layer_norm_bwd %arg0 %arg1 %1 %2 %arg2 %3 %4");
  CHECK(out != NULL);
  if (!out) return;
  CHECK_STR_CONTAINS(out,
                     "    %lnb5:3 = \"stablehlo.custom_call\"(%arg0, %arg1, %1, %2, %arg2) "
                     "{api_version = 4 : i32, backend_config = {n = 64 : i64}, "
                     "call_target_name = \"torchtpu_norm_layer_norm_bwd\"");
  CHECK_STR_CONTAINS(out,
                     ": (tensor<1024x64xf32>, tensor<1024x64xf32>, tensor<1024xf32>, "
                     "tensor<1024xf32>, tensor<64xf32>) -> (tensor<1024x64xf32>, "
                     "tensor<64xf32>, tensor<64xf32>)\n"
                     "    %3 = \"stablehlo.reshape\"(%lnb5#0) : (tensor<1024x64xf32>) -> "
                     "tensor<1024x64xf32>\n"
                     "    %4 = \"stablehlo.reshape\"(%lnb5#1) : (tensor<64xf32>) -> "
                     "tensor<64xf32>\n"
                     "    %5 = \"stablehlo.reshape\"(%lnb5#2) : (tensor<64xf32>) -> "
                     "tensor<64xf32>\n");
  /* the lines that defined dx and dw are gone, mean's and rstd's stay */
  CHECK(!strstr(out, "stablehlo.add") && !strstr(out, "reshape\"(%arg2)"));
  CHECK(strstr(out, "%1 = \"stablehlo.reshape\"(%arg3)") != NULL);
  free(out);
  /* Without a weight: four operands. */
  char* nw = rewrite(kX, 1024, "layer_norm_bwd %arg0 %arg1 %1 %2 - %3 %4");
  CHECK(nw && strstr(nw, "custom_call\"(%arg0, %arg1, %1, %2) {"));
  free(nw);
}

/* What stays XLA's: too few elements, mean not one a row, dw not the
 * weight's shape, a wrong word count or kind. */
static void test_rewrite_declines(void) {
  static const char* kWords[] = {
      "layer_norm_bwd %arg0 %arg1 %1 %2 %arg2 %3 %4",   /* x [16, 64]: small */
      "layer_norm_bwd %arg0 %arg1 %1 %2 %arg2 %3",      /* a word short */
      "layer_norm_fwd %arg0 %arg1 %1 %2 %arg2 %3 %4",   /* another kind */
      "layer_norm_bwd %arg0 %arg1 %1 %2 %arg2 %3 %9",   /* dw undefined */
  };
  for (size_t i = 0; i < sizeof kWords / sizeof kWords[0]; i++) {
    char* out = rewrite("tensor<16x64xf32>", 16, kWords[i]);
    CHECK(out == NULL);
    free(out);
  }
  /* x of 1024 rows, but mean and rstd [64]: not one a row */
  char* out = rewrite(kX, 64, "layer_norm_bwd %arg0 %arg1 %1 %2 %arg2 %3 %4");
  CHECK(out == NULL);
  free(out);
}

static void test_setup(void) { CHECK(tpu_testing_start_devices(1)); }

/* A program whose marked identity the plugin runs as the call: its three
 * results equal the kernel's, bit for bit, with the rows cut in parts on
 * the pool (rows * 64 past two parts' worth) or in one. */
static void check_program(int64_t rows) {
  enum { N = 64 };
  case_t c = case_make(rows, N);
  char text[2048];
  snprintf(text, sizeof text,
           "module @m {\n  func.func public @main(%%arg0: tensor<%lldx64xf32>, %%arg1: "
           "tensor<%lldx64xf32>, %%arg2: tensor<%lldxf32>, %%arg3: tensor<%lldxf32>, %%arg4: "
           "tensor<64xf32>) -> (tensor<%lldx64xf32>, tensor<64xf32>, tensor<64xf32>) {\n"
           "    %%0 = \"stablehlo.reshape\"(%%arg2) : (tensor<%lldxf32>) -> tensor<%lldxf32>\n"
           "    %%1 = \"stablehlo.reshape\"(%%arg3) : (tensor<%lldxf32>) -> tensor<%lldxf32>\n"
           "    %%2 = \"stablehlo.add\"(%%arg0, %%arg1) : (tensor<%lldx64xf32>, "
           "tensor<%lldx64xf32>) -> tensor<%lldx64xf32>\n"
           "    %%3 = \"stablehlo.reshape\"(%%arg4) : (tensor<64xf32>) -> tensor<64xf32>\n"
           "    %%4 = \"stablehlo.reshape\"(%%arg4) {mhlo.frontend_attributes = {torchtpu_norm "
           "= \"layer_norm_bwd %%arg0 %%arg1 %%0 %%1 %%arg4 %%2 %%3\"}} : (tensor<64xf32>) -> "
           "tensor<64xf32>\n"
           "    \"func.return\"(%%2, %%3, %%4) : (tensor<%lldx64xf32>, tensor<64xf32>, "
           "tensor<64xf32>) -> ()\n  }\n}\n",
           (long long)rows, (long long)rows, (long long)rows, (long long)rows, (long long)rows,
           (long long)rows, (long long)rows, (long long)rows, (long long)rows, (long long)rows,
           (long long)rows, (long long)rows, (long long)rows);
  size_t xn = (size_t)(rows * N);
  float* want = malloc(sizeof(float) * xn);
  float* got = malloc(sizeof(float) * xn);
  float wdw[N], wdb[N], gdw[N], gdb[N];
  CHECK(tpu_hostnorm_layer_norm_backward(c.g, c.x, c.mean, c.rstd, c.w, want, wdw, wdb, rows, N));
  tpu_program_t* p = NULL;
  tpu_buffer_t *in[5] = {0}, *res[3] = {0};
  int64_t xd[2] = {rows, N}, md[1] = {rows}, wd[1] = {N};
  tpu_client_t* cl = tpu_runtime_client();
  tpu_status_t s = tpu_program_get(text, strlen(text), &p);
  if (!s) s = tpu_buffer_from_host(cl, 0, c.g, TPU_DTYPE_FLOAT32, xd, 2, NULL, &in[0]);
  if (!s) s = tpu_buffer_from_host(cl, 0, c.x, TPU_DTYPE_FLOAT32, xd, 2, NULL, &in[1]);
  if (!s) s = tpu_buffer_from_host(cl, 0, c.mean, TPU_DTYPE_FLOAT32, md, 1, NULL, &in[2]);
  if (!s) s = tpu_buffer_from_host(cl, 0, c.rstd, TPU_DTYPE_FLOAT32, md, 1, NULL, &in[3]);
  if (!s) s = tpu_buffer_from_host(cl, 0, c.w, TPU_DTYPE_FLOAT32, wd, 1, NULL, &in[4]);
  if (!s) s = tpu_program_execute(p, 0, in, 5, res);
  if (!s) s = tpu_buffer_to_host(res[0], got, sizeof(float) * xn);
  if (!s) s = tpu_buffer_to_host(res[1], gdw, sizeof gdw);
  if (!s) s = tpu_buffer_to_host(res[2], gdb, sizeof gdb);
  for (int i = 0; i < 5; i++) tpu_buffer_destroy(in[i]);
  for (int i = 0; i < 3; i++) tpu_buffer_destroy(res[i]);
  CHECK_OK(s);
  int wrong = 0;
  for (size_t i = 0; i < xn; i++) wrong += got[i] != want[i];
  CHECK_EQ(wrong, 0);
  /* In parts the column sums add up in another order: against the
   * reference, not bit for bit. */
  CHECK_EQ(mismatches(&c, c.w, got, gdw, gdb), 0);
  free(want), free(got);
  case_free(&c);
}

static void test_custom_call(void) {
  check_program(1024);  /* one part */
  check_program(4100);  /* in parts on the pool */
}

TPU_TEST_MAIN(TPU_TEST(test_kernel_matches_reference), TPU_TEST(test_rewrite),
              TPU_TEST(test_rewrite_declines), TPU_TEST(test_setup),
              TPU_TEST(test_custom_call))
