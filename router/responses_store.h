/* router/responses_store.h — stored /v1/responses records in Redis: key "<prefix>resp:<id>",
 * value the record JSON (oa_resp_record: tenant, response, items), with a TTL. The tenant check
 * is the caller's (oa_record_parse). Loop thread only; rc may be NULL (the router is stopping):
 * then every call fails at once with GT_EIO and no callback. */
#ifndef GANTRY_ROUTER_RESPONSES_STORE_H
#define GANTRY_ROUTER_RESPONSES_STORE_H

#include <stddef.h>
#include "router/redis_conn.h"

typedef enum { RSTORE_OK = 0, RSTORE_MISSING = 1, RSTORE_UNAVAILABLE = 2 } rstore_status_t;
/* rec: the record (valid during the call only) when st is RSTORE_OK. */
typedef void (*rstore_get_cb)(void *arg, rstore_status_t st, const char *rec, size_t len);
typedef void (*rstore_del_cb)(void *arg, rstore_status_t st);

/* GET; GT_OK (cb comes once) or GT_EIO (not connected: no callback). */
int rstore_get(rc_t *rc, const char *prefix, const char *id, rstore_get_cb cb, void *arg);
/* SET with EX ttl_s, fire and forget (a failure is logged). Commands on one connection run in
 * order, so a later rstore_get on rc sees it. */
int rstore_put(rc_t *rc, const char *prefix, const char *id, const char *rec, int ttl_s);
/* DEL; cb with RSTORE_OK when a key was deleted, RSTORE_MISSING when there was none. */
int rstore_del(rc_t *rc, const char *prefix, const char *id, rstore_del_cb cb, void *arg);

#endif
