/* attention family: the fused forward and backward run on the XLA CPU
 * plugin against attention computed here in double precision, with a
 * broadcast bias that masks a whole row, and causal with more keys than
 * queries. */
#include <math.h>
#include <string.h>

#include "../hostattn.h"
#include "../metrics.h"
#include "../testing.h"
#include "nn_testing.h"

enum { B = 1, H = 2, L = 3, S = 4, D = 2, DV = 3 };

typedef struct {
  double out[H][L][DV], lse[H][L];
  double dq[H][L][D], dk[H][S][D], dv[H][S][DV], dbias[L][S];
} reference_t;

/* Attention of q [H,L,D], k [H,S,D], v [H,S,DV] with bias [L,S] (or none),
 * causal or not, and its gradients for the upstream gradient g [H,L,DV]. */
static void reference(const float* q, const float* k, const float* v, const float* bias,
                      bool causal, double scale, const float* g, reference_t* r) {
  memset(r, 0, sizeof *r);
  for (int h = 0; h < H; h++) {
    double p[L][S], ds[L][S];
    for (int l = 0; l < L; l++) {
      double s[S], m = -INFINITY;
      for (int j = 0; j < S; j++) {
        double dot = 0;
        for (int d = 0; d < D; d++) dot += (double)q[(h * L + l) * D + d] * k[(h * S + j) * D + d];
        s[j] = dot * scale + (bias ? bias[l * S + j] : 0);
        if (causal && j > l) s[j] = -INFINITY;
        m = fmax(m, s[j]);
      }
      double sum = 0;
      for (int j = 0; j < S; j++) sum += (p[l][j] = m == -INFINITY ? 0 : exp(s[j] - m));
      for (int j = 0; j < S; j++) p[l][j] = sum == 0 ? 0 : p[l][j] / sum;
      r->lse[h][l] = m == -INFINITY ? -INFINITY : m + log(sum);
      for (int e = 0; e < DV; e++)
        for (int j = 0; j < S; j++) r->out[h][l][e] += p[l][j] * v[(h * S + j) * DV + e];
    }
    for (int l = 0; l < L; l++) {
      double rowsum = 0;
      for (int e = 0; e < DV; e++) rowsum += (double)g[(h * L + l) * DV + e] * r->out[h][l][e];
      for (int j = 0; j < S; j++) {
        double dp = 0;
        for (int e = 0; e < DV; e++) dp += (double)g[(h * L + l) * DV + e] * v[(h * S + j) * DV + e];
        ds[l][j] = p[l][j] * (dp - rowsum);
        r->dbias[l][j] += ds[l][j];
        for (int e = 0; e < DV; e++) r->dv[h][j][e] += p[l][j] * g[(h * L + l) * DV + e];
      }
    }
    for (int l = 0; l < L; l++)
      for (int j = 0; j < S; j++)
        for (int d = 0; d < D; d++) {
          r->dq[h][l][d] += scale * ds[l][j] * k[(h * S + j) * D + d];
          r->dk[h][j][d] += scale * ds[l][j] * q[(h * L + l) * D + d];
        }
  }
}

static void run_case(bool with_bias, bool causal, bool explicit_scale) {
  int64_t host_before = tpu_metrics_get("host_attn_programs");
  int64_t qd[4] = {B, H, L, D}, kd[4] = {B, H, S, D}, vd[4] = {B, H, S, DV};
  int64_t od[4] = {B, H, L, DV}, ld[3] = {B, H, L}, bd[2] = {L, S};
  float q[H * L * D], k[H * S * D], v[H * S * DV], g[H * L * DV], bias[L * S];
  fill(q, H * L * D, 3);
  fill(k, H * S * D, 5);
  fill(v, H * S * DV, 7);
  fill(g, H * L * DV, 11);
  fill(bias, L * S, 13);
  for (int j = 0; j < S; j++) bias[1 * S + j] = -INFINITY; /* row 1: every key masked */
  double scale = explicit_scale ? 0.37 : 1.0 / sqrt((double)D);
  reference_t want;
  reference(q, k, v, with_bias ? bias : NULL, causal, scale, g, &want);

  tpu_lower_arg_t args[8] = {
      f32(4, qd), f32(4, kd), f32(4, vd), with_bias ? f32(2, bd) : none_arg(),
      float_arg(0.0), bool_arg(causal), bool_arg(false),
      explicit_scale ? float_arg(scale) : none_arg()};
  const void* data[4] = {q, k, v, bias};
  tpu_hlo_type_t outs[4] = {tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 4, od),
                            tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 3, ld),
                            tpu_hlo_type_scalar(TPU_DTYPE_INT64),
                            tpu_hlo_type_scalar(TPU_DTYPE_INT64)};
  void* r[4];
  CHECK_OK(tpu_test_run_op("aten::_scaled_dot_product_fused_attention_overrideable", args, 8,
                           NULL, data, outs, 4, r));
  check_all(r[0], &want.out[0][0][0], H * L * DV, 1e-5);
  check_all(r[1], &want.lse[0][0], H * L, 1e-5);
  CHECK(((int64_t*)r[2])[0] == 0 && ((int64_t*)r[3])[0] == 0);
  float out[H * L * DV], lse[H * L];
  memcpy(out, r[0], sizeof out);
  memcpy(lse, r[1], sizeof lse);
  for (int i = 0; i < 4; i++) free(r[i]);

  tpu_lower_arg_t bargs[17] = {
      f32(4, od), f32(4, qd), f32(4, kd), f32(4, vd), with_bias ? f32(2, bd) : none_arg(),
      none_arg(), f32(4, od), f32(3, ld), none_arg(), none_arg(), int_arg(L), int_arg(S),
      float_arg(0.0), bool_arg(causal), none_arg(), none_arg(),
      explicit_scale ? float_arg(scale) : none_arg()};
  const void* bdata_bias[7] = {g, q, k, v, bias, out, lse};
  const void* bdata_plain[6] = {g, q, k, v, out, lse};
  tpu_hlo_type_t bouts[4] = {tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 4, qd),
                             tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 4, kd),
                             tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 4, vd),
                             tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 2, bd)};
  int nb = with_bias ? 4 : 3;
  CHECK_OK(tpu_test_run_op("aten::_scaled_dot_product_fused_attention_overrideable_backward",
                           bargs, 17, NULL, with_bias ? bdata_bias : bdata_plain, bouts, nb, r));
  check_all(r[0], &want.dq[0][0][0], H * L * D, 1e-5);
  check_all(r[1], &want.dk[0][0][0], H * S * D, 1e-5);
  check_all(r[2], &want.dv[0][0][0], H * S * DV, 1e-5);
  if (with_bias) check_all(r[3], &want.dbias[0][0], L * S, 1e-5);
  for (int i = 0; i < nb; i++) free(r[i]);
  /* On the CPU plugin the forward (and the backward without a bias
   * gradient) ran as the host kernel; elsewhere as XLA's program. */
  int64_t host = tpu_metrics_get("host_attn_programs") - host_before;
  CHECK(host == (tpu_hostattn_active() ? (with_bias ? 1 : 2) : 0));
}

static void test_attention_with_a_masked_row(void) { run_case(true, false, false); }
static void test_causal_attention_with_more_keys(void) { run_case(false, true, true); }
static void test_causal_attention_with_a_bias(void) { run_case(true, true, false); }

TPU_TEST_MAIN(TPU_TEST(test_attention_with_a_masked_row),
              TPU_TEST(test_causal_attention_with_more_keys),
              TPU_TEST(test_causal_attention_with_a_bias))
