/* tests/integration/test_router_memory.c — router memory under streamed logprobs (issue 26):
 * a real redis-server, the real `gantry-engine serve` (tests/golden/qwen3-tiny) and the router
 * binary. A stream keeps no whole-response copy of what it sent: n = 4 choices of 400 tokens with
 * top_logprobs 20 (~17 KB of JSON per token) leave the router's peak RSS (VmHWM, /proc) within
 * a few MB of where it was; before, every entry was also kept for a body never built
 * (~27 MB for this request, 14 -> 559 MB for n = 16 x 2,000 tokens). */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests/common/redis_server.h"
#include "tests/integration/router_harness.h"

static rs_t *g_rs;
static ep_t g_eng;
static rp_t g_rp;
static char g_log[] = "/tmp/gantry-memtest-XXXXXX";

static const char *JSON_HDR[] = {"Content-Type: application/json", NULL};

static int setup(void **st) {
  (void)st;
  gt_err_t err;
  g_rs = rs_start(&err);
  if (!g_rs) fail_msg("redis: %s", err.msg);
  int fd = mkstemp(g_log);
  assert_true(fd >= 0);
  if (ep_start(&g_eng, g_log, (const char *const[]){"--listen", "127.0.0.1:0", "--metrics-port", "-1", "--max-num-seqs", "8",
                                                    NULL}))
    fail_msg("engine did not start (log %s)", g_log);
  /* in the ASan build freed memory waits in a quarantine (256 MB) and counts in the RSS: the
   * router gets none, so its RSS shows what it holds */
  const char *ao = getenv("ASAN_OPTIONS");
  char opts[512];
  snprintf(opts, sizeof opts, "%s%squarantine_size_mb=0:thread_local_quarantine_size_kb=0", ao ? ao : "", ao && ao[0] ? ":" : "");
  setenv("ASAN_OPTIONS", opts, 1);
  char redis[64], eng[64];
  snprintf(redis, sizeof redis, "redis://127.0.0.1:%d", rs_port(g_rs));
  snprintf(eng, sizeof eng, "tiny=127.0.0.1:%d", g_eng.grpc_port);
  assert_int_equal(rp_start(&g_rp, (const char *const[]){"--redis", redis, "--engine", eng, "--health-ms", "200", NULL}), 0);
  assert_true(rp_wait_ready(&g_rp, 30000));
  return 0;
}

static int teardown(void **st) {
  (void)st;
  int rc = rp_stop(&g_rp);
  ep_stop(&g_eng);
  rs_stop(g_rs);
  unlink(g_log);
  assert_int_equal(rc, 0);
  return 0;
}

/* Streams a chat completion; returns the number of logprobs.content entries received. */
static long stream_chat(int n, int max_tokens, int top) {
  char req[512];
  snprintf(req, sizeof req,
           "{\"model\":\"tiny\",\"messages\":[{\"role\":\"user\",\"content\":\"Once upon a time\"}],\"max_tokens\":%d,"
           "\"n\":%d,\"logprobs\":true,\"top_logprobs\":%d,\"stream\":true,\"ignore_eos\":true,\"temperature\":1}",
           max_tokens, n, top);
  char *b = NULL;
  long s = http_req(g_rp.http_port, "POST", "/v1/chat/completions", JSON_HDR, req, strlen(req), &b, NULL);
  if (s != 200) fail_msg("stream: %ld %.300s", s, b ? b : "");
  long entries = 0;
  for (const char *p = b; (p = strstr(p, "\"top_logprobs\":[")); p++) entries++;
  assert_non_null(strstr(b, "data: [DONE]"));
  free(b);
  return entries;
}

static void test_streamed_logprobs_bounded(void **st) {
  (void)st;
  stream_chat(1, 8, 20); /* warm-up: buffers, connections */
  const long base = rp_peak_rss_kib(&g_rp);
  const long entries = stream_chat(4, 400, 20);
  const long peak = rp_peak_rss_kib(&g_rp);
  print_message("router VmHWM %ld -> %ld KiB over %ld streamed logprob entries\n", base, peak, entries);
  assert_int_equal(entries, 4 * 400);
  assert_true(base > 0);
  assert_true(peak - base < 6 * 1024); /* whole-response copies would add ~27 MB */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_streamed_logprobs_bounded),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
