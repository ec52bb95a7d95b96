/* router/http.h — the OpenAI HTTP gateway and admin routes (evhttp, loop thread). */
#ifndef GANTRY_ROUTER_HTTP_H
#define GANTRY_ROUTER_HTTP_H

#include "common/err.h"

typedef struct router router_t;

/* Binds cfg.http_addr (sets rt->http_port); NULL with err filled on failure. */
struct http_front *http_front_start(router_t *rt, gt_err_t *err);
/* Closes every connection; a request still waiting on Redis (admin routes, /metrics) or on an
 * engine's (De)Tokenize answer is answered 503 and dropped with it, and freed by its callback or
 * http_front_free. */
void http_front_stop(struct http_front *h);
/* Stops h if needed and frees it, after adm_destroy dropped the callbacks still due. NULL: no-op. */
void http_front_free(struct http_front *h);
/* Requests waiting on an admission (Redis) callback or a (De)Tokenize answer and not yet dropped
 * (any thread; for tests). */
int http_front_adm_waiting(struct http_front *h);

#endif
