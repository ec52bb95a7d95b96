/* tests/bench/bench_spec.c — speculative decoding through the scheduler (engine/sched/sched.h): the
 * same greedy requests with speculation off and with prompt lookup (n-gram), in one run. Prints per
 * mode the decode rate (tokens after the first / the time from first to last token, per request,
 * averaged), the mean acceptance length (tokens per verify step: 1 + accepted drafts / verify
 * steps), drafts and accepted counts, and whether the outputs are identical:
 *   bench_spec --model M.gguf [--device cpu|cuda] [--batch 1] [--gen 128] [--k 3] [--threads N]
 *              [--prompt-file F] [--mode ngram|mtp] [--force-accept L] [--adaptive 0|1]
 * --mode mtp drafts with the model's MTP block (Qwen3.5). --force-accept L (> 1; benchmark hook
 * sched_config_t.spec_force_accept) accepts drafts as if they matched so that verify steps keep
 * L tokens on average: the cost of an acceptance length random weights never reach (the outputs
 * then differ, by design). --adaptive 1 leaves drafting to the scheduler's measured costs
 * (engine/sched/spec_cost.h: a step drafts only where speculative steps give more tokens per ms);
 * the default 0 drafts in every step the static rules allow (sched_config_t.spec_adaptive 0), the
 * speculation's own cost. Also prints the tokens run through the model (computed) and the steps
 * the measurement kept from drafting (cost-off).
 * The default prompt is an edit: a Python class followed by the start of a second one with the same
 * methods, so the continuation repeats the prompt's code. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/sched/sched.h"
#ifdef GANTRY_HAVE_CUDA
#include "engine/backend/backend_cuda.h"
#endif

#define MAXB 64
#define MAXG 4096

static const char k_edit[] =
    "class Stack:\n"
    "    def __init__(self):\n"
    "        self.items = []\n\n"
    "    def push(self, item):\n"
    "        self.items.append(item)\n\n"
    "    def pop(self):\n"
    "        if not self.items:\n"
    "            raise IndexError(\"pop from empty stack\")\n"
    "        return self.items.pop()\n\n"
    "    def peek(self):\n"
    "        if not self.items:\n"
    "            raise IndexError(\"peek from empty stack\")\n"
    "        return self.items[-1]\n\n"
    "    def __len__(self):\n"
    "        return len(self.items)\n\n\n"
    "class Queue:\n"
    "    def __init__(self):\n"
    "        self.items = []\n\n"
    "    def push(self, item):\n";

typedef struct {
  int32_t ids[MAXG];
  int n, done;
  sched_usage_t u;
} out_t;

static void on_event(void *ud, const sched_event_t *ev) {
  out_t *o = ud;
  if (ev->is_final) {
    o->done = 1;
    o->u = *ev->usage;
    return;
  }
  for (int i = 0; i < ev->delta->n_ids && o->n < MAXG; i++) o->ids[o->n++] = ev->delta->ids[i];
}

/* B copies of the prompt, greedy, gen tokens each, on a fresh scheduler: out[B], stats into *st. */
static int run(model_t *m, const tok_t *tok, const int32_t *prompt, int n_prompt, int B, int gen, int spec, int k,
               double force, int adaptive, out_t *out, sched_stats_t *st, gt_err_t *err) {
  sched_config_t c = {.max_num_seqs = B, .max_batch_tokens = m->max_tokens, .n_ctx = n_prompt + gen + 16,
                      .spec_mode = spec, .spec_k = k, .spec_max_seqs = B, .spec_force_accept = force,
                      .spec_adaptive = adaptive};
  sched_t *s = NULL;
  int rc = sched_create(m, tok, &c, &s, err);
  if (rc) return rc;
  if (m->be->ops->graph_sizes && (rc = sched_warmup(s, NULL, err))) {
    sched_free(s);
    return rc;
  }
  memset(out, 0, sizeof(out_t) * (size_t)B);
  for (int b = 0; b < B && !rc; b++) {
    sched_req_t r = {0};
    r.prompt = malloc(sizeof(int32_t) * (size_t)n_prompt);
    if (!r.prompt) return gt_err_set(err, GT_ENOMEM, "out of memory");
    memcpy(r.prompt, prompt, sizeof(int32_t) * (size_t)n_prompt);
    r.n_prompt = n_prompt;
    r.sampling = sampler_defaults();
    r.max_tokens = gen;
    r.ignore_eos = 1;
    r.logprobs = -1;
    r.on_event = on_event;
    r.ud = &out[b];
    if (sched_submit(s, &r, err) < 0) rc = err->code ? err->code : GT_EINVAL;
  }
  for (int busy = 1; !rc && busy;) {
    busy = 0;
    for (int b = 0; b < B; b++) busy |= !out[b].done;
    if (busy && sched_step(s, err) < 0) rc = err->code ? err->code : GT_EINTERNAL;
  }
  sched_stats(s, st);
  sched_free(s);
  return rc;
}

int main(int argc, char **argv) {
  const char *path = NULL, *device = "cpu", *pfile = NULL;
  int B = 1, gen = 128, k = 3, threads = 0, mode = SCHED_SPEC_NGRAM, adaptive = 0;
  double force = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--model")) path = argv[i + 1];
    else if (!strcmp(argv[i], "--device")) device = argv[i + 1];
    else if (!strcmp(argv[i], "--prompt-file")) pfile = argv[i + 1];
    else if (!strcmp(argv[i], "--batch")) B = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--gen")) gen = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--k")) k = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--mode")) mode = !strcmp(argv[i + 1], "mtp") ? SCHED_SPEC_MTP : !strcmp(argv[i + 1], "ngram") ? SCHED_SPEC_NGRAM : -1;
    else if (!strcmp(argv[i], "--force-accept")) force = atof(argv[i + 1]);
    else if (!strcmp(argv[i], "--adaptive")) adaptive = atoi(argv[i + 1]);
    else path = NULL, i = argc;
  }
  if (!path || B < 1 || B > MAXB || gen < 2 || gen > MAXG || k < 1 || k > SCHED_SPEC_MAX_K || mode < 0 ||
      (force != 0 && (force <= 1 || force > k + 1))) {
    fprintf(stderr, "usage: bench_spec --model M.gguf [--device cpu|cuda] [--batch 1..%d] [--gen 2..%d] [--k 1..%d] "
                    "[--threads N] [--prompt-file F] [--mode ngram|mtp] [--force-accept 1..k+1] [--adaptive 0|1]\n", MAXB, MAXG,
            SCHED_SPEC_MAX_K);
    return 2;
  }
  char *text = NULL;
  size_t len = 0;
  if (pfile) {
    FILE *f = fopen(pfile, "rb");
    if (!f || fseek(f, 0, SEEK_END) || (len = (size_t)ftell(f), fseek(f, 0, SEEK_SET)) || !(text = malloc(len + 1)) ||
        fread(text, 1, len, f) != len) {
      fprintf(stderr, "bench_spec: cannot read %s\n", pfile);
      return 1;
    }
    fclose(f);
  }
  gt_err_t err = {0};
  gguf_t *g = NULL;
  be_t *be = NULL;
  model_t *m = NULL;
  tok_t *tok = NULL;
  int32_t *prompt = NULL;
  size_t n_prompt = 0;
  int rc = gguf_open(path, &g, &err);
#ifdef GANTRY_HAVE_CUDA
  if (!rc && !strcmp(device, "cuda")) rc = be_cuda_create(0, &be, &err);
#endif
  if (!rc && !strcmp(device, "cpu")) rc = be_cpu_create(threads, &be, &err);
  if (!rc && !be) rc = gt_err_set(&err, GT_EUNSUPPORTED, "no backend %s in this build", device);
  if (!rc) rc = model_load(g, be, 512, &m, &err);
  if (!rc) rc = tok_load(g, &tok, &err);
  if (!rc) rc = tok_encode(tok, text ? text : k_edit, text ? len : strlen(k_edit), 0, &prompt, &n_prompt, &err);
  static out_t base[MAXB], spec[MAXB];
  sched_stats_t s0, s1;
  if (!rc) rc = run(m, tok, prompt, (int)n_prompt, B, gen, SCHED_SPEC_OFF, k, 0, 0, base, &s0, &err);
  if (!rc) rc = run(m, tok, prompt, (int)n_prompt, B, gen, mode, k, force, adaptive, spec, &s1, &err);
  if (rc) {
    fprintf(stderr, "bench_spec: %s\n", err.msg);
    return 1;
  }
  int same = 1;
  double tps[2] = {0, 0};
  for (int b = 0; b < B; b++) {
    same &= base[b].n == spec[b].n && !memcmp(base[b].ids, spec[b].ids, sizeof(int32_t) * (size_t)base[b].n);
    tps[0] += (base[b].n - 1) / (base[b].u.decode_ms / 1e3) / B;
    tps[1] += (spec[b].n - 1) / (spec[b].u.decode_ms / 1e3) / B;
  }
  printf("model %s, %s backend, prompt %zu tokens, batch %d, gen %d, greedy, k %d%s%s\n\n", path, be->ops->name, n_prompt,
         B, gen, k, force > 0 ? ", forced acceptance (outputs differ by design)" : "",
         adaptive ? ", adaptive (measured costs)" : "");
  printf("| mode | decode tok/s per request | steps | computed | cost-off | verify steps | drafts | accepted | acceptance length |\n"
         "|---|---|---|---|---|---|---|---|---|\n");
  printf("| off | %.1f | %llu | %llu | - | - | - | - | 1.00 |\n", tps[0], (unsigned long long)s0.steps,
         (unsigned long long)s0.computed_tokens);
  printf("| %s | %.1f | %llu | %llu | %llu | %llu | %llu | %llu | %.2f |\n", mode == SCHED_SPEC_MTP ? "mtp" : "ngram", tps[1],
         (unsigned long long)s1.steps, (unsigned long long)s1.computed_tokens, (unsigned long long)s1.spec_cost_off_steps,
         (unsigned long long)s1.spec_drafts, (unsigned long long)s1.spec_draft_tokens,
         (unsigned long long)s1.spec_accepted_tokens,
         s1.spec_drafts ? 1.0 + (double)s1.spec_accepted_tokens / (double)s1.spec_drafts : 1.0);
  printf("\nspeed-up %.2fx, outputs %s\n", tps[0] > 0 ? tps[1] / tps[0] : 0, same ? "identical" : "DIFFER");
  char *t = NULL;
  size_t tl = 0;
  if (tok_decode(tok, spec[0].ids, (size_t)spec[0].n, 0, &t, &tl, &err) == GT_OK) printf("\noutput:\n%.*s\n", (int)tl, t);
  free(t);
  free(prompt);
  free(text);
  tok_free(tok);
  model_free(m);
  be_destroy(be);
  gguf_close(g);
  return same || force > 0 ? 0 : 1;
}
