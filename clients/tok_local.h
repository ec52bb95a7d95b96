/* clients/tok_local.h — token counts from a local GGUF tokenizer (format/tokenizer.h), for
 * `gantry bench --tokenizer M.gguf` against servers without /tokenize. Built only when the
 * gantry_tok library is part of the build (GANTRY_HAVE_TOK). */
#ifndef GANTRY_CLIENTS_TOK_LOCAL_H
#define GANTRY_CLIENTS_TOK_LOCAL_H

#include "common/err.h"

typedef struct gc_tok_local gc_tok_local_t;

/* Loads the tokenizer of a GGUF file; NULL on error (message in err). Free with gc_tok_local_free. */
gc_tok_local_t *gc_tok_local_open(const char *gguf_path, gt_err_t *err);
void gc_tok_local_free(gc_tok_local_t *t);
/* gc_count_fn over a gc_tok_local_t (ud). Counts plain text (no special tokens). */
int gc_tok_local_count(void *ud, const char *text, int *count, gt_err_t *err);

#endif
