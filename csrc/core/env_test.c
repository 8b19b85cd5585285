#include "env.h"

#include <stdbool.h>

#include "testing.h"

static void test_registry_lookup(void) {
  CHECK(tpu_env_count() >= 3);
  CHECK(tpu_env_find("TORCHTPU_NUM_DEVICES") != NULL);
  CHECK(tpu_env_find("NOT_OURS") == NULL);
  CHECK(tpu_env_find("LOCAL_RANK") != NULL && tpu_env_find("XLA_FLAGS") != NULL);
  for (size_t i = 0; i < tpu_env_count(); i++) {
    const tpu_env_var_t* v = tpu_env_at(i);
    /* ours are TORCHTPU_*; other programs' are marked external */
    CHECK(strncmp(v->name, "TORCHTPU_", 9) == 0 || strcmp(v->stability, "external") == 0);
    CHECK(strcmp(v->stability, "stable") == 0 || strcmp(v->stability, "experimental") == 0 ||
          strcmp(v->stability, "external") == 0);
    CHECK(strlen(v->meaning) > 10);
  }
}

static void test_defaults_and_parsing(void) {
  unsetenv("TORCHTPU_NUM_DEVICES");
  CHECK_EQ(tpu_env_get_int("TORCHTPU_NUM_DEVICES", -1), 1);
  setenv("TORCHTPU_NUM_DEVICES", "4", 1);
  CHECK_EQ(tpu_env_get_int("TORCHTPU_NUM_DEVICES", -1), 4);
  setenv("TORCHTPU_NUM_DEVICES", "4x", 1);
  CHECK_EQ(tpu_env_get_int("TORCHTPU_NUM_DEVICES", -1), -1);
  setenv("TORCHTPU_NUM_DEVICES", "", 1);
  CHECK_EQ(tpu_env_get_int("TORCHTPU_NUM_DEVICES", -1), 1);
  unsetenv("TORCHTPU_NUM_DEVICES");
  CHECK(strcmp(tpu_env_get("TORCHTPU_FALLBACK"), "warn") == 0);
  CHECK(strcmp(tpu_env_get("UNREGISTERED"), "") == 0);
}

/* Parses TORCHTPU_VISIBLE_DEVICES=text; returns the count, or -1 after
 * checking the error names the variable and the value. */
static int parse_visible(const char* text, int* indices) {
  setenv("TORCHTPU_VISIBLE_DEVICES", text, 1);
  int count = -2;
  tpu_status_t s =
      tpu_env_get_index_list("TORCHTPU_VISIBLE_DEVICES", 8, 4, indices, &count);
  unsetenv("TORCHTPU_VISIBLE_DEVICES");
  if (!s) return count;
  const char* message = tpu_status_message(s);
  bool named = tpu_status_code(s) == TPU_STATUS_INVALID_ARGUMENT &&
               strstr(message, "TORCHTPU_VISIBLE_DEVICES") &&
               strstr(message, text) && count == 0;
  if (!named) fprintf(stderr, "unexpected error for '%s': %s\n", text, message);
  tpu_status_free(s);
  return named ? -1 : -3;
}

static void test_index_list(void) {
  int idx[4];
  int count = -1;
  unsetenv("TORCHTPU_VISIBLE_DEVICES");
  CHECK_OK(tpu_env_get_index_list("TORCHTPU_VISIBLE_DEVICES", 8, 4, idx, &count));
  CHECK_EQ(count, 0);
  CHECK_EQ(parse_visible(" ", idx), 0);
  CHECK_EQ(parse_visible("2,3", idx), 2);
  CHECK(idx[0] == 2 && idx[1] == 3);
  CHECK_EQ(parse_visible(" 7 , 0,5", idx), 3); /* order kept, spaces ok */
  CHECK(idx[0] == 7 && idx[1] == 0 && idx[2] == 5);
  static const char* bad[] = {"a", "1,x", "1.5", "1,", ",1", "1,,2", "1 2",
                              "0x1", "-1", "8", "99999999999999999999",
                              "1,1", "0,1,2,3,4"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    CHECK_EQ(parse_visible(bad[i], idx), -1);
}

static void test_log_items(void) {
  setenv("TORCHTPU_LOG", "recompiles, programs", 1);
  CHECK(tpu_env_log_enabled("programs"));
  CHECK(tpu_env_log_enabled("recompiles"));
  CHECK(!tpu_env_log_enabled("program"));
  CHECK(!tpu_env_log_enabled("compiles"));
  setenv("TORCHTPU_LOG", "programsx", 1);
  CHECK(!tpu_env_log_enabled("programs"));
  unsetenv("TORCHTPU_LOG");
  CHECK(!tpu_env_log_enabled("programs"));
}

TPU_TEST_MAIN(TPU_TEST(test_registry_lookup), TPU_TEST(test_log_items), TPU_TEST(test_defaults_and_parsing),
              TPU_TEST(test_index_list))
