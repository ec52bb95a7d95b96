/* tests/bench/engine_bench.c — CPU decode throughput of the Engine service through real gRPC on
 * loopback: 1, 4 and 16 concurrent greedy streams (prompt-as-ids, ignore_eos). Prints, per
 * concurrency, the median per-stream decode rate (1 / median inter-token interval, TTFT
 * excluded), the aggregate generated tokens per second over the whole run, the median TTFT,
 * and chk = per-stream rate x concurrency / aggregate. A benchmark, not a test.
 *
 * usage: engine-bench [--model M.gguf] [--tokens N] [--threads N] [--conc 1,4,16]
 *        engine-bench --target HOST:PORT [--tokens N] [--conc 1]   (a running gantry-engine
 *        serve, e.g. on CUDA: scripts/gpu/session.sh; nothing is loaded here) */
#include <getopt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/engine_client.h"
#include "common/log.h"
#include "engine/server/server.h"

typedef struct {
  pthread_mutex_t *mu;
  pthread_cond_t *cv;
  int *n_done;
  double t_start, t_first, t_last;
  double *gaps; /* inter-token intervals (ms), one per token after the first delta */
  int n_gaps, n_tok, cap;
  int ok;
  ec_stream_t *s;
} stream_t;

static void on_resp(void *user, ec_stream_t *s, Gantry__V1__GenerateResponse *r) {
  stream_t *x = user;
  (void)s;
  double t = gt_now_ms();
  if (r->kind_case == GANTRY__V1__GENERATE_RESPONSE__KIND_DELTA && r->delta->n_token_ids) {
    int n = (int)r->delta->n_token_ids;
    if (x->n_tok == 0) {
      x->t_first = t;
    } else {
      for (int i = 0; i < n && x->n_gaps < x->cap; i++) x->gaps[x->n_gaps++] = (t - x->t_last) / n;
    }
    x->n_tok += n;
    x->t_last = t;
  }
  if (r->kind_case == GANTRY__V1__GENERATE_RESPONSE__KIND_FINAL) x->ok = 1;
  protobuf_c_message_free_unpacked(&r->base, NULL);
}

static void on_done(void *user, ec_stream_t *s, const gt_rpc_status_t *st) {
  stream_t *x = user;
  (void)s;
  if (st->code != GT_RPC_OK) {
    x->ok = 0;
    fprintf(stderr, "engine-bench: stream failed: %d %s\n", (int)st->code, st->message);
  }
  pthread_mutex_lock(x->mu);
  (*x->n_done)++;
  pthread_cond_broadcast(x->cv);
  pthread_mutex_unlock(x->mu);
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  if (n <= 0) return 0;
  qsort(v, (size_t)n, sizeof *v, cmp_d);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static int run_level(ec_client_t *ec, int conc, int n_tokens, int round) {
  pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
  pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
  int n_done = 0;
  stream_t *st = calloc((size_t)conc, sizeof *st);
  int32_t ids[32];
  double t0 = gt_now_ms();
  for (int i = 0; i < conc; i++) {
    stream_t *x = &st[i];
    x->mu = &mu;
    x->cv = &cv;
    x->n_done = &n_done;
    x->cap = n_tokens;
    x->gaps = malloc(sizeof(double) * (size_t)n_tokens);
    for (int k = 0; k < 32; k++) ids[k] = (int32_t)(1 + (k * 31 + i * 97 + round * 13) % 900); /* distinct prompts */
    Gantry__V1__GenerateRequest req;
    Gantry__V1__SamplingParams sp;
    Gantry__V1__TokenIds toks;
    gantry__v1__generate_request__init(&req);
    gantry__v1__sampling_params__init(&sp);
    gantry__v1__token_ids__init(&toks);
    sp.temperature_opt_case = GANTRY__V1__SAMPLING_PARAMS__TEMPERATURE_OPT_TEMPERATURE;
    toks.ids = ids;
    toks.n_ids = 32;
    req.input_case = GANTRY__V1__GENERATE_REQUEST__INPUT_TOKENS;
    req.tokens = &toks;
    req.sampling = &sp;
    req.max_tokens_opt_case = GANTRY__V1__GENERATE_REQUEST__MAX_TOKENS_OPT_MAX_TOKENS;
    req.max_tokens = (uint32_t)n_tokens;
    req.ignore_eos = 1;
    x->t_start = gt_now_ms();
    gt_err_t err = {0};
    if (ec_generate(ec, &req, NULL, on_resp, on_done, x, &x->s, &err)) {
      fprintf(stderr, "engine-bench: %s\n", err.msg);
      return 1;
    }
  }
  pthread_mutex_lock(&mu);
  while (n_done < conc) pthread_cond_wait(&cv, &mu);
  pthread_mutex_unlock(&mu);
  double wall = gt_now_ms() - t0;
  double *rates = malloc(sizeof(double) * (size_t)conc), *ttft = malloc(sizeof(double) * (size_t)conc);
  long total = 0, n_all = 0;
  int ok = 1;
  for (int i = 0; i < conc; i++) n_all += st[i].n_gaps;
  double *all = malloc(sizeof(double) * (size_t)(n_all > 0 ? n_all : 1)); /* every stream's gaps */
  n_all = 0;
  for (int i = 0; i < conc; i++) {
    memcpy(all + n_all, st[i].gaps, sizeof(double) * (size_t)st[i].n_gaps);
    n_all += st[i].n_gaps;
    double med = median(st[i].gaps, st[i].n_gaps);
    rates[i] = med > 0 ? 1000.0 / med : 0;
    ttft[i] = st[i].t_first - st[i].t_start;
    total += st[i].n_tok;
    ok &= st[i].ok && st[i].n_tok == n_tokens;
    ec_stream_release(st[i].s);
    free(st[i].gaps);
  }
  double rate = median(rates, conc), agg = total / (wall / 1000.0);
  const double itl50 = median(all, (int)n_all); /* sorts all */
  int n_slow = 0; /* intervals over 3x the median: stalls */
  for (long i = 0; i < n_all; i++) n_slow += all[i] > 3 * itl50;
  printf("%5d | %12.1f | %14.1f | %9.1f | %6.2f | %.2f / %.2f / %.2f | %d | %s\n", conc, rate, agg, median(ttft, conc),
         rate * conc / agg, itl50, n_all ? all[(size_t)((n_all - 1) * 0.99 + 0.5)] : 0, n_all ? all[n_all - 1] : 0, n_slow,
         ok ? "ok" : "INCOMPLETE");
  free(all);
  free(rates);
  free(ttft);
  free(st);
  return ok ? 0 : 1;
}

int main(int argc, char **argv) {
  const char *model = "tests/golden/qwen3-tiny.bf16.gguf";
  const char *conc_s = "1,4,16", *remote = NULL;
  int n_tokens = 256, threads = 1;
  static const struct option opts[] = {
      {"model", 1, 0, 'm'}, {"tokens", 1, 0, 'n'}, {"threads", 1, 0, 'j'}, {"conc", 1, 0, 'c'},
      {"target", 1, 0, 't'}, {0, 0, 0, 0}};
  for (int c; (c = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
    if (c == 'm') model = optarg;
    else if (c == 'n') n_tokens = atoi(optarg);
    else if (c == 'j') threads = atoi(optarg);
    else if (c == 'c') conc_s = optarg;
    else if (c == 't') remote = optarg;
    else return 2;
  }
  if (n_tokens < 2) n_tokens = 2;
  gt_log_init_from_env();
  gt_err_t err = {0};
  gguf_t *g = NULL;
  be_t *be = NULL;
  model_t *m = NULL;
  tok_t *tok = NULL;
  srv_t *srv = NULL;
  ec_client_t *ec = NULL;
  int port = 0, rc = 1;
  char target[64];
  if (remote) {
    snprintf(target, sizeof target, "%s", remote);
    model = remote;
    goto connect;
  }
  if (gguf_open(model, &g, &err) || be_cpu_create(threads, &be, &err) || model_load(g, be, 512, &m, &err) ||
      tok_load(g, &tok, &err) || srv_create(&(srv_opts_t){.listen = "127.0.0.1:0"}, &srv, &port, &err)) {
    fprintf(stderr, "engine-bench: %s: %s\n", model, err.msg);
    goto out;
  }
  sched_config_t cfg = {.max_num_seqs = 16, .max_batch_tokens = 512, .n_ctx = 32 + n_tokens + 16};
  if (srv_attach(srv, g, m, tok, &cfg, NULL, &err)) {
    fprintf(stderr, "engine-bench: %s\n", err.msg);
    goto out;
  }
  snprintf(target, sizeof target, "127.0.0.1:%d", port);
connect:
  if (ec_open(target, NULL, &ec, &err)) {
    fprintf(stderr, "engine-bench: %s\n", err.msg);
    goto out;
  }
  printf("engine-bench: model=%s threads=%d tokens/stream=%d prompt=32 ids, greedy, gRPC loopback\n", model, threads, n_tokens);
  printf(" conc | tok/s/stream | aggregate tok/s | ttft ms | chk | itl p50 / p99 / max ms | itl > 3x p50 | \n");
  rc = 0;
  run_level(ec, 1, 8, 0); /* warm-up (not printed separately) */
  printf("------+--------------+----------------+---------+--------\n");
  for (const char *p = conc_s; *p;) {
    int c = atoi(p);
    if (c > 0) rc |= run_level(ec, c, n_tokens, c);
    p = strchr(p, ',');
    if (!p) break;
    p++;
  }
out:
  ec_close(ec);
  srv_free(srv, 2000);
  tok_free(tok);
  model_free(m);
  be_destroy(be);
  gguf_close(g);
  return rc;
}
