/* tests/unit/test_bench_cli.c — the built `gantry` binary against the scripted server:
 * bench outputs (table, results.csv, results.json, SVG) and what it sends, check (pass and
 * fail), chat, health, models, limits. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/common/testutil.h"
#include "tests/sse_server/sse_server.h"

static char tmpdir[64];

static sse_srv_t *start_text(const char *script) {
  gt_err_t err = {0};
  sse_srv_t *s = sse_srv_start(script, &err);
  if (!s) fail_msg("server: %s", err.msg);
  return s;
}

static sse_srv_t *start_file(const char *name) {
  char path[1024];
  snprintf(path, sizeof path, "%s/tests/sse_server/scripts/%s", getenv("GANTRY_SRC"), name);
  char *text = tu_read_file(path, NULL);
  if (!text) fail_msg("cannot read %s", path);
  sse_srv_t *s = start_text(text);
  free(text);
  return s;
}

/* Runs `gantry --url <server> ARGS`, stdout into *out, stderr into tmpdir/stderr. */
static int gantry(sse_srv_t *s, const char *args, char **out) {
  char cmd[4096];
  snprintf(cmd, sizeof cmd, "%s --url http://127.0.0.1:%d %s 2>%s/stderr", tu_bin("gantry"), sse_srv_port(s), args,
           tmpdir);
  return tu_run(cmd, out);
}

static char *read_tmp(const char *name) {
  char p[256];
  snprintf(p, sizeof p, "%s/%s", tmpdir, name);
  char *t = tu_read_file(p, NULL);
  if (!t) fail_msg("missing %s", p);
  return t;
}

static int count_lines(const char *t) {
  int n = 0;
  for (; *t; t++) n += *t == '\n';
  return n;
}

/* Table rows: lines but the "  ! note" lines under a flagged row (a loaded machine may starve
 * the client into an IMPLAUSIBLE cell; that is the flag's own test, not this one's). */
static int count_rows(const char *t) {
  int n = 0;
  for (const char *l = t; *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : l + strlen(l))
    n += strncmp(l, "  ! ", 4) != 0 && *l != '\n';
  return n;
}

/* the request body (after the first line) of logged request i */
static json_t *logged_body(sse_srv_t *s, int i, char *line, size_t cap) {
  char *r = sse_srv_request(s, i);
  assert_non_null(r);
  char *nl = strchr(r, '\n');
  snprintf(line, cap, "%.*s", (int)(nl - r), r);
  json_t *j = json_loads(nl + 1, 0, NULL);
  free(r);
  return j;
}

static void test_bench_matrix(void **st) {
  (void)st;
  sse_srv_t *s = start_file("bench_demo.json");
  char args[512], *out = NULL;
  snprintf(args, sizeof args,
           "bench --contexts 64,256 --concurrency 1,3 --requests-per-user 2 --max-tokens 12 --seed 5 --out %s/b",
           tmpdir);
  int rc = gantry(s, args, &out);
  if (rc != 0) fail_msg("gantry bench exit %d: %s\nstderr: %s", rc, out, read_tmp("stderr"));
  /* table: header + 2 contexts x 2 modes x 2 concurrencies */
  if (count_rows(out) != 1 + 8) fail_msg("table of %d rows, want 9:\n%s", count_rows(out), out);
  assert_non_null(strstr(out, "dec_tok/s"));
  free(out);
  char *csv = read_tmp("b/results.csv");
  assert_int_equal(count_lines(csv), 9);
  assert_non_null(strstr(csv, "ttft_p50_ms,ttft_p90_ms"));
  free(csv);
  char *svg = read_tmp("b/decode_vs_concurrency.svg");
  assert_non_null(strstr(svg, "</svg>"));
  assert_non_null(strstr(svg, "default ctx=256 warm"));
  free(svg);
  svg = read_tmp("b/ttft_vs_context.svg");
  assert_non_null(strstr(svg, "default cold (c=1)"));
  free(svg);

  char p[256];
  snprintf(p, sizeof p, "%s/b/results.json", tmpdir);
  json_error_t je;
  json_t *res = json_load_file(p, 0, &je);
  if (!res) fail_msg("results.json: %s", je.text);
  assert_string_equal(json_string_value(json_object_get(res, "version")), "0.1.0");
  assert_non_null(strstr(json_string_value(json_object_get(res, "command_line")), "--requests-per-user 2"));
  json_t *cells = json_object_get(res, "cells"), *c;
  assert_int_equal(json_array_size(cells), 8);
  size_t i;
  json_array_foreach(cells, i, c) {
    int warm = !strcmp(json_string_value(json_object_get(c, "mode")), "warm");
    int conc = (int)json_integer_value(json_object_get(c, "concurrency"));
    assert_int_equal(json_integer_value(json_object_get(c, "errors")), 0);
    assert_int_equal(json_integer_value(json_object_get(c, "requests")), conc * 2);
    /* the server's numbers, exactly: 512 prompt tokens, 496 cached when warm, 4 of 12 reasoning */
    assert_int_equal(json_integer_value(json_object_get(c, "out_tokens")), 12 * conc * 2);
    assert_int_equal(json_integer_value(json_object_get(c, "cached_tokens")), warm ? 496 * conc * 2 : 0);
    assert_true(fabs(json_real_value(json_object_get(c, "prefix_hit_pct")) - (warm ? 96.875 : 0)) < 1e-9);
    assert_true(fabs(json_real_value(json_object_get(c, "think_pct")) - 100.0 / 3) < 1e-9);
    /* 12 ms per token in the script (the 2-token chunks take 24 ms) */
    double itl = json_real_value(json_object_get(c, "itl_p50_ms"));
    if (fabs(itl - 12) > 2) fail_msg("cell %zu: itl_p50 %.3f ms, script 12 ms", i, itl);
    assert_true(fabs(json_real_value(json_object_get(c, "decode_tps_per_user")) - 1000 / itl) < 1e-6);
    double tot = json_real_value(json_object_get(c, "total_tps"));
    assert_true(fabs(json_real_value(json_object_get(c, "chk")) - 1000 / itl * conc / tot) < 1e-6);
    /* cold first token at 60 ms, warm at 15 ms in the script */
    double ttft = json_real_value(json_object_get(c, "ttft_p50_ms"));
    assert_true(warm ? (ttft >= 14 && ttft < 45) : (ttft >= 59 && ttft < 90));
  }
  json_t *reqs = json_object_get(res, "requests");
  assert_int_equal(json_array_size(reqs), 2 * 2 * (1 + 3) * 2);
  json_t *r0 = json_array_get(reqs, 0);
  assert_int_equal(json_array_size(json_object_get(r0, "chunk_ms")), 10);
  assert_int_equal(json_integer_value(json_object_get(r0, "reasoning_tokens")), 4);
  json_decref(res);

  /* what went over the wire */
  int n = sse_srv_n_requests(s), n_tok = 0, n_chat = 0, n_warmup = 0;
  char firsts[64][48];
  int n_cold = 0;
  char warm_prompt[2][4096] = {"", ""};
  for (int k = 0; k < n; k++) {
    char line[128];
    json_t *b = logged_body(s, k, line, sizeof line);
    if (!strcmp(line, "POST /tokenize")) {
      n_tok++;
    } else if (!strcmp(line, "POST /v1/chat/completions")) {
      n_chat++;
      assert_true(json_is_true(json_object_get(b, "stream")));
      assert_true(json_is_true(json_object_get(b, "ignore_eos")));
      json_t *so = json_object_get(b, "stream_options");
      assert_true(json_is_true(json_object_get(so, "include_usage")));
      assert_true(json_is_true(json_object_get(so, "continuous_usage_stats")));
      assert_string_equal(json_string_value(json_object_get(b, "model")), "demo");
      const char *content = json_string_value(json_object_get(json_array_get(json_object_get(b, "messages"), 0), "content"));
      int max_tokens = (int)json_integer_value(json_object_get(b, "max_tokens"));
      if (max_tokens == 1) n_warmup++;
      if (content[0] == '[') { /* cold: unique first line */
        const char *nl = strchr(content, '\n');
        assert_true(n_cold < 64);
        snprintf(firsts[n_cold], sizeof firsts[0], "%.*s", (int)(nl - content), content);
        for (int q = 0; q < n_cold; q++) assert_string_not_equal(firsts[q], firsts[n_cold]);
        n_cold++;
      } else { /* warm: the calibrated prompt itself, the same every time for a context */
        int words = 1;
        for (const char *t = content; *t; t++) words += *t == ' ' || *t == '\n';
        int ci = words == 64 ? 0 : words == 256 ? 1 : -1;
        if (ci < 0) fail_msg("warm prompt of %d words: calibration should give exactly 64 or 256", words);
        if (!warm_prompt[ci][0]) snprintf(warm_prompt[ci], sizeof warm_prompt[ci], "%s", content);
        else assert_string_equal(warm_prompt[ci], content);
      }
    }
    json_decref(b);
  }
  assert_true(n_tok >= 2);
  assert_int_equal(n_warmup, 2);
  assert_int_equal(n_chat, 32 + 2);
  assert_int_equal(n_cold, 16);
  sse_srv_stop(s);
}

static void test_bench_flags(void **st) {
  (void)st;
  sse_srv_t *s = start_file("bench_demo.json");
  char args[512], *out = NULL;
  snprintf(args, sizeof args,
           "bench --model other --contexts 32 --concurrency 2 --requests-per-user 1 --max-tokens 12 --cold "
           "--natural-length --no-continuous-usage --api-key sekrit --out %s/f",
           tmpdir);
  assert_int_equal(gantry(s, args, &out), 0);
  assert_int_equal(count_rows(out), 2);
  free(out);
  int n = sse_srv_n_requests(s), chats = 0;
  for (int k = 0; k < n; k++) {
    char line[128];
    json_t *b = logged_body(s, k, line, sizeof line);
    if (!strcmp(line, "POST /v1/chat/completions")) {
      chats++;
      assert_null(json_object_get(b, "ignore_eos"));
      assert_null(json_object_get(json_object_get(b, "stream_options"), "continuous_usage_stats"));
      assert_string_equal(json_string_value(json_object_get(b, "model")), "other");
    }
    assert_string_not_equal(line, "GET /v1/models"); /* --model given: no lookup */
    json_decref(b);
  }
  assert_int_equal(chats, 2); /* --cold only: no warm-up */
  /* open loop: Poisson arrivals, --requests per cell */
  snprintf(args, sizeof args, "bench --contexts 32 --rate 50,200 --requests 5 --max-tokens 12 --warm --out %s/r", tmpdir);
  assert_int_equal(gantry(s, args, &out), 0);
  assert_int_equal(count_rows(out), 3);
  assert_non_null(strstr(out, "50r/s warm     5    0"));
  assert_non_null(strstr(out, "200r/s warm     5    0"));
  free(out);
  sse_srv_stop(s);
}


/* --slo: goodput per cell in the table, CSV and JSON (cold TTFT is 60 ms in the script, warm
 * 15 ms, 12 ms per token); a bad --slo is a usage error. */
static void test_bench_slo(void **st) {
  (void)st;
  sse_srv_t *s = start_file("bench_demo.json");
  char args[512], *out = NULL;
  snprintf(args, sizeof args,
           "bench --contexts 64 --concurrency 2 --requests-per-user 2 --max-tokens 12 --slo ttft_ms=50,tpot_ms=30 "
           "--out %s/slo", tmpdir);
  int rc = gantry(s, args, &out);
  if (rc != 0) fail_msg("gantry bench exit %d: %s\nstderr: %s", rc, out, read_tmp("stderr"));
  assert_non_null(strstr(out, "good%"));
  assert_non_null(strstr(out, "tpot_p50"));
  assert_non_null(strstr(out, "ttft_p99"));
  free(out);
  char p[256];
  snprintf(p, sizeof p, "%s/slo/results.json", tmpdir);
  json_t *res = json_load_file(p, 0, NULL);
  assert_non_null(res);
  assert_string_equal(json_string_value(json_object_get(res, "slo")), "ttft_ms=50,tpot_ms=30");
  json_t *cells = json_object_get(res, "cells"), *c;
  assert_int_equal(json_array_size(cells), 2);
  size_t i;
  json_array_foreach(cells, i, c) {
    int warm = !strcmp(json_string_value(json_object_get(c, "mode")), "warm");
    double tpot = json_real_value(json_object_get(c, "tpot_p50_ms"));
    if (fabs(tpot - 12) > 3) fail_msg("tpot_p50 %.3f ms, script 12 ms per token", tpot);
    assert_true(json_real_value(json_object_get(c, "ttft_p99_ms")) >= json_real_value(json_object_get(c, "ttft_p90_ms")));
    assert_true(json_real_value(json_object_get(c, "itl_p99_ms")) >= json_real_value(json_object_get(c, "itl_p50_ms")));
    assert_int_equal(json_integer_value(json_object_get(c, "good_requests")), warm ? 4 : 0);
    assert_true(fabs(json_real_value(json_object_get(c, "goodput_pct")) - (warm ? 100 : 0)) < 1e-9);
    double wall = json_real_value(json_object_get(c, "wall_s"));
    assert_true(fabs(json_real_value(json_object_get(c, "goodput_rps")) - (warm ? 4 / wall : 0)) < 1e-6);
  }
  json_t *r0 = json_array_get(json_object_get(res, "requests"), 0);
  assert_true(json_is_false(json_object_get(r0, "slo_met"))); /* a cold request */
  assert_true(json_real_value(json_object_get(r0, "tpot_ms")) > 0);
  json_decref(res);
  char *csv = read_tmp("slo/results.csv");
  assert_non_null(strstr(csv, ",good_requests,goodput_pct,goodput_rps,"));
  free(csv);
  snprintf(args, sizeof args, "bench --contexts 64 --slo ttft=5 --out %s/slo2", tmpdir);
  assert_int_equal(gantry(s, args, &out), 2);
  free(out);
  char *err = read_tmp("stderr");
  assert_non_null(strstr(err, "unknown objective 'ttft'"));
  free(err);
  sse_srv_stop(s);
}


/* --dataset: every JSONL entry sent once per cell, given prompts as they are, input_len
 * prompts calibrated to the server's count, output_len as max_tokens. */
static void test_bench_dataset(void **st) {
  (void)st;
  sse_srv_t *s = start_file("bench_demo.json");
  char ds[256], args[768], *out = NULL;
  snprintf(ds, sizeof ds, "%s/ds.jsonl", tmpdir);
  FILE *f = fopen(ds, "w");
  assert_non_null(f);
  fputs("{\"prompt\": \"Write a haiku about GPUs.\", \"output_len\": 7}\n"
        "{\"input_len\": 40}\n"
        "{\"input_len\": 25, \"output_len\": 3}\n", f);
  fclose(f);
  snprintf(args, sizeof args, "bench --dataset %s --concurrency 2 --max-tokens 12 --out %s/ds", ds, tmpdir);
  int rc = gantry(s, args, &out);
  if (rc != 0) fail_msg("gantry bench exit %d: %s\nstderr: %s", rc, out, read_tmp("stderr"));
  if (count_rows(out) != 2) fail_msg("table of %d rows, want 2:\n%s", count_rows(out), out);
  assert_non_null(strstr(out, "default              -     2 data     3    0"));
  free(out);
  int n = sse_srv_n_requests(s), k_chat = 0;
  const int want_max[] = {7, 12, 3}, want_words[] = {-1, 40, 25};
  for (int k = 0; k < n; k++) {
    char line[128];
    json_t *b = logged_body(s, k, line, sizeof line);
    if (!strcmp(line, "POST /v1/chat/completions")) {
      assert_true(k_chat < 3);
      const char *content = json_string_value(json_object_get(json_array_get(json_object_get(b, "messages"), 0), "content"));
      /* closed loop at 2: the requests go out in entry order */
      if (k_chat == 0) assert_string_equal(content, "Write a haiku about GPUs.");
      else {
        int words = 1;
        for (const char *t = content; *t; t++) words += *t == ' ' || *t == '\n';
        assert_int_equal(words, want_words[k_chat]);
      }
      assert_int_equal(json_integer_value(json_object_get(b, "max_tokens")), want_max[k_chat]);
      k_chat++;
    }
    json_decref(b);
  }
  assert_int_equal(k_chat, 3); /* no warm-up request */
  char p[256];
  snprintf(p, sizeof p, "%s/ds/results.json", tmpdir);
  json_t *res = json_load_file(p, 0, NULL);
  assert_non_null(res);
  json_t *c0 = json_array_get(json_object_get(res, "cells"), 0);
  assert_string_equal(json_string_value(json_object_get(c0, "mode")), "data");
  json_t *pr = json_array_get(json_object_get(res, "prompts"), 0);
  assert_int_equal(json_integer_value(json_object_get(pr, "synthesized")), 2);
  assert_int_equal(json_integer_value(json_object_get(pr, "calibrated_tokens_sum")), 65);
  json_t *r2 = json_array_get(json_object_get(res, "requests"), 2);
  assert_int_equal(json_integer_value(json_object_get(r2, "dataset_line")), 3);
  assert_int_equal(json_integer_value(json_object_get(r2, "max_tokens")), 3);
  json_decref(res);
  /* --requests N cycles through the entries */
  snprintf(args, sizeof args, "bench --dataset %s --rate 100 --requests 5 --out %s/ds2", ds, tmpdir);
  assert_int_equal(gantry(s, args, &out), 0);
  assert_non_null(strstr(out, "100r/s data     5    0"));
  free(out);
  /* what does not apply, and a bad file, are usage errors naming the problem */
  snprintf(args, sizeof args, "bench --dataset %s --cold --out %s/ds3", ds, tmpdir);
  assert_int_equal(gantry(s, args, &out), 2);
  free(out);
  f = fopen(ds, "w");
  fputs("{\"prompt\": \"ok\"}\n{\"output_len\": 4}\n", f);
  fclose(f);
  snprintf(args, sizeof args, "bench --dataset %s --out %s/ds4", ds, tmpdir);
  assert_int_equal(gantry(s, args, &out), 2);
  free(out);
  char *err = read_tmp("stderr");
  assert_non_null(strstr(err, "ds.jsonl:2: needs \"prompt\""));
  free(err);
  sse_srv_stop(s);
}


/* A stream script: first token after ttft ms, then n - 1 more chunks `gap` ms apart, continuous
 * usage, a final usage chunk and [DONE]. */
static json_t *stream_events(double ttft, int n, double gap) {
  json_t *e = json_array();
  for (int i = 0; i < n; i++)
    json_array_append_new(e, json_pack("{s:f, s:{s:s, s:[{s:i, s:{s:s}, s:n}], s:{s:i, s:i}}}", "delay_ms",
                                       i ? gap : ttft, "data", "object", "chat.completion.chunk", "choices", "index",
                                       0, "delta", "content", " w", "finish_reason", "usage", "prompt_tokens", 16,
                                       "completion_tokens", i + 1));
  json_array_append_new(e, json_pack("{s:f, s:{s:s, s:[], s:{s:i, s:i}}}", "delay_ms", 1.0, "data", "object",
                                     "chat.completion.chunk", "choices", "usage", "prompt_tokens", 16,
                                     "completion_tokens", n));
  json_array_append_new(e, json_pack("{s:f, s:s}", "delay_ms", 0.0, "data", "[DONE]"));
  return e;
}

/* The notes a serving team must not miss, end to end: chunks in bursts (IMPLAUSIBLE) and a
 * server whose /metrics says the requests sat in the router's admission queue (QUEUED). */
static void test_bench_notes(void **st) {
  (void)st;
  /* 4 streams of ~200 ms; the router reports 150 ms of admission wait per request */
  json_t *script = json_pack(
      "{s:{s:{s:i, s:o}, s:{s:s}, s:[{s:s}, {s:s}]}}", "routes", "POST /v1/chat/completions", "status", 200,
      "events", stream_events(100, 11, 10), "POST /tokenize", "tokenize", "words", "GET /metrics", "text",
      "# TYPE gantry_router_admission_wait_seconds histogram\ngantry_router_admission_wait_seconds_sum 0.01\n"
      "gantry_router_admission_wait_seconds_count 2\n",
      "text", "gantry_router_admission_wait_seconds_sum 1.21\ngantry_router_admission_wait_seconds_count 10\n");
  char *text = json_dumps(script, JSON_COMPACT);
  json_decref(script);
  sse_srv_t *s = start_text(text);
  free(text);
  char args[512], *out = NULL;
  snprintf(args, sizeof args,
           "bench --model m --contexts 16 --cold --concurrency 4 --requests-per-user 2 --max-tokens 11 --out %s/q",
           tmpdir);
  int rc = gantry(s, args, &out);
  if (rc != 0) fail_msg("gantry bench exit %d: %s\nstderr: %s", rc, out, read_tmp("stderr"));
  if (!strstr(out, " QUEUED\n  ! queued: requests waited 150 ms on average in the router's admission queue"))
    fail_msg("no queue note:\n%s", out);
  assert_null(strstr(out, "IMPLAUSIBLE"));
  free(out);
  char p[256];
  snprintf(p, sizeof p, "%s/q/results.json", tmpdir);
  json_t *res = json_load_file(p, 0, NULL);
  assert_non_null(res);
  json_t *c = json_array_get(json_object_get(res, "cells"), 0);
  assert_true(json_is_true(json_object_get(c, "cap_limited")));
  assert_true(fabs(json_real_value(json_object_get(c, "srv_queue_ms")) - 150) < 1e-9);
  assert_string_equal(json_string_value(json_object_get(c, "srv_queue_source")), "gantry_router_admission_wait_seconds");
  double cli = json_real_value(json_object_get(c, "client_inflight")), srv = json_real_value(json_object_get(c, "server_inflight"));
  if (!(cli > 3 && cli <= 4 && srv < 0.8 * cli)) fail_msg("client in flight %.2f, server %.2f", cli, srv);
  json_decref(res);
  sse_srv_stop(s);

  /* every chunk after the first arrives at once: 100 % of intervals are bursts */
  script = json_pack("{s:{s:{s:i, s:o}, s:{s:s}}}", "routes", "POST /v1/chat/completions", "status", 200, "events",
                     stream_events(20, 11, 0), "POST /tokenize", "tokenize", "words");
  text = json_dumps(script, JSON_COMPACT);
  json_decref(script);
  s = start_text(text);
  free(text);
  snprintf(args, sizeof args,
           "bench --model m --contexts 16 --cold --concurrency 1 --requests-per-user 2 --max-tokens 11 --out %s/i",
           tmpdir);
  rc = gantry(s, args, &out);
  if (rc != 0) fail_msg("gantry bench exit %d: %s\nstderr: %s", rc, out, read_tmp("stderr"));
  /* (the first read may split a burst: not every interval need be one) */
  if (!strstr(out, " IMPLAUSIBLE\n  ! implausible: ") || !strstr(out, "% of token intervals < 0.1 ms"))
    fail_msg("no burst flag:\n%s", out);
  assert_null(strstr(out, "QUEUED")); /* no /metrics: nothing claimed */
  free(out);
  char *csv = read_tmp("i/results.csv");
  assert_non_null(strstr(csv, ",implausible,"));
  assert_non_null(strstr(csv, "\"implausible: "));
  free(csv);
  sse_srv_stop(s);
}

static void test_check_pass_and_fail(void **st) {
  (void)st;
  sse_srv_t *s = start_file("check_pass.json");
  char *out = NULL;
  int rc = gantry(s, "check", &out);
  if (rc != 0 || !strstr(out, "ALL_PASS")) fail_msg("check on a good server: exit %d\n%s", rc, out);
  const char *names[] = {"health", "ready", "models", "stream", "tool_call", "prefix_cache", "determinism", "too_long"};
  for (int i = 0; i < 8; i++) {
    char want[64];
    snprintf(want, sizeof want, "PASS %s", names[i]);
    if (!strstr(out, want)) fail_msg("missing '%s' in:\n%s", want, out);
  }
  free(out);
  sse_srv_stop(s);

  s = start_file("check_fail.json");
  rc = gantry(s, "check", &out);
  assert_int_equal(rc, 1);
  assert_non_null(strstr(out, "FAIL ready"));
  assert_non_null(strstr(out, "FAIL prefix_cache"));
  assert_non_null(strstr(out, "FAIL too_long"));
  assert_non_null(strstr(out, "PASS tool_call"));
  assert_non_null(strstr(out, "FAILED: ready prefix_cache too_long"));
  assert_null(strstr(out, "ALL_PASS"));
  free(out);
  sse_srv_stop(s);
}

static void test_chat_health_models(void **st) {
  (void)st;
  sse_srv_t *s = start_file("bench_demo.json");
  char *out = NULL;
  assert_int_equal(gantry(s, "chat --max-tokens 12 \"hello there\"", &out), 0);
  /* not a terminal: content on stdout, reasoning apart on stderr */
  assert_string_equal(out, " word word word word two words two words\n");
  free(out);
  char *err = read_tmp("stderr");
  assert_non_null(strstr(err, " think think think think"));
  assert_non_null(strstr(err, "12 tokens (4 reasoning)"));
  free(err);
  assert_int_equal(gantry(s, "health", &out), 0);
  assert_non_null(strstr(out, "health   OK"));
  assert_non_null(strstr(out, "ready    OK"));
  free(out);
  assert_int_equal(gantry(s, "models", &out), 0);
  assert_string_equal(out, "demo\tmax_model_len=4096\towned_by=gantry\n");
  free(out);
  assert_int_equal(gantry(s, "tokenize \"one two  three\"", &out), 0);
  assert_string_equal(out, "count 3\n0 1 2\n");
  free(out);
  sse_srv_stop(s);

  /* a server without /ready: health fails */
  s = start_text("{\"routes\":{\"GET /health\":{\"json\":{\"status\":\"ok\"}}}}");
  assert_int_equal(gantry(s, "health", &out), 1);
  assert_non_null(strstr(out, "ready    FAIL  HTTP 404"));
  free(out);
  sse_srv_stop(s);
}

static void test_limits(void **st) {
  (void)st;
  sse_srv_t *s = start_text(
      "{\"routes\":{\"GET /admin/limits\":{\"json\":[{\"model\":\"m\",\"max_inflight\":8,\"max_queued\":64,"
      "\"weight\":1}]},\"GET /admin/queues\":{\"json\":{\"m\":{\"queued\":3}}},\"PUT /admin/limits\":{\"json\":{\"model\":\"m\",\"tenant\":\"t 1\",\"max_inflight\":4}}}}");
  char *out = NULL;
  assert_int_equal(gantry(s, "--admin-key adm limits set --model m --tenant 't 1' --max-inflight 4 --weight 2.5", &out), 0);
  assert_non_null(strstr(out, "\"max_inflight\": 4"));
  free(out);
  assert_int_equal(gantry(s, "limits get --model m --tenant 't 1'", &out), 0);
  assert_non_null(strstr(out, "\"max_queued\": 64"));
  free(out);
  char line[128];
  json_t *b = logged_body(s, 0, line, sizeof line);
  assert_string_equal(line, "PUT /admin/limits");
  assert_string_equal(json_string_value(json_object_get(b, "model")), "m");
  assert_string_equal(json_string_value(json_object_get(b, "tenant")), "t 1");
  assert_int_equal(json_integer_value(json_object_get(b, "max_inflight")), 4);
  assert_true(fabs(json_real_value(json_object_get(b, "weight")) - 2.5) < 1e-12);
  assert_null(json_object_get(b, "max_queued"));
  json_decref(b);
  json_decref(logged_body(s, 1, line, sizeof line));
  assert_string_equal(line, "GET /admin/limits?model=m&tenant=t%201");
  /* bad input is refused before anything is sent */
  assert_int_equal(gantry(s, "limits set --model m --max-inflight -3", &out), 2);
  free(out);
  assert_int_equal(gantry(s, "limits set --max-inflight 3", &out), 2);
  free(out);
  assert_int_equal(sse_srv_n_requests(s), 2);
  assert_int_equal(gantry(s, "queues", &out), 0);
  assert_non_null(strstr(out, "\"queued\": 3"));
  free(out);
  sse_srv_stop(s);
}

static int setup(void **st) {
  (void)st;
  snprintf(tmpdir, sizeof tmpdir, "/tmp/gantry-bench-cli-XXXXXX");
  return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **st) {
  (void)st;
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
  return system(cmd) == 0 ? 0 : -1;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_bench_matrix),        cmocka_unit_test(test_bench_flags),
      cmocka_unit_test(test_bench_slo),           cmocka_unit_test(test_bench_dataset),
      cmocka_unit_test(test_bench_notes),
      cmocka_unit_test(test_check_pass_and_fail), cmocka_unit_test(test_chat_health_models),
      cmocka_unit_test(test_limits),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
