/* tests/sse_server/sse_server.h — a scripted HTTP/SSE server for measuring the measurer.
 * It serves a JSON script on a free loopback port from one background thread, so tests can
 * compare what the bench reports with timings and chunking they know exactly.
 *
 * Script: either one RESPONSE used for every request, or {"routes": {"METHOD /path": R, ...}}
 * where R is a RESPONSE or an array of them (the n-th request to that route gets the n-th,
 * the last one repeats); unknown routes get 404 with an OpenAI error body.
 * RESPONSE forms:
 *   {"status": 200, "events": [EVENT, ...]}   text/event-stream; the connection closes after
 *                                             the last event
 *   {"status": 200, "json": VALUE}             application/json body
 *   {"status": 200, "text": STRING}            text/plain body (e.g. Prometheus /metrics)
 *   {"tokenize": "words"}                      vLLM /tokenize: one token per whitespace-separated
 *                                             word of the request's "prompt"
 *   {"switch": [{"contains": S, "min_len": N, "response": R}, ..., {"response": R}]}
 *                                             the first case whose S occurs in the request body
 *                                             and whose body has at least N bytes (both optional)
 * EVENT: {"delay_ms": D, ...} with one of
 *   "data": OBJECT | STRING    sent as `data: <compact JSON or the string>\n\n`
 *   "raw": STRING              sent as is
 *   "close": true              closes the connection (no [DONE])
 * D counts from the previous event; the first from the moment the whole request was read
 * (response headers go out at that moment). */
#ifndef GANTRY_TESTS_SSE_SERVER_H
#define GANTRY_TESTS_SSE_SERVER_H

#include <stdint.h>

#include "common/err.h"

typedef struct sse_srv sse_srv_t;

/* Parses the script (JSON text), binds 127.0.0.1 on a free port and starts serving from a
 * thread. NULL on error (message in err). Stop with sse_srv_stop. */
sse_srv_t *sse_srv_start(const char *script_json, gt_err_t *err);
/* Port it listens on. */
int sse_srv_port(const sse_srv_t *s);
/* Number of complete requests read so far. */
int sse_srv_n_requests(sse_srv_t *s);
/* Copy of request i as "METHOD PATH\n<body>" (malloc'd, caller frees); NULL if out of range. */
char *sse_srv_request(sse_srv_t *s, int i);
/* Timeline of request i as played: when it was read and when each event went out (monotonic
 * ns, the clock of common/clock.h). Copies up to max send times; returns how many events were
 * sent, or -1 if i is out of range. */
int sse_srv_played(sse_srv_t *s, int i, int64_t *t_read_ns, int64_t *sent_ns, int max);
/* Stops the thread, closes every socket and frees s (NULL-safe). */
void sse_srv_stop(sse_srv_t *s);

#endif
