#include "buffer.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "../trace.h"

/* ---- helpers ------------------------------------------------------------------ */

static atomic_bool g_force_host_pack, g_force_pjrt_reads;

void tpu_buffer_set_force_host_pack(bool force) {
  atomic_store(&g_force_host_pack, force);
}

void tpu_buffer_set_force_pjrt_reads(bool force) {
  atomic_store(&g_force_pjrt_reads, force);
}

static void destroy_pjrt_buffer(const PJRT_Api* api, PJRT_Buffer* buffer) {
  if (!buffer) return;
  TPU_PJRT_ARGS(PJRT_Buffer_Destroy_Args, args);
  args.buffer = buffer;
  tpu_status_free(TPU_PJRT_CALL(api, PJRT_Buffer_Destroy, &args));
}

/* numel of dims, or -1 on overflow / negative dims. */
static int64_t checked_numel(const int64_t* dims, int rank) {
  int64_t n = 1;
  for (int i = 0; i < rank; i++) {
    if (dims[i] < 0) return -1;
    if (dims[i] && n > INT64_MAX / dims[i]) return -1;
    n *= dims[i];
  }
  return n;
}

static bool strides_are_dense(const int64_t* dims, int rank,
                              const int64_t* byte_strides, size_t elem) {
  int64_t expected = (int64_t)elem;
  for (int i = rank - 1; i >= 0; i--) {
    /* A size-1 dimension is never stepped over: any stride is fine. */
    if (dims[i] != 1 && byte_strides[i] != expected) return false;
    expected *= dims[i];
  }
  return true;
}

/* Copies a strided host array into a dense row-major one. numel > 0. */
static void pack_strided(const void* src, size_t elem, const int64_t* dims,
                         int rank, const int64_t* byte_strides, void* dst) {
  if (rank == 0) {
    memcpy(dst, src, elem);
    return;
  }
  int64_t index[TPU_MAX_RANK] = {0};
  const int last = rank - 1;
  const int64_t inner = dims[last];
  const bool inner_contiguous = byte_strides[last] == (int64_t)elem;
  const char* base = src;
  char* out = dst;
  for (;;) {
    const char* row = base;
    for (int i = 0; i < last; i++) row += index[i] * byte_strides[i];
    if (inner_contiguous) {
      memcpy(out, row, (size_t)inner * elem);
      out += (size_t)inner * elem;
    } else {
      for (int64_t j = 0; j < inner; j++) {
        memcpy(out, row + j * byte_strides[last], elem);
        out += elem;
      }
    }
    int d = last - 1;
    while (d >= 0 && ++index[d] == dims[d]) index[d--] = 0;
    if (d < 0) return;
  }
}

static tpu_status_t upload(tpu_client_t* client, PJRT_Device* device,
                           const void* data, tpu_dtype_t dtype,
                           const int64_t* dims, int rank,
                           const int64_t* byte_strides,
                           PJRT_Buffer** out_buffer) {
  const PJRT_Api* api = client->api;
  TPU_PJRT_ARGS(PJRT_Client_BufferFromHostBuffer_Args, args);
  args.client = client->client;
  args.data = data;
  args.type = tpu_pjrt_buffer_type(dtype);
  args.dims = dims;
  args.num_dims = (size_t)rank;
  args.byte_strides = byte_strides;
  args.num_byte_strides = byte_strides ? (size_t)rank : 0;
  /* The plugin copies (or finishes reading) `data` before returning. */
  args.host_buffer_semantics = PJRT_HostBufferSemantics_kImmutableOnlyDuringCall;
  args.device = device;
  TPU_RETURN_IF_ERROR(
      TPU_PJRT_CALL(api, PJRT_Client_BufferFromHostBuffer, &args));
  /* Already fired under this semantics; waiting costs nothing and keeps the
   * promise "host memory reusable on return" even for a lax plugin. */
  tpu_status_t status = tpu_pjrt_event_await_destroy(
      api, args.done_with_host_buffer, "host-to-device transfer");
  if (status) {
    destroy_pjrt_buffer(api, args.buffer);
    return status;
  }
  *out_buffer = args.buffer;
  return NULL;
}

/* ---- wrapper memory ---------------------------------------------------------- */

/* Waiters for pending buffers sleep on one condition: fills are frequent,
 * waits rare (a host read of a value still queued), so a fill only takes
 * the lock when someone sleeps. */
static pthread_mutex_t g_fill_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_fill_cond = PTHREAD_COND_INITIALIZER;
static atomic_int g_fill_sleepers;

/* Wrappers are recycled through a pool rather than malloc'd and freed.
 * With the launch queue, wrappers made on the op thread are freed on the
 * worker; glibc returns a chunk to the arena it came from, under that
 * arena's lock, which the op thread's own allocations keep taking, so each
 * op had the two threads contend (the worker's executions ran ~1.5x slower
 * than on a single thread; with a per-thread allocator they did not). Each
 * thread keeps its own list and trades batches with the shared one. */
typedef union wrapper_u {
  tpu_buffer_t buffer;
  union wrapper_u* next;
} wrapper_t;

enum { LOCAL_MAX = 64, SHARED_MAX = 4096 };
static pthread_mutex_t g_pool_lock = PTHREAD_MUTEX_INITIALIZER;
static wrapper_t* g_pool;
static size_t g_pool_count;
static _Thread_local wrapper_t *t_pool, *t_pool_tail;
static _Thread_local int t_pool_count;

/* The launch queue's worker takes these locks; a fork must not leave the
 * child one taken by a thread it does not have. */
static void lock_for_fork(void) {
  pthread_mutex_lock(&g_pool_lock);
  pthread_mutex_lock(&g_fill_lock);
}
static void unlock_after_fork(void) {
  pthread_mutex_unlock(&g_fill_lock);
  pthread_mutex_unlock(&g_pool_lock);
}
__attribute__((constructor)) static void register_fork_handlers(void) {
  pthread_atfork(lock_for_fork, unlock_after_fork, unlock_after_fork);
}

static tpu_buffer_t* wrapper_new(void) {
  if (!t_pool) {
    pthread_mutex_lock(&g_pool_lock);
    t_pool = g_pool;
    t_pool_count = (int)g_pool_count;
    g_pool = NULL;
    g_pool_count = 0;
    pthread_mutex_unlock(&g_pool_lock);
    t_pool_tail = NULL;
    for (wrapper_t* w = t_pool; w; w = w->next) t_pool_tail = w;
  }
  wrapper_t* w = t_pool;
  if (!w) return calloc(1, sizeof(wrapper_t));
  t_pool = w->next;
  if (!t_pool) t_pool_tail = NULL;
  t_pool_count--;
  memset(w, 0, sizeof *w);
  return &w->buffer;
}

/* Hands this thread's list to the shared pool (what does not fit is freed). */
static void give_back_local(void) {
  pthread_mutex_lock(&g_pool_lock);
  if (g_pool_count + (size_t)t_pool_count <= SHARED_MAX && t_pool) {
    t_pool_tail->next = g_pool;
    g_pool = t_pool;
    g_pool_count += (size_t)t_pool_count;
    t_pool = NULL;
  }
  pthread_mutex_unlock(&g_pool_lock);
  while (t_pool) {
    wrapper_t* next = t_pool->next;
    free(t_pool);
    t_pool = next;
  }
  t_pool_tail = NULL;
  t_pool_count = 0;
}

/* A thread's list goes back to the shared pool when the thread exits. */
static pthread_key_t g_pool_key;
static pthread_once_t g_pool_key_once = PTHREAD_ONCE_INIT;
static _Thread_local bool t_pool_key_set;
static void on_thread_exit(void* unused) {
  (void)unused;
  give_back_local();
}
static void make_pool_key(void) { pthread_key_create(&g_pool_key, on_thread_exit); }

static void wrapper_delete(tpu_buffer_t* buffer) {
  if (!t_pool_key_set) {
    pthread_once(&g_pool_key_once, make_pool_key);
    pthread_setspecific(g_pool_key, (void*)1); /* non-NULL: the destructor runs */
    t_pool_key_set = true;
  }
  wrapper_t* w = (wrapper_t*)buffer;
  w->next = t_pool;
  if (!t_pool) t_pool_tail = w;
  t_pool = w;
  if (++t_pool_count > LOCAL_MAX) give_back_local();
}

/* `pjrt_buffer` NULL with `pending`: a buffer a queued execution fills. */
static tpu_status_t make_buffer(tpu_client_t* client, int device_index,
                                PJRT_Buffer* pjrt_buffer, bool pending, tpu_dtype_t dtype,
                                const int64_t* dims, int rank,
                                tpu_buffer_t** out_buffer) {
  tpu_buffer_t* buffer = wrapper_new();
  if (!buffer) {
    destroy_pjrt_buffer(client->api, pjrt_buffer);
    return tpu_status_make(TPU_STATUS_RESOURCE_EXHAUSTED,
                           "out of memory allocating a buffer");
  }
  buffer->client = client;
  buffer->buffer = pjrt_buffer;
  buffer->dtype = dtype;
  buffer->rank = rank;
  if (rank) memcpy(buffer->dims, dims, (size_t)rank * sizeof(int64_t));
  buffer->device_index = device_index;
  atomic_init(&buffer->state, pending ? TPU_BUFFER_PENDING : TPU_BUFFER_READY);
  tpu_pjrt_track(TPU_PJRT_HANDLE_BUFFER, 1);
  *out_buffer = buffer;
  return NULL;
}

/* ---- buffers filled later ------------------------------------------------ */

tpu_status_t tpu_buffer_make_pending(tpu_client_t* client, int device_index,
                                     tpu_dtype_t dtype, const int64_t* dims, int rank,
                                     tpu_buffer_t** out_buffer) {
  return make_buffer(client, device_index, NULL, true, dtype, dims, rank, out_buffer);
}

static void publish(tpu_buffer_t* buffer, int state) {
  atomic_store(&buffer->state, state); /* seq_cst: pairs with the sleepers count */
  if (atomic_load(&g_fill_sleepers) > 0) {
    pthread_mutex_lock(&g_fill_lock);
    pthread_cond_broadcast(&g_fill_cond);
    pthread_mutex_unlock(&g_fill_lock);
  }
}

void tpu_buffer_fill_raw(tpu_buffer_t* buffer, PJRT_Buffer* pjrt_buffer) {
  buffer->buffer = pjrt_buffer;
  publish(buffer, TPU_BUFFER_READY);
}

void tpu_buffer_fail(tpu_buffer_t* buffer, tpu_status_t error) {
  buffer->error = error ? error : tpu_status_make(TPU_STATUS_INTERNAL, "failed without a reason");
  publish(buffer, TPU_BUFFER_FAILED);
}

int tpu_buffer_state(const tpu_buffer_t* buffer) {
  return atomic_load_explicit(&buffer->state, memory_order_acquire);
}

tpu_status_t tpu_buffer_wait_filled(tpu_buffer_t* buffer) {
  if (!buffer) return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT, "buffer is NULL");
  int state = tpu_buffer_state(buffer);
  /* The queue runs ops of a few microseconds: spin first, yielding the CPU
   * to other runnable threads (the plugin's), as waking a sleeper takes
   * tens of microseconds. */
  for (int spin = 0; state == TPU_BUFFER_PENDING && spin < 4096; spin++) {
    if (spin >= 64) sched_yield();
    state = tpu_buffer_state(buffer);
  }
  if (state == TPU_BUFFER_PENDING) {
    pthread_mutex_lock(&g_fill_lock);
    atomic_fetch_add(&g_fill_sleepers, 1);
    while ((state = atomic_load(&buffer->state)) == TPU_BUFFER_PENDING)
      pthread_cond_wait(&g_fill_cond, &g_fill_lock);
    atomic_fetch_sub(&g_fill_sleepers, 1);
    pthread_mutex_unlock(&g_fill_lock);
  }
  if (state == TPU_BUFFER_FAILED)
    return tpu_status_make(tpu_status_code(buffer->error), "%s", tpu_status_message(buffer->error));
  return NULL;
}

static _Atomic(bool (*)(tpu_buffer_t*)) g_free_hook;

void tpu_buffer_set_free_hook(bool (*hook)(tpu_buffer_t* buffer)) {
  atomic_store(&g_free_hook, hook);
}

/* ---- creation ------------------------------------------------------------------ */

tpu_status_t tpu_buffer_from_host(tpu_client_t* client, int device_index,
                                  const void* data, tpu_dtype_t dtype,
                                  const int64_t* dims, int rank,
                                  const int64_t* byte_strides,
                                  tpu_buffer_t** out_buffer) {
  if (!out_buffer || !client) {
    return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT,
                           "client and out_buffer must not be NULL");
  }
  *out_buffer = NULL;
  if (device_index < 0 || device_index >= client->device_count) {
    return tpu_status_make(TPU_STATUS_OUT_OF_RANGE,
                           "device index %d out of range: the client has %d "
                           "device(s)",
                           device_index, client->device_count);
  }
  if (!tpu_dtype_is_valid(dtype)) {
    return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT, "invalid dtype %d",
                           (int)dtype);
  }
  if (rank < 0 || rank > TPU_MAX_RANK || (rank > 0 && !dims)) {
    return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT,
                           "rank %d is not in [0, %d] or dims is NULL", rank,
                           TPU_MAX_RANK);
  }
  const size_t elem = tpu_dtype_size(dtype);
  int64_t numel = checked_numel(dims, rank);
  if (numel < 0 || (uint64_t)numel > SIZE_MAX / elem) {
    return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT,
                           "dimensions are negative or their product overflows");
  }
  if (numel > 0 && !data) {
    return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT,
                           "data is NULL for a non-empty buffer");
  }
  if (byte_strides) {
    for (int i = 0; i < rank; i++) {
      if (byte_strides[i] < 0) {
        return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT,
                               "byte_strides[%d] = %lld is negative", i,
                               (long long)byte_strides[i]);
      }
    }
    /* Dense strides and empty arrays need no layout at all. */
    if (numel == 0 || strides_are_dense(dims, rank, byte_strides, elem))
      byte_strides = NULL;
  }
  /* PJRT wants a non-NULL pointer even for zero bytes. */
  static const uint64_t kEmpty = 0;
  if (numel == 0) data = &kEmpty;

  PJRT_Device* device = client->devices[device_index].device;
  PJRT_Buffer* pjrt_buffer = NULL;
  tpu_status_t status = NULL;
  tpu_trace_span_t span;
  tpu_trace_begin_sized(&span, TPU_TRACE_TO_DEVICE, tpu_dtype_name(dtype), numel * (int64_t)elem);
  bool try_plugin_strides = byte_strides && !atomic_load(&g_force_host_pack);
  if (!byte_strides || try_plugin_strides) {
    status = upload(client, device, data, dtype, dims, rank, byte_strides,
                    &pjrt_buffer);
  }
  if (byte_strides && (status || !try_plugin_strides)) {
    /* The plugin rejected this layout (or we were told not to ask): pack
     * densely on the host and upload that. */
    tpu_status_free(status);
    void* packed = malloc((size_t)numel * elem);
    if (!packed) {
      return tpu_status_make(TPU_STATUS_RESOURCE_EXHAUSTED,
                             "out of memory packing a strided host array");
    }
    pack_strided(data, elem, dims, rank, byte_strides, packed);
    status = upload(client, device, packed, dtype, dims, rank, NULL,
                    &pjrt_buffer);
    free(packed); /* safe: upload waited for done_with_host_buffer */
  }
  tpu_trace_end(&span);
  if (status) {
    return tpu_status_annotate(status, "uploading a %s buffer: ",
                               tpu_dtype_name(dtype));
  }
  return make_buffer(client, device_index, pjrt_buffer, false, dtype, dims, rank,
                     out_buffer);
}

tpu_status_t tpu_buffer_wrap(tpu_client_t* client, int device_index,
                             PJRT_Buffer* pjrt_buffer,
                             tpu_buffer_t** out_buffer) {
  const PJRT_Api* api = client->api;
  TPU_PJRT_ARGS(PJRT_Buffer_ElementType_Args, type);
  type.buffer = pjrt_buffer;
  tpu_status_t status = TPU_PJRT_CALL(api, PJRT_Buffer_ElementType, &type);
  tpu_dtype_t dtype = TPU_DTYPE_INVALID;
  if (!status) {
    dtype = tpu_pjrt_dtype(type.type);
    if (dtype == TPU_DTYPE_INVALID) {
      status = tpu_status_make(TPU_STATUS_UNIMPLEMENTED,
                               "buffer element type %s is not supported",
                               tpu_pjrt_buffer_type_name(type.type));
    }
  }
  TPU_PJRT_ARGS(PJRT_Buffer_Dimensions_Args, dims);
  dims.buffer = pjrt_buffer;
  if (!status) status = TPU_PJRT_CALL(api, PJRT_Buffer_Dimensions, &dims);
  if (!status && (dims.num_dims > TPU_MAX_RANK || (dims.num_dims && !dims.dims))) {
    status = tpu_status_make(TPU_STATUS_UNIMPLEMENTED,
                             "buffer rank %zu exceeds the maximum %d",
                             dims.num_dims, TPU_MAX_RANK);
  }
  if (status) {
    destroy_pjrt_buffer(api, pjrt_buffer);
    return status;
  }
  return make_buffer(client, device_index, pjrt_buffer, false, dtype, dims.dims,
                     (int)dims.num_dims, out_buffer);
}

tpu_status_t tpu_buffer_wrap_typed(tpu_client_t* client, int device_index,
                                   PJRT_Buffer* pjrt_buffer, tpu_dtype_t dtype,
                                   const int64_t* dims, int rank,
                                   tpu_buffer_t** out_buffer) {
  return make_buffer(client, device_index, pjrt_buffer, false, dtype, dims, rank,
                     out_buffer);
}

/* ---- transfers back --------------------------------------------------------- */

void tpu_buffer_set_producer(tpu_buffer_t* buffer, const char* name) {
  if (buffer) buffer->producer = name;
}

const char* tpu_buffer_producer(const tpu_buffer_t* buffer) {
  return buffer ? buffer->producer : NULL;
}

static tpu_status_t start_to_host(tpu_buffer_t* buffer, void* dst,
                                  size_t dst_bytes, PJRT_Event** out_event) {
  *out_event = NULL;
  if (!buffer) {
    return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT, "buffer is NULL");
  }
  size_t nbytes = tpu_buffer_nbytes(buffer);
  if (dst_bytes != nbytes) {
    return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT,
                           "destination has %zu bytes, the buffer has %zu",
                           dst_bytes, nbytes);
  }
  TPU_RETURN_IF_ERROR(tpu_buffer_wait_filled(buffer));
  if (tpu_buffer_is_deleted(buffer)) {
    return tpu_status_make(TPU_STATUS_FAILED_PRECONDITION,
                           "buffer was deleted or donated to an execution");
  }
  if (nbytes == 0) return NULL; /* dst may be NULL, which PJRT reads as a query */
  if (!dst) {
    return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT, "dst is NULL");
  }
  TPU_PJRT_ARGS(PJRT_Buffer_ToHostBuffer_Args, args);
  args.src = buffer->buffer;
  /* No host_layout: the CPU plugin ignores it and returns the buffer's own
   * layout, which is dense row-major there. */
  args.dst = dst;
  args.dst_size = dst_bytes;
  TPU_RETURN_IF_ERROR(
      TPU_PJRT_CALL(buffer->client->api, PJRT_Buffer_ToHostBuffer, &args));
  *out_event = args.event;
  return NULL;
}

/* Whether the device image of `buffer` is its elements in row-major order
 * with no tiling, so that byte k of the raw image is byte k of the dense
 * host copy. TPUs tile even 1-D arrays (and pack bf16 pairs); the CPU and
 * GPU plugins use the default dense layout. */
static bool raw_image_is_dense(tpu_buffer_t* buffer) {
  TPU_PJRT_ARGS(PJRT_Buffer_GetMemoryLayout_Args, args);
  args.buffer = buffer->buffer;
  tpu_status_t status =
      TPU_PJRT_CALL(buffer->client->api, PJRT_Buffer_GetMemoryLayout, &args);
  if (status) {
    tpu_status_free(status);
    return false;
  }
  if (args.layout.type != PJRT_Buffer_MemoryLayout_Type_Tiled) return false;
  const PJRT_Buffer_MemoryLayout_Tiled* tiled = &args.layout.tiled;
  if (tiled->num_tiles != 0) return false;
  size_t rank = tiled->minor_to_major_size;
  for (size_t i = 0; i < rank; i++) {
    if (tiled->minor_to_major[i] != (int64_t)(rank - 1 - i)) return false;
  }
  return true;
}

/* The CPU plugin's device memory is ours, dense and row-major: a read is a
 * memcpy from the buffer's address. PJRT's copy hands it to a pool thread
 * and wakes the caller after: 50-130 us for a loss.item(), ~2 us here. */
static bool host_addressable(tpu_buffer_t* buffer) {
  const PJRT_Api* api = buffer->client->api;
  return tpu_client_is_cpu(buffer->client) && !atomic_load(&g_force_pjrt_reads) &&
         !tpu_buffer_is_deleted(buffer) && TPU_PJRT_HAS_SLOT(api, PJRT_Buffer_UnsafePointer) &&
         TPU_PJRT_HAS_SLOT(api, PJRT_Buffer_DecreaseExternalReferenceCount) &&
         raw_image_is_dense(buffer);
}

/* The external reference keeps the buffer from being donated meanwhile;
 * a failed execution's error surfaces here, not as garbage bytes. Only a
 * known-ready buffer skips the wait: a presumed one may still be computed
 * on the plugin's pool (PJRT's own copy would have waited for it). */
static tpu_status_t read_in_place(tpu_buffer_t* buffer, size_t offset, void* dst,
                                  size_t dst_bytes) {
  const PJRT_Api* api = buffer->client->api;
  if (!tpu_buffer_known_ready(buffer)) TPU_RETURN_IF_ERROR(tpu_buffer_await_ready(buffer));
  TPU_PJRT_ARGS(PJRT_Buffer_IncreaseExternalReferenceCount_Args, hold);
  hold.buffer = buffer->buffer;
  TPU_RETURN_IF_ERROR(TPU_PJRT_CALL(api, PJRT_Buffer_IncreaseExternalReferenceCount, &hold));
  TPU_PJRT_ARGS(PJRT_Buffer_UnsafePointer_Args, at);
  at.buffer = buffer->buffer;
  tpu_status_t status = TPU_PJRT_CALL(api, PJRT_Buffer_UnsafePointer, &at);
  if (!status) memcpy(dst, (const char*)at.buffer_pointer + offset, dst_bytes);
  TPU_PJRT_ARGS(PJRT_Buffer_DecreaseExternalReferenceCount_Args, drop);
  drop.buffer = buffer->buffer;
  tpu_status_t released = TPU_PJRT_CALL(api, PJRT_Buffer_DecreaseExternalReferenceCount, &drop);
  if (status) tpu_status_free(released);
  return status ? status : released;
}

tpu_status_t tpu_buffer_to_host(tpu_buffer_t* buffer, void* dst,
                                size_t dst_bytes) {
  /* The span covers the copy, not the wait for a queued execution to
   * fill the buffer (that wait shows as the execution itself). */
  if (buffer) TPU_RETURN_IF_ERROR(tpu_buffer_wait_filled(buffer));
  tpu_trace_span_t span;
  tpu_trace_begin_sized(&span, TPU_TRACE_TO_HOST, buffer ? tpu_dtype_name(buffer->dtype) : "",
                        (int64_t)dst_bytes);
  tpu_status_t status;
  if (buffer && dst && dst_bytes && dst_bytes == tpu_buffer_nbytes(buffer) &&
      host_addressable(buffer)) {
    status = read_in_place(buffer, 0, dst, dst_bytes);
  } else {
    PJRT_Event* event;
    status = start_to_host(buffer, dst, dst_bytes, &event);
    if (!status)
      status = tpu_pjrt_event_await_destroy(buffer->client->api, event, "device-to-host transfer");
  }
  tpu_trace_end(&span);
  TPU_RETURN_IF_ERROR(status);
  tpu_buffer_set_known_ready(buffer); /* the copy read computed contents */
  return NULL;
}

tpu_status_t tpu_buffer_to_host_async(tpu_buffer_t* buffer, void* dst,
                                      size_t dst_bytes,
                                      tpu_event_t** out_event) {
  if (!out_event) {
    return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT, "out_event is NULL");
  }
  *out_event = NULL;
  PJRT_Event* event;
  TPU_RETURN_IF_ERROR(start_to_host(buffer, dst, dst_bytes, &event));
  return tpu_event_wrap(buffer->client->api, event, out_event);
}

tpu_status_t tpu_buffer_copy_to_device(tpu_buffer_t* buffer, int device_index,
                                       tpu_buffer_t** out_buffer) {
  if (!buffer || !out_buffer)
    return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT, "buffer or out_buffer is NULL");
  *out_buffer = NULL;
  tpu_client_t* client = buffer->client;
  if (device_index < 0 || device_index >= client->device_count)
    return tpu_status_make(TPU_STATUS_OUT_OF_RANGE,
                           "device index %d out of range: the client has %d device(s)",
                           device_index, client->device_count);
  if (device_index == buffer->device_index)
    return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT,
                           "the buffer is already on device %d", device_index);
  TPU_RETURN_IF_ERROR(tpu_buffer_wait_filled(buffer));
  if (tpu_buffer_is_deleted(buffer))
    return tpu_status_make(TPU_STATUS_FAILED_PRECONDITION,
                           "buffer was deleted or donated to an execution");
  TPU_PJRT_ARGS(PJRT_Buffer_CopyToDevice_Args, args);
  args.buffer = buffer->buffer;
  args.dst_device = client->devices[device_index].device;
  tpu_trace_span_t span;
  tpu_trace_begin_sized(&span, TPU_TRACE_TO_DEVICE, tpu_dtype_name(buffer->dtype),
                        (int64_t)tpu_buffer_nbytes(buffer));
  tpu_status_t status = TPU_PJRT_CALL(client->api, PJRT_Buffer_CopyToDevice, &args);
  tpu_trace_end(&span);
  if (status)
    return tpu_status_annotate(status, "copying a buffer from device %d to device %d: ",
                               buffer->device_index, device_index);
  return make_buffer(client, device_index, args.dst_buffer, false, buffer->dtype, buffer->dims,
                     buffer->rank, out_buffer);
}

/* PJRT's raw copy of bytes [offset, offset + size). It does not wait for
 * the contents to be computed: a failed execution's error must surface
 * here, not as garbage bytes. */
static tpu_status_t read_raw(tpu_buffer_t* buffer, size_t offset, void* dst, size_t size) {
  TPU_RETURN_IF_ERROR(tpu_buffer_await_ready(buffer));
  TPU_PJRT_ARGS(PJRT_Buffer_CopyRawToHost_Args, args);
  args.buffer = buffer->buffer;
  args.dst = dst;
  args.offset = (int64_t)offset;
  args.transfer_size = (int64_t)size;
  TPU_RETURN_IF_ERROR(TPU_PJRT_CALL(buffer->client->api, PJRT_Buffer_CopyRawToHost, &args));
  return tpu_pjrt_event_await_destroy(buffer->client->api, args.event, "device-to-host transfer");
}

tpu_status_t tpu_buffer_to_host_range(tpu_buffer_t* buffer, size_t offset,
                                      void* dst, size_t size) {
  if (!buffer || (!dst && size)) {
    return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT, "buffer or dst is NULL");
  }
  size_t nbytes = tpu_buffer_nbytes(buffer);
  if (offset > nbytes || size > nbytes - offset) {
    return tpu_status_make(TPU_STATUS_OUT_OF_RANGE,
                           "bytes [%zu, %zu) are outside a %zu-byte buffer",
                           offset, offset + size, nbytes);
  }
  TPU_RETURN_IF_ERROR(tpu_buffer_wait_filled(buffer));
  if (tpu_buffer_is_deleted(buffer)) {
    return tpu_status_make(TPU_STATUS_FAILED_PRECONDITION,
                           "buffer was deleted or donated to an execution");
  }
  if (size == 0) return NULL;
  bool in_place = host_addressable(buffer); /* x[5].item(): a memcpy, as whole reads */
  if (!in_place && (!TPU_PJRT_HAS_SLOT(buffer->client->api, PJRT_Buffer_CopyRawToHost) ||
                    !raw_image_is_dense(buffer))) {
    return tpu_status_make(TPU_STATUS_UNIMPLEMENTED,
                           "the plugin cannot read a byte range of this buffer");
  }
  tpu_trace_span_t span;
  tpu_trace_begin_sized(&span, TPU_TRACE_TO_HOST, tpu_dtype_name(buffer->dtype), (int64_t)size);
  tpu_status_t status = in_place ? read_in_place(buffer, offset, dst, size)
                                 : read_raw(buffer, offset, dst, size);
  tpu_trace_end(&span);
  return status;
}

/* The event that fires once the buffer's contents are computed. */
static tpu_status_t ready_event(tpu_buffer_t* buffer, PJRT_Event** out_event) {
  TPU_RETURN_IF_ERROR(tpu_buffer_wait_filled(buffer));
  TPU_PJRT_ARGS(PJRT_Buffer_ReadyEvent_Args, args);
  args.buffer = buffer->buffer;
  TPU_RETURN_IF_ERROR(TPU_PJRT_CALL(buffer->client->api, PJRT_Buffer_ReadyEvent, &args));
  *out_event = args.event;
  return NULL;
}

tpu_status_t tpu_buffer_await_ready(tpu_buffer_t* buffer) {
  if (!buffer) {
    return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT, "buffer is NULL");
  }
  PJRT_Event* event = NULL;
  TPU_RETURN_IF_ERROR(ready_event(buffer, &event));
  TPU_RETURN_IF_ERROR(tpu_pjrt_event_await_destroy(buffer->client->api, event, "buffer"));
  tpu_buffer_set_known_ready(buffer);
  return NULL;
}

enum { TPU_READY_UNKNOWN, TPU_READY_PRESUMED, TPU_READY_KNOWN };

bool tpu_buffer_known_ready(const tpu_buffer_t* buffer) {
  return atomic_load_explicit(&buffer->readiness, memory_order_relaxed) == TPU_READY_KNOWN;
}

void tpu_buffer_set_known_ready(tpu_buffer_t* buffer) {
  atomic_store_explicit(&buffer->readiness, TPU_READY_KNOWN, memory_order_relaxed);
}

bool tpu_buffer_presumed_ready(const tpu_buffer_t* buffer) {
  return atomic_load_explicit(&buffer->readiness, memory_order_relaxed) != TPU_READY_UNKNOWN;
}

void tpu_buffer_set_presumed_ready(tpu_buffer_t* buffer) {
  int unknown = TPU_READY_UNKNOWN;
  atomic_compare_exchange_strong_explicit(&buffer->readiness, &unknown, TPU_READY_PRESUMED,
                                          memory_order_relaxed, memory_order_relaxed);
}

bool tpu_buffer_poll_ready(tpu_buffer_t* buffer) {
  if (tpu_buffer_known_ready(buffer)) return true;
  if (tpu_buffer_state(buffer) != TPU_BUFFER_READY) return false; /* polls never wait */
  PJRT_Event* raw = NULL;
  tpu_event_t* event = NULL;
  tpu_status_t status = ready_event(buffer, &raw);
  if (!status) status = tpu_event_wrap(buffer->client->api, raw, &event);
  bool known = !status && tpu_event_is_ready(event);
  tpu_status_free(status);
  /* Ready: awaiting returns at once, with the error a failed producer left
   * (such contents are not "known ready": readers keep their events so the
   * error reaches synchronize). Not ready: just drop the event. */
  if (known) {
    status = tpu_event_await(event);
    known = status == NULL;
    tpu_status_free(status);
  }
  tpu_event_destroy(event);
  if (known) tpu_buffer_set_known_ready(buffer);
  return known;
}

bool tpu_buffer_poll_failed(tpu_buffer_t* buffer) {
  if (tpu_buffer_known_ready(buffer)) return false;
  int state = tpu_buffer_state(buffer);
  if (state == TPU_BUFFER_FAILED) return true;
  if (state != TPU_BUFFER_READY) return false; /* polls never wait */
  PJRT_Event* raw = NULL;
  tpu_event_t* event = NULL;
  tpu_status_t status = ready_event(buffer, &raw);
  if (!status) status = tpu_event_wrap(buffer->client->api, raw, &event);
  bool failed = false;
  if (!status && tpu_event_is_ready(event)) {
    tpu_status_t error = tpu_event_await(event);
    failed = error != NULL;
    if (!failed) tpu_buffer_set_known_ready(buffer);
    tpu_status_free(error);
  }
  tpu_status_free(status);
  tpu_event_destroy(event);
  return failed;
}

/* ---- accessors ------------------------------------------------------------- */

tpu_dtype_t tpu_buffer_dtype(const tpu_buffer_t* buffer) { return buffer->dtype; }
int tpu_buffer_rank(const tpu_buffer_t* buffer) { return buffer->rank; }
const int64_t* tpu_buffer_dims(const tpu_buffer_t* buffer) { return buffer->dims; }

int64_t tpu_buffer_numel(const tpu_buffer_t* buffer) {
  return checked_numel(buffer->dims, buffer->rank);
}

size_t tpu_buffer_nbytes(const tpu_buffer_t* buffer) {
  return (size_t)tpu_buffer_numel(buffer) * tpu_dtype_size(buffer->dtype);
}

int tpu_buffer_device_index(const tpu_buffer_t* buffer) {
  return buffer->device_index;
}

bool tpu_buffer_is_deleted(const tpu_buffer_t* buffer) {
  /* Every execution checks its arguments: skip the plugin call for
   * buffers never offered for donation (we never delete otherwise). */
  if (!atomic_load_explicit(&buffer->offered, memory_order_relaxed)) return false;
  const PJRT_Api* api = buffer->client->api;
  TPU_PJRT_ARGS(PJRT_Buffer_IsDeleted_Args, args);
  args.buffer = buffer->buffer;
  tpu_status_t status = TPU_PJRT_CALL(api, PJRT_Buffer_IsDeleted, &args);
  if (status) {
    tpu_status_free(status);
    return false;
  }
  return args.is_deleted;
}

void tpu_buffer_destroy(tpu_buffer_t* buffer) {
  if (!buffer) return;
  bool (*hook)(tpu_buffer_t*) = atomic_load_explicit(&g_free_hook, memory_order_relaxed);
  if (hook && hook(buffer)) return;
  tpu_buffer_free(buffer);
}

void tpu_buffer_free(tpu_buffer_t* buffer) {
  destroy_pjrt_buffer(buffer->client->api, buffer->buffer);
  tpu_status_free(buffer->error);
  tpu_pjrt_track(TPU_PJRT_HANDLE_BUFFER, -1);
  wrapper_delete(buffer);
}
