/* The one registry of torchtpu's environment variables: name, default,
 * meaning. Everything that reads configuration from the environment goes
 * through here, so `python -m torchtpu.info` and the README list exactly
 * what the code reads. */
#ifndef TORCHTPU_CORE_ENV_H_
#define TORCHTPU_CORE_ENV_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tpu_env_var_s {
  const char* name;
  const char* default_value; /* as text; "" = unset */
  const char* meaning;
  const char* stability;     /* "stable" | "experimental" */
} tpu_env_var_t;

size_t tpu_env_count(void);
const tpu_env_var_t* tpu_env_at(size_t i);
/* NULL for a name that is not in the registry. */
const tpu_env_var_t* tpu_env_find(const char* name);

/* The variable's value, or its registered default when unset or empty.
 * Reading a name missing from the registry is a programming error and
 * returns "". */
const char* tpu_env_get(const char* name);
/* Whether `what` is one of TORCHTPU_LOG's comma-separated items. */
bool tpu_env_log_enabled(const char* what);
/* Parses tpu_env_get(name) as a decimal integer; `fallback` when it is not
 * one. */
int64_t tpu_env_get_int(const char* name, int64_t fallback);
/* Parses tpu_env_get(name) as comma-separated distinct integers in
 * [0, limit), at most `capacity` of them, into out_indices in the order
 * given (spaces around items allowed). Unset or blank: *out_count = 0.
 * Anything else is INVALID_ARGUMENT naming the variable and its value; then
 * *out_count is 0. */
tpu_status_t tpu_env_get_index_list(const char* name, int limit, int capacity,
                                    int* out_indices, int* out_count);

#ifdef __cplusplus
}
#endif
#endif
