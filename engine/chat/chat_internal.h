/* engine/chat/chat_internal.h — what the files of the chat module share (not a public header).
 *   chat.c        validation of messages and the Qwen3 / Qwen3.5 renderers (chat_render)
 *   chat_detect.c which template a model has (chat_template_detect) and its literal texts
 *   chat_json.c   JSON tree parser and Python json.dumps / str() serialisation (tojson)
 *   chat_msgs.c   OpenAI-style messages from JSON (chat_msgs_from_json, chat_role_parse)
 * Names shared between these files carry the chat__ prefix. */
#ifndef GANTRY_ENGINE_CHAT_INTERNAL_H
#define GANTRY_ENGINE_CHAT_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/strbuf.h"
#include "common/utf8.h"
#include "engine/chat/chat.h"

/* ---------------------------------------------------------------- JSON tree (chat_json.c) */

typedef enum { J_NULL, J_TRUE, J_FALSE, J_INT, J_FLOAT, J_STR, J_ARR, J_OBJ } jtype_t;

typedef struct jnode {
  jtype_t t;
  char *s;          /* J_STR: decoded bytes; J_INT: digits (with '-'); object keys below */
  size_t len;
  double d;         /* J_FLOAT */
  struct jnode **kids;
  char **keys;      /* J_OBJ: decoded keys */
  size_t *klens;
  size_t n, cap;
} jnode_t;

/* Parses strict JSON s[0..n) into a tree (*out, free with chat__jfree). Invalid JSON ->
 * GT_EINVAL with the byte offset; out of memory -> GT_ENOMEM. */
int chat__jparse(const char *s, size_t n, jnode_t **out, gt_err_t *err);
/* Frees j and everything below it; NULL is a no-op. */
void chat__jfree(jnode_t *j);
/* Python json.dumps(x, ensure_ascii=False). */
void chat__py_dump(gt_sb_t *b, const jnode_t *j);
/* Python str(x) (Jinja |string) for a scalar; containers use chat__py_dump. */
void chat__py_str(gt_sb_t *b, const jnode_t *j);

/* ---------------------------------------------------------------- template texts (chat_detect.c) */

/* The tool-list preambles the renderer emits, unescaped; defined in chat_detect.c next to the
 * escaped forms the detector requires in the template source. */
extern const char chat__q3_tools_head[];
extern const char chat__q3_tools_tail[];
extern const char chat__q35_tools_head[];
extern const char chat__q35_tools_tail[];

#endif
