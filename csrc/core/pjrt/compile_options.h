/* The options a program is compiled with, and their encoding as the
 * xla.CompileOptionsProto bytes PJRT_Client_Compile takes. */
#ifndef TORCHTPU_CORE_PJRT_COMPILE_OPTIONS_H_
#define TORCHTPU_CORE_PJRT_COMPILE_OPTIONS_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tpu_compile_options_s {
  /* Compile once and run on any device (compile_portable_executable). Only
   * for single-device programs. */
  bool portable;
  /* Copies of the program run together, one per device (0 means 1):
   * num_replicas run it as written (collectives address replicas),
   * num_partitions are the pieces of one SPMD program. */
  int num_replicas;
  int num_partitions;
  /* Partition the program with XLA's SPMD partitioner (use_spmd_partitioning). */
  bool spmd;
  /* The devices, as PJRT global ids (tpu_device_id, not client indices):
   * num_replicas * num_partitions of them, replica-major
   * (device_ids[r * num_partitions + p] runs replica r, partition p).
   * Borrowed for the call. NULL / 0: XLA's default assignment. */
  const int* device_ids;
  int num_device_ids;
  /* XLA:CPU only: no parallel task assignment (every kernel runs on one
   * thread), sent as env_option_overrides xla_disable_hlo_passes =
   * cpu-parallel-task-assigner. Other plugins have no such pass. */
  bool serial_kernels;
} tpu_compile_options_t;

/* Devices a program compiled with `options` runs on at once (replicas
 * times partitions; 1 for NULL). */
int tpu_compile_options_device_count(const tpu_compile_options_t* options);

/* INVALID_ARGUMENT when the fields contradict each other: negative counts,
 * a device list of the wrong length or with a negative or repeated id, a
 * portable program on more than one device. NULL is valid (portable). */
tpu_status_t tpu_compile_options_check(const tpu_compile_options_t* options);

/* Encodes the xla.CompileOptionsProto bytes we send (hand-written protobuf;
 * see compile_options.c). Options with only `portable` set encode exactly as
 * they did before the multi-device fields existed (cache keys hash these
 * bytes). Writes at most `capacity` bytes and returns the encoded length.
 * Exposed so cache keys can hash exactly what the compiler saw. Encodes
 * what it is given; call tpu_compile_options_check first. */
size_t tpu_compile_options_encode(const tpu_compile_options_t* options,
                                  uint8_t* out_bytes, size_t capacity);

#ifdef __cplusplus
}
#endif
#endif
