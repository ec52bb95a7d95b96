/* common/grpc_util_internal.h — helpers for grpc_server.c / grpc_client.c only (includes grpc.h).
 * Not for engine or router code. */
#ifndef GANTRY_COMMON_GRPC_UTIL_INTERNAL_H
#define GANTRY_COMMON_GRPC_UTIL_INTERNAL_H

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/support/time.h>

#include "common/grpc_util.h"

/* Serializes msg into a new byte buffer (caller destroys it); NULL on allocation failure. */
grpc_byte_buffer *gt_rpc_pack(const ProtobufCMessage *msg);

/* Parses a byte buffer into a new message of type desc (free with
 * protobuf_c_message_free_unpacked(m, NULL)); NULL if the bytes are not a valid message. */
ProtobufCMessage *gt_rpc_unpack(const ProtobufCMessageDescriptor *desc, grpc_byte_buffer *bb);

/* Absolute realtime deadline timeout_ms from now; timeout_ms <= 0 means no deadline. */
gpr_timespec gt_rpc_deadline_in(int64_t timeout_ms);

/* Milliseconds from now until deadline (clamped at 0), or INT64_MAX for an infinite one. */
int64_t gt_rpc_ms_until(gpr_timespec deadline);

/* A client's final status from what RECV_STATUS_ON_CLIENT received (trailers may be NULL). */
void gt_rpc_status_fill(gt_rpc_status_t *st, grpc_status_code code, grpc_slice details, const grpc_metadata_array *trailers);

/* Copies a slice into a NUL-terminated string of at most cap-1 bytes. */
void gt_rpc_slice_to_str(grpc_slice s, char *out, size_t cap);

#endif
