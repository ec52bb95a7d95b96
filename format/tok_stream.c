/* format/tok_stream.c — streaming decoder that emits only complete, valid UTF-8. */
#include <stdlib.h>
#include <string.h>

#include "format/tok_internal.h"
#include "format/tok_utf8.h"

static const char REPLACEMENT[3] = {(char)0xEF, (char)0xBF, (char)0xBD}; /* U+FFFD */

void tok_stream_init(tok_stream_t *s, const tok_t *t, unsigned flags) {
  memset(s, 0, sizeof *s);
  s->t = t;
  s->flags = flags;
}

void tok_stream_free(tok_stream_t *s) {
  free(s->buf);
  s->buf = NULL;
  s->cap = 0;
  s->ntail = 0;
}

static int reserve(tok_stream_t *s, size_t need, gt_err_t *err) {
  if (need <= s->cap) return GT_OK;
  size_t nc = s->cap ? s->cap : 64;
  while (nc < need) nc *= 2;
  char *nb = realloc(s->buf, nc);
  if (!nb) return gt_err_set(err, GT_ENOMEM, "tok_stream: out of memory");
  s->buf = nb;
  s->cap = nc;
  return GT_OK;
}

int tok_stream_push(tok_stream_t *s, int32_t id, const char **text, size_t *len, gt_err_t *err) {
  *text = "";
  *len = 0;
  size_t pl;
  const char *piece = tok_piece(s->t, id, &pl);
  if (!piece) return gt_err_set(err, GT_EINVAL, "tok_stream: token id %d out of range", id);
  if ((s->flags & TOK_SKIP_CONTROL) && tok_is_control(s->t, id)) return GT_OK;
  /* Worst case every byte becomes U+FFFD (3 bytes). Input = held tail + piece. */
  size_t in_n = s->ntail + pl;
  int rc = reserve(s, 3 * in_n + 1 + in_n, err);
  if (rc != GT_OK) return rc;
  /* Stage the input after the output area so that both live in one buffer. */
  unsigned char *in = (unsigned char *)s->buf + 3 * in_n + 1;
  memcpy(in, s->tail, s->ntail);
  memcpy(in + s->ntail, piece, pl);
  size_t o = 0, i = 0;
  s->ntail = 0;
  while (i < in_n) {
    if (in[i] < 0x80) {
      s->buf[o++] = (char)in[i++];
      continue;
    }
    uint32_t cp;
    size_t adv = 1;
    int l = gt_utf8_next(in + i, in_n - i, &cp, &adv);
    if (l > 0) {
      memcpy(s->buf + o, in + i, (size_t)l);
      o += (size_t)l;
      i += (size_t)l;
    } else if (l == GT_UTF8_INCOMPLETE) { /* hold the prefix for the next token (<= 3 bytes) */
      s->ntail = in_n - i;
      memcpy(s->tail, in + i, s->ntail);
      i = in_n;
    } else {
      memcpy(s->buf + o, REPLACEMENT, 3);
      o += 3;
      i += adv;
    }
  }
  s->buf[o] = 0;
  *text = s->buf;
  *len = o;
  return GT_OK;
}

int tok_stream_flush(tok_stream_t *s, const char **text, size_t *len, gt_err_t *err) {
  *text = "";
  *len = 0;
  if (!s->ntail) return GT_OK;
  int rc = reserve(s, 4, err);
  if (rc != GT_OK) return rc;
  memcpy(s->buf, REPLACEMENT, 3);
  s->buf[3] = 0;
  s->ntail = 0;
  *text = s->buf;
  *len = 3;
  return GT_OK;
}
