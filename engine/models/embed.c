/* engine/models/embed.c — embedding pooling metadata and normalization (embed.h). */
#include "engine/models/embed.h"

#include <math.h>
#include <stdio.h>

embed_pool_t embed_pooling_type(const gguf_t *g) {
  char key[96];
  int64_t v = -1;
  snprintf(key, sizeof key, "%s.pooling_type", gguf_arch(g));
  if (gguf_get_int(g, key, &v) || v < EMBED_POOL_NONE || v > EMBED_POOL_RANK) return EMBED_POOL_UNSPECIFIED;
  return (embed_pool_t)v;
}

const char *embed_pool_name(embed_pool_t p) {
  static const char *const names[] = {"none", "mean", "cls", "last", "rank"};
  return p >= EMBED_POOL_NONE && p <= EMBED_POOL_RANK ? names[p] : "unspecified";
}

int embed_normalize(float *v, int d, int dims) {
  const int k = dims > 0 && dims < d ? dims : d;
  double ss = 0;
  for (int i = 0; i < k; i++) ss += (double)v[i] * v[i];
  if (ss > 0) {
    const float inv = (float)(1.0 / sqrt(ss));
    for (int i = 0; i < k; i++) v[i] *= inv;
  }
  return k;
}
