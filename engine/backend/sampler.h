/* engine/backend/sampler.h — token sampling: greedy, temperature, top-k, top-p, min-p, repetition /
 * presence / frequency penalties; seeded and deterministic (same params, seed and logits ->
 * same tokens on every run and machine).
 *
 * Order (as vLLM): penalties -> temperature -> top-k -> min-p -> top-p -> draw.
 * repetition_penalty (HF/vLLM semantics: logit > 0 is divided by it, else multiplied) applies to
 * every token seen in the prompt or the output; presence / frequency penalties (OpenAI
 * semantics: logit -= presence * [count > 0] + frequency * count) to output tokens only. */
#ifndef GANTRY_ENGINE_SAMPLER_H
#define GANTRY_ENGINE_SAMPLER_H

#include <stdint.h>

#include "common/err.h"

typedef struct {
  float temperature;        /* <= 0: greedy (argmax, lowest id on ties) */
  int top_k;                /* <= 0: off */
  float top_p;              /* >= 1: off; (0, 1) keeps the smallest set with mass >= top_p */
  float min_p;              /* <= 0: off; drops tokens with p < min_p * p_max */
  float repetition_penalty; /* 1: off; must be > 0 */
  float presence_penalty;   /* 0: off; [-2, 2] */
  float frequency_penalty;  /* 0: off; [-2, 2] */
  uint64_t seed;
} sampler_params_t;

typedef struct sampler sampler_t;

/* Defaults: greedy, no filters, no penalties, seed 0. */
sampler_params_t sampler_defaults(void);
/* Validates params (ranges above); GT_EINVAL with the offending field otherwise. */
int sampler_check(const sampler_params_t *p, gt_err_t *err);
/* Creates a sampler for a vocabulary of n_vocab; *out owned by the caller (sampler_free). */
int sampler_create(const sampler_params_t *p, int n_vocab, sampler_t **out, gt_err_t *err);
void sampler_free(sampler_t *s);
/* Records a token for the penalties: prompt tokens (is_output = 0) and sampled ones (1). */
void sampler_accept(sampler_t *s, int32_t tok, int is_output);
/* Picks the next token from logits[n_vocab] (modified in place by the penalties only). Equals
 * the penalties, then sampler_pick(params, logits, n_vocab, sampler_next_u(s)): the RNG advances
 * exactly once per call, greedy or not. */
int32_t sampler_sample(sampler_t *s, float *logits);
/* The sampler's next uniform draw in [0, 1) (53 bits: a multiple of 2^-53); advances its RNG. */
double sampler_next_u(sampler_t *s);
/* The RNG state (4 words) out of / back into s: speculative decoding draws a uniform for every
 * verified row and rewinds to the draws of the tokens it kept (engine/sched/sched.c). */
void sampler_rng_get(const sampler_t *s, uint64_t st[4]);
void sampler_rng_set(sampler_t *s, const uint64_t st[4]);
/* 1 if p has a repetition, presence or frequency penalty (they need the host-side history). */
int sampler_has_penalties(const sampler_params_t *p);

/* The penalty-free part of sampling, as a pure function (also the CPU backend's `sample` op). */
typedef struct {
  float temperature; /* <= 0: greedy */
  int top_k;         /* <= 0: off; 1: greedy */
  float top_p;       /* >= 1: off */
  float min_p;       /* <= 0: off */
  int32_t *idx;      /* scratch [n_vocab] ids owned by the caller, or NULL (allocated per call) */
} sampler_pick_t;
/* The index of the largest of x[0..n) (n >= 1), the lowest on ties: greedy decoding's pick. */
int32_t sampler_argmax(const float *x, int n);

/* Picks a token from logits[n_vocab] with the uniform draw u in [0, 1): greedy (argmax, lowest id
 * on ties) when temperature <= 0 or top_k == 1, else softmax at temperature -> top-k -> min-p ->
 * top-p -> the draw. Non-greedy picks overwrite logits with the probabilities. Returns -1 only
 * when idx is NULL and its allocation fails. */
int32_t sampler_pick(const sampler_pick_t *p, float *logits, int n_vocab, double u);

/* Constrained decoding: logits[v] = -inf for every v < n_vocab whose bit v % 32 of
 * mask[v / 32] is clear (mask [ceil(n_vocab / 32)]). The host path of the scheduler and the CPU
 * backend's logits_mask op. */
void sampler_mask_logits(float *logits, const uint32_t *mask, int n_vocab);

/* log-softmax of logits[n] at id, computed in double (for logprobs). */
float sampler_logprob(const float *logits, int n, int32_t id);
/* The top n ids by logit (descending, lowest id first on ties) into ids[n]; returns count. */
int sampler_top_ids(const float *logits, int n_vocab, int n, int32_t *ids);

#endif
