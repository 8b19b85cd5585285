#include "rng.h"

#include <pthread.h>

#include "memory.h"
#include "runtime.h"

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static tpu_storage_t* g_state[TPU_MAX_DEVICES];

void tpu_rng_lock(void) { pthread_mutex_lock(&g_lock); }
void tpu_rng_unlock(void) { pthread_mutex_unlock(&g_lock); }

tpu_status_t tpu_rng_storage(int device, tpu_storage_t** out_storage) {
  TPU_RETURN_IF_ERROR(tpu_runtime_check_device(device));
  pthread_mutex_lock(&g_lock);
  tpu_status_t s = NULL;
  if (!g_state[device]) {
    tpu_storage_t* st = NULL;
    s = tpu_storage_create(device, 2 * sizeof(int64_t), &st);
    if (!s) {
      /* The generator's 16 bytes are not user memory: keep them out of
       * memory_allocated. The storage lives as long as the process. */
      tpu_memory_record_free(device, 2 * sizeof(int64_t));
      int64_t zero[2] = {0, 0}, two = 2;
      s = tpu_storage_write_host(st, zero, TPU_DTYPE_INT64, &two, 1, NULL);
      if (s) tpu_storage_release(st);
      else g_state[device] = st;
    }
  }
  *out_storage = g_state[device];
  pthread_mutex_unlock(&g_lock);
  return s;
}

tpu_status_t tpu_rng_set_state(int device, const int64_t state[2]) {
  tpu_storage_t* st = NULL;
  TPU_RETURN_IF_ERROR(tpu_rng_storage(device, &st));
  int64_t two = 2;
  pthread_mutex_lock(&g_lock);
  tpu_status_t s = tpu_storage_write_host(st, state, TPU_DTYPE_INT64, &two, 1, NULL);
  pthread_mutex_unlock(&g_lock);
  return s;
}

tpu_status_t tpu_rng_seed(int device, uint64_t seed) {
  int64_t state[2] = {(int64_t)seed, 0};
  return tpu_rng_set_state(device, state);
}

tpu_status_t tpu_rng_get_state(int device, int64_t out_state[2]) {
  tpu_storage_t* st = NULL;
  TPU_RETURN_IF_ERROR(tpu_rng_storage(device, &st));
  return tpu_storage_read_bytes(st, out_state, 2 * sizeof(int64_t));
}
