/* clients/sse.h — Server-Sent Events framing (text/event-stream), incremental.
 * Bytes go in as they arrive (any split); each complete event's data (its `data:` lines joined
 * with '\n') comes out through a callback. Comments and other fields are ignored. */
#ifndef GANTRY_CLIENTS_SSE_H
#define GANTRY_CLIENTS_SSE_H

#include <stddef.h>

/* Called once per complete event with its data (NUL-terminated, len excludes the NUL); the
 * buffer is only valid during the call. Return 0 to continue, nonzero to stop feeding. */
typedef int (*gc_sse_cb)(void *ud, const char *data, size_t len);

typedef struct gc_sse {
  char *line;     /* partial line carried between feeds (malloc'd) */
  size_t line_len, line_cap;
  char *data;     /* data of the event being assembled (malloc'd) */
  size_t data_len, data_cap;
  int has_data;   /* a data: field was seen in the current event */
  int skip_lf;    /* last byte was '\r': a following '\n' belongs to the same line end */
  int oom;        /* an allocation failed; further input is dropped */
  gc_sse_cb cb;
  void *ud;
} gc_sse_t;

/* Initialises a parser (no allocation yet). */
void gc_sse_init(gc_sse_t *p, gc_sse_cb cb, void *ud);
/* Feeds bytes. Returns 0, the callback's nonzero value if it asked to stop, or GT_ENOMEM. */
int gc_sse_feed(gc_sse_t *p, const char *buf, size_t len);
/* End of stream: a final event not closed by a blank line is still delivered (lenient). */
int gc_sse_finish(gc_sse_t *p);
/* Frees the parser's buffers (the struct itself is the caller's). */
void gc_sse_free(gc_sse_t *p);

#endif
