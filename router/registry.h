/* router/registry.h — engines registered in Redis (polling) and the `register` heartbeat sidecar. */
#ifndef GANTRY_ROUTER_REGISTRY_H
#define GANTRY_ROUTER_REGISTRY_H

#include "common/err.h"

typedef struct router router_t;

typedef struct registry registry_t;
registry_t *registry_start(router_t *rt, int period_ms, int stale_ms, gt_err_t *err);
void registry_stop(registry_t *g);  /* stops polling */
void registry_free(registry_t *g);  /* after rc_destroy */
/* `gantry-router register ...`: heartbeat sidecar (blocking; main only). Returns an exit code. */
int registry_sidecar(int argc, char **argv);

#endif
