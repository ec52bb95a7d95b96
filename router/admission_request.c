/* router/admission_request.c — one request's life: enqueue, admission, timeout, cancel,
 * release, touch, and the counters (public request API of admission.h). */
#include "router/admission_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "common/clock.h"
#include "common/log.h"
#include "router/redis_conn.h"

const double adm_wait_bucket_ms[ADM_WAIT_BUCKETS] = {1, 5, 10, 50, 100, 500, 1000, 5000, 30000, 1e300};

/* ---------------- request state transitions ---------------- */

static void record_wait(adm_t *adm, double ms) {
  adm->st.wait_count++;
  adm->st.wait_ms_sum += ms;
  if (ms > adm->st.wait_ms_max) adm->st.wait_ms_max = ms;
  for (int i = 0; i < ADM_WAIT_BUCKETS; i++) {
    if (ms <= adm_wait_bucket_ms[i]) {
      adm->st.wait_hist[i]++;
      break;
    }
  }
}

void adm__on_admitted(adm__ent_t *e) {
  adm_t *adm = e->adm;
  e->state = ADM__S_ADMITTED;
  evtimer_del(e->timer);
  int64_t now = gt_now_ns();
  e->last_renew_ns = now;
  double wait = (double)(now - e->t0_ns) / 1e6;
  adm->st.admitted++;
  record_wait(adm, wait);
  GT_LOG_DEBUG("admission admitted request_id=%s lease=%s model=%s tenant=%s wait_ms=%.1f", e->rid,
               e->id, e->model, e->tenant, wait);
  adm_result_t res = {.status = ADM_ADMITTED, .ticket = e->ticket, .lease_id = e->id, .msg = "admitted",
                      .wait_ms = wait};
  e->cb(e->arg, &res); /* may release (e -> DROP) but e stays allocated until that completes */
}

/* Reports a final non-admitted result: e leaves the table before the callback. */
static void finish_local(adm__ent_t *e, adm_status_t status, int retry, const char *msg) {
  adm_t *adm = e->adm;
  adm__unlink_ent(adm, e);
  adm_result_t res = {.status = status, .ticket = e->ticket, .retry_after_s = retry, .msg = msg,
                      .wait_ms = (double)(gt_now_ns() - e->t0_ns) / 1e6};
  adm_cb cb = e->cb;
  void *arg = e->arg;
  adm__ent_free(e);
  cb(arg, &res);
}

static void on_drop_reply(void *arg, redisReply *r, const char *err) {
  adm__op_t *o = arg;
  adm_t *adm = o->adm;
  if (adm->destroying) {
    free(o);
    return;
  }
  adm__ent_t *e = adm__find(adm, o->ticket);
  free(o);
  if (!e) return;
  e->drop_sent = false;
  if (!r) return; /* connection lost: sent again on reconnect */
  if (r->type == REDIS_REPLY_ERROR)
    GT_LOG_ERROR("admission release failed lease=%s err=%s", e->id, r->str);
  adm__unlink_ent(adm, e);
  adm__ent_free(e);
}

/* Moves e to DROP and removes its Redis entry (waiting or leased); the local entry is freed when
 * Redis confirms. While Redis is down this happens on reconnect. */
void adm__drop(adm__ent_t *e) {
  adm_t *adm = e->adm;
  e->state = ADM__S_DROP;
  evtimer_del(e->timer);
  if (e->drop_sent || !rc_connected(adm->rc)) return;
  adm__op_t *o = adm__op_new(adm, e->ticket, NULL, NULL);
  if (!o) return;
  const char *av[1] = {e->id};
  if (adm__eval(adm, ADM__SCR_RELEASE, av, 1, on_drop_reply, o) == GT_OK)
    e->drop_sent = true;
  else
    free(o);
}

static void on_enqueue_reply(void *arg, redisReply *r, const char *err) {
  adm__op_t *o = arg;
  adm_t *adm = o->adm;
  if (adm->destroying) {
    free(o);
    return;
  }
  adm__ent_t *e = adm__find(adm, o->ticket);
  free(o);
  if (!e) return;
  bool live = e->state == ADM__S_ENQUEUING || e->state == ADM__S_WAITING;
  if (!r) { /* outcome unknown: the heartbeat on reconnect re-creates it if Redis lacks it */
    if (e->state == ADM__S_ENQUEUING) e->state = ADM__S_WAITING;
    return;
  }
  if (r->type == REDIS_REPLY_ERROR || r->type != REDIS_REPLY_ARRAY || r->elements < 2 ||
      r->element[0]->type != REDIS_REPLY_STRING) {
    char msg[256];
    snprintf(msg, sizeof msg, "admission enqueue failed: %s",
             r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
    GT_LOG_ERROR("%s request_id=%s", msg, e->rid);
    if (!live) return;
    adm->st.errors++;
    adm__drop(e); /* removes whatever was stored */
    adm_result_t res = {.status = ADM_ERROR, .ticket = e->ticket, .msg = msg,
                        .wait_ms = (double)(gt_now_ns() - e->t0_ns) / 1e6};
    e->cb(e->arg, &res);
    return;
  }
  const char *st = r->element[0]->str;
  long long n = adm__reply_int(r->element[1]);
  if (!live) return; /* cancelled or admitted through a ticket already */
  if (st[0] == 'L') {
    adm__on_admitted(e);
  } else if (st[0] == 'F') {
    adm->st.rejected_full++;
    GT_LOG_INFO("admission rejected reason=queue_full request_id=%s model=%s tenant=%s retry_after_s=%lld",
                e->rid, e->model, e->tenant, n);
    finish_local(e, ADM_REJECTED_FULL, (int)n, "queue full");
  } else {
    if (e->state == ADM__S_ENQUEUING) e->state = ADM__S_WAITING;
    if (r->elements >= 3 && r->element[2]->type == REDIS_REPLY_STRING)
      snprintf(e->order, sizeof e->order, "%s", r->element[2]->str);
    adm__schedule_kick(adm, n);
  }
}

void adm__send_enqueue(adm__ent_t *e) {
  adm_t *adm = e->adm;
  adm__op_t *o = adm__op_new(adm, e->ticket, NULL, NULL);
  if (!o) return;
  const char *av[6] = {e->id, e->model, e->tenant, e->prio ? "1" : "0", adm->inst, e->rid};
  if (adm__eval(adm, ADM__SCR_ENQUEUE, av, 6, on_enqueue_reply, o) == GT_OK) {
    e->state = ADM__S_ENQUEUING;
  } else {
    free(o);
    e->state = ADM__S_PENDING;
  }
}

static void on_timeout(evutil_socket_t fd, short what, void *arg) {
  adm__ent_t *e = arg;
  (void)fd, (void)what;
  adm_t *adm = e->adm;
  if (e->state != ADM__S_PENDING && e->state != ADM__S_ENQUEUING && e->state != ADM__S_WAITING) return;
  adm->st.timeouts++;
  GT_LOG_INFO("admission rejected reason=queue_timeout request_id=%s model=%s tenant=%s", e->rid,
              e->model, e->tenant);
  if (e->state == ADM__S_PENDING) {
    finish_local(e, ADM_TIMEOUT, 0, "queue timeout");
    return;
  }
  adm__drop(e);
  adm_result_t res = {.status = ADM_TIMEOUT, .ticket = e->ticket, .msg = "queue timeout",
                      .wait_ms = (double)(gt_now_ns() - e->t0_ns) / 1e6};
  e->cb(e->arg, &res);
}

/* ---------------- public API: requests ---------------- */

uint64_t adm_request(adm_t *adm, const char *model, const char *tenant, adm_prio_t prio,
                     const char *request_id, adm_cb cb, void *arg, gt_err_t *err) {
  if (!adm || !cb) {
    gt_err_set(err, GT_EINVAL, "admission: adm and callback are required");
    return 0;
  }
  if (!adm__valid_name(model, false, false) || !adm__valid_name(tenant, false, false)) {
    gt_err_set(err, GT_EINVAL, "admission: model '%s' / tenant '%s' must be 1..%d printable bytes without ':' '*' or spaces",
               model ? model : "(null)", tenant ? tenant : "(null)", ADM_NAME_MAX);
    return 0;
  }
  if (!adm__valid_name(request_id, true, true)) {
    gt_err_set(err, GT_EINVAL, "admission: request id must be at most %d printable bytes", ADM_NAME_MAX);
    return 0;
  }
  if (prio != ADM_PRIO_INTERACTIVE && prio != ADM_PRIO_BATCH) {
    gt_err_set(err, GT_EINVAL, "admission: priority %d is not interactive (0) or batch (1)", (int)prio);
    return 0;
  }
  adm__ent_t *e = calloc(1, sizeof *e);
  if (!e) goto oom;
  e->adm = adm;
  e->ticket = ++adm->next_ticket;
  e->prio = prio;
  e->cb = cb;
  e->arg = arg;
  e->t0_ns = gt_now_ns();
  char id[sizeof adm->inst + 24];
  snprintf(id, sizeof id, "%s:%" PRIu64, adm->inst, e->ticket);
  e->id = strdup(id);
  e->model = strdup(model);
  e->tenant = strdup(tenant);
  e->rid = strdup(request_id ? request_id : "");
  e->timer = evtimer_new(adm->base, on_timeout, e);
  if (!e->id || !e->model || !e->tenant || !e->rid || !e->timer || adm__insert(adm, e) != GT_OK) goto oom;
  struct timeval tv = {adm->timeout_ms / 1000, (adm->timeout_ms % 1000) * 1000};
  evtimer_add(e->timer, &tv);
  adm->st.requested++;
  e->state = ADM__S_PENDING;
  if (rc_connected(adm->rc)) adm__send_enqueue(e);
  return e->ticket;
oom:
  adm__ent_free(e);
  gt_err_set(err, GT_ENOMEM, "admission: out of memory");
  return 0;
}

/* Ends a live entry (not DROP) for its owner: counted as released (admitted) or cancelled;
 * a PENDING one (never sent to Redis) is freed now, any other is dropped from Redis. */
static void end_ent(adm__ent_t *e) {
  adm_t *adm = e->adm;
  if (e->state == ADM__S_ADMITTED) adm->st.released++;
  else adm->st.cancelled++;
  if (e->state == ADM__S_PENDING) {
    adm__unlink_ent(adm, e);
    adm__ent_free(e);
    return;
  }
  adm__drop(e);
}

int adm_cancel(adm_t *adm, uint64_t ticket) {
  if (!adm) return GT_EINVAL;
  adm__ent_t *e = adm__find(adm, ticket);
  if (!e || e->state == ADM__S_DROP) return GT_ENOTFOUND;
  end_ent(e);
  return GT_OK;
}

static void on_release_unknown_reply(void *arg, redisReply *r, const char *err) {
  (void)arg, (void)r, (void)err;
}

int adm_release(adm_t *adm, const char *lease_id) {
  if (!adm || !adm__valid_name(lease_id, false, true) || strchr(lease_id, ' ')) return GT_EINVAL;
  adm__ent_t *e = adm__find(adm, adm__parse_id(adm, lease_id));
  if (e) {
    if (e->state != ADM__S_DROP) end_ent(e);
    return GT_OK;
  }
  /* Not ours or released already: releasing again is harmless and frees a lease an operator or
   * an earlier process of this router left behind. */
  const char *av[1] = {lease_id};
  (void)adm__eval(adm, ADM__SCR_RELEASE, av, 1, on_release_unknown_reply, NULL); /* best effort */
  return GT_OK;
}

int adm_touch(adm_t *adm, const char *lease_id) {
  if (!adm || !lease_id) return GT_EINVAL;
  adm__ent_t *e = adm__find(adm, adm__parse_id(adm, lease_id));
  if (!e || e->state != ADM__S_ADMITTED) return GT_ENOTFOUND;
  int64_t now = gt_now_ns();
  if (now - e->last_renew_ns < (int64_t)adm->ttl_ms * 1000000 / 4) return GT_OK;
  if (!rc_connected(adm->rc)) return GT_OK;
  adm__heartbeat(adm, &e, 1);
  return GT_OK;
}

void adm_stats(const adm_t *adm, adm_stats_t *out) {
  *out = adm->st;
  out->waiting_now = out->held_now = out->releasing_now = 0;
  for (size_t i = 0; i < adm->nbuckets; i++) {
    for (adm__ent_t *e = adm->buckets[i]; e; e = e->next) {
      if (e->state == ADM__S_ADMITTED) out->held_now++;
      else if (e->state == ADM__S_DROP) out->releasing_now++;
      else out->waiting_now++;
    }
  }
  out->redis_up = rc_connected(adm->rc);
  out->routers_alive = (uint32_t)adm->n_peers;
}
