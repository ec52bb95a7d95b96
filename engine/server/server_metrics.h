/* engine/server/server_metrics.h — the gantry_engine_* Prometheus series of the Engine service
 * (names and their vLLM counterparts: engine/SERVE.md). */
#ifndef GANTRY_ENGINE_SERVER_METRICS_H
#define GANTRY_ENGINE_SERVER_METRICS_H

#include "common/metrics.h"
#include "engine/sched/sched.h"

typedef struct {
  gt_metrics_t *reg; /* borrowed; NULL: every metric pointer is NULL and updates are no-ops */
  gt_metric_t *running, *waiting, *kv_usage, *prefix_queries, *prefix_hits, *prompt_tokens, *gen_tokens,
      *preemptions, *eager_steps, *graph_captures, *steps, *snapshot_replaced;
  /* speculative decoding (vLLM's vllm:spec_decode_*) */
  gt_metric_t *spec_drafts, *spec_draft_tokens, *spec_accepted, *spec_accepted_pos[SCHED_SPEC_MAX_K];
  gt_metric_t *spec_fill_tokens;
  gt_metric_t *spec_cost_off;
  gt_metric_t *spec_src_drafts[SCHED_DRAFT_SOURCES], *spec_src_accepted[SCHED_DRAFT_SOURCES];
  gt_metric_t *finished[6]; /* by sched_finish_t */
  gt_metric_t *rejected_invalid, *rejected_full, *rejected_unavailable;
  gt_metric_t *ttft, *itl, *queue, *prefill, *decode, *e2e, *iter_tokens;
  gt_metric_t *prompt_len, *gen_len;
} srv_metrics_t;

/* Registers every series in reg (may be NULL). */
void srv_metrics_init(srv_metrics_t *m, gt_metrics_t *reg);
/* Registers and sets gantry_engine_memory_bytes{rank="r",kind="weights"|"kv_cache"} for each
 * rank of model (one rank: rank="0"; kv_cache = KV pool + recurrent state, after the cache was
 * made) and logs one line per rank. */
void srv_metrics_ranks(srv_metrics_t *m, const model_t *model);
/* Refreshes gauges and scheduler-owned counters from a stats snapshot. */
void srv_metrics_collect(srv_metrics_t *m, const sched_stats_t *st);
/* Records a finished request (u may be NULL); e2e_s: arrival to the final event. */
void srv_metrics_finished(srv_metrics_t *m, sched_finish_t why, const sched_usage_t *u, double e2e_s);

#endif
