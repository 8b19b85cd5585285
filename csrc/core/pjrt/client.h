/* A PJRT client on one plugin, with its addressable devices. */
#ifndef TORCHTPU_CORE_PJRT_CLIENT_H_
#define TORCHTPU_CORE_PJRT_CLIENT_H_

#include <stdbool.h>
#include <stdint.h>

#include "../status.h"
#include "plugin.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tpu_client_s tpu_client_t;
typedef struct tpu_device_s tpu_device_t;

typedef struct tpu_client_options_s {
  /* Devices the CPU plugin creates ("cpu_device_count"); <= 0 means 1.
   * Passed only to the CPU plugin: other plugins reject unknown options. */
  int64_t cpu_device_count;
  /* The plugin's addressable devices the client exposes, by position in the
   * plugin's list and in this order: client device i is plugin device
   * visible_devices[i]. Distinct and in range, else INVALID_ARGUMENT. NULL
   * or 0: all of them. With the CPU plugin, cpu_device_count is raised to
   * the largest index + 1. Borrowed for the call. */
  const int* visible_devices;
  int visible_device_count;
} tpu_client_options_t;

/* Creates a client. The plugin is borrowed and must outlive the client. */
tpu_status_t tpu_client_create(tpu_plugin_t* plugin,
                               const tpu_client_options_t* options,
                               tpu_client_t** out_client);
/* Destroys the client; all buffers/executables made from it must be gone. */
void tpu_client_destroy(tpu_client_t* client);

tpu_plugin_t* tpu_client_plugin(const tpu_client_t* client);
const char* tpu_client_platform_name(const tpu_client_t* client); /* "cpu" */
/* Whether the devices are this host's CPU (XLA:CPU): device memory is this
 * process's memory, dense and row-major, and its executions check
 * arguments by byte size. */
bool tpu_client_is_cpu(const tpu_client_t* client);
const char* tpu_client_platform_version(const tpu_client_t* client);
int tpu_client_process_index(const tpu_client_t* client);

/* The visible addressable devices (see tpu_client_options_t), in the
 * plugin's order unless a visible list reorders them. Devices are owned by
 * the client and valid until it is destroyed. */
int tpu_client_device_count(const tpu_client_t* client);
/* True when the plugin has one addressable device, this client shows it,
 * and this is process 0: a program compiled for the default device
 * assignment (not portable) runs there, through the plugin's cheaper
 * execute path. */
bool tpu_client_is_single_device(const tpu_client_t* client);
tpu_status_t tpu_client_device(const tpu_client_t* client, int index,
                               tpu_device_t** out_device);

#ifdef __cplusplus
}
#endif
#endif
