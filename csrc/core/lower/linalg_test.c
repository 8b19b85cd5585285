/* Linalg family: each lowering run on the XLA CPU plugin against products
 * computed here. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "../testing.h"
#include "emit.h"
#include "lower_testing.h"

static bool close(double a, double b) { return fabs(a - b) <= 1e-5 * (1 + fabs(b)); }
static float val(int k) { return (float)((k * 37) % 11 - 5) * 0.25f; }

static void test_bmm(void) {
  enum { B = 2, N = 3, M = 4, P = 5 };
  int64_t da[3] = {B, N, M}, db[3] = {B, M, P}, dout[3] = {B, N, P};
  float a[B * N * M], b[B * M * P];
  for (int k = 0; k < B * N * M; k++) a[k] = val(k);
  for (int k = 0; k < B * M * P; k++) b[k] = val(k + 3);
  tpu_lower_arg_t args[2] = {tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 3, da),
                             tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 3, db)};
  const void* data[2] = {a, b};
  tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 3, dout);
  void* r[1];
  CHECK_OK(tpu_test_run_op("aten::bmm", args, 2, NULL, data, &out, 1, r));
  float* v = r[0];
  bool ok = true;
  for (int z = 0; z < B; z++)
    for (int i = 0; i < N; i++)
      for (int j = 0; j < P; j++) {
        double s = 0;
        for (int k = 0; k < M; k++) s += a[(z * N + i) * M + k] * b[(z * M + k) * P + j];
        ok &= close(v[(z * N + i) * P + j], s);
      }
  free(r[0]);
  CHECK(ok);
}

/* addmm with a broadcast bias, alpha 2, and beta 0 ignoring a NaN bias. */
static void test_addmm_beta_alpha(void) {
  enum { N = 2, M = 3, P = 4 };
  int64_t ds[1] = {P}, da[2] = {N, M}, db[2] = {M, P}, dout[2] = {N, P};
  float self[P] = {1, -1, 0.5f, NAN}, a[N * M], b[M * P];
  for (int k = 0; k < N * M; k++) a[k] = val(k);
  for (int k = 0; k < M * P; k++) b[k] = val(k + 5);
  tpu_lower_arg_t args[5] = {tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 1, ds),
                             tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 2, da),
                             tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 2, db),
                             tpu_test_scalar_arg(TPU_DTYPE_FLOAT64, true),
                             tpu_test_scalar_arg(TPU_DTYPE_INT64, true)};
  double betas[2] = {0.0, 0.5};
  int64_t alpha = 2;
  tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 2, dout);
  for (int t = 0; t < 2; t++) {
    const void* data[5] = {self, a, b, &betas[t], &alpha};
    void* r[1];
    CHECK_OK(tpu_test_run_op("aten::addmm", args, 5, NULL, data, &out, 1, r));
    float* v = r[0];
    bool ok = true;
    for (int i = 0; i < N; i++)
      for (int j = 0; j < P; j++) {
        double s = 0;
        for (int k = 0; k < M; k++) s += a[i * M + k] * b[k * P + j];
        double want = 2 * s + (betas[t] == 0 ? 0 : betas[t] * self[j]);
        ok &= isnan(want) ? isnan(v[i * P + j]) : close(v[i * P + j], want);
      }
    free(r[0]);
    CHECK(ok);
  }
}

/* baddbmm in bfloat16: f32 products and combination, one rounding. */
static void test_baddbmm_bf16_rounds_once(void) {
  enum { B = 2, N = 2, M = 64, P = 3 };
  int64_t ds[3] = {B, N, P}, da[3] = {B, N, M}, db[3] = {B, M, P};
  uint16_t self[B * N * P], a[B * N * M], b[B * M * P];
  for (int k = 0; k < B * N * P; k++) self[k] = to_bf16(val(k) * 3);
  for (int k = 0; k < B * N * M; k++) a[k] = to_bf16(1.0f + val(k) / 64);
  for (int k = 0; k < B * M * P; k++) b[k] = to_bf16(1.0f + val(k + 1) / 32);
  tpu_lower_arg_t args[5] = {tpu_test_tensor_arg(TPU_DTYPE_BFLOAT16, 3, ds),
                             tpu_test_tensor_arg(TPU_DTYPE_BFLOAT16, 3, da),
                             tpu_test_tensor_arg(TPU_DTYPE_BFLOAT16, 3, db), kNone, kNone};
  const void* data[3] = {self, a, b};
  tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_BFLOAT16, 3, ds);
  void* r[1];
  CHECK_OK(tpu_test_run_op("aten::baddbmm", args, 5, NULL, data, &out, 1, r));
  uint16_t* v = r[0];
  int bad = 0;
  for (int z = 0; z < B; z++)
    for (int i = 0; i < N; i++)
      for (int j = 0; j < P; j++) {
        float s = 0;
        for (int k = 0; k < M; k++)
          s += from_bf16(a[(z * N + i) * M + k]) * from_bf16(b[(z * M + k) * P + j]);
        float want = from_bf16(to_bf16(s + from_bf16(self[(z * N + i) * P + j])));
        /* Summation order may differ in f32; allow one bf16 ulp. */
        bad += fabsf(from_bf16(v[(z * N + i) * P + j]) - want) > fabsf(want) / 128;
      }
  free(r[0]);
  CHECK_EQ(bad, 0);
}

static void test_addbmm_sums_batches(void) {
  enum { B = 3, N = 2, M = 2, P = 2 };
  int64_t ds[2] = {N, P}, da[3] = {B, N, M}, db[3] = {B, M, P};
  float self[N * P] = {1, 2, 3, 4}, a[B * N * M], b[B * M * P];
  for (int k = 0; k < B * N * M; k++) a[k] = val(k);
  for (int k = 0; k < B * M * P; k++) b[k] = val(k + 2);
  tpu_lower_arg_t args[5] = {tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 2, ds),
                             tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 3, da),
                             tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 3, db),
                             tpu_test_scalar_arg(TPU_DTYPE_INT64, true), kNone};
  int64_t beta = 3;
  const void* data[4] = {self, a, b, &beta};
  tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 2, ds);
  void* r[1];
  CHECK_OK(tpu_test_run_op("aten::addbmm", args, 5, NULL, data, &out, 1, r));
  float* v = r[0];
  bool ok = true;
  for (int i = 0; i < N; i++)
    for (int j = 0; j < P; j++) {
      double s = 3 * self[i * P + j];
      for (int z = 0; z < B; z++)
        for (int k = 0; k < M; k++) s += a[(z * N + i) * M + k] * b[(z * M + k) * P + j];
      ok &= close(v[i * P + j], s);
    }
  free(r[0]);
  CHECK(ok);
}

static void test_dot_vdot_mv_addmv(void) {
  int64_t d[1] = {5}, dm[2] = {2, 5}, d2[1] = {2};
  int64_t x[5] = {1, -2, 3, 4, 1000000000}, y[5] = {5, 6, -7, 8, 3};
  tpu_lower_arg_t args[2] = {tpu_test_tensor_arg(TPU_DTYPE_INT64, 1, d),
                             tpu_test_tensor_arg(TPU_DTYPE_INT64, 1, d)};
  const void* data[2] = {x, y};
  tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_INT64, 0, NULL);
  void* r[1];
  int64_t want = 5 - 12 - 21 + 32 + 3000000000LL;
  CHECK_OK(tpu_test_run_op("aten::dot", args, 2, NULL, data, &out, 1, r));
  bool ok = *(int64_t*)r[0] == want;
  free(r[0]);
  CHECK(ok);
  CHECK_OK(tpu_test_run_op("aten::vdot", args, 2, NULL, data, &out, 1, r));
  ok = *(int64_t*)r[0] == want;
  free(r[0]);
  CHECK(ok);
  float m[10], v[5], bias[2] = {10, -10};
  for (int k = 0; k < 10; k++) m[k] = val(k);
  for (int k = 0; k < 5; k++) v[k] = val(k + 7);
  double mv[2] = {0, 0};
  for (int i = 0; i < 2; i++)
    for (int k = 0; k < 5; k++) mv[i] += m[i * 5 + k] * v[k];
  tpu_lower_arg_t margs[2] = {tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 2, dm),
                              tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 1, d)};
  const void* mdata[2] = {m, v};
  out = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 1, d2);
  CHECK_OK(tpu_test_run_op("aten::mv", margs, 2, NULL, mdata, &out, 1, r));
  float* f = r[0];
  ok = close(f[0], mv[0]) && close(f[1], mv[1]);
  free(r[0]);
  CHECK(ok);
  tpu_lower_arg_t aargs[5] = {tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 1, d2),
                              tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 2, dm),
                              tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 1, d),
                              tpu_test_scalar_arg(TPU_DTYPE_FLOAT64, true),
                              tpu_test_scalar_arg(TPU_DTYPE_FLOAT64, true)};
  double beta = 0.5, alpha = -1;
  const void* adata[5] = {bias, m, v, &beta, &alpha};
  CHECK_OK(tpu_test_run_op("aten::addmv", aargs, 5, NULL, adata, &out, 1, r));
  f = r[0];
  ok = close(f[0], 5 - mv[0]) && close(f[1], -5 - mv[1]);
  free(r[0]);
  CHECK(ok);
}

static void test_addr(void) {
  int64_t dn[1] = {2}, dm[1] = {3}, d[2] = {2, 3};
  float self[6] = {1, 2, 3, 4, 5, 6}, u[2] = {2, -1}, w[3] = {1, 0.5f, 4};
  tpu_lower_arg_t args[5] = {tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 2, d),
                             tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 1, dn),
                             tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 1, dm),
                             tpu_test_scalar_arg(TPU_DTYPE_FLOAT64, true), kNone};
  double beta = 2;
  const void* data[4] = {self, u, w, &beta};
  tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 2, d);
  void* r[1];
  CHECK_OK(tpu_test_run_op("aten::addr", args, 5, NULL, data, &out, 1, r));
  float* v = r[0];
  bool ok = true;
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 3; j++) ok &= v[i * 3 + j] == 2 * self[i * 3 + j] + u[i] * w[j];
  free(r[0]);
  CHECK(ok);
}

static void test_bool_declines(void) {
  int64_t d[2] = {2, 2};
  tpu_lower_arg_t args[2] = {tpu_test_tensor_arg(TPU_DTYPE_BOOL, 2, d),
                             tpu_test_tensor_arg(TPU_DTYPE_BOOL, 2, d)};
  tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_BOOL, 2, d);
  char* text = NULL;
  size_t len;
  tpu_status_t s = tpu_lower_program_plain("aten::addmm", args, 2, NULL, &out, 1, &text, &len);
  CHECK(s != NULL && tpu_status_code(s) == TPU_STATUS_UNIMPLEMENTED);
  tpu_status_free(s);
  /* Two operand dtypes: CPU refuses them; the product declines (the
   * fallback's CPU kernel raises) instead of promoting. */
  int64_t b3[3] = {1, 2, 2};
  tpu_lower_arg_t mixed[2] = {tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 3, b3),
                              tpu_test_tensor_arg(TPU_DTYPE_INT64, 3, b3)};
  tpu_hlo_type_t fout = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 3, b3);
  s = tpu_lower_program_plain("aten::bmm", mixed, 2, NULL, &fout, 1, &text, &len);
  CHECK(s != NULL && tpu_status_code(s) == TPU_STATUS_UNIMPLEMENTED);
  tpu_status_free(s);
}

/* Whether any element of op(+0.0s, -1.0s) -- every product -0.0 -- is
 * -0.0 (-1: the op failed). */
static int negative_zero_of(const char* op, int rank_a, const int64_t* da, int rank_b,
                            const int64_t* db, int rank_out, const int64_t* dout) {
  static float zeros[512], minus[512];
  for (int k = 0; k < 512; k++) zeros[k] = 0.0f, minus[k] = -1.0f;
  tpu_lower_arg_t args[2] = {tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, rank_a, da),
                             tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, rank_b, db)};
  const void* data[2] = {zeros, minus};
  tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, rank_out, dout);
  void* r[1];
  tpu_status_t s = tpu_test_run_op(op, args, 2, NULL, data, &out, 1, r);
  if (s) {
    tpu_status_free(s);
    return -1;
  }
  int64_t n = 1;
  for (int d = 0; d < rank_out; d++) n *= dout[d];
  int neg = 0;
  for (int64_t k = 0; k < n; k++) neg |= signbit(((float*)r[0])[k]) != 0;
  free(r[0]);
  return neg;
}

/* A sum of one -0.0 product: +0.0 where CPU's kernel adds it to a zeroed
 * accumulator (dot, mv, small or batched bmm), -0.0 where it takes gemm
 * (a single bmm of 400 or more outputs, mm). */
static void test_single_product_signed_zeros_as_cpu(void) {
  int64_t v1[1] = {1}, m31[2] = {3, 1}, v3[1] = {3};
  CHECK_EQ(negative_zero_of("aten::dot", 1, v1, 1, v1, 0, NULL), 0);
  CHECK_EQ(negative_zero_of("aten::mv", 2, m31, 1, v1, 1, v3), 0);
  int64_t a[3] = {2, 3, 1}, b[3] = {2, 1, 3}, o[3] = {2, 3, 3};
  CHECK_EQ(negative_zero_of("aten::bmm", 3, a, 3, b, 3, o), 0);
  int64_t a1[3] = {1, 19, 1}, b1[3] = {1, 1, 21}, o1[3] = {1, 19, 21}; /* 399 outputs */
  CHECK_EQ(negative_zero_of("aten::bmm", 3, a1, 3, b1, 3, o1), 0);
  int64_t a2[3] = {1, 20, 1}, b2[3] = {1, 1, 20}, o2[3] = {1, 20, 20}; /* 400 */
  CHECK_EQ(negative_zero_of("aten::bmm", 3, a2, 3, b2, 3, o2), 1);
  int64_t a3[3] = {2, 20, 1}, b3[3] = {2, 1, 20}, o3[3] = {2, 20, 20};
  CHECK_EQ(negative_zero_of("aten::bmm", 3, a3, 3, b3, 3, o3), 0);
  int64_t ma[2] = {3, 1}, mb[2] = {1, 3}, mo[2] = {3, 3};
  CHECK_EQ(negative_zero_of("aten::mm", 2, ma, 2, mb, 2, mo), 1);
}

/* linalg_solve_triangular: A X = B with an upper A (its lower triangle
 * holding junk the solver must not read), checked by multiplying back;
 * X A = B (left=False) likewise. */
static void test_solve_triangular(void) {
  enum { N = 3, K = 2 };
  const int64_t da[2] = {N, N}, db[2] = {N, K}, dr[2] = {K, N};
  float a[N * N] = {2, 1, -1, 99, 3, 0.5f, 99, 99, -4};
  float bl[N * K] = {1, 2, 3, 4, 5, 6}, br[K * N] = {1, 2, 3, 4, 5, 6};
  for (int left = 1; left >= 0; left--) {
    tpu_lower_arg_t args[5] = {tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 2, da),
                               tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 2, left ? db : dr),
                               {.kind = TPU_ARG_BOOL, .i = 1}, {.kind = TPU_ARG_BOOL, .i = left},
                               {.kind = TPU_ARG_BOOL, .i = 0}};
    const void* data[2] = {a, left ? bl : br};
    tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 2, left ? db : dr);
    void* r[1];
    CHECK_OK(tpu_test_run_op("aten::linalg_solve_triangular", args, 5, NULL, data, &out, 1, r));
    float* x = r[0];
    bool ok = true;
    for (int i = 0; i < (left ? N : K); i++)
      for (int j = 0; j < (left ? K : N); j++) {
        double s = 0;
        for (int k = 0; k < N; k++) {
          if (left) s += (k >= i ? a[i * N + k] : 0) * x[k * K + j];
          else s += x[i * N + k] * (j >= k ? a[k * N + j] : 0);
        }
        ok &= close(s, left ? bl[i * K + j] : br[i * N + j]);
      }
    free(r[0]);
    CHECK(ok);
  }
}

/* linalg_cholesky_ex: L L^T = A with the upper triangle zero and info 0;
 * a matrix whose second leading minor is not positive-definite gives
 * info 2, as LAPACK. */
static void test_cholesky_ex(void) {
  enum { N = 3 };
  const int64_t d[3] = {2, N, N}, di[1] = {2};
  float a[2 * N * N] = {4, 2, -2, 2, 5, 1, -2, 1, 6, /* */ 1, 2, 0, 2, 1, 0, 0, 0, 1};
  tpu_lower_arg_t args[3] = {tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 3, d), {.kind = TPU_ARG_BOOL, .i = 0},
                             {.kind = TPU_ARG_BOOL, .i = 0}};
  const void* data[1] = {a};
  tpu_hlo_type_t outs[2] = {tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 3, d), tpu_hlo_type_make(TPU_DTYPE_INT32, 1, di)};
  void* r[2];
  CHECK_OK(tpu_test_run_op("aten::linalg_cholesky_ex", args, 3, NULL, data, outs, 2, r));
  float* l = r[0];
  int32_t* info = r[1];
  bool ok = true;
  for (int i = 0; i < N; i++)
    for (int j = 0; j < N; j++) {
      double s = 0;
      for (int k = 0; k < N; k++) s += l[i * N + k] * l[j * N + k];
      ok &= close(s, a[i * N + j]);
      if (j > i) ok &= l[i * N + j] == 0;
    }
  CHECK(ok);
  CHECK(info[0] == 0 && info[1] == 2);
  free(r[0]);
  free(r[1]);
}

TPU_TEST_MAIN(TPU_TEST(test_bmm), TPU_TEST(test_solve_triangular), TPU_TEST(test_cholesky_ex), TPU_TEST(test_single_product_signed_zeros_as_cpu), TPU_TEST(test_addmm_beta_alpha),
              TPU_TEST(test_baddbmm_bf16_rounds_once), TPU_TEST(test_addbmm_sums_batches),
              TPU_TEST(test_dot_vdot_mv_addmv), TPU_TEST(test_addr),
              TPU_TEST(test_bool_declines))
