#include "builder.h"

#include <math.h>
#include <stdint.h>

#include "../testing.h"

/* ---- helpers ------------------------------------------------------------ */

static tpu_hlo_type_t t2(tpu_dtype_t dtype, int64_t d0, int64_t d1) {
  int64_t dims[2] = {d0, d1};
  return tpu_hlo_type_make(dtype, 2, dims);
}

static tpu_hlo_type_t t1(tpu_dtype_t dtype, int64_t d0) {
  return tpu_hlo_type_make(dtype, 1, &d0);
}

static tpu_hlo_type_t scalar(tpu_dtype_t dtype) {
  return tpu_hlo_type_scalar(dtype);
}

/* Finishes b (which must succeed) and returns the text; NULL on error. */
static char* finish_text(tpu_hlo_builder_t* b) {
  char* text = NULL;
  size_t len = 0;
  tpu_status_t s = tpu_hlo_builder_finish(b, &text, &len);
  if (s) {
    fprintf(stderr, "finish failed: %s\n", tpu_status_message(s));
    tpu_status_free(s);
    return NULL;
  }
  if (strlen(text) != len) {
    fprintf(stderr, "finish: out_len %zu != strlen %zu\n", len, strlen(text));
    free(text);
    return NULL;
  }
  return text;
}

static bool text_equals(const char* got, const char* want) {
  if (got && strcmp(got, want) == 0) return true;
  fprintf(stderr, "--- want:\n%s--- got:\n%s---\n", want, got ? got : "(null)");
  return false;
}

/* The status finish returns for b (caller frees). */
static tpu_status_t finish_status(tpu_hlo_builder_t* b) {
  char* text = NULL;
  tpu_status_t s = tpu_hlo_builder_finish(b, &text, NULL);
  free(text);
  return s;
}

/* ---- golden programs ---------------------------------------------------- */

static void test_golden_add(void) {
  tpu_hlo_builder_t* b;
  CHECK_OK(tpu_hlo_builder_create(&b));
  tpu_hlo_type_t t = t2(TPU_DTYPE_FLOAT32, 2, 3);
  tpu_hlo_value_t x = tpu_hlo_arg(b, t, NULL);
  tpu_hlo_value_t s =
      tpu_hlo_arg(b, scalar(TPU_DTYPE_FLOAT32), "tf.aliasing_output = 0 : i32");
  tpu_hlo_value_t bcast = tpu_hlo_op(b, "stablehlo.broadcast_in_dim", &s, 1, t,
                                     "broadcast_dimensions = array<i64>");
  tpu_hlo_value_t add_in[2] = {x, bcast};
  tpu_hlo_value_t sum = tpu_hlo_op(b, "stablehlo.add", add_in, 2, t, NULL);
  tpu_hlo_value_t mul_in[2] = {sum, x};
  tpu_hlo_value_t prod = tpu_hlo_op(b, "stablehlo.multiply", mul_in, 2, t, NULL);
  tpu_hlo_return(b, &prod, 1);
  CHECK_EQ(tpu_hlo_value_type(b, sum).dtype, TPU_DTYPE_FLOAT32);
  CHECK_EQ(tpu_hlo_value_type(b, sum).dims[1], 3);
  char* text = finish_text(b);
  tpu_hlo_builder_destroy(b);
  bool same = text_equals(
      text,
      "module @torchtpu {\n"
      "  func.func public @main(%arg0: tensor<2x3xf32>, %arg1: tensor<f32> "
      "{tf.aliasing_output = 0 : i32}) -> (tensor<2x3xf32>) {\n"
      "    %0 = \"stablehlo.broadcast_in_dim\"(%arg1) {broadcast_dimensions = "
      "array<i64>} : (tensor<f32>) -> tensor<2x3xf32>\n"
      "    %1 = \"stablehlo.add\"(%arg0, %0) : (tensor<2x3xf32>, "
      "tensor<2x3xf32>) -> tensor<2x3xf32>\n"
      "    %2 = \"stablehlo.multiply\"(%1, %arg0) : (tensor<2x3xf32>, "
      "tensor<2x3xf32>) -> tensor<2x3xf32>\n"
      "    \"func.return\"(%2) : (tensor<2x3xf32>) -> ()\n"
      "  }\n"
      "}\n");
  free(text);
  CHECK(same);
}

static void test_golden_reduce(void) {
  tpu_hlo_builder_t* b;
  CHECK_OK(tpu_hlo_builder_create(&b));
  tpu_hlo_type_t f = scalar(TPU_DTYPE_FLOAT32);
  tpu_hlo_value_t ops[2];
  ops[0] = tpu_hlo_arg(b, t2(TPU_DTYPE_FLOAT32, 2, 3), NULL);
  ops[1] = tpu_hlo_constant_float(b, f, 0.0);
  tpu_hlo_type_t out = t1(TPU_DTYPE_FLOAT32, 2);
  tpu_hlo_region_op_begin(b, "stablehlo.reduce", ops, 2, &out, 1,
                          "dimensions = array<i64: 1>");
  tpu_hlo_type_t arg_types[2] = {f, f};
  tpu_hlo_value_t args[2];
  tpu_hlo_block_begin(b, arg_types, 2, args);
  tpu_hlo_value_t sum = tpu_hlo_op(b, "stablehlo.add", args, 2, f, NULL);
  tpu_hlo_block_return(b, &sum, 1);
  tpu_hlo_value_t reduced;
  tpu_hlo_region_op_end(b, &reduced);
  tpu_hlo_return(b, &reduced, 1);
  CHECK_EQ(tpu_hlo_value_type(b, reduced).rank, 1);
  char* text = finish_text(b);
  tpu_hlo_builder_destroy(b);
  bool same = text_equals(
      text,
      "module @torchtpu {\n"
      "  func.func public @main(%arg0: tensor<2x3xf32>) -> (tensor<2xf32>) {\n"
      "    %0 = \"stablehlo.constant\"() {value = dense<0.0> : tensor<f32>} : "
      "() -> tensor<f32>\n"
      "    %1 = \"stablehlo.reduce\"(%arg0, %0) ({\n"
      "    ^bb0(%b0: tensor<f32>, %b1: tensor<f32>):\n"
      "      %2 = \"stablehlo.add\"(%b0, %b1) : (tensor<f32>, tensor<f32>) -> "
      "tensor<f32>\n"
      "      \"stablehlo.return\"(%2) : (tensor<f32>) -> ()\n"
      "    }) {dimensions = array<i64: 1>} : (tensor<2x3xf32>, tensor<f32>) "
      "-> tensor<2xf32>\n"
      "    \"func.return\"(%1) : (tensor<2xf32>) -> ()\n"
      "  }\n"
      "}\n");
  free(text);
  CHECK(same);
}

static void test_golden_sort_multi_result(void) {
  tpu_hlo_builder_t* b;
  CHECK_OK(tpu_hlo_builder_create(&b));
  tpu_hlo_value_t ops[2];
  ops[0] = tpu_hlo_arg(b, t1(TPU_DTYPE_FLOAT32, 4), NULL);
  ops[1] = tpu_hlo_arg(b, t1(TPU_DTYPE_INT32, 4), NULL);
  tpu_hlo_type_t outs[2] = {t1(TPU_DTYPE_FLOAT32, 4), t1(TPU_DTYPE_INT32, 4)};
  tpu_hlo_region_op_begin(b, "stablehlo.sort", ops, 2, outs, 2,
                          "dimension = 0 : i64, is_stable = true");
  tpu_hlo_type_t f = scalar(TPU_DTYPE_FLOAT32), i = scalar(TPU_DTYPE_INT32);
  tpu_hlo_type_t arg_types[4] = {f, f, i, i};
  tpu_hlo_value_t args[4];
  tpu_hlo_block_begin(b, arg_types, 4, args);
  tpu_hlo_value_t less =
      tpu_hlo_op(b, "stablehlo.compare", args, 2, scalar(TPU_DTYPE_BOOL),
                 "comparison_direction = #stablehlo<comparison_direction LT>");
  tpu_hlo_block_return(b, &less, 1);
  tpu_hlo_value_t sorted[2];
  tpu_hlo_region_op_end(b, sorted);
  tpu_hlo_value_t rets[2] = {sorted[1], sorted[0]};
  tpu_hlo_return(b, rets, 2);
  CHECK_EQ(tpu_hlo_value_type(b, sorted[1]).dtype, TPU_DTYPE_INT32);
  char* text = finish_text(b);
  tpu_hlo_builder_destroy(b);
  bool same = text_equals(
      text,
      "module @torchtpu {\n"
      "  func.func public @main(%arg0: tensor<4xf32>, %arg1: tensor<4xi32>) "
      "-> (tensor<4xi32>, tensor<4xf32>) {\n"
      "    %0:2 = \"stablehlo.sort\"(%arg0, %arg1) ({\n"
      "    ^bb0(%b0: tensor<f32>, %b1: tensor<f32>, %b2: tensor<i32>, %b3: "
      "tensor<i32>):\n"
      "      %1 = \"stablehlo.compare\"(%b0, %b1) {comparison_direction = "
      "#stablehlo<comparison_direction LT>} : (tensor<f32>, tensor<f32>) -> "
      "tensor<i1>\n"
      "      \"stablehlo.return\"(%1) : (tensor<i1>) -> ()\n"
      "    }) {dimension = 0 : i64, is_stable = true} : (tensor<4xf32>, "
      "tensor<4xi32>) -> (tensor<4xf32>, tensor<4xi32>)\n"
      "    \"func.return\"(%0#1, %0#0) : (tensor<4xi32>, tensor<4xf32>) -> ()\n"
      "  }\n"
      "}\n");
  free(text);
  CHECK(same);
}

/* A while loop (two regions) whose body holds a reduce (nested region) that
 * uses a value of the enclosing block and one of @main. */
static void test_golden_nested_regions(void) {
  tpu_hlo_builder_t* b;
  CHECK_OK(tpu_hlo_builder_create(&b));
  tpu_hlo_type_t v = t1(TPU_DTYPE_FLOAT32, 3), f = scalar(TPU_DTYPE_FLOAT32);
  tpu_hlo_value_t x = tpu_hlo_arg(b, v, NULL);
  tpu_hlo_value_t zero = tpu_hlo_constant_float(b, f, 0.0);
  tpu_hlo_region_op_begin(b, "stablehlo.while", &x, 1, &v, 1, NULL);
  tpu_hlo_value_t c;
  tpu_hlo_block_begin(b, &v, 1, &c);
  tpu_hlo_value_t pred =
      tpu_hlo_constant_bool(b, scalar(TPU_DTYPE_BOOL), false);
  tpu_hlo_block_return(b, &pred, 1);
  tpu_hlo_value_t body_arg;
  tpu_hlo_block_begin(b, &v, 1, &body_arg);
  tpu_hlo_value_t red_in[2] = {body_arg, zero};
  tpu_hlo_region_op_begin(b, "stablehlo.reduce", red_in, 2, &f, 1,
                          "dimensions = array<i64: 0>");
  tpu_hlo_type_t ff[2] = {f, f};
  tpu_hlo_value_t ab[2];
  tpu_hlo_block_begin(b, ff, 2, ab);
  tpu_hlo_value_t s = tpu_hlo_op(b, "stablehlo.add", ab, 2, f, NULL);
  tpu_hlo_block_return(b, &s, 1);
  tpu_hlo_value_t total;
  tpu_hlo_region_op_end(b, &total);
  tpu_hlo_value_t spread = tpu_hlo_op(b, "stablehlo.broadcast_in_dim", &total,
                                      1, v, "broadcast_dimensions = array<i64>");
  tpu_hlo_block_return(b, &spread, 1);
  tpu_hlo_value_t result;
  tpu_hlo_region_op_end(b, &result);
  tpu_hlo_return(b, &result, 1);
  char* text = finish_text(b);
  tpu_hlo_builder_destroy(b);
  bool same = text_equals(
      text,
      "module @torchtpu {\n"
      "  func.func public @main(%arg0: tensor<3xf32>) -> (tensor<3xf32>) {\n"
      "    %0 = \"stablehlo.constant\"() {value = dense<0.0> : tensor<f32>} : "
      "() -> tensor<f32>\n"
      "    %1 = \"stablehlo.while\"(%arg0) ({\n"
      "    ^bb0(%b0: tensor<3xf32>):\n"
      "      %2 = \"stablehlo.constant\"() {value = dense<false> : tensor<i1>} "
      ": () -> tensor<i1>\n"
      "      \"stablehlo.return\"(%2) : (tensor<i1>) -> ()\n"
      "    }, {\n"
      "    ^bb0(%b1: tensor<3xf32>):\n"
      "      %3 = \"stablehlo.reduce\"(%b1, %0) ({\n"
      "      ^bb0(%b2: tensor<f32>, %b3: tensor<f32>):\n"
      "        %4 = \"stablehlo.add\"(%b2, %b3) : (tensor<f32>, tensor<f32>) -> "
      "tensor<f32>\n"
      "        \"stablehlo.return\"(%4) : (tensor<f32>) -> ()\n"
      "      }) {dimensions = array<i64: 0>} : (tensor<3xf32>, tensor<f32>) -> "
      "tensor<f32>\n"
      "      %5 = \"stablehlo.broadcast_in_dim\"(%3) {broadcast_dimensions = "
      "array<i64>} : (tensor<f32>) -> tensor<3xf32>\n"
      "      \"stablehlo.return\"(%5) : (tensor<3xf32>) -> ()\n"
      "    }) : (tensor<3xf32>) -> tensor<3xf32>\n"
      "    \"func.return\"(%1) : (tensor<3xf32>) -> ()\n"
      "  }\n"
      "}\n");
  free(text);
  CHECK(same);
}

/* Liveness: an argument read only by ops whose results nobody uses is
 * unused (the eager engine then lets a whole overwrite repair lost
 * contents); one reaching the return through a chain, or read inside a
 * region, is used. */
static void test_value_used(void) {
  tpu_hlo_builder_t* b;
  CHECK_OK(tpu_hlo_builder_create(&b));
  tpu_hlo_type_t t = t1(TPU_DTYPE_FLOAT32, 3);
  tpu_hlo_type_t f = scalar(TPU_DTYPE_FLOAT32);
  tpu_hlo_value_t dead = tpu_hlo_arg(b, t, NULL);   /* read by a dead op only */
  tpu_hlo_value_t chain = tpu_hlo_arg(b, t, NULL);  /* through two ops */
  tpu_hlo_value_t inner = tpu_hlo_arg(b, f, NULL);  /* used inside a region */
  tpu_hlo_value_t never = tpu_hlo_arg(b, t, NULL);  /* not read at all */
  tpu_hlo_value_t d1 = tpu_hlo_op(b, "stablehlo.negate", &dead, 1, t, NULL);
  tpu_hlo_op(b, "stablehlo.abs", &d1, 1, t, NULL);
  tpu_hlo_value_t c1 = tpu_hlo_op(b, "stablehlo.negate", &chain, 1, t, NULL);
  tpu_hlo_value_t c2 = tpu_hlo_op(b, "stablehlo.abs", &c1, 1, t, NULL);
  tpu_hlo_value_t ops[2] = {c2, tpu_hlo_constant_float(b, f, 0.0)};
  tpu_hlo_region_op_begin(b, "stablehlo.reduce", ops, 2, &f, 1, "dimensions = array<i64: 0>");
  tpu_hlo_type_t arg_types[2] = {f, f};
  tpu_hlo_value_t args[2];
  tpu_hlo_block_begin(b, arg_types, 2, args);
  tpu_hlo_value_t sum = tpu_hlo_op(b, "stablehlo.add", args, 2, f, NULL);
  tpu_hlo_value_t in2[2] = {sum, inner};
  tpu_hlo_value_t sum2 = tpu_hlo_op(b, "stablehlo.add", in2, 2, f, NULL);
  tpu_hlo_block_return(b, &sum2, 1);
  tpu_hlo_value_t reduced;
  tpu_hlo_region_op_end(b, &reduced);
  tpu_hlo_return(b, &reduced, 1);
  CHECK(!tpu_hlo_value_used(b, dead));
  CHECK(!tpu_hlo_value_used(b, d1));
  CHECK(tpu_hlo_value_used(b, chain));
  CHECK(tpu_hlo_value_used(b, c1));
  CHECK(tpu_hlo_value_used(b, inner));
  CHECK(!tpu_hlo_value_used(b, never));
  char* text = finish_text(b);
  CHECK(text != NULL);
  free(text);
  tpu_hlo_builder_destroy(b);
}

/* Many ops: the text grows far past any initial buffer, nothing truncated. */
static void test_long_program(void) {
  tpu_hlo_builder_t* b;
  CHECK_OK(tpu_hlo_builder_create(&b));
  tpu_hlo_type_t t = t2(TPU_DTYPE_FLOAT32, 128, 256);
  tpu_hlo_value_t v = tpu_hlo_arg(b, t, NULL);
  for (int i = 0; i < 20000; i++) {
    tpu_hlo_value_t in[2] = {v, v};
    v = tpu_hlo_op(b, "stablehlo.add", in, 2, t, NULL);
  }
  tpu_hlo_return(b, &v, 1);
  char* text = finish_text(b);
  tpu_hlo_builder_destroy(b);
  CHECK(text != NULL);
  bool ok = strlen(text) > 20000 * 80 &&
            strstr(text, "%19999 = \"stablehlo.add\"(%19998, %19998)") &&
            strstr(text, "\"func.return\"(%19999)");
  free(text);
  CHECK(ok);
}

/* ---- constants ---------------------------------------------------------- */

static void test_constants_every_dtype(void) {
  tpu_hlo_builder_t* b;
  CHECK_OK(tpu_hlo_builder_create(&b));
  tpu_hlo_type_t f32 = t2(TPU_DTYPE_FLOAT32, 2, 3);
  tpu_hlo_value_t v[40];
  int n = 0;
  v[n++] = tpu_hlo_constant_float(b, f32, 1.5);
  v[n++] = tpu_hlo_constant_float(b, scalar(TPU_DTYPE_FLOAT32), NAN);
  v[n++] = tpu_hlo_constant_float(b, scalar(TPU_DTYPE_FLOAT32), -INFINITY);
  v[n++] = tpu_hlo_constant_float(b, scalar(TPU_DTYPE_FLOAT32), -0.0);
  v[n++] = tpu_hlo_constant_float(b, scalar(TPU_DTYPE_FLOAT32), 1e-45);
  v[n++] = tpu_hlo_constant_float(b, scalar(TPU_DTYPE_FLOAT64), 0.1);
  v[n++] = tpu_hlo_constant_float(b, scalar(TPU_DTYPE_FLOAT64), 5e-324);
  v[n++] = tpu_hlo_constant_float(b, scalar(TPU_DTYPE_FLOAT64), INFINITY);
  v[n++] = tpu_hlo_constant_float(b, scalar(TPU_DTYPE_FLOAT16), 1.0);
  v[n++] = tpu_hlo_constant_float(b, scalar(TPU_DTYPE_FLOAT16), 0x1p-24);
  v[n++] = tpu_hlo_constant_float(b, scalar(TPU_DTYPE_BFLOAT16), NAN);
  v[n++] = tpu_hlo_constant_float(b, scalar(TPU_DTYPE_BFLOAT16), -0.0);
  v[n++] = tpu_hlo_constant_int(b, scalar(TPU_DTYPE_INT64), INT64_MIN);
  v[n++] = tpu_hlo_constant_int(b, scalar(TPU_DTYPE_INT64), INT64_MAX);
  v[n++] = tpu_hlo_constant_int(b, scalar(TPU_DTYPE_INT32), INT32_MIN);
  v[n++] = tpu_hlo_constant_int(b, scalar(TPU_DTYPE_INT16), -32768);
  v[n++] = tpu_hlo_constant_int(b, scalar(TPU_DTYPE_INT8), -128);
  v[n++] = tpu_hlo_constant_uint(b, scalar(TPU_DTYPE_UINT8), 255);
  v[n++] = tpu_hlo_constant_int(b, scalar(TPU_DTYPE_FLOAT32), 3);
  v[n++] = tpu_hlo_constant_float(b, scalar(TPU_DTYPE_INT32), -7.0);
  v[n++] = tpu_hlo_constant_bool(b, t1(TPU_DTYPE_BOOL, 4), true);
  v[n++] = tpu_hlo_constant_int(b, scalar(TPU_DTYPE_BOOL), 0);
  v[n++] = tpu_hlo_constant_complex(b, scalar(TPU_DTYPE_COMPLEX64), 1.0f, 2.0f);
  v[n++] = tpu_hlo_constant_complex(b, scalar(TPU_DTYPE_COMPLEX64), NAN,
                                    -INFINITY);
  v[n++] = tpu_hlo_constant_float(b, t2(TPU_DTYPE_FLOAT32, 0, 3), 2.0);
  tpu_hlo_return(b, v, n);
  char* text = finish_text(b);
  tpu_hlo_builder_destroy(b);
  CHECK(text != NULL);
  static const char* const kWant[] = {
      "%0 = \"stablehlo.constant\"() {value = dense<1.5> : tensor<2x3xf32>} : "
      "() -> tensor<2x3xf32>\n",
      "{value = dense<0x7FC00000> : tensor<f32>}",
      "{value = dense<0xFF800000> : tensor<f32>}",
      "{value = dense<-0.0> : tensor<f32>}",
      "{value = dense<1.40129846e-45> : tensor<f32>}",
      "{value = dense<0.10000000000000001> : tensor<f64>}",
      "{value = dense<4.9406564584124654e-324> : tensor<f64>}",
      "{value = dense<0x7FF0000000000000> : tensor<f64>}",
      "{value = dense<0x3C00> : tensor<f16>}",
      "{value = dense<0x0001> : tensor<f16>}",
      "{value = dense<0x7FC0> : tensor<bf16>}",
      "{value = dense<0x8000> : tensor<bf16>}",
      "{value = dense<-9223372036854775808> : tensor<i64>}",
      "{value = dense<9223372036854775807> : tensor<i64>}",
      "{value = dense<-2147483648> : tensor<i32>}",
      "{value = dense<-32768> : tensor<i16>}",
      "{value = dense<-128> : tensor<i8>}",
      "{value = dense<255> : tensor<ui8>}",
      "{value = dense<3.0> : tensor<f32>}",
      "{value = dense<-7> : tensor<i32>}",
      "{value = dense<true> : tensor<4xi1>}",
      "{value = dense<false> : tensor<i1>}",
      "{value = dense<(1.0,2.0)> : tensor<complex<f32>>}",
      "{value = dense<(0x7FC00000,0xFF800000)> : tensor<complex<f32>>}",
      "{value = dense<2.0> : tensor<0x3xf32>}",
  };
  for (size_t i = 0; i < sizeof kWant / sizeof kWant[0]; i++) {
    if (!text || !strstr(text, kWant[i])) {
      fprintf(stderr, "missing %s in:\n%s", kWant[i], text ? text : "");
      tpu_test_failures_++;
    }
  }
  free(text);
}

static void test_constant_dense(void) {
  tpu_hlo_builder_t* b;
  CHECK_OK(tpu_hlo_builder_create(&b));
  const float f[3] = {1.0f, NAN, -0.0f};
  const uint8_t flags[6] = {1, 0, 0, 1, 1, 1};
  const int64_t big[2] = {INT64_MIN, 1};
  const uint16_t half[2] = {0x3C00, 0x7E00};
  tpu_hlo_value_t v[5];
  v[0] = tpu_hlo_constant_dense(b, t1(TPU_DTYPE_FLOAT32, 3), f);
  v[1] = tpu_hlo_constant_dense(b, t2(TPU_DTYPE_BOOL, 2, 3), flags);
  v[2] = tpu_hlo_constant_dense(b, t1(TPU_DTYPE_INT64, 2), big);
  v[3] = tpu_hlo_constant_dense(b, t1(TPU_DTYPE_FLOAT16, 2), half);
  v[4] = tpu_hlo_constant_dense(b, t2(TPU_DTYPE_FLOAT32, 0, 3), NULL);
  tpu_hlo_return(b, v, 5);
  char* text = finish_text(b);
  tpu_hlo_builder_destroy(b);
  CHECK_STR_CONTAINS(text,
                     "{value = dense<\"0x0000803F0000C07F00000080\"> : "
                     "tensor<3xf32>}");
  CHECK_STR_CONTAINS(text,
                     "{value = dense<[[true, false, false], [true, true, "
                     "true]]> : tensor<2x3xi1>}");
  CHECK_STR_CONTAINS(text,
                     "{value = dense<\"0x00000000000000800100000000000000\"> "
                     ": tensor<2xi64>}");
  CHECK_STR_CONTAINS(text, "{value = dense<\"0x003C007E\"> : tensor<2xf16>}");
  CHECK_STR_CONTAINS(text, "{value = dense<> : tensor<0x3xf32>}");
  free(text);
}

static void test_constant_range_errors(void) {
  tpu_hlo_builder_t* b;
  CHECK_OK(tpu_hlo_builder_create(&b));
  tpu_hlo_value_t v = tpu_hlo_constant_uint(b, scalar(TPU_DTYPE_UINT8), 256);
  CHECK(v.id < 0);
  tpu_status_t s = finish_status(b);
  CHECK_EQ(tpu_status_code(s), TPU_STATUS_OUT_OF_RANGE);
  CHECK_STR_CONTAINS(tpu_status_message(s), "256 does not fit in uint8");
  tpu_status_free(s);
  tpu_hlo_builder_destroy(b);

  CHECK_OK(tpu_hlo_builder_create(&b));
  tpu_hlo_constant_int(b, scalar(TPU_DTYPE_INT8), -129);
  s = finish_status(b);
  CHECK_STR_CONTAINS(tpu_status_message(s), "-129 does not fit in int8");
  tpu_status_free(s);
  tpu_hlo_builder_destroy(b);

  CHECK_OK(tpu_hlo_builder_create(&b));
  tpu_hlo_constant_float(b, scalar(TPU_DTYPE_INT32), 0.5);
  s = finish_status(b);
  CHECK_EQ(tpu_status_code(s), TPU_STATUS_INVALID_ARGUMENT);
  CHECK_STR_CONTAINS(tpu_status_message(s), "not representable in int32");
  tpu_status_free(s);
  tpu_hlo_builder_destroy(b);

  CHECK_OK(tpu_hlo_builder_create(&b));
  tpu_hlo_constant_complex(b, scalar(TPU_DTYPE_FLOAT32), 1.0f, 1.0f);
  s = finish_status(b);
  CHECK_STR_CONTAINS(tpu_status_message(s), "float32 is not complex");
  tpu_status_free(s);
  tpu_hlo_builder_destroy(b);
}

/* Integers past 2^53 round once, straight to the element type (through a
 * nearest double they would round twice and land on the even neighbour). */
static void test_constant_int_to_float_rounding(void) {
  tpu_hlo_builder_t* b;
  CHECK_OK(tpu_hlo_builder_create(&b));
  const int64_t above_f32_tie = (INT64_C(1) << 60) + (INT64_C(1) << 36) + 1;
  const int64_t above_bf16_tie = (INT64_C(1) << 60) + (INT64_C(1) << 52) + 1;
  tpu_hlo_value_t v[4];
  v[0] = tpu_hlo_constant_int(b, scalar(TPU_DTYPE_FLOAT32), above_f32_tie);
  v[1] = tpu_hlo_constant_int(b, scalar(TPU_DTYPE_BFLOAT16), -above_bf16_tie);
  v[2] = tpu_hlo_constant_uint(b, scalar(TPU_DTYPE_FLOAT64), UINT64_MAX);
  v[3] = tpu_hlo_constant_int(b, scalar(TPU_DTYPE_FLOAT32), INT64_MIN);
  tpu_hlo_return(b, v, 4);
  char* text = finish_text(b);
  tpu_hlo_builder_destroy(b);
  CHECK((float)above_f32_tie == 0x1.000002p60f); /* what C's conversion says */
  CHECK_STR_CONTAINS(text, "dense<1.15292164e+18> : tensor<f32>");
  CHECK_STR_CONTAINS(text, "dense<0xDD81> : tensor<bf16>");
  CHECK_STR_CONTAINS(text, "dense<1.8446744073709552e+19> : tensor<f64>");
  CHECK_STR_CONTAINS(text, "dense<-9.22337204e+18> : tensor<f32>");
  free(text);
}

/* ---- errors ------------------------------------------------------------- */

/* Expects finish to fail with `code` and a message containing `needle`. */
static bool fails_with(tpu_hlo_builder_t* b, tpu_status_code_t code,
                       const char* needle) {
  tpu_status_t s = finish_status(b);
  bool ok = tpu_status_code(s) == code &&
            strstr(tpu_status_message(s), needle) != NULL;
  if (!ok) {
    fprintf(stderr, "want %s containing \"%s\", got %s: %s\n",
            tpu_status_code_name(code), needle,
            tpu_status_code_name(tpu_status_code(s)), tpu_status_message(s));
  }
  tpu_status_free(s);
  return ok;
}

static void test_error_value_from_closed_block(void) {
  tpu_hlo_builder_t* b;
  CHECK_OK(tpu_hlo_builder_create(&b));
  tpu_hlo_type_t f = scalar(TPU_DTYPE_FLOAT32);
  tpu_hlo_value_t ops[2] = {tpu_hlo_arg(b, t1(TPU_DTYPE_FLOAT32, 3), NULL),
                            tpu_hlo_arg(b, f, NULL)};
  tpu_hlo_region_op_begin(b, "stablehlo.reduce", ops, 2, &f, 1,
                          "dimensions = array<i64: 0>");
  tpu_hlo_type_t ff[2] = {f, f};
  tpu_hlo_value_t args[2];
  tpu_hlo_block_begin(b, ff, 2, args);
  tpu_hlo_value_t inner = tpu_hlo_op(b, "stablehlo.add", args, 2, f, NULL);
  tpu_hlo_block_return(b, &inner, 1);
  tpu_hlo_value_t r;
  tpu_hlo_region_op_end(b, &r);
  CHECK(r.id >= 0);
  tpu_hlo_value_t leak[2] = {r, inner};
  tpu_hlo_value_t bad = tpu_hlo_op(b, "stablehlo.add", leak, 2, f, NULL);
  CHECK(bad.id < 0);
  /* Later calls are no-ops that return invalid values. */
  tpu_hlo_value_t later = tpu_hlo_op(b, "stablehlo.add", leak, 1, f, NULL);
  CHECK(later.id < 0);
  tpu_hlo_return(b, &r, 1);
  CHECK(fails_with(b, TPU_STATUS_INVALID_ARGUMENT,
                   "stablehlo.add: operand 1 (%1) was defined inside a block "
                   "that has ended"));
  /* Block arguments are scoped the same way. */
  tpu_hlo_builder_destroy(b);
  CHECK_OK(tpu_hlo_builder_create(&b));
  ops[0] = tpu_hlo_arg(b, t1(TPU_DTYPE_FLOAT32, 3), NULL);
  ops[1] = tpu_hlo_arg(b, f, NULL);
  tpu_hlo_region_op_begin(b, "stablehlo.reduce", ops, 2, &f, 1,
                          "dimensions = array<i64: 0>");
  tpu_hlo_block_begin(b, ff, 2, args);
  tpu_hlo_block_return(b, &args[0], 1);
  tpu_hlo_region_op_end(b, &r);
  tpu_hlo_return(b, &args[1], 1);
  CHECK(fails_with(b, TPU_STATUS_INVALID_ARGUMENT, "operand 0 (%b1)"));
  tpu_hlo_builder_destroy(b);
}

static void test_error_arg_after_op(void) {
  tpu_hlo_builder_t* b;
  CHECK_OK(tpu_hlo_builder_create(&b));
  tpu_hlo_value_t x = tpu_hlo_arg(b, scalar(TPU_DTYPE_FLOAT32), NULL);
  tpu_hlo_op(b, "stablehlo.negate", &x, 1, scalar(TPU_DTYPE_FLOAT32), NULL);
  tpu_hlo_value_t y = tpu_hlo_arg(b, scalar(TPU_DTYPE_FLOAT32), NULL);
  CHECK(y.id < 0);
  CHECK(fails_with(b, TPU_STATUS_FAILED_PRECONDITION,
                   "arguments must all be added before the first op"));
  tpu_hlo_builder_destroy(b);
}

static void test_error_invalid_types(void) {
  tpu_hlo_builder_t* b;
  CHECK_OK(tpu_hlo_builder_create(&b));
  tpu_hlo_value_t x = tpu_hlo_arg(b, scalar((tpu_dtype_t)42), NULL);
  CHECK(x.id < 0);
  CHECK(fails_with(b, TPU_STATUS_INVALID_ARGUMENT,
                   "tpu_hlo_arg: invalid dtype 42"));
  tpu_hlo_builder_destroy(b);

  CHECK_OK(tpu_hlo_builder_create(&b));
  tpu_hlo_constant_float(b, scalar(TPU_DTYPE_COUNT), 1.0);
  CHECK(fails_with(b, TPU_STATUS_INVALID_ARGUMENT, "invalid dtype 15"));
  tpu_hlo_builder_destroy(b);

  int64_t dims[TPU_HLO_MAX_RANK + 1];
  for (int i = 0; i <= TPU_HLO_MAX_RANK; i++) dims[i] = 1;
  CHECK_OK(tpu_hlo_builder_create(&b));
  x = tpu_hlo_arg(b, scalar(TPU_DTYPE_FLOAT32), NULL);
  tpu_hlo_op(b, "stablehlo.reshape", &x, 1,
             tpu_hlo_type_make(TPU_DTYPE_FLOAT32, TPU_HLO_MAX_RANK + 1, dims),
             NULL);
  CHECK(fails_with(b, TPU_STATUS_INVALID_ARGUMENT, "rank 17 is outside"));
  tpu_hlo_builder_destroy(b);

  CHECK_OK(tpu_hlo_builder_create(&b));
  tpu_hlo_arg(b, t2(TPU_DTYPE_FLOAT32, 2, -1), NULL);
  CHECK(fails_with(b, TPU_STATUS_INVALID_ARGUMENT, "dimension 1 is -1"));
  tpu_hlo_builder_destroy(b);

  /* The maximum rank itself is fine. */
  CHECK_OK(tpu_hlo_builder_create(&b));
  x = tpu_hlo_arg(
      b, tpu_hlo_type_make(TPU_DTYPE_FLOAT32, TPU_HLO_MAX_RANK, dims), NULL);
  tpu_hlo_return(b, &x, 1);
  char* text = finish_text(b);
  tpu_hlo_builder_destroy(b);
  CHECK_STR_CONTAINS(text, "tensor<1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1xf32>");
  free(text);
}

static void test_error_foreign_and_invalid_values(void) {
  tpu_hlo_builder_t *a, *b;
  CHECK_OK(tpu_hlo_builder_create(&a));
  CHECK_OK(tpu_hlo_builder_create(&b));
  tpu_hlo_value_t xa = tpu_hlo_arg(a, scalar(TPU_DTYPE_FLOAT32), NULL);
  tpu_hlo_value_t xb = tpu_hlo_arg(b, scalar(TPU_DTYPE_FLOAT32), NULL);
  CHECK(xa.id != xb.id);
  CHECK_EQ(tpu_hlo_value_type(b, xa).dtype, TPU_DTYPE_INVALID);
  tpu_hlo_return(b, &xa, 1);
  CHECK(fails_with(b, TPU_STATUS_INVALID_ARGUMENT,
                   "operand 0 (id"));
  CHECK(fails_with(b, TPU_STATUS_INVALID_ARGUMENT,
                   "is not a value of this builder"));
  tpu_hlo_value_t invalid = {-1};
  tpu_hlo_op(a, "stablehlo.negate", &invalid, 1, scalar(TPU_DTYPE_FLOAT32),
             NULL);
  CHECK(fails_with(a, TPU_STATUS_INVALID_ARGUMENT, "is an invalid value"));
  tpu_hlo_builder_destroy(a);
  tpu_hlo_builder_destroy(b);
}

static void test_error_structure(void) {
  tpu_hlo_builder_t* b;
  tpu_hlo_type_t f = scalar(TPU_DTYPE_FLOAT32);
  /* No return. */
  CHECK_OK(tpu_hlo_builder_create(&b));
  tpu_hlo_constant_float(b, f, 1.0);
  CHECK(fails_with(b, TPU_STATUS_FAILED_PRECONDITION, "no tpu_hlo_return"));
  tpu_hlo_builder_destroy(b);
  /* An op between blocks of a region op. */
  CHECK_OK(tpu_hlo_builder_create(&b));
  tpu_hlo_value_t x = tpu_hlo_arg(b, f, NULL);
  tpu_hlo_region_op_begin(b, "stablehlo.while", &x, 1, &f, 1, NULL);
  tpu_hlo_op(b, "stablehlo.negate", &x, 1, f, NULL);
  tpu_hlo_value_t r = {7};
  tpu_hlo_region_op_end(b, &r);
  CHECK(r.id < 0);
  CHECK(fails_with(b, TPU_STATUS_FAILED_PRECONDITION,
                   "region op stablehlo.while has no open block"));
  tpu_hlo_builder_destroy(b);
  /* Ending a region op with its block open; returning from inside it. */
  CHECK_OK(tpu_hlo_builder_create(&b));
  x = tpu_hlo_arg(b, f, NULL);
  tpu_hlo_region_op_begin(b, "stablehlo.while", &x, 1, &f, 1, NULL);
  tpu_hlo_block_begin(b, &f, 1, &r);
  tpu_hlo_region_op_end(b, &r);
  CHECK(fails_with(b, TPU_STATUS_FAILED_PRECONDITION, "still has an open block"));
  tpu_hlo_builder_destroy(b);
  CHECK_OK(tpu_hlo_builder_create(&b));
  x = tpu_hlo_arg(b, f, NULL);
  tpu_hlo_region_op_begin(b, "stablehlo.while", &x, 1, &f, 1, NULL);
  tpu_hlo_return(b, &x, 1);
  CHECK(fails_with(b, TPU_STATUS_FAILED_PRECONDITION, "is still open"));
  tpu_hlo_builder_destroy(b);
  /* block_return with no region op; ops after return; bad op name. */
  CHECK_OK(tpu_hlo_builder_create(&b));
  x = tpu_hlo_arg(b, f, NULL);
  tpu_hlo_block_return(b, &x, 1);
  CHECK(fails_with(b, TPU_STATUS_FAILED_PRECONDITION, "no region op"));
  tpu_hlo_builder_destroy(b);
  CHECK_OK(tpu_hlo_builder_create(&b));
  x = tpu_hlo_arg(b, f, NULL);
  tpu_hlo_return(b, &x, 1);
  tpu_hlo_op(b, "stablehlo.negate", &x, 1, f, NULL);
  CHECK(fails_with(b, TPU_STATUS_FAILED_PRECONDITION, "already returned"));
  tpu_hlo_builder_destroy(b);
  CHECK_OK(tpu_hlo_builder_create(&b));
  x = tpu_hlo_arg(b, f, NULL);
  tpu_hlo_op(b, "stablehlo.add\"(", &x, 1, f, NULL);
  CHECK(fails_with(b, TPU_STATUS_INVALID_ARGUMENT, "invalid op name"));
  tpu_hlo_builder_destroy(b);
  /* After an error in region_op_begin, end still fills its results. */
  CHECK_OK(tpu_hlo_builder_create(&b));
  tpu_hlo_value_t bogus = {12345};
  tpu_hlo_type_t two[2] = {f, f};
  tpu_hlo_region_op_begin(b, "stablehlo.sort", &bogus, 1, two, 2, NULL);
  tpu_hlo_block_begin(b, two, 2, NULL);
  tpu_hlo_value_t outs[2] = {{1}, {2}};
  tpu_hlo_region_op_end(b, outs);
  CHECK(outs[0].id < 0 && outs[1].id < 0);
  CHECK(fails_with(b, TPU_STATUS_INVALID_ARGUMENT, "stablehlo.sort: operand 0"));
  tpu_hlo_builder_destroy(b);
  /* NULL builder. */
  tpu_status_t s = tpu_hlo_builder_finish(NULL, NULL, NULL);
  CHECK_EQ(tpu_status_code(s), TPU_STATUS_INVALID_ARGUMENT);
  tpu_status_free(s);
  tpu_hlo_builder_destroy(NULL);
}

/* Precision: set on dot_general and convolution only, appended to their
 * attributes (or alone); unset emits nothing. */
static void test_precision_config(void) {
  tpu_hlo_builder_t* b;
  CHECK_OK(tpu_hlo_builder_create(&b));
  tpu_hlo_type_t m = t2(TPU_DTYPE_FLOAT32, 2, 2);
  tpu_hlo_value_t x = tpu_hlo_arg(b, m, NULL);
  const char* dims = "dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [1], "
                     "rhs_contracting_dimensions = [0]>";
  tpu_hlo_value_t xx[2] = {x, x};
  tpu_hlo_value_t d0 = tpu_hlo_op(b, "stablehlo.dot_general", xx, 2, m, dims);
  tpu_hlo_builder_set_precision(b, TPU_HLO_PRECISION_HIGH);
  tpu_hlo_value_t n = tpu_hlo_op(b, "stablehlo.negate", &d0, 1, m, NULL);
  tpu_hlo_value_t nn[2] = {n, n};
  tpu_hlo_value_t d1 = tpu_hlo_op(b, "stablehlo.dot_general", nn, 2, m, dims);
  tpu_hlo_builder_set_precision(b, TPU_HLO_PRECISION_DEFAULT);
  tpu_hlo_value_t d1d1[2] = {d1, d1};
  tpu_hlo_value_t d2 = tpu_hlo_op(b, "stablehlo.dot_general", d1d1, 2, m, dims);
  tpu_hlo_return(b, &d2, 1);
  char* text = finish_text(b);
  CHECK(text != NULL);
  const char* first = strstr(text, "stablehlo.dot_general");
  CHECK(first != NULL);
  const char* eol = strchr(first, '\n');
  CHECK(eol && !memmem(first, (size_t)(eol - first), "precision_config", 16));
  const char* neg = strstr(text, "stablehlo.negate");
  CHECK(neg && !memmem(neg, strcspn(neg, "\n"), "precision", 9));
  CHECK_STR_CONTAINS(text, "rhs_contracting_dimensions = [0]>, precision_config = "
                           "[#stablehlo<precision HIGH>, #stablehlo<precision HIGH>]");
  CHECK_STR_CONTAINS(text, "precision_config = [#stablehlo<precision DEFAULT>, "
                           "#stablehlo<precision DEFAULT>]");
  free(text);
  tpu_hlo_builder_destroy(b);
}

TPU_TEST_MAIN(TPU_TEST(test_golden_add), TPU_TEST(test_precision_config), TPU_TEST(test_golden_reduce),
              TPU_TEST(test_value_used),
              TPU_TEST(test_golden_sort_multi_result),
              TPU_TEST(test_golden_nested_regions),
              TPU_TEST(test_long_program),
              TPU_TEST(test_constants_every_dtype),
              TPU_TEST(test_constant_dense),
              TPU_TEST(test_constant_range_errors),
              TPU_TEST(test_constant_int_to_float_rounding),
              TPU_TEST(test_error_value_from_closed_block),
              TPU_TEST(test_error_arg_after_op),
              TPU_TEST(test_error_invalid_types),
              TPU_TEST(test_error_foreign_and_invalid_values),
              TPU_TEST(test_error_structure))
