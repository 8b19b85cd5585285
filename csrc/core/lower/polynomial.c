/* polynomial family of the lowering table (see lowering.h): PyTorch's
 * orthogonal polynomials torch.special.{chebyshev_polynomial_t,u,v,w,
 * shifted_chebyshev_polynomial_t,u,v,w, hermite_polynomial_h,he,
 * laguerre_polynomial_l, legendre_polynomial_p}(x, n), every overload.
 *
 * Each is CPU's kernel (ATen/native/Math.h) case for case: n < 0 gives 0,
 * then the special points (|x| = 1, x = 0 ...), then the closed forms
 * (cos(n acos x) ...) where CPU takes them, then n = 0 and n = 1, and
 * otherwise the three-term recurrence, run here as a while loop for as
 * many steps as the largest n that needs it (elements with smaller n stop
 * early, as their own CPU loop does). Arithmetic is in the result dtype
 * with CPU's operation order; n is the common-dtype value truncated to an
 * integer (a non-finite n counts as negative, as x86's conversion makes
 * it). */
#include "emit.h"
#include "lowering.h"

typedef enum {
  POLY_T, POLY_U, POLY_V, POLY_W, /* Chebyshev, first to fourth kind */
  POLY_H, POLY_HE,                /* Hermite, physicists' and probabilists' */
  POLY_L, POLY_P                  /* Laguerre, Legendre */
} poly_kind_t;

/* A row's data word: its entry of kPolys (in the rows' order). */
typedef struct {
  poly_kind_t kind;
  bool shifted; /* of 2x - 1 (shifted Chebyshev) */
} poly_t;

static const poly_t kPolys[] = {
    {POLY_T, false}, {POLY_U, false}, {POLY_V, false}, {POLY_W, false},
    {POLY_T, true},  {POLY_U, true},  {POLY_V, true},  {POLY_W, true},
    {POLY_H, false}, {POLY_HE, false}, {POLY_L, false}, {POLY_P, false},
};

typedef struct {
  tpu_hlo_builder_t* b;
  tpu_hlo_type_t t; /* the result type */
} pctx_t;

static tpu_hlo_value_t C(const pctx_t* c, double v) { return tpu_emit_const_like(c->b, &c->t, v); }
static tpu_hlo_value_t add(const pctx_t* c, tpu_hlo_value_t x, tpu_hlo_value_t y) { return tpu_emit_add(c->b, x, y); }
static tpu_hlo_value_t sub(const pctx_t* c, tpu_hlo_value_t x, tpu_hlo_value_t y) { return tpu_emit_sub(c->b, x, y); }
static tpu_hlo_value_t mul(const pctx_t* c, tpu_hlo_value_t x, tpu_hlo_value_t y) { return tpu_emit_mul(c->b, x, y); }
static tpu_hlo_value_t dv(const pctx_t* c, tpu_hlo_value_t x, tpu_hlo_value_t y) { return tpu_emit_div(c->b, x, y); }
static tpu_hlo_value_t un(const pctx_t* c, const char* op, tpu_hlo_value_t x) { return tpu_emit_unary(c->b, op, x); }
static tpu_hlo_value_t cmp(const pctx_t* c, const char* d, tpu_hlo_value_t x, tpu_hlo_value_t y) {
  return tpu_emit_compare(c->b, d, x, y);
}
static tpu_hlo_value_t sel(const pctx_t* c, tpu_hlo_value_t p, tpu_hlo_value_t x, tpu_hlo_value_t y) {
  return tpu_emit_select(c->b, p, x, y);
}
static tpu_hlo_value_t and2(const pctx_t* c, tpu_hlo_value_t x, tpu_hlo_value_t y) {
  return tpu_emit_binary(c->b, "stablehlo.and", x, y);
}

/* Argument i in the result dtype, broadcast to the result shape. */
static tpu_hlo_value_t operand(tpu_lower_ctx_t* ctx, int i, const tpu_hlo_type_t* t) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  const tpu_lower_arg_t* a = tpu_lower_arg(ctx, i);
  tpu_hlo_value_t v = a->kind == TPU_ARG_TENSOR ? tpu_lower_tensor(ctx, i) : tpu_lower_scalar(ctx, i, t->dtype);
  return tpu_emit_cast_to(b, v, t);
}

typedef struct {
  const poly_t* poly;
  pctx_t c;
  tpu_hlo_value_t x, z, two;  /* z: x, or 2x - 1 shifted; two: z + z */
  tpu_hlo_value_t steps;      /* int64: recurrence steps each element takes */
} loop_t;

/* One recurrence step j (k as CPU's loop counts it) on {p, q}. */
static void step(const loop_t* l, tpu_hlo_value_t j, tpu_hlo_value_t* p, tpu_hlo_value_t* q) {
  const pctx_t* c = &l->c;
  tpu_hlo_type_t it = c->t;
  it.dtype = TPU_DTYPE_INT64;
  tpu_hlo_value_t jv = tpu_emit_broadcast_to(c->b, j, &it);
  tpu_hlo_value_t k;  /* as a value of the result dtype */
  tpu_hlo_value_t r;
  switch (l->poly->kind) {
    case POLY_H:  /* k = 2, 4, ...: r = 2x q - k p */
      k = tpu_emit_convert(c->b, tpu_emit_mul(c->b, tpu_emit_add(c->b, jv, tpu_emit_const_like(c->b, &it, 1)),
                                              tpu_emit_const_like(c->b, &it, 2)), c->t.dtype);
      r = sub(c, mul(c, l->two, *q), mul(c, k, *p));
      break;
    case POLY_HE:  /* k = 1, 2, ...: r = x q - k p */
      k = tpu_emit_convert(c->b, tpu_emit_add(c->b, jv, tpu_emit_const_like(c->b, &it, 1)), c->t.dtype);
      r = sub(c, mul(c, l->x, *q), mul(c, k, *p));
      break;
    case POLY_L: {  /* ((2k + (1 - x)) q - k p) / (k + 1) */
      tpu_hlo_value_t ki = tpu_emit_add(c->b, jv, tpu_emit_const_like(c->b, &it, 1));
      k = tpu_emit_convert(c->b, ki, c->t.dtype);
      tpu_hlo_value_t k2 = tpu_emit_convert(c->b, tpu_emit_add(c->b, ki, ki), c->t.dtype);
      tpu_hlo_value_t k1 = tpu_emit_convert(c->b, tpu_emit_add(c->b, ki, tpu_emit_const_like(c->b, &it, 1)), c->t.dtype);
      r = dv(c, sub(c, mul(c, add(c, k2, sub(c, C(c, 1), l->x)), *q), mul(c, k, *p)), k1);
      break;
    }
    case POLY_P: {  /* ((2k + 1) x q - k p) / (k + 1) */
      tpu_hlo_value_t ki = tpu_emit_add(c->b, jv, tpu_emit_const_like(c->b, &it, 1));
      k = tpu_emit_convert(c->b, ki, c->t.dtype);
      tpu_hlo_value_t k21 = tpu_emit_convert(
          c->b, tpu_emit_add(c->b, tpu_emit_add(c->b, ki, ki), tpu_emit_const_like(c->b, &it, 1)), c->t.dtype);
      tpu_hlo_value_t k1 = tpu_emit_convert(c->b, tpu_emit_add(c->b, ki, tpu_emit_const_like(c->b, &it, 1)), c->t.dtype);
      r = dv(c, sub(c, mul(c, mul(c, k21, l->x), *q), mul(c, k, *p)), k1);
      break;
    }
    default:  /* Chebyshev: r = 2z q - p */
      r = sub(c, mul(c, l->two, *q), *p);
      break;
  }
  tpu_hlo_value_t active = cmp(c, "LT", jv, l->steps);
  tpu_hlo_value_t np = sel(c, active, *q, *p);
  *q = sel(c, active, r, *q);
  *p = np;
}

/* The recurrence from p = 1, q = q1 for `steps` steps per element, as a
 * while loop that ends when no element has steps left (or, where CPU's
 * loop stops at a NaN, every element left is NaN). Returns q. */
static tpu_hlo_value_t recurrence(const loop_t* l, tpu_hlo_value_t q1) {
  const pctx_t* c = &l->c;
  tpu_hlo_builder_t* b = c->b;
  tpu_hlo_type_t types[3] = {c->t, c->t, tpu_hlo_type_scalar(TPU_DTYPE_INT64)};
  tpu_hlo_value_t init[3] = {C(c, 1), q1, tpu_emit_const(b, TPU_DTYPE_INT64, 0)}, s[3];
  bool nan_stop = l->poly->kind != POLY_H && l->poly->kind != POLY_HE;
  tpu_hlo_region_op_begin(b, "stablehlo.while", init, 3, types, 3, NULL);
  tpu_hlo_block_begin(b, types, 3, s);
  {
    tpu_hlo_type_t it = c->t;
    it.dtype = TPU_DTYPE_INT64;
    tpu_hlo_value_t left = cmp(c, "LT", tpu_emit_broadcast_to(b, s[2], &it), l->steps);
    if (nan_stop) left = and2(c, left, cmp(c, "EQ", s[1], s[1]));
    int64_t dims[TPU_HLO_MAX_RANK];
    for (int d = 0; d < c->t.rank; d++) dims[d] = d;
    tpu_hlo_value_t any = tpu_emit_reduce(b, tpu_emit_convert(b, left, TPU_DTYPE_INT32),
                                          tpu_emit_const(b, TPU_DTYPE_INT32, 0), dims, c->t.rank,
                                          "stablehlo.maximum");
    tpu_hlo_value_t more = cmp(c, "NE", any, tpu_emit_const(b, TPU_DTYPE_INT32, 0));
    tpu_hlo_block_return(b, &more, 1);
  }
  tpu_hlo_block_begin(b, types, 3, s);
  {
    tpu_hlo_value_t p = s[0], q = s[1];
    step(l, s[2], &p, &q);
    tpu_hlo_value_t next[3] = {p, q, tpu_emit_add(b, s[2], tpu_emit_const(b, TPU_DTYPE_INT64, 1))};
    tpu_hlo_block_return(b, next, 3);
  }
  tpu_hlo_value_t out[3];
  tpu_hlo_region_op_end(b, out);
  return out[1];
}

static tpu_status_t lower_polynomial(tpu_lower_ctx_t* ctx) {
  const poly_t* poly = (const poly_t*)tpu_lower_data(ctx);
  tpu_hlo_type_t t = tpu_lower_output_type(ctx, 0);
  if (t.dtype != TPU_DTYPE_FLOAT32 && t.dtype != TPU_DTYPE_FLOAT64)
    return tpu_lower_decline(ctx, "an orthogonal polynomial in %s", tpu_dtype_name(t.dtype));
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  pctx_t c = {b, t};
  tpu_hlo_type_t it = t;
  it.dtype = TPU_DTYPE_INT64;
  tpu_hlo_value_t x = operand(ctx, 0, &t), nf = operand(ctx, 1, &t);
  /* static_cast<int64_t>(n): truncation; NaN / inf become INT64_MIN on x86 */
  tpu_hlo_type_t bt = t;
  bt.dtype = TPU_DTYPE_BOOL;
  tpu_hlo_value_t finite = tpu_hlo_op(b, "stablehlo.is_finite", &nf, 1, bt, NULL);
  tpu_hlo_value_t n = tpu_emit_select(b, finite, tpu_emit_convert(b, nf, TPU_DTYPE_INT64),
                                      tpu_emit_const_like(b, &it, -1));
  tpu_hlo_value_t ni1 = tpu_emit_add(b, n, tpu_emit_const_like(b, &it, 1));
  tpu_hlo_value_t nT = tpu_emit_convert(b, n, t.dtype);
  tpu_hlo_value_t even = tpu_emit_compare(
      b, "EQ", tpu_emit_binary(b, "stablehlo.remainder", n, tpu_emit_const_like(b, &it, 2)),
      tpu_emit_const_like(b, &it, 0));
  tpu_hlo_value_t zero_i = tpu_emit_const_like(b, &it, 0), one_i = tpu_emit_const_like(b, &it, 1);
  tpu_hlo_value_t z = poly->shifted ? sub(&c, add(&c, x, x), C(&c, 1)) : x;
  tpu_hlo_value_t two = add(&c, z, z);
  tpu_hlo_value_t two_n1 = tpu_emit_convert(b, tpu_emit_add(b, tpu_emit_add(b, n, n), one_i), t.dtype);
  tpu_hlo_value_t np1 = tpu_emit_convert(b, ni1, t.dtype);
  tpu_hlo_value_t pm1 = sel(&c, even, C(&c, 1), C(&c, -1));
  tpu_hlo_value_t pm2n1 = sel(&c, even, two_n1, un(&c, "stablehlo.negate", two_n1));
  tpu_hlo_value_t ax = un(&c, "stablehlo.abs", x), az = un(&c, "stablehlo.abs", z);
  tpu_hlo_value_t xpos = cmp(&c, "GT", x, C(&c, 0));
  /* q1: the n = 1 value, where the recurrence starts */
  tpu_hlo_value_t q1;
  switch (poly->kind) {
    case POLY_T: q1 = z; break;
    case POLY_U: q1 = two; break;
    case POLY_V: q1 = sub(&c, two, C(&c, 1)); break;
    case POLY_W: q1 = add(&c, two, C(&c, 1)); break;
    case POLY_H: q1 = add(&c, x, x); break;
    case POLY_HE: q1 = x; break;
    case POLY_L: q1 = sub(&c, C(&c, 1), x); break;
    default: q1 = x; break;
  }
  /* special points: (condition, value), and the closed form's */
  tpu_hlo_value_t special = {-1}, special_v = {-1}, closed = {-1}, closed_v = {-1};
  tpu_hlo_value_t top = poly->shifted ? cmp(&c, "EQ", x, C(&c, 1)) : and2(&c, cmp(&c, "EQ", ax, C(&c, 1)), xpos);
  tpu_hlo_value_t bottom = poly->shifted ? cmp(&c, "EQ", x, C(&c, 0))
                                         : and2(&c, cmp(&c, "EQ", ax, C(&c, 1)), un(&c, "stablehlo.not", xpos));
  if (poly->kind <= POLY_W) {
    special = tpu_emit_binary(b, "stablehlo.or", top, bottom);
    int64_t limit = poly->kind == POLY_T ? 6 : poly->shifted ? (poly->kind == POLY_W ? 4 : 6) : 8;
    closed = and2(&c, tpu_emit_compare(b, "GT", n, tpu_emit_const_like(b, &it, (double)limit)),
                  cmp(&c, "LT", az, C(&c, 1)));
    tpu_hlo_value_t ac = un(&c, "chlo.acos", z);
    switch (poly->kind) {
      case POLY_T:
        special_v = sel(&c, top, C(&c, 1), pm1);
        closed_v = un(&c, "stablehlo.cosine", mul(&c, nT, ac));
        break;
      case POLY_U: {
        special_v = sel(&c, top, np1, sel(&c, even, np1, un(&c, "stablehlo.negate", np1)));
        tpu_hlo_value_t s = un(&c, "stablehlo.sine", ac);
        closed_v = sel(&c, cmp(&c, "NE", s, C(&c, 0)), dv(&c, un(&c, "stablehlo.sine", mul(&c, np1, ac)), s),
                       dv(&c, mul(&c, np1, un(&c, "stablehlo.cosine", mul(&c, np1, ac))), z));
        break;
      }
      case POLY_V: {
        special_v = sel(&c, top, C(&c, 1), pm2n1);
        tpu_hlo_value_t half = dv(&c, ac, C(&c, 2));
        closed_v = sel(&c, cmp(&c, "NE", un(&c, "stablehlo.sine", half), C(&c, 1)),
                       dv(&c, un(&c, "stablehlo.cosine", mul(&c, add(&c, nT, C(&c, 0.5)), ac)),
                          un(&c, "stablehlo.cosine", half)),
                       pm2n1);
        break;
      }
      default: {  /* W */
        special_v = sel(&c, top, two_n1, pm1);
        tpu_hlo_value_t half = dv(&c, ac, C(&c, 2));
        tpu_hlo_value_t edge = poly->shifted ? pm1 : sel(&c, xpos, two_n1, pm1);
        closed_v = sel(&c, cmp(&c, "NE", un(&c, "stablehlo.cosine", half), C(&c, 1)),
                       dv(&c, un(&c, "stablehlo.sine", mul(&c, add(&c, nT, C(&c, 0.5)), ac)),
                          un(&c, "stablehlo.sine", half)),
                       edge);
        break;
      }
    }
  } else if (poly->kind == POLY_L) {
    special = cmp(&c, "EQ", ax, C(&c, 0));
    special_v = C(&c, 1);
  } else if (poly->kind == POLY_P) {
    special = cmp(&c, "EQ", ax, C(&c, 1));
    special_v = sel(&c, xpos, C(&c, 1), pm1);
  } else {  /* Hermite: past the limit, NaN */
    double limit = t.dtype == TPU_DTYPE_FLOAT32 ? 128 : 512;
    special = and2(&c, tpu_emit_compare(b, "GT", n, tpu_emit_const_like(b, &it, limit)),
                   tpu_emit_compare(b, "GT", n, one_i));
    special_v = C(&c, __builtin_nan(""));
  }
  /* elements that run the loop, and for how many steps (n - 1) */
  tpu_hlo_value_t looping = tpu_emit_compare(b, "GT", n, one_i);
  if (special.id >= 0) looping = and2(&c, looping, un(&c, "stablehlo.not", special));
  if (closed.id >= 0) looping = and2(&c, looping, un(&c, "stablehlo.not", closed));
  loop_t l = {poly, c, x, z, two, tpu_emit_select(b, looping, tpu_emit_sub(b, n, one_i), zero_i)};
  tpu_hlo_value_t r = recurrence(&l, q1);
  r = sel(&c, tpu_emit_compare(b, "EQ", n, one_i), q1, r);
  r = sel(&c, tpu_emit_compare(b, "EQ", n, zero_i), C(&c, 1), r);
  if (closed.id >= 0) r = sel(&c, closed, closed_v, r);
  if (special.id >= 0) r = sel(&c, special, special_v, r);
  r = sel(&c, tpu_emit_compare(b, "LT", n, zero_i), C(&c, 0), r);
  tpu_lower_set_output(ctx, 0, r);
  return NULL;
}

const tpu_lowering_t tpu_lowerings_polynomial[] = {
    {"special_chebyshev_polynomial_t", lower_polynomial, 0, (intptr_t)&kPolys[0]},
    {"special_chebyshev_polynomial_u", lower_polynomial, 0, (intptr_t)&kPolys[1]},
    {"special_chebyshev_polynomial_v", lower_polynomial, 0, (intptr_t)&kPolys[2]},
    {"special_chebyshev_polynomial_w", lower_polynomial, 0, (intptr_t)&kPolys[3]},
    {"special_shifted_chebyshev_polynomial_t", lower_polynomial, 0, (intptr_t)&kPolys[4]},
    {"special_shifted_chebyshev_polynomial_u", lower_polynomial, 0, (intptr_t)&kPolys[5]},
    {"special_shifted_chebyshev_polynomial_v", lower_polynomial, 0, (intptr_t)&kPolys[6]},
    {"special_shifted_chebyshev_polynomial_w", lower_polynomial, 0, (intptr_t)&kPolys[7]},
    {"special_hermite_polynomial_h", lower_polynomial, 0, (intptr_t)&kPolys[8]},
    {"special_hermite_polynomial_he", lower_polynomial, 0, (intptr_t)&kPolys[9]},
    {"special_laguerre_polynomial_l", lower_polynomial, 0, (intptr_t)&kPolys[10]},
    {"special_legendre_polynomial_p", lower_polynomial, 0, (intptr_t)&kPolys[11]},
};
const size_t tpu_lowerings_polynomial_count = sizeof tpu_lowerings_polynomial / sizeof tpu_lowerings_polynomial[0];
