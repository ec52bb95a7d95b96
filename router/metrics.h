/* router/metrics.h — gantry_router_* counters and the Prometheus text. */
#ifndef GANTRY_ROUTER_METRICS_H
#define GANTRY_ROUTER_METRICS_H

#include "router/admission.h"
#include "router/pool.h"

typedef struct metrics metrics_t;
metrics_t *metrics_create(void);
void metrics_destroy(metrics_t *m);
void metrics_request(metrics_t *m, const char *route, int status);
/* gantry_router_requests_total{route,status} so far (loop thread; for tests in the process). */
uint64_t metrics_requests(const metrics_t *m, const char *route, int status);
void metrics_reject(metrics_t *m, const char *reason);
/* Router-side latency of one request of model: time to its first token, and end to end (from
 * arrival at the router to the final message), seconds. */
typedef enum { METRICS_TTFT = 0, METRICS_E2E, METRICS_N_LAT } metrics_lat_t;
void metrics_observe(metrics_t *m, metrics_lat_t which, const char *model, double seconds);
/* Dataguard state: Redis data losses detected so far, entries in its last snapshot. */
void metrics_set_dataguard(metrics_t *m, uint64_t losses, uint64_t snapshot_entries);
/* gRPC front: output queued for its clients and not yet taken by the transport, bytes. */
void metrics_set_grpc_unsent(metrics_t *m, size_t bytes);
/* Prometheus text (malloc'd) of counters + admission stats + engines + queue rows. */
char *metrics_render(metrics_t *m, const adm_stats_t *as, pool_t *p, const adm_queue_row_t *rows, int nrows);

#endif
