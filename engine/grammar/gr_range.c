/* engine/grammar/gr_range.c — a regex for the decimal integers in [lo, hi] (JSON form: an
 * optional '-', no leading zeros), for JSON schema minimum/maximum on integers. The
 * non-negative part is split as in the npm package to-regex-range: at the numbers that end in
 * nines above lo and in zeros below hi, so that each piece is a common prefix, one digit range
 * and then any digits. */
#include <stdio.h>
#include <string.h>

#include "engine/grammar/gr_internal.h"

typedef struct {
  char *buf;
  size_t cap, len;
  int full;
} rbuf_t;

static void put(rbuf_t *r, const char *s) {
  size_t n = strlen(s);
  if (r->len + n + 1 > r->cap) {
    r->full = 1;
    return;
  }
  memcpy(r->buf + r->len, s, n + 1);
  r->len += n;
}

static uint64_t pow10u(int k) {
  uint64_t p = 1;
  while (k-- > 0) p *= 10;
  return p;
}

/* the pattern of [a, b], both with the same number of digits and of the to-regex-range shape */
static void piece(rbuf_t *r, uint64_t a, uint64_t b) {
  char sa[24], sb[24], t[16];
  snprintf(sa, sizeof sa, "%llu", (unsigned long long)a);
  snprintf(sb, sizeof sb, "%llu", (unsigned long long)b);
  size_t n = strlen(sa), any = 0;
  for (size_t i = 0; i < n; i++) {
    if (sa[i] == sb[i]) {
      t[0] = sa[i];
      t[1] = 0;
    } else if (sa[i] == '0' && sb[i] == '9') {
      any++;
      continue;
    } else {
      snprintf(t, sizeof t, "[%c-%c]", sa[i], sb[i]);
    }
    if (any) { /* digits with the full range come last: flush them */
      char q[32];
      snprintf(q, sizeof q, "[0-9]{%zu}", any);
      put(r, q);
      any = 0;
    }
    put(r, t);
  }
  if (any) {
    char q[32];
    snprintf(q, sizeof q, "[0-9]{%zu}", any);
    put(r, q);
  }
}

/* alternatives for the non-negative integers [a, b], each prefixed with sign */
static void nonneg(rbuf_t *r, uint64_t a, uint64_t b, const char *sign, int *first) {
  uint64_t stops[80];
  int n = 0;
  for (int k = 1; k <= 19; k++) { /* a with its last k digits turned to 9s */
    uint64_t s = a / pow10u(k) * pow10u(k) + pow10u(k) - 1;
    if (s >= a && s < b) stops[n++] = s;
  }
  for (int k = 1; k <= 19; k++) { /* b+1 with its last k digits turned to 0s, minus one */
    uint64_t z = (b + 1) / pow10u(k) * pow10u(k);
    if (z > a && z - 1 < b) stops[n++] = z - 1;
  }
  stops[n++] = b;
  for (int i = 1; i < n; i++) /* insertion sort, then unique */
    for (int j = i; j > 0 && stops[j - 1] > stops[j]; j--) {
      uint64_t t = stops[j];
      stops[j] = stops[j - 1];
      stops[j - 1] = t;
    }
  uint64_t start = a;
  for (int i = 0; i < n; i++) {
    if (i > 0 && stops[i] == stops[i - 1]) continue;
    put(r, *first ? "" : "|");
    *first = 0;
    put(r, sign);
    piece(r, start, stops[i]);
    start = stops[i] + 1;
  }
}

int gr_int_range_regex(int64_t lo, int64_t hi, char *buf, size_t cap) {
  rbuf_t r = {buf, cap, 0, 0};
  int first = 1;
  if (cap) buf[0] = 0;
  if (lo > hi) return -1;
  if (lo < 0) /* the negatives: "-" and [max(1, -hi), -lo] */
    nonneg(&r, hi < 0 ? (uint64_t)(-hi) : 1, (uint64_t)(-lo), "-", &first);
  if (hi >= 0) nonneg(&r, lo > 0 ? (uint64_t)lo : 0, (uint64_t)hi, "", &first);
  return r.full ? -1 : (int)r.len;
}
