/* clients/req.h — what one streamed request measured: the record the bench, chat and check
 * commands fill from OpenAI chat.completion.chunk (or text_completion) SSE events.
 *
 * Timing: every event is stamped with the monotonic time (ns) at which its bytes arrived.
 * A "token chunk" is one whose choice delta carries content, reasoning (`reasoning` or
 * `reasoning_content`), a tool-call delta, or completion `text`. Role-only chunks, empty
 * deltas and usage-only chunks are not token chunks. */
#ifndef GANTRY_CLIENTS_REQ_H
#define GANTRY_CLIENTS_REQ_H

#include <stddef.h>
#include <stdint.h>

enum { GC_CK_CONTENT = 1, GC_CK_REASONING = 2, GC_CK_TOOL = 4 };

typedef struct gc_chunk {
  int64_t t_ns;     /* arrival, absolute monotonic ns */
  int kinds;        /* GC_CK_* bits */
  int usage_new;    /* new completion tokens per continuous usage; -1 when the chunk had none */
  int usage_new_reasoning; /* same for reasoning_tokens; -1 when not reported */
} gc_chunk_t;

#define GC_MAX_TOOLS 8
typedef struct gc_tool_call {
  char *id, *name, *args; /* malloc'd, concatenated over deltas; NULL when absent */
} gc_tool_call_t;

/* Called for each piece of streamed text (kind = GC_CK_CONTENT or GC_CK_REASONING). */
typedef void (*gc_delta_cb)(void *ud, int kind, const char *text, size_t len);

typedef struct gc_req {
  /* inputs */
  int keep_text;          /* keep content/reasoning text and tool calls */
  gc_delta_cb on_delta;   /* optional live text callback */
  void *delta_ud;
  /* raw observations */
  int64_t t_start_ns, t_end_ns;
  int64_t t_first_token_ns;   /* first token chunk (any kind); 0 = none */
  int64_t t_first_content_ns; /* first chunk with non-empty content/text; 0 = none */
  gc_chunk_t *chunks;         /* token chunks in arrival order (malloc'd) */
  int n_chunks, cap_chunks;
  int n_events;               /* all data events, [DONE] included */
  int content_chunks, reasoning_chunks, tool_chunks;
  int last_usage_completion, last_usage_reasoning; /* running values of continuous usage */
  int held_usage, held_usage_reasoning; /* tokens of events that were no token chunk (a held-back
                                           token's empty delta): they go to the next token chunk */
  int prompt_tokens, completion_tokens, reasoning_tokens_srv, cached_tokens; /* -1 unknown */
  int usage_chunks;           /* events that carried a usage object */
  int done;                   /* saw data: [DONE] */
  long http_status;
  char *error;                /* first error message (malloc'd); NULL = no error */
  char *body;                 /* raw body of a non-2xx response (malloc'd) */
  size_t body_len;
  char finish_reason[32];
  char *content, *reasoning;  /* kept text when keep_text (malloc'd, NUL-terminated) */
  size_t content_len, reasoning_len;
  gc_tool_call_t tools[GC_MAX_TOOLS];
  int n_tools;
  /* derived by gc_req_finish() */
  double ttft_ms, ttfc_ms, e2e_ms;   /* -1 when not applicable */
  int out_tokens;                    /* completion tokens (server usage; else token chunks) */
  int reasoning_tokens, content_tokens;
  int tokens_from_usage;             /* out_tokens came from server usage */
  int reasoning_estimated;           /* reasoning split estimated from chunk kinds */
  double *ival_ms;                   /* per-token interval of each later token chunk */
  double *ival_w;                    /* its weight (tokens the chunk carried) */
  int n_ival;
  double itl_median_ms;              /* weighted median of ival_ms; -1 if none */
  double itl_p99_ms;                 /* weighted p99 of ival_ms (the request's stalls); -1 if none */
  double tpot_ms;                    /* (e2e - ttft) / (out_tokens - 1); -1 below 2 tokens */
} gc_req_t;

/* Resets r for a new request starting at t_start_ns (keeps keep_text/on_delta/delta_ud). */
void gc_req_begin(gc_req_t *r, int64_t t_start_ns);
/* Applies one SSE data payload that arrived at t_ns. Never fails: bad JSON or an error event
 * is recorded in r->error. */
void gc_req_on_event(gc_req_t *r, const char *data, size_t len, int64_t t_ns);
/* Records an error message (first one wins). */
void gc_req_set_error(gc_req_t *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Closes the record at t_end_ns: flags a stream that ended without [DONE], parses the error
 * body of a non-2xx response and derives the numbers in the "derived" block. */
void gc_req_finish(gc_req_t *r, int64_t t_end_ns);
/* Frees everything r owns (r itself is the caller's). */
void gc_req_free(gc_req_t *r);

/* Weighted median of v[i] with weights w[i] (w NULL = all 1); when the half-weight point falls
 * exactly between two values their mean is returned. Returns -1 for n == 0. Reorders nothing
 * (works on a copy). */
double gc_wmedian(const double *v, const double *w, int n);
/* Percentile p in [0,100] with linear interpolation between closest ranks; -1 for n == 0. */
double gc_percentile(const double *v, int n, double p);
/* Weighted percentile p in [0,100]: the smallest v[i] whose cumulative weight (values in
 * ascending order) reaches p% of the total, i.e. the percentile of the values repeated w[i]
 * times (nearest rank). p = 50 can differ from gc_wmedian, which averages at an exact half.
 * -1 for n == 0. Works on a copy. */
double gc_wpercentile(const double *v, const double *w, int n, double p);

#endif
