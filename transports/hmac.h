/*
 * SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104), small and dependency
 * free: the connection greetings prove the job's secret with them
 * (transports/sock_gate.c) instead of sending it.
 */
#ifndef BRAID_TRANSPORTS_HMAC_H
#define BRAID_TRANSPORTS_HMAC_H

#include <stddef.h>
#include <stdint.h>

#define SHA256_BYTES 32
#define SHA256_BLOCK 64

typedef struct sha256_ctx {
  uint32_t h[8];
  uint64_t total; /* bytes hashed so far */
  size_t used;    /* bytes waiting in buf */
  uint8_t buf[SHA256_BLOCK];
} sha256_ctx;

void sha256_init(sha256_ctx *c);
void sha256_update(sha256_ctx *c, const void *data, size_t len);
void sha256_final(sha256_ctx *c, uint8_t out[SHA256_BYTES]);

typedef struct hmac_ctx {
  sha256_ctx inner;
  uint8_t okey[SHA256_BLOCK]; /* key ^ opad */
} hmac_ctx;

/* Any key length (a key longer than a block is hashed first). */
void hmac_init(hmac_ctx *c, const void *key, size_t key_len);
void hmac_update(hmac_ctx *c, const void *data, size_t len);
void hmac_final(hmac_ctx *c, uint8_t out[SHA256_BYTES]);
void hmac_sha256(const void *key, size_t key_len, const void *data, size_t len,
                 uint8_t out[SHA256_BYTES]);

/* 1 when a and b hold the same len bytes, in time that does not depend on
 * where they differ. */
int hmac_equal(const uint8_t *a, const uint8_t *b, size_t len);

#endif
