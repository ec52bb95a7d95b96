/* engine/sched/spec_suffix.c — see spec_suffix.h.
 *
 * Two generations of cap / 2 tokens each: runs go into the newer one; when it has no room, the
 * older one is emptied and becomes the newer. So dropping old runs costs one reset of an index
 * (no copy, no re-index on the scheduler thread), and inserting a run costs its own grams only. */
#include "engine/sched/spec_suffix.h"

#include <stdlib.h>
#include <string.h>

#include "engine/sched/spec_index.h"

typedef struct {
  int32_t *toks;  /* [half] runs, each followed by -1 */
  uint64_t *tags; /* [half] the salt of each position's run */
  int n;
  spec_index_t ix; /* sized for half positions at create: indexing never rebuilds */
} gen_t;

struct spec_suffix {
  gen_t gen[2];
  int cur;  /* the newer generation */
  int half; /* tokens per generation */
};

static void gen_reset(gen_t *g) {
  g->n = 0;
  spec_index_reset(&g->ix, SPEC_SUFFIX_MIN_N, SPEC_SUFFIX_MAX_N);
}

spec_suffix_t *spec_suffix_create(int cap) {
  if (cap < 64) cap = 64;
  spec_suffix_t *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->half = cap / 2;
  for (int i = 0; i < 2; i++) {
    gen_t *g = &c->gen[i];
    g->toks = malloc(sizeof(int32_t) * (size_t)c->half);
    g->tags = malloc(sizeof(uint64_t) * (size_t)c->half);
    gen_reset(g);
    if (!g->toks || !g->tags || spec_index_reserve(&g->ix, c->half)) {
      spec_suffix_free(c);
      return NULL;
    }
  }
  return c;
}

void spec_suffix_free(spec_suffix_t *c) {
  if (!c) return;
  for (int i = 0; i < 2; i++) {
    spec_index_free(&c->gen[i].ix);
    free(c->gen[i].toks);
    free(c->gen[i].tags);
  }
  free(c);
}

int spec_suffix_add(spec_suffix_t *c, const int32_t *toks, int n, int from, uint64_t salt) {
  if (from < 0 || n <= from) return 0;
  int start = from > SPEC_SUFFIX_CTX ? from - SPEC_SUFFIX_CTX : 0;
  if (n - start + 1 > c->half) start = n - (c->half - 1); /* its newest tokens */
  const int len = n - start;
  gen_t *g = &c->gen[c->cur];
  if (g->n + len + 1 > c->half) { /* the older generation goes */
    c->cur ^= 1;
    g = &c->gen[c->cur];
    gen_reset(g);
  }
  memcpy(g->toks + g->n, toks + start, sizeof(int32_t) * (size_t)len);
  for (int i = 0; i <= len; i++) g->tags[g->n + i] = salt;
  g->toks[g->n + len] = -1;
  g->n += len + 1;
  if (spec_index_extend(&g->ix, g->toks, g->tags, g->n)) { /* cannot happen after the reserve; empty on failure */
    gen_reset(g);
    return -1;
  }
  return 0;
}

int spec_suffix_draft(const spec_suffix_t *c, const int32_t *key, int n_key, uint64_t salt, int k, int32_t *out, int *g) {
  *g = 0;
  if (k <= 0) return 0;
  const gen_t *best = NULL;
  int e = 0;
  for (int i = 0; i < 2; i++) { /* the newer first: an older match must be longer */
    const gen_t *gn = &c->gen[c->cur ^ i];
    int end = 0;
    const int len = spec_index_find(&gn->ix, gn->toks, gn->tags, salt, key, n_key, SPEC_SUFFIX_MAX_N, &end);
    if (len > *g) {
      *g = len;
      best = gn;
      e = end;
    }
  }
  if (!best) return 0;
  int m = 0; /* a run ends with -1 before best->n: the loop stops there */
  while (m < k && best->toks[e + 1 + m] >= 0) {
    out[m] = best->toks[e + 1 + m];
    m++;
  }
  return m;
}

int spec_suffix_tokens(const spec_suffix_t *c) { return c->gen[0].n + c->gen[1].n; }
