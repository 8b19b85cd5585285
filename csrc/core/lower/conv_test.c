/* conv family (convolution, im2col / col2im): each lowering runs on the
 * XLA CPU plugin and is compared with a direct C evaluation of PyTorch's
 * definition (small-integer data, so the float results are exact up to
 * summation order). */
#include <math.h>
#include <stdint.h>

#include "../testing.h"
#include "conv_testing.h"

/* The relation every convolution is made of: a "big" tensor [N, G*Bg, big]
 * and a "small" one [N, G*Sg, small] are linked through w [G*Sg, Bg, k] at
 * big = small*s - p + k*d. Regular conv: big = input, small = output;
 * transposed: the reverse. 1-D cases use a trivial first spatial dim. */
typedef struct rel_s {
  int64_t N, G, Sg, Bg, small[2], big[2], k[2], s[2], p[2], d[2];
} rel_t;

enum { TO_SMALL, TO_BIG, TO_WEIGHT };

static void conv_ref(const rel_t* r, int mode, float* small, float* big, float* w) {
  for (int64_t n = 0; n < r->N; n++)
    for (int64_t g = 0; g < r->G; g++)
      for (int64_t a = 0; a < r->Sg; a++)
        for (int64_t bl = 0; bl < r->Bg; bl++)
          for (int64_t sy = 0; sy < r->small[0]; sy++)
            for (int64_t sx = 0; sx < r->small[1]; sx++)
              for (int64_t ky = 0; ky < r->k[0]; ky++)
                for (int64_t kx = 0; kx < r->k[1]; kx++) {
                  int64_t by = sy * r->s[0] - r->p[0] + ky * r->d[0];
                  int64_t bx = sx * r->s[1] - r->p[1] + kx * r->d[1];
                  if (by < 0 || by >= r->big[0] || bx < 0 || bx >= r->big[1]) continue;
                  int64_t sc = g * r->Sg + a, bc = g * r->Bg + bl;
                  int64_t si = ((n * r->G * r->Sg + sc) * r->small[0] + sy) * r->small[1] + sx;
                  int64_t bi = ((n * r->G * r->Bg + bc) * r->big[0] + by) * r->big[1] + bx;
                  int64_t wi = ((sc * r->Bg + bl) * r->k[0] + ky) * r->k[1] + kx;
                  if (mode == TO_SMALL) small[si] += big[bi] * w[wi];
                  else if (mode == TO_BIG) big[bi] += small[si] * w[wi];
                  else w[wi] += small[si] * big[bi];
                }
}

/* conv2d: groups 2, stride (2,1), padding (1,0), dilation (1,2), bias; the
 * input's last row is not covered by any window. */
static const int64_t kX2[4] = {2, 4, 8, 6}, kW2[4] = {6, 2, 3, 2}, kY2[4] = {2, 6, 4, 4};
static const rel_t kRel2 = {.N = 2, .G = 2, .Sg = 3, .Bg = 2, .small = {4, 4}, .big = {8, 6},
                            .k = {3, 2}, .s = {2, 1}, .p = {1, 0}, .d = {1, 2}};

static void conv2d_args(tpu_lower_arg_t* args, bool bias) {
  int64_t st[2] = {2, 1}, pd[2] = {1, 0}, dl[2] = {1, 2}, op[2] = {0, 0}, six = 6;
  args[0] = f32_arg(4, kX2);
  args[1] = f32_arg(4, kW2);
  args[2] = bias ? f32_arg(1, &six) : none_arg();
  args[3] = ints_arg(2, st);
  args[4] = ints_arg(2, pd);
  args[5] = ints_arg(2, dl);
  args[6] = bool_arg(false);
  args[7] = ints_arg(2, op);
  args[8] = int_arg(2);
}

static void test_conv2d_forward(void) {
  tpu_lower_arg_t args[9];
  conv2d_args(args, true);
  float x[2 * 4 * 8 * 6], w[6 * 2 * 3 * 2], bias[6], want[2 * 6 * 4 * 4] = {0};
  fill(x, 384, 1), fill(w, 72, 2), fill(bias, 6, 3);
  conv_ref(&kRel2, TO_SMALL, want, x, w);
  for (int i = 0; i < 192; i++) want[i] += bias[(i / 16) % 6];
  tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 4, kY2);
  const void* data[3] = {x, w, bias};
  void* res[1];
  /* Every name PyTorch may route a convolution through shares the row. */
  const char* names[3] = {"aten::convolution", "aten::convolution_overrideable",
                          "aten::_convolution"};
  for (int k = 0; k < 3; k++) {
    CHECK_OK(tpu_test_run_op(names[k], args, 9, NULL, data, &out, 1, res));
    bool ok = close_to(res[0], want, 192);
    free(res[0]);
    CHECK(ok);
  }
}

/* convolution_backward(grad_output, input, weight, bias_sizes, stride,
 * padding, dilation, transposed, output_padding, groups, output_mask) of
 * the 2-d case, and its three output types. */
static void conv2d_backward_args(tpu_lower_arg_t args[11], const int64_t mask[3],
                                 tpu_hlo_type_t outs[3]) {
  static const int64_t bias_sizes = 6;
  tpu_lower_arg_t fargs[9];
  conv2d_args(fargs, false);
  args[0] = f32_arg(4, kY2);
  args[1] = fargs[0];
  args[2] = fargs[1];
  args[3] = ints_arg(1, &bias_sizes);
  for (int i = 3; i < 9; i++) args[i + 1] = fargs[i];
  args[10] = ints_arg(3, mask);
  outs[0] = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 4, kX2);
  outs[1] = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 4, kW2);
  outs[2] = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 1, &bias_sizes);
}

static void test_conv2d_backward(void) {
  tpu_lower_arg_t args[11];
  tpu_hlo_type_t outs[3];
  const int64_t mask[3] = {1, 1, 1};
  conv2d_backward_args(args, mask, outs);
  float g[192], x[384], w[72];
  float want_x[384] = {0}, want_w[72] = {0}, want_b[6] = {0};
  fill(g, 192, 4), fill(x, 384, 5), fill(w, 72, 6);
  conv_ref(&kRel2, TO_BIG, g, want_x, w);
  conv_ref(&kRel2, TO_WEIGHT, g, x, want_w);
  for (int i = 0; i < 192; i++) want_b[(i / 16) % 6] += g[i];
  const void* data[3] = {g, x, w};
  void* res[3];
  CHECK_OK(tpu_test_run_op("aten::convolution_backward", args, 11, NULL, data, outs, 3, res));
  bool ok = close_to(res[0], want_x, 384) && close_to(res[1], want_w, 72) &&
            close_to(res[2], want_b, 6);
  for (int i = 0; i < 3; i++) free(res[i]);
  CHECK(ok);
}

/* conv_transpose1d: x [2, 4, 5], w [4, 3, k], groups 2 -> [2, 6, L]. */
static void transposed_case(int64_t k, int64_t pad, int64_t out_pad, int64_t L) {
  int64_t xd[3] = {2, 4, 5}, wd[3] = {4, 3, k}, yd[3] = {2, 6, L};
  int64_t st = 2, pd = pad, dl = 1, op = out_pad;
  rel_t rel = {.N = 2, .G = 2, .Sg = 2, .Bg = 3, .small = {1, 5}, .big = {1, L}, .k = {1, k},
               .s = {1, 2}, .p = {0, pad}, .d = {1, 1}};
  tpu_lower_arg_t args[9] = {f32_arg(3, xd), f32_arg(3, wd), none_arg(), ints_arg(1, &st),
                             ints_arg(1, &pd), ints_arg(1, &dl), bool_arg(true),
                             ints_arg(1, &op), int_arg(2)};
  float x[40], w[64], y[128] = {0};
  fill(x, 40, 7), fill(w, 12 * k, 8);
  conv_ref(&rel, TO_BIG, x, y, w);
  tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 3, yd);
  const void* data[2] = {x, w};
  void* res[1];
  CHECK_OK(tpu_test_run_op("aten::convolution_overrideable", args, 9, NULL, data, &out, 1, res));
  bool ok = close_to(res[0], y, 12 * L);
  free(res[0]);
  CHECK(ok);

  /* Backward (the overrideable schema has no bias_sizes). */
  int64_t mask[3] = {1, 1, 1};
  tpu_lower_arg_t bargs[10] = {f32_arg(3, yd), args[0], args[1], args[3], args[4],
                               args[5], args[6], args[7], args[8], ints_arg(3, mask)};
  float g[128], gx[40] = {0}, gw[64] = {0}, gb[6] = {0};
  fill(g, 12 * L, 9);
  conv_ref(&rel, TO_SMALL, gx, g, w);
  conv_ref(&rel, TO_WEIGHT, x, g, gw);
  for (int i = 0; i < 12 * L; i++) gb[(i / L) % 6] += g[i];
  int64_t six = 6;
  tpu_hlo_type_t outs[3] = {tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 3, xd),
                            tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 3, wd),
                            tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 1, &six)};
  const void* bdata[3] = {g, x, w};
  void* bres[3];
  CHECK_OK(tpu_test_run_op("aten::convolution_backward_overrideable", bargs, 10, NULL, bdata,
                           outs, 3, bres));
  ok = close_to(bres[0], gx, 40) && close_to(bres[1], gw, 12 * k) && close_to(bres[2], gb, 6);
  for (int i = 0; i < 3; i++) free(bres[i]);
  CHECK(ok);
}

static void test_conv_transpose1d(void) {
  transposed_case(3, 1, 1, 10);
  /* padding past the kernel's reach: negative edge padding internally. */
  transposed_case(2, 2, 0, 6);
}

static void test_backward_output_mask(void) {
  tpu_lower_arg_t args[11];
  tpu_hlo_type_t outs[3];
  const int64_t mask[3] = {0, 1, 0};
  conv2d_backward_args(args, mask, outs);
  float g[192], x[384], w[72], want_w[72] = {0};
  fill(g, 192, 4), fill(x, 384, 5), fill(w, 72, 6);
  conv_ref(&kRel2, TO_WEIGHT, g, x, want_w);
  const void* data[3] = {g, x, w};
  void* res[3];
  CHECK_OK(tpu_test_run_op("aten::convolution_backward", args, 11, NULL, data, outs, 3, res));
  bool ok = close_to(res[1], want_w, 72);
  for (int i = 0; i < 3; i++) free(res[i]);
  CHECK(ok);
  /* An engine that drops the undefined outputs: the only output is grad_weight. */
  CHECK_OK(tpu_test_run_op("aten::convolution_backward", args, 11, NULL, data, &outs[1], 1, res));
  ok = close_to(res[0], want_w, 72);
  free(res[0]);
  CHECK(ok);
  /* ... and passes bool[] opaquely: the mask follows from the output shapes
   * (grad_weight and grad_bias here). */
  args[10] = (tpu_lower_arg_t){.kind = TPU_ARG_OTHER};
  float want_b[6] = {0};
  for (int i = 0; i < 192; i++) want_b[(i / 16) % 6] += g[i];
  CHECK_OK(tpu_test_run_op("aten::convolution_backward", args, 11, NULL, data, &outs[1], 2, res));
  ok = close_to(res[0], want_w, 72) && close_to(res[1], want_b, 6);
  free(res[0]), free(res[1]);
  CHECK(ok);
}

/* bfloat16 operands: computed in float32, one rounding. Small integers keep
 * every value exact, so the result must match bit for bit. */
static void test_conv2d_bfloat16(void) {
  tpu_lower_arg_t args[9];
  conv2d_args(args, true);
  int64_t six = 6;
  args[0] = tpu_test_tensor_arg(TPU_DTYPE_BFLOAT16, 4, kX2);
  args[1] = tpu_test_tensor_arg(TPU_DTYPE_BFLOAT16, 4, kW2);
  args[2] = tpu_test_tensor_arg(TPU_DTYPE_BFLOAT16, 1, &six);
  float x[384], w[72], bias[6], want[192] = {0};
  fill(x, 384, 1), fill(w, 72, 2), fill(bias, 6, 3);
  conv_ref(&kRel2, TO_SMALL, want, x, w);
  uint16_t xb[384], wb[72], bb[6];
  for (int i = 0; i < 384; i++) xb[i] = to_bf16(x[i]);
  for (int i = 0; i < 72; i++) wb[i] = to_bf16(w[i]);
  for (int i = 0; i < 6; i++) bb[i] = to_bf16(bias[i]);
  tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_BFLOAT16, 4, kY2);
  const void* data[3] = {xb, wb, bb};
  void* res[1];
  CHECK_OK(tpu_test_run_op("aten::convolution", args, 9, NULL, data, &out, 1, res));
  bool ok = true;
  for (int i = 0; i < 192; i++) ok &= ((uint16_t*)res[0])[i] == to_bf16(want[i] + bias[(i / 16) % 6]);
  free(res[0]);
  CHECK(ok);
}

/* im2col: [1, 2, 3, 3], kernel 2, padding 1, stride 2 -> [1, 8, 4]; col2im
 * of all ones counts how many blocks cover each pixel. */
static void test_im2col_col2im(void) {
  int64_t xd[4] = {1, 2, 3, 3}, cd[3] = {1, 8, 4}, k = 2, one = 1, p = 1, s = 2, size[2] = {3, 3};
  tpu_lower_arg_t args[5] = {f32_arg(4, xd), ints_arg(1, &k), ints_arg(1, &one), ints_arg(1, &p),
                             ints_arg(1, &s)};
  float x[18];
  for (int i = 0; i < 18; i++) x[i] = (float)(i + 1);
  tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 3, cd);
  const void* data[1] = {x};
  void* res[1];
  CHECK_OK(tpu_test_run_op("aten::im2col", args, 5, NULL, data, &out, 1, res));
  float* r = res[0];
  bool ok = true;
  for (int c = 0; c < 2; c++)
    for (int i = 0; i < 2; i++)
      for (int j = 0; j < 2; j++)
        for (int l = 0; l < 4; l++) {
          int h = (l / 2) * 2 - 1 + i, w = (l % 2) * 2 - 1 + j;
          float want = h < 0 || h >= 3 || w < 0 || w >= 3 ? 0 : x[c * 9 + h * 3 + w];
          ok &= r[((c * 4) + i * 2 + j) * 4 + l] == want;
        }
  free(res[0]);
  CHECK(ok);
  tpu_lower_arg_t bargs[6] = {f32_arg(3, cd), ints_arg(2, size), ints_arg(1, &k),
                              ints_arg(1, &one), ints_arg(1, &p), ints_arg(1, &s)};
  float ones[32];
  for (int i = 0; i < 32; i++) ones[i] = 1;
  tpu_hlo_type_t img = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 4, xd);
  const void* bdata[1] = {ones};
  CHECK_OK(tpu_test_run_op("aten::col2im", bargs, 6, NULL, bdata, &img, 1, res));
  r = res[0];
  /* stride 2 with kernel 2: every pixel is in exactly one block. */
  ok = true;
  for (int i = 0; i < 18; i++) ok &= r[i] == 1;
  free(res[0]);
  CHECK(ok);
}

TPU_TEST_MAIN(TPU_TEST(test_conv2d_forward), TPU_TEST(test_conv2d_backward),
              TPU_TEST(test_conv_transpose1d), TPU_TEST(test_backward_output_mask),
              TPU_TEST(test_conv2d_bfloat16), TPU_TEST(test_im2col_col2im))
