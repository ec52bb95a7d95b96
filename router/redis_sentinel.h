/* router/redis_sentinel.h — finds the current Redis master through Redis Sentinel.
 *
 * The sentinel list is "host:port,host:port,..." (at most RSENT_MAX entries). rsent_resolve asks
 * each sentinel in turn `SENTINEL get-master-addr-by-name NAME` over a short-lived blocking
 * connection (connect + reply bounded by timeout_ms each) and returns the first answer. The
 * answer is then checked by asking that address `ROLE` (same bound): a sentinel that has not yet
 * seen a promotion may still name the dead or demoted master, so an address whose ROLE is not
 * "master" is skipped and the next sentinel is asked. Worst case it blocks
 * 2 * nsentinels * timeout_ms; callers on an event loop keep timeout_ms small (default 200). */
#ifndef GANTRY_ROUTER_REDIS_SENTINEL_H
#define GANTRY_ROUTER_REDIS_SENTINEL_H

#include <stddef.h>

#include "common/err.h"

#define RSENT_MAX 16

/* Checks the list syntax (non-empty, each entry HOST:PORT with port in 1..65535). */
int rsent_check(const char *sentinels, gt_err_t *err);

/* Fills host (NUL-terminated, at most hostsz-1 chars) and *port with the master the sentinels
 * name for master_name, confirmed by ROLE. GT_OK, or GT_EIO with a message naming what failed
 * (no sentinel answered / no confirmed master). */
int rsent_resolve(const char *sentinels, const char *master_name, int timeout_ms, char *host,
                  size_t hostsz, int *port, gt_err_t *err);

#endif
