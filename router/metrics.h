/* router/metrics.h — gantry_router_* counters and the Prometheus text. */
#ifndef GANTRY_ROUTER_METRICS_H
#define GANTRY_ROUTER_METRICS_H

#include "router/admission.h"
#include "router/pool.h"

typedef struct metrics metrics_t;
metrics_t *metrics_create(void);
void metrics_destroy(metrics_t *m);
void metrics_request(metrics_t *m, const char *route, int status);
void metrics_reject(metrics_t *m, const char *reason);
/* Prometheus text (malloc'd) of counters + admission stats + engines + queue rows. */
char *metrics_render(metrics_t *m, const adm_stats_t *as, pool_t *p, const adm_queue_row_t *rows, int nrows);

#endif
