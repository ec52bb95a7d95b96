/* router/http_errpage.h — libevent's own HTML error pages (413 body too large, 400 malformed
 * request, 501 method) rewritten into OpenAI JSON errors; see http_errpage.c. */
#ifndef GANTRY_ROUTER_HTTP_ERRPAGE_H
#define GANTRY_ROUTER_HTTP_ERRPAGE_H

#include <stdbool.h>
#include <event2/buffer.h>

#include "router/openai.h"

struct bufferevent;

/* True when this change of a connection's output buffer may be libevent's page: a 4xx/5xx
 * status line written into an empty buffer (then call http_errpage_rewrite once the writer
 * has returned, in the same loop iteration). */
bool http_errpage_candidate(struct evbuffer *b, const struct evbuffer_cb_info *info);
/* When bev's output holds exactly one whole text/html response, replaces it with a JSON error
 * (verdict, when not NULL, instead of the page's own status) and returns 1; else 0. */
int http_errpage_rewrite(struct bufferevent *bev, const oa_error_t *verdict);

#endif
