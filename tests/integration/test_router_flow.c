/* tests/integration/test_router_flow.c — a streaming client that never reads (issue 15 item 2),
 * with a real redis-server, the real router binary and a scripted fake engine (FLOOD: 16 KiB
 * tokens as fast as the stream takes them). The router buffers at most --stream-buffer-bytes
 * (1 MiB default) for the stream, stops reading from the engine, and after
 * --stream-write-timeout-s cancels the engine stream, releases the lease and drops the
 * connection. Before the bound the router read all 64 MiB into its output buffer.
 * Also (item 5): a gRPC client that sends part of a request message and stalls is ended with
 * DEADLINE_EXCEEDED after --http-timeout-s (raw HTTP/2 frames: no gRPC library sends half a
 * message); before, the call and what it had sent were held until the client left.
 * The same bound on the gRPC front: a raw HTTP/2 client that never opens its flow-control window
 * past the first 64 KiB; before, the router merged the whole 64 MiB stream into one pending
 * message and never cancelled it.
 * A request that fails while its stream is paused (here --request-timeout-s) ends at once on both
 * fronts without what was buffered: the SSE connection is dropped, the gRPC call aborted
 * (gantry_router_grpc_unsent_bytes back to 0 while the client's connection stays open); before,
 * a paused engine stream did not see its deadline at all, and once it did the buffer waited for
 * the client to leave.
 * Both fronts count a stream that fails after it started with the error's status, and one that
 * ends with a Final of finish_reason ERROR 500, as the non-streaming reply answers. */
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
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/clock.h"
#include "gantry/v1/router.pb-c.h"
#include "tests/common/redis_server.h"
#include "tests/integration/router_harness.h"

static int engine_idle(fe_t *f) { return fe_active(f) == 0; }

#define WT_METRIC "gantry_router_rejections_total{reason=\"client_write_timeout\"}"
#define GEN_METRIC(status) "gantry_router_requests_total{route=\"grpc:Generate\",status=\"" status "\"}"
#define CHAT_METRIC(status) "gantry_router_requests_total{route=\"/v1/chat/completions\",status=\"" status "\"}"

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

/* Polls the router's /metrics until pred(value of name) holds (up to ms); returns the last value. */
static long long wait_metric(rp_t *rp, const char *name, int (*pred)(long long), int ms) {
  double until = gt_now_ms() + ms;
  long long v = rp_metric(rp, name, NULL);
  while (!pred(v) && gt_now_ms() < until) {
    usleep(20000);
    v = rp_metric(rp, name, NULL);
  }
  return v;
}
static int is_zero(long long v) { return v == 0; }
static int is_one(long long v) { return v == 1; }
static int at_least_one(long long v) { return v >= 1; }
static int over_1mib(long long v) { return v >= 1 << 20; }

static void test_unread_stream_bounded_and_cancelled(void **st) {
  (void)st;
  rstack_t k;
  rstack_start(&k, "A", (const char *[]){"--health-ms", "100", "--stream-write-timeout-s", "2", NULL});
  rp_t rp = k.rp;
  fe_t *fe = k.fe;
  assert_true(rp_wait_ready(&rp, 20000));
  const long rss0 = rp_peak_rss_kib(&rp);
  assert_true(rss0 > 0);

  int fd = send_unread_stream(rp.http_port, "FLOOD", 4096); /* 64 MiB of tokens */
  /* the write timeout (2 s after the buffer filled) cancels the request */
  wait_metric(&rp, WT_METRIC, at_least_one, 20000);
  assert_int_equal(rp_metric(&rp, WT_METRIC, NULL), 1); /* read again: exactly one, not just the first */
  assert_true(fe_wait(fe, engine_idle, 5000));
  const long grown = rp_peak_rss_kib(&rp) - rss0;
  printf("router peak RSS grew by %ld KiB while a client did not read a 64 MiB stream\n", grown);
#ifndef __SANITIZE_ADDRESS__ /* ASan's quarantine keeps freed memory resident */
  assert_true(grown < 16 * 1024);
#endif
  /* the lease came back and the router answers others */
  assert_int_equal(wait_metric(&rp, "gantry_router_leases_held", is_zero, 5000), 0);
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
  assert_int_equal(rstack_stop(&k), 0);
}

#define UNSENT_METRIC "gantry_router_grpc_unsent_bytes"

/* Reads fd until the peer ends the connection (EOF or reset) or ms pass; returns 1 if it ended,
 * *total the bytes read. */
static int read_until_closed(int fd, int ms, size_t *total) {
  double end = gt_now_ms() + ms;
  char buf[65536];
  *total = 0;
  while (gt_now_ms() < end) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, 50) <= 0) continue;
    ssize_t n = read(fd, buf, sizeof buf);
    if (n <= 0) return 1;
    *total += (size_t)n;
  }
  return 0;
}

/* A request that fails while its SSE stream is paused (--request-timeout-s passes while the client
 * reads nothing) drops the connection with what was buffered for it; the error event would
 * otherwise wait behind the buffer as long as the client keeps the connection. */
static void test_unread_stream_failure_drops_connection(void **st) {
  (void)st;
  rstack_t k;
  rstack_start(&k, "A", (const char *[]){"--health-ms", "100", "--stream-write-timeout-s", "60", "--request-timeout-s",
                                         "2", NULL});
  rp_t rp = k.rp;
  assert_true(rp_wait_ready(&rp, 20000));
  int fd = send_unread_stream(rp.http_port, "FLOOD", 4096);
  assert_int_equal(wait_metric(&rp, "gantry_router_leases_held", is_one, 10000), 1);
  const double t0 = gt_now_ms();
  assert_int_equal(wait_metric(&rp, "gantry_router_leases_held", is_zero, 10000), 0);
  size_t total = 0;
  const int closed = read_until_closed(fd, 5000, &total);
  printf("paused SSE stream failed: connection ended %.0f ms after the lease went back, %zu bytes read\n",
         gt_now_ms() - t0, total);
  assert_true(closed);
  assert_int_equal(rp_metric(&rp, WT_METRIC, NULL), -1); /* not the write timeout (60 s) */
  /* counted once, as failed with the deadline's status, like the gRPC front; before: 200 */
  assert_int_equal(wait_metric(&rp, CHAT_METRIC("504"), is_one, 5000), 1);
  assert_int_equal(rp_metric(&rp, CHAT_METRIC("200"), NULL), -1);
  close(fd);
  assert_int_equal(rstack_stop(&k), 0);
}

/* ---- raw HTTP/2 ---- */
static void h2_frame(int fd, uint8_t type, uint8_t flags, uint32_t stream, const void *payload, size_t n) {
  uint8_t h[9] = {(uint8_t)(n >> 16), (uint8_t)(n >> 8), (uint8_t)n, type, flags,
                  (uint8_t)(stream >> 24), (uint8_t)(stream >> 16), (uint8_t)(stream >> 8), (uint8_t)stream};
  assert_int_equal(write(fd, h, 9), 9);
  if (n) assert_int_equal(write(fd, payload, n), (ssize_t)n);
}

/* HPACK literal header field without indexing, new name (names and values < 127 bytes). */
static size_t hpack_lit(uint8_t *p, const char *name, const char *value) {
  size_t k = 0, nl = strlen(name), vl = strlen(value);
  p[k++] = 0x00;
  p[k++] = (uint8_t)nl;
  memcpy(p + k, name, nl);
  k += nl;
  p[k++] = (uint8_t)vl;
  memcpy(p + k, value, vl);
  return k + vl;
}

/* Reads frames until stream 1 is ended by the server (HEADERS with END_STREAM, or RST_STREAM)
 * or ms pass; answers the server's SETTINGS. Returns 1 if it was ended. */
static int h2_wait_stream_end(int fd, int ms) {
  double end = gt_now_ms() + ms;
  uint8_t buf[1 << 16];
  size_t have = 0;
  while (gt_now_ms() < end) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, 50) <= 0) continue;
    ssize_t n = read(fd, buf + have, sizeof buf - have);
    if (n <= 0) return 0;
    have += (size_t)n;
    while (have >= 9) {
      size_t len = ((size_t)buf[0] << 16) | ((size_t)buf[1] << 8) | buf[2];
      if (have < 9 + len) break;
      uint8_t type = buf[3], flags = buf[4];
      uint32_t sid = (((uint32_t)buf[5] & 0x7f) << 24) | ((uint32_t)buf[6] << 16) | ((uint32_t)buf[7] << 8) | buf[8];
      if (type == 4 && !(flags & 1)) h2_frame(fd, 4, 1, 0, NULL, 0); /* SETTINGS -> ACK */
      if (sid == 1 && ((type == 1 && (flags & 1)) || type == 3)) return 1;
      memmove(buf, buf + 9 + len, have - 9 - len);
      have -= 9 + len;
    }
  }
  return 0;
}

/* Connects to the router's gRPC port (rcvbuf > 0: that SO_RCVBUF), sends the preface, an empty
 * SETTINGS (defaults: a 64 KiB initial window) and the HEADERS of a Generate call on stream 1. */
static int h2_open_generate(int port, int rcvbuf) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  assert_true(fd >= 0);
  if (rcvbuf > 0) setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
  const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
  assert_int_equal(write(fd, preface, sizeof preface - 1), (ssize_t)(sizeof preface - 1));
  h2_frame(fd, 4, 0, 0, NULL, 0); /* SETTINGS */
  uint8_t hb[512];
  size_t hl = 0;
  hl += hpack_lit(hb + hl, ":method", "POST");
  hl += hpack_lit(hb + hl, ":scheme", "http");
  hl += hpack_lit(hb + hl, ":path", "/gantry.v1.Router/Generate");
  hl += hpack_lit(hb + hl, ":authority", "localhost");
  hl += hpack_lit(hb + hl, "content-type", "application/grpc");
  hl += hpack_lit(hb + hl, "te", "trailers");
  h2_frame(fd, 1, 0x4, 1, hb, hl); /* HEADERS, END_HEADERS */
  return fd;
}

/* Sends the request message of the Generate call opened by h2_open_generate (model "tiny"). */
static void h2_send_generate(int fd, const char *prompt, uint32_t max_tokens) {
  Gantry__V1__GenerateRequest g = GANTRY__V1__GENERATE_REQUEST__INIT;
  g.input_case = GANTRY__V1__GENERATE_REQUEST__INPUT_PROMPT;
  g.prompt = (char *)prompt;
  g.max_tokens_opt_case = GANTRY__V1__GENERATE_REQUEST__MAX_TOKENS_OPT_MAX_TOKENS;
  g.max_tokens = max_tokens;
  Gantry__V1__RouterGenerateRequest r = GANTRY__V1__ROUTER_GENERATE_REQUEST__INIT;
  r.model = "tiny";
  r.request = &g;
  uint8_t msg[256];
  size_t ml = protobuf_c_message_get_packed_size(&r.base);
  assert_true(ml + 5 <= sizeof msg);
  msg[0] = 0;
  msg[1] = (uint8_t)(ml >> 24), msg[2] = (uint8_t)(ml >> 16), msg[3] = (uint8_t)(ml >> 8), msg[4] = (uint8_t)ml;
  protobuf_c_message_pack(&r.base, msg + 5);
  h2_frame(fd, 0, 0x1, 1, msg, ml + 5); /* DATA, END_STREAM */
}

static void test_grpc_half_sent_message_deadline(void **st) {
  (void)st;
  rstack_t k;
  rstack_start(&k, "A", (const char *[]){"--grpc", "127.0.0.1:0", "--http-timeout-s", "1", NULL});
  rp_t rp = k.rp;
  int fd = h2_open_generate(rp.grpc_port, 0);
  /* a message declared as 60000 bytes, of which 1000 are sent */
  static uint8_t data[1005];
  const uint32_t declared = 60000;
  data[1] = (uint8_t)(declared >> 24);
  data[2] = (uint8_t)(declared >> 16);
  data[3] = (uint8_t)(declared >> 8);
  data[4] = (uint8_t)declared;
  h2_frame(fd, 0, 0, 1, data, sizeof data);
  const double t0 = gt_now_ms();
  const int ended = h2_wait_stream_end(fd, 6000);
  printf("half-sent gRPC message: stream ended by the router after %.0f ms (--http-timeout-s 1)\n", gt_now_ms() - t0);
  assert_true(ended);
  close(fd);
  assert_int_equal(rstack_stop(&k), 0);
}

static void test_grpc_unread_stream_bounded_and_cancelled(void **st) {
  (void)st;
  rstack_t k;
  rstack_start(&k, "A", (const char *[]){"--grpc", "127.0.0.1:0", "--health-ms", "100", "--stream-write-timeout-s", "2", NULL});
  rp_t rp = k.rp;
  assert_true(rp_wait_ready(&rp, 20000));
  const long rss0 = rp_peak_rss_kib(&rp);
  int fd = h2_open_generate(rp.grpc_port, 4096);
  h2_send_generate(fd, "FLOOD", 4000); /* 4000 tokens of 16 KiB: 62.5 MiB */
  /* the server's first frames (its SETTINGS acknowledged); never a WINDOW_UPDATE, so the stream's
   * window stays at 64 KiB; the stream must not end this early */
  assert_false(h2_wait_stream_end(fd, 300));
  /* from here on the client reads nothing: the write timeout cancels the request */
  wait_metric(&rp, WT_METRIC, at_least_one, 20000);
  assert_int_equal(rp_metric(&rp, WT_METRIC, NULL), 1); /* read again: exactly one, not just the first */
  /* counted once, as a client that went away (499), like the HTTP front's write timeout */
  assert_int_equal(rp_metric(&rp, GEN_METRIC("499"), NULL), 1);
  assert_int_equal(rp_metric(&rp, GEN_METRIC("200"), NULL), -1);
  assert_true(fe_wait(k.fe, engine_idle, 5000));
  const long grown = rp_peak_rss_kib(&rp) - rss0;
  printf("router peak RSS grew by %ld KiB while a gRPC client did not read a 62.5 MiB stream\n", grown);
#ifndef __SANITIZE_ADDRESS__
  assert_true(grown < 16 * 1024);
#endif
  assert_int_equal(wait_metric(&rp, "gantry_router_leases_held", is_zero, 5000), 0);
  /* the stream was ended by the router (RST_STREAM or trailers behind what the client reads now) */
  assert_true(h2_wait_stream_end(fd, 5000));
  close(fd);
  assert_int_equal(rstack_stop(&k), 0);
}

/* A request that fails while its gRPC stream is paused (here: --request-timeout-s passes while
 * the client reads nothing) ends the call and drops what was queued for it at once; before, the
 * ~1 MiB stayed allocated until the client's connection dropped. */
static void test_grpc_paused_stream_failure_frees_output(void **st) {
  (void)st;
  rstack_t k;
  rstack_start(&k, "A", (const char *[]){"--grpc", "127.0.0.1:0", "--health-ms", "100", "--stream-write-timeout-s", "60",
                                         "--request-timeout-s", "2", NULL});
  rp_t rp = k.rp;
  assert_true(rp_wait_ready(&rp, 20000));
  assert_int_equal(rp_metric(&rp, UNSENT_METRIC, NULL), 0);
  int fd = h2_open_generate(rp.grpc_port, 4096);
  h2_send_generate(fd, "FLOOD", 4000);
  assert_false(h2_wait_stream_end(fd, 300)); /* the server's SETTINGS answered; then no more reads */
  const long long paused = wait_metric(&rp, UNSENT_METRIC, over_1mib, 10000);
  assert_true(paused >= 1 << 20); /* the stream is paused with the bound queued */
  /* the engine stream's deadline (2 s) fails the request; its lease goes back */
  assert_int_equal(wait_metric(&rp, "gantry_router_leases_held", is_zero, 10000), 0);
  const long long after = wait_metric(&rp, UNSENT_METRIC, is_zero, 5000);
  printf("paused gRPC stream: %lld bytes queued; after the request failed: %lld (connection still open)\n", paused,
         after);
  assert_int_equal(after, 0);
  assert_int_equal(rp_metric(&rp, GEN_METRIC("504"), NULL), 1); /* counted once, with the deadline's status */
  assert_int_equal(rp_metric(&rp, GEN_METRIC("200"), NULL), -1);
  /* the call was ended by the router (RST_STREAM: the queued output was dropped) */
  assert_true(h2_wait_stream_end(fd, 5000));
  close(fd);
  assert_int_equal(rstack_stop(&k), 0);
}

/* POST /v1/chat/completions of content prompt (stream or not): the HTTP status is want and the
 * body holds text. */
static void chat_expect(const rp_t *rp, const char *prompt, bool stream, long want, const char *text) {
  char req[256];
  snprintf(req, sizeof req, "{\"model\":\"tiny\",\"stream\":%s,\"messages\":[{\"role\":\"user\",\"content\":\"%s\"}]}",
           stream ? "true" : "false", prompt);
  const char *h[] = {"Content-Type: application/json", NULL};
  char *b = NULL;
  assert_int_equal(http_req(rp->http_port, "POST", "/v1/chat/completions", h, req, strlen(req), &b, NULL), want);
  assert_non_null(b);
  assert_non_null(strstr(b, text));
  free(b);
}

/* A gRPC Generate of prompt (raw HTTP/2), until the router ends it. */
static void generate_to_end(const rp_t *rp, const char *prompt) {
  int fd = h2_open_generate(rp->grpc_port, 0);
  h2_send_generate(fd, prompt, 50);
  assert_true(h2_wait_stream_end(fd, 10000));
  close(fd);
}

/* gantry_router_requests_total: n_chat chat requests counted as chat (CHAT_METRIC(status)) and
 * one Generate as gen (GEN_METRIC(status)), none of either with 200. */
static void assert_failed_counted(rp_t *rp, const char *chat, const char *gen, long long n_chat) {
  assert_int_equal(wait_metric(rp, gen, is_one, 5000), 1);
  assert_int_equal(rp_metric(rp, chat, NULL), n_chat);
  assert_int_equal(rp_metric(rp, CHAT_METRIC("200"), NULL), -1);
  assert_int_equal(rp_metric(rp, GEN_METRIC("200"), NULL), -1);
}

static void start_with_grpc(rstack_t *k) {
  rstack_start(k, "A", (const char *[]){"--grpc", "127.0.0.1:0", "--health-ms", "100", NULL});
  assert_true(rp_wait_ready(&k->rp, 20000));
}

/* An engine that dies after the first token (DIE): the SSE stream (status line 200) and the gRPC
 * stream (trailers OK, final message with an error) both failed, and both fronts count them the
 * same way in gantry_router_requests_total: once, with the error's status (503), never as 200.
 * Before, the HTTP front counted its stream 200 and the gRPC front 503. */
static void test_stream_failure_counted_alike(void **st) {
  (void)st;
  rstack_t k;
  start_with_grpc(&k);
  chat_expect(&k.rp, "DIE", true, 200, "partial"); /* it had started */
  generate_to_end(&k.rp, "DIE");
  assert_failed_counted(&k.rp, CHAT_METRIC("503"), GEN_METRIC("503"), 1);
  assert_int_equal(rstack_stop(&k), 0);
}

/* An engine whose stream ends with a Final of finish_reason ERROR after a token (FAILFINAL): the
 * non-streaming reply is a 500, the SSE stream (status line 200) ends with an error event, the
 * gRPC call ends OK with that Final. All three are counted 500 in gantry_router_requests_total.
 * Before, the SSE stream and the gRPC call were counted 200. */
static void test_error_final_counted_alike(void **st) {
  (void)st;
  rstack_t k;
  start_with_grpc(&k);
  chat_expect(&k.rp, "FAILFINAL", false, 500, "sampling failed");
  chat_expect(&k.rp, "FAILFINAL", true, 200, "sampling failed"); /* the error event */
  generate_to_end(&k.rp, "FAILFINAL");
  assert_failed_counted(&k.rp, CHAT_METRIC("500"), GEN_METRIC("500"), 2);
  assert_int_equal(rstack_stop(&k), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_unread_stream_bounded_and_cancelled),
                                     cmocka_unit_test(test_unread_stream_failure_drops_connection),
                                     cmocka_unit_test(test_grpc_half_sent_message_deadline),
                                     cmocka_unit_test(test_grpc_unread_stream_bounded_and_cancelled),
                                     cmocka_unit_test(test_grpc_paused_stream_failure_frees_output),
                                     cmocka_unit_test(test_stream_failure_counted_alike),
                                     cmocka_unit_test(test_error_final_counted_alike)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
