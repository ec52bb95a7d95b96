/* tests/unit/test_admission_harness.c — shared by test_admission.c and test_admission_fault.c
 * (#included): one event loop, one real redis-server, waits on events with a watchdog. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <event2/event.h>
#include <hiredis/hiredis.h>

#include "common/evbase.h"
#include "common/clock.h"
#include "common/log.h"
#include "router/admission.h"
#include "tests/common/redis_server.h"

#define MODEL "qwen3"
#define PFX "gantry:adm:"

typedef struct h {
  struct event_base *base;
  rs_t *rs;
  redisContext *sync; /* test's own view of Redis */
  bool expired;
} h_t;

static h_t *h_new(void) {
  gt_log_init_from_env();
  if (!getenv("GANTRY_LOG")) gt_log_level = GT_LEVEL_WARN;
  h_t *h = calloc(1, sizeof *h);
  assert_non_null(h);
  h->base = gt_event_base_new();
  assert_non_null(h->base);
  gt_err_t err = {0};
  h->rs = rs_start(&err);
  if (!h->rs) fail_msg("%s", err.msg);
  h->sync = redisConnect("127.0.0.1", rs_port(h->rs));
  assert_true(h->sync && !h->sync->err);
  return h;
}

static void h_free(h_t *h) {
  redisFree(h->sync);
  rs_stop(h->rs);
  event_base_free(h->base);
  free(h);
}

static adm_config_t h_cfg(h_t *h, const char *router, int ttl_ms, int timeout_ms) {
  adm_config_t c = {.redis_host = "127.0.0.1", .redis_port = rs_port(h->rs), .router_id = router,
                    .lease_ttl_ms = ttl_ms, .queue_timeout_ms = timeout_ms};
  return c;
}

static adm_t *h_adm(h_t *h, const adm_config_t *c) {
  gt_err_t err = {0};
  adm_t *a = adm_create(h->base, c, &err);
  if (!a) fail_msg("adm_create: %s", err.msg);
  return a;
}

static void on_expire(evutil_socket_t fd, short what, void *arg) {
  (void)fd, (void)what;
  ((h_t *)arg)->expired = true;
}

/* Runs the loop until cond(arg) holds or max_ms passes; returns cond's final value. */
static bool h_run_until(h_t *h, bool (*cond)(void *), void *arg, int max_ms) {
  h->expired = false;
  struct event *wd = evtimer_new(h->base, on_expire, h);
  struct timeval tv = {max_ms / 1000, (max_ms % 1000) * 1000};
  evtimer_add(wd, &tv);
  while (!cond(arg) && !h->expired) event_base_loop(h->base, EVLOOP_ONCE);
  event_free(wd);
  return cond(arg);
}

static bool flag_set(void *arg) { return *(bool *)arg; }

/* Runs the loop for ms (lets timers fire); used only to show that nothing else happens. */
static void h_run_for(h_t *h, int ms) {
  bool never = false;
  h_run_until(h, flag_set, &never, ms);
}

typedef struct done_ctx {
  bool done;
  int status;
} done_ctx_t;

static void on_done(void *arg, int status, const char *msg) {
  done_ctx_t *d = arg;
  d->done = true;
  d->status = status;
  if (status != GT_OK) print_error("operator call failed: %s\n", msg);
}

static bool redis_up(void *arg) {
  adm_stats_t s;
  adm_stats(arg, &s);
  return s.redis_up;
}

/* Sets limits (-1 = leave unset) and waits until applied. */
static void h_limits(h_t *h, adm_t *a, const char *tenant, int inf, int q, double w) {
  assert_true(h_run_until(h, redis_up, a, 5000));
  adm_limits_t l = {.has_max_inflight = inf >= 0, .has_max_queued = q >= 0, .has_weight = w > 0,
                    .max_inflight = inf, .max_queued = q, .weight = w};
  done_ctx_t d = {0};
  gt_err_t err = {0};
  int rv = adm_limits_set(a, MODEL, tenant, &l, on_done, &d, &err);
  if (rv != GT_OK) fail_msg("adm_limits_set: %s", err.msg);
  assert_true(h_run_until(h, flag_set, &d.done, 5000));
  assert_int_equal(d.status, GT_OK);
}

typedef struct qsnap {
  bool done;
  int64_t queued, inflight;       /* pool row */
  int64_t t_queued[4], t_inflight[4]; /* tenants "A".."D" */
} qsnap_t;

static void on_queues(void *arg, int status, const char *msg, const adm_queue_row_t *rows, int n) {
  qsnap_t *q = arg;
  assert_int_equal(status, GT_OK);
  for (int i = 0; i < n; i++) {
    if (strcmp(rows[i].model, MODEL) != 0) continue;
    if (!rows[i].tenant[0]) {
      q->queued = rows[i].queued;
      q->inflight = rows[i].inflight;
    } else if (rows[i].tenant[0] >= 'A' && rows[i].tenant[0] <= 'D' && !rows[i].tenant[1]) {
      q->t_queued[rows[i].tenant[0] - 'A'] = rows[i].queued;
      q->t_inflight[rows[i].tenant[0] - 'A'] = rows[i].inflight;
    }
  }
  q->done = true;
}

/* Queue snapshot through adm (ordered after every command a sent before: a sync point). */
static qsnap_t h_queues(h_t *h, adm_t *a) {
  qsnap_t q = {0};
  gt_err_t err = {0};
  if (adm_queues_list(a, MODEL, on_queues, &q, &err) != GT_OK) fail_msg("queues: %s", err.msg);
  assert_true(h_run_until(h, flag_set, &q.done, 5000));
  return q;
}

static long long h_redis_int(h_t *h, const char *fmt, const char *a1) {
  redisReply *r = redisCommand(h->sync, fmt, a1);
  assert_non_null(r);
  long long v = r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
  freeReplyObject(r);
  return v;
}
