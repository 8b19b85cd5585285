/* Private to the PJRT layer (its .c files and tests): the object
 * layouts, PJRT_Error -> tpu_status_t conversion and the function-slot
 * check (dtype mapping: buffer_type.h). Nothing outside csrc/core/pjrt/ may include this,
 * because it includes pjrt_c_api.h. */
#ifndef TORCHTPU_CORE_PJRT_INTERNAL_H_
#define TORCHTPU_CORE_PJRT_INTERNAL_H_

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../dtype.h"
#include "../status.h"
#include "buffer.h"
#include "buffer_type.h"
#include "client.h"
#include "device.h"
#include "event.h"
#include "executable.h"
#include "pjrt_c_api.h"
#include "plugin.h"

/* ---- objects ------------------------------------------------------------ */

struct tpu_plugin_s {
  char* path;
  void* handle;        /* dlopen handle, never closed */
  const PJRT_Api* api; /* owned by the plugin, lives for the process */
  int api_major;
  int api_minor;
  size_t attribute_count;
  char** attribute_names;  /* owned copies */
  char** attribute_values; /* owned copies, rendered as text */
};

struct tpu_device_s {
  tpu_client_t* client;
  PJRT_Device* device; /* owned by the PJRT client */
  int index;
  int id;
  int process_index;
  char* kind;
  char* debug_string;
  char* to_string;
  size_t attribute_count;
  tpu_device_attribute_t* attributes; /* names/strings/lists owned */
};

struct tpu_client_s {
  tpu_plugin_t* plugin; /* borrowed */
  const PJRT_Api* api;
  PJRT_Client* client;
  char* platform_name;
  char* platform_version;
  int process_index;
  int device_count;
  int plugin_device_count; /* the plugin's addressable devices, visible or not */
  struct tpu_device_s* devices;
};

/* event == NULL means "already complete, no error" (e.g. a zero-byte copy). */
struct tpu_event_s {
  const PJRT_Api* api;
  PJRT_Event* event;
};

struct tpu_buffer_s {
  /* What a queued launch writes when it runs (launcher.c) comes first, in
   * one cache line with the handle every execution reads. */
  PJRT_Buffer* buffer;
  /* TPU_BUFFER_READY, or PENDING until a queued launch fills `buffer`, or
   * FAILED with `error` (set before the state is published). */
  _Atomic int state;
  /* TPU_READY_KNOWN: its contents are computed (an await, a poll, a read,
   * an execution seen finished). TPU_READY_PRESUMED: an execution that
   * usually runs inside Execute computes it (program.c skips asking);
   * enough to skip completion events, never enough to read its memory.
   * Only ever raised. */
  _Atomic int readiness;
  /* It was passed to an execution as donatable: only then can PJRT have
   * deleted it, so only then is asking worth a call (see is_deleted). */
  _Atomic bool offered;
  tpu_status_t error;
  /* The op whose execution computes it (static; NULL: uploaded), named
   * in the errors of reads that surface that execution's failure. */
  const char* producer;
  tpu_client_t* client; /* borrowed */
  tpu_dtype_t dtype;
  int rank;
  int device_index;
  int64_t dims[TPU_MAX_RANK];
};

/* ---- function slots ------------------------------------------------------ */

/* True when the plugin's PJRT_Api table is long enough to contain `slot`
 * and the plugin filled it in. Older plugins have shorter tables. */
#define TPU_PJRT_HAS_SLOT(api, slot)                                    \
  ((api)->struct_size >= offsetof(PJRT_Api, slot) + sizeof((api)->slot) && \
   (api)->slot != NULL)

tpu_status_t tpu_pjrt_unimplemented(const char* slot);

#define TPU_PJRT_REQUIRE_SLOT(api, slot)                             \
  do {                                                               \
    if (!TPU_PJRT_HAS_SLOT(api, slot)) return tpu_pjrt_unimplemented(#slot); \
  } while (0)

/* Calls api->fn(args) after the slot check and converts the result. The
 * status message starts with the function name. */
#define TPU_PJRT_CALL(api, fn, args)                                \
  (TPU_PJRT_HAS_SLOT(api, fn) ? tpu_pjrt_status((api), (api)->fn(args), #fn) \
                              : tpu_pjrt_unimplemented(#fn))

/* Declares a zeroed PJRT args struct with struct_size set. */
#define TPU_PJRT_ARGS(type, name) type name = {.struct_size = type##_STRUCT_SIZE}

/* ---- errors --------------------------------------------------------------- */

tpu_status_code_t tpu_pjrt_code_to_status_code(PJRT_Error_Code code);
/* Converts and destroys `error` (NULL -> NULL). The message is
 * "<context>: <plugin message>". */
tpu_status_t tpu_pjrt_status(const PJRT_Api* api, PJRT_Error* error,
                             const char* context);
/* Destroys an error we cannot report (cleanup paths). */
void tpu_pjrt_error_ignore(const PJRT_Api* api, PJRT_Error* error);

/* ---- events --------------------------------------------------------------- */

/* Awaits `event` and destroys it (even on error). NULL event is OK. */
tpu_status_t tpu_pjrt_event_await_destroy(const PJRT_Api* api,
                                          PJRT_Event* event,
                                          const char* context);
void tpu_pjrt_event_destroy(const PJRT_Api* api, PJRT_Event* event);
/* Takes ownership of `event` (may be NULL = complete). On failure the event
 * is destroyed. */
tpu_status_t tpu_event_wrap(const PJRT_Api* api, PJRT_Event* event,
                            tpu_event_t** out_event);

/* ---- devices -------------------------------------------------------------- */

/* Fills `device` (zeroed by the caller) from PJRT; tpu_device_fini frees
 * what it copied, also after a partial init. */
tpu_status_t tpu_device_init(tpu_client_t* client, int index,
                             PJRT_Device* pjrt_device,
                             struct tpu_device_s* device);
void tpu_device_fini(struct tpu_device_s* device);

/* ---- buffers ------------------------------------------------------------- */

/* Gives pending `buffer` its device buffer (taken) and wakes its waiters. */
void tpu_buffer_fill_raw(tpu_buffer_t* buffer, PJRT_Buffer* pjrt_buffer);

/* Takes ownership of `pjrt_buffer` (destroyed on failure), reading its
 * element type and dimensions from PJRT. */
tpu_status_t tpu_buffer_wrap(tpu_client_t* client, int device_index,
                             PJRT_Buffer* pjrt_buffer,
                             tpu_buffer_t** out_buffer);
/* Same, when the caller knows the buffer's type (an executable's declared
 * output): skips two PJRT queries per result on the execute path. */
tpu_status_t tpu_buffer_wrap_typed(tpu_client_t* client, int device_index,
                                   PJRT_Buffer* pjrt_buffer, tpu_dtype_t dtype,
                                   const int64_t* dims, int rank,
                                   tpu_buffer_t** out_buffer);

/* Testing hook: when true, tpu_buffer_from_host never passes byte strides to
 * the plugin and packs non-dense host layouts itself. */
void tpu_buffer_set_force_host_pack(bool force);
/* Testing hook: when true, host reads on the CPU plugin go through PJRT's
 * copies (ToHostBuffer, CopyRawToHost) as on other plugins, not memcpy
 * from the buffer's memory, so local tests cover those paths too. */
void tpu_buffer_set_force_pjrt_reads(bool force);

/* ---- bookkeeping ------------------------------------------------------------
 * Live PJRT handles we own (clients, buffers, loaded executables, events).
 * LeakSanitizer cannot tell a PJRT object we forgot to destroy from the
 * plugin's own allocations (both are allocated inside the plugin and
 * suppressed), so the tests check these counts instead. */
typedef enum tpu_pjrt_handle_kind_e {
  TPU_PJRT_HANDLE_CLIENT = 0,
  TPU_PJRT_HANDLE_BUFFER,
  TPU_PJRT_HANDLE_EXECUTABLE,
  TPU_PJRT_HANDLE_EVENT,
  TPU_PJRT_HANDLE_KIND_COUNT,
} tpu_pjrt_handle_kind_t;

extern atomic_long tpu_pjrt_live_handles_[TPU_PJRT_HANDLE_KIND_COUNT];

static inline void tpu_pjrt_track(tpu_pjrt_handle_kind_t kind, long delta) {
  atomic_fetch_add_explicit(&tpu_pjrt_live_handles_[kind], delta,
                            memory_order_relaxed);
}
static inline long tpu_pjrt_live(tpu_pjrt_handle_kind_t kind) {
  return atomic_load_explicit(&tpu_pjrt_live_handles_[kind],
                              memory_order_relaxed);
}

/* ---- small helpers --------------------------------------------------------- */

/* malloc'd NUL-terminated copy of (data, size); NULL data gives "". Returns
 * NULL only when out of memory. */
char* tpu_pjrt_strndup(const char* data, size_t size);

#endif /* TORCHTPU_CORE_PJRT_INTERNAL_H_ */
