/* common/grpc_delta.h — building, merging and freeing gantry.v1.GenerateResponse messages.
 * Messages made here are heap-built exactly like protobuf-c unpacks them, so
 * protobuf_c_message_free_unpacked(&m->base, NULL) frees them and the server glue can own
 * them (gt_rpc_call_send). gt_delta_merge is the merge function for the Generate method. */
#ifndef GANTRY_COMMON_GRPC_DELTA_H
#define GANTRY_COMMON_GRPC_DELTA_H

#include <stdint.h>

#include "gantry/v1/engine.pb-c.h"

typedef Gantry__V1__GenerateResponse gt_genresp_t;

/* New GenerateResponse{delta} with no content; NULL on allocation failure. */
gt_genresp_t *gt_delta_new(void);

/* Appends one token and the text it produced (text and reasoning may be NULL or "").
 * Returns 0, or -1 on allocation failure (the message stays valid). */
int gt_delta_add_token(gt_genresp_t *r, int32_t id, const char *text, const char *reasoning);

/* Appends a tool-call fragment (id and name may be NULL after the first fragment). */
int gt_delta_add_tool_call(gt_genresp_t *r, uint32_t index, const char *id, const char *name,
                           const char *arguments);

/* New GenerateResponse{final}; error may be NULL. Usage and timings are zeroed, fill
 * r->final->usage / r->final->timings. NULL on allocation failure. */
gt_genresp_t *gt_final_new(Gantry__V1__FinishReason reason, const char *error);

/* Frees a message made here or by unpacking. NULL is a no-op. */
void gt_genresp_free(gt_genresp_t *r);

/* gt_rpc_merge_fn for Generate: appends next's delta to into's (token ids, text, reasoning,
 * logprobs; tool-call fragments of the same index are joined). Returns 1 if merged, 0 when
 * either message is not a delta or memory ran out (then both stay unchanged). */
int gt_delta_merge(void *user, ProtobufCMessage *into, ProtobufCMessage *next);

#endif
