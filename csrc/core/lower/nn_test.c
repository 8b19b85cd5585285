/* nn family: each lowering run on the XLA CPU plugin against values
 * computed here in double precision. */
#include <math.h>
#include <string.h>

#include "../testing.h"
#include "emit.h"
#include "nn_testing.h"

static void test_softmax_and_log_softmax(void) {
  int64_t d[2] = {3, 4};
  float x[12];
  fill(x, 12, 1);
  x[4] = 80.0f; /* large values must not overflow: max subtraction */
  x[5] = 85.0f;
  tpu_lower_arg_t args[3] = {f32(2, d), int_arg(0), bool_arg(false)};
  const void* data[1] = {x};
  tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 2, d);
  double sm[12], lsm[12];
  for (int j = 0; j < 4; j++) {
    double m = -INFINITY, s = 0;
    for (int i = 0; i < 3; i++) m = fmax(m, x[i * 4 + j]);
    for (int i = 0; i < 3; i++) s += exp(x[i * 4 + j] - m);
    for (int i = 0; i < 3; i++) {
      sm[i * 4 + j] = exp(x[i * 4 + j] - m) / s;
      lsm[i * 4 + j] = x[i * 4 + j] - m - log(s);
    }
  }
  void* r[1];
  CHECK_OK(tpu_test_run_op("aten::_softmax", args, 3, NULL, data, &out, 1, r));
  check_all(r[0], sm, 12, 1e-6);
  free(r[0]);
  CHECK_OK(tpu_test_run_op("aten::_log_softmax.out", args, 3, NULL, data, &out, 1, r));
  check_all(r[0], lsm, 12, 1e-6);
  free(r[0]);

  /* Backward: grad_output, output, dim (-2), input_dtype. */
  float g[12], y[12], ly[12];
  fill(g, 12, 2);
  for (int i = 0; i < 12; i++) y[i] = (float)sm[i], ly[i] = (float)lsm[i];
  tpu_lower_arg_t bargs[4] = {f32(2, d), f32(2, d), int_arg(-2),
                              {.kind = TPU_ARG_DTYPE, .dtype = TPU_DTYPE_FLOAT32}};
  double want[12];
  for (int j = 0; j < 4; j++) {
    double dot = 0, gs = 0;
    for (int i = 0; i < 3; i++) dot += (double)g[i * 4 + j] * y[i * 4 + j], gs += g[i * 4 + j];
    for (int i = 0; i < 3; i++) want[i * 4 + j] = y[i * 4 + j] * (g[i * 4 + j] - dot);
  }
  const void* bdata[2] = {g, y};
  CHECK_OK(tpu_test_run_op("aten::_softmax_backward_data", bargs, 4, NULL, bdata, &out, 1, r));
  check_all(r[0], want, 12, 1e-5);
  free(r[0]);
  for (int j = 0; j < 4; j++) {
    double gs = 0;
    for (int i = 0; i < 3; i++) gs += g[i * 4 + j];
    for (int i = 0; i < 3; i++) want[i * 4 + j] = g[i * 4 + j] - exp(ly[i * 4 + j]) * gs;
  }
  const void* ldata[2] = {g, ly};
  CHECK_OK(tpu_test_run_op("aten::_log_softmax_backward_data", bargs, 4, NULL, ldata, &out, 1, r));
  check_all(r[0], want, 12, 1e-5);
  free(r[0]);
}

/* _safe_softmax: a row of -inf only is zeros (PyTorch's NaN-free masked
 * attention), a partly masked row is softmax over what is left, a NaN row
 * stays NaN. Rows along dim 1 of [3, 4]. */
static void test_safe_softmax_zeroes_fully_masked_rows(void) {
  int64_t d[2] = {3, 4};
  float x[12];
  fill(x, 12, 3);
  for (int j = 0; j < 4; j++) x[4 + j] = -INFINITY; /* row 1: all masked */
  x[8] = -INFINITY;                                 /* row 2: one masked */
  x[1] = NAN;                                       /* row 0: a NaN */
  tpu_lower_arg_t args[3] = {f32(2, d), int_arg(1), {.kind = TPU_ARG_NONE}};
  const void* data[1] = {x};
  tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 2, d);
  void* r[1];
  CHECK_OK(tpu_test_run_op("aten::_safe_softmax", args, 3, NULL, data, &out, 1, r));
  const float* y = r[0];
  for (int j = 0; j < 4; j++) CHECK(isnan(y[j]));
  for (int j = 0; j < 4; j++) CHECK_EQ(y[4 + j], 0.0f);
  double m = -INFINITY, s = 0;
  for (int j = 1; j < 4; j++) m = fmax(m, x[8 + j]);
  for (int j = 1; j < 4; j++) s += exp(x[8 + j] - m);
  CHECK_EQ(y[8], 0.0f);
  for (int j = 1; j < 4; j++) CHECK(fabs(y[8 + j] - exp(x[8 + j] - m) / s) < 1e-6);
  free(r[0]);
}

/* half_to_float: a bfloat16 input gives a float32 result. */
static void test_softmax_half_to_float(void) {
  int64_t d[1] = {4};
  uint16_t x[4] = {0x3f80, 0x4000, 0x4040, 0x4080}; /* 1 2 3 4 in bf16 */
  tpu_lower_arg_t args[3] = {tpu_test_tensor_arg(TPU_DTYPE_BFLOAT16, 1, d), int_arg(0),
                             bool_arg(true)};
  const void* data[1] = {x};
  tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 1, d);
  double s = 0, want[4];
  for (int i = 0; i < 4; i++) s += exp(i + 1.0);
  for (int i = 0; i < 4; i++) want[i] = exp(i + 1.0) / s;
  void* r[1];
  CHECK_OK(tpu_test_run_op("aten::_softmax", args, 3, NULL, data, &out, 1, r));
  check_all(r[0], want, 4, 1e-6);
  free(r[0]);
}

static void test_layer_norm_forward_backward(void) {
  enum { R = 3, C = 5 };
  int64_t d[2] = {R, C}, ns[1] = {C}, c[1] = {C}, st[2] = {R, 1};
  float x[R * C], w[C], bias[C], g[R * C];
  fill(x, R * C, 3);
  fill(w, C, 4);
  fill(bias, C, 5);
  fill(g, R * C, 6);
  double eps = 1e-5, mean[R], rstd[R], y[R * C];
  for (int i = 0; i < R; i++) {
    double s = 0, v = 0;
    for (int j = 0; j < C; j++) s += x[i * C + j];
    mean[i] = s / C;
    for (int j = 0; j < C; j++) v += (x[i * C + j] - mean[i]) * (x[i * C + j] - mean[i]);
    rstd[i] = 1 / sqrt(v / C + eps);
    for (int j = 0; j < C; j++) y[i * C + j] = (x[i * C + j] - mean[i]) * rstd[i] * w[j] + bias[j];
  }
  tpu_lower_arg_t args[5] = {f32(2, d), ints_arg(1, ns), f32(1, c), f32(1, c), float_arg(eps)};
  const void* data[3] = {x, w, bias};
  tpu_hlo_type_t outs[3] = {tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 2, d),
                            tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 2, st),
                            tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 2, st)};
  void* r[3];
  CHECK_OK(tpu_test_run_op("aten::native_layer_norm", args, 5, NULL, data, outs, 3, r));
  check_all(r[0], y, R * C, 1e-5);
  check_all(r[1], mean, R, 1e-6);
  check_all(r[2], rstd, R, 1e-5);
  float fmean[R], frstd[R];
  memcpy(fmean, r[1], sizeof fmean);
  memcpy(frstd, r[2], sizeof frstd);
  for (int i = 0; i < 3; i++) free(r[i]);

  /* Backward against the closed form. */
  double dx[R * C], dw[C] = {0}, db[C] = {0};
  for (int i = 0; i < R; i++) {
    double a = 0, bsum = 0, xh[C], gw[C];
    for (int j = 0; j < C; j++) {
      xh[j] = (x[i * C + j] - fmean[i]) * frstd[i];
      gw[j] = (double)g[i * C + j] * w[j];
      a += gw[j];
      bsum += gw[j] * xh[j];
      dw[j] += g[i * C + j] * xh[j];
      db[j] += g[i * C + j];
    }
    for (int j = 0; j < C; j++) dx[i * C + j] = frstd[i] * (gw[j] - a / C - xh[j] * bsum / C);
  }
  int64_t mask[3] = {1, 1, 1};
  tpu_lower_arg_t bargs[8] = {f32(2, d), f32(2, d), ints_arg(1, ns), f32(2, st), f32(2, st),
                              f32(1, c), f32(1, c), ints_arg(3, mask)};
  const void* bdata[6] = {g, x, fmean, frstd, w, bias};
  tpu_hlo_type_t bouts[3] = {tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 2, d),
                             tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 1, c),
                             tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 1, c)};
  CHECK_OK(tpu_test_run_op("aten::native_layer_norm_backward", bargs, 8, NULL, bdata, bouts, 3, r));
  check_all(r[0], dx, R * C, 1e-4);
  check_all(r[1], dw, C, 1e-5);
  check_all(r[2], db, C, 1e-5);
  for (int i = 0; i < 3; i++) free(r[i]);
  /* output_mask (1, 0, 1) with the undefined dweight dropped: the two
   * outputs are dx and dbias. */
  int64_t mask101[3] = {1, 0, 1};
  bargs[7] = ints_arg(3, mask101);
  tpu_hlo_type_t two[2] = {bouts[0], bouts[2]};
  CHECK_OK(tpu_test_run_op("aten::native_layer_norm_backward", bargs, 8, NULL, bdata, two, 2, r));
  check_all(r[0], dx, R * C, 1e-4);
  check_all(r[1], db, C, 1e-5);
  for (int i = 0; i < 2; i++) free(r[i]);
}

static void test_group_norm(void) {
  enum { N = 2, C = 4, HW = 3, G = 2 };
  int64_t d[3] = {N, C, HW}, ng[2] = {N, G}, c[1] = {C};
  float x[N * C * HW], w[C], bias[C];
  fill(x, N * C * HW, 7);
  fill(w, C, 8);
  fill(bias, C, 9);
  double y[N * C * HW], mean[N * G], rstd[N * G];
  int per = C / G * HW;
  for (int n = 0; n < N; n++)
    for (int gi = 0; gi < G; gi++) {
      const float* p = x + n * C * HW + gi * per;
      double s = 0, v = 0;
      for (int k = 0; k < per; k++) s += p[k];
      double m = s / per;
      for (int k = 0; k < per; k++) v += (p[k] - m) * (p[k] - m);
      mean[n * G + gi] = m;
      rstd[n * G + gi] = 1 / sqrt(v / per + 1e-5);
      for (int k = 0; k < per; k++) {
        int ch = gi * (C / G) + k / HW;
        y[n * C * HW + gi * per + k] = (p[k] - m) * rstd[n * G + gi] * w[ch] + bias[ch];
      }
    }
  tpu_lower_arg_t args[8] = {f32(3, d), f32(1, c), f32(1, c), int_arg(N),
                             int_arg(C), int_arg(HW), int_arg(G), float_arg(1e-5)};
  const void* data[3] = {x, w, bias};
  tpu_hlo_type_t outs[3] = {tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 3, d),
                            tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 2, ng),
                            tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 2, ng)};
  void* r[3];
  CHECK_OK(tpu_test_run_op("aten::native_group_norm", args, 8, NULL, data, outs, 3, r));
  check_all(r[0], y, N * C * HW, 1e-5);
  check_all(r[1], mean, N * G, 1e-6);
  check_all(r[2], rstd, N * G, 1e-5);
  for (int i = 0; i < 3; i++) free(r[i]);
}

/* Training-mode functional batch norm: outputs and the updated stats. */
static void test_batch_norm_functional_training(void) {
  enum { N = 3, C = 2, S = 4 };
  int64_t d[3] = {N, C, S}, c[1] = {C};
  float x[N * C * S], w[C] = {1.5f, -0.5f}, bias[C] = {0.25f, 1.0f}, rm[C] = {0.1f, -0.2f},
                    rv[C] = {1.0f, 2.0f};
  fill(x, N * C * S, 10);
  double mom = 0.1, eps = 1e-5, mean[C], invstd[C], nrm[C], nrv[C], y[N * C * S];
  for (int ch = 0; ch < C; ch++) {
    double s = 0, v = 0;
    for (int n = 0; n < N; n++)
      for (int k = 0; k < S; k++) s += x[(n * C + ch) * S + k];
    mean[ch] = s / (N * S);
    for (int n = 0; n < N; n++)
      for (int k = 0; k < S; k++) {
        double t = x[(n * C + ch) * S + k] - mean[ch];
        v += t * t;
      }
    invstd[ch] = 1 / sqrt(v / (N * S) + eps);
    nrm[ch] = (1 - mom) * rm[ch] + mom * mean[ch];
    nrv[ch] = (1 - mom) * rv[ch] + mom * v / (N * S - 1);
    for (int n = 0; n < N; n++)
      for (int k = 0; k < S; k++) {
        int i = (n * C + ch) * S + k;
        y[i] = (x[i] - mean[ch]) * invstd[ch] * w[ch] + bias[ch];
      }
  }
  tpu_lower_arg_t args[8] = {f32(3, d), f32(1, c), f32(1, c), f32(1, c), f32(1, c),
                             bool_arg(true), float_arg(mom), float_arg(eps)};
  const void* data[5] = {x, w, bias, rm, rv};
  tpu_hlo_type_t ct = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 1, c);
  tpu_hlo_type_t outs[5] = {tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 3, d), ct, ct, ct, ct};
  void* r[5];
  CHECK_OK(tpu_test_run_op("aten::_native_batch_norm_legit_functional", args, 8, NULL, data,
                           outs, 5, r));
  check_all(r[0], y, N * C * S, 1e-5);
  check_all(r[1], mean, C, 1e-6);
  check_all(r[2], invstd, C, 1e-5);
  check_all(r[3], nrm, C, 1e-6);
  check_all(r[4], nrv, C, 1e-6);
  for (int i = 0; i < 5; i++) free(r[i]);

  /* Eval: running stats normalize; native_batch_norm's saved stats may be
   * empty (as on CPU). */
  args[5] = bool_arg(false);
  int64_t zero = 0;
  tpu_hlo_type_t eouts[3] = {outs[0], tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 1, &zero),
                             tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 1, &zero)};
  for (int i = 0; i < N * C * S; i++) {
    int ch = (i / S) % C;
    y[i] = (x[i] - rm[ch]) / sqrt(rv[ch] + eps) * w[ch] + bias[ch];
  }
  CHECK_OK(tpu_test_run_op("aten::native_batch_norm", args, 8, NULL, data, eouts, 3, r));
  check_all(r[0], y, N * C * S, 1e-5);
  for (int i = 0; i < 3; i++) free(r[i]);

  /* Training with running stats but no stats outputs: declined (the update
   * would be lost). */
  args[5] = bool_arg(true);
  tpu_status_t s = tpu_test_run_op("aten::native_batch_norm", args, 8, NULL, data, eouts, 3, r);
  CHECK(s != NULL && tpu_status_code(s) == TPU_STATUS_UNIMPLEMENTED);
  tpu_status_free(s);
}

static void test_batch_norm_backward(void) {
  enum { N = 2, C = 3, S = 2 };
  int64_t d[3] = {N, C, S}, c[1] = {C}, mask[3] = {1, 1, 1};
  float x[N * C * S], g[N * C * S], w[C] = {0.5f, 2.0f, -1.0f}, sm[C], si[C];
  fill(x, N * C * S, 11);
  fill(g, N * C * S, 12);
  const int M = N * S;
  double dx[N * C * S], dw[C], db[C];
  for (int ch = 0; ch < C; ch++) {
    double s = 0, v = 0;
    for (int n = 0; n < N; n++)
      for (int k = 0; k < S; k++) s += x[(n * C + ch) * S + k];
    sm[ch] = (float)(s / M);
    for (int n = 0; n < N; n++)
      for (int k = 0; k < S; k++) v += pow(x[(n * C + ch) * S + k] - sm[ch], 2);
    si[ch] = (float)(1 / sqrt(v / M + 1e-5));
    dw[ch] = db[ch] = 0;
    for (int n = 0; n < N; n++)
      for (int k = 0; k < S; k++) {
        int i = (n * C + ch) * S + k;
        db[ch] += g[i];
        dw[ch] += g[i] * (x[i] - sm[ch]) * si[ch];
      }
    for (int n = 0; n < N; n++)
      for (int k = 0; k < S; k++) {
        int i = (n * C + ch) * S + k;
        double xh = (x[i] - sm[ch]) * si[ch];
        dx[i] = w[ch] * si[ch] * (g[i] - db[ch] / M - xh * dw[ch] / M);
      }
  }
  tpu_lower_arg_t args[10] = {f32(3, d), f32(3, d), f32(1, c), none_arg(), none_arg(),
                              f32(1, c), f32(1, c), bool_arg(true), float_arg(1e-5),
                              ints_arg(3, mask)};
  const void* data[5] = {g, x, w, sm, si};
  tpu_hlo_type_t ct = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 1, c);
  tpu_hlo_type_t outs[3] = {tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 3, d), ct, ct};
  void* r[3];
  CHECK_OK(tpu_test_run_op("aten::native_batch_norm_backward", args, 10, NULL, data, outs, 3, r));
  check_all(r[0], dx, N * C * S, 1e-4);
  check_all(r[1], dw, C, 1e-5);
  check_all(r[2], db, C, 1e-5);
  for (int i = 0; i < 3; i++) free(r[i]);
}

static void test_embedding_dense_backward(void) {
  int64_t gd[3] = {2, 3, 2}, id[2] = {2, 3}, od[2] = {4, 2};
  float g[12];
  for (int i = 0; i < 12; i++) g[i] = (float)(i + 1);
  int64_t idx[6] = {1, 3, 1, 0, 1, 2};
  tpu_lower_arg_t args[5] = {f32(3, gd), tpu_test_tensor_arg(TPU_DTYPE_INT64, 2, id),
                             int_arg(4), int_arg(3), bool_arg(false)};
  const void* data[2] = {g, idx};
  tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 2, od);
  double want[8] = {0};
  for (int k = 0; k < 6; k++)
    if (idx[k] != 3)
      for (int j = 0; j < 2; j++) want[idx[k] * 2 + j] += g[k * 2 + j];
  void* r[1];
  CHECK_OK(tpu_test_run_op("aten::embedding_dense_backward", args, 5, NULL, data, &out, 1, r));
  check_all(r[0], want, 8, 0);
  free(r[0]);
  /* scale_grad_by_freq: index 1 appears three times. */
  args[4] = bool_arg(true);
  args[3] = int_arg(-1);
  memset(want, 0, sizeof want);
  int counts[4] = {1, 3, 1, 1};
  for (int k = 0; k < 6; k++)
    for (int j = 0; j < 2; j++) want[idx[k] * 2 + j] += g[k * 2 + j] / counts[idx[k]];
  CHECK_OK(tpu_test_run_op("aten::embedding_dense_backward", args, 5, NULL, data, &out, 1, r));
  check_all(r[0], want, 8, 1e-6);
  free(r[0]);
}

/* Runs native_dropout's plain program. Where the random bits come from
 * stablehlo.rng_bit_generator, its generator state is retyped
 * tensor<2xui64>: the XLA CPU plugin rejects THREE_FRY on a 2 x int64 state
 * ("Binary op add with different element types: s64[4,1] and u64[4,1]"). */
static tpu_status_t run_dropout(const tpu_lower_arg_t* args, const float* x, int64_t n,
                                const tpu_hlo_type_t* outs, void** r) {
  TPU_RETURN_IF_ERROR(tpu_runtime_init(NULL));
  char* text = NULL;
  size_t len = 0;
  TPU_RETURN_IF_ERROR(tpu_lower_program_plain("aten::native_dropout", args, 3, NULL, outs, 2,
                                              &text, &len));
  /* "tensor<2xi64>" -> "tensor<2xui64>" everywhere (one byte longer each). */
  bool patch = strstr(text, "stablehlo.rng_bit_generator") != NULL;
  char* fixed = malloc(2 * len + 1);
  size_t k = 0;
  for (const char* c = text; *c;) {
    if (patch && strncmp(c, "tensor<2xi64>", 13) == 0) {
      memcpy(fixed + k, "tensor<2xui64>", 14);
      k += 14;
      c += 13;
    } else {
      fixed[k++] = *c++;
    }
  }
  fixed[k] = 0;
  free(text);
  tpu_program_t* program = NULL;
  tpu_status_t s = tpu_program_get(fixed, k, &program);
  free(fixed);
  TPU_RETURN_IF_ERROR(s);
  int64_t state[2] = {42, 7}, two = 2;
  tpu_buffer_t* in[2] = {0};
  tpu_buffer_t* res[4] = {0};
  s = tpu_buffer_from_host(tpu_runtime_client(), 0, x, TPU_DTYPE_FLOAT32, &n, 1, NULL, &in[0]);
  if (!s)
    s = tpu_buffer_from_host(tpu_runtime_client(), 0, state, TPU_DTYPE_INT64, &two, 1, NULL,
                             &in[1]);
  if (!s) s = tpu_program_execute(program, 0, in, 2, res);
  for (int i = 0; i < 2; i++) {
    size_t nbytes = tpu_test_type_bytes(&outs[i]);
    r[i] = malloc(nbytes);
    if (!s) s = tpu_buffer_to_host(res[i], r[i], nbytes);
  }
  for (int i = 0; i < 2; i++) tpu_buffer_destroy(in[i]);
  for (int i = 0; i < 4; i++) tpu_buffer_destroy(res[i]);
  return s;
}

/* native_dropout: kept elements are scaled by 1 / (1 - p), the kept
 * fraction is near 1 - p, and the backward uses the mask. */
static void test_native_dropout(void) {
  enum { N = 4096 };
  int64_t d[1] = {N};
  static float x[N];
  for (int i = 0; i < N; i++) x[i] = (float)(i % 7) + 1.0f;
  tpu_lower_arg_t args[3] = {f32(1, d), float_arg(0.25), bool_arg(true)};
  tpu_hlo_type_t outs[2] = {tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 1, d),
                            tpu_hlo_type_make(TPU_DTYPE_BOOL, 1, d)};
  void* r[2];
  CHECK_OK(run_dropout(args, x, N, outs, r));
  float* y = r[0];
  uint8_t* m = r[1];
  int kept = 0;
  bool ok = true;
  for (int i = 0; i < N; i++) {
    kept += m[i] != 0;
    float want = m[i] ? x[i] / 0.75f : 0.0f;
    ok &= fabsf(y[i] - want) <= 1e-6f * want;
  }
  CHECK(ok);
  CHECK(kept > N * 0.70 && kept < N * 0.80);
  /* Backward. */
  tpu_lower_arg_t bargs[3] = {f32(1, d), tpu_test_tensor_arg(TPU_DTYPE_BOOL, 1, d),
                              float_arg(1 / 0.75)};
  const void* bdata[2] = {x, m};
  void* g[1];
  CHECK_OK(tpu_test_run_op("aten::native_dropout_backward", bargs, 3, NULL, bdata, outs, 1, g));
  ok = true;
  for (int i = 0; i < N; i++) ok &= fabsf(((float*)g[0])[i] - y[i]) <= 1e-6f * y[i];
  CHECK(ok);
  free(g[0]);
  /* Grad and mask broadcast against each other: [2, 1] * [3] -> [2, 3]. */
  int64_t gd[2] = {2, 1}, md[1] = {3}, od[2] = {2, 3};
  float gx[2] = {1, 2};
  uint8_t mk[3] = {1, 0, 1};
  tpu_lower_arg_t cargs[3] = {f32(2, gd), tpu_test_tensor_arg(TPU_DTYPE_BOOL, 1, md), float_arg(2)};
  const void* cdata[2] = {gx, mk};
  tpu_hlo_type_t cout = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 2, od);
  CHECK_OK(tpu_test_run_op("aten::native_dropout_backward", cargs, 3, NULL, cdata, &cout, 1, g));
  float want_c[6] = {2, 0, 2, 4, 0, 4};
  CHECK(memcmp(g[0], want_c, sizeof want_c) == 0);
  free(g[0]);
  free(r[0]);
  free(r[1]);
  /* train = False: identity, all-true mask. */
  args[2] = bool_arg(false);
  CHECK_OK(run_dropout(args, x, N, outs, r));
  CHECK(memcmp(r[0], x, sizeof x) == 0);
  CHECK(((uint8_t*)r[1])[0] == 1 && ((uint8_t*)r[1])[N - 1] == 1);
  free(r[0]);
  free(r[1]);
}

/* Group norm backward against the closed form, groups of 2 channels. */
static void test_group_norm_backward(void) {
  enum { N = 2, C = 4, HW = 3, G = 2, PER = C / G * HW };
  int64_t d[3] = {N, C, HW}, ng[2] = {N, G}, c[1] = {C}, mask[3] = {1, 1, 1};
  float x[N * C * HW], g[N * C * HW], w[C], mean[N * G], rstd[N * G];
  fill(x, N * C * HW, 14);
  fill(g, N * C * HW, 15);
  fill(w, C, 16);
  double dx[N * C * HW], dw[C] = {0}, db[C] = {0};
  for (int n = 0; n < N; n++)
    for (int gi = 0; gi < G; gi++) {
      int base = n * C * HW + gi * PER;
      double s = 0, v = 0;
      for (int k = 0; k < PER; k++) s += x[base + k];
      mean[n * G + gi] = (float)(s / PER);
      for (int k = 0; k < PER; k++) v += pow(x[base + k] - mean[n * G + gi], 2);
      rstd[n * G + gi] = (float)(1 / sqrt(v / PER + 1e-5));
      double a = 0, bb = 0, xh[PER], gw[PER];
      for (int k = 0; k < PER; k++) {
        int ch = gi * (C / G) + k / HW;
        xh[k] = (x[base + k] - mean[n * G + gi]) * rstd[n * G + gi];
        gw[k] = (double)g[base + k] * w[ch];
        a += gw[k];
        bb += gw[k] * xh[k];
        dw[ch] += g[base + k] * xh[k];
        db[ch] += g[base + k];
      }
      for (int k = 0; k < PER; k++)
        dx[base + k] = rstd[n * G + gi] * (gw[k] - a / PER - xh[k] * bb / PER);
    }
  tpu_lower_arg_t args[10] = {f32(3, d), f32(3, d), f32(2, ng), f32(2, ng), f32(1, c),
                              int_arg(N), int_arg(C), int_arg(HW), int_arg(G), ints_arg(3, mask)};
  const void* data[5] = {g, x, mean, rstd, w};
  tpu_hlo_type_t ct = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 1, c);
  tpu_hlo_type_t outs[3] = {tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 3, d), ct, ct};
  void* r[3];
  CHECK_OK(tpu_test_run_op("aten::native_group_norm_backward", args, 10, NULL, data, outs, 3, r));
  check_all(r[0], dx, N * C * HW, 1e-4);
  check_all(r[1], dw, C, 1e-5);
  check_all(r[2], db, C, 1e-5);
  for (int i = 0; i < 3; i++) free(r[i]);
}

/* bfloat16 softmax computes in float32 and rounds once: a row whose sum in
 * bf16 would lose the small terms still normalizes exactly. */
static void test_bf16_log_softmax_accumulates_in_f32(void) {
  enum { K = 512 };
  int64_t d[1] = {K};
  static uint16_t x[K];
  for (int i = 0; i < K; i++) x[i] = 0x0000; /* all zeros: log_softmax = -log(K) */
  tpu_lower_arg_t args[3] = {tpu_test_tensor_arg(TPU_DTYPE_BFLOAT16, 1, d), int_arg(0),
                             bool_arg(false)};
  const void* data[1] = {x};
  tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_BFLOAT16, 1, d);
  void* r[1];
  CHECK_OK(tpu_test_run_op("aten::_log_softmax", args, 3, NULL, data, &out, 1, r));
  uint16_t got = ((uint16_t*)r[0])[K - 1];
  uint32_t bits = (uint32_t)got << 16;
  float f;
  memcpy(&f, &bits, sizeof f);
  CHECK(fabs(f + log((double)K)) < 0.02); /* -6.238 in bf16 */
  free(r[0]);
}

static void test_log_sigmoid(void) {
  enum { N = 6 };
  int64_t d[1] = {N};
  float x[N] = {-30.0f, -2.0f, -0.1f, 0.0f, 1.5f, 40.0f}, g[N] = {1, 2, 3, -1, 0.5f, 1};
  tpu_lower_arg_t args[1] = {f32(1, d)};
  const void* data[1] = {x};
  tpu_hlo_type_t t = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 1, d), outs[2] = {t, t};
  double want[N], buf[N], grad[N];
  for (int i = 0; i < N; i++) {
    double z = exp(-fabs((double)x[i]));
    want[i] = fmin(x[i], 0) - log1p(z);
    buf[i] = z;
    grad[i] = g[i] / (1 + exp((double)x[i])); /* d/dx log(sigmoid(x)) = 1 - sigmoid(x) */
  }
  void* r[2];
  CHECK_OK(tpu_test_run_op("aten::log_sigmoid_forward", args, 1, NULL, data, outs, 2, r));
  check_all(r[0], want, N, 1e-6);
  check_all(r[1], buf, N, 1e-6);
  const void* bdata[3] = {g, x, r[1]};
  tpu_lower_arg_t bargs[3] = {f32(1, d), f32(1, d), f32(1, d)};
  void* gr[1];
  CHECK_OK(tpu_test_run_op("aten::log_sigmoid_backward", bargs, 3, NULL, bdata, &t, 1, gr));
  check_all(gr[0], grad, N, 1e-6);
  free(gr[0]);
  free(r[0]);
  free(r[1]);
}

/* glu halves, nearest upsampling 5 -> 8 along the last dim (indices
 * floor(j * 5 / 8)) and its scatter-add backward. */
static void test_glu_and_upsample_nearest(void) {
  int64_t d[2] = {2, 4}, h[2] = {2, 2};
  float x[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  tpu_lower_arg_t args[2] = {f32(2, d), int_arg(1)};
  const void* data[1] = {x};
  tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 2, h);
  double want[4];
  for (int r = 0; r < 2; r++)
    for (int c = 0; c < 2; c++)
      want[r * 2 + c] = x[r * 4 + c] / (1 + exp(-(double)x[r * 4 + c + 2]));
  void* res[1];
  CHECK_OK(tpu_test_run_op("aten::glu", args, 2, NULL, data, &out, 1, res));
  check_all(res[0], want, 4, 1e-6);
  free(res[0]);

  int64_t in[3] = {1, 1, 5}, up[3] = {1, 1, 8}, osz[1] = {8};
  float v[5] = {10, 20, 30, 40, 50}, g[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  tpu_lower_arg_t uargs[3] = {f32(3, in), ints_arg(1, osz), none_arg()};
  const void* udata[1] = {v};
  tpu_hlo_type_t uout = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 3, up);
  double uw[8], gw[5] = {0};
  for (int j = 0; j < 8; j++) {
    int src = (int)floorf((float)j * (5.0f / 8.0f));
    uw[j] = v[src];
    gw[src] += g[j];
  }
  CHECK_OK(tpu_test_run_op("aten::upsample_nearest1d", uargs, 3, NULL, udata, &uout, 1, res));
  check_all(res[0], uw, 8, 0);
  free(res[0]);
  tpu_lower_arg_t bargs[4] = {f32(3, up), ints_arg(1, osz), ints_arg(3, in), none_arg()};
  const void* bdata[1] = {g};
  tpu_hlo_type_t bout = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 3, in);
  CHECK_OK(tpu_test_run_op("aten::upsample_nearest1d_backward", bargs, 4, NULL, bdata, &bout, 1,
                           res));
  check_all(res[0], gw, 5, 0);
  free(res[0]);
}

TPU_TEST_MAIN(TPU_TEST(test_softmax_and_log_softmax), TPU_TEST(test_safe_softmax_zeroes_fully_masked_rows),
              TPU_TEST(test_softmax_half_to_float),
              TPU_TEST(test_layer_norm_forward_backward), TPU_TEST(test_group_norm),
              TPU_TEST(test_batch_norm_functional_training), TPU_TEST(test_batch_norm_backward),
              TPU_TEST(test_embedding_dense_backward), TPU_TEST(test_native_dropout),
              TPU_TEST(test_group_norm_backward),
              TPU_TEST(test_bf16_log_softmax_accumulates_in_f32), TPU_TEST(test_log_sigmoid),
              TPU_TEST(test_glu_and_upsample_nearest))
