/* tests/unit/test_bench_parse.c — SSE framing, chunk accounting with synthetic timestamps,
 * statistics and the CSV/SVG writers (no network). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clients/bench_dataset.h"
#include "clients/bench_out.h"
#include "clients/bench_prompt.h"
#include "clients/bench_slo.h"
#include "clients/bench_srvq.h"
#include "clients/bench_stats.h"
#include "clients/req.h"
#include "clients/sse.h"
#include "clients/svg.h"
#include "tests/common/testutil.h"
#ifdef GANTRY_HAVE_TOK
#include "clients/tok_local.h"
#endif

/* ---- SSE framing ---- */
typedef struct {
  char ev[16][128];
  int n;
} evs_t;

static int collect(void *ud, const char *d, size_t n) {
  evs_t *e = ud;
  assert_true(e->n < 16);
  assert_int_equal(strlen(d), n);
  snprintf(e->ev[e->n++], 128, "%s", d);
  return 0;
}

static void test_sse_framing_any_split(void **st) {
  (void)st;
  const char *stream = ": keep-alive comment\r\n"
                       "data: {\"a\":1}\r\n\r\n"
                       "event: message\nid: 7\ndata:{\"b\":2}\n\n"
                       "data: line1\ndata: line2\n\n"
                       "retry: 100\n\r"
                       "data: [DONE]\n\n";
  size_t len = strlen(stream);
  /* every split point, and byte by byte, gives the same events */
  for (size_t cut = 0; cut <= len + 1; cut++) {
    evs_t e = {0};
    gc_sse_t p;
    gc_sse_init(&p, collect, &e);
    if (cut == len + 1) {
      for (size_t i = 0; i < len; i++) assert_int_equal(gc_sse_feed(&p, stream + i, 1), 0);
    } else {
      assert_int_equal(gc_sse_feed(&p, stream, cut), 0);
      assert_int_equal(gc_sse_feed(&p, stream + cut, len - cut), 0);
    }
    assert_int_equal(gc_sse_finish(&p), 0);
    gc_sse_free(&p);
    assert_int_equal(e.n, 4);
    assert_string_equal(e.ev[0], "{\"a\":1}");
    assert_string_equal(e.ev[1], "{\"b\":2}");
    assert_string_equal(e.ev[2], "line1\nline2");
    assert_string_equal(e.ev[3], "[DONE]");
  }
}

static void test_sse_unterminated_last_event(void **st) {
  (void)st;
  evs_t e = {0};
  gc_sse_t p;
  gc_sse_init(&p, collect, &e);
  gc_sse_feed(&p, "data: x\n\ndata: tail", 19);
  assert_int_equal(e.n, 1);
  gc_sse_finish(&p); /* lenient: the tail still counts */
  assert_int_equal(e.n, 2);
  assert_string_equal(e.ev[1], "tail");
  gc_sse_free(&p);
}

/* ---- chunk accounting, synthetic times ---- */
#define MS(x) ((int64_t)llround((x) * 1000000.0))

static void feed(gc_req_t *r, double t_ms, const char *json) { gc_req_on_event(r, json, strlen(json), MS(t_ms)); }

static void test_req_counts_and_intervals(void **st) {
  (void)st;
  gc_req_t r;
  memset(&r, 0, sizeof r);
  r.keep_text = 1;
  gc_req_begin(&r, MS(1000));
  feed(&r, 1005, "{\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}");
  feed(&r, 1100, "{\"choices\":[{\"delta\":{\"reasoning\":\"hm\",\"reasoning_content\":\"hm\"}}]}");
  feed(&r, 1110, "{\"choices\":[{\"delta\":{\"content\":\"A\"}}]}");
  feed(&r, 1130, "{\"choices\":[{\"delta\":{\"content\":\"B\"}}]}");
  feed(&r, 1140, "{\"choices\":[{\"delta\":{\"content\":\"C\"},\"finish_reason\":\"stop\"}]}");
  feed(&r, 1141, "{\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":8,"
                 "\"prompt_tokens_details\":{\"cached_tokens\":4}}}");
  feed(&r, 1142, "[DONE]");
  gc_req_finish(&r, MS(1143));
  assert_null(r.error);
  assert_true(fabs(r.ttft_ms - 100) < 1e-6);
  assert_true(fabs(r.ttfc_ms - 110) < 1e-6);
  assert_int_equal(r.out_tokens, 8);
  /* no reasoning count from the server: 1 of 4 token chunks, estimated and flagged */
  assert_int_equal(r.reasoning_tokens, 2);
  assert_true(r.reasoning_estimated);
  assert_string_equal(r.reasoning, "hm");
  assert_string_equal(r.content, "ABC");
  assert_int_equal(r.cached_tokens, 4);
  /* 8 tokens over 4 chunks: 2 per chunk; intervals 10,20,10 ms -> 5,10,5 per token */
  assert_int_equal(r.n_ival, 3);
  assert_true(fabs(r.itl_median_ms - 5) < 1e-6);
  assert_string_equal(r.finish_reason, "stop");
  gc_req_free(&r);
}

static void test_req_bad_json_and_completions_text(void **st) {
  (void)st;
  gc_req_t r;
  memset(&r, 0, sizeof r);
  gc_req_begin(&r, 0);
  feed(&r, 10, "{\"choices\":[{\"text\":\"x\"}]}");
  feed(&r, 20, "{not json");
  feed(&r, 30, "[DONE]");
  gc_req_finish(&r, MS(31));
  assert_non_null(r.error);
  assert_non_null(strstr(r.error, "bad chunk JSON"));
  assert_int_equal(r.content_chunks, 1);
  gc_req_free(&r);
}

/* A held-back token's event (usage, empty text: /v1/completions while a UTF-8 character or a
 * possible stop string is incomplete) is no token chunk: its token arrives with the next one,
 * whose 20 ms are two tokens' intervals, not one token's. Tokens every 10 ms throughout. */
static void test_req_held_token_event(void **st) {
  (void)st;
  gc_req_t r;
  memset(&r, 0, sizeof r);
  gc_req_begin(&r, 0);
  feed(&r, 100, "{\"choices\":[{\"text\":\"a\"}],\"usage\":{\"completion_tokens\":1}}");
  feed(&r, 110, "{\"choices\":[{\"text\":\"\"}],\"usage\":{\"completion_tokens\":2}}");
  feed(&r, 120, "{\"choices\":[{\"text\":\"\\u00e9\"}],\"usage\":{\"completion_tokens\":3}}");
  feed(&r, 130, "{\"choices\":[{\"text\":\"b\"}],\"usage\":{\"completion_tokens\":4}}");
  feed(&r, 131, "{\"choices\":[{\"text\":\"\",\"finish_reason\":\"length\"}],\"usage\":{\"completion_tokens\":4}}");
  feed(&r, 132, "[DONE]");
  gc_req_finish(&r, MS(133));
  assert_null(r.error);
  assert_int_equal(r.out_tokens, 4);
  assert_int_equal(r.n_chunks, 3);
  assert_int_equal(r.n_ival, 2);
  double tot = 0;
  for (int i = 0; i < r.n_ival; i++) {
    assert_true(fabs(r.ival_ms[i] - 10) < 1e-6); /* before: 20 ms with weight 1 */
    tot += r.ival_w[i];
  }
  assert_true(fabs(tot - 3) < 1e-9);
  assert_true(fabs(r.itl_p99_ms - 10) < 1e-6);
  gc_req_free(&r);

  /* chat: a role-only first event that carries a token, an empty content delta mid-stream */
  memset(&r, 0, sizeof r);
  gc_req_begin(&r, 0);
  feed(&r, 100, "{\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}],\"usage\":{\"completion_tokens\":1}}");
  feed(&r, 110, "{\"choices\":[{\"delta\":{\"content\":\"x\"}}],\"usage\":{\"completion_tokens\":2}}");
  feed(&r, 120, "{\"choices\":[{\"delta\":{\"content\":\"\"}}],\"usage\":{\"completion_tokens\":3}}");
  feed(&r, 130, "{\"choices\":[{\"delta\":{\"content\":\"y\"}}],\"usage\":{\"completion_tokens\":4}}");
  feed(&r, 131, "[DONE]");
  gc_req_finish(&r, MS(132));
  assert_null(r.error);
  assert_int_equal(r.n_ival, 1);
  assert_true(fabs(r.ival_ms[0] - 10) < 1e-6);
  assert_true(fabs(r.ival_w[0] - 2) < 1e-9);
  gc_req_free(&r);
}

static void test_wmedian_percentile(void **st) {
  (void)st;
  double v[] = {10, 15, 12}, w[] = {3, 3, 2};
  assert_true(fabs(gc_wmedian(v, w, 3) - 12) < 1e-9);
  double e[] = {4, 1, 3, 2};
  assert_true(fabs(gc_wmedian(e, NULL, 4) - 2.5) < 1e-9);
  assert_true(gc_wmedian(e, NULL, 0) < 0);
  double p[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  assert_true(fabs(gc_percentile(p, 10, 50) - 5.5) < 1e-9);
  assert_true(fabs(gc_percentile(p, 10, 90) - 9.1) < 1e-9);
  assert_true(fabs(gc_percentile(p, 1, 90) - 1) < 1e-9);
}

/* Builds a finished request: ttft, then n tokens d ms apart, cached/prompt/reasoning. */
static void fake(gc_req_t *r, double t0, double ttft, int n, double d, int prompt, int cached, int reasoning) {
  memset(r, 0, sizeof *r);
  gc_req_begin(r, MS(t0));
  char buf[256];
  for (int i = 0; i < n; i++) {
    snprintf(buf, sizeof buf, "{\"choices\":[{\"delta\":{\"%s\":\"t\"}}],\"usage\":{\"prompt_tokens\":%d,"
             "\"completion_tokens\":%d,\"prompt_tokens_details\":{\"cached_tokens\":%d}}}",
             i < reasoning ? "reasoning" : "content", prompt, i + 1, cached);
    feed(r, t0 + ttft + i * d, buf);
  }
  feed(r, t0 + ttft + n * d, "[DONE]");
  gc_req_finish(r, MS(t0 + ttft + n * d));
}

static void test_cell_math(void **st) {
  (void)st;
  gc_req_t r[4];
  /* 2 users, 2 requests each; decode 10 ms/token; each request 100 ms TTFT + 9 x 10 ms */
  fake(&r[0], 0, 100, 10, 10, 200, 0, 2);
  fake(&r[1], 0, 120, 10, 10, 200, 100, 2);
  fake(&r[2], 190, 100, 10, 10, 200, 200, 2);
  fake(&r[3], 210, 140, 10, 10, 200, 100, 2);
  gc_cell_t c = {.concurrency = 2};
  assert_int_equal(gc_cell_compute(&c, r, 4, 0.4), 0);
  assert_int_equal(c.n_ok, 4);
  assert_true(fabs(c.itl_p50 - 10) < 1e-6);
  assert_true(fabs(c.decode_tps - 100) < 1e-6);           /* 1000 / 10 ms, not tokens/total time */
  assert_true(fabs(c.total_tps - 40 / 0.4) < 1e-6);       /* 40 tokens / 0.4 s */
  assert_true(fabs(c.chk - 100.0 * 2 / 100.0) < 1e-6);    /* decode x conc / total */
  assert_true(fabs(c.ttft_p50 - 110) < 1e-6);
  assert_true(fabs(c.ttft_p90 - 134) < 1e-6);
  assert_true(fabs(c.prefix_hit_pct - 50) < 1e-6);        /* 400 of 800 */
  assert_true(fabs(c.think_pct - 20) < 1e-6);             /* 8 of 40 */
  /* an errored request is counted apart and kept out of the timing */
  gc_req_free(&r[3]);
  memset(&r[3], 0, sizeof r[3]);
  gc_req_begin(&r[3], 0);
  r[3].http_status = 503;
  gc_req_finish(&r[3], MS(5));
  assert_int_equal(gc_cell_compute(&c, r, 4, 0.4), 0);
  assert_int_equal(c.n_err, 1);
  assert_non_null(strstr(c.first_error, "HTTP 503"));
  assert_true(fabs(c.total_tps - 30 / 0.4) < 1e-6);
  for (int i = 0; i < 4; i++) gc_req_free(&r[i]);
}


/* TPOT per request, p99 next to p50/p90, and goodput under SLOs. */
static void test_tpot_p99_goodput(void **st) {
  (void)st;
  gc_req_t r[5];
  fake(&r[0], 0, 50, 5, 10, 10, 0, 0);  /* e2e 100: TPOT (100-50)/4 = 12.5, intervals 4 x 10 */
  fake(&r[1], 0, 200, 5, 20, 10, 0, 0); /* e2e 300: TPOT 25, intervals 4 x 20 */
  fake(&r[2], 0, 80, 3, 40, 10, 0, 0);  /* e2e 200: TPOT 60, intervals 2 x 40 */
  fake(&r[3], 0, 30, 1, 10, 10, 0, 0);  /* one token: no TPOT, no interval */
  assert_true(fabs(r[0].tpot_ms - 12.5) < 1e-6);
  assert_true(fabs(r[2].tpot_ms - 60) < 1e-6);
  assert_true(r[3].tpot_ms < 0);
  assert_true(fabs(r[1].itl_p99_ms - 20) < 1e-6);
  memset(&r[4], 0, sizeof r[4]);
  gc_req_begin(&r[4], 0);
  r[4].http_status = 503;
  gc_req_finish(&r[4], MS(5));
  gc_cell_t c = {.concurrency = 2};
  assert_int_equal(gc_cell_compute(&c, r, 5, 0.5), 0);
  assert_true(fabs(c.tpot_p50 - 25) < 1e-6);
  assert_true(fabs(c.tpot_p90 - 53) < 1e-6);   /* 25 + 0.8 x 35 */
  assert_true(fabs(c.tpot_p99 - 59.3) < 1e-6); /* 25 + 0.98 x 35 */
  assert_true(fabs(c.ttft_p99 - (80 + 0.97 * 120)) < 1e-6); /* over 30, 50, 80, 200 */
  /* pooled intervals 10 (x4), 20 (x4), 40 (x2) */
  assert_true(fabs(c.itl_p50 - 20) < 1e-6);
  assert_true(fabs(c.itl_p90 - 40) < 1e-6);
  assert_true(fabs(c.itl_p99 - 40) < 1e-6);
  assert_false(c.implausible);
  assert_true(fabs(c.burst_pct) < 1e-9);

  gc_slo_t slo;
  gt_err_t err = {0};
  assert_int_equal(gc_slo_parse("ttft_ms=150,tpot_ms=30", &slo, &err), 0);
  gc_cell_goodput(&c, r, 5, &slo);
  assert_true(c.slo_set);
  assert_int_equal(c.n_good, 2); /* r0 and r3; r1 misses TTFT, r2 TPOT, r4 failed */
  assert_true(fabs(c.good_pct - 40) < 1e-9);
  assert_true(fabs(c.good_rps - 4) < 1e-9);
  assert_int_equal(gc_slo_parse("itl_ms=25", &slo, &err), 0);
  gc_cell_goodput(&c, r, 5, &slo);
  assert_int_equal(c.n_good, 3); /* r2's p99 interval is 40 ms */
  assert_int_equal(gc_slo_parse("e2e_ms=250,ttft_ms=1000", &slo, &err), 0);
  char buf[128];
  gc_slo_format(&slo, buf, sizeof buf);
  assert_string_equal(buf, "ttft_ms=1000,e2e_ms=250");
  gc_cell_goodput(&c, r, 5, &slo);
  assert_int_equal(c.n_good, 3); /* r1 took 300 ms */
  /* no objective: goodput is undefined, not 100 % */
  gc_slo_t none = {-1, -1, -1, -1};
  gc_cell_goodput(&c, r, 5, &none);
  assert_false(c.slo_set);
  assert_true(c.good_pct < 0);
  const char *bad[] = {"", "ttft_ms", "ttft=5", "ttft_ms=0", "ttft_ms=-3", "ttft_ms=5x", "ttft_ms=5,", "ttft_ms=5,ttft_ms=6",
                       "itl_ms=nan"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    err.msg[0] = 0;
    if (gc_slo_parse(bad[i], &slo, &err) != GT_EINVAL) fail_msg("--slo '%s' accepted", bad[i]);
    assert_non_null(strstr(err.msg, "--slo"));
  }
  for (int i = 0; i < 5; i++) gc_req_free(&r[i]);
}

/* Chunks that arrive within 0.1 ms of each other flag the cell, with the reason. */
static void test_implausible_bursts(void **st) {
  (void)st;
  gc_req_t r[2];
  fake(&r[0], 0, 20, 10, 0.004, 10, 0, 0); /* 9 intervals of 4 us: 250,000 tok/s per user */
  gc_cell_t c = {.concurrency = 1};
  assert_int_equal(gc_cell_compute(&c, r, 1, 0.1), 0);
  assert_true(c.implausible);
  assert_true(fabs(c.burst_pct - 100) < 1e-9);
  assert_true(fabs(c.itl_min_ms - 0.004) < 1e-9);
  assert_non_null(strstr(c.note_implausible, "250000 tok/s per user"));
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  gc_table_row(f, &c);
  fclose(f);
  assert_non_null(strstr(buf, "IMPLAUSIBLE"));
  assert_non_null(strstr(buf, "\n  ! implausible: 100.0% of token intervals < 0.1 ms"));
  free(buf);
  gc_req_free(&r[0]);
  /* the share decides: 9 burst intervals of 20 pass (45 %: the median is still a real interval),
   * 10 of 20 do not (50 %) */
  for (int bursts = 9; bursts <= 10; bursts++) {
    fake(&r[0], 0, 20, 11, 10, 10, 0, 0); /* 10 intervals of 10 ms */
    fake(&r[1], 0, 20, 11, 10, 10, 0, 0);
    for (int i = 0; i < bursts; i++) r[1].ival_ms[i] = 0.05;
    assert_int_equal(gc_cell_compute(&c, r, 2, 0.2), 0);
    assert_int_equal(c.implausible, bursts == 10);
    assert_true(fabs(c.burst_pct - bursts * 5.0) < 1e-9);
    gc_req_free(&r[0]);
    gc_req_free(&r[1]);
  }
}

static void test_csv_and_svg(void **st) {
  (void)st;
  gc_cell_t c[2];
  memset(c, 0, sizeof c);
  snprintf(c[0].target, sizeof c[0].target, "A,\"x\"");
  c[0].context = 512, c[0].concurrency = 4, c[0].n = 8, c[0].n_ok = 8;
  c[0].ttft_p50 = 12.5, c[0].ttft_p90 = -1, c[0].ttfc_p50 = -1, c[0].e2e_p50 = -1, c[0].itl_p50 = 10;
  c[0].decode_tps = 100, c[0].total_tps = 350, c[0].chk = 1.143, c[0].prefix_hit_pct = -1, c[0].think_pct = 0;
  c[0].prompt_tokens_mean = -1;
  c[0].ttft_p99 = 30, c[0].itl_p90 = c[0].itl_p99 = c[0].tpot_p50 = c[0].tpot_p90 = c[0].tpot_p99 = -1;
  c[0].good_pct = c[0].good_rps = c[0].burst_pct = c[0].itl_min_ms = -1;
  c[0].srv_queue_ms = c[0].cli_inflight = c[0].srv_inflight = -1;
  c[1] = c[0];
  c[1].warm = 1;
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  gc_csv_write(f, c, 2);
  fclose(f);
  assert_non_null(strstr(buf, "\"A,\"\"x\"\"\",512,4,0,cold,8,8,0,12.500,,30.000,,,10.000,,,,,,100.000,350.000,1.143,,0.00,"));
  assert_non_null(strstr(buf, ",tpot_p50_ms,tpot_p90_ms,tpot_p99_ms,"));
  assert_non_null(strstr(buf, ",warm,"));
  free(buf);
  gc_series_t s[2];
  memset(s, 0, sizeof s);
  snprintf(s[0].name, sizeof s[0].name, "A <ctx=512>");
  gc_series_add(&s[0], 4, 50);
  gc_series_add(&s[0], 1, 100);
  gc_series_add(&s[0], 2, 80);
  assert_true(s[0].x[0] == 1 && s[0].x[1] == 2 && s[0].x[2] == 4);
  snprintf(s[1].name, sizeof s[1].name, "B");
  gc_series_add(&s[1], 1, 90);
  f = open_memstream(&buf, &len);
  gc_svg_plot(f, "t", "x", "y", s, 2, 1);
  fclose(f);
  assert_non_null(strstr(buf, "<svg"));
  assert_non_null(strstr(buf, "</svg>"));
  assert_non_null(strstr(buf, "A &lt;ctx=512&gt;"));
  int polylines = 0;
  for (char *p = buf; (p = strstr(p, "<polyline")); p++) polylines++;
  assert_int_equal(polylines, 2);
  free(buf);
}


/* One outlier cell must not flatten every other line: the axis ends above the rest and the
 * outlier is drawn clipped, with its value. Steep but real growth is not clipped. */
static void test_svg_robust_axis(void **st) {
  (void)st;
  gc_series_t s[2];
  memset(s, 0, sizeof s);
  snprintf(s[0].name, sizeof s[0].name, "A");
  snprintf(s[1].name, sizeof s[1].name, "B");
  double xs[] = {1, 2, 4, 8}, ya[] = {83, 84, 250000, 82}, yb[] = {80, 79, 78, 77};
  for (int i = 0; i < 4; i++) gc_series_add(&s[0], xs[i], ya[i]), gc_series_add(&s[1], xs[i], yb[i]);
  assert_true(fabs(gc_svg_clip_level(s, 2) - 84) < 1e-9);
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  gc_svg_plot(f, "t", "x", "y", s, 2, 1);
  fclose(f);
  assert_non_null(strstr(buf, "axis clipped at 100: 1 point above"));
  assert_non_null(strstr(buf, ">100</text>")); /* top tick: the rest fill the plot */
  assert_null(strstr(buf, ">300000</text>"));
  int clipped = 0;
  for (char *p = buf; (p = strstr(p, "class=\"clipped\"")); p++) clipped++;
  assert_int_equal(clipped, 1);
  assert_non_null(strstr(buf, "250000 (clipped)"));
  /* nothing is drawn above the plot area (top edge y = 40) */
  for (char *p = buf; (p = strstr(p, " cy=\"")); p++) assert_true(atof(p + 5) >= 40);
  free(buf);
  /* two outliers of eight points: both clipped */
  s[1].y[3] = 9000;
  assert_true(fabs(gc_svg_clip_level(s, 2) - 84) < 1e-9);
  f = open_memstream(&buf, &len);
  gc_svg_plot(f, "t", "x", "y", s, 2, 1);
  fclose(f);
  assert_non_null(strstr(buf, "axis clipped at 100: 2 points above"));
  clipped = 0;
  for (char *p = buf; (p = strstr(p, "class=\"clipped\"")); p++) clipped++;
  assert_int_equal(clipped, 2);
  assert_non_null(strstr(buf, "9000 (clipped)"));
  free(buf);
  /* TTFT over context grows steeply but steadily: not an outlier */
  gc_series_t t;
  memset(&t, 0, sizeof t);
  double cx[] = {512, 2048, 8192, 28000}, cy[] = {60, 90, 240, 800};
  for (int i = 0; i < 4; i++) gc_series_add(&t, cx[i], cy[i]);
  assert_true(gc_svg_clip_level(&t, 1) < 0);
  f = open_memstream(&buf, &len);
  gc_svg_plot(f, "t", "x", "y", &t, 1, 0);
  fclose(f);
  assert_null(strstr(buf, "clipped"));
  assert_non_null(strstr(buf, ">1000</text>"));
  free(buf);
}


/* ---- --dataset JSONL ---- */
static char *write_tmp(const char *text) {
  static char path[64];
  snprintf(path, sizeof path, "/tmp/gantry-ds-XXXXXX");
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  FILE *f = fdopen(fd, "w");
  fputs(text, f);
  fclose(f);
  return path;
}

static int words(void *ud, const char *t, int *count, gt_err_t *err) {
  (void)ud, (void)err;
  int n = 0, in = 0;
  for (; *t; t++) {
    int sp = *t == ' ' || *t == '\n';
    n += !sp && !in;
    in = !sp;
  }
  *count = n;
  return GT_OK;
}

static void test_dataset_load(void **st) {
  (void)st;
  gc_dataset_t ds = {0};
  gt_err_t err = {0};
  char *p = write_tmp("{\"prompt\": \"hello world\", \"output_len\": 7}\n\n"
                      "{\"input_len\": 40}\r\n{\"input_len\": 12, \"output_len\": 3, \"id\": \"x\"}");
  assert_int_equal(gc_dataset_load(p, &ds, &err), GT_OK);
  unlink(p);
  assert_int_equal(ds.n, 3);
  assert_string_equal(ds.e[0].prompt, "hello world");
  assert_int_equal(ds.e[0].output_len, 7);
  assert_int_equal(ds.e[0].input_len, -1);
  assert_null(ds.e[1].prompt);
  assert_int_equal(ds.e[1].input_len, 40);
  assert_int_equal(ds.e[1].output_len, -1);
  assert_int_equal(ds.e[1].line, 3);
  assert_int_equal(ds.e[2].line, 4);
  assert_int_equal(ds.e[2].output_len, 3);
  assert_int_equal(gc_dataset_synthesize(&ds, words, NULL, 1, &err), GT_OK);
  assert_string_equal(ds.e[0].prompt, "hello world"); /* given text is never touched */
  assert_false(ds.e[0].synthesized);
  int n;
  words(NULL, ds.e[1].prompt, &n, NULL);
  assert_int_equal(n, 40);
  assert_int_equal(ds.e[1].input_tokens, 40);
  assert_int_equal(ds.e[2].input_tokens, 12);
  assert_true(strncmp(ds.e[1].prompt, ds.e[2].prompt, 12) != 0); /* no shared prefix */
  gc_dataset_free(&ds);
  assert_int_equal(ds.n, 0);

  struct { const char *text, *msg; } bad[] = {
      {"{\"prompt\": 5}\n", ":1: \"prompt\" must be a non-empty string"},
      {"{\"prompt\": \"\"}\n", ":1: \"prompt\" must be a non-empty string"},
      {"{\"prompt\": \"a\"}\n[1, 2]\n", ":2: not a JSON object"},
      {"{\"prompt\": \"a\"}\n\n{bad\n", ":3: not a JSON object: "},
      {"{\"output_len\": 5}\n", ":1: needs \"prompt\" (a string) or \"input_len\""},
      {"{\"input_len\": -4}\n", "input_len is not one"},
      {"{\"input_len\": 2.5}\n", "input_len is not one"},
      {"{\"prompt\": \"x\", \"output_len\": 0}\n", ":1: \"output_len\" must be a positive integer"},
      {"\n  \n", "no entries"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    p = write_tmp(bad[i].text);
    memset(&ds, 0, sizeof ds);
    err.msg[0] = 0;
    int rc = gc_dataset_load(p, &ds, &err);
    unlink(p);
    if (rc == GT_OK || !strstr(err.msg, bad[i].msg) || !strstr(err.msg, "/tmp/gantry-ds-"))
      fail_msg("case %zu: rc %d, message '%s', want '%s'", i, rc, err.msg, bad[i].msg);
    assert_int_equal(ds.n, 0);
    assert_null(ds.e);
  }
  assert_int_equal(gc_dataset_load("/nonexistent/d.jsonl", &ds, &err), GT_EIO);
  assert_non_null(strstr(err.msg, "/nonexistent/d.jsonl"));
}


/* ---- the server's queue time from /metrics ---- */
/* Recomputes c over the 4 requests r (0.2 s) and applies the queue between two /metrics texts. */
static void queue_between(gc_cell_t *c, const gc_req_t *r, const char *before, const char *after) {
  gc_srvq_snap_t a, b;
  assert_int_equal(gc_cell_compute(c, r, 4, 0.2), 0);
  gc_srvq_parse(before, &a);
  gc_srvq_parse(after, &b);
  a.ok = b.ok = 1;
  gc_cell_queue(c, r, 4, &a, &b);
}

/* The mean accepted length of a cell from the speculative decoding counters: gantry's engine
 * names first (summed over label sets), vLLM's otherwise; none moved: not reported. */
static void test_spec_accept_len(void **st) {
  (void)st;
  gc_srvq_snap_t a, b;
  gc_cell_t c = {.spec_accept_len = -1};
  gc_srvq_parse("# TYPE gantry_engine_spec_decode_num_drafts_total counter\n"
                "gantry_engine_spec_decode_num_drafts_total{model=\"m\"} 10\n"
                "gantry_engine_spec_decode_num_accepted_tokens_total{model=\"m\"} 4\n"
                "gantry_engine_spec_decode_num_accepted_tokens_per_pos_total{position=\"0\"} 99\n",
                &a);
  gc_srvq_parse("gantry_engine_spec_decode_num_drafts_total{model=\"m\"} 30\n"
                "gantry_engine_spec_decode_num_accepted_tokens_total{model=\"m\"} 34\n"
                "vllm:spec_decode_num_drafts_total 1000\nvllm:spec_decode_num_accepted_tokens_total 0\n",
                &b);
  a.ok = b.ok = 1;
  gc_cell_spec(&c, &a, &b);
  assert_true(fabs(c.spec_accept_len - 2.5) < 1e-12); /* 1 + 30 / 20 */
  /* vLLM's series, two label sets */
  gc_srvq_parse("vllm:spec_decode_num_drafts_total{a=\"1\"} 5\nvllm:spec_decode_num_drafts_total{a=\"2\"} 5\n"
                "vllm:spec_decode_num_accepted_tokens_total 2\n", &a);
  gc_srvq_parse("vllm:spec_decode_num_drafts_total{a=\"1\"} 10\nvllm:spec_decode_num_drafts_total{a=\"2\"} 10\n"
                "vllm:spec_decode_num_accepted_tokens_total 12\n", &b);
  a.ok = b.ok = 1;
  c.spec_accept_len = -1;
  gc_cell_spec(&c, &a, &b);
  assert_true(fabs(c.spec_accept_len - 2.0) < 1e-12); /* 1 + 10 / 10 */
  /* no drafts in the cell (speculation off or turned down): not reported */
  c.spec_accept_len = -1;
  gc_cell_spec(&c, &b, &b);
  assert_true(c.spec_accept_len < 0);
}

static void test_srvq_parse_and_note(void **st) {
  (void)st;
  gc_srvq_snap_t a, b;
  gc_srvq_parse("# HELP gantry_router_admission_wait_seconds Wait.\n# TYPE gantry_router_admission_wait_seconds histogram\n"
                "gantry_router_admission_wait_seconds_bucket{le=\"1\"} 3\ngantry_router_admission_wait_seconds_sum 0.1205\n"
                "gantry_router_admission_wait_seconds_count 4\ngantry_router_admission_wait_seconds_summary 9\n"
                "vllm:request_queue_time_seconds_sum{model_name=\"a\"} 1.5\n"
                "vllm:request_queue_time_seconds_sum{model_name=\"b}\\\"x\"} 0.5\n"
                "vllm:request_queue_time_seconds_count{model_name=\"a\"} 3\n"
                "vllm:request_queue_time_seconds_count{model_name=\"b}\\\"x\"} 1",
                &a);
  assert_true(fabs(a.sum[0] - 120.5) < 1e-9);
  assert_true(fabs(a.count[0] - 4) < 1e-9);
  assert_true(fabs(a.sum[1] - 2000) < 1e-9); /* seconds -> ms, summed over labels */
  assert_true(fabs(a.count[1] - 4) < 1e-9);
  assert_true(a.count[2] < 0 && a.count[3] < 0 && a.count[4] < 0);

  /* 4 streams of 200 ms (TTFT 100) back to back in 0.2 s: the client kept 4 open */
  gc_req_t r[4];
  for (int i = 0; i < 4; i++) fake(&r[i], 0, 100, 10, 10, 10, 0, 0);
  gc_cell_t c = {.concurrency = 4};
  assert_int_equal(gc_cell_compute(&c, r, 4, 0.2), 0);
  assert_true(fabs(c.cli_inflight - 4) < 1e-9);
  /* the router says they waited 150 ms each for admission: the engine had 1 at a time */
  const char *before = "gantry_router_admission_wait_seconds_sum 0.05\ngantry_router_admission_wait_seconds_count 10\n";
  queue_between(&c, r, before, "gantry_router_admission_wait_seconds_sum 0.65\ngantry_router_admission_wait_seconds_count 14\n");
  assert_true(fabs(c.srv_queue_ms - 150) < 1e-9);
  assert_string_equal(c.srv_queue_src, "gantry_router_admission_wait_seconds");
  assert_true(fabs(c.srv_inflight - 1) < 1e-9);
  assert_true(c.cap_limited);
  assert_non_null(strstr(c.note_cap, "150 ms on average in the router's admission queue (a max_inflight cap)"));
  assert_non_null(strstr(c.note_cap, "worked on 1.0 streams while the client kept 4.0 open"));
  /* 5 ms of admission: reported, no note */
  queue_between(&c, r, before, "gantry_router_admission_wait_seconds_sum 0.07\ngantry_router_admission_wait_seconds_count 14\n");
  assert_true(fabs(c.srv_queue_ms - 5) < 1e-9);
  assert_false(c.cap_limited);
  assert_string_equal(c.note_cap, "");
  /* no queue series: TTFT 100 ms against a server prefill of 50 ms */
  queue_between(&c, r, "vllm:request_prefill_time_seconds_sum 1\nvllm:request_prefill_time_seconds_count 2\n",
                "vllm:request_prefill_time_seconds_sum 1.2\nvllm:request_prefill_time_seconds_count 6\n");
  assert_true(fabs(c.srv_queue_ms - 50) < 1e-9);
  assert_string_equal(c.srv_queue_src, "ttft-vllm:request_prefill_time_seconds");
  assert_true(fabs(c.srv_inflight - 3) < 1e-9);
  assert_true(c.cap_limited);
  assert_non_null(strstr(c.note_cap, "(TTFT 100 ms - server prefill 50 ms)"));
  /* no /metrics: nothing is claimed */
  assert_int_equal(gc_cell_compute(&c, r, 4, 0.2), 0);
  gc_srvq_parse(before, &a);
  a.ok = 0, b.ok = 1;
  gc_cell_queue(&c, r, 4, &a, &b);
  assert_true(c.srv_queue_ms < 0);
  assert_false(c.cap_limited);
  for (int i = 0; i < 4; i++) gc_req_free(&r[i]);
}

static void test_prompt_words(void **st) {
  (void)st;
  char *a = gc_prompt_words(3, 100), *b = gc_prompt_words(3, 100), *c = gc_prompt_words(4, 100);
  assert_string_equal(a, b);
  assert_string_not_equal(a, c);
  int words = 0;
  for (char *p = a; *p; p++)
    if (*p == ' ' || *p == '\n') words++;
  assert_int_equal(words + 1, 100);
  free(a), free(b), free(c);
}

/* calibration against a counter that charges 1 token per 4 characters */
static int chars4(void *ud, const char *t, int *count, gt_err_t *err) {
  (void)err;
  (*(int *)ud)++;
  *count = (int)((strlen(t) + 3) / 4);
  return 0;
}

static void test_prompt_calibrate(void **st) {
  (void)st;
  int targets[] = {1, 50, 512, 8192};
  for (int i = 0; i < 4; i++) {
    int calls = 0, tokens = 0;
    char *text = NULL;
    gt_err_t err = {0};
    assert_int_equal(gc_prompt_calibrate(chars4, &calls, targets[i], 1, &text, &tokens, &err), 0);
    int n;
    chars4(&calls, text, &n, NULL);
    assert_int_equal(n, tokens);
    assert_true(tokens <= targets[i]);
    assert_true(tokens >= targets[i] - 4 || targets[i] < 4); /* one word is at most ~2 tokens here */
    assert_true(calls < 30);
    free(text);
  }
}

/* --tokenizer M.gguf: calibration with the engine's own tokenizer */
static void test_prompt_calibrate_local_tokenizer(void **st) {
  (void)st;
#ifdef GANTRY_HAVE_TOK
  gt_err_t err = {0};
  gc_tok_local_t *t = gc_tok_local_open(tu_golden("qwen3-tiny.bf16.gguf"), &err);
  if (!t) fail_msg("%s", err.msg);
  char *text = NULL;
  int tokens = 0, n = 0;
  assert_int_equal(gc_prompt_calibrate(gc_tok_local_count, t, 700, 9, &text, &tokens, &err), 0);
  assert_int_equal(gc_tok_local_count(t, text, &n, &err), 0);
  assert_int_equal(n, tokens);
  assert_true(tokens <= 700 && tokens >= 690);
  free(text);
  gc_tok_local_free(t);
  assert_null(gc_tok_local_open("/nonexistent.gguf", &err));
  assert_true(err.msg[0] != 0);
#else
  skip();
#endif
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sse_framing_any_split),     cmocka_unit_test(test_sse_unterminated_last_event),
      cmocka_unit_test(test_req_counts_and_intervals),  cmocka_unit_test(test_req_bad_json_and_completions_text),
      cmocka_unit_test(test_req_held_token_event),      cmocka_unit_test(test_wmedian_percentile),
      cmocka_unit_test(test_cell_math),
      cmocka_unit_test(test_tpot_p99_goodput),          cmocka_unit_test(test_implausible_bursts),
      cmocka_unit_test(test_csv_and_svg),               cmocka_unit_test(test_svg_robust_axis),
      cmocka_unit_test(test_dataset_load),              cmocka_unit_test(test_srvq_parse_and_note),
      cmocka_unit_test(test_spec_accept_len),               cmocka_unit_test(test_prompt_words),
      cmocka_unit_test(test_prompt_calibrate),          cmocka_unit_test(test_prompt_calibrate_local_tokenizer),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
