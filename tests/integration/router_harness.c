/* tests/integration/router_harness.c — see router_harness.h. */
#define _GNU_SOURCE
#include "tests/integration/router_harness.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/grpc_delta.h"
#include "common/grpc_server.h"
#include "common/engine_client.h"
#include "tests/common/redis_server.h"

struct fe {
  char name[32];
  gt_rpc_server_t *srv;
  int port;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool ready;
  bool draining; /* Health says DRAINING */
  int generates, cancelled, active;
  char seen[64][256];
  int nseen;
  int max_active;
  char tenants[8][32];
  int t_active[8], t_max[8], ntenants;
  char arrivals[1024][32];
  char labels[1024][32]; /* the prompt (or the last chat message) of each arrival, truncated */
  int narrivals;
};

static int g_failfirst; /* FAILFIRST: every other such call (process-wide) fails */
static pthread_mutex_t g_last_mu = PTHREAD_MUTEX_INITIALIZER;
static Gantry__V1__GenerateRequest *g_last; /* last request over every fake engine */
static int g_live_fe;                       /* fake engines started and not stopped */

typedef struct job {
  fe_t *f;
  gt_rpc_call_t *call;
  int tenant_idx;
  bool ended; /* counted out of the active streams */
  char text[4096];
  int max_tokens;
} job_t;

static void note_t(fe_t *f, int dgen, int dcancel, int dactive, int tidx) {
  pthread_mutex_lock(&f->mu);
  f->generates += dgen;
  f->cancelled += dcancel;
  f->active += dactive;
  if (f->active > f->max_active) f->max_active = f->active;
  if (tidx >= 0) {
    f->t_active[tidx] += dactive;
    if (f->t_active[tidx] > f->t_max[tidx]) f->t_max[tidx] = f->t_active[tidx];
  }
  pthread_cond_broadcast(&f->cv);
  pthread_mutex_unlock(&f->mu);
}

static void note(fe_t *f, int dgen, int dcancel, int dactive) { note_t(f, dgen, dcancel, dactive, -1); }

/* The stream stops counting as active just before its last message/status goes out: the router
 * may admit the next request as soon as it sees that message. */
static void end_active(job_t *j) {
  if (j->ended) return;
  j->ended = true;
  note_t(j->f, 0, 0, -1, j->tenant_idx);
}

static int send_tok(gt_rpc_call_t *c, int id, const char *text, const char *reasoning) {
  gt_genresp_t *r = gt_delta_new();
  gt_delta_add_token(r, id, text, reasoning);
  return gt_rpc_call_send(c, &r->base, 0);
}

static void final(job_t *j, gt_rpc_call_t *c, Gantry__V1__FinishReason fr, uint32_t pt, uint32_t ct, uint32_t rt, uint32_t cached) {
  gt_genresp_t *f = gt_final_new(fr, NULL);
  f->final->usage->prompt_tokens = pt;
  f->final->usage->completion_tokens = ct;
  f->final->usage->reasoning_tokens = rt;
  f->final->usage->cached_prompt_tokens = cached;
  end_active(j);
  gt_rpc_call_send(c, &f->base, GT_RPC_SEND_NO_MERGE);
  gt_rpc_call_finish(c, GT_RPC_OK, NULL);
}

static bool cancelled(job_t *j) {
  if (!gt_rpc_call_is_cancelled(j->call)) return false;
  end_active(j);
  gt_rpc_call_finish(j->call, GT_RPC_CANCELLED, "cancelled");
  note(j->f, 0, 1, 0);
  return true;
}

static void *run_job(void *arg) {
  job_t *j = arg;
  fe_t *f = j->f;
  gt_rpc_call_t *c = j->call;
  uint32_t pt = (uint32_t)strlen(j->text) / 4 + 1;
  if (strstr(j->text, "TOOLONG")) {
    end_active(j);
    gt_rpc_call_finish(c, GT_RPC_OUT_OF_RANGE, "This model's maximum context length is 4096 tokens. However, your "
                       "messages resulted in 5000 tokens, which leaves no room to generate. Please reduce the length of the messages.");
  } else if (strstr(j->text, "BADPARAM_LB")) {
    end_active(j);
    gt_rpc_call_set_trailer(c, GT_RPC_MD_PARAM, "logit_bias");
    gt_rpc_call_finish(c, GT_RPC_INVALID_ARGUMENT, "n is fine; logit_bias: token id 999999 is outside the vocabulary");
  } else if (strstr(j->text, "BADPARAM_TEMP")) {
    end_active(j);
    gt_rpc_call_set_trailer(c, GT_RPC_MD_PARAM, "sampling.temperature");
    gt_rpc_call_finish(c, GT_RPC_INVALID_ARGUMENT, "logit_bias is fine; sampling.temperature must be in [0, 100], got 900");
  } else if (strstr(j->text, "BADPARAM_NONE")) {
    end_active(j);
    gt_rpc_call_finish(c, GT_RPC_INVALID_ARGUMENT, "n of the prompt's lines is odd");
  } else if (strstr(j->text, "FAILFIRST") && __atomic_fetch_add(&g_failfirst, 1, __ATOMIC_SEQ_CST) % 2 == 0) {
    end_active(j);
    gt_rpc_call_finish(c, GT_RPC_UNAVAILABLE, "engine failed before the first token");
  } else if (strstr(j->text, "FAILFINAL")) { /* started, then a Final with finish_reason ERROR */
    send_tok(c, 7, "partial", NULL);
    gt_genresp_t *f = gt_final_new(GANTRY__V1__FINISH_REASON__FINISH_REASON_ERROR, "sampling failed");
    end_active(j);
    gt_rpc_call_send(c, &f->base, GT_RPC_SEND_NO_MERGE);
    gt_rpc_call_finish(c, GT_RPC_OK, NULL);
  } else if (strstr(j->text, "DIE")) {
    send_tok(c, 7, "partial", NULL);
    usleep(30000);
    end_active(j);
    gt_rpc_call_finish(c, GT_RPC_UNAVAILABLE, "engine crashed");
  } else if (strstr(j->text, "TOOL")) {
    gt_genresp_t *r = gt_delta_new();
    gt_delta_add_tool_call(r, 0, "call_abc", "get_weather", "{\"city\":");
    r->delta->n_token_ids = 0;
    gt_rpc_call_send(c, &r->base, GT_RPC_SEND_NO_MERGE);
    usleep(5000);
    r = gt_delta_new();
    gt_delta_add_tool_call(r, 0, NULL, NULL, "\"Paris\"}");
    gt_rpc_call_send(c, &r->base, GT_RPC_SEND_NO_MERGE);
    final(j, c, GANTRY__V1__FINISH_REASON__FINISH_REASON_TOOL_CALLS, pt, 6, 0, 0);
  } else if (strstr(j->text, "THINK")) {
    send_tok(c, 1, NULL, "let me");
    send_tok(c, 2, NULL, " think");
    send_tok(c, 3, "42", NULL);
    final(j, c, GANTRY__V1__FINISH_REASON__FINISH_REASON_STOP, pt, 3, 2, 0);
  } else if (strstr(j->text, "FLOOD")) {
    static char kib[16385];
    memset(kib, 'f', 16384);
    int n = j->max_tokens > 0 ? j->max_tokens : 50;
    for (int i = 0; i < n; i++) {
      if (cancelled(j)) goto out;
      gt_genresp_t *r = gt_delta_new(); /* unmerged: each token its own message */
      gt_delta_add_token(r, 100 + i, kib, NULL);
      gt_rpc_call_send(c, &r->base, GT_RPC_SEND_NO_MERGE);
      if (i % 64 == 63) usleep(1000); /* lets a cancel be seen */
    }
    if (cancelled(j)) goto out;
    final(j, c, GANTRY__V1__FINISH_REASON__FINISH_REASON_LENGTH, pt, (uint32_t)n, 0, 0);
  } else if (strstr(j->text, "PACE")) { /* "PACE <us> <bytes>": one token per <us>, <bytes> of text each */
    int us = 4600, len = 11;
    sscanf(strstr(j->text, "PACE") + 4, "%d %d", &us, &len);
    len = len < 1 ? 1 : len > 4096 ? 4096 : len;
    char txt[4097];
    memset(txt, 'x', (size_t)len);
    txt[len] = 0;
    int n = j->max_tokens > 0 ? j->max_tokens : 50;
    for (int i = 0; i < n; i++) {
      if (cancelled(j)) goto out;
      send_tok(c, 100 + i, txt, NULL);
      if (us > 0) usleep((useconds_t)us);
    }
    if (cancelled(j)) goto out;
    final(j, c, GANTRY__V1__FINISH_REASON__FINISH_REASON_LENGTH, pt, (uint32_t)n, 0, 0);
  } else if (strstr(j->text, "SLOW")) {
    int n = j->max_tokens > 0 ? j->max_tokens : 50;
    for (int i = 0; i < n; i++) {
      if (cancelled(j)) goto out;
      send_tok(c, 100 + i, "x", NULL);
      usleep(20000);
    }
    if (cancelled(j)) goto out;
    final(j, c, GANTRY__V1__FINISH_REASON__FINISH_REASON_LENGTH, pt, (uint32_t)n, 0, 0);
  } else {
    uint32_t cached = 0;
    pthread_mutex_lock(&f->mu);
    for (int i = 0; i < f->nseen; i++)
      if (!strncmp(f->seen[i], j->text, 255)) cached = pt - 1;
    if (!cached && f->nseen < 64) snprintf(f->seen[f->nseen++], 256, "%.255s", j->text);
    pthread_mutex_unlock(&f->mu);
    send_tok(c, 10, "Hello", NULL);
    send_tok(c, 11, " world", NULL);
    final(j, c, GANTRY__V1__FINISH_REASON__FINISH_REASON_STOP, pt, 2, 0, cached);
  }
out:
  end_active(j);
  free(j);
  return NULL;
}

static void on_gen(void *user, gt_rpc_call_t *call) {
  fe_t *f = user;
  const Gantry__V1__GenerateRequest *req = (const void *)gt_rpc_call_request(call);
  if (req->n > 1 || req->n_more_prompts || req->n_more_tokens) { /* not scripted: refused like a real bound */
    if (req->n > 1) gt_rpc_call_set_trailer(call, GT_RPC_MD_PARAM, "n");
    gt_rpc_call_finish(call, GT_RPC_INVALID_ARGUMENT, "n > 1 and prompt lists are not scripted in the fake engine");
    return;
  }
  job_t *j = calloc(1, sizeof *j);
  j->f = f;
  j->call = call;
  j->max_tokens = req->max_tokens_opt_case ? (int)req->max_tokens : 0;
  if (req->input_case == GANTRY__V1__GENERATE_REQUEST__INPUT_PROMPT) snprintf(j->text, sizeof j->text, "%s", req->prompt);
  else if (req->input_case == GANTRY__V1__GENERATE_REQUEST__INPUT_CHAT && req->chat->n_messages)
    snprintf(j->text, sizeof j->text, "%s", req->chat->messages[req->chat->n_messages - 1]->content);
  size_t n = protobuf_c_message_get_packed_size(&req->base);
  uint8_t *buf = malloc(n + 1);
  protobuf_c_message_pack(&req->base, buf);
  Gantry__V1__GenerateRequest *copy = gantry__v1__generate_request__unpack(NULL, n, buf);
  free(buf);
  pthread_mutex_lock(&g_last_mu);
  if (g_last) protobuf_c_message_free_unpacked(&g_last->base, NULL);
  g_last = copy;
  pthread_mutex_unlock(&g_last_mu);
  pthread_mutex_lock(&f->mu);
  j->tenant_idx = -1;
  for (int i = 0; i < f->ntenants; i++)
    if (!strcmp(f->tenants[i], req->tenant)) j->tenant_idx = i;
  if (j->tenant_idx < 0 && f->ntenants < 8) {
    snprintf(f->tenants[f->ntenants], 32, "%.31s", req->tenant);
    j->tenant_idx = f->ntenants++;
  }
  if (f->narrivals < 1024) {
    const char *lab = req->input_case == GANTRY__V1__GENERATE_REQUEST__INPUT_PROMPT ? req->prompt
                      : req->input_case == GANTRY__V1__GENERATE_REQUEST__INPUT_CHAT && req->chat->n_messages
                          ? req->chat->messages[req->chat->n_messages - 1]->content
                          : "";
    snprintf(f->labels[f->narrivals], 32, "%.31s", lab ? lab : "");
    snprintf(f->arrivals[f->narrivals++], 32, "%.31s", req->tenant);
  }
  pthread_mutex_unlock(&f->mu);
  note_t(f, 1, 0, 1, j->tenant_idx);
  pthread_t t;
  pthread_create(&t, NULL, run_job, j);
  pthread_detach(t);
}

static void on_cancel(void *user, gt_rpc_call_t *call, gt_rpc_code_t code) {
  (void)user;
  (void)call;
  (void)code; /* the job thread notices gt_rpc_call_is_cancelled */
}

static void on_health(void *user, gt_rpc_call_t *call) {
  fe_t *f = user;
  Gantry__V1__HealthResponse *r = malloc(sizeof *r);
  gantry__v1__health_response__init(r);
  pthread_mutex_lock(&f->mu);
  r->status = f->draining ? GANTRY__V1__HEALTH_RESPONSE__STATUS__STATUS_DRAINING
              : f->ready  ? GANTRY__V1__HEALTH_RESPONSE__STATUS__STATUS_READY
                          : GANTRY__V1__HEALTH_RESPONSE__STATUS__STATUS_LOADING;
  r->running = (uint32_t)f->active;
  pthread_mutex_unlock(&f->mu);
  gt_rpc_call_reply(call, &r->base);
}

static void on_info(void *user, gt_rpc_call_t *call) {
  fe_t *f = user;
  Gantry__V1__InfoResponse *r = malloc(sizeof *r);
  gantry__v1__info_response__init(r);
  r->model_name = strdup(f->name);
  r->context_length = 4096;
  r->max_num_seqs = 64;
  gt_rpc_call_reply(call, &r->base);
}

static void on_tokenize(void *user, gt_rpc_call_t *call) {
  (void)user;
  const Gantry__V1__TokenizeRequest *req = (const void *)gt_rpc_call_request(call);
  Gantry__V1__TokenizeResponse *r = malloc(sizeof *r);
  gantry__v1__tokenize_response__init(r);
  size_t n = req->input_case == GANTRY__V1__TOKENIZE_REQUEST__INPUT_TEXT ? strlen(req->text) : 7;
  r->ids = malloc((n + 1) * sizeof *r->ids);
  for (size_t i = 0; i < n; i++) r->ids[i] = (int32_t)i;
  r->n_ids = n;
  r->count = (uint32_t)n;
  gt_rpc_call_reply(call, &r->base);
}

fe_t *fe_start(const char *name) { return fe_start_at(name, 0); }

fe_t *fe_start_at(const char *name, int port) {
  fe_t *f = calloc(1, sizeof *f);
  snprintf(f->name, sizeof f->name, "%s", name);
  pthread_mutex_init(&f->mu, NULL);
  pthread_cond_init(&f->cv, NULL);
  f->ready = true;
  pthread_mutex_lock(&g_last_mu);
  g_live_fe++;
  pthread_mutex_unlock(&g_last_mu);
  gt_err_t err;
  if (gt_rpc_server_create(NULL, &f->srv, &err)) return NULL;
  gt_rpc_method_t ms[] = {
      {EC_METHOD_GENERATE, GT_RPC_SERVER_STREAMING, &gantry__v1__generate_request__descriptor, on_gen, on_cancel,
       gt_delta_merge, f},
      {EC_METHOD_HEALTH, GT_RPC_UNARY, &gantry__v1__health_request__descriptor, on_health, NULL, NULL, f},
      {EC_METHOD_INFO, GT_RPC_UNARY, &gantry__v1__info_request__descriptor, on_info, NULL, NULL, f},
      {EC_METHOD_TOKENIZE, GT_RPC_UNARY, &gantry__v1__tokenize_request__descriptor, on_tokenize, NULL, NULL, f},
  };
  for (size_t i = 0; i < 4; i++)
    if (gt_rpc_server_add_method(f->srv, &ms[i], &err)) return NULL;
  char addr[32];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
  if (gt_rpc_server_start(f->srv, addr, &f->port, &err)) return NULL;
  return f;
}

int fe_port(const fe_t *f) { return f->port; }
void fe_set_draining(fe_t *f, bool draining) {
  pthread_mutex_lock(&f->mu);
  f->draining = draining;
  pthread_mutex_unlock(&f->mu);
}

void fe_set_ready(fe_t *f, bool ready) {
  pthread_mutex_lock(&f->mu);
  f->ready = ready;
  pthread_mutex_unlock(&f->mu);
}
int fe_generates(fe_t *f) { pthread_mutex_lock(&f->mu); int v = f->generates; pthread_mutex_unlock(&f->mu); return v; }
int fe_cancelled(fe_t *f) { pthread_mutex_lock(&f->mu); int v = f->cancelled; pthread_mutex_unlock(&f->mu); return v; }
int fe_active(fe_t *f) { pthread_mutex_lock(&f->mu); int v = f->active; pthread_mutex_unlock(&f->mu); return v; }

int fe_max_active(fe_t *f) { pthread_mutex_lock(&f->mu); int v = f->max_active; pthread_mutex_unlock(&f->mu); return v; }
int fe_tenant_max_active(fe_t *f, const char *tenant) {
  int v = 0;
  pthread_mutex_lock(&f->mu);
  for (int i = 0; i < f->ntenants; i++)
    if (!strcmp(f->tenants[i], tenant)) v = f->t_max[i];
  pthread_mutex_unlock(&f->mu);
  return v;
}
void fe_reset_max(fe_t *f) {
  pthread_mutex_lock(&f->mu);
  f->max_active = f->active;
  for (int i = 0; i < f->ntenants; i++) f->t_max[i] = f->t_active[i];
  f->narrivals = 0;
  pthread_mutex_unlock(&f->mu);
}
int fe_arrival_labels(fe_t *f, char (*out)[32], int max) {
  pthread_mutex_lock(&f->mu);
  int n = f->narrivals < max ? f->narrivals : max;
  for (int i = 0; i < n; i++) memcpy(out[i], f->labels[i], 32);
  pthread_mutex_unlock(&f->mu);
  return n;
}

int fe_arrivals(fe_t *f, char (*out)[32], int max) {
  pthread_mutex_lock(&f->mu);
  int n = f->narrivals < max ? f->narrivals : max;
  for (int i = 0; i < n; i++) memcpy(out[i], f->arrivals[i], 32);
  pthread_mutex_unlock(&f->mu);
  return n;
}

int fe_wait(fe_t *f, int (*pred)(fe_t *), int ms) {
  double end = gt_now_ms() + ms;
  while (!pred(f)) {
    if (gt_now_ms() > end) return 0;
    pthread_mutex_lock(&f->mu);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 20 * 1000000L;
    if (ts.tv_nsec >= 1000000000L) { ts.tv_sec++; ts.tv_nsec -= 1000000000L; }
    pthread_cond_timedwait(&f->cv, &f->mu, &ts);
    pthread_mutex_unlock(&f->mu);
  }
  return 1;
}

Gantry__V1__GenerateRequest *fe_last_request(fe_t *f) {
  (void)f;
  pthread_mutex_lock(&g_last_mu);
  Gantry__V1__GenerateRequest *r = NULL;
  if (g_last) {
    size_t n = protobuf_c_message_get_packed_size(&g_last->base);
    uint8_t *buf = malloc(n + 1);
    protobuf_c_message_pack(&g_last->base, buf);
    r = gantry__v1__generate_request__unpack(NULL, n, buf);
    free(buf);
  }
  pthread_mutex_unlock(&g_last_mu);
  return r;
}

static int no_active(fe_t *f) { return fe_active(f) == 0; }

void fe_stop(fe_t *f) {
  if (!f) return;
  fe_wait(f, no_active, 10000);
  gt_rpc_server_destroy(f->srv);
  free(f);
  pthread_mutex_lock(&g_last_mu); /* the last engine to stop frees the shared copy */
  if (g_last && --g_live_fe == 0) {
    protobuf_c_message_free_unpacked(&g_last->base, NULL);
    g_last = NULL;
  }
  pthread_mutex_unlock(&g_last_mu);
}

/* ---- router process ---- */
int free_tcp_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  int port = -1;
  if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && getsockname(fd, (struct sockaddr *)&a, &len) == 0)
    port = ntohs(a.sin_port);
  close(fd);
  return port;
}

int rp_start(rp_t *r, const char *const *args) { return rp_start_nofile(r, args, 0); }

int rp_start_nofile(rp_t *r, const char *const *args, long nofile) {
  memset(r, 0, sizeof *r);
  int pfd[2];
  if (pipe(pfd)) return -1;
  const char *binenv = getenv("GANTRY_BIN");
  char bin[512];
  snprintf(bin, sizeof bin, "%s/gantry-router", binenv ? binenv : ".");
  const char *argv[64];
  int n = 0;
  argv[n++] = bin;
  argv[n++] = "--http";
  argv[n++] = "127.0.0.1:0";
  bool auth = false;
  for (int i = 0; args[i] && n < 60; i++) {
    auth |= !strcmp(args[i], "--auth");
    argv[n++] = args[i];
  }
  if (!auth) { /* most tests run without API keys; test_router_auth passes --auth keys */
    argv[n++] = "--auth";
    argv[n++] = "none";
  }
  argv[n] = NULL;
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (nofile > 0) {
      struct rlimit rl = {(rlim_t)nofile, (rlim_t)nofile};
      if (setrlimit(RLIMIT_NOFILE, &rl)) _exit(126);
    }
    dup2(pfd[1], 1);
    close(pfd[0]);
    close(pfd[1]);
    execv(bin, (char *const *)argv);
    _exit(127);
  }
  close(pfd[1]);
  r->pid = pid;
  r->out_fd = pfd[0];
  char line[256];
  size_t len = 0;
  double end = gt_now_ms() + 20000;
  while (gt_now_ms() < end) {
    struct pollfd p = {.fd = r->out_fd, .events = POLLIN};
    if (poll(&p, 1, 200) <= 0) continue;
    ssize_t k = read(r->out_fd, line + len, 1);
    if (k <= 0) break;
    if (line[len] == '\n') {
      line[len] = '\0';
      if (sscanf(line, "listening http_port=%d grpc_port=%d", &r->http_port, &r->grpc_port) >= 1) return 0;
      len = 0;
    } else if (len < sizeof line - 2) {
      len++;
    }
  }
  rp_kill9(r);
  return -1;
}

int ep_start(ep_t *e, const char *log_path, const char *const *extra) {
  memset(e, 0, sizeof *e);
  const char *binenv = getenv("GANTRY_BIN"), *golden = getenv("GANTRY_GOLDEN");
  char bin[512], model[1024];
  snprintf(bin, sizeof bin, "%s/gantry-engine", binenv ? binenv : ".");
  snprintf(model, sizeof model, "%s/qwen3-tiny.bf16.gguf", golden ? golden : "tests/golden");
  const char *argv[48] = {bin, "serve", "--model", model, "--served-model-name", "tiny", "--threads", "1"};
  int n = 8;
  for (int i = 0; extra[i] && n < 46; i++) argv[n++] = extra[i];
  argv[n] = NULL;
  int pfd[2];
  if (pipe(pfd)) return -1;
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    int lfd = open(log_path, O_WRONLY | O_CREAT | O_APPEND, 0600);
    if (lfd >= 0) dup2(lfd, 2);
    dup2(pfd[1], 1);
    close(pfd[0]);
    close(pfd[1]);
    execv(bin, (char *const *)argv);
    _exit(127);
  }
  close(pfd[1]);
  e->pid = pid;
  e->out_fd = pfd[0];
  char line[512];
  size_t len = 0;
  struct pollfd pf = {.fd = e->out_fd, .events = POLLIN};
  while (len < sizeof line - 1 && poll(&pf, 1, 60000) > 0) {
    if (read(e->out_fd, line + len, 1) <= 0) break;
    if (line[len++] == '\n') break;
  }
  line[len] = 0;
  if (sscanf(line, "ready grpc_port=%d metrics_port=%d", &e->grpc_port, &e->metrics_port) == 2) return 0;
  ep_stop(e);
  return -1;
}

void ep_stop(ep_t *e) {
  if (e->pid <= 0) return;
  kill(e->pid, SIGTERM);
  waitpid(e->pid, NULL, 0);
  close(e->out_fd);
  e->pid = 0;
}

int rp_wait_ready(rp_t *r, int ms) {
  double end = gt_now_ms() + ms;
  while (gt_now_ms() < end) {
    char *b = NULL;
    long st = http_req(r->http_port, "GET", "/ready", NULL, NULL, 0, &b, NULL);
    free(b);
    if (st == 200) return 1;
    usleep(20000); /* polling the router's own readiness endpoint: nothing to wait on */
  }
  return 0;
}

int rp_wait_engines_up(rp_t *r, int n, int ms) {
  double end = gt_now_ms() + ms;
  while (gt_now_ms() < end) {
    char *b = NULL;
    int up = 0;
    if (http_req(r->http_port, "GET", "/metrics", NULL, NULL, 0, &b, NULL) == 200)
      for (const char *p = b; (p = strstr(p, "\ngantry_router_engine_up{")) != NULL; p++) {
        const char *eol = strchr(p + 1, '\n');
        if (eol && eol - p >= 2 && !strncmp(eol - 2, " 1", 2)) up++;
      }
    free(b);
    if (up >= n) return 1;
    usleep(20000); /* the router's health checks have no event a test can wait on */
  }
  return 0;
}

long long rp_metric(rp_t *r, const char *name, const char *hdr) {
  char *b = NULL;
  const char *h[] = {hdr, NULL};
  long long v = -1;
  if (http_req(r->http_port, "GET", "/metrics", h, NULL, 0, &b, NULL) == 200) {
    char pat[160];
    snprintf(pat, sizeof pat, "\n%s ", name);
    const char *p = strstr(b, pat);
    if (p) v = atoll(p + strlen(pat));
  }
  free(b);
  return v;
}

long rp_peak_rss_kib(const rp_t *r) {
  char path[64], line[256];
  snprintf(path, sizeof path, "/proc/%d/status", (int)r->pid);
  FILE *f = fopen(path, "r");
  long kib = -1;
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, "VmHWM:", 6)) kib = atol(line + 6);
  if (f) fclose(f);
  return kib;
}

int rp_stop(rp_t *r) {
  if (r->pid <= 0) return -1;
  kill(r->pid, SIGTERM);
  int st = 0;
  double end = gt_now_ms() + 20000;
  while (waitpid(r->pid, &st, WNOHANG) == 0) {
    if (gt_now_ms() > end) {
      kill(r->pid, SIGKILL);
      waitpid(r->pid, &st, 0);
      break;
    }
    usleep(10000);
  }
  close(r->out_fd);
  r->pid = 0;
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

void rp_kill9(rp_t *r) {
  if (r->pid <= 0) return;
  kill(r->pid, SIGKILL);
  waitpid(r->pid, NULL, 0);
  close(r->out_fd);
  r->pid = 0;
}

/* ---- HTTP ---- */
typedef struct buf {
  char *p;
  size_t n;
} buf_t;

static size_t on_data(char *d, size_t sz, size_t nm, void *u) {
  buf_t *b = u;
  size_t k = sz * nm;
  char *p = realloc(b->p, b->n + k + 1);
  if (!p) return 0;
  memcpy(p + b->n, d, k);
  b->p = p;
  b->n += k;
  b->p[b->n] = '\0';
  return k;
}

long http_req(int port, const char *method, const char *path, const char *const *hdrs, const char *data,
              size_t data_len, char **body, char **hdr_out) {
  CURL *c = curl_easy_init();
  char url[512];
  snprintf(url, sizeof url, "http://127.0.0.1:%d%s", port, path);
  buf_t b = {0}, h = {0};
  struct curl_slist *sl = NULL;
  for (int i = 0; hdrs && hdrs[i]; i++) sl = curl_slist_append(sl, hdrs[i]);
  sl = curl_slist_append(sl, "Expect:");
  curl_easy_setopt(c, CURLOPT_URL, url);
  curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, sl);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_data);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, &h);
  curl_easy_setopt(c, CURLOPT_TIMEOUT, 30L);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  if (data) {
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, data);
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)data_len);
  }
  long st = -1, code = 0;
  CURLcode rc = curl_easy_perform(c);
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
  /* a server may answer early and close while the body is still being sent (413): the status
   * then arrived even though the transfer failed */
  if (rc == CURLE_OK || code > 0) st = code;
  curl_slist_free_all(sl);
  curl_easy_cleanup(c);
  if (body) *body = b.p ? b.p : strdup("");
  else free(b.p);
  if (hdr_out) *hdr_out = h.p ? h.p : strdup("");
  else free(h.p);
  return st;
}

/* A test stack that cannot start: say why and end the test process (a failed test). */
__attribute__((format(printf, 1, 2), noreturn)) static void rh_fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "router_harness: ");
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  abort();
}

void rstack_start(rstack_t *s, const char *fe_name, const char *const *extra) {
  gt_err_t err;
  memset(s, 0, sizeof *s);
  if (!(s->rs = rs_start(&err))) rh_fail("redis: %s", err.msg);
  if (!(s->fe = fe_start(fe_name))) rh_fail("fake engine %s did not start", fe_name);
  char redis[64], eng[64];
  snprintf(redis, sizeof redis, "redis://127.0.0.1:%d", rs_port(s->rs));
  snprintf(eng, sizeof eng, "tiny=127.0.0.1:%d", fe_port(s->fe));
  const char *args[64] = {"--redis", redis, "--engine", eng};
  int n = 4;
  for (int i = 0; extra && extra[i] && n < 63; i++) args[n++] = extra[i];
  args[n] = NULL;
  if (rp_start(&s->rp, args)) rh_fail("gantry-router did not start");
}

int rstack_stop(rstack_t *s) {
  int rc = rp_stop(&s->rp);
  fe_stop(s->fe);
  rs_stop(s->rs);
  return rc;
}
