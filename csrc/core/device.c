#include "device.h"

#include "defer.h"
#include "launcher.h"
#include "runtime.h"

tpu_status_t tpu_device_synchronize(int device_index) {
  if (!tpu_runtime_is_initialized()) return NULL;
  TPU_RETURN_IF_ERROR(tpu_runtime_check_device(device_index));
  /* Deferred ops first: synchronize means "everything issued is done". */
  TPU_RETURN_IF_ERROR(tpu_defer_flush(device_index, TPU_DEFER_SYNC));
  tpu_launcher_drain(); /* queued executions track their events when they run */
  return tpu_runtime_synchronize(device_index);
}
