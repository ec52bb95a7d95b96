/* clients/cmd_models.c — `gantry models`: GET /v1/models. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clients/cmd.h"

/* Parses a /v1/models body; returns the data array (borrowed from *root) or NULL. */
static json_t *models_list(const gc_http_t *h, json_t **root, gt_err_t *err) {
  long st;
  char *body;
  *root = NULL;
  if (gc_http_do(h, "GET", "/v1/models", NULL, &st, &body, err)) return NULL;
  *root = json_loads(body, 0, NULL);
  json_t *data = json_object_get(*root, "data");
  if (st != 200 || !json_is_array(data)) {
    gt_err_set(err, GT_EFORMAT, "GET /v1/models: HTTP %ld: %.200s", st, body);
    free(body);
    return NULL;
  }
  free(body);
  return data;
}

int gc_first_model(const gc_http_t *h, char *out, size_t cap, int *max_len, gt_err_t *err) {
  json_t *root;
  json_t *data = models_list(h, &root, err);
  int rc = GT_OK;
  if (!data) {
    rc = err ? err->code : GT_EFORMAT;
  } else {
    json_t *m = json_array_get(data, 0);
    json_t *id = json_object_get(m, "id");
    if (!json_is_string(id)) {
      rc = gt_err_set(err, GT_ENOTFOUND, "GET /v1/models lists no model");
    } else {
      snprintf(out, cap, "%s", json_string_value(id));
      json_t *ml = json_object_get(m, "max_model_len");
      if (max_len) *max_len = json_is_integer(ml) ? (int)json_integer_value(ml) : -1;
    }
  }
  json_decref(root);
  return rc;
}

int gc_find_model(const gc_http_t *h, const char *want, int *max_len, gt_err_t *err) {
  json_t *root;
  json_t *data = models_list(h, &root, err);
  if (!data) {
    json_decref(root);
    return err ? err->code : GT_EFORMAT;
  }
  char listed[512] = "";
  size_t i;
  json_t *m;
  int rc = GT_ENOTFOUND;
  json_array_foreach(data, i, m) {
    const char *id = json_string_value(json_object_get(m, "id"));
    if (!id) continue;
    if (!strcmp(id, want)) {
      json_t *ml = json_object_get(m, "max_model_len");
      if (max_len) *max_len = json_is_integer(ml) ? (int)json_integer_value(ml) : -1;
      rc = GT_OK;
      break;
    }
    size_t n = strlen(listed);
    snprintf(listed + n, sizeof listed - n, "%s%s", n ? ", " : "", id);
  }
  json_decref(root);
  if (rc) gt_err_set(err, GT_ENOTFOUND, "model %s is not served (GET /v1/models lists: %s)", want, listed[0] ? listed : "none");
  return rc;
}

int gc_cmd_models(gc_cli_t *cli, int argc, char **argv) {
  (void)argv;
  if (argc > 1) {
    fprintf(stderr, "usage: gantry models\n");
    return 2;
  }
  gt_err_t err = {0};
  json_t *root;
  json_t *data = models_list(&cli->http, &root, &err);
  if (!data) {
    fprintf(stderr, "gantry models: %s\n", err.msg);
    json_decref(root);
    return 1;
  }
  size_t i;
  json_t *m;
  json_array_foreach(data, i, m) {
    json_t *ml = json_object_get(m, "max_model_len"), *own = json_object_get(m, "owned_by");
    printf("%s", json_string_value(json_object_get(m, "id")) ? json_string_value(json_object_get(m, "id")) : "?");
    if (json_is_integer(ml)) printf("\tmax_model_len=%lld", (long long)json_integer_value(ml));
    if (json_is_string(own)) printf("\towned_by=%s", json_string_value(own));
    printf("\n");
  }
  json_decref(root);
  return 0;
}
