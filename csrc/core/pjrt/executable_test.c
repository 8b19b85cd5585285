#include "executable.h"

#include <math.h>

#include "pjrt_testing.h"

/* ---- programs (generic StableHLO form) ----------------------------------------- */

static const char kAdd[] =
    "module @add {\n"
    "  func.func public @main(%arg0: tensor<2x3xf32>, %arg1: tensor<2x3xf32>)"
    " -> tensor<2x3xf32> {\n"
    "    %0 = \"stablehlo.add\"(%arg0, %arg1) : (tensor<2x3xf32>, "
    "tensor<2x3xf32>) -> tensor<2x3xf32>\n"
    "    \"func.return\"(%0) : (tensor<2x3xf32>) -> ()\n"
    "  }\n"
    "}\n";

/* [2x3] . [3x2] -> [2x2], contracting lhs dim 1 with rhs dim 0. */
static const char kDot[] =
    "module @dot {\n"
    "  func.func public @main(%arg0: tensor<2x3xf32>, %arg1: tensor<3x2xf32>)"
    " -> tensor<2x2xf32> {\n"
    "    %0 = \"stablehlo.dot_general\"(%arg0, %arg1) {dot_dimension_numbers = "
    "#stablehlo.dot<lhs_contracting_dimensions = [1], "
    "rhs_contracting_dimensions = [0]>} : (tensor<2x3xf32>, tensor<3x2xf32>) "
    "-> tensor<2x2xf32>\n"
    "    \"func.return\"(%0) : (tensor<2x2xf32>) -> ()\n"
    "  }\n"
    "}\n";

/* Row sums of an i32 [2x3] with a reduction region. */
static const char kReduce[] =
    "module @reduce {\n"
    "  func.func public @main(%arg0: tensor<2x3xi32>) -> tensor<2xi32> {\n"
    "    %0 = \"stablehlo.constant\"() {value = dense<0> : tensor<i32>} : () -> "
    "tensor<i32>\n"
    "    %1 = \"stablehlo.reduce\"(%arg0, %0) ({\n"
    "    ^bb0(%a: tensor<i32>, %b: tensor<i32>):\n"
    "      %s = \"stablehlo.add\"(%a, %b) : (tensor<i32>, tensor<i32>) -> "
    "tensor<i32>\n"
    "      \"stablehlo.return\"(%s) : (tensor<i32>) -> ()\n"
    "    }) {dimensions = array<i64: 1>} : (tensor<2x3xi32>, tensor<i32>) -> "
    "tensor<2xi32>\n"
    "    \"func.return\"(%1) : (tensor<2xi32>) -> ()\n"
    "  }\n"
    "}\n";

/* Elementwise min via compare + select; also returns the predicate. */
static const char kSelect[] =
    "module @select {\n"
    "  func.func public @main(%arg0: tensor<2x3xf64>, %arg1: tensor<2x3xf64>)"
    " -> (tensor<2x3xf64>, tensor<2x3xi1>) {\n"
    "    %0 = \"stablehlo.compare\"(%arg0, %arg1) {comparison_direction = "
    "#stablehlo<comparison_direction LT>} : (tensor<2x3xf64>, "
    "tensor<2x3xf64>) -> tensor<2x3xi1>\n"
    "    %1 = \"stablehlo.select\"(%0, %arg0, %arg1) : (tensor<2x3xi1>, "
    "tensor<2x3xf64>, tensor<2x3xf64>) -> tensor<2x3xf64>\n"
    "    \"func.return\"(%1, %0) : (tensor<2x3xf64>, tensor<2x3xi1>) -> ()\n"
    "  }\n"
    "}\n";

/* arg0 aliases output 0: it may be donated. */
static const char kDonate[] =
    "module @donate {\n"
    "  func.func public @main(%arg0: tensor<4xf32> {tf.aliasing_output = 0 : "
    "i32}, %arg1: tensor<4xf32>) -> tensor<4xf32> {\n"
    "    %0 = \"stablehlo.add\"(%arg0, %arg1) : (tensor<4xf32>, tensor<4xf32>) "
    "-> tensor<4xf32>\n"
    "    \"func.return\"(%0) : (tensor<4xf32>) -> ()\n"
    "  }\n"
    "}\n";

/* The same sum without aliasing: nothing may be donated. */
static const char kAdd4[] =
    "module @add4 {\n"
    "  func.func public @main(%arg0: tensor<4xf32>, %arg1: tensor<4xf32>) -> tensor<4xf32> {\n"
    "    %0 = \"stablehlo.add\"(%arg0, %arg1) : (tensor<4xf32>, tensor<4xf32>) "
    "-> tensor<4xf32>\n"
    "    \"func.return\"(%0) : (tensor<4xf32>) -> ()\n"
    "  }\n"
    "}\n";

/* ---- helpers --------------------------------------------------------------------- */

static tpu_status_t compile(tpu_client_t* client, const char* text, bool portable,
                            tpu_executable_t** out) {
  tpu_compile_options_t options = {.portable = portable};
  double t0 = test_now_ms();
  tpu_status_t s = tpu_executable_compile(client, text, strlen(text), &options, out);
  if (!s) printf("  compile: %.1f ms\n", test_now_ms() - t0);
  return s;
}

static tpu_status_t upload(tpu_client_t* client, int device, const void* data,
                           tpu_dtype_t dtype, int64_t d0, int64_t d1, int rank,
                           tpu_buffer_t** out) {
  const int64_t dims[2] = {d0, d1};
  return tpu_buffer_from_host(client, device, data, dtype, dims, rank, NULL, out);
}

/* Owns everything a test makes so one cleanup handles every exit. */
typedef struct {
  tpu_client_t* client;
  tpu_executable_t* exe[3];
  tpu_buffer_t* buf[12];
  tpu_event_t* event;
} fixture_t;

static void fixture_free(fixture_t* f) {
  tpu_event_destroy(f->event);
  for (int i = 0; i < 12; i++) tpu_buffer_destroy(f->buf[i]);
  for (int i = 0; i < 3; i++) tpu_executable_destroy(f->exe[i]);
  tpu_client_destroy(f->client);
  memset(f, 0, sizeof *f);
}

/* Runs a test body that returns a status, then cleans up and checks. */
#define RUN_WITH_FIXTURE(devices, body)        \
  do {                                         \
    fixture_t f = {0};                         \
    f.client = test_client(devices);           \
    CHECK(f.client != NULL);                   \
    tpu_status_t s_body = body(&f);            \
    fixture_free(&f);                          \
    CHECK_OK(s_body);                          \
    CHECK(test_no_live_handles());             \
  } while (0)

#define EXPECT(cond, ...) \
  do {                    \
    if (!(cond)) return tpu_status_make(TPU_STATUS_INTERNAL, __VA_ARGS__); \
  } while (0)

/* ---- tests --------------------------------------------------------------------- */

static void test_compile_options_encoding(void) {
  uint8_t bytes[16];
  tpu_compile_options_t portable = {.portable = true};
  tpu_compile_options_t fixed = {.portable = false};
  const uint8_t want_portable[] = {0x1a, 0x04, 0x20, 0x01, 0x28, 0x01, 0x20, 0x01};
  CHECK_EQ(tpu_compile_options_encode(&portable, bytes, sizeof bytes), 8u);
  CHECK(memcmp(bytes, want_portable, 8) == 0);
  CHECK_EQ(tpu_compile_options_encode(&fixed, bytes, sizeof bytes), 6u);
  CHECK(memcmp(bytes, want_portable, 6) == 0);
  CHECK_EQ(tpu_compile_options_encode(NULL, bytes, sizeof bytes), 8u);
  /* Too small: the full length is still reported, only capacity written. */
  memset(bytes, 0xee, sizeof bytes);
  CHECK_EQ(tpu_compile_options_encode(&portable, bytes, 3), 8u);
  CHECK(bytes[2] == 0x20 && bytes[3] == 0xee);
  CHECK_EQ(tpu_compile_options_encode(&portable, NULL, 0), 8u);
}

static tpu_status_t add_body(fixture_t* f) {
  TPU_RETURN_IF_ERROR(compile(f->client, kAdd, true, &f->exe[0]));
  tpu_executable_t* exe = f->exe[0];
  EXPECT(tpu_executable_num_outputs(exe) == 1, "num outputs");
  EXPECT(tpu_executable_output_dtype(exe, 0) == TPU_DTYPE_FLOAT32, "dtype");
  EXPECT(tpu_executable_output_rank(exe, 0) == 2, "rank");
  EXPECT(tpu_executable_output_dims(exe, 0)[0] == 2 &&
             tpu_executable_output_dims(exe, 0)[1] == 3,
         "dims");
  EXPECT(tpu_executable_output_dtype(exe, 1) == TPU_DTYPE_INVALID, "oob dtype");

  const float a[6] = {1, 2, 3, 4, 5, 6};
  const float b[6] = {0.5f, -2, 1e-3f, 100, -5, 0.25f};
  float want[6];
  for (int i = 0; i < 6; i++) want[i] = a[i] + b[i];
  TPU_RETURN_IF_ERROR(upload(f->client, 0, a, TPU_DTYPE_FLOAT32, 2, 3, 2, &f->buf[0]));
  TPU_RETURN_IF_ERROR(upload(f->client, 0, b, TPU_DTYPE_FLOAT32, 2, 3, 2, &f->buf[1]));
  TPU_RETURN_IF_ERROR(tpu_executable_execute(exe, 0, f->buf, 2, NULL, &f->buf[2],
                                             &f->event));
  TPU_RETURN_IF_ERROR(tpu_event_await(f->event));
  tpu_buffer_t* out = f->buf[2];
  EXPECT(tpu_buffer_dtype(out) == TPU_DTYPE_FLOAT32 && tpu_buffer_rank(out) == 2 &&
             tpu_buffer_dims(out)[0] == 2 && tpu_buffer_dims(out)[1] == 3 &&
             tpu_buffer_device_index(out) == 0,
         "output metadata");
  float got[6];
  TPU_RETURN_IF_ERROR(tpu_buffer_to_host(out, got, sizeof got));
  EXPECT(memcmp(got, want, sizeof want) == 0, "add result differs");
  /* Inputs are untouched. */
  EXPECT(!tpu_buffer_is_deleted(f->buf[0]) && !tpu_buffer_is_deleted(f->buf[1]),
         "inputs deleted");

  /* Execute latency (informational). */
  enum { N = 200 };
  double t0 = test_now_ms();
  for (int i = 0; i < N; i++) {
    tpu_buffer_t* r = NULL;
    TPU_RETURN_IF_ERROR(tpu_executable_execute(exe, 0, f->buf, 2, NULL, &r, NULL));
    tpu_status_t s = tpu_buffer_await_ready(r);
    tpu_buffer_destroy(r);
    TPU_RETURN_IF_ERROR(s);
  }
  printf("  execute f32[2,3] add + await + destroy: %.1f us\n",
         (test_now_ms() - t0) * 1e3 / N);
  return NULL;
}
static void test_add(void) { RUN_WITH_FIXTURE(1, add_body); }

static tpu_status_t dot_body(fixture_t* f) {
  TPU_RETURN_IF_ERROR(compile(f->client, kDot, true, &f->exe[0]));
  const float a[6] = {1, 2, 3, 4, 5, 6};          /* 2x3 */
  const float b[6] = {7, -8, 9, 10, -11, 12};      /* 3x2 */
  float want[4];
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 2; j++) {
      float acc = 0;
      for (int k = 0; k < 3; k++) acc += a[i * 3 + k] * b[k * 2 + j];
      want[i * 2 + j] = acc; /* small integers: exact in any order */
    }
  TPU_RETURN_IF_ERROR(upload(f->client, 0, a, TPU_DTYPE_FLOAT32, 2, 3, 2, &f->buf[0]));
  TPU_RETURN_IF_ERROR(upload(f->client, 0, b, TPU_DTYPE_FLOAT32, 3, 2, 2, &f->buf[1]));
  TPU_RETURN_IF_ERROR(
      tpu_executable_execute(f->exe[0], 0, f->buf, 2, NULL, &f->buf[2], NULL));
  EXPECT(tpu_buffer_dims(f->buf[2])[0] == 2 && tpu_buffer_dims(f->buf[2])[1] == 2,
         "dot dims");
  float got[4];
  TPU_RETURN_IF_ERROR(tpu_buffer_to_host(f->buf[2], got, sizeof got));
  EXPECT(memcmp(got, want, sizeof want) == 0,
         "dot: got %g %g %g %g want %g %g %g %g", got[0], got[1], got[2], got[3],
         want[0], want[1], want[2], want[3]);
  return NULL;
}
static void test_dot_general(void) { RUN_WITH_FIXTURE(1, dot_body); }

static tpu_status_t reduce_body(fixture_t* f) {
  TPU_RETURN_IF_ERROR(compile(f->client, kReduce, true, &f->exe[0]));
  EXPECT(tpu_executable_output_dtype(f->exe[0], 0) == TPU_DTYPE_INT32 &&
             tpu_executable_output_rank(f->exe[0], 0) == 1 &&
             tpu_executable_output_dims(f->exe[0], 0)[0] == 2,
         "reduce output info");
  const int32_t a[6] = {1, -2, 300, INT32_MAX, 1, -7};
  int32_t want[2] = {1 - 2 + 300, 0};
  want[1] = (int32_t)((uint32_t)INT32_MAX + 1u - 7u); /* wraps like XLA */
  TPU_RETURN_IF_ERROR(upload(f->client, 0, a, TPU_DTYPE_INT32, 2, 3, 2, &f->buf[0]));
  TPU_RETURN_IF_ERROR(
      tpu_executable_execute(f->exe[0], 0, f->buf, 1, NULL, &f->buf[1], NULL));
  int32_t got[2];
  TPU_RETURN_IF_ERROR(tpu_buffer_to_host(f->buf[1], got, sizeof got));
  EXPECT(got[0] == want[0] && got[1] == want[1], "reduce: got %d %d want %d %d",
         got[0], got[1], want[0], want[1]);
  return NULL;
}
static void test_reduce(void) { RUN_WITH_FIXTURE(1, reduce_body); }

static tpu_status_t select_body(fixture_t* f) {
  TPU_RETURN_IF_ERROR(compile(f->client, kSelect, true, &f->exe[0]));
  tpu_executable_t* exe = f->exe[0];
  EXPECT(tpu_executable_num_outputs(exe) == 2, "two outputs");
  EXPECT(tpu_executable_output_dtype(exe, 0) == TPU_DTYPE_FLOAT64 &&
             tpu_executable_output_dtype(exe, 1) == TPU_DTYPE_BOOL,
         "output dtypes");
  const double a[6] = {1, -2, 3.5, -0.0, 1e300, -INFINITY};
  const double b[6] = {2, -3, 3.5, 0.0, -1e300, 7};
  double want[6];
  uint8_t want_lt[6];
  for (int i = 0; i < 6; i++) {
    want_lt[i] = a[i] < b[i];
    want[i] = want_lt[i] ? a[i] : b[i];
  }
  TPU_RETURN_IF_ERROR(upload(f->client, 0, a, TPU_DTYPE_FLOAT64, 2, 3, 2, &f->buf[0]));
  TPU_RETURN_IF_ERROR(upload(f->client, 0, b, TPU_DTYPE_FLOAT64, 2, 3, 2, &f->buf[1]));
  TPU_RETURN_IF_ERROR(
      tpu_executable_execute(exe, 0, f->buf, 2, NULL, &f->buf[2], NULL));
  double got[6];
  uint8_t got_lt[6];
  TPU_RETURN_IF_ERROR(tpu_buffer_to_host(f->buf[2], got, sizeof got));
  TPU_RETURN_IF_ERROR(tpu_buffer_to_host(f->buf[3], got_lt, sizeof got_lt));
  EXPECT(tpu_buffer_dtype(f->buf[3]) == TPU_DTYPE_BOOL, "pred dtype");
  EXPECT(memcmp(got, want, sizeof want) == 0, "select result differs");
  EXPECT(memcmp(got_lt, want_lt, sizeof want_lt) == 0, "compare result differs");
  return NULL;
}
static void test_compare_select(void) { RUN_WITH_FIXTURE(1, select_body); }

static tpu_status_t malformed_body(fixture_t* f) {
  static const char kBroken[] =
      "module @broken {\n"
      "  func.func public @main(%arg0: tensor<2xf32>) -> tensor<2xf32> {\n"
      "    %0 = \"stablehlo.add\"(%arg0, %arg0) : (tensor<2xf32>, tensor<2xf32>) "
      "-> tensor<2xf32>\n"
      "    \"func.return\"(%0 : (tensor<2xf32>) -> ()\n" /* missing ')' */
      "  }\n"
      "}\n";
  tpu_status_t s = compile(f->client, kBroken, true, &f->exe[0]);
  EXPECT(s != NULL && f->exe[0] == NULL, "broken program compiled");
  printf("  parse error (%s): %s\n", tpu_status_code_name(tpu_status_code(s)),
         tpu_status_message(s));
  bool ok = tpu_status_code(s) == TPU_STATUS_INVALID_ARGUMENT &&
            strstr(tpu_status_message(s), "expected ')'") != NULL;
  tpu_status_free(s);
  EXPECT(ok, "parse error is not INVALID_ARGUMENT with the parser's message");

  /* Parses, but does not verify: operand types disagree. */
  static const char kIllTyped[] =
      "module @illtyped {\n"
      "  func.func public @main(%arg0: tensor<2xf32>, %arg1: tensor<3xf32>) -> "
      "tensor<2xf32> {\n"
      "    %0 = \"stablehlo.add\"(%arg0, %arg1) : (tensor<2xf32>, tensor<3xf32>) "
      "-> tensor<2xf32>\n"
      "    \"func.return\"(%0) : (tensor<2xf32>) -> ()\n"
      "  }\n"
      "}\n";
  s = compile(f->client, kIllTyped, true, &f->exe[0]);
  EXPECT(s != NULL && f->exe[0] == NULL, "ill-typed program compiled");
  printf("  verify error (%s): %s\n", tpu_status_code_name(tpu_status_code(s)),
         tpu_status_message(s));
  ok = tpu_status_code(s) == TPU_STATUS_INVALID_ARGUMENT;
  tpu_status_free(s);
  EXPECT(ok, "verifier error is not INVALID_ARGUMENT");

  /* Not MLIR at all. */
  s = compile(f->client, "hello", true, &f->exe[0]);
  printf("  garbage (%s): %s\n", tpu_status_code_name(tpu_status_code(s)),
         tpu_status_message(s));
  ok = tpu_status_code(s) == TPU_STATUS_INVALID_ARGUMENT;
  tpu_status_free(s);
  EXPECT(ok, "garbage did not give INVALID_ARGUMENT");

  /* The client still compiles and runs good programs. */
  TPU_RETURN_IF_ERROR(compile(f->client, kAdd, true, &f->exe[0]));
  const float a[6] = {1, 2, 3, 4, 5, 6};
  TPU_RETURN_IF_ERROR(upload(f->client, 0, a, TPU_DTYPE_FLOAT32, 2, 3, 2, &f->buf[0]));
  f->buf[1] = NULL;
  tpu_buffer_t* args[2] = {f->buf[0], f->buf[0]};
  TPU_RETURN_IF_ERROR(
      tpu_executable_execute(f->exe[0], 0, args, 2, NULL, &f->buf[2], NULL));
  float got[6];
  TPU_RETURN_IF_ERROR(tpu_buffer_to_host(f->buf[2], got, sizeof got));
  for (int i = 0; i < 6; i++) EXPECT(got[i] == 2 * a[i], "add after error");
  return NULL;
}
static void test_malformed_program(void) { RUN_WITH_FIXTURE(1, malformed_body); }

static tpu_status_t serialize_body(fixture_t* f) {
  TPU_RETURN_IF_ERROR(compile(f->client, kSelect, true, &f->exe[0]));
  void* bytes = NULL;
  size_t len = 0;
  TPU_RETURN_IF_ERROR(tpu_executable_serialize(f->exe[0], &bytes, &len));
  printf("  serialized: %zu bytes\n", len);
  double t0 = test_now_ms();
  tpu_status_t s = tpu_executable_deserialize(f->client, bytes, len, &f->exe[1]);
  printf("  deserialize: %.1f ms\n", test_now_ms() - t0);
  free(bytes);
  TPU_RETURN_IF_ERROR(s);
  tpu_executable_t* copy = f->exe[1];
  EXPECT(tpu_executable_num_outputs(copy) == 2 &&
             tpu_executable_output_dtype(copy, 0) == TPU_DTYPE_FLOAT64 &&
             tpu_executable_output_dtype(copy, 1) == TPU_DTYPE_BOOL &&
             tpu_executable_output_rank(copy, 0) == 2 &&
             tpu_executable_output_dims(copy, 0)[1] == 3,
         "deserialized output info differs");

  const double a[6] = {NAN, -2, 3.5, -0.0, 1e300, -INFINITY};
  const double b[6] = {2, NAN, 3.5, 0.0, -1e300, 7};
  TPU_RETURN_IF_ERROR(upload(f->client, 0, a, TPU_DTYPE_FLOAT64, 2, 3, 2, &f->buf[0]));
  TPU_RETURN_IF_ERROR(upload(f->client, 0, b, TPU_DTYPE_FLOAT64, 2, 3, 2, &f->buf[1]));
  TPU_RETURN_IF_ERROR(
      tpu_executable_execute(f->exe[0], 0, f->buf, 2, NULL, &f->buf[2], NULL));
  TPU_RETURN_IF_ERROR(
      tpu_executable_execute(copy, 0, f->buf, 2, NULL, &f->buf[4], NULL));
  double r1[6], r2[6];
  uint8_t p1[6], p2[6];
  TPU_RETURN_IF_ERROR(tpu_buffer_to_host(f->buf[2], r1, sizeof r1));
  TPU_RETURN_IF_ERROR(tpu_buffer_to_host(f->buf[3], p1, sizeof p1));
  TPU_RETURN_IF_ERROR(tpu_buffer_to_host(f->buf[4], r2, sizeof r2));
  TPU_RETURN_IF_ERROR(tpu_buffer_to_host(f->buf[5], p2, sizeof p2));
  EXPECT(memcmp(r1, r2, sizeof r1) == 0 && memcmp(p1, p2, sizeof p1) == 0,
         "deserialized executable computes something else");
  /* And both are right (NaN compares false, so select takes b). */
  EXPECT(isnan(r1[1]) && r1[0] == 2 && r1[5] == -INFINITY && p1[0] == 0 &&
             p1[5] == 1,
         "select with NaN");

  /* Garbage bytes are an error, not a crash. */
  s = tpu_executable_deserialize(f->client, "not an executable", 17, &f->exe[2]);
  bool rejected = s != NULL && f->exe[2] == NULL;
  tpu_status_free(s);
  EXPECT(rejected, "garbage deserialized");
  return NULL;
}
static void test_serialize_roundtrip(void) { RUN_WITH_FIXTURE(1, serialize_body); }

static tpu_status_t donation_body(fixture_t* f) {
  TPU_RETURN_IF_ERROR(compile(f->client, kDonate, true, &f->exe[0]));
  const float a[4] = {1, 2, 3, 4}, b[4] = {10, 20, 30, 40};
  const float want[4] = {11, 22, 33, 44};
  float got[4];

  /* Not donatable: both inputs survive, result right. */
  TPU_RETURN_IF_ERROR(upload(f->client, 0, a, TPU_DTYPE_FLOAT32, 4, 0, 1, &f->buf[0]));
  TPU_RETURN_IF_ERROR(upload(f->client, 0, b, TPU_DTYPE_FLOAT32, 4, 0, 1, &f->buf[1]));
  const bool keep[2] = {false, false};
  TPU_RETURN_IF_ERROR(
      tpu_executable_execute(f->exe[0], 0, f->buf, 2, keep, &f->buf[2], NULL));
  TPU_RETURN_IF_ERROR(tpu_buffer_to_host(f->buf[2], got, sizeof got));
  EXPECT(memcmp(got, want, sizeof want) == 0, "result (kept)");
  EXPECT(!tpu_buffer_is_deleted(f->buf[0]), "non-donatable input was deleted");
  TPU_RETURN_IF_ERROR(tpu_buffer_to_host(f->buf[0], got, sizeof got));
  EXPECT(memcmp(got, a, sizeof a) == 0, "non-donatable input changed");

  /* NULL mask: nothing donated either. */
  TPU_RETURN_IF_ERROR(
      tpu_executable_execute(f->exe[0], 0, f->buf, 2, NULL, &f->buf[3], NULL));
  EXPECT(!tpu_buffer_is_deleted(f->buf[0]), "input deleted with NULL mask");
  TPU_RETURN_IF_ERROR(tpu_buffer_to_host(f->buf[3], got, sizeof got));
  EXPECT(memcmp(got, want, sizeof want) == 0, "result (NULL mask)");

  /* Donatable: arg0 is consumed, arg1 (not aliased) is not. */
  const bool donate[2] = {true, true};
  TPU_RETURN_IF_ERROR(
      tpu_executable_execute(f->exe[0], 0, f->buf, 2, donate, &f->buf[4], &f->event));
  EXPECT(tpu_buffer_is_deleted(f->buf[0]), "donated input is not deleted");
  EXPECT(!tpu_buffer_is_deleted(f->buf[1]), "unaliased input was deleted");
  TPU_RETURN_IF_ERROR(tpu_event_await(f->event));
  TPU_RETURN_IF_ERROR(tpu_buffer_to_host(f->buf[4], got, sizeof got));
  EXPECT(memcmp(got, want, sizeof want) == 0, "result (donated)");

  /* A donated buffer can no longer be read or passed in. */
  tpu_status_t s = tpu_buffer_to_host(f->buf[0], got, sizeof got);
  bool refused = tpu_status_code(s) == TPU_STATUS_FAILED_PRECONDITION;
  tpu_status_free(s);
  EXPECT(refused, "reading a donated buffer");
  s = tpu_executable_execute(f->exe[0], 0, f->buf, 2, NULL, &f->buf[5], NULL);
  refused = tpu_status_code(s) == TPU_STATUS_FAILED_PRECONDITION && !f->buf[5];
  tpu_status_free(s);
  EXPECT(refused, "executing with a donated buffer");
  return NULL;
}
static void test_donation(void) { RUN_WITH_FIXTURE(1, donation_body); }

/* Programs that alias no parameter skip the plugin's non-donatable list;
 * a deserialized one keeps it until told its text, and still never
 * donates what the caller keeps. */
static tpu_status_t aliasing_body(fixture_t* f) {
  TPU_RETURN_IF_ERROR(compile(f->client, kAdd4, true, &f->exe[0]));
  TPU_RETURN_IF_ERROR(compile(f->client, kDonate, true, &f->exe[1]));
  EXPECT(!tpu_executable_may_alias(f->exe[0]), "plain add thought to alias");
  EXPECT(tpu_executable_may_alias(f->exe[1]), "tf.aliasing_output not seen");
  void* bytes = NULL;
  size_t len = 0;
  TPU_RETURN_IF_ERROR(tpu_executable_serialize(f->exe[1], &bytes, &len));
  tpu_status_t s = tpu_executable_deserialize(f->client, bytes, len, &f->exe[2]);
  free(bytes);
  TPU_RETURN_IF_ERROR(s);
  EXPECT(tpu_executable_may_alias(f->exe[2]), "deserialized executable assumed not to alias");
  tpu_executable_note_text(f->exe[2], kDonate, strlen(kDonate));
  EXPECT(tpu_executable_may_alias(f->exe[2]), "noted aliasing text dropped");

  const float a[4] = {1, 2, 3, 4}, b[4] = {10, 20, 30, 40};
  const float want[4] = {11, 22, 33, 44};
  float got[4];
  TPU_RETURN_IF_ERROR(upload(f->client, 0, a, TPU_DTYPE_FLOAT32, 4, 0, 1, &f->buf[0]));
  TPU_RETURN_IF_ERROR(upload(f->client, 0, b, TPU_DTYPE_FLOAT32, 4, 0, 1, &f->buf[1]));
  /* The deserialized aliasing program keeps what is not offered... */
  TPU_RETURN_IF_ERROR(
      tpu_executable_execute(f->exe[2], 0, f->buf, 2, NULL, &f->buf[2], NULL));
  EXPECT(!tpu_buffer_is_deleted(f->buf[0]), "kept input donated after deserialize");
  TPU_RETURN_IF_ERROR(tpu_buffer_to_host(f->buf[2], got, sizeof got));
  EXPECT(memcmp(got, want, sizeof want) == 0, "result (deserialized, kept)");
  /* ...and a plain program never consumes an input, offered or not. */
  const bool donate[2] = {true, true};
  TPU_RETURN_IF_ERROR(
      tpu_executable_execute(f->exe[0], 0, f->buf, 2, donate, &f->buf[3], NULL));
  EXPECT(!tpu_buffer_is_deleted(f->buf[0]) && !tpu_buffer_is_deleted(f->buf[1]),
         "a program without aliasing consumed an input");
  TPU_RETURN_IF_ERROR(tpu_buffer_to_host(f->buf[3], got, sizeof got));
  EXPECT(memcmp(got, want, sizeof want) == 0, "result (no aliasing)");
  TPU_RETURN_IF_ERROR(tpu_buffer_to_host(f->buf[0], got, sizeof got));
  EXPECT(memcmp(got, a, sizeof a) == 0, "input changed");
  return NULL;
}
static void test_programs_without_aliasing(void) { RUN_WITH_FIXTURE(1, aliasing_body); }

static tpu_status_t second_device_body(fixture_t* f) {
  TPU_RETURN_IF_ERROR(compile(f->client, kAdd, true, &f->exe[0]));
  const float a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {6, 5, 4, 3, 2, 1};
  TPU_RETURN_IF_ERROR(upload(f->client, 1, a, TPU_DTYPE_FLOAT32, 2, 3, 2, &f->buf[0]));
  TPU_RETURN_IF_ERROR(upload(f->client, 1, b, TPU_DTYPE_FLOAT32, 2, 3, 2, &f->buf[1]));
  TPU_RETURN_IF_ERROR(
      tpu_executable_execute(f->exe[0], 1, f->buf, 2, NULL, &f->buf[2], &f->event));
  TPU_RETURN_IF_ERROR(tpu_event_await(f->event));
  EXPECT(tpu_buffer_device_index(f->buf[2]) == 1, "output not on device 1");
  float got[6];
  TPU_RETURN_IF_ERROR(tpu_buffer_to_host(f->buf[2], got, sizeof got));
  for (int i = 0; i < 6; i++) EXPECT(got[i] == 7, "device 1 result");

  /* Arguments on the wrong device are refused. */
  tpu_status_t s =
      tpu_executable_execute(f->exe[0], 0, f->buf, 2, NULL, &f->buf[3], NULL);
  bool refused = tpu_status_code(s) == TPU_STATUS_INVALID_ARGUMENT;
  tpu_status_free(s);
  EXPECT(refused, "arguments on device 1 ran on device 0");

  /* A non-portable executable runs only where it was compiled (device 0). */
  TPU_RETURN_IF_ERROR(compile(f->client, kAdd, false, &f->exe[1]));
  s = tpu_executable_execute(f->exe[1], 1, f->buf, 2, NULL, &f->buf[3], NULL);
  refused = tpu_status_code(s) == TPU_STATUS_INVALID_ARGUMENT;
  tpu_status_free(s);
  EXPECT(refused, "non-portable executable ran on device 1");
  TPU_RETURN_IF_ERROR(upload(f->client, 0, a, TPU_DTYPE_FLOAT32, 2, 3, 2, &f->buf[4]));
  TPU_RETURN_IF_ERROR(upload(f->client, 0, b, TPU_DTYPE_FLOAT32, 2, 3, 2, &f->buf[5]));
  TPU_RETURN_IF_ERROR(
      tpu_executable_execute(f->exe[1], 0, &f->buf[4], 2, NULL, &f->buf[6], NULL));
  TPU_RETURN_IF_ERROR(tpu_buffer_to_host(f->buf[6], got, sizeof got));
  for (int i = 0; i < 6; i++) EXPECT(got[i] == 7, "device 0 non-portable result");
  return NULL;
}
static void test_execute_on_second_device(void) {
  RUN_WITH_FIXTURE(2, second_device_body);
}

/* For every dtype: a program typed in that dtype's MLIR spelling reports
 * the dtype back (PJRT -> torchtpu mapping), accepts our upload and converts
 * known values to f32 as C does (so the plugin reads the bits as that type),
 * and returns its argument bit-exactly. */
static tpu_status_t dtype_case(fixture_t* f, tpu_dtype_t dtype, const void* values,
                               const float want[3]) {
  char text[1024];
  const char* t = tpu_dtype_mlir(dtype);
  snprintf(text, sizeof text,
           "module @convert {\n"
           "  func.func public @main(%%arg0: tensor<3x%s>) -> (tensor<3xf32>, "
           "tensor<3x%s>) {\n"
           "    %%0 = \"stablehlo.convert\"(%%arg0) : (tensor<3x%s>) -> "
           "tensor<3xf32>\n"
           "    \"func.return\"(%%0, %%arg0) : (tensor<3xf32>, tensor<3x%s>) -> ()\n"
           "  }\n"
           "}\n",
           t, t, t, t);
  tpu_executable_t* exe = NULL;
  tpu_buffer_t* in = NULL;
  tpu_buffer_t* out[2] = {NULL, NULL};
  tpu_status_t s = tpu_executable_compile(f->client, text, strlen(text), NULL, &exe);
  if (!s && (tpu_executable_output_dtype(exe, 0) != TPU_DTYPE_FLOAT32 ||
             tpu_executable_output_dtype(exe, 1) != dtype))
    s = tpu_status_make(TPU_STATUS_INTERNAL, "output dtype is %s",
                        tpu_dtype_name(tpu_executable_output_dtype(exe, 1)));
  const int64_t dims[1] = {3};
  if (!s) s = tpu_buffer_from_host(f->client, 0, values, dtype, dims, 1, NULL, &in);
  if (!s) s = tpu_executable_execute(exe, 0, &in, 1, NULL, out, NULL);
  float got[3];
  unsigned char back[3 * 8];
  size_t nbytes = 3 * tpu_dtype_size(dtype);
  if (!s) s = tpu_buffer_to_host(out[0], got, sizeof got);
  if (!s) s = tpu_buffer_to_host(out[1], back, nbytes);
  if (!s && tpu_buffer_dtype(out[1]) != dtype)
    s = tpu_status_make(TPU_STATUS_INTERNAL, "result buffer dtype");
  if (!s && memcmp(got, want, sizeof got) != 0)
    s = tpu_status_make(TPU_STATUS_INTERNAL, "converted %.9g %.9g %.9g, want %.9g %.9g %.9g",
                        got[0], got[1], got[2], want[0], want[1], want[2]);
  if (!s && memcmp(back, values, nbytes) != 0)
    s = tpu_status_make(TPU_STATUS_INTERNAL, "returned argument differs");
  tpu_buffer_destroy(out[0]);
  tpu_buffer_destroy(out[1]);
  tpu_buffer_destroy(in);
  tpu_executable_destroy(exe);
  return tpu_status_annotate(s, "%s: ", tpu_dtype_name(dtype));
}

static tpu_status_t dtypes_body(fixture_t* f) {
  const uint8_t b[3] = {1, 0, 1};
  const float want_b[3] = {1, 0, 1};
  TPU_RETURN_IF_ERROR(dtype_case(f, TPU_DTYPE_BOOL, b, want_b));
  const uint8_t u8[3] = {0, 200, 255};
  const float want_u8[3] = {0, 200, 255};
  TPU_RETURN_IF_ERROR(dtype_case(f, TPU_DTYPE_UINT8, u8, want_u8));
  const int8_t i8[3] = {-128, -1, 127};
  const float want_i8[3] = {-128, -1, 127};
  TPU_RETURN_IF_ERROR(dtype_case(f, TPU_DTYPE_INT8, i8, want_i8));
  const int16_t i16[3] = {-32768, 7, 32767};
  const float want_i16[3] = {-32768, 7, 32767};
  TPU_RETURN_IF_ERROR(dtype_case(f, TPU_DTYPE_INT16, i16, want_i16));
  const int32_t i32[3] = {INT32_MIN, -5, 123456};
  const float want_i32[3] = {(float)INT32_MIN, -5, 123456};
  TPU_RETURN_IF_ERROR(dtype_case(f, TPU_DTYPE_INT32, i32, want_i32));
  const int64_t i64[3] = {-(1ll << 40), 0, (1ll << 40) + 1};
  const float want_i64[3] = {-1099511627776.0f, 0, 1099511627776.0f};
  TPU_RETURN_IF_ERROR(dtype_case(f, TPU_DTYPE_INT64, i64, want_i64));
  /* f16: 1.0, -2.0, 0x3555 = 1365/4096 = 0.333251953125. */
  const uint16_t h[3] = {0x3c00, 0xc000, 0x3555};
  const float want_h[3] = {1.0f, -2.0f, 0.333251953125f};
  TPU_RETURN_IF_ERROR(dtype_case(f, TPU_DTYPE_FLOAT16, h, want_h));
  /* bf16: 1.0, -3.0, 0x4049 = 3.140625 (the same bits as f16 would differ). */
  const uint16_t bf[3] = {0x3f80, 0xc040, 0x4049};
  const float want_bf[3] = {1.0f, -3.0f, 3.140625f};
  TPU_RETURN_IF_ERROR(dtype_case(f, TPU_DTYPE_BFLOAT16, bf, want_bf));
  const float f32[3] = {1.5f, -0.25f, 1e10f};
  TPU_RETURN_IF_ERROR(dtype_case(f, TPU_DTYPE_FLOAT32, f32, f32));
  const double f64[3] = {0.1, -2.5, 1e300};
  const float want_f64[3] = {(float)0.1, -2.5f, INFINITY};
  TPU_RETURN_IF_ERROR(dtype_case(f, TPU_DTYPE_FLOAT64, f64, want_f64));
  /* complex -> real keeps the real part. */
  const float c64[6] = {1, 2, -3, 4, 0.5f, -1};
  const float want_c64[3] = {1, -3, 0.5f};
  TPU_RETURN_IF_ERROR(dtype_case(f, TPU_DTYPE_COMPLEX64, c64, want_c64));
  return NULL;
}
static void test_every_dtype_through_a_program(void) {
  RUN_WITH_FIXTURE(1, dtypes_body);
}

static tpu_status_t bad_args_body(fixture_t* f) {
  TPU_RETURN_IF_ERROR(compile(f->client, kAdd, true, &f->exe[0]));
  const float a[6] = {0};
  TPU_RETURN_IF_ERROR(upload(f->client, 0, a, TPU_DTYPE_FLOAT32, 2, 3, 2, &f->buf[0]));
  tpu_status_t s;
  bool ok = true;
  /* Wrong argument count: the plugin refuses. */
  s = tpu_executable_execute(f->exe[0], 0, f->buf, 1, NULL, &f->buf[1], NULL);
  ok &= s != NULL && f->buf[1] == NULL;
  tpu_status_free(s);
  /* Wrong argument size. (The CPU plugin checks byte sizes only: a 3x2 or
   * an i32 2x3 argument would be accepted and reinterpreted.) */
  TPU_RETURN_IF_ERROR(upload(f->client, 0, a, TPU_DTYPE_FLOAT32, 2, 0, 1, &f->buf[2]));
  tpu_buffer_t* args[2] = {f->buf[0], f->buf[2]};
  s = tpu_executable_execute(f->exe[0], 0, args, 2, NULL, &f->buf[1], NULL);
  ok &= s != NULL && f->buf[1] == NULL;
  tpu_status_free(s);
  s = tpu_executable_execute(f->exe[0], 5, f->buf, 1, NULL, &f->buf[1], NULL);
  ok &= tpu_status_code(s) == TPU_STATUS_OUT_OF_RANGE;
  tpu_status_free(s);
  tpu_buffer_t* nulls[2] = {f->buf[0], NULL};
  s = tpu_executable_execute(f->exe[0], 0, nulls, 2, NULL, &f->buf[1], NULL);
  ok &= tpu_status_code(s) == TPU_STATUS_INVALID_ARGUMENT;
  tpu_status_free(s);
  s = tpu_executable_compile(f->client, kAdd, 0, NULL, &f->exe[1]);
  ok &= tpu_status_code(s) == TPU_STATUS_INVALID_ARGUMENT;
  tpu_status_free(s);
  EXPECT(ok, "a bad call was not refused");
  tpu_executable_destroy(NULL);
  return NULL;
}
static void test_bad_arguments(void) { RUN_WITH_FIXTURE(1, bad_args_body); }

/* ---- multi-device programs ------------------------------------------------------ */

/* Sums x over `n` replicas and returns it with the replica's id, so a test
 * sees both the collective and which replica ran where. */
static void all_reduce_text(int n, char* out, size_t cap) {
  char groups[64] = "";
  for (int i = 0; i < n; i++)
    snprintf(groups + strlen(groups), sizeof groups - strlen(groups), "%s%d", i ? ", " : "", i);
  snprintf(out, cap,
           "module @all_reduce {\n"
           "  func.func public @main(%%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<i32>) {\n"
           "    %%0 = \"stablehlo.all_reduce\"(%%x) ({\n"
           "    ^bb0(%%a: tensor<f32>, %%b: tensor<f32>):\n"
           "      %%s = \"stablehlo.add\"(%%a, %%b) : (tensor<f32>, tensor<f32>) -> tensor<f32>\n"
           "      \"stablehlo.return\"(%%s) : (tensor<f32>) -> ()\n"
           "    }) {replica_groups = dense<[[%s]]> : tensor<1x%dxi64>} : (tensor<4xf32>) -> "
           "tensor<4xf32>\n"
           "    %%1 = \"stablehlo.replica_id\"() : () -> tensor<ui32>\n"
           "    %%2 = \"stablehlo.convert\"(%%1) : (tensor<ui32>) -> tensor<i32>\n"
           "    \"func.return\"(%%0, %%2) : (tensor<4xf32>, tensor<i32>) -> ()\n"
           "  }\n"
           "}\n",
           groups, n);
}

static int id_of(tpu_client_t* client, int index) {
  tpu_device_t* device = NULL;
  tpu_status_free(tpu_client_device(client, index, &device));
  return device ? tpu_device_id(device) : -1;
}

static tpu_status_t compile_replicated(tpu_client_t* client, const int* indices, int n,
                                       tpu_executable_t** out) {
  char text[2048];
  all_reduce_text(n, text, sizeof text);
  int ids[8];
  for (int d = 0; d < n; d++) ids[d] = id_of(client, indices[d]);
  tpu_compile_options_t options = {.num_replicas = n, .device_ids = ids, .num_device_ids = n};
  return tpu_executable_compile(client, text, strlen(text), &options, out);
}

/* Four replicas on the four devices: each gets the sum of all four inputs
 * and its own replica id; every result lives on its replica's device. */
static tpu_status_t multi_body(fixture_t* f) {
  const int devices[4] = {0, 1, 2, 3};
  TPU_RETURN_IF_ERROR(compile_replicated(f->client, devices, 4, &f->exe[0]));
  tpu_executable_t* exe = f->exe[0];
  EXPECT(tpu_executable_num_devices(exe) == 4 && !tpu_executable_portable(exe),
         "num devices %d", tpu_executable_num_devices(exe));
  for (int d = 0; d < 4; d++)
    EXPECT(tpu_executable_device_index(exe, d) == d, "device %d runs on %d", d,
           tpu_executable_device_index(exe, d));
  tpu_buffer_t* lists[4][1];
  for (int d = 0; d < 4; d++) {
    const float x[4] = {1.0f * (d + 1), 2.0f * (d + 1), 3.0f * (d + 1), 4.0f * (d + 1)};
    TPU_RETURN_IF_ERROR(upload(f->client, d, x, TPU_DTYPE_FLOAT32, 4, 0, 1, &f->buf[d]));
    lists[d][0] = f->buf[d];
  }
  tpu_buffer_t* const* args[4] = {lists[0], lists[1], lists[2], lists[3]};
  tpu_event_t* done[4];
  TPU_RETURN_IF_ERROR(tpu_executable_execute_multi(exe, 4, args, 1, &f->buf[4], done));
  tpu_status_t status = NULL;
  for (int d = 0; d < 4; d++) {
    tpu_status_t s = tpu_event_await(done[d]);
    tpu_event_destroy(done[d]);
    if (!status) status = s; else tpu_status_free(s);
  }
  TPU_RETURN_IF_ERROR(status);
  for (int d = 0; d < 4; d++) {
    tpu_buffer_t* sum = f->buf[4 + 2 * d];
    tpu_buffer_t* replica = f->buf[5 + 2 * d];
    EXPECT(tpu_buffer_device_index(sum) == d && tpu_buffer_device_index(replica) == d,
           "device %d's results are elsewhere", d);
    float got[4];
    int32_t id = -1;
    TPU_RETURN_IF_ERROR(tpu_buffer_to_host(sum, got, sizeof got));
    TPU_RETURN_IF_ERROR(tpu_buffer_to_host(replica, &id, sizeof id));
    EXPECT(got[0] == 10 && got[1] == 20 && got[2] == 30 && got[3] == 40,
           "device %d: sum %g %g %g %g", d, got[0], got[1], got[2], got[3]);
    EXPECT(id == d, "device %d ran replica %d", d, id);
  }
  return NULL;
}
static void test_execute_multi_four_replicas(void) { RUN_WITH_FIXTURE(4, multi_body); }

/* Two replicas on devices 3 and 1, in that order: replica 0 runs on device
 * 3. Arguments on the wrong devices, lists of the wrong count, and
 * single-device calls are refused before anything runs. */
static tpu_status_t subset_body(fixture_t* f) {
  const int devices[2] = {3, 1};
  TPU_RETURN_IF_ERROR(compile_replicated(f->client, devices, 2, &f->exe[0]));
  tpu_executable_t* exe = f->exe[0];
  EXPECT(tpu_executable_num_devices(exe) == 2 && tpu_executable_device_index(exe, 0) == 3 &&
             tpu_executable_device_index(exe, 1) == 1 && tpu_executable_device_index(exe, 2) == -1,
         "assignment");
  const float a[4] = {1, 2, 3, 4}, b[4] = {2, 4, 6, 8};
  TPU_RETURN_IF_ERROR(upload(f->client, 3, a, TPU_DTYPE_FLOAT32, 4, 0, 1, &f->buf[0]));
  TPU_RETURN_IF_ERROR(upload(f->client, 1, b, TPU_DTYPE_FLOAT32, 4, 0, 1, &f->buf[1]));
  tpu_buffer_t* const* args[2] = {&f->buf[0], &f->buf[1]};
  TPU_RETURN_IF_ERROR(tpu_executable_execute_multi(exe, 2, args, 1, &f->buf[2], NULL));
  const int want_device[2] = {3, 1};
  for (int d = 0; d < 2; d++) {
    float got[4];
    int32_t id = -1;
    TPU_RETURN_IF_ERROR(tpu_buffer_to_host(f->buf[2 + 2 * d], got, sizeof got));
    TPU_RETURN_IF_ERROR(tpu_buffer_to_host(f->buf[3 + 2 * d], &id, sizeof id));
    EXPECT(got[0] == 3 && got[1] == 6 && got[2] == 9 && got[3] == 12, "list %d: sum", d);
    EXPECT(id == d && tpu_buffer_device_index(f->buf[2 + 2 * d]) == want_device[d],
           "list %d: replica %d on device %d", d, id, tpu_buffer_device_index(f->buf[2 + 2 * d]));
  }

  tpu_buffer_t* out[4] = {NULL};
  tpu_buffer_t* const* swapped[2] = {&f->buf[1], &f->buf[0]};
  tpu_status_t s = tpu_executable_execute_multi(exe, 2, swapped, 1, out, NULL);
  bool refused = tpu_status_code(s) == TPU_STATUS_INVALID_ARGUMENT &&
                 strstr(tpu_status_message(s), "argument 0 of device list 0 is on device 1") &&
                 strstr(tpu_status_message(s), "on device 3") && !out[0];
  tpu_status_free(s);
  EXPECT(refused, "arguments on the wrong devices ran");
  s = tpu_executable_execute_multi(exe, 1, args, 1, out, NULL);
  refused = tpu_status_code(s) == TPU_STATUS_INVALID_ARGUMENT;
  tpu_status_free(s);
  EXPECT(refused, "one argument list for two devices ran");
  s = tpu_executable_execute(exe, 3, &f->buf[0], 1, NULL, out, NULL);
  refused = tpu_status_code(s) == TPU_STATUS_INVALID_ARGUMENT &&
            strstr(tpu_status_message(s), "tpu_executable_execute_multi");
  tpu_status_free(s);
  EXPECT(refused, "a two-device program ran on one device");

  /* A portable executable has no devices of its own. */
  TPU_RETURN_IF_ERROR(compile(f->client, kAdd4, true, &f->exe[1]));
  tpu_buffer_t* const* pair[1] = {f->buf};
  s = tpu_executable_execute_multi(f->exe[1], 1, pair, 2, out, NULL);
  refused = tpu_status_code(s) == TPU_STATUS_INVALID_ARGUMENT;
  tpu_status_free(s);
  EXPECT(refused, "a portable program ran through execute_multi");
  /* Options that contradict each other never reach the plugin. */
  char text[2048];
  all_reduce_text(2, text, sizeof text);
  tpu_compile_options_t portable = {.portable = true, .num_replicas = 2};
  s = tpu_executable_compile(f->client, text, strlen(text), &portable, &f->exe[2]);
  refused = tpu_status_code(s) == TPU_STATUS_INVALID_ARGUMENT && !f->exe[2];
  tpu_status_free(s);
  EXPECT(refused, "a portable two-replica program compiled");
  return NULL;
}
static void test_execute_multi_on_a_device_subset(void) { RUN_WITH_FIXTURE(4, subset_body); }

/* One SPMD program over two partitions: unannotated arguments are
 * replicated, so each partition computes the whole sum. */
static tpu_status_t spmd_body(fixture_t* f) {
  const int ids[2] = {id_of(f->client, 0), id_of(f->client, 1)};
  tpu_compile_options_t options = {
      .num_partitions = 2, .spmd = true, .device_ids = ids, .num_device_ids = 2};
  TPU_RETURN_IF_ERROR(
      tpu_executable_compile(f->client, kAdd4, strlen(kAdd4), &options, &f->exe[0]));
  EXPECT(tpu_executable_num_devices(f->exe[0]) == 2, "spmd devices");
  const float a[4] = {1, 2, 3, 4}, b[4] = {10, 20, 30, 40};
  for (int d = 0; d < 2; d++) {
    TPU_RETURN_IF_ERROR(upload(f->client, d, a, TPU_DTYPE_FLOAT32, 4, 0, 1, &f->buf[2 * d]));
    TPU_RETURN_IF_ERROR(upload(f->client, d, b, TPU_DTYPE_FLOAT32, 4, 0, 1, &f->buf[2 * d + 1]));
  }
  tpu_buffer_t* const* args[2] = {&f->buf[0], &f->buf[2]};
  TPU_RETURN_IF_ERROR(tpu_executable_execute_multi(f->exe[0], 2, args, 2, &f->buf[4], NULL));
  for (int d = 0; d < 2; d++) {
    float got[4];
    TPU_RETURN_IF_ERROR(tpu_buffer_to_host(f->buf[4 + d], got, sizeof got));
    EXPECT(got[0] == 11 && got[3] == 44 && tpu_buffer_device_index(f->buf[4 + d]) == d,
           "partition %d", d);
  }
  return NULL;
}
static void test_execute_multi_spmd_partitions(void) { RUN_WITH_FIXTURE(2, spmd_body); }

/* Whole and range reads of an output still being computed (presumed
 * ready, as program.c marks a trusted execution's), through PJRT's copies
 * (other plugins' path) and through memcpy (the CPU plugin's): both wait
 * for the contents. */
static tpu_status_t presumed_reads_body(fixture_t* f) {
  enum { N = 8 << 20 }; /* ~10 ms of multiplies: still running on return */
  char text[1024];
  snprintf(text, sizeof text,
           "module @mul {\n  func.func public @main(%%arg0: tensor<%dxf32>) -> tensor<%dxf32> {\n"
           "    %%0 = \"stablehlo.multiply\"(%%arg0, %%arg0) : (tensor<%dxf32>, tensor<%dxf32>)"
           " -> tensor<%dxf32>\n    \"func.return\"(%%0) : (tensor<%dxf32>) -> ()\n  }\n}\n",
           N, N, N, N, N, N);
  TPU_RETURN_IF_ERROR(compile(f->client, text, true, &f->exe[0]));
  float* host = malloc((size_t)N * sizeof *host);
  EXPECT(host != NULL, "out of memory");
  for (int64_t i = 0; i < N; i++) host[i] = (float)(i % 1000);
  tpu_status_t s = upload(f->client, 0, host, TPU_DTYPE_FLOAT32, N, 0, 1, &f->buf[0]);
  int64_t wrong = 0;
  for (int round = 0; round < 4 && !s; round++) {
    tpu_buffer_set_force_pjrt_reads(round < 2);
    s = tpu_executable_execute(f->exe[0], 0, f->buf, 1, NULL, &f->buf[1], NULL);
    if (s) break;
    tpu_buffer_set_presumed_ready(f->buf[1]);
    if (round % 2 == 0) {
      memset(host, 0xff, (size_t)N * sizeof *host);
      s = tpu_buffer_to_host(f->buf[1], host, (size_t)N * sizeof *host);
      for (int64_t i = 0; !s && i < N; i++)
        wrong += host[i] != (float)(i % 1000) * (float)(i % 1000);
    } else {
      float tail[4] = {-1, -1, -1, -1};
      s = tpu_buffer_to_host_range(f->buf[1], (size_t)(N - 4) * sizeof(float), tail, sizeof tail);
      for (int i = 0; !s && i < 4; i++) {
        float v = (float)((N - 4 + i) % 1000);
        wrong += tail[i] != v * v;
      }
    }
    tpu_buffer_destroy(f->buf[1]);
    f->buf[1] = NULL;
  }
  tpu_buffer_set_force_pjrt_reads(false);
  free(host);
  TPU_RETURN_IF_ERROR(s);
  EXPECT(wrong == 0, "%lld values read before they were computed", (long long)wrong);
  return NULL;
}
static void test_presumed_output_reads_wait(void) { RUN_WITH_FIXTURE(1, presumed_reads_body); }

TPU_TEST_MAIN(TPU_TEST(test_compile_options_encoding), TPU_TEST(test_add),
              TPU_TEST(test_presumed_output_reads_wait),
              TPU_TEST(test_dot_general), TPU_TEST(test_reduce),
              TPU_TEST(test_compare_select), TPU_TEST(test_malformed_program),
              TPU_TEST(test_serialize_roundtrip), TPU_TEST(test_donation),
              TPU_TEST(test_programs_without_aliasing),
              TPU_TEST(test_execute_on_second_device),
              TPU_TEST(test_every_dtype_through_a_program),
              TPU_TEST(test_bad_arguments), TPU_TEST(test_execute_multi_four_replicas),
              TPU_TEST(test_execute_multi_on_a_device_subset),
              TPU_TEST(test_execute_multi_spmd_partitions))
