/* router/openai_req.c — OpenAI request JSON -> gantry.v1.GenerateRequest, with validation. */
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "router/openai.h"

#define MAX_STOP 16
#define MAX_LOGPROBS 20
#define MAX_LOGIT_BIAS 1024
#define MAX_STOP_IDS 64
#define MAX_ALLOWED_IDS 16384
#define MAX_BAD_WORDS 256 /* bad_words entries (each up to 256 bytes; two token sequences each) */

int oa_err(oa_error_t *e, int status, const char *type, const char *param, const char *code,
           const char *fmt, ...) {
  if (!e) return -1;
  e->status = status;
  snprintf(e->type, sizeof e->type, "%s", type ? type : "invalid_request_error");
  snprintf(e->param, sizeof e->param, "%s", param ? param : "");
  snprintf(e->code, sizeof e->code, "%s", code ? code : "");
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(e->message, sizeof e->message, fmt, ap);
  va_end(ap);
  return -1;
}

const char *oa_param_of_field(const char *field, char *buf, size_t n) {
  if (!field || !field[0]) return NULL;
  static const char *const prefix[] = {"sampling.", "chat."};
  for (size_t i = 0; i < sizeof prefix / sizeof *prefix; i++)
    if (!strncmp(field, prefix[i], strlen(prefix[i]))) field += strlen(prefix[i]);
  if (!strcmp(field, "tokens")) field = "prompt";
  snprintf(buf, n, "%.*s", (int)strcspn(field, "[."), field); /* "stop[2]" -> "stop" */
  return buf;
}

char *oa_error_json(const oa_error_t *e) {
  json_t *o = json_object();
  json_t *in = json_object();
  if (!o || !in) {
    json_decref(o);
    json_decref(in);
    return NULL;
  }
  json_object_set_new(in, "message", json_string(e->message));
  json_object_set_new(in, "type", json_string(e->type));
  json_object_set_new(in, "param", e->param[0] ? json_string(e->param) : json_null());
  json_object_set_new(in, "code", e->code[0] ? json_string(e->code) : json_null());
  json_object_set_new(o, "error", in);
  char *s = json_dumps(o, JSON_COMPACT);
  json_decref(o);
  return s;
}

static char *xstrdup(const char *s) { return strdup(s ? s : ""); }

/* ---- small typed getters: absent/null -> default; wrong type -> error -------------------- */

static int get_bool(json_t *o, const char *k, bool *out, oa_error_t *e) {
  json_t *v = json_object_get(o, k);
  if (!v || json_is_null(v)) return 0;
  if (!json_is_boolean(v)) return oa_err(e, 400, NULL, k, "invalid_type", "'%s' must be a boolean", k);
  *out = json_is_true(v);
  return 1;
}

static int get_num(json_t *o, const char *k, double lo, double hi, double *out, oa_error_t *e) {
  json_t *v = json_object_get(o, k);
  if (!v || json_is_null(v)) return 0;
  if (!json_is_number(v)) return oa_err(e, 400, NULL, k, "invalid_type", "'%s' must be a number", k);
  double d = json_number_value(v);
  if (!isfinite(d) || d < lo || d > hi)
    return oa_err(e, 400, NULL, k, "invalid_value", "'%s' must be between %g and %g, got %g", k, lo, hi, d);
  *out = d;
  return 1;
}

static int get_int(json_t *o, const char *k, long long lo, long long hi, long long *out,
                   oa_error_t *e) {
  json_t *v = json_object_get(o, k);
  if (!v || json_is_null(v)) return 0;
  if (!json_is_integer(v)) return oa_err(e, 400, NULL, k, "invalid_type", "'%s' must be an integer", k);
  long long x = json_integer_value(v);
  if (x < lo || x > hi)
    return oa_err(e, 400, NULL, k, "invalid_value", "'%s' must be between %lld and %lld, got %lld", k, lo,
                  hi, x);
  *out = x;
  return 1;
}

/* ---- chat messages ------------------------------------------------------------------------ */

/* content: string | null | [{"type":"text","text":...}, ...] -> malloc'd text. */
static int content_text(json_t *c, int idx, char **out, oa_error_t *e) {
  char param[48];
  snprintf(param, sizeof param, "messages[%d].content", idx);
  if (!c || json_is_null(c)) {
    *out = xstrdup("");
    return *out ? 0 : oa_err(e, 500, "server_error", NULL, NULL, "out of memory");
  }
  if (json_is_string(c)) {
    *out = strndup(json_string_value(c), json_string_length(c));
    return *out ? 0 : oa_err(e, 500, "server_error", NULL, NULL, "out of memory");
  }
  if (!json_is_array(c))
    return oa_err(e, 400, NULL, param, "invalid_type", "'%s' must be a string or an array of parts", param);
  oa_sb_t sb = {0};
  size_t i;
  json_t *part;
  json_array_foreach(c, i, part) {
    json_t *ty = json_object_get(part, "type"), *tx = json_object_get(part, "text");
    if (!json_is_object(part) || !json_is_string(ty)) {
      oa_sb_free(&sb);
      return oa_err(e, 400, NULL, param, "invalid_type", "'%s[%zu]' must be an object with a 'type'", param, i);
    }
    if (strcmp(json_string_value(ty), "text") != 0) {
      oa_sb_free(&sb);
      return oa_err(e, 400, NULL, param, "unsupported_content",
                    "'%s[%zu]': content type '%s' is not supported (text only)", param, i,
                    json_string_value(ty));
    }
    if (!json_is_string(tx)) {
      oa_sb_free(&sb);
      return oa_err(e, 400, NULL, param, "invalid_type", "'%s[%zu].text' must be a string", param, i);
    }
    /* parts are joined with "\n" (as vLLM does; Qwen Code sends every user turn in parts) */
    if ((i > 0 && oa_sb_append(&sb, "\n", 1)) || oa_sb_append(&sb, json_string_value(tx), json_string_length(tx))) {
      oa_sb_free(&sb);
      return oa_err(e, 500, "server_error", NULL, NULL, "out of memory");
    }
  }
  if (oa_sb_append(&sb, "", 0)) return oa_err(e, 500, "server_error", NULL, NULL, "out of memory");
  *out = sb.p ? sb.p : xstrdup("");
  return 0;
}

static int parse_tool_calls(json_t *tc, int idx, Gantry__V1__ChatMessage *m, oa_error_t *e) {
  char param[48];
  snprintf(param, sizeof param, "messages[%d].tool_calls", idx);
  if (!json_is_array(tc)) return oa_err(e, 400, NULL, param, "invalid_type", "'%s' must be an array", param);
  size_t n = json_array_size(tc);
  if (n == 0) return 0;
  m->tool_calls = calloc(n, sizeof *m->tool_calls);
  if (!m->tool_calls) return oa_err(e, 500, "server_error", NULL, NULL, "out of memory");
  for (size_t i = 0; i < n; i++) {
    json_t *c = json_array_get(tc, i), *fn = json_object_get(c, "function");
    json_t *name = json_object_get(fn, "name"), *args = json_object_get(fn, "arguments");
    json_t *id = json_object_get(c, "id");
    if (!json_is_object(c) || !json_is_object(fn) || !json_is_string(name))
      return oa_err(e, 400, NULL, param, "invalid_type", "'%s[%zu]' needs function.name", param, i);
    if (args && !json_is_string(args) && !json_is_null(args))
      return oa_err(e, 400, NULL, param, "invalid_type", "'%s[%zu].function.arguments' must be a string", param, i);
    Gantry__V1__ToolCall *t = malloc(sizeof *t);
    if (!t) return oa_err(e, 500, "server_error", NULL, NULL, "out of memory");
    gantry__v1__tool_call__init(t);
    m->tool_calls[m->n_tool_calls++] = t;
    t->id = xstrdup(json_is_string(id) ? json_string_value(id) : "");
    t->name = xstrdup(json_string_value(name));
    t->arguments = xstrdup(json_is_string(args) ? json_string_value(args) : "{}");
    if (!t->id || !t->name || !t->arguments) return oa_err(e, 500, "server_error", NULL, NULL, "out of memory");
  }
  return 0;
}

static int parse_messages(json_t *body, Gantry__V1__ChatInput *chat, oa_error_t *e) {
  json_t *msgs = json_object_get(body, "messages");
  if (!msgs || json_is_null(msgs))
    return oa_err(e, 400, NULL, "messages", "missing_required_parameter", "'messages' is required");
  if (!json_is_array(msgs)) return oa_err(e, 400, NULL, "messages", "invalid_type", "'messages' must be an array");
  size_t n = json_array_size(msgs);
  if (n == 0) return oa_err(e, 400, NULL, "messages", "empty_array", "'messages' must not be empty");
  chat->messages = calloc(n, sizeof *chat->messages);
  if (!chat->messages) return oa_err(e, 500, "server_error", NULL, NULL, "out of memory");
  for (size_t i = 0; i < n; i++) {
    json_t *mj = json_array_get(msgs, i);
    char param[48];
    snprintf(param, sizeof param, "messages[%zu]", i);
    if (!json_is_object(mj)) return oa_err(e, 400, NULL, param, "invalid_type", "'%s' must be an object", param);
    json_t *role = json_object_get(mj, "role");
    if (!json_is_string(role))
      return oa_err(e, 400, NULL, param, "invalid_type", "'%s.role' must be a string", param);
    const char *r = json_string_value(role);
    if (!strcmp(r, "developer")) r = "system";
    if (!strcmp(r, "function")) r = "tool"; /* the legacy functions API's result message */
    if (strcmp(r, "system") && strcmp(r, "user") && strcmp(r, "assistant") && strcmp(r, "tool"))
      return oa_err(e, 400, NULL, param, "invalid_value",
                    "'%s.role' must be one of system, developer, user, assistant, tool (got '%s')",
                    param, r);
    Gantry__V1__ChatMessage *m = malloc(sizeof *m);
    if (!m) return oa_err(e, 500, "server_error", NULL, NULL, "out of memory");
    gantry__v1__chat_message__init(m);
    chat->messages[chat->n_messages++] = m;
    m->role = xstrdup(r);
    if (!m->role) return oa_err(e, 500, "server_error", NULL, NULL, "out of memory");
    json_t *content = json_object_get(mj, "content");
    if (!content && strcmp(r, "assistant"))
      return oa_err(e, 400, NULL, param, "missing_required_parameter", "'%s.content' is required", param);
    char *text = NULL;
    if (content_text(content, (int)i, &text, e)) return -1;
    m->content = text;
    json_t *rc = json_object_get(mj, "reasoning_content");
    if (!rc || json_is_null(rc)) rc = json_object_get(mj, "reasoning");
    if (rc && !json_is_null(rc)) {
      if (!json_is_string(rc))
        return oa_err(e, 400, NULL, param, "invalid_type", "'%s.reasoning_content' must be a string", param);
      m->reasoning_content = xstrdup(json_string_value(rc));
    }
    json_t *tc = json_object_get(mj, "tool_calls");
    if (tc && !json_is_null(tc) && parse_tool_calls(tc, (int)i, m, e)) return -1;
    json_t *tcid = json_object_get(mj, "tool_call_id");
    if (tcid && json_is_string(tcid)) m->tool_call_id = xstrdup(json_string_value(tcid));
    json_t *name = json_object_get(mj, "name");
    if (name && json_is_string(name)) m->name = xstrdup(json_string_value(name));
  }
  return 0;
}

static int set_constraint(Gantry__V1__GenerateRequest *g, Gantry__V1__Constraint__Kind kind, const char *spec,
                          const char *param, oa_error_t *e);

/* tools + tool_choice -> chat->tools_json (the tools offered) and, for tool_choice "required" or
 * a named function, a KIND_TOOL_CALL constraint over the offered tools (g->constraint). */
static int parse_tools(json_t *body, Gantry__V1__GenerateRequest *g, Gantry__V1__ChatInput *chat, bool *has_tools,
                       oa_error_t *e) {
  json_t *tools = json_object_get(body, "tools");
  json_t *choice = json_object_get(body, "tool_choice");
  const bool forced = (json_is_string(choice) && !strcmp(json_string_value(choice), "required")) || json_is_object(choice);
  if ((!tools || json_is_null(tools) || (json_is_array(tools) && json_array_size(tools) == 0)) && forced)
    return oa_err(e, 400, NULL, "tool_choice", "invalid_value", "'tool_choice' %s needs a non-empty 'tools'",
                  json_is_object(choice) ? "naming a function" : "'required'");
  if (!tools || json_is_null(tools)) return 0;
  if (!json_is_array(tools)) return oa_err(e, 400, NULL, "tools", "invalid_type", "'tools' must be an array");
  size_t i;
  json_t *t;
  json_array_foreach(tools, i, t) {
    json_t *fn = json_object_get(t, "function");
    if (!json_is_object(t) || !json_is_object(fn) || !json_is_string(json_object_get(fn, "name")))
      return oa_err(e, 400, NULL, "tools", "invalid_type", "'tools[%zu]' must be {\"type\":\"function\",\"function\":{\"name\":...}}", i);
  }
  json_t *use = tools;
  json_t *filtered = NULL;
  if (choice && json_is_string(choice)) {
    const char *c = json_string_value(choice);
    if (!strcmp(c, "none")) return 0;
    if (strcmp(c, "auto") && strcmp(c, "required"))
      return oa_err(e, 400, NULL, "tool_choice", "invalid_value", "'tool_choice' must be none, auto, required or an object");
  } else if (choice && json_is_object(choice)) {
    /* a named function: offer only that one */
    const char *want = json_string_value(json_object_get(json_object_get(choice, "function"), "name"));
    if (!want) return oa_err(e, 400, NULL, "tool_choice", "invalid_value", "'tool_choice.function.name' is required");
    filtered = json_array();
    json_array_foreach(tools, i, t) {
      if (!strcmp(json_string_value(json_object_get(json_object_get(t, "function"), "name")), want))
        json_array_append(filtered, t);
    }
    if (json_array_size(filtered) == 0) {
      json_decref(filtered);
      return oa_err(e, 400, NULL, "tool_choice", "invalid_value", "'tool_choice' names '%s', which is not in 'tools'", want);
    }
    use = filtered;
  } else if (choice && !json_is_null(choice)) {
    return oa_err(e, 400, NULL, "tool_choice", "invalid_type", "'tool_choice' must be a string or an object");
  }
  if (json_array_size(use) == 0) {
    json_decref(filtered);
    return 0;
  }
  char *s = json_dumps(use, JSON_COMPACT);
  json_decref(filtered);
  if (!s) return oa_err(e, 500, "server_error", NULL, NULL, "out of memory");
  chat->tools_json = s;
  *has_tools = true;
  if (forced && set_constraint(g, GANTRY__V1__CONSTRAINT__KIND__KIND_TOOL_CALL, s, "tool_choice", e)) return -1;
  return 0;
}

int oa_token_ids(json_t *a, const char *param, const char *name, int32_t **ids, size_t *n, oa_error_t *e) {
  const size_t m = json_array_size(a);
  *ids = NULL;
  *n = 0;
  if (m && !(*ids = malloc(m * sizeof **ids))) return oa_err(e, 500, "server_error", NULL, NULL, "out of memory");
  for (size_t i = 0; i < m; i++) {
    json_t *v = json_array_get(a, i);
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX) {
      free(*ids);
      *ids = NULL;
      return oa_err(e, 400, NULL, param, "invalid_value", "'%s[%zu]' must be a token id (an integer >= 0)", name, i);
    }
    (*ids)[i] = (int32_t)json_integer_value(v);
  }
  *n = m;
  return 0;
}

/* A token-id array prompt (name: "prompt" or "prompt[i]") as TokenIds; NULL with e filled. */
static Gantry__V1__TokenIds *token_prompt(json_t *p, const char *name, oa_error_t *e) {
  if (json_array_size(p) == 0) {
    oa_err(e, 400, NULL, "prompt", "empty_prompt", "'%s' must not be empty", name);
    return NULL;
  }
  Gantry__V1__TokenIds *t = malloc(sizeof *t);
  if (!t) {
    oa_err(e, 500, "server_error", NULL, NULL, "out of memory");
    return NULL;
  }
  gantry__v1__token_ids__init(t);
  if (oa_token_ids(p, "prompt", name, &t->ids, &t->n_ids, e)) {
    free(t);
    return NULL;
  }
  return t;
}

/* prompt: a string, token ids, or a list (at most OA_MAX_PROMPTS) of strings or of token-id
 * arrays: the first goes to g's input, the rest to more_prompts / more_tokens. Sets
 * *n_prompts. */
static int parse_prompt(json_t *body, Gantry__V1__GenerateRequest *g, int *n_prompts, oa_error_t *e) {
  json_t *p = json_object_get(body, "prompt");
  *n_prompts = 1;
  if (!p || json_is_null(p)) return oa_err(e, 400, NULL, "prompt", "missing_required_parameter", "'prompt' is required");
  json_t *first = json_is_array(p) ? json_array_get(p, 0) : NULL;
  if (first && (json_is_string(first) || json_is_array(first))) { /* a list of prompts */
    const size_t n = json_array_size(p);
    if (n > OA_MAX_PROMPTS)
      return oa_err(e, 400, NULL, "prompt", "invalid_value", "a list of prompts has at most %d prompts, got %zu", OA_MAX_PROMPTS, n);
    const bool text = json_is_string(first);
    size_t i;
    json_t *v;
    json_array_foreach(p, i, v) {
      if (text ? !json_is_string(v) : !json_is_array(v))
        return oa_err(e, 400, NULL, "prompt", "invalid_type", "'prompt' must be a list of strings or a list of token-id arrays, not both");
      if (text && json_string_length(v) == 0)
        return oa_err(e, 400, NULL, "prompt", "empty_prompt", "'prompt[%zu]' must not be empty", i);
    }
    if (n > 1 && text && !(g->more_prompts = calloc(n - 1, sizeof *g->more_prompts)))
      return oa_err(e, 500, "server_error", NULL, NULL, "out of memory");
    if (n > 1 && !text && !(g->more_tokens = calloc(n - 1, sizeof *g->more_tokens)))
      return oa_err(e, 500, "server_error", NULL, NULL, "out of memory");
    /* set first: a failure below then frees what was parsed with g */
    g->input_case = text ? GANTRY__V1__GENERATE_REQUEST__INPUT_PROMPT : GANTRY__V1__GENERATE_REQUEST__INPUT_TOKENS;
    json_array_foreach(p, i, v) {
      char name[32];
      snprintf(name, sizeof name, "prompt[%zu]", i);
      if (text) {
        char *t = strndup(json_string_value(v), json_string_length(v));
        if (!t) return oa_err(e, 500, "server_error", NULL, NULL, "out of memory");
        if (i == 0) g->prompt = t;
        else g->more_prompts[g->n_more_prompts++] = t;
      } else {
        Gantry__V1__TokenIds *t = token_prompt(v, name, e);
        if (!t) return -1;
        if (i == 0) g->tokens = t;
        else g->more_tokens[g->n_more_tokens++] = t;
      }
    }
    *n_prompts = (int)n;
    return 0;
  }
  if (json_is_string(p)) {
    if (json_string_length(p) == 0) return oa_err(e, 400, NULL, "prompt", "empty_prompt", "'prompt' must not be empty");
    g->input_case = GANTRY__V1__GENERATE_REQUEST__INPUT_PROMPT;
    g->prompt = strndup(json_string_value(p), json_string_length(p));
    return g->prompt ? 0 : oa_err(e, 500, "server_error", NULL, NULL, "out of memory");
  }
  if (json_is_array(p)) {
    Gantry__V1__TokenIds *t = token_prompt(p, "prompt", e);
    if (!t) return -1;
    g->input_case = GANTRY__V1__GENERATE_REQUEST__INPUT_TOKENS;
    g->tokens = t;
    return 0;
  }
  return oa_err(e, 400, NULL, "prompt", "invalid_type", "'prompt' must be a string or an array of token ids");
}

static int parse_stop(json_t *body, Gantry__V1__GenerateRequest *g, oa_error_t *e) {
  json_t *s = json_object_get(body, "stop");
  if (!s || json_is_null(s)) return 0;
  if (json_is_string(s)) {
    if (json_string_length(s) == 0) return 0;
    g->stop = calloc(1, sizeof *g->stop);
    if (!g->stop || !(g->stop[0] = xstrdup(json_string_value(s))))
      return oa_err(e, 500, "server_error", NULL, NULL, "out of memory");
    g->n_stop = 1;
    return 0;
  }
  if (!json_is_array(s)) return oa_err(e, 400, NULL, "stop", "invalid_type", "'stop' must be a string or an array of strings");
  size_t n = json_array_size(s);
  if (n > MAX_STOP) return oa_err(e, 400, NULL, "stop", "invalid_value", "'stop' has %zu entries (at most %d)", n, MAX_STOP);
  if (n == 0) return 0;
  g->stop = calloc(n, sizeof *g->stop);
  if (!g->stop) return oa_err(e, 500, "server_error", NULL, NULL, "out of memory");
  for (size_t i = 0; i < n; i++) {
    json_t *v = json_array_get(s, i);
    if (!json_is_string(v)) return oa_err(e, 400, NULL, "stop", "invalid_type", "'stop[%zu]' must be a string", i);
    if (json_string_length(v) == 0) continue;
    if (!(g->stop[g->n_stop] = xstrdup(json_string_value(v)))) return oa_err(e, 500, "server_error", NULL, NULL, "out of memory");
    g->n_stop++;
  }
  return 0;
}

/* logit_bias {"<token id>": bias in [-100, 100]}, stop_token_ids [ids], skip_special_tokens,
 * include_stop_str_in_output (vLLM) -> g. Token ids beyond the vocabulary: the engine says so. */
static int parse_token_params(json_t *b, Gantry__V1__GenerateRequest *g, oa_error_t *e) {
  json_t *lb = json_object_get(b, "logit_bias");
  if (lb && !json_is_null(lb)) {
    if (!json_is_object(lb)) return oa_err(e, 400, NULL, "logit_bias", "invalid_type", "'logit_bias' must be an object {\"<token id>\": bias}");
    size_t n = json_object_size(lb);
    if (n > MAX_LOGIT_BIAS)
      return oa_err(e, 400, NULL, "logit_bias", "invalid_value", "'logit_bias' has %zu entries (at most %d)", n, MAX_LOGIT_BIAS);
    if (n && !(g->logit_bias = calloc(n, sizeof *g->logit_bias))) return oa_err(e, 500, "server_error", NULL, NULL, "out of memory");
    const char *k;
    json_t *v;
    json_object_foreach(lb, k, v) {
      char *end = NULL;
      errno = 0;
      long long id = strtoll(k, &end, 10);
      if (!k[0] || *end || errno || id < 0 || id > INT32_MAX)
        return oa_err(e, 400, NULL, "logit_bias", "invalid_value", "'logit_bias' key '%.40s' is not a token id", k);
      double d = json_is_number(v) ? json_number_value(v) : NAN;
      if (!isfinite(d) || d < -100 || d > 100)
        return oa_err(e, 400, NULL, "logit_bias", "invalid_value", "'logit_bias' of token %lld must be a number in [-100, 100]", id);
      Gantry__V1__TokenBias *tb = malloc(sizeof *tb);
      if (!tb) return oa_err(e, 500, "server_error", NULL, NULL, "out of memory");
      gantry__v1__token_bias__init(tb);
      tb->id = (int32_t)id;
      tb->bias = (float)d;
      g->logit_bias[g->n_logit_bias++] = tb;
    }
  }
  json_t *st = json_object_get(b, "stop_token_ids");
  if (st && !json_is_null(st)) {
    size_t n = json_is_array(st) ? json_array_size(st) : 0;
    if (!json_is_array(st)) return oa_err(e, 400, NULL, "stop_token_ids", "invalid_type", "'stop_token_ids' must be an array of token ids");
    if (n > MAX_STOP_IDS)
      return oa_err(e, 400, NULL, "stop_token_ids", "invalid_value", "'stop_token_ids' has %zu entries (at most %d)", n, MAX_STOP_IDS);
    if (oa_token_ids(st, "stop_token_ids", "stop_token_ids", &g->stop_token_ids, &g->n_stop_token_ids, e)) return -1;
  }
  json_t *bw = json_object_get(b, "bad_words");
  if (bw && !json_is_null(bw)) {
    const size_t n = json_is_array(bw) ? json_array_size(bw) : 0;
    if (!json_is_array(bw)) return oa_err(e, 400, NULL, "bad_words", "invalid_type", "'bad_words' must be an array of strings");
    if (n > MAX_BAD_WORDS)
      return oa_err(e, 400, NULL, "bad_words", "invalid_value", "'bad_words' has %zu entries (at most %d)", n, MAX_BAD_WORDS);
    if (n && !(g->bad_words = calloc(n, sizeof *g->bad_words))) return oa_err(e, 500, "server_error", NULL, NULL, "out of memory");
    for (size_t i = 0; i < n; i++) {
      json_t *w = json_array_get(bw, i);
      if (!json_is_string(w) || !json_string_length(w) || json_string_length(w) > 256)
        return oa_err(e, 400, NULL, "bad_words", "invalid_value", "'bad_words[%zu]' must be a string of 1 to 256 bytes", i);
      if (!(g->bad_words[g->n_bad_words] = strdup(json_string_value(w))))
        return oa_err(e, 500, "server_error", NULL, NULL, "out of memory");
      g->n_bad_words++;
    }
  }
  json_t *al = json_object_get(b, "allowed_token_ids");
  if (al && !json_is_null(al)) {
    if (!json_is_array(al)) return oa_err(e, 400, NULL, "allowed_token_ids", "invalid_type", "'allowed_token_ids' must be an array of token ids");
    if (json_array_size(al) > MAX_ALLOWED_IDS)
      return oa_err(e, 400, NULL, "allowed_token_ids", "invalid_value", "'allowed_token_ids' has %zu entries (at most %d)",
                    json_array_size(al), MAX_ALLOWED_IDS);
    if (oa_token_ids(al, "allowed_token_ids", "allowed_token_ids", &g->allowed_token_ids, &g->n_allowed_token_ids, e)) return -1;
  }
  bool v = true;
  int r = get_bool(b, "skip_special_tokens", &v, e);
  if (r < 0) return -1;
  if (r) {
    g->skip_special_tokens_opt_case = GANTRY__V1__GENERATE_REQUEST__SKIP_SPECIAL_TOKENS_OPT_SKIP_SPECIAL_TOKENS;
    g->skip_special_tokens = v;
  }
  v = false;
  if (get_bool(b, "include_stop_str_in_output", &v, e) < 0) return -1;
  g->include_stop_str_in_output = v;
  return 0;
}

static int parse_sampling(json_t *b, Gantry__V1__SamplingParams *sp, oa_error_t *e) {
  double d;
  long long x;
  int r;
  if ((r = get_num(b, "temperature", 0, 2, &d, e)) < 0) return -1;
  if (r) { sp->temperature_opt_case = GANTRY__V1__SAMPLING_PARAMS__TEMPERATURE_OPT_TEMPERATURE; sp->temperature = (float)d; }
  if ((r = get_num(b, "top_p", 0, 1, &d, e)) < 0) return -1;
  if (r) {
    if (d <= 0) return oa_err(e, 400, NULL, "top_p", "invalid_value", "'top_p' must be > 0 and <= 1");
    sp->top_p_opt_case = GANTRY__V1__SAMPLING_PARAMS__TOP_P_OPT_TOP_P; sp->top_p = (float)d;
  }
  if ((r = get_int(b, "top_k", -1, 1 << 20, &x, e)) < 0) return -1;
  if (r) { sp->top_k_opt_case = GANTRY__V1__SAMPLING_PARAMS__TOP_K_OPT_TOP_K; sp->top_k = (int32_t)x; }
  if ((r = get_num(b, "min_p", 0, 1, &d, e)) < 0) return -1;
  if (r) { sp->min_p_opt_case = GANTRY__V1__SAMPLING_PARAMS__MIN_P_OPT_MIN_P; sp->min_p = (float)d; }
  if ((r = get_num(b, "repetition_penalty", 0, 10, &d, e)) < 0) return -1;
  if (r) {
    if (d <= 0) return oa_err(e, 400, NULL, "repetition_penalty", "invalid_value", "'repetition_penalty' must be > 0");
    sp->repetition_penalty_opt_case = GANTRY__V1__SAMPLING_PARAMS__REPETITION_PENALTY_OPT_REPETITION_PENALTY;
    sp->repetition_penalty = (float)d;
  }
  if ((r = get_num(b, "presence_penalty", -2, 2, &d, e)) < 0) return -1;
  if (r) { sp->presence_penalty_opt_case = GANTRY__V1__SAMPLING_PARAMS__PRESENCE_PENALTY_OPT_PRESENCE_PENALTY; sp->presence_penalty = (float)d; }
  if ((r = get_num(b, "frequency_penalty", -2, 2, &d, e)) < 0) return -1;
  if (r) { sp->frequency_penalty_opt_case = GANTRY__V1__SAMPLING_PARAMS__FREQUENCY_PENALTY_OPT_FREQUENCY_PENALTY; sp->frequency_penalty = (float)d; }
  if ((r = get_int(b, "seed", INT64_MIN, INT64_MAX, &x, e)) < 0) return -1;
  if (r) { sp->seed_opt_case = GANTRY__V1__SAMPLING_PARAMS__SEED_OPT_SEED; sp->seed = (uint64_t)x; }
  return 0;
}

/* ---- structured outputs: one constraint per request -> g->constraint -------------------- */

/* Sets g->constraint (kind, spec, param); a second constraint is a 400 naming param. */
static int set_constraint(Gantry__V1__GenerateRequest *g, Gantry__V1__Constraint__Kind kind, const char *spec,
                          const char *param, oa_error_t *e) {
  if (g->constraint)
    return oa_err(e, 400, NULL, param, "invalid_value",
                  "'%s' cannot be combined with '%s': a request takes one output constraint", param,
                  g->constraint->param);
  Gantry__V1__Constraint *c = malloc(sizeof *c);
  if (!c) return oa_err(e, 500, "server_error", NULL, NULL, "out of memory");
  gantry__v1__constraint__init(c);
  g->constraint = c; /* freed with g from here on */
  c->kind = kind;
  c->spec = xstrdup(spec);
  c->param = xstrdup(param);
  if (!c->spec || !c->param) return oa_err(e, 500, "server_error", NULL, NULL, "out of memory");
  return 0;
}

/* A JSON schema value (object, or a string holding one: guided_json) as compact text. */
static int schema_text(json_t *v, const char *param, bool allow_string, char **out, oa_error_t *e) {
  json_t *parsed = NULL;
  if (allow_string && json_is_string(v)) {
    json_error_t je;
    parsed = json_loadb(json_string_value(v), json_string_length(v), JSON_REJECT_DUPLICATES, &je);
    if (!parsed)
      return oa_err(e, 400, NULL, param, "invalid_value", "'%s' is not valid JSON: %s (column %d)", param, je.text,
                    je.column);
    v = parsed;
  }
  if (!json_is_object(v)) {
    json_decref(parsed);
    return oa_err(e, 400, NULL, param, "invalid_type", "'%s' must be a JSON schema object", param);
  }
  *out = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
  json_decref(parsed);
  return *out ? 0 : oa_err(e, 500, "server_error", NULL, NULL, "out of memory");
}

/* response_format (json_object | json_schema), guided_json, guided_choice, guided_regex. */
static int parse_constraint(json_t *b, Gantry__V1__GenerateRequest *g, oa_error_t *e) {
  json_t *rf = json_object_get(b, "response_format");
  if (rf && !json_is_null(rf)) {
    const char *t = json_is_object(rf) ? json_string_value(json_object_get(rf, "type")) : NULL;
    if (!t) return oa_err(e, 400, NULL, "response_format", "invalid_type", "'response_format' must be {\"type\": ...}");
    if (!strcmp(t, "json_object")) {
      if (set_constraint(g, GANTRY__V1__CONSTRAINT__KIND__KIND_JSON_OBJECT, "", "response_format", e)) return -1;
    } else if (!strcmp(t, "json_schema")) {
      json_t *js = json_object_get(rf, "json_schema");
      if (!json_is_object(js))
        return oa_err(e, 400, NULL, "response_format", "invalid_type",
                      "'response_format.json_schema' must be an object {name, schema, strict}");
      json_t *name = json_object_get(js, "name");
      if (!json_is_string(name) || json_string_length(name) == 0 || json_string_length(name) > 64)
        return oa_err(e, 400, NULL, "response_format", "invalid_value",
                      "'response_format.json_schema.name' must be a string of 1 to 64 characters");
      json_t *strict = json_object_get(js, "strict");
      if (strict && !json_is_null(strict) && !json_is_boolean(strict))
        return oa_err(e, 400, NULL, "response_format", "invalid_type", "'response_format.json_schema.strict' must be a boolean");
      json_t *schema = json_object_get(js, "schema");
      char *spec = NULL;
      if (!schema || json_is_null(schema)) {
        spec = xstrdup("{}"); /* no schema: any JSON value (as OpenAI) */
        if (!spec) return oa_err(e, 500, "server_error", NULL, NULL, "out of memory");
      } else if (schema_text(schema, "response_format", false, &spec, e)) {
        return -1;
      }
      int rc = set_constraint(g, GANTRY__V1__CONSTRAINT__KIND__KIND_JSON_SCHEMA, spec, "response_format", e);
      free(spec);
      if (rc) return -1;
    } else if (strcmp(t, "text")) {
      return oa_err(e, 400, NULL, "response_format", "invalid_value",
                    "'response_format.type' must be text, json_object or json_schema (got '%s')", t);
    }
  }
  json_t *gj = json_object_get(b, "guided_json");
  if (gj && !json_is_null(gj)) {
    char *spec = NULL;
    if (schema_text(gj, "guided_json", true, &spec, e)) return -1;
    int rc = set_constraint(g, GANTRY__V1__CONSTRAINT__KIND__KIND_JSON_SCHEMA, spec, "guided_json", e);
    free(spec);
    if (rc) return -1;
  }
  json_t *gc = json_object_get(b, "guided_choice");
  if (gc && !json_is_null(gc)) {
    size_t i, n = json_is_array(gc) ? json_array_size(gc) : 0;
    json_t *v;
    if (n == 0)
      return oa_err(e, 400, NULL, "guided_choice", "invalid_type", "'guided_choice' must be a non-empty array of strings");
    json_array_foreach(gc, i, v) {
      if (!json_is_string(v) || json_string_length(v) == 0)
        return oa_err(e, 400, NULL, "guided_choice", "invalid_type", "'guided_choice[%zu]' must be a non-empty string", i);
    }
    char *spec = json_dumps(gc, JSON_COMPACT);
    if (!spec) return oa_err(e, 500, "server_error", NULL, NULL, "out of memory");
    int rc = set_constraint(g, GANTRY__V1__CONSTRAINT__KIND__KIND_CHOICE, spec, "guided_choice", e);
    free(spec);
    if (rc) return -1;
  }
  json_t *gr = json_object_get(b, "guided_regex");
  if (gr && !json_is_null(gr)) {
    if (!json_is_string(gr) || json_string_length(gr) == 0)
      return oa_err(e, 400, NULL, "guided_regex", "invalid_type", "'guided_regex' must be a non-empty string");
    if (set_constraint(g, GANTRY__V1__CONSTRAINT__KIND__KIND_REGEX, json_string_value(gr), "guided_regex", e)) return -1;
  }
  return 0;
}

/* A value that is absent, null, or equal to the default (JSON) def: 1; else 0. */
static int is_default(json_t *v, const char *def) {
  if (!v || json_is_null(v)) return 1;
  json_t *d = json_loads(def, JSON_DECODE_ANY, NULL);
  int eq = json_equal(v, d) || (json_is_array(v) && !json_array_size(v) && json_is_array(d)) ||
           (json_is_object(v) && !json_object_size(v) && json_is_object(d));
  json_decref(d);
  return eq;
}

/* vLLM parameters gantry does not implement: accepted only at their default (a value that would
 * change the result is a 400 naming it; router/README.md lists them). */
static int refuse_non_default(json_t *b, oa_kind_t kind, oa_error_t *e) {
  static const struct { const char *key, *def, *why; int kinds; } k_params[] = {
      {"guided_whitespace_pattern", "null", "the grammar's whitespace is fixed", 3},
      {"structural_tag", "null", "use tools with tool_choice", 3},
      {"guided_grammar", "null", "use guided_regex or a JSON schema", 3},
      {"guided_decoding_backend", "null", "there is one grammar engine", 3},
      {"use_beam_search", "false", "beam search is not implemented", 3},
      {"length_penalty", "1", "it only applies to beam search", 3},
      {"return_token_ids", "false", "not implemented", 3},
      {"documents", "[]", "retrieval documents are not rendered by the chat templates served here", 1},
      {"echo", "false", "chat echo is not implemented (completions has echo)", 1},
      {"add_special_tokens", "false", "the chat template adds the special tokens", 1},
      {"add_special_tokens", "true", "prompts are tokenized with the model's special tokens", 2},
      {"mm_processor_kwargs", "null", "text models only", 3},
  };
  for (size_t i = 0; i < sizeof k_params / sizeof *k_params; i++) {
    if (!(k_params[i].kinds & (kind == OA_COMPLETION ? 2 : 1))) continue;
    json_t *v = json_object_get(b, k_params[i].key);
    if (!is_default(v, k_params[i].def))
      return oa_err(e, 400, NULL, k_params[i].key, "unsupported_value", "'%s' is not supported here (%s)", k_params[i].key,
                    k_params[i].why);
  }
  json_t *kw = json_object_get(b, "chat_template_kwargs");
  const char *k;
  json_t *v;
  if (json_is_object(kw)) json_object_foreach(kw, k, v) {
      if (strcmp(k, "enable_thinking"))
        return oa_err(e, 400, NULL, "chat_template_kwargs", "unsupported_value",
                      "'chat_template_kwargs.%.60s' is not supported (only enable_thinking)", k);
    }
  return 0;
}

/* vLLM's structured_outputs {json, regex, choice, json_object, grammar, structural_tag, ...} ->
 * the guided_* fields it replaced (then parsed as those, under the name structured_outputs). */
static int map_structured_outputs(json_t *b, oa_error_t *e) {
  json_t *so = json_object_get(b, "structured_outputs");
  if (!so || json_is_null(so)) return 0;
  if (!json_is_object(so)) return oa_err(e, 400, NULL, "structured_outputs", "invalid_type", "'structured_outputs' must be an object");
  static const char *const k_refused[] = {"grammar", "structural_tag", "whitespace_pattern"};
  for (size_t i = 0; i < 3; i++)
    if (!is_default(json_object_get(so, k_refused[i]), "null"))
      return oa_err(e, 400, NULL, "structured_outputs", "unsupported_value", "'structured_outputs.%s' is not supported",
                    k_refused[i]);
  static const char *const k_flags[] = {"disable_any_whitespace", "disable_additional_properties"};
  for (size_t i = 0; i < 2; i++)
    if (!is_default(json_object_get(so, k_flags[i]), "false"))
      return oa_err(e, 400, NULL, "structured_outputs", "unsupported_value", "'structured_outputs.%s' is not supported",
                    k_flags[i]);
  json_t *df = json_object_get(so, "disable_fallback"); /* one grammar engine: never a fallback */
  if (df && !json_is_null(df) && !json_is_boolean(df))
    return oa_err(e, 400, NULL, "structured_outputs", "invalid_type", "'structured_outputs.disable_fallback' must be a boolean");
  int n = 0;
  static const char *const k_map[][2] = {{"json", "guided_json"}, {"regex", "guided_regex"}, {"choice", "guided_choice"}};
  for (size_t i = 0; i < 3; i++) {
    json_t *v = json_object_get(so, k_map[i][0]);
    if (!v || json_is_null(v)) continue;
    if (json_object_get(b, k_map[i][1]))
      return oa_err(e, 400, NULL, "structured_outputs", "invalid_value", "'structured_outputs' cannot be combined with '%s'",
                    k_map[i][1]);
    json_object_set(b, k_map[i][1], v);
    n++;
  }
  json_t *jo = json_object_get(so, "json_object");
  if (jo && !json_is_null(jo)) {
    if (!json_is_boolean(jo)) return oa_err(e, 400, NULL, "structured_outputs", "invalid_type", "'structured_outputs.json_object' must be a boolean");
    if (json_is_true(jo)) {
      if (json_object_get(b, "response_format"))
        return oa_err(e, 400, NULL, "structured_outputs", "invalid_value", "'structured_outputs' cannot be combined with 'response_format'");
      json_object_set_new(b, "response_format", json_pack("{s:s}", "type", "json_object"));
      n++;
    }
  }
  if (n > 1) return oa_err(e, 400, NULL, "structured_outputs", "invalid_value", "'structured_outputs' takes one of json, regex, choice, json_object");
  return 0;
}

/* The legacy functions API: functions -> tools, function_call -> tool_choice, an assistant
 * message's function_call -> tool_calls (role "function" results become tool messages). */
static int map_functions(json_t *b, bool *legacy, oa_error_t *e) {
  json_t *fns = json_object_get(b, "functions"), *fc = json_object_get(b, "function_call");
  if (fns && !json_is_null(fns)) {
    if (json_object_get(b, "tools")) return oa_err(e, 400, NULL, "functions", "invalid_value", "'functions' cannot be combined with 'tools'");
    if (!json_is_array(fns)) return oa_err(e, 400, NULL, "functions", "invalid_type", "'functions' must be an array");
    json_t *tools = json_array();
    size_t i;
    json_t *f;
    json_array_foreach(fns, i, f) json_array_append_new(tools, json_pack("{s:s,s:O}", "type", "function", "function", f));
    json_object_set_new(b, "tools", tools);
    *legacy = true;
  }
  if (fc && !json_is_null(fc)) {
    if (json_object_get(b, "tool_choice")) return oa_err(e, 400, NULL, "function_call", "invalid_value", "'function_call' cannot be combined with 'tool_choice'");
    if (json_is_string(fc)) json_object_set(b, "tool_choice", fc);
    else if (json_is_string(json_object_get(fc, "name")))
      json_object_set_new(b, "tool_choice", json_pack("{s:s,s:{s:O}}", "type", "function", "function", "name", json_object_get(fc, "name")));
    else return oa_err(e, 400, NULL, "function_call", "invalid_type", "'function_call' must be none, auto or {\"name\": ...}");
  }
  json_t *msgs = json_object_get(b, "messages");
  size_t i;
  json_t *m;
  json_array_foreach(msgs, i, m) {
    json_t *call = json_object_get(m, "function_call");
    if (!json_is_object(call) || json_object_get(m, "tool_calls")) continue;
    char id[32];
    snprintf(id, sizeof id, "call_fn_%zu", i);
    json_object_set_new(m, "tool_calls", json_pack("[{s:s,s:s,s:O}]", "id", id, "type", "function", "function", call));
    /* the result that follows (role function, by name) answers this call */
    json_t *next = json_array_get(msgs, i + 1);
    const char *role = json_string_value(json_object_get(next, "role"));
    if (role && !strcmp(role, "function") && !json_object_get(next, "tool_call_id"))
      json_object_set_new(next, "tool_call_id", json_string(id));
  }
  return 0;
}

/* Fields we refuse rather than silently ignore (they would change the result). */
static int reject_unsupported(json_t *b, oa_kind_t kind, oa_error_t *e) {
  bool v = false;
  if (refuse_non_default(b, kind, e)) return -1;
  static const char *const k_refused[] = {"prompt_logprobs", "chat_template"};
  for (size_t i = 0; i < sizeof k_refused / sizeof k_refused[0]; i++) {
    json_t *f = json_object_get(b, k_refused[i]);
    if (f && !json_is_null(f) && !(json_is_integer(f) && json_integer_value(f) == 0 && !strcmp(k_refused[i], "prompt_logprobs")))
      return oa_err(e, 400, NULL, k_refused[i], "unsupported_value", "'%s' is not supported", k_refused[i]);
  }
  if (get_bool(b, "return_tokens_as_token_ids", &v, e) < 0) return -1;
  if (v)
    return oa_err(e, 400, NULL, "return_tokens_as_token_ids", "unsupported_value",
                  "'return_tokens_as_token_ids' is not supported");
  if (kind == OA_COMPLETION) {
    if (get_bool(b, "echo", &v, e) < 0) return -1;
    json_t *lp = json_object_get(b, "logprobs");
    if (v && lp && !json_is_null(lp))
      return oa_err(e, 400, NULL, "echo", "unsupported_value",
                    "'echo' with 'logprobs' (prompt logprobs) is not supported");
    json_t *s = json_object_get(b, "suffix");
    if (s && !json_is_null(s)) return oa_err(e, 400, NULL, "suffix", "unsupported_value", "'suffix' is not supported");
    long long bo = 1;
    if (get_int(b, "best_of", 1, 1, &bo, e) < 0) {
      if (e) snprintf(e->message, sizeof e->message, "'best_of' must be 1 (one completion per request)");
      return -1;
    }
  }
  return 0;
}

int oa_parse_request(oa_kind_t kind, const char *body, size_t len, oa_req_t *out, oa_error_t *e) {
  memset(out, 0, sizeof *out);
  out->n_prompts = 1;
  out->kind = kind;
  if (len == 0) return oa_err(e, 400, NULL, NULL, "invalid_json", "request body is empty: expected a JSON object");
  if (!oa_utf8_valid(body, len))
    return oa_err(e, 400, NULL, NULL, "invalid_utf8", "request body is not valid UTF-8");
  json_error_t je;
  json_t *b = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
  if (!b)
    return oa_err(e, 400, NULL, NULL, "invalid_json", "malformed JSON at line %d column %d: %s", je.line,
                  je.column, je.text);
  Gantry__V1__GenerateRequest *g = NULL;
  Gantry__V1__SamplingParams *sp = NULL;
  if (!json_is_object(b)) {
    oa_err(e, 400, NULL, NULL, "invalid_json", "request body must be a JSON object");
    goto fail;
  }
  json_t *model = json_object_get(b, "model");
  if (!model || json_is_null(model)) {
    oa_err(e, 400, NULL, "model", "missing_required_parameter", "'model' is required");
    goto fail;
  }
  if (!json_is_string(model) || json_string_length(model) == 0 || json_string_length(model) >= sizeof out->model) {
    oa_err(e, 400, NULL, "model", "invalid_type", "'model' must be a non-empty string of at most %zu bytes",
           sizeof out->model - 1);
    goto fail;
  }
  snprintf(out->model, sizeof out->model, "%s", json_string_value(model));

  long long n = 1;
  if (get_int(b, "n", LLONG_MIN, LLONG_MAX, &n, e) < 0) goto fail;
  if (n < 1 || n > OA_MAX_N) {
    oa_err(e, 400, NULL, "n", "invalid_value", "'n' must be in [1, %d] (got %lld)", OA_MAX_N, n);
    goto fail;
  }
  if (get_bool(b, "stream", &out->stream, e) < 0) goto fail;
  json_t *so = json_object_get(b, "stream_options");
  if (so && !json_is_null(so)) {
    if (!json_is_object(so)) {
      oa_err(e, 400, NULL, "stream_options", "invalid_type", "'stream_options' must be an object");
      goto fail;
    }
    if (get_bool(so, "include_usage", &out->include_usage, e) < 0) goto fail;
    if (get_bool(so, "continuous_usage_stats", &out->continuous_usage, e) < 0) goto fail;
    if (!out->stream) { /* as vLLM: stream_options only with stream */
      oa_err(e, 400, NULL, "stream_options", "invalid_value", "'stream_options' is only allowed when 'stream' is true");
      goto fail;
    }
  }
  if (reject_unsupported(b, kind, e)) goto fail;
  if (map_structured_outputs(b, e)) goto fail;
  if (kind == OA_CHAT && map_functions(b, &out->legacy_functions, e)) goto fail;
  json_t *rid = json_object_get(b, "request_id");
  if (rid && !json_is_null(rid)) {
    const char *r = json_string_value(rid);
    if (!r || !r[0] || strlen(r) >= sizeof out->request_id || strpbrk(r, " :*\r\n\t")) {
      oa_err(e, 400, NULL, "request_id", "invalid_value", "'request_id' must be a string of 1 to %zu characters without spaces, ':' or '*'",
             sizeof out->request_id - 1);
      goto fail;
    }
    snprintf(out->request_id, sizeof out->request_id, "%s", r);
  }

  g = malloc(sizeof *g);
  sp = malloc(sizeof *sp);
  if (!g || !sp) {
    free(g);
    free(sp);
    g = NULL;
    oa_err(e, 500, "server_error", NULL, NULL, "out of memory");
    goto fail;
  }
  gantry__v1__generate_request__init(g);
  gantry__v1__sampling_params__init(sp);
  g->sampling = sp;

  /* max_tokens (max_completion_tokens wins when both are given) */
  long long mt = 0;
  int r1 = get_int(b, "max_tokens", LLONG_MIN, LLONG_MAX, &mt, e);
  if (r1 < 0) goto fail;
  long long mct = 0;
  int r2 = get_int(b, "max_completion_tokens", LLONG_MIN, LLONG_MAX, &mct, e);
  if (r2 < 0) goto fail;
  if (r2) mt = mct;
  if (r1 || r2) {
    const char *p = r2 ? "max_completion_tokens" : "max_tokens";
    if (mt <= 0) {
      oa_err(e, 400, NULL, p, "invalid_value", "'%s' must be at least 1, got %lld", p, mt);
      goto fail;
    }
    if (mt > UINT32_MAX) mt = UINT32_MAX;
    g->max_tokens_opt_case = GANTRY__V1__GENERATE_REQUEST__MAX_TOKENS_OPT_MAX_TOKENS;
    g->max_tokens = (uint32_t)mt;
  }
  if (parse_sampling(b, sp, e)) goto fail;
  if (parse_stop(b, g, e)) goto fail;
  if (parse_token_params(b, g, e)) goto fail;
  if (parse_constraint(b, g, e)) goto fail;
  long long mint = 0;
  if (get_int(b, "min_tokens", 0, UINT32_MAX, &mint, e) < 0) goto fail;
  g->min_tokens = (uint32_t)mint;
  bool ie = false;
  if (get_bool(b, "ignore_eos", &ie, e) < 0) goto fail;
  g->ignore_eos = ie;
  long long prio = 0;
  if (get_int(b, "priority", -1000000, 1000000, &prio, e) < 0) goto fail;
  g->priority = (int32_t)prio;
  long long tpt = 0;
  if (get_int(b, "truncate_prompt_tokens", 1, UINT32_MAX, &tpt, e) < 0) goto fail;
  g->truncate_prompt_tokens = (uint32_t)tpt;
  json_t *salt = json_object_get(b, "cache_salt");
  if (salt && !json_is_null(salt)) {
    if (!json_is_string(salt) || !json_string_length(salt) || json_string_length(salt) > 256) {
      oa_err(e, 400, NULL, "cache_salt", "invalid_value", "'cache_salt' must be a non-empty string of at most 256 bytes");
      goto fail;
    }
    g->cache_salt = strdup(json_string_value(salt)); /* rq_start prefixes the tenant */
    if (!g->cache_salt) {
      g->cache_salt = (char *)protobuf_c_empty_string;
      oa_err(e, 500, "server_error", NULL, NULL, "out of memory");
      goto fail;
    }
  }

  /* logprobs: chat has logprobs (bool) + top_logprobs (int); completions has logprobs (int) */
  long long tl = 0;
  if (kind == OA_CHAT) {
    bool lp = false;
    if (get_bool(b, "logprobs", &lp, e) < 0) goto fail;
    int r = get_int(b, "top_logprobs", 0, MAX_LOGPROBS, &tl, e);
    if (r < 0) goto fail;
    if (r && tl > 0 && !lp) {
      oa_err(e, 400, NULL, "top_logprobs", "invalid_value", "'top_logprobs' needs 'logprobs': true");
      goto fail;
    }
    out->logprobs = lp;
  } else {
    int r = get_int(b, "logprobs", 0, MAX_LOGPROBS, &tl, e);
    if (r < 0) goto fail;
    out->logprobs = r > 0;
  }
  if (out->logprobs) {
    g->top_logprobs_opt_case = GANTRY__V1__GENERATE_REQUEST__TOP_LOGPROBS_OPT_TOP_LOGPROBS;
    g->top_logprobs = (uint32_t)tl;
  }

  if (kind == OA_CHAT) {
    Gantry__V1__ChatInput *chat = malloc(sizeof *chat);
    if (!chat) {
      oa_err(e, 500, "server_error", NULL, NULL, "out of memory");
      goto fail;
    }
    gantry__v1__chat_input__init(chat);
    g->input_case = GANTRY__V1__GENERATE_REQUEST__INPUT_CHAT;
    g->chat = chat;
    if (parse_messages(b, chat, e)) goto fail;
    if (parse_tools(b, g, chat, &out->has_tools, e)) goto fail;
    json_t *kw = json_object_get(b, "chat_template_kwargs");
    if (kw && !json_is_null(kw)) {
      if (!json_is_object(kw)) {
        oa_err(e, 400, NULL, "chat_template_kwargs", "invalid_type", "'chat_template_kwargs' must be an object");
        goto fail;
      }
      bool th = false;
      int r = get_bool(kw, "enable_thinking", &th, e);
      if (r < 0) goto fail;
      if (r) {
        chat->enable_thinking_opt_case = GANTRY__V1__CHAT_INPUT__ENABLE_THINKING_OPT_ENABLE_THINKING;
        chat->enable_thinking = th;
      }
    }
    /* reasoning_effort: none / minimal turn the template's thinking off, low / medium / high on
     * (an explicit chat_template_kwargs.enable_thinking wins) */
    json_t *re = json_object_get(b, "reasoning_effort");
    if (re && !json_is_null(re)) {
      const char *v = json_string_value(re);
      const bool off = v && (!strcmp(v, "none") || !strcmp(v, "minimal"));
      const bool on = v && (!strcmp(v, "low") || !strcmp(v, "medium") || !strcmp(v, "high"));
      if (!off && !on) {
        oa_err(e, 400, NULL, "reasoning_effort", "invalid_value", "'reasoning_effort' must be none, minimal, low, medium or high");
        goto fail;
      }
      if (!chat->enable_thinking_opt_case) {
        chat->enable_thinking_opt_case = GANTRY__V1__CHAT_INPUT__ENABLE_THINKING_OPT_ENABLE_THINKING;
        chat->enable_thinking = on;
      }
    }
    bool agp = true;
    int ra = get_bool(b, "add_generation_prompt", &agp, e);
    if (ra < 0) goto fail;
    if (ra) {
      chat->add_generation_prompt_opt_case = GANTRY__V1__CHAT_INPUT__ADD_GENERATION_PROMPT_OPT_ADD_GENERATION_PROMPT;
      chat->add_generation_prompt = agp;
    }
    bool cfm = false;
    if (get_bool(b, "continue_final_message", &cfm, e) < 0) goto fail;
    if (cfm && ra && agp) { /* as vLLM */
      oa_err(e, 400, NULL, "continue_final_message", "invalid_value",
             "'continue_final_message' and 'add_generation_prompt' cannot both be true");
      goto fail;
    }
    chat->continue_final_message = cfm;
    bool ptc = true;
    if (get_bool(b, "parallel_tool_calls", &ptc, e) < 0) goto fail;
    out->one_tool_call = !ptc || out->legacy_functions;
    /* tool_choice required with parallel calls: one or more calls (a named function: one) */
    json_t *tcj = json_object_get(b, "tool_choice");
    if (g->constraint && g->constraint->kind == GANTRY__V1__CONSTRAINT__KIND__KIND_TOOL_CALL && !out->one_tool_call &&
        json_is_string(tcj) && !strcmp(json_string_value(tcj), "required"))
      g->constraint->kind = GANTRY__V1__CONSTRAINT__KIND__KIND_TOOL_CALLS;
  } else {
    if (parse_prompt(b, g, &out->n_prompts, e)) goto fail;
    bool echo = false;
    if (get_bool(b, "echo", &echo, e) < 0) goto fail;
    if (echo && g->input_case != GANTRY__V1__GENERATE_REQUEST__INPUT_PROMPT) {
      oa_err(e, 400, NULL, "echo", "unsupported_value", "'echo' needs a text prompt, not token ids");
      goto fail;
    }
    if (echo && !(out->echo_texts = calloc((size_t)out->n_prompts, sizeof *out->echo_texts))) {
      oa_err(e, 500, "server_error", NULL, NULL, "out of memory");
      goto fail;
    }
    for (int k = 0; echo && k < out->n_prompts; k++)
      if (!(out->echo_texts[k] = strdup(k == 0 ? g->prompt : g->more_prompts[k - 1]))) {
        oa_err(e, 500, "server_error", NULL, NULL, "out of memory");
        goto fail;
      }
  }
  g->n = n > 1 ? (uint32_t)n : 0;
  json_decref(b);
  out->gen = g;
  return 0;
fail:
  if (g) protobuf_c_message_free_unpacked(&g->base, NULL);
  json_decref(b);
  out->gen = NULL;
  oa_req_free(out);
  return -1;
}

void oa_req_free(oa_req_t *r) {
  if (r && r->gen) protobuf_c_message_free_unpacked(&r->gen->base, NULL);
  if (r) r->gen = NULL;
  for (int k = 0; r && r->echo_texts && k < r->n_prompts; k++) free(r->echo_texts[k]);
  if (r) free(r->echo_texts);
  if (r) r->echo_texts = NULL;
  if (r) json_decref(r->rs_echo);
  if (r) json_decref(r->rs_items);
  if (r) r->rs_echo = r->rs_items = NULL;
}
