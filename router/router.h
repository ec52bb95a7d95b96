/* router/router.h — gantry-router internals shared by its modules (one libevent loop thread).
 *   mailbox  : hand-off from gRPC threads to the loop (eventfd + locked list)
 *   pool     : engines per model, health via Health/Info RPCs, least-in-flight choice
 *   rq       : one generation request: admission -> engine stream -> release (every exit path)
 *   auth     : API key (SHA-256 in Redis hash <prefix>apikeys) -> tenant; admin key
 *   metrics  : gantry_router_* counters and the Prometheus text
 *   http     : OpenAI HTTP gateway + admin routes (evhttp)
 *   grpc_front: gantry.v1.Router / gantry.v1.Admin
 * Everything here runs on the loop thread unless a comment says otherwise. */
#ifndef GANTRY_ROUTER_ROUTER_H
#define GANTRY_ROUTER_ROUTER_H

#include <stdbool.h>
#include <stdint.h>

#include "common/engine_client.h"
#include "common/err.h"
#include "router/admission.h"
#include "router/openai.h"
#include "router/redis_conn.h"

struct event_base;
typedef struct router router_t;

/* ---- configuration (router/config.c) ---- */
#define RT_MAX_ENGINES 32
typedef struct rt_config {
  char http_addr[128];   /* "127.0.0.1:8080"; "" = no HTTP */
  char grpc_addr[128];   /* "" = no gRPC front */
  char redis_host[128];
  int redis_port;
  char key_prefix[64];   /* Redis key prefix, default "gantry:" */
  struct { char model[ADM_NAME_MAX + 1]; char target[256]; } engines[RT_MAX_ENGINES];
  int n_engines;
  char admin_key[256];   /* "" = none (admin routes open only when no API keys exist) */
  oa_reasoning_field_t reasoning_field;
  long max_body_bytes;   /* 413 above this; default 8 MiB */
  int http_timeout_s;    /* header/body read timeout; default 30 */
  int health_ms;         /* health check period; default 1000 */
  int request_timeout_ms;/* engine stream deadline; default 600000 */
  int engine_stale_ms;   /* registered engine without heartbeat for this long: not routable */
  int lease_ttl_ms, queue_timeout_ms, hold_ms, default_max_inflight, default_max_queued;
} rt_config_t;

/* Fills defaults. */
void rt_config_defaults(rt_config_t *c);
/* Parses argv (after defaults); GT_OK, or GT_EINVAL with err (usage problems). *help set for
 * --help. */
int rt_config_parse(rt_config_t *c, int argc, char **argv, bool *help, gt_err_t *err);
const char *rt_usage(void);

/* ---- mailbox ---- */
typedef struct mbox mbox_t;
typedef void (*mbox_fn)(void *a, void *b, intptr_t c);
mbox_t *mbox_create(struct event_base *base, gt_err_t *err);
/* Any thread: runs fn(a, b, c) on the loop thread soon, in post order. 0 or -1 (OOM). */
int mbox_post(mbox_t *m, mbox_fn fn, void *a, void *b, intptr_t c);
/* Runs what is queued now (loop thread; also used at shutdown). */
void mbox_drain(mbox_t *m);
void mbox_destroy(mbox_t *m);

/* ---- engine pool ---- */
typedef struct pool_engine {
  char model[ADM_NAME_MAX + 1];
  char target[256];
  ec_client_t *ec;
  bool up;            /* ready: last check succeeded and at most one failure since */
  bool ever_up;
  int fails;          /* consecutive failed checks */
  int inflight;       /* streams open now */
  bool checking;
  uint32_t context_length;
  uint64_t checks_ok, checks_failed;
  bool registered;    /* came from the Redis registry (needs heartbeats) */
  bool stale;         /* registered and its heartbeat is too old: not routable */
} pool_engine_t;

typedef struct pool pool_t;
pool_t *pool_create(router_t *rt, struct event_base *base, mbox_t *mb, int health_ms, gt_err_t *err);
int pool_add(pool_t *p, const char *model, const char *target, gt_err_t *err);
void pool_destroy(pool_t *p);
/* A ready engine of model, skipping `avoid`; NULL if none. affinity 0: the fewest in-flight
 * streams. Otherwise (a hash of the prompt's start) the rendezvous-hash choice among the engines
 * within 2 streams of the least loaded, so requests sharing a prefix reuse one engine's cache. */
pool_engine_t *pool_pick(pool_t *p, const char *model, const pool_engine_t *avoid, uint64_t affinity);
/* Affinity key of a request: hash of the first bytes (or token ids) of its input; never 0. */
uint64_t pool_affinity(const Gantry__V1__GenerateRequest *g);
bool pool_has_model(const pool_t *p, const char *model);
bool pool_model_ready(const pool_t *p, const char *model);
/* Every model has a ready engine. */
bool pool_all_ready(const pool_t *p, char *why, size_t n);
int pool_count(const pool_t *p);
pool_engine_t *pool_find(pool_t *p, const char *model, const char *target);
pool_engine_t *pool_at(pool_t *p, int i);
/* Largest known context length of model's engines (0 if unknown). */
uint32_t pool_context(const pool_t *p, const char *model);

/* ---- requests ---- */
typedef struct rq rq_t;
typedef enum { RQ_EV_MSG, RQ_EV_ERROR } rq_ev_kind_t;
typedef struct rq_event {
  rq_ev_kind_t kind;
  Gantry__V1__GenerateResponse *msg; /* MSG: borrowed during the callback... */
  bool *taken;                       /* ...unless the sink sets *taken = true (then it owns msg) */
  bool final;                        /* MSG: this is the Final (terminal) */
  oa_error_t err;                    /* ERROR (terminal) */
  int retry_after_s;                 /* ERROR 429 */
  bool started;                      /* a delta was already delivered */
} rq_event_t;
/* Terminal events (Final / ERROR) come exactly once unless rq_cancel came first. */
typedef void (*rq_cb)(void *sink, const rq_event_t *ev);

/* Starts a request: takes ownership of gen. Returns the request, or NULL with *e filled
 * (unknown model 404, bad names 400); then gen was freed. */
rq_t *rq_start(router_t *rt, const char *model, const char *tenant, const char *request_id,
               Gantry__V1__GenerateRequest *gen, rq_cb cb, void *sink, oa_error_t *e);
/* Client gone: stops everything (admission wait, engine stream), releases the lease; no more
 * callbacks. */
void rq_cancel(rq_t *q);
/* Shutdown: cancels every live request (their streams end later through the mailbox). */
void rq_cancel_all(router_t *rt);

/* ---- auth ---- */
typedef struct auth auth_t;
typedef enum { AUTH_OK = 0, AUTH_DENIED, AUTH_UNAVAILABLE } auth_status_t;
typedef void (*auth_cb)(void *arg, auth_status_t st, const char *tenant);
auth_t *auth_create(rc_t *rc, const char *key_prefix, const char *admin_key, gt_err_t *err);
void auth_destroy(auth_t *a);
/* Shutdown: the Redis connection is going away; later checks answer AUTH_UNAVAILABLE. */
void auth_detach(auth_t *a);
/* Resolves an API key (NULL/"" = none) to a tenant; cb fires later on the loop. */
void auth_check(auth_t *a, const char *key, bool admin, auth_cb cb, void *arg);
/* Extracts the key from "Bearer K" (or the raw value); NULL if none. */
const char *auth_bearer(const char *header);

/* ---- metrics ---- */
typedef struct metrics metrics_t;
metrics_t *metrics_create(void);
void metrics_destroy(metrics_t *m);
void metrics_request(metrics_t *m, const char *route, int status);
void metrics_reject(metrics_t *m, const char *reason);
/* Prometheus text (malloc'd) of counters + admission stats + engines + queue rows. */
char *metrics_render(metrics_t *m, const adm_stats_t *as, pool_t *p, const adm_queue_row_t *rows, int nrows);

/* ---- engine registry in Redis (router/registry.c) ---- */
typedef struct registry registry_t;
registry_t *registry_start(router_t *rt, int period_ms, int stale_ms, gt_err_t *err);
void registry_stop(registry_t *g);  /* stops polling */
void registry_free(registry_t *g);  /* after rc_destroy */
/* `gantry-router register ...`: heartbeat sidecar (blocking; main only). Returns an exit code. */
int registry_sidecar(int argc, char **argv);

/* ---- the router ---- */
struct router {
  rt_config_t cfg;
  struct event_base *base;
  mbox_t *mb;
  adm_t *adm;
  rc_t *rc;       /* router's own Redis connection (auth) */
  auth_t *auth;
  pool_t *pool;
  metrics_t *metrics;
  struct http_front *http;
  struct grpc_front *grpc;
  registry_t *registry;
  uint64_t next_id;
  rq_t *rqs;      /* live requests */
  int n_rqs;
  int http_port, grpc_port;
};

/* New request id ("<16 hex>"), unique within this process. */
void rt_request_id(router_t *rt, char out[40]);

struct http_front *http_front_start(router_t *rt, gt_err_t *err);
void http_front_stop(struct http_front *h);
struct grpc_front *grpc_front_start(router_t *rt, gt_err_t *err);
void grpc_front_stop(struct grpc_front *g);

#endif
