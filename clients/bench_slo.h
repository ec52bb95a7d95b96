/* clients/bench_slo.h — service-level objectives and goodput (`gantry bench --slo`).
 * A request meets the SLOs when it succeeded and each objective that is set holds:
 *   ttft_ms  its TTFT <= the bound;
 *   itl_ms   its p99 per-token interval <= the bound (stalls: a preemption or a long prefill
 *            of another request show up here, not in the median);
 *   tpot_ms  its TPOT, (e2e - ttft) / (out_tokens - 1), <= the bound;
 *   e2e_ms   its whole duration <= the bound.
 * A request with a single token has no interval and no TPOT: those two objectives hold. */
#ifndef GANTRY_CLIENTS_BENCH_SLO_H
#define GANTRY_CLIENTS_BENCH_SLO_H

#include "clients/bench_stats.h"
#include "clients/req.h"
#include "common/err.h"

typedef struct gc_slo {
  double ttft_ms, itl_ms, tpot_ms, e2e_ms; /* < 0 = not set */
} gc_slo_t;

/* Parses "ttft_ms=500,itl_ms=50,tpot_ms=40,e2e_ms=10000" (any subset, at least one, each
 * positive, no repeats). GT_OK, or GT_EINVAL with a message naming the bad part. */
int gc_slo_parse(const char *s, gc_slo_t *slo, gt_err_t *err);
/* 1 when at least one objective is set. */
int gc_slo_any(const gc_slo_t *slo);
/* 1 when r meets every objective that is set (see above). */
int gc_slo_met(const gc_slo_t *slo, const gc_req_t *r);
/* Writes the objectives as "ttft_ms=500,tpot_ms=40" into buf (the set ones, in that order). */
void gc_slo_format(const gc_slo_t *slo, char *buf, size_t cap);
/* Fills c's goodput fields from the n requests r of the cell (c->wall_s must be set): n_good,
 * good_pct (of all n requests, failures count as misses) and good_rps (n_good / wall_s).
 * Without any objective set, slo_set is 0 and the fields stay -1. */
void gc_cell_goodput(gc_cell_t *c, const gc_req_t *r, int n, const gc_slo_t *slo);

#endif
