/* clients/cmd_limits.c — the router's admin API: `gantry limits get|set` (/admin/limits, live
 * limits per model and tenant: max_inflight, max_queued, weight) and `gantry queues`
 * (/admin/queues). */
#include <curl/curl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clients/cmd.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: gantry limits get [--model M] [--tenant T] [--json]\n"
          "       gantry limits set --model M [--tenant T] [--max-inflight N] [--max-queued N] [--weight W]\n");
}

/* One table cell: a string, a number, or "-". */
static void cell(const json_t *row, const char *key, int width) {
  const json_t *v = json_object_get(row, key);
  if (json_is_string(v)) printf("%-*s", width, json_string_value(v));
  else if (json_is_integer(v)) printf("%*lld", width, (long long)json_integer_value(v));
  else if (json_is_real(v)) printf("%*g", width, json_real_value(v));
  else printf("%*s", width, "-");
}

/* Limits / queue rows as a table: {"queues":[rows]}, [rows] or one row object. 0 if printed. */
static int print_table(const json_t *j) {
  const json_t *rows = json_is_object(j) && json_is_array(json_object_get(j, "queues")) ? json_object_get(j, "queues") : j;
  json_t *one = NULL;
  if (json_is_object(rows)) {
    if (!json_object_get(rows, "model")) return -1;
    one = json_array();
    json_array_append(one, (json_t *)rows);
    rows = one;
  }
  if (!json_is_array(rows)) return -1;
  printf("%-24s %-16s %8s %8s %12s %10s %7s\n", "MODEL", "TENANT", "QUEUED", "INFLIGHT", "MAX_INFLIGHT", "MAX_QUEUED",
         "WEIGHT");
  size_t i;
  const json_t *r;
  json_array_foreach(rows, i, r) {
    cell(r, "model", 24);
    printf(" ");
    cell(r, "tenant", 16);
    static const char *num[] = {"queued", "inflight", "max_inflight", "max_queued", "weight"};
    static const int w[] = {8, 8, 12, 10, 7};
    for (int k = 0; k < 5; k++) {
      printf(" ");
      cell(r, num[k], w[k]);
    }
    printf("\n");
  }
  json_decref(one);
  return 0;
}

static int g_json = 0; /* --json: JSON even on a terminal */

/* Prints a body: a table on a terminal (unless --json), else JSON indented (raw when it is not
 * JSON). */
static void print_body(const char *body) {
  json_t *j = json_loads(body, JSON_DECODE_ANY, NULL);
  if (j && !g_json && isatty(STDOUT_FILENO) && !print_table(j)) {
    json_decref(j);
    return;
  }
  if (j) {
    char *t = json_dumps(j, JSON_INDENT(2) | JSON_ENCODE_ANY);
    printf("%s\n", t ? t : body);
    free(t);
    json_decref(j);
  } else {
    printf("%s\n", body);
  }
}

static int append_q(char *q, size_t cap, const char *key, const char *val) {
  char *e = curl_easy_escape(NULL, val, 0);
  if (!e) return -1;
  size_t n = strlen(q);
  snprintf(q + n, cap - n, "%s%s=%s", n ? "&" : "?", key, e);
  curl_free(e);
  return 0;
}

int gc_cmd_limits(gc_cli_t *cli, int argc, char **argv) {
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      usage(stdout);
      return 0;
    }
  /* --json (anywhere): JSON even on a terminal */
  int n = 0;
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "--json")) g_json = 1;
    else argv[n++] = argv[i];
  }
  argc = n;
  if (argc < 2 || (strcmp(argv[1], "get") && strcmp(argv[1], "set"))) {
    usage(stderr);
    return 2;
  }
  int set = !strcmp(argv[1], "set");
  const char *model = NULL, *tenant = NULL;
  long inflight = -1, queued = -1;
  double weight = -1;
  for (int i = 2; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!v) {
      fprintf(stderr, "gantry limits: %s needs a value\n", a);
      return 2;
    }
    i++;
    char *end = NULL;
    if (v[0] == '-' && strcmp(a, "--model") && strcmp(a, "--tenant")) {
      fprintf(stderr, "gantry limits: %s must not be negative\n", a);
      return 2;
    }
    if (!strcmp(a, "--model")) model = v;
    else if (!strcmp(a, "--tenant")) tenant = v;
    else if (set && !strcmp(a, "--max-inflight")) inflight = strtol(v, &end, 10);
    else if (set && !strcmp(a, "--max-queued")) queued = strtol(v, &end, 10);
    else if (set && !strcmp(a, "--weight")) weight = strtod(v, &end);
    else {
      fprintf(stderr, "gantry limits: unknown option %s\n", a);
      usage(stderr);
      return 2;
    }
    if (end && (*end || end == v)) {
      fprintf(stderr, "gantry limits: bad number for %s: %s\n", a, v);
      return 2;
    }
  }
  gc_http_t h = cli->http;
  if (cli->admin_key) h.api_key = cli->admin_key;
  long st;
  char *body = NULL;
  gt_err_t err = {0};
  int rc;
  if (set) {
    if (!model) {
      fprintf(stderr, "gantry limits set: --model is required\n");
      return 2;
    }
    if (inflight < 0 && queued < 0 && weight < 0) {
      fprintf(stderr, "gantry limits set: nothing to set (--max-inflight, --max-queued or --weight)\n");
      return 2;
    }
    json_t *req = json_pack("{s:s}", "model", model);
    if (tenant) json_object_set_new(req, "tenant", json_string(tenant));
    if (inflight >= 0) json_object_set_new(req, "max_inflight", json_integer(inflight));
    if (queued >= 0) json_object_set_new(req, "max_queued", json_integer(queued));
    if (weight >= 0) json_object_set_new(req, "weight", json_real(weight));
    char *t = json_dumps(req, JSON_COMPACT);
    json_decref(req);
    rc = gc_http_do(&h, "PUT", "/admin/limits", t, &st, &body, &err);
    free(t);
  } else {
    char path[1024] = "";
    if ((model && append_q(path, sizeof path, "model", model)) ||
        (tenant && append_q(path, sizeof path, "tenant", tenant))) {
      fprintf(stderr, "gantry limits: out of memory\n");
      return 1;
    }
    char full[1100];
    snprintf(full, sizeof full, "/admin/limits%s", path);
    rc = gc_http_do(&h, "GET", full, NULL, &st, &body, &err);
  }
  if (rc) {
    fprintf(stderr, "gantry limits: %s\n", err.msg);
    return 1;
  }
  if (st < 200 || st >= 300) {
    fprintf(stderr, "gantry limits: HTTP %ld\n", st);
    print_body(body);
    free(body);
    return 1;
  }
  print_body(body);
  free(body);
  return 0;
}

int gc_cmd_queues(gc_cli_t *cli, int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "--json")) g_json = 1;
  if (argc > 2 || (argc == 2 && !g_json)) {
    fprintf(stderr, "usage: gantry queues [--json]   (a table on a terminal, else JSON)\n");
    return argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) ? 0 : 2;
  }
  gc_http_t h = cli->http;
  if (cli->admin_key) h.api_key = cli->admin_key;
  long st;
  char *body = NULL;
  gt_err_t err = {0};
  if (gc_http_do(&h, "GET", "/admin/queues", NULL, &st, &body, &err)) {
    fprintf(stderr, "gantry queues: %s\n", err.msg);
    return 1;
  }
  if (st != 200) fprintf(stderr, "gantry queues: HTTP %ld\n", st);
  print_body(body);
  free(body);
  return st == 200 ? 0 : 1;
}
