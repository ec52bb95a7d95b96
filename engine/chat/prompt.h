/* engine/chat/prompt.h — request input -> token ids, shared by the CLI and the gRPC server.
 *
 * Chat input is rendered with the model's chat template family (engine/chat/chat.h, detected from
 * tokenizer.chat_template). Special-token text ("<|im_end|>", "<think>", ...) inside message
 * content is plain text unless the caller asks otherwise (parse_special): the template's own
 * markup is encoded with TOK_SPECIAL, user-supplied content without it. When no content holds
 * special-token text the whole rendering is encoded in one TOK_SPECIAL pass (identical ids to
 * the reference tokenizer). Otherwise each such content string is replaced by a unique sentinel
 * before rendering; the rendering is split at the sentinels, the template pieces are encoded
 * with TOK_SPECIAL and the content pieces as plain text.
 * Scope of the plain-text rule: the content of system, user and tool messages (a user message
 * that is a whole "<tool_response>...</tool_response>" block is left to the template, which
 * treats it as a tool result). Assistant turns (the template parses their <think> blocks), tool
 * definitions and tool-call arguments are rendered as markup. */
#ifndef GANTRY_ENGINE_PROMPT_H
#define GANTRY_ENGINE_PROMPT_H

#include <stddef.h>
#include <stdint.h>

#include "engine/chat/chat.h"
#include "format/gguf.h"
#include "format/tokenizer.h"

/* The chat family of g's tokenizer.chat_template. No template -> GT_ENOTFOUND, an unknown one
 * -> GT_EUNSUPPORTED (messages name the problem). */
int prompt_chat_family(const gguf_t *g, chat_family_t *out, gt_err_t *err);

/* Renders msgs with fam and encodes them (see above). *ids malloc'd (caller frees), *n ids.
 * Bad messages -> GT_EINVAL from chat_render. */
int prompt_encode_chat(const tok_t *tok, const chat_family_t *fam, const chat_msg_t *msgs, size_t n_msgs,
                       const chat_render_opts_t *opts, int parse_special, int32_t **ids, size_t *n,
                       gt_err_t *err);

/* Raw text: TOK_SPECIAL when parse_special, else plain. *ids malloc'd (caller frees). */
int prompt_encode_text(const tok_t *tok, const char *text, size_t len, int parse_special, int32_t **ids,
                       size_t *n, gt_err_t *err);

/* 1 when text[0..len) contains the text of a control or user-defined token, else 0. */
int prompt_has_special(const tok_t *tok, const char *text, size_t len);

/* The CLI's --prompt / --chat options. */
typedef struct {
  const char *prompt;  /* raw text, or NULL */
  const char *chat;    /* one user message rendered with the model's chat template, or NULL */
  const char *system;  /* optional system message (chat) */
  int no_think;        /* chat: enable_thinking = false */
  int special;         /* parse special tokens (raw prompt text, or chat content) */
} prompt_spec_t;

/* *ids malloc'd (caller frees). Chat needs tokenizer.chat_template of a known family. */
int prompt_build(const gguf_t *g, const tok_t *tok, const prompt_spec_t *ps, int32_t **ids, size_t *n,
                 gt_err_t *err);

#endif
