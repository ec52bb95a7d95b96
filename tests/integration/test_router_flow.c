/* tests/integration/test_router_flow.c — a streaming client that never reads (issue 15 item 2),
 * with a real redis-server, the real router binary and a scripted fake engine (FLOOD: 1 KiB
 * tokens as fast as the stream takes them). The router buffers at most --stream-buffer-bytes
 * (1 MiB default) for the stream, stops reading from the engine, and after
 * --stream-write-timeout-s cancels the engine stream, releases the lease and drops the
 * connection. Before the bound the router read all 24 MiB into its output buffer. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
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

static int cancelled_once(fe_t *f) { return fe_cancelled(f) >= 1 && fe_active(f) == 0; }

/* Sends a streaming chat request on a socket with a tiny receive buffer and returns the socket
 * (never read). */
static int send_unread_stream(int port, const char *content, int max_tokens) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  int small = 4096;
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
  char body[256], req[512];
  int bl = snprintf(body, sizeof body,
                    "{\"model\":\"tiny\",\"stream\":true,\"max_tokens\":%d,\"messages\":[{\"role\":\"user\",\"content\":\"%s\"}]}",
                    max_tokens, content);
  int rl = snprintf(req, sizeof req,
                    "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    "Content-Length: %d\r\n\r\n%s", bl, body);
  assert_int_equal(write(fd, req, (size_t)rl), rl);
  return fd;
}

static void test_unread_stream_bounded_and_cancelled(void **st) {
  (void)st;
  gt_err_t err;
  rs_t *rs = rs_start(&err);
  if (!rs) fail_msg("redis: %s", err.msg);
  fe_t *fe = fe_start("A");
  assert_non_null(fe);
  char redis[64], eng[64];
  snprintf(redis, sizeof redis, "redis://127.0.0.1:%d", rs_port(rs));
  snprintf(eng, sizeof eng, "tiny=127.0.0.1:%d", fe_port(fe));
  const char *args[] = {"--redis", redis, "--engine", eng, "--health-ms", "100", "--admission-hold-ms", "1",
                        "--stream-write-timeout-s", "2", NULL};
  rp_t rp;
  assert_int_equal(rp_start(&rp, args), 0);
  assert_true(rp_wait_ready(&rp, 20000));
  const long rss0 = rp_peak_rss_kib(&rp);
  assert_true(rss0 > 0);

  int fd = send_unread_stream(rp.http_port, "FLOOD", 24 * 1024); /* 24 MiB of tokens */
  /* the write timeout (2 s after the buffer filled) cancels the engine stream */
  assert_true(fe_wait(fe, cancelled_once, 20000));
  const long grown = rp_peak_rss_kib(&rp) - rss0;
  printf("router peak RSS grew by %ld KiB while a client did not read a 24 MiB stream\n", grown);
  assert_true(grown < 12 * 1024);
  /* the lease came back and the router answers others */
  double end = gt_now_ms() + 5000;
  while (rp_metric(&rp, "gantry_router_leases_held", NULL) != 0 && gt_now_ms() < end) usleep(20000);
  assert_int_equal(rp_metric(&rp, "gantry_router_leases_held", NULL), 0);
  char *b = NULL;
  const char *req = "{\"model\":\"tiny\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";
  const char *h[] = {"Content-Type: application/json", NULL};
  assert_int_equal(http_req(rp.http_port, "POST", "/v1/chat/completions", h, req, strlen(req), &b, NULL), 200);
  free(b);
  /* the connection was dropped: reading it ends (EOF or reset) */
  char buf[65536];
  ssize_t n;
  size_t total = 0;
  while ((n = read(fd, buf, sizeof buf)) > 0) total += (size_t)n;
  printf("the client could still read %zu bytes before the connection ended\n", total);
  assert_true(total < 16u << 20);
  close(fd);
  assert_int_equal(rp_stop(&rp), 0);
  fe_stop(fe);
  rs_stop(rs);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_unread_stream_bounded_and_cancelled)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
