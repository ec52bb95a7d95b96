/* tests/unit/test_grpc_engine.c — the gRPC glue end to end over loopback: a scripted fake
 * Engine service (server glue + a scheduler thread that sends from outside the cq thread,
 * like the real engine) exercised through common/engine_client. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "common/clock.h"
#include "common/engine_client.h"
#include "common/grpc_delta.h"
#include "common/grpc_server.h"

/* ================================ fake engine ================================================ */

enum { JOB_STREAM, JOB_SLOW, JOB_BURST };

#define BURST_TEXT 512 /* bytes of text per burst token: the burst overflows flow control */

typedef struct job {
  gt_rpc_call_t *call;
  int kind, n, emitted, base;
  double next_ms, interval_ms;
  struct job *next;
} job_t;

typedef struct fake {
  gt_rpc_server_t *srv;
  int port;
  pthread_t sched;
  pthread_mutex_t mu;
  pthread_cond_t cv; /* wakes the scheduler: new job, cancel, stop */
  job_t *incoming;
  int stop;
  /* observations (under mu) */
  pthread_cond_t obs_cv;
  int cancel_cbs, deadline_cbs, cancelled_released;
  int burst_sent; /* the burst job queued all its deltas */
  gt_rpc_call_stats_t burst_stats;
  char last_request_id[64];
} fake_t;

static void fake_note(fake_t *f, void (*fn)(fake_t *)) {
  pthread_mutex_lock(&f->mu);
  fn(f);
  pthread_cond_broadcast(&f->obs_cv);
  pthread_mutex_unlock(&f->mu);
}

static gt_genresp_t *token_delta(int id, int kind) {
  gt_genresp_t *r = gt_delta_new();
  assert_non_null(r);
  char text[BURST_TEXT + 32];
  int n = snprintf(text, sizeof text, "t%d ", id);
  if (kind == JOB_BURST) { /* pad to BURST_TEXT with a letter derived from the id */
    memset(text + n, 'a' + id % 26, BURST_TEXT - n);
    text[BURST_TEXT] = '\0';
  }
  assert_int_equal(gt_delta_add_token(r, id, text, NULL), 0);
  return r;
}

static void finish_job(job_t *j) {
  gt_genresp_t *fin = gt_final_new(GANTRY__V1__FINISH_REASON__FINISH_REASON_LENGTH, NULL);
  assert_non_null(fin);
  fin->final->usage->completion_tokens = (uint32_t)j->n;
  fin->final->usage->prompt_tokens = 3;
  fin->final->timings->ttft_ms = 1.5;
  gt_rpc_call_send(j->call, &fin->base, GT_RPC_SEND_NO_MERGE);
  gt_rpc_call_finish(j->call, GT_RPC_OK, NULL);
}

static void inc_cancelled_released(fake_t *f) { f->cancelled_released++; }
static void set_burst_sent(fake_t *f) { f->burst_sent = 1; }

/* Runs one job one step; returns 1 when the job is done (and its call finished). */
static int step_job(fake_t *f, job_t *j) {
  if (gt_rpc_call_is_cancelled(j->call)) {
    gt_rpc_call_finish(j->call, GT_RPC_CANCELLED, "cancelled");
    fake_note(f, inc_cancelled_released);
    return 1;
  }
  switch (j->kind) {
    case JOB_STREAM:
      gt_rpc_call_send(j->call, &token_delta(j->base + j->emitted, j->kind)->base, 0);
      j->emitted++;
      break;
    case JOB_SLOW:
      if (gt_now_ms() < j->next_ms) return 0;
      gt_rpc_call_send(j->call, &token_delta(j->base + j->emitted, j->kind)->base, 0);
      j->emitted++;
      j->next_ms += j->interval_ms;
      break;
    case JOB_BURST:
      for (; j->emitted < j->n; j->emitted++)
        gt_rpc_call_send(j->call, &token_delta(j->base + j->emitted, j->kind)->base, 0);
      pthread_mutex_lock(&f->mu);
      gt_rpc_call_stats(j->call, &f->burst_stats);
      pthread_mutex_unlock(&f->mu);
      fake_note(f, set_burst_sent);
      break;
  }
  if (j->emitted < j->n) return 0;
  finish_job(j);
  return 1;
}

static void *sched_main(void *arg) {
  fake_t *f = arg;
  job_t *active = NULL;
  for (;;) {
    pthread_mutex_lock(&f->mu);
    while (!f->stop && !f->incoming && !active) pthread_cond_wait(&f->cv, &f->mu);
    if (f->stop && !f->incoming && !active) {
      pthread_mutex_unlock(&f->mu);
      break;
    }
    while (f->incoming) { /* adopt new jobs */
      job_t *j = f->incoming;
      f->incoming = j->next;
      j->next = active;
      active = j;
    }
    int stop = f->stop;
    pthread_mutex_unlock(&f->mu);

    int any_waiting = 0;
    for (job_t **pp = &active; *pp;) {
      job_t *j = *pp;
      int done;
      if (stop) { /* engine going away: fail what is left */
        gt_rpc_call_finish(j->call, GT_RPC_UNAVAILABLE, "engine stopping");
        done = 1;
      } else {
        done = step_job(f, j);
      }
      if (done) {
        *pp = j->next;
        free(j);
      } else {
        if (j->kind == JOB_SLOW) any_waiting = 1;
        pp = &j->next;
      }
    }
    if (any_waiting) { /* sleep until the next slow token, a new job or a cancel */
      pthread_mutex_lock(&f->mu);
      if (!f->incoming && !f->stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 1000000;
        if (ts.tv_nsec >= 1000000000L) {
          ts.tv_sec++;
          ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&f->cv, &f->mu, &ts);
      }
      pthread_mutex_unlock(&f->mu);
    }
  }
  return NULL;
}

static void gen_handler(void *user, gt_rpc_call_t *call) {
  fake_t *f = user;
  const Gantry__V1__GenerateRequest *req = (const void *)gt_rpc_call_request(call);
  const char *rid = gt_rpc_call_metadata(call, "x-request-id");
  if (req->request_id[0] && (!rid || strcmp(rid, req->request_id) != 0)) {
    gt_rpc_call_finish(call, GT_RPC_INVALID_ARGUMENT, "x-request-id does not match request_id");
    return;
  }
  job_t *j = calloc(1, sizeof *j);
  assert_non_null(j);
  j->call = call;
  j->n = req->max_tokens_opt_case ? (int)req->max_tokens : 16;
  j->kind = JOB_STREAM;
  if (req->input_case == GANTRY__V1__GENERATE_REQUEST__INPUT_TOKENS && req->tokens->n_ids > 0) {
    j->base = req->tokens->ids[0];
  } else if (req->input_case == GANTRY__V1__GENERATE_REQUEST__INPUT_PROMPT) {
    const char *p = req->prompt;
    if (strcmp(p, "error") == 0) {
      free(j);
      gt_rpc_call_finish(call, gt_rpc_code_from_err(GT_EBUSY), "queue full: 8 waiting");
      return;
    }
    if (strcmp(p, "slow") == 0) {
      j->kind = JOB_SLOW;
      j->interval_ms = 5;
      j->next_ms = gt_now_ms();
    } else if (strcmp(p, "burst") == 0) {
      j->kind = JOB_BURST;
    }
  } else {
    free(j);
    gt_rpc_call_finish(call, GT_RPC_INVALID_ARGUMENT, "no input");
    return;
  }
  pthread_mutex_lock(&f->mu);
  j->next = f->incoming;
  f->incoming = j;
  pthread_cond_signal(&f->cv);
  pthread_mutex_unlock(&f->mu);
}

static void gen_cancel(void *user, gt_rpc_call_t *call, gt_rpc_code_t code) {
  fake_t *f = user;
  (void)call;
  pthread_mutex_lock(&f->mu);
  f->cancel_cbs++;
  if (code == GT_RPC_DEADLINE_EXCEEDED) f->deadline_cbs++;
  pthread_cond_broadcast(&f->obs_cv);
  pthread_cond_signal(&f->cv); /* wake the scheduler: it frees the sequence */
  pthread_mutex_unlock(&f->mu);
}

static void info_handler(void *user, gt_rpc_call_t *call) {
  fake_t *f = user;
  const char *rid = gt_rpc_call_metadata(call, "x-request-id");
  pthread_mutex_lock(&f->mu);
  snprintf(f->last_request_id, sizeof f->last_request_id, "%s", rid ? rid : "");
  pthread_mutex_unlock(&f->mu);
  Gantry__V1__InfoResponse *r = malloc(sizeof *r);
  gantry__v1__info_response__init(r);
  r->model_name = strdup("fake-model");
  r->architecture = strdup("qwen3");
  r->context_length = 4096;
  r->max_num_seqs = 32;
  r->kv_capacity_tokens = 65536;
  r->n_weight_types = 1;
  r->weight_types = malloc(sizeof(char *));
  r->weight_types[0] = strdup("Q4_K");
  gt_rpc_call_reply(call, &r->base);
}

static void health_handler(void *user, gt_rpc_call_t *call) {
  Gantry__V1__HealthResponse *r = malloc(sizeof *r);
  gantry__v1__health_response__init(r);
  r->status = GANTRY__V1__HEALTH_RESPONSE__STATUS__STATUS_READY;
  r->running = 2;
  gt_rpc_call_reply(call, &r->base);
}

/* Tokenize: one id per byte of the text; "fail" -> INVALID_ARGUMENT. */
static void tokenize_handler(void *user, gt_rpc_call_t *call) {
  const Gantry__V1__TokenizeRequest *req = (const void *)gt_rpc_call_request(call);
  if (req->input_case != GANTRY__V1__TOKENIZE_REQUEST__INPUT_TEXT ||
      strcmp(req->text, "fail") == 0) {
    gt_rpc_call_finish(call, GT_RPC_INVALID_ARGUMENT, "tokenize: cannot tokenize this input");
    return;
  }
  Gantry__V1__TokenizeResponse *r = malloc(sizeof *r);
  gantry__v1__tokenize_response__init(r);
  size_t n = strlen(req->text);
  r->ids = malloc((n ? n : 1) * sizeof *r->ids);
  for (size_t i = 0; i < n; i++) r->ids[i] = (unsigned char)req->text[i];
  r->n_ids = n;
  r->count = (uint32_t)n;
  gt_rpc_call_reply(call, &r->base);
}

static fake_t *fake_start(void) {
  fake_t *f = calloc(1, sizeof *f);
  assert_non_null(f);
  pthread_mutex_init(&f->mu, NULL);
  pthread_cond_init(&f->cv, NULL);
  pthread_cond_init(&f->obs_cv, NULL);
  gt_err_t err = {0};
  assert_int_equal(gt_rpc_server_create(NULL, &f->srv, &err), GT_OK);
  gt_rpc_method_t ms[] = {
      {EC_METHOD_GENERATE, GT_RPC_SERVER_STREAMING, &gantry__v1__generate_request__descriptor,
       gen_handler, gen_cancel, gt_delta_merge, f},
      {EC_METHOD_INFO, GT_RPC_UNARY, &gantry__v1__info_request__descriptor, info_handler, NULL,
       NULL, f},
      {EC_METHOD_HEALTH, GT_RPC_UNARY, &gantry__v1__health_request__descriptor, health_handler,
       NULL, NULL, f},
      {EC_METHOD_TOKENIZE, GT_RPC_UNARY, &gantry__v1__tokenize_request__descriptor,
       tokenize_handler, NULL, NULL, f},
  };
  for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++)
    assert_int_equal(gt_rpc_server_add_method(f->srv, &ms[i], &err), GT_OK);
  assert_int_equal(gt_rpc_server_start(f->srv, "127.0.0.1:0", &f->port, &err), GT_OK);
  assert_true(f->port > 0);
  assert_int_equal(pthread_create(&f->sched, NULL, sched_main, f), 0);
  return f;
}

/* Shuts the server down (grace_ms), then stops the scheduler and frees everything. */
static void fake_stop(fake_t *f, int64_t grace_ms) {
  gt_rpc_server_shutdown(f->srv, grace_ms);
  assert_int_equal(gt_rpc_server_live_calls(f->srv), 0);
  pthread_mutex_lock(&f->mu);
  f->stop = 1;
  pthread_cond_signal(&f->cv);
  pthread_mutex_unlock(&f->mu);
  pthread_join(f->sched, NULL);
  gt_rpc_server_destroy(f->srv);
  pthread_mutex_destroy(&f->mu);
  pthread_cond_destroy(&f->cv);
  pthread_cond_destroy(&f->obs_cv);
  free(f);
}

/* Waits (on events, bounded by 10 s) until the server has released every call. */
static void wait_server_idle(fake_t *f) {
  double until = gt_now_ms() + 10000;
  while (gt_rpc_server_live_calls(f->srv) > 0 && gt_now_ms() < until) {
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
  assert_int_equal(gt_rpc_server_live_calls(f->srv), 0);
}

/* Waits (bounded by 10 s) until the client has freed every stream. */
static void wait_client_idle(ec_client_t *cl) {
  double until = gt_now_ms() + 10000;
  while (gt_rpc_client_live_streams(ec_rpc(cl)) > 0 && gt_now_ms() < until) {
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
  assert_int_equal(gt_rpc_client_live_streams(ec_rpc(cl)), 0);
}

/* Waits until *field (under f->mu) reaches at least v; fails after 10 s. */
static void wait_obs(fake_t *f, const int *field, int v) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_sec += 10;
  pthread_mutex_lock(&f->mu);
  while (*field < v)
    if (pthread_cond_timedwait(&f->obs_cv, &f->mu, &ts) != 0) break;
  int got = *field;
  pthread_mutex_unlock(&f->mu);
  assert_true(got >= v);
}

/* ================================ client side collector ====================================== */

typedef struct collect {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int32_t *ids;
  size_t n_ids, cap;
  char *text;
  size_t text_len;
  int n_msgs, n_finals, after_final, done;
  Gantry__V1__FinishReason reason;
  uint32_t completion_tokens;
  gt_rpc_status_t st;
  ec_stream_t *stream;
  /* slow reader: the first callback blocks until *gate becomes 1 */
  int *gate;
  fake_t *gate_owner;
} collect_t;

static void collect_init(collect_t *c) {
  memset(c, 0, sizeof *c);
  pthread_mutex_init(&c->mu, NULL);
  pthread_cond_init(&c->cv, NULL);
}

static void collect_free(collect_t *c) {
  free(c->ids);
  free(c->text);
  pthread_mutex_destroy(&c->mu);
  pthread_cond_destroy(&c->cv);
}

static void on_resp(void *user, ec_stream_t *s, Gantry__V1__GenerateResponse *r) {
  collect_t *c = user;
  (void)s;
  if (c->gate && c->n_msgs == 0) wait_obs(c->gate_owner, c->gate, 1);
  pthread_mutex_lock(&c->mu);
  c->n_msgs++;
  if (c->n_finals) c->after_final++;
  if (r->kind_case == GANTRY__V1__GENERATE_RESPONSE__KIND_DELTA) {
    Gantry__V1__Delta *d = r->delta;
    if (c->n_ids + d->n_token_ids > c->cap) {
      c->cap = (c->n_ids + d->n_token_ids) * 2;
      c->ids = realloc(c->ids, c->cap * sizeof *c->ids);
    }
    memcpy(c->ids + c->n_ids, d->token_ids, d->n_token_ids * sizeof *c->ids);
    c->n_ids += d->n_token_ids;
    size_t tl = strlen(d->text);
    c->text = realloc(c->text, c->text_len + tl + 1);
    memcpy(c->text + c->text_len, d->text, tl + 1);
    c->text_len += tl;
  } else if (r->kind_case == GANTRY__V1__GENERATE_RESPONSE__KIND_FINAL) {
    c->n_finals++;
    c->reason = r->final->finish_reason;
    c->completion_tokens = r->final->usage ? r->final->usage->completion_tokens : 0;
  }
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
  protobuf_c_message_free_unpacked(&r->base, NULL);
}

static void on_done(void *user, ec_stream_t *s, const gt_rpc_status_t *st) {
  collect_t *c = user;
  (void)s;
  pthread_mutex_lock(&c->mu);
  c->st = *st;
  c->done++;
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
}

/* Waits until the collector saw `msgs` messages (or is done, when msgs < 0); 10 s cap. */
static void collect_wait(collect_t *c, int msgs) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_sec += 10;
  pthread_mutex_lock(&c->mu);
  while (msgs < 0 ? !c->done : c->n_msgs < msgs)
    if (pthread_cond_timedwait(&c->cv, &c->mu, &ts) != 0) break;
  int ok = msgs < 0 ? c->done : c->n_msgs >= msgs;
  pthread_mutex_unlock(&c->mu);
  assert_true(ok);
}

static ec_client_t *client_for(fake_t *f, const gt_rpc_client_opts_t *opts) {
  char target[64];
  snprintf(target, sizeof target, "127.0.0.1:%d", f->port);
  ec_client_t *c = NULL;
  gt_err_t err = {0};
  assert_int_equal(ec_open(target, opts, &c, &err), GT_OK);
  return c;
}

/* Starts Generate with either token input (base id) or a scripted prompt. */
static void start_gen_opts(ec_client_t *cl, collect_t *c, const char *prompt, int base, int n,
                           const ec_call_opts_t *o, const char *request_id) {
  Gantry__V1__GenerateRequest req = GANTRY__V1__GENERATE_REQUEST__INIT;
  Gantry__V1__TokenIds toks = GANTRY__V1__TOKEN_IDS__INIT;
  int32_t ids[1] = {base};
  if (prompt) {
    req.input_case = GANTRY__V1__GENERATE_REQUEST__INPUT_PROMPT;
    req.prompt = (char *)prompt;
  } else {
    toks.ids = ids;
    toks.n_ids = 1;
    req.input_case = GANTRY__V1__GENERATE_REQUEST__INPUT_TOKENS;
    req.tokens = &toks;
  }
  req.max_tokens_opt_case = GANTRY__V1__GENERATE_REQUEST__MAX_TOKENS_OPT_MAX_TOKENS;
  req.max_tokens = (uint32_t)n;
  if (request_id) req.request_id = (char *)request_id;
  gt_err_t err = {0};
  assert_int_equal(ec_generate(cl, &req, o, on_resp, on_done, c, &c->stream, &err), GT_OK);
}

static void start_gen(ec_client_t *cl, collect_t *c, const char *prompt, int base, int n,
                      int64_t timeout_ms, const char *request_id) {
  start_gen_opts(cl, c, prompt, base, n, &(ec_call_opts_t){.timeout_ms = timeout_ms}, request_id);
}

/* Checks a completed scripted stream: ids base..base+n-1 in order, text, final last. */
static void check_stream(collect_t *c, int base, int n) {
  assert_int_equal(c->st.code, GT_RPC_OK);
  assert_int_equal(c->done, 1);
  assert_int_equal(c->n_finals, 1);
  assert_int_equal(c->after_final, 0);
  assert_int_equal(c->reason, GANTRY__V1__FINISH_REASON__FINISH_REASON_LENGTH);
  assert_int_equal(c->completion_tokens, (uint32_t)n);
  assert_int_equal(c->n_ids, (size_t)n);
  for (int i = 0; i < n; i++) assert_int_equal(c->ids[i], base + i);
}

static void check_text(collect_t *c, int base, int n) {
  char *want = malloc((size_t)n * 16 + 1);
  size_t len = 0;
  for (int i = 0; i < n; i++) len += (size_t)sprintf(want + len, "t%d ", base + i);
  assert_string_equal(c->text ? c->text : "", want);
  free(want);
}

/* ================================ tests ====================================================== */

static void test_stream_order(void **state) {
  (void)state;
  fake_t *f = fake_start();
  ec_client_t *cl = client_for(f, NULL);
  collect_t c;
  collect_init(&c);
  start_gen(cl, &c, NULL, 100, 50, 10000, "req-order-1");
  collect_wait(&c, -1);
  check_stream(&c, 100, 50);
  check_text(&c, 100, 50);
  ec_stream_release(c.stream);
  wait_server_idle(f);
  ec_close(cl);
  collect_free(&c);
  fake_stop(f, 1000);
}

static void test_concurrent_32(void **state) {
  (void)state;
  enum { N = 32 };
  fake_t *f = fake_start();
  ec_client_t *cl = client_for(f, NULL);
  collect_t c[N];
  for (int i = 0; i < N; i++) {
    collect_init(&c[i]);
    start_gen(cl, &c[i], NULL, i * 1000, 20 + i, 20000, NULL);
  }
  for (int i = 0; i < N; i++) {
    collect_wait(&c[i], -1);
    check_stream(&c[i], i * 1000, 20 + i);
    check_text(&c[i], i * 1000, 20 + i);
    ec_stream_release(c[i].stream);
    collect_free(&c[i]);
  }
  wait_server_idle(f);
  ec_close(cl);
  fake_stop(f, 1000);
}

/* The client blocks in its first callback until the engine has queued all 2000 deltas
 * (1 MB of text against a 16 KB stream window): the server must merge instead of queueing
 * 2000 sends, and the client still sees every token once, in order. */
static void test_coalescing_slow_reader(void **state) {
  (void)state;
  enum { N = 2000 };
  fake_t *f = fake_start();
  gt_rpc_client_opts_t o = {.own_thread = 1, .flow_window_bytes = 16 * 1024};
  ec_client_t *cl = client_for(f, &o);
  collect_t c;
  collect_init(&c);
  c.gate = &f->burst_sent;
  c.gate_owner = f;
  start_gen(cl, &c, "burst", 0, N, 20000, NULL);
  collect_wait(&c, -1);
  check_stream(&c, 0, N);
  assert_int_equal(c.text_len, (size_t)N * BURST_TEXT);
  for (int i = 0; i < N; i++) { /* each token's text intact and in place */
    char head[16];
    int n = snprintf(head, sizeof head, "t%d ", i);
    assert_memory_equal(c.text + (size_t)i * BURST_TEXT, head, (size_t)n);
    assert_int_equal(c.text[(size_t)i * BURST_TEXT + BURST_TEXT - 1], 'a' + i % 26);
  }
  pthread_mutex_lock(&f->mu);
  gt_rpc_call_stats_t st = f->burst_stats;
  pthread_mutex_unlock(&f->mu);
  print_message("coalescing: deltas=%d client_msgs=%d server_sent=%llu merged=%llu\n", N,
                c.n_msgs, (unsigned long long)st.sent_msgs, (unsigned long long)st.merged_msgs);
  assert_true(st.merged_msgs > 0);
  assert_true(c.n_msgs < N);
  /* stats were taken after the last delta was queued: no merge can follow (Final never
   * merges), so the client saw exactly N - merged deltas plus the Final */
  assert_int_equal((uint64_t)c.n_msgs, (uint64_t)N - st.merged_msgs + 1);
  ec_stream_release(c.stream);
  wait_server_idle(f);
  ec_close(cl);
  collect_free(&c);
  fake_stop(f, 1000);
}

static void test_client_cancel(void **state) {
  (void)state;
  fake_t *f = fake_start();
  ec_client_t *cl = client_for(f, NULL);
  collect_t c;
  collect_init(&c);
  start_gen(cl, &c, "slow", 0, 1000000, 0, NULL);
  collect_wait(&c, 3);
  ec_stream_cancel(c.stream);
  collect_wait(&c, -1);
  assert_int_equal(c.st.code, GT_RPC_CANCELLED);
  assert_int_equal(c.n_finals, 0);
  wait_obs(f, &f->cancel_cbs, 1);
  wait_obs(f, &f->cancelled_released, 1);
  wait_server_idle(f);
  pthread_mutex_lock(&f->mu);
  assert_int_equal(f->deadline_cbs, 0);
  pthread_mutex_unlock(&f->mu);
  ec_stream_release(c.stream);
  ec_close(cl);
  collect_free(&c);
  fake_stop(f, 1000);
}

static void test_deadline(void **state) {
  (void)state;
  fake_t *f = fake_start();
  ec_client_t *cl = client_for(f, NULL);
  collect_t c;
  collect_init(&c);
  double t0 = gt_now_ms();
  start_gen(cl, &c, "slow", 0, 1000000, 200, NULL);
  collect_wait(&c, -1);
  double dt = gt_now_ms() - t0;
  assert_int_equal(c.st.code, GT_RPC_DEADLINE_EXCEEDED);
  assert_true(c.n_msgs > 0);
  assert_true(dt >= 150); /* not before the deadline */
  wait_obs(f, &f->cancel_cbs, 1);
  wait_obs(f, &f->deadline_cbs, 1);
  wait_obs(f, &f->cancelled_released, 1);
  wait_server_idle(f);
  ec_stream_release(c.stream);
  ec_close(cl);
  collect_free(&c);
  fake_stop(f, 1000);
}

/* A manual-read stream paused after its first message, with more buffered behind it, whose
 * deadline passes: on_done comes with DEADLINE_EXCEEDED though the reader never reads again, no
 * message follows the first, and the stream is freed (ASan: nothing leaks). */
static void test_manual_read_paused_deadline(void **state) {
  (void)state;
  fake_t *f = fake_start();
  ec_client_t *cl = client_for(f, NULL);
  collect_t c;
  collect_init(&c);
  /* "slow": one delta per 5 ms, dozens are buffered by the deadline */
  start_gen_opts(cl, &c, "slow", 0, 1000000, &(ec_call_opts_t){.timeout_ms = 300, .manual_read = true}, NULL);
  collect_wait(&c, -1); /* never read_next: the failure alone ends it */
  assert_int_equal(c.st.code, GT_RPC_DEADLINE_EXCEEDED);
  assert_int_equal(c.done, 1);
  assert_int_equal(c.n_msgs, 1);
  wait_obs(f, &f->cancelled_released, 1);
  wait_server_idle(f);
  ec_stream_release(c.stream);
  wait_client_idle(cl); /* on_done runs before the queue drops its reference */
  ec_close(cl);
  collect_free(&c);
  fake_stop(f, 1000);
}

static void test_unary(void **state) {
  (void)state;
  fake_t *f = fake_start();
  ec_client_t *cl = client_for(f, NULL);
  gt_rpc_status_t st;
  ec_call_opts_t o = {.timeout_ms = 5000, .request_id = "rid-42"};

  Gantry__V1__InfoResponse *info = NULL;
  assert_int_equal(ec_info(cl, &o, &info, &st), GT_RPC_OK);
  assert_non_null(info);
  assert_string_equal(info->model_name, "fake-model");
  assert_string_equal(info->architecture, "qwen3");
  assert_int_equal(info->context_length, 4096);
  assert_int_equal(info->kv_capacity_tokens, 65536);
  assert_int_equal(info->n_weight_types, 1);
  assert_string_equal(info->weight_types[0], "Q4_K");
  protobuf_c_message_free_unpacked(&info->base, NULL);
  pthread_mutex_lock(&f->mu);
  assert_string_equal(f->last_request_id, "rid-42");
  pthread_mutex_unlock(&f->mu);

  Gantry__V1__HealthResponse *h = NULL;
  assert_int_equal(ec_health(cl, &o, &h, &st), GT_RPC_OK);
  assert_int_equal(h->status, GANTRY__V1__HEALTH_RESPONSE__STATUS__STATUS_READY);
  assert_int_equal(h->running, 2);
  protobuf_c_message_free_unpacked(&h->base, NULL);

  Gantry__V1__TokenizeRequest tr = GANTRY__V1__TOKENIZE_REQUEST__INIT;
  tr.input_case = GANTRY__V1__TOKENIZE_REQUEST__INPUT_TEXT;
  tr.text = "hey";
  Gantry__V1__TokenizeResponse *t = NULL;
  assert_int_equal(ec_tokenize(cl, &tr, &o, &t, &st), GT_RPC_OK);
  assert_int_equal(t->count, 3);
  assert_int_equal(t->n_ids, 3);
  assert_int_equal(t->ids[0], 'h');
  assert_int_equal(t->ids[2], 'y');
  protobuf_c_message_free_unpacked(&t->base, NULL);

  wait_server_idle(f);
  ec_close(cl);
  fake_stop(f, 1000);
}

static void test_error_statuses(void **state) {
  (void)state;
  fake_t *f = fake_start();
  ec_client_t *cl = client_for(f, NULL);
  gt_rpc_status_t st;

  /* unary handler error with a message */
  Gantry__V1__TokenizeRequest tr = GANTRY__V1__TOKENIZE_REQUEST__INIT;
  tr.input_case = GANTRY__V1__TOKENIZE_REQUEST__INPUT_TEXT;
  tr.text = "fail";
  Gantry__V1__TokenizeResponse *t = (void *)&tr; /* must be reset to NULL */
  assert_int_equal(ec_tokenize(cl, &tr, NULL, &t, &st), GT_RPC_INVALID_ARGUMENT);
  assert_null(t);
  assert_string_equal(st.message, "tokenize: cannot tokenize this input");

  /* streaming call refused before any message */
  collect_t c;
  collect_init(&c);
  start_gen(cl, &c, "error", 0, 5, 5000, NULL);
  collect_wait(&c, -1);
  assert_int_equal(c.st.code, GT_RPC_RESOURCE_EXHAUSTED);
  assert_string_equal(c.st.message, "queue full: 8 waiting");
  assert_int_equal(c.n_msgs, 0);
  ec_stream_release(c.stream);
  collect_free(&c);

  /* metadata check in the handler: request_id vs x-request-id */
  collect_init(&c);
  Gantry__V1__GenerateRequest req = GANTRY__V1__GENERATE_REQUEST__INIT;
  req.input_case = GANTRY__V1__GENERATE_REQUEST__INPUT_PROMPT;
  req.prompt = "x";
  req.request_id = "abc";
  ec_call_opts_t o = {.timeout_ms = 5000, .request_id = "other"};
  gt_err_t err = {0};
  assert_int_equal(ec_generate(cl, &req, &o, on_resp, on_done, &c, &c.stream, &err), GT_OK);
  collect_wait(&c, -1);
  assert_int_equal(c.st.code, GT_RPC_INVALID_ARGUMENT);
  assert_string_equal(c.st.message, "x-request-id does not match request_id");
  ec_stream_release(c.stream);
  collect_free(&c);

  /* bytes that are not a GenerateRequest (field 5 as a varint) -> INVALID_ARGUMENT by glue */
  Gantry__V1__InfoResponse bogus = GANTRY__V1__INFO_RESPONSE__INIT;
  bogus.kv_capacity_tokens = 7;
  ProtobufCMessage *resp = NULL;
  assert_int_equal(gt_rpc_client_unary(ec_rpc(cl), EC_METHOD_GENERATE, &bogus.base,
                                       &gantry__v1__generate_response__descriptor, 5000, NULL, 0,
                                       &resp, &st),
                   GT_RPC_INVALID_ARGUMENT);
  assert_null(resp);

  /* unknown method */
  Gantry__V1__InfoRequest ir = GANTRY__V1__INFO_REQUEST__INIT;
  assert_int_equal(gt_rpc_client_unary(ec_rpc(cl), "/gantry.v1.Engine/Nope", &ir.base,
                                       &gantry__v1__info_response__descriptor, 5000, NULL, 0,
                                       &resp, &st),
                   GT_RPC_UNIMPLEMENTED);
  wait_server_idle(f);
  ec_close(cl);
  int port = f->port;
  fake_stop(f, 1000);

  /* nobody listening any more -> UNAVAILABLE (or DEADLINE_EXCEEDED while reconnecting) */
  char target[64];
  snprintf(target, sizeof target, "127.0.0.1:%d", port);
  assert_int_equal(ec_open(target, NULL, &cl, &err), GT_OK);
  Gantry__V1__HealthResponse *h = NULL;
  ec_call_opts_t o2 = {.timeout_ms = 3000};
  gt_rpc_code_t code = ec_health(cl, &o2, &h, &st);
  assert_null(h);
  assert_true(code == GT_RPC_UNAVAILABLE || code == GT_RPC_DEADLINE_EXCEEDED);
  ec_close(cl);

  assert_int_equal(gt_rpc_code_from_err(GT_EBUSY), GT_RPC_RESOURCE_EXHAUSTED);
  assert_int_equal(gt_rpc_code_from_err(GT_EINVAL), GT_RPC_INVALID_ARGUMENT);
  assert_int_equal(gt_rpc_code_from_err(GT_EINTERNAL), GT_RPC_INTERNAL);
  assert_int_equal(gt_rpc_code_from_err(GT_ECANCELLED), GT_RPC_CANCELLED);
  assert_int_equal(gt_rpc_code_from_err(GT_EIO), GT_RPC_UNAVAILABLE);
  assert_string_equal(gt_rpc_code_name(GT_RPC_DEADLINE_EXCEEDED), "DEADLINE_EXCEEDED");
}

/* Shutdown with streams in flight: short streams finish within the grace period with their
 * Final; endless ones are cancelled after it, and every call is released. */
static void test_shutdown_in_flight(void **state) {
  (void)state;
  enum { SHORT = 4, LONG = 4 };
  fake_t *f = fake_start();
  ec_client_t *cl = client_for(f, NULL);
  collect_t c[SHORT + LONG];
  for (int i = 0; i < SHORT + LONG; i++) {
    collect_init(&c[i]);
    /* "slow" emits every 5 ms: 40 tokens take ~200 ms, 1e6 tokens never end */
    start_gen(cl, &c[i], "slow", 0, i < SHORT ? 40 : 1000000, 0, NULL);
  }
  for (int i = 0; i < SHORT + LONG; i++) collect_wait(&c[i], 1);
  double t0 = gt_now_ms();
  gt_rpc_server_shutdown(f->srv, 1500);
  double dt = gt_now_ms() - t0;
  assert_int_equal(gt_rpc_server_live_calls(f->srv), 0);
  for (int i = 0; i < SHORT + LONG; i++) {
    collect_wait(&c[i], -1);
    if (i < SHORT) {
      check_stream(&c[i], 0, 40);
    } else {
      assert_int_equal(c[i].n_finals, 0);
      assert_true(c[i].st.code != GT_RPC_OK);
    }
    ec_stream_release(c[i].stream);
    collect_free(&c[i]);
  }
  print_message("shutdown: took %.0f ms (grace 1500)\n", dt);
  assert_true(dt >= 1000); /* the long streams held it until the grace ran out */
  wait_obs(f, &f->cancelled_released, LONG);
  ec_close(cl);
  fake_stop(f, 0);
}

/* A client driven by the caller's own thread (own_thread = 0, gt_rpc_client_poll). */
static void test_poll_mode(void **state) {
  (void)state;
  enum { N = 4 };
  fake_t *f = fake_start();
  gt_rpc_client_opts_t o = {.own_thread = 0};
  ec_client_t *cl = client_for(f, &o);
  collect_t c[N];
  for (int i = 0; i < N; i++) {
    collect_init(&c[i]);
    start_gen(cl, &c[i], NULL, 7 + i, 30, 10000, NULL);
  }
  double until = gt_now_ms() + 10000;
  for (;;) {
    int done = 0;
    for (int i = 0; i < N; i++) done += c[i].done; /* callbacks run on this thread */
    if (done == N || gt_now_ms() > until) break;
    gt_rpc_client_poll(ec_rpc(cl), 100);
  }
  for (int i = 0; i < N; i++) {
    check_stream(&c[i], 7 + i, 30);
    ec_stream_release(c[i].stream);
    collect_free(&c[i]);
  }
  assert_int_equal(gt_rpc_client_live_streams(ec_rpc(cl)), 0);
  wait_server_idle(f);
  ec_close(cl);
  fake_stop(f, 1000);
}

/* Destroying a client with open streams cancels them; the server releases its calls. */
static void test_client_destroy_with_open_streams(void **state) {
  (void)state;
  fake_t *f = fake_start();
  ec_client_t *cl = client_for(f, NULL);
  collect_t c[2];
  for (int i = 0; i < 2; i++) {
    collect_init(&c[i]);
    start_gen(cl, &c[i], "slow", 0, 1000000, 0, NULL);
    collect_wait(&c[i], 1);
  }
  ec_stream_release(c[0].stream); /* one released by the app, one still held */
  ec_close(cl);
  for (int i = 0; i < 2; i++) {
    assert_int_equal(c[i].done, 1);
    assert_int_equal(c[i].st.code, GT_RPC_CANCELLED);
    collect_free(&c[i]);
  }
  wait_obs(f, &f->cancelled_released, 2);
  wait_server_idle(f);
  fake_stop(f, 1000);
}

/* Server lifecycle edges: destroy without start, a port that cannot be bound. */
static void test_server_lifecycle(void **state) {
  (void)state;
  gt_err_t err = {0};
  gt_rpc_server_t *s = NULL;
  assert_int_equal(gt_rpc_server_create(NULL, &s, &err), GT_OK);
  gt_rpc_server_destroy(s); /* never started */

  fake_t *f = fake_start(); /* holds a port */
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", f->port);
  assert_int_equal(gt_rpc_server_create(NULL, &s, &err), GT_OK);
  gt_rpc_method_t m = {EC_METHOD_HEALTH, GT_RPC_UNARY, &gantry__v1__health_request__descriptor,
                       health_handler, NULL, NULL, NULL};
  assert_int_equal(gt_rpc_server_add_method(s, &m, &err), GT_OK);
  gt_rpc_method_t bad = {0};
  assert_int_equal(gt_rpc_server_add_method(s, &bad, &err), GT_EINVAL);
  assert_int_equal(gt_rpc_server_start(s, addr, NULL, &err), GT_EIO);
  assert_non_null(strstr(err.msg, addr));
  gt_rpc_server_destroy(s);
  fake_stop(f, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_stream_order),
      cmocka_unit_test(test_concurrent_32),
      cmocka_unit_test(test_coalescing_slow_reader),
      cmocka_unit_test(test_client_cancel),
      cmocka_unit_test(test_deadline),
      cmocka_unit_test(test_manual_read_paused_deadline),
      cmocka_unit_test(test_unary),
      cmocka_unit_test(test_error_statuses),
      cmocka_unit_test(test_shutdown_in_flight),
      cmocka_unit_test(test_poll_mode),
      cmocka_unit_test(test_client_destroy_with_open_streams),
      cmocka_unit_test(test_server_lifecycle),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
