/* gantry-engine serve — the long-running gRPC Engine service (engine/server/server.h) with a
 * Prometheus /metrics listener. SIGTERM / SIGINT drain: new Generate calls get UNAVAILABLE,
 * running streams finish (up to --drain-timeout), then exit 0. Exit codes: 0 clean shutdown,
 * 1 runtime failure, 2 bad options or not enough memory for the weights plus a minimal KV pool. */
#include <getopt.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/grpc_creds.h"
#include "common/metrics.h"
#include "engine/cli/cli.h"

#include "format/dtype.h"
#include "engine/sched/sched_mem.h"
#include "engine/models/embed.h"
#include "engine/server/server.h"
#include "format/tokenizer.h"
#ifdef GANTRY_HAVE_CUDA
#include "engine/backend/backend_cuda.h"
#endif

#ifndef GANTRY_VERSION
#define GANTRY_VERSION "0.1.0"
#endif

static volatile sig_atomic_t g_signal;
static int g_sigpipe[2] = {-1, -1};

static atomic_int g_fatal; /* the engine failed (srv_opts_t.on_fatal): exit non-zero */

static void on_fatal(void *ud, const char *why) {
  (void)ud;
  GT_LOG_ERROR("fatal: %s", why);
  atomic_store(&g_fatal, 1);
  if (g_sigpipe[1] >= 0) {
    ssize_t w = write(g_sigpipe[1], "f", 1);
    (void)w;
  }
}

static void on_signal(int sig) {
  g_signal = sig;
  if (g_sigpipe[1] >= 0) {
    ssize_t w = write(g_sigpipe[1], "s", 1);
    (void)w;
  }
}

static void usage(void) {
  fputs("usage: gantry-engine serve --model M.gguf [options]\n"
        "  --listen HOST:PORT      gRPC address (default 127.0.0.1:50051: name 0.0.0.0 to open it to others)\n"
        "  --metrics-port N        Prometheus /metrics port (default 9090; 0 = any free port, -1 = off)\n"
        "  --metrics-host H        metrics bind address (default 127.0.0.1)\n"
        "  --auth-token-file F     every call must carry this token (the router's --engine-token-file);\n"
        "                          $GANTRY_ENGINE_TOKEN when no file is named. Else UNAUTHENTICATED\n"
        "  --tls-cert F --tls-key F  serve gRPC over TLS with this certificate (PEM)\n"
        "  --tls-client-ca F       mutual TLS: clients need a certificate signed by this CA\n"
        "  --served-model-name N   the model's name in Info and the metrics' model_name label; use the\n"
        "                          router's model id (default: the GGUF's general.name)\n"
        "  --max-num-seqs N        sequences running at once (default 32)\n"
        "  --max-batch-tokens N    tokens per step, decode + prefill chunks (default 2048 on CUDA, 512 on\n"
        "                          the CPU; engine/SERVE.md \"Chunk size\")\n"
        "  --max-waiting N         waiting queue bound; more -> RESOURCE_EXHAUSTED (default 256)\n"
        "  --kv-memory SIZE        KV pool: bytes with K/M/G suffix, or a fraction (0.5) of the device's free\n"
        "                          memory after the weights (default: max-num-seqs x max-model-len if that\n"
        "                          fits 90 % of it, 25 % of the host's on the CPU; else what fits)\n"
        "  --max-model-len N       context per sequence (default: the model's)\n"
        "  --threads N             CPU threads (default: every core)\n"
        "  --device D              cpu (default), cuda or cuda:N\n"
        CLI_TP_HELP
        CLI_KV_DTYPE_HELP
        CLI_ACTIVATIONS_HELP
        CLI_PREFILL_PRECISION_HELP
        "  --task T                generate (default) or embed: an embedding model (last-token pooling,\n"
        "                          {arch}.pooling_type = 3) served through Embed / the router's /v1/embeddings\n"
        "  --speculative M         speculative decoding: mtp (the model's MTP block, Qwen3.5), ngram (prompt\n"
        "                          lookup over the request's prompt and output) or off (default); output\n"
        "                          is unchanged (engine/SERVE.md\n"
        "                          \"Speculative decoding\")\n"
        "  --num-speculative-tokens K  drafts per step, 1..8 (default 3)\n"
        "  --spec-max-seqs N       no drafts in a step with more decoding sequences (default 8)\n"
        "  --spec-adaptive on|off  off (default): drafts in every step within --spec-max-seqs; on: a\n"
        "                          step drafts only while speculative steps of its batch size measure\n"
        "                          more tokens per ms than plain ones (loses on the H200 so far:\n"
        "                          engine/SERVE.md \"Speculative decoding\")\n"
        "  --spec-suffix-cache N   also draft (ngram, mtp) from the last N tokens that finished requests\n"
        "                          of the same tenant / cache_salt generated (default 262144; 0 = off)\n"
        "  --spec-mtp-lookup on|off  on (default): with mtp, where the last 4 tokens recur earlier in the\n"
        "                          request, the tokens after them are the drafts when the block's first\n"
        "                          draft agrees, and the block drafts no further (engine/SERVE.md)\n"
        "  --spec-draft-vocab N    MTP drafts among the first N token ids only (default 32768 for\n"
        "                          vocabularies over 65536, else all; 0 = all); output is unchanged\n"
        "  --drain-timeout S       seconds to finish running streams on SIGTERM (default 30)\n",
        stdout);
}

/* "123", "64M", "2G", "1.5G" -> bytes; "0.5" (a number < 1) -> fraction of free memory. */
static int parse_size(const char *v, double *bytes, double *fraction) {
  char *end;
  double x = strtod(v, &end);
  if (end == v || x <= 0) return -1;
  *bytes = 0;
  *fraction = 0;
  if (!*end && x < 1) {
    *fraction = x;
    return 0;
  }
  double mul = 1;
  if (*end == 'K' || *end == 'k') mul = 1024.0, end++;
  else if (*end == 'M' || *end == 'm') mul = 1024.0 * 1024, end++;
  else if (*end == 'G' || *end == 'g') mul = 1024.0 * 1024 * 1024, end++;
  if (*end == 'i') end++;
  if (*end == 'B' || *end == 'b') end++;
  if (*end) return -1;
  *bytes = x * mul;
  return 0;
}

#define SERVE_CHUNK_CUDA 2048 /* --max-batch-tokens defaults */
#define SERVE_CHUNK_CPU 512

int cmd_serve(int argc, char **argv) {
  static const struct option opts[] = {
      {"model", 1, 0, 'm'},        {"listen", 1, 0, 'l'},        {"metrics-port", 1, 0, 'p'},
      {"metrics-host", 1, 0, 'H'}, {"max-num-seqs", 1, 0, 's'},  {"max-batch-tokens", 1, 0, 'b'},
      {"max-waiting", 1, 0, 'w'},  {"kv-memory", 1, 0, 'k'},     {"threads", 1, 0, 'j'},
      {"drain-timeout", 1, 0, 'd'}, {"max-model-len", 1, 0, 'c'}, {"device", 1, 0, 'D'},
      {"kv-dtype", 1, 0, 'K'},    {"served-model-name", 1, 0, 'n'}, {"prefill-precision", 1, 0, 'P'},
      {"activations", 1, 0, 'A'}, {"help", 0, 0, 'h'},        {"speculative", 1, 0, 'S'},
      {"num-speculative-tokens", 1, 0, 'N'}, {"spec-max-seqs", 1, 0, 'M'}, CLI_TP_OPTS,
      {"spec-draft-vocab", 1, 0, 'V'}, {"spec-adaptive", 1, 0, 'J'}, {"spec-suffix-cache", 1, 0, 'X'}, {"spec-mtp-lookup", 1, 0, 'L'},
      {"auth-token-file", 1, 0, 'T'}, {"tls-cert", 1, 0, 'C'}, {"tls-key", 1, 0, 'Y'}, {"tls-client-ca", 1, 0, 'Z'},
      {"task", 1, 0, 't'}, {0, 0, 0, 0}};
  const char *model = NULL, *listen = "127.0.0.1:50051", *mhost = "127.0.0.1", *kvmem = NULL, *device = "cpu";
  const char *token_file = NULL, *tls_cert = NULL, *tls_key = NULL, *tls_ca = NULL;
  const char *kv_dtype = NULL, *served_name = NULL;
  long metrics_port = 9090, max_seqs = 32, max_batch = 0, max_waiting = 256, threads = 0, max_len = 0;
  long spec_k = 3, spec_seqs = 8, spec_vocab = -1; /* -1: the scheduler's default */
  long spec_suffix = 1 << 18;
  int spec_mode = SCHED_SPEC_OFF, embed = 0, spec_adaptive = 0, spec_lookup = 1;
  double drain_s = 30;
  cli_tp_t tp = {.tp = 1};
  optind = 1;
  for (int c; (c = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
    int t = cli_tp_opt(c, optarg, &tp);
    if (t < 0) return 2;
    if (t) continue;
    switch (c) {
      case 'm': model = optarg; break;
      case 'l': listen = optarg; break;
      case 'H': mhost = optarg; break;
      case 'k': kvmem = optarg; break;
      case 'D': device = optarg; break;
      case 'n': served_name = optarg; break;
      case 'T': token_file = optarg; break;
      case 'C': tls_cert = optarg; break;
      case 'Y': tls_key = optarg; break;
      case 'Z': tls_ca = optarg; break;
      case 'K': if (cli_kv_dtype(NULL, optarg)) return 2; kv_dtype = optarg; break;
      case 'P': if (cli_prefill_precision(optarg)) return 2; break;
      case 'A': if (cli_activations(optarg)) return 2; break;
      case 'p': if (cli_int("--metrics-port", optarg, -1, 65535, &metrics_port)) return 2; break;
      case 's': if (cli_int("--max-num-seqs", optarg, 1, 4096, &max_seqs)) return 2; break;
      case 'b': if (cli_int("--max-batch-tokens", optarg, 1, 1 << 20, &max_batch)) return 2; break;
      case 'w': if (cli_int("--max-waiting", optarg, 1, 1 << 20, &max_waiting)) return 2; break;
      case 'j': if (cli_int("--threads", optarg, 1, 1024, &threads)) return 2; break;
      case 'c': if (cli_int("--max-model-len", optarg, 16, 1 << 24, &max_len)) return 2; break;
      case 'd': if (cli_float("--drain-timeout", optarg, 0, 86400, &drain_s)) return 2; break;
      case 'S':
        if (strcmp(optarg, "ngram") == 0) spec_mode = SCHED_SPEC_NGRAM;
        else if (strcmp(optarg, "mtp") == 0) spec_mode = SCHED_SPEC_MTP;
        else if (strcmp(optarg, "off") == 0) spec_mode = SCHED_SPEC_OFF;
        else return cli_fail("--speculative expects mtp, ngram or off, got '%s'", optarg), 2;
        break;
      case 't':
        if (strcmp(optarg, "embed") == 0) embed = 1;
        else if (strcmp(optarg, "generate") == 0) embed = 0;
        else return cli_fail("--task expects generate or embed, got '%s'", optarg), 2;
        break;
      case 'N': if (cli_int("--num-speculative-tokens", optarg, 1, SCHED_SPEC_MAX_K, &spec_k)) return 2; break;
      case 'M': if (cli_int("--spec-max-seqs", optarg, 1, 4096, &spec_seqs)) return 2; break;
      case 'V': if (cli_int("--spec-draft-vocab", optarg, 0, 1 << 30, &spec_vocab)) return 2; break;
      case 'X': if (cli_int("--spec-suffix-cache", optarg, 0, 1 << 26, &spec_suffix)) return 2; break;
      case 'J': if (cli_on_off("--spec-adaptive", optarg, &spec_adaptive)) return 2; break;
      case 'L': if (cli_on_off("--spec-mtp-lookup", optarg, &spec_lookup)) return 2; break;
      case 'h': usage(); return 0;
      default: return 2;
    }
  }
  if (!model) return cli_fail("--model is required"), 2;
  if (served_name && !served_name[0]) return cli_fail("--served-model-name must not be empty"), 2;
  double kv_bytes = 0, kv_frac = 0;
  if (kvmem && parse_size(kvmem, &kv_bytes, &kv_frac))
    return cli_fail("--kv-memory expects bytes with an optional K/M/G suffix or a fraction in (0, 1), got '%s'", kvmem), 2;

  if (pipe(g_sigpipe)) return cli_fail("pipe: cannot create"), 1;
  struct sigaction sa = {.sa_handler = on_signal};
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  signal(SIGPIPE, SIG_IGN);

  gt_err_t err = {0};
  gt_metrics_t *reg = gt_metrics_create();
  gt_metrics_http_t *http = NULL;
  srv_t *srv = NULL;
  gguf_t *g = NULL;
  be_t *be = NULL;
  model_t *m = NULL;
  tok_t *tok = NULL;
  int rc = 1, port = 0, mport = 0, idle = 0;
  if (!reg) return cli_fail("out of memory"), 1;
  gt_rpc_creds_t cr;
  if (gt_rpc_creds_load(&cr, token_file, getenv("GANTRY_ENGINE_TOKEN"), tls_ca, tls_cert, tls_key, &err)) {
    gt_metrics_free(reg);
    return cli_fail("%s", err.msg), 2;
  }
  if (cr.ca && !cr.cert) {
    gt_rpc_creds_free(&cr);
    gt_metrics_free(reg);
    return cli_fail("--tls-client-ca needs --tls-cert and --tls-key"), 2;
  }
  const int srv_rc = srv_create(&(srv_opts_t){.listen = listen, .metrics = reg, .on_fatal = on_fatal, .auth_token = cr.token,
                                              .tls_cert = cr.cert, .tls_key = cr.key, .tls_client_ca = cr.ca},
                                &srv, &port, &err);
  gt_rpc_creds_free(&cr); /* the server keeps its own copies */
  if (srv_rc) {
    cli_fail("listen %s: %s", listen, err.msg);
    goto out;
  }
  if (metrics_port >= 0 && gt_metrics_http_start(reg, mhost, (int)metrics_port, &mport, &http, &err)) {
    cli_fail("%s", err.msg);
    goto out;
  }
  /* ---- load ---- */
  double t0 = gt_now_ms();
  if (gguf_open(model, &g, &err)) {
    cli_fail("%s: %s", model, err.msg);
    goto out;
  }
  uint64_t tensor_bytes = 0;
  int n_type[GT_TYPE_COUNT] = {0};
  for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
    const gguf_tensor_t *t = gguf_tensor(g, i);
    tensor_bytes += t->nbytes;
    if ((int)t->type >= 0 && t->type < GT_TYPE_COUNT) n_type[t->type]++;
  }
  /* CUDA: the smallest chunk within 5 % of the best prefill rate (engine/SERVE.md "Chunk size") */
  if (!max_batch) max_batch = strncmp(device, "cuda", 4) == 0 ? SERVE_CHUNK_CUDA : SERVE_CHUNK_CPU;
  int lrc = cli_load_model(g, model, device, (int)threads, &tp, (int)max_batch, tensor_bytes, &be, &m);
  if (lrc) {
    rc = lrc;
    goto out;
  }
  if (cli_kv_dtype(be, kv_dtype)) goto out;
  if (tok_load(g, &tok, &err)) {
    cli_fail("%s: tokenizer: %s", model, err.msg);
    goto out;
  }
  char wtbuf[256] = "";
  const char *wt[GT_TYPE_COUNT];
  int n_wt = 0;
  for (int t = 0; t < GT_TYPE_COUNT; t++)
    if (n_type[t]) {
      wt[n_wt++] = dt_name((gt_type_t)t);
      snprintf(wtbuf + strlen(wtbuf), sizeof wtbuf - strlen(wtbuf), "%s%s", n_wt > 1 ? "," : "", dt_name((gt_type_t)t));
    }
  GT_LOG_INFO("model=%s name=\"%s\"", model, m->hp.name);
  GT_LOG_INFO("architecture=%s layers=%d context=%d hybrid=%d", m->hp.arch, m->hp.n_layer, m->hp.n_ctx_train,
              m->hp.n_gdn_layers > 0);
  GT_LOG_INFO("weight_types=%s", wtbuf);
  GT_LOG_INFO("parameters=%lld", (long long)m->n_params);
#ifdef GANTRY_HAVE_CUDA
  if (strncmp(device, "cuda", 4) == 0)
    GT_LOG_INFO("activations=%s prefill_precision=%s", be_cuda_activations(), be_cuda_prefill_precision());
#endif
  /* the scheduler plans the KV pool from the device's memory and logs the plan (sched_mem.h) */
  sched_config_t cfg = {.max_num_seqs = (int)max_seqs, .max_batch_tokens = (int)max_batch, .max_waiting = (int)max_waiting,
                        .n_ctx = (int)max_len, .kv_mem_bytes = (uint64_t)kv_bytes, .kv_mem_fraction = kv_frac,
                        .spec_mode = spec_mode, .spec_k = (int)spec_k, .spec_max_seqs = (int)spec_seqs, .embed = embed,
                        .spec_draft_vocab = spec_vocab < 0 ? 0 : spec_vocab == 0 ? -1 : (int)spec_vocab,
                        .spec_adaptive = spec_adaptive, .spec_suffix_tokens = (int)spec_suffix,
                        .spec_lookup_off = !spec_lookup};
  if (embed) {
    const embed_pool_t pool = embed_pooling_type(g);
    if (pool != EMBED_POOL_LAST) {
      cli_fail("%s: --task embed needs last-token pooling ({arch}.pooling_type = 3); this file has %s", model,
               embed_pool_name(pool));
      goto out;
    }
    if (spec_mode != SCHED_SPEC_OFF) GT_LOG_INFO("--speculative is ignored with --task embed");
    GT_LOG_INFO("task=embed pooling=last dims=%d", m->hp.n_embd);
  }
  srv_model_info_t info = {.model_name = served_name ? served_name : m->hp.name, .architecture = m->hp.arch, .version = GANTRY_VERSION,
                           .weight_types = wt, .n_weight_types = n_wt};
  if (srv_attach(srv, g, m, tok, &cfg, &info, &err)) {
    cli_fail("%s", err.msg);
    rc = err.code == GT_ENOMEM ? 2 : 1;
    goto out;
  }
  GT_LOG_INFO("max_num_seqs=%ld max_batch_tokens=%ld max_waiting=%ld speculative=%s num_speculative_tokens=%ld "
              "spec_max_seqs=%ld spec_draft_vocab=%d",
              max_seqs, max_batch, max_waiting, spec_mode == SCHED_SPEC_NGRAM ? "ngram" : spec_mode == SCHED_SPEC_MTP ? "mtp" : "off",
              spec_mode ? spec_k : 0, spec_mode ? spec_seqs : 0, spec_mode == SCHED_SPEC_MTP ? m->mtp_draft_vocab : 0);
  GT_LOG_INFO("listening grpc=%s port=%d metrics=%s:%d load_ms=%.0f", listen, port, metrics_port >= 0 ? mhost : "off", mport,
              gt_now_ms() - t0);
  /* machine-readable line for tests and scripts */
  printf("ready grpc_port=%d metrics_port=%d\n", port, mport);
  fflush(stdout);

  /* ---- run until a signal ---- */
  for (;;) {
    char ch;
    ssize_t k = read(g_sigpipe[0], &ch, 1);
    if (k == 1 || g_signal) break;
  }
  if (atomic_load(&g_fatal)) { /* running requests already ended with an error status */
    GT_LOG_ERROR("exiting: the engine failed");
    goto out;
  }
  GT_LOG_INFO("signal=%d draining running=%d drain_timeout_s=%.0f", (int)g_signal, srv_live(srv), drain_s);
  srv_drain(srv);
  idle = srv_wait_idle(srv, (int64_t)(drain_s * 1000));
  GT_LOG_INFO("drained=%d left=%d", idle, srv_live(srv));
  rc = 0;
out:
  gt_metrics_http_stop(http);
  /* finished streams still have their last messages and status in flight: give gRPC a
   * moment to deliver them (after a drain; after an engine failure, whose error statuses are
   * already queued, a shorter one: without it a loaded machine sent "Cancelling all calls"
   * instead of the rank's error); anything still running after the drain is cancelled */
  srv_free(srv, rc == 0 && idle ? 5000 : atomic_load(&g_fatal) ? 1000 : 0);
  tok_free(tok);
  model_free(m);
  be_destroy(be);
  gguf_close(g);
  gt_metrics_free(reg);
  if (g_sigpipe[0] >= 0) close(g_sigpipe[0]), close(g_sigpipe[1]);
  if (rc == 0) GT_LOG_INFO("shutdown complete");
  return rc;
}
