/* clients/http.h — the CLI's HTTP side: where the server is and blocking JSON requests.
 * Streaming requests go through gc_run() (clients/bench_run.h). */
#ifndef GANTRY_CLIENTS_HTTP_H
#define GANTRY_CLIENTS_HTTP_H

#include <stddef.h>

#include "common/err.h"

typedef struct gc_http {
  const char *base_url; /* e.g. http://127.0.0.1:8080 (no trailing slash needed) */
  const char *api_key;  /* sent as Authorization: Bearer K; NULL = none */
  long timeout_ms;      /* whole-request limit; 0 = none */
} gc_http_t;

/* Joins base_url and path ("/v1/models") into a malloc'd URL. NULL on OOM. */
char *gc_http_url(const gc_http_t *h, const char *path);

/* Blocking request. method "GET", "POST" or "PUT"; body (JSON text) may be NULL. On a completed
 * exchange returns GT_OK with *status set and *resp a malloc'd NUL-terminated body (caller
 * frees). Transport failures return GT_EIO with the curl message in err. */
int gc_http_do(const gc_http_t *h, const char *method, const char *path, const char *body,
               long *status, char **resp, gt_err_t *err);

/* Adds the Content-Type/Accept/Authorization headers of h to a curl_slist (void* keeps curl
 * out of this header). Returns the new list; NULL on OOM. */
void *gc_http_headers(const gc_http_t *h, int json_body, int sse);

#endif
