/* tests/integration/test_redis_failover.c — Redis Sentinel failover with real processes: a
 * master, a replica and 3 redis-sentinels (tests/common/redis_server.c, down-after 500 ms,
 * failover-timeout 2000 ms). A redis_conn in Sentinel mode runs a Lua script (INCR) every 5 ms;
 * the master is killed -9; the test checks that the connection follows the promotion (the
 * script runs again, re-loaded on the new master) and prints the timeline: kill -> promotion
 * (first time a sentinel names the replica) -> first successful script after it, in ms, with
 * the calls that failed meanwhile and the increments lost to asynchronous replication. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>
#include <event2/event.h>

#include "common/clock.h"
#include "router/redis_conn.h"
#include "tests/common/redis_server.h"

typedef struct fo {
  struct event_base *base;
  rc_t *rc;
  int script;
  rs_t *master, *replica, *sent[3];
  char sentinels[128];
  long long last_before; /* INCR result last seen before the kill */
  long long first_after; /* first result after the promotion */
  int ok_before, ok_after, failed, refused, inflight;
  double t_kill, t_promoted, t_first; /* ms, monotonic */
  bool killed;
  struct event *tick;
} fo_t;

static double now_ms(void) { return gt_now_ms(); }

static void on_incr(void *arg, redisReply *r, const char *err) {
  fo_t *f = arg;
  f->inflight--;
  if (!r || r->type != REDIS_REPLY_INTEGER) {
    f->failed++;
    if (f->failed <= 5)
      printf("  call failed: %s\n", r && r->type == REDIS_REPLY_ERROR ? r->str : (err ? err : "?"));
    return;
  }
  if (!f->killed) {
    f->ok_before++;
    f->last_before = r->integer;
    return;
  }
  if (!f->ok_after++) {
    f->t_first = now_ms();
    f->first_after = r->integer;
  }
}

static void on_tick(evutil_socket_t fd, short what, void *arg) {
  (void)fd, (void)what;
  fo_t *f = arg;
  if (f->killed && f->t_promoted == 0 && rs_is_master(f->replica)) /* promotion: the replica says so */
    f->t_promoted = now_ms();
  if (f->killed && f->ok_after >= 50) {
    event_base_loopbreak(f->base);
    return;
  }
  if (f->killed && now_ms() - f->t_kill > 30000) { /* no promotion followed: the test fails */
    event_base_loopbreak(f->base);
    return;
  }
  if (!f->killed && f->ok_before >= 100) { /* load is flowing: kill the master now */
    f->t_kill = now_ms();
    f->killed = true;
    assert_int_equal(rs_kill(f->master), GT_OK);
    return;
  }
  const char *argv[] = {"gantry:fo:counter"};
  if (rc_eval(f->rc, f->script, 1, 1, argv, NULL, on_incr, f) == GT_OK) f->inflight++;
  else f->refused++;
}

static void test_failover(void **state) {
  (void)state;
  fo_t f = {0};
  gt_err_t err = {0};
  f.master = rs_start(&err);
  assert_non_null(f.master);
  f.replica = rs_start_replica(f.master, &err);
  assert_non_null(f.replica);
  for (int i = 0; i < 3; i++) {
    f.sent[i] = rs_start_sentinel(f.master, "gantry", &err);
    if (!f.sent[i]) fail_msg("redis-sentinel (scripts/deps.sh installs it): %s", err.msg);
  }
  snprintf(f.sentinels, sizeof f.sentinels, "127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d", rs_port(f.sent[0]),
           rs_port(f.sent[1]), rs_port(f.sent[2]));
  /* wait (bounded) until every sentinel knows the replica and its peers */
  double t0 = now_ms();
  assert_int_equal(rs_wait_failover_ready(f.sent, 3, f.replica, "gantry", 60000), GT_OK);
  printf("sentinels ready after %.0f ms; master :%d replica :%d\n", now_ms() - t0, rs_port(f.master),
         rs_port(f.replica));

  f.base = event_base_new();
  rc_config_t cfg = {.name = "failover", .sentinels = f.sentinels, .master_name = "gantry",
                     .backoff_min_ms = 10, .backoff_max_ms = 100, .connect_timeout_ms = 200};
  f.rc = rc_create(f.base, &cfg, NULL, NULL, &err);
  assert_non_null(f.rc);
  f.script = rc_script_add(f.rc, "return redis.call('INCR', KEYS[1])", &err);
  assert_true(f.script >= 0);
  f.tick = event_new(f.base, -1, EV_PERSIST, on_tick, &f);
  struct timeval tv = {0, 5000};
  event_add(f.tick, &tv);
  event_base_dispatch(f.base);

  printf("failover: kill -> promotion %.0f ms, kill -> first script on the new master %.0f ms\n",
         f.t_promoted ? f.t_promoted - f.t_kill : -1.0, f.t_first ? f.t_first - f.t_kill : -1.0);
  printf("failover: %d ok before, %d ok after, %d failed in flight, %d refused while down, "
         "last value before %lld, first after %lld (%lld increments lost)\n",
         f.ok_before, f.ok_after, f.failed, f.refused, f.last_before, f.first_after,
         f.last_before + 1 - f.first_after > 0 ? f.last_before + 1 - f.first_after : 0);
  assert_true(f.ok_after >= 50);   /* followed the promotion */
  assert_true(f.t_promoted > 0);   /* the replica is the master now */
  assert_true(f.first_after > 1);  /* ran (re-loaded) on the new master, on the replicated data */
  assert_true(f.t_first >= f.t_promoted - 1000); /* (ROLE is polled every 5 ms at most) */
  event_free(f.tick);
  rc_destroy(f.rc);
  event_base_free(f.base);
  for (int i = 0; i < 3; i++) rs_stop(f.sent[i]);
  rs_stop(f.replica);
  rs_stop(f.master);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_failover)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
