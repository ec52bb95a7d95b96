/* router/rq.c — one generation request on the loop thread: admission (Redis) -> engine choice ->
 * engine stream -> deltas to the sink. The lease is released on every exit path (final, error,
 * client gone, engine failure, deadline); a failure before the first token is retried once on
 * another engine. Engine stream callbacks run on the engine client's thread and are handed to
 * the loop through the mailbox; the rq is freed only after its stream's on_done reached the loop,
 * so mailbox items never point at freed memory. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/engine_rpc.h"
#include "common/log.h"
#include "router/rq.h"
#include "router/router.h"

struct rq {
  router_t *rt;
  char model[ADM_NAME_MAX + 1], tenant[ADM_NAME_MAX + 1], id[64];
  Gantry__V1__GenerateRequest *gen;
  Gantry__V1__EmbedRequest *emb; /* instead of gen: an embedding request (rq_start_embed) */
  rq_cb cb;
  void *sink;
  uint64_t ticket;
  char lease[160];
  bool have_lease, waiting, cancelled, terminal, started, retried;
  bool paused;             /* the sink is full: the next engine read waits for rq_resume */
  pool_engine_t *engine;   /* engine of the open stream */
  ec_stream_t *stream;     /* open stream (NULL when none) */
  int attempt;
  double deadline_ms;      /* gt_now_ms() deadline of the engine stream (first attempt + timeout) */
  double t_arrival_ms;     /* rq_start (router-side TTFT and end-to-end latency) */
  uint32_t n_choices, n_finals; /* GenerateRequest.n (at least 1); Finals seen */
  rq_t *prev, *next;       /* router's list of live requests */
};

static void release_lease(rq_t *q) {
  if (q->have_lease) {
    adm_release(q->rt->adm, q->lease);
    q->have_lease = false;
  }
}

static void maybe_free(rq_t *q) {
  if ((q->terminal || q->cancelled) && !q->stream && !q->waiting) {
    release_lease(q);
    if (q->gen) protobuf_c_message_free_unpacked(&q->gen->base, NULL);
    if (q->emb) protobuf_c_message_free_unpacked(&q->emb->base, NULL);
    if (q->prev) q->prev->next = q->next;
    else q->rt->rqs = q->next;
    if (q->next) q->next->prev = q->prev;
    q->rt->n_rqs--;
    free(q);
  }
}

/* Ends q with an error event; param: the OpenAI parameter at fault, or NULL. */
static void fail_param(rq_t *q, const char *param, int status, const char *type, const char *code, int retry_after,
                       const char *fmt, const char *detail) {
  release_lease(q);
  if (q->terminal || q->cancelled) return;
  q->terminal = true;
  rq_event_t ev = {.kind = RQ_EV_ERROR, .retry_after_s = retry_after, .started = q->started};
  oa_err(&ev.err, status, type, param, code, fmt, detail ? detail : "");
  q->cb(q->sink, &ev);
}

static void fail(rq_t *q, int status, const char *type, const char *code, int retry_after, const char *fmt,
                 const char *detail) {
  fail_param(q, NULL, status, type, code, retry_after, fmt, detail);
}

static void on_resp(void *user, ec_stream_t *s, Gantry__V1__GenerateResponse *r);
static void on_done(void *user, ec_stream_t *s, const gt_rpc_status_t *st);

static void on_emb_msg(void *user, gt_rpc_stream_t *s, ProtobufCMessage *m);
static int start_stream(rq_t *q, const pool_engine_t *avoid) {
  pool_engine_t *e = pool_pick(q->rt->pool, q->model, avoid, q->gen ? pool_affinity(q->gen) : 0);
  if (!e) return -1;
  /* a retry runs against what is left of the first attempt's deadline, not a fresh one */
  const double now = gt_now_ms();
  const int64_t total = q->rt->cfg.request_timeout_ms; /* <= 0: no deadline */
  if (q->deadline_ms == 0) q->deadline_ms = now + (double)total;
  const double left = q->deadline_ms - now;
  /* manual reads: one response at a time, the next only when the sink has room (flow control
   * holds the engine back while a client does not read) */
  ec_call_opts_t o = {.timeout_ms = total <= 0 ? 0 : left < 1 ? 1 : (int64_t)left, .request_id = q->id,
                      .manual_read = true};
  gt_err_t err;
  q->attempt++;
  const gt_rpc_md_t md = {.key = "x-request-id", .value = q->id};
  const gt_rpc_stream_args_t ea = {.method = EC_METHOD_EMBED, .request = q->emb ? &q->emb->base : NULL,
                                   .response = &gantry__v1__embed_response__descriptor, .timeout_ms = o.timeout_ms,
                                   .md = &md, .n_md = 1, .on_msg = on_emb_msg, .on_done = on_done, .user = q,
                                   .manual_read = 1};
  if (q->emb ? gt_rpc_client_stream(ec_rpc(e->ec), &ea, &q->stream, &err)
             : ec_generate(e->ec, q->gen, &o, on_resp, on_done, q, &q->stream, &err)) {
    GT_LOG_WARN("rid=%s generate start failed target=%s: %s", q->id, e->target, err.msg);
    q->stream = NULL;
    return -1;
  }
  q->engine = e;
  e->inflight++;
  GT_LOG_DEBUG("rid=%s engine=%s attempt=%d", q->id, e->target, q->attempt);
  return 0;
}

/* ---- engine callbacks -> loop ---- */
/* b: a GenerateResponse, or with c = 1 an EmbedResponse (the one, final, message) */
static void resp_loop(void *a, void *b, intptr_t c) {
  rq_t *q = a;
  Gantry__V1__GenerateResponse *r = c ? NULL : b;
  Gantry__V1__EmbedResponse *em = c ? b : NULL;
  ProtobufCMessage *base = b;
  if (q->cancelled || q->terminal) {
    protobuf_c_message_free_unpacked(base, NULL);
    if (q->stream) ec_stream_read_next(q->stream); /* read on to the end so on_done comes */
    return;
  }
  /* n > 1: one Final per choice; the last one ends the request */
  bool final = em || (r->kind_case == GANTRY__V1__GENERATE_RESPONSE__KIND_FINAL && ++q->n_finals >= q->n_choices);
  const double age_s = (gt_now_ms() - q->t_arrival_ms) / 1000;
  if (!final) {
    if (!q->started) metrics_observe(q->rt->metrics, METRICS_TTFT, q->model, age_s);
    q->started = true;
    if (q->have_lease) adm_touch(q->rt->adm, q->lease);
  } else {
    metrics_observe(q->rt->metrics, METRICS_E2E, q->model, age_s);
    q->terminal = true;
    release_lease(q); /* the slot frees as soon as the answer is complete */
  }
  bool taken = false, pause = false;
  rq_event_t ev = {.kind = RQ_EV_MSG, .msg = r, .emb = em, .taken = &taken, .final = final, .started = q->started,
                   .pause = &pause};
  ec_stream_t *s = q->stream; /* the callback may cancel q (then q->stream is cancelled, not freed) */
  q->cb(q->sink, &ev);
  if (!taken) protobuf_c_message_free_unpacked(base, NULL);
  if (q->cancelled || !s) return;
  if (pause) q->paused = true;
  else ec_stream_read_next(s);
}

void rq_resume(rq_t *q) {
  if (!q || !q->paused) return;
  q->paused = false;
  if (q->stream && !q->cancelled) ec_stream_read_next(q->stream);
}

static void done_loop(void *a, void *b, intptr_t c) {
  rq_t *q = a;
  gt_rpc_status_t *st = b;
  (void)c;
  pool_engine_t *e = q->engine;
  if (e) e->inflight--;
  if (q->stream) ec_stream_release(q->stream);
  q->stream = NULL;
  q->engine = NULL;
  if (!q->terminal && !q->cancelled) {
    if (st->code == GT_RPC_OK) {
      fail(q, 502, "server_error", "engine_error", 0, "engine stream ended without a final message%s", "");
    } else if (st->code == GT_RPC_INVALID_ARGUMENT || st->code == GT_RPC_OUT_OF_RANGE) {
      /* the engine names the field at fault in trailing metadata (never guessed from the text) */
      char param[64];
      const char *pp = oa_param_of_field(st->param, param, sizeof param);
      /* a constraint error names the request's own form of it (response_format, guided_json, ...) */
      const Gantry__V1__Constraint *k = q->gen ? q->gen->constraint : NULL;
      if (pp && !strcmp(pp, "constraint") && k && k->param[0]) pp = k->param;
      fail_param(q, pp, 400, "invalid_request_error",
                 st->code == GT_RPC_OUT_OF_RANGE ? "context_length_exceeded" : "invalid_request", 0, "%s", st->message);
    } else if (st->code == GT_RPC_FAILED_PRECONDITION) {
      /* the engine serves another task (an embedding model asked to generate, or the reverse):
       * its message names the model */
      char why[700];
      snprintf(why, sizeof why, "model '%.128s': %.500s", q->model, st->message);
      fail_param(q, "model", 400, "invalid_request_error", "model_not_supported", 0, "%s", why);
    } else if (st->code == GT_RPC_DEADLINE_EXCEEDED) {
      fail(q, 504, "server_error", "timeout", 0, "request timed out: %s", st->message);
    } else if (!q->started && !q->retried) {
      q->retried = true;
      GT_LOG_WARN("rid=%s engine failed before first token target=%s code=%s: %s; retrying", q->id,
                  e ? e->target : "?", gt_rpc_code_name(st->code), st->message);
      /* the client gets the gRPC code only: the transport's message names the engine's address
       * ("ipv4:10.0.0.5:50051: Connection refused"); the log above keeps it */
      if (start_stream(q, e) != 0)
        fail(q, 503, "server_error", "engine_unavailable", 0, "engine failed and no other engine is ready (%s)",
             gt_rpc_code_name(st->code));
    } else {
      GT_LOG_WARN("rid=%s engine failed target=%s code=%s started=%d: %s", q->id, e ? e->target : "?",
                  gt_rpc_code_name(st->code), q->started, st->message);
      /* the engine's own errors (RESOURCE_EXHAUSTED: out of KV blocks, ...) keep their message */
      const bool transport = st->code == GT_RPC_UNAVAILABLE || st->code == GT_RPC_UNKNOWN ||
                             st->code == GT_RPC_UNAUTHENTICATED || st->code == GT_RPC_CANCELLED;
      fail(q, 503, "server_error", "engine_failure", 0, transport ? "engine failed (%s)" : "engine failed: %s",
           transport ? gt_rpc_code_name(st->code) : st->message);
    }
  }
  free(st);
  maybe_free(q);
}

static void on_resp(void *user, ec_stream_t *s, Gantry__V1__GenerateResponse *r) {
  (void)s;
  rq_t *q = user;
  if (mbox_post(q->rt->mb, resp_loop, q, r, 0)) protobuf_c_message_free_unpacked(&r->base, NULL);
}

static void on_emb_msg(void *user, gt_rpc_stream_t *s, ProtobufCMessage *m) {
  (void)s;
  rq_t *q = user;
  if (mbox_post(q->rt->mb, resp_loop, q, m, 1)) protobuf_c_message_free_unpacked(m, NULL);
}
static void on_done(void *user, ec_stream_t *s, const gt_rpc_status_t *st) {
  (void)s;
  rq_t *q = user;
  gt_rpc_status_t *c = malloc(sizeof *c);
  if (!c) return; /* out of memory: the request leaks rather than crashes */
  *c = *st;
  if (mbox_post(q->rt->mb, done_loop, q, c, 0)) free(c);
}

/* ---- admission ---- */
static void on_admit(void *arg, const adm_result_t *res) {
  rq_t *q = arg;
  q->waiting = false;
  if (q->cancelled) { /* cancel raced the admission: give the slot back */
    if (res->status == ADM_ADMITTED) adm_release(q->rt->adm, res->lease_id);
    maybe_free(q);
    return;
  }
  switch (res->status) {
    case ADM_ADMITTED:
      snprintf(q->lease, sizeof q->lease, "%s", res->lease_id);
      q->have_lease = true;
      if (start_stream(q, NULL) != 0) {
        metrics_reject(q->rt->metrics, "no_engine");
        fail(q, 503, "server_error", "engine_unavailable", 0, "no ready engine for model %s", q->model);
      }
      break;
    case ADM_REJECTED_FULL:
      metrics_reject(q->rt->metrics, "queue_full");
      fail(q, 429, "rate_limit_error", "queue_full", res->retry_after_s > 0 ? res->retry_after_s : 1,
           "the queue for this model is full (%s); retry later", res->msg ? res->msg : "");
      break;
    case ADM_TIMEOUT:
      metrics_reject(q->rt->metrics, "queue_timeout");
      fail(q, 503, "server_error", "queue_timeout", 0, "timed out waiting for a slot (%s)", res->msg ? res->msg : "");
      break;
    default:
      metrics_reject(q->rt->metrics, "admission_error");
      fail(q, 503, "server_error", "admission_unavailable", 0, "admission failed: %s", res->msg ? res->msg : "");
      break;
  }
  maybe_free(q);
}

/* The checks every request passes first (draining, known model); on failure frees msg. */
static int pre_check(router_t *rt, const char *model, ProtobufCMessage *msg, oa_error_t *e) {
  if (rt->draining) {
    protobuf_c_message_free_unpacked(msg, NULL);
    metrics_reject(rt->metrics, "draining");
    oa_err(e, 503, "server_error", NULL, "router_draining", "the router is shutting down; retry on another router");
    return -1;
  }
  if (!pool_has_model(rt->pool, model)) {
    protobuf_c_message_free_unpacked(msg, NULL);
    metrics_reject(rt->metrics, "unknown_model");
    oa_err(e, 404, "invalid_request_error", "model", "model_not_found", "The model '%s' does not exist", model);
    return -1;
  }
  return 0;
}

/* A new live request of rt (in its list); NULL when out of memory (*e set). */
static rq_t *rq_new(router_t *rt, const char *model, const char *tenant, const char *request_id, rq_cb cb, void *sink,
                    oa_error_t *e) {
  rq_t *q = calloc(1, sizeof *q);
  if (!q) {
    oa_err(e, 500, "server_error", NULL, NULL, "out of memory");
    return NULL;
  }
  q->rt = rt;
  q->t_arrival_ms = gt_now_ms();
  snprintf(q->model, sizeof q->model, "%s", model);
  snprintf(q->tenant, sizeof q->tenant, "%s", tenant);
  snprintf(q->id, sizeof q->id, "%s", request_id);
  q->next = rt->rqs;
  if (rt->rqs) rt->rqs->prev = q;
  rt->rqs = q;
  rt->n_rqs++;
  q->cb = cb;
  q->sink = sink;
  return q;
}

/* Queues q for admission (priority < 0: batch); NULL (q freed, *e set) when refused at once. */
static rq_t *rq_admit(rq_t *q, int priority, oa_error_t *e) {
  gt_err_t err;
  q->waiting = true;
  q->ticket = adm_request(q->rt->adm, q->model, q->tenant, priority < 0 ? ADM_PRIO_BATCH : ADM_PRIO_INTERACTIVE, q->id,
                          on_admit, q, &err);
  if (!q->ticket) {
    q->waiting = false;
    q->cancelled = true;
    maybe_free(q);
    oa_err(e, 400, "invalid_request_error", "model", "invalid_name", "%s", err.msg);
    return NULL;
  }
  return q;
}

rq_t *rq_start_embed(router_t *rt, const char *model, const char *tenant, const char *request_id,
                     Gantry__V1__EmbedRequest *emb, rq_cb cb, void *sink, oa_error_t *e) {
  if (pre_check(rt, model, &emb->base, e)) return NULL;
  rq_t *q = rq_new(rt, model, tenant, request_id, cb, sink, e);
  if (!q) {
    protobuf_c_message_free_unpacked(&emb->base, NULL);
    return NULL;
  }
  q->emb = emb;
  q->n_choices = 1;
  char *t = strdup(tenant), *rid = strdup(request_id);
  if (emb->tenant != protobuf_c_empty_string) free(emb->tenant);
  if (emb->request_id != protobuf_c_empty_string) free(emb->request_id);
  emb->tenant = t ? t : (char *)protobuf_c_empty_string;
  emb->request_id = rid ? rid : (char *)protobuf_c_empty_string;
  return rq_admit(q, emb->priority, e);
}

rq_t *rq_start(router_t *rt, const char *model, const char *tenant, const char *request_id,
               Gantry__V1__GenerateRequest *gen, rq_cb cb, void *sink, oa_error_t *e) {
  if (pre_check(rt, model, &gen->base, e)) return NULL;
  const uint32_t ctx = pool_context(rt->pool, model);
  if (ctx && gen->max_tokens_opt_case == GANTRY__V1__GENERATE_REQUEST__MAX_TOKENS_OPT_MAX_TOKENS &&
      gen->max_tokens > ctx) {
    const uint32_t mt = gen->max_tokens;
    protobuf_c_message_free_unpacked(&gen->base, NULL);
    metrics_reject(rt->metrics, "bad_request");
    oa_err(e, 400, "invalid_request_error", "max_tokens", "context_length_exceeded",
           "max_tokens is %u, but this model's maximum context length is %u tokens", mt, ctx);
    return NULL;
  }
  rq_t *q = rq_new(rt, model, tenant, request_id, cb, sink, e);
  if (!q) {
    protobuf_c_message_free_unpacked(&gen->base, NULL);
    return NULL;
  }
  q->gen = gen;
  /* one Final per choice: n per prompt, for each prompt of a list */
  q->n_choices = (gen->n > 1 ? gen->n : 1) * (uint32_t)(1 + gen->n_more_prompts + gen->n_more_tokens);
  /* the engine sees the tenant and request id (logs, metrics) */
  free(gen->tenant == protobuf_c_empty_string ? NULL : gen->tenant);
  gen->tenant = strdup(tenant);
  if (gen->request_id != protobuf_c_empty_string) free(gen->request_id);
  gen->request_id = strdup(request_id);
  /* prefix caches are kept apart per tenant (and, within a tenant, per cache_salt): a tenant
   * cannot time another's cached prefixes (README: cache_salt) */
  const char *salt = gen->cache_salt ? gen->cache_salt : "";
  const size_t sl = strlen(tenant) + strlen(salt) + 24;
  char *tsalt = malloc(sl);
  if (tsalt) {
    snprintf(tsalt, sl, "%zu:%s|%s", strlen(tenant), tenant, salt);
    if (gen->cache_salt != protobuf_c_empty_string) free(gen->cache_salt);
    gen->cache_salt = tsalt;
  }
  if (!gen->tenant || !gen->request_id) {
    if (!gen->tenant) gen->tenant = (char *)protobuf_c_empty_string;
    if (!gen->request_id) gen->request_id = (char *)protobuf_c_empty_string;
  }
  return rq_admit(q, gen->priority, e);
}

void rq_cancel(rq_t *q) {
  if (!q || q->cancelled) return;
  q->cancelled = true;
  if (q->waiting) {
    if (adm_cancel(q->rt->adm, q->ticket) == GT_OK) q->waiting = false;
  }
  release_lease(q);
  if (q->stream) ec_stream_cancel(q->stream); /* engine frees the sequence; done_loop frees q */
  maybe_free(q);
}

void rq_abort_all(router_t *rt, const char *why) {
  rq_t *q = rt->rqs;
  while (q) {
    rq_t *next = q->next;
    if (!q->terminal && !q->cancelled) {
      fail(q, 503, "server_error", "router_shutdown", 0, "%s", why);
      rq_cancel(q); /* the sink is done with q: engine stream, queue entry, lease */
    }
    q = next;
  }
}

void rq_cancel_all(router_t *rt) {
  rq_t *q = rt->rqs;
  while (q) {
    rq_t *next = q->next; /* q may be freed by rq_cancel */
    rq_cancel(q);
    q = next;
  }
}
