/* For C tests that need several devices: starts the runtime once with
 * `devices` CPU-plugin devices (TORCHTPU_NUM_DEVICES, set before the
 * runtime starts; visibility and torchrun's LOCAL_RANK cleared). True when
 * it runs with exactly that many. */
#ifndef TORCHTPU_CORE_RUNTIME_TESTING_H_
#define TORCHTPU_CORE_RUNTIME_TESTING_H_

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "runtime.h"
#include "status.h"

static inline bool tpu_testing_start_devices(int devices) {
  if (tpu_runtime_is_initialized()) return tpu_runtime_device_count() == devices;
  char count[16];
  snprintf(count, sizeof count, "%d", devices);
  setenv("TORCHTPU_NUM_DEVICES", count, 1);
  unsetenv("TORCHTPU_VISIBLE_DEVICES");
  unsetenv("LOCAL_RANK");
  tpu_status_t s = tpu_runtime_init(NULL);
  if (s) {
    fprintf(stderr, "cannot start the runtime: %s\n", tpu_status_message(s));
    tpu_status_free(s);
    return false;
  }
  return tpu_runtime_device_count() == devices;
}

#endif
