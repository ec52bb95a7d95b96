/* engine/backend/sampler.c — see sampler.h. */
#include "engine/backend/sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct sampler {
  sampler_params_t p;
  int n_vocab;
  uint64_t rng[4];   /* xoshiro256** state */
  uint8_t *seen;     /* [n_vocab] token appeared in prompt or output (repetition penalty) */
  int32_t *count;    /* [n_vocab] occurrences in the output (presence/frequency) */
  int32_t *touched;  /* ids with seen/count set, for penalties in O(touched) */
  int n_touched, cap_touched;
  /* candidate scratch */
  int32_t *idx;      /* [n_vocab] */
  float *prob;       /* [n_vocab] */
};

sampler_params_t sampler_defaults(void) {
  return (sampler_params_t){.temperature = 0, .top_k = 0, .top_p = 1, .min_p = 0, .repetition_penalty = 1,
                            .presence_penalty = 0, .frequency_penalty = 0, .seed = 0};
}

int sampler_check(const sampler_params_t *p, gt_err_t *err) {
  if (!(p->temperature >= 0 && p->temperature <= 100))
    return gt_err_set(err, GT_EINVAL, "temperature must be in [0, 100], got %g", p->temperature);
  if (!(p->top_p > 0 && p->top_p <= 1)) return gt_err_set(err, GT_EINVAL, "top_p must be in (0, 1], got %g", p->top_p);
  if (!(p->min_p >= 0 && p->min_p <= 1)) return gt_err_set(err, GT_EINVAL, "min_p must be in [0, 1], got %g", p->min_p);
  if (p->top_k < -1) return gt_err_set(err, GT_EINVAL, "top_k must be -1, 0 or positive, got %d", p->top_k);
  if (!(p->repetition_penalty > 0 && p->repetition_penalty <= 10))
    return gt_err_set(err, GT_EINVAL, "repetition_penalty must be in (0, 10], got %g", p->repetition_penalty);
  if (!(p->presence_penalty >= -2 && p->presence_penalty <= 2))
    return gt_err_set(err, GT_EINVAL, "presence_penalty must be in [-2, 2], got %g", p->presence_penalty);
  if (!(p->frequency_penalty >= -2 && p->frequency_penalty <= 2))
    return gt_err_set(err, GT_EINVAL, "frequency_penalty must be in [-2, 2], got %g", p->frequency_penalty);
  return GT_OK;
}

static uint64_t splitmix64(uint64_t *x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t next_u64(sampler_t *s) {
  uint64_t *r = s->rng;
  uint64_t out = rotl(r[1] * 5, 7) * 9, t = r[1] << 17;
  r[2] ^= r[0];
  r[3] ^= r[1];
  r[1] ^= r[2];
  r[0] ^= r[3];
  r[2] ^= t;
  r[3] = rotl(r[3], 45);
  return out;
}

/* uniform in [0, 1) with 53 bits */
static double next_unit(sampler_t *s) { return (double)(next_u64(s) >> 11) * (1.0 / 9007199254740992.0); }

int sampler_create(const sampler_params_t *p, int n_vocab, sampler_t **out, gt_err_t *err) {
  int rc = sampler_check(p, err);
  if (rc) return rc;
  if (n_vocab <= 0) return gt_err_set(err, GT_EINVAL, "sampler: empty vocabulary");
  sampler_t *s = calloc(1, sizeof *s);
  if (!s) return gt_err_set(err, GT_ENOMEM, "sampler: out of memory");
  s->p = *p;
  s->n_vocab = n_vocab;
  s->seen = calloc((size_t)n_vocab, 1);
  s->count = calloc((size_t)n_vocab, sizeof(int32_t));
  s->idx = malloc(sizeof(int32_t) * (size_t)n_vocab);
  s->prob = malloc(sizeof(float) * (size_t)n_vocab);
  if (!s->seen || !s->count || !s->idx || !s->prob) {
    sampler_free(s);
    return gt_err_set(err, GT_ENOMEM, "sampler: out of memory");
  }
  uint64_t x = p->seed;
  for (int i = 0; i < 4; i++) s->rng[i] = splitmix64(&x);
  *out = s;
  return GT_OK;
}

void sampler_free(sampler_t *s) {
  if (!s) return;
  free(s->seen);
  free(s->count);
  free(s->touched);
  free(s->idx);
  free(s->prob);
  free(s);
}

void sampler_accept(sampler_t *s, int32_t tok, int is_output) {
  if (tok < 0 || tok >= s->n_vocab) return;
  if (!s->seen[tok]) {
    if (s->n_touched == s->cap_touched) {
      int cap = s->cap_touched ? s->cap_touched * 2 : 64;
      int32_t *t = realloc(s->touched, sizeof(int32_t) * (size_t)cap);
      if (!t) return; /* penalties then ignore this token; sampling stays defined */
      s->touched = t;
      s->cap_touched = cap;
    }
    s->touched[s->n_touched++] = tok;
    s->seen[tok] = 1;
  }
  if (is_output) s->count[tok]++;
}

int32_t sampler_argmax(const float *x, int n) {
  int32_t best = 0;
  for (int i = 1; i < n; i++)
    if (x[i] > x[best]) best = i;
  return best;
}

static void apply_penalties(sampler_t *s, float *logits) {
  const sampler_params_t *p = &s->p;
  if (p->repetition_penalty == 1 && p->presence_penalty == 0 && p->frequency_penalty == 0) return;
  for (int i = 0; i < s->n_touched; i++) {
    int32_t t = s->touched[i];
    float *l = &logits[t];
    if (p->repetition_penalty != 1) *l = *l > 0 ? *l / p->repetition_penalty : *l * p->repetition_penalty;
    if (s->count[t] > 0) *l -= p->presence_penalty + p->frequency_penalty * (float)s->count[t];
  }
}

/* descending by prob, ascending id on ties */
static _Thread_local const float *cmp_prob; /* qsort has no context argument */
static int cmp_desc(const void *a, const void *b) {
  int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  if (cmp_prob[x] != cmp_prob[y]) return cmp_prob[x] > cmp_prob[y] ? -1 : 1;
  return x < y ? -1 : 1;
}

/* Sorts the ids whose prob[i] >= thr into idx (descending); returns their count. */
static int collect_sorted(const float *prob, int n_vocab, int32_t *idx, float thr) {
  int n = 0;
  for (int i = 0; i < n_vocab; i++)
    if (prob[i] >= thr) idx[n++] = i;
  cmp_prob = prob;
  qsort(idx, (size_t)n, sizeof(int32_t), cmp_desc);
  return n;
}

/* top-k -> min-p -> top-p -> draw over prob[n_vocab] (normalised); pmax = prob of the argmax. */
static int32_t pick_filtered(const sampler_pick_t *p, const float *prob, int n_vocab, float pmax, double u,
                             int32_t *idx) {
  /* candidates: sort only the head of the distribution when that provably suffices */
  float thr = p->min_p > 0 ? p->min_p * pmax : pmax * 1e-4f;
  int n;
  for (;;) {
    n = collect_sorted(prob, n_vocab, idx, thr);
    double mass = 0;
    for (int i = 0; i < n; i++) mass += prob[idx[i]];
    int enough_k = p->top_k > 0 && n >= p->top_k;
    int enough_p = p->top_p < 1 && mass >= p->top_p;
    if (p->min_p > 0 || enough_k || enough_p || thr <= 0) break;
    thr = thr > 1e-30f ? thr * 1e-4f : 0; /* widen until exact (thr 0 = whole vocabulary) */
  }
  if (p->top_k > 0 && n > p->top_k) n = p->top_k;
  if (p->top_p < 1) {
    double c = 0;
    int keep = 0;
    while (keep < n) {
      c += prob[idx[keep++]];
      if (c >= p->top_p) break;
    }
    n = keep;
  }
  double total = 0;
  for (int i = 0; i < n; i++) total += prob[idx[i]];
  double r = u * total, c = 0;
  for (int i = 0; i < n; i++) {
    c += prob[idx[i]];
    if (r < c) return idx[i];
  }
  return idx[n - 1];
}

int32_t sampler_pick(const sampler_pick_t *p, float *logits, int n_vocab, double u) {
  const int32_t best = sampler_argmax(logits, n_vocab);
  if (p->temperature <= 0 || p->top_k == 1) return best;

  /* softmax at temperature, in place */
  float *prob = logits;
  const float mx = logits[best];
  double sum = 0;
  for (int i = 0; i < n_vocab; i++) {
    prob[i] = expf((logits[i] - mx) / p->temperature);
    sum += prob[i];
  }
  float pmax = (float)(1.0 / sum); /* prob of the argmax before normalising = 1 */
  for (int i = 0; i < n_vocab; i++) prob[i] = (float)(prob[i] / sum);

  if (p->top_k <= 0 && p->top_p >= 1 && p->min_p <= 0) { /* plain temperature: no ordering needed */
    double r = u, c = 0;
    for (int i = 0; i < n_vocab; i++) {
      c += prob[i];
      if (r < c) return i;
    }
    return best;
  }
  int32_t *idx = p->idx ? p->idx : malloc(sizeof(int32_t) * (size_t)n_vocab);
  if (!idx) return -1;
  int32_t t = pick_filtered(p, prob, n_vocab, pmax, u, idx);
  if (!p->idx) free(idx);
  return t;
}

double sampler_next_u(sampler_t *s) { return next_unit(s); }

void sampler_rng_get(const sampler_t *s, uint64_t st[4]) { memcpy(st, s->rng, sizeof s->rng); }
void sampler_rng_set(sampler_t *s, const uint64_t st[4]) { memcpy(s->rng, st, sizeof s->rng); }

int sampler_has_penalties(const sampler_params_t *p) {
  return p->repetition_penalty != 1 || p->presence_penalty != 0 || p->frequency_penalty != 0;
}

int32_t sampler_sample(sampler_t *s, float *logits) {
  const sampler_params_t *p = &s->p;
  apply_penalties(s, logits);
  const double u = next_unit(s);
  sampler_pick_t pk = {.temperature = p->temperature, .top_k = p->top_k, .top_p = p->top_p, .min_p = p->min_p,
                       .idx = s->idx};
  if (pk.temperature <= 0 || pk.top_k == 1) return sampler_pick(&pk, logits, s->n_vocab, u); /* greedy: no write */
  memcpy(s->prob, logits, sizeof(float) * (size_t)s->n_vocab); /* the caller's logits stay as they were */
  return sampler_pick(&pk, s->prob, s->n_vocab, u);
}

float sampler_logprob(const float *logits, int n, int32_t id) {
  float mx = logits[sampler_argmax(logits, n)];
  double sum = 0;
  for (int i = 0; i < n; i++) sum += exp((double)logits[i] - mx);
  return (float)((double)logits[id] - mx - log(sum));
}

int sampler_top_ids(const float *logits, int n_vocab, int n, int32_t *ids) {
  if (n > n_vocab) n = n_vocab;
  int k = 0;
  for (int i = 0; i < n_vocab; i++) {
    /* insertion into the running top-n (n is small: logprobs top <= 20) */
    int j = k < n ? k++ : n;
    if (j == n && !(logits[i] > logits[ids[n - 1]])) continue;
    if (j == n) j = n - 1;
    while (j > 0 && logits[i] > logits[ids[j - 1]]) {
      ids[j] = ids[j - 1];
      j--;
    }
    ids[j] = i;
  }
  return k;
}

void sampler_mask_logits(float *logits, const uint32_t *mask, int n_vocab) {
  for (int w = 0; w * 32 < n_vocab; w++) {
    const uint32_t m = mask[w];
    if (m == 0xffffffffu) continue;
    const int end = n_vocab - w * 32 < 32 ? n_vocab - w * 32 : 32;
    for (int b = 0; b < end; b++)
      if (!(m >> b & 1u)) logits[w * 32 + b] = -INFINITY;
  }
}
