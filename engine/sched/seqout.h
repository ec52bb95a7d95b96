/* engine/sched/seqout.h — one request's output pipeline: generated token ids -> UTF-8 text
 * (tokenizer stream, control tokens dropped) -> stop strings (engine/chat/stop.h, a partial match is
 * held back) -> reasoning / tool-call parsing (engine/chat/chat_parse.h) -> a delta per step.
 * Deltas accumulate until seqout_take, so a step's several tokens (or a slow reader) become one
 * message. Logprobs are attached by the caller (seqout_add_logprob). Owned by one thread. */
#ifndef GANTRY_ENGINE_SEQOUT_H
#define GANTRY_ENGINE_SEQOUT_H

#include <stddef.h>
#include <stdint.h>

#include "format/tokenizer.h"

typedef struct {
  const char *const *stop;  /* stop strings (copied) */
  int n_stop;
  int parse_output;         /* run the chat output parser (reasoning, tool calls); else all content */
  int starts_in_reasoning;  /* the prompt opened a <think> block */
  int parse_tool_calls;     /* recognise tool calls (the request offered tools) */
  const char *tools_json;   /* the request's tools (copied; Qwen3.5 string parameters) */
  uint64_t id_seed;         /* tool-call ids */
  int keep_special;         /* keep control tokens' text (skip_special_tokens false); else dropped */
  int include_stop;         /* keep the matched stop string at the end of the text */
} seqout_config_t;

typedef struct {
  int index;
  const char *id, *name;    /* set on the first delta of a call, else NULL */
  char *args;               /* argument JSON fragment (may be empty) */
  size_t args_len;
} seqout_tool_delta_t;

#define SEQOUT_MAX_TOP 20
typedef struct {
  int32_t id;
  float logprob;
  int n_top;
  int32_t top_ids[SEQOUT_MAX_TOP];
  float top_lps[SEQOUT_MAX_TOP];
} seqout_logprob_t;

typedef struct {
  int32_t *ids; int n_ids;            /* tokens sampled since the last take */
  char *text; size_t text_len;        /* content */
  char *reasoning; size_t reasoning_len;
  seqout_tool_delta_t *tools; int n_tools;
  seqout_logprob_t *lps; int n_lps;
} seqout_delta_t;

typedef struct seqout seqout_t;

int seqout_create(const tok_t *tok, const seqout_config_t *cfg, seqout_t **out, gt_err_t *err);
void seqout_free(seqout_t *o);

/* Appends one generated token (ids only: the caller handles end-of-sequence ids before).
 * Returns 1 when a stop string matched (the output is complete: call seqout_finish), 0 to go
 * on, negative on error. check_stop = 0 ignores stop strings (min_tokens not reached yet). */
int seqout_push(seqout_t *o, int32_t id, int check_stop, gt_err_t *err);
/* Records a token id that ends the output without text (an end-of-sequence or stop id). */
void seqout_push_id(seqout_t *o, int32_t id);
void seqout_add_logprob(seqout_t *o, const seqout_logprob_t *lp);
/* Flushes everything held back and ends the parser. */
int seqout_finish(seqout_t *o, gt_err_t *err);

/* The delta accumulated since the last take (empty: n_ids == 0 and no text), valid until the
 * next call on o. */
const seqout_delta_t *seqout_take(seqout_t *o);
int seqout_delta_empty(const seqout_delta_t *d);

int seqout_reasoning_tokens(const seqout_t *o);
int seqout_tool_calls(const seqout_t *o);

#endif
