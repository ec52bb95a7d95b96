/* common/grpc_delta.c — GenerateResponse builders and the delta merge function. */
#include "common/grpc_delta.h"

#include <stdlib.h>
#include <string.h>

static char *str_cat(const char *a, const char *b) {
  size_t na = a ? strlen(a) : 0, nb = b ? strlen(b) : 0;
  char *p = malloc(na + nb + 1);
  if (!p) return NULL;
  if (na) memcpy(p, a, na);
  if (nb) memcpy(p + na, b, nb);
  p[na + nb] = '\0';
  return p;
}

/* Replaces *field (malloc'd or protobuf_c_empty_string) by *field + add. */
static int append_str(char **field, const char *add) {
  if (!add || !add[0]) return 0;
  char *p = str_cat(*field, add);
  if (!p) return -1;
  if (*field && *field != protobuf_c_empty_string) free(*field);
  *field = p;
  return 0;
}

static char *dup_or_empty(const char *s) {
  if (!s || !s[0]) return (char *)protobuf_c_empty_string;
  return strdup(s);
}

gt_genresp_t *gt_delta_new(void) {
  gt_genresp_t *r = malloc(sizeof *r);
  Gantry__V1__Delta *d = malloc(sizeof *d);
  if (!r || !d) {
    free(r);
    free(d);
    return NULL;
  }
  gantry__v1__generate_response__init(r);
  gantry__v1__delta__init(d);
  r->kind_case = GANTRY__V1__GENERATE_RESPONSE__KIND_DELTA;
  r->delta = d;
  return r;
}

int gt_delta_add_token(gt_genresp_t *r, int32_t id, const char *text, const char *reasoning) {
  Gantry__V1__Delta *d = r->delta;
  int32_t *ids = realloc(d->token_ids, (d->n_token_ids + 1) * sizeof *ids);
  if (!ids) return -1;
  d->token_ids = ids;
  ids[d->n_token_ids++] = id;
  if (append_str(&d->text, text) || append_str(&d->reasoning_text, reasoning)) return -1;
  return 0;
}

int gt_delta_add_tool_call(gt_genresp_t *r, uint32_t index, const char *id, const char *name,
                           const char *arguments) {
  Gantry__V1__Delta *d = r->delta;
  Gantry__V1__ToolCallDelta *t = malloc(sizeof *t);
  Gantry__V1__ToolCallDelta **arr =
      t ? realloc(d->tool_calls, (d->n_tool_calls + 1) * sizeof *arr) : NULL;
  if (!arr) {
    free(t);
    return -1;
  }
  d->tool_calls = arr;
  gantry__v1__tool_call_delta__init(t);
  t->index = index;
  t->id = dup_or_empty(id);
  t->name = dup_or_empty(name);
  t->arguments = dup_or_empty(arguments);
  arr[d->n_tool_calls++] = t;
  int rc = 0;
  char **f[3] = {&t->id, &t->name, &t->arguments};
  for (int i = 0; i < 3; i++)
    if (!*f[i]) { /* strdup failed: keep the message valid */
      *f[i] = (char *)protobuf_c_empty_string;
      rc = -1;
    }
  return rc;
}

gt_genresp_t *gt_final_new(Gantry__V1__FinishReason reason, const char *error) {
  gt_genresp_t *r = malloc(sizeof *r);
  Gantry__V1__Final *f = malloc(sizeof *f);
  Gantry__V1__Usage *u = malloc(sizeof *u);
  Gantry__V1__Timings *t = malloc(sizeof *t);
  char *e = dup_or_empty(error);
  if (!r || !f || !u || !t || !e) {
    free(r);
    free(f);
    free(u);
    free(t);
    if (e && e != protobuf_c_empty_string) free(e);
    return NULL;
  }
  gantry__v1__generate_response__init(r);
  gantry__v1__final__init(f);
  gantry__v1__usage__init(u);
  gantry__v1__timings__init(t);
  f->finish_reason = reason;
  f->error = e;
  f->usage = u;
  f->timings = t;
  r->kind_case = GANTRY__V1__GENERATE_RESPONSE__KIND_FINAL;
  r->final = f;
  return r;
}

void gt_genresp_free(gt_genresp_t *r) {
  if (r) protobuf_c_message_free_unpacked(&r->base, NULL);
}

/* Grows *arr (n elements of size sz) by m elements copied from src; 0 or -1. */
static int append_arr(void **arr, size_t n, const void *src, size_t m, size_t sz) {
  if (m == 0) return 0;
  void *p = realloc(*arr, (n + m) * sz);
  if (!p) return -1;
  memcpy((char *)p + n * sz, src, m * sz);
  *arr = p;
  return 0;
}

int gt_delta_merge(void *user, ProtobufCMessage *into_m, ProtobufCMessage *next_m) {
  (void)user;
  gt_genresp_t *into = (gt_genresp_t *)into_m, *next = (gt_genresp_t *)next_m;
  if (into->kind_case != GANTRY__V1__GENERATE_RESPONSE__KIND_DELTA ||
      next->kind_case != GANTRY__V1__GENERATE_RESPONSE__KIND_DELTA)
    return 0;
  Gantry__V1__Delta *a = into->delta, *b = next->delta;
  if (a->index != b->index) return 0; /* different choices (n > 1) */

  /* Allocate everything first so that a failure leaves both messages unchanged. */
  char *text = NULL, *reason = NULL, *args = NULL;
  int join_tool = a->n_tool_calls > 0 && b->n_tool_calls > 0 &&
                  a->tool_calls[a->n_tool_calls - 1]->index == b->tool_calls[0]->index &&
                  !b->tool_calls[0]->id[0] && !b->tool_calls[0]->name[0];
  if (b->text[0] && !(text = str_cat(a->text, b->text))) goto oom;
  if (b->reasoning_text[0] && !(reason = str_cat(a->reasoning_text, b->reasoning_text))) goto oom;
  if (join_tool &&
      !(args = str_cat(a->tool_calls[a->n_tool_calls - 1]->arguments, b->tool_calls[0]->arguments)))
    goto oom;
  if (append_arr((void **)&a->token_ids, a->n_token_ids, b->token_ids, b->n_token_ids,
                 sizeof *a->token_ids))
    goto oom;
  /* the arrays may have grown without their counts changing: harmless on failure below */
  size_t skip = join_tool ? 1 : 0;
  if (append_arr((void **)&a->tool_calls, a->n_tool_calls, b->tool_calls + skip,
                 b->n_tool_calls - skip, sizeof *a->tool_calls))
    goto oom;
  if (append_arr((void **)&a->logprobs, a->n_logprobs, b->logprobs, b->n_logprobs,
                 sizeof *a->logprobs))
    goto oom;

  a->n_token_ids += b->n_token_ids;
  b->n_token_ids = 0;
  if (text) {
    if (a->text != protobuf_c_empty_string) free(a->text);
    a->text = text;
  }
  if (reason) {
    if (a->reasoning_text != protobuf_c_empty_string) free(a->reasoning_text);
    a->reasoning_text = reason;
  }
  if (join_tool) {
    Gantry__V1__ToolCallDelta *t = a->tool_calls[a->n_tool_calls - 1];
    if (t->arguments != protobuf_c_empty_string) free(t->arguments);
    t->arguments = args;
    gantry__v1__tool_call_delta__free_unpacked(b->tool_calls[0], NULL);
  }
  a->n_tool_calls += b->n_tool_calls - skip;
  b->n_tool_calls = 0; /* moved: next keeps only its (now empty) arrays */
  a->n_logprobs += b->n_logprobs;
  b->n_logprobs = 0;
  return 1;
oom:
  free(text);
  free(reason);
  free(args);
  return 0;
}
