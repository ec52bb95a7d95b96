/* clients/bench_stats.h — one matrix cell (target x context x concurrency x cold/warm) reduced
 * to the numbers operators read. Rules (DESIGN.md "Telemetry rules"):
 *   decode tok/s per user = 1000 / weighted median per-token interval (ms) pooled over the
 *                           cell's successful streams — never tokens / total time;
 *   total tok/s           = completion tokens of successful streams / cell wall time;
 *   chk                   = decode tok/s per user x concurrency / total tok/s;
 *   prefix hit %          = sum cached_tokens / sum prompt_tokens as the server reported them;
 *   think %               = reasoning tokens / completion tokens. */
#ifndef GANTRY_CLIENTS_BENCH_STATS_H
#define GANTRY_CLIENTS_BENCH_STATS_H

#include "clients/req.h"

typedef struct gc_cell {
  char target[64];
  int context;       /* prompt tokens asked for */
  int concurrency;   /* streams in flight (closed loop) */
  double rate;       /* requests/s in open-loop mode, 0 otherwise */
  int warm;          /* 0 cold, 1 warm */
  int n, n_ok, n_err;
  char first_error[256];
  double wall_s;
  double ttft_p50, ttft_p90, ttfc_p50, e2e_p50; /* ms; -1 = no data */
  double itl_p50;          /* ms per token */
  double decode_tps;       /* per user */
  double total_tps;
  double chk;              /* -1 = undefined */
  double prefix_hit_pct;   /* -1 = server reported no cached_tokens */
  double think_pct;
  long prompt_tokens, cached_tokens, out_tokens, reasoning_tokens;
  double prompt_tokens_mean;
} gc_cell_t;

/* Fills the numbers of c from the n finished requests r (labels in c are left as set by the
 * caller). Returns 0, or GT_ENOMEM. */
int gc_cell_compute(gc_cell_t *c, const gc_req_t *r, int n, double wall_s);

#endif
