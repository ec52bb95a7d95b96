/* engine/sched/kv.h — the paged KV block manager with automatic prefix caching (host bookkeeping;
 * the K/V data itself lives in the backend's pool, addressed by the block ids handed out here).
 *
 * Blocks hold `block_tokens` tokens. A block that is full is "committed" under a chained hash
 * h_i = H(h_{i-1}, tokens of block i), so a later sequence whose prompt starts with the same
 * tokens reuses the blocks (reference counted) instead of recomputing them. Unreferenced
 * committed blocks stay cached and are evicted least-recently-used when a block is needed.
 *
 * Hybrid models (recurrent state) can only reuse a prefix where a state snapshot exists: a
 * committed block may carry a snapshot id (kv_set_snapshot); kv_match with `need_snapshot`
 * stops at the longest cached chain whose last block has one. Evicting such a block reports
 * the snapshot id so its owner can free it (kv_pool_t.on_evict).
 *
 * Not thread-safe: owned by the scheduler thread. */
#ifndef GANTRY_ENGINE_KV_H
#define GANTRY_ENGINE_KV_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

typedef struct kv_pool kv_pool_t;

/* Called when a block carrying a snapshot is evicted or its snapshot is dropped. */
typedef void (*kv_evict_fn)(void *ud, int snapshot_id);

int kv_pool_create(int n_blocks, int block_tokens, kv_pool_t **out, gt_err_t *err);
void kv_pool_free(kv_pool_t *p);
void kv_pool_on_evict(kv_pool_t *p, kv_evict_fn fn, void *ud);

int kv_block_tokens(const kv_pool_t *p);
int kv_n_blocks(const kv_pool_t *p);
/* Blocks that can be handed out now: free ones plus cached unreferenced ones. */
int kv_n_available(const kv_pool_t *p);
/* Blocks referenced by at least one sequence. */
int kv_n_used(const kv_pool_t *p);

/* Hash of a full block's tokens chained on the previous block's hash (0 for the first). */
uint64_t kv_hash_block(uint64_t prev, const int32_t *tokens, int n);

/* Longest cached prefix of tokens[0..n) on the hash chain seeded with seed (a request's cache
 * salt; 0 = unsalted): fills blocks[] with the matched block ids (each gets a
 * reference) and returns the number of blocks matched. At most max_blocks are matched. With
 * need_snapshot, the match is cut back to the last block that has a snapshot and
 * *snapshot_id is set (-1 when none). Counts queried/hit tokens for the statistics. */
int kv_match(kv_pool_t *p, uint64_t seed, const int32_t *tokens, int n, int max_blocks, int need_snapshot,
             int32_t *blocks, int *snapshot_id);

/* A fresh block with one reference, evicting the least recently used cached block if needed;
 * -1 when every block is referenced. */
int32_t kv_alloc(kv_pool_t *p);
/* Registers a full block under hash h (chained, see kv_hash_block) with its tokens. If another
 * block already holds h, nothing changes (the caller keeps its private copy). */
void kv_commit(kv_pool_t *p, int32_t block, uint64_t h, const int32_t *tokens);
/* Attaches a snapshot id to a committed block (replacing and reporting a previous one). */
void kv_set_snapshot(kv_pool_t *p, int32_t block, int snapshot_id);
/* The snapshot id a block carries (kv_set_snapshot), or -1. */
int kv_block_snapshot(const kv_pool_t *p, int32_t block);
/* The committed block that holds a block's content: `block` when it was committed, else the block
 * committed earlier with the same chain hash h and tokens (kv_commit keeps the first of two equal
 * blocks; a request recomputing a cached prefix holds an uncommitted copy); -1 when none. */
int32_t kv_committed_block(const kv_pool_t *p, int32_t block, uint64_t h, const int32_t *tokens);
/* One more reference on a block that is referenced already (a forked sequence shares it). */
void kv_ref(kv_pool_t *p, int32_t block);
/* Drops one reference; an unreferenced committed block stays cached (LRU), others are freed. */
void kv_release(kv_pool_t *p, int32_t block);

typedef struct {
  uint64_t queried_tokens; /* prompt tokens looked up */
  uint64_t hit_tokens;     /* of which found cached */
  uint64_t evictions;
} kv_stats_t;
kv_stats_t kv_stats(const kv_pool_t *p);

#endif
