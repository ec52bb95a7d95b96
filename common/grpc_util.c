/* common/grpc_util.c — status codes, (de)serialization, deadlines. */
#include "common/grpc_util_internal.h"

#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <grpc/status.h>
#include <grpc/support/alloc.h>
#include <grpc/support/log.h>

#include "common/err.h"
#include "common/log.h"

_Static_assert((int)GT_RPC_DEADLINE_EXCEEDED == (int)GRPC_STATUS_DEADLINE_EXCEEDED, "codes");
_Static_assert((int)GT_RPC_RESOURCE_EXHAUSTED == (int)GRPC_STATUS_RESOURCE_EXHAUSTED, "codes");
_Static_assert((int)GT_RPC_UNAUTHENTICATED == (int)GRPC_STATUS_UNAUTHENTICATED, "codes");
_Static_assert((int)GT_RPC_UNAVAILABLE == (int)GRPC_STATUS_UNAVAILABLE, "codes");

static const char *const code_names[] = {
    "OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
    "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
    "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS",
    "UNAUTHENTICATED"};

const char *gt_rpc_code_name(int code) {
  if (code < 0 || code > GT_RPC_UNAUTHENTICATED) return "UNKNOWN_CODE";
  return code_names[code];
}

gt_rpc_code_t gt_rpc_code_from_err(int c) {
  switch (c) {
    case GT_OK: return GT_RPC_OK;
    case GT_EINVAL:
    case GT_ERANGE:
    case GT_EFORMAT: return GT_RPC_INVALID_ARGUMENT;
    case GT_EBUSY:
    case GT_ENOMEM: return GT_RPC_RESOURCE_EXHAUSTED;
    case GT_ECANCELLED: return GT_RPC_CANCELLED;
    case GT_ENOTFOUND: return GT_RPC_NOT_FOUND;
    case GT_EUNSUPPORTED: return GT_RPC_UNIMPLEMENTED;
    case GT_EIO: return GT_RPC_UNAVAILABLE;
    default: return GT_RPC_INTERNAL;
  }
}

int gt_rpc_err_from_code(gt_rpc_code_t code) {
  switch (code) {
    case GT_RPC_OK: return GT_OK;
    case GT_RPC_CANCELLED:
    case GT_RPC_DEADLINE_EXCEEDED: return GT_ECANCELLED;
    case GT_RPC_INVALID_ARGUMENT:
    case GT_RPC_OUT_OF_RANGE:
    case GT_RPC_FAILED_PRECONDITION: return GT_EINVAL;
    case GT_RPC_RESOURCE_EXHAUSTED: return GT_EBUSY;
    case GT_RPC_NOT_FOUND: return GT_ENOTFOUND;
    case GT_RPC_UNIMPLEMENTED: return GT_EUNSUPPORTED;
    case GT_RPC_UNAVAILABLE: return GT_EIO;
    default: return GT_EINTERNAL;
  }
}

gt_rpc_code_t gt_rpc_status_set(gt_rpc_status_t *st, gt_rpc_code_t code, const char *fmt, ...) {
  if (st) {
    st->code = code;
    st->param[0] = '\0';
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(st->message, sizeof st->message, fmt, ap);
    va_end(ap);
  }
  return code;
}

static pthread_mutex_t g_init_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_init_refs;

/* gRPC's own log lines go through common/log (one line, our format and level). */
static void route_grpc_log(gpr_log_func_args *a) {
  gt_level_t lvl = a->severity == GPR_LOG_SEVERITY_ERROR  ? GT_LEVEL_WARN
                   : a->severity == GPR_LOG_SEVERITY_INFO ? GT_LEVEL_DEBUG
                                                          : GT_LEVEL_DEBUG;
  const char *file = strrchr(a->file, '/');
  GT_LOG(lvl, "grpc-core at=%s:%d %s", file ? file + 1 : a->file, a->line, a->message);
}

void gt_rpc_global_init(void) {
  pthread_mutex_lock(&g_init_mu);
  if (g_init_refs == 0) gpr_set_log_function(route_grpc_log);
  if (g_init_refs++ == 0) grpc_init();
  pthread_mutex_unlock(&g_init_mu);
}

void gt_rpc_global_shutdown(void) {
  pthread_mutex_lock(&g_init_mu);
  /* grpc_shutdown_blocking waits for grpc's own threads, so nothing of grpc runs after the
   * last user is gone (keeps leak checkers quiet at exit). */
  if (g_init_refs > 0 && --g_init_refs == 0) grpc_shutdown_blocking();
  pthread_mutex_unlock(&g_init_mu);
}

grpc_byte_buffer *gt_rpc_pack(const ProtobufCMessage *msg) {
  size_t n = protobuf_c_message_get_packed_size(msg);
  grpc_slice s = grpc_slice_malloc(n);
  protobuf_c_message_pack(msg, GRPC_SLICE_START_PTR(s));
  grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);
  grpc_slice_unref(s);
  return bb;
}

ProtobufCMessage *gt_rpc_unpack(const ProtobufCMessageDescriptor *desc, grpc_byte_buffer *bb) {
  if (!bb) return NULL;
  grpc_byte_buffer_reader r;
  if (!grpc_byte_buffer_reader_init(&r, bb)) return NULL;
  grpc_slice all = grpc_byte_buffer_reader_readall(&r);
  grpc_byte_buffer_reader_destroy(&r);
  ProtobufCMessage *m =
      protobuf_c_message_unpack(desc, NULL, GRPC_SLICE_LENGTH(all), GRPC_SLICE_START_PTR(all));
  grpc_slice_unref(all);
  return m;
}

gpr_timespec gt_rpc_deadline_in(int64_t timeout_ms) {
  if (timeout_ms <= 0) return gpr_inf_future(GPR_CLOCK_REALTIME);
  return gpr_time_add(gpr_now(GPR_CLOCK_REALTIME), gpr_time_from_millis(timeout_ms, GPR_TIMESPAN));
}

int64_t gt_rpc_ms_until(gpr_timespec deadline) {
  if (deadline.tv_sec >= INT64_MAX / 2) return INT64_MAX; /* infinite */
  gpr_timespec now = gpr_now(deadline.clock_type);
  if (gpr_time_cmp(deadline, now) <= 0) return 0;
  gpr_timespec d = gpr_time_sub(deadline, now);
  return (int64_t)d.tv_sec * 1000 + d.tv_nsec / 1000000;
}

void gt_rpc_status_fill(gt_rpc_status_t *st, grpc_status_code code, grpc_slice details, const grpc_metadata_array *trailers) {
  st->code = (gt_rpc_code_t)code;
  gt_rpc_slice_to_str(details, st->message, sizeof st->message);
  st->param[0] = '\0';
  for (size_t i = 0; trailers && i < trailers->count; i++) {
    const grpc_slice k = trailers->metadata[i].key;
    if (GRPC_SLICE_LENGTH(k) == strlen(GT_RPC_MD_PARAM) &&
        !memcmp(GRPC_SLICE_START_PTR(k), GT_RPC_MD_PARAM, strlen(GT_RPC_MD_PARAM)))
      gt_rpc_slice_to_str(trailers->metadata[i].value, st->param, sizeof st->param);
  }
}

void gt_rpc_slice_to_str(grpc_slice s, char *out, size_t cap) {
  if (cap == 0) return;
  size_t n = GRPC_SLICE_LENGTH(s);
  if (n > cap - 1) n = cap - 1;
  memcpy(out, GRPC_SLICE_START_PTR(s), n);
  out[n] = '\0';
}
