#include "client.h"

#include <unistd.h>

#include "device.h"
#include "pjrt_testing.h"

/* Checks the devices of a CPU client with `expected` devices. */
static void check_cpu_devices(tpu_client_t* client, int expected) {
  CHECK_EQ(tpu_client_device_count(client), expected);
  for (int i = 0; i < expected; i++) {
    tpu_device_t* device = NULL;
    CHECK_OK(tpu_client_device(client, i, &device));
    CHECK(device != NULL);
    CHECK_EQ(tpu_device_index(device), i);
    CHECK_EQ(tpu_device_id(device), i); /* the CPU plugin numbers them 0.. */
    CHECK_EQ(tpu_device_process_index(device), 0);
    CHECK(strcmp(tpu_device_kind(device), "cpu") == 0);
    char expected_string[64];
    snprintf(expected_string, sizeof expected_string, "CpuDevice(id=%d)", i);
    CHECK(strcmp(tpu_device_to_string(device), expected_string) == 0);
    CHECK(tpu_device_debug_string(device)[0] != '\0');
    for (size_t a = 0; a < tpu_device_attribute_count(device); a++) {
      const tpu_device_attribute_t* attr = tpu_device_attribute_at(device, a);
      CHECK(attr && attr->name && attr->name[0]);
      CHECK(tpu_device_attribute_find(device, attr->name) == attr);
      if (attr->kind == TPU_DEVICE_ATTRIBUTE_STRING) CHECK(attr->string_value);
      if (attr->kind == TPU_DEVICE_ATTRIBUTE_INT64_LIST)
        CHECK(attr->int64_list || attr->int64_list_size == 0);
    }
    CHECK(tpu_device_attribute_at(device, tpu_device_attribute_count(device)) ==
          NULL);
    CHECK(tpu_device_attribute_find(device, "no_such_attribute") == NULL);
  }
  tpu_device_t* device = (tpu_device_t*)1;
  CHECK_STATUS_CODE(tpu_client_device(client, expected, &device),
                    TPU_STATUS_OUT_OF_RANGE);
  CHECK(device == NULL);
  CHECK_STATUS_CODE(tpu_client_device(client, -1, &device),
                    TPU_STATUS_OUT_OF_RANGE);
}

static void test_one_device(void) {
  tpu_plugin_t* plugin = test_plugin();
  CHECK(plugin != NULL);
  double t0 = test_now_ms();
  tpu_client_t* client = test_client(1);
  printf("  client create: %.1f ms\n", test_now_ms() - t0);
  CHECK(client != NULL);
  CHECK(tpu_client_plugin(client) == plugin);
  CHECK(strcmp(tpu_client_platform_name(client), "cpu") == 0);
  CHECK(tpu_client_is_cpu(client));
  CHECK(tpu_client_platform_version(client) != NULL);
  CHECK_EQ(tpu_client_process_index(client), 0);
  check_cpu_devices(client, 1);
  tpu_client_destroy(client);
  CHECK(test_no_live_handles());
}

static void test_four_devices(void) {
  tpu_client_t* client = test_client(4);
  CHECK(client != NULL);
  check_cpu_devices(client, 4);
  tpu_device_t *d0, *d3;
  tpu_status_t s = tpu_client_device(client, 0, &d0);
  if (!s) s = tpu_client_device(client, 3, &d3);
  if (!s && strcmp(tpu_device_debug_string(d0), tpu_device_debug_string(d3)) == 0)
    s = tpu_status_make(TPU_STATUS_INTERNAL, "debug strings not distinct");
  tpu_client_destroy(client);
  CHECK_OK(s);
  CHECK(test_no_live_handles());
}

/* NULL options and a non-positive count both mean one device. */
static void test_default_options(void) {
  tpu_client_t* client = NULL;
  CHECK_OK(tpu_client_create(test_plugin(), NULL, &client));
  int n = tpu_client_device_count(client);
  tpu_client_destroy(client);
  CHECK_EQ(n, 1);

  tpu_client_options_t zero = {.cpu_device_count = 0};
  CHECK_OK(tpu_client_create(test_plugin(), &zero, &client));
  n = tpu_client_device_count(client);
  tpu_client_destroy(client);
  CHECK_EQ(n, 1);
  CHECK(test_no_live_handles());
}

/* Several clients on one plugin at once, each with its own devices. */
static void test_two_clients(void) {
  tpu_client_t* a = test_client(2);
  tpu_client_t* b = test_client(3);
  int na = a ? tpu_client_device_count(a) : -1;
  int nb = b ? tpu_client_device_count(b) : -1;
  tpu_client_destroy(a);
  tpu_client_destroy(b);
  CHECK_EQ(na, 2);
  CHECK_EQ(nb, 3);
  CHECK(test_no_live_handles());
}

/* The CPU plugin under a file name without "cpu": created without options,
 * recognised by its platform name, recreated with cpu_device_count. */
static void test_cpu_plugin_under_other_name(void) {
  char dir[] = "/tmp/torchtpu_plugin_link_XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  char link_path[256];
  snprintf(link_path, sizeof link_path, "%s/libsome_pjrt_plugin.so", dir);
  CHECK_EQ(symlink(TPU_DEFAULT_PLUGIN_PATH, link_path), 0);
  tpu_plugin_t* plugin = NULL;
  tpu_status_t s = tpu_plugin_load(link_path, &plugin);
  unlink(link_path);
  rmdir(dir);
  CHECK_OK(s);
  tpu_client_options_t options = {.cpu_device_count = 3};
  tpu_client_t* client = NULL;
  s = tpu_client_create(plugin, &options, &client);
  int n = client ? tpu_client_device_count(client) : -1;
  tpu_client_destroy(client);
  tpu_plugin_release(plugin);
  CHECK_OK(s);
  CHECK_EQ(n, 3);
  CHECK(test_no_live_handles());
}

/* A visible list picks plugin devices in its order; the CPU plugin gets
 * enough devices for the largest index even when asked for fewer. */
static void test_visible_devices(void) {
  const int visible[] = {3, 1};
  tpu_client_options_t options = {.cpu_device_count = 2,
                                  .visible_devices = visible,
                                  .visible_device_count = 2};
  tpu_client_t* client = NULL;
  CHECK_OK(tpu_client_create(test_plugin(), &options, &client));
  int n = tpu_client_device_count(client);
  int ids[2] = {-1, -1}, indices[2] = {-1, -1};
  for (int i = 0; i < 2 && i < n; i++) {
    tpu_device_t* device = NULL;
    tpu_status_free(tpu_client_device(client, i, &device));
    if (device) ids[i] = tpu_device_id(device);
    if (device) indices[i] = tpu_device_index(device);
  }
  tpu_client_destroy(client);
  CHECK_EQ(n, 2);
  CHECK(ids[0] == 3 && ids[1] == 1);
  CHECK(indices[0] == 0 && indices[1] == 1);
  CHECK(test_no_live_handles());
}

static void test_bad_visible_devices(void) {
  static const int duplicate[] = {0, 0}, negative[] = {1, -1};
  const struct {
    const int* list;
    int count;
    const char* message;
  } cases[] = {{duplicate, 2, "listed twice"},
               {negative, 2, "negative"},
               {NULL, 1, "NULL"}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    tpu_client_options_t options = {.visible_devices = cases[i].list,
                                    .visible_device_count = cases[i].count};
    tpu_client_t* client = (tpu_client_t*)1;
    tpu_status_t s = tpu_client_create(test_plugin(), &options, &client);
    CHECK(client == NULL);
    CHECK_EQ(tpu_status_code(s), TPU_STATUS_INVALID_ARGUMENT);
    CHECK_STR_CONTAINS(tpu_status_message(s), cases[i].message);
    tpu_status_free(s);
  }
  CHECK(test_no_live_handles());
}

static void test_bad_arguments(void) {
  tpu_client_t* client = (tpu_client_t*)1;
  CHECK_STATUS_CODE(tpu_client_create(NULL, NULL, &client),
                    TPU_STATUS_INVALID_ARGUMENT);
  CHECK(client == NULL);
  CHECK_STATUS_CODE(tpu_client_create(test_plugin(), NULL, NULL),
                    TPU_STATUS_INVALID_ARGUMENT);
  tpu_client_destroy(NULL);
}

TPU_TEST_MAIN(TPU_TEST(test_one_device), TPU_TEST(test_four_devices),
              TPU_TEST(test_default_options), TPU_TEST(test_two_clients),
              TPU_TEST(test_cpu_plugin_under_other_name),
              TPU_TEST(test_visible_devices),
              TPU_TEST(test_bad_visible_devices), TPU_TEST(test_bad_arguments))
