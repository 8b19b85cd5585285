/* A device storage: what a c10::StorageImpl's DataPtr owns on "tpu".
 * It holds the device, the byte size and the *current* PJRT buffer. PyTorch
 * allocates storages untyped, so a fresh storage has no buffer at all; the
 * first write fixes the buffer's element type and shape (its total bytes
 * always equal the storage's). Writes replace the buffer, so every tensor
 * viewing the storage sees the new contents. Refcounted: the DataPtr holds
 * one reference, pending work may hold more. */
#ifndef TORCHTPU_CORE_STORAGE_H_
#define TORCHTPU_CORE_STORAGE_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dtype.h"
#include "pjrt/buffer.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tpu_storage_s tpu_storage_t;

/* A storage of nbytes on device_index (refcount 1, no buffer). Counts the
 * bytes in the device's memory stats. */
tpu_status_t tpu_storage_create(int device_index, size_t nbytes,
                                tpu_storage_t** out_storage);
void tpu_storage_retain(tpu_storage_t* storage);
/* Drops a reference; the last one frees the buffer and the accounting. */
void tpu_storage_release(tpu_storage_t* storage);

int tpu_storage_device(const tpu_storage_t* storage);
/* A unique, never-dereferenced address for the storage's bytes: PyTorch
 * needs a data pointer per storage (data_ptr(), overlap checks), and the
 * device index is encoded in it so a pointer alone names its device. */
uintptr_t tpu_storage_address(const tpu_storage_t* storage);
/* The device an address from tpu_storage_address belongs to; -1 if it is
 * not one of ours. */
int tpu_storage_device_from_address(uintptr_t address);
size_t tpu_storage_nbytes(const tpu_storage_t* storage);
/* Borrowed; NULL while the storage has never been written. */
tpu_buffer_t* tpu_storage_buffer(const tpu_storage_t* storage);
/* Installs `buffer` (ownership moves to the storage) as the current
 * contents and destroys the previous one. Its bytes must equal nbytes. */
tpu_status_t tpu_storage_set_buffer(tpu_storage_t* storage,
                                    tpu_buffer_t* buffer);

/* Replaces the whole contents from host memory laid out as `dtype` with
 * `dims` and optional byte_strides (see tpu_buffer_from_host); the
 * element count times the dtype size must equal the storage's bytes. */
tpu_status_t tpu_storage_write_host(tpu_storage_t* storage, const void* data,
                                    tpu_dtype_t dtype, const int64_t* dims,
                                    int rank, const int64_t* byte_strides);
/* Replaces the whole contents with nbytes raw bytes (dense), typed as
 * `dtype` when nbytes is a multiple of its size, else as uint8. */
tpu_status_t tpu_storage_write_bytes(tpu_storage_t* storage, const void* data,
                                     tpu_dtype_t dtype);
/* Copies the whole contents (nbytes bytes) to host memory and waits. A
 * storage never written reads as zeros. */
tpu_status_t tpu_storage_read_bytes(tpu_storage_t* storage, void* dst,
                                    size_t nbytes);
/* Copies bytes [offset, offset + size) of the contents to host memory and
 * waits, moving only those bytes where the plugin can (see
 * tpu_buffer_to_host_range); element reads and slices of large tensors. */
tpu_status_t tpu_storage_read_range(tpu_storage_t* storage, size_t offset,
                                    void* dst, size_t size);
/* The current buffer, typed as `dtype` with `dims` (their bytes must equal
 * the storage's). When the buffer was written with another shape or type
 * (or never), its bytes are restaged through the host into one that has
 * them; counted as "restages". Where shapes are free (see
 * tpu_storage_set_shapes_free) a buffer of the same dtype and element
 * count is returned as it is. Borrowed result. */
tpu_status_t tpu_storage_buffer_as(tpu_storage_t* storage, tpu_dtype_t dtype,
                                   const int64_t* dims, int rank,
                                   tpu_buffer_t** out_buffer);
/* Copies the first min(dst, src) bytes of src into dst (device to device,
 * staged through the host); the rest of dst keeps its contents (zeros when
 * never written). Used when PyTorch resizes a storage. */
tpu_status_t tpu_storage_copy_prefix(tpu_storage_t* dst, tpu_storage_t* src);

/* Replaces dst's whole contents with src's, src on another device (their
 * bytes must be equal): the plugin copies device to device (counted as
 * "bytes_device_to_device"), nothing passes through host memory. A src
 * never written gives zeros. */
tpu_status_t tpu_storage_copy_to_device(tpu_storage_t* dst, tpu_storage_t* src);

/* Whether a dense buffer can be passed where a program declares another
 * shape with the same dtype and element count: on the CPU plugin, whose
 * buffers are plain row-major bytes and whose execute checks arguments by
 * byte size only. Not on plugins with tiled layouts (TPU), where the same
 * elements in another shape are other bytes. Lets programs return results
 * in their own shape (eager.c fresh_result). */
bool tpu_storage_shapes_free(void);

/* ---- deferred values (DeferAndFuse, see defer.h) ---------------------------
 * A storage read or written by a deferred run carries that run's value id
 * (-1: none). Its buffer is then not its contents: every access above
 * (read, write, buffer_as, copy_prefix) first calls the settle hook, which
 * flushes the run; tpu_storage_buffer alone stays raw (the engine's own). */
int tpu_storage_defer_value(const tpu_storage_t* storage);
/* References held (the tensor's DataPtr and pending work): a deferred run
 * holding the only one knows the value is dead. */
int tpu_storage_refcount(const tpu_storage_t* storage);
void tpu_storage_set_defer_value(tpu_storage_t* storage, int value);
typedef tpu_status_t (*tpu_storage_settle_fn)(tpu_storage_t* storage);
void tpu_storage_set_settle_hook(tpu_storage_settle_fn hook);
/* Runs the hook now if the storage is in a deferred run (else nothing). */
tpu_status_t tpu_storage_settle(tpu_storage_t* storage);
/* Marks the contents lost (a deferred run that produced them failed):
 * later reads return `why` until the storage is written again. */
void tpu_storage_set_lost(tpu_storage_t* storage, const char* why);
bool tpu_storage_is_lost(const tpu_storage_t* storage);

#ifdef __cplusplus
}
#endif
#endif
