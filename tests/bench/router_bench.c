/* tests/bench/router_bench.c — router-bench: what the router costs. Prints (never pass/fail):
 *   TTFT and median per-token interval of streamed requests sent directly to the engine
 *   (gRPC Generate) versus through gantry-router (HTTP + SSE), same prompt, same engine;
 *   requests per second through the router with max_tokens 1 (each one admission + release in
 *   Redis), at a few concurrency levels.
 *   Per path, the inter-token intervals of all requests pooled: p50, p99, max and how many
 *   exceed 30 ms (a 40 ms delayed-ACK stall under Nagle shows there, issue 24).
 * usage: router-bench [--engine HOST:PORT] [--requests N] [--tokens N] [--pace-us U] [--text-bytes B]
 *        [--prompt P]
 * Without --engine a scripted fake engine runs in-process: 20 ms per token, or with --pace-us one
 * token per U us of B bytes of text each (default 11). --prompt: the prompt for --engine (default
 * "def quicksort(arr):"). Starts its own redis-server and $GANTRY_BIN/gantry-router (default: the
 * directory of this program). */
#define _GNU_SOURCE
#include <curl/curl.h>
#include <libgen.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/engine_client.h"
#include "tests/common/redis_server.h"
#include "tests/integration/router_harness.h"

#define MAXT 4096

typedef struct run {
  double t0, first, last;
  int tokens_seen; /* continuous usage: completion_tokens of the last chunk */
  double iv[MAXT];
  int niv;
  int done;
  pthread_mutex_t mu;
  pthread_cond_t cv;
} run_t;

/* A chunk of k tokens: the first chunk sets TTFT; a later one arriving d ms after the previous
 * gives k intervals of d/k (merged chunks neither fake speed nor hide it). */
static void stamp(run_t *r, int k) {
  double now = gt_now_ms();
  if (k <= 0) return;
  if (r->first == 0) r->first = now;
  else
    for (int i = 0; i < k && r->niv < MAXT; i++) r->iv[r->niv++] = (now - r->last) / k;
  r->last = now;
}

static int cmpd(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  if (n == 0) return 0;
  qsort(v, (size_t)n, sizeof *v, cmpd);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* p-th percentile (nearest rank) of v[0..n) sorted ascending. */
static double pct_sorted(const double *v, int n, double p) {
  if (n == 0) return 0;
  int i = (int)(p / 100.0 * n + 0.999999) - 1;
  return v[i < 0 ? 0 : i >= n ? n - 1 : i];
}

/* ---- direct: gRPC Generate ---- */
static void on_resp(void *u, ec_stream_t *s, Gantry__V1__GenerateResponse *r) {
  (void)s;
  run_t *x = u;
  if (r->kind_case == GANTRY__V1__GENERATE_RESPONSE__KIND_DELTA && r->delta->n_token_ids) {
    pthread_mutex_lock(&x->mu);
    stamp(x, (int)r->delta->n_token_ids);
    pthread_mutex_unlock(&x->mu);
  }
  protobuf_c_message_free_unpacked(&r->base, NULL);
}
static void on_done(void *u, ec_stream_t *s, const gt_rpc_status_t *st) {
  (void)st;
  run_t *x = u;
  ec_stream_release(s);
  pthread_mutex_lock(&x->mu);
  x->done = 1;
  pthread_cond_broadcast(&x->cv);
  pthread_mutex_unlock(&x->mu);
}

static void direct_once(ec_client_t *ec, const char *prompt, int tokens, run_t *x) {
  Gantry__V1__GenerateRequest req = GANTRY__V1__GENERATE_REQUEST__INIT;
  Gantry__V1__SamplingParams sp = GANTRY__V1__SAMPLING_PARAMS__INIT;
  sp.temperature_opt_case = GANTRY__V1__SAMPLING_PARAMS__TEMPERATURE_OPT_TEMPERATURE;
  req.sampling = &sp;
  req.input_case = GANTRY__V1__GENERATE_REQUEST__INPUT_PROMPT;
  req.prompt = (char *)prompt;
  req.max_tokens_opt_case = GANTRY__V1__GENERATE_REQUEST__MAX_TOKENS_OPT_MAX_TOKENS;
  req.max_tokens = (uint32_t)tokens;
  req.ignore_eos = 1;
  ec_stream_t *s;
  gt_err_t err;
  x->t0 = gt_now_ms();
  if (ec_generate(ec, &req, NULL, on_resp, on_done, x, &s, &err)) {
    fprintf(stderr, "generate: %s\n", err.msg);
    exit(1);
  }
  pthread_mutex_lock(&x->mu);
  while (!x->done) pthread_cond_wait(&x->cv, &x->mu);
  pthread_mutex_unlock(&x->mu);
}

/* ---- through the router: HTTP SSE ---- */
static size_t on_sse(char *d, size_t sz, size_t nm, void *u) {
  run_t *x = u;
  size_t k = sz * nm;
  /* continuous usage on every chunk: tokens in a chunk = completion_tokens - the previous value */
  const char *p = d, *end = d + k;
  while ((p = memmem(p, (size_t)(end - p), "\"completion_tokens\":", 20)) != NULL) {
    p += 20;
    int n = atoi(p);
    if (n > x->tokens_seen) {
      stamp(x, n - x->tokens_seen);
      x->tokens_seen = n;
    }
  }
  return k;
}

static void router_once(int port, const char *prompt, int tokens, run_t *x) {
  CURL *c = curl_easy_init();
  char url[128], body[8192];
  snprintf(url, sizeof url, "http://127.0.0.1:%d/v1/completions", port);
  snprintf(body, sizeof body, "{\"model\":\"m\",\"prompt\":\"%s\",\"max_tokens\":%d,\"temperature\":0,\"ignore_eos\":true,\"stream\":true,"
           "\"stream_options\":{\"continuous_usage_stats\":true}}",
           prompt, tokens);
  struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
  curl_easy_setopt(c, CURLOPT_URL, url);
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
  curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_sse);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, x);
  curl_easy_setopt(c, CURLOPT_TCP_NODELAY, 1L);
  x->t0 = gt_now_ms();
  curl_easy_perform(c);
  curl_slist_free_all(h);
  curl_easy_cleanup(c);
}

static size_t drop(char *d, size_t sz, size_t nm, void *u) { (void)d; (void)u; return sz * nm; }

static double admissions_per_s(int port, int conc, int total) {
  CURLM *m = curl_multi_init();
  char url[128];
  snprintf(url, sizeof url, "http://127.0.0.1:%d/v1/completions", port);
  const char *body = "{\"model\":\"m\",\"prompt\":\"x\",\"max_tokens\":1}";
  struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
  int started = 0, finished = 0, running = 0;
  double t0 = gt_now_ms();
  if (conc == 1) { /* one keep-alive connection, back to back */
    CURL *c = curl_easy_init();
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, drop);
    for (; finished < total; finished++) curl_easy_perform(c);
    curl_easy_cleanup(c);
  }
  while (finished < total) {
    while (started < total && started - finished < conc) {
      CURL *c = curl_easy_init();
      curl_easy_setopt(c, CURLOPT_URL, url);
      curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
      curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
      curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, drop);
      curl_multi_add_handle(m, c);
      started++;
    }
    curl_multi_perform(m, &running);
    CURLMsg *msg;
    int q;
    while ((msg = curl_multi_info_read(m, &q)) != NULL) {
      if (msg->msg != CURLMSG_DONE) continue;
      curl_multi_remove_handle(m, msg->easy_handle);
      curl_easy_cleanup(msg->easy_handle);
      finished++;
    }
    if (finished < total) curl_multi_poll(m, NULL, 0, 10, NULL);
  }
  double s = (gt_now_ms() - t0) / 1000;
  curl_slist_free_all(h);
  curl_multi_cleanup(m);
  return total / s;
}

int main(int argc, char **argv) {
  const char *engine = NULL;
  const char *user_prompt = NULL;
  int requests = 10, tokens = 32, pace_us = 0, text_bytes = 11;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--engine")) engine = argv[i + 1];
    else if (!strcmp(argv[i], "--requests")) requests = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--tokens")) tokens = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--pace-us")) pace_us = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--text-bytes")) text_bytes = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--prompt")) user_prompt = argv[i + 1];
    else {
      fprintf(stderr, "router-bench: unknown option %s\n", argv[i]);
      return 2;
    }
  }
  if (tokens < 2 || tokens > MAXT || requests < 1) {
    fprintf(stderr, "router-bench: --tokens 2..%d, --requests >= 1\n", MAXT);
    return 2;
  }
  if (!getenv("GANTRY_BIN")) {
    char *d = strdup(argv[0]);
    setenv("GANTRY_BIN", dirname(d), 1);
    free(d);
  }
  curl_global_init(CURL_GLOBAL_ALL);
  gt_err_t err;
  rs_t *rs = rs_start(&err);
  if (!rs) {
    fprintf(stderr, "redis: %s\n", err.msg);
    return 1;
  }
  fe_t *fe = NULL;
  char target[128];
  if (engine) snprintf(target, sizeof target, "%s", engine);
  else {
    fe = fe_start("bench");
    snprintf(target, sizeof target, "127.0.0.1:%d", fe_port(fe));
  }
  char redis[64], eng[200];
  snprintf(redis, sizeof redis, "redis://127.0.0.1:%d", rs_port(rs));
  snprintf(eng, sizeof eng, "m=%s", target);
  const char *args[] = {"--redis", redis, "--engine", eng, "--admission-hold-ms", "1", "--default-max-inflight", "256", "--auth", "none", NULL};
  rp_t rp;
  if (rp_start(&rp, args) || !rp_wait_ready(&rp, 60000)) {
    fprintf(stderr, "router did not start\n");
    return 1;
  }
  ec_client_t *ec;
  if (ec_open(target, NULL, &ec, &err)) {
    fprintf(stderr, "engine: %s\n", err.msg);
    return 1;
  }
  char prompt[64], how[96];
  if (!fe) snprintf(prompt, sizeof prompt, "%s", user_prompt ? user_prompt : "def quicksort(arr):");
  else if (pace_us > 0) snprintf(prompt, sizeof prompt, "PACE %d %d", pace_us, text_bytes);
  else snprintf(prompt, sizeof prompt, "SLOW bench");
  if (!fe) snprintf(how, sizeof how, "real");
  else if (pace_us > 0) snprintf(how, sizeof how, "fake, %d us/token, %d bytes of text each", pace_us, text_bytes);
  else snprintf(how, sizeof how, "fake, 20 ms/token");
  printf("engine %s (%s), %d requests x %d tokens, streamed, one at a time\n", target, how, requests, tokens);
  printf("%-8s %10s %10s %12s %10s %10s %10s %7s\n", "path", "ttft_p50", "ttft_max", "itl_p50_ms", "pool_p50", "pool_p99",
         "pool_max", "n>30ms");
  for (int path = 0; path < 2; path++) {
    double ttft[256], itl[256];
    int n = requests < 256 ? requests : 256, npool = 0;
    double *pool = malloc((size_t)n * MAXT * sizeof *pool); /* every interval of the counted requests */
    if (!pool) return 1;
    for (int i = 0; i <= n; i++) { /* i == 0: warm-up, not counted */
      run_t *x = calloc(1, sizeof *x);
      pthread_mutex_init(&x->mu, NULL);
      pthread_cond_init(&x->cv, NULL);
      if (path == 0) direct_once(ec, prompt, tokens, x);
      else router_once(rp.http_port, prompt, tokens, x);
      if (i > 0) {
        ttft[i - 1] = x->first - x->t0;
        memcpy(pool + npool, x->iv, (size_t)x->niv * sizeof *pool);
        npool += x->niv;
        itl[i - 1] = median(x->iv, x->niv);
      }
      free(x);
    }
    double tmax = 0;
    for (int i = 0; i < n; i++) tmax = ttft[i] > tmax ? ttft[i] : tmax;
    qsort(pool, (size_t)npool, sizeof *pool, cmpd);
    int slow = 0;
    for (int i = 0; i < npool; i++) slow += pool[i] > 30.0;
    printf("%-8s %10.2f %10.2f %12.3f %10.3f %10.3f %10.3f %7d\n", path == 0 ? "direct" : "router", median(ttft, n), tmax,
           median(itl, n), pct_sorted(pool, npool, 50), pct_sorted(pool, npool, 99), npool ? pool[npool - 1] : 0.0, slow);
    free(pool);
  }
  if (fe) {
    printf("\nrequests/s through the router (max_tokens 1: one admission + release in Redis each)\n");
    int concs[] = {1, 8, 32};
    for (int i = 0; i < 3; i++)
      printf("  concurrency %2d: %8.0f req/s\n", concs[i], admissions_per_s(rp.http_port, concs[i], 400));
  }
  ec_close(ec);
  rp_stop(&rp);
  fe_stop(fe);
  rs_stop(rs);
  curl_global_cleanup();
  return 0;
}
