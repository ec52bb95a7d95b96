/* engine/grammar/gr_internal.h — the compiled grammar form shared by the compilers and the
 * matcher, and the builder the compilers write rules with.
 *
 * A grammar is a set of rules; a rule is a list of alternatives; an alternative is a sequence of
 * elements, each a byte set (a terminal that consumes one byte in the set) or a rule reference,
 * ended by GR_END. All alternatives live in one flat elems[] array; a position in it (the next
 * element to match) is what a parse stack holds. Rules must not be left-recursive (the
 * compilers only write right recursion); nullable cycles are fine. */
#ifndef GANTRY_ENGINE_GR_INTERNAL_H
#define GANTRY_ENGINE_GR_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "engine/grammar/grammar.h"

enum { GR_END = 0, GR_SET = 1, GR_RULE = 2 };

typedef struct {
  int32_t kind; /* GR_END / GR_SET / GR_RULE */
  int32_t arg;  /* GR_SET: index into sets; GR_RULE: rule id */
} gr_elem_t;

typedef struct {
  uint32_t w[8]; /* bit b%32 of w[b/32]: byte b in the set */
} gr_set_t;

struct gr_grammar {
  gr_elem_t *elems;     /* all alternatives, each ended by GR_END */
  size_t n_elems;
  gr_set_t *sets;
  size_t n_sets;
  int32_t *alt_first;   /* rule r's alternatives start at alts[alt_first[r] .. alt_first[r+1]) */
  int32_t *alts;        /* positions in elems */
  size_t n_rules;
  int32_t root;
};

/* Grows the array *p (elements of size sz, capacity *cap, doubling from 16) to hold need
 * elements; 0 on failure (*p unchanged). */
int gr_grow(void **p, size_t *cap, size_t need, size_t sz);

/* ------------------------------------------------------------ builder */
typedef struct {
  gr_elem_t *v;
  size_t n, cap;
} gr_seq_t;

typedef struct {
  gr_seq_t *alts;
  size_t n, cap;
} gr_rule_t;

typedef struct {
  gr_rule_t *rules;
  size_t n_rules, cap_rules;
  gr_set_t *sets;
  size_t n_sets, cap_sets;
  int oom;              /* sticky: an allocation failed; gr_b_finish reports it */
} gr_builder_t;

void gr_b_init(gr_builder_t *b);
void gr_b_free(gr_builder_t *b);
/* A new rule with no alternatives; returns its id (-1 after an allocation failure). */
int32_t gr_b_rule(gr_builder_t *b);
/* Starts a new alternative of rule r; returns a handle for the appends below (NULL on OOM,
 * which the appends accept and ignore: the builder stays sticky-failed). The handle stays
 * valid until the next gr_b_alt on the same rule. */
gr_seq_t *gr_b_alt(gr_builder_t *b, int32_t r);
void gr_b_ref(gr_builder_t *b, gr_seq_t *s, int32_t rule);
void gr_b_set(gr_builder_t *b, gr_seq_t *s, const gr_set_t *set);
void gr_b_byte_range(gr_builder_t *b, gr_seq_t *s, unsigned lo, unsigned hi);
void gr_b_lit(gr_builder_t *b, gr_seq_t *s, const char *bytes, size_t len);
/* Rules of common shapes; each returns the new rule's id. */
int32_t gr_b_lit_rule(gr_builder_t *b, const char *bytes, size_t len);   /* exactly bytes */
int32_t gr_b_opt(gr_builder_t *b, int32_t x);                           /* x | "" */
int32_t gr_b_star(gr_builder_t *b, int32_t x);                          /* x* (right recursive) */
/* x{min,max}; max < 0 = unbounded. Caller checks the bounds (rules grow with max - min). */
int32_t gr_b_repeat(gr_builder_t *b, int32_t x, int min, int max);
/* x (sep x){min-1,max-1} when min >= 1; also "" allowed when min == 0. max < 0 = unbounded. */
int32_t gr_b_list(gr_builder_t *b, int32_t x, int32_t sep, int min, int max);

/* Code point ranges (inclusive, sorted, disjoint, within [0, 0x10FFFF], no surrogates
 * needed: they are dropped) -> a rule matching one UTF-8 encoded code point in them. */
typedef struct {
  uint32_t lo, hi;
} gr_range_t;
int32_t gr_b_utf8_class(gr_builder_t *b, const gr_range_t *r, size_t n);
/* Sorts and merges ranges in place; returns the new count. */
size_t gr_ranges_normalize(gr_range_t *r, size_t n);
/* Complement of normalized ranges within [0, 0x10FFFF] into out (n + 1 entries at most). */
size_t gr_ranges_negate(const gr_range_t *r, size_t n, gr_range_t *out);

/* Turns the builder into a grammar rooted at root (the builder is emptied). GT_ENOMEM after
 * any failed allocation. */
int gr_b_finish(gr_builder_t *b, int32_t root, gr_grammar_t **out, gt_err_t *err);

/* Compilers (gr_json.c, gr_regex.c): write rules into b and return the root rule in *root. */
int gr_json_schema(gr_builder_t *b, const char *spec, size_t len, int32_t *root, gt_err_t *err);
int gr_json_object(gr_builder_t *b, int32_t *root, gt_err_t *err);
int gr_choice(gr_builder_t *b, const char *spec, size_t len, int32_t *root, gt_err_t *err);
int gr_regex(gr_builder_t *b, const char *spec, size_t len, int32_t *root, gt_err_t *err);
/* The same regex for the content of a JSON string (between the quotes): each matching text is
 * written JSON-escaped. who prefixes error messages. */
int gr_regex_json(gr_builder_t *b, const char *spec, size_t len, const char *who, int32_t *root, gt_err_t *err);

/* A GR_REGEX pattern for the decimal integers in [lo, hi] (|lo|, |hi| < 10^18) into buf; its
 * length, or -1 when lo > hi or cap is too small. */
int gr_int_range_regex(int64_t lo, int64_t hi, char *buf, size_t cap);

#define GR_MAX_REPEAT 1024 /* largest bounded repetition count (rules grow with it) */

#endif
