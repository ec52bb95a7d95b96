/* tests/fuzz/fuzz_tokenizer.c — libFuzzer harness for the tokenizer (real Qwen3 vocabulary).
 *
 * Input: byte 0 picks the mode, the rest is the payload.
 *   0: encode the payload as plain text; when it is valid UTF-8, decode(encode(x)) must equal
 *      NFC(x) exactly (byte-level BPE loses nothing).
 *   1: encode with TOK_SPECIAL; every id must be in range and decode must succeed.
 *   2: the payload made valid UTF-8 (ill-formed parts -> U+FFFD), then modes 0 and 1 on it, and
 *      tok_encode_spans over three pieces of it (untrusted: same ids as tok_encode).
 *   3: the payload as little-endian int32 ids (some out of range): tok_decode, and the streaming
 *      decoder token by token, which must emit only valid UTF-8 equal to the lossy decode.
 *   4: the payload as a GGUF file: tok_load must fail cleanly (error code and message) or give a
 *      tokenizer that then encodes, decodes and streams a fixed mixed text.
 * Also linked into test_tokenizer, which replays tests/fuzz/regress/tokenizer/ through it. The
 * vocabulary is $GANTRY_GOLDEN/qwen3-vocab.gguf (default tests/golden/). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/gguf.h"
#include "format/tok_pretok.h"
#include "format/tok_utf8.h"
#include "format/tokenizer.h"

static tok_t *g_tok;

static const tok_t *fuzz_tok(void) {
  if (g_tok) return g_tok;
  const char *dir = getenv("GANTRY_GOLDEN");
  char path[4096];
  snprintf(path, sizeof path, "%s/qwen3-vocab.gguf", dir ? dir : "tests/golden");
  gt_err_t err = {0};
  gguf_t *g = NULL;
  if (gguf_open(path, &g, &err) != GT_OK || tok_load(g, &g_tok, &err) != GT_OK) {
    fprintf(stderr, "fuzz_tokenizer: cannot load %s: %s\n", path, err.msg);
    abort();
  }
  gguf_close(g);
  return g_tok;
}

#define CHECK(c)                                                                    \
  do {                                                                              \
    if (!(c)) {                                                                     \
      fprintf(stderr, "fuzz_tokenizer: check failed: %s (line %d)\n", #c, __LINE__); \
      abort();                                                                      \
    }                                                                               \
  } while (0)

/* Lossy UTF-8 (U+FFFD per maximal ill-formed subpart, also for a truncated tail). */
static char *lossy(const char *s, size_t n, size_t *out_n) {
  char *o = malloc(3 * n + 1);
  size_t k = 0, i = 0;
  while (i < n) {
    uint32_t cp;
    size_t adv = 1;
    int l = gt_utf8_next((const unsigned char *)s + i, n - i, &cp, &adv);
    if (l > 0) {
      memcpy(o + k, s + i, (size_t)l);
      k += (size_t)l;
      i += (size_t)l;
    } else {
      memcpy(o + k, "\xEF\xBF\xBD", 3);
      k += 3;
      i += l == GT_UTF8_INCOMPLETE ? n - i : adv;
    }
  }
  *out_n = k;
  return o;
}

static void check_encode(const tok_t *t, const char *s, size_t n, unsigned flags) {
  gt_err_t err = {0};
  int32_t *ids = NULL;
  size_t nid = 0;
  int rc = tok_encode(t, s, n, flags, &ids, &nid, &err);
  int valid = gt_utf8_invalid_at(s, n) == n;
  if (!valid) {
    CHECK(rc == GT_EINVAL && ids == NULL && nid == 0);
    return;
  }
  CHECK(rc == GT_OK);
  for (size_t i = 0; i < nid; i++) CHECK(ids[i] >= 0 && (size_t)ids[i] < tok_n_vocab(t));
  char *dec = NULL;
  size_t dl = 0;
  CHECK(tok_decode(t, ids, nid, 0, &dec, &dl, &err) == GT_OK);
  if (!(flags & TOK_SPECIAL)) {
    for (size_t i = 0; i < nid; i++) CHECK(tok_type(t, ids[i]) == TOK_TYPE_NORMAL);
    char *owned;
    const char *norm;
    size_t nl;
    CHECK(tok_nfc(s, n, &owned, &norm, &nl, &err) == GT_OK);
    CHECK(dl == nl && memcmp(dec, norm, nl) == 0);
    free(owned);
  }
  free(dec);
  free(ids);
}

/* Valid text cut into three spans at character boundaries: with no span trusted the ids equal
 * tok_encode's of the whole text; with all trusted, tok_encode's with TOK_SPECIAL unless a
 * special token straddles a cut (then only fewer specials may be found: check it still works). */
static void check_spans(const tok_t *t, const char *s, size_t n) {
  size_t cut[2] = {n / 3, 2 * n / 3};
  for (int c = 0; c < 2; c++)
    while (cut[c] > 0 && cut[c] < n && ((unsigned char)s[cut[c]] & 0xC0) == 0x80) cut[c]--;
  if (cut[1] < cut[0]) cut[1] = cut[0];
  gt_err_t err = {0};
  for (unsigned flags = 0; flags <= TOK_SPECIAL; flags += TOK_SPECIAL) {
    tok_span_t sp[3] = {{s, cut[0], flags}, {s + cut[0], cut[1] - cut[0], flags}, {s + cut[1], n - cut[1], flags}};
    int32_t *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    CHECK(tok_encode_spans(t, sp, 3, &a, &na, &err) == GT_OK);
    CHECK(tok_encode(t, s, n, flags, &b, &nb, &err) == GT_OK);
    if (flags == 0) CHECK(na == nb && (na == 0 || memcmp(a, b, na * sizeof *a) == 0));
    char *da, *db;
    size_t la, lb;
    CHECK(tok_decode(t, a, na, 0, &da, &la, &err) == GT_OK);
    CHECK(tok_decode(t, b, nb, 0, &db, &lb, &err) == GT_OK);
    if (flags == 0) CHECK(la == lb && memcmp(da, db, la) == 0);
    free(da);
    free(db);
    free(a);
    free(b);
  }
}

static void check_decode(const tok_t *t, const uint8_t *p, size_t n) {
  size_t nid = n / 4;
  int32_t *ids = calloc(nid ? nid : 1, sizeof *ids);
  int in_range = 1;
  for (size_t i = 0; i < nid; i++) {
    uint32_t v;
    memcpy(&v, p + 4 * i, 4);
    /* mostly valid ids, sometimes just past either end */
    ids[i] = (int32_t)(v % (uint32_t)(tok_n_vocab(t) + 8)) - ((v >> 31) ? 4 : 0);
    in_range &= ids[i] >= 0 && (size_t)ids[i] < tok_n_vocab(t);
  }
  gt_err_t err = {0};
  char *dec = NULL;
  size_t dl = 0;
  int rc = tok_decode(t, ids, nid, 0, &dec, &dl, &err);
  CHECK(in_range ? rc == GT_OK : rc == GT_EINVAL);
  tok_stream_t s;
  tok_stream_init(&s, t, 0);
  size_t cap = 64, o = 0;
  char *acc = malloc(cap);
  for (size_t i = 0; i <= nid; i++) {
    const char *txt;
    size_t l;
    int r = i < nid ? tok_stream_push(&s, ids[i], &txt, &l, &err) : tok_stream_flush(&s, &txt, &l, &err);
    if (r == GT_EINVAL && i < nid) {
      CHECK(ids[i] < 0 || (size_t)ids[i] >= tok_n_vocab(t));
      continue;
    }
    CHECK(r == GT_OK);
    CHECK(gt_utf8_invalid_at(txt, l) == l);
    while (o + l > cap) acc = realloc(acc, cap *= 2);
    memcpy(acc + o, txt, l);
    o += l;
  }
  tok_stream_free(&s);
  if (rc == GT_OK) {
    size_t ll;
    char *ref = lossy(dec, dl, &ll);
    CHECK(ll == o && memcmp(ref, acc, o) == 0);
    free(ref);
  }
  free(acc);
  free(dec);
  free(ids);
}

/* Tokenizer from untrusted GGUF bytes. */
static void check_load(const uint8_t *p, size_t n) {
  gt_err_t err = {0};
  gguf_t *g = NULL;
  if (gguf_open_buffer(p, n, &g, &err) != GT_OK) return;
  tok_t *t = NULL;
  int rc = tok_load(g, &t, &err);
  gguf_close(g); /* the tokenizer must not depend on the file any more */
  if (rc != GT_OK) {
    CHECK(t == NULL && rc < 0 && err.msg[0]);
    return;
  }
  static const char text[] = "Hello, y'all! <|im_end|> \xE4\xB8\xAD\xE6\x96\x87 e\xCC\x81 \xF0\x9F\xA6\x99\n\n  x";
  for (unsigned flags = 0; flags <= TOK_SPECIAL; flags += TOK_SPECIAL) {
    int32_t *ids = NULL;
    size_t nid = 0;
    rc = tok_encode(t, text, sizeof text - 1, flags, &ids, &nid, &err);
    CHECK(rc == GT_OK || (rc < 0 && err.msg[0]));
    if (rc == GT_OK) {
      char *dec = NULL;
      size_t dl = 0;
      CHECK(tok_decode(t, ids, nid, 0, &dec, &dl, &err) == GT_OK);
      tok_stream_t s;
      tok_stream_init(&s, t, TOK_SKIP_CONTROL);
      for (size_t i = 0; i <= nid; i++) {
        const char *txt;
        size_t l;
        CHECK((i < nid ? tok_stream_push(&s, ids[i], &txt, &l, &err) : tok_stream_flush(&s, &txt, &l, &err)) == GT_OK);
        CHECK(gt_utf8_invalid_at(txt, l) == l);
      }
      tok_stream_free(&s);
      free(dec);
    }
    free(ids);
  }
  for (int32_t id = -1; id <= (int32_t)tok_n_vocab(t); id++) {
    size_t l;
    const char *tx = tok_text(t, id, &l);
    CHECK((tx != NULL) == (id >= 0 && (size_t)id < tok_n_vocab(t)));
    if (tx) CHECK(tok_find(t, tx) >= 0);
  }
  tok_free(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  const char *s = (const char *)data + 1;
  size_t n = size - 1;
  if (data[0] % 5 == 4) {
    check_load(data + 1, n);
    return 0;
  }
  const tok_t *t = fuzz_tok();
  switch (data[0] % 5) {
    case 0: check_encode(t, s, n, 0); break;
    case 1: check_encode(t, s, n, TOK_SPECIAL); break;
    case 2: {
      size_t ln;
      char *v = lossy(s, n, &ln);
      check_encode(t, v, ln, 0);
      check_encode(t, v, ln, TOK_SPECIAL);
      check_spans(t, v, ln);
      free(v);
      break;
    }
    default: check_decode(t, data + 1, n); break;
  }
  return 0;
}
