/* engine/chat/chat_detect.c — which chat template a model has: the Qwen3 / Qwen3.5 templates are
 * recognised by markers that pin down every behaviour the renderer (chat.c) implements. */
#include <stdlib.h>
#include <string.h>

#include "engine/chat/chat_internal.h"

/* ---------------------------------------------------------------- template detection */

/* Template text with every whitespace run collapsed to one space (Jinja tags tolerate
 * re-indentation; string literals in the Qwen templates have no double spaces). */
static char *normalize_ws(const char *s) {
  size_t n = strlen(s);
  char *o = malloc(n + 1);
  if (!o) return NULL;
  size_t k = 0;
  bool ws = false;
  for (size_t i = 0; i < n; i++) {
    char c = s[i];
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      ws = true;
      continue;
    }
    if (ws && k) o[k++] = ' ';
    ws = false;
    o[k++] = c;
  }
  o[k] = 0;
  return o;
}

/* Literal texts the renderer emits, as they appear (escaped) in the template source. The
 * renderer's copies (unescaped) are below; a test checks that each pair agrees. */
#define Q3_TOOLS_HEAD                                                                          \
  "# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou " \
  "are provided with function signatures within <tools></tools> XML tags:\\n<tools>"
#define Q3_TOOLS_TAIL                                                                          \
  "\\n</tools>\\n\\nFor each function call, return a json object with function name and "    \
  "arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\\"name\\\": "         \
  "<function-name>, \\\"arguments\\\": <args-json-object>}\\n</tool_call><|im_end|>\\n"
#define Q35_TOOLS_HEAD "# Tools\\n\\nYou have access to the following functions:\\n\\n<tools>"
#define Q35_TOOLS_TAIL                                                                         \
  "\\n\\nIf you choose to call a function ONLY reply in the following format with NO "        \
  "suffix:\\n\\n<tool_call>\\n<function=example_function_name>\\n<parameter=example_"         \
  "parameter_1>\\nvalue_1\\n</parameter>\\n<parameter=example_parameter_2>\\nThis is the "    \
  "value for the second parameter\\nthat can span\\nmultiple lines\\n</parameter>\\n</"        \
  "function>\\n</tool_call>\\n\\n<IMPORTANT>\\nReminder:\\n- Function calls MUST follow the " \
  "specified format: an inner <function=...></function> block must be nested within "         \
  "<tool_call></tool_call> XML tags\\n- Required parameters MUST be specified\\n- You may "   \
  "provide optional reasoning for your function call in natural language BEFORE the "         \
  "function call, but NOT after\\n- If there is no function call available, answer the "     \
  "question like normal with your current knowledge and do not tell the user about function " \
  "calls\\n</IMPORTANT>"

/* Unescaped versions (what is rendered). */
const char chat__q3_tools_head[] =
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou "
    "are provided with function signatures within <tools></tools> XML tags:\n<tools>";
const char chat__q3_tools_tail[] =
    "\n</tools>\n\nFor each function call, return a json object with function name and "
    "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": "
    "<function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n";
const char chat__q35_tools_head[] = "# Tools\n\nYou have access to the following functions:\n\n<tools>";
const char chat__q35_tools_tail[] =
    "\n\nIf you choose to call a function ONLY reply in the following format with NO "
    "suffix:\n\n<tool_call>\n<function=example_function_name>\n<parameter=example_"
    "parameter_1>\nvalue_1\n</parameter>\n<parameter=example_parameter_2>\nThis is the "
    "value for the second parameter\nthat can span\nmultiple lines\n</parameter>\n</"
    "function>\n</tool_call>\n\n<IMPORTANT>\nReminder:\n- Function calls MUST follow the "
    "specified format: an inner <function=...></function> block must be nested within "
    "<tool_call></tool_call> XML tags\n- Required parameters MUST be specified\n- You may "
    "provide optional reasoning for your function call in natural language BEFORE the "
    "function call, but NOT after\n- If there is no function call available, answer the "
    "question like normal with your current knowledge and do not tell the user about function "
    "calls\n</IMPORTANT>";

/* Each marker pins one behaviour the renderer implements (matched after whitespace
 * normalisation, see normalize_ws). */
static const char *const q3_markers[] = {
    "<|im_start|>", "<|im_end|>",
    "{{- '<|im_start|>system\\n' }}",
    "{{- messages[0].content + '\\n\\n' }}",
    Q3_TOOLS_HEAD,
    "{%- for tool in tools %} {{- \"\\n\" }} {{- tool | tojson }} {%- endfor %}",
    Q3_TOOLS_TAIL,
    "{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}",
    "namespace(multi_step_tool=true, last_query_index=messages|length - 1)",
    "{%- for message in messages[::-1] %}",
    "ns.multi_step_tool and message.role == \"user\" and "
    "not(message.content.startswith('<tool_response>') and "
    "message.content.endswith('</tool_response>'))",
    "(message.role == \"user\") or (message.role == \"system\" and not loop.first)",
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}",
    "message.reasoning_content is defined and message.reasoning_content is not none",
    "{%- if '</think>' in message.content %}",
    "{%- set content = message.content.split('</think>')[-1].lstrip('\\n') %}",
    "{%- set reasoning_content = "
    "message.content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}",
    "{%- if loop.index0 > ns.last_query_index %}",
    "{%- if loop.last or (not loop.last and reasoning_content) %}",
    "{{- '<|im_start|>' + message.role + '\\n<think>\\n' + reasoning_content.strip('\\n') + "
    "'\\n</think>\\n\\n' + content.lstrip('\\n') }}",
    "{{- '<|im_start|>' + message.role + '\\n' + content }}",
    "{%- if (loop.first and content) or (not loop.first) %} {{- '\\n' }}",
    "{{- '<tool_call>\\n{\"name\": \"' }} {{- tool_call.name }} {{- '\", \"arguments\": ' }}",
    "{{- tool_call.arguments | tojson }}",
    "{{- '}\\n</tool_call>' }}",
    "{{- '<|im_end|>\\n' }}",
    "{%- if loop.first or (messages[loop.index0 - 1].role != \"tool\") %} {{- '<|im_start|>user' }}",
    "{{- '\\n<tool_response>\\n' }} {{- message.content }} {{- '\\n</tool_response>' }}",
    "{%- if loop.last or (messages[loop.index0 + 1].role != \"tool\") %} {{- '<|im_end|>\\n' }}",
    "{%- if add_generation_prompt %} {{- '<|im_start|>assistant\\n' }} {%- if enable_thinking "
    "is defined and enable_thinking is false %} {{- '<think>\\n\\n</think>\\n\\n' }} {%- endif %} "
    "{%- endif %}",
};

static const char *const q35_markers[] = {
    "<|im_start|>", "<|im_end|>",
    "{%- macro render_content(content, do_vision_count, is_system_content=false) %}",
    "{%- if content is string %} {{- content }}",
    "{%- elif content is none or content is undefined %} {{- '' }}",
    "raise_exception('No messages provided.')",
    "{%- if tools and tools is iterable and tools is not mapping %} {{- '<|im_start|>system\\n' }} "
    "{{- \"" Q35_TOOLS_HEAD "\" }} {%- for tool in tools %} {{- \"\\n\" }} {{- tool | tojson }} "
    "{%- endfor %} {{- \"\\n</tools>\" }} {{- '" Q35_TOOLS_TAIL "' }}",
    "{%- set content = render_content(messages[0].content, false, true)|trim %} {%- if content %} "
    "{{- '\\n\\n' + content }} {%- endif %} {%- endif %} {{- '<|im_end|>\\n' }} {%- else %} {%- if "
    "messages[0].role == 'system' %} {%- set content = render_content(messages[0].content, false, "
    "true)|trim %} {{- '<|im_start|>system\\n' + content + '<|im_end|>\\n' }}",
    "namespace(multi_step_tool=true, last_query_index=messages|length - 1)",
    "{%- if ns.multi_step_tool and message.role == \"user\" %} {%- set content = "
    "render_content(message.content, false)|trim %} {%- if "
    "not(content.startswith('<tool_response>') and content.endswith('</tool_response>')) %}",
    "raise_exception('No user query found in messages.')",
    "{%- set content = render_content(message.content, true)|trim %} {%- if message.role == "
    "\"system\" %} {%- if not loop.first %} {{- raise_exception('System message must be at the "
    "beginning.') }}",
    "{%- elif message.role == \"user\" %} {{- '<|im_start|>' + message.role + '\\n' + content + "
    "'<|im_end|>' + '\\n' }}",
    "{%- if message.reasoning_content is string %} {%- set reasoning_content = "
    "message.reasoning_content %}",
    "'</think>' in content %} {%- set reasoning_content = "
    "content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %} {%- set "
    "content = content.split('</think>')[-1].lstrip('\\n') %}",
    "{{- '<|im_start|>' + message.role + '\\n<think>\\n' + reasoning_content + "
    "'\\n</think>\\n\\n' + content }}",
    "{%- if loop.first %} {%- if content|trim %} {{- '\\n\\n<tool_call>\\n<function=' + "
    "tool_call.name + '>\\n' }} {%- else %} {{- '<tool_call>\\n<function=' + tool_call.name + "
    "'>\\n' }} {%- endif %} {%- else %} {{- '\\n<tool_call>\\n<function=' + tool_call.name + "
    "'>\\n' }}",
    "{%- for args_name, args_value in tool_call.arguments|items %} {{- '<parameter=' + args_name "
    "+ '>\\n' }} {%- set args_value = args_value | tojson | safe if args_value is mapping or "
    "(args_value is sequence and args_value is not string) else args_value | string %} {{- "
    "args_value }} {{- '\\n</parameter>\\n' }} {%- endfor %}",
    "{{- '</function>\\n</tool_call>' }} {%- endfor %} {%- endif %} {{- '<|im_end|>\\n' }}",
    "{%- elif message.role == \"tool\" %} {%- if loop.previtem and loop.previtem.role != "
    "\"tool\" %} {{- '<|im_start|>user' }} {%- endif %} {{- '\\n<tool_response>\\n' }} {{- "
    "content }} {{- '\\n</tool_response>' }} {%- if not loop.last and loop.nextitem.role != "
    "\"tool\" %} {{- '<|im_end|>\\n' }} {%- elif loop.last %} {{- '<|im_end|>\\n' }}",
    "{{- raise_exception('Unexpected message role.') }}",
    "{%- if add_generation_prompt %} {{- '<|im_start|>assistant\\n' }} {%- if enable_thinking "
    "is defined and enable_thinking is false %} {{- '<think>\\n\\n</think>\\n\\n' }} {%- else %} "
    "{{- '<think>\\n' }} {%- endif %} {%- endif %}",
};

/* Features of later Qwen templates that this renderer does not implement. */
static const char *const q35_unsupported[] = {"preserve_thinking", "reasoning_effort",
                                              "reasoning_instructions"};

static const char *missing_marker(const char *norm, const char *const *markers, size_t n) {
  for (size_t i = 0; i < n; i++) {
    char *m = normalize_ws(markers[i]);
    if (!m) return "(out of memory)";
    bool found = strstr(norm, m) != NULL;
    free(m);
    if (!found) return markers[i];
  }
  return NULL;
}

int chat_template_detect(const char *jinja, chat_family_t *out, gt_err_t *err) {
  if (!jinja || !*jinja)
    return gt_err_set(err, GT_ENOTFOUND,
                      "model has no chat template (tokenizer.chat_template missing or empty)");
  char *norm = normalize_ws(jinja);
  if (!norm) return gt_err_set(err, GT_ENOMEM, "out of memory");
  int rc;
  bool is35 = strstr(norm, "<function=") != NULL;
  if (!is35) {
    const char *miss = missing_marker(norm, q3_markers, sizeof q3_markers / sizeof *q3_markers);
    if (miss) {
      rc = gt_err_set(err, GT_EUNSUPPORTED,
                      "unsupported chat template: not the Qwen3 template (missing `%.120s`)", miss);
      goto done;
    }
    out->id = CHAT_FAMILY_QWEN3;
    out->history = CHAT_HIST_QWEN3;
    rc = GT_OK;
    goto done;
  }
  for (size_t i = 0; i < sizeof q35_unsupported / sizeof *q35_unsupported; i++)
    if (strstr(norm, q35_unsupported[i])) {
      rc = gt_err_set(err, GT_EUNSUPPORTED,
                      "unsupported chat template: Qwen3.5-style template uses `%s`, which the "
                      "native renderer does not implement", q35_unsupported[i]);
      goto done;
    }
  const char *miss = missing_marker(norm, q35_markers, sizeof q35_markers / sizeof *q35_markers);
  if (miss) {
    rc = gt_err_set(err, GT_EUNSUPPORTED,
                    "unsupported chat template: not the Qwen3.5 template (missing `%.120s`)", miss);
    goto done;
  }
  /* Which assistant turns keep their <think> block. */
  bool trims = strstr(norm, "{%- set reasoning_content = reasoning_content|trim %}") != NULL;
  bool has_and = strstr(norm, "{%- if loop.index0 > ns.last_query_index and reasoning_content %}");
  bool has_or = strstr(norm, "{%- if loop.index0 > ns.last_query_index or reasoning_content %}");
  bool has_plain = strstr(norm, "{%- if loop.index0 > ns.last_query_index %}");
  int nrules = (int)has_and + (int)has_or + (int)has_plain;
  if (nrules == 1 && trims) {
    out->history = has_and ? CHAT_HIST_AFTER_QUERY_NONEMPTY
                   : has_or ? CHAT_HIST_AFTER_QUERY_OR_NONEMPTY
                            : CHAT_HIST_AFTER_QUERY;
  } else if (nrules == 0 && !trims && !strstr(norm, "loop.index0 > ns.last_query_index")) {
    out->history = CHAT_HIST_ALWAYS;
  } else {
    rc = gt_err_set(err, GT_EUNSUPPORTED,
                    "unsupported chat template: Qwen3.5-style template with an unknown rule for "
                    "keeping reasoning of earlier assistant turns");
    goto done;
  }
  out->id = CHAT_FAMILY_QWEN35;
  rc = GT_OK;
done:
  free(norm);
  return rc;
}

const char *chat_family_name(const chat_family_t *f) {
  if (!f) return "none";
  if (f->id == CHAT_FAMILY_QWEN3) return "qwen3";
  if (f->id != CHAT_FAMILY_QWEN35) return "unknown";
  switch (f->history) {
    case CHAT_HIST_AFTER_QUERY: return "qwen3.5";
    case CHAT_HIST_AFTER_QUERY_NONEMPTY: return "qwen3.5/keep-nonempty-think";
    case CHAT_HIST_AFTER_QUERY_OR_NONEMPTY: return "qwen3.5/keep-any-think";
    case CHAT_HIST_ALWAYS: return "qwen3.5/always-think";
    default: return "qwen3.5/unknown";
  }
}
