/* The hand-encoded xla.CompileOptionsProto: single-device options keep the
 * exact bytes they always had (disk cache keys hash them), multi-device
 * fields encode as protobuf would, and contradictory options are refused. */
#include "compile_options.h"

#include <string.h>

#include "../testing.h"

#define CHECK_BYTES(options, ...)                                            \
  do {                                                                       \
    const uint8_t want_[] = {__VA_ARGS__};                                   \
    uint8_t got_[64];                                                        \
    size_t len_ = tpu_compile_options_encode((options), got_, sizeof got_); \
    CHECK_EQ(len_, sizeof want_);                                            \
    CHECK(memcmp(got_, want_, sizeof want_) == 0);                           \
  } while (0)

#define CHECK_INVALID(options, needle)                                \
  do {                                                                \
    tpu_status_t s_ = tpu_compile_options_check(options);             \
    CHECK_EQ(tpu_status_code(s_), TPU_STATUS_INVALID_ARGUMENT);       \
    CHECK_STR_CONTAINS(tpu_status_message(s_), needle);               \
    tpu_status_free(s_);                                              \
  } while (0)

/* The bytes every cache entry written before multi-device programs was
 * keyed by: {build options {num_replicas 1, num_partitions 1}} and
 * compile_portable_executable when portable. */
static void test_single_device_bytes_are_pinned(void) {
  tpu_compile_options_t portable = {.portable = true};
  tpu_compile_options_t bound = {0};
  CHECK_BYTES(&portable, 0x1a, 0x04, 0x20, 0x01, 0x28, 0x01, 0x20, 0x01);
  CHECK_BYTES(NULL, 0x1a, 0x04, 0x20, 0x01, 0x28, 0x01, 0x20, 0x01);
  CHECK_BYTES(&bound, 0x1a, 0x04, 0x20, 0x01, 0x28, 0x01);
  /* Explicit ones are the same as zeros. */
  tpu_compile_options_t ones = {.num_replicas = 1, .num_partitions = 1};
  CHECK_BYTES(&ones, 0x1a, 0x04, 0x20, 0x01, 0x28, 0x01);
  CHECK_EQ(tpu_compile_options_device_count(NULL), 1);
  CHECK_EQ(tpu_compile_options_device_count(&bound), 1);
  CHECK(tpu_compile_options_check(NULL) == NULL);
  CHECK(tpu_compile_options_check(&portable) == NULL);
}

static void test_replicated_assignment(void) {
  const int ids[4] = {0, 1, 2, 3};
  tpu_compile_options_t o = {.num_replicas = 4, .device_ids = ids, .num_device_ids = 4};
  CHECK(tpu_compile_options_check(&o) == NULL);
  CHECK_EQ(tpu_compile_options_device_count(&o), 4);
  /* build {4: 4, 5: 1, 9: {1: 4, 2: 1, 3: {1: [0 1 2 3] packed}}} */
  CHECK_BYTES(&o, 0x1a, 0x12, 0x20, 0x04, 0x28, 0x01, 0x4a, 0x0c, 0x08, 0x04, 0x10, 0x01,
              0x1a, 0x06, 0x0a, 0x04, 0x00, 0x01, 0x02, 0x03);
  /* Without ids: XLA's default assignment, no field 9. */
  tpu_compile_options_t no_ids = {.num_replicas = 4};
  CHECK_BYTES(&no_ids, 0x1a, 0x04, 0x20, 0x04, 0x28, 0x01);
}

static void test_spmd_assignment(void) {
  const int ids[2] = {3, 1};
  tpu_compile_options_t o = {
      .num_partitions = 2, .spmd = true, .device_ids = ids, .num_device_ids = 2};
  CHECK(tpu_compile_options_check(&o) == NULL);
  /* build {4: 1, 5: 2, 6: true, 9: {1: 1, 2: 2, 3: {1: [3]}, 3: {1: [1]}}} */
  CHECK_BYTES(&o, 0x1a, 0x16, 0x20, 0x01, 0x28, 0x02, 0x30, 0x01, 0x4a, 0x0e, 0x08, 0x01,
              0x10, 0x02, 0x1a, 0x03, 0x0a, 0x01, 0x03, 0x1a, 0x03, 0x0a, 0x01, 0x01);
}

/* Replicas x partitions: computation p lists its replicas' devices, read
 * from the replica-major id list; ids above 127 take two varint bytes. */
static void test_replicas_by_partitions_and_long_varints(void) {
  const int ids[4] = {300, 1, 2, 3}; /* (r0,p0) (r0,p1) (r1,p0) (r1,p1) */
  tpu_compile_options_t o = {
      .num_replicas = 2, .num_partitions = 2, .device_ids = ids, .num_device_ids = 4};
  CHECK(tpu_compile_options_check(&o) == NULL);
  CHECK_BYTES(&o, 0x1a, 0x17, 0x20, 0x02, 0x28, 0x02, 0x4a, 0x11, 0x08, 0x02, 0x10, 0x02,
              0x1a, 0x05, 0x0a, 0x03, 0xac, 0x02, 0x02, /* partition 0: 300, 2 */
              0x1a, 0x04, 0x0a, 0x02, 0x01, 0x03);      /* partition 1: 1, 3 */
  /* Too small a buffer: the full length is still reported. */
  uint8_t small[5];
  memset(small, 0xee, sizeof small);
  CHECK_EQ(tpu_compile_options_encode(&o, small, 3), 25u);
  CHECK(small[0] == 0x1a && small[2] == 0x20 && small[3] == 0xee);
  CHECK_EQ(tpu_compile_options_encode(&o, NULL, 0), 25u);
}

static void test_contradictions_are_refused(void) {
  const int ids[3] = {0, 1, 1};
  tpu_compile_options_t o = {.num_replicas = 2, .portable = true};
  CHECK_INVALID(&o, "cannot be portable");
  o = (tpu_compile_options_t){.num_replicas = -1};
  CHECK_INVALID(&o, "bad device counts");
  o = (tpu_compile_options_t){.num_replicas = 2, .device_ids = ids, .num_device_ids = 3};
  CHECK_INVALID(&o, "3 device id(s) for 2 replica(s) x 1 partition(s)");
  o = (tpu_compile_options_t){.num_replicas = 2, .device_ids = NULL, .num_device_ids = 2};
  CHECK_INVALID(&o, "0 device id(s)");
  o = (tpu_compile_options_t){.num_replicas = 2, .device_ids = ids + 1, .num_device_ids = 2};
  CHECK_INVALID(&o, "device id 1 is assigned twice");
  const int negative[2] = {0, -2};
  o = (tpu_compile_options_t){.num_partitions = 2, .device_ids = negative, .num_device_ids = 2};
  CHECK_INVALID(&o, "device id -2 is negative");
  o = (tpu_compile_options_t){.num_replicas = 1 << 10, .num_partitions = 1 << 10};
  CHECK_INVALID(&o, "bad device counts");
}

TPU_TEST_MAIN(TPU_TEST(test_single_device_bytes_are_pinned), TPU_TEST(test_replicated_assignment),
              TPU_TEST(test_spmd_assignment),
              TPU_TEST(test_replicas_by_partitions_and_long_varints),
              TPU_TEST(test_contradictions_are_refused))
