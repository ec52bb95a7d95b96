/* engine/sched/bad_words.c — see bad_words.h. */
#include "engine/sched/bad_words.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int badw_copy(badw_t *b, const int32_t *ids, const int32_t *lens, int n) {
  memset(b, 0, sizeof *b);
  if (n <= 0) return 0;
  size_t total = 0;
  for (int k = 0; k < n; k++) total += (size_t)lens[k];
  b->ids = malloc(sizeof(int32_t) * (total ? total : 1));
  b->off = malloc(sizeof(int32_t) * (size_t)(n + 1));
  if (!b->ids || !b->off) {
    badw_free(b);
    return -1;
  }
  memcpy(b->ids, ids, sizeof(int32_t) * total);
  b->off[0] = 0;
  for (int k = 0; k < n; k++) b->off[k + 1] = b->off[k] + lens[k];
  b->n = n;
  return 0;
}

void badw_free(badw_t *b) {
  free(b->ids);
  free(b->off);
  memset(b, 0, sizeof *b);
}

void badw_apply(const badw_t *b, const int32_t *out, int n_out, float *lg, int V) {
  for (int k = 0; k < b->n; k++) {
    const int32_t *s = b->ids + b->off[k];
    const int L = b->off[k + 1] - b->off[k];
    if (L < 1 || L - 1 > n_out || s[L - 1] < 0 || s[L - 1] >= V) continue;
    if (L == 1 || !memcmp(out + n_out - (L - 1), s, sizeof(int32_t) * (size_t)(L - 1))) lg[s[L - 1]] = -INFINITY;
  }
}
