/* router/auth.h — API key (SHA-256 in Redis hash <prefix>apikeys) -> tenant; admin key. */
#ifndef GANTRY_ROUTER_AUTH_H
#define GANTRY_ROUTER_AUTH_H

#include <stdbool.h>
#include "common/err.h"
#include "router/admission.h"
#include "router/redis_conn.h"

typedef struct auth auth_t;
/* AUTH_DENIED: 401. AUTH_UNAVAILABLE: Redis unreachable, 503. AUTH_NOKEYS: keys are required
 * but none are readable (the keys hash is empty or missing), 503. */
typedef enum { AUTH_OK = 0, AUTH_DENIED, AUTH_UNAVAILABLE, AUTH_NOKEYS } auth_status_t;
#define AUTH_NOKEYS_MSG                                                                 \
  "API keys are required (--auth keys) but none are configured or readable in Redis " \
  "(<prefix>apikeys is empty or missing): add keys, or restore Redis"
typedef void (*auth_cb)(void *arg, auth_status_t st, const char *tenant);
/* required: --auth keys (see auth.c for both modes). */
auth_t *auth_create(rc_t *rc, const char *key_prefix, const char *admin_key, bool required, gt_err_t *err);
void auth_destroy(auth_t *a);
/* Shutdown: the Redis connection is going away; later checks answer AUTH_UNAVAILABLE. */
void auth_detach(auth_t *a);
/* What a route accepts: an API key, the admin key, or either (info routes: /metrics, models). */
typedef enum { AUTH_FOR_API = 0, AUTH_FOR_ADMIN, AUTH_FOR_ANY } auth_for_t;
/* Resolves a key (NULL/"" = none) to a tenant ("admin" for the admin key); cb fires on the loop
 * (at once or later). */
void auth_check(auth_t *a, const char *key, auth_for_t what, auth_cb cb, void *arg);
/* Extracts the key from "Bearer K" (or the raw value); NULL if none. */
const char *auth_bearer(const char *header);

#endif
