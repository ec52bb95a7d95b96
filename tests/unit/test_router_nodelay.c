/* tests/unit/test_router_nodelay.c — the HTTP front's accepted connections carry TCP_NODELAY
 * (router/http_guard.c, issue 24): a real evhttp server with the guard's bufferevents on
 * loopback, a real client socket; the request callback reads the option off the accepted
 * socket after http_guard_request (what router/http.c does before answering). A control run
 * without the guard shows that libevent leaves Nagle on, so the first check sees the guard's
 * work. */
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/listener.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "router/http_guard.h"

typedef struct {
  struct event_base *base;
  http_guard_t *guard; /* NULL: plain evhttp */
  int nodelay;         /* TCP_NODELAY of the accepted socket; -1: no request seen */
} srv_t;

static void on_req(struct evhttp_request *req, void *arg) {
  srv_t *s = arg;
  struct bufferevent *bev = evhttp_connection_get_bufferevent(evhttp_request_get_connection(req));
  oa_error_t e;
  if (s->guard) assert_int_equal(http_guard_request(s->guard, bev, &e), 0);
  int v = -1;
  socklen_t vl = sizeof v;
  assert_int_equal(getsockopt(bufferevent_getfd(bev), IPPROTO_TCP, TCP_NODELAY, &v, &vl), 0);
  s->nodelay = v != 0;
  evhttp_send_reply(req, 200, "OK", NULL);
  event_base_loopbreak(s->base);
}

static void on_timeout(evutil_socket_t fd, short what, void *arg) {
  (void)fd, (void)what;
  event_base_loopbreak(arg);
}

/* TCP_NODELAY (0/1) of the server side of one request's connection, with or without the guard. */
static int accepted_nodelay(bool with_guard) {
  srv_t s = {.base = event_base_new(), .nodelay = -1};
  assert_non_null(s.base);
  struct evhttp *http = evhttp_new(s.base);
  assert_non_null(http);
  const http_guard_cfg_t cfg = {.head_timeout_ms = 10000, .body_timeout_ms = 10000, .max_header_bytes = 32768,
                                .max_headers = 100, .max_conns = 16, .max_conns_per_addr = 16};
  if (with_guard) {
    s.guard = http_guard_new(s.base, &cfg, NULL);
    assert_non_null(s.guard);
    evhttp_set_bevcb(http, http_guard_bev, s.guard);
  }
  evhttp_set_gencb(http, on_req, &s);
  struct evhttp_bound_socket *bs = evhttp_bind_socket_with_handle(http, "127.0.0.1", 0);
  assert_non_null(bs);
  if (s.guard) http_guard_listen(s.guard, evhttp_bound_socket_get_listener(bs));
  struct sockaddr_in sa;
  socklen_t sl = sizeof sa;
  assert_int_equal(getsockname(evhttp_bound_socket_get_fd(bs), (struct sockaddr *)&sa, &sl), 0);

  int c = socket(AF_INET, SOCK_STREAM, 0);
  assert_true(c >= 0);
  assert_int_equal(connect(c, (struct sockaddr *)&sa, sl), 0); /* the kernel completes it from the backlog */
  const char *rq = "GET /x HTTP/1.1\r\nHost: t\r\n\r\n";
  assert_int_equal(send(c, rq, strlen(rq), 0), (ssize_t)strlen(rq));
  struct event *t = evtimer_new(s.base, on_timeout, s.base);
  struct timeval tv = {30, 0};
  evtimer_add(t, &tv);
  event_base_dispatch(s.base);
  event_free(t);
  close(c);
  evhttp_free(http);
  http_guard_free(s.guard);
  event_base_free(s.base);
  if (s.nodelay < 0) fail_msg("no request arrived within 30 s");
  return s.nodelay;
}

static void test_guard_sets_nodelay(void **st) {
  (void)st;
  assert_int_equal(accepted_nodelay(true), 1);
}

static void test_plain_evhttp_keeps_nagle(void **st) {
  (void)st;
  assert_int_equal(accepted_nodelay(false), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_guard_sets_nodelay),
      cmocka_unit_test(test_plain_evhttp_keeps_nagle),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
