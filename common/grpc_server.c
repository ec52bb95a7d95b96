/* common/grpc_server.c — gRPC server glue: one cq thread, registered methods, per-call
 * send queue with merging, cancellation callbacks, graceful shutdown. */
#include "common/grpc_server.h"

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <grpc/grpc_security.h>

#include "common/clock.h"
#include "common/grpc_util_internal.h"
#include "common/log.h"

#define MAX_METHODS 32
#define ACCEPTORS_PER_METHOD 4
#define DEADLINE_SLACK_MS 100

enum { TAG_ACCEPT = 1, TAG_RECV_REQ, TAG_SEND, TAG_CLOSE, TAG_SHUTDOWN, TAG_UNKNOWN, TAG_UNKNOWN_DONE };
#define RECV_SCAN_MS 100 /* how often calls waiting for their request message are checked */

/* Every completion-queue tag starts with its kind. */
typedef struct tag {
  int kind;
  void *owner;
} tag_t;

typedef struct reg_method {
  gt_rpc_method_t m;
  void *handle; /* grpc registered-method handle */
} reg_method_t;

/* A pending grpc_server_request_registered_call. */
typedef struct acceptor {
  tag_t tag;
  gt_rpc_server_t *srv;
  reg_method_t *rm;
  grpc_call *call;
  gpr_timespec deadline;
  grpc_metadata_array md;
} acceptor_t;

/* A pending grpc_server_request_call: calls to methods nobody registered, answered with
 * UNIMPLEMENTED (otherwise they would hang until their deadline). */
typedef struct unknown_call {
  tag_t tag;
  grpc_call *call;
  grpc_call_details details;
  grpc_metadata_array md;
  int cancelled;
} unknown_call_t;

struct gt_rpc_server {
  grpc_server *server;
  grpc_completion_queue *cq;
  pthread_t thread;
  int thread_started;
  reg_method_t methods[MAX_METHODS];
  int n_methods;
  tag_t shutdown_tag;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int live_calls;         /* under mu */
  int shutdown_notified;  /* under mu */
  int shutting_down;      /* under mu */
  int stopped;            /* shutdown completed */
  int recv_timeout_ms;
  char *auth_token;       /* "Bearer <token>" every call must carry, or NULL */
  char *tls_cert, *tls_key, *tls_ca; /* PEM, or NULL: insecure port */
  atomic_size_t unsent_bytes; /* sum of every call's queued_bytes + in_flight_bytes */
  /* cq thread only: calls accepted whose request message is still arriving */
  struct gt_rpc_call *recv_wait;
};

typedef struct qitem {
  ProtobufCMessage *msg;
  unsigned flags;
  size_t bytes; /* packed size of every message merged into msg (an upper bound of msg's) */
  struct qitem *next;
} qitem_t;

static _Atomic uint64_t g_next_call_id = 1;

struct gt_rpc_call {
  gt_rpc_server_t *srv;
  reg_method_t *rm;
  uint64_t id;
  grpc_call *call;
  gpr_timespec deadline;
  char **md_keys, **md_vals;
  size_t n_md;
  ProtobufCMessage *req;
  void *app_user;
  tag_t send_tag, close_tag, recv_tag;
  int close_cancelled; /* written by gRPC on RECV_CLOSE_ON_SERVER */
  /* the request message (cq thread): received after the headers, within recv_timeout_ms */
  grpc_byte_buffer *recv_bb;
  int64_t recv_deadline_ms;
  int recv_expired;
  struct gt_rpc_call *wprev, *wnext; /* srv->recv_wait */
  int handed;          /* the handler has the call (under mu): cancels are reported */
  atomic_int cancelled;

  pthread_mutex_t mu; /* guards everything below */
  int refs;           /* app (until finish) + RECV_CLOSE batch + in-flight send batch */
  qitem_t *head, *tail;
  int n_msgs;         /* messages accepted by send (for the unary check) */
  int initial_md_sent;
  int in_flight;      /* one send batch outstanding */
  int in_flight_status;
  grpc_byte_buffer *in_flight_bb;
  int finish_called;
  gt_rpc_code_t fin_code;
  char *fin_msg;
  char *trail_key, *trail_val; /* one trailing metadata pair sent with the status, or NULL */
  int status_sent;
  int broken;         /* a send failed or the call was cancelled: drop further sends */
  size_t queued_bytes;    /* sum of the queue's qitem.bytes */
  size_t in_flight_bytes; /* the message of the send batch in flight */
  size_t accounted;       /* queued_bytes + in_flight_bytes as last added to srv->unsent_bytes */
  gt_rpc_drain_fn drain_cb; /* armed by gt_rpc_call_on_drain; one shot */
  void *drain_user;
  size_t drain_low;
  gt_rpc_call_stats_t stats;
};

/* ---- call lifetime ------------------------------------------------------------------------ */

/* This call's output given to send and not yet taken by the transport. Caller holds c->mu. */
static size_t unsent_locked(const gt_rpc_call_t *c) { return c->queued_bytes + c->in_flight_bytes; }

/* Brings srv->unsent_bytes up to date with this call's unsent bytes. Caller holds c->mu (or the
 * last reference). */
static void account_locked(gt_rpc_call_t *c) {
  const size_t now = unsent_locked(c);
  if (now >= c->accounted) atomic_fetch_add(&c->srv->unsent_bytes, now - c->accounted);
  else atomic_fetch_sub(&c->srv->unsent_bytes, c->accounted - now);
  c->accounted = now;
}

static void free_queue(gt_rpc_call_t *c) {
  qitem_t *it = c->head;
  while (it) {
    qitem_t *n = it->next;
    protobuf_c_message_free_unpacked(it->msg, NULL);
    free(it);
    it = n;
  }
  c->head = c->tail = NULL;
  c->queued_bytes = 0;
  account_locked(c);
}

static void call_free(gt_rpc_call_t *c) {
  gt_rpc_server_t *s = c->srv;
  free_queue(c);
  if (c->call) grpc_call_unref(c->call);
  for (size_t i = 0; i < c->n_md; i++) {
    free(c->md_keys[i]);
    free(c->md_vals[i]);
  }
  free(c->md_keys);
  free(c->md_vals);
  if (c->req) protobuf_c_message_free_unpacked(c->req, NULL);
  free(c->fin_msg);
  free(c->trail_key);
  free(c->trail_val);
  pthread_mutex_destroy(&c->mu);
  free(c);
  pthread_mutex_lock(&s->mu);
  s->live_calls--;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
}

static void call_unref(gt_rpc_call_t *c) {
  pthread_mutex_lock(&c->mu);
  int r = --c->refs;
  pthread_mutex_unlock(&c->mu);
  if (r == 0) call_free(c);
}

/* pump_locked without the accounting: starts the next send batch if none is in flight. Caller
 * holds c->mu. */
static void start_batch_locked(gt_rpc_call_t *c) {
  if (c->in_flight || c->status_sent || c->broken) return;
  int want_status = c->finish_called && (c->head == NULL || c->head->next == NULL);
  if (!c->head && !want_status) return;

  grpc_op ops[3];
  memset(ops, 0, sizeof ops);
  size_t n = 0;
  if (!c->initial_md_sent) {
    ops[n].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[n].data.send_initial_metadata.count = 0;
    n++;
  }
  grpc_byte_buffer *bb = NULL;
  if (c->head) {
    qitem_t *it = c->head;
    c->head = it->next;
    if (!c->head) c->tail = NULL;
    bb = gt_rpc_pack(it->msg);
    c->queued_bytes -= it->bytes;
    c->in_flight_bytes = bb ? grpc_byte_buffer_length(bb) : 0;
    protobuf_c_message_free_unpacked(it->msg, NULL);
    free(it);
    ops[n].op = GRPC_OP_SEND_MESSAGE;
    ops[n].data.send_message.send_message = bb;
    n++;
    c->stats.sent_msgs++;
  }
  grpc_slice details;
  int has_details = 0;
  grpc_metadata trailer;
  int has_trailer = 0;
  if (want_status) {
    ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[n].data.send_status_from_server.status = (grpc_status_code)c->fin_code;
    ops[n].data.send_status_from_server.trailing_metadata_count = 0;
    if (c->trail_key && c->trail_val) {
      memset(&trailer, 0, sizeof trailer);
      trailer.key = grpc_slice_from_copied_string(c->trail_key);
      trailer.value = grpc_slice_from_copied_string(c->trail_val);
      has_trailer = 1;
      ops[n].data.send_status_from_server.trailing_metadata_count = 1;
      ops[n].data.send_status_from_server.trailing_metadata = &trailer;
    }
    if (c->fin_msg && c->fin_msg[0]) {
      details = grpc_slice_from_copied_string(c->fin_msg);
      has_details = 1;
      ops[n].data.send_status_from_server.status_details = &details;
    }
    n++;
  }
  c->initial_md_sent = 1;
  c->in_flight = 1;
  c->in_flight_status = want_status;
  c->in_flight_bb = bb;
  c->refs++;
  grpc_call_error e = grpc_call_start_batch(c->call, ops, n, &c->send_tag, NULL);
  if (has_details) grpc_slice_unref(details);
  if (has_trailer) {
    grpc_slice_unref(trailer.key);
    grpc_slice_unref(trailer.value);
  }
  if (e != GRPC_CALL_OK) {
    GT_LOG_ERROR("grpc send batch failed call=%llu err=%d", (unsigned long long)c->id, (int)e);
    c->in_flight = 0;
    c->in_flight_bb = NULL;
    c->in_flight_bytes = 0;
    if (bb) grpc_byte_buffer_destroy(bb);
    c->refs--; /* the app or RECV_CLOSE still holds a reference */
    c->broken = 1;
    free_queue(c);
  }
}

/* Starts the next send batch if none is in flight and accounts the call's unsent bytes. Caller
 * holds c->mu. */
static void pump_locked(gt_rpc_call_t *c) {
  start_batch_locked(c);
  account_locked(c);
}

static void on_send_done(gt_rpc_call_t *c, int ok) {
  pthread_mutex_lock(&c->mu);
  if (c->in_flight_bb) grpc_byte_buffer_destroy(c->in_flight_bb);
  c->in_flight_bb = NULL;
  c->in_flight = 0;
  c->in_flight_bytes = 0;
  if (c->in_flight_status) c->status_sent = 1;
  if (!ok) {
    c->broken = 1;
    free_queue(c);
  }
  pump_locked(c);
  gt_rpc_drain_fn drained = NULL;
  void *drain_user = NULL;
  if (c->drain_cb && unsent_locked(c) <= c->drain_low) {
    drained = c->drain_cb;
    drain_user = c->drain_user;
    c->drain_cb = NULL;
  }
  pthread_mutex_unlock(&c->mu);
  if (drained) drained(drain_user, c);
  call_unref(c);
}

static void on_close(gt_rpc_call_t *c) {
  int notify = 0;
  pthread_mutex_lock(&c->mu);
  if (c->close_cancelled) {
    atomic_store(&c->cancelled, 1);
    c->broken = 1;
    free_queue(c);
    notify = !c->finish_called && c->handed;
  }
  pthread_mutex_unlock(&c->mu);
  if (notify && c->rm->m.on_cancel) {
    /* A client whose deadline expires resets the stream (HTTP/2 CANCEL) a little before the
     * server's copy of the deadline (arrival time + grpc-timeout) passes: count a cancel in
     * the last DEADLINE_SLACK_MS as the deadline. */
    gt_rpc_code_t code = gt_rpc_ms_until(c->deadline) <= DEADLINE_SLACK_MS
                             ? GT_RPC_DEADLINE_EXCEEDED
                             : GT_RPC_CANCELLED;
    c->rm->m.on_cancel(c->rm->m.user, c, code);
  }
  call_unref(c); /* the RECV_CLOSE reference */
}

/* ---- accepting calls ---------------------------------------------------------------------- */

static int arm_acceptor(acceptor_t *a) {
  a->call = NULL;
  grpc_metadata_array_init(&a->md);
  grpc_call_error e = grpc_server_request_registered_call(
      a->srv->server, a->rm->handle, &a->call, &a->deadline, &a->md, NULL, a->srv->cq,
      a->srv->cq, &a->tag);
  if (e != GRPC_CALL_OK) {
    grpc_metadata_array_destroy(&a->md);
    return -1;
  }
  return 0;
}

static char *slice_dup(grpc_slice s) {
  size_t n = GRPC_SLICE_LENGTH(s);
  char *p = malloc(n + 1);
  if (!p) return NULL;
  memcpy(p, GRPC_SLICE_START_PTR(s), n);
  p[n] = '\0';
  return p;
}

/* The call's "authorization" metadata is the server's token (compared in constant time). */
static int call_authorized(const gt_rpc_server_t *s, const grpc_metadata_array *md) {
  if (!s->auth_token) return 1;
  const size_t want = strlen(s->auth_token);
  for (size_t i = 0; i < md->count; i++) {
    const grpc_slice k = md->metadata[i].key, v = md->metadata[i].value;
    if (GRPC_SLICE_LENGTH(k) != 13 || memcmp(GRPC_SLICE_START_PTR(k), "authorization", 13)) continue;
    if (GRPC_SLICE_LENGTH(v) != want) return 0;
    unsigned char diff = 0;
    for (size_t j = 0; j < want; j++) diff |= GRPC_SLICE_START_PTR(v)[j] ^ (unsigned char)s->auth_token[j];
    return diff == 0;
  }
  return 0;
}

/* Turns an accepted call into a gt_rpc_call_t and runs the handler (cq thread). */
static void start_call(acceptor_t *a) {
  gt_rpc_server_t *s = a->srv;
  if (!call_authorized(s, &a->md)) {
    GT_LOG_WARN("grpc server: call to %s refused: missing or wrong token (UNAUTHENTICATED)", a->rm->m.name);
    grpc_call_cancel_with_status(a->call, GRPC_STATUS_UNAUTHENTICATED, "missing or wrong authorization token", NULL);
    grpc_call_unref(a->call);
    grpc_metadata_array_destroy(&a->md);
    return;
  }
  gt_rpc_call_t *c = calloc(1, sizeof *c);
  if (!c) {
    grpc_call_cancel_with_status(a->call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory", NULL);
    grpc_call_unref(a->call);
    grpc_metadata_array_destroy(&a->md);
    return;
  }
  pthread_mutex_init(&c->mu, NULL);
  c->srv = s;
  c->rm = a->rm;
  c->id = atomic_fetch_add(&g_next_call_id, 1);
  c->call = a->call;
  c->deadline = a->deadline;
  c->send_tag = (tag_t){TAG_SEND, c};
  c->close_tag = (tag_t){TAG_CLOSE, c};
  c->refs = 2; /* app + RECV_CLOSE */
  if (a->md.count) {
    c->md_keys = calloc(a->md.count, sizeof(char *));
    c->md_vals = calloc(a->md.count, sizeof(char *));
    if (c->md_keys && c->md_vals) {
      for (size_t i = 0; i < a->md.count; i++) {
        c->md_keys[i] = slice_dup(a->md.metadata[i].key);
        c->md_vals[i] = slice_dup(a->md.metadata[i].value);
        c->n_md++;
      }
    }
  }
  grpc_metadata_array_destroy(&a->md);
  pthread_mutex_lock(&s->mu);
  s->live_calls++;
  pthread_mutex_unlock(&s->mu);

  grpc_op op;
  memset(&op, 0, sizeof op);
  op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
  op.data.recv_close_on_server.cancelled = &c->close_cancelled;
  if (grpc_call_start_batch(c->call, &op, 1, &c->close_tag, NULL) != GRPC_CALL_OK) {
    GT_LOG_ERROR("grpc recv-close batch failed call=%llu", (unsigned long long)c->id);
    c->refs--;
    c->broken = 1;
    atomic_store(&c->cancelled, 1);
  }
  /* the request message: read with a deadline, so a client that sends part of it and stalls
   * does not hold the call (and what it sent) forever */
  grpc_op rop;
  memset(&rop, 0, sizeof rop);
  rop.op = GRPC_OP_RECV_MESSAGE;
  rop.data.recv_message.recv_message = &c->recv_bb;
  c->recv_tag = (tag_t){TAG_RECV_REQ, c};
  c->refs++; /* the RECV_MESSAGE batch */
  if (grpc_call_start_batch(c->call, &rop, 1, &c->recv_tag, NULL) != GRPC_CALL_OK) {
    c->refs--;
    gt_rpc_call_finish(c, GT_RPC_INTERNAL, "cannot read the request message");
    return;
  }
  c->recv_deadline_ms = (int64_t)gt_now_ms() + s->recv_timeout_ms;
  c->wnext = s->recv_wait;
  if (s->recv_wait) s->recv_wait->wprev = c;
  s->recv_wait = c;
}

/* The request message arrived (or the call ended first): run the handler (cq thread). */
static void on_recv_req(gt_rpc_call_t *c, int ok) {
  gt_rpc_server_t *s = c->srv;
  if (c->wprev) c->wprev->wnext = c->wnext;
  else s->recv_wait = c->wnext;
  if (c->wnext) c->wnext->wprev = c->wprev;
  c->wprev = c->wnext = NULL;
  if (ok && c->recv_bb) c->req = gt_rpc_unpack(c->rm->m.request, c->recv_bb);
  if (c->recv_bb) grpc_byte_buffer_destroy(c->recv_bb);
  c->recv_bb = NULL;
  if (c->recv_expired) {
    gt_rpc_call_finish(c, GT_RPC_DEADLINE_EXCEEDED, "request message not received in time");
  } else if (!c->req) {
    gt_rpc_call_finish(c, GT_RPC_INVALID_ARGUMENT,
                       ok ? "request is not a valid protobuf message" : "no request message");
  } else {
    pthread_mutex_lock(&c->mu);
    c->handed = 1;
    pthread_mutex_unlock(&c->mu);
    c->rm->m.handler(c->rm->m.user, c);
  }
  call_unref(c); /* the RECV_MESSAGE reference */
}

/* Ends the calls whose request message did not arrive within recv_timeout_ms (cq thread). */
static void expire_recv(gt_rpc_server_t *s) {
  const int64_t now = (int64_t)gt_now_ms();
  for (gt_rpc_call_t *c = s->recv_wait; c; c = c->wnext) {
    if (c->recv_expired || now < c->recv_deadline_ms) continue;
    c->recv_expired = 1;
    GT_LOG_WARN("grpc call=%llu method=%s: request message not complete after %d ms: ended",
                (unsigned long long)c->id, c->rm->m.name, s->recv_timeout_ms);
    grpc_call_cancel_with_status(c->call, GRPC_STATUS_DEADLINE_EXCEEDED, "request message not received in time",
                                 NULL);
  }
}

static void on_accept(acceptor_t *a, int ok) {
  if (!ok) { /* shutting down: this request was failed */
    grpc_metadata_array_destroy(&a->md);
    free(a);
    return;
  }
  start_call(a);
  if (arm_acceptor(a) != 0) free(a);
}

static int arm_unknown(gt_rpc_server_t *s) {
  unknown_call_t *u = calloc(1, sizeof *u);
  if (!u) return -1;
  u->tag = (tag_t){TAG_UNKNOWN, s};
  grpc_call_details_init(&u->details);
  grpc_metadata_array_init(&u->md);
  if (grpc_server_request_call(s->server, &u->call, &u->details, &u->md, s->cq, s->cq, &u->tag) !=
      GRPC_CALL_OK) {
    grpc_call_details_destroy(&u->details);
    grpc_metadata_array_destroy(&u->md);
    free(u);
    return -1;
  }
  return 0;
}

static void unknown_free(unknown_call_t *u) {
  if (u->call) grpc_call_unref(u->call);
  grpc_call_details_destroy(&u->details);
  grpc_metadata_array_destroy(&u->md);
  free(u);
}

static void on_unknown(gt_rpc_server_t *s, unknown_call_t *u, int ok) {
  if (!ok) {
    unknown_free(u);
    return;
  }
  arm_unknown(s); /* keep one request pending (fails quietly once shutting down) */
  char name[256];
  gt_rpc_slice_to_str(u->details.method, name, sizeof name);
  char msg[320];
  snprintf(msg, sizeof msg, "unknown method %s", name);
  grpc_slice details = grpc_slice_from_copied_string(msg);
  grpc_op ops[3];
  memset(ops, 0, sizeof ops);
  ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
  ops[1].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
  ops[1].data.send_status_from_server.status = GRPC_STATUS_UNIMPLEMENTED;
  ops[1].data.send_status_from_server.status_details = &details;
  ops[2].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
  ops[2].data.recv_close_on_server.cancelled = &u->cancelled;
  u->tag.kind = TAG_UNKNOWN_DONE;
  if (grpc_call_start_batch(u->call, ops, 3, &u->tag, NULL) != GRPC_CALL_OK) unknown_free(u);
  grpc_slice_unref(details);
}

static void *cq_thread(void *arg) {
  gt_rpc_server_t *s = arg;
  int64_t next_scan = (int64_t)gt_now_ms() + RECV_SCAN_MS;
  for (;;) {
    grpc_event ev = grpc_completion_queue_next(s->cq, gt_rpc_deadline_in(RECV_SCAN_MS), NULL);
    if (ev.type == GRPC_QUEUE_SHUTDOWN) break;
    if ((int64_t)gt_now_ms() >= next_scan) {
      expire_recv(s);
      next_scan = (int64_t)gt_now_ms() + RECV_SCAN_MS;
    }
    if (ev.type != GRPC_OP_COMPLETE) continue;
    tag_t *t = ev.tag;
    switch (t->kind) {
      case TAG_ACCEPT: on_accept((acceptor_t *)t, ev.success); break;
      case TAG_RECV_REQ: on_recv_req(t->owner, ev.success); break;
      case TAG_SEND: on_send_done(t->owner, ev.success); break;
      case TAG_CLOSE: on_close(t->owner); break;
      case TAG_UNKNOWN: on_unknown(s, (unknown_call_t *)t, ev.success); break;
      case TAG_UNKNOWN_DONE: unknown_free((unknown_call_t *)t); break;
      case TAG_SHUTDOWN:
        pthread_mutex_lock(&s->mu);
        s->shutdown_notified = 1;
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
        break;
      default: break;
    }
  }
  return NULL;
}

/* ---- server ------------------------------------------------------------------------------- */

int gt_rpc_server_create(const gt_rpc_server_opts_t *opts, gt_rpc_server_t **out, gt_err_t *err) {
  *out = NULL;
  gt_rpc_server_t *s = calloc(1, sizeof *s);
  if (!s) return gt_err_set(err, GT_ENOMEM, "grpc server: out of memory");
  gt_rpc_global_init();
  int max_msg = opts && opts->max_message_bytes > 0 ? opts->max_message_bytes : 64 << 20;
  s->recv_timeout_ms = opts && opts->recv_timeout_ms > 0 ? opts->recv_timeout_ms : 30000;
  if (opts && opts->auth_token && opts->auth_token[0]) {
    size_t n = strlen(opts->auth_token) + 8;
    if ((s->auth_token = malloc(n))) snprintf(s->auth_token, n, "Bearer %s", opts->auth_token);
  }
  if (opts && opts->tls_cert_pem && opts->tls_key_pem) {
    s->tls_cert = strdup(opts->tls_cert_pem);
    s->tls_key = strdup(opts->tls_key_pem);
    if (opts->tls_client_ca_pem) s->tls_ca = strdup(opts->tls_client_ca_pem);
  }
  if ((opts && opts->auth_token && opts->auth_token[0] && !s->auth_token) ||
      (opts && opts->tls_cert_pem && opts->tls_key_pem && (!s->tls_cert || !s->tls_key || (opts->tls_client_ca_pem && !s->tls_ca)))) {
    free(s->auth_token), free(s->tls_cert), free(s->tls_key), free(s->tls_ca), free(s);
    gt_rpc_global_shutdown();
    return gt_err_set(err, GT_ENOMEM, "grpc server: out of memory");
  }
  grpc_arg args[2];
  args[0].type = GRPC_ARG_INTEGER;
  args[0].key = GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
  args[0].value.integer = max_msg;
  /* no SO_REUSEPORT: a second engine on a busy port must fail, not share its traffic */
  args[1].type = GRPC_ARG_INTEGER;
  args[1].key = GRPC_ARG_ALLOW_REUSEPORT;
  args[1].value.integer = 0;
  grpc_channel_args ca = {2, args};
  s->server = grpc_server_create(&ca, NULL);
  s->cq = grpc_completion_queue_create_for_next(NULL);
  grpc_server_register_completion_queue(s->server, s->cq, NULL);
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->cv, NULL);
  s->shutdown_tag = (tag_t){TAG_SHUTDOWN, s};
  *out = s;
  return GT_OK;
}

int gt_rpc_server_add_method(gt_rpc_server_t *s, const gt_rpc_method_t *m, gt_err_t *err) {
  if (!m || !m->name || !m->request || !m->handler)
    return gt_err_set(err, GT_EINVAL, "grpc server: method needs name, request type, handler");
  if (s->thread_started)
    return gt_err_set(err, GT_EINVAL, "grpc server: %s added after start", m->name);
  if (s->n_methods == MAX_METHODS)
    return gt_err_set(err, GT_ERANGE, "grpc server: more than %d methods", MAX_METHODS);
  reg_method_t *rm = &s->methods[s->n_methods];
  rm->m = *m;
  rm->handle = grpc_server_register_method(s->server, m->name, NULL,
                                           GRPC_SRM_PAYLOAD_NONE, 0);
  if (!rm->handle) return gt_err_set(err, GT_EINVAL, "grpc server: cannot register %s", m->name);
  s->n_methods++;
  return GT_OK;
}

int gt_rpc_server_start(gt_rpc_server_t *s, const char *addr, int *port, gt_err_t *err) {
  if (s->thread_started) return gt_err_set(err, GT_EINVAL, "grpc server: already started");
  grpc_server_credentials *cr;
  if (s->tls_cert) {
    grpc_ssl_pem_key_cert_pair kp = {s->tls_key, s->tls_cert};
    cr = grpc_ssl_server_credentials_create_ex(
        s->tls_ca, &kp, 1,
        s->tls_ca ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE,
        NULL);
  } else {
    cr = grpc_insecure_server_credentials_create();
  }
  if (!cr) return gt_err_set(err, GT_EINVAL, "grpc server: bad TLS certificate or key");
  int p = grpc_server_add_http2_port(s->server, addr, cr);
  grpc_server_credentials_release(cr);
  if (p == 0) return gt_err_set(err, GT_EIO, "grpc server: cannot listen on %s", addr);
  grpc_server_start(s->server);
  for (int i = 0; i < s->n_methods; i++) {
    for (int k = 0; k < ACCEPTORS_PER_METHOD; k++) {
      acceptor_t *a = calloc(1, sizeof *a);
      if (!a) return gt_err_set(err, GT_ENOMEM, "grpc server: out of memory");
      a->tag = (tag_t){TAG_ACCEPT, a};
      a->srv = s;
      a->rm = &s->methods[i];
      if (arm_acceptor(a) != 0) {
        free(a);
        return gt_err_set(err, GT_EINTERNAL, "grpc server: request_registered_call failed");
      }
    }
  }
  if (arm_unknown(s) != 0)
    return gt_err_set(err, GT_EINTERNAL, "grpc server: request_call failed");
  if (pthread_create(&s->thread, NULL, cq_thread, s) != 0)
    return gt_err_set(err, GT_EINTERNAL, "grpc server: cannot start the cq thread");
  s->thread_started = 1;
  if (port) *port = p;
  GT_LOG_INFO("grpc server listening addr=%s port=%d methods=%d tls=%s token=%s", addr, p, s->n_methods,
              s->tls_ca ? "mutual" : s->tls_cert ? "server" : "off", s->auth_token ? "required" : "off");
  return GT_OK;
}

/* Frees what a failed request left behind when the cq thread never ran; returns 1 for the
 * shutdown notification. */
static int drain_event(grpc_event ev) {
  tag_t *t = ev.tag;
  switch (t->kind) {
    case TAG_ACCEPT: on_accept((acceptor_t *)t, 0); return 0;
    case TAG_UNKNOWN: unknown_free((unknown_call_t *)t); return 0;
    case TAG_SHUTDOWN: return 1;
    default: return 0;
  }
}

static void add_ms(struct timespec *ts, int64_t ms) {
  ts->tv_sec += ms / 1000;
  ts->tv_nsec += (ms % 1000) * 1000000L;
  if (ts->tv_nsec >= 1000000000L) {
    ts->tv_sec++;
    ts->tv_nsec -= 1000000000L;
  }
}

void gt_rpc_server_shutdown(gt_rpc_server_t *s, int64_t grace_ms) {
  if (!s || s->stopped) return;
  if (!s->thread_started) { /* never started (or start failed): no call was accepted */
    grpc_server_shutdown_and_notify(s->server, s->cq, &s->shutdown_tag);
    grpc_server_cancel_all_calls(s->server);
    for (;;) {
      grpc_event ev = grpc_completion_queue_next(s->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
      if (ev.type != GRPC_OP_COMPLETE) break;
      if (drain_event(ev)) break;
    }
  } else {
    pthread_mutex_lock(&s->mu);
    s->shutting_down = 1;
    pthread_mutex_unlock(&s->mu);
    grpc_server_shutdown_and_notify(s->server, s->cq, &s->shutdown_tag);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    add_ms(&until, grace_ms > 0 ? grace_ms : 0);
    pthread_mutex_lock(&s->mu);
    while (!s->shutdown_notified) {
      if (pthread_cond_timedwait(&s->cv, &s->mu, &until) != 0) break;
    }
    int done = s->shutdown_notified;
    pthread_mutex_unlock(&s->mu);
    if (!done) {
      GT_LOG_WARN("grpc server shutdown: grace over, cancelling live_calls=%d",
                  gt_rpc_server_live_calls(s));
      grpc_server_cancel_all_calls(s->server);
    }
    pthread_mutex_lock(&s->mu);
    while (!s->shutdown_notified || s->live_calls > 0) pthread_cond_wait(&s->cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
  }
  grpc_server_destroy(s->server);
  s->server = NULL;
  grpc_completion_queue_shutdown(s->cq);
  if (s->thread_started) {
    pthread_join(s->thread, NULL);
  } else {
    for (;;) {
      grpc_event ev = grpc_completion_queue_next(s->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
      if (ev.type == GRPC_QUEUE_SHUTDOWN) break;
      if (ev.type == GRPC_OP_COMPLETE) drain_event(ev);
    }
  }
  grpc_completion_queue_destroy(s->cq);
  s->cq = NULL;
  s->stopped = 1;
}

void gt_rpc_server_destroy(gt_rpc_server_t *s) {
  if (!s) return;
  gt_rpc_server_shutdown(s, 0);
  pthread_mutex_destroy(&s->mu);
  pthread_cond_destroy(&s->cv);
  free(s->auth_token);
  free(s->tls_cert);
  free(s->tls_key);
  free(s->tls_ca);
  free(s);
  gt_rpc_global_shutdown();
}

int gt_rpc_server_live_calls(gt_rpc_server_t *s) {
  pthread_mutex_lock(&s->mu);
  int n = s->live_calls;
  pthread_mutex_unlock(&s->mu);
  return n;
}

size_t gt_rpc_server_unsent_bytes(gt_rpc_server_t *s) { return atomic_load(&s->unsent_bytes); }

/* ---- per call ----------------------------------------------------------------------------- */

const ProtobufCMessage *gt_rpc_call_request(const gt_rpc_call_t *c) { return c->req; }
uint64_t gt_rpc_call_id(const gt_rpc_call_t *c) { return c->id; }
const char *gt_rpc_call_method(const gt_rpc_call_t *c) { return c->rm->m.name; }
int64_t gt_rpc_call_deadline_ms(const gt_rpc_call_t *c) { return gt_rpc_ms_until(c->deadline); }
void gt_rpc_call_set_user(gt_rpc_call_t *c, void *user) { c->app_user = user; }
void *gt_rpc_call_user(const gt_rpc_call_t *c) { return c->app_user; }
int gt_rpc_call_is_cancelled(const gt_rpc_call_t *c) {
  return atomic_load(&((gt_rpc_call_t *)c)->cancelled);
}

const char *gt_rpc_call_metadata(const gt_rpc_call_t *c, const char *key) {
  for (size_t i = 0; i < c->n_md; i++)
    if (c->md_keys[i] && strcmp(c->md_keys[i], key) == 0) return c->md_vals[i];
  return NULL;
}

int gt_rpc_call_send(gt_rpc_call_t *c, ProtobufCMessage *msg, unsigned flags) {
  if (!msg) return GT_EINVAL;
  pthread_mutex_lock(&c->mu);
  int rc = GT_OK;
  if (c->finish_called || (c->rm->m.kind == GT_RPC_UNARY && c->n_msgs > 0)) {
    rc = GT_EINVAL;
  } else if (c->broken || atomic_load(&c->cancelled)) {
    rc = GT_ECANCELLED;
  }
  if (rc != GT_OK) {
    pthread_mutex_unlock(&c->mu);
    protobuf_c_message_free_unpacked(msg, NULL);
    return rc;
  }
  c->n_msgs++;
  const size_t bytes = protobuf_c_message_get_packed_size(msg) + 5; /* + the gRPC frame prefix */
  qitem_t *tail = c->tail;
  if (tail && c->rm->m.merge && !(tail->flags & GT_RPC_SEND_NO_MERGE) && !(flags & GT_RPC_SEND_NO_MERGE) &&
      tail->bytes + bytes <= GT_RPC_MERGE_MAX_BYTES && c->rm->m.merge(c->rm->m.user, tail->msg, msg)) {
    c->stats.merged_msgs++;
    tail->bytes += bytes;
    c->queued_bytes += bytes;
    protobuf_c_message_free_unpacked(msg, NULL);
  } else {
    qitem_t *it = malloc(sizeof *it);
    if (!it) {
      pthread_mutex_unlock(&c->mu);
      protobuf_c_message_free_unpacked(msg, NULL);
      return GT_ENOMEM;
    }
    it->msg = msg;
    it->flags = flags;
    it->bytes = bytes;
    c->queued_bytes += bytes;
    it->next = NULL;
    if (tail) tail->next = it;
    else c->head = it;
    c->tail = it;
  }
  pump_locked(c);
  pthread_mutex_unlock(&c->mu);
  return GT_OK;
}

/* The application's end of c (finish or abort): 1, or 0 if it ended c already (a bug in the
 * caller: logged and ignored). Disarms the drain callback: nothing more to resume. Caller holds
 * c->mu. */
static int end_once_locked(gt_rpc_call_t *c) {
  if (c->finish_called) {
    GT_LOG_ERROR("grpc call finished twice call=%llu", (unsigned long long)c->id);
    return 0;
  }
  c->finish_called = 1;
  c->drain_cb = NULL;
  return 1;
}

void gt_rpc_call_finish(gt_rpc_call_t *c, gt_rpc_code_t code, const char *message) {
  pthread_mutex_lock(&c->mu);
  if (!end_once_locked(c)) {
    pthread_mutex_unlock(&c->mu);
    return;
  }
  c->fin_code = code;
  c->fin_msg = message ? strdup(message) : NULL;
  pump_locked(c);
  pthread_mutex_unlock(&c->mu);
  call_unref(c);
}

size_t gt_rpc_call_unsent_bytes(gt_rpc_call_t *c) {
  pthread_mutex_lock(&c->mu);
  size_t n = unsent_locked(c);
  pthread_mutex_unlock(&c->mu);
  return n;
}

int gt_rpc_call_on_drain(gt_rpc_call_t *c, size_t low, gt_rpc_drain_fn cb, void *user) {
  pthread_mutex_lock(&c->mu);
  int armed = 0;
  if (unsent_locked(c) > low && !c->broken) {
    c->drain_cb = cb;
    c->drain_user = user;
    c->drain_low = low;
    armed = 1;
  }
  pthread_mutex_unlock(&c->mu);
  return armed;
}

void gt_rpc_call_abort(gt_rpc_call_t *c, gt_rpc_code_t code, const char *message) {
  pthread_mutex_lock(&c->mu);
  if (!end_once_locked(c)) {
    pthread_mutex_unlock(&c->mu);
    return;
  }
  c->broken = 1;
  free_queue(c);
  pthread_mutex_unlock(&c->mu);
  /* fails the send in flight (its buffer is freed in on_send_done) and ends the stream */
  grpc_call_cancel_with_status(c->call, (grpc_status_code)code, message ? message : "aborted", NULL);
  call_unref(c);
}

void gt_rpc_call_set_trailer(gt_rpc_call_t *c, const char *key, const char *value) {
  pthread_mutex_lock(&c->mu);
  if (!c->finish_called) {
    free(c->trail_key);
    free(c->trail_val);
    c->trail_key = key ? strdup(key) : NULL;
    c->trail_val = value ? strdup(value) : NULL;
  }
  pthread_mutex_unlock(&c->mu);
}

void gt_rpc_call_reply(gt_rpc_call_t *c, ProtobufCMessage *msg) {
  int rc = gt_rpc_call_send(c, msg, GT_RPC_SEND_NO_MERGE);
  if (rc == GT_OK || rc == GT_ECANCELLED) gt_rpc_call_finish(c, GT_RPC_OK, NULL);
  else gt_rpc_call_finish(c, GT_RPC_INTERNAL, "reply could not be queued");
}

void gt_rpc_call_stats(const gt_rpc_call_t *c, gt_rpc_call_stats_t *out) {
  pthread_mutex_lock(&((gt_rpc_call_t *)c)->mu);
  *out = c->stats;
  pthread_mutex_unlock(&((gt_rpc_call_t *)c)->mu);
}
