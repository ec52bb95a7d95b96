/* router/grpc_front.c — gantry.v1.Router (Generate, Embed, ListModels) and gantry.v1.Admin over the
 * gRPC server glue. Handlers run on the server's cq thread and only post the call to the loop;
 * everything else (auth, admission, engine streams) happens on the loop, like HTTP requests.
 * Tenant: metadata "authorization: Bearer K" or "x-api-key: K".
 * Flow control, as on the HTTP front: a Generate stream whose unsent output reaches
 * --stream-buffer-bytes stops reading from the engine until the client took half of it; if it
 * does not within --stream-write-timeout-s, the request is cancelled (engine stream, lease) and
 * the call aborted with DEADLINE_EXCEEDED, dropping everything queued for it. A request that fails
 * while its stream is paused (engine error, deadline, drain) is aborted the same way, with the
 * error's status: its final message would otherwise wait behind the queue until the client left. */
#include <event2/event.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/grpc_delta.h"
#include "common/grpc_server.h"
#include "common/log.h"
#include "gantry/v1/router.pb-c.h"
#include "router/grpc_front.h"
#include "router/openai_embed.h"
#include "router/req_limits.h"
#include "router/router.h"

#define M_GENERATE "/gantry.v1.Router/Generate"
#define M_MODELS "/gantry.v1.Router/ListModels"
#define M_EMBED "/gantry.v1.Router/Embed"
#define M_GETLIM "/gantry.v1.Admin/GetLimits"
#define M_SETLIM "/gantry.v1.Admin/SetLimits"
#define M_QUEUES "/gantry.v1.Admin/ListQueues"
#define M_GENERATE_ROUTE "grpc:Generate" /* route labels of gantry_router_requests_total */
#define M_MODELS_ROUTE "grpc:ListModels"
#define M_EMBED_ROUTE "grpc:Embed"

/* Every method with its route label (admin calls: the method itself). */
static const struct {
  const char *method, *route;
} methods[] = {{M_GENERATE, M_GENERATE_ROUTE}, {M_MODELS, M_MODELS_ROUTE}, {M_EMBED, M_EMBED_ROUTE},
               {M_GETLIM, M_GETLIM},           {M_SETLIM, M_SETLIM},           {M_QUEUES, M_QUEUES}};
#define N_METHODS (int)(sizeof methods / sizeof methods[0])

/* call's row of methods (only the methods registered above reach the front). */
static int method_index(gt_rpc_call_t *call) {
  const char *m = gt_rpc_call_method(call);
  int i = 0;
  while (i < N_METHODS - 1 && strcmp(methods[i].method, m)) i++;
  return i;
}

static const char *route_of(gt_rpc_call_t *call) { return methods[method_index(call)].route; }

/* A Generate or Embed call from arrival to its end (loop thread). */
typedef struct gctx {
  rgf_t *g;
  gt_rpc_call_t *call;
  const char *route;    /* its route label (methods[]) */
  uint64_t call_id;
  rq_t *rq;
  char model[ADM_NAME_MAX + 1], tenant[ADM_NAME_MAX + 1];
  char id[40];
  struct event *wtimer; /* set while paused: the client does not take its output */
  bool failed;          /* a choice's Final had finish_reason ERROR */
  struct gctx *prev, *next;
} gctx_t;

typedef struct actx actx_t;

struct rgf {
  router_t *rt;
  gt_rpc_server_t *srv; /* NULL once rgf_stop shut it down */
  gctx_t *live;         /* Generate and Embed calls in progress (loop thread) */
  actx_t *admin;        /* admin calls waiting on Redis, and those rgf_stop ended (loop thread) */
  pthread_mutex_t mu;   /* guards the three below: cq thread vs loop */
  bool stopping;        /* rgf_stop began: nothing more is posted to the loop (written by the loop) */
  int posts;            /* posted to the loop and not yet run */
  /* calls the cq thread refused (by method: [0] stopping, [1] out of memory), not yet counted
   * in the metrics, which only the loop touches */
  int refused[N_METHODS][2];
  atomic_int admin_calls;     /* admin calls not yet answered (for tests) */
  atomic_int refused_cancels; /* clients' cancels not posted because rgf_stop began (for tests) */
};

#define POST_STOPPING 1

/* cq thread: hands fn(g, b, x) to the loop thread. 0; -1 out of memory; POST_STOPPING once
 * rgf_stop began. On failure fn will not run. */
static int front_post(rgf_t *g, mbox_fn fn, void *b, intptr_t x) {
  pthread_mutex_lock(&g->mu);
  int rc = g->stopping ? POST_STOPPING : mbox_post(g->rt->mb, fn, g, b, x);
  if (rc == 0) g->posts++;
  pthread_mutex_unlock(&g->mu);
  return rc;
}

/* Loop thread, g->mu held: counts the calls the cq thread refused since the last time, each once,
 * 503 when stopping, 500 out of memory (as on the loop). */
static void count_refused(rgf_t *g) {
  for (int i = 0; i < N_METHODS; i++)
    for (int k = 0; k < 2; k++)
      for (; g->refused[i][k] > 0; g->refused[i][k]--) metrics_request(g->rt->metrics, methods[i].route, k ? 500 : 503);
}

/* Loop thread, first thing in every function front_post handed over. */
static void post_ran(rgf_t *g) {
  pthread_mutex_lock(&g->mu);
  g->posts--;
  count_refused(g);
  pthread_mutex_unlock(&g->mu);
}

/* cq thread: a new call front_post could not hand to the loop; counted by the loop later. */
static void refuse(rgf_t *g, gt_rpc_call_t *call, int rc) {
  pthread_mutex_lock(&g->mu);
  g->refused[method_index(call)][rc == POST_STOPPING ? 0 : 1]++;
  pthread_mutex_unlock(&g->mu);
  if (rc == POST_STOPPING) gt_rpc_call_finish(call, GT_RPC_UNAVAILABLE, "router shutting down");
  else gt_rpc_call_finish(call, GT_RPC_RESOURCE_EXHAUSTED, "out of memory");
}

/* Loop thread: a new call out of memory: answered at once, counted 500. */
static void refuse_oom(rgf_t *g, gt_rpc_call_t *call) {
  metrics_request(g->rt->metrics, route_of(call), 500);
  gt_rpc_call_finish(call, GT_RPC_RESOURCE_EXHAUSTED, "out of memory");
}

/* Loop thread: a new call posted before rgf_stop began, run by its drain: answered at once,
 * counted 503. */
static bool refused_stopping(rgf_t *g, gt_rpc_call_t *call) {
  if (!g->stopping) return false;
  metrics_request(g->rt->metrics, route_of(call), 503);
  gt_rpc_call_finish(call, GT_RPC_UNAVAILABLE, "router shutting down");
  return true;
}

/* HTTP status <-> gRPC code, both ways (the first row of a code is its HTTP status). */
static const struct {
  int http;
  gt_rpc_code_t code;
} status_codes[] = {{200, GT_RPC_OK},
                    {400, GT_RPC_INVALID_ARGUMENT},
                    {413, GT_RPC_INVALID_ARGUMENT},
                    {401, GT_RPC_UNAUTHENTICATED},
                    {403, GT_RPC_PERMISSION_DENIED},
                    {404, GT_RPC_NOT_FOUND},
                    {429, GT_RPC_RESOURCE_EXHAUSTED},
                    {504, GT_RPC_DEADLINE_EXCEEDED},
                    {503, GT_RPC_UNAVAILABLE}};

static gt_rpc_code_t code_of_status(int http) {
  for (size_t i = 0; i < sizeof status_codes / sizeof status_codes[0]; i++)
    if (status_codes[i].http == http) return status_codes[i].code;
  return GT_RPC_INTERNAL;
}

/* The HTTP status gantry_router_requests_total counts a call ended with code under. */
static int status_of_code(gt_rpc_code_t code) {
  for (size_t i = 0; i < sizeof status_codes / sizeof status_codes[0]; i++)
    if (status_codes[i].code == code) return status_codes[i].http;
  return 500;
}

/* Ends c (its call already finished or aborted): counts the request once, like the HTTP front
 * (status: 200, the error's HTTP status, 499 when the client cancelled or stopped reading). */
static void gctx_unlink(gctx_t *c, int status) {
  metrics_request(c->g->rt->metrics, c->route, status);
  if (c->wtimer) event_free(c->wtimer);
  if (c->prev) c->prev->next = c->next;
  else c->g->live = c->next;
  if (c->next) c->next->prev = c->prev;
  free(c);
}

static void gctx_done(gctx_t *c, int status, gt_rpc_code_t code, const char *msg) {
  if (c->call) gt_rpc_call_finish(c->call, code, msg);
  c->call = NULL;
  gctx_unlink(c, status);
}

/* Like gctx_done, but aborts the call: what is queued for the client is dropped. */
static void gctx_abort(gctx_t *c, int status, gt_rpc_code_t code, const char *msg) {
  gt_rpc_call_abort(c->call, code, msg);
  c->call = NULL;
  gctx_unlink(c, status);
}

static gctx_t *gctx_find(rgf_t *g, uint64_t call_id) {
  for (gctx_t *c = g->live; c; c = c->next)
    if (c->call_id == call_id) return c;
  return NULL;
}

/* ---- flow control ---- */
/* Loop thread: the client took its output down to half the bound: read from the engine again. */
static void drained_loop(void *a, void *b, intptr_t id) {
  (void)b;
  post_ran(a);
  gctx_t *c = gctx_find(a, (uint64_t)id);
  if (!c || !c->wtimer) return;
  event_free(c->wtimer);
  c->wtimer = NULL;
  rq_resume(c->rq);
}

/* cq thread */
static void on_drained(void *user, gt_rpc_call_t *call) {
  rgf_t *g = user;
  front_post(g, drained_loop, NULL, (intptr_t)gt_rpc_call_id(call)); /* stopping: rgf_stop ends the call */
}

/* A paused stream did not drain for --stream-write-timeout-s: the client does not read. */
static void on_write_timeout(evutil_socket_t fd, short what, void *arg) {
  gctx_t *c = arg;
  (void)fd, (void)what;
  router_t *rt = c->g->rt;
  size_t unsent = gt_rpc_call_unsent_bytes(c->call);
  GT_LOG_WARN("rid=%s client does not read: gRPC stream cancelled after %d s with %zu bytes unsent", c->id,
              rt->cfg.stream_write_timeout_s, unsent);
  metrics_reject(rt->metrics, "client_write_timeout");
  rq_t *q = c->rq;
  c->rq = NULL;
  rq_cancel(q);
  char msg[96];
  snprintf(msg, sizeof msg, "the client did not read its stream for %d s", rt->cfg.stream_write_timeout_s);
  gctx_abort(c, 499, GT_RPC_DEADLINE_EXCEEDED, msg);
}

/* After a delta was queued: a stream whose unsent output reached the bound pauses the engine. */
static void maybe_pause(gctx_t *c, const rq_event_t *ev) {
  router_t *rt = c->g->rt;
  if (c->wtimer || gt_rpc_call_unsent_bytes(c->call) < (size_t)rt->cfg.stream_buffer_bytes) return;
  c->wtimer = evtimer_new(rt->base, on_write_timeout, c);
  struct timeval tv = {rt->cfg.stream_write_timeout_s, 0};
  if (!c->wtimer || evtimer_add(c->wtimer, &tv)) {
    if (c->wtimer) event_free(c->wtimer);
    c->wtimer = NULL; /* out of memory: keep reading rather than stall forever */
    return;
  }
  if (!gt_rpc_call_on_drain(c->call, (size_t)rt->cfg.stream_buffer_bytes / 2, on_drained, c->g)) {
    event_free(c->wtimer); /* drained meanwhile */
    c->wtimer = NULL;
    return;
  }
  *ev->pause = true;
}

static void on_gen_event(void *sink, const rq_event_t *ev) {
  gctx_t *c = sink;
  if (ev->kind == RQ_EV_ERROR) {
    c->rq = NULL;
    if (c->wtimer) {
      /* paused: the client has not taken the bound queued for it, and a final message would
       * wait behind it, holding it until the connection drops; end the call now instead */
      GT_LOG_WARN("rid=%s request failed while its gRPC stream was paused: call ended, %zu bytes unsent dropped: %s",
                  c->id, gt_rpc_call_unsent_bytes(c->call), ev->err.message);
      gctx_abort(c, ev->err.status, code_of_status(ev->err.status), ev->err.message);
      return;
    }
    if (ev->started) {
      gt_genresp_t *f = gt_final_new(GANTRY__V1__FINISH_REASON__FINISH_REASON_ERROR, ev->err.message);
      if (f) gt_rpc_call_send(c->call, &f->base, GT_RPC_SEND_NO_MERGE);
      gctx_done(c, ev->err.status, GT_RPC_OK, NULL);
    } else {
      char msg[600];
      if (ev->retry_after_s > 0) snprintf(msg, sizeof msg, "%s (retry-after: %d)", ev->err.message, ev->retry_after_s);
      else snprintf(msg, sizeof msg, "%s", ev->err.message);
      gctx_done(c, ev->err.status, code_of_status(ev->err.status), msg);
    }
    return;
  }
  *ev->taken = true;
  const Gantry__V1__GenerateResponse *r = ev->msg;
  if (r->kind_case == GANTRY__V1__GENERATE_RESPONSE__KIND_FINAL &&
      r->final->finish_reason == GANTRY__V1__FINISH_REASON__FINISH_REASON_ERROR)
    c->failed = true;
  gt_rpc_call_send(c->call, &ev->msg->base, ev->final ? GT_RPC_SEND_NO_MERGE : 0);
  if (ev->final) {
    c->rq = NULL;
    /* the call ends OK (the error is in its final message) but the generation failed: counted
     * 500, as the HTTP front counts it with or without streaming */
    gctx_done(c, c->failed ? 500 : 200, GT_RPC_OK, NULL);
  } else {
    maybe_pause(c, ev);
  }
}

static const char *md_key(gt_rpc_call_t *call) {
  const char *k = auth_bearer(gt_rpc_call_metadata(call, "authorization"));
  return k ? k : gt_rpc_call_metadata(call, "x-api-key");
}

/* ---- Generate ---- */
/* A client that cancelled while its key was checked counts 499, whatever the check said (as
 * one that leaves at any later point); cancel_loop leaves such a call (no rq yet) to us. */
/* The key check's answer for a Generate or Embed call: false when c was ended (cancelled, bad
 * key, Redis down); else c->tenant is set. */
static bool call_authed(gctx_t *c, auth_status_t st, const char *tenant) {
  if (gt_rpc_call_is_cancelled(c->call)) {
    gctx_done(c, 499, GT_RPC_CANCELLED, NULL);
    return false;
  }
  if (st != AUTH_OK) {
    gctx_done(c, st == AUTH_DENIED ? 401 : 503, st == AUTH_DENIED ? GT_RPC_UNAUTHENTICATED : GT_RPC_UNAVAILABLE,
              st == AUTH_DENIED   ? "invalid or missing API key"
              : st == AUTH_NOKEYS ? AUTH_NOKEYS_MSG
                                  : "cannot check the API key: Redis is unreachable");
    return false;
  }
  snprintf(c->tenant, sizeof c->tenant, "%s", tenant);
  return true;
}

/* c->model, and c->id: the client's x-request-id when it is a usable one, else a new id. */
static void call_names(gctx_t *c, const char *model) {
  snprintf(c->model, sizeof c->model, "%s", model);
  const char *rid = gt_rpc_call_metadata(c->call, "x-request-id");
  if (rid && rid[0] && strlen(rid) < sizeof c->id && !strpbrk(rid, " :*")) snprintf(c->id, sizeof c->id, "%s", rid);
  else rt_request_id(c->g->rt, c->id);
}

/* Own copy of an engine request (the rq keeps it for a retry): free with
 * protobuf_c_message_free_unpacked; NULL when out of memory. */
static ProtobufCMessage *msg_copy(const ProtobufCMessage *m) {
  const size_t n = protobuf_c_message_get_packed_size(m);
  uint8_t *buf = malloc(n ? n : 1);
  if (!buf) return NULL;
  protobuf_c_message_pack(m, buf);
  ProtobufCMessage *r = protobuf_c_message_unpack(m->descriptor, NULL, n, buf);
  free(buf);
  return r;
}

static void gen_auth(void *arg, auth_status_t st, const char *tenant) {
  gctx_t *c = arg;
  router_t *rt = c->g->rt;
  if (!call_authed(c, st, tenant)) return;
  const Gantry__V1__RouterGenerateRequest *in = (const Gantry__V1__RouterGenerateRequest *)gt_rpc_call_request(c->call);
  if (!in->model || !in->model[0] || !in->request || in->request->input_case == GANTRY__V1__GENERATE_REQUEST__INPUT__NOT_SET) {
    gctx_done(c, 400, GT_RPC_INVALID_ARGUMENT, "model and request (with chat, prompt or tokens input) are required");
    return;
  }
  if (in->request->input_case == GANTRY__V1__GENERATE_REQUEST__INPUT_CHAT && in->request->chat->n_messages == 0) {
    gctx_done(c, 400, GT_RPC_INVALID_ARGUMENT, "chat.messages must not be empty");
    return;
  }
  if (in->request->max_tokens_opt_case && in->request->max_tokens == 0) {
    gctx_done(c, 400, GT_RPC_INVALID_ARGUMENT, "max_tokens must be at least 1");
    return;
  }
  Gantry__V1__GenerateRequest *gen = (Gantry__V1__GenerateRequest *)msg_copy(&in->request->base);
  if (!gen) {
    gctx_done(c, 500, GT_RPC_INTERNAL, "out of memory");
    return;
  }
  gen->parse_special_tokens = false; /* user content is text, never control tokens */
  oa_error_t le;
  if (rql_check(gen, &le)) { /* the HTTP front's limits (its parser applies the same ones) */
    protobuf_c_message_free_unpacked(&gen->base, NULL);
    metrics_reject(rt->metrics, "bad_request");
    gctx_done(c, 400, GT_RPC_INVALID_ARGUMENT, le.message);
    return;
  }
  call_names(c, in->model);
  oa_error_t e;
  c->rq = rq_start(rt, c->model, c->tenant, c->id, gen, on_gen_event, c, &e);
  if (!c->rq) gctx_done(c, e.status, code_of_status(e.status), e.message);
}

/* Loop thread: a new Generate or Embed call (x: 1 for Embed) joins the live list, then its key
 * is checked (gen_auth / emb_auth). */
static void emb_auth(void *arg, auth_status_t st, const char *tenant);
static void gen_loop(void *a, void *b, intptr_t x) {
  rgf_t *g = a;
  gt_rpc_call_t *call = b;
  post_ran(g);
  if (refused_stopping(g, call)) return;
  gctx_t *c = calloc(1, sizeof *c);
  if (!c) {
    refuse_oom(g, call);
    return;
  }
  c->g = g;
  c->call = call;
  c->route = route_of(call);
  c->call_id = gt_rpc_call_id(call);
  c->next = g->live;
  if (g->live) g->live->prev = c;
  g->live = c;
  auth_check(g->rt->auth, md_key(call), AUTH_FOR_API, x ? emb_auth : gen_auth, c);
}

static void cancel_loop(void *a, void *b, intptr_t id) {
  (void)b;
  post_ran(a);
  gctx_t *c = gctx_find(a, (uint64_t)id);
  if (!c || !c->rq) return;
  rq_t *q = c->rq;
  c->rq = NULL;
  rq_cancel(q);
  gctx_done(c, 499, GT_RPC_CANCELLED, NULL);
}

static void on_generate(void *user, gt_rpc_call_t *call) {
  rgf_t *g = user;
  int rc = front_post(g, gen_loop, call, 0);
  if (rc) refuse(g, call, rc);
}

/* ---- Embed ---- */
/* The engine's answer (the one message) or the request's error: the call's status. */
static void on_emb_event(void *sink, const rq_event_t *ev) {
  gctx_t *c = sink;
  c->rq = NULL;
  if (ev->kind == RQ_EV_ERROR) {
    char msg[600];
    if (ev->retry_after_s > 0) snprintf(msg, sizeof msg, "%s (retry-after: %d)", ev->err.message, ev->retry_after_s);
    else snprintf(msg, sizeof msg, "%s", ev->err.message);
    if (ev->err.status == 400 && ev->err.param[0]) gt_rpc_call_set_trailer(c->call, GT_RPC_MD_PARAM, ev->err.param);
    gctx_done(c, ev->err.status, code_of_status(ev->err.status), msg);
    return;
  }
  *ev->taken = true;
  gt_rpc_call_send(c->call, &ev->emb->base, GT_RPC_SEND_NO_MERGE);
  gctx_done(c, 200, GT_RPC_OK, NULL);
}

/* The same limits as POST /v1/embeddings (oa_embed_check), then the same admission (rq). */
static void emb_auth(void *arg, auth_status_t st, const char *tenant) {
  gctx_t *c = arg;
  router_t *rt = c->g->rt;
  if (!call_authed(c, st, tenant)) return;
  const Gantry__V1__RouterEmbedRequest *in = (const Gantry__V1__RouterEmbedRequest *)gt_rpc_call_request(c->call);
  oa_error_t le = {0};
  if (!in->model || !in->model[0] || strlen(in->model) >= sizeof c->model)
    oa_err(&le, 400, "invalid_request_error", "model", "invalid_value", "'model' must be a non-empty name");
  else if (!in->request)
    oa_err(&le, 400, "invalid_request_error", "input", "missing_required_parameter", "request (with texts or tokens) is required");
  if (le.status || oa_embed_check(in->request, &le)) {
    metrics_reject(rt->metrics, "bad_request");
    gt_rpc_call_set_trailer(c->call, GT_RPC_MD_PARAM, le.param);
    gctx_done(c, 400, GT_RPC_INVALID_ARGUMENT, le.message);
    return;
  }
  Gantry__V1__EmbedRequest *emb = (Gantry__V1__EmbedRequest *)msg_copy(&in->request->base);
  if (!emb) {
    gctx_done(c, 500, GT_RPC_INTERNAL, "out of memory");
    return;
  }
  call_names(c, in->model);
  oa_error_t e;
  c->rq = rq_start_embed(rt, c->model, c->tenant, c->id, emb, on_emb_event, c, &e);
  if (!c->rq) gctx_done(c, e.status, code_of_status(e.status), e.message);
}

static void on_embed(void *user, gt_rpc_call_t *call) {
  rgf_t *g = user;
  int rc = front_post(g, gen_loop, call, 1);
  if (rc) refuse(g, call, rc);
}

/* Generate's and Embed's: the request (admission wait, engine call, lease) ends, counted 499. */
static void on_gen_cancel(void *user, gt_rpc_call_t *call, gt_rpc_code_t code) {
  rgf_t *g = user;
  (void)code;
  if (front_post(g, cancel_loop, NULL, (intptr_t)gt_rpc_call_id(call)) == POST_STOPPING)
    atomic_fetch_add(&g->refused_cancels, 1); /* rgf_stop ends the call (499: it is cancelled) */
}

/* ---- ListModels ---- */
static void models_loop(void *a, void *b, intptr_t x) {
  rgf_t *g = a;
  gt_rpc_call_t *call = b;
  (void)x;
  pool_t *p = g->rt->pool;
  Gantry__V1__ListModelsResponse *r = malloc(sizeof *r);
  if (!r) {
    refuse_oom(g, call);
    return;
  }
  gantry__v1__list_models_response__init(r);
  r->models = calloc((size_t)pool_count(p) + 1, sizeof *r->models);
  for (int i = 0; r->models && i < pool_count(p); i++) {
    pool_engine_t *e = pool_at(p, i);
    Gantry__V1__ModelEntry *m = NULL;
    for (size_t k = 0; k < r->n_models; k++)
      if (!strcmp(r->models[k]->id, e->model)) m = r->models[k];
    if (!m) {
      m = malloc(sizeof *m);
      if (!m) break;
      gantry__v1__model_entry__init(m);
      m->id = strdup(e->model);
      r->models[r->n_models++] = m;
    }
    m->engines_total++;
    if (e->up) m->engines_ready++;
    if (e->context_length > m->context_length) m->context_length = e->context_length;
  }
  metrics_request(g->rt->metrics, M_MODELS_ROUTE, 200);
  gt_rpc_call_reply(call, &r->base);
}

typedef struct mctx {
  rgf_t *g;
  gt_rpc_call_t *call;
} mctx_t;

static void models_auth(void *arg, auth_status_t st, const char *tenant) {
  mctx_t *m = arg;
  (void)tenant;
  if (st == AUTH_OK) models_loop(m->g, m->call, 0);
  else {
    metrics_request(m->g->rt->metrics, M_MODELS_ROUTE, st == AUTH_DENIED ? 401 : 503);
    gt_rpc_call_finish(m->call, st == AUTH_DENIED ? GT_RPC_UNAUTHENTICATED : GT_RPC_UNAVAILABLE,
                       st == AUTH_DENIED ? "ListModels needs an API key (--protect-info)" : "cannot check the API key");
  }
  free(m);
}

/* --protect-info: ListModels needs an API key or the admin key. */
static void models_check(void *a, void *b, intptr_t x) {
  rgf_t *g = a;
  gt_rpc_call_t *call = b;
  post_ran(g);
  if (refused_stopping(g, call)) return;
  if (!g->rt->cfg.protect_info) {
    models_loop(g, call, x);
    return;
  }
  mctx_t *m = malloc(sizeof *m);
  if (!m) {
    refuse_oom(g, call);
    return;
  }
  *m = (mctx_t){g, call};
  auth_check(g->rt->auth, md_key(call), AUTH_FOR_ANY, models_auth, m);
}

static void on_models(void *user, gt_rpc_call_t *call) {
  rgf_t *g = user;
  int rc = front_post(g, models_check, call, 0);
  if (rc) refuse(g, call, rc);
}

/* ---- Admin ---- */
/* An admin call from arrival to its answer, and on until its admission callback came: rgf_stop
 * answers a call still waiting on Redis (call NULL from then on); its callback frees c, or
 * rgf_free when adm_destroy dropped the callback. */
struct actx {
  rgf_t *g;
  gt_rpc_call_t *call;
  char model[ADM_NAME_MAX + 1], tenant[ADM_NAME_MAX + 1];
  actx_t *prev, *next;
};

/* Unlinks and frees c (its call already answered). */
static void admin_free(actx_t *c) {
  if (c->prev) c->prev->next = c->next;
  else c->g->admin = c->next;
  if (c->next) c->next->prev = c->prev;
  free(c);
}

/* Answers c's call (c->call set) with reply (given to the call) when not NULL, else with code
 * and msg, and counts it, like the HTTP front, with its outcome; c->call is NULL after. Admin
 * calls have no rate limit: RESOURCE_EXHAUSTED is out of memory (the front's or admission's
 * GT_ENOMEM), counted 500 like every call refused out of memory, not 429. */
static void admin_answer(actx_t *c, gt_rpc_code_t code, const char *msg, ProtobufCMessage *reply) {
  const int status = reply ? 200 : code == GT_RPC_RESOURCE_EXHAUSTED ? 500 : status_of_code(code);
  metrics_request(c->g->rt->metrics, route_of(c->call), status);
  if (reply) gt_rpc_call_reply(c->call, reply);
  else gt_rpc_call_finish(c->call, code, msg);
  c->call = NULL;
  atomic_fetch_sub(&c->g->admin_calls, 1);
}

/* Answers c's call unless rgf_stop did (reply: only while c->call is set), and frees c. */
static void admin_end(actx_t *c, gt_rpc_code_t code, const char *msg, ProtobufCMessage *reply) {
  if (c->call) admin_answer(c, code, msg, reply);
  admin_free(c);
}

static void admin_fail(actx_t *c, gt_rpc_code_t code, const char *msg) { admin_end(c, code, msg, NULL); }

static void lim_reply(void *arg, int status, const char *msg, const adm_limits_t *l) {
  actx_t *c = arg;
  if (!c->call || status != GT_OK || !l) {
    admin_fail(c, gt_rpc_code_from_err(status ? status : GT_EIO), msg ? msg : "limits unavailable");
    return;
  }
  Gantry__V1__Limits *r = malloc(sizeof *r);
  if (!r) {
    admin_fail(c, GT_RPC_RESOURCE_EXHAUSTED, "out of memory");
    return;
  }
  gantry__v1__limits__init(r);
  r->model = strdup(c->model);
  r->tenant = strdup(c->tenant);
  r->max_inflight = l->max_inflight;
  r->max_queued = l->max_queued;
  r->weight = l->weight;
  admin_end(c, GT_RPC_OK, NULL, &r->base);
}

static void set_done(void *arg, int status, const char *msg) {
  actx_t *c = arg;
  gt_err_t err;
  if (!c->call || status != GT_OK) {
    admin_fail(c, gt_rpc_code_from_err(status), msg);
    return;
  }
  GT_LOG_INFO("limits changed via gRPC model=%s tenant=%s", c->model, c->tenant[0] ? c->tenant : "-");
  if (adm_limits_get(c->g->rt->adm, c->model, c->tenant, lim_reply, c, &err)) admin_fail(c, gt_rpc_code_from_err(err.code), err.msg);
}

static void queues_reply(void *arg, int status, const char *msg, const adm_queue_row_t *rows, int n) {
  actx_t *c = arg;
  if (!c->call || status != GT_OK) {
    admin_fail(c, gt_rpc_code_from_err(status), msg);
    return;
  }
  Gantry__V1__ListQueuesResponse *r = malloc(sizeof *r);
  if (!r) {
    admin_fail(c, GT_RPC_RESOURCE_EXHAUSTED, "out of memory");
    return;
  }
  gantry__v1__list_queues_response__init(r);
  r->rows = calloc((size_t)n + 1, sizeof *r->rows);
  for (int i = 0; r->rows && i < n; i++) {
    Gantry__V1__QueueRow *q = malloc(sizeof *q);
    if (!q) break;
    gantry__v1__queue_row__init(q);
    q->model = strdup(rows[i].model);
    q->tenant = strdup(rows[i].tenant);
    q->queued = rows[i].queued;
    q->inflight = rows[i].inflight;
    q->max_inflight = rows[i].max_inflight;
    q->max_queued = rows[i].max_queued;
    q->weight = rows[i].weight;
    r->rows[r->n_rows++] = q;
  }
  admin_end(c, GT_RPC_OK, NULL, &r->base);
}

static void admin_auth(void *arg, auth_status_t st, const char *tenant) {
  actx_t *c = arg;
  (void)tenant;
  gt_err_t err = {0};
  if (st != AUTH_OK) {
    admin_fail(c, st == AUTH_DENIED ? GT_RPC_PERMISSION_DENIED : GT_RPC_UNAVAILABLE,
               st == AUTH_DENIED ? "admin calls need the admin key" : "Redis is unreachable");
    return;
  }
  const char *m = gt_rpc_call_method(c->call);
  adm_t *adm = c->g->rt->adm;
  int rc;
  if (!strcmp(m, M_GETLIM)) {
    const Gantry__V1__GetLimitsRequest *r = (const void *)gt_rpc_call_request(c->call);
    snprintf(c->model, sizeof c->model, "%s", r->model);
    snprintf(c->tenant, sizeof c->tenant, "%s", r->tenant);
    rc = adm_limits_get(adm, c->model, c->tenant, lim_reply, c, &err);
  } else if (!strcmp(m, M_SETLIM)) {
    const Gantry__V1__SetLimitsRequest *r = (const void *)gt_rpc_call_request(c->call);
    snprintf(c->model, sizeof c->model, "%s", r->model);
    snprintf(c->tenant, sizeof c->tenant, "%s", r->tenant);
    adm_limits_t l = {0};
    if (r->max_inflight_opt_case) { l.has_max_inflight = true; l.max_inflight = r->max_inflight; }
    if (r->max_queued_opt_case) { l.has_max_queued = true; l.max_queued = r->max_queued; }
    if (r->weight_opt_case) { l.has_weight = true; l.weight = r->weight; }
    if (!pool_has_model(c->g->rt->pool, c->model)) { /* a typo would otherwise make a new pool */
      admin_fail(c, GT_RPC_NOT_FOUND, "unknown model: no engine serves it");
      return;
    }
    rc = adm_limits_set(adm, c->model, c->tenant, &l, set_done, c, &err);
  } else {
    const Gantry__V1__ListQueuesRequest *r = (const void *)gt_rpc_call_request(c->call);
    rc = adm_queues_list(adm, r->model, queues_reply, c, &err);
  }
  if (rc) admin_fail(c, gt_rpc_code_from_err(rc), err.msg);
}

static void admin_loop(void *a, void *b, intptr_t x) {
  rgf_t *g = a;
  gt_rpc_call_t *call = b;
  (void)x;
  post_ran(g);
  if (refused_stopping(g, call)) return;
  actx_t *c = calloc(1, sizeof *c);
  if (!c) {
    refuse_oom(g, call);
    return;
  }
  c->g = g;
  c->call = call;
  c->next = g->admin;
  if (g->admin) g->admin->prev = c;
  g->admin = c;
  atomic_fetch_add(&g->admin_calls, 1);
  auth_check(g->rt->auth, md_key(call), AUTH_FOR_ADMIN, admin_auth, c);
}

static void on_admin(void *user, gt_rpc_call_t *call) {
  rgf_t *g = user;
  int rc = front_post(g, admin_loop, call, 0);
  if (rc) refuse(g, call, rc);
}

rgf_t *rgf_start(router_t *rt, gt_err_t *err) {
  rgf_t *g = calloc(1, sizeof *g);
  if (!g) {
    gt_err_set(err, GT_ENOMEM, "grpc: out of memory");
    return NULL;
  }
  g->rt = rt;
  pthread_mutex_init(&g->mu, NULL);
  /* the same request size cap as the HTTP front (--max-body-bytes), and the same time to send
   * a request (--http-timeout-s) */
  gt_rpc_server_opts_t so = {.max_message_bytes = (int)rt->cfg.max_body_bytes,
                             .recv_timeout_ms = rt->cfg.http_timeout_s * 1000};
  if (gt_rpc_server_create(&so, &g->srv, err)) {
    pthread_mutex_destroy(&g->mu);
    free(g);
    return NULL;
  }
  gt_rpc_method_t ms[] = {
      {M_GENERATE, GT_RPC_SERVER_STREAMING, &gantry__v1__router_generate_request__descriptor, on_generate, on_gen_cancel,
       gt_delta_merge, g},
      {M_MODELS, GT_RPC_UNARY, &gantry__v1__list_models_request__descriptor, on_models, NULL, NULL, g},
      {M_EMBED, GT_RPC_UNARY, &gantry__v1__router_embed_request__descriptor, on_embed, on_gen_cancel, NULL, g},
      {M_GETLIM, GT_RPC_UNARY, &gantry__v1__get_limits_request__descriptor, on_admin, NULL, NULL, g},
      {M_SETLIM, GT_RPC_UNARY, &gantry__v1__set_limits_request__descriptor, on_admin, NULL, NULL, g},
      {M_QUEUES, GT_RPC_UNARY, &gantry__v1__list_queues_request__descriptor, on_admin, NULL, NULL, g},
  };
  for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++)
    if (gt_rpc_server_add_method(g->srv, &ms[i], err)) goto fail;
  if (gt_rpc_server_start(g->srv, rt->cfg.grpc_addr, &rt->grpc_port, err)) goto fail;
  return g;
fail:
  gt_rpc_server_destroy(g->srv);
  pthread_mutex_destroy(&g->mu);
  free(g);
  return NULL;
}

size_t rgf_unsent_bytes(rgf_t *g) { return g && g->srv ? gt_rpc_server_unsent_bytes(g->srv) : 0; }

int rgf_pending_posts(rgf_t *g) {
  pthread_mutex_lock(&g->mu);
  int n = g->posts;
  pthread_mutex_unlock(&g->mu);
  return n;
}

int rgf_refused_cancels(rgf_t *g) { return atomic_load(&g->refused_cancels); }

int rgf_admin_calls(rgf_t *g) { return atomic_load(&g->admin_calls); }

/* Called on the loop thread at shutdown. The server's shutdown waits for every call to be
 * finished, and calls are finished on this thread: so cancel our requests and finish their
 * calls first, then shut down with no grace. Hand-offs the cq thread posted before are run
 * first, while g lives (a new call among them is refused: left unfinished it would hold the
 * shutdown forever); from then on the cq thread posts nothing and refuses new calls itself.
 * Admin calls still waiting on Redis (which may never answer) are answered too; their contexts
 * stay until their callback comes or rgf_free. */
void rgf_stop(rgf_t *g) {
  if (!g) return;
  pthread_mutex_lock(&g->mu);
  g->stopping = true;
  pthread_mutex_unlock(&g->mu);
  mbox_drain(g->rt->mb); /* every post made before `stopping` is queued there */
  const int pending = rgf_pending_posts(g);
  if (pending) GT_LOG_ERROR("grpc front: %d hand-off(s) still pending at stop", pending);
  while (g->live) {
    gctx_t *c = g->live;
    if (c->rq) {
      rq_t *q = c->rq;
      c->rq = NULL;
      rq_cancel(q);
    }
    /* a client that left (its cancel came too late to be posted, or not yet) counts 499 */
    gctx_done(c, gt_rpc_call_is_cancelled(c->call) ? 499 : 503, GT_RPC_UNAVAILABLE, "router shutting down");
  }
  for (actx_t *c = g->admin; c; c = c->next)
    if (c->call) admin_answer(c, GT_RPC_UNAVAILABLE, "router shutting down", NULL);
  gt_rpc_server_destroy(g->srv);
  g->srv = NULL;
  pthread_mutex_lock(&g->mu); /* the cq thread is gone: count what it refused last */
  count_refused(g);
  pthread_mutex_unlock(&g->mu);
}

void rgf_free(rgf_t *g) {
  if (!g) return;
  while (g->admin) admin_free(g->admin);
  pthread_mutex_destroy(&g->mu);
  free(g);
}
