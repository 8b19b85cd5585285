/* pnorm family of the lowering table (see lowering.h): p-norms and the
 * distances built on them: norm, linalg_vector_norm, dist, and cdist
 * (_cdist_forward, _cdist_backward). The shape and dtype handling is the
 * reduce family's (reduce_internal.h). */
#include <math.h>
#include <stdint.h>

#include "emit.h"
#include "lowering.h"
#include "reduce_internal.h"

/* p-norm of `x` (an accumulation-dtype value) over dims with a run-time p:
 * every case is computed and the one p names is selected (p is a program
 * argument, so its value is unknown while lowering). 2 and 1 avoid pow so
 * the common norms are exact; 0 counts nonzeros; +-inf take max/min |x|. */
static tpu_hlo_value_t emit_pnorm(tpu_hlo_builder_t* b, tpu_hlo_value_t x, tpu_hlo_value_t p,
                                  const int64_t* dims, int n) {
  tpu_hlo_value_t a = tpu_emit_unary(b, "stablehlo.abs", x);
  tpu_hlo_type_t t = tpu_hlo_value_type(b, a);
  tpu_hlo_value_t pb = tpu_emit_broadcast_to(b, p, &t);
  tpu_hlo_value_t two = tpu_emit_const_like(b, &t, 2), one = tpu_emit_const_like(b, &t, 1);
  tpu_hlo_value_t zero = tpu_emit_const_like(b, &t, 0);
  tpu_hlo_value_t nonzero = tpu_emit_convert(b, tpu_emit_compare(b, "NE", a, zero), t.dtype);
  tpu_hlo_value_t term = tpu_emit_binary(b, "stablehlo.power", a, pb);
  term = tpu_emit_select(b, tpu_emit_compare(b, "EQ", pb, zero), nonzero, term);
  term = tpu_emit_select(b, tpu_emit_compare(b, "EQ", pb, one), a, term);
  term = tpu_emit_select(b, tpu_emit_compare(b, "EQ", pb, two),
                         tpu_emit_binary(b, "stablehlo.multiply", a, a), term);
  tpu_hlo_value_t sum = reduce(b, term, 0, dims, n, "stablehlo.add");
  tpu_hlo_type_t st = tpu_hlo_value_type(b, sum);
  tpu_hlo_value_t ps = tpu_emit_broadcast_to(b, p, &st);
  tpu_hlo_value_t s_one = tpu_emit_const_like(b, &st, 1);
  tpu_hlo_value_t root = tpu_emit_binary(b, "stablehlo.power", sum,
                                         tpu_emit_binary(b, "stablehlo.divide", s_one, ps));
  tpu_hlo_value_t no_root = tpu_emit_binary(
      b, "stablehlo.or", tpu_emit_compare(b, "EQ", ps, s_one),
      tpu_emit_compare(b, "EQ", ps, tpu_emit_const_like(b, &st, 0)));
  root = tpu_emit_select(b, no_root, sum, root);
  root = tpu_emit_select(b, tpu_emit_compare(b, "EQ", ps, tpu_emit_const_like(b, &st, 2)),
                         tpu_emit_unary(b, "stablehlo.sqrt", sum), root);
  tpu_hlo_value_t mx = reduce_extreme(b, a, dims, n, true);
  tpu_hlo_value_t mn = reduce_extreme(b, a, dims, n, false);
  root = tpu_emit_select(b, tpu_emit_compare(b, "EQ", ps, tpu_emit_const_like(b, &st, INFINITY)),
                         mx, root);
  root = tpu_emit_select(b, tpu_emit_compare(b, "EQ", ps, tpu_emit_const_like(b, &st, -INFINITY)),
                         mn, root);
  return root;
}

/* norm.Scalar(self, p) / norm.ScalarOpt_dim[_dtype](self, p?, dim, keepdim,
 * dtype) / norm.ScalarOpt_dtype(self, p?, dtype) and
 * linalg_vector_norm(self, ord, dim?, keepdim, dtype?): p at 1 (None = 2),
 * dims at 2 when given. */
static tpu_status_t lower_norm(tpu_lower_ctx_t* ctx) {
  reduce_call_t r;
  TPU_RETURN_IF_ERROR(reduce_setup(ctx, "norm into a non-floating dtype", true, list_arg(ctx, 2), &r));
  tpu_hlo_value_t p = tpu_lower_arg(ctx, 1)->kind == TPU_ARG_NONE
                          ? tpu_emit_const(r.b, r.t.dtype, 2)
                          : tpu_lower_scalar(ctx, 1, r.t.dtype);
  set_out(ctx, 0, emit_pnorm(r.b, r.x, p, r.dims, r.n));
  return NULL;
}

/* dist(self, other, p): the p-norm of self - other (broadcast), the
 * difference rounded to the input dtype first as PyTorch's composite does. */
static tpu_status_t lower_dist(tpu_lower_ctx_t* ctx) {
  TPU_RETURN_IF_ERROR(decline_complex(ctx));
  tpu_hlo_type_t out = tpu_lower_output_type(ctx, 0);
  if (!tpu_dtype_is_floating(out.dtype) || tpu_lower_arg(ctx, 1)->kind != TPU_ARG_TENSOR)
    return tpu_lower_decline(ctx, "dist of non-floating or non-tensor operands");
  /* CPU subtracts the operands: a bool one raises there. */
  if (tpu_lower_arg(ctx, 0)->type.dtype == TPU_DTYPE_BOOL || tpu_lower_arg(ctx, 1)->type.dtype == TPU_DTYPE_BOOL)
    return tpu_lower_decline(ctx, "dist of bool");
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  const tpu_lower_arg_t *a0 = tpu_lower_arg(ctx, 0), *a1 = tpu_lower_arg(ctx, 1);
  tpu_hlo_type_t shape = {.dtype = out.dtype, .rank = a0->type.rank > a1->type.rank
                                                         ? a0->type.rank : a1->type.rank};
  for (int d = 0; d < shape.rank; d++) {
    int i0 = d - (shape.rank - a0->type.rank), i1 = d - (shape.rank - a1->type.rank);
    int64_t s0 = i0 >= 0 ? a0->type.dims[i0] : 1, s1 = i1 >= 0 ? a1->type.dims[i1] : 1;
    shape.dims[d] = s0 == 1 ? s1 : s0;
  }
  tpu_hlo_value_t diff = tpu_emit_binary(b, "stablehlo.subtract",
                                         tpu_emit_cast_to(b, tpu_lower_tensor(ctx, 0), &shape),
                                         tpu_emit_cast_to(b, tpu_lower_tensor(ctx, 1), &shape));
  diff = tpu_emit_convert(b, diff, acc_of(out.dtype));
  tpu_hlo_value_t p = tpu_lower_scalar(ctx, 2, acc_of(out.dtype));
  int64_t dims[TPU_HLO_MAX_RANK];
  int n = read_dims(ctx, -1, shape.rank, false, dims);
  set_out(ctx, 0, emit_pnorm(b, diff, p, dims, n));
  return NULL;
}

/* x1 [..., P, M] - x2 [..., R, M] over [batch..., P, R, M], the batch dims
 * of `pr` (a [..., P, R] type) broadcast; in the accumulation dtype. */
static tpu_hlo_value_t pairwise_diff(tpu_lower_ctx_t* ctx, int i1, int i2, const tpu_hlo_type_t* pr) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_type_t t1 = tpu_lower_arg(ctx, i1)->type, t2 = tpu_lower_arg(ctx, i2)->type;
  tpu_hlo_type_t full = *pr;
  full.dtype = acc_of(pr->dtype);
  full.dims[full.rank++] = t1.dims[t1.rank - 1];
  tpu_hlo_type_t e1 = t1, e2 = t2; /* [.., P, 1, M] and [.., 1, R, M] */
  e1.rank = t1.rank + 1;
  e1.dims[t1.rank - 1] = 1;
  e1.dims[t1.rank] = t1.dims[t1.rank - 1];
  e2.rank = t2.rank + 1;
  e2.dims[t2.rank] = t2.dims[t2.rank - 1];
  e2.dims[t2.rank - 1] = t2.dims[t2.rank - 2];
  e2.dims[t2.rank - 2] = 1;
  tpu_hlo_value_t x1 = tpu_emit_convert(b, tpu_lower_tensor(ctx, i1), full.dtype);
  tpu_hlo_value_t x2 = tpu_emit_convert(b, tpu_lower_tensor(ctx, i2), full.dtype);
  x1 = tpu_emit_broadcast_to(b, tpu_emit_reshape(b, x1, e1.dims, e1.rank), &full);
  x2 = tpu_emit_broadcast_to(b, tpu_emit_reshape(b, x2, e2.dims, e2.rank), &full);
  return tpu_emit_binary(b, "stablehlo.subtract", x1, x2);
}

/* _cdist_forward(x1, x2, p, compute_mode): p-norm distances of every row
 * pair (p is structural here; the shared p-norm folds its selects). */
static tpu_status_t lower_cdist(tpu_lower_ctx_t* ctx) {
  TPU_RETURN_IF_ERROR(decline_complex(ctx));
  tpu_hlo_type_t out = tpu_lower_output_type(ctx, 0);
  if (!tpu_dtype_is_floating(out.dtype) || tpu_lower_arg(ctx, 2)->kind != TPU_ARG_FLOAT)
    return tpu_lower_decline(ctx, "cdist of non-floating inputs");
  /* CPU has no bfloat16 / float16 kernel (NotImplementedError). */
  if (out.dtype == TPU_DTYPE_BFLOAT16 || out.dtype == TPU_DTYPE_FLOAT16)
    return tpu_lower_decline(ctx, "cdist of half types");
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_value_t diff = pairwise_diff(ctx, 0, 1, &out);
  int64_t last = out.rank;
  set_out(ctx, 0, emit_pnorm(b, diff, tpu_lower_scalar(ctx, 2, acc_of(out.dtype)), &last, 1));
  return NULL;
}

/* _cdist_backward(grad, x1, x2, p, cdist): d cdist / d x1, per PyTorch's
 * cases (0 where the distance is 0), summed over x2's rows and over batch
 * dims x1 was broadcast along. */
static tpu_status_t lower_cdist_backward(tpu_lower_ctx_t* ctx) {
  TPU_RETURN_IF_ERROR(decline_complex(ctx));
  tpu_hlo_type_t out = tpu_lower_output_type(ctx, 0);
  tpu_hlo_type_t pr = tpu_lower_arg(ctx, 4)->type;
  if (!tpu_dtype_is_floating(out.dtype) || tpu_lower_arg(ctx, 3)->kind != TPU_ARG_FLOAT ||
      tpu_lower_arg(ctx, 4)->kind != TPU_ARG_TENSOR)
    return tpu_lower_decline(ctx, "cdist backward of non-floating inputs");
  double p = tpu_lower_arg(ctx, 3)->f;
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_dtype_t acc = acc_of(out.dtype);
  tpu_hlo_value_t diff = pairwise_diff(ctx, 1, 2, &pr);
  tpu_hlo_type_t ft = tpu_hlo_value_type(b, diff);
  tpu_hlo_type_t kept = pr; /* [.., P, R, 1] */
  kept.dims[kept.rank++] = 1;
  kept.dtype = acc;
  tpu_hlo_value_t dist = tpu_emit_convert(b, tpu_lower_tensor(ctx, 4), acc);
  dist = tpu_emit_broadcast_to(b, tpu_emit_reshape(b, dist, kept.dims, kept.rank), &ft);
  tpu_hlo_value_t grad = tpu_emit_convert(b, tpu_lower_tensor(ctx, 0), acc);
  grad = tpu_emit_broadcast_to(b, tpu_emit_reshape(b, grad, kept.dims, kept.rank), &ft);
  tpu_hlo_value_t zero = tpu_emit_const_like(b, &ft, 0);
  tpu_hlo_value_t sign = tpu_emit_unary(b, "stablehlo.sign", diff);
  tpu_hlo_value_t adiff = tpu_emit_unary(b, "stablehlo.abs", diff);
  tpu_hlo_value_t d;
  if (p == 0) {
    d = zero;
  } else if (p == 1) {
    d = sign;
  } else if (p == 2) {
    d = tpu_emit_binary(b, "stablehlo.divide", diff, dist);
  } else if (isinf(p)) {
    d = tpu_emit_select(b, tpu_emit_compare(b, "EQ", adiff, dist), sign, zero);
  } else {
    tpu_hlo_value_t pm1 = tpu_emit_const_like(b, &ft, p - 1);
    tpu_hlo_value_t num = tpu_emit_binary(b, "stablehlo.multiply", sign,
                                          tpu_emit_binary(b, "stablehlo.power", adiff, pm1));
    d = tpu_emit_binary(b, "stablehlo.divide", num, tpu_emit_binary(b, "stablehlo.power", dist, pm1));
    if (p < 1) d = tpu_emit_select(b, tpu_emit_compare(b, "EQ", diff, zero), zero, d);
  }
  if (p != 0) d = tpu_emit_select(b, tpu_emit_compare(b, "EQ", dist, zero), zero, d);
  d = tpu_emit_binary(b, "stablehlo.multiply", grad, d);
  /* Sum over R, then over the batch dims x1 was broadcast along. */
  int64_t r_dim = ft.rank - 2;
  tpu_hlo_value_t g = reduce(b, d, 0, &r_dim, 1, "stablehlo.add"); /* [batch.., P, M] */
  tpu_hlo_type_t gt = tpu_hlo_value_type(b, g);
  int64_t dims[TPU_HLO_MAX_RANK];
  int n = 0, lead = gt.rank - out.rank;
  for (int k = 0; k < gt.rank; k++)
    if (k < lead || (out.dims[k - lead] == 1 && gt.dims[k] != 1)) dims[n++] = k;
  set_out(ctx, 0, reduce(b, g, 0, dims, n, "stablehlo.add"));
  return NULL;
}

const tpu_lowering_t tpu_lowerings_pnorm[] = {
    {"norm", lower_norm, 0},
    {"linalg_vector_norm", lower_norm, 0},
    {"dist", lower_dist, 0},
    {"_cdist_forward", lower_cdist, 0},
    {"_cdist_backward", lower_cdist_backward, 0},
};
const size_t tpu_lowerings_pnorm_count = sizeof tpu_lowerings_pnorm / sizeof tpu_lowerings_pnorm[0];
