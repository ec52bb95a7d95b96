/* clients/bench_srvq.h — the server's own queue time over a bench cell, from its Prometheus
 * `/metrics` scraped just before and just after the cell (the difference of a histogram's
 * _sum and _count is the cell's requests). The OpenAI responses of gantry's router carry no
 * queue time (usage has token counts only, no timing headers), so /metrics is where it is.
 *
 * Queue series, first found wins:
 *   gantry_router_admission_wait_seconds        gantry router: waiting for a max_inflight slot (a cap)
 *   vllm:request_queue_time_seconds          vLLM scheduler's waiting queue
 *   gantry_engine_request_queue_time_seconds gantry engine scheduler (its own /metrics)
 * Without one, a prefill series (vllm:request_prefill_time_seconds,
 * gantry_engine_request_prefill_time_seconds) gives an estimate: mean TTFT - mean prefill. */
#ifndef GANTRY_CLIENTS_BENCH_SRVQ_H
#define GANTRY_CLIENTS_BENCH_SRVQ_H

#include "clients/bench_stats.h"
#include "clients/http.h"
#include "clients/req.h"

#define GC_SRVQ_SOURCES 5
/* A cell is noted as queue-limited when the streams the server worked on, on average
 * (sum of e2e - queue over the wall time), are at most this share of those the client kept
 * open, and the client kept at least GC_SRVQ_MIN_INFLIGHT open. */
#define GC_SRVQ_LIMIT_SHARE 0.8
#define GC_SRVQ_MIN_INFLIGHT 1.5

/* Speculative decoding counters, first found wins (gantry engine, then vLLM's names); the mean
 * accepted length of a cell is 1 + accepted / drafts of their differences (tokens per verify
 * step of a sequence that drafted: what vLLM reports as mean acceptance length). */
#define GC_SPEC_SOURCES 2

typedef struct gc_srvq_snap {
  int ok;                              /* /metrics answered 200 */
  double spec_drafts[GC_SPEC_SOURCES];   /* *_spec_decode_num_drafts_total; -1 = absent */
  double spec_accepted[GC_SPEC_SOURCES]; /* *_spec_decode_num_accepted_tokens_total; -1 = absent */
  double sum[GC_SRVQ_SOURCES];         /* histogram _sum, converted to ms */
  double count[GC_SRVQ_SOURCES];       /* histogram _count; -1 = series absent */
} gc_srvq_snap_t;

/* Parses Prometheus text exposition into snap (series summed over their label sets). */
void gc_srvq_parse(const char *text, gc_srvq_snap_t *snap);
/* GET /metrics on h into snap; snap->ok = 0 when it is missing or fails (never an error). */
void gc_srvq_scrape(const gc_http_t *h, gc_srvq_snap_t *snap);
/* Fills c's srv_queue_ms / srv_queue_src / srv_inflight and, when the queue held the server
 * below what the client offered (see above), cap_limited and note_cap. The n requests r and
 * c's numbers (gc_cell_compute) must be in place. Nothing is set when neither snapshot has a
 * series that moved. */
void gc_cell_queue(gc_cell_t *c, const gc_req_t *r, int n, const gc_srvq_snap_t *before,
                   const gc_srvq_snap_t *after);

/* Fills c->spec_accept_len (above) when a drafts counter moved between the snapshots; -1 stays
 * otherwise (no speculation, or no counters where they were scraped). */
void gc_cell_spec(gc_cell_t *c, const gc_srvq_snap_t *before, const gc_srvq_snap_t *after);

#endif
