/* clients/bench_prompt.c — filler prompts and their calibration to a token count. */
#include "clients/bench_prompt.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *words[] = {
    "the", "engine", "river", "quiet", "number", "measure", "signal", "window", "garden", "silver",
    "market", "letter", "stone", "travel", "answer", "bright", "cloud", "system", "paper", "forest",
    "winter", "mirror", "lantern", "harbor", "pattern", "simple", "orange", "valley", "thunder", "gentle",
    "copper", "island", "morning", "planet", "yellow", "bridge", "candle", "rocket", "shadow", "table",
    "music", "circle", "basket", "dragon", "meadow", "rhythm", "saddle", "timber", "velvet", "wander",
    "of", "and", "to", "in", "is", "was", "for", "on", "with", "as", "by", "at", "from", "over"};

static uint64_t next(uint64_t *s) {
  *s += 0x9E3779B97F4A7C15ULL;
  uint64_t z = *s;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

char *gc_prompt_words(uint64_t seed, int n_words) {
  if (n_words < 0) n_words = 0;
  size_t cap = (size_t)n_words * 9 + 2, len = 0;
  char *t = malloc(cap);
  if (!t) return NULL;
  uint64_t s = seed;
  for (int i = 0; i < n_words; i++) {
    const char *w = words[next(&s) % (sizeof words / sizeof words[0])];
    size_t wl = strlen(w);
    if (len + wl + 2 > cap) break;
    if (i) t[len++] = (i % 12 == 11) ? '\n' : ' ';
    memcpy(t + len, w, wl);
    len += wl;
  }
  t[len] = 0;
  return t;
}

int gc_tokenize_count(const gc_http_t *h, const char *model, const char *text, int *count, gt_err_t *err) {
  json_t *req = json_pack("{s:s?, s:s}", "model", model, "prompt", text);
  char *body = req ? json_dumps(req, JSON_COMPACT) : NULL;
  json_decref(req);
  if (!body) return gt_err_set(err, GT_ENOMEM, "tokenize: out of memory");
  long status;
  char *resp;
  int rc = gc_http_do(h, "POST", "/tokenize", body, &status, &resp, err);
  free(body);
  if (rc) return rc;
  if (status == 404 || status == 405) {
    free(resp);
    return gt_err_set(err, GT_EUNSUPPORTED, "server has no /tokenize (HTTP %ld)", status);
  }
  json_t *j = json_loads(resp, 0, NULL);
  json_t *c = json_object_get(j, "count"), *toks = json_object_get(j, "tokens");
  if (status != 200 || (!json_is_integer(c) && !json_is_array(toks))) {
    rc = gt_err_set(err, GT_EFORMAT, "tokenize: HTTP %ld: %.200s", status, resp);
  } else {
    *count = json_is_integer(c) ? (int)json_integer_value(c) : (int)json_array_size(toks);
  }
  json_decref(j);
  free(resp);
  return rc;
}

int gc_http_count(void *ud, const char *text, int *count, gt_err_t *err) {
  gc_http_count_t *c = ud;
  return gc_tokenize_count(c->http, c->model, text, count, err);
}

int gc_prompt_calibrate(gc_count_fn count, void *ud, int target, uint64_t seed, char **text, int *tokens,
                        gt_err_t *err) {
  *text = NULL;
  *tokens = 0;
  if (target <= 0) return gt_err_set(err, GT_EINVAL, "prompt length %d must be positive", target);
  int lo = 0, lo_tok = 0;        /* best word count known to fit */
  int hi = -1;                   /* smallest word count known to overshoot */
  int w = target * 3 / 4 + 1;    /* about 0.75 words per token for English BPE */
  for (int it = 0; it < 24; it++) {
    char *t = gc_prompt_words(seed, w);
    if (!t) return gt_err_set(err, GT_ENOMEM, "prompt: out of memory");
    int n;
    int rc = count(ud, t, &n, err);
    free(t);
    if (rc) return rc;
    if (n <= target) {
      if (w > lo) lo = w, lo_tok = n;
      if (n == target) break;
    } else if (hi < 0 || w < hi) {
      hi = w;
    }
    int nw;
    if (hi < 0)
      nw = n > 0 ? (int)((double)w * target / n) + 1 : w * 2; /* still below: scale up */
    else if (hi - lo <= 1)
      break;
    else
      nw = n > 0 ? (int)((double)w * target / n) : (lo + hi) / 2;
    if (nw <= lo || (hi >= 0 && nw >= hi)) nw = hi < 0 ? lo + 1 : (lo + hi) / 2;
    w = nw;
  }
  *text = gc_prompt_words(seed, lo);
  if (!*text) return gt_err_set(err, GT_ENOMEM, "prompt: out of memory");
  *tokens = lo_tok;
  return GT_OK;
}
