/* engine/chat/stop.c — stop-string matcher (see stop.h). */
#include "engine/chat/stop.h"

#include <stdlib.h>
#include <string.h>

#include "common/utf8.h"

struct stop_matcher {
  char **stops;
  size_t *lens;
  size_t n;
  char *buf;     /* pending text: held back plus what the last result pointed at */
  size_t len, cap;
  size_t emitted; /* bytes at the front of buf handed out by the previous call */
  bool done;
};

int stop_matcher_new(const char *const *stops, size_t n, stop_matcher_t **out, gt_err_t *err) {
  *out = NULL;
  if (n && !stops) return gt_err_set(err, GT_EINVAL, "stop strings: NULL list");
  stop_matcher_t *m = calloc(1, sizeof *m);
  if (!m) return gt_err_set(err, GT_ENOMEM, "out of memory");
  m->stops = calloc(n ? n : 1, sizeof *m->stops);
  m->lens = calloc(n ? n : 1, sizeof *m->lens);
  if (!m->stops || !m->lens) {
    stop_matcher_free(m);
    return gt_err_set(err, GT_ENOMEM, "out of memory");
  }
  m->n = n;
  for (size_t i = 0; i < n; i++) {
    size_t len = stops[i] ? strlen(stops[i]) : 0;
    if (len == 0) {
      stop_matcher_free(m);
      return gt_err_set(err, GT_EINVAL, "stop string %zu is empty", i);
    }
    if (!gt_utf8_valid(stops[i], len)) {
      stop_matcher_free(m);
      return gt_err_set(err, GT_EINVAL, "stop string %zu is not valid UTF-8", i);
    }
    m->stops[i] = malloc(len + 1);
    if (!m->stops[i]) {
      stop_matcher_free(m);
      return gt_err_set(err, GT_ENOMEM, "out of memory");
    }
    memcpy(m->stops[i], stops[i], len + 1);
    m->lens[i] = len;
  }
  *out = m;
  return GT_OK;
}

void stop_matcher_free(stop_matcher_t *m) {
  if (!m) return;
  if (m->stops)
    for (size_t i = 0; i < m->n; i++) free(m->stops[i]);
  free(m->stops);
  free(m->lens);
  free(m->buf);
  free(m);
}

size_t stop_matcher_pending(const stop_matcher_t *m) { return m->len - m->emitted; }

/* Drops the bytes handed out last time. */
static void compact(stop_matcher_t *m) {
  if (m->emitted) {
    memmove(m->buf, m->buf + m->emitted, m->len - m->emitted);
    m->len -= m->emitted;
    m->emitted = 0;
  }
}

int stop_matcher_feed(stop_matcher_t *m, const char *text, size_t n, stop_result_t *res,
                      gt_err_t *err) {
  res->emit = "";
  res->emit_len = 0;
  res->matched = false;
  res->which = -1;
  if (m->done) return gt_err_set(err, GT_EINVAL, "stop matcher fed after a match");
  if (n && !text) return gt_err_set(err, GT_EINVAL, "stop matcher: NULL text");
  compact(m);
  if (m->len + n + 1 > m->cap) {
    size_t cap = m->cap ? m->cap : 64;
    while (cap < m->len + n + 1) cap *= 2;
    char *b = realloc(m->buf, cap);
    if (!b) return gt_err_set(err, GT_ENOMEM, "out of memory");
    m->buf = b;
    m->cap = cap;
  }
  if (n) memcpy(m->buf + m->len, text, n);
  m->len += n;
  /* The match that completes first; among those ending at the same byte, the longest. */
  size_t best_end = (size_t)-1, best = 0;
  int which = -1;
  for (size_t i = 0; i < m->n; i++) {
    size_t L = m->lens[i];
    for (size_t p = 0; p + L <= m->len && p + L <= best_end; p++) {
      if (memcmp(m->buf + p, m->stops[i], L) == 0) {
        if (p + L < best_end || (which >= 0 && L > m->lens[which])) {
          best_end = p + L;
          best = p;
          which = (int)i;
        }
        break;
      }
    }
  }
  if (which >= 0) {
    m->done = true;
    res->emit = m->buf;
    res->emit_len = best;
    res->matched = true;
    res->which = which;
    m->emitted = m->len; /* nothing more will be handed out */
    return GT_OK;
  }
  /* Hold back the longest suffix that is a proper prefix of some stop string. */
  size_t hold = 0;
  for (size_t i = 0; i < m->n; i++) {
    size_t L = m->lens[i];
    size_t maxk = L - 1 < m->len ? L - 1 : m->len;
    for (size_t k = maxk; k > hold; k--)
      if (memcmp(m->buf + m->len - k, m->stops[i], k) == 0) {
        hold = k;
        break;
      }
  }
  size_t safe = gt_utf8_complete_len(m->buf, m->len - hold);
  res->emit = m->buf;
  res->emit_len = safe;
  m->emitted = safe;
  return GT_OK;
}

int stop_matcher_flush(stop_matcher_t *m, stop_result_t *res, gt_err_t *err) {
  res->emit = "";
  res->emit_len = 0;
  res->matched = false;
  res->which = -1;
  if (m->done) return GT_OK;
  compact(m);
  res->emit = m->buf ? m->buf : "";
  res->emit_len = m->len;
  m->emitted = m->len;
  m->done = true;
  return GT_OK;
}

const char *stop_matcher_string(const stop_matcher_t *m, int i) {
  return m && i >= 0 && (size_t)i < m->n ? m->stops[i] : NULL;
}
