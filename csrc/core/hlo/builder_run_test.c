/* Programs made with the builder, compiled and run on the default plugin,
 * with results checked against values computed here. This is what proves
 * the printed syntax (every constant form included) is what the plugin's
 * parser accepts and means. */
#include <float.h>
#include <math.h>
#include <stdint.h>

#include "../pjrt/buffer.h"
#include "../pjrt/client.h"
#include "../pjrt/executable.h"
#include "../pjrt/plugin.h"
#include "../testing.h"
#include "builder.h"
#include "literal.h"

static tpu_plugin_t* g_plugin;
static tpu_client_t* g_client;

static tpu_client_t* client(void) {
  if (g_client) return g_client;
  char path[4096];
  tpu_status_t s = tpu_plugin_resolve_path(NULL, path, sizeof path);
  if (!s) s = tpu_plugin_load(path, &g_plugin);
  tpu_client_options_t options = {.cpu_device_count = 1};
  if (!s) s = tpu_client_create(g_plugin, &options, &g_client);
  if (s) {
    fprintf(stderr, "no client: %s\n", tpu_status_message(s));
    tpu_status_free(s);
  }
  return g_client;
}

static tpu_hlo_type_t t1(tpu_dtype_t dtype, int64_t d0) {
  return tpu_hlo_type_make(dtype, 1, &d0);
}
static tpu_hlo_type_t t2(tpu_dtype_t dtype, int64_t d0, int64_t d1) {
  int64_t dims[2] = {d0, d1};
  return tpu_hlo_type_make(dtype, 2, dims);
}
static tpu_hlo_type_t scalar(tpu_dtype_t dtype) {
  return tpu_hlo_type_scalar(dtype);
}

static size_t type_bytes(const tpu_hlo_type_t* type) {
  size_t n = tpu_dtype_size(type->dtype);
  for (int i = 0; i < type->rank; i++) n *= (size_t)type->dims[i];
  return n;
}

/* Finishes b, compiles, uploads `args` (host data of the types of @main's
 * arguments), runs and downloads every output into outs[i] (malloc'd, the
 * caller frees). Prints the reason and returns false on any failure. */
static bool run(tpu_hlo_builder_t* b, const tpu_hlo_type_t* arg_types,
                const void* const* args, int nargs, void** outs, int nouts) {
  for (int i = 0; i < nouts; i++) outs[i] = NULL;
  char* text = NULL;
  size_t len = 0;
  tpu_executable_t* exe = NULL;
  tpu_buffer_t* in[8] = {0};
  tpu_buffer_t** res = calloc((size_t)nouts + 1, sizeof *res);
  bool ok = false;
  tpu_status_t s = tpu_hlo_builder_finish(b, &text, &len);
  if (!s && !client()) goto done;
  if (!s) s = tpu_executable_compile(client(), text, len, NULL, &exe);
  if (s) goto done;
  if (tpu_executable_num_outputs(exe) != nouts || nargs > 8 || !res) {
    fprintf(stderr, "program has %d outputs, test expects %d\n",
            tpu_executable_num_outputs(exe), nouts);
    goto done;
  }
  for (int i = 0; i < nargs && !s; i++) {
    s = tpu_buffer_from_host(client(), 0, args[i], arg_types[i].dtype,
                             arg_types[i].dims, arg_types[i].rank, NULL,
                             &in[i]);
  }
  if (!s) s = tpu_executable_execute(exe, 0, in, nargs, NULL, res, NULL);
  for (int i = 0; i < nouts && !s; i++) {
    size_t nbytes = tpu_buffer_nbytes(res[i]);
    outs[i] = malloc(nbytes ? nbytes : 1);
    if (!outs[i]) break;
    s = tpu_buffer_to_host(res[i], outs[i], nbytes);
  }
  ok = !s;
done:
  if (s) {
    fprintf(stderr, "run failed: %s\n", tpu_status_message(s));
    if (text) fprintf(stderr, "program:\n%s", text);
    tpu_status_free(s);
  }
  for (int i = 0; res && i < nouts; i++) tpu_buffer_destroy(res[i]);
  free(res);
  for (int i = 0; i < 8; i++) tpu_buffer_destroy(in[i]);
  tpu_executable_destroy(exe);
  free(text);
  if (!ok) {
    for (int i = 0; i < nouts; i++) {
      free(outs[i]);
      outs[i] = NULL;
    }
  }
  return ok;
}

static void free_all(void** outs, int n) {
  for (int i = 0; i < n; i++) free(outs[i]);
}

/* ---- arithmetic --------------------------------------------------------- */

static void test_add(void) {
  tpu_hlo_builder_t* b;
  CHECK_OK(tpu_hlo_builder_create(&b));
  tpu_hlo_type_t t = t2(TPU_DTYPE_FLOAT32, 2, 3);
  tpu_hlo_type_t types[2] = {t, t};
  tpu_hlo_value_t x[2] = {tpu_hlo_arg(b, t, NULL), tpu_hlo_arg(b, t, NULL)};
  tpu_hlo_value_t sum = tpu_hlo_op(b, "stablehlo.add", x, 2, t, NULL);
  tpu_hlo_return(b, &sum, 1);
  const float a[6] = {1.5f, -2.0f, 3.25f, 1e30f, -0.0f, 0.1f};
  const float c[6] = {0.25f, 2.0f, -1.0f, 1e30f, -0.0f, 0.2f};
  const void* args[2] = {a, c};
  void* out;
  bool ran = run(b, types, args, 2, &out, 1);
  tpu_hlo_builder_destroy(b);
  CHECK(ran);
  const float* got = out;
  for (int i = 0; i < 6; i++) {
    float want = a[i] + c[i];
    if (memcmp(&got[i], &want, sizeof want) != 0) {
      fprintf(stderr, "add[%d] = %a, want %a\n", i, got[i], want);
      tpu_test_failures_++;
    }
  }
  free(out);
}

static void test_dot_general(void) {
  tpu_hlo_builder_t* b;
  CHECK_OK(tpu_hlo_builder_create(&b));
  tpu_hlo_type_t types[2] = {t2(TPU_DTYPE_FLOAT32, 2, 3),
                             t2(TPU_DTYPE_FLOAT32, 3, 4)};
  tpu_hlo_value_t x[2] = {tpu_hlo_arg(b, types[0], NULL),
                          tpu_hlo_arg(b, types[1], NULL)};
  tpu_hlo_value_t prod = tpu_hlo_op(
      b, "stablehlo.dot_general", x, 2, t2(TPU_DTYPE_FLOAT32, 2, 4),
      "dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = "
      "[1], rhs_contracting_dimensions = [0]>");
  tpu_hlo_return(b, &prod, 1);
  float l[6], r[12];
  for (int i = 0; i < 6; i++) l[i] = (float)(i - 2) * 0.5f;
  for (int i = 0; i < 12; i++) r[i] = (float)(i % 5) - 1.75f;
  const void* args[2] = {l, r};
  void* out;
  bool ran = run(b, types, args, 2, &out, 1);
  tpu_hlo_builder_destroy(b);
  CHECK(ran);
  const float* got = out;
  for (int i = 0; i < 2; i++) {
    for (int j = 0; j < 4; j++) {
      double want = 0;
      for (int k = 0; k < 3; k++) want += (double)l[i * 3 + k] * r[k * 4 + j];
      /* Small dyadic inputs: every product and sum is exact in f32. */
      if (got[i * 4 + j] != (float)want) {
        fprintf(stderr, "dot[%d][%d] = %g, want %g\n", i, j, got[i * 4 + j],
                want);
        tpu_test_failures_++;
      }
    }
  }
  free(out);
}

/* Emits a scalar-add reduce of `in` over `dim` starting from 0. */
static tpu_hlo_value_t reduce_sum(tpu_hlo_builder_t* b, tpu_hlo_value_t in,
                                  tpu_hlo_value_t zero, int dim,
                                  tpu_hlo_type_t out) {
  tpu_hlo_type_t f = scalar(TPU_DTYPE_FLOAT32);
  tpu_hlo_value_t ops[2] = {in, zero};
  char attrs[64];
  snprintf(attrs, sizeof attrs, "dimensions = array<i64: %d>", dim);
  tpu_hlo_region_op_begin(b, "stablehlo.reduce", ops, 2, &out, 1, attrs);
  tpu_hlo_type_t ff[2] = {f, f};
  tpu_hlo_value_t xy[2];
  tpu_hlo_block_begin(b, ff, 2, xy);
  tpu_hlo_value_t s = tpu_hlo_op(b, "stablehlo.add", xy, 2, f, NULL);
  tpu_hlo_block_return(b, &s, 1);
  tpu_hlo_value_t result;
  tpu_hlo_region_op_end(b, &result);
  return result;
}

static void test_reduce_sum(void) {
  tpu_hlo_builder_t* b;
  CHECK_OK(tpu_hlo_builder_create(&b));
  tpu_hlo_type_t t = t2(TPU_DTYPE_FLOAT32, 2, 3);
  tpu_hlo_value_t x = tpu_hlo_arg(b, t, NULL);
  tpu_hlo_value_t zero = tpu_hlo_constant_float(b, scalar(TPU_DTYPE_FLOAT32), 0);
  tpu_hlo_value_t rows = reduce_sum(b, x, zero, 1, t1(TPU_DTYPE_FLOAT32, 2));
  tpu_hlo_value_t cols = reduce_sum(b, x, zero, 0, t1(TPU_DTYPE_FLOAT32, 3));
  tpu_hlo_value_t rets[2] = {rows, cols};
  tpu_hlo_return(b, rets, 2);
  const float a[6] = {1, 2, 3, 4.5f, -5, 6.25f};
  const void* args[1] = {a};
  void* out[2];
  bool ran = run(b, &t, args, 1, out, 2);
  tpu_hlo_builder_destroy(b);
  CHECK(ran);
  const float *r = out[0], *c = out[1];
  bool ok = r[0] == 6 && r[1] == 5.75f && c[0] == 5.5f && c[1] == -3 &&
            c[2] == 9.25f;
  if (!ok) {
    fprintf(stderr, "rows %g %g cols %g %g %g\n", r[0], r[1], c[0], c[1],
            c[2]);
  }
  free_all(out, 2);
  CHECK(ok);
}

static void test_compare_select(void) {
  tpu_hlo_builder_t* b;
  CHECK_OK(tpu_hlo_builder_create(&b));
  tpu_hlo_type_t t = t1(TPU_DTYPE_FLOAT32, 5);
  tpu_hlo_type_t types[2] = {t, t};
  tpu_hlo_value_t x[2] = {tpu_hlo_arg(b, t, NULL), tpu_hlo_arg(b, t, NULL)};
  tpu_hlo_value_t less = tpu_hlo_op(
      b, "stablehlo.compare", x, 2, t1(TPU_DTYPE_BOOL, 5),
      "comparison_direction = #stablehlo<comparison_direction LT>, "
      "compare_type = #stablehlo<comparison_type FLOAT>");
  tpu_hlo_value_t sel_in[3] = {less, x[0], x[1]};
  tpu_hlo_value_t smaller = tpu_hlo_op(b, "stablehlo.select", sel_in, 3, t, NULL);
  tpu_hlo_value_t rets[2] = {smaller, less};
  tpu_hlo_return(b, rets, 2);
  const float a[5] = {1, 5, -3, 2, NAN};
  const float c[5] = {2, 4, -3, -INFINITY, 0};
  const void* args[2] = {a, c};
  void* out[2];
  bool ran = run(b, types, args, 2, out, 2);
  tpu_hlo_builder_destroy(b);
  CHECK(ran);
  const float* got = out[0];
  const uint8_t* mask = out[1];
  for (int i = 0; i < 5; i++) {
    bool lt = a[i] < c[i];
    float want = lt ? a[i] : c[i];
    if (mask[i] != (lt ? 1 : 0) || memcmp(&got[i], &want, sizeof want) != 0) {
      fprintf(stderr, "select[%d]: mask %d got %g want %d %g\n", i, mask[i],
              got[i], lt, want);
      tpu_test_failures_++;
    }
  }
  free_all(out, 2);
}

/* sort (multi-result region op) feeding a while loop with a tuple state
 * whose body holds a reduce: nested regions, %N#i names, block arguments. */
static void test_sort_and_nested_while(void) {
  tpu_hlo_builder_t* b;
  CHECK_OK(tpu_hlo_builder_create(&b));
  tpu_hlo_type_t f = scalar(TPU_DTYPE_FLOAT32), i32 = scalar(TPU_DTYPE_INT32);
  tpu_hlo_type_t vf = t1(TPU_DTYPE_FLOAT32, 4), vi = t1(TPU_DTYPE_INT32, 4);
  tpu_hlo_type_t types[2] = {vf, vi};
  tpu_hlo_value_t x[2] = {tpu_hlo_arg(b, vf, NULL), tpu_hlo_arg(b, vi, NULL)};
  tpu_hlo_region_op_begin(b, "stablehlo.sort", x, 2, types, 2,
                          "dimension = 0 : i64, is_stable = true");
  tpu_hlo_type_t cmp_types[4] = {f, f, i32, i32};
  tpu_hlo_value_t c[4];
  tpu_hlo_block_begin(b, cmp_types, 4, c);
  tpu_hlo_value_t lt =
      tpu_hlo_op(b, "stablehlo.compare", c, 2, scalar(TPU_DTYPE_BOOL),
                 "comparison_direction = #stablehlo<comparison_direction LT>");
  tpu_hlo_block_return(b, &lt, 1);
  tpu_hlo_value_t sorted[2];
  tpu_hlo_region_op_end(b, sorted);

  /* while (i < 3) { v = broadcast(sum(v)) + v; i = i + 1 } */
  tpu_hlo_value_t zero = tpu_hlo_constant_float(b, f, 0.0);
  tpu_hlo_value_t one = tpu_hlo_constant_int(b, i32, 1);
  tpu_hlo_value_t three = tpu_hlo_constant_int(b, i32, 3);
  tpu_hlo_value_t init[2] = {tpu_hlo_constant_int(b, i32, 0), sorted[0]};
  tpu_hlo_type_t state[2] = {i32, vf};
  tpu_hlo_region_op_begin(b, "stablehlo.while", init, 2, state, 2, NULL);
  tpu_hlo_value_t cs[2];
  tpu_hlo_block_begin(b, state, 2, cs);
  tpu_hlo_value_t cmp_in[2] = {cs[0], three};
  tpu_hlo_value_t go =
      tpu_hlo_op(b, "stablehlo.compare", cmp_in, 2, scalar(TPU_DTYPE_BOOL),
                 "comparison_direction = #stablehlo<comparison_direction LT>");
  tpu_hlo_block_return(b, &go, 1);
  tpu_hlo_value_t bs[2];
  tpu_hlo_block_begin(b, state, 2, bs);
  tpu_hlo_value_t total = reduce_sum(b, bs[1], zero, 0, f);
  tpu_hlo_value_t spread = tpu_hlo_op(b, "stablehlo.broadcast_in_dim", &total,
                                      1, vf, "broadcast_dimensions = array<i64>");
  tpu_hlo_value_t add_in[2] = {spread, bs[1]};
  tpu_hlo_value_t next_v = tpu_hlo_op(b, "stablehlo.add", add_in, 2, vf, NULL);
  tpu_hlo_value_t inc_in[2] = {bs[0], one};
  tpu_hlo_value_t next_i = tpu_hlo_op(b, "stablehlo.add", inc_in, 2, i32, NULL);
  tpu_hlo_value_t next[2] = {next_i, next_v};
  tpu_hlo_block_return(b, next, 2);
  tpu_hlo_value_t loop[2];
  tpu_hlo_region_op_end(b, loop);
  tpu_hlo_value_t rets[3] = {sorted[1], loop[0], loop[1]};
  tpu_hlo_return(b, rets, 3);

  const float keys[4] = {3, -1, 2, 0.5f};
  const int32_t vals[4] = {10, 11, 12, 13};
  const void* args[2] = {keys, vals};
  void* out[3];
  bool ran = run(b, types, args, 2, out, 3);
  tpu_hlo_builder_destroy(b);
  CHECK(ran);
  const int32_t* perm = out[0];
  const int32_t* count = out[1];
  const float* v = out[2];
  float want[4] = {-1, 0.5f, 2, 3};
  for (int it = 0; it < 3; it++) {
    float s = want[0] + want[1] + want[2] + want[3];
    for (int k = 0; k < 4; k++) want[k] += s;
  }
  bool ok = perm[0] == 11 && perm[1] == 13 && perm[2] == 12 &&
            perm[3] == 10 && *count == 3;
  for (int k = 0; k < 4; k++) ok = ok && v[k] == want[k];
  if (!ok) {
    fprintf(stderr, "perm %d %d %d %d count %d v %g %g %g %g\n", perm[0],
            perm[1], perm[2], perm[3], *count, v[0], v[1], v[2], v[3]);
  }
  free_all(out, 3);
  CHECK(ok);
}

/* ---- constants round-trip bit-exactly ----------------------------------- */

typedef struct {
  tpu_hlo_type_t type;
  uint8_t want[16]; /* the first element's expected bytes */
  size_t size;      /* bytes per element */
} expect_t;

#define BYTES(x) (memcpy(e->want, &(x), sizeof(x)), e->size = sizeof(x))

static void test_constants_round_trip(void) {
  tpu_hlo_builder_t* b;
  CHECK_OK(tpu_hlo_builder_create(&b));
  tpu_hlo_value_t v[64];
  expect_t ex[64];
  int n = 0;
  /* Each splat goes over a 2x3 shape, so every element is checked. */
  tpu_hlo_type_t shape = t2(TPU_DTYPE_FLOAT32, 2, 3);
#define SPLAT(dt_, call, ctype, value)                      \
  do {                                                        \
    expect_t* e = &ex[n];                                     \
    e->type = shape;                                          \
    e->type.dtype = dt_;                                      \
    ctype want_ = (value);                                    \
    BYTES(want_);                                             \
    v[n++] = call;                                            \
  } while (0)
#define F32(x) SPLAT(TPU_DTYPE_FLOAT32, tpu_hlo_constant_float(b, e->type, x), float, (float)(x))
#define F64(x) SPLAT(TPU_DTYPE_FLOAT64, tpu_hlo_constant_float(b, e->type, x), double, (x))
#define F16(x, bits) SPLAT(TPU_DTYPE_FLOAT16, tpu_hlo_constant_float(b, e->type, x), uint16_t, (bits))
#define BF16(x, bits) SPLAT(TPU_DTYPE_BFLOAT16, tpu_hlo_constant_float(b, e->type, x), uint16_t, (bits))
  F32(1.5);
  F32(0.1);
  F32(-0.0);
  F32(NAN);
  F32(INFINITY);
  F32(-INFINITY);
  F32(FLT_MAX);
  F32(FLT_TRUE_MIN);
  F32(1.1754942e-38); /* largest subnormal region */
  F32(16777217.0);    /* rounds to even in f32 */
  F64(0.1);
  F64(-0.0);
  F64(NAN);
  F64(-INFINITY);
  F64(DBL_MAX);
  F64(DBL_TRUE_MIN);
  F64(1e22);
  F16(1.0, 0x3C00);
  F16(0.1, 0x2E66);
  F16(-0.0, 0x8000);
  F16(NAN, 0x7E00);
  F16(-INFINITY, 0xFC00);
  F16(65504.0, 0x7BFF);
  F16(0x1p-24, 0x0001);
  BF16(M_PI, 0x4049);
  BF16(-0.0, 0x8000);
  BF16(NAN, 0x7FC0);
  BF16(INFINITY, 0x7F80);
  BF16(1e-39, 0x000B); /* subnormal */
  BF16(3.3895313892515355e38, 0x7F7F);
  SPLAT(TPU_DTYPE_INT8, tpu_hlo_constant_int(b, e->type, -128), int8_t, -128);
  SPLAT(TPU_DTYPE_INT8, tpu_hlo_constant_int(b, e->type, 127), int8_t, 127);
  SPLAT(TPU_DTYPE_INT16, tpu_hlo_constant_int(b, e->type, -32768), int16_t, -32768);
  SPLAT(TPU_DTYPE_INT32, tpu_hlo_constant_int(b, e->type, INT32_MIN), int32_t, INT32_MIN);
  SPLAT(TPU_DTYPE_INT64, tpu_hlo_constant_int(b, e->type, INT64_MIN), int64_t, INT64_MIN);
  SPLAT(TPU_DTYPE_INT64, tpu_hlo_constant_int(b, e->type, INT64_MAX), int64_t, INT64_MAX);
  SPLAT(TPU_DTYPE_UINT8, tpu_hlo_constant_uint(b, e->type, 255), uint8_t, 255);
  SPLAT(TPU_DTYPE_UINT8, tpu_hlo_constant_int(b, e->type, 0), uint8_t, 0);
  SPLAT(TPU_DTYPE_BOOL, tpu_hlo_constant_bool(b, e->type, true), uint8_t, 1);
  SPLAT(TPU_DTYPE_BOOL, tpu_hlo_constant_bool(b, e->type, false), uint8_t, 0);
  {
    const float c[2] = {1.0f, -2.5f};
    SPLAT(TPU_DTYPE_COMPLEX64,
          tpu_hlo_constant_complex(b, e->type, c[0], c[1]), uint64_t, 0);
    memcpy(ex[n - 1].want, c, sizeof c);
    const float d[2] = {NAN, -INFINITY};
    SPLAT(TPU_DTYPE_COMPLEX64,
          tpu_hlo_constant_complex(b, e->type, d[0], d[1]), uint64_t, 0);
    memcpy(ex[n - 1].want, d, sizeof d);
    const float z[2] = {-0.0f, FLT_TRUE_MIN};
    SPLAT(TPU_DTYPE_COMPLEX64,
          tpu_hlo_constant_complex(b, e->type, z[0], z[1]), uint64_t, 0);
    memcpy(ex[n - 1].want, z, sizeof z);
  }
  /* A scalar shape too. */
  {
    expect_t* e = &ex[n];
    e->type = scalar(TPU_DTYPE_FLOAT32);
    float want = -0.0f;
    BYTES(want);
    v[n++] = tpu_hlo_constant_float(b, e->type, -0.0);
  }
  tpu_hlo_return(b, v, n);
  void* out[64];
  bool ran = run(b, NULL, NULL, 0, out, n);
  tpu_hlo_builder_destroy(b);
  CHECK(ran);
  for (int i = 0; i < n; i++) {
    size_t elems = type_bytes(&ex[i].type) / ex[i].size;
    const uint8_t* got = out[i];
    for (size_t k = 0; k < elems; k++) {
      if (memcmp(got + k * ex[i].size, ex[i].want, ex[i].size) != 0) {
        fprintf(stderr, "constant %d (%s) element %zu: got", i,
                tpu_dtype_name(ex[i].type.dtype), k);
        for (size_t j = 0; j < ex[i].size; j++)
          fprintf(stderr, " %02X", got[k * ex[i].size + j]);
        fprintf(stderr, ", want");
        for (size_t j = 0; j < ex[i].size; j++)
          fprintf(stderr, " %02X", ex[i].want[j]);
        fprintf(stderr, "\n");
        tpu_test_failures_++;
        break;
      }
    }
  }
  free_all(out, n);
}

static uint64_t rng_state = 0x2545F4914F6CDD1Du;
static uint64_t rng(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return rng_state;
}

/* tpu_hlo_constant_dense of random bytes (every bit pattern, NaN payloads
 * included) in every dtype comes back byte for byte; so do empty tensors. */
static void test_dense_round_trip(void) {
  tpu_hlo_builder_t* b;
  CHECK_OK(tpu_hlo_builder_create(&b));
  enum { kDtypes = TPU_DTYPE_COUNT };
  tpu_hlo_type_t types[kDtypes + 2];
  uint8_t* data[kDtypes + 2];
  tpu_hlo_value_t v[kDtypes + 2];
  for (int d = 0; d < kDtypes; d++) {
    types[d] = t2((tpu_dtype_t)d, 3, 5);
    size_t nbytes = type_bytes(&types[d]);
    data[d] = malloc(nbytes);
    for (size_t k = 0; k < nbytes; k++) {
      data[d][k] = d == TPU_DTYPE_BOOL ? (uint8_t)(rng() & 1) : (uint8_t)rng();
    }
    if (d == TPU_DTYPE_FLOAT32) { /* and the canonical NaN, -0, inf */
      const uint32_t special[3] = {0x7FC00000u, 0x80000000u, 0x7F800000u};
      memcpy(data[d], special, sizeof special);
    }
    v[d] = tpu_hlo_constant_dense(b, types[d], data[d]);
  }
  types[kDtypes] = t2(TPU_DTYPE_FLOAT32, 0, 3);
  types[kDtypes + 1] = t1(TPU_DTYPE_BOOL, 0);
  data[kDtypes] = data[kDtypes + 1] = NULL;
  v[kDtypes] = tpu_hlo_constant_dense(b, types[kDtypes], NULL);
  v[kDtypes + 1] = tpu_hlo_constant_dense(b, types[kDtypes + 1], NULL);
  tpu_hlo_return(b, v, kDtypes + 2);
  void* out[kDtypes + 2];
  bool ran = run(b, NULL, NULL, 0, out, kDtypes + 2);
  tpu_hlo_builder_destroy(b);
  for (int d = 0; ran && d < kDtypes; d++) {
    if (memcmp(out[d], data[d], type_bytes(&types[d])) != 0) {
      fprintf(stderr, "dense %s did not round-trip\n",
              tpu_dtype_name((tpu_dtype_t)d));
      tpu_test_failures_++;
    }
  }
  for (int d = 0; d < kDtypes; d++) free(data[d]);
  if (ran) free_all(out, kDtypes + 2);
  CHECK(ran);
}

/* The printer's f32/f64 decimal form and the plugin's parser agree on many
 * random finite values (dense arrays of splats would hide nothing: each is
 * its own constant). */
static void test_random_float_splats(void) {
  enum { kCount = 48 };
  tpu_hlo_builder_t* b;
  CHECK_OK(tpu_hlo_builder_create(&b));
  float f[kCount];
  double d[kCount];
  uint16_t h[kCount];
  tpu_hlo_value_t v[3 * kCount];
  for (int i = 0; i < kCount; i++) {
    uint32_t bits;
    do {
      bits = (uint32_t)rng();
      memcpy(&f[i], &bits, sizeof bits);
    } while (!isfinite(f[i]));
    uint64_t bits64;
    do {
      bits64 = rng();
      memcpy(&d[i], &bits64, sizeof bits64);
    } while (!isfinite(d[i]));
    double x = ldexp((double)(rng() >> 11) / 0x1p53, (int)(rng() % 40) - 26);
    h[i] = tpu_hlo_half_bits(x);
    v[i] = tpu_hlo_constant_float(b, scalar(TPU_DTYPE_FLOAT32), f[i]);
    v[kCount + i] = tpu_hlo_constant_float(b, scalar(TPU_DTYPE_FLOAT64), d[i]);
    v[2 * kCount + i] =
        tpu_hlo_constant_float(b, scalar(TPU_DTYPE_FLOAT16), x);
  }
  tpu_hlo_return(b, v, 3 * kCount);
  void* out[3 * kCount];
  bool ran = run(b, NULL, NULL, 0, out, 3 * kCount);
  tpu_hlo_builder_destroy(b);
  CHECK(ran);
  for (int i = 0; i < kCount; i++) {
    if (memcmp(out[i], &f[i], 4) || memcmp(out[kCount + i], &d[i], 8) ||
        memcmp(out[2 * kCount + i], &h[i], 2)) {
      fprintf(stderr, "random constant %d did not round-trip (%a %a)\n", i,
              f[i], d[i]);
      tpu_test_failures_++;
    }
  }
  free_all(out, 3 * kCount);
}

/* A program that does not parse fails to compile with the plugin's
 * diagnostic (the builder does not check attribute text). */
static void test_bad_attribute_is_reported(void) {
  tpu_hlo_builder_t* b;
  CHECK_OK(tpu_hlo_builder_create(&b));
  tpu_hlo_type_t f = scalar(TPU_DTYPE_FLOAT32);
  tpu_hlo_value_t x = tpu_hlo_arg(b, f, NULL);
  tpu_hlo_value_t y =
      tpu_hlo_op(b, "stablehlo.compare", &x, 1, scalar(TPU_DTYPE_BOOL),
                 "comparison_direction = #stablehlo<comparison_direction XX>");
  tpu_hlo_return(b, &y, 1);
  char* text = NULL;
  size_t len = 0;
  CHECK_OK(tpu_hlo_builder_finish(b, &text, &len));
  tpu_hlo_builder_destroy(b);
  tpu_executable_t* exe = NULL;
  tpu_status_t s = client() ? tpu_executable_compile(client(), text, len, NULL, &exe)
                            : NULL;
  free(text);
  CHECK(client() != NULL);
  CHECK(s != NULL && exe == NULL);
  CHECK_EQ(tpu_status_code(s), TPU_STATUS_INVALID_ARGUMENT);
  CHECK_STR_CONTAINS(tpu_status_message(s), "ComparisonDirection");
  tpu_status_free(s);
}

static void test_teardown(void) {
  tpu_client_destroy(g_client);
  tpu_plugin_release(g_plugin);
  g_client = NULL;
  g_plugin = NULL;
}

TPU_TEST_MAIN(TPU_TEST(test_add), TPU_TEST(test_dot_general),
              TPU_TEST(test_reduce_sum), TPU_TEST(test_compare_select),
              TPU_TEST(test_sort_and_nested_while),
              TPU_TEST(test_constants_round_trip),
              TPU_TEST(test_dense_round_trip),
              TPU_TEST(test_random_float_splats),
              TPU_TEST(test_bad_attribute_is_reported),
              TPU_TEST(test_teardown))
