/* foreach family of the lowering table (see lowering.h): the _foreach_*
 * ops that optimizers (SGD, Adam, AdamW with foreach=True) and
 * clip_grad_norm_ call. One program per call covers the whole list; output
 * k is list element k (for in-place ops, the new value of self[k]).
 *
 * Operands of one element k come from, by argument kind:
 *   TENSORS            element k of the list
 *   SCALARS            element k of a Scalar[] (one f64 runtime argument)
 *   TENSOR / SCALAR    rank 0: one value for every element (Scalar, 0-dim
 *                      tensor); a rank-1 TENSOR (the Tensor `scalars` of
 *                      addcmul/addcdiv) holds one per element: its element k
 *   INT / FLOAT        a constant
 * Half types compute in float32 and round once, like PyTorch's CPU
 * kernels (opmath). */
#include <math.h>
#include <string.h>

#include "emit.h"
#include "lowering.h"

/* float32 for half types, else the dtype itself. */
static tpu_dtype_t compute_dtype(tpu_dtype_t d) {
  return d == TPU_DTYPE_FLOAT16 || d == TPU_DTYPE_BFLOAT16 ? TPU_DTYPE_FLOAT32 : d;
}

/* Element k of a rank-1 value, as a rank-0 value. */
static tpu_hlo_value_t element(tpu_hlo_builder_t* b, tpu_hlo_value_t v, int k) {
  int64_t start = k, limit = k + 1, stride = 1;
  return tpu_emit_reshape(b, tpu_emit_slice(b, v, &start, &limit, &stride), NULL, 0);
}

/* Argument i's operand for list element k, as `ct` over `shape`. */
static tpu_hlo_value_t operand(tpu_lower_ctx_t* ctx, int i, int k, const tpu_hlo_type_t* shape,
                               tpu_dtype_t ct) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  const tpu_lower_arg_t* a = tpu_lower_arg(ctx, i);
  tpu_hlo_value_t v;
  if (a->kind == TPU_ARG_TENSORS) {
    v = tpu_lower_list_tensor(ctx, i, k);
  } else if (a->kind == TPU_ARG_SCALARS) {
    v = tpu_lower_scalar_at(ctx, i, k, ct);
  } else if (a->kind == TPU_ARG_TENSOR && a->type.rank == 1) {
    /* The Tensor `scalars` of addcmul/addcdiv: one per element. */
    v = element(b, tpu_lower_tensor(ctx, i), k);
  } else if (a->kind == TPU_ARG_TENSOR) {
    v = tpu_lower_tensor(ctx, i);
  } else {
    return tpu_emit_broadcast_to(b, tpu_lower_scalar(ctx, i, ct), shape);
  }
  tpu_hlo_type_t t = *shape;
  t.dtype = ct;
  return tpu_emit_cast_to(b, v, &t);
}

/* The combine step of one op over the operands of one element. */
typedef tpu_hlo_value_t (*combine_fn)(tpu_hlo_builder_t* b, const tpu_hlo_value_t* v, int n);

/* The number of arguments before the out= list of a "*.out" / "*_out"
 * overload (all of them otherwise). */
static int num_inputs(const tpu_lower_ctx_t* ctx) {
  const char* dot = strrchr(tpu_lower_op_name(ctx), '.');
  size_t len = dot ? strlen(dot) : 0;
  bool out = dot && (strcmp(dot, ".out") == 0 || (len > 4 && strcmp(dot + len - 4, "_out") == 0));
  return tpu_lower_num_args(ctx) - (out ? 1 : 0);
}

/* Whether argument i is present (an optional Scalar such as alpha). */
static bool present(const tpu_lower_ctx_t* ctx, int i) {
  if (i >= num_inputs(ctx)) return false;
  tpu_arg_kind_t k = tpu_lower_arg(ctx, i)->kind;
  return k == TPU_ARG_SCALAR || k == TPU_ARG_INT || k == TPU_ARG_FLOAT || k == TPU_ARG_TENSOR ||
         k == TPU_ARG_TENSORS || k == TPU_ARG_SCALARS;
}

/* Arguments the engine cannot describe arrive as OTHER. */
static tpu_status_t check_args(tpu_lower_ctx_t* ctx, int n) {
  for (int j = 0; j < n; j++)
    if (j < num_inputs(ctx) && tpu_lower_arg(ctx, j)->kind == TPU_ARG_OTHER)
      return tpu_lower_decline(ctx, "argument %d is not readable", j);
  return NULL;
}

/* A row's data: output k = fn(operands of element k), the operands being
 * arguments 0 .. n-1, the optional ones only when present. */
enum { ALLOW_BOOL = 1, NO_UPCAST = 2 };
typedef struct {
  combine_fn fn;
  int n;
  unsigned flags;
} map_op_t;
#define MAP(fn, n, flags) ((intptr_t)&(const map_op_t){fn, n, flags})

static tpu_status_t foreach_map(tpu_lower_ctx_t* ctx) {
  const map_op_t* op = (const map_op_t*)tpu_lower_data(ctx);
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_status_t s = check_args(ctx, op->n);
  if (s) return s;
  for (int k = 0; k < tpu_lower_num_outputs(ctx); k++) {
    tpu_hlo_type_t out = tpu_lower_output_type(ctx, k);
    if (out.dtype == TPU_DTYPE_BOOL && !(op->flags & ALLOW_BOOL))
      return tpu_lower_decline(ctx, "bool lists");
    if (tpu_dtype_is_complex(out.dtype)) return tpu_lower_decline(ctx, "complex lists");
    tpu_hlo_type_t ct = out;
    if (!(op->flags & NO_UPCAST)) ct.dtype = compute_dtype(out.dtype);
    tpu_hlo_value_t v[4];
    int m = 0;
    for (int j = 0; j < op->n; j++)
      if (present(ctx, j)) v[m++] = operand(ctx, j, k, &ct, ct.dtype);
    tpu_lower_set_output(ctx, k, tpu_emit_convert(b, op->fn(b, v, m), out.dtype));
  }
  return NULL;
}

/* ---- combine steps ---- */

static tpu_hlo_value_t nan_to(tpu_hlo_builder_t* b, tpu_hlo_value_t x, tpu_hlo_value_t r) {
  /* NaN in x wins over r (float only; x != x is false for integers). */
  return tpu_emit_select(b, tpu_emit_compare(b, "NE", x, x), x, r);
}

/* self (+|-) alpha * other; alpha is v[2] when given. */
static tpu_hlo_value_t c_add(tpu_hlo_builder_t* b, const tpu_hlo_value_t* v, int n) {
  tpu_hlo_value_t y = n > 2 ? tpu_emit_binary(b, "stablehlo.multiply", v[2], v[1]) : v[1];
  return tpu_emit_binary(b, "stablehlo.add", v[0], y);
}
static tpu_hlo_value_t c_sub(tpu_hlo_builder_t* b, const tpu_hlo_value_t* v, int n) {
  tpu_hlo_value_t y = n > 2 ? tpu_emit_binary(b, "stablehlo.multiply", v[2], v[1]) : v[1];
  return tpu_emit_binary(b, "stablehlo.subtract", v[0], y);
}
static tpu_hlo_value_t c_mul(tpu_hlo_builder_t* b, const tpu_hlo_value_t* v, int n) {
  return tpu_emit_binary(b, "stablehlo.multiply", v[0], v[1]);
}
static tpu_hlo_value_t c_div(tpu_hlo_builder_t* b, const tpu_hlo_value_t* v, int n) {
  return tpu_emit_binary(b, "stablehlo.divide", v[0], v[1]);
}
/* self + value * t1 * t2, multiplied in PyTorch's order. */
static tpu_hlo_value_t c_addcmul(tpu_hlo_builder_t* b, const tpu_hlo_value_t* v, int n) {
  tpu_hlo_value_t p = n > 3 ? tpu_emit_binary(b, "stablehlo.multiply", v[3], v[1]) : v[1];
  p = tpu_emit_binary(b, "stablehlo.multiply", p, v[2]);
  return tpu_emit_binary(b, "stablehlo.add", v[0], p);
}
/* self + value * t1 / t2, as (value * t1) / t2 like the CPU kernel. */
static tpu_hlo_value_t c_addcdiv(tpu_hlo_builder_t* b, const tpu_hlo_value_t* v, int n) {
  tpu_hlo_value_t p = n > 3 ? tpu_emit_binary(b, "stablehlo.multiply", v[3], v[1]) : v[1];
  p = tpu_emit_binary(b, "stablehlo.divide", p, v[2]);
  return tpu_emit_binary(b, "stablehlo.add", v[0], p);
}
/* PyTorch's lerp: |w| < 0.5 ? self + w * (end - self)
 *                            : end - (end - self) * (1 - w). */
static tpu_hlo_value_t c_lerp(tpu_hlo_builder_t* b, const tpu_hlo_value_t* v, int n) {
  tpu_hlo_type_t t = tpu_hlo_value_type(b, v[0]);
  tpu_hlo_value_t diff = tpu_emit_binary(b, "stablehlo.subtract", v[1], v[0]);
  tpu_hlo_value_t lo = tpu_emit_binary(b, "stablehlo.add", v[0],
                                       tpu_emit_binary(b, "stablehlo.multiply", v[2], diff));
  tpu_hlo_value_t one_minus =
      tpu_emit_binary(b, "stablehlo.subtract", tpu_emit_const_like(b, &t, 1), v[2]);
  tpu_hlo_value_t hi = tpu_emit_binary(b, "stablehlo.subtract", v[1],
                                       tpu_emit_binary(b, "stablehlo.multiply", diff, one_minus));
  tpu_hlo_value_t small = tpu_emit_compare(b, "LT", tpu_emit_unary(b, "stablehlo.abs", v[2]),
                                           tpu_emit_const_like(b, &t, 0.5));
  return tpu_emit_select(b, small, lo, hi);
}
/* maximum / clamp_min (and minimum / clamp_max): NaN in either wins. */
static tpu_hlo_value_t c_max(tpu_hlo_builder_t* b, const tpu_hlo_value_t* v, int n) {
  return nan_to(b, v[1], nan_to(b, v[0], tpu_emit_binary(b, "stablehlo.maximum", v[0], v[1])));
}
static tpu_hlo_value_t c_min(tpu_hlo_builder_t* b, const tpu_hlo_value_t* v, int n) {
  return nan_to(b, v[1], nan_to(b, v[0], tpu_emit_binary(b, "stablehlo.minimum", v[0], v[1])));
}
static tpu_hlo_value_t c_pow(tpu_hlo_builder_t* b, const tpu_hlo_value_t* v, int n) {
  return tpu_emit_binary(b, "stablehlo.power", v[0], v[1]);
}
static tpu_hlo_value_t c_sqrt(tpu_hlo_builder_t* b, const tpu_hlo_value_t* v, int n) {
  return tpu_emit_unary(b, "stablehlo.sqrt", v[0]);
}
static tpu_hlo_value_t c_neg(tpu_hlo_builder_t* b, const tpu_hlo_value_t* v, int n) {
  return tpu_emit_unary(b, "stablehlo.negate", v[0]);
}
static tpu_hlo_value_t c_exp(tpu_hlo_builder_t* b, const tpu_hlo_value_t* v, int n) {
  return tpu_emit_unary(b, "stablehlo.exponential", v[0]);
}
static tpu_hlo_value_t c_abs(tpu_hlo_builder_t* b, const tpu_hlo_value_t* v, int n) {
  return tpu_emit_unary(b, "stablehlo.abs", v[0]);
}
static tpu_hlo_value_t c_reciprocal(tpu_hlo_builder_t* b, const tpu_hlo_value_t* v, int n) {
  tpu_hlo_type_t t = tpu_hlo_value_type(b, v[0]);
  return tpu_emit_binary(b, "stablehlo.divide", tpu_emit_const_like(b, &t, 1), v[0]);
}
/* torch.sign(NaN) is 0. */
static tpu_hlo_value_t c_sign(tpu_hlo_builder_t* b, const tpu_hlo_value_t* v, int n) {
  tpu_hlo_type_t t = tpu_hlo_value_type(b, v[0]);
  tpu_hlo_value_t s = tpu_emit_unary(b, "stablehlo.sign", v[0]);
  if (!tpu_dtype_is_floating(t.dtype)) return s;
  return tpu_emit_select(b, tpu_emit_compare(b, "NE", v[0], v[0]), tpu_emit_const_like(b, &t, 0),
                         s);
}
static tpu_hlo_value_t c_copy(tpu_hlo_builder_t* b, const tpu_hlo_value_t* v, int n) {
  return v[1];
}
static tpu_hlo_value_t c_zero(tpu_hlo_builder_t* b, const tpu_hlo_value_t* v, int n) {
  tpu_hlo_type_t t = tpu_hlo_value_type(b, v[0]);
  return tpu_emit_const_like(b, &t, 0);
}

/* A reduction of element k to a rank-0 value. */
static tpu_hlo_value_t reduce_all(tpu_hlo_builder_t* b, tpu_hlo_value_t x, double init,
                                  const char* op) {
  tpu_hlo_type_t t = tpu_hlo_value_type(b, x);
  int64_t dims[TPU_HLO_MAX_RANK];
  for (int d = 0; d < t.rank; d++) dims[d] = d;
  return tpu_emit_reduce(b, x, tpu_emit_const(b, t.dtype, init), dims, t.rank, op);
}

/* _foreach_norm(self, ord, dtype): ord is a run-time Scalar, so every
 * supported norm is computed and the matching one selected (XLA folds the
 * others away when ord is a constant): 2 -> sqrt(sum x^2), 1 -> sum |x|,
 * inf -> max |x|, -inf -> min |x|, 0 -> count of nonzeros, else
 * (sum |x|^p)^(1/p). */
static tpu_status_t lower_norm(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  for (int k = 0; k < tpu_lower_num_outputs(ctx); k++) {
    tpu_hlo_type_t out = tpu_lower_output_type(ctx, k);
    if (!tpu_dtype_is_floating(out.dtype)) return tpu_lower_decline(ctx, "non-float norm");
    tpu_dtype_t ct = compute_dtype(out.dtype);
    tpu_hlo_value_t a =
        tpu_emit_unary(b, "stablehlo.abs", tpu_emit_convert(b, tpu_lower_list_tensor(ctx, 0, k), ct));
    tpu_hlo_type_t at = tpu_hlo_value_type(b, a);
    tpu_hlo_value_t p = tpu_lower_scalar(ctx, 1, ct);
    tpu_hlo_value_t pb = tpu_emit_broadcast_to(b, p, &at);
    tpu_hlo_value_t n2 = tpu_emit_unary(
        b, "stablehlo.sqrt",
        reduce_all(b, tpu_emit_binary(b, "stablehlo.multiply", a, a), 0, "stablehlo.add"));
    tpu_hlo_value_t n1 = reduce_all(b, a, 0, "stablehlo.add");
    /* XLA:CPU's max/min may drop NaNs; PyTorch's norms propagate them. */
    tpu_hlo_value_t any_nan = tpu_emit_compare(
        b, "NE",
        reduce_all(b, tpu_emit_convert(b, tpu_emit_compare(b, "NE", a, a), ct), 0,
                   "stablehlo.add"),
        tpu_emit_const(b, ct, 0));
    tpu_hlo_value_t nan = tpu_emit_const(b, ct, NAN);
    tpu_hlo_value_t ninf =
        tpu_emit_select(b, any_nan, nan, reduce_all(b, a, 0, "stablehlo.maximum"));
    tpu_hlo_value_t nminf =
        tpu_emit_select(b, any_nan, nan, reduce_all(b, a, INFINITY, "stablehlo.minimum"));
    tpu_hlo_value_t n0 = reduce_all(
        b, tpu_emit_convert(b, tpu_emit_compare(b, "NE", a, tpu_emit_const_like(b, &at, 0)), ct),
        0, "stablehlo.add");
    tpu_hlo_value_t np = tpu_emit_binary(
        b, "stablehlo.power", reduce_all(b, tpu_emit_binary(b, "stablehlo.power", a, pb), 0,
                                         "stablehlo.add"),
        tpu_emit_binary(b, "stablehlo.divide", tpu_emit_const(b, ct, 1), p));
    struct { double ord; tpu_hlo_value_t v; } cases[] = {
        {0, n0}, {-INFINITY, nminf}, {INFINITY, ninf}, {1, n1}, {2, n2}};
    tpu_hlo_value_t r = np;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
      r = tpu_emit_select(b, tpu_emit_compare(b, "EQ", p, tpu_emit_const(b, ct, cases[c].ord)),
                          cases[c].v, r);
    tpu_lower_set_output(ctx, k, tpu_emit_convert(b, r, out.dtype));
  }
  return NULL;
}

/* _foreach_max: the max of each tensor (NaN propagates). */
static tpu_status_t lower_max(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  for (int k = 0; k < tpu_lower_num_outputs(ctx); k++) {
    tpu_hlo_type_t out = tpu_lower_output_type(ctx, k);
    tpu_dtype_t ct = compute_dtype(out.dtype);
    if (!tpu_dtype_is_floating(ct)) return tpu_lower_decline(ctx, "non-float max");
    tpu_hlo_value_t x = tpu_emit_convert(b, tpu_lower_list_tensor(ctx, 0, k), ct);
    tpu_hlo_value_t m = reduce_all(b, x, -INFINITY, "stablehlo.maximum");
    /* Any NaN: reduce a NaN flag too, since XLA's max may drop NaNs. */
    tpu_hlo_value_t nan = reduce_all(
        b, tpu_emit_convert(b, tpu_emit_compare(b, "NE", x, x), ct), 0, "stablehlo.maximum");
    m = tpu_emit_select(b, tpu_emit_compare(b, "NE", nan, tpu_emit_const(b, ct, 0)),
                        tpu_emit_const(b, ct, NAN), m);
    tpu_lower_set_output(ctx, k, tpu_emit_convert(b, m, out.dtype));
  }
  return NULL;
}

/* _fused_adam_ / _fused_adamw_(self, grads, exp_avgs, exp_avg_sqs,
 * max_exp_avg_sqs, state_steps, *, lr, beta1, beta2, weight_decay, eps,
 * amsgrad, maximize, grad_scale?, found_inf?): PyTorch's CPU fused kernel
 * per element, in opmath (float32 for half types). The step count is a
 * run-time tensor, so the bias corrections are computed in the program (in
 * float64, like the kernel's doubles). Outputs: the new params, grads,
 * exp_avgs, exp_avg_sqs and max_exp_avg_sqs, list by list. AdamW (data 1)
 * decays the params instead of adding weight_decay * param to the grad. */
enum { A_SELF, A_GRADS, A_AVG, A_AVG_SQ, A_MAX_SQ, A_STEPS, A_LR, A_BETA1, A_BETA2, A_WD,
       A_EPS, A_AMSGRAD, A_MAXIMIZE, A_GRAD_SCALE, A_FOUND_INF };

static tpu_status_t lower_fused_adam(tpu_lower_ctx_t* ctx) {
  bool adamw = tpu_lower_data(ctx);
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  int n = tpu_lower_arg(ctx, A_SELF)->num_tensors;
  int m = tpu_lower_arg(ctx, A_MAX_SQ)->num_tensors;
  bool amsgrad = tpu_lower_arg(ctx, A_AMSGRAD)->i != 0;
  bool maximize = tpu_lower_arg(ctx, A_MAXIMIZE)->i != 0;
  for (int i = A_SELF; i <= A_STEPS; i++)
    if (tpu_lower_arg(ctx, i)->kind != TPU_ARG_TENSORS && !(i == A_MAX_SQ && m == 0))
      return tpu_lower_decline(ctx, "argument %d is not a tpu tensor list", i);
  if (tpu_lower_num_outputs(ctx) != 4 * n + m || (amsgrad && m != n))
    return tpu_lower_decline(ctx, "unexpected outputs");
  for (int i = A_BETA1; i <= A_EPS; i++)
    if (tpu_lower_arg(ctx, i)->kind != TPU_ARG_FLOAT)
      return tpu_lower_decline(ctx, "argument %d is not a float", i);
  double beta1 = tpu_lower_arg(ctx, A_BETA1)->f, beta2 = tpu_lower_arg(ctx, A_BETA2)->f;
  double wd = tpu_lower_arg(ctx, A_WD)->f, eps = tpu_lower_arg(ctx, A_EPS)->f;
  bool has_scale = tpu_lower_arg(ctx, A_GRAD_SCALE)->kind != TPU_ARG_NONE;
  bool has_inf = tpu_lower_arg(ctx, A_FOUND_INF)->kind != TPU_ARG_NONE;
  const tpu_dtype_t f64 = TPU_DTYPE_FLOAT64;
  tpu_hlo_value_t lr = tpu_lower_scalar(ctx, A_LR, f64);
  for (int k = 0; k < n; k++) {
    tpu_hlo_type_t pt = tpu_lower_list_type(ctx, A_SELF, k);
    if (!tpu_dtype_is_floating(pt.dtype)) return tpu_lower_decline(ctx, "non-float params");
    tpu_hlo_type_t t = pt;
    t.dtype = compute_dtype(pt.dtype);
    tpu_hlo_value_t in[5];
    for (int j = 0; j < 5; j++)
      in[j] = j == 4 && !amsgrad ? (tpu_hlo_value_t){-1}
                                 : tpu_emit_cast_to(b, tpu_lower_list_tensor(ctx, A_SELF + j, k), &t);
    tpu_hlo_value_t p = in[0], g = in[1], avg = in[2], avg_sq = in[3];
    /* Scalars of this element, from float64 to opmath like the kernel. */
    tpu_hlo_value_t step = tpu_emit_convert(b, tpu_lower_list_tensor(ctx, A_STEPS, k), f64);
    if (tpu_hlo_value_type(b, step).rank != 0) return tpu_lower_decline(ctx, "step not 0-dim");
    tpu_hlo_value_t one = tpu_emit_const(b, f64, 1);
    tpu_hlo_value_t bc1 = tpu_emit_binary(
        b, "stablehlo.subtract", one,
        tpu_emit_binary(b, "stablehlo.power", tpu_emit_const(b, f64, beta1), step));
    tpu_hlo_value_t bc2 = tpu_emit_binary(
        b, "stablehlo.subtract", one,
        tpu_emit_binary(b, "stablehlo.power", tpu_emit_const(b, f64, beta2), step));
    tpu_hlo_value_t step_size =
        tpu_emit_cast_to(b, tpu_emit_binary(b, "stablehlo.divide", lr, bc1), &t);
    tpu_hlo_value_t bc2_sqrt = tpu_emit_cast_to(b, tpu_emit_unary(b, "stablehlo.sqrt", bc2), &t);
    tpu_hlo_value_t grad_out = tpu_lower_list_tensor(ctx, A_GRADS, k);
    if (has_scale) {
      g = tpu_emit_binary(b, "stablehlo.divide", g,
                          tpu_emit_cast_to(b, tpu_lower_scalar(ctx, A_GRAD_SCALE, t.dtype), &t));
      grad_out = g;
    }
    if (maximize) g = tpu_emit_unary(b, "stablehlo.negate", g);
    if (wd != 0 && !adamw) {
      g = tpu_emit_binary(b, "stablehlo.add", g,
                          tpu_emit_binary(b, "stablehlo.multiply", p, tpu_emit_const_like(b, &t, wd)));
    } else if (wd != 0) {
      tpu_hlo_value_t decay = tpu_emit_binary(
          b, "stablehlo.subtract", one,
          tpu_emit_binary(b, "stablehlo.multiply", lr, tpu_emit_const(b, f64, wd)));
      p = tpu_emit_binary(b, "stablehlo.multiply", p, tpu_emit_cast_to(b, decay, &t));
    }
    /* exp_avg += (g - exp_avg) * (1 - beta1) */
    avg = tpu_emit_binary(
        b, "stablehlo.add", avg,
        tpu_emit_binary(b, "stablehlo.multiply", tpu_emit_binary(b, "stablehlo.subtract", g, avg),
                        tpu_emit_const_like(b, &t, 1 - beta1)));
    /* exp_avg_sq = exp_avg_sq * beta2 + (1 - beta2) * g * g */
    avg_sq = tpu_emit_binary(
        b, "stablehlo.add",
        tpu_emit_binary(b, "stablehlo.multiply", avg_sq, tpu_emit_const_like(b, &t, beta2)),
        tpu_emit_binary(b, "stablehlo.multiply",
                        tpu_emit_binary(b, "stablehlo.multiply",
                                        tpu_emit_const_like(b, &t, 1 - beta2), g),
                        g));
    tpu_hlo_value_t second = avg_sq, max_sq = in[4];
    if (amsgrad) {
      tpu_hlo_value_t mv[2] = {max_sq, avg_sq};
      max_sq = second = c_max(b, mv, 2);
    }
    tpu_hlo_value_t denom = tpu_emit_binary(
        b, "stablehlo.add",
        tpu_emit_binary(b, "stablehlo.divide", tpu_emit_unary(b, "stablehlo.sqrt", second), bc2_sqrt),
        tpu_emit_const_like(b, &t, eps));
    p = tpu_emit_binary(
        b, "stablehlo.subtract", p,
        tpu_emit_binary(b, "stablehlo.divide",
                        tpu_emit_binary(b, "stablehlo.multiply", step_size, avg), denom));
    tpu_hlo_value_t news[5] = {p, grad_out, avg, avg_sq, max_sq};
    for (int j = 0; j < (amsgrad ? 5 : 4); j++) {
      tpu_hlo_type_t ot = tpu_lower_output_type(ctx, j * n + k);
      tpu_hlo_value_t v = tpu_emit_convert(b, news[j], ot.dtype);
      if (has_inf) {
        /* found_inf == 1: the kernel returns before touching anything. */
        tpu_hlo_value_t skip = tpu_emit_compare(
            b, "EQ", tpu_lower_scalar(ctx, A_FOUND_INF, TPU_DTYPE_FLOAT32),
            tpu_emit_const(b, TPU_DTYPE_FLOAT32, 1));
        tpu_hlo_value_t old = tpu_lower_list_tensor(ctx, A_SELF + j, k);
        v = tpu_emit_select(b, tpu_emit_broadcast_to(b, skip, &ot), old, v);
      }
      tpu_lower_set_output(ctx, j * n + k, v);
    }
  }
  return NULL;
}

/* Rows: operands (self, other-or-scalar[, alpha]) are 3 arguments,
 * (self, tensor1, tensor2, value) and (self, end, weight) 4; pow's
 * (Tensor[] self, exponent) or ScalarAndTensor (Scalar self, Tensor[]
 * exponent) are (arg 0, arg 1) either way. A copy converts src straight to
 * self's dtype (no float32 step). */
const tpu_lowering_t tpu_lowerings_foreach[] = {
    {"_foreach_add", foreach_map, 0, MAP(c_add, 3, 0)},
    {"_foreach_sub", foreach_map, 0, MAP(c_sub, 3, 0)},
    {"_foreach_mul", foreach_map, 0, MAP(c_mul, 3, 0)},
    {"_foreach_div", foreach_map, 0, MAP(c_div, 3, 0)},
    {"_foreach_addcmul", foreach_map, 0, MAP(c_addcmul, 4, 0)},
    {"_foreach_addcdiv", foreach_map, 0, MAP(c_addcdiv, 4, 0)},
    {"_foreach_lerp", foreach_map, 0, MAP(c_lerp, 4, 0)},
    {"_foreach_maximum", foreach_map, 0, MAP(c_max, 3, 0)},
    {"_foreach_clamp_min", foreach_map, 0, MAP(c_max, 3, 0)},
    {"_foreach_minimum", foreach_map, 0, MAP(c_min, 3, 0)},
    {"_foreach_clamp_max", foreach_map, 0, MAP(c_min, 3, 0)},
    {"_foreach_pow", foreach_map, 0, MAP(c_pow, 2, 0)},
    {"_foreach_sqrt", foreach_map, 0, MAP(c_sqrt, 1, 0)},
    {"_foreach_neg", foreach_map, 0, MAP(c_neg, 1, 0)},
    {"_foreach_exp", foreach_map, 0, MAP(c_exp, 1, 0)},
    {"_foreach_abs", foreach_map, 0, MAP(c_abs, 1, 0)},
    {"_foreach_sign", foreach_map, 0, MAP(c_sign, 1, 0)},
    {"_foreach_reciprocal", foreach_map, 0, MAP(c_reciprocal, 1, 0)},
    {"_foreach_copy", foreach_map, 0, MAP(c_copy, 3, ALLOW_BOOL | NO_UPCAST)},
    {"_foreach_zero", foreach_map, 0, MAP(c_zero, 1, ALLOW_BOOL | NO_UPCAST)},
    {"_foreach_norm", lower_norm, 0},
    {"_foreach_max", lower_max, 0},
    {"_fused_adam", lower_fused_adam, 0},
    {"_fused_adamw", lower_fused_adam, 0, 1},
};
const size_t tpu_lowerings_foreach_count =
    sizeof tpu_lowerings_foreach / sizeof tpu_lowerings_foreach[0];
