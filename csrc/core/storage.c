#include "storage.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "memory.h"
#include "metrics.h"
#include "runtime.h"

struct tpu_storage_s {
  atomic_int refcount;
  int device;
  size_t nbytes;
  tpu_buffer_t* buffer; /* owned; NULL = never written */
  uintptr_t address;
  _Atomic int defer_value; /* -1: not in a deferred run */
  atomic_bool unaccounted; /* its bytes already returned (see release) */
  char* lost;              /* why the contents are gone, or NULL */
};

static _Atomic(tpu_storage_settle_fn) g_settle;

void tpu_storage_set_settle_hook(tpu_storage_settle_fn hook) { atomic_store(&g_settle, hook); }
int tpu_storage_refcount(const tpu_storage_t* storage) { return atomic_load(&storage->refcount); }
int tpu_storage_defer_value(const tpu_storage_t* storage) { return atomic_load(&storage->defer_value); }
void tpu_storage_set_defer_value(tpu_storage_t* storage, int value) {
  atomic_store(&storage->defer_value, value);
}

void tpu_storage_set_lost(tpu_storage_t* storage, const char* why) {
  free(storage->lost);
  storage->lost = strdup(why ? why : "unknown error");
}

bool tpu_storage_is_lost(const tpu_storage_t* storage) { return storage->lost != NULL; }

/* Before any access to the contents: a deferred run that touches the
 * storage runs first, so the buffer is current. */
static tpu_status_t settle(tpu_storage_t* storage) {
  if (atomic_load(&storage->defer_value) >= 0) {
    tpu_storage_settle_fn hook = atomic_load(&g_settle);
    if (hook) TPU_RETURN_IF_ERROR(hook(storage));
  }
  return NULL;
}

tpu_status_t tpu_storage_settle(tpu_storage_t* storage) { return settle(storage); }

static tpu_status_t check_not_lost(const tpu_storage_t* storage) {
  if (!storage->lost) return NULL;
  return tpu_status_make(TPU_STATUS_FAILED_PRECONDITION,
                         "this tpu tensor's contents were lost when the deferred run "
                         "computing them failed: %s",
                         storage->lost);
}

/* Fake device addresses: TPU_ADDRESS_BASE + device << 44 + a per-device bump
 * offset. 16 TiB per device before the offset wraps; a wrap can only make
 * two storages' addresses collide, which PyTorch tolerates (it compares
 * addresses only within one storage). */
#define TPU_ADDRESS_BASE ((uintptr_t)1 << 52)
#define TPU_ADDRESS_DEVICE_SHIFT 44
#define TPU_ADDRESS_ALIGN 256
static atomic_uint_fast64_t g_next_offset[TPU_MAX_DEVICES];

static uintptr_t next_address(int device, size_t nbytes) {
  uint64_t span = ((uint64_t)nbytes + TPU_ADDRESS_ALIGN) & ~(uint64_t)(TPU_ADDRESS_ALIGN - 1);
  uint64_t offset = atomic_fetch_add(&g_next_offset[device], span);
  offset &= ((uint64_t)1 << TPU_ADDRESS_DEVICE_SHIFT) - 1;
  return TPU_ADDRESS_BASE + ((uintptr_t)device << TPU_ADDRESS_DEVICE_SHIFT) +
         (uintptr_t)offset + TPU_ADDRESS_ALIGN;
}

/* Bytes as CUDA's out-of-memory message writes them ("4.00 TiB"). */
static void format_bytes(double bytes, char* out, size_t size) {
  static const char* kUnits[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int unit = 0;
  while (bytes >= 1024 && unit < 6) {
    bytes /= 1024;
    unit++;
  }
  snprintf(out, size, unit ? "%.2f %s" : "%.0f %s", bytes, kUnits[unit]);
}

static tpu_status_t out_of_memory(int device, size_t nbytes) {
  int64_t free_bytes = 0, total = 0;
  tpu_status_free(tpu_runtime_memory_info(device, &free_bytes, &total));
  tpu_memory_stats_t stats;
  tpu_memory_stats_get(device, &stats);
  char asked[32], cap[32], left[32], held[32];
  format_bytes((double)nbytes, asked, sizeof asked);
  format_bytes((double)total, cap, sizeof cap);
  format_bytes((double)free_bytes, left, sizeof left);
  format_bytes((double)stats.allocated_bytes, held, sizeof held);
  return tpu_status_make(TPU_STATUS_RESOURCE_EXHAUSTED,
                         "TPU out of memory. Tried to allocate %s. tpu:%d has a "
                         "total capacity of %s of which %s is free. %s is "
                         "allocated by PyTorch. (TORCHTPU_MEMORY_LIMIT sets the "
                         "capacity.)",
                         asked, device, cap, left, held);
}

tpu_status_t tpu_storage_create(int device_index, size_t nbytes,
                                tpu_storage_t** out_storage) {
  TPU_RETURN_IF_ERROR(tpu_runtime_check_device(device_index));
  if (device_index >= TPU_MAX_DEVICES)
    return tpu_status_make(TPU_STATUS_OUT_OF_RANGE,
                           "tpu device index %d exceeds the supported %d",
                           device_index, TPU_MAX_DEVICES);
  tpu_storage_t* s = calloc(1, sizeof *s);
  if (!s)
    return tpu_status_oom("for a storage descriptor");
  /* Refused up front when it cannot fit, as cudaMalloc would: the buffer
   * itself is made at the first write, too late to fail cleanly. */
  if (!tpu_memory_try_record_alloc(device_index, nbytes)) {
    free(s);
    return out_of_memory(device_index, nbytes);
  }
  atomic_init(&s->refcount, 1);
  atomic_init(&s->defer_value, -1);
  atomic_init(&s->unaccounted, false);
  s->device = device_index;
  s->nbytes = nbytes;
  s->address = next_address(device_index, nbytes);
  *out_storage = s;
  return NULL;
}

void tpu_storage_retain(tpu_storage_t* storage) {
  if (storage) atomic_fetch_add(&storage->refcount, 1);
}

void tpu_storage_release(tpu_storage_t* storage) {
  if (!storage) return;
  int left = atomic_fetch_sub(&storage->refcount, 1) - 1;
  /* A deferred value nobody but its run holds any more (the run keeps a
   * reference to every member until it flushes) is never materialised:
   * the flush keeps only values something else holds. It takes no device
   * memory, so its bytes are returned now rather than at the flush, or a
   * deferred step would count every intermediate it ever made at once. */
  if (left == 1 && !storage->buffer && atomic_load(&storage->defer_value) >= 0 &&
      !atomic_exchange(&storage->unaccounted, true))
    tpu_memory_record_free(storage->device, storage->nbytes);
  if (left != 0) return;
  tpu_buffer_destroy(storage->buffer);
  free(storage->lost);
  if (!atomic_load(&storage->unaccounted)) tpu_memory_record_free(storage->device, storage->nbytes);
  free(storage);
}

int tpu_storage_device(const tpu_storage_t* storage) { return storage->device; }

uintptr_t tpu_storage_address(const tpu_storage_t* storage) {
  return storage->address;
}

int tpu_storage_device_from_address(uintptr_t address) {
  if (address < TPU_ADDRESS_BASE) return -1;
  uintptr_t device = (address - TPU_ADDRESS_BASE) >> TPU_ADDRESS_DEVICE_SHIFT;
  return device < TPU_MAX_DEVICES ? (int)device : -1;
}
size_t tpu_storage_nbytes(const tpu_storage_t* storage) {
  return storage->nbytes;
}
tpu_buffer_t* tpu_storage_buffer(const tpu_storage_t* storage) {
  return storage->buffer;
}

tpu_status_t tpu_storage_set_buffer(tpu_storage_t* storage,
                                    tpu_buffer_t* buffer) {
  tpu_status_t settled = settle(storage);
  if (settled) {
    tpu_buffer_destroy(buffer);
    return settled;
  }
  if (buffer && tpu_buffer_nbytes(buffer) != storage->nbytes) {
    size_t got = tpu_buffer_nbytes(buffer);
    tpu_buffer_destroy(buffer);
    return tpu_status_make(TPU_STATUS_INTERNAL,
                           "buffer of %zu bytes cannot back a storage of %zu "
                           "bytes",
                           got, storage->nbytes);
  }
  tpu_buffer_t* old = storage->buffer;
  storage->buffer = buffer;
  tpu_buffer_destroy(old);
  free(storage->lost);
  storage->lost = NULL;
  return NULL;
}

tpu_status_t tpu_storage_write_host(tpu_storage_t* storage, const void* data,
                                    tpu_dtype_t dtype, const int64_t* dims,
                                    int rank, const int64_t* byte_strides) {
  if (!tpu_dtype_is_valid(dtype))
    return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT,
                           "unsupported dtype code %d", (int)dtype);
  size_t numel = 1;
  for (int i = 0; i < rank; i++) numel *= (size_t)dims[i];
  if (numel * tpu_dtype_size(dtype) != storage->nbytes)
    return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT,
                           "a write of %zu %s elements does not cover a "
                           "storage of %zu bytes",
                           numel, tpu_dtype_name(dtype), storage->nbytes);
  tpu_buffer_t* buffer = NULL;
  TPU_RETURN_IF_ERROR(tpu_buffer_from_host(tpu_runtime_client(),
                                           storage->device, data, dtype, dims,
                                           rank, byte_strides, &buffer));
  return tpu_storage_set_buffer(storage, buffer);
}

tpu_status_t tpu_storage_write_bytes(tpu_storage_t* storage, const void* data,
                                     tpu_dtype_t dtype) {
  size_t size = tpu_dtype_size(dtype);
  if (size == 0 || storage->nbytes % size != 0) {
    dtype = TPU_DTYPE_UINT8;
    size = 1;
  }
  int64_t dims[1] = {(int64_t)(storage->nbytes / size)};
  return tpu_storage_write_host(storage, data, dtype, dims, 1, NULL);
}

/* A read's error that surfaces a failed execution, naming the op. */
static tpu_status_t named(tpu_storage_t* storage, tpu_status_t status) {
  if (!status) return NULL;
  return tpu_runtime_name_failure(storage->device, status,
                                  tpu_buffer_producer(storage->buffer));
}

tpu_status_t tpu_storage_read_bytes(tpu_storage_t* storage, void* dst,
                                    size_t nbytes) {
  if (nbytes != storage->nbytes)
    return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT,
                           "reading %zu bytes from a storage of %zu bytes",
                           nbytes, storage->nbytes);
  TPU_RETURN_IF_ERROR(settle(storage));
  TPU_RETURN_IF_ERROR(check_not_lost(storage));
  if (!storage->buffer) {
    memset(dst, 0, nbytes);
    return NULL;
  }
  return named(storage, tpu_buffer_to_host(storage->buffer, dst, nbytes));
}

tpu_status_t tpu_storage_read_range(tpu_storage_t* storage, size_t offset,
                                    void* dst, size_t size) {
  if (offset > storage->nbytes || size > storage->nbytes - offset)
    return tpu_status_make(TPU_STATUS_OUT_OF_RANGE,
                           "bytes [%zu, %zu) are outside a storage of %zu bytes",
                           offset, offset + size, storage->nbytes);
  if (size == storage->nbytes) return tpu_storage_read_bytes(storage, dst, size);
  TPU_RETURN_IF_ERROR(settle(storage));
  TPU_RETURN_IF_ERROR(check_not_lost(storage));
  if (size == 0) return NULL;
  if (!storage->buffer) {
    memset(dst, 0, size);
    return NULL;
  }
  tpu_status_t status = tpu_buffer_to_host_range(storage->buffer, offset, dst, size);
  if (tpu_status_code(status) != TPU_STATUS_UNIMPLEMENTED) return named(storage, status);
  tpu_status_free(status);
  /* A tiled device layout: the whole image, then the range of it. */
  uint8_t* staging = malloc(storage->nbytes);
  if (!staging)
    return tpu_status_make(TPU_STATUS_RESOURCE_EXHAUSTED,
                           "out of host memory staging %zu bytes", storage->nbytes);
  status = named(storage, tpu_buffer_to_host(storage->buffer, staging, storage->nbytes));
  if (!status) memcpy(dst, staging + offset, size);
  free(staging);
  return status;
}

tpu_status_t tpu_storage_copy_prefix(tpu_storage_t* dst, tpu_storage_t* src) {
  TPU_RETURN_IF_ERROR(settle(dst));
  TPU_RETURN_IF_ERROR(settle(src));
  size_t n = src->nbytes < dst->nbytes ? src->nbytes : dst->nbytes;
  if (n == 0 || !src->buffer) return NULL;
  uint8_t* staging = calloc(1, dst->nbytes + src->nbytes);
  if (!staging)
    return tpu_status_make(TPU_STATUS_RESOURCE_EXHAUSTED,
                           "out of host memory staging %zu bytes",
                           dst->nbytes + src->nbytes);
  uint8_t* dst_bytes = staging;
  uint8_t* src_bytes = staging + dst->nbytes;
  tpu_status_t status = tpu_storage_read_bytes(dst, dst_bytes, dst->nbytes);
  if (!status) status = tpu_storage_read_bytes(src, src_bytes, src->nbytes);
  if (!status) {
    memcpy(dst_bytes, src_bytes, n);
    status = tpu_storage_write_bytes(dst, dst_bytes,
                                     tpu_buffer_dtype(src->buffer));
  }
  free(staging);
  return status;
}

tpu_status_t tpu_storage_copy_to_device(tpu_storage_t* dst, tpu_storage_t* src) {
  if (!dst || !src || dst->nbytes != src->nbytes || dst->device == src->device)
    return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT,
                           "a device-to-device copy needs two storages of equal size on "
                           "different devices");
  TPU_RETURN_IF_ERROR(settle(src));
  TPU_RETURN_IF_ERROR(check_not_lost(src));
  TPU_RETURN_IF_ERROR(settle(dst));
  if (!src->buffer) {
    void* zeros = calloc(1, src->nbytes ? src->nbytes : 1);
    if (!zeros) return tpu_status_oom("zero-filling a storage");
    tpu_status_t s = tpu_storage_write_bytes(dst, zeros, TPU_DTYPE_UINT8);
    free(zeros);
    return s;
  }
  tpu_buffer_t* copy = NULL;
  TPU_RETURN_IF_ERROR(tpu_buffer_copy_to_device(src->buffer, dst->device, &copy));
  TPU_METRICS_BUMP("bytes_device_to_device", (int64_t)src->nbytes);
  return tpu_storage_set_buffer(dst, copy);
}

bool tpu_storage_shapes_free(void) {
  tpu_client_t* client = tpu_runtime_client();
  return client && tpu_client_is_cpu(client);
}

static int64_t count(const int64_t* dims, int rank) {
  int64_t n = 1;
  for (int d = 0; d < rank; d++) n *= dims[d];
  return n;
}

tpu_status_t tpu_storage_buffer_as(tpu_storage_t* storage, tpu_dtype_t dtype,
                                   const int64_t* dims, int rank,
                                   tpu_buffer_t** out_buffer) {
  TPU_RETURN_IF_ERROR(settle(storage));
  TPU_RETURN_IF_ERROR(check_not_lost(storage));
  tpu_buffer_t* current = storage->buffer;
  if (current && tpu_buffer_dtype(current) == dtype &&
      tpu_buffer_rank(current) == rank &&
      (rank == 0 ||
       memcmp(tpu_buffer_dims(current), dims, sizeof(int64_t) * (size_t)rank) == 0)) {
    *out_buffer = current;
    return NULL;
  }
  if (current && tpu_buffer_dtype(current) == dtype && tpu_storage_shapes_free() &&
      count(dims, rank) == count(tpu_buffer_dims(current), tpu_buffer_rank(current))) {
    *out_buffer = current;
    return NULL;
  }
  void* staging = malloc(storage->nbytes ? storage->nbytes : 1);
  if (!staging)
    return tpu_status_make(TPU_STATUS_RESOURCE_EXHAUSTED,
                           "out of host memory staging %zu bytes", storage->nbytes);
  tpu_status_t status = tpu_storage_read_bytes(storage, staging, storage->nbytes);
  if (!status)
    status = tpu_storage_write_host(storage, staging, dtype, dims, rank, NULL);
  free(staging);
  TPU_RETURN_IF_ERROR(status);
  tpu_metrics_add("restages", 1);
  *out_buffer = storage->buffer;
  return NULL;
}
