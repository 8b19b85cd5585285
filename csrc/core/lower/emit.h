/* Shared emit helpers for lowerings: broadcasting, conversion, type
 * promotion, reductions, constants. Lowerings are built from these so they
 * stay a few lines each. */
#ifndef TORCHTPU_CORE_LOWER_EMIT_H_
#define TORCHTPU_CORE_LOWER_EMIT_H_

#include "../hlo/builder.h"
#include "lowering.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Broadcasts `value` to `type`'s shape (numpy rules, right-aligned; size-1
 * dims expand). Keeps the value's dtype. */
tpu_hlo_value_t tpu_emit_broadcast_to(tpu_hlo_builder_t* b, tpu_hlo_value_t value,
                                      const tpu_hlo_type_t* type);
/* Converts to `dtype` (no-op when equal). bool targets compare != 0. */
tpu_hlo_value_t tpu_emit_convert(tpu_hlo_builder_t* b, tpu_hlo_value_t value,
                                 tpu_dtype_t dtype);
/* Converts and broadcasts to `type` (dtype and shape). */
tpu_hlo_value_t tpu_emit_cast_to(tpu_hlo_builder_t* b, tpu_hlo_value_t value,
                                 const tpu_hlo_type_t* type);
/* A constant scalar of dtype (splat over `type` when type != NULL, else
 * rank 0). */
tpu_hlo_value_t tpu_emit_const(tpu_hlo_builder_t* b, tpu_dtype_t dtype, double value);
tpu_hlo_value_t tpu_emit_const_like(tpu_hlo_builder_t* b, const tpu_hlo_type_t* type,
                                    double value);
/* An elementwise op with one or two operands of the same type. */
tpu_hlo_value_t tpu_emit_unary(tpu_hlo_builder_t* b, const char* op, tpu_hlo_value_t x);
tpu_hlo_value_t tpu_emit_binary(tpu_hlo_builder_t* b, const char* op, tpu_hlo_value_t x,
                                tpu_hlo_value_t y);
/* Elementwise arithmetic on same-typed operands. */
tpu_hlo_value_t tpu_emit_add(tpu_hlo_builder_t* b, tpu_hlo_value_t x, tpu_hlo_value_t y);
tpu_hlo_value_t tpu_emit_sub(tpu_hlo_builder_t* b, tpu_hlo_value_t x, tpu_hlo_value_t y);
tpu_hlo_value_t tpu_emit_mul(tpu_hlo_builder_t* b, tpu_hlo_value_t x, tpu_hlo_value_t y);
tpu_hlo_value_t tpu_emit_div(tpu_hlo_builder_t* b, tpu_hlo_value_t x, tpu_hlo_value_t y);
/* A constant of `like`'s type (dtype and shape) holding `value`. */
tpu_hlo_value_t tpu_emit_splat(tpu_hlo_builder_t* b, tpu_hlo_value_t like, double value);
/* stablehlo.compare with direction "EQ", "LT", ...; result is bool. */
tpu_hlo_value_t tpu_emit_compare(tpu_hlo_builder_t* b, const char* direction,
                                 tpu_hlo_value_t x, tpu_hlo_value_t y);
tpu_hlo_value_t tpu_emit_select(tpu_hlo_builder_t* b, tpu_hlo_value_t pred,
                                tpu_hlo_value_t on_true, tpu_hlo_value_t on_false);

/* value with its zeros +0.0 (floating dtypes; others as they are). A
 * select, not "+ 0.0": XLA folds x + 0 away. */
tpu_hlo_value_t tpu_emit_positive_zeros(tpu_hlo_builder_t* b, tpu_hlo_value_t value);
/* Reduces `value` over `dims` with the binary op `op` ("stablehlo.add",
 * "stablehlo.maximum", ...) starting from `init` (a scalar of the value's
 * dtype). Result drops the reduced dims. */
tpu_hlo_value_t tpu_emit_reduce(tpu_hlo_builder_t* b, tpu_hlo_value_t value,
                                tpu_hlo_value_t init, const int64_t* dims, int num_dims,
                                const char* op);
/* For XLA:CPU (the runtime turns it on with the CPU plugin, before any
 * lowering): tpu_emit_reduce merges adjacent reduced dims into one behind
 * an optimization barrier (emit.c says why). Off: XLA's own form, which
 * other backends fuse with the reduce's producers. */
void tpu_emit_set_merge_reduced_dims(bool on);
/* Reshape / transpose with explicit targets. */
tpu_hlo_value_t tpu_emit_reshape(tpu_hlo_builder_t* b, tpu_hlo_value_t value,
                                 const int64_t* dims, int rank);
tpu_hlo_value_t tpu_emit_transpose(tpu_hlo_builder_t* b, tpu_hlo_value_t value,
                                   const int64_t* permutation);
/* stablehlo.slice with start/limit/stride per dim. */
tpu_hlo_value_t tpu_emit_slice(tpu_hlo_builder_t* b, tpu_hlo_value_t value,
                               const int64_t* start, const int64_t* limit,
                               const int64_t* stride);
/* value[start:limit] along `dim`, whole along the others. */
tpu_hlo_value_t tpu_emit_slice_dim(tpu_hlo_builder_t* b, tpu_hlo_value_t value, int dim,
                                   int64_t start, int64_t limit);
/* iota along `dim` of `type`. */
tpu_hlo_value_t tpu_emit_iota(tpu_hlo_builder_t* b, const tpu_hlo_type_t* type, int dim);

/* stablehlo.scatter of `updates` into `operand` at `indices` (index
 * vector in the last dim of `indices`), combining with `op` (NULL: the
 * update replaces). Updates whose window falls outside `operand` are
 * dropped: lowerings use an out-of-range index to mean "skip". */
tpu_hlo_value_t tpu_emit_scatter(tpu_hlo_builder_t* b, tpu_hlo_value_t operand,
                                 tpu_hlo_value_t indices, tpu_hlo_value_t updates,
                                 const int64_t* window_dims, int num_window,
                                 const int64_t* inserted, const int64_t* to_operand,
                                 int num_inserted, const char* op);
/* stablehlo.gather from `operand` at `indices` (index vector in the last
 * dim); `out` gives the result shape (its dtype is the operand's). Out-of-
 * range starts are clamped. */
tpu_hlo_value_t tpu_emit_gather(tpu_hlo_builder_t* b, tpu_hlo_value_t operand,
                                tpu_hlo_value_t indices, tpu_hlo_type_t out,
                                const int64_t* offset_dims, int num_offset,
                                const int64_t* collapsed, const int64_t* start_map,
                                int num_collapsed, const int64_t* slice_sizes);
/* stablehlo.dynamic_slice of x at rank-0 int64 `starts` (one per dim),
 * `sizes` elements per dim; dynamic_update_slice writes `update` there. */
tpu_hlo_value_t tpu_emit_dynamic_slice(tpu_hlo_builder_t* b, tpu_hlo_value_t x,
                                       const tpu_hlo_value_t* starts, const int64_t* sizes);
tpu_hlo_value_t tpu_emit_dynamic_update_slice(tpu_hlo_builder_t* b, tpu_hlo_value_t x,
                                              tpu_hlo_value_t update, const tpu_hlo_value_t* starts);
/* for (i = lo; i != hi; i += step) body(b, i, state, arg): a stablehlo.while
 * carrying up to TPU_EMIT_MAX_LOOP_STATE values, which the body updates in
 * place (types unchanged); i is a rank-0 int64. On return `state` holds the
 * loop's results. No loop is emitted when lo == hi. */
#define TPU_EMIT_MAX_LOOP_STATE 8
typedef void (*tpu_emit_loop_body_fn)(tpu_hlo_builder_t* b, tpu_hlo_value_t i,
                                      tpu_hlo_value_t* state, const void* arg);
void tpu_emit_for_loop(tpu_hlo_builder_t* b, int64_t lo, int64_t hi, int64_t step,
                       tpu_hlo_value_t* state, int n, tpu_emit_loop_body_fn body, const void* arg);
/* stablehlo.triangular_solve: A X = rhs (left) or X A = rhs, A's `lower`
 * or upper triangle only (unit: its diagonal taken as 1), A^T when
 * `transpose`; batch dims leading and equal. */
tpu_hlo_value_t tpu_emit_triangular_solve(tpu_hlo_builder_t* b, tpu_hlo_value_t a, tpu_hlo_value_t rhs,
                                          bool left, bool lower, bool unit, bool transpose);
/* x / c, correctly rounded: XLA rewrites a division by a constant into a
 * multiplication by its reciprocal (-49 * (1 / 49) is not -1 in double),
 * so the constant passes an optimization_barrier and stays a value. */
tpu_hlo_value_t tpu_emit_div_by_const(tpu_hlo_builder_t* b, tpu_hlo_value_t x, double c);
/* v behind an optimization_barrier: XLA no longer sees a constant (for a
 * divisor that must stay a division). */
tpu_hlo_value_t tpu_emit_opaque(tpu_hlo_builder_t* b, tpu_hlo_value_t v);
/* Python's floor division x // y of same-typed float values, as PyTorch's
 * div_floor_floating (fmod-based, so the quotient is not rounded before
 * flooring: 1 // inf is 0, -1 // inf is -1, inf // 2 is NaN). */
tpu_hlo_value_t tpu_emit_floor_divide_float(tpu_hlo_builder_t* b, tpu_hlo_value_t x,
                                            tpu_hlo_value_t y);
/* Inclusive prefix sum of a 1-D value. */
tpu_hlo_value_t tpu_emit_prefix_sum(tpu_hlo_builder_t* b, tpu_hlo_value_t y);

/* stablehlo.pad of x with the rank-0 pad_value: lo / hi elements before /
 * after each dim, interior (NULL: none) between its elements. */
tpu_hlo_value_t tpu_emit_pad(tpu_hlo_builder_t* b, tpu_hlo_value_t x, tpu_hlo_value_t pad_value,
                             const int64_t* lo, const int64_t* hi, const int64_t* interior);
/* y shifted by s along dim (toward higher indices), filled with the
 * rank-0 `fill`. */
tpu_hlo_value_t tpu_emit_shift(tpu_hlo_builder_t* b, tpu_hlo_value_t y, int dim, int64_t s,
                               tpu_hlo_value_t fill);
/* Inclusive scan along `dim`: combine(b, op, y, y shifted) in log2(n)
 * steps, the shift filled with `identity`. tpu_emit_binary as `combine`
 * scans with the binary op `op`. */
typedef tpu_hlo_value_t (*tpu_emit_combine_fn)(tpu_hlo_builder_t* b, const char* op,
                                               tpu_hlo_value_t x, tpu_hlo_value_t y);
tpu_hlo_value_t tpu_emit_scan(tpu_hlo_builder_t* b, tpu_hlo_value_t y, int dim, double identity,
                              const char* op, tpu_emit_combine_fn combine);
/* Binary search as PyTorch's CPU searchsorted: for values [R, N] in the
 * rows of seq [R, M] (same dtype), the first index whose element is >= the
 * value (upper: >), as int64 [R, N]. sorter (int64 [R, M], or an invalid
 * value, id < 0, for none) reads seq through it. Same steps as CPU, so unsorted rows and NaN
 * give CPU's answer too. */
tpu_hlo_value_t tpu_emit_search_sorted(tpu_hlo_builder_t* b, tpu_hlo_value_t seq,
                                       tpu_hlo_value_t values, tpu_hlo_value_t sorter,
                                       bool upper);

typedef enum tpu_sort_order_e {
  TPU_SORT_ASCENDING,          /* NaN last (the largest, as in PyTorch) */
  TPU_SORT_DESCENDING,         /* NaN first */
  TPU_SORT_ASCENDING_NAN_FIRST /* median's "first NaN" */
} tpu_sort_order_t;
/* Stable sort of x along dim; out_indices: the original positions (int64). */
void tpu_emit_sort(tpu_hlo_builder_t* b, tpu_hlo_value_t x, int dim, tpu_sort_order_t order,
                   tpu_hlo_value_t* out_values, tpu_hlo_value_t* out_indices);

/* Writes "array<i64: 1, 2>" (or "array<i64>") for a list of ints. */
void tpu_emit_i64_array(char* out, size_t cap, const int64_t* values, int n);

#ifdef __cplusplus
}
#endif
#endif
