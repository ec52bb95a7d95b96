/* clients/bench_stats.h — one matrix cell (target x context x concurrency x cold/warm) reduced
 * to the numbers operators read. Rules (DESIGN.md "Telemetry rules"):
 *   decode tok/s per user = 1000 / weighted median per-token interval (ms) pooled over the
 *                           cell's successful streams — never tokens / total time;
 *   total tok/s           = completion tokens of successful streams / cell wall time;
 *   chk                   = decode tok/s per user x concurrency / total tok/s;
 *   prefix hit %          = sum cached_tokens / sum prompt_tokens as the server reported them;
 *   think %               = reasoning tokens / completion tokens;
 *   TPOT                  = per request (e2e - ttft) / (out_tokens - 1), percentiles over requests;
 *   implausible           = a cell whose median per-token interval is itself a burst: at least
 *                           GC_BURST_FLAG_PCT % of the intervals (token-weighted) are under
 *                           GC_BURST_MS (> 10,000 tok/s per user). No decoder streams like that;
 *                           something between the engine and the client's clock buffered the
 *                           stream (a proxy, the server's writes, or a client that got no CPU), so
 *                           ITL p50 / decode tok/s are not decode speed. Fewer bursts only thin the
 *                           low tail (burst_pct says how many); TPOT never depends on them. */
#ifndef GANTRY_CLIENTS_BENCH_STATS_H
#define GANTRY_CLIENTS_BENCH_STATS_H

#include "clients/req.h"

#define GC_BURST_MS 0.1        /* a per-token interval shorter than this is a burst */
#define GC_BURST_FLAG_PCT 50.0 /* share of burst intervals (by tokens) that flags a cell */

typedef struct gc_cell {
  char target[64];
  int context;       /* prompt tokens asked for */
  int concurrency;   /* streams in flight (closed loop) */
  double rate;       /* requests/s in open-loop mode, 0 otherwise */
  int warm;          /* 0 cold, 1 warm */
  int dataset;       /* 1: prompts replayed from --dataset (context 0, mode "data") */
  int n, n_ok, n_err;
  char first_error[256];
  double wall_s;
  double ttft_p50, ttft_p90, ttft_p99, ttfc_p50, e2e_p50; /* ms; -1 = no data */
  double itl_p50, itl_p90, itl_p99; /* ms per token, pooled over streams, token-weighted */
  double tpot_p50, tpot_p90, tpot_p99; /* ms, over requests with >= 2 tokens */
  double decode_tps;       /* per user */
  double total_tps;
  double chk;              /* -1 = undefined */
  double prefix_hit_pct;   /* -1 = server reported no cached_tokens */
  double think_pct;
  long prompt_tokens, cached_tokens, out_tokens, reasoning_tokens;
  double prompt_tokens_mean;
  double burst_pct;        /* token-weighted share of intervals < GC_BURST_MS; -1 = no intervals */
  double itl_min_ms;       /* shortest per-token interval; -1 = none */
  int implausible;         /* see above; the reason is in note_implausible */
  char note_implausible[384];
  /* goodput (gc_cell_goodput; slo_set 0 = no --slo) */
  int slo_set, n_good;
  double good_pct;         /* requests meeting every SLO / all requests (errors never meet) */
  double good_rps;         /* requests meeting every SLO / wall time */
  /* the server's own queue time over the cell (gc_cell_queue; -1 = not reported) */
  double srv_queue_ms;     /* mean per request */
  char srv_queue_src[64];  /* the metric it came from */
  double cli_inflight;     /* sum of e2e / wall: streams the client kept open on average */
  double srv_inflight;     /* sum of (e2e - queue) / wall: streams the server worked on */
  int cap_limited;         /* the reason is in note_cap */
  double spec_accept_len;  /* speculative decoding: mean tokens per verify step (gc_cell_spec); -1 = none */
  char note_cap[320];
} gc_cell_t;

/* Fills the numbers of c from the n finished requests r (labels in c are left as set by the
 * caller). Returns 0, or GT_ENOMEM. */
int gc_cell_compute(gc_cell_t *c, const gc_req_t *r, int n, double wall_s);

#endif
