/* router/http.c — the HTTP front (libevent evhttp on the router's loop): OpenAI routes, health,
 * metrics and the admin API. Every error is an OpenAI-style JSON body with the right status. */
#include <errno.h>
#include <stdatomic.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <event2/listener.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include "common/clock.h"
#include "common/log.h"
#include "router/http.h"
#include "router/http_errpage.h"
#include "router/responses_store.h"
#include "router/http_guard.h"
#include "router/openai_embed.h"
#include "router/req_limits.h"
#include "router/router.h"

struct hreq;
struct tok_op;

struct http_front {
  router_t *rt;
  struct evhttp *http;     /* NULL once http_front_stop closed every connection */
  http_guard_t *guard;     /* deadlines, header limits, connection caps (below evhttp) */
  struct hreq *adm_wait;   /* requests waiting on an admission (Redis) callback or an engine's
                              (De)Tokenize answer (loop thread) */
  atomic_int n_adm_wait;   /* of them, not yet ended by http_front_stop (any thread reads) */
};

#ifndef GANTRY_VERSION
#define GANTRY_VERSION "unknown"
#endif

/* R_MODEL is /v1/models/{id} and R_RESPONSE /v1/responses/{id} (prefix matches); the others
 * are exact paths. */
enum { R_CHAT, R_COMPL, R_MODELS, R_MODEL, R_TOKENIZE, R_DETOKENIZE, R_HEALTH, R_READY, R_VERSION, R_METRICS,
       R_LIMITS, R_QUEUES, R_RESPONSES, R_RESPONSE, R_EMBED, R_OTHER };
static const char *route_names[] = {"/v1/chat/completions", "/v1/completions", "/v1/models", "/v1/models/{id}",
                                    "/tokenize", "/detokenize", "/health", "/ready", "/version", "/metrics",
                                    "/admin/limits", "/admin/queues", "/v1/responses", "/v1/responses/{id}",
                                    "/v1/embeddings", "other"};

typedef struct hreq {
  router_t *rt;
  struct evhttp_request *req;
  struct evhttp_connection *conn;
  int route;
  bool gone;        /* the client connection closed */
  bool streaming;   /* reply_start was sent */
  bool done;        /* the reply is complete */
  char id[40];
  char tenant[ADM_NAME_MAX + 1];
  char *body;
  size_t body_len;
  oa_req_t oa;
  oa_resp_t *resp;
  rq_t *rq;
  double t0;
  /* admin */
  char model[ADM_NAME_MAX + 1], atenant[ADM_NAME_MAX + 1];
  adm_limits_t lim;
  struct event *watch; /* EOF on the client socket while we owe it an answer */
  /* flow control of a stream whose client reads slower than the engine writes */
  struct evbuffer *out;               /* the connection's output buffer while paused */
  struct evbuffer_cb_entry *drain_cb; /* set while paused */
  struct event *wtimer;               /* write timeout while paused */
  struct tok_op *tok; /* a (De)Tokenize call in flight for h (then h is in adm_wait too) */
  bool emb_b64;       /* /v1/embeddings: encoding_format base64 (the model name is in model) */
  /* set while an admission callback or a tokenize answer is due (in the front's adm_wait list) */
  bool adm_waiting;
  bool orphan; /* http_front_stop freed its connection: the callback only frees h */
  struct hreq *aprev, *anext;
} hreq_t;

static void stop_watch(hreq_t *h) {
  if (h->watch) event_free(h->watch);
  h->watch = NULL;
}

static void unpause(hreq_t *h) {
  if (h->drain_cb) evbuffer_remove_cb_entry(h->out, h->drain_cb);
  h->drain_cb = NULL;
  h->out = NULL;
  if (h->wtimer) event_free(h->wtimer);
  h->wtimer = NULL;
}

static void hreq_free(hreq_t *h) {
  stop_watch(h);
  unpause(h);
  oa_req_free(&h->oa);
  oa_resp_free(h->resp);
  free(h->body);
  free(h);
}

/* The client left during generation: cancels h's request (lease, queue entry, engine stream),
 * ends the reply (499, or the end of an SSE stream) and frees h. */
static void abandon(hreq_t *h) {
  rq_t *q = h->rq;
  h->rq = NULL;
  rq_cancel(q);
  /* the request object is no longer tied to the connection; finishing it frees it */
  if (h->streaming) evhttp_send_reply_end(h->req);
  else evhttp_send_reply(h->req, 499, "Client Closed Request", NULL);
  metrics_request(h->rt->metrics, route_names[h->route], 499);
  hreq_free(h);
}

static void on_conn_close(struct evhttp_connection *c, void *arg) {
  hreq_t *h = arg;
  (void)c;
  stop_watch(h); /* the socket is about to be closed */
  h->gone = true;
  h->conn = NULL;
  GT_LOG_INFO("rid=%s client disconnected route=%s", h->id, route_names[h->route]);
  if (h->rq) abandon(h);
}

/* libevent does not read from a connection while its request is being answered, so it would
 * notice a client that left only at the next write (for a queued request: after admission).
 * This watcher peeks at the socket: EOF or an error means the client is gone -> cancel now
 * (admission wait or engine stream) and answer, which lets libevent close the connection. */
static void on_client_readable(evutil_socket_t fd, short what, void *arg) {
  hreq_t *h = arg;
  (void)what;
  char c;
  ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n > 0) { /* a pipelined request: cannot watch further without consuming it */
    stop_watch(h);
    return;
  }
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
  stop_watch(h);
  h->gone = true;
  GT_LOG_INFO("rid=%s client disconnected route=%s", h->id, route_names[h->route]);
  if (!h->rq) return; /* auth / admin / metrics / tokenize in progress: their callback drops it (499) */
  if (h->conn) evhttp_connection_set_closecb(h->conn, NULL, NULL);
  abandon(h);
}

static void start_watch(hreq_t *h) {
  struct bufferevent *bev = h->conn ? evhttp_connection_get_bufferevent(h->conn) : NULL;
  evutil_socket_t fd = bev ? bufferevent_getfd(bev) : -1;
  if (fd < 0) return;
  h->watch = event_new(h->rt->base, fd, EV_READ | EV_PERSIST, on_client_readable, h);
  if (h->watch && event_add(h->watch, NULL)) stop_watch(h);
}

/* Detaches from the connection and frees h (the reply has been handed to libevent). */
static void finish(hreq_t *h, int status) {
  if (h->conn) evhttp_connection_set_closecb(h->conn, NULL, NULL);
  metrics_request(h->rt->metrics, route_names[h->route], status);
  GT_LOG_DEBUG("rid=%s route=%s status=%d ms=%.1f", h->id, route_names[h->route], status, gt_now_ms() - h->t0);
  hreq_free(h);
}

/* Sends b (freed here) as a JSON reply and finishes h. */
static void send_json(hreq_t *h, int status, struct evbuffer *b) {
  struct evkeyvalq *hd = evhttp_request_get_output_headers(h->req);
  evhttp_add_header(hd, "Content-Type", "application/json");
  evhttp_add_header(hd, "X-Request-Id", h->id);
  evhttp_send_reply(h->req, status, NULL, b);
  evbuffer_free(b);
  finish(h, status);
}

static void reply_json(hreq_t *h, int status, const char *json) {
  struct evbuffer *b = evbuffer_new();
  evbuffer_add(b, json, strlen(json));
  send_json(h, status, b);
}

static void free_body(const void *data, size_t len, void *arg) {
  (void)len;
  (void)arg;
  free((void *)data);
}

/* reply_json of a body the reply takes over (freed once sent): no second copy of a large body. */
static void reply_json_take(hreq_t *h, int status, char *json) {
  struct evbuffer *b = evbuffer_new();
  if (!b || evbuffer_add_reference(b, json, strlen(json), free_body, NULL)) {
    free(json);
    if (b) evbuffer_free(b);
    reply_json(h, 500, "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\",\"param\":null,\"code\":null}}");
    return;
  }
  send_json(h, status, b);
}

static void reply_text(hreq_t *h, int status, const char *ctype, const char *text) {
  struct evbuffer *b = evbuffer_new();
  evbuffer_add(b, text, strlen(text));
  evhttp_add_header(evhttp_request_get_output_headers(h->req), "Content-Type", ctype);
  evhttp_send_reply(h->req, status, NULL, b);
  evbuffer_free(b);
  finish(h, status);
}

static void reply_error(hreq_t *h, const oa_error_t *e, int retry_after) {
  char *s = oa_error_json(e);
  if (retry_after > 0) {
    char ra[16];
    snprintf(ra, sizeof ra, "%d", retry_after);
    evhttp_add_header(evhttp_request_get_output_headers(h->req), "Retry-After", ra);
  }
  if (e->status >= 500) GT_LOG_WARN("rid=%s status=%d %s", h->id, e->status, e->message);
  else GT_LOG_INFO("rid=%s status=%d %s", h->id, e->status, e->message);
  reply_json(h, e->status, s ? s : "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\",\"param\":null,\"code\":null}}");
  free(s);
}

static void reply_errf(hreq_t *h, int status, const char *type, const char *code, const char *msg) {
  oa_error_t e;
  oa_err(&e, status, type, NULL, code, "%s", msg);
  reply_error(h, &e, 0);
}

static void reply_jobj(hreq_t *h, int status, json_t *o) {
  char *s = json_dumps(o, JSON_COMPACT);
  json_decref(o);
  reply_json(h, status, s ? s : "{}");
  free(s);
}

/* ---- generation ---- */
/* Sends sb's events; the reply takes its buffer over (sb is left empty): a /v1/responses end
 * carrying the whole output four times is not copied again. */
static void send_sse(hreq_t *h, oa_sb_t *sb) {
  if (!sb->len) return;
  struct evbuffer *b = evbuffer_new();
  if (b && !evbuffer_add_reference(b, sb->p, sb->len, free_body, NULL)) *sb = (oa_sb_t){0};
  else if (b) evbuffer_add(b, sb->p, sb->len);
  if (!b) return; /* out of memory: the chunk is lost, as a write that failed */
  evhttp_send_reply_chunk(h->req, b);
  evbuffer_free(b);
}

static void start_stream_reply(hreq_t *h) {
  struct evkeyvalq *hd = evhttp_request_get_output_headers(h->req);
  evhttp_add_header(hd, "Content-Type", "text/event-stream");
  evhttp_add_header(hd, "Cache-Control", "no-cache");
  evhttp_add_header(hd, "X-Request-Id", h->id);
  evhttp_send_reply_start(h->req, 200, "OK");
  h->streaming = true;
}

/* The client read part of a paused stream: below half the bound, read from the engine again. */
static void on_out_drained(struct evbuffer *b, const struct evbuffer_cb_info *info, void *arg) {
  hreq_t *h = arg;
  if (!info->n_deleted || evbuffer_get_length(b) > (size_t)h->rt->cfg.stream_buffer_bytes / 2) return;
  unpause(h);
  rq_resume(h->rq);
}

/* Ends h's request (h->rq NULL) without a reply: drops its connection with everything buffered
 * for it (a stream), counted with status; frees h and the request. */
static void drop_conn(hreq_t *h, int status) {
  metrics_request(h->rt->metrics, route_names[h->route], status);
  struct evhttp_connection *conn = h->conn;
  struct evhttp_request *req = h->req;
  if (conn) evhttp_connection_set_closecb(conn, NULL, NULL);
  hreq_free(h);
  if (conn) evhttp_connection_free(conn); /* frees the request and its output */
  else evhttp_request_free(req);          /* on_conn_close: libevent detached it from its connection */
}

/* First thing in a callback that answers h (key check, Redis, an engine's (De)Tokenize): when
 * the client left meanwhile, counts 499, drops the connection without writing to it, frees h and
 * returns true. */
static bool drop_if_gone(hreq_t *h) {
  if (!h->gone) return false;
  GT_LOG_DEBUG("rid=%s route=%s status=499 (client gone, nothing sent)", h->id, route_names[h->route]);
  drop_conn(h, 499);
  return true;
}

/* A paused stream did not drain for --stream-write-timeout-s: the client does not read. Cancel
 * the request (engine stream, lease) and drop the connection with everything buffered for it. */
static void on_write_timeout(evutil_socket_t fd, short what, void *arg) {
  hreq_t *h = arg;
  (void)fd;
  (void)what;
  size_t unsent = h->out ? evbuffer_get_length(h->out) : 0;
  GT_LOG_WARN("rid=%s client does not read: stream cancelled after %d s with %zu bytes unsent", h->id,
              h->rt->cfg.stream_write_timeout_s, unsent);
  metrics_reject(h->rt->metrics, "client_write_timeout");
  rq_t *q = h->rq;
  h->rq = NULL;
  rq_cancel(q);
  drop_conn(h, 499);
}

/* After a chunk went out: a stream whose unsent output reached the bound pauses the engine. */
static void maybe_pause(hreq_t *h, const rq_event_t *ev) {
  struct bufferevent *bev = h->conn ? evhttp_connection_get_bufferevent(h->conn) : NULL;
  struct evbuffer *out = bev ? bufferevent_get_output(bev) : NULL;
  if (!out || h->drain_cb || evbuffer_get_length(out) < (size_t)h->rt->cfg.stream_buffer_bytes) return;
  h->out = out;
  h->drain_cb = evbuffer_add_cb(out, on_out_drained, h);
  h->wtimer = evtimer_new(h->rt->base, on_write_timeout, h);
  struct timeval tv = {h->rt->cfg.stream_write_timeout_s, 0};
  if (!h->drain_cb || !h->wtimer || evtimer_add(h->wtimer, &tv)) {
    unpause(h); /* out of memory: keep reading rather than stall forever */
    return;
  }
  *ev->pause = true;
}

/* /v1/responses with store: the finished response's record goes to Redis (under its TTL). */
static void store_response(hreq_t *h) {
  char *rec = h->route == R_RESPONSES ? oa_resp_record(h->resp, h->tenant) : NULL;
  if (rec) rstore_put(h->rt->rc, h->rt->cfg.key_prefix, oa_resp_id(h->resp), rec, h->rt->cfg.responses_ttl_s);
  free(rec);
}

static void on_rq_event(void *sink, const rq_event_t *ev);

/* oa_resp_delta failed (rc: OA_RESP_TOO_LARGE, or -1 out of memory) while h's request runs:
 * cancels it (engine stream, lease) and ends h with the error, as a failure after the start. */
static void fail_output(hreq_t *h, int rc) {
  rq_event_t ev = {.kind = RQ_EV_ERROR, .started = true};
  if (rc == OA_RESP_TOO_LARGE) {
    metrics_reject(h->rt->metrics, "response_too_large");
    oa_resp_size_error(h->resp, (size_t)h->rt->cfg.max_response_bytes, &ev.err);
  } else {
    oa_err(&ev.err, 500, "server_error", NULL, NULL, "out of memory building the response");
  }
  if (h->streaming) /* reply_error logs the others */
    GT_LOG_INFO("rid=%s status=%d after %zu bytes (limit %ld): %s", h->id, ev.err.status, oa_resp_bytes(h->resp),
                h->rt->cfg.max_response_bytes, ev.err.message);
  rq_t *q = h->rq;
  h->rq = NULL;
  rq_cancel(q); /* no more callbacks; the engine frees the sequence */
  on_rq_event(h, &ev);
}

static void on_rq_event(void *sink, const rq_event_t *ev) {
  hreq_t *h = sink;
  if (ev->kind == RQ_EV_ERROR) {
    h->rq = NULL;
    if (h->wtimer) {
      /* paused: the client has not taken the bound buffered for it, and the error event would
       * wait behind it, holding it until the client leaves; drop the connection instead */
      GT_LOG_WARN("rid=%s request failed while its stream was paused: connection dropped with %zu bytes unsent: %s",
                  h->id, h->out ? evbuffer_get_length(h->out) : 0, ev->err.message);
      drop_conn(h, ev->err.status); /* counted as failed, like the gRPC front */
      return;
    }
    if (h->streaming) {
      oa_sb_t sb = {0};
      oa_resp_error_sse(h->resp, &ev->err, &sb);
      send_sse(h, &sb);
      oa_sb_free(&sb);
      evhttp_send_reply_end(h->req);
      /* the status line went out as 200, but the request failed: counted with the error's
       * status, as on the gRPC front (gantry_router_requests_total is the final outcome) */
      finish(h, ev->err.status);
    } else {
      reply_error(h, &ev->err, ev->retry_after_s);
    }
    return;
  }
  if (ev->emb) { /* /v1/embeddings: the one answer */
    h->rq = NULL;
    char *body = oa_embed_body(ev->emb, h->model, h->emb_b64);
    if (body) reply_json(h, 200, body);
    else reply_errf(h, 500, "server_error", NULL, "out of memory");
    free(body);
    return;
  }
  Gantry__V1__GenerateResponse *r = ev->msg;
  if (h->oa.stream) {
    if (!h->streaming) start_stream_reply(h);
    oa_sb_t sb = {0};
    if (r->kind_case == GANTRY__V1__GENERATE_RESPONSE__KIND_DELTA) {
      const int rc = oa_resp_delta(h->resp, r->delta, &sb);
      if (rc) { /* /v1/responses over --max-response-bytes, or out of memory */
        oa_sb_free(&sb);
        fail_output(h, rc);
        return;
      }
    } else if (r->kind_case == GANTRY__V1__GENERATE_RESPONSE__KIND_FINAL) oa_resp_final_sse(h->resp, r->final, &sb);
    if (ev->final) store_response(h); /* before the client can ask for it */
    send_sse(h, &sb);
    oa_sb_free(&sb);
    if (ev->final) {
      h->rq = NULL;
      evhttp_send_reply_end(h->req);
      /* a choice that ended with finish_reason ERROR (an error event on a stream whose status
       * line said 200) is counted 500, the status the same request gets without streaming */
      finish(h, oa_resp_error(h->resp) ? 500 : 200);
    } else {
      maybe_pause(h, ev);
    }
    return;
  }
  if (r->kind_case == GANTRY__V1__GENERATE_RESPONSE__KIND_DELTA) {
    const int rc = oa_resp_delta(h->resp, r->delta, NULL);
    if (rc) fail_output(h, rc); /* over --max-response-bytes (the estimate was short), or out of memory */
  } else if (!ev->final) { /* n > 1: a choice ended, others run on */
    oa_resp_final(h->resp, r->final);
  } else {
    h->rq = NULL;
    oa_resp_final(h->resp, r->final);
    const char *why = oa_resp_error(h->resp);
    if (r->final->finish_reason == GANTRY__V1__FINISH_REASON__FINISH_REASON_ERROR || why) {
      reply_errf(h, 500, "server_error", "engine_error", why ? why : "generation failed");
      return;
    }
    char *s = oa_resp_body(h->resp, r->final);
    if (!s) {
      reply_errf(h, 500, "server_error", NULL, "out of memory building the response");
      return;
    }
    store_response(h);
    reply_json_take(h, 200, s);
  }
}

/* Starts the generation of h->oa (parsed); history: see gen_parsed's caller. */
static void gen_parsed(hreq_t *h) {
  oa_error_t e;
  if (h->oa.request_id[0]) snprintf(h->id, sizeof h->id, "%s", h->oa.request_id); /* the body's request_id */
  if (rql_check(h->oa.gen, &e)) { /* the limits both fronts share (stop string length) */
    metrics_reject(h->rt->metrics, "bad_request");
    reply_error(h, &e, 0);
    return;
  }
  /* a response built in memory (not streamed, or /v1/responses) is bounded before admission by
   * what the request could return, and while it runs by what it holds (oa_resp_set_max_bytes) */
  const size_t max_resp = (size_t)h->rt->cfg.max_response_bytes;
  if (pool_has_model(h->rt->pool, h->oa.model) &&
      oa_resp_check_size(&h->oa, pool_context(h->rt->pool, h->oa.model), h->rt->cfg.reasoning_field, max_resp, &e)) {
    metrics_reject(h->rt->metrics, "response_too_large");
    reply_error(h, &e, 0);
    return;
  }
  h->resp = oa_resp_new(&h->oa, h->id, (int64_t)time(NULL), h->rt->cfg.reasoning_field);
  if (!h->resp) {
    reply_errf(h, 500, "server_error", NULL, "out of memory");
    return;
  }
  oa_resp_set_max_bytes(h->resp, max_resp);
  Gantry__V1__GenerateRequest *gen = h->oa.gen;
  h->oa.gen = NULL;
  h->rq = rq_start(h->rt, h->oa.model, h->tenant, h->id, gen, on_rq_event, h, &e);
  if (!h->rq) reply_error(h, &e, 0);
}

/* Parses h's body (history / refs: a /v1/responses stored response's items, see
 * oa_parse_responses, or NULL) and starts it. */
static void gen_parse(hreq_t *h, const char *history, const char *refs) {
  oa_error_t e;
  int rc = h->route == R_RESPONSES ? oa_parse_responses(h->body, h->body_len, history, refs, &h->oa, &e)
                                   : oa_parse_request(h->route == R_CHAT ? OA_CHAT : OA_COMPLETION, h->body, h->body_len,
                                                      &h->oa, &e);
  if (rc) {
    metrics_reject(h->rt->metrics, "bad_request");
    reply_error(h, &e, 0);
    return;
  }
  gen_parsed(h);
}

/* A stored response read for h (GET, DELETE, previous_response_id): the record, when it exists
 * and belongs to h's tenant (another tenant's is "not found" too), else a 404 / 503 reply (then
 * NULL). Caller decrefs. */
static json_t *own_record(hreq_t *h, rstore_status_t st, const char *rec, size_t len, const char *id,
                          const char *param) {
  const char *tenant = NULL;
  json_t *o = st == RSTORE_OK ? oa_record_parse(rec, len, &tenant) : NULL;
  if (o && !strcmp(tenant, h->tenant)) return o;
  json_decref(o);
  oa_error_t e;
  if (st == RSTORE_UNAVAILABLE)
    oa_err(&e, 503, "server_error", param, "store_unavailable", "cannot read stored responses: Redis is unreachable");
  else
    oa_err(&e, 404, "invalid_request_error", param, "not_found", "Response with id '%.80s' not found.", id);
  reply_error(h, &e, 0);
  return NULL;
}

static void on_prev_response(void *arg, rstore_status_t st, const char *rec, size_t len) {
  hreq_t *h = arg;
  if (drop_if_gone(h)) return;
  char id[OA_RESP_ID_MAX + 1];
  const int kind = oa_responses_prev_id(h->body, h->body_len, id, sizeof id, NULL);
  if (kind == 2 && st == RSTORE_MISSING) { /* an item_reference to no stored response: the parser says so */
    gen_parse(h, NULL, NULL);
    return;
  }
  json_t *o = own_record(h, st, rec, len, id, kind == 2 ? "input" : "previous_response_id");
  if (!o) return;
  char *items = json_dumps(json_object_get(o, "items"), JSON_COMPACT);
  json_decref(o);
  if (!items) reply_errf(h, 500, "server_error", NULL, "out of memory");
  else gen_parse(h, kind == 2 ? NULL : items, kind == 2 ? items : NULL);
  free(items);
}

/* POST /v1/embeddings: parsed, then the same admission / engine path as generation (rq) */
static void embed_after_auth(hreq_t *h) {
  oa_error_t e;
  oa_embed_req_t er;
  if (oa_embed_parse(h->body, h->body_len, &er, &e)) {
    metrics_reject(h->rt->metrics, "bad_request");
    reply_error(h, &e, 0);
    return;
  }
  snprintf(h->model, sizeof h->model, "%.128s", er.model);
  h->emb_b64 = er.base64;
  Gantry__V1__EmbedRequest *req = er.req;
  er.req = NULL;
  h->rq = rq_start_embed(h->rt, er.model, h->tenant, h->id, req, on_rq_event, h, &e);
  if (!h->rq) reply_error(h, &e, 0);
}

static void gen_after_auth(hreq_t *h) {
  char prev[OA_RESP_ID_MAX + 1];
  oa_error_t e;
  int p = h->route == R_RESPONSES ? oa_responses_prev_id(h->body, h->body_len, prev, sizeof prev, &e) : 0;
  if (p < 0) {
    metrics_reject(h->rt->metrics, "bad_request");
    reply_error(h, &e, 0);
  } else if (p == 0) {
    gen_parse(h, NULL, NULL);
  } else if (rstore_get(h->rt->rc, h->rt->cfg.key_prefix, prev, on_prev_response, h) != GT_OK) {
    on_prev_response(h, RSTORE_UNAVAILABLE, NULL, 0);
  }
}

/* GET / DELETE /v1/responses/{id} */
static void response_id_of(hreq_t *h, char *id, size_t n) {
  const struct evhttp_uri *u = evhttp_request_get_evhttp_uri(h->req);
  const char *path = u ? evhttp_uri_get_path(u) : NULL;
  snprintf(id, n, "%s", path ? path + strlen("/v1/responses/") : "");
}

static void on_response_deleted(void *arg, rstore_status_t st) {
  hreq_t *h = arg;
  if (drop_if_gone(h)) return;
  char id[OA_RESP_ID_MAX + 1];
  response_id_of(h, id, sizeof id);
  if (st == RSTORE_OK) reply_jobj(h, 200, json_pack("{s:s,s:s,s:b}", "id", id, "object", "response", "deleted", 1));
  else own_record(h, st, NULL, 0, id, NULL); /* the 404 / 503 */
}

static void on_response_read(void *arg, rstore_status_t st, const char *rec, size_t len) {
  hreq_t *h = arg;
  if (drop_if_gone(h)) return;
  char id[OA_RESP_ID_MAX + 1];
  response_id_of(h, id, sizeof id);
  json_t *o = own_record(h, st, rec, len, id, NULL);
  if (!o) return;
  if (evhttp_request_get_command(h->req) == EVHTTP_REQ_DELETE) {
    json_decref(o);
    if (rstore_del(h->rt->rc, h->rt->cfg.key_prefix, id, on_response_deleted, h) != GT_OK)
      on_response_deleted(h, RSTORE_UNAVAILABLE);
    return;
  }
  reply_jobj(h, 200, json_incref(json_object_get(o, "response")));
  json_decref(o);
}

static void response_after_auth(hreq_t *h) {
  char id[OA_RESP_ID_MAX + 1];
  response_id_of(h, id, sizeof id);
  if (rstore_get(h->rt->rc, h->rt->cfg.key_prefix, id, on_response_read, h) != GT_OK)
    on_response_read(h, RSTORE_UNAVAILABLE, NULL, 0);
}

/* ---- requests waiting on a callback ---- */
/* An admission call with h as its callback's argument was sent (it returned GT_OK), or a
 * (De)Tokenize call for h started. */
static void adm_wait_begin(hreq_t *h) {
  struct http_front *hf = h->rt->http;
  h->adm_waiting = true;
  h->aprev = NULL;
  h->anext = hf->adm_wait;
  if (hf->adm_wait) hf->adm_wait->aprev = h;
  hf->adm_wait = h;
  atomic_fetch_add(&hf->n_adm_wait, 1);
}

/* First thing in an admission callback or tok_loop: true when h was orphaned by http_front_stop
 * (then h is freed and the callback returns at once). */
static bool adm_wait_end(hreq_t *h) {
  if (!h->adm_waiting) return false; /* called directly, not by admission */
  struct http_front *hf = h->rt->http;
  h->adm_waiting = false;
  if (h->aprev) h->aprev->anext = h->anext;
  else hf->adm_wait = h->anext;
  if (h->anext) h->anext->aprev = h->aprev;
  if (!h->orphan) {
    atomic_fetch_sub(&hf->n_adm_wait, 1);
    return false;
  }
  hreq_free(h);
  return true;
}

/* ---- tokenize ---- */
typedef struct tok_op {
  hreq_t *h; /* NULL once http_front_free freed it (the router stopped): tok_loop only frees t */
  mbox_t *mb;
  ProtobufCMessage *resp;
  uint32_t ctx;
  bool detok; /* a Detokenize call */
} tok_op_t;

static void tok_loop(void *a, void *b, intptr_t code) {
  tok_op_t *t = a;
  gt_rpc_status_t *st = b;
  hreq_t *h = t->h;
  if (h) h->tok = NULL;
  if (!h || adm_wait_end(h)) {
    /* the router stopped: the client got its 503 there, h is freed */
  } else if (drop_if_gone(h)) {
    /* the client left: counted 499, nothing sent */
  } else if (code == GT_RPC_OK && t->resp && t->detok) {
    reply_jobj(h, 200, json_pack("{s:s}", "prompt", ((Gantry__V1__DetokenizeResponse *)t->resp)->text));
  } else if (code == GT_RPC_OK && t->resp) {
    Gantry__V1__TokenizeResponse *r = (Gantry__V1__TokenizeResponse *)t->resp;
    json_t *ids = json_array();
    for (size_t i = 0; i < r->n_ids; i++) json_array_append_new(ids, json_integer(r->ids[i]));
    reply_jobj(h, 200, json_pack("{s:i,s:i,s:o}", "count", (int)r->n_ids, "max_model_len", (int)t->ctx, "tokens", ids));
  } else if (code == GT_RPC_INVALID_ARGUMENT) {
    oa_error_t e;
    oa_err(&e, 400, "invalid_request_error", t->detok ? "tokens" : NULL, NULL, "%s", st->message);
    reply_error(h, &e, 0);
  } else { /* the code only: the transport's message names the engine's address */
    GT_LOG_WARN("rid=%s %s call failed: %s", h->id, t->detok ? "Detokenize" : "Tokenize", st->message);
    char msg[96];
    snprintf(msg, sizeof msg, "%s call failed (%s)", t->detok ? "detokenize" : "tokenize", gt_rpc_code_name(st->code));
    reply_errf(h, 503, "server_error", "engine_unavailable", msg);
  }
  if (t->resp) protobuf_c_message_free_unpacked(t->resp, NULL);
  free(st);
  free(t);
}

static void tok_msg(void *user, gt_rpc_stream_t *s, ProtobufCMessage *msg) {
  (void)s;
  tok_op_t *t = user;
  if (t->resp) protobuf_c_message_free_unpacked(t->resp, NULL);
  t->resp = msg;
}

static void tok_done(void *user, gt_rpc_stream_t *s, const gt_rpc_status_t *st) {
  tok_op_t *t = user;
  gt_rpc_stream_release(s);
  gt_rpc_status_t *c = malloc(sizeof *c);
  if (c) *c = *st;
  if (!c || mbox_post(t->mb, tok_loop, t, c, st->code)) free(c); /* OOM: the reply never comes */
}

static void tok_call(hreq_t *h, pool_engine_t *eng, const char *method, const ProtobufCMessage *req,
                     const ProtobufCMessageDescriptor *resp, bool detok);

static void tokenize_after_auth(hreq_t *h) {
  oa_error_t e;
  /* accept both shapes: {"model","prompt"} and {"model","messages"} */
  json_error_t je;
  json_t *b = h->body_len ? json_loadb(h->body, h->body_len, 0, &je) : NULL;
  if (!b || !json_is_object(b)) {
    json_decref(b);
    reply_errf(h, 400, "invalid_request_error", "invalid_json", "body must be a JSON object {\"model\", \"prompt\"|\"messages\"}");
    return;
  }
  bool chat = json_object_get(b, "messages") != NULL;
  if (!json_object_get(b, "max_tokens")) json_object_set_new(b, "max_tokens", json_integer(1));
  char *s = json_dumps(b, JSON_COMPACT);
  json_decref(b);
  oa_req_t oa;
  int rc = oa_parse_request(chat ? OA_CHAT : OA_COMPLETION, s ? s : "", s ? strlen(s) : 0, &oa, &e);
  free(s);
  if (rc) {
    reply_error(h, &e, 0);
    return;
  }
  if (!pool_has_model(h->rt->pool, oa.model)) {
    oa_err(&e, 404, "invalid_request_error", "model", "model_not_found", "The model '%s' does not exist", oa.model);
    oa_req_free(&oa);
    reply_error(h, &e, 0);
    return;
  }
  pool_engine_t *eng = pool_pick(h->rt->pool, oa.model, NULL, 0);
  if (!eng) {
    oa_req_free(&oa);
    reply_errf(h, 503, "server_error", "engine_unavailable", "no ready engine for this model");
    return;
  }
  Gantry__V1__TokenizeRequest tr = GANTRY__V1__TOKENIZE_REQUEST__INIT;
  if (chat) {
    tr.input_case = GANTRY__V1__TOKENIZE_REQUEST__INPUT_CHAT;
    tr.chat = oa.gen->chat;
    tr.add_generation_prompt = true;
  } else if (oa.gen->input_case == GANTRY__V1__GENERATE_REQUEST__INPUT_PROMPT) {
    tr.input_case = GANTRY__V1__TOKENIZE_REQUEST__INPUT_TEXT;
    tr.text = oa.gen->prompt;
  } else {
    json_t *ids = json_array();
    for (size_t i = 0; i < oa.gen->tokens->n_ids; i++) json_array_append_new(ids, json_integer(oa.gen->tokens->ids[i]));
    reply_jobj(h, 200, json_pack("{s:i,s:i,s:o}", "count", (int)oa.gen->tokens->n_ids, "max_model_len",
                                 (int)eng->context_length, "tokens", ids));
    oa_req_free(&oa);
    return;
  }
  tok_call(h, eng, EC_METHOD_TOKENIZE, &tr.base, &gantry__v1__tokenize_response__descriptor, false);
  oa_req_free(&oa);
}

/* Starts a unary Tokenize / Detokenize call on eng; the reply comes from tok_loop. */
static void tok_call(hreq_t *h, pool_engine_t *eng, const char *method, const ProtobufCMessage *req,
                     const ProtobufCMessageDescriptor *resp, bool detok) {
  tok_op_t *t = calloc(1, sizeof *t);
  gt_rpc_stream_t *st = NULL;
  gt_err_t err;
  gt_rpc_stream_args_t a = {.method = method, .request = req, .response = resp, .timeout_ms = 30000,
                            .on_msg = tok_msg, .on_done = tok_done, .user = t};
  if (t) *t = (tok_op_t){.h = h, .mb = h->rt->mb, .ctx = eng->context_length, .detok = detok};
  if (!t || gt_rpc_client_stream(ec_rpc(eng->ec), &a, &st, &err)) {
    free(t);
    reply_errf(h, 503, "server_error", "engine_unavailable", detok ? "detokenize call failed" : "tokenize call failed");
    return;
  }
  /* in the waiting list: a router stop answers it 503 (the engine's answer then only frees) */
  h->tok = t;
  adm_wait_begin(h);
}

/* POST /detokenize (vLLM): {"model", "tokens": [ids]} -> {"prompt": text}; special tokens are kept. */
static void detokenize_after_auth(hreq_t *h) {
  oa_error_t e;
  json_error_t je;
  json_t *b = h->body_len ? json_loadb(h->body, h->body_len, 0, &je) : NULL;
  json_t *model = json_object_get(b, "model"), *toks = json_object_get(b, "tokens");
  Gantry__V1__DetokenizeRequest dr = GANTRY__V1__DETOKENIZE_REQUEST__INIT;
  if (!b || !json_is_object(b)) {
    oa_err(&e, 400, NULL, NULL, "invalid_json", "body must be a JSON object {\"model\", \"tokens\": [ids]}");
  } else if (!json_is_string(model) || !json_string_length(model)) {
    oa_err(&e, 400, NULL, "model", "missing_required_parameter", "'model' must be a non-empty string");
  } else if (!json_is_array(toks)) {
    oa_err(&e, 400, NULL, "tokens", "missing_required_parameter", "'tokens' must be an array of token ids");
  } else if (!pool_has_model(h->rt->pool, json_string_value(model))) {
    oa_err(&e, 404, NULL, "model", "model_not_found", "The model '%.200s' does not exist", json_string_value(model));
  } else {
    e.status = 0;
    oa_token_ids(toks, "tokens", "tokens", &dr.ids, &dr.n_ids, &e);
  }
  pool_engine_t *eng = e.status ? NULL : pool_pick(h->rt->pool, json_string_value(model), NULL, 0);
  if (!e.status && !eng) oa_err(&e, 503, "server_error", NULL, "engine_unavailable", "no ready engine for this model");
  if (e.status) reply_error(h, &e, 0);
  else tok_call(h, eng, EC_METHOD_DETOKENIZE, &dr.base, &gantry__v1__detokenize_response__descriptor, true);
  free(dr.ids);
  json_decref(b);
}

/* ---- admin ---- */
static json_t *limits_obj(const char *model, const char *tenant, const adm_limits_t *l) {
  json_t *o = json_pack("{s:s,s:s?}", "model", model, "tenant", tenant && tenant[0] ? tenant : NULL);
  json_object_set_new(o, "max_inflight", json_integer(l->max_inflight));
  json_object_set_new(o, "max_queued", json_integer(l->max_queued));
  if (tenant && tenant[0]) json_object_set_new(o, "weight", json_real(l->weight));
  return o;
}

static void on_limits_get(void *arg, int status, const char *msg, const adm_limits_t *lim) {
  hreq_t *h = arg;
  if (adm_wait_end(h) || drop_if_gone(h)) return;
  if (status != GT_OK || !lim) {
    reply_errf(h, status == GT_EINVAL ? 400 : 503, status == GT_EINVAL ? "invalid_request_error" : "server_error",
               NULL, msg ? msg : "limits unavailable");
    return;
  }
  reply_jobj(h, 200, limits_obj(h->model, h->atenant, lim));
}

static void on_limits_set(void *arg, int status, const char *msg) {
  hreq_t *h = arg;
  if (adm_wait_end(h) || drop_if_gone(h)) return;
  if (status != GT_OK) {
    reply_errf(h, status == GT_EINVAL ? 400 : 503, status == GT_EINVAL ? "invalid_request_error" : "server_error",
               NULL, msg ? msg : "limits update failed");
    return;
  }
  GT_LOG_INFO("rid=%s limits changed model=%s tenant=%s", h->id, h->model, h->atenant[0] ? h->atenant : "-");
  gt_err_t err;
  if (adm_limits_get(h->rt->adm, h->model, h->atenant, on_limits_get, h, &err))
    reply_errf(h, 503, "server_error", NULL, err.msg);
  else
    adm_wait_begin(h);
}

static void on_queues(void *arg, int status, const char *msg, const adm_queue_row_t *rows, int n) {
  hreq_t *h = arg;
  if (adm_wait_end(h) || drop_if_gone(h)) return;
  if (status != GT_OK) {
    reply_errf(h, 503, "server_error", NULL, msg ? msg : "queues unavailable");
    return;
  }
  json_t *a = json_array();
  for (int i = 0; i < n; i++) {
    json_t *o = json_pack("{s:s,s:s?,s:I,s:I,s:I,s:I}", "model", rows[i].model, "tenant",
                          rows[i].tenant[0] ? rows[i].tenant : NULL, "queued", (json_int_t)rows[i].queued,
                          "inflight", (json_int_t)rows[i].inflight, "max_inflight", (json_int_t)rows[i].max_inflight,
                          "max_queued", (json_int_t)rows[i].max_queued);
    if (rows[i].tenant[0]) json_object_set_new(o, "weight", json_real(rows[i].weight));
    json_array_append_new(a, o);
  }
  reply_jobj(h, 200, json_pack("{s:o}", "queues", a));
}

static void query_param(struct evhttp_request *req, const char *key, char *out, size_t n) {
  out[0] = '\0';
  const struct evhttp_uri *u = evhttp_request_get_evhttp_uri(req);
  const char *q = u ? evhttp_uri_get_query(u) : NULL;
  if (!q) return;
  struct evkeyvalq kv;
  if (evhttp_parse_query_str(q, &kv)) return;
  const char *v = evhttp_find_header(&kv, key);
  if (v) snprintf(out, n, "%s", v);
  evhttp_clear_headers(&kv);
}

static void admin_after_auth(hreq_t *h) {
  gt_err_t err;
  enum evhttp_cmd_type m = evhttp_request_get_command(h->req);
  if (h->route == R_QUEUES) {
    char model[ADM_NAME_MAX + 1];
    query_param(h->req, "model", model, sizeof model);
    if (adm_queues_list(h->rt->adm, model, on_queues, h, &err)) reply_errf(h, 503, "server_error", NULL, err.msg);
    else adm_wait_begin(h);
    return;
  }
  if (m == EVHTTP_REQ_GET) {
    query_param(h->req, "model", h->model, sizeof h->model);
    query_param(h->req, "tenant", h->atenant, sizeof h->atenant);
    if (!h->model[0]) {
      /* all pools: the queues listing carries the limits of every pool and tenant */
      if (adm_queues_list(h->rt->adm, NULL, on_queues, h, &err)) reply_errf(h, 503, "server_error", NULL, err.msg);
      else adm_wait_begin(h);
      return;
    }
    if (adm_limits_get(h->rt->adm, h->model, h->atenant, on_limits_get, h, &err))
      reply_errf(h, err.code == GT_EINVAL ? 400 : 503, err.code == GT_EINVAL ? "invalid_request_error" : "server_error",
                 NULL, err.msg);
    else
      adm_wait_begin(h);
    return;
  }
  /* PUT */
  char *body = strndup(h->body ? h->body : "", h->body_len);
  int rc = body ? adm_limits_parse_json(body, h->model, h->atenant, &h->lim, &err) : GT_ENOMEM;
  free(body);
  if (rc) {
    reply_errf(h, 400, "invalid_request_error", "invalid_limits", err.msg);
    return;
  }
  if (!pool_has_model(h->rt->pool, h->model)) { /* a typo would otherwise make a new pool */
    char msg[ADM_NAME_MAX + 96];
    snprintf(msg, sizeof msg, "unknown model '%s': no engine serves it (--engine or the registry)", h->model);
    reply_errf(h, 404, "invalid_request_error", "model_not_found", msg);
    return;
  }
  if (adm_limits_set(h->rt->adm, h->model, h->atenant, &h->lim, on_limits_set, h, &err))
    reply_errf(h, err.code == GT_EINVAL ? 400 : 503, err.code == GT_EINVAL ? "invalid_request_error" : "server_error",
               NULL, err.msg);
  else
    adm_wait_begin(h);
}

/* ---- dispatch ---- */
static void info_after_auth(hreq_t *h);

static void on_auth(void *arg, auth_status_t st, const char *tenant) {
  hreq_t *h = arg;
  if (drop_if_gone(h)) return; /* the client left while its key was checked */
  if (st == AUTH_UNAVAILABLE) {
    metrics_reject(h->rt->metrics, "auth_unavailable");
    reply_errf(h, 503, "server_error", "auth_unavailable", "cannot check the API key: Redis is unreachable");
    return;
  }
  if (st == AUTH_NOKEYS) {
    metrics_reject(h->rt->metrics, "auth_no_keys");
    reply_errf(h, 503, "server_error", "auth_no_keys", AUTH_NOKEYS_MSG);
    return;
  }
  if (st == AUTH_DENIED) {
    metrics_reject(h->rt->metrics, "unauthorized");
    bool admin = h->route == R_LIMITS || h->route == R_QUEUES;
    reply_errf(h, 401, "authentication_error", "invalid_api_key",
               admin ? "admin routes need the admin key (Authorization: Bearer <admin key>)"
                     : "Incorrect or missing API key (Authorization: Bearer <key>)");
    return;
  }
  snprintf(h->tenant, sizeof h->tenant, "%s", tenant);
  switch (h->route) {
    case R_CHAT:
    case R_COMPL:
    case R_RESPONSES: gen_after_auth(h); break;
    case R_RESPONSE: response_after_auth(h); break;
    case R_EMBED: embed_after_auth(h); break;
    case R_TOKENIZE: tokenize_after_auth(h); break;
    case R_DETOKENIZE: detokenize_after_auth(h); break;
    case R_MODELS:
    case R_MODEL:
    case R_METRICS: info_after_auth(h); break;
    default: admin_after_auth(h); break;
  }
}

static json_t *model_obj(pool_t *p, const char *id) {
  json_t *m = json_pack("{s:s,s:s,s:i,s:s}", "id", id, "object", "model", "created", 0, "owned_by", "gantry");
  uint32_t ctx = pool_context(p, id);
  if (ctx) json_object_set_new(m, "max_model_len", json_integer(ctx));
  return m;
}

static void models(hreq_t *h) {
  json_t *data = json_array();
  pool_t *p = h->rt->pool;
  for (int i = 0; i < pool_count(p); i++) {
    pool_engine_t *e = pool_at(p, i);
    bool seen = false;
    for (int k = 0; k < i; k++)
      if (!strcmp(pool_at(p, k)->model, e->model)) seen = true;
    if (!seen) json_array_append_new(data, model_obj(p, e->model));
  }
  reply_jobj(h, 200, json_pack("{s:s,s:o}", "object", "list", "data", data));
}

/* GET /v1/models/{id}: the model object, or a 404 OpenAI error (code model_not_found). The id
 * is percent-decoded and may contain '/' (e.g. "Qwen/Qwen3-0.6B"). */
static void model_one(hreq_t *h) {
  const struct evhttp_uri *u = evhttp_request_get_evhttp_uri(h->req);
  const char *path = u ? evhttp_uri_get_path(u) : NULL;
  size_t n = 0;
  char *id = path ? evhttp_uridecode(path + strlen("/v1/models/"), 0, &n) : NULL;
  oa_error_t e;
  if (!id) reply_errf(h, 500, "server_error", NULL, "out of memory");
  else if (strlen(id) != n || !gt_utf8_valid(id, n) || !pool_has_model(h->rt->pool, id)) {
    oa_err(&e, 404, "invalid_request_error", "model", "model_not_found", "The model '%.200s' does not exist",
           strlen(id) == n && gt_utf8_valid(id, n) ? id : "?");
    reply_error(h, &e, 0);
  } else {
    reply_jobj(h, 200, model_obj(h->rt->pool, id));
  }
  free(id);
}

static void metrics_cb(void *arg, int status, const char *msg, const adm_queue_row_t *rows, int n) {
  hreq_t *h = arg;
  if (adm_wait_end(h) || drop_if_gone(h)) return;
  (void)msg;
  adm_stats_t as;
  adm_stats(h->rt->adm, &as);
  metrics_set_dataguard(h->rt->metrics, dg_losses(h->rt->dg), dg_snapshot_entries(h->rt->dg));
  metrics_set_grpc_unsent(h->rt->metrics, rgf_unsent_bytes(h->rt->grpc));
  char *t = metrics_render(h->rt->metrics, &as, h->rt->pool, status == GT_OK ? rows : NULL, status == GT_OK ? n : 0);
  reply_text(h, 200, "text/plain; version=0.0.4", t ? t : "");
  free(t);
}

/* A request body's Content-Type: absent or application/json (parameters such as charset allowed). */
static bool json_content_type(const char *ct) {
  if (!ct) return true;
  while (*ct == ' ') ct++;
  size_t n = strlen("application/json");
  return !strncasecmp(ct, "application/json", n) && (ct[n] == '\0' || ct[n] == ';' || ct[n] == ' ');
}

/* /v1/models, /v1/models/{id} and /metrics (after the key check with --protect-info). */
static void info_after_auth(hreq_t *h) {
  if (h->route == R_MODELS || h->route == R_MODEL) {
    h->route == R_MODELS ? models(h) : model_one(h);
    return;
  }
  gt_err_t err;
  if (adm_queues_list(h->rt->adm, NULL, metrics_cb, h, &err)) metrics_cb(h, GT_EIO, err.msg, NULL, 0);
  else adm_wait_begin(h);
}

/* GET /ready: 200 when Redis is up and every model has a ready engine; 503 otherwise and while
 * the router drains. Engines whose Health says DRAINING are listed either way. */
static void ready(hreq_t *h) {
  char why[256] = "";
  adm_stats_t as;
  adm_stats(h->rt->adm, &as);
  if (!as.redis_up) snprintf(why, sizeof why, "redis unreachable");
  bool ok = as.redis_up && pool_all_ready(h->rt->pool, why, sizeof why);
  if (h->rt->draining) {
    ok = false;
    snprintf(why, sizeof why, "router draining");
  }
  json_t *o = json_pack("{s:s,s:s?}", "status", ok ? "ready" : h->rt->draining ? "draining" : "not_ready", "reason",
                        ok ? NULL : why);
  json_t *dr = json_array();
  for (int i = 0; i < pool_count(h->rt->pool); i++) {
    pool_engine_t *e = pool_at(h->rt->pool, i);
    if (e->draining) json_array_append_new(dr, json_pack("{s:s,s:s}", "model", e->model, "engine", e->target));
  }
  json_object_set_new(o, "engines_draining", dr);
  reply_jobj(h, ok ? 200 : 503, o);
}

/* CORS (--cors-origins: comma-separated origins, "*" = any): a request whose Origin is allowed
 * gets Access-Control-Allow-Origin on every answer; a preflight (OPTIONS) is answered 204 here
 * with the methods and headers allowed. Returns true when h was answered (a preflight). */
static bool cors(hreq_t *h, enum evhttp_cmd_type m) {
  struct evkeyvalq *in = evhttp_request_get_input_headers(h->req), *out = evhttp_request_get_output_headers(h->req);
  const char *origin = evhttp_find_header(in, "Origin"), *list = h->rt->cfg.cors_origins;
  bool ok = false;
  for (const char *p = list; origin && *p && !ok;) {
    size_t n = strcspn(p, ",");
    while (n && p[n - 1] == ' ') n--;
    ok = (n == 1 && *p == '*') || (n == strlen(origin) && !strncmp(p, origin, n));
    p += strcspn(p, ",");
    while (*p == ',' || *p == ' ') p++;
  }
  if (ok) {
    evhttp_add_header(out, "Access-Control-Allow-Origin", origin);
    evhttp_add_header(out, "Vary", "Origin");
    evhttp_add_header(out, "Access-Control-Expose-Headers", "X-Request-Id, Retry-After");
  }
  if (m != EVHTTP_REQ_OPTIONS) return false;
  evhttp_add_header(out, "Allow", "GET, POST, PUT, DELETE, OPTIONS");
  if (ok) {
    const char *rh = evhttp_find_header(in, "Access-Control-Request-Headers");
    evhttp_add_header(out, "Access-Control-Allow-Methods", "GET, POST, PUT, DELETE, OPTIONS");
    evhttp_add_header(out, "Access-Control-Allow-Headers",
                      rh && strlen(rh) < 1024 && !strpbrk(rh, "\r\n") ? rh : "authorization, content-type, x-api-key, x-request-id");
    evhttp_add_header(out, "Access-Control-Max-Age", "600");
  }
  evhttp_send_reply(h->req, 204, "No Content", NULL);
  finish(h, 204);
  return true;
}

static int route_of(const char *path) {
  for (int i = 0; i < R_OTHER; i++)
    if (i != R_MODEL && i != R_RESPONSE && !strcmp(path, route_names[i])) return i;
  if (!strncmp(path, "/v1/models/", strlen("/v1/models/")) && path[strlen("/v1/models/")]) return R_MODEL;
  if (!strncmp(path, "/v1/responses/", strlen("/v1/responses/")) && path[strlen("/v1/responses/")]) return R_RESPONSE;
  return R_OTHER;
}

static void on_request(struct evhttp_request *req, void *arg) {
  struct http_front *hf = arg;
  const struct evhttp_uri *u = evhttp_request_get_evhttp_uri(req);
  const char *path = u ? evhttp_uri_get_path(u) : NULL;
  const int route = route_of(path ? path : "");
  hreq_t *h = calloc(1, sizeof *h);
  if (!h) {
    metrics_request(hf->rt->metrics, route_names[route], 500);
    evhttp_send_error(req, 500, "out of memory");
    return;
  }
  h->rt = hf->rt;
  h->req = req;
  h->t0 = gt_now_ms();
  const char *rid = evhttp_find_header(evhttp_request_get_input_headers(req), "X-Request-Id");
  if (rid && rid[0] && strlen(rid) < sizeof h->id && !strpbrk(rid, " :*\r\n")) snprintf(h->id, sizeof h->id, "%s", rid);
  else rt_request_id(hf->rt, h->id);
  h->route = route;
  enum evhttp_cmd_type m = evhttp_request_get_command(req);
  h->conn = evhttp_request_get_connection(req);
  oa_error_t ge;
  if (h->conn && http_guard_request(hf->guard, evhttp_connection_get_bufferevent(h->conn), &ge)) {
    /* a framing error in the head (431, 400) that evhttp read whole before the guard ended it */
    evhttp_add_header(evhttp_request_get_output_headers(req), "Connection", "close");
    reply_error(h, &ge, 0);
    return;
  }
  if (cors(h, m)) return;

  switch (h->route) {
    case R_HEALTH: reply_jobj(h, 200, json_pack("{s:s}", "status", "ok")); return;
    case R_READY: ready(h); return;
    case R_VERSION: reply_jobj(h, 200, json_pack("{s:s}", "version", GANTRY_VERSION)); return;
    case R_MODELS:
    case R_MODEL:
    case R_METRICS:
      if (!hf->rt->cfg.protect_info && m != EVHTTP_REQ_DELETE) { /* DELETE: 405 below */
        info_after_auth(h);
        return;
      }
      break; /* --protect-info: a key first */
    case R_OTHER: {
      char msg[300];
      snprintf(msg, sizeof msg, "no route %.200s", path ? path : "?");
      reply_errf(h, 404, "invalid_request_error", "not_found", msg);
      return;
    }
    default: break;
  }
  bool admin = h->route == R_LIMITS || h->route == R_QUEUES;
  bool info = h->route == R_MODELS || h->route == R_MODEL || h->route == R_METRICS;
  bool ok_method = info    ? m == EVHTTP_REQ_GET
                   : admin ? (m == EVHTTP_REQ_GET || (h->route == R_LIMITS && m == EVHTTP_REQ_PUT))
                   : h->route == R_RESPONSE ? (m == EVHTTP_REQ_GET || m == EVHTTP_REQ_DELETE)
                                            : m == EVHTTP_REQ_POST;
  if (!ok_method) {
    reply_errf(h, 405, "invalid_request_error", "method_not_allowed", "method not allowed on this route");
    return;
  }
  if (m != EVHTTP_REQ_GET && m != EVHTTP_REQ_DELETE && !json_content_type(evhttp_find_header(evhttp_request_get_input_headers(req), "Content-Type"))) {
    reply_errf(h, 415, "invalid_request_error", "unsupported_media_type",
               "Content-Type must be application/json");
    return;
  }
  struct evbuffer *in = evhttp_request_get_input_buffer(req);
  h->body_len = evbuffer_get_length(in);
  h->body = malloc(h->body_len + 1);
  if (!h->body) {
    reply_errf(h, 500, "server_error", NULL, "out of memory");
    return;
  }
  evbuffer_copyout(in, h->body, h->body_len);
  h->body[h->body_len] = '\0';
  if (h->conn) evhttp_connection_set_closecb(h->conn, on_conn_close, h);
  start_watch(h);
  const char *key = auth_bearer(evhttp_find_header(evhttp_request_get_input_headers(req), "Authorization"));
  if (!key) key = evhttp_find_header(evhttp_request_get_input_headers(req), "X-Api-Key");
  auth_check(hf->rt->auth, key, admin ? AUTH_FOR_ADMIN : info ? AUTH_FOR_ANY : AUTH_FOR_API, on_auth, h);
}

/* Without --http-max-conns: what the open-file limit leaves after a reserve for Redis, engines,
 * the gRPC front and logs (main raised the soft limit), at most 16384. */
static int http_default_max_conns(void) {
  struct rlimit rl;
  long lim = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY ? (long)rl.rlim_cur : 16384 + 512;
  long n = lim - (lim / 4 > 512 ? 512 : lim / 4);
  if (n > 16384) n = 16384;
  return n < 16 ? 16 : (int)n;
}

struct http_front *http_front_start(router_t *rt, gt_err_t *err) {
  struct http_front *hf = calloc(1, sizeof *hf);
  if (!hf) {
    gt_err_set(err, GT_ENOMEM, "http: out of memory");
    return NULL;
  }
  hf->rt = rt;
  hf->http = evhttp_new(rt->base);
  char host[128];
  snprintf(host, sizeof host, "%s", rt->cfg.http_addr);
  char *colon = strrchr(host, ':');
  if (!hf->http || !colon) {
    http_front_free(hf);
    gt_err_set(err, GT_EINVAL, "--http %s: expected HOST:PORT", rt->cfg.http_addr);
    return NULL;
  }
  *colon = '\0';
  int port = atoi(colon + 1);
  /* a body over the cap is refused by libevent, from Content-Length before it is read or while
   * chunks arrive; with lingering close the rest is read and dropped (never buffered) so the
   * client gets the 413 instead of a reset; http_errpage turns libevent's page into JSON */
  evhttp_set_max_body_size(hf->http, rt->cfg.max_body_bytes);
  evhttp_set_flags(hf->http, EVHTTP_SERVER_LINGERING_CLOSE);
  /* the guard refuses a head over --max-header-bytes with 431 as the bytes arrive; evhttp's own
   * (400) cap is a backstop for what one read may add before the guard ends the connection */
  evhttp_set_max_headers_size(hf->http, rt->cfg.max_header_bytes + 128 * 1024);
  http_guard_cfg_t gc = {.head_timeout_ms = rt->cfg.http_head_timeout_s * 1000,
                         .body_timeout_ms = rt->cfg.http_body_timeout_s * 1000,
                         .max_header_bytes = rt->cfg.max_header_bytes,
                         .max_headers = rt->cfg.max_headers,
                         .max_conns = rt->cfg.http_max_conns > 0 ? rt->cfg.http_max_conns : http_default_max_conns(),
                         .max_conns_per_addr = rt->cfg.http_max_conns_per_addr};
  if (!(hf->guard = http_guard_new(rt->base, &gc, rt->metrics))) {
    http_front_free(hf);
    gt_err_set(err, GT_ENOMEM, "http: out of memory");
    return NULL;
  }
  evhttp_set_bevcb(hf->http, http_guard_bev, hf->guard);
  evhttp_set_timeout(hf->http, rt->cfg.http_timeout_s);
  evhttp_set_allowed_methods(hf->http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_PUT | EVHTTP_REQ_HEAD |
                                            EVHTTP_REQ_DELETE | EVHTTP_REQ_OPTIONS);
  evhttp_set_gencb(hf->http, on_request, hf);
  errno = 0;
  struct evhttp_bound_socket *s = evhttp_bind_socket_with_handle(hf->http, host, (ev_uint16_t)port);
  if (!s) {
    const int e = errno;
    http_front_free(hf);
    gt_err_set(err, GT_EIO, "--http %s: cannot listen: %s", rt->cfg.http_addr,
               e ? strerror(e) : "bad address");
    return NULL;
  }
  http_guard_listen(hf->guard, evhttp_bound_socket_get_listener(s));
  GT_LOG_INFO("http: at most %d connections (%d per client address); request head within %d s, body within %d s; "
              "head at most %ld bytes, %d fields",
              gc.max_conns, gc.max_conns_per_addr, rt->cfg.http_head_timeout_s, rt->cfg.http_body_timeout_s,
              rt->cfg.max_header_bytes, rt->cfg.max_headers);
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  if (getsockname(evhttp_bound_socket_get_fd(s), (struct sockaddr *)&ss, &sl) == 0) {
    if (ss.ss_family == AF_INET) rt->http_port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
    else if (ss.ss_family == AF_INET6) rt->http_port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
  }
  return hf;
}

/* At stop, for a request waiting on Redis or an engine whose connection is about to be freed: a
 * 503 error sent with one non-blocking send on its socket, past libevent (whose output buffer the loop,
 * stopped, would never write; the client is not waited for: what the socket does not take now
 * is lost with the connection, but a small reply on an idle connection fits). */
static void reply_at_stop(hreq_t *h) {
  struct bufferevent *bev = evhttp_connection_get_bufferevent(h->conn);
  const evutil_socket_t fd = bev ? bufferevent_getfd(bev) : -1;
  oa_error_t e;
  oa_err(&e, 503, "server_error", NULL, "router_shutdown", "the router is shutting down; retry on another router");
  char *js = fd >= 0 ? oa_error_json(&e) : NULL;
  char msg[1024];
  const int n = js ? snprintf(msg, sizeof msg,
                              "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                              "X-Request-Id: %s\r\nConnection: close\r\nContent-Length: %zu\r\n\r\n%s",
                              h->id, strlen(js), js)
                   : -1;
  if (n > 0 && (size_t)n < sizeof msg && send(fd, msg, (size_t)n, MSG_DONTWAIT | MSG_NOSIGNAL) < 0)
    GT_LOG_DEBUG("rid=%s 503 at stop not sent: %s", h->id, strerror(errno));
  free(js);
}

void http_front_stop(struct http_front *hf) {
  if (!hf || !hf->http) return;
  /* a request waiting on Redis or on an engine's (De)Tokenize answer (either may never come) is
   * answered 503 and loses its connection below (one whose client left: nothing sent, counted
   * 499); its callback, if it still comes, only frees it */
  for (hreq_t *h = hf->adm_wait; h; h = h->anext) {
    h->orphan = true;
    stop_watch(h);
    if (h->conn) {
      evhttp_connection_set_closecb(h->conn, NULL, NULL);
      if (!h->gone) reply_at_stop(h);
    }
    h->req = NULL;
    h->conn = NULL;
    metrics_request(h->rt->metrics, route_names[h->route], h->gone ? 499 : 503); /* gone: as drop_if_gone */
  }
  atomic_store(&hf->n_adm_wait, 0);
  evhttp_free(hf->http);
  hf->http = NULL;
}

void http_front_free(struct http_front *hf) {
  if (!hf) return;
  http_front_stop(hf);
  http_guard_free(hf->guard); /* after evhttp_free: every connection closed */
  while (hf->adm_wait) {
    hreq_t *h = hf->adm_wait;
    hf->adm_wait = h->anext;
    if (h->tok) h->tok->h = NULL; /* its call ends in pool_destroy, whose mailbox drain frees it */
    hreq_free(h);
  }
  free(hf);
}

int http_front_adm_waiting(struct http_front *hf) { return atomic_load(&hf->n_adm_wait); }
