/* tests/unit/test_gdn_ops.c — the CPU backend's Gated DeltaNet ops against a naive float64
 * implementation written here, on random inputs: multi-sequence batches, sequences that
 * continue across steps (one prefill == chunks of varying sizes == token by token, bitwise),
 * bad arguments (sticky error, no crash), and the chunked form (engine/backend/gdn_chunked.c) against
 * the sequential scan.
 *
 * The ops are driven through a hand-built be_cpu_t (batch arrays + state), so this test does
 * not depend on the rest of the CPU backend. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "engine/backend/backend_cpu_internal.h"
#include "engine/backend/gdn_chunked.h"

/* ---- shapes of the synthetic GDN layer ---- */
enum { NK = 2, NV = 4, DK = 16, DV = 8, KC = 4, NSEQ = 3, NSLOT = 5, NLAYER = 2 };
#define CCH (2 * NK * DK + NV * DV) /* conv channels */
static const int seq_len[NSEQ] = {37, 1, 23};
static const int seq_slot[NSEQ] = {3, 0, 4};
#define LAYER 1 /* use the second GDN layer so layer offsets are exercised */

/* ---- deterministic random numbers ---- */
static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static double urand(void) { /* [0, 1) */
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return (double)(rng_state >> 11) / 9007199254740992.0;
}
static float frand(float lo, float hi) { return (float)(lo + (hi - lo) * urand()); }
static void fill(float *x, size_t n, float lo, float hi) {
  for (size_t i = 0; i < n; i++) x[i] = frand(lo, hi);
}

/* ---- a hand-built CPU backend holding only what the GDN ops read ---- */
typedef struct {
  be_cpu_t c;
  int32_t seq_first[NSEQ], seq_ntok[NSEQ], slot[NSEQ];
} harness_t;

static void h_init(harness_t *h) {
  memset(h, 0, sizeof *h);
  h->c.n_threads = 2;
  h->c.st_layers = NLAYER;
  h->c.st_slots = NSLOT;
  h->c.conv_dim = (size_t)(KC - 1) * CCH;
  h->c.ssm_dim = (size_t)NV * DK * DV;
  h->c.conv = calloc((size_t)NLAYER * NSLOT * h->c.conv_dim, sizeof(float));
  h->c.ssm = calloc((size_t)NLAYER * NSLOT * h->c.ssm_dim, sizeof(float));
  assert_non_null(h->c.conv);
  assert_non_null(h->c.ssm);
  /* garbage in the unused slots: must never leak into results */
  fill(h->c.conv, (size_t)NLAYER * NSLOT * h->c.conv_dim, -9, 9);
  fill(h->c.ssm, (size_t)NLAYER * NSLOT * h->c.ssm_dim, -9, 9);
  for (int s = 0; s < NSEQ; s++) {
    memset(cpu_conv_state(&h->c, LAYER, seq_slot[s]), 0, h->c.conv_dim * sizeof(float));
    memset(cpu_ssm_state(&h->c, LAYER, seq_slot[s]), 0, h->c.ssm_dim * sizeof(float));
  }
}
static void h_free(harness_t *h) {
  free(h->c.conv);
  free(h->c.ssm);
}
/* Sets the batch: sequences sel[0..n) with ntok[i] tokens each (contiguous, in order). */
static int h_batch(harness_t *h, int n, const int *sel, const int *ntok) {
  int t = 0;
  for (int i = 0; i < n; i++) {
    h->seq_first[i] = t;
    h->seq_ntok[i] = ntok[i];
    h->slot[i] = seq_slot[sel[i]];
    t += ntok[i];
  }
  h->c.b.n_tok = t;
  h->c.b.n_seq = n;
  h->c.b.seq_first = h->seq_first;
  h->c.b.seq_ntok = h->seq_ntok;
  h->c.b.state_slot = h->slot;
  h->c.seq_first = h->seq_first;
  h->c.seq_ntok = h->seq_ntok;
  h->c.state_slot = h->slot;
  return t;
}

/* ---- naive float64 references, one whole sequence from zero state ---- */
static double dsilu(double x) { return x / (1.0 + exp(-x)); }

/* x, out [n, CCH]; w [CCH, KC] */
static void ref_conv(const float *x, const float *w, double *out, int n) {
  for (int t = 0; t < n; t++)
    for (int ch = 0; ch < CCH; ch++) {
      double acc = 0;
      for (int j = 0; j < KC; j++) {
        int p = t - (KC - 1) + j;
        if (p >= 0) acc += (double)w[ch * KC + j] * x[(size_t)p * CCH + ch];
      }
      out[(size_t)t * CCH + ch] = dsilu(acc);
    }
}

/* q, k [n, NK*DK]; v, out [n, NV*DV]; g, beta [n, NV] */
static void ref_scan(const float *q, const float *k, const float *v, const float *g, const float *beta,
                     double *out, int n) {
  static double S[NV][DK][DV];
  memset(S, 0, sizeof S);
  for (int t = 0; t < n; t++)
    for (int h = 0; h < NV; h++) {
      const float *qt = q + (size_t)t * NK * DK + (h % NK) * DK;
      const float *kt = k + (size_t)t * NK * DK + (h % NK) * DK;
      const float *vt = v + (size_t)t * NV * DV + h * DV;
      double e = exp((double)g[t * NV + h]), b = beta[t * NV + h];
      for (int i = 0; i < DK; i++)
        for (int j = 0; j < DV; j++) S[h][i][j] *= e;
      for (int j = 0; j < DV; j++) {
        double kv = 0;
        for (int i = 0; i < DK; i++) kv += S[h][i][j] * kt[i];
        double d = b * (vt[j] - kv);
        for (int i = 0; i < DK; i++) S[h][i][j] += kt[i] * d;
      }
      for (int j = 0; j < DV; j++) {
        double o = 0;
        for (int i = 0; i < DK; i++) o += S[h][i][j] * qt[i];
        out[(size_t)t * NV * DV + h * DV + j] = o;
      }
    }
}

/* max |a - ref| / max |ref| */
static double rel_err(const float *a, const double *ref, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; i++) {
    num = fmax(num, fabs((double)a[i] - ref[i]));
    den = fmax(den, fabs(ref[i]));
  }
  return den > 0 ? num / den : num;
}

/* ---- schedules: how each sequence's tokens are cut into steps ---- */
typedef enum { SCHED_ONE = 0, SCHED_CHUNKS, SCHED_TOKENS, SCHED_COUNT } sched_t;
static const char *sched_name[SCHED_COUNT] = {"one prefill", "chunks", "token by token"};

/* Size of the next piece of sequence s (done tokens so far) under a schedule. */
static int next_piece(sched_t sc, int s, int done, int step) {
  int left = seq_len[s] - done;
  if (left <= 0) return 0;
  int want;
  switch (sc) {
    case SCHED_ONE: want = left; break;
    case SCHED_TOKENS: want = 1; break;
    default: {
      static const int sizes[] = {7, 3, 1, 11, 5, 2};
      if ((step + s) % 4 == 3) return 0; /* sequence sits out this step */
      want = sizes[(step + 2 * s) % 6];
    }
  }
  return want < left ? want : left;
}

/* Runs `op` over all sequences under a schedule. Inputs/outputs are per-sequence arrays of
 * rows (in_w / out_w floats per token); op gets the packed batch. */
typedef void (*packed_op_t)(harness_t *h, const float *const *in, float *out, int n_tok);

static void run_sched(harness_t *h, sched_t sc, int n_in, const float *const seq_in[][4], const int *in_w,
                      float *const seq_out[], int out_w, packed_op_t op) {
  int done[NSEQ] = {0};
  float *in_pack[4] = {0};
  int max_tok = 0;
  for (int s = 0; s < NSEQ; s++) max_tok += seq_len[s];
  for (int i = 0; i < n_in; i++) assert_non_null(in_pack[i] = malloc(sizeof(float) * (size_t)max_tok * in_w[i]));
  float *out_pack = malloc(sizeof(float) * (size_t)max_tok * out_w);
  assert_non_null(out_pack);
  for (int step = 0; step < 1000; step++) {
    int sel[NSEQ], ntok[NSEQ], n = 0, any_left = 0;
    for (int s = 0; s < NSEQ; s++) {
      if (done[s] < seq_len[s]) any_left = 1;
      int p = next_piece(sc, s, done[s], step);
      if (p > 0) {
        sel[n] = s;
        ntok[n++] = p;
      }
    }
    if (!any_left) break;
    if (n == 0) continue;
    int n_tok = h_batch(h, n, sel, ntok);
    for (int i = 0; i < n_in; i++)
      for (int j = 0; j < n; j++)
        memcpy(in_pack[i] + (size_t)h->seq_first[j] * in_w[i], seq_in[sel[j]][i] + (size_t)done[sel[j]] * in_w[i],
               sizeof(float) * (size_t)ntok[j] * in_w[i]);
    op(h, (const float *const *)in_pack, out_pack, n_tok);
    assert_int_equal(h->c.base.err.code, GT_OK);
    for (int j = 0; j < n; j++) {
      memcpy(seq_out[sel[j]] + (size_t)done[sel[j]] * out_w, out_pack + (size_t)h->seq_first[j] * out_w,
             sizeof(float) * (size_t)ntok[j] * out_w);
      done[sel[j]] += ntok[j];
    }
  }
  for (int s = 0; s < NSEQ; s++) assert_int_equal(done[s], seq_len[s]);
  for (int i = 0; i < n_in; i++) free(in_pack[i]);
  free(out_pack);
}

/* ---- conv1d_silu ---- */
static be_weight_t conv_w;

static void op_conv(harness_t *h, const float *const *in, float *out, int n_tok) {
  cpu_conv1d_silu(&h->c.base, LAYER, in[0], out, &conv_w, CCH, KC);
}

static void test_conv1d_silu(void **state) {
  (void)state;
  float *w = malloc(sizeof(float) * CCH * KC);
  fill(w, CCH * KC, -0.8f, 0.8f);
  conv_w = (be_weight_t){.type = GT_TYPE_F32, .rows = CCH, .cols = KC, .row_bytes = KC * sizeof(float), .data = w};
  const float *seq_in[NSEQ][4];
  float *x[NSEQ], *res[SCHED_COUNT][NSEQ];
  double *ref[NSEQ];
  for (int s = 0; s < NSEQ; s++) {
    x[s] = malloc(sizeof(float) * seq_len[s] * CCH);
    fill(x[s], (size_t)seq_len[s] * CCH, -2, 2);
    seq_in[s][0] = x[s];
    ref[s] = malloc(sizeof(double) * seq_len[s] * CCH);
    ref_conv(x[s], w, ref[s], seq_len[s]);
  }
  const int in_w[1] = {CCH};
  for (int sc = 0; sc < SCHED_COUNT; sc++) {
    harness_t h;
    h_init(&h);
    for (int s = 0; s < NSEQ; s++) res[sc][s] = malloc(sizeof(float) * seq_len[s] * CCH);
    run_sched(&h, (sched_t)sc, 1, seq_in, in_w, res[sc], CCH, op_conv);
    for (int s = 0; s < NSEQ; s++) {
      double e = rel_err(res[sc][s], ref[s], (size_t)seq_len[s] * CCH);
      if (e > 1e-5) fail_msg("conv1d_silu %s seq %d: rel err %.3g > 1e-5", sched_name[sc], s, e);
      /* the conv state holds the last K-1 inputs */
      const float *st = cpu_conv_state(&h.c, LAYER, seq_slot[s]);
      for (int r = 0; r < KC - 1; r++) {
        int p = seq_len[s] - (KC - 1) + r;
        for (int ch = 0; ch < CCH; ch++)
          assert_true(st[r * CCH + ch] == (p >= 0 ? x[s][(size_t)p * CCH + ch] : 0.0f));
      }
    }
    h_free(&h);
  }
  /* every schedule gives bit-identical outputs */
  for (int sc = 1; sc < SCHED_COUNT; sc++)
    for (int s = 0; s < NSEQ; s++)
      assert_memory_equal(res[sc][s], res[0][s], sizeof(float) * seq_len[s] * CCH);
  /* out == x (in place) gives the same result */
  {
    harness_t h;
    h_init(&h);
    int sel[1] = {0}, nt[1] = {seq_len[0]};
    h_batch(&h, 1, sel, nt);
    float *buf = malloc(sizeof(float) * seq_len[0] * CCH);
    memcpy(buf, x[0], sizeof(float) * seq_len[0] * CCH);
    cpu_conv1d_silu(&h.c.base, LAYER, buf, buf, &conv_w, CCH, KC);
    assert_memory_equal(buf, res[0][0], sizeof(float) * seq_len[0] * CCH);
    free(buf);
    h_free(&h);
  }
  for (int s = 0; s < NSEQ; s++) {
    free(x[s]);
    free(ref[s]);
    for (int sc = 0; sc < SCHED_COUNT; sc++) free(res[sc][s]);
  }
  free(w);
}

/* ---- gdn_scan ---- */
/* beta is packed after g in the same input row: [g(NV) | beta(NV)] */
static void op_scan_gb(harness_t *h, const float *const *in, float *out, int n_tok) {
  /* in[3] holds rows of [g | beta]; split into packed g and beta */
  float *g = malloc(sizeof(float) * (size_t)n_tok * NV), *b = malloc(sizeof(float) * (size_t)n_tok * NV);
  for (int t = 0; t < n_tok; t++)
    for (int j = 0; j < NV; j++) {
      g[t * NV + j] = in[3][t * 2 * NV + j];
      b[t * NV + j] = in[3][t * 2 * NV + NV + j];
    }
  cpu_gdn_scan(&h->c.base, LAYER, in[0], in[1], in[2], g, b, out, NK, NV, DK, DV);
  free(g);
  free(b);
}

static void unit_rows(float *x, int rows, int d) {
  for (int r = 0; r < rows; r++) {
    double ss = 0;
    for (int i = 0; i < d; i++) ss += (double)x[r * d + i] * x[r * d + i];
    for (int i = 0; i < d; i++) x[r * d + i] = (float)(x[r * d + i] / sqrt(ss));
  }
}

static void test_gdn_scan(void **state) {
  (void)state;
  const float *seq_in[NSEQ][4];
  float *q[NSEQ], *k[NSEQ], *v[NSEQ], *gb[NSEQ], *res[SCHED_COUNT][NSEQ];
  double *ref[NSEQ];
  for (int s = 0; s < NSEQ; s++) {
    int n = seq_len[s];
    q[s] = malloc(sizeof(float) * n * NK * DK);
    k[s] = malloc(sizeof(float) * n * NK * DK);
    v[s] = malloc(sizeof(float) * n * NV * DV);
    gb[s] = malloc(sizeof(float) * n * 2 * NV);
    fill(q[s], (size_t)n * NK * DK, -1, 1);
    fill(k[s], (size_t)n * NK * DK, -1, 1);
    unit_rows(q[s], n * NK, DK);
    unit_rows(k[s], n * NK, DK);
    for (int i = 0; i < n * NK * DK; i++) q[s][i] *= 0.25f;
    fill(v[s], (size_t)n * NV * DV, -2, 2);
    float *g = malloc(sizeof(float) * n * NV), *b = malloc(sizeof(float) * n * NV);
    for (int t = 0; t < n; t++)
      for (int j = 0; j < NV; j++) {
        g[t * NV + j] = gb[s][t * 2 * NV + j] = frand(-1.5f, -0.001f);
        b[t * NV + j] = gb[s][t * 2 * NV + NV + j] = frand(0.05f, 0.99f);
      }
    seq_in[s][0] = q[s];
    seq_in[s][1] = k[s];
    seq_in[s][2] = v[s];
    seq_in[s][3] = gb[s];
    ref[s] = malloc(sizeof(double) * n * NV * DV);
    ref_scan(q[s], k[s], v[s], g, b, ref[s], n);
    free(g);
    free(b);
  }
  const int in_w[4] = {NK * DK, NK * DK, NV * DV, 2 * NV};
  double worst = 0;
  for (int sc = 0; sc < SCHED_COUNT; sc++) {
    harness_t h;
    h_init(&h);
    for (int s = 0; s < NSEQ; s++) res[sc][s] = malloc(sizeof(float) * seq_len[s] * NV * DV);
    run_sched(&h, (sched_t)sc, 4, seq_in, in_w, res[sc], NV * DV, op_scan_gb);
    for (int s = 0; s < NSEQ; s++) {
      double e = rel_err(res[sc][s], ref[s], (size_t)seq_len[s] * NV * DV);
      worst = fmax(worst, e);
      if (e > 1e-5) fail_msg("gdn_scan %s seq %d: rel err %.3g > 1e-5", sched_name[sc], s, e);
    }
    h_free(&h);
  }
  print_message("gdn_scan vs float64: max rel err %.3g\n", worst);
  for (int sc = 1; sc < SCHED_COUNT; sc++)
    for (int s = 0; s < NSEQ; s++)
      assert_memory_equal(res[sc][s], res[0][s], sizeof(float) * seq_len[s] * NV * DV);
  for (int s = 0; s < NSEQ; s++) {
    free(q[s]);
    free(k[s]);
    free(v[s]);
    free(gb[s]);
    free(ref[s]);
    for (int sc = 0; sc < SCHED_COUNT; sc++) free(res[sc][s]);
  }
}

/* ---- chunked form vs the sequential scan ---- */
typedef struct {
  int n;
  float *q, *k, *v, *g, *b; /* [n, NK*DK] x2, [n, NV*DV], [n, NV] x2 */
} scan_in_t;

static void scan_in_make(scan_in_t *in, int n, float g_lo, float g_hi) {
  in->n = n;
  in->q = malloc(sizeof(float) * n * NK * DK);
  in->k = malloc(sizeof(float) * n * NK * DK);
  in->v = malloc(sizeof(float) * n * NV * DV);
  in->g = malloc(sizeof(float) * n * NV);
  in->b = malloc(sizeof(float) * n * NV);
  fill(in->q, (size_t)n * NK * DK, -1, 1);
  fill(in->k, (size_t)n * NK * DK, -1, 1);
  unit_rows(in->q, n * NK, DK);
  unit_rows(in->k, n * NK, DK);
  for (int i = 0; i < n * NK * DK; i++) in->q[i] *= 0.25f;
  fill(in->v, (size_t)n * NV * DV, -2, 2);
  fill(in->g, (size_t)n * NV, g_lo, g_hi);
  fill(in->b, (size_t)n * NV, 0.05f, 0.99f);
}
static void scan_in_free(scan_in_t *in) {
  free(in->q);
  free(in->k);
  free(in->v);
  free(in->g);
  free(in->b);
}

/* Sequential reference through the backend op: one sequence in slot seq_slot[0]. */
static void seq_scan(harness_t *h, const scan_in_t *in, int t0, int n, float *out) {
  int sel[1] = {0}, nt[1] = {n};
  h_batch(h, 1, sel, nt);
  cpu_gdn_scan(&h->c.base, LAYER, in->q + (size_t)t0 * NK * DK, in->k + (size_t)t0 * NK * DK,
               in->v + (size_t)t0 * NV * DV, in->g + (size_t)t0 * NV, in->b + (size_t)t0 * NV, out, NK, NV, DK, DV);
  assert_int_equal(h->c.base.err.code, GT_OK);
}

static double rel_errf(const float *a, const float *ref, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; i++) {
    num = fmax(num, fabs((double)a[i] - ref[i]));
    den = fmax(den, fabs((double)ref[i]));
  }
  return den > 0 ? num / den : num;
}

static void test_chunked_vs_sequential(void **state) {
  (void)state;
  static const int chunks[] = {1, 7, 16, 64, 200};
  static const struct {
    int n;
    float g_lo, g_hi;
  } sets[] = {{150, -1.5f, -0.001f}, {130, -15.0f, -2.0f}, {70, -0.05f, 0.0f}};
  const size_t ssz = (size_t)NV * DK * DV;
  double worst = 0;
  for (size_t si = 0; si < sizeof sets / sizeof sets[0]; si++) {
    scan_in_t in;
    scan_in_make(&in, sets[si].n, sets[si].g_lo, sets[si].g_hi);
    const int n = in.n, split = n / 3;
    float *ref = malloc(sizeof(float) * n * NV * DV), *out = malloc(sizeof(float) * n * NV * DV);
    float *S_ref = malloc(sizeof(float) * ssz), *S = malloc(sizeof(float) * ssz);
    /* sequential: the first `split` tokens, then the rest (state carried in the slot) */
    harness_t h;
    h_init(&h);
    seq_scan(&h, &in, 0, split, ref);
    float *S_mid = malloc(sizeof(float) * ssz);
    memcpy(S_mid, cpu_ssm_state(&h.c, LAYER, seq_slot[0]), sizeof(float) * ssz);
    seq_scan(&h, &in, split, n - split, ref + (size_t)split * NV * DV);
    memcpy(S_ref, cpu_ssm_state(&h.c, LAYER, seq_slot[0]), sizeof(float) * ssz);
    h_free(&h);
    for (size_t ci = 0; ci < sizeof chunks / sizeof chunks[0]; ci++) {
      const int chunk = chunks[ci];
      float *ws = malloc(sizeof(float) * gdn_chunked_ws_floats(chunk, DK, DV));
      /* from zero state over the first part, then continue from the state it left */
      memset(S, 0, sizeof(float) * ssz);
      assert_int_equal(gdn_chunked_seq(in.q, in.k, in.v, in.g, in.b, out, S, split, NK, NV, DK, DV, chunk, ws), 0);
      double es = rel_errf(S, S_mid, ssz);
      assert_int_equal(gdn_chunked_seq(in.q + (size_t)split * NK * DK, in.k + (size_t)split * NK * DK,
                                       in.v + (size_t)split * NV * DV, in.g + (size_t)split * NV,
                                       in.b + (size_t)split * NV, out + (size_t)split * NV * DV, S, n - split, NK,
                                       NV, DK, DV, chunk, ws),
                       0);
      double eo = rel_errf(out, ref, (size_t)n * NV * DV), ef = rel_errf(S, S_ref, ssz);
      worst = fmax(worst, fmax(eo, fmax(es, ef)));
      if (eo > 2e-5 || es > 2e-5 || ef > 2e-5)
        fail_msg("chunked (chunk %d, set %zu) vs sequential: out %.3g, mid state %.3g, final state %.3g", chunk, si,
                 eo, es, ef);
      free(ws);
    }
    free(ref);
    free(out);
    free(S_ref);
    free(S);
    free(S_mid);
    scan_in_free(&in);
  }
  print_message("chunked vs sequential gdn: max rel err %.3g\n", worst);
  /* bad sizes are refused */
  float x[4] = {0}, ws[4];
  assert_int_equal(gdn_chunked_head(x, x, x, x, x, 1, 1, 1, ws, x, 1, 1, 1, GDN_CHUNK_MAX + 1, ws), -1);
  assert_int_equal(gdn_chunked_seq(x, x, x, x, x, ws, x, 1, 3, 4, 1, 1, 4, ws), -1);
}

/* ---- pointwise ops ---- */
static void test_l2norm_gates_rmsnorm_gated(void **state) {
  (void)state;
  harness_t h;
  h_init(&h);
  int sel[2] = {0, 2}, nt[2] = {5, 4};
  const int n_tok = h_batch(&h, 2, sel, nt);
  be_t *be = &h.c.base;

  /* l2norm with scale: x * scale / sqrt(|x|^2 + eps) (HF / fla), finite on a zero row */
  enum { R = 6, D = 24 };
  float x[R * D];
  fill(x, R * D, -3, 3);
  memset(x + 2 * D, 0, sizeof(float) * D);
  for (int i = 0; i < D; i++) x[3 * D + i] *= 1e-3f; /* |x|^2 ~ 1e-4: the eps term shows (0.5 %) */
  float x0[R * D];
  memcpy(x0, x, sizeof x);
  cpu_l2norm(be, x, R, D, 1e-6f, 0.5f);
  for (int r = 0; r < R; r++) {
    double ss = 0;
    for (int i = 0; i < D; i++) ss += (double)x0[r * D + i] * x0[r * D + i];
    double f = 0.5 / sqrt(ss + 1e-6);
    for (int i = 0; i < D; i++) assert_float_equal(x[r * D + i], x0[r * D + i] * f, 1e-6);
  }

  /* gates, also in place (g aliasing alpha, beta aliasing beta_in) */
  float a[NV], dt[NV], alpha[64], bin[64], g[64], beta[64];
  fill(a, NV, -3, -0.1f);
  fill(dt, NV, -1, 1);
  fill(alpha, (size_t)n_tok * NV, -4, 4);
  alpha[3] = 30.0f; /* softplus threshold branch */
  fill(bin, (size_t)n_tok * NV, -4, 4);
  be_weight_t wa = {GT_TYPE_F32, 1, NV, NV * 4, a}, wdt = {GT_TYPE_F32, 1, NV, NV * 4, dt};
  cpu_gdn_gates(be, alpha, bin, &wa, &wdt, g, beta, NV);
  for (int t = 0; t < n_tok; t++)
    for (int j = 0; j < NV; j++) {
      double z = (double)alpha[t * NV + j] + dt[j];
      double sp = z > 20 ? z : log1p(exp(z));
      assert_float_equal(g[t * NV + j], a[j] * sp, 1e-5 * fabs(a[j] * sp) + 1e-7);
      assert_float_equal(beta[t * NV + j], 1.0 / (1.0 + exp(-(double)bin[t * NV + j])), 1e-6);
    }
  cpu_gdn_gates(be, alpha, bin, &wa, &wdt, alpha, bin, NV);
  assert_memory_equal(alpha, g, sizeof(float) * n_tok * NV);
  assert_memory_equal(bin, beta, sizeof(float) * n_tok * NV);

  /* rmsnorm_gated, and in place */
  float xs[R * D], z[R * D], w[D], out[R * D];
  fill(xs, R * D, -2, 2);
  fill(z, R * D, -3, 3);
  fill(w, D, -1.5f, 1.5f);
  be_weight_t ww = {GT_TYPE_F32, 1, D, D * 4, w};
  cpu_rmsnorm_gated(be, xs, &ww, z, out, R, D, 1e-6f);
  for (int r = 0; r < R; r++) {
    double ss = 0;
    for (int i = 0; i < D; i++) ss += (double)xs[r * D + i] * xs[r * D + i];
    double f = 1.0 / sqrt(ss / D + 1e-6);
    for (int i = 0; i < D; i++) {
      double e = xs[r * D + i] * f * w[i] * dsilu(z[r * D + i]);
      assert_float_equal(out[r * D + i], e, 1e-5 * fabs(e) + 1e-6);
    }
  }
  cpu_rmsnorm_gated(be, xs, &ww, z, xs, R, D, 1e-6f);
  assert_memory_equal(xs, out, sizeof out);
  assert_int_equal(be->err.code, GT_OK);
  h_free(&h);
}

/* ---- bad arguments: a clear sticky error, state untouched ---- */
static void test_errors(void **state) {
  (void)state;
  float w[CCH * KC] = {0}, x[CCH * 4] = {0}, out[CCH * 4];
  be_weight_t cw = {GT_TYPE_F32, CCH, KC, KC * 4, w};
  struct {
    const char *what;
    int layer, slot, K, nk;
    gt_type_t wt;
  } cases[] = {
      {"layer out of range", NLAYER, 0, KC, NK, GT_TYPE_F32},
      {"negative layer", -1, 0, KC, NK, GT_TYPE_F32},
      {"slot out of range", LAYER, NSLOT, KC, NK, GT_TYPE_F32},
      {"kernel mismatch", LAYER, 0, KC + 1, NK, GT_TYPE_F32},
      {"weight not F32", LAYER, 0, KC, NK, GT_TYPE_BF16},
      {"n_v not a multiple of n_k", LAYER, 0, KC, 3, GT_TYPE_F32},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    harness_t h;
    h_init(&h);
    int sel[1] = {1}, nt[1] = {4};
    h_batch(&h, 1, sel, nt);
    h.slot[0] = cases[i].slot;
    cw.type = cases[i].wt;
    float *before = malloc(sizeof(float) * NLAYER * NSLOT * h.c.ssm_dim);
    memcpy(before, h.c.ssm, sizeof(float) * NLAYER * NSLOT * h.c.ssm_dim);
    if (cases[i].nk != NK) {
      cpu_gdn_scan(&h.c.base, cases[i].layer, x, x, x, x, x, out, cases[i].nk, NV, DK, DV);
    } else {
      cpu_conv1d_silu(&h.c.base, cases[i].layer, x, out, &cw, CCH, cases[i].K);
      if (cases[i].K == KC && cases[i].wt == GT_TYPE_F32)
        cpu_gdn_scan(&h.c.base, cases[i].layer, x, x, x, x, x, out, NK, NV, DK, DV);
    }
    if (h.c.base.err.code == GT_OK) fail_msg("case '%s': no error", cases[i].what);
    assert_true(h.c.base.err.msg[0] != 0);
    assert_memory_equal(before, h.c.ssm, sizeof(float) * NLAYER * NSLOT * h.c.ssm_dim);
    /* sticky: a later valid call does nothing and keeps the first error */
    int code = h.c.base.err.code;
    h.slot[0] = seq_slot[1];
    cw.type = GT_TYPE_F32;
    cpu_gdn_scan(&h.c.base, LAYER, x, x, x, x, x, out, NK, NV, DK, DV);
    assert_int_equal(h.c.base.err.code, code);
    free(before);
    h_free(&h);
  }
  /* no state slots in the batch */
  harness_t h;
  h_init(&h);
  int sel[1] = {0}, nt[1] = {2};
  h_batch(&h, 1, sel, nt);
  h.c.b.state_slot = NULL;
  h.c.state_slot = NULL;
  cpu_gdn_scan(&h.c.base, LAYER, x, x, x, x, x, out, NK, NV, DK, DV);
  assert_int_equal(h.c.base.err.code, GT_EINVAL);
  h_free(&h);
}

/* ---- per-position states (be_batch_t.state_pos_slot) ----
 * Sequences of 1..PS_NSEQ tokens in one batch, each continuing from a random state, with a
 * position slot for every token but the last: each position slot holds, bitwise, the state
 * (conv and SSM) that feeding the tokens one at a time leaves after that token; the outputs and
 * the sequences' own slots are those of the plain batch. */
enum { PS_NSEQ = 5, PS_SLOTS = PS_NSEQ + PS_NSEQ * (PS_NSEQ - 1) / 2 };
static void ps_init(be_cpu_t *c, int32_t *first, int32_t *ntok, int32_t *slot) {
  memset(c, 0, sizeof *c);
  c->n_threads = 2;
  c->st_layers = NLAYER;
  c->st_slots = PS_SLOTS;
  c->conv_dim = (size_t)(KC - 1) * CCH;
  c->ssm_dim = (size_t)NV * DK * DV;
  c->conv = malloc(sizeof(float) * NLAYER * PS_SLOTS * c->conv_dim);
  c->ssm = malloc(sizeof(float) * NLAYER * PS_SLOTS * c->ssm_dim);
  assert_non_null(c->conv);
  assert_non_null(c->ssm);
  c->b.seq_first = c->seq_first = first;
  c->b.seq_ntok = c->seq_ntok = ntok;
  c->b.state_slot = c->state_slot = slot;
}

static void test_state_pos_slot(void **state) {
  (void)state;
  int T = 0;
  int32_t first[PS_NSEQ], ntok[PS_NSEQ], slot[PS_NSEQ], pos_slot[PS_NSEQ * BE_POS_SLOTS];
  for (int i = 0; i < PS_NSEQ * BE_POS_SLOTS; i++) pos_slot[i] = -1;
  int next = PS_NSEQ;
  for (int s = 0; s < PS_NSEQ; s++) {
    first[s] = T;
    ntok[s] = s + 1;
    slot[s] = s;
    for (int j = 0; j < s; j++) pos_slot[s * BE_POS_SLOTS + j] = next++;
    pos_slot[s * BE_POS_SLOTS + s] = 0; /* the entry of its last token: ignored */
    T += s + 1;
  }
  assert_int_equal(next, PS_SLOTS);
  /* inputs: conv x [T, CCH] -> q, k, v taken from fresh random unit rows (the ops are separate) */
  float *wt = malloc(sizeof(float) * CCH * KC), *x = malloc(sizeof(float) * T * CCH);
  float *q = malloc(sizeof(float) * T * NK * DK), *k = malloc(sizeof(float) * T * NK * DK);
  float *v = malloc(sizeof(float) * T * NV * DV), *g = malloc(sizeof(float) * T * NV), *b = malloc(sizeof(float) * T * NV);
  fill(wt, CCH * KC, -0.8f, 0.8f);
  fill(x, (size_t)T * CCH, -2, 2);
  fill(q, (size_t)T * NK * DK, -1, 1);
  fill(k, (size_t)T * NK * DK, -1, 1);
  unit_rows(q, T * NK, DK);
  unit_rows(k, T * NK, DK);
  fill(v, (size_t)T * NV * DV, -1, 1);
  fill(g, (size_t)T * NV, -0.5f, 0);
  fill(b, (size_t)T * NV, 0, 1);
  const be_weight_t w = {.type = GT_TYPE_F32, .rows = CCH, .cols = KC, .row_bytes = KC * sizeof(float), .data = wt};

  be_cpu_t A, B; /* A: the batch with position slots; B: token by token */
  int32_t fa[PS_NSEQ], na[PS_NSEQ], sa[PS_NSEQ], fb[PS_NSEQ], nb[PS_NSEQ], sb[PS_NSEQ];
  memcpy(fa, first, sizeof fa);
  memcpy(na, ntok, sizeof na);
  memcpy(sa, slot, sizeof sa);
  ps_init(&A, fa, na, sa);
  ps_init(&B, fb, nb, sb);
  fill(A.conv, (size_t)NLAYER * PS_SLOTS * A.conv_dim, -3, 3);
  fill(A.ssm, (size_t)NLAYER * PS_SLOTS * A.ssm_dim, -1, 1);
  memcpy(B.conv, A.conv, sizeof(float) * NLAYER * PS_SLOTS * A.conv_dim);
  memcpy(B.ssm, A.ssm, sizeof(float) * NLAYER * PS_SLOTS * A.ssm_dim);
  A.b.n_tok = T;
  A.b.n_seq = PS_NSEQ;
  A.b.state_pos_slot = pos_slot;
  float *ca = malloc(sizeof(float) * T * CCH), *oa = malloc(sizeof(float) * T * NV * DV);
  cpu_conv1d_silu(&A.base, LAYER, x, ca, &w, CCH, KC);
  cpu_gdn_scan(&A.base, LAYER, q, k, v, g, b, oa, NK, NV, DK, DV);
  assert_int_equal(A.base.err.code, GT_OK);

  /* B: step i feeds token i of every sequence that has one (batch rows gathered) */
  float *cb = malloc(sizeof(float) * PS_NSEQ * CCH), *ob = malloc(sizeof(float) * PS_NSEQ * NV * DV);
  float *xs = malloc(sizeof(float) * PS_NSEQ * CCH), *qs = malloc(sizeof(float) * PS_NSEQ * NK * DK);
  float *ks = malloc(sizeof(float) * PS_NSEQ * NK * DK), *vs = malloc(sizeof(float) * PS_NSEQ * NV * DV);
  float *gs = malloc(sizeof(float) * PS_NSEQ * NV), *bs = malloc(sizeof(float) * PS_NSEQ * NV);
#define ROW(dst, src, d) memcpy((dst) + (size_t)n * (d), (src) + (size_t)t * (d), sizeof(float) * (d))
  for (int i = 0; i < PS_NSEQ; i++) {
    int n = 0, who[PS_NSEQ];
    for (int s = 0; s < PS_NSEQ; s++) {
      if (i >= ntok[s]) continue;
      const int t = first[s] + i;
      ROW(xs, x, CCH);
      ROW(qs, q, NK * DK);
      ROW(ks, k, NK * DK);
      ROW(vs, v, NV * DV);
      ROW(gs, g, NV);
      ROW(bs, b, NV);
      fb[n] = n;
      nb[n] = 1;
      sb[n] = slot[s];
      who[n++] = s;
    }
    B.b.n_tok = B.b.n_seq = n;
    cpu_conv1d_silu(&B.base, LAYER, xs, cb, &w, CCH, KC);
    cpu_gdn_scan(&B.base, LAYER, qs, ks, vs, gs, bs, ob, NK, NV, DK, DV);
    assert_int_equal(B.base.err.code, GT_OK);
    for (int r = 0; r < n; r++) {
      const int s = who[r], t = first[s] + i;
      assert_memory_equal(ca + (size_t)t * CCH, cb + (size_t)r * CCH, sizeof(float) * CCH);
      assert_memory_equal(oa + (size_t)t * NV * DV, ob + (size_t)r * NV * DV, sizeof(float) * NV * DV);
      const int ps = i + 1 < ntok[s] ? pos_slot[s * BE_POS_SLOTS + i] : slot[s];
      assert_memory_equal(cpu_conv_state(&A, LAYER, ps), cpu_conv_state(&B, LAYER, slot[s]), sizeof(float) * A.conv_dim);
      assert_memory_equal(cpu_ssm_state(&A, LAYER, ps), cpu_ssm_state(&B, LAYER, slot[s]), sizeof(float) * A.ssm_dim);
    }
  }
#undef ROW
  /* the other layer's states are untouched */
  assert_memory_equal(cpu_conv_state(&A, 0, 0), cpu_conv_state(&B, 0, 0), sizeof(float) * PS_SLOTS * A.conv_dim);
  assert_memory_equal(cpu_ssm_state(&A, 0, 0), cpu_ssm_state(&B, 0, 0), sizeof(float) * PS_SLOTS * A.ssm_dim);
  free(A.conv), free(A.ssm), free(B.conv), free(B.ssm);
  free(wt), free(x), free(q), free(k), free(v), free(g), free(b), free(ca), free(oa), free(cb), free(ob);
  free(xs), free(qs), free(ks), free(vs), free(gs), free(bs);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_conv1d_silu),
      cmocka_unit_test(test_gdn_scan),
      cmocka_unit_test(test_chunked_vs_sequential),
      cmocka_unit_test(test_l2norm_gates_rmsnorm_gated),
      cmocka_unit_test(test_errors),
      cmocka_unit_test(test_state_pos_slot),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
