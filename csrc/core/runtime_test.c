/* The runtime singleton: start-up on the default plugin, device range
 * checks, and tracking of outstanding executions (pruned as they finish,
 * all awaited by synchronize). */
#include "runtime.h"

#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "metrics.h"
#include "program.h"
#include "testing.h"

static const char kAddOne[] =
    "func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {\n"
    "  %one = stablehlo.constant dense<1.0> : tensor<4xf32>\n"
    "  %y = stablehlo.add %x, %one : tensor<4xf32>\n"
    "  return %y : tensor<4xf32>\n"
    "}\n";

/* Starts the runtime in a forked child (it is process-wide and read once)
 * with the given environment, and runs `check` there; true when the child
 * passed. Runs before this process starts a client: forking one with a live
 * client's threads is not safe. */
static bool in_child(const char* num_devices, const char* visible,
                     const char* local_rank, int (*check)(tpu_status_t)) {
  fflush(stderr);
  pid_t pid = fork();
  if (pid == 0) {
    setenv("TORCHTPU_NUM_DEVICES", num_devices, 1);
    if (visible) setenv("TORCHTPU_VISIBLE_DEVICES", visible, 1);
    else unsetenv("TORCHTPU_VISIBLE_DEVICES");
    if (local_rank) setenv("LOCAL_RANK", local_rank, 1);
    else unsetenv("LOCAL_RANK");
    _exit(check(tpu_runtime_init(NULL)));
  }
  int wstatus = 0;
  return pid > 0 && waitpid(pid, &wstatus, 0) == pid && WIFEXITED(wstatus) &&
         WEXITSTATUS(wstatus) == 0;
}

#define CHILD_CHECK(cond)                                                  \
  do {                                                                     \
    if (!(cond)) {                                                         \
      fprintf(stderr, "%s:%d: child check failed: %s\n", __FILE__, __LINE__, \
              #cond);                                                      \
      return 1;                                                            \
    }                                                                      \
  } while (0)

static int device_id(int index) {
  tpu_device_t* device = NULL;
  tpu_status_free(tpu_client_device(tpu_runtime_client(), index, &device));
  return device ? tpu_device_id(device) : -1;
}

/* TORCHTPU_NUM_DEVICES=4 TORCHTPU_VISIBLE_DEVICES=2,3 LOCAL_RANK=1: two
 * devices, the plugin's 2 and 3; programs run on tpu:0 (plugin device 2);
 * the visible list wins over LOCAL_RANK. */
static int check_visible_two_of_four(tpu_status_t init) {
  CHILD_CHECK(init == NULL);
  CHILD_CHECK(tpu_runtime_device_count() == 2);
  CHILD_CHECK(device_id(0) == 2 && device_id(1) == 3);
  CHILD_CHECK(tpu_runtime_default_device() == 0);
  tpu_program_t* program = NULL;
  CHILD_CHECK(!tpu_program_get(kAddOne, strlen(kAddOne), &program));
  const float start[4] = {0, 1, 2, 3};
  int64_t four = 4;
  tpu_buffer_t *x = NULL, *y = NULL;
  CHILD_CHECK(!tpu_buffer_from_host(tpu_runtime_client(), 1, start,
                                    TPU_DTYPE_FLOAT32, &four, 1, NULL, &x));
  CHILD_CHECK(!tpu_program_execute_sync(program, 1, &x, 1, &y));
  float got[4];
  CHILD_CHECK(!tpu_buffer_to_host(y, got, sizeof got));
  CHILD_CHECK(got[0] == 1 && got[3] == 4);
  tpu_buffer_destroy(x);
  tpu_buffer_destroy(y);
  return 0;
}

static int check_local_rank_picks_device(tpu_status_t init) {
  CHILD_CHECK(init == NULL);
  CHILD_CHECK(tpu_runtime_device_count() == 4);
  CHILD_CHECK(tpu_runtime_default_device() == 1); /* 5 % 4 */
  return 0;
}

/* A bad list fails init with a message naming the variable and value, and
 * leaves nothing half-started. */
static int check_bad_list_fails(tpu_status_t init) {
  CHILD_CHECK(init != NULL);
  CHILD_CHECK(tpu_status_code(init) == TPU_STATUS_INVALID_ARGUMENT);
  const char* message = tpu_status_message(init);
  CHILD_CHECK(strstr(message, "TORCHTPU_VISIBLE_DEVICES"));
  CHILD_CHECK(strstr(message, getenv("TORCHTPU_VISIBLE_DEVICES")));
  CHILD_CHECK(!tpu_runtime_is_initialized());
  tpu_status_free(init);
  return 0;
}

static void test_visible_devices_and_local_rank(void) {
  CHECK(in_child("4", "2,3", "1", check_visible_two_of_four));
  CHECK(in_child("4", NULL, "5", check_local_rank_picks_device));
  CHECK(in_child("4", "1,1", NULL, check_bad_list_fails));
  CHECK(in_child("4", "one", NULL, check_bad_list_fails));
  CHECK(in_child("1", "1024", NULL, check_bad_list_fails));
}

static void test_init_and_device_checks(void) {
  CHECK_OK(tpu_runtime_init(NULL));
  CHECK(tpu_runtime_is_initialized());
  CHECK(tpu_runtime_client() != NULL);
  CHECK(tpu_runtime_device_count() >= 1);
  CHECK_OK(tpu_runtime_check_device(0));
  tpu_status_t s = tpu_runtime_check_device(tpu_runtime_device_count());
  CHECK(s != NULL && tpu_status_code(s) == TPU_STATUS_OUT_OF_RANGE);
  if (s) CHECK_STR_CONTAINS(tpu_status_message(s), "out of range");
  tpu_status_free(s);
  s = tpu_runtime_check_device(-1);
  CHECK(s != NULL);
  tpu_status_free(s);
}

/* 200 chained executions tracked (more than the prune threshold), then one
 * synchronize: every result is ready and correct. */
static void test_many_tracked_executions_then_synchronize(void) {
  CHECK_OK(tpu_runtime_init(NULL));
  tpu_program_t* program = NULL;
  CHECK_OK(tpu_program_get(kAddOne, strlen(kAddOne), &program));
  const float start[4] = {0, 1, 2, 3};
  int64_t four = 4;
  tpu_buffer_t* x = NULL;
  CHECK_OK(tpu_buffer_from_host(tpu_runtime_client(), 0, start, TPU_DTYPE_FLOAT32, &four, 1,
                                NULL, &x));
  for (int i = 0; i < 200; i++) {
    tpu_buffer_t* y = NULL;
    CHECK_OK(tpu_program_execute(program, 0, &x, 1, &y)); /* tracked */
    tpu_buffer_destroy(x);
    x = y;
  }
  CHECK_OK(tpu_runtime_synchronize(0));
  CHECK_OK(tpu_runtime_synchronize(0)); /* nothing left: fine */
  float got[4];
  CHECK_OK(tpu_buffer_to_host(x, got, sizeof got));
  for (int i = 0; i < 4; i++) CHECK_EQ(got[i], start[i] + 200);
  tpu_buffer_destroy(x);
  /* The synchronous variant waits itself. */
  tpu_buffer_t* y = NULL;
  CHECK_OK(tpu_buffer_from_host(tpu_runtime_client(), 0, start, TPU_DTYPE_FLOAT32, &four, 1,
                                NULL, &x));
  CHECK_OK(tpu_program_execute_sync(program, 0, &x, 1, &y));
  CHECK_OK(tpu_buffer_to_host(y, got, sizeof got));
  CHECK_EQ(got[3], 4.0f);
  tpu_buffer_destroy(x);
  tpu_buffer_destroy(y);
  /* Out-of-range devices have nothing to wait for. */
  CHECK_OK(tpu_runtime_synchronize(-1));
}

/* A failure recorded while an op ran keeps that op's name: a later read
 * whose error ends with the same message names it (not the reader's op),
 * an unrelated one names the read buffer's producer; synchronize does not
 * raise what a read raised, and names what it raises. Memory figures: free
 * never exceeds total. */
static void test_failures_name_their_op_and_memory_info(void) {
  CHECK_OK(tpu_runtime_init(NULL));
  tpu_runtime_set_op_label("aten::topk");
  tpu_runtime_record_error(0, tpu_status_make(TPU_STATUS_RESOURCE_EXHAUSTED,
                                              "PJRT: Out of memory allocating 64 bytes."));
  tpu_runtime_set_op_label(NULL);
  tpu_status_t s = tpu_runtime_name_failure(
      0,
      tpu_status_make(TPU_STATUS_RESOURCE_EXHAUSTED,
                      "device-to-host transfer: other: Out of memory allocating 64 bytes."),
      "aten::sum");
  CHECK_STR_CONTAINS(tpu_status_message(s), "aten::topk failed on the device: ");
  CHECK_EQ(tpu_status_code(s), TPU_STATUS_RESOURCE_EXHAUSTED);
  tpu_status_free(s);
  s = tpu_runtime_name_failure(0, tpu_status_make(TPU_STATUS_INTERNAL, "something else"),
                               "aten::sum");
  CHECK_STR_CONTAINS(tpu_status_message(s), "aten::sum failed on the device: something else");
  tpu_status_free(s);
  /* The reads raised it: synchronize does not raise it again. */
  CHECK_OK(tpu_runtime_synchronize(0));
  tpu_runtime_set_op_label("aten::mm");
  tpu_runtime_record_error(0, tpu_status_make(TPU_STATUS_INTERNAL,
                                              "PJRT: an internal failure of the mm kernel"));
  tpu_runtime_set_op_label(NULL);
  s = tpu_runtime_synchronize(0);
  CHECK(s != NULL);
  if (s) CHECK_STR_CONTAINS(tpu_status_message(s), "aten::mm failed on the device: PJRT");
  tpu_status_free(s);
  CHECK_OK(tpu_runtime_synchronize(0)); /* raised once */
  int64_t free_bytes = -1, total = -1;
  CHECK_OK(tpu_runtime_memory_info(0, &free_bytes, &total));
  CHECK(total > 0 && free_bytes >= 0 && free_bytes <= total);
  s = tpu_runtime_memory_info(tpu_runtime_device_count(), &free_bytes, &total);
  CHECK_EQ(tpu_status_code(s), TPU_STATUS_OUT_OF_RANGE);
  tpu_status_free(s);
}

/* libtpu off Google Cloud skips the metadata query; on a Cloud VM, for
 * other plugins, or when the user chose, nothing changes. */
static void test_libtpu_skips_the_metadata_query_off_cloud(void) {
  unsetenv("TPU_SKIP_MDS_QUERY");
  CHECK(!tpu_runtime_prepare_plugin_env("/x/xla_cpu_pjrt.so", "Standard PC"));
  CHECK(getenv("TPU_SKIP_MDS_QUERY") == NULL);
  CHECK(!tpu_runtime_prepare_plugin_env("/x/libtpu/libtpu.so", "Google Compute Engine\n"));
  CHECK(getenv("TPU_SKIP_MDS_QUERY") == NULL);
  CHECK(tpu_runtime_prepare_plugin_env("/x/libtpu/libtpu.so", "Standard PC"));
  CHECK_STR_CONTAINS(getenv("TPU_SKIP_MDS_QUERY"), "1");
  setenv("TPU_SKIP_MDS_QUERY", "0", 1);
  CHECK(!tpu_runtime_prepare_plugin_env("/x/libtpu.so", ""));
  CHECK_STR_CONTAINS(getenv("TPU_SKIP_MDS_QUERY"), "0");
  unsetenv("TPU_SKIP_MDS_QUERY");
}

TPU_TEST_MAIN(TPU_TEST(test_visible_devices_and_local_rank),
              TPU_TEST(test_libtpu_skips_the_metadata_query_off_cloud),
              TPU_TEST(test_init_and_device_checks),
              TPU_TEST(test_many_tracked_executions_then_synchronize),
              TPU_TEST(test_failures_name_their_op_and_memory_info))
