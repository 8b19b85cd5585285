/* A device as the user sees it: the one "synchronize" every entry point
 * (torch.tpu.synchronize, torch.accelerator.synchronize, streams, events)
 * means. It sits on top of the engine's layers: the deferred run (defer.h),
 * the launch queue (launcher.h) and the runtime's tracked events
 * (runtime.h). Not to be confused with the PJRT device object
 * (pjrt/device.h, tpu_device_t): this one is a device index. */
#ifndef TORCHTPU_CORE_DEVICE_H_
#define TORCHTPU_CORE_DEVICE_H_

#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Waits until everything issued on `device_index` so far has run: flushes
 * its deferred run (DeferAndFuse, counted as a "sync" flush), drains the
 * launch queue, then waits for the device's tracked executions. Returns
 * the first error among them (a flush's, or an asynchronous execution's
 * kept for this synchronize); OUT_OF_RANGE for a bad index. Before the
 * runtime starts there is nothing to wait for: NULL. */
tpu_status_t tpu_device_synchronize(int device_index);

#ifdef __cplusplus
}
#endif
#endif
