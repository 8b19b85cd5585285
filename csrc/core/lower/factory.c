/* factory family of the lowering table (see lowering.h): ranges (arange,
 * linspace, logspace), eye, tril/triu_indices, and the random ops (uniform_,
 * normal_/normal, bernoulli_, random_, exponential_, log_normal_, cauchy_,
 * geometric_, randperm, multinomial). Factories
 * such as zeros/ones/full/rand/randn reach the backend as empty + one of
 * these (or fill_/zero_), so they need no rows of their own. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ctx_internal.h"
#include "emit.h"
#include "lowering.h"

/* Random bits come from tpu_lower_random_bits (Threefry-2x32 over the
 * device generator's state, see ctx.c). */
static tpu_hlo_value_t bits32(tpu_lower_ctx_t* ctx, const tpu_hlo_type_t* shape) {
  return tpu_lower_random_bits(ctx, shape, TPU_DTYPE_INT32);
}

static tpu_hlo_value_t bits64(tpu_lower_ctx_t* ctx, const tpu_hlo_type_t* shape) {
  return tpu_lower_random_bits(ctx, shape, TPU_DTYPE_INT64);
}

/* Mantissa digits of a float dtype (PyTorch's random_ upper bound and the
 * resolution of uniform draws). */
static int digits(tpu_dtype_t d) {
  switch (d) {
    case TPU_DTYPE_FLOAT16: return 11;
    case TPU_DTYPE_BFLOAT16: return 8;
    case TPU_DTYPE_FLOAT32: return 24;
    default: return 53;
  }
}

/* float32 for float32 and half types, float64 for float64. */
static tpu_dtype_t compute_dtype(tpu_dtype_t d) {
  return d == TPU_DTYPE_FLOAT64 ? TPU_DTYPE_FLOAT64 : TPU_DTYPE_FLOAT32;
}

/* Uniform in [0, 1) on a grid of 2^-digits(out), as `ct` over `shape`: the
 * top mantissa-many bits, scaled (exact in ct). */
static tpu_hlo_value_t uniform01(tpu_lower_ctx_t* ctx, const tpu_hlo_type_t* shape,
                                 tpu_dtype_t out, tpu_dtype_t ct) {
  tpu_hlo_builder_t* b = ctx->b;
  int k = digits(out);
  tpu_hlo_value_t bits = ct == TPU_DTYPE_FLOAT64 ? bits64(ctx, shape) : bits32(ctx, shape);
  tpu_hlo_type_t bt = tpu_hlo_value_type(b, bits);
  int width = bt.dtype == TPU_DTYPE_INT64 ? 64 : 32;
  bits = tpu_emit_binary(b, "stablehlo.shift_right_logical", bits,
                         tpu_hlo_constant_int(b, bt, width - k));
  tpu_hlo_type_t t = *shape;
  t.dtype = ct;
  return tpu_emit_binary(b, "stablehlo.multiply", tpu_emit_convert(b, bits, ct),
                         tpu_emit_const_like(b, &t, ldexp(1.0, -k)));
}

/* Argument i as `ct` over `shape`: a tensor broadcast, or a number. */
static tpu_hlo_value_t operand(tpu_lower_ctx_t* ctx, int i, const tpu_hlo_type_t* shape,
                               tpu_dtype_t ct) {
  tpu_hlo_type_t t = *shape;
  t.dtype = ct;
  tpu_hlo_value_t v = tpu_lower_arg(ctx, i)->kind == TPU_ARG_TENSOR ? tpu_lower_tensor(ctx, i)
                                                                    : tpu_lower_scalar(ctx, i, ct);
  return tpu_emit_cast_to(ctx->b, v, &t);
}

/* The overload after the '.', or "" (e.g. "Tensor_float", "from"). */
static const char* overload(const tpu_lower_ctx_t* ctx) {
  const char* dot = strrchr(tpu_lower_op_name(ctx), '.');
  return dot ? dot + 1 : "";
}

/* In-place forms (uniform_, normal_, ...) and "out" take self first. */
static bool base_is_inplace(const tpu_lower_ctx_t* ctx) {
  const char* name = tpu_lower_op_name(ctx);
  const char* dot = strrchr(name, '.');
  size_t len = dot ? (size_t)(dot - name) : strlen(name);
  return len > 0 && name[len - 1] == '_';
}

/* uniform_(self, from=0, to=1): from + u * (to - from). */
static tpu_status_t lower_uniform(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = ctx->b;
  tpu_hlo_type_t out = tpu_lower_output_type(ctx, 0);
  if (!tpu_dtype_is_floating(out.dtype)) return tpu_lower_decline(ctx, "non-float uniform_");
  tpu_dtype_t ct = compute_dtype(out.dtype);
  tpu_hlo_value_t u = uniform01(ctx, &out, out.dtype, ct);
  tpu_hlo_value_t from = operand(ctx, 1, &out, ct), to = operand(ctx, 2, &out, ct);
  tpu_hlo_value_t r = tpu_emit_binary(
      b, "stablehlo.add",
      tpu_emit_binary(b, "stablehlo.multiply", u, tpu_emit_binary(b, "stablehlo.subtract", to, from)),
      from);
  tpu_lower_set_output(ctx, 0, tpu_emit_convert(b, r, out.dtype));
  return NULL;
}

/* Standard normal by Box-Muller: sqrt(-2 log(1 - u1)) * cos(2 pi u2). */
static tpu_hlo_value_t standard_normal(tpu_lower_ctx_t* ctx, const tpu_hlo_type_t* shape,
                                       tpu_dtype_t ct) {
  tpu_hlo_builder_t* b = ctx->b;
  tpu_hlo_type_t t = *shape;
  t.dtype = ct;
  /* Full-resolution uniforms: 1 - u1 lies in (0, 1], so the log is finite. */
  tpu_dtype_t res = ct == TPU_DTYPE_FLOAT64 ? TPU_DTYPE_FLOAT64 : TPU_DTYPE_FLOAT32;
  tpu_hlo_value_t u1 = uniform01(ctx, shape, res, ct), u2 = uniform01(ctx, shape, res, ct);
  tpu_hlo_value_t r = tpu_emit_unary(
      b, "stablehlo.sqrt",
      tpu_emit_binary(b, "stablehlo.multiply", tpu_emit_const_like(b, &t, -2),
                      tpu_emit_unary(b, "stablehlo.log_plus_one",
                                     tpu_emit_unary(b, "stablehlo.negate", u1))));
  tpu_hlo_value_t c = tpu_emit_unary(
      b, "stablehlo.cosine",
      tpu_emit_binary(b, "stablehlo.multiply", tpu_emit_const_like(b, &t, 2 * M_PI), u2));
  return tpu_emit_binary(b, "stablehlo.multiply", r, c);
}

/* normal_(self, mean, std) and normal.out(self, mean, std): self only gives
 * the type; normal.{Tensor,float}_{Tensor,float}(mean, std): mean + std * z
 * with tensors broadcast to the output. */
static tpu_status_t lower_normal(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = ctx->b;
  tpu_hlo_type_t out = tpu_lower_output_type(ctx, 0);
  if (!tpu_dtype_is_floating(out.dtype)) return tpu_lower_decline(ctx, "non-float normal");
  int first = base_is_inplace(ctx) || strcmp(overload(ctx), "out") == 0 ? 1 : 0;
  tpu_dtype_t ct = compute_dtype(out.dtype);
  tpu_hlo_value_t z = standard_normal(ctx, &out, ct);
  tpu_hlo_value_t mean = operand(ctx, first, &out, ct), std = operand(ctx, first + 1, &out, ct);
  tpu_hlo_value_t r =
      tpu_emit_binary(b, "stablehlo.add", tpu_emit_binary(b, "stablehlo.multiply", std, z), mean);
  tpu_lower_set_output(ctx, 0, tpu_emit_convert(b, r, out.dtype));
  return NULL;
}

/* bernoulli_(self, p: float | Tensor), bernoulli.p(self, p), and
 * bernoulli(self) / bernoulli.out where p = self: u < p. */
static tpu_status_t lower_bernoulli(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = ctx->b;
  tpu_hlo_type_t out = tpu_lower_output_type(ctx, 0);
  const tpu_lower_arg_t* p_arg = tpu_lower_arg(ctx, 1);
  int pi = p_arg->kind == TPU_ARG_FLOAT || p_arg->kind == TPU_ARG_TENSOR ||
                   p_arg->kind == TPU_ARG_SCALAR
               ? 1
               : 0;
  tpu_dtype_t pd = tpu_lower_arg(ctx, pi)->kind == TPU_ARG_TENSOR
                       ? tpu_lower_arg(ctx, pi)->type.dtype
                       : TPU_DTYPE_FLOAT64;
  if (!tpu_dtype_is_floating(pd)) return tpu_lower_decline(ctx, "non-float p");
  tpu_dtype_t ct = compute_dtype(pd);
  tpu_hlo_value_t u = uniform01(ctx, &out, ct, ct);
  tpu_hlo_value_t p = operand(ctx, pi, &out, ct);
  tpu_lower_set_output(ctx, 0, tpu_emit_convert(b, tpu_emit_compare(b, "LT", u, p), out.dtype));
  return NULL;
}

/* Largest value random_ draws by default for a dtype (inclusive), as
 * PyTorch: 2^digits for floats, the type's max for integers. */
static bool default_to_inc(tpu_dtype_t d, int64_t* to_inc) {
  switch (d) {
    case TPU_DTYPE_BOOL: *to_inc = 1; return true;
    case TPU_DTYPE_UINT8: *to_inc = 255; return true;
    case TPU_DTYPE_INT8: *to_inc = INT8_MAX; return true;
    case TPU_DTYPE_INT16: *to_inc = INT16_MAX; return true;
    case TPU_DTYPE_INT32: *to_inc = INT32_MAX; return true;
    case TPU_DTYPE_INT64: *to_inc = INT64_MAX; return true;
    default:
      if (!tpu_dtype_is_floating(d)) return false;
      *to_inc = (int64_t)1 << digits(d);
      return true;
  }
}

/* random_(self), random_.to(self, to), random_.from(self, from, to?):
 * integers uniform in [from, to) (to=None: up to the dtype's default). */
static tpu_status_t lower_random(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = ctx->b;
  tpu_hlo_type_t out = tpu_lower_output_type(ctx, 0);
  const char* ov = overload(ctx);
  int64_t from = 0, to_inc;
  if (!default_to_inc(out.dtype, &to_inc)) return tpu_lower_decline(ctx, "dtype");
  if (strcmp(ov, "to") == 0 || strcmp(ov, "to_out") == 0) {
    from = 0;
    to_inc = tpu_lower_arg(ctx, 1)->i - 1;
  } else if (strcmp(ov, "from") == 0 || strcmp(ov, "from_out") == 0) {
    from = tpu_lower_arg(ctx, 1)->i;
    if (tpu_lower_arg(ctx, 2)->kind == TPU_ARG_INT) to_inc = tpu_lower_arg(ctx, 2)->i - 1;
  }
  if (to_inc < from) return tpu_lower_decline(ctx, "empty range");
  /* Range size to_inc - from + 1 in unsigned arithmetic; 0 means 2^64. */
  uint64_t range = (uint64_t)to_inc - (uint64_t)from + 1;
  tpu_hlo_type_t t = out;
  t.dtype = TPU_DTYPE_INT64;
  tpu_hlo_value_t v = bits64(ctx, &out);
  if (range != 0) {
    if (range > ((uint64_t)1 << 63)) return tpu_lower_decline(ctx, "range above 2^63");
    /* 63 non-negative bits, then reduce into the range. */
    v = tpu_emit_binary(b, "stablehlo.shift_right_logical", v, tpu_hlo_constant_int(b, t, 1));
    if (range != ((uint64_t)1 << 63))
      v = tpu_emit_binary(b, "stablehlo.remainder", v, tpu_hlo_constant_int(b, t, (int64_t)range));
  }
  v = tpu_emit_binary(b, "stablehlo.add", v, tpu_hlo_constant_int(b, t, from));
  tpu_lower_set_output(ctx, 0, tpu_emit_convert(b, v, out.dtype));
  return NULL;
}

/* exponential_(self, lambd): -log(1 - u) / lambd. */
static tpu_status_t lower_exponential(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = ctx->b;
  tpu_hlo_type_t out = tpu_lower_output_type(ctx, 0);
  if (!tpu_dtype_is_floating(out.dtype)) return tpu_lower_decline(ctx, "non-float exponential_");
  tpu_dtype_t ct = compute_dtype(out.dtype);
  tpu_hlo_value_t u = uniform01(ctx, &out, ct, ct);
  tpu_hlo_value_t e = tpu_emit_unary(
      b, "stablehlo.negate",
      tpu_emit_unary(b, "stablehlo.log_plus_one", tpu_emit_unary(b, "stablehlo.negate", u)));
  tpu_hlo_value_t r = tpu_emit_binary(b, "stablehlo.divide", e, operand(ctx, 1, &out, ct));
  tpu_lower_set_output(ctx, 0, tpu_emit_convert(b, r, out.dtype));
  return NULL;
}

/* log_normal_(self, mean, std): exp(mean + std * z). */
static tpu_status_t lower_log_normal(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = ctx->b;
  tpu_hlo_type_t out = tpu_lower_output_type(ctx, 0);
  if (!tpu_dtype_is_floating(out.dtype)) return tpu_lower_decline(ctx, "non-float log_normal_");
  tpu_dtype_t ct = compute_dtype(out.dtype);
  tpu_hlo_value_t z = standard_normal(ctx, &out, ct);
  tpu_hlo_value_t r = tpu_emit_binary(
      b, "stablehlo.add", tpu_emit_binary(b, "stablehlo.multiply", operand(ctx, 2, &out, ct), z),
      operand(ctx, 1, &out, ct));
  tpu_lower_set_output(ctx, 0, tpu_emit_convert(b, tpu_emit_unary(b, "stablehlo.exponential", r),
                                                out.dtype));
  return NULL;
}

/* cauchy_(self, median, sigma): median + sigma * tan(pi * (u - 1/2)). */
static tpu_status_t lower_cauchy(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = ctx->b;
  tpu_hlo_type_t out = tpu_lower_output_type(ctx, 0);
  if (!tpu_dtype_is_floating(out.dtype)) return tpu_lower_decline(ctx, "non-float cauchy_");
  tpu_dtype_t ct = compute_dtype(out.dtype);
  tpu_hlo_type_t t = out;
  t.dtype = ct;
  tpu_hlo_value_t u = uniform01(ctx, &out, ct, ct);
  tpu_hlo_value_t angle = tpu_emit_binary(
      b, "stablehlo.multiply", tpu_emit_const_like(b, &t, M_PI),
      tpu_emit_binary(b, "stablehlo.subtract", u, tpu_emit_const_like(b, &t, 0.5)));
  /* tan as sin / cos: both are long-standing StableHLO ops. */
  tpu_hlo_value_t tan = tpu_emit_binary(b, "stablehlo.divide", tpu_emit_unary(b, "stablehlo.sine", angle),
                                        tpu_emit_unary(b, "stablehlo.cosine", angle));
  tpu_hlo_value_t r = tpu_emit_binary(
      b, "stablehlo.add", tpu_emit_binary(b, "stablehlo.multiply", operand(ctx, 2, &out, ct), tan),
      operand(ctx, 1, &out, ct));
  tpu_lower_set_output(ctx, 0, tpu_emit_convert(b, r, out.dtype));
  return NULL;
}

/* geometric_(self, p): trials to the first success, ceil(log(1 - u) /
 * log1p(-p)), at least 1. */
static tpu_status_t lower_geometric(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = ctx->b;
  tpu_hlo_type_t out = tpu_lower_output_type(ctx, 0);
  if (out.dtype == TPU_DTYPE_BOOL) return tpu_lower_decline(ctx, "bool geometric_");
  tpu_dtype_t ct = tpu_dtype_is_floating(out.dtype) ? compute_dtype(out.dtype) : TPU_DTYPE_FLOAT64;
  tpu_hlo_type_t t = out;
  t.dtype = ct;
  tpu_hlo_value_t u = uniform01(ctx, &out, ct, ct);
  tpu_hlo_value_t num =
      tpu_emit_unary(b, "stablehlo.log_plus_one", tpu_emit_unary(b, "stablehlo.negate", u));
  tpu_hlo_value_t den = tpu_emit_unary(
      b, "stablehlo.log_plus_one", tpu_emit_unary(b, "stablehlo.negate", operand(ctx, 1, &out, ct)));
  tpu_hlo_value_t r = tpu_emit_unary(b, "stablehlo.ceil", tpu_emit_binary(b, "stablehlo.divide", num, den));
  r = tpu_emit_binary(b, "stablehlo.maximum", r, tpu_emit_const_like(b, &t, 1));
  tpu_lower_set_output(ctx, 0, tpu_emit_convert(b, r, out.dtype));
  return NULL;
}

/* randperm(n): sort random keys, carrying iota along. */
static tpu_status_t lower_randperm(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = ctx->b;
  tpu_hlo_type_t out = tpu_lower_output_type(ctx, 0);
  if (out.rank != 1 || out.dtype == TPU_DTYPE_BOOL) return tpu_lower_decline(ctx, "output type");
  tpu_hlo_value_t ops[2] = {bits32(ctx, &out), tpu_emit_iota(b, &out, 0)};
  tpu_hlo_type_t types[2] = {tpu_hlo_value_type(b, ops[0]), out};
  tpu_hlo_region_op_begin(b, "stablehlo.sort", ops, 2, types, 2,
                          "dimension = 0 : i64, is_stable = true");
  tpu_hlo_type_t bt[4] = {tpu_hlo_type_scalar(TPU_DTYPE_INT32), tpu_hlo_type_scalar(TPU_DTYPE_INT32),
                          tpu_hlo_type_scalar(out.dtype), tpu_hlo_type_scalar(out.dtype)};
  tpu_hlo_value_t a[4];
  tpu_hlo_block_begin(b, bt, 4, a);
  tpu_hlo_value_t lt = tpu_emit_compare(b, "LT", a[0], a[1]);
  tpu_hlo_block_return(b, &lt, 1);
  tpu_hlo_value_t res[2];
  tpu_hlo_region_op_end(b, res);
  tpu_lower_set_output(ctx, 0, res[1]);
  return NULL;
}

/* multinomial(self, num_samples, replacement, *, generator) for 1-D (one
 * row) or 2-D (rows of) probabilities, as PyTorch's kernels sample:
 *  - without replacement, or one sample: the exponential race
 *    (Distributions.cpp): the indices of the num_samples largest p / E,
 *    E ~ Exp(1), largest first. E is -log1p(-v) with v on the open
 *    interval (0, 1), so it is never 0 (p / 0 would put a zero-probability
 *    category first) nor infinite;
 *  - with replacement: for u ~ U(0, 1] per sample, the first category whose
 *    normalised cumulative sum is >= u (CPU's binary search). The cumulative
 *    sum only rises at categories of nonzero probability (a running max of
 *    the sums taken at those), so a zero-probability category is never
 *    drawn whatever the scan's rounding; the last value is exactly 1.
 * CPU refuses bad values (negative, inf, NaN, rows summing to 0) by reading
 * them: dispatch.cpp's check_multinomial does the same before this runs.
 * What CPU refuses by shape or dtype is declined, so the fallback raises
 * it. */
static tpu_status_t lower_multinomial(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = ctx->b;
  const tpu_lower_arg_t* p = tpu_lower_arg(ctx, 0);
  if (p->kind != TPU_ARG_TENSOR || !tpu_dtype_is_floating(p->type.dtype) || p->type.rank < 1 ||
      p->type.rank > 2)
    return tpu_lower_decline(ctx, "probabilities that are not a 1-D or 2-D float tensor");
  int64_t n = tpu_lower_arg(ctx, 1)->i;
  bool replacement = tpu_lower_arg(ctx, 2)->i != 0;
  int64_t rows = p->type.rank == 2 ? p->type.dims[0] : 1, cats = p->type.dims[p->type.rank - 1];
  tpu_hlo_type_t out = tpu_lower_output_type(ctx, 0);
  if (out.dtype != TPU_DTYPE_INT64 || n <= 0 || (!replacement && n > cats) ||
      cats > ((int64_t)1 << 24) || rows * cats == 0)
    return tpu_lower_decline(ctx, "multinomial of %lld samples from %lld x %lld", (long long)n,
                             (long long)rows, (long long)cats);
  tpu_dtype_t ct = compute_dtype(p->type.dtype);
  const int64_t pd[2] = {rows, cats}, sd[2] = {rows, n};
  tpu_hlo_value_t probs = tpu_emit_reshape(b, tpu_emit_convert(b, tpu_lower_tensor(ctx, 0), ct), pd, 2);
  tpu_hlo_type_t pt = tpu_hlo_type_make(ct, 2, pd);
  tpu_hlo_type_t f32 = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 2, pd);
  tpu_hlo_value_t result;
  if (!replacement || n == 1) {
    /* v = (k + 1/2) 2^-23 for 23 random bits k: exact in float32, in (0, 1). */
    tpu_hlo_value_t k = tpu_emit_binary(b, "stablehlo.shift_right_logical", bits32(ctx, &f32),
                                        tpu_hlo_constant_int(b, tpu_hlo_type_make(TPU_DTYPE_INT32, 2, pd), 9));
    tpu_hlo_value_t v = tpu_emit_mul(b, tpu_emit_add(b, tpu_emit_convert(b, k, TPU_DTYPE_FLOAT32),
                                                     tpu_emit_const_like(b, &f32, 0.5)),
                                     tpu_emit_const_like(b, &f32, ldexp(1.0, -23)));
    tpu_hlo_value_t e = tpu_emit_unary(
        b, "stablehlo.negate", tpu_emit_unary(b, "stablehlo.log_plus_one", tpu_emit_unary(b, "stablehlo.negate", v)));
    tpu_hlo_value_t q = tpu_emit_div(b, probs, tpu_emit_convert(b, e, ct));
    tpu_hlo_value_t sorted, order;
    tpu_emit_sort(b, q, 1, TPU_SORT_DESCENDING, &sorted, &order);
    const int64_t start[2] = {0, 0}, limit[2] = {rows, n}, stride[2] = {1, 1};
    result = tpu_emit_slice(b, order, start, limit, stride);
  } else {
    tpu_hlo_value_t cum = tpu_emit_scan(b, probs, 1, 0, "stablehlo.add", tpu_emit_binary);
    tpu_hlo_value_t zero = tpu_emit_const_like(b, &pt, 0);
    cum = tpu_emit_select(b, tpu_emit_compare(b, "GT", probs, zero), cum, zero);
    cum = tpu_emit_scan(b, cum, 1, 0, "stablehlo.maximum", tpu_emit_binary);
    const int64_t ls[2] = {0, cats - 1}, ll[2] = {rows, cats}, one[2] = {1, 1};
    tpu_hlo_value_t total = tpu_emit_slice(b, cum, ls, ll, one);
    cum = tpu_emit_div(b, cum, tpu_emit_broadcast_to(b, total, &pt));
    /* u = 1 - k 2^-24 for 24 random bits k: exact, in (0, 1]. */
    tpu_hlo_type_t sf = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 2, sd);
    tpu_hlo_value_t k = tpu_emit_binary(b, "stablehlo.shift_right_logical", bits32(ctx, &sf),
                                        tpu_hlo_constant_int(b, tpu_hlo_type_make(TPU_DTYPE_INT32, 2, sd), 8));
    tpu_hlo_value_t u = tpu_emit_sub(b, tpu_emit_const_like(b, &sf, 1),
                                     tpu_emit_mul(b, tpu_emit_convert(b, k, TPU_DTYPE_FLOAT32),
                                                  tpu_emit_const_like(b, &sf, ldexp(1.0, -24))));
    tpu_hlo_value_t none = {-1};
    result = tpu_emit_search_sorted(b, cum, tpu_emit_convert(b, u, ct), none, false);
  }
  tpu_lower_set_output(ctx, 0, tpu_emit_reshape(b, result, out.dims, out.rank));
  return NULL;
}

/* ---- ranges ---- */

/* Scalar argument i as `dtype` (rank 0). */
static tpu_hlo_value_t scalar(tpu_lower_ctx_t* ctx, int i, tpu_dtype_t dtype) {
  return tpu_lower_scalar(ctx, i, dtype);
}

/* arange.start_out(start, end, step): start + i * step, computed like
 * PyTorch's CPU kernel in the accumulate type (double for float/double,
 * float for half types, int64 for integers); the length is the output's. */
static tpu_status_t lower_arange(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = ctx->b;
  tpu_hlo_type_t out = tpu_lower_output_type(ctx, 0);
  if (out.rank != 1 || out.dtype == TPU_DTYPE_BOOL || tpu_dtype_is_complex(out.dtype))
    return tpu_lower_decline(ctx, "output type");
  /* arange.out(end, out) has no start / step. */
  bool has_start = tpu_lower_num_args(ctx) >= 3 && tpu_lower_arg(ctx, 2)->kind != TPU_ARG_TENSOR;
  tpu_dtype_t acc = out.dtype == TPU_DTYPE_FLOAT16 || out.dtype == TPU_DTYPE_BFLOAT16
                        ? TPU_DTYPE_FLOAT32
                        : tpu_dtype_is_floating(out.dtype) ? TPU_DTYPE_FLOAT64 : TPU_DTYPE_INT64;
  tpu_hlo_type_t t = out;
  t.dtype = acc;
  tpu_hlo_value_t start = has_start ? scalar(ctx, 0, acc) : tpu_emit_const(b, acc, 0);
  tpu_hlo_value_t step = has_start ? scalar(ctx, 2, acc) : tpu_emit_const(b, acc, 1);
  tpu_hlo_value_t r = tpu_emit_binary(
      b, "stablehlo.add", tpu_emit_broadcast_to(b, start, &t),
      tpu_emit_binary(b, "stablehlo.multiply", tpu_emit_iota(b, &t, 0),
                      tpu_emit_broadcast_to(b, step, &t)));
  tpu_lower_set_output(ctx, 0, tpu_emit_convert(b, r, out.dtype));
  return NULL;
}

/* The CPU linspace kernel's values in `ct` over `out`'s shape: step =
 * (end - start) / (steps - 1); the first half counts up from start, the
 * rest down from end. start / end are given in ct. */
static tpu_hlo_value_t linspace_values(tpu_hlo_builder_t* b, const tpu_hlo_type_t* out,
                                       tpu_hlo_value_t start, tpu_hlo_value_t end,
                                       tpu_dtype_t ct) {
  int64_t steps = out->dims[0];
  tpu_hlo_type_t t = *out;
  t.dtype = ct;
  if (steps == 1) return tpu_emit_broadcast_to(b, start, &t);
  /* The correctly rounded quotient (tpu_emit_div_by_const), in float64
   * and rounded once for the narrower types. */
  tpu_hlo_value_t range = tpu_emit_convert(b, tpu_emit_binary(b, "stablehlo.subtract", end, start),
                                           TPU_DTYPE_FLOAT64);
  tpu_hlo_value_t step = tpu_emit_convert(b, tpu_emit_div_by_const(b, range, (double)(steps - 1)), ct);
  tpu_hlo_type_t it = *out;
  it.dtype = TPU_DTYPE_INT64;
  tpu_hlo_value_t idx = tpu_emit_iota(b, &it, 0);
  tpu_hlo_value_t stepb = tpu_emit_broadcast_to(b, step, &t);
  tpu_hlo_value_t up = tpu_emit_binary(
      b, "stablehlo.add", tpu_emit_broadcast_to(b, start, &t),
      tpu_emit_binary(b, "stablehlo.multiply", stepb, tpu_emit_convert(b, idx, ct)));
  tpu_hlo_value_t back = tpu_emit_binary(b, "stablehlo.subtract",
                                         tpu_hlo_constant_int(b, it, steps - 1), idx);
  tpu_hlo_value_t down = tpu_emit_binary(
      b, "stablehlo.subtract", tpu_emit_broadcast_to(b, end, &t),
      tpu_emit_binary(b, "stablehlo.multiply", stepb, tpu_emit_convert(b, back, ct)));
  tpu_hlo_value_t first_half =
      tpu_emit_compare(b, "LT", idx, tpu_hlo_constant_int(b, it, steps / 2));
  return tpu_emit_select(b, first_half, up, down);
}

/* linspace(start, end, steps): floats compute in the output type, integers
 * in double from the integer endpoints (then truncate), like the CPU. */
static tpu_status_t lower_linspace(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = ctx->b;
  tpu_hlo_type_t out = tpu_lower_output_type(ctx, 0);
  if (out.rank != 1 || out.dtype == TPU_DTYPE_BOOL || tpu_dtype_is_complex(out.dtype))
    return tpu_lower_decline(ctx, "output type");
  if (out.dims[0] == 0) {
    tpu_lower_set_output(ctx, 0, tpu_emit_const_like(b, &out, 0));
    return NULL;
  }
  bool fl = tpu_dtype_is_floating(out.dtype);
  tpu_dtype_t ct = fl ? out.dtype : TPU_DTYPE_FLOAT64;
  tpu_hlo_value_t start = tpu_emit_convert(b, scalar(ctx, 0, out.dtype), ct);
  tpu_hlo_value_t end = tpu_emit_convert(b, scalar(ctx, 1, out.dtype), ct);
  tpu_lower_set_output(ctx, 0, tpu_emit_convert(b, linspace_values(b, &out, start, end, ct), out.dtype));
  return NULL;
}

/* logspace(start, end, steps, base) as CPU's kernel for real dtypes
 * (RangeFactories.cpp): start and end taken in the output dtype, step =
 * double(end - start) / (steps - 1) (the difference in C++ arithmetic),
 * and base ** exponent in double, the exponent start + step * i for the
 * first half and end - step * (steps - 1 - i) for the rest; one step is
 * base ** start (start as given). The double result is stored as a C++
 * assignment would: integers truncated (and wrapped), half types through
 * float. */
static tpu_status_t lower_logspace(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = ctx->b;
  tpu_hlo_type_t out = tpu_lower_output_type(ctx, 0);
  if (out.rank != 1 || out.dtype == TPU_DTYPE_BOOL || tpu_dtype_is_complex(out.dtype))
    return tpu_lower_decline(ctx, "logspace into %s", tpu_dtype_name(out.dtype));
  int64_t steps = out.dims[0];
  /* One step fills base ** start, which CPU refuses when it overflows an
   * integer dtype: refused before the call (check_logspace_fill in
   * csrc/torch/dispatch.cpp), so here it fits and truncates. */
  if (steps == 0) {
    tpu_lower_set_output(ctx, 0, tpu_emit_const_like(b, &out, 0));
    return NULL;
  }
  tpu_hlo_type_t t = out;
  t.dtype = TPU_DTYPE_FLOAT64;
  const tpu_lower_arg_t* base = tpu_lower_arg(ctx, 3);
  double base_v = base->kind == TPU_ARG_FLOAT ? base->f : base->kind == TPU_ARG_INT ? (double)base->i : 10.0;
  tpu_hlo_value_t e;
  if (steps == 1) {
    e = tpu_emit_broadcast_to(b, scalar(ctx, 0, TPU_DTYPE_FLOAT64), &t);
  } else {
    tpu_hlo_value_t start = scalar(ctx, 0, out.dtype), end = scalar(ctx, 1, out.dtype);
    /* C++ arithmetic: narrow integers promote to int (no wrap), floats
     * subtract in their own type. */
    tpu_hlo_value_t diff =
        tpu_dtype_is_floating(out.dtype)
            ? tpu_emit_convert(b, tpu_emit_sub(b, end, start), TPU_DTYPE_FLOAT64)
            : tpu_emit_sub(b, tpu_emit_convert(b, end, TPU_DTYPE_FLOAT64),
                           tpu_emit_convert(b, start, TPU_DTYPE_FLOAT64));
    tpu_hlo_value_t step = tpu_emit_broadcast_to(
        b, tpu_emit_div_by_const(b, diff, (double)(steps - 1)), &t);
    tpu_hlo_type_t it = out;
    it.dtype = TPU_DTYPE_INT64;
    tpu_hlo_value_t idx = tpu_emit_iota(b, &it, 0);
    tpu_hlo_value_t up = tpu_emit_add(
        b, tpu_emit_broadcast_to(b, tpu_emit_convert(b, start, TPU_DTYPE_FLOAT64), &t),
        tpu_emit_mul(b, step, tpu_emit_convert(b, idx, TPU_DTYPE_FLOAT64)));
    tpu_hlo_value_t back = tpu_emit_sub(b, tpu_hlo_constant_int(b, it, steps - 1), idx);
    tpu_hlo_value_t down = tpu_emit_sub(
        b, tpu_emit_broadcast_to(b, tpu_emit_convert(b, end, TPU_DTYPE_FLOAT64), &t),
        tpu_emit_mul(b, step, tpu_emit_convert(b, back, TPU_DTYPE_FLOAT64)));
    e = tpu_emit_select(b, tpu_emit_compare(b, "LT", idx, tpu_hlo_constant_int(b, it, steps / 2)),
                        up, down);
  }
  tpu_hlo_value_t r = tpu_emit_binary(b, "stablehlo.power", tpu_emit_const_like(b, &t, base_v), e);
  if (out.dtype == TPU_DTYPE_BFLOAT16 || out.dtype == TPU_DTYPE_FLOAT16)
    r = tpu_emit_convert(b, r, TPU_DTYPE_FLOAT32);
  /* Narrow integers wrap as C++'s conversion does (464 -> uint8 208): via
   * int64, where XLA's direct conversion saturates. */
  else if (!tpu_dtype_is_floating(out.dtype))
    r = tpu_emit_convert(b, r, TPU_DTYPE_INT64);
  tpu_lower_set_output(ctx, 0, tpu_emit_convert(b, r, out.dtype));
  return NULL;
}

/* eye(n[, m]): 1 where row == column. */
static tpu_status_t lower_eye(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = ctx->b;
  tpu_hlo_type_t out = tpu_lower_output_type(ctx, 0);
  if (out.rank != 2) return tpu_lower_decline(ctx, "output rank");
  tpu_hlo_type_t it = out;
  it.dtype = TPU_DTYPE_INT64;
  tpu_hlo_value_t diag = tpu_emit_compare(b, "EQ", tpu_emit_iota(b, &it, 0), tpu_emit_iota(b, &it, 1));
  tpu_lower_set_output(ctx, 0, tpu_emit_convert(b, diag, out.dtype));
  return NULL;
}

/* tril_indices / triu_indices(row, col, offset): every argument is
 * structural, so the [2, N] result is a constant computed here, in
 * PyTorch's row-major order. The row's data word: LOWER or UPPER. */
enum { UPPER, LOWER };
static tpu_status_t lower_tri_indices(tpu_lower_ctx_t* ctx) {
  bool lower = tpu_lower_data(ctx) == LOWER;
  tpu_hlo_type_t out = tpu_lower_output_type(ctx, 0);
  int64_t rows = tpu_lower_arg(ctx, 0)->i, cols = tpu_lower_arg(ctx, 1)->i;
  int64_t offset = tpu_lower_arg(ctx, 2)->kind == TPU_ARG_INT ? tpu_lower_arg(ctx, 2)->i : 0;
  if (out.rank != 2 || out.dims[0] != 2 ||
      (out.dtype != TPU_DTYPE_INT64 && out.dtype != TPU_DTYPE_INT32))
    return tpu_lower_decline(ctx, "output type");
  int64_t n = out.dims[1];
  int64_t* v = calloc((size_t)(2 * n + 1), sizeof *v);
  if (!v) return tpu_status_oom(NULL);
  int64_t k = 0;
  for (int64_t i = 0; i < rows; i++)
    for (int64_t j = 0; j < cols; j++)
      if (lower ? j - i <= offset : j - i >= offset) {
        if (k < n) {
          v[k] = i;
          v[n + k] = j;
        }
        k++;
      }
  if (k != n) {
    free(v);
    return tpu_lower_decline(ctx, "count %lld differs from the output's %lld", (long long)k,
                             (long long)n);
  }
  tpu_hlo_type_t t64 = out;
  t64.dtype = TPU_DTYPE_INT64;
  tpu_hlo_value_t c = tpu_hlo_constant_dense(ctx->b, t64, v);
  free(v);
  tpu_lower_set_output(ctx, 0, tpu_emit_convert(ctx->b, c, out.dtype));
  return NULL;
}

const tpu_lowering_t tpu_lowerings_factory[] = {
    {"arange", lower_arange, 0},
    {"linspace", lower_linspace, 0},
    {"logspace", lower_logspace, 0},
    {"eye", lower_eye, 0},
    {"tril_indices", lower_tri_indices, 0, LOWER},
    {"triu_indices", lower_tri_indices, 0, UPPER},
    {"uniform", lower_uniform, TPU_LOWER_NEEDS_RNG},
    {"normal", lower_normal, TPU_LOWER_NEEDS_RNG},
    {"bernoulli", lower_bernoulli, TPU_LOWER_NEEDS_RNG},
    {"random", lower_random, TPU_LOWER_NEEDS_RNG},
    {"exponential", lower_exponential, TPU_LOWER_NEEDS_RNG},
    {"randperm", lower_randperm, TPU_LOWER_NEEDS_RNG},
    {"multinomial", lower_multinomial, TPU_LOWER_NEEDS_RNG},
    {"log_normal", lower_log_normal, TPU_LOWER_NEEDS_RNG},
    {"cauchy", lower_cauchy, TPU_LOWER_NEEDS_RNG},
    {"geometric", lower_geometric, TPU_LOWER_NEEDS_RNG},
};
const size_t tpu_lowerings_factory_count =
    sizeof tpu_lowerings_factory / sizeof tpu_lowerings_factory[0];
