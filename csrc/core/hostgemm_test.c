/* Dots through the host gemm: the text rewrite (which dots, which
 * transposes, what stays XLA's) and the custom calls run by the CPU plugin
 * against products computed here, in every transpose form, batched, in
 * float32 and float64, with an empty contraction. */
#include "hostgemm.h"

#include <math.h>
#include <stdatomic.h>

#include "metrics.h"
#include "pjrt/pjrt.h"
#include "program.h"
#include "runtime.h"
#include "testing.h"

static atomic_int g_calls;

/* The installed gemm: a plain triple loop, counting calls. */
static void naive_gemm(const tpu_hostgemm_t* g) {
  atomic_fetch_add(&g_calls, 1);
  for (int64_t i = 0; i < g->m; i++)
    for (int64_t j = 0; j < g->n; j++) {
      double acc = 0;
      for (int64_t p = 0; p < g->k; p++) {
        int64_t ai = g->trans_a ? p * g->lda + i : i * g->lda + p;
        int64_t bi = g->trans_b ? j * g->ldb + p : p * g->ldb + j;
        if (g->dtype == TPU_DTYPE_FLOAT32)
          acc += (double)((const float*)g->a)[ai] * ((const float*)g->b)[bi];
        else
          acc += ((const double*)g->a)[ai] * ((const double*)g->b)[bi];
      }
      if (g->dtype == TPU_DTYPE_FLOAT32) ((float*)g->c)[i * g->ldc + j] = (float)acc;
      else ((double*)g->c)[i * g->ldc + j] = acc;
    }
}

static const char* dot_line(char* buf, size_t cap, const char* dims, const char* types) {
  snprintf(buf, cap,
           "    %%2 = \"stablehlo.dot_general\"(%%0, %%1) {dot_dimension_numbers = "
           "#stablehlo.dot<%s>, precision_config = [#stablehlo<precision HIGHEST>, "
           "#stablehlo<precision HIGHEST>]} : %s\n",
           dims, types);
  return buf;
}

static bool rewrites_to(const char* dims, const char* types, const char* target) {
  char line[512];
  dot_line(line, sizeof line, dims, types);
  char* out = NULL;
  size_t len = 0;
  tpu_status_t s = tpu_hostgemm_rewrite(line, strlen(line), &out, &len);
  if (s) {
    tpu_status_free(s);
    return false;
  }
  bool ok = target ? out && strstr(out, target) && !strstr(out, "dot_general") &&
                         strlen(out) == len && out[len - 1] == '\n'
                   : out == NULL;
  free(out);
  return ok;
}

static void test_rewrite_picks_plain_float_dots(void) {
  const char* f32 = "(tensor<64x32xf32>, tensor<32x48xf32>) -> tensor<64x48xf32>";
  CHECK(rewrites_to("lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [0]", f32,
                    "\"torchtpu_gemm_nn\""));
  CHECK(rewrites_to("lhs_batching_dimensions = [], rhs_batching_dimensions = [], "
                    "lhs_contracting_dimensions = [0], rhs_contracting_dimensions = [1]",
                    "(tensor<32x64xf32>, tensor<48x32xf32>) -> tensor<64x48xf32>",
                    "\"torchtpu_gemm_tt\""));
  CHECK(rewrites_to("lhs_batching_dimensions = [0], rhs_batching_dimensions = [0], "
                    "lhs_contracting_dimensions = [2], rhs_contracting_dimensions = [2]",
                    "(tensor<4x64x32xf64>, tensor<4x48x32xf64>) -> tensor<4x64x48xf64>",
                    "\"torchtpu_gemm_nt\""));
  /* Layouts are pinned row-major for the handler. */
  CHECK(rewrites_to("lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [0]", f32,
                    "result_layouts = [dense<[1, 0]> : tensor<2xindex>]"));
  /* What stays XLA's: other dtypes, two contracting dims, batch dims not
   * leading, a sum of one product, tiny products, dynamic sizes. */
  CHECK(rewrites_to("lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [0]",
                    "(tensor<64x32xbf16>, tensor<32x48xbf16>) -> tensor<64x48xbf16>", NULL));
  CHECK(rewrites_to("lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [0]",
                    "(tensor<64x32xcomplex<f32>>, tensor<32x48xcomplex<f32>>) -> "
                    "tensor<64x48xcomplex<f32>>",
                    NULL));
  CHECK(rewrites_to("lhs_contracting_dimensions = [0, 1], rhs_contracting_dimensions = [0, 1]",
                    "(tensor<64x32xf32>, tensor<64x32xf32>) -> tensor<f32>", NULL));
  CHECK(rewrites_to("lhs_batching_dimensions = [1], rhs_batching_dimensions = [0], "
                    "lhs_contracting_dimensions = [2], rhs_contracting_dimensions = [1]",
                    "(tensor<64x4x32xf32>, tensor<4x32x48xf32>) -> tensor<4x64x48xf32>", NULL));
  CHECK(rewrites_to("lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [0]",
                    "(tensor<4096x1xf32>, tensor<1x48xf32>) -> tensor<4096x48xf32>", NULL));
  CHECK(rewrites_to("lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [0]",
                    "(tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>", NULL));
  CHECK(rewrites_to("lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [0]",
                    "(tensor<?x32xf32>, tensor<32x48xf32>) -> tensor<?x48xf32>", NULL));
  CHECK(rewrites_to("lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [0]>, "
                    "algorithm = #stablehlo.dot_algorithm<lhs_precision_type = bf16, "
                    "rhs_precision_type = bf16, accumulation_type = f32, "
                    "lhs_component_count = 1, rhs_component_count = 1, "
                    "num_primary_terms = 1, allow_imprecise_accumulation = false",
                    f32, NULL));
}

/* A module computing dot(x, y) with these dimension numbers. */
static tpu_status_t run_dot(const char* dims, tpu_dtype_t dtype, const int64_t* xd,
                            const int64_t* yd, const int64_t* od, int rank, const void* x,
                            const void* y, void* out, size_t out_bytes) {
  const char* t = dtype == TPU_DTYPE_FLOAT32 ? "f32" : "f64";
  char ts[3][64];
  const int64_t* all[3] = {xd, yd, od};
  for (int i = 0; i < 3; i++) {
    int n = snprintf(ts[i], sizeof ts[i], "tensor<");
    for (int d = 0; d < rank; d++) n += snprintf(ts[i] + n, sizeof ts[i] - n, "%lldx", (long long)all[i][d]);
    snprintf(ts[i] + n, sizeof ts[i] - n, "%s>", t);
  }
  char types[256], line[512], text[1024];
  snprintf(types, sizeof types, "(%s, %s) -> %s", ts[0], ts[1], ts[2]);
  dot_line(line, sizeof line, dims, types);
  snprintf(text, sizeof text,
           "module @m {\n  func.func public @main(%%0: %s, %%1: %s) -> (%s) {\n%s"
           "    \"func.return\"(%%2) : (%s) -> ()\n  }\n}\n",
           ts[0], ts[1], ts[2], line, ts[2]);
  tpu_program_t* p = NULL;
  TPU_RETURN_IF_ERROR(tpu_program_get(text, strlen(text), &p));
  tpu_buffer_t *in[2] = {0}, *res[1] = {0};
  tpu_status_t s = tpu_buffer_from_host(tpu_runtime_client(), 0, x, dtype, xd, rank, NULL, &in[0]);
  if (!s) s = tpu_buffer_from_host(tpu_runtime_client(), 0, y, dtype, yd, rank, NULL, &in[1]);
  if (!s) s = tpu_program_execute(p, 0, in, 2, res);
  if (!s) s = tpu_buffer_to_host(res[0], out, out_bytes);
  for (int i = 0; i < 2; i++) tpu_buffer_destroy(in[i]);
  tpu_buffer_destroy(res[0]);
  return s;
}

/* Every transpose form, batched, against a product computed here. */
static void check_form(bool ta, bool tb, tpu_dtype_t dtype, int B, int M, int K, int N) {
  int64_t xd[3] = {B, ta ? K : M, ta ? M : K}, yd[3] = {B, tb ? N : K, tb ? K : N};
  int64_t od[3] = {B, M, N};
  double* x = malloc(sizeof(double) * B * M * K);
  double* y = malloc(sizeof(double) * B * K * N);
  double* want = malloc(sizeof(double) * B * M * N);
  double* got = malloc(sizeof(double) * B * M * N);
  float* xf = malloc(sizeof(float) * B * M * K);
  float* yf = malloc(sizeof(float) * B * K * N);
  float* gotf = malloc(sizeof(float) * B * M * N);
  for (int i = 0; i < B * M * K; i++) x[i] = xf[i] = (float)((i * 7 % 23) - 11) / 8;
  for (int i = 0; i < B * K * N; i++) y[i] = yf[i] = (float)((i * 5 % 19) - 9) / 4;
  for (int b = 0; b < B; b++)
    for (int i = 0; i < M; i++)
      for (int j = 0; j < N; j++) {
        double acc = 0;
        for (int p = 0; p < K; p++)
          acc += x[b * M * K + (ta ? p * M + i : i * K + p)] *
                 y[b * K * N + (tb ? j * K + p : p * N + j)];
        want[(b * M + i) * N + j] = acc;
      }
  char dims[256];
  snprintf(dims, sizeof dims,
           "lhs_batching_dimensions = [0], rhs_batching_dimensions = [0], "
           "lhs_contracting_dimensions = [%d], rhs_contracting_dimensions = [%d]",
           ta ? 1 : 2, tb ? 2 : 1);
  int calls = atomic_load(&g_calls);
  bool f32 = dtype == TPU_DTYPE_FLOAT32;
  tpu_status_t s = run_dot(dims, dtype, xd, yd, od, 3, f32 ? (void*)xf : (void*)x,
                           f32 ? (void*)yf : (void*)y, f32 ? (void*)gotf : (void*)got,
                           (size_t)(B * M * N) * (f32 ? 4 : 8));
  int ran = atomic_load(&g_calls) - calls;
  int wrong = 0;
  for (int i = 0; !s && i < B * M * N; i++) /* exact: small integers over powers of two */
    wrong += (f32 ? gotf[i] : got[i]) != want[i];
  free(x), free(y), free(want), free(got), free(xf), free(yf), free(gotf);
  CHECK_OK(s);
  /* It ran the host gemm: once per product of a batch (whether runs of
   * them went to the pool or not), or per block of one big product. */
  CHECK(B == 1 && (int64_t)M * N * K >= (1 << 21) ? ran > 1 : ran >= B);
  if ((int64_t)M * N * K < (1 << 21)) CHECK_EQ(ran, B);
  CHECK_EQ(wrong, 0);
}

static void test_custom_calls_compute_every_form(void) {
  CHECK(tpu_hostgemm_active());
  for (int f = 0; f < 4; f++) check_form(f & 2, f & 1, TPU_DTYPE_FLOAT32, 3, 17, 33, 29);
  check_form(true, false, TPU_DTYPE_FLOAT64, 3, 17, 33, 29);
}

/* Products big enough to be cut into blocks shared by the pool's threads,
 * split along rows (m >= n) and along columns, and batches of small ones
 * split into runs of products. */
static void test_big_products_in_blocks(void) {
  for (int f = 0; f < 4; f++) check_form(f & 2, f & 1, TPU_DTYPE_FLOAT32, 2, 301, 97, 83);
  for (int f = 0; f < 4; f++) check_form(f & 2, f & 1, TPU_DTYPE_FLOAT32, 1, 70, 129, 257);
  check_form(false, true, TPU_DTYPE_FLOAT64, 1, 255, 130, 90);
  /* Batches big as a whole, in runs of products: attention's shapes, and
   * a count that does not divide evenly. */
  for (int f = 0; f < 4; f++) check_form(f & 2, f & 1, TPU_DTYPE_FLOAT32, 64, 64, 16, 64);
  check_form(true, true, TPU_DTYPE_FLOAT64, 37, 40, 31, 52);
}

/* Runs a module of two f32 inputs and one output. */
static tpu_status_t run_text(const char* text, const int64_t* xd, const int64_t* yd, int rank,
                             const float* x, const float* y, float* out, size_t out_bytes) {
  tpu_program_t* p = NULL;
  TPU_RETURN_IF_ERROR(tpu_program_get(text, strlen(text), &p));
  tpu_buffer_t *in[2] = {0}, *res[1] = {0};
  tpu_status_t s =
      tpu_buffer_from_host(tpu_runtime_client(), 0, x, TPU_DTYPE_FLOAT32, xd, rank, NULL, &in[0]);
  if (!s)
    s = tpu_buffer_from_host(tpu_runtime_client(), 0, y, TPU_DTYPE_FLOAT32, yd, rank, NULL, &in[1]);
  if (!s) s = tpu_program_execute(p, 0, in, 2, res);
  if (!s) s = tpu_buffer_to_host(res[0], out, out_bytes);
  for (int i = 0; i < 2; i++) tpu_buffer_destroy(in[i]);
  tpu_buffer_destroy(res[0]);
  return s;
}

/* Transposes (of the last two dims) feeding a dot are read in place with
 * the transpose flag flipped, through identity broadcasts; a transpose of
 * other dims is left for XLA to write out. */
static void test_transposed_operands_read_in_place(void) {
  enum { B = 2, K = 20, M = 30, N = 40 };
  static const char kText[] =
      "module @m {\n"
      "  func.func public @main(%arg0: tensor<2x20x30xf32>, %arg1: tensor<2x40x20xf32>) -> "
      "(tensor<2x30x40xf32>) {\n"
      "    %0 = \"stablehlo.transpose\"(%arg0) {permutation = array<i64: 0, 2, 1>} : "
      "(tensor<2x20x30xf32>) -> tensor<2x30x20xf32>\n"
      "    %1 = \"stablehlo.transpose\"(%arg1) {permutation = array<i64: 0, 2, 1>} : "
      "(tensor<2x40x20xf32>) -> tensor<2x20x40xf32>\n"
      "    %2 = \"stablehlo.broadcast_in_dim\"(%1) {broadcast_dimensions = array<i64: 0, 1, 2>} : "
      "(tensor<2x20x40xf32>) -> tensor<2x20x40xf32>\n"
      "    %3 = \"stablehlo.dot_general\"(%0, %2) {dot_dimension_numbers = "
      "#stablehlo.dot<lhs_batching_dimensions = [0], rhs_batching_dimensions = [0], "
      "lhs_contracting_dimensions = [2], rhs_contracting_dimensions = [1]>} : "
      "(tensor<2x30x20xf32>, tensor<2x20x40xf32>) -> tensor<2x30x40xf32>\n"
      "    \"func.return\"(%3) : (tensor<2x30x40xf32>) -> ()\n"
      "  }\n"
      "}\n";
  char* out = NULL;
  size_t len = 0;
  CHECK_OK(tpu_hostgemm_rewrite(kText, strlen(kText), &out, &len));
  CHECK(out != NULL);
  CHECK_STR_CONTAINS(out, "\"stablehlo.custom_call\"(%arg0, %arg1) {api_version = 4 : i32, "
                          "call_target_name = \"torchtpu_gemm_tt\"");
  CHECK_STR_CONTAINS(out, ": (tensor<2x20x30xf32>, tensor<2x40x20xf32>) -> tensor<2x30x40xf32>");
  free(out);
  static float x[B * K * M], y[B * N * K], got[B * M * N];
  for (int i = 0; i < B * K * M; i++) x[i] = (float)((i * 7 % 23) - 11) / 8;
  for (int i = 0; i < B * N * K; i++) y[i] = (float)((i * 5 % 19) - 9) / 4;
  int64_t xd[3] = {B, K, M}, yd[3] = {B, N, K};
  CHECK_OK(run_text(kText, xd, yd, 3, x, y, got, sizeof got));
  for (int b = 0; b < B; b++)
    for (int i = 0; i < M; i++)
      for (int j = 0; j < N; j++) {
        double want = 0;
        for (int p = 0; p < K; p++) want += (double)x[(b * K + p) * M + i] * y[(b * N + j) * K + p];
        CHECK(got[(b * M + i) * N + j] == (float)want);
      }
  /* Swapping batch and row dims is not a gemm's transpose: it stays. */
  static const char kOther[] =
      "    %0 = \"stablehlo.transpose\"(%arg0) {permutation = array<i64: 1, 0, 2>} : "
      "(tensor<30x2x20xf32>) -> tensor<2x30x20xf32>\n"
      "    %3 = \"stablehlo.dot_general\"(%0, %arg1) {dot_dimension_numbers = "
      "#stablehlo.dot<lhs_batching_dimensions = [0], rhs_batching_dimensions = [0], "
      "lhs_contracting_dimensions = [2], rhs_contracting_dimensions = [1]>} : "
      "(tensor<2x30x20xf32>, tensor<2x20x40xf32>) -> tensor<2x30x40xf32>\n";
  CHECK_OK(tpu_hostgemm_rewrite(kOther, strlen(kOther), &out, &len));
  CHECK_STR_CONTAINS(out, "\"stablehlo.custom_call\"(%0, %arg1) {api_version = 4 : i32, "
                          "call_target_name = \"torchtpu_gemm_nn\"");
  free(out);
  /* Values are numbered per function: an earlier function's %0 (a
   * transpose) says nothing about this one's %0. */
  static const char kScopes[] =
      "  func.func private @f0(%arg0: tensor<20x30xf32>) -> (tensor<30x20xf32>) {\n"
      "    %0 = \"stablehlo.transpose\"(%arg0) {permutation = array<i64: 1, 0>} : "
      "(tensor<20x30xf32>) -> tensor<30x20xf32>\n"
      "  }\n"
      "  func.func public @main(%arg0: tensor<600xf32>, %arg1: tensor<20x40xf32>) {\n"
      "    %0 = \"stablehlo.reshape\"(%arg0) : (tensor<600xf32>) -> tensor<30x20xf32>\n"
      "    %1 = \"stablehlo.dot_general\"(%0, %arg1) {dot_dimension_numbers = "
      "#stablehlo.dot<lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [0]>} : "
      "(tensor<30x20xf32>, tensor<20x40xf32>) -> tensor<30x40xf32>\n";
  CHECK_OK(tpu_hostgemm_rewrite(kScopes, strlen(kScopes), &out, &len));
  CHECK_STR_CONTAINS(out, "\"stablehlo.custom_call\"(%0, %arg1) {api_version = 4 : i32, "
                          "call_target_name = \"torchtpu_gemm_nn\"");
  free(out);
}

static void test_empty_contraction_is_zero(void) {
  /* [64,0] x [0,80] is left XLA's by the k >= 2 rule; a rewritten dot
   * never sees k == 0 from our lowering, but the handler zero-fills. The
   * rule is what keeps XLA's result here: zeros. */
  int64_t xd[2] = {64, 0}, yd[2] = {0, 80}, od[2] = {64, 80};
  static float out[64 * 80];
  for (int i = 0; i < 64 * 80; i++) out[i] = NAN;
  float dummy = 0;
  CHECK_OK(run_dot("lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [0]",
                   TPU_DTYPE_FLOAT32, xd, yd, od, 2, &dummy, &dummy, out, sizeof out));
  for (int i = 0; i < 64 * 80; i++) CHECK(out[i] == 0.0f);
}

static void test_off_without_a_gemm(void) {
  /* Removing the gemm turns the rewrite off for programs compiled later. */
  tpu_hostgemm_install(NULL);
  CHECK(!tpu_hostgemm_active());
  tpu_hostgemm_install(naive_gemm);
  CHECK(tpu_hostgemm_active());
}

static void setup(void) {
  tpu_hostgemm_install(naive_gemm);
  tpu_status_t s = tpu_runtime_init(NULL);
  if (s) {
    fprintf(stderr, "runtime init failed: %s\n", tpu_status_message(s));
    tpu_status_free(s);
  }
}

static void test_setup(void) {
  setup();
  CHECK(tpu_runtime_is_initialized());
}

TPU_TEST_MAIN(TPU_TEST(test_rewrite_picks_plain_float_dots), TPU_TEST(test_setup),
              TPU_TEST(test_custom_calls_compute_every_form), TPU_TEST(test_big_products_in_blocks),
              TPU_TEST(test_transposed_operands_read_in_place),
              TPU_TEST(test_empty_contraction_is_zero), TPU_TEST(test_off_without_a_gemm))
