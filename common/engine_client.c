/* common/engine_client.c — typed wrappers over the gRPC client glue for gantry.v1.Engine. */
#include "common/engine_client.h"

#include <stdlib.h>
#include <string.h>

#define MAX_MD 16

struct ec_client {
  gt_rpc_client_t *rpc;
};

/* Per-stream trampoline from the generic callbacks to the typed ones. */
typedef struct gen_ctx {
  ec_response_fn on_response;
  ec_done_fn on_done;
  void *user;
} gen_ctx_t;

int ec_open(const char *target, const gt_rpc_client_opts_t *opts, ec_client_t **out,
            gt_err_t *err) {
  *out = NULL;
  ec_client_t *c = calloc(1, sizeof *c);
  if (!c) return gt_err_set(err, GT_ENOMEM, "engine client: out of memory");
  int rc = gt_rpc_client_create(target, opts, &c->rpc, err);
  if (rc != GT_OK) {
    free(c);
    return rc;
  }
  *out = c;
  return GT_OK;
}

void ec_close(ec_client_t *c) {
  if (!c) return;
  gt_rpc_client_destroy(c->rpc);
  free(c);
}

gt_rpc_client_t *ec_rpc(ec_client_t *c) { return c->rpc; }

/* Builds the metadata list: x-request-id (if any) + o->md. Returns the count or -1. */
static int build_md(const ec_call_opts_t *o, const char *default_id, gt_rpc_md_t *md) {
  int n = 0;
  const char *rid = o && o->request_id ? o->request_id : default_id;
  if (rid && rid[0]) md[n++] = (gt_rpc_md_t){"x-request-id", rid};
  size_t extra = o ? o->n_md : 0;
  if (extra > (size_t)(MAX_MD - n)) return -1;
  for (size_t i = 0; i < extra; i++) md[n++] = o->md[i];
  return n;
}

static gt_rpc_code_t unary(ec_client_t *c, const char *method, const ProtobufCMessage *req,
                           const ProtobufCMessageDescriptor *resp_type, const ec_call_opts_t *o,
                           ProtobufCMessage **out, gt_rpc_status_t *st) {
  gt_rpc_md_t md[MAX_MD];
  int n = build_md(o, NULL, md);
  if (n < 0) {
    *out = NULL;
    return gt_rpc_status_set(st, GT_RPC_INVALID_ARGUMENT, "%s: more than %d metadata entries",
                             method, MAX_MD);
  }
  return gt_rpc_client_unary(c->rpc, method, req, resp_type, o ? o->timeout_ms : 0, md,
                             (size_t)n, out, st);
}

gt_rpc_code_t ec_info(ec_client_t *c, const ec_call_opts_t *o, Gantry__V1__InfoResponse **out,
                      gt_rpc_status_t *st) {
  Gantry__V1__InfoRequest req = GANTRY__V1__INFO_REQUEST__INIT;
  return unary(c, EC_METHOD_INFO, &req.base, &gantry__v1__info_response__descriptor, o,
               (ProtobufCMessage **)out, st);
}

gt_rpc_code_t ec_health(ec_client_t *c, const ec_call_opts_t *o,
                        Gantry__V1__HealthResponse **out, gt_rpc_status_t *st) {
  Gantry__V1__HealthRequest req = GANTRY__V1__HEALTH_REQUEST__INIT;
  return unary(c, EC_METHOD_HEALTH, &req.base, &gantry__v1__health_response__descriptor, o,
               (ProtobufCMessage **)out, st);
}

gt_rpc_code_t ec_tokenize(ec_client_t *c, const Gantry__V1__TokenizeRequest *req,
                          const ec_call_opts_t *o, Gantry__V1__TokenizeResponse **out,
                          gt_rpc_status_t *st) {
  return unary(c, EC_METHOD_TOKENIZE, &req->base, &gantry__v1__tokenize_response__descriptor, o,
               (ProtobufCMessage **)out, st);
}

static void gen_on_msg(void *user, gt_rpc_stream_t *s, ProtobufCMessage *msg) {
  gen_ctx_t *g = user;
  if (g->on_response) g->on_response(g->user, s, (Gantry__V1__GenerateResponse *)msg);
  else protobuf_c_message_free_unpacked(msg, NULL);
}

static void gen_on_done(void *user, gt_rpc_stream_t *s, const gt_rpc_status_t *st) {
  gen_ctx_t *g = user;
  if (g->on_done) g->on_done(g->user, s, st);
  free(g);
}

int ec_generate(ec_client_t *c, const Gantry__V1__GenerateRequest *req, const ec_call_opts_t *o,
                ec_response_fn on_response, ec_done_fn on_done, void *user, ec_stream_t **out,
                gt_err_t *err) {
  *out = NULL;
  gt_rpc_md_t md[MAX_MD];
  int n = build_md(o, req->request_id, md);
  if (n < 0) return gt_err_set(err, GT_EINVAL, "generate: more than %d metadata entries", MAX_MD);
  gen_ctx_t *g = malloc(sizeof *g);
  if (!g) return gt_err_set(err, GT_ENOMEM, "generate: out of memory");
  *g = (gen_ctx_t){on_response, on_done, user};
  gt_rpc_stream_args_t a = {
      .method = EC_METHOD_GENERATE,
      .request = &req->base,
      .response = &gantry__v1__generate_response__descriptor,
      .timeout_ms = o ? o->timeout_ms : 0,
      .md = md,
      .n_md = (size_t)n,
      .on_msg = gen_on_msg,
      .on_done = gen_on_done,
      .user = g,
      .manual_read = o && o->manual_read,
  };
  int rc = gt_rpc_client_stream(c->rpc, &a, out, err);
  if (rc != GT_OK) free(g);
  return rc;
}

void ec_stream_cancel(ec_stream_t *s) { gt_rpc_stream_cancel(s); }
void ec_stream_release(ec_stream_t *s) { gt_rpc_stream_release(s); }
void ec_stream_read_next(ec_stream_t *s) { gt_rpc_stream_read_next(s); }
