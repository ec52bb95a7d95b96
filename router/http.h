/* router/http.h — the OpenAI HTTP gateway and admin routes (evhttp, loop thread). */
#ifndef GANTRY_ROUTER_HTTP_H
#define GANTRY_ROUTER_HTTP_H

#include "common/err.h"

typedef struct router router_t;

/* Binds cfg.http_addr (sets rt->http_port); NULL with err filled on failure. */
struct http_front *http_front_start(router_t *rt, gt_err_t *err);
void http_front_stop(struct http_front *h);

#endif
