/* router/openai_responses_resp.c — engine GenerateResponse messages -> a Responses API response
 * object and its streamed events (see openai_responses.h). Output items follow the order the
 * engine produces: reasoning text (rs_), then message text (msg_), then function calls (fc_);
 * a delta of another kind closes the open item (its .done events) and opens the next.
 * An item's text enters a jansson object only as a placeholder ("\x01<id hex>:<item>\x01", the
 * response id is random, so no other string of the object can be one); render() dumps the
 * object and writes each item's text in place of its placeholder, so an object with the whole
 * output costs about its size, not the several copies a jansson string and json_dumps take. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "common/json_str.h"
#include "router/openai_responses.h"

typedef enum { IT_REASONING, IT_MESSAGE, IT_CALL } it_kind_t;

typedef struct rs_item {
  it_kind_t kind;
  char id[OA_RESP_ID_MAX + 24];
  oa_sb_t text;          /* reasoning / message text, or call arguments */
  char *call_id, *name;  /* IT_CALL */
  int tool_index;        /* IT_CALL: the engine's tool-call index */
  bool done;             /* its .done events went out */
} rs_item_t;

struct rs_state {
  char id[OA_RESP_ID_MAX + 1];
  char model[256];
  int64_t created;
  json_t *echo, *items;  /* the request's (see oa_req_t) */
  bool store, stream;
  rs_item_t *it;
  int n, cap;
  int seq;               /* sequence_number of the next event */
  bool started, finished;
  Gantry__V1__FinishReason finish;
  uint32_t tokens;
  Gantry__V1__Usage usage;
  bool have_usage;
  char *error;           /* failed: the engine's message (owned) */
};

rs_state_t *rs_new(const oa_req_t *req, int64_t created) {
  rs_state_t *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  unsigned char rnd[16];
  if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd) { /* ids must not be guessable */
    free(s);
    return NULL;
  }
  int k = snprintf(s->id, sizeof s->id, "resp_");
  for (size_t i = 0; i < sizeof rnd; i++) k += snprintf(s->id + k, sizeof s->id - (size_t)k, "%02x", rnd[i]);
  snprintf(s->model, sizeof s->model, "%s", req->model);
  s->created = created;
  s->echo = req->rs_echo ? json_incref(req->rs_echo) : json_object();
  s->items = req->rs_items ? json_incref(req->rs_items) : json_array();
  s->store = req->rs_store;
  s->stream = req->stream;
  gantry__v1__usage__init(&s->usage);
  return s;
}

void rs_free(rs_state_t *s) {
  if (!s) return;
  for (int i = 0; i < s->n; i++) {
    oa_sb_free(&s->it[i].text);
    free(s->it[i].call_id);
    free(s->it[i].name);
  }
  free(s->it);
  json_decref(s->echo);
  json_decref(s->items);
  free(s->error);
  free(s);
}

const char *rs_id(const rs_state_t *s) { return s->id; }
const char *rs_error(const rs_state_t *s) { return s->error; }

/* ---- JSON of items and of the response --------------------------------------------------- */

static const char *item_status(const rs_state_t *s, const rs_item_t *it) {
  if (!it->done) return "in_progress";
  return s->finish == GANTRY__V1__FINISH_REASON__FINISH_REASON_LENGTH && it == &s->it[s->n - 1] ? "incomplete" : "completed";
}

/* The placeholder of its text (see the top of the file). */
static json_t *text_of(const rs_state_t *s, const rs_item_t *it) {
  char ph[OA_RESP_ID_MAX + 24];
  snprintf(ph, sizeof ph, "\x01%s:%d\x01", s->id + 5, (int)(it - s->it));
  return json_string(ph);
}

/* Appends o (consumed) as compact JSON to out, each text placeholder replaced by its item's text
 * as a JSON string. 0 or -1 (out of memory). */
static int render(const rs_state_t *s, json_t *o, oa_sb_t *out) {
  char *t = o ? json_dumps(o, JSON_COMPACT) : NULL;
  json_decref(o);
  if (!t) return -1;
  char pat[OA_RESP_ID_MAX + 16];
  const int pl = snprintf(pat, sizeof pat, "\"\\u0001%s:", s->id + 5);
  const char *p = t, *q;
  while ((q = strstr(p, pat))) {
    char *end;
    const long i = strtol(q + pl, &end, 10);
    oa_sb_append(out, p, (size_t)(q - p));
    if (end > q + pl && i >= 0 && i < s->n && !strncmp(end, "\\u0001\"", 7)) {
      gt_sb_add_json_str(out, s->it[i].text.p, s->it[i].text.len);
      p = end + 7;
    } else { /* not one of ours (cannot happen: the id is random) */
      oa_sb_append(out, q, 1);
      p = q + 1;
    }
  }
  oa_sb_append(out, p, strlen(p));
  free(t);
  return out->oom ? -1 : 0;
}

/* The bytes of every item's text (what render adds per copy of the output). */
static size_t text_bytes(const rs_state_t *s) {
  size_t n = 0;
  for (int i = 0; i < s->n; i++) n += s->it[i].text.len;
  return n;
}

static json_t *part_json(const rs_state_t *s, const rs_item_t *it, bool with_text) {
  if (it->kind == IT_REASONING)
    return json_pack("{s:s,s:o}", "type", "reasoning_text", "text", with_text ? text_of(s, it) : json_string(""));
  return json_pack("{s:s,s:o,s:[],s:[]}", "type", "output_text", "text", with_text ? text_of(s, it) : json_string(""),
                   "annotations", "logprobs");
}

/* An output item; full: with its text (else as announced by output_item.added). */
static json_t *item_json(const rs_state_t *s, const rs_item_t *it, bool full) {
  switch (it->kind) {
    case IT_REASONING:
      return json_pack("{s:s,s:s,s:[],s:o}", "type", "reasoning", "id", it->id, "summary", "content",
                       full ? json_pack("[o]", part_json(s, it, true)) : json_array());
    case IT_MESSAGE:
      return json_pack("{s:s,s:s,s:s,s:s,s:o}", "type", "message", "id", it->id, "status", item_status(s, it), "role",
                       "assistant", "content", full ? json_pack("[o]", part_json(s, it, true)) : json_array());
    default:
      return json_pack("{s:s,s:s,s:s,s:s,s:o,s:s}", "type", "function_call", "id", it->id, "call_id", it->call_id,
                       "name", it->name ? it->name : "", "arguments", full ? text_of(s, it) : json_string(""),
                       "status", item_status(s, it));
  }
}

static json_t *usage_json(const rs_state_t *s) {
  const uint32_t in = s->usage.prompt_tokens, out = s->have_usage ? s->usage.completion_tokens : s->tokens;
  return json_pack("{s:i,s:{s:i},s:i,s:{s:i},s:i}", "input_tokens", (int)in, "input_tokens_details", "cached_tokens",
                   (int)s->usage.cached_prompt_tokens, "output_tokens", (int)out, "output_tokens_details",
                   "reasoning_tokens", (int)s->usage.reasoning_tokens, "total_tokens", (int)(in + out));
}

static const char *status_of(const rs_state_t *s) {
  if (!s->finished) return "in_progress";
  if (s->error) return "failed";
  return s->finish == GANTRY__V1__FINISH_REASON__FINISH_REASON_LENGTH ? "incomplete" : "completed";
}

static json_t *response_json(const rs_state_t *s) {
  json_t *o = json_pack("{s:s,s:s,s:I,s:s,s:s}", "id", s->id, "object", "response", "created_at", (json_int_t)s->created,
                        "status", status_of(s), "model", s->model);
  json_object_update(o, s->echo);
  json_object_set_new(o, "error", s->error ? json_pack("{s:s,s:s}", "code", "server_error", "message", s->error)
                                           : json_null());
  json_object_set_new(o, "incomplete_details",
                      s->finished && !s->error && s->finish == GANTRY__V1__FINISH_REASON__FINISH_REASON_LENGTH
                          ? json_pack("{s:s}", "reason", "max_output_tokens")
                          : json_null());
  json_t *out = json_array();
  for (int i = 0; i < s->n; i++) json_array_append_new(out, item_json(s, &s->it[i], true));
  json_object_set_new(o, "output", out);
  json_object_set_new(o, "usage", s->finished ? usage_json(s) : json_null());
  return o;
}

/* ---- events ------------------------------------------------------------------------------ */

/* "event: T\ndata: {type: T, sequence_number, ...obj}\n\n"; obj is consumed. */
static int ev(rs_state_t *s, oa_sb_t *out, const char *type, json_t *obj) {
  if (!out) {
    json_decref(obj);
    return 0;
  }
  json_t *o = json_pack("{s:s,s:i}", "type", type, "sequence_number", s->seq++);
  json_object_update(o, obj);
  json_decref(obj);
  int rc = oa_sb_append(out, "event: ", 7) || oa_sb_append(out, type, strlen(type)) || oa_sb_append(out, "\ndata: ", 7) ||
           render(s, o, out) || oa_sb_append(out, "\n\n", 2);
  return rc ? -1 : 0;
}

static int start(rs_state_t *s, oa_sb_t *out) {
  if (s->started) return 0;
  s->started = true;
  return ev(s, out, "response.created", json_pack("{s:o}", "response", response_json(s))) ||
         ev(s, out, "response.in_progress", json_pack("{s:o}", "response", response_json(s)));
}

/* The .done events of the open (last) item. */
static int close_item(rs_state_t *s, oa_sb_t *out) {
  if (!s->n || s->it[s->n - 1].done) return 0;
  rs_item_t *it = &s->it[s->n - 1];
  it->done = true;
  const int oi = s->n - 1;
  int rc = 0;
  if (it->kind == IT_CALL) {
    rc |= ev(s, out, "response.function_call_arguments.done",
             json_pack("{s:s,s:i,s:o,s:s}", "item_id", it->id, "output_index", oi, "arguments", text_of(s, it), "name",
                       it->name ? it->name : ""));
  } else {
    const char *t = it->kind == IT_REASONING ? "response.reasoning_text.done" : "response.output_text.done";
    json_t *o = json_pack("{s:s,s:i,s:i,s:o}", "item_id", it->id, "output_index", oi, "content_index", 0, "text",
                          text_of(s, it));
    if (it->kind == IT_MESSAGE) json_object_set_new(o, "logprobs", json_array());
    rc |= ev(s, out, t, o);
    rc |= ev(s, out, "response.content_part.done",
             json_pack("{s:s,s:i,s:i,s:o}", "item_id", it->id, "output_index", oi, "content_index", 0, "part",
                       part_json(s, it, true)));
  }
  rc |= ev(s, out, "response.output_item.done", json_pack("{s:i,s:o}", "output_index", oi, "item", item_json(s, it, true)));
  return rc ? -1 : 0;
}

/* Opens a new item of kind k (closing the open one): output_item.added (+ content_part.added). */
static rs_item_t *open_item(rs_state_t *s, it_kind_t k, oa_sb_t *out, int *rc) {
  *rc |= close_item(s, out);
  if (s->n == s->cap) {
    int cap = s->cap ? s->cap * 2 : 4;
    rs_item_t *p = realloc(s->it, (size_t)cap * sizeof *p);
    if (!p) {
      *rc = -1;
      return NULL;
    }
    s->it = p;
    s->cap = cap;
  }
  rs_item_t *it = &s->it[s->n];
  memset(it, 0, sizeof *it);
  it->kind = k;
  static const char *const pfx[] = {"rs", "msg", "fc"};
  snprintf(it->id, sizeof it->id, "%s_%s_%d", pfx[k], s->id + 5, s->n);
  const int oi = s->n++;
  *rc |= ev(s, out, "response.output_item.added", json_pack("{s:i,s:o}", "output_index", oi, "item", item_json(s, it, false)));
  if (k != IT_CALL)
    *rc |= ev(s, out, "response.content_part.added",
              json_pack("{s:s,s:i,s:i,s:o}", "item_id", it->id, "output_index", oi, "content_index", 0, "part",
                        part_json(s, it, false)));
  return it;
}

/* Text of kind k (reasoning or message): appended to the open item of that kind, or a new one. */
static int add_text(rs_state_t *s, it_kind_t k, const char *t, oa_sb_t *out) {
  int rc = 0;
  rs_item_t *it = s->n && !s->it[s->n - 1].done && s->it[s->n - 1].kind == k ? &s->it[s->n - 1] : open_item(s, k, out, &rc);
  if (!it || oa_sb_append(&it->text, t, strlen(t))) return -1;
  json_t *o = json_pack("{s:s,s:i,s:i,s:s}", "item_id", it->id, "output_index", s->n - 1, "content_index", 0, "delta", t);
  if (k == IT_MESSAGE) json_object_set_new(o, "logprobs", json_array());
  rc |= ev(s, out, k == IT_REASONING ? "response.reasoning_text.delta" : "response.output_text.delta", o);
  return rc ? -1 : 0;
}

static int add_call(rs_state_t *s, const Gantry__V1__ToolCallDelta *t, oa_sb_t *out) {
  int rc = 0;
  rs_item_t *it = NULL;
  for (int i = 0; i < s->n; i++)
    if (s->it[i].kind == IT_CALL && s->it[i].tool_index == (int)t->index) it = &s->it[i];
  if (!it) {
    /* announced below, once its call id and name are set (the engine sends the name first) */
    rc |= close_item(s, out);
    if (!(it = open_item(s, IT_CALL, NULL, &rc))) return -1;
    it->tool_index = (int)t->index;
    char cid[OA_RESP_ID_MAX + 24];
    snprintf(cid, sizeof cid, "call_%s_%u", s->id + 5, t->index);
    it->call_id = strdup(t->id && t->id[0] ? t->id : cid);
    it->name = strdup(t->name ? t->name : "");
    if (!it->call_id || !it->name) return -1;
    rc |= ev(s, out, "response.output_item.added", json_pack("{s:i,s:o}", "output_index", s->n - 1, "item", item_json(s, it, false)));
  }
  if (t->arguments && t->arguments[0]) {
    if (oa_sb_append(&it->text, t->arguments, strlen(t->arguments))) return -1;
    rc |= ev(s, out, "response.function_call_arguments.delta",
             json_pack("{s:s,s:i,s:s}", "item_id", it->id, "output_index", (int)(it - s->it), "delta", t->arguments));
  }
  return rc ? -1 : 0;
}

int rs_delta(rs_state_t *s, const Gantry__V1__Delta *d, oa_sb_t *out) {
  s->tokens += (uint32_t)d->n_token_ids;
  int rc = start(s, out);
  if (d->reasoning_text && d->reasoning_text[0]) rc |= add_text(s, IT_REASONING, d->reasoning_text, out);
  if (d->text && d->text[0]) rc |= add_text(s, IT_MESSAGE, d->text, out);
  for (size_t i = 0; i < d->n_tool_calls; i++) rc |= add_call(s, d->tool_calls[i], out);
  return rc ? -1 : 0;
}

void rs_final(rs_state_t *s, const Gantry__V1__Final *f) {
  if (s->finished) return;
  s->finished = true;
  s->finish = f->finish_reason;
  if (f->usage) {
    s->usage.prompt_tokens = f->usage->prompt_tokens;
    s->usage.completion_tokens = f->usage->completion_tokens;
    s->usage.cached_prompt_tokens = f->usage->cached_prompt_tokens;
    s->usage.reasoning_tokens = f->usage->reasoning_tokens;
    s->have_usage = true;
  }
  if (f->finish_reason == GANTRY__V1__FINISH_REASON__FINISH_REASON_ERROR ||
      f->finish_reason == GANTRY__V1__FINISH_REASON__FINISH_REASON_CANCELLED)
    s->error = strdup(f->error && f->error[0] ? f->error : "generation failed");
  for (int i = 0; i < s->n; i++) s->it[i].done = true; /* the body: every item complete */
}

int rs_final_sse(rs_state_t *s, const Gantry__V1__Final *f, oa_sb_t *out) {
  if (s->finished) return 0;
  int rc = start(s, out);
  rc |= close_item(s, out);
  rs_final(s, f);
  const char *t = s->error ? "response.failed" : s->finish == GANTRY__V1__FINISH_REASON__FINISH_REASON_LENGTH
                                                     ? "response.incomplete"
                                                     : "response.completed";
  rc |= ev(s, out, t, json_pack("{s:o}", "response", response_json(s)));
  return rc ? -1 : 0;
}

int rs_error_sse(rs_state_t *s, const oa_error_t *e, oa_sb_t *out) {
  return ev(s, out, "error", json_pack("{s:s?,s:s,s:s?}", "code", e->code[0] ? e->code : NULL, "message", e->message,
                                       "param", e->param[0] ? e->param : NULL));
}

char *rs_body(rs_state_t *s, const Gantry__V1__Final *f) {
  rs_final(s, f);
  oa_sb_t b = {0};
  gt_sb_reserve(&b, text_bytes(s) + 4096);
  if (render(s, response_json(s), &b)) {
    oa_sb_free(&b);
    return NULL;
  }
  return b.p;
}

char *rs_record(const rs_state_t *s, const char *tenant) {
  if (!s->store || !s->finished || s->error) return NULL;
  json_t *items = json_deep_copy(s->items);
  json_t *resp = response_json(s);
  size_t i;
  json_t *it;
  json_array_foreach(json_object_get(resp, "output"), i, it) json_array_append(items, it);
  json_t *o = json_pack("{s:s,s:o,s:o}", "tenant", tenant, "response", resp, "items", items);
  oa_sb_t b = {0};
  gt_sb_reserve(&b, 2 * text_bytes(s) + 4096); /* the output twice: in the response and in the items */
  if (render(s, o, &b)) {
    oa_sb_free(&b);
    return NULL;
  }
  return b.p;
}
