/* engine/grammar/grammar.h — constrained decoding: a grammar compiled once per request shape,
 * a token mask per decode step (gantry_grammar; depends on common/ and format/ only).
 *
 * Every kind compiles to one internal form, a byte-level context-free grammar run as a
 * pushdown automaton (llama.cpp's GBNF stacks over bytes instead of code points, so byte-level
 * BPE tokens that end inside a UTF-8 character are handled exactly). A gr_cache_t (private to
 * a matcher, or shared by all requests with one grammar) interns the automaton's configurations
 * (sets of stacks) as states, memoises byte transitions between them (a lazily built DFA) and
 * caches each state's token mask (XGrammar's precomputed masks): a state's first mask walks the
 * vocabulary trie once, pruning dead prefixes and taking whole subtrees of plain text where the
 * state loops on it (inside strings); revisits copy it.
 *
 * Kinds and their spec text:
 *   GR_JSON_SCHEMA  JSON schema. Supported: type (string, number, integer, boolean, null,
 *                   object, array, or a list of them), properties (generated in schema order),
 *                   required (optional properties may be skipped), additionalProperties
 *                   (never generated next to properties: false by default; with no properties,
 *                   a schema or true gives a map of string keys to that schema), enum, const,
 *                   items, minItems, maxItems (<= 1024 when bounded), anyOf and oneOf (both as
 *                   anyOf), allOf with one member, $ref to local "#/..." pointers ($defs,
 *                   definitions, any path; recursion allowed), minLength/maxLength (<= 1024)
 *                   on strings, pattern (a GR_REGEX over the string's text, matched as a whole:
 *                   ^ and $ implied, a subset of JSON schema's search semantics; written
 *                   JSON-escaped) and format date, time, date-time, uuid, ipv4, email (as
 *                   patterns, subsets of ajv-formats' full mode; other formats unsupported);
 *                   pattern/format not with min/maxLength; pattern and format together: the
 *                   pattern, or the format when the pattern has lookaround (Zod's email). minimum, maximum,
 *                   exclusiveMinimum, exclusiveMaximum (numbers, or draft 4's booleans) on
 *                   integers (within 16 digits) and numbers (plain decimals; a non-integer bound
 *                   is tightened to the integer inside it). multipleOf: an integer up to 64, not
 *                   with bounds. prefixItems (then items' members: up to maxItems when items is a
 *                   schema, as many as minItems needs otherwise). uniqueItems only with maxItems
 *                   <= 1. minProperties / maxProperties (the first optional properties are made
 *                   required / the last left out; on maps, the member count). patternProperties
 *                   alone (a map whose keys match the patterns); propertyNames only as
 *                   {"type": "string"}. $ref, const, enum, anyOf, oneOf and allOf stand alone (enum
 *                   and const may sit next to a type that all their values have): combined with
 *                   each other or with constraints they give GT_EUNSUPPORTED naming both, as the
 *                   constraints would otherwise be dropped. Annotations are ignored: title,
 *                   description, default, examples, $schema, $id, $comment, deprecated,
 *                   readOnly, writeOnly ($defs/definitions hold $ref targets). Every other
 *                   keyword (not, if / then / else, dependentRequired, nullable, ...)
 *                   gives GT_EUNSUPPORTED naming it.
 *   GR_JSON_OBJECT  spec ignored (may be NULL): any JSON object.
 *   GR_CHOICE       a JSON array of strings: the output is exactly one of them (raw text, not
 *                   JSON-quoted).
 *   GR_REGEX        an ECMAScript-like regex matched against the whole output: literals,
 *                   escapes (\n \t \r \f \v \0 \xHH \uHHHH \u{H..} and escaped punctuation),
 *                   ., [...], [^...], \d \w \s \D \W \S, (...), (?:...), |, ?, *, +, {m},
 *                   {m,}, {m,n} (lazy '?' suffixes accepted: same language), ^ at the start and
 *                   $ at the end, named groups (?<n>...) (the name is ignored). Backreferences,
 *                   lookaround, \b \B, \p{..}, octal escapes and anchors elsewhere give
 *                   GT_EUNSUPPORTED; a '{' that does not start a quantifier is a literal.
 *                   '.' is any code point but \n \r U+2028 U+2029.
 * Generated JSON is compact apart from bounded whitespace: after '{', '[', ',', ':' and after
 * values inside containers, nothing, one space, or a newline and up to 20 spaces/tabs (the model
 * cannot loop on whitespace). Numbers have at most 16 integer, 16 fraction and 2 exponent
 * digits (every number fits a double, so no parser sees an overflow). String escapes \uXXXX
 * exclude 0000 and the surrogates (strict parsers such as jansson refuse them; raw UTF-8 is
 * allowed for every character). No whitespace before or after the top-level value, so a
 * matcher is done right after it.
 *
 * Threads: a gr_grammar_t and a gr_vocab_t are immutable after creation and may be shared by
 * any number of matchers on any threads; so may a gr_cache_t (it locks); a gr_matcher_t is
 * used by one thread at a time. */
#ifndef GANTRY_ENGINE_GRAMMAR_H
#define GANTRY_ENGINE_GRAMMAR_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "format/tokenizer.h"

typedef enum { GR_JSON_SCHEMA, GR_JSON_OBJECT, GR_CHOICE, GR_REGEX } gr_kind_t;
typedef struct gr_grammar gr_grammar_t; /* compiled, immutable, shared by sequences (thread-safe reads) */
typedef struct gr_vocab gr_vocab_t;     /* per tokenizer, built once: token id -> bytes, a trie */
typedef struct gr_matcher gr_matcher_t; /* per sequence */

/* Compiles spec[0..len) of the given kind. On success *out is owned by the caller
 * (gr_grammar_free). Errors: GT_EINVAL (malformed spec: bad JSON, bad regex, bad $ref, naming
 * where), GT_EUNSUPPORTED (naming the keyword or construct), GT_ERANGE (a bound over the
 * limits above), GT_ENOMEM; *out is NULL then. */
int gr_compile(gr_kind_t kind, const char *spec, size_t len, gr_grammar_t **out, gt_err_t *err);
void gr_grammar_free(gr_grammar_t *g);

/* Builds the vocabulary trie of tok (normal and byte tokens with a non-empty piece; control,
 * user-defined, unused and unknown tokens are never allowed except tok_eos / tok_eot, which
 * are allowed iff the grammar accepts). tok may be freed afterwards. Caller owns *out. */
int gr_vocab_new(const tok_t *tok, gr_vocab_t **out, gt_err_t *err);
void gr_vocab_free(gr_vocab_t *v);
/* Same, with the end-of-generation set given (e.g. the engine's stop tokens: Qwen's <|im_end|>
 * and <|endoftext|>) instead of tok_eos/tok_eot: ends[0..n_ends) are allowed iff the grammar
 * accepts, whatever their type. At most GR_MAX_END_TOKENS ids, each < n_vocab (GT_EINVAL). */
#define GR_MAX_END_TOKENS 16
int gr_vocab_new_with_ends(const tok_t *tok, const int32_t *ends, size_t n_ends, gr_vocab_t **out,
                           gt_err_t *err);
size_t gr_mask_words(const gr_vocab_t *v);            /* ceil(n_vocab / 32) */
size_t gr_vocab_size(const gr_vocab_t *v);            /* n_vocab */

/* A matcher at the start of g's language, with a private cache (use gr_matcher_new_cached to
 * share one). g and v must outlive it. Caller owns *out. */
int gr_matcher_new(const gr_grammar_t *g, const gr_vocab_t *v, gr_matcher_t **out, gt_err_t *err);
void gr_matcher_free(gr_matcher_t *m);

/* mask[gr_mask_words] : bit (id % 32) of word id / 32 set = token allowed next. End-of-generation
 * tokens (tok_eos/tok_eot, or gr_vocab_new_with_ends' set) are allowed iff the grammar is in an
 * accepting state. Control/special tokens are otherwise never allowed. Returns the number of
 * allowed tokens (0 = dead end), or a negative GT_E* code (GT_ENOMEM, or GT_ERANGE when the
 * cache's state tables exceed their limits); mask is all zero then. After an end-of-generation
 * token was accepted nothing is allowed (0). */
int gr_matcher_fill_mask(gr_matcher_t *m, uint32_t *mask);
/* GT_OK, or GT_EINVAL when not allowed (state unchanged); GT_ENOMEM / GT_ERANGE as above. */
int gr_matcher_accept(gr_matcher_t *m, int32_t token);
int gr_matcher_accepting(const gr_matcher_t *m);     /* the text so far is a complete match */
int gr_matcher_done(const gr_matcher_t *m);          /* accepting and nothing can follow: stop now */

/* Added API (beyond the fixed one above). */

/* The automaton of g over v (interned states, byte transitions, token masks), shareable by the
 * matchers of many sequences on any threads (a mutex inside): what one sequence computed serves
 * all others, so a schema seen before is warm from its first token (XGrammar's compiled-grammar
 * cache). Reference-counted: gr_cache_free drops the creator's reference and each matcher holds
 * its own, so a cache may be dropped from an LRU while sequences still use it. It grows with the
 * distinct states visited (at most 65,536 states of about 1 KiB and 1,048,576 stack nodes, plus
 * cached masks, which are all dropped past 64 MiB); past that, fill_mask/accept return
 * GT_ERANGE. g and v must outlive
 * it. Errors: GT_EINVAL (the grammar matches nothing), GT_ENOMEM. */
typedef struct gr_cache gr_cache_t;
int gr_cache_new(const gr_grammar_t *g, const gr_vocab_t *v, gr_cache_t **out, gt_err_t *err);
/* Same, holding at most max_states states (0 or over 65,536: 65,536): a smaller memory bound per
 * grammar (each state costs about 1 KiB of transitions), and tests of the full-cache paths. */
int gr_cache_new_limited(const gr_grammar_t *g, const gr_vocab_t *v, size_t max_states, gr_cache_t **out,
                         gt_err_t *err);
void gr_cache_free(gr_cache_t *c);
/* A matcher at the start state of c's grammar, holding a reference to c. */
int gr_matcher_new_cached(gr_cache_t *c, gr_matcher_t **out, gt_err_t *err);
/* 1 once c refused a new state or stack node for its limits (sticky: from then on its matchers
 * get GT_ERANGE whenever they need a state it does not hold yet), else 0. A cache shared across
 * requests that is full is replaced by a fresh one for new requests
 * (engine/sched/constraint.c). */
int gr_cache_full(gr_cache_t *c);

/* Feeds raw bytes (tests, forced text such as a tool call's prefix): GT_OK, or GT_EINVAL at the
 * first byte not allowed (state unchanged: all or nothing). */
int gr_matcher_accept_bytes(gr_matcher_t *m, const char *bytes, size_t len);
/* Undoes the last n_tokens gr_matcher_accept calls (speculative decoding, tests); GT_EINVAL
 * when fewer were accepted since the start or the last reset. Bytes fed by
 * gr_matcher_accept_bytes are not undone separately: they belong to the token accepted before
 * them. */
int gr_matcher_rollback(gr_matcher_t *m, size_t n_tokens);
/* Back to the start state; cached states and masks are kept (a cheap restart for n > 1 or a
 * retried sequence). */
void gr_matcher_reset(gr_matcher_t *m);
/* Counters for benchmarks and logs. */
typedef struct {
  size_t n_states;      /* interned automaton states */
  size_t n_nodes;       /* interned stack nodes */
  size_t mask_hits;     /* fill_mask calls served from the cache */
  size_t mask_misses;   /* fill_mask calls that walked the trie */
  size_t trie_visits;   /* trie nodes visited by all walks */
} gr_stats_t;
void gr_matcher_stats(const gr_matcher_t *m, gr_stats_t *out);

#endif
