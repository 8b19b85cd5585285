#include "runtime.h"

#include <limits.h>
#include <pthread.h>

#include "env.h"

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static tpu_plugin_t* g_plugin;
static tpu_client_t* g_client;

tpu_status_t tpu_runtime_init(const char* fallback_plugin_path) {
  pthread_mutex_lock(&g_lock);
  tpu_status_t status = NULL;
  if (g_client) goto done;
  char path[PATH_MAX];
  status = tpu_plugin_resolve_path(fallback_plugin_path, path, sizeof path);
  if (status) goto done;
  tpu_plugin_t* plugin = NULL;
  status = tpu_plugin_load(path, &plugin);
  if (status) goto done;
  int64_t num_devices = tpu_env_get_int("TORCHTPU_NUM_DEVICES", -1);
  if (num_devices < 1 || num_devices > 1024) {
    status = tpu_status_make(
        TPU_STATUS_INVALID_ARGUMENT,
        "TORCHTPU_NUM_DEVICES must be an integer in [1, 1024], got '%s'",
        tpu_env_get("TORCHTPU_NUM_DEVICES"));
    tpu_plugin_release(plugin);
    goto done;
  }
  tpu_client_options_t options = {.cpu_device_count = num_devices};
  tpu_client_t* client = NULL;
  status = tpu_client_create(plugin, &options, &client);
  if (status) {
    tpu_plugin_release(plugin);
    goto done;
  }
  g_plugin = plugin;
  g_client = client;
done:
  pthread_mutex_unlock(&g_lock);
  return status;
}

bool tpu_runtime_is_initialized(void) {
  pthread_mutex_lock(&g_lock);
  bool ready = g_client != NULL;
  pthread_mutex_unlock(&g_lock);
  return ready;
}

tpu_client_t* tpu_runtime_client(void) { return g_client; }
tpu_plugin_t* tpu_runtime_plugin(void) { return g_plugin; }

int tpu_runtime_device_count(void) {
  return g_client ? tpu_client_device_count(g_client) : 0;
}

tpu_status_t tpu_runtime_check_device(int device_index) {
  int count = tpu_runtime_device_count();
  if (device_index < 0 || device_index >= count)
    return tpu_status_make(TPU_STATUS_OUT_OF_RANGE,
                           "tpu device index %d is out of range: %d device%s "
                           "available",
                           device_index, count, count == 1 ? "" : "s");
  return NULL;
}

void tpu_runtime_shutdown(void) {
  pthread_mutex_lock(&g_lock);
  tpu_client_destroy(g_client);
  tpu_plugin_release(g_plugin);
  g_client = NULL;
  g_plugin = NULL;
  pthread_mutex_unlock(&g_lock);
}
