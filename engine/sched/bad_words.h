/* engine/sched/bad_words.h — banned token sequences (vLLM's SamplingParams.bad_words).
 *
 * Each word is one or more token sequences (engine/server/server_convert.c tokenizes it with and
 * without a leading space, as vLLM does). A sequence s of length L is banned this way: when the
 * last L-1 generated tokens equal s[0..L-1), the logit of s[L-1] is set to -inf for the next token
 * (L = 1: that token is always banned). So no banned sequence is ever completed in the output. */
#ifndef GANTRY_ENGINE_BAD_WORDS_H
#define GANTRY_ENGINE_BAD_WORDS_H
#include <stdint.h>

typedef struct {
  int32_t *ids; /* all sequences back to back */
  int32_t *off; /* [n + 1]: sequence k is ids[off[k] .. off[k + 1]) */
  int n;
} badw_t;

/* Copies n sequences (lens[k] > 0 tokens each, ids back to back) into *b (zeroed on entry).
 * Returns 0, or -1 when out of memory (then *b holds nothing). */
int badw_copy(badw_t *b, const int32_t *ids, const int32_t *lens, int n);
void badw_free(badw_t *b);
/* lg[V]: bans the final token of every sequence whose other tokens end out[0..n_out). */
void badw_apply(const badw_t *b, const int32_t *out, int n_out, float *lg, int V);
#endif
