#include "plugin.h"

#include <unistd.h>

#include "pjrt_testing.h"

/* "1.13.3" -> 1, 13, 3. */
static int parse_version(const char* text, int out[3]) {
  return sscanf(text, "%d.%d.%d", &out[0], &out[1], &out[2]) == 3;
}

static void test_load_default_plugin(void) {
  unsetenv("TORCHTPU_PJRT_PLUGIN");
  char path[4096];
  CHECK_OK(tpu_plugin_resolve_path(NULL, path, sizeof path));
  CHECK(strcmp(path, TPU_DEFAULT_PLUGIN_PATH) == 0);

  double t0 = test_now_ms();
  tpu_plugin_t* plugin = NULL;
  CHECK_OK(tpu_plugin_load(path, &plugin));
  printf("  plugin load: %.1f ms\n", test_now_ms() - t0);
  CHECK(strcmp(tpu_plugin_path(plugin), path) == 0);
  CHECK_EQ(tpu_plugin_api_major(plugin), tpu_plugin_header_api_major());
  CHECK_EQ(tpu_plugin_header_api_major(), PJRT_API_MAJOR);
  CHECK_EQ(tpu_plugin_header_api_minor(), PJRT_API_MINOR);
  CHECK(tpu_plugin_api_minor(plugin) > 0);

  const char* xla = tpu_plugin_attribute(plugin, "xla_version");
  CHECK(xla[0] != '\0');
  int current[3], minimum[3];
  CHECK(parse_version(tpu_plugin_attribute(plugin, "stablehlo_current_version"),
                      current));
  CHECK(parse_version(tpu_plugin_attribute(plugin, "stablehlo_minimum_version"),
                      minimum));
  CHECK(current[0] * 1000000 + current[1] * 1000 + current[2] >=
        minimum[0] * 1000000 + minimum[1] * 1000 + minimum[2]);
  CHECK(current[0] >= 1);
  CHECK(strcmp(tpu_plugin_attribute(plugin, "no_such_attribute"), "") == 0);

  size_t n = tpu_plugin_attribute_count(plugin);
  CHECK(n >= 3);
  int seen_xla = 0;
  for (size_t i = 0; i < n; i++) {
    const char *name, *value;
    tpu_plugin_attribute_at(plugin, i, &name, &value);
    CHECK(name && value && name[0]);
    CHECK(strcmp(tpu_plugin_attribute(plugin, name), value) == 0);
    if (strcmp(name, "xla_version") == 0) seen_xla = 1;
    printf("  %s = %s\n", name, value);
  }
  CHECK(seen_xla);
  tpu_plugin_release(plugin);
}

/* Loading again gives another tpu_plugin_t over the same PJRT_Api (the
 * plugin is initialized only once). */
static void test_load_twice_shares_api(void) {
  tpu_plugin_t *a = NULL, *b = NULL;
  CHECK_OK(tpu_plugin_load(TPU_DEFAULT_PLUGIN_PATH, &a));
  tpu_status_t s = tpu_plugin_load(TPU_DEFAULT_PLUGIN_PATH, &b);
  if (s) tpu_plugin_release(a);
  CHECK_OK(s);
  CHECK(a != b);
  CHECK(a->api == b->api);
  CHECK(strcmp(tpu_plugin_attribute(a, "xla_version"),
               tpu_plugin_attribute(b, "xla_version")) == 0);
  tpu_plugin_release(a);
  /* b still works after a is released. */
  tpu_client_t* client = NULL;
  s = tpu_client_create(b, NULL, &client);
  tpu_client_destroy(client);
  tpu_plugin_release(b);
  CHECK_OK(s);
  CHECK(test_no_live_handles());
}

static void test_missing_file(void) {
  const char* path = "/nonexistent/torchtpu/missing_pjrt_plugin.so";
  tpu_plugin_t* plugin = (tpu_plugin_t*)1;
  tpu_status_t s = tpu_plugin_load(path, &plugin);
  CHECK(plugin == NULL);
  CHECK_EQ(tpu_status_code(s), TPU_STATUS_NOT_FOUND);
  CHECK_STR_CONTAINS(tpu_status_message(s), path);
  CHECK_STR_CONTAINS(tpu_status_message(s), "No such file");
  tpu_status_free(s);
}

static void test_not_a_plugin(void) {
  /* An executable. */
  tpu_plugin_t* plugin = NULL;
  tpu_status_t s = tpu_plugin_load("/bin/ls", &plugin);
  CHECK(s != NULL && plugin == NULL);
  printf("  /bin/ls: %s\n", tpu_status_message(s));
  CHECK_STR_CONTAINS(tpu_status_message(s), "/bin/ls");
  tpu_status_free(s);

  /* A text file. */
  char text_path[] = "/tmp/torchtpu_not_a_plugin_XXXXXX";
  int fd = mkstemp(text_path);
  CHECK(fd >= 0);
  const char text[] =
      "This is a text file, long enough to have a full ELF header's worth of "
      "bytes, but not a shared library.\n";
  CHECK(write(fd, text, sizeof text - 1) == (ssize_t)(sizeof text - 1));
  close(fd);
  s = tpu_plugin_load(text_path, &plugin);
  unlink(text_path);
  printf("  text file: %s\n", tpu_status_message(s));
  CHECK_EQ(tpu_status_code(s), TPU_STATUS_INVALID_ARGUMENT);
  CHECK_STR_CONTAINS(tpu_status_message(s), text_path);
  CHECK_STR_CONTAINS(tpu_status_message(s), "cannot load PJRT plugin");
  CHECK_STR_CONTAINS(tpu_status_message(s), "invalid ELF header");
  tpu_status_free(s);

  /* A real shared library without GetPjrtApi (found via the search path). */
  s = tpu_plugin_load("libm.so.6", &plugin);
  printf("  libm: %s\n", tpu_status_message(s));
  CHECK_EQ(tpu_status_code(s), TPU_STATUS_INVALID_ARGUMENT);
  CHECK_STR_CONTAINS(tpu_status_message(s), "GetPjrtApi");
  CHECK_STR_CONTAINS(tpu_status_message(s), "libm.so.6");
  tpu_status_free(s);

  /* A directory. */
  s = tpu_plugin_load("/tmp", &plugin);
  CHECK_EQ(tpu_status_code(s), TPU_STATUS_INVALID_ARGUMENT);
  CHECK_STR_CONTAINS(tpu_status_message(s), "/tmp");
  tpu_status_free(s);

  CHECK_STATUS_CODE(tpu_plugin_load("", &plugin), TPU_STATUS_INVALID_ARGUMENT);
}

static void test_resolve_path_order(void) {
  char path[256];
  setenv("TORCHTPU_PJRT_PLUGIN", "/opt/override/pjrt_plugin.so", 1);
  CHECK_OK(tpu_plugin_resolve_path("/fallback/plugin.so", path, sizeof path));
  CHECK(strcmp(path, "/opt/override/pjrt_plugin.so") == 0);

  setenv("TORCHTPU_PJRT_PLUGIN", "", 1); /* empty = unset */
  CHECK_OK(tpu_plugin_resolve_path("/fallback/plugin.so", path, sizeof path));
  CHECK(strcmp(path, "/fallback/plugin.so") == 0);

  unsetenv("TORCHTPU_PJRT_PLUGIN");
  CHECK_OK(tpu_plugin_resolve_path("", path, sizeof path));
  CHECK(strcmp(path, TPU_DEFAULT_PLUGIN_PATH) == 0);

  char tiny[4];
  CHECK_STATUS_CODE(tpu_plugin_resolve_path("/fallback/plugin.so", tiny,
                                            sizeof tiny),
                    TPU_STATUS_OUT_OF_RANGE);
}

/* The override is what actually gets loaded: point it at a missing file and
 * the load error names that file, not the default plugin. */
static void test_override_is_loaded(void) {
  char path[4096];
  setenv("TORCHTPU_PJRT_PLUGIN", "/nonexistent/override_pjrt.so", 1);
  CHECK_OK(tpu_plugin_resolve_path(TPU_DEFAULT_PLUGIN_PATH, path, sizeof path));
  unsetenv("TORCHTPU_PJRT_PLUGIN");
  tpu_plugin_t* plugin = NULL;
  tpu_status_t s = tpu_plugin_load(path, &plugin);
  CHECK_EQ(tpu_status_code(s), TPU_STATUS_NOT_FOUND);
  CHECK_STR_CONTAINS(tpu_status_message(s), "/nonexistent/override_pjrt.so");
  tpu_status_free(s);

  /* And pointing it at the real plugin loads that. */
  setenv("TORCHTPU_PJRT_PLUGIN", TPU_DEFAULT_PLUGIN_PATH, 1);
  CHECK_OK(tpu_plugin_resolve_path("/nonexistent/fallback.so", path, sizeof path));
  unsetenv("TORCHTPU_PJRT_PLUGIN");
  CHECK_OK(tpu_plugin_load(path, &plugin));
  CHECK(tpu_plugin_attribute(plugin, "xla_version")[0] != '\0');
  tpu_plugin_release(plugin);
}

static void test_error_code_mapping(void) {
  CHECK_EQ(tpu_pjrt_code_to_status_code(PJRT_Error_Code_INVALID_ARGUMENT),
           TPU_STATUS_INVALID_ARGUMENT);
  CHECK_EQ(tpu_pjrt_code_to_status_code(PJRT_Error_Code_NOT_FOUND),
           TPU_STATUS_NOT_FOUND);
  CHECK_EQ(tpu_pjrt_code_to_status_code(PJRT_Error_Code_UNIMPLEMENTED),
           TPU_STATUS_UNIMPLEMENTED);
  CHECK_EQ(tpu_pjrt_code_to_status_code(PJRT_Error_Code_RESOURCE_EXHAUSTED),
           TPU_STATUS_RESOURCE_EXHAUSTED);
  CHECK_EQ(tpu_pjrt_code_to_status_code(PJRT_Error_Code_DEADLINE_EXCEEDED),
           TPU_STATUS_UNAVAILABLE);
  CHECK_EQ(tpu_pjrt_code_to_status_code(PJRT_Error_Code_DATA_LOSS),
           TPU_STATUS_INTERNAL);
  CHECK_EQ(tpu_pjrt_code_to_status_code(PJRT_Error_Code_OK),
           TPU_STATUS_INTERNAL);
}

/* A table that ends before a slot reports that slot as missing. */
static void test_slot_check(void) {
  tpu_plugin_t* plugin = test_plugin();
  CHECK(plugin != NULL);
  PJRT_Api shortened = *plugin->api;
  CHECK(TPU_PJRT_HAS_SLOT(&shortened, PJRT_Executable_OutputDimensions));
  shortened.struct_size = offsetof(PJRT_Api, PJRT_Executable_OutputDimensions);
  CHECK(!TPU_PJRT_HAS_SLOT(&shortened, PJRT_Executable_OutputDimensions));
  CHECK(TPU_PJRT_HAS_SLOT(&shortened, PJRT_Executable_OutputElementTypes));
  shortened.PJRT_Executable_OutputElementTypes = NULL;
  CHECK(!TPU_PJRT_HAS_SLOT(&shortened, PJRT_Executable_OutputElementTypes));
  TPU_PJRT_ARGS(PJRT_Executable_OutputDimensions_Args, args);
  tpu_status_t s =
      TPU_PJRT_CALL(&shortened, PJRT_Executable_OutputDimensions, &args);
  CHECK_EQ(tpu_status_code(s), TPU_STATUS_UNIMPLEMENTED);
  CHECK_STR_CONTAINS(tpu_status_message(s), "PJRT_Executable_OutputDimensions");
  tpu_status_free(s);
}

TPU_TEST_MAIN(TPU_TEST(test_load_default_plugin),
              TPU_TEST(test_load_twice_shares_api), TPU_TEST(test_missing_file),
              TPU_TEST(test_not_a_plugin), TPU_TEST(test_resolve_path_order),
              TPU_TEST(test_override_is_loaded),
              TPU_TEST(test_error_code_mapping), TPU_TEST(test_slot_check))
