/* engine/grammar/gr_cache.c — the automaton of one grammar over one vocabulary, shared by the
 * matchers of all sequences that use it (callers hold c->lock).
 *
 * A parse stack is a chain of interned nodes (position in g->elems, parent node); node 0 is the
 * empty stack (the text so far is complete). After expansion every stack's top is a GR_SET
 * position (or the stack is empty). A state is the sorted set of such stacks; states are interned
 * and their byte transitions memoised, so after warm-up a byte costs one table lookup. A state's
 * token mask is computed once by walking the vocabulary trie and then cached. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "engine/grammar/gr_cache.h"

#define MAX_NODES (1u << 20)          /* interned stack nodes per cache (~20 bytes each) */
#define MAX_STATES (1u << 16)         /* interned states per cache (transitions: 1 KiB each) */
#define MASK_CACHE_BYTES (64u << 20)  /* cached masks per cache; all dropped when over */

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
  int8_t text_loop;   /* 0 unknown, 1: every plain-text character leads back here, -1: not */
  gr_set_t first;     /* bytes some stack can consume next */
} state_t;

struct gr_cache {
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
  int32_t start;
  int32_t *walk;      /* [max_depth + 1] states along the trie path */
  int err;            /* last failure inside a transition */
  int full;           /* sticky: a new node or state was refused for MAX_NODES / max_states */
  size_t max_states;  /* <= MAX_STATES */
  int refs;           /* gr_cache_new's reference + one per matcher */
  pthread_mutex_t lock;
};

static uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  return x ^ (x >> 33);
}

static uint64_t node_hash(const gr_cache_t *m, int32_t id) {
  return mix(((uint64_t)(uint32_t)m->nodes[id].pos << 32) | (uint32_t)m->nodes[id].parent);
}

static uint64_t items_hash(const int32_t *v, size_t n);

static uint64_t state_hash(const gr_cache_t *m, int32_t id) {
  return items_hash(m->items + m->states[id].off, (size_t)m->states[id].len);
}

/* Doubles the open-addressing table *ht (ids first..n-1, -1 = empty slot); 0 on failure. */
static int rehash(const gr_cache_t *m, int32_t **ht, size_t *cap, size_t first, size_t n,
                  uint64_t (*hash)(const gr_cache_t *, int32_t)) {
  size_t c = *cap ? *cap * 2 : 1024;
  int32_t *t = malloc(c * sizeof *t);
  if (!t) return 0;
  memset(t, 0xff, c * sizeof *t);
  for (size_t i = first; i < n; i++) {
    size_t h = hash(m, (int32_t)i) & (c - 1);
    while (t[h] >= 0) h = (h + 1) & (c - 1);
    t[h] = (int32_t)i;
  }
  free(*ht);
  *ht = t;
  *cap = c;
  return 1;
}

/* The node (pos, parent), interned; -1 on failure (m->err set). */
static int32_t node_get(gr_cache_t *m, int32_t pos, int32_t parent) {
  /* node 0 (the empty stack) is never looked up: not in the table */
  if ((m->n_nodes + 1) * 2 > m->node_ht_cap && !rehash(m, &m->node_ht, &m->node_ht_cap, 1, m->n_nodes, node_hash))
    goto oom;
  size_t mask = m->node_ht_cap - 1;
  size_t h = mix(((uint64_t)(uint32_t)pos << 32) | (uint32_t)parent) & mask;
  for (int32_t id; (id = m->node_ht[h]) >= 0; h = (h + 1) & mask)
    if (m->nodes[id].pos == pos && m->nodes[id].parent == parent) return id;
  if (m->n_nodes >= MAX_NODES) {
    m->err = GT_ERANGE;
    m->full = 1;
    return -1;
  }
  size_t old = m->cap_mark;
  if (!gr_grow((void **)&m->nodes, &m->cap_nodes, m->n_nodes + 1, sizeof *m->nodes) ||
      !gr_grow((void **)&m->mark, &m->cap_mark, m->n_nodes + 1, sizeof *m->mark))
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
static int expand(gr_cache_t *m, int32_t n) {
  const gr_grammar_t *g = m->g;
  size_t nw = 0;
  if (!gr_grow((void **)&m->work, &m->cap_work, 1, sizeof *m->work)) goto oom;
  m->work[nw++] = n;
  while (nw) {
    n = m->work[--nw];
    if (m->mark[n] == m->stamp) continue;
    m->mark[n] = m->stamp;
    const gr_elem_t *e = n == 0 ? NULL : &g->elems[m->nodes[n].pos];
    if (!e || e->kind == GR_SET) {
      if (!gr_grow((void **)&m->res, &m->cap_res, m->n_res + 1, sizeof *m->res)) goto oom;
      m->res[m->n_res++] = n;
    } else if (e->kind == GR_END) {
      if (!gr_grow((void **)&m->work, &m->cap_work, nw + 1, sizeof *m->work)) goto oom;
      m->work[nw++] = m->nodes[n].parent;
    } else {
      int32_t pos = m->nodes[n].pos, parent = m->nodes[n].parent;
      int32_t ret = g->elems[pos + 1].kind == GR_END ? parent : node_get(m, pos + 1, parent);
      if (ret < 0) return 0;
      int32_t a0 = g->alt_first[e->arg], a1 = g->alt_first[e->arg + 1];
      if (!gr_grow((void **)&m->work, &m->cap_work, nw + (size_t)(a1 - a0), sizeof *m->work)) goto oom;
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

/* The state of m->res[0..n_res) (sorted and deduplicated here), interned: its id, T_DEAD when
 * empty, T_ERROR on failure. */
static int32_t state_get(gr_cache_t *m) {
  if (m->n_res == 0) return T_DEAD;
  qsort(m->res, m->n_res, sizeof *m->res, cmp_i32); /* expand() never adds a node twice */
  if ((m->n_states + 1) * 2 > m->state_ht_cap &&
      !rehash(m, &m->state_ht, &m->state_ht_cap, 0, m->n_states, state_hash))
    goto oom;
  size_t mask = m->state_ht_cap - 1;
  size_t h = items_hash(m->res, m->n_res) & mask;
  for (int32_t id; (id = m->state_ht[h]) >= 0; h = (h + 1) & mask) {
    state_t *s = &m->states[id];
    if ((size_t)s->len == m->n_res && !memcmp(m->items + s->off, m->res, m->n_res * sizeof *m->res)) return id;
  }
  if (m->n_states >= m->max_states) {
    m->err = GT_ERANGE;
    m->full = 1;
    return T_ERROR;
  }
  if (!gr_grow((void **)&m->states, &m->cap_states, m->n_states + 1, sizeof *m->states) ||
      !gr_grow((void **)&m->items, &m->cap_items, m->n_items + m->n_res, sizeof *m->items))
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

static int32_t compute_next(gr_cache_t *m, int32_t sid, unsigned byte) {
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

int32_t gr_cache_step(gr_cache_t *m, int32_t sid, unsigned byte) {
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

int32_t gr_cache_run(gr_cache_t *c, int32_t sid, const unsigned char *p, size_t len) {
  for (size_t i = 0; i < len && sid >= 0; i++) sid = gr_cache_step(c, sid, p[i]);
  return sid;
}

static void cache_destroy(gr_cache_t *m) {
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
  pthread_mutex_destroy(&m->lock);
  free(m);
}

int gr_cache_new(const gr_grammar_t *g, const gr_vocab_t *v, gr_cache_t **out, gt_err_t *err) {
  return gr_cache_new_limited(g, v, MAX_STATES, out, err);
}

int gr_cache_new_limited(const gr_grammar_t *g, const gr_vocab_t *v, size_t max_states, gr_cache_t **out,
                         gt_err_t *err) {
  *out = NULL;
  gr_cache_t *m = calloc(1, sizeof *m);
  if (!m) return gt_err_set(err, GT_ENOMEM, "grammar cache: out of memory");
  pthread_mutex_init(&m->lock, NULL);
  m->max_states = max_states < 1 || max_states > MAX_STATES ? MAX_STATES : max_states;
  m->g = g;
  m->v = v;
  m->refs = 1;
  size_t mask_bytes = v->n_words * sizeof(uint32_t);
  m->max_masks = MASK_CACHE_BYTES / (mask_bytes ? mask_bytes : 1);
  if (m->max_masks < 16) m->max_masks = 16;
  m->walk = malloc((v->max_depth + 1) * sizeof *m->walk);
  m->stamp = 1;
  if (!m->walk || node_get(m, -1, -1) != 0) { /* node 0: the empty stack */
    cache_destroy(m);
    return gt_err_set(err, GT_ENOMEM, "grammar cache: out of memory");
  }
  m->n_res = 0;
  for (int32_t a = g->alt_first[g->root]; a < g->alt_first[g->root + 1]; a++) {
    int32_t n = node_get(m, g->alts[a], 0);
    if (n < 0 || !expand(m, n)) break;
  }
  m->start = m->err ? T_ERROR : state_get(m);
  if (m->start < 0) {
    int code = m->start == T_DEAD ? GT_EINVAL : m->err;
    cache_destroy(m);
    return gt_err_set(err, code, "grammar cache: %s",
                      code == GT_EINVAL ? "the grammar matches nothing"
                      : code == GT_ERANGE ? "the start state is over the state limit"
                                          : "out of memory");
  }
  *out = m;
  return GT_OK;
}

void gr_cache_ref(gr_cache_t *c) {
  pthread_mutex_lock(&c->lock);
  c->refs++;
  pthread_mutex_unlock(&c->lock);
}

int gr_cache_full(gr_cache_t *c) {
  pthread_mutex_lock(&c->lock);
  int full = c->full;
  pthread_mutex_unlock(&c->lock);
  return full;
}

void gr_cache_free(gr_cache_t *c) {
  if (!c) return;
  pthread_mutex_lock(&c->lock);
  int last = --c->refs == 0;
  pthread_mutex_unlock(&c->lock);
  if (last) cache_destroy(c);
}

static void drop_masks(gr_cache_t *m) {
  for (size_t i = 0; i < m->n_states; i++) {
    free(m->states[i].mask);
    m->states[i].mask = NULL;
  }
  m->n_masks = 0;
}

typedef struct {
  int32_t state;
  uint32_t dec;
  int ok;
} loop_memo_t;

/* From state t, decoder state dec inside a character that started in state home: 1 when every
 * completion of the character stays alive and ends in home, 0 when not, -1 on failure. */
static int text_rest(gr_cache_t *m, int32_t home, int32_t t, uint32_t dec, loop_memo_t *memo, int *n_memo) {
  if (dec == GR_TEXT_START) return t == home;
  if (*n_memo >= 64) return 0; /* too many distinct states: not a simple loop, walk instead */
  for (int k = 0; k < *n_memo; k++)
    if (memo[k].state == t && memo[k].dec == dec) return memo[k].ok;
  unsigned lo = (dec >> 8) & 0xFF, hi = dec & 0xFF;
  int ok = 1;
  for (unsigned c = lo; c <= hi && ok == 1; c++) {
    int32_t u = gr_cache_step(m, t, c);
    if (u == T_ERROR) return -1;
    ok = u < 0 ? 0 : text_rest(m, home, u, gr_text_next(dec, c), memo, n_memo);
  }
  if (ok >= 0 && *n_memo < 64) memo[(*n_memo)++] = (loop_memo_t){t, dec, ok};
  return ok;
}

/* 1 when every plain-text character (gr_text_next) leads from sid back to sid through live
 * states, 0 when not (or when the check outgrows its memo), -1 on failure (m->err). */
static int text_loop(gr_cache_t *m, int32_t sid) {
  if (m->states[sid].text_loop) return m->states[sid].text_loop > 0;
  loop_memo_t memo[64];
  int n_memo = 0, loop = 1;
  for (unsigned b = 0x20; b <= 0xF4 && loop == 1; b++) {
    uint32_t dec = gr_text_next(GR_TEXT_START, b);
    if (dec == GR_TEXT_BAD) continue;
    int32_t t = gr_cache_step(m, sid, b);
    if (t == T_ERROR) return -1;
    loop = t < 0 ? 0 : text_rest(m, sid, t, dec, memo, &n_memo);
  }
  if (loop < 0) return -1;
  m->states[sid].text_loop = loop ? 1 : -1;
  return loop;
}

/* Walks the trie from state sid, setting the bits of every token whose bytes stay alive.
 * Subtrees of plain text under a state that loops on every plain character are taken whole.
 * Returns 1, or 0 on failure (m->err). */
static int walk_trie(gr_cache_t *m, int32_t sid, uint32_t *mask, size_t *visits) {
  const gr_vocab_t *v = m->v;
  int32_t *st = m->walk;
  st[0] = sid;
  size_t n = 0;
  for (size_t i = 0; i < v->n_nodes;) {
    n++;
    int32_t from = st[v->depth[i] - 1];
    if (v->text_sub[i]) {
      int loop = text_loop(m, from);
      if (loop < 0) return 0;
      if (loop) {
        for (int32_t k = v->tok_first[i]; k < v->tok_first[v->skip[i]]; k++) {
          int32_t id = v->toks[k];
          mask[id >> 5] |= 1u << (id & 31);
        }
        i = (size_t)v->skip[i];
        continue;
      }
    }
    int32_t t = gr_cache_step(m, from, v->byte[i]);
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
  *visits += n;
  return 1;
}

int gr_cache_mask(gr_cache_t *m, int32_t sid, uint32_t *mask, int *hit, size_t *visits) {
  const gr_vocab_t *v = m->v;
  size_t bytes = v->n_words * sizeof *mask;
  state_t *s = &m->states[sid];
  *hit = s->mask != NULL;
  if (s->mask) {
    memcpy(mask, s->mask, bytes);
    return s->count;
  }
  memset(mask, 0, bytes);
  m->err = GT_OK;
  if (!walk_trie(m, sid, mask, visits)) {
    memset(mask, 0, bytes);
    return m->err;
  }
  s = &m->states[sid]; /* the walk may have moved the states */
  if (s->accepting)
    for (size_t i = 0; i < v->n_ends; i++) mask[v->ends[i] >> 5] |= 1u << (v->ends[i] & 31);
  int count = 0;
  for (size_t i = 0; i < v->n_words; i++) count += __builtin_popcount(mask[i]);
  if (m->n_masks >= m->max_masks) drop_masks(m);
  s->mask = malloc(bytes);
  if (s->mask) { /* a failed cache allocation only costs a later walk */
    memcpy(s->mask, mask, bytes);
    s->count = count;
    m->n_masks++;
  }
  return count;
}

int32_t gr_cache_start(const gr_cache_t *c) { return c->start; }
int gr_cache_accepting(const gr_cache_t *c, int32_t sid) { return c->states[sid].accepting; }
int gr_cache_done(const gr_cache_t *c, int32_t sid) { return c->states[sid].done; }
int gr_cache_error(const gr_cache_t *c) { return c->err ? c->err : GT_EINTERNAL; }
const gr_vocab_t *gr_cache_vocab(const gr_cache_t *c) { return c->v; }
void gr_cache_lock(gr_cache_t *c) { pthread_mutex_lock(&c->lock); }
void gr_cache_unlock(gr_cache_t *c) { pthread_mutex_unlock(&c->lock); }
void gr_cache_sizes(gr_cache_t *c, size_t *n_states, size_t *n_nodes) {
  *n_states = c->n_states;
  *n_nodes = c->n_nodes;
}
