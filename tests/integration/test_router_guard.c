/* tests/integration/test_router_guard.c — the HTTP front against hostile clients (issue 26),
 * with a real redis-server, the real router binary and the scripted fake engine, over raw
 * sockets: total deadlines for a head or body sent one byte at a time (the idle timeout never
 * fires: each byte comes well within it), header size and count (431), conflicting framing
 * (400), connection caps per client address (429) and global (accepting pauses), and accept()
 * out of file descriptors (a router held to 64: no busy loop, no log flood, it serves again). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/clock.h"
#include "tests/common/redis_server.h"
#include "tests/integration/router_harness.h"

static rstack_t g_s;

/* A TCP connection to the router from source address src ("127.0.0.1", "127.0.0.2", ...). */
static int connect_from(int port, const char *src) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  assert_true(fd >= 0);
  struct sockaddr_in a = {.sin_family = AF_INET};
  inet_pton(AF_INET, src, &a.sin_addr);
  assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
  a.sin_port = htons((uint16_t)port);
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
  return fd;
}

static void send_str(int fd, const char *s) {
  size_t n = strlen(s), off = 0;
  while (off < n) {
    ssize_t k = send(fd, s + off, n - off, MSG_NOSIGNAL);
    if (k <= 0) return; /* the router may close while we send: the answer tells */
    off += (size_t)k;
  }
}

/* Reads until the peer closes (or ms pass); returns what came (malloc'd, NUL-terminated). */
static char *read_all(int fd, int ms) {
  size_t cap = 1 << 16, len = 0;
  char *b = malloc(cap);
  double end = gt_now_ms() + ms;
  while (gt_now_ms() < end) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, 50) <= 0) continue;
    ssize_t k = recv(fd, b + len, cap - len - 1, 0);
    if (k <= 0) break;
    len += (size_t)k;
    if (len + 1 >= cap) break;
  }
  b[len] = '\0';
  return b;
}

static int status_of(const char *resp) {
  int st = 0;
  return sscanf(resp, "HTTP/1.1 %d", &st) == 1 ? st : 0;
}

/* Sends s one byte every gap_ms until the router answers or closes (up to max_ms); returns
 * the answer (malloc'd) and sets *took_ms and *sent (bytes sent). */
static char *drip(int fd, const char *s, int gap_ms, int max_ms, double *took_ms, size_t *sent) {
  const double t0 = gt_now_ms();
  size_t n = strlen(s), i = 0;
  while (gt_now_ms() - t0 < max_ms) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, gap_ms) > 0) break; /* an answer or EOF */
    if (i < n && send(fd, s + i, 1, MSG_NOSIGNAL) == 1) i++;
  }
  *took_ms = gt_now_ms() - t0;
  *sent = i;
  return read_all(fd, 2000);
}

static int setup(void **st) {
  (void)st;
  /* idle timeout 2 s (each dripped byte comes within 0.25 s, so it never fires); deadlines
   * 2 s for the head and for the body */
  const char *extra[] = {"--http-timeout-s", "2", "--http-head-timeout-s", "2", "--http-body-timeout-s", "2",
                         "--max-header-bytes", "16384", "--max-headers", "50", "--http-max-conns-per-addr", "4",
                         "--http-max-conns", "12", NULL};
  rstack_start(&g_s, "A", extra);
  return 0;
}

static int teardown(void **st) {
  (void)st;
  assert_int_equal(rstack_stop(&g_s), 0);
  return 0;
}

static void assert_health(const char *src) {
  int fd = connect_from(g_s.rp.http_port, src);
  send_str(fd, "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  char *r = read_all(fd, 10000);
  close(fd);
  if (status_of(r) != 200) fail_msg("health from %s: %.200s", src, r);
  free(r);
}

/* A head sent one byte per 0.25 s: closed with 408 by the 2 s deadline (the idle timer, reset
 * by every byte, would never fire). */
static void test_slow_head_deadline(void **st) {
  (void)st;
  char head[4096] = "POST /v1/completions HTTP/1.1\r\nHost: x\r\n";
  for (int i = 0; i < 100; i++) strcat(head, "X-Slow: 1\r\n");
  int fd = connect_from(g_s.rp.http_port, "127.0.0.1");
  double ms;
  size_t sent;
  char *r = drip(fd, head, 250, 20000, &ms, &sent);
  close(fd);
  if (status_of(r) != 408) fail_msg("after %.0f ms and %zu bytes: %.300s", ms, sent, r);
  assert_non_null(strstr(r, "\"code\":\"request_timeout\""));
  assert_true(ms >= 1900 && ms < 8000);
  assert_true(sent < strlen(head)); /* the head never completed */
  free(r);
  assert_health("127.0.0.1");
}

/* A complete head, then the body one byte per 0.25 s: 408 by the 2 s body deadline. */
static void test_slow_body_deadline(void **st) {
  (void)st;
  int fd = connect_from(g_s.rp.http_port, "127.0.0.1");
  send_str(fd, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 400\r\n\r\n");
  char body[401];
  memset(body, ' ', 400);
  body[400] = '\0';
  double ms;
  size_t sent;
  char *r = drip(fd, body, 250, 20000, &ms, &sent);
  close(fd);
  if (status_of(r) != 408) fail_msg("after %.0f ms and %zu bytes: %.300s", ms, sent, r);
  assert_non_null(strstr(r, "request body not received"));
  assert_true(ms >= 1900 && ms < 8000);
  free(r);
}

/* A keep-alive connection: a quick first request, then a second head dripped: the deadline
 * applies to every request on the connection. */
static void test_slow_second_request(void **st) {
  (void)st;
  int fd = connect_from(g_s.rp.http_port, "127.0.0.1");
  send_str(fd, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
  char buf[2048];
  struct pollfd p = {.fd = fd, .events = POLLIN};
  assert_int_equal(poll(&p, 1, 10000), 1);
  ssize_t k = recv(fd, buf, sizeof buf - 1, 0);
  assert_true(k > 0);
  buf[k] = '\0';
  assert_int_equal(status_of(buf), 200);
  char head[2048] = "GET /health HTTP/1.1\r\n";
  for (int i = 0; i < 60; i++) strcat(head, "X-Slow: 2\r\n");
  double ms;
  size_t sent;
  char *r = drip(fd, head, 250, 20000, &ms, &sent);
  close(fd);
  if (status_of(r) != 408) fail_msg("after %.0f ms: %.300s", ms, r);
  free(r);
}

static void test_header_limits_431(void **st) {
  (void)st;
  /* one 64 KiB header line (the head cap is 16 KiB) */
  int fd = connect_from(g_s.rp.http_port, "127.0.0.1");
  size_t big = 64 << 10;
  char *h = malloc(big + 128);
  strcpy(h, "GET /health HTTP/1.1\r\nX-Big: ");
  size_t l = strlen(h);
  memset(h + l, 'a', big);
  strcpy(h + l + big, "\r\n\r\n");
  send_str(fd, h);
  char *r = read_all(fd, 10000);
  close(fd);
  if (status_of(r) != 431) fail_msg("64 KiB header: %.300s", r);
  assert_non_null(strstr(r, "\"code\":\"header_fields_too_large\""));
  free(r);
  /* 51 small headers (the cap is 50), well under the byte cap */
  strcpy(h, "GET /health HTTP/1.1\r\n");
  for (int i = 0; i < 51; i++) sprintf(h + strlen(h), "X-%d: v\r\n", i);
  strcat(h, "\r\n");
  fd = connect_from(g_s.rp.http_port, "127.0.0.1");
  send_str(fd, h);
  r = read_all(fd, 10000);
  close(fd);
  if (status_of(r) != 431) fail_msg("51 headers: %.300s", r);
  assert_non_null(strstr(r, "too many header fields"));
  free(r);
  /* 50 are fine */
  strcpy(h, "GET /health HTTP/1.1\r\nConnection: close\r\n");
  for (int i = 0; i < 49; i++) sprintf(h + strlen(h), "X-%d: v\r\n", i);
  strcat(h, "\r\n");
  fd = connect_from(g_s.rp.http_port, "127.0.0.1");
  send_str(fd, h);
  r = read_all(fd, 10000);
  close(fd);
  if (status_of(r) != 200) fail_msg("50 headers: %.300s", r);
  free(r);
  free(h);
}

static void test_framing_400(void **st) {
  (void)st;
  const char *bad[] = {
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 2\r\n"
      "Content-Length: 12\r\n\r\n{}",
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 5\r\n"
      "Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
  };
  for (size_t i = 0; i < 2; i++) {
    int fd = connect_from(g_s.rp.http_port, "127.0.0.1");
    send_str(fd, bad[i]);
    char *r = read_all(fd, 10000);
    close(fd);
    if (status_of(r) != 400) fail_msg("case %zu: %.300s", i, r);
    assert_non_null(strstr(r, "\"code\":\"invalid_framing\""));
    free(r);
  }
  /* the same length twice is one length */
  int fd = connect_from(g_s.rp.http_port, "127.0.0.1");
  send_str(fd, "GET /health HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\ncontent-length: 0\r\nConnection: close\r\n\r\n");
  char *r = read_all(fd, 10000);
  close(fd);
  assert_int_equal(status_of(r), 200);
  free(r);
}

/* Over 4 connections from one address: 429; another address is served; once they close the
 * first address is served again. */
static void test_per_address_cap(void **st) {
  (void)st;
  int held[4];
  for (int i = 0; i < 4; i++) held[i] = connect_from(g_s.rp.http_port, "127.0.0.3");
  int fd = connect_from(g_s.rp.http_port, "127.0.0.3");
  char *r = read_all(fd, 10000);
  close(fd);
  if (status_of(r) != 429) fail_msg("5th connection from one address: %.300s", r);
  assert_non_null(strstr(r, "\"code\":\"too_many_connections\""));
  free(r);
  assert_health("127.0.0.4");
  for (int i = 0; i < 4; i++) close(held[i]);
  /* the router notices the closes within its 100 ms tick: wait for the event, bounded */
  int ok = 0;
  for (double end = gt_now_ms() + 10000; !ok && gt_now_ms() < end;) {
    fd = connect_from(g_s.rp.http_port, "127.0.0.3");
    send_str(fd, "GET /health HTTP/1.1\r\nConnection: close\r\n\r\n");
    r = read_all(fd, 5000);
    close(fd);
    ok = status_of(r) == 200;
    free(r);
  }
  assert_true(ok);
}

/* At 12 open connections the router stops accepting: a 13th waits in the kernel's queue and is
 * answered as soon as one of the 12 closes. */
static void test_global_cap(void **st) {
  (void)st;
  char src[32];
  int held[12];
  for (int i = 0; i < 12; i++) {
    snprintf(src, sizeof src, "127.0.1.%d", 1 + i / 3); /* 3 per address: under the per-address cap */
    held[i] = connect_from(g_s.rp.http_port, src);
  }
  /* each is accepted: a request on the 12th is answered (keep-alive: it stays open) */
  send_str(held[11], "GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
  struct pollfd p = {.fd = held[11], .events = POLLIN};
  assert_int_equal(poll(&p, 1, 10000), 1);
  char buf[1024];
  assert_true(recv(held[11], buf, sizeof buf, 0) > 0);
  int fd = connect_from(g_s.rp.http_port, "127.0.2.1"); /* the kernel completes the handshake */
  send_str(fd, "GET /health HTTP/1.1\r\nConnection: close\r\n\r\n");
  p.fd = fd;
  assert_int_equal(poll(&p, 1, 500), 0); /* not accepted while 12 are open */
  close(held[0]);
  char *r = read_all(fd, 10000);
  close(fd);
  if (status_of(r) != 200) fail_msg("13th connection after one closed: %.300s", r);
  free(r);
  for (int i = 1; i < 12; i++) close(held[i]);
}

/* CPU time (user + system) of process pid in seconds. */
static double proc_cpu_s(pid_t pid) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  char *p = strrchr(buf, ')');
  unsigned long ut = 0, stt = 0;
  if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &stt) != 2) return -1;
  return (double)(ut + stt) / (double)sysconf(_SC_CLK_TCK);
}

/* A router held to 64 descriptors, 100 clients: accept() fails with EMFILE. The router logs to
 * stderr, which the test points at a file around the start to count the lines. */
static void test_out_of_fds_backoff(void **st) {
  (void)st;
  char redis[64], eng[64];
  snprintf(redis, sizeof redis, "redis://127.0.0.1:%d", rs_port(g_s.rs));
  snprintf(eng, sizeof eng, "tiny=127.0.0.1:%d", fe_port(g_s.fe));
  /* stderr of the router into a temporary file */
  char logpath[] = "/tmp/gantry-guard-log-XXXXXX";
  int lfd = mkstemp(logpath);
  assert_true(lfd >= 0);
  int saved = dup(2);
  dup2(lfd, 2);
  rp_t rp;
  const char *args[] = {"--redis", redis, "--engine", eng, "--http-max-conns", "1000", "--http-max-conns-per-addr", "1000",
                        "--http-timeout-s", "30", NULL};
  int rc = rp_start_nofile(&rp, args, 64);
  dup2(saved, 2);
  close(saved);
  assert_int_equal(rc, 0);
  assert_true(rp_wait_ready(&rp, 20000));
  /* 100 idle connections: the router runs out of descriptors at about 50 */
  int held[100];
  for (int i = 0; i < 100; i++) held[i] = connect_from(rp.http_port, "127.0.0.1");
  const double c0 = proc_cpu_s(rp.pid);
  /* let the kernel's queue stay full for a while: a spinning accept loop burns a core here */
  struct pollfd none = {.fd = -1};
  poll(&none, 1, 1500);
  const double cpu = proc_cpu_s(rp.pid) - c0;
  for (int i = 0; i < 100; i++) close(held[i]);
  /* served again once descriptors are free (the back-off is at most 1 s) */
  int ok = 0;
  for (double end = gt_now_ms() + 15000; !ok && gt_now_ms() < end;) {
    int fd = connect_from(rp.http_port, "127.0.0.1");
    send_str(fd, "GET /health HTTP/1.1\r\nConnection: close\r\n\r\n");
    char *r = read_all(fd, 3000);
    close(fd);
    ok = status_of(r) == 200;
    free(r);
  }
  assert_int_equal(rp_stop(&rp), 0);
  FILE *f = fdopen(lfd, "r");
  rewind(f);
  char line[1024];
  int accept_lines = 0;
  long bytes = 0;
  while (fgets(line, sizeof line, f)) {
    bytes += (long)strlen(line);
    if (strstr(line, "accept")) accept_lines++;
  }
  fclose(f);
  unlink(logpath);
  print_message("out of fds: cpu %.2f s in 1.5 s, %d accept log lines, %ld log bytes\n", cpu, accept_lines, bytes);
  assert_true(ok);
  assert_true(accept_lines >= 1 && accept_lines <= 2); /* one line per 10 s */
  assert_true(bytes < 64 * 1024);
  assert_true(cpu < 0.75); /* a busy accept loop takes ~1.5 s of CPU here */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_slow_head_deadline),  cmocka_unit_test(test_slow_body_deadline),
      cmocka_unit_test(test_slow_second_request), cmocka_unit_test(test_header_limits_431),
      cmocka_unit_test(test_framing_400),         cmocka_unit_test(test_per_address_cap),
      cmocka_unit_test(test_global_cap),          cmocka_unit_test(test_out_of_fds_backoff),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
