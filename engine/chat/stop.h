/* engine/chat/stop.h — stop-string matcher over streamed text.
 *
 * Feed decoded text as it is produced (pieces may split anywhere, even inside a UTF-8
 * character). Each feed says how much text is now safe to emit: everything except a suffix
 * that could still become the start of a stop string, and except a trailing incomplete UTF-8
 * character. When a stop string appears, the text before it is emitted, the stop string and
 * anything after it are not, and the matcher is done. The stop string that completes first
 * wins (as a generator checking after every token would see it); among those ending at the
 * same byte, the longest. So with stops "ST" and "STOP", "xSTOP" stops at "ST" (emits "x"). */
#ifndef GANTRY_ENGINE_STOP_H
#define GANTRY_ENGINE_STOP_H

#include <stdbool.h>
#include <stddef.h>

#include "common/err.h"

typedef struct stop_matcher stop_matcher_t;

/* Copies stops[0..n) (each non-empty valid UTF-8, else GT_EINVAL). n may be 0 (then the
 * matcher only holds back incomplete UTF-8). Free with stop_matcher_free(). */
int stop_matcher_new(const char *const *stops, size_t n, stop_matcher_t **out, gt_err_t *err);
void stop_matcher_free(stop_matcher_t *m);

typedef struct stop_result {
  const char *emit;  /* text safe to emit now; valid until the next call on the matcher */
  size_t emit_len;
  bool matched;      /* a stop string was found: emit is the text before it; stop here */
  int which;         /* index of the matched stop string, -1 if none */
} stop_result_t;

/* Appends text[0..n) and fills *res. Feeding after a match -> GT_EINVAL. */
int stop_matcher_feed(stop_matcher_t *m, const char *text, size_t n, stop_result_t *res,
                      gt_err_t *err);

/* End of stream: returns (in *res) everything still held back (no match possible now). */
int stop_matcher_flush(stop_matcher_t *m, stop_result_t *res, gt_err_t *err);

/* The i-th stop string (NUL-terminated, owned by m); NULL if i is out of range. */
const char *stop_matcher_string(const stop_matcher_t *m, int i);

/* Bytes currently held back (for tests and accounting). */
size_t stop_matcher_pending(const stop_matcher_t *m);

#endif
