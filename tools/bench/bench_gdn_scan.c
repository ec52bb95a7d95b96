/* tools/bench/bench_gdn_scan.c — the Gated DeltaNet scan kernels at qwen35-9b head sizes
 * (n_k 16, n_v 32, d_k = d_v = 128; 24 GDN layers): the per-token kernel (kc_gdn_scan_sel with
 * long_from INT_MAX), the long-sequence kernel with 4 and 8 lanes per column (long_from 1), the
 * default dispatch (kc_gdn_scan) and, at --prompt, kc_gdn_chunked; one sequence of 1 .. 8192
 * tokens, 8 sequences of 1024 and decode batches of 8 and 32. Validation before timing: the
 * outputs and final states of a --prompt-token prefill against engine/backend/gdn_chunked.c on
 * the CPU (normalized error). Prints us per layer, ns per token and the speed-up over the
 * per-token kernel.
 *   bench_gdn_scan [--prompt 512] [--reps 20] [--max 8192] [--check 1 (validation only: sanitizers)] */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend/gdn_chunked.h"
#include "kernels/gdn_chunked.cuh"
#include "kernels/gdn_scan.cuh"

#define NK 16
#define NV 32
#define DK 128
#define DV 128
#define SLOTS 32

static unsigned seed = 1;
static float frand(void) {
  seed = seed * 1664525u + 1013904223u;
  return (float)((seed >> 8) & 0xffffff) / (float)(1 << 23) - 1.0f;
}
static void *dput(const void *h, size_t bytes) {
  void *d = NULL;
  if (cudaMalloc(&d, bytes) != cudaSuccess) {
    fprintf(stderr, "cudaMalloc %zu failed\n", bytes);
    exit(1);
  }
  if (h) cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice);
  else cudaMemset(d, 0, bytes);
  return d;
}
static double nerr(const float *a, const float *ref, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; i++) {
    const double d = (double)a[i] - ref[i];
    num += isfinite(a[i]) ? d * d : INFINITY;
    den += (double)ref[i] * ref[i];
  }
  return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* a batch of n_seq sequences of ntok tokens each, slot s, in device memory */
static kc_batch_t mk_batch(int n_seq, int ntok, int32_t **dmem) {
  int32_t h[3 * SLOTS + 1];
  for (int s = 0; s < n_seq; s++) {
    h[s] = s * ntok;
    h[SLOTS + s] = ntok;
    h[2 * SLOTS + s] = s;
  }
  h[3 * SLOTS] = 0;
  int32_t *d = dput(h, sizeof h);
  *dmem = d;
  kc_batch_t b = {.n_tok = n_seq * ntok, .n_seq = n_seq, .seq_first = d, .seq_ntok = d + SLOTS,
                  .state_slot = d + 2 * SLOTS, .eflag = (int *)(d + 3 * SLOTS)};
  return b;
}

/* the kernels compared: chunked, per-token, long (4 / 8 lanes per column), default dispatch */
enum { K_CHUNKED, K_TOKEN, K_LONG4, K_LONG8, K_DEFAULT, K_N };
static const char *const knames[K_N] = {"chunked", "per-token", "long lpc4", "long lpc8", "default"};

static int run_kernel(int kind, kc_batch_t b, float *ssm, float **in, float *out) {
  switch (kind) {
  case K_CHUNKED: return kc_gdn_chunked(0, b, ssm, SLOTS, in[0], in[1], in[2], in[3], in[4], out, NK, NV, DK, DV, 1);
  case K_TOKEN:
    return kc_gdn_scan_sel(0, b, ssm, SLOTS, in[0], in[1], in[2], in[3], in[4], out, NK, NV, DK, DV, INT_MAX, INT_MAX, 4);
  case K_LONG4:
  case K_LONG8:
    return kc_gdn_scan_sel(0, b, ssm, SLOTS, in[0], in[1], in[2], in[3], in[4], out, NK, NV, DK, DV, INT_MAX, 1,
                           kind == K_LONG4 ? 4 : 8);
  default: return kc_gdn_scan(0, b, ssm, SLOTS, in[0], in[1], in[2], in[3], in[4], out, NK, NV, DK, DV, INT_MAX);
  }
}

static float time_us(int kind, kc_batch_t b, float *ssm, float **in, float *out, int reps) {
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  run_kernel(kind, b, ssm, in, out); /* warm-up */
  cudaEventRecord(e0, 0);
  for (int i = 0; i < reps; i++) run_kernel(kind, b, ssm, in, out);
  cudaEventRecord(e1, 0);
  cudaEventSynchronize(e1);
  float ms = 0;
  cudaEventElapsedTime(&ms, e0, e1);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return ms * 1000.0f / (float)reps;
}

/* one table row: every kernel of kinds[] on n_seq sequences of ntok tokens */
static void bench_row(const char *what, int n_seq, int ntok, const int *kinds, int nk, float *ssm, float **in,
                      float *out, int reps) {
  int32_t *dm = NULL;
  kc_batch_t b = mk_batch(n_seq, ntok, &dm);
  float base = 0;
  for (int m = 0; m < nk; m++) {
    const float us = time_us(kinds[m], b, ssm, in, out, reps);
    if (kinds[m] == K_TOKEN) base = us;
    printf("| %s | %d x %d | %s | %.1f | %.1f | %.2f | %s%.2f |\n", what, n_seq, ntok, knames[kinds[m]], us,
           us * 1e3 / ntok, us * 24e-3, base > 0 ? "x" : "-", base > 0 ? base / us : 0.0);
  }
  cudaFree(dm);
}

int main(int argc, char **argv) {
  int prompt = 512, reps = 20, maxtok = 8192, check_only = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--prompt")) prompt = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--reps")) reps = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--max")) maxtok = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--check")) check_only = atoi(argv[i + 1]);
  }
  if (prompt < 1 || reps < 1 || maxtok < 1) {
    fprintf(stderr, "usage: bench_gdn_scan [--prompt 512] [--reps 20] [--max 8192] [--check 1]\n");
    return 2;
  }
  if (!kc_gdn_chunked_ok(DK, DV)) {
    fprintf(stderr, "bench_gdn_scan: no device, or the chunked kernel does not fit (%zu bytes of shared memory)\n",
            kc_gdn_chunked_smem(DK));
    return 1;
  }
  int nt = prompt > SLOTS ? prompt : SLOTS;
  if (nt < maxtok) nt = maxtok;
  if (maxtok >= 1024 && nt < 8 * 1024) nt = 8 * 1024;
  const size_t nqk = (size_t)nt * NK * DK, nvv = (size_t)nt * NV * DV, ng = (size_t)nt * NV;
  const size_t sdim = (size_t)NV * DK * DV;
  float *hq = malloc(nqk * 4), *hk = malloc(nqk * 4), *hv = malloc(nvv * 4), *hg = malloc(ng * 4), *hb = malloc(ng * 4);
  float *hs = malloc(sdim * SLOTS * 4);
  for (size_t i = 0; i < nqk; i++) hq[i] = frand(), hk[i] = frand();
  for (size_t r = 0; r < (size_t)nt * NK; r++) { /* unit keys, queries scaled 1/sqrt(d_k) as the model */
    double sq = 0, sk = 0;
    for (int i = 0; i < DK; i++) sq += hq[r * DK + i] * hq[r * DK + i], sk += hk[r * DK + i] * hk[r * DK + i];
    for (int i = 0; i < DK; i++) hq[r * DK + i] /= (float)(sqrt(sq) * sqrt((double)DK)), hk[r * DK + i] /= (float)sqrt(sk);
  }
  for (size_t i = 0; i < nvv; i++) hv[i] = frand();
  for (size_t i = 0; i < ng; i++) hg[i] = -1.5f * fabsf(frand()), hb[i] = 0.5f + 0.45f * frand();
  for (size_t i = 0; i < sdim * SLOTS; i++) hs[i] = 0.1f * frand();
  float *in[5] = {dput(hq, nqk * 4), dput(hk, nqk * 4), dput(hv, nvv * 4), dput(hg, ng * 4), dput(hb, ng * 4)};
  float *ssm = dput(hs, sdim * SLOTS * 4), *out = dput(NULL, nvv * 4);

  /* validation: one prefill sequence in slot 0, every kernel against the CPU chunked form */
  float *ref = malloc(nvv * 4), *got = malloc(nvv * 4), *S = malloc(sdim * 4), *Sg = malloc(sdim * 4);
  float *ws = malloc(gdn_chunked_ws_floats(64, DK, DV) * 4);
  memcpy(S, hs, sdim * 4);
  gdn_chunked_seq(hq, hk, hv, hg, hb, ref, S, prompt, NK, NV, DK, DV, 64, ws);
  int32_t *dm = NULL;
  kc_batch_t bp = mk_batch(1, prompt, &dm);
  int bad = 0;
  for (int m = 0; m < K_N; m++) {
    cudaMemcpy(ssm, hs, sdim * 4, cudaMemcpyHostToDevice);
    const int rc = run_kernel(m, bp, ssm, in, out);
    if (rc || cudaDeviceSynchronize() != cudaSuccess) {
      fprintf(stderr, "%s: launch failed (%d)\n", knames[m], rc);
      return 1;
    }
    cudaMemcpy(got, out, (size_t)prompt * NV * DV * 4, cudaMemcpyDeviceToHost);
    cudaMemcpy(Sg, ssm, sdim * 4, cudaMemcpyDeviceToHost);
    const double eo = nerr(got, ref, (size_t)prompt * NV * DV), es = nerr(Sg, S, sdim);
    printf("check %-10s prefill %d: out err %.3e, state err %.3e (vs CPU chunked)\n", knames[m], prompt, eo, es);
    bad |= !(eo < 1e-4 && es < 1e-4);
  }
  cudaFree(dm);
  if (bad) printf("MISMATCH: a kernel's error is above 1e-4 (timings follow all the same)\n");
  if (check_only) maxtok = 0, reps = 0;
  printf("\nper layer (qwen35-9b GDN heads); x24: the 24 GDN layers; speed-up over the per-token kernel\n");
  printf("| case | seqs x tokens | kernel | us / layer | ns / token | x 24 layers (ms) | speed-up |\n"
         "|---|---|---|---|---|---|---|\n");
  const int scan_k[4] = {K_TOKEN, K_LONG4, K_LONG8, K_DEFAULT}, chunk_k[2] = {K_TOKEN, K_CHUNKED};
  if (reps > 0) bench_row("prefill", 1, prompt, chunk_k, 2, ssm, in, out, reps);
  const int lens[] = {1, 2, 4, 8, 16, 32, 64, 128, 1024, 8192};
  for (size_t i = 0; i < sizeof lens / sizeof *lens; i++)
    if (lens[i] <= maxtok) bench_row("one sequence", 1, lens[i], scan_k, 4, ssm, in, out, lens[i] >= 1024 ? 5 : reps);
  if (maxtok >= 1024) bench_row("8 sequences", 8, 1024, scan_k, 4, ssm, in, out, 5);
  if (reps > 0) {
    bench_row("decode", 8, 1, scan_k, 4, ssm, in, out, reps);
    bench_row("decode", 32, 1, scan_k, 4, ssm, in, out, reps);
  }
  cudaError_t e = cudaDeviceSynchronize();
  if (e != cudaSuccess) fprintf(stderr, "cuda: %s\n", cudaGetErrorString(e));
  free(hq), free(hk), free(hv), free(hg), free(hb), free(hs), free(ref), free(got), free(S), free(Sg), free(ws);
  for (int i = 0; i < 5; i++) cudaFree(in[i]);
  cudaFree(ssm), cudaFree(out);
  return e != cudaSuccess || bad;
}
