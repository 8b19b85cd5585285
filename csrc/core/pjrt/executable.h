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
#include "compile_options.h"
#include "event.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tpu_executable_s tpu_executable_t;

/* Compiles StableHLO text (format "mlir"). options may be NULL (portable);
 * options that fail tpu_compile_options_check are INVALID_ARGUMENT. With
 * more than one replica or partition the program runs on that many devices
 * at once (tpu_executable_execute_multi). A program that does not parse or
 * verify returns INVALID_ARGUMENT with the plugin's diagnostic. */
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

/* The devices the program runs on at once: 1 for a single-device program
 * (0 when portable: it runs wherever execute is told), else replicas x
 * partitions. device_index(d) is the client device of the d-th, in the
 * compile options' device order (replica-major); -1 out of range. */
int tpu_executable_num_devices(const tpu_executable_t* executable);
int tpu_executable_device_index(const tpu_executable_t* executable, int d);

/* Runs a multi-device program (or a single-device one bound to its device)
 * on all its devices at once: num_devices must equal
 * tpu_executable_num_devices. args[d] holds the nargs arguments of the
 * d-th device (borrowed), each of which must live on that device
 * (tpu_executable_device_index(d)), else INVALID_ARGUMENT naming the
 * argument and both devices. Nothing is donated. out_results has room for
 * num_devices * num_outputs buffers, row-major per device: output k of
 * device d is out_results[d * num_outputs + k], on that device, owned by
 * the caller. out_done (may be NULL) has room for num_devices events, one
 * per device, firing when that device's part finished (each owned by the
 * caller); per device, so each can be tracked with that device's other
 * work. Returns as soon as the work is enqueued. */
tpu_status_t tpu_executable_execute_multi(tpu_executable_t* executable, int num_devices,
                                          tpu_buffer_t* const* const* args, int nargs,
                                          tpu_buffer_t** out_results,
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
