/* engine/server/server_convert.c — see server_convert.h. */
#include "engine/server/server_convert.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/chat/prompt.h"

/* ---- request checks ---- */

static int unknown(const ProtobufCMessage *m, const char *what, gt_err_t *err) {
  if (m && m->n_unknown_fields > 0)
    return gt_err_set(err, GT_EINVAL, "unknown field number %u in %s", m->unknown_fields[0].tag, what);
  return GT_OK;
}

static int finite_in(const char *field, float v, float lo, float hi, gt_err_t *err) {
  char param[48];
  snprintf(param, sizeof param, "sampling.%s", field);
  if (!isfinite(v) || v < lo || v > hi)
    return gt_err_set_param(err, GT_EINVAL, param, "%s must be in [%g, %g], got %g", param, (double)lo, (double)hi, (double)v);
  return GT_OK;
}

int srv_conv_check(const Gantry__V1__GenerateRequest *r, gt_err_t *err) {
  int rc = unknown(&r->base, "GenerateRequest", err);
  if (!rc && r->sampling) rc = unknown(&r->sampling->base, "GenerateRequest.sampling", err);
  if (!rc && r->input_case == GANTRY__V1__GENERATE_REQUEST__INPUT_TOKENS)
    rc = unknown(&r->tokens->base, "GenerateRequest.tokens", err);
  if (!rc && r->input_case == GANTRY__V1__GENERATE_REQUEST__INPUT_CHAT) {
    rc = unknown(&r->chat->base, "GenerateRequest.chat", err);
    for (size_t i = 0; !rc && i < r->chat->n_messages; i++) {
      const Gantry__V1__ChatMessage *m = r->chat->messages[i];
      rc = unknown(&m->base, "GenerateRequest.chat.messages[]", err);
      for (size_t k = 0; !rc && k < m->n_tool_calls; k++)
        rc = unknown(&m->tool_calls[k]->base, "GenerateRequest.chat.messages[].tool_calls[]", err);
    }
  }
  if (rc) return rc;
  if (r->input_case == GANTRY__V1__GENERATE_REQUEST__INPUT__NOT_SET)
    return gt_err_set(err, GT_EINVAL, "input: one of chat, prompt or tokens is required");
  const Gantry__V1__SamplingParams *s = r->sampling;
  if (s) {
    if (s->temperature_opt_case && (rc = finite_in("temperature", s->temperature, 0, 100, err))) return rc;
    if (s->top_p_opt_case && (rc = finite_in("top_p", s->top_p, 0, 1, err))) return rc;
    if (s->top_p_opt_case && s->top_p <= 0) return gt_err_set_param(err, GT_EINVAL, "sampling.top_p", "sampling.top_p must be in (0, 1], got %g", (double)s->top_p);
    if (s->min_p_opt_case && (rc = finite_in("min_p", s->min_p, 0, 1, err))) return rc;
    if (s->repetition_penalty_opt_case && (rc = finite_in("repetition_penalty", s->repetition_penalty, 0, 100, err))) return rc;
    if (s->repetition_penalty_opt_case && s->repetition_penalty <= 0)
      return gt_err_set_param(err, GT_EINVAL, "sampling.repetition_penalty", "sampling.repetition_penalty must be > 0, got %g", (double)s->repetition_penalty);
    if (s->presence_penalty_opt_case && (rc = finite_in("presence_penalty", s->presence_penalty, -2, 2, err))) return rc;
    if (s->frequency_penalty_opt_case && (rc = finite_in("frequency_penalty", s->frequency_penalty, -2, 2, err))) return rc;
  }
  for (size_t i = 0; i < r->n_logit_bias; i++) {
    /* ids and values are checked by sched_submit, which knows the vocabulary */
    if ((rc = unknown(&r->logit_bias[i]->base, "GenerateRequest.logit_bias[]", err))) return rc;
  }
  if (r->max_tokens_opt_case && r->max_tokens == 0) return gt_err_set_param(err, GT_EINVAL, "max_tokens", "max_tokens must be at least 1, got 0");
  if (r->top_logprobs_opt_case && r->top_logprobs > SEQOUT_MAX_TOP)
    return gt_err_set_param(err, GT_EINVAL, "top_logprobs", "top_logprobs must be at most %d, got %u", SEQOUT_MAX_TOP, r->top_logprobs);
  if (r->max_tokens_opt_case && r->min_tokens > r->max_tokens)
    return gt_err_set_param(err, GT_EINVAL, "min_tokens", "min_tokens (%u) must not exceed max_tokens (%u)", r->min_tokens, r->max_tokens);
  for (size_t i = 0; i < r->n_stop; i++)
    if (!r->stop[i][0]) return gt_err_set_param(err, GT_EINVAL, "stop", "stop[%zu] is empty", i);
  if (r->constraint) {
    if ((rc = unknown(&r->constraint->base, "GenerateRequest.constraint", err))) return rc;
    const int k = (int)r->constraint->kind;
    if (k < CONS_JSON_SCHEMA || k > CONS_TOOL_CALLS)
      return gt_err_set_param(err, GT_EINVAL, "constraint", "%s: unknown constraint kind %d", srv_conv_cons_param(r), k);
    if ((k == CONS_TOOL_CALL || k == CONS_TOOL_CALLS) && r->input_case != GANTRY__V1__GENERATE_REQUEST__INPUT_CHAT)
      return gt_err_set_param(err, GT_EINVAL, "constraint", "%s: a tool-call constraint needs chat input",
                              srv_conv_cons_param(r));
  }
  return GT_OK;
}

const char *srv_conv_cons_param(const Gantry__V1__GenerateRequest *r) {
  return r->constraint && r->constraint->param[0] ? r->constraint->param : "constraint";
}

int srv_conv_constraint(const Gantry__V1__GenerateRequest *r, sched_t *sched, sched_req_t *q, gt_err_t *err) {
  if (!r->constraint) return GT_OK;
  const Gantry__V1__Constraint *c = r->constraint;
  int rc = sched_constraint(sched, (cons_kind_t)c->kind, c->spec, strlen(c->spec), &q->constraint, err);
  if (rc) {
    gt_err_wrap(err, "%s", srv_conv_cons_param(r));
    snprintf(err->param, sizeof err->param, "constraint"); /* the router maps it to the request's param */
    return rc == GT_ENOMEM ? rc : GT_EINVAL;
  }
  return GT_OK;
}

/* ---- prompt ---- */

int srv_conv_chat(const Gantry__V1__ChatInput *c, int add_generation_prompt, int parse_special, const tok_t *tok,
                  const chat_family_t *fam, const char *fam_reason, int32_t **ids, size_t *n, int *opens_reasoning,
                  gt_err_t *err) {
  int rc = GT_OK;
  if (!fam) return gt_err_set(err, GT_EINVAL, "chat input is not available: %s", fam_reason ? fam_reason : "no chat template");
  if (c->n_messages == 0) return gt_err_set_param(err, GT_EINVAL, "chat.messages", "chat.messages is empty");
  size_t n_calls = 0;
  for (size_t i = 0; i < c->n_messages; i++) n_calls += c->messages[i]->n_tool_calls;
  chat_msg_t *m = calloc(c->n_messages, sizeof *m);
  chat_tool_call_t *tc = calloc(n_calls ? n_calls : 1, sizeof *tc);
  if (!m || !tc) {
    free(m);
    free(tc);
    return gt_err_set(err, GT_ENOMEM, "out of memory");
  }
  size_t t = 0;
  for (size_t i = 0; !rc && i < c->n_messages; i++) {
    const Gantry__V1__ChatMessage *x = c->messages[i];
    if ((rc = chat_role_parse(x->role, &m[i].role, err))) {
      gt_err_wrap(err, "chat.messages[%zu].role", i);
      break;
    }
    m[i].content = x->content;
    m[i].reasoning_content = x->reasoning_content[0] ? x->reasoning_content : NULL;
    m[i].tool_call_id = x->tool_call_id[0] ? x->tool_call_id : NULL;
    m[i].tool_calls = tc + t;
    m[i].n_tool_calls = x->n_tool_calls;
    for (size_t k = 0; k < x->n_tool_calls; k++, t++) {
      tc[t].id = x->tool_calls[k]->id[0] ? x->tool_calls[k]->id : NULL;
      tc[t].name = x->tool_calls[k]->name;
      tc[t].arguments = x->tool_calls[k]->arguments;
    }
  }
  if (c->continue_final_message) add_generation_prompt = 0;
  chat_render_opts_t o = {
      .tools_json = c->tools_json[0] ? c->tools_json : NULL,
      .continue_final = c->continue_final_message,
      .add_generation_prompt = add_generation_prompt,
      .enable_thinking = c->enable_thinking_opt_case ? c->enable_thinking : true,
  };
  if (!rc) rc = prompt_encode_chat(tok, fam, m, c->n_messages, &o, parse_special, ids, n, err);
  if (!rc) *opens_reasoning = add_generation_prompt && chat_prompt_opens_reasoning(fam, &o);
  free(m);
  free(tc);
  return rc;
}

int srv_conv_prompt(const Gantry__V1__GenerateRequest *r, const tok_t *tok, const chat_family_t *fam,
                    const char *fam_reason, int32_t **ids, size_t *n, int *opens_reasoning, gt_err_t *err) {
  *ids = NULL;
  *n = 0;
  *opens_reasoning = 0;
  int rc = GT_OK;
  switch (r->input_case) {
    case GANTRY__V1__GENERATE_REQUEST__INPUT_PROMPT:
      rc = prompt_encode_text(tok, r->prompt, strlen(r->prompt), r->parse_special_tokens, ids, n, err);
      break;
    case GANTRY__V1__GENERATE_REQUEST__INPUT_TOKENS:
      if (r->tokens->n_ids) {
        *ids = malloc(sizeof(int32_t) * r->tokens->n_ids);
        if (!*ids) return gt_err_set(err, GT_ENOMEM, "out of memory");
        memcpy(*ids, r->tokens->ids, sizeof(int32_t) * r->tokens->n_ids);
        *n = r->tokens->n_ids;
      }
      break;
    case GANTRY__V1__GENERATE_REQUEST__INPUT_CHAT:
      rc = srv_conv_chat(r->chat, r->chat->add_generation_prompt_opt_case ? r->chat->add_generation_prompt : 1,
                         r->parse_special_tokens, tok, fam, fam_reason, ids, n, opens_reasoning, err);
      break;
    default:
      return gt_err_set(err, GT_EINVAL, "input: one of chat, prompt or tokens is required");
  }
  if (!rc && *n == 0) {
    free(*ids);
    *ids = NULL;
    rc = gt_err_set(err, GT_EINVAL, "the prompt is empty");
  }
  return rc;
}

/* ---- request ---- */

void srv_conv_bufs_free(srv_conv_bufs_t *b) {
  free(b->stop);
  free(b->bias_ids);
  free(b->bias_vals);
  free(b->bad_ids);
  free(b->bad_lens);
  *b = (srv_conv_bufs_t){0};
}

int srv_conv_bad_words(const Gantry__V1__GenerateRequest *r, const tok_t *tok, sched_req_t *q, srv_conv_bufs_t *bufs,
                       gt_err_t *err) {
  q->n_bad = 0;
  if (r->n_bad_words == 0) return GT_OK;
  size_t cap = 0, used = 0;
  int n = 0;
  if (!(bufs->bad_lens = malloc(sizeof(int32_t) * r->n_bad_words * 2))) return gt_err_set(err, GT_ENOMEM, "out of memory");
  for (size_t i = 0; i < r->n_bad_words; i++)
    for (int sp = 0; sp < 2; sp++) {
      const char *w = r->bad_words[i];
      const size_t wl = strlen(w);
      char *text = malloc(wl + 2);
      if (!text) return gt_err_set(err, GT_ENOMEM, "out of memory");
      snprintf(text, wl + 2, "%s%s", sp ? " " : "", w);
      int32_t *ids = NULL;
      size_t k = 0;
      int rc = prompt_encode_text(tok, text, strlen(text), 0, &ids, &k, err);
      free(text);
      if (rc) return rc;
      int dup = 0; /* " x" may tokenize as "x" does (a word that starts with a space) */
      for (int j = 0, o = 0; j < n && !dup; o += bufs->bad_lens[j++])
        dup = (size_t)bufs->bad_lens[j] == k && !memcmp(bufs->bad_ids + o, ids, sizeof(int32_t) * k);
      if (k > 0 && !dup) {
        if (used + k > cap) {
          cap = (used + k) * 2;
          int32_t *g = realloc(bufs->bad_ids, sizeof(int32_t) * cap);
          if (!g) {
            free(ids);
            return gt_err_set(err, GT_ENOMEM, "out of memory");
          }
          bufs->bad_ids = g;
        }
        memcpy(bufs->bad_ids + used, ids, sizeof(int32_t) * k);
        used += k;
        bufs->bad_lens[n++] = (int32_t)k;
      }
      free(ids);
    }
  q->bad_ids = bufs->bad_ids;
  q->bad_lens = bufs->bad_lens;
  q->n_bad = n;
  return GT_OK;
}

int srv_conv_request(const Gantry__V1__GenerateRequest *r, int n_ctx, int opens_reasoning, uint64_t seed,
                     sched_req_t *q, srv_conv_bufs_t *bufs, gt_err_t *err) {
  memset(q, 0, sizeof *q);
  *bufs = (srv_conv_bufs_t){0};
  sampler_params_t sp = sampler_defaults();
  sp.temperature = 1.0f; /* the OpenAI / vLLM default when unset */
  sp.seed = seed;
  const Gantry__V1__SamplingParams *s = r->sampling;
  if (s) {
    if (s->temperature_opt_case) sp.temperature = s->temperature;
    if (s->top_p_opt_case) sp.top_p = s->top_p;
    if (s->top_k_opt_case) sp.top_k = s->top_k;
    if (s->min_p_opt_case) sp.min_p = s->min_p;
    if (s->repetition_penalty_opt_case) sp.repetition_penalty = s->repetition_penalty;
    if (s->presence_penalty_opt_case) sp.presence_penalty = s->presence_penalty;
    if (s->frequency_penalty_opt_case) sp.frequency_penalty = s->frequency_penalty;
    if (s->seed_opt_case) sp.seed = s->seed;
  }
  q->sampling = sp;
  q->max_tokens = r->max_tokens_opt_case ? (r->max_tokens > (uint32_t)INT_MAX ? INT_MAX : (int)r->max_tokens) : n_ctx;
  q->min_tokens = (int)(r->min_tokens > (uint32_t)INT_MAX ? INT_MAX : r->min_tokens);
  q->ignore_eos = r->ignore_eos;
  q->no_spec = r->no_speculation;
  q->n = r->n > 1000 ? 1000 : (int)r->n; /* sched_submit bounds it (SCHED_MAX_N) */
  q->priority = r->priority == INT32_MIN ? INT32_MAX : -r->priority; /* proto: larger first; sched: lower first */
  q->logprobs = r->top_logprobs_opt_case ? (int)r->top_logprobs : -1;
  q->stop_ids = r->stop_token_ids;
  q->n_stop_ids = (int)r->n_stop_token_ids;
  if (r->n_stop) {
    const char **st = malloc(sizeof *st * r->n_stop);
    if (!st) return gt_err_set(err, GT_ENOMEM, "out of memory");
    for (size_t i = 0; i < r->n_stop; i++) st[i] = r->stop[i];
    bufs->stop = st;
    q->out.stop = st;
    q->out.n_stop = (int)r->n_stop;
  }
  if (r->n_logit_bias) {
    bufs->bias_ids = malloc(sizeof(int32_t) * r->n_logit_bias);
    bufs->bias_vals = malloc(sizeof(float) * r->n_logit_bias);
    if (!bufs->bias_ids || !bufs->bias_vals) {
      srv_conv_bufs_free(bufs);
      return gt_err_set(err, GT_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < r->n_logit_bias; i++) {
      bufs->bias_ids[i] = r->logit_bias[i]->id;
      bufs->bias_vals[i] = r->logit_bias[i]->bias;
    }
    q->bias_ids = bufs->bias_ids;
    q->bias_vals = bufs->bias_vals;
    q->n_bias = (int)r->n_logit_bias;
  }
  q->out.keep_special = r->skip_special_tokens_opt_case && !r->skip_special_tokens;
  q->out.include_stop = r->include_stop_str_in_output;
  int chat = r->input_case == GANTRY__V1__GENERATE_REQUEST__INPUT_CHAT;
  q->out.parse_output = chat;
  q->out.starts_in_reasoning = chat && opens_reasoning;
  q->out.parse_tool_calls = chat && r->chat->tools_json[0];
  q->out.tools_json = chat && r->chat->tools_json[0] ? r->chat->tools_json : NULL;
  q->out.id_seed = seed;
  /* a chat with thinking on whose prompt did not open <think> (Qwen3): the model may open it */
  q->cons_may_think = chat && !opens_reasoning && (!r->chat->enable_thinking_opt_case || r->chat->enable_thinking);
  q->cache_salt = srv_conv_salt(r->cache_salt);
  q->allowed_ids = r->allowed_token_ids;
  q->n_allowed = (int)r->n_allowed_token_ids;
  return GT_OK;
}

uint64_t srv_conv_salt(const char *salt) {
  if (!salt || !salt[0]) return 0;
  uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a 64 */
  for (const unsigned char *p = (const unsigned char *)salt; *p; p++) h = (h ^ *p) * 0x100000001b3ull;
  return h ? h : 1; /* 0 is the unsalted chain */
}

void srv_conv_truncate(const Gantry__V1__GenerateRequest *r, int32_t *ids, size_t *n) {
  const size_t keep = r->truncate_prompt_tokens;
  if (!keep || *n <= keep) return;
  memmove(ids, ids + (*n - keep), keep * sizeof *ids);
  *n = keep;
}

/* ---- responses ---- */

static char *dup_n(const char *s, size_t n) {
  if (!s || !n) return (char *)protobuf_c_empty_string;
  char *p = malloc(n + 1);
  if (!p) return NULL;
  memcpy(p, s, n);
  p[n] = 0;
  return p;
}

static int set_bytes(ProtobufCBinaryData *b, const tok_t *tok, int32_t id) {
  size_t len = 0;
  const char *p = tok_piece(tok, id, &len);
  b->len = 0;
  b->data = NULL;
  if (!p || !len) return 0;
  b->data = malloc(len);
  if (!b->data) return -1;
  memcpy(b->data, p, len);
  b->len = len;
  return 0;
}

gt_genresp_t *srv_conv_delta(const seqout_delta_t *d, const tok_t *tok) {
  gt_genresp_t *r = gt_delta_new();
  if (!r) return NULL;
  Gantry__V1__Delta *x = r->delta;
  int bad = 0;
  if (d->n_ids) {
    x->token_ids = malloc(sizeof(int32_t) * (size_t)d->n_ids);
    if (x->token_ids) {
      memcpy(x->token_ids, d->ids, sizeof(int32_t) * (size_t)d->n_ids);
      x->n_token_ids = (size_t)d->n_ids;
    } else {
      bad = 1;
    }
  }
  x->text = dup_n(d->text, d->text_len);
  x->reasoning_text = dup_n(d->reasoning, d->reasoning_len);
  if (!x->text || !x->reasoning_text) {
    if (!x->text) x->text = (char *)protobuf_c_empty_string;
    if (!x->reasoning_text) x->reasoning_text = (char *)protobuf_c_empty_string;
    bad = 1;
  }
  for (int i = 0; !bad && i < d->n_tools; i++) {
    const seqout_tool_delta_t *t = &d->tools[i];
    char *args = dup_n(t->args, t->args_len);
    if (!args || gt_delta_add_tool_call(r, (uint32_t)t->index, t->id, t->name, args == protobuf_c_empty_string ? "" : args))
      bad = 1;
    if (args && args != protobuf_c_empty_string) free(args);
  }
  if (!bad && d->n_lps) {
    x->logprobs = calloc((size_t)d->n_lps, sizeof *x->logprobs);
    if (!x->logprobs) bad = 1;
    for (int i = 0; !bad && i < d->n_lps; i++) {
      const seqout_logprob_t *lp = &d->lps[i];
      Gantry__V1__TokenLogprob *tl = malloc(sizeof *tl);
      if (!tl) {
        bad = 1;
        break;
      }
      gantry__v1__token_logprob__init(tl);
      x->logprobs[x->n_logprobs++] = tl;
      tl->id = lp->id;
      tl->logprob = lp->logprob;
      if (set_bytes(&tl->token, tok, lp->id)) bad = 1;
      if (lp->n_top > 0) {
        tl->top = calloc((size_t)lp->n_top, sizeof *tl->top);
        if (!tl->top) bad = 1;
        for (int k = 0; !bad && k < lp->n_top; k++) {
          Gantry__V1__TopLogprob *tp = malloc(sizeof *tp);
          if (!tp) {
            bad = 1;
            break;
          }
          gantry__v1__top_logprob__init(tp);
          tl->top[tl->n_top++] = tp;
          tp->id = lp->top_ids[k];
          tp->logprob = lp->top_lps[k];
          if (set_bytes(&tp->token, tok, tp->id)) bad = 1;
        }
      }
    }
  }
  if (bad) {
    gt_genresp_free(r);
    return NULL;
  }
  return r;
}

const char *srv_finish_name(sched_finish_t why) {
  switch (why) {
    case SCHED_FINISH_STOP: return "stop";
    case SCHED_FINISH_LENGTH: return "length";
    case SCHED_FINISH_TOOL_CALLS: return "tool_calls";
    case SCHED_FINISH_CANCELLED: return "cancelled";
    case SCHED_FINISH_ERROR: return "error";
  }
  return "unknown";
}

gt_genresp_t *srv_conv_final(sched_finish_t why, const char *error, const sched_usage_t *u) {
  Gantry__V1__FinishReason fr = GANTRY__V1__FINISH_REASON__FINISH_REASON_UNSPECIFIED;
  switch (why) {
    case SCHED_FINISH_STOP: fr = GANTRY__V1__FINISH_REASON__FINISH_REASON_STOP; break;
    case SCHED_FINISH_LENGTH: fr = GANTRY__V1__FINISH_REASON__FINISH_REASON_LENGTH; break;
    case SCHED_FINISH_TOOL_CALLS: fr = GANTRY__V1__FINISH_REASON__FINISH_REASON_TOOL_CALLS; break;
    case SCHED_FINISH_CANCELLED: fr = GANTRY__V1__FINISH_REASON__FINISH_REASON_CANCELLED; break;
    case SCHED_FINISH_ERROR: fr = GANTRY__V1__FINISH_REASON__FINISH_REASON_ERROR; break;
  }
  gt_genresp_t *r = gt_final_new(fr, why == SCHED_FINISH_ERROR ? (error ? error : "internal error") : NULL);
  if (!r || !u) return r;
  Gantry__V1__Final *f = r->final;
  if (f->usage) {
    f->usage->prompt_tokens = (uint32_t)u->prompt_tokens;
    f->usage->completion_tokens = (uint32_t)u->completion_tokens;
    f->usage->reasoning_tokens = (uint32_t)u->reasoning_tokens;
    f->usage->cached_prompt_tokens = (uint32_t)u->cached_tokens;
  }
  if (f->timings) {
    f->timings->queued_ms = u->queued_ms;
    f->timings->prefill_ms = u->prefill_ms;
    f->timings->ttft_ms = u->ttft_ms;
    f->timings->decode_ms = u->decode_ms;
  }
  return r;
}

static size_t add_len(size_t n, const char *s) { return s ? n + strlen(s) : n; }

/* What the client sent, in OpenAI's words: "messages" (chat) or "prompt". */
static const char *input_name(const Gantry__V1__GenerateRequest *r) {
  return r->input_case == GANTRY__V1__GENERATE_REQUEST__INPUT_CHAT ? "messages" : "prompt";
}

int srv_conv_check_bytes(const Gantry__V1__GenerateRequest *r, int n_ctx, size_t max_tok_bytes, gt_err_t *err) {
  size_t bytes = 0;
  if (r->input_case == GANTRY__V1__GENERATE_REQUEST__INPUT_PROMPT) {
    bytes = add_len(0, r->prompt);
  } else if (r->input_case == GANTRY__V1__GENERATE_REQUEST__INPUT_CHAT) {
    for (size_t i = 0; i < r->chat->n_messages; i++) bytes = add_len(bytes, r->chat->messages[i]->content);
  }
  const size_t fit = (size_t)(n_ctx > 0 ? n_ctx : 0) * (max_tok_bytes ? max_tok_bytes : 1);
  if (bytes > fit)
    return gt_err_set(err, GT_ERANGE,
                      "This model's maximum context length is %d tokens. However, your %s resulted in at least %zu "
                      "tokens (%zu bytes; a token covers at most %zu bytes). Please reduce the length of the %s.",
                      n_ctx, input_name(r), (bytes + max_tok_bytes - 1) / max_tok_bytes, bytes, max_tok_bytes,
                      input_name(r));
  return GT_OK;
}

int srv_conv_check_context(const Gantry__V1__GenerateRequest *r, size_t n_prompt, int n_ctx, gt_err_t *err) {
  if (n_prompt < (size_t)(n_ctx > 0 ? n_ctx : 0)) return GT_OK;
  return gt_err_set(err, GT_ERANGE,
                    "This model's maximum context length is %d tokens. However, your %s resulted in %zu tokens, "
                    "which leaves no room to generate. Please reduce the length of the %s.",
                    n_ctx, input_name(r), n_prompt, input_name(r));
}

size_t srv_conv_max_token_bytes(const tok_t *tok) {
  size_t mx = 1;
  for (size_t i = 0; i < tok_n_vocab(tok); i++) {
    size_t len = 0;
    if (tok_piece(tok, (int32_t)i, &len) && len > mx) mx = len;
  }
  return mx;
}
