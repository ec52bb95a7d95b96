/* router/router.c — gantry-router lifecycle: builds the loop, Redis, admission, auth, the engine
 * pool, the registry and the fronts; runs the loop; tears everything down in a safe order. */
#include <event2/event.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/evbase.h"
#include "common/log.h"
#include "router/router.h"

void rt_request_id(router_t *rt, char out[40]) {
  static uint64_t salt;
  if (!salt) salt = ((uint64_t)getpid() << 32) ^ (uint64_t)time(NULL) ^ (uint64_t)(uintptr_t)rt;
  uint64_t x = salt + ++rt->next_id * 0x9e3779b97f4a7c15ULL;
  x ^= x >> 31;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 29;
  snprintf(out, 40, "%016llx", (unsigned long long)x);
}

#define DRAIN_TICK_MS 50

/* Every tick while draining: stop when no request is left; at the deadline, end the rest
 * with an error event and stop once their ends went out. */
static void drain_tick(evutil_socket_t fd, short what, void *arg) {
  (void)fd;
  (void)what;
  router_t *rt = arg;
  if (rt->n_rqs > 0 && gt_now_ms() >= rt->drain_deadline_ms) {
    GT_LOG_WARN("drain: %d request(s) still running after %d s: ending them", rt->n_rqs, rt->cfg.drain_timeout_s);
    rq_abort_all(rt, "the router is shutting down");
    rt->drain_deadline_ms = gt_now_ms() + 1e9;
  }
  if (rt->n_rqs == 0) {
    /* one more tick lets the last replies reach the sockets */
    struct timeval tv = {0, DRAIN_TICK_MS * 1000};
    event_base_loopexit(rt->base, &tv);
  }
}

static void on_signal(evutil_socket_t sig, short what, void *arg) {
  (void)what;
  router_t *rt = arg;
  if (rt->draining || rt->cfg.drain_timeout_s == 0) {
    GT_LOG_INFO("signal %d: shutting down now", (int)sig);
    event_base_loopbreak(rt->base);
    return;
  }
  GT_LOG_INFO("signal %d: draining (readiness 503; %d live request(s) get up to %d s)", (int)sig, rt->n_rqs,
              rt->cfg.drain_timeout_s);
  rt->draining = true;
  rt->drain_deadline_ms = gt_now_ms() + rt->cfg.drain_timeout_s * 1000.0;
  rt->drain_timer = event_new(rt->base, -1, EV_PERSIST, drain_tick, rt);
  struct timeval tv = {0, DRAIN_TICK_MS * 1000};
  if (!rt->drain_timer || event_add(rt->drain_timer, &tv)) event_base_loopbreak(rt->base);
}

static void on_rc_state(void *arg, bool up) {
  router_t *rt = arg;
  if (!up) {
    GT_LOG_WARN("redis connection lost (auth)");
    return;
  }
  if (rt->cfg.redis_sentinels[0])
    GT_LOG_INFO("redis connected via sentinels=%s master=%s", rt->cfg.redis_sentinels, rt->cfg.redis_master_name);
  else
    GT_LOG_INFO("redis connected host=%s port=%d", rt->cfg.redis_host, rt->cfg.redis_port);
}

/* Once a second: Redis data-loss watch. */
static void guard_timer(evutil_socket_t fd, short what, void *arg) {
  (void)fd;
  (void)what;
  router_t *rt = arg;
  dg_tick(rt->dg);
}

/* Redis lost its data: re-register this router's leases and waiting entries now, so the
 * admission hold that follows ends as soon as every live router is back (heartbeat.lua). */
static void on_data_loss(void *arg) {
  router_t *rt = arg;
  adm_reregister(rt->adm);
}

router_t *rt_create(const rt_config_t *cfg, gt_err_t *err) {
  router_t *rt = calloc(1, sizeof *rt);
  if (!rt) {
    gt_err_set(err, GT_ENOMEM, "out of memory");
    return NULL;
  }
  rt->cfg = *cfg;
  rt->base = gt_event_base_new();
  rt->metrics = metrics_create();
  if (!rt->base || !rt->metrics) {
    gt_err_set(err, GT_ENOMEM, "cannot create the event loop");
    goto fail;
  }
  if (!(rt->mb = mbox_create(rt->base, err))) goto fail;
  const char *sent = rt->cfg.redis_sentinels[0] ? rt->cfg.redis_sentinels : NULL;
  adm_config_t ac = {.redis_host = rt->cfg.redis_host, .redis_port = rt->cfg.redis_port,
                     .redis_sentinels = sent, .redis_master_name = rt->cfg.redis_master_name,
                     .router_id = "router",
                     .lease_ttl_ms = rt->cfg.lease_ttl_ms, .queue_timeout_ms = rt->cfg.queue_timeout_ms,
                     .hold_ms = rt->cfg.hold_ms,
                     .default_max_inflight = rt->cfg.default_max_inflight,
                     .default_max_queued = rt->cfg.default_max_queued};
  char prefix[96];
  snprintf(prefix, sizeof prefix, "%sadm:", rt->cfg.key_prefix);
  ac.key_prefix = prefix;
  if (!(rt->adm = adm_create(rt->base, &ac, err))) goto fail;
  rc_config_t rcc = {.host = rt->cfg.redis_host, .port = rt->cfg.redis_port, .name = "router-auth",
                     .sentinels = sent, .master_name = rt->cfg.redis_master_name};
  if (!(rt->rc = rc_create(rt->base, &rcc, on_rc_state, rt, err))) goto fail;
  if (!(rt->auth = auth_create(rt->rc, rt->cfg.key_prefix, rt->cfg.admin_key, rt->cfg.auth_required, err))) goto fail;
  if (!(rt->dg = dg_create(rt->rc, rt->cfg.key_prefix, err))) goto fail;
  dg_on_loss(rt->dg, on_data_loss, rt);
  if (gt_rpc_creds_load(&rt->engine_creds, rt->cfg.engine_token_file, getenv("GANTRY_ENGINE_TOKEN"), rt->cfg.engine_tls_ca,
                        rt->cfg.engine_tls_cert, rt->cfg.engine_tls_key, err))
    goto fail;
  if ((rt->cfg.engine_tls_cert[0] || rt->cfg.engine_tls_name[0]) && !rt->cfg.engine_tls_ca[0]) {
    gt_err_set(err, GT_EINVAL, "--engine-tls-cert / --engine-tls-name need --engine-tls-ca");
    goto fail;
  }
  if (!(rt->pool = pool_create(rt, rt->base, rt->mb, rt->cfg.health_ms, err))) goto fail;
  for (int i = 0; i < rt->cfg.n_engines; i++)
    if (pool_add(rt->pool, rt->cfg.engines[i].model, rt->cfg.engines[i].target, err)) goto fail;
  if (!(rt->registry = registry_start(rt, rt->cfg.health_ms, rt->cfg.engine_stale_ms, err))) goto fail;
  if (rt->cfg.http_addr[0] && !(rt->http = http_front_start(rt, err))) goto fail;
  if (rt->cfg.grpc_addr[0] && !(rt->grpc = rgf_start(rt, err))) goto fail;
  rt->sigint = evsignal_new(rt->base, SIGINT, on_signal, rt);
  rt->sigterm = evsignal_new(rt->base, SIGTERM, on_signal, rt);
  rt->key_timer = event_new(rt->base, -1, EV_PERSIST, guard_timer, rt);
  if (!rt->sigint || !rt->sigterm || !rt->key_timer) {
    gt_err_set(err, GT_ENOMEM, "out of memory");
    goto fail;
  }
  evsignal_add(rt->sigint, NULL);
  evsignal_add(rt->sigterm, NULL);
  struct timeval one = {1, 0};
  event_add(rt->key_timer, &one);
  return rt;
fail:
  rt_destroy(rt);
  return NULL;
}

void rt_run(router_t *rt) {
  GT_LOG_INFO("gantry-router listening http=%s http_port=%d grpc=%s grpc_port=%d redis=%s:%d sentinels=%s engines=%d",
              rt->cfg.http_addr, rt->http_port, rt->cfg.grpc_addr[0] ? rt->cfg.grpc_addr : "-", rt->grpc_port,
              rt->cfg.redis_host, rt->cfg.redis_port, rt->cfg.redis_sentinels[0] ? rt->cfg.redis_sentinels : "-",
              rt->cfg.n_engines);
  /* machine-readable line for tests and scripts (ports may be 0 = chosen by the OS) */
  printf("listening http_port=%d grpc_port=%d\n", rt->http_port, rt->grpc_port);
  fflush(stdout);
  if (!rt->cfg.auth_required) GT_LOG_WARN("--auth none: no API key is needed; requests without a known key run as tenant 'default'");
  if (!rt->cfg.admin_key[0])
    GT_LOG_WARN("no admin key (--admin-key / GANTRY_ADMIN_KEY): admin routes are %s",
                rt->cfg.auth_required ? "closed" : "open to anyone (--auth none)");
  event_base_dispatch(rt->base);
}

void rt_stop_fronts(router_t *rt) {
  /* Redis auth connection first: auth checks still pending are answered (503) while the fronts
   * that wait for them still exist; then the fronts. */
  registry_stop(rt->registry);
  auth_detach(rt->auth);
  dg_detach(rt->dg);
  if (rt->rc) rc_destroy(rt->rc);
  rt->rc = NULL;
  rgf_stop(rt->grpc);
  http_front_stop(rt->http);
}

void rt_destroy(router_t *rt) {
  if (!rt) return;
  if (rt->sigint) event_free(rt->sigint);
  if (rt->sigterm) event_free(rt->sigterm);
  if (rt->key_timer) event_free(rt->key_timer);
  if (rt->drain_timer) event_free(rt->drain_timer);
  rt_stop_fronts(rt);
  /* then live requests are cancelled */
  if (rt->base) {
    /* every live request: cancel its stream and wait (bounded) for the engines to confirm */
    rq_cancel_all(rt);
    for (int i = 0; i < 500 && rt->n_rqs > 0; i++) {
      struct timeval tick = {0, 10000};
      event_base_loopexit(rt->base, &tick);
      event_base_dispatch(rt->base);
    }
  }
  if (rt->adm) adm_destroy(rt->adm);
  /* after adm_destroy: requests the fronts' stop ended may still await it */
  rgf_free(rt->grpc);
  http_front_free(rt->http);
  registry_free(rt->registry);
  pool_destroy(rt->pool);
  auth_destroy(rt->auth);
  dg_destroy(rt->dg);
  gt_rpc_creds_free(&rt->engine_creds);
  mbox_destroy(rt->mb);
  metrics_destroy(rt->metrics);
  if (rt->base) event_base_free(rt->base);
  free(rt);
}
