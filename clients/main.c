/* clients/main.c — `gantry` CLI entry: global options, then a subcommand. */
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clients/cmd.h"

static void usage(FILE *f) {
  fprintf(f,
          "gantry %s — client for gantry's router (or any OpenAI-compatible server)\n"
          "usage: gantry [--url URL] [--api-key K] [--admin-key K] COMMAND [ARGS]\n"
          "  chat [--model M] [--max-tokens N] [--temperature T] [--system S] \"prompt\"\n"
          "  bench ...                     telemetry matrix (gantry bench --help)\n"
          "  limits get [--model M] [--tenant T]\n"
          "  limits set --model M [--tenant T] [--max-inflight N] [--max-queued N] [--weight W]\n"
          "  queues [--json]               /admin/queues (admission queues; a table on a terminal)\n"
          "  health                        /health and /ready\n"
          "  models                        /v1/models\n"
          "  tokenize [--model M] \"text\"   the server's /tokenize\n"
          "  check [URL] [--model M]       post-deploy acceptance suite (ALL_PASS or what failed)\n"
          "URL defaults to $GANTRY_URL or http://127.0.0.1:8080; keys to $GANTRY_API_KEY and\n"
          "$GANTRY_ADMIN_KEY.\n",
          GANTRY_VERSION);
}

/* The command line as one string (for results.json); static buffer. */
static const char *join_args(int argc, char **argv) {
  static char buf[8192];
  size_t n = 0;
  for (int i = 0; i < argc && n < sizeof buf - 1; i++) {
    int w = snprintf(buf + n, sizeof buf - n, "%s%s", i ? " " : "", argv[i]);
    if (w < 0) break;
    n += (size_t)w;
  }
  if (n >= sizeof buf) n = sizeof buf - 1;
  buf[n] = 0;
  return buf;
}

int main(int argc, char **argv) {
  gc_cli_t cli = {0};
  cli.http.base_url = getenv("GANTRY_URL") ? getenv("GANTRY_URL") : "http://127.0.0.1:8080";
  cli.http.api_key = getenv("GANTRY_API_KEY");
  cli.admin_key = getenv("GANTRY_ADMIN_KEY");
  cli.http.timeout_ms = 600000;
  cli.cmdline = join_args(argc, argv);
  int i = 1;
  for (; i < argc && argv[i][0] == '-'; i++) {
    const char *a = argv[i];
    if ((!strcmp(a, "--url") || !strcmp(a, "--api-key") || !strcmp(a, "--admin-key")) && i + 1 < argc) {
      const char *v = argv[++i];
      if (!strcmp(a, "--url")) cli.http.base_url = v;
      else if (!strcmp(a, "--api-key")) cli.http.api_key = v;
      else cli.admin_key = v;
    } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage(stdout);
      return 0;
    } else if (!strcmp(a, "--version")) {
      printf("gantry %s\n", GANTRY_VERSION);
      return 0;
    } else {
      fprintf(stderr, "gantry: unknown option %s\n", a);
      usage(stderr);
      return 2;
    }
  }
  if (i >= argc) {
    usage(stderr);
    return 2;
  }
  static const struct {
    const char *name;
    int (*fn)(gc_cli_t *, int, char **);
  } cmds[] = {{"bench", gc_cmd_bench},   {"chat", gc_cmd_chat},     {"limits", gc_cmd_limits},
              {"health", gc_cmd_health}, {"models", gc_cmd_models}, {"check", gc_cmd_check},
              {"tokenize", gc_cmd_tokenize}, {"queues", gc_cmd_queues}};
  for (size_t k = 0; k < sizeof cmds / sizeof cmds[0]; k++)
    if (!strcmp(argv[i], cmds[k].name)) {
      curl_global_init(CURL_GLOBAL_DEFAULT);
      int rc = cmds[k].fn(&cli, argc - i, argv + i);
      curl_global_cleanup();
      return rc;
    }
  fprintf(stderr, "gantry: unknown command %s\n", argv[i]);
  usage(stderr);
  return 2;
}
