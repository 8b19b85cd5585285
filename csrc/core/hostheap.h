/* The host heap under a device whose memory is host memory (the CPU
 * plugin): glibc malloc's policy for the plugin's buffers.
 *
 * Why: with glibc's defaults a buffer of a few hundred KiB or more is
 * mmap'ed fresh and unmapped on free, an emptied per-thread heap is
 * unmapped, and a heap's free top is trimmed: the next buffer of that size
 * page-faults every page again, zero-filled by the kernel. The plugin
 * allocates every result and every temporary of every execution, on its
 * worker threads, so a deferred training step spent 20 ms of kernel time
 * (12,000 page faults) per step on that. A device's caching allocator keeps
 * freed memory for the next buffer; this does the same for the host heap:
 * no mmap'ed chunks, no trimming, 64 MiB of top pad (an emptied heap is
 * kept). torch.tpu.empty_cache() returns the free memory to the OS.
 * A worker thread's heap holds at most 64 MiB: a bigger buffer allocated
 * there is still mapped for itself by glibc. */
#ifndef TORCHTPU_CORE_HOSTHEAP_H_
#define TORCHTPU_CORE_HOSTHEAP_H_

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Applies the policy to the process's malloc, once; true when it did (now
 * or before). It does not when TORCHTPU_HOST_HEAP is 0, or when the user
 * tuned malloc already (GLIBC_TUNABLES naming glibc.malloc, or a MALLOC_*_
 * variable): theirs stands. Not thread-safe against itself; the runtime
 * calls it once, at start. */
bool tpu_hostheap_configure(void);
bool tpu_hostheap_configured(void);

/* Returns the heap's free pages to the OS (malloc_trim). */
void tpu_hostheap_release(void);

#ifdef __cplusplus
}
#endif
#endif
