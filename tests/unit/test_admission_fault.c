/* tests/unit/test_admission_fault.c — faults against a real redis-server: a router that dies
 * holding leases and waiting entries (its adm_t destroyed without releasing: the same state a
 * kill -9 leaves) is reclaimed by another router's reaper; Redis killed and restarted (data lost)
 * under load: routers reconnect, re-register held leases, never over-admit, all requests end. */
#include "common/evbase.h"
#include "test_admission_harness.c"

#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct fr {
  adm_t *adm;
  int idx;
  uint64_t ticket;
  int status;
  char lease[256];
  int64_t t_cb;
} fr_t;

typedef struct fault_run {
  h_t *h;
  fr_t r[200];
  int ncb, nadmitted, nreleased, nbad;
  int inflight, max_inflight, cap;
  int hold_ms;
  int restart_after; /* restart Redis when this many were released (0: never) */
  bool restarted;
} fault_run_t;

static fault_run_t *FR;

static void fr_release(fr_t *r) {
  FR->inflight--;
  FR->nreleased++;
  assert_int_equal(adm_release(r->adm, r->lease), GT_OK);
}

static void on_hold(evutil_socket_t fd, short what, void *arg) {
  (void)fd, (void)what;
  fr_release(arg);
}

static void fr_cb(void *arg, const adm_result_t *res) {
  fr_t *r = arg;
  assert_int_equal(r->status, -1);
  r->status = (int)res->status;
  r->t_cb = gt_now_ns();
  FR->ncb++;
  if (res->status != ADM_ADMITTED) {
    FR->nbad++;
    print_error("request %d ended with status %d: %s\n", r->idx, (int)res->status, res->msg);
    return;
  }
  snprintf(r->lease, sizeof r->lease, "%s", res->lease_id);
  FR->nadmitted++;
  FR->inflight++;
  if (FR->inflight > FR->max_inflight) FR->max_inflight = FR->inflight;
  if (FR->cap) assert_true(FR->inflight <= FR->cap);
  if (FR->hold_ms) {
    /* Every 8th request is a long one (600 ms): it is still running when Redis restarts. */
    int ms = r->idx % 8 == 0 ? 600 : FR->hold_ms + r->idx % 5;
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    event_base_once(FR->h->base, -1, EV_TIMEOUT, on_hold, r, &tv);
  }
  if (FR->restart_after && FR->nreleased >= FR->restart_after && r->idx % 8 == 0 && !FR->restarted) {
    FR->restarted = true;
    gt_err_t err = {0};
    print_message("restarting redis with %d leases held\n", FR->inflight);
    if (rs_restart(FR->h->rs, &err) != GT_OK) fail_msg("%s", err.msg);
  }
}

static void fr_submit(adm_t *a, int idx, const char *tenant) {
  fr_t *r = &FR->r[idx];
  r->adm = a;
  r->idx = idx;
  r->status = -1;
  gt_err_t err = {0};
  r->ticket = adm_request(a, MODEL, tenant, ADM_PRIO_INTERACTIVE, "", fr_cb, r, &err);
  if (!r->ticket) fail_msg("%s", err.msg);
}

static bool fr_status_set(void *arg) { return ((fr_t *)arg)->status != -1; }
static bool fr_released(void *arg) { return FR->nreleased >= *(int *)arg; }
static bool fr_ncb(void *arg) { return FR->ncb >= *(int *)arg; }

/* Router 1 holds 2 leases (pool cap 2) and has a waiting request; router 2 has 2 waiting. Router 1
 * dies without releasing: router 2's reaper reclaims the leases and the waiting entry within
 * about one TTL (plus one reaper period) and router 2's requests are admitted. */
static void test_router_death(void **state) {
  enum { TTL = 900 };
  h_t *h = h_new();
  FR = calloc(1, sizeof *FR);
  FR->h = h;
  adm_config_t c = h_cfg(h, "r1", TTL, 20000);
  adm_t *a1 = h_adm(h, &c);
  c.router_id = "r2";
  adm_t *a2 = h_adm(h, &c);
  h_limits(h, a1, NULL, 2, -1, -1);
  fr_submit(a1, 0, "A");
  fr_submit(a1, 1, "A");
  int two = 2;
  assert_true(h_run_until(h, fr_ncb, &two, 10000));
  fr_submit(a1, 2, "A");
  fr_submit(a2, 3, "A");
  fr_submit(a2, 4, "B");
  qsnap_t q = h_queues(h, a1); /* sync point for both routers' enqueues */
  q = h_queues(h, a2);
  assert_int_equal(q.inflight, 2);
  assert_int_equal(q.queued, 3);
  h_run_for(h, 2 * TTL); /* heartbeats keep router 1's leases alive past their TTL */
  q = h_queues(h, a2);
  assert_int_equal(q.inflight, 2);
  assert_int_equal(FR->r[3].status, -1);

  int64_t t_death = gt_now_ns();
  adm_destroy(a1); /* dies: no release, no dequeue */
  assert_true(h_run_until(h, fr_status_set, &FR->r[3], 5000));
  assert_true(h_run_until(h, fr_status_set, &FR->r[4], 5000));
  assert_int_equal(FR->r[3].status, ADM_ADMITTED);
  assert_int_equal(FR->r[4].status, ADM_ADMITTED);
  int64_t last = FR->r[3].t_cb > FR->r[4].t_cb ? FR->r[3].t_cb : FR->r[4].t_cb;
  double ms = (double)(last - t_death) / 1e6;
  print_message("router death: slots reclaimed after %.0f ms (ttl %d ms, bound ttl + 500 of scheduling)\n", ms, TTL);
  assert_true(ms <= TTL + 500); /* within the ttl by design; slack for a loaded CI machine */
  adm_stats_t s;
  adm_stats(a2, &s);
  assert_int_equal(s.reaped_leases, 2);
  assert_int_equal(s.reaped_waiting, 1);
  q = h_queues(h, a2);
  assert_int_equal(q.inflight, 2);
  assert_int_equal(q.queued, 0);
  assert_int_equal(h_redis_int(h, "ZCARD " PFX "ls:%s", MODEL), 2); /* router 2's two leases */
  adm_destroy(a2);
  free(FR);
  h_free(h);
}

/* Two routers, pool cap 4 (config default: limits in Redis are lost with its data), 160 requests
 * each holding its lease a few ms (every 8th 600 ms); Redis is killed and restarted mid-run while
 * a long request holds its lease. Routers reconnect,
 * re-register the leases they hold during the post-restart hold, and every request is admitted
 * and released; the test's own in-flight count never exceeds 4. */
static void test_redis_restart(void **state) {
  enum { TTL = 800, N = 160 };
  h_t *h = h_new();
  FR = calloc(1, sizeof *FR);
  FR->h = h;
  FR->cap = 4;
  FR->hold_ms = 6;
  FR->restart_after = 50;
  adm_config_t c = h_cfg(h, "r1", TTL, 30000);
  c.default_max_inflight = 4;
  adm_t *a1 = h_adm(h, &c);
  c.router_id = "r2";
  adm_t *a2 = h_adm(h, &c);
  for (int i = 0; i < N; i++) fr_submit(i % 2 ? a2 : a1, i, i % 3 ? "A" : "B");
  int n = N;
  assert_true(h_run_until(h, fr_released, &n, 40000));
  assert_true(FR->restarted);
  assert_int_equal(FR->nbad, 0);
  assert_int_equal(FR->nadmitted, N);
  assert_true(FR->max_inflight <= 4);
  adm_stats_t s1, s2;
  adm_stats(a1, &s1);
  adm_stats(a2, &s2);
  print_message("redis restart: reconnects r1=%llu r2=%llu, restored leases=%llu waiting=%llu, max inflight=%d\n",
                (unsigned long long)s1.redis_reconnects, (unsigned long long)s2.redis_reconnects,
                (unsigned long long)(s1.restored_leases + s2.restored_leases),
                (unsigned long long)(s1.restored_waiting + s2.restored_waiting), FR->max_inflight);
  assert_true(s1.redis_reconnects >= 1 && s2.redis_reconnects >= 1);
  assert_true(s1.restored_waiting + s2.restored_waiting > 0);
  assert_true(s1.restored_leases + s2.restored_leases >= 1); /* the long request at least */
  qsnap_t q = h_queues(h, a1);
  assert_int_equal(q.inflight, 0);
  assert_int_equal(q.queued, 0);
  adm_destroy(a1);
  adm_destroy(a2);
  free(FR);
  h_free(h);
}

/* ---- a router process killed with SIGKILL ---- */

typedef struct child {
  struct event_base *base;
  adm_t *adm;
  int admitted, wfd;
} child_t;

static void child_queued(void *arg, int status, const char *msg, const adm_queue_row_t *rows, int n) {
  child_t *c = arg;
  if (write(c->wfd, status == GT_OK ? "R" : "E", 1) != 1) _exit(3);
}

static void child_cb(void *arg, const adm_result_t *res) {
  child_t *c = arg;
  if (res->status != ADM_ADMITTED) _exit(2);
  if (++c->admitted == 2) { /* holds 2 leases; queue a third request, then report ready */
    gt_err_t err;
    if (!adm_request(c->adm, MODEL, "A", ADM_PRIO_INTERACTIVE, "child-3", child_cb, c, &err)) _exit(2);
    if (adm_queues_list(c->adm, MODEL, child_queued, c, &err) != GT_OK) _exit(2);
  }
}

/* Child process: a router holding 2 leases and 1 waiting request, until it is killed. */
static void child_main(int port, int ttl, int wfd) {
  child_t c = {.wfd = wfd};
  c.base = gt_event_base_new();
  adm_config_t cfg = {.redis_host = "127.0.0.1", .redis_port = port, .router_id = "doomed",
                      .lease_ttl_ms = ttl, .queue_timeout_ms = 60000};
  gt_err_t err;
  c.adm = adm_create(c.base, &cfg, &err);
  if (!c.adm) _exit(2);
  for (int i = 0; i < 2; i++)
    if (!adm_request(c.adm, MODEL, "A", ADM_PRIO_INTERACTIVE, "child", child_cb, &c, &err)) _exit(2);
  event_base_dispatch(c.base);
  _exit(0);
}

/* A second process is a router holding leases and a waiting entry; it is killed with SIGKILL.
 * This router's reaper reclaims them and admits its own waiting requests. */
static void test_router_kill9(void **state) {
  enum { TTL = 900 };
  h_t *h = h_new();
  FR = calloc(1, sizeof *FR);
  FR->h = h;
  redisReply *rr = redisCommand(h->sync, "HSET " PFX "lim:%s max_inflight 2", MODEL);
  assert_non_null(rr);
  freeReplyObject(rr);
  int pfd[2];
  assert_int_equal(pipe(pfd), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlives a failed test */
    close(pfd[0]);
    child_main(rs_port(h->rs), TTL, pfd[1]);
  }
  close(pfd[1]);
  struct pollfd p = {.fd = pfd[0], .events = POLLIN};
  assert_int_equal(poll(&p, 1, 20000), 1); /* the child reports: 2 leases held, 1 queued */
  char ch = 0;
  assert_int_equal(read(pfd[0], &ch, 1), 1);
  assert_int_equal(ch, 'R');
  close(pfd[0]);

  adm_config_t c = h_cfg(h, "r2", TTL, 20000);
  adm_t *a = h_adm(h, &c);
  assert_true(h_run_until(h, redis_up, a, 5000));
  fr_submit(a, 0, "B");
  fr_submit(a, 1, "B");
  qsnap_t q = h_queues(h, a);
  assert_int_equal(q.inflight, 2);
  assert_int_equal(q.queued, 3);
  int64_t t_death = gt_now_ns();
  assert_int_equal(kill(pid, SIGKILL), 0);
  assert_int_equal(waitpid(pid, NULL, 0), pid);
  assert_true(h_run_until(h, fr_status_set, &FR->r[0], 5000));
  assert_true(h_run_until(h, fr_status_set, &FR->r[1], 5000));
  assert_int_equal(FR->r[0].status, ADM_ADMITTED);
  assert_int_equal(FR->r[1].status, ADM_ADMITTED);
  double ms = (double)((FR->r[0].t_cb > FR->r[1].t_cb ? FR->r[0].t_cb : FR->r[1].t_cb) - t_death) / 1e6;
  print_message("kill -9: slots reclaimed after %.0f ms (ttl %d ms, bound ttl + 500 of scheduling)\n", ms, TTL);
  assert_true(ms <= TTL + 500); /* 3/4 ttl to the deadline + ttl/4 to the next reap */
  adm_stats_t s;
  adm_stats(a, &s);
  assert_int_equal(s.reaped_leases, 2);
  assert_int_equal(s.reaped_waiting, 1);
  q = h_queues(h, a);
  assert_int_equal(q.inflight, 2);
  assert_int_equal(q.queued, 0);
  adm_destroy(a);
  free(FR);
  h_free(h);
}

static bool nothing_releasing(void *arg) {
  adm_stats_t s;
  adm_stats(arg, &s);
  return s.redis_up && s.releasing_now == 0;
}

/* Redis is down when the router starts: requests wait locally and are queued once it comes up
 * (reconnect with backoff). Then Redis dies while 3 leases are held and one is released during
 * the outage: after the restart the 2 held leases are re-registered and the release is not. */
static void test_redis_down_at_start(void **state) {
  enum { TTL = 800 };
  h_t *h = h_new();
  FR = calloc(1, sizeof *FR);
  FR->h = h;
  assert_int_equal(rs_kill(h->rs), GT_OK);
  adm_config_t c = h_cfg(h, "r1", TTL, 20000);
  adm_t *a = h_adm(h, &c);
  for (int i = 0; i < 3; i++) fr_submit(a, i, "A");
  h_run_for(h, 300);
  adm_stats_t s;
  adm_stats(a, &s);
  assert_false(s.redis_up);
  assert_int_equal(s.waiting_now, 3);
  assert_int_equal(FR->ncb, 0);
  gt_err_t err = {0};
  if (rs_restart(h->rs, &err) != GT_OK) fail_msg("%s", err.msg);
  redisFree(h->sync);
  h->sync = redisConnect("127.0.0.1", rs_port(h->rs));
  int three = 3;
  assert_true(h_run_until(h, fr_ncb, &three, 10000));
  for (int i = 0; i < 3; i++) assert_int_equal(FR->r[i].status, ADM_ADMITTED);

  assert_int_equal(rs_kill(h->rs), GT_OK);
  h_run_for(h, 100); /* the router notices */
  adm_stats(a, &s);
  assert_false(s.redis_up);
  fr_release(&FR->r[0]); /* during the outage */
  adm_stats(a, &s);
  assert_int_equal(s.releasing_now, 1);
  if (rs_restart(h->rs, &err) != GT_OK) fail_msg("%s", err.msg);
  assert_true(h_run_until(h, nothing_releasing, a, 10000));
  qsnap_t q = h_queues(h, a);
  assert_int_equal(q.inflight, 2);
  adm_stats(a, &s);
  assert_int_equal(s.restored_leases, 2);
  assert_int_equal(s.held_now, 2);
  assert_int_equal(s.redis_reconnects, 1); /* the first connect is no reconnect */
  fr_release(&FR->r[1]);
  fr_release(&FR->r[2]);
  assert_true(h_run_until(h, nothing_releasing, a, 10000));
  q = h_queues(h, a);
  assert_int_equal(q.inflight, 0);
  adm_destroy(a);
  free(FR);
  h_free(h);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_router_death),
      cmocka_unit_test(test_router_kill9),
      cmocka_unit_test(test_redis_restart),
      cmocka_unit_test(test_redis_down_at_start),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
