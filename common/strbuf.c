/* common/strbuf.c — see strbuf.h. */
#include "common/strbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Room for n more bytes and the NUL: 0, or -1 with oom set (nothing changed). */
static int reserve(gt_sb_t *b, size_t n) {
  if (n > (size_t)-1 / 2 - b->len) { /* len + n + 1 and the doubling below must not overflow */
    b->oom = true;
    return -1;
  }
  if (b->len + n + 1 <= b->cap) return 0;
  size_t cap = b->cap ? b->cap : 64;
  while (cap < b->len + n + 1) cap *= 2;
  char *p = realloc(b->p, cap);
  if (!p) {
    b->oom = true;
    return -1;
  }
  b->p = p;
  b->cap = cap;
  return 0;
}

int gt_sb_reserve(gt_sb_t *b, size_t n) {
  if (n > (size_t)-1 / 2 - b->len) {
    b->oom = true;
    return -1;
  }
  if (b->len + n + 1 <= b->cap) return 0;
  char *p = realloc(b->p, b->len + n + 1);
  if (!p) {
    b->oom = true;
    return -1;
  }
  if (!b->p) p[0] = 0;
  b->p = p;
  b->cap = b->len + n + 1;
  return 0;
}

int gt_sb_add(gt_sb_t *b, const char *s, size_t n) {
  if (reserve(b, n)) return -1;
  if (n) memcpy(b->p + b->len, s, n);
  b->len += n;
  b->p[b->len] = 0;
  return 0;
}

int gt_sb_adds(gt_sb_t *b, const char *s) { return gt_sb_add(b, s, strlen(s)); }

int gt_sb_addc(gt_sb_t *b, char c) { return gt_sb_add(b, &c, 1); }

int gt_sb_printf(gt_sb_t *b, const char *fmt, ...) {
  if (reserve(b, 0)) return -1;
  for (;;) {
    const size_t room = b->cap - b->len; /* >= 1 */
    va_list ap;
    va_start(ap, fmt);
    const int k = vsnprintf(b->p + b->len, room, fmt, ap);
    va_end(ap);
    if (k >= 0 && (size_t)k < room) {
      b->len += (size_t)k;
      return 0;
    }
    b->p[b->len] = 0; /* undo a truncated write */
    if (k < 0) {
      b->oom = true;
      return -1;
    }
    if (reserve(b, (size_t)k)) return -1;
  }
}

void gt_sb_free(gt_sb_t *b) {
  free(b->p);
  *b = (gt_sb_t){0};
}
