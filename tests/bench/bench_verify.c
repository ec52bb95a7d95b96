/* tests/bench/bench_verify.c — the cost of a speculative verify step against a plain decode step,
 * and of the MTP drafter, at the model level (no scheduler), each as serving runs it:
 *   decode  B sequences x 1 token, B greedy rows sampled on the backend (CUDA: its decode graph
 *           once captured)
 *   verify  B sequences x (1 + k) tokens (the pending token and k drafts), 1 + k rows each
 *   mtp     the MTP pass over r = round(accept) rows per sequence (the kept tokens) plus the k - 1
 *           chained one-row MTP steps that draft the next k tokens, as spec_mtp_run chains them
 *           (each step's greedy ids kept on the device and fed to the next, the k x B drafts
 *           downloaded once at the end: model_mtp_forward_greedy_dev; a backend without
 *           argmax_dev: one download per step); 0 when the file has no MTP block or --no-mtp
 * at context --ctx (a prefill fills the sequences' KV and state first), timed over --iters
 * repetitions at the same positions after --warm untimed ones. One line per batch size: the step
 * times in ms, verify / decode, and the decode rate speculation would give with acceptance length
 * --accept (tokens per verify step = 1 + accepted drafts), from the measured costs (CUDA: then
 * the graph steps / eager steps / captures of each kind of step over those repetitions; steady
 * steps replay graphs, so eager is 0 unless GANTRY_CUDA_GRAPHS=0):
 *   speedup = accept * t_decode / (t_verify + t_mtp)
 *   bench_verify --model M.gguf [--device cpu|cuda] [--batches 1,8] [--k 3] [--ctx 512]
 *                [--accept 2.5] [--iters 20] [--warm 3] [--threads N] [--no-mtp] [--draft-vocab N] [--profile]
 * --profile (CUDA): after each batch size's line, one decode and one verify step profiled per op
 * (be_cuda_profile_arm: eager, an event pair per op) and printed side by side, an op's rows count
 * left out of its label so the two steps' products match, largest verify - decode first.
 * --draft-vocab: the MTP drafts' vocabulary (ids [0, N); default the scheduler's, SCHED_SPEC_DRAFT_VOCAB for a
 * vocabulary over twice that; 0 = all). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "engine/models/model.h"
#include "engine/sched/sched.h" /* sched_spec_draft_vocab */
#ifdef GANTRY_HAVE_CUDA
#include "engine/backend/backend_cuda.h"
#endif

#define MAXB 64
#define PROF_ROWS 96 /* profile rows per step */
#define BT 16
#define MAXTOK 1024

typedef struct {
  model_t *m;
  int B, maxb;
  int32_t tok[MAXTOK], pos[MAXTOK], out[MAXTOK], src[MAXTOK], first[MAXB], ntok[MAXB], slot[MAXB];
  int32_t *bt;
  be_sample_row_t rows[MAXTOK];
  int32_t ids[MAXTOK];
  float *logits; /* [B, V] host: the MTP rows */
} bv_t;

/* B sequences of n tokens from position p0; out rows: every row (all) or each sequence's last */
static be_batch_t batch(bv_t *v, int n, int p0, int all) {
  int no = 0;
  for (int s = 0; s < v->B; s++) {
    v->first[s] = s * n;
    v->ntok[s] = n;
    v->slot[s] = s;
    for (int j = 0; j < n; j++) {
      v->tok[s * n + j] = (s * 131 + (p0 + j) * 17 + 7) % 1000;
      v->pos[s * n + j] = p0 + j;
      if (all || j == n - 1) v->out[no++] = s * n + j;
    }
  }
  return (be_batch_t){.n_tok = v->B * n, .n_seq = v->B, .tok = v->tok, .pos = v->pos, .seq_first = v->first,
                      .seq_ntok = v->ntok, .block_table = v->bt, .max_blocks = v->maxb,
                      .state_slot = v->m->hp.n_gdn_layers > 0 ? v->slot : NULL, .n_out = no, .out_tok = v->out};
}

/* the serving path: greedy rows sampled on the backend when it can, else host logits */
static int fwd(bv_t *v, const be_batch_t *b, float *host, gt_err_t *err) {
  if (!v->m->be->ops->sample) return model_forward(v->m, b, host, err);
  for (int i = 0; i < b->n_out; i++) v->rows[i] = (be_sample_row_t){.temperature = 0, .top_p = 1, .u = 0.5};
  return model_forward_sample(v->m, b, v->rows, v->ids, err);
}

/* one MTP step as the drafter runs it (engine/sched/spec_mtp.c): greedy ids taken on the backend
 * when it can sample, else host logits */
static int mtp_step(bv_t *v, const be_batch_t *b, gt_err_t *err) {
  if (v->m->be->ops->sample) return model_mtp_forward_greedy(v->m, b, v->src, v->ids, err);
  return model_mtp_forward(v->m, b, v->src, v->logits, err);
}

/* the drafter after a verify step of 1 + k rows per sequence: r kept rows, then k - 1 chained rows.
 * As spec_mtp_run: with a backend that keeps greedy ids (argmax_dev) each chained row's token is the
 * previous step's id on the device and the k x B drafts come back in one download at the end
 * (dev_ids [k * B] backend memory); else each step's ids come back on their own. */
static int mtp(bv_t *v, int k, int r, int p0, int32_t *dev_ids, gt_err_t *err) {
  be_batch_t b = batch(v, r, p0, 0);
  for (int s = 0; s < v->B; s++)
    for (int j = 0; j < r; j++) v->src[s * r + j] = s * (1 + k) + j;
  int32_t tok_src[MAXB];
  int rc = dev_ids ? model_mtp_forward_greedy_dev(v->m, &b, v->src, dev_ids, err) : mtp_step(v, &b, err);
  for (int c = 1; c < k && !rc; c++) {
    b = batch(v, 1, p0 + r - 1 + c, 1);
    for (int s = 0; s < v->B; s++) v->src[s] = -1 - s;
    if (dev_ids) {
      for (int s = 0; s < v->B; s++) tok_src[s] = (c - 1) * v->B + s;
      b.tok_src = tok_src;
      b.tok_dev = dev_ids;
      rc = model_mtp_forward_greedy_dev(v->m, &b, v->src, dev_ids + c * v->B, err);
    } else {
      rc = mtp_step(v, &b, err);
    }
  }
  if (dev_ids) {
    be_t *be = v->m->be;
    const int dl = be->ops->download(be, v->ids, dev_ids, sizeof(int32_t) * (size_t)k * v->B);
    if (!rc && dl) rc = gt_err_set(err, dl, "%s", be->err.msg);
  }
  return rc;
}

#ifdef GANTRY_HAVE_CUDA
/* label without its " x<rows>" token (bench.h's "matmul Q4_K 4096x12288 x1 mmq"): the same op
 * of a decode and a verify step get the same key */
static void prof_key(const char *label, char *key, size_t n) {
  size_t o = 0;
  for (const char *q = label; *q && o + 1 < n;) {
    if (q[0] == ' ' && q[1] == 'x' && q[2] >= '0' && q[2] <= '9') {
      const char *e = q + 2;
      while (*e >= '0' && *e <= '9') e++;
      if (*e == ' ' || *e == 0) {
        q = e;
        continue;
      }
    }
    key[o++] = *q++;
  }
  key[o] = 0;
}

/* one step of n tokens per sequence profiled per op into rows (returns the row count) */
static int prof_one(bv_t *v, int n, int p0, be_cuda_prof_t *rows, be_cuda_prof_sum_t *sum, gt_err_t *err) {
  be_cuda_profile_arm(v->m->be);
  be_batch_t b = batch(v, n, p0, n > 1);
  const int rc = fwd(v, &b, NULL, err);
  const int got = be_cuda_profile_get(v->m->be, rows, PROF_ROWS, sum);
  return rc ? -1 : got;
}

typedef struct {
  char key[64];
  int calls[2];
  double us[2];
} prof_pair_t;
static int pair_cmp(const void *a, const void *b) {
  const prof_pair_t *x = a, *y = b;
  const double dx = x->us[1] - x->us[0], dy = y->us[1] - y->us[0];
  return dx < dy ? 1 : dx > dy ? -1 : strcmp(x->key, y->key);
}

/* the decode and verify profiles of batch v->B side by side */
static int prof_print(bv_t *v, int k, int ctx, gt_err_t *err) {
  static be_cuda_prof_t rows[2][PROF_ROWS];
  static prof_pair_t pr[2 * PROF_ROWS];
  be_cuda_prof_sum_t sum[2];
  int n[2], np = 0;
  n[0] = prof_one(v, 1, ctx, rows[0], &sum[0], err);
  n[1] = n[0] < 0 ? -1 : prof_one(v, 1 + k, ctx, rows[1], &sum[1], err);
  if (n[0] < 0 || n[1] < 0) return -1;
  for (int s = 0; s < 2; s++)
    for (int i = 0; i < n[s]; i++) {
      char key[64];
      prof_key(rows[s][i].label, key, sizeof key);
      int j = 0;
      while (j < np && strcmp(pr[j].key, key)) j++;
      if (j == np) memset(&pr[np++], 0, sizeof pr[0]), snprintf(pr[j].key, sizeof pr[j].key, "%s", key);
      pr[j].calls[s] += rows[s][i].calls, pr[j].us[s] += rows[s][i].us;
    }
  qsort(pr, (size_t)np, sizeof pr[0], pair_cmp);
  printf("\nbatch %d, one decode step (1 token) and one verify step (1 + %d) per op (eager, event pairs%s): sum of ops "
         "%.1f / %.1f us (%d / %d ops)\n| op | calls | decode us | verify us | verify - decode |\n|---|---|---|---|---|\n",
         v->B, k, sum[0].gated && sum[1].gated ? "" : ", NOT gated", sum[0].ops_us, sum[1].ops_us, sum[0].n_ops,
         sum[1].n_ops);
  for (int j = 0; j < np; j++)
    printf("| %s | %d / %d | %.1f | %.1f | %+.1f |\n", pr[j].key, pr[j].calls[0], pr[j].calls[1], pr[j].us[0], pr[j].us[1],
           pr[j].us[1] - pr[j].us[0]);
  printf("| (total) | | %.1f | %.1f | %+.1f |\n\n", sum[0].ops_us, sum[1].ops_us, sum[1].ops_us - sum[0].ops_us);
  return 0;
}
#endif

int main(int argc, char **argv) {
  const char *path = NULL, *device = "cpu", *batches = "1,8";
  int k = 3, ctx = 512, iters = 20, warm = 3, threads = 0, use_mtp = 1, dvocab = -1, profile = 0;
  double accept = 2.5;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *n = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--no-mtp")) { use_mtp = 0; continue; }
    if (!strcmp(a, "--profile")) { profile = 1; continue; }
    if (!n) break;
    if (!strcmp(a, "--model")) path = n;
    else if (!strcmp(a, "--device")) device = n;
    else if (!strcmp(a, "--batches")) batches = n;
    else if (!strcmp(a, "--k")) k = atoi(n);
    else if (!strcmp(a, "--ctx")) ctx = atoi(n);
    else if (!strcmp(a, "--accept")) accept = atof(n);
    else if (!strcmp(a, "--iters")) iters = atoi(n);
    else if (!strcmp(a, "--warm")) warm = atoi(n);
    else if (!strcmp(a, "--threads")) threads = atoi(n);
    else if (!strcmp(a, "--draft-vocab")) dvocab = atoi(n);
    else { fprintf(stderr, "unknown option %s\n", a); return 2; }
    i++;
  }
  if (!path || k < 1 || k > 8 || ctx < 1 || iters < 1 || accept < 1 || accept > k + 1) {
    fprintf(stderr, "usage: bench_verify --model M.gguf [--device cpu|cuda] [--batches 1,8] [--k 1..8] [--ctx N] "
                    "[--accept 1..k+1] [--iters N] [--warm N] [--threads N] [--no-mtp] [--draft-vocab N] [--profile]\n");
    return 2;
  }
  int Bs[16], nB = 0, Bmax = 0;
  for (const char *p = batches; *p && nB < 16;) {
    Bs[nB] = atoi(p);
    if (Bs[nB] < 1 || Bs[nB] > MAXB || Bs[nB] * (1 + k) > MAXTOK) { fprintf(stderr, "bad batch in %s\n", batches); return 2; }
    if (Bs[nB] > Bmax) Bmax = Bs[nB];
    nB++;
    while (*p && *p != ',') p++;
    if (*p) p++;
  }
  gt_err_t err = {0};
  gguf_t *g = NULL;
  be_t *be = NULL;
  model_t *m = NULL;
  int rc = gguf_open(path, &g, &err);
#ifdef GANTRY_HAVE_CUDA
  if (!rc && !strcmp(device, "cuda")) rc = be_cuda_create(0, &be, &err);
#endif
  if (!rc && !strcmp(device, "cpu")) rc = be_cpu_create(threads, &be, &err);
  if (!rc && !be) rc = gt_err_set(&err, GT_EINVAL, "device %s not available", device);
  if (!rc) rc = model_load(g, be, MAXTOK, &m, &err);
  if (!rc && use_mtp && m->hp.n_nextn == 0) use_mtp = 0;
  if (!rc && use_mtp) rc = model_mtp_enable(m, &err);
  /* the drafter's vocabulary: the scheduler's default (sched_config_t.spec_draft_vocab) unless given */
  if (!rc) m->mtp_draft_vocab = sched_spec_draft_vocab(dvocab < 0 ? 0 : dvocab == 0 ? -1 : dvocab, m->hp.n_vocab);
  static bv_t v;
  v.m = m;
  v.maxb = (ctx + k + 2 + BT - 1) / BT;
  if (!rc) rc = model_cache_init(m, Bmax * v.maxb, BT, Bmax, &err);
  v.bt = malloc(sizeof(int32_t) * (size_t)Bmax * v.maxb);
  v.logits = m ? malloc(sizeof(float) * (size_t)Bmax * m->hp.n_vocab) : NULL;
  if (rc || !v.bt || !v.logits) {
    fprintf(stderr, "bench_verify: %s\n", rc ? err.msg : "out of memory");
    return 1;
  }
  /* the chain's ids on the device, as spec_mtp_run keeps them (a backend with argmax_dev) */
  int32_t *dev_ids = use_mtp && be->ops->argmax_dev ? be->ops->alloc(be, sizeof(int32_t) * 8 * MAXB) : NULL;
  if (use_mtp && be->ops->argmax_dev && !dev_ids) {
    fprintf(stderr, "bench_verify: out of memory (MTP draft ids)\n");
    return 1;
  }
  const int r = (int)lround(accept);
  printf("model %s  device %s  k %d  ctx %d  accept %.2f  mtp %s  draft vocab %d  iters %d\n", m->hp.name, device, k, ctx,
         accept, use_mtp ? "yes" : "no", m->mtp_draft_vocab ? m->mtp_draft_vocab : m->hp.n_vocab, iters);
  printf("%5s | %10s | %10s | %8s | %10s | %8s\n", "batch", "decode ms", "verify ms", "ver/dec", "mtp ms", "speedup");
  for (int bi = 0; bi < nB; bi++) {
    v.B = Bs[bi];
    for (int s = 0; s < v.B; s++)
      for (int j = 0; j < v.maxb; j++) v.bt[s * v.maxb + j] = s * v.maxb + j;
    /* prefill ctx tokens per sequence, in chunks that fit a step */
    for (int p = 0; p < ctx && !rc;) {
      int n = MAXTOK / v.B < ctx - p ? MAXTOK / v.B : ctx - p;
      be_batch_t b = batch(&v, n, p, 0);
      rc = fwd(&v, &b, v.logits, &err);
      p += n;
    }
    double t[3] = {0, 0, 0};
#ifdef GANTRY_HAVE_CUDA
    be_cuda_stats_t st0, st1;
    if (!strcmp(device, "cuda")) be_cuda_get_stats(be, &st0);
#endif
    for (int it = 0; it < warm + iters && !rc; it++) {
      be_batch_t b = batch(&v, 1, ctx, 1);
      double t0 = gt_now_ms();
      rc = fwd(&v, &b, v.logits, &err);
      double t1 = gt_now_ms();
      b = batch(&v, 1 + k, ctx, 1);
      if (!rc) rc = fwd(&v, &b, NULL, &err);
      double t2 = gt_now_ms();
      if (!rc && use_mtp) rc = mtp(&v, k, r, ctx, dev_ids, &err);
      double t3 = gt_now_ms();
      if (it >= warm) t[0] += t1 - t0, t[1] += t2 - t1, t[2] += t3 - t2;
    }
    if (rc) break;
    for (int i = 0; i < 3; i++) t[i] /= iters;
    printf("%5d | %10.3f | %10.3f | %8.3f | %10.3f | %7.2fx\n", v.B, t[0], t[1], t[1] / t[0], t[2],
           accept * t[0] / (t[1] + t[2]));
#ifdef GANTRY_HAVE_CUDA
    if (!strcmp(device, "cuda")) { /* the warm and timed steps of this batch size */
      be_cuda_get_stats(be, &st1);
      static const char *const kind[] = {"decode", "verify", "drafter"};
      printf("      | graph steps / eager steps / captures:");
      for (int k = 0; k < BE_CUDA_STEP_KINDS; k++)
        printf(" %s %ld / %ld / %ld%s", kind[k], st1.kind_graph[k] - st0.kind_graph[k], st1.kind_eager[k] - st0.kind_eager[k],
               st1.kind_captures[k] - st0.kind_captures[k], k + 1 < BE_CUDA_STEP_KINDS ? "," : "\n");
      if (profile && prof_print(&v, k, ctx, &err)) {
        rc = -1;
        break;
      }
    }
#endif
  }
  if (profile && strcmp(device, "cuda")) fprintf(stderr, "bench_verify: --profile needs --device cuda\n");
  if (rc) fprintf(stderr, "bench_verify: %s\n", err.msg);
  if (dev_ids) be->ops->free(be, dev_ids);
  model_free(m);
  be_destroy(be);
  gguf_close(g);
  free(v.bt);
  free(v.logits);
  return rc ? 1 : 0;
}
