/* clients/bench_stats.c — per-cell reduction of request records. */
#include "clients/bench_stats.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"

/* Sets burst_pct, itl_min_ms and the implausible flag from the pooled intervals. */
static void burst_check(gc_cell_t *c, const double *iv, const double *w, int k) {
  c->burst_pct = c->itl_min_ms = -1;
  c->implausible = 0;
  c->note_implausible[0] = 0;
  if (k == 0) return;
  double tot = 0, burst = 0, mn = iv[0];
  for (int i = 0; i < k; i++) {
    tot += w[i];
    if (iv[i] < GC_BURST_MS) burst += w[i];
    if (iv[i] < mn) mn = iv[i];
  }
  c->burst_pct = tot > 0 ? 100.0 * burst / tot : 0;
  c->itl_min_ms = mn;
  if (c->burst_pct < GC_BURST_FLAG_PCT && !(c->itl_p50 >= 0 && c->itl_p50 < GC_BURST_MS)) return; /* median real */
  c->implausible = 1;
  char peak[64];
  if (mn > 0) snprintf(peak, sizeof peak, "fastest %.4f ms = %.0f tok/s per user", mn, 1000.0 / mn);
  else snprintf(peak, sizeof peak, "fastest 0 ms: several chunks in one read");
  char note[1024]; /* room for any double; the cell keeps what fits */
  snprintf(note, sizeof note,
           "implausible: %.1f%% of token intervals < %g ms (%s): chunks arrive in bursts (a buffering proxy, "
           "a server flushing many tokens at once, or this client starved of CPU), so itl and dec_tok/s are not "
           "decode speed",
           c->burst_pct, GC_BURST_MS, peak);
  strncpy(c->note_implausible, note, sizeof c->note_implausible - 1);
  c->note_implausible[sizeof c->note_implausible - 1] = 0;
}

int gc_cell_compute(gc_cell_t *c, const gc_req_t *r, int n, double wall_s) {
  c->n = n;
  c->n_ok = c->n_err = 0;
  c->first_error[0] = 0;
  c->wall_s = wall_s;
  c->prompt_tokens = c->cached_tokens = c->out_tokens = c->reasoning_tokens = 0;
  int n_iv = 0;
  for (int i = 0; i < n; i++) n_iv += r[i].n_ival;
  double *ttft = malloc(sizeof(double) * (size_t)(n + 1));
  double *ttfc = malloc(sizeof(double) * (size_t)(n + 1));
  double *e2e = malloc(sizeof(double) * (size_t)(n + 1));
  double *tpot = malloc(sizeof(double) * (size_t)(n + 1));
  double *iv = malloc(sizeof(double) * (size_t)(n_iv + 1));
  double *w = malloc(sizeof(double) * (size_t)(n_iv + 1));
  if (!ttft || !ttfc || !e2e || !tpot || !iv || !w) {
    free(ttft), free(ttfc), free(e2e), free(tpot), free(iv), free(w);
    return GT_ENOMEM;
  }
  int nt = 0, nc = 0, ne = 0, np = 0, k = 0, n_prompt = 0, n_cached = 0;
  for (int i = 0; i < n; i++) {
    const gc_req_t *q = &r[i];
    if (q->error) {
      c->n_err++;
      if (!c->first_error[0]) {
        strncpy(c->first_error, q->error, sizeof c->first_error - 1);
        c->first_error[sizeof c->first_error - 1] = 0;
      }
      continue;
    }
    c->n_ok++;
    if (q->ttft_ms >= 0) ttft[nt++] = q->ttft_ms;
    if (q->ttfc_ms >= 0) ttfc[nc++] = q->ttfc_ms;
    e2e[ne++] = q->e2e_ms;
    if (q->tpot_ms >= 0) tpot[np++] = q->tpot_ms;
    for (int j = 0; j < q->n_ival; j++) {
      iv[k] = q->ival_ms[j];
      w[k++] = q->ival_w[j];
    }
    c->out_tokens += q->out_tokens;
    c->reasoning_tokens += q->reasoning_tokens;
    if (q->prompt_tokens >= 0) {
      c->prompt_tokens += q->prompt_tokens;
      n_prompt++;
      if (q->cached_tokens >= 0) {
        c->cached_tokens += q->cached_tokens;
        n_cached++;
      }
    }
  }
  c->ttft_p50 = gc_percentile(ttft, nt, 50);
  c->ttft_p90 = gc_percentile(ttft, nt, 90);
  c->ttft_p99 = gc_percentile(ttft, nt, 99);
  c->tpot_p50 = gc_percentile(tpot, np, 50);
  c->tpot_p90 = gc_percentile(tpot, np, 90);
  c->tpot_p99 = gc_percentile(tpot, np, 99);
  c->ttfc_p50 = gc_percentile(ttfc, nc, 50);
  c->e2e_p50 = gc_percentile(e2e, ne, 50);
  c->itl_p50 = gc_wmedian(iv, w, k);
  c->itl_p90 = gc_wpercentile(iv, w, k, 90);
  c->itl_p99 = gc_wpercentile(iv, w, k, 99);
  burst_check(c, iv, w, k);
  c->decode_tps = c->itl_p50 > 0 ? 1000.0 / c->itl_p50 : -1;
  c->total_tps = wall_s > 0 && c->n_ok ? (double)c->out_tokens / wall_s : -1;
  c->chk = c->decode_tps > 0 && c->total_tps > 0 && c->concurrency > 0
               ? c->decode_tps * c->concurrency / c->total_tps
               : -1;
  c->prefix_hit_pct = n_cached && c->prompt_tokens > 0 ? 100.0 * (double)c->cached_tokens / (double)c->prompt_tokens : -1;
  c->think_pct = c->out_tokens > 0 ? 100.0 * (double)c->reasoning_tokens / (double)c->out_tokens : -1;
  c->prompt_tokens_mean = n_prompt ? (double)c->prompt_tokens / n_prompt : -1;
  double e2e_sum = 0;
  for (int i = 0; i < ne; i++) e2e_sum += e2e[i];
  c->cli_inflight = wall_s > 0 && ne ? e2e_sum / 1000.0 / wall_s : -1;
  c->n_good = 0;
  c->good_pct = c->good_rps = -1;
  c->srv_queue_ms = c->srv_inflight = c->spec_accept_len = -1;
  c->srv_queue_src[0] = 0;
  c->cap_limited = 0;
  c->note_cap[0] = 0;
  free(ttft), free(ttfc), free(e2e), free(tpot), free(iv), free(w);
  return GT_OK;
}
