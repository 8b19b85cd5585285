#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../testing.h"
#include "emit.h"
#include "lower_testing.h"

/* Two float32 lists: element 0 is [2,3], element 1 is [4]. */
static const int64_t kD0[2] = {2, 3}, kD1[1] = {4};

static tpu_lower_arg_t list_arg(int n) {
  return (tpu_lower_arg_t){.kind = TPU_ARG_TENSORS, .num_tensors = n};
}

static void types2(tpu_hlo_type_t* t, tpu_dtype_t d) {
  t[0] = tpu_hlo_type_make(d, 2, kD0);
  t[1] = tpu_hlo_type_make(d, 1, kD1);
}

static void test_add_list_with_alpha(void) {
  tpu_lower_arg_t args[3] = {list_arg(2), list_arg(2), tpu_test_scalar_arg(TPU_DTYPE_FLOAT64, true)};
  tpu_hlo_type_t lt[4], outs[2];
  types2(lt, TPU_DTYPE_FLOAT32);
  types2(lt + 2, TPU_DTYPE_FLOAT32);
  types2(outs, TPU_DTYPE_FLOAT32);
  float a0[6] = {1, 2, 3, 4, 5, 6}, a1[4] = {-1, -2, -3, -4};
  float b0[6] = {10, 20, 30, 40, 50, 60}, b1[4] = {1, 1, 1, 1};
  double alpha = -0.5;
  const void* data[5] = {a0, a1, b0, b1, &alpha};
  void* r[2];
  CHECK_OK(tpu_test_run_op("aten::_foreach_add_.List", args, 3, lt, data, outs, 2, r));
  for (int i = 0; i < 6; i++) CHECK(((float*)r[0])[i] == a0[i] - 0.5f * b0[i]);
  for (int i = 0; i < 4; i++) CHECK(((float*)r[1])[i] == a1[i] - 0.5f);
  free(r[0]);
  free(r[1]);
}

static void test_out_list_is_not_alpha(void) {
  /* _foreach_mul.Scalar_out(self, scalar, out): the out list is last. */
  tpu_lower_arg_t args[3] = {list_arg(2), tpu_test_scalar_arg(TPU_DTYPE_FLOAT64, true),
                             list_arg(2)};
  tpu_hlo_type_t lt[4], outs[2];
  types2(lt, TPU_DTYPE_FLOAT32);
  types2(lt + 2, TPU_DTYPE_FLOAT32);
  types2(outs, TPU_DTYPE_FLOAT32);
  float a0[6] = {1, 2, 3, 4, 5, 6}, a1[4] = {-1, -2, -3, -4}, o0[6] = {0}, o1[4] = {0};
  double s = 3;
  const void* data[5] = {a0, a1, o0, o1, &s};
  void* r[2];
  CHECK_OK(tpu_test_run_op("aten::_foreach_mul.Scalar_out", args, 3, lt, data, outs, 2, r));
  for (int i = 0; i < 6; i++) CHECK(((float*)r[0])[i] == 3 * a0[i]);
  for (int i = 0; i < 4; i++) CHECK(((float*)r[1])[i] == 3 * a1[i]);
  free(r[0]);
  free(r[1]);
}

static void test_addcdiv_scalar_list_and_tensor(void) {
  /* Scalar[] as SCALARS (one f64 runtime argument); Tensor scalars as rank 1. */
  int64_t two = 2;
  tpu_lower_arg_t sl = {.kind = TPU_ARG_SCALARS, .num_tensors = 2};
  sl.type = tpu_hlo_type_make(TPU_DTYPE_FLOAT64, 1, &two);
  tpu_hlo_type_t lt[6], outs[2];
  for (int j = 0; j < 3; j++) types2(lt + 2 * j, TPU_DTYPE_FLOAT32);
  types2(outs, TPU_DTYPE_FLOAT32);
  float a0[6] = {1, 2, 3, 4, 5, 6}, a1[4] = {-1, -2, -3, -4};
  float t0[6] = {1, 1, 1, 1, 1, 1}, t1[4] = {2, 2, 2, 2};
  float u0[6] = {2, 4, 8, 2, 4, 8}, u1[4] = {1, 2, 4, 8};
  double scalars[2] = {-1, 0.5};
  void* r[2];
  for (int variant = 0; variant < 2; variant++) {
    tpu_lower_arg_t args[4] = {list_arg(2), list_arg(2), list_arg(2), sl};
    float fscalars[2] = {-1, 0.5f};
    const void* data[7] = {a0, a1, t0, t1, u0, u1, scalars};
    if (variant == 1) {
      args[3] = tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 1, &two);
      data[6] = fscalars;
    }
    /* Tensor params come first: with a TENSOR scalars arg it is param 6
     * either way (after the 6 list tensors). */
    CHECK_OK(tpu_test_run_op("aten::_foreach_addcdiv_.ScalarList", args, 4, lt, data, outs, 2, r));
    for (int i = 0; i < 6; i++) CHECK(((float*)r[0])[i] == a0[i] + (-1 * t0[i]) / u0[i]);
    for (int i = 0; i < 4; i++) CHECK(((float*)r[1])[i] == a1[i] + (0.5f * t1[i]) / u1[i]);
    free(r[0]);
    free(r[1]);
  }
}

static void test_lerp_scalar_both_branches(void) {
  tpu_lower_arg_t args[3] = {list_arg(2), list_arg(2), {.kind = TPU_ARG_FLOAT, .f = 0.75}};
  tpu_hlo_type_t lt[4], outs[2];
  types2(lt, TPU_DTYPE_FLOAT32);
  types2(lt + 2, TPU_DTYPE_FLOAT32);
  types2(outs, TPU_DTYPE_FLOAT32);
  float a0[6] = {1, 2, 3, 4, 5, 6}, a1[4] = {-1, -2, -3, -4};
  float b0[6] = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f}, b1[4] = {7, 8, 9, 10};
  const void* data[4] = {a0, a1, b0, b1};
  void* r[2];
  CHECK_OK(tpu_test_run_op("aten::_foreach_lerp_.Scalar", args, 3, lt, data, outs, 2, r));
  for (int i = 0; i < 6; i++) CHECK(((float*)r[0])[i] == b0[i] - (b0[i] - a0[i]) * 0.25f);
  for (int i = 0; i < 4; i++) CHECK(((float*)r[1])[i] == b1[i] - (b1[i] - a1[i]) * 0.25f);
  free(r[0]);
  free(r[1]);
  args[2].f = 0.25;
  CHECK_OK(tpu_test_run_op("aten::_foreach_lerp_.Scalar", args, 3, lt, data, outs, 2, r));
  for (int i = 0; i < 6; i++) CHECK(((float*)r[0])[i] == a0[i] + 0.25f * (b0[i] - a0[i]));
  free(r[0]);
  free(r[1]);
}

static void test_norm_orders_are_runtime(void) {
  tpu_lower_arg_t args[3] = {list_arg(2), tpu_test_scalar_arg(TPU_DTYPE_FLOAT64, true),
                             {.kind = TPU_ARG_NONE}};
  tpu_hlo_type_t lt[2], outs[2] = {tpu_hlo_type_scalar(TPU_DTYPE_FLOAT32),
                                   tpu_hlo_type_scalar(TPU_DTYPE_FLOAT32)};
  types2(lt, TPU_DTYPE_FLOAT32);
  float a0[6] = {3, -4, 0, 0, 0, 0}, a1[4] = {1, -2, 2, 0};
  double ords[6] = {2, 1, INFINITY, -INFINITY, 0, 3};
  float want0[6] = {5, 7, 4, 0, 2, cbrtf(91)}, want1[6] = {3, 5, 2, 0, 3, cbrtf(17)};
  for (int o = 0; o < 6; o++) {
    const void* data[3] = {a0, a1, &ords[o]};
    void* r[2];
    CHECK_OK(tpu_test_run_op("aten::_foreach_norm.Scalar", args, 3, lt, data, outs, 2, r));
    CHECK(fabsf(*(float*)r[0] - want0[o]) < 1e-5f);
    CHECK(fabsf(*(float*)r[1] - want1[o]) < 1e-5f);
    free(r[0]);
    free(r[1]);
  }
  /* A NaN makes every norm NaN, max and min included. */
  float n0[6] = {1, NAN, 2, 0, 0, 0};
  for (int o = 0; o < 4; o++) {
    const void* data[3] = {n0, a1, &ords[o]};
    void* r[2];
    CHECK_OK(tpu_test_run_op("aten::_foreach_norm.Scalar", args, 3, lt, data, outs, 2, r));
    CHECK(isnan(*(float*)r[0]));
    free(r[0]);
    free(r[1]);
  }
}

static void test_maximum_nan_sign_sqrt(void) {
  tpu_lower_arg_t args[2] = {list_arg(1), list_arg(1)};
  int64_t d = 4;
  tpu_hlo_type_t lt[2] = {tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 1, &d),
                          tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 1, &d)};
  float a[4] = {NAN, 1, -2, 4}, b[4] = {0, NAN, 3, 1};
  const void* data[2] = {a, b};
  void* r[1];
  CHECK_OK(tpu_test_run_op("aten::_foreach_maximum_.List", args, 2, lt, data, lt, 1, r));
  float* m = r[0];
  CHECK(isnan(m[0]) && isnan(m[1]) && m[2] == 3 && m[3] == 4);
  free(r[0]);
  CHECK_OK(tpu_test_run_op("aten::_foreach_sign", args, 1, lt, data, lt, 1, r));
  m = r[0];
  CHECK(m[0] == 0 && m[1] == 1 && m[2] == -1 && m[3] == 1);
  free(r[0]);
  CHECK_OK(tpu_test_run_op("aten::_foreach_sqrt_", args, 1, lt, data, lt, 1, r));
  m = r[0];
  CHECK(isnan(m[0]) && m[1] == 1 && isnan(m[2]) && m[3] == 2);
  free(r[0]);
}

static void test_pow_scalar_and_tensor(void) {
  /* _foreach_pow.ScalarAndTensor(Scalar self, Tensor[] exponent). */
  tpu_lower_arg_t args[2] = {tpu_test_scalar_arg(TPU_DTYPE_FLOAT64, true), list_arg(1)};
  tpu_hlo_type_t lt[1] = {tpu_hlo_type_scalar(TPU_DTYPE_FLOAT32)};
  float step = 3;
  double beta = 0.5;
  const void* data[2] = {&step, &beta};
  void* r[1];
  CHECK_OK(tpu_test_run_op("aten::_foreach_pow.ScalarAndTensor", args, 2, lt, data, lt, 1, r));
  CHECK(*(float*)r[0] == 0.125f);
  free(r[0]);
}

static void test_bf16_rounds_once_and_copy_converts(void) {
  /* bf16 addcmul, computed in float32 and rounded at the end; the copy of
   * a float64 list into float32 converts directly. */
  int64_t d = 2;
  tpu_lower_arg_t args[4] = {list_arg(1), list_arg(1), list_arg(1),
                             {.kind = TPU_ARG_FLOAT, .f = 0.25}};
  tpu_hlo_type_t t = tpu_hlo_type_make(TPU_DTYPE_BFLOAT16, 1, &d);
  tpu_hlo_type_t lt[3] = {t, t, t};
  uint16_t x[2] = {0x3f80, 0x4000}, y[2] = {0x3f80, 0x3f80}; /* [1,2], [1,1] */
  uint16_t z[2] = {0x3f80, 0x4040};                           /* [1,3] */
  const void* data[3] = {x, y, z};
  void* r[1];
  CHECK_OK(tpu_test_run_op("aten::_foreach_addcmul_.Scalar", args, 4, lt, data, &t, 1, r));
  uint16_t* o = r[0];
  CHECK(o[0] == 0x3fa0 && o[1] == 0x4030); /* 1.25, 2.75 */
  free(r[0]);
  tpu_lower_arg_t cargs[3] = {list_arg(1), list_arg(1), {.kind = TPU_ARG_BOOL, .i = 0}};
  tpu_hlo_type_t ct[2] = {tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 1, &d),
                          tpu_hlo_type_make(TPU_DTYPE_FLOAT64, 1, &d)};
  float dst[2] = {0, 0};
  double src[2] = {1.5, -2.25};
  const void* cdata[2] = {dst, src};
  CHECK_OK(tpu_test_run_op("aten::_foreach_copy_", cargs, 3, ct, cdata, ct, 1, r));
  CHECK(((float*)r[0])[0] == 1.5f && ((float*)r[0])[1] == -2.25f);
  free(r[0]);
}

static void test_int_lists_and_zero(void) {
  int64_t d = 3;
  tpu_lower_arg_t args[2] = {list_arg(1), tpu_test_scalar_arg(TPU_DTYPE_INT64, true)};
  tpu_hlo_type_t t = tpu_hlo_type_make(TPU_DTYPE_INT64, 1, &d);
  tpu_hlo_type_t f = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 1, &d);
  int64_t x[3] = {7, -7, 0}, s = 2;
  const void* data[2] = {x, &s};
  void* r[1];
  CHECK_OK(tpu_test_run_op("aten::_foreach_sub.Scalar", args, 2, &t, data, &t, 1, r));
  CHECK(((int64_t*)r[0])[0] == 5 && ((int64_t*)r[0])[1] == -9 && ((int64_t*)r[0])[2] == -2);
  free(r[0]);
  /* Integer true division produces float (the output type says so). */
  CHECK_OK(tpu_test_run_op("aten::_foreach_div.Scalar", args, 2, &t, data, &f, 1, r));
  CHECK(((float*)r[0])[0] == 3.5f && ((float*)r[0])[1] == -3.5f);
  free(r[0]);
  CHECK_OK(tpu_test_run_op("aten::_foreach_zero_", args, 1, &t, data, &t, 1, r));
  CHECK(((int64_t*)r[0])[0] == 0 && ((int64_t*)r[0])[2] == 0);
  free(r[0]);
}

static void test_unreadable_argument_declines(void) {
  tpu_lower_arg_t args[2] = {list_arg(1), {.kind = TPU_ARG_OTHER}};
  int64_t d = 3;
  tpu_hlo_type_t t = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 1, &d);
  char* text = NULL;
  size_t len;
  tpu_status_t s = tpu_lower_program_plain("aten::_foreach_div_.ScalarList", args, 2, &t, &t, 1,
                                           &text, &len);
  CHECK(s != NULL && tpu_status_code(s) == TPU_STATUS_UNIMPLEMENTED);
  tpu_status_free(s);
}

/* One element of PyTorch's CPU fused Adam(W), float32 opmath. */
static void adam_ref(float* p, float* g, float* avg, float* sq, float* mx, float step, double lr,
                     double b1, double b2, double wd, double eps, bool amsgrad, bool maximize,
                     bool adamw) {
  double bc1 = 1 - pow(b1, step), bc2 = 1 - pow(b2, step);
  float step_size = (float)(lr / bc1), bc2s = (float)sqrt(bc2);
  float gv = *g, pv = *p;
  if (maximize) gv = -gv;
  if (wd != 0) {
    if (adamw) pv = pv * (float)(1 - lr * wd);
    else gv = gv + pv * (float)wd;
  }
  *avg = *avg + (gv - *avg) * (float)(1 - b1);
  *sq = *sq * (float)b2 + (float)(1 - b2) * gv * gv;
  float second = *sq;
  if (amsgrad) second = *mx = fmaxf(*mx, *sq);
  float denom = sqrtf(second) / bc2s + (float)eps;
  *p = pv - step_size * *avg / denom;
}

static void test_fused_adam_and_adamw(void) {
  int64_t d = 3;
  tpu_hlo_type_t t = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 1, &d);
  tpu_hlo_type_t st = tpu_hlo_type_scalar(TPU_DTYPE_FLOAT32);
  for (int variant = 0; variant < 4; variant++) {
    bool adamw = variant & 1, amsgrad = variant & 2;
    int m = amsgrad ? 1 : 0;
    tpu_lower_arg_t args[15] = {
        list_arg(1), list_arg(1), list_arg(1), list_arg(1), list_arg(m), list_arg(1),
        {.kind = TPU_ARG_FLOAT, .f = 0.01}, {.kind = TPU_ARG_FLOAT, .f = 0.9},
        {.kind = TPU_ARG_FLOAT, .f = 0.999}, {.kind = TPU_ARG_FLOAT, .f = 0.1},
        {.kind = TPU_ARG_FLOAT, .f = 1e-8}, {.kind = TPU_ARG_BOOL, .i = amsgrad},
        {.kind = TPU_ARG_BOOL, .i = variant == 3}, {.kind = TPU_ARG_NONE}, {.kind = TPU_ARG_NONE}};
    tpu_hlo_type_t lt[6] = {t, t, t, t, t, st};
    if (!amsgrad) lt[4] = st; /* the steps list follows directly */
    float p[3] = {1, -2, 0.5f}, g[3] = {0.3f, -0.1f, 2}, avg[3] = {0.1f, 0, -0.2f};
    float sq[3] = {0.01f, 0.02f, 0.5f}, mx[3] = {0.02f, 0.01f, 0.6f}, step = 3;
    const void* data[6];
    int k = 0;
    data[k++] = p;
    data[k++] = g;
    data[k++] = avg;
    data[k++] = sq;
    if (amsgrad) data[k++] = mx;
    data[k++] = &step;
    tpu_hlo_type_t outs[5] = {t, t, t, t, t};
    void* r[5];
    const char* op = adamw ? "aten::_fused_adamw_" : "aten::_fused_adam_";
    CHECK_OK(tpu_test_run_op(op, args, 15, lt, data, outs, 4 + m, r));
    for (int i = 0; i < 3; i++) {
      float wp = p[i], wg = g[i], wa = avg[i], ws = sq[i], wm = mx[i];
      adam_ref(&wp, &wg, &wa, &ws, &wm, step, 0.01, 0.9, 0.999, 0.1, 1e-8, amsgrad, variant == 3,
               adamw);
      CHECK(fabsf(((float*)r[0])[i] - wp) <= 1e-6f * fabsf(wp) + 1e-7f);
      CHECK(((float*)r[1])[i] == g[i]);
      CHECK(fabsf(((float*)r[2])[i] - wa) <= 1e-6f * fabsf(wa) + 1e-8f);
      CHECK(fabsf(((float*)r[3])[i] - ws) <= 1e-6f * fabsf(ws) + 1e-9f);
      /* XLA may fuse a multiply-add (FMA): one ulp either way. */
      if (amsgrad) CHECK(fabsf(((float*)r[4])[i] - wm) <= 1e-6f * fabsf(wm));
    }
    for (int j = 0; j < 4 + m; j++) free(r[j]);
  }
}

static void test_fused_adam_grad_scale_and_found_inf(void) {
  int64_t d = 2;
  tpu_hlo_type_t t = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 1, &d);
  tpu_hlo_type_t st = tpu_hlo_type_scalar(TPU_DTYPE_FLOAT32);
  tpu_lower_arg_t args[15] = {
      list_arg(1), list_arg(1), list_arg(1), list_arg(1), list_arg(0), list_arg(1),
      {.kind = TPU_ARG_FLOAT, .f = 0.1}, {.kind = TPU_ARG_FLOAT, .f = 0.9},
      {.kind = TPU_ARG_FLOAT, .f = 0.999}, {.kind = TPU_ARG_FLOAT, .f = 0},
      {.kind = TPU_ARG_FLOAT, .f = 1e-8}, {.kind = TPU_ARG_BOOL, .i = 0},
      {.kind = TPU_ARG_BOOL, .i = 0}, tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 0, NULL),
      tpu_test_tensor_arg(TPU_DTYPE_FLOAT32, 0, NULL)};
  tpu_hlo_type_t lt[5] = {t, t, t, t, st};
  float p[2] = {1, 2}, g[2] = {4, -8}, avg[2] = {0, 0}, sq[2] = {0, 0}, step = 1, scale = 2;
  tpu_hlo_type_t outs[4] = {t, t, t, t};
  void* r[4];
  for (int inf = 0; inf < 2; inf++) {
    float found = (float)inf;
    const void* data[7] = {p, g, avg, sq, &step, &scale, &found};
    CHECK_OK(tpu_test_run_op("aten::_fused_adam_", args, 15, lt, data, outs, 4, r));
    for (int i = 0; i < 2; i++) {
      if (inf) {
        CHECK(((float*)r[0])[i] == p[i] && ((float*)r[1])[i] == g[i]);
        CHECK(((float*)r[2])[i] == 0 && ((float*)r[3])[i] == 0);
      } else {
        /* Unscaled grads are written back; step 1 moves each param by lr. */
        CHECK(((float*)r[1])[i] == g[i] / 2);
        CHECK(fabsf(((float*)r[0])[i] - (p[i] - (g[i] > 0 ? 0.1f : -0.1f))) < 1e-6f);
      }
    }
    for (int j = 0; j < 4; j++) free(r[j]);
  }
}

TPU_TEST_MAIN(TPU_TEST(test_add_list_with_alpha), TPU_TEST(test_out_list_is_not_alpha),
              TPU_TEST(test_addcdiv_scalar_list_and_tensor),
              TPU_TEST(test_lerp_scalar_both_branches), TPU_TEST(test_norm_orders_are_runtime),
              TPU_TEST(test_maximum_nan_sign_sqrt), TPU_TEST(test_pow_scalar_and_tensor),
              TPU_TEST(test_bf16_rounds_once_and_copy_converts), TPU_TEST(test_int_lists_and_zero),
              TPU_TEST(test_unreadable_argument_declines), TPU_TEST(test_fused_adam_and_adamw),
              TPU_TEST(test_fused_adam_grad_scale_and_found_inf))
