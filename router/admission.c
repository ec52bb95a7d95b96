/* router/admission.c — the admission client object: configuration, the two Redis connections,
 * the loaded scripts, and the helpers every admission file uses to call them. Requests:
 * admission_request.c; wake-ups: admission_tickets.c; heartbeat/reaper/reconnect:
 * admission_recovery.c; operator API: admission_ops.c. See admission.h and ADMISSION.md. */
#include "router/admission_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "common/clock.h"
#include "common/log.h"
#include "router/redis_conn.h"

/* Embedded from the Lua files in router/admission_lua/ at build time (cmake/52-admission.cmake). */
extern const char adm_lua_common[], adm_lua_enqueue[], adm_lua_release[], adm_lua_heartbeat[],
    adm_lua_reap[], adm_lua_limits_set[], adm_lua_limits_get[], adm_lua_queues[];

/* ---------------- helpers shared by the admission files ---------------- */

bool adm__valid_name(const char *s, bool allow_empty, bool allow_any_printable) {
  if (!s) return allow_empty;
  size_t n = strlen(s);
  if (n > ADM_NAME_MAX || (n == 0 && !allow_empty)) return false;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    if (allow_any_printable) {
      if (c < 0x20 || c > 0x7e) return false;
    } else if (c <= 0x20 || c > 0x7e || c == ':' || c == '*') {
      return false;
    }
  }
  return true;
}

adm__op_t *adm__op_new(adm_t *adm, uint64_t ticket, void *ucb, void *uarg) {
  adm__op_t *o = calloc(1, sizeof *o);
  if (o) {
    o->adm = adm;
    o->ticket = ticket;
    o->ucb = ucb;
    o->uarg = uarg;
  }
  return o;
}

/* Runs script s with the common arguments followed by extra[0..n). */
int adm__eval(adm_t *adm, int s, const char **extra, int n, rc_reply_cb cb, void *arg) {
  const char *stackv[ADM__NCOMMON + 16];
  const char **av = n + ADM__NCOMMON <= 16 + ADM__NCOMMON ? stackv : malloc((size_t)(n + ADM__NCOMMON) * sizeof *av);
  if (!av) return GT_ENOMEM;
  for (int i = 0; i < ADM__NCOMMON; i++) av[i] = adm->common[i];
  char nohold[24]; /* no evidence of an earlier life yet: the hold length, negated (common.lua) */
  snprintf(nohold, sizeof nohold, "-%d", adm->hold_ms);
  if (!adm->evidence) av[2] = nohold;
  for (int i = 0; i < n; i++) av[ADM__NCOMMON + i] = extra[i];
  int rv = rc_eval(adm->rc, adm->scr[s], 0, ADM__NCOMMON + n, av, NULL, cb, arg);
  if (av != stackv) free(av);
  return rv;
}

long long adm__reply_int(const redisReply *r) {
  if (!r) return 0;
  if (r->type == REDIS_REPLY_INTEGER) return r->integer;
  if (r->type == REDIS_REPLY_STRING) return strtoll(r->str, NULL, 10);
  return 0;
}

/* ---------------- public API: lifetime ---------------- */

adm_t *adm_create(struct event_base *base, const adm_config_t *cfg, gt_err_t *err) {
  if (!base || !cfg) {
    gt_err_set(err, GT_EINVAL, "admission: event base and config are required");
    return NULL;
  }
  const char *rid = cfg->router_id ? cfg->router_id : "router";
  const char *prefix = cfg->key_prefix ? cfg->key_prefix : "gantry:adm:";
  if (!adm__valid_name(rid, false, false) || strlen(rid) > ADM_NAME_MAX - 20) {
    gt_err_set(err, GT_EINVAL, "admission: router_id '%s' must be 1..108 printable bytes without ':' '*' or spaces", rid);
    return NULL;
  }
  if (!adm__valid_name(prefix, false, true) || strchr(prefix, ' ')) {
    gt_err_set(err, GT_EINVAL, "admission: bad key_prefix");
    return NULL;
  }
  int ttl = cfg->lease_ttl_ms ? cfg->lease_ttl_ms : 15000;
  int timeout = cfg->queue_timeout_ms ? cfg->queue_timeout_ms : 30000;
  int hold = cfg->hold_ms ? cfg->hold_ms : ttl;
  int dinf = cfg->default_max_inflight ? cfg->default_max_inflight : 64;
  int dq = cfg->default_max_queued ? cfg->default_max_queued : 1024;
  if (ttl < 300 || timeout < 1 || hold < 0 || dinf < 0 || dq < 0) {
    gt_err_set(err, GT_EINVAL,
               "admission: lease_ttl_ms=%d (>= 300) queue_timeout_ms=%d hold_ms=%d default_max_inflight=%d "
               "default_max_queued=%d must be positive", ttl, timeout, hold, dinf, dq);
    return NULL;
  }
  adm_t *adm = calloc(1, sizeof *adm);
  if (!adm) goto oom;
  adm->base = base;
  adm->host = strdup(cfg->redis_host ? cfg->redis_host : "127.0.0.1");
  adm->prefix = strdup(prefix);
  adm->port = cfg->redis_port ? cfg->redis_port : 6379;
  adm->ttl_ms = ttl;
  adm->timeout_ms = timeout;
  adm->hold_ms = hold;
  uint32_t rnd;
  if (getrandom(&rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd)
    rnd = (uint32_t)getpid() ^ (uint32_t)gt_now_ns();
  snprintf(adm->inst, sizeof adm->inst, "%s:%08x", rid, rnd);
  snprintf(adm->tk_key, sizeof adm->tk_key, "%stk:%s", prefix, adm->inst);
  snprintf(adm->common[0], sizeof adm->common[0], "%s", prefix);
  snprintf(adm->common[1], sizeof adm->common[1], "%d", ttl);
  snprintf(adm->common[2], sizeof adm->common[2], "%d", hold);
  snprintf(adm->common[3], sizeof adm->common[3], "%d", dinf);
  snprintf(adm->common[4], sizeof adm->common[4], "%d", dq);
  snprintf(adm->common[5], sizeof adm->common[5], "%d", ADM__MAX_ADMIT);
  adm->nbuckets = 64;
  adm->buckets = calloc(adm->nbuckets, sizeof *adm->buckets);
  adm->tick_ev = event_new(base, -1, EV_PERSIST, adm__on_tick, adm);
  adm->kick_ev = evtimer_new(base, adm__on_kick, adm);
  adm->blpop_retry_ev = evtimer_new(base, adm__on_blpop_retry, adm);
  if (!adm->host || !adm->prefix || !adm->buckets || !adm->tick_ev || !adm->kick_ev || !adm->blpop_retry_ev)
    goto oom;

  /* Reconnect backoff stays well under the hold so every live router re-registers in time. */
  int bmax = ttl / 4 < 1000 ? ttl / 4 : 1000;
  char name[ADM_NAME_MAX + 40];
  snprintf(name, sizeof name, "adm-cmd %s", adm->inst);
  rc_config_t rcfg = {.host = adm->host, .port = adm->port, .name = name, .backoff_min_ms = 10,
                      .backoff_max_ms = bmax, .connect_timeout_ms = bmax,
                      .sentinels = cfg->redis_sentinels, .master_name = cfg->redis_master_name};
  adm->rc = rc_create(base, &rcfg, adm__on_rc_state, adm, err);
  if (!adm->rc) goto fail;
  const char *steps[ADM__SCR_N] = {adm_lua_enqueue, adm_lua_release, adm_lua_heartbeat, adm_lua_reap,
                              adm_lua_limits_set, adm_lua_limits_get, adm_lua_queues};
  size_t lc = strlen(adm_lua_common);
  for (int i = 0; i < ADM__SCR_N; i++) {
    size_t ls = strlen(steps[i]);
    char *src = malloc(lc + ls + 2);
    if (!src) goto oom;
    memcpy(src, adm_lua_common, lc);
    src[lc] = '\n';
    memcpy(src + lc + 1, steps[i], ls + 1);
    adm->scr[i] = rc_script_add(adm->rc, src, err);
    free(src);
    if (adm->scr[i] < 0) goto fail;
  }
  snprintf(name, sizeof name, "adm-tickets %s", adm->inst);
  rcfg.name = name;
  adm->rcb = rc_create(base, &rcfg, adm__on_rcb_state, adm, err);
  if (!adm->rcb) goto fail;
  /* heartbeat + reap every TTL/4: deadlines are 3/4 TTL after a renewal (common.lua DEADLINE) */
  struct timeval tv = {(ttl / 4) / 1000, ((ttl / 4) % 1000) * 1000};
  event_add(adm->tick_ev, &tv);
  GT_LOG_INFO("admission created router=%s redis=%s:%d lease_ttl_ms=%d queue_timeout_ms=%d", adm->inst,
              adm->host, adm->port, ttl, timeout);
  return adm;
oom:
  gt_err_set(err, GT_ENOMEM, "admission: out of memory");
fail:
  adm_destroy(adm);
  return NULL;
}

void adm_destroy(adm_t *adm) {
  if (!adm) return;
  adm->destroying = true;
  rc_destroy(adm->rc);
  rc_destroy(adm->rcb);
  for (size_t i = 0; adm->buckets && i < adm->nbuckets; i++) {
    for (adm__ent_t *e = adm->buckets[i], *nx; e; e = nx) {
      nx = e->next;
      adm__ent_free(e);
    }
  }
  free(adm->buckets);
  if (adm->tick_ev) event_free(adm->tick_ev);
  if (adm->kick_ev) event_free(adm->kick_ev);
  if (adm->blpop_retry_ev) event_free(adm->blpop_retry_ev);
  free(adm->host);
  free(adm->prefix);
  adm__free_peers(adm);
  free(adm);
}

const char *adm_instance_id(const adm_t *adm) { return adm ? adm->inst : ""; }
