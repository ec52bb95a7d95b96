/* tests/integration/engine_fixture.h — an in-process Engine service (engine/server/server.h) on a
 * loopback port with a real gRPC client (common/engine_client.h), and a stream collector that
 * tests wait on through a condition variable (no sleeps). */
#ifndef GANTRY_TESTS_ENGINE_FIXTURE_H
#define GANTRY_TESTS_ENGINE_FIXTURE_H

#include <pthread.h>
#include <stdint.h>

#include "common/engine_client.h"
#include "common/metrics.h"
#include "engine/server/server.h"

typedef struct {
  gguf_t *g;
  be_t *be;
  model_t *m;
  tok_t *tok;
  gt_metrics_t *reg;
  srv_t *srv;
  ec_client_t *ec;
  int port;
} efx_t;

/* Loads model (path under $GANTRY_GOLDEN) and serves it with cfg; returns 0 or a GT_E* code
 * (model_load failure, e.g. an architecture not ready yet). */
int efx_start(efx_t *f, const char *model_rel, const sched_config_t *cfg);
void efx_stop(efx_t *f);
/* Opens f->ec to an Engine service on 127.0.0.1:port (ec_close or efx_stop closes it). */
int efx_connect(efx_t *f, int port, gt_err_t *err);
/* The serving half of efx_start, for a fixture whose f->g and f->m the caller loaded (e.g. over
 * tensor-parallel ranks): tokenizer, metrics registry, server (on_fatal may be NULL) and client.
 * 0 or a GT_E* code with err filled; efx_stop frees what was made. */
int efx_serve(efx_t *f, const sched_config_t *cfg, void (*on_fatal)(void *ud, const char *why), gt_err_t *err);

/* What one Generate stream delivered. */
typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int32_t ids[8192];
  int n_ids;
  char text[16384];
  size_t text_len;
  char reasoning[16384];
  size_t reasoning_len;
  int n_msgs, n_tool_deltas, n_logprobs;
  char tool_name[128];
  char tool_args[1024];
  int got_final, delta_after_final;
  Gantry__V1__FinishReason finish;
  Gantry__V1__Usage usage;
  Gantry__V1__Timings timings;
  char error[512];
  int done;
  gt_rpc_status_t st;
  ec_stream_t *s;
  int cancel_after; /* > 0: ec_stream_cancel once this many tokens arrived */
} coll_t;

void coll_init(coll_t *c);
void coll_destroy(coll_t *c); /* releases the stream */
/* Starts Generate; 0 on success. */
int coll_start(efx_t *f, coll_t *c, const Gantry__V1__GenerateRequest *req, int64_t timeout_ms);
/* Waits until the stream ended (or timeout_ms); returns 1 when done. */
int coll_wait_done(coll_t *c, int64_t timeout_ms);
/* Waits until at least n tokens arrived or the stream ended; returns tokens so far. */
int coll_wait_tokens(coll_t *c, int n, int64_t timeout_ms);
int coll_tokens(coll_t *c);

/* Request builders (static storage inside; fields may be overridden by the caller). */
typedef struct {
  Gantry__V1__GenerateRequest req;
  Gantry__V1__SamplingParams sp;
  Gantry__V1__TokenIds toks;
  Gantry__V1__ChatInput chat;
  Gantry__V1__ChatMessage msg[4];
  Gantry__V1__ChatMessage *msgp[4];
  int32_t ids[4096];
} reqb_t;
/* Greedy request over token ids [ids, n) with max_tokens (ignore_eos on). */
void reqb_tokens(reqb_t *b, const int32_t *ids, int n, int max_tokens);
/* Prompt text request. */
void reqb_prompt(reqb_t *b, const char *text, int max_tokens);
/* One-user-message chat. */
void reqb_chat(reqb_t *b, const char *user, int max_tokens);

/* reqb_tokens + coll_init + coll_start, then coll_wait_done, all with timeout_ms: 0 once the
 * stream ended, -1 if it could not start or did not end; the caller reads c and coll_destroys it. */
int coll_run_tokens(efx_t *f, coll_t *c, const int32_t *ids, int n, int max_tokens, int64_t timeout_ms);

/* Waits (bounded) until the server's running == 0, waiting == 0 and kv_used <= kv_used_max. */
int efx_wait_quiet(efx_t *f, int kv_used_max, int64_t timeout_ms);

/* GET /metrics from 127.0.0.1:port; malloc'd body or NULL. */
char *efx_http_get(int port, const char *path);

#endif
