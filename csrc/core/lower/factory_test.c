#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../testing.h"
#include "emit.h"
#include "lower_testing.h"

#define N 20000

/* Runs an in-place RNG op on a [N] self of `dtype` with the generator
 * state {key, counter}; extra holds the program's SCALAR params. */
static void* run_rng(const char* op, tpu_lower_arg_t* args, int nargs, tpu_dtype_t dtype,
                     int64_t key, int64_t counter, const void* extra) {
  int64_t n = N;
  static char self[N * 8];
  int64_t state[2] = {key, counter};
  const void* data[3];
  int k = 0;
  data[k++] = self;
  for (int i = 1; i < nargs; i++)
    if (args[i].kind == TPU_ARG_TENSOR || args[i].kind == TPU_ARG_SCALAR) data[k++] = extra;
  data[k++] = state;
  args[0] = tpu_test_tensor_arg(dtype, 1, &n);
  tpu_hlo_type_t out = tpu_hlo_type_make(dtype, 1, &n);
  void* r[1] = {NULL};
  tpu_status_t st = tpu_test_run_op(op, args, nargs, NULL, data, &out, 1, r);
  if (st) {  /* counted as a failure; the callers check the NULL result */
    fprintf(stderr, "%s: %s\n", op, tpu_status_message(st));
    tpu_test_failures_++;
    tpu_status_free(st);
    return NULL;
  }
  return r[0];
}

static void moments(const float* x, int n, double* mean, double* var) {
  double s = 0, s2 = 0;
  for (int i = 0; i < n; i++) s += x[i];
  *mean = s / n;
  for (int i = 0; i < n; i++) s2 += (x[i] - *mean) * (x[i] - *mean);
  *var = s2 / n;
}

static void test_uniform_reproducible_and_in_range(void) {
  tpu_lower_arg_t args[4] = {{0}, {.kind = TPU_ARG_FLOAT, .f = -2}, {.kind = TPU_ARG_FLOAT, .f = 3},
                             {.kind = TPU_ARG_NONE}};
  float* a = run_rng("aten::uniform_", args, 4, TPU_DTYPE_FLOAT32, 42, 0, NULL);
  float* b = run_rng("aten::uniform_", args, 4, TPU_DTYPE_FLOAT32, 42, 0, NULL);
  float* c = run_rng("aten::uniform_", args, 4, TPU_DTYPE_FLOAT32, 43, 0, NULL);
  float* d = run_rng("aten::uniform_", args, 4, TPU_DTYPE_FLOAT32, 42, N, NULL);
  CHECK(memcmp(a, b, sizeof(float) * N) == 0);
  int same_c = 0, same_d = 0;
  for (int i = 0; i < N; i++) {
    CHECK(a[i] >= -2 && a[i] < 3);
    same_c += a[i] == c[i];
    same_d += a[i] == d[i];
  }
  CHECK(same_c < 10 && same_d < 10);
  double mean, var;
  moments(a, N, &mean, &var);
  CHECK(fabs(mean - 0.5) < 0.05);
  CHECK(fabs(var - 25.0 / 12) < 0.1);
  free(a);
  free(b);
  free(c);
  free(d);
  /* float64 draws use 53 bits. */
  double* e = run_rng("aten::uniform_", args, 4, TPU_DTYPE_FLOAT64, 7, 0, NULL);
  double s = 0;
  for (int i = 0; i < N; i++) {
    CHECK(e[i] >= -2 && e[i] < 3);
    s += e[i];
  }
  CHECK(fabs(s / N - 0.5) < 0.05);
  free(e);
}

static void test_normal_moments(void) {
  tpu_lower_arg_t args[4] = {{0}, {.kind = TPU_ARG_FLOAT, .f = 1.5},
                             {.kind = TPU_ARG_FLOAT, .f = 2}, {.kind = TPU_ARG_NONE}};
  float* a = run_rng("aten::normal_", args, 4, TPU_DTYPE_FLOAT32, 1, 0, NULL);
  double mean, var;
  moments(a, N, &mean, &var);
  CHECK(fabs(mean - 1.5) < 0.06);
  CHECK(fabs(var - 4) < 0.2);
  int within1 = 0;
  for (int i = 0; i < N; i++) {
    CHECK(isfinite(a[i]));
    within1 += fabsf(a[i] - 1.5f) < 2;
  }
  CHECK(fabs((double)within1 / N - 0.6827) < 0.015);
  free(a);
  /* normal.Tensor_float(mean, std): mean is a tensor. */
  int64_t n = N;
  tpu_lower_arg_t targs[3] = {tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 1, &n),
                              {.kind = TPU_ARG_FLOAT, .f = 0.5}, {.kind = TPU_ARG_NONE}};
  static float means[N];
  for (int i = 0; i < N; i++) means[i] = i % 2 ? 100 : -100;
  int64_t state[2] = {3, 0};
  const void* data[2] = {means, state};
  tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 1, &n);
  void* r[1];
  CHECK_OK(tpu_test_run_op("aten::normal.Tensor_float", targs, 3, NULL, data, &out, 1, r));
  float* x = r[0];
  double s = 0, s2 = 0;
  for (int i = 0; i < N; i++) {
    double z = x[i] - means[i];
    s += z;
    s2 += z * z;
  }
  CHECK(fabs(s / N) < 0.02 && fabs(s2 / N - 0.25) < 0.02);
  free(r[0]);
}

static void test_bernoulli_float_and_tensor_p(void) {
  tpu_lower_arg_t args[3] = {{0}, {.kind = TPU_ARG_FLOAT, .f = 0.3}, {.kind = TPU_ARG_NONE}};
  float* a = run_rng("aten::bernoulli_.float", args, 3, TPU_DTYPE_FLOAT32, 5, 0, NULL);
  double mean, var;
  moments(a, N, &mean, &var);
  for (int i = 0; i < N; i++) CHECK(a[i] == 0 || a[i] == 1);
  CHECK(fabs(mean - 0.3) < 0.015);
  free(a);
  /* p tensor: 0 never, 1 always, 0.5 half the time. */
  int64_t n = N;
  static float p[N];
  for (int i = 0; i < N; i++) p[i] = (float)(i % 3) * 0.5f;
  args[1] = tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 1, &n);
  int64_t* b = run_rng("aten::bernoulli_.Tensor", args, 3, TPU_DTYPE_INT64, 5, 0, p);
  int ones = 0;
  for (int i = 0; i < N; i++) {
    if (i % 3 == 0) CHECK(b[i] == 0);
    if (i % 3 == 2) CHECK(b[i] == 1);
    if (i % 3 == 1) ones += (int)b[i];
  }
  CHECK(fabs(ones / (N / 3.0) - 0.5) < 0.03);
  free(b);
}

static void test_random_ranges(void) {
  tpu_lower_arg_t args[4] = {{0}, {.kind = TPU_ARG_INT, .i = -3}, {.kind = TPU_ARG_INT, .i = 5},
                             {.kind = TPU_ARG_NONE}};
  int64_t* a = run_rng("aten::random_.from", args, 4, TPU_DTYPE_INT64, 9, 0, NULL);
  int seen[8] = {0};
  for (int i = 0; i < N; i++) {
    CHECK(a[i] >= -3 && a[i] < 5);
    if (a[i] >= -3 && a[i] < 5) seen[a[i] + 3]++;
  }
  for (int v = 0; v < 8; v++) CHECK(fabs(seen[v] / (double)N - 0.125) < 0.015);
  free(a);
  /* random_.to(self, 10) on float32; random_() on int32 is non-negative. */
  tpu_lower_arg_t targs[3] = {{0}, {.kind = TPU_ARG_INT, .i = 10}, {.kind = TPU_ARG_NONE}};
  float* f = run_rng("aten::random_.to", targs, 3, TPU_DTYPE_FLOAT32, 9, 0, NULL);
  for (int i = 0; i < N; i++) CHECK(f[i] >= 0 && f[i] <= 9 && f[i] == floorf(f[i]));
  free(f);
  tpu_lower_arg_t rargs[2] = {{0}, {.kind = TPU_ARG_NONE}};
  int32_t* g = run_rng("aten::random_", rargs, 2, TPU_DTYPE_INT32, 9, 0, NULL);
  int64_t big = 0;
  for (int i = 0; i < N; i++) {
    CHECK(g[i] >= 0);
    big += g[i] > (1 << 30);
  }
  CHECK(fabs(big / (double)N - 0.5) < 0.03);
  free(g);
  /* random_.from with to=None on uint8 reaches 255. */
  tpu_lower_arg_t fargs[4] = {{0}, {.kind = TPU_ARG_INT, .i = 250}, {.kind = TPU_ARG_NONE},
                              {.kind = TPU_ARG_NONE}};
  uint8_t* u = run_rng("aten::random_.from", fargs, 4, TPU_DTYPE_UINT8, 9, 0, NULL);
  int max = 0;
  for (int i = 0; i < N; i++) {
    CHECK(u[i] >= 250);
    if (u[i] > max) max = u[i];
  }
  CHECK(max == 255);
  free(u);
}

static void test_exponential_mean(void) {
  tpu_lower_arg_t args[3] = {{0}, {.kind = TPU_ARG_FLOAT, .f = 4}, {.kind = TPU_ARG_NONE}};
  float* a = run_rng("aten::exponential_", args, 3, TPU_DTYPE_FLOAT32, 11, 0, NULL);
  double mean, var;
  moments(a, N, &mean, &var);
  for (int i = 0; i < N; i++) CHECK(a[i] >= 0 && isfinite(a[i]));
  CHECK(fabs(mean - 0.25) < 0.01 && fabs(var - 0.0625) < 0.006);
  free(a);
}

/* multinomial of 2 rows x 5 categories: counts follow the probabilities,
 * zero-probability categories never come out, and without replacement a
 * row's samples are distinct. */
static void run_multinomial(bool replacement, int64_t n, int64_t** out) {
  const int64_t pd[2] = {2, 5};
  float p[10] = {0, 1, 0, 3, 0, /* */ 2, 0, 0, 0, 6};
  tpu_lower_arg_t args[4] = {tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 2, pd), {.kind = TPU_ARG_INT, .i = n},
                             {.kind = TPU_ARG_BOOL, .i = replacement}, {.kind = TPU_ARG_NONE}};
  int64_t state[2] = {7, 0};
  const void* data[2] = {p, state};
  const int64_t od[2] = {2, n};
  tpu_hlo_type_t o = tpu_hlo_type_make(TPU_DTYPE_INT64, 2, od);
  void* r[1];
  CHECK_OK(tpu_test_run_op("aten::multinomial", args, 4, NULL, data, &o, 1, r));
  *out = r[0];
}

static void test_multinomial(void) {
  int64_t* s;
  const int64_t n = 8000;
  run_multinomial(true, n, &s);
  int count[2][5] = {{0}};
  for (int r = 0; r < 2; r++)
    for (int64_t k = 0; k < n; k++) {
      int64_t c = s[r * n + k];
      CHECK(c >= 0 && c < 5);
      if (c >= 0 && c < 5) count[r][c]++;
    }
  CHECK(count[0][0] == 0 && count[0][2] == 0 && count[0][4] == 0);
  CHECK(count[1][1] + count[1][2] + count[1][3] == 0);
  CHECK(fabs(count[0][1] / (double)n - 0.25) < 0.02 && fabs(count[1][0] / (double)n - 0.25) < 0.02);
  free(s);
  /* Without replacement: both nonzero categories first, distinct, then the zeros. */
  run_multinomial(false, 5, &s);
  for (int r = 0; r < 2; r++) {
    int seen = 0;
    for (int k = 0; k < 5; k++) seen |= 1 << s[r * 5 + k];
    CHECK(seen == 31);
  }
  CHECK((s[0] == 1 || s[0] == 3) && (s[1] == 1 || s[1] == 3));
  CHECK((s[5] == 0 || s[5] == 4) && (s[6] == 0 || s[6] == 4));
  free(s);
}

static void test_randperm_is_a_permutation(void) {
  int64_t n = 1000;
  tpu_lower_arg_t args[3] = {{.kind = TPU_ARG_INT, .i = n}, {.kind = TPU_ARG_NONE},
                             tpu_test_tensor_arg(TPU_DTYPE_INT64, 1, &n)};
  static int64_t dummy[1000];
  int64_t state[2] = {1, 2};
  const void* data[2] = {dummy, state};
  tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_INT64, 1, &n);
  void* r[1];
  CHECK_OK(tpu_test_run_op("aten::randperm.generator_out", args, 3, NULL, data, &out, 1, r));
  int64_t* p = r[0];
  static char seen[1000];
  memset(seen, 0, sizeof seen);
  int fixed = 0;
  for (int i = 0; i < n; i++) {
    CHECK(p[i] >= 0 && p[i] < n);
    if (p[i] >= 0 && p[i] < n) seen[p[i]]++;
    fixed += p[i] == i;
  }
  for (int i = 0; i < n; i++) CHECK(seen[i] == 1);
  CHECK(fixed < 10);
  free(r[0]);
}

static void test_arange(void) {
  int64_t n = 10;
  /* arange.start_out(0, 1, 0.1): float32, computed in double. */
  tpu_lower_arg_t args[4] = {tpu_test_scalar_arg(TPU_DTYPE_INT64, true),
                             tpu_test_scalar_arg(TPU_DTYPE_INT64, true),
                             tpu_test_scalar_arg(TPU_DTYPE_FLOAT64, true),
                             tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 1, &n)};
  float dummy[10];
  int64_t start = 0, end = 1;
  double step = 0.1;
  const void* data[4] = {dummy, &start, &end, &step};
  tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 1, &n);
  void* r[1];
  CHECK_OK(tpu_test_run_op("aten::arange.start_out", args, 4, NULL, data, &out, 1, r));
  for (int i = 0; i < n; i++) CHECK(((float*)r[0])[i] == (float)(0 + i * 0.1));
  free(r[0]);
  /* int64 with a negative step; arange.out(end) form. */
  int64_t s2 = 5, step2 = -2, m = 3;
  tpu_lower_arg_t iargs[4] = {tpu_test_scalar_arg(TPU_DTYPE_INT64, true),
                              tpu_test_scalar_arg(TPU_DTYPE_INT64, true),
                              tpu_test_scalar_arg(TPU_DTYPE_INT64, true),
                              tpu_test_tensor_arg(TPU_DTYPE_INT64, 1, &m)};
  int64_t idummy[3];
  const void* idata[4] = {idummy, &s2, &end, &step2};
  tpu_hlo_type_t iout = tpu_hlo_type_make(TPU_DTYPE_INT64, 1, &m);
  CHECK_OK(tpu_test_run_op("aten::arange.start_out", iargs, 4, NULL, idata, &iout, 1, r));
  CHECK(((int64_t*)r[0])[0] == 5 && ((int64_t*)r[0])[1] == 3 && ((int64_t*)r[0])[2] == 1);
  free(r[0]);
  tpu_lower_arg_t eargs[2] = {tpu_test_scalar_arg(TPU_DTYPE_INT64, true),
                              tpu_test_tensor_arg(TPU_DTYPE_INT64, 1, &m)};
  const void* edata[2] = {idummy, &m};
  CHECK_OK(tpu_test_run_op("aten::arange.out", eargs, 2, NULL, edata, &iout, 1, r));
  CHECK(((int64_t*)r[0])[0] == 0 && ((int64_t*)r[0])[2] == 2);
  free(r[0]);
}

static void test_linspace_logspace(void) {
  int64_t n = 7;
  tpu_lower_arg_t args[4] = {tpu_test_scalar_arg(TPU_DTYPE_FLOAT64, true),
                             tpu_test_scalar_arg(TPU_DTYPE_FLOAT64, true),
                             {.kind = TPU_ARG_INT, .i = n},
                             tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 1, &n)};
  float dummy[7];
  double start = -1, end = 2.5;
  const void* data[3] = {dummy, &start, &end};
  tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 1, &n);
  void* r[1];
  CHECK_OK(tpu_test_run_op("aten::linspace.out", args, 4, NULL, data, &out, 1, r));
  /* PyTorch's CPU kernel and XLA both fuse the multiply-add (FMA). */
  float step = (2.5f - -1.0f) / 6;
  for (int i = 0; i < n; i++) {
    float want = i < n / 2 ? fmaf(step, (float)i, -1.0f) : fmaf(-step, (float)(n - 1 - i), 2.5f);
    if (((float*)r[0])[i] != want) printf("linspace %d: %.9g want %.9g\n", i, ((float*)r[0])[i], want);
    CHECK(((float*)r[0])[i] == want);
  }
  free(r[0]);
  /* Integer output: double steps from integer endpoints, truncated. */
  args[3] = tpu_test_tensor_arg(TPU_DTYPE_INT64, 1, &n);
  int64_t idummy[7];
  const void* idata[3] = {idummy, &start, &end};
  tpu_hlo_type_t iout = tpu_hlo_type_make(TPU_DTYPE_INT64, 1, &n);
  CHECK_OK(tpu_test_run_op("aten::linspace.out", args, 4, NULL, idata, &iout, 1, r));
  int64_t want_i[7] = {-1, 0, 0, 0, 1, 1, 2}; /* torch.linspace(-1, 2.5, 7, dtype=int64) */
  for (int i = 0; i < n; i++) CHECK(((int64_t*)r[0])[i] == want_i[i]);
  free(r[0]);
  /* torch.linspace(50, 1, 50, dtype=int64) is 50, 49, ..., 1: the step is
   * exactly -1 (-49 * (1 / 49) would truncate 25 to 24). */
  {
    int64_t n50 = 50;
    double s50 = 50, e1 = 1;
    static int64_t d50[50];
    const void* ldata[3] = {d50, &s50, &e1};
    tpu_lower_arg_t l50[4] = {args[0], args[1], {.kind = TPU_ARG_INT, .i = 50},
                              tpu_test_tensor_arg(TPU_DTYPE_INT64, 1, &n50)};
    tpu_hlo_type_t o50 = tpu_hlo_type_make(TPU_DTYPE_INT64, 1, &n50);
    CHECK_OK(tpu_test_run_op("aten::linspace.out", l50, 4, NULL, ldata, &o50, 1, r));
    for (int i = 0; i < 50; i++) CHECK(((int64_t*)r[0])[i] == 50 - i);
    free(r[0]);
  }
  /* logspace(-1, 2.5, 7, base=2): the exponents in double. */
  tpu_lower_arg_t largs[5] = {args[0], args[1], args[2], {.kind = TPU_ARG_FLOAT, .f = 2},
                              tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 1, &n)};
  CHECK_OK(tpu_test_run_op("aten::logspace.out", largs, 5, NULL, data, &out, 1, r));
  const double dstep = 3.5 / (n - 1);
  for (int i = 0; i < n; i++) {
    double e = i < n / 2 ? -1.0 + dstep * i : 2.5 - dstep * (n - 1 - i);
    CHECK(((float*)r[0])[i] == (float)pow(2.0, e));
  }
  /* torch.logspace(0, 4, 4, dtype=torch.bfloat16): the exponent is not
   * rounded to bfloat16 (21.5, not 21.625). */
  free(r[0]);
  {
    double s0 = 0, s4 = 4;
    const void* bdata[3] = {idummy, &s0, &s4};
    int64_t four = 4;
    tpu_lower_arg_t bargs[5] = {args[0], args[1], {.kind = TPU_ARG_INT, .i = 4}, {.kind = TPU_ARG_FLOAT, .f = 10},
                                tpu_test_tensor_arg(TPU_DTYPE_BFLOAT16, 1, &four)};
    tpu_hlo_type_t bo = tpu_hlo_type_make(TPU_DTYPE_BFLOAT16, 1, &four);
    CHECK_OK(tpu_test_run_op("aten::logspace.out", bargs, 5, NULL, bdata, &bo, 1, r));
    const uint16_t want_bf[4] = {0x3f80, 0x41ac, 0x43e8, 0x461c}; /* 1, 21.5, 464, 9984 */
    CHECK(memcmp(r[0], want_bf, sizeof want_bf) == 0);
  }
  free(r[0]);
  /* steps = 1 gives start. */
  int64_t one = 1;
  args[2].i = 1;
  args[3] = tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 1, &one);
  tpu_hlo_type_t o1 = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 1, &one);
  CHECK_OK(tpu_test_run_op("aten::linspace.out", args, 4, NULL, data, &o1, 1, r));
  CHECK(((float*)r[0])[0] == -1);
  free(r[0]);
}

static void test_eye_and_tri_indices(void) {
  int64_t d[2] = {3, 4};
  tpu_lower_arg_t args[3] = {{.kind = TPU_ARG_INT, .i = 3}, {.kind = TPU_ARG_INT, .i = 4},
                             tpu_test_tensor_arg(TPU_DTYPE_BFLOAT16, 2, d)};
  uint16_t dummy[12];
  const void* data[1] = {dummy};
  tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_BFLOAT16, 2, d);
  void* r[1];
  CHECK_OK(tpu_test_run_op("aten::eye.m_out", args, 3, NULL, data, &out, 1, r));
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 4; j++) CHECK(((uint16_t*)r[0])[i * 4 + j] == (i == j ? 0x3f80 : 0));
  free(r[0]);
  /* torch.tril_indices(3, 4, 1) / torch.triu_indices(3, 4, 1). */
  tpu_lower_arg_t targs[3] = {{.kind = TPU_ARG_INT, .i = 3}, {.kind = TPU_ARG_INT, .i = 4},
                              {.kind = TPU_ARG_INT, .i = 1}};
  int64_t tl[2] = {2, 9}, tu[2] = {2, 6};
  tpu_hlo_type_t tlo = tpu_hlo_type_make(TPU_DTYPE_INT64, 2, tl);
  tpu_hlo_type_t tuo = tpu_hlo_type_make(TPU_DTYPE_INT64, 2, tu);
  CHECK_OK(tpu_test_run_op("aten::tril_indices", targs, 3, NULL, NULL, &tlo, 1, r));
  int64_t want_l[18] = {0, 0, 1, 1, 1, 2, 2, 2, 2, 0, 1, 0, 1, 2, 0, 1, 2, 3};
  CHECK(memcmp(r[0], want_l, sizeof want_l) == 0);
  free(r[0]);
  CHECK_OK(tpu_test_run_op("aten::triu_indices", targs, 3, NULL, NULL, &tuo, 1, r));
  int64_t want_u[12] = {0, 0, 0, 1, 1, 2, 1, 2, 3, 2, 3, 3};
  CHECK(memcmp(r[0], want_u, sizeof want_u) == 0);
  free(r[0]);
}

static void test_log_normal_cauchy_geometric(void) {
  tpu_lower_arg_t args[4] = {{0}, {.kind = TPU_ARG_FLOAT, .f = 0.5},
                             {.kind = TPU_ARG_FLOAT, .f = 0.25}, {.kind = TPU_ARG_NONE}};
  float* a = run_rng("aten::log_normal_", args, 4, TPU_DTYPE_FLOAT32, 13, 0, NULL);
  double s = 0, s2 = 0;
  for (int i = 0; i < N; i++) {
    CHECK(a[i] > 0);
    s += log(a[i]);
    s2 += log(a[i]) * log(a[i]);
  }
  CHECK(fabs(s / N - 0.5) < 0.01 && fabs(sqrt(s2 / N - (s / N) * (s / N)) - 0.25) < 0.01);
  free(a);
  /* Cauchy(1, 2): median 1, quartiles 1 -+ 2. */
  args[1].f = 1;
  args[2].f = 2;
  float* c = run_rng("aten::cauchy_", args, 4, TPU_DTYPE_FLOAT32, 13, 0, NULL);
  int below = 0, inner = 0;
  for (int i = 0; i < N; i++) {
    below += c[i] < 1;
    inner += c[i] > -1 && c[i] < 3;
  }
  CHECK(fabs(below / (double)N - 0.5) < 0.015 && fabs(inner / (double)N - 0.5) < 0.015);
  free(c);
  /* Geometric(0.25) on int64: values >= 1, mean 1 / p. */
  tpu_lower_arg_t gargs[3] = {{0}, {.kind = TPU_ARG_FLOAT, .f = 0.25}, {.kind = TPU_ARG_NONE}};
  int64_t* g = run_rng("aten::geometric_", gargs, 3, TPU_DTYPE_INT64, 13, 0, NULL);
  double gs = 0;
  int ones = 0;
  for (int i = 0; i < N; i++) {
    CHECK(g[i] >= 1);
    gs += (double)g[i];
    ones += g[i] == 1;
  }
  CHECK(fabs(gs / N - 4) < 0.1 && fabs(ones / (double)N - 0.25) < 0.015);
  free(g);
}

TPU_TEST_MAIN(TPU_TEST(test_uniform_reproducible_and_in_range), TPU_TEST(test_normal_moments),
              TPU_TEST(test_bernoulli_float_and_tensor_p), TPU_TEST(test_random_ranges),
              TPU_TEST(test_exponential_mean), TPU_TEST(test_log_normal_cauchy_geometric), TPU_TEST(test_randperm_is_a_permutation), TPU_TEST(test_multinomial),
              TPU_TEST(test_arange), TPU_TEST(test_linspace_logspace),
              TPU_TEST(test_eye_and_tri_indices))
