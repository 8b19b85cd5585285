/* The hashes: FNV-1a keeps the values disk cache keys were made with (its
 * offset basis is not the published one, see hash.h), the string form
 * agrees with the byte form, XXH64 is the published one, and the fast key
 * hash covers every byte and the length. */
#include "hash.h"

#include "testing.h"

static void test_fnv1a_values_are_pinned(void) {
  CHECK_EQ(tpu_hash_fnv1a("", 0), 0x14650fb0739d0383ull);
  CHECK_EQ(tpu_hash_fnv1a("a", 1), 0x44bd8ad473cd9906ull);
  CHECK_EQ(tpu_hash_fnv1a("foobar", 6), 0x88fad7c0a8ff07f2ull);
  CHECK_EQ(tpu_hash_fnv1a_str("foobar"), 0x88fad7c0a8ff07f2ull);
  CHECK_EQ(tpu_hash_fnv1a_str(""), tpu_hash_fnv1a("", 0));
}

/* The published XXH64 values (the empty input, the tail paths, and a
 * 39-byte input through the 32-byte stripes), and a seed changes it. */
static void test_xxh64_is_the_public_algorithm(void) {
  const char kLong[] = "Nobody inspects the spammish repetition";
  CHECK_EQ(tpu_hash_xxh64("", 0, 0), 0xef46db3751d8e999ull);
  CHECK_EQ(tpu_hash_xxh64("a", 1, 0), 0xd24ec4f1a98c6e5bull);
  CHECK_EQ(tpu_hash_xxh64("abc", 3, 0), 0x44bc2cf5ad770999ull);
  CHECK_EQ(tpu_hash_xxh64(kLong, sizeof kLong - 1, 0), 0xfbcea83c8a378bf1ull);
  CHECK_EQ(tpu_hash_xxh64("abc", 3, 1), 0xbea9ca8199328908ull);
}

static void test_bytes_covers_every_byte_and_the_length(void) {
  unsigned char key[37] = {0};
  uint64_t zero = tpu_hash_bytes(key, sizeof key);
  CHECK_EQ(tpu_hash_bytes(key, sizeof key), zero); /* deterministic */
  for (size_t i = 0; i < sizeof key; i++) {  /* the words and the tail */
    key[i] = 1;
    CHECK(tpu_hash_bytes(key, sizeof key) != zero);
    key[i] = 0;
  }
  CHECK(tpu_hash_bytes(key, 36) != zero);
  CHECK(tpu_hash_bytes(key, 0) != tpu_hash_bytes(key, 8));
}

TPU_TEST_MAIN(TPU_TEST(test_fnv1a_values_are_pinned), TPU_TEST(test_xxh64_is_the_public_algorithm),
              TPU_TEST(test_bytes_covers_every_byte_and_the_length))
