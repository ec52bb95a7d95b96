/* common/grpc_client.c — gRPC client glue: blocking unary calls on a private pluck queue,
 * streaming calls on the client's completion queue with callbacks. */
#include "common/grpc_client.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <grpc/grpc_security.h>
#include <grpc/status.h>
#include <grpc/support/alloc.h>

#include "common/grpc_util_internal.h"
#include "common/log.h"

enum { TAG_START = 1, TAG_RECV };

typedef struct tag {
  int kind;
  gt_rpc_stream_t *s;
} tag_t;

struct gt_rpc_client {
  grpc_channel *ch;
  grpc_completion_queue *cq;
  int own_thread;
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  char *auth;               /* "Bearer <token>" sent with every call, or NULL */
  gt_rpc_stream_t *streams; /* every stream not yet freed (under mu) */
  int active;               /* streams whose on_done has not run yet (under mu) */
  int live;                 /* streams not yet freed (under mu) */
};

struct gt_rpc_stream {
  gt_rpc_client_t *cl;
  grpc_call *call;
  const ProtobufCMessageDescriptor *resp_type;
  gt_rpc_stream_msg_fn on_msg;
  gt_rpc_stream_done_fn on_done;
  void *user;
  tag_t start_tag, recv_tag;
  grpc_metadata *md;
  size_t n_md;
  grpc_byte_buffer *send_bb;
  grpc_metadata_array init_md, trail_md;
  grpc_status_code status;
  grpc_slice details;
  grpc_byte_buffer *recv_bb;
  pthread_mutex_t bmu; /* serializes grpc_call_start_batch between the starter and the queue */
  int manual_read;     /* the next read waits for gt_rpc_stream_read_next */
  int read_pending;    /* a RECV_MESSAGE batch is outstanding (under bmu) */
  /* queue-thread state (recv_ended is also read under bmu by arm_recv) */
  int start_done, recv_ended, status_done, bad_msg;
  /* under cl->mu */
  int refs; /* app + queue (until on_done) */
  gt_rpc_stream_t *prev, *next;
};

/* ---- stream lifetime ---------------------------------------------------------------------- */

static void stream_free(gt_rpc_stream_t *s) {
  if (s->call) grpc_call_unref(s->call);
  for (size_t i = 0; i < s->n_md; i++) {
    grpc_slice_unref(s->md[i].key);
    grpc_slice_unref(s->md[i].value);
  }
  free(s->md);
  if (s->send_bb) grpc_byte_buffer_destroy(s->send_bb);
  if (s->recv_bb) grpc_byte_buffer_destroy(s->recv_bb);
  grpc_metadata_array_destroy(&s->init_md);
  grpc_metadata_array_destroy(&s->trail_md);
  grpc_slice_unref(s->details);
  pthread_mutex_destroy(&s->bmu);
  free(s);
}

/* Drops one reference (and, for the queue's reference, the stream's "active" mark in the
 * same critical section, so destroy never sees an inactive stream the queue still holds);
 * frees the stream outside the lock at zero. */
static void stream_unref_ex(gt_rpc_stream_t *s, int deactivate) {
  gt_rpc_client_t *c = s->cl;
  pthread_mutex_lock(&c->mu);
  if (deactivate) c->active--;
  int r = --s->refs;
  if (r == 0) {
    if (s->prev) s->prev->next = s->next;
    else c->streams = s->next;
    if (s->next) s->next->prev = s->prev;
    c->live--;
  }
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
  if (r == 0) stream_free(s);
}

static void stream_unref(gt_rpc_stream_t *s) { stream_unref_ex(s, 0); }

static void maybe_done(gt_rpc_stream_t *s) {
  if (!s->start_done || !s->recv_ended || !s->status_done) return;
  gt_rpc_status_t st;
  if (s->bad_msg) {
    gt_rpc_status_set(&st, GT_RPC_INTERNAL, "response is not a valid protobuf message");
  } else {
    gt_rpc_status_fill(&st, s->status, s->details, &s->trail_md);
  }
  if (s->on_done) s->on_done(s->user, s, &st);
  stream_unref_ex(s, 1); /* the queue's reference */
}

/* Posts the next read unless one is outstanding or the stream's reads have ended (any thread). */
static void arm_recv(gt_rpc_stream_t *s) {
  grpc_op op;
  memset(&op, 0, sizeof op);
  op.op = GRPC_OP_RECV_MESSAGE;
  op.data.recv_message.recv_message = &s->recv_bb;
  pthread_mutex_lock(&s->bmu);
  if (s->read_pending || s->recv_ended) {
    pthread_mutex_unlock(&s->bmu);
    return;
  }
  grpc_call_error e = grpc_call_start_batch(s->call, &op, 1, &s->recv_tag, NULL);
  if (e == GRPC_CALL_OK) s->read_pending = 1;
  else s->recv_ended = 1; /* before the cancel, whose completion reads it */
  pthread_mutex_unlock(&s->bmu);
  if (e != GRPC_CALL_OK) grpc_call_cancel_with_status(s->call, GRPC_STATUS_INTERNAL, "recv batch failed", NULL);
}

/* A manual-read stream whose call failed (status known) takes no more messages: one that
 * still completes a read (gRPC gave no guarantee that a cancel leaves none buffered) is dropped
 * and its reads end, so on_done follows without waiting for the reader. */
static int failed_manual(const gt_rpc_stream_t *s) {
  return s->manual_read && s->status_done && s->status != GRPC_STATUS_OK;
}

static void on_recv(gt_rpc_stream_t *s, int ok) {
  pthread_mutex_lock(&s->bmu);
  s->read_pending = 0;
  if (!ok || !s->recv_bb || failed_manual(s)) s->recv_ended = 1;
  pthread_mutex_unlock(&s->bmu);
  if (s->recv_ended) {
    if (s->recv_bb) { /* dropped: the call failed */
      grpc_byte_buffer_destroy(s->recv_bb);
      s->recv_bb = NULL;
    }
    maybe_done(s);
    return;
  }
  ProtobufCMessage *m = gt_rpc_unpack(s->resp_type, s->recv_bb);
  grpc_byte_buffer_destroy(s->recv_bb);
  s->recv_bb = NULL;
  if (!m) {
    s->bad_msg = 1;
    grpc_call_cancel_with_status(s->call, GRPC_STATUS_INTERNAL, "bad response message", NULL);
    s->recv_ended = 1;
    maybe_done(s);
    return;
  }
  if (s->on_msg) s->on_msg(s->user, s, m);
  else protobuf_c_message_free_unpacked(m, NULL);
  if (!s->manual_read) arm_recv(s);
  if (s->recv_ended) maybe_done(s);
}

static void dispatch(grpc_event ev) {
  tag_t *t = ev.tag;
  gt_rpc_stream_t *s = t->s;
  switch (t->kind) {
    case TAG_START: /* request sent and status received */
      s->start_done = 1;
      s->status_done = 1;
      if (s->send_bb) {
        grpc_byte_buffer_destroy(s->send_bb);
        s->send_bb = NULL;
      }
      /* A paused manual-read stream has no read outstanding, so a call that failed meanwhile
       * (deadline, lost connection, reset by the server) would never reach on_done: drop what
       * is buffered and read on to the end (a clean end still waits for the reader). A message
       * that this read (or one already outstanding) still gets is dropped by on_recv. */
      if (s->manual_read && s->status != GRPC_STATUS_OK) {
        grpc_call_cancel(s->call, NULL);
        arm_recv(s);
      }
      maybe_done(s);
      break;
    case TAG_RECV: on_recv(s, ev.success); break;
    default: break;
  }
}

static void *cq_thread(void *arg) {
  gt_rpc_client_t *c = arg;
  for (;;) {
    grpc_event ev = grpc_completion_queue_next(c->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    if (ev.type == GRPC_QUEUE_SHUTDOWN) break;
    if (ev.type == GRPC_OP_COMPLETE) dispatch(ev);
  }
  return NULL;
}

/* ---- client ------------------------------------------------------------------------------- */

int gt_rpc_client_create(const char *target, const gt_rpc_client_opts_t *opts,
                         gt_rpc_client_t **out, gt_err_t *err) {
  *out = NULL;
  if (!target || !target[0]) return gt_err_set(err, GT_EINVAL, "grpc client: empty target");
  gt_rpc_client_t *c = calloc(1, sizeof *c);
  if (!c) return gt_err_set(err, GT_ENOMEM, "grpc client: out of memory");
  gt_rpc_global_init();
  c->own_thread = opts ? opts->own_thread : 1;
  grpc_arg args[5];
  int n = 0;
  if (opts && opts->auth_token && opts->auth_token[0]) {
    size_t an = strlen(opts->auth_token) + 8;
    if (!(c->auth = malloc(an))) {
      free(c);
      gt_rpc_global_shutdown();
      return gt_err_set(err, GT_ENOMEM, "grpc client: out of memory");
    }
    snprintf(c->auth, an, "Bearer %s", opts->auth_token);
  }
  if (opts && opts->tls_ca_pem && opts->tls_server_name) {
    args[n].type = GRPC_ARG_STRING;
    args[n].key = GRPC_SSL_TARGET_NAME_OVERRIDE_ARG;
    args[n].value.string = (char *)opts->tls_server_name;
    n++;
  }
  args[n].type = GRPC_ARG_INTEGER;
  args[n].key = GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
  args[n].value.integer = opts && opts->max_message_bytes > 0 ? opts->max_message_bytes : 64 << 20;
  n++;
  if (opts && opts->flow_window_bytes > 0) {
    args[n].type = GRPC_ARG_INTEGER;
    args[n].key = GRPC_ARG_HTTP2_BDP_PROBE;
    args[n].value.integer = 0;
    n++;
    args[n].type = GRPC_ARG_INTEGER;
    args[n].key = GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES;
    args[n].value.integer = opts->flow_window_bytes;
    n++;
  }
  /* each client gets its own connection (no subchannel sharing between clients) */
  args[n].type = GRPC_ARG_INTEGER;
  args[n].key = GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL;
  args[n].value.integer = 1;
  n++;
  grpc_channel_args ca = {(size_t)n, args};
  grpc_channel_credentials *cr;
  if (opts && opts->tls_ca_pem) {
    grpc_ssl_pem_key_cert_pair kp = {opts->tls_key_pem, opts->tls_cert_pem};
    cr = grpc_ssl_credentials_create(opts->tls_ca_pem, opts->tls_cert_pem && opts->tls_key_pem ? &kp : NULL, NULL, NULL);
  } else {
    cr = grpc_insecure_credentials_create();
  }
  c->ch = grpc_channel_create(target, cr, &ca);
  grpc_channel_credentials_release(cr);
  c->cq = grpc_completion_queue_create_for_next(NULL);
  pthread_mutex_init(&c->mu, NULL);
  pthread_cond_init(&c->cv, NULL);
  if (c->own_thread && pthread_create(&c->thread, NULL, cq_thread, c) != 0) {
    grpc_completion_queue_shutdown(c->cq);
    grpc_completion_queue_destroy(c->cq);
    grpc_channel_destroy(c->ch);
    free(c->auth);
    free(c);
    gt_rpc_global_shutdown();
    return gt_err_set(err, GT_EINTERNAL, "grpc client: cannot start the cq thread");
  }
  *out = c;
  return GT_OK;
}

int gt_rpc_client_poll(gt_rpc_client_t *c, int64_t timeout_ms) {
  int n = 0;
  gpr_timespec dl = timeout_ms < 0    ? gpr_inf_future(GPR_CLOCK_REALTIME)
                    : timeout_ms == 0 ? gpr_inf_past(GPR_CLOCK_REALTIME)
                                      : gt_rpc_deadline_in(timeout_ms);
  for (;;) {
    grpc_event ev = grpc_completion_queue_next(c->cq, dl, NULL);
    if (ev.type != GRPC_OP_COMPLETE) break;
    dispatch(ev);
    n++;
    dl = gpr_inf_past(GPR_CLOCK_REALTIME); /* then take only what is ready */
  }
  return n;
}

void gt_rpc_client_destroy(gt_rpc_client_t *c) {
  if (!c) return;
  pthread_mutex_lock(&c->mu);
  for (gt_rpc_stream_t *s = c->streams; s; s = s->next) grpc_call_cancel(s->call, NULL);
  while (c->active > 0) {
    if (c->own_thread) {
      pthread_cond_wait(&c->cv, &c->mu);
    } else {
      pthread_mutex_unlock(&c->mu);
      gt_rpc_client_poll(c, 50);
      pthread_mutex_lock(&c->mu);
    }
  }
  /* what is left is held only by the application: free it */
  gt_rpc_stream_t *s = c->streams;
  c->streams = NULL;
  c->live = 0;
  pthread_mutex_unlock(&c->mu);
  while (s) {
    gt_rpc_stream_t *n = s->next;
    stream_free(s);
    s = n;
  }
  grpc_completion_queue_shutdown(c->cq);
  if (c->own_thread) {
    pthread_join(c->thread, NULL);
  } else {
    while (grpc_completion_queue_next(c->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
           GRPC_QUEUE_SHUTDOWN) {
    }
  }
  grpc_completion_queue_destroy(c->cq);
  grpc_channel_destroy(c->ch);
  pthread_mutex_destroy(&c->mu);
  pthread_cond_destroy(&c->cv);
  free(c->auth);
  free(c);
  gt_rpc_global_shutdown();
}

int gt_rpc_client_live_streams(gt_rpc_client_t *c) {
  pthread_mutex_lock(&c->mu);
  int n = c->live;
  pthread_mutex_unlock(&c->mu);
  return n;
}

/* The call's metadata: md[n] plus the client's authorization token; *n_out entries (NULL, 0
 * when there are none or out of memory). */
static grpc_metadata *copy_md(const gt_rpc_client_t *c, const gt_rpc_md_t *md, size_t n, size_t *n_out) {
  *n_out = 0;
  const size_t total = n + (c->auth ? 1 : 0);
  if (total == 0) return NULL;
  grpc_metadata *out = calloc(total, sizeof *out);
  if (!out) return NULL;
  for (size_t i = 0; i < n; i++) {
    out[i].key = grpc_slice_from_copied_string(md[i].key);
    out[i].value = grpc_slice_from_copied_string(md[i].value ? md[i].value : "");
  }
  if (c->auth) {
    out[n].key = grpc_slice_from_static_string("authorization");
    out[n].value = grpc_slice_from_copied_string(c->auth);
  }
  *n_out = total;
  return out;
}

gt_rpc_code_t gt_rpc_client_unary(gt_rpc_client_t *c, const char *method,
                                  const ProtobufCMessage *req,
                                  const ProtobufCMessageDescriptor *resp_type, int64_t timeout_ms,
                                  const gt_rpc_md_t *md, size_t n_md, ProtobufCMessage **resp,
                                  gt_rpc_status_t *st) {
  *resp = NULL;
  grpc_completion_queue *cq = grpc_completion_queue_create_for_pluck(NULL);
  grpc_slice msl = grpc_slice_from_copied_string(method);
  grpc_call *call = grpc_channel_create_call(c->ch, NULL, GRPC_PROPAGATE_DEFAULTS, cq, msl, NULL,
                                             gt_rpc_deadline_in(timeout_ms), NULL);
  grpc_slice_unref(msl);
  size_t n_gmd;
  grpc_metadata *gmd = copy_md(c, md, n_md, &n_gmd);
  grpc_byte_buffer *send_bb = gt_rpc_pack(req), *recv_bb = NULL;
  grpc_metadata_array init_md, trail_md;
  grpc_metadata_array_init(&init_md);
  grpc_metadata_array_init(&trail_md);
  grpc_status_code status = GRPC_STATUS_UNKNOWN;
  grpc_slice details = grpc_empty_slice();
  grpc_op ops[6];
  memset(ops, 0, sizeof ops);
  ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
  ops[0].data.send_initial_metadata.count = n_gmd;
  ops[0].data.send_initial_metadata.metadata = gmd;
  ops[1].op = GRPC_OP_SEND_MESSAGE;
  ops[1].data.send_message.send_message = send_bb;
  ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
  ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
  ops[3].data.recv_initial_metadata.recv_initial_metadata = &init_md;
  ops[4].op = GRPC_OP_RECV_MESSAGE;
  ops[4].data.recv_message.recv_message = &recv_bb;
  ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
  ops[5].data.recv_status_on_client.trailing_metadata = &trail_md;
  ops[5].data.recv_status_on_client.status = &status;
  ops[5].data.recv_status_on_client.status_details = &details;
  gt_rpc_code_t code;
  int tag = 0;
  if (grpc_call_start_batch(call, ops, 6, &tag, NULL) != GRPC_CALL_OK) {
    code = gt_rpc_status_set(st, GT_RPC_INTERNAL, "%s: grpc_call_start_batch failed", method);
  } else {
    grpc_completion_queue_pluck(cq, &tag, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    code = (gt_rpc_code_t)status;
    if (st) gt_rpc_status_fill(st, status, details, &trail_md);
    if (code == GT_RPC_OK) {
      *resp = gt_rpc_unpack(resp_type, recv_bb);
      if (!*resp)
        code = gt_rpc_status_set(st, GT_RPC_INTERNAL, "%s: %s", method,
                                 recv_bb ? "response is not a valid protobuf message"
                                         : "no response message");
    }
  }
  if (recv_bb) grpc_byte_buffer_destroy(recv_bb);
  grpc_byte_buffer_destroy(send_bb);
  grpc_metadata_array_destroy(&init_md);
  grpc_metadata_array_destroy(&trail_md);
  grpc_slice_unref(details);
  for (size_t i = 0; gmd && i < n_gmd; i++) {
    grpc_slice_unref(gmd[i].key);
    grpc_slice_unref(gmd[i].value);
  }
  free(gmd);
  grpc_call_unref(call);
  grpc_completion_queue_shutdown(cq);
  while (grpc_completion_queue_pluck(cq, &tag, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
         GRPC_QUEUE_SHUTDOWN) {
  }
  grpc_completion_queue_destroy(cq);
  return code;
}

int gt_rpc_client_stream(gt_rpc_client_t *c, const gt_rpc_stream_args_t *a, gt_rpc_stream_t **out,
                         gt_err_t *err) {
  *out = NULL;
  if (!a || !a->method || !a->request || !a->response)
    return gt_err_set(err, GT_EINVAL, "grpc stream: method, request and response type needed");
  gt_rpc_stream_t *s = calloc(1, sizeof *s);
  if (!s) return gt_err_set(err, GT_ENOMEM, "grpc stream: out of memory");
  s->cl = c;
  pthread_mutex_init(&s->bmu, NULL);
  s->resp_type = a->response;
  s->on_msg = a->on_msg;
  s->on_done = a->on_done;
  s->user = a->user;
  s->manual_read = a->manual_read;
  s->start_tag = (tag_t){TAG_START, s};
  s->recv_tag = (tag_t){TAG_RECV, s};
  s->details = grpc_empty_slice();
  grpc_metadata_array_init(&s->init_md);
  grpc_metadata_array_init(&s->trail_md);
  s->status = GRPC_STATUS_UNKNOWN;
  s->md = copy_md(c, a->md, a->n_md, &s->n_md);
  s->send_bb = gt_rpc_pack(a->request);
  grpc_slice msl = grpc_slice_from_copied_string(a->method);
  s->call = grpc_channel_create_call(c->ch, NULL, GRPC_PROPAGATE_DEFAULTS, c->cq, msl, NULL,
                                     gt_rpc_deadline_in(a->timeout_ms), NULL);
  grpc_slice_unref(msl);
  s->refs = 2;

  /* One batch sends the request and completes with the status at the end of the call;
   * messages are read by a chain of RECV_MESSAGE batches. */
  grpc_op ops[5];
  memset(ops, 0, sizeof ops);
  ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
  ops[0].data.send_initial_metadata.count = s->n_md;
  ops[0].data.send_initial_metadata.metadata = s->md;
  ops[1].op = GRPC_OP_SEND_MESSAGE;
  ops[1].data.send_message.send_message = s->send_bb;
  ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
  ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
  ops[3].data.recv_initial_metadata.recv_initial_metadata = &s->init_md;
  ops[4].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
  ops[4].data.recv_status_on_client.trailing_metadata = &s->trail_md;
  ops[4].data.recv_status_on_client.status = &s->status;
  ops[4].data.recv_status_on_client.status_details = &s->details;

  pthread_mutex_lock(&s->bmu);
  grpc_call_error e = grpc_call_start_batch(s->call, ops, 5, &s->start_tag, NULL);
  if (e != GRPC_CALL_OK) {
    pthread_mutex_unlock(&s->bmu);
    stream_free(s);
    return gt_err_set(err, GT_EINTERNAL, "grpc stream: start_batch failed for %s", a->method);
  }
  pthread_mutex_lock(&c->mu);
  s->next = c->streams;
  if (c->streams) c->streams->prev = s;
  c->streams = s;
  c->live++;
  c->active++;
  pthread_mutex_unlock(&c->mu);
  pthread_mutex_unlock(&s->bmu);
  arm_recv(s);
  *out = s;
  return GT_OK;
}

void gt_rpc_stream_cancel(gt_rpc_stream_t *s) {
  grpc_call_cancel(s->call, NULL);
  /* a paused stream has no read outstanding: post one so the end is seen and on_done fires */
  if (s->manual_read) arm_recv(s);
}

void gt_rpc_stream_read_next(gt_rpc_stream_t *s) { arm_recv(s); }
void gt_rpc_stream_release(gt_rpc_stream_t *s) { stream_unref(s); }
void *gt_rpc_stream_user(const gt_rpc_stream_t *s) { return s->user; }
void gt_rpc_client_reset_backoff(gt_rpc_client_t *c) { grpc_channel_reset_connect_backoff(c->ch); }
