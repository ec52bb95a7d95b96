/* engine/sched/sched.h — the engine's scheduler: continuous batching of many sequences over one model.
 *
 * Each step (sched_step) the scheduler
 *   1. drops cancelled requests (their blocks and state slot are released first);
 *   2. admits waiting requests, priority then arrival order, while fewer than max_num_seqs run
 *      and the blocks of the request's first chunk are free beyond one block of headroom per
 *      running decode (the head of the queue waits otherwise, and everything behind it;
 *      prefix-cached blocks are reused: kv.h);
 *   3. builds one batch, oldest sequence first: one decode token for every running sequence
 *      that has finished its prompt, then prompt chunks (chunked prefill) up to
 *      max_batch_tokens in total, each chunk cut to the blocks free beyond the decodes'
 *      headroom, so a long prompt never stalls running streams nor takes their blocks;
 *      with speculative decoding a decoding sequence also feeds drafts (see below);
 *   4. when a running sequence cannot grow, preempts the youngest running sequence (lowest
 *      priority, then latest arrival) that is younger than it, by recompute: its blocks are
 *      freed and it waits again with its prompt plus the tokens generated so far. A sequence
 *      never preempts an older one (engine/SERVE.md "Scheduling");
 *   5. runs the model, samples each sequence's next token with its own seeded sampler, and
 *      turns tokens into events (text, reasoning, tool-call deltas, stop strings) through
 *      engine/sched/seqout.h; finished sequences release everything they hold.
 * Every output row is computed independently of the others (engine/backend/backend.h), so a greedy
 * request yields the same tokens alone or batched ("batch invariance").
 *
 * Threads: sched_submit / sched_cancel / sched_stats may be called from any thread; events are
 * delivered on the thread that runs sched_step (the scheduler thread, see sched_run). */
#ifndef GANTRY_ENGINE_SCHED_H
#define GANTRY_ENGINE_SCHED_H

#include <stdint.h>

#include "engine/models/model.h"
#include "engine/backend/sampler.h"
#include "engine/sched/constraint.h"
#include "engine/sched/seqout.h"
#include "format/tokenizer.h"

typedef struct sched sched_t;

/* Speculative decoding (engine/SERVE.md "Speculative decoding"): a decoding sequence feeds its
 * pending token plus up to spec_k drafts in one step; the model gives logits at every one of
 * those positions and the drafts are accepted while the token each row yields (taken exactly as
 * without speculation: same sampler draw, penalties, mask, stop checks) equals the draft. The
 * first token that differs is kept as the correction, the rest are discarded: the KV cache past
 * the last kept token is dropped and a hybrid model's recurrent state becomes the one the verify
 * step wrote after the last kept token (be_batch_t.state_pos_slot, a slot swap). Output is therefore the same as
 * without speculation, token for token, for greedy and for seeded sampling alike. */
enum { SCHED_SPEC_OFF = 0, SCHED_SPEC_NGRAM = 1, SCHED_SPEC_MTP = 2 };
#define SCHED_SPEC_MAX_K 8
#define SCHED_SPEC_DRAFT_VOCAB 32768 /* the default draft vocabulary of large vocabularies */
#define SCHED_DEFAULT_MAX_WAITING 256
/* Test hook: proposes up to k drafts (returns how many, 0..k) into out[k] for choice `index` of
 * request `id`, whose tokens[n] are its prompt followed by its output so far. */
typedef int (*sched_draft_fn)(void *ud, int64_t id, int index, const int32_t *tokens, int n, int k, int32_t *out);

typedef struct {
  int max_num_seqs;     /* running sequences at once (default 32) */
  int max_batch_tokens; /* tokens per step, decode + prefill chunks (serve: 2048 on CUDA, 512 on the CPU) */
  int max_waiting;      /* bounded waiting queue: more -> GT_EBUSY (default SCHED_DEFAULT_MAX_WAITING) */
  int n_blocks;         /* KV pool blocks (0: planned from memory, engine/sched/sched_mem.h) */
  int block_tokens;     /* default 16 */
  int n_ctx;            /* max tokens per sequence (default: the model's training context) */
  int n_snapshots;      /* hybrid models: state slots kept for prefix caching (default 2 * max_num_seqs) */
  /* --kv-memory, used when n_blocks is 0: bytes, or a fraction in (0, 1) of the free memory of
   * the model's device after the weights; both 0: the default rule (sched_mem.h) */
  uint64_t kv_mem_bytes;
  double kv_mem_fraction;
  /* constrained decoding: states per grammar cache (engine/sched/constraint.h; 0: 65,536, the
   * most; each costs about 1 KiB). An output whose own walk needs more ends with ERROR. */
  int cons_max_states;
  /* speculative decoding: spec_mode SCHED_SPEC_OFF (default), SCHED_SPEC_NGRAM (prompt lookup,
   * engine/sched/spec.h, over n-grams of spec_ngram_min..spec_ngram_max tokens, default 2..4) or
   * SCHED_SPEC_MTP (the model's MTP block, engine/sched/spec.h "MTP drafting": sched_create fails
   * with GT_EUNSUPPORTED when the model has none; its KV layer is part of the pool);
   * spec_k drafts per step (1..SCHED_SPEC_MAX_K, default 3). Adaptive: no drafts in a step with
   * more than spec_max_seqs decoding sequences (default 8: past that the step is compute-bound),
   * a sequence whose drafts were all rejected pauses 1, 2, 4 .. 16 steps before drafting
   * again (reset by an accepted draft), and, per number of decoding sequences, a step drafts only
   * while its measured speculative steps give more tokens per ms than its plain ones
   * (engine/sched/spec_cost.h; with MTP the pass is skipped before a step that will not draft).
   * That measurement runs only with spec_adaptive = 1 (`serve --spec-adaptive on`); 0 drafts in
   * every step the rules above allow (the default: the measured control lost on the H200,
   * engine/SERVE.md "Speculative decoding"). */
  int spec_mode, spec_k, spec_max_seqs, spec_ngram_min, spec_ngram_max;
  int spec_adaptive;
  /* a cache of the last spec_suffix_tokens tokens that finished requests generated
   * (engine/sched/spec_suffix.h; 0: none, the default), drafted from (ngram or MTP) when it
   * matches the last SPEC_SUFFIX_MAX_N tokens of a sequence, more than its own drafter matched;
   * only between requests of one cache_salt. */
  int spec_suffix_tokens;
  /* SCHED_SPEC_MTP: 0 (default): where the sequence's last spec_ngram_max tokens recur earlier with
   * spec_k tokens after them, those are the drafts (when the block's first draft agrees) and the
   * block computes only its first draft (engine/SERVE.md); 1: the block's drafts alone */
  int spec_lookup_off;
  /* test hook: the step time spec_cost records (ms) instead of the clock's, for a pure decode
   * step of n_dec sequences with n_draft drafts in all (0: a plain step) */
  double (*spec_step_ms)(void *ud, int n_dec, int n_draft, double clock_ms);
  void *spec_step_ud;
  /* MTP drafts only among token ids [0, spec_draft_vocab) (model_t.mtp_draft_vocab): 0 = the default,
   * SCHED_SPEC_DRAFT_VOCAB for a vocabulary larger than twice that, else all; < 0 = all. BPE ids are in
   * merge order, so the first ids are the most frequent tokens. */
  int spec_draft_vocab;
  /* test hooks: spec_draft replaces the drafter (any spec_mode but OFF); spec_force_reject = j + 1
   * rejects draft position j whenever verification reaches it, even when it matches (0: off);
   * forced rejections do not pause the sequence */
  sched_draft_fn spec_draft;
  void *spec_draft_ud;
  int spec_force_reject;
  /* benchmark hook (changes the output: never for serving): spec_force_accept > 1 accepts drafts
   * as if they matched, so that verify steps keep spec_force_accept tokens on average (1 + the
   * accepted drafts: a sequence's v-th verify step accepts floor(v * a) - floor((v - 1) * a) of its
   * drafts, a = spec_force_accept - 1, at most all of them); the cost path of an acceptance
   * length that random weights never reach (tests/bench/bench_spec.c --force-accept) */
  double spec_force_accept;
  /* 1: an embedding engine (serve --task embed, engine/models/embed.h). Every request is only
   * prefilled (max_tokens must be 1; nothing is sampled): each step runs model_forward_hidden,
   * several prompts' chunks in one batch as for generation, and when a request's last prompt
   * token is computed its final event (finish STOP, completion_tokens 0) carries that token's
   * final-norm hidden state in sched_event_t.embedding (unnormalized). No speculation. */
  int embed;
} sched_config_t;

/* Timings and usage of a finished request, delivered with the final event. */
typedef struct {
  int prompt_tokens, completion_tokens, reasoning_tokens, cached_tokens;
  double queued_ms, prefill_ms, ttft_ms, decode_ms;
} sched_usage_t;

typedef enum {
  SCHED_FINISH_STOP = 1,
  SCHED_FINISH_LENGTH = 2,
  SCHED_FINISH_TOOL_CALLS = 3,
  SCHED_FINISH_CANCELLED = 4,
  SCHED_FINISH_ERROR = 5,
} sched_finish_t;

typedef struct {
  int index;                     /* which choice (0 .. n-1, sched_req_t.n) */
  int is_final;
  const seqout_delta_t *delta;   /* !is_final: what this step produced (never empty) */
  sched_finish_t finish;         /* is_final */
  const char *error;             /* is_final && finish == ERROR */
  const sched_usage_t *usage;    /* is_final */
  /* is_final of an embedding engine's request (sched_config_t.embed) that finished STOP:
   * [n_embd] the last prompt token's final-norm hidden state, valid during the call; else NULL */
  const float *embedding;
  int n_embd;
} sched_event_t;

/* Called on the scheduler thread; each choice ends with one final event; after the n-th the
 * request is gone (ud may be freed). */
typedef void (*sched_event_fn)(void *ud, const sched_event_t *ev);

typedef struct {
  int32_t *prompt;          /* token ids; ownership passes to the scheduler on submit */
  int n_prompt;
  sampler_params_t sampling;
  int max_tokens;           /* > 0 */
  int min_tokens;           /* end-of-sequence and stop strings are ignored before this many */
  int ignore_eos;
  int priority;             /* lower runs first (vLLM semantics); default 0 */
  int logprobs;             /* < 0: none; 0..20: the chosen token's logprob plus top n */
  const int32_t *stop_ids;  /* extra token ids that end the output (copied at submit) */
  int n_stop_ids;
  const int32_t *bias_ids;  /* logit_bias: logits[bias_ids[i]] += bias_vals[i] before sampling */
  const float *bias_vals;   /* [n_bias], each in [-100, 100]; ids in the vocabulary (copied at submit) */
  int n_bias;
  const int32_t *allowed_ids; /* [n_allowed] > 0: only these ids are sampled (copied at submit) */
  int n_allowed;
  /* bad_words (engine/sched/bad_words.h): n_bad token sequences, bad_lens[k] > 0 tokens each,
   * back to back in bad_ids; no output completes one of them (copied at submit) */
  const int32_t *bad_ids, *bad_lens;
  int n_bad;
  seqout_config_t out;      /* stop strings / ids, reasoning and tool-call parsing */
  /* choices (0 or 1: one; at most SCHED_MAX_N and max_num_seqs). The prompt is prefilled once;
   * when its last token is computed the sequence forks: each choice shares the prompt's full KV
   * blocks (references), gets a copy of the partial last block (and of the recurrent state) and
   * samples its first token from the same logits with seed sampling.seed + index. A fork that
   * finds no free block waits like a preempted sequence (its prompt is prefix-cached). */
  int n;
  /* constrained decoding (engine/sched/constraint.h; sched_constraint gives one): each sampled
   * token is masked to the constraint (on the backend with its logits_mask op when it samples
   * there, else on the host) and the output ends when the constraint is complete. A dead end (no
   * token allowed: the output cannot be completed in this vocabulary) finishes the choice with
   * ERROR, its message "constraint: dead end after N tokens: ..."; so does a grammar error (its
   * state limit, out of memory), its message naming that cause. A reasoning model's <think> part is free
   * (out.starts_in_reasoning; cons_may_think: the model may open it itself). The reference passes
   * to the scheduler on submit, refused or not. NULL: free text. */
  cons_t *constraint;
  int cons_may_think;
  int no_spec;              /* 1: this request never speculates (sched_config_t.spec_mode) */
  uint64_t cache_salt;      /* prefix-cache isolation: the seed of the block hash chain (0 = unsalted);
                               blocks are shared only between requests with the same salt */
  sched_event_fn on_event;
  void *ud;
} sched_req_t;

#define SCHED_MAX_N 16

/* Where a verify step's drafts came from (sched_stats_t.spec_src_*): the mode's drafter (prompt
 * lookup, the MTP block, or the spec_draft hook), the suffix cache across requests
 * (spec_suffix_tokens), or, with MTP, prompt lookup in place of the block's chain (spec_lookup_off 0). */
typedef enum { SCHED_DRAFT_OWN, SCHED_DRAFT_CACHE, SCHED_DRAFT_LOOKUP, SCHED_DRAFT_SOURCES } sched_draft_src_t;

/* cfg may be NULL (defaults). The scheduler uses m (its backend cache is (re)initialised) and
 * tok; both must outlive it. With n_blocks 0 the pool is planned from the memory m's backend
 * reports (sched_mem.h; GT_ENOMEM "not enough memory: ..." when one full-context sequence does
 * not fit); the plan is logged in one line (pool, max concurrency, memory sized from). */
int sched_create(model_t *m, const tok_t *tok, const sched_config_t *cfg, sched_t **out, gt_err_t *err);
void sched_free(sched_t *s); /* finishes every request with CANCELLED first */

/* Queues a request; returns its id (> 0) or a negative error: GT_EINVAL (bad parameters, a
 * prompt that leaves no room to generate, or n choices that exceed SCHED_MAX_N, max_num_seqs or
 * the KV pool: the message has the numbers; for n it starts with "n "), GT_EBUSY (waiting
 * queue full), GT_ECANCELLED (draining). On error nothing is kept and req->prompt is freed. */
int64_t sched_submit(sched_t *s, sched_req_t *req, gt_err_t *err);
/* The compiled constraint of (kind, spec) for requests of this scheduler: from its cache (bounded
 * LRU, SCHED_CONS_CACHE entries) or compiled now; see cons_get for ownership and errors. Any thread. */
#define SCHED_CONS_CACHE 64
int sched_constraint(sched_t *s, cons_kind_t kind, const char *spec, size_t len, cons_t **out, gt_err_t *err);
void sched_constraint_stats(sched_t *s, cons_cache_stats_t *out);
/* Cancels a request (queued or running): every choice gets a final CANCELLED event before the
 * next step runs. It marks the request itself (no allocation): a cancel is never lost. Unknown
 * or finished ids are ignored. */
void sched_cancel(sched_t *s, int64_t id);

/* Largest decode batch sched_warmup runs: the CUDA backend captures a graph for every size up to
 * BE_GRAPH_MAX_SEQS (256) sequences. */
#define SCHED_WARMUP_MAX_SEQS BE_GRAPH_MAX_SEQS

typedef struct {
  int prefill_tokens;   /* tokens of the warm-up's largest step */
  int decode_sizes;     /* decode steps of 1..decode_sizes sequences were run */
  int verify_sizes;     /* speculation: verify steps of 1..verify_sizes sequences (0: none) */
  int verify_tokens;    /* of verify_tokens = 1 + spec_k tokens each */
  double ms;
  long eager_steps;     /* backend decode / verify / drafter steps that ran without a graph during the warm-up */
  be_sizes_t graph_sizes; /* the backend's captured decode sizes afterwards (empty: no graphs) */
} sched_warmup_t;

/* Warm-up before the first request, on the caller's thread (before sched_run): runs the
 * largest step the configuration allows (max_batch_tokens tokens over up to max_num_seqs
 * sequences), then one decode step for each batch size 1..min(max_num_seqs, max_batch_tokens,
 * SCHED_WARMUP_MAX_SEQS), all with the batch layout real steps use, at position 0 in KV blocks
 * no request holds yet (the KV manager and prefix cache are not involved; recurrent-state
 * slots used are zeroed afterwards). A backend with graphs (CUDA) sizes its buffers and
 * captures one decode graph per size here, so real decode steps replay from the first one.
 * With speculation on it then runs one verify step of 1 + spec_k tokens per sequence for each
 * batch size 1..min(spec_max_seqs, those sizes) and, with MTP, the drafter's steps after each
 * (its pass over 1..1 + spec_k kept rows per sequence and the chained draft rows): the verify and
 * drafter graphs of those shapes (kernels/README.md "CUDA graphs").
 * Counters, cache and outputs of later requests are unchanged (tests/unit/test_sched.c).
 * Logs one line with the captured sizes. GT_EINVAL once a request was submitted or a step
 * ran; a backend error otherwise. out may be NULL. */
int sched_warmup(sched_t *s, sched_warmup_t *out, gt_err_t *err);

/* Runs one step; returns 1 if it did work, 0 if idle, negative on a backend error (running
 * requests are then finished with ERROR). */
int sched_step(sched_t *s, gt_err_t *err);
/* Scheduler thread body: steps until sched_stop; sleeps while idle (woken by submit). */
void sched_run(sched_t *s);
void sched_stop(sched_t *s);
/* Draining: new submissions fail with GT_ECANCELLED; running ones continue. */
void sched_drain(sched_t *s);

typedef struct {
  int running, waiting;
  int kv_blocks, kv_used;       /* blocks in the pool / referenced */
  int n_ctx, max_num_seqs, block_tokens;
  uint64_t prefix_queried_tokens, prefix_hit_tokens;
  uint64_t prompt_tokens, generation_tokens;
  uint64_t computed_tokens;     /* tokens run through the model: prompt chunks and decodes */
  uint64_t preemptions, steps;
  uint64_t snapshot_replaced;   /* hybrid: prefix snapshots dropped for a newer one (all slots held) */
  uint64_t fork_waits;          /* n > 1 choices that found no free KV block at the fork and waited */
  uint64_t eager_steps;         /* backend decode / verify / drafter steps run without a graph (CUDA; 0 on CPU) */
  uint64_t graph_captures;      /* backend graphs captured or updated (CUDA; constant in steady decode) */
  uint64_t finished[6];         /* by sched_finish_t */
  uint64_t constrained_tokens;  /* tokens sampled under a constraint mask */
  double mask_ms;               /* scheduler time spent filling and uploading those masks */
  /* speculative decoding, as vLLM's spec_decode counters: verify steps of a sequence with at
   * least one draft, drafts proposed, drafts accepted, and accepted by draft position */
  uint64_t spec_drafts, spec_draft_tokens, spec_accepted_tokens;
  /* fillers verified after drafts so that a step's decoding sequences share a row count (not in the
   * counts above), and of those the ones kept (the model's own next token) */
  uint64_t spec_fill_tokens, spec_fill_accepted;
  /* spec_draft_tokens and spec_accepted_tokens by where the drafts came from (each sums to its total) */
  uint64_t spec_src_draft_tokens[SCHED_DRAFT_SOURCES], spec_src_accepted[SCHED_DRAFT_SOURCES];
  uint64_t spec_accepted_pos[SCHED_SPEC_MAX_K];
  uint64_t spec_rollbacks;      /* hybrid: recurrent states restored after a rejected draft */
  uint64_t spec_mtp_drafted;    /* drafts the MTP block computed (verified or not: a request that ends
                                   leaves its last ones unverified) */
  uint64_t spec_mtp_passes;     /* steps after which the MTP pass ran (none past spec_max_seqs decodes) */
  uint64_t spec_cost_off_steps; /* pure decode steps that did not draft because drafting did not pay
                                   (spec_cost.h), probes aside */
} sched_stats_t;
void sched_stats(sched_t *s, sched_stats_t *out);

/* The MTP draft vocabulary of spec_draft_vocab (sched_config_t) for a model of n_vocab ids: the
 * model_t.mtp_draft_vocab sched_create sets (0 = the whole vocabulary). */
int sched_spec_draft_vocab(int spec_draft_vocab, int n_vocab);

#endif
