/* router/openai_size.c — how large the response of a request can grow in the router, from the
 * request alone (openai.h: oa_resp_estimate), and the 400 of one over --max-response-bytes. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "common/json_str.h"
#include "router/openai.h"

const char *oa_size_advice(oa_kind_t kind) {
  return kind == OA_RESPONSES ? "use a smaller max_output_tokens (a /v1/responses response keeps its whole output, "
                                "streamed or not)"
                              : "use stream: true (a stream keeps none of what it sent), or a smaller max_tokens, n "
                                "or top_logprobs";
}

int oa_resp_copies(const oa_req_t *req) {
  if (req->kind != OA_RESPONSES) return 1;
  /* the body, or the four events of a stream's end; the stored record has the text twice (in the
   * response and in the items) and each goes to Redis through ~4 copies (the record, the
   * command redis_conn keeps for a resend, hiredis' formatted command and its output buffer) */
  return (req->stream ? 4 : 1) + (req->rs_store ? 8 : 0);
}

uint64_t oa_resp_estimate(const oa_req_t *req, uint32_t ctx, oa_reasoning_field_t rf) {
  const Gantry__V1__GenerateRequest *g = req->gen;
  if (!g || (req->stream && req->kind != OA_RESPONSES)) return 0;
  const uint64_t n = g->n > 1 ? g->n : 1, prompts = req->n_prompts > 1 ? (uint64_t)req->n_prompts : 1;
  /* a choice never outgrows the context */
  const bool mt = g->max_tokens_opt_case == GANTRY__V1__GENERATE_REQUEST__MAX_TOKENS_OPT_MAX_TOKENS;
  const uint64_t tokens = mt && (!ctx || g->max_tokens < ctx) ? g->max_tokens : ctx;
  const int names = req->kind == OA_CHAT ? oa_rf_reasoning(rf) + oa_rf_reasoning_content(rf) : 1; /* reasoning copies */
  uint64_t per_token = OA_EST_TEXT_BYTES * (uint64_t)names *
                       (uint64_t)oa_resp_copies(req);
  if (g->top_logprobs_opt_case == GANTRY__V1__GENERATE_REQUEST__TOP_LOGPROBS_OPT_TOP_LOGPROBS)
    per_token += OA_EST_LP_TOKEN_BYTES + ((uint64_t)g->top_logprobs + 1) * OA_EST_LP_ENTRY_BYTES;
  uint64_t est = n * prompts * (tokens * per_token + OA_EST_CHOICE_BYTES);
  for (int k = 0; req->echo_texts && k < (int)prompts; k++) /* each prompt precedes its n choices */
    est += n * gt_json_chars_len(req->echo_texts[k], strlen(req->echo_texts[k]));
  return est;
}

int oa_resp_check_size(const oa_req_t *req, uint32_t ctx, oa_reasoning_field_t rf, size_t max, oa_error_t *e) {
  const uint64_t est = oa_resp_estimate(req, ctx, rf);
  if (!max || est <= max) return 0;
  const Gantry__V1__GenerateRequest *g = req->gen;
  const char *mt = req->kind == OA_RESPONSES ? "max_output_tokens" : "max_tokens";
  char tokens[96];
  if (g->max_tokens_opt_case == GANTRY__V1__GENERATE_REQUEST__MAX_TOKENS_OPT_MAX_TOKENS)
    snprintf(tokens, sizeof tokens, "%s %u", mt, g->max_tokens);
  else
    snprintf(tokens, sizeof tokens, "%s unset: up to the context length, %u tokens", mt, ctx);
  char lp[64] = "";
  if (g->top_logprobs_opt_case == GANTRY__V1__GENERATE_REQUEST__TOP_LOGPROBS_OPT_TOP_LOGPROBS)
    snprintf(lp, sizeof lp, ", logprobs with top_logprobs %u", g->top_logprobs);
  const int choices = (g->n > 1 ? (int)g->n : 1) * (req->n_prompts > 1 ? req->n_prompts : 1);
  return oa_err(e, 400, "invalid_request_error", mt, "response_too_large",
                "this request's response could take up to %" PRIu64 " bytes (%s, %d choice%s%s), over this "
                "router's limit of %zu bytes for a response built in memory (--max-response-bytes); %s",
                est, tokens, choices, choices > 1 ? "s" : "", lp, max, oa_size_advice(req->kind));
}
