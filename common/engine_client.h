/* common/engine_client.h — C client for gantry.v1.Engine (used by gantry-router, the CLI and
 * tests). Unary calls block the calling thread; Generate is event-driven: responses arrive on
 * the client's queue thread (see common/grpc_client.h for the threading model). */
#ifndef GANTRY_COMMON_ENGINE_CLIENT_H
#define GANTRY_COMMON_ENGINE_CLIENT_H

#include <stdbool.h>

#include "common/engine_rpc.h" /* EC_METHOD_* */
#include "common/grpc_client.h"
#include "gantry/v1/engine.pb-c.h"

typedef struct ec_client ec_client_t;
typedef gt_rpc_stream_t ec_stream_t;

/* Per-call options; a NULL pointer means all defaults. */
typedef struct ec_call_opts {
  int64_t timeout_ms;      /* <= 0: no deadline */
  const char *request_id;  /* sent as x-request-id; Generate defaults to req->request_id */
  const gt_rpc_md_t *md;   /* extra metadata */
  size_t n_md;
  bool manual_read;        /* Generate: read the next response only on ec_stream_read_next */
} ec_call_opts_t;

/* Opens a client for target ("host:port"). opts may be NULL (own queue thread). */
int ec_open(const char *target, const gt_rpc_client_opts_t *opts, ec_client_t **out,
            gt_err_t *err);
/* Cancels open streams, waits for their on_done, frees everything. NULL is a no-op. */
void ec_close(ec_client_t *c);
/* The underlying glue client (e.g. for gt_rpc_client_poll with own_thread = 0). */
gt_rpc_client_t *ec_rpc(ec_client_t *c);

/* Blocking unary calls. On GT_RPC_OK *out is a new message (free with
 * protobuf_c_message_free_unpacked(&(*out)->base, NULL)); otherwise *out is NULL and st
 * (optional) holds the code and message. Return the status code. */
gt_rpc_code_t ec_info(ec_client_t *c, const ec_call_opts_t *o, Gantry__V1__InfoResponse **out,
                      gt_rpc_status_t *st);
gt_rpc_code_t ec_health(ec_client_t *c, const ec_call_opts_t *o,
                        Gantry__V1__HealthResponse **out, gt_rpc_status_t *st);
gt_rpc_code_t ec_tokenize(ec_client_t *c, const Gantry__V1__TokenizeRequest *req,
                          const ec_call_opts_t *o, Gantry__V1__TokenizeResponse **out,
                          gt_rpc_status_t *st);

/* Called for every GenerateResponse, in order (queue thread); r belongs to the callback
 * (free with protobuf_c_message_free_unpacked(&r->base, NULL)). Must not block. */
typedef void (*ec_response_fn)(void *user, ec_stream_t *s, Gantry__V1__GenerateResponse *r);
/* Called once when the stream ends, after the last response (queue thread). A clean stream
 * ends with GT_RPC_OK after a Final response. */
typedef void (*ec_done_fn)(void *user, ec_stream_t *s, const gt_rpc_status_t *st);

/* Starts Generate (any thread). req is serialized before return. On GT_OK *out holds the
 * caller's reference: give it back with ec_stream_release() exactly once. */
int ec_generate(ec_client_t *c, const Gantry__V1__GenerateRequest *req, const ec_call_opts_t *o,
                ec_response_fn on_response, ec_done_fn on_done, void *user, ec_stream_t **out,
                gt_err_t *err);
/* Cancels a stream (any thread, idempotent); on_done follows with CANCELLED if still open. */
void ec_stream_cancel(ec_stream_t *s);
/* manual_read streams: read the next response (any thread, once per delivered response). */
void ec_stream_read_next(ec_stream_t *s);
/* Gives back the caller's reference (any time, also inside on_done). */
void ec_stream_release(ec_stream_t *s);

#endif
