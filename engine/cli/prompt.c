#include "engine/cli/prompt.h"

#include <string.h>

int prompt_build(const gguf_t *g, const tok_t *tok, const prompt_spec_t *ps, int32_t **ids, size_t *n,
                 gt_err_t *err) {
  if (ps->prompt) return tok_encode(tok, ps->prompt, strlen(ps->prompt), ps->special ? TOK_SPECIAL : 0, ids, n, err);
  return gt_err_set(err, GT_EUNSUPPORTED, "--chat is not available yet");
}
