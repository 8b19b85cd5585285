/* Collectives as one program over the CPU plugin's devices: exact values
 * for every reduce op and the dtypes the process groups use, the device
 * assignment on a subset of devices in a chosen order, the program cache,
 * and the inputs refused before anything runs. The binary runs with four
 * devices from its start (TORCHTPU_NUM_DEVICES=4, set before the runtime
 * starts). */
#include "collective.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "metrics.h"
#include "program.h"
#include "runtime.h"
#include "runtime_testing.h"
#include "storage.h"
#include "testing.h"

static bool start(void) { return tpu_testing_start_devices(4); }

enum { ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER };

static tpu_status_t call(int kind, tpu_collective_op_t op, tpu_buffer_t* const* in, int n,
                         tpu_buffer_t** out) {
  switch (kind) {
    case ALL_REDUCE: return tpu_collective_all_reduce(in, n, op, out);
    case ALL_GATHER: return tpu_collective_all_gather(in, n, out);
    default: return tpu_collective_reduce_scatter(in, n, op, out);
  }
}

static void destroy_all(tpu_buffer_t** buffers, int n) {
  for (int i = 0; i < n; i++) {
    tpu_buffer_destroy(buffers[i]);
    buffers[i] = NULL;
  }
}

/* Uploads input i (in_bytes at data + i * in_bytes, shape dims) to
 * devices[i], runs the collective, and checks that result i is on
 * devices[i] with out_rank dims out_dims and the bytes at
 * want + i * want_stride. */
static tpu_status_t run_case(int kind, tpu_collective_op_t op, tpu_dtype_t dtype,
                             const int64_t* dims, int rank, const int* devices, int n,
                             const void* data, const int64_t* out_dims, int out_rank,
                             const void* want, size_t want_stride) {
  tpu_buffer_t* in[4] = {NULL};
  tpu_buffer_t* out[4] = {NULL};
  int64_t numel = 1, out_numel = 1;
  for (int d = 0; d < rank; d++) numel *= dims[d];
  for (int d = 0; d < out_rank; d++) out_numel *= out_dims[d];
  size_t in_bytes = (size_t)numel * tpu_dtype_size(dtype);
  size_t out_bytes = (size_t)out_numel * tpu_dtype_size(dtype);
  tpu_status_t s = NULL;
  for (int i = 0; !s && i < n; i++)
    s = tpu_buffer_from_host(tpu_runtime_client(), devices[i], (const char*)data + i * in_bytes,
                             dtype, dims, rank, NULL, &in[i]);
  if (!s) s = call(kind, op, in, n, out);
  unsigned char got[256];
  for (int i = 0; !s && i < n; i++) {
    if (tpu_buffer_device_index(out[i]) != devices[i] || tpu_buffer_dtype(out[i]) != dtype ||
        tpu_buffer_rank(out[i]) != out_rank ||
        memcmp(tpu_buffer_dims(out[i]), out_dims, (size_t)out_rank * sizeof(int64_t)) != 0 ||
        out_bytes > sizeof got) {
      s = tpu_status_make(TPU_STATUS_INTERNAL, "result %d: device %d, rank %d", i,
                          tpu_buffer_device_index(out[i]), tpu_buffer_rank(out[i]));
      break;
    }
    s = tpu_buffer_to_host(out[i], got, out_bytes);
    if (!s && memcmp(got, (const char*)want + i * want_stride, out_bytes) != 0)
      s = tpu_status_make(TPU_STATUS_INTERNAL, "result %d differs", i);
  }
  destroy_all(in, n);
  destroy_all(out, n);
  return tpu_status_annotate(s, "%s %s %s: ",
                             kind == ALL_REDUCE   ? "all_reduce"
                             : kind == ALL_GATHER ? "all_gather"
                                                  : "reduce_scatter",
                             tpu_collective_op_name(op), tpu_dtype_name(dtype));
}

static const int kAll[4] = {0, 1, 2, 3};

static void test_all_reduce_float32_every_op(void) {
  CHECK(start());
  const int64_t dims[1] = {4};
  /* Device d holds [d+1, -(d+1), (d+1)/2, 2]: every result is exact. */
  float x[4][4];
  for (int d = 0; d < 4; d++) {
    x[d][0] = (float)(d + 1);
    x[d][1] = -(float)(d + 1);
    x[d][2] = (float)(d + 1) / 2;
    x[d][3] = 2;
  }
  const float sum[4] = {10, -10, 5, 8}, prod[4] = {24, 24, 1.5f, 16};
  const float min[4] = {1, -4, 0.5f, 2}, max[4] = {4, -1, 2, 2}, avg[4] = {2.5f, -2.5f, 1.25f, 2};
  const float* want[5] = {sum, prod, min, max, avg};
  for (int op = TPU_COLLECTIVE_SUM; op <= TPU_COLLECTIVE_AVG; op++)
    CHECK_OK(run_case(ALL_REDUCE, (tpu_collective_op_t)op, TPU_DTYPE_FLOAT32, dims, 1, kAll, 4, x,
                      dims, 1, want[op], 0));
}

static void test_all_reduce_int64_sum_and_max(void) {
  CHECK(start());
  const int64_t dims[2] = {1, 3};
  const int64_t big = INT64_C(1) << 40;
  int64_t x[4][3];
  for (int d = 0; d < 4; d++) {
    x[d][0] = d;
    x[d][1] = -10 * d;
    x[d][2] = big + d;
  }
  const int64_t sum[3] = {6, -60, 4 * big + 6}, max[3] = {3, 0, big + 3};
  CHECK_OK(run_case(ALL_REDUCE, TPU_COLLECTIVE_SUM, TPU_DTYPE_INT64, dims, 2, kAll, 4, x, dims, 2,
                    sum, 0));
  CHECK_OK(run_case(ALL_REDUCE, TPU_COLLECTIVE_MAX, TPU_DTYPE_INT64, dims, 2, kAll, 4, x, dims, 2,
                    max, 0));
}

/* Small integers: bfloat16 holds them and their sums exactly. */
static uint16_t bf16(float f) {
  uint32_t bits;
  memcpy(&bits, &f, sizeof bits);
  return (uint16_t)(bits >> 16);
}

static void test_all_reduce_bfloat16_sum(void) {
  CHECK(start());
  const int64_t dims[1] = {3};
  uint16_t x[4][3], want[3];
  for (int d = 0; d < 4; d++) {
    x[d][0] = bf16((float)(d + 1));
    x[d][1] = bf16(-2.0f * (float)d);
    x[d][2] = bf16(64);
  }
  want[0] = bf16(10);
  want[1] = bf16(-12);
  want[2] = bf16(256);
  CHECK_OK(run_case(ALL_REDUCE, TPU_COLLECTIVE_SUM, TPU_DTYPE_BFLOAT16, dims, 1, kAll, 4, x, dims,
                    1, want, 0));
}

/* Bool follows NCCL: sum is or, min is and. */
static void test_all_reduce_bool(void) {
  CHECK(start());
  const int64_t dims[1] = {3};
  const uint8_t x[4][3] = {{1, 0, 0}, {1, 0, 0}, {1, 1, 0}, {1, 0, 0}};
  const uint8_t any[3] = {1, 1, 0}, all[3] = {1, 0, 0};
  CHECK_OK(run_case(ALL_REDUCE, TPU_COLLECTIVE_SUM, TPU_DTYPE_BOOL, dims, 1, kAll, 4, x, dims, 1,
                    any, 0));
  CHECK_OK(run_case(ALL_REDUCE, TPU_COLLECTIVE_MIN, TPU_DTYPE_BOOL, dims, 1, kAll, 4, x, dims, 1,
                    all, 0));
}

static void test_all_gather(void) {
  CHECK(start());
  /* float32 [2,3] per device -> [8,3], rows in rank order, on every device. */
  const int64_t dims[2] = {2, 3}, gathered[2] = {8, 3};
  float x[4][6];
  for (int d = 0; d < 4; d++)
    for (int k = 0; k < 6; k++) x[d][k] = (float)(10 * d + k);
  CHECK_OK(run_case(ALL_GATHER, TPU_COLLECTIVE_SUM, TPU_DTYPE_FLOAT32, dims, 2, kAll, 4, x,
                    gathered, 2, x, 0));
  /* int64 [2] -> [8]. */
  const int64_t pair[1] = {2}, eight[1] = {8};
  const int64_t y[4][2] = {{-1, INT64_MAX}, {2, 3}, {INT64_MIN, 5}, {6, 7}};
  CHECK_OK(run_case(ALL_GATHER, TPU_COLLECTIVE_SUM, TPU_DTYPE_INT64, pair, 1, kAll, 4, y, eight,
                    1, y, 0));
  /* Scalars gather into [4]. */
  const int64_t four[1] = {4};
  const float s[4] = {1.5f, -2, 3, 4};
  CHECK_OK(run_case(ALL_GATHER, TPU_COLLECTIVE_SUM, TPU_DTYPE_FLOAT32, NULL, 0, kAll, 4, s, four,
                    1, s, 0));
}

static void test_reduce_scatter(void) {
  CHECK(start());
  /* float32 [8] sum: device d gets elements 2d, 2d+1 of the sum. */
  const int64_t eight[1] = {8}, two[1] = {2};
  float x[4][8], sum[8] = {0};
  for (int d = 0; d < 4; d++)
    for (int k = 0; k < 8; k++) {
      x[d][k] = (float)(k * (d + 1));
      sum[k] += x[d][k];
    }
  CHECK_OK(run_case(REDUCE_SCATTER, TPU_COLLECTIVE_SUM, TPU_DTYPE_FLOAT32, eight, 1, kAll, 4, x,
                    two, 1, sum, 2 * sizeof(float)));
  /* ... and avg. */
  float avg[8];
  for (int k = 0; k < 8; k++) avg[k] = sum[k] / 4;
  CHECK_OK(run_case(REDUCE_SCATTER, TPU_COLLECTIVE_AVG, TPU_DTYPE_FLOAT32, eight, 1, kAll, 4, x,
                    two, 1, avg, 2 * sizeof(float)));
  /* int64 [4,2] max: device d gets row d of the max. */
  const int64_t dims[2] = {4, 2}, row[2] = {1, 2};
  int64_t y[4][8], max[8];
  for (int k = 0; k < 8; k++) max[k] = INT64_MIN;
  for (int d = 0; d < 4; d++)
    for (int k = 0; k < 8; k++) {
      y[d][k] = (k % 3 == d % 3) ? 100 * k + d : -k;
      if (y[d][k] > max[k]) max[k] = y[d][k];
    }
  CHECK_OK(run_case(REDUCE_SCATTER, TPU_COLLECTIVE_MAX, TPU_DTYPE_INT64, dims, 2, kAll, 4, y, row,
                    2, max, 2 * sizeof(int64_t)));
}

/* Devices 3 and 1, in that order: rank 0 is device 3. Results stay on
 * their input's device; the gather is in rank order, not device order. */
static void test_two_device_subset(void) {
  CHECK(start());
  const int devices[2] = {3, 1};
  const int64_t four[1] = {4}, eight[1] = {8}, two[1] = {2};
  const float x[2][4] = {{1, 2, 3, 4}, {2, 4, 6, 8}};
  const float sum[4] = {3, 6, 9, 12};
  CHECK_OK(run_case(ALL_REDUCE, TPU_COLLECTIVE_SUM, TPU_DTYPE_FLOAT32, four, 1, devices, 2, x,
                    four, 1, sum, 0));
  CHECK_OK(run_case(ALL_GATHER, TPU_COLLECTIVE_SUM, TPU_DTYPE_FLOAT32, four, 1, devices, 2, x,
                    eight, 1, x, 0));
  CHECK_OK(run_case(REDUCE_SCATTER, TPU_COLLECTIVE_SUM, TPU_DTYPE_FLOAT32, four, 1, devices, 2, x,
                    two, 1, sum, 2 * sizeof(float)));
}

/* A second call with the same key reuses the program; a new device order
 * is a new program. Everything ran is waited for by synchronize. */
static void test_programs_are_cached(void) {
  CHECK(start());
  const int64_t dims[1] = {5};
  const float x[4][5] = {{0}};
  const float zero[5] = {0};
  CHECK_OK(run_case(ALL_REDUCE, TPU_COLLECTIVE_PROD, TPU_DTYPE_FLOAT32, dims, 1, kAll, 4, x, dims,
                    1, zero, 0));
  size_t size = tpu_collective_cache_size();
  int64_t hits = tpu_metrics_get("collective_cache_hits");
  CHECK_OK(run_case(ALL_REDUCE, TPU_COLLECTIVE_PROD, TPU_DTYPE_FLOAT32, dims, 1, kAll, 4, x, dims,
                    1, zero, 0));
  CHECK_EQ(tpu_collective_cache_size(), size);
  CHECK_EQ(tpu_metrics_get("collective_cache_hits"), hits + 1);
  const int reversed[4] = {3, 2, 1, 0};
  CHECK_OK(run_case(ALL_REDUCE, TPU_COLLECTIVE_PROD, TPU_DTYPE_FLOAT32, dims, 1, reversed, 4, x,
                    dims, 1, zero, 0));
  CHECK_EQ(tpu_collective_cache_size(), size + 1);
  for (int d = 0; d < 4; d++) CHECK_OK(tpu_runtime_synchronize(d));
}

#define CHECK_REFUSED(expr, needle)                                       \
  do {                                                                    \
    tpu_status_t s_ = (expr);                                             \
    if (tpu_status_code(s_) != TPU_STATUS_INVALID_ARGUMENT)               \
      fprintf(stderr, "%s gave: %s\n", #expr, tpu_status_message(s_));    \
    bool refused_ = tpu_status_code(s_) == TPU_STATUS_INVALID_ARGUMENT && \
                    strstr(tpu_status_message(s_), needle) != NULL;       \
    if (!refused_) fprintf(stderr, "  message: %s\n", tpu_status_message(s_)); \
    tpu_status_free(s_);                                                  \
    CHECK(refused_);                                                      \
  } while (0)

static void test_bad_inputs_are_refused(void) {
  CHECK(start());
  tpu_client_t* client = tpu_runtime_client();
  const int64_t data[8] = {0}; /* room for the largest input (5 x int64) */
  const int64_t six[1] = {6}, five[1] = {5}, two_three[2] = {2, 3};
  tpu_buffer_t *a = NULL, *b = NULL, *c = NULL, *d = NULL, *e = NULL, *i64 = NULL;
  CHECK_OK(tpu_buffer_from_host(client, 0, data, TPU_DTYPE_FLOAT32, six, 1, NULL, &a));
  CHECK_OK(tpu_buffer_from_host(client, 1, data, TPU_DTYPE_FLOAT32, five, 1, NULL, &b));
  CHECK_OK(tpu_buffer_from_host(client, 0, data, TPU_DTYPE_FLOAT32, six, 1, NULL, &c));
  CHECK_OK(tpu_buffer_from_host(client, 2, data, TPU_DTYPE_FLOAT32, two_three, 2, NULL, &d));
  CHECK_OK(tpu_buffer_from_host(client, 3, data, TPU_DTYPE_FLOAT32, six, 1, NULL, &e));
  CHECK_OK(tpu_buffer_from_host(client, 1, data, TPU_DTYPE_INT64, five, 1, NULL, &i64));
  size_t cached = tpu_collective_cache_size();
  tpu_buffer_t* out[4] = {NULL};

  tpu_buffer_t* shapes[2] = {a, b};
  CHECK_REFUSED(tpu_collective_all_reduce(shapes, 2, TPU_COLLECTIVE_SUM, out),
                "input 1 is tensor<5xf32> but input 0 is tensor<6xf32>");
  tpu_buffer_t* ranks[2] = {a, d};
  CHECK_REFUSED(tpu_collective_all_gather(ranks, 2, out), "input 1 is tensor<2x3xf32>");
  tpu_buffer_t* dtypes[2] = {b, i64};
  CHECK_REFUSED(tpu_collective_all_reduce(dtypes, 2, TPU_COLLECTIVE_SUM, out),
                "input 1 is tensor<5xi64>");
  tpu_buffer_t* same_device[3] = {a, e, c};
  CHECK_REFUSED(tpu_collective_all_reduce(same_device, 3, TPU_COLLECTIVE_SUM, out),
                "inputs 0 and 2 are both on device 0");
  tpu_buffer_t* f = NULL;
  CHECK_OK(tpu_buffer_from_host(client, 2, data, TPU_DTYPE_FLOAT32, five, 1, NULL, &f));
  tpu_buffer_t* fives[2] = {b, f};
  CHECK_REFUSED(tpu_collective_reduce_scatter(fives, 2, TPU_COLLECTIVE_SUM, out),
                "dim 0 of the inputs (size 5) must divide into 2 equal blocks");
  tpu_buffer_destroy(f);
  CHECK_REFUSED(tpu_collective_all_reduce(&i64, 1, TPU_COLLECTIVE_AVG, out),
                "avg is not supported for int64");
  tpu_buffer_t* complex = NULL;
  const int64_t three[1] = {3};
  CHECK_OK(tpu_buffer_from_host(client, 0, data, TPU_DTYPE_COMPLEX64, three, 1, NULL, &complex));
  CHECK_REFUSED(tpu_collective_all_reduce(&complex, 1, TPU_COLLECTIVE_MAX, out),
                "max is not defined for complex64");
  tpu_buffer_destroy(complex);
  tpu_buffer_t* five_inputs[5] = {a, b, d, e, c};
  CHECK_REFUSED(tpu_collective_all_gather(five_inputs, 5, out), "5 input(s) for 4 device(s)");
  tpu_buffer_t* with_null[2] = {a, NULL};
  CHECK_REFUSED(tpu_collective_all_gather(with_null, 2, out), "input 1 is NULL");
  CHECK_REFUSED(tpu_collective_all_reduce(&a, 1, (tpu_collective_op_t)9, out), "unknown reduce op 9");
  CHECK_EQ(tpu_collective_cache_size(), cached);
  CHECK(out[0] == NULL && out[1] == NULL);
  tpu_buffer_destroy(a);
  tpu_buffer_destroy(b);
  tpu_buffer_destroy(c);
  tpu_buffer_destroy(d);
  tpu_buffer_destroy(e);
  tpu_buffer_destroy(i64);
}

/* Storages on devices 2 and 0 (rank order): all_reduce into fresh
 * storages, reduce_scatter over the flat element order, and the inputs
 * untouched. */
static void test_storages(void) {
  const int dev[2] = {2, 0};
  float x[2][4] = {{1, 2, 3, 4}, {10, 20, 30, 40}};
  tpu_storage_t *in[2] = {NULL}, *out[2] = {NULL}, *half[2] = {NULL};
  int64_t four = 4;
  for (int i = 0; i < 2; i++) {
    CHECK_OK(tpu_storage_create(dev[i], sizeof x[i], &in[i]));
    CHECK_OK(tpu_storage_write_host(in[i], x[i], TPU_DTYPE_FLOAT32, &four, 1, NULL));
    CHECK_OK(tpu_storage_create(dev[i], sizeof x[i], &out[i]));
    CHECK_OK(tpu_storage_create(dev[i], sizeof x[i] / 2, &half[i]));
  }
  CHECK_OK(tpu_collective_run_storages(TPU_COLLECTIVE_ALL_REDUCE, TPU_COLLECTIVE_SUM, in,
                                       TPU_DTYPE_FLOAT32, 4, 2, out));
  CHECK_OK(tpu_collective_run_storages(TPU_COLLECTIVE_REDUCE_SCATTER, TPU_COLLECTIVE_MAX, in,
                                       TPU_DTYPE_FLOAT32, 4, 2, half));
  for (int i = 0; i < 2; i++) {
    float got[4], h[2], orig[4];
    CHECK_OK(tpu_storage_read_bytes(out[i], got, sizeof got));
    CHECK(got[0] == 11 && got[1] == 22 && got[2] == 33 && got[3] == 44);
    CHECK_OK(tpu_storage_read_bytes(half[i], h, sizeof h));
    CHECK(h[0] == 10 * (float)(2 * i + 1) && h[1] == 10 * (float)(2 * i + 2));
    CHECK_OK(tpu_storage_read_bytes(in[i], orig, sizeof orig));
    CHECK(memcmp(orig, x[i], sizeof orig) == 0);
    CHECK_EQ(tpu_storage_device(out[i]), dev[i]);
  }
  /* An unknown kind is refused before anything is read. */
  tpu_status_t s = tpu_collective_run_storages((tpu_collective_kind_t)7, TPU_COLLECTIVE_SUM, in,
                                               TPU_DTYPE_FLOAT32, 4, 2, out);
  CHECK(s && tpu_status_code(s) == TPU_STATUS_INVALID_ARGUMENT);
  tpu_status_free(s);
  for (int i = 0; i < 2; i++) {
    tpu_storage_release(in[i]);
    tpu_storage_release(out[i]);
    tpu_storage_release(half[i]);
  }
}

/* Last: the programs go before the client they belong to. */
static void test_cleanup(void) {
  tpu_collective_cache_clear();
  CHECK_EQ(tpu_collective_cache_size(), 0u);
  tpu_program_cache_clear();
  tpu_runtime_shutdown();
}

TPU_TEST_MAIN(TPU_TEST(test_all_reduce_float32_every_op), TPU_TEST(test_all_reduce_int64_sum_and_max),
              TPU_TEST(test_all_reduce_bfloat16_sum), TPU_TEST(test_all_reduce_bool),
              TPU_TEST(test_all_gather), TPU_TEST(test_reduce_scatter),
              TPU_TEST(test_two_device_subset), TPU_TEST(test_programs_are_cached),
              TPU_TEST(test_bad_inputs_are_refused), TPU_TEST(test_storages),
              TPU_TEST(test_cleanup))
