/* engine/sched/constraint.h — constrained decoding for the scheduler (structured outputs).
 *
 * cons_cache_t: the grammars of one model's requests, compiled once per (kind, spec) with
 * engine/grammar/grammar.h and kept in a bounded LRU; the grammar vocabulary (gr_vocab) is built
 * once, at the first constrained request. A cons_t is a compiled constraint with a reference
 * count: the cache holds one while it lists it, every request that uses it holds one.
 *
 * cons_seq_t: one sequence's walk through its constraint, one token at a time:
 *   reasoning  a reasoning model's <think> part is free: with starts_in_reasoning (the prompt
 *              opened <think>) until the sequence samples </think>; with may_think (a model
 *              that may open <think> itself) the first token may also be <think>, which starts it.
 *              After its budget (CONS_THINK_BUDGET) only </think> is allowed. Anywhere else
 *              (thinking off, or closed) <think> and </think> are masked: no escape.
 *   prefix     tokens forced one by one (the tool-call opening "<tool_call>\n");
 *   grammar    the grammar's mask (gr_matcher_fill_mask): end-of-sequence only when it accepts;
 *   suffix     forced tokens once the grammar is done (the tool-call closing "\n</tool_call>"),
 *   then the output is complete (cons_seq_accept returns CONS_DONE).
 * Tool calls (CONS_TOOL_CALL, spec: a JSON array of OpenAI tools) take the Qwen3 JSON form that
 * engine/chat/chat_parse.h recognises for both Qwen3 and Qwen3.5: <tool_call>\n{"name": NAME,
 * "arguments": ARGS}\n</tool_call>, ARGS valid for the tool's `parameters` (an anyOf over the
 * tools when there are several; a tool without `parameters` takes {}). Their $defs / definitions
 * are lifted to the schema's root. A marker that is a control token in the vocabulary (whose text
 * the output drops: small test vocabularies) is forced as plain text instead.
 *
 * Mask cache: the automaton and the masks a grammar's sequences compute (gr_cache_t) are shared
 * by every sequence of one cons_t, so a spec seen before is warm from its first token. A cache
 * holds at most 65,536 states / 2^20 stack nodes (grammar.h). Once full it is replaced by a fresh
 * one for new sequences (the full one lives until its last sequence ends; new sequences join the
 * full one while there is no memory for a fresh one), and a running sequence
 * that needs a state the full cache cannot take moves to a fresh cache of its own, replaying its
 * tokens: a sequence fails (GT_ERANGE) only when its own output outgrows the limits, never
 * because other requests filled the shared cache.
 *
 * Masks are in the model's vocabulary: mask[ceil(n_vocab / 32)], bit id % 32 of word id / 32 set
 * = allowed; ids the tokenizer does not have are never allowed. */
#ifndef GANTRY_ENGINE_CONSTRAINT_H
#define GANTRY_ENGINE_CONSTRAINT_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "format/tokenizer.h"

/* The numbers of gantry.v1.Constraint.Kind. */
typedef enum {
  CONS_JSON_SCHEMA = 1,
  CONS_JSON_OBJECT = 2,
  CONS_CHOICE = 3,
  CONS_REGEX = 4,
  CONS_TOOL_CALL = 5,
  CONS_TOOL_CALLS = 6, /* one or more calls: after a call's suffix, end-of-sequence or "\n" + the next */
} cons_kind_t;

typedef struct cons_cache cons_cache_t;
typedef struct cons cons_t;
typedef struct cons_seq cons_seq_t;

/* A cache of at most capacity (> 0) compiled constraints for tok (which must outlive it); each
 * grammar cache (mask cache, above) holds at most max_states states (0: the grammar's 65,536;
 * gr_cache_new_limited). */
int cons_cache_create(const tok_t *tok, int capacity, int max_states, cons_cache_t **out, gt_err_t *err);
/* Frees the cache and drops its references; constraints still referenced stay valid until their
 * last cons_unref (the vocabulary lives until then too). */
void cons_cache_free(cons_cache_t *c);

/* The compiled constraint of (kind, spec[0..len)): from the cache, or compiled now and added
 * (evicting the least recently used). *out holds a new reference (cons_unref). Errors: GT_EINVAL
 * (malformed spec), GT_EUNSUPPORTED (a schema keyword or regex construct not supported),
 * GT_ERANGE (a bound over the grammar's limits), GT_ENOMEM, each with the grammar's message.
 * Thread-safe. */
int cons_get(cons_cache_t *c, cons_kind_t kind, const char *spec, size_t len, cons_t **out, gt_err_t *err);
void cons_ref(cons_t *k);
void cons_unref(cons_t *k); /* NULL: nothing */

typedef struct {
  uint64_t hits, compiled, evicted; /* cons_get served from the cache / compiled / LRU evictions */
  int entries;
} cons_cache_stats_t;
void cons_cache_stats(cons_cache_t *c, cons_cache_stats_t *out);

/* A constraint's mask counters, over its sequences that have ended (or moved cache). */
typedef struct {
  uint64_t mask_fills; /* masks computed by a vocabulary walk (a state's first visit in a cache) */
  uint64_t mask_hits;  /* masks copied from the cache */
  uint64_t caches;     /* shared caches created (1 + replacements of a full one) */
  uint64_t moves;      /* sequences that moved off a full shared cache to one of their own */
} cons_stats_t;
void cons_stats(cons_t *k, cons_stats_t *out);

/* A sequence's state at the start of k (takes its own reference of k), on k's shared cache.
 * starts_in_reasoning, may_think: see above. Any thread. */
int cons_seq_create(cons_t *k, int starts_in_reasoning, int may_think, cons_seq_t **out, gt_err_t *err);
void cons_seq_free(cons_seq_t *q); /* NULL: nothing */

/* Most tokens of a constrained output's reasoning part: CONS_THINK_BUDGET, or half the request's
 * max_tokens when that is less (cons_seq_set_think_budget); past them the mask allows only
 * </think>, so a model that never closes its thinking still ends in the constrained form. */
#define CONS_THINK_BUDGET 4096
void cons_seq_set_think_budget(cons_seq_t *q, int max_tokens);
/* 1 when the next token is constrained (not in the reasoning part, or past its budget). */
int cons_seq_active(const cons_seq_t *q);
/* The next token's mask for a model vocabulary of n_vocab (mask[(n_vocab + 31) / 32]); call only
 * when cons_seq_active. Returns the number of allowed ids (0: a dead end, nothing can continue
 * the output), or a negative GT_E* error: GT_ERANGE (this output's walk outgrew the grammar's
 * state limits), GT_ENOMEM. A sequence is used by one thread at a time; different sequences,
 * of one constraint or not, on any threads. */
int cons_seq_mask(cons_seq_t *q, uint32_t *mask, int n_vocab);

enum { CONS_MORE = 0, CONS_DONE = 1 };
/* Records the token the sequence took (masked or free). Returns CONS_MORE, CONS_DONE (the
 * output is complete: stop after this token), GT_EINVAL when the mask did not allow it, or
 * GT_ERANGE / GT_ENOMEM as cons_seq_mask. An end-of-sequence token ends the sequence elsewhere
 * (the scheduler): it is only recorded. */
int cons_seq_accept(cons_seq_t *q, int32_t tok);

/* What a negative cons_seq_mask / cons_seq_accept result means, for error messages (static). */
const char *cons_strerror(int rc);

#endif
