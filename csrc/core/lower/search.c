/* search family of the lowering table (see lowering.h): searchsorted and
 * bucketize, every overload. Both are PyTorch's CPU binary search
 * (tpu_emit_search_sorted) over rows of the sorted sequence, in the common
 * dtype of sequence and values. Whatever CPU refuses by reading values or
 * by a check its meta kernel lacks (an unknown `side`, a sorter that is
 * not int64, bucketize's boundaries of rank > 1, bool or complex
 * operands) is declined, so the fallback raises CPU's own error; a
 * sorter's out-of-range indices are refused before the call
 * (csrc/torch/dispatch.cpp, check_sorter). */
#include <string.h>

#include "emit.h"
#include "lowering.h"

/* searchsorted.{Tensor,Scalar}[_out](sorted_sequence, self, *, out_int32,
 * right, side, sorter) (data 1) and bucketize.{Tensor,Scalar}[_out](self,
 * boundaries, *, out_int32, right). */
static tpu_status_t lower_search(tpu_lower_ctx_t* ctx) {
  bool has_side = tpu_lower_data(ctx);
  int seq_i = has_side ? 0 : 1, val_i = 1 - seq_i, flag_i = 2;
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  const tpu_lower_arg_t* seq = tpu_lower_arg(ctx, seq_i);
  const tpu_lower_arg_t* val = tpu_lower_arg(ctx, val_i);
  if (seq->kind != TPU_ARG_TENSOR || seq->type.rank == 0)
    return tpu_lower_decline(ctx, "a sorted sequence of rank 0");
  if (!has_side && seq->type.rank != 1)
    return tpu_lower_decline(ctx, "bucketize boundaries of rank %d", seq->type.rank);
  if (val->kind != TPU_ARG_TENSOR && val->kind != TPU_ARG_SCALAR)
    return tpu_lower_decline(ctx, "values that are not a tensor or a number");
  const int idx[2] = {seq_i, val_i};
  tpu_dtype_t d = tpu_lower_result_type(ctx, idx, 2);
  if (d == TPU_DTYPE_BOOL || tpu_dtype_is_complex(d) || tpu_dtype_is_complex(seq->type.dtype) ||
      tpu_dtype_is_complex(val->type.dtype))
    return tpu_lower_decline(ctx, "searchsorted in %s", tpu_dtype_name(d));
  bool out_int32 = tpu_lower_arg(ctx, flag_i)->i != 0;
  bool upper = tpu_lower_arg(ctx, flag_i + 1)->i != 0;
  tpu_hlo_value_t sorter = {-1};
  if (has_side) {
    const tpu_lower_arg_t* side = tpu_lower_arg(ctx, flag_i + 2);
    if (side->kind == TPU_ARG_STRING) {
      if (strcmp(side->str, "right") == 0) upper = true;
      else if (strcmp(side->str, "left") != 0 || upper)
        return tpu_lower_decline(ctx, "side=\"%s\" with right=%d", side->str, (int)upper);
    }
    const tpu_lower_arg_t* s = tpu_lower_arg(ctx, flag_i + 3);
    if (s->kind == TPU_ARG_TENSOR) {
      if (s->type.dtype != TPU_DTYPE_INT64) return tpu_lower_decline(ctx, "a sorter that is not int64");
      sorter = tpu_lower_tensor(ctx, flag_i + 3);
    } else if (s->kind != TPU_ARG_NONE) {
      return tpu_lower_decline(ctx, "a sorter that is not a tensor");
    }
  }
  tpu_hlo_type_t out = tpu_lower_output_type(ctx, 0);
  if (out.dtype != (out_int32 ? TPU_DTYPE_INT32 : TPU_DTYPE_INT64))
    return tpu_lower_decline(ctx, "an output of %s", tpu_dtype_name(out.dtype));
  /* Rows: a 1-D sequence serves every value; else one row per leading
   * index (the meta kernel checked the leading dims match). */
  const tpu_hlo_type_t* st = &seq->type;
  int64_t m = st->dims[st->rank - 1], rows = 1, n = 1;
  for (int k = 0; k + 1 < st->rank; k++) rows *= st->dims[k];
  for (int k = 0; k < val->type.rank; k++) n *= val->type.dims[k];
  if (rows > 0) n /= rows;
  const int64_t seq_dims[2] = {rows, m}, val_dims[2] = {rows, n};
  tpu_hlo_value_t s = tpu_emit_reshape(b, tpu_emit_convert(b, tpu_lower_tensor(ctx, seq_i), d),
                                       seq_dims, 2);
  tpu_hlo_value_t v = val->kind == TPU_ARG_TENSOR ? tpu_emit_convert(b, tpu_lower_tensor(ctx, val_i), d)
                                                  : tpu_lower_scalar(ctx, val_i, d);
  v = tpu_emit_reshape(b, v, val_dims, 2);
  if (sorter.id >= 0) sorter = tpu_emit_reshape(b, sorter, seq_dims, 2);
  tpu_hlo_value_t r = tpu_emit_search_sorted(b, s, v, sorter, upper);
  r = tpu_emit_convert(b, r, out.dtype);
  tpu_lower_set_output(ctx, 0, tpu_emit_reshape(b, r, out.dims, out.rank));
  return NULL;
}

const tpu_lowering_t tpu_lowerings_search[] = {
    {"searchsorted", lower_search, 0, 1},
    {"bucketize", lower_search, 0},
};
const size_t tpu_lowerings_search_count = sizeof tpu_lowerings_search / sizeof tpu_lowerings_search[0];
