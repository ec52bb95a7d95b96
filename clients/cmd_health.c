/* clients/cmd_health.c — `gantry health`: GET /health (alive) and /ready (Redis and an engine). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clients/cmd.h"

int gc_cmd_health(gc_cli_t *cli, int argc, char **argv) {
  (void)argv;
  if (argc > 1) {
    fprintf(stderr, "usage: gantry health\n");
    return 2;
  }
  const char *paths[] = {"/health", "/ready"};
  int ok = 1;
  for (int i = 0; i < 2; i++) {
    long st = 0;
    char *body = NULL;
    gt_err_t err = {0};
    if (gc_http_do(&cli->http, "GET", paths[i], NULL, &st, &body, &err)) {
      printf("%-8s DOWN  %s\n", paths[i] + 1, err.msg);
      ok = 0;
      continue;
    }
    size_t n = strlen(body);
    while (n && (body[n - 1] == '\n' || body[n - 1] == '\r')) body[--n] = 0;
    printf("%-8s %-5s HTTP %ld %.300s\n", paths[i] + 1, st == 200 ? "OK" : "FAIL", st, body);
    if (st != 200) ok = 0;
    free(body);
  }
  return ok ? 0 : 1;
}
