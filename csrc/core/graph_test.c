#include "graph.h"

#include <math.h>
#include <stdlib.h>

#include "pjrt/pjrt.h"
#include "program.h"
#include "runtime.h"
#include "testing.h"

static tpu_graph_arg_t tensor(int value) {
  return (tpu_graph_arg_t){.lower = {.kind = TPU_ARG_TENSOR}, .value = value};
}

static tpu_graph_arg_t scalar_f(double f) {
  tpu_graph_arg_t a = {.lower = {.kind = TPU_ARG_SCALAR, .wrapped_number = true}, .f = f};
  a.lower.type = tpu_hlo_type_scalar(TPU_DTYPE_FLOAT64);
  return a;
}

/* Compiles `text` and runs it on host inputs; outputs downloaded. */
static tpu_status_t run(const char* text, size_t len, const tpu_hlo_type_t* in_types,
                        const void* const* in_data, int nin, void** out, const size_t* out_bytes,
                        int nout) {
  TPU_RETURN_IF_ERROR(tpu_runtime_init(NULL));
  tpu_program_t* program = NULL;
  TPU_RETURN_IF_ERROR(tpu_program_get(text, len, &program));
  tpu_buffer_t* in[8] = {0};
  tpu_buffer_t* res[8] = {0};
  tpu_status_t s = NULL;
  /* Parameters are flat, like storages' buffers. */
  for (int k = 0; k < nin && !s; k++) {
    int64_t n = 1;
    for (int d = 0; d < in_types[k].rank; d++) n *= in_types[k].dims[d];
    s = tpu_buffer_from_host(tpu_runtime_client(), 0, in_data[k], in_types[k].dtype, &n, 1, NULL,
                             &in[k]);
  }
  if (!s) s = tpu_program_execute(program, 0, in, nin, res);
  for (int i = 0; i < nout && !s; i++) s = tpu_buffer_to_host(res[i], out[i], out_bytes[i]);
  for (int k = 0; k < 8; k++) {
    tpu_buffer_destroy(in[k]);
    tpu_buffer_destroy(res[k]);
  }
  return s;
}

/* relu(x + 2 * y) @ w, returning the sum too: three nodes sharing values,
 * one of them feeding two consumers, a broadcast and a constant scalar. */
static void test_chain_of_nodes_is_one_program(void) {
  int64_t d23[2] = {2, 3}, d3[1] = {3}, d32[2] = {3, 2}, d22[2] = {2, 2};
  tpu_hlo_type_t in[3] = {tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 2, d23),
                          tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 1, d3),
                          tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 2, d32)};
  tpu_graph_t* g = NULL;
  CHECK_OK(tpu_graph_create(in, 3, false, &g));
  int sum, act, prod;
  tpu_graph_arg_t add_args[3] = {tensor(0), tensor(1), scalar_f(2.0)};
  CHECK_OK(tpu_graph_add_node(g, "aten::add.Tensor", add_args, 3, NULL, 0, &in[0], 1, &sum));
  tpu_graph_arg_t relu_args[1] = {tensor(sum)};
  CHECK_OK(tpu_graph_add_node(g, "aten::relu", relu_args, 1, NULL, 0, &in[0], 1, &act));
  tpu_graph_arg_t mm_args[2] = {tensor(act), tensor(2)};
  tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 2, d22);
  CHECK_OK(tpu_graph_add_node(g, "aten::mm", mm_args, 2, NULL, 0, &out, 1, &prod));
  CHECK_EQ(tpu_graph_num_values(g), 6);
  CHECK(tpu_graph_value_type(g, prod).dims[1] == 2);
  int results[2] = {prod, sum};
  char* text = NULL;
  size_t len = 0;
  CHECK_OK(tpu_graph_finish(g, results, 2, &text, &len));
  tpu_graph_destroy(g);
  float x[6] = {1, -5, 3, -4, 5, -6}, y[3] = {1, 1, 1}, w[6] = {1, 2, 3, 4, 5, 6};
  const void* data[3] = {x, y, w};
  float r_prod[4], r_sum[6];
  void* outs[2] = {r_prod, r_sum};
  size_t bytes[2] = {sizeof r_prod, sizeof r_sum};
  tpu_status_t s = run(text, len, in, data, 3, outs, bytes, 2);
  free(text);
  CHECK_OK(s);
  float a[6];
  for (int i = 0; i < 6; i++) {
    CHECK(r_sum[i] == x[i] + 2 * y[i % 3]);
    a[i] = r_sum[i] > 0 ? r_sum[i] : 0;
  }
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 2; j++) {
      float want = 0;
      for (int k = 0; k < 3; k++) want += a[i * 3 + k] * w[k * 2 + j];
      CHECK(fabsf(r_prod[i * 2 + j] - want) < 1e-5f);
    }
}

/* cat takes a tensor list: values by id through values[]. */
static void test_tensor_list_argument(void) {
  int64_t d2[1] = {2}, d4[1] = {4};
  tpu_hlo_type_t in[1] = {tpu_hlo_type_make(TPU_DTYPE_INT64, 1, d2)};
  tpu_graph_t* g = NULL;
  CHECK_OK(tpu_graph_create(in, 1, false, &g));
  int neg, cat;
  tpu_graph_arg_t neg_args[1] = {tensor(0)};
  CHECK_OK(tpu_graph_add_node(g, "aten::neg", neg_args, 1, NULL, 0, &in[0], 1, &neg));
  int members[2] = {0, neg};
  tpu_graph_arg_t cat_args[2] = {
      {.lower = {.kind = TPU_ARG_TENSORS, .num_tensors = 2}, .list_start = 0},
      {.lower = {.kind = TPU_ARG_INT, .i = 0}}};
  tpu_hlo_type_t out = tpu_hlo_type_make(TPU_DTYPE_INT64, 1, d4);
  CHECK_OK(tpu_graph_add_node(g, "aten::cat", cat_args, 2, members, 2, &out, 1, &cat));
  char* text = NULL;
  size_t len = 0;
  CHECK_OK(tpu_graph_finish(g, &cat, 1, &text, &len));
  tpu_graph_destroy(g);
  int64_t x[2] = {7, -3}, r[4];
  const void* data[1] = {x};
  void* outs[1] = {r};
  size_t bytes[1] = {sizeof r};
  tpu_status_t s = run(text, len, in, data, 1, outs, bytes, 1);
  free(text);
  CHECK_OK(s);
  CHECK(r[0] == 7 && r[1] == -3 && r[2] == -7 && r[3] == 3);
}

/* Random nodes thread the generator state: two draws differ, the state
 * comes back advanced by the elements drawn. */
static void test_rng_state_is_threaded(void) {
  int64_t d[1] = {64}, two = 2;
  tpu_hlo_type_t in[1] = {tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 1, d)};
  CHECK(tpu_graph_op_needs_rng("aten::uniform_"));
  CHECK(!tpu_graph_op_needs_rng("aten::add.Tensor"));
  tpu_graph_t* g = NULL;
  CHECK_OK(tpu_graph_create(in, 1, false, &g));
  int u1;
  tpu_graph_arg_t u_args[3] = {tensor(0), scalar_f(0.0), scalar_f(1.0)};
  tpu_status_t s = tpu_graph_add_node(g, "aten::uniform", u_args, 3, NULL, 0, in, 1, &u1);
  CHECK(s != NULL); /* no generator state */
  CHECK_STR_CONTAINS(tpu_status_message(s), "generator");
  tpu_status_free(s);
  tpu_graph_destroy(g);

  CHECK_OK(tpu_graph_create(in, 1, true, &g));
  int u2;
  CHECK_OK(tpu_graph_add_node(g, "aten::uniform", u_args, 3, NULL, 0, in, 1, &u1));
  CHECK_OK(tpu_graph_add_node(g, "aten::uniform", u_args, 3, NULL, 0, in, 1, &u2));
  int results[2] = {u1, u2};
  char* text = NULL;
  size_t len = 0;
  CHECK_OK(tpu_graph_finish(g, results, 2, &text, &len));
  tpu_graph_destroy(g);
  tpu_hlo_type_t types[2] = {in[0], tpu_hlo_type_make(TPU_DTYPE_INT64, 1, &two)};
  float x[64] = {0}, a[64], b[64];
  int64_t state[2] = {42, 0}, next[2];
  const void* data[2] = {x, state};
  void* outs[3] = {a, b, next};
  size_t bytes[3] = {sizeof a, sizeof b, sizeof next};
  s = run(text, len, types, data, 2, outs, bytes, 3);
  free(text);
  CHECK_OK(s);
  int same = 0;
  for (int i = 0; i < 64; i++) {
    CHECK(a[i] >= 0 && a[i] < 1 && b[i] >= 0 && b[i] < 1);
    same += a[i] == b[i];
  }
  CHECK(same < 4);
  CHECK(next[0] == 42 && next[1] == 128);
}

static void test_errors_name_the_op(void) {
  int64_t d[1] = {3};
  tpu_hlo_type_t in[1] = {tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 1, d)};
  tpu_graph_t* g = NULL;
  CHECK_OK(tpu_graph_create(in, 1, false, &g));
  CHECK(!tpu_graph_op_supported("aten::no_such_op"));
  int v;
  tpu_graph_arg_t args[1] = {tensor(0)};
  tpu_status_t s = tpu_graph_add_node(g, "aten::no_such_op", args, 1, NULL, 0, in, 1, &v);
  CHECK(s && tpu_status_code(s) == TPU_STATUS_UNIMPLEMENTED);
  CHECK_STR_CONTAINS(tpu_status_message(s), "aten::no_such_op");
  tpu_status_free(s);
  /* The graph stays failed. */
  char* text = NULL;
  size_t len = 0;
  s = tpu_graph_finish(g, &v, 0, &text, &len);
  CHECK(s != NULL && text == NULL);
  tpu_status_free(s);
  tpu_graph_destroy(g);

  CHECK_OK(tpu_graph_create(in, 1, false, &g));
  tpu_graph_arg_t bad[1] = {tensor(9)};
  s = tpu_graph_add_node(g, "aten::neg", bad, 1, NULL, 0, in, 1, &v);
  CHECK(s != NULL);
  CHECK_STR_CONTAINS(tpu_status_message(s), "unknown value 9");
  tpu_status_free(s);
  tpu_graph_destroy(g);
}

TPU_TEST_MAIN(TPU_TEST(test_chain_of_nodes_is_one_program), TPU_TEST(test_tensor_list_argument),
              TPU_TEST(test_rng_state_is_threaded), TPU_TEST(test_errors_name_the_op))
