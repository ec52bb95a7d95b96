/* common/grpc_util.h — status codes and helpers shared by the gRPC server and client glue.
 * This header does not include grpc.h: engine and router code only see gantry types. */
#ifndef GANTRY_COMMON_GRPC_UTIL_H
#define GANTRY_COMMON_GRPC_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

/* gRPC status codes (same numbers as grpc_status_code, checked in grpc_util.c). */
typedef enum {
  GT_RPC_OK = 0,
  GT_RPC_CANCELLED = 1,
  GT_RPC_UNKNOWN = 2,
  GT_RPC_INVALID_ARGUMENT = 3,
  GT_RPC_DEADLINE_EXCEEDED = 4,
  GT_RPC_NOT_FOUND = 5,
  GT_RPC_ALREADY_EXISTS = 6,
  GT_RPC_PERMISSION_DENIED = 7,
  GT_RPC_RESOURCE_EXHAUSTED = 8,
  GT_RPC_FAILED_PRECONDITION = 9,
  GT_RPC_ABORTED = 10,
  GT_RPC_OUT_OF_RANGE = 11,
  GT_RPC_UNIMPLEMENTED = 12,
  GT_RPC_INTERNAL = 13,
  GT_RPC_UNAVAILABLE = 14,
  GT_RPC_DATA_LOSS = 15,
  GT_RPC_UNAUTHENTICATED = 16,
} gt_rpc_code_t;

/* Trailing metadata key of an error status: the request field the error is about, as its
 * proto path ("logit_bias", "sampling.temperature", "n"), so that clients need not guess it from
 * the message text. */
#define GT_RPC_MD_PARAM "gantry-param"

/* Final status of a call as seen by a client. */
typedef struct gt_rpc_status {
  gt_rpc_code_t code;
  char message[512];
  char param[64]; /* trailing metadata GT_RPC_MD_PARAM; "" if none */
} gt_rpc_status_t;

/* One metadata pair (keys lower-case ASCII, e.g. "x-request-id"). Borrowed strings. */
typedef struct gt_rpc_md {
  const char *key;
  const char *value;
} gt_rpc_md_t;

/* Static upper-case name of a code ("DEADLINE_EXCEEDED"); "UNKNOWN_CODE" if out of range. */
const char *gt_rpc_code_name(int code);

/* Maps a gantry error code (GT_E*, common/err.h) to the gRPC status a server should return:
 * EINVAL/ERANGE/EFORMAT -> INVALID_ARGUMENT, EBUSY/ENOMEM -> RESOURCE_EXHAUSTED,
 * ECANCELLED -> CANCELLED, ENOTFOUND -> NOT_FOUND, EUNSUPPORTED -> UNIMPLEMENTED,
 * EIO -> UNAVAILABLE, anything else -> INTERNAL; GT_OK -> OK. */
gt_rpc_code_t gt_rpc_code_from_err(int gt_code);

/* Maps a gRPC status back to a gantry error code (for client code that returns GT_E*). */
int gt_rpc_err_from_code(gt_rpc_code_t code);

/* Fills *st (if non-NULL) with code and a printf-formatted message; returns the code. */
gt_rpc_code_t gt_rpc_status_set(gt_rpc_status_t *st, gt_rpc_code_t code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Initializes gRPC once per process user (reference counted: pair every call with
 * gt_rpc_global_shutdown). Servers and clients call these themselves. */
void gt_rpc_global_init(void);
void gt_rpc_global_shutdown(void);

#endif
