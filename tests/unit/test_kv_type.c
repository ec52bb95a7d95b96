/* tests/unit/test_kv_type.c — the KV element type contract on the CPU backend (engine/backend/backend.h
 * kv_set_type): the pools stay fp32 (be_kv_type F32, be_kv_token_bytes 8 per element pair, so
 * model_kv_bytes_per_token is what the pools take); kv_set_type(BF16) makes kv_store (and
 * attn_qk_prep, which stores through it) keep each K and V value rounded to bf16 (nearest even,
 * dt_f32_to_bf16): attention then equals attention on an fp32 backend given the rounded values,
 * bit for bit; other types are refused; F32 turns the rounding off again. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "engine/backend/backend.h"

static uint32_t g_seed = 0x1234567u;
static float frand(void) { /* uniform in [-1, 1) */
  g_seed = g_seed * 1664525u + 1013904223u;
  return (float)((g_seed >> 8) & 0xffffff) / (float)(1 << 23) - 1.0f;
}

static void test_cpu_kv_type(void **st) {
  gt_err_t err = {0};
  be_t *r = NULL, *p = NULL; /* r rounds, p gets pre-rounded values */
  assert_int_equal(be_cpu_create(1, &r, &err), 0);
  assert_int_equal(be_cpu_create(1, &p, &err), 0);
  assert_int_equal(be_kv_type(r), GT_TYPE_F32);
  assert_int_equal(be_kv_set_type(r, GT_TYPE_Q8_0), GT_EUNSUPPORTED);
  assert_int_equal(be_kv_set_type(r, GT_TYPE_BF16), 0);
  assert_int_equal(be_kv_type(r), GT_TYPE_F32); /* stored in fp32 */
  assert_int_equal(be_kv_token_bytes(r, 256), 2 * 4 * 256);

  const int n_head = 4, n_kv = 2, hd = 32, kvd = n_kv * hd, bt = 16, n = 40;
  assert_int_equal(r->ops->kv_init(r, 1, 4, bt, kvd), 0);
  assert_int_equal(p->ops->kv_init(p, 1, 4, bt, kvd), 0);
  int32_t tok[40], pos[40], out[40], first = 0, ntok = n, table[4] = {2, 0, 3, 1};
  for (int i = 0; i < n; i++) tok[i] = 0, pos[i] = i, out[i] = i;
  be_batch_t b = {.n_tok = n, .n_seq = 1, .tok = tok, .pos = pos, .seq_first = &first, .seq_ntok = &ntok,
                  .block_table = table, .max_blocks = 4, .n_out = n, .out_tok = out};
  assert_int_equal(r->ops->set_batch(r, &b), 0);
  assert_int_equal(p->ops->set_batch(p, &b), 0);
  /* CPU backend memory is host memory: plain buffers serve both backends */
  float *k = malloc(sizeof(float) * n * kvd), *v = malloc(sizeof(float) * n * kvd), *kr = malloc(sizeof(float) * n * kvd),
        *vr = malloc(sizeof(float) * n * kvd), *q = malloc(sizeof(float) * n * n_head * hd),
        *o1 = malloc(sizeof(float) * n * n_head * hd), *o2 = malloc(sizeof(float) * n * n_head * hd);
  int differs = 0;
  for (int i = 0; i < n * kvd; i++) {
    k[i] = frand(), v[i] = frand();
    kr[i] = dt_bf16_to_f32(dt_f32_to_bf16(k[i]));
    vr[i] = dt_bf16_to_f32(dt_f32_to_bf16(v[i]));
    differs |= kr[i] != k[i];
  }
  assert_true(differs); /* the rounding is visible in the inputs */
  for (int i = 0; i < n * n_head * hd; i++) q[i] = frand();
  r->ops->kv_store(r, 0, k, v);
  p->ops->kv_store(p, 0, kr, vr);
  r->ops->attention(r, 0, q, o1, n_head, n_kv, hd, 0.2f);
  p->ops->attention(p, 0, q, o2, n_head, n_kv, hd, 0.2f);
  assert_int_equal(r->ops->sync(r), 0);
  assert_int_equal(p->ops->sync(p), 0);
  assert_memory_equal(o1, o2, sizeof(float) * n * n_head * hd);

  /* F32 again: unrounded values, so the outputs now differ from the rounded ones */
  assert_int_equal(be_kv_set_type(r, GT_TYPE_F32), 0);
  r->ops->kv_store(r, 0, k, v);
  r->ops->attention(r, 0, q, o1, n_head, n_kv, hd, 0.2f);
  assert_int_equal(r->ops->sync(r), 0);
  assert_true(memcmp(o1, o2, sizeof(float) * n * n_head * hd) != 0);
  free(k), free(v), free(kr), free(vr), free(q), free(o1), free(o2);
  be_destroy(r);
  be_destroy(p);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_cpu_kv_type)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
