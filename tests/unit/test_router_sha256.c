/* tests/unit/test_router_sha256.c — common/sha256 against FIPS 180-4 / NIST test vectors. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/sha256.h"

static void check(const char *msg, const char *want) {
  char hex[65];
  gt_sha256_hex(msg, strlen(msg), hex);
  assert_string_equal(hex, want);
}

static void test_vectors(void **st) {
  (void)st;
  check("", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  check("abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  check("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  check("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu",
        "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
}

/* One million 'a' fed in odd-sized pieces (exercises the partial-block path). */
static void test_million_a(void **st) {
  (void)st;
  char piece[997];
  memset(piece, 'a', sizeof piece);
  gt_sha256_t s;
  gt_sha256_init(&s);
  size_t left = 1000000;
  while (left) {
    size_t n = left < sizeof piece ? left : sizeof piece;
    gt_sha256_update(&s, piece, n);
    left -= n;
  }
  uint8_t d[32];
  gt_sha256_final(&s, d);
  char hex[65];
  for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", d[i]);
  assert_string_equal(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

/* Lengths around the 55/56/64-byte padding boundaries: one-shot equals byte-by-byte. */
static void test_boundaries(void **st) {
  (void)st;
  char buf[130];
  for (int i = 0; i < 130; i++) buf[i] = (char)('A' + i % 26);
  for (size_t n = 50; n <= 130; n++) {
    char a[65], b[65];
    gt_sha256_hex(buf, n, a);
    gt_sha256_t s;
    gt_sha256_init(&s);
    for (size_t i = 0; i < n; i++) gt_sha256_update(&s, buf + i, 1);
    uint8_t d[32];
    gt_sha256_final(&s, d);
    for (int i = 0; i < 32; i++) snprintf(b + 2 * i, 3, "%02x", d[i]);
    assert_string_equal(a, b);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_vectors), cmocka_unit_test(test_million_a),
                                     cmocka_unit_test(test_boundaries)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
