/* engine/cli/prompt.h — turns --prompt / --chat options into token ids. */
#ifndef GANTRY_ENGINE_CLI_PROMPT_H
#define GANTRY_ENGINE_CLI_PROMPT_H

#include <stddef.h>
#include <stdint.h>

#include "engine/gguf.h"
#include "engine/tokenizer.h"

typedef struct {
  const char *prompt;  /* raw text, or NULL */
  const char *chat;    /* one user message rendered with the model's chat template, or NULL */
  const char *system;  /* optional system message (chat) */
  int no_think;        /* chat: enable_thinking = false */
  int special;         /* raw prompt: parse special tokens */
} prompt_spec_t;

/* *ids malloc'd (caller frees). Chat needs tokenizer.chat_template of a known family. */
int prompt_build(const gguf_t *g, const tok_t *tok, const prompt_spec_t *ps, int32_t **ids, size_t *n,
                 gt_err_t *err);

#endif
