/* clients/bench_prompt.h — prompts of a given length in tokens, calibrated through the
 * server's vLLM-style `POST /tokenize` ({"model", "prompt"} -> {"tokens": [...], "count": N}). */
#ifndef GANTRY_CLIENTS_BENCH_PROMPT_H
#define GANTRY_CLIENTS_BENCH_PROMPT_H

#include <stdint.h>

#include "clients/http.h"
#include "common/err.h"

/* Deterministic filler text of n_words words drawn with seed (malloc'd; NULL on OOM). */
char *gc_prompt_words(uint64_t seed, int n_words);

/* Counts the tokens of text with the server's /tokenize. GT_OK and *count, or an error (the
 * endpoint missing gives GT_EUNSUPPORTED). */
int gc_tokenize_count(const gc_http_t *h, const char *model, const char *text, int *count, gt_err_t *err);

/* A token counter: GT_OK and *count, or an error. */
typedef int (*gc_count_fn)(void *ud, const char *text, int *count, gt_err_t *err);

/* Counter over the server's /tokenize; ud is a gc_http_count_t. */
typedef struct gc_http_count {
  const gc_http_t *http;
  const char *model;
} gc_http_count_t;
int gc_http_count(void *ud, const char *text, int *count, gt_err_t *err);

/* Builds filler text whose token count (per count) is as close as possible to target without
 * exceeding it. *text is malloc'd, *tokens its count. Counter errors pass through. */
int gc_prompt_calibrate(gc_count_fn count, void *ud, int target, uint64_t seed, char **text, int *tokens,
                        gt_err_t *err);

#endif
