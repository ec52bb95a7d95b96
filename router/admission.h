/* router/admission.h — Redis-backed admission control: a bounded fair queue per model pool
 * with global (pool) and per-tenant concurrency caps that operators change at run time.
 * Data model, fairness algorithm and recovery rules: router/ADMISSION.md.
 *
 * Threading: an adm_t lives on one libevent loop (the router's); every function must be called
 * on that loop's thread, and every callback runs there. Nothing blocks: Redis is reached through
 * two async connections (commands/scripts, and a blocking BLPOP on this router's ticket list
 * for wake-ups). The loop must be running for anything to progress.
 *
 * Request lifecycle: adm_request -> exactly one adm_cb call (unless adm_cancel comes first):
 *   ADMITTED(lease_id)       -> caller owns a lease; it MUST call adm_release(lease_id) on every
 *                               exit path (finish, error, client gone, engine failure, timeout)
 *                               and should call adm_touch while tokens flow.
 *   REJECTED_FULL(retry_s)   -> queue full: HTTP 429 with Retry-After: retry_s.
 *   TIMEOUT                  -> waited longer than queue_timeout_ms: HTTP 503.
 *   ERROR(msg)               -> Redis script failure: HTTP 503.
 * While Redis is unreachable requests wait locally (still bounded by queue_timeout_ms) and are
 * queued in Redis on reconnect; held leases are re-registered (see ADMISSION.md). */
#ifndef GANTRY_ROUTER_ADMISSION_H
#define GANTRY_ROUTER_ADMISSION_H

#include <stdbool.h>
#include <stdint.h>

#include "common/err.h"

struct event_base;
typedef struct adm adm_t;

#define ADM_NAME_MAX 128 /* longest model / tenant / request id, bytes */

typedef enum { ADM_PRIO_INTERACTIVE = 0, ADM_PRIO_BATCH = 1 } adm_prio_t;

typedef enum {
  ADM_ADMITTED = 0,
  ADM_REJECTED_FULL, /* -> 429 + Retry-After */
  ADM_TIMEOUT,       /* -> 503 */
  ADM_ERROR,         /* -> 503 */
} adm_status_t;

typedef struct adm_result {
  adm_status_t status;
  uint64_t ticket;       /* what adm_request returned */
  const char *lease_id;  /* ADMITTED: valid until adm_release(lease_id) returns */
  int retry_after_s;     /* REJECTED_FULL */
  const char *msg;       /* ERROR (and a short reason otherwise); valid during the call */
  double wait_ms;        /* time from adm_request to this result */
} adm_result_t;

/* Result callback; runs on the loop thread. It may call adm_release / adm_request / adm_cancel
 * (not adm_destroy). */
typedef void (*adm_cb)(void *arg, const adm_result_t *res);

typedef struct adm_config {
  const char *redis_host;   /* default "127.0.0.1" */
  int redis_port;           /* default 6379 */
  const char *redis_sentinels;   /* "host:port,..." : find the master through Sentinel; NULL = off */
  const char *redis_master_name; /* the Sentinel master name (needed with redis_sentinels) */
  const char *router_id;    /* prefix of this instance's id (a random suffix is added) */
  const char *key_prefix;   /* Redis key prefix, default "gantry:adm:" */
  int lease_ttl_ms;         /* lease / waiting-entry TTL, default 15000 (>= 300) */
  int queue_timeout_ms;     /* max wait in the queue, default 30000 */
  int hold_ms;              /* admissions paused after a fresh Redis; default lease_ttl_ms */
  int default_max_inflight; /* pool cap when no limit is set, default 64 */
  int default_max_queued;   /* pool queue bound when none is set, default 1024 */
} adm_config_t;

/* Counters for /metrics (monotonic unless marked "now"). */
#define ADM_WAIT_BUCKETS 10
extern const double adm_wait_bucket_ms[ADM_WAIT_BUCKETS]; /* upper bounds; last is +inf */
typedef struct adm_stats {
  uint64_t requested, admitted, rejected_full, timeouts, errors, cancelled, released;
  uint64_t reaped_leases, reaped_waiting; /* reclaimed by this router's reaper (others died) */
  uint64_t restored_leases, restored_waiting; /* re-registered after Redis lost them */
  uint64_t redis_reconnects;  /* connects after the first, on the command connection */
  uint64_t stale_tickets;     /* wake-ups for requests no longer waiting */
  uint64_t late_tickets;      /* admissions found by a heartbeat before their ticket came */
  uint64_t wait_count;        /* admissions with a measured wait */
  double wait_ms_sum, wait_ms_max;
  uint64_t wait_hist[ADM_WAIT_BUCKETS]; /* admissions with wait <= adm_wait_bucket_ms[i] (not cumulative) */
  uint32_t waiting_now, held_now;       /* now: local requests waiting / leases held */
  uint32_t releasing_now;               /* now: releases not yet confirmed by Redis (a graceful
                                           shutdown releases its leases and runs the loop until
                                           this is 0 before adm_destroy) */
  bool redis_up;                        /* now: command connection established */
  uint32_t routers_alive;               /* now: routers alive in Redis at this router's last
                                           answered heartbeat, itself included (0: none yet); the
                                           ones a hold after a data loss waits for */
} adm_stats_t;

/* Creates an admission client on base and starts connecting to Redis (a refused connection is
 * retried, not an error). Copies cfg. Returns NULL and fills err on bad config or no memory. */
adm_t *adm_create(struct event_base *base, const adm_config_t *cfg, gt_err_t *err);

/* Frees the client at once WITHOUT releasing leases or dequeuing waiting requests (they are
 * reclaimed by any router's reaper within the lease TTL); pending callbacks never fire. A
 * graceful caller releases its leases first. Not from inside an adm callback. */
void adm_destroy(adm_t *adm);

/* This instance's id ("<router_id>:<hex>"): names its ticket list and prefixes its lease ids. */
const char *adm_instance_id(const adm_t *adm);

/* Queues a request for (model, tenant) at priority prio. Strings are copied; names are 1..128
 * printable bytes without ':' '*' or spaces (request_id: any printable, may be empty).
 * Returns a ticket (> 0) and cb fires exactly once later (never inside this call); or 0 on
 * invalid arguments / no memory (err filled, cb never fires). */
uint64_t adm_request(adm_t *adm, const char *model, const char *tenant, adm_prio_t prio,
                     const char *request_id, adm_cb cb, void *arg, gt_err_t *err);

/* Client gone while queued: drops the request; its callback will not fire. If it was admitted
 * already (callback fired), this releases the lease. GT_ENOTFOUND for an unknown / finished
 * ticket. */
int adm_cancel(adm_t *adm, uint64_t ticket);

/* Releases a lease (idempotent: releasing twice, or an unknown id, is GT_OK). The slot goes to
 * the next waiting request at once. If Redis is down the release is retried on reconnect.
 * GT_EINVAL for a malformed id. */
int adm_release(adm_t *adm, const char *lease_id);

/* Marks the lease alive (call per token batch): cheap, sends at most one renewal per TTL/4.
 * GT_ENOTFOUND if this router holds no such lease. */
int adm_touch(adm_t *adm, const char *lease_id);

/* Copies the counters. */
void adm_stats(const adm_t *adm, adm_stats_t *out);

/* ---- operator API (admin endpoints) ---- */

/* A limits update: set only the fields whose has_ flag is true. */
typedef struct adm_limits {
  bool has_max_inflight, has_max_queued, has_weight;
  int64_t max_inflight; /* >= 0 (0 pauses admission) */
  int64_t max_queued;   /* >= 0 */
  double weight;        /* > 0, tenants only */
} adm_limits_t;

/* Completion of an async operator call: status GT_OK or a GT_E* code with msg. */
typedef void (*adm_done_cb)(void *arg, int status, const char *msg);

/* Stores limits for a pool (tenant NULL or "") or a tenant of it (tenant "*": default for the
 * pool's tenants) and admits what the new limits allow at once; the change is logged. Returns
 * GT_OK (cb fires later) or GT_EINVAL / GT_EIO (Redis down) with err filled (cb never fires). */
int adm_limits_set(adm_t *adm, const char *model, const char *tenant, const adm_limits_t *lim,
                   adm_done_cb cb, void *arg, gt_err_t *err);

/* Parses an operator JSON body {"model":M,"tenant":T?,"max_inflight":N?,"max_queued":N?,
 * "weight":W?} (at least one number). model/tenant are written to caller buffers of
 * ADM_NAME_MAX+1 bytes (tenant "" when absent). GT_OK or GT_EINVAL with err filled. */
int adm_limits_parse_json(const char *json, char *model, char *tenant, adm_limits_t *lim,
                          gt_err_t *err);

/* Effective limits (defaults applied) of a pool (tenant NULL/"") or tenant. */
typedef void (*adm_limits_cb)(void *arg, int status, const char *msg, const adm_limits_t *lim);
int adm_limits_get(adm_t *adm, const char *model, const char *tenant, adm_limits_cb cb, void *arg,
                   gt_err_t *err);

/* One row of GET /admin/queues: a pool (tenant "") or a tenant of a pool. */
typedef struct adm_queue_row {
  char model[ADM_NAME_MAX + 1], tenant[ADM_NAME_MAX + 1];
  int64_t queued, inflight, max_inflight, max_queued;
  double weight;
} adm_queue_row_t;
/* rows valid during the call only. model NULL/"" lists every pool. */
typedef void (*adm_queues_cb)(void *arg, int status, const char *msg, const adm_queue_row_t *rows,
                              int nrows);
int adm_queues_list(adm_t *adm, const char *model, adm_queues_cb cb, void *arg, gt_err_t *err);

/* Re-registers now every lease and waiting entry this router holds (one heartbeat): the
 * router calls it when it detects a Redis data loss (dataguard), so a hold after the loss ends
 * as soon as the live routers are back, not after a heartbeat period. */
void adm_reregister(adm_t *adm);

#endif
