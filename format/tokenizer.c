/* format/tokenizer.c — tok_build, encoding (special tokens, NFC, pre-tokenizer, BPE), decoding. */
#define _GNU_SOURCE /* qsort_r */
#include "format/tokenizer.h"

#include <stdlib.h>
#include <string.h>

#include "format/tok_internal.h"
#include "format/tok_utf8.h"

void tok_free(tok_t *t) {
  if (!t) return;
  free(t->text);
  free(t->text_off);
  free(t->piece);
  free(t->piece_off);
  free(t->type);
  free(t->vmap);
  free(t->mmap);
  free(t->special);
  tok_pretok_free(t->pre);
  if (t->cache) pthread_mutex_destroy(&t->cache_mu);
  free(t->cache);
  free(t);
}

/* Decoded bytes of a normal token's text: each character of GPT-2's byte alphabet becomes its
 * byte; anything else (not produced by byte-level vocabs) is kept as its UTF-8 bytes. */
static size_t text_to_bytes(const char *s, size_t n, char *out) {
  const unsigned char *p = (const unsigned char *)s;
  size_t o = 0, i = 0;
  while (i < n) {
    uint32_t cp;
    size_t adv = 1;
    int l = gt_utf8_next(p + i, n - i, &cp, &adv);
    if (l > 0) {
      int b = tok_cp_to_byte(cp);
      if (b >= 0) {
        out[o++] = (char)b;
      } else {
        memcpy(out + o, p + i, (size_t)l);
        o += (size_t)l;
      }
      i += (size_t)l;
    } else {
      size_t k = l == GT_UTF8_INCOMPLETE ? n - i : adv;
      memcpy(out + o, p + i, k);
      o += k;
      i += k;
    }
  }
  return o;
}

static int special_cmp(const void *a, const void *b, void *ud) {
  const tok_t *t = ud;
  int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  unsigned char fx = (unsigned char)t->text[t->text_off[x]], fy = (unsigned char)t->text[t->text_off[y]];
  if (fx != fy) return fx < fy ? -1 : 1;
  size_t lx = tok_text_len(t, x), ly = tok_text_len(t, y);
  if (lx != ly) return lx > ly ? -1 : 1; /* longest first */
  return x < y ? -1 : x > y;
}

static int check_id(const tok_spec_t *spec, int32_t id, const char *what, gt_err_t *err) {
  if (id < -1 || (id >= 0 && (size_t)id >= spec->n_vocab))
    return gt_err_set(err, GT_EFORMAT, "tokenizer: %s token id %d out of range (vocab %zu)", what, id, spec->n_vocab);
  return GT_OK;
}

int tok_build(const tok_spec_t *spec, tok_t **out, gt_err_t *err) {
  *out = NULL;
  if (!spec->model || spec->model_len != 4 || memcmp(spec->model, "gpt2", 4) != 0)
    return gt_err_set(err, GT_EUNSUPPORTED,
                      "unsupported tokenizer model tokenizer.ggml.model=\"%.*s\" (only \"gpt2\", byte-level BPE)",
                      (int)(spec->model_len > 64 ? 64 : spec->model_len), spec->model ? spec->model : "");
  if (spec->n_vocab == 0 || spec->n_vocab > (size_t)INT32_MAX - 1)
    return gt_err_set(err, GT_EFORMAT, "tokenizer: bad vocab size %zu", spec->n_vocab);
  int rc;
  if ((rc = check_id(spec, spec->bos, "bos", err)) || (rc = check_id(spec, spec->eos, "eos", err)) ||
      (rc = check_id(spec, spec->eot, "eot", err)) || (rc = check_id(spec, spec->pad, "pad", err)))
    return rc;

  tok_t *t = calloc(1, sizeof *t);
  if (!t) return gt_err_set(err, GT_ENOMEM, "tokenizer: out of memory");
  size_t nv = t->n_vocab = spec->n_vocab;
  t->bos = spec->bos;
  t->eos = spec->eos;
  t->eot = spec->eot;
  t->pad = spec->pad;
  if ((rc = tok_pretok_new(spec->pre ? spec->pre : "", spec->pre ? spec->pre_len : 0, &t->pre, err)) != GT_OK) goto fail;

  size_t total = 0;
  for (size_t i = 0; i < nv; i++) {
    if (!spec->tokens[i] && spec->token_lens[i]) {
      rc = gt_err_set(err, GT_EFORMAT, "tokenizer: token %zu is NULL", i);
      goto fail;
    }
    if (spec->token_lens[i] && memchr(spec->tokens[i], 0, spec->token_lens[i])) {
      rc = gt_err_set(err, GT_EFORMAT, "tokenizer: token %zu contains a NUL byte", i);
      goto fail;
    }
    total += spec->token_lens[i] + 1;
  }
  t->text = malloc(total);
  t->text_off = malloc((nv + 1) * sizeof *t->text_off);
  t->piece = malloc(total);
  t->piece_off = malloc((nv + 1) * sizeof *t->piece_off);
  t->type = malloc(nv);
  t->cache = calloc(TOK_CACHE_SLOTS, sizeof *t->cache);
  if (!t->text || !t->text_off || !t->piece || !t->piece_off || !t->type || !t->cache) {
    free(t->cache);
    t->cache = NULL;
    rc = gt_err_set(err, GT_ENOMEM, "tokenizer: out of memory (%zu tokens)", nv);
    goto fail;
  }
  pthread_mutex_init(&t->cache_mu, NULL);

  size_t to = 0, po = 0, n_special = 0;
  for (size_t i = 0; i < nv; i++) {
    int32_t ty = spec->types ? spec->types[i] : TOK_TYPE_NORMAL;
    if (ty < TOK_TYPE_UNDEFINED || ty > TOK_TYPE_BYTE) {
      rc = gt_err_set(err, GT_EFORMAT, "tokenizer: token %zu has unknown type %d", i, ty);
      goto fail;
    }
    t->type[i] = (uint8_t)ty;
    const char *s = spec->tokens[i];
    size_t n = spec->token_lens[i];
    t->text_off[i] = to;
    if (n) memcpy(t->text + to, s, n);
    t->text[to + n] = 0;
    to += n + 1;
    t->piece_off[i] = po;
    if (ty == TOK_TYPE_NORMAL || ty == TOK_TYPE_UNDEFINED || ty == TOK_TYPE_BYTE) {
      po += text_to_bytes(s, n, t->piece + po);
    } else {
      if (n) memcpy(t->piece + po, s, n); /* control / user-defined / unknown / unused: text as is */
      po += n;
    }
    if ((ty == TOK_TYPE_CONTROL || ty == TOK_TYPE_USER_DEFINED) && n && gt_utf8_invalid_at(s, n) == n) n_special++;
  }
  t->text_off[nv] = to;
  t->piece_off[nv] = po;

  if ((rc = tok_bpe_build(t, spec, err)) != GT_OK) goto fail;

  t->special = malloc((n_special ? n_special : 1) * sizeof *t->special);
  if (!t->special) {
    rc = gt_err_set(err, GT_ENOMEM, "tokenizer: out of memory");
    goto fail;
  }
  for (size_t i = 0; i < nv; i++) {
    const char *s = t->text + t->text_off[i];
    size_t n = tok_text_len(t, (int32_t)i);
    if ((t->type[i] == TOK_TYPE_CONTROL || t->type[i] == TOK_TYPE_USER_DEFINED) && n && gt_utf8_invalid_at(s, n) == n)
      t->special[t->n_special++] = (int32_t)i;
  }
  qsort_r(t->special, t->n_special, sizeof *t->special, special_cmp, t);
  size_t k = 0;
  for (int b = 0; b < 256; b++) {
    t->special_at[b] = (uint32_t)k;
    while (k < t->n_special && (unsigned char)t->text[t->text_off[t->special[k]]] == b) k++;
  }
  t->special_at[256] = (uint32_t)k;
  *out = t;
  return GT_OK;
fail:
  tok_free(t);
  return rc;
}

size_t tok_n_vocab(const tok_t *t) { return t->n_vocab; }
size_t tok_n_merges(const tok_t *t) { return t->n_merges; }
const char *tok_pre_name(const tok_t *t) { return tok_pretok_name(t->pre); }
int32_t tok_bos(const tok_t *t) { return t->bos; }
int32_t tok_eos(const tok_t *t) { return t->eos; }
int32_t tok_eot(const tok_t *t) { return t->eot; }
int32_t tok_pad(const tok_t *t) { return t->pad; }

tok_type_t tok_type(const tok_t *t, int32_t id) {
  if (id < 0 || (size_t)id >= t->n_vocab) return TOK_TYPE_UNDEFINED;
  return (tok_type_t)t->type[id];
}

int tok_is_control(const tok_t *t, int32_t id) { return tok_type(t, id) == TOK_TYPE_CONTROL; }

const char *tok_text(const tok_t *t, int32_t id, size_t *len) {
  if (id < 0 || (size_t)id >= t->n_vocab) {
    if (len) *len = 0;
    return NULL;
  }
  if (len) *len = tok_text_len(t, id);
  return t->text + t->text_off[id];
}

const char *tok_piece(const tok_t *t, int32_t id, size_t *len) {
  if (id < 0 || (size_t)id >= t->n_vocab) {
    if (len) *len = 0;
    return NULL;
  }
  if (len) *len = t->piece_off[id + 1] - t->piece_off[id];
  return t->piece + t->piece_off[id];
}

int32_t tok_find(const tok_t *t, const char *text) {
  if (!text) return -1;
  size_t n = strlen(text);
  for (size_t i = 0; i < t->n_special; i++) {
    int32_t id = t->special[i];
    if (tok_text_len(t, id) == n && memcmp(t->text + t->text_off[id], text, n) == 0) return id;
  }
  return tok_vmap_find(t, text, n);
}

/* ---- encoding ---- */

typedef struct {
  const tok_t *t;
  tok_bpe_work_t work;
  int32_t *ids;
  size_t n, cap;
  gt_err_t *err;
} enc_t;

static int on_word(const char *w, size_t n, void *ud) {
  enc_t *e = ud;
  return tok_bpe_word(e->t, &e->work, w, n, &e->ids, &e->n, &e->cap, e->err);
}

static int encode_segment(enc_t *e, tok_pretok_scratch_t *ps, const char *s, size_t n) {
  if (n == 0) return GT_OK;
  char *owned;
  const char *norm;
  size_t nlen;
  int rc = tok_nfc(s, n, &owned, &norm, &nlen, e->err);
  if (rc != GT_OK) return rc;
  rc = tok_pretok_split(e->t->pre, ps, norm, nlen, on_word, e, e->err);
  free(owned);
  return rc;
}

typedef struct {
  size_t start, end;
} range_t;

/* Encodes valid UTF-8 text[0..len), recognising special tokens only wholly inside the sorted,
 * disjoint byte ranges trusted[0..nt). */
static int encode_core(const tok_t *t, const char *text, size_t len, const range_t *trusted, size_t nt,
                       int32_t **ids, size_t *n, gt_err_t *err) {
  enc_t e = {.t = t, .err = err};
  tok_pretok_scratch_t *ps = NULL;
  int rc = tok_pretok_scratch_new(t->pre, &ps, err);
  if (rc != GT_OK) return rc;
  const unsigned char *p = (const unsigned char *)text;
  size_t seg = 0; /* start of the text not yet encoded */
  for (size_t r = 0; r < nt && t->n_special; r++) {
    size_t i = trusted[r].start, end = trusted[r].end;
    while (i < end) {
      uint32_t lo = t->special_at[p[i]], hi = t->special_at[p[i] + 1];
      int32_t hit = -1;
      for (uint32_t k = lo; k < hi; k++) { /* longest first */
        int32_t id = t->special[k];
        size_t sl = tok_text_len(t, id);
        if (sl <= end - i && memcmp(text + i, t->text + t->text_off[id], sl) == 0) {
          hit = id;
          break;
        }
      }
      if (hit < 0) {
        i++;
        continue;
      }
      if ((rc = encode_segment(&e, ps, text + seg, i - seg)) != GT_OK) goto done;
      if (tok_ids_push(&e.ids, &e.n, &e.cap, hit) != GT_OK) {
        rc = gt_err_set(err, GT_ENOMEM, "tokenizer: out of memory");
        goto done;
      }
      i += tok_text_len(t, hit);
      seg = i;
    }
  }
  rc = encode_segment(&e, ps, text + seg, len - seg);
done:
  tok_pretok_scratch_free(ps);
  tok_bpe_work_free(&e.work);
  if (rc != GT_OK) {
    free(e.ids);
    return rc;
  }
  *ids = e.ids;
  *n = e.n;
  return GT_OK;
}

#define TOK_MAX_TEXT ((size_t)INT32_MAX / 2)

int tok_encode(const tok_t *t, const char *text, size_t len, unsigned flags, int32_t **ids, size_t *n,
               gt_err_t *err) {
  tok_span_t sp = {text, len, flags};
  return tok_encode_spans(t, &sp, 1, ids, n, err);
}

int tok_encode_spans(const tok_t *t, const tok_span_t *spans, size_t n_spans, int32_t **ids, size_t *n,
                     gt_err_t *err) {
  *ids = NULL;
  *n = 0;
  size_t total = 0, nt = 0;
  for (size_t s = 0; s < n_spans; s++) {
    const tok_span_t *sp = &spans[s];
    if (!sp->text && sp->len) return gt_err_set(err, GT_EINVAL, "tok_encode: span %zu: NULL text of length %zu", s, sp->len);
    if (sp->len > TOK_MAX_TEXT - total)
      return gt_err_set(err, GT_ERANGE, "tok_encode: text is too long (max %zu bytes)", TOK_MAX_TEXT);
    size_t bad = gt_utf8_invalid_at(sp->text, sp->len);
    if (bad != sp->len) {
      if (n_spans == 1)
        return gt_err_set(err, GT_EINVAL, "tok_encode: text is not valid UTF-8 at byte %zu (0x%02x)", bad,
                          (unsigned char)sp->text[bad]);
      return gt_err_set(err, GT_EINVAL, "tok_encode: span %zu is not valid UTF-8 at byte %zu (0x%02x)", s, bad,
                        (unsigned char)sp->text[bad]);
    }
    total += sp->len;
    nt += (sp->flags & TOK_SPECIAL) && sp->len;
  }
  if (total == 0) return GT_OK;
  range_t one, *trusted = nt <= 1 ? &one : malloc(nt * sizeof *trusted);
  if (!trusted) return gt_err_set(err, GT_ENOMEM, "tok_encode: out of memory");
  const char *text = NULL;
  char *owned = NULL;
  if (n_spans == 1) {
    text = spans[0].text;
  } else {
    owned = malloc(total);
    if (!owned) {
      if (trusted != &one) free(trusted);
      return gt_err_set(err, GT_ENOMEM, "tok_encode: out of memory (%zu bytes)", total);
    }
    text = owned;
  }
  size_t off = 0, k = 0;
  for (size_t s = 0; s < n_spans; s++) {
    if (owned && spans[s].len) memcpy(owned + off, spans[s].text, spans[s].len);
    if ((spans[s].flags & TOK_SPECIAL) && spans[s].len) trusted[k++] = (range_t){off, off + spans[s].len};
    off += spans[s].len;
  }
  int rc = encode_core(t, text, total, trusted, nt, ids, n, err);
  free(owned);
  if (trusted != &one) free(trusted);
  return rc;
}

/* ---- decoding ---- */

int tok_decode(const tok_t *t, const int32_t *ids, size_t n, unsigned flags, char **out, size_t *len,
               gt_err_t *err) {
  *out = NULL;
  *len = 0;
  size_t total = 0;
  for (size_t i = 0; i < n; i++) {
    if (ids[i] < 0 || (size_t)ids[i] >= t->n_vocab)
      return gt_err_set(err, GT_EINVAL, "tok_decode: token id %d at position %zu out of range (vocab %zu)", ids[i], i,
                        t->n_vocab);
    if ((flags & TOK_SKIP_CONTROL) && t->type[ids[i]] == TOK_TYPE_CONTROL) continue;
    total += t->piece_off[ids[i] + 1] - t->piece_off[ids[i]];
  }
  char *buf = malloc(total + 1);
  if (!buf) return gt_err_set(err, GT_ENOMEM, "tok_decode: out of memory (%zu bytes)", total);
  size_t o = 0;
  for (size_t i = 0; i < n; i++) {
    if ((flags & TOK_SKIP_CONTROL) && t->type[ids[i]] == TOK_TYPE_CONTROL) continue;
    size_t pl = t->piece_off[ids[i] + 1] - t->piece_off[ids[i]];
    memcpy(buf + o, t->piece + t->piece_off[ids[i]], pl);
    o += pl;
  }
  buf[o] = 0;
  *out = buf;
  *len = o;
  return GT_OK;
}
