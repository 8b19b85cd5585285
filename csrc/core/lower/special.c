/* special family of the lowering table (see lowering.h): polygamma and
 * special_zeta as CPU PyTorch computes them (ATen/native/Math.h), where
 * XLA's own forms differ: CHLO's polygamma is zeta-based for every order,
 * so trigamma of a negative x was wrong by the reflection, and CPU's
 * order >= 2 evaluates Cephes' Hurwitz zeta even for a negative q (a
 * value CHLO does not give).
 *
 *   polygamma(0, x)  digamma (tpu_emit_digamma, pointwise.c)
 *   polygamma(1, x)  trigamma: reflection below 0.5, six recurrence steps,
 *                    then the asymptotic series, in the math dtype
 *   polygamma(n, x)  (-1)^(n+1) exp(lgamma(n + 1)) zeta(n + 1, x)
 *   special_zeta     zeta(x, q)
 *   mvlgamma         CPU's sum of lgamma at half-integer offsets
 *
 * zeta is Cephes' (Euler-Maclaurin): terms (q + i)^-x summed until one is
 * below MACHEP of the sum (at least 9 of them and a > 9), as a while loop
 * with a done flag per element, then up to 12 Bernoulli corrections. CPU
 * accumulates it in acc_type: double for float, float for bfloat16. */
#include <math.h>

#include "emit.h"
#include "families.h"
#include "lowering.h"

static tpu_hlo_value_t cs(tpu_hlo_builder_t* b, tpu_hlo_value_t like, double v) { return tpu_emit_splat(b, like, v); }
static tpu_hlo_value_t cmp(tpu_hlo_builder_t* b, const char* d, tpu_hlo_value_t x, tpu_hlo_value_t y) {
  return tpu_emit_compare(b, d, x, y);
}
static tpu_hlo_value_t sel(tpu_hlo_builder_t* b, tpu_hlo_value_t p, tpu_hlo_value_t x, tpu_hlo_value_t y) {
  return tpu_emit_select(b, p, x, y);
}
static tpu_hlo_value_t or2(tpu_hlo_builder_t* b, tpu_hlo_value_t x, tpu_hlo_value_t y) {
  return tpu_emit_binary(b, "stablehlo.or", x, y);
}
static tpu_hlo_value_t and2(tpu_hlo_builder_t* b, tpu_hlo_value_t x, tpu_hlo_value_t y) {
  return tpu_emit_binary(b, "stablehlo.and", x, y);
}
static tpu_hlo_value_t not1(tpu_hlo_builder_t* b, tpu_hlo_value_t x) { return tpu_emit_unary(b, "stablehlo.not", x); }
static tpu_hlo_value_t any_of(tpu_hlo_builder_t* b, tpu_hlo_value_t p) {
  tpu_hlo_type_t t = tpu_hlo_value_type(b, p);
  int64_t dims[TPU_HLO_MAX_RANK];
  for (int d = 0; d < t.rank; d++) dims[d] = d;
  tpu_hlo_value_t m = tpu_emit_reduce(b, tpu_emit_convert(b, p, TPU_DTYPE_INT32), tpu_emit_const(b, TPU_DTYPE_INT32, 0),
                                      dims, t.rank, "stablehlo.maximum");
  return cmp(b, "NE", m, tpu_emit_const(b, TPU_DTYPE_INT32, 0));
}

/* trigamma in x's dtype (float or double), CPU's steps. */
static tpu_hlo_value_t trigamma(tpu_hlo_builder_t* b, tpu_hlo_value_t x) {
  bool f32 = tpu_hlo_value_type(b, x).dtype == TPU_DTYPE_FLOAT32;
  double pi = f32 ? (double)(float)M_PI : M_PI;
  tpu_hlo_value_t low = cmp(b, "LT", x, cs(b, x, 0.5));
  tpu_hlo_value_t s = tpu_emit_unary(b, "stablehlo.sine", tpu_emit_mul(b, cs(b, x, pi), x));
  /* result -= pi^2 / sin^2 is 0 - (pi^2 / sin^2) */
  tpu_hlo_value_t result = sel(b, low, tpu_emit_sub(b, cs(b, x, 0), tpu_emit_div(b, tpu_emit_mul(b, cs(b, x, pi), cs(b, x, pi)),
                                                                tpu_emit_mul(b, s, s))),
               cs(b, x, 0));
  tpu_hlo_value_t sign = sel(b, low, cs(b, x, -1), cs(b, x, 1));
  x = sel(b, low, tpu_emit_sub(b, cs(b, x, 1), x), x);
  for (int i = 0; i < 6; i++) {
    result = tpu_emit_add(b, result, tpu_emit_div(b, cs(b, x, 1), tpu_emit_mul(b, x, x)));
    x = tpu_emit_add(b, x, cs(b, x, 1));
  }
  tpu_hlo_value_t ixx = tpu_emit_div(b, cs(b, x, 1), tpu_emit_mul(b, x, x));
  double c6 = f32 ? (double)(1.f / 6) : 1. / 6, c30 = f32 ? (double)(1.f / 30) : 1. / 30,
         c42 = f32 ? (double)(1.f / 42) : 1. / 42;
  tpu_hlo_value_t inner = tpu_emit_sub(b, cs(b, x, c30), tpu_emit_mul(b, ixx, cs(b, x, c42)));
  inner = tpu_emit_sub(b, cs(b, x, c6), tpu_emit_mul(b, ixx, inner));
  tpu_hlo_value_t series = tpu_emit_add(b, tpu_emit_add(b, cs(b, x, 1), tpu_emit_div(b, cs(b, x, 1), tpu_emit_mul(b, cs(b, x, 2), x))),
                                        tpu_emit_mul(b, ixx, inner));
  result = tpu_emit_add(b, result, tpu_emit_div(b, series, x));
  return tpu_emit_mul(b, sign, result);
}

static const double kZetaA[12] = {
    12.0, -720.0, 30240.0, -1209600.0, 47900160.0, -1.8924375803183791606e9, 7.47242496e10,
    -2.950130727918164224e12, 1.1646782814350067249e14, -4.5979787224074726105e15,
    1.8152105401943546773e17, -7.1661652561756670113e18};
#define MACHEP 1.11022302462515654042E-16

/* Phase 1 of zeta on {s, a, b, i, done}: one more term where the element
 * still sums. */
static void zeta_terms(tpu_hlo_builder_t* b, tpu_hlo_value_t x, tpu_hlo_value_t* st) {
  tpu_hlo_value_t s = st[0], a = st[1], bb = st[2], i = st[3], done = st[4];
  tpu_hlo_value_t going = and2(b, not1(b, done), or2(b, cmp(b, "LT", i, cs(b, i, 9)), cmp(b, "LE", a, cs(b, a, 9))));
  tpu_hlo_value_t a1 = tpu_emit_add(b, a, cs(b, a, 1));
  tpu_hlo_value_t b1 = tpu_emit_binary(b, "stablehlo.power", a1, tpu_emit_unary(b, "stablehlo.negate", x));
  tpu_hlo_value_t s1 = tpu_emit_add(b, s, b1);
  tpu_hlo_value_t eps = tpu_emit_mul(b, cs(b, s1, MACHEP), s1);
  tpu_hlo_value_t conv = and2(b, cmp(b, "LT", tpu_emit_unary(b, "stablehlo.negate", eps), b1), cmp(b, "LT", b1, eps));
  st[0] = sel(b, going, s1, s);
  st[1] = sel(b, going, a1, a);
  st[2] = sel(b, going, b1, bb);
  st[3] = sel(b, going, tpu_emit_add(b, i, cs(b, i, 1)), i);
  st[4] = or2(b, done, and2(b, going, conv));
}

/* zeta(x, q) in the accumulation dtype of x and q (same type). */
static tpu_hlo_value_t zeta(tpu_hlo_builder_t* b, tpu_hlo_value_t x, tpu_hlo_value_t q) {
  tpu_hlo_type_t t = tpu_hlo_value_type(b, x), it = t, bt = t;
  it.dtype = TPU_DTYPE_INT32;
  bt.dtype = TPU_DTYPE_BOOL;
  tpu_hlo_value_t nx = tpu_emit_unary(b, "stablehlo.negate", x);
  tpu_hlo_value_t st[5] = {tpu_emit_binary(b, "stablehlo.power", q, nx), q, cs(b, x, 0), tpu_emit_const_like(b, &it, 0),
                           tpu_emit_const_like(b, &bt, 0)};
  tpu_hlo_type_t types[5] = {t, t, t, it, bt};
  tpu_hlo_value_t s[5];
  tpu_hlo_region_op_begin(b, "stablehlo.while", st, 5, types, 5, NULL);
  tpu_hlo_block_begin(b, types, 5, s);
  {
    tpu_hlo_value_t going = and2(b, not1(b, s[4]), or2(b, cmp(b, "LT", s[3], cs(b, s[3], 9)), cmp(b, "LE", s[1], cs(b, s[1], 9))));
    tpu_hlo_value_t more = any_of(b, going);
    tpu_hlo_block_return(b, &more, 1);
  }
  tpu_hlo_block_begin(b, types, 5, s);
  zeta_terms(b, x, s);
  tpu_hlo_block_return(b, s, 5);
  tpu_hlo_value_t out[5];
  tpu_hlo_region_op_end(b, out);
  tpu_hlo_value_t sum = out[0], a = out[1], bb = out[2], done = out[4];
  /* Euler-Maclaurin tail for the rest */
  tpu_hlo_value_t w = a;
  sum = tpu_emit_add(b, sum, tpu_emit_div(b, tpu_emit_mul(b, bb, w), tpu_emit_sub(b, x, cs(b, x, 1))));
  sum = tpu_emit_sub(b, sum, tpu_emit_mul(b, cs(b, x, 0.5), bb));
  tpu_hlo_value_t aa = cs(b, x, 1), k = cs(b, x, 0);
  tpu_hlo_value_t stop = done;
  tpu_hlo_value_t result = sel(b, done, out[0], sum);
  for (int i = 0; i < 12; i++) {
    aa = tpu_emit_mul(b, aa, tpu_emit_add(b, x, k));
    bb = tpu_emit_div(b, bb, w);
    tpu_hlo_value_t term = tpu_emit_div(b, tpu_emit_mul(b, aa, bb), cs(b, x, kZetaA[i]));
    sum = tpu_emit_add(b, sum, term);
    result = sel(b, stop, result, sum);
    tpu_hlo_value_t small = cmp(b, "LT", tpu_emit_unary(b, "stablehlo.abs", tpu_emit_div(b, term, sum)), cs(b, x, MACHEP));
    stop = or2(b, stop, small);
    k = tpu_emit_add(b, k, cs(b, x, 1));
    aa = tpu_emit_mul(b, aa, tpu_emit_add(b, x, k));
    bb = tpu_emit_div(b, bb, w);
    k = tpu_emit_add(b, k, cs(b, x, 1));
  }
  /* the domain: x = 1 is inf, x < 1 NaN; q <= 0: an integer q is inf, a
   * non-integer x NaN */
  tpu_hlo_value_t qint = cmp(b, "EQ", q, tpu_emit_unary(b, "stablehlo.floor", q));
  tpu_hlo_value_t xint = cmp(b, "EQ", x, tpu_emit_unary(b, "stablehlo.floor", x));
  tpu_hlo_value_t qle = cmp(b, "LE", q, cs(b, q, 0));
  result = sel(b, and2(b, qle, not1(b, xint)), cs(b, x, NAN), result);
  result = sel(b, and2(b, qle, qint), cs(b, x, INFINITY), result);
  result = sel(b, cmp(b, "LT", x, cs(b, x, 1)), cs(b, x, NAN), result);
  return sel(b, cmp(b, "EQ", x, cs(b, x, 1)), cs(b, x, INFINITY), result);
}

static tpu_dtype_t acc_dtype(tpu_dtype_t d) {
  return d == TPU_DTYPE_FLOAT32 || d == TPU_DTYPE_FLOAT64 ? TPU_DTYPE_FLOAT64 : TPU_DTYPE_FLOAT32;
}

/* Argument i (tensor or scalar) in dtype d, broadcast to output 0. */
static tpu_hlo_value_t operand(tpu_lower_ctx_t* ctx, int i, tpu_dtype_t d) {
  tpu_hlo_type_t out = tpu_lower_output_type(ctx, 0);
  out.dtype = d;
  const tpu_lower_arg_t* a = tpu_lower_arg(ctx, i);
  tpu_hlo_value_t v = a->kind == TPU_ARG_TENSOR ? tpu_lower_tensor(ctx, i) : tpu_lower_scalar(ctx, i, d);
  return tpu_emit_cast_to(tpu_lower_builder(ctx), tpu_emit_convert(tpu_lower_builder(ctx), v, d), &out);
}

/* polygamma(int n, Tensor x) */
static tpu_status_t lower_polygamma(tpu_lower_ctx_t* ctx) {
  tpu_hlo_type_t out = tpu_lower_output_type(ctx, 0);
  /* polygamma(n, self) / polygamma.out; polygamma_(self, n) in place */
  int ni = tpu_lower_arg(ctx, 0)->kind == TPU_ARG_TENSOR ? 1 : 0, xi = 1 - ni;
  const tpu_lower_arg_t* n = tpu_lower_arg(ctx, ni);
  if (!tpu_dtype_is_floating(out.dtype) || n->kind != TPU_ARG_INT || n->i < 0)
    return tpu_lower_decline(ctx, "polygamma of this order or dtype");
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_dtype_t d = out.dtype, md = d == TPU_DTYPE_FLOAT64 ? d : TPU_DTYPE_FLOAT32;
  tpu_hlo_value_t x = operand(ctx, xi, d);  /* rounded to the dtype first, as CPU reads it */
  tpu_hlo_value_t xm = tpu_emit_convert(b, x, md), r;
  if (n->i == 0) {
    r = tpu_emit_digamma(b, xm);
  } else if (n->i == 1) {
    r = trigamma(b, xm);
  } else {
    tpu_dtype_t acc = acc_dtype(d);
    tpu_hlo_value_t xa = tpu_emit_convert(b, x, acc);
    tpu_hlo_value_t z = tpu_emit_convert(b, tpu_emit_convert(b, zeta(b, cs(b, xa, (double)(n->i + 1)), xa), d), md);
    /* exp(lgamma(n + 1)) in the dtype: (n)! rounded as CPU's float lgamma / exp */
    tpu_hlo_value_t f = tpu_emit_unary(b, "stablehlo.exponential", tpu_emit_unary(b, "chlo.lgamma", cs(b, xm, (double)n->i + 1)));
    r = tpu_emit_mul(b, tpu_emit_mul(b, cs(b, xm, n->i % 2 ? 1 : -1), f), z);
  }
  tpu_lower_set_output(ctx, 0, tpu_emit_convert(b, r, d));
  return NULL;
}

/* mvlgamma(self, p): CPU's composition, sum over i of lgamma(self -
 * (p - 1) / 2 + i / 2) (the offsets arange(-p / 2 + 0.5, 0.5, 0.5)), plus
 * p (p - 1) / 4 log(pi). */
static tpu_status_t lower_mvlgamma(tpu_lower_ctx_t* ctx) {
  tpu_hlo_type_t out = tpu_lower_output_type(ctx, 0);
  const tpu_lower_arg_t* p = tpu_lower_arg(ctx, 1);
  if (!tpu_dtype_is_floating(out.dtype) || p->kind != TPU_ARG_INT || p->i < 1)
    return tpu_lower_decline(ctx, "mvlgamma of this order or dtype");
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_dtype_t d = out.dtype, md = d == TPU_DTYPE_FLOAT64 ? d : TPU_DTYPE_FLOAT32;
  tpu_hlo_value_t x = operand(ctx, 0, d), r = {-1};
  for (int64_t i = 0; i < p->i; i++) {
    /* self + offset in the dtype, then lgamma in the math dtype */
    tpu_hlo_value_t a = tpu_emit_add(b, x, cs(b, x, -(double)p->i / 2 + 0.5 + 0.5 * (double)i));
    tpu_hlo_value_t l = tpu_emit_convert(b, tpu_emit_unary(b, "chlo.lgamma", tpu_emit_convert(b, a, md)), d);
    r = i == 0 ? l : tpu_emit_add(b, r, l);
  }
  double c = (double)p->i * (double)(p->i - 1) * log(M_PI) / 4;
  tpu_lower_set_output(ctx, 0, tpu_emit_add(b, r, cs(b, r, c)));
  return NULL;
}

/* special_zeta(x, q), every overload. */
static tpu_status_t lower_special_zeta(tpu_lower_ctx_t* ctx) {
  tpu_hlo_type_t out = tpu_lower_output_type(ctx, 0);
  if (!tpu_dtype_is_floating(out.dtype)) return tpu_lower_decline(ctx, "zeta into %s", tpu_dtype_name(out.dtype));
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_dtype_t d = out.dtype, acc = acc_dtype(d);
  tpu_hlo_value_t x = tpu_emit_convert(b, operand(ctx, 0, d), acc), q = tpu_emit_convert(b, operand(ctx, 1, d), acc);
  tpu_lower_set_output(ctx, 0, tpu_emit_convert(b, zeta(b, x, q), d));
  return NULL;
}

const tpu_lowering_t tpu_lowerings_special[] = {
    {"polygamma", lower_polygamma, 0},
    {"special_zeta", lower_special_zeta, 0},
    {"mvlgamma", lower_mvlgamma, 0},
};
const size_t tpu_lowerings_special_count = sizeof tpu_lowerings_special / sizeof tpu_lowerings_special[0];
