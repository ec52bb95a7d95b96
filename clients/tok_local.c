/* clients/tok_local.c — local GGUF tokenizer as a token counter. */
#include "clients/tok_local.h"

#include <stdlib.h>
#include <string.h>

#include "format/gguf.h"
#include "format/tokenizer.h"

struct gc_tok_local {
  tok_t *tok;
};

gc_tok_local_t *gc_tok_local_open(const char *gguf_path, gt_err_t *err) {
  gguf_t *g = NULL;
  if (gguf_open(gguf_path, &g, err)) return NULL;
  gc_tok_local_t *t = calloc(1, sizeof *t);
  if (!t) {
    gguf_close(g);
    gt_err_set(err, GT_ENOMEM, "tokenizer: out of memory");
    return NULL;
  }
  int rc = tok_load(g, &t->tok, err);
  gguf_close(g);
  if (rc) {
    gt_err_wrap(err, "%s", gguf_path);
    free(t);
    return NULL;
  }
  return t;
}

void gc_tok_local_free(gc_tok_local_t *t) {
  if (!t) return;
  tok_free(t->tok);
  free(t);
}

int gc_tok_local_count(void *ud, const char *text, int *count, gt_err_t *err) {
  gc_tok_local_t *t = ud;
  int32_t *ids = NULL;
  size_t n = 0;
  int rc = tok_encode(t->tok, text, strlen(text), 0, &ids, &n, err);
  free(ids);
  if (rc) return rc;
  *count = (int)n;
  return GT_OK;
}
