/* clients/cmd_tokenize.c — `gantry tokenize [--model M] "text"`: the server's POST /tokenize. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clients/cmd.h"

int gc_cmd_tokenize(gc_cli_t *cli, int argc, char **argv) {
  const char *model = NULL, *text = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--model") && i + 1 < argc) model = argv[++i];
    else if (argv[i][0] != '-' && !text) text = argv[i];
    else {
      fprintf(stderr, "usage: gantry tokenize [--model M] \"text\"\n");
      return 2;
    }
  }
  if (!text) {
    fprintf(stderr, "usage: gantry tokenize [--model M] \"text\"\n");
    return 2;
  }
  gt_err_t err = {0};
  char mbuf[256];
  if (!model) {
    if (gc_first_model(&cli->http, mbuf, sizeof mbuf, NULL, &err)) {
      fprintf(stderr, "gantry tokenize: %s (pass --model)\n", err.msg);
      return 1;
    }
    model = mbuf;
  }
  json_t *req = json_pack("{s:s, s:s}", "model", model, "prompt", text);
  char *body = json_dumps(req, JSON_COMPACT);
  json_decref(req);
  long st = 0;
  char *resp = NULL;
  int rc = body ? gc_http_do(&cli->http, "POST", "/tokenize", body, &st, &resp, &err) : GT_ENOMEM;
  free(body);
  if (rc) {
    fprintf(stderr, "gantry tokenize: %s\n", rc == GT_ENOMEM ? "out of memory" : err.msg);
    return 1;
  }
  json_t *j = json_loads(resp, 0, NULL);
  json_t *toks = json_object_get(j, "tokens"), *count = json_object_get(j, "count");
  int code = 0;
  if (st != 200 || !json_is_array(toks)) {
    fprintf(stderr, "gantry tokenize: HTTP %ld: %.300s\n", st, resp);
    code = 1;
  } else {
    printf("count %lld\n", json_is_integer(count) ? (long long)json_integer_value(count) : (long long)json_array_size(toks));
    size_t i;
    json_t *t;
    json_array_foreach(toks, i, t) printf("%s%lld", i ? " " : "", (long long)json_integer_value(t));
    printf("\n");
  }
  json_decref(j);
  free(resp);
  return code;
}
