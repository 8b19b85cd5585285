/* Attention family: scaled_dot_product_attention as one op.
 *
 * PyTorch decomposes F.scaled_dot_product_attention for a device without a
 * fused kernel into about twelve ops (a mask built from ones/tril/where,
 * the scale, bmm, the mask add, _safe_softmax, bmm): in a program these
 * became transposing copies of q, k and v, a materialised [L, S] mask and
 * a masked add per layer (strict: 768 us a call for the demo's attention
 * against CPU's 205). csrc/torch/attention.cpp makes SDPA choose the
 * "overrideable" backend for tpu tensors, whose forward and backward ops
 * are lowered here in the form XLA fuses: dot_generals batched over the
 * leading dims (no transposes), the causal mask as an iota compare folded
 * into the scores, the softmax in float32 with its row sums kept as the
 * logsumexp the backward reads.
 *
 * A row whose every key is masked out (-inf scores) gives zeros and zero
 * gradients, as PyTorch's math path (_safe_softmax) and CPU's flash kernel
 * do, and its logsumexp is -inf. Half types compute in float32 and round
 * once, as CPU's kernels accumulate. */
#include <math.h>
#include <stdio.h>

#include "emit.h"
#include "lowering.h"
#include "nn_internal.h"

/* Schema positions. */
enum { FWD_Q, FWD_K, FWD_V, FWD_BIAS, FWD_DROPOUT, FWD_CAUSAL, FWD_DEBUG_MASK, FWD_SCALE };
enum {
  BWD_GRAD, BWD_Q, BWD_K, BWD_V, BWD_BIAS, BWD_MASK, BWD_OUT, BWD_LSE,
  BWD_DROPOUT = 12, BWD_CAUSAL = 13, BWD_SCALE = 16
};

/* "0, 1" for the batch dims 0..n-1. */
static void batch_dims(int n, char* out, size_t cap) {
  size_t len = 0;
  out[0] = '\0';
  for (int d = 0; d < n && len + 4 < cap; d++)
    len += (size_t)snprintf(out + len, cap - len, d ? ", %d" : "%d", d);
}

/* dot_general of x and y batched over their leading `nb` dims, contracting
 * dim cx of x with dim cy of y: [batch..., x free, y free], float32. */
static tpu_hlo_value_t bdot(tpu_hlo_builder_t* b, tpu_hlo_value_t x, tpu_hlo_value_t y, int nb,
                            int cx, int cy) {
  tpu_hlo_type_t xt = type_of(b, x), yt = type_of(b, y);
  tpu_hlo_type_t out = {.dtype = xt.dtype};
  for (int d = 0; d < nb; d++) out.dims[out.rank++] = xt.dims[d];
  for (int d = nb; d < xt.rank; d++)
    if (d != cx) out.dims[out.rank++] = xt.dims[d];
  for (int d = nb; d < yt.rank; d++)
    if (d != cy) out.dims[out.rank++] = yt.dims[d];
  char batch[64], attrs[320];
  batch_dims(nb, batch, sizeof batch);
  snprintf(attrs, sizeof attrs,
           "dot_dimension_numbers = #stablehlo.dot<lhs_batching_dimensions = [%s], "
           "rhs_batching_dimensions = [%s], lhs_contracting_dimensions = [%d], "
           "rhs_contracting_dimensions = [%d]>",
           batch, batch, cx, cy);
  tpu_hlo_value_t ops[2] = {x, y};
  return tpu_hlo_op(b, "stablehlo.dot_general", ops, 2, out, attrs);
}

/* A [..., L] row value broadcast along a new last dim to `full`. */
static tpu_hlo_value_t per_row(tpu_hlo_builder_t* b, tpu_hlo_value_t row,
                               const tpu_hlo_type_t* full) {
  tpu_hlo_type_t t = *full;
  t.dims[t.rank - 1] = 1;
  tpu_hlo_value_t r = tpu_emit_reshape(b, row, t.dims, t.rank);
  t = *full;
  t.dtype = type_of(b, row).dtype;
  return tpu_emit_broadcast_to(b, r, &t);
}

/* The softmax scale: the scale argument, or 1/sqrt(head dim). */
static double scale_of(tpu_lower_ctx_t* ctx, int arg, int64_t head_dim) {
  const tpu_lower_arg_t* a = tpu_lower_arg(ctx, arg);
  if (a->kind == TPU_ARG_FLOAT) return a->f;
  return 1.0 / sqrt((double)head_dim);
}

/* The scaled, masked scores q k^T * scale [+ bias] (causal: keys after
 * the query's position -inf, top-left aligned as PyTorch's tril), float32
 * [..., L, S]. q, k float32. */
static tpu_hlo_value_t scores(tpu_lower_ctx_t* ctx, tpu_hlo_value_t q, tpu_hlo_value_t k,
                              int bias_arg, bool causal, double scale) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  int r = type_of(b, q).rank;
  tpu_hlo_value_t s = mul_c(b, bdot(b, q, k, r - 2, r - 1, r - 1), scale);
  tpu_hlo_type_t st = type_of(b, s);
  if (causal) {
    tpu_hlo_type_t it = st;
    it.dtype = TPU_DTYPE_INT32;
    tpu_hlo_value_t later = tpu_emit_compare(b, "GT", tpu_emit_iota(b, &it, r - 1),
                                             tpu_emit_iota(b, &it, r - 2));
    s = tpu_emit_select(b, later, tpu_emit_splat(b, s, -INFINITY), s);
  }
  if (is_tensor(ctx, bias_arg))
    s = tpu_emit_add(b, s, tpu_emit_cast_to(b, tpu_lower_tensor(ctx, bias_arg), &st));
  return s;
}

static bool attention_dtype(tpu_dtype_t d) {
  return d == TPU_DTYPE_FLOAT32 || d == TPU_DTYPE_FLOAT64 || d == TPU_DTYPE_BFLOAT16 ||
         d == TPU_DTYPE_FLOAT16;
}

/* The common checks: floating q/k/v of one dtype, rank >= 3 with equal
 * batch dims (attention.cpp's chooser sends anything else to the math
 * path), no dropout. */
static tpu_status_t check_call(tpu_lower_ctx_t* ctx, int q_arg, int dropout_arg) {
  const tpu_hlo_type_t* q = &tpu_lower_arg(ctx, q_arg)->type;
  const tpu_hlo_type_t* k = &tpu_lower_arg(ctx, q_arg + 1)->type;
  const tpu_hlo_type_t* v = &tpu_lower_arg(ctx, q_arg + 2)->type;
  if (!attention_dtype(q->dtype) || k->dtype != q->dtype || v->dtype != q->dtype)
    return tpu_lower_decline(ctx, "attention of %s", tpu_dtype_name(q->dtype));
  if (q->rank < 3 || k->rank != q->rank || v->rank != q->rank)
    return tpu_lower_decline(ctx, "attention of rank %d", q->rank);
  for (int d = 0; d < q->rank - 2; d++)
    if (k->dims[d] != q->dims[d] || v->dims[d] != q->dims[d])
      return tpu_lower_decline(ctx, "attention with broadcast batch dims");
  if (tpu_lower_arg(ctx, dropout_arg)->kind == TPU_ARG_FLOAT &&
      tpu_lower_arg(ctx, dropout_arg)->f != 0.0)
    return tpu_lower_decline(ctx, "attention dropout");
  return NULL;
}

/* Sets output i from v, rounded to its dtype and shaped as it. */
static void set_shaped(tpu_lower_ctx_t* ctx, int i, tpu_hlo_value_t v) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_type_t t = tpu_lower_output_type(ctx, i);
  tpu_lower_set_output(ctx, i, tpu_emit_reshape(b, tpu_emit_convert(b, v, t.dtype), t.dims, t.rank));
}

/* ---- the host kernel's marks (core/hostattn.h) ---- */

/* The dims the marks carry: the batch dims as one word ("16x4"), L, S,
 * D, DV. Values keep their shapes: the kernel reads the leading dims as
 * one (a reshape merging them would stop XLA's SPMD partitioner from
 * keeping a batch-sharded attention sharded). */
static void mark_dims(tpu_hlo_builder_t* b, tpu_hlo_value_t q, tpu_hlo_value_t v, char* buf,
                      size_t cap) {
  tpu_hlo_type_t qt = type_of(b, q), vt = type_of(b, v);
  size_t len = 0;
  buf[0] = '\0';
  for (int d = 0; d < qt.rank - 2; d++)
    len += (size_t)snprintf(buf + len, cap - len, "%s%lld", d ? "x" : "", (long long)qt.dims[d]);
  snprintf(buf + len, cap - len, " %lld %lld %lld %lld", (long long)qt.dims[qt.rank - 2],
           (long long)vt.dims[vt.rank - 2], (long long)qt.dims[qt.rank - 1],
           (long long)vt.dims[vt.rank - 1]);
}

/* An identity reshape of x (its own line, carrying attrs or none). */
static tpu_hlo_value_t named(tpu_hlo_builder_t* b, tpu_hlo_value_t x, const char* attrs) {
  return tpu_hlo_op(b, "stablehlo.reshape", &x, 1, type_of(b, x), attrs);
}

/* The marker's operand words: q k v bias|- (the bias broadcast to the
 * scores' shape), into buf. */
static void mark_operands(tpu_lower_ctx_t* ctx, tpu_hlo_value_t q, tpu_hlo_value_t k,
                          tpu_hlo_value_t v, int bias_arg, const tpu_hlo_type_t* full, char* buf,
                          size_t cap) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_value_t ops[4] = {q, k, v};
  int n = 3;
  if (is_tensor(ctx, bias_arg))
    ops[n++] = tpu_emit_cast_to(b, tpu_lower_tensor(ctx, bias_arg), full);
  size_t len = 0;
  buf[0] = '\0';
  for (int i = 0; i < 4; i++) {
    char name[32] = "-";
    if (i < n) tpu_hlo_value_name(b, ops[i], name, sizeof name);
    len += (size_t)snprintf(buf + len, cap - len, "%s%s", i ? " " : "", name);
  }
}

/* _scaled_dot_product_fused_attention_overrideable(q, k, v, attn_bias,
 * dropout_p, is_causal, return_debug_mask, *, scale) -> output, logsumexp
 * (float32 [B, H, L]), then the engine's outputs for philox_seed and
 * philox_offset (zeros: no dropout). The other returns are undefined or
 * numbers (max_q, max_k) the boxed kernel takes from the meta kernel. */
static tpu_status_t lower_sdpa(tpu_lower_ctx_t* ctx) {
  tpu_status_t st = check_call(ctx, FWD_Q, FWD_DROPOUT);
  if (st) return st;
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_value_t q = acc_tensor(ctx, FWD_Q), k = acc_tensor(ctx, FWD_K),
                  v = acc_tensor(ctx, FWD_V);
  tpu_hlo_type_t qt = type_of(b, q);
  int r = qt.rank;
  double scale = scale_of(ctx, FWD_SCALE, qt.dims[r - 1]);
  bool causal = tpu_lower_arg(ctx, FWD_CAUSAL)->i != 0;
  tpu_hlo_value_t s = scores(ctx, q, k, FWD_BIAS, causal, scale);
  tpu_hlo_type_t full = type_of(b, s);
  int64_t last = r - 1;
  /* A fully masked row has max -inf: shifting by 0 instead keeps its
   * exps 0 (not NaN), its sum 0 and its logsumexp log(0) = -inf. */
  tpu_hlo_value_t m = reduce_with(b, s, &last, 1, "stablehlo.maximum", -INFINITY);
  tpu_hlo_value_t masked = tpu_emit_compare(b, "EQ", m, tpu_emit_splat(b, m, -INFINITY));
  m = tpu_emit_select(b, masked, tpu_emit_splat(b, m, 0), m);
  tpu_hlo_value_t e = tpu_emit_unary(b, "stablehlo.exponential",
                                     tpu_emit_sub(b, s, per_row(b, m, &full)));
  tpu_hlo_value_t sum = sum_dims(b, e, &last, 1);
  /* 1 / sum per row (a multiply an element, as the softmax does), 0 for a
   * masked row so its output is 0. */
  tpu_hlo_value_t inv = tpu_emit_select(b, masked, tpu_emit_splat(b, sum, 0),
                                        tpu_emit_div(b, tpu_emit_splat(b, sum, 1), sum));
  tpu_hlo_value_t o = bdot(b, e, v, r - 2, r - 1, r - 2);
  tpu_hlo_type_t ot = type_of(b, o);
  o = tpu_emit_mul(b, o, per_row(b, inv, &ot));
  tpu_hlo_value_t lse = tpu_emit_add(b, m, tpu_emit_unary(b, "stablehlo.log", sum));
  if (full.dtype == TPU_DTYPE_FLOAT32) {
    /* The host kernel's mark: out and lse named in order. */
    char ops[160], name[32], dims[96], attrs[400];
    mark_operands(ctx, q, k, v, FWD_BIAS, &full, ops, sizeof ops);
    mark_dims(b, q, v, dims, sizeof dims);
    o = named(b, o, NULL);
    tpu_hlo_value_name(b, o, name, sizeof name);
    snprintf(attrs, sizeof attrs,
             "mhlo.frontend_attributes = {torchtpu_attn = \"fwd %s %s %d %.9e %s\"}", ops,
             name, causal, scale, dims);
    lse = named(b, lse, attrs);
  }
  set_shaped(ctx, 0, o);
  set_shaped(ctx, 1, lse);
  for (int i = 2; i < tpu_lower_num_outputs(ctx); i++) {
    tpu_hlo_type_t t = tpu_lower_output_type(ctx, i);
    tpu_lower_set_output(ctx, i, tpu_emit_const_like(b, &t, 0));
  }
  return NULL;
}

/* ds [..., L, S] summed to the bias's shape (its broadcast dims). */
static tpu_hlo_value_t to_bias_shape(tpu_hlo_builder_t* b, tpu_hlo_value_t ds,
                                     const tpu_hlo_type_t* bias) {
  tpu_hlo_type_t t = type_of(b, ds);
  int64_t dims[TPU_HLO_MAX_RANK];
  int n = 0, lead = t.rank - bias->rank;
  for (int d = 0; d < t.rank; d++) {
    bool broadcast = d < lead || (bias->dims[d - lead] == 1 && t.dims[d] != 1);
    if (broadcast) dims[n++] = d;
  }
  if (n) ds = sum_dims(b, ds, dims, n);
  return tpu_emit_reshape(b, ds, bias->dims, bias->rank);
}

/* _scaled_dot_product_fused_attention_overrideable_backward(grad_out, q,
 * k, v, attn_bias, grad_input_mask, out, logsumexp, cum_seq_q, cum_seq_k,
 * max_q, max_k, dropout_p, is_causal, philox_seed, philox_offset, *,
 * scale) -> grad_query, grad_key, grad_value[, grad_attn_bias]: the
 * probabilities recomputed from the scores and the forward's logsumexp,
 * dv = p^T g, ds = p * (g v^T - rowsum(g * out)), dq = ds k * scale,
 * dk = ds^T q * scale, the bias's gradient ds summed to its shape. */
static tpu_status_t lower_sdpa_bwd(tpu_lower_ctx_t* ctx) {
  tpu_status_t st = check_call(ctx, BWD_Q, BWD_DROPOUT);
  if (st) return st;
  if (!is_tensor(ctx, BWD_OUT) || !is_tensor(ctx, BWD_LSE))
    return tpu_lower_decline(ctx, "attention backward without the forward's results");
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_value_t g = acc_tensor(ctx, BWD_GRAD), q = acc_tensor(ctx, BWD_Q),
                  k = acc_tensor(ctx, BWD_K), v = acc_tensor(ctx, BWD_V),
                  out = acc_tensor(ctx, BWD_OUT);
  tpu_hlo_type_t qt = type_of(b, q);
  int r = qt.rank;
  double scale = scale_of(ctx, BWD_SCALE, qt.dims[r - 1]);
  bool causal = tpu_lower_arg(ctx, BWD_CAUSAL)->i != 0;
  tpu_hlo_value_t s = scores(ctx, q, k, BWD_BIAS, causal, scale);
  tpu_hlo_type_t full = type_of(b, s);
  /* logsumexp as the forward gave it, [..., L]. */
  tpu_hlo_type_t lt = full;
  lt.rank--;
  tpu_hlo_value_t lse = tpu_emit_reshape(b, tpu_emit_convert(b, tpu_lower_tensor(ctx, BWD_LSE),
                                                             TPU_DTYPE_FLOAT32),
                                         lt.dims, lt.rank);
  lse = tpu_emit_convert(b, lse, full.dtype);
  /* A masked row (-inf logsumexp) has p = 0, not exp(-inf + inf). */
  tpu_hlo_value_t masked = tpu_emit_compare(b, "EQ", lse, tpu_emit_splat(b, lse, -INFINITY));
  lse = tpu_emit_select(b, masked, tpu_emit_splat(b, lse, INFINITY), lse);
  tpu_hlo_value_t p = tpu_emit_unary(b, "stablehlo.exponential",
                                     tpu_emit_sub(b, s, per_row(b, lse, &full)));
  int64_t last = r - 1;
  tpu_hlo_value_t dv = bdot(b, p, g, r - 2, r - 2, r - 2);
  tpu_hlo_value_t dp = bdot(b, g, v, r - 2, r - 1, r - 1);
  tpu_hlo_value_t rowsum = sum_dims(b, tpu_emit_mul(b, g, out), &last, 1);
  tpu_hlo_value_t ds = tpu_emit_mul(b, p, tpu_emit_sub(b, dp, per_row(b, rowsum, &full)));
  tpu_hlo_value_t dss = mul_c(b, ds, scale);
  tpu_hlo_value_t dq = bdot(b, dss, k, r - 2, r - 1, r - 2), dk = bdot(b, dss, q, r - 2, r - 2, r - 2);
  if (full.dtype == TPU_DTYPE_FLOAT32 && tpu_lower_num_outputs(ctx) == 3) {
    /* The host kernel's mark (no bias gradient): dq, dk, dv named in order. */
    char ops[160], rest[128], names[2][32], dims[96], attrs[640];
    mark_operands(ctx, q, k, v, BWD_BIAS, &full, ops, sizeof ops);
    mark_dims(b, q, v, dims, sizeof dims);
    tpu_hlo_value_t in[3] = {g, out, tpu_emit_reshape(b, tpu_lower_tensor(ctx, BWD_LSE), lt.dims,
                                                      lt.rank)};
    size_t len = 0;
    for (int i = 0; i < 3; i++) {
      tpu_hlo_value_name(b, in[i], names[0], sizeof names[0]);
      len += (size_t)snprintf(rest + len, sizeof rest - len, " %s", names[0]);
    }
    dq = named(b, dq, NULL);
    dk = named(b, dk, NULL);
    tpu_hlo_value_name(b, dq, names[0], sizeof names[0]);
    tpu_hlo_value_name(b, dk, names[1], sizeof names[1]);
    snprintf(attrs, sizeof attrs,
             "mhlo.frontend_attributes = {torchtpu_attn = \"bwd %s%s %s %s %d %.9e %s\"}", ops,
             rest, names[0], names[1], causal, scale, dims);
    dv = named(b, dv, attrs);
  }
  set_shaped(ctx, 0, dq);
  set_shaped(ctx, 1, dk);
  set_shaped(ctx, 2, dv);
  if (tpu_lower_num_outputs(ctx) > 3) {
    if (!is_tensor(ctx, BWD_BIAS)) return tpu_lower_decline(ctx, "a bias gradient without a bias");
    const tpu_hlo_type_t* bias = &tpu_lower_arg(ctx, BWD_BIAS)->type;
    set_shaped(ctx, 3, to_bias_shape(b, ds, bias));
  }
  return NULL;
}

const tpu_lowering_t tpu_lowerings_attention[] = {
    {"_scaled_dot_product_fused_attention_overrideable", lower_sdpa, 0},
    {"_scaled_dot_product_fused_attention_overrideable_backward", lower_sdpa_bwd, 0},
};
const size_t tpu_lowerings_attention_count =
    sizeof tpu_lowerings_attention / sizeof tpu_lowerings_attention[0];
