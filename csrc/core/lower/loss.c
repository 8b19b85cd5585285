/* loss family of the lowering table (see lowering.h): nll (and nll2d),
 * mse, binary cross-entropy, smooth_l1 and huber, each with its backward.
 * Half types compute in float32 and round once (nn_internal.h). */
#include "emit.h"
#include "lowering.h"
#include "nn_internal.h"

enum { REDUCE_NONE = 0, REDUCE_MEAN = 1, REDUCE_SUM = 2 };

/* Applies reduction `red` to an elementwise loss. */
static tpu_hlo_value_t reduce_loss(tpu_hlo_builder_t* b, tpu_hlo_value_t loss, int64_t red) {
  if (red == REDUCE_NONE) return loss;
  tpu_hlo_type_t t = type_of(b, loss);
  tpu_hlo_value_t s = sum_all(b, loss);
  if (red == REDUCE_MEAN) s = tpu_emit_div(b, s, tpu_emit_splat(b, s, (double)numel(&t)));
  return s;
}

/* Gradient scale of a reduced loss: grad_output broadcast to `t` (divided by
 * the element count for mean). */
static tpu_hlo_value_t loss_grad_scale(tpu_lower_ctx_t* ctx, int gi, int64_t red,
                                       const tpu_hlo_type_t* t) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_value_t g = tpu_emit_cast_to(b, tpu_lower_tensor(ctx, gi), t);
  if (red == REDUCE_MEAN) g = mul_c(b, g, 1.0 / (double)numel(t));
  return g;
}

/* self and target (args 0 and 1, or 1 and 2) in compute dtype, broadcast to
 * `t` (the loss's elementwise shape). */
static tpu_hlo_value_t operand_to(tpu_lower_ctx_t* ctx, int i, const tpu_hlo_type_t* t) {
  return tpu_emit_cast_to(tpu_lower_builder(ctx), tpu_lower_tensor(ctx, i), t);
}

/* The elementwise shape of a forward loss: output shape for none, else
 * the broadcast of self and target. */
static tpu_hlo_type_t loss_shape(tpu_lower_ctx_t* ctx, int si, int ti) {
  tpu_hlo_type_t s = tpu_lower_arg(ctx, si)->type, t = tpu_lower_arg(ctx, ti)->type;
  tpu_hlo_type_t r = s.rank >= t.rank ? s : t;
  const tpu_hlo_type_t* o = s.rank >= t.rank ? &t : &s;
  for (int d = 0; d < o->rank; d++) {
    int64_t od = o->dims[d], *rd = &r.dims[r.rank - o->rank + d];
    if (*rd == 1) *rd = od;
  }
  r.dtype = acc_dtype(tpu_lower_output_type(ctx, 0).dtype);
  return r;
}

/* mse_loss(self, target, reduction). */
static tpu_status_t lower_mse(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  if (!floating_out(ctx)) return tpu_lower_decline(ctx, "non-floating loss");
  tpu_hlo_type_t t = loss_shape(ctx, 0, 1);
  tpu_hlo_value_t d = tpu_emit_sub(b, operand_to(ctx, 0, &t), operand_to(ctx, 1, &t));
  set_out(ctx, 0, reduce_loss(b, tpu_emit_mul(b, d, d), int_arg(ctx, 2, REDUCE_MEAN)));
  return NULL;
}

/* mse_loss_backward(grad_output, self, target, reduction): 2 (x - y) g. */
static tpu_status_t lower_mse_bwd(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  if (!floating_out(ctx)) return tpu_lower_decline(ctx, "non-floating loss");
  tpu_hlo_type_t t = tpu_lower_output_type(ctx, 0);
  t.dtype = acc_dtype(t.dtype);
  tpu_hlo_value_t d = tpu_emit_sub(b, operand_to(ctx, 1, &t), operand_to(ctx, 2, &t));
  tpu_hlo_value_t g = loss_grad_scale(ctx, 0, int_arg(ctx, 3, REDUCE_MEAN), &t);
  set_out(ctx, 0, tpu_emit_mul(b, mul_c(b, d, 2.0), g));
  return NULL;
}

/* Optional weight (argument i) broadcast to t, or NULL value. */
static bool weight_to(tpu_lower_ctx_t* ctx, int i, const tpu_hlo_type_t* t, tpu_hlo_value_t* w) {
  if (!is_tensor(ctx, i)) return false;
  *w = operand_to(ctx, i, t);
  return true;
}

/* binary_cross_entropy(self, target, weight?, reduction):
 * (t - 1) * max(log1p(-x), -100) - t * max(log(x), -100), times weight. */
static tpu_status_t lower_bce(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  if (!floating_out(ctx)) return tpu_lower_decline(ctx, "non-floating loss");
  tpu_hlo_type_t t = tpu_lower_arg(ctx, 0)->type;
  t.dtype = acc_dtype(t.dtype);
  tpu_hlo_value_t x = operand_to(ctx, 0, &t), y = operand_to(ctx, 1, &t), w;
  tpu_hlo_value_t floor = tpu_emit_splat(b, x, -100);
  tpu_hlo_value_t l1 = tpu_emit_binary(
      b, "stablehlo.maximum",
      tpu_emit_unary(b, "stablehlo.log_plus_one", tpu_emit_unary(b, "stablehlo.negate", x)),
      floor);
  tpu_hlo_value_t l0 = tpu_emit_binary(b, "stablehlo.maximum", tpu_emit_unary(b, "stablehlo.log", x),
                                       floor);
  tpu_hlo_value_t loss = tpu_emit_sub(b, tpu_emit_mul(b, tpu_emit_sub(b, y, tpu_emit_splat(b, y, 1)), l1), tpu_emit_mul(b, y, l0));
  if (weight_to(ctx, 2, &t, &w)) loss = tpu_emit_mul(b, loss, w);
  set_out(ctx, 0, reduce_loss(b, loss, int_arg(ctx, 3, REDUCE_MEAN)));
  return NULL;
}

/* binary_cross_entropy_backward(grad_output, self, target, weight?,
 * reduction): g * (x - t) / max((1 - x) x, 1e-12) * weight. */
static tpu_status_t lower_bce_bwd(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  if (!floating_out(ctx)) return tpu_lower_decline(ctx, "non-floating loss");
  tpu_hlo_type_t t = tpu_lower_output_type(ctx, 0);
  t.dtype = acc_dtype(t.dtype);
  tpu_hlo_value_t x = operand_to(ctx, 1, &t), y = operand_to(ctx, 2, &t), w;
  tpu_hlo_value_t denom = tpu_emit_mul(b, tpu_emit_sub(b, tpu_emit_splat(b, x, 1), x), x);
  denom = tpu_emit_binary(b, "stablehlo.maximum", denom, tpu_emit_splat(b, denom, 1e-12));
  tpu_hlo_value_t r = tpu_emit_div(b, tpu_emit_sub(b, x, y), denom);
  r = tpu_emit_mul(b, r, loss_grad_scale(ctx, 0, int_arg(ctx, 4, REDUCE_MEAN), &t));
  if (weight_to(ctx, 3, &t, &w)) r = tpu_emit_mul(b, r, w);
  set_out(ctx, 0, r);
  return NULL;
}

/* smooth_l1_loss (param = beta) and huber_loss (data word true; param =
 * delta): self, target, reduction, param. */
static tpu_status_t lower_smooth(tpu_lower_ctx_t* ctx) {
  bool huber = tpu_lower_data(ctx);
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  if (!floating_out(ctx)) return tpu_lower_decline(ctx, "non-floating loss");
  tpu_hlo_type_t t = loss_shape(ctx, 0, 1);
  double p = float_arg(ctx, 3, 1.0);
  tpu_hlo_value_t z = tpu_emit_unary(b, "stablehlo.abs",
                                     tpu_emit_sub(b, operand_to(ctx, 0, &t), operand_to(ctx, 1, &t)));
  tpu_hlo_value_t loss;
  if (!huber && p == 0) {
    loss = z;
  } else {
    tpu_hlo_value_t quad = mul_c(b, tpu_emit_mul(b, z, z), huber ? 0.5 : 0.5 / p);
    tpu_hlo_value_t lin = tpu_emit_sub(b, z, tpu_emit_splat(b, z, 0.5 * p));
    if (huber) lin = mul_c(b, lin, p);
    loss = tpu_emit_select(b, tpu_emit_compare(b, "LT", z, tpu_emit_splat(b, z, p)), quad, lin);
  }
  set_out(ctx, 0, reduce_loss(b, loss, int_arg(ctx, 2, REDUCE_MEAN)));
  return NULL;
}

/* Backward of both (grad_output, self, target, reduction, param):
 * smooth_l1: |d| < beta ? d / beta : sign(d); huber: clamp(d, -delta,
 * delta). */
static tpu_status_t lower_smooth_bwd(tpu_lower_ctx_t* ctx) {
  bool huber = tpu_lower_data(ctx);
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  if (!floating_out(ctx)) return tpu_lower_decline(ctx, "non-floating loss");
  tpu_hlo_type_t t = tpu_lower_output_type(ctx, 0);
  t.dtype = acc_dtype(t.dtype);
  double p = float_arg(ctx, 4, 1.0);
  tpu_hlo_value_t d = tpu_emit_sub(b, operand_to(ctx, 1, &t), operand_to(ctx, 2, &t));
  tpu_hlo_value_t r;
  if (huber) {
    r = tpu_hlo_op(b, "stablehlo.clamp", (tpu_hlo_value_t[]){tpu_emit_splat(b, d, -p), d, tpu_emit_splat(b, d, p)},
                   3, type_of(b, d), NULL);
  } else {
    tpu_hlo_value_t small = tpu_emit_compare(b, "LT", tpu_emit_unary(b, "stablehlo.abs", d),
                                             tpu_emit_splat(b, d, p));
    tpu_hlo_value_t lin = tpu_emit_unary(b, "stablehlo.sign", d);
    r = p == 0 ? lin : tpu_emit_select(b, small, mul_c(b, d, 1.0 / p), lin);
  }
  set_out(ctx, 0, tpu_emit_mul(b, r, loss_grad_scale(ctx, 0, int_arg(ctx, 3, REDUCE_MEAN), &t)));
  return NULL;
}

/* Shared by nll_loss forward / backward: one-hot of the target over the
 * class dim (1, or 0 for an unbatched input) of self's type `xt`, the
 * per-element weight w[target] (0 where target == ignore_index), and the
 * validity mask. */
typedef struct {
  int cdim;
  tpu_hlo_value_t onehot; /* bool, self's shape */
  tpu_hlo_value_t wt;     /* compute dtype, target's shape */
  tpu_hlo_value_t valid;  /* bool, target's shape */
} nll_parts_t;

static nll_parts_t nll_parts(tpu_lower_ctx_t* ctx, int ti, int wi, int64_t ignore,
                             const tpu_hlo_type_t* xt) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  nll_parts_t p = {.cdim = xt->rank == 1 ? 0 : 1};
  tpu_hlo_value_t t = tpu_emit_convert(b, tpu_lower_tensor(ctx, ti), TPU_DTYPE_INT64);
  tpu_hlo_type_t it = *xt;
  it.dtype = TPU_DTYPE_INT64;
  int64_t keep[TPU_HLO_MAX_RANK];
  for (int d = 0; d < xt->rank; d++) keep[d] = d == p.cdim ? 1 : xt->dims[d];
  tpu_hlo_value_t tb = tpu_emit_broadcast_to(b, tpu_emit_reshape(b, t, keep, xt->rank), &it);
  p.onehot = tpu_emit_compare(b, "EQ", tpu_emit_iota(b, &it, p.cdim), tb);
  p.valid = tpu_emit_compare(b, "NE", t, tpu_emit_splat(b, t, (double)ignore));
  tpu_hlo_type_t ft = *xt;
  tpu_hlo_value_t w;
  if (is_tensor(ctx, wi)) {
    tpu_hlo_value_t wf = along(b, tpu_emit_convert(b, tpu_lower_tensor(ctx, wi), ft.dtype), &ft,
                               p.cdim);
    w = sum_dims(b, tpu_emit_select(b, p.onehot, wf, tpu_emit_const_like(b, &ft, 0)),
                 (int64_t[]){p.cdim}, 1);
  } else {
    w = tpu_emit_convert(b, p.valid, ft.dtype); /* 1 for every valid target */
  }
  p.wt = tpu_emit_select(b, p.valid, w, tpu_emit_splat(b, w, 0));
  return p;
}

/* nll_loss_forward / nll_loss2d_forward(self, target, weight?, reduction,
 * ignore_index) -> (output, total_weight). */
static tpu_status_t lower_nll(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  if (!floating_out(ctx)) return tpu_lower_decline(ctx, "non-floating loss");
  tpu_hlo_value_t x = acc_tensor(ctx, 0);
  tpu_hlo_type_t xt = type_of(b, x);
  if (xt.rank < 1) return tpu_lower_decline(ctx, "rank-0 nll_loss input");
  int64_t red = int_arg(ctx, 3, REDUCE_MEAN);
  nll_parts_t p = nll_parts(ctx, 1, 2, int_arg(ctx, 4, -100), &xt);
  tpu_hlo_value_t picked =
      sum_dims(b, tpu_emit_select(b, p.onehot, x, tpu_emit_splat(b, x, 0)), (int64_t[]){p.cdim}, 1);
  tpu_hlo_value_t loss = tpu_emit_unary(b, "stablehlo.negate", tpu_emit_mul(b, picked, p.wt));
  loss = tpu_emit_select(b, p.valid, loss, tpu_emit_splat(b, loss, 0));
  tpu_hlo_value_t total = sum_all(b, p.wt);
  if (red == REDUCE_NONE) {
    set_out(ctx, 0, loss);
    /* PyTorch reports total_weight 0 for batched unreduced losses. */
    set_out(ctx, 1, xt.rank > 1 ? tpu_emit_splat(b, total, 0) : total);
    return NULL;
  }
  tpu_hlo_value_t s = sum_all(b, loss);
  set_out(ctx, 0, red == REDUCE_MEAN ? tpu_emit_div(b, s, total) : s);
  set_out(ctx, 1, total);
  return NULL;
}

/* nll_loss_backward / nll_loss2d_backward(grad_output, self, target,
 * weight?, reduction, ignore_index, total_weight): -w[t] g at the target
 * class. */
static tpu_status_t lower_nll_bwd(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  if (!floating_out(ctx)) return tpu_lower_decline(ctx, "non-floating loss");
  tpu_hlo_type_t xt = tpu_lower_arg(ctx, 1)->type;
  xt.dtype = acc_dtype(xt.dtype);
  if (xt.rank < 1) return tpu_lower_decline(ctx, "rank-0 nll_loss input");
  int64_t red = int_arg(ctx, 4, REDUCE_MEAN);
  nll_parts_t p = nll_parts(ctx, 2, 3, int_arg(ctx, 5, -100), &xt);
  tpu_hlo_value_t g = tpu_emit_convert(b, tpu_lower_tensor(ctx, 0), xt.dtype);
  tpu_hlo_value_t per = tpu_emit_unary(b, "stablehlo.negate", p.wt); /* target shape */
  tpu_hlo_type_t pt = type_of(b, per);
  if (red == REDUCE_MEAN)
    g = tpu_emit_div(b, g, tpu_emit_convert(b, tpu_lower_tensor(ctx, 6), xt.dtype));
  /* none: grad_output has the target's shape; else it is a scalar. */
  per = tpu_emit_mul(b, per, red == REDUCE_NONE ? tpu_emit_reshape(b, g, pt.dims, pt.rank)
                                       : tpu_emit_broadcast_to(b, g, &pt));
  int64_t keep[TPU_HLO_MAX_RANK];
  for (int d = 0; d < xt.rank; d++) keep[d] = d == p.cdim ? 1 : xt.dims[d];
  tpu_hlo_value_t full = tpu_emit_broadcast_to(b, tpu_emit_reshape(b, per, keep, xt.rank), &xt);
  set_out(ctx, 0, tpu_emit_select(b, p.onehot, full, tpu_emit_const_like(b, &xt, 0)));
  return NULL;
}

const tpu_lowering_t tpu_lowerings_loss[] = {
    {"nll_loss_forward", lower_nll, 0},
    {"nll_loss2d_forward", lower_nll, 0},
    {"nll_loss_backward", lower_nll_bwd, 0},
    {"nll_loss2d_backward", lower_nll_bwd, 0},
    {"mse_loss", lower_mse, 0},
    {"mse_loss_backward", lower_mse_bwd, 0},
    {"binary_cross_entropy", lower_bce, 0},
    {"binary_cross_entropy_backward", lower_bce_bwd, 0},
    {"smooth_l1_loss", lower_smooth, 0, false},
    {"smooth_l1_loss_backward", lower_smooth_bwd, 0, false},
    {"huber_loss", lower_smooth, 0, true},
    {"huber_loss_backward", lower_smooth_bwd, 0, true},
};
const size_t tpu_lowerings_loss_count = sizeof tpu_lowerings_loss / sizeof tpu_lowerings_loss[0];
