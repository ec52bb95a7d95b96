/* engine/models/bench.c — see bench.h. */
#include "engine/models/bench.h"

#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "engine/models/tp.h"

#define EB_PROF_ROWS 64
#define EB_PROF_GRAPH_STEPS 4 /* graph replays timed after the profiled step */

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* copy bandwidth through the backend (bytes read + written per second); 0 if it cannot tell */
static double copy_bw(be_t *be, size_t bytes) {
  const int cols = 1 << 15, rows = (int)(bytes / 4 / cols);
  if (rows < 1) return 0;
  float *a = be->ops->alloc(be, (size_t)rows * cols * 4), *b = be->ops->alloc(be, (size_t)rows * cols * 4);
  double best = 1e30;
  if (a && b) {
    for (int r = 0; r < 8; r++) {
      double t0 = gt_now_ms();
      be->ops->copy2d(be, b, cols, a, cols, rows, cols);
      be->ops->sync(be);
      double t = (gt_now_ms() - t0) / 1e3;
      if (r > 1 && t < best) best = t; /* the first two warm up */
    }
  }
  if (a) be->ops->free(be, a);
  if (b) be->ops->free(be, b);
  return a && b ? 2.0 * rows * (double)cols * 4 / best : 0;
}

int eb_parse_batches(const char *s, int *b, int cap) { return eb_parse_list(s, b, cap, 4096); }

int eb_parse_list(const char *s, int *b, int cap, long max) {
  int n = 0;
  for (const char *p = s; p && *p && n < cap;) {
    char *end;
    long v = strtol(p, &end, 10);
    if (end == p || v < 1 || v > max) return -1;
    b[n++] = (int)v;
    p = *end == ',' ? end + 1 : NULL;
    if (!p && *end) return -1;
  }
  return n;
}

/* Host arrays of the bench's steps: sequence s uses block-table row s (mb blocks) and state
 * slot s, the same layout in the warm-up, the timed steps and the profile. */
typedef struct {
  int32_t *tok, *pos, *first, *ntok, *slot, *outt, *table;
  float *logits;
  int32_t *ids;           /* [max batch] greedy ids of a decode step sampled on the backend */
  be_sample_row_t *rows;  /* [max batch] greedy rows */
  int host_logits;        /* 1: decode steps download the logits (the backend cannot sample) */
  int solo;               /* a rank of a larger group run alone (be_comm_solo_create): its greedy pick */
  float *hmax;            /* [max batch] solo: the logit of each pick */
  int mb, V;
  unsigned seed;
} eb_buf_t;

static int32_t next_tok(eb_buf_t *x) {
  x->seed = x->seed * 1664525u + 1013904223u;
  return (int32_t)((x->seed >> 8) % (unsigned)x->V);
}

/* Prefill of sequence s: n tokens at positions 0..n-1 in one step, the last row's logits. */
static int eb_prefill(model_t *m, eb_buf_t *x, int s, int n, gt_err_t *err) {
  for (int i = 0; i < n; i++) {
    x->tok[i] = next_tok(x);
    x->pos[i] = i;
  }
  int32_t f0 = 0, n0 = n, sl = s, o0 = n - 1;
  be_batch_t b = {.n_tok = n, .n_seq = 1, .tok = x->tok, .pos = x->pos, .seq_first = &f0, .seq_ntok = &n0,
                  .block_table = x->table + (size_t)s * x->mb, .max_blocks = x->mb, .state_slot = &sl, .n_out = 1,
                  .out_tok = &o0};
  return model_forward(m, &b, x->logits, err);
}

/* One decode step of sequences 0..B-1, each one token at position pos. */
static int eb_decode(model_t *m, eb_buf_t *x, int B, int pos, gt_err_t *err) {
  for (int s = 0; s < B; s++) {
    x->tok[s] = next_tok(x);
    x->pos[s] = pos;
    x->first[s] = s;
    x->ntok[s] = 1;
    x->slot[s] = s;
    x->outt[s] = s;
  }
  be_batch_t b = {.n_tok = B, .n_seq = B, .tok = x->tok, .pos = x->pos, .seq_first = x->first, .seq_ntok = x->ntok,
                  .block_table = x->table, .max_blocks = x->mb, .state_slot = x->slot, .n_out = B, .out_tok = x->outt};
  if (x->solo) { /* what the rank does in its group's sampling step (tp.c job_forward): argmax of its slice */
    m->head_rows = x->rows;
    m->head_ids = x->ids;
    m->head_max = x->hmax;
    const int rc = model_forward(m, &b, NULL, err);
    m->head_rows = NULL;
    m->head_ids = NULL;
    m->head_max = NULL;
    return rc;
  }
  /* as the scheduler's greedy rows: ids sampled on the backend, logits never leave it */
  return x->host_logits ? model_forward(m, &b, x->logits, err) : model_forward_sample(m, &b, x->rows, x->ids, err);
}

/* The profile of one batch size (printed after the main table). */
typedef struct {
  int B, n;
  double wall_us; /* median decode step, wall */
  be_cuda_prof_sum_t sum;
  be_cuda_prof_t rows[EB_PROF_ROWS];
} eb_prof_t;

/* The share of a profile row's op kind: 0 products (matmul, matmul_multi, ffn_swiglu), 1
 * attention (attention, attn_qk_prep, kv_store), 2 GDN (gdn_*, conv1d_silu, l2norm,
 * rmsnorm_gated), 3 the rest (norms, rope, element-wise, embed, gather_out). */
static int op_kind(const char *label) {
  static const char *const pre[][5] = {{"matmul", "ffn_swiglu"},
                                       {"attention", "attn_", "kv_store"},
                                       {"gdn_", "conv1d", "l2norm", "rmsnorm_gated"}};
  for (int k = 0; k < 3; k++)
    for (int j = 0; j < 5 && pre[k][j]; j++)
      if (!strncmp(label, pre[k][j], strlen(pre[k][j]))) return k;
  return 3;
}

/* p: a profiled decode step of batch p->B, or with prefill != 0 a prefill of p->B tokens (its
 * shares are of the best timed prefill's wall time, p->wall_us) */
static void print_profile(const eb_prof_t *p, int prefill, FILE *out) {
  const be_cuda_prof_sum_t *s = &p->sum;
  const char *what = prefill ? "prefill of" : "batch";
  if (p->n == 0) {
    fprintf(out, "\n%s %d: no step was profiled\n", what, p->B);
    return;
  }
  const double step = s->graph_steps ? s->graph_us : p->wall_us;
  fprintf(out, "\n%s %d, one %s step per op (%d ops, eager with an event pair per op%s); %% of %s %.1f us:\n", what,
          p->B, prefill ? "prefill" : "decode", s->n_ops,
          s->gated ? "" : ", NOT gated: host launch gaps are inside the op times",
          s->graph_steps ? "the GPU time of its graph replay"
          : prefill      ? "the best timed prefill's wall time"
                         : "the median step wall time",
          step);
  double kind_us[4] = {0};
  for (int i = 0; i < p->n; i++) kind_us[op_kind(p->rows[i].label)] += p->rows[i].us;
  fprintf(out, "by kind: products %.1f %%, attention %.1f %%, GDN %.1f %%, norms / rope / element-wise / rest %.1f %%\n",
          100.0 * kind_us[0] / step, 100.0 * kind_us[1] / step, 100.0 * kind_us[2] / step, 100.0 * kind_us[3] / step);
  fprintf(out, "| op | calls | us | %% of step |\n|---|---|---|---|\n");
  double shown = 0;
  for (int i = 0; i < p->n; i++) {
    fprintf(out, "| %s | %d | %.1f | %.1f %% |\n", p->rows[i].label, p->rows[i].calls, p->rows[i].us,
            100.0 * p->rows[i].us / step);
    shown += p->rows[i].us;
  }
  if (s->ops_us - shown > 0.05)
    fprintf(out, "| (labels not shown) | | %.1f | %.1f %% |\n", s->ops_us - shown, 100.0 * (s->ops_us - shown) / step);
  /* > 0: launch / idle time inside the graph; < 0: the event pairs cost more than the graph's own
   * gaps between kernels (each op timed alone), so the op shares above are upper bounds */
  fprintf(out, "| %s (step - sum of ops) | | %.1f | %.1f %% |\n",
          step >= s->ops_us ? "launch / idle gap" : "event overhead", step - s->ops_us, 100.0 * (step - s->ops_us) / step);
  if (s->graph_steps)
    fprintf(out, "sum of ops %.1f us vs graph replay %.1f us GPU (mean of %d): gap %.1f us (%s); decode step wall "
                 "%.1f us (median): %.1f us more = host (batch upload, ids or logits copy, sync)\n",
            s->ops_us, s->graph_us, s->graph_steps, s->graph_us - s->ops_us,
            s->graph_us >= s->ops_us ? "launch / idle inside the graph"
                                     : "negative: the per-op event pairs cost more than the graph's gaps",
            p->wall_us, p->wall_us - s->graph_us);
  else
    fprintf(out, "sum of ops %.1f us vs %s wall %.1f us (%s; no graph replay was timed): gap %.1f us\n", s->ops_us,
            prefill ? "prefill" : "decode step", p->wall_us, prefill ? "best timed" : "median", p->wall_us - s->ops_us);
}

int eb_run(model_t *m, const gguf_t *g, const eb_opts_t *o, FILE *out, gt_err_t *err) {
  be_t *be = m->be;
  int maxb = 1;
  for (int i = 0; i < o->n_batches; i++) maxb = o->batches[i] > maxb ? o->batches[i] : maxb;
  int maxp = o->prompt;
  for (int i = 0; i < o->n_prefill; i++) maxp = o->prefill[i] > maxp ? o->prefill[i] : maxp;
  if (o->prompt < 1 || maxp > m->max_tokens || o->gen < 2 || maxb > m->max_tokens || o->n_prefill < 0 ||
      (o->n_prefill > 0 && !o->prefill))
    return gt_err_set(err, GT_EINVAL, "prompt %d (1..%d), gen %d (>= 2), batch %d (<= %d)", maxp, m->max_tokens,
                      o->gen, maxb, m->max_tokens);
  /* blocks for the longest prompt + gen tokens and at least one more block: the profile's steps follow */
  const int bt = 16, mb = (maxp + o->gen + bt - 1) / bt + 1, V = m->hp.n_vocab;
  int rc = model_cache_init(m, maxb * mb, bt, maxb, err);
  if (rc) return rc;
  const gguf_tensor_t *emb = gguf_find_tensor(g, "token_embd.weight");
  /* weights a decode step streams: all but the embedding rows it does not gather (the
   * embedding is read in full only when it is also the output head) */
  double w_bytes = (double)m->weight_bytes - (emb && !m->hp.tied_output ? (double)emb->nbytes : 0.0);
  double kv_tok = (double)model_kv_bytes_per_token(m);
  /* a rank group: the bandwidth of one rank's backend (its ops table has no alloc / copy2d) */
  double bw = copy_bw(m->tp ? tp_rank_model(m->tp, 0)->be : be, o->copy_bytes);
  fprintf(out, "model: %s, %d layers, %.3f GB weights (%.3f GB streamed per decode step), KV %.0f B/token\n",
          m->hp.arch, m->hp.n_layer, m->weight_bytes / 1e9, w_bytes / 1e9, kv_tok);
  fprintf(out, "%s copy bandwidth: %.1f GB/s (read + write, %.2f GB buffers)\n", be->ops->name, bw / 1e9,
          o->copy_bytes / 1e9);

  size_t nt = (size_t)(maxp > maxb ? maxp : maxb);
  eb_buf_t x = {.mb = mb, .V = V, .seed = 7};
  x.tok = malloc(sizeof(int32_t) * nt);
  x.pos = malloc(sizeof(int32_t) * nt);
  x.first = malloc(sizeof(int32_t) * (size_t)maxb);
  x.ntok = malloc(sizeof(int32_t) * (size_t)maxb);
  x.slot = malloc(sizeof(int32_t) * (size_t)maxb);
  x.outt = malloc(sizeof(int32_t) * (size_t)maxb);
  x.table = malloc(sizeof(int32_t) * (size_t)maxb * mb);
  x.logits = malloc(sizeof(float) * (size_t)maxb * V);
  x.ids = malloc(sizeof(int32_t) * (size_t)maxb);
  x.rows = calloc((size_t)maxb, sizeof *x.rows); /* temperature 0: greedy */
  x.host_logits = !be->ops->sample;
  x.solo = m->sh.n_ranks > 1 && !m->tp && be->ops->sample;
  x.hmax = malloc(sizeof(float) * (size_t)maxb);
  double *steps = malloc(sizeof(double) * (size_t)o->gen);
  eb_prof_t *prof = o->prof_arm && o->prof_get ? calloc((size_t)o->n_batches, sizeof *prof) : NULL;
  eb_prof_t *pprof = o->prof_arm && o->prof_get && o->n_prefill > 0 ? calloc((size_t)o->n_prefill, sizeof *pprof) : NULL;
  /* a rank group, per batch size: [all-reduce calls per decode step, ms per step of rank
   * 0..R-1, the median step's ms] */
  const int R = m->tp ? tp_n_ranks(m->tp) : 0;
  double *ar = R ? calloc((size_t)o->n_batches * (R + 2), sizeof *ar) : NULL;
  uint64_t ar_calls0[TP_MAX_RANKS], ar_ns0[TP_MAX_RANKS], ar_calls1[TP_MAX_RANKS], ar_ns1[TP_MAX_RANKS];
  if (x.solo)
    fprintf(out, "decode steps: rank %d of %d alone (all-reduce a no-op: timing only), greedy pick of its vocabulary "
                 "slice [%d, %d) per row as in its group\n",
            m->sh.rank, m->sh.n_ranks, m->sh.vocab0, m->sh.vocab0 + m->sh.n_vocab);
  else
    fprintf(out, "decode steps: %s\n", x.host_logits ? "logits downloaded (the backend cannot sample)"
                                                     : "greedy ids sampled on the backend, as the scheduler does");
  if (!x.tok || !x.pos || !x.first || !x.ntok || !x.slot || !x.outt || !x.table || !x.logits || !x.ids || !x.rows || !x.hmax || !steps ||
      (o->prof_arm && o->prof_get && (!prof || (o->n_prefill > 0 && !pprof))) || (R && !ar)) {
    rc = gt_err_set(err, GT_ENOMEM, "bench buffers");
    goto done;
  }
  for (int s = 0; s < maxb; s++)
    for (int i = 0; i < mb; i++) x.table[s * mb + i] = s * mb + i;
  /* warm-up (untimed, its own token stream): the largest steps first (buffers reach their
   * final size before any graph is captured), then one decode step per batch size */
  {
    const unsigned seed = x.seed;
    const double tw = gt_now_ms();
    rc = eb_prefill(m, &x, 0, o->prompt, err);
    if (!rc) rc = eb_decode(m, &x, maxb, 0, err);
    for (int bi = 0; bi < o->n_batches && !rc; bi++) rc = eb_decode(m, &x, o->batches[bi], 0, err);
    x.seed = seed;
    if (rc) goto done;
    char sz[256];
    fprintf(out, "warm-up: a prefill of %d tokens and a decode step per batch size in %.0f ms", o->prompt,
            gt_now_ms() - tw);
    if (be->ops->graph_sizes) {
      be_sizes_t gs = {{0}};
      be->ops->graph_sizes(be, &gs);
      fprintf(out, "; decode graphs captured: %s", be_fmt_graph_sizes(&gs, sz, sizeof sz));
    }
    fprintf(out, "\n");
  }
  fprintf(out, "\n| batch | prefill tok/s | decode ms/step | tok/s/seq | tok/s total | GB/step | GB/token | "
               "roofline ms | %% of roofline | graph/eager steps (captures) | step p99 / max ms |\n"
               "|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (int bi = 0; bi < o->n_batches && !rc; bi++) {
    const int B = o->batches[bi];
    double tp = gt_now_ms();
    for (int s = 0; s < B && !rc; s++) rc = eb_prefill(m, &x, s, o->prompt, err); /* one step per sequence */
    double prefill_s = (gt_now_ms() - tp) / 1e3;
    long e0 = be->ops->eager_steps ? be->ops->eager_steps(be) : 0;
    const long c0 = be->ops->graph_captures ? be->ops->graph_captures(be) : 0;
    if (R) tp_comm_stats(m->tp, ar_calls0, ar_ns0);
    for (int j = 0; j < o->gen && !rc; j++) {
      double ts = gt_now_ms();
      rc = eb_decode(m, &x, B, o->prompt + j, err);
      steps[j] = (gt_now_ms() - ts) / 1e3;
    }
    if (rc) break;
    long eager = be->ops->eager_steps ? be->ops->eager_steps(be) - e0 : -1;
    const long caps = be->ops->graph_captures ? be->ops->graph_captures(be) - c0 : 0;
    if (R) { /* [calls per step, ms per step of rank 0..R-1] */
      tp_comm_stats(m->tp, ar_calls1, ar_ns1);
      double *a = &ar[(size_t)bi * (R + 2)];
      a[0] = (double)(ar_calls1[0] - ar_calls0[0]) / o->gen;
      for (int r = 0; r < R; r++) a[1 + r] = (double)(ar_ns1[r] - ar_ns0[r]) / 1e6 / o->gen;
    }
    qsort(steps, (size_t)o->gen, sizeof(double), cmp_d);
    const double med = steps[o->gen / 2], ctx = o->prompt + o->gen / 2.0;
    if (R) ar[(size_t)bi * (R + 2) + R + 1] = med * 1e3;
    const double bytes = w_bytes + B * ctx * kv_tok + (double)B * V * 4, roof = bw > 0 ? bytes / bw : 0;
    char ge[48] = "-";
    if (eager >= 0) snprintf(ge, sizeof ge, "%ld/%ld (%ld)", (long)o->gen - eager, eager, caps);
    const double p99 = steps[(size_t)((o->gen - 1) * 0.99 + 0.5)], mx = steps[o->gen - 1];
    fprintf(out, "| %d | %.0f | %.3f | %.1f | %.1f | %.3f | %.4f | %.3f | %.1f %% | %s | %.3f / %.3f |\n", B,
            B * o->prompt / prefill_s, med * 1e3, 1.0 / med, B / med, bytes / 1e9, bytes / B / 1e9, roof * 1e3,
            100.0 * roof / med, ge, p99 * 1e3, mx * 1e3);
    fflush(out);
    if (prof) { /* one profiled step, then graph replays of the same step timed */
      eb_prof_t *p = &prof[bi];
      p->B = B;
      p->wall_us = med * 1e6;
      o->prof_arm(be);
      for (int k = 0; k <= EB_PROF_GRAPH_STEPS && !rc; k++) rc = eb_decode(m, &x, B, o->prompt + o->gen + k, err);
      p->n = o->prof_get(be, p->rows, EB_PROF_ROWS, &p->sum);
    }
  }
  if (R && !rc) { /* time inside all_reduce, waiting for the slowest rank included */
    fprintf(out, "\nall-reduce per decode step, %d ranks (ms per rank; %% of the median step):\n"
                 "| batch | all-reduces/step | ms/step by rank | %% of step (rank 0) |\n|---|---|---|---|\n", R);
    for (int bi = 0; bi < o->n_batches; bi++) {
      const double *a = &ar[(size_t)bi * (R + 2)];
      char ms[256];
      size_t len = 0;
      ms[0] = 0;
      for (int r = 0; r < R && len < sizeof ms; r++)
        len += (size_t)snprintf(ms + len, sizeof ms - len, "%s%.3f", r ? " / " : "", a[1 + r]);
      fprintf(out, "| %d | %.0f | %s | %.1f %% |\n", o->batches[bi], a[0], ms,
              a[R + 1] > 0 ? 100.0 * a[1] / a[R + 1] : 0.0);
    }
  }
  if (o->n_prefill > 0 && !rc) fprintf(out, "\n| prompt | prefill ms | prefill tok/s |\n|---|---|---|\n");
  for (int i = 0; i < o->n_prefill && !rc; i++) {
    const int P = o->prefill[i];
    double best = 0;
    for (int k = 0; k < 3 && !rc; k++) { /* run 0 warms up (scratch sizes, GEMM plans) */
      const double t0 = gt_now_ms();
      rc = eb_prefill(m, &x, 0, P, err);
      const double ms = gt_now_ms() - t0;
      if (k > 0 && (best == 0 || ms < best)) best = ms;
    }
    if (!rc) fprintf(out, "| %d | %.1f | %.0f |\n", P, best, P / (best / 1e3));
    fflush(out);
    if (pprof && !rc) { /* one more prefill of P, profiled per op */
      eb_prof_t *p = &pprof[i];
      p->B = P;
      p->wall_us = best * 1e3;
      o->prof_arm(be);
      rc = eb_prefill(m, &x, 0, P, err);
      p->n = o->prof_get(be, p->rows, EB_PROF_ROWS, &p->sum);
    }
  }
  for (int bi = 0; bi < o->n_batches && prof && !rc; bi++) print_profile(&prof[bi], 0, out);
  for (int i = 0; i < o->n_prefill && pprof && !rc; i++) print_profile(&pprof[i], 1, out);
done:
  free(x.tok);
  free(x.pos);
  free(x.first);
  free(x.ntok);
  free(x.slot);
  free(x.outt);
  free(x.table);
  free(x.logits);
  free(x.ids);
  free(x.rows);
  free(x.hmax);
  free(steps);
  free(prof);
  free(pprof);
  free(ar);
  return rc;
}
