/* router/admission_recovery.c — liveness and recovery: heartbeats (renew / re-create entries),
 * the reaper, the end of a hold after a fresh Redis, and re-registration on reconnect
 * (ADMISSION.md, "Leases, heartbeats and the reaper" and "Redis restarts"). */
#include "router/admission_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/event.h>

#include "common/clock.h"
#include "common/log.h"
#include "router/redis_conn.h"

enum { HB_CHUNK = 200 };      /* entries per heartbeat call */
enum { REAP_LIMIT = 256 };    /* entries reclaimed per pool and kind per reap call */

void adm__schedule_kick(adm_t *adm, long long hold_ms) {
  if (hold_ms <= 0 || evtimer_pending(adm->kick_ev, NULL)) return;
  GT_LOG_WARN("admission holding for %lld ms: Redis is new but shows an earlier life (it lost its data); "
              "routers re-register their leases before anything is admitted", hold_ms);
  hold_ms += 5;
  struct timeval tv = {(time_t)(hold_ms / 1000), (suseconds_t)((hold_ms % 1000) * 1000)};
  evtimer_add(adm->kick_ev, &tv);
}

/* Remembers the routers alive in Redis (the heartbeat reply's last element). */
static void save_peers(adm_t *adm, const redisReply *list) {
  char **v = calloc(list->elements ? list->elements : 1, sizeof *v);
  if (!v) return;
  size_t n = 0;
  for (size_t i = 0; i < list->elements; i++)
    if (list->element[i]->type == REDIS_REPLY_STRING && (v[n] = strdup(list->element[i]->str))) n++;
  adm__free_peers(adm);
  adm->peers = v;
  adm->n_peers = n;
  adm->peers_ns = gt_now_ns();
}

void adm__free_peers(adm_t *adm) {
  for (size_t i = 0; i < adm->n_peers; i++) free(adm->peers[i]);
  free(adm->peers);
  adm->peers = NULL;
  adm->n_peers = 0;
}

static void on_heartbeat_reply(void *arg, redisReply *r, const char *err) {
  adm_t *adm = arg;
  if (adm->destroying || !r) return;
  if (r->type != REDIS_REPLY_ARRAY || r->elements != 7 || r->element[4]->type != REDIS_REPLY_ARRAY ||
      r->element[5]->type != REDIS_REPLY_ARRAY) {
    GT_LOG_ERROR("admission heartbeat failed err=%s", r->type == REDIS_REPLY_ERROR ? r->str : "reply");
    return;
  }
  adm->evidence = true;
  save_peers(adm, r->element[5]);
  adm__schedule_kick(adm, adm__reply_int(r->element[6])); /* a hold shortened to its floor */
  long long rl = adm__reply_int(r->element[1]), rw = adm__reply_int(r->element[2]);
  adm->st.restored_leases += (uint64_t)rl;
  adm->st.restored_waiting += (uint64_t)rw;
  if (rl || rw)
    GT_LOG_WARN("admission restored entries redis had lost router=%s leases=%lld waiting=%lld",
                adm->inst, rl, rw);
  /* Admitted in Redis but still waiting here: the ticket is late or was lost. */
  redisReply *ids = r->element[4];
  for (size_t i = 0; i < ids->elements; i++) {
    if (ids->element[i]->type != REDIS_REPLY_STRING) continue;
    adm__ent_t *e = adm__find(adm, adm__parse_id(adm, ids->element[i]->str));
    if (e && (e->state == ADM__S_ENQUEUING || e->state == ADM__S_WAITING)) {
      adm->st.late_tickets++;
      adm__on_admitted(e);
    }
  }
}

/* Renews (or re-creates) the given entries in Redis, HB_CHUNK per call, each call with the
 * routers this one last saw alive (heartbeat.lua: they end a hold after a data loss once they
 * all re-registered; '?' when the list is unknown or older than two TTLs). */
void adm__heartbeat(adm_t *adm, adm__ent_t **v, size_t n) {
  int64_t now = gt_now_ns();
  const bool fresh = adm->peers_ns && now - adm->peers_ns < (int64_t)adm->ttl_ms * 2 * 1000000;
  const size_t np = fresh ? adm->n_peers : 1;
  const char **av = malloc((2 + np + 7 * HB_CHUNK) * sizeof *av);
  if (!av) return;
  char npbuf[24];
  snprintf(npbuf, sizeof npbuf, "%zu", np);
  for (size_t i = 0; i == 0 || i < n; i += HB_CHUNK) { /* one call even with no entries: liveness */
    int k = 0;
    av[k++] = adm->inst;
    av[k++] = npbuf;
    for (size_t j = 0; j < np; j++) av[k++] = fresh ? adm->peers[j] : "?";
    for (size_t j = i; j < n && j < i + HB_CHUNK; j++) {
      adm__ent_t *e = v[j];
      av[k++] = e->id;
      av[k++] = e->state == ADM__S_ADMITTED ? "L" : "W";
      av[k++] = e->model;
      av[k++] = e->tenant;
      av[k++] = e->prio ? "1" : "0";
      av[k++] = e->rid;
      av[k++] = e->order[0] ? e->order : "0";
      if (e->state == ADM__S_ADMITTED) e->last_renew_ns = now;
    }
    if (adm__eval(adm, ADM__SCR_HEARTBEAT, av, k, on_heartbeat_reply, adm) != GT_OK) break;
  }
  free(av);
}

static void on_reap_reply(void *arg, redisReply *r, const char *err) {
  adm_t *adm = arg;
  if (adm->destroying || !r) return;
  if (r->type != REDIS_REPLY_ARRAY || r->elements != 4) {
    GT_LOG_ERROR("admission reap failed err=%s", r->type == REDIS_REPLY_ERROR ? r->str : "reply");
    return;
  }
  long long nl = adm__reply_int(r->element[0]), nw = adm__reply_int(r->element[1]);
  adm->st.reaped_leases += (uint64_t)nl;
  adm->st.reaped_waiting += (uint64_t)nw;
  if (nl || nw)
    GT_LOG_WARN("admission reaped entries of dead routers leases=%lld waiting=%lld admitted=%lld", nl,
                nw, adm__reply_int(r->element[2]));
  adm__schedule_kick(adm, adm__reply_int(r->element[3]));
  if (adm__reply_int(r->element[2]) >= ADM__MAX_ADMIT) adm__reap(adm); /* more may fit: admit the next batch */
}

void adm__reap(adm_t *adm) {
  char lim[16];
  snprintf(lim, sizeof lim, "%d", REAP_LIMIT);
  const char *av[1] = {lim};
  adm__eval(adm, ADM__SCR_REAP, av, 1, on_reap_reply, adm);
}

void adm__on_tick(evutil_socket_t fd, short what, void *arg) {
  adm_t *adm = arg;
  (void)fd, (void)what;
  if (!rc_connected(adm->rc)) return;
  /* Not ADM__S_ENQUEUING: the enqueue may still reject it (queue full), and a heartbeat executed
   * after that rejection would re-create an entry nobody owns. */
  size_t n;
  adm__ent_t **v = adm__collect(adm, (1u << ADM__S_WAITING) | (1u << ADM__S_ADMITTED), &n);
  if (v) adm__heartbeat(adm, v, n);
  free(v);
  adm__reap(adm);
}

void adm_reregister(adm_t *adm) {
  if (!adm || !rc_connected(adm->rc)) return;
  size_t n;
  adm__ent_t **v = adm__collect(adm, (1u << ADM__S_WAITING) | (1u << ADM__S_ADMITTED), &n);
  if (v) adm__heartbeat(adm, v, n);
  free(v);
}

void adm__on_kick(evutil_socket_t fd, short what, void *arg) {
  (void)fd, (void)what;
  adm_t *adm = arg;
  if (rc_connected(adm->rc)) adm__reap(adm);
}

/* (Re)connected: re-register what this router holds (leases, waiting entries), finish pending
 * releases, then queue requests that arrived while Redis was away, in request order. */
void adm__on_rc_state(void *arg, bool up) {
  adm_t *adm = arg;
  adm->st.redis_up = up;
  if (!up) return;
  if (rc_connects(adm->rc) > 1) adm->st.redis_reconnects++;
  size_t n; /* (no ADM__S_ENQUEUING here: the dropped connection turned those into ADM__S_WAITING) */
  adm__ent_t **v = adm__collect(adm, (1u << ADM__S_WAITING) | (1u << ADM__S_ADMITTED), &n);
  if (v) adm__heartbeat(adm, v, n);
  free(v);
  v = adm__collect(adm, 1u << ADM__S_DROP, &n);
  for (size_t i = 0; v && i < n; i++) adm__drop(v[i]);
  free(v);
  v = adm__collect(adm, 1u << ADM__S_PENDING, &n);
  for (size_t i = 0; v && i < n; i++) adm__send_enqueue(v[i]);
  free(v);
  adm__reap(adm);
}
