#include "emit.h"

#include <math.h>
#include <stdio.h>
#include <stdatomic.h>
#include <string.h>

#define ARR_CAP (24 * TPU_HLO_MAX_RANK + 16)

void tpu_emit_i64_array(char* out, size_t cap, const int64_t* values, int n) {
  int len = snprintf(out, cap, "array<i64");
  for (int i = 0; i < n && (size_t)len < cap; i++)
    len += snprintf(out + len, cap - (size_t)len, "%s %lld", i ? "," : ":",
                    (long long)values[i]);
  if ((size_t)len < cap) snprintf(out + len, cap - (size_t)len, ">");
}

tpu_hlo_value_t tpu_emit_broadcast_to(tpu_hlo_builder_t* b, tpu_hlo_value_t value,
                                      const tpu_hlo_type_t* type) {
  tpu_hlo_type_t from = tpu_hlo_value_type(b, value);
  tpu_hlo_type_t to = *type;
  to.dtype = from.dtype;
  if (from.rank == to.rank &&
      memcmp(from.dims, to.dims, sizeof(int64_t) * (size_t)from.rank) == 0)
    return value;
  int64_t map[TPU_HLO_MAX_RANK];
  for (int i = 0; i < from.rank; i++) map[i] = to.rank - from.rank + i;
  char arr[24 * TPU_HLO_MAX_RANK + 16], attrs[sizeof arr + 32];
  tpu_emit_i64_array(arr, sizeof arr, map, from.rank);
  snprintf(attrs, sizeof attrs, "broadcast_dimensions = %s", arr);
  return tpu_hlo_op(b, "stablehlo.broadcast_in_dim", &value, 1, to, attrs);
}

tpu_hlo_value_t tpu_emit_convert(tpu_hlo_builder_t* b, tpu_hlo_value_t value,
                                 tpu_dtype_t dtype) {
  tpu_hlo_type_t type = tpu_hlo_value_type(b, value);
  if (type.dtype == dtype) return value;
  if (dtype == TPU_DTYPE_BOOL) {
    tpu_hlo_value_t zero = tpu_emit_const_like(b, &type, 0.0);
    return tpu_emit_compare(b, "NE", value, zero);
  }
  if (type.dtype == TPU_DTYPE_BOOL && (tpu_dtype_is_floating(dtype) || tpu_dtype_is_complex(dtype))) {
    /* XLA's simplifier rewrites multiply(convert(pred), x) as a select of
     * x and 0, which drops IEEE semantics (False * NaN is NaN, False / 0
     * is NaN on CPU). Going through uint8 keeps it a real multiply. */
    type.dtype = TPU_DTYPE_UINT8;
    value = tpu_hlo_op(b, "stablehlo.convert", &value, 1, type, NULL);
  }
  type.dtype = dtype;
  return tpu_hlo_op(b, "stablehlo.convert", &value, 1, type, NULL);
}

tpu_hlo_value_t tpu_emit_cast_to(tpu_hlo_builder_t* b, tpu_hlo_value_t value,
                                 const tpu_hlo_type_t* type) {
  return tpu_emit_broadcast_to(b, tpu_emit_convert(b, value, type->dtype), type);
}

tpu_hlo_value_t tpu_emit_const_like(tpu_hlo_builder_t* b, const tpu_hlo_type_t* type,
                                    double value) {
  if (type->dtype == TPU_DTYPE_BOOL) return tpu_hlo_constant_bool(b, *type, value != 0);
  if (tpu_dtype_is_complex(type->dtype))
    return tpu_hlo_constant_complex(b, *type, value, 0.0);
  if (tpu_dtype_is_floating(type->dtype)) return tpu_hlo_constant_float(b, *type, value);
  /* uint64 values past int64's range (its maximum, say) stay exact. */
  if (tpu_dtype_is_unsigned(type->dtype) && value >= 0x1p63)
    return tpu_hlo_constant_uint(b, *type, (uint64_t)value);
  return tpu_hlo_constant_int(b, *type, (int64_t)value);
}

tpu_hlo_value_t tpu_emit_const(tpu_hlo_builder_t* b, tpu_dtype_t dtype, double value) {
  tpu_hlo_type_t t = tpu_hlo_type_scalar(dtype);
  return tpu_emit_const_like(b, &t, value);
}

tpu_hlo_value_t tpu_emit_unary(tpu_hlo_builder_t* b, const char* op, tpu_hlo_value_t x) {
  return tpu_hlo_op(b, op, &x, 1, tpu_hlo_value_type(b, x), NULL);
}

tpu_hlo_value_t tpu_emit_binary(tpu_hlo_builder_t* b, const char* op, tpu_hlo_value_t x,
                                tpu_hlo_value_t y) {
  tpu_hlo_value_t operands[2] = {x, y};
  return tpu_hlo_op(b, op, operands, 2, tpu_hlo_value_type(b, x), NULL);
}

tpu_hlo_value_t tpu_emit_add(tpu_hlo_builder_t* b, tpu_hlo_value_t x, tpu_hlo_value_t y) {
  return tpu_emit_binary(b, "stablehlo.add", x, y);
}
tpu_hlo_value_t tpu_emit_sub(tpu_hlo_builder_t* b, tpu_hlo_value_t x, tpu_hlo_value_t y) {
  return tpu_emit_binary(b, "stablehlo.subtract", x, y);
}
tpu_hlo_value_t tpu_emit_mul(tpu_hlo_builder_t* b, tpu_hlo_value_t x, tpu_hlo_value_t y) {
  return tpu_emit_binary(b, "stablehlo.multiply", x, y);
}
tpu_hlo_value_t tpu_emit_div(tpu_hlo_builder_t* b, tpu_hlo_value_t x, tpu_hlo_value_t y) {
  return tpu_emit_binary(b, "stablehlo.divide", x, y);
}
tpu_hlo_value_t tpu_emit_splat(tpu_hlo_builder_t* b, tpu_hlo_value_t like, double value) {
  tpu_hlo_type_t t = tpu_hlo_value_type(b, like);
  return tpu_emit_const_like(b, &t, value);
}

tpu_hlo_value_t tpu_emit_compare(tpu_hlo_builder_t* b, const char* direction,
                                 tpu_hlo_value_t x, tpu_hlo_value_t y) {
  tpu_hlo_type_t t = tpu_hlo_value_type(b, x);
  /* The comparison type spelled out: XLA's constant folder compared two
   * folded si64 constants unsigned without it ((x * 0 - 1) <= 0 gave
   * false in a compiled graph, while the run-time code compared signed). */
  const char* kind = tpu_dtype_is_floating(t.dtype) || tpu_dtype_is_complex(t.dtype) ? "FLOAT"
                     : tpu_dtype_is_unsigned(t.dtype) || t.dtype == TPU_DTYPE_BOOL ? "UNSIGNED"
                                                                                    : "SIGNED";
  t.dtype = TPU_DTYPE_BOOL;
  char attrs[160];
  snprintf(attrs, sizeof attrs,
           "comparison_direction = #stablehlo<comparison_direction %s>, "
           "compare_type = #stablehlo<comparison_type %s>",
           direction, kind);
  tpu_hlo_value_t operands[2] = {x, y};
  return tpu_hlo_op(b, "stablehlo.compare", operands, 2, t, attrs);
}

tpu_hlo_value_t tpu_emit_select(tpu_hlo_builder_t* b, tpu_hlo_value_t pred,
                                tpu_hlo_value_t on_true, tpu_hlo_value_t on_false) {
  tpu_hlo_value_t operands[3] = {pred, on_true, on_false};
  return tpu_hlo_op(b, "stablehlo.select", operands, 3, tpu_hlo_value_type(b, on_true),
                    NULL);
}

static tpu_hlo_value_t reduce_once(tpu_hlo_builder_t* b, tpu_hlo_value_t value,
                                   tpu_hlo_value_t init, const int64_t* dims, int num_dims,
                                   const char* op);

/* Lanes of the first stage of a minor-dim reduction (see below): 32 (four
 * AVX vectors, independent accumulators) for rows of a multiple of 32,
 * else 8 (one vector). 0: not split. Measured on 128x512 f32 (us per op,
 * strict / deferred chain): layer_norm 51 / 35 with 32 lanes, 67 / 54 with
 * 8 (XLA then splits the 64-row stage into a reduce-window and a reduce,
 * one more kernel), 49 / 95 with 16 (XLA's fusions of the next op's
 * producers into 16-lane stages ran 2.7x slower). */
static int64_t reduce_lanes(int64_t n) {
  if (n % 32 == 0 && n >= 64) return 32;
  return n % 8 == 0 && n >= 16 ? 8 : 0;
}

/* Floating max/min: exact in any order, so regrouping cannot change the
 * result. Floating sums: the grouping moves the last bits, as XLA's own
 * rewrite into windows of 32 already does; lanes of at most 32 strided
 * elements then at most 32 lanes are the same two-level tree (sums of
 * rows longer than 1024 are left to XLA). */
static bool regroupable(const char* op, tpu_dtype_t dtype) {
  return tpu_dtype_is_floating(dtype) &&
         (strcmp(op, "stablehlo.maximum") == 0 || strcmp(op, "stablehlo.minimum") == 0 ||
          strcmp(op, "stablehlo.add") == 0);
}

static _Atomic bool g_merge_reduced_dims;

void tpu_emit_set_merge_reduced_dims(bool on) { atomic_store(&g_merge_reduced_dims, on); }

static tpu_hlo_value_t reduce_in_lanes(tpu_hlo_builder_t* b, tpu_hlo_value_t value,
                                       tpu_hlo_value_t init, const int64_t* dims, int num_dims,
                                       const char* op);

/* A reduce over several adjacent dims, on XLA:CPU (see emit.h): the dims
 * merged into one by a row-major reshape, behind an optimization barrier,
 * since XLA folds reduce(reshape(x)) back into the reduce over x's dims
 * and turns that into a reduce-window with a 2-D window, four to five
 * times slower than the same elements reduced over one dim (the column
 * sums of a layer_norm backward, [16,64,64] -> [64]: 88 us against 17;
 * a linear's bias gradient [16,64,256] -> [256]: 245 against 99). The
 * barrier keeps an elementwise producer out of the reduce's kernel: its
 * result is written once, which those figures include. The same for one
 * reduced dim longer than 32 that is not the minor one: XLA folds in the
 * reshape that made it out of several (another op's view, a fused run)
 * alike. Returns false (nothing emitted) when neither applies; else *out
 * is the reduce, in the kept dims' shape. */
static bool reduce_merged(tpu_hlo_builder_t* b, tpu_hlo_value_t value, tpu_hlo_value_t init,
                          const int64_t* dims, int num_dims, const char* op,
                          tpu_hlo_value_t* out) {
  tpu_hlo_type_t in = tpu_hlo_value_type(b, value);
  if (!atomic_load(&g_merge_reduced_dims) || in.rank < 2 || in.rank > TPU_HLO_MAX_RANK)
    return false;
  bool reduced[TPU_HLO_MAX_RANK] = {false}, merge = false;
  for (int k = 0; k < num_dims; k++)
    if (dims[k] >= 0 && dims[k] < in.rank) reduced[dims[k]] = true;
  for (int d = 0; d < in.rank; d++) {
    if (in.dims[d] < 0) return false; /* not a static shape */
    merge |= d > 0 && reduced[d] && reduced[d - 1];
    /* A long column: XLA may fold the reshape that made it out of several
     * dims (another op's view) back in the same way. */
    merge |= reduced[d] && d < in.rank - 1 && in.dims[d] > 32;
  }
  /* The barrier writes the operand out: not for a huge one (a broadcast
   * XLA would have folded into the reduce, say). */
  const int64_t kMaxNumel = (int64_t)1 << 26;
  int64_t numel = 1;
  for (int d = 0; d < in.rank && numel <= kMaxNumel; d++) numel *= in.dims[d];
  if (!merge || numel > kMaxNumel) return false;
  int64_t shape[TPU_HLO_MAX_RANK], rdims[TPU_HLO_MAX_RANK], kept[TPU_HLO_MAX_RANK];
  int rank = 0, nr = 0, nk = 0;
  for (int d = 0; d < in.rank; d++) {
    if (!reduced[d]) kept[nk++] = in.dims[d];
    if (d > 0 && reduced[d] == reduced[d - 1]) {
      shape[rank - 1] *= in.dims[d];
      continue;
    }
    if (reduced[d]) rdims[nr++] = rank;
    shape[rank++] = in.dims[d];
  }
  tpu_hlo_value_t v = tpu_emit_reshape(b, value, shape, rank);
  v = tpu_hlo_op(b, "stablehlo.optimization_barrier", &v, 1, tpu_hlo_value_type(b, v), NULL);
  *out = tpu_emit_reshape(b, reduce_in_lanes(b, v, init, rdims, nr, op), kept, nk);
  return true;
}

tpu_hlo_value_t tpu_emit_reduce(tpu_hlo_builder_t* b, tpu_hlo_value_t value,
                                tpu_hlo_value_t init, const int64_t* dims, int num_dims,
                                const char* op) {
  tpu_hlo_value_t merged;
  if (reduce_merged(b, value, init, dims, num_dims, op, &merged)) return merged;
  return reduce_in_lanes(b, value, init, dims, num_dims, op);
}

static tpu_hlo_value_t reduce_in_lanes(tpu_hlo_builder_t* b, tpu_hlo_value_t value,
                                       tpu_hlo_value_t init, const int64_t* dims, int num_dims,
                                       const char* op) {
  tpu_hlo_type_t in = tpu_hlo_value_type(b, value);
  int last = in.rank - 1;
  bool minor = false;
  for (int k = 0; k < num_dims; k++) minor |= dims[k] == last;
  /* XLA:CPU reduces a row element by element, one dependent add or max
   * after another (the max of each 128-row of [8, 4, 128, 128]: 0.34 ms;
   * a sum's windows of 32 alike); split into [.., n/L, L], reduced over
   * n/L first, the rows are combined L lanes at a time in vector registers
   * (0.16 ms) and the L lanes reduced after (a 128x512 row sum: 31 us
   * against 22). Only where the grouping may change (regroupable). Between
   * the stages a NaN lane is made NaN explicitly: XLA merges a reduce of a
   * reduce back into one, and this select (which keeps PyTorch's NaN
   * propagation, and is the identity for sums) it cannot see through. */
  int64_t lanes = in.rank > 0 ? reduce_lanes(in.dims[last]) : 0;
  /* A sum only over the minor dim and of a row of <= 1024: the two-level
   * tree regroupable() describes (other sums stay XLA's). */
  bool sum = strcmp(op, "stablehlo.add") == 0;
  if (sum && (num_dims != 1 || (lanes && in.dims[last] / lanes > 32))) lanes = 0;
  if (minor && regroupable(op, in.dtype) && in.rank < TPU_HLO_MAX_RANK && lanes) {
    int64_t split[TPU_HLO_MAX_RANK];
    memcpy(split, in.dims, sizeof(int64_t) * (size_t)in.rank);
    split[last] = in.dims[last] / lanes;
    split[in.rank] = lanes;
    tpu_hlo_value_t v = tpu_emit_reshape(b, value, split, in.rank + 1);
    /* stage 1: the requested dims (the minor one now its n/L part) */
    tpu_hlo_value_t lanes = reduce_once(b, v, init, dims, num_dims, op);
    tpu_hlo_type_t lt = tpu_hlo_value_type(b, lanes);
    lanes = tpu_emit_select(b, tpu_emit_compare(b, "NE", lanes, lanes),
                            tpu_emit_const_like(b, &lt, NAN), lanes);
    int64_t lane_dim = tpu_hlo_value_type(b, lanes).rank - 1;
    return reduce_once(b, lanes, init, &lane_dim, 1, op);
  }
  return reduce_once(b, value, init, dims, num_dims, op);
}

static tpu_hlo_value_t reduce_once(tpu_hlo_builder_t* b, tpu_hlo_value_t value,
                                   tpu_hlo_value_t init, const int64_t* dims, int num_dims,
                                   const char* op) {
  tpu_hlo_type_t in = tpu_hlo_value_type(b, value);
  tpu_hlo_type_t out = {.dtype = in.dtype, .rank = 0};
  for (int d = 0; d < in.rank; d++) {
    bool reduced = false;
    for (int k = 0; k < num_dims; k++) reduced |= dims[k] == d;
    if (!reduced) out.dims[out.rank++] = in.dims[d];
  }
  char arr[24 * TPU_HLO_MAX_RANK + 16], attrs[sizeof arr + 32];
  tpu_emit_i64_array(arr, sizeof arr, dims, num_dims);
  snprintf(attrs, sizeof attrs, "dimensions = %s", arr);
  tpu_hlo_value_t operands[2] = {value, init};
  tpu_hlo_region_op_begin(b, "stablehlo.reduce", operands, 2, &out, 1, attrs);
  tpu_hlo_type_t scalar = tpu_hlo_type_scalar(in.dtype);
  tpu_hlo_type_t block_types[2] = {scalar, scalar};
  tpu_hlo_value_t block_args[2];
  tpu_hlo_block_begin(b, block_types, 2, block_args);
  tpu_hlo_value_t r = tpu_hlo_op(b, op, block_args, 2, scalar, NULL);
  tpu_hlo_block_return(b, &r, 1);
  tpu_hlo_value_t result;
  tpu_hlo_region_op_end(b, &result);
  return result;
}

tpu_hlo_value_t tpu_emit_reshape(tpu_hlo_builder_t* b, tpu_hlo_value_t value,
                                 const int64_t* dims, int rank) {
  tpu_hlo_type_t in = tpu_hlo_value_type(b, value);
  if (in.rank == rank && memcmp(in.dims, dims, sizeof(int64_t) * (size_t)rank) == 0)
    return value;
  return tpu_hlo_op(b, "stablehlo.reshape", &value, 1,
                    tpu_hlo_type_make(in.dtype, rank, dims), NULL);
}

tpu_hlo_value_t tpu_emit_transpose(tpu_hlo_builder_t* b, tpu_hlo_value_t value,
                                   const int64_t* permutation) {
  tpu_hlo_type_t in = tpu_hlo_value_type(b, value);
  bool identity = true;
  tpu_hlo_type_t out = in;
  for (int d = 0; d < in.rank; d++) {
    out.dims[d] = in.dims[permutation[d]];
    identity &= permutation[d] == d;
  }
  if (identity) return value;
  char arr[24 * TPU_HLO_MAX_RANK + 16], attrs[sizeof arr + 32];
  tpu_emit_i64_array(arr, sizeof arr, permutation, in.rank);
  snprintf(attrs, sizeof attrs, "permutation = %s", arr);
  return tpu_hlo_op(b, "stablehlo.transpose", &value, 1, out, attrs);
}

tpu_hlo_value_t tpu_emit_slice(tpu_hlo_builder_t* b, tpu_hlo_value_t value,
                               const int64_t* start, const int64_t* limit,
                               const int64_t* stride) {
  tpu_hlo_type_t in = tpu_hlo_value_type(b, value);
  tpu_hlo_type_t out = in;
  bool identity = true;
  for (int d = 0; d < in.rank; d++) {
    out.dims[d] = limit[d] <= start[d] ? 0 : (limit[d] - start[d] + stride[d] - 1) / stride[d];
    identity &= start[d] == 0 && limit[d] == in.dims[d] && stride[d] == 1;
  }
  if (identity) return value;
  char s0[24 * TPU_HLO_MAX_RANK + 16], s1[sizeof s0], s2[sizeof s0];
  char attrs[3 * sizeof s0 + 96];
  tpu_emit_i64_array(s0, sizeof s0, start, in.rank);
  tpu_emit_i64_array(s1, sizeof s1, limit, in.rank);
  tpu_emit_i64_array(s2, sizeof s2, stride, in.rank);
  snprintf(attrs, sizeof attrs, "start_indices = %s, limit_indices = %s, strides = %s",
           s0, s1, s2);
  return tpu_hlo_op(b, "stablehlo.slice", &value, 1, out, attrs);
}

tpu_hlo_value_t tpu_emit_slice_dim(tpu_hlo_builder_t* b, tpu_hlo_value_t value, int dim,
                                   int64_t start, int64_t limit) {
  tpu_hlo_type_t t = tpu_hlo_value_type(b, value);
  int64_t lo[TPU_HLO_MAX_RANK] = {0}, hi[TPU_HLO_MAX_RANK], st[TPU_HLO_MAX_RANK];
  for (int d = 0; d < t.rank; d++) hi[d] = t.dims[d], st[d] = 1;
  lo[dim] = start;
  hi[dim] = limit;
  return tpu_emit_slice(b, value, lo, hi, st);
}

tpu_hlo_value_t tpu_emit_iota(tpu_hlo_builder_t* b, const tpu_hlo_type_t* type, int dim) {
  char attrs[48];
  snprintf(attrs, sizeof attrs, "iota_dimension = %d : i64", dim);
  return tpu_hlo_op(b, "stablehlo.iota", NULL, 0, *type, attrs);
}

/* ---- gather / scatter, scans, sorting ---- */

/* Writes "[a, b]" for a dimension-numbers list. */
static void dims_list(char* out, size_t cap, const int64_t* v, int n) {
  int len = snprintf(out, cap, "[");
  for (int i = 0; i < n && (size_t)len < cap; i++)
    len += snprintf(out + len, cap - (size_t)len, "%s%lld", i ? ", " : "", (long long)v[i]);
  if ((size_t)len < cap) snprintf(out + len, cap - (size_t)len, "]");
}

tpu_hlo_value_t tpu_emit_scatter(tpu_hlo_builder_t* b, tpu_hlo_value_t operand,
                                 tpu_hlo_value_t indices, tpu_hlo_value_t updates,
                                 const int64_t* window_dims, int num_window,
                                 const int64_t* inserted, const int64_t* to_operand,
                                 int num_inserted, const char* op) {
  tpu_hlo_type_t ot = tpu_hlo_value_type(b, operand);
  tpu_hlo_type_t it = tpu_hlo_value_type(b, indices);
  char w[ARR_CAP], ins[ARR_CAP], map[ARR_CAP], attrs[4 * ARR_CAP];
  dims_list(w, sizeof w, window_dims, num_window);
  dims_list(ins, sizeof ins, inserted, num_inserted);
  dims_list(map, sizeof map, to_operand, num_inserted);
  snprintf(attrs, sizeof attrs,
           "scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = %s, "
           "inserted_window_dims = %s, scatter_dims_to_operand_dims = %s, "
           "index_vector_dim = %d>, indices_are_sorted = false, unique_indices = false",
           w, ins, map, it.rank - 1);
  tpu_hlo_value_t operands[3] = {operand, indices, updates};
  tpu_hlo_region_op_begin(b, "stablehlo.scatter", operands, 3, &ot, 1, attrs);
  tpu_hlo_type_t s = tpu_hlo_type_scalar(ot.dtype);
  tpu_hlo_type_t bt[2] = {s, s};
  tpu_hlo_value_t ba[2];
  tpu_hlo_block_begin(b, bt, 2, ba);
  tpu_hlo_value_t r = op ? tpu_hlo_op(b, op, ba, 2, s, NULL) : ba[1];
  if (op && tpu_dtype_is_floating(ot.dtype) &&
      (strcmp(op, "stablehlo.maximum") == 0 || strcmp(op, "stablehlo.minimum") == 0)) {
    /* XLA:CPU's maximum/minimum can drop a NaN; PyTorch propagates it. */
    r = tpu_emit_select(b, tpu_emit_compare(b, "NE", ba[1], ba[1]), ba[1], r);
    r = tpu_emit_select(b, tpu_emit_compare(b, "NE", ba[0], ba[0]), ba[0], r);
  }
  tpu_hlo_block_return(b, &r, 1);
  tpu_hlo_value_t result;
  tpu_hlo_region_op_end(b, &result);
  return result;
}

tpu_hlo_value_t tpu_emit_gather(tpu_hlo_builder_t* b, tpu_hlo_value_t operand,
                                tpu_hlo_value_t indices, tpu_hlo_type_t out,
                                const int64_t* offset_dims, int num_offset,
                                const int64_t* collapsed, const int64_t* start_map,
                                int num_collapsed, const int64_t* slice_sizes) {
  tpu_hlo_type_t ot = tpu_hlo_value_type(b, operand);
  tpu_hlo_type_t it = tpu_hlo_value_type(b, indices);
  char off[ARR_CAP], col[ARR_CAP], map[ARR_CAP], sizes[ARR_CAP], attrs[5 * ARR_CAP];
  dims_list(off, sizeof off, offset_dims, num_offset);
  dims_list(col, sizeof col, collapsed, num_collapsed);
  dims_list(map, sizeof map, start_map, num_collapsed);
  tpu_emit_i64_array(sizes, sizeof sizes, slice_sizes, ot.rank);
  snprintf(attrs, sizeof attrs,
           "dimension_numbers = #stablehlo.gather<offset_dims = %s, collapsed_slice_dims = %s, "
           "start_index_map = %s, index_vector_dim = %d>, slice_sizes = %s, "
           "indices_are_sorted = false",
           off, col, map, it.rank - 1, sizes);
  out.dtype = ot.dtype;
  tpu_hlo_value_t operands[2] = {operand, indices};
  return tpu_hlo_op(b, "stablehlo.gather", operands, 2, out, attrs);
}

tpu_hlo_value_t tpu_emit_pad(tpu_hlo_builder_t* b, tpu_hlo_value_t x, tpu_hlo_value_t pad_value,
                             const int64_t* lo, const int64_t* hi, const int64_t* interior) {
  tpu_hlo_type_t t = tpu_hlo_value_type(b, x);
  int64_t zeros[TPU_HLO_MAX_RANK] = {0};
  if (!interior) interior = zeros;
  for (int d = 0; d < t.rank; d++)
    t.dims[d] += lo[d] + hi[d] + (t.dims[d] > 0 ? (t.dims[d] - 1) * interior[d] : 0);
  char a0[256], a1[256], a2[256], attrs[900];
  tpu_emit_i64_array(a0, sizeof a0, hi, t.rank);
  tpu_emit_i64_array(a1, sizeof a1, lo, t.rank);
  tpu_emit_i64_array(a2, sizeof a2, interior, t.rank);
  snprintf(attrs, sizeof attrs,
           "edge_padding_high = %s, edge_padding_low = %s, interior_padding = %s", a0, a1, a2);
  tpu_hlo_value_t ops[2] = {x, pad_value};
  return tpu_hlo_op(b, "stablehlo.pad", ops, 2, t, attrs);
}

tpu_hlo_value_t tpu_emit_shift(tpu_hlo_builder_t* b, tpu_hlo_value_t y, int dim, int64_t s,
                               tpu_hlo_value_t fill) {
  tpu_hlo_type_t t = tpu_hlo_value_type(b, y);
  int64_t start[TPU_HLO_MAX_RANK] = {0}, limit[TPU_HLO_MAX_RANK], stride[TPU_HLO_MAX_RANK];
  int64_t low[TPU_HLO_MAX_RANK] = {0}, high[TPU_HLO_MAX_RANK] = {0};
  for (int d = 0; d < t.rank; d++) limit[d] = t.dims[d], stride[d] = 1;
  limit[dim] = t.dims[dim] - s;
  low[dim] = s;
  return tpu_emit_pad(b, tpu_emit_slice(b, y, start, limit, stride), fill, low, high, NULL);
}

/* Hillis-Steele: log2(n) steps of "y op= y shifted by s", the shift
 * padding with the identity; O(n log n) work where a reduce_window would
 * be O(n^2). */
tpu_hlo_value_t tpu_emit_scan(tpu_hlo_builder_t* b, tpu_hlo_value_t y, int dim, double identity,
                              const char* op, tpu_emit_combine_fn combine) {
  tpu_hlo_type_t t = tpu_hlo_value_type(b, y);
  for (int64_t s = 1; s < t.dims[dim]; s *= 2)
    y = combine(b, op, y, tpu_emit_shift(b, y, dim, s, tpu_emit_const(b, t.dtype, identity)));
  return y;
}

/* CPU's loop (Bucketization.cpp cus_lower_bound / cus_upper_bound), every
 * (row, value) pair at once: start = 0, end = M; while start < end:
 * mid = start + (end - start) / 2, go right when !(seq[mid] >= v) (lower)
 * or !(seq[mid] > v) (upper). Unrolled to bit_length(M) steps, the most
 * the loop takes; a finished pair stops moving. The same steps as CPU give
 * the same index for unsorted rows and NaN too. seq[mid] is a gather from
 * the flattened rows at row * M + mid (through the sorter when given). */
tpu_hlo_value_t tpu_emit_search_sorted(tpu_hlo_builder_t* b, tpu_hlo_value_t seq,
                                       tpu_hlo_value_t values, tpu_hlo_value_t sorter,
                                       bool upper) {
  tpu_hlo_type_t st = tpu_hlo_value_type(b, seq), vt = tpu_hlo_value_type(b, values);
  int64_t rows = st.dims[0], m = st.dims[1];
  tpu_hlo_type_t it = vt;
  it.dtype = TPU_DTYPE_INT64;
  tpu_hlo_value_t start = tpu_emit_const_like(b, &it, 0);
  if (m == 0 || vt.dims[1] == 0) return start;
  tpu_hlo_value_t end = tpu_emit_const_like(b, &it, (double)m);
  const int64_t flat_n = rows * m;
  tpu_hlo_value_t flat = tpu_emit_reshape(b, seq, &flat_n, 1);
  tpu_hlo_value_t flat_sorter = sorter.id >= 0 ? tpu_emit_reshape(b, sorter, &flat_n, 1) : sorter;
  tpu_hlo_value_t base = tpu_emit_mul(b, tpu_emit_iota(b, &it, 0), tpu_emit_const_like(b, &it, (double)m));
  const int64_t idx_dims[3] = {vt.dims[0], vt.dims[1], 1};
  const int64_t zero = 0, one = 1;
  for (int64_t left = m; left > 0; left >>= 1) {
    tpu_hlo_value_t active = tpu_emit_compare(b, "LT", start, end);
    tpu_hlo_value_t mid = tpu_emit_add(
        b, start,
        tpu_emit_binary(b, "stablehlo.shift_right_logical", tpu_emit_sub(b, end, start),
                        tpu_emit_const_like(b, &it, 1)));
    /* A finished pair may have mid == M: clamp (its step is ignored). */
    tpu_hlo_value_t safe = tpu_emit_binary(b, "stablehlo.minimum", mid, tpu_emit_const_like(b, &it, (double)(m - 1)));
    tpu_hlo_value_t pos = tpu_emit_reshape(b, tpu_emit_add(b, base, safe), idx_dims, 3);
    if (flat_sorter.id >= 0) {
      tpu_hlo_value_t s = tpu_emit_gather(b, flat_sorter, pos, it, NULL, 0, &zero, &zero, 1, &one);
      pos = tpu_emit_reshape(b, tpu_emit_add(b, base, s), idx_dims, 3);
    }
    tpu_hlo_value_t at = tpu_emit_gather(b, flat, pos, vt, NULL, 0, &zero, &zero, 1, &one);
    tpu_hlo_value_t stop = tpu_emit_compare(b, upper ? "GT" : "GE", at, values);
    tpu_hlo_value_t right = tpu_emit_binary(b, "stablehlo.and", active, tpu_emit_unary(b, "stablehlo.not", stop));
    tpu_hlo_value_t left_move = tpu_emit_binary(b, "stablehlo.and", active, stop);
    start = tpu_emit_select(b, right, tpu_emit_add(b, mid, tpu_emit_const_like(b, &it, 1)), start);
    end = tpu_emit_select(b, left_move, mid, end);
  }
  return start;
}

tpu_hlo_value_t tpu_emit_opaque(tpu_hlo_builder_t* b, tpu_hlo_value_t v) {
  return tpu_hlo_op(b, "stablehlo.optimization_barrier", &v, 1, tpu_hlo_value_type(b, v), NULL);
}

tpu_hlo_value_t tpu_emit_div_by_const(tpu_hlo_builder_t* b, tpu_hlo_value_t x, double c) {
  tpu_hlo_type_t t = tpu_hlo_value_type(b, x);
  tpu_hlo_value_t k = tpu_emit_opaque(b, tpu_emit_const(b, t.dtype, c));
  return tpu_emit_div(b, x, tpu_emit_broadcast_to(b, k, &t));
}

/* 1-D slice [start:limit:stride]. */
static tpu_hlo_value_t slice_1d(tpu_hlo_builder_t* b, tpu_hlo_value_t x, int64_t start,
                                int64_t limit, int64_t stride) {
  return tpu_emit_slice(b, x, &start, &limit, &stride);
}

/* x spread to every other element of n, starting at `first` (0 or 1),
 * zeros between. */
static tpu_hlo_value_t spread_1d(tpu_hlo_builder_t* b, tpu_hlo_value_t x, int first, int64_t n) {
  tpu_hlo_type_t t = tpu_hlo_value_type(b, x);
  int64_t m = t.dims[0], low = first, high = n - first - (2 * m - 1), interior = 1;
  return tpu_emit_pad(b, x, tpu_emit_const(b, t.dtype, 0), &low, &high, &interior);
}

/* The odd/even recursion (the work-efficient scan JAX's associative_scan
 * uses): pair sums are scanned recursively, giving the odd positions; the
 * even ones add one element more. O(n) work in log2(n) levels; the
 * Hillis-Steele log-step scan is O(n log n) and ten times slower on
 * XLA:CPU. */
tpu_hlo_value_t tpu_emit_prefix_sum(tpu_hlo_builder_t* b, tpu_hlo_value_t y) {
  int64_t n = tpu_hlo_value_type(b, y).dims[0];
  if (n < 2) return y;
  tpu_hlo_value_t odd = tpu_emit_prefix_sum(
      b, tpu_emit_add(b, slice_1d(b, y, 0, n - 1, 2), slice_1d(b, y, 1, n, 2)));
  tpu_hlo_value_t even;
  if (n > 2) {
    /* even[k] = odd[k - 1] + y[2k] for k >= 1. */
    tpu_hlo_value_t rest = tpu_emit_add(b, slice_1d(b, odd, 0, (n - 1) / 2, 1),
                                        slice_1d(b, y, 2, n, 2));
    tpu_hlo_type_t et = tpu_hlo_value_type(b, rest);
    et.dims[0] += 1;
    tpu_hlo_value_t parts[2] = {slice_1d(b, y, 0, 1, 1), rest};
    even = tpu_hlo_op(b, "stablehlo.concatenate", parts, 2, et, "dimension = 0 : i64");
  } else {
    even = slice_1d(b, y, 0, 1, 1);
  }
  return tpu_emit_add(b, spread_1d(b, even, 0, n), spread_1d(b, odd, 1, n));
}

void tpu_emit_sort(tpu_hlo_builder_t* b, tpu_hlo_value_t x, int dim, tpu_sort_order_t order,
                   tpu_hlo_value_t* out_values, tpu_hlo_value_t* out_indices) {
  tpu_hlo_type_t t = tpu_hlo_value_type(b, x);
  tpu_dtype_t dtype = t.dtype;
  /* i1 has no ordering we rely on: sort bools as ui8. */
  if (dtype == TPU_DTYPE_BOOL) x = tpu_emit_convert(b, x, TPU_DTYPE_UINT8);
  tpu_hlo_type_t kt = tpu_hlo_value_type(b, x), it = t;
  it.dtype = TPU_DTYPE_INT64;
  tpu_hlo_value_t operands[2] = {x, tpu_emit_iota(b, &it, dim)};
  tpu_hlo_type_t types[2] = {kt, it};
  char attrs[64];
  snprintf(attrs, sizeof attrs, "dimension = %d : i64, is_stable = true", dim);
  tpu_hlo_region_op_begin(b, "stablehlo.sort", operands, 2, types, 2, attrs);
  tpu_hlo_type_t ks = tpu_hlo_type_scalar(kt.dtype), is = tpu_hlo_type_scalar(TPU_DTYPE_INT64);
  tpu_hlo_type_t bt[4] = {ks, ks, is, is};
  tpu_hlo_value_t a[4];
  tpu_hlo_block_begin(b, bt, 4, a);
  tpu_hlo_value_t before =
      tpu_emit_compare(b, order == TPU_SORT_DESCENDING ? "GT" : "LT", a[0], a[1]);
  if (tpu_dtype_is_floating(kt.dtype)) {
    tpu_hlo_value_t a_nan = tpu_emit_compare(b, "NE", a[0], a[0]);
    tpu_hlo_value_t b_nan = tpu_emit_compare(b, "NE", a[1], a[1]);
    tpu_hlo_value_t not_nan_first = order == TPU_SORT_ASCENDING ? b_nan : a_nan;
    tpu_hlo_value_t other = order == TPU_SORT_ASCENDING ? a_nan : b_nan;
    tpu_hlo_value_t nan_rule = tpu_emit_binary(
        b, "stablehlo.and", not_nan_first, tpu_emit_unary(b, "stablehlo.not", other));
    before = tpu_emit_binary(b, "stablehlo.or", before, nan_rule);
  }
  tpu_hlo_block_return(b, &before, 1);
  tpu_hlo_value_t r[2];
  tpu_hlo_region_op_end(b, r);
  *out_values = tpu_emit_convert(b, r[0], dtype);
  *out_indices = r[1];
}


tpu_hlo_value_t tpu_emit_floor_divide_float(tpu_hlo_builder_t* b, tpu_hlo_value_t x,
                                            tpu_hlo_value_t y) {
  tpu_hlo_value_t zero = tpu_emit_splat(b, x, 0), one = tpu_emit_splat(b, x, 1);
  tpu_hlo_value_t mod = tpu_emit_binary(b, "stablehlo.remainder", x, y);
  tpu_hlo_value_t fix = tpu_emit_binary(
      b, "stablehlo.and", tpu_emit_compare(b, "NE", mod, zero),
      tpu_emit_compare(b, "NE", tpu_emit_compare(b, "LT", mod, zero),
                       tpu_emit_compare(b, "LT", y, zero)));
  tpu_hlo_value_t div = tpu_emit_div(b, tpu_emit_sub(b, x, mod), y);
  div = tpu_emit_select(b, fix, tpu_emit_sub(b, div, one), div);
  tpu_hlo_value_t fl = tpu_emit_unary(b, "stablehlo.floor", div);
  fl = tpu_emit_select(b, tpu_emit_compare(b, "GT", tpu_emit_sub(b, div, fl), tpu_emit_splat(b, x, 0.5)),
                       tpu_emit_add(b, fl, one), fl);
  /* A zero quotient takes the sign of x / y (its sign bit, so -0.0 and
   * signed NaN count); division by zero is x / y. */
  tpu_hlo_value_t q = tpu_emit_div(b, x, y);
  tpu_hlo_type_t t = tpu_hlo_value_type(b, q);
  size_t size = tpu_dtype_size(t.dtype);
  t.dtype = size == 8 ? TPU_DTYPE_INT64 : size == 4 ? TPU_DTYPE_INT32 : TPU_DTYPE_INT16;
  tpu_hlo_value_t bits = tpu_hlo_op(b, "stablehlo.bitcast_convert", &q, 1, t, NULL);
  tpu_hlo_value_t negative = tpu_emit_compare(b, "LT", bits, tpu_emit_splat(b, bits, 0));
  tpu_hlo_value_t signed_zero = tpu_emit_select(b, negative, tpu_emit_splat(b, x, -0.0), zero);
  fl = tpu_emit_select(b, tpu_emit_compare(b, "EQ", div, zero), signed_zero, fl);
  return tpu_emit_select(b, tpu_emit_compare(b, "EQ", y, zero), q, fl);
}

tpu_hlo_value_t tpu_emit_positive_zeros(tpu_hlo_builder_t* b, tpu_hlo_value_t value) {
  tpu_hlo_type_t t = tpu_hlo_value_type(b, value);
  if (!tpu_dtype_is_floating(t.dtype)) return value;
  tpu_hlo_value_t zero = tpu_emit_const_like(b, &t, 0);
  return tpu_emit_select(b, tpu_emit_compare(b, "EQ", value, zero), zero, value);
}

tpu_hlo_value_t tpu_emit_dynamic_slice(tpu_hlo_builder_t* b, tpu_hlo_value_t x,
                                       const tpu_hlo_value_t* starts, const int64_t* sizes) {
  tpu_hlo_type_t t = tpu_hlo_value_type(b, x);
  tpu_hlo_value_t ops[1 + TPU_HLO_MAX_RANK];
  ops[0] = x;
  for (int d = 0; d < t.rank; d++) ops[1 + d] = starts[d], t.dims[d] = sizes[d];
  char arr[256], attrs[300];
  tpu_emit_i64_array(arr, sizeof arr, sizes, t.rank);
  snprintf(attrs, sizeof attrs, "slice_sizes = %s", arr);
  return tpu_hlo_op(b, "stablehlo.dynamic_slice", ops, 1 + t.rank, t, attrs);
}

tpu_hlo_value_t tpu_emit_dynamic_update_slice(tpu_hlo_builder_t* b, tpu_hlo_value_t x,
                                              tpu_hlo_value_t update, const tpu_hlo_value_t* starts) {
  tpu_hlo_type_t t = tpu_hlo_value_type(b, x);
  tpu_hlo_value_t ops[2 + TPU_HLO_MAX_RANK];
  ops[0] = x, ops[1] = update;
  for (int d = 0; d < t.rank; d++) ops[2 + d] = starts[d];
  return tpu_hlo_op(b, "stablehlo.dynamic_update_slice", ops, 2 + t.rank, t, NULL);
}

void tpu_emit_for_loop(tpu_hlo_builder_t* b, int64_t lo, int64_t hi, int64_t step,
                       tpu_hlo_value_t* state, int n, tpu_emit_loop_body_fn body, const void* arg) {
  if (lo == hi) return;
  tpu_hlo_type_t types[TPU_EMIT_MAX_LOOP_STATE + 1];
  tpu_hlo_value_t init[TPU_EMIT_MAX_LOOP_STATE + 1], s[TPU_EMIT_MAX_LOOP_STATE + 1];
  for (int i = 0; i < n; i++) types[i] = tpu_hlo_value_type(b, state[i]), init[i] = state[i];
  types[n] = tpu_hlo_type_scalar(TPU_DTYPE_INT64);
  init[n] = tpu_emit_const(b, TPU_DTYPE_INT64, (double)lo);
  tpu_hlo_region_op_begin(b, "stablehlo.while", init, n + 1, types, n + 1, NULL);
  tpu_hlo_block_begin(b, types, n + 1, s);
  tpu_hlo_value_t more = tpu_emit_compare(b, step > 0 ? "LT" : "GT", s[n],
                                          tpu_emit_const(b, TPU_DTYPE_INT64, (double)hi));
  tpu_hlo_block_return(b, &more, 1);
  tpu_hlo_block_begin(b, types, n + 1, s);
  tpu_hlo_value_t i = s[n];
  body(b, i, s, arg);
  s[n] = tpu_emit_add(b, i, tpu_emit_const(b, TPU_DTYPE_INT64, (double)step));
  tpu_hlo_block_return(b, s, n + 1);
  tpu_hlo_value_t out[TPU_EMIT_MAX_LOOP_STATE + 1];
  tpu_hlo_region_op_end(b, out);
  for (int k = 0; k < n; k++) state[k] = out[k];
}

tpu_hlo_value_t tpu_emit_triangular_solve(tpu_hlo_builder_t* b, tpu_hlo_value_t a, tpu_hlo_value_t rhs,
                                          bool left, bool lower, bool unit, bool transpose) {
  char attrs[192];
  snprintf(attrs, sizeof attrs,
           "left_side = %s, lower = %s, unit_diagonal = %s, "
           "transpose_a = #stablehlo<transpose %s>",
           left ? "true" : "false", lower ? "true" : "false", unit ? "true" : "false",
           transpose ? "TRANSPOSE" : "NO_TRANSPOSE");
  tpu_hlo_value_t ops[2] = {a, rhs};
  return tpu_hlo_op(b, "stablehlo.triangular_solve", ops, 2, tpu_hlo_value_type(b, rhs), attrs);
}
