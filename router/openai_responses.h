/* router/openai_responses.h — the Responses API side of oa_resp_t (router-internal): engine
 * deltas -> output items (reasoning, message, function_call), the response object and the
 * streamed event sequence (response.created, response.in_progress, response.output_item.added,
 * response.content_part.added, response.output_text.delta / .done, response.reasoning_text.delta,
 * response.function_call_arguments.delta / .done, response.output_item.done,
 * response.completed / .incomplete / .failed). openai_resp.c delegates to these for
 * OA_RESPONSES; contracts as the oa_resp_* functions of openai.h. */
#ifndef GANTRY_ROUTER_OPENAI_RESPONSES_H
#define GANTRY_ROUTER_OPENAI_RESPONSES_H

#include "router/openai.h"

typedef struct rs_state rs_state_t;

/* NULL on OOM. The id is fresh: "resp_" + 32 random hex digits. */
rs_state_t *rs_new(const oa_req_t *req, int64_t created);
void rs_free(rs_state_t *s);
int rs_delta(rs_state_t *s, const Gantry__V1__Delta *d, oa_sb_t *out);
int rs_final_sse(rs_state_t *s, const Gantry__V1__Final *f, oa_sb_t *out);
int rs_error_sse(rs_state_t *s, const oa_error_t *e, oa_sb_t *out);
void rs_final(rs_state_t *s, const Gantry__V1__Final *f);
const char *rs_error(const rs_state_t *s);
char *rs_body(rs_state_t *s, const Gantry__V1__Final *f);
char *rs_record(const rs_state_t *s, const char *tenant);
const char *rs_id(const rs_state_t *s);

#endif
