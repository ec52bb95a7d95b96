/* engine/sched/spec_suffix.h — drafts from what recent requests generated (suffix decoding across
 * requests, after SuffixDecoding): prompt lookup (spec.h) finds only what a sequence's own prompt
 * and output hold; this cache finds what finished requests of the same salt wrote, so a repeated
 * or regenerated request, an agent loop's next call or a template answer drafts the earlier output.
 *
 * The cache holds runs of tokens, each a finished request's output after the last
 * SPEC_SUFFIX_CTX tokens of its prompt (so that the start of an output is found from the prompt's
 * end), each run followed by a -1, up to cap tokens in two halves: when the newer half has no
 * room for a run, the older half is emptied (whole runs: one reset of its index, no copy, no
 * re-index) and takes the new runs.
 * Every run carries its request's salt (sched_req_t.cache_salt: the router salts by tenant), and
 * a lookup only finds runs of its own salt. Grams of SPEC_SUFFIX_MIN_N..SPEC_SUFFIX_MAX_N tokens
 * are indexed (spec_index.h): longer than prompt lookup's, since a match across requests needs
 * more context to predict. Drafts only choose what is verified: output never depends on them.
 * Owned by one thread. Memory, taken at create: about 64 bytes per token of cap (tokens, salts,
 * index). */
#ifndef GANTRY_ENGINE_SPEC_SUFFIX_H
#define GANTRY_ENGINE_SPEC_SUFFIX_H

#include <stdint.h>

#define SPEC_SUFFIX_MIN_N 4
#define SPEC_SUFFIX_MAX_N 8
#define SPEC_SUFFIX_CTX 16

typedef struct spec_suffix spec_suffix_t;

/* A cache of at most cap tokens (>= 64), its memory taken now; NULL on out of memory. */
spec_suffix_t *spec_suffix_create(int cap);
void spec_suffix_free(spec_suffix_t *c);
/* Adds a finished request of tokens toks[0..n) whose output starts at from (its prompt is
 * toks[0..from)): the output after the prompt's last SPEC_SUFFIX_CTX tokens (only the newest
 * cap / 2 - 1 tokens of a longer run). Nothing without output. 0, or -1 when indexing failed
 * (the newer half is then empty). */
int spec_suffix_add(spec_suffix_t *c, const int32_t *toks, int n, int from, uint64_t salt);
/* Up to k drafts for the sequence key[0..n_key) into out: what followed the newest occurrence,
 * in a run of this salt, of the longest suffix of key of SPEC_SUFFIX_MIN_N..SPEC_SUFFIX_MAX_N
 * tokens, up to the end of that run. Returns the number of drafts (0: none); *g = the length
 * of that suffix (0: none). */
int spec_suffix_draft(const spec_suffix_t *c, const int32_t *key, int n_key, uint64_t salt, int k, int32_t *out, int *g);
/* Tokens held (separators included). */
int spec_suffix_tokens(const spec_suffix_t *c);

#endif
