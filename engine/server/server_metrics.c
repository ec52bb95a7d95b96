/* engine/server/server_metrics.c — see server_metrics.h. */
#include "engine/server/server_metrics.h"

#include <stdio.h>
#include <string.h>

#include "common/log.h"
#include "engine/server/server_convert.h"

static const double lat_s[] = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
                               1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0};
static const double itl_s[] = {0.001, 0.0025, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075,
                               0.1,   0.15,   0.2,   0.3,  0.4,   0.5,  0.75,  1.0,  2.5,  5.0};
static const double tok_n[] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768};

#define N(a) ((int)(sizeof(a) / sizeof *(a)))

void srv_metrics_init(srv_metrics_t *m, gt_metrics_t *reg) {
  memset(m, 0, sizeof *m);
  m->reg = reg;
  if (!reg) return;
  const gt_metric_kind_t C = GT_METRIC_COUNTER, G = GT_METRIC_GAUGE, H = GT_METRIC_HISTOGRAM;
  m->running = gt_metrics_add(reg, G, "gantry_engine_requests_running", "Sequences running in the batch.", NULL, NULL, 0);
  m->waiting = gt_metrics_add(reg, G, "gantry_engine_requests_waiting", "Requests waiting to be scheduled.", NULL, NULL, 0);
  m->kv_usage = gt_metrics_add(reg, G, "gantry_engine_kv_cache_usage_ratio", "Fraction of KV-cache blocks in use (0..1).", NULL, NULL, 0);
  m->prefix_queries = gt_metrics_add(reg, C, "gantry_engine_prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.", NULL, NULL, 0);
  m->prefix_hits = gt_metrics_add(reg, C, "gantry_engine_prefix_cache_hits_total", "Prompt tokens served from the prefix cache.", NULL, NULL, 0);
  m->prompt_tokens = gt_metrics_add(reg, C, "gantry_engine_prompt_tokens_total", "Prompt tokens of admitted requests.", NULL, NULL, 0);
  m->gen_tokens = gt_metrics_add(reg, C, "gantry_engine_generation_tokens_total", "Generated tokens.", NULL, NULL, 0);
  m->preemptions = gt_metrics_add(reg, C, "gantry_engine_preemptions_total", "Sequences preempted (recomputed later).", NULL, NULL, 0);
  m->snapshot_replaced = gt_metrics_add(reg, C, "gantry_engine_prefix_snapshots_replaced_total",
                                        "Hybrid models: prefix-cache state snapshots dropped for a newer prompt's (all snapshot slots held).", NULL, NULL, 0);
  m->steps = gt_metrics_add(reg, C, "gantry_engine_steps_total", "Scheduler steps that ran the model.", NULL, NULL, 0);
  m->eager_steps = gt_metrics_add(reg, C, "gantry_engine_eager_steps_total",
                                  "Decode steps run eagerly (no captured CUDA graph); 0 in steady decode, always 0 on the CPU backend.", NULL, NULL, 0);
  m->graph_captures = gt_metrics_add(reg, C, "gantry_engine_graph_captures_total",
                                     "CUDA graphs captured or updated; constant in steady decode (a rise mid-stream is a re-capture stall).", NULL, NULL, 0);
  m->spec_drafts = gt_metrics_add(reg, C, "gantry_engine_spec_decode_num_drafts_total",
                                  "Speculative decoding: verify steps of a sequence with at least one draft.", NULL, NULL, 0);
  m->spec_draft_tokens = gt_metrics_add(reg, C, "gantry_engine_spec_decode_num_draft_tokens_total",
                                        "Speculative decoding: draft tokens proposed.", NULL, NULL, 0);
  m->spec_accepted = gt_metrics_add(reg, C, "gantry_engine_spec_decode_num_accepted_tokens_total",
                                    "Speculative decoding: draft tokens accepted.", NULL, NULL, 0);
  m->spec_fill_tokens = gt_metrics_add(reg, C, "gantry_engine_spec_decode_num_fill_tokens_total",
                                       "Speculative decoding: filler tokens verified after a sequence's drafts so that the "
                                       "step's sequences share a row count (a graph's shape); not in the draft counts.",
                                       NULL, NULL, 0);
  /* by sched_draft_src_t: the mode's drafter, the suffix cache (serve --spec-suffix-cache), MTP's
   * prompt lookup (serve --spec-mtp-lookup) */
  static const char *srcs[SCHED_DRAFT_SOURCES] = {"drafter", "suffix_cache", "mtp_lookup"};
  for (int i = 0; i < SCHED_DRAFT_SOURCES; i++) {
    char lab[48];
    snprintf(lab, sizeof lab, "source=\"%s\"", srcs[i]);
    m->spec_src_drafts[i] = gt_metrics_add(reg, C, "gantry_engine_spec_decode_num_draft_tokens_by_source_total",
                                           "Speculative decoding: draft tokens proposed, by where they came from.", lab,
                                           NULL, 0);
    m->spec_src_accepted[i] = gt_metrics_add(reg, C, "gantry_engine_spec_decode_num_accepted_tokens_by_source_total",
                                             "Speculative decoding: draft tokens accepted, by where they came from.", lab,
                                             NULL, 0);
  }
  m->spec_cost_off = gt_metrics_add(reg, C, "gantry_engine_spec_decode_cost_off_steps_total",
                                     "Speculative decoding: steps told not to draft because measured speculative steps gave "
                                     "fewer tokens per ms than plain ones at their batch size (engine/sched/spec_cost.h).",
                                     NULL, NULL, 0);
  for (int i = 0; i < SCHED_SPEC_MAX_K; i++) {
    char lab[32];
    snprintf(lab, sizeof lab, "position=\"%d\"", i);
    m->spec_accepted_pos[i] = gt_metrics_add(reg, C, "gantry_engine_spec_decode_num_accepted_tokens_per_pos_total",
                                             "Speculative decoding: drafts accepted at each draft position.", lab, NULL, 0);
  }
  static const char *reasons[6] = {NULL, "stop", "length", "tool_calls", "cancelled", "error"};
  for (int i = 1; i < 6; i++) {
    char lab[64];
    snprintf(lab, sizeof lab, "finished_reason=\"%s\"", reasons[i]);
    m->finished[i] = gt_metrics_add(reg, C, "gantry_engine_request_success_total", "Finished requests by finish reason.", lab, NULL, 0);
  }
  m->rejected_invalid = gt_metrics_add(reg, C, "gantry_engine_requests_rejected_total", "Requests refused before scheduling.", "code=\"invalid_argument\"", NULL, 0);
  m->rejected_full = gt_metrics_add(reg, C, "gantry_engine_requests_rejected_total", "Requests refused before scheduling.", "code=\"resource_exhausted\"", NULL, 0);
  m->rejected_unavailable = gt_metrics_add(reg, C, "gantry_engine_requests_rejected_total", "Requests refused before scheduling.", "code=\"unavailable\"", NULL, 0);
  m->ttft = gt_metrics_add(reg, H, "gantry_engine_time_to_first_token_seconds", "Arrival to first generated token.", NULL, lat_s, N(lat_s));
  m->itl = gt_metrics_add(reg, H, "gantry_engine_inter_token_latency_seconds", "Time between generated tokens of a stream.", NULL, itl_s, N(itl_s));
  m->queue = gt_metrics_add(reg, H, "gantry_engine_request_queue_time_seconds", "Arrival to first scheduled.", NULL, lat_s, N(lat_s));
  m->prefill = gt_metrics_add(reg, H, "gantry_engine_request_prefill_time_seconds", "First scheduled to prompt processed.", NULL, lat_s, N(lat_s));
  m->decode = gt_metrics_add(reg, H, "gantry_engine_request_decode_time_seconds", "First token to last token.", NULL, lat_s, N(lat_s));
  m->e2e = gt_metrics_add(reg, H, "gantry_engine_e2e_request_latency_seconds", "Arrival to the final message.", NULL, lat_s, N(lat_s));
  m->iter_tokens = gt_metrics_add(reg, H, "gantry_engine_iteration_tokens", "Tokens sampled per scheduler step.", NULL, tok_n, N(tok_n));
  m->prompt_len = gt_metrics_add(reg, H, "gantry_engine_request_prompt_tokens", "Prompt length of finished requests.", NULL, tok_n, N(tok_n));
  m->gen_len = gt_metrics_add(reg, H, "gantry_engine_request_generation_tokens", "Generated tokens of finished requests.", NULL, tok_n, N(tok_n));
}

void srv_metrics_ranks(srv_metrics_t *m, const model_t *model) {
  const int n = model_n_ranks(model);
  for (int r = 0; r < n; r++) {
    const model_t *rm = model_rank(model, r);
    const model_shard_t *sh = &rm->sh;
    GT_LOG_INFO("rank=%d ranks=%d backend=%s weights_mib=%.1f kv_cache_mib=%.1f heads=%d kv_heads=%d ffn=%d "
                "gdn_heads=%d/%d vocab=[%d,%d)",
                r, n, rm->be->ops->name, rm->weight_bytes / 1048576.0, rm->cache_bytes / 1048576.0, sh->n_head,
                sh->n_head_kv, sh->n_ff, sh->gdn_n_k, sh->gdn_n_v, sh->vocab0, sh->vocab0 + sh->n_vocab);
    if (!m->reg) continue;
    static const char *help = "Memory a rank holds, by kind: weights, kv_cache (KV pool and recurrent state).";
    char lab[64];
    snprintf(lab, sizeof lab, "rank=\"%d\",kind=\"weights\"", r);
    gt_metric_set(gt_metrics_add(m->reg, GT_METRIC_GAUGE, "gantry_engine_memory_bytes", help, lab, NULL, 0),
                  (double)rm->weight_bytes);
    snprintf(lab, sizeof lab, "rank=\"%d\",kind=\"kv_cache\"", r);
    gt_metric_set(gt_metrics_add(m->reg, GT_METRIC_GAUGE, "gantry_engine_memory_bytes", help, lab, NULL, 0),
                  (double)rm->cache_bytes);
  }
}

void srv_metrics_collect(srv_metrics_t *m, const sched_stats_t *st) {
  if (!m->reg) return;
  gt_metric_set(m->running, st->running);
  gt_metric_set(m->waiting, st->waiting);
  gt_metric_set(m->kv_usage, st->kv_blocks > 0 ? (double)st->kv_used / st->kv_blocks : 0.0);
  gt_metric_set(m->prefix_queries, (double)st->prefix_queried_tokens);
  gt_metric_set(m->prefix_hits, (double)st->prefix_hit_tokens);
  gt_metric_set(m->prompt_tokens, (double)st->prompt_tokens);
  gt_metric_set(m->preemptions, (double)st->preemptions);
  gt_metric_set(m->snapshot_replaced, (double)st->snapshot_replaced);
  gt_metric_set(m->steps, (double)st->steps);
  gt_metric_set(m->eager_steps, (double)st->eager_steps);
  gt_metric_set(m->graph_captures, (double)st->graph_captures);
  gt_metric_set(m->spec_drafts, (double)st->spec_drafts);
  gt_metric_set(m->spec_draft_tokens, (double)st->spec_draft_tokens);
  gt_metric_set(m->spec_accepted, (double)st->spec_accepted_tokens);
  gt_metric_set(m->spec_fill_tokens, (double)st->spec_fill_tokens);
  for (int i = 0; i < SCHED_DRAFT_SOURCES; i++) {
    gt_metric_set(m->spec_src_drafts[i], (double)st->spec_src_draft_tokens[i]);
    gt_metric_set(m->spec_src_accepted[i], (double)st->spec_src_accepted[i]);
  }
  gt_metric_set(m->spec_cost_off, (double)st->spec_cost_off_steps);
  for (int i = 0; i < SCHED_SPEC_MAX_K; i++) gt_metric_set(m->spec_accepted_pos[i], (double)st->spec_accepted_pos[i]);
}

void srv_metrics_finished(srv_metrics_t *m, sched_finish_t why, const sched_usage_t *u, double e2e_s) {
  if (!m->reg) return;
  if (why >= 1 && why <= 5) gt_metric_inc(m->finished[why], 1);
  gt_metric_observe(m->e2e, e2e_s);
  if (!u) return;
  gt_metric_observe(m->queue, u->queued_ms / 1e3);
  if (u->prefill_ms > 0) gt_metric_observe(m->prefill, u->prefill_ms / 1e3);
  if (u->completion_tokens > 0) gt_metric_observe(m->decode, u->decode_ms / 1e3);
  gt_metric_observe(m->prompt_len, u->prompt_tokens);
  gt_metric_observe(m->gen_len, u->completion_tokens);
}
