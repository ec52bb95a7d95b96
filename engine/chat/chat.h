/* engine/chat/chat.h — native rendering of Qwen chat templates (ChatML) from structured messages.
 *
 * gantry does not run Jinja. chat_template_detect() recognises a model's template by markers
 * that pin down every behaviour the native renderer implements; chat_render() then produces
 * the exact bytes transformers' Jinja rendering of that template would produce (same
 * whitespace, same reasoning-retention rule, same `tojson` serialisation: Python json.dumps
 * with ensure_ascii=False, ", " / ": " separators and key order preserved).
 *
 * Families:
 *   QWEN3  — Qwen3 hybrid-thinking template (tool calls as JSON inside <tool_call>).
 *   QWEN35 — Qwen3.5 template (tool calls as <function=NAME><parameter=K>V</parameter>
 *            inside <tool_call>; the generation prompt opens "<think>\n" when thinking is on).
 *            Four variants of its rule for keeping reasoning of earlier assistant turns are
 *            found in the wild (see chat_history_rule_t); each is recognised by its own
 *            expression and rendered accordingly.
 * A template that is not recognised yields GT_EUNSUPPORTED; nothing is guessed.
 *
 * Strings are UTF-8, NUL-terminated, and borrowed: the renderer copies what it needs. */
#ifndef GANTRY_ENGINE_CHAT_H
#define GANTRY_ENGINE_CHAT_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "common/err.h"

typedef enum chat_family_id {
  CHAT_FAMILY_QWEN3 = 1,
  CHAT_FAMILY_QWEN35 = 2,
} chat_family_id_t;

/* Which earlier assistant turns render their reasoning (Qwen3.5 variants; Qwen3 has one rule:
 * turns after the last real user query keep it when they are the last message or have some). */
typedef enum chat_history_rule {
  CHAT_HIST_QWEN3 = 0,              /* Qwen3's rule (see above) */
  CHAT_HIST_AFTER_QUERY = 1,        /* Qwen3.5 official: `loop.index0 > ns.last_query_index` */
  CHAT_HIST_AFTER_QUERY_NONEMPTY = 2, /* `... > ns.last_query_index and reasoning_content` */
  CHAT_HIST_AFTER_QUERY_OR_NONEMPTY = 3, /* `... > ns.last_query_index or reasoning_content` */
  CHAT_HIST_ALWAYS = 4,             /* every assistant turn gets a <think> block */
} chat_history_rule_t;

typedef struct chat_family {
  chat_family_id_t id;
  chat_history_rule_t history;
} chat_family_t;

/* Recognises the template source (tokenizer.chat_template). On success fills *out.
 * Unknown or unsupported template -> GT_EUNSUPPORTED naming what is missing; NULL or empty
 * source -> GT_ENOTFOUND (a model without a template: the caller must refuse chat requests
 * or take a template from the operator, never fall back to a guessed format). */
int chat_template_detect(const char *jinja, chat_family_t *out, gt_err_t *err);

/* Static, human-readable name ("qwen3", "qwen3.5", "qwen3.5/always-think", ...). */
const char *chat_family_name(const chat_family_t *f);

typedef enum chat_role {
  CHAT_ROLE_SYSTEM = 0,
  CHAT_ROLE_USER = 1,
  CHAT_ROLE_ASSISTANT = 2,
  CHAT_ROLE_TOOL = 3,
} chat_role_t;

/* "system" | "user" | "assistant" | "tool" -> role; anything else -> GT_EINVAL. */
int chat_role_parse(const char *s, chat_role_t *out, gt_err_t *err);

typedef struct chat_tool_call {
  const char *id;        /* optional (NULL): only used to validate tool_call_id of results */
  const char *name;      /* required, non-empty, no quotes, angle brackets or control chars */
  const char *arguments; /* JSON object text; NULL or "" means {} */
} chat_tool_call_t;

typedef struct chat_msg {
  chat_role_t role;
  const char *content;           /* NULL renders as "" */
  const char *reasoning_content; /* assistant only; NULL = absent (distinct from "") */
  const chat_tool_call_t *tool_calls; /* assistant only */
  size_t n_tool_calls;
  const char *tool_call_id;      /* tool only; optional */
} chat_msg_t;

typedef struct chat_render_opts {
  const char *tools_json;     /* JSON array of tool specs (OpenAI style); NULL or [] = none */
  bool add_generation_prompt;
  bool enable_thinking;       /* false renders the template's "thinking disabled" prompt */
  bool continue_final;        /* cut the rendering right after the final assistant message's
                                 content (its turn stays open: the output continues it); GT_EINVAL
                                 when the last message is not an assistant's with content */
} chat_render_opts_t;

/* Renders msgs[0..n) into a malloc'd NUL-terminated string (*out, caller frees; *out_len
 * excludes the NUL; out_len may be NULL). opts NULL = no tools, generation prompt, thinking on.
 * Tool-call arguments are parsed and re-serialised as the template's `tojson` would (what
 * vLLM does with the JSON-string arguments of OpenAI requests). Bad input (no messages, a tool result without a preceding assistant tool
 * call, invalid arguments JSON, invalid UTF-8, a system message the template forbids, ...) ->
 * GT_EINVAL naming the message index and the problem; *out is then NULL. */
int chat_render(const chat_family_t *fam, const chat_msg_t *msgs, size_t n,
                const chat_render_opts_t *opts, char **out, size_t *out_len, gt_err_t *err);

/* True when the rendered generation prompt already opened a reasoning block (Qwen3.5 with
 * thinking on ends with "<think>\n"): start the output parser with starts_in_reasoning. */
bool chat_prompt_opens_reasoning(const chat_family_t *fam, const chat_render_opts_t *opts);

/* Messages parsed from an OpenAI-style JSON array (role, content (string, null, or an array
 * of {"type":"text","text":..} parts joined with "\n"), reasoning_content (or "reasoning"),
 * tool_calls
 * [{id, type, function: {name, arguments (string or object)}}], tool_call_id). Owns all of
 * its strings; free with chat_msgs_free(). */
typedef struct chat_msgs {
  chat_msg_t *msgs;
  size_t n;
  void *owned_; /* internal */
} chat_msgs_t;

/* Fills *out (zeroed first). Malformed JSON shape -> GT_EINVAL (message names the index and
 * field); image/audio parts -> GT_EUNSUPPORTED. On error *out holds nothing to free. */
int chat_msgs_from_json(const json_t *messages, chat_msgs_t *out, gt_err_t *err);
void chat_msgs_free(chat_msgs_t *m);

/* Re-serialises JSON text exactly as Python's json.dumps(json.loads(text), ensure_ascii=False)
 * would (Jinja `tojson` in transformers): key order kept (a repeated key keeps its first
 * position and its last value), ", " and ": " separators, floats in Python repr form.
 * Strict JSON only (no NaN/Infinity literals, no lone surrogates). Returns a malloc'd
 * NUL-terminated string in *out; invalid JSON -> GT_EINVAL with the byte offset. */
int chat_json_pydump(const char *json, size_t len, char **out, size_t *out_len, gt_err_t *err);

#endif
