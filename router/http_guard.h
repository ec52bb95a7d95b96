/* router/http_guard.h — the HTTP front's limits on connections and request framing, enforced
 * below libevent's evhttp (2.1 has no hook before a request is read whole):
 *   - a total deadline for a request's head (from its first byte) and one for its body (from
 *     the end of the head), whatever the byte rate: 408 and the connection closed;
 *   - the head's size and its number of header fields: 431;
 *   - two Content-Length headers that differ, or Content-Length with Transfer-Encoding: 400;
 *   - open connections: at the global cap the listener stops accepting (the kernel queues new
 *     ones) until one closes; above the cap per client address a connection gets 429, closed;
 *   - accept() failures (out of file descriptors): the listener pauses with back-off (50 ms up
 *     to 1 s), one log line per 10 s, instead of libevent's busy retry.
 * It makes each connection's bufferevent (evhttp_set_bevcb), watches the bytes as they arrive,
 * and turns libevent's own HTML error pages into OpenAI JSON (http_errpage). Loop thread only. */
#ifndef GANTRY_ROUTER_HTTP_GUARD_H
#define GANTRY_ROUTER_HTTP_GUARD_H

#include <stdbool.h>

#include "router/openai.h"

struct event_base;
struct bufferevent;
struct evconnlistener;
struct metrics;

typedef struct http_guard_cfg {
  int head_timeout_ms;    /* first byte of a request -> end of its head */
  int body_timeout_ms;    /* end of the head -> the whole body */
  long max_header_bytes;  /* request line + header fields + the empty line */
  int max_headers;        /* header fields */
  int max_conns;          /* open connections of the front */
  int max_conns_per_addr; /* open connections of one client IP address */
} http_guard_cfg_t;

typedef struct http_guard http_guard_t;

/* NULL when out of memory. m (optional) counts refusals by reason. */
http_guard_t *http_guard_new(struct event_base *base, const http_guard_cfg_t *cfg, struct metrics *m);
/* evhttp's bevcb (arg: the guard): a new connection's bufferevent, watched; NULL when out of
 * memory (libevent then makes its own, unwatched). */
struct bufferevent *http_guard_bev(struct event_base *base, void *arg);
/* The front's listener: the guard pauses it at the connection cap and after accept failures. */
void http_guard_listen(http_guard_t *g, struct evconnlistener *lev);
/* evhttp handed over the request read whole on bev's connection. Returns 0, or the status of a
 * framing error found in its head (431 / 400; e filled): answer that and close. The next
 * request on the connection is watched from here on. */
int http_guard_request(http_guard_t *g, struct bufferevent *bev, oa_error_t *e);
/* Connections open now (tests, metrics). */
int http_guard_open(const http_guard_t *g);
/* After evhttp_free (every connection freed). NULL is a no-op. */
void http_guard_free(http_guard_t *g);

#endif
