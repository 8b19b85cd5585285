/* Completion events (PJRT_Event) for transfers and executions. */
#ifndef TORCHTPU_CORE_PJRT_EVENT_H_
#define TORCHTPU_CORE_PJRT_EVENT_H_

#include <stdbool.h>

#include "../status.h"
#include "client.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tpu_event_s tpu_event_t;

/* Blocks until the event fires; returns the error it carries, if any. */
tpu_status_t tpu_event_await(tpu_event_t* event);
bool tpu_event_is_ready(tpu_event_t* event);
/* Destroys without waiting (PJRT keeps the work alive). NULL is fine. */
void tpu_event_destroy(tpu_event_t* event);

#ifdef __cplusplus
}
#endif
#endif
