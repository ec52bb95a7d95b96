/* tools/bench/bench_attn.cu — microbenchmark of the attention kernels (no pass/fail).
 *
 *   bench_attn [--reps N] [--decode]
 *
 * Decode (one token per sequence at the end of its context, paged pools of 16-token blocks in
 * shuffled order, block table of ceil(ctx / 16) columns as a captured graph sees it): the two
 * pass-1 kernels of kc_attn_decode (1: 128-thread blocks, K/V rows in registers; 2: a warp per
 * range, K/V tiles through shared memory by cp.async) on bf16 pools, per head shape x batch x
 * context, with the normalized difference of their outputs. Prints
 *   shape | batch | ctx | splits (k1/k2) | k1 us | GB/s | % | k2 us | GB/s | % | k1/k2 | err
 * with bytes = the K and V rows read (batch x ctx x kv_dim x 2 x 2 bytes), % = of the copy
 * bandwidth (2 x bytes / time of a 1 GiB cudaMemcpy D2D). Prefill (skipped with --decode; one
 * sequence, a chunk of T queries at offset P, causal): the flash kernel (kernels/attn_flash.cu)
 * against the fp32 kernel, in TFLOP/s of 4 x n_head x head_dim x (attended pairs). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "kernels/attention.cuh"
#include "kernels/attn_decode.cuh"
#include "kernels/attn_flash.cuh"

#define BA_CHECK(expr)                                                                            \
  do {                                                                                            \
    cudaError_t e_ = (cudaError_t)(expr);                                                         \
    if (e_ != cudaSuccess) {                                                                      \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr, cudaGetErrorString(e_));      \
      exit(2);                                                                                    \
    }                                                                                             \
  } while (0)

#define BT 16

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static uint32_t ba_next(void) {
  g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
  return (uint32_t)(g_rng >> 32);
}

__global__ void ba_fill(uint32_t *p, size_t n, uint32_t seed, int f32) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    uint32_t x = (uint32_t)i * 2654435761u ^ seed;
    x ^= x >> 15, x *= 2246822519u, x ^= x >> 13;
    const float a = (float)(x & 0xffff) / 32768.0f - 1.0f, b = (float)(x >> 16) / 32768.0f - 1.0f;
    if (f32) p[i] = __float_as_uint(a);
    else p[i] = (__float_as_uint(a) >> 16) | (__float_as_uint(b) & 0xffff0000u);
  }
}

typedef struct {
  int n_head, n_kv, hd;
  const char *name;
} shape_t;

/* device batch of n_seq sequences with ntok[s] tokens from position start[s], blocks shuffled */
typedef struct {
  kc_batch_t b;
  int32_t *d;
  int n_blocks;
} dbatch_t;

static dbatch_t mk_batch(int n_seq, const int *start, const int *ntok, int max_blocks) {
  int n_tok = 0;
  for (int s = 0; s < n_seq; s++) n_tok += ntok[s];
  const int nb = n_seq * max_blocks;
  const size_t n = 3 * (size_t)n_tok + 3 * (size_t)n_seq + nb + 1;
  int32_t *h = (int32_t *)calloc(n, sizeof(int32_t));
  int32_t *pos = h + n_tok, *sot = pos + n_tok, *sf = sot + n_tok, *sn = sf + n_seq, *bt = sn + 2 * n_seq;
  for (int s = 0, t = 0; s < n_seq; s++) {
    sf[s] = t;
    sn[s] = ntok[s];
    for (int i = 0; i < ntok[s]; i++, t++) pos[t] = start[s] + i, sot[t] = s;
  }
  for (int i = 0; i < nb; i++) bt[i] = i;
  for (int i = nb - 1; i > 0; i--) {
    const int j = (int)(ba_next() % (uint32_t)(i + 1)), x = bt[i];
    bt[i] = bt[j], bt[j] = x;
  }
  dbatch_t r;
  BA_CHECK(cudaMalloc(&r.d, n * sizeof(int32_t)));
  BA_CHECK(cudaMemcpy(r.d, h, n * sizeof(int32_t), cudaMemcpyHostToDevice));
  free(h);
  int *eflag;
  BA_CHECK(cudaMalloc(&eflag, sizeof(int)));
  BA_CHECK(cudaMemset(eflag, 0, sizeof(int)));
  const int32_t *d = r.d;
  r.b = (kc_batch_t){.n_tok = n_tok, .n_seq = n_seq, .n_out = 0, .max_blocks = max_blocks, .tok = d, .pos = d + n_tok,
                     .seq_of_tok = d + 2 * n_tok, .seq_first = d + 3 * n_tok, .seq_ntok = d + 3 * n_tok + n_seq,
                     .state_slot = d + 3 * n_tok + 2 * n_seq, .block_table = d + 3 * n_tok + 3 * n_seq,
                     .out_tok = NULL, .eflag = eflag};
  r.n_blocks = nb;
  return r;
}

static float time_us(cudaEvent_t e0, cudaEvent_t e1, int reps) {
  float ms;
  BA_CHECK(cudaEventSynchronize(e1));
  BA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
  return ms * 1000.0f / reps;
}

int main(int argc, char **argv) {
  int reps = 20, decode_only = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--decode")) decode_only = 1;
    else {
      fprintf(stderr, "usage: bench_attn [--reps N] [--decode]\n");
      return 2;
    }
  }
  if (reps < 1) reps = 1;
  cudaEvent_t e0, e1;
  BA_CHECK(cudaEventCreate(&e0));
  BA_CHECK(cudaEventCreate(&e1));
  /* copy bandwidth */
  double copy_bw;
  {
    const size_t n = (size_t)1 << 30;
    void *a, *b;
    BA_CHECK(cudaMalloc(&a, n));
    BA_CHECK(cudaMalloc(&b, n));
    BA_CHECK(cudaMemcpy(b, a, n, cudaMemcpyDeviceToDevice));
    BA_CHECK(cudaEventRecord(e0));
    for (int r = 0; r < 5; r++) BA_CHECK(cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice));
    BA_CHECK(cudaEventRecord(e1));
    copy_bw = 2.0 * n / (time_us(e0, e1, 5) * 1e-6);
    cudaFree(a), cudaFree(b);
    printf("copy bandwidth %.0f GB/s (1 GiB cudaMemcpy D2D, read + write)\n\n", copy_bw / 1e9);
  }
  const shape_t shapes[] = {{32, 8, 128, "qwen3-8b 32/8x128"}, {16, 4, 256, "qwen35-9b 16/4x256"}};
  const int batches[] = {1, 8, 32}, ctxs[] = {512, 2048, 8192, 28672, 32768, 65536};
  printf("decode attention, one layer: kernel 1 (old, 128-thread blocks) vs kernel 2 (new, a warp per range;\n"
         "head_dim 64 / 128 / 256), GB/s of K and V bytes read, %% of copy BW; err = ||k2 - k1|| / ||k1||\n"
         "%-20s | %5s | %6s | %7s | %8s | %6s | %5s | %8s | %6s | %5s | %7s | %s\n",
         "shape", "batch", "ctx", "splits", "k1 us", "GB/s", "%", "k2 us", "GB/s", "%", "k1/k2", "err");
  for (int si = 0; si < 2; si++) {
    const shape_t sh = shapes[si];
    const int kvd = sh.n_kv * sh.hd;
    for (int bi = 0; bi < 3; bi++)
      for (int ci = 0; ci < 6; ci++) {
        const int B = batches[bi], ctx = ctxs[ci];
        if ((double)B * ctx > 32.0 * 8192 + 1) continue; /* batch 32 to 8K, batch 8 to 32K, batch 1 to 64K */
        const int mb = (ctx + BT - 1) / BT;
        int start[32], ntok[32];
        for (int s = 0; s < B; s++) start[s] = ctx - 1, ntok[s] = 1;
        dbatch_t db = mk_batch(B, start, ntok, mb);
        const size_t elems = (size_t)db.n_blocks * BT * kvd, no = (size_t)B * sh.n_head * sh.hd;
        float *q, *out[2], *part;
        void *k, *v;
        BA_CHECK(cudaMalloc(&q, sizeof(float) * no));
        BA_CHECK(cudaMalloc(&out[0], sizeof(float) * no));
        BA_CHECK(cudaMalloc(&out[1], sizeof(float) * no));
        BA_CHECK(cudaMalloc(&k, elems * 2));
        BA_CHECK(cudaMalloc(&v, elems * 2));
        ba_fill<<<1024, 256>>>((uint32_t *)q, no, 7, 1);
        ba_fill<<<4096, 256>>>((uint32_t *)k, elems / 2, 1, 0);
        ba_fill<<<4096, 256>>>((uint32_t *)v, elems / 2, 2, 0);
        kc_kv_t kv = {k, v, db.n_blocks, BT, kvd, 1};
        BA_CHECK(cudaMalloc(&part, kc_attn_decode_part_floats(B, sh.n_head, sh.hd, KC_AD_MAX_SPLIT) * sizeof(float)));
        int ns[2] = {0, 0}; /* each kernel's range count, as the engine asks for it */
        const float scale = 1.0f / sqrtf((float)sh.hd);
        const int has2 = kc_ad_warp_shape(sh.hd, sh.n_head / sh.n_kv);
        double us[2] = {0, 0};
        const double bytes = (double)B * ctx * kvd * 2 * 2;
        for (int ki = 0; ki < 1 + has2; ki++) {
          kc_attn_decode_set_kernel(ki + 1);
          ns[ki] = kc_attn_decode_splits(B, sh.n_head, sh.n_kv, sh.hd, mb * BT);
#define BA_RUN() kc_attn_decode(0, db.b, kv, q, out[ki], sh.n_head, sh.n_kv, sh.hd, scale, ns[ki], 1 << 30, part)
          BA_CHECK(BA_RUN());
          BA_CHECK(cudaDeviceSynchronize());
          BA_CHECK(cudaEventRecord(e0));
          for (int r = 0; r < reps; r++) BA_RUN();
          BA_CHECK(cudaEventRecord(e1));
          us[ki] = time_us(e0, e1, reps);
#undef BA_RUN
        }
        kc_attn_decode_set_kernel(0);
        int eflag = 0;
        BA_CHECK(cudaMemcpy(&eflag, db.b.eflag, sizeof eflag, cudaMemcpyDeviceToHost));
        char nss[16];
        snprintf(nss, sizeof nss, has2 ? "%d/%d" : "%d", ns[0], ns[1]);
        printf("%-20s | %5d | %6d | %7s | %8.1f | %6.0f | %5.1f", sh.name, B, ctx, nss, us[0], bytes / (us[0] * 1e-6) / 1e9,
               100.0 * bytes / (us[0] * 1e-6) / copy_bw);
        if (has2) {
          float *h[2];
          double num = 0, den = 0;
          for (int i = 0; i < 2; i++) {
            h[i] = (float *)malloc(sizeof(float) * no);
            BA_CHECK(cudaMemcpy(h[i], out[i], sizeof(float) * no, cudaMemcpyDeviceToHost));
          }
          for (size_t i = 0; i < no; i++) num += ((double)h[1][i] - h[0][i]) * ((double)h[1][i] - h[0][i]), den += (double)h[0][i] * h[0][i];
          printf(" | %8.1f | %6.0f | %5.1f | %7.2f | %.1e%s\n", us[1], bytes / (us[1] * 1e-6) / 1e9,
                 100.0 * bytes / (us[1] * 1e-6) / copy_bw, us[0] / us[1], sqrt(num / (den > 0 ? den : 1)),
                 eflag ? " eflag!" : "");
          free(h[0]), free(h[1]);
        } else {
          printf(" | %8s | %6s | %5s | %7s | -%s\n", "-", "-", "-", "-", eflag ? " eflag!" : "");
        }
        cudaFree(k), cudaFree(v), cudaFree(part), cudaFree(q), cudaFree(out[0]), cudaFree(out[1]);
        cudaFree(db.d), cudaFree((void *)db.b.eflag);
        fflush(stdout);
      }
  }
  if (decode_only) return 0;

  /* prefill: one sequence, a chunk of T queries at offset P */
  const int chunks[][2] = {{512, 0}, {512, 27648}, {2048, 0}, {2048, 6144}, {8192, 0}};
  printf("\nprefill attention, one layer (mt: 16-row m-tiles per warp of the flash kernel)\n%-20s | %-9s | %6s | %6s | %9s | %s\n",
         "shape", "kernel", "T", "offset", "us", "TFLOP/s");
  for (int si = 0; si < 2; si++) {
    const shape_t sh = shapes[si];
    const int kvd = sh.n_kv * sh.hd;
    for (int ci = 0; ci < 5; ci++) {
      const int T = chunks[ci][0], P = chunks[ci][1], ctx = P + T, mb = (ctx + BT - 1) / BT;
      int start[1] = {P}, ntok[1] = {T};
      dbatch_t db = mk_batch(1, start, ntok, mb);
      const size_t elems = (size_t)db.n_blocks * BT * kvd;
      float *q, *out, *part = NULL;
      BA_CHECK(cudaMalloc(&q, sizeof(float) * T * sh.n_head * sh.hd));
      BA_CHECK(cudaMalloc(&out, sizeof(float) * T * sh.n_head * sh.hd));
      ba_fill<<<1024, 256>>>((uint32_t *)q, (size_t)T * sh.n_head * sh.hd, 7, 1);
      const double pairs = (double)T * P + (double)T * (T + 1) / 2, flops = 4.0 * sh.n_head * sh.hd * pairs;
      for (int var = 0; var < 3; var++) { /* flash with 1 / 2 m-tiles per warp (2: head_dim <= 128), fp32 */
        const int f32 = var == 2, mt = var + 1;
        if (!f32 && mt == 2 && sh.hd > 128) continue;
        void *k, *v;
        const size_t eb = f32 ? 4 : 2;
        BA_CHECK(cudaMalloc(&k, elems * eb));
        BA_CHECK(cudaMalloc(&v, elems * eb));
        ba_fill<<<4096, 256>>>((uint32_t *)k, elems * eb / 4, 1, f32);
        ba_fill<<<4096, 256>>>((uint32_t *)v, elems * eb / 4, 2, f32);
        kc_kv_t kv = {k, v, db.n_blocks, BT, kvd, !f32};
        const float scale = 1.0f / sqrtf((float)sh.hd);
        const int ns = kc_attention_splits(T, sh.n_head, ctx);
        if (f32) BA_CHECK(cudaMalloc(&part, kc_attention_part_floats(T, sh.n_head, sh.hd, ns) * sizeof(float)));
        const int r_n = f32 ? 2 : reps;
#define BA_RUN()                                                                                                   \
  (f32 ? kc_attention(0, db.b, kv, q, out, sh.n_head, sh.n_kv, sh.hd, scale, ns, part)                             \
       : kc_attn_flash(0, db.b, kv, q, out, sh.n_head, sh.n_kv, sh.hd, scale, 16, n_tiles, mt))
        int dummy, n_tiles = 0;
        if (!f32) {
          kc_attn_flash_set_mt(mt);
          n_tiles = kc_attn_flash_plan(ntok, 1, 16, sh.hd, sh.n_head, &dummy);
        }
        BA_CHECK(BA_RUN());
        BA_CHECK(cudaDeviceSynchronize());
        BA_CHECK(cudaEventRecord(e0));
        for (int r = 0; r < r_n; r++) BA_RUN();
        BA_CHECK(cudaEventRecord(e1));
        const double us = time_us(e0, e1, r_n);
        printf("%-20s | %-9s | %6d | %6d | %9.1f | %7.1f\n", sh.name, f32 ? "fp32" : mt == 1 ? "bf16 mt1" : "bf16 mt2", T,
               P, us, flops / (us * 1e-6) / 1e12);
#undef BA_RUN
        cudaFree(k), cudaFree(v);
        if (part) cudaFree(part), part = NULL;
      }
      cudaFree(q), cudaFree(out), cudaFree(db.d), cudaFree((void *)db.b.eflag);
      fflush(stdout);
    }
  }
  BA_CHECK(cudaDeviceSynchronize());
  return 0;
}
