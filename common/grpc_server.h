/* common/grpc_server.h — a gRPC server over the C core with one completion-queue thread.
 *
 * Threads: the server's cq thread runs every handler and every on_cancel callback. All
 * gt_rpc_call_* functions below are thread-safe: the engine's scheduler thread sends and
 * finishes calls directly. A send while another send of the same call is in flight is queued
 * and merged with the queued tail (method->merge), so each call has at most one outstanding
 * send and a slow client receives fewer, larger messages instead of an unbounded backlog; a
 * merged message stops growing at GT_RPC_MERGE_MAX_BYTES (the next one starts a new message), so
 * a client converts at most that much of one message at a time.
 *
 * Call ownership: the application receives each call in its handler holding one reference
 * and must give it back exactly once with gt_rpc_call_finish() or gt_rpc_call_reply() —
 * also after the call was cancelled (then nothing is sent). The glue keeps the call alive
 * while gRPC still has operations on it and frees everything when the last reference goes.
 * See common/GRPC.md. */
#ifndef GANTRY_COMMON_GRPC_SERVER_H
#define GANTRY_COMMON_GRPC_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "common/grpc_util.h"

#define GT_RPC_MERGE_MAX_BYTES (64u << 10) /* packed bytes of one merged message */

typedef struct gt_rpc_server gt_rpc_server_t;
typedef struct gt_rpc_call gt_rpc_call_t;

typedef enum { GT_RPC_UNARY = 0, GT_RPC_SERVER_STREAMING = 1 } gt_rpc_kind_t;

/* New call (cq thread). The request is owned by the call (gt_rpc_call_request). Must not
 * block: hand long work to another thread. The call must eventually be finished. */
typedef void (*gt_rpc_handler_fn)(void *user, gt_rpc_call_t *call);

/* The peer went away, the deadline passed or the server is shutting down (cq thread),
 * before the application finished the call. code is GT_RPC_CANCELLED or
 * GT_RPC_DEADLINE_EXCEEDED (a cancel within 100 ms of the deadline counts as the deadline).
 * `call` stays valid during the callback, but the application may be finishing it
 * concurrently on another thread: post a wake-up (call id, eventfd) and let the owning
 * thread check gt_rpc_call_is_cancelled() on the calls it still holds, then finish them. */
typedef void (*gt_rpc_cancel_fn)(void *user, gt_rpc_call_t *call, gt_rpc_code_t code);

/* Merges queued message `next` into the queued message `into` (next was sent after into).
 * Returns 1 if merged (the glue then frees `next`), 0 to keep both. Runs on the sending
 * thread under the call's lock: no calls back into the glue. */
typedef int (*gt_rpc_merge_fn)(void *user, ProtobufCMessage *into, ProtobufCMessage *next);

typedef struct gt_rpc_method {
  const char *name;                         /* "/gantry.v1.Engine/Generate" */
  gt_rpc_kind_t kind;
  const ProtobufCMessageDescriptor *request; /* request type; bad bytes -> INVALID_ARGUMENT */
  gt_rpc_handler_fn handler;
  gt_rpc_cancel_fn on_cancel;               /* optional */
  gt_rpc_merge_fn merge;                    /* optional, streaming only */
  void *user;
} gt_rpc_method_t;

typedef struct gt_rpc_server_opts {
  int max_message_bytes;  /* receive limit; 0 -> 64 MiB */
  int recv_timeout_ms;    /* a call whose request message is not complete this long after its
                             headers is ended with DEADLINE_EXCEEDED; 0 -> 30000 */
  const char *auth_token; /* not NULL: every call must carry "authorization: Bearer <token>",
                             else it ends with UNAUTHENTICATED before its handler runs (copied) */
  /* TLS (PEM text, copied): a certificate and its key make the port TLS; a client CA as well
   * makes it mutual TLS (a client without a certificate signed by that CA cannot connect) */
  const char *tls_cert_pem, *tls_key_pem, *tls_client_ca_pem;
} gt_rpc_server_opts_t;

/* Creates a server (not yet listening). opts may be NULL. Returns GT_OK or GT_E*. */
int gt_rpc_server_create(const gt_rpc_server_opts_t *opts, gt_rpc_server_t **out, gt_err_t *err);

/* Registers a method (copied; strings must outlive the server). Before gt_rpc_server_start. */
int gt_rpc_server_add_method(gt_rpc_server_t *s, const gt_rpc_method_t *m, gt_err_t *err);

/* Binds addr ("0.0.0.0:50051", "127.0.0.1:0" for a free port), starts the cq thread and
 * begins accepting calls. *port (optional) receives the bound port. */
int gt_rpc_server_start(gt_rpc_server_t *s, const char *addr, int *port, gt_err_t *err);

/* Graceful shutdown: stop accepting calls, let running calls finish for up to grace_ms,
 * then cancel the rest (their on_cancel fires). Returns once every call has been finished
 * by the application and released, and the cq thread has exited. Must not be called from a
 * handler, from on_cancel, or from the thread that has to finish the remaining calls. */
void gt_rpc_server_shutdown(gt_rpc_server_t *s, int64_t grace_ms);

/* Shuts down (grace 0) if still running and frees the server. NULL is a no-op. */
void gt_rpc_server_destroy(gt_rpc_server_t *s);

/* Calls alive (accepted and not yet fully released). For tests and metrics. */
int gt_rpc_server_live_calls(gt_rpc_server_t *s);

/* Output of every call given to send and not yet taken by gRPC's transport (the sum of
 * gt_rpc_call_unsent_bytes over live calls, also over calls already finished whose queue still
 * waits for a slow peer). Any thread. For metrics and tests. */
size_t gt_rpc_server_unsent_bytes(gt_rpc_server_t *s);

/* ---- per call (thread-safe unless noted) ---------------------------------------------- */

/* The parsed request (owned by the call; valid until the call is released). */
const ProtobufCMessage *gt_rpc_call_request(const gt_rpc_call_t *c);
/* Unique id of this call within the process (never reused). */
uint64_t gt_rpc_call_id(const gt_rpc_call_t *c);
/* Method name the call was made to. */
const char *gt_rpc_call_method(const gt_rpc_call_t *c);
/* Milliseconds left until the client's deadline (0 if passed), INT64_MAX if none. */
int64_t gt_rpc_call_deadline_ms(const gt_rpc_call_t *c);
/* Value of request metadata `key` (call-owned copy, NUL-terminated) or NULL. */
const char *gt_rpc_call_metadata(const gt_rpc_call_t *c, const char *key);
/* Application pointer attached to the call (not freed by the glue). */
void gt_rpc_call_set_user(gt_rpc_call_t *c, void *user);
void *gt_rpc_call_user(const gt_rpc_call_t *c);
/* 1 once the call was cancelled (peer gone, deadline, shutdown): sends are dropped. */
int gt_rpc_call_is_cancelled(const gt_rpc_call_t *c);

#define GT_RPC_SEND_NO_MERGE 1u /* never merge this message (e.g. the Final message) */

/* Queues msg for sending and takes ownership of it: it must be freeable with
 * protobuf_c_message_free_unpacked(msg, NULL) (everything malloc'd, empty strings may be
 * protobuf_c_empty_string). Sends at once if nothing is in flight, otherwise merges into or
 * queues behind the pending tail. Returns GT_OK, GT_ECANCELLED (call cancelled: msg freed)
 * or GT_EINVAL (already finished, or a second message on a unary call: msg freed). */
int gt_rpc_call_send(gt_rpc_call_t *c, ProtobufCMessage *msg, unsigned flags);

/* Sends the status after every queued message and gives back the application's reference:
 * `c` must not be used afterwards. message may be NULL. Always succeeds (after a
 * cancellation it only releases). */
void gt_rpc_call_finish(gt_rpc_call_t *c, gt_rpc_code_t code, const char *message);

/* Bytes given to send and not yet taken by gRPC's transport: the queued messages (as sent,
 * before merging: an upper bound) plus the one in flight. A client that does not read keeps
 * this growing; the application bounds it by pausing its producer (gt_rpc_call_on_drain). */
size_t gt_rpc_call_unsent_bytes(gt_rpc_call_t *c);

/* Called on the cq thread, once, when a completed send leaves at most `low` unsent bytes.
 * The call is valid during the callback; post a wake-up (call id) like on_cancel does. */
typedef void (*gt_rpc_drain_fn)(void *user, gt_rpc_call_t *call);
/* Arms cb (replacing an armed one). Returns 1 if armed, 0 if the call already has at most
 * `low` unsent bytes (or is broken): then cb will not run and the caller need not wait.
 * gt_rpc_call_finish and gt_rpc_call_abort disarm it. */
int gt_rpc_call_on_drain(gt_rpc_call_t *c, size_t low, gt_rpc_drain_fn cb, void *user);

/* Ends the call now with `code`: drops every queued message, cancels the stream (the message
 * in flight is never delivered) and gives back the application's reference like
 * gt_rpc_call_finish. For a peer that does not read, whose queue would never drain. */
void gt_rpc_call_abort(gt_rpc_call_t *c, gt_rpc_code_t code, const char *message);

/* One trailing metadata pair (copied) sent with the status of gt_rpc_call_finish, e.g.
 * GT_RPC_MD_PARAM with the request field an INVALID_ARGUMENT is about. Call before finish. */
void gt_rpc_call_set_trailer(gt_rpc_call_t *c, const char *key, const char *value);

/* Unary convenience: gt_rpc_call_send(c, msg, NO_MERGE) + gt_rpc_call_finish(c, OK, NULL). */
void gt_rpc_call_reply(gt_rpc_call_t *c, ProtobufCMessage *msg);

/* Statistics of one call (for tests and logs). */
typedef struct gt_rpc_call_stats {
  uint64_t sent_msgs;   /* messages handed to gRPC */
  uint64_t merged_msgs; /* messages merged into a queued one */
} gt_rpc_call_stats_t;
void gt_rpc_call_stats(const gt_rpc_call_t *c, gt_rpc_call_stats_t *out);

#endif
