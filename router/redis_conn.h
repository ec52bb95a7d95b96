/* router/redis_conn.h — one Redis connection on a libevent loop (hiredis async + libevent
 * adapter) that reconnects by itself, and runs Lua scripts by SHA.
 *
 * - rc_create starts connecting at once; when the connection drops (Redis restarted, network)
 *   it reconnects with exponential backoff (backoff_min_ms doubling up to backoff_max_ms) and
 *   reports each transition through the state callback, on the loop thread.
 * - Scripts are registered once (rc_script_add) and loaded with SCRIPT LOAD on every connect;
 *   rc_eval sends EVALSHA, or EVAL with the source while the SHA is not known yet. A NOSCRIPT
 *   reply (script cache flushed, Redis restarted) re-sends the call as EVAL, which also
 *   re-loads the script, and the SHA stays valid for the next calls.
 * - Commands are only accepted while connected: otherwise they fail at once with GT_EIO and
 *   their callback is not called. A command's callback is called exactly once, with the reply
 *   or with reply NULL and a message when the connection dropped before the reply came.
 * - With sentinels configured (rc_config_t.sentinels) each connect attempt resolves the current
 *   master first, so a promotion is followed by the ordinary reconnect path: the state callback
 *   reports down then up (re-register there), scripts are re-loaded on the new master.
 * Single-threaded: every function must be called on the loop thread. */
#ifndef GANTRY_ROUTER_REDIS_CONN_H
#define GANTRY_ROUTER_REDIS_CONN_H

#include <stdbool.h>
#include <stddef.h>

#include <hiredis/hiredis.h>

#include "common/err.h"

struct event_base;
typedef struct rc rc_t;

/* Called with up=true after each successful connect (scripts are being loaded, commands may
 * be sent from inside the callback) and up=false when an established connection drops. */
typedef void (*rc_state_cb)(void *arg, bool up);
/* Reply callback: r is the reply (owned by the connection, valid during the call only; may be
 * an error reply) or NULL with err set when no reply will come. */
typedef void (*rc_reply_cb)(void *arg, redisReply *r, const char *err);

typedef struct rc_config {
  const char *host; /* e.g. "127.0.0.1" */
  int port;
  const char *name;   /* for logs, e.g. "adm-main" */
  int backoff_min_ms; /* first reconnect delay (default 20) */
  int backoff_max_ms; /* longest reconnect delay (default 1000) */
  int connect_timeout_ms; /* give up one connect attempt after this (default 1000) */
  /* Redis Sentinel (optional): "host:port,host:port" and the master's name. When set, host/port
   * are ignored and every connect attempt first asks the sentinels for the master
   * (redis_sentinel.h, blocking, sentinel_timeout_ms per step, default 200). A READONLY reply
   * (the master was demoted) drops the connection so the next attempt asks again. */
  const char *sentinels;
  const char *master_name;
  int sentinel_timeout_ms;
} rc_config_t;

/* Creates the connection and starts connecting. cfg strings are copied. Returns NULL and fills
 * err on bad arguments or allocation failure (a refused connection is not an error: it is
 * retried). The state callback may be NULL. */
rc_t *rc_create(struct event_base *base, const rc_config_t *cfg, rc_state_cb on_state, void *arg,
                gt_err_t *err);

/* Registers a script source (copied) and returns its index (>= 0) or a negative GT_E* code. */
int rc_script_add(rc_t *rc, const char *src, gt_err_t *err);

/* Runs script idx with nkeys keys followed by args: argv[0..argc) (argvlen NULL means
 * NUL-terminated strings; arguments are copied). Returns GT_OK (cb will be called once) or
 * GT_EIO when not connected (cb is not called). */
int rc_eval(rc_t *rc, int idx, int nkeys, int argc, const char **argv, const size_t *argvlen,
            rc_reply_cb cb, void *arg);

/* Sends a plain command (argv[0] is the command name). Same contract as rc_eval. */
int rc_command(rc_t *rc, int argc, const char **argv, const size_t *argvlen, rc_reply_cb cb,
               void *arg);

bool rc_connected(const rc_t *rc);
/* Number of successful connects so far (1 after the first). */
unsigned rc_connects(const rc_t *rc);

/* Closes the connection and frees everything. Callbacks of commands still in flight are called
 * once more with r NULL and err "destroyed": they must only free what they own. Must not be
 * called from inside a callback of this connection. */
void rc_destroy(rc_t *rc);

#endif
