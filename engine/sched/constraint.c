/* engine/sched/constraint.c — see constraint.h. */
#include "engine/sched/constraint.h"

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "engine/grammar/grammar.h"

/* The vocabulary shared by the cache and every constraint compiled through it (freed with the
 * last of them). */
typedef struct {
  atomic_int refs;
  gr_vocab_t *v;
} vocab_ref_t;

struct cons {
  atomic_int refs;
  cons_kind_t kind;
  char *spec;            /* the key with kind */
  size_t len;
  uint64_t hash;
  gr_grammar_t *g;
  vocab_ref_t *vocab;
  int32_t *prefix, *suffix; /* forced tokens (tool calls) */
  int n_prefix, n_suffix;
  int32_t *again;        /* CONS_TOOL_CALLS: "\n<tool_call>\n", forced once its first token is taken */
  int n_again;
  int32_t ends[2];       /* CONS_TOOL_CALLS: the end-of-sequence ids that may follow a call (-1: none) */
  int32_t think_start, think_end; /* <think>, </think> ids (-1: none) */
  uint64_t used;         /* LRU clock of the last cons_get */
  size_t max_states;     /* per grammar cache (gr_cache_new_limited) */
  /* the automaton and masks that new sequences join (one reference; created at the first
   * cons_seq_create, replaced by a fresh one once full); mu guards the pointer */
  pthread_mutex_t mu;
  gr_cache_t *shared;
  atomic_uint_fast64_t mask_fills, mask_hits, caches, moves; /* cons_stats_t */
};

struct cons_cache {
  pthread_mutex_t mu;
  const tok_t *tok;
  vocab_ref_t *vocab;    /* built at the first cons_get */
  cons_t **e;            /* [cap] */
  int n, cap;
  uint64_t clock;
  size_t max_states;     /* per grammar cache */
  cons_cache_stats_t st;
};

static void vocab_unref(vocab_ref_t *r) {
  if (r && atomic_fetch_sub(&r->refs, 1) == 1) {
    gr_vocab_free(r->v);
    free(r);
  }
}

void cons_ref(cons_t *k) { atomic_fetch_add(&k->refs, 1); }

void cons_unref(cons_t *k) {
  if (!k || atomic_fetch_sub(&k->refs, 1) != 1) return;
  gr_cache_free(k->shared); /* before the grammar and the vocabulary it reads */
  pthread_mutex_destroy(&k->mu);
  gr_grammar_free(k->g);
  vocab_unref(k->vocab);
  free(k->spec);
  free(k->prefix);
  free(k->suffix);
  free(k->again);
  free(k);
}

int cons_cache_create(const tok_t *tok, int capacity, int max_states, cons_cache_t **out, gt_err_t *err) {
  cons_cache_t *c = calloc(1, sizeof *c);
  if (c) c->e = calloc((size_t)(capacity > 0 ? capacity : 1), sizeof *c->e);
  if (!c || !c->e) {
    free(c);
    return gt_err_set(err, GT_ENOMEM, "out of memory");
  }
  pthread_mutex_init(&c->mu, NULL);
  c->tok = tok;
  c->cap = capacity > 0 ? capacity : 1;
  c->max_states = max_states > 0 ? (size_t)max_states : 0; /* 0: the grammar's own limit */
  *out = c;
  return GT_OK;
}

void cons_cache_free(cons_cache_t *c) {
  if (!c) return;
  for (int i = 0; i < c->n; i++) cons_unref(c->e[i]);
  vocab_unref(c->vocab);
  pthread_mutex_destroy(&c->mu);
  free(c->e);
  free(c);
}

void cons_cache_stats(cons_cache_t *c, cons_cache_stats_t *out) {
  pthread_mutex_lock(&c->mu);
  *out = c->st;
  out->entries = c->n;
  pthread_mutex_unlock(&c->mu);
}

static uint64_t fnv1a(cons_kind_t kind, const char *s, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull ^ (uint64_t)kind;
  for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull;
  return h;
}

/* ---- tool calls: the JSON schema of one call of one of the tools ---- */

/* Moves schema's $defs / definitions into root's (a later tool's name wins on a clash). */
static void lift_defs(json_t *root, json_t *schema) {
  static const char *const keys[] = {"$defs", "definitions"};
  for (int i = 0; i < 2; i++) {
    json_t *d = json_object_get(schema, keys[i]);
    if (!json_is_object(d)) continue;
    json_t *have = json_object_get(root, keys[i]);
    if (!have) json_object_set(root, keys[i], d);
    else json_object_update(have, d);
    json_object_del(schema, keys[i]);
  }
}

/* tools: a JSON array of {"type": "function", "function": {"name", "parameters"}} -> the schema
 * text of {"name": <one name>, "arguments": <its parameters>} (malloc'd). */
static char *tool_call_schema(const char *tools, size_t len, gt_err_t *err) {
  json_error_t je;
  json_t *arr = json_loadb(tools, len, 0, &je);
  char *out = NULL;
  if (!json_is_array(arr) || json_array_size(arr) == 0) {
    gt_err_set(err, GT_EINVAL, "tools must be a non-empty JSON array of function definitions");
    goto done;
  }
  json_t *root = json_object(), *any = json_array();
  json_object_set_new(root, "anyOf", any);
  size_t i;
  json_t *t;
  json_array_foreach(arr, i, t) {
    json_t *fn = json_object_get(t, "function");
    json_t *name = json_object_get(fn, "name"), *params = json_object_get(fn, "parameters");
    if (!json_is_string(name)) {
      gt_err_set(err, GT_EINVAL, "tools[%zu].function.name must be a string", i);
      json_decref(root);
      goto done;
    }
    if (params && !json_is_null(params) && !json_is_object(params)) {
      gt_err_set(err, GT_EINVAL, "tools[%zu].function.parameters must be a JSON schema object", i);
      json_decref(root);
      goto done;
    }
    /* no parameters: the function takes none, {} */
    json_t *args = params && !json_is_null(params) ? json_deep_copy(params)
                                                   : json_pack("{s:s, s:b}", "type", "object", "additionalProperties", 0);
    lift_defs(root, args);
    json_t *one = json_pack("{s:s, s:{s:{s:O}, s:o}, s:[s,s]}", "type", "object", "properties", "name", "const", name,
                            "arguments", args, "required", "name", "arguments");
    json_array_append_new(any, one);
  }
  if (json_array_size(any) == 1) { /* one tool: its schema itself */
    json_t *one = json_incref(json_array_get(any, 0));
    json_object_del(root, "anyOf");
    json_object_update(one, root); /* the lifted $defs */
    json_decref(root);
    root = one;
  }
  out = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
  json_decref(root);
  if (!out) gt_err_set(err, GT_ENOMEM, "out of memory");
done:
  json_decref(arr);
  return out;
}

/* Forced text as tokens: its special tokens (<tool_call>) as the model emits them, unless one is a
 * control token, whose text the output drops (the output parser would never see it): then the
 * text is encoded as plain text. */
static int encode_forced(const tok_t *tok, const char *text, int32_t **ids, int *n, gt_err_t *err) {
  size_t m = 0;
  int rc = tok_encode(tok, text, strlen(text), TOK_SPECIAL, ids, &m, err);
  int control = 0;
  for (size_t i = 0; !rc && i < m; i++) control |= tok_is_control(tok, (*ids)[i]);
  if (!rc && control) {
    free(*ids);
    rc = tok_encode(tok, text, strlen(text), 0, ids, &m, err);
  }
  *n = (int)m;
  return rc;
}

/* Compiles (kind, spec), whose fnv1a is hash, with c's vocabulary (the caller holds c's lock). */
static int compile(cons_cache_t *c, cons_kind_t kind, const char *spec, size_t len, uint64_t hash, cons_t **out,
                   gt_err_t *err) {
  static const gr_kind_t kinds[] = {[CONS_JSON_SCHEMA] = GR_JSON_SCHEMA, [CONS_JSON_OBJECT] = GR_JSON_OBJECT,
                                    [CONS_CHOICE] = GR_CHOICE, [CONS_REGEX] = GR_REGEX, [CONS_TOOL_CALL] = GR_JSON_SCHEMA,
                                    [CONS_TOOL_CALLS] = GR_JSON_SCHEMA};
  if (kind < CONS_JSON_SCHEMA || kind > CONS_TOOL_CALLS) return gt_err_set(err, GT_EINVAL, "unknown constraint kind %d", (int)kind);
  cons_t *k = calloc(1, sizeof *k);
  if (!k || !(k->spec = malloc(len + 1))) {
    free(k);
    return gt_err_set(err, GT_ENOMEM, "out of memory");
  }
  atomic_init(&k->refs, 1);
  pthread_mutex_init(&k->mu, NULL);
  memcpy(k->spec, spec, len);
  k->spec[len] = 0;
  k->len = len;
  k->kind = kind;
  k->hash = hash;
  k->think_start = tok_find(c->tok, "<think>");
  k->think_end = tok_find(c->tok, "</think>");
  k->max_states = c->max_states;
  int rc = GT_OK;
  char *schema = NULL;
  k->ends[0] = k->ends[1] = -1;
  if (kind == CONS_TOOL_CALL || kind == CONS_TOOL_CALLS) {
    schema = tool_call_schema(spec, len, err);
    if (!schema) rc = err && err->code ? err->code : GT_EINVAL;
    if (!rc) rc = encode_forced(c->tok, "<tool_call>\n", &k->prefix, &k->n_prefix, err);
    if (!rc) rc = encode_forced(c->tok, "\n</tool_call>", &k->suffix, &k->n_suffix, err);
  }
  if (!rc && kind == CONS_TOOL_CALLS) {
    rc = encode_forced(c->tok, "\n<tool_call>\n", &k->again, &k->n_again, err);
    k->ends[0] = tok_eot(c->tok);
    k->ends[1] = tok_eos(c->tok);
    if (!rc && (k->n_again < 1 || (k->ends[0] < 0 && k->ends[1] < 0)))
      rc = gt_err_set(err, GT_EUNSUPPORTED, "several tool calls need an end-of-turn token");
  }
  if (!rc) rc = gr_compile(kinds[kind], schema ? schema : spec, schema ? strlen(schema) : len, &k->g, err);
  free(schema);
  if (rc) {
    cons_unref(k);
    return rc;
  }
  atomic_fetch_add(&c->vocab->refs, 1);
  k->vocab = c->vocab;
  *out = k;
  return GT_OK;
}

int cons_get(cons_cache_t *c, cons_kind_t kind, const char *spec, size_t len, cons_t **out, gt_err_t *err) {
  *out = NULL;
  const uint64_t h = fnv1a(kind, spec, len);
  pthread_mutex_lock(&c->mu);
  int rc = GT_OK;
  if (!c->vocab) { /* once per model: every later request reuses it */
    vocab_ref_t *r = calloc(1, sizeof *r);
    if (!r) rc = gt_err_set(err, GT_ENOMEM, "out of memory");
    if (!rc && (rc = gr_vocab_new(c->tok, &r->v, err))) free(r);
    if (!rc) {
      atomic_init(&r->refs, 1);
      c->vocab = r;
    }
  }
  for (int i = 0; !rc && i < c->n; i++) {
    cons_t *k = c->e[i];
    if (k->hash == h && k->kind == kind && k->len == len && !memcmp(k->spec, spec, len)) {
      k->used = ++c->clock;
      cons_ref(k);
      c->st.hits++;
      *out = k;
      break;
    }
  }
  if (!rc && !*out && !(rc = compile(c, kind, spec, len, h, out, err))) {
    c->st.compiled++;
    if (c->n == c->cap) { /* evict the least recently used (requests keep their references) */
      int lru = 0;
      for (int i = 1; i < c->n; i++)
        if (c->e[i]->used < c->e[lru]->used) lru = i;
      cons_unref(c->e[lru]);
      c->e[lru] = c->e[--c->n];
      c->st.evicted++;
    }
    (*out)->used = ++c->clock;
    cons_ref(*out);
    c->e[c->n++] = *out;
  }
  pthread_mutex_unlock(&c->mu);
  return rc;
}

/* ---- one sequence ---- */

/* P_MORE (CONS_TOOL_CALLS, after a call): an end-of-sequence id or again[0]; P_AGAIN: the rest of
 * again forced, then the next call's grammar */
typedef enum { P_REASON, P_PREFIX, P_GRAMMAR, P_SUFFIX, P_END, P_MORE, P_AGAIN } phase_t;

struct cons_seq {
  cons_t *k;
  gr_matcher_t *m;
  int own;          /* m's cache is this sequence's alone (it moved off a full shared one) */
  int32_t *toks;    /* [cap_toks] the tokens m accepted, replayed when it moves */
  size_t n_toks, cap_toks;
  phase_t phase;
  int pos;          /* next forced token of the prefix / suffix */
  int may_think;    /* the first token may be <think> */
  int n_reason;     /* tokens of the reasoning part so far */
  int think_budget; /* most reasoning tokens (cons_seq_set_think_budget) */
  size_t gw;        /* gr_mask_words */
  uint32_t *scratch; /* [gw] when the tokenizer's words exceed the model's */
};

/* The phase after the reasoning (or at the start). */
static phase_t first_phase(const cons_t *k) { return k->n_prefix ? P_PREFIX : P_GRAMMAR; }

/* A matcher at the start of k on k's shared cache: made at the first call, and replaced by a
 * fresh one when full (its sequences keep it until they end). When there is no memory for the
 * fresh one, the sequence joins the full one instead (the next sequence tries again): it moves to
 * a cache of its own (move_cache) only if it needs a state the full one cannot take. */
static int join_shared(cons_t *k, gr_matcher_t **out, gt_err_t *err) {
  pthread_mutex_lock(&k->mu);
  int rc = GT_OK;
  if (!k->shared || gr_cache_full(k->shared)) {
    gr_cache_t *c = NULL;
    gt_err_t e = {0};
    if (!(rc = gr_cache_new_limited(k->g, k->vocab->v, k->max_states, &c, &e))) {
      gr_cache_free(k->shared);
      k->shared = c;
      atomic_fetch_add(&k->caches, 1);
    } else if (k->shared && rc == GT_ENOMEM) {
      rc = GT_OK; /* on the full one */
    } else if (err) {
      *err = e;
    }
  }
  if (!rc) rc = gr_matcher_new_cached(k->shared, out, err);
  pthread_mutex_unlock(&k->mu);
  return rc;
}

/* Adds m's mask counters to k's (before m goes). */
static void count_masks(cons_t *k, const gr_matcher_t *m) {
  gr_stats_t st;
  gr_matcher_stats(m, &st);
  atomic_fetch_add(&k->mask_fills, st.mask_misses);
  atomic_fetch_add(&k->mask_hits, st.mask_hits);
}

/* q's cache is full (GT_ERANGE): q moves to a fresh cache of its own and replays its tokens, so
 * that a sequence fails only when its own walk outgrows the limits, never because others filled
 * the shared cache. Returns GT_OK, or GT_ERANGE (a second time: its own walk) / GT_ENOMEM; on an
 * error q is as it was (still on the full cache, not marked as moved). */
static int move_cache(cons_seq_t *q) {
  if (q->own) return GT_ERANGE;
  gr_matcher_t *m = NULL;
  gr_cache_t *c = NULL;
  int rc = gr_cache_new_limited(q->k->g, q->k->vocab->v, q->k->max_states, &c, NULL);
  if (!rc) rc = gr_matcher_new_cached(c, &m, NULL);
  gr_cache_free(c); /* m holds it */
  for (size_t i = 0; !rc && i < q->n_toks; i++) rc = gr_matcher_accept(m, q->toks[i]);
  if (rc) {
    if (m) count_masks(q->k, m);
    gr_matcher_free(m);
    return rc == GT_EINVAL ? GT_EINTERNAL : rc; /* accepted before: never refused now */
  }
  count_masks(q->k, q->m);
  gr_matcher_free(q->m);
  q->m = m;
  q->own = 1;
  atomic_fetch_add(&q->k->moves, 1);
  return GT_OK;
}

int cons_seq_create(cons_t *k, int starts_in_reasoning, int may_think, cons_seq_t **out, gt_err_t *err) {
  cons_seq_t *q = calloc(1, sizeof *q);
  if (!q) return gt_err_set(err, GT_ENOMEM, "out of memory");
  int rc = join_shared(k, &q->m, err);
  if (rc) {
    free(q);
    return rc;
  }
  cons_ref(k);
  q->k = k;
  q->gw = gr_mask_words(k->vocab->v);
  q->think_budget = CONS_THINK_BUDGET;
  q->phase = starts_in_reasoning && k->think_end >= 0 ? P_REASON : first_phase(k);
  q->may_think = may_think && q->phase != P_REASON && k->think_start >= 0 && k->think_end >= 0;
  *out = q;
  return GT_OK;
}

void cons_seq_free(cons_seq_t *q) {
  if (!q) return;
  count_masks(q->k, q->m);
  gr_matcher_free(q->m);
  cons_unref(q->k);
  free(q->toks);
  free(q->scratch);
  free(q);
}

int cons_seq_active(const cons_seq_t *q) { return q->phase != P_REASON || q->n_reason >= q->think_budget; }

void cons_seq_set_think_budget(cons_seq_t *q, int max_tokens) {
  const int half = max_tokens / 2;
  q->think_budget = half > 0 && half < CONS_THINK_BUDGET ? half : CONS_THINK_BUDGET;
}

static void clear_bit(uint32_t *mask, int32_t id, int n_vocab, int *n) {
  if (id >= 0 && id < n_vocab && (mask[id / 32] >> (id % 32) & 1u)) {
    mask[id / 32] &= ~(1u << (id % 32));
    (*n)--;
  }
}

static void set_bit(uint32_t *mask, int32_t id, int n_vocab) {
  if (id >= 0 && id < n_vocab) mask[id / 32] |= 1u << (id % 32);
}

/* The grammar's mask (mask[gw]), moving q to a cache of its own when the shared one is full. */
static int fill_mask(cons_seq_t *q, uint32_t *mask) {
  int n = gr_matcher_fill_mask(q->m, mask);
  if (n == GT_ERANGE && (n = move_cache(q)) == GT_OK) n = gr_matcher_fill_mask(q->m, mask);
  return n;
}

int cons_seq_mask(cons_seq_t *q, uint32_t *mask, int n_vocab) {
  const size_t mw = ((size_t)n_vocab + 31) / 32;
  int n = 0;
  switch (q->phase) {
    case P_PREFIX:
    case P_SUFFIX:
    case P_AGAIN: {
      const int32_t id = q->phase == P_PREFIX ? q->k->prefix[q->pos]
                         : q->phase == P_SUFFIX ? q->k->suffix[q->pos] : q->k->again[q->pos];
      memset(mask, 0, sizeof(uint32_t) * mw);
      set_bit(mask, id, n_vocab);
      n = id >= 0 && id < n_vocab;
      break;
    }
    case P_MORE: {
      const int32_t ids[3] = {q->k->again[0], q->k->ends[0], q->k->ends[1]};
      memset(mask, 0, sizeof(uint32_t) * mw);
      for (int i = 0; i < 3; i++)
        if (ids[i] >= 0 && ids[i] < n_vocab && !(mask[ids[i] / 32] >> (ids[i] % 32) & 1u)) {
          set_bit(mask, ids[i], n_vocab);
          n++;
        }
      break;
    }
    case P_GRAMMAR:
      if (q->gw <= mw) {
        n = fill_mask(q, mask);
        if (q->gw < mw) memset(mask + q->gw, 0, sizeof(uint32_t) * (mw - q->gw));
      } else { /* a tokenizer larger than the model's vocabulary: ids past it are dropped */
        if (!q->scratch && !(q->scratch = malloc(sizeof(uint32_t) * q->gw))) return GT_ENOMEM;
        if ((n = fill_mask(q, q->scratch)) < 0) return n;
        memcpy(mask, q->scratch, sizeof(uint32_t) * mw);
        if (n_vocab % 32) mask[mw - 1] &= (1u << (n_vocab % 32)) - 1;
        n = 0;
        for (size_t w = 0; w < mw; w++) n += __builtin_popcount(mask[w]);
      }
      if (n < 0) return n;
      break;
    case P_REASON: /* over CONS_THINK_BUDGET: the reasoning is closed */
      memset(mask, 0, sizeof(uint32_t) * mw);
      set_bit(mask, q->k->think_end, n_vocab);
      return q->k->think_end >= 0 && q->k->think_end < n_vocab;
    default: /* P_END: nothing */
      memset(mask, 0, sizeof(uint32_t) * mw);
      return 0;
  }
  /* no escape: once the constrained part started, <think> / </think> are never allowed (their
   * text may be valid JSON string content, but the output parser would take it as reasoning) */
  if (q->phase == P_GRAMMAR) {
    clear_bit(mask, q->k->think_start, n_vocab, &n);
    clear_bit(mask, q->k->think_end, n_vocab, &n);
  }
  const int32_t ts = q->k->think_start;
  if (q->may_think && ts < n_vocab) { /* the model may open its reasoning first */
    if (!(mask[ts / 32] >> (ts % 32) & 1u)) n++;
    set_bit(mask, ts, n_vocab);
  }
  return n;
}

/* Doubles q->toks (from 64); 0 on failure. */
static int grow_toks(cons_seq_t *q) {
  size_t cap = q->cap_toks ? q->cap_toks * 2 : 64;
  int32_t *t = realloc(q->toks, cap * sizeof *t);
  if (!t) return 0;
  q->toks = t;
  q->cap_toks = cap;
  return 1;
}

/* After the prefix or the grammar: what comes next. */
static int after_grammar(cons_seq_t *q) {
  if (q->k->n_suffix) {
    q->phase = P_SUFFIX;
    q->pos = 0;
    return CONS_MORE;
  }
  q->phase = P_END;
  return CONS_DONE;
}

/* CONS_TOOL_CALLS: the next call's arguments, from the grammar's start. */
static int next_call(cons_seq_t *q) {
  gr_matcher_reset(q->m);
  q->n_toks = 0;
  q->phase = P_GRAMMAR;
  return CONS_MORE;
}

int cons_seq_accept(cons_seq_t *q, int32_t tok) {
  const cons_t *k = q->k;
  if (q->may_think) {
    q->may_think = 0;
    if (tok == k->think_start) {
      q->phase = P_REASON;
      return CONS_MORE;
    }
  }
  switch (q->phase) {
    case P_REASON:
      if (tok == k->think_end) q->phase = first_phase(k);
      else q->n_reason++;
      return CONS_MORE;
    case P_PREFIX:
      if (tok != k->prefix[q->pos]) return GT_EINVAL;
      if (++q->pos == k->n_prefix) q->phase = P_GRAMMAR;
      return CONS_MORE;
    case P_GRAMMAR: {
      if (q->n_toks == q->cap_toks && !grow_toks(q)) return GT_ENOMEM;
      int rc = gr_matcher_accept(q->m, tok);
      if (rc == GT_ERANGE && (rc = move_cache(q)) == GT_OK) rc = gr_matcher_accept(q->m, tok);
      if (rc) return rc;
      q->toks[q->n_toks++] = tok;
      return gr_matcher_done(q->m) ? after_grammar(q) : CONS_MORE;
    }
    case P_SUFFIX:
      if (tok != k->suffix[q->pos]) return GT_EINVAL;
      if (++q->pos < k->n_suffix) return CONS_MORE;
      if (k->n_again) { /* several calls: end here or call again */
        q->phase = P_MORE;
        return CONS_MORE;
      }
      q->phase = P_END;
      return CONS_DONE;
    case P_MORE:
      if (tok == k->ends[0] || tok == k->ends[1]) {
        q->phase = P_END;
        return CONS_DONE;
      }
      if (tok != k->again[0]) return GT_EINVAL;
      q->pos = 1;
      q->phase = P_AGAIN;
      return q->pos < k->n_again ? CONS_MORE : next_call(q);
    case P_AGAIN:
      if (tok != k->again[q->pos]) return GT_EINVAL;
      return ++q->pos < k->n_again ? CONS_MORE : next_call(q);
    case P_END: break;
  }
  return GT_EINVAL;
}

void cons_stats(cons_t *k, cons_stats_t *out) {
  out->mask_fills = atomic_load(&k->mask_fills);
  out->mask_hits = atomic_load(&k->mask_hits);
  out->caches = atomic_load(&k->caches);
  out->moves = atomic_load(&k->moves);
}

const char *cons_strerror(int rc) {
  switch (rc) {
    case GT_ERANGE:
      return "this output's grammar automaton outgrew its limits (the states per grammar cache: 65,536 or the "
             "engine's lower setting; 1,048,576 stack nodes)";
    case GT_ENOMEM: return "out of memory in the grammar matcher";
    case GT_EINVAL: return "the sampled token is not allowed by the mask";
    default: return "internal error in the grammar matcher";
  }
}
