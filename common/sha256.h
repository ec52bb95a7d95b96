/* common/sha256.h — SHA-256 (FIPS 180-4), used to store API keys as digests. */
#ifndef GANTRY_COMMON_SHA256_H
#define GANTRY_COMMON_SHA256_H

#include <stddef.h>
#include <stdint.h>

typedef struct gt_sha256 {
  uint32_t h[8];
  uint64_t nbytes;   /* message bytes absorbed so far */
  uint8_t buf[64];   /* partial block */
  size_t nbuf;
} gt_sha256_t;

void gt_sha256_init(gt_sha256_t *s);
void gt_sha256_update(gt_sha256_t *s, const void *data, size_t n);
/* Writes the 32-byte digest; s must be re-initialized before reuse. */
void gt_sha256_final(gt_sha256_t *s, uint8_t out[32]);
/* One-shot digest of data[0..n) as 64 lower-case hex chars + NUL into hex[65]. */
void gt_sha256_hex(const void *data, size_t n, char hex[65]);

#endif
