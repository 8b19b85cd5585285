/* The host heap policy: once configured, a large buffer freed and allocated
 * again reuses the pages (no page faults per round); release hands free
 * pages back. (Opting out is process-wide: tests/test_memory.py checks it
 * in a process of its own.) */
#include "hostheap.h"

#include <stdint.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "testing.h"

static long minor_faults(void) {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

/* Resident pages of the process (statm's second field). */
static long resident_pages(void) {
  FILE* f = fopen("/proc/self/statm", "r");
  long size = 0, resident = 0;
  if (f) {
    if (fscanf(f, "%ld %ld", &size, &resident) != 2) resident = 0;
    fclose(f);
  }
  return resident;
}

/* The buffer escapes, so the compiler cannot drop malloc/memset/free. */
void* volatile g_sink;

/* Faults per round of allocating, writing and freeing `bytes`. */
static long faults_per_round(size_t bytes, int rounds) {
  long before = minor_faults();
  for (int i = 0; i < rounds; i++) {
    g_sink = malloc(bytes);
    if (!g_sink) return -1;
    memset(g_sink, i, bytes);
    free(g_sink);
  }
  return (minor_faults() - before) / rounds;
}

static void test_freed_buffers_are_reused_and_released(void) {
  setenv("TORCHTPU_HOST_HEAP", "1", 1);
  unsetenv("GLIBC_TUNABLES");
#ifdef __SANITIZE_ADDRESS__
  /* ASan's allocator stands in for glibc's: mallopt has no effect there,
   * and configure reports that it did not apply. */
  CHECK(!tpu_hostheap_configure());
  CHECK(!tpu_hostheap_configured());
  tpu_hostheap_release();
  return;
#endif
  CHECK(tpu_hostheap_configure());
  CHECK(tpu_hostheap_configured());
  CHECK(tpu_hostheap_configure()); /* idempotent */
  const size_t bytes = 48u << 20; /* past glibc's largest mmap threshold */
  faults_per_round(bytes, 1);     /* the first touch faults, once */
  long per_round = faults_per_round(bytes, 8);
  CHECK(per_round >= 0);
  /* Without the policy every round faults all 12,288 pages in again. */
  CHECK(per_round < 64);
  /* Free pages go back to the OS on release. */
  long high = resident_pages();
  tpu_hostheap_release();
  long low = resident_pages();
  CHECK(high - low > (long)(bytes / 2 / (size_t)sysconf(_SC_PAGESIZE)));
}

TPU_TEST_MAIN(TPU_TEST(test_freed_buffers_are_reused_and_released))
