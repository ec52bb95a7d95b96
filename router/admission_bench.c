/* router/admission_bench.c — adm-bench: admissions per second through real Redis.
 * Each cycle is adm_request -> ADMITTED -> adm_release (enqueue + admit + release scripts and a
 * ticket wake-up when the request had to wait). Keeps `conc` requests outstanding.
 *   adm-bench [--host H --port P] [--cycles N] [--conc C] [--cap K] [--tenants T]
 * Without --port it starts its own redis-server on a free port (tests/common/redis_server). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "common/evbase.h"
#include "common/clock.h"
#include "common/log.h"
#include "router/admission.h"
#include "tests/common/redis_server.h"

typedef struct bench {
  struct event_base *base;
  adm_t *adm;
  long cycles, started, done, warmup;
  int tenants, bad;
  int64_t t0;
  bool limits_done;
} bench_t;

static void submit(bench_t *b);

static void on_result(void *arg, const adm_result_t *res) {
  bench_t *b = arg;
  if (res->status != ADM_ADMITTED) {
    b->bad++;
  } else {
    adm_release(b->adm, res->lease_id);
  }
  b->done++;
  if (b->done == b->warmup) b->t0 = gt_now_ns();
  if (b->started < b->cycles + b->warmup) submit(b);
  else if (b->done == b->cycles + b->warmup) event_base_loopbreak(b->base);
}

static void submit(bench_t *b) {
  char tenant[16];
  snprintf(tenant, sizeof tenant, "t%ld", b->started % b->tenants);
  b->started++;
  gt_err_t err = {0};
  if (!adm_request(b->adm, "bench", tenant, ADM_PRIO_INTERACTIVE, "", on_result, b, &err)) {
    fprintf(stderr, "adm_request: %s\n", err.msg);
    exit(1);
  }
}

static void on_limits(void *arg, int status, const char *msg) {
  bench_t *b = arg;
  if (status != GT_OK) {
    fprintf(stderr, "limits: %s\n", msg);
    exit(1);
  }
  b->limits_done = true;
  event_base_loopbreak(b->base);
}

static void on_try_limits(evutil_socket_t fd, short what, void *arg);

int main(int argc, char **argv) {
  const char *host = "127.0.0.1";
  int port = 0, conc = 32, cap = 16;
  bench_t b = {.cycles = 20000, .tenants = 4};
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--host")) host = argv[i + 1];
    else if (!strcmp(argv[i], "--port")) port = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--cycles")) b.cycles = atol(argv[i + 1]);
    else if (!strcmp(argv[i], "--conc")) conc = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--cap")) cap = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--tenants")) b.tenants = atoi(argv[i + 1]);
    else {
      fprintf(stderr, "usage: adm-bench [--host H --port P] [--cycles N] [--conc C] [--cap K] [--tenants T]\n");
      return 2;
    }
  }
  if (b.cycles < 1 || conc < 1 || cap < 1 || b.tenants < 1) {
    fprintf(stderr, "adm-bench: cycles, conc, cap, tenants must be >= 1\n");
    return 2;
  }
  gt_log_init_from_env();
  if (!getenv("GANTRY_LOG")) gt_log_level = GT_LEVEL_WARN;
  gt_err_t err = {0};
  rs_t *rs = NULL;
  if (!port) {
    rs = rs_start(&err);
    if (!rs) {
      fprintf(stderr, "adm-bench: %s\n", err.msg);
      return 1;
    }
    port = rs_port(rs);
  }
  b.base = gt_event_base_new();
  adm_config_t cfg = {.redis_host = host, .redis_port = port, .router_id = "bench", .lease_ttl_ms = 5000,
                      .queue_timeout_ms = 60000, .hold_ms = 1, .default_max_queued = 100000};
  b.adm = adm_create(b.base, &cfg, &err);
  if (!b.adm) {
    fprintf(stderr, "adm-bench: %s\n", err.msg);
    return 1;
  }
  /* Set the pool cap once connected. */
  adm_limits_t lim = {.has_max_inflight = true, .max_inflight = cap};
  struct { bench_t *b; adm_limits_t *l; } ctx = {&b, &lim};
  struct event *ev = event_new(b.base, -1, EV_PERSIST, on_try_limits, &ctx);
  struct timeval tv = {0, 10000};
  event_add(ev, &tv);
  event_base_dispatch(b.base);
  event_free(ev);
  if (!b.limits_done) {
    fprintf(stderr, "adm-bench: could not set limits\n");
    return 1;
  }
  b.warmup = b.cycles / 10 + 1;
  for (int i = 0; i < conc; i++) submit(&b);
  event_base_dispatch(b.base);
  double s = (double)(gt_now_ns() - b.t0) / 1e9;
  adm_stats_t st;
  for (int i = 0; i < 100000; i++) { /* graceful: let the last releases reach Redis */
    adm_stats(b.adm, &st);
    if (!st.releasing_now) break;
    event_base_loop(b.base, EVLOOP_ONCE);
  }
  printf("adm-bench: cycles=%ld conc=%d cap=%d tenants=%d bad=%d late_tickets=%llu stale_tickets=%llu\n",
         b.cycles, conc, cap, b.tenants, b.bad, (unsigned long long)st.late_tickets,
         (unsigned long long)st.stale_tickets);
  printf("adm-bench: %.0f admissions/s (request+admit+release cycles), mean wait %.3f ms, max wait %.3f ms\n",
         (double)b.cycles / s, st.wait_ms_sum / (double)(st.wait_count ? st.wait_count : 1), st.wait_ms_max);
  adm_destroy(b.adm);
  event_base_free(b.base);
  rs_stop(rs);
  return b.bad ? 1 : 0;
}

static void on_try_limits(evutil_socket_t fd, short what, void *arg) {
  (void)fd, (void)what;
  struct { bench_t *b; adm_limits_t *l; } *ctx = arg;
  static bool sent;
  if (sent) return;
  gt_err_t err = {0};
  if (adm_limits_set(ctx->b->adm, "bench", NULL, ctx->l, on_limits, ctx->b, &err) == GT_OK) sent = true;
}
