/* format/tok_pretok.c — NFC (utf8proc) and the regex pre-tokenizers (PCRE2). */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "format/tok_pretok.h"

#include <pcre2.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "format/tok_utf8.h"

/* \s as HF tokenizers' regex engine (Oniguruma) defines it for Unicode text: the White_Space
 * property. PCRE2's own \s under UCP also takes U+180E, so the class is spelled out. */
#define WS "\\t\\n\\x{0B}\\f\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"

/* Qwen2 / Qwen3 tokenizer.json Split regex:
 *   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|
 *   \s*[\r\n]+|\s+(?!\S)|\s+                                            (llama.cpp: qwen2) */
static const char RE_QWEN2[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)"
    "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+"
    "|\\p{N}"
    "| ?[^" WS "\\p{L}\\p{N}]+[\\r\\n]*"
    "|[" WS "]*[\\r\\n]+"
    "|[" WS "]+(?![^" WS "])"
    "|[" WS "]+";

/* Qwen3.5 tokenizer.json Split regex (llama.cpp LLAMA_VOCAB_PRE_TYPE_QWEN35):
 *   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}|
 *   ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 * Differences from qwen2: letters runs take combining marks ([\p{L}\p{M}]+), and punctuation
 * runs exclude them. */
static const char RE_QWEN35[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)"
    "|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+"
    "|\\p{N}"
    "| ?[^" WS "\\p{L}\\p{M}\\p{N}]+[\\r\\n]*"
    "|[" WS "]*[\\r\\n]+"
    "|[" WS "]+(?![^" WS "])"
    "|[" WS "]+";

struct tok_pretok {
  char name[16];
  const char *pattern;
  pcre2_code *code;
  int jit; /* JIT compiled */
};

struct tok_pretok_scratch {
  pcre2_match_data *md;
};

int tok_pretok_new(const char *name, size_t len, tok_pretok_t **out, gt_err_t *err) {
  *out = NULL;
  const char *pat = NULL, *canon = NULL;
  if (len == 5 && memcmp(name, "qwen2", 5) == 0) {
    pat = RE_QWEN2;
    canon = "qwen2";
  } else if (len == 6 && memcmp(name, "qwen35", 6) == 0) {
    pat = RE_QWEN35;
    canon = "qwen35";
  } else {
    return gt_err_set(err, GT_EUNSUPPORTED,
                      "unsupported pre-tokenizer tokenizer.ggml.pre=\"%.*s\" (known: qwen2, qwen35)",
                      (int)(len > 64 ? 64 : len), name);
  }
  tok_pretok_t *p = calloc(1, sizeof *p);
  if (!p) return gt_err_set(err, GT_ENOMEM, "pre-tokenizer: out of memory");
  snprintf(p->name, sizeof p->name, "%s", canon);
  p->pattern = pat;
  int ec;
  PCRE2_SIZE eo;
  p->code = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &ec, &eo, NULL);
  if (!p->code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(ec, msg, sizeof msg);
    free(p);
    return gt_err_set(err, GT_EINTERNAL, "pre-tokenizer %s: regex compile failed at %zu: %s", canon,
                      (size_t)eo, (const char *)msg);
  }
  p->jit = pcre2_jit_compile(p->code, PCRE2_JIT_COMPLETE) == 0;
  *out = p;
  return GT_OK;
}

void tok_pretok_free(tok_pretok_t *p) {
  if (!p) return;
  pcre2_code_free(p->code);
  free(p);
}

const char *tok_pretok_name(const tok_pretok_t *p) { return p->name; }
const char *tok_pretok_pattern(const tok_pretok_t *p) { return p->pattern; }

int tok_pretok_scratch_new(const tok_pretok_t *p, tok_pretok_scratch_t **out, gt_err_t *err) {
  tok_pretok_scratch_t *s = calloc(1, sizeof *s);
  if (!s) return gt_err_set(err, GT_ENOMEM, "pre-tokenizer: out of memory");
  s->md = pcre2_match_data_create_from_pattern(p->code, NULL);
  if (!s->md) {
    free(s);
    return gt_err_set(err, GT_ENOMEM, "pre-tokenizer: out of memory");
  }
  *out = s;
  return GT_OK;
}

void tok_pretok_scratch_free(tok_pretok_scratch_t *s) {
  if (!s) return;
  pcre2_match_data_free(s->md);
  free(s);
}

static int is_ws(uint32_t c) { /* the WS class above */
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) ||
         c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

/* The match of the last three alternatives at a whitespace character text[off], computed
 * directly (declared in the header for its test). The splitter uses it when the regex engine
 * runs out of backtracking room, which only [WS]*[\r\n]+ can do, on a long run of whitespace
 * (PCRE2 stops at its match limit there, on runs of several million characters, also in JIT
 * code). The alternatives before
 * it cannot have matched then: the engine tries them first. With the run = text[off..q)
 * (maximal):
 *   [WS]*[\r\n]+      if the run holds \r or \n: up to and including the last of them;
 *   [WS]+(?![^WS])     else the whole run at the end of the text, or all of it but its last
 *                      character when that leaves at least one;
 *   [WS]+              else the run (one character).
 * Returns the end offset. */
size_t tok_pretok_ws_end(const char *text, size_t len, size_t off) {
  const unsigned char *p = (const unsigned char *)text;
  size_t q = off, last_nl = SIZE_MAX, last_start = off;
  while (q < len) {
    uint32_t cp;
    size_t adv;
    int l = gt_utf8_next(p + q, len - q, &cp, &adv);
    if (l <= 0 || !is_ws(cp)) break;
    if (cp == '\r' || cp == '\n') last_nl = q;
    last_start = q;
    q += (size_t)l;
  }
  if (last_nl != SIZE_MAX) return last_nl + 1;
  if (q == len || last_start > off) return q == len ? q : last_start;
  return q;
}

/* JIT with its default 32 KiB stack, else the interpreter. Returns the PCRE2 result; for a
 * run of whitespace that exhausts the engine's limits, the match computed by tok_pretok_ws_end
 * (*end set, returns 1). */
static int match_at(const tok_pretok_t *p, tok_pretok_scratch_t *s, const char *text, size_t len, size_t off,
                    size_t *start, size_t *end) {
  int rc = PCRE2_ERROR_JIT_BADOPTION;
  if (p->jit) rc = pcre2_jit_match(p->code, (PCRE2_SPTR)text, len, off, 0, s->md, NULL);
  if (rc == PCRE2_ERROR_JIT_BADOPTION)
    rc = pcre2_match(p->code, (PCRE2_SPTR)text, len, off, PCRE2_NO_JIT | PCRE2_NO_UTF_CHECK, s->md, NULL);
  if (rc == PCRE2_ERROR_JIT_STACKLIMIT || rc == PCRE2_ERROR_MATCHLIMIT || rc == PCRE2_ERROR_DEPTHLIMIT ||
      rc == PCRE2_ERROR_HEAPLIMIT || rc == PCRE2_ERROR_NOMEMORY) {
    uint32_t cp;
    size_t adv;
    if (gt_utf8_next((const unsigned char *)text + off, len - off, &cp, &adv) > 0 && is_ws(cp)) {
      *start = off;
      *end = tok_pretok_ws_end(text, len, off);
      return 1;
    }
    return rc;
  }
  if (rc > 0) {
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(s->md);
    *start = ov[0];
    *end = ov[1];
  }
  return rc;
}

int tok_pretok_split(const tok_pretok_t *p, tok_pretok_scratch_t *s, const char *text, size_t len,
                     tok_piece_fn fn, void *ud, gt_err_t *err) {
  size_t off = 0;
  while (off < len) {
    size_t b = 0, e = 0;
    int rc = match_at(p, s, text, len, off, &b, &e);
    if (rc == PCRE2_ERROR_NOMATCH) return fn(text + off, len - off, ud); /* trailing gap */
    if (rc < 0) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof msg);
      return gt_err_set(err, GT_EINTERNAL, "pre-tokenizer %s: match failed at byte %zu: %s", p->name,
                        off, (const char *)msg);
    }
    if (b < off || e < b || e > len)
      return gt_err_set(err, GT_EINTERNAL, "pre-tokenizer %s: bad match [%zu,%zu) at %zu", p->name, b, e, off);
    int r;
    if (b > off && (r = fn(text + off, b - off, ud)) != 0) return r; /* gap before the match */
    if (e == b) { /* empty match: cannot happen with these patterns; step one character */
      uint32_t cp;
      size_t adv = 1;
      int l = gt_utf8_next((const unsigned char *)text + b, len - b, &cp, &adv);
      e = b + (size_t)(l > 0 ? l : 1);
    }
    if ((r = fn(text + b, e - b, ud)) != 0) return r;
    off = e;
  }
  return GT_OK;
}

/* ---- NFC ---- */

int tok_nfc_is_inert(unsigned cp) {
  return cp < 0x300                       /* Latin-1, Latin Extended-A/B, IPA, modifiers */
         || (cp >= 0x400 && cp <= 0x482)  /* Cyrillic (before the combining titlo etc.) */
         || (cp >= 0x48A && cp <= 0x52F)  /* Cyrillic, Cyrillic Supplement */
         || (cp >= 0x2010 && cp <= 0x2027) /* dashes, quotes, bullets, ellipsis (not U+2000/2001) */
         || (cp >= 0x2030 && cp <= 0x205E) /* per mille, primes, ... */
         || (cp >= 0x3000 && cp <= 0x3029) /* CJK symbols and punctuation (before the tone marks) */
         || (cp >= 0x3030 && cp <= 0x303F)
         || (cp >= 0x3040 && cp <= 0x3098) /* Hiragana (before the voicing marks) */
         || (cp >= 0x309D && cp <= 0x30FF) /* Hiragana iteration marks, Katakana */
         || (cp >= 0x4E00 && cp <= 0x9FFF) /* CJK Unified Ideographs */
         || (cp >= 0xAC00 && cp <= 0xD7A3) /* Hangul syllables */
         || (cp >= 0xFF00 && cp <= 0xFFEF); /* half/full-width forms */
}

/* Appends NFC(seg) to *buf. */
static int nfc_append(const char *seg, size_t n, char **buf, size_t *len, size_t *cap, gt_err_t *err) {
  utf8proc_uint8_t *norm = NULL;
  utf8proc_ssize_t r =
      utf8proc_map((const utf8proc_uint8_t *)seg, (utf8proc_ssize_t)n, &norm, UTF8PROC_STABLE | UTF8PROC_COMPOSE);
  if (r < 0) {
    free(norm);
    return gt_err_set(err, r == UTF8PROC_ERROR_NOMEM ? GT_ENOMEM : GT_EINTERNAL, "NFC: %s",
                      utf8proc_errmsg(r));
  }
  if (*len + (size_t)r > *cap) {
    size_t nc = (*cap ? *cap : 64);
    while (nc < *len + (size_t)r) nc *= 2;
    char *nb = realloc(*buf, nc);
    if (!nb) {
      free(norm);
      return gt_err_set(err, GT_ENOMEM, "NFC: out of memory");
    }
    *buf = nb;
    *cap = nc;
  }
  memcpy(*buf + *len, norm, (size_t)r);
  *len += (size_t)r;
  free(norm);
  return GT_OK;
}

static int raw_append(const char *seg, size_t n, char **buf, size_t *len, size_t *cap, gt_err_t *err) {
  if (n == 0) return GT_OK;
  if (*len + n > *cap) {
    size_t nc = (*cap ? *cap : 64);
    while (nc < *len + n) nc *= 2;
    char *nb = realloc(*buf, nc);
    if (!nb) return gt_err_set(err, GT_ENOMEM, "NFC: out of memory");
    *buf = nb;
    *cap = nc;
  }
  memcpy(*buf + *len, seg, n);
  *len += n;
  return GT_OK;
}

int tok_nfc(const char *text, size_t len, char **owned, const char **out, size_t *out_len, gt_err_t *err) {
  const unsigned char *p = (const unsigned char *)text;
  *owned = NULL;
  *out = text;
  *out_len = len;
  /* Inert characters neither change under NFC nor interact with their neighbours, except that
   * one may be the first element of a composition with the marks after it: so each run of
   * non-inert characters is normalised together with the inert character before it. */
  char *buf = NULL;
  size_t blen = 0, cap = 0, done = 0; /* text[0..done) already handled */
  size_t i = 0, prev = 0;             /* prev: start of the character before i */
  int rc = GT_OK;
  while (i < len) {
    if (p[i] < 0xCC) { /* every code point below U+0300 starts with a byte below 0xCC */
      prev = i;
      i += p[i] < 0x80 ? 1 : 2;
      continue;
    }
    uint32_t cp;
    size_t adv;
    int l = gt_utf8_next(p + i, len - i, &cp, &adv);
    if (l <= 0) { /* callers validate first; treat defensively as one byte */
      prev = i;
      i++;
      continue;
    }
    if (tok_nfc_is_inert(cp)) {
      prev = i;
      i += (size_t)l;
      continue;
    }
    size_t start = i > 0 ? prev : 0, end = i + (size_t)l;
    while (end < len) { /* extend the run up to the next inert character */
      int l2 = gt_utf8_next(p + end, len - end, &cp, &adv);
      if (l2 <= 0 || tok_nfc_is_inert(cp)) break;
      end += (size_t)l2;
    }
    if ((rc = raw_append(text + done, start - done, &buf, &blen, &cap, err)) != GT_OK) goto fail;
    if ((rc = nfc_append(text + start, end - start, &buf, &blen, &cap, err)) != GT_OK) goto fail;
    done = end;
    prev = i = end;
  }
  if (!buf) return GT_OK; /* already NFC */
  if ((rc = raw_append(text + done, len - done, &buf, &blen, &cap, err)) != GT_OK) goto fail;
  *owned = buf;
  *out = buf;
  *out_len = blen;
  return GT_OK;
fail:
  free(buf);
  return rc;
}
