/* kernels/bench/bench_decode.cu — end-to-end decode benchmark of the CUDA backend on a GGUF
 * model (the numbers `gantry-engine bench --device cuda` is meant to print):
 *   bench_decode --model M.gguf [--batch 1,8,32] [--prompt 512] [--gen 256]
 * Per batch size: prefill tok/s (each sequence's prompt in one step), decode ms per step,
 * tok/s per sequence and in total (median step), bytes streamed per step (weights read by the
 * step + the KV read by attention), the measured device copy bandwidth (read + write of a
 * 2 GiB copy) and the fraction of that roofline. Logits of every decode token are downloaded
 * (as the engine does today). GANTRY_CUDA_GRAPHS=0 runs decode without graphs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

extern "C" {
#include "engine/backend_cuda.h"
#include "engine/gguf.h"
#include "engine/model.h"
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}
static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* device copy bandwidth through the backend (bytes read + written per second) */
static double copy_bw(be_t *be) {
  const int rows = 16384, cols = 32768; /* 2 GiB */
  float *a = (float *)be->ops->alloc(be, (size_t)rows * cols * 4), *b = (float *)be->ops->alloc(be, (size_t)rows * cols * 4);
  if (!a || !b) return 0;
  for (int i = 0; i < 3; i++) be->ops->copy2d(be, b, cols, a, cols, rows, cols);
  be->ops->sync(be);
  double best = 1e9;
  for (int r = 0; r < 10; r++) {
    double t0 = now_s();
    be->ops->copy2d(be, b, cols, a, cols, rows, cols);
    be->ops->sync(be);
    double t = now_s() - t0;
    if (t < best) best = t;
  }
  be->ops->free(be, a);
  be->ops->free(be, b);
  return 2.0 * rows * (double)cols * 4 / best;
}

int main(int argc, char **argv) {
  const char *path = NULL, *batches = "1,8,32";
  int prompt = 512, gen = 256;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--model")) path = argv[i + 1];
    else if (!strcmp(argv[i], "--batch")) batches = argv[i + 1];
    else if (!strcmp(argv[i], "--prompt")) prompt = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--gen")) gen = atoi(argv[i + 1]);
  }
  if (!path || prompt < 1 || gen < 2) {
    fprintf(stderr, "usage: bench_decode --model M.gguf [--batch 1,8,32] [--prompt 512] [--gen 256]\n");
    return 2;
  }
  int bs[16], nb = 0, maxb = 1;
  for (const char *p = batches; *p && nb < 16;) {
    bs[nb] = atoi(p);
    if (bs[nb] < 1 || bs[nb] > 32) {
      fprintf(stderr, "batch sizes must be 1..32\n");
      return 2;
    }
    if (bs[nb] > maxb) maxb = bs[nb];
    nb++;
    p = strchr(p, ',');
    if (!p) break;
    p++;
  }
  gt_err_t err = {0};
  gguf_t *g = NULL;
  be_t *be = NULL;
  model_t *m = NULL;
  double t0 = now_s();
  if (gguf_open(path, &g, &err) || be_cuda_create(0, &be, &err) || model_load(g, be, prompt, &m, &err)) {
    fprintf(stderr, "bench_decode: %s\n", err.msg);
    return 1;
  }
  const int bt = 16, mb = (prompt + gen + bt - 1) / bt + 1;
  if (model_cache_init(m, maxb * mb, bt, maxb, &err)) {
    fprintf(stderr, "bench_decode: %s\n", err.msg);
    return 1;
  }
  const int V = m->hp.n_vocab;
  const gguf_tensor_t *emb = gguf_find_tensor(g, "token_embd.weight");
  /* weights a decode step streams: everything but the embedding rows it does not gather
   * (the embedding is read in full only when it is also the output head) */
  double w_bytes = (double)m->weight_bytes - (emb && !m->hp.tied_output ? (double)emb->nbytes : 0.0);
  double kv_tok = (double)model_kv_bytes_per_token(m);
  printf("model %s: %s, %d layers, %.3f GB weights (%.3f GB streamed per step), kv %.0f B/token, load %.1f s\n", path,
         m->hp.arch, m->hp.n_layer, m->weight_bytes / 1e9, w_bytes / 1e9, kv_tok, now_s() - t0);
  double bw = copy_bw(be);
  printf("device copy bandwidth: %.0f GB/s (read + write)\n", bw / 1e9);

  int32_t *tok = (int32_t *)malloc(sizeof(int32_t) * (size_t)(prompt > 32 ? prompt : 32));
  int32_t pos[32], first[32], ntok[32], slot[32], out[32];
  int32_t *table = (int32_t *)malloc(sizeof(int32_t) * (size_t)maxb * mb);
  float *logits = (float *)malloc(sizeof(float) * (size_t)32 * V);
  double *steps = (double *)malloc(sizeof(double) * (size_t)gen);
  unsigned seed = 7;
  printf("\n| batch | prefill tok/s | decode ms/step | tok/s/seq | tok/s total | GB/step | GB/token | roofline ms | %% of roofline | graph/eager steps |\n");
  printf("|---|---|---|---|---|---|---|---|---|---|\n");
  for (int bi = 0; bi < nb; bi++) {
    const int B = bs[bi];
    for (int s = 0; s < B; s++)
      for (int i = 0; i < mb; i++) table[s * mb + i] = s * mb + i;
    /* prefill: one step per sequence */
    double tp = now_s();
    for (int s = 0; s < B; s++) {
      int32_t *ppos = (int32_t *)malloc(sizeof(int32_t) * (size_t)prompt);
      for (int i = 0; i < prompt; i++) {
        seed = seed * 1664525u + 1013904223u;
        tok[i] = (int32_t)((seed >> 8) % (unsigned)V);
        ppos[i] = i;
      }
      int32_t f0 = 0, n0 = prompt, sl = s, o0 = prompt - 1;
      be_batch_t b = {prompt, 1, tok, ppos, &f0, &n0, table + s * mb, mb, &sl, 1, &o0};
      if (model_forward(m, &b, logits, &err)) {
        fprintf(stderr, "prefill: %s\n", err.msg);
        return 1;
      }
      free(ppos);
    }
    double prefill_s = now_s() - tp;
    be_cuda_stats_t s0, s1;
    be_cuda_get_stats(be, &s0);
    for (int j = 0; j < gen; j++) {
      for (int s = 0; s < B; s++) {
        seed = seed * 1664525u + 1013904223u;
        tok[s] = (int32_t)((seed >> 8) % (unsigned)V);
        pos[s] = prompt + j;
        first[s] = s;
        ntok[s] = 1;
        slot[s] = s;
        out[s] = s;
      }
      be_batch_t b = {B, B, tok, pos, first, ntok, table, mb, slot, B, out};
      double ts = now_s();
      if (model_forward(m, &b, logits, &err)) {
        fprintf(stderr, "decode: %s\n", err.msg);
        return 1;
      }
      steps[j] = now_s() - ts;
    }
    be_cuda_get_stats(be, &s1);
    qsort(steps, (size_t)gen, sizeof(double), cmp_d);
    const double med = steps[gen / 2];
    const double ctx = prompt + gen / 2.0;
    const double bytes = w_bytes + B * ctx * kv_tok + (double)B * V * 4;
    const double roof = bytes / bw;
    printf("| %d | %.0f | %.3f | %.1f | %.1f | %.2f | %.3f | %.3f | %.1f %% | %ld/%ld |\n", B, B * prompt / prefill_s,
           med * 1e3, 1.0 / med, B / med, bytes / 1e9, bytes / B / 1e9, roof * 1e3, 100.0 * roof / med,
           s1.graph_steps - s0.graph_steps, s1.eager_steps - s0.eager_steps);
    fflush(stdout);
  }
  be_cuda_stats_t st;
  be_cuda_get_stats(be, &st);
  printf("\ncaptured decode graph sizes:");
  for (int i = 1; i <= 32; i++)
    if (st.captured_sizes >> i & 1) printf(" %d", i);
  printf(" (captures %ld)\n", st.captures);
  model_free(m);
  be_destroy(be);
  gguf_close(g);
  return 0;
}
