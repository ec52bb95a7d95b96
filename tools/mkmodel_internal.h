/* tools/mkmodel_internal.h — pieces of mkmodel shared between its files. */
#ifndef GANTRY_ENGINE_MKMODEL_INTERNAL_H
#define GANTRY_ENGINE_MKMODEL_INTERNAL_H

#include "common/err.h"
#include "format/gguf_write.h"

/* Writes the tokenizer.* keys of a byte-level BPE vocabulary of n_vocab tokens: the 256
 * GPT-2 byte-level characters (ids 0..255, bytes_to_unicode order as in Qwen's vocab), letter
 * pairs "ab" with their merges "a b", "[PADn]" fillers (unused), then the Qwen special tokens
 * at the end (<|...|> control, <think>/<tool_call>/... user-defined); eos = <|im_end|>,
 * padding = <|endoftext|>; the Qwen3 chat template. pre: "qwen2" or "qwen35". */
int mk_emit_tokenizer(gw_t *w, int n_vocab, const char *pre, gt_err_t *err);

#endif
