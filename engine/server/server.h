/* engine/server/server.h — the gantry.v1.Engine gRPC service of one model (gantry-engine serve).
 *
 * Lifecycle: srv_create starts listening at once with health LOADING (Generate / Tokenize /
 * Info answer UNAVAILABLE); srv_attach takes the loaded model, creates the scheduler and its
 * thread and turns READY; srv_drain refuses new Generate calls (UNAVAILABLE) while running ones
 * go on; srv_wait_idle waits for them; srv_free shuts the gRPC server down (cancelling what is
 * left: each stream then ends CANCELLED and its sequence is freed) and frees everything.
 *
 * Threads: gRPC's completion-queue thread runs the handlers (Generate only queues the call;
 * Tokenize, Info, Health answer inline) and on_cancel (sched_cancel); a prep thread (owned
 * here) validates, renders and tokenizes each Generate request and submits it, so a long
 * prompt never holds up the completion queue; the scheduler thread (owned here) runs the
 * steps and sends deltas and Finals directly (the glue's sends are thread-safe). A table of
 * live requests keyed by call id, under one lock, is what they share; every call is finished
 * exactly once: by the prep thread when the request never reached the scheduler, or by the
 * scheduler's final event. */
#ifndef GANTRY_ENGINE_SERVER_H
#define GANTRY_ENGINE_SERVER_H

#include <stdint.h>

#include "common/metrics.h"
#include "engine/chat/chat.h"
#include "format/gguf.h"
#include "engine/models/model.h"
#include "engine/sched/sched.h"
#include "format/tokenizer.h"

typedef struct srv srv_t;

/* SRV_FAILED: the model cannot run any more (a tensor-parallel rank failed, engine/models/tp.h):
 * running requests ended with an error, Generate is UNAVAILABLE, grpc.health NOT_SERVING (the
 * gantry Health says DRAINING); the process should exit non-zero (srv_opts_t.on_fatal). */
typedef enum { SRV_LOADING = 1, SRV_READY = 2, SRV_DRAINING = 3, SRV_FAILED = 4 } srv_state_t;

typedef struct {
  const char *listen;       /* "HOST:PORT" ("127.0.0.1:0": a free port) */
  /* optional (borrowed): a token every call must carry, and TLS material (PEM) for the port;
   * tls_client_ca makes it mutual TLS (common/grpc_creds.h) */
  const char *auth_token, *tls_cert, *tls_key, *tls_client_ca;
  gt_metrics_t *metrics;    /* registry for gantry_engine_* (borrowed; may be NULL) */
  /* optional: called once, on the scheduler thread, when the engine turns SRV_FAILED */
  void (*on_fatal)(void *ud, const char *why);
  void *fatal_ud;
} srv_opts_t;

/* Starts the gRPC service in LOADING. *port receives the bound port. */
int srv_create(const srv_opts_t *o, srv_t **out, int *port, gt_err_t *err);

/* Model description for Info (strings copied). */
typedef struct {
  const char *model_name, *architecture, *version;
  const char *const *weight_types;
  int n_weight_types;
} srv_model_info_t;

/* Creates the scheduler over m and tok (both borrowed; they must outlive srv_free), starts
 * the scheduler thread and turns READY. g gives the chat template (borrowed for this call
 * only). A model without a usable chat template still serves prompt / token input (chat
 * input then fails with INVALID_ARGUMENT naming the reason). */
int srv_attach(srv_t *s, const gguf_t *g, model_t *m, const tok_t *tok, const sched_config_t *cfg,
               const srv_model_info_t *info, gt_err_t *err);

srv_state_t srv_state(srv_t *s);
/* Stats of the scheduler (zeroed before srv_attach). */
void srv_stats(srv_t *s, sched_stats_t *out);

/* Stops accepting Generate calls (UNAVAILABLE) and reports DRAINING. Thread-safe. */
void srv_drain(srv_t *s);
/* Waits until no request is live or timeout_ms passes; returns 1 when idle. */
int srv_wait_idle(srv_t *s, int64_t timeout_ms);
/* Live Generate calls (queued for preparation, or submitted and not yet finished). */
int srv_live(srv_t *s);

/* Shuts down gRPC (grace_ms for running calls, then cancel), stops the scheduler thread and
 * frees everything. NULL is a no-op. */
void srv_free(srv_t *s, int64_t grace_ms);

#endif
