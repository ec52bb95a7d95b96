/* router/rq.h — one generation request: admission -> engine stream -> release (every exit path). */
#ifndef GANTRY_ROUTER_RQ_H
#define GANTRY_ROUTER_RQ_H

#include <stdbool.h>
#include "common/engine_client.h"
#include "router/openai.h"

typedef struct router router_t;

typedef struct rq rq_t;
typedef enum { RQ_EV_MSG, RQ_EV_ERROR } rq_ev_kind_t;
typedef struct rq_event {
  rq_ev_kind_t kind;
  Gantry__V1__GenerateResponse *msg; /* MSG: borrowed during the callback (NULL for an embedding)... */
  Gantry__V1__EmbedResponse *emb;    /* MSG of rq_start_embed (always final): borrowed likewise */
  bool *taken;                       /* ...unless the sink sets *taken = true (then it owns msg) */
  bool final;                        /* MSG: this is the Final (terminal) */
  oa_error_t err;                    /* ERROR (terminal) */
  int retry_after_s;                 /* ERROR 429 */
  bool started;                      /* a delta was already delivered */
  bool *pause;                       /* MSG: the sink sets *pause = true when its output is full:
                                        no more is read from the engine until rq_resume */
} rq_event_t;
/* Terminal events (Final / ERROR) come exactly once unless rq_cancel came first. */
typedef void (*rq_cb)(void *sink, const rq_event_t *ev);

/* Starts a request: takes ownership of gen. Returns the request, or NULL with *e filled
 * (unknown model 404, bad names 400); then gen was freed. */
rq_t *rq_start(router_t *rt, const char *model, const char *tenant, const char *request_id,
               Gantry__V1__GenerateRequest *gen, rq_cb cb, void *sink, oa_error_t *e);
/* Starts an embedding request (/v1/embeddings): the same admission, engine choice, retry and
 * release as rq_start, over the engine's unary Embed call; one MSG (final, ev.emb) or ERROR.
 * Takes ownership of emb; NULL with *e filled as for rq_start. */
rq_t *rq_start_embed(router_t *rt, const char *model, const char *tenant, const char *request_id,
                     Gantry__V1__EmbedRequest *emb, rq_cb cb, void *sink, oa_error_t *e);
/* Client gone: stops everything (admission wait, engine stream), releases the lease; no more
 * callbacks. */
void rq_cancel(rq_t *q);
/* The sink's output drained after it paused: read from the engine again. */
void rq_resume(rq_t *q);
/* Drain deadline: every live request ends with an ERROR event (503 router_shutdown) to its
 * sink, then its engine stream is cancelled and its lease released. */
void rq_abort_all(router_t *rt, const char *why);
/* Shutdown: cancels every live request (their streams end later through the mailbox). */
void rq_cancel_all(router_t *rt);

#endif
