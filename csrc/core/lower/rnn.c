/* rnn family of the lowering table: the fused LSTM / GRU cell ops and
 * their backward ops.
 *
 * PyTorch's RNN code (aten/src/ATen/native/RNN.cpp) sends LSTMCell /
 * GRUCell steps of a non-CPU input, nn.LSTM / nn.GRU layers included, to
 * _thnn_fused_lstm_cell / _thnn_fused_gru_cell with the two gate matmuls
 * already done; the ops have no CPU kernel, so without these rows the cells
 * cannot run at all. The math is CUDA's fused kernels' (RNN.cu):
 *
 *   LSTM  gates [B, 4H] = input_gates + hidden_gates (+ both biases),
 *         chunks i, f, g, o: i, f, o = sigmoid, g = tanh;
 *         cy = f * cx + i * g;  hy = o * tanh(cy);
 *         workspace [B, 4H] = (i, f, g, o) after their activations.
 *   GRU   chunks r, z, n of each gate tensor [B, 3H]:
 *         r = sigmoid(ir + hr), z = sigmoid(iz + hz),
 *         n = tanh(in + r * hn)  (hn with the hidden bias),
 *         hy = n + z * (hx - n);
 *         workspace [B, 5H] = (r, z, n, hx, hn).
 *
 * The workspace layout is private to forward and backward (PyTorch only
 * passes it from one to the other), but we keep CUDA's so a workspace means
 * the same on every device. Half types compute in float32 and round once at
 * the end, as CUDA's accscalar_t does. */
#include "emit.h"
#include "lowering.h"

static tpu_dtype_t acc_dtype(tpu_dtype_t d) {
  return d == TPU_DTYPE_FLOAT16 || d == TPU_DTYPE_BFLOAT16 ? TPU_DTYPE_FLOAT32 : d;
}

static bool is_tensor(tpu_lower_ctx_t* ctx, int i) {
  return tpu_lower_arg(ctx, i)->kind == TPU_ARG_TENSOR;
}

/* Tensor argument i in `dtype`. */
static tpu_hlo_value_t tensor_as(tpu_lower_ctx_t* ctx, int i, tpu_dtype_t dtype) {
  return tpu_emit_convert(tpu_lower_builder(ctx), tpu_lower_tensor(ctx, i), dtype);
}

/* Columns [k * h, (k + 1) * h) of a [B, n * h] value. */
static tpu_hlo_value_t chunk(tpu_hlo_builder_t* b, tpu_hlo_value_t v, int64_t k, int64_t h) {
  tpu_hlo_type_t t = tpu_hlo_value_type(b, v);
  int64_t start[2] = {0, k * h}, limit[2] = {t.dims[0], (k + 1) * h}, stride[2] = {1, 1};
  return tpu_emit_slice(b, v, start, limit, stride);
}

/* [B, h] values side by side: [B, n * h]. */
static tpu_hlo_value_t concat_cols(tpu_hlo_builder_t* b, tpu_hlo_value_t* parts, int n) {
  tpu_hlo_type_t t = tpu_hlo_value_type(b, parts[0]);
  t.dims[1] *= n;
  return tpu_hlo_op(b, "stablehlo.concatenate", parts, n, t, "dimension = 1 : i64");
}

static tpu_hlo_value_t sigmoid(tpu_hlo_builder_t* b, tpu_hlo_value_t x) {
  return tpu_emit_unary(b, "stablehlo.logistic", x);
}
static tpu_hlo_value_t tanh_(tpu_hlo_builder_t* b, tpu_hlo_value_t x) {
  return tpu_emit_unary(b, "stablehlo.tanh", x);
}
/* 1 - x */
static tpu_hlo_value_t one_minus(tpu_hlo_builder_t* b, tpu_hlo_value_t x) {
  return tpu_emit_sub(b, tpu_emit_splat(b, x, 1.0), x);
}

/* Sets output i (when PyTorch asked for it) in its dtype and shape. */
static void set_out(tpu_lower_ctx_t* ctx, int i, tpu_hlo_value_t v) {
  if (i >= tpu_lower_num_outputs(ctx)) return;
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_type_t out = tpu_lower_output_type(ctx, i);
  v = tpu_emit_reshape(b, v, out.dims, out.rank);
  tpu_lower_set_output(ctx, i, tpu_emit_convert(b, v, out.dtype));
}

/* A [B, n] gate tensor plus the optional [n] bias argument `bias_arg`. */
static tpu_hlo_value_t plus_bias(tpu_lower_ctx_t* ctx, tpu_hlo_value_t gates, int bias_arg) {
  if (!is_tensor(ctx, bias_arg)) return gates;
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_type_t t = tpu_hlo_value_type(b, gates);
  return tpu_emit_add(b, gates, tpu_emit_cast_to(b, tpu_lower_tensor(ctx, bias_arg), &t));
}

/* Sum over the batch dim of a [B, n] gradient: the bias gradient [n]. */
static tpu_hlo_value_t batch_sum(tpu_hlo_builder_t* b, tpu_hlo_value_t g) {
  int64_t dim = 0;
  tpu_dtype_t dt = tpu_hlo_value_type(b, g).dtype;
  return tpu_emit_reduce(b, g, tpu_emit_const(b, dt, 0.0), &dim, 1, "stablehlo.add");
}

/* The checks the CUDA kernels make, so a call that reaches us with other
 * shapes declines instead of building a wrong program. */
static bool gates_shape_ok(tpu_lower_ctx_t* ctx, int n_chunks, int state_arg) {
  const tpu_lower_arg_t* ig = tpu_lower_arg(ctx, 0);
  const tpu_lower_arg_t* hg = tpu_lower_arg(ctx, 1);
  const tpu_lower_arg_t* st = tpu_lower_arg(ctx, state_arg);
  if (ig->kind != TPU_ARG_TENSOR || hg->kind != TPU_ARG_TENSOR || st->kind != TPU_ARG_TENSOR)
    return false;
  if (ig->type.rank != 2 || hg->type.rank != 2 || st->type.rank != 2) return false;
  int64_t bsz = ig->type.dims[0], h = st->type.dims[1];
  return hg->type.dims[0] == bsz && st->type.dims[0] == bsz &&
         ig->type.dims[1] == n_chunks * h && hg->type.dims[1] == n_chunks * h;
}

static bool floating_out(tpu_lower_ctx_t* ctx) {
  return tpu_lower_num_outputs(ctx) == 0 ||
         tpu_dtype_is_floating(tpu_lower_output_type(ctx, 0).dtype);
}

/* ---- LSTM ---- */

/* _thnn_fused_lstm_cell(input_gates, hidden_gates, cx, input_bias?,
 * hidden_bias?) -> (hy, cy, workspace). */
static tpu_status_t lower_lstm_cell(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  if (!floating_out(ctx)) return tpu_lower_decline(ctx, "non-floating lstm cell");
  if (!gates_shape_ok(ctx, 4, 2)) return tpu_lower_decline(ctx, "unexpected gate shapes");
  tpu_dtype_t dt = acc_dtype(tpu_lower_output_type(ctx, 0).dtype);
  int64_t h = tpu_lower_arg(ctx, 2)->type.dims[1];
  tpu_hlo_value_t gates = tpu_emit_add(b, tensor_as(ctx, 0, dt), tensor_as(ctx, 1, dt));
  gates = plus_bias(ctx, plus_bias(ctx, gates, 3), 4);
  tpu_hlo_value_t act[4];
  for (int k = 0; k < 4; k++) {
    tpu_hlo_value_t g = chunk(b, gates, k, h);
    act[k] = k == 2 ? tanh_(b, g) : sigmoid(b, g);
  }
  tpu_hlo_value_t cx = tensor_as(ctx, 2, dt);
  tpu_hlo_value_t cy = tpu_emit_add(b, tpu_emit_mul(b, act[1], cx), tpu_emit_mul(b, act[0], act[2]));
  tpu_hlo_value_t hy = tpu_emit_mul(b, act[3], tanh_(b, cy));
  set_out(ctx, 0, hy);
  set_out(ctx, 1, cy);
  set_out(ctx, 2, concat_cols(b, act, 4));
  return NULL;
}

/* _thnn_fused_lstm_cell_backward_impl(grad_hy?, grad_cy?, cx, cy,
 * workspace, has_bias) -> (grad_gates, grad_cx, grad_bias?): grad_gates
 * serves both gate inputs (their sum is what the forward used); an absent
 * grad_hy / grad_cy is zero, and with both absent PyTorch asks for no
 * outputs at all. */
static tpu_status_t lower_lstm_cell_bwd(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  if (tpu_lower_num_outputs(ctx) == 0) return NULL;
  if (!floating_out(ctx)) return tpu_lower_decline(ctx, "non-floating lstm cell");
  const tpu_lower_arg_t* cx_arg = tpu_lower_arg(ctx, 2);
  if (cx_arg->kind != TPU_ARG_TENSOR || cx_arg->type.rank != 2)
    return tpu_lower_decline(ctx, "unexpected state shape");
  tpu_dtype_t dt = acc_dtype(tpu_lower_output_type(ctx, 0).dtype);
  int64_t h = cx_arg->type.dims[1];
  tpu_hlo_value_t cx = tensor_as(ctx, 2, dt), cy = tensor_as(ctx, 3, dt);
  tpu_hlo_value_t ws = tensor_as(ctx, 4, dt);
  tpu_hlo_value_t i = chunk(b, ws, 0, h), f = chunk(b, ws, 1, h);
  tpu_hlo_value_t g = chunk(b, ws, 2, h), o = chunk(b, ws, 3, h);
  tpu_hlo_value_t zero = tpu_emit_splat(b, cx, 0.0);
  tpu_hlo_value_t ghy = is_tensor(ctx, 0) ? tensor_as(ctx, 0, dt) : zero;
  tpu_hlo_value_t gcy = is_tensor(ctx, 1) ? tensor_as(ctx, 1, dt) : zero;
  tpu_hlo_value_t tcy = tanh_(b, cy);
  /* dL/dc: through hy = o * tanh(cy), plus what arrives for cy itself. */
  tpu_hlo_value_t gc = tpu_emit_add(
      b, tpu_emit_mul(b, tpu_emit_mul(b, ghy, o), one_minus(b, tpu_emit_mul(b, tcy, tcy))), gcy);
  tpu_hlo_value_t grads[4] = {
      /* d sigmoid = s (1 - s); d tanh = 1 - t^2 */
      tpu_emit_mul(b, tpu_emit_mul(b, gc, g), tpu_emit_mul(b, i, one_minus(b, i))),
      tpu_emit_mul(b, tpu_emit_mul(b, gc, cx), tpu_emit_mul(b, f, one_minus(b, f))),
      tpu_emit_mul(b, tpu_emit_mul(b, gc, i), one_minus(b, tpu_emit_mul(b, g, g))),
      tpu_emit_mul(b, tpu_emit_mul(b, ghy, tcy), tpu_emit_mul(b, o, one_minus(b, o))),
  };
  tpu_hlo_value_t gates = concat_cols(b, grads, 4);
  set_out(ctx, 0, gates);
  set_out(ctx, 1, tpu_emit_mul(b, gc, f));
  set_out(ctx, 2, batch_sum(b, gates));
  return NULL;
}

/* ---- GRU ---- */

/* _thnn_fused_gru_cell(input_gates, hidden_gates, hx, input_bias?,
 * hidden_bias?) -> (hy, workspace). */
static tpu_status_t lower_gru_cell(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  if (!floating_out(ctx)) return tpu_lower_decline(ctx, "non-floating gru cell");
  if (!gates_shape_ok(ctx, 3, 2)) return tpu_lower_decline(ctx, "unexpected gate shapes");
  tpu_dtype_t dt = acc_dtype(tpu_lower_output_type(ctx, 0).dtype);
  int64_t h = tpu_lower_arg(ctx, 2)->type.dims[1];
  tpu_hlo_value_t ig = plus_bias(ctx, tensor_as(ctx, 0, dt), 3);
  tpu_hlo_value_t hg = plus_bias(ctx, tensor_as(ctx, 1, dt), 4);
  tpu_hlo_value_t hx = tensor_as(ctx, 2, dt);
  tpu_hlo_value_t r = sigmoid(b, tpu_emit_add(b, chunk(b, ig, 0, h), chunk(b, hg, 0, h)));
  tpu_hlo_value_t z = sigmoid(b, tpu_emit_add(b, chunk(b, ig, 1, h), chunk(b, hg, 1, h)));
  tpu_hlo_value_t hn = chunk(b, hg, 2, h);
  tpu_hlo_value_t n = tanh_(b, tpu_emit_add(b, chunk(b, ig, 2, h), tpu_emit_mul(b, r, hn)));
  tpu_hlo_value_t hy = tpu_emit_add(b, n, tpu_emit_mul(b, z, tpu_emit_sub(b, hx, n)));
  tpu_hlo_value_t ws[5] = {r, z, n, hx, hn};
  set_out(ctx, 0, hy);
  set_out(ctx, 1, concat_cols(b, ws, 5));
  return NULL;
}

/* _thnn_fused_gru_cell_backward(grad_hy, workspace, has_bias) ->
 * (grad_input_gates, grad_hidden_gates, grad_hx, grad_input_bias?,
 * grad_hidden_bias?). The gate gradients differ only in the n chunk: the
 * hidden one is scaled by r. */
static tpu_status_t lower_gru_cell_bwd(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  if (!floating_out(ctx)) return tpu_lower_decline(ctx, "non-floating gru cell");
  const tpu_lower_arg_t* g_arg = tpu_lower_arg(ctx, 0);
  const tpu_lower_arg_t* ws_arg = tpu_lower_arg(ctx, 1);
  if (g_arg->kind != TPU_ARG_TENSOR || ws_arg->kind != TPU_ARG_TENSOR || g_arg->type.rank != 2 ||
      ws_arg->type.rank != 2 || ws_arg->type.dims[1] != 5 * g_arg->type.dims[1])
    return tpu_lower_decline(ctx, "unexpected workspace shape");
  tpu_dtype_t dt = acc_dtype(tpu_lower_output_type(ctx, 0).dtype);
  int64_t h = g_arg->type.dims[1];
  tpu_hlo_value_t go = tensor_as(ctx, 0, dt), ws = tensor_as(ctx, 1, dt);
  tpu_hlo_value_t r = chunk(b, ws, 0, h), z = chunk(b, ws, 1, h), n = chunk(b, ws, 2, h);
  tpu_hlo_value_t hx = chunk(b, ws, 3, h), hn = chunk(b, ws, 4, h);
  tpu_hlo_value_t gz = tpu_emit_mul(b, tpu_emit_mul(b, go, tpu_emit_sub(b, hx, n)),
                                    tpu_emit_mul(b, z, one_minus(b, z)));
  tpu_hlo_value_t gn = tpu_emit_mul(b, tpu_emit_mul(b, go, one_minus(b, z)),
                                    one_minus(b, tpu_emit_mul(b, n, n)));
  tpu_hlo_value_t gr = tpu_emit_mul(b, tpu_emit_mul(b, gn, hn), tpu_emit_mul(b, r, one_minus(b, r)));
  tpu_hlo_value_t in_parts[3] = {gr, gz, gn}, hid_parts[3] = {gr, gz, tpu_emit_mul(b, gn, r)};
  tpu_hlo_value_t gi = concat_cols(b, in_parts, 3), gh = concat_cols(b, hid_parts, 3);
  set_out(ctx, 0, gi);
  set_out(ctx, 1, gh);
  set_out(ctx, 2, tpu_emit_mul(b, go, z));
  set_out(ctx, 3, batch_sum(b, gi));
  set_out(ctx, 4, batch_sum(b, gh));
  return NULL;
}

const tpu_lowering_t tpu_lowerings_rnn[] = {
    {"_thnn_fused_lstm_cell", lower_lstm_cell, 0},
    {"_thnn_fused_lstm_cell_backward_impl", lower_lstm_cell_bwd, 0},
    {"_thnn_fused_gru_cell", lower_gru_cell, 0},
    {"_thnn_fused_gru_cell_backward", lower_gru_cell_bwd, 0},
};
const size_t tpu_lowerings_rnn_count = sizeof tpu_lowerings_rnn / sizeof tpu_lowerings_rnn[0];
