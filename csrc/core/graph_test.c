#include "graph.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "pjrt/pjrt.h"
#include "program.h"
#include "metrics.h"
#include "runtime.h"
#include "storage.h"
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

/* A one-node graph over flat f32[4] values: x + y * alpha. */
static char* add_graph(double alpha, size_t* len) {
  int64_t d4[1] = {4};
  tpu_hlo_type_t in[2] = {tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 1, d4),
                          tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 1, d4)};
  tpu_graph_t* g = NULL;
  char* text = NULL;
  int sum;
  tpu_graph_arg_t args[3] = {tensor(0), tensor(1), scalar_f(alpha)};
  if (tpu_graph_create(in, 2, false, &g) ||
      tpu_graph_add_node(g, "aten::add.Tensor", args, 3, NULL, 0, &in[0], 1, &sum) ||
      tpu_graph_finish(g, &sum, 1, &text, len))
    text = NULL;
  tpu_graph_destroy(g);
  return text;
}

static tpu_storage_t* f32x4(const float* v) {
  tpu_storage_t* s = NULL;
  int64_t n = 4;
  if (tpu_storage_create(0, 4 * sizeof(float), &s)) return NULL;
  if (v && tpu_storage_write_host(s, v, TPU_DTYPE_FLOAT32, &n, 1, NULL)) return NULL;
  return s;
}

/* Graphs called one after another join one deferred run: one program at
 * the read, values as run one by one; a graph the run already holds starts
 * the next run; ops are interned by text; kernel-calling text stays out. */
static void test_graphs_join_one_run(void) {
  CHECK_OK(tpu_runtime_init(NULL));
  size_t len1 = 0, len2 = 0;
  char* t1 = add_graph(2.0, &len1);
  char* t2 = add_graph(-1.0, &len2);
  CHECK(t1 && t2);
  int64_t d4[1] = {4};
  tpu_hlo_type_t types[2] = {tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 1, d4),
                             tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 1, d4)};
  const tpu_defer_op_t *op1 = NULL, *op2 = NULL, *again = NULL;
  CHECK_OK(tpu_graph_defer_op(t1, len1, types, 2, types, 1, false, &op1));
  CHECK_OK(tpu_graph_defer_op(t2, len2, types, 2, types, 1, false, &op2));
  CHECK_OK(tpu_graph_defer_op(t1, len1, types, 2, types, 1, false, &again));
  CHECK(op1 && op2 && op1 != op2 && again == op1 && op1->whole_graph);
  CHECK(op1->params[0].rank == 1 && op1->params[0].dims[0] == 4 && op1->num_results == 1);

  float xv[4] = {1, 2, 3, 4}, yv[4] = {10, 20, 30, 40};
  tpu_storage_t *x = f32x4(xv), *y = f32x4(yv), *a = f32x4(NULL), *b = f32x4(NULL);
  CHECK(x && y && a && b);
  int64_t execs = tpu_metrics_get("executions");
  tpu_storage_t* in1[2] = {x, y};
  CHECK_OK(tpu_graph_record(op1, 0, in1, 2, false, &a, 1)); /* a = x + 2y */
  tpu_storage_t* in2[2] = {a, x};
  CHECK_OK(tpu_graph_record(op2, 0, in2, 2, false, &b, 1)); /* b = a - x */
  CHECK_EQ(tpu_defer_pending_ops(0), 2);
  CHECK_EQ(tpu_metrics_get("executions"), execs);
  float got[4];
  CHECK_OK(tpu_storage_read_bytes(b, got, sizeof got)); /* flushes both */
  CHECK_EQ(tpu_defer_pending_ops(0), 0);
  CHECK_EQ(tpu_metrics_get("executions"), execs + 1);
  for (int i = 0; i < 4; i++) CHECK_EQ(got[i], 2 * yv[i]);

  /* op1 twice: the second call flushes the first run before joining. */
  int64_t loops = tpu_metrics_get("defer_flush::loop");
  CHECK_OK(tpu_graph_record(op1, 0, in1, 2, false, &a, 1));
  CHECK_OK(tpu_graph_record(op2, 0, in2, 2, false, &b, 1));
  tpu_storage_t* in3[2] = {b, b};
  CHECK_OK(tpu_graph_record(op1, 0, in3, 2, false, &a, 1)); /* a = 3b */
  CHECK_EQ(tpu_defer_pending_ops(0), 1);
  CHECK_EQ(tpu_metrics_get("defer_flush::loop"), loops + 1);
  CHECK_OK(tpu_storage_read_bytes(a, got, sizeof got));
  for (int i = 0; i < 4; i++) CHECK_EQ(got[i], 3 * 2 * yv[i]);

  /* At most 16 graphs a run: the 17th distinct one starts the next. */
  int64_t caps = tpu_metrics_get("defer_flush::cap");
  for (int k = 0; k < 17; k++) {
    size_t n = 0;
    char* t = add_graph(100.0 + k, &n);
    const tpu_defer_op_t* op = NULL;
    CHECK(t);
    CHECK_OK(tpu_graph_defer_op(t, n, types, 2, types, 1, false, &op));
    free(t);
    CHECK_OK(tpu_graph_record(op, 0, in1, 2, false, &a, 1));
  }
  CHECK_EQ(tpu_defer_pending_ops(0), 1);
  CHECK_EQ(tpu_metrics_get("defer_flush::cap"), caps + 1);
  CHECK_OK(tpu_storage_read_bytes(a, got, sizeof got)); /* the last: x + 116 y */
  for (int i = 0; i < 4; i++) CHECK_EQ(got[i], xv[i] + 116 * yv[i]);

  /* A call with another number of values is refused, naming the counts. */
  tpu_status_t bad = tpu_graph_record(op1, 0, in1, 1, false, &a, 1);
  CHECK(bad && tpu_status_code(bad) == TPU_STATUS_INVALID_ARGUMENT);
  tpu_status_free(bad);

  /* Text with functions besides @main (a kernel's) runs on its own. */
  size_t n = len1 + 64;
  char* two = malloc(n);
  CHECK(two);
  int wrote = snprintf(two, n, "%.*s func.func private @k() {}", (int)len1, t1);
  const tpu_defer_op_t* none = op1;
  CHECK_OK(tpu_graph_defer_op(two, (size_t)wrote, types, 2, types, 1, false, &none));
  CHECK(none == NULL);
  free(two);
  free(t1);
  free(t2);
  tpu_storage_release(x);
  tpu_storage_release(y);
  tpu_storage_release(a);
  tpu_storage_release(b);
}

TPU_TEST_MAIN(TPU_TEST(test_chain_of_nodes_is_one_program), TPU_TEST(test_tensor_list_argument),
              TPU_TEST(test_rng_state_is_threaded), TPU_TEST(test_errors_name_the_op),
              TPU_TEST(test_graphs_join_one_run))
