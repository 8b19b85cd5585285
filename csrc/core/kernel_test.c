#include "kernel.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "graph.h"
#include "pjrt/pjrt.h"
#include "program.h"
#include "runtime.h"
#include "testing.h"

/* As JAX writes them: a module with attributes, result attributes and a
 * private helper function. */
static const char kJaxLike[] =
    "module @jit_f attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {\n"
    "  func.func public @main(%arg0: tensor<2x3xf32>, %arg1: tensor<3xf32> "
    "{mhlo.layout_mode = \"default\"}) -> (tensor<2x3xf32> {jax.result_info = \"result[0]\"}, "
    "tensor<f32> {jax.result_info = \"result[1]\"}) {\n"
    "    %0 = stablehlo.broadcast_in_dim %arg1, dims = [1] : (tensor<3xf32>) -> tensor<2x3xf32>\n"
    "    %1 = call @twice(%0) : (tensor<2x3xf32>) -> tensor<2x3xf32>\n"
    "    %2 = stablehlo.add %arg0, %1 : tensor<2x3xf32>\n"
    "    %cst = stablehlo.constant dense<0.000000e+00> : tensor<f32>\n"
    "    %3 = stablehlo.reduce(%2 init: %cst) applies stablehlo.add across dimensions = [0, 1] "
    ": (tensor<2x3xf32>, tensor<f32>) -> tensor<f32>\n"
    "    return %2, %3 : tensor<2x3xf32>, tensor<f32>\n"
    "  }\n"
    "  func.func private @twice(%arg0: tensor<2x3xf32>) -> tensor<2x3xf32> {\n"
    "    %0 = stablehlo.add %arg0, %arg0 : tensor<2x3xf32>\n"
    "    return %0 : tensor<2x3xf32>\n"
    "  }\n"
    "}\n";

static void test_signature_and_renaming(void) {
  tpu_kernel_t* k = NULL;
  CHECK_OK(tpu_kernel_create("f", kJaxLike, strlen(kJaxLike), &k));
  CHECK_EQ(tpu_kernel_num_params(k), 2);
  CHECK_EQ(tpu_kernel_num_results(k), 2);
  CHECK(tpu_kernel_param(k, 1).rank == 1 && tpu_kernel_param(k, 1).dims[0] == 3);
  CHECK(tpu_kernel_result(k, 0).rank == 2 && tpu_kernel_result(k, 1).rank == 0);
  const char* fns = tpu_kernel_functions(k);
  CHECK(strstr(fns, "@main") == NULL);
  CHECK(strstr(fns, "public") == NULL);
  char want[64];
  snprintf(want, sizeof want, "func.func private @%s(", tpu_kernel_entry(k));
  CHECK_STR_CONTAINS(fns, want);
  CHECK(strstr(fns, "call @twice") == NULL); /* the helper is renamed too */
  CHECK(strstr(fns, "mhlo.num_partitions") == NULL);
  tpu_kernel_destroy(k);
}

static void test_flat_module_runs(void) {
  tpu_kernel_t* k = NULL;
  CHECK_OK(tpu_kernel_create("f", kJaxLike, strlen(kJaxLike), &k));
  char* text = NULL;
  size_t len = 0;
  CHECK_OK(tpu_kernel_flat_module(k, &text, &len));
  tpu_kernel_destroy(k);
  CHECK_OK(tpu_runtime_init(NULL));
  tpu_program_t* program = NULL;
  tpu_status_t s = tpu_program_get(text, len, &program);
  free(text);
  CHECK_OK(s);
  float x[6] = {1, 2, 3, 4, 5, 6}, y[3] = {10, 20, 30}, r[6], total;
  int64_t six = 6, three = 3;
  tpu_buffer_t* in[2] = {0};
  tpu_buffer_t* out[2] = {0};
  CHECK_OK(tpu_buffer_from_host(tpu_runtime_client(), 0, x, TPU_DTYPE_FLOAT32, &six, 1, NULL, &in[0]));
  CHECK_OK(tpu_buffer_from_host(tpu_runtime_client(), 0, y, TPU_DTYPE_FLOAT32, &three, 1, NULL, &in[1]));
  CHECK_OK(tpu_program_execute(program, 0, in, 2, out));
  CHECK_OK(tpu_buffer_to_host(out[0], r, sizeof r));
  CHECK_OK(tpu_buffer_to_host(out[1], &total, sizeof total));
  float want_total = 0;
  for (int i = 0; i < 6; i++) {
    CHECK(r[i] == x[i] + 2 * y[i % 3]);
    want_total += r[i];
  }
  CHECK(fabsf(total - want_total) < 1e-4f);
  for (int i = 0; i < 2; i++) {
    tpu_buffer_destroy(in[i]);
    tpu_buffer_destroy(out[i]);
  }
}

static void test_kernel_inside_a_graph(void) {
  tpu_kernel_t* k = NULL;
  CHECK_OK(tpu_kernel_create("f", kJaxLike, strlen(kJaxLike), &k));
  int64_t d23[2] = {2, 3}, d3[1] = {3};
  tpu_hlo_type_t in[2] = {tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 2, d23),
                          tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 1, d3)};
  tpu_graph_t* g = NULL;
  CHECK_OK(tpu_graph_create(in, 2, false, &g));
  int args[2] = {0, 1}, res[2], twice[2];
  CHECK_OK(tpu_graph_add_kernel(g, k, args, 2, res));
  CHECK_OK(tpu_graph_add_kernel(g, k, args, 2, twice)); /* functions added once */
  int swapped[2] = {1, 0};
  tpu_status_t s = tpu_graph_add_kernel(g, k, swapped, 2, res);
  CHECK(s != NULL);
  CHECK_STR_CONTAINS(tpu_status_message(s), "kernel argument 0 is tensor<3xf32>");
  tpu_status_free(s);
  tpu_graph_destroy(g);
  tpu_kernel_destroy(k);
}

static void test_bad_kernels_are_named(void) {
  tpu_kernel_t* k = NULL;
  tpu_status_t s = tpu_kernel_create("rmsnorm", "func.func @other() {}", 21, &k);
  CHECK(s && k == NULL);
  CHECK_STR_CONTAINS(tpu_status_message(s), "kernel 'rmsnorm'");
  tpu_status_free(s);
  const char dyn[] = "func.func @main(%a: tensor<?xf32>) -> tensor<?xf32> { return %a : tensor<?xf32> }";
  s = tpu_kernel_create("dyn", dyn, strlen(dyn), &k);
  CHECK(s != NULL);
  CHECK_STR_CONTAINS(tpu_status_message(s), "kernel 'dyn'");
  tpu_status_free(s);
}

TPU_TEST_MAIN(TPU_TEST(test_signature_and_renaming), TPU_TEST(test_flat_module_runs),
              TPU_TEST(test_kernel_inside_a_graph), TPU_TEST(test_bad_kernels_are_named))
