/* engine/sched/spec_ngram.c — see spec.h. */
#include "engine/sched/spec.h"

#include <string.h>

int spec_ngram_draft(const int32_t *toks, int n, int k, int min_n, int max_n, int32_t *out) {
  if (k <= 0 || min_n <= 0 || max_n < min_n) return 0;
  for (int g = max_n < n - 1 ? max_n : n - 1; g >= min_n; g--) {
    const int32_t *suf = toks + n - g;
    /* start i of an earlier occurrence: i + g <= n - 1, so at least one token follows it */
    for (int i = n - g - 1; i >= 0; i--) {
      if (toks[i] != suf[0] || memcmp(toks + i, suf, sizeof(int32_t) * (size_t)g) != 0) continue;
      int m = n - (i + g);
      if (m > k) m = k;
      memcpy(out, toks + i + g, sizeof(int32_t) * (size_t)m);
      return m;
    }
  }
  return 0;
}
