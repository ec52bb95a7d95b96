/* router/dataguard.h — detects Redis data loss and puts back the operator data this router saw.
 *
 * Operator data (API keys <prefix>apikeys, admission limits <prefix>adm:lim:*) lives only in
 * Redis. Admission writes an epoch key (<prefix>adm:epoch) on a fresh Redis; a Redis that lost
 * its data gets a new epoch (or none yet). Every tick (the router calls dg_tick once a second)
 * the guard reads the epoch and, while it is the one it knows, snapshots the operator data.
 * When the epoch changes or disappears it logs at ERROR, counts the loss and writes the last
 * snapshot back into every key that does not exist (a key an operator has re-applied since is
 * left alone), so the last keys and limits stay enforced. Loop thread only. */
#ifndef GANTRY_ROUTER_DATAGUARD_H
#define GANTRY_ROUTER_DATAGUARD_H

#include <stdbool.h>
#include <stdint.h>

#include "common/err.h"
#include "router/redis_conn.h"

typedef struct dg dg_t;

/* rc: the router's own connection (borrowed; dg_detach before it is destroyed). */
dg_t *dg_create(rc_t *rc, const char *key_prefix, gt_err_t *err);
void dg_tick(dg_t *g);
/* fn(arg) runs on each data loss detected, after the restore was sent (the router re-registers
 * its admission entries at once). */
void dg_on_loss(dg_t *g, void (*fn)(void *arg), void *arg);
void dg_detach(dg_t *g);
void dg_destroy(dg_t *g);
/* Data losses detected so far. */
uint64_t dg_losses(const dg_t *g);
/* Entries (hash fields and set members) in the last snapshot. */
uint64_t dg_snapshot_entries(const dg_t *g);
/* This router has seen an epoch in this Redis (evidence of an earlier life if it goes). */
bool dg_seen_epoch(const dg_t *g);

#endif
