/* engine/bench.c — see bench.h. */
#include "engine/bench.h"

#include <stdlib.h>
#include <string.h>

#include "common/clock.h"

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

int eb_parse_batches(const char *s, int *b, int cap) {
  int n = 0;
  for (const char *p = s; p && *p && n < cap;) {
    char *end;
    long v = strtol(p, &end, 10);
    if (end == p || v < 1 || v > 4096) return -1;
    b[n++] = (int)v;
    p = *end == ',' ? end + 1 : NULL;
    if (!p && *end) return -1;
  }
  return n;
}

int eb_run(model_t *m, const gguf_t *g, const eb_opts_t *o, FILE *out, gt_err_t *err) {
  be_t *be = m->be;
  int maxb = 1;
  for (int i = 0; i < o->n_batches; i++) maxb = o->batches[i] > maxb ? o->batches[i] : maxb;
  if (o->prompt < 1 || o->prompt > m->max_tokens || o->gen < 2 || maxb > m->max_tokens)
    return gt_err_set(err, GT_EINVAL, "prompt %d (1..%d), gen %d (>= 2), batch %d (<= %d)", o->prompt, m->max_tokens,
                      o->gen, maxb, m->max_tokens);
  const int bt = 16, mb = (o->prompt + o->gen + bt - 1) / bt + 1, V = m->hp.n_vocab;
  int rc = model_cache_init(m, maxb * mb, bt, maxb, err);
  if (rc) return rc;
  const gguf_tensor_t *emb = gguf_find_tensor(g, "token_embd.weight");
  /* weights a decode step streams: all but the embedding rows it does not gather (the
   * embedding is read in full only when it is also the output head) */
  double w_bytes = (double)m->weight_bytes - (emb && !m->hp.tied_output ? (double)emb->nbytes : 0.0);
  double kv_tok = (double)model_kv_bytes_per_token(m);
  double bw = copy_bw(be, o->copy_bytes);
  fprintf(out, "model: %s, %d layers, %.3f GB weights (%.3f GB streamed per decode step), KV %.0f B/token\n",
          m->hp.arch, m->hp.n_layer, m->weight_bytes / 1e9, w_bytes / 1e9, kv_tok);
  fprintf(out, "%s copy bandwidth: %.1f GB/s (read + write, %.2f GB buffers)\n", be->ops->name, bw / 1e9,
          o->copy_bytes / 1e9);

  size_t nt = (size_t)(o->prompt > maxb ? o->prompt : maxb);
  int32_t *tok = malloc(sizeof(int32_t) * nt), *pos = malloc(sizeof(int32_t) * nt);
  int32_t *first = malloc(sizeof(int32_t) * (size_t)maxb), *ntok = malloc(sizeof(int32_t) * (size_t)maxb);
  int32_t *slot = malloc(sizeof(int32_t) * (size_t)maxb), *outt = malloc(sizeof(int32_t) * (size_t)maxb);
  int32_t *table = malloc(sizeof(int32_t) * (size_t)maxb * mb);
  float *logits = malloc(sizeof(float) * (size_t)maxb * V);
  double *steps = malloc(sizeof(double) * (size_t)o->gen);
  if (!tok || !pos || !first || !ntok || !slot || !outt || !table || !logits || !steps) {
    rc = gt_err_set(err, GT_ENOMEM, "bench buffers");
    goto done;
  }
  unsigned seed = 7;
  fprintf(out, "\n| batch | prefill tok/s | decode ms/step | tok/s/seq | tok/s total | GB/step | GB/token | "
               "roofline ms | %% of roofline | graph/eager steps |\n|---|---|---|---|---|---|---|---|---|---|\n");
  for (int bi = 0; bi < o->n_batches && !rc; bi++) {
    const int B = o->batches[bi];
    for (int s = 0; s < B; s++)
      for (int i = 0; i < mb; i++) table[s * mb + i] = s * mb + i;
    double tp = gt_now_ms();
    for (int s = 0; s < B && !rc; s++) { /* prefill: one step per sequence */
      for (int i = 0; i < o->prompt; i++) {
        seed = seed * 1664525u + 1013904223u;
        tok[i] = (int32_t)((seed >> 8) % (unsigned)V);
        pos[i] = i;
      }
      int32_t f0 = 0, n0 = o->prompt, sl = s, o0 = o->prompt - 1;
      be_batch_t b = {.n_tok = o->prompt, .n_seq = 1, .tok = tok, .pos = pos, .seq_first = &f0, .seq_ntok = &n0,
                      .block_table = table + s * mb, .max_blocks = mb, .state_slot = &sl, .n_out = 1, .out_tok = &o0};
      rc = model_forward(m, &b, logits, err);
    }
    double prefill_s = (gt_now_ms() - tp) / 1e3;
    long e0 = be->ops->eager_steps ? be->ops->eager_steps(be) : 0;
    for (int j = 0; j < o->gen && !rc; j++) {
      for (int s = 0; s < B; s++) {
        seed = seed * 1664525u + 1013904223u;
        tok[s] = (int32_t)((seed >> 8) % (unsigned)V);
        pos[s] = o->prompt + j;
        first[s] = s;
        ntok[s] = 1;
        slot[s] = s;
        outt[s] = s;
      }
      be_batch_t b = {.n_tok = B, .n_seq = B, .tok = tok, .pos = pos, .seq_first = first, .seq_ntok = ntok,
                      .block_table = table, .max_blocks = mb, .state_slot = slot, .n_out = B, .out_tok = outt};
      double ts = gt_now_ms();
      rc = model_forward(m, &b, logits, err);
      steps[j] = (gt_now_ms() - ts) / 1e3;
    }
    if (rc) break;
    long eager = be->ops->eager_steps ? be->ops->eager_steps(be) - e0 : -1;
    qsort(steps, (size_t)o->gen, sizeof(double), cmp_d);
    const double med = steps[o->gen / 2], ctx = o->prompt + o->gen / 2.0;
    const double bytes = w_bytes + B * ctx * kv_tok + (double)B * V * 4, roof = bw > 0 ? bytes / bw : 0;
    char ge[48] = "-";
    if (eager >= 0) snprintf(ge, sizeof ge, "%ld/%ld", (long)o->gen - eager, eager);
    fprintf(out, "| %d | %.0f | %.3f | %.1f | %.1f | %.3f | %.4f | %.3f | %.1f %% | %s |\n", B, B * o->prompt / prefill_s,
            med * 1e3, 1.0 / med, B / med, bytes / 1e9, bytes / B / 1e9, roof * 1e3, 100.0 * roof / med, ge);
    fflush(out);
  }
done:
  free(tok);
  free(pos);
  free(first);
  free(ntok);
  free(slot);
  free(outt);
  free(table);
  free(logits);
  free(steps);
  return rc;
}
