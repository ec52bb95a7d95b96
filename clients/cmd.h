/* clients/cmd.h — the `gantry` subcommands. Each takes the global settings and its own argv
 * (argv[0] is the subcommand name) and returns the process exit code; only main() exits. */
#ifndef GANTRY_CLIENTS_CMD_H
#define GANTRY_CLIENTS_CMD_H

#include <stddef.h>

#include "clients/http.h"
#include "common/err.h"

#ifndef GANTRY_VERSION
#define GANTRY_VERSION "dev"
#endif

typedef struct gc_cli {
  gc_http_t http;        /* --url / $GANTRY_URL, --api-key / $GANTRY_API_KEY */
  const char *admin_key; /* --admin-key / $GANTRY_ADMIN_KEY (falls back to the API key) */
  const char *cmdline;   /* the whole command line, for results.json */
} gc_cli_t;

int gc_cmd_bench(gc_cli_t *cli, int argc, char **argv);
int gc_cmd_chat(gc_cli_t *cli, int argc, char **argv);
int gc_cmd_limits(gc_cli_t *cli, int argc, char **argv);
int gc_cmd_health(gc_cli_t *cli, int argc, char **argv);
int gc_cmd_models(gc_cli_t *cli, int argc, char **argv);
int gc_cmd_check(gc_cli_t *cli, int argc, char **argv);
int gc_cmd_tokenize(gc_cli_t *cli, int argc, char **argv);
int gc_cmd_queues(gc_cli_t *cli, int argc, char **argv);

/* Id of the first model of GET /v1/models into out; GT_ENOTFOUND when the list is empty.
 * *max_len gets its max_model_len when the server says (else -1); max_len may be NULL. */
int gc_first_model(const gc_http_t *h, char *out, size_t cap, int *max_len, gt_err_t *err);
/* The entry of model `want` in GET /v1/models: its max_model_len (-1 when not given) into
 * *max_len; GT_ENOTFOUND with the models it does list when want is not one of them. */
int gc_find_model(const gc_http_t *h, const char *want, int *max_len, gt_err_t *err);

#endif
