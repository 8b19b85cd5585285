/* Device buffers: an owned handle to one PJRT_Buffer on one device. */
#ifndef TORCHTPU_CORE_PJRT_BUFFER_H_
#define TORCHTPU_CORE_PJRT_BUFFER_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../dtype.h"
#include "../status.h"
#include "client.h"
#include "event.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TPU_MAX_RANK 16

typedef struct tpu_buffer_s tpu_buffer_t;

/* Copies host data to a new buffer on device `device_index` of `client`.
 * dims has `rank` entries (rank 0 = scalar). byte_strides, when not NULL,
 * has `rank` entries giving the host layout in bytes (non-negative;
 * any order, so transposed and sliced host tensors upload without a host
 * copy); NULL means dense row-major. The host memory may be reused as soon
 * as this returns. */
tpu_status_t tpu_buffer_from_host(tpu_client_t* client, int device_index,
                                  const void* data, tpu_dtype_t dtype,
                                  const int64_t* dims, int rank,
                                  const int64_t* byte_strides,
                                  tpu_buffer_t** out_buffer);

/* Copies the whole buffer to `dst` (dense row-major, dst_bytes must equal
 * tpu_buffer_nbytes) and waits for it. */
tpu_status_t tpu_buffer_to_host(tpu_buffer_t* buffer, void* dst,
                                size_t dst_bytes);
/* Starts that copy and returns its event; dst must stay alive until the
 * event fires. */
tpu_status_t tpu_buffer_to_host_async(tpu_buffer_t* buffer, void* dst,
                                      size_t dst_bytes,
                                      tpu_event_t** out_event);

/* A copy of the buffer on another device of its client, device to device
 * (the plugin moves the bytes; nothing is staged through this process's
 * memory). Waits only until the source is filled (a queued launch), not
 * until it is computed: PJRT orders the copy after its producer. The same
 * device is INVALID_ARGUMENT (PJRT refuses it); a device index out of
 * range OUT_OF_RANGE. */
tpu_status_t tpu_buffer_copy_to_device(tpu_buffer_t* buffer, int device_index,
                                       tpu_buffer_t** out_buffer);

/* Copies bytes [offset, offset + size) of the dense host image to `dst`
 * and waits, moving only those bytes. UNIMPLEMENTED when the plugin cannot
 * (no raw copy, or a tiled device layout as on TPU): read the whole buffer
 * then. */
tpu_status_t tpu_buffer_to_host_range(tpu_buffer_t* buffer, size_t offset,
                                      void* dst, size_t size);
/* Names the op whose execution computes the buffer (`name` must outlive
 * it: a static string), for the errors of reads that surface a failure
 * (tpu_runtime_name_failure). */
void tpu_buffer_set_producer(tpu_buffer_t* buffer, const char* name);
const char* tpu_buffer_producer(const tpu_buffer_t* buffer);
/* Waits until the buffer's contents are computed (surfaces async errors). */
tpu_status_t tpu_buffer_await_ready(tpu_buffer_t* buffer);
/* Whether the contents are known to be computed without error. Known:
 * after a successful await or to_host, a poll that found them ready, or
 * tpu_buffer_set_known_ready. Polling asks the plugin once (an event)
 * unless already known; it never waits. */
bool tpu_buffer_known_ready(const tpu_buffer_t* buffer);
bool tpu_buffer_poll_ready(tpu_buffer_t* buffer);
/* Known, or presumed: computed by an execution that has always finished
 * inside Execute (program.c). A presumption may be wrong (the plugin can
 * run the same program on its pool under load): it lets executions skip
 * their completion events, while reads and error polls still ask PJRT. */
bool tpu_buffer_presumed_ready(const tpu_buffer_t* buffer);
void tpu_buffer_set_presumed_ready(tpu_buffer_t* buffer);
/* Whether the buffer is known to hold a failure: its queued launch failed,
 * or the execution computing it finished with an error. Never waits (a
 * buffer still being computed is not known failed). */
bool tpu_buffer_poll_failed(tpu_buffer_t* buffer);
/* For the outputs of an execution known to have finished. */
void tpu_buffer_set_known_ready(tpu_buffer_t* buffer);

tpu_dtype_t tpu_buffer_dtype(const tpu_buffer_t* buffer);
int tpu_buffer_rank(const tpu_buffer_t* buffer);
const int64_t* tpu_buffer_dims(const tpu_buffer_t* buffer); /* rank entries */
int64_t tpu_buffer_numel(const tpu_buffer_t* buffer);
size_t tpu_buffer_nbytes(const tpu_buffer_t* buffer); /* dense host size */
int tpu_buffer_device_index(const tpu_buffer_t* buffer);
/* True once the buffer was donated to an execution (its data is gone). */
bool tpu_buffer_is_deleted(const tpu_buffer_t* buffer);

/* NULL is fine. With a free hook set (the launch queue), the memory may go
 * later, once executions queued before this call no longer need it. */
void tpu_buffer_destroy(tpu_buffer_t* buffer);

/* ---- buffers filled later (the launch queue, core/launcher.h) ----------- */

enum { TPU_BUFFER_READY = 0, TPU_BUFFER_PENDING = 1, TPU_BUFFER_FAILED = 2 };

/* A buffer whose type and shape are known but whose device contents a
 * queued execution will provide (tpu_executable_execute_into, or
 * tpu_buffer_fail).
 * Metadata getters answer at once; anything that needs the device buffer
 * (copies, readiness, executions) first waits for it to be filled. */
tpu_status_t tpu_buffer_make_pending(tpu_client_t* client, int device_index,
                                     tpu_dtype_t dtype, const int64_t* dims, int rank,
                                     tpu_buffer_t** out_buffer);
/* Marks pending `buffer` failed with `error` (taken); readers get a copy. */
void tpu_buffer_fail(tpu_buffer_t* buffer, tpu_status_t error);
int tpu_buffer_state(const tpu_buffer_t* buffer);
/* Waits until the buffer is no longer pending; its failure, if it failed. */
tpu_status_t tpu_buffer_wait_filled(tpu_buffer_t* buffer);
/* Consulted by tpu_buffer_destroy: returns true when it took the buffer to
 * tpu_buffer_free later (on another thread); false frees it at once. NULL:
 * always at once. */
void tpu_buffer_set_free_hook(bool (*hook)(tpu_buffer_t* buffer));
/* Frees a buffer nobody holds any more (what the free hook defers). */
void tpu_buffer_free(tpu_buffer_t* buffer);

#ifdef __cplusplus
}
#endif
#endif
