/* tests/bench/bench_constraint.c — the per-token cost of constrained decoding through the
 * scheduler (engine/sched/sched.h): B sequences decode together, once free and once under a
 * constraint (every step fills each row's grammar mask on the host, and on the device path uploads
 * the masks and runs logits_mask before sampling). Prints per batch size the median decode step
 * (ms) of both runs and the overhead in %, over the steps where all B sequences are running (the
 * best of REPS interleaved runs of each), and the scheduler's own time filling and uploading the
 * masks per step (sched_stats_t.mask_ms: the part of the overhead that no machine noise hides):
 *   bench_constraint --model M.gguf [--device cpu|cuda] [--batch 1,32] [--gen 64] [--prompt 32]
 *                    [--constraint json_object|choice|schema] [--threads N]
 * Sampling is greedy (the device sampler where the backend has one); prompts are pseudo-random
 * ids (fixed seed); the schema is an object of bounded strings, integers, an enum and an array. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "engine/models/bench.h"
#include "engine/sched/sched.h"
#ifdef GANTRY_HAVE_CUDA
#include "engine/backend/backend_cuda.h"
#endif

#define MAX_STEPS 4096
#define REPS 3 /* runs of each kind per batch size */

static const char *const k_schema =
    "{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"integer\"},\"name\":{\"type\":\"string\"},"
    "\"kind\":{\"enum\":[\"file\",\"dir\",\"link\"]},\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"}},"
    "\"size\":{\"type\":\"number\"}},\"required\":[\"id\",\"name\",\"kind\",\"tags\"]}";

static void on_event(void *ud, const sched_event_t *ev) {
  if (ev->is_final) (*(int *)ud)++;
}

static int cmp_d(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Median decode step (ms) of B sequences of gen tokens after a prompt of `prompt` ids, each
 * under the constraint k (NULL: free); *n_steps counts the steps that had all B decoding; *cs (when
 * spec): the constraint's mask counters over the run (its B sequences share one mask cache). */
static int run(model_t *m, const tok_t *tok, int B, int prompt, int gen, cons_kind_t kind, const char *spec,
               double *median, int *n_steps, double *mask_ms, cons_stats_t *cs, gt_err_t *err) {
  sched_config_t c = {.max_num_seqs = B < 8 ? 8 : B, .max_batch_tokens = B * prompt > 512 ? B * prompt : 512,
                      .n_ctx = prompt + gen + 16};
  if (c.max_batch_tokens > m->max_tokens) c.max_batch_tokens = m->max_tokens;
  sched_t *s = NULL;
  int rc = sched_create(m, tok, &c, &s, err);
  if (rc) return rc;
  if (m->be->ops->graph_sizes && (rc = sched_warmup(s, NULL, err))) {
    sched_free(s);
    return rc;
  }
  unsigned seed = 12345;
  int finals = 0;
  for (int b = 0; b < B && !rc; b++) {
    sched_req_t r = {0};
    r.prompt = malloc(sizeof(int32_t) * (size_t)prompt);
    if (!r.prompt) rc = gt_err_set(err, GT_ENOMEM, "out of memory");
    for (int i = 0; !rc && i < prompt; i++) {
      seed = seed * 1664525u + 1013904223u;
      r.prompt[i] = (int32_t)((seed >> 8) % (unsigned)tok_n_vocab(tok));
    }
    r.n_prompt = prompt;
    r.sampling = sampler_defaults();
    r.max_tokens = gen;
    r.ignore_eos = 1;
    r.logprobs = -1;
    r.on_event = on_event;
    r.ud = &finals;
    if (!rc && spec) rc = sched_constraint(s, kind, spec, strlen(spec), &r.constraint, err);
    if (rc) free(r.prompt); /* not submitted: still ours */
    else if (sched_submit(s, &r, err) < 0) rc = err->code ? err->code : GT_EINVAL;
  }
  static double t[MAX_STEPS];
  int n = 0;
  double mask = 0;
  while (!rc && finals < B) {
    sched_stats_t st;
    sched_stats(s, &st);
    const uint64_t computed = st.computed_tokens;
    const double mask0 = st.mask_ms;
    const double t0 = gt_now_ms();
    const int r = sched_step(s, err);
    const double dt = gt_now_ms() - t0;
    if (r < 0) rc = r;
    if (r <= 0) break;
    sched_stats(s, &st);
    /* a step of B decode tokens with all B sequences running */
    if (st.computed_tokens - computed == (uint64_t)B && finals == 0 && n < MAX_STEPS) {
      t[n++] = dt;
      mask += st.mask_ms - mask0;
    }
  }
  cons_t *k = NULL;
  if (!rc && spec && !(rc = sched_constraint(s, kind, spec, strlen(spec), &k, err))) cons_stats(k, cs);
  cons_unref(k);
  sched_free(s);
  if (rc) return rc;
  qsort(t, (size_t)n, sizeof *t, cmp_d);
  *median = n ? t[n / 2] : 0;
  *n_steps = n;
  *mask_ms = n ? mask / n : 0;
  return GT_OK;
}

int main(int argc, char **argv) {
  const char *path = NULL, *batches = "1,32", *device = "cpu", *cons = "schema";
  int gen = 64, prompt = 32, threads = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--model")) path = argv[i + 1];
    else if (!strcmp(argv[i], "--batch")) batches = argv[i + 1];
    else if (!strcmp(argv[i], "--device")) device = argv[i + 1];
    else if (!strcmp(argv[i], "--gen")) gen = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--prompt")) prompt = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--constraint")) cons = argv[i + 1];
    else if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
  }
  int b[16], nb = eb_parse_batches(batches, b, 16);
  cons_kind_t kind = CONS_JSON_SCHEMA;
  const char *spec = k_schema;
  if (!strcmp(cons, "json_object")) kind = CONS_JSON_OBJECT, spec = "";
  else if (!strcmp(cons, "choice")) kind = CONS_CHOICE, spec = "[\"alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma tau upsilon phi chi psi omega\"]";
  else if (strcmp(cons, "schema")) path = NULL;
  if (!path || nb <= 0 || gen < 4 || prompt < 1 || (strcmp(device, "cpu") && strcmp(device, "cuda"))) {
    fprintf(stderr, "usage: bench_constraint --model M.gguf [--device cpu|cuda] [--batch 1,32] [--gen 64] [--prompt 32] "
                    "[--constraint json_object|choice|schema] [--threads N]\n");
    return 2;
  }
  int maxb = 512;
  for (int i = 0; i < nb; i++) maxb = b[i] * prompt > maxb ? b[i] * prompt : maxb;
  gt_err_t err = {0};
  gguf_t *g = NULL;
  be_t *be = NULL;
  model_t *m = NULL;
  tok_t *tok = NULL;
  int rc = gguf_open(path, &g, &err);
#ifdef GANTRY_HAVE_CUDA
  if (!rc && !strcmp(device, "cuda")) rc = be_cuda_create(0, &be, &err);
#endif
  if (!rc && !strcmp(device, "cpu")) rc = be_cpu_create(threads, &be, &err);
  if (!rc && !be) rc = gt_err_set(&err, GT_EUNSUPPORTED, "this build has no CUDA backend");
  if (!rc) rc = model_load(g, be, maxb, &m, &err);
  if (!rc) rc = tok_load(g, &tok, &err);
  if (rc) {
    fprintf(stderr, "bench_constraint: %s\n", err.msg);
    return 1;
  }
  printf("model %s, %s backend, constraint %s, vocab %d, prompt %d, gen %d, greedy\n\n", path, be->ops->name, cons,
         m->hp.n_vocab, prompt, gen);
  printf("| batch | free ms/step | constrained ms/step | overhead | mask ms/step | mask %% of free step | steps timed "
         "| masks computed / copied |\n"
         "|---|---|---|---|---|---|---|---|\n");
  for (int i = 0; i < nb && !rc; i++) {
    double free_ms = 1e30, cons_ms = 1e30, mask_ms = 1e30, unused = 0;
    int n0 = 0, n1 = 0;
    cons_stats_t cs = {0};
    for (int rep = 0; rep < REPS && !rc; rep++) { /* interleaved; the best median of each: a shared host's noise */
      double f = 0, c = 0, mk = 0;
      rc = run(m, tok, b[i], prompt, gen, kind, NULL, &f, &n0, &unused, NULL, &err);
      if (!rc) rc = run(m, tok, b[i], prompt, gen, kind, spec, &c, &n1, &mk, &cs, &err);
      if (f < free_ms) free_ms = f;
      if (c < cons_ms) cons_ms = c;
      if (mk < mask_ms) mask_ms = mk;
    }
    if (!rc && (n0 == 0 || n1 == 0)) /* a sequence ended (its constraint complete) before all B decoded */
      printf("| %d | n/a | n/a | n/a | n/a | n/a | %d / %d | %" PRIu64 " / %" PRIu64 " |\n", b[i], n0, n1,
             cs.mask_fills, cs.mask_hits);
    else if (!rc)
      printf("| %d | %.3f | %.3f | %+.1f %% | %.3f | %.1f %% | %d / %d | %" PRIu64 " / %" PRIu64 " |\n", b[i], free_ms,
             cons_ms, free_ms > 0 ? 100.0 * (cons_ms - free_ms) / free_ms : 0, mask_ms,
             free_ms > 0 ? 100.0 * mask_ms / free_ms : 0, n0, n1, cs.mask_fills, cs.mask_hits);
    fflush(stdout);
  }
  if (rc) fprintf(stderr, "bench_constraint: %s\n", err.msg);
  tok_free(tok);
  model_free(m);
  be_destroy(be);
  gguf_close(g);
  return rc ? 1 : 0;
}
