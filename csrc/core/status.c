#include "status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct tpu_status_s {
  tpu_status_code_t code;
  char* message;
};

/* Returned when the status itself cannot be allocated: never freed. */
static struct tpu_status_s kOutOfMemoryStatus = {
    TPU_STATUS_RESOURCE_EXHAUSTED, "out of host memory while reporting an error"};

static char* vformat(const char* fmt, va_list args) {
  if (!fmt) fmt = "(no message)";
  va_list copy;
  va_copy(copy, args);
  int n = vsnprintf(NULL, 0, fmt, copy);
  va_end(copy);
  if (n < 0) n = 0;
  char* text = malloc((size_t)n + 1);
  if (!text) return NULL;
  vsnprintf(text, (size_t)n + 1, fmt, args);
  return text;
}

tpu_status_t tpu_status_makev(tpu_status_code_t code, const char* fmt,
                              va_list args) {
  struct tpu_status_s* s = malloc(sizeof *s);
  if (!s) return &kOutOfMemoryStatus;
  s->code = code == TPU_STATUS_OK ? TPU_STATUS_INTERNAL : code;
  s->message = vformat(fmt, args);
  if (!s->message) {
    free(s);
    return &kOutOfMemoryStatus;
  }
  return s;
}

tpu_status_t tpu_status_make(tpu_status_code_t code, const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  tpu_status_t s = tpu_status_makev(code, fmt, args);
  va_end(args);
  return s;
}

tpu_status_t tpu_status_oom(const char* what) {
  if (!what || !what[0]) return tpu_status_make(TPU_STATUS_RESOURCE_EXHAUSTED, "out of host memory");
  return tpu_status_make(TPU_STATUS_RESOURCE_EXHAUSTED, "out of host memory %s", what);
}

tpu_status_t tpu_status_annotate(tpu_status_t status, const char* fmt, ...) {
  if (!status || status == &kOutOfMemoryStatus) return status;
  va_list args;
  va_start(args, fmt);
  char* prefix = vformat(fmt, args);
  va_end(args);
  if (!prefix) return status;
  size_t len = strlen(prefix) + strlen(status->message) + 1;
  char* joined = malloc(len);
  if (joined) {
    snprintf(joined, len, "%s%s", prefix, status->message);
    free(status->message);
    status->message = joined;
  }
  free(prefix);
  return status;
}

tpu_status_code_t tpu_status_code(tpu_status_t status) {
  return status ? status->code : TPU_STATUS_OK;
}

const char* tpu_status_message(tpu_status_t status) {
  return status ? status->message : "";
}

const char* tpu_status_code_name(tpu_status_code_t code) {
  switch (code) {
    case TPU_STATUS_OK: return "OK";
    case TPU_STATUS_INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case TPU_STATUS_NOT_FOUND: return "NOT_FOUND";
    case TPU_STATUS_OUT_OF_RANGE: return "OUT_OF_RANGE";
    case TPU_STATUS_UNIMPLEMENTED: return "UNIMPLEMENTED";
    case TPU_STATUS_FAILED_PRECONDITION: return "FAILED_PRECONDITION";
    case TPU_STATUS_RESOURCE_EXHAUSTED: return "RESOURCE_EXHAUSTED";
    case TPU_STATUS_UNAVAILABLE: return "UNAVAILABLE";
    case TPU_STATUS_INTERNAL: return "INTERNAL";
  }
  return "UNKNOWN";
}

void tpu_status_free(tpu_status_t status) {
  if (!status || status == &kOutOfMemoryStatus) return;
  free(status->message);
  free(status);
}
