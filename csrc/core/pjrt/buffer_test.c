#include "buffer.h"

#include <stdint.h>

#include "pjrt_testing.h"

/* ---- contiguous round trips -------------------------------------------------- */

/* Bit patterns every float type must carry unchanged: quiet NaN, signalling
 * NaN, negative NaN with payload, +inf, -inf, -0, +0, smallest denormal,
 * largest finite, 1.0. */
static const uint16_t kF16Specials[] = {0x7e00, 0x7d01, 0xfe01, 0x7c00, 0xfc00,
                                        0x8000, 0x0000, 0x0001, 0x7bff, 0x3c00};
static const uint16_t kBf16Specials[] = {0x7fc0, 0x7fa1, 0xffc1, 0x7f80, 0xff80,
                                         0x8000, 0x0000, 0x0001, 0x7f7f, 0x3f80};
static const uint32_t kF32Specials[] = {0x7fc00000, 0x7fa00001, 0xffc00001,
                                        0x7f800000, 0xff800000, 0x80000000,
                                        0x00000000, 0x00000001, 0x7f7fffff,
                                        0x3f800000};
static const uint64_t kF64Specials[] = {
    0x7ff8000000000000ull, 0x7ff4000000000001ull, 0xfff8000000000001ull,
    0x7ff0000000000000ull, 0xfff0000000000000ull, 0x8000000000000000ull,
    0x0000000000000000ull, 0x0000000000000001ull, 0x7fefffffffffffffull,
    0x3ff0000000000000ull};

static uint64_t next_random(uint64_t* state) {
  *state = *state * 6364136223846793005ull + 1442695040888963407ull;
  return *state >> 11;
}

/* Fills `numel` elements of `dtype`: the dtype's special values first, then
 * pseudo-random bits (0/1 for bool). */
static void fill_pattern(tpu_dtype_t dtype, void* data, int64_t numel) {
  uint64_t state = 0x9e3779b97f4a7c15ull + (uint64_t)dtype;
  size_t elem = tpu_dtype_size(dtype);
  unsigned char* bytes = data;
  for (int64_t i = 0; i < numel; i++) {
    uint64_t r = next_random(&state);
    unsigned char* e = bytes + (size_t)i * elem;
    switch (dtype) {
      case TPU_DTYPE_BOOL: e[0] = (unsigned char)(r & 1); break;
      case TPU_DTYPE_FLOAT16: {
        uint16_t v = i < 10 ? kF16Specials[i] : (uint16_t)r;
        memcpy(e, &v, 2);
        break;
      }
      case TPU_DTYPE_BFLOAT16: {
        uint16_t v = i < 10 ? kBf16Specials[i] : (uint16_t)r;
        memcpy(e, &v, 2);
        break;
      }
      case TPU_DTYPE_FLOAT32: {
        uint32_t v = i < 10 ? kF32Specials[i] : (uint32_t)r;
        memcpy(e, &v, 4);
        break;
      }
      case TPU_DTYPE_FLOAT64: {
        uint64_t v = i < 10 ? kF64Specials[i] : r * 0x9e3779b97f4a7c15ull;
        memcpy(e, &v, 8);
        break;
      }
      case TPU_DTYPE_COMPLEX64: { /* (special, special) pairs, shifted */
        uint32_t re = i < 10 ? kF32Specials[i] : (uint32_t)r;
        uint32_t im = i < 10 ? kF32Specials[9 - i] : (uint32_t)(r >> 20);
        memcpy(e, &re, 4);
        memcpy(e + 4, &im, 4);
        break;
      }
      default: { /* integers: extremes first, then random; wider elements
                  * (complex128) take one 8-byte pattern per half */
        for (size_t off = 0; off < elem; off += 8) {
          size_t n = elem - off < 8 ? elem - off : 8;
          uint64_t v = (r + off) * 0xbf58476d1ce4e5b9ull;
          if (i == 0) v = 0;
          if (i == 1) v = ~0ull;                           /* -1 / max unsigned */
          if (i == 2) v = 1ull << (n * 8 - 1);             /* min signed */
          if (i == 3) v = (1ull << (n * 8 - 1)) - 1;       /* max signed */
          memcpy(e + off, &v, n); /* little-endian: low bytes */
        }
        break;
      }
    }
  }
}

static void test_every_dtype_round_trips(void) {
  tpu_client_t* client = test_client(1);
  CHECK(client != NULL);
  const int64_t dims[3] = {3, 5, 7};
  const int64_t numel = 105;
  int failures_before = tpu_test_failures_;
  for (int d = 0; d < TPU_DTYPE_COUNT && tpu_test_failures_ == failures_before;
       d++) {
    tpu_dtype_t dtype = (tpu_dtype_t)d;
    size_t nbytes = (size_t)numel * tpu_dtype_size(dtype);
    unsigned char* src = malloc(nbytes);
    unsigned char* dst = malloc(nbytes);
    fill_pattern(dtype, src, numel);
    memset(dst, 0xa5, nbytes);
    tpu_buffer_t* buffer = NULL;
    tpu_status_t s =
        tpu_buffer_from_host(client, 0, src, dtype, dims, 3, NULL, &buffer);
    if (!s) s = tpu_buffer_to_host(buffer, dst, nbytes);
    if (s) {
      fprintf(stderr, "  %s: %s\n", tpu_dtype_name(dtype), tpu_status_message(s));
      tpu_status_free(s);
      tpu_test_failures_++;
    } else {
      if (memcmp(src, dst, nbytes) != 0) {
        fprintf(stderr, "  %s: bits changed in the round trip\n",
                tpu_dtype_name(dtype));
        tpu_test_failures_++;
      }
      if (tpu_buffer_dtype(buffer) != dtype || tpu_buffer_rank(buffer) != 3 ||
          tpu_buffer_dims(buffer)[1] != 5 || tpu_buffer_numel(buffer) != numel ||
          tpu_buffer_nbytes(buffer) != nbytes ||
          tpu_buffer_device_index(buffer) != 0 ||
          tpu_buffer_is_deleted(buffer)) {
        fprintf(stderr, "  %s: wrong metadata\n", tpu_dtype_name(dtype));
        tpu_test_failures_++;
      }
    }
    tpu_buffer_destroy(buffer);
    free(src);
    free(dst);
  }
  tpu_client_destroy(client);
  CHECK(test_no_live_handles());
}

/* The host array may be changed as soon as from_host returns. */
static void test_host_memory_reusable_on_return(void) {
  tpu_client_t* client = test_client(1);
  CHECK(client != NULL);
  enum { N = 1 << 16 };
  float* host = malloc(N * sizeof(float));
  for (int i = 0; i < N; i++) host[i] = (float)i;
  int64_t dims[1] = {N};
  tpu_buffer_t* buffer = NULL;
  tpu_status_t s =
      tpu_buffer_from_host(client, 0, host, TPU_DTYPE_FLOAT32, dims, 1, NULL, &buffer);
  for (int i = 0; i < N; i++) host[i] = -1.0f;
  if (!s) s = tpu_buffer_to_host(buffer, host, N * sizeof(float));
  int mismatches = 0;
  for (int i = 0; !s && i < N; i++) mismatches += host[i] != (float)i;
  free(host);
  tpu_buffer_destroy(buffer);
  tpu_client_destroy(client);
  CHECK_OK(s);
  CHECK_EQ(mismatches, 0);
  CHECK(test_no_live_handles());
}

/* ---- strided uploads --------------------------------------------------------- */

/* Uploads `src` with the given layout and compares the dense download with
 * `expected` (written out by hand in each test). */
static tpu_status_t strided_case(tpu_client_t* client, const void* src,
                                 tpu_dtype_t dtype, const int64_t* dims,
                                 int rank, const int64_t* strides,
                                 const void* expected, const char* name) {
  tpu_buffer_t* buffer = NULL;
  TPU_RETURN_IF_ERROR(tpu_status_annotate(
      tpu_buffer_from_host(client, 0, src, dtype, dims, rank, strides, &buffer),
      "%s: ", name));
  size_t nbytes = tpu_buffer_nbytes(buffer);
  void* got = malloc(nbytes ? nbytes : 1);
  tpu_status_t s = tpu_buffer_to_host(buffer, got, nbytes);
  if (!s && memcmp(got, expected, nbytes) != 0)
    s = tpu_status_make(TPU_STATUS_INTERNAL, "%s: wrong data", name);
  free(got);
  tpu_buffer_destroy(buffer);
  return s;
}

static void run_strided_cases(bool force_host_pack) {
  tpu_buffer_set_force_host_pack(force_host_pack);
  tpu_client_t* client = test_client(1);
  CHECK(client != NULL);
  /* Every case runs (and the client is destroyed) even when one fails. */
#define CASE_OK(expr)                                                   \
  do {                                                                  \
    tpu_status_t cs_ = (expr);                                          \
    if (cs_) {                                                          \
      fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__,                \
              tpu_status_message(cs_));                                 \
      tpu_status_free(cs_);                                             \
      tpu_test_failures_++;                                             \
    }                                                                   \
  } while (0)

  /* S is 4x3 row-major: S[r][c] = 10r + c. */
  const int32_t s43[12] = {0, 1, 2, 10, 11, 12, 20, 21, 22, 30, 31, 32};

  /* Transpose: B[i][j] = S[j][i], B is 3x4. */
  {
    const int64_t dims[2] = {3, 4}, strides[2] = {4, 12};
    const int32_t expected[12] = {0, 10, 20, 30, 1, 11, 21, 31, 2, 12, 22, 32};
    CASE_OK(strided_case(client, s43, TPU_DTYPE_INT32, dims, 2, strides,
                          expected, "transpose"));
  }
  /* Every other element of the flat array. */
  {
    const int64_t dims[1] = {6}, strides[1] = {8};
    const int32_t expected[6] = {0, 2, 11, 20, 22, 31};
    CASE_OK(strided_case(client, s43, TPU_DTYPE_INT32, dims, 1, strides,
                          expected, "every other"));
  }
  /* Every other row and every other column: S[0::2, 0::2]. */
  {
    const int64_t dims[2] = {2, 2}, strides[2] = {24, 8};
    const int32_t expected[4] = {0, 2, 20, 22};
    CASE_OK(strided_case(client, s43, TPU_DTYPE_INT32, dims, 2, strides,
                          expected, "2-D slice"));
  }
  /* Rows padded: the 4x2 left part of S. */
  {
    const int64_t dims[2] = {4, 2}, strides[2] = {12, 4};
    const int32_t expected[8] = {0, 1, 10, 11, 20, 21, 30, 31};
    CASE_OK(strided_case(client, s43, TPU_DTYPE_INT32, dims, 2, strides,
                          expected, "padded rows"));
  }
  /* Broadcast a row (stride 0). */
  {
    const int64_t dims[2] = {2, 3}, strides[2] = {0, 4};
    const int32_t expected[6] = {0, 1, 2, 0, 1, 2};
    CASE_OK(strided_case(client, s43, TPU_DTYPE_INT32, dims, 2, strides,
                          expected, "broadcast"));
  }
  /* 3-D permutation, f64: T[i][j][k] = F[k][j][i] with F 2x3x2 dense. */
  {
    double f[12];
    for (int i = 0; i < 12; i++) f[i] = 0.5 * i - 1.0;
    /* F[a][b][c] at 6a + 2b + c; T dims (2,3,2): T[i][j][k] = F[k][j][i]. */
    const int64_t dims[3] = {2, 3, 2}, strides[3] = {8, 16, 48};
    double expected[12];
    const int order[12] = {0, 6, 2, 8, 4, 10, 1, 7, 3, 9, 5, 11};
    for (int i = 0; i < 12; i++) expected[i] = f[order[i]];
    CASE_OK(strided_case(client, f, TPU_DTYPE_FLOAT64, dims, 3, strides,
                          expected, "3-D permute f64"));
  }
  /* Transposes in 1-, 2- and 8-byte element types. */
  {
    const uint8_t u[6] = {1, 2, 3, 4, 5, 6}; /* 2x3 -> 3x2 */
    const int64_t dims[2] = {3, 2}, strides[2] = {1, 3};
    const uint8_t expected[6] = {1, 4, 2, 5, 3, 6};
    CASE_OK(strided_case(client, u, TPU_DTYPE_UINT8, dims, 2, strides,
                          expected, "transpose u8"));
    const uint8_t b[6] = {1, 0, 0, 1, 1, 0};
    const uint8_t bexpected[6] = {1, 1, 0, 1, 0, 0};
    CASE_OK(strided_case(client, b, TPU_DTYPE_BOOL, dims, 2, strides,
                          bexpected, "transpose bool"));
    const uint16_t h[6] = {0x7fc0, 0x3f80, 0xff80, 0x8000, 0x0001, 0x7fa1};
    const int64_t hstrides[2] = {2, 6};
    const uint16_t hexpected[6] = {0x7fc0, 0x8000, 0x3f80, 0x0001, 0xff80, 0x7fa1};
    CASE_OK(strided_case(client, h, TPU_DTYPE_BFLOAT16, dims, 2, hstrides,
                          hexpected, "transpose bf16"));
    const float c[12] = {1, -1, 2, -2, 3, -3, 4, -4, 5, -5, 6, -6}; /* 2x3 c64 */
    const int64_t cstrides[2] = {8, 24};
    const float cexpected[12] = {1, -1, 4, -4, 2, -2, 5, -5, 3, -3, 6, -6};
    CASE_OK(strided_case(client, c, TPU_DTYPE_COMPLEX64, dims, 2, cstrides,
                          cexpected, "transpose complex64"));
  }
  /* Size-1 dimensions with odd strides are still dense. */
  {
    const int64_t dims[3] = {1, 3, 1}, strides[3] = {999, 4, 12345};
    const int32_t expected[3] = {0, 1, 2};
    CASE_OK(strided_case(client, s43, TPU_DTYPE_INT32, dims, 3, strides,
                          expected, "size-1 dims"));
  }
  /* Zero-size: no data needed, strides irrelevant, nothing to copy back. */
  {
    const int64_t dims[2] = {0, 3}, strides[2] = {12, 4};
    tpu_buffer_t* buffer = NULL;
    tpu_status_t s = tpu_buffer_from_host(client, 0, NULL, TPU_DTYPE_FLOAT32,
                                          dims, 2, strides, &buffer);
    if (!s && (tpu_buffer_numel(buffer) != 0 || tpu_buffer_nbytes(buffer) != 0 ||
               tpu_buffer_rank(buffer) != 2))
      s = tpu_status_make(TPU_STATUS_INTERNAL, "zero-size metadata");
    if (!s) s = tpu_buffer_to_host(buffer, NULL, 0);
    tpu_event_t* event = NULL;
    if (!s) s = tpu_buffer_to_host_async(buffer, NULL, 0, &event);
    if (!s) s = tpu_event_await(event);
    tpu_event_destroy(event);
    if (!s) s = tpu_buffer_await_ready(buffer);
    tpu_buffer_destroy(buffer);
    CASE_OK(s);
    const int64_t dims2[3] = {4, 0, 2};
    buffer = NULL;
    s = tpu_buffer_from_host(client, 0, s43, TPU_DTYPE_INT64, dims2, 3, NULL,
                             &buffer);
    if (!s && tpu_buffer_nbytes(buffer) != 0)
      s = tpu_status_make(TPU_STATUS_INTERNAL, "{4,0,2} is not empty");
    tpu_buffer_destroy(buffer);
    CASE_OK(s);
  }
  /* Rank 0: a scalar, with and without a (zero-length) stride array. */
  {
    const double pi = 3.14159265358979;
    const int64_t unused_stride[1] = {8};
    CASE_OK(strided_case(client, &pi, TPU_DTYPE_FLOAT64, NULL, 0, NULL, &pi,
                          "scalar"));
    CASE_OK(strided_case(client, &pi, TPU_DTYPE_FLOAT64, NULL, 0,
                          unused_stride, &pi, "scalar with strides"));
    tpu_buffer_t* buffer = NULL;
    tpu_status_t s = tpu_buffer_from_host(client, 0, &pi, TPU_DTYPE_FLOAT64,
                                          NULL, 0, NULL, &buffer);
    if (!s && (tpu_buffer_rank(buffer) != 0 || tpu_buffer_numel(buffer) != 1 ||
               tpu_buffer_nbytes(buffer) != 8))
      s = tpu_status_make(TPU_STATUS_INTERNAL, "scalar metadata");
    tpu_buffer_destroy(buffer);
    CASE_OK(s);
  }
  /* A large transposed upload (exercises the row loop and the plugin's
   * transpose on more than a cache line). */
  {
    enum { R = 300, C = 257 };
    float* src = malloc(R * C * sizeof(float)); /* C x R row-major */
    float* expected = malloc(R * C * sizeof(float));
    for (int i = 0; i < R * C; i++) src[i] = (float)i;
    for (int r = 0; r < R; r++)
      for (int c = 0; c < C; c++) expected[r * C + c] = src[c * R + r];
    const int64_t dims[2] = {R, C}, strides[2] = {4, 4 * R};
    tpu_status_t s = strided_case(client, src, TPU_DTYPE_FLOAT32, dims, 2,
                                  strides, expected, "large transpose");
    free(src);
    free(expected);
    CASE_OK(s);
  }
#undef CASE_OK
  tpu_client_destroy(client);
  tpu_buffer_set_force_host_pack(false);
  CHECK(test_no_live_handles());
}

/* Layouts handed to the plugin as byte_strides (it honours all of them). */
static void test_strided_uploads_by_plugin(void) { run_strided_cases(false); }
/* The same layouts packed on the host (our fallback path). */
static void test_strided_uploads_packed_on_host(void) { run_strided_cases(true); }

/* ---- the rest ------------------------------------------------------------------ */

static void test_async_download_and_ready(void) {
  tpu_client_t* client = test_client(1);
  CHECK(client != NULL);
  int64_t v[4] = {INT64_MIN, -1, 0, INT64_MAX};
  const int64_t dims[1] = {4};
  tpu_buffer_t* buffer = NULL;
  tpu_status_t s =
      tpu_buffer_from_host(client, 0, v, TPU_DTYPE_INT64, dims, 1, NULL, &buffer);
  if (!s) s = tpu_buffer_await_ready(buffer);
  int64_t got[4] = {0};
  tpu_event_t* event = NULL;
  if (!s) s = tpu_buffer_to_host_async(buffer, got, sizeof got, &event);
  if (!s) s = tpu_event_await(event);
  bool ready = tpu_event_is_ready(event);
  if (!s) s = tpu_event_await(event); /* awaiting twice is fine */
  tpu_event_destroy(event);
  tpu_buffer_destroy(buffer);
  tpu_client_destroy(client);
  CHECK_OK(s);
  CHECK(ready);
  CHECK(memcmp(v, got, sizeof v) == 0);
  CHECK(test_no_live_handles());
}

/* A byte range comes back exactly as that slice of the whole download; a
 * range past the end is refused. */
static void test_range_download(void) {
  tpu_client_t* client = test_client(1);
  CHECK(client != NULL);
  int32_t v[64];
  for (int i = 0; i < 64; i++) v[i] = i * 7 - 100;
  const int64_t dims[1] = {64};
  tpu_buffer_t* buffer = NULL;
  tpu_status_t s =
      tpu_buffer_from_host(client, 0, v, TPU_DTYPE_INT32, dims, 1, NULL, &buffer);
  int32_t got[5] = {0};
  if (!s) s = tpu_buffer_to_host_range(buffer, 13 * 4, got, sizeof got);
  bool supported = tpu_status_code(s) != TPU_STATUS_UNIMPLEMENTED;
  if (!supported) {
    tpu_status_free(s);
    s = NULL;
  }
  tpu_status_t past = NULL;
  if (!s) past = tpu_buffer_to_host_range(buffer, 62 * 4, got, 3 * 4);
  tpu_buffer_destroy(buffer);
  tpu_client_destroy(client);
  CHECK_OK(s);
  /* The CPU plugin, which every test runs on, has a dense layout. */
  CHECK(supported);
  CHECK(memcmp(got, v + 13, sizeof got) == 0);
  CHECK_EQ(tpu_status_code(past), TPU_STATUS_OUT_OF_RANGE);
  tpu_status_free(past);
  CHECK(test_no_live_handles());
}

static void test_second_device(void) {
  tpu_client_t* client = test_client(2);
  CHECK(client != NULL);
  const float v[3] = {1.5f, -2.5f, 1e30f};
  const int64_t dims[1] = {3};
  tpu_buffer_t* buffer = NULL;
  tpu_status_t s = tpu_buffer_from_host(client, 1, v, TPU_DTYPE_FLOAT32, dims, 1,
                                        NULL, &buffer);
  float got[3] = {0};
  if (!s) s = tpu_buffer_to_host(buffer, got, sizeof got);
  int index = buffer ? tpu_buffer_device_index(buffer) : -1;
  tpu_buffer_destroy(buffer);
  tpu_client_destroy(client);
  CHECK_OK(s);
  CHECK_EQ(index, 1);
  CHECK(memcmp(v, got, sizeof v) == 0);
  CHECK(test_no_live_handles());
}

static void test_bad_arguments(void) {
  tpu_client_t* client = test_client(1);
  CHECK(client != NULL);
  float v[6] = {0};
  const int64_t dims[2] = {2, 3};
  tpu_buffer_t* buffer = (tpu_buffer_t*)1;
  tpu_status_t s = tpu_buffer_from_host(client, 1, v, TPU_DTYPE_FLOAT32, dims, 2,
                                        NULL, &buffer);
  int ok = tpu_status_code(s) == TPU_STATUS_OUT_OF_RANGE && buffer == NULL;
  tpu_status_free(s);
  s = tpu_buffer_from_host(client, 0, v, TPU_DTYPE_INVALID, dims, 2, NULL, &buffer);
  ok &= tpu_status_code(s) == TPU_STATUS_INVALID_ARGUMENT;
  tpu_status_free(s);
  s = tpu_buffer_from_host(client, 0, v, TPU_DTYPE_FLOAT32, dims, TPU_MAX_RANK + 1,
                           NULL, &buffer);
  ok &= tpu_status_code(s) == TPU_STATUS_INVALID_ARGUMENT;
  tpu_status_free(s);
  s = tpu_buffer_from_host(client, 0, NULL, TPU_DTYPE_FLOAT32, dims, 2, NULL,
                           &buffer);
  ok &= tpu_status_code(s) == TPU_STATUS_INVALID_ARGUMENT;
  tpu_status_free(s);
  const int64_t negative[2] = {-12, 4};
  s = tpu_buffer_from_host(client, 0, v, TPU_DTYPE_FLOAT32, dims, 2, negative,
                           &buffer);
  ok &= tpu_status_code(s) == TPU_STATUS_INVALID_ARGUMENT;
  tpu_status_free(s);
  const int64_t bad_dims[2] = {2, -3};
  s = tpu_buffer_from_host(client, 0, v, TPU_DTYPE_FLOAT32, bad_dims, 2, NULL,
                           &buffer);
  ok &= tpu_status_code(s) == TPU_STATUS_INVALID_ARGUMENT;
  tpu_status_free(s);

  s = tpu_buffer_from_host(client, 0, v, TPU_DTYPE_FLOAT32, dims, 2, NULL, &buffer);
  ok &= s == NULL;
  tpu_status_free(s);
  if (s == NULL) {
    s = tpu_buffer_to_host(buffer, v, sizeof v - 4); /* wrong size */
    ok &= tpu_status_code(s) == TPU_STATUS_INVALID_ARGUMENT;
    tpu_status_free(s);
    tpu_buffer_destroy(buffer);
  }
  tpu_buffer_destroy(NULL);
  tpu_event_destroy(NULL);
  tpu_client_destroy(client);
  CHECK(ok);
  CHECK(test_no_live_handles());
}

/* Transfer costs on this machine (informational). */
static void test_transfer_timing(void) {
  tpu_client_t* client = test_client(1);
  CHECK(client != NULL);
  float v[1] = {1.0f};
  const int64_t dims[2] = {1, 1};
  enum { N = 500 };
  tpu_status_t s = NULL;
  double t0 = test_now_ms();
  for (int i = 0; i < N && !s; i++) {
    tpu_buffer_t* buffer = NULL;
    s = tpu_buffer_from_host(client, 0, v, TPU_DTYPE_FLOAT32, dims, 2, NULL,
                             &buffer);
    tpu_buffer_destroy(buffer);
  }
  double upload_us = (test_now_ms() - t0) * 1e3 / N;
  tpu_buffer_t* buffer = NULL;
  if (!s)
    s = tpu_buffer_from_host(client, 0, v, TPU_DTYPE_FLOAT32, dims, 2, NULL,
                             &buffer);
  t0 = test_now_ms();
  for (int i = 0; i < N && !s; i++) s = tpu_buffer_to_host(buffer, v, sizeof v);
  double download_us = (test_now_ms() - t0) * 1e3 / N;
  tpu_buffer_destroy(buffer);
  printf("  f32[1,1]: upload+destroy %.1f us, download %.1f us\n", upload_us,
         download_us);
  tpu_client_destroy(client);
  CHECK_OK(s);
}

TPU_TEST_MAIN(TPU_TEST(test_every_dtype_round_trips),
              TPU_TEST(test_host_memory_reusable_on_return),
              TPU_TEST(test_strided_uploads_by_plugin),
              TPU_TEST(test_strided_uploads_packed_on_host),
              TPU_TEST(test_async_download_and_ready),
              TPU_TEST(test_range_download),
              TPU_TEST(test_second_device), TPU_TEST(test_bad_arguments),
              TPU_TEST(test_transfer_timing))
