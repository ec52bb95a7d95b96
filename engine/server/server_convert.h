/* engine/server/server_convert.h — gantry.v1 messages <-> scheduler types, for engine/server/server.c (and
 * its unit test). No gRPC calls here: pure conversions. */
#ifndef GANTRY_ENGINE_SERVER_CONVERT_H
#define GANTRY_ENGINE_SERVER_CONVERT_H

#include <stdint.h>

#include "common/grpc_delta.h"
#include "engine/chat/chat.h"
#include "engine/sched/sched.h"
#include "format/tokenizer.h"

/* Rejects unknown fields (anywhere in the request, named by message and field number) and
 * out-of-range values that the scheduler would not name (GT_EINVAL with the field). */
int srv_conv_check(const Gantry__V1__GenerateRequest *r, gt_err_t *err);
/* Refuses (GT_ERANGE) text input that cannot fit n_ctx tokens whatever it tokenizes to: every
 * token covers at most max_tok_bytes bytes, so a prompt (or the chat messages' text) of more
 * than n_ctx * max_tok_bytes bytes needs more than n_ctx tokens. Checked before tokenizing, so
 * a huge prompt costs no tokenizer time. */
int srv_conv_check_bytes(const Gantry__V1__GenerateRequest *r, int n_ctx, size_t max_tok_bytes, gt_err_t *err);
/* Refuses (GT_ERANGE) a prompt of n_prompt tokens that leaves no room to generate in n_ctx. Both
 * checks word it as OpenAI does ("This model's maximum context length is N tokens. However, your
 * messages resulted in M tokens."), which agents match to compress their history; the server
 * answers them OUT_OF_RANGE, which the router turns into code context_length_exceeded. */
/* The hash-chain seed of a cache_salt (0 for ""; never 0 otherwise). */
uint64_t srv_conv_salt(const char *salt);
/* truncate_prompt_tokens: keeps the last N of ids[0..*n) (in place). */
void srv_conv_truncate(const Gantry__V1__GenerateRequest *r, int32_t *ids, size_t *n);
int srv_conv_check_context(const Gantry__V1__GenerateRequest *r, size_t n_prompt, int n_ctx, gt_err_t *err);
/* Longest token text of the vocabulary, bytes (>= 1). */
size_t srv_conv_max_token_bytes(const tok_t *tok);

/* Token ids of r's input: chat (rendered with fam; fam NULL -> GT_EINVAL carrying
 * fam_reason), raw prompt text, or ids. *ids malloc'd (caller frees). *opens_reasoning is set
 * when the rendered chat prompt opened a <think> block. Empty input -> GT_EINVAL. */
int srv_conv_prompt(const Gantry__V1__GenerateRequest *r, const tok_t *tok, const chat_family_t *fam,
                    const char *fam_reason, int32_t **ids, size_t *n, int *opens_reasoning, gt_err_t *err);

/* Token ids of a chat input (see srv_conv_prompt); also used by Tokenize. */
int srv_conv_chat(const Gantry__V1__ChatInput *c, int add_generation_prompt, int parse_special, const tok_t *tok,
                  const chat_family_t *fam, const char *fam_reason, int32_t **ids, size_t *n, int *opens_reasoning,
                  gt_err_t *err);

/* Arrays that a converted sched_req_t points into (malloc'd; NULL when empty). */
typedef struct {
  const char **stop;  /* [n_stop] pointers into the request's strings */
  int32_t *bias_ids;  /* [n_logit_bias] */
  float *bias_vals;   /* [n_logit_bias] */
  int32_t *bad_ids, *bad_lens; /* bad_words' token sequences (srv_conv_bad_words) */
} srv_conv_bufs_t;
void srv_conv_bufs_free(srv_conv_bufs_t *b);

/* Fills *q from r (everything but prompt, on_event and ud). Pointers in *q borrow from r and
 * from *bufs (the caller frees it with srv_conv_bufs_free after sched_submit, which copies;
 * on error *bufs is already freed). */
int srv_conv_request(const Gantry__V1__GenerateRequest *r, int n_ctx, int opens_reasoning, uint64_t seed,
                     sched_req_t *q, srv_conv_bufs_t *bufs, gt_err_t *err);

/* r's bad_words into q->bad_ids / bad_lens / n_bad (arrays in bufs): each word tokenized as plain
 * text as is and with a leading space (vLLM), an empty or repeated sequence dropped. */
int srv_conv_bad_words(const Gantry__V1__GenerateRequest *r, const tok_t *tok, sched_req_t *q, srv_conv_bufs_t *bufs,
                       gt_err_t *err);

/* The request parameter a constraint came from (Constraint.param, or "constraint"). */
const char *srv_conv_cons_param(const Gantry__V1__GenerateRequest *r);
/* r's constraint (if any) compiled through sched's cache into q->constraint (a reference that
 * sched_submit takes; the caller releases it with cons_unref when it never submits q). A bad
 * spec: GT_EINVAL with the grammar's message prefixed by srv_conv_cons_param(r). */
int srv_conv_constraint(const Gantry__V1__GenerateRequest *r, sched_t *sched, sched_req_t *q, gt_err_t *err);

/* GenerateResponse{delta} of a scheduler delta (token ids, text, reasoning, tool-call
 * fragments, logprobs with token bytes from tok). NULL on allocation failure. */
gt_genresp_t *srv_conv_delta(const seqout_delta_t *d, const tok_t *tok);

/* GenerateResponse{final} with usage and timings. NULL on allocation failure. */
gt_genresp_t *srv_conv_final(sched_finish_t why, const char *error, const sched_usage_t *u);

/* Prometheus label value for a finish reason ("stop", "length", ...). */
const char *srv_finish_name(sched_finish_t why);

#endif
