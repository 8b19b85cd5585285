/* fractional family of the lowering table (see lowering.h):
 * fractional_max_pool2d / 3d and their backward, as CPU's kernels
 * (FractionalMaxPool2d.cpp / 3d.cpp) compute them.
 *
 * The window starts along each dim come from that plane's random sample u
 * (a run-time value): alpha = (in - pool) / (out - 1) in the input dtype,
 * start_i = int((i + u) alpha) - int(u alpha), the last one in - pool; the
 * samples pair with dims as CPU reads them (2-d: [0] is W, [1] is H; 3-d:
 * [0] T, [1] H, [2] W). Each output gathers its pool window (the plane
 * read as [N*C, P]) and keeps, in CPU's order (outer dim first), the first
 * maximum, or the last NaN; its index is the flat position in the plane.
 * The backward adds each output's gradient at its index. */
#include <string.h>

#include "emit.h"
#include "lowering.h"

#define MAX_WINDOW 4096

typedef struct {
  tpu_hlo_builder_t* b;
  int nd;
  bool batched;
  int64_t N, C, P, Q, K;
  int64_t in[3], out[3], pool[3];
} fp_t;

static bool read_ints3(const tpu_lower_arg_t* a, int nd, int64_t* v) {
  if (a->kind != TPU_ARG_INTS || (a->num_ints != nd && a->num_ints != 1)) return false;
  for (int d = 0; d < nd; d++) v[d] = a->ints[a->num_ints == 1 ? 0 : d];
  return true;
}

static tpu_status_t fp_read(tpu_lower_ctx_t* ctx, int self_i, int kernel_i, int out_i, int nd, fp_t* f) {
  const tpu_lower_arg_t* x = tpu_lower_arg(ctx, self_i);
  if (x->kind != TPU_ARG_TENSOR || !tpu_dtype_is_floating(x->type.dtype) ||
      (x->type.rank != nd + 1 && x->type.rank != nd + 2))
    return tpu_lower_decline(ctx, "fractional_max_pool of this input");
  f->b = tpu_lower_builder(ctx);
  f->nd = nd;
  f->batched = x->type.rank == nd + 2;
  int s0 = f->batched ? 2 : 1;
  f->N = f->batched ? x->type.dims[0] : 1;
  f->C = x->type.dims[s0 - 1];
  if (!read_ints3(tpu_lower_arg(ctx, kernel_i), nd, f->pool) || !read_ints3(tpu_lower_arg(ctx, out_i), nd, f->out))
    return tpu_lower_decline(ctx, "fractional_max_pool sizes");
  f->P = 1, f->Q = 1, f->K = 1;
  for (int d = 0; d < nd; d++) {
    f->in[d] = x->type.dims[s0 + d];
    if (f->pool[d] < 1 || f->pool[d] > f->in[d] || f->out[d] < 1 || f->out[d] + f->pool[d] - 1 > f->in[d])
      return tpu_lower_decline(ctx, "fractional_max_pool sizes");  /* the meta kernel's checks raise */
    f->P *= f->in[d], f->Q *= f->out[d], f->K *= f->pool[d];
  }
  if (f->K > MAX_WINDOW) return tpu_lower_decline(ctx, "fractional_max_pool window too large");
  return NULL;
}

/* The window starts along dim d for every plane: int64 [N*C, out]. */
static tpu_hlo_value_t starts(const fp_t* f, tpu_hlo_value_t samples, int d, tpu_dtype_t dt) {
  tpu_hlo_builder_t* b = f->b;
  int64_t M = f->N * f->C, o = f->out[d];
  int si = f->nd == 2 ? (d == 0 ? 1 : 0) : d;  /* which sample this dim reads */
  tpu_hlo_value_t u = tpu_emit_slice(b, samples, (int64_t[]){0, si}, (int64_t[]){M, si + 1}, (int64_t[]){1, 1});
  tpu_hlo_type_t ut = tpu_hlo_type_make(dt, 2, (int64_t[]){M, o});
  tpu_hlo_type_t it = ut;
  it.dtype = TPU_DTYPE_INT64;
  u = tpu_emit_broadcast_to(b, u, &ut);
  tpu_hlo_value_t last = tpu_emit_const_like(b, &it, (double)(f->in[d] - f->pool[d]));
  if (o == 1) return last;
  /* alpha: static_cast<scalar_t>(in - pool) / static_cast<scalar_t>(out - 1) */
  tpu_hlo_value_t alpha = tpu_emit_div(b, tpu_emit_const_like(b, &ut, (double)(f->in[d] - f->pool[d])),
                                       tpu_emit_const_like(b, &ut, (double)(o - 1)));
  tpu_hlo_value_t i = tpu_emit_convert(b, tpu_emit_iota(b, &it, 1), dt);
  tpu_hlo_value_t a = tpu_emit_convert(b, tpu_emit_mul(b, tpu_emit_add(b, i, u), alpha), TPU_DTYPE_INT32);
  tpu_hlo_value_t c = tpu_emit_convert(b, tpu_emit_mul(b, u, alpha), TPU_DTYPE_INT32);
  tpu_hlo_value_t seq = tpu_emit_convert(b, tpu_emit_sub(b, a, c), TPU_DTYPE_INT64);
  return tpu_emit_select(b, tpu_emit_compare(b, "EQ", tpu_emit_iota(b, &it, 1), tpu_emit_const_like(b, &it, (double)(o - 1))),
                         last, seq);
}

/* fractional_max_pool{2,3}d(self, kernel_size, output_size, random_samples);
 * data: the dimension count. */
static tpu_status_t lower_fractional_pool(tpu_lower_ctx_t* ctx) {
  int nd = (int)tpu_lower_data(ctx);
  fp_t f;
  tpu_status_t st = fp_read(ctx, 0, 1, 2, nd, &f);
  if (st) return st;
  const tpu_lower_arg_t* rs = tpu_lower_arg(ctx, 3);
  tpu_dtype_t dt = tpu_lower_arg(ctx, 0)->type.dtype;
  if (rs->kind != TPU_ARG_TENSOR || rs->type.dtype != dt) return tpu_lower_decline(ctx, "random_samples");
  tpu_hlo_builder_t* b = f.b;
  int64_t M = f.N * f.C;
  tpu_hlo_type_t vt = tpu_lower_output_type(ctx, 0), it_out = tpu_lower_output_type(ctx, 1);
  if (M * f.Q == 0) {
    tpu_lower_set_output(ctx, 0, tpu_emit_const_like(b, &vt, 0));
    tpu_lower_set_output(ctx, 1, tpu_emit_const_like(b, &it_out, 0));
    return NULL;
  }
  tpu_hlo_value_t x = tpu_emit_reshape(b, tpu_lower_tensor(ctx, 0), (int64_t[]){M * f.P}, 1);
  tpu_hlo_value_t samples = tpu_emit_reshape(b, tpu_lower_tensor(ctx, 3), (int64_t[]){M, nd}, 2);
  /* window start index per output: sum_d start_d(o_d) * stride_d, [M, Q] */
  tpu_hlo_type_t qt = tpu_hlo_type_make(TPU_DTYPE_INT64, 2, (int64_t[]){M, f.Q});
  tpu_hlo_value_t base = tpu_emit_const_like(b, &qt, 0);
  int64_t stride = f.P, ostride = f.Q;
  for (int d = 0; d < nd; d++) {
    stride /= f.in[d];
    ostride /= f.out[d];
    tpu_hlo_value_t s = starts(&f, samples, d, dt); /* [M, out_d] */
    /* spread over Q: output q's coordinate along d is (q / ostride) % out_d */
    tpu_hlo_value_t q = tpu_emit_iota(b, &qt, 1);
    tpu_hlo_value_t od = tpu_emit_binary(b, "stablehlo.remainder", tpu_emit_div(b, q, tpu_emit_const_like(b, &qt, (double)ostride)),
                                         tpu_emit_const_like(b, &qt, (double)f.out[d]));
    tpu_hlo_value_t m = tpu_emit_iota(b, &qt, 0);
    tpu_hlo_value_t pair[2] = {tpu_emit_reshape(b, m, (int64_t[]){M, f.Q, 1}, 3), tpu_emit_reshape(b, od, (int64_t[]){M, f.Q, 1}, 3)};
    tpu_hlo_value_t ind = tpu_hlo_op(b, "stablehlo.concatenate", pair, 2,
                                     tpu_hlo_type_make(TPU_DTYPE_INT64, 3, (int64_t[]){M, f.Q, 2}), "dimension = 2 : i64");
    int64_t coll[2] = {0, 1}, sizes[2] = {1, 1};
    tpu_hlo_value_t sd = tpu_emit_gather(b, s, ind, qt, NULL, 0, coll, coll, 2, sizes);
    base = tpu_emit_add(b, base, tpu_emit_mul(b, sd, tpu_emit_const_like(b, &qt, (double)stride)));
  }
  tpu_hlo_value_t plane0 = tpu_emit_mul(b, tpu_emit_iota(b, &qt, 0), tpu_emit_const_like(b, &qt, (double)f.P));
  /* the window in CPU's order: outer dim first */
  tpu_hlo_type_t dtq = tpu_hlo_type_make(dt, 2, (int64_t[]){M, f.Q});
  tpu_hlo_value_t best = tpu_emit_const_like(b, &dtq, -__builtin_inf()), best_i = base;
  for (int64_t k = 0; k < f.K; k++) {
    int64_t off = 0, rem = k, kstride = f.K, pstride = f.P;
    for (int d = 0; d < nd; d++) {
      kstride /= f.pool[d];
      pstride /= f.in[d];
      off += (rem / kstride) * pstride;
      rem %= kstride;
    }
    tpu_hlo_value_t pos = tpu_emit_add(b, base, tpu_emit_const_like(b, &qt, (double)off));
    tpu_hlo_value_t flat = tpu_emit_reshape(b, tpu_emit_add(b, plane0, pos), (int64_t[]){M * f.Q, 1}, 2);
    int64_t zero = 0, one = 1;
    tpu_hlo_value_t v = tpu_emit_gather(b, x, flat, tpu_hlo_type_make(dt, 1, (int64_t[]){M * f.Q}), NULL, 0, &zero, &zero,
                                        1, &one);
    v = tpu_emit_reshape(b, v, (int64_t[]){M, f.Q}, 2);
    tpu_hlo_value_t take = tpu_emit_binary(b, "stablehlo.or", tpu_emit_compare(b, "GT", v, best),
                                           tpu_emit_compare(b, "NE", v, v));
    best = tpu_emit_select(b, take, v, best);
    best_i = tpu_emit_select(b, take, pos, best_i);
  }
  tpu_lower_set_output(ctx, 0, tpu_emit_reshape(b, best, vt.dims, vt.rank));
  tpu_lower_set_output(ctx, 1, tpu_emit_convert(b, tpu_emit_reshape(b, best_i, it_out.dims, it_out.rank), it_out.dtype));
  return NULL;
}

/* fractional_max_pool{2,3}d_backward(grad_output, self, kernel_size,
 * output_size, indices); data: the dimension count. */
static tpu_status_t lower_fractional_pool_backward(tpu_lower_ctx_t* ctx) {
  int nd = (int)tpu_lower_data(ctx);
  fp_t f;
  tpu_status_t st = fp_read(ctx, 1, 2, 3, nd, &f);
  if (st) return st;
  const tpu_lower_arg_t* ix = tpu_lower_arg(ctx, 4);
  if (tpu_lower_arg(ctx, 0)->kind != TPU_ARG_TENSOR || ix->kind != TPU_ARG_TENSOR)
    return tpu_lower_decline(ctx, "fractional_max_pool backward operands");
  tpu_hlo_builder_t* b = f.b;
  tpu_hlo_type_t out = tpu_lower_output_type(ctx, 0);
  int64_t M = f.N * f.C;
  if (M * f.Q == 0) {
    tpu_lower_set_output(ctx, 0, tpu_emit_const_like(b, &out, 0));
    return NULL;
  }
  tpu_dtype_t md = out.dtype == TPU_DTYPE_FLOAT64 ? TPU_DTYPE_FLOAT64 : TPU_DTYPE_FLOAT32;
  tpu_hlo_type_t qt = tpu_hlo_type_make(TPU_DTYPE_INT64, 2, (int64_t[]){M, f.Q});
  tpu_hlo_value_t idx = tpu_emit_reshape(b, tpu_emit_convert(b, tpu_lower_tensor(ctx, 4), TPU_DTYPE_INT64),
                                         (int64_t[]){M, f.Q}, 2);
  tpu_hlo_value_t flat = tpu_emit_add(b, idx, tpu_emit_mul(b, tpu_emit_iota(b, &qt, 0), tpu_emit_const_like(b, &qt, (double)f.P)));
  tpu_hlo_value_t g = tpu_emit_reshape(b, tpu_emit_convert(b, tpu_lower_tensor(ctx, 0), md), (int64_t[]){M * f.Q}, 1);
  tpu_hlo_type_t pt = tpu_hlo_type_make(md, 1, (int64_t[]){M * f.P});
  int64_t zero = 0;
  tpu_hlo_value_t r = tpu_emit_scatter(b, tpu_emit_const_like(b, &pt, 0),
                                       tpu_emit_reshape(b, flat, (int64_t[]){M * f.Q, 1}, 2), g, NULL, 0, &zero, &zero, 1,
                                       "stablehlo.add");
  tpu_lower_set_output(ctx, 0, tpu_emit_convert(b, tpu_emit_reshape(b, r, out.dims, out.rank), out.dtype));
  return NULL;
}

const tpu_lowering_t tpu_lowerings_fractional[] = {
    {"fractional_max_pool2d", lower_fractional_pool, 0, 2},
    {"fractional_max_pool3d", lower_fractional_pool, 0, 3},
    {"fractional_max_pool2d_backward", lower_fractional_pool_backward, 0, 2},
    {"fractional_max_pool3d_backward", lower_fractional_pool_backward, 0, 3},
};
const size_t tpu_lowerings_fractional_count = sizeof tpu_lowerings_fractional / sizeof tpu_lowerings_fractional[0];
