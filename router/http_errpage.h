/* router/http_errpage.h — libevent's own HTML error pages (413 body too large, 400 malformed
 * request, 501 method) rewritten into OpenAI JSON errors; see http_errpage.c. */
#ifndef GANTRY_ROUTER_HTTP_ERRPAGE_H
#define GANTRY_ROUTER_HTTP_ERRPAGE_H

struct bufferevent;
struct event_base;

/* The evhttp_set_bevcb callback: a socket bufferevent for one incoming connection whose output
 * is watched for libevent's pages. NULL (out of memory) makes libevent use its own. */
struct bufferevent *http_errpage_bev(struct event_base *base, void *arg);

#endif
