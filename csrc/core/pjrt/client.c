#include "client.h"

#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* The CPU plugin is the only one we pass "cpu_device_count" to; others
 * reject unknown create options. The platform is only known once a client
 * exists, so guess from the file name and verify afterwards. */
static bool plugin_looks_like_cpu(const tpu_plugin_t* plugin) {
  const char* base = strrchr(plugin->path, '/');
  base = base ? base + 1 : plugin->path;
  return strstr(base, "cpu") != NULL;
}

static tpu_status_t create_pjrt_client(const PJRT_Api* api,
                                       int64_t cpu_device_count,
                                       bool with_cpu_option,
                                       PJRT_Client** out_client) {
  static const char kOption[] = "cpu_device_count";
  TPU_PJRT_ARGS(PJRT_NamedValue, option);
  option.name = kOption;
  option.name_size = sizeof kOption - 1;
  option.type = PJRT_NamedValue_kInt64;
  option.int64_value = cpu_device_count;
  option.value_size = 1;

  TPU_PJRT_ARGS(PJRT_Client_Create_Args, args);
  if (with_cpu_option) {
    args.create_options = &option;
    args.num_options = 1;
  }
  TPU_RETURN_IF_ERROR(TPU_PJRT_CALL(api, PJRT_Client_Create, &args));
  *out_client = args.client;
  return NULL;
}

static void destroy_pjrt_client(const PJRT_Api* api, PJRT_Client* client) {
  if (!client) return;
  TPU_PJRT_ARGS(PJRT_Client_Destroy_Args, args);
  args.client = client;
  tpu_status_free(TPU_PJRT_CALL(api, PJRT_Client_Destroy, &args));
}

static tpu_status_t read_platform_name(const PJRT_Api* api, PJRT_Client* client,
                                       char** out_name) {
  TPU_PJRT_ARGS(PJRT_Client_PlatformName_Args, args);
  args.client = client;
  TPU_RETURN_IF_ERROR(TPU_PJRT_CALL(api, PJRT_Client_PlatformName, &args));
  *out_name = tpu_pjrt_strndup(args.platform_name,
                               args.platform_name ? args.platform_name_size : 0);
  return *out_name ? NULL
                   : tpu_status_make(TPU_STATUS_RESOURCE_EXHAUSTED,
                                     "out of memory");
}

/* Distinct non-negative indices; *out_max is the largest (-1 if none). */
static tpu_status_t check_visible_devices(const tpu_client_options_t* options,
                                          int* out_max) {
  *out_max = -1;
  if (!options || options->visible_device_count <= 0) return NULL;
  if (!options->visible_devices) {
    return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT,
                           "visible_devices is NULL but its count is %d",
                           options->visible_device_count);
  }
  for (int i = 0; i < options->visible_device_count; i++) {
    int index = options->visible_devices[i];
    if (index < 0) {
      return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT,
                             "visible device index %d is negative", index);
    }
    for (int j = 0; j < i; j++) {
      if (options->visible_devices[j] == index) {
        return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT,
                               "visible device index %d is listed twice",
                               index);
      }
    }
    if (index > *out_max) *out_max = index;
  }
  return NULL;
}

/* Fills client->devices with the visible devices (all when no list). */
static tpu_status_t init_devices(tpu_client_t* client, PJRT_Device* const* all,
                                 size_t n, const tpu_client_options_t* options) {
  bool listed = options && options->visible_device_count > 0;
  size_t count = listed ? (size_t)options->visible_device_count : n;
  client->plugin_device_count = (int)n;
  for (size_t i = 0; listed && i < count; i++) {
    if ((size_t)options->visible_devices[i] >= n) {
      return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT,
                             "visible device index %d is out of range: the "
                             "plugin has %zu addressable device(s)",
                             options->visible_devices[i], n);
    }
  }
  client->devices = calloc(count, sizeof *client->devices);
  if (!client->devices) {
    return tpu_status_make(TPU_STATUS_RESOURCE_EXHAUSTED, "out of memory");
  }
  for (size_t i = 0; i < count; i++) {
    size_t source = listed ? (size_t)options->visible_devices[i] : i;
    client->device_count = (int)i + 1; /* so destroy frees a partial init */
    TPU_RETURN_IF_ERROR(
        tpu_device_init(client, (int)i, all[source], &client->devices[i]));
  }
  return NULL;
}

static tpu_status_t read_client_info(tpu_client_t* client,
                                     const tpu_client_options_t* options) {
  const PJRT_Api* api = client->api;
  if (!client->platform_name) {
    TPU_RETURN_IF_ERROR(
        read_platform_name(api, client->client, &client->platform_name));
  }

  client->platform_version = NULL;
  if (TPU_PJRT_HAS_SLOT(api, PJRT_Client_PlatformVersion)) {
    TPU_PJRT_ARGS(PJRT_Client_PlatformVersion_Args, version);
    version.client = client->client;
    TPU_RETURN_IF_ERROR(
        TPU_PJRT_CALL(api, PJRT_Client_PlatformVersion, &version));
    client->platform_version = tpu_pjrt_strndup(
        version.platform_version,
        version.platform_version ? version.platform_version_size : 0);
  } else {
    client->platform_version = tpu_pjrt_strndup("", 0);
  }
  if (!client->platform_version) {
    return tpu_status_make(TPU_STATUS_RESOURCE_EXHAUSTED, "out of memory");
  }

  client->process_index = 0;
  if (TPU_PJRT_HAS_SLOT(api, PJRT_Client_ProcessIndex)) {
    TPU_PJRT_ARGS(PJRT_Client_ProcessIndex_Args, process);
    process.client = client->client;
    TPU_RETURN_IF_ERROR(TPU_PJRT_CALL(api, PJRT_Client_ProcessIndex, &process));
    client->process_index = process.process_index;
  }

  TPU_PJRT_ARGS(PJRT_Client_AddressableDevices_Args, devices);
  devices.client = client->client;
  TPU_RETURN_IF_ERROR(
      TPU_PJRT_CALL(api, PJRT_Client_AddressableDevices, &devices));
  size_t n = devices.addressable_devices ? devices.num_addressable_devices : 0;
  if (n == 0) {
    return tpu_status_make(TPU_STATUS_UNAVAILABLE,
                           "PJRT client on '%s' has no addressable devices",
                           client->plugin->path);
  }
  if (n > 1u << 20) {
    return tpu_status_make(TPU_STATUS_INTERNAL,
                           "PJRT client reports %zu devices", n);
  }
  return init_devices(client, devices.addressable_devices, n, options);
}

/* Creates the PJRT client, passing cpu_device_count only to a CPU plugin. */
static tpu_status_t create_for_platform(tpu_client_t* client,
                                        int64_t cpu_device_count) {
  const PJRT_Api* api = client->api;
  if (plugin_looks_like_cpu(client->plugin)) {
    tpu_status_t with_option =
        create_pjrt_client(api, cpu_device_count, true, &client->client);
    if (!with_option) return NULL;
    /* Maybe not the CPU plugin after all, and it rejects the option: try
     * without. If that turns out to be CPU, the first error was real. */
    tpu_status_t without = create_pjrt_client(api, 0, false, &client->client);
    if (without) {
      tpu_status_free(without);
    } else {
      tpu_status_t name = read_platform_name(api, client->client,
                                             &client->platform_name);
      if (!name && strcmp(client->platform_name, "cpu") != 0) {
        tpu_status_free(with_option);
        return NULL;
      }
      tpu_status_free(name);
      destroy_pjrt_client(api, client->client);
      client->client = NULL;
      free(client->platform_name);
      client->platform_name = NULL;
    }
    return with_option;
  }

  TPU_RETURN_IF_ERROR(create_pjrt_client(api, 0, false, &client->client));
  TPU_RETURN_IF_ERROR(
      read_platform_name(api, client->client, &client->platform_name));
  if (strcmp(client->platform_name, "cpu") == 0) {
    /* A CPU plugin under another file name: recreate with the option (its
     * default device count need not be 1). */
    destroy_pjrt_client(api, client->client);
    client->client = NULL;
    TPU_RETURN_IF_ERROR(
        create_pjrt_client(api, cpu_device_count, true, &client->client));
  }
  return NULL;
}

tpu_status_t tpu_client_create(tpu_plugin_t* plugin,
                               const tpu_client_options_t* options,
                               tpu_client_t** out_client) {
  if (!out_client) {
    return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT, "out_client is NULL");
  }
  *out_client = NULL;
  if (!plugin) {
    return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT, "plugin is NULL");
  }
  int max_visible = -1;
  TPU_RETURN_IF_ERROR(check_visible_devices(options, &max_visible));
  int64_t cpu_device_count =
      options && options->cpu_device_count > 0 ? options->cpu_device_count : 1;
  /* So every listed index exists on the CPU plugin. */
  if (cpu_device_count < (int64_t)max_visible + 1)
    cpu_device_count = (int64_t)max_visible + 1;

  tpu_client_t* client = calloc(1, sizeof *client);
  if (!client) {
    return tpu_status_make(TPU_STATUS_RESOURCE_EXHAUSTED, "out of memory");
  }
  client->plugin = plugin;
  client->api = plugin->api;
  tpu_status_t status = create_for_platform(client, cpu_device_count);
  if (client->client) tpu_pjrt_track(TPU_PJRT_HANDLE_CLIENT, 1);
  if (!status) status = read_client_info(client, options);
  if (status) {
    tpu_client_destroy(client);
    return tpu_status_annotate(status, "creating a PJRT client on '%s': ",
                               plugin->path);
  }
  *out_client = client;
  return NULL;
}

void tpu_client_destroy(tpu_client_t* client) {
  if (!client) return;
  for (int i = 0; i < client->device_count; i++)
    tpu_device_fini(&client->devices[i]);
  free(client->devices);
  if (client->client) {
    destroy_pjrt_client(client->api, client->client);
    tpu_pjrt_track(TPU_PJRT_HANDLE_CLIENT, -1);
  }
  free(client->platform_name);
  free(client->platform_version);
  free(client);
}

tpu_plugin_t* tpu_client_plugin(const tpu_client_t* client) {
  return client->plugin;
}
const char* tpu_client_platform_name(const tpu_client_t* client) {
  return client->platform_name;
}

bool tpu_client_is_cpu(const tpu_client_t* client) {
  return client->platform_name && strcmp(client->platform_name, "cpu") == 0;
}
const char* tpu_client_platform_version(const tpu_client_t* client) {
  return client->platform_version;
}
int tpu_client_process_index(const tpu_client_t* client) {
  return client->process_index;
}
int tpu_client_device_count(const tpu_client_t* client) {
  return client->device_count;
}

bool tpu_client_is_single_device(const tpu_client_t* client) {
  return client->plugin_device_count == 1 && client->device_count == 1 &&
         client->process_index == 0;
}

tpu_status_t tpu_client_device(const tpu_client_t* client, int index,
                               tpu_device_t** out_device) {
  if (!client || !out_device) {
    return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT,
                           "client and out_device must not be NULL");
  }
  if (index < 0 || index >= client->device_count) {
    *out_device = NULL;
    return tpu_status_make(TPU_STATUS_OUT_OF_RANGE,
                           "device index %d out of range: the client has %d "
                           "device(s)",
                           index, client->device_count);
  }
  *out_device = &client->devices[index];
  return NULL;
}
