/* Reduce family: each lowering run on the XLA CPU plugin against values
 * computed here. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../testing.h"
#include "../hlo/builder.h"
#include "emit.h"
#include "lower_testing.h"

static bool close(double a, double b, double tol) {
  return fabs(a - b) <= tol * (1 + fabs(b));
}

static void test_sum_dims_keepdim_negative(void) {
  int64_t d[2] = {2, 3}, od[2] = {2, 1}, dim = -1;
  tpu_lower_arg_t args[4] = {tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 2, d), ints_arg(1, &dim),
                             bool_arg(true), kNone};
  float x[6] = {1, 2, 3, 4, 5, 6};
  const void* data[1] = {x};
  tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 2, od);
  void* r[1];
  CHECK_OK(tpu_test_run_op("aten::sum.dim_IntList", args, 4, NULL, data, &out, 1, r));
  float* v = r[0];
  bool ok = v[0] == 6 && v[1] == 15;
  free(r[0]);
  CHECK(ok);
  /* An empty dim list reduces every dim. */
  args[1] = ints_arg(0, NULL);
  args[2] = bool_arg(false);
  out = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 0, NULL);
  CHECK_OK(tpu_test_run_op("aten::sum.dim_IntList", args, 4, NULL, data, &out, 1, r));
  ok = *(float*)r[0] == 21;
  free(r[0]);
  CHECK(ok);
}

static void test_sum_promotes_ints_and_bools(void) {
  int64_t d[1] = {4};
  tpu_lower_arg_t args[2] = {tpu_test_tensor_arg(TPU_DTYPE_INT32, 1, d), kNone};
  int32_t x[4] = {2000000000, 2000000000, -5, 7};
  const void* data[1] = {x};
  tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_INT64, 0, NULL);
  void* r[1];
  CHECK_OK(tpu_test_run_op("aten::sum", args, 2, NULL, data, &out, 1, r));
  bool ok = *(int64_t*)r[0] == 4000000002LL;
  free(r[0]);
  CHECK(ok);
  args[0] = tpu_test_tensor_arg(TPU_DTYPE_BOOL, 1, d);
  uint8_t bx[4] = {1, 0, 1, 1};
  data[0] = bx;
  CHECK_OK(tpu_test_run_op("aten::sum", args, 2, NULL, data, &out, 1, r));
  ok = *(int64_t*)r[0] == 3;
  free(r[0]);
  CHECK(ok);
}

static void test_bf16_sum_and_mean_accumulate_in_f32(void) {
  enum { N = 300 };
  int64_t d[1] = {N};
  uint16_t x[N];
  float ref = 0;
  for (int i = 0; i < N; i++) {
    x[i] = to_bf16(1.0078125f + (float)(i % 7) * 0.0625f);
    ref += from_bf16(x[i]);
  }
  tpu_lower_arg_t args[4] = {tpu_test_tensor_arg(TPU_DTYPE_BFLOAT16, 1, d), kNone, bool_arg(false),
                             kNone};
  const void* data[1] = {x};
  tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_BFLOAT16, 0, NULL);
  void* r[1];
  CHECK_OK(tpu_test_run_op("aten::sum.dim_IntList", args, 4, NULL, data, &out, 1, r));
  uint16_t got = *(uint16_t*)r[0];
  free(r[0]);
  CHECK_EQ(got, to_bf16(ref));
  CHECK_OK(tpu_test_run_op("aten::mean.dim", args, 4, NULL, data, &out, 1, r));
  got = *(uint16_t*)r[0];
  free(r[0]);
  CHECK_EQ(got, to_bf16(ref / N));
}

static void test_nansum_prod_mean(void) {
  int64_t d[2] = {2, 3}, od[1] = {3}, zero = 0;
  tpu_lower_arg_t args[4] = {tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 2, d), ints_arg(1, &zero),
                             bool_arg(false), kNone};
  float x[6] = {1, NAN, 3, 4, 5, -6};
  const void* data[1] = {x};
  tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 1, od);
  void* r[1];
  CHECK_OK(tpu_test_run_op("aten::nansum", args, 4, NULL, data, &out, 1, r));
  float* v = r[0];
  bool ok = v[0] == 5 && v[1] == 5 && v[2] == -3;
  free(r[0]);
  CHECK(ok);
  CHECK_OK(tpu_test_run_op("aten::mean.dim", args, 4, NULL, data, &out, 1, r));
  v = r[0];
  ok = v[0] == 2.5f && isnan(v[1]) && v[2] == -1.5f;
  free(r[0]);
  CHECK(ok);
  /* prod.dim_int on int64 with keepdim. */
  int64_t ix[6] = {1, 2, 3, 4, 5, -6}, kd[2] = {2, 1};
  tpu_lower_arg_t pargs[4] = {tpu_test_tensor_arg(TPU_DTYPE_INT64, 2, d), int_arg(-1),
                              bool_arg(true), kNone};
  data[0] = ix;
  out = tpu_hlo_type_make(TPU_DTYPE_INT64, 2, kd);
  CHECK_OK(tpu_test_run_op("aten::prod.dim_int", pargs, 4, NULL, data, &out, 1, r));
  int64_t* iv = r[0];
  ok = iv[0] == 6 && iv[1] == -120;
  free(r[0]);
  CHECK(ok);
}

/* Rows long enough for the two-stage max/min (emit.c: [.., n/8, 8]
 * lanes): every row's exact extreme, a NaN anywhere in a row (either
 * stage) giving NaN, infinities, and a row of 8 (one stage) alike. */
static void test_row_extremes_in_two_stages(void) {
  const int64_t lengths[3] = {8, 32, 40};
  for (int li = 0; li < 3; li++) {
    enum { ROWS = 4 };
    int64_t n = lengths[li], d[2] = {ROWS, n}, dim = 1;
    float* x = malloc(sizeof(float) * ROWS * (size_t)n);
    for (int64_t i = 0; i < ROWS * n; i++) x[i] = (float)((i * 7919) % 97) - 48.5f;
    x[0 * n + n - 1] = 1000.0f;             /* row 0: max in the last lane */
    x[1 * n + 3] = NAN;                     /* row 1: NaN in the first group */
    x[2 * n + n / 2] = -INFINITY;           /* row 2: -inf, max ordinary */
    x[3 * n + (n > 8 ? 9 : 1)] = INFINITY;  /* row 3: +inf in the second group */
    for (int is_max = 0; is_max < 2; is_max++) {
      tpu_lower_arg_t args[3] = {tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 2, d), ints_arg(1, &dim),
                                 bool_arg(false)};
      const void* data[1] = {x};
      int64_t rows = ROWS;
      tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 1, &rows);
      void* r[1];
      CHECK_OK(tpu_test_run_op(is_max ? "aten::amax" : "aten::amin", args, 3, NULL, data, &out,
                               1, r));
      const float* v = r[0];
      for (int row = 0; row < ROWS; row++) {
        float want = is_max ? -INFINITY : INFINITY;
        bool nan = false;
        for (int64_t c = 0; c < n; c++) {
          float e = x[row * n + c];
          nan |= isnan(e);
          want = is_max ? fmaxf(want, e) : fminf(want, e);
        }
        bool ok = nan ? isnan(v[row]) : v[row] == want;
        if (!ok) fprintf(stderr, "n %lld %s row %d: %g, want %g\n", (long long)n,
                         is_max ? "amax" : "amin", row, v[row], nan ? NAN : want);
        CHECK(ok);
      }
      free(r[0]);
    }
    free(x);
  }
}

/* Row sums split into lanes (emit.c): rows of 32 and 512 (8 and 32 lanes)
 * and of 1000 (left to XLA) against a double-precision sum, within f32's bound for a
 * two-level tree of <= 32 terms each; a NaN or +inf anywhere in a row
 * reaches its sum, +inf and -inf together give NaN. */
static void test_row_sums_in_two_stages(void) {
  const int64_t lengths[3] = {32, 512, 1000};
  for (int li = 0; li < 3; li++) {
    enum { ROWS = 4 };
    int64_t n = lengths[li], d[2] = {ROWS, n}, dim = 1;
    float* x = malloc(sizeof(float) * ROWS * (size_t)n);
    for (int64_t i = 0; i < ROWS * n; i++) x[i] = (float)((i * 7919) % 1013) / 7.0f + 100.0f;
    x[1 * n + 5] = NAN;
    x[2 * n + n - 1] = INFINITY;
    x[3 * n + 1] = INFINITY;
    x[3 * n + n / 2] = -INFINITY;
    tpu_lower_arg_t args[4] = {tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 2, d), ints_arg(1, &dim),
                               bool_arg(false), kNone};
    const void* data[1] = {x};
    int64_t rows = ROWS;
    tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 1, &rows);
    void* r[1];
    CHECK_OK(tpu_test_run_op("aten::sum.dim_IntList", args, 4, NULL, data, &out, 1, r));
    const float* v = r[0];
    double want = 0, mag = 0;
    for (int64_t c = 0; c < n; c++) {
      want += x[c];
      mag += fabs(x[c]);
    }
    bool ok = fabs(v[0] - want) <= 64 * FLT_EPSILON * mag && isnan(v[1]) &&
              v[2] == INFINITY && isnan(v[3]);
    if (!ok) fprintf(stderr, "n %lld: %.9g want %.9g | %g %g %g\n", (long long)n, v[0], want, v[1],
                     v[2], v[3]);
    free(r[0]);
    free(x);
    CHECK(ok);
  }
}

static int occurrences(const char* text, const char* needle) {
  int n = 0;
  for (const char* p = strstr(text, needle); p; p = strstr(p + 1, needle)) n++;
  return n;
}

/* The form: a float max or sum over a row of 32 is two reduces over
 * [4, 4, 8] with the NaN select between them; a row of 512 takes 32 lanes
 * ([4, 16, 32]); an
 * integer sum (exact, nothing to gain), a float sum of a row longer than
 * 1024 (left to XLA's tree) and a row of 8 stay one reduce. */
static void test_row_max_is_emitted_in_two_stages(void) {
  int64_t d32[2] = {4, 32}, d512[2] = {4, 512}, d2048[2] = {4, 2048}, d8[2] = {4, 8}, dim = 1;
  const struct {
    const int64_t* dims;
    const char* op;
    tpu_dtype_t dtype;
    int reduces;
    const char* split;
  } cases[6] = {
      {d32, "stablehlo.maximum", TPU_DTYPE_FLOAT32, 2, "(tensor<4x32xf32>) -> tensor<4x4x8xf32>"},
      {d32, "stablehlo.add", TPU_DTYPE_FLOAT32, 2, "(tensor<4x32xf32>) -> tensor<4x4x8xf32>"},
      {d512, "stablehlo.add", TPU_DTYPE_FLOAT32, 2,
       "(tensor<4x512xf32>) -> tensor<4x16x32xf32>"},
      {d32, "stablehlo.add", TPU_DTYPE_INT32, 1, NULL},
      {d2048, "stablehlo.add", TPU_DTYPE_FLOAT32, 1, NULL},
      {d8, "stablehlo.maximum", TPU_DTYPE_FLOAT32, 1, NULL}};
  for (int i = 0; i < 6; i++) {
    tpu_hlo_builder_t* b = NULL;
    CHECK_OK(tpu_hlo_builder_create(&b));
    tpu_hlo_value_t x = tpu_hlo_arg(b, tpu_hlo_type_make(cases[i].dtype, 2, cases[i].dims), NULL);
    tpu_hlo_value_t r = tpu_emit_reduce(b, x, tpu_emit_const(b, cases[i].dtype, 0), &dim, 1,
                                        cases[i].op);
    tpu_hlo_return(b, &r, 1);
    char* text = NULL;
    size_t len = 0;
    CHECK_OK(tpu_hlo_builder_finish(b, &text, &len));
    CHECK_EQ(occurrences(text, "\"stablehlo.reduce\""), cases[i].reduces);
    if (cases[i].split) {
      CHECK_STR_CONTAINS(text, cases[i].split);
      CHECK_STR_CONTAINS(text, "\"stablehlo.select\"");
    }
    free(text);
    tpu_hlo_builder_destroy(b);
  }
}

/* Adjacent reduced dims on XLA:CPU (emit.c merge_reduced_dims): [0, 1] of
 * [16, 64, 8] is one reduce of [1024, 8] behind an optimization barrier,
 * back to [8]; [1, 2] of [4, 8, 16] one of [4, 128] back to [4]; a single
 * column longer than 32 goes behind the barrier as it is; non-adjacent
 * [0, 2], a column of 16, an operand of 2^27 elements and the switch off
 * keep XLA's form. Column sums over [0, 1] checked against double sums, a
 * NaN and an inf reaching theirs. */
static void test_adjacent_reduced_dims_merge_behind_a_barrier(void) {
  int64_t d3[3] = {16, 64, 8}, r4[3] = {4, 8, 16}, col[3] = {1, 64, 8}, shortcol[3] = {1, 16, 8},
          huge[3] = {1 << 14, 1 << 13, 2};
  const struct {
    const int64_t* dims;
    int64_t rdims[2];
    int num_rdims;
    bool on;
    const char* merged;
  } cases[8] = {{d3, {0, 1}, 2, true, "(tensor<16x64x8xf32>) -> tensor<1024x8xf32>"},
                {r4, {1, 2}, 2, true, "(tensor<4x8x16xf32>) -> tensor<4x128xf32>"},
                {r4, {0, 2}, 2, true, NULL},
                {d3, {0, 1}, 2, false, NULL},
                /* one long column (> 32) behind the barrier; a short one not */
                {col, {1}, 1, true, "(tensor<1x64x8xf32>) -> tensor<1x64x8xf32>"},
                {shortcol, {1}, 1, true, NULL},
                /* too big to write out (2^27 elements) */
                {huge, {0, 1}, 2, true, NULL},
                {col, {1}, 1, false, NULL}};
  for (int i = 0; i < 8; i++) {
    tpu_emit_set_merge_reduced_dims(cases[i].on);
    tpu_hlo_builder_t* b = NULL;
    CHECK_OK(tpu_hlo_builder_create(&b));
    tpu_hlo_value_t x =
        tpu_hlo_arg(b, tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 3, cases[i].dims), NULL);
    tpu_hlo_value_t r = tpu_emit_reduce(b, x, tpu_emit_const(b, TPU_DTYPE_FLOAT32, 0),
                                        cases[i].rdims, cases[i].num_rdims, "stablehlo.add");
    tpu_hlo_return(b, &r, 1);
    char* text = NULL;
    size_t len = 0;
    CHECK_OK(tpu_hlo_builder_finish(b, &text, &len));
    CHECK_EQ(occurrences(text, "stablehlo.optimization_barrier"), cases[i].merged ? 1 : 0);
    if (cases[i].merged) CHECK_STR_CONTAINS(text, cases[i].merged);
    free(text);
    tpu_hlo_builder_destroy(b);
  }
  tpu_emit_set_merge_reduced_dims(true);
  enum { B = 16, T = 64, N = 8 };
  int64_t d[3] = {B, T, N}, dims[2] = {0, 1}, od[1] = {N};
  float* x = malloc(sizeof(float) * B * T * N);
  for (int64_t i = 0; i < B * T * N; i++) x[i] = (float)((i * 7919) % 1013) / 7.0f - 60.0f;
  x[5 * T * N + 3 * N + 2] = NAN;
  x[9 * T * N + 7 * N + 6] = INFINITY;
  tpu_lower_arg_t args[4] = {tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 3, d), ints_arg(2, dims),
                             bool_arg(false), kNone};
  const void* data[1] = {x};
  tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 1, od);
  void* r[1];
  CHECK_OK(tpu_test_run_op("aten::sum.dim_IntList", args, 4, NULL, data, &out, 1, r));
  const float* v = r[0];
  for (int c = 0; c < N; c++) {
    double want = 0, mag = 0;
    for (int64_t row = 0; row < B * T; row++) {
      want += x[row * N + c];
      mag += fabs(x[row * N + c]);
    }
    bool ok = c == 2 ? isnan(v[c]) : c == 6 ? v[c] == INFINITY
                                            : fabs(v[c] - want) <= 64 * FLT_EPSILON * mag;
    if (!ok) fprintf(stderr, "column %d: %.9g want %.9g\n", c, v[c], want);
    CHECK(ok);
  }
  free(r[0]);
  free(x); /* left on: what the runtime sets on the CPU plugin */
}

static void test_amax_amin_propagate_nan(void) {
  int64_t d[2] = {2, 3}, od[1] = {2}, one = 1;
  tpu_lower_arg_t args[3] = {tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 2, d), ints_arg(1, &one),
                             bool_arg(false)};
  float x[6] = {1, NAN, 3, -4, 5, -INFINITY};
  const void* data[1] = {x};
  tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 1, od);
  void* r[1];
  CHECK_OK(tpu_test_run_op("aten::amax", args, 3, NULL, data, &out, 1, r));
  float* v = r[0];
  bool ok = isnan(v[0]) && v[1] == 5;
  if (!ok) fprintf(stderr, "amax: %g %g\n", v[0], v[1]);
  free(r[0]);
  CHECK(ok);
  CHECK_OK(tpu_test_run_op("aten::amin", args, 3, NULL, data, &out, 1, r));
  v = r[0];
  ok = isnan(v[0]) && v[1] == -INFINITY;
  free(r[0]);
  CHECK(ok);
  /* max(self): every dim; int8 limits as the identity. */
  int8_t ix[6] = {-128, -100, -128, -127, -128, -128};
  tpu_lower_arg_t margs[1] = {tpu_test_tensor_arg(TPU_DTYPE_INT8, 2, d)};
  data[0] = ix;
  out = tpu_hlo_type_make(TPU_DTYPE_INT8, 0, NULL);
  CHECK_OK(tpu_test_run_op("aten::max", margs, 1, NULL, data, &out, 1, r));
  ok = *(int8_t*)r[0] == -100;
  free(r[0]);
  CHECK(ok);
  CHECK_OK(tpu_test_run_op("aten::min", margs, 1, NULL, data, &out, 1, r));
  ok = *(int8_t*)r[0] == -128;
  free(r[0]);
  CHECK(ok);
}

static void test_max_dim_first_index_and_nan(void) {
  int64_t d[2] = {3, 4}, od[1] = {3};
  tpu_lower_arg_t args[3] = {tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 2, d), int_arg(1),
                             bool_arg(false)};
  float x[12] = {1, 3, 3, 2, NAN, 5, NAN, 1, -INFINITY, -INFINITY, -INFINITY, -INFINITY};
  const void* data[1] = {x};
  tpu_hlo_type_t outs[2] = {tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 1, od),
                            tpu_hlo_type_make(TPU_DTYPE_INT64, 1, od)};
  void* r[2];
  CHECK_OK(tpu_test_run_op("aten::max.dim", args, 3, NULL, data, outs, 2, r));
  float* v = r[0];
  int64_t* i = r[1];
  bool ok = v[0] == 3 && i[0] == 1 && isnan(v[1]) && i[1] == 0 && v[2] == -INFINITY && i[2] == 0;
  if (!ok) fprintf(stderr, "max.dim: %g %lld %g %lld %g %lld\n", v[0], (long long)i[0], v[1], (long long)i[1], v[2], (long long)i[2]);
  free(r[0]);
  free(r[1]);
  CHECK(ok);
  float y[12] = {2, 1, 1, 3, 4, 0, NAN, NAN, 7, 7, 7, 7};
  data[0] = y;
  CHECK_OK(tpu_test_run_op("aten::min.dim", args, 3, NULL, data, outs, 2, r));
  v = r[0];
  i = r[1];
  ok = v[0] == 1 && i[0] == 1 && isnan(v[1]) && i[1] == 2 && v[2] == 7 && i[2] == 0;
  free(r[0]);
  free(r[1]);
  CHECK(ok);
}

static void test_argmax_argmin(void) {
  int64_t d[2] = {2, 3}, kd[2] = {1, 3};
  tpu_lower_arg_t args[3] = {tpu_test_tensor_arg(TPU_DTYPE_INT32, 2, d), kNone, bool_arg(false)};
  int32_t x[6] = {4, 9, 1, 9, -3, 1};
  const void* data[1] = {x};
  tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_INT64, 0, NULL);
  void* r[1];
  CHECK_OK(tpu_test_run_op("aten::argmax", args, 3, NULL, data, &out, 1, r));
  bool ok = *(int64_t*)r[0] == 1;
  free(r[0]);
  CHECK(ok);
  CHECK_OK(tpu_test_run_op("aten::argmin", args, 3, NULL, data, &out, 1, r));
  ok = *(int64_t*)r[0] == 4;
  free(r[0]);
  CHECK(ok);
  args[1] = int_arg(0);
  args[2] = bool_arg(true);
  out = tpu_hlo_type_make(TPU_DTYPE_INT64, 2, kd);
  CHECK_OK(tpu_test_run_op("aten::argmin", args, 3, NULL, data, &out, 1, r));
  int64_t* i = r[0];
  ok = i[0] == 0 && i[1] == 1 && i[2] == 0;
  free(r[0]);
  CHECK(ok);
  /* bool argmax and argmin decline: CPU refuses them ("argmax(): does not
   * support bool input"), which the fallback raises. */
  args[0] = tpu_test_tensor_arg(TPU_DTYPE_BOOL, 2, d);
  args[1] = kNone;
  args[2] = bool_arg(false);
  out = tpu_hlo_type_make(TPU_DTYPE_INT64, 0, NULL);
  char* text = NULL;
  size_t len;
  tpu_status_t s = tpu_lower_program_plain("aten::argmax", args, 3, NULL, &out, 1, &text, &len);
  CHECK(s != NULL && tpu_status_code(s) == TPU_STATUS_UNIMPLEMENTED);
  tpu_status_free(s);
  s = tpu_lower_program_plain("aten::argmin", args, 3, NULL, &out, 1, &text, &len);
  CHECK(s != NULL && tpu_status_code(s) == TPU_STATUS_UNIMPLEMENTED);
  tpu_status_free(s);
}

/* histc of bool declines: neither CPU nor CUDA has a kernel for it. */
static void test_histc_of_bool_declines(void) {
  int64_t d[1] = {4}, bins = 3;
  tpu_lower_arg_t args[4] = {tpu_test_tensor_arg(TPU_DTYPE_BOOL, 1, d), int_arg(bins),
                             tpu_test_scalar_arg(TPU_DTYPE_FLOAT64, false),
                             tpu_test_scalar_arg(TPU_DTYPE_FLOAT64, false)};
  tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_INT64, 1, &bins);
  char* text = NULL;
  size_t len;
  tpu_status_t s = tpu_lower_program_plain("aten::histc", args, 4, NULL, &out, 1, &text, &len);
  CHECK(s != NULL && tpu_status_code(s) == TPU_STATUS_UNIMPLEMENTED);
  tpu_status_free(s);
}

static void test_var_std_correction(void) {
  int64_t d[2] = {2, 4}, od[1] = {2}, one = 1;
  tpu_lower_arg_t args[4] = {tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 2, d), ints_arg(1, &one),
                             tpu_test_scalar_arg(TPU_DTYPE_FLOAT64, true), bool_arg(false)};
  float x[8] = {1, 2, 3, 4, 10, 10, 10, 14};
  double corr = 1.5;
  const void* data[2] = {x, &corr};
  tpu_hlo_type_t outs[2] = {tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 1, od),
                            tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 1, od)};
  void* r[2];
  CHECK_OK(tpu_test_run_op("aten::var.correction", args, 4, NULL, data, outs, 1, r));
  float* v = r[0];
  bool ok = close(v[0], 5.0 / 2.5, 1e-6) && close(v[1], 12.0 / 2.5, 1e-6);
  free(r[0]);
  CHECK(ok);
  /* std_mean with the default correction (1) over every dim. */
  args[1] = kNone;
  args[2] = kNone;
  outs[0] = outs[1] = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 0, NULL);
  double mean = 54.0 / 8, ss = 0;
  for (int k = 0; k < 8; k++) ss += (x[k] - mean) * (x[k] - mean);
  CHECK_OK(tpu_test_run_op("aten::std_mean.correction", args, 4, NULL, data, outs, 2, r));
  ok = close(*(float*)r[0], sqrt(ss / 7), 1e-6) && close(*(float*)r[1], mean, 1e-6);
  free(r[0]);
  free(r[1]);
  CHECK(ok);
  /* correction > N: divisor clamps to 0 -> inf. */
  args[2] = tpu_test_scalar_arg(TPU_DTYPE_INT64, true);
  int64_t big = 9;
  data[1] = &big;
  CHECK_OK(tpu_test_run_op("aten::var.correction", args, 4, NULL, data, outs, 1, r));
  ok = isinf(*(float*)r[0]);
  free(r[0]);
  CHECK(ok);
}

static void test_logsumexp(void) {
  int64_t d[2] = {2, 3}, od[2] = {2, 1}, one = 1;
  tpu_lower_arg_t args[3] = {tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 2, d), ints_arg(1, &one),
                             bool_arg(true)};
  float x[6] = {1000, 1000, 999, -INFINITY, -INFINITY, -INFINITY};
  const void* data[1] = {x};
  tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 2, od);
  void* r[1];
  CHECK_OK(tpu_test_run_op("aten::logsumexp", args, 3, NULL, data, &out, 1, r));
  float* v = r[0];
  bool ok = close(v[0], 1000 + log(2 + exp(-1.0)), 1e-6) && v[1] == -INFINITY;
  free(r[0]);
  CHECK(ok);
}

static void test_cumsum_cumprod_any_dim(void) {
  enum { R = 3, C = 37 };
  int64_t d[2] = {R, C};
  int32_t x[R * C];
  for (int k = 0; k < R * C; k++) x[k] = (k * 7919) % 23 - 11;
  for (int dim = -2; dim < 2; dim++) {
    tpu_lower_arg_t args[3] = {tpu_test_tensor_arg(TPU_DTYPE_INT32, 2, d), int_arg(dim), kNone};
    const void* data[1] = {x};
    tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_INT64, 2, d);
    void* r[1];
    CHECK_OK(tpu_test_run_op("aten::cumsum", args, 3, NULL, data, &out, 1, r));
    int64_t* v = r[0];
    bool ok = true;
    int nd = (dim + 2) % 2;
    for (int i = 0; i < R; i++)
      for (int j = 0; j < C; j++) {
        int64_t want = 0;
        for (int k = 0; k <= (nd ? j : i); k++) want += nd ? x[i * C + k] : x[k * C + j];
        ok &= v[i * C + j] == want;
      }
    free(r[0]);
    CHECK(ok);
  }
  int64_t d1[1] = {10};
  float f[10] = {1, 2, -1, 0.5f, 3, 1, 1, -2, 0.25f, 2};
  tpu_lower_arg_t args[3] = {tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 1, d1), int_arg(0), kNone};
  const void* data[1] = {f};
  tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 1, d1);
  void* r[1];
  CHECK_OK(tpu_test_run_op("aten::cumprod", args, 3, NULL, data, &out, 1, r));
  float* v = r[0];
  float acc = 1;
  bool ok = true;
  for (int k = 0; k < 10; k++) ok &= v[k] == (acc *= f[k]);
  free(r[0]);
  CHECK(ok);
}

static void test_all_any(void) {
  int64_t d[2] = {2, 3}, od[1] = {2}, one = 1;
  tpu_lower_arg_t args[3] = {tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 2, d), ints_arg(1, &one),
                             bool_arg(false)};
  float x[6] = {1, NAN, -2, 0, 0, 0};
  const void* data[1] = {x};
  tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_BOOL, 1, od);
  void* r[1];
  CHECK_OK(tpu_test_run_op("aten::all.dims", args, 3, NULL, data, &out, 1, r));
  uint8_t* v = r[0];
  bool ok = v[0] == 1 && v[1] == 0;
  free(r[0]);
  CHECK(ok);
  CHECK_OK(tpu_test_run_op("aten::any.dims", args, 3, NULL, data, &out, 1, r));
  v = r[0];
  ok = v[0] == 1 && v[1] == 0;
  free(r[0]);
  CHECK(ok);
  /* any.dims with [] reduces nothing. */
  args[1] = ints_arg(0, NULL);
  out = tpu_hlo_type_make(TPU_DTYPE_BOOL, 2, d);
  CHECK_OK(tpu_test_run_op("aten::any.dims", args, 3, NULL, data, &out, 1, r));
  v = r[0];
  ok = v[0] && v[1] && v[2] && !v[3];
  free(r[0]);
  CHECK(ok);
  /* all(uint8) returns uint8. */
  uint8_t u[6] = {1, 2, 3, 4, 5, 6};
  tpu_lower_arg_t uargs[1] = {tpu_test_tensor_arg(TPU_DTYPE_UINT8, 2, d)};
  data[0] = u;
  out = tpu_hlo_type_make(TPU_DTYPE_UINT8, 0, NULL);
  CHECK_OK(tpu_test_run_op("aten::all", uargs, 1, NULL, data, &out, 1, r));
  ok = *(uint8_t*)r[0] == 1;
  free(r[0]);
  CHECK(ok);
}

static void test_binary_max_out(void) {
  int64_t d[1] = {3};
  tpu_lower_arg_t args[2] = {tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 1, d),
                             tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 1, d)};
  float a[3] = {1, NAN, 5}, b[3] = {2, 0, 4};
  const void* data[2] = {a, b};
  tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 1, d);
  void* r[1];
  CHECK_OK(tpu_test_run_op("aten::max.out", args, 2, NULL, data, &out, 1, r));
  float* v = r[0];
  bool ok = v[0] == 2 && isnan(v[1]) && v[2] == 5;
  free(r[0]);
  CHECK(ok);
}

static void test_logcumsumexp_count_nonzero_aminmax(void) {
  int64_t d[1] = {6};
  float x[6] = {-INFINITY, -INFINITY, 0, 1000, INFINITY, 3};
  tpu_lower_arg_t args[2] = {tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 1, d), int_arg(0)};
  const void* data[1] = {x};
  tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 1, d);
  void* r[2];
  CHECK_OK(tpu_test_run_op("aten::_logcumsumexp", args, 2, NULL, data, &out, 1, r));
  float* v = r[0];
  bool ok = v[0] == -INFINITY && v[1] == -INFINITY && v[2] == 0 && close(v[3], 1000, 1e-7) &&
            v[4] == INFINITY && v[5] == INFINITY;
  if (!ok) fprintf(stderr, "logcumsumexp: %g %g %g %g %g %g\n", v[0], v[1], v[2], v[3], v[4], v[5]);
  free(r[0]);
  CHECK(ok);
  int64_t d2[2] = {2, 3}, od[1] = {3};
  float y[6] = {0, NAN, 2, 0, 0, -1};
  tpu_lower_arg_t cargs[2] = {tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 2, d2), ints_arg(0, NULL)};
  data[0] = y;
  out = tpu_hlo_type_make(TPU_DTYPE_INT64, 0, NULL);
  CHECK_OK(tpu_test_run_op("aten::count_nonzero.dim_IntList", cargs, 2, NULL, data, &out, 1, r));
  ok = *(int64_t*)r[0] == 3;
  free(r[0]);
  CHECK(ok);
  float z[6] = {4, -1, 2, 0, 7, 2};
  data[0] = z;
  tpu_lower_arg_t margs[3] = {tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 2, d2), int_arg(0),
                              bool_arg(false)};
  tpu_hlo_type_t outs[2] = {tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 1, od),
                            tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 1, od)};
  CHECK_OK(tpu_test_run_op("aten::aminmax", margs, 3, NULL, data, outs, 2, r));
  float *mn = r[0], *mx = r[1];
  ok = mn[0] == 0 && mn[1] == -1 && mn[2] == 2 && mx[0] == 4 && mx[1] == 7 && mx[2] == 2;
  free(r[0]);
  free(r[1]);
  CHECK(ok);
}

static void test_cummax_cummin_ties_and_nan(void) {
  int64_t d[1] = {8};
  float x[8] = {1, 3, 3, 2, NAN, 5, NAN, 1};
  tpu_lower_arg_t args[4] = {tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 1, d),
                             tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 1, d),
                             tpu_test_tensor_arg(TPU_DTYPE_INT64, 1, d), int_arg(-1)};
  float ignored_v[8] = {0};
  int64_t ignored_i[8] = {0};
  const void* data[3] = {x, ignored_v, ignored_i};
  tpu_hlo_type_t outs[2] = {tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 1, d),
                            tpu_hlo_type_make(TPU_DTYPE_INT64, 1, d)};
  /* Expected values from torch.cummax / torch.cummin on CPU. */
  const float want_max[4] = {1, 3, 3, 3}, want_min[4] = {1, 1, 1, 1};
  const int64_t imax[8] = {0, 1, 2, 2, 4, 4, 6, 6}, imin[8] = {0, 0, 0, 0, 4, 4, 6, 6};
  for (int m = 0; m < 2; m++) {
    void* r[2];
    CHECK_OK(tpu_test_run_op(m ? "aten::_cummin_helper" : "aten::_cummax_helper", args, 4, NULL,
                             data, outs, 2, r));
    float* v = r[0];
    int64_t* i = r[1];
    bool ok = true;
    for (int k = 0; k < 8; k++) {
      ok &= k < 4 ? v[k] == (m ? want_min : want_max)[k] : isnan(v[k]);
      ok &= i[k] == (m ? imin : imax)[k];
    }
    free(r[0]);
    free(r[1]);
    CHECK(ok);
  }
  /* cummax(self, dim) itself: dim at argument 1. */
  tpu_lower_arg_t cargs[2] = {args[0], int_arg(0)};
  void* r[2];
  CHECK_OK(tpu_test_run_op("aten::cummax", cargs, 2, NULL, data, outs, 2, r));
  bool ok = ((float*)r[0])[3] == 3 && ((int64_t*)r[1])[7] == 6;
  free(r[0]);
  free(r[1]);
  CHECK(ok);
}

/* sum(self, dtype) / prod(self, dtype) / norm.ScalarOpt_dtype: a dtype in
 * the dim slot (as a DTYPE, or as an INT holding the ScalarType code) is
 * not a dim. */
static void test_dtype_in_dim_slot_reduces_everything(void) {
  int64_t d[2] = {2, 3};
  float x[6] = {1, 2, 3, 4, 5, 6};
  const void* data[1] = {x};
  tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_FLOAT64, 0, NULL);
  tpu_lower_arg_t dtypes[2] = {{.kind = TPU_ARG_DTYPE, .dtype = TPU_DTYPE_FLOAT64},
                               int_arg(7 /* c10::ScalarType::Double */)};
  for (int k = 0; k < 2; k++) {
    tpu_lower_arg_t args[2] = {tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 2, d), dtypes[k]};
    void* r[1];
    CHECK_OK(tpu_test_run_op("aten::sum", args, 2, NULL, data, &out, 1, r));
    bool ok = *(double*)r[0] == 21;
    free(r[0]);
    CHECK(ok);
    CHECK_OK(tpu_test_run_op("aten::prod", args, 2, NULL, data, &out, 1, r));
    ok = *(double*)r[0] == 720;
    free(r[0]);
    CHECK(ok);
    tpu_lower_arg_t nargs[3] = {args[0], kNone, dtypes[k]};
    CHECK_OK(tpu_test_run_op("aten::norm.ScalarOpt_dtype", nargs, 3, NULL, data, &out, 1, r));
    ok = close(*(double*)r[0], sqrt(91.0), 1e-6);
    free(r[0]);
    CHECK(ok);
  }
}

static void test_trace(void) {
  int64_t d[2] = {3, 4};
  int32_t x[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  tpu_lower_arg_t args[1] = {tpu_test_tensor_arg(TPU_DTYPE_INT32, 2, d)};
  const void* data[1] = {x};
  tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_INT64, 0, NULL);
  void* r[1];
  CHECK_OK(tpu_test_run_op("aten::trace", args, 1, NULL, data, &out, 1, r));
  bool ok = *(int64_t*)r[0] == 1 + 6 + 11;
  free(r[0]);
  CHECK(ok);
}

TPU_TEST_MAIN(TPU_TEST(test_trace), TPU_TEST(test_dtype_in_dim_slot_reduces_everything), TPU_TEST(test_cummax_cummin_ties_and_nan), TPU_TEST(test_logcumsumexp_count_nonzero_aminmax), TPU_TEST(test_sum_dims_keepdim_negative), TPU_TEST(test_sum_promotes_ints_and_bools),
              TPU_TEST(test_bf16_sum_and_mean_accumulate_in_f32), TPU_TEST(test_nansum_prod_mean),
              TPU_TEST(test_amax_amin_propagate_nan), TPU_TEST(test_row_extremes_in_two_stages), TPU_TEST(test_row_max_is_emitted_in_two_stages), TPU_TEST(test_row_sums_in_two_stages), TPU_TEST(test_adjacent_reduced_dims_merge_behind_a_barrier), TPU_TEST(test_max_dim_first_index_and_nan),
              TPU_TEST(test_argmax_argmin), TPU_TEST(test_histc_of_bool_declines), TPU_TEST(test_var_std_correction),
              TPU_TEST(test_logsumexp),
              TPU_TEST(test_cumsum_cumprod_any_dim), TPU_TEST(test_all_any),
              TPU_TEST(test_binary_max_out))
