/* engine/sched/spec_index.c — see spec_index.h. */
#include "engine/sched/spec_index.h"

#include <stdlib.h>
#include <string.h>

#define IX_MIN_BITS 10
#define IX_MAX_BITS 26 /* 256 MiB of heads at most: past that, longer chains */

static uint64_t gram_hash(const int32_t *t, int g, uint64_t tag) {
  uint64_t h = 0x9e3779b97f4a7c15ull * (uint64_t)(g + 1) ^ tag * 0xd6e8feb86659fd93ull;
  for (int i = 0; i < g; i++) {
    h ^= (uint32_t)t[i];
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 32;
  }
  return h * 0xc4ceb9fe1a85ec53ull;
}

/* The bucket of a gram of g tokens t with tag (0 untagged): each tag's grams spread apart, so that a
 * walk for one tag never goes through another tag's many equal grams. */
static uint32_t bucket(const spec_index_t *x, const int32_t *t, int g, uint64_t tag) {
  return (uint32_t)(gram_hash(t, g, tag) >> (64 - x->bits));
}

void spec_index_free(spec_index_t *x) {
  free(x->head);
  free(x->prev);
  memset(x, 0, sizeof *x);
}

void spec_index_reset(spec_index_t *x, int min_n, int max_n) {
  if (x->head) memset(x->head, 0, sizeof(int32_t) << x->bits);
  x->min_n = min_n;
  x->max_n = max_n;
  x->n_g = max_n - min_n + 1;
  x->n_in = 0;
}

/* Links the grams ending at e (those inside toks, without a negative id, and not followed by one
 * before upto: no token to draft) into their chains. */
static void insert_at(spec_index_t *x, const int32_t *toks, const uint64_t *tags, int e, int upto) {
  if (e + 1 < upto && toks[e + 1] < 0) return;
  int clean = 0; /* toks[e - clean + 1 .. e] hold no negative id */
  while (clean < x->max_n && clean <= e && toks[e - clean] >= 0) clean++;
  for (int g = x->min_n; g <= clean; g++) {
    const int32_t id = e * x->n_g + (g - x->min_n);
    const uint32_t b = bucket(x, toks + e - g + 1, g, tags ? tags[e] : 0);
    x->prev[id] = x->head[b];
    x->head[b] = id + 1;
  }
}

/* A table of 1 << bits buckets holding the grams ending before position upto. */
static int rebuild(spec_index_t *x, const int32_t *toks, const uint64_t *tags, int upto, int bits) {
  int32_t *h = realloc(x->head, sizeof(int32_t) << bits);
  if (!h) return -1;
  x->head = h;
  x->bits = bits;
  memset(h, 0, sizeof(int32_t) << bits);
  for (int e = 0; e < upto; e++) insert_at(x, toks, tags, e, upto);
  return 0;
}

static int fail(spec_index_t *x) {
  spec_index_reset(x, x->min_n, x->max_n);
  return -1;
}

/* prev for `need` entries and a table of at least as many buckets (what is in rehashed from toks). */
static int grow(spec_index_t *x, const int32_t *toks, const uint64_t *tags, int need) {
  if (need > x->cap_e) {
    int cap = x->cap_e > 0 ? x->cap_e : 1024;
    while (cap < need) cap = cap > INT32_MAX / 2 ? need : cap * 2;
    int32_t *p = realloc(x->prev, sizeof(int32_t) * (size_t)cap);
    if (!p) return fail(x);
    x->prev = p;
    x->cap_e = cap;
  }
  /* at most one entry per bucket on average: grow (and rehash what is in) first */
  int bits = x->head ? x->bits : IX_MIN_BITS;
  while (bits < IX_MAX_BITS && ((int64_t)1 << bits) < need) bits++;
  if ((!x->head || bits != x->bits) && rebuild(x, toks, tags, x->n_in, bits)) return fail(x);
  return 0;
}

int spec_index_reserve(spec_index_t *x, int n) {
  if ((int64_t)n * x->n_g > INT32_MAX - 1) return -1;
  return grow(x, NULL, NULL, n * x->n_g); /* n_in is 0 after a reset: nothing to rehash */
}

int spec_index_extend(spec_index_t *x, const int32_t *toks, const uint64_t *tags, int upto) {
  if (upto <= x->n_in) return 0;
  if ((int64_t)upto * x->n_g > INT32_MAX - 1) return fail(x);
  if (grow(x, toks, tags, upto * x->n_g)) return -1;
  for (int e = x->n_in; e < upto; e++) insert_at(x, toks, tags, e, upto);
  x->n_in = upto;
  return 0;
}

int spec_index_find(const spec_index_t *x, const int32_t *toks, const uint64_t *tags, uint64_t tag, const int32_t *key,
                    int n_key, int max_g, int *end) {
  if (!x->head || x->n_in == 0) return 0;
  int g = x->max_n < max_g ? x->max_n : max_g;
  if (g > n_key) g = n_key;
  for (; g >= x->min_n; g--) {
    const int32_t *k = key + n_key - g;
    for (int32_t id = x->head[bucket(x, k, g, tags ? tag : 0)]; id; id = x->prev[id - 1]) {
      const int e = (id - 1) / x->n_g;
      if ((id - 1) % x->n_g != g - x->min_n || (tags && tags[e] != tag) ||
          memcmp(toks + e - g + 1, k, sizeof(int32_t) * (size_t)g) != 0)
        continue;
      *end = e;
      return g;
    }
  }
  return 0;
}

int spec_index_draft(spec_index_t *x, const int32_t *toks, int n, int k, int min_n, int max_n, int32_t *out, int *g) {
  if (g) *g = 0;
  if (k <= 0 || min_n <= 0 || max_n < min_n) return 0;
  if (x->min_n != min_n || x->max_n != max_n || x->n_in > n - 1) spec_index_reset(x, min_n, max_n);
  /* an occurrence needs one token after it: grams ending at n - 2 at the latest */
  if (n >= 2 && spec_index_extend(x, toks, NULL, n - 1)) return -1;
  int e = 0;
  const int len = spec_index_find(x, toks, NULL, 0, toks, n, n - 1, &e);
  if (g) *g = len;
  if (!len) return 0;
  int m = n - 1 - e;
  if (m > k) m = k;
  memcpy(out, toks + e + 1, sizeof(int32_t) * (size_t)m);
  return m;
}
