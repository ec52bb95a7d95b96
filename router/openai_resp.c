/* router/openai_resp.c — engine GenerateResponse messages -> OpenAI response objects and SSE. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/json_str.h"
#include "router/openai.h"
#include "router/openai_responses.h"

#define MAX_TOOLS 64

typedef struct tool_acc {
  char *id, *name;
  oa_sb_t args;
  bool announced; /* streamed the id/type/name header */
} tool_acc_t;

/* One choice's accumulated output (n > 1: one per index). */
typedef struct oa_choice {
  int index;
  bool role_sent;
  oa_sb_t content, reasoning;
  tool_acc_t tools[MAX_TOOLS];
  int ntools;
  /* non-streaming logprobs as JSON text, each the elements of one array joined by ',' (a jansson
   * tree would take ~10x the bytes): chat [0] logprobs.content; completions [0] tokens,
   * [1] token_logprobs, [2] top_logprobs, [3] text_offset */
  oa_sb_t lp[4];
  size_t text_offset;
  char *echo;         /* completions with echo: prompt text not yet streamed (owned; NULL once sent) */
  const char *echo_body; /* its prompt's text for the non-streaming body (oa_resp.echo_texts) */
  bool finished;
  Gantry__V1__FinishReason finish;
} oa_choice_t;

struct oa_resp {
  oa_kind_t kind;
  bool stream, include_usage, continuous_usage, logprobs;
  bool legacy;        /* functions API: function_call instead of tool_calls */
  bool one_call;      /* parallel_tool_calls false: calls after the first are dropped */
  oa_reasoning_field_t rf;
  char id[160];
  char model[256];
  int64_t created;
  uint32_t tokens;    /* all choices */
  int n;              /* choices */
  oa_choice_t *ch;    /* [n] */
  oa_choice_t *c;     /* the choice of the message being converted */
  int n_finals;
  Gantry__V1__Usage usage; /* summed over the choices' finals (prompt and cached: the first's) */
  char *error;        /* the first ERROR final's message (owned) */
  bool have_usage;
  bool sse_done;      /* [DONE] sent */
  int n_per_prompt;   /* choices per prompt (n); choice i answers prompt i / n_per_prompt */
  char **echo_texts;  /* echo: [n / n_per_prompt] the prompts' texts (owned) */
  rs_state_t *rs;     /* OA_RESPONSES: everything goes there (openai_responses_resp.c) */
  size_t max_bytes;   /* bound of acc_bytes (oa_resp_set_max_bytes; 0: none) */
  int rs_copies;      /* OA_RESPONSES: copies of the output text rendered at once (oa_resp_copies) */
  size_t acc_bytes;   /* accumulated output, as the body (or the Responses object) writes it */
  bool too_large;     /* acc_bytes passed max_bytes: nothing more is taken */
};

/* Counts n more bytes of accumulated output: 0, or OA_RESP_TOO_LARGE once past the bound. */
static int count_bytes(oa_resp_t *r, size_t n) {
  r->acc_bytes += n;
  if (r->max_bytes && r->acc_bytes > r->max_bytes) r->too_large = true;
  return r->too_large ? OA_RESP_TOO_LARGE : 0;
}

/* Appends s[0..n) to b and counts it as copies JSON string contents (reasoning text is written
 * once per --reasoning-field name): 0, -1 (out of memory) or OA_RESP_TOO_LARGE. */
static int acc_text(oa_resp_t *r, oa_sb_t *b, const char *s, size_t n, int copies) {
  if (oa_sb_append(b, s, n)) return -1;
  return count_bytes(r, gt_json_chars_len(s, n) * (size_t)copies);
}

/* Appends v (borrowed) as one more element of the array text b: 0, -1 or OA_RESP_TOO_LARGE. */
static int acc_json(oa_resp_t *r, oa_sb_t *b, const json_t *v) {
  char *t = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
  if (!t) return -1;
  const size_t n = strlen(t);
  const int rc = (b->len && oa_sb_append(b, ",", 1)) || oa_sb_append(b, t, n);
  free(t);
  return rc ? -1 : count_bytes(r, n + 1);
}

void oa_resp_set_max_bytes(oa_resp_t *r, size_t max) {
  r->max_bytes = max;
  count_bytes(r, 0);
}

size_t oa_resp_bytes(const oa_resp_t *r) { return r->acc_bytes; }

oa_resp_t *oa_resp_new(const oa_req_t *req, const char *id, int64_t created, oa_reasoning_field_t rf) {
  oa_resp_t *r = calloc(1, sizeof *r);
  if (!r) return NULL;
  r->kind = req->kind;
  r->stream = req->stream;
  r->include_usage = req->include_usage;
  r->continuous_usage = req->continuous_usage;
  r->logprobs = req->logprobs;
  r->legacy = req->legacy_functions;
  r->one_call = req->one_tool_call;
  r->rf = rf;
  snprintf(r->id, sizeof r->id, "%s-%s", req->kind == OA_CHAT ? "chatcmpl" : "cmpl", id);
  snprintf(r->model, sizeof r->model, "%s", req->model);
  r->created = created;
  gantry__v1__usage__init(&r->usage);
  r->rs_copies = oa_resp_copies(req);
  if (req->kind == OA_RESPONSES && !(r->rs = rs_new(req, created))) {
    free(r);
    return NULL;
  }
  const int n_prompts = req->n_prompts > 1 ? req->n_prompts : 1;
  r->n_per_prompt = req->gen && req->gen->n > 1 ? (int)req->gen->n : 1;
  r->n = r->n_per_prompt * n_prompts;
  if (!(r->ch = calloc((size_t)r->n, sizeof *r->ch))) {
    free(r);
    return NULL;
  }
  r->c = &r->ch[0];
  if (req->echo_texts) {
    if (!(r->echo_texts = calloc((size_t)n_prompts, sizeof *r->echo_texts))) goto oom;
    for (int k = 0; k < n_prompts; k++)
      if (!(r->echo_texts[k] = strdup(req->echo_texts[k]))) goto oom;
  }
  for (int i = 0; i < r->n; i++) {
    oa_choice_t *c = &r->ch[i];
    c->index = i;
    if (r->echo_texts) c->echo_body = r->echo_texts[i / r->n_per_prompt];
    if (c->echo_body && !(c->echo = strdup(c->echo_body))) goto oom;
    if (c->echo_body && !r->stream) count_bytes(r, gt_json_chars_len(c->echo_body, strlen(c->echo_body)));
  }
  return r;
oom:
  oa_resp_free(r);
  return NULL;
}

void oa_resp_free(oa_resp_t *r) {
  if (!r) return;
  rs_free(r->rs);
  for (int k = 0; k < r->n; k++) {
    oa_choice_t *c = &r->ch[k];
    oa_sb_free(&c->content);
    oa_sb_free(&c->reasoning);
    for (int i = 0; i < c->ntools; i++) {
      free(c->tools[i].id);
      free(c->tools[i].name);
      oa_sb_free(&c->tools[i].args);
    }
    for (int i = 0; i < 4; i++) oa_sb_free(&c->lp[i]);
    free(c->echo);
  }
  for (int k = 0; r->echo_texts && k < r->n / r->n_per_prompt; k++) free(r->echo_texts[k]);
  free(r->echo_texts);
  free(r->ch);
  free(r->error);
  free(r);
}

uint32_t oa_resp_tokens(const oa_resp_t *r) { return r->tokens; }

/* Token bytes may be a partial UTF-8 sequence: invalid bytes become U+FFFD. */
static json_t *json_bytes_text(const uint8_t *p, size_t n) {
  if (oa_utf8_valid((const char *)p, n)) return json_stringn((const char *)p, n);
  oa_sb_t sb = {0};
  for (size_t i = 0; i < n; i++) {
    if (p[i] < 0x80) {
      if (oa_sb_append(&sb, (const char *)p + i, 1)) break;
    } else {
      size_t k = 1;
      while (k <= 4 && i + k <= n && !oa_utf8_valid((const char *)p + i, k)) k++;
      if (k <= 4 && i + k <= n) {
        if (oa_sb_append(&sb, (const char *)p + i, k)) break;
        i += k - 1;
      } else if (oa_sb_append(&sb, "\xef\xbf\xbd", 3)) {
        break;
      }
    }
  }
  json_t *s = json_stringn(sb.p ? sb.p : "", sb.len);
  oa_sb_free(&sb);
  return s;
}

static json_t *json_byte_array(const uint8_t *p, size_t n) {
  json_t *a = json_array();
  for (size_t i = 0; i < n; i++) json_array_append_new(a, json_integer(p[i]));
  return a;
}

static json_t *lp_entry(const Gantry__V1__TokenLogprob *t) {
  json_t *o = json_object();
  json_object_set_new(o, "token", json_bytes_text(t->token.data, t->token.len));
  json_object_set_new(o, "logprob", json_real(t->logprob));
  json_object_set_new(o, "bytes", json_byte_array(t->token.data, t->token.len));
  json_t *tops = json_array();
  for (size_t i = 0; i < t->n_top; i++) {
    json_t *x = json_object();
    json_object_set_new(x, "token", json_bytes_text(t->top[i]->token.data, t->top[i]->token.len));
    json_object_set_new(x, "logprob", json_real(t->top[i]->logprob));
    json_object_set_new(x, "bytes", json_byte_array(t->top[i]->token.data, t->top[i]->token.len));
    json_array_append_new(tops, x);
  }
  json_object_set_new(o, "top_logprobs", tops);
  return o;
}

/* Completions-style logprobs of one delta's tokens: appended to the accumulators (not
 * streaming; *rc: 0, -1 or OA_RESP_TOO_LARGE) and returned as a fresh object for the chunk. */
static json_t *completion_lp(oa_resp_t *r, const Gantry__V1__Delta *d, int *rc) {
  json_t *toks = json_array(), *lps = json_array(), *tops = json_array(), *offs = json_array();
  for (size_t i = 0; i < d->n_logprobs; i++) {
    const Gantry__V1__TokenLogprob *t = d->logprobs[i];
    json_t *tok = json_bytes_text(t->token.data, t->token.len);
    json_t *top = json_object();
    for (size_t k = 0; k < t->n_top; k++) {
      json_t *tt = json_bytes_text(t->top[k]->token.data, t->top[k]->token.len);
      json_object_set_new(top, json_string_value(tt), json_real(t->top[k]->logprob));
      json_decref(tt);
    }
    json_array_append(toks, tok);
    json_array_append_new(lps, json_real(t->logprob));
    json_array_append(tops, top);
    json_array_append_new(offs, json_integer((json_int_t)r->c->text_offset));
    if (!r->stream && !*rc) { /* the body at the end; a stream sends each chunk's and keeps none */
      json_t *lp = json_real(t->logprob), *off = json_integer((json_int_t)r->c->text_offset);
      *rc = acc_json(r, &r->c->lp[0], tok);
      if (!*rc) *rc = acc_json(r, &r->c->lp[1], lp);
      if (!*rc) *rc = acc_json(r, &r->c->lp[2], top);
      if (!*rc) *rc = acc_json(r, &r->c->lp[3], off);
      json_decref(lp);
      json_decref(off);
    }
    r->c->text_offset += t->token.len;
    json_decref(tok);
    json_decref(top);
  }
  return json_pack("{s:o,s:o,s:o,s:o}", "tokens", toks, "token_logprobs", lps, "top_logprobs", tops,
                   "text_offset", offs);
}

static json_t *chunk_base(oa_resp_t *r) {
  return json_pack("{s:s,s:s,s:I,s:s}", "id", r->id, "object",
                   r->kind == OA_CHAT ? "chat.completion.chunk" : "text_completion", "created",
                   (json_int_t)r->created, "model", r->model);
}

static int emit(oa_sb_t *out, json_t *obj) {
  char *s = json_dumps(obj, JSON_COMPACT);
  json_decref(obj);
  if (!s) return -1;
  int rc = oa_sb_append(out, "data: ", 6) || oa_sb_append(out, s, strlen(s)) || oa_sb_append(out, "\n\n", 2);
  free(s);
  return rc ? -1 : 0;
}

static void set_reasoning(oa_resp_t *r, json_t *obj, const char *text, size_t n) {
  if (oa_rf_reasoning(r->rf)) json_object_set_new(obj, "reasoning", json_stringn(text, n));
  if (oa_rf_reasoning_content(r->rf)) json_object_set_new(obj, "reasoning_content", json_stringn(text, n));
}

static json_t *usage_json(const oa_resp_t *r, const Gantry__V1__Usage *u, uint32_t completion) {
  uint32_t pt = u ? u->prompt_tokens : 0, ct = u ? u->completion_tokens : completion;
  json_t *o = json_pack("{s:i,s:i,s:i}", "prompt_tokens", (int)pt, "completion_tokens", (int)ct,
                        "total_tokens", (int)(pt + ct));
  if (u) {
    json_object_set_new(o, "prompt_tokens_details",
                        json_pack("{s:i}", "cached_tokens", (int)u->cached_prompt_tokens));
    json_object_set_new(o, "completion_tokens_details",
                        json_pack("{s:i}", "reasoning_tokens", (int)u->reasoning_tokens));
  }
  (void)r;
  return o;
}

static tool_acc_t *tool_at(oa_resp_t *r, uint32_t index) {
  for (int i = 0; i < r->c->ntools; i++)
    if ((uint32_t)(i) == index) return &r->c->tools[i];
  while ((uint32_t)r->c->ntools <= index && r->c->ntools < MAX_TOOLS) {
    memset(&r->c->tools[r->c->ntools], 0, sizeof r->c->tools[0]);
    r->c->ntools++;
  }
  return index < MAX_TOOLS ? &r->c->tools[index] : NULL;
}

/* echo: the first streamed completion chunk's text is the prompt followed by its own text.
 * Returns 0 or -1 on OOM. */
static int echo_prefix(oa_resp_t *r, json_t *choice) {
  if (!r->c->echo) return 0;
  oa_sb_t t = {0};
  const char *own = json_string_value(json_object_get(choice, "text"));
  int rc = oa_sb_append(&t, r->c->echo, strlen(r->c->echo)) || oa_sb_append(&t, own ? own : "", own ? strlen(own) : 0);
  if (!rc) rc = json_object_set_new(choice, "text", json_stringn(t.p, t.len));
  oa_sb_free(&t);
  free(r->c->echo);
  r->c->echo = NULL;
  return rc ? -1 : 0;
}

/* Makes choice `index` current (an index beyond n, which the engine never sends: choice 0). */
static void select_choice(oa_resp_t *r, uint32_t index) { r->c = &r->ch[index < (uint32_t)r->n ? index : 0]; }

int oa_resp_delta(oa_resp_t *r, const Gantry__V1__Delta *d, oa_sb_t *out) {
  if (r->too_large) return OA_RESP_TOO_LARGE;
  select_choice(r, d->index);
  r->tokens += (uint32_t)d->n_token_ids;
  size_t tl = d->text ? strlen(d->text) : 0, rl = d->reasoning_text ? strlen(d->reasoning_text) : 0;
  int rc = 0;
  if (r->rs) { /* the Responses object keeps every item's text, streamed or not, and renders it rs_copies times */
    size_t n = gt_json_chars_len(d->text, tl) + gt_json_chars_len(d->reasoning_text, rl);
    for (size_t i = 0; i < d->n_tool_calls; i++) {
      const Gantry__V1__ToolCallDelta *t = d->tool_calls[i];
      if (t->arguments) n += gt_json_chars_len(t->arguments, strlen(t->arguments));
      if (t->name) n += gt_json_chars_len(t->name, strlen(t->name));
    }
    if ((rc = count_bytes(r, n * (size_t)r->rs_copies))) return rc;
    return rs_delta(r->rs, d, r->stream ? out : NULL);
  }
  /* the whole-response text is for the non-streaming body only: a stream keeps no copy of what it
   * sent (router/README.md "Memory per request") */
  if (!r->stream && tl && (rc = acc_text(r, &r->c->content, d->text, tl, 1))) return rc;
  const int rcopies = oa_rf_reasoning(r->rf) + oa_rf_reasoning_content(r->rf); /* the body writes it under each name */
  if (!r->stream && rl && (rc = acc_text(r, &r->c->reasoning, d->reasoning_text, rl, rcopies)))
    return rc;

  if (r->kind == OA_COMPLETION) {
    json_t *lp = r->logprobs ? completion_lp(r, d, &rc) : NULL;
    if (!r->stream) {
      json_decref(lp);
      return rc;
    }
    if (tl == 0 && d->n_token_ids == 0) {
      json_decref(lp);
      return 0;
    }
    json_t *c = chunk_base(r);
    json_t *ch = json_pack("{s:i,s:s%,s:o,s:n}", "index", r->c->index, "text", tl ? d->text : "", tl,
                           "logprobs", lp ? lp : json_null(), "finish_reason");
    if (echo_prefix(r, ch)) {
      json_decref(c);
      json_decref(ch);
      return -1;
    }
    json_object_set_new(c, "choices", json_pack("[o]", ch));
    if (r->continuous_usage) json_object_set_new(c, "usage", usage_json(r, NULL, r->tokens));
    return emit(out, c);
  }

  /* chat */
  json_t *lpc = NULL;
  if (r->logprobs && d->n_logprobs) {
    lpc = json_array();
    for (size_t i = 0; i < d->n_logprobs && !rc; i++) {
      json_t *x = lp_entry(d->logprobs[i]);
      if (!r->stream) rc = acc_json(r, &r->c->lp[0], x);
      json_array_append_new(lpc, x);
    }
    if (rc) {
      json_decref(lpc);
      return rc;
    }
  }
  /* tool calls: accumulate; stream the header (id, type, name) first, then fragments */
  json_t *tc_header = NULL, *tc_args = NULL;
  for (size_t i = 0; i < d->n_tool_calls; i++) {
    const Gantry__V1__ToolCallDelta *t = d->tool_calls[i];
    if (r->one_call && t->index > 0) continue;
    tool_acc_t *a = tool_at(r, t->index);
    if (!a) continue;
    if (t->id && t->id[0] && !a->id && (a->id = strdup(t->id)) && !r->stream) rc = count_bytes(r, strlen(a->id));
    if (t->name && t->name[0] && !a->name && (a->name = strdup(t->name)) && !r->stream && !rc)
      rc = count_bytes(r, gt_json_chars_len(a->name, strlen(a->name)));
    if (!a->id) {
      char buf[200];
      if (r->n > 1) snprintf(buf, sizeof buf, "call_%s_%d_%u", r->id, r->c->index, t->index); /* unique per choice */
      else snprintf(buf, sizeof buf, "call_%s_%u", r->id, t->index);
      a->id = strdup(buf);
    }
    size_t al = t->arguments ? strlen(t->arguments) : 0;
    if (!r->stream && al && !rc) rc = acc_text(r, &a->args, t->arguments, al, 1);
    if (rc) {
      json_decref(lpc);
      json_decref(tc_header);
      json_decref(tc_args);
      return rc;
    }
    if (!r->stream) continue;
    if (!a->announced && a->name) {
      if (!tc_header) tc_header = json_array();
      json_array_append_new(tc_header,
                            json_pack("{s:i,s:s,s:s,s:{s:s,s:s}}", "index", (int)t->index, "id", a->id,
                                      "type", "function", "function", "name", a->name, "arguments", ""));
      a->announced = true;
    }
    if (al) {
      if (!tc_args) tc_args = json_array();
      json_array_append_new(tc_args, json_pack("{s:i,s:{s:s}}", "index", (int)t->index, "function",
                                               "arguments", t->arguments));
    }
  }
  if (!r->stream) {
    json_decref(lpc);
    return 0;
  }
  if (tl || rl || lpc || (!tc_header && !tc_args && d->n_token_ids && !r->c->role_sent)) {
    json_t *delta = json_object();
    if (!r->c->role_sent) {
      json_object_set_new(delta, "role", json_string("assistant"));
      r->c->role_sent = true;
    }
    if (rl) set_reasoning(r, delta, d->reasoning_text, rl);
    if (tl || !rl) json_object_set_new(delta, "content", json_stringn(d->text ? d->text : "", tl));
    json_t *c = chunk_base(r);
    json_t *ch = json_pack("{s:i,s:o,s:o,s:n}", "index", r->c->index, "delta", delta, "logprobs",
                           lpc ? json_pack("{s:o}", "content", lpc) : json_null(), "finish_reason");
    lpc = NULL;
    json_object_set_new(c, "choices", json_pack("[o]", ch));
    if (r->continuous_usage) json_object_set_new(c, "usage", usage_json(r, NULL, r->tokens));
    rc |= emit(out, c);
  }
  json_decref(lpc);
  json_t *parts[2] = {tc_header, tc_args};
  for (int k = 0; k < 2; k++) {
    if (!parts[k]) continue;
    json_t *delta = json_object();
    if (!r->c->role_sent) {
      json_object_set_new(delta, "role", json_string("assistant"));
      r->c->role_sent = true;
    }
    if (r->legacy) { /* one call: {"function_call": {"name", "arguments"}} */
      json_t *fn = json_object_get(json_array_get(parts[k], 0), "function");
      json_object_set(delta, "function_call", fn);
      json_decref(parts[k]);
    } else {
      json_object_set_new(delta, "tool_calls", parts[k]);
    }
    json_t *c = chunk_base(r);
    json_object_set_new(c, "choices",
                        json_pack("[{s:i,s:o,s:n,s:n}]", "index", r->c->index, "delta", delta, "logprobs", "finish_reason"));
    if (r->continuous_usage) json_object_set_new(c, "usage", usage_json(r, NULL, r->tokens));
    rc |= emit(out, c);
  }
  return rc ? -1 : 0;
}

static const char *finish_str(const oa_resp_t *r, Gantry__V1__FinishReason f) {
  switch (f) {
    case GANTRY__V1__FINISH_REASON__FINISH_REASON_LENGTH: return "length";
    case GANTRY__V1__FINISH_REASON__FINISH_REASON_TOOL_CALLS: return r->legacy ? "function_call" : "tool_calls";
    default: return r->c->ntools > 0 && r->kind == OA_CHAT ? (r->legacy ? "function_call" : "tool_calls") : "stop";
  }
}

int oa_resp_error_sse(oa_resp_t *r, const oa_error_t *e, oa_sb_t *out) {
  if (r && r->rs) return rs_error_sse(r->rs, e, out);
  char *s = oa_error_json(e);
  if (!s) return -1;
  int rc = oa_sb_append(out, "data: ", 6) || oa_sb_append(out, s, strlen(s)) ||
           oa_sb_append(out, "\n\ndata: [DONE]\n\n", 16);
  free(s);
  return rc ? -1 : 0;
}

/* Records f as its choice's final (a repeat is ignored): usage summed, the first error kept.
 * Returns true once every choice has its final. */
static bool record_final(oa_resp_t *r, const Gantry__V1__Final *f) {
  select_choice(r, f->index);
  if (!r->c->finished) {
    r->c->finished = true;
    r->c->finish = f->finish_reason;
    if (f->usage) {
      if (r->c->index % r->n_per_prompt == 0) { /* each prompt once, not once per choice */
        r->usage.prompt_tokens += f->usage->prompt_tokens;
        r->usage.cached_prompt_tokens += f->usage->cached_prompt_tokens;
      }
      r->have_usage = true;
      r->usage.completion_tokens += f->usage->completion_tokens;
      r->usage.reasoning_tokens += f->usage->reasoning_tokens;
    }
    if (!r->error && f->finish_reason == GANTRY__V1__FINISH_REASON__FINISH_REASON_ERROR)
      r->error = strdup(f->error && f->error[0] ? f->error : "generation failed");
    r->n_finals++;
  }
  return r->n_finals >= r->n;
}

int oa_resp_final(oa_resp_t *r, const Gantry__V1__Final *f) {
  if (r->rs) rs_final(r->rs, f);
  return record_final(r, f) ? 1 : 0;
}

const char *oa_resp_error(const oa_resp_t *r) { return r->rs ? rs_error(r->rs) : r->error; }

char *oa_resp_record(const oa_resp_t *r, const char *tenant) { return r->rs ? rs_record(r->rs, tenant) : NULL; }

const char *oa_resp_id(const oa_resp_t *r) { return r->rs ? rs_id(r->rs) : r->id; }

int oa_resp_final_sse(oa_resp_t *r, const Gantry__V1__Final *f, oa_sb_t *out) {
  if (r->rs) return rs_final_sse(r->rs, f, out);
  if (r->sse_done) return 0;
  const bool all = record_final(r, f);
  if (f->finish_reason == GANTRY__V1__FINISH_REASON__FINISH_REASON_ERROR ||
      f->finish_reason == GANTRY__V1__FINISH_REASON__FINISH_REASON_CANCELLED) {
    oa_error_t e;
    oa_err(&e, 500, "server_error", NULL, "engine_error", "engine error: %s",
           f->error && f->error[0] ? f->error : "generation failed");
    r->sse_done = true;
    return oa_resp_error_sse(r, &e, out);
  }
  const Gantry__V1__Usage *u = r->have_usage ? &r->usage : NULL;
  json_t *c = chunk_base(r);
  if (r->kind == OA_CHAT) {
    json_t *delta = json_object();
    if (!r->c->role_sent) {
      json_object_set_new(delta, "role", json_string("assistant"));
      json_object_set_new(delta, "content", json_string(""));
      r->c->role_sent = true;
    }
    json_object_set_new(c, "choices", json_pack("[{s:i,s:o,s:n,s:s}]", "index", r->c->index, "delta", delta,
                                                 "logprobs", "finish_reason", finish_str(r, f->finish_reason)));
  } else {
    json_t *ch = json_pack("{s:i,s:s,s:n,s:s}", "index", r->c->index, "text", "", "logprobs", "finish_reason",
                           finish_str(r, f->finish_reason));
    json_object_set_new(c, "choices", json_pack("[o]", ch));
    if (echo_prefix(r, ch)) {
      json_decref(c);
      return -1;
    }
  }
  if (r->continuous_usage) json_object_set_new(c, "usage", usage_json(r, u, r->tokens));
  if (emit(out, c)) return -1;
  if (!all) return 0; /* n > 1: the other choices are still running */
  r->sse_done = true;
  if (r->include_usage) {
    json_t *uc = chunk_base(r);
    json_object_set_new(uc, "choices", json_array());
    json_object_set_new(uc, "usage", usage_json(r, u, r->tokens));
    if (emit(out, uc)) return -1;
  }
  return oa_sb_append(out, "data: [DONE]\n\n", 14);
}

/* The non-streaming body is written as text into one buffer reserved up front, each piece of
 * accumulated output freed once it is in: what a body costs is about its size, not the ~10x of a
 * jansson tree of it (router/README.md "Memory per request"). Appends are checked once at the end
 * (oa_sb_t's oom flag). */

/* Appends v (consumed) as compact JSON. */
static void put_json(oa_sb_t *b, json_t *v) {
  char *t = v ? json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
  json_decref(v);
  if (!t) {
    b->oom = true;
    return;
  }
  oa_sb_append(b, t, strlen(t));
  free(t);
}

static void put_str(oa_sb_t *b, const char *s) { gt_sb_add_json_str(b, s ? s : "", s ? strlen(s) : 0); }

/* Appends `"key":[<a>]` and frees a. */
static void put_array(oa_sb_t *b, const char *key, oa_sb_t *a) {
  gt_sb_printf(b, "\"%s\":[", key);
  oa_sb_append(b, a->p, a->len);
  oa_sb_append(b, "]", 1);
  oa_sb_free(a);
}

/* One choice (r->c) of the non-streaming body; consumes its accumulated output. */
static void body_choice(oa_resp_t *r, oa_sb_t *b) {
  oa_choice_t *c = r->c;
  gt_sb_printf(b, "{\"index\":%d,", c->index);
  if (r->kind == OA_CHAT) {
    oa_sb_adds(b, "\"message\":{\"role\":\"assistant\",\"content\":");
    if (c->ntools && !c->content.len) oa_sb_adds(b, "null");
    else gt_sb_add_json_str(b, c->content.p, c->content.len);
    oa_sb_free(&c->content);
    if (c->reasoning.len && oa_rf_reasoning(r->rf)) {
      oa_sb_adds(b, ",\"reasoning\":");
      gt_sb_add_json_str(b, c->reasoning.p, c->reasoning.len);
    }
    if (c->reasoning.len && oa_rf_reasoning_content(r->rf)) {
      oa_sb_adds(b, ",\"reasoning_content\":");
      gt_sb_add_json_str(b, c->reasoning.p, c->reasoning.len);
    }
    oa_sb_free(&c->reasoning);
    if (c->ntools) oa_sb_adds(b, r->legacy ? ",\"function_call\":" : ",\"tool_calls\":[");
    for (int i = 0; i < (r->legacy && c->ntools ? 1 : c->ntools); i++) {
      tool_acc_t *a = &c->tools[i];
      if (i) oa_sb_adds(b, ",");
      if (!r->legacy) {
        oa_sb_adds(b, "{\"id\":");
        put_str(b, a->id);
        oa_sb_adds(b, ",\"type\":\"function\",\"function\":");
      }
      oa_sb_adds(b, "{\"name\":");
      put_str(b, a->name);
      oa_sb_adds(b, ",\"arguments\":");
      gt_sb_add_json_str(b, a->args.p, a->args.len);
      oa_sb_adds(b, r->legacy ? "}" : "}}");
      oa_sb_free(&a->args);
    }
    if (c->ntools && !r->legacy) oa_sb_adds(b, "]");
    oa_sb_adds(b, "},\"logprobs\":");
    if (r->logprobs) {
      oa_sb_adds(b, "{");
      put_array(b, "content", &c->lp[0]);
      oa_sb_adds(b, "}");
    } else {
      oa_sb_adds(b, "null");
    }
  } else {
    oa_sb_adds(b, "\"text\":\"");
    if (c->echo_body) gt_sb_add_json_chars(b, c->echo_body, strlen(c->echo_body));
    gt_sb_add_json_chars(b, c->content.p, c->content.len);
    oa_sb_adds(b, "\",\"logprobs\":");
    oa_sb_free(&c->content);
    if (r->logprobs) {
      static const char *const keys[4] = {"tokens", "token_logprobs", "top_logprobs", "text_offset"};
      for (int k = 0; k < 4; k++) {
        oa_sb_adds(b, k ? "," : "{");
        put_array(b, keys[k], &c->lp[k]);
      }
      oa_sb_adds(b, "}");
    } else {
      oa_sb_adds(b, "null");
    }
  }
  oa_sb_adds(b, ",\"finish_reason\":");
  put_str(b, finish_str(r, c->finish));
  oa_sb_adds(b, "}");
}

char *oa_resp_body(oa_resp_t *r, const Gantry__V1__Final *f) {
  if (r->rs) return rs_body(r->rs, f);
  record_final(r, f);
  oa_sb_t b = {0};
  /* the variable parts are acc_bytes; the rest is a few hundred bytes per choice and tool call */
  gt_sb_reserve(&b, r->acc_bytes + 1024 + (size_t)r->n * 512);
  oa_sb_adds(&b, "{\"id\":");
  put_str(&b, r->id);
  gt_sb_printf(&b, ",\"object\":\"%s\",\"created\":%lld,\"model\":", r->kind == OA_CHAT ? "chat.completion" : "text_completion",
               (long long)r->created);
  put_str(&b, r->model);
  oa_sb_adds(&b, ",\"choices\":[");
  for (int i = 0; i < r->n; i++) {
    if (i) oa_sb_adds(&b, ",");
    r->c = &r->ch[i];
    body_choice(r, &b);
  }
  oa_sb_adds(&b, "],\"usage\":");
  put_json(&b, usage_json(r, r->have_usage ? &r->usage : NULL, r->tokens));
  oa_sb_adds(&b, "}");
  if (b.oom) {
    oa_sb_free(&b);
    return NULL;
  }
  return b.p;
}

void oa_resp_size_error(const oa_resp_t *r, size_t max, oa_error_t *e) {
  const char *mt = r->kind == OA_RESPONSES ? "max_output_tokens" : "max_tokens";
  oa_err(e, 400, "invalid_request_error", mt, "response_too_large",
         "the response passed this router's limit of %zu bytes for a response built in memory "
         "(--max-response-bytes) after %u tokens; %s",
         max, r->tokens, oa_size_advice(r->kind));
}
