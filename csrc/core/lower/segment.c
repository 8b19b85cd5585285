/* segment family of the lowering table (see lowering.h): segment_reduce
 * and _segment_reduce_backward (max, min, sum, mean, prod over segments
 * given by lengths or offsets along `axis`), as CPU's kernels
 * (SegmentReduce.cpp).
 *
 * Data is read as [O, n, I] (dims before the axis, the axis, dims after);
 * segments as start / length per [O, S]: lengths' exclusive prefix sums,
 * or offsets[:-1] and their differences. Membership is a mask [O, S, n],
 * so a segment's reduction is a masked reduce (values outside it read as
 * the reduction's identity) and a data element reads its segment's values
 * back with a max-reduce over -inf off the mask, which moves values
 * exactly (-0.0 and NaN included). Lengths that are negative or do not sum
 * to the axis size are refused before the call (check_segment_lengths in
 * csrc/torch/dispatch.cpp), as CPU refuses them. */
#include <string.h>

#include "emit.h"
#include "lowering.h"

typedef enum { SEG_MAX, SEG_MIN, SEG_SUM, SEG_MEAN, SEG_PROD } seg_kind_t;

static bool seg_kind(const tpu_lower_arg_t* a, seg_kind_t* k) {
  if (a->kind != TPU_ARG_STRING) return false;
  static const char* names[] = {"max", "min", "sum", "mean", "prod"};
  for (int i = 0; i < 5; i++)
    if (strcmp(a->str, names[i]) == 0) return *k = (seg_kind_t)i, true;
  return false;
}

typedef struct {
  tpu_hlo_builder_t* b;
  int64_t O, n, I, S;
  tpu_dtype_t d;
  tpu_hlo_value_t start, len; /* int64 [O, S] */
  tpu_hlo_value_t mask;       /* bool [O, S, n] */
} seg_t;

static tpu_hlo_type_t t3(tpu_dtype_t d, int64_t a, int64_t b, int64_t c) {
  int64_t dims[3] = {a, b, c};
  return tpu_hlo_type_make(d, 3, dims);
}

static tpu_hlo_type_t t4(tpu_dtype_t d, int64_t a, int64_t b, int64_t c, int64_t e) {
  int64_t dims[4] = {a, b, c, e};
  return tpu_hlo_type_make(d, 4, dims);
}

static tpu_hlo_value_t reshape(tpu_hlo_builder_t* b, tpu_hlo_value_t x, int rank, const int64_t* dims) {
  return tpu_emit_reshape(b, x, dims, rank);
}

/* x with dims `from` (rank r) laid into `to` at positions `at` and broadcast. */
static tpu_hlo_value_t place(tpu_hlo_builder_t* b, tpu_hlo_value_t x, tpu_hlo_type_t to, const int* at, int r) {
  tpu_hlo_type_t t = tpu_hlo_value_type(b, x);
  int64_t dims[TPU_HLO_MAX_RANK];
  for (int d = 0; d < to.rank; d++) dims[d] = 1;
  for (int k = 0; k < r; k++) dims[at[k]] = t.dims[k];
  to.dtype = t.dtype;
  return tpu_emit_broadcast_to(b, tpu_emit_reshape(b, x, dims, to.rank), &to);
}

/* Reads the segments: lengths (arg li) or offsets (arg oi), for data of
 * the given sizes split at `axis`. False when neither is usable. */
static bool read_segments(tpu_lower_ctx_t* ctx, int li, int oi, const tpu_hlo_type_t* data, int axis, seg_t* s) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  s->b = b;
  s->O = 1, s->I = 1, s->n = data->dims[axis], s->d = data->dtype;
  for (int k = 0; k < axis; k++) s->O *= data->dims[k];
  for (int k = axis + 1; k < data->rank; k++) s->I *= data->dims[k];
  const tpu_lower_arg_t* L = tpu_lower_arg(ctx, li);
  const tpu_lower_arg_t* F = tpu_lower_arg(ctx, oi);
  const tpu_lower_arg_t* src = L->kind == TPU_ARG_TENSOR ? L : F;
  int si = L->kind == TPU_ARG_TENSOR ? li : oi;
  if (src->kind != TPU_ARG_TENSOR || src->type.rank != axis + 1 ||
      (src->type.dtype != TPU_DTYPE_INT64 && src->type.dtype != TPU_DTYPE_INT32))
    return false;
  int64_t last = src->type.dims[src->type.rank - 1];
  int64_t o2[2] = {s->O, last};
  tpu_hlo_value_t v = tpu_emit_convert(b, reshape(b, tpu_lower_tensor(ctx, si), 2, o2), TPU_DTYPE_INT64);
  if (src == L) {
    s->S = last;
    s->len = v;
    /* exclusive prefix sum along the segments */
    tpu_hlo_value_t inc = tpu_emit_scan(b, v, 1, 0, "stablehlo.add", tpu_emit_binary);
    s->start = tpu_emit_sub(b, inc, v);
  } else {
    if (last < 1) return false;
    s->S = last - 1;
    int64_t st[2] = {0, 0}, lim[2] = {s->O, last - 1}, one[2] = {1, 1}, st1[2] = {0, 1}, lim1[2] = {s->O, last};
    s->start = tpu_emit_slice(b, v, st, lim, one);
    s->len = tpu_emit_sub(b, tpu_emit_slice(b, v, st1, lim1, one), s->start);
  }
  tpu_hlo_type_t mt = t3(TPU_DTYPE_INT64, s->O, s->S, s->n);
  tpu_hlo_value_t p = tpu_emit_iota(b, &mt, 2);
  const int at01[2] = {0, 1};
  tpu_hlo_value_t st = place(b, s->start, mt, at01, 2);
  tpu_hlo_value_t en = tpu_emit_add(b, st, place(b, s->len, mt, at01, 2));
  s->mask = tpu_emit_binary(b, "stablehlo.and", tpu_emit_compare(b, "GE", p, st), tpu_emit_compare(b, "LT", p, en));
  return true;
}

/* x [O, n, I] reduced per segment to [O, S, I]: `op` over the members,
 * `identity` elsewhere. */
static tpu_hlo_value_t per_segment(const seg_t* s, tpu_hlo_value_t x, double identity, const char* op) {
  tpu_hlo_builder_t* b = s->b;
  tpu_hlo_type_t t = t4(tpu_hlo_value_type(b, x).dtype, s->O, s->S, s->n, s->I);
  const int m_at[3] = {0, 1, 2}, x_at[3] = {0, 2, 3};
  tpu_hlo_value_t v = tpu_emit_select(b, place(b, s->mask, t, m_at, 3), place(b, x, t, x_at, 3),
                                      tpu_emit_const_like(b, &t, identity));
  int64_t d2 = 2;
  return tpu_emit_reduce(b, v, tpu_emit_const(b, t.dtype, identity), &d2, 1, op);
}

/* v [O, S, I] (or [O, S] with I = 1 when `rank2`) read back at each data
 * element [O, n, I]; `fill` where the element is in no segment. */
static tpu_hlo_value_t per_element(const seg_t* s, tpu_hlo_value_t v, bool rank2, double fill) {
  tpu_hlo_builder_t* b = s->b;
  tpu_dtype_t d = tpu_hlo_value_type(b, v).dtype;
  tpu_hlo_type_t t = t4(d, s->O, s->S, s->n, s->I);
  const int m_at[3] = {0, 1, 2}, v_at[3] = {0, 1, 3}, v2_at[2] = {0, 1};
  double lowest = tpu_dtype_is_floating(d) ? -__builtin_inf() : -9.2e18;
  tpu_hlo_value_t sel = tpu_emit_select(b, place(b, s->mask, t, m_at, 3),
                                        rank2 ? place(b, v, t, v2_at, 2) : place(b, v, t, v_at, 3),
                                        tpu_emit_const_like(b, &t, lowest));
  int64_t d1 = 1;
  tpu_hlo_value_t r = tpu_emit_reduce(b, sel, tpu_emit_const(b, d, lowest), &d1, 1, "stablehlo.maximum");
  /* in a segment at all */
  tpu_hlo_value_t any = tpu_emit_reduce(b, tpu_emit_convert(b, s->mask, TPU_DTYPE_INT32),
                                        tpu_emit_const(b, TPU_DTYPE_INT32, 0), &d1, 1, "stablehlo.maximum");
  tpu_hlo_type_t et = t3(d, s->O, s->n, s->I);
  const int a_at[2] = {0, 1};
  tpu_hlo_type_t it = et;
  it.dtype = TPU_DTYPE_INT32;
  tpu_hlo_value_t inb = tpu_emit_compare(b, "NE", place(b, any, it, a_at, 2), tpu_emit_const_like(b, &it, 0));
  return tpu_emit_select(b, inb, r, tpu_emit_const_like(b, &et, fill));
}

typedef struct {
  const seg_t* s;
  tpu_hlo_value_t x; /* [O, n, I] */
  bool prod;
} accumulate_t;

/* acc [O, S, I] op= x[:, p, :] where element p is in the segment. */
static void accumulate_step(tpu_hlo_builder_t* b, tpu_hlo_value_t p, tpu_hlo_value_t* st, const void* arg) {
  const accumulate_t* a = arg;
  const seg_t* s = a->s;
  tpu_hlo_value_t z = tpu_emit_const(b, TPU_DTYPE_INT64, 0);
  tpu_hlo_value_t xs[3] = {z, p, z}, ms[3] = {z, z, p};
  int64_t xz[3] = {s->O, 1, s->I}, mz[3] = {s->O, s->S, 1};
  tpu_hlo_type_t t = tpu_hlo_value_type(b, st[0]);
  tpu_hlo_value_t col = tpu_emit_broadcast_to(b, tpu_emit_dynamic_slice(b, a->x, xs, xz), &t);
  tpu_hlo_type_t mt = t;
  mt.dtype = TPU_DTYPE_BOOL;
  tpu_hlo_value_t m = tpu_emit_broadcast_to(b, tpu_emit_dynamic_slice(b, s->mask, ms, mz), &mt);
  st[0] = tpu_emit_select(b, m, a->prod ? tpu_emit_mul(b, st[0], col) : tpu_emit_add(b, st[0], col), st[0]);
}

static tpu_hlo_value_t ones3(tpu_hlo_builder_t* b, tpu_dtype_t d, const seg_t* s) {
  tpu_hlo_type_t t = t3(d, s->O, s->S, s->I);
  return tpu_emit_const_like(b, &t, 1);
}

static tpu_hlo_value_t data3(tpu_lower_ctx_t* ctx, int i, const seg_t* s) {
  int64_t dims[3] = {s->O, s->n, s->I};
  return reshape(s->b, tpu_lower_tensor(ctx, i), 3, dims);
}

static bool reducible(tpu_dtype_t d) {
  return d == TPU_DTYPE_FLOAT32 || d == TPU_DTYPE_FLOAT64 || d == TPU_DTYPE_BFLOAT16 || d == TPU_DTYPE_FLOAT16;
}

static int axis_of(const tpu_lower_arg_t* a, int rank) {
  int64_t ax = a->kind == TPU_ARG_INT ? a->i : 0;
  return (int)(ax < 0 ? ax + rank : ax);
}

/* segment_reduce(data, reduce, *, lengths, indices, offsets, axis, unsafe, initial) */
static tpu_status_t lower_segment_reduce(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  const tpu_lower_arg_t* data = tpu_lower_arg(ctx, 0);
  seg_kind_t k;
  if (data->kind != TPU_ARG_TENSOR || !reducible(data->type.dtype) || !seg_kind(tpu_lower_arg(ctx, 1), &k) ||
      tpu_lower_arg(ctx, 3)->kind == TPU_ARG_TENSOR)
    return tpu_lower_decline(ctx, "segment_reduce of these arguments");
  int axis = axis_of(tpu_lower_arg(ctx, 5), data->type.rank);
  seg_t s;
  tpu_hlo_type_t out = tpu_lower_output_type(ctx, 0);
  if (!read_segments(ctx, 2, 4, &data->type, axis, &s))
    return tpu_lower_decline(ctx, "segment_reduce without lengths or offsets of the data's leading dims");
  if (s.O * s.S * s.I == 0) {
    tpu_lower_set_output(ctx, 0, tpu_emit_const_like(b, &out, 0));
    return NULL;
  }
  /* max and min in float32 for half types (exact either way); sum, mean
   * and prod accumulate in the data's dtype, element after element from
   * the initial value, as CPU's loop rounds them */
  tpu_dtype_t d = data->type.dtype;
  tpu_dtype_t md = (k == SEG_MAX || k == SEG_MIN) && d != TPU_DTYPE_FLOAT64 ? TPU_DTYPE_FLOAT32 : d;
  tpu_hlo_value_t x = tpu_emit_convert(b, data3(ctx, 0, &s), md);
  bool has_init = tpu_lower_arg(ctx, 7)->kind != TPU_ARG_NONE;
  tpu_hlo_type_t rt = t3(md, s.O, s.S, s.I);
  tpu_hlo_value_t init = has_init ? tpu_emit_broadcast_to(b, tpu_emit_convert(b, tpu_emit_convert(b, tpu_lower_scalar(ctx, 7, d), d), md), &rt)
                                  : (tpu_hlo_value_t){-1};
  tpu_hlo_value_t r;
  switch (k) {
    case SEG_MAX:
      r = per_segment(&s, x, -__builtin_inf(), "stablehlo.maximum");
      if (has_init) r = tpu_emit_binary(b, "stablehlo.maximum", init, r);
      break;
    case SEG_MIN:
      r = per_segment(&s, x, __builtin_inf(), "stablehlo.minimum");
      if (has_init) r = tpu_emit_binary(b, "stablehlo.minimum", init, r);
      break;
    default: {
      accumulate_t acc = {&s, x, k == SEG_PROD};
      r = has_init ? init : tpu_emit_const_like(b, &rt, k == SEG_PROD ? 1 : 0);
      tpu_emit_for_loop(b, 0, s.n, 1, &r, 1, accumulate_step, &acc);
      if (k == SEG_MEAN) {
        const int at01[2] = {0, 1};
        tpu_hlo_type_t lt = rt;
        lt.dtype = TPU_DTYPE_INT64;
        tpu_hlo_value_t len = place(b, s.len, lt, at01, 2);
        tpu_hlo_value_t pos = tpu_emit_compare(b, "GT", len, tpu_emit_const_like(b, &lt, 0));
        tpu_hlo_value_t divided = tpu_emit_div(b, r, tpu_emit_convert(b, len, md));
        tpu_hlo_value_t nan = tpu_emit_compare(b, "NE", r, r);
        r = tpu_emit_select(b, tpu_emit_binary(b, "stablehlo.and", pos, tpu_emit_unary(b, "stablehlo.not", nan)),
                            divided, r);
        if (!has_init) r = tpu_emit_select(b, pos, r, tpu_emit_const_like(b, &rt, __builtin_nan("")));
      }
      break;
    }
  }
  tpu_lower_set_output(ctx, 0, tpu_emit_reshape(b, tpu_emit_convert(b, r, d), out.dims, out.rank));
  return NULL;
}

/* _segment_reduce_backward(grad, output, data, reduce, *, lengths,
 * offsets, axis, initial): per data element of a non-empty segment,
 *   sum: grad; mean: grad / length;
 *   max / min: grad where the element is NaN or equals the output, then,
 *     where two or more do, divided by their count if positive (CPU's
 *     kernel divides only the positive ones);
 *   prod: grad * output / element, or for a zero or NaN element grad *
 *     initial * the product of the segment's other elements. */
static tpu_status_t lower_segment_reduce_backward(tpu_lower_ctx_t* ctx) {
  tpu_hlo_builder_t* b = tpu_lower_builder(ctx);
  const tpu_lower_arg_t* data = tpu_lower_arg(ctx, 2);
  seg_kind_t k;
  if (data->kind != TPU_ARG_TENSOR || !reducible(data->type.dtype) || !seg_kind(tpu_lower_arg(ctx, 3), &k) ||
      tpu_lower_arg(ctx, 0)->kind != TPU_ARG_TENSOR || tpu_lower_arg(ctx, 1)->kind != TPU_ARG_TENSOR ||
      tpu_lower_arg(ctx, 0)->type.dtype != data->type.dtype)
    return tpu_lower_decline(ctx, "segment_reduce backward of these arguments");
  int axis = axis_of(tpu_lower_arg(ctx, 6), data->type.rank);
  seg_t s;
  tpu_hlo_type_t out = tpu_lower_output_type(ctx, 0);
  if (!read_segments(ctx, 4, 5, &data->type, axis, &s))
    return tpu_lower_decline(ctx, "segment_reduce backward without lengths or offsets");
  if (s.O * s.n * s.I == 0 || s.S == 0) {
    tpu_lower_set_output(ctx, 0, tpu_emit_const_like(b, &out, 0));
    return NULL;
  }
  tpu_dtype_t d = data->type.dtype, md = d == TPU_DTYPE_FLOAT64 ? d : TPU_DTYPE_FLOAT32;
  int64_t sd[3] = {s.O, s.S, s.I};
  tpu_hlo_value_t x = tpu_emit_convert(b, data3(ctx, 2, &s), md);
  tpu_hlo_value_t g = tpu_emit_convert(b, reshape(b, tpu_lower_tensor(ctx, 0), 3, sd), md);
  tpu_hlo_value_t o = tpu_emit_convert(b, reshape(b, tpu_lower_tensor(ctx, 1), 3, sd), md);
  tpu_hlo_type_t et = t3(md, s.O, s.n, s.I);
  tpu_hlo_value_t ge = per_element(&s, g, false, 0);
  tpu_hlo_value_t zero = tpu_emit_const_like(b, &et, 0);
  tpu_hlo_value_t r;
  switch (k) {
    case SEG_SUM:
      r = ge;
      break;
    case SEG_MEAN: {
      const int at01[2] = {0, 1};
      tpu_hlo_value_t lenf = tpu_emit_convert(b, place(b, s.len, t3(TPU_DTYPE_INT64, s.O, s.S, s.I), at01, 2), md);
      r = per_element(&s, tpu_emit_div(b, g, lenf), false, 0);
      break;
    }
    case SEG_MAX:
    case SEG_MIN: {
      tpu_hlo_value_t oe = per_element(&s, o, false, 0);
      tpu_hlo_value_t hit = tpu_emit_binary(b, "stablehlo.or", tpu_emit_compare(b, "NE", x, x),
                                            tpu_emit_compare(b, "EQ", x, oe));
      /* elements in no segment never hit */
      tpu_hlo_value_t member = per_element(&s, ones3(b, md, &s), false, 0);
      hit = tpu_emit_binary(b, "stablehlo.and", hit, tpu_emit_compare(b, "NE", member, zero));
      tpu_hlo_value_t gi = tpu_emit_select(b, hit, ge, zero);
      tpu_hlo_value_t count = per_element(&s, per_segment(&s, tpu_emit_convert(b, hit, md), 0, "stablehlo.add"), false, 0);
      tpu_hlo_value_t divide = tpu_emit_binary(b, "stablehlo.and", tpu_emit_compare(b, "GE", count, tpu_emit_const_like(b, &et, 2)),
                                               tpu_emit_compare(b, "GT", gi, zero));
      r = tpu_emit_select(b, divide, tpu_emit_div(b, gi, count), gi);
      break;
    }
    default: {  /* prod */
      tpu_hlo_value_t oe = per_element(&s, o, false, 0);
      tpu_hlo_value_t plain = tpu_emit_div(b, tpu_emit_mul(b, ge, oe), x);
      /* the product of the other members of each element's segment */
      tpu_hlo_type_t qt = t4(md, s.O, s.n, s.n, s.I), qi = qt;
      qi.dtype = TPU_DTYPE_INT64;
      /* segment index of each element (S where none) */
      tpu_hlo_type_t mi = t3(TPU_DTYPE_INT64, s.O, s.S, s.n);
      tpu_hlo_value_t sidx = tpu_emit_select(b, s.mask, tpu_emit_iota(b, &mi, 1), tpu_emit_const_like(b, &mi, (double)s.S));
      int64_t d1 = 1;
      tpu_hlo_value_t seg = tpu_emit_reduce(b, sidx, tpu_emit_const(b, TPU_DTYPE_INT64, (double)s.S), &d1, 1,
                                            "stablehlo.minimum"); /* [O, n] */
      const int p_at[2] = {0, 1}, q_at[2] = {0, 2};
      tpu_hlo_value_t same = tpu_emit_binary(
          b, "stablehlo.and",
          tpu_emit_compare(b, "EQ", place(b, seg, qi, p_at, 2), place(b, seg, qi, q_at, 2)),
          tpu_emit_compare(b, "NE", tpu_emit_iota(b, &qi, 1), tpu_emit_iota(b, &qi, 2)));
      const int x_at[3] = {0, 2, 3};
      tpu_hlo_value_t others = tpu_emit_select(b, same, place(b, x, qt, x_at, 3), tpu_emit_const_like(b, &qt, 1));
      int64_t d2 = 2;
      tpu_hlo_value_t excl = tpu_emit_reduce(b, others, tpu_emit_const(b, md, 1), &d2, 1, "stablehlo.multiply");
      if (tpu_lower_arg(ctx, 7)->kind != TPU_ARG_NONE)
        excl = tpu_emit_mul(b, tpu_emit_broadcast_to(b, tpu_emit_convert(b, tpu_emit_convert(b, tpu_lower_scalar(ctx, 7, d), d), md), &et), excl);
      tpu_hlo_value_t special = tpu_emit_binary(b, "stablehlo.or", tpu_emit_compare(b, "NE", x, x),
                                                tpu_emit_compare(b, "EQ", x, zero));
      r = tpu_emit_select(b, special, tpu_emit_mul(b, ge, excl), plain);
      tpu_hlo_value_t member = per_element(&s, ones3(b, md, &s), false, 0);
      r = tpu_emit_select(b, tpu_emit_compare(b, "NE", member, zero), r, zero);
      break;
    }
  }
  tpu_lower_set_output(ctx, 0, tpu_emit_reshape(b, tpu_emit_convert(b, r, d), out.dims, out.rank));
  return NULL;
}

const tpu_lowering_t tpu_lowerings_segment[] = {
    {"segment_reduce", lower_segment_reduce, 0},
    {"_segment_reduce_backward", lower_segment_reduce_backward, 0},
};
const size_t tpu_lowerings_segment_count = sizeof tpu_lowerings_segment / sizeof tpu_lowerings_segment[0];
