#include "view.h"

#include <stdio.h>
#include <string.h>

#include "lower/emit.h"

int64_t tpu_view_numel(const tpu_view_t* v) {
  int64_t n = 1;
  for (int d = 0; d < v->rank; d++) n *= v->sizes[d];
  return n;
}

bool tpu_view_is_contiguous(const tpu_view_t* v) {
  int64_t expected = 1;
  for (int d = v->rank - 1; d >= 0; d--) {
    if (v->sizes[d] == 1) continue;
    if (v->strides[d] != expected) return false;
    expected *= v->sizes[d];
  }
  return true;
}

static int64_t flat_len(tpu_hlo_builder_t* b, tpu_hlo_value_t flat) {
  return tpu_hlo_value_type(b, flat).dims[0];
}

static tpu_hlo_value_t slice1(tpu_hlo_builder_t* b, tpu_hlo_value_t flat, int64_t start,
                              int64_t limit) {
  int64_t one = 1;
  return tpu_emit_slice(b, flat, &start, &limit, &one);
}

/* Pads a flat value with zeros at its end up to `len`. */
static tpu_hlo_value_t pad_to(tpu_hlo_builder_t* b, tpu_hlo_value_t flat, int64_t len) {
  tpu_hlo_type_t t = tpu_hlo_value_type(b, flat);
  if (t.dims[0] >= len) return flat;
  char attrs[160];
  snprintf(attrs, sizeof attrs,
           "edge_padding_low = array<i64: 0>, edge_padding_high = array<i64: %lld>, "
           "interior_padding = array<i64: 0>",
           (long long)(len - t.dims[0]));
  tpu_hlo_value_t operands[2] = {flat, tpu_emit_const(b, t.dtype, 0)};
  tpu_hlo_type_t out = t;
  out.dims[0] = len;
  return tpu_hlo_op(b, "stablehlo.pad", operands, 2, out, attrs);
}

/* Flat element indices of every element of the view: int64 tensor of the
 * view's sizes with offset + sum(i_d * stride_d). */
static tpu_hlo_value_t index_tensor(tpu_hlo_builder_t* b, const tpu_view_t* v) {
  tpu_hlo_type_t t = tpu_hlo_type_make(TPU_DTYPE_INT64, v->rank, v->sizes);
  tpu_hlo_value_t idx = tpu_emit_const_like(b, &t, (double)v->offset);
  for (int d = 0; d < v->rank; d++) {
    if (v->sizes[d] == 1 || v->strides[d] == 0) continue;
    tpu_hlo_value_t term = tpu_emit_binary(b, "stablehlo.multiply", tpu_emit_iota(b, &t, d),
                                           tpu_emit_const_like(b, &t, (double)v->strides[d]));
    idx = tpu_emit_binary(b, "stablehlo.add", idx, term);
  }
  return idx;
}

/* Indices reshaped to [numel, 1] for gather/scatter. */
/* Floats as same-width integers: "changed" means other bits, so writing
 * -0.0 over 0.0 is a change and an unchanged NaN is not. */
static tpu_hlo_value_t as_bits(tpu_hlo_builder_t* b, tpu_hlo_value_t x) {
  tpu_hlo_type_t t = tpu_hlo_value_type(b, x);
  if (!tpu_dtype_is_floating(t.dtype) && !tpu_dtype_is_complex(t.dtype)) return x;
  if (tpu_dtype_is_complex(t.dtype)) return x; /* (no same-width integer: values) */
  size_t size = tpu_dtype_size(t.dtype);
  t.dtype = size == 8 ? TPU_DTYPE_INT64 : size == 4 ? TPU_DTYPE_INT32 : TPU_DTYPE_INT16;
  return tpu_hlo_op(b, "stablehlo.bitcast_convert", &x, 1, t, NULL);
}

/* Whether two elements of the view can share a location: a stride-0
 * dimension, or (its dimensions sorted by stride) one whose stride is less
 * than the extent of the ones inside it (unfold's overlapping windows). */
static bool may_overlap(const tpu_view_t* v) {
  int order[TPU_HLO_MAX_RANK], m = 0;
  for (int d = 0; d < v->rank; d++) {
    if (v->sizes[d] <= 1) continue;
    if (v->strides[d] == 0) return true;
    int k = m++;
    while (k > 0 && v->strides[order[k - 1]] > v->strides[d]) {
      order[k] = order[k - 1];
      k--;
    }
    order[k] = d;
  }
  int64_t extent = 1; /* one past the largest offset the inner dims reach */
  for (int i = 0; i < m; i++) {
    int d = order[i];
    if (v->strides[d] < extent) return true;
    extent = v->strides[d] * (v->sizes[d] - 1) + extent;
  }
  return false;
}

static tpu_hlo_value_t index_column(tpu_hlo_builder_t* b, const tpu_view_t* v) {
  int64_t dims[2] = {tpu_view_numel(v), 1};
  return tpu_emit_reshape(b, index_tensor(b, v), dims, 2);
}

/* Strided-slice plan: the view's non-trivial dims sorted by stride, each
 * stride a multiple of the next and non-overlapping. */
typedef struct {
  int m;                      /* dims kept (size > 1, stride > 0) */
  int order[TPU_HLO_MAX_RANK]; /* view dims, outermost first */
} plan_t;

static bool make_plan(const tpu_view_t* v, plan_t* p) {
  p->m = 0;
  for (int d = 0; d < v->rank; d++)
    if (v->sizes[d] > 1 && v->strides[d] > 0) p->order[p->m++] = d;
  for (int i = 1; i < p->m; i++) /* insertion sort, stride descending */
    for (int j = i; j > 0 && v->strides[p->order[j]] > v->strides[p->order[j - 1]]; j--) {
      int tmp = p->order[j];
      p->order[j] = p->order[j - 1];
      p->order[j - 1] = tmp;
    }
  for (int i = 0; i + 1 < p->m; i++) {
    int64_t s = v->strides[p->order[i]], next = v->strides[p->order[i + 1]];
    if (s % next != 0 || s < v->sizes[p->order[i + 1]] * next) return false;
  }
  return true;
}

/* The start indices in the plan's block dims (block[], kept limit[] of
 * each) that put the offset's remainder below the outer stride inside the
 * block: true when each start + limit fits its block dim. */
static bool shifted_starts(const tpu_view_t* v, const plan_t* p, const int64_t* block,
                           int64_t* limit, int64_t* start) {
  int64_t r = v->offset % v->strides[p->order[0]];
  start[0] = 0;
  for (int i = 1; i <= p->m; i++) {
    int64_t stride = i < p->m ? v->strides[p->order[i]] : 1;
    start[i] = r / stride;
    r %= stride;
    if (start[i] + limit[i] > block[i]) {
      memset(start, 0, sizeof *start * (size_t)(p->m + 1));
      return false;
    }
  }
  for (int i = 1; i <= p->m; i++) limit[i] += start[i];
  return true;
}

tpu_hlo_value_t tpu_view_emit_read(tpu_hlo_builder_t* b, tpu_hlo_value_t flat,
                                   const tpu_view_t* v) {
  tpu_hlo_type_t out = tpu_hlo_type_make(v->dtype, v->rank, v->sizes);
  int64_t numel = tpu_view_numel(v);
  if (numel == 0) return tpu_emit_const_like(b, &out, 0);
  if (tpu_view_is_contiguous(v)) {
    tpu_hlo_value_t slab = slice1(b, flat, v->offset, v->offset + numel);
    return tpu_emit_reshape(b, slab, v->sizes, v->rank);
  }
  plan_t p;
  if (make_plan(v, &p) && p.m == 0) {
    /* Every dim has size 1 or stride 0: one element, broadcast. */
    tpu_hlo_value_t one = tpu_emit_reshape(b, slice1(b, flat, v->offset, v->offset + 1), NULL, 0);
    return tpu_emit_broadcast_to(b, one, &out);
  }
  if (make_plan(v, &p)) {
    /* Block [size_0, s_0/s_1, ..., s_{m-2}/s_{m-1}, s_{m-1}] over the slab
     * starting at offset; keep [0:size_k] of each and [0:1] of the last. */
    int64_t block[TPU_HLO_MAX_RANK + 1], start[TPU_HLO_MAX_RANK + 1] = {0},
        limit[TPU_HLO_MAX_RANK + 1], step[TPU_HLO_MAX_RANK + 1];
    int n = 0;
    for (int i = 0; i < p.m; i++) {
      int d = p.order[i];
      block[n] = i == 0 ? v->sizes[d] : v->strides[p.order[i - 1]] / v->strides[d];
      limit[n] = v->sizes[d];
      step[n++] = 1;
    }
    int64_t inner = v->strides[p.order[p.m - 1]];
    block[n] = inner;
    limit[n] = 1;
    step[n++] = 1;
    int64_t slab_len = v->sizes[p.order[0]] * v->strides[p.order[0]];
    /* The slab starts at the offset, or, when that would run past the
     * storage's end (k and v of a fused qkv split: offset 256, the slab
     * the whole [8,128,12,64] block), at the offset rounded down to the
     * outer stride, the remainder becoming start indices of the inner
     * block dims: a plain slice of the storage, where padding the storage
     * and slicing it again costs XLA a copy of the whole storage. */
    int64_t base = v->offset;
    if (v->offset + slab_len > flat_len(b, flat) &&
        shifted_starts(v, &p, block, limit, start))
      base = v->offset - v->offset % v->strides[p.order[0]];
    tpu_hlo_value_t slab = slice1(b, pad_to(b, flat, base + slab_len), base, base + slab_len);
    tpu_hlo_value_t x = tpu_emit_slice(b, tpu_emit_reshape(b, slab, block, n), start, limit, step);
    int64_t kept[TPU_HLO_MAX_RANK];
    for (int i = 0; i < p.m; i++) kept[i] = v->sizes[p.order[i]];
    x = tpu_emit_reshape(b, x, kept, p.m);
    /* Back to the view's dim order, then broadcast size-1 / stride-0 dims. */
    char arr[24 * TPU_HLO_MAX_RANK + 16], attrs[sizeof arr + 32];
    int64_t map[TPU_HLO_MAX_RANK];
    for (int i = 0; i < p.m; i++) map[i] = p.order[i];
    /* broadcast_in_dim maps operand dim i to result dim order[i]; the
     * result dims must be increasing for a plain broadcast, so transpose
     * first into increasing view order. */
    int64_t perm[TPU_HLO_MAX_RANK], sorted_map[TPU_HLO_MAX_RANK], sorted_dims[TPU_HLO_MAX_RANK];
    for (int i = 0; i < p.m; i++) perm[i] = i;
    for (int i = 1; i < p.m; i++)
      for (int j = i; j > 0 && map[perm[j]] < map[perm[j - 1]]; j--) {
        int64_t t = perm[j];
        perm[j] = perm[j - 1];
        perm[j - 1] = t;
      }
    x = tpu_emit_transpose(b, x, perm);
    for (int i = 0; i < p.m; i++) {
      sorted_map[i] = map[perm[i]];
      sorted_dims[i] = kept[perm[i]];
    }
    (void)sorted_dims;
    tpu_emit_i64_array(arr, sizeof arr, sorted_map, p.m);
    snprintf(attrs, sizeof attrs, "broadcast_dimensions = %s", arr);
    return tpu_hlo_op(b, "stablehlo.broadcast_in_dim", &x, 1, out, attrs);
  }
  /* Overlapping or irregular strides: gather element by element. */
  int64_t one = 1;
  tpu_hlo_value_t operands[2] = {flat, index_column(b, v)};
  int64_t gathered_dims[1] = {numel};
  tpu_hlo_value_t g = tpu_hlo_op(
      b, "stablehlo.gather", operands, 2, tpu_hlo_type_make(v->dtype, 1, gathered_dims),
      "dimension_numbers = #stablehlo.gather<collapsed_slice_dims = [0], start_index_map = "
      "[0], index_vector_dim = 1>, slice_sizes = array<i64: 1>");
  (void)one;
  return tpu_emit_reshape(b, g, v->sizes, v->rank);
}

tpu_hlo_value_t tpu_view_emit_write(tpu_hlo_builder_t* b, tpu_hlo_value_t flat,
                                    const tpu_view_t* v, tpu_hlo_value_t value) {
  int64_t n = flat_len(b, flat), numel = tpu_view_numel(v);
  if (numel == 0) return flat;
  value = tpu_emit_convert(b, value, tpu_hlo_value_type(b, flat).dtype);
  if (tpu_view_is_contiguous(v)) {
    tpu_hlo_value_t as_flat = tpu_emit_reshape(b, value, &numel, 1);
    if (v->offset == 0 && numel == n) return as_flat;
    tpu_hlo_value_t operands[3] = {flat, as_flat, tpu_emit_const(b, TPU_DTYPE_INT64, (double)v->offset)};
    return tpu_hlo_op(b, "stablehlo.dynamic_update_slice", operands, 3,
                      tpu_hlo_value_type(b, flat), NULL);
  }
  plan_t p;
  if (v->offset == 0 && numel == n && make_plan(v, &p) && p.m == v->rank &&
      v->strides[p.order[p.m - 1]] == 1) {
    /* A permutation covering the storage (e.g. a transposed tensor). */
    int64_t perm[TPU_HLO_MAX_RANK];
    for (int i = 0; i < p.m; i++) perm[i] = p.order[i];
    return tpu_emit_reshape(b, tpu_emit_transpose(b, value, perm), &numel, 1);
  }
  /* General: scatter each element to its flat index (replace). */
  tpu_hlo_value_t updates = tpu_emit_reshape(b, value, &numel, 1);
  tpu_hlo_value_t indices = index_column(b, v);
  if (may_overlap(v)) {
    /* An expanded view or overlapping windows (unfold; fill_, masked_fill_,
     * index_put_ ... allow writes through them, as on the CPU): several
     * elements share one location, and only those the op changed may land
     * there, or an unchanged duplicate could undo the write (CPU's kernels
     * write only what they change). Unchanged elements get an out-of-range
     * index (dropped). */
    tpu_hlo_value_t old = tpu_emit_reshape(b, tpu_view_emit_read(b, flat, v), &numel, 1);
    int64_t dims[2] = {numel, 1};
    tpu_hlo_value_t changed =
        tpu_emit_reshape(b, tpu_emit_compare(b, "NE", as_bits(b, updates), as_bits(b, old)), dims, 2);
    tpu_hlo_type_t idx_type = tpu_hlo_type_make(TPU_DTYPE_INT64, 2, dims);
    indices = tpu_emit_select(b, changed, indices, tpu_emit_const_like(b, &idx_type, (double)n));
  }
  tpu_hlo_value_t operands[3] = {flat, indices, updates};
  tpu_hlo_type_t flat_type = tpu_hlo_value_type(b, flat);
  tpu_hlo_region_op_begin(
      b, "stablehlo.scatter", operands, 3, &flat_type, 1,
      "scatter_dimension_numbers = #stablehlo.scatter<inserted_window_dims = [0], "
      "scatter_dims_to_operand_dims = [0], index_vector_dim = 1>, indices_are_sorted = false, "
      "unique_indices = false");
  tpu_hlo_type_t scalar = tpu_hlo_type_scalar(flat_type.dtype);
  tpu_hlo_type_t block_types[2] = {scalar, scalar};
  tpu_hlo_value_t block_args[2];
  tpu_hlo_block_begin(b, block_types, 2, block_args);
  tpu_hlo_block_return(b, &block_args[1], 1);
  tpu_hlo_value_t result;
  tpu_hlo_region_op_end(b, &result);
  return result;
}
