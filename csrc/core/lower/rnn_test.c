/* rnn family: the fused LSTM / GRU cells run on the XLA CPU plugin against
 * a double-precision reference of the same cell, and their backward ops
 * against central differences of that reference (so a wrong derivative
 * cannot agree with a wrong forward). */
#include <math.h>
#include <string.h>

#include "../testing.h"
#include "lower_testing.h"

enum { B = 3, H = 4 };

static tpu_lower_arg_t f32(int64_t rows, int64_t cols) {
  int64_t d[2] = {rows, cols};
  return tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, cols ? 2 : 1, cols ? d : &rows);
}
static tpu_hlo_type_t f32_type(int64_t rows, int64_t cols) {
  int64_t d[2] = {rows, cols};
  return cols ? tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 2, d)
              : tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 1, &rows);
}

static void fill(float* x, int n, unsigned seed) {
  for (int i = 0; i < n; i++) {
    seed = seed * 1103515245u + 12345u;
    x[i] = (float)((seed >> 8) % 4001) / 1000.0f - 2.0f;
  }
}

static int check_close(const float* got, const double* want, int n, double tol, const char* what) {
  for (int i = 0; i < n; i++)
    if (!(fabs(got[i] - want[i]) <= tol * (1 + fabs(want[i])))) {
      fprintf(stderr, "  %s element %d: got %.8g want %.8g\n", what, i, got[i], want[i]);
      return 0;
    }
  return 1;
}

static double sig(double x) { return 1 / (1 + exp(-x)); }

/* ---- LSTM ---- */

/* Reference cell on double inputs (biases may be NULL). */
static void lstm_ref(const double* ig, const double* hg, const double* cx, const double* bi,
                     const double* bh, double* hy, double* cy, double* ws) {
  for (int r = 0; r < B; r++)
    for (int j = 0; j < H; j++) {
      double a[4];
      for (int k = 0; k < 4; k++) {
        int c = k * H + j;
        a[k] = ig[r * 4 * H + c] + hg[r * 4 * H + c] + (bi ? bi[c] : 0) + (bh ? bh[c] : 0);
        a[k] = k == 2 ? tanh(a[k]) : sig(a[k]);
        if (ws) ws[r * 4 * H + k * H + j] = a[k];
      }
      double c = a[1] * cx[r * H + j] + a[0] * a[2];
      cy[r * H + j] = c;
      hy[r * H + j] = a[3] * tanh(c);
    }
}

/* sum(ghy * hy + gcy * cy) of the reference. */
static double lstm_loss(const double* ig, const double* hg, const double* cx, const double* ghy,
                        const double* gcy) {
  double hy[B * H], cy[B * H], s = 0;
  lstm_ref(ig, hg, cx, NULL, NULL, hy, cy, NULL);
  for (int i = 0; i < B * H; i++) s += (ghy ? ghy[i] * hy[i] : 0) + (gcy ? gcy[i] * cy[i] : 0);
  return s;
}

static void to_double(const float* x, double* y, int n) {
  for (int i = 0; i < n; i++) y[i] = x[i];
}

/* Central difference of `loss` in element i of v. */
#define FD(v, i, expr)                    \
  ({                                      \
    double saved_ = (v)[i], eps_ = 1e-5;  \
    (v)[i] = saved_ + eps_;               \
    double up_ = (expr);                  \
    (v)[i] = saved_ - eps_;               \
    double down_ = (expr);                \
    (v)[i] = saved_;                      \
    (up_ - down_) / (2 * eps_);           \
  })

static void test_lstm_cell_forward(void) {
  for (int bias = 0; bias < 2; bias++) {
    float ig[B * 4 * H], hg[B * 4 * H], cx[B * H], bi[4 * H], bh[4 * H];
    fill(ig, B * 4 * H, 1), fill(hg, B * 4 * H, 2), fill(cx, B * H, 3);
    fill(bi, 4 * H, 4), fill(bh, 4 * H, 5);
    double dig[B * 4 * H], dhg[B * 4 * H], dcx[B * H], dbi[4 * H], dbh[4 * H];
    to_double(ig, dig, B * 4 * H), to_double(hg, dhg, B * 4 * H), to_double(cx, dcx, B * H);
    to_double(bi, dbi, 4 * H), to_double(bh, dbh, 4 * H);
    double hy[B * H], cy[B * H], ws[B * 4 * H];
    lstm_ref(dig, dhg, dcx, bias ? dbi : NULL, bias ? dbh : NULL, hy, cy, ws);
    tpu_lower_arg_t args[5] = {f32(B, 4 * H), f32(B, 4 * H), f32(B, H),
                               bias ? f32(4 * H, 0) : none_arg(), bias ? f32(4 * H, 0) : none_arg()};
    const void* data[5] = {ig, hg, cx, bi, bh};
    tpu_hlo_type_t outs[3] = {f32_type(B, H), f32_type(B, H), f32_type(B, 4 * H)};
    void* r[3];
    CHECK_OK(tpu_test_run_op("aten::_thnn_fused_lstm_cell", args, 5, NULL, data, outs, 3, r));
    int ok = check_close(r[0], hy, B * H, 1e-5, "hy") && check_close(r[1], cy, B * H, 1e-5, "cy") &&
             check_close(r[2], ws, B * 4 * H, 1e-5, "workspace");
    for (int i = 0; i < 3; i++) free(r[i]);
    CHECK(ok);
  }
}

/* Backward from the forward's own workspace; `which` = 0: both grads,
 * 1: grad_hy only, 2: grad_cy only. has_bias adds grad_bias. */
static void run_lstm_backward(int which, bool has_bias) {
  float ig[B * 4 * H], hg[B * 4 * H], cx[B * H], ghy[B * H], gcy[B * H];
  fill(ig, B * 4 * H, 11), fill(hg, B * 4 * H, 12), fill(cx, B * H, 13);
  fill(ghy, B * H, 14), fill(gcy, B * H, 15);
  double dig[B * 4 * H], dhg[B * 4 * H], dcx[B * H], dghy[B * H], dgcy[B * H];
  to_double(ig, dig, B * 4 * H), to_double(hg, dhg, B * 4 * H), to_double(cx, dcx, B * H);
  to_double(ghy, dghy, B * H), to_double(gcy, dgcy, B * H);
  double hy[B * H], cy[B * H], ws[B * 4 * H];
  lstm_ref(dig, dhg, dcx, NULL, NULL, hy, cy, ws);
  float fcy[B * H], fws[B * 4 * H];
  for (int i = 0; i < B * H; i++) fcy[i] = (float)cy[i];
  for (int i = 0; i < B * 4 * H; i++) fws[i] = (float)ws[i];
  const double* use_ghy = which == 2 ? NULL : dghy;
  const double* use_gcy = which == 1 ? NULL : dgcy;

  double want_gates[B * 4 * H], want_cx[B * H], want_bias[4 * H] = {0};
  for (int i = 0; i < B * 4 * H; i++) {
    want_gates[i] = FD(dig, i, lstm_loss(dig, dhg, dcx, use_ghy, use_gcy));
    want_bias[i % (4 * H)] += want_gates[i];
  }
  for (int i = 0; i < B * H; i++) want_cx[i] = FD(dcx, i, lstm_loss(dig, dhg, dcx, use_ghy, use_gcy));

  /* Parameters: the present tensors in arg order. */
  tpu_lower_arg_t args[6] = {which == 2 ? none_arg() : f32(B, H), which == 1 ? none_arg() : f32(B, H),
                             f32(B, H), f32(B, H), f32(B, 4 * H), bool_arg(has_bias)};
  const void* data[5];
  int n = 0;
  if (which != 2) data[n++] = ghy;
  if (which != 1) data[n++] = gcy;
  data[n++] = cx, data[n++] = fcy, data[n++] = fws;
  tpu_hlo_type_t outs[3] = {f32_type(B, 4 * H), f32_type(B, H), f32_type(4 * H, 0)};
  int nouts = has_bias ? 3 : 2;
  void* r[3] = {0};
  CHECK_OK(tpu_test_run_op("aten::_thnn_fused_lstm_cell_backward_impl", args, 6, NULL, data, outs,
                           nouts, r));
  int ok = check_close(r[0], want_gates, B * 4 * H, 1e-4, "grad_gates") &&
           check_close(r[1], want_cx, B * H, 1e-4, "grad_cx") &&
           (!has_bias || check_close(r[2], want_bias, 4 * H, 1e-4, "grad_bias"));
  for (int i = 0; i < nouts; i++) free(r[i]);
  CHECK(ok);
}

static void test_lstm_cell_backward(void) {
  run_lstm_backward(0, true);
  run_lstm_backward(0, false);
  run_lstm_backward(1, true);
  run_lstm_backward(2, false);
}

/* ---- GRU ---- */

static void gru_ref(const double* ig, const double* hg, const double* hx, const double* bi,
                    const double* bh, double* hy, double* ws) {
  for (int r = 0; r < B; r++)
    for (int j = 0; j < H; j++) {
      double i3[3], h3[3];
      for (int k = 0; k < 3; k++) {
        int c = k * H + j;
        i3[k] = ig[r * 3 * H + c] + (bi ? bi[c] : 0);
        h3[k] = hg[r * 3 * H + c] + (bh ? bh[c] : 0);
      }
      double rg = sig(i3[0] + h3[0]), zg = sig(i3[1] + h3[1]);
      double ng = tanh(i3[2] + rg * h3[2]), h = hx[r * H + j];
      hy[r * H + j] = ng + zg * (h - ng);
      if (ws) {
        double w[5] = {rg, zg, ng, h, h3[2]};
        for (int k = 0; k < 5; k++) ws[r * 5 * H + k * H + j] = w[k];
      }
    }
}

static double gru_loss(const double* ig, const double* hg, const double* hx, const double* g) {
  double hy[B * H], s = 0;
  gru_ref(ig, hg, hx, NULL, NULL, hy, NULL);
  for (int i = 0; i < B * H; i++) s += g[i] * hy[i];
  return s;
}

static void test_gru_cell_forward(void) {
  for (int bias = 0; bias < 2; bias++) {
    float ig[B * 3 * H], hg[B * 3 * H], hx[B * H], bi[3 * H], bh[3 * H];
    fill(ig, B * 3 * H, 21), fill(hg, B * 3 * H, 22), fill(hx, B * H, 23);
    fill(bi, 3 * H, 24), fill(bh, 3 * H, 25);
    double dig[B * 3 * H], dhg[B * 3 * H], dhx[B * H], dbi[3 * H], dbh[3 * H];
    to_double(ig, dig, B * 3 * H), to_double(hg, dhg, B * 3 * H), to_double(hx, dhx, B * H);
    to_double(bi, dbi, 3 * H), to_double(bh, dbh, 3 * H);
    double hy[B * H], ws[B * 5 * H];
    gru_ref(dig, dhg, dhx, bias ? dbi : NULL, bias ? dbh : NULL, hy, ws);
    tpu_lower_arg_t args[5] = {f32(B, 3 * H), f32(B, 3 * H), f32(B, H),
                               bias ? f32(3 * H, 0) : none_arg(), bias ? f32(3 * H, 0) : none_arg()};
    const void* data[5] = {ig, hg, hx, bi, bh};
    tpu_hlo_type_t outs[2] = {f32_type(B, H), f32_type(B, 5 * H)};
    void* r[2];
    CHECK_OK(tpu_test_run_op("aten::_thnn_fused_gru_cell", args, 5, NULL, data, outs, 2, r));
    int ok = check_close(r[0], hy, B * H, 1e-5, "hy") &&
             check_close(r[1], ws, B * 5 * H, 1e-5, "workspace");
    free(r[0]), free(r[1]);
    CHECK(ok);
  }
}

static void run_gru_backward(bool has_bias) {
  float ig[B * 3 * H], hg[B * 3 * H], hx[B * H], g[B * H];
  fill(ig, B * 3 * H, 31), fill(hg, B * 3 * H, 32), fill(hx, B * H, 33), fill(g, B * H, 34);
  double dig[B * 3 * H], dhg[B * 3 * H], dhx[B * H], dg[B * H];
  to_double(ig, dig, B * 3 * H), to_double(hg, dhg, B * 3 * H), to_double(hx, dhx, B * H);
  to_double(g, dg, B * H);
  double hy[B * H], ws[B * 5 * H];
  gru_ref(dig, dhg, dhx, NULL, NULL, hy, ws);
  float fws[B * 5 * H];
  for (int i = 0; i < B * 5 * H; i++) fws[i] = (float)ws[i];
  double want_i[B * 3 * H], want_h[B * 3 * H], want_hx[B * H];
  double want_bi[3 * H] = {0}, want_bh[3 * H] = {0};
  for (int i = 0; i < B * 3 * H; i++) {
    want_i[i] = FD(dig, i, gru_loss(dig, dhg, dhx, dg));
    want_h[i] = FD(dhg, i, gru_loss(dig, dhg, dhx, dg));
    want_bi[i % (3 * H)] += want_i[i];
    want_bh[i % (3 * H)] += want_h[i];
  }
  for (int i = 0; i < B * H; i++) want_hx[i] = FD(dhx, i, gru_loss(dig, dhg, dhx, dg));
  tpu_lower_arg_t args[3] = {f32(B, H), f32(B, 5 * H), bool_arg(has_bias)};
  const void* data[2] = {g, fws};
  tpu_hlo_type_t outs[5] = {f32_type(B, 3 * H), f32_type(B, 3 * H), f32_type(B, H),
                            f32_type(3 * H, 0), f32_type(3 * H, 0)};
  int nouts = has_bias ? 5 : 3;
  void* r[5] = {0};
  CHECK_OK(tpu_test_run_op("aten::_thnn_fused_gru_cell_backward", args, 3, NULL, data, outs, nouts,
                           r));
  int ok = check_close(r[0], want_i, B * 3 * H, 1e-4, "grad_input_gates") &&
           check_close(r[1], want_h, B * 3 * H, 1e-4, "grad_hidden_gates") &&
           check_close(r[2], want_hx, B * H, 1e-4, "grad_hx") &&
           (!has_bias || (check_close(r[3], want_bi, 3 * H, 1e-4, "grad_input_bias") &&
                          check_close(r[4], want_bh, 3 * H, 1e-4, "grad_hidden_bias")));
  for (int i = 0; i < nouts; i++) free(r[i]);
  CHECK(ok);
}

static void test_gru_cell_backward(void) {
  run_gru_backward(true);
  run_gru_backward(false);
}

/* bfloat16 gates compute in float32: the result is the float32 one
 * rounded once. */
static void test_lstm_cell_bf16(void) {
  int64_t gd[2] = {1, 4}, sd[2] = {1, 1};
  uint16_t ig[4] = {0x3f80, 0xbf80, 0x4000, 0x3f00}; /* 1 -1 2 0.5 */
  uint16_t hg[4] = {0, 0, 0, 0}, cx[1] = {0x3f80};   /* cx = 1 */
  tpu_lower_arg_t args[5] = {tpu_test_tensor_arg(TPU_DTYPE_BFLOAT16, 2, gd),
                             tpu_test_tensor_arg(TPU_DTYPE_BFLOAT16, 2, gd),
                             tpu_test_tensor_arg(TPU_DTYPE_BFLOAT16, 2, sd), none_arg(), none_arg()};
  const void* data[3] = {ig, hg, cx};
  tpu_hlo_type_t outs[3] = {tpu_hlo_type_make(TPU_DTYPE_BFLOAT16, 2, sd),
                            tpu_hlo_type_make(TPU_DTYPE_BFLOAT16, 2, sd),
                            tpu_hlo_type_make(TPU_DTYPE_BFLOAT16, 2, gd)};
  void* r[3];
  CHECK_OK(tpu_test_run_op("aten::_thnn_fused_lstm_cell", args, 5, NULL, data, outs, 3, r));
  double c = sig(-1) * 1 + sig(1) * tanh(2), h = sig(0.5) * tanh(c);
  uint16_t hb = ((uint16_t*)r[0])[0], cb = ((uint16_t*)r[1])[0];
  uint32_t hbits = (uint32_t)hb << 16, cbits = (uint32_t)cb << 16;
  float hf, cf;
  memcpy(&hf, &hbits, 4), memcpy(&cf, &cbits, 4);
  for (int i = 0; i < 3; i++) free(r[i]);
  CHECK(fabs(hf - h) < 4e-3 && fabs(cf - c) < 8e-3);
}

TPU_TEST_MAIN(TPU_TEST(test_lstm_cell_forward), TPU_TEST(test_lstm_cell_backward),
              TPU_TEST(test_gru_cell_forward), TPU_TEST(test_gru_cell_backward),
              TPU_TEST(test_lstm_cell_bf16))
