/* clients/sse.c — SSE framing: lines end in \n, \r\n or \r; a blank line ends an event. */
#include "clients/sse.h"

#include <stdlib.h>
#include <string.h>

#include "common/err.h"

void gc_sse_init(gc_sse_t *p, gc_sse_cb cb, void *ud) {
  memset(p, 0, sizeof *p);
  p->cb = cb;
  p->ud = ud;
}

void gc_sse_free(gc_sse_t *p) {
  free(p->line);
  free(p->data);
  p->line = p->data = NULL;
  p->line_len = p->line_cap = p->data_len = p->data_cap = 0;
}

static int grow(char **b, size_t *cap, size_t need) {
  if (need <= *cap) return 0;
  size_t c = *cap ? *cap : 256;
  while (c < need) c *= 2;
  char *nb = realloc(*b, c);
  if (!nb) return -1;
  *b = nb;
  *cap = c;
  return 0;
}

static int dispatch(gc_sse_t *p) {
  if (!p->has_data) return 0;
  if (grow(&p->data, &p->data_cap, p->data_len + 1)) return GT_ENOMEM;
  p->data[p->data_len] = 0;
  size_t n = p->data_len;
  p->data_len = 0;
  p->has_data = 0;
  return p->cb ? p->cb(p->ud, p->data, n) : 0;
}

/* One complete line (without its terminator). */
static int on_line(gc_sse_t *p, const char *l, size_t n) {
  if (n == 0) return dispatch(p);
  if (l[0] == ':') return 0; /* comment */
  const char *colon = memchr(l, ':', n);
  size_t flen = colon ? (size_t)(colon - l) : n;
  if (flen != 4 || memcmp(l, "data", 4) != 0) return 0; /* event:, id:, retry: ignored */
  const char *v = colon ? colon + 1 : l + n;
  size_t vlen = (size_t)(l + n - v);
  if (vlen && *v == ' ') v++, vlen--;
  size_t need = p->data_len + vlen + 2;
  if (grow(&p->data, &p->data_cap, need)) return GT_ENOMEM;
  if (p->has_data) p->data[p->data_len++] = '\n';
  memcpy(p->data + p->data_len, v, vlen);
  p->data_len += vlen;
  p->has_data = 1;
  return 0;
}

int gc_sse_feed(gc_sse_t *p, const char *buf, size_t len) {
  if (p->oom) return GT_ENOMEM;
  size_t i = 0;
  while (i < len) {
    if (p->skip_lf) {
      p->skip_lf = 0;
      if (buf[i] == '\n') {
        i++;
        continue;
      }
    }
    /* find the next line terminator */
    size_t j = i;
    while (j < len && buf[j] != '\n' && buf[j] != '\r') j++;
    if (j == len) { /* partial line: keep it */
      if (grow(&p->line, &p->line_cap, p->line_len + (j - i) + 1)) return p->oom = 1, GT_ENOMEM;
      memcpy(p->line + p->line_len, buf + i, j - i);
      p->line_len += j - i;
      break;
    }
    int rc;
    if (p->line_len) {
      if (grow(&p->line, &p->line_cap, p->line_len + (j - i) + 1)) return p->oom = 1, GT_ENOMEM;
      memcpy(p->line + p->line_len, buf + i, j - i);
      p->line_len += j - i;
      size_t n = p->line_len;
      p->line_len = 0;
      rc = on_line(p, p->line, n);
    } else {
      rc = on_line(p, buf + i, j - i);
    }
    if (buf[j] == '\r') p->skip_lf = 1;
    i = j + 1;
    if (rc == GT_ENOMEM) return p->oom = 1, rc;
    if (rc) return rc;
  }
  return 0;
}

int gc_sse_finish(gc_sse_t *p) {
  int rc = 0;
  if (p->line_len) {
    size_t n = p->line_len;
    p->line_len = 0;
    rc = on_line(p, p->line, n);
    if (rc) return rc;
  }
  return dispatch(p);
}
