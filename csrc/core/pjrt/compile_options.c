#include "compile_options.h"

#include <string.h>

/* ---- xla.CompileOptionsProto, hand-encoded ------------------------------------
 * We link no protobuf library for one small message:
 *   CompileOptionsProto
 *     3 executable_build_options: ExecutableBuildOptionsProto
 *         4 num_replicas (varint), 5 num_partitions (varint),
 *         6 use_spmd_partitioning (bool, only when set),
 *         9 device_assignment: DeviceAssignmentProto (only with device ids)
 *             1 replica_count, 2 computation_count,
 *             3 repeated ComputationDevice { 1 repeated int64
 *               replica_device_ids (packed) }, one per partition
 *     4 compile_portable_executable (bool, only when set)
 *     7 env_option_overrides: map<string, OptionOverrideProto>, one entry
 *         { 1 key "xla_disable_hlo_passes", 2 value { 1 string_field
 *           "cpu-parallel-task-assigner" } } (only with serial_kernels)
 * Fields are written in this order, so single-device options give the
 * bytes they always gave: 1a 04 20 01 28 01 [20 01]. */

enum { WIRE_VARINT = 0, WIRE_LEN = 2 };

/* Writes what fits in `cap`, counts everything: a writer without `out`
 * measures a message before its length prefix is written. */
typedef struct {
  uint8_t* out;
  size_t cap, len;
} writer_t;

static void put_byte(writer_t* w, uint8_t byte) {
  if (w->out && w->len < w->cap) w->out[w->len] = byte;
  w->len++;
}

static void put_varint(writer_t* w, uint64_t v) {
  for (; v >= 0x80; v >>= 7) put_byte(w, (uint8_t)(v | 0x80));
  put_byte(w, (uint8_t)v);
}

static void put_tag(writer_t* w, int field, int wire) {
  put_varint(w, (uint64_t)field << 3 | (uint64_t)wire);
}

static void put_uint_field(writer_t* w, int field, uint64_t v) {
  put_tag(w, field, WIRE_VARINT);
  put_varint(w, v);
}

typedef void (*message_fn)(writer_t* w, const tpu_compile_options_t* o, int part);

/* A length-delimited submessage: measured first, then written. */
static void put_message(writer_t* w, int field, message_fn fn,
                        const tpu_compile_options_t* o, int part) {
  writer_t measure = {0};
  fn(&measure, o, part);
  put_tag(w, field, WIRE_LEN);
  put_varint(w, measure.len);
  fn(w, o, part);
}

static int replicas(const tpu_compile_options_t* o) {
  return o && o->num_replicas > 0 ? o->num_replicas : 1;
}
static int partitions(const tpu_compile_options_t* o) {
  return o && o->num_partitions > 0 ? o->num_partitions : 1;
}

/* The replicas' devices of partition `part` (packed ids). */
static void packed_ids(writer_t* w, const tpu_compile_options_t* o, int part) {
  for (int r = 0; r < replicas(o); r++)
    put_varint(w, (uint64_t)o->device_ids[r * partitions(o) + part]);
}
static void computation_device(writer_t* w, const tpu_compile_options_t* o, int part) {
  put_message(w, 1, packed_ids, o, part);
}

static void device_assignment(writer_t* w, const tpu_compile_options_t* o, int unused) {
  put_uint_field(w, 1, (uint64_t)replicas(o));
  put_uint_field(w, 2, (uint64_t)partitions(o));
  for (int p = 0; p < partitions(o); p++) put_message(w, 3, computation_device, o, p);
}

static void build_options(writer_t* w, const tpu_compile_options_t* o, int unused) {
  put_uint_field(w, 4, (uint64_t)replicas(o));
  put_uint_field(w, 5, (uint64_t)partitions(o));
  if (o && o->spmd) put_uint_field(w, 6, 1);
  if (o && o->device_ids && o->num_device_ids > 0)
    put_message(w, 9, device_assignment, o, 0);
}

static void put_string_field(writer_t* w, int field, const char* str) {
  size_t n = strlen(str);
  put_tag(w, field, WIRE_LEN);
  put_varint(w, n);
  for (size_t i = 0; i < n; i++) put_byte(w, (uint8_t)str[i]);
}
static void pass_name(writer_t* w, const tpu_compile_options_t* o, int unused) {
  put_string_field(w, 1, "cpu-parallel-task-assigner");
}
static void serial_override(writer_t* w, const tpu_compile_options_t* o, int unused) {
  put_string_field(w, 1, "xla_disable_hlo_passes");
  put_message(w, 2, pass_name, o, 0);
}

size_t tpu_compile_options_encode(const tpu_compile_options_t* options,
                                  uint8_t* out_bytes, size_t capacity) {
  writer_t w = {.out = out_bytes, .cap = out_bytes ? capacity : 0};
  put_message(&w, 3, build_options, options, 0);
  bool portable = options ? options->portable : true;
  if (portable) put_uint_field(&w, 4, 1);
  if (options && options->serial_kernels) put_message(&w, 7, serial_override, options, 0);
  return w.len;
}

/* ---- checks ------------------------------------------------------------------- */

int tpu_compile_options_device_count(const tpu_compile_options_t* options) {
  return replicas(options) * partitions(options);
}

/* Far more than any plugin has; keeps replicas * partitions in an int. */
#define MAX_DEVICES (1 << 16)

tpu_status_t tpu_compile_options_check(const tpu_compile_options_t* o) {
  if (!o) return NULL;
  if (o->num_replicas < 0 || o->num_partitions < 0 || replicas(o) > MAX_DEVICES ||
      partitions(o) > MAX_DEVICES || (int64_t)replicas(o) * partitions(o) > MAX_DEVICES)
    return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT,
                           "bad device counts: %d replica(s) x %d partition(s)",
                           o->num_replicas, o->num_partitions);
  int count = tpu_compile_options_device_count(o);
  if (o->portable && count > 1)
    return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT,
                           "a program on %d devices cannot be portable", count);
  if (o->num_device_ids == 0 && !o->device_ids) return NULL;
  if (!o->device_ids || o->num_device_ids != count)
    return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT,
                           "%d device id(s) for %d replica(s) x %d partition(s)",
                           o->device_ids ? o->num_device_ids : 0, replicas(o), partitions(o));
  for (int i = 0; i < count; i++) {
    if (o->device_ids[i] < 0)
      return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT, "device id %d is negative",
                             o->device_ids[i]);
    for (int j = 0; j < i; j++)
      if (o->device_ids[j] == o->device_ids[i])
        return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT,
                               "device id %d is assigned twice (positions %d and %d)",
                               o->device_ids[i], j, i);
  }
  return NULL;
}
