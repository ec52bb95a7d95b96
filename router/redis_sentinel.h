/* router/redis_sentinel.h — finds the current Redis master through Redis Sentinel.
 *
 * The sentinel list is "host:port,host:port,..." (at most RSENT_MAX entries). rsent_resolve asks
 * each sentinel in turn `SENTINEL get-master-addr-by-name NAME` over a short-lived blocking
 * connection (connect + reply bounded by timeout_ms each). An answer naming an address other
 * than prev (the one the caller last used; NULL/0 = none) is checked by asking it `ROLE` (same
 * bound) and returned when that says "master": a sentinel that has not seen a promotion yet still
 * names the dead or demoted master, then the next sentinel is asked. When every answer names
 * prev itself (no failover happened: the master restarted in place, or the sentinels have not
 * agreed yet) prev is returned unchecked, for the caller's ordinary reconnect to try. The dead
 * address is never dialled here, so a blackholed master costs nothing; an unreachable sentinel
 * costs timeout_ms (default 200): callers on an event loop keep it small.
 */
#ifndef GANTRY_ROUTER_REDIS_SENTINEL_H
#define GANTRY_ROUTER_REDIS_SENTINEL_H

#include <stddef.h>

#include "common/err.h"

#define RSENT_MAX 16

/* Checks the list syntax (non-empty, each entry HOST:PORT with port in 1..65535). */
int rsent_check(const char *sentinels, gt_err_t *err);

/* Fills host (NUL-terminated, at most hostsz-1 chars) and *port with the master the sentinels
 * name for master_name (confirmed by ROLE unless it is prev, see above). GT_OK, or GT_EIO with a message naming what failed
 * (no sentinel answered / no confirmed master). */
int rsent_resolve(const char *sentinels, const char *master_name, int timeout_ms,
                  const char *prev_host, int prev_port, char *host, size_t hostsz, int *port,
                  gt_err_t *err);

#endif
