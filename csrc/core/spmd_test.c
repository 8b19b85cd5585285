/* Programs partitioned by XLA over the CPU plugin's devices: a sum whose
 * input is split by rows needs a cross-device reduction that XLA inserts,
 * and every device gets the exact whole result; the sharded graph's text;
 * device-to-device storage copies; the program cache; refused calls. The
 * binary runs with four devices (TORCHTPU_NUM_DEVICES=4, set before the
 * runtime starts). */
#include "spmd.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "graph.h"
#include "metrics.h"
#include "program.h"
#include "runtime.h"
#include "runtime_testing.h"
#include "storage.h"
#include "testing.h"

static bool start(void) { return tpu_testing_start_devices(4); }

/* column sums of x [8,4] @ w [4,2]: rows of x split over 4 partitions. */
static const char kColumnSums[] =
    "module @m {\n"
    "  func.func public @main(%arg0: tensor<8x4xf32> {mhlo.sharding = \"{devices=[4,1]0,1,2,3}\"},"
    " %arg1: tensor<4x2xf32> {mhlo.sharding = \"{replicated}\"}) -> (tensor<2xf32>) {\n"
    "    %0 = \"stablehlo.dot_general\"(%arg0, %arg1) {dot_dimension_numbers = "
    "#stablehlo.dot<lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [0]>} : "
    "(tensor<8x4xf32>, tensor<4x2xf32>) -> tensor<8x2xf32>\n"
    "    %1 = \"stablehlo.constant\"() {value = dense<0.0> : tensor<f32>} : () -> tensor<f32>\n"
    "    %2 = \"stablehlo.reduce\"(%0, %1) ({\n"
    "    ^bb0(%a: tensor<f32>, %b: tensor<f32>):\n"
    "      %3 = \"stablehlo.add\"(%a, %b) : (tensor<f32>, tensor<f32>) -> tensor<f32>\n"
    "      \"stablehlo.return\"(%3) : (tensor<f32>) -> ()\n"
    "    }) {dimensions = array<i64: 0>} : (tensor<8x2xf32>, tensor<f32>) -> tensor<2xf32>\n"
    "    \"func.return\"(%2) : (tensor<2xf32>) -> ()\n"
    "  }\n"
    "}\n";

static void test_partitioned_sum_is_exact_on_every_device(void) {
  CHECK(start());
  const int devices[4] = {0, 1, 2, 3};
  tpu_spmd_program_t* p = NULL;
  CHECK_OK(tpu_spmd_program_get(kColumnSums, sizeof kColumnSums - 1, devices, 4, &p));
  CHECK_EQ(tpu_spmd_program_num_devices(p), 4);
  CHECK_EQ(tpu_spmd_program_num_outputs(p), 1);
  tpu_hlo_type_t out_type = tpu_spmd_program_output_type(p, 0);
  CHECK(out_type.rank == 1 && out_type.dims[0] == 2); /* replicated: the whole value */
  float x[8][4], w[4][2] = {{1, 0}, {0, 1}, {1, 1}, {2, -1}};
  for (int r = 0; r < 8; r++)
    for (int c = 0; c < 4; c++) x[r][c] = (float)(r * 4 + c);
  float want[2] = {0, 0};
  for (int r = 0; r < 8; r++)
    for (int j = 0; j < 2; j++)
      for (int c = 0; c < 4; c++) want[j] += x[r][c] * w[c][j];
  tpu_storage_t* in[8] = {NULL};
  tpu_storage_t* out[4] = {NULL};
  tpu_hlo_type_t types[8];
  int64_t shard_dims[2] = {2, 4}, w_dims[2] = {4, 2};
  for (int d = 0; d < 4; d++) {
    CHECK_OK(tpu_storage_create(d, sizeof x[0] * 2, &in[2 * d]));
    CHECK_OK(tpu_storage_write_host(in[2 * d], x[2 * d], TPU_DTYPE_FLOAT32, shard_dims, 2, NULL));
    CHECK_OK(tpu_storage_create(d, sizeof w, &in[2 * d + 1]));
    CHECK_OK(tpu_storage_write_host(in[2 * d + 1], w, TPU_DTYPE_FLOAT32, w_dims, 2, NULL));
    types[2 * d] = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 2, shard_dims);
    types[2 * d + 1] = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 2, w_dims);
    CHECK_OK(tpu_storage_create(d, 2 * sizeof(float), &out[d]));
  }
  int64_t runs = tpu_metrics_get("spmd_executions");
  CHECK_OK(tpu_spmd_program_run(p, in, types, 2, out, 1));
  CHECK_EQ(tpu_metrics_get("spmd_executions"), runs + 1);
  for (int d = 0; d < 4; d++) {
    float got[2];
    CHECK_OK(tpu_storage_read_bytes(out[d], got, sizeof got));
    CHECK(got[0] == want[0] && got[1] == want[1]);
  }
  /* An argument on the wrong device is refused, naming it. */
  tpu_storage_t* swapped[8];
  memcpy(swapped, in, sizeof in);
  swapped[2] = in[0];
  tpu_status_t s = tpu_spmd_program_run(p, swapped, types, 2, out, 1);
  CHECK(s && tpu_status_code(s) == TPU_STATUS_INVALID_ARGUMENT);
  CHECK_STR_CONTAINS(tpu_status_message(s), "argument 0 of partition 1 is on device 0");
  tpu_status_free(s);
  s = tpu_spmd_program_run(p, in, types, 2, out, 2);
  CHECK(s && tpu_status_code(s) == TPU_STATUS_INVALID_ARGUMENT);
  tpu_status_free(s);
  for (int i = 0; i < 8; i++) tpu_storage_release(in[i]);
  for (int d = 0; d < 4; d++) tpu_storage_release(out[d]);
}

static void test_programs_are_cached_per_device_list(void) {
  CHECK(start());
  const int devices[4] = {0, 1, 2, 3}, reversed[4] = {3, 2, 1, 0};
  tpu_spmd_program_t *a = NULL, *b = NULL, *c = NULL;
  CHECK_OK(tpu_spmd_program_get(kColumnSums, sizeof kColumnSums - 1, devices, 4, &a));
  int64_t compiles = tpu_metrics_get("spmd_compiles");
  CHECK_OK(tpu_spmd_program_get(kColumnSums, sizeof kColumnSums - 1, devices, 4, &b));
  CHECK(a == b);
  CHECK_EQ(tpu_metrics_get("spmd_compiles"), compiles);
  CHECK_OK(tpu_spmd_program_get(kColumnSums, sizeof kColumnSums - 1, reversed, 4, &c));
  CHECK(c != a);
  CHECK_EQ(tpu_metrics_get("spmd_compiles"), compiles + 1);
  const int twice[2] = {1, 1};
  tpu_status_t s = tpu_spmd_program_get(kColumnSums, sizeof kColumnSums - 1, twice, 2, &c);
  CHECK(s && tpu_status_code(s) == TPU_STATUS_INVALID_ARGUMENT);
  CHECK_STR_CONTAINS(tpu_status_message(s), "listed twice");
  tpu_status_free(s);
  const int five[5] = {0, 1, 2, 3, 4};
  s = tpu_spmd_program_get(kColumnSums, sizeof kColumnSums - 1, five, 5, &c);
  CHECK(s && tpu_status_code(s) == TPU_STATUS_INVALID_ARGUMENT);
  tpu_status_free(s);
}

static void test_sharded_graph_text(void) {
  CHECK(start());
  int64_t dims[2] = {8, 4}, one = 1;
  tpu_hlo_type_t in[3] = {tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 2, dims),
                          tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 2, dims),
                          tpu_hlo_type_make(TPU_DTYPE_INT64, 1, &one)};
  tpu_graph_t* g = NULL;
  CHECK_OK(tpu_graph_create(in, 3, false, &g));
  int outs[2] = {1, 2};
  char *text = NULL, *sharded = NULL;
  size_t len = 0, sharded_len = 0;
  CHECK_OK(tpu_graph_finish(g, outs, 2, &text, &len));
  tpu_graph_destroy(g);
  const char* shardings[3] = {"{devices=[4,1]0,1,2,3}", NULL, NULL};
  CHECK_OK(tpu_graph_shard_text(text, len, in, shardings, 3, &sharded, &sharded_len));
  CHECK_EQ(strlen(sharded), sharded_len);
  /* shaped parameters with their shardings; the reshapes that read them
   * now take the shaped value; results in their own shape (flat on
   * plugins whose buffers cannot be: tpu_storage_shapes_free) */
  CHECK_STR_CONTAINS(sharded,
                     "%arg0: tensor<8x4xf32> {mhlo.sharding = \"{devices=[4,1]0,1,2,3}\"},");
  CHECK_STR_CONTAINS(sharded, "%arg1: tensor<8x4xf32> {mhlo.sharding = \"{replicated}\"},");
  CHECK_STR_CONTAINS(sharded, "%arg2: tensor<1xi64> {mhlo.sharding = \"{replicated}\"})");
  CHECK_STR_CONTAINS(sharded, "\"stablehlo.reshape\"(%arg1) : (tensor<8x4xf32>) -> tensor<8x4xf32>");
  CHECK_STR_CONTAINS(sharded, tpu_storage_shapes_free() ? "-> (tensor<8x4xf32>, tensor<1xi64>)"
                                                        : "-> (tensor<32xf32>, tensor<1xi64>)");
  CHECK(!strstr(sharded, "tensor<32xf32> {"));
  /* XLA accepts it and partitions it */
  const int devices[4] = {0, 1, 2, 3};
  tpu_spmd_program_t* p = NULL;
  CHECK_OK(tpu_spmd_program_get(sharded, sharded_len, devices, 4, &p));
  free(sharded);
  const char* bad[3] = {"{replicated}\" evil", NULL, NULL};
  tpu_status_t s = tpu_graph_shard_text(text, len, in, bad, 3, &sharded, &sharded_len);
  CHECK(s && tpu_status_code(s) == TPU_STATUS_INVALID_ARGUMENT);
  tpu_status_free(s);
  /* another graph's types: not this text */
  tpu_hlo_type_t other = tpu_hlo_type_make(TPU_DTYPE_FLOAT64, 2, dims);
  s = tpu_graph_shard_text(text, len, &other, NULL, 1, &sharded, &sharded_len);
  CHECK(s && tpu_status_code(s) == TPU_STATUS_INVALID_ARGUMENT);
  CHECK_STR_CONTAINS(tpu_status_message(s), "parameter 0 is not tensor<32xf64>");
  tpu_status_free(s);
  free(text);
}

static void test_storage_copy_between_devices(void) {
  CHECK(start());
  float x[6] = {1, -2, 3.5f, 4, 5, 6}, got[6];
  int64_t six = 6;
  tpu_storage_t *a = NULL, *b = NULL, *never = NULL, *same = NULL;
  CHECK_OK(tpu_storage_create(0, sizeof x, &a));
  CHECK_OK(tpu_storage_write_host(a, x, TPU_DTYPE_FLOAT32, &six, 1, NULL));
  CHECK_OK(tpu_storage_create(2, sizeof x, &b));
  int64_t moved = tpu_metrics_get("bytes_device_to_device");
  CHECK_OK(tpu_storage_copy_to_device(b, a));
  CHECK_EQ(tpu_metrics_get("bytes_device_to_device"), moved + (int64_t)sizeof x);
  CHECK_OK(tpu_storage_read_bytes(b, got, sizeof got));
  CHECK(memcmp(got, x, sizeof x) == 0);
  CHECK_EQ(tpu_buffer_device_index(tpu_storage_buffer(b)), 2);
  /* never written: zeros */
  CHECK_OK(tpu_storage_create(1, sizeof x, &never));
  CHECK_OK(tpu_storage_copy_to_device(b, never));
  CHECK_OK(tpu_storage_read_bytes(b, got, sizeof got));
  for (int i = 0; i < 6; i++) CHECK(got[i] == 0.0f);
  /* the same device, or another size: refused */
  CHECK_OK(tpu_storage_create(0, sizeof x, &same));
  tpu_status_t s = tpu_storage_copy_to_device(same, a);
  CHECK(s && tpu_status_code(s) == TPU_STATUS_INVALID_ARGUMENT);
  tpu_status_free(s);
  tpu_buffer_t* copy = NULL;
  s = tpu_buffer_copy_to_device(tpu_storage_buffer(a), 0, &copy);
  CHECK(s && tpu_status_code(s) == TPU_STATUS_INVALID_ARGUMENT && !copy);
  tpu_status_free(s);
  s = tpu_buffer_copy_to_device(tpu_storage_buffer(a), 9, &copy);
  CHECK(s && tpu_status_code(s) == TPU_STATUS_OUT_OF_RANGE);
  tpu_status_free(s);
  tpu_storage_release(a);
  tpu_storage_release(b);
  tpu_storage_release(never);
  tpu_storage_release(same);
}

/* Last: the programs go before the client they belong to. */
static void test_cleanup(void) {
  tpu_spmd_cache_clear();
  tpu_program_cache_clear();
  tpu_runtime_shutdown();
}

TPU_TEST_MAIN(TPU_TEST(test_partitioned_sum_is_exact_on_every_device),
              TPU_TEST(test_programs_are_cached_per_device_list), TPU_TEST(test_sharded_graph_text),
              TPU_TEST(test_storage_copy_between_devices), TPU_TEST(test_cleanup))
