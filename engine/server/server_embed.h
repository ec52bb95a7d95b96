/* engine/server/server_embed.h — the Embed RPC (gantry.v1.Engine/Embed) over the scheduler of an
 * embedding engine (sched_config_t.embed; engine/models/embed.h). */
#ifndef GANTRY_ENGINE_SERVER_EMBED_H
#define GANTRY_ENGINE_SERVER_EMBED_H
#include "common/grpc_server.h"
#include "engine/sched/sched.h"
#include "format/tokenizer.h"

#define SRV_EMBED_MAX_INPUTS 2048 /* OpenAI's limit on inputs per request */

/* What an Embed call needs of its engine (borrowed; set by srv_attach, read-only afterwards). */
typedef struct {
  int is_embed;            /* 0: a generation engine, every Embed call is refused naming the model */
  sched_t *sched;
  const tok_t *tok;
  const char *model_name;
  int n_embd, n_ctx;
  int32_t eos;             /* appended to text inputs when add_eos (tokenizer.ggml.add_eos_token) */
  int add_eos;
} srv_embed_ctx_t;

/* Handles one Embed call (on the completion-queue thread): validates, tokenizes and submits every
 * input, one scheduler request each, batched by the scheduler; the last request's final event
 * replies (scheduler thread) with the L2-normalized (dimensions: truncated, renormalized)
 * embeddings in input order, or the first failure's status. Bad input: INVALID_ARGUMENT naming
 * the field; over the context: OUT_OF_RANGE; a generation engine: FAILED_PRECONDITION. */
void srv_embed_call(const srv_embed_ctx_t *c, gt_rpc_call_t *call);
#endif
