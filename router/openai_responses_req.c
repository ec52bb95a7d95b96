/* router/openai_responses_req.c — a /v1/responses request (OpenAI's Responses API) as a chat
 * request: input items -> messages, tools and tool_choice flattened the chat way, text.format ->
 * response_format, max_output_tokens -> max_tokens; then the chat parser does the validation and
 * builds the GenerateRequest, so both routes share one path to the engine. Fields the router
 * cannot honour are refused with a 400 naming them (the table in router/README.md). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "router/openai.h"

#define OOM(e) oa_err(e, 500, "server_error", NULL, NULL, "out of memory")

int oa_responses_prev_id(const char *body, size_t len, char *out, size_t n, oa_error_t *e) {
  out[0] = '\0';
  json_t *b = json_loadb(body, len, 0, NULL);
  if (!json_is_object(b)) {
    json_decref(b);
    return oa_err(e, 400, NULL, NULL, "invalid_json", "request body must be a JSON object");
  }
  json_t *p = json_object_get(b, "previous_response_id");
  int rc = 0;
  json_t *in = json_object_get(b, "input");
  size_t i;
  json_t *it;
  if (!p || json_is_null(p)) json_array_foreach(in, i, it) { /* the response of an item_reference */
      const char *ty = json_string_value(json_object_get(it, "type"));
      const char *id = json_string_value(json_object_get(it, "id"));
      const char *u = id ? strchr(id, '_') : NULL;
      if (!ty || strcmp(ty, "item_reference") || !u || strspn(u + 1, "0123456789abcdef") != 32 || n < 38) continue;
      snprintf(out, n, "resp_%.32s", u + 1);
      rc = 2;
      break;
    }
  if (p && !json_is_null(p)) {
    const char *s = json_string_value(p);
    size_t sl = s ? strlen(s) : 0;
    bool ok = s && sl > 5 && sl < n && sl <= OA_RESP_ID_MAX && !strncmp(s, "resp_", 5) &&
              strspn(s + 5, "0123456789abcdef") == sl - 5;
    if (!ok) rc = oa_err(e, 400, NULL, "previous_response_id", "invalid_value",
                         "'previous_response_id' must be the id of a stored response (resp_...)");
    else {
      snprintf(out, n, "%s", s);
      rc = 1;
    }
  }
  json_decref(b);
  return rc;
}

/* A Responses content value (string, or parts input_text / output_text / text / refusal) ->
 * chat content (a string, or an array of text parts the chat parser joins). NULL with e filled. */
static json_t *content_of(json_t *c, const char *param, oa_error_t *e) {
  if (json_is_string(c)) return json_incref(c);
  if (!json_is_array(c)) {
    oa_err(e, 400, NULL, param, "invalid_type", "'%s' must be a string or an array of content parts", param);
    return NULL;
  }
  json_t *parts = json_array();
  size_t i;
  json_t *p;
  json_array_foreach(c, i, p) {
    const char *t = json_string_value(json_object_get(p, "type"));
    json_t *text = json_object_get(p, t && !strcmp(t, "refusal") ? "refusal" : "text");
    if (!t || (strcmp(t, "input_text") && strcmp(t, "output_text") && strcmp(t, "text") && strcmp(t, "refusal"))) {
      oa_err(e, 400, NULL, param, "unsupported_content", "'%s[%zu]': content type '%s' is not supported (text only)",
             param, i, t ? t : "?");
      json_decref(parts);
      return NULL;
    }
    if (!json_is_string(text)) {
      oa_err(e, 400, NULL, param, "invalid_type", "'%s[%zu].text' must be a string", param, i);
      json_decref(parts);
      return NULL;
    }
    json_array_append_new(parts, json_pack("{s:s,s:O}", "type", "text", "text", text));
  }
  return parts;
}

/* The text of a reasoning item (its content's reasoning_text parts, else its summary's). */
static json_t *reasoning_of(json_t *it) {
  json_t *arr = json_object_get(it, "content");
  if (!json_array_size(arr)) arr = json_object_get(it, "summary");
  oa_sb_t sb = {0};
  size_t i;
  json_t *p;
  json_array_foreach(arr, i, p) {
    const char *t = json_string_value(json_object_get(p, "text"));
    if (t && oa_sb_append(&sb, t, strlen(t))) break;
  }
  json_t *s = json_stringn(sb.p ? sb.p : "", sb.len);
  oa_sb_free(&sb);
  return s;
}

/* The last message of msgs when it is an assistant's (a function_call or reasoning item joins
 * it), else a new assistant message appended to msgs. */
static json_t *assistant_tail(json_t *msgs) {
  json_t *last = json_array_get(msgs, json_array_size(msgs) - 1);
  const char *role = json_string_value(json_object_get(last, "role"));
  if (last && role && !strcmp(role, "assistant")) return last;
  json_t *m = json_pack("{s:s,s:n}", "role", "assistant", "content");
  json_array_append_new(msgs, m);
  return m;
}

/* The item with this id in the arrays look[0..2) (NULL entries skipped), or NULL. */
static json_t *find_item(json_t *const look[2], const char *id) {
  for (int k = 0; k < 2; k++) {
    size_t i;
    json_t *it;
    json_array_foreach(look[k], i, it) {
      const char *x = json_string_value(json_object_get(it, "id"));
      if (x && !strcmp(x, id)) return it;
    }
  }
  return NULL;
}

/* Appends the Responses items (an array, or one string = a user message) to msgs (chat messages)
 * and to items (the stored conversation). pfx names them in errors ("input"); look: where an
 * item_reference finds its item. */
static int add_items(json_t *in, const char *pfx, json_t *msgs, json_t *items, json_t *const look[2], oa_error_t *e) {
  char param[64];
  if (json_is_string(in)) {
    json_array_append_new(msgs, json_pack("{s:s,s:O}", "role", "user", "content", in));
    json_array_append_new(items, json_pack("{s:s,s:s,s:[{s:s,s:O}]}", "type", "message", "role", "user", "content",
                                           "type", "input_text", "text", in));
    return 0;
  }
  if (!json_is_array(in)) return oa_err(e, 400, NULL, pfx, "invalid_type", "'%s' must be a string or an array of items", pfx);
  size_t i;
  json_t *it;
  json_array_foreach(in, i, it) {
    snprintf(param, sizeof param, "%s[%zu]", pfx, i);
    if (!json_is_object(it)) return oa_err(e, 400, NULL, param, "invalid_type", "'%s' must be an object", param);
    const char *type = json_string_value(json_object_get(it, "type"));
    const char *role = json_string_value(json_object_get(it, "role"));
    if (!type && role) type = "message"; /* EasyInputMessage: {role, content} */
    if (!type) return oa_err(e, 400, NULL, param, "missing_required_parameter", "'%s.type' is required", param);
    if (!strcmp(type, "item_reference")) { /* an item of a stored response, as if sent again */
      const char *id = json_string_value(json_object_get(it, "id"));
      json_t *ref = id ? find_item(look, id) : NULL;
      if (!ref || !strcmp(json_string_value(json_object_get(ref, "type")) ? json_string_value(json_object_get(ref, "type")) : "", "item_reference"))
        return oa_err(e, 400, NULL, param, "invalid_value", "'%s': no stored item '%.80s' of this tenant", param, id ? id : "?");
      json_t *one = json_pack("[O]", ref);
      int rc = add_items(one, param, msgs, items, look, e);
      json_decref(one);
      if (rc) return -1;
      continue;
    }
    if (!strcmp(type, "message")) {
      if (!role) return oa_err(e, 400, NULL, param, "missing_required_parameter", "'%s.role' is required", param);
      char cp[80];
      snprintf(cp, sizeof cp, "%s.content", param);
      json_t *c = content_of(json_object_get(it, "content"), cp, e);
      if (!c) return -1;
      json_t *last = json_array_get(msgs, json_array_size(msgs) - 1);
      const char *lrole = last ? json_string_value(json_object_get(last, "role")) : NULL;
      if (!strcmp(role, "assistant") && lrole && !strcmp(lrole, "assistant") && json_is_null(json_object_get(last, "content"))) {
        json_object_set_new(last, "content", c); /* one assistant turn: its reasoning, text and calls */
      } else {
        json_array_append_new(msgs, json_pack("{s:s,s:o}", "role", role, "content", c));
      }
    } else if (!strcmp(type, "function_call")) {
      json_t *name = json_object_get(it, "name"), *args = json_object_get(it, "arguments");
      json_t *cid = json_object_get(it, "call_id");
      if (!json_is_string(name) || !json_is_string(cid) || (args && !json_is_string(args)))
        return oa_err(e, 400, NULL, param, "invalid_type", "'%s' needs string call_id, name and arguments", param);
      json_t *m = assistant_tail(msgs);
      json_t *tc = json_object_get(m, "tool_calls");
      if (!tc) json_object_set_new(m, "tool_calls", tc = json_array());
      json_array_append_new(tc, json_pack("{s:O,s:s,s:{s:O,s:s}}", "id", cid, "type", "function", "function", "name",
                                          name, "arguments", args ? json_string_value(args) : "{}"));
    } else if (!strcmp(type, "function_call_output")) {
      json_t *cid = json_object_get(it, "call_id"), *out = json_object_get(it, "output");
      if (!json_is_string(cid))
        return oa_err(e, 400, NULL, param, "invalid_type", "'%s.call_id' must be a string", param);
      char cp[80];
      snprintf(cp, sizeof cp, "%s.output", param);
      json_t *c = content_of(out, cp, e);
      if (!c) return -1;
      json_array_append_new(msgs, json_pack("{s:s,s:O,s:o}", "role", "tool", "tool_call_id", cid, "content", c));
    } else if (!strcmp(type, "reasoning")) {
      json_t *m = assistant_tail(msgs);
      json_object_set_new(m, "reasoning_content", reasoning_of(it));
    } else {
      return oa_err(e, 400, NULL, param, "unsupported_value",
                    "'%s': item type '%s' is not supported (message, function_call, function_call_output, reasoning)",
                    param, type);
    }
    json_array_append(items, it);
  }
  return 0;
}

/* tools [{type:function, name, description, parameters, strict}] -> chat tools. */
static int map_tools(json_t *b, json_t *chat, oa_error_t *e) {
  json_t *tools = json_object_get(b, "tools");
  if (tools && !json_is_null(tools)) {
    if (!json_is_array(tools)) return oa_err(e, 400, NULL, "tools", "invalid_type", "'tools' must be an array");
    json_t *ct = json_array();
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
      const char *ty = json_string_value(json_object_get(t, "type"));
      if (!ty || strcmp(ty, "function")) {
        json_decref(ct);
        return oa_err(e, 400, NULL, "tools", "unsupported_value",
                      "'tools[%zu]': tool type '%s' is not supported (function only)", i, ty ? ty : "?");
      }
      if (!json_is_string(json_object_get(t, "name"))) {
        json_decref(ct);
        return oa_err(e, 400, NULL, "tools", "invalid_type", "'tools[%zu].name' must be a string", i);
      }
      json_t *fn = json_deep_copy(t);
      json_object_del(fn, "type");
      json_array_append_new(ct, json_pack("{s:s,s:o}", "type", "function", "function", fn));
    }
    json_object_set_new(chat, "tools", ct);
  }
  json_t *tc = json_object_get(b, "tool_choice");
  if (!tc || json_is_null(tc)) return 0;
  if (json_is_string(tc)) {
    json_object_set(chat, "tool_choice", tc);
    return 0;
  }
  const char *ty = json_string_value(json_object_get(tc, "type"));
  const char *name = json_string_value(json_object_get(tc, "name"));
  if (!ty || strcmp(ty, "function") || !name)
    return oa_err(e, 400, NULL, "tool_choice", "unsupported_value",
                  "'tool_choice' must be none, auto, required or {\"type\": \"function\", \"name\": ...}");
  json_object_set_new(chat, "tool_choice", json_pack("{s:s,s:{s:s}}", "type", "function", "function", "name", name));
  return 0;
}

/* text.format -> response_format. */
static int map_text(json_t *b, json_t *chat, oa_error_t *e) {
  json_t *text = json_object_get(b, "text");
  if (!text || json_is_null(text)) return 0;
  if (!json_is_object(text)) return oa_err(e, 400, NULL, "text", "invalid_type", "'text' must be an object");
  json_t *verb = json_object_get(text, "verbosity");
  if (verb && !json_is_null(verb) && !(json_is_string(verb) && !strcmp(json_string_value(verb), "medium")))
    return oa_err(e, 400, NULL, "text.verbosity", "unsupported_value", "'text.verbosity' other than medium is not supported");
  json_t *f = json_object_get(text, "format");
  if (!f || json_is_null(f)) return 0;
  const char *ty = json_string_value(json_object_get(f, "type"));
  if (!ty) return oa_err(e, 400, NULL, "text.format", "invalid_type", "'text.format' must be {\"type\": ...}");
  if (!strcmp(ty, "text")) return 0;
  if (!strcmp(ty, "json_object")) {
    json_object_set_new(chat, "response_format", json_pack("{s:s}", "type", "json_object"));
    return 0;
  }
  if (strcmp(ty, "json_schema"))
    return oa_err(e, 400, NULL, "text.format", "invalid_value",
                  "'text.format.type' must be text, json_object or json_schema (got '%s')", ty);
  json_t *js = json_object();
  const char *keys[] = {"name", "schema", "strict", "description"};
  for (size_t k = 0; k < 4; k++)
    if (json_object_get(f, keys[k])) json_object_set(js, keys[k], json_object_get(f, keys[k]));
  json_object_set_new(chat, "response_format", json_pack("{s:s,s:o}", "type", "json_schema", "json_schema", js));
  return 0;
}

/* reasoning {effort, summary}: effort none / minimal turns the chat template's thinking off,
 * low / medium / high on; the reasoning text comes back whole (no summaries are written). */
static int map_reasoning(json_t *b, json_t *chat, oa_error_t *e) {
  json_t *r = json_object_get(b, "reasoning");
  if (!r || json_is_null(r)) return 0;
  if (!json_is_object(r)) return oa_err(e, 400, NULL, "reasoning", "invalid_type", "'reasoning' must be an object");
  json_t *ef = json_object_get(r, "effort");
  if (!ef || json_is_null(ef)) return 0;
  const char *s = json_string_value(ef);
  static const char *const on[] = {"low", "medium", "high"}, *const off[] = {"none", "minimal"};
  for (int k = 0; s && k < 3; k++)
    if (!strcmp(s, on[k])) return json_object_set_new(chat, "chat_template_kwargs", json_pack("{s:b}", "enable_thinking", 1)), 0;
  for (int k = 0; s && k < 2; k++)
    if (!strcmp(s, off[k])) return json_object_set_new(chat, "chat_template_kwargs", json_pack("{s:b}", "enable_thinking", 0)), 0;
  return oa_err(e, 400, NULL, "reasoning.effort", "invalid_value",
                "'reasoning.effort' must be none, minimal, low, medium or high");
}

/* Fields with no meaning here that change the result: refused, never ignored. */
static int refuse(json_t *b, oa_error_t *e) {
  static const char *const k_refused[] = {"background", "conversation", "prompt", "max_tool_calls", "include"};
  for (size_t i = 0; i < sizeof k_refused / sizeof *k_refused; i++) {
    json_t *v = json_object_get(b, k_refused[i]);
    if (!v || json_is_null(v) || (json_is_false(v)) || (json_is_array(v) && !json_array_size(v))) continue;
    return oa_err(e, 400, NULL, k_refused[i], "unsupported_value", "'%s' is not supported", k_refused[i]);
  }
  json_t *tr = json_object_get(b, "truncation");
  if (tr && !json_is_null(tr) && !(json_is_string(tr) && !strcmp(json_string_value(tr), "disabled")))
    return oa_err(e, 400, NULL, "truncation", "unsupported_value", "'truncation' must be disabled (a prompt over the context is a 400)");
  json_t *tl = json_object_get(b, "top_logprobs");
  if (tl && !json_is_null(tl) && !(json_is_integer(tl) && json_integer_value(tl) == 0))
    return oa_err(e, 400, NULL, "top_logprobs", "unsupported_value", "'top_logprobs' is not supported on /v1/responses");
  json_t *n = json_object_get(b, "n");
  if (n) return oa_err(e, 400, NULL, "n", "unsupported_value", "'n' is not a /v1/responses parameter");
  return 0;
}

/* Chat parameter names in errors -> the Responses ones. */
static void rename_param(oa_error_t *e) {
  static const char *const map[][2] = {{"messages", "input"}, {"max_tokens", "max_output_tokens"},
                                       {"response_format", "text.format"}, {"chat_template_kwargs", "reasoning"}};
  for (size_t k = 0; k < sizeof map / sizeof *map; k++) {
    size_t l = strlen(map[k][0]);
    if (!strncmp(e->param, map[k][0], l) && (e->param[l] == '\0' || e->param[l] == '[' || e->param[l] == '.')) {
      char rest[64];
      snprintf(rest, sizeof rest, "%s", e->param + l);
      snprintf(e->param, sizeof e->param, "%s%s", map[k][1], rest);
      return;
    }
  }
}

/* The echo of the request in the response object. */
static json_t *echo_of(json_t *b) {
  json_t *o = json_object();
  static const char *const keys[] = {"instructions", "max_output_tokens", "previous_response_id", "temperature",
                                     "top_p", "tool_choice", "tools", "text", "reasoning", "metadata", "user",
                                     "parallel_tool_calls", "service_tier", "safety_identifier", "prompt_cache_key"};
  for (size_t k = 0; k < sizeof keys / sizeof *keys; k++) {
    json_t *v = json_object_get(b, keys[k]);
    json_object_set(o, keys[k], v ? v : json_null());
  }
  if (json_is_null(json_object_get(o, "tool_choice"))) json_object_set_new(o, "tool_choice", json_string("auto"));
  if (json_is_null(json_object_get(o, "tools"))) json_object_set_new(o, "tools", json_array());
  if (json_is_null(json_object_get(o, "text"))) json_object_set_new(o, "text", json_pack("{s:{s:s}}", "format", "type", "text"));
  if (json_is_null(json_object_get(o, "parallel_tool_calls"))) json_object_set_new(o, "parallel_tool_calls", json_true());
  if (json_is_null(json_object_get(o, "metadata"))) json_object_set_new(o, "metadata", json_object());
  if (json_is_null(json_object_get(o, "reasoning")))
    json_object_set_new(o, "reasoning", json_pack("{s:n,s:n}", "effort", "summary"));
  json_object_set_new(o, "truncation", json_string("disabled"));
  return o;
}

int oa_parse_responses(const char *body, size_t len, const char *history, const char *refs, oa_req_t *out,
                       oa_error_t *e) {
  memset(out, 0, sizeof *out);
  if (len == 0) return oa_err(e, 400, NULL, NULL, "invalid_json", "request body is empty: expected a JSON object");
  if (!oa_utf8_valid(body, len)) return oa_err(e, 400, NULL, NULL, "invalid_utf8", "request body is not valid UTF-8");
  json_error_t je;
  json_t *b = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
  if (!b)
    return oa_err(e, 400, NULL, NULL, "invalid_json", "malformed JSON at line %d column %d: %s", je.line, je.column, je.text);
  json_t *chat = json_object(), *msgs = json_array(), *items = json_array(), *hist = NULL;
  json_t *refj = refs ? json_loads(refs, 0, NULL) : NULL;
  int rc = -1;
  if (!json_is_object(b)) {
    oa_err(e, 400, NULL, NULL, "invalid_json", "request body must be a JSON object");
    goto out;
  }
  if (refuse(b, e)) goto out;
  bool store = true;
  json_t *st = json_object_get(b, "store");
  if (st && !json_is_null(st)) {
    if (!json_is_boolean(st)) {
      oa_err(e, 400, NULL, "store", "invalid_type", "'store' must be a boolean");
      goto out;
    }
    store = json_is_true(st);
  }
  json_t *ins = json_object_get(b, "instructions");
  if (ins && !json_is_null(ins)) {
    if (!json_is_string(ins)) {
      oa_err(e, 400, NULL, "instructions", "invalid_type", "'instructions' must be a string");
      goto out;
    }
    json_array_append_new(msgs, json_pack("{s:s,s:O}", "role", "system", "content", ins));
  }
  if (history) hist = json_loads(history, 0, NULL);
  json_t *const look[2] = {json_is_array(hist) ? hist : NULL, json_is_array(refj) ? refj : NULL};
  if (history) {
    if (!json_is_array(hist)) {
      oa_err(e, 500, "server_error", "previous_response_id", NULL, "the stored response is not readable");
      goto out;
    }
    if (add_items(hist, "previous_response_id", msgs, items, look, e)) goto out;
  }
  json_t *in = json_object_get(b, "input");
  if (!in || json_is_null(in)) {
    oa_err(e, 400, NULL, "input", "missing_required_parameter", "'input' is required");
    goto out;
  }
  if (add_items(in, "input", msgs, items, look, e)) goto out;
  json_object_set(chat, "model", json_object_get(b, "model") ? json_object_get(b, "model") : json_null());
  json_object_set_new(chat, "messages", json_incref(msgs));
  static const char *const same[] = {"stream", "temperature", "top_p", "parallel_tool_calls", "top_k",
                                     "min_p", "seed", "stop", "priority", "cache_salt"};
  for (size_t k = 0; k < sizeof same / sizeof *same; k++)
    if (json_object_get(b, same[k])) json_object_set(chat, same[k], json_object_get(b, same[k]));
  if (json_object_get(b, "max_output_tokens")) json_object_set(chat, "max_tokens", json_object_get(b, "max_output_tokens"));
  if (map_tools(b, chat, e) || map_text(b, chat, e) || map_reasoning(b, chat, e)) goto out;
  char *cj = json_dumps(chat, JSON_COMPACT);
  if (!cj) {
    OOM(e);
    goto out;
  }
  rc = oa_parse_request(OA_CHAT, cj, strlen(cj), out, e);
  free(cj);
  if (rc) {
    if (e) rename_param(e);
    goto out;
  }
  out->kind = OA_RESPONSES;
  out->rs_store = store;
  out->rs_echo = echo_of(b);
  json_object_set_new(out->rs_echo, "store", json_boolean(store));
  out->rs_items = json_incref(items);
  Gantry__V1__Constraint *c = out->gen->constraint;
  if (c && !strcmp(c->param, "response_format")) {
    free(c->param);
    c->param = strdup("text.format");
    if (!c->param) c->param = (char *)protobuf_c_empty_string;
  }
out:
  json_decref(refj);
  json_decref(hist);
  json_decref(msgs);
  json_decref(items);
  json_decref(chat);
  json_decref(b);
  return rc;
}

json_t *oa_record_parse(const char *rec, size_t len, const char **tenant) {
  json_t *o = json_loadb(rec, len, 0, NULL);
  const char *t = json_string_value(json_object_get(o, "tenant"));
  if (!t || !json_is_object(json_object_get(o, "response")) || !json_is_array(json_object_get(o, "items"))) {
    json_decref(o);
    return NULL;
  }
  *tenant = t;
  return o;
}
