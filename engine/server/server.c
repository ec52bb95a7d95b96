/* engine/server/server.c — see server.h. Calls, lifecycle and the scheduler thread. */
#include "engine/server/server.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/engine_rpc.h"
#include "common/grpc_server.h"
#include "common/log.h"
#include "common/strbuf.h"
#include "engine/chat/prompt.h"
#include "engine/models/tp.h"
#include "engine/models/embed.h"
#include "engine/server/server_convert.h"
#include "engine/server/server_embed.h"
#include "engine/server/server_metrics.h"
#include "grpc/health/v1/health.pb-c.h"

#define SRV_MAX_PROMPTS 64 /* prompts in one Generate call (more_prompts / more_tokens + 1) */
/* SRV_FAILED in words: the status of the calls it ends or refuses, and the log line */
#define SRV_FAILED_WHY "the engine failed (a tensor-parallel rank failed)"

struct live;
/* One prompt of a call: the scheduler request's ud (its choices' indexes start at base). */
typedef struct live_sub {
  struct live *l;
  int base;
} live_sub_t;

/* One Generate call handed to the scheduler. Lives from the handler until the final event of
 * its last choice. n_choices, n_finals, failed and the sched ids are guarded by srv.mu. */
typedef struct live {
  struct srv *srv;
  gt_rpc_call_t *call;
  uint64_t call_id;
  int64_t sched_id[SRV_MAX_PROMPTS]; /* 0 until sched_submit returned */
  live_sub_t sub[SRV_MAX_PROMPTS];
  int n_sub;
  atomic_int failed;     /* a later prompt was refused: the others were cancelled, nothing more is sent
                          * (set under srv.mu; deltas read it without the lock) */
  int fail_rc;           /* the refusal (GT_E*), finished through reject() */
  char fail_msg[sizeof(((gt_err_t *)0)->msg)];
  char fail_param[sizeof(((gt_err_t *)0)->param)];
  double t_arrival, t_last;
  int n_out;
  int n_choices, n_finals; /* GenerateRequest.n (at least 1); the call ends with the last final */
  char rid[64];
  struct live *prev, *next;
} live_t;

struct srv {
  gt_rpc_server_t *rpc;
  srv_metrics_t met;
  /* set by srv_attach */
  sched_t *sched;
  const tok_t *tok;
  model_t *model;
  int have_fam;
  chat_family_t fam;
  char fam_reason[sizeof(((gt_err_t *)0)->msg)];
  char *model_name, *arch, *version;
  char **wtypes;
  int n_wtypes;
  int n_ctx;
  size_t max_tok_bytes;   /* longest token text: prompts longer than n_ctx * this cannot fit */
  pthread_t th;
  int th_started;
  /* shared */
  pthread_mutex_t mu;
  pthread_cond_t cv;      /* kicks for the scheduler thread; idle waits */
  srv_state_t state;
  live_t *live;           /* list of live requests */
  int n_live;
  uint64_t kicks;
  int stop;
  uint64_t seed_counter;
  void (*on_fatal)(void *ud, const char *why);
  void *fatal_ud;
  /* Generate calls waiting for the prep thread (validation, rendering, tokenization, submit),
   * so that long prompts never hold up the completion-queue thread */
  struct prep *prep_head, *prep_tail;
  int n_prep;             /* queued or being prepared */
  int prep_stop;
  pthread_cond_t prep_cv;
  pthread_t prep_th;
  int prep_started;
  /* scheduler thread only */
  int iter_tokens;
  srv_embed_ctx_t emb;    /* the Embed RPC's view (set by srv_attach; is_embed: sched cfg.embed) */
  srv_embed_live_t emb_live; /* Embed calls in progress (srv_embed_cancel) */
};

typedef struct prep {
  gt_rpc_call_t *call;
  double t_arrival;
  struct prep *next;
} prep_t;

static live_t *find_live(srv_t *s, uint64_t call_id) {
  for (live_t *l = s->live; l; l = l->next)
    if (l->call_id == call_id) return l;
  return NULL;
}

static void unlink_live(srv_t *s, live_t *l) {
  if (l->prev) l->prev->next = l->next; else s->live = l->next;
  if (l->next) l->next->prev = l->prev;
  l->prev = l->next = NULL;
  s->n_live--;
  pthread_cond_broadcast(&s->cv);
}

static void reject(srv_t *s, gt_rpc_call_t *call, const char *rid, int rc, const char *msg, const char *param);

/* ---- scheduler events (scheduler thread) ---- */

static void on_event(void *ud, const sched_event_t *ev) {
  live_sub_t *sub = ud;
  live_t *l = sub->l;
  srv_t *s = l->srv;
  const int index = sub->base + ev->index;
  double t = gt_now_ms();
  int failed, last = 0;
  if (ev->is_final) { /* n_finals and n_choices under the lock: prepare() may shrink n_choices */
    pthread_mutex_lock(&s->mu);
    failed = atomic_load(&l->failed);
    last = ++l->n_finals >= l->n_choices;
    pthread_mutex_unlock(&s->mu);
  } else { /* per token: no lock */
    failed = atomic_load_explicit(&l->failed, memory_order_relaxed);
  }
  if (failed && !last) return;
  if (!ev->is_final) {
    const seqout_delta_t *d = ev->delta;
    if (d->n_ids > 0) {
      if (l->n_out == 0) {
        gt_metric_observe(s->met.ttft, (t - l->t_arrival) / 1e3);
      } else {
        double itl = (t - l->t_last) / 1e3 / d->n_ids;
        for (int i = 0; i < d->n_ids; i++) gt_metric_observe(s->met.itl, itl);
      }
      l->n_out += d->n_ids;
      l->t_last = t;
      s->iter_tokens += d->n_ids;
      gt_metric_inc(s->met.gen_tokens, d->n_ids);
    }
    gt_genresp_t *r = srv_conv_delta(d, s->tok);
    if (r) r->delta->index = (uint32_t)index;
    if (r) gt_rpc_call_send(l->call, &r->base, 0);
    return;
  }
  const sched_usage_t *u = ev->usage;
  if (!last) { /* n > 1 or a prompt list: this choice's final; the call goes on */
    gt_genresp_t *r = gt_rpc_call_is_cancelled(l->call) ? NULL : srv_conv_final(ev->finish, ev->error, u);
    if (r) r->final->index = (uint32_t)index;
    if (r) gt_rpc_call_send(l->call, &r->base, GT_RPC_SEND_NO_MERGE);
    return;
  }
  if (failed) { /* a refused call: counted and finished as one, like a refusal before any submit */
    reject(s, l->call, l->rid, l->fail_rc, l->fail_msg, l->fail_param);
  } else {
    srv_metrics_finished(&s->met, ev->finish, u, (t - l->t_arrival) / 1e3);
    GT_LOG_INFO("request_id=%s finish=%s prompt_tokens=%d completion_tokens=%d cached_tokens=%d ttft_ms=%.1f e2e_ms=%.1f",
                l->rid, srv_finish_name(ev->finish), u ? u->prompt_tokens : 0, u ? u->completion_tokens : 0,
                u ? u->cached_tokens : 0, u ? u->ttft_ms : 0.0, t - l->t_arrival);
    if (gt_rpc_call_is_cancelled(l->call)) {
      gt_rpc_call_finish(l->call, GT_RPC_CANCELLED, "cancelled");
    } else if (ev->finish == SCHED_FINISH_ERROR && s->model->tp && tp_failed(s->model->tp)) {
      /* the engine cannot go on (this thread runs the group): a status, not a final, so that
       * the caller sees the engine is gone rather than one request failing */
      char msg[600];
      snprintf(msg, sizeof msg, SRV_FAILED_WHY "%s%s", ev->error ? ": " : "", ev->error ? ev->error : "");
      gt_rpc_call_finish(l->call, GT_RPC_UNAVAILABLE, msg);
    } else {
      gt_genresp_t *r = srv_conv_final(ev->finish, ev->error, u);
      if (r) r->final->index = (uint32_t)index;
      if (r) gt_rpc_call_send(l->call, &r->base, GT_RPC_SEND_NO_MERGE);
      gt_rpc_call_finish(l->call, r ? GT_RPC_OK : GT_RPC_INTERNAL, r ? NULL : "out of memory building the final message");
    }
  }
  /* unlinked only now, so "idle" (srv_wait_idle) means every call has been finished; an
   * on_cancel racing with this finds sched_id of a request the scheduler no longer knows,
   * which sched_cancel ignores */
  pthread_mutex_lock(&s->mu);
  unlink_live(s, l);
  pthread_mutex_unlock(&s->mu);
  free(l);
}

static void *sched_main(void *arg) {
  srv_t *s = arg;
  uint64_t seen = 0;
  for (;;) {
    pthread_mutex_lock(&s->mu);
    int stop = s->stop;
    seen = s->kicks;
    pthread_mutex_unlock(&s->mu);
    if (stop) break;
    gt_err_t err = {0};
    s->iter_tokens = 0;
    int rc = sched_step(s->sched, &err);
    if (rc < 0) GT_LOG_ERROR("scheduler step failed: %s", err.msg);
    if (rc < 0 && s->model->tp && tp_failed(s->model->tp)) {
      /* the group refuses every later step: stop serving (the step's requests ended with ERROR).
       * The loop goes on: the requests still waiting, and any the prep thread submits before it
       * sees FAILED, fail on their first step, so every call is finished. */
      pthread_mutex_lock(&s->mu);
      const int first = s->state != SRV_FAILED;
      s->state = SRV_FAILED;
      pthread_mutex_unlock(&s->mu);
      if (first) {
        GT_LOG_ERROR(SRV_FAILED_WHY "; not serving any more");
        if (s->on_fatal) s->on_fatal(s->fatal_ud, err.msg);
      }
    }
    if (rc > 0) {
      if (s->iter_tokens > 0) gt_metric_observe(s->met.iter_tokens, s->iter_tokens);
      continue;
    }
    /* idle (or blocked): wait for a submit / cancel, with a bounded wait as a safety net */
    pthread_mutex_lock(&s->mu);
    if (!s->stop && s->kicks == seen) {
      struct timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      ts.tv_nsec += 50 * 1000000L;
      if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
      pthread_cond_timedwait(&s->cv, &s->mu, &ts);
    }
    pthread_mutex_unlock(&s->mu);
  }
  return NULL;
}

/* ---- handlers (completion-queue thread) ---- */

static srv_state_t get_state(srv_t *s) {
  pthread_mutex_lock(&s->mu);
  srv_state_t st = s->state;
  pthread_mutex_unlock(&s->mu);
  return st;
}

/* Generate handler (cq thread): refuses at once when not READY, else queues the call for the
 * prep thread. */
static void on_generate(void *user, gt_rpc_call_t *call) {
  srv_t *s = user;
  double t_arrival = gt_now_ms();
  srv_state_t st = get_state(s);
  if (st != SRV_READY) {
    gt_metric_inc(s->met.rejected_unavailable, 1);
    gt_rpc_call_finish(call, GT_RPC_UNAVAILABLE, st == SRV_LOADING  ? "the engine is loading its model"
                                                 : st == SRV_FAILED ? SRV_FAILED_WHY
                                                                    : "the engine is draining");
    return;
  }
  if (s->emb.is_embed) {
    char msg[256];
    snprintf(msg, sizeof msg, "model '%s' is an embedding model (serve --task embed): it serves Embed, not Generate",
             s->model_name);
    gt_rpc_call_finish(call, GT_RPC_FAILED_PRECONDITION, msg);
    return;
  }
  prep_t *p = malloc(sizeof *p);
  if (!p) {
    gt_rpc_call_finish(call, GT_RPC_INTERNAL, "out of memory");
    return;
  }
  p->call = call;
  p->t_arrival = t_arrival;
  p->next = NULL;
  pthread_mutex_lock(&s->mu);
  if (s->prep_tail) s->prep_tail->next = p; else s->prep_head = p;
  s->prep_tail = p;
  s->n_prep++;
  pthread_cond_signal(&s->prep_cv);
  pthread_mutex_unlock(&s->mu);
}

/* Validates, renders and tokenizes one Generate call and submits it (prep thread). Finishes
 * the call itself unless the scheduler took the request. */
/* gRPC status of a rejected Generate: the shared mapping (gt_rpc_code_from_err), except that a
 * draining scheduler (GT_ECANCELLED) is UNAVAILABLE and input this model cannot take (no chat
 * template: GT_ENOTFOUND / GT_EUNSUPPORTED) is the client's INVALID_ARGUMENT. */
static gt_rpc_code_t request_status(int rc) {
  if (rc == GT_ECANCELLED) return GT_RPC_UNAVAILABLE;
  if (rc == GT_ENOTFOUND || rc == GT_EUNSUPPORTED) return GT_RPC_INVALID_ARGUMENT;
  return gt_rpc_code_from_err(rc);
}

/* The k-th prompt of r (k > 0: more_prompts / more_tokens[k - 1]) as a request of its own: a
 * shallow copy of r (it points into r). */
static Gantry__V1__GenerateRequest prompt_at(const Gantry__V1__GenerateRequest *r, int k) {
  Gantry__V1__GenerateRequest sub = *r;
  if (k > 0 && r->n_more_prompts) sub.prompt = r->more_prompts[k - 1];
  if (k > 0 && r->n_more_tokens) sub.tokens = r->more_tokens[k - 1];
  return sub;
}

/* Prompts of r: 1 + its list, checked (one kind, the input's, at most SRV_MAX_PROMPTS). */
static int n_prompts(const Gantry__V1__GenerateRequest *r, int *out, gt_err_t *err) {
  *out = 1 + (int)(r->n_more_prompts + r->n_more_tokens);
  if (r->n_more_prompts && r->input_case != GANTRY__V1__GENERATE_REQUEST__INPUT_PROMPT)
    return gt_err_set(err, GT_EINVAL, "more_prompts needs a text prompt as input");
  if (r->n_more_tokens && r->input_case != GANTRY__V1__GENERATE_REQUEST__INPUT_TOKENS)
    return gt_err_set(err, GT_EINVAL, "more_tokens needs token ids as input");
  for (size_t i = 0; i < r->n_more_tokens; i++)
    if (r->more_tokens[i]->base.n_unknown_fields)
      return gt_err_set(err, GT_EINVAL, "unknown field in GenerateRequest.more_tokens[]");
  if (*out > SRV_MAX_PROMPTS)
    return gt_err_set(err, GT_EINVAL, "a list of prompts has at most %d prompts, got %d", SRV_MAX_PROMPTS, *out);
  return GT_OK;
}

/* Counts a refused Generate call in the metrics, logs it and finishes it; param (the request
 * field at fault, "" or NULL if none) goes to the client as trailing metadata GT_RPC_MD_PARAM. */
static void reject_code(srv_t *s, gt_rpc_call_t *call, const char *rid, gt_rpc_code_t code, const char *msg,
                        const char *param) {
  if (code == GT_RPC_RESOURCE_EXHAUSTED) gt_metric_inc(s->met.rejected_full, 1);
  else if (code == GT_RPC_UNAVAILABLE) gt_metric_inc(s->met.rejected_unavailable, 1);
  else gt_metric_inc(s->met.rejected_invalid, 1);
  GT_LOG_INFO("request_id=%s rejected code=%d error=\"%s\"", rid, (int)code, msg);
  if (param && param[0]) gt_rpc_call_set_trailer(call, GT_RPC_MD_PARAM, param);
  gt_rpc_call_finish(call, code, msg);
}

static void reject(srv_t *s, gt_rpc_call_t *call, const char *rid, int rc, const char *msg, const char *param) {
  reject_code(s, call, rid, request_status(rc), msg, param);
}

/* Frees a converted prompt that was not submitted (its ids, constraint reference and buffers). */
static void conv_free(sched_req_t *q, srv_conv_bufs_t *b) {
  free(q->prompt);
  cons_unref(q->constraint);
  srv_conv_bufs_free(b);
}

static void prepare(srv_t *s, gt_rpc_call_t *call, double t_arrival) {
  const Gantry__V1__GenerateRequest *r = (const Gantry__V1__GenerateRequest *)gt_rpc_call_request(call);
  if (gt_rpc_call_is_cancelled(call)) { /* gone while queued */
    gt_rpc_call_finish(call, GT_RPC_CANCELLED, "cancelled");
    return;
  }
  gt_err_t err = {0};
  int P = 1;
  int rc = srv_conv_check(r, &err);
  if (!rc) rc = n_prompts(r, &P, &err);
  /* every prompt is converted before any is submitted: bad input refuses the whole call */
  sched_req_t q[SRV_MAX_PROMPTS];
  srv_conv_bufs_t bufs[SRV_MAX_PROMPTS];
  memset(bufs, 0, sizeof bufs);
  int n_conv = 0;
  bool over_ctx = false;
  for (int k = 0; !rc && k < P; k++) {
    Gantry__V1__GenerateRequest sub = prompt_at(r, k);
    int32_t *ids = NULL;
    size_t n_ids = 0;
    int opens = 0;
    /* over the context: OUT_OF_RANGE, the router's context_length_exceeded */
    rc = srv_conv_check_bytes(&sub, s->n_ctx, s->max_tok_bytes, &err);
    over_ctx = rc != GT_OK;
    if (!rc) rc = srv_conv_prompt(&sub, s->tok, s->have_fam ? &s->fam : NULL, s->fam_reason, &ids, &n_ids, &opens, &err);
    if (!rc) srv_conv_truncate(&sub, ids, &n_ids);
    if (!rc) over_ctx = (rc = srv_conv_check_context(&sub, n_ids, s->n_ctx, &err)) != GT_OK;
    pthread_mutex_lock(&s->mu);
    uint64_t seed = 0x9e3779b97f4a7c15ull * ++s->seed_counter ^ (uint64_t)gt_now_ns();
    pthread_mutex_unlock(&s->mu);
    if (!rc) rc = srv_conv_request(&sub, s->n_ctx, opens, seed, &q[k], &bufs[k], &err);
    if (!rc && (rc = srv_conv_bad_words(&sub, s->tok, &q[k], &bufs[k], &err))) srv_conv_bufs_free(&bufs[k]);
    if (!rc && (rc = srv_conv_constraint(&sub, s->sched, &q[k], &err))) srv_conv_bufs_free(&bufs[k]);
    if (rc) {
      free(ids);
      break;
    }
    q[k].prompt = ids;
    q[k].n_prompt = (int)n_ids;
    q[k].on_event = on_event;
    n_conv = k + 1;
  }
  live_t *l = NULL;
  if (!rc && !(l = calloc(1, sizeof *l))) rc = gt_err_set(&err, GT_ENOMEM, "out of memory");
  if (rc) {
    for (int k = 0; k < n_conv; k++) conv_free(&q[k], &bufs[k]);
    reject_code(s, call, r->request_id, over_ctx ? GT_RPC_OUT_OF_RANGE : request_status(rc), err.msg, err.param);
    return;
  }
  l->srv = s;
  l->call = call;
  l->call_id = gt_rpc_call_id(call);
  l->t_arrival = t_arrival;
  const int n = q[0].n > 1 ? q[0].n : 1;
  l->n_choices = P * n;
  const char *rid = gt_rpc_call_metadata(call, "x-request-id");
  snprintf(l->rid, sizeof l->rid, "%s", rid && *rid ? rid : r->request_id[0] ? r->request_id : "-");
  pthread_mutex_lock(&s->mu);
  l->next = s->live;
  if (s->live) s->live->prev = l;
  s->live = l;
  s->n_live++;
  pthread_mutex_unlock(&s->mu);
  for (int k = 0; k < P; k++) {
    l->sub[k] = (live_sub_t){.l = l, .base = k * n};
    q[k].ud = &l->sub[k];
    int64_t id = sched_submit(s->sched, &q[k], &err); /* takes q[k].prompt */
    srv_conv_bufs_free(&bufs[k]);
    if (id < 0) {
      for (int j = k + 1; j < P; j++) conv_free(&q[j], &bufs[j]);
      /* the submitted prompts (none when k == 0) are cancelled; the last of their finals ends
       * the call, or this does when they all ended already */
      pthread_mutex_lock(&s->mu);
      atomic_store(&l->failed, 1);
      l->fail_rc = (int)id;
      snprintf(l->fail_msg, sizeof l->fail_msg, "%s", err.msg);
      snprintf(l->fail_param, sizeof l->fail_param, "%s", err.param);
      l->n_choices = k * n;
      for (int j = 0; j < k; j++) sched_cancel(s->sched, l->sched_id[j]);
      s->kicks++;
      pthread_cond_broadcast(&s->cv);
      const int done = l->n_finals >= l->n_choices;
      if (done) unlink_live(s, l);
      pthread_mutex_unlock(&s->mu);
      if (done) {
        reject(s, call, l->rid, (int)id, err.msg, err.param);
        free(l);
      }
      return;
    }
    /* after the last submit l may already be gone (a very short request finished on the
     * scheduler thread); before it, it waits for the later prompts' finals */
    pthread_mutex_lock(&s->mu);
    live_t *still = find_live(s, gt_rpc_call_id(call));
    if (still) {
      still->sched_id[k] = id;
      still->n_sub = k + 1;
      /* a cancel before this point found no sched id: apply it now (the call is marked
       * cancelled before on_cancel runs, so this or on_cancel sees the id) */
      if (gt_rpc_call_is_cancelled(call)) sched_cancel(s->sched, id);
    }
    s->kicks++;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
  }
}

static void *prep_main(void *arg) {
  srv_t *s = arg;
  for (;;) {
    pthread_mutex_lock(&s->mu);
    while (!s->prep_head && !s->prep_stop) pthread_cond_wait(&s->prep_cv, &s->mu);
    prep_t *p = s->prep_head;
    if (p) {
      s->prep_head = p->next;
      if (!s->prep_head) s->prep_tail = NULL;
    }
    pthread_mutex_unlock(&s->mu);
    if (!p) break; /* stopping and nothing queued */
    prepare(s, p->call, p->t_arrival);
    free(p);
    pthread_mutex_lock(&s->mu);
    s->n_prep--;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
  }
  return NULL;
}

static void on_cancel(void *user, gt_rpc_call_t *call, gt_rpc_code_t code) {
  srv_t *s = user;
  (void)code;
  pthread_mutex_lock(&s->mu);
  live_t *l = find_live(s, gt_rpc_call_id(call));
  if (l) {
    for (int k = 0; k < l->n_sub; k++)
      if (l->sched_id[k] > 0) sched_cancel(s->sched, l->sched_id[k]);
  }
  s->kicks++;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
}

static char *dup_or_empty(const char *x) {
  if (!x || !*x) return (char *)protobuf_c_empty_string;
  char *p = strdup(x);
  return p ? p : (char *)protobuf_c_empty_string;
}

static void on_info(void *user, gt_rpc_call_t *call) {
  srv_t *s = user;
  if (get_state(s) == SRV_LOADING) {
    gt_rpc_call_finish(call, GT_RPC_UNAVAILABLE, "the engine is loading its model");
    return;
  }
  sched_stats_t st;
  sched_stats(s->sched, &st);
  Gantry__V1__InfoResponse *r = malloc(sizeof *r);
  Gantry__V1__DeviceInfo *dev = malloc(sizeof *dev);
  Gantry__V1__DeviceInfo **devs = malloc(sizeof *devs);
  char **wt = calloc((size_t)s->n_wtypes + 1, sizeof *wt);
  if (!r || !dev || !devs || !wt) {
    free(r);
    free(dev);
    free(devs);
    free(wt);
    gt_rpc_call_finish(call, GT_RPC_INTERNAL, "out of memory");
    return;
  }
  gantry__v1__info_response__init(r);
  gantry__v1__device_info__init(dev);
  dev->index = 0;
  dev->name = dup_or_empty("cpu");
  devs[0] = dev;
  r->devices = devs;
  r->n_devices = 1;
  r->model_name = dup_or_empty(s->model_name);
  r->architecture = dup_or_empty(s->arch);
  r->version = dup_or_empty(s->version);
  r->context_length = (uint32_t)st.n_ctx;
  r->max_num_seqs = (uint32_t)st.max_num_seqs;
  r->kv_capacity_tokens = (uint64_t)st.kv_blocks * (uint64_t)st.block_tokens;
  r->tensor_parallel = 1;
  r->task = s->emb.is_embed ? GANTRY__V1__INFO_RESPONSE__TASK__TASK_EMBED : GANTRY__V1__INFO_RESPONSE__TASK__TASK_GENERATE;
  r->embedding_dims = s->emb.is_embed ? (uint32_t)s->emb.n_embd : 0;
  for (int i = 0; i < s->n_wtypes; i++) wt[i] = dup_or_empty(s->wtypes[i]);
  r->weight_types = wt;
  r->n_weight_types = (size_t)s->n_wtypes;
  gt_rpc_call_reply(call, &r->base);
}

/* GET /health and /ready on the metrics port (Kubernetes probes): /health is 200 while the
 * process serves, /ready 200 only when a model is loaded and the engine is not draining. */
static int http_probe(void *ud, const char *path, char *msg, size_t n) {
  srv_t *s = ud;
  srv_state_t st = get_state(s);
  const char *word = st == SRV_LOADING ? "loading" : st == SRV_READY ? "ready" : st == SRV_FAILED ? "failed" : "draining";
  if (!strcmp(path, "/health")) {
    snprintf(msg, n, "ok");
    return 200;
  }
  snprintf(msg, n, "%s", word);
  return st == SRV_READY ? 200 : 503;
}

/* grpc.health.v1.Health/Check: SERVING when a model is loaded and the engine is not draining.
 * Service "" (the server) or "gantry.v1.Engine"; any other name is NOT_FOUND (the protocol). */
static void on_grpc_health(void *user, gt_rpc_call_t *call) {
  srv_t *s = user;
  const Grpc__Health__V1__HealthCheckRequest *q = (const Grpc__Health__V1__HealthCheckRequest *)gt_rpc_call_request(call);
  if (q->service[0] && strcmp(q->service, "gantry.v1.Engine")) {
    gt_rpc_call_finish(call, GT_RPC_NOT_FOUND, "unknown service");
    return;
  }
  Grpc__Health__V1__HealthCheckResponse *r = malloc(sizeof *r);
  if (!r) {
    gt_rpc_call_finish(call, GT_RPC_RESOURCE_EXHAUSTED, "out of memory");
    return;
  }
  grpc__health__v1__health_check_response__init(r);
  r->status = get_state(s) == SRV_READY ? GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING
                                        : GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING;
  gt_rpc_call_reply(call, &r->base);
}

static void on_health(void *user, gt_rpc_call_t *call) {
  srv_t *s = user;
  Gantry__V1__HealthResponse *r = malloc(sizeof *r);
  if (!r) {
    gt_rpc_call_finish(call, GT_RPC_INTERNAL, "out of memory");
    return;
  }
  gantry__v1__health_response__init(r);
  srv_state_t st = get_state(s);
  r->status = st == SRV_LOADING ? GANTRY__V1__HEALTH_RESPONSE__STATUS__STATUS_LOADING
              : st == SRV_READY   ? GANTRY__V1__HEALTH_RESPONSE__STATUS__STATUS_READY
              : st == SRV_FAILED  ? GANTRY__V1__HEALTH_RESPONSE__STATUS__STATUS_FAILED
                                  : GANTRY__V1__HEALTH_RESPONSE__STATUS__STATUS_DRAINING;
  if (st != SRV_LOADING) {
    sched_stats_t ss;
    sched_stats(s->sched, &ss);
    r->running = (uint32_t)ss.running;
    r->waiting = (uint32_t)ss.waiting;
  }
  gt_rpc_call_reply(call, &r->base);
}

static void on_tokenize(void *user, gt_rpc_call_t *call) {
  srv_t *s = user;
  if (get_state(s) == SRV_LOADING) {
    gt_rpc_call_finish(call, GT_RPC_UNAVAILABLE, "the engine is loading its model");
    return;
  }
  const Gantry__V1__TokenizeRequest *t = (const Gantry__V1__TokenizeRequest *)gt_rpc_call_request(call);
  gt_err_t err = {0};
  int32_t *ids = NULL;
  size_t n = 0;
  int rc;
  if (t->base.n_unknown_fields) {
    rc = gt_err_set(&err, GT_EINVAL, "unknown field number %u in TokenizeRequest", t->base.unknown_fields[0].tag);
  } else if (t->input_case == GANTRY__V1__TOKENIZE_REQUEST__INPUT_TEXT) {
    rc = prompt_encode_text(s->tok, t->text, strlen(t->text), t->parse_special_tokens, &ids, &n, &err);
  } else if (t->input_case == GANTRY__V1__TOKENIZE_REQUEST__INPUT_CHAT) {
    int opens = 0;
    Gantry__V1__GenerateRequest g; /* a GenerateRequest view, for the unknown-field check */
    gantry__v1__generate_request__init(&g);
    g.input_case = GANTRY__V1__GENERATE_REQUEST__INPUT_CHAT;
    g.chat = t->chat;
    rc = srv_conv_check(&g, &err);
    if (!rc)
      rc = srv_conv_chat(t->chat, t->add_generation_prompt, t->parse_special_tokens, s->tok, s->have_fam ? &s->fam : NULL,
                         s->fam_reason, &ids, &n, &opens, &err);
  } else {
    rc = gt_err_set(&err, GT_EINVAL, "input: one of text or chat is required");
  }
  if (rc) {
    free(ids);
    gt_rpc_call_finish(call, rc == GT_ENOMEM ? GT_RPC_INTERNAL : GT_RPC_INVALID_ARGUMENT, err.msg);
    return;
  }
  Gantry__V1__TokenizeResponse *r = malloc(sizeof *r);
  if (!r) {
    free(ids);
    gt_rpc_call_finish(call, GT_RPC_INTERNAL, "out of memory");
    return;
  }
  gantry__v1__tokenize_response__init(r);
  r->ids = ids;
  r->n_ids = n;
  r->count = (uint32_t)n;
  gt_rpc_call_reply(call, &r->base);
}

/* Detokenize: ids -> text with special tokens kept, as valid UTF-8 (tok_stream: an incomplete
 * character becomes U+FFFD); an id outside the vocabulary -> INVALID_ARGUMENT naming it. */
static void on_detokenize(void *user, gt_rpc_call_t *call) {
  srv_t *s = user;
  if (get_state(s) == SRV_LOADING) {
    gt_rpc_call_finish(call, GT_RPC_UNAVAILABLE, "the engine is loading its model");
    return;
  }
  const Gantry__V1__DetokenizeRequest *d = (const Gantry__V1__DetokenizeRequest *)gt_rpc_call_request(call);
  gt_err_t err = {0};
  gt_sb_t out = {0};
  tok_stream_t ts;
  tok_stream_init(&ts, s->tok, 0);
  int rc = d->base.n_unknown_fields ? gt_err_set(&err, GT_EINVAL, "unknown field number %u in DetokenizeRequest",
                                                 d->base.unknown_fields[0].tag)
                                    : GT_OK;
  const char *t;
  size_t n;
  for (size_t i = 0; !rc && i <= d->n_ids; i++) {
    rc = i < d->n_ids ? tok_stream_push(&ts, d->ids[i], &t, &n, &err) : tok_stream_flush(&ts, &t, &n, &err);
    if (!rc && n && gt_sb_add(&out, t, n)) rc = gt_err_set(&err, GT_ENOMEM, "out of memory");
    if (rc == GT_EINVAL && i < d->n_ids) gt_err_set(&err, GT_EINVAL, "token id %d at position %zu is outside the vocabulary", d->ids[i], i);
  }
  tok_stream_free(&ts);
  Gantry__V1__DetokenizeResponse *r = rc ? NULL : malloc(sizeof *r);
  if (!r) {
    free(out.p);
    gt_rpc_call_finish(call, rc == GT_EINVAL ? GT_RPC_INVALID_ARGUMENT : GT_RPC_INTERNAL, rc ? err.msg : "out of memory");
    return;
  }
  gantry__v1__detokenize_response__init(r);
  r->text = out.p ? out.p : (char *)protobuf_c_empty_string;
  gt_rpc_call_reply(call, &r->base);
}

/* ---- lifecycle ---- */

/* Embed: refused while loading / draining, else server_embed.c */
static void on_embed(void *user, gt_rpc_call_t *call) {
  srv_t *s = user;
  srv_state_t st = get_state(s);
  if (st != SRV_READY) {
    gt_rpc_call_finish(call, GT_RPC_UNAVAILABLE, st == SRV_LOADING ? "the engine is loading its model"
                                                 : st == SRV_FAILED ? SRV_FAILED_WHY
                                                                    : "the engine is draining");
    return;
  }
  srv_embed_call(&s->emb, call);
}

/* Embed's on_cancel: the call's inputs leave the scheduler (server_embed.h) */
static void on_embed_cancel(void *user, gt_rpc_call_t *call, gt_rpc_code_t code) {
  srv_t *s = user;
  if (get_state(s) != SRV_LOADING) srv_embed_cancel(&s->emb, call, code);
}

int srv_create(const srv_opts_t *o, srv_t **out, int *port, gt_err_t *err) {
  srv_t *s = calloc(1, sizeof *s);
  if (!s) return gt_err_set(err, GT_ENOMEM, "out of memory");
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->cv, NULL);
  pthread_cond_init(&s->prep_cv, NULL);
  srv_embed_live_init(&s->emb_live);
  s->state = SRV_LOADING;
  s->on_fatal = o->on_fatal;
  s->fatal_ud = o->fatal_ud;
  if (pthread_create(&s->prep_th, NULL, prep_main, s)) {
    srv_free(s, 0);
    return gt_err_set(err, GT_EINTERNAL, "cannot start the request preparation thread");
  }
  s->prep_started = 1;
  srv_metrics_init(&s->met, o->metrics);
  if (o->metrics) gt_metrics_on_probe(o->metrics, http_probe, s);
  const gt_rpc_server_opts_t so = {.auth_token = o->auth_token, .tls_cert_pem = o->tls_cert, .tls_key_pem = o->tls_key,
                                   .tls_client_ca_pem = o->tls_client_ca};
  int rc = gt_rpc_server_create(&so, &s->rpc, err);
  const gt_rpc_method_t methods[] = {
      {EC_METHOD_GENERATE, GT_RPC_SERVER_STREAMING, &gantry__v1__generate_request__descriptor, on_generate, on_cancel,
       gt_delta_merge, s},
      {EC_METHOD_TOKENIZE, GT_RPC_UNARY, &gantry__v1__tokenize_request__descriptor, on_tokenize, NULL, NULL, s},
      {EC_METHOD_DETOKENIZE, GT_RPC_UNARY, &gantry__v1__detokenize_request__descriptor, on_detokenize, NULL, NULL, s},
      {EC_METHOD_INFO, GT_RPC_UNARY, &gantry__v1__info_request__descriptor, on_info, NULL, NULL, s},
      {EC_METHOD_HEALTH, GT_RPC_UNARY, &gantry__v1__health_request__descriptor, on_health, NULL, NULL, s},
      {EC_METHOD_EMBED, GT_RPC_UNARY, &gantry__v1__embed_request__descriptor, on_embed, on_embed_cancel, NULL, s},
      {"/grpc.health.v1.Health/Check", GT_RPC_UNARY, &grpc__health__v1__health_check_request__descriptor,
       on_grpc_health, NULL, NULL, s},
  };
  for (size_t i = 0; !rc && i < sizeof methods / sizeof *methods; i++) rc = gt_rpc_server_add_method(s->rpc, &methods[i], err);
  if (!rc) rc = gt_rpc_server_start(s->rpc, o->listen, port, err);
  if (rc) {
    srv_free(s, 0);
    return rc;
  }
  *out = s;
  return GT_OK;
}

static void metrics_collect(void *ud) {
  srv_t *s = ud;
  if (get_state(s) == SRV_LOADING) return;
  sched_stats_t st;
  sched_stats(s->sched, &st);
  srv_metrics_collect(&s->met, &st);
}

int srv_attach(srv_t *s, const gguf_t *g, model_t *m, const tok_t *tok, const sched_config_t *cfg,
               const srv_model_info_t *info, gt_err_t *err) {
  int rc = sched_create(m, tok, cfg, &s->sched, err);
  if (rc) return rc;
  srv_metrics_ranks(&s->met, m);
  s->tok = tok;
  s->model = m;
  gt_err_t ferr = {0};
  s->have_fam = prompt_chat_family(g, &s->fam, &ferr) == GT_OK;
  if (!s->have_fam) snprintf(s->fam_reason, sizeof s->fam_reason, "%s", ferr.msg);
  sched_stats_t st;
  sched_stats(s->sched, &st);
  s->n_ctx = st.n_ctx;
  s->max_tok_bytes = srv_conv_max_token_bytes(tok);
  s->model_name = strdup(info && info->model_name ? info->model_name : m->hp.name);
  int add_eos = 0;
  if (gguf_get_bool(g, "tokenizer.ggml.add_eos_token", &add_eos)) add_eos = 0;
  s->emb = (srv_embed_ctx_t){.is_embed = cfg && cfg->embed, .sched = s->sched, .tok = tok, .model_name = s->model_name,
                             .n_embd = m->hp.n_embd, .n_ctx = st.n_ctx, .eos = tok_eos(tok), .add_eos = add_eos,
                             .max_inputs = cfg && cfg->max_waiting > 0 ? cfg->max_waiting : SCHED_DEFAULT_MAX_WAITING,
                             .live = &s->emb_live, .met = &s->met};
  /* every gantry_engine_* series names the model, like the router's (model_name="...") */
  if (s->met.reg && s->model_name) gt_metrics_set_label(s->met.reg, "model_name", s->model_name);
  s->arch = strdup(info && info->architecture ? info->architecture : m->hp.arch);
  s->version = strdup(info && info->version ? info->version : "");
  if (info && info->n_weight_types > 0) {
    s->wtypes = calloc((size_t)info->n_weight_types, sizeof *s->wtypes);
    for (int i = 0; s->wtypes && i < info->n_weight_types; i++) s->wtypes[i] = strdup(info->weight_types[i]);
    if (s->wtypes) s->n_wtypes = info->n_weight_types;
  }
  /* a backend with decode graphs (CUDA) captures them now, before the first request */
  if (m->be->ops->graph_sizes && (rc = sched_warmup(s->sched, NULL, err))) {
    sched_free(s->sched);
    s->sched = NULL;
    return rc;
  }
  if (s->met.reg) gt_metrics_on_collect(s->met.reg, metrics_collect, s);
  if (pthread_create(&s->th, NULL, sched_main, s)) {
    sched_free(s->sched);
    s->sched = NULL;
    return gt_err_set(err, GT_EINTERNAL, "cannot start the scheduler thread");
  }
  s->th_started = 1;
  pthread_mutex_lock(&s->mu);
  s->state = SRV_READY;
  pthread_mutex_unlock(&s->mu);
  return GT_OK;
}

srv_state_t srv_state(srv_t *s) { return get_state(s); }

void srv_stats(srv_t *s, sched_stats_t *out) {
  memset(out, 0, sizeof *out);
  if (get_state(s) != SRV_LOADING) sched_stats(s->sched, out);
}

void srv_drain(srv_t *s) {
  pthread_mutex_lock(&s->mu);
  if (s->state == SRV_READY) s->state = SRV_DRAINING;
  pthread_mutex_unlock(&s->mu);
  if (s->sched) sched_drain(s->sched);
}

int srv_live(srv_t *s) {
  pthread_mutex_lock(&s->mu);
  int n = s->n_live + s->n_prep;
  pthread_mutex_unlock(&s->mu);
  return n;
}

int srv_wait_idle(srv_t *s, int64_t timeout_ms) {
  int64_t deadline = gt_now_ns() + timeout_ms * 1000000LL;
  pthread_mutex_lock(&s->mu);
  while (s->n_live + s->n_prep > 0) {
    int64_t left = deadline - gt_now_ns();
    if (left <= 0) break;
    if (left > 100000000LL) left = 100000000LL;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += left;
    while (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    pthread_cond_timedwait(&s->cv, &s->mu, &ts);
  }
  int idle = s->n_live + s->n_prep == 0;
  pthread_mutex_unlock(&s->mu);
  return idle;
}

void srv_free(srv_t *s, int64_t grace_ms) {
  if (!s) return;
  if (s->rpc) {
    /* the scheduler thread still runs: it finishes the calls that shutdown cancels */
    gt_rpc_server_shutdown(s->rpc, grace_ms);
    gt_rpc_server_destroy(s->rpc);
  }
  if (s->met.reg) {
    gt_metrics_on_collect(s->met.reg, NULL, NULL);
    gt_metrics_on_probe(s->met.reg, NULL, NULL); /* waits for a probe in progress */
  }
  if (s->prep_started) { /* every call is finished by now: the queue is empty */
    pthread_mutex_lock(&s->mu);
    s->prep_stop = 1;
    pthread_cond_broadcast(&s->prep_cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->prep_th, NULL);
  }
  if (s->th_started) {
    pthread_mutex_lock(&s->mu);
    s->stop = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->th, NULL);
  }
  sched_free(s->sched);
  free(s->model_name);
  free(s->arch);
  free(s->version);
  for (int i = 0; i < s->n_wtypes; i++) free(s->wtypes[i]);
  free(s->wtypes);
  pthread_mutex_destroy(&s->mu);
  pthread_cond_destroy(&s->cv);
  pthread_cond_destroy(&s->prep_cv);
  srv_embed_live_destroy(&s->emb_live);
  free(s);
}
