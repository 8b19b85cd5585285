/* A device of a client (borrowed from it) and the attributes PJRT reports. */
#ifndef TORCHTPU_CORE_PJRT_DEVICE_H_
#define TORCHTPU_CORE_PJRT_DEVICE_H_

#include <stddef.h>
#include <stdint.h>

#include "../status.h"
#include "client.h"

#ifdef __cplusplus
extern "C" {
#endif

int tpu_device_index(const tpu_device_t* device); /* position in the client */
int tpu_device_id(const tpu_device_t* device);    /* PJRT global id */
int tpu_device_process_index(const tpu_device_t* device);
const char* tpu_device_kind(const tpu_device_t* device);         /* "cpu" */
const char* tpu_device_debug_string(const tpu_device_t* device);
const char* tpu_device_to_string(const tpu_device_t* device);
/* The plugin's memory figures for the device (PJRT_Device_MemoryStats):
 * bytes in use and the limit of what can be allocated. UNIMPLEMENTED when
 * the plugin reports no limit (the CPU plugin: its memory is the host's). */
tpu_status_t tpu_device_memory_stats(const tpu_device_t* device,
                                     int64_t* out_in_use, int64_t* out_limit);

typedef enum tpu_device_attribute_kind_e {
  TPU_DEVICE_ATTRIBUTE_STRING,
  TPU_DEVICE_ATTRIBUTE_INT64,
  TPU_DEVICE_ATTRIBUTE_INT64_LIST,
  TPU_DEVICE_ATTRIBUTE_BOOL,
  TPU_DEVICE_ATTRIBUTE_FLOAT,
} tpu_device_attribute_kind_t;

typedef struct tpu_device_attribute_s {
  const char* name;
  tpu_device_attribute_kind_t kind;
  const char* string_value;       /* STRING */
  int64_t int64_value;            /* INT64, BOOL (0/1) */
  const int64_t* int64_list;      /* INT64_LIST, e.g. "coords" */
  size_t int64_list_size;
  float float_value;              /* FLOAT */
} tpu_device_attribute_t;

/* Attributes (e.g. "coords", "core_on_chip" on TPU); borrowed, valid while
 * the client lives. */
size_t tpu_device_attribute_count(const tpu_device_t* device);
const tpu_device_attribute_t* tpu_device_attribute_at(
    const tpu_device_t* device, size_t i);
/* NULL when the device has no attribute of that name. */
const tpu_device_attribute_t* tpu_device_attribute_find(
    const tpu_device_t* device, const char* name);

#ifdef __cplusplus
}
#endif
#endif
