/* tests/fault/test_router_fault.c — failures around gantry-router, with real processes:
 *   kill -9 of a router holding a lease  -> another router sees the slot reclaimed within the TTL
 *   kill -9 of an engine mid-stream       -> the client gets an error event, no slot leaks
 *   Redis killed and restarted under load -> requests recover, the cap is never exceeded
 * (client disconnects are in tests/integration/test_router_http.c). */
#define _GNU_SOURCE
#include <curl/curl.h>
#include <hiredis/hiredis.h>
#include <jansson.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/clock.h"
#include "tests/common/redis_server.h"
#include "tests/integration/router_harness.h"

static long pool_inflight(int port) {
  char *b;
  long s = http_req(port, "GET", "/admin/queues?model=tiny", NULL, NULL, 0, &b, NULL);
  long v = -1;
  if (s == 200) {
    json_t *j = json_loads(b, 0, NULL);
    size_t i;
    json_t *r;
    json_array_foreach(json_object_get(j, "queues"), i, r) {
      if (json_is_null(json_object_get(r, "tenant")) || !json_object_get(r, "tenant"))
        v = (long)json_integer_value(json_object_get(r, "inflight"));
    }
    json_decref(j);
  }
  free(b);
  return v;
}

/* Opens a streaming SLOW request on a raw socket and returns once its first bytes arrived. */
static int open_stream(int port, int tokens) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
  char body[256], req[512];
  snprintf(body, sizeof body, "{\"model\":\"tiny\",\"stream\":true,\"max_tokens\":%d,\"messages\":[{\"role\":\"user\",\"content\":\"SLOW\"}]}", tokens);
  snprintf(req, sizeof req, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
           strlen(body), body);
  assert_true(write(fd, req, strlen(req)) > 0);
  struct pollfd p = {.fd = fd, .events = POLLIN};
  assert_int_equal(poll(&p, 1, 15000), 1);
  return fd;
}

/* Reads the rest of a stream into a malloc'd string (until close or max_ms). */
static char *read_all(int fd, int max_ms) {
  char *out = calloc(1, 1);
  size_t n = 0;
  double end = gt_now_ms() + max_ms;
  char buf[4096];
  while (gt_now_ms() < end) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, 100) <= 0) continue;
    ssize_t k = read(fd, buf, sizeof buf);
    if (k <= 0) break;
    out = realloc(out, n + (size_t)k + 1);
    memcpy(out + n, buf, (size_t)k);
    n += (size_t)k;
    out[n] = '\0';
    if (strstr(out, "data: [DONE]")) break;
  }
  return out;
}

static void test_kill9_router_lease_reclaimed(void **st) {
  (void)st;
  gt_err_t err;
  rs_t *rs = rs_start(&err);
  assert_non_null(rs);
  fe_t *e = fe_start("E");
  char redis[64], eng[64];
  snprintf(redis, sizeof redis, "redis://127.0.0.1:%d", rs_port(rs));
  snprintf(eng, sizeof eng, "tiny=127.0.0.1:%d", fe_port(e));
  const char *args[] = {"--redis", redis, "--engine", eng, "--health-ms", "100", "--admission-hold-ms", "1",
                        "--lease-ttl-ms", "1000", NULL};
  rp_t r1, r2;
  assert_int_equal(rp_start(&r1, args), 0);
  assert_true(rp_wait_ready(&r1, 20000));
  assert_int_equal(rp_start(&r2, args), 0);
  assert_true(rp_wait_ready(&r2, 20000));
  int fd = open_stream(r1.http_port, 2000);
  assert_int_equal(pool_inflight(r2.http_port), 1);
  rp_kill9(&r1);
  double t0 = gt_now_ms();
  while (pool_inflight(r2.http_port) != 0 && gt_now_ms() - t0 < 10000) usleep(20000);
  double ms = gt_now_ms() - t0;
  printf("lease of the killed router reclaimed after %.0f ms (TTL 1000 ms)\n", ms);
  assert_int_equal(pool_inflight(r2.http_port), 0);
  assert_true(ms < 1000 + 600); /* within the TTL (issue 26: up to 4/3 TTL before), + scheduling */
  close(fd);
  assert_int_equal(rp_stop(&r2), 0);
  fe_stop(e); /* waits for the orphaned stream: the engine saw the router's connection die */
  rs_stop(rs);
}

static void test_kill9_engine_mid_stream(void **st) {
  (void)st;
  gt_err_t err;
  rs_t *rs = rs_start(&err);
  assert_non_null(rs);
  /* the fake engine as its own process, so it can be killed */
  int pfd[2];
  assert_int_equal(pipe(pfd), 0);
  pid_t epid = fork();
  if (epid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    dup2(pfd[1], 1);
    close(pfd[0]);
    char bin[512];
    snprintf(bin, sizeof bin, "%s/gantry-fake-engine", getenv("GANTRY_BIN") ? getenv("GANTRY_BIN") : ".");
    execl(bin, bin, "E", (char *)NULL);
    _exit(127);
  }
  close(pfd[1]);
  char line[64] = "";
  size_t n = 0;
  while (n < sizeof line - 1 && read(pfd[0], line + n, 1) == 1 && line[n] != '\n') n++;
  int eport = 0;
  assert_int_equal(sscanf(line, "port %d", &eport), 1);
  char redis[64], eng[64];
  snprintf(redis, sizeof redis, "redis://127.0.0.1:%d", rs_port(rs));
  snprintf(eng, sizeof eng, "tiny=127.0.0.1:%d", eport);
  const char *args[] = {"--redis", redis, "--engine", eng, "--health-ms", "100", "--admission-hold-ms", "1", NULL};
  rp_t r;
  assert_int_equal(rp_start(&r, args), 0);
  assert_true(rp_wait_ready(&r, 20000));
  int fd = open_stream(r.http_port, 2000);
  kill(epid, SIGKILL);
  waitpid(epid, NULL, 0);
  close(pfd[0]);
  char *s = read_all(fd, 10000);
  close(fd);
  assert_non_null(strstr(s, "\"error\""));
  assert_non_null(strstr(s, "data: [DONE]"));
  if (strstr(s, "127.0.0.1") || strstr(s, "ipv4:")) fail_msg("the error names the engine's address: %s", s);
  free(s);
  /* a request to the dead engine (still up until two checks fail, or already down): 503 that
   * names no internal address (gRPC's own message does: "ipv4:127.0.0.1:N: Connection refused") */
  const char *h[] = {"Content-Type: application/json", NULL};
  const char *req = "{\"model\":\"tiny\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";
  char *eb = NULL;
  assert_int_equal(http_req(r.http_port, "POST", "/v1/chat/completions", h, req, strlen(req), &eb, NULL), 503);
  if (strstr(eb, "127.0.0.1") || strstr(eb, "ipv4:")) fail_msg("the 503 names the engine's address: %s", eb);
  free(eb);
  double t0 = gt_now_ms();
  while (pool_inflight(r.http_port) != 0 && gt_now_ms() - t0 < 5000) usleep(20000);
  assert_int_equal(pool_inflight(r.http_port), 0);
  /* the engine is marked down after two failed checks: /ready turns 503 */
  t0 = gt_now_ms();
  char *b = NULL;
  long code = 0;
  while (gt_now_ms() - t0 < 5000) {
    code = http_req(r.http_port, "GET", "/ready", NULL, NULL, 0, &b, NULL);
    free(b);
    if (code == 503) break;
    usleep(20000);
  }
  assert_int_equal(code, 503);
  assert_int_equal(rp_stop(&r), 0);
  rs_stop(rs);
}

typedef struct batch {
  int port, n, ok, unavailable, other;
} batch_t;

static size_t drop(char *d, size_t sz, size_t nm, void *u) { (void)d; (void)u; return sz * nm; }

static void *run_batch(void *arg) {
  batch_t *b = arg;
  CURLM *m = curl_multi_init();
  CURL **cs = calloc((size_t)b->n, sizeof *cs);
  char url[128];
  snprintf(url, sizeof url, "http://127.0.0.1:%d/v1/chat/completions", b->port);
  struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
  const char *body = "{\"model\":\"tiny\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"SLOW\"}]}";
  for (int i = 0; i < b->n; i++) {
    cs[i] = curl_easy_init();
    curl_easy_setopt(cs[i], CURLOPT_URL, url);
    curl_easy_setopt(cs[i], CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(cs[i], CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(cs[i], CURLOPT_WRITEFUNCTION, drop);
    curl_easy_setopt(cs[i], CURLOPT_TIMEOUT, 50L);
    curl_easy_setopt(cs[i], CURLOPT_NOSIGNAL, 1L);
    curl_multi_add_handle(m, cs[i]);
  }
  int running = 1;
  while (running) {
    curl_multi_perform(m, &running);
    if (running) curl_multi_poll(m, NULL, 0, 100, NULL);
  }
  for (int i = 0; i < b->n; i++) {
    long st = 0;
    curl_easy_getinfo(cs[i], CURLINFO_RESPONSE_CODE, &st);
    if (st == 200) b->ok++;
    else if (st == 503) b->unavailable++;
    else b->other++;
    curl_multi_remove_handle(m, cs[i]);
    curl_easy_cleanup(cs[i]);
  }
  curl_slist_free_all(h);
  free(cs);
  curl_multi_cleanup(m);
  return NULL;
}

static int started_some(fe_t *f) { return fe_generates(f) >= 8; }

static void test_redis_restart_under_load(void **st) {
  (void)st;
  gt_err_t err;
  rs_t *rs = rs_start(&err);
  assert_non_null(rs);
  fe_t *e = fe_start("E");
  char redis[64], eng[64];
  snprintf(redis, sizeof redis, "redis://127.0.0.1:%d", rs_port(rs));
  snprintf(eng, sizeof eng, "tiny=127.0.0.1:%d", fe_port(e));
  const char *args[] = {"--redis", redis, "--engine", eng, "--health-ms", "100", "--lease-ttl-ms", "1000",
                        "--admission-hold-ms", "1000", "--default-max-inflight", "4", "--queue-timeout-ms", "20000", NULL};
  rp_t r;
  assert_int_equal(rp_start(&r, args), 0);
  assert_true(rp_wait_ready(&r, 20000));
  /* warm-up admission so the hold after the first connect is over */
  char *b;
  const char *h[] = {"Content-Type: application/json", NULL};
  const char *one = "{\"model\":\"tiny\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}";
  assert_int_equal(http_req(r.http_port, "POST", "/v1/chat/completions", h, one, strlen(one), &b, NULL), 200);
  free(b);
  fe_reset_max(e);
  batch_t bt = {.port = r.http_port, .n = 60};
  pthread_t th;
  pthread_create(&th, NULL, run_batch, &bt);
  assert_true(fe_wait(e, started_some, 20000));
  assert_int_equal(rs_kill(rs), GT_OK);
  usleep(300000); /* Redis stays down for a while (the outage being tested) */
  assert_int_equal(rs_restart(rs, &err), GT_OK);
  pthread_join(th, NULL);
  printf("redis restart under load: ok %d, 503 %d, other %d; engine max in flight %d (cap 4)\n", bt.ok, bt.unavailable,
         bt.other, fe_max_active(e));
  assert_int_equal(bt.ok + bt.unavailable, 60);
  assert_int_equal(bt.other, 0);
  assert_true(bt.ok >= 50);
  assert_true(fe_max_active(e) <= 4); /* no over-admission across the restart */
  double t0 = gt_now_ms();
  while (pool_inflight(r.http_port) != 0 && gt_now_ms() - t0 < 5000) usleep(20000);
  assert_int_equal(pool_inflight(r.http_port), 0);
  assert_int_equal(rp_stop(&r), 0);
  fe_stop(e);
  rs_stop(rs);
}

/* An engine that stays down while the channel's reconnect backoff grows (10 s: attempts at about
 * 1, 2.6, 5.2, 9.3, 15.8 s) and then comes back on its port serves again within two health checks
 * (issue 15 item 3: before, the router answered 503 until the next backoff attempt). */
static int ready_code(int port) {
  char *b = NULL;
  long code = http_req(port, "GET", "/ready", NULL, NULL, 0, &b, NULL);
  free(b);
  return (int)code;
}

static void test_engine_restart_recovers_fast(void **st) {
  (void)st;
  rstack_t k;
  rstack_start(&k, "R", (const char *[]){"--health-ms", "200", NULL});
  rp_t r = k.rp;
  const int eport = fe_port(k.fe);
  assert_true(rp_wait_ready(&r, 20000));
  fe_stop(k.fe);
  double t0 = gt_now_ms();
  while (ready_code(r.http_port) != 503 && gt_now_ms() - t0 < 5000) usleep(20000);
  assert_int_equal(ready_code(r.http_port), 503);
  sleep(10); /* the engine stays down while the reconnect backoff grows */
  k.fe = fe_start_at("R", eport);
  assert_non_null(k.fe);
  t0 = gt_now_ms();
  while (ready_code(r.http_port) != 200 && gt_now_ms() - t0 < 30000) usleep(10000);
  const double ms = gt_now_ms() - t0;
  printf("engine restarted after 10 s down: router ready again in %.0f ms (--health-ms 200)\n", ms);
  assert_int_equal(ready_code(r.http_port), 200);
  assert_true(ms < 1200); /* two health intervals plus the connect */
  const char *req = "{\"model\":\"tiny\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";
  const char *h[] = {"Content-Type: application/json", NULL};
  char *b = NULL;
  assert_int_equal(http_req(r.http_port, "POST", "/v1/chat/completions", h, req, strlen(req), &b, NULL), 200);
  free(b);
  assert_int_equal(rstack_stop(&k), 0);
}

static int ready_body(int port, char **body) { return (int)http_req(port, "GET", "/ready", NULL, NULL, 0, body, NULL); }

static int drain_idle(fe_t *f) { return fe_active(f) == 0; }

/* SIGTERM drains (issue 15 item 7): readiness turns 503 at once, new requests get 503, a stream
 * that finishes within --drain-timeout-s ends normally, the one that does not ends with an
 * error event and [DONE], the router exits 0 and the engine streams are gone. /ready also lists
 * engines whose Health says DRAINING. */
static void test_router_drain_sigterm(void **st) {
  (void)st;
  gt_err_t err;
  rs_t *rs = rs_start(&err);
  assert_non_null(rs);
  fe_t *fe = fe_start("D"), *fe2 = fe_start("D2");
  char redis[64], eng[64], eng2[64];
  snprintf(redis, sizeof redis, "redis://127.0.0.1:%d", rs_port(rs));
  snprintf(eng, sizeof eng, "tiny=127.0.0.1:%d", fe_port(fe));
  snprintf(eng2, sizeof eng2, "other=127.0.0.1:%d", fe_port(fe2));
  const char *args[] = {"--redis", redis, "--engine", eng, "--engine", eng2, "--health-ms", "100", "--drain-timeout-s", "1",
                        "--admission-hold-ms", "1", NULL};
  rp_t r;
  assert_int_equal(rp_start(&r, args), 0);
  assert_true(rp_wait_ready(&r, 20000));
  /* an engine that drains shows in /ready */
  fe_set_draining(fe2, true);
  char *b = NULL;
  double t0 = gt_now_ms();
  int code = 0;
  char want[64];
  snprintf(want, sizeof want, "127.0.0.1:%d", fe_port(fe2));
  while (gt_now_ms() - t0 < 5000) {
    free(b);
    code = ready_body(r.http_port, &b);
    if (code == 503 && strstr(b, "engines_draining") && strstr(b, want)) break;
    usleep(20000);
  }
  assert_int_equal(code, 503);
  assert_non_null(strstr(b, want));
  free(b);
  b = NULL;
  fe_set_draining(fe2, false);
  assert_true(rp_wait_ready(&r, 5000));

  int fa = open_stream(r.http_port, 20);  /* 0.4 s: finishes within the drain */
  int fb = open_stream(r.http_port, 500); /* 10 s: cut at the drain deadline */
  t0 = gt_now_ms();
  kill(r.pid, SIGTERM);
  code = 0;
  while (gt_now_ms() - t0 < 900) {
    code = ready_body(r.http_port, &b);
    if (code == 503) break;
    free(b);
    b = NULL;
    usleep(5000);
  }
  assert_int_equal(code, 503);
  assert_non_null(strstr(b, "draining"));
  free(b);
  const char *req = "{\"model\":\"tiny\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";
  const char *h[] = {"Content-Type: application/json", NULL};
  assert_int_equal(http_req(r.http_port, "POST", "/v1/chat/completions", h, req, strlen(req), &b, NULL), 503);
  assert_non_null(strstr(b, "router_draining"));
  free(b);
  char *sa = read_all(fa, 10000);
  assert_non_null(strstr(sa, "\"finish_reason\":\"length\""));
  assert_non_null(strstr(sa, "data: [DONE]"));
  assert_null(strstr(sa, "\"error\""));
  char *sb = read_all(fb, 10000);
  assert_non_null(strstr(sb, "router_shutdown"));
  assert_non_null(strstr(sb, "data: [DONE]"));
  printf("drain: the long stream ended after %.0f ms (--drain-timeout-s 1)\n", gt_now_ms() - t0);
  free(sa);
  free(sb);
  close(fa);
  close(fb);
  int status = -1;
  assert_int_equal(waitpid(r.pid, &status, 0), r.pid);
  assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  assert_true(fe_wait(fe, drain_idle, 5000));
  assert_true(fe_cancelled(fe) >= 1);
  close(r.out_fd);
  fe_stop(fe);
  fe_stop(fe2);
  rs_stop(rs);
}

/* A fresh Redis (issue 15 item 8): the first request is admitted at once, not after the
 * admission hold (default: one lease TTL, 15 s). After Redis loses its data while a lease is
 * held, the hold applies (this router has used the Redis before) until the live routers have
 * re-registered: here the only one, so it ends with its re-registration, at the earliest 2 s
 * after the loss (issue 26: it lasted the whole TTL, a 15 s blackout by default). */
static long timed_chat(int port, double *ms) {
  const char *req = "{\"model\":\"tiny\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";
  const char *h[] = {"Content-Type: application/json", NULL};
  char *b = NULL;
  double t0 = gt_now_ms();
  long code = http_req(port, "POST", "/v1/chat/completions", h, req, strlen(req), &b, NULL);
  *ms = gt_now_ms() - t0;
  free(b);
  return code;
}

static void test_fresh_redis_no_hold(void **st) {
  (void)st;
  gt_err_t err;
  rstack_t k; /* no --admission-hold-ms: the hold is one lease TTL (6 s here) */
  rstack_start(&k, "F", (const char *[]){"--health-ms", "100", "--lease-ttl-ms", "6000", NULL});
  rp_t r = k.rp;
  rs_t *rs = k.rs;
  assert_true(rp_wait_ready(&r, 20000));
  double ms = 0;
  assert_int_equal(timed_chat(r.http_port, &ms), 200);
  printf("fresh Redis: first request answered in %.0f ms (hold would be 6000 ms)\n", ms);
  assert_true(ms < 1500);
  /* Redis loses everything while a stream holds its lease: now the hold applies */
  int fd = open_stream(r.http_port, 100); /* 2 s */
  assert_int_equal(rs_kill(rs), GT_OK);
  assert_int_equal(rs_restart(rs, &err), GT_OK);
  /* the router reconnects (backoff <= 750 ms) and re-registers its lease */
  double t0 = gt_now_ms();
  while (rp_metric(&r, "gantry_router_leases_restored_total", NULL) < 1 && gt_now_ms() - t0 < 10000) usleep(20000);
  assert_true(rp_metric(&r, "gantry_router_leases_restored_total", NULL) >= 1);
  assert_int_equal(timed_chat(r.http_port, &ms), 200);
  printf("after a data loss: request answered in %.0f ms (the full hold: 6000 ms; its floor 2000 ms after the loss)\n", ms);
  assert_true(ms < 3500);
  char *s2 = read_all(fd, 10000);
  free(s2);
  close(fd);
  assert_int_equal(rstack_stop(&k), 0);
}

/* Sends a non-streaming chat request with content `text` on a raw socket (the answer is read
 * later with read_all). */
static int send_chat(int port, const char *text) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
  char body[256], req[512];
  snprintf(body, sizeof body, "{\"model\":\"tiny\",\"max_tokens\":2,\"messages\":[{\"role\":\"user\",\"content\":\"%s\"}]}", text);
  snprintf(req, sizeof req, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: %zu\r\n\r\n%s",
           strlen(body), body);
  assert_true(write(fd, req, strlen(req)) > 0);
  return fd;
}

static long pool_queued(int port) {
  char *b;
  long v = -1;
  if (http_req(port, "GET", "/admin/queues?model=tiny", NULL, NULL, 0, &b, NULL) == 200) {
    json_t *j = json_loads(b, 0, NULL);
    size_t i;
    json_t *r;
    json_array_foreach(json_object_get(j, "queues"), i, r) {
      if (json_is_null(json_object_get(r, "tenant")) || !json_object_get(r, "tenant"))
        v = (long)json_integer_value(json_object_get(r, "queued"));
    }
    json_decref(j);
  }
  free(b);
  return v;
}

/* Waits (up to ms) until router r's last heartbeat saw at least n routers alive. 1 if so. */
static int wait_routers_alive(rp_t *r, long long n, int ms) {
  const double end = gt_now_ms() + ms;
  while (rp_metric(r, "gantry_router_routers_alive", NULL) < n) {
    if (gt_now_ms() > end) return 0;
    usleep(20000); /* heartbeats are timer-driven inside the router: nothing to wait on here */
  }
  return 1;
}

/* Redis loses its data (FLUSHALL) while two routers hold a lease and three waiting requests
 * (issue 26 item 5): admission resumes once both routers re-registered, well before the hold
 * (one lease TTL, 6 s here) would end, the cap of 1 holds throughout, and the requests that
 * were waiting are admitted before one that arrived after the loss (before: a 15 s blackout
 * by default, and the oldest re-queued behind the newer ones). */
static void test_flushall_no_blackout_keeps_order(void **st) {
  (void)st;
  gt_err_t err;
  rs_t *rs = rs_start(&err);
  assert_non_null(rs);
  fe_t *e = fe_start("O");
  char redis[64], eng[64];
  snprintf(redis, sizeof redis, "redis://127.0.0.1:%d", rs_port(rs));
  snprintf(eng, sizeof eng, "tiny=127.0.0.1:%d", fe_port(e));
  const char *args[] = {"--redis", redis, "--engine", eng, "--health-ms", "100", "--lease-ttl-ms", "6000", NULL};
  rp_t r1, r2;
  assert_int_equal(rp_start(&r1, args), 0);
  assert_true(rp_wait_ready(&r1, 20000));
  assert_int_equal(rp_start(&r2, args), 0);
  assert_true(rp_wait_ready(&r2, 20000));
  const char *jh[] = {"Content-Type: application/json", NULL};
  const char *lim = "{\"model\":\"tiny\",\"max_inflight\":1}";
  char *b = NULL;
  assert_int_equal(http_req(r1.http_port, "PUT", "/admin/limits", jh, lim, strlen(lim), &b, NULL), 200);
  free(b);
  /* each router's last heartbeat saw the other alive (heartbeats every TTL/4 = 1.5 s), so the
   * hold after the loss waits for both to re-register */
  assert_true(wait_routers_alive(&r1, 2, 10000) && wait_routers_alive(&r2, 2, 10000));
  fe_reset_max(e);
  int s = open_stream(r1.http_port, 100); /* holds the one slot for 2 s */
  int w[3];
  w[0] = send_chat(r1.http_port, "SLOW W1");
  while (pool_queued(r1.http_port) < 1) usleep(5000);
  w[1] = send_chat(r2.http_port, "SLOW W2");
  while (pool_queued(r1.http_port) < 2) usleep(5000);
  w[2] = send_chat(r1.http_port, "SLOW W3");
  while (pool_queued(r1.http_port) < 3) usleep(5000);
  redisContext *rc = redisConnect("127.0.0.1", rs_port(rs));
  freeReplyObject(redisCommand(rc, "FLUSHALL"));
  redisFree(rc);
  const double t_flush = gt_now_ms();
  int n = send_chat(r2.http_port, "SLOW N1"); /* arrives after the loss */
  char *out[4];
  for (int i = 0; i < 3; i++) out[i] = read_all(w[i], 20000);
  const double waited = gt_now_ms() - t_flush;
  out[3] = read_all(n, 20000);
  free(read_all(s, 10000));
  close(s);
  for (int i = 0; i < 4; i++) {
    if (!strstr(out[i], "200 OK")) fail_msg("request %d: %.300s", i, out[i]);
    free(out[i]);
  }
  close(w[0]), close(w[1]), close(w[2]), close(n);
  char lab[64][32];
  int na = fe_arrival_labels(e, lab, 64);
  int pos[4] = {-1, -1, -1, -1};
  const char *names[] = {"SLOW W1", "SLOW W2", "SLOW W3", "SLOW N1"};
  for (int i = 0; i < na; i++)
    for (int k = 0; k < 4; k++)
      if (!strcmp(lab[i], names[k])) pos[k] = i;
  printf("FLUSHALL: the three waiting requests done %.0f ms after the loss (hold 6000 ms), arrival positions "
         "W1 %d W2 %d W3 %d N1 %d, engine max in flight %d (cap 1)\n", waited, pos[0], pos[1], pos[2], pos[3], fe_max_active(e));
  assert_true(pos[0] >= 0 && pos[0] < pos[1] && pos[1] < pos[2] && pos[2] < pos[3]);
  assert_true(waited < 4500); /* the stream ends at ~2 s; the hold alone would be 6 s */
  assert_int_equal(fe_max_active(e), 1);
  assert_int_equal(rp_stop(&r1), 0);
  assert_int_equal(rp_stop(&r2), 0);
  fe_stop(e);
  rs_stop(rs);
}

int main(void) {
  curl_global_init(CURL_GLOBAL_ALL);
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_kill9_router_lease_reclaimed),
                                     cmocka_unit_test(test_kill9_engine_mid_stream),
                                     cmocka_unit_test(test_redis_restart_under_load),
                                     cmocka_unit_test(test_engine_restart_recovers_fast),
                                     cmocka_unit_test(test_router_drain_sigterm),
                                     cmocka_unit_test(test_fresh_redis_no_hold),
                                     cmocka_unit_test(test_flushall_no_blackout_keeps_order)};
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  curl_global_cleanup();
  return rc;
}
