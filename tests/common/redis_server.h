/* tests/common/redis_server.h — a real redis-server for one test: started on a free loopback
 * port in its own temp dir (no persistence), stopped and removed at the end; can be killed and
 * restarted on the same port (state lost, like a crash without persistence) for fault tests.
 * Needs the redis-server binary on PATH (or $GANTRY_REDIS_SERVER). */
#ifndef GANTRY_TESTS_REDIS_SERVER_H
#define GANTRY_TESTS_REDIS_SERVER_H

#include <stdbool.h>

#include "common/err.h"

typedef struct rs rs_t;

/* Starts a server and waits (bounded, 10 s) until it answers PING. NULL + err on failure. */
rs_t *rs_start(gt_err_t *err);
/* A replica of master (--replicaof 127.0.0.1 <master port>), same lifecycle as rs_start. */
rs_t *rs_start_replica(const rs_t *master, gt_err_t *err);
/* A redis-sentinel ($GANTRY_REDIS_SENTINEL or redis-sentinel on PATH) monitoring master under
 * `name`, quorum 2, down-after-milliseconds 500, failover-timeout 2000 (start 3 of them). It
 * answers PING when ready; discovering the replica and the peers takes it ~1-2 s more. */
rs_t *rs_start_sentinel(const rs_t *master, const char *name, gt_err_t *err);
int rs_port(const rs_t *rs);
/* True when the server answers ROLE with "master" (a promoted replica does). */
bool rs_is_master(const rs_t *rs);
/* Waits (up to timeout_ms) until each of the n sentinels monitoring `name` sees the replica
 * and n-1 peers, and the replica's first sync is done (so a kill of the master can be failed
 * over). GT_OK or GT_EIO (timed out). */
int rs_wait_failover_ready(rs_t *const *sentinels, int n, const rs_t *replica, const char *name,
                           int timeout_ms);
/* kill -9 the server (connections drop, data is lost). GT_OK or GT_EIO. */
int rs_kill(rs_t *rs);
/* Starts it again on the same port (after rs_kill, or kills it first) and waits for PING. */
int rs_restart(rs_t *rs, gt_err_t *err);
/* Stops the server (SIGTERM, then SIGKILL), removes its directory, frees rs. NULL is a no-op. */
void rs_stop(rs_t *rs);

#endif
