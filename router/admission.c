/* router/admission.c — see admission.h and ADMISSION.md. */
#include "router/admission.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>
#include <jansson.h>

#include "common/clock.h"
#include "common/log.h"
#include "router/redis_conn.h"

/* Embedded from the Lua files in router/admission_lua/ at build time (cmake/52-admission.cmake). */
extern const char adm_lua_common[], adm_lua_enqueue[], adm_lua_release[], adm_lua_heartbeat[],
    adm_lua_reap[], adm_lua_limits_set[], adm_lua_limits_get[], adm_lua_queues[];

const double adm_wait_bucket_ms[ADM_WAIT_BUCKETS] = {1, 5, 10, 50, 100, 500, 1000, 5000, 30000, 1e300};

enum { SCR_ENQUEUE, SCR_RELEASE, SCR_HEARTBEAT, SCR_REAP, SCR_LIMITS_SET, SCR_LIMITS_GET, SCR_QUEUES, SCR_N };
enum { NCOMMON = 6 };         /* common script arguments, ARGV[1..6] (see common.lua) */
enum { HB_CHUNK = 200 };      /* entries per heartbeat call */
enum { REAP_LIMIT = 256 };    /* entries reclaimed per pool and kind per reap call */
enum { LPOP_BATCH = 256 };    /* tickets popped after each BLPOP wake-up */
enum { MAX_ADMIT = 256 };     /* admissions per script call (bounds the time Redis is busy) */

/* Local request states. DROP: finished for the user; its Redis entry/lease is being removed. */
enum { S_PENDING, S_ENQUEUING, S_WAITING, S_ADMITTED, S_DROP };

typedef struct ent {
  struct ent *next; /* hash chain */
  adm_t *adm;
  uint64_t ticket;
  char *id; /* "<instance>:<ticket>": entry id in Redis and lease id */
  char *model, *tenant, *rid;
  int prio, state;
  bool drop_sent; /* release script in flight */
  adm_cb cb;
  void *arg;
  struct event *timer; /* queue timeout */
  int64_t t0_ns, last_renew_ns;
} ent_t;

struct adm {
  struct event_base *base;
  char *host, *prefix;
  char inst[ADM_NAME_MAX + 24];
  char tk_key[ADM_NAME_MAX + 160];
  int port, ttl_ms, timeout_ms, hold_ms;
  char common[NCOMMON][ADM_NAME_MAX + 32]; /* ARGV[1..6] */
  rc_t *rc;  /* commands and scripts */
  rc_t *rcb; /* BLPOP on this instance's ticket list */
  int scr[SCR_N];
  bool destroying;
  uint64_t next_ticket;
  ent_t **buckets;
  size_t nbuckets, nents;
  struct event *tick_ev;  /* heartbeat + reap, every ttl/3 */
  struct event *kick_ev;  /* reap when a hold ends */
  struct event *blpop_retry_ev;
  adm_stats_t st;
};

/* Reply context of calls about one request or one operator call. */
typedef struct op {
  adm_t *adm;
  uint64_t ticket;
  void *ucb, *uarg;
  char what[320]; /* for the log line of a limits change */
} op_t;

/* ---------------- helpers ---------------- */

static bool valid_name(const char *s, bool allow_empty, bool allow_any_printable) {
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

static size_t hash_ticket(uint64_t t, size_t nb) { return (size_t)((t * 0x9E3779B97F4A7C15ull) >> 20) & (nb - 1); }

static ent_t *find(const adm_t *adm, uint64_t t) {
  for (ent_t *e = adm->buckets[hash_ticket(t, adm->nbuckets)]; e; e = e->next)
    if (e->ticket == t) return e;
  return NULL;
}

static int insert(adm_t *adm, ent_t *e) {
  if (adm->nents + 1 > adm->nbuckets) {
    size_t nb = adm->nbuckets * 2;
    ent_t **b = calloc(nb, sizeof *b);
    if (!b) return GT_ENOMEM;
    for (size_t i = 0; i < adm->nbuckets; i++) {
      for (ent_t *x = adm->buckets[i], *nx; x; x = nx) {
        nx = x->next;
        size_t h = hash_ticket(x->ticket, nb);
        x->next = b[h];
        b[h] = x;
      }
    }
    free(adm->buckets);
    adm->buckets = b;
    adm->nbuckets = nb;
  }
  size_t h = hash_ticket(e->ticket, adm->nbuckets);
  e->next = adm->buckets[h];
  adm->buckets[h] = e;
  adm->nents++;
  return GT_OK;
}

static void unlink_ent(adm_t *adm, ent_t *e) {
  for (ent_t **p = &adm->buckets[hash_ticket(e->ticket, adm->nbuckets)]; *p; p = &(*p)->next) {
    if (*p == e) {
      *p = e->next;
      adm->nents--;
      return;
    }
  }
}

static void ent_free(ent_t *e) {
  if (!e) return;
  if (e->timer) event_free(e->timer);
  free(e->id);
  free(e->model);
  free(e->tenant);
  free(e->rid);
  free(e);
}

/* Ticket of a lease id of this instance, or 0. */
static uint64_t parse_id(const adm_t *adm, const char *id) {
  size_t n = strlen(adm->inst);
  if (strncmp(id, adm->inst, n) != 0 || id[n] != ':') return 0;
  char *end;
  unsigned long long t = strtoull(id + n + 1, &end, 10);
  if (*end || end == id + n + 1) return 0;
  return (uint64_t)t;
}

static op_t *op_new(adm_t *adm, uint64_t ticket, void *ucb, void *uarg) {
  op_t *o = calloc(1, sizeof *o);
  if (o) {
    o->adm = adm;
    o->ticket = ticket;
    o->ucb = ucb;
    o->uarg = uarg;
  }
  return o;
}

/* Runs script s with the common arguments followed by extra[0..n). */
static int eval(adm_t *adm, int s, const char **extra, int n, rc_reply_cb cb, void *arg) {
  const char *stackv[NCOMMON + 16];
  const char **av = n + NCOMMON <= 16 + NCOMMON ? stackv : malloc((size_t)(n + NCOMMON) * sizeof *av);
  if (!av) return GT_ENOMEM;
  for (int i = 0; i < NCOMMON; i++) av[i] = adm->common[i];
  for (int i = 0; i < n; i++) av[NCOMMON + i] = extra[i];
  int rv = rc_eval(adm->rc, adm->scr[s], 0, NCOMMON + n, av, NULL, cb, arg);
  if (av != stackv) free(av);
  return rv;
}

static long long reply_int(const redisReply *r) {
  if (!r) return 0;
  if (r->type == REDIS_REPLY_INTEGER) return r->integer;
  if (r->type == REDIS_REPLY_STRING) return strtoll(r->str, NULL, 10);
  return 0;
}

static void schedule_kick(adm_t *adm, long long hold_ms) {
  if (hold_ms <= 0 || evtimer_pending(adm->kick_ev, NULL)) return;
  hold_ms += 5;
  struct timeval tv = {(time_t)(hold_ms / 1000), (suseconds_t)((hold_ms % 1000) * 1000)};
  evtimer_add(adm->kick_ev, &tv);
}

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

static void on_admitted(ent_t *e) {
  adm_t *adm = e->adm;
  e->state = S_ADMITTED;
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
static void finish_local(ent_t *e, adm_status_t status, int retry, const char *msg) {
  adm_t *adm = e->adm;
  unlink_ent(adm, e);
  adm_result_t res = {.status = status, .ticket = e->ticket, .retry_after_s = retry, .msg = msg,
                      .wait_ms = (double)(gt_now_ns() - e->t0_ns) / 1e6};
  adm_cb cb = e->cb;
  void *arg = e->arg;
  ent_free(e);
  cb(arg, &res);
}

static void on_drop_reply(void *arg, redisReply *r, const char *err) {
  op_t *o = arg;
  adm_t *adm = o->adm;
  if (adm->destroying) {
    free(o);
    return;
  }
  ent_t *e = find(adm, o->ticket);
  free(o);
  if (!e) return;
  e->drop_sent = false;
  if (!r) return; /* connection lost: sent again on reconnect */
  if (r->type == REDIS_REPLY_ERROR)
    GT_LOG_ERROR("admission release failed lease=%s err=%s", e->id, r->str);
  unlink_ent(adm, e);
  ent_free(e);
}

/* Moves e to DROP and removes its Redis entry (waiting or leased); the local entry is freed when
 * Redis confirms. While Redis is down this happens on reconnect. */
static void drop(ent_t *e) {
  adm_t *adm = e->adm;
  e->state = S_DROP;
  evtimer_del(e->timer);
  if (e->drop_sent || !rc_connected(adm->rc)) return;
  op_t *o = op_new(adm, e->ticket, NULL, NULL);
  if (!o) return;
  const char *av[1] = {e->id};
  if (eval(adm, SCR_RELEASE, av, 1, on_drop_reply, o) == GT_OK)
    e->drop_sent = true;
  else
    free(o);
}

static void on_enqueue_reply(void *arg, redisReply *r, const char *err) {
  op_t *o = arg;
  adm_t *adm = o->adm;
  if (adm->destroying) {
    free(o);
    return;
  }
  ent_t *e = find(adm, o->ticket);
  free(o);
  if (!e) return;
  bool live = e->state == S_ENQUEUING || e->state == S_WAITING;
  if (!r) { /* outcome unknown: the heartbeat on reconnect re-creates it if Redis lacks it */
    if (e->state == S_ENQUEUING) e->state = S_WAITING;
    return;
  }
  if (r->type == REDIS_REPLY_ERROR || r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
      r->element[0]->type != REDIS_REPLY_STRING) {
    char msg[256];
    snprintf(msg, sizeof msg, "admission enqueue failed: %s",
             r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
    GT_LOG_ERROR("%s request_id=%s", msg, e->rid);
    if (!live) return;
    adm->st.errors++;
    drop(e); /* removes whatever was stored */
    adm_result_t res = {.status = ADM_ERROR, .ticket = e->ticket, .msg = msg,
                        .wait_ms = (double)(gt_now_ns() - e->t0_ns) / 1e6};
    e->cb(e->arg, &res);
    return;
  }
  const char *st = r->element[0]->str;
  long long n = reply_int(r->element[1]);
  if (!live) return; /* cancelled or admitted through a ticket already */
  if (st[0] == 'L') {
    on_admitted(e);
  } else if (st[0] == 'F') {
    adm->st.rejected_full++;
    GT_LOG_INFO("admission rejected reason=queue_full request_id=%s model=%s tenant=%s retry_after_s=%lld",
                e->rid, e->model, e->tenant, n);
    finish_local(e, ADM_REJECTED_FULL, (int)n, "queue full");
  } else {
    if (e->state == S_ENQUEUING) e->state = S_WAITING;
    schedule_kick(adm, n);
  }
}

static void send_enqueue(ent_t *e) {
  adm_t *adm = e->adm;
  op_t *o = op_new(adm, e->ticket, NULL, NULL);
  if (!o) return;
  const char *av[6] = {e->id, e->model, e->tenant, e->prio ? "1" : "0", adm->inst, e->rid};
  if (eval(adm, SCR_ENQUEUE, av, 6, on_enqueue_reply, o) == GT_OK) {
    e->state = S_ENQUEUING;
  } else {
    free(o);
    e->state = S_PENDING;
  }
}

static void on_timeout(evutil_socket_t fd, short what, void *arg) {
  ent_t *e = arg;
  (void)fd, (void)what;
  adm_t *adm = e->adm;
  if (e->state != S_PENDING && e->state != S_ENQUEUING && e->state != S_WAITING) return;
  adm->st.timeouts++;
  GT_LOG_INFO("admission rejected reason=queue_timeout request_id=%s model=%s tenant=%s", e->rid,
              e->model, e->tenant);
  if (e->state == S_PENDING) {
    finish_local(e, ADM_TIMEOUT, 0, "queue timeout");
    return;
  }
  drop(e);
  adm_result_t res = {.status = ADM_TIMEOUT, .ticket = e->ticket, .msg = "queue timeout",
                      .wait_ms = (double)(gt_now_ns() - e->t0_ns) / 1e6};
  e->cb(e->arg, &res);
}

/* ---------------- wake-ups: this instance's ticket list ---------------- */

static void handle_ticket(adm_t *adm, const char *id) {
  ent_t *e = find(adm, parse_id(adm, id));
  if (e && (e->state == S_PENDING || e->state == S_ENQUEUING || e->state == S_WAITING))
    on_admitted(e);
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

static void on_blpop_retry(evutil_socket_t fd, short what, void *arg) {
  (void)fd, (void)what;
  blpop_send(arg);
}

static void on_rcb_state(void *arg, bool up) {
  adm_t *adm = arg;
  evtimer_del(adm->blpop_retry_ev); /* keep exactly one BLPOP outstanding */
  if (up) blpop_send(adm);
}

/* ---------------- heartbeat, reaper, reconnect ---------------- */

static void on_heartbeat_reply(void *arg, redisReply *r, const char *err) {
  adm_t *adm = arg;
  if (adm->destroying || !r) return;
  if (r->type != REDIS_REPLY_ARRAY || r->elements != 5 || r->element[4]->type != REDIS_REPLY_ARRAY) {
    GT_LOG_ERROR("admission heartbeat failed err=%s", r->type == REDIS_REPLY_ERROR ? r->str : "reply");
    return;
  }
  long long rl = reply_int(r->element[1]), rw = reply_int(r->element[2]);
  adm->st.restored_leases += (uint64_t)rl;
  adm->st.restored_waiting += (uint64_t)rw;
  if (rl || rw)
    GT_LOG_WARN("admission restored entries redis had lost router=%s leases=%lld waiting=%lld",
                adm->inst, rl, rw);
  /* Admitted in Redis but still waiting here: the ticket is late or was lost. */
  redisReply *ids = r->element[4];
  for (size_t i = 0; i < ids->elements; i++) {
    if (ids->element[i]->type != REDIS_REPLY_STRING) continue;
    ent_t *e = find(adm, parse_id(adm, ids->element[i]->str));
    if (e && (e->state == S_ENQUEUING || e->state == S_WAITING)) {
      adm->st.late_tickets++;
      on_admitted(e);
    }
  }
}

static int cmp_ticket(const void *a, const void *b) {
  uint64_t x = (*(ent_t *const *)a)->ticket, y = (*(ent_t *const *)b)->ticket;
  return x < y ? -1 : x > y;
}

/* Entries in one of the given states, sorted by ticket (request order). Caller frees. */
static ent_t **collect(adm_t *adm, unsigned state_mask, size_t *n) {
  ent_t **v = malloc((adm->nents + 1) * sizeof *v);
  *n = 0;
  if (!v) return NULL;
  for (size_t i = 0; i < adm->nbuckets; i++)
    for (ent_t *e = adm->buckets[i]; e; e = e->next)
      if (state_mask & (1u << e->state)) v[(*n)++] = e;
  qsort(v, *n, sizeof *v, cmp_ticket);
  return v;
}

/* Renews (or re-creates) the given entries in Redis, HB_CHUNK per call. */
static void heartbeat(adm_t *adm, ent_t **v, size_t n) {
  const char **av = malloc((1 + 6 * HB_CHUNK) * sizeof *av);
  if (!av) return;
  int64_t now = gt_now_ns();
  for (size_t i = 0; i == 0 || i < n; i += HB_CHUNK) { /* one call even with no entries: liveness */
    int k = 0;
    av[k++] = adm->inst;
    for (size_t j = i; j < n && j < i + HB_CHUNK; j++) {
      ent_t *e = v[j];
      av[k++] = e->id;
      av[k++] = e->state == S_ADMITTED ? "L" : "W";
      av[k++] = e->model;
      av[k++] = e->tenant;
      av[k++] = e->prio ? "1" : "0";
      av[k++] = e->rid;
      if (e->state == S_ADMITTED) e->last_renew_ns = now;
    }
    if (eval(adm, SCR_HEARTBEAT, av, k, on_heartbeat_reply, adm) != GT_OK) break;
  }
  free(av);
}

static void reap(adm_t *adm);

static void on_reap_reply(void *arg, redisReply *r, const char *err) {
  adm_t *adm = arg;
  if (adm->destroying || !r) return;
  if (r->type != REDIS_REPLY_ARRAY || r->elements != 4) {
    GT_LOG_ERROR("admission reap failed err=%s", r->type == REDIS_REPLY_ERROR ? r->str : "reply");
    return;
  }
  long long nl = reply_int(r->element[0]), nw = reply_int(r->element[1]);
  adm->st.reaped_leases += (uint64_t)nl;
  adm->st.reaped_waiting += (uint64_t)nw;
  if (nl || nw)
    GT_LOG_WARN("admission reaped entries of dead routers leases=%lld waiting=%lld admitted=%lld", nl,
                nw, reply_int(r->element[2]));
  schedule_kick(adm, reply_int(r->element[3]));
  if (reply_int(r->element[2]) >= MAX_ADMIT) reap(adm); /* more may fit: admit the next batch */
}

static void reap(adm_t *adm) {
  char lim[16];
  snprintf(lim, sizeof lim, "%d", REAP_LIMIT);
  const char *av[1] = {lim};
  eval(adm, SCR_REAP, av, 1, on_reap_reply, adm);
}

static void on_tick(evutil_socket_t fd, short what, void *arg) {
  adm_t *adm = arg;
  (void)fd, (void)what;
  if (!rc_connected(adm->rc)) return;
  /* Not S_ENQUEUING: the enqueue may still reject it (queue full), and a heartbeat executed
   * after that rejection would re-create an entry nobody owns. */
  size_t n;
  ent_t **v = collect(adm, (1u << S_WAITING) | (1u << S_ADMITTED), &n);
  if (v) heartbeat(adm, v, n);
  free(v);
  reap(adm);
}

static void on_kick(evutil_socket_t fd, short what, void *arg) {
  (void)fd, (void)what;
  adm_t *adm = arg;
  if (rc_connected(adm->rc)) reap(adm);
}

/* (Re)connected: re-register what this router holds (leases, waiting entries), finish pending
 * releases, then queue requests that arrived while Redis was away, in request order. */
static void on_rc_state(void *arg, bool up) {
  adm_t *adm = arg;
  adm->st.redis_up = up;
  if (!up) return;
  if (rc_connects(adm->rc) > 1) adm->st.redis_reconnects++;
  size_t n; /* (no S_ENQUEUING here: the dropped connection turned those into S_WAITING) */
  ent_t **v = collect(adm, (1u << S_WAITING) | (1u << S_ADMITTED), &n);
  if (v) heartbeat(adm, v, n);
  free(v);
  v = collect(adm, 1u << S_DROP, &n);
  for (size_t i = 0; v && i < n; i++) drop(v[i]);
  free(v);
  v = collect(adm, 1u << S_PENDING, &n);
  for (size_t i = 0; v && i < n; i++) send_enqueue(v[i]);
  free(v);
  reap(adm);
}

/* ---------------- public API ---------------- */

adm_t *adm_create(struct event_base *base, const adm_config_t *cfg, gt_err_t *err) {
  if (!base || !cfg) {
    gt_err_set(err, GT_EINVAL, "admission: event base and config are required");
    return NULL;
  }
  const char *rid = cfg->router_id ? cfg->router_id : "router";
  const char *prefix = cfg->key_prefix ? cfg->key_prefix : "gantry:adm:";
  if (!valid_name(rid, false, false) || strlen(rid) > ADM_NAME_MAX - 20) {
    gt_err_set(err, GT_EINVAL, "admission: router_id '%s' must be 1..108 printable bytes without ':' '*' or spaces", rid);
    return NULL;
  }
  if (!valid_name(prefix, false, true) || strchr(prefix, ' ')) {
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
  snprintf(adm->common[5], sizeof adm->common[5], "%d", MAX_ADMIT);
  adm->nbuckets = 64;
  adm->buckets = calloc(adm->nbuckets, sizeof *adm->buckets);
  adm->tick_ev = event_new(base, -1, EV_PERSIST, on_tick, adm);
  adm->kick_ev = evtimer_new(base, on_kick, adm);
  adm->blpop_retry_ev = evtimer_new(base, on_blpop_retry, adm);
  if (!adm->host || !adm->prefix || !adm->buckets || !adm->tick_ev || !adm->kick_ev || !adm->blpop_retry_ev)
    goto oom;

  /* Reconnect backoff stays well under the hold so every live router re-registers in time. */
  int bmax = ttl / 4 < 1000 ? ttl / 4 : 1000;
  char name[ADM_NAME_MAX + 40];
  snprintf(name, sizeof name, "adm-cmd %s", adm->inst);
  rc_config_t rcfg = {.host = adm->host, .port = adm->port, .name = name, .backoff_min_ms = 10,
                      .backoff_max_ms = bmax, .connect_timeout_ms = bmax};
  adm->rc = rc_create(base, &rcfg, on_rc_state, adm, err);
  if (!adm->rc) goto fail;
  const char *steps[SCR_N] = {adm_lua_enqueue, adm_lua_release, adm_lua_heartbeat, adm_lua_reap,
                              adm_lua_limits_set, adm_lua_limits_get, adm_lua_queues};
  size_t lc = strlen(adm_lua_common);
  for (int i = 0; i < SCR_N; i++) {
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
  adm->rcb = rc_create(base, &rcfg, on_rcb_state, adm, err);
  if (!adm->rcb) goto fail;
  struct timeval tv = {(ttl / 3) / 1000, ((ttl / 3) % 1000) * 1000};
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
    for (ent_t *e = adm->buckets[i], *nx; e; e = nx) {
      nx = e->next;
      ent_free(e);
    }
  }
  free(adm->buckets);
  if (adm->tick_ev) event_free(adm->tick_ev);
  if (adm->kick_ev) event_free(adm->kick_ev);
  if (adm->blpop_retry_ev) event_free(adm->blpop_retry_ev);
  free(adm->host);
  free(adm->prefix);
  free(adm);
}

const char *adm_instance_id(const adm_t *adm) { return adm ? adm->inst : ""; }

uint64_t adm_request(adm_t *adm, const char *model, const char *tenant, adm_prio_t prio,
                     const char *request_id, adm_cb cb, void *arg, gt_err_t *err) {
  if (!adm || !cb) {
    gt_err_set(err, GT_EINVAL, "admission: adm and callback are required");
    return 0;
  }
  if (!valid_name(model, false, false) || !valid_name(tenant, false, false)) {
    gt_err_set(err, GT_EINVAL, "admission: model '%s' / tenant '%s' must be 1..%d printable bytes without ':' '*' or spaces",
               model ? model : "(null)", tenant ? tenant : "(null)", ADM_NAME_MAX);
    return 0;
  }
  if (!valid_name(request_id, true, true)) {
    gt_err_set(err, GT_EINVAL, "admission: request id must be at most %d printable bytes", ADM_NAME_MAX);
    return 0;
  }
  if (prio != ADM_PRIO_INTERACTIVE && prio != ADM_PRIO_BATCH) {
    gt_err_set(err, GT_EINVAL, "admission: priority %d is not interactive (0) or batch (1)", (int)prio);
    return 0;
  }
  ent_t *e = calloc(1, sizeof *e);
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
  if (!e->id || !e->model || !e->tenant || !e->rid || !e->timer || insert(adm, e) != GT_OK) goto oom;
  struct timeval tv = {adm->timeout_ms / 1000, (adm->timeout_ms % 1000) * 1000};
  evtimer_add(e->timer, &tv);
  adm->st.requested++;
  e->state = S_PENDING;
  if (rc_connected(adm->rc)) send_enqueue(e);
  return e->ticket;
oom:
  ent_free(e);
  gt_err_set(err, GT_ENOMEM, "admission: out of memory");
  return 0;
}

int adm_cancel(adm_t *adm, uint64_t ticket) {
  if (!adm) return GT_EINVAL;
  ent_t *e = find(adm, ticket);
  if (!e || e->state == S_DROP) return GT_ENOTFOUND;
  if (e->state == S_ADMITTED) {
    adm->st.released++;
  } else {
    adm->st.cancelled++;
  }
  if (e->state == S_PENDING) {
    unlink_ent(adm, e);
    ent_free(e);
    return GT_OK;
  }
  drop(e);
  return GT_OK;
}

static void on_release_unknown_reply(void *arg, redisReply *r, const char *err) {
  (void)arg, (void)r, (void)err;
}

int adm_release(adm_t *adm, const char *lease_id) {
  if (!adm || !valid_name(lease_id, false, true) || strchr(lease_id, ' ')) return GT_EINVAL;
  ent_t *e = find(adm, parse_id(adm, lease_id));
  if (e) {
    if (e->state == S_DROP) return GT_OK;
    if (e->state == S_ADMITTED) adm->st.released++;
    else adm->st.cancelled++;
    if (e->state == S_PENDING) {
      unlink_ent(adm, e);
      ent_free(e);
      return GT_OK;
    }
    drop(e);
    return GT_OK;
  }
  /* Not ours or released already: releasing again is harmless and frees a lease an operator or
   * an earlier process of this router left behind. */
  const char *av[1] = {lease_id};
  (void)eval(adm, SCR_RELEASE, av, 1, on_release_unknown_reply, NULL); /* best effort */
  return GT_OK;
}

int adm_touch(adm_t *adm, const char *lease_id) {
  if (!adm || !lease_id) return GT_EINVAL;
  ent_t *e = find(adm, parse_id(adm, lease_id));
  if (!e || e->state != S_ADMITTED) return GT_ENOTFOUND;
  int64_t now = gt_now_ns();
  if (now - e->last_renew_ns < (int64_t)adm->ttl_ms * 1000000 / 3) return GT_OK;
  if (!rc_connected(adm->rc)) return GT_OK;
  heartbeat(adm, &e, 1);
  return GT_OK;
}

void adm_stats(const adm_t *adm, adm_stats_t *out) {
  *out = adm->st;
  out->waiting_now = out->held_now = out->releasing_now = 0;
  for (size_t i = 0; i < adm->nbuckets; i++) {
    for (ent_t *e = adm->buckets[i]; e; e = e->next) {
      if (e->state == S_ADMITTED) out->held_now++;
      else if (e->state == S_DROP) out->releasing_now++;
      else out->waiting_now++;
    }
  }
  out->redis_up = rc_connected(adm->rc);
}

/* ---------------- operator API ---------------- */

static void on_limits_set_reply(void *arg, redisReply *r, const char *err) {
  op_t *o = arg;
  adm_done_cb cb = (adm_done_cb)o->ucb;
  if (o->adm->destroying) {
    free(o);
    return;
  }
  if (!r || r->type == REDIS_REPLY_ERROR) {
    GT_LOG_ERROR("admission limits change failed %s err=%s", o->what, r ? r->str : err);
    cb(o->uarg, GT_EIO, r ? r->str : err);
  } else {
    GT_LOG_INFO("admission limits changed %s admitted_now=%lld", o->what, reply_int(r));
    if (reply_int(r) >= MAX_ADMIT) reap(o->adm); /* more may fit: admit the next batch */
    cb(o->uarg, GT_OK, "ok");
  }
  free(o);
}

int adm_limits_set(adm_t *adm, const char *model, const char *tenant, const adm_limits_t *lim,
                   adm_done_cb cb, void *arg, gt_err_t *err) {
  if (!adm || !lim || !cb) return gt_err_set(err, GT_EINVAL, "admission: limits and callback are required");
  if (!tenant) tenant = "";
  if (!valid_name(model, false, false) ||
      (tenant[0] && strcmp(tenant, "*") != 0 && !valid_name(tenant, false, false)))
    return gt_err_set(err, GT_EINVAL, "admission: bad model '%s' or tenant '%s'", model ? model : "(null)", tenant);
  if (!lim->has_max_inflight && !lim->has_max_queued && !lim->has_weight)
    return gt_err_set(err, GT_EINVAL, "admission: limits update sets nothing");
  if ((lim->has_max_inflight && (lim->max_inflight < 0 || lim->max_inflight > 1000000000)) ||
      (lim->has_max_queued && (lim->max_queued < 0 || lim->max_queued > 1000000000)))
    return gt_err_set(err, GT_EINVAL, "admission: max_inflight / max_queued must be in 0..1e9");
  if (lim->has_weight && (!tenant[0] || !(lim->weight > 0 && lim->weight <= 1e6)))
    return gt_err_set(err, GT_EINVAL, "admission: weight must be in (0, 1e6] and set on a tenant");
  if (!rc_connected(adm->rc)) return gt_err_set(err, GT_EIO, "admission: redis is not connected");
  char vi[32], vq[32], vw[32];
  const char *av[8];
  int k = 0;
  av[k++] = model;
  av[k++] = tenant;
  op_t *o = op_new(adm, 0, (void *)cb, arg);
  if (!o) return gt_err_set(err, GT_ENOMEM, "admission: out of memory");
  int w = snprintf(o->what, sizeof o->what, "model=%s tenant=%s", model, tenant[0] ? tenant : "(pool)");
  if (lim->has_max_inflight) {
    snprintf(vi, sizeof vi, "%" PRId64, lim->max_inflight);
    av[k++] = "max_inflight";
    av[k++] = vi;
    w += snprintf(o->what + w, sizeof o->what - (size_t)w, " max_inflight=%s", vi);
  }
  if (lim->has_max_queued) {
    snprintf(vq, sizeof vq, "%" PRId64, lim->max_queued);
    av[k++] = "max_queued";
    av[k++] = vq;
    w += snprintf(o->what + w, sizeof o->what - (size_t)w, " max_queued=%s", vq);
  }
  if (lim->has_weight) {
    snprintf(vw, sizeof vw, "%.17g", lim->weight);
    av[k++] = "weight";
    av[k++] = vw;
    snprintf(o->what + w, sizeof o->what - (size_t)w, " weight=%s", vw);
  }
  if (eval(adm, SCR_LIMITS_SET, av, k, on_limits_set_reply, o) != GT_OK) {
    free(o);
    return gt_err_set(err, GT_EIO, "admission: redis is not connected");
  }
  return GT_OK;
}

int adm_limits_parse_json(const char *json, char *model, char *tenant, adm_limits_t *lim, gt_err_t *err) {
  if (!json || !model || !tenant || !lim) return gt_err_set(err, GT_EINVAL, "limits: NULL argument");
  memset(lim, 0, sizeof *lim);
  json_error_t je;
  json_t *j = json_loads(json, 0, &je);
  if (!j) return gt_err_set(err, GT_EINVAL, "limits: invalid JSON at line %d: %s", je.line, je.text);
  int rv = GT_OK;
  if (!json_is_object(j)) {
    rv = gt_err_set(err, GT_EINVAL, "limits: body must be a JSON object");
    goto out;
  }
  const char *key;
  json_t *v;
  model[0] = tenant[0] = 0;
  json_object_foreach(j, key, v) {
    if (strcmp(key, "model") == 0 || strcmp(key, "tenant") == 0) {
      const char *s = json_string_value(v);
      bool is_tenant = key[0] == 't';
      if (!s || !(valid_name(s, false, false) || (is_tenant && strcmp(s, "*") == 0))) {
        rv = gt_err_set(err, GT_EINVAL, "limits: \"%s\" must be a name of 1..%d printable bytes without ':' or spaces",
                        key, ADM_NAME_MAX);
        goto out;
      }
      strcpy(is_tenant ? tenant : model, s);
    } else if (strcmp(key, "max_inflight") == 0 || strcmp(key, "max_queued") == 0) {
      if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 1000000000) {
        rv = gt_err_set(err, GT_EINVAL, "limits: \"%s\" must be an integer in 0..1000000000", key);
        goto out;
      }
      if (key[4] == 'i') {
        lim->has_max_inflight = true;
        lim->max_inflight = json_integer_value(v);
      } else {
        lim->has_max_queued = true;
        lim->max_queued = json_integer_value(v);
      }
    } else if (strcmp(key, "weight") == 0) {
      if (!json_is_number(v) || !(json_number_value(v) > 0 && json_number_value(v) <= 1e6)) {
        rv = gt_err_set(err, GT_EINVAL, "limits: \"weight\" must be a number in (0, 1e6]");
        goto out;
      }
      lim->has_weight = true;
      lim->weight = json_number_value(v);
    } else {
      rv = gt_err_set(err, GT_EINVAL, "limits: unknown field \"%s\"", key);
      goto out;
    }
  }
  if (!model[0]) rv = gt_err_set(err, GT_EINVAL, "limits: \"model\" is required");
  else if (!lim->has_max_inflight && !lim->has_max_queued && !lim->has_weight)
    rv = gt_err_set(err, GT_EINVAL, "limits: set at least one of max_inflight, max_queued, weight");
  else if (lim->has_weight && !tenant[0])
    rv = gt_err_set(err, GT_EINVAL, "limits: \"weight\" needs a \"tenant\"");
out:
  json_decref(j);
  return rv;
}

static void on_limits_get_reply(void *arg, redisReply *r, const char *err) {
  op_t *o = arg;
  adm_limits_cb cb = (adm_limits_cb)o->ucb;
  if (o->adm->destroying) {
    free(o);
    return;
  }
  if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 3) {
    cb(o->uarg, GT_EIO, r && r->type == REDIS_REPLY_ERROR ? r->str : (err ? err : "bad reply"), NULL);
  } else {
    adm_limits_t l = {true, true, true, reply_int(r->element[0]), reply_int(r->element[1]),
                      r->element[2]->type == REDIS_REPLY_STRING ? strtod(r->element[2]->str, NULL) : 1};
    cb(o->uarg, GT_OK, "ok", &l);
  }
  free(o);
}

int adm_limits_get(adm_t *adm, const char *model, const char *tenant, adm_limits_cb cb, void *arg,
                   gt_err_t *err) {
  if (!adm || !cb) return gt_err_set(err, GT_EINVAL, "admission: callback is required");
  if (!tenant) tenant = "";
  if (!valid_name(model, false, false) ||
      (tenant[0] && strcmp(tenant, "*") != 0 && !valid_name(tenant, false, false)))
    return gt_err_set(err, GT_EINVAL, "admission: bad model or tenant");
  op_t *o = op_new(adm, 0, (void *)cb, arg);
  if (!o) return gt_err_set(err, GT_ENOMEM, "admission: out of memory");
  const char *av[2] = {model, tenant};
  if (eval(adm, SCR_LIMITS_GET, av, 2, on_limits_get_reply, o) != GT_OK) {
    free(o);
    return gt_err_set(err, GT_EIO, "admission: redis is not connected");
  }
  return GT_OK;
}

static void on_queues_reply(void *arg, redisReply *r, const char *err) {
  op_t *o = arg;
  adm_queues_cb cb = (adm_queues_cb)o->ucb;
  if (o->adm->destroying) {
    free(o);
    return;
  }
  if (!r || r->type != REDIS_REPLY_ARRAY || r->elements % 7) {
    cb(o->uarg, GT_EIO, r && r->type == REDIS_REPLY_ERROR ? r->str : (err ? err : "bad reply"), NULL, 0);
    free(o);
    return;
  }
  int n = (int)(r->elements / 7);
  adm_queue_row_t *rows = calloc((size_t)n + 1, sizeof *rows);
  if (!rows) {
    cb(o->uarg, GT_ENOMEM, "out of memory", NULL, 0);
    free(o);
    return;
  }
  for (int i = 0; i < n; i++) {
    redisReply **f = r->element + 7 * i;
    adm_queue_row_t *q = &rows[i];
    snprintf(q->model, sizeof q->model, "%s", f[0]->type == REDIS_REPLY_STRING ? f[0]->str : "");
    snprintf(q->tenant, sizeof q->tenant, "%s", f[1]->type == REDIS_REPLY_STRING ? f[1]->str : "");
    q->queued = reply_int(f[2]);
    q->inflight = reply_int(f[3]);
    q->max_inflight = reply_int(f[4]);
    q->max_queued = reply_int(f[5]);
    q->weight = f[6]->type == REDIS_REPLY_STRING ? strtod(f[6]->str, NULL) : 1;
  }
  cb(o->uarg, GT_OK, "ok", rows, n);
  free(rows);
  free(o);
}

int adm_queues_list(adm_t *adm, const char *model, adm_queues_cb cb, void *arg, gt_err_t *err) {
  if (!adm || !cb) return gt_err_set(err, GT_EINVAL, "admission: callback is required");
  if (!model) model = "";
  if (model[0] && !valid_name(model, false, false)) return gt_err_set(err, GT_EINVAL, "admission: bad model");
  op_t *o = op_new(adm, 0, (void *)cb, arg);
  if (!o) return gt_err_set(err, GT_ENOMEM, "admission: out of memory");
  const char *av[1] = {model};
  if (eval(adm, SCR_QUEUES, av, 1, on_queues_reply, o) != GT_OK) {
    free(o);
    return gt_err_set(err, GT_EIO, "admission: redis is not connected");
  }
  return GT_OK;
}
