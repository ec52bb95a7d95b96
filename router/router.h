/* router/router.h — the gantry-router process state (one libevent loop thread) and its
 * lifecycle. Each module has its own header:
 *   config.h  : settings        mailbox.h : gRPC threads -> loop hand-off
 *   pool.h    : engine pool     rq.h      : one generation request
 *   auth.h    : API keys        metrics.h : Prometheus text
 *   registry.h: Redis registry  http.h    : OpenAI HTTP front   grpc_front.h: gRPC front
 * Everything runs on the loop thread unless a comment says otherwise. */
#ifndef GANTRY_ROUTER_ROUTER_H
#define GANTRY_ROUTER_ROUTER_H

#include <stdint.h>

#include "common/err.h"
#include "router/admission.h"
#include "router/auth.h"
#include "router/config.h"
#include "router/dataguard.h"
#include "router/grpc_front.h"
#include "common/grpc_creds.h"
#include "router/http.h"
#include "router/mailbox.h"
#include "router/metrics.h"
#include "router/pool.h"
#include "router/redis_conn.h"
#include "router/registry.h"
#include "router/rq.h"

struct event_base;
typedef struct router router_t;

struct router {
  rt_config_t cfg;
  gt_rpc_creds_t engine_creds; /* token / TLS for the engine links (from cfg's files) */
  struct event_base *base;
  mbox_t *mb;
  adm_t *adm;
  rc_t *rc;       /* router's own Redis connection (auth) */
  auth_t *auth;
  dg_t *dg;       /* Redis data-loss watch (on rc) */
  pool_t *pool;
  metrics_t *metrics;
  struct http_front *http;
  rgf_t *grpc;
  registry_t *registry;
  uint64_t next_id;
  rq_t *rqs;      /* live requests */
  int n_rqs;
  int http_port, grpc_port;
  bool draining;  /* SIGTERM seen: /ready 503, new requests 503, live streams finish */
  double drain_deadline_ms;
  struct event *drain_timer;
  struct event *sigint, *sigterm, *key_timer;
};

/* New request id ("<16 hex>"), unique within this process. */
void rt_request_id(router_t *rt, char out[40]);

/* Builds every part from cfg (copied): Redis, admission, auth, pool, registry, fronts.
 * NULL with err filled on failure (everything built so far is torn down). */
router_t *rt_create(const rt_config_t *cfg, gt_err_t *err);
/* Runs the loop until SIGINT/SIGTERM and the drain that follows: /ready turns 503, new
 * requests get 503, live streams get --drain-timeout-s to finish, then the rest end with an
 * error event (and [DONE]). A second signal ends the drain at once. */
void rt_run(router_t *rt);
/* Loop thread: detaches Redis (pending key checks answered 503) and stops both fronts, every
 * call still in progress answered; the first step of rt_destroy, which may follow (a second call
 * does nothing more). */
void rt_stop_fronts(router_t *rt);
/* Stops the fronts, cancels live requests (bounded wait for the engines) and frees rt. */
void rt_destroy(router_t *rt);

#endif
