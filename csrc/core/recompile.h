/* The recompile log (TORCHTPU_LOG=recompiles): when something is compiled
 * again under a new key, say which part of the key changed.
 *
 * A key is described as parts, one short text per component ("arg 0:
 * f32[4,5] strides [5,1] offset 0"); the log keeps the last description per
 * name (an op) and reports the first part that differs. */
#ifndef TORCHTPU_CORE_RECOMPILE_H_
#define TORCHTPU_CORE_RECOMPILE_H_

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Whether TORCHTPU_LOG names "recompiles" (read once). */
bool tpu_recompile_logging(void);

/* Records this compile of `name` and returns, malloc'd, what changed since
 * the previous one ("arg 0: f32[4,5] -> f32[4,7]"), or NULL for the first
 * compile of `name`. Counts metric "recompiles". Thread-safe. */
char* tpu_recompile_note(const char* name, const char* const* parts, int num_parts);

/* Forgets every name (tests). */
void tpu_recompile_reset(void);

#ifdef __cplusplus
}
#endif
#endif
