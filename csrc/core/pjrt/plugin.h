/* A loaded PJRT plugin: the shared object, its PJRT_Api table and the
 * attributes it reports. Plugins are never dlclose'd (XLA's plugins register
 * global state and do not support unloading); tpu_plugin_release frees our
 * bookkeeping only. */
#ifndef TORCHTPU_CORE_PJRT_PLUGIN_H_
#define TORCHTPU_CORE_PJRT_PLUGIN_H_

#include <stddef.h>

#include "../status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tpu_plugin_s tpu_plugin_t;

/* Picks the plugin path: $TORCHTPU_PJRT_PLUGIN if set and non-empty, else
 * `fallback` (the installed xla-cpu-pjrt found by the caller, may be NULL),
 * else the path compiled in as TPU_DEFAULT_PLUGIN_PATH. Writes it to out_path.
 * NOT_FOUND when no candidate exists. */
tpu_status_t tpu_plugin_resolve_path(const char* fallback, char* out_path,
                                     size_t out_capacity);

/* dlopens `path`, finds GetPjrtApi, checks the API major version and the
 * table size, calls PJRT_Plugin_Initialize and reads PJRT_Plugin_Attributes.
 * Every failure names the path and what went wrong. */
tpu_status_t tpu_plugin_load(const char* path, tpu_plugin_t** out_plugin);
void tpu_plugin_release(tpu_plugin_t* plugin);

const char* tpu_plugin_path(const tpu_plugin_t* plugin);
int tpu_plugin_api_major(const tpu_plugin_t* plugin);
int tpu_plugin_api_minor(const tpu_plugin_t* plugin);
/* The API version of the header we were built against. */
int tpu_plugin_header_api_major(void);
int tpu_plugin_header_api_minor(void);
/* Named string attributes from PJRT_Plugin_Attributes ("xla_version",
 * "stablehlo_current_version", ...); "" when the plugin does not report it.
 * Integer attributes are rendered as decimal text, int64 lists (version
 * triples) dot-joined ("1.13.3"), bools as "true"/"false". */
const char* tpu_plugin_attribute(const tpu_plugin_t* plugin, const char* name);
size_t tpu_plugin_attribute_count(const tpu_plugin_t* plugin);
/* name/value of attribute i, both borrowed. */
void tpu_plugin_attribute_at(const tpu_plugin_t* plugin, size_t i,
                             const char** out_name, const char** out_value);

/* Registers `handler` (an XLA_FFI_Handler*, see xla/ffi/api/c_api.h) as
 * the typed-FFI custom call `target` on `platform` ("Host" for XLA:CPU)
 * through the plugin's FFI extension. UNIMPLEMENTED when the plugin has no
 * extension or no register slot (older plugins, other platforms). */
tpu_status_t tpu_plugin_register_ffi_handler(tpu_plugin_t* plugin, const char* target,
                                             const char* platform, void* handler);

#ifdef __cplusplus
}
#endif
#endif
