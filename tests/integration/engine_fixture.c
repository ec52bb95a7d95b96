/* tests/integration/engine_fixture.c — see engine_fixture.h. */
#include "tests/integration/engine_fixture.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "tests/common/testutil.h"

int efx_connect(efx_t *f, int port, gt_err_t *err) {
  char target[64];
  snprintf(target, sizeof target, "127.0.0.1:%d", port);
  return ec_open(target, NULL, &f->ec, err);
}

int efx_serve(efx_t *f, const sched_config_t *cfg, void (*on_fatal)(void *ud, const char *why), gt_err_t *err) {
  int rc = tok_load(f->g, &f->tok, err);
  if (!rc && !(f->reg = gt_metrics_create())) rc = gt_err_set(err, GT_ENOMEM, "out of memory");
  if (!rc)
    rc = srv_create(&(srv_opts_t){.listen = "127.0.0.1:0", .metrics = f->reg, .on_fatal = on_fatal}, &f->srv,
                    &f->port, err);
  if (!rc) rc = srv_attach(f->srv, f->g, f->m, f->tok, cfg, &(srv_model_info_t){.model_name = "tiny", .version = "test"}, err);
  if (!rc) rc = efx_connect(f, f->port, err);
  return rc;
}

int efx_start(efx_t *f, const char *model_rel, const sched_config_t *cfg) {
  memset(f, 0, sizeof *f);
  gt_err_t err = {0};
  int rc = gguf_open(tu_golden(model_rel), &f->g, &err);
  int max_batch = cfg && cfg->max_batch_tokens > 0 ? cfg->max_batch_tokens : 512;
  if (!rc) rc = be_cpu_create(1, &f->be, &err);
  if (!rc) rc = model_load(f->g, f->be, max_batch, &f->m, &err);
  if (!rc) rc = efx_serve(f, cfg, NULL, &err);
  if (rc) {
    fprintf(stderr, "efx_start(%s): %s\n", model_rel, err.msg);
    efx_stop(f);
  }
  return rc;
}

void efx_stop(efx_t *f) {
  ec_close(f->ec);
  srv_free(f->srv, 2000); /* returns as soon as every call is released */
  tok_free(f->tok);
  model_free(f->m);
  be_destroy(f->be);
  gguf_close(f->g);
  gt_metrics_free(f->reg);
  memset(f, 0, sizeof *f);
}

void coll_init(coll_t *c) {
  memset(c, 0, sizeof *c);
  pthread_mutex_init(&c->mu, NULL);
  pthread_cond_init(&c->cv, NULL);
}

void coll_destroy(coll_t *c) {
  if (c->s) ec_stream_release(c->s);
  c->s = NULL;
  pthread_mutex_destroy(&c->mu);
  pthread_cond_destroy(&c->cv);
}

static void append(char *dst, size_t *len, size_t cap, const char *src) {
  size_t n = strlen(src);
  if (*len + n >= cap) n = cap - 1 - *len;
  memcpy(dst + *len, src, n);
  *len += n;
  dst[*len] = 0;
}

static void on_resp(void *user, ec_stream_t *s, Gantry__V1__GenerateResponse *r) {
  coll_t *c = user;
  int cancel = 0;
  pthread_mutex_lock(&c->mu);
  c->n_msgs++;
  if (r->kind_case == GANTRY__V1__GENERATE_RESPONSE__KIND_DELTA) {
    const Gantry__V1__Delta *d = r->delta;
    if (c->got_final) c->delta_after_final = 1;
    for (size_t i = 0; i < d->n_token_ids && c->n_ids < (int)(sizeof c->ids / sizeof *c->ids); i++) c->ids[c->n_ids++] = d->token_ids[i];
    append(c->text, &c->text_len, sizeof c->text, d->text);
    append(c->reasoning, &c->reasoning_len, sizeof c->reasoning, d->reasoning_text);
    c->n_logprobs += (int)d->n_logprobs;
    for (size_t i = 0; i < d->n_tool_calls; i++) {
      c->n_tool_deltas++;
      if (d->tool_calls[i]->name[0]) snprintf(c->tool_name, sizeof c->tool_name, "%s", d->tool_calls[i]->name);
      size_t l = strlen(c->tool_args);
      append(c->tool_args, &l, sizeof c->tool_args, d->tool_calls[i]->arguments);
    }
    if (c->cancel_after > 0 && c->n_ids >= c->cancel_after) {
      c->cancel_after = 0;
      cancel = 1;
    }
  } else if (r->kind_case == GANTRY__V1__GENERATE_RESPONSE__KIND_FINAL) {
    c->got_final = 1;
    c->finish = r->final->finish_reason;
    if (r->final->usage) c->usage = *r->final->usage;
    if (r->final->timings) c->timings = *r->final->timings;
    snprintf(c->error, sizeof c->error, "%s", r->final->error);
  }
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
  protobuf_c_message_free_unpacked(&r->base, NULL);
  if (cancel) ec_stream_cancel(s);
}

static void on_done(void *user, ec_stream_t *s, const gt_rpc_status_t *st) {
  coll_t *c = user;
  (void)s;
  pthread_mutex_lock(&c->mu);
  c->st = *st;
  c->done = 1;
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
}

int coll_start(efx_t *f, coll_t *c, const Gantry__V1__GenerateRequest *req, int64_t timeout_ms) {
  gt_err_t err = {0};
  int rc = ec_generate(f->ec, req, &(ec_call_opts_t){.timeout_ms = timeout_ms}, on_resp, on_done, c, &c->s, &err);
  if (rc) fprintf(stderr, "ec_generate: %s\n", err.msg);
  return rc;
}

int coll_run_tokens(efx_t *f, coll_t *c, const int32_t *ids, int n, int max_tokens, int64_t timeout_ms) {
  reqb_t b;
  reqb_tokens(&b, ids, n, max_tokens);
  coll_init(c);
  if (coll_start(f, c, &b.req, timeout_ms)) return -1;
  return coll_wait_done(c, timeout_ms) ? 0 : -1;
}

static void deadline_ts(struct timespec *ts, int64_t ms) {
  clock_gettime(CLOCK_REALTIME, ts);
  ts->tv_sec += ms / 1000;
  ts->tv_nsec += (ms % 1000) * 1000000L;
  if (ts->tv_nsec >= 1000000000L) ts->tv_sec++, ts->tv_nsec -= 1000000000L;
}

int coll_wait_done(coll_t *c, int64_t timeout_ms) {
  struct timespec ts;
  deadline_ts(&ts, timeout_ms);
  pthread_mutex_lock(&c->mu);
  while (!c->done && pthread_cond_timedwait(&c->cv, &c->mu, &ts) == 0) {
  }
  int d = c->done;
  pthread_mutex_unlock(&c->mu);
  return d;
}

int coll_wait_tokens(coll_t *c, int n, int64_t timeout_ms) {
  struct timespec ts;
  deadline_ts(&ts, timeout_ms);
  pthread_mutex_lock(&c->mu);
  while (!c->done && c->n_ids < n && pthread_cond_timedwait(&c->cv, &c->mu, &ts) == 0) {
  }
  int k = c->n_ids;
  pthread_mutex_unlock(&c->mu);
  return k;
}

int coll_tokens(coll_t *c) {
  pthread_mutex_lock(&c->mu);
  int k = c->n_ids;
  pthread_mutex_unlock(&c->mu);
  return k;
}

static void reqb_base(reqb_t *b, int max_tokens) {
  memset(b, 0, sizeof *b);
  gantry__v1__generate_request__init(&b->req);
  gantry__v1__sampling_params__init(&b->sp);
  b->sp.temperature_opt_case = GANTRY__V1__SAMPLING_PARAMS__TEMPERATURE_OPT_TEMPERATURE;
  b->sp.temperature = 0;
  b->req.sampling = &b->sp;
  if (max_tokens > 0) {
    b->req.max_tokens_opt_case = GANTRY__V1__GENERATE_REQUEST__MAX_TOKENS_OPT_MAX_TOKENS;
    b->req.max_tokens = (uint32_t)max_tokens;
  }
}

void reqb_tokens(reqb_t *b, const int32_t *ids, int n, int max_tokens) {
  reqb_base(b, max_tokens);
  gantry__v1__token_ids__init(&b->toks);
  if (n > (int)(sizeof b->ids / sizeof *b->ids)) n = (int)(sizeof b->ids / sizeof *b->ids);
  memcpy(b->ids, ids, sizeof(int32_t) * (size_t)n);
  b->toks.ids = b->ids;
  b->toks.n_ids = (size_t)n;
  b->req.input_case = GANTRY__V1__GENERATE_REQUEST__INPUT_TOKENS;
  b->req.tokens = &b->toks;
  b->req.ignore_eos = 1;
}

void reqb_prompt(reqb_t *b, const char *text, int max_tokens) {
  reqb_base(b, max_tokens);
  b->req.input_case = GANTRY__V1__GENERATE_REQUEST__INPUT_PROMPT;
  b->req.prompt = (char *)text;
}

void reqb_chat(reqb_t *b, const char *user, int max_tokens) {
  reqb_base(b, max_tokens);
  gantry__v1__chat_input__init(&b->chat);
  gantry__v1__chat_message__init(&b->msg[0]);
  b->msg[0].role = "user";
  b->msg[0].content = (char *)user;
  b->msgp[0] = &b->msg[0];
  b->chat.messages = b->msgp;
  b->chat.n_messages = 1;
  b->req.input_case = GANTRY__V1__GENERATE_REQUEST__INPUT_CHAT;
  b->req.chat = &b->chat;
}

int efx_wait_quiet(efx_t *f, int kv_used_max, int64_t timeout_ms) {
  double end = gt_now_ms() + (double)timeout_ms;
  for (;;) {
    sched_stats_t st;
    srv_stats(f->srv, &st);
    if (st.running == 0 && st.waiting == 0 && st.kv_used <= kv_used_max && srv_live(f->srv) == 0) return 1;
    if (gt_now_ms() > end) {
      fprintf(stderr, "not quiet: running=%d waiting=%d kv_used=%d live=%d\n", st.running, st.waiting, st.kv_used,
              srv_live(f->srv));
      return 0;
    }
    /* the scheduler publishes stats after each step; the wait is bounded by the loop above */
    srv_wait_idle(f->srv, 20);
    struct timespec ts = {0, 2000000};
    nanosleep(&ts, NULL);
  }
}

char *efx_http_get(int port, const char *path) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a)) {
    if (fd >= 0) close(fd);
    return NULL;
  }
  char req[256];
  int n = snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: localhost\r\n\r\n", path);
  if (write(fd, req, (size_t)n) != n) {
    close(fd);
    return NULL;
  }
  size_t cap = 1 << 16, len = 0;
  char *buf = malloc(cap);
  for (;;) {
    if (len + 4096 > cap) buf = realloc(buf, cap *= 2);
    ssize_t k = read(fd, buf + len, cap - len - 1);
    if (k <= 0) break;
    len += (size_t)k;
  }
  close(fd);
  buf[len] = 0;
  return buf;
}
