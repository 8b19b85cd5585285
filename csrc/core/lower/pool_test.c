/* pool family: each lowering runs on the XLA CPU plugin and is compared with
 * a direct C evaluation of PyTorch's definition (small-integer data, so the
 * float results are exact up to summation order). */
#include <math.h>
#include <stdint.h>

#include "../testing.h"
#include "conv_testing.h"

/* ---- pooling references (PyTorch's CPU loops) ---- */

typedef struct pool_s {
  int64_t B, H, W, OH, OW, k[2], s[2], p[2], d[2];
} pool_t;

static void max_pool_ref(const pool_t* q, const float* x, float* y, int64_t* ind) {
  for (int64_t b = 0; b < q->B; b++)
    for (int64_t oh = 0; oh < q->OH; oh++)
      for (int64_t ow = 0; ow < q->OW; ow++) {
        int64_t h0 = oh * q->s[0] - q->p[0], w0 = ow * q->s[1] - q->p[1];
        while (h0 < 0) h0 += q->d[0];
        while (w0 < 0) w0 += q->d[1];
        int64_t best = h0 * q->W + w0;
        float m = -INFINITY;
        for (int64_t kh = 0; kh < q->k[0]; kh++)
          for (int64_t kw = 0; kw < q->k[1]; kw++) {
            int64_t h = oh * q->s[0] - q->p[0] + kh * q->d[0];
            int64_t w = ow * q->s[1] - q->p[1] + kw * q->d[1];
            if (h < 0 || h >= q->H || w < 0 || w >= q->W) continue;
            float v = x[(b * q->H + h) * q->W + w];
            if (v > m || isnan(v)) m = v, best = h * q->W + w;
          }
        y[(b * q->OH + oh) * q->OW + ow] = m;
        ind[(b * q->OH + oh) * q->OW + ow] = best;
      }
}

/* x [2, 3, 7, 6], kernel (3, 2), stride 2, padding 1, dilation (1, 2),
 * ceil_mode: the output's last column only exists through ceil_mode. */
static void test_max_pool2d_with_indices_and_backward(void) {
  pool_t q = {.B = 6, .H = 7, .W = 6, .OH = 4, .OW = 4, .k = {3, 2}, .s = {2, 2}, .p = {1, 1},
              .d = {1, 2}};
  int64_t xd[4] = {2, 3, 7, 6}, yd[4] = {2, 3, 4, 4}, k[2] = {3, 2}, s[2] = {2, 2}, p = 1,
          d[2] = {1, 2};
  tpu_lower_arg_t args[6] = {f32_arg(4, xd), ints_arg(2, k), ints_arg(2, s), ints_arg(1, &p),
                             ints_arg(2, d), bool_arg(true)};
  float x[252], want[96];
  int64_t want_i[96];
  fill(x, 252, 11);
  x[7] = NAN, x[9] = NAN; /* two NaNs in one window: the later index wins */
  max_pool_ref(&q, x, want, want_i);
  tpu_hlo_type_t outs[2] = {tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 4, yd),
                            tpu_hlo_type_make(TPU_DTYPE_INT64, 4, yd)};
  const void* data[1] = {x};
  void* res[2];
  CHECK_OK(tpu_test_run_op("aten::max_pool2d_with_indices.out", args, 6, NULL, data, outs, 2, res));
  bool ok = close_to(res[0], want, 96) && memcmp(res[1], want_i, sizeof want_i) == 0;
  for (int i = 0; ok && i < 96; i++)
    if (((int64_t*)res[1])[i] != want_i[i])
      fprintf(stderr, "  index %d: got %lld want %lld\n", i, (long long)((int64_t*)res[1])[i],
              (long long)want_i[i]);
  free(res[0]), free(res[1]);
  CHECK(ok);

  /* backward: (grad_output, self, kernel, stride, padding, dilation,
   * ceil_mode, indices). */
  tpu_lower_arg_t bargs[8] = {f32_arg(4, yd), args[0], args[1], args[2], args[3],
                              args[4], args[5], tpu_test_tensor_arg(TPU_DTYPE_INT64, 4, yd)};
  float g[96], gx[252] = {0};
  fill(g, 96, 12);
  for (int i = 0; i < 96; i++) gx[(i / 16) * 42 + want_i[i]] += g[i];
  tpu_hlo_type_t gout = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 4, xd);
  const void* bdata[3] = {g, x, want_i};
  CHECK_OK(tpu_test_run_op("aten::max_pool2d_with_indices_backward.grad_input", bargs, 8, NULL,
                           bdata, &gout, 1, res));
  ok = close_to(res[0], gx, 252);
  free(res[0]);
  CHECK(ok);
}

static void avg_ref(const pool_t* q, bool include_pad, int64_t override, const float* x,
                    float* y, const float* g, float* gx) {
  for (int64_t b = 0; b < q->B; b++)
    for (int64_t oh = 0; oh < q->OH; oh++)
      for (int64_t ow = 0; ow < q->OW; ow++) {
        int64_t h0 = oh * q->s[0] - q->p[0], w0 = ow * q->s[1] - q->p[1];
        int64_t h1 = h0 + q->k[0], w1 = w0 + q->k[1];
        if (h1 > q->H + q->p[0]) h1 = q->H + q->p[0];
        if (w1 > q->W + q->p[1]) w1 = q->W + q->p[1];
        int64_t pool = (h1 - h0) * (w1 - w0);
        if (h0 < 0) h0 = 0;
        if (w0 < 0) w0 = 0;
        if (h1 > q->H) h1 = q->H;
        if (w1 > q->W) w1 = q->W;
        float div = (float)(override ? override : include_pad ? pool : (h1 - h0) * (w1 - w0));
        int64_t o = (b * q->OH + oh) * q->OW + ow;
        float sum = 0;
        for (int64_t h = h0; h < h1; h++)
          for (int64_t w = w0; w < w1; w++) {
            sum += x[(b * q->H + h) * q->W + w];
            gx[(b * q->H + h) * q->W + w] += g[o] / div;
          }
        y[o] = sum / div;
      }
}

/* avg_pool2d on [2, 3, 7, 6], kernel 3, stride 2, padding 1, ceil_mode. */
static void test_avg_pool2d_and_backward(void) {
  pool_t q = {.B = 6, .H = 7, .W = 6, .OH = 4, .OW = 4, .k = {3, 3}, .s = {2, 2}, .p = {1, 1}};
  int64_t xd[4] = {2, 3, 7, 6}, yd[4] = {2, 3, 4, 4}, k = 3, s = 2, p = 1;
  float x[252], g[96];
  fill(x, 252, 13), fill(g, 96, 14);
  for (int mode = 0; mode < 3; mode++) {
    bool include = mode != 0;
    int64_t override = mode == 2 ? 5 : 0;
    tpu_lower_arg_t args[7] = {f32_arg(4, xd), ints_arg(1, &k), ints_arg(1, &s),
                               ints_arg(1, &p), bool_arg(true), bool_arg(include),
                               override ? int_arg(override) : none_arg()};
    float want[96] = {0}, want_gx[252] = {0};
    avg_ref(&q, include, override, x, want, g, want_gx);
    tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 4, yd);
    const void* data[1] = {x};
    void* res[1];
    CHECK_OK(tpu_test_run_op("aten::avg_pool2d.out", args, 7, NULL, data, &out, 1, res));
    bool ok = close_to(res[0], want, 96);
    free(res[0]);
    CHECK(ok);
    tpu_lower_arg_t bargs[8] = {f32_arg(4, yd), args[0], args[1], args[2],
                                args[3], args[4], args[5], args[6]};
    tpu_hlo_type_t gout = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 4, xd);
    const void* bdata[2] = {g, x};
    CHECK_OK(tpu_test_run_op("aten::avg_pool2d_backward.grad_input", bargs, 8, NULL, bdata,
                             &gout, 1, res));
    ok = close_to(res[0], want_gx, 252);
    free(res[0]);
    CHECK(ok);
  }
}

static int64_t a_start(int64_t o, int64_t L, int64_t O) { return o * L / O; }
static int64_t a_end(int64_t o, int64_t L, int64_t O) { return ((o + 1) * L + O - 1) / O; }

/* Adaptive pools on [2, 3, 7, 5] -> (3, 2): overlapping, unequal windows. */
static void test_adaptive_pools(void) {
  int64_t xd[4] = {2, 3, 7, 5}, yd[4] = {2, 3, 3, 2}, osz[2] = {3, 2};
  float x[210], g[36];
  fill(x, 210, 15), fill(g, 36, 16);
  float avg[36], mx[36], gavg[210] = {0}, gmax[210] = {0};
  int64_t ind[36];
  for (int b = 0; b < 6; b++)
    for (int oh = 0; oh < 3; oh++)
      for (int ow = 0; ow < 2; ow++) {
        int64_t h0 = a_start(oh, 7, 3), h1 = a_end(oh, 7, 3);
        int64_t w0 = a_start(ow, 5, 2), w1 = a_end(ow, 5, 2);
        int o = (b * 3 + oh) * 2 + ow;
        float sum = 0, m = -INFINITY;
        int64_t best = h0 * 5 + w0;
        float cnt = (float)((h1 - h0) * (w1 - w0));
        for (int64_t h = h0; h < h1; h++)
          for (int64_t w = w0; w < w1; w++) {
            float v = x[b * 35 + h * 5 + w];
            sum += v;
            if (v > m || isnan(v)) m = v, best = h * 5 + w;
            gavg[b * 35 + h * 5 + w] += g[o] / cnt;
          }
        avg[o] = sum / cnt, mx[o] = m, ind[o] = best;
        gmax[b * 35 + best] += g[o];
      }
  tpu_lower_arg_t args[2] = {f32_arg(4, xd), ints_arg(2, osz)};
  tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 4, yd);
  tpu_hlo_type_t outs[2] = {out, tpu_hlo_type_make(TPU_DTYPE_INT64, 4, yd)};
  tpu_hlo_type_t gout = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 4, xd);
  const void* data[1] = {x};
  void* res[2];
  CHECK_OK(tpu_test_run_op("aten::_adaptive_avg_pool2d", args, 2, NULL, data, &out, 1, res));
  bool ok = close_to(res[0], avg, 36);
  free(res[0]);
  CHECK(ok);
  CHECK_OK(tpu_test_run_op("aten::adaptive_max_pool2d.out", args, 2, NULL, data, outs, 2, res));
  ok = close_to(res[0], mx, 36) && memcmp(res[1], ind, sizeof ind) == 0;
  free(res[0]), free(res[1]);
  CHECK(ok);

  tpu_lower_arg_t bargs[2] = {f32_arg(4, yd), f32_arg(4, xd)};
  const void* bdata[2] = {g, x};
  CHECK_OK(tpu_test_run_op("aten::_adaptive_avg_pool2d_backward", bargs, 2, NULL, bdata, &gout,
                           1, res));
  ok = close_to(res[0], gavg, 210);
  free(res[0]);
  CHECK(ok);
  tpu_lower_arg_t margs[3] = {f32_arg(4, yd), f32_arg(4, xd),
                              tpu_test_tensor_arg(TPU_DTYPE_INT64, 4, yd)};
  const void* mdata[3] = {g, x, ind};
  CHECK_OK(tpu_test_run_op("aten::adaptive_max_pool2d_backward.grad_input", margs, 3, NULL,
                           mdata, &gout, 1, res));
  ok = close_to(res[0], gmax, 210);
  free(res[0]);
  CHECK(ok);
}

/* max_pool3d_with_indices: indices are flat over (D, H, W). */
static void test_max_pool3d_with_indices(void) {
  int64_t xd[5] = {1, 2, 3, 4, 5}, yd[5] = {1, 2, 2, 2, 3}, k = 2, st = 2, p = 1, one = 1;
  tpu_lower_arg_t args[6] = {f32_arg(5, xd), ints_arg(1, &k), ints_arg(1, &st), ints_arg(1, &p),
                             ints_arg(1, &one), bool_arg(false)};
  float x[120], want[24];
  int64_t want_i[24];
  fill(x, 120, 17);
  for (int c = 0; c < 2; c++)
    for (int od = 0; od < 2; od++)
      for (int oh = 0; oh < 2; oh++)
        for (int ow = 0; ow < 3; ow++) {
          float m = -INFINITY;
          int64_t best = -1;
          for (int kd = 0; kd < 2; kd++)
            for (int kh = 0; kh < 2; kh++)
              for (int kw = 0; kw < 2; kw++) {
                int d = od * 2 - 1 + kd, h = oh * 2 - 1 + kh, w = ow * 2 - 1 + kw;
                if (d < 0 || d >= 3 || h < 0 || h >= 4 || w < 0 || w >= 5) continue;
                float v = x[c * 60 + (d * 4 + h) * 5 + w];
                if (best < 0 || v > m) m = v, best = (d * 4 + h) * 5 + w;
              }
          int o = ((c * 2 + od) * 2 + oh) * 3 + ow;
          want[o] = m, want_i[o] = best;
        }
  tpu_hlo_type_t outs[2] = {tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 5, yd),
                            tpu_hlo_type_make(TPU_DTYPE_INT64, 5, yd)};
  const void* data[1] = {x};
  void* res[2];
  CHECK_OK(tpu_test_run_op("aten::max_pool3d_with_indices", args, 6, NULL, data, outs, 2, res));
  bool ok = close_to(res[0], want, 24) && memcmp(res[1], want_i, sizeof want_i) == 0;
  free(res[0]), free(res[1]);
  CHECK(ok);
}

/* avg_pool2d on int64 divides with truncation toward zero. */
static void test_avg_pool2d_int64(void) {
  int64_t xd[4] = {1, 1, 3, 3}, yd[4] = {1, 1, 2, 2}, k = 2, st = 1, p = 0;
  tpu_lower_arg_t args[7] = {tpu_test_tensor_arg(TPU_DTYPE_INT64, 4, xd), ints_arg(1, &k),
                             ints_arg(1, &st), ints_arg(1, &p), bool_arg(false), bool_arg(true),
                             none_arg()};
  int64_t x[9] = {-7, 2, 3, 0, 1, 9, 4, -8, 5};
  tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_INT64, 4, yd);
  const void* data[1] = {x};
  void* res[1];
  CHECK_OK(tpu_test_run_op("aten::avg_pool2d", args, 7, NULL, data, &out, 1, res));
  int64_t* r = res[0];
  CHECK(r[0] == (-7 + 2 + 0 + 1) / 4 && r[1] == (2 + 3 + 1 + 9) / 4 &&
        r[2] == (0 + 1 + 4 - 8) / 4 && r[3] == (1 + 9 - 8 + 5) / 4);
  free(res[0]);
}

/* Empty batches and unsupported dtypes decline (CPU fallback), not fail. */
static void test_declines(void) {
  int64_t xd[4] = {0, 1, 4, 4}, yd[4] = {0, 1, 2, 2}, k = 2;
  tpu_lower_arg_t args[7] = {f32_arg(4, xd), ints_arg(1, &k), ints_arg(0, NULL),
                             ints_arg(1, (int64_t[]){0}), bool_arg(false), bool_arg(true),
                             none_arg()};
  tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 4, yd);
  char* text = NULL;
  size_t len;
  tpu_status_t s = tpu_lower_program_plain("aten::avg_pool2d", args, 7, NULL, &out, 1, &text, &len);
  CHECK(s != NULL && tpu_status_code(s) == TPU_STATUS_UNIMPLEMENTED);
  tpu_status_free(s);
  xd[0] = yd[0] = 1;
  args[0] = tpu_test_tensor_arg(TPU_DTYPE_INT32, 4, xd);
  out = tpu_hlo_type_make(TPU_DTYPE_INT32, 4, yd);
  s = tpu_lower_program_plain("aten::avg_pool2d", args, 7, NULL, &out, 1, &text, &len);
  CHECK(s != NULL && tpu_status_code(s) == TPU_STATUS_UNIMPLEMENTED);
  tpu_status_free(s);
}

TPU_TEST_MAIN(TPU_TEST(test_max_pool2d_with_indices_and_backward),
              TPU_TEST(test_avg_pool2d_and_backward), TPU_TEST(test_adaptive_pools),
              TPU_TEST(test_max_pool3d_with_indices), TPU_TEST(test_avg_pool2d_int64),
              TPU_TEST(test_declines))
