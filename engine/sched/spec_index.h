/* engine/sched/spec_index.h — a hashed index of the n-grams of a token array, for prompt lookup
 * (engine/sched/spec.h) without a scan of the whole array per lookup.
 *
 * Every gram of g tokens (min_n <= g <= max_n) that ends at a position e < n_in is an entry
 * (g, e) in one hash table of chains: head[bucket] is the newest entry of the bucket, prev[entry]
 * the next older one. Entries go in by increasing e, so a chain lists its grams newest first, and
 * the first entry of a chain that holds the key's g tokens is the most recent occurrence: the same
 * answer as a scan from the end (spec_ngram_draft), found in O(chain) instead of O(n). A bucket
 * holds grams of every length; the table keeps at most one entry per bucket on average (grown,
 * and rebuilt, as entries come in). Memory: 8 to 12 * (max_n - min_n + 1) bytes per indexed
 * position. Owned by one thread. */
#ifndef GANTRY_ENGINE_SPEC_INDEX_H
#define GANTRY_ENGINE_SPEC_INDEX_H

#include <stdint.h>

typedef struct {
  int32_t *head;    /* [1 << bits] newest entry id + 1 of each bucket (0: empty) */
  int32_t *prev;    /* [cap_e] the bucket's next older entry id + 1 (0: none); entry id = e * n_g + g - min_n */
  int bits, cap_e;
  int min_n, max_n, n_g;
  int n_in;         /* grams ending before position n_in are indexed */
} spec_index_t;

/* A zeroed spec_index_t is an empty index (nothing allocated). */
void spec_index_free(spec_index_t *x);
/* Drops every entry and sets the gram lengths (1 <= min_n <= max_n); keeps the memory. */
void spec_index_reset(spec_index_t *x, int min_n, int max_n);
/* Sizes the index for n positions (after spec_index_reset), so that indexing that many rebuilds
 * nothing. 0, or -1 on out of memory. */
int spec_index_reserve(spec_index_t *x, int n);
/* Indexes the grams of toks that end at positions n_in .. upto - 1 (toks[0..upto) must extend the
 * tokens already indexed: the same values at the same positions), with the tag of their end
 * position (tags NULL: untagged; an index is either tagged or not, and finds look it up the same
 * way). 0, or -1 on out of memory (the index is then empty: spec_index_reset before the next use). */
int spec_index_extend(spec_index_t *x, const int32_t *toks, const uint64_t *tags, int upto);
/* The longest g in [min_n, min(max_n, max_g)] such that the last g tokens of key[0..n_key) occur
 * in toks as an indexed gram (tags NULL: an untagged index; else a tagged one, and only grams whose
 * end position e has tags[e] == tag);
 * *end = the end position of the newest such occurrence. Returns g, or 0 when none does. A gram
 * holding an id < 0, or followed by one, is never indexed (key ids are >= 0): negative ids
 * separate runs of tokens. */
int spec_index_find(const spec_index_t *x, const int32_t *toks, const uint64_t *tags, uint64_t tag, const int32_t *key,
                    int n_key, int max_g, int *end);

/* spec_ngram_draft's drafts for toks[0..n) through x: x indexes the grams of one growing sequence
 * (the tokens of every earlier call are a prefix of toks; any other change needs a reset first,
 * and so does a different min_n / max_n, which draft does itself). Returns the number of drafts
 * written to out[k], or -1 on out of memory (out untouched: the caller scans instead); *g (may
 * be NULL) = the length of the n-gram that matched (0: none). */
int spec_index_draft(spec_index_t *x, const int32_t *toks, int n, int k, int min_n, int max_n, int32_t *out, int *g);

#endif
