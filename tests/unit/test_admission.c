/* tests/unit/test_admission.c — admission control against a real redis-server: caps, weights,
 * FIFO, priority classes, live limit changes, queue full, queue timeout, idempotent release,
 * operator API. Every test starts its own redis-server on a free port. */
#include "test_admission_harness.c"

#define TTL 1000

typedef struct run run_t;
typedef struct req {
  run_t *run;
  adm_t *adm;
  int idx, tenant; /* tenant 0 = "A", 1 = "B", ... */
  uint64_t ticket;
  int status; /* -1 until the callback */
  int retry;
  char lease[256];
  bool released;
} req_t;

struct run {
  h_t *h;
  int n;
  req_t *reqs;
  int ncb, nadmitted, nreleased;
  int order[512]; /* admission order (request indexes) */
  int inflight, t_inflight[4], max_inflight, t_max[4];
  bool release_now;  /* release inside the ADMITTED callback */
  int hold_ms;       /* else: release after this many ms (0: keep) */
  int cap_pool, cap_t[4]; /* checked at each admission (0: not checked) */
  bool sample_redis;
  long long redis_max;
};

static const char *TN[4] = {"A", "B", "C", "D"};

static void do_release(req_t *r) {
  run_t *run = r->run;
  run->inflight--;
  run->t_inflight[r->tenant]--;
  r->released = true;
  run->nreleased++;
  assert_int_equal(adm_release(r->adm, r->lease), GT_OK);
}

static void on_hold_done(evutil_socket_t fd, short what, void *arg) {
  (void)fd, (void)what;
  do_release(arg);
}

static void on_result(void *arg, const adm_result_t *res) {
  req_t *r = arg;
  run_t *run = r->run;
  assert_int_equal(r->status, -1); /* exactly once */
  assert_int_equal(res->ticket, r->ticket);
  r->status = (int)res->status;
  r->retry = res->retry_after_s;
  run->ncb++;
  if (res->status != ADM_ADMITTED) return;
  snprintf(r->lease, sizeof r->lease, "%s", res->lease_id);
  run->order[run->nadmitted++ % 512] = r->idx;
  run->inflight++;
  run->t_inflight[r->tenant]++;
  if (run->inflight > run->max_inflight) run->max_inflight = run->inflight;
  if (run->t_inflight[r->tenant] > run->t_max[r->tenant]) run->t_max[r->tenant] = run->t_inflight[r->tenant];
  if (run->cap_pool) assert_true(run->inflight <= run->cap_pool);
  if (run->cap_t[r->tenant]) assert_true(run->t_inflight[r->tenant] <= run->cap_t[r->tenant]);
  if (run->sample_redis) {
    long long v = h_redis_int(run->h, "ZCARD " PFX "ls:%s", MODEL);
    if (v > run->redis_max) run->redis_max = v;
    if (run->cap_pool) assert_true(v <= run->cap_pool);
    char key[64];
    snprintf(key, sizeof key, MODEL ":%s", TN[r->tenant]);
    long long t = h_redis_int(run->h, "SCARD " PFX "lt:%s", key);
    if (run->cap_t[r->tenant]) assert_true(t <= run->cap_t[r->tenant]);
  }
  if (run->release_now) {
    do_release(r);
  } else if (run->hold_ms > 0) {
    struct timeval tv = {0, (run->hold_ms * (1 + r->idx % 3)) * 1000};
    event_base_once(run->h->base, -1, EV_TIMEOUT, on_hold_done, r, &tv);
  }
}

static run_t *run_new(h_t *h, int n) {
  run_t *run = calloc(1, sizeof *run);
  assert_non_null(run);
  run->h = h;
  run->n = n;
  run->reqs = calloc((size_t)n, sizeof *run->reqs);
  assert_non_null(run->reqs);
  return run;
}

static void run_free(run_t *run) {
  free(run->reqs);
  free(run);
}

static void submit(run_t *run, adm_t *a, int idx, int tenant, adm_prio_t prio) {
  req_t *r = &run->reqs[idx];
  r->run = run;
  r->adm = a;
  r->idx = idx;
  r->tenant = tenant;
  r->status = -1;
  char rid[32];
  snprintf(rid, sizeof rid, "req-%d", idx);
  gt_err_t err = {0};
  r->ticket = adm_request(a, MODEL, TN[tenant], prio, rid, on_result, r, &err);
  if (!r->ticket) fail_msg("adm_request: %s", err.msg);
}

typedef struct {
  run_t *run;
  int n;
} want_t;
static bool cb_at_least(void *arg) { return ((want_t *)arg)->run->ncb >= ((want_t *)arg)->n; }
static bool admitted_at_least(void *arg) { return ((want_t *)arg)->run->nadmitted >= ((want_t *)arg)->n; }
static bool released_at_least(void *arg) { return ((want_t *)arg)->run->nreleased >= ((want_t *)arg)->n; }

/* 200 concurrent requests from two routers over two tenants: neither the pool cap nor a tenant
 * cap is ever exceeded (own count and Redis' count), and all complete. */
static void test_caps(void **state) {
  h_t *h = h_new();
  adm_config_t c = h_cfg(h, "r1", TTL, 20000);
  adm_t *a1 = h_adm(h, &c);
  c.router_id = "r2";
  adm_t *a2 = h_adm(h, &c);
  h_limits(h, a1, NULL, 6, -1, -1);
  h_limits(h, a1, "A", 2, -1, -1);
  h_limits(h, a2, "B", 5, -1, -1);
  run_t *run = run_new(h, 200);
  run->hold_ms = 1;
  run->cap_pool = 6;
  run->cap_t[0] = 2;
  run->cap_t[1] = 5;
  run->sample_redis = true;
  for (int i = 0; i < 200; i++) submit(run, i % 2 ? a2 : a1, i, (i / 2) % 2, ADM_PRIO_INTERACTIVE);
  want_t w = {run, 200};
  assert_true(h_run_until(h, released_at_least, &w, 30000));
  assert_int_equal(run->nadmitted, 200);
  print_message("caps: max inflight pool=%d A=%d B=%d (caps 6/2/5), redis max=%lld\n", run->max_inflight,
                run->t_max[0], run->t_max[1], run->redis_max);
  assert_true(run->max_inflight <= 6 && run->t_max[0] <= 2 && run->t_max[1] <= 5);
  /* With 200 queued the caps are reached, so the checks above were exercised at the limit. */
  assert_int_equal(run->max_inflight, 6);
  assert_int_equal(run->t_max[0], 2);
  qsnap_t q = h_queues(h, a1);
  q = h_queues(h, a2);
  assert_int_equal(q.inflight, 0);
  assert_int_equal(q.queued, 0);
  adm_stats_t s1, s2;
  adm_stats(a1, &s1);
  adm_stats(a2, &s2);
  assert_int_equal(s1.admitted + s2.admitted, 200);
  assert_int_equal(s1.wait_count + s2.wait_count, 200);
  adm_destroy(a1);
  adm_destroy(a2);
  run_free(run);
  h_free(h);
}

/* Pauses the pool (max_inflight 0), queues requests, then opens it: a deterministic backlog. */
static void open_pool(h_t *h, adm_t *a, run_t *run, int nqueued, int cap) {
  qsnap_t q = h_queues(h, a);
  assert_int_equal(q.queued, nqueued);
  assert_int_equal(run->nadmitted, 0);
  h_limits(h, a, NULL, cap, -1, -1);
}

/* Tenants weighted 3:1, both backlogged, pool cap 1: admissions alternate 3:1. */
static void test_weights(void **state) {
  h_t *h = h_new();
  adm_config_t c = h_cfg(h, "r1", TTL, 20000);
  adm_t *a = h_adm(h, &c);
  h_limits(h, a, NULL, 0, -1, -1);
  h_limits(h, a, "A", -1, -1, 3);
  h_limits(h, a, "B", -1, -1, 1);
  run_t *run = run_new(h, 120);
  run->release_now = true;
  run->cap_pool = 1;
  for (int i = 0; i < 120; i++) submit(run, a, i, i % 2, ADM_PRIO_INTERACTIVE);
  open_pool(h, a, run, 120, 1);
  want_t w = {run, 80};
  assert_true(h_run_until(h, admitted_at_least, &w, 20000));
  int na = 0;
  for (int i = 0; i < 80; i++) na += run->reqs[run->order[i]].tenant == 0;
  /* Stride scheduling gives exactly 60 A of the first 80 while both are backlogged; +-3 allows
   * for tie-breaking at the start. */
  print_message("weights 3:1: first 80 admissions A=%d B=%d (expected 60/20 +-3)\n", na, 80 - na);
  assert_true(na >= 57 && na <= 63);
  want_t all = {run, 120};
  assert_true(h_run_until(h, admitted_at_least, &all, 20000));
  /* FIFO within each tenant. */
  int last[2] = {-1, -1};
  for (int i = 0; i < 120; i++) {
    req_t *r = &run->reqs[run->order[i]];
    assert_true(r->idx > last[r->tenant]);
    last[r->tenant] = r->idx;
  }
  adm_destroy(a);
  run_free(run);
  h_free(h);
}

/* Interactive requests of any tenant go before batch ones; FIFO within tenant and class. */
static void test_fifo_priority(void **state) {
  h_t *h = h_new();
  adm_config_t c = h_cfg(h, "r1", TTL, 20000);
  adm_t *a = h_adm(h, &c);
  h_limits(h, a, NULL, 0, -1, -1);
  run_t *run = run_new(h, 30);
  run->release_now = true;
  for (int i = 0; i < 10; i++) submit(run, a, i, 0, ADM_PRIO_BATCH);            /* A batch 0..9 */
  for (int i = 10; i < 20; i++) submit(run, a, i, 0, ADM_PRIO_INTERACTIVE);     /* A inter 10..19 */
  for (int i = 20; i < 30; i++) submit(run, a, i, 1, ADM_PRIO_INTERACTIVE);     /* B inter 20..29 */
  open_pool(h, a, run, 30, 1);
  want_t w = {run, 30};
  assert_true(h_run_until(h, admitted_at_least, &w, 20000));
  for (int i = 0; i < 20; i++) assert_true(run->order[i] >= 10); /* interactive first */
  for (int i = 20; i < 30; i++) assert_int_equal(run->order[i], i - 20); /* then batch, FIFO */
  int last[2] = {-1, -1}, na = 0;
  for (int i = 0; i < 20; i++) {
    req_t *r = &run->reqs[run->order[i]];
    assert_true(r->idx > last[r->tenant]);
    last[r->tenant] = r->idx;
    if (i < 10) na += r->tenant == 0;
  }
  assert_true(na >= 4 && na <= 6); /* equal weights alternate */
  adm_destroy(a);
  run_free(run);
  h_free(h);
}

/* Raising and lowering caps while requests wait applies to the next admission. */
static void test_live_limit_change(void **state) {
  h_t *h = h_new();
  adm_config_t c = h_cfg(h, "r1", TTL, 20000);
  adm_t *a = h_adm(h, &c);
  h_limits(h, a, NULL, 2, -1, -1);
  run_t *run = run_new(h, 12);
  for (int i = 0; i < 12; i++) submit(run, a, i, 0, ADM_PRIO_INTERACTIVE);
  want_t w = {run, 2};
  assert_true(h_run_until(h, admitted_at_least, &w, 10000));
  qsnap_t q = h_queues(h, a);
  assert_int_equal(run->nadmitted, 2);
  assert_int_equal(q.inflight, 2);
  assert_int_equal(q.queued, 10);
  h_limits(h, a, NULL, 5, -1, -1); /* raise: 3 more at once */
  w.n = 5;
  assert_true(h_run_until(h, admitted_at_least, &w, 5000));
  q = h_queues(h, a);
  assert_int_equal(run->nadmitted, 5);
  assert_int_equal(q.inflight, 5);
  h_limits(h, a, "A", 1, -1, -1); /* tenant cap below what it holds: nothing new */
  h_limits(h, a, NULL, 10, -1, -1);
  for (int i = 0; i < 5; i++) do_release(&run->reqs[run->order[i]]);
  w.n = 6;
  assert_true(h_run_until(h, admitted_at_least, &w, 5000));
  q = h_queues(h, a);
  assert_int_equal(run->nadmitted, 6);
  assert_int_equal(q.inflight, 1);
  assert_int_equal(q.t_inflight[0], 1);
  adm_destroy(a);
  run_free(run);
  h_free(h);
}

/* Tenant and pool queue bounds give REJECTED_FULL with a Retry-After. */
static void test_queue_full(void **state) {
  h_t *h = h_new();
  adm_config_t c = h_cfg(h, "r1", TTL, 20000);
  adm_t *a = h_adm(h, &c);
  h_limits(h, a, NULL, 0, 4, -1);
  h_limits(h, a, "A", -1, 3, -1);
  run_t *run = run_new(h, 7);
  for (int i = 0; i < 4; i++) submit(run, a, i, 0, ADM_PRIO_INTERACTIVE); /* 4th: A full */
  submit(run, a, 4, 1, ADM_PRIO_INTERACTIVE);                             /* pool 4/4 */
  submit(run, a, 5, 1, ADM_PRIO_BATCH);                                   /* pool full */
  want_t w = {run, 2};
  assert_true(h_run_until(h, cb_at_least, &w, 5000));
  qsnap_t q = h_queues(h, a);
  assert_int_equal(run->reqs[3].status, ADM_REJECTED_FULL);
  assert_true(run->reqs[3].retry >= 1 && run->reqs[3].retry <= 60);
  assert_int_equal(run->reqs[5].status, ADM_REJECTED_FULL);
  for (int i = 0; i < 3; i++) assert_int_equal(run->reqs[i].status, -1);
  assert_int_equal(run->reqs[4].status, -1);
  assert_int_equal(q.queued, 4);
  assert_int_equal(q.t_queued[0], 3);
  adm_stats_t s;
  adm_stats(a, &s);
  assert_int_equal(s.rejected_full, 2);
  assert_int_equal(s.waiting_now, 4);
  adm_destroy(a);
  run_free(run);
  h_free(h);
}

/* A request that waits longer than queue_timeout_ms gets TIMEOUT and leaves the queue. */
static void test_queue_timeout(void **state) {
  h_t *h = h_new();
  adm_config_t c = h_cfg(h, "r1", TTL, 300);
  adm_t *a = h_adm(h, &c);
  h_limits(h, a, NULL, 0, -1, -1);
  run_t *run = run_new(h, 3);
  int64_t t0 = gt_now_ns();
  for (int i = 0; i < 3; i++) submit(run, a, i, 0, ADM_PRIO_INTERACTIVE);
  want_t w = {run, 3};
  assert_true(h_run_until(h, cb_at_least, &w, 5000));
  double ms = (double)(gt_now_ns() - t0) / 1e6;
  for (int i = 0; i < 3; i++) assert_int_equal(run->reqs[i].status, ADM_TIMEOUT);
  assert_true(ms >= 300);
  qsnap_t q = h_queues(h, a);
  assert_int_equal(q.queued, 0);
  assert_int_equal(adm_cancel(a, run->reqs[0].ticket), GT_ENOTFOUND);
  h_limits(h, a, NULL, 5, -1, -1); /* nothing left to admit */
  h_run_for(h, 50);
  assert_int_equal(run->nadmitted, 0);
  adm_stats_t s;
  adm_stats(a, &s);
  assert_int_equal(s.timeouts, 3);
  adm_destroy(a);
  run_free(run);
  h_free(h);
}

/* Releasing twice (or an unknown id) frees one slot only; cancel of a waiting request. */
static void test_release_idempotent(void **state) {
  h_t *h = h_new();
  adm_config_t c = h_cfg(h, "r1", TTL, 20000);
  adm_t *a = h_adm(h, &c);
  h_limits(h, a, NULL, 1, -1, -1);
  run_t *run = run_new(h, 3);
  for (int i = 0; i < 3; i++) submit(run, a, i, 0, ADM_PRIO_INTERACTIVE);
  want_t w = {run, 1};
  assert_true(h_run_until(h, admitted_at_least, &w, 10000));
  req_t *r0 = &run->reqs[0];
  assert_int_equal(r0->status, ADM_ADMITTED);
  assert_int_equal(adm_touch(a, r0->lease), GT_OK);
  do_release(r0);
  assert_int_equal(adm_release(a, r0->lease), GT_OK);
  assert_int_equal(adm_release(a, "someone-else:00000000:7"), GT_OK);
  assert_int_equal(adm_release(a, "bad id"), GT_EINVAL);
  assert_int_equal(adm_touch(a, r0->lease), GT_ENOTFOUND);
  w.n = 2;
  assert_true(h_run_until(h, admitted_at_least, &w, 5000));
  req_t *r1 = &run->reqs[1];
  assert_int_equal(adm_release(a, r0->lease), GT_OK); /* late duplicate */
  qsnap_t q = h_queues(h, a);
  assert_int_equal(q.inflight, 1); /* r1 only: the duplicates freed nothing */
  assert_int_equal(q.queued, 1);
  assert_int_equal(run->reqs[2].status, -1);
  assert_int_equal(adm_cancel(a, run->reqs[2].ticket), GT_OK);
  assert_int_equal(adm_cancel(a, run->reqs[2].ticket), GT_ENOTFOUND);
  do_release(r1);
  q = h_queues(h, a);
  assert_int_equal(q.inflight, 0);
  assert_int_equal(q.queued, 0);
  assert_int_equal(run->ncb, 2); /* cancelled request never called back */
  assert_int_equal(h_redis_int(h, "EXISTS " PFX "e:%s", r1->lease), 0);
  adm_destroy(a);
  run_free(run);
  h_free(h);
}

typedef struct {
  bool done;
  int status;
  adm_limits_t l;
} lget_t;
static void on_lget(void *arg, int status, const char *msg, const adm_limits_t *l) {
  lget_t *g = arg;
  g->done = true;
  g->status = status;
  if (l) g->l = *l;
}

/* Operator API: JSON parsing, validation, effective limits with defaults. */
static void test_limits_api(void **state) {
  char m[ADM_NAME_MAX + 1], t[ADM_NAME_MAX + 1];
  adm_limits_t l;
  gt_err_t err = {0};
  assert_int_equal(adm_limits_parse_json("{\"model\":\"qwen3\",\"tenant\":\"acme\",\"max_inflight\":8,\"weight\":2.5}",
                                         m, t, &l, &err), GT_OK);
  assert_string_equal(m, "qwen3");
  assert_string_equal(t, "acme");
  assert_true(l.has_max_inflight && l.max_inflight == 8 && !l.has_max_queued && l.has_weight && l.weight == 2.5);
  assert_int_equal(adm_limits_parse_json("{\"model\":\"qwen3\",\"max_queued\":100}", m, t, &l, &err), GT_OK);
  assert_string_equal(t, "");
  const char *bad[] = {"", "[]", "{\"model\":\"q\"}", "{\"model\":\"q\",\"max_inflight\":-1}",
                       "{\"model\":\"q\",\"max_inflight\":1.5}", "{\"model\":\"q\",\"weight\":2}",
                       "{\"model\":\"q:x\",\"max_queued\":1}", "{\"model\":\"q\",\"tenant\":\"a\",\"weight\":0}",
                       "{\"model\":\"q\",\"bogus\":1}", "{\"max_inflight\":1}"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    err.msg[0] = 0;
    assert_int_equal(adm_limits_parse_json(bad[i], m, t, &l, &err), GT_EINVAL);
    assert_true(err.msg[0] != 0);
  }

  h_t *h = h_new();
  adm_config_t c = h_cfg(h, "r1", TTL, 20000);
  c.default_max_inflight = 7;
  adm_t *a = h_adm(h, &c);
  assert_true(h_run_until(h, redis_up, a, 5000));
  adm_limits_t none = {0};
  assert_int_equal(adm_limits_set(a, MODEL, NULL, &none, on_done, NULL, &err), GT_EINVAL);
  adm_limits_t w = {.has_weight = true, .weight = 2};
  assert_int_equal(adm_limits_set(a, MODEL, NULL, &w, on_done, NULL, &err), GT_EINVAL); /* pool weight */
  h_limits(h, a, "*", 3, -1, 2);
  h_limits(h, a, "acme", -1, 9, -1);
  lget_t g = {0};
  assert_int_equal(adm_limits_get(a, MODEL, "acme", on_lget, &g, &err), GT_OK);
  assert_true(h_run_until(h, flag_set, &g.done, 5000));
  assert_int_equal(g.status, GT_OK);
  assert_int_equal(g.l.max_inflight, 3); /* from "*" */
  assert_int_equal(g.l.max_queued, 9);
  assert_true(g.l.weight == 2);
  memset(&g, 0, sizeof g);
  assert_int_equal(adm_limits_get(a, MODEL, NULL, on_lget, &g, &err), GT_OK);
  assert_true(h_run_until(h, flag_set, &g.done, 5000));
  assert_int_equal(g.l.max_inflight, 7); /* config default */
  assert_int_equal(g.l.max_queued, 1024);
  assert_int_equal(adm_request(a, "bad model", "x", ADM_PRIO_BATCH, "", on_result, NULL, &err), 0);
  assert_int_equal(adm_request(a, MODEL, "x", (adm_prio_t)7, "", on_result, NULL, &err), 0);
  adm_destroy(a);
  h_free(h);
}

/* A script that Redis refuses (here: out of memory) gives ERROR, and the router keeps working
 * once Redis accepts writes again. */
static void test_script_error(void **state) {
  h_t *h = h_new();
  adm_config_t c = h_cfg(h, "r1", TTL, 20000);
  adm_t *a = h_adm(h, &c);
  h_limits(h, a, NULL, 4, -1, -1);
  redisReply *rr = redisCommand(h->sync, "CONFIG SET maxmemory 1");
  assert_non_null(rr);
  freeReplyObject(rr);
  run_t *run = run_new(h, 2);
  submit(run, a, 0, 0, ADM_PRIO_INTERACTIVE);
  want_t w = {run, 1};
  assert_true(h_run_until(h, cb_at_least, &w, 5000));
  assert_int_equal(run->reqs[0].status, ADM_ERROR);
  rr = redisCommand(h->sync, "CONFIG SET maxmemory 0");
  assert_non_null(rr);
  freeReplyObject(rr);
  run->release_now = true;
  submit(run, a, 1, 0, ADM_PRIO_INTERACTIVE);
  w.n = 2;
  assert_true(h_run_until(h, cb_at_least, &w, 5000));
  assert_int_equal(run->reqs[1].status, ADM_ADMITTED);
  adm_stats_t s;
  adm_stats(a, &s);
  assert_int_equal(s.errors, 1);
  adm_destroy(a);
  run_free(run);
  h_free(h);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_limits_api),    cmocka_unit_test(test_caps),
      cmocka_unit_test(test_weights),       cmocka_unit_test(test_fifo_priority),
      cmocka_unit_test(test_live_limit_change), cmocka_unit_test(test_queue_full),
      cmocka_unit_test(test_queue_timeout), cmocka_unit_test(test_release_idempotent),
      cmocka_unit_test(test_script_error),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
