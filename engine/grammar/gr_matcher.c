/* engine/grammar/gr_matcher.c — a sequence's position in a grammar: a state of a (possibly
 * shared) gr_cache_t, the states before each accepted token (rollback), and whether an
 * end-of-generation token ended it. Every call that touches the cache holds its lock. */
#include <stdlib.h>
#include <string.h>

#include "engine/grammar/gr_cache.h"

struct gr_matcher {
  gr_cache_t *c;          /* one reference held */
  const gr_vocab_t *v;
  int32_t cur;            /* current state */
  uint8_t accepting, done; /* of cur, copied so that readers need no lock */
  int ended;              /* an end-of-generation token was accepted */
  int32_t *hist;          /* state before each accepted token */
  size_t n_hist, cap_hist;
  gr_stats_t stats;
};

/* Sets cur and its flags; c locked. */
static void set_state(gr_matcher_t *m, int32_t sid) {
  m->cur = sid;
  m->accepting = (uint8_t)gr_cache_accepting(m->c, sid);
  m->done = (uint8_t)gr_cache_done(m->c, sid);
}

int gr_matcher_new_cached(gr_cache_t *c, gr_matcher_t **out, gt_err_t *err) {
  *out = NULL;
  gr_matcher_t *m = calloc(1, sizeof *m);
  if (!m) return gt_err_set(err, GT_ENOMEM, "grammar matcher: out of memory");
  gr_cache_ref(c);
  m->c = c;
  m->v = gr_cache_vocab(c);
  gr_cache_lock(c);
  set_state(m, gr_cache_start(c));
  gr_cache_unlock(c);
  *out = m;
  return GT_OK;
}

int gr_matcher_new(const gr_grammar_t *g, const gr_vocab_t *v, gr_matcher_t **out, gt_err_t *err) {
  gr_cache_t *c = NULL;
  *out = NULL;
  int rc = gr_cache_new(g, v, &c, err);
  if (rc != GT_OK) return rc;
  rc = gr_matcher_new_cached(c, out, err);
  gr_cache_free(c); /* the matcher holds the only reference now */
  return rc;
}

void gr_matcher_free(gr_matcher_t *m) {
  if (!m) return;
  gr_cache_free(m->c);
  free(m->hist);
  free(m);
}

void gr_matcher_reset(gr_matcher_t *m) {
  gr_cache_lock(m->c);
  set_state(m, gr_cache_start(m->c));
  gr_cache_unlock(m->c);
  m->ended = 0;
  m->n_hist = 0;
}

int gr_matcher_fill_mask(gr_matcher_t *m, uint32_t *mask) {
  if (m->ended) {
    memset(mask, 0, m->v->n_words * sizeof *mask);
    return 0;
  }
  int hit = 0;
  gr_cache_lock(m->c);
  int count = gr_cache_mask(m->c, m->cur, mask, &hit, &m->stats.trie_visits);
  gr_cache_unlock(m->c);
  if (hit) m->stats.mask_hits++;
  else m->stats.mask_misses++;
  return count;
}

int gr_matcher_accept_bytes(gr_matcher_t *m, const char *bytes, size_t len) {
  if (m->ended) return GT_EINVAL;
  gr_cache_lock(m->c);
  int32_t t = gr_cache_run(m->c, m->cur, (const unsigned char *)bytes, len);
  int rc = t >= 0 ? GT_OK : t == T_DEAD ? GT_EINVAL : gr_cache_error(m->c);
  if (t >= 0) set_state(m, t);
  gr_cache_unlock(m->c);
  return rc;
}

int gr_matcher_accept(gr_matcher_t *m, int32_t token) {
  const gr_vocab_t *v = m->v;
  if (m->ended || token < 0 || (size_t)token >= v->n_vocab) return GT_EINVAL;
  int is_end = gr_vocab_is_end(v, token);
  if (is_end ? !m->accepting : !v->in_trie[token]) return GT_EINVAL;
  if (!gr_grow((void **)&m->hist, &m->cap_hist, m->n_hist + 1, sizeof *m->hist)) return GT_ENOMEM;
  int32_t before = m->cur;
  if (is_end) {
    m->ended = 1;
  } else {
    int rc = gr_matcher_accept_bytes(m, v->blob + v->piece_off[token], v->piece_len[token]);
    if (rc != GT_OK) return rc;
  }
  m->hist[m->n_hist++] = before;
  return GT_OK;
}

int gr_matcher_rollback(gr_matcher_t *m, size_t n_tokens) {
  if (n_tokens > m->n_hist) return GT_EINVAL;
  if (n_tokens == 0) return GT_OK;
  m->n_hist -= n_tokens;
  gr_cache_lock(m->c);
  set_state(m, m->hist[m->n_hist]);
  gr_cache_unlock(m->c);
  m->ended = 0; /* the end token can only be the last one */
  return GT_OK;
}

int gr_matcher_accepting(const gr_matcher_t *m) { return m->ended || m->accepting; }

int gr_matcher_done(const gr_matcher_t *m) { return m->ended || m->done; }

void gr_matcher_stats(const gr_matcher_t *m, gr_stats_t *out) {
  *out = m->stats;
  gr_cache_lock(m->c);
  gr_cache_sizes(m->c, &out->n_states, &out->n_nodes);
  gr_cache_unlock(m->c);
}
