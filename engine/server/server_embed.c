/* engine/server/server_embed.c — see server_embed.h. */
#include "engine/server/server_embed.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/log.h"
#include "engine/chat/prompt.h"
#include "engine/models/embed.h"
#include "gantry/v1/engine.pb-c.h"

/* One Embed call: refs = 1 (the submitter) + one per submitted input; whoever drops the last
 * reference replies and frees. In live's list from before the first submit until then. */
typedef struct emb_call {
  gt_rpc_call_t *call;
  uint64_t call_id;
  srv_embed_live_t *live;
  srv_metrics_t *met;
  pthread_mutex_t mu;
  int refs, n, dims;
  float *vals;             /* [n, dims] */
  int64_t *sched_ids;      /* [n] scheduler ids of the submitted inputs (n_sub of them; cq thread) */
  int n_sub;
  uint32_t prompt_tokens;
  gt_rpc_code_t code;      /* GT_RPC_OK until the first failure */
  gt_rpc_code_t cancel_code; /* OK until srv_embed_cancel (CANCELLED / DEADLINE_EXCEEDED) */
  int n_done, n_cancelled; /* inputs embedded / dropped by the cancellation */
  double t0_ms;
  char rid[64];
  char msg[256];
  struct emb_call *prev, *next;
} emb_call_t;

void srv_embed_live_init(srv_embed_live_t *l) {
  pthread_mutex_init(&l->mu, NULL);
  l->head = NULL;
}

void srv_embed_live_destroy(srv_embed_live_t *l) { pthread_mutex_destroy(&l->mu); }

typedef struct {
  emb_call_t *c;
  int index;
} emb_sub_t;

static void fail(emb_call_t *c, gt_rpc_code_t code, const char *msg) {
  if (c->code != GT_RPC_OK) return;
  c->code = code;
  snprintf(c->msg, sizeof c->msg, "%.250s", msg);
}

/* Drops one reference (the caller holds none of c's lock); the last one answers the call. */
static void unref(emb_call_t *c) {
  pthread_mutex_lock(&c->mu);
  const int last = --c->refs == 0;
  pthread_mutex_unlock(&c->mu);
  if (!last) return;
  pthread_mutex_lock(&c->live->mu); /* srv_embed_cancel finds c no more */
  if (c->prev) c->prev->next = c->next;
  else if (c->live->head == c) c->live->head = c->next;
  if (c->next) c->next->prev = c->prev;
  pthread_mutex_unlock(&c->live->mu);
  if (c->cancel_code != GT_RPC_OK) {
    GT_LOG_INFO("request_id=%s embed cancelled code=%s inputs=%d embedded=%d dropped=%d ms=%.1f", c->rid,
                c->cancel_code == GT_RPC_DEADLINE_EXCEEDED ? "DEADLINE_EXCEEDED" : "CANCELLED", c->n, c->n_done,
                c->n_cancelled, gt_now_ms() - c->t0_ms);
    fail(c, c->cancel_code, c->cancel_code == GT_RPC_DEADLINE_EXCEEDED ? "deadline exceeded" : "cancelled");
  }
  Gantry__V1__EmbedResponse *r = c->code == GT_RPC_OK ? malloc(sizeof *r) : NULL;
  Gantry__V1__Embedding **es = r ? calloc((size_t)c->n, sizeof *es) : NULL;
  if (c->code == GT_RPC_OK && !es) fail(c, GT_RPC_INTERNAL, "out of memory");
  for (int i = 0; es && i < c->n; i++) {
    Gantry__V1__Embedding *e = malloc(sizeof *e);
    float *v = malloc(sizeof(float) * (size_t)c->dims);
    if (!e || !v) {
      free(e), free(v);
      for (int j = 0; j < i; j++) protobuf_c_message_free_unpacked(&es[j]->base, NULL);
      free(es), es = NULL;
      fail(c, GT_RPC_INTERNAL, "out of memory");
      break;
    }
    gantry__v1__embedding__init(e);
    memcpy(v, c->vals + (size_t)i * c->dims, sizeof(float) * (size_t)c->dims);
    e->values = v;
    e->n_values = (size_t)c->dims;
    es[i] = e;
  }
  if (es) {
    gantry__v1__embed_response__init(r);
    r->data = es;
    r->n_data = (size_t)c->n;
    r->prompt_tokens = c->prompt_tokens;
    gt_rpc_call_reply(c->call, &r->base);
  } else {
    free(r);
    gt_rpc_call_finish(c->call, c->code, c->msg);
  }
  pthread_mutex_destroy(&c->mu);
  free(c->vals);
  free(c->sched_ids);
  free(c);
}

/* scheduler thread: one input's final event */
static void on_event(void *ud, const sched_event_t *ev) {
  emb_sub_t *sub = ud;
  emb_call_t *c = sub->c;
  if (!ev->is_final) return;
  srv_metrics_finished(c->met, ev->finish, ev->usage, (gt_now_ms() - c->t0_ms) / 1e3);
  pthread_mutex_lock(&c->mu);
  if (ev->finish == SCHED_FINISH_CANCELLED && c->cancel_code != GT_RPC_OK) {
    c->n_cancelled++; /* unref finishes the call with cancel_code */
  } else if (ev->finish == SCHED_FINISH_STOP && ev->embedding && ev->n_embd >= c->dims) {
    c->n_done++;
    float *dst = c->vals + (size_t)sub->index * c->dims;
    memcpy(dst, ev->embedding, sizeof(float) * (size_t)c->dims);
    embed_normalize(dst, c->dims, c->dims);
    c->prompt_tokens += (uint32_t)ev->usage->prompt_tokens;
  } else {
    fail(c, ev->finish == SCHED_FINISH_CANCELLED ? GT_RPC_UNAVAILABLE : GT_RPC_INTERNAL,
         ev->error ? ev->error : "the embedding request did not finish");
  }
  pthread_mutex_unlock(&c->mu);
  free(sub);
  unref(c);
}

static gt_rpc_code_t submit_status(int rc) {
  return rc == GT_EBUSY ? GT_RPC_RESOURCE_EXHAUSTED : rc == GT_ECANCELLED ? GT_RPC_UNAVAILABLE
         : rc == GT_ENOMEM ? GT_RPC_INTERNAL : GT_RPC_INVALID_ARGUMENT;
}

/* Tokens of input i (malloc'd into *ids), truncated to the last `trunc` (> 0); *code on error. */
static int input_ids(const srv_embed_ctx_t *x, const Gantry__V1__EmbedRequest *r, size_t i, int32_t **ids, size_t *n,
                     char *msg, size_t msg_len) {
  gt_err_t err = {0};
  if (r->n_texts) {
    const char *t = r->texts[i];
    if (!*t) return snprintf(msg, msg_len, "input[%zu] is empty", i), GT_EINVAL;
    if (prompt_encode_text(x->tok, t, strlen(t), 0, ids, n, &err))
      return snprintf(msg, msg_len, "input[%zu]: %.400s", i, err.msg), err.code ? err.code : GT_EINVAL;
    if (x->add_eos && x->eos >= 0) {
      int32_t *grown = realloc(*ids, sizeof(int32_t) * (*n + 1));
      if (!grown) return snprintf(msg, msg_len, "out of memory"), GT_ENOMEM;
      *ids = grown;
      (*ids)[(*n)++] = x->eos;
    }
  } else {
    const Gantry__V1__TokenIds *tk = r->tokens[i];
    if (tk->n_ids == 0) return snprintf(msg, msg_len, "input[%zu] is empty", i), GT_EINVAL;
    if (!(*ids = malloc(sizeof(int32_t) * tk->n_ids))) return snprintf(msg, msg_len, "out of memory"), GT_ENOMEM;
    memcpy(*ids, tk->ids, sizeof(int32_t) * tk->n_ids);
    *n = tk->n_ids;
  }
  if (r->truncate_prompt_tokens > 0 && *n > r->truncate_prompt_tokens) {
    const size_t k = r->truncate_prompt_tokens;
    memmove(*ids, *ids + (*n - k), sizeof(int32_t) * k);
    *n = k;
  }
  if ((int)*n >= x->n_ctx)
    return snprintf(msg, msg_len, "This model's maximum context length is %d tokens. However, input[%zu] has %zu tokens.",
                    x->n_ctx - 1, i, *n),
           GT_ERANGE;
  return GT_OK;
}

void srv_embed_call(const srv_embed_ctx_t *x, gt_rpc_call_t *call) {
  const Gantry__V1__EmbedRequest *r = (const Gantry__V1__EmbedRequest *)gt_rpc_call_request(call);
  char msg[512];
  if (!x->is_embed) {
    snprintf(msg, sizeof msg, "model '%s' is not an embedding model (its engine serves --task generate)", x->model_name);
    gt_rpc_call_finish(call, GT_RPC_FAILED_PRECONDITION, msg);
    return;
  }
  if (r->base.n_unknown_fields) {
    snprintf(msg, sizeof msg, "unknown field number %u in EmbedRequest", r->base.unknown_fields[0].tag);
    gt_rpc_call_finish(call, GT_RPC_INVALID_ARGUMENT, msg);
    return;
  }
  const size_t n = r->n_texts ? r->n_texts : r->n_tokens;
  const char *bad = (r->n_texts && r->n_tokens) ? "input: texts or tokens, not both"
                    : n == 0                    ? "input: at least one input is required"
                    : n > SRV_EMBED_MAX_INPUTS  ? "input: at most 2048 inputs per request"
                    : r->dimensions > (uint32_t)x->n_embd ? "dimensions: larger than the model's embedding size"
                                                           : NULL;
  if (!bad && (int)n > x->max_inputs) { /* each input waits in the scheduler's queue: more could never all fit */
    snprintf(msg, sizeof msg,
             "input: at most %d inputs per request on this engine (its --max-waiting queue), got %zu; send them in "
             "several requests",
             x->max_inputs, n);
    gt_rpc_call_finish(call, GT_RPC_INVALID_ARGUMENT, msg);
    return;
  }
  if (bad) {
    if (r->dimensions > (uint32_t)x->n_embd && !(r->n_texts && r->n_tokens) && n && n <= SRV_EMBED_MAX_INPUTS)
      snprintf(msg, sizeof msg, "dimensions: must be at most %d (the model's embedding size), got %u", x->n_embd,
               r->dimensions);
    else
      snprintf(msg, sizeof msg, "%s", bad);
    gt_rpc_call_finish(call, GT_RPC_INVALID_ARGUMENT, msg);
    return;
  }
  /* every input is tokenized before any is submitted: bad input refuses the whole call */
  int32_t **ids = calloc(n, sizeof *ids);
  size_t *lens = calloc(n, sizeof *lens);
  emb_call_t *c = calloc(1, sizeof *c);
  const int dims = r->dimensions ? (int)r->dimensions : x->n_embd;
  if (c) c->vals = malloc(sizeof(float) * n * (size_t)dims);
  if (c) c->sched_ids = calloc(n, sizeof *c->sched_ids);
  int rc = !ids || !lens || !c || !c->vals || !c->sched_ids ? (snprintf(msg, sizeof msg, "out of memory"), GT_ENOMEM) : GT_OK;
  for (size_t i = 0; !rc && i < n; i++) rc = input_ids(x, r, i, &ids[i], &lens[i], msg, sizeof msg);
  if (rc) {
    for (size_t i = 0; ids && i < n; i++) free(ids[i]);
    free(ids), free(lens);
    if (c) free(c->vals), free(c->sched_ids), free(c);
    gt_rpc_call_finish(call, rc == GT_ERANGE ? GT_RPC_OUT_OF_RANGE : rc == GT_ENOMEM ? GT_RPC_INTERNAL : GT_RPC_INVALID_ARGUMENT,
                       msg);
    return;
  }
  c->call = call;
  c->call_id = gt_rpc_call_id(call);
  c->live = x->live;
  c->met = x->met;
  c->t0_ms = gt_now_ms();
  const char *rid = gt_rpc_call_metadata(call, "x-request-id");
  snprintf(c->rid, sizeof c->rid, "%s", rid && *rid ? rid : r->request_id[0] ? r->request_id : "-");
  pthread_mutex_init(&c->mu, NULL);
  c->refs = 1;
  c->n = (int)n;
  c->dims = dims;
  pthread_mutex_lock(&x->live->mu);
  c->next = x->live->head;
  if (c->next) c->next->prev = c;
  x->live->head = c;
  pthread_mutex_unlock(&x->live->mu);
  size_t i = 0;
  for (; i < n && !gt_rpc_call_is_cancelled(call); i++) {
    emb_sub_t *sub = malloc(sizeof *sub);
    gt_err_t err = {0};
    int64_t id = GT_ENOMEM;
    if (sub) {
      *sub = (emb_sub_t){.c = c, .index = (int)i};
      sched_req_t q = {.prompt = ids[i], .n_prompt = (int)lens[i], .sampling = sampler_defaults(), .max_tokens = 1,
                       .logprobs = -1, .priority = r->priority, .on_event = on_event, .ud = sub};
      ids[i] = NULL; /* the scheduler owns it now, refused or not */
      pthread_mutex_lock(&c->mu);
      c->refs++;
      pthread_mutex_unlock(&c->mu);
      id = sched_submit(x->sched, &q, &err);
      if (id > 0) c->sched_ids[c->n_sub++] = id;
    }
    if (id < 0) {
      pthread_mutex_lock(&c->mu);
      if (sub) c->refs--;
      fail(c, submit_status((int)id), sub ? err.msg : "out of memory");
      pthread_mutex_unlock(&c->mu);
      free(sub);
      for (size_t j = i; j < n; j++) free(ids[j]);
      /* the call has failed: the inputs already submitted are cancelled, not computed for nothing */
      for (int k = 0; k < c->n_sub; k++) sched_cancel(x->sched, c->sched_ids[k]);
      i = n;
      break;
    }
  }
  if (i < n) { /* cancelled while submitting: the rest is never submitted */
    for (size_t j = i; j < n; j++) free(ids[j]);
    pthread_mutex_lock(&c->mu);
    c->n_cancelled += (int)(n - i);
    pthread_mutex_unlock(&c->mu);
    srv_embed_cancel(x, call, gt_rpc_call_deadline_ms(call) == 0 ? GT_RPC_DEADLINE_EXCEEDED : GT_RPC_CANCELLED);
  }
  free(ids);
  free(lens);
  unref(c);
}

void srv_embed_cancel(const srv_embed_ctx_t *x, gt_rpc_call_t *call, gt_rpc_code_t code) {
  const uint64_t id = gt_rpc_call_id(call);
  pthread_mutex_lock(&x->live->mu); /* c stays in the list (alive) while this is held */
  emb_call_t *c = x->live->head;
  while (c && c->call_id != id) c = c->next;
  if (c) {
    pthread_mutex_lock(&c->mu);
    if (c->cancel_code == GT_RPC_OK) c->cancel_code = code;
    pthread_mutex_unlock(&c->mu);
    /* sched_cancel of an input that already finished is ignored */
    for (int k = 0; k < c->n_sub; k++) sched_cancel(x->sched, c->sched_ids[k]);
  }
  pthread_mutex_unlock(&x->live->mu);
}
