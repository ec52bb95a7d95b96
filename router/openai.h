/* router/openai.h — the OpenAI wire format: request JSON -> gantry.v1.GenerateRequest (with
 * validation: every bad input is an oa_error_t with the HTTP status, never a crash), engine
 * GenerateResponse messages -> chat.completion(.chunk) / text_completion objects and SSE
 * events, and OpenAI-style error bodies. No I/O: pure functions over buffers, so every case is
 * unit-tested without a network. */
#ifndef GANTRY_ROUTER_OPENAI_H
#define GANTRY_ROUTER_OPENAI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "common/strbuf.h"
#include "common/utf8.h"
#include "gantry/v1/engine.pb-c.h"

/* OA_RESPONSES: /v1/responses (router/openai_responses_*.c), parsed into a chat request. */
typedef enum { OA_CHAT = 0, OA_COMPLETION = 1, OA_RESPONSES = 2 } oa_kind_t;

/* Most choices per request (n); the engine may refuse fewer (its max_num_seqs, its KV pool). */
#define OA_MAX_N 16
/* Most prompts in one /v1/completions list (the engine takes up to 64). */
#define OA_MAX_PROMPTS 64

/* Which field carries reasoning text (--reasoning-field). */
typedef enum { OA_REASONING_BOTH = 0, OA_REASONING_ONLY = 1, OA_REASONING_CONTENT_ONLY = 2 } oa_reasoning_field_t;
/* which of the two field names carry the reasoning text under rf (both by default) */
static inline bool oa_rf_reasoning(oa_reasoning_field_t rf) { return rf != OA_REASONING_CONTENT_ONLY; }
static inline bool oa_rf_reasoning_content(oa_reasoning_field_t rf) { return rf != OA_REASONING_ONLY; }

/* An OpenAI error: {"error": {"message", "type", "param", "code"}} with an HTTP status. */
typedef struct oa_error {
  int status;          /* 400, 401, 404, 413, 429, 503, ... */
  char type[40];       /* invalid_request_error, authentication_error, server_error, ... */
  char param[64];      /* "" -> null */
  char code[48];       /* "" -> null */
  char message[512];
} oa_error_t;

/* The OpenAI parameter of an engine request field (GenerateRequest proto path, as the engine
 * names it in gRPC trailing metadata "gantry-param"): "sampling.temperature" -> "temperature",
 * "chat.messages" -> "messages", "tokens" -> "prompt", "logit_bias" -> "logit_bias". Written to
 * buf; NULL when field is NULL or empty. */
const char *oa_param_of_field(const char *field, char *buf, size_t n);

/* The JSON array a of token ids into *ids (malloc'd; NULL when empty) and *n; -1 with a 400 naming
 * param ("'name[i]' must be a token id") for an element that is not an integer in [0, INT32_MAX]. */
int oa_token_ids(json_t *a, const char *param, const char *name, int32_t **ids, size_t *n, oa_error_t *e);

/* Fills e and returns -1 (for `return oa_err(...)`). */
int oa_err(oa_error_t *e, int status, const char *type, const char *param, const char *code,
           const char *fmt, ...) __attribute__((format(printf, 6, 7)));

/* Error body as JSON text (malloc'd; NULL only when out of memory). */
char *oa_error_json(const oa_error_t *e);

/* A parsed request. */
typedef struct oa_req {
  oa_kind_t kind;
  char model[256];
  bool stream;
  bool include_usage;       /* stream_options.include_usage */
  bool continuous_usage;    /* stream_options.continuous_usage_stats (vLLM) */
  bool logprobs;            /* logprobs requested (chat: logprobs true; completions: logprobs n) */
  bool has_tools;
  bool legacy_functions;    /* the request used functions / function_call: answers use function_call */
  bool one_tool_call;       /* parallel_tool_calls false (or legacy functions): calls after the first are dropped */
  char request_id[40];      /* the body's request_id (vLLM): the request's id when set, else "" */
  int n_prompts;            /* completions: prompts in the request (a list: > 1); chat: 1 */
  char **echo_texts;        /* completions with echo: [n_prompts] each prompt's text, which
                               precedes its choices' text (owned; NULL without echo) */
  Gantry__V1__GenerateRequest *gen; /* owned: what goes to the engine (free with oa_req_free) */
  /* OA_RESPONSES only (owned; NULL otherwise) */
  json_t *rs_echo;          /* request fields the response object repeats (instructions, tools, ...) */
  json_t *rs_items;         /* the conversation as Responses items: the previous response's
                               items (previous_response_id) followed by this request's input */
  bool rs_store;            /* store (default true): keep the response for GET / previous_response_id */
} oa_req_t;

/* Parses and validates body[0..len) (need not be NUL-terminated) as a /v1/chat/completions
 * (OA_CHAT) or /v1/completions (OA_COMPLETION) request. On success returns 0 and fills *out
 * (release with oa_req_free). On bad input returns -1 with e filled (status 400 and the
 * offending param); out needs no freeing then. Checks: valid UTF-8, JSON object, types, model,
 * non-empty messages / prompt, max_tokens > 0, 1 <= n <= OA_MAX_N, echo only with a text prompt and without
 * logprobs, ranges of the sampling values. */
int oa_parse_request(oa_kind_t kind, const char *body, size_t len, oa_req_t *out, oa_error_t *e);
void oa_req_free(oa_req_t *r);

/* ---- /v1/responses (router/openai_responses_req.c) ---------------------------------------- */
/* Most characters of a response id ("resp_" + 32 hex). */
#define OA_RESP_ID_MAX 64
/* The stored response a /v1/responses body needs, into out (n bytes): its previous_response_id
 * (1), else the response of its first item_reference (2: an item id rs_/msg_/fc_<hex>_<i> names
 * its response resp_<hex>), else none (0); -1 with e filled (400) when the body is not JSON or
 * previous_response_id not a string of the form resp_<hex>. */
int oa_responses_prev_id(const char *body, size_t len, char *out, size_t n, oa_error_t *e);
/* Parses a /v1/responses body into out (kind OA_RESPONSES, gen a chat request). history: the
 * JSON array text of the previous response's items (its record's "items", see
 * oa_resp_record), or NULL; refs: items that item_reference may name without being history
 * (the record of oa_responses_prev_id's case 2), or NULL. An item_reference is looked up in
 * history, then refs. 0, or -1 with e filled (400 naming the Responses parameter). */
int oa_parse_responses(const char *body, size_t len, const char *history, const char *refs, oa_req_t *out,
                       oa_error_t *e);
/* A stored record (JSON text, see oa_resp_record) parsed: the record object (caller decrefs;
 * "response" and "items" inside) and *tenant pointing into it; NULL when it is not a record. */
json_t *oa_record_parse(const char *rec, size_t len, const char **tenant);

/* 1 if s[0..n) is valid UTF-8 (no overlongs, no surrogates): the shared validator. */
static inline int oa_utf8_valid(const char *s, size_t n) { return gt_utf8_valid(s, n); }

/* A growable byte buffer: the shared one (common/strbuf.h: 0 or -1, p NUL-terminated). */
typedef gt_sb_t oa_sb_t;
static inline int oa_sb_append(oa_sb_t *b, const char *s, size_t n) { return gt_sb_add(b, s, n); }
static inline int oa_sb_adds(oa_sb_t *b, const char *s) { return gt_sb_adds(b, s); }
static inline void oa_sb_free(oa_sb_t *b) { gt_sb_free(b); }

/* Response state of one request: turns the engine's messages into OpenAI objects. */
typedef struct oa_resp oa_resp_t;

/* id: the response id without prefix (request id); created: unix seconds. Returns NULL on OOM. */
oa_resp_t *oa_resp_new(const oa_req_t *req, const char *id, int64_t created,
                       oa_reasoning_field_t rf);
void oa_resp_free(oa_resp_t *r);

/* oa_resp_delta's answer when the accumulated output passed oa_resp_set_max_bytes. */
#define OA_RESP_TOO_LARGE (-2)
/* Streaming: appends the SSE events ("data: {...}\n\n") for one Delta to out. Without
 * streaming: accumulates for the body (a stream keeps no copy of what it sent; /v1/responses
 * keeps its items' text either way). Returns 0, -1 on OOM, or OA_RESP_TOO_LARGE once the
 * accumulated output is over the bound (then, and for every later delta, nothing is taken: the
 * caller ends the request with oa_resp_size_error). */
int oa_resp_delta(oa_resp_t *r, const Gantry__V1__Delta *d, oa_sb_t *out);
/* The bound (bytes, 0: none) of r's accumulated output: its text, reasoning (once per
 * --reasoning-field name), tool calls, logprobs and echoed prompts over every choice, counted as
 * the body writes them (/v1/responses: x oa_resp_copies); the body adds at most a few hundred
 * bytes per choice and tool call. */
void oa_resp_set_max_bytes(oa_resp_t *r, size_t max);
/* The accumulated output counted so far (bytes). */
size_t oa_resp_bytes(const oa_resp_t *r);
/* The error of a request whose accumulated output passed max (oa_resp_delta answered
 * OA_RESP_TOO_LARGE): 400 "response_too_large" as oa_resp_check_size's, with the tokens reached. */
void oa_resp_size_error(const oa_resp_t *r, size_t max, oa_error_t *e);
/* Streaming end of one choice (Final.index; n > 1: one Final per choice): its chunk with
 * finish_reason; after the last choice's, the usage chunk (include_usage, completion tokens
 * summed over the choices, the prompt counted once) and "data: [DONE]". A Final with
 * finish_reason ERROR gives an error event then [DONE]; later calls then add nothing. */
int oa_resp_final_sse(oa_resp_t *r, const Gantry__V1__Final *f, oa_sb_t *out);
/* Streaming failure after the stream started (engine died): error event + [DONE]. */
int oa_resp_error_sse(oa_resp_t *r, const oa_error_t *e, oa_sb_t *out);
/* Non-streaming, n > 1: records a choice's Final before the last one; returns 1 once every
 * choice has its Final, else 0. oa_resp_error: the first failed choice's message, or NULL. */
int oa_resp_final(oa_resp_t *r, const Gantry__V1__Final *f);
const char *oa_resp_error(const oa_resp_t *r);
/* Non-streaming: the whole chat.completion / text_completion JSON (malloc'd; NULL on OOM), with f
 * (the last Final) recorded first; choices in index order, usage summed as in oa_resp_final_sse.
 * Consumes the accumulated output (each piece is freed once copied): call it once. */
char *oa_resp_body(oa_resp_t *r, const Gantry__V1__Final *f);
/* OA_RESPONSES: the record to store after the body / the last event was made (JSON text,
 * malloc'd: {"tenant", "response", "items"}, items = the request's rs_items followed by the
 * output items), or NULL when the request said store: false, it failed, or out of memory. */
char *oa_resp_record(const oa_resp_t *r, const char *tenant);
/* OA_RESPONSES: the response id ("resp_..."). */
const char *oa_resp_id(const oa_resp_t *r);
/* Tokens seen so far (sum of token_ids over deltas). */
uint32_t oa_resp_tokens(const oa_resp_t *r);

/* ---- the size of what a request accumulates (router/openai_size.c) ------------------------
 * A non-streaming body (and a /v1/responses object, streamed or not) is built in memory, so it
 * costs what it returns. At admission its size is bounded from the request: per token, text of
 * OA_EST_TEXT_BYTES (twice for chat, whose reasoning may be written under two names), plus
 * with logprobs OA_EST_LP_TOKEN_BYTES and OA_EST_LP_ENTRY_BYTES per entry (the token and its
 * top_logprobs alternatives); per choice OA_EST_CHOICE_BYTES; echoed prompts as they are.
 * Measured on qwen3-tiny (its Qwen3 vocabulary; top_logprobs 20 over random alternatives): a
 * chat logprobs entry is 67 B on average, 144 B at most, a token's 21 entries 1,435 B on average
 * and 1,595 B at most; text 3-5 B per token (English, code). Output denser than the estimate
 * (long tokens, many escapes) is caught by oa_resp_set_max_bytes' count. */
#define OA_EST_TEXT_BYTES 8
#define OA_EST_LP_TOKEN_BYTES 32
#define OA_EST_LP_ENTRY_BYTES 96
#define OA_EST_CHOICE_BYTES 512
/* How many copies of the output text the router holds at once, the factor of the count of
 * oa_resp_set_max_bytes and of the estimate: 1 for chat / completions (the body); /v1/responses:
 * the body (1) or, streamed, the four events of its end (output_text.done, content_part.done,
 * output_item.done, response.completed: 4), plus with store the record on its way to Redis (8:
 * measured, openai_size.c). */
int oa_resp_copies(const oa_req_t *req);
/* Upper estimate (bytes) of what req accumulates: max_tokens (unset or larger: ctx, the model's
 * context length; 0 = not known, then an unset max_tokens counts no tokens) x choices (n x
 * prompts) x the bytes per token above x oa_resp_copies, plus echoed prompts; 0 for a chat /
 * completions stream, which keeps nothing. */
uint64_t oa_resp_estimate(const oa_req_t *req, uint32_t ctx, oa_reasoning_field_t rf);
/* 0, or -1 with e filled when oa_resp_estimate(req) is over max (0: no bound): 400
 * invalid_request_error "response_too_large" naming max_tokens (max_output_tokens), the
 * estimate and the limit, and the ways out (stream: true, smaller max_tokens, n, top_logprobs). */
int oa_resp_check_size(const oa_req_t *req, uint32_t ctx, oa_reasoning_field_t rf, size_t max, oa_error_t *e);
/* The way out those errors suggest for a request of this kind (a static string). */
const char *oa_size_advice(oa_kind_t kind);

#endif
