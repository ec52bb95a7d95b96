/* clients/cmd_chat.c — `gantry chat "prompt"`: one streamed chat; reasoning is shown apart
 * (dimmed on a terminal, on stderr otherwise) and a timing line goes to stderr. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clients/bench_run.h"
#include "clients/cmd.h"

typedef struct view {
  int tty, in_reasoning;
} view_t;

static void on_delta(void *ud, int kind, const char *t, size_t n) {
  view_t *v = ud;
  if (kind == GC_CK_REASONING) {
    if (v->tty) {
      if (!v->in_reasoning) fputs("\033[2m", stdout);
      fwrite(t, 1, n, stdout);
    } else {
      fwrite(t, 1, n, stderr);
    }
    v->in_reasoning = 1;
  } else {
    if (v->in_reasoning) {
      if (v->tty) fputs("\033[0m\n", stdout);
      else fputc('\n', stderr);
      v->in_reasoning = 0;
    }
    fwrite(t, 1, n, stdout);
  }
  fflush(v->tty || kind != GC_CK_REASONING ? stdout : stderr);
}

int gc_cmd_chat(gc_cli_t *cli, int argc, char **argv) {
  const char *model = NULL, *prompt = NULL, *system = NULL;
  int max_tokens = 1024;
  double temperature = -1;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (a[0] != '-' || !strcmp(a, "-")) {
      if (prompt) {
        fprintf(stderr, "gantry chat: one prompt only (quote it)\n");
        return 2;
      }
      prompt = a;
      continue;
    }
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      printf("usage: gantry chat [--model M] [--max-tokens N] [--temperature T] [--system S] \"prompt\"\n");
      return 0;
    }
    if (!v) {
      fprintf(stderr, "gantry chat: %s needs a value\n", a);
      return 2;
    }
    i++;
    if (!strcmp(a, "--model")) model = v;
    else if (!strcmp(a, "--system")) system = v;
    else if (!strcmp(a, "--max-tokens")) max_tokens = atoi(v);
    else if (!strcmp(a, "--temperature")) temperature = atof(v);
    else {
      fprintf(stderr, "gantry chat: unknown option %s\n", a);
      return 2;
    }
  }
  if (!prompt || max_tokens <= 0) {
    fprintf(stderr, "usage: gantry chat [--model M] [--max-tokens N] [--temperature T] [--system S] \"prompt\"\n");
    return 2;
  }
  gt_err_t err = {0};
  char mbuf[256];
  if (!model) {
    if (gc_first_model(&cli->http, mbuf, sizeof mbuf, NULL, &err)) {
      fprintf(stderr, "gantry chat: %s (pass --model)\n", err.msg);
      return 1;
    }
    model = mbuf;
  }
  json_t *msgs = json_array();
  if (system) json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", "system", "content", system));
  json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", "user", "content", prompt));
  json_t *req = json_pack("{s:s, s:o, s:i, s:b, s:{s:b}}", "model", model, "messages", msgs, "max_tokens",
                          max_tokens, "stream", 1, "stream_options", "include_usage", 1);
  if (temperature >= 0) json_object_set_new(req, "temperature", json_real(temperature));
  char *body = json_dumps(req, JSON_COMPACT);
  json_decref(req);
  view_t v = {.tty = isatty(1)};
  gc_req_t r;
  memset(&r, 0, sizeof r);
  r.keep_text = 1;
  r.on_delta = on_delta;
  r.delta_ud = &v;
  int rc = gc_run_one(&cli->http, "/v1/chat/completions", body, &r, &err);
  free(body);
  if (v.in_reasoning && v.tty) fputs("\033[0m", stdout);
  for (int i = 0; i < r.n_tools; i++)
    printf("%s[tool call] %s(%s)", i || r.content_len ? "\n" : "", r.tools[i].name ? r.tools[i].name : "?",
           r.tools[i].args ? r.tools[i].args : "");
  printf("\n");
  fflush(stdout);
  int code = 0;
  if (rc) {
    fprintf(stderr, "gantry chat: %s\n", err.msg);
    code = 1;
  } else if (r.error) {
    fprintf(stderr, "gantry chat: %s\n", r.error);
    code = 1;
  }
  if (!rc) {
    fprintf(stderr, "[%s | ttft %.1f ms | %.1f tok/s decode | %d tokens (%d reasoning) | prompt %d, cached %d%s]\n",
            model, r.ttft_ms, r.itl_median_ms > 0 ? 1000.0 / r.itl_median_ms : 0.0, r.out_tokens,
            r.reasoning_tokens, r.prompt_tokens, r.cached_tokens < 0 ? 0 : r.cached_tokens,
            r.finish_reason[0] ? (strcmp(r.finish_reason, "length") ? "" : " | hit max-tokens") : "");
  }
  gc_req_free(&r);
  return code;
}
