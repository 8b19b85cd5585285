/* Compiled, loaded programs: compile StableHLO text, execute with donation,
 * serialize and deserialize. */
#ifndef TORCHTPU_CORE_PJRT_EXECUTABLE_H_
#define TORCHTPU_CORE_PJRT_EXECUTABLE_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../status.h"
#include "buffer.h"
#include "client.h"
#include "event.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tpu_executable_s tpu_executable_t;

typedef struct tpu_compile_options_s {
  /* Compile once and run on any device (compile_portable_executable). */
  bool portable;
} tpu_compile_options_t;

/* Encodes the xla.CompileOptionsProto bytes we send (hand-written protobuf:
 * num_replicas=1, num_partitions=1, compile_portable_executable). Writes at
 * most `capacity` bytes and returns the encoded length. Exposed so cache keys
 * can hash exactly what the compiler saw. */
size_t tpu_compile_options_encode(const tpu_compile_options_t* options,
                                  uint8_t* out_bytes, size_t capacity);

/* Compiles StableHLO text (format "mlir"). options may be NULL (portable).
 * A program that does not parse or verify returns INVALID_ARGUMENT with the
 * plugin's diagnostic. */
tpu_status_t tpu_executable_compile(tpu_client_t* client, const char* mlir,
                                    size_t mlir_len,
                                    const tpu_compile_options_t* options,
                                    tpu_executable_t** out_executable);

int tpu_executable_num_outputs(const tpu_executable_t* executable);
/* Output element types / shapes as compiled. */
tpu_dtype_t tpu_executable_output_dtype(const tpu_executable_t* executable,
                                        int i);
int tpu_executable_output_rank(const tpu_executable_t* executable, int i);
const int64_t* tpu_executable_output_dims(const tpu_executable_t* executable,
                                          int i);

/* Runs on device `device_index`. args are borrowed. `donatable` (may be NULL
 * = none) has nargs flags: an argument that the program aliases to an output
 * (tf.aliasing_output) is donated only if its flag is true; a donated
 * argument buffer is dead afterwards (tpu_buffer_is_deleted) and must only be
 * destroyed. out_results must have room for tpu_executable_num_outputs
 * buffers, which the caller owns. out_done (may be NULL) receives an event
 * that fires when the execution finishes. Returns as soon as the work is
 * enqueued. */
tpu_status_t tpu_executable_execute(tpu_executable_t* executable,
                                    int device_index,
                                    tpu_buffer_t* const* args, int nargs,
                                    const bool* donatable,
                                    tpu_buffer_t** out_results,
                                    tpu_event_t** out_done);

/* The same, nothing donated, into `pending_results`: pending buffers
 * (tpu_buffer_make_pending) of the declared output types, filled with the
 * outputs instead of new buffers being made (the launch queue's results,
 * handed out before their execution ran). */
tpu_status_t tpu_executable_execute_into(tpu_executable_t* executable, int device_index,
                                         tpu_buffer_t* const* args, int nargs,
                                         tpu_buffer_t** pending_results,
                                         tpu_event_t** out_done);

/* Serialized executable bytes (plugin-version specific). *out_bytes is
 * malloc'd; the caller frees it with free(). */
tpu_status_t tpu_executable_serialize(const tpu_executable_t* executable,
                                      void** out_bytes, size_t* out_len);
tpu_status_t tpu_executable_deserialize(tpu_client_t* client,
                                        const void* bytes, size_t len,
                                        tpu_executable_t** out_executable);

/* Tells a deserialized executable its StableHLO text (compiled ones read
 * it themselves): a program that aliases no parameter to a result runs
 * without the per-call list of arguments not to donate. Until told, an
 * executable assumes it may alias. */
void tpu_executable_note_text(tpu_executable_t* executable, const char* mlir, size_t len);
/* Whether it runs on any device (else only the one it was compiled for). */
bool tpu_executable_portable(const tpu_executable_t* executable);
/* Whether executions still pass the arguments not to donate (see above). */
bool tpu_executable_may_alias(const tpu_executable_t* executable);

void tpu_executable_destroy(tpu_executable_t* executable); /* NULL is fine */

#ifdef __cplusplus
}
#endif
#endif
