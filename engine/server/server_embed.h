/* engine/server/server_embed.h — the Embed RPC (gantry.v1.Engine/Embed) over the scheduler of an
 * embedding engine (sched_config_t.embed; engine/models/embed.h). */
#ifndef GANTRY_ENGINE_SERVER_EMBED_H
#define GANTRY_ENGINE_SERVER_EMBED_H
#include <pthread.h>

#include "common/grpc_server.h"
#include "engine/sched/sched.h"
#include "engine/server/server_metrics.h"
#include "format/tokenizer.h"

#define SRV_EMBED_MAX_INPUTS 2048 /* OpenAI's limit on inputs per request */

/* The Embed calls in progress, by call id, so that a cancelled call's inputs can be cancelled in
 * the scheduler (srv_embed_cancel). Owned by the server: srv_embed_live_init / _destroy. */
typedef struct srv_embed_live {
  pthread_mutex_t mu;
  struct emb_call *head; /* guarded by mu */
} srv_embed_live_t;

void srv_embed_live_init(srv_embed_live_t *l);
void srv_embed_live_destroy(srv_embed_live_t *l);

/* What an Embed call needs of its engine (borrowed; set by srv_attach, read-only afterwards). */
typedef struct {
  int is_embed;            /* 0: a generation engine, every Embed call is refused naming the model */
  sched_t *sched;
  const tok_t *tok;
  const char *model_name;
  int n_embd, n_ctx;
  int max_inputs;          /* inputs one call may have: the scheduler's waiting queue (--max-waiting) */
  int32_t eos;             /* appended to text inputs when add_eos (tokenizer.ggml.add_eos_token) */
  int add_eos;
  srv_embed_live_t *live;  /* the server's registry of calls in progress */
  srv_metrics_t *met;      /* gantry_engine_request_success_total{finished_reason} per input */
} srv_embed_ctx_t;

/* Handles one Embed call (on the completion-queue thread): validates, tokenizes and submits every
 * input, one scheduler request each, batched by the scheduler; the last request's final event
 * replies (scheduler thread) with the L2-normalized (dimensions: truncated, renormalized)
 * embeddings in input order, or the first failure's status. Bad input: INVALID_ARGUMENT naming
 * the field (more inputs than max_inputs too: they could never all wait in the scheduler's queue);
 * over the context: OUT_OF_RANGE; a generation engine: FAILED_PRECONDITION. A call
 * cancelled while its inputs are submitted submits no more of them. */
void srv_embed_call(const srv_embed_ctx_t *c, gt_rpc_call_t *call);

/* on_cancel of Embed (cq thread): the client left or the deadline passed (code CANCELLED or
 * DEADLINE_EXCEEDED). Cancels every input of the call still in the scheduler: waiting ones are
 * dropped, running ones at the end of the current step (the next chunk boundary), their KV
 * blocks and slots released; the last input's final finishes the call with `code` (nothing is
 * sent: the peer already has its status) and logs one line. A call already answered: no-op. */
void srv_embed_cancel(const srv_embed_ctx_t *c, gt_rpc_call_t *call, gt_rpc_code_t code);
#endif
