/* engine/grammar/gr_builder.c — building grammars rule by rule, UTF-8 classes, and flattening
 * into the compiled form (gr_internal.h). */
#include <stdlib.h>
#include <string.h>

#include "engine/grammar/gr_internal.h"

void gr_b_init(gr_builder_t *b) { memset(b, 0, sizeof *b); }

void gr_b_free(gr_builder_t *b) {
  for (size_t r = 0; r < b->n_rules; r++) {
    for (size_t a = 0; a < b->rules[r].n; a++) free(b->rules[r].alts[a].v);
    free(b->rules[r].alts);
  }
  free(b->rules);
  free(b->sets);
  memset(b, 0, sizeof *b);
}

int gr_grow(void **p, size_t *cap, size_t need, size_t sz) {
  if (need <= *cap) return 1;
  size_t c = *cap ? *cap * 2 : 16;
  while (c < need) c *= 2;
  void *q = realloc(*p, c * sz);
  if (!q) return 0;
  *p = q;
  *cap = c;
  return 1;
}

int32_t gr_b_rule(gr_builder_t *b) {
  if (b->oom || !gr_grow((void **)&b->rules, &b->cap_rules, b->n_rules + 1, sizeof *b->rules)) {
    b->oom = 1;
    return -1;
  }
  memset(&b->rules[b->n_rules], 0, sizeof b->rules[0]);
  return (int32_t)b->n_rules++;
}

gr_seq_t *gr_b_alt(gr_builder_t *b, int32_t r) {
  if (b->oom || r < 0) return NULL;
  gr_rule_t *rule = &b->rules[r];
  if (!gr_grow((void **)&rule->alts, &rule->cap, rule->n + 1, sizeof *rule->alts)) {
    b->oom = 1;
    return NULL;
  }
  gr_seq_t *s = &rule->alts[rule->n++];
  memset(s, 0, sizeof *s);
  return s;
}

static void push(gr_builder_t *b, gr_seq_t *s, int32_t kind, int32_t arg) {
  if (!s || b->oom) return;
  if (!gr_grow((void **)&s->v, &s->cap, s->n + 1, sizeof *s->v)) {
    b->oom = 1;
    return;
  }
  s->v[s->n++] = (gr_elem_t){kind, arg};
}

void gr_b_ref(gr_builder_t *b, gr_seq_t *s, int32_t rule) {
  if (rule < 0) b->oom = 1; /* a failed gr_b_rule */
  push(b, s, GR_RULE, rule);
}

void gr_b_set(gr_builder_t *b, gr_seq_t *s, const gr_set_t *set) {
  if (!s || b->oom) return;
  size_t i = 0; /* sets are few and small: reuse an equal one */
  while (i < b->n_sets && memcmp(&b->sets[i], set, sizeof *set) != 0) i++;
  if (i == b->n_sets) {
    if (!gr_grow((void **)&b->sets, &b->cap_sets, b->n_sets + 1, sizeof *b->sets)) {
      b->oom = 1;
      return;
    }
    b->sets[b->n_sets++] = *set;
  }
  push(b, s, GR_SET, (int32_t)i);
}

void gr_b_byte_range(gr_builder_t *b, gr_seq_t *s, unsigned lo, unsigned hi) {
  gr_set_t set = {{0}};
  for (unsigned c = lo; c <= hi && c < 256; c++) set.w[c >> 5] |= 1u << (c & 31);
  gr_b_set(b, s, &set);
}

void gr_b_lit(gr_builder_t *b, gr_seq_t *s, const char *bytes, size_t len) {
  for (size_t i = 0; i < len; i++) gr_b_byte_range(b, s, (unsigned char)bytes[i], (unsigned char)bytes[i]);
}

int32_t gr_b_lit_rule(gr_builder_t *b, const char *bytes, size_t len) {
  int32_t r = gr_b_rule(b);
  gr_b_lit(b, gr_b_alt(b, r), bytes, len);
  return r;
}

int32_t gr_b_opt(gr_builder_t *b, int32_t x) {
  int32_t r = gr_b_rule(b);
  gr_b_ref(b, gr_b_alt(b, r), x);
  gr_b_alt(b, r);
  return r;
}

int32_t gr_b_star(gr_builder_t *b, int32_t x) {
  int32_t r = gr_b_rule(b);
  gr_seq_t *s = gr_b_alt(b, r);
  gr_b_ref(b, s, x);
  gr_b_ref(b, s, r); /* last element: a tail call, the stack does not grow */
  gr_b_alt(b, r);
  return r;
}

int32_t gr_b_repeat(gr_builder_t *b, int32_t x, int min, int max) {
  int32_t tail = -1; /* what may follow the min mandatory copies */
  if (max < 0) {
    tail = gr_b_star(b, x);
  } else {
    for (int k = 0; k < max - min; k++) { /* T_k ::= x T_{k-1} | "" (nested: unambiguous) */
      int32_t t = gr_b_rule(b);
      gr_seq_t *s = gr_b_alt(b, t);
      gr_b_ref(b, s, x);
      if (tail >= 0) gr_b_ref(b, s, tail);
      gr_b_alt(b, t);
      tail = t;
    }
  }
  int32_t r = gr_b_rule(b);
  gr_seq_t *s = gr_b_alt(b, r);
  for (int i = 0; i < min; i++) gr_b_ref(b, s, x);
  if (tail >= 0) gr_b_ref(b, s, tail);
  return r;
}

int32_t gr_b_list(gr_builder_t *b, int32_t x, int32_t sep, int min, int max) {
  int32_t r = gr_b_rule(b);
  if (max != 0) {
    int32_t pair = gr_b_rule(b);
    gr_seq_t *p = gr_b_alt(b, pair);
    gr_b_ref(b, p, sep);
    gr_b_ref(b, p, x);
    int32_t rest = gr_b_repeat(b, pair, min > 1 ? min - 1 : 0, max < 0 ? -1 : max - 1);
    gr_seq_t *s = gr_b_alt(b, r);
    gr_b_ref(b, s, x);
    gr_b_ref(b, s, rest);
  }
  if (min == 0) gr_b_alt(b, r);
  return r;
}

/* ------------------------------------------------------------ UTF-8 classes */

static int cmp_range(const void *a, const void *b) {
  const gr_range_t *x = a, *y = b;
  return x->lo < y->lo ? -1 : x->lo > y->lo;
}

size_t gr_ranges_normalize(gr_range_t *r, size_t n) {
  if (n == 0) return 0;
  qsort(r, n, sizeof *r, cmp_range);
  size_t k = 0;
  for (size_t i = 1; i < n; i++) {
    if (r[i].lo <= r[k].hi + 1) {
      if (r[i].hi > r[k].hi) r[k].hi = r[i].hi;
    } else {
      r[++k] = r[i];
    }
  }
  return k + 1;
}

size_t gr_ranges_negate(const gr_range_t *r, size_t n, gr_range_t *out) {
  size_t k = 0;
  uint32_t next = 0;
  for (size_t i = 0; i < n; i++) {
    if (r[i].lo > next) out[k++] = (gr_range_t){next, r[i].lo - 1};
    next = r[i].hi + 1;
  }
  if (next <= 0x10FFFF) out[k++] = (gr_range_t){next, 0x10FFFF};
  return k;
}

static int utf8_enc(uint32_t c, unsigned char *o) {
  if (c < 0x80) { o[0] = (unsigned char)c; return 1; }
  if (c < 0x800) { o[0] = 0xC0 | (c >> 6); o[1] = 0x80 | (c & 63); return 2; }
  if (c < 0x10000) { o[0] = 0xE0 | (c >> 12); o[1] = 0x80 | ((c >> 6) & 63); o[2] = 0x80 | (c & 63); return 3; }
  o[0] = 0xF0 | (c >> 18); o[1] = 0x80 | ((c >> 12) & 63); o[2] = 0x80 | ((c >> 6) & 63); o[3] = 0x80 | (c & 63);
  return 4;
}

/* Emits [lo, hi] as alternatives of r, each a sequence of byte ranges (Rust's utf8-ranges
 * splitting); one-byte ranges are gathered into *ascii instead. */
static void utf8_split(gr_builder_t *b, int32_t r, gr_set_t *ascii, uint32_t lo, uint32_t hi) {
  while (lo <= hi) {
    if (lo >= 0xD800 && lo <= 0xDFFF) { lo = 0xE000; continue; } /* no surrogates */
    if (lo < 0xD800 && hi >= 0xD800) {
      utf8_split(b, r, ascii, lo, 0xD7FF);
      lo = 0xE000;
      continue;
    }
    static const uint32_t lens[3] = {0x7F, 0x7FF, 0xFFFF};
    int split = 0;
    for (int i = 0; i < 3 && !split; i++) {
      if (lo <= lens[i] && hi > lens[i]) {
        utf8_split(b, r, ascii, lo, lens[i]);
        lo = lens[i] + 1;
        split = 1;
      }
    }
    if (split) continue;
    if (hi < 0x80) {
      for (uint32_t c = lo; c <= hi; c++) ascii->w[c >> 5] |= 1u << (c & 31);
      return;
    }
    for (int i = 1; i < 4 && !split; i++) {
      uint32_t m = (1u << (6 * i)) - 1;
      if ((lo & ~m) != (hi & ~m)) {
        if ((lo & m) != 0) {
          utf8_split(b, r, ascii, lo, lo | m);
          lo = (lo | m) + 1;
          split = 1;
        } else if ((hi & m) != m) {
          utf8_split(b, r, ascii, hi & ~m, hi);
          hi = (hi & ~m) - 1;
          split = 1;
        }
      }
    }
    if (split) continue;
    unsigned char a[4], z[4];
    int n = utf8_enc(lo, a);
    utf8_enc(hi, z);
    gr_seq_t *s = gr_b_alt(b, r);
    for (int i = 0; i < n; i++) gr_b_byte_range(b, s, a[i], z[i]);
    return;
  }
}

int32_t gr_b_utf8_class(gr_builder_t *b, const gr_range_t *rg, size_t n) {
  int32_t r = gr_b_rule(b);
  gr_set_t ascii = {{0}};
  for (size_t i = 0; i < n; i++) utf8_split(b, r, &ascii, rg[i].lo, rg[i].hi > 0x10FFFF ? 0x10FFFF : rg[i].hi);
  int any = 0;
  for (int i = 0; i < 8; i++) any |= ascii.w[i] != 0;
  if (any) gr_b_set(b, gr_b_alt(b, r), &ascii);
  return r;
}

/* ------------------------------------------------------------ flattening */

int gr_b_finish(gr_builder_t *b, int32_t root, gr_grammar_t **out, gt_err_t *err) {
  *out = NULL;
  if (b->oom || root < 0) {
    gr_b_free(b);
    return gt_err_set(err, GT_ENOMEM, "grammar: out of memory while building rules");
  }
  size_t n_alts = 0, n_elems = 0;
  for (size_t r = 0; r < b->n_rules; r++) {
    n_alts += b->rules[r].n;
    for (size_t a = 0; a < b->rules[r].n; a++) n_elems += b->rules[r].alts[a].n + 1;
  }
  gr_grammar_t *g = calloc(1, sizeof *g);
  if (g) {
    g->elems = malloc((n_elems ? n_elems : 1) * sizeof *g->elems);
    g->alts = malloc((n_alts ? n_alts : 1) * sizeof *g->alts);
    g->alt_first = malloc((b->n_rules + 1) * sizeof *g->alt_first);
    g->sets = malloc((b->n_sets ? b->n_sets : 1) * sizeof *g->sets);
  }
  if (!g || !g->elems || !g->alts || !g->alt_first || !g->sets) {
    gr_grammar_free(g);
    gr_b_free(b);
    return gt_err_set(err, GT_ENOMEM, "grammar: out of memory");
  }
  size_t e = 0, k = 0;
  for (size_t r = 0; r < b->n_rules; r++) {
    g->alt_first[r] = (int32_t)k;
    for (size_t a = 0; a < b->rules[r].n; a++) {
      g->alts[k++] = (int32_t)e;
      gr_seq_t *s = &b->rules[r].alts[a];
      if (s->n) memcpy(&g->elems[e], s->v, s->n * sizeof *s->v);
      e += s->n;
      g->elems[e++] = (gr_elem_t){GR_END, 0};
    }
  }
  g->alt_first[b->n_rules] = (int32_t)k;
  if (b->n_sets) memcpy(g->sets, b->sets, b->n_sets * sizeof *b->sets);
  g->n_elems = n_elems;
  g->n_sets = b->n_sets;
  g->n_rules = b->n_rules;
  g->root = root;
  gr_b_free(b);
  *out = g;
  return GT_OK;
}

void gr_grammar_free(gr_grammar_t *g) {
  if (!g) return;
  free(g->elems);
  free(g->alts);
  free(g->alt_first);
  free(g->sets);
  free(g);
}
