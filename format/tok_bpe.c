/* format/tok_bpe.c — vocabulary and merge hash tables, BPE over token ids, word cache.
 *
 * BPE works on ids, not strings: a word starts as one token per byte (t->byte_id) and the
 * merge table maps an adjacent pair (left id, right id) to (rank, merged id) in O(1). The
 * lowest rank merges first, the leftmost pair on ties (HF tokenizers' order). Short words use
 * a plain scan; long ones (a run of CJK text is one word) a min segment tree over positions, so a
 * word of n bytes costs O(n log n). */
#include <stdlib.h>
#include <string.h>

#include "format/tok_internal.h"
#include "format/tok_utf8.h"

uint64_t tok_hash(const void *p, size_t n) {
  const unsigned char *s = p;
  uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0xFF51AFD7ED558CCDull);
  while (n >= 8) {
    uint64_t v;
    memcpy(&v, s, 8);
    h = (h ^ v) * 0xC4CEB9FE1A85EC53ull;
    h ^= h >> 29;
    s += 8;
    n -= 8;
  }
  uint64_t v = 0;
  memcpy(&v, s, n);
  h = (h ^ v) * 0xC4CEB9FE1A85EC53ull;
  h ^= h >> 32;
  h *= 0xFF51AFD7ED558CCDull;
  h ^= h >> 29;
  return h;
}

static size_t pow2_at_least(size_t n) {
  size_t c = 16;
  while (c < n) c <<= 1;
  return c;
}

int32_t tok_vmap_find(const tok_t *t, const char *s, size_t n) {
  size_t i = tok_hash(s, n) & t->vmap_mask;
  for (;;) {
    uint32_t v = t->vmap[i];
    if (!v) return -1;
    int32_t id = (int32_t)(v - 1);
    if (tok_text_len(t, id) == n && memcmp(t->text + t->text_off[id], s, n) == 0) return id;
    i = (i + 1) & t->vmap_mask;
  }
}

static void vmap_insert(tok_t *t, int32_t id) {
  const char *s = t->text + t->text_off[id];
  size_t n = tok_text_len(t, id);
  if (tok_vmap_find(t, s, n) >= 0) return; /* duplicate text: the first inserted wins */
  size_t i = tok_hash(s, n) & t->vmap_mask;
  while (t->vmap[i]) i = (i + 1) & t->vmap_mask;
  t->vmap[i] = (uint32_t)id + 1;
}

static inline uint64_t pair_key(int32_t a, int32_t b) { return (uint64_t)(uint32_t)a << 32 | (uint32_t)b; }

static inline size_t key_slot(uint64_t k) {
  k ^= k >> 33;
  k *= 0xFF51AFD7ED558CCDull;
  k ^= k >> 33;
  return (size_t)k;
}

static inline const tok_merge_t *merge_find(const tok_t *t, int32_t a, int32_t b) {
  uint64_t k = pair_key(a, b);
  size_t i = key_slot(k) & t->mmap_mask;
  for (;;) {
    const tok_merge_t *m = &t->mmap[i];
    if (m->key == k) return m;
    if (m->key == TOK_EMPTY_KEY) return NULL;
    i = (i + 1) & t->mmap_mask;
  }
}

int tok_bpe_build(tok_t *t, const tok_spec_t *spec, gt_err_t *err) {
  size_t nv = t->n_vocab;
  t->vmap_mask = pow2_at_least(nv * 2) - 1;
  t->vmap = calloc(t->vmap_mask + 1, sizeof *t->vmap);
  if (!t->vmap) return gt_err_set(err, GT_ENOMEM, "tokenizer: out of memory (vocab map)");
  /* normal-like tokens first so that BPE results and tok_vmap_find prefer them */
  for (size_t i = 0; i < nv; i++)
    if (t->type[i] == TOK_TYPE_NORMAL || t->type[i] == TOK_TYPE_UNDEFINED) vmap_insert(t, (int32_t)i);
  for (size_t i = 0; i < nv; i++)
    if (!(t->type[i] == TOK_TYPE_NORMAL || t->type[i] == TOK_TYPE_UNDEFINED)) vmap_insert(t, (int32_t)i);

  for (int b = 0; b < 256; b++) {
    char u[4];
    int l = gt_utf8_put(tok_byte_to_cp((uint8_t)b), u);
    t->byte_id[b] = tok_vmap_find(t, u, (size_t)l);
    if (t->byte_id[b] < 0)
      return gt_err_set(err, GT_EFORMAT, "tokenizer: vocab has no token for byte 0x%02x (\"%.*s\")", b, l, u);
  }

  t->mmap_mask = pow2_at_least(spec->n_merges * 2) - 1;
  t->mmap = malloc((t->mmap_mask + 1) * sizeof *t->mmap);
  if (!t->mmap) return gt_err_set(err, GT_ENOMEM, "tokenizer: out of memory (merge map)");
  for (size_t i = 0; i <= t->mmap_mask; i++) t->mmap[i].key = TOK_EMPTY_KEY;
  char *cat = NULL;
  size_t cat_cap = 0;
  for (size_t r = 0; r < spec->n_merges; r++) {
    const char *m = spec->merges[r];
    size_t ml = spec->merge_lens[r];
    if (!m && ml) return gt_err_set(err, GT_EFORMAT, "tokenizer: merge %zu is NULL", r);
    const char *sp = ml ? memchr(m, ' ', ml) : NULL;
    if (!sp || sp == m || sp == m + ml - 1) {
      free(cat);
      return gt_err_set(err, GT_EFORMAT, "tokenizer: merge %zu \"%.*s\" is not \"left right\"", r,
                        (int)(ml > 80 ? 80 : ml), m ? m : "");
    }
    size_t la = (size_t)(sp - m), lb = ml - la - 1;
    int32_t a = tok_vmap_find(t, m, la), b = tok_vmap_find(t, sp + 1, lb);
    if (la + lb > cat_cap) {
      char *nc = realloc(cat, la + lb);
      if (!nc) {
        free(cat);
        return gt_err_set(err, GT_ENOMEM, "tokenizer: out of memory");
      }
      cat = nc;
      cat_cap = la + lb;
    }
    memcpy(cat, m, la);
    memcpy(cat + la, sp + 1, lb);
    int32_t res = tok_vmap_find(t, cat, la + lb);
    if (a < 0 || b < 0 || res < 0) continue; /* can never apply (or HF would reject the file) */
    uint64_t k = pair_key(a, b);
    size_t i = key_slot(k) & t->mmap_mask;
    while (t->mmap[i].key != TOK_EMPTY_KEY && t->mmap[i].key != k) i = (i + 1) & t->mmap_mask;
    if (t->mmap[i].key == k) continue; /* duplicate pair: the lower rank stays */
    t->mmap[i].key = k;
    t->mmap[i].rank = (int32_t)(r > INT32_MAX ? INT32_MAX : r);
    t->mmap[i].result = res;
    t->n_merges++;
  }
  free(cat);
  return GT_OK;
}

int tok_ids_push(int32_t **ids, size_t *n, size_t *cap, int32_t v) {
  if (*n == *cap) {
    size_t nc = *cap ? *cap * 2 : 64;
    int32_t *ni = realloc(*ids, nc * sizeof *ni);
    if (!ni) return GT_ENOMEM;
    *ids = ni;
    *cap = nc;
  }
  (*ids)[(*n)++] = v;
  return GT_OK;
}

/* Long words: a min segment tree over pair positions. Leaf i holds the key of the pair that
 * starts at symbol i, rank << 32 | i (TREE_NONE when there is none), so the root is the lowest
 * rank and, on ties, the leftmost pair. A merge rewrites three leaves (the merged pair's, its
 * left neighbour's and the dead right symbol's) and their ancestors up to where the minimum
 * stops changing: O(log n) per merge, with no stale entries, and since consecutive merges lie
 * close together the paths they touch stay in cache. Iterative layout: node k has children 2k
 * and 2k+1, leaves at n + i, root at 1 (valid for any n >= 2). */
#define TREE_NONE UINT64_MAX

static uint64_t pair_key_at(const tok_t *t, const tok_bpe_work_t *w, int32_t l) {
  if (l < 0) return TREE_NONE;
  int32_t r = w->next[l];
  if (r < 0) return TREE_NONE;
  const tok_merge_t *m = merge_find(t, w->id[l], w->id[r]);
  return m ? (uint64_t)(uint32_t)m->rank << 32 | (uint32_t)l : TREE_NONE;
}

static void tree_set(uint64_t *tree, size_t n, size_t i, uint64_t key) {
  size_t k = n + i;
  tree[k] = key;
  for (k >>= 1; k >= 1; k >>= 1) {
    uint64_t a = tree[2 * k], b = tree[2 * k + 1], v = a < b ? a : b;
    if (tree[k] == v) break;
    tree[k] = v;
  }
}

#define BPE_SCAN_MAX 24 /* words up to this many bytes use the quadratic scan */

/* BPE of word[0..n) (n >= 1): afterwards the tokens are w->id[i] along i = 0, w->next[i], ...
 * Returns GT_OK or GT_ENOMEM. */
static int bpe_run(const tok_t *t, tok_bpe_work_t *w, const unsigned char *word, size_t n) {
  if (n > w->cap) {
    size_t nc = n < 64 ? 64 : n;
    int32_t *a = realloc(w->id, nc * sizeof *a);
    if (!a) return GT_ENOMEM;
    w->id = a;
    a = realloc(w->next, nc * sizeof *a);
    if (!a) return GT_ENOMEM;
    w->next = a;
    a = realloc(w->prev, nc * sizeof *a);
    if (!a) return GT_ENOMEM;
    w->prev = a;
    w->cap = nc;
  }
  for (size_t i = 0; i < n; i++) {
    w->id[i] = t->byte_id[word[i]];
    w->next[i] = i + 1 < n ? (int32_t)(i + 1) : -1;
    w->prev[i] = (int32_t)i - 1;
  }
  if (n <= BPE_SCAN_MAX) {
    for (;;) {
      int32_t best = -1, best_rank = INT32_MAX, best_res = -1;
      for (int32_t i = 0; i >= 0 && w->next[i] >= 0; i = w->next[i]) {
        const tok_merge_t *m = merge_find(t, w->id[i], w->id[w->next[i]]);
        if (m && m->rank < best_rank) {
          best = i;
          best_rank = m->rank;
          best_res = m->result;
        }
      }
      if (best < 0) break;
      int32_t r = w->next[best];
      w->id[best] = best_res;
      w->next[best] = w->next[r];
      if (w->next[r] >= 0) w->prev[w->next[r]] = best;
    }
    return GT_OK;
  }
  if (2 * n > w->tree_cap) {
    uint64_t *nt = realloc(w->tree, 2 * n * sizeof *nt);
    if (!nt) return GT_ENOMEM;
    w->tree = nt;
    w->tree_cap = 2 * n;
  }
  uint64_t *tree = w->tree;
  for (size_t i = 0; i < n; i++) tree[n + i] = pair_key_at(t, w, (int32_t)i);
  for (size_t k = n - 1; k >= 1; k--) tree[k] = tree[2 * k] < tree[2 * k + 1] ? tree[2 * k] : tree[2 * k + 1];
  while (tree[1] != TREE_NONE) {
    int32_t l = (int32_t)(uint32_t)tree[1], r = w->next[l];
    const tok_merge_t *m = merge_find(t, w->id[l], w->id[r]);
    w->id[l] = m->result;
    w->id[r] = -1; /* dead */
    w->next[l] = w->next[r];
    if (w->next[r] >= 0) w->prev[w->next[r]] = l;
    tree_set(tree, n, (size_t)r, TREE_NONE);
    tree_set(tree, n, (size_t)l, pair_key_at(t, w, l));
    if (w->prev[l] >= 0) tree_set(tree, n, (size_t)w->prev[l], pair_key_at(t, w, w->prev[l]));
  }
  return GT_OK;
}

int tok_bpe_word(const tok_t *t, tok_bpe_work_t *w, const char *word, size_t n, int32_t **ids, size_t *nids,
                 size_t *cap, gt_err_t *err) {
  if (n == 0) return GT_OK;
  uint64_t h = 0;
  tok_cache_slot_t *slot = NULL;
  if (n <= TOK_CACHE_WORD) {
    h = tok_hash(word, n);
    slot = &t->cache[h & (TOK_CACHE_SLOTS - 1)];
    pthread_mutex_t *mu = (pthread_mutex_t *)&t->cache_mu;
    if (pthread_mutex_trylock(mu) == 0) {
      int hit = slot->wlen == n && slot->hash == h && memcmp(slot->word, word, n) == 0;
      int32_t tmp[TOK_CACHE_IDS];
      size_t k = hit ? slot->nids : 0;
      if (hit) memcpy(tmp, slot->ids, k * sizeof *tmp);
      pthread_mutex_unlock(mu);
      if (hit) {
        for (size_t i = 0; i < k; i++)
          if (tok_ids_push(ids, nids, cap, tmp[i]) != GT_OK) return gt_err_set(err, GT_ENOMEM, "tokenizer: out of memory");
        return GT_OK;
      }
    }
  }
  if (bpe_run(t, w, (const unsigned char *)word, n) != GT_OK)
    return gt_err_set(err, GT_ENOMEM, "tokenizer: out of memory (BPE of a %zu-byte word)", n);
  size_t first = *nids;
  for (int32_t i = 0; i >= 0; i = w->next[i])
    if (tok_ids_push(ids, nids, cap, w->id[i]) != GT_OK) return gt_err_set(err, GT_ENOMEM, "tokenizer: out of memory");
  size_t k = *nids - first;
  if (slot && k <= TOK_CACHE_IDS) {
    pthread_mutex_t *mu = (pthread_mutex_t *)&t->cache_mu;
    if (pthread_mutex_trylock(mu) == 0) {
      slot->hash = h;
      slot->wlen = (uint8_t)n;
      slot->nids = (uint8_t)k;
      memcpy(slot->word, word, n);
      memcpy(slot->ids, *ids + first, k * sizeof(int32_t));
      pthread_mutex_unlock(mu);
    }
  }
  return GT_OK;
}

void tok_bpe_work_free(tok_bpe_work_t *w) {
  free(w->id);
  free(w->next);
  free(w->prev);
  free(w->tree);
  memset(w, 0, sizeof *w);
}
