/* router/req_limits.c — see req_limits.h. */
#include <math.h>
#include <string.h>

#include "router/req_limits.h"

static int range(double v, double lo, double hi, const char *param, oa_error_t *e) {
  if (isfinite(v) && v >= lo && v <= hi) return 0;
  return oa_err(e, 400, "invalid_request_error", param, "invalid_value", "'%s' must be between %g and %g, got %g", param,
                lo, hi, v);
}

static int sampling(const Gantry__V1__SamplingParams *s, oa_error_t *e) {
  if (!s) return 0;
  if (s->temperature_opt_case && range(s->temperature, 0, 2, "temperature", e)) return -1;
  if (s->top_p_opt_case && range(s->top_p, 0, 1, "top_p", e)) return -1;
  if (s->min_p_opt_case && range(s->min_p, 0, 1, "min_p", e)) return -1;
  if (s->repetition_penalty_opt_case && range(s->repetition_penalty, 0, 10, "repetition_penalty", e)) return -1;
  if (s->presence_penalty_opt_case && range(s->presence_penalty, -2, 2, "presence_penalty", e)) return -1;
  if (s->frequency_penalty_opt_case && range(s->frequency_penalty, -2, 2, "frequency_penalty", e)) return -1;
  return 0;
}

int rql_check(const Gantry__V1__GenerateRequest *g, oa_error_t *e) {
  if (g->n > OA_MAX_N)
    return oa_err(e, 400, "invalid_request_error", "n", "invalid_value", "'n' must be in [1, %d] (got %u)", OA_MAX_N, g->n);
  const size_t prompts = 1 + g->n_more_prompts + g->n_more_tokens;
  if (prompts > OA_MAX_PROMPTS)
    return oa_err(e, 400, "invalid_request_error", "prompt", "invalid_value",
                  "a list of prompts has at most %d prompts, got %zu", OA_MAX_PROMPTS, prompts);
  if (g->n_stop > RQL_MAX_STOP)
    return oa_err(e, 400, "invalid_request_error", "stop", "invalid_value", "'stop' has %zu entries (at most %d)", g->n_stop,
                  RQL_MAX_STOP);
  for (size_t i = 0; i < g->n_stop; i++) {
    const size_t len = g->stop[i] ? strlen(g->stop[i]) : 0;
    if (len > RQL_MAX_STOP_BYTES)
      return oa_err(e, 400, "invalid_request_error", "stop", "invalid_value", "'stop[%zu]' has %zu bytes (at most %d)", i,
                    len, RQL_MAX_STOP_BYTES);
  }
  if (g->n_stop_token_ids > RQL_MAX_STOP_IDS)
    return oa_err(e, 400, "invalid_request_error", "stop_token_ids", "invalid_value",
                  "'stop_token_ids' has %zu entries (at most %d)", g->n_stop_token_ids, RQL_MAX_STOP_IDS);
  if (g->n_logit_bias > RQL_MAX_LOGIT_BIAS)
    return oa_err(e, 400, "invalid_request_error", "logit_bias", "invalid_value", "'logit_bias' has %zu entries (at most %d)",
                  g->n_logit_bias, RQL_MAX_LOGIT_BIAS);
  for (size_t i = 0; i < g->n_logit_bias; i++) {
    const float b = g->logit_bias[i] ? g->logit_bias[i]->bias : 0;
    if (!isfinite(b) || b < -100 || b > 100)
      return oa_err(e, 400, "invalid_request_error", "logit_bias", "invalid_value",
                    "'logit_bias' of token %d must be a number in [-100, 100], got %g", g->logit_bias[i]->id, b);
  }
  if (g->top_logprobs_opt_case && g->top_logprobs > RQL_MAX_LOGPROBS)
    return oa_err(e, 400, "invalid_request_error", "top_logprobs", "invalid_value", "'top_logprobs' must be at most %d, got %u",
                  RQL_MAX_LOGPROBS, g->top_logprobs);
  if (g->priority < -RQL_MAX_PRIORITY || g->priority > RQL_MAX_PRIORITY)
    return oa_err(e, 400, "invalid_request_error", "priority", "invalid_value", "'priority' must be between %d and %d, got %d",
                  -RQL_MAX_PRIORITY, RQL_MAX_PRIORITY, g->priority);
  return sampling(g->sampling, e);
}
