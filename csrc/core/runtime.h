/* The process-wide runtime: one plugin, one client, its devices. Created on
 * first use (tpu_runtime_init) and kept for the life of the process: PyTorch
 * may free tensors during interpreter shutdown, after any atexit hook, so
 * the client is never torn down implicitly. */
#ifndef TORCHTPU_CORE_RUNTIME_H_
#define TORCHTPU_CORE_RUNTIME_H_

#include <stdbool.h>

#include "dtype.h"
#include "pjrt/pjrt.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Loads the plugin (tpu_plugin_resolve_path(fallback_plugin_path)) and
 * creates the client with TORCHTPU_NUM_DEVICES CPU devices, exposing those
 * TORCHTPU_VISIBLE_DEVICES lists (a bad list is INVALID_ARGUMENT naming the
 * variable and its value). Idempotent and
 * thread-safe. On failure nothing is kept, so a later call may retry (e.g.
 * after fixing TORCHTPU_PJRT_PLUGIN). */
tpu_status_t tpu_runtime_init(const char* fallback_plugin_path);
/* Before loading libtpu off Google Cloud (dmi_product lacks "Google"):
 * sets TPU_SKIP_MDS_QUERY=1 unless the user set it, so libtpu does not
 * spend minutes asking a metadata server that is not there whether this is
 * a TPU VM (it then fails in seconds, naming the missing device). True
 * when it set it. Called by init; other plugins are left alone. */
bool tpu_runtime_prepare_plugin_env(const char* plugin_path, const char* dmi_product);
bool tpu_runtime_is_initialized(void);

/* Borrowed; NULL before a successful init. */
tpu_client_t* tpu_runtime_client(void);

/* Whether this process is a child forked after the runtime started in its
 * parent: the inherited client cannot be used (runtime.c). */
bool tpu_runtime_in_bad_fork(void);
tpu_plugin_t* tpu_runtime_plugin(void);
int tpu_runtime_device_count(void); /* 0 before init */
/* The device a thread starts on: LOCAL_RANK % device count when LOCAL_RANK
 * (torchrun) is set and TORCHTPU_VISIBLE_DEVICES is not, else 0. 0 before
 * init. */
int tpu_runtime_default_device(void);

/* The platform whose dtype support applies (tpu_dtype_supported_on):
 * TORCHTPU_DTYPE_PLATFORM when set, else the client's platform name; ""
 * before init. Borrowed, valid for the process. */
const char* tpu_runtime_dtype_platform(void);
/* Whether tensors of `dtype` can live on the device (before init: true, the
 * question is asked again at creation). */
bool tpu_runtime_supports_dtype(tpu_dtype_t dtype);

/* Device memory: `total` is the most the device may hold (the plugin's
 * limit, else the host's memory for plugins whose memory is the host's,
 * lowered to TORCHTPU_MEMORY_LIMIT when set); `free` what is left of it:
 * the plugin's own figure where it has one, else total minus the bytes of
 * live tensors, and never more than the host has available. */
tpu_status_t tpu_runtime_memory_info(int device_index, int64_t* out_free,
                                     int64_t* out_total);
/* Checks device_index against the device count (OUT_OF_RANGE naming both). */
tpu_status_t tpu_runtime_check_device(int device_index);

/* Takes ownership of `event` (the completion of work enqueued on
 * device_index) so tpu_runtime_synchronize can wait for it. Events already
 * fired are dropped as new ones arrive. */
void tpu_runtime_track(int device_index, tpu_event_t* event);
/* Keeps the error of an execution that failed asynchronously for the
 * device's next synchronize (takes ownership; NULL is fine). */
void tpu_runtime_record_error(int device_index, tpu_status_t status);
/* Names the op whose execution the calling thread runs next (static
 * string; NULL: none): tracked events and recorded errors keep it, so a
 * failure that surfaces later says which op failed. */
void tpu_runtime_set_op_label(const char* label);
/* The label set on this thread (NULL when none). */
const char* tpu_runtime_op_label(void);
/* `status`, a read's or wait's error on device_index, prefixed with
 * "<op> failed on the device: " naming the earliest tracked execution
 * that failed with the same error (the cause; later ones read its
 * poisoned results), else `producer` (the read buffer's op) when not
 * NULL. Takes ownership. */
tpu_status_t tpu_runtime_name_failure(int device_index, tpu_status_t status,
                                      const char* producer);
/* Waits for every tracked event of the device (after draining the launch
 * queue, tpu_runtime_drain_queue); returns the first error any of them
 * carried or that was recorded (the rest are still waited for). The
 * entry point for "synchronize" is tpu_device_synchronize (device.h),
 * which flushes a deferred run first. */
tpu_status_t tpu_runtime_synchronize(int device_index);

/* The launch queue sits above this layer (launcher.h): it registers how to
 * wait for its items and how to stop its thread, and this layer and the
 * program cache call those before waiting for events, destroying programs
 * (queued items hold them) or the client (its thread calls into it), with
 * no call up into the launcher. Both may be NULL (no queue). Registered
 * before the queue's first item. */
typedef struct tpu_runtime_queue_hooks_s {
  void (*drain)(void); /* returns once every item queued so far has run */
  void (*stop)(void);  /* drains, then stops the queue's thread */
} tpu_runtime_queue_hooks_t;
void tpu_runtime_set_queue_hooks(tpu_runtime_queue_hooks_t hooks);
/* Runs the registered drain (nothing when none). */
void tpu_runtime_drain_queue(void);

/* Destroys the client (stopping the launch queue first). Only for programs
 * that know every buffer is gone (the C tests); the plugin stays loaded. */
void tpu_runtime_shutdown(void);

#ifdef __cplusplus
}
#endif
#endif
