#include "env.h"

#include "testing.h"

static void test_registry_lookup(void) {
  CHECK(tpu_env_count() >= 3);
  CHECK(tpu_env_find("TORCHTPU_NUM_DEVICES") != NULL);
  CHECK(tpu_env_find("NOT_OURS") == NULL);
  for (size_t i = 0; i < tpu_env_count(); i++) {
    const tpu_env_var_t* v = tpu_env_at(i);
    CHECK(strncmp(v->name, "TORCHTPU_", 9) == 0);
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

TPU_TEST_MAIN(TPU_TEST(test_registry_lookup), TPU_TEST(test_defaults_and_parsing))
