#include "hostheap.h"

#include <malloc.h>
#include <string.h>

#include "env.h"

static bool g_configured;

/* The malloc variables glibc reads at start; any of them means the user
 * chose a policy. */
static bool user_tuned_malloc(void) {
  if (strstr(tpu_env_get("GLIBC_TUNABLES"), "glibc.malloc.")) return true;
  static const char* const kVars[] = {"MALLOC_TOP_PAD_", "MALLOC_MMAP_MAX_",
                                      "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_",
                                      "MALLOC_ARENA_MAX"};
  for (size_t i = 0; i < sizeof kVars / sizeof kVars[0]; i++)
    if (tpu_env_get(kVars[i])[0]) return true;
  return false;
}

bool tpu_hostheap_configure(void) {
  if (g_configured) return true;
  if (tpu_env_get_int("TORCHTPU_HOST_HEAP", 1) == 0 || user_tuned_malloc()) return false;
  /* No chunk is mmap'ed (each would be unmapped on free); a heap's top is
   * never trimmed (the threshold is past any heap); 64 MiB of top pad:
   * a per-thread heap whose chunks are all free is deleted only when its
   * size is within the pad of its predecessor's room, which this rules out,
   * and growth comes in steps that need no further system call soon.
   * Untouched pad pages cost no memory. */
  /* All three are tried (no short cut): a policy applied only in part is
   * still reported as not applied. */
  int applied = (mallopt(M_MMAP_MAX, 0) == 1) + (mallopt(M_TRIM_THRESHOLD, 1 << 30) == 1) +
                (mallopt(M_TOP_PAD, 64 << 20) == 1);
  g_configured = applied == 3;
  return g_configured;
}

bool tpu_hostheap_configured(void) { return g_configured; }

void tpu_hostheap_release(void) { malloc_trim(0); }
