/* tests/bench/bench_ngram.c — the host cost of one prompt-lookup proposal per decoding sequence per
 * step: the scan (spec_ngram_draft, O(n)) against the index (spec_index_draft, built as the
 * sequence grows), at contexts of 1K to 128K tokens, on sequences without a recurring n-gram (the
 * scan's worst case: it reads the whole sequence three times) and on code-like ones (a small
 * vocabulary with stretches of 8..39 tokens copied from up to 4K tokens back). Prints microseconds per proposal and
 * the index's one-off build time per context; checks that both give the same drafts.
 *   bench_ngram [--steps 200] [--k 3] */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/sched/spec.h"
#include "engine/sched/spec_index.h"

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static uint64_t rng = 0x2545f4914f6cdd1dull;
static uint32_t rnd(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (uint32_t)(rng >> 11);
}

int main(int argc, char **argv) {
  int steps = 200, k = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--steps")) steps = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--k")) k = atoi(argv[i + 1]);
  }
  if (steps < 1 || k < 1 || k > 8) return fprintf(stderr, "usage: bench_ngram [--steps N] [--k 1..8]\n"), 2;
  static const int ctx[] = {1024, 8192, 32768, 131072};
  printf("%-8s %8s %12s %12s %12s %8s\n", "kind", "context", "scan_us", "index_us", "build_ms", "drafted");
  for (int kind = 0; kind < 2; kind++) {
    for (size_t c = 0; c < sizeof ctx / sizeof *ctx; c++) {
      const int n0 = ctx[c], n_max = n0 + steps;
      int32_t *t = malloc(sizeof(int32_t) * (size_t)n_max);
      if (!t) return 1;
      for (int i = 0, from = -1, left = 0; i < n_max; i++) {
        if (kind == 0) { /* no id recurs */
          t[i] = 1000000 + i;
          continue;
        }
        if (left == 0 && i > 256 && rnd() % 16 == 0) { /* copy 8..39 tokens from up to 4K back */
          from = i - 64 - (int)(rnd() % (unsigned)(i - 64 < 4096 ? i - 64 : 4096));
          left = 8 + (int)(rnd() % 32);
        }
        t[i] = left > 0 ? t[from++] : (int32_t)(rnd() % 4000);
        if (left > 0) left--;
      }
      spec_index_t x = {0};
      int32_t a[8], b[8];
      double t0 = now_us();
      spec_index_draft(&x, t, n0, k, 2, 4, b, NULL); /* the prompt's one-off build */
      const double build = now_us() - t0;
      double scan = 0, ix = 0;
      int drafted = 0, differ = 0;
      for (int s = 1; s <= steps; s++) { /* one token more per step, as decoding appends */
        const int n = n0 + s;
        t0 = now_us();
        const int na = spec_ngram_draft(t, n, k, 2, 4, a);
        const double t1 = now_us();
        const int nb = spec_index_draft(&x, t, n, k, 2, 4, b, NULL);
        ix += now_us() - t1;
        scan += t1 - t0;
        drafted += na > 0;
        differ += na != nb || (na > 0 && memcmp(a, b, sizeof(int32_t) * (size_t)na) != 0);
      }
      printf("%-8s %8d %12.2f %12.2f %12.2f %7d%%%s\n", kind ? "code" : "unique", n0, scan / steps, ix / steps,
             build / 1e3, 100 * drafted / steps, differ ? "  DIFFERENT DRAFTS" : "");
      spec_index_free(&x);
      free(t);
      if (differ) return 1;
    }
  }
  return 0;
}
