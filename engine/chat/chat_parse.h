/* engine/chat/chat_parse.h — streaming parser of Qwen3 / Qwen3.5 model output.
 *
 * Fed decoded text pieces as they are generated (split anywhere, even inside a UTF-8
 * character or a marker), it produces events: content and reasoning deltas, tool-call begin
 * (index, id, name), tool-call argument fragments (JSON text, streamed as it forms), tool-call
 * end, and a final end. The concatenation of the events never depends on how the text was
 * split, and no partial marker ("<too", "</thi") is ever emitted as text: such a suffix is
 * held until the next piece resolves it.
 *
 * Reasoning: text between <think> and </think>. "<think>" is recognised only at the start of
 * the output (after optional whitespace); with opts.starts_in_reasoning the prompt already
 * opened the block (Qwen3.5 with thinking on: see chat_prompt_opens_reasoning()). The newlines
 * just inside the block and those right after </think> are formatting and are not emitted.
 * An unterminated block (output cut short) stays reasoning.
 *
 * Tool calls (only when opts.parse_tool_calls), inside <tool_call> ... </tool_call>, in either
 * format (recognised from the first non-blank character of the body):
 *   Qwen3   {"name": "NAME", "arguments": {...}}
 *           The call begins once the name is known and the arguments object has started;
 *           the arguments are then streamed as the model writes them (its own JSON text),
 *           checked byte by byte as a JSON prefix.
 *   Qwen3.5 <function=NAME> <parameter=KEY>\nVALUE\n</parameter> ... </function>
 *           The call begins at "<function=NAME>"; the arguments are a JSON object built from
 *           the parameters: one leading and one trailing newline of a value are formatting;
 *           a value that parses as JSON is kept as JSON, any other value becomes a JSON
 *           string (and so does every value of a parameter that opts.tools_json declares
 *           "type": "string"). String values are streamed as they arrive.
 * Newlines right before <tool_call>, between calls and after the last call are formatting and
 * are dropped. Tool calls are only recognised in content, never inside reasoning.
 *
 * Malformed tool calls: while a call has not begun (no name yet, body not in either format,
 * or the output ends first), the text is not a tool call: "<tool_call>" and everything after
 * it are parsed again as ordinary content. Once a call has begun its events cannot be taken
 * back: a later deviation (invalid JSON, missing closing tags, output ending mid-call) ends
 * the call with CHAT_EV_TOOL_CALL_END .malformed = true, and the rest of its text up to
 * </tool_call> is dropped.
 *
 * Invalid UTF-8 in the input becomes U+FFFD (one per invalid byte), so every emitted text is
 * valid UTF-8. */
#ifndef GANTRY_ENGINE_CHAT_PARSE_H
#define GANTRY_ENGINE_CHAT_PARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

typedef enum chat_event_kind {
  CHAT_EV_CONTENT = 1,      /* text, len */
  CHAT_EV_REASONING = 2,    /* text, len */
  CHAT_EV_TOOL_CALL_BEGIN = 3, /* tool_index, id, name */
  CHAT_EV_TOOL_CALL_ARGS = 4,  /* tool_index, text, len: next fragment of the arguments JSON */
  CHAT_EV_TOOL_CALL_END = 5,   /* tool_index, malformed */
  CHAT_EV_END = 6,             /* n_tool_calls (> 0: the finish reason is "tool_calls") */
} chat_event_kind_t;

typedef struct chat_event {
  chat_event_kind_t kind;
  const char *text; /* text[len] is NUL; use len (model text may itself contain NUL bytes) */
  size_t len;
  int tool_index;
  const char *id;
  const char *name;
  bool malformed;
  int n_tool_calls;
} chat_event_t;

typedef struct chat_parser_opts {
  bool starts_in_reasoning; /* the prompt ended inside an open <think> block */
  bool parse_tool_calls;    /* false: <tool_call> is plain content (request without tools) */
  uint64_t id_seed;         /* tool-call ids are "call_" + 24 chars derived from it and the index */
  const char *tools_json;   /* optional OpenAI tools array (Qwen3.5 string parameters) */
} chat_parser_opts_t;

typedef struct chat_parser chat_parser_t;

/* opts may be NULL (all false / 0). Invalid tools_json -> GT_EINVAL. */
int chat_parser_new(const chat_parser_opts_t *opts, chat_parser_t **out, gt_err_t *err);
void chat_parser_free(chat_parser_t *p);

/* Feeds text[0..n). *evs receives the events produced (adjacent deltas of one kind merged),
 * owned by the parser and valid until its next call; *n_evs their count. */
int chat_parser_feed(chat_parser_t *p, const char *text, size_t n, const chat_event_t **evs,
                     size_t *n_evs, gt_err_t *err);

/* End of output: resolves everything held back, ends an open tool call and emits CHAT_EV_END
 * (always the last event). Feeding afterwards -> GT_EINVAL. */
int chat_parser_finish(chat_parser_t *p, const chat_event_t **evs, size_t *n_evs, gt_err_t *err);

/* Number of tool calls begun so far. */
int chat_parser_tool_calls(const chat_parser_t *p);

#endif
