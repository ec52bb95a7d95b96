/* tests/integration/test_router_memory.c — router memory per request (issue 26): a real
 * redis-server, the real `gantry-engine serve` (tests/golden/qwen3-tiny, model "tiny"), the fake
 * engine of router_harness (model "fake": "PACE 100 4096" sends 4 KiB of text per token) and two
 * router binaries: one with the defaults, one with --max-response-bytes 1 MiB and one slot per
 * pool.
 * - A stream keeps no whole-response copy of what it sent: n = 4 choices of 400 tokens with
 *   top_logprobs 20 (~17 KB of JSON objects per token) leave the router's peak RSS (VmHWM, /proc)
 *   within a few MB of where it was; before, every entry was also kept for a body never built
 *   (~27 MB for this request, 14 -> 559 MB for n = 16 x 2,000 tokens).
 * - A non-streaming body is kept as JSON text, not as a jansson tree: the same request not
 *   streamed (a 2.3 MB body) costs a few MB (before: +31 MB; n = 8 x 2,000: 14 -> 331 MB).
 * - --max-response-bytes: a non-streaming request whose response could pass it is refused before
 *   admission (400 response_too_large), one whose output passes it anyway (PACE) is cancelled
 *   with the same error, its engine stream cancelled and its slot freed, RSS bounded; a request
 *   under the limit, with logprobs, is answered whole. */
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
#include <jansson.h>

#include "tests/common/redis_server.h"
#include "tests/integration/router_harness.h"

static rs_t *g_rs;
static ep_t g_eng;
static rp_t g_rp;
static fe_t *g_fe;
static rp_t g_small; /* --max-response-bytes SMALL_LIMIT, --default-max-inflight 1 */
#define SMALL_LIMIT (1 << 20)
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
  g_fe = fe_start("fake");
  assert_non_null(g_fe);
  char fake[64], limit[32];
  snprintf(fake, sizeof fake, "fake=127.0.0.1:%d", fe_port(g_fe));
  snprintf(limit, sizeof limit, "%d", SMALL_LIMIT);
  /* one slot per pool: a lease that is not given back stalls the next request (queue timeout) */
  assert_int_equal(rp_start(&g_small, (const char *const[]){"--redis", redis, "--engine", eng, "--engine", fake,
                                                             "--health-ms", "200", "--max-response-bytes", limit,
                                                             "--default-max-inflight", "1", "--queue-timeout-ms",
                                                             "5000", NULL}),
                   0);
  assert_true(rp_wait_ready(&g_small, 30000));
  return 0;
}

static int teardown(void **st) {
  (void)st;
  int rc = rp_stop(&g_rp);
  int rc2 = rp_stop(&g_small);
  fe_stop(g_fe);
  ep_stop(&g_eng);
  rs_stop(g_rs);
  unlink(g_log);
  assert_int_equal(rc, 0);
  assert_int_equal(rc2, 0);
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

/* POSTs a chat completion to router r; returns the status, *body the answer (caller frees). */
static long chat(const rp_t *r, const char *model, const char *content, const char *extra, char **body) {
  char req[768];
  snprintf(req, sizeof req, "{\"model\":\"%s\",\"messages\":[{\"role\":\"user\",\"content\":\"%s\"}]%s%s}", model,
           content, extra[0] ? "," : "", extra);
  *body = NULL;
  return http_req(r->http_port, "POST", "/v1/chat/completions", JSON_HDR, req, strlen(req), body, NULL);
}

/* The error code of an OpenAI error body ("" when there is none). */
static void error_code(const char *body, char *out, size_t n) {
  json_t *j = json_loads(body ? body : "", 0, NULL);
  const char *c = json_string_value(json_object_get(json_object_get(j, "error"), "code"));
  snprintf(out, n, "%s", c ? c : "");
  json_decref(j);
}

static int g_want_cancels; /* cancels_seen: how many cancelled calls the fake engine must have seen */
static int cancels_seen(fe_t *f) { return fe_cancelled(f) >= g_want_cancels; }

/* The same request as test_streamed_logprobs_bounded, not streamed: its 2.3 MB body is built as
 * text (a jansson tree of its logprobs took ~17 KB per token: +31 MB here). */
static void test_nonstreamed_logprobs_cost_their_size(void **st) {
  (void)st;
  char *b = NULL;
  const char *args = "\"max_tokens\":400,\"n\":4,\"logprobs\":true,\"top_logprobs\":20,\"ignore_eos\":true,\"temperature\":1";
  assert_int_equal(chat(&g_rp, "tiny", "Once upon a time", "\"max_tokens\":8", &b), 200); /* warm-up */
  free(b);
  const long base = rp_peak_rss_kib(&g_rp);
  const long s = chat(&g_rp, "tiny", "Once upon a time", args, &b);
  const long peak = rp_peak_rss_kib(&g_rp);
  if (s != 200) fail_msg("%ld %.300s", s, b ? b : "");
  json_t *j = json_loads(b, JSON_ALLOW_NUL, NULL); /* the vocabulary has a NUL byte token */
  assert_non_null(j);
  json_t *ch = json_object_get(j, "choices");
  assert_int_equal(json_array_size(ch), 4);
  for (size_t i = 0; i < 4; i++) {
    json_t *lp = json_object_get(json_object_get(json_array_get(ch, i), "logprobs"), "content");
    assert_int_equal(json_array_size(lp), 400);
    assert_int_equal(json_array_size(json_object_get(json_array_get(lp, 399), "top_logprobs")), 20);
  }
  print_message("router VmHWM %ld -> %ld KiB for a %zu-byte non-streaming body\n", base, peak, strlen(b));
  json_decref(j);
  assert_true(peak - base < 12 * 1024); /* the body and its pieces: ~2 x 2.3 MB; the tree: +31 MB */
  free(b);
}

/* (a) Refused at admission: the estimate (2,000 tokens x ~2 KB of logprobs; 4 choices x 200) is
 * over 1 MiB. The engine never sees it; the same request streamed, and a smaller one not
 * streamed, are served. */
static void test_response_over_limit_refused(void **st) {
  (void)st;
  char *b = NULL, code[64];
  const int gens = fe_generates(g_fe);
  long s = chat(&g_small, "fake", "hello", "\"max_tokens\":2000,\"logprobs\":true,\"top_logprobs\":20", &b);
  error_code(b, code, sizeof code);
  if (s != 400 || strcmp(code, "response_too_large")) fail_msg("%ld %.400s", s, b ? b : "");
  assert_non_null(strstr(b, "\"param\":\"max_tokens\""));
  assert_non_null(strstr(b, "stream: true"));
  free(b);
  /* n counts: 200 tokens pass (~413 KB), 4 choices of them do not */
  s = chat(&g_small, "fake", "hello", "\"max_tokens\":200,\"n\":4,\"logprobs\":true,\"top_logprobs\":20", &b);
  error_code(b, code, sizeof code);
  if (s != 400 || strcmp(code, "response_too_large")) fail_msg("n: %ld %.400s", s, b ? b : "");
  free(b);
  /* max_tokens unset: up to the context (the fake engine says 4096 tokens) x 2 KB per token */
  s = chat(&g_small, "fake", "hello", "\"logprobs\":true,\"top_logprobs\":20", &b);
  error_code(b, code, sizeof code);
  if (s != 400 || strcmp(code, "response_too_large")) fail_msg("%ld %.400s", s, b ? b : "");
  free(b);
  assert_int_equal(fe_generates(g_fe), gens); /* refused before admission */
  s = chat(&g_small, "fake", "hello", "\"max_tokens\":2000,\"logprobs\":true,\"top_logprobs\":20,\"stream\":true", &b);
  if (s != 200 || !strstr(b, "data: [DONE]")) fail_msg("streamed: %ld %.300s", s, b ? b : "");
  free(b);
  s = chat(&g_small, "fake", "hello", "\"max_tokens\":200,\"logprobs\":true,\"top_logprobs\":20", &b);
  if (s != 200) fail_msg("small: %ld %.300s", s, b ? b : "");
  free(b);
  assert_int_equal(fe_generates(g_fe), gens + 2);
}

/* (b) The backstop: "PACE 100 4096" tokens carry 4 KiB of text each (one per 100 us), far over
 * the estimate's 16 B, so the request is admitted; its body would be 4,000 x 4 KiB = 16 MB. Once
 * what it accumulated passes 1 MiB the router ends it with the same 400, cancels the engine
 * stream and frees the slot (one per pool: the next request would time out in the queue
 * otherwise); its RSS grows by about 1 MiB. The same for a streamed /v1/responses, whose
 * response object keeps its text (counted 12 times: the four events of its end, the record). */
static void test_response_passing_limit_cancelled(void **st) {
  (void)st;
  char *b = NULL, code[64];
  long s = chat(&g_small, "fake", "hello", "\"max_tokens\":4", &b); /* warm-up */
  assert_int_equal(s, 200);
  free(b);
  const int cancelled = fe_cancelled(g_fe);
  const long base = rp_peak_rss_kib(&g_small);
  s = chat(&g_small, "fake", "PACE 100 4096", "\"max_tokens\":4000", &b);
  const long peak = rp_peak_rss_kib(&g_small);
  error_code(b, code, sizeof code);
  if (s != 400 || strcmp(code, "response_too_large")) fail_msg("%ld %.300s", s, b ? b : "");
  assert_non_null(strstr(b, "--max-response-bytes"));
  free(b);
  print_message("router VmHWM %ld -> %ld KiB for a 16 MB response cut at %d bytes\n", base, peak, SMALL_LIMIT);
  assert_true(peak - base < 8 * 1024);
  g_want_cancels = cancelled + 1;
  assert_true(fe_wait(g_fe, cancels_seen, 10000)); /* the engine stream was cancelled, not run to its end */
  s = chat(&g_small, "fake", "hello", "\"max_tokens\":4", &b); /* the slot is free */
  if (s != 200) fail_msg("after: %ld %.300s", s, b ? b : "");
  free(b);

  const char *rq = "{\"model\":\"fake\",\"input\":\"PACE 100 4096\",\"max_output_tokens\":4000,\"stream\":true}";
  s = http_req(g_small.http_port, "POST", "/v1/responses", JSON_HDR, rq, strlen(rq), &b, NULL);
  if (s != 200 || !strstr(b, "event: error") || !strstr(b, "response_too_large"))
    fail_msg("responses: %ld %.300s", s, b ? b : "");
  assert_null(strstr(b, "response.completed"));
  assert_true(strlen(b) < 4 * SMALL_LIMIT);
  free(b);
  g_want_cancels = cancelled + 2;
  assert_true(fe_wait(g_fe, cancels_seen, 10000));
  s = chat(&g_small, "fake", "hello", "\"max_tokens\":4", &b);
  if (s != 200) fail_msg("after responses: %ld %.300s", s, b ? b : "");
  free(b);
}

/* (c) Under the limit: a real engine's non-streaming answer with logprobs, whole (n 2 x 50 tokens x
 * 21 entries ~ 145 KB, estimated 207 KB < 1 MiB). */
static void test_response_under_limit_whole(void **st) {
  (void)st;
  char *b = NULL;
  const long s = chat(&g_small, "tiny", "Once upon a time",
                      "\"max_tokens\":50,\"n\":2,\"logprobs\":true,\"top_logprobs\":20,\"ignore_eos\":true", &b);
  if (s != 200) fail_msg("%ld %.300s", s, b ? b : "");
  json_t *j = json_loads(b, JSON_ALLOW_NUL, NULL);
  assert_non_null(j);
  json_t *ch = json_object_get(j, "choices");
  assert_int_equal(json_array_size(ch), 2);
  for (size_t i = 0; i < 2; i++) {
    json_t *c = json_array_get(ch, i);
    assert_int_equal(json_array_size(json_object_get(json_object_get(c, "logprobs"), "content")), 50);
    assert_string_equal(json_string_value(json_object_get(c, "finish_reason")), "length");
  }
  assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "usage"), "completion_tokens")), 100);
  json_decref(j);
  free(b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_streamed_logprobs_bounded),
      cmocka_unit_test(test_nonstreamed_logprobs_cost_their_size),
      cmocka_unit_test(test_response_over_limit_refused),
      cmocka_unit_test(test_response_passing_limit_cancelled),
      cmocka_unit_test(test_response_under_limit_whole),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
