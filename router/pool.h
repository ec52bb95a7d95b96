/* router/pool.h — engines per model, health via Health/Info RPCs, least-in-flight choice (loop thread). */
#ifndef GANTRY_ROUTER_POOL_H
#define GANTRY_ROUTER_POOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "common/engine_client.h"
#include "common/grpc_creds.h"
#include "common/err.h"
#include "router/admission.h"
#include "router/mailbox.h"

struct event_base;
typedef struct router router_t;

typedef struct pool_engine {
  char model[ADM_NAME_MAX + 1];
  char target[256];
  ec_client_t *ec;
  bool up;            /* ready: last check succeeded and at most one failure since */
  bool ever_up;
  int fails;          /* consecutive failed checks */
  int inflight;       /* streams open now */
  bool checking;
  uint32_t context_length;
  uint64_t checks_ok, checks_failed;
  bool registered;    /* came from the Redis registry (needs heartbeats) */
  bool stale;         /* registered and its heartbeat is too old: not routable */
  bool draining;      /* its last Health said DRAINING (it finishes its streams, takes no new) */
  bool auth_refused;  /* its last check ended UNAUTHENTICATED: the router's engine token is wrong */
} pool_engine_t;

typedef struct pool pool_t;
/* Fills the security part of an engine link's client options from the router's engine
 * credentials (token, TLS CA / certificate / key) and --engine-tls-name. */
void pool_engine_opts(const gt_rpc_creds_t *cr, const char *tls_name, gt_rpc_client_opts_t *o);
pool_t *pool_create(router_t *rt, struct event_base *base, mbox_t *mb, int health_ms, gt_err_t *err);
int pool_add(pool_t *p, const char *model, const char *target, gt_err_t *err);
void pool_destroy(pool_t *p);
/* A ready engine of model, skipping `avoid`; NULL if none. affinity 0: the fewest in-flight
 * streams. Otherwise (a hash of the prompt's start) the rendezvous-hash choice among the engines
 * within 2 streams of the least loaded, so requests sharing a prefix reuse one engine's cache. */
pool_engine_t *pool_pick(pool_t *p, const char *model, const pool_engine_t *avoid, uint64_t affinity);
/* Affinity key of a request: hash of the first bytes (or token ids) of its input; never 0. */
uint64_t pool_affinity(const Gantry__V1__GenerateRequest *g);
bool pool_has_model(const pool_t *p, const char *model);
bool pool_model_ready(const pool_t *p, const char *model);
/* Every model has a ready engine. */
bool pool_all_ready(const pool_t *p, char *why, size_t n);
int pool_count(const pool_t *p);
pool_engine_t *pool_find(pool_t *p, const char *model, const char *target);
pool_engine_t *pool_at(pool_t *p, int i);
/* Largest known context length of model's engines (0 if unknown). */
uint32_t pool_context(const pool_t *p, const char *model);

#endif
