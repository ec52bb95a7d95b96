/* engine/models/gen.h — one sequence on a model with a private KV cache: the driver behind
 * `gantry-engine generate/eval` and the golden tests. (The engine service uses the scheduler
 * and the shared paged pool instead.) gen_create (re)initialises the model's backend cache, so
 * only one gen_t per model may exist at a time. */
#ifndef GANTRY_ENGINE_GEN_H
#define GANTRY_ENGINE_GEN_H

#include "engine/models/model.h"

typedef struct gen gen_t;

#define GEN_BLOCK_TOKENS 16

/* A sequence of up to n_ctx tokens (n_ctx <= the model's training context). */
int gen_create(model_t *m, int n_ctx, gen_t **out, gt_err_t *err);
void gen_free(gen_t *g);
/* Tokens fed so far (the next position). */
int gen_pos(const gen_t *g);
int gen_n_ctx(const gen_t *g);
/* Starts over at position 0 (recurrent state is cleared by the backend at pos 0). */
void gen_reset(gen_t *g);
/* Feeds ids[n] in chunks of at most chunk tokens (<= 0: the model's max_tokens).
 * all_logits (optional): [n, n_vocab] logits after each fed token.
 * last_logits (optional): [n_vocab] logits after the last one.
 * GT_ERANGE when the sequence would exceed n_ctx (nothing is fed then). */
int gen_feed(gen_t *g, const int32_t *ids, int n, int chunk, float *all_logits, float *last_logits, gt_err_t *err);
/* Feeds ids[n] as gen_feed, then samples the next token on the backend (model_forward_sample)
 * with row into *out_id: only the id crosses to the host. GT_EUNSUPPORTED when the backend has no
 * `sample` op. */
int gen_feed_sample(gen_t *g, const int32_t *ids, int n, int chunk, const be_sample_row_t *row, int32_t *out_id,
                    gt_err_t *err);

/* Feeds ids[n] as gen_feed; last_hidden [n_embd] gets the final-norm hidden state of the last
 * token (model_forward_hidden): last-token pooling, before normalization (engine/models/embed.h). */
int gen_feed_hidden(gen_t *g, const int32_t *ids, int n, int chunk, float *last_hidden, gt_err_t *err);
#endif
