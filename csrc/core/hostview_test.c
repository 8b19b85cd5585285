/* The view behind a value: a view read's chain (reshape, slice, reshape,
 * transpose, identity broadcast) resolved to its base with the strides
 * PyTorch gives the same view; broadcasts as stride 0; reshapes that are
 * not views, other ops and function arguments left as their own base;
 * and the checks the host kernels make of a view. */
#include "hostview.h"

#include <string.h>

#include "hlo/signature.h"
#include "testing.h"

/* The demo's k: the [16, 64, 192] qkv output (flat) split at 64..128,
 * viewed [16, 64, 4, 16] and transposed to [16, 4, 64, 16]. */
static const char kChain[] =
    "  func.func private @f1(%arg0: tensor<196608xf32>) {\n"
    "    %5 = \"stablehlo.reshape\"(%arg0) : (tensor<196608xf32>) -> tensor<16x64x12x16x1xf32>\n"
    "    %6 = \"stablehlo.slice\"(%5) {start_indices = array<i64: 0, 0, 4, 0, 0>, limit_indices "
    "= array<i64: 16, 64, 8, 16, 1>, strides = array<i64: 1, 1, 1, 1, 1>} : "
    "(tensor<16x64x12x16x1xf32>) -> tensor<16x64x4x16x1xf32>\n"
    "    %7 = \"stablehlo.reshape\"(%6) : (tensor<16x64x4x16x1xf32>) -> tensor<16x64x4x16xf32>\n"
    "    %8 = \"stablehlo.transpose\"(%7) {permutation = array<i64: 0, 2, 1, 3>} : "
    "(tensor<16x64x4x16xf32>) -> tensor<16x4x64x16xf32>\n"
    "    %9 = \"stablehlo.broadcast_in_dim\"(%8) {broadcast_dimensions = array<i64: 0, 1, 2, 3>} "
    ": (tensor<16x4x64x16xf32>) -> tensor<16x4x64x16xf32>\n"
    "    %10 = \"stablehlo.broadcast_in_dim\"(%arg1) {broadcast_dimensions = array<i64: 1>} : "
    "(tensor<4xf32>) -> tensor<3x4xf32>\n"
    "    %11 = \"stablehlo.transpose\"(%7) {permutation = array<i64: 0, 1, 3, 2>} : "
    "(tensor<16x64x4x16xf32>) -> tensor<16x64x16x4xf32>\n"
    "    %12 = \"stablehlo.reshape\"(%11) : (tensor<16x64x16x4xf32>) -> tensor<16x64x64xf32>\n"
    "    %13 = \"stablehlo.add\"(%9, %9) : (tensor<16x4x64x16xf32>, tensor<16x4x64x16xf32>) -> "
    "tensor<16x4x64x16xf32>\n"
    "    %14 = \"stablehlo.slice\"(%13) {start_indices = array<i64: 0, 1, 0, 0>, limit_indices = "
    "array<i64: 16, 4, 64, 16>, strides = array<i64: 2, 2, 1, 4>} : (tensor<16x4x64x16xf32>) -> "
    "tensor<8x2x64x4xf32>\n"
    "    %15 = \"stablehlo.transpose\"(%13) {permutation = array<i64: 0, 2, 1, 3>} : "
    "(tensor<16x4x64x16xf32>) -> tensor<16x64x4x16xf32>\n";

static void resolve(const char* name, const char* type, tpu_hostview_t* v) {
  tpu_hlo_type_t t;
  CHECK_OK(tpu_hlo_parse_type(type, strlen(type), &t));
  tpu_hostview_resolve(kChain, kChain + sizeof kChain - 1, name, strlen(name), &t, v);
}

static bool base_is(const tpu_hostview_t* v, const char* name) {
  return v->base_len == strlen(name) && memcmp(v->base, name, v->base_len) == 0;
}

static void test_view_read_chain(void) {
  tpu_hostview_t v;
  resolve("%9", "tensor<16x4x64x16xf32>", &v);
  CHECK(base_is(&v, "%arg0"));
  CHECK_EQ(v.base_type.rank, 1);
  CHECK_EQ(v.base_type.dims[0], 196608);
  /* k[b, h, l, d] = qkv[b, l, 64 + 16h + d]: PyTorch's strides of the
   * same view, (12288, 16, 192, 1), offset 64 */
  CHECK_EQ(v.offset, 64);
  CHECK_EQ(v.strides[0], 12288);
  CHECK_EQ(v.strides[1], 16);
  CHECK_EQ(v.strides[2], 192);
  CHECK_EQ(v.strides[3], 1);
  CHECK(tpu_hostview_rows_of_columns(&v));
  /* a step back: the same view before the transpose */
  resolve("%7", "tensor<16x64x4x16xf32>", &v);
  CHECK(base_is(&v, "%arg0") && v.offset == 64 && v.strides[1] == 192 && v.strides[2] == 16);
}

static void test_broadcast_and_strided_slice(void) {
  tpu_hostview_t v;
  /* a [4] argument broadcast along a new leading dim: stride 0 */
  resolve("%10", "tensor<3x4xf32>", &v);
  CHECK(base_is(&v, "%arg1") && v.strides[0] == 0 && v.strides[1] == 1 && v.offset == 0);
  /* a stepped slice of an op's result: offset and steps folded in */
  resolve("%14", "tensor<8x2x64x4xf32>", &v);
  CHECK(base_is(&v, "%13"));
  /* %13 row-major [16, 4, 64, 16]: strides 4096, 1024, 16, 1 */
  CHECK_EQ(v.offset, 1 * 1024);
  CHECK(v.strides[0] == 2 * 4096 && v.strides[1] == 2 * 1024 && v.strides[2] == 16 &&
        v.strides[3] == 4);
  /* columns 4 apart: not rows of adjacent columns */
  CHECK(!tpu_hostview_rows_of_columns(&v));
}

static void test_what_stays_its_own_base(void) {
  tpu_hostview_t v;
  /* a reshape merging dims that are not adjacent in memory (the [.., 16,
   * 4] transpose flattened): no view, so the reshape's value is the base */
  resolve("%12", "tensor<16x64x64xf32>", &v);
  CHECK(base_is(&v, "%12") && v.offset == 0 && v.strides[0] == 4096 && v.strides[2] == 1);
  /* any other op's value, and a function argument */
  resolve("%13", "tensor<16x4x64x16xf32>", &v);
  CHECK(base_is(&v, "%13"));
  resolve("%arg0", "tensor<196608xf32>", &v);
  CHECK(base_is(&v, "%arg0") && v.strides[0] == 1);
  /* a type that disagrees with the defining line's: left alone */
  resolve("%9", "tensor<16x4x64x15xf32>", &v);
  CHECK(base_is(&v, "%9"));
}

static void test_transposed_next(void) {
  static const int64_t kPerm[4] = {0, 2, 1, 3}, kOther[4] = {0, 1, 3, 2};
  const char* end = kChain + sizeof kChain - 1;
  CHECK(tpu_hostview_transposed_next(kChain, end, "%13", 3, kPerm, 4));
  CHECK(tpu_hostview_transposed_next(kChain, end, "%7", 2, kOther, 4));
  CHECK(tpu_hostview_transposed_next(kChain, end, "%7", 2, kPerm, 4));
  CHECK(!tpu_hostview_transposed_next(kChain, end, "%8", 2, kPerm, 4));
  CHECK(!tpu_hostview_transposed_next(kChain, end, "%1", 2, kPerm, 4)); /* not %13's prefix */
}

TPU_TEST_MAIN(TPU_TEST(test_view_read_chain), TPU_TEST(test_broadcast_and_strided_slice),
              TPU_TEST(test_what_stays_its_own_base), TPU_TEST(test_transposed_next))
