/* router/admission_tickets.c — wake-ups: the blocking BLPOP on this instance's ticket list
 * (the second Redis connection) and the admissions it delivers. */
#include "router/admission_internal.h"

#include <stdio.h>

#include <event2/event.h>

#include "common/log.h"
#include "router/redis_conn.h"

enum { LPOP_BATCH = 256 };    /* tickets popped after each BLPOP wake-up */

static void handle_ticket(adm_t *adm, const char *id) {
  adm__ent_t *e = adm__find(adm, adm__parse_id(adm, id));
  if (e && (e->state == ADM__S_PENDING || e->state == ADM__S_ENQUEUING || e->state == ADM__S_WAITING))
    adm__on_admitted(e);
  else
    adm->st.stale_tickets++; /* admitted right after a cancel: the cancel's release freed it */
}

static void blpop_send(adm_t *adm);

static void on_lpop_reply(void *arg, redisReply *r, const char *err) {
  adm_t *adm = arg;
  if (adm->destroying || !r || r->type != REDIS_REPLY_ARRAY) return;
  for (size_t i = 0; i < r->elements; i++)
    if (r->element[i]->type == REDIS_REPLY_STRING) handle_ticket(adm, r->element[i]->str);
}

static void on_blpop_reply(void *arg, redisReply *r, const char *err) {
  adm_t *adm = arg;
  if (adm->destroying || !r) return; /* dropped: re-issued when the connection is back */
  if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 && r->element[1]->type == REDIS_REPLY_STRING) {
    /* Drain what else is queued, then block again (both pipelined on the blocking connection). */
    char n[16];
    snprintf(n, sizeof n, "%d", LPOP_BATCH);
    const char *av[3] = {"LPOP", adm->tk_key, n};
    rc_command(adm->rcb, 3, av, NULL, on_lpop_reply, adm);
    blpop_send(adm);
    handle_ticket(adm, r->element[1]->str);
    return;
  }
  if (r->type == REDIS_REPLY_ERROR) { /* e.g. LOADING after a restart: retry shortly */
    GT_LOG_WARN("admission ticket wait failed err=%s", r->str);
    struct timeval tv = {0, 100000};
    evtimer_add(adm->blpop_retry_ev, &tv);
    return;
  }
  blpop_send(adm); /* timeout (nil) */
}

static void blpop_send(adm_t *adm) {
  const char *av[3] = {"BLPOP", adm->tk_key, "0"};
  rc_command(adm->rcb, 3, av, NULL, on_blpop_reply, adm); /* GT_EIO: re-sent on reconnect */
}

void adm__on_blpop_retry(evutil_socket_t fd, short what, void *arg) {
  (void)fd, (void)what;
  blpop_send(arg);
}

void adm__on_rcb_state(void *arg, bool up) {
  adm_t *adm = arg;
  evtimer_del(adm->blpop_retry_ev); /* keep exactly one BLPOP outstanding */
  if (up) blpop_send(adm);
}
