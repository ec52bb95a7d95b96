/* engine/models/embed.h — embedding pooling of a decoder model (Qwen3-Embedding).
 *
 * A Qwen3-Embedding GGUF is a plain Qwen3 model whose metadata says `{arch}.pooling_type` = 3
 * (llama.cpp's LLAMA_POOLING_TYPE_LAST: 0 none, 1 mean, 2 cls, 3 last, 4 rank). Its embedding of
 * a token sequence is the final-norm hidden state of the LAST token (model_forward_hidden /
 * gen_feed_hidden), L2-normalized. `dimensions` (Matryoshka) keeps the first k values and
 * normalizes again. */
#ifndef GANTRY_ENGINE_EMBED_H
#define GANTRY_ENGINE_EMBED_H
#include "format/gguf.h"

typedef enum {
  EMBED_POOL_UNSPECIFIED = -1, /* no {arch}.pooling_type key: not an embedding model */
  EMBED_POOL_NONE = 0,
  EMBED_POOL_MEAN = 1,
  EMBED_POOL_CLS = 2,
  EMBED_POOL_LAST = 3,
  EMBED_POOL_RANK = 4,
} embed_pool_t;

/* The file's {arch}.pooling_type, or EMBED_POOL_UNSPECIFIED when absent or out of range. */
embed_pool_t embed_pooling_type(const gguf_t *g);
const char *embed_pool_name(embed_pool_t p);

/* In place: v[0..dims) = v[0..dims) / ||v[0..dims)||₂ (dims <= 0 or > d: all d). A zero vector
 * stays zero. Returns the number of values kept. */
int embed_normalize(float *v, int d, int dims);
#endif
