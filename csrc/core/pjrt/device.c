#include "device.h"

#include <stdlib.h>
#include <string.h>

#include "internal.h"

static tpu_status_t oom(const char* what) {
  return tpu_status_make(TPU_STATUS_RESOURCE_EXHAUSTED,
                         "out of memory copying device %s", what);
}

static tpu_status_t copy_attribute(const PJRT_NamedValue* v,
                                   tpu_device_attribute_t* out) {
  out->name = tpu_pjrt_strndup(v->name, v->name ? v->name_size : 0);
  if (!out->name) return oom("attribute name");
  switch (v->type) {
    case PJRT_NamedValue_kString:
      out->kind = TPU_DEVICE_ATTRIBUTE_STRING;
      out->string_value =
          tpu_pjrt_strndup(v->string_value, v->string_value ? v->value_size : 0);
      if (!out->string_value) return oom("attribute value");
      break;
    case PJRT_NamedValue_kInt64:
      out->kind = TPU_DEVICE_ATTRIBUTE_INT64;
      out->int64_value = v->int64_value;
      break;
    case PJRT_NamedValue_kInt64List: {
      out->kind = TPU_DEVICE_ATTRIBUTE_INT64_LIST;
      size_t n = v->int64_array_value ? v->value_size : 0;
      int64_t* list = malloc((n ? n : 1) * sizeof(int64_t));
      if (!list) return oom("attribute list");
      if (n) memcpy(list, v->int64_array_value, n * sizeof(int64_t));
      out->int64_list = list;
      out->int64_list_size = n;
      break;
    }
    case PJRT_NamedValue_kBool:
      out->kind = TPU_DEVICE_ATTRIBUTE_BOOL;
      out->int64_value = v->bool_value ? 1 : 0;
      break;
    case PJRT_NamedValue_kFloat:
      out->kind = TPU_DEVICE_ATTRIBUTE_FLOAT;
      out->float_value = v->float_value;
      break;
    default:
      /* A value type newer than our header: keep the name, no value. */
      out->kind = TPU_DEVICE_ATTRIBUTE_STRING;
      out->string_value = tpu_pjrt_strndup("", 0);
      if (!out->string_value) return oom("attribute value");
      break;
  }
  return NULL;
}

/* Copies a string out-parameter of a description call. */
#define COPY_DESCRIPTION_STRING(api, fn, desc, field, dst)                 \
  do {                                                                     \
    if (TPU_PJRT_HAS_SLOT(api, fn)) {                                      \
      TPU_PJRT_ARGS(fn##_Args, a_);                                        \
      a_.device_description = (desc);                                      \
      TPU_RETURN_IF_ERROR(TPU_PJRT_CALL(api, fn, &a_));                    \
      (dst) = tpu_pjrt_strndup(a_.field, a_.field ? a_.field##_size : 0);  \
    } else {                                                               \
      (dst) = tpu_pjrt_strndup("", 0);                                     \
    }                                                                      \
    if (!(dst)) return oom(#field);                                        \
  } while (0)

tpu_status_t tpu_device_init(tpu_client_t* client, int index,
                             PJRT_Device* pjrt_device,
                             struct tpu_device_s* device) {
  const PJRT_Api* api = client->api;
  device->client = client;
  device->device = pjrt_device;
  device->index = index;

  TPU_PJRT_ARGS(PJRT_Device_GetDescription_Args, get);
  get.device = pjrt_device;
  TPU_RETURN_IF_ERROR(TPU_PJRT_CALL(api, PJRT_Device_GetDescription, &get));
  PJRT_DeviceDescription* desc = get.device_description;

  TPU_PJRT_ARGS(PJRT_DeviceDescription_Id_Args, id);
  id.device_description = desc;
  TPU_RETURN_IF_ERROR(TPU_PJRT_CALL(api, PJRT_DeviceDescription_Id, &id));
  device->id = id.id;

  device->process_index = 0;
  if (TPU_PJRT_HAS_SLOT(api, PJRT_DeviceDescription_ProcessIndex)) {
    TPU_PJRT_ARGS(PJRT_DeviceDescription_ProcessIndex_Args, pi);
    pi.device_description = desc;
    TPU_RETURN_IF_ERROR(
        TPU_PJRT_CALL(api, PJRT_DeviceDescription_ProcessIndex, &pi));
    device->process_index = pi.process_index;
  }

  COPY_DESCRIPTION_STRING(api, PJRT_DeviceDescription_Kind, desc, device_kind,
                          device->kind);
  COPY_DESCRIPTION_STRING(api, PJRT_DeviceDescription_DebugString, desc,
                          debug_string, device->debug_string);
  COPY_DESCRIPTION_STRING(api, PJRT_DeviceDescription_ToString, desc,
                          to_string, device->to_string);

  if (TPU_PJRT_HAS_SLOT(api, PJRT_DeviceDescription_Attributes)) {
    TPU_PJRT_ARGS(PJRT_DeviceDescription_Attributes_Args, attrs);
    attrs.device_description = desc;
    TPU_RETURN_IF_ERROR(
        TPU_PJRT_CALL(api, PJRT_DeviceDescription_Attributes, &attrs));
    size_t n = attrs.attributes ? attrs.num_attributes : 0;
    if (n) {
      device->attributes = calloc(n, sizeof *device->attributes);
      if (!device->attributes) return oom("attributes");
      for (size_t i = 0; i < n; i++) {
        device->attribute_count = i + 1; /* so fini frees a partial copy */
        TPU_RETURN_IF_ERROR(
            copy_attribute(&attrs.attributes[i], &device->attributes[i]));
      }
    }
  }
  return NULL;
}

void tpu_device_fini(struct tpu_device_s* device) {
  if (!device) return;
  free(device->kind);
  free(device->debug_string);
  free(device->to_string);
  for (size_t i = 0; i < device->attribute_count; i++) {
    tpu_device_attribute_t* a = &device->attributes[i];
    free((char*)a->name);
    free((char*)a->string_value);
    free((int64_t*)a->int64_list);
  }
  free(device->attributes);
  memset(device, 0, sizeof *device);
}

int tpu_device_index(const tpu_device_t* device) { return device->index; }
int tpu_device_id(const tpu_device_t* device) { return device->id; }
int tpu_device_process_index(const tpu_device_t* device) {
  return device->process_index;
}
const char* tpu_device_kind(const tpu_device_t* device) { return device->kind; }
const char* tpu_device_debug_string(const tpu_device_t* device) {
  return device->debug_string;
}
const char* tpu_device_to_string(const tpu_device_t* device) {
  return device->to_string;
}

size_t tpu_device_attribute_count(const tpu_device_t* device) {
  return device->attribute_count;
}

const tpu_device_attribute_t* tpu_device_attribute_at(
    const tpu_device_t* device, size_t i) {
  return i < device->attribute_count ? &device->attributes[i] : NULL;
}

const tpu_device_attribute_t* tpu_device_attribute_find(
    const tpu_device_t* device, const char* name) {
  for (size_t i = 0; i < device->attribute_count; i++) {
    if (strcmp(device->attributes[i].name, name) == 0)
      return &device->attributes[i];
  }
  return NULL;
}

tpu_status_t tpu_device_memory_stats(const tpu_device_t* device,
                                     int64_t* out_in_use, int64_t* out_limit) {
  const PJRT_Api* api = device->client->api;
  TPU_PJRT_ARGS(PJRT_Device_MemoryStats_Args, args);
  args.device = device->device;
  TPU_RETURN_IF_ERROR(TPU_PJRT_CALL(api, PJRT_Device_MemoryStats, &args));
  if (!args.bytes_limit_is_set || args.bytes_limit <= 0)
    return tpu_status_make(TPU_STATUS_UNIMPLEMENTED,
                           "the plugin reports no memory limit for %s",
                           device->to_string);
  *out_in_use = args.bytes_in_use;
  *out_limit = args.bytes_limit;
  return NULL;
}
