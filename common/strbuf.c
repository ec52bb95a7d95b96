/* common/strbuf.c — see strbuf.h. */
#include "common/strbuf.h"

#include <stdlib.h>
#include <string.h>

int gt_sb_add(gt_sb_t *b, const char *s, size_t n) {
  if (n > (size_t)-1 / 2 - b->len) { /* len + n + 1 and the doubling below must not overflow */
    b->oom = true;
    return -1;
  }
  if (b->len + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 64;
    while (cap < b->len + n + 1) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) {
      b->oom = true;
      return -1;
    }
    b->p = p;
    b->cap = cap;
  }
  if (n) memcpy(b->p + b->len, s, n);
  b->len += n;
  b->p[b->len] = 0;
  return 0;
}

int gt_sb_adds(gt_sb_t *b, const char *s) { return gt_sb_add(b, s, strlen(s)); }

int gt_sb_addc(gt_sb_t *b, char c) { return gt_sb_add(b, &c, 1); }

void gt_sb_free(gt_sb_t *b) {
  free(b->p);
  *b = (gt_sb_t){0};
}
