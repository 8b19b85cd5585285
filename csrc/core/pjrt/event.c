#include "event.h"

#include <stdlib.h>

#include "internal.h"

void tpu_pjrt_event_destroy(const PJRT_Api* api, PJRT_Event* event) {
  if (!event) return;
  TPU_PJRT_ARGS(PJRT_Event_Destroy_Args, args);
  args.event = event;
  tpu_pjrt_error_ignore(api, api->PJRT_Event_Destroy(&args));
}

tpu_status_t tpu_pjrt_event_await_destroy(const PJRT_Api* api,
                                          PJRT_Event* event,
                                          const char* context) {
  if (!event) return NULL;
  TPU_PJRT_ARGS(PJRT_Event_Await_Args, args);
  args.event = event;
  tpu_status_t status = TPU_PJRT_CALL(api, PJRT_Event_Await, &args);
  tpu_pjrt_event_destroy(api, event);
  return tpu_status_annotate(status, "%s: ", context);
}

tpu_status_t tpu_event_wrap(const PJRT_Api* api, PJRT_Event* event,
                            tpu_event_t** out_event) {
  tpu_event_t* wrapped = malloc(sizeof *wrapped);
  if (!wrapped) {
    /* Nobody can wait on it now: wait here so the work it tracks (which may
     * write caller memory) is finished before we report the failure. */
    tpu_status_free(tpu_pjrt_event_await_destroy(api, event, "event"));
    return tpu_status_make(TPU_STATUS_RESOURCE_EXHAUSTED,
                           "out of memory allocating an event");
  }
  wrapped->api = api;
  wrapped->event = event;
  tpu_pjrt_track(TPU_PJRT_HANDLE_EVENT, 1);
  *out_event = wrapped;
  return NULL;
}

tpu_status_t tpu_event_await(tpu_event_t* event) {
  if (!event || !event->event) return NULL;
  TPU_PJRT_ARGS(PJRT_Event_Await_Args, args);
  args.event = event->event;
  return TPU_PJRT_CALL(event->api, PJRT_Event_Await, &args);
}

bool tpu_event_is_ready(tpu_event_t* event) {
  if (!event || !event->event) return true;
  TPU_PJRT_ARGS(PJRT_Event_IsReady_Args, args);
  args.event = event->event;
  tpu_status_t status = TPU_PJRT_CALL(event->api, PJRT_Event_IsReady, &args);
  if (status) {
    /* A query that fails says nothing about readiness; report "ready" so a
     * polling caller moves on to tpu_event_await, which surfaces errors. */
    tpu_status_free(status);
    return true;
  }
  return args.is_ready;
}

void tpu_event_destroy(tpu_event_t* event) {
  if (!event) return;
  tpu_pjrt_event_destroy(event->api, event->event);
  tpu_pjrt_track(TPU_PJRT_HANDLE_EVENT, -1);
  free(event);
}
