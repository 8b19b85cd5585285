/* shape family of the lowering table (see lowering.h): ops that move
 * elements around without arithmetic: cat / stack, flip, roll, repeat,
 * padding (constant, reflection, replication, and their backwards),
 * tril / triu, writes into a slice (select / slice backward, select /
 * slice / diagonal_scatter, unfold_backward) and clone. Views
 * (split, narrow, expand, permute, ...) never reach the table: the engine
 * folds them into tensor reads. */
#include <stdio.h>
#include <stdlib.h>

#include "emit.h"
#include "lowering.h"

#define ARR_CAP (24 * TPU_HLO_MAX_RANK + 16)

static int wrap_dim(int64_t dim, int rank) {
  if (rank == 0) rank = 1;
  return (int)(dim < 0 ? dim + rank : dim);
}

static int64_t numel(const tpu_hlo_type_t* t) {
  int64_t n = 1;
  for (int d = 0; d < t->rank; d++) n *= t->dims[d];
  return n;
}

/* Concatenates values along `dim` into `out` (same dtype). */
static tpu_hlo_value_t concat(tpu_hlo_builder_t* b, const tpu_hlo_value_t* parts, int n,
                              int dim, tpu_hlo_type_t out) {
  if (n == 1) return parts[0];
  char attrs[48];
  snprintf(attrs, sizeof attrs, "dimension = %d : i64", dim);
  return tpu_hlo_op(b, "stablehlo.concatenate", parts, n, out, attrs);
}

/* cat(tensors, dim), and stack(tensors, dim) (the row's data word: STACK),
 * which gives each tensor a unit dim at dim first. Empty inputs contribute
 * nothing to a cat (PyTorch also skips legacy 1-D empty tensors whatever
 * their rank). */
enum { CAT, STACK };
static tpu_status_t lower_cat(tpu_lower_ctx_t* ctx) {
  bool stack = tpu_lower_data(ctx) == STACK;
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_type_t out = tpu_lower_output_type(ctx, 0);
  const tpu_lower_arg_t* list = tpu_lower_arg(ctx, 0);
  if (list->kind != TPU_ARG_TENSORS) return tpu_lower_decline(ctx, "no tensor list");
  if (numel(&out) == 0) {
    tpu_lower_set_output(ctx, 0, tpu_emit_const_like(b, &out, 0));
    return NULL;
  }
  int dim = wrap_dim(tpu_lower_arg(ctx, 1)->i, out.rank);
  tpu_hlo_value_t* parts = calloc((size_t)list->num_tensors + 1, sizeof *parts);
  if (!parts) return tpu_status_oom(NULL);
  tpu_hlo_type_t one = out;
  one.dims[dim] = 1;
  int n = 0;
  for (int k = 0; k < list->num_tensors; k++) {
    tpu_hlo_type_t t = tpu_lower_list_type(ctx, 0, k);
    if (!stack && numel(&t) == 0) continue;
    tpu_hlo_value_t v = tpu_emit_convert(b, tpu_lower_list_tensor(ctx, 0, k), out.dtype);
    parts[n++] = stack ? tpu_emit_reshape(b, v, one.dims, one.rank) : v;
  }
  tpu_lower_set_output(ctx, 0, concat(b, parts, n, dim, out));
  free(parts);
  return NULL;
}

/* flip(self, dims). */
static tpu_status_t lower_flip(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_value_t x = tpu_lower_tensor(ctx, 0);
  tpu_hlo_type_t t = tpu_lower_arg(ctx, 0)->type;
  const tpu_lower_arg_t* dims = tpu_lower_arg(ctx, 1);
  int64_t d[TPU_HLO_MAX_RANK];
  int n = 0;
  for (int k = 0; k < dims->num_ints && t.rank > 0; k++) d[n++] = wrap_dim(dims->ints[k], t.rank);
  if (n > 0) {
    char arr[ARR_CAP], attrs[ARR_CAP + 32];
    tpu_emit_i64_array(arr, sizeof arr, d, n);
    snprintf(attrs, sizeof attrs, "dimensions = %s", arr);
    x = tpu_hlo_op(b, "stablehlo.reverse", &x, 1, t, attrs);
  }
  tpu_lower_set_output(ctx, 0, x);
  return NULL;
}

/* Rolls x by `shift` along dim: the last `shift` elements move to the
 * front. */
static tpu_hlo_value_t roll_dim(tpu_hlo_builder_t* b, tpu_hlo_value_t x, int dim, int64_t shift) {
  tpu_hlo_type_t t = tpu_hlo_value_type(b, x);
  int64_t n = t.dims[dim];
  if (n == 0) return x;
  int64_t s = ((shift % n) + n) % n;
  if (s == 0) return x;
  tpu_hlo_value_t parts[2] = {tpu_emit_slice_dim(b, x, dim, n - s, n), tpu_emit_slice_dim(b, x, dim, 0, n - s)};
  return concat(b, parts, 2, dim, t);
}

/* roll(self, shifts, dims): no dims rolls the flattened tensor. */
static tpu_status_t lower_roll(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_value_t x = tpu_lower_tensor(ctx, 0);
  tpu_hlo_type_t t = tpu_lower_arg(ctx, 0)->type;
  const tpu_lower_arg_t* shifts = tpu_lower_arg(ctx, 1);
  const tpu_lower_arg_t* dims = tpu_lower_arg(ctx, 2);
  int nd = dims->kind == TPU_ARG_INTS ? dims->num_ints : 0;
  if (nd == 0) {
    if (shifts->num_ints != 1) return tpu_lower_decline(ctx, "shifts without dims");
    int64_t n = numel(&t);
    x = roll_dim(b, tpu_emit_reshape(b, x, &n, 1), 0, shifts->ints[0]);
    x = tpu_emit_reshape(b, x, t.dims, t.rank);
  } else {
    if (shifts->num_ints != nd) return tpu_lower_decline(ctx, "shifts and dims differ");
    for (int k = 0; k < nd; k++) x = roll_dim(b, x, wrap_dim(dims->ints[k], t.rank), shifts->ints[k]);
  }
  tpu_lower_set_output(ctx, 0, x);
  return NULL;
}

/* repeat(self, repeats): broadcast to [r0, n0, r1, n1, ...] and merge. */
static tpu_status_t lower_repeat(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_type_t out = tpu_lower_output_type(ctx, 0);
  tpu_hlo_type_t t = tpu_lower_arg(ctx, 0)->type;
  const tpu_lower_arg_t* reps = tpu_lower_arg(ctx, 1);
  int r = reps->num_ints;
  if (2 * r > TPU_HLO_MAX_RANK) return tpu_lower_decline(ctx, "rank %d too high", r);
  if (numel(&out) == 0) {
    tpu_lower_set_output(ctx, 0, tpu_emit_const_like(b, &out, 0));
    return NULL;
  }
  int64_t padded[TPU_HLO_MAX_RANK], map[TPU_HLO_MAX_RANK];
  tpu_hlo_type_t wide = {.dtype = t.dtype, .rank = 2 * r};
  for (int d = 0; d < r; d++) {
    padded[d] = d < r - t.rank ? 1 : t.dims[d - (r - t.rank)];
    wide.dims[2 * d] = reps->ints[d];
    wide.dims[2 * d + 1] = padded[d];
    map[d] = 2 * d + 1;
  }
  tpu_hlo_value_t x = tpu_emit_reshape(b, tpu_lower_tensor(ctx, 0), padded, r);
  char arr[ARR_CAP], attrs[ARR_CAP + 32];
  tpu_emit_i64_array(arr, sizeof arr, map, r);
  snprintf(attrs, sizeof attrs, "broadcast_dimensions = %s", arr);
  x = tpu_hlo_op(b, "stablehlo.broadcast_in_dim", &x, 1, wide, attrs);
  tpu_lower_set_output(ctx, 0, tpu_emit_reshape(b, x, out.dims, out.rank));
  return NULL;
}

/* constant_pad_nd(self, pad, value): pad pairs start at the last dim;
 * negative pads crop, which stablehlo.pad also does. */
static tpu_status_t lower_constant_pad_nd(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_type_t out = tpu_lower_output_type(ctx, 0);
  tpu_hlo_type_t t = tpu_lower_arg(ctx, 0)->type;
  const tpu_lower_arg_t* pad = tpu_lower_arg(ctx, 1);
  if (pad->num_ints % 2 || pad->num_ints / 2 > t.rank) return tpu_lower_decline(ctx, "pad list");
  int64_t lo[TPU_HLO_MAX_RANK] = {0}, hi[TPU_HLO_MAX_RANK] = {0}, in[TPU_HLO_MAX_RANK] = {0};
  for (int k = 0; k < pad->num_ints / 2; k++) {
    lo[t.rank - 1 - k] = pad->ints[2 * k];
    hi[t.rank - 1 - k] = pad->ints[2 * k + 1];
  }
  tpu_hlo_value_t value = tpu_lower_arg(ctx, 2)->kind == TPU_ARG_NONE
                              ? tpu_emit_const(b, out.dtype, 0)
                              : tpu_lower_scalar(ctx, 2, out.dtype);
  char s0[ARR_CAP], s1[ARR_CAP], s2[ARR_CAP], attrs[3 * ARR_CAP + 96];
  tpu_emit_i64_array(s0, sizeof s0, lo, t.rank);
  tpu_emit_i64_array(s1, sizeof s1, hi, t.rank);
  tpu_emit_i64_array(s2, sizeof s2, in, t.rank);
  snprintf(attrs, sizeof attrs,
           "edge_padding_low = %s, edge_padding_high = %s, interior_padding = %s", s0, s1, s2);
  tpu_hlo_value_t operands[2] = {tpu_emit_convert(b, tpu_lower_tensor(ctx, 0), out.dtype), value};
  tpu_lower_set_output(ctx, 0, tpu_hlo_op(b, "stablehlo.pad", operands, 2, out, attrs));
  return NULL;
}

/* x gathered along `dim` at constant positions idx[0..m) (forward), or
 * scatter-added back into `size` positions (backward). */
static tpu_hlo_value_t along_dim(tpu_hlo_builder_t* b, tpu_hlo_value_t x, int dim,
                                 const int64_t* idx, int64_t m, int64_t size, bool backward) {
  tpu_hlo_type_t t = tpu_hlo_value_type(b, x);
  tpu_hlo_type_t it = tpu_hlo_type_make(TPU_DTYPE_INT64, 2, (int64_t[]){m, 1});
  tpu_hlo_value_t indices = tpu_hlo_constant_dense(b, it, idx);
  int64_t window[TPU_HLO_MAX_RANK], slice[TPU_HLO_MAX_RANK], d64 = dim;
  int nw = 0;
  for (int d = 0; d < t.rank; d++) {
    slice[d] = d == dim ? 1 : t.dims[d];
    if (d != dim) window[nw++] = d;
  }
  tpu_hlo_type_t out = t;
  out.dims[dim] = backward ? size : m;
  if (!backward) return tpu_emit_gather(b, x, indices, out, window, nw, &d64, &d64, 1, slice);
  return tpu_emit_scatter(b, tpu_emit_const_like(b, &out, 0), indices, x, window, nw, &d64, &d64, 1,
                          "stablehlo.add");
}

/* reflection_pad{1,2,3}d / replication_pad{1,2,3}d and their backwards:
 * every output position along a padded dim reads one input position, so
 * forward gathers and backward scatter-adds with constant indices, one
 * padded dim at a time. Schemas: (self, padding) and (grad_output, self,
 * padding). The row's data word: REFLECT or REPLICATE, | BACKWARD. */
enum { REPLICATE = 0, REFLECT = 1, BACKWARD = 2 };
static tpu_status_t lower_pad(tpu_lower_ctx_t* ctx) {
  /* CPU and CUDA have no bool kernel for these: the fallback raises theirs. */
  if (tpu_lower_arg(ctx, 0)->type.dtype == TPU_DTYPE_BOOL) return tpu_lower_decline(ctx, "bool");
  bool reflect = tpu_lower_data(ctx) & REFLECT, backward = tpu_lower_data(ctx) & BACKWARD;
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_type_t out = tpu_lower_output_type(ctx, 0);
  tpu_hlo_type_t in = tpu_lower_arg(ctx, backward ? 1 : 0)->type; /* unpadded */
  const tpu_lower_arg_t* pad = tpu_lower_arg(ctx, backward ? 2 : 1);
  if (pad->num_ints % 2 || pad->num_ints / 2 > in.rank) return tpu_lower_decline(ctx, "padding");
  if (numel(&out) == 0) {
    tpu_lower_set_output(ctx, 0, tpu_emit_const_like(b, &out, 0));
    return NULL;
  }
  tpu_hlo_value_t x = tpu_lower_tensor(ctx, 0);
  int npairs = pad->num_ints / 2;
  for (int j = 0; j < npairs; j++) {
    /* Backward undoes the dims in reverse order of the forward. */
    int k = backward ? npairs - 1 - j : j;
    int dim = in.rank - 1 - k;
    int64_t n = in.dims[dim], l = pad->ints[2 * k], r = pad->ints[2 * k + 1];
    int64_t m = n + l + r;
    if (n <= 0 || m <= 0) return tpu_lower_decline(ctx, "empty padded dim");
    if (reflect && (l >= n || r >= n)) return tpu_lower_decline(ctx, "padding >= size");
    int64_t* idx = malloc(sizeof(int64_t) * (size_t)m);
    if (!idx) return tpu_status_oom(NULL);
    for (int64_t o = 0; o < m; o++) {
      int64_t i = o - l;
      if (reflect) {
        if (i < 0) i = -i;
        if (i >= n) i = 2 * (n - 1) - i;
      } else {
        i = i < 0 ? 0 : i >= n ? n - 1 : i;
      }
      idx[o] = i;
    }
    x = along_dim(b, x, dim, idx, m, n, backward);
    free(idx);
  }
  tpu_lower_set_output(ctx, 0, x);
  return NULL;
}

/* tril / triu(self, diagonal): keep col - row <= (>=) diagonal; the row's
 * data word is that comparison ("LE", "GE"). */
static tpu_status_t lower_tri(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_type_t t = tpu_lower_arg(ctx, 0)->type;
  if (t.rank < 2) return tpu_lower_decline(ctx, "rank < 2");
  int64_t diag = tpu_lower_arg(ctx, 1)->kind == TPU_ARG_INT ? tpu_lower_arg(ctx, 1)->i : 0;
  tpu_hlo_type_t m = tpu_hlo_type_make(TPU_DTYPE_INT64, 2, &t.dims[t.rank - 2]);
  tpu_hlo_value_t diff = tpu_emit_binary(b, "stablehlo.subtract", tpu_emit_iota(b, &m, 1),
                                         tpu_emit_iota(b, &m, 0));
  tpu_hlo_value_t keep = tpu_emit_compare(b, (const char*)tpu_lower_data(ctx), diff,
                                          tpu_emit_const_like(b, &m, (double)diag));
  tpu_hlo_type_t mask_t = t;
  mask_t.dtype = TPU_DTYPE_BOOL;
  keep = tpu_emit_broadcast_to(b, keep, &mask_t);
  tpu_hlo_value_t x = tpu_lower_tensor(ctx, 0);
  tpu_lower_set_output(ctx, 0, tpu_emit_select(b, keep, x, tpu_emit_const_like(b, &t, 0)));
  return NULL;
}

/* ---- writes into a slice: backwards of select / slice views, and the
 * *_scatter ops functionalization produces. ---- */

/* PyTorch's slice bounds: negative wrap, clamp to [0, size], end >= start. */
static void slice_bounds(const tpu_lower_arg_t* start_arg, const tpu_lower_arg_t* end_arg,
                         int64_t size, int64_t* start, int64_t* end) {
  *start = start_arg->kind == TPU_ARG_INT ? start_arg->i : 0;
  *end = end_arg->kind == TPU_ARG_INT ? end_arg->i : size;
  if (*start < 0) *start += size;
  if (*end < 0) *end += size;
  *start = *start < 0 ? 0 : *start > size ? size : *start;
  *end = *end < *start ? *start : *end > size ? size : *end;
}

/* `src` (len along dim) spread to positions start, start+step, ... of a
 * dim of `size`, `fill` elsewhere. */
static tpu_hlo_value_t place_along(tpu_hlo_builder_t* b, tpu_hlo_value_t src, int dim,
                                   int64_t start, int64_t step, int64_t size,
                                   tpu_hlo_value_t fill) {
  tpu_hlo_type_t t = tpu_hlo_value_type(b, src);
  int64_t len = t.dims[dim];
  int64_t lo[TPU_HLO_MAX_RANK] = {0}, hi[TPU_HLO_MAX_RANK] = {0}, in[TPU_HLO_MAX_RANK] = {0};
  lo[dim] = start;
  in[dim] = step - 1;
  hi[dim] = size - start - (len - 1) * step - 1;
  char s0[ARR_CAP], s1[ARR_CAP], s2[ARR_CAP], attrs[3 * ARR_CAP + 96];
  tpu_emit_i64_array(s0, sizeof s0, lo, t.rank);
  tpu_emit_i64_array(s1, sizeof s1, hi, t.rank);
  tpu_emit_i64_array(s2, sizeof s2, in, t.rank);
  snprintf(attrs, sizeof attrs,
           "edge_padding_low = %s, edge_padding_high = %s, interior_padding = %s", s0, s1, s2);
  t.dims[dim] = size;
  tpu_hlo_value_t operands[2] = {src, fill};
  return tpu_hlo_op(b, "stablehlo.pad", operands, 2, t, attrs);
}

/* Shared by the four ops: writes src at (start, step) along dim of a
 * tensor of `out`'s type: over zeros (backward) or over `base`. */
static tpu_status_t write_slice(tpu_lower_ctx_t* ctx, tpu_hlo_value_t src, tpu_hlo_value_t base,
                                bool has_base, int dim, int64_t start, int64_t step) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_type_t out = tpu_lower_output_type(ctx, 0);
  src = tpu_emit_convert(b, src, out.dtype);
  tpu_hlo_type_t st = tpu_hlo_value_type(b, src);
  int64_t size = out.dims[dim], len = st.dims[dim];
  if (numel(&out) == 0 || len == 0) {
    tpu_lower_set_output(ctx, 0, has_base ? base : tpu_emit_const_like(b, &out, 0));
    return NULL;
  }
  if (step < 1) return tpu_lower_decline(ctx, "step %lld", (long long)step);
  tpu_hlo_value_t zero = tpu_emit_const(b, out.dtype, 0);
  tpu_hlo_value_t placed = place_along(b, src, dim, start, step, size, zero);
  if (has_base) {
    bool* keep = calloc((size_t)size, sizeof *keep);
    if (!keep) return tpu_status_oom(NULL);
    for (int64_t k = 0; k < len; k++) keep[start + k * step] = true;
    tpu_hlo_value_t m = tpu_hlo_constant_dense(b, tpu_hlo_type_make(TPU_DTYPE_BOOL, 1, &size), keep);
    free(keep);
    tpu_hlo_type_t mt = out;
    mt.dtype = TPU_DTYPE_BOOL;
    char attrs[64];
    snprintf(attrs, sizeof attrs, "broadcast_dimensions = array<i64: %d>", dim);
    m = tpu_hlo_op(b, "stablehlo.broadcast_in_dim", &m, 1, mt, attrs);
    placed = tpu_emit_select(b, m, placed, tpu_emit_convert(b, base, out.dtype));
  }
  tpu_lower_set_output(ctx, 0, placed);
  return NULL;
}

/* src without `dim` -> with a unit dim there. */
static tpu_hlo_value_t unsqueeze(tpu_hlo_builder_t* b, tpu_hlo_value_t x, int dim) {
  tpu_hlo_type_t t = tpu_hlo_value_type(b, x);
  int64_t d[TPU_HLO_MAX_RANK];
  for (int k = 0, j = 0; k <= t.rank; k++) d[k] = k == dim ? 1 : t.dims[j++];
  return tpu_emit_reshape(b, x, d, t.rank + 1);
}

/* select_backward(grad_output, input_sizes, dim, index) and
 * select_scatter(self, src, dim, index): the row's data word is the
 * argument written (0: the grad, over zeros; 1: src, over self). */
static tpu_status_t lower_select_write(tpu_lower_ctx_t* ctx) {
  int src_i = (int)tpu_lower_data(ctx);
  tpu_hlo_type_t out = tpu_lower_output_type(ctx, 0);
  int dim = wrap_dim(tpu_lower_arg(ctx, 2)->i, out.rank);
  int64_t index = tpu_lower_arg(ctx, 3)->i;
  if (index < 0) index += out.dims[dim];
  tpu_hlo_value_t src = unsqueeze(tpu_lower_builder(ctx), tpu_lower_tensor(ctx, src_i), dim);
  tpu_hlo_value_t base = src_i ? tpu_lower_tensor(ctx, 0) : (tpu_hlo_value_t){-1};
  return write_slice(ctx, src, base, src_i == 1, dim, index, 1);
}

/* slice_backward(grad_output, input_sizes, dim, start, end, step). */
static tpu_status_t lower_slice_backward(tpu_lower_ctx_t* ctx) {
  tpu_hlo_type_t out = tpu_lower_output_type(ctx, 0);
  int dim = wrap_dim(tpu_lower_arg(ctx, 2)->i, out.rank);
  int64_t start, end;
  slice_bounds(tpu_lower_arg(ctx, 3), tpu_lower_arg(ctx, 4), out.dims[dim], &start, &end);
  return write_slice(ctx, tpu_lower_tensor(ctx, 0), (tpu_hlo_value_t){-1}, false, dim, start,
                     tpu_lower_arg(ctx, 5)->i);
}

/* slice_scatter(self, src, dim, start, end, step). */
static tpu_status_t lower_slice_scatter(tpu_lower_ctx_t* ctx) {
  tpu_hlo_type_t out = tpu_lower_output_type(ctx, 0);
  int dim = wrap_dim(tpu_lower_arg(ctx, 2)->kind == TPU_ARG_INT ? tpu_lower_arg(ctx, 2)->i : 0,
                     out.rank);
  int64_t start, end;
  slice_bounds(tpu_lower_arg(ctx, 3), tpu_lower_arg(ctx, 4), out.dims[dim], &start, &end);
  int64_t step = tpu_lower_arg(ctx, 5)->kind == TPU_ARG_INT ? tpu_lower_arg(ctx, 5)->i : 1;
  return write_slice(ctx, tpu_lower_tensor(ctx, 1), tpu_lower_tensor(ctx, 0), true, dim, start,
                     step);
}

/* diagonal_scatter(self, src, offset, dim1, dim2): src (self's other dims,
 * then the diagonal) is spread over self's shape along dim1 (or dim2 for a
 * negative offset), then selected where col - row == offset. */
static tpu_status_t lower_diagonal_scatter(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_type_t out = tpu_lower_output_type(ctx, 0);
  int r = out.rank;
  int64_t offset = tpu_lower_arg(ctx, 2)->kind == TPU_ARG_INT ? tpu_lower_arg(ctx, 2)->i : 0;
  int d1 = wrap_dim(tpu_lower_arg(ctx, 3)->kind == TPU_ARG_INT ? tpu_lower_arg(ctx, 3)->i : 0, r);
  int d2 = wrap_dim(tpu_lower_arg(ctx, 4)->kind == TPU_ARG_INT ? tpu_lower_arg(ctx, 4)->i : 1, r);
  if (r < 2 || d1 == d2) return tpu_lower_decline(ctx, "dims");
  tpu_hlo_value_t self = tpu_lower_tensor(ctx, 0);
  tpu_hlo_value_t src = tpu_emit_convert(b, tpu_lower_tensor(ctx, 1), out.dtype);
  tpu_hlo_type_t st = tpu_hlo_value_type(b, src);
  int keep = offset >= 0 ? d1 : d2, other = offset >= 0 ? d2 : d1;
  int64_t len = st.dims[r - 2];
  if (numel(&out) == 0 || len == 0) {
    tpu_lower_set_output(ctx, 0, self);
    return NULL;
  }
  /* Pad the diagonal to the full size of `keep`. */
  tpu_hlo_value_t zero = tpu_emit_const(b, out.dtype, 0);
  src = place_along(b, src, r - 2, 0, 1, out.dims[keep], zero);
  /* Reorder (rest..., keep) into self's dim order without `other`. */
  int64_t perm[TPU_HLO_MAX_RANK], target[TPU_HLO_MAX_RANK];
  int n = 0, rest = 0;
  for (int d = 0; d < r; d++) {
    if (d == other) continue;
    target[n] = d;
    if (d == keep) {
      perm[n++] = r - 2;
    } else {
      perm[n++] = rest;
    }
    if (d != keep) rest++;
  }
  src = tpu_emit_transpose(b, src, perm);
  char arr[ARR_CAP], attrs[ARR_CAP + 32];
  tpu_emit_i64_array(arr, sizeof arr, target, r - 1);
  snprintf(attrs, sizeof attrs, "broadcast_dimensions = %s", arr);
  src = tpu_hlo_op(b, "stablehlo.broadcast_in_dim", &src, 1, out, attrs);
  int64_t md[2] = {out.dims[d1], out.dims[d2]};
  tpu_hlo_type_t mt = tpu_hlo_type_make(TPU_DTYPE_INT64, 2, md);
  tpu_hlo_value_t diff = tpu_emit_binary(b, "stablehlo.subtract", tpu_emit_iota(b, &mt, 1),
                                         tpu_emit_iota(b, &mt, 0));
  tpu_hlo_value_t on = tpu_emit_compare(b, "EQ", diff, tpu_emit_const_like(b, &mt, (double)offset));
  tpu_hlo_type_t bt = out;
  bt.dtype = TPU_DTYPE_BOOL;
  snprintf(attrs, sizeof attrs, "broadcast_dimensions = array<i64: %d, %d>", d1, d2);
  if (d1 > d2) { /* broadcast_in_dim wants the operand's dims in order */
    int64_t swap[2] = {1, 0};
    on = tpu_emit_transpose(b, on, swap);
    snprintf(attrs, sizeof attrs, "broadcast_dimensions = array<i64: %d, %d>", d2, d1);
  }
  on = tpu_hlo_op(b, "stablehlo.broadcast_in_dim", &on, 1, bt, attrs);
  tpu_lower_set_output(ctx, 0, tpu_emit_select(b, on, src, tpu_emit_convert(b, self, out.dtype)));
  return NULL;
}

/* unfold_backward(grad_in, input_sizes, dim, size, step): window w's
 * element j came from position w * step + j along dim; overlapping windows
 * add up. The window dim is moved next to dim and merged with it, then
 * scatter-added with constant positions. */
static tpu_status_t lower_unfold_backward(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  tpu_hlo_type_t out = tpu_lower_output_type(ctx, 0);
  tpu_hlo_type_t gt = tpu_lower_arg(ctx, 0)->type;
  int dim = wrap_dim(tpu_lower_arg(ctx, 2)->i, out.rank);
  int64_t size = tpu_lower_arg(ctx, 3)->i, step = tpu_lower_arg(ctx, 4)->i;
  if (out.rank == 0 || gt.rank != out.rank + 1) return tpu_lower_decline(ctx, "rank");
  int64_t windows = gt.dims[dim], n = out.dims[dim], m = windows * size;
  if (numel(&out) == 0 || m == 0) {
    tpu_lower_set_output(ctx, 0, tpu_emit_const_like(b, &out, 0));
    return NULL;
  }
  int64_t perm[TPU_HLO_MAX_RANK], merged[TPU_HLO_MAX_RANK];
  for (int d = 0, k = 0; d < gt.rank; d++) {
    if (d == dim + 1) perm[k++] = gt.rank - 1;
    if (d < gt.rank - 1) perm[k++] = d;
  }
  if (dim + 1 == gt.rank - 1) perm[gt.rank - 1] = gt.rank - 1;
  tpu_hlo_value_t g = tpu_emit_transpose(b, tpu_lower_tensor(ctx, 0), perm);
  for (int d = 0; d < out.rank; d++) merged[d] = d == dim ? m : out.dims[d];
  g = tpu_emit_reshape(b, g, merged, out.rank);
  int64_t* idx = malloc(sizeof(int64_t) * (size_t)m);
  if (!idx) return tpu_status_oom(NULL);
  for (int64_t w = 0; w < windows; w++)
    for (int64_t j = 0; j < size; j++) idx[w * size + j] = w * step + j;
  g = along_dim(b, g, dim, idx, m, n, true);
  free(idx);
  tpu_lower_set_output(ctx, 0, g);
  return NULL;
}

/* clone(self, memory_format): the value itself; the engine writes it to a
 * fresh tensor. */
static tpu_status_t lower_clone(tpu_lower_ctx_t* ctx) {
  tpu_lower_set_output(ctx, 0, tpu_lower_tensor(ctx, 0));
  return NULL;
}

const tpu_lowering_t tpu_lowerings_shape[] = {
    {"cat", lower_cat, 0, CAT},
    {"stack", lower_cat, 0, STACK},
    {"flip", lower_flip, 0},
    {"roll", lower_roll, 0},
    {"repeat", lower_repeat, 0},
    {"constant_pad_nd", lower_constant_pad_nd, 0},
    {"reflection_pad1d", lower_pad, 0, REFLECT},
    {"reflection_pad2d", lower_pad, 0, REFLECT},
    {"reflection_pad3d", lower_pad, 0, REFLECT},
    {"reflection_pad1d_backward", lower_pad, 0, REFLECT | BACKWARD},
    {"reflection_pad2d_backward", lower_pad, 0, REFLECT | BACKWARD},
    {"reflection_pad3d_backward", lower_pad, 0, REFLECT | BACKWARD},
    {"replication_pad1d", lower_pad, 0, REPLICATE},
    {"replication_pad2d", lower_pad, 0, REPLICATE},
    {"replication_pad3d", lower_pad, 0, REPLICATE},
    {"replication_pad1d_backward", lower_pad, 0, REPLICATE | BACKWARD},
    {"replication_pad2d_backward", lower_pad, 0, REPLICATE | BACKWARD},
    {"replication_pad3d_backward", lower_pad, 0, REPLICATE | BACKWARD},
    {"tril", lower_tri, 0, (intptr_t)"LE"},
    {"triu", lower_tri, 0, (intptr_t)"GE"},
    {"clone", lower_clone, 0},
    {"select_backward", lower_select_write, 0, 0},
    {"slice_backward", lower_slice_backward, 0},
    {"select_scatter", lower_select_write, 0, 1},
    {"slice_scatter", lower_slice_scatter, 0},
    {"diagonal_scatter", lower_diagonal_scatter, 0},
    {"unfold_backward", lower_unfold_backward, 0},
};
const size_t tpu_lowerings_shape_count = sizeof tpu_lowerings_shape / sizeof tpu_lowerings_shape[0];
