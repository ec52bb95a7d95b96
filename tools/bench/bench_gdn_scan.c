/* tools/bench/bench_gdn_scan.c — the Gated DeltaNet scan kernels at qwen35-9b head sizes
 * (n_k 16, n_v 32, d_k = d_v = 128; 24 GDN layers): decode (one token per sequence, batch 1, 8,
 * 32: kc_gdn_scan) and a 512-token prefill of one sequence (kc_gdn_chunked vs the sequential
 * kc_gdn_scan). Validation before timing: the prefill outputs and final states of both kernels
 * against engine/backend/gdn_chunked.c on the CPU (normalized error). Prints us per layer and, for
 * decode, the state bytes moved (read + write) in GB/s.
 *   bench_gdn_scan [--prompt 512] [--reps 20] */
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

typedef int (*scan_fn)(cudaStream_t, kc_batch_t, float *, int, const float *, const float *, const float *,
                       const float *, const float *, float *, int, int, int, int, int);

static float time_us(scan_fn f, kc_batch_t b, float *ssm, float **in, float *out, int arg, int reps) {
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  f(0, b, ssm, SLOTS, in[0], in[1], in[2], in[3], in[4], out, NK, NV, DK, DV, arg); /* warm-up */
  cudaEventRecord(e0, 0);
  for (int i = 0; i < reps; i++) f(0, b, ssm, SLOTS, in[0], in[1], in[2], in[3], in[4], out, NK, NV, DK, DV, arg);
  cudaEventRecord(e1, 0);
  cudaEventSynchronize(e1);
  float ms = 0;
  cudaEventElapsedTime(&ms, e0, e1);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return ms * 1000.0f / (float)reps;
}

int main(int argc, char **argv) {
  int prompt = 512, reps = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--prompt")) prompt = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--reps")) reps = atoi(argv[i + 1]);
  }
  if (prompt < 1 || reps < 1) {
    fprintf(stderr, "usage: bench_gdn_scan [--prompt 512] [--reps 20]\n");
    return 2;
  }
  if (!kc_gdn_chunked_ok(DK, DV)) {
    fprintf(stderr, "bench_gdn_scan: no device, or the chunked kernel does not fit (%zu bytes of shared memory)\n",
            kc_gdn_chunked_smem(DK));
    return 1;
  }
  const int nt = prompt > SLOTS ? prompt : SLOTS;
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

  /* validation: one prefill sequence in slot 0, both kernels against the CPU chunked form */
  float *ref = malloc(nvv * 4), *got = malloc(nvv * 4), *S = malloc(sdim * 4), *Sg = malloc(sdim * 4);
  float *ws = malloc(gdn_chunked_ws_floats(64, DK, DV) * 4);
  memcpy(S, hs, sdim * 4);
  gdn_chunked_seq(hq, hk, hv, hg, hb, ref, S, prompt, NK, NV, DK, DV, 64, ws);
  int32_t *dm = NULL;
  kc_batch_t bp = mk_batch(1, prompt, &dm);
  const char *names[2] = {"chunked", "sequential"};
  for (int m = 0; m < 2; m++) {
    cudaMemcpy(ssm, hs, sdim * 4, cudaMemcpyHostToDevice);
    int rc = m == 0 ? kc_gdn_chunked(0, bp, ssm, SLOTS, in[0], in[1], in[2], in[3], in[4], out, NK, NV, DK, DV, 1)
                    : kc_gdn_scan(0, bp, ssm, SLOTS, in[0], in[1], in[2], in[3], in[4], out, NK, NV, DK, DV, 1 << 30);
    if (rc || cudaDeviceSynchronize() != cudaSuccess) {
      fprintf(stderr, "%s: launch failed (%d)\n", names[m], rc);
      return 1;
    }
    cudaMemcpy(got, out, (size_t)prompt * NV * DV * 4, cudaMemcpyDeviceToHost);
    cudaMemcpy(Sg, ssm, sdim * 4, cudaMemcpyDeviceToHost);
    printf("check %-10s prefill %d: out err %.3e, state err %.3e (vs CPU chunked)\n", names[m], prompt,
           nerr(got, ref, (size_t)prompt * NV * DV), nerr(Sg, S, sdim));
  }
  printf("| case | kernel | us / layer | x 24 layers (ms) | state GB/s |\n|---|---|---|---|---|\n");
  for (int m = 0; m < 2; m++) {
    const float us = m == 0 ? time_us(kc_gdn_chunked, bp, ssm, in, out, 1, reps)
                            : time_us(kc_gdn_scan, bp, ssm, in, out, 1 << 30, reps);
    printf("| prefill %d | %s | %.1f | %.2f | - |\n", prompt, names[m], us, us * 24e-3);
  }
  cudaFree(dm);
  const int batches[3] = {1, 8, 32};
  for (int i = 0; i < 3; i++) {
    kc_batch_t bd = mk_batch(batches[i], 1, &dm);
    const float us = time_us(kc_gdn_scan, bd, ssm, in, out, 1 << 30, reps);
    const double bytes = 2.0 * batches[i] * sdim * 4;
    printf("| decode batch %d | sequential | %.1f | %.2f | %.0f |\n", batches[i], us, us * 24e-3, bytes / (us * 1e3));
    cudaFree(dm);
  }
  cudaError_t e = cudaDeviceSynchronize();
  if (e != cudaSuccess) fprintf(stderr, "cuda: %s\n", cudaGetErrorString(e));
  return e != cudaSuccess;
}
