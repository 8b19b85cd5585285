/* Plugin loading, plus the layer-wide PJRT_Error conversion. */
#include "plugin.h"

#include <ctype.h>
#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../env.h"
#include "internal.h"

#ifndef TPU_DEFAULT_PLUGIN_PATH
#define TPU_DEFAULT_PLUGIN_PATH ""
#endif

atomic_long tpu_pjrt_live_handles_[TPU_PJRT_HANDLE_KIND_COUNT];

/* ---- errors ---------------------------------------------------------------- */

char* tpu_pjrt_strndup(const char* data, size_t size) {
  char* copy = malloc(size + 1);
  if (!copy) return NULL;
  if (data && size) memcpy(copy, data, size);
  copy[data ? size : 0] = '\0';
  return copy;
}

tpu_status_t tpu_pjrt_unimplemented(const char* slot) {
  return tpu_status_make(TPU_STATUS_UNIMPLEMENTED,
                         "the PJRT plugin does not implement %s", slot);
}

tpu_status_code_t tpu_pjrt_code_to_status_code(PJRT_Error_Code code) {
  switch (code) {
    case PJRT_Error_Code_OK: return TPU_STATUS_INTERNAL; /* error without code */
    case PJRT_Error_Code_INVALID_ARGUMENT: return TPU_STATUS_INVALID_ARGUMENT;
    case PJRT_Error_Code_NOT_FOUND: return TPU_STATUS_NOT_FOUND;
    case PJRT_Error_Code_OUT_OF_RANGE: return TPU_STATUS_OUT_OF_RANGE;
    case PJRT_Error_Code_UNIMPLEMENTED: return TPU_STATUS_UNIMPLEMENTED;
    case PJRT_Error_Code_RESOURCE_EXHAUSTED: return TPU_STATUS_RESOURCE_EXHAUSTED;
    case PJRT_Error_Code_FAILED_PRECONDITION:
    case PJRT_Error_Code_ALREADY_EXISTS:
    case PJRT_Error_Code_PERMISSION_DENIED:
    case PJRT_Error_Code_UNAUTHENTICATED:
      return TPU_STATUS_FAILED_PRECONDITION;
    case PJRT_Error_Code_UNAVAILABLE:
    case PJRT_Error_Code_CANCELLED:
    case PJRT_Error_Code_DEADLINE_EXCEEDED:
    case PJRT_Error_Code_ABORTED:
      return TPU_STATUS_UNAVAILABLE;
    case PJRT_Error_Code_UNKNOWN:
    case PJRT_Error_Code_INTERNAL:
    case PJRT_Error_Code_DATA_LOSS:
      return TPU_STATUS_INTERNAL;
  }
  return TPU_STATUS_INTERNAL;
}

static void destroy_error(const PJRT_Api* api, PJRT_Error* error) {
  TPU_PJRT_ARGS(PJRT_Error_Destroy_Args, args);
  args.error = error;
  api->PJRT_Error_Destroy(&args);
}

void tpu_pjrt_error_ignore(const PJRT_Api* api, PJRT_Error* error) {
  if (error) destroy_error(api, error);
}

static bool mentions_out_of_memory(const char* text, size_t n) {
  static const char kNeedle[] = "out of memory";
  size_t k = sizeof kNeedle - 1;
  for (size_t i = 0; i + k <= n; i++) {
    size_t j = 0;
    while (j < k && tolower((unsigned char)text[i + j]) == kNeedle[j]) j++;
    if (j == k) return true;
  }
  return false;
}

tpu_status_t tpu_pjrt_status(const PJRT_Api* api, PJRT_Error* error,
                             const char* context) {
  if (!error) return NULL;
  TPU_PJRT_ARGS(PJRT_Error_Message_Args, message);
  message.error = error;
  api->PJRT_Error_Message(&message);

  TPU_PJRT_ARGS(PJRT_Error_GetCode_Args, code);
  code.error = error;
  PJRT_Error* code_error = api->PJRT_Error_GetCode(&code);
  tpu_status_code_t status_code = TPU_STATUS_INTERNAL;
  if (code_error) {
    destroy_error(api, code_error);
  } else {
    status_code = tpu_pjrt_code_to_status_code(code.code);
  }
  int len = message.message_size > (size_t)INT32_MAX
                ? INT32_MAX
                : (int)message.message_size;
  /* XLA's CPU runtime reports a failed allocation with another code
   * ("Out of memory allocating N bytes"): it is the device running out. */
  if (status_code != TPU_STATUS_RESOURCE_EXHAUSTED && message.message &&
      mentions_out_of_memory(message.message, (size_t)len))
    status_code = TPU_STATUS_RESOURCE_EXHAUSTED;
  tpu_status_t status =
      tpu_status_make(status_code, "%s: %.*s", context ? context : "PJRT",
                      len, message.message ? message.message : "");
  destroy_error(api, error);
  return status;
}

/* ---- registry ------------------------------------------------------------
 * One entry per PJRT_Api we have seen, so PJRT_Plugin_Initialize runs once
 * per plugin even when several tpu_plugin_t share it. Entries are never
 * freed (the plugins are never unloaded either). */

typedef struct registry_entry_s {
  struct registry_entry_s* next;
  const PJRT_Api* api;
  void* handle;
} registry_entry_t;

static pthread_mutex_t g_registry_mutex = PTHREAD_MUTEX_INITIALIZER;
static registry_entry_t* g_registry;

static registry_entry_t* registry_find(const PJRT_Api* api) {
  for (registry_entry_t* e = g_registry; e; e = e->next)
    if (e->api == api) return e;
  return NULL;
}

/* ---- path ------------------------------------------------------------------ */

tpu_status_t tpu_plugin_resolve_path(const char* fallback, char* out_path,
                                     size_t out_capacity) {
  const char* env = tpu_env_get("TORCHTPU_PJRT_PLUGIN");
  const char* chosen = NULL;
  if (env && *env) {
    chosen = env;
  } else if (fallback && *fallback) {
    chosen = fallback;
  } else if (TPU_DEFAULT_PLUGIN_PATH[0]) {
    chosen = TPU_DEFAULT_PLUGIN_PATH;
  }
  if (!chosen) {
    return tpu_status_make(
        TPU_STATUS_NOT_FOUND,
        "no PJRT plugin configured: set TORCHTPU_PJRT_PLUGIN to the path of "
        "a PJRT plugin (.so)");
  }
  if (!out_path || strlen(chosen) + 1 > out_capacity) {
    return tpu_status_make(TPU_STATUS_OUT_OF_RANGE,
                           "plugin path '%s' does not fit in %zu bytes", chosen,
                           out_capacity);
  }
  memcpy(out_path, chosen, strlen(chosen) + 1);
  return NULL;
}

/* ---- loading ---------------------------------------------------------------- */

/* Renders one attribute value as text. */
static char* render_named_value(const PJRT_NamedValue* v) {
  char scratch[64];
  switch (v->type) {
    case PJRT_NamedValue_kString:
      return tpu_pjrt_strndup(v->string_value, v->string_value ? v->value_size : 0);
    case PJRT_NamedValue_kInt64:
      snprintf(scratch, sizeof scratch, "%" PRId64, v->int64_value);
      return tpu_pjrt_strndup(scratch, strlen(scratch));
    case PJRT_NamedValue_kBool:
      return tpu_pjrt_strndup(v->bool_value ? "true" : "false",
                              v->bool_value ? 4 : 5);
    case PJRT_NamedValue_kFloat:
      snprintf(scratch, sizeof scratch, "%.9g", (double)v->float_value);
      return tpu_pjrt_strndup(scratch, strlen(scratch));
    case PJRT_NamedValue_kInt64List: {
      /* Version triples ([1, 13, 3]) read naturally as "1.13.3". */
      size_t n = v->int64_array_value ? v->value_size : 0;
      size_t cap = n * 21 + 1;
      char* text = malloc(cap);
      if (!text) return NULL;
      size_t used = 0;
      text[0] = '\0';
      for (size_t i = 0; i < n; i++) {
        used += (size_t)snprintf(text + used, cap - used, "%s%" PRId64,
                                 i ? "." : "", v->int64_array_value[i]);
      }
      return text;
    }
  }
  return tpu_pjrt_strndup("", 0);
}

static tpu_status_t read_attributes(tpu_plugin_t* plugin) {
  const PJRT_Api* api = plugin->api;
  if (!TPU_PJRT_HAS_SLOT(api, PJRT_Plugin_Attributes)) return NULL; /* none */
  TPU_PJRT_ARGS(PJRT_Plugin_Attributes_Args, args);
  TPU_RETURN_IF_ERROR(TPU_PJRT_CALL(api, PJRT_Plugin_Attributes, &args));
  size_t n = args.attributes ? args.num_attributes : 0;
  if (n == 0) return NULL;
  plugin->attribute_names = calloc(n, sizeof(char*));
  plugin->attribute_values = calloc(n, sizeof(char*));
  if (!plugin->attribute_names || !plugin->attribute_values) goto oom;
  for (size_t i = 0; i < n; i++) {
    const PJRT_NamedValue* v = &args.attributes[i];
    plugin->attribute_names[i] = tpu_pjrt_strndup(v->name, v->name ? v->name_size : 0);
    plugin->attribute_values[i] = render_named_value(v);
    plugin->attribute_count = i + 1;
    if (!plugin->attribute_names[i] || !plugin->attribute_values[i]) goto oom;
  }
  return NULL;
oom:
  return tpu_status_make(TPU_STATUS_RESOURCE_EXHAUSTED,
                         "out of memory copying plugin attributes");
}

/* Looks the api up in the registry and initializes it on first sight.
 * Called with the registry mutex held. */
static tpu_status_t register_and_initialize(void* handle, const PJRT_Api* api) {
  if (registry_find(api)) return NULL;
  if (TPU_PJRT_HAS_SLOT(api, PJRT_Plugin_Initialize)) {
    TPU_PJRT_ARGS(PJRT_Plugin_Initialize_Args, args);
    TPU_RETURN_IF_ERROR(TPU_PJRT_CALL(api, PJRT_Plugin_Initialize, &args));
  }
  registry_entry_t* entry = calloc(1, sizeof *entry);
  if (!entry) {
    return tpu_status_make(TPU_STATUS_RESOURCE_EXHAUSTED,
                           "out of memory registering plugin");
  }
  entry->api = api;
  entry->handle = handle;
  entry->next = g_registry;
  g_registry = entry;
  return NULL;
}

/* Checks the parts of the table we rely on unconditionally. */
static tpu_status_t check_api_table(const char* path, const PJRT_Api* api) {
  const size_t version_end =
      offsetof(PJRT_Api, pjrt_api_version) + sizeof(api->pjrt_api_version);
  if (api->struct_size < version_end || api->struct_size > (1u << 20)) {
    return tpu_status_make(TPU_STATUS_FAILED_PRECONDITION,
                           "PJRT plugin '%s' reports an implausible PJRT_Api "
                           "size of %zu bytes",
                           path, api->struct_size);
  }
  int major = api->pjrt_api_version.major_version;
  int minor = api->pjrt_api_version.minor_version;
  if (major != PJRT_API_MAJOR) {
    return tpu_status_make(TPU_STATUS_FAILED_PRECONDITION,
                           "PJRT plugin '%s' implements PJRT C API %d.%d, but "
                           "torchtpu was built against %d.%d (major versions "
                           "must match)",
                           path, major, minor, PJRT_API_MAJOR, PJRT_API_MINOR);
  }
  /* Error handling is used by every call: it must be there. */
  if (!TPU_PJRT_HAS_SLOT(api, PJRT_Error_Destroy) ||
      !TPU_PJRT_HAS_SLOT(api, PJRT_Error_Message) ||
      !TPU_PJRT_HAS_SLOT(api, PJRT_Error_GetCode)) {
    return tpu_status_make(TPU_STATUS_FAILED_PRECONDITION,
                           "PJRT plugin '%s' lacks the PJRT_Error functions "
                           "(PJRT_Api is %zu bytes)",
                           path, api->struct_size);
  }
  return NULL;
}

static tpu_status_t load_locked(const char* path, tpu_plugin_t* plugin) {
  /* A path with a slash names a file: report a missing one as such. Bare
   * names go through the dynamic loader's search path. */
  if (strchr(path, '/')) {
    struct stat st;
    if (stat(path, &st) != 0) {
      int err = errno;
      return tpu_status_make(err == ENOENT ? TPU_STATUS_NOT_FOUND
                                           : TPU_STATUS_FAILED_PRECONDITION,
                             "PJRT plugin '%s' cannot be opened: %s", path,
                             strerror(err));
    }
    if (!S_ISREG(st.st_mode)) {
      return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT,
                             "PJRT plugin '%s' is not a regular file", path);
    }
  }
  dlerror();
  void* handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* why = dlerror();
    return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT,
                           "cannot load PJRT plugin '%s' (is it a shared "
                           "library?): %s",
                           path, why ? why : "unknown dlopen error");
  }
  /* From here on the handle stays open: we never dlclose (see plugin.h). */
  dlerror();
  void* symbol = dlsym(handle, "GetPjrtApi");
  if (!symbol) {
    const char* why = dlerror();
    return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT,
                           "'%s' is not a PJRT plugin: it does not export "
                           "GetPjrtApi (%s)",
                           path, why ? why : "symbol is NULL");
  }
  const PJRT_Api* (*get_api)(void);
  memcpy(&get_api, &symbol, sizeof get_api); /* object -> function pointer */
  const PJRT_Api* api = get_api();
  if (!api) {
    return tpu_status_make(TPU_STATUS_FAILED_PRECONDITION,
                           "PJRT plugin '%s': GetPjrtApi returned NULL", path);
  }
  TPU_RETURN_IF_ERROR(check_api_table(path, api));
  plugin->handle = handle;
  plugin->api = api;
  plugin->api_major = api->pjrt_api_version.major_version;
  plugin->api_minor = api->pjrt_api_version.minor_version;
  TPU_RETURN_IF_ERROR(tpu_status_annotate(register_and_initialize(handle, api),
                                          "initializing PJRT plugin '%s': ",
                                          path));
  return tpu_status_annotate(read_attributes(plugin),
                             "reading attributes of PJRT plugin '%s': ", path);
}

tpu_status_t tpu_plugin_load(const char* path, tpu_plugin_t** out_plugin) {
  if (!out_plugin) {
    return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT, "out_plugin is NULL");
  }
  *out_plugin = NULL;
  if (!path || !*path) {
    return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT,
                           "empty PJRT plugin path");
  }
  tpu_plugin_t* plugin = calloc(1, sizeof *plugin);
  if (!plugin || !(plugin->path = tpu_pjrt_strndup(path, strlen(path)))) {
    free(plugin);
    return tpu_status_make(TPU_STATUS_RESOURCE_EXHAUSTED,
                           "out of memory loading plugin");
  }
  pthread_mutex_lock(&g_registry_mutex);
  tpu_status_t status = load_locked(path, plugin);
  pthread_mutex_unlock(&g_registry_mutex);
  if (status) {
    tpu_plugin_release(plugin);
    return status;
  }
  *out_plugin = plugin;
  return NULL;
}

void tpu_plugin_release(tpu_plugin_t* plugin) {
  if (!plugin) return;
  for (size_t i = 0; i < plugin->attribute_count; i++) {
    free(plugin->attribute_names[i]);
    free(plugin->attribute_values[i]);
  }
  free(plugin->attribute_names);
  free(plugin->attribute_values);
  free(plugin->path);
  free(plugin);
}

/* ---- accessors ---------------------------------------------------------------- */

const char* tpu_plugin_path(const tpu_plugin_t* plugin) { return plugin->path; }

/* The PJRT FFI extension as plugins since late 2025 lay it out (the pip
 * wheel ships only pjrt_c_api.h): the base, then type-id registration,
 * user data, and handler registration, which older plugins lack (their
 * struct ends before it). */
typedef struct ffi_register_args_s {
  size_t struct_size;
  const char* target_name;
  size_t target_name_size;
  void* handler;
  const char* platform_name;
  size_t platform_name_size;
  unsigned traits;
} ffi_register_args_t;

typedef struct ffi_extension_s {
  PJRT_Extension_Base base;
  void* type_id_register;
  void* user_data_add;
  PJRT_Error* (*register_handler)(ffi_register_args_t* args);
} ffi_extension_t;

tpu_status_t tpu_plugin_register_ffi_handler(tpu_plugin_t* plugin, const char* target,
                                             const char* platform, void* handler) {
  const ffi_extension_t* ffi = NULL;
  for (const PJRT_Extension_Base* e = plugin->api->extension_start; e; e = e->next)
    if (e->type == PJRT_Extension_Type_FFI) ffi = (const ffi_extension_t*)e;
  if (!ffi || ffi->base.struct_size < sizeof(ffi_extension_t) || !ffi->register_handler)
    return tpu_status_make(TPU_STATUS_UNIMPLEMENTED,
                           "the PJRT plugin %s cannot register FFI handlers", plugin->path);
  ffi_register_args_t args = {.struct_size = sizeof args,
                              .target_name = target,
                              .target_name_size = strlen(target),
                              .handler = handler,
                              .platform_name = platform,
                              .platform_name_size = strlen(platform)};
  return tpu_pjrt_status(plugin->api, ffi->register_handler(&args),
                         "PJRT_FFI_Register_Handler");
}
int tpu_plugin_api_major(const tpu_plugin_t* plugin) { return plugin->api_major; }
int tpu_plugin_api_minor(const tpu_plugin_t* plugin) { return plugin->api_minor; }
int tpu_plugin_header_api_major(void) { return PJRT_API_MAJOR; }
int tpu_plugin_header_api_minor(void) { return PJRT_API_MINOR; }

const char* tpu_plugin_attribute(const tpu_plugin_t* plugin, const char* name) {
  for (size_t i = 0; i < plugin->attribute_count; i++) {
    if (strcmp(plugin->attribute_names[i], name) == 0)
      return plugin->attribute_values[i];
  }
  return "";
}

size_t tpu_plugin_attribute_count(const tpu_plugin_t* plugin) {
  return plugin->attribute_count;
}

void tpu_plugin_attribute_at(const tpu_plugin_t* plugin, size_t i,
                             const char** out_name, const char** out_value) {
  bool ok = i < plugin->attribute_count;
  if (out_name) *out_name = ok ? plugin->attribute_names[i] : "";
  if (out_value) *out_value = ok ? plugin->attribute_values[i] : "";
}
