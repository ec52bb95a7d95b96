/* router/req_limits.h — the limits of an engine request that every front enforces before
 * admission. The HTTP front's parser (openai_req.c) applies them while it parses the OpenAI
 * JSON; the gRPC front receives a gantry.v1.GenerateRequest as it will go to the engine and
 * checks it here, so both fronts refuse the same requests (and http.c runs the check too after
 * parsing, which also bounds the length of each stop string). */
#ifndef GANTRY_ROUTER_REQ_LIMITS_H
#define GANTRY_ROUTER_REQ_LIMITS_H

#include "gantry/v1/engine.pb-c.h"
#include "router/openai.h"

#define RQL_MAX_STOP 16            /* stop strings */
#define RQL_MAX_STOP_BYTES 1024    /* bytes of one stop string */
#define RQL_MAX_STOP_IDS 64        /* stop_token_ids */
#define RQL_MAX_LOGIT_BIAS 1024    /* logit_bias entries */
#define RQL_MAX_LOGPROBS 20        /* top_logprobs */
#define RQL_MAX_PRIORITY 1000000   /* |priority| */

/* 0, or -1 with e filled (400 invalid_request_error naming the OpenAI parameter and the value
 * sent) for the first limit g exceeds: n in [1, OA_MAX_N] (0 = 1), prompts (1 + more_prompts /
 * more_tokens) at most OA_MAX_PROMPTS, the counts above, logit_bias values in [-100, 100],
 * priority in [-RQL_MAX_PRIORITY, RQL_MAX_PRIORITY], the sampling ranges of the HTTP API
 * (temperature [0, 2], top_p and min_p [0, 1], repetition_penalty [0, 10], presence and
 * frequency penalties [-2, 2]). */
int rql_check(const Gantry__V1__GenerateRequest *g, oa_error_t *e);

#endif
