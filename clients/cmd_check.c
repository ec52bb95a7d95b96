/* clients/cmd_check.c — `gantry check [URL]`: the acceptance suite an operator runs after every
 * deploy or config change. One line per check, then ALL_PASS (exit 0) or FAILED: ... (exit 1). */
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clients/bench_prompt.h"
#include "clients/bench_run.h"
#include "clients/cmd.h"

typedef struct suite {
  const gc_http_t *h;
  char model[256];
  int max_len;
  char failed[512];
  int n_fail;
} suite_t;

static void report(suite_t *s, const char *name, int ok, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void report(suite_t *s, const char *name, int ok, const char *fmt, ...) {
  char d[600];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(d, sizeof d, fmt, ap);
  va_end(ap);
  printf("%s %-12s %s\n", ok ? "PASS" : "FAIL", name, d);
  fflush(stdout);
  if (!ok) {
    size_t n = strlen(s->failed);
    snprintf(s->failed + n, sizeof s->failed - n, "%s%s", s->n_fail ? " " : "", name);
    s->n_fail++;
  }
}

/* Streams one chat request (messages and extra fields stolen) into r. 0, or -1 with why. */
static int chat(suite_t *s, json_t *messages, int max_tokens, json_t *extra, gc_req_t *r, char *why, size_t cap) {
  json_t *req = json_pack("{s:s, s:o, s:i, s:b, s:{s:b}, s:f, s:i}", "model", s->model, "messages", messages,
                          "max_tokens", max_tokens, "stream", 1, "stream_options", "include_usage", 1,
                          "temperature", 0.0, "seed", 0);
  if (extra) {
    json_object_update(req, extra);
    json_decref(extra);
  }
  char *body = json_dumps(req, JSON_COMPACT);
  json_decref(req);
  memset(r, 0, sizeof *r);
  r->keep_text = 1;
  gt_err_t err = {0};
  int rc = body ? gc_run_one(s->h, "/v1/chat/completions", body, r, &err) : GT_ENOMEM;
  free(body);
  if (rc) {
    snprintf(why, cap, "%s", rc == GT_ENOMEM ? "out of memory" : err.msg);
    return -1;
  }
  if (r->error) {
    snprintf(why, cap, "%s", r->error);
    return -1;
  }
  return 0;
}

static json_t *user(const char *text) { return json_pack("[{s:s, s:s}]", "role", "user", "content", text); }

static void check_get(suite_t *s, const char *name, const char *path) {
  long st = 0;
  char *body = NULL;
  gt_err_t err = {0};
  if (gc_http_do(s->h, "GET", path, NULL, &st, &body, &err))
    report(s, name, 0, "%s", err.msg);
  else
    report(s, name, st == 200, "GET %s -> HTTP %ld", path, st);
  free(body);
}

static void check_stream(suite_t *s) {
  gc_req_t r;
  char why[600];
  if (chat(s, user("Say hello in five words."), 16, NULL, &r, why, sizeof why)) {
    report(s, "stream", 0, "%s", why);
  } else if (r.n_chunks == 0 || r.completion_tokens <= 0) {
    report(s, "stream", 0, "%d token chunks, usage completion_tokens %d (want > 0 and a final usage)", r.n_chunks,
           r.completion_tokens);
  } else {
    report(s, "stream", 1, "%d tokens in %d chunks, ttft %.1f ms, [DONE] seen", r.completion_tokens, r.n_chunks,
           r.ttft_ms);
  }
  gc_req_free(&r);
}

static void check_tools(suite_t *s) {
  json_t *tools = json_loads(
      "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"Current weather in a city\","
      "\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}},\"required\":[\"city\"]}}}]",
      0, NULL);
  json_t *extra = json_pack("{s:O, s:{s:s, s:{s:s}}}", "tools", tools, "tool_choice", "type", "function", "function",
                            "name", "get_weather");
  gc_req_t r;
  char why[600];
  if (chat(s, user("What is the weather in Paris? Use the tool."), 64, extra, &r, why, sizeof why)) {
    report(s, "tool_call", 0, "%s", why);
    gc_req_free(&r);
    json_decref(tools);
    return;
  }
  json_t *args = r.n_tools && r.tools[0].args ? json_loads(r.tools[0].args, 0, NULL) : NULL;
  if (!r.n_tools || !r.tools[0].name || strcmp(r.tools[0].name, "get_weather") || !json_is_object(args)) {
    report(s, "tool_call", 0, "no get_weather call with JSON object arguments (tool calls %d, name %s, args %.80s)",
           r.n_tools, r.n_tools && r.tools[0].name ? r.tools[0].name : "-",
           r.n_tools && r.tools[0].args ? r.tools[0].args : "-");
    json_decref(args);
    gc_req_free(&r);
    json_decref(tools);
    return;
  }
  /* round trip: hand the result back and expect an answer */
  const char *id = r.tools[0].id ? r.tools[0].id : "call_0";
  json_t *msgs = json_pack("[{s:s, s:s}, {s:s, s:n, s:[{s:s, s:s, s:{s:s, s:s}}]}, {s:s, s:s, s:s}]", "role", "user",
                           "content", "What is the weather in Paris? Use the tool.", "role", "assistant", "content",
                           "tool_calls", "id", id, "type", "function", "function", "name", "get_weather", "arguments",
                           r.tools[0].args, "role", "tool", "tool_call_id", id, "content",
                           "{\"city\":\"Paris\",\"temp_c\":21,\"sky\":\"clear\"}");
  json_decref(args);
  gc_req_t r2;
  json_t *extra2 = json_pack("{s:o}", "tools", tools);
  if (chat(s, msgs, 32, extra2, &r2, why, sizeof why))
    report(s, "tool_call", 0, "call ok, but the tool-result turn failed: %s", why);
  else if (r2.completion_tokens <= 0 && r2.n_chunks == 0)
    report(s, "tool_call", 0, "call ok, but no answer after the tool result");
  else
    report(s, "tool_call", 1, "get_weather(%s), then %d tokens after the result", r.tools[0].args,
           r2.completion_tokens > 0 ? r2.completion_tokens : r2.n_chunks);
  gc_req_free(&r);
  gc_req_free(&r2);
}

static void check_cache(suite_t *s) {
  char *text = gc_prompt_words(7, 400);
  gc_req_t r[2];
  char why[600];
  int ok = text != NULL;
  for (int i = 0; i < 2 && ok; i++)
    if (chat(s, user(text), 4, NULL, &r[i], why, sizeof why)) {
      report(s, "prefix_cache", 0, "request %d: %s", i + 1, why);
      gc_req_free(&r[i]);
      if (i) gc_req_free(&r[0]);
      free(text);
      return;
    }
  free(text);
  if (!ok) {
    report(s, "prefix_cache", 0, "out of memory");
    return;
  }
  if (r[1].cached_tokens < 0)
    report(s, "prefix_cache", 0, "repeat reported no usage.prompt_tokens_details.cached_tokens");
  else
    report(s, "prefix_cache", r[1].cached_tokens > 0, "repeat: %d of %d prompt tokens cached (first: %d)",
           r[1].cached_tokens, r[1].prompt_tokens, r[0].cached_tokens < 0 ? 0 : r[0].cached_tokens);
  gc_req_free(&r[0]);
  gc_req_free(&r[1]);
}

static void check_determinism(suite_t *s) {
  gc_req_t r[2];
  char why[600];
  for (int i = 0; i < 2; i++)
    if (chat(s, user("Write a short sentence about rivers."), 32, NULL, &r[i], why, sizeof why)) {
      report(s, "determinism", 0, "request %d: %s", i + 1, why);
      gc_req_free(&r[i]);
      if (i) gc_req_free(&r[0]);
      return;
    }
  const char *c0 = r[0].content ? r[0].content : "", *c1 = r[1].content ? r[1].content : "";
  const char *q0 = r[0].reasoning ? r[0].reasoning : "", *q1 = r[1].reasoning ? r[1].reasoning : "";
  int same = !strcmp(c0, c1) && !strcmp(q0, q1) && r[0].completion_tokens == r[1].completion_tokens;
  if (same)
    report(s, "determinism", 1, "greedy: the same %d tokens twice", r[0].completion_tokens);
  else
    report(s, "determinism", 0, "greedy outputs differ (%d vs %d tokens): \"%.60s\" vs \"%.60s\"",
           r[0].completion_tokens, r[1].completion_tokens, c0[0] ? c0 : q0, c1[0] ? c1 : q1);
  gc_req_free(&r[0]);
  gc_req_free(&r[1]);
}

static void check_too_long(suite_t *s) {
  int words = s->max_len > 0 ? s->max_len * 2 + 64 : 200000;
  char *text = gc_prompt_words(11, words);
  if (!text) {
    report(s, "too_long", 0, "out of memory");
    return;
  }
  gc_req_t r;
  char why[600];
  int rc = chat(s, user(text), 4, NULL, &r, why, sizeof why);
  free(text);
  if (rc == 0)
    report(s, "too_long", 0, "a %d-word prompt was accepted (%d prompt tokens)", words, r.prompt_tokens);
  else if (r.http_status >= 400 && r.http_status < 500 && r.body && strstr(r.body, "\"error\""))
    report(s, "too_long", 1, "%d-word prompt rejected: %.120s", words, why);
  else
    report(s, "too_long", 0, "want a 4xx with an error body, got: %s", why);
  gc_req_free(&r);
}

int gc_cmd_check(gc_cli_t *cli, int argc, char **argv) {
  gc_http_t h = cli->http;
  h.timeout_ms = 120000;
  suite_t s = {.h = &h, .max_len = -1};
  const char *model = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--model") && i + 1 < argc) model = argv[++i];
    else if (argv[i][0] != '-') h.base_url = argv[i];
    else {
      fprintf(stderr, "usage: gantry check [URL] [--model M]\n");
      return 2;
    }
  }
  printf("gantry check %s\n", h.base_url);
  check_get(&s, "health", "/health");
  check_get(&s, "ready", "/ready");
  gt_err_t err = {0};
  char first[256];
  int have_model = 0;
  if (model) { /* report on the model asked for, not the first one listed */
    if (gc_find_model(&h, model, &s.max_len, &err)) {
      report(&s, "models", 0, "%s", err.msg);
      model = NULL;
    } else {
      report(&s, "models", 1, "model %s%s", model, s.max_len > 0 ? "" : " (no max_model_len)");
    }
  } else if (gc_first_model(&h, first, sizeof first, &s.max_len, &err)) {
    report(&s, "models", 0, "%s", err.msg);
  } else {
    report(&s, "models", 1, "first model %s%s", first, s.max_len > 0 ? "" : " (no max_model_len)");
    have_model = 1;
  }
  if (model || have_model) {
    snprintf(s.model, sizeof s.model, "%s", model ? model : first);
    check_stream(&s);
    check_tools(&s);
    check_cache(&s);
    check_determinism(&s);
    check_too_long(&s);
  } else {
    report(&s, "chat", 0, "skipped the chat checks: no model to check (pass --model M of a served model)");
  }
  if (s.n_fail) {
    printf("FAILED: %s\n", s.failed);
    return 1;
  }
  printf("ALL_PASS\n");
  return 0;
}
