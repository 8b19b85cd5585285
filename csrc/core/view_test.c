/* Views read from and written into a flat storage, run on the plugin and
 * checked element by element against offset + sum(i * stride). */
#include "view.h"

#include <stdlib.h>
#include <string.h>

#include "program.h"
#include "runtime.h"
#include "testing.h"

enum { N = 64 };

/* Runs a program over flat [N] f32 = 0..N-1 (and optionally a value input
 * of the view's shape) returning one output of `out_n` floats. */
/* The text of a program reading view v from flat [N] (or, write, writing
 * a value input of the view's shape into it). */
static tpu_status_t view_text(const tpu_view_t* v, bool write, char** text, size_t* len) {
  tpu_hlo_builder_t* b = NULL;
  TPU_RETURN_IF_ERROR(tpu_hlo_builder_create(&b));
  int64_t n = N;
  tpu_hlo_value_t flat = tpu_hlo_arg(b, tpu_hlo_type_make(TPU_DTYPE_FLOAT32, 1, &n), NULL);
  tpu_hlo_value_t value = {-1};
  if (write) value = tpu_hlo_arg(b, tpu_hlo_type_make(TPU_DTYPE_FLOAT32, v->rank, v->sizes), NULL);
  tpu_hlo_value_t r = write ? tpu_view_emit_write(b, flat, v, value) : tpu_view_emit_read(b, flat, v);
  tpu_hlo_return(b, &r, 1);
  tpu_status_t s = tpu_hlo_builder_finish(b, text, len);
  tpu_hlo_builder_destroy(b);
  return s;
}

static tpu_status_t run_values(const tpu_view_t* v, bool write, const float* custom, float* out,
                               int64_t out_n) {
  TPU_RETURN_IF_ERROR(tpu_runtime_init(NULL));
  int64_t n = N;
  char* text = NULL;
  size_t len = 0;
  TPU_RETURN_IF_ERROR(view_text(v, write, &text, &len));
  tpu_program_t* program = NULL;
  tpu_status_t s = tpu_program_get(text, len, &program);
  free(text);
  TPU_RETURN_IF_ERROR(s);
  float host[N], values[N];
  for (int i = 0; i < N; i++) host[i] = (float)i, values[i] = custom ? custom[i] : 1000.0f + (float)i;
  tpu_buffer_t* args[2] = {0};
  tpu_buffer_t* res = NULL;
  s = tpu_buffer_from_host(tpu_runtime_client(), 0, host, TPU_DTYPE_FLOAT32, &n, 1, NULL, &args[0]);
  if (!s && write)
    s = tpu_buffer_from_host(tpu_runtime_client(), 0, values, TPU_DTYPE_FLOAT32, v->sizes,
                             v->rank, NULL, &args[1]);
  if (!s) s = tpu_program_execute(program, 0, args, write ? 2 : 1, &res);
  if (!s) s = tpu_buffer_to_host(res, out, (size_t)out_n * sizeof(float));
  tpu_buffer_destroy(args[0]);
  tpu_buffer_destroy(args[1]);
  tpu_buffer_destroy(res);
  return s;
}

static tpu_status_t run(const tpu_view_t* v, bool write, float* out, int64_t out_n) {
  return run_values(v, write, NULL, out, out_n);
}

/* Flat index of the k-th element (row-major over sizes). */
static int64_t flat_index(const tpu_view_t* v, int64_t k) {
  int64_t idx = v->offset;
  for (int d = v->rank - 1; d >= 0; d--) {
    idx += (k % v->sizes[d]) * v->strides[d];
    k /= v->sizes[d];
  }
  return idx;
}

static tpu_view_t view(int rank, const int64_t* sizes, const int64_t* strides, int64_t offset) {
  tpu_view_t v = {.dtype = TPU_DTYPE_FLOAT32, .rank = rank, .offset = offset};
  for (int d = 0; d < rank; d++) v.sizes[d] = sizes[d], v.strides[d] = strides[d];
  return v;
}

static const struct {
  const char* name;
  int rank;
  int64_t sizes[3], strides[3], offset;
  bool writable; /* no two elements share a flat index */
} kCases[] = {
    {"contiguous slab", 2, {3, 4}, {4, 1}, 5, true},
    {"whole storage", 2, {8, 8}, {8, 1}, 0, true},
    {"transpose", 2, {8, 8}, {1, 8}, 0, true},
    {"step slice", 2, {3, 2}, {16, 3}, 2, true},
    {"column", 1, {7}, {8}, 3, true},
    {"diagonal", 1, {8}, {9}, 0, true},
    {"3d permuted slice", 3, {2, 3, 2}, {1, 16, 4}, 1, true},
    {"expand", 2, {4, 5}, {0, 1}, 10, false},
    {"unfold (overlapping)", 2, {5, 4}, {2, 1}, 0, false},
    {"scalar", 0, {0}, {0}, 17, true},
    {"expanded scalar", 2, {3, 4}, {0, 0}, 9, false},
    /* Slabs from the offset would pass the storage's end: */
    {"last split of rows (v of qkv)", 3, {2, 2, 4}, {32, 16, 1}, 12, true},
    {"split with heads outermost", 3, {2, 2, 4}, {4, 32, 1}, 8, true},
    {"row-wrapping tail (padded)", 2, {2, 4}, {30, 2}, 26, true},
};

static void test_reads_match_strided_indexing(void) {
  for (size_t c = 0; c < sizeof kCases / sizeof kCases[0]; c++) {
    tpu_view_t v = view(kCases[c].rank, kCases[c].sizes, kCases[c].strides, kCases[c].offset);
    int64_t numel = tpu_view_numel(&v);
    float out[N];
    CHECK_OK(run(&v, false, out, numel));
    for (int64_t k = 0; k < numel; k++) {
      if (out[k] != (float)flat_index(&v, k)) {
        fprintf(stderr, "%s: element %lld is %g, want %lld\n", kCases[c].name, (long long)k,
                out[k], (long long)flat_index(&v, k));
        CHECK(false);
      }
    }
  }
}

static void test_writes_touch_exactly_the_view(void) {
  for (size_t c = 0; c < sizeof kCases / sizeof kCases[0]; c++) {
    if (!kCases[c].writable) continue;
    tpu_view_t v = view(kCases[c].rank, kCases[c].sizes, kCases[c].strides, kCases[c].offset);
    float out[N], want[N];
    for (int i = 0; i < N; i++) want[i] = (float)i;
    for (int64_t k = 0; k < tpu_view_numel(&v); k++) want[flat_index(&v, k)] = 1000.0f + (float)k;
    CHECK_OK(run(&v, true, out, N));
    for (int i = 0; i < N; i++) {
      if (out[i] != want[i]) {
        fprintf(stderr, "%s: flat[%d] is %g, want %g\n", kCases[c].name, i, out[i], want[i]);
        CHECK(false);
      }
    }
  }
}

/* A write through an expanded view (fill_, masked_fill_ ... allow one):
 * only elements whose value changed land, so an unchanged duplicate
 * (a row where the mask was false) cannot undo another row's write. */
static void test_expanded_write_keeps_changed_values(void) {
  int64_t sizes[2] = {4, 5}, strides[2] = {0, 1};
  tpu_view_t v = view(2, sizes, strides, 10);
  float values[N] = {0}, out[N];
  for (int r = 0; r < 4; r++)
    for (int j = 0; j < 5; j++) values[r * 5 + j] = r == 2 && j != 1 ? 500.0f + (float)j : 10.0f + (float)j;
  CHECK_OK(run_values(&v, true, values, out, N));
  for (int i = 0; i < N; i++) {
    float want = i >= 10 && i < 15 && i != 11 ? 500.0f + (float)(i - 10) : (float)i;
    if (out[i] != want) fprintf(stderr, "flat[%d] is %g, want %g\n", i, out[i], want);
    CHECK(out[i] == want);
  }
}

/* Overlapping windows (unfold(0, 2, 1) of flat[0..4): sizes {4, 2},
 * strides {1, 1}): flat[k] is window k's element 0 and window k-1's
 * element 1. A write changing only window 1's element 1 (flat[2]) lands,
 * though window 2's element 0 (also flat[2]) is written unchanged. */
static void test_overlapping_windows_write_keeps_changed_values(void) {
  int64_t sizes[2] = {4, 2}, strides[2] = {1, 1};
  tpu_view_t v = view(2, sizes, strides, 0);
  float values[N] = {0}, out[N];
  for (int w = 0; w < 4; w++)
    for (int j = 0; j < 2; j++) values[w * 2 + j] = (float)(w + j); /* unchanged */
  values[1 * 2 + 1] = 700.0f;
  CHECK_OK(run_values(&v, true, values, out, N));
  for (int i = 0; i < N; i++) {
    float want = i == 2 ? 700.0f : (float)i;
    if (out[i] != want) fprintf(stderr, "flat[%d] is %g, want %g\n", i, out[i], want);
    CHECK(out[i] == want);
  }
}

/* k and v of a fused qkv split read as slices of the storage: no padded
 * copy of the whole storage (XLA materialises pad + slice), while a view
 * whose rows wrap still needs the pad. */
static void test_split_views_read_without_padding(void) {
  int64_t sizes[3] = {2, 2, 4}, strides[3] = {32, 16, 1};
  tpu_view_t tail = view(3, sizes, strides, 12);
  char* text = NULL;
  size_t len = 0;
  CHECK_OK(view_text(&tail, false, &text, &len));
  CHECK(text && strstr(text, "stablehlo.pad") == NULL);
  free(text);
  int64_t wsizes[2] = {2, 4}, wstrides[2] = {30, 2};
  tpu_view_t wrap = view(2, wsizes, wstrides, 26);
  CHECK_OK(view_text(&wrap, false, &text, &len));
  CHECK(text && strstr(text, "stablehlo.pad") != NULL);
  free(text);
}

static void test_cleanup(void) {
  tpu_program_cache_clear();
  tpu_runtime_shutdown();
}

TPU_TEST_MAIN(TPU_TEST(test_reads_match_strided_indexing),
              TPU_TEST(test_writes_touch_exactly_the_view),
              TPU_TEST(test_expanded_write_keeps_changed_values),
              TPU_TEST(test_overlapping_windows_write_keeps_changed_values),
              TPU_TEST(test_split_views_read_without_padding), TPU_TEST(test_cleanup))
