/* engine/grammar/gr_matcher.c — running a grammar over bytes and tokens.
 *
 * A parse stack is a chain of interned nodes (position in g->elems, parent node); node 0 is the
 * empty stack (the text so far is complete). After expansion every stack's top is a GR_SET
 * position (or the stack is empty). A state is the sorted set of such stacks; states are interned
 * and their byte transitions memoised, so after warm-up a byte costs one table lookup. A state's
 * token mask is computed once by walking the vocabulary trie and then cached. */
#include <stdlib.h>
#include <string.h>

#include "engine/grammar/gr_internal.h"
#include "engine/grammar/gr_vocab.h"

#define MAX_NODES (8u << 20)          /* interned stack nodes per matcher */
#define MAX_STATES (1u << 20)         /* interned states per matcher */
#define MASK_CACHE_BYTES (64u << 20)  /* cached masks per matcher; all dropped when over */

enum { T_UNKNOWN = -2, T_DEAD = -1, T_ERROR = -3 };

typedef struct {
  int32_t pos, parent;
} node_t;

typedef struct {
  int32_t off, len;   /* stacks: m->items[off .. off + len), sorted */
  int32_t *next;      /* [256] transitions (T_UNKNOWN until computed), NULL until first used */
  uint32_t *mask;     /* cached mask, NULL when not cached */
  int32_t count;      /* allowed tokens in mask */
  uint8_t accepting;  /* holds the empty stack */
  uint8_t done;       /* holds only the empty stack */
  gr_set_t first;     /* bytes some stack can consume next */
} state_t;

struct gr_matcher {
  const gr_grammar_t *g;
  const gr_vocab_t *v;
  node_t *nodes;
  size_t n_nodes, cap_nodes;
  int32_t *node_ht;   /* open addressing: node ids, -1 empty */
  size_t node_ht_cap;
  uint32_t *mark;     /* [cap_mark] expansion stamps, by node id */
  size_t cap_mark;
  uint32_t stamp;
  state_t *states;
  size_t n_states, cap_states;
  int32_t *state_ht;
  size_t state_ht_cap;
  int32_t *items;     /* stacks of all states */
  size_t n_items, cap_items;
  int32_t *work, *res; /* scratch for one transition */
  size_t cap_work, cap_res, n_res;
  size_t n_masks, max_masks;
  int32_t start, cur;
  int ended;          /* an end-of-generation token was accepted */
  int32_t *hist;      /* state before each accepted token (-1: before the end token) */
  size_t n_hist, cap_hist;
  int32_t *walk;      /* [max_depth + 1] states along the trie path */
  gr_stats_t stats;
  int err;            /* last failure inside a transition */
};

static uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  return x ^ (x >> 33);
}

static int grow(void **p, size_t *cap, size_t need, size_t sz) {
  if (need <= *cap) return 1;
  size_t c = *cap ? *cap * 2 : 64;
  while (c < need) c *= 2;
  void *q = realloc(*p, c * sz);
  if (!q) return 0;
  *p = q;
  *cap = c;
  return 1;
}

static int rehash_nodes(gr_matcher_t *m) {
  size_t cap = m->node_ht_cap ? m->node_ht_cap * 2 : 1024;
  int32_t *ht = malloc(cap * sizeof *ht);
  if (!ht) return 0;
  memset(ht, 0xff, cap * sizeof *ht);
  for (size_t i = 1; i < m->n_nodes; i++) {
    size_t h = mix(((uint64_t)(uint32_t)m->nodes[i].pos << 32) | (uint32_t)m->nodes[i].parent) & (cap - 1);
    while (ht[h] >= 0) h = (h + 1) & (cap - 1);
    ht[h] = (int32_t)i;
  }
  free(m->node_ht);
  m->node_ht = ht;
  m->node_ht_cap = cap;
  return 1;
}

/* The node (pos, parent), interned; -1 on failure (m->err set). */
static int32_t node_get(gr_matcher_t *m, int32_t pos, int32_t parent) {
  if ((m->n_nodes + 1) * 2 > m->node_ht_cap && !rehash_nodes(m)) goto oom;
  size_t mask = m->node_ht_cap - 1;
  size_t h = mix(((uint64_t)(uint32_t)pos << 32) | (uint32_t)parent) & mask;
  for (int32_t id; (id = m->node_ht[h]) >= 0; h = (h + 1) & mask)
    if (m->nodes[id].pos == pos && m->nodes[id].parent == parent) return id;
  if (m->n_nodes >= MAX_NODES) {
    m->err = GT_ERANGE;
    return -1;
  }
  size_t old = m->cap_mark;
  if (!grow((void **)&m->nodes, &m->cap_nodes, m->n_nodes + 1, sizeof *m->nodes) ||
      !grow((void **)&m->mark, &m->cap_mark, m->n_nodes + 1, sizeof *m->mark))
    goto oom;
  memset(m->mark + old, 0, (m->cap_mark - old) * sizeof *m->mark);
  int32_t id = (int32_t)m->n_nodes++;
  m->nodes[id] = (node_t){pos, parent};
  m->node_ht[h] = id;
  return id;
oom:
  m->err = GT_ENOMEM;
  return -1;
}

/* Adds to m->res every expanded stack (top at a GR_SET, or the empty stack) reachable from
 * node n without consuming a byte. Nodes already visited under the current stamp are skipped,
 * which also ends nullable cycles. 0 on failure. */
static int expand(gr_matcher_t *m, int32_t n) {
  const gr_grammar_t *g = m->g;
  size_t nw = 0;
  if (!grow((void **)&m->work, &m->cap_work, 1, sizeof *m->work)) goto oom;
  m->work[nw++] = n;
  while (nw) {
    n = m->work[--nw];
    if (m->mark[n] == m->stamp) continue;
    m->mark[n] = m->stamp;
    const gr_elem_t *e = n == 0 ? NULL : &g->elems[m->nodes[n].pos];
    if (!e || e->kind == GR_SET) {
      if (!grow((void **)&m->res, &m->cap_res, m->n_res + 1, sizeof *m->res)) goto oom;
      m->res[m->n_res++] = n;
    } else if (e->kind == GR_END) {
      if (!grow((void **)&m->work, &m->cap_work, nw + 1, sizeof *m->work)) goto oom;
      m->work[nw++] = m->nodes[n].parent;
    } else {
      int32_t pos = m->nodes[n].pos, parent = m->nodes[n].parent;
      int32_t ret = g->elems[pos + 1].kind == GR_END ? parent : node_get(m, pos + 1, parent);
      if (ret < 0) return 0;
      int32_t a0 = g->alt_first[e->arg], a1 = g->alt_first[e->arg + 1];
      if (!grow((void **)&m->work, &m->cap_work, nw + (size_t)(a1 - a0), sizeof *m->work)) goto oom;
      for (int32_t a = a1; a-- > a0;) {
        int32_t c = node_get(m, g->alts[a], ret);
        if (c < 0) return 0;
        m->work[nw++] = c;
      }
    }
  }
  return 1;
oom:
  m->err = GT_ENOMEM;
  return 0;
}

static int cmp_i32(const void *a, const void *b) {
  int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  return x < y ? -1 : x > y;
}

static uint64_t items_hash(const int32_t *v, size_t n) {
  uint64_t h = 0x9E3779B97F4A7C15ULL ^ n;
  for (size_t i = 0; i < n; i++) h = mix(h ^ (uint32_t)v[i]) + i;
  return h;
}

static int rehash_states(gr_matcher_t *m) {
  size_t cap = m->state_ht_cap ? m->state_ht_cap * 2 : 256;
  int32_t *ht = malloc(cap * sizeof *ht);
  if (!ht) return 0;
  memset(ht, 0xff, cap * sizeof *ht);
  for (size_t i = 0; i < m->n_states; i++) {
    size_t h = items_hash(m->items + m->states[i].off, (size_t)m->states[i].len) & (cap - 1);
    while (ht[h] >= 0) h = (h + 1) & (cap - 1);
    ht[h] = (int32_t)i;
  }
  free(m->state_ht);
  m->state_ht = ht;
  m->state_ht_cap = cap;
  return 1;
}

/* The state of m->res[0..n_res) (sorted and deduplicated here), interned: its id, T_DEAD when
 * empty, T_ERROR on failure. */
static int32_t state_get(gr_matcher_t *m) {
  if (m->n_res == 0) return T_DEAD;
  qsort(m->res, m->n_res, sizeof *m->res, cmp_i32); /* expand() never adds a node twice */
  if ((m->n_states + 1) * 2 > m->state_ht_cap && !rehash_states(m)) goto oom;
  size_t mask = m->state_ht_cap - 1;
  size_t h = items_hash(m->res, m->n_res) & mask;
  for (int32_t id; (id = m->state_ht[h]) >= 0; h = (h + 1) & mask) {
    state_t *s = &m->states[id];
    if ((size_t)s->len == m->n_res && !memcmp(m->items + s->off, m->res, m->n_res * sizeof *m->res)) return id;
  }
  if (m->n_states >= MAX_STATES) {
    m->err = GT_ERANGE;
    return T_ERROR;
  }
  if (!grow((void **)&m->states, &m->cap_states, m->n_states + 1, sizeof *m->states) ||
      !grow((void **)&m->items, &m->cap_items, m->n_items + m->n_res, sizeof *m->items))
    goto oom;
  int32_t id = (int32_t)m->n_states++;
  state_t *s = &m->states[id];
  memset(s, 0, sizeof *s);
  s->off = (int32_t)m->n_items;
  s->len = (int32_t)m->n_res;
  memcpy(m->items + m->n_items, m->res, m->n_res * sizeof *m->res);
  m->n_items += m->n_res;
  s->accepting = m->res[0] == 0;
  s->done = m->n_res == 1 && m->res[0] == 0;
  for (size_t i = 0; i < m->n_res; i++) {
    if (m->res[i] == 0) continue;
    const gr_set_t *set = &m->g->sets[m->g->elems[m->nodes[m->res[i]].pos].arg];
    for (int w = 0; w < 8; w++) s->first.w[w] |= set->w[w];
  }
  m->state_ht[h] = id;
  return id;
oom:
  m->err = GT_ENOMEM;
  return T_ERROR;
}

static int32_t compute_next(gr_matcher_t *m, int32_t sid, unsigned byte) {
  m->stamp++;
  if (m->stamp == 0) { /* wrapped: clear the stamps */
    memset(m->mark, 0, m->cap_mark * sizeof *m->mark);
    m->stamp = 1;
  }
  m->n_res = 0;
  int32_t off = m->states[sid].off, len = m->states[sid].len;
  for (int32_t i = 0; i < len; i++) {
    int32_t n = m->items[off + i]; /* m->items may move below: read by index */
    if (n == 0) continue;
    node_t nd = m->nodes[n];
    const gr_set_t *set = &m->g->sets[m->g->elems[nd.pos].arg];
    if (!(set->w[byte >> 5] >> (byte & 31) & 1)) continue;
    int32_t adv = node_get(m, nd.pos + 1, nd.parent);
    if (adv < 0 || !expand(m, adv)) return T_ERROR;
  }
  return state_get(m);
}

/* The state after byte from sid: an id, T_DEAD, or T_ERROR (m->err). */
static inline int32_t step(gr_matcher_t *m, int32_t sid, unsigned byte) {
  state_t *s = &m->states[sid];
  if (!(s->first.w[byte >> 5] >> (byte & 31) & 1)) return T_DEAD;
  if (!s->next) {
    s->next = malloc(256 * sizeof *s->next);
    if (!s->next) {
      m->err = GT_ENOMEM;
      return T_ERROR;
    }
    for (int i = 0; i < 256; i++) s->next[i] = T_UNKNOWN;
  }
  int32_t t = s->next[byte];
  if (t != T_UNKNOWN) return t;
  t = compute_next(m, sid, byte);
  if (t != T_ERROR) m->states[sid].next[byte] = t; /* states may have moved */
  return t;
}

int gr_matcher_new(const gr_grammar_t *g, const gr_vocab_t *v, gr_matcher_t **out, gt_err_t *err) {
  *out = NULL;
  gr_matcher_t *m = calloc(1, sizeof *m);
  if (!m) return gt_err_set(err, GT_ENOMEM, "grammar matcher: out of memory");
  m->g = g;
  m->v = v;
  size_t mask_bytes = v->n_words * sizeof(uint32_t);
  m->max_masks = MASK_CACHE_BYTES / (mask_bytes ? mask_bytes : 1);
  if (m->max_masks < 16) m->max_masks = 16;
  m->walk = malloc((v->max_depth + 1) * sizeof *m->walk);
  m->stamp = 1;
  if (!m->walk || node_get(m, -1, -1) != 0) { /* node 0: the empty stack */
    gr_matcher_free(m);
    return gt_err_set(err, GT_ENOMEM, "grammar matcher: out of memory");
  }
  m->n_res = 0;
  for (int32_t a = g->alt_first[g->root]; a < g->alt_first[g->root + 1]; a++) {
    int32_t n = node_get(m, g->alts[a], 0);
    if (n < 0 || !expand(m, n)) break;
  }
  m->start = m->err ? T_ERROR : state_get(m);
  if (m->start < 0) {
    int code = m->start == T_DEAD ? GT_EINVAL : m->err;
    gr_matcher_free(m);
    return gt_err_set(err, code, "grammar matcher: %s",
                      code == GT_EINVAL ? "the grammar matches nothing" : "out of memory");
  }
  m->cur = m->start;
  *out = m;
  return GT_OK;
}

void gr_matcher_free(gr_matcher_t *m) {
  if (!m) return;
  for (size_t i = 0; i < m->n_states; i++) {
    free(m->states[i].next);
    free(m->states[i].mask);
  }
  free(m->states);
  free(m->state_ht);
  free(m->items);
  free(m->nodes);
  free(m->node_ht);
  free(m->mark);
  free(m->work);
  free(m->res);
  free(m->walk);
  free(m->hist);
  free(m);
}

void gr_matcher_reset(gr_matcher_t *m) {
  m->cur = m->start;
  m->ended = 0;
  m->n_hist = 0;
}

static void drop_masks(gr_matcher_t *m) {
  for (size_t i = 0; i < m->n_states; i++) {
    free(m->states[i].mask);
    m->states[i].mask = NULL;
  }
  m->n_masks = 0;
}

/* Walks the trie from state sid, setting the bits of every token whose bytes stay alive.
 * Returns 1, or 0 on failure (m->err). */
static int walk_trie(gr_matcher_t *m, int32_t sid, uint32_t *mask) {
  const gr_vocab_t *v = m->v;
  int32_t *st = m->walk;
  st[0] = sid;
  size_t visits = 0;
  for (size_t i = 0; i < v->n_nodes;) {
    visits++;
    int32_t t = step(m, st[v->depth[i] - 1], v->byte[i]);
    if (t < 0) {
      if (t == T_ERROR) return 0;
      i = (size_t)v->skip[i];
      continue;
    }
    st[v->depth[i]] = t;
    for (int32_t k = 0; k < v->tok_count[i]; k++) {
      int32_t id = v->toks[v->tok_first[i] + k];
      mask[id >> 5] |= 1u << (id & 31);
    }
    i++;
  }
  m->stats.trie_visits += visits;
  return 1;
}

static int popcount_mask(const uint32_t *mask, size_t n) {
  int c = 0;
  for (size_t i = 0; i < n; i++) c += __builtin_popcount(mask[i]);
  return c;
}

int gr_matcher_fill_mask(gr_matcher_t *m, uint32_t *mask) {
  const gr_vocab_t *v = m->v;
  size_t bytes = v->n_words * sizeof *mask;
  if (m->ended) {
    memset(mask, 0, bytes);
    return 0;
  }
  state_t *s = &m->states[m->cur];
  if (s->mask) {
    m->stats.mask_hits++;
    memcpy(mask, s->mask, bytes);
    return s->count;
  }
  m->stats.mask_misses++;
  memset(mask, 0, bytes);
  m->err = GT_OK;
  if (!walk_trie(m, m->cur, mask)) {
    memset(mask, 0, bytes);
    return m->err;
  }
  s = &m->states[m->cur];
  if (s->accepting) {
    if (v->eos >= 0) mask[v->eos >> 5] |= 1u << (v->eos & 31);
    if (v->eot >= 0) mask[v->eot >> 5] |= 1u << (v->eot & 31);
  }
  int count = popcount_mask(mask, v->n_words);
  if (m->n_masks >= m->max_masks) drop_masks(m);
  s->mask = malloc(bytes);
  if (s->mask) { /* a failed cache allocation only costs a later walk */
    memcpy(s->mask, mask, bytes);
    s->count = count;
    m->n_masks++;
  }
  return count;
}

/* Runs bytes from state sid: the final state, T_DEAD, or T_ERROR. */
static int32_t run_bytes(gr_matcher_t *m, int32_t sid, const unsigned char *p, size_t len) {
  for (size_t i = 0; i < len && sid >= 0; i++) sid = step(m, sid, p[i]);
  return sid;
}

int gr_matcher_accept_bytes(gr_matcher_t *m, const char *bytes, size_t len) {
  if (m->ended) return GT_EINVAL;
  m->err = GT_OK;
  int32_t t = run_bytes(m, m->cur, (const unsigned char *)bytes, len);
  if (t == T_ERROR) return m->err;
  if (t == T_DEAD) return GT_EINVAL;
  m->cur = t;
  return GT_OK;
}

int gr_matcher_accept(gr_matcher_t *m, int32_t token) {
  const gr_vocab_t *v = m->v;
  if (m->ended || token < 0 || (size_t)token >= v->n_vocab) return GT_EINVAL;
  int is_end = token == v->eos || token == v->eot;
  if (is_end ? !m->states[m->cur].accepting : !v->in_trie[token]) return GT_EINVAL;
  if (!grow((void **)&m->hist, &m->cap_hist, m->n_hist + 1, sizeof *m->hist)) return GT_ENOMEM;
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
  m->cur = m->hist[m->n_hist];
  m->ended = 0; /* the end token can only be the last one */
  return GT_OK;
}

int gr_matcher_accepting(const gr_matcher_t *m) { return m->ended || m->states[m->cur].accepting; }

int gr_matcher_done(const gr_matcher_t *m) { return m->ended || m->states[m->cur].done; }

void gr_matcher_stats(const gr_matcher_t *m, gr_stats_t *out) {
  *out = m->stats;
  out->n_states = m->n_states;
  out->n_nodes = m->n_nodes;
}
