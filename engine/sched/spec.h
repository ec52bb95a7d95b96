/* engine/sched/spec.h — speculative decoding: the draft proposers the scheduler verifies
 * (engine/sched/sched.c, engine/SERVE.md "Speculative decoding").
 *
 * Prompt lookup (n-gram): the last n tokens of a sequence (its prompt followed by its output)
 * are looked up earlier in the same sequence; the tokens that followed the most recent earlier
 * occurrence are the drafts. Longer n-grams are tried first. Pure functions, no state. */
#ifndef GANTRY_ENGINE_SPEC_H
#define GANTRY_ENGINE_SPEC_H

#include <stdint.h>

/* Drafts for toks[0..n): the continuation (up to k tokens, never past n) of the most recent
 * earlier occurrence of the longest suffix of length in [min_n, max_n] that occurs earlier.
 * Writes out[k]; returns the number of drafts (0: no suffix of those lengths recurs). */
int spec_ngram_draft(const int32_t *toks, int n, int k, int min_n, int max_n, int32_t *out);

#endif
