/* Status objects: every fallible call in the C core returns one.
 * NULL means success; anything else is a heap object the receiver must
 * consume (free it or return it further up). Messages are owned by the
 * status and live until tpu_status_free. */
#ifndef TORCHTPU_CORE_STATUS_H_
#define TORCHTPU_CORE_STATUS_H_

#include <stdarg.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tpu_status_code_e {
  TPU_STATUS_OK = 0,
  TPU_STATUS_INVALID_ARGUMENT,
  TPU_STATUS_NOT_FOUND,
  TPU_STATUS_OUT_OF_RANGE,
  TPU_STATUS_UNIMPLEMENTED,
  TPU_STATUS_FAILED_PRECONDITION,
  TPU_STATUS_RESOURCE_EXHAUSTED,
  TPU_STATUS_UNAVAILABLE,
  TPU_STATUS_INTERNAL,
} tpu_status_code_t;

typedef struct tpu_status_s* tpu_status_t;

/* Creates a status with a printf-style message. code must not be OK. */
tpu_status_t tpu_status_make(tpu_status_code_t code, const char* fmt, ...)
    __attribute__((format(printf, 2, 3)));
tpu_status_t tpu_status_makev(tpu_status_code_t code, const char* fmt,
                              va_list args);

/* RESOURCE_EXHAUSTED "out of host memory", followed by " " and `what`
 * ("building a graph") when what is neither NULL nor "": the one wording
 * of a failed host allocation, so callers and tests agree on it. */
tpu_status_t tpu_status_oom(const char* what);

/* Prefixes context ("while compiling add: ") to a status; returns it.
 * A NULL status passes through unchanged. */
tpu_status_t tpu_status_annotate(tpu_status_t status, const char* fmt, ...)
    __attribute__((format(printf, 2, 3)));

tpu_status_code_t tpu_status_code(tpu_status_t status);
const char* tpu_status_message(tpu_status_t status); /* "" for NULL */
const char* tpu_status_code_name(tpu_status_code_t code);
void tpu_status_free(tpu_status_t status);

#define TPU_RETURN_IF_ERROR(expr)     \
  do {                                \
    tpu_status_t tpu_status_ = (expr); \
    if (tpu_status_) return tpu_status_; \
  } while (0)

#ifdef __cplusplus
}
#endif
#endif /* TORCHTPU_CORE_STATUS_H_ */
