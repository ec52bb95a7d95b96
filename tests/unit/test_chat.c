/* tests/unit/test_chat.c — native chat-template rendering and template detection.
 *
 * - Every case of tests/golden/qwen3-chat-template-cases.json (transformers' Jinja rendering
 *   of the real Qwen3 template) must come out byte-identical.
 * - More cases (multi-step tool calls, reasoning retention, Qwen3.5 XML tool calls, floats and
 *   non-ASCII in tojson, trims) whose expected bytes were produced by Jinja2 3.1.6 configured
 *   as transformers configures it (trim_blocks, lstrip_blocks, tojson = json.dumps with
 *   ensure_ascii=False), from the Qwen3 template and the Qwen3.5 template variants below.
 * - The templates carried by every GGUF fixture are recognised; bad input gives clear errors. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "engine/chat/chat.h"
#include "tests/common/testutil.h"

typedef enum { TPL_Q3, TPL_Q35, TPL_Q35A, TPL_Q35B, TPL_Q35C, TPL_COUNT } tpl_id_t;

typedef struct render_case {
  const char *name;
  tpl_id_t tpl;
  const char *messages; /* OpenAI-style JSON; tool-call arguments as JSON strings */
  const char *tools;
  bool add_generation_prompt, enable_thinking;
  const char *want;
} render_case_t;

/* Qwen3.5 chat template, variant keeping reasoning only when non-empty (as shipped in a
 * llama.cpp fork's models/templates/Qwen3.5-4B.jinja, 7779 bytes). The official template and
 * the other variants found in the wild are derived from it below by replacing one expression. */
static const char q35_variant_and[] =
    "{%- set image_count = namespace(value=0) %}\n"
    "{%- set video_count = namespace(value=0) %}\n"
    "{%- macro render_content(content, do_vision_count, is_system_content=false) %}\n"
    "    {%- if content is string %}\n"
    "        {{- content }}\n"
    "    {%- elif content is iterable and content is not mapping %}\n"
    "        {%- for item in content %}\n"
    "            {%- if 'image' in item or 'image_url' in item or item.type == 'image' %}\n"
    "                {%- if is_system_content %}\n"
    "                    {{- raise_exception('System message cannot contain images.') }}\n"
    "                {%- endif %}\n"
    "                {%- if do_vision_count %}\n"
    "                    {%- set image_count.value = image_count.value + 1 %}\n"
    "                {%- endif %}\n"
    "                {%- if add_vision_id %}\n"
    "                    {{- 'Picture ' ~ image_count.value ~ ': ' }}\n"
    "                {%- endif %}\n"
    "                {{- '<|vision_start|><|image_pad|><|vision_end|>' }}\n"
    "            {%- elif 'video' in item or item.type == 'video' %}\n"
    "                {%- if is_system_content %}\n"
    "                    {{- raise_exception('System message cannot contain videos.') }}\n"
    "                {%- endif %}\n"
    "                {%- if do_vision_count %}\n"
    "                    {%- set video_count.value = video_count.value + 1 %}\n"
    "                {%- endif %}\n"
    "                {%- if add_vision_id %}\n"
    "                    {{- 'Video ' ~ video_count.value ~ ': ' }}\n"
    "                {%- endif %}\n"
    "                {{- '<|vision_start|><|video_pad|><|vision_end|>' }}\n"
    "            {%- elif 'text' in item %}\n"
    "                {{- item.text }}\n"
    "            {%- else %}\n"
    "                {{- raise_exception('Unexpected item type in content.') }}\n"
    "            {%- endif %}\n"
    "        {%- endfor %}\n"
    "    {%- elif content is none or content is undefined %}\n"
    "        {{- '' }}\n"
    "    {%- else %}\n"
    "        {{- raise_exception('Unexpected content type.') }}\n"
    "    {%- endif %}\n"
    "{%- endmacro %}\n"
    "{%- if not messages %}\n"
    "    {{- raise_exception('No messages provided.') }}\n"
    "{%- endif %}\n"
    "{%- if tools and tools is iterable and tools is not mapping %}\n"
    "    {{- '<|im_start|>system\\n' }}\n"
    "    {{- \"# Tools\\n\\nYou have access to the following functions:\\n\\n<tools>\" }}\n"
    "    {%- for tool in tools %}\n"
    "        {{- \"\\n\" }}\n"
    "        {{- tool | tojson }}\n"
    "    {%- endfor %}\n"
    "    {{- \"\\n</tools>\" }}\n"
    "    {{- '\\n\\nIf you choose to call a function ONLY reply in the following format with NO suffix:\\n\\n<tool_call>\\n<function=example_function_name>\\n<parameter=example_parameter_1>\\nvalue_1\\n</parameter>\\n<parameter=example_parameter_2>\\nThis is the value for the second parameter\\nthat can span\\nmultiple lines\\n</parameter>\\n</function>\\n</tool_call>\\n\\n<IMPORTANT>\\nReminder:\\n- Function calls MUST follow the specified format: an inner <function=...></function> block must be nested within <tool_call></tool_call> XML tags\\n- Required parameters MUST be specified\\n- You may provide optional reasoning for your function call in natural language BEFORE the function call, but NOT after\\n- If there is no function call available, answer the question like normal with your current knowledge and do not tell the user about function calls\\n</IMPORTANT>' }}\n"
    "    {%- if messages[0].role == 'system' %}\n"
    "        {%- set content = render_content(messages[0].content, false, true)|trim %}\n"
    "        {%- if content %}\n"
    "            {{- '\\n\\n' + content }}\n"
    "        {%- endif %}\n"
    "    {%- endif %}\n"
    "    {{- '<|im_end|>\\n' }}\n"
    "{%- else %}\n"
    "    {%- if messages[0].role == 'system' %}\n"
    "        {%- set content = render_content(messages[0].content, false, true)|trim %}\n"
    "        {{- '<|im_start|>system\\n' + content + '<|im_end|>\\n' }}\n"
    "    {%- endif %}\n"
    "{%- endif %}\n"
    "{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}\n"
    "{%- for message in messages[::-1] %}\n"
    "    {%- set index = (messages|length - 1) - loop.index0 %}\n"
    "    {%- if ns.multi_step_tool and message.role == \"user\" %}\n"
    "        {%- set content = render_content(message.content, false)|trim %}\n"
    "        {%- if not(content.startswith('<tool_response>') and content.endswith('</tool_response>')) %}\n"
    "            {%- set ns.multi_step_tool = false %}\n"
    "            {%- set ns.last_query_index = index %}\n"
    "        {%- endif %}\n"
    "    {%- endif %}\n"
    "{%- endfor %}\n"
    "{%- if ns.multi_step_tool %}\n"
    "    {{- raise_exception('No user query found in messages.') }}\n"
    "{%- endif %}\n"
    "{%- for message in messages %}\n"
    "    {%- set content = render_content(message.content, true)|trim %}\n"
    "    {%- if message.role == \"system\" %}\n"
    "        {%- if not loop.first %}\n"
    "            {{- raise_exception('System message must be at the beginning.') }}\n"
    "        {%- endif %}\n"
    "    {%- elif message.role == \"user\" %}\n"
    "        {{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>' + '\\n' }}\n"
    "    {%- elif message.role == \"assistant\" %}\n"
    "        {%- set reasoning_content = '' %}\n"
    "        {%- if message.reasoning_content is string %}\n"
    "            {%- set reasoning_content = message.reasoning_content %}\n"
    "        {%- else %}\n"
    "            {%- if '</think>' in content %}\n"
    "                {%- set reasoning_content = content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}\n"
    "                {%- set content = content.split('</think>')[-1].lstrip('\\n') %}\n"
    "            {%- endif %}\n"
    "        {%- endif %}\n"
    "        {%- set reasoning_content = reasoning_content|trim %}\n"
    "        {%- if loop.index0 > ns.last_query_index  and reasoning_content %}\n"
    "            {{- '<|im_start|>' + message.role + '\\n<think>\\n' + reasoning_content + '\\n</think>\\n\\n' + content }}\n"
    "        {%- else %}\n"
    "            {{- '<|im_start|>' + message.role + '\\n' + content }}\n"
    "        {%- endif %}\n"
    "        {%- if message.tool_calls and message.tool_calls is iterable and message.tool_calls is not mapping %}\n"
    "            {%- for tool_call in message.tool_calls %}\n"
    "                {%- if tool_call.function is defined %}\n"
    "                    {%- set tool_call = tool_call.function %}\n"
    "                {%- endif %}\n"
    "                {%- if loop.first %}\n"
    "                    {%- if content|trim %}\n"
    "                        {{- '\\n\\n<tool_call>\\n<function=' + tool_call.name + '>\\n' }}\n"
    "                    {%- else %}\n"
    "                        {{- '<tool_call>\\n<function=' + tool_call.name + '>\\n' }}\n"
    "                    {%- endif %}\n"
    "                {%- else %}\n"
    "                    {{- '\\n<tool_call>\\n<function=' + tool_call.name + '>\\n' }}\n"
    "                {%- endif %}\n"
    "                {%- if tool_call.arguments is defined %}\n"
    "                    {%- for args_name, args_value in tool_call.arguments|items %}\n"
    "                        {{- '<parameter=' + args_name + '>\\n' }}\n"
    "                        {%- set args_value = args_value | tojson | safe if args_value is mapping or (args_value is sequence and args_value is not string) else args_value | string %}\n"
    "                        {{- args_value }}\n"
    "                        {{- '\\n</parameter>\\n' }}\n"
    "                    {%- endfor %}\n"
    "                {%- endif %}\n"
    "                {{- '</function>\\n</tool_call>' }}\n"
    "            {%- endfor %}\n"
    "        {%- endif %}\n"
    "        {{- '<|im_end|>\\n' }}\n"
    "    {%- elif message.role == \"tool\" %}\n"
    "        {%- if loop.previtem and loop.previtem.role != \"tool\" %}\n"
    "            {{- '<|im_start|>user' }}\n"
    "        {%- endif %}\n"
    "        {{- '\\n<tool_response>\\n' }}\n"
    "        {{- content }}\n"
    "        {{- '\\n</tool_response>' }}\n"
    "        {%- if not loop.last and loop.nextitem.role != \"tool\" %}\n"
    "            {{- '<|im_end|>\\n' }}\n"
    "        {%- elif loop.last %}\n"
    "            {{- '<|im_end|>\\n' }}\n"
    "        {%- endif %}\n"
    "    {%- else %}\n"
    "        {{- raise_exception('Unexpected message role.') }}\n"
    "    {%- endif %}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "    {{- '<|im_start|>assistant\\n' }}\n"
    "    {%- if enable_thinking is defined and enable_thinking is false %}\n"
    "        {{- '<think>\\n\\n</think>\\n\\n' }}\n"
    "    {%- else %}\n"
    "        {{- '<think>\\n' }}\n"
    "    {%- endif %}\n"
    "{%- endif %}";
static const render_case_t jinja_cases[] = {
    {"multi-step tool calls keep reasoning after the last query", TPL_Q3,
    "[{\"role\": \"system\", \"content\": \"You are helpful.\\n\"}, {\"role\": \"user\", \"content\": \"Weather in Oslo and Bergen?\"}, {\"role\": \"assistant\", \"content\": \"\", \"reasoning_content\": \"\\nNeed two calls.\\n\", \"tool_calls\": [{\"id\": \"call_0\", \"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\":\\\"Oslo\\\",\\\"days\\\":2}\"}}, {\"id\": \"call_1\", \"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\":\\\"Bergen\\\",\\\"opts\\\":{\\\"units\\\":\\\"C\\\",\\\"alerts\\\":[true,null,0.1]}}\"}}]}, {\"role\": \"tool\", \"tool_call_id\": \"call_0\", \"content\": \"{\\\"temp\\\": 3}\"}, {\"role\": \"tool\", \"tool_call_id\": \"call_1\", \"content\": \" rainy \\n\"}, {\"role\": \"assistant\", \"content\": \"Let me also search.\", \"reasoning_content\": \"One more.\", \"tool_calls\": [{\"id\": \"call_2\", \"type\": \"function\", \"function\": {\"name\": \"search\", \"arguments\": \"{\\\"q\\\":\\\"Bergen rain \\\\u00abtoday\\\\u00bb\\\",\\\"n\\\":1e+16,\\\"f\\\":1e-05,\\\"z\\\":-0.0}\"}}]}, {\"role\": \"tool\", \"tool_call_id\": \"call_2\", \"content\": \"wet\"}]",
    "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Weather for a city\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}, \"days\": {\"type\": \"integer\", \"default\": 1.5e-07}}, \"required\": [\"city\"]}}}, {\"type\": \"function\", \"function\": {\"name\": \"search\", \"description\": \"Web search, \302\253quoted\302\273 \\\"text\\\"\", \"parameters\": {\"type\": \"object\", \"properties\": {\"q\": {\"type\": \"string\"}}}}}]", true, true,
    "<|im_start|>system\n"
    "You are helpful.\n"
    "\n"
    "\n"
    "# Tools\n"
    "\n"
    "You may call one or more functions to assist with the user query.\n"
    "\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n"
    "<tools>\n"
    "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Weather for a city\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}, \"days\": {\"type\": \"integer\", \"default\": 1.5e-07}}, \"required\": [\"city\"]}}}\n"
    "{\"type\": \"function\", \"function\": {\"name\": \"search\", \"description\": \"Web search, \302\253quoted\302\273 \\\"text\\\"\", \"parameters\": {\"type\": \"object\", \"properties\": {\"q\": {\"type\": \"string\"}}}}}\n"
    "</tools>\n"
    "\n"
    "For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n"
    "<tool_call>\n"
    "{\"name\": <function-name>, \"arguments\": <args-json-object>}\n"
    "</tool_call><|im_end|>\n"
    "<|im_start|>user\n"
    "Weather in Oslo and Bergen?<|im_end|>\n"
    "<|im_start|>assistant\n"
    "<think>\n"
    "Need two calls.\n"
    "</think>\n"
    "\n"
    "<tool_call>\n"
    "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\", \"days\": 2}}\n"
    "</tool_call>\n"
    "<tool_call>\n"
    "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Bergen\", \"opts\": {\"units\": \"C\", \"alerts\": [true, null, 0.1]}}}\n"
    "</tool_call><|im_end|>\n"
    "<|im_start|>user\n"
    "<tool_response>\n"
    "{\"temp\": 3}\n"
    "</tool_response>\n"
    "<tool_response>\n"
    " rainy \n"
    "\n"
    "</tool_response><|im_end|>\n"
    "<|im_start|>assistant\n"
    "<think>\n"
    "One more.\n"
    "</think>\n"
    "\n"
    "Let me also search.\n"
    "<tool_call>\n"
    "{\"name\": \"search\", \"arguments\": {\"q\": \"Bergen rain \302\253today\302\273\", \"n\": 1e+16, \"f\": 1e-05, \"z\": -0.0}}\n"
    "</tool_call><|im_end|>\n"
    "<|im_start|>user\n"
    "<tool_response>\n"
    "wet\n"
    "</tool_response><|im_end|>\n"
    "<|im_start|>assistant\n"
    ""},
    {"multi-step tool calls keep reasoning after the last query", TPL_Q35,
    "[{\"role\": \"system\", \"content\": \"You are helpful.\\n\"}, {\"role\": \"user\", \"content\": \"Weather in Oslo and Bergen?\"}, {\"role\": \"assistant\", \"content\": \"\", \"reasoning_content\": \"\\nNeed two calls.\\n\", \"tool_calls\": [{\"id\": \"call_0\", \"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\":\\\"Oslo\\\",\\\"days\\\":2}\"}}, {\"id\": \"call_1\", \"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\":\\\"Bergen\\\",\\\"opts\\\":{\\\"units\\\":\\\"C\\\",\\\"alerts\\\":[true,null,0.1]}}\"}}]}, {\"role\": \"tool\", \"tool_call_id\": \"call_0\", \"content\": \"{\\\"temp\\\": 3}\"}, {\"role\": \"tool\", \"tool_call_id\": \"call_1\", \"content\": \" rainy \\n\"}, {\"role\": \"assistant\", \"content\": \"Let me also search.\", \"reasoning_content\": \"One more.\", \"tool_calls\": [{\"id\": \"call_2\", \"type\": \"function\", \"function\": {\"name\": \"search\", \"arguments\": \"{\\\"q\\\":\\\"Bergen rain \\\\u00abtoday\\\\u00bb\\\",\\\"n\\\":1e+16,\\\"f\\\":1e-05,\\\"z\\\":-0.0}\"}}]}, {\"role\": \"tool\", \"tool_call_id\": \"call_2\", \"content\": \"wet\"}]",
    "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Weather for a city\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}, \"days\": {\"type\": \"integer\", \"default\": 1.5e-07}}, \"required\": [\"city\"]}}}, {\"type\": \"function\", \"function\": {\"name\": \"search\", \"description\": \"Web search, \302\253quoted\302\273 \\\"text\\\"\", \"parameters\": {\"type\": \"object\", \"properties\": {\"q\": {\"type\": \"string\"}}}}}]", true, true,
    "<|im_start|>system\n"
    "# Tools\n"
    "\n"
    "You have access to the following functions:\n"
    "\n"
    "<tools>\n"
    "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Weather for a city\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}, \"days\": {\"type\": \"integer\", \"default\": 1.5e-07}}, \"required\": [\"city\"]}}}\n"
    "{\"type\": \"function\", \"function\": {\"name\": \"search\", \"description\": \"Web search, \302\253quoted\302\273 \\\"text\\\"\", \"parameters\": {\"type\": \"object\", \"properties\": {\"q\": {\"type\": \"string\"}}}}}\n"
    "</tools>\n"
    "\n"
    "If you choose to call a function ONLY reply in the following format with NO suffix:\n"
    "\n"
    "<tool_call>\n"
    "<function=example_function_name>\n"
    "<parameter=example_parameter_1>\n"
    "value_1\n"
    "</parameter>\n"
    "<parameter=example_parameter_2>\n"
    "This is the value for the second parameter\n"
    "that can span\n"
    "multiple lines\n"
    "</parameter>\n"
    "</function>\n"
    "</tool_call>\n"
    "\n"
    "<IMPORTANT>\n"
    "Reminder:\n"
    "- Function calls MUST follow the specified format: an inner <function=...></function> block must be nested within <tool_call></tool_call> XML tags\n"
    "- Required parameters MUST be specified\n"
    "- You may provide optional reasoning for your function call in natural language BEFORE the function call, but NOT after\n"
    "- If there is no function call available, answer the question like normal with your current knowledge and do not tell the user about function calls\n"
    "</IMPORTANT>\n"
    "\n"
    "You are helpful.<|im_end|>\n"
    "<|im_start|>user\n"
    "Weather in Oslo and Bergen?<|im_end|>\n"
    "<|im_start|>assistant\n"
    "<think>\n"
    "Need two calls.\n"
    "</think>\n"
    "\n"
    "<tool_call>\n"
    "<function=get_weather>\n"
    "<parameter=city>\n"
    "Oslo\n"
    "</parameter>\n"
    "<parameter=days>\n"
    "2\n"
    "</parameter>\n"
    "</function>\n"
    "</tool_call>\n"
    "<tool_call>\n"
    "<function=get_weather>\n"
    "<parameter=city>\n"
    "Bergen\n"
    "</parameter>\n"
    "<parameter=opts>\n"
    "{\"units\": \"C\", \"alerts\": [true, null, 0.1]}\n"
    "</parameter>\n"
    "</function>\n"
    "</tool_call><|im_end|>\n"
    "<|im_start|>user\n"
    "<tool_response>\n"
    "{\"temp\": 3}\n"
    "</tool_response>\n"
    "<tool_response>\n"
    "rainy\n"
    "</tool_response><|im_end|>\n"
    "<|im_start|>assistant\n"
    "<think>\n"
    "One more.\n"
    "</think>\n"
    "\n"
    "Let me also search.\n"
    "\n"
    "<tool_call>\n"
    "<function=search>\n"
    "<parameter=q>\n"
    "Bergen rain \302\253today\302\273\n"
    "</parameter>\n"
    "<parameter=n>\n"
    "1e+16\n"
    "</parameter>\n"
    "<parameter=f>\n"
    "1e-05\n"
    "</parameter>\n"
    "<parameter=z>\n"
    "-0.0\n"
    "</parameter>\n"
    "</function>\n"
    "</tool_call><|im_end|>\n"
    "<|im_start|>user\n"
    "<tool_response>\n"
    "wet\n"
    "</tool_response><|im_end|>\n"
    "<|im_start|>assistant\n"
    "<think>\n"
    ""},
    {"multi-step tool calls keep reasoning after the last query", TPL_Q35A,
    "[{\"role\": \"system\", \"content\": \"You are helpful.\\n\"}, {\"role\": \"user\", \"content\": \"Weather in Oslo and Bergen?\"}, {\"role\": \"assistant\", \"content\": \"\", \"reasoning_content\": \"\\nNeed two calls.\\n\", \"tool_calls\": [{\"id\": \"call_0\", \"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\":\\\"Oslo\\\",\\\"days\\\":2}\"}}, {\"id\": \"call_1\", \"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\":\\\"Bergen\\\",\\\"opts\\\":{\\\"units\\\":\\\"C\\\",\\\"alerts\\\":[true,null,0.1]}}\"}}]}, {\"role\": \"tool\", \"tool_call_id\": \"call_0\", \"content\": \"{\\\"temp\\\": 3}\"}, {\"role\": \"tool\", \"tool_call_id\": \"call_1\", \"content\": \" rainy \\n\"}, {\"role\": \"assistant\", \"content\": \"Let me also search.\", \"reasoning_content\": \"One more.\", \"tool_calls\": [{\"id\": \"call_2\", \"type\": \"function\", \"function\": {\"name\": \"search\", \"arguments\": \"{\\\"q\\\":\\\"Bergen rain \\\\u00abtoday\\\\u00bb\\\",\\\"n\\\":1e+16,\\\"f\\\":1e-05,\\\"z\\\":-0.0}\"}}]}, {\"role\": \"tool\", \"tool_call_id\": \"call_2\", \"content\": \"wet\"}]",
    "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Weather for a city\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}, \"days\": {\"type\": \"integer\", \"default\": 1.5e-07}}, \"required\": [\"city\"]}}}, {\"type\": \"function\", \"function\": {\"name\": \"search\", \"description\": \"Web search, \302\253quoted\302\273 \\\"text\\\"\", \"parameters\": {\"type\": \"object\", \"properties\": {\"q\": {\"type\": \"string\"}}}}}]", true, true,
    "<|im_start|>system\n"
    "# Tools\n"
    "\n"
    "You have access to the following functions:\n"
    "\n"
    "<tools>\n"
    "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Weather for a city\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}, \"days\": {\"type\": \"integer\", \"default\": 1.5e-07}}, \"required\": [\"city\"]}}}\n"
    "{\"type\": \"function\", \"function\": {\"name\": \"search\", \"description\": \"Web search, \302\253quoted\302\273 \\\"text\\\"\", \"parameters\": {\"type\": \"object\", \"properties\": {\"q\": {\"type\": \"string\"}}}}}\n"
    "</tools>\n"
    "\n"
    "If you choose to call a function ONLY reply in the following format with NO suffix:\n"
    "\n"
    "<tool_call>\n"
    "<function=example_function_name>\n"
    "<parameter=example_parameter_1>\n"
    "value_1\n"
    "</parameter>\n"
    "<parameter=example_parameter_2>\n"
    "This is the value for the second parameter\n"
    "that can span\n"
    "multiple lines\n"
    "</parameter>\n"
    "</function>\n"
    "</tool_call>\n"
    "\n"
    "<IMPORTANT>\n"
    "Reminder:\n"
    "- Function calls MUST follow the specified format: an inner <function=...></function> block must be nested within <tool_call></tool_call> XML tags\n"
    "- Required parameters MUST be specified\n"
    "- You may provide optional reasoning for your function call in natural language BEFORE the function call, but NOT after\n"
    "- If there is no function call available, answer the question like normal with your current knowledge and do not tell the user about function calls\n"
    "</IMPORTANT>\n"
    "\n"
    "You are helpful.<|im_end|>\n"
    "<|im_start|>user\n"
    "Weather in Oslo and Bergen?<|im_end|>\n"
    "<|im_start|>assistant\n"
    "<think>\n"
    "Need two calls.\n"
    "</think>\n"
    "\n"
    "<tool_call>\n"
    "<function=get_weather>\n"
    "<parameter=city>\n"
    "Oslo\n"
    "</parameter>\n"
    "<parameter=days>\n"
    "2\n"
    "</parameter>\n"
    "</function>\n"
    "</tool_call>\n"
    "<tool_call>\n"
    "<function=get_weather>\n"
    "<parameter=city>\n"
    "Bergen\n"
    "</parameter>\n"
    "<parameter=opts>\n"
    "{\"units\": \"C\", \"alerts\": [true, null, 0.1]}\n"
    "</parameter>\n"
    "</function>\n"
    "</tool_call><|im_end|>\n"
    "<|im_start|>user\n"
    "<tool_response>\n"
    "{\"temp\": 3}\n"
    "</tool_response>\n"
    "<tool_response>\n"
    "rainy\n"
    "</tool_response><|im_end|>\n"
    "<|im_start|>assistant\n"
    "<think>\n"
    "One more.\n"
    "</think>\n"
    "\n"
    "Let me also search.\n"
    "\n"
    "<tool_call>\n"
    "<function=search>\n"
    "<parameter=q>\n"
    "Bergen rain \302\253today\302\273\n"
    "</parameter>\n"
    "<parameter=n>\n"
    "1e+16\n"
    "</parameter>\n"
    "<parameter=f>\n"
    "1e-05\n"
    "</parameter>\n"
    "<parameter=z>\n"
    "-0.0\n"
    "</parameter>\n"
    "</function>\n"
    "</tool_call><|im_end|>\n"
    "<|im_start|>user\n"
    "<tool_response>\n"
    "wet\n"
    "</tool_response><|im_end|>\n"
    "<|im_start|>assistant\n"
    "<think>\n"
    ""},
    {"multi-step tool calls keep reasoning after the last query", TPL_Q35B,
    "[{\"role\": \"system\", \"content\": \"You are helpful.\\n\"}, {\"role\": \"user\", \"content\": \"Weather in Oslo and Bergen?\"}, {\"role\": \"assistant\", \"content\": \"\", \"reasoning_content\": \"\\nNeed two calls.\\n\", \"tool_calls\": [{\"id\": \"call_0\", \"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\":\\\"Oslo\\\",\\\"days\\\":2}\"}}, {\"id\": \"call_1\", \"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\":\\\"Bergen\\\",\\\"opts\\\":{\\\"units\\\":\\\"C\\\",\\\"alerts\\\":[true,null,0.1]}}\"}}]}, {\"role\": \"tool\", \"tool_call_id\": \"call_0\", \"content\": \"{\\\"temp\\\": 3}\"}, {\"role\": \"tool\", \"tool_call_id\": \"call_1\", \"content\": \" rainy \\n\"}, {\"role\": \"assistant\", \"content\": \"Let me also search.\", \"reasoning_content\": \"One more.\", \"tool_calls\": [{\"id\": \"call_2\", \"type\": \"function\", \"function\": {\"name\": \"search\", \"arguments\": \"{\\\"q\\\":\\\"Bergen rain \\\\u00abtoday\\\\u00bb\\\",\\\"n\\\":1e+16,\\\"f\\\":1e-05,\\\"z\\\":-0.0}\"}}]}, {\"role\": \"tool\", \"tool_call_id\": \"call_2\", \"content\": \"wet\"}]",
    "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Weather for a city\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}, \"days\": {\"type\": \"integer\", \"default\": 1.5e-07}}, \"required\": [\"city\"]}}}, {\"type\": \"function\", \"function\": {\"name\": \"search\", \"description\": \"Web search, \302\253quoted\302\273 \\\"text\\\"\", \"parameters\": {\"type\": \"object\", \"properties\": {\"q\": {\"type\": \"string\"}}}}}]", true, true,
    "<|im_start|>system\n"
    "# Tools\n"
    "\n"
    "You have access to the following functions:\n"
    "\n"
    "<tools>\n"
    "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Weather for a city\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}, \"days\": {\"type\": \"integer\", \"default\": 1.5e-07}}, \"required\": [\"city\"]}}}\n"
    "{\"type\": \"function\", \"function\": {\"name\": \"search\", \"description\": \"Web search, \302\253quoted\302\273 \\\"text\\\"\", \"parameters\": {\"type\": \"object\", \"properties\": {\"q\": {\"type\": \"string\"}}}}}\n"
    "</tools>\n"
    "\n"
    "If you choose to call a function ONLY reply in the following format with NO suffix:\n"
    "\n"
    "<tool_call>\n"
    "<function=example_function_name>\n"
    "<parameter=example_parameter_1>\n"
    "value_1\n"
    "</parameter>\n"
    "<parameter=example_parameter_2>\n"
    "This is the value for the second parameter\n"
    "that can span\n"
    "multiple lines\n"
    "</parameter>\n"
    "</function>\n"
    "</tool_call>\n"
    "\n"
    "<IMPORTANT>\n"
    "Reminder:\n"
    "- Function calls MUST follow the specified format: an inner <function=...></function> block must be nested within <tool_call></tool_call> XML tags\n"
    "- Required parameters MUST be specified\n"
    "- You may provide optional reasoning for your function call in natural language BEFORE the function call, but NOT after\n"
    "- If there is no function call available, answer the question like normal with your current knowledge and do not tell the user about function calls\n"
    "</IMPORTANT>\n"
    "\n"
    "You are helpful.<|im_end|>\n"
    "<|im_start|>user\n"
    "Weather in Oslo and Bergen?<|im_end|>\n"
    "<|im_start|>assistant\n"
    "<think>\n"
    "\n"
    "Need two calls.\n"
    "\n"
    "</think>\n"
    "\n"
    "<tool_call>\n"
    "<function=get_weather>\n"
    "<parameter=city>\n"
    "Oslo\n"
    "</parameter>\n"
    "<parameter=days>\n"
    "2\n"
    "</parameter>\n"
    "</function>\n"
    "</tool_call>\n"
    "<tool_call>\n"
    "<function=get_weather>\n"
    "<parameter=city>\n"
    "Bergen\n"
    "</parameter>\n"
    "<parameter=opts>\n"
    "{\"units\": \"C\", \"alerts\": [true, null, 0.1]}\n"
    "</parameter>\n"
    "</function>\n"
    "</tool_call><|im_end|>\n"
    "<|im_start|>user\n"
    "<tool_response>\n"
    "{\"temp\": 3}\n"
    "</tool_response>\n"
    "<tool_response>\n"
    "rainy\n"
    "</tool_response><|im_end|>\n"
    "<|im_start|>assistant\n"
    "<think>\n"
    "One more.\n"
    "</think>\n"
    "\n"
    "Let me also search.\n"
    "\n"
    "<tool_call>\n"
    "<function=search>\n"
    "<parameter=q>\n"
    "Bergen rain \302\253today\302\273\n"
    "</parameter>\n"
    "<parameter=n>\n"
    "1e+16\n"
    "</parameter>\n"
    "<parameter=f>\n"
    "1e-05\n"
    "</parameter>\n"
    "<parameter=z>\n"
    "-0.0\n"
    "</parameter>\n"
    "</function>\n"
    "</tool_call><|im_end|>\n"
    "<|im_start|>user\n"
    "<tool_response>\n"
    "wet\n"
    "</tool_response><|im_end|>\n"
    "<|im_start|>assistant\n"
    "<think>\n"
    ""},
    {"multi-step tool calls keep reasoning after the last query", TPL_Q35C,
    "[{\"role\": \"system\", \"content\": \"You are helpful.\\n\"}, {\"role\": \"user\", \"content\": \"Weather in Oslo and Bergen?\"}, {\"role\": \"assistant\", \"content\": \"\", \"reasoning_content\": \"\\nNeed two calls.\\n\", \"tool_calls\": [{\"id\": \"call_0\", \"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\":\\\"Oslo\\\",\\\"days\\\":2}\"}}, {\"id\": \"call_1\", \"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\":\\\"Bergen\\\",\\\"opts\\\":{\\\"units\\\":\\\"C\\\",\\\"alerts\\\":[true,null,0.1]}}\"}}]}, {\"role\": \"tool\", \"tool_call_id\": \"call_0\", \"content\": \"{\\\"temp\\\": 3}\"}, {\"role\": \"tool\", \"tool_call_id\": \"call_1\", \"content\": \" rainy \\n\"}, {\"role\": \"assistant\", \"content\": \"Let me also search.\", \"reasoning_content\": \"One more.\", \"tool_calls\": [{\"id\": \"call_2\", \"type\": \"function\", \"function\": {\"name\": \"search\", \"arguments\": \"{\\\"q\\\":\\\"Bergen rain \\\\u00abtoday\\\\u00bb\\\",\\\"n\\\":1e+16,\\\"f\\\":1e-05,\\\"z\\\":-0.0}\"}}]}, {\"role\": \"tool\", \"tool_call_id\": \"call_2\", \"content\": \"wet\"}]",
    "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Weather for a city\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}, \"days\": {\"type\": \"integer\", \"default\": 1.5e-07}}, \"required\": [\"city\"]}}}, {\"type\": \"function\", \"function\": {\"name\": \"search\", \"description\": \"Web search, \302\253quoted\302\273 \\\"text\\\"\", \"parameters\": {\"type\": \"object\", \"properties\": {\"q\": {\"type\": \"string\"}}}}}]", true, true,
    "<|im_start|>system\n"
    "# Tools\n"
    "\n"
    "You have access to the following functions:\n"
    "\n"
    "<tools>\n"
    "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Weather for a city\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}, \"days\": {\"type\": \"integer\", \"default\": 1.5e-07}}, \"required\": [\"city\"]}}}\n"
    "{\"type\": \"function\", \"function\": {\"name\": \"search\", \"description\": \"Web search, \302\253quoted\302\273 \\\"text\\\"\", \"parameters\": {\"type\": \"object\", \"properties\": {\"q\": {\"type\": \"string\"}}}}}\n"
    "</tools>\n"
    "\n"
    "If you choose to call a function ONLY reply in the following format with NO suffix:\n"
    "\n"
    "<tool_call>\n"
    "<function=example_function_name>\n"
    "<parameter=example_parameter_1>\n"
    "value_1\n"
    "</parameter>\n"
    "<parameter=example_parameter_2>\n"
    "This is the value for the second parameter\n"
    "that can span\n"
    "multiple lines\n"
    "</parameter>\n"
    "</function>\n"
    "</tool_call>\n"
    "\n"
    "<IMPORTANT>\n"
    "Reminder:\n"
    "- Function calls MUST follow the specified format: an inner <function=...></function> block must be nested within <tool_call></tool_call> XML tags\n"
    "- Required parameters MUST be specified\n"
    "- You may provide optional reasoning for your function call in natural language BEFORE the function call, but NOT after\n"
    "- If there is no function call available, answer the question like normal with your current knowledge and do not tell the user about function calls\n"
    "</IMPORTANT>\n"
    "\n"
    "You are helpful.<|im_end|>\n"
    "<|im_start|>user\n"
    "Weather in Oslo and Bergen?<|im_end|>\n"
    "<|im_start|>assistant\n"
    "<think>\n"
    "Need two calls.\n"
    "</think>\n"
    "\n"
    "<tool_call>\n"
    "<function=get_weather>\n"
    "<parameter=city>\n"
    "Oslo\n"
    "</parameter>\n"
    "<parameter=days>\n"
    "2\n"
    "</parameter>\n"
    "</function>\n"
    "</tool_call>\n"
    "<tool_call>\n"
    "<function=get_weather>\n"
    "<parameter=city>\n"
    "Bergen\n"
    "</parameter>\n"
    "<parameter=opts>\n"
    "{\"units\": \"C\", \"alerts\": [true, null, 0.1]}\n"
    "</parameter>\n"
    "</function>\n"
    "</tool_call><|im_end|>\n"
    "<|im_start|>user\n"
    "<tool_response>\n"
    "{\"temp\": 3}\n"
    "</tool_response>\n"
    "<tool_response>\n"
    "rainy\n"
    "</tool_response><|im_end|>\n"
    "<|im_start|>assistant\n"
    "<think>\n"
    "One more.\n"
    "</think>\n"
    "\n"
    "Let me also search.\n"
    "\n"
    "<tool_call>\n"
    "<function=search>\n"
    "<parameter=q>\n"
    "Bergen rain \302\253today\302\273\n"
    "</parameter>\n"
    "<parameter=n>\n"
    "1e+16\n"
    "</parameter>\n"
    "<parameter=f>\n"
    "1e-05\n"
    "</parameter>\n"
    "<parameter=z>\n"
    "-0.0\n"
    "</parameter>\n"
    "</function>\n"
    "</tool_call><|im_end|>\n"
    "<|im_start|>user\n"
    "<tool_response>\n"
    "wet\n"
    "</tool_response><|im_end|>\n"
    "<|im_start|>assistant\n"
    "<think>\n"
    ""},
    {"history: reasoning dropped before the last query, think split from content", TPL_Q3,
    "[{\"role\": \"user\", \"content\": \"2+2?\"}, {\"role\": \"assistant\", \"content\": \"<think>\\nadd\\n</think>\\n\\n4\"}, {\"role\": \"user\", \"content\": \"  and 3+3?  \"}, {\"role\": \"assistant\", \"content\": \"6\", \"reasoning_content\": \"\"}, {\"role\": \"user\", \"content\": \"<tool_response>\\nx\\n</tool_response>\"}, {\"role\": \"assistant\", \"content\": \"\\n\\nok\\n\", \"reasoning_content\": \"  r  \"}]",
    NULL, false, true,
    "<|im_start|>user\n"
    "2+2?<|im_end|>\n"
    "<|im_start|>assistant\n"
    "4<|im_end|>\n"
    "<|im_start|>user\n"
    "  and 3+3?  <|im_end|>\n"
    "<|im_start|>assistant\n"
    "6<|im_end|>\n"
    "<|im_start|>user\n"
    "<tool_response>\n"
    "x\n"
    "</tool_response><|im_end|>\n"
    "<|im_start|>assistant\n"
    "<think>\n"
    "  r  \n"
    "</think>\n"
    "\n"
    "ok\n"
    "<|im_end|>\n"
    ""},
    {"history: reasoning dropped before the last query, think split from content", TPL_Q35,
    "[{\"role\": \"user\", \"content\": \"2+2?\"}, {\"role\": \"assistant\", \"content\": \"<think>\\nadd\\n</think>\\n\\n4\"}, {\"role\": \"user\", \"content\": \"  and 3+3?  \"}, {\"role\": \"assistant\", \"content\": \"6\", \"reasoning_content\": \"\"}, {\"role\": \"user\", \"content\": \"<tool_response>\\nx\\n</tool_response>\"}, {\"role\": \"assistant\", \"content\": \"\\n\\nok\\n\", \"reasoning_content\": \"  r  \"}]",
    NULL, false, true,
    "<|im_start|>user\n"
    "2+2?<|im_end|>\n"
    "<|im_start|>assistant\n"
    "4<|im_end|>\n"
    "<|im_start|>user\n"
    "and 3+3?<|im_end|>\n"
    "<|im_start|>assistant\n"
    "<think>\n"
    "\n"
    "</think>\n"
    "\n"
    "6<|im_end|>\n"
    "<|im_start|>user\n"
    "<tool_response>\n"
    "x\n"
    "</tool_response><|im_end|>\n"
    "<|im_start|>assistant\n"
    "<think>\n"
    "r\n"
    "</think>\n"
    "\n"
    "ok<|im_end|>\n"
    ""},
    {"history: reasoning dropped before the last query, think split from content", TPL_Q35A,
    "[{\"role\": \"user\", \"content\": \"2+2?\"}, {\"role\": \"assistant\", \"content\": \"<think>\\nadd\\n</think>\\n\\n4\"}, {\"role\": \"user\", \"content\": \"  and 3+3?  \"}, {\"role\": \"assistant\", \"content\": \"6\", \"reasoning_content\": \"\"}, {\"role\": \"user\", \"content\": \"<tool_response>\\nx\\n</tool_response>\"}, {\"role\": \"assistant\", \"content\": \"\\n\\nok\\n\", \"reasoning_content\": \"  r  \"}]",
    NULL, false, true,
    "<|im_start|>user\n"
    "2+2?<|im_end|>\n"
    "<|im_start|>assistant\n"
    "4<|im_end|>\n"
    "<|im_start|>user\n"
    "and 3+3?<|im_end|>\n"
    "<|im_start|>assistant\n"
    "6<|im_end|>\n"
    "<|im_start|>user\n"
    "<tool_response>\n"
    "x\n"
    "</tool_response><|im_end|>\n"
    "<|im_start|>assistant\n"
    "<think>\n"
    "r\n"
    "</think>\n"
    "\n"
    "ok<|im_end|>\n"
    ""},
    {"history: reasoning dropped before the last query, think split from content", TPL_Q35B,
    "[{\"role\": \"user\", \"content\": \"2+2?\"}, {\"role\": \"assistant\", \"content\": \"<think>\\nadd\\n</think>\\n\\n4\"}, {\"role\": \"user\", \"content\": \"  and 3+3?  \"}, {\"role\": \"assistant\", \"content\": \"6\", \"reasoning_content\": \"\"}, {\"role\": \"user\", \"content\": \"<tool_response>\\nx\\n</tool_response>\"}, {\"role\": \"assistant\", \"content\": \"\\n\\nok\\n\", \"reasoning_content\": \"  r  \"}]",
    NULL, false, true,
    "<|im_start|>user\n"
    "2+2?<|im_end|>\n"
    "<|im_start|>assistant\n"
    "<think>\n"
    "add\n"
    "</think>\n"
    "\n"
    "4<|im_end|>\n"
    "<|im_start|>user\n"
    "and 3+3?<|im_end|>\n"
    "<|im_start|>assistant\n"
    "<think>\n"
    "\n"
    "</think>\n"
    "\n"
    "6<|im_end|>\n"
    "<|im_start|>user\n"
    "<tool_response>\n"
    "x\n"
    "</tool_response><|im_end|>\n"
    "<|im_start|>assistant\n"
    "<think>\n"
    "  r  \n"
    "</think>\n"
    "\n"
    "ok<|im_end|>\n"
    ""},
    {"history: reasoning dropped before the last query, think split from content", TPL_Q35C,
    "[{\"role\": \"user\", \"content\": \"2+2?\"}, {\"role\": \"assistant\", \"content\": \"<think>\\nadd\\n</think>\\n\\n4\"}, {\"role\": \"user\", \"content\": \"  and 3+3?  \"}, {\"role\": \"assistant\", \"content\": \"6\", \"reasoning_content\": \"\"}, {\"role\": \"user\", \"content\": \"<tool_response>\\nx\\n</tool_response>\"}, {\"role\": \"assistant\", \"content\": \"\\n\\nok\\n\", \"reasoning_content\": \"  r  \"}]",
    NULL, false, true,
    "<|im_start|>user\n"
    "2+2?<|im_end|>\n"
    "<|im_start|>assistant\n"
    "<think>\n"
    "add\n"
    "</think>\n"
    "\n"
    "4<|im_end|>\n"
    "<|im_start|>user\n"
    "and 3+3?<|im_end|>\n"
    "<|im_start|>assistant\n"
    "<think>\n"
    "\n"
    "</think>\n"
    "\n"
    "6<|im_end|>\n"
    "<|im_start|>user\n"
    "<tool_response>\n"
    "x\n"
    "</tool_response><|im_end|>\n"
    "<|im_start|>assistant\n"
    "<think>\n"
    "r\n"
    "</think>\n"
    "\n"
    "ok<|im_end|>\n"
    ""},
    {"thinking disabled, no system, trailing assistant prefill", TPL_Q3,
    "[{\"role\": \"user\", \"content\": \"Hi \360\237\231\202\"}, {\"role\": \"assistant\", \"content\": \"Hello\", \"reasoning_content\": \"greet\"}]",
    "[]", true, false,
    "<|im_start|>user\n"
    "Hi \360\237\231\202<|im_end|>\n"
    "<|im_start|>assistant\n"
    "<think>\n"
    "greet\n"
    "</think>\n"
    "\n"
    "Hello<|im_end|>\n"
    "<|im_start|>assistant\n"
    "<think>\n"
    "\n"
    "</think>\n"
    "\n"
    ""},
    {"thinking disabled, no system, trailing assistant prefill", TPL_Q35,
    "[{\"role\": \"user\", \"content\": \"Hi \360\237\231\202\"}, {\"role\": \"assistant\", \"content\": \"Hello\", \"reasoning_content\": \"greet\"}]",
    "[]", true, false,
    "<|im_start|>user\n"
    "Hi \360\237\231\202<|im_end|>\n"
    "<|im_start|>assistant\n"
    "<think>\n"
    "greet\n"
    "</think>\n"
    "\n"
    "Hello<|im_end|>\n"
    "<|im_start|>assistant\n"
    "<think>\n"
    "\n"
    "</think>\n"
    "\n"
    ""},
    {"tools with a system message and content before a call", TPL_Q3,
    "[{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", \"content\": \"Find it\"}, {\"role\": \"assistant\", \"content\": \"Searching now.\", \"tool_calls\": [{\"id\": \"call_0\", \"type\": \"function\", \"function\": {\"name\": \"search\", \"arguments\": \"{}\"}}]}, {\"role\": \"tool\", \"tool_call_id\": \"call_0\", \"content\": \"found\"}]",
    "[{\"type\": \"function\", \"function\": {\"name\": \"search\", \"description\": \"Web search, \302\253quoted\302\273 \\\"text\\\"\", \"parameters\": {\"type\": \"object\", \"properties\": {\"q\": {\"type\": \"string\"}}}}}]", true, true,
    "<|im_start|>system\n"
    "Be brief.\n"
    "\n"
    "# Tools\n"
    "\n"
    "You may call one or more functions to assist with the user query.\n"
    "\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n"
    "<tools>\n"
    "{\"type\": \"function\", \"function\": {\"name\": \"search\", \"description\": \"Web search, \302\253quoted\302\273 \\\"text\\\"\", \"parameters\": {\"type\": \"object\", \"properties\": {\"q\": {\"type\": \"string\"}}}}}\n"
    "</tools>\n"
    "\n"
    "For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n"
    "<tool_call>\n"
    "{\"name\": <function-name>, \"arguments\": <args-json-object>}\n"
    "</tool_call><|im_end|>\n"
    "<|im_start|>user\n"
    "Find it<|im_end|>\n"
    "<|im_start|>assistant\n"
    "Searching now.\n"
    "<tool_call>\n"
    "{\"name\": \"search\", \"arguments\": {}}\n"
    "</tool_call><|im_end|>\n"
    "<|im_start|>user\n"
    "<tool_response>\n"
    "found\n"
    "</tool_response><|im_end|>\n"
    "<|im_start|>assistant\n"
    ""},
    {"tools with a system message and content before a call", TPL_Q35,
    "[{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", \"content\": \"Find it\"}, {\"role\": \"assistant\", \"content\": \"Searching now.\", \"tool_calls\": [{\"id\": \"call_0\", \"type\": \"function\", \"function\": {\"name\": \"search\", \"arguments\": \"{}\"}}]}, {\"role\": \"tool\", \"tool_call_id\": \"call_0\", \"content\": \"found\"}]",
    "[{\"type\": \"function\", \"function\": {\"name\": \"search\", \"description\": \"Web search, \302\253quoted\302\273 \\\"text\\\"\", \"parameters\": {\"type\": \"object\", \"properties\": {\"q\": {\"type\": \"string\"}}}}}]", true, true,
    "<|im_start|>system\n"
    "# Tools\n"
    "\n"
    "You have access to the following functions:\n"
    "\n"
    "<tools>\n"
    "{\"type\": \"function\", \"function\": {\"name\": \"search\", \"description\": \"Web search, \302\253quoted\302\273 \\\"text\\\"\", \"parameters\": {\"type\": \"object\", \"properties\": {\"q\": {\"type\": \"string\"}}}}}\n"
    "</tools>\n"
    "\n"
    "If you choose to call a function ONLY reply in the following format with NO suffix:\n"
    "\n"
    "<tool_call>\n"
    "<function=example_function_name>\n"
    "<parameter=example_parameter_1>\n"
    "value_1\n"
    "</parameter>\n"
    "<parameter=example_parameter_2>\n"
    "This is the value for the second parameter\n"
    "that can span\n"
    "multiple lines\n"
    "</parameter>\n"
    "</function>\n"
    "</tool_call>\n"
    "\n"
    "<IMPORTANT>\n"
    "Reminder:\n"
    "- Function calls MUST follow the specified format: an inner <function=...></function> block must be nested within <tool_call></tool_call> XML tags\n"
    "- Required parameters MUST be specified\n"
    "- You may provide optional reasoning for your function call in natural language BEFORE the function call, but NOT after\n"
    "- If there is no function call available, answer the question like normal with your current knowledge and do not tell the user about function calls\n"
    "</IMPORTANT>\n"
    "\n"
    "Be brief.<|im_end|>\n"
    "<|im_start|>user\n"
    "Find it<|im_end|>\n"
    "<|im_start|>assistant\n"
    "<think>\n"
    "\n"
    "</think>\n"
    "\n"
    "Searching now.\n"
    "\n"
    "<tool_call>\n"
    "<function=search>\n"
    "</function>\n"
    "</tool_call><|im_end|>\n"
    "<|im_start|>user\n"
    "<tool_response>\n"
    "found\n"
    "</tool_response><|im_end|>\n"
    "<|im_start|>assistant\n"
    "<think>\n"
    ""},
    {"system message later in the conversation (Qwen3 renders it as a turn)", TPL_Q3,
    "[{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"system\", \"content\": \"b\"}, {\"role\": \"user\", \"content\": \"c\"}]",
    NULL, true, true,
    "<|im_start|>user\n"
    "a<|im_end|>\n"
    "<|im_start|>system\n"
    "b<|im_end|>\n"
    "<|im_start|>user\n"
    "c<|im_end|>\n"
    "<|im_start|>assistant\n"
    ""},
};

/* ---------------------------------------------------------------- helpers */

static char *str_replace(const char *src, const char *old, const char *new_) {
  const char *at = strstr(src, old);
  assert_non_null(at);
  assert_null(strstr(at + 1, old)); /* exactly once */
  size_t a = (size_t)(at - src), lo = strlen(old), ln = strlen(new_), n = strlen(src);
  char *r = malloc(n - lo + ln + 1);
  assert_non_null(r);
  memcpy(r, src, a);
  memcpy(r + a, new_, ln);
  memcpy(r + a + ln, at + lo, n - a - lo + 1);
  return r;
}

/* The Qwen3 template as shipped in tokenizer_config.json. */
static char *qwen3_template(void) {
  json_t *cfg = tu_json("hf-tokenizer/tokenizer_config.json");
  const char *t = json_string_value(json_object_get(cfg, "chat_template"));
  assert_non_null(t);
  char *r = strdup(t);
  json_decref(cfg);
  return r;
}

static const char q35_cond_and[] = "{%- if loop.index0 > ns.last_query_index  and reasoning_content %}";

static char *template_of(tpl_id_t id) {
  switch (id) {
    case TPL_Q3: return qwen3_template();
    case TPL_Q35A: return strdup(q35_variant_and);
    case TPL_Q35: /* official Qwen3.5: the think block for every turn after the last query */
      return str_replace(q35_variant_and, q35_cond_and, "{%- if loop.index0 > ns.last_query_index %}");
    case TPL_Q35C:
      return str_replace(q35_variant_and, q35_cond_and,
                         "{%- if loop.index0 > ns.last_query_index or reasoning_content %}");
    case TPL_Q35B: { /* older variant: every assistant turn gets a (untrimmed) think block */
      const char *from = strstr(q35_variant_and, "        {%- if message.reasoning_content is string %}");
      const char *to = strstr(q35_variant_and, "        {%- if message.tool_calls and");
      assert_non_null(from);
      assert_non_null(to);
      const char *blk =
          "        {%- if message.reasoning_content is string %}\n"
          "            {%- set reasoning_content = message.reasoning_content %}\n"
          "        {%- elif '</think>' in content %}\n"
          "            {%- set reasoning_content = content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}\n"
          "            {%- set content = content.split('</think>')[-1].lstrip('\\n') %}\n"
          "        {%- endif %}\n"
          "        {{- '<|im_start|>' + message.role + '\\n<think>\\n' + reasoning_content + '\\n</think>\\n\\n' + content }}\n";
      size_t a = (size_t)(from - q35_variant_and), nb = strlen(blk), rest = strlen(to);
      char *r = malloc(a + nb + rest + 2);
      assert_non_null(r);
      memcpy(r, q35_variant_and, a);
      memcpy(r + a, blk, nb);
      memcpy(r + a + nb, to, rest);
      r[a + nb + rest] = '\n';
      r[a + nb + rest + 1] = 0;
      assert_int_equal(strlen(r), 7477); /* the size of that variant's file */
      return r;
    }
    default: fail(); return NULL;
  }
}

static chat_family_t detect_ok(tpl_id_t id) {
  char *t = template_of(id);
  chat_family_t f;
  gt_err_t err = {0};
  int rc = chat_template_detect(t, &f, &err);
  if (rc) fail_msg("template %d: %s", (int)id, err.msg);
  free(t);
  return f;
}

/* Renders OpenAI-style messages JSON; returns the status, the text in *out. */
static int render_json(const chat_family_t *f, const char *messages, const char *tools, bool agp,
                       bool think, char **out, gt_err_t *err) {
  json_error_t je;
  json_t *m = json_loads(messages, 0, &je);
  if (!m) fail_msg("bad test JSON: %s", je.text);
  chat_msgs_t msgs;
  int rc = chat_msgs_from_json(m, &msgs, err);
  json_decref(m);
  *out = NULL;
  if (rc) return rc;
  chat_render_opts_t o = {tools, agp, think};
  size_t n = 0;
  rc = chat_render(f, msgs.msgs, msgs.n, &o, out, &n, err);
  if (rc == GT_OK) assert_int_equal(n, strlen(*out));
  chat_msgs_free(&msgs);
  return rc;
}

static void expect_same(const char *what, const char *got, const char *want) {
  if (strcmp(got, want) == 0) return;
  size_t i = 0;
  while (got[i] && got[i] == want[i]) i++;
  fail_msg("%s: differs at byte %zu\n got  ...%.80s\n want ...%.80s", what, i, got + (i > 20 ? i - 20 : 0),
           want + (i > 20 ? i - 20 : 0));
}

/* ---------------------------------------------------------------- tests */

static void test_golden_qwen3_cases(void **state) {
  (void)state;
  chat_family_t f = detect_ok(TPL_Q3);
  assert_int_equal(f.id, CHAT_FAMILY_QWEN3);
  json_t *cases = tu_json("qwen3-chat-template-cases.json");
  assert_true(json_array_size(cases) >= 6);
  size_t i;
  json_t *c;
  json_array_foreach(cases, i, c) {
    chat_msgs_t msgs;
    gt_err_t err = {0};
    assert_int_equal(chat_msgs_from_json(json_object_get(c, "messages"), &msgs, &err), GT_OK);
    json_t *tools = json_object_get(c, "tools");
    char *tj = tools ? json_dumps(tools, JSON_COMPACT) : NULL;
    json_t *think = json_object_get(c, "enable_thinking");
    chat_render_opts_t o = {tj, json_is_true(json_object_get(c, "add_generation_prompt")),
                            !json_is_false(think)};
    char *out;
    size_t n;
    int rc = chat_render(&f, msgs.msgs, msgs.n, &o, &out, &n, &err);
    if (rc) fail_msg("case %zu: %s", i, err.msg);
    const char *want = json_string_value(json_object_get(c, "rendered"));
    char what[64];
    snprintf(what, sizeof what, "golden case %zu", i);
    expect_same(what, out, want);
    assert_int_equal(n, json_string_length(json_object_get(c, "rendered")));
    assert_false(chat_prompt_opens_reasoning(&f, &o));
    free(out);
    free(tj);
    chat_msgs_free(&msgs);
  }
  json_decref(cases);
}

static void test_jinja_reference_cases(void **state) {
  (void)state;
  chat_family_t fam[TPL_COUNT];
  for (int t = 0; t < TPL_COUNT; t++) fam[t] = detect_ok((tpl_id_t)t);
  for (size_t i = 0; i < sizeof jinja_cases / sizeof *jinja_cases; i++) {
    const render_case_t *c = &jinja_cases[i];
    char *out;
    gt_err_t err = {0};
    int rc = render_json(&fam[c->tpl], c->messages, c->tools, c->add_generation_prompt,
                         c->enable_thinking, &out, &err);
    if (rc) fail_msg("%s (%s): %s", c->name, chat_family_name(&fam[c->tpl]), err.msg);
    char what[200];
    snprintf(what, sizeof what, "%s (%s)", c->name, chat_family_name(&fam[c->tpl]));
    expect_same(what, out, c->want);
    free(out);
  }
}

static uint64_t rd_u64(const unsigned char *p) {
  uint64_t v;
  memcpy(&v, p, 8); /* GGUF is little-endian, like every host gantry runs on */
  return v;
}
static uint32_t rd_u32(const unsigned char *p) {
  uint32_t v;
  memcpy(&v, p, 4);
  return v;
}

/* Reads the string value of `key` from a GGUF file (test-only reader; the engine's GGUF
 * library is not a dependency of the chat layer). NULL if absent. */
static char *gguf_string(const char *rel, const char *key) {
  size_t len;
  unsigned char *b = tu_read_file(tu_golden(rel), &len);
  assert_non_null(b);
  size_t at = 0;
#define NEED(n) assert_true(at + (n) <= len)
#define U64() (NEED(8), at += 8, rd_u64(b + at - 8))
#define U32() (NEED(4), at += 4, (uint32_t)rd_u32(b + at - 4))
  assert_memory_equal(b, "GGUF", 4);
  at = 4;
  (void)U32();
  (void)U64();
  uint64_t nkv = U64();
  char *res = NULL;
  static const size_t fixed[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
  for (uint64_t k = 0; k < nkv && !res; k++) {
    uint64_t kl = U64();
    NEED(kl);
    bool match = kl == strlen(key) && memcmp(b + at, key, kl) == 0;
    at += kl;
    uint32_t t = U32();
    if (t == 8) {
      uint64_t sl = U64();
      NEED(sl);
      if (match) {
        res = malloc(sl + 1);
        memcpy(res, b + at, sl);
        res[sl] = 0;
      }
      at += sl;
    } else if (t == 9) {
      uint32_t at_ = U32();
      uint64_t n = U64();
      for (uint64_t i = 0; i < n; i++) {
        if (at_ == 8) {
          uint64_t sl = U64();
          NEED(sl);
          at += sl;
        } else {
          assert_true(at_ < 13 && fixed[at_]);
          at += fixed[at_];
        }
      }
    } else {
      assert_true(t < 13 && fixed[t]);
      at += fixed[t];
    }
  }
#undef NEED
#undef U64
#undef U32
  free(b);
  return res;
}

static void test_fixture_templates(void **state) {
  (void)state;
  /* Every model fixture carries the Qwen3 template (qwen35-tiny included: its tokenizer was
   * made from Qwen3's), byte-identical to tokenizer_config.json's. */
  static const char *const files[] = {"qwen3-vocab.gguf", "qwen3-tiny.bf16.gguf", "qwen35-tiny.bf16.gguf",
                                      "demo/gantry-demo-code-22m.Q4_K_M.gguf"};
  char *ref = qwen3_template();
  for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
    char *t = gguf_string(files[i], "tokenizer.chat_template");
    if (!t) fail_msg("%s has no tokenizer.chat_template", files[i]);
    assert_string_equal(t, ref);
    chat_family_t f;
    gt_err_t err = {0};
    if (chat_template_detect(t, &f, &err)) fail_msg("%s: %s", files[i], err.msg);
    assert_int_equal(f.id, CHAT_FAMILY_QWEN3);
    assert_string_equal(chat_family_name(&f), "qwen3");
    free(t);
  }
  free(ref);
}

static void test_detect_qwen35_variants(void **state) {
  (void)state;
  static const struct { tpl_id_t t; chat_history_rule_t rule; const char *name; } want[] = {
      {TPL_Q35, CHAT_HIST_AFTER_QUERY, "qwen3.5"},
      {TPL_Q35A, CHAT_HIST_AFTER_QUERY_NONEMPTY, "qwen3.5/keep-nonempty-think"},
      {TPL_Q35B, CHAT_HIST_ALWAYS, "qwen3.5/always-think"},
      {TPL_Q35C, CHAT_HIST_AFTER_QUERY_OR_NONEMPTY, "qwen3.5/keep-any-think"},
  };
  for (size_t i = 0; i < 4; i++) {
    chat_family_t f = detect_ok(want[i].t);
    assert_int_equal(f.id, CHAT_FAMILY_QWEN35);
    assert_int_equal(f.history, want[i].rule);
    assert_string_equal(chat_family_name(&f), want[i].name);
    chat_render_opts_t o = {NULL, true, true};
    assert_true(chat_prompt_opens_reasoning(&f, &o));
    o.enable_thinking = false;
    assert_false(chat_prompt_opens_reasoning(&f, &o));
  }
}

static void expect_unsupported(const char *tpl, const char *msg_part) {
  chat_family_t f;
  gt_err_t err = {0};
  int rc = chat_template_detect(tpl, &f, &err);
  if (rc != GT_EUNSUPPORTED) fail_msg("expected EUNSUPPORTED, got %d (%s)", rc, err.msg);
  if (msg_part && !strstr(err.msg, msg_part)) fail_msg("message '%s' lacks '%s'", err.msg, msg_part);
}

static void test_detect_rejects(void **state) {
  (void)state;
  chat_family_t f;
  gt_err_t err = {0};
  assert_int_equal(chat_template_detect(NULL, &f, &err), GT_ENOTFOUND);
  assert_non_null(strstr(err.msg, "no chat template"));
  assert_int_equal(chat_template_detect("", &f, &err), GT_ENOTFOUND);
  /* Qwen2.5-style ChatML without the Qwen3 reasoning logic. */
  expect_unsupported(
      "{%- for message in messages %}{{- '<|im_start|>' + message.role + '\\n' + message.content + "
      "'<|im_end|>' + '\\n' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
      "{%- endif %}", "not the Qwen3 template");
  char *q3 = qwen3_template();
  /* Each behaviour matters: an edited expression is not the template we render. */
  char *t = str_replace(q3, "reasoning_content.strip('\\n')", "reasoning_content");
  expect_unsupported(t, "missing");
  free(t);
  t = str_replace(q3, "{{- '<think>\\n\\n</think>\\n\\n' }}", "{{- '<think>\\n</think>\\n' }}");
  expect_unsupported(t, NULL);
  free(t);
  /* Re-indented (whitespace inside tags changed): still recognised. */
  t = str_replace(q3, "{%- if message.tool_calls %}", "{%-   if message.tool_calls   %}");
  assert_int_equal(chat_template_detect(t, &f, &err), GT_OK);
  free(t);
  free(q3);
  char *q35 = template_of(TPL_Q35);
  t = str_replace(q35, "{%- if loop.index0 > ns.last_query_index %}",
                  "{%- if preserve_thinking or loop.index0 > ns.last_query_index %}");
  expect_unsupported(t, "preserve_thinking");
  free(t);
  t = str_replace(q35, "{%- if loop.index0 > ns.last_query_index %}", "{%- if loop.index0 > 2 %}");
  expect_unsupported(t, "unknown rule");
  free(t);
  t = str_replace(q35, "<parameter=' + args_name + '>\\n'", "<param=' + args_name + '>'");
  expect_unsupported(t, "Qwen3.5");
  free(t);
  free(q35);
}

static int render_err(const chat_family_t *f, const char *messages, const char *tools, const char *part) {
  char *out;
  gt_err_t err = {0};
  int rc = render_json(f, messages, tools, true, true, &out, &err);
  if (rc == GT_OK) fail_msg("rendered invalid input %s", messages);
  assert_null(out);
  if (part && !strstr(err.msg, part)) fail_msg("message '%s' lacks '%s'", err.msg, part);
  return rc;
}

/* continue_final (vLLM's continue_final_message): the rendering without the generation prompt,
 * cut right after the final assistant message's content, which the output continues. */
static void test_continue_final(void **state) {
  (void)state;
  chat_family_t q3 = detect_ok(TPL_Q3), q35 = detect_ok(TPL_Q35);
  const chat_family_t *both[] = {&q3, &q35};
  for (int k = 0; k < 2; k++) {
    json_t *m = json_loads("[{\"role\": \"user\", \"content\": \"Write a poem\"},"
                           " {\"role\": \"assistant\", \"content\": \"Roses are red, \"}]", 0, NULL);
    chat_msgs_t msgs;
    gt_err_t err = {0};
    assert_int_equal(chat_msgs_from_json(m, &msgs, &err), GT_OK);
    chat_render_opts_t o = {.add_generation_prompt = false, .enable_thinking = true, .continue_final = true};
    char *out = NULL, *full = NULL;
    size_t n = 0;
    assert_int_equal(chat_render(both[k], msgs.msgs, msgs.n, &o, &out, &n, &err), GT_OK);
    const size_t l = strlen(out);
    assert_int_equal(n, l);
    assert_true(l > 14 && !strcmp(out + l - 14, "Roses are red,"));
    o.continue_final = false;
    assert_int_equal(chat_render(both[k], msgs.msgs, msgs.n, &o, &full, NULL, &err), GT_OK);
    assert_int_equal(strncmp(full, out, l), 0); /* a prefix of the whole rendering */
    assert_non_null(strstr(full + l, "<|im_end|>"));
    free(out);
    free(full);
    chat_msgs_free(&msgs);
    json_decref(m);
    /* the last message must be an assistant's with content */
    assert_int_equal(chat_msgs_from_json(m = json_loads("[{\"role\": \"user\", \"content\": \"x\"}]", 0, NULL), &msgs, &err), GT_OK);
    o.continue_final = true;
    assert_int_equal(chat_render(both[k], msgs.msgs, msgs.n, &o, &out, NULL, &err), GT_EINVAL);
    assert_non_null(strstr(err.msg, "continue_final_message"));
    chat_msgs_free(&msgs);
    json_decref(m);
  }
}

static void test_input_errors(void **state) {
  (void)state;
  chat_family_t q3 = detect_ok(TPL_Q3), q35 = detect_ok(TPL_Q35);
  const chat_family_t *both[] = {&q3, &q35};
  for (int k = 0; k < 2; k++) {
    const chat_family_t *f = both[k];
    assert_int_equal(render_err(f, "[]", NULL, "no messages"), GT_EINVAL);
    assert_int_equal(render_err(f, "[{\"role\": \"robot\", \"content\": \"x\"}]", NULL, "unknown message role"), GT_EINVAL);
    assert_int_equal(render_err(f, "[{\"content\": \"x\"}]", NULL, "missing role"), GT_EINVAL);
    assert_int_equal(render_err(f, "[{\"role\": \"user\", \"content\": \"x\"}, {\"role\": \"tool\", \"content\": \"r\"}]",
                                NULL, "without a preceding assistant tool call"), GT_EINVAL);
    assert_int_equal(render_err(f, "[{\"role\": \"tool\", \"content\": \"r\"}]", NULL, "messages[0]"), GT_EINVAL);
    const char *call = "[{\"role\": \"user\", \"content\": \"x\"}, {\"role\": \"assistant\", \"tool_calls\": "
                       "[{\"id\": \"c1\", \"function\": {\"name\": \"f\", \"arguments\": %s}}]}%s]";
    char buf[512];
    snprintf(buf, sizeof buf, call, "\"{\\\"a\\\": }\"", "");
    assert_int_equal(render_err(f, buf, NULL, "arguments: invalid JSON"), GT_EINVAL);
    snprintf(buf, sizeof buf, call, "\"[1, 2]\"", "");
    assert_int_equal(render_err(f, buf, NULL, "must be a JSON object"), GT_EINVAL);
    snprintf(buf, sizeof buf, call, "\"{\\\"a\\\": NaN}\"", "");
    assert_int_equal(render_err(f, buf, NULL, "invalid JSON"), GT_EINVAL);
    snprintf(buf, sizeof buf, call, "\"{}\"", ", {\"role\": \"tool\", \"tool_call_id\": \"c2\", \"content\": \"r\"}");
    assert_int_equal(render_err(f, buf, NULL, "matches no tool call"), GT_EINVAL);
    snprintf(buf, sizeof buf, call, "\"{}\"",
             ", {\"role\": \"tool\", \"content\": \"r\"}, {\"role\": \"tool\", \"content\": \"s\"}");
    assert_int_equal(render_err(f, buf, NULL, "more tool results"), GT_EINVAL);
    snprintf(buf, sizeof buf, call, "\"{}\"", ", {\"role\": \"tool\", \"tool_call_id\": \"c1\", \"content\": \"r\"}");
    char *out;
    gt_err_t err = {0};
    assert_int_equal(render_json(f, buf, NULL, true, true, &out, &err), GT_OK);
    free(out);
    snprintf(buf, sizeof buf, call, "42", "");
    assert_int_equal(render_err(f, buf, NULL, "arguments must be"), GT_EINVAL);
    assert_int_equal(render_err(f, "[{\"role\": \"user\", \"content\": \"x\"}, {\"role\": \"assistant\", \"tool_calls\": "
                                "[{\"function\": {\"name\": \"a\\\"b\", \"arguments\": \"{}\"}}]}]", NULL, "function name"),
                     GT_EINVAL);
    assert_int_equal(render_err(f, "[{\"role\": \"user\", \"content\": \"x\"}, {\"role\": \"assistant\", \"tool_calls\": "
                                "[{\"function\": {\"arguments\": \"{}\"}}]}]", NULL, "name missing"), GT_EINVAL);
    assert_int_equal(render_err(f, "[{\"role\": \"user\", \"content\": [{\"type\": \"image_url\", \"image_url\": {}}]}]",
                                NULL, "not supported"), GT_EUNSUPPORTED);
    assert_int_equal(render_err(f, "[{\"role\": \"user\", \"content\": 5}]", NULL, "content"), GT_EINVAL);
    assert_int_equal(render_err(f, "[{\"role\": \"user\", \"content\": \"x\"}]", "{\"a\": 1}", "tools must be a JSON array"),
                     GT_EINVAL);
    assert_int_equal(render_err(f, "[{\"role\": \"user\", \"content\": \"x\"}]", "[1]", "tools[0]"), GT_EINVAL);
    assert_int_equal(render_err(f, "[{\"role\": \"user\", \"content\": \"x\"}]", "[{]", "tools:"), GT_EINVAL);
    assert_int_equal(render_err(f, "[{\"role\": \"user\", \"content\": \"x\", \"reasoning_content\": \"r\"}]", NULL,
                                "only assistant"), GT_EINVAL);
  }
  /* Qwen3.5 refuses what its template refuses. */
  assert_int_equal(render_err(&q35, "[{\"role\": \"user\", \"content\": \"x\"}, {\"role\": \"system\", \"content\": \"s\"}]",
                              NULL, "system message must be at the beginning"), GT_EINVAL);
  assert_int_equal(render_err(&q35, "[{\"role\": \"system\", \"content\": \"s\"}]", NULL, "no user query"), GT_EINVAL);
  assert_int_equal(render_err(&q35, "[{\"role\": \"user\", \"content\": \"x\"}, {\"role\": \"assistant\", \"tool_calls\": "
                              "[{\"function\": {\"name\": \"f\", \"arguments\": \"{\\\"a>b\\\": 1}\"}}]}]", NULL,
                              "argument name"), GT_EINVAL);
  /* Invalid UTF-8 in a structured message. */
  chat_msg_t m = {.role = CHAT_ROLE_USER, .content = "bad \xff"};
  char *out;
  gt_err_t err = {0};
  assert_int_equal(chat_render(&q3, &m, 1, NULL, &out, NULL, &err), GT_EINVAL);
  assert_non_null(strstr(err.msg, "UTF-8"));
  m.content = "ok";
  m.role = (chat_role_t)9;
  assert_int_equal(chat_render(&q3, &m, 1, NULL, &out, NULL, &err), GT_EINVAL);
  chat_family_t none = {0};
  assert_int_equal(chat_render(&none, &m, 1, NULL, &out, NULL, &err), GT_EINVAL);
  chat_role_t r;
  assert_int_equal(chat_role_parse("developer", &r, &err), GT_EINVAL);
  assert_int_equal(chat_role_parse("tool", &r, &err), GT_OK);
  assert_int_equal(r, CHAT_ROLE_TOOL);
}

static void test_structured_api(void **state) {
  (void)state;
  /* Messages built in C: NULL arguments mean {}, NULL content renders empty. */
  chat_family_t q3 = detect_ok(TPL_Q3);
  chat_tool_call_t calls[2] = {{"c1", "get_weather", "{\"city\":\"Oslo\",\"n\":1.50}"}, {NULL, "ping", NULL}};
  chat_msg_t m[4] = {
      {.role = CHAT_ROLE_USER, .content = "Weather?"},
      {.role = CHAT_ROLE_ASSISTANT, .content = NULL, .tool_calls = calls, .n_tool_calls = 2},
      {.role = CHAT_ROLE_TOOL, .content = "3C", .tool_call_id = "c1"},
      {.role = CHAT_ROLE_TOOL, .content = "pong"},
  };
  chat_render_opts_t o = {NULL, false, true};
  char *out;
  size_t n;
  gt_err_t err = {0};
  assert_int_equal(chat_render(&q3, m, 4, &o, &out, &n, &err), GT_OK);
  expect_same("structured", out,
              "<|im_start|>user\nWeather?<|im_end|>\n<|im_start|>assistant\n<tool_call>\n{\"name\": "
              "\"get_weather\", \"arguments\": {\"city\": \"Oslo\", \"n\": 1.5}}\n</tool_call>\n<tool_call>\n"
              "{\"name\": \"ping\", \"arguments\": {}}\n</tool_call><|im_end|>\n<|im_start|>user\n"
              "<tool_response>\n3C\n</tool_response>\n<tool_response>\npong\n</tool_response><|im_end|>\n");
  free(out);
}

static void test_pydump(void **state) {
  (void)state;
  /* Expected values are Python 3's json.dumps(json.loads(x), ensure_ascii=False). */
  static const char *const cases[][2] = {
      {"{\"b\":1,\"a\":[true,false,null]}", "{\"b\": 1, \"a\": [true, false, null]}"},
      {"[1e16, 1e15, 0.0001, 0.00001, 1.5, 0.1, -0.0, 2.5e-7, 123456789.125, 1E400, -1e400, 1e22, 5e-324]",
       "[1e+16, 1000000000000000.0, 0.0001, 1e-05, 1.5, 0.1, -0.0, 2.5e-07, 123456789.125, Infinity, "
       "-Infinity, 1e+22, 5e-324]"},
      {"[0.30000000000000004, 100.0, 1e2, 12345678901234567890, -0, 1.7976931348623157e308]",
       "[0.30000000000000004, 100.0, 100.0, 12345678901234567890, 0, 1.7976931348623157e+308]"},
      {"\"\\u00e9\\ud83d\\ude42\\/\\b\\f\\n\\r\\t\\u0001\\u007f\\\"\\\\\"", "\"é🙂/\\b\\f\\n\\r\\t\\u0001\x7f\\\"\\\\\""},
      {"{\"k\": 1, \"j\": 2, \"k\": 3}", "{\"k\": 3, \"j\": 2}"},
      {" {} ", "{}"},
      {"[[], {}, [{}]]", "[[], {}, [{}]]"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    char *out;
    size_t n;
    gt_err_t err = {0};
    if (chat_json_pydump(cases[i][0], strlen(cases[i][0]), &out, &n, &err)) fail_msg("%s: %s", cases[i][0], err.msg);
    expect_same(cases[i][0], out, cases[i][1]);
    free(out);
  }
  static const char *const bad[] = {"", "{", "[1,]", "{\"a\" 1}", "01", "1.", "NaN", "\"\\ud800\"", "\"a\nb\"",
                                    "\"\xff\"", "[1] 2", "tru", "{\"a\":1,}"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    char *out;
    gt_err_t err = {0};
    assert_int_equal(chat_json_pydump(bad[i], strlen(bad[i]), &out, NULL, &err), GT_EINVAL);
    assert_null(out);
    assert_non_null(strstr(err.msg, "invalid JSON"));
  }
  /* Deep nesting is refused, not a stack overflow. */
  char deep[600];
  memset(deep, '[', 300);
  memset(deep + 300, ']', 300);
  char *out;
  gt_err_t err = {0};
  assert_int_equal(chat_json_pydump(deep, 600, &out, NULL, &err), GT_EINVAL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_golden_qwen3_cases),  cmocka_unit_test(test_jinja_reference_cases),
      cmocka_unit_test(test_fixture_templates),   cmocka_unit_test(test_detect_qwen35_variants),
      cmocka_unit_test(test_detect_rejects),      cmocka_unit_test(test_input_errors),
      cmocka_unit_test(test_continue_final),
      cmocka_unit_test(test_structured_api),      cmocka_unit_test(test_pydump),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
