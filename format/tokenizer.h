/* format/tokenizer.h — byte-level BPE tokenizer of Qwen3 / Qwen3.5 models, built from GGUF.
 *
 * Pipeline of tok_encode (HF tokenizers' order for Qwen's tokenizer.json):
 *   1. with TOK_SPECIAL, control and user-defined tokens (<|im_start|>, <think>, ...) found in
 *      the text are cut out whole (leftmost, longest first); without it they are plain text;
 *   2. each remaining segment is normalised to NFC (utf8proc);
 *   3. split into words by the pre-tokenizer regex named by tokenizer.ggml.pre ("qwen2" or
 *      "qwen35", see format/tok_pretok.h);
 *   4. each word's bytes are mapped to GPT-2's byte alphabet and merged by BPE, lowest merge
 *      rank first (leftmost on ties), tokenizer.ggml.merges giving the ranks in order.
 * Decoding maps tokens back to bytes (inverse byte map; control / user-defined tokens give their
 * text as it is).
 *
 * A tok_t is immutable after tok_load / tok_build except for an internal word cache guarded by
 * a lock: any number of threads may encode and decode with one tok_t at once. */
#ifndef GANTRY_ENGINE_TOKENIZER_H
#define GANTRY_ENGINE_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

typedef struct gguf gguf_t;
typedef struct tok tok_t;

/* tokenizer.ggml.token_type values (llama.cpp's llama_token_type). */
typedef enum {
  TOK_TYPE_UNDEFINED = 0,
  TOK_TYPE_NORMAL = 1,
  TOK_TYPE_UNKNOWN = 2,
  TOK_TYPE_CONTROL = 3,
  TOK_TYPE_USER_DEFINED = 4,
  TOK_TYPE_UNUSED = 5,
  TOK_TYPE_BYTE = 6,
} tok_type_t;

/* tok_encode flags */
#define TOK_SPECIAL 1u /* match control / user-defined token texts whole (trusted text only) */

/* tok_decode / tok_stream flags */
#define TOK_SKIP_CONTROL 1u /* control tokens decode to nothing (user-defined ones still do) */

/* Raw description of a tokenizer, as GGUF metadata holds it. Strings are (pointer, length),
 * need not be NUL-terminated, and are copied by tok_build. */
typedef struct {
  const char *model; size_t model_len; /* tokenizer.ggml.model: must be "gpt2" */
  const char *pre; size_t pre_len;     /* tokenizer.ggml.pre: "qwen2" or "qwen35" */
  size_t n_vocab;
  const char *const *tokens; const size_t *token_lens; /* n_vocab token texts (byte alphabet) */
  const int32_t *types;                 /* n_vocab tok_type_t values, or NULL = all normal */
  size_t n_merges;
  const char *const *merges; const size_t *merge_lens; /* "left right", rank = index */
  int32_t bos, eos, eot, pad;           /* token ids, or -1 when absent */
} tok_spec_t;

/* Builds a tokenizer from g's tokenizer.ggml.* metadata. A model other than "gpt2" or an
 * unknown pre-tokenizer gives GT_EUNSUPPORTED naming it; missing or malformed keys give
 * GT_EFORMAT naming the key. On success *out is owned by the caller (tok_free); g may be closed
 * afterwards (everything needed is copied). */
int tok_load(const gguf_t *g, tok_t **out, gt_err_t *err);

/* Same from raw arrays (tests, fuzzers, tools). Validates everything: ids in range, a token for
 * each of the 256 bytes, merges naming known tokens (merges that cannot apply are skipped and
 * counted, see tok_n_merges). */
int tok_build(const tok_spec_t *spec, tok_t **out, gt_err_t *err);
void tok_free(tok_t *t);

size_t tok_n_vocab(const tok_t *t);
size_t tok_n_merges(const tok_t *t);   /* merges in use (after skipping unusable ones) */
const char *tok_pre_name(const tok_t *t); /* "qwen2" / "qwen35" */
int32_t tok_bos(const tok_t *t);       /* ids, or -1 when the model has none */
int32_t tok_eos(const tok_t *t);
int32_t tok_eot(const tok_t *t);
int32_t tok_pad(const tok_t *t);
tok_type_t tok_type(const tok_t *t, int32_t id); /* TOK_TYPE_UNDEFINED for ids out of range */
int tok_is_control(const tok_t *t, int32_t id);  /* 1 for control tokens, else 0 */

/* Vocabulary text of token id (byte alphabet for normal tokens, e.g. "Ġhello"), NUL-terminated,
 * owned by t; NULL if id is out of range. */
const char *tok_text(const tok_t *t, int32_t id, size_t *len);
/* Decoded bytes of token id (not NUL-terminated, may be a partial UTF-8 character), owned by t;
 * NULL (and *len = 0) if id is out of range. */
const char *tok_piece(const tok_t *t, int32_t id, size_t *len);
/* Id of the token whose vocabulary text is exactly text (NUL-terminated), control and
 * user-defined tokens first; -1 if none. For looking up special tokens such as "<|im_end|>". */
int32_t tok_find(const tok_t *t, const char *text);

/* Encodes text[0..len) (must be valid UTF-8: otherwise GT_EINVAL naming the byte offset; at
 * most 1 GiB: otherwise GT_ERANGE).
 * flags: TOK_SPECIAL or 0. On success *ids is a malloc'd array of *n ids (NULL when *n == 0)
 * that the caller frees with free(). On error *ids = NULL, *n = 0. */
int tok_encode(const tok_t *t, const char *text, size_t len, unsigned flags, int32_t **ids, size_t *n,
               gt_err_t *err);

/* A piece of text to encode and whether special tokens inside it are recognised. */
typedef struct {
  const char *text;
  size_t len;
  unsigned flags; /* TOK_SPECIAL or 0 */
} tok_span_t;

/* Encodes the concatenation of spans[0..n_spans) exactly as tok_encode would encode it as one
 * text (pre-tokenization and BPE run across span boundaries), except that special tokens are
 * recognised only wholly inside spans flagged TOK_SPECIAL. For prompts that mix trusted
 * template text with untrusted user content. Each span must be valid UTF-8 (GT_EINVAL naming
 * the span and byte). Ownership of *ids as for tok_encode. */
int tok_encode_spans(const tok_t *t, const tok_span_t *spans, size_t n_spans, int32_t **ids, size_t *n,
                     gt_err_t *err);

/* Decodes ids[0..n) to bytes: the concatenation of their pieces (TOK_SKIP_CONTROL drops control
 * tokens). The bytes are exactly what the tokens hold, so they may end in (or, for arbitrary
 * id sequences, contain) incomplete UTF-8; use tok_stream_t for guaranteed-valid UTF-8.
 * *out is malloc'd, NUL-terminated (not counted in *len), freed by the caller. An id out of
 * range gives GT_EINVAL naming it. */
int tok_decode(const tok_t *t, const int32_t *ids, size_t n, unsigned flags, char **out, size_t *len,
               gt_err_t *err);

/* Streaming decoder: feeds tokens one at a time and returns only complete, valid UTF-8. An
 * incomplete character at the end of a piece is held back until the following tokens complete
 * it; bytes that can never form a character are replaced by U+FFFD (one per maximal ill-formed
 * subpart). The concatenation of all outputs (pushes, then flush) equals tok_decode's bytes
 * whenever those are valid UTF-8.
 * Usage: tok_stream_init; tok_stream_push per token; tok_stream_flush at the end;
 * tok_stream_free. Text returned points into the stream's buffer and stays valid until its
 * next call. */
typedef struct {
  const tok_t *t;
  unsigned flags;
  unsigned char tail[4]; /* held-back prefix of an incomplete character */
  size_t ntail;
  char *buf;             /* output buffer, owned */
  size_t cap;
} tok_stream_t;

void tok_stream_init(tok_stream_t *s, const tok_t *t, unsigned flags);
/* Returns GT_OK with the newly completed text (possibly empty), GT_EINVAL for an id out of
 * range (the stream is unchanged), or GT_ENOMEM. */
int tok_stream_push(tok_stream_t *s, int32_t id, const char **text, size_t *len, gt_err_t *err);
/* Ends the stream: a held-back incomplete character becomes U+FFFD. The stream is reset and
 * may be reused. */
int tok_stream_flush(tok_stream_t *s, const char **text, size_t *len, gt_err_t *err);
void tok_stream_free(tok_stream_t *s);

#endif
