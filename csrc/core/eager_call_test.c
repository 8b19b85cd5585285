/* A call's slots, key and key text, with no device: a call only compares
 * its storages' addresses, so stand-ins do. */
#include "eager_call.h"

#include <string.h>

#include "eager_testing.h"
#include "testing.h"

static char g_storages[40]; /* stand-ins: &g_storages[i] is storage i */
#define STORAGE(i) ((tpu_storage_t*)&g_storages[i])

/* Storage i, whole: four float32s. */
#define T(i) tensor_arg(contiguous(STORAGE(i), 4))

static bool same_key(const tpu_eager_call_t* a, const tpu_eager_call_t* b) {
  tpu_eager_key_t ka, kb;
  tpu_status_t sa = tpu_eager_call_key(a, NULL, 0, &ka), sb = tpu_eager_call_key(b, NULL, 0, &kb);
  bool same = !sa && !sb && ka.len == kb.len && memcmp(ka.data, kb.data, ka.len) == 0;
  tpu_status_free(sa);
  tpu_status_free(sb);
  tpu_eager_key_free(&ka);
  tpu_eager_key_free(&kb);
  return same;
}

/* One slot per storage, however many tensors view it; a list of more
 * storages than fit inline. */
static void test_slots_are_the_distinct_storages(void) {
  tpu_eager_tensor_t list[40];
  for (int i = 0; i < 40; i++) list[i] = contiguous(STORAGE(i), 4);
  tpu_eager_arg_t args[3] = {T(1), T(39), {.lower = {.kind = TPU_ARG_TENSORS, .num_tensors = 40}}};
  tpu_eager_call_t call = {.op_name = "aten::cat", .num_args = 3, .args = args, .num_list = 40,
                           .list = list};
  tpu_eager_slots_t s;
  int arg_slot[3], list_slot[40];
  CHECK_OK(tpu_eager_call_slots(&call, &s, arg_slot, list_slot));
  CHECK_EQ(s.count, 40);
  CHECK(arg_slot[0] == 0 && arg_slot[1] == 1 && arg_slot[2] == -1);
  CHECK(list_slot[0] == 2 && list_slot[1] == 0 && list_slot[39] == 1);
  CHECK(s.storages[2] == STORAGE(0) && !s.conflict);
  tpu_eager_slots_free(&s);
  list[1].view.dtype = TPU_DTYPE_INT32; /* storage 1 read as another type */
  CHECK_OK(tpu_eager_call_slots(&call, &s, NULL, NULL));
  CHECK(s.conflict);
  tpu_eager_slots_free(&s);
}

/* Scalar values are not in the key; storage sharing, views and process
 * state (PyTorch's default dtype, ...) are. */
static void test_key_is_structure_not_values(void) {
  tpu_eager_arg_t a[3] = {T(0), T(1), double_arg(1)};
  tpu_eager_arg_t b[3] = {T(2), T(3), double_arg(-0.5)};
  tpu_eager_call_t x = {.op_name = "aten::add.Tensor", .num_args = 3, .args = a}, y = x;
  y.args = b;
  CHECK(same_key(&x, &y));
  b[1].tensor.storage = STORAGE(2); /* x + x is another program than x + y */
  CHECK(!same_key(&x, &y));
  b[1].tensor.storage = STORAGE(3);
  b[1].tensor.view.strides[0] = 2;
  CHECK(!same_key(&x, &y));
  b[1].tensor.view.strides[0] = 1;
  y.state = 7;
  CHECK(!same_key(&x, &y));
}

/* A key longer than the caller's buffer moves to the heap, bytes intact. */
static void test_key_outgrows_the_callers_buffer(void) {
  tpu_eager_arg_t args[2] = {T(0), double_arg(1)};
  tpu_eager_call_t call = {.op_name = "aten::mul.Tensor", .num_args = 2, .args = args};
  uint8_t small[8];
  tpu_eager_key_t moved, heap;
  CHECK_OK(tpu_eager_call_key(&call, small, sizeof small, &moved));
  CHECK_OK(tpu_eager_call_key(&call, NULL, 0, &heap));
  CHECK(moved.on_heap && moved.data != small && heap.on_heap);
  CHECK(moved.len == heap.len && memcmp(moved.data, heap.data, heap.len) == 0);
  tpu_eager_key_free(&moved);
  tpu_eager_key_free(&heap);
}

static void test_describe_says_each_part(void) {
  tpu_eager_arg_t args[3] = {T(0), double_arg(1),
                             {.lower = {.kind = TPU_ARG_INTS, .num_ints = 2, .ints = {0, -1}}}};
  args[0].tensor.view.strides[0] = 2;
  args[0].tensor.storage_numel = 8;
  tpu_eager_call_t call = {.op_name = "aten::mul.Tensor", .num_args = 3, .args = args,
                           .precision = TPU_HLO_PRECISION_HIGH, .state = 5};
  const char* parts[TPU_EAGER_CALL_MAX_PARTS];
  int n = 0;
  char* texts = tpu_eager_call_describe(&call, parts, &n);
  CHECK(texts && n == 4);
  CHECK(strcmp(parts[0], "arg 0: float32[4] strides [2] offset 0 of 8") == 0);
  CHECK(strcmp(parts[1], "arg 1: scalar float64") == 0);
  CHECK(strcmp(parts[2], "arg 2: [0,-1]") == 0);
  CHECK(strcmp(parts[3], "settings: matmul precision high, state 0x5") == 0);
  free(texts);
}

TPU_TEST_MAIN(TPU_TEST(test_slots_are_the_distinct_storages),
              TPU_TEST(test_key_is_structure_not_values),
              TPU_TEST(test_key_outgrows_the_callers_buffer),
              TPU_TEST(test_describe_says_each_part))
