/* common/grpc_client.h — a gRPC client over the C core: blocking unary calls and
 * event-driven server-streaming calls.
 *
 * Threads: a client owns one channel and one completion queue. Stream callbacks run on the
 * thread that drives that queue: either a thread the client starts itself
 * (opts.own_thread = 1) or the caller, through gt_rpc_client_poll(). One client carries many
 * concurrent streams (HTTP/2 multiplexing). Callbacks must not block: the next message of a
 * stream is read only after its callback returns, so a slow callback slows only that stream
 * (HTTP/2 flow control pushes back on the server, whose glue then merges deltas).
 * See common/GRPC.md. */
#ifndef GANTRY_COMMON_GRPC_CLIENT_H
#define GANTRY_COMMON_GRPC_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "common/grpc_util.h"

typedef struct gt_rpc_client gt_rpc_client_t;
typedef struct gt_rpc_stream gt_rpc_stream_t;

typedef struct gt_rpc_client_opts {
  int own_thread;          /* 1: start a thread that drives the queue; 0: call _poll yourself */
  int max_message_bytes;   /* receive limit; 0 -> 64 MiB */
  int flow_window_bytes;   /* >0: fixed HTTP/2 stream window, BDP probing off; 0 default */
  const char *auth_token;  /* not NULL: sent as "authorization: Bearer <token>" on every call */
  /* TLS (PEM text): a CA makes the channel TLS, checking the server's certificate against it;
   * a certificate and key as well are presented to the server (mutual TLS) */
  const char *tls_ca_pem, *tls_cert_pem, *tls_key_pem;
  const char *tls_server_name; /* name the server's certificate must carry (default: the target's host) */
} gt_rpc_client_opts_t;

/* Creates a client for target ("127.0.0.1:50051", "dns:///engine:50051"); an insecure channel
 * unless opts name a TLS CA; connects lazily. opts may be NULL (own_thread = 1). */
int gt_rpc_client_create(const char *target, const gt_rpc_client_opts_t *opts,
                         gt_rpc_client_t **out, gt_err_t *err);

/* Cancels every open stream (their on_done fires with CANCELLED), waits for them to end,
 * stops the thread and frees the client. Streams not yet released by the application are
 * freed here too: do not touch them afterwards. Not from a callback. NULL is a no-op. */
void gt_rpc_client_destroy(gt_rpc_client_t *c);

/* Drives the queue on the calling thread for up to timeout_ms (0: only what is ready;
 * <0: until one event), running callbacks. Returns the number of events handled.
 * Only for clients created with own_thread = 0, and from one thread at a time. */
int gt_rpc_client_poll(gt_rpc_client_t *c, int64_t timeout_ms);

/* Blocking unary call on the calling thread (any thread; does not use the client's queue).
 * On GT_RPC_OK, *resp is a new message of type resp_type (free with
 * protobuf_c_message_free_unpacked(*resp, NULL)); otherwise *resp is NULL and st tells why.
 * timeout_ms <= 0: no deadline. Returns the status code. */
gt_rpc_code_t gt_rpc_client_unary(gt_rpc_client_t *c, const char *method,
                                  const ProtobufCMessage *req,
                                  const ProtobufCMessageDescriptor *resp_type, int64_t timeout_ms,
                                  const gt_rpc_md_t *md, size_t n_md, ProtobufCMessage **resp,
                                  gt_rpc_status_t *st);

/* A message arrived (queue thread). msg is the callback's to keep or free
 * (protobuf_c_message_free_unpacked(msg, NULL)). */
typedef void (*gt_rpc_stream_msg_fn)(void *user, gt_rpc_stream_t *s, ProtobufCMessage *msg);
/* The stream ended (queue thread), exactly once per started stream, after its last message.
 * st->code is GT_RPC_OK on a clean end. */
typedef void (*gt_rpc_stream_done_fn)(void *user, gt_rpc_stream_t *s, const gt_rpc_status_t *st);

typedef struct gt_rpc_stream_args {
  const char *method;                         /* "/gantry.v1.Engine/Generate" */
  const ProtobufCMessage *request;            /* serialized before return; not retained */
  const ProtobufCMessageDescriptor *response; /* type of each streamed message */
  int64_t timeout_ms;                         /* <= 0: no deadline */
  const gt_rpc_md_t *md;                      /* request metadata (copied) */
  size_t n_md;
  gt_rpc_stream_msg_fn on_msg;
  gt_rpc_stream_done_fn on_done;
  void *user;
  int manual_read; /* 1: after each message the next is read only on gt_rpc_stream_read_next;
                      unread data keeps the HTTP/2 window closed, so the server is held back.
                      A call that fails (status not OK) ends at once: on_done comes without
                      waiting for reads, and unread messages are dropped */
} gt_rpc_stream_args_t;

/* Starts a server-streaming (or unary, read as a one-message stream) call. Callable from
 * any thread, including callbacks. On GT_OK *out holds the application's reference: release
 * it with gt_rpc_stream_release() exactly once (at any time, even inside on_done; callbacks
 * keep coming until on_done either way). */
int gt_rpc_client_stream(gt_rpc_client_t *c, const gt_rpc_stream_args_t *a, gt_rpc_stream_t **out,
                         gt_err_t *err);

/* Cancels the stream (any thread, idempotent): on_done follows with CANCELLED unless the
 * stream already ended. */
void gt_rpc_stream_cancel(gt_rpc_stream_t *s);

/* manual_read streams: read the next message (any thread; once per delivered message; a no-op
 * once the stream's reads have ended). */
void gt_rpc_stream_read_next(gt_rpc_stream_t *s);

/* Gives back the application's reference; callbacks keep running until on_done. */
void gt_rpc_stream_release(gt_rpc_stream_t *s);

/* User pointer given at start. */
void *gt_rpc_stream_user(const gt_rpc_stream_t *s);

/* Ends the channel's reconnect backoff: the next call (or a connection in backoff) connects now
 * (any thread). Health checks call it so a restarted server is found within one check. */
void gt_rpc_client_reset_backoff(gt_rpc_client_t *c);

/* Streams started and not yet fully released (for tests and metrics). */
int gt_rpc_client_live_streams(gt_rpc_client_t *c);

#endif
