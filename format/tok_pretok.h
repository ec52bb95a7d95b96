/* format/tok_pretok.h — text normalisation (NFC) and regex pre-tokenization (tokenizer internals).
 *
 * The pre-tokenizer splits NFC text into "words" that BPE then encodes one by one. The regex is
 * chosen by GGUF's tokenizer.ggml.pre, as llama.cpp does (src/llama-vocab.cpp):
 *   qwen2  — Qwen2 / Qwen3 (the Split regex of their tokenizer.json)
 *   qwen35 — Qwen3.5: qwen2's regex with combining marks \p{M} joined to letters and taken out
 *            of the punctuation runs.
 * Matching uses PCRE2 (UTF + UCP, JIT when available) with find-all semantics identical to HF
 * tokenizers' Split(behavior=Isolated): matches are pieces, and so would be any gap between
 * them (these regexes leave none). */
#ifndef GANTRY_ENGINE_TOK_PRETOK_H
#define GANTRY_ENGINE_TOK_PRETOK_H

#include <stddef.h>

#include "common/err.h"

typedef struct tok_pretok tok_pretok_t;
typedef struct tok_pretok_scratch tok_pretok_scratch_t;

/* Creates the pre-tokenizer called name[0..len) ("qwen2" or "qwen35"). Unknown names give
 * GT_EUNSUPPORTED naming it. On success *out is owned by the caller (tok_pretok_free). */
int tok_pretok_new(const char *name, size_t len, tok_pretok_t **out, gt_err_t *err);
void tok_pretok_free(tok_pretok_t *p);
const char *tok_pretok_name(const tok_pretok_t *p);    /* "qwen2" / "qwen35" */
const char *tok_pretok_pattern(const tok_pretok_t *p); /* the PCRE2 pattern in use */

/* Per-call matching state (PCRE2 match data). One per thread at a time. */
int tok_pretok_scratch_new(const tok_pretok_t *p, tok_pretok_scratch_t **out, gt_err_t *err);
void tok_pretok_scratch_free(tok_pretok_scratch_t *s);

/* Called for each piece, in order; a nonzero return stops the split and is returned by it. */
typedef int (*tok_piece_fn)(const char *piece, size_t len, void *ud);

/* Splits text[0..len), which must be valid UTF-8, into pieces. Returns GT_OK, the callback's
 * nonzero value, or GT_EINTERNAL if the regex engine fails (message names the PCRE2 error). */
int tok_pretok_split(const tok_pretok_t *p, tok_pretok_scratch_t *s, const char *text, size_t len,
                     tok_piece_fn fn, void *ud, gt_err_t *err);

/* End offset of the regex match at text[off], a whitespace character where none of the
 * alternatives before the whitespace ones matches: what the regex gives there, computed without
 * it (the splitter's fallback when PCRE2 exhausts its backtracking limits on a long run of
 * whitespace). Exposed for its test. */
size_t tok_pretok_ws_end(const char *text, size_t len, size_t off);

/* NFC of valid UTF-8 text[0..len). When the text is already NFC (checked cheaply for the common
 * scripts) *out = text and *owned = NULL; otherwise *out = *owned is a malloc'd buffer the
 * caller frees. Returns GT_OK, GT_ENOMEM or GT_EINTERNAL (utf8proc failure, message says). */
int tok_nfc(const char *text, size_t len, char **owned, const char **out, size_t *out_len,
            gt_err_t *err);

/* Code points the NFC fast path copies without normalising: each is NFC-stable, has combining
 * class 0 and is never the second element of a canonical composition. Exposed for its test. */
int tok_nfc_is_inert(unsigned cp);

#endif
