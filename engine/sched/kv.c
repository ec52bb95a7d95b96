/* engine/sched/kv.c — see kv.h. Block states: free (on the free list, ref 0, not hashed), used
 * (ref > 0), cached (ref 0, hashed, on the LRU list). */
#include "engine/sched/kv.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
  int32_t ref;
  int32_t lru_prev, lru_next; /* LRU list of cached blocks (-1 ends) */
  int32_t hnext;              /* hash bucket chain (-1 ends) */
  int32_t next_free;
  int32_t snapshot;           /* -1: none */
  uint8_t hashed;
  uint64_t hash;
} blk_t;

struct kv_pool {
  int n_blocks, bt;
  blk_t *b;
  int32_t *tokens;   /* [n_blocks * bt] tokens of committed blocks (collision check) */
  int32_t *bucket;   /* [n_buckets] first block of each hash bucket */
  int n_buckets;
  int32_t free_head;
  int n_free, n_cached;
  int32_t lru_head, lru_tail; /* head = least recently used */
  kv_evict_fn on_evict;
  void *ud;
  kv_stats_t st;
};

uint64_t kv_hash_block(uint64_t prev, const int32_t *tokens, int n) {
  uint64_t h = prev ^ 0x9e3779b97f4a7c15ULL;
  for (int i = 0; i < n; i++) {
    h ^= (uint32_t)tokens[i];
    h *= 0x100000001b3ULL;
    h ^= h >> 29;
  }
  h *= 0xbf58476d1ce4e5b9ULL;
  return (h ^ (h >> 31)) | 1; /* never 0: 0 means "no previous block" */
}

int kv_pool_create(int n_blocks, int block_tokens, kv_pool_t **out, gt_err_t *err) {
  if (n_blocks <= 0 || block_tokens <= 0) return gt_err_set(err, GT_EINVAL, "kv pool of %d blocks of %d tokens", n_blocks, block_tokens);
  kv_pool_t *p = calloc(1, sizeof *p);
  if (!p) return gt_err_set(err, GT_ENOMEM, "kv pool");
  p->n_blocks = n_blocks;
  p->bt = block_tokens;
  p->n_buckets = 1;
  while (p->n_buckets < n_blocks) p->n_buckets <<= 1;
  p->b = calloc((size_t)n_blocks, sizeof *p->b);
  p->tokens = malloc(sizeof(int32_t) * (size_t)n_blocks * block_tokens);
  p->bucket = malloc(sizeof(int32_t) * (size_t)p->n_buckets);
  if (!p->b || !p->tokens || !p->bucket) {
    kv_pool_free(p);
    return gt_err_set(err, GT_ENOMEM, "kv pool of %d blocks", n_blocks);
  }
  for (int i = 0; i < p->n_buckets; i++) p->bucket[i] = -1;
  for (int i = 0; i < n_blocks; i++) {
    p->b[i] = (blk_t){.ref = 0, .lru_prev = -1, .lru_next = -1, .hnext = -1, .next_free = i + 1 < n_blocks ? i + 1 : -1,
                      .snapshot = -1};
  }
  p->free_head = 0;
  p->n_free = n_blocks;
  p->lru_head = p->lru_tail = -1;
  *out = p;
  return GT_OK;
}

void kv_pool_free(kv_pool_t *p) {
  if (!p) return;
  free(p->b);
  free(p->tokens);
  free(p->bucket);
  free(p);
}

void kv_pool_on_evict(kv_pool_t *p, kv_evict_fn fn, void *ud) {
  p->on_evict = fn;
  p->ud = ud;
}

int kv_block_tokens(const kv_pool_t *p) { return p->bt; }
int kv_n_blocks(const kv_pool_t *p) { return p->n_blocks; }
int kv_n_available(const kv_pool_t *p) { return p->n_free + p->n_cached; }
int kv_n_used(const kv_pool_t *p) { return p->n_blocks - p->n_free - p->n_cached; }
kv_stats_t kv_stats(const kv_pool_t *p) { return p->st; }

static void lru_remove(kv_pool_t *p, int32_t i) {
  blk_t *b = &p->b[i];
  if (b->lru_prev >= 0) p->b[b->lru_prev].lru_next = b->lru_next; else p->lru_head = b->lru_next;
  if (b->lru_next >= 0) p->b[b->lru_next].lru_prev = b->lru_prev; else p->lru_tail = b->lru_prev;
  b->lru_prev = b->lru_next = -1;
  p->n_cached--;
}

static void lru_push(kv_pool_t *p, int32_t i) { /* most recently used at the tail */
  blk_t *b = &p->b[i];
  b->lru_prev = p->lru_tail;
  b->lru_next = -1;
  if (p->lru_tail >= 0) p->b[p->lru_tail].lru_next = i; else p->lru_head = i;
  p->lru_tail = i;
  p->n_cached++;
}

static void drop_snapshot(kv_pool_t *p, int32_t i) {
  if (p->b[i].snapshot >= 0 && p->on_evict) p->on_evict(p->ud, p->b[i].snapshot);
  p->b[i].snapshot = -1;
}

static void unhash(kv_pool_t *p, int32_t i) {
  blk_t *b = &p->b[i];
  int32_t *link = &p->bucket[b->hash & (uint64_t)(p->n_buckets - 1)];
  while (*link >= 0 && *link != i) link = &p->b[*link].hnext;
  if (*link == i) *link = b->hnext;
  b->hnext = -1;
  b->hashed = 0;
  drop_snapshot(p, i);
}

static int32_t lookup(const kv_pool_t *p, uint64_t h, const int32_t *tokens) {
  for (int32_t i = p->bucket[h & (uint64_t)(p->n_buckets - 1)]; i >= 0; i = p->b[i].hnext)
    if (p->b[i].hash == h && !memcmp(p->tokens + (size_t)i * p->bt, tokens, sizeof(int32_t) * (size_t)p->bt)) return i;
  return -1;
}

static void take_ref(kv_pool_t *p, int32_t i) {
  if (p->b[i].ref++ == 0 && p->b[i].hashed) lru_remove(p, i);
}

int kv_match(kv_pool_t *p, uint64_t seed, const int32_t *tokens, int n, int max_blocks, int need_snapshot,
             int32_t *blocks, int *snapshot_id) {
  uint64_t h = seed;
  int m = 0, last_snap = 0, snap = -1;
  p->st.queried_tokens += (uint64_t)n;
  for (; m < max_blocks && (m + 1) * p->bt <= n; m++) {
    const int32_t *tk = tokens + (size_t)m * p->bt;
    h = kv_hash_block(h, tk, p->bt);
    int32_t i = lookup(p, h, tk);
    if (i < 0) break;
    blocks[m] = i;
    if (p->b[i].snapshot >= 0) {
      last_snap = m + 1;
      snap = p->b[i].snapshot;
    }
  }
  if (need_snapshot) m = last_snap;
  for (int k = 0; k < m; k++) take_ref(p, blocks[k]);
  if (snapshot_id) *snapshot_id = need_snapshot && m > 0 ? snap : -1;
  p->st.hit_tokens += (uint64_t)m * p->bt;
  return m;
}

int32_t kv_alloc(kv_pool_t *p) {
  int32_t i;
  if (p->free_head >= 0) {
    i = p->free_head;
    p->free_head = p->b[i].next_free;
    p->n_free--;
  } else if (p->lru_head >= 0) {
    i = p->lru_head;
    lru_remove(p, i);
    unhash(p, i);
    p->st.evictions++;
  } else {
    return -1;
  }
  p->b[i].ref = 1;
  p->b[i].next_free = -1;
  return i;
}

void kv_commit(kv_pool_t *p, int32_t i, uint64_t h, const int32_t *tokens) {
  if (i < 0 || i >= p->n_blocks || p->b[i].hashed || lookup(p, h, tokens) >= 0) return;
  blk_t *b = &p->b[i];
  memcpy(p->tokens + (size_t)i * p->bt, tokens, sizeof(int32_t) * (size_t)p->bt);
  b->hash = h;
  b->hashed = 1;
  int32_t *head = &p->bucket[h & (uint64_t)(p->n_buckets - 1)];
  b->hnext = *head;
  *head = i;
}

int32_t kv_committed_block(const kv_pool_t *p, int32_t i, uint64_t h, const int32_t *tokens) {
  if (i >= 0 && i < p->n_blocks && p->b[i].hashed) return i;
  return lookup(p, h, tokens);
}

void kv_set_snapshot(kv_pool_t *p, int32_t i, int snapshot_id) {
  if (i < 0 || i >= p->n_blocks || !p->b[i].hashed) {
    if (snapshot_id >= 0 && p->on_evict) p->on_evict(p->ud, snapshot_id); /* nowhere to keep it */
    return;
  }
  drop_snapshot(p, i);
  p->b[i].snapshot = snapshot_id;
}

int kv_block_snapshot(const kv_pool_t *p, int32_t i) {
  return i >= 0 && i < p->n_blocks ? p->b[i].snapshot : -1;
}

void kv_ref(kv_pool_t *p, int32_t i) {
  if (i >= 0 && i < p->n_blocks && p->b[i].ref > 0) take_ref(p, i);
}

void kv_release(kv_pool_t *p, int32_t i) {
  if (i < 0 || i >= p->n_blocks || p->b[i].ref <= 0) return;
  if (--p->b[i].ref > 0) return;
  if (p->b[i].hashed) {
    lru_push(p, i);
  } else {
    p->b[i].next_free = p->free_head;
    p->free_head = i;
    p->n_free++;
  }
}
