/* engine/sched/spec.h — speculative decoding: the draft proposers the scheduler verifies
 * (engine/sched/sched.c, engine/SERVE.md "Speculative decoding").
 *
 * Prompt lookup (n-gram): the last n tokens of a sequence (its prompt followed by its output)
 * are looked up earlier in the same sequence; the tokens that followed the most recent earlier
 * occurrence are the drafts. Longer n-grams are tried first. spec_ngram_draft is the scan (pure, no
 * state, O(n)); the scheduler gets the same drafts through an index built as the sequence grows
 * (spec_index.h), and also drafts from finished requests' outputs (spec_suffix.h). */
#ifndef GANTRY_ENGINE_SPEC_H
#define GANTRY_ENGINE_SPEC_H

#include <stdint.h>

#include "common/err.h"

struct model;

/* Drafts for toks[0..n): the continuation (up to k tokens, never past n) of the most recent
 * earlier occurrence of the longest suffix of length in [min_n, max_n] that occurs earlier.
 * Writes out[k]; returns the number of drafts (0: no suffix of those lengths recurs). */
int spec_ngram_draft(const int32_t *toks, int n, int k, int min_n, int max_n, int32_t *out);

/* MTP drafting (engine/sched/spec_mtp.c) over the model's MTP block (model_mtp_forward,
 * engine/models/model.h). After each step the scheduler runs, for every sequence of the step,
 * the MTP block over the rows of the step whose next token is now known (its K/V at those
 * positions stay current), and then drafts from the last: draft 1 from that row's logits
 * (argmax, taken on the backend: model_mtp_forward_greedy, so only the ids come back), each further draft by feeding the previous one with the block's own output hidden
 * state (chaining), one position further each. With a backend that has argmax_dev the chain stays
 * on the device (model_mtp_forward_greedy_dev, be_batch_t.tok_src): every step's ids are kept there
 * and one download at the end brings all the drafts back, one transfer per call instead of one per
 * MTP step; the drafts are the step-by-step path's. The chained rows' K/V are written at positions
 * the next step's pass writes again before any row reads them. A pass over sequences of different
 * row counts is padded to the most rows any of them runs, the shape a graph replays (CUDA: else it
 * runs eagerly), when every sequence has those rows in the forward (src_rows) and their positions
 * in its blocks, and the count is at most BE_GRAPH_MAX_Q: padded rows read the next hidden rows,
 * take the last token again, give no output, and write K/V the next pass writes again before any
 * row reads it. Every backend pads alike. Drafts only choose what is verified: output never
 * depends on them. */
typedef struct {
  int src_row;           /* the sequence's first row in the last model forward's batch */
  int n_rows;            /* rows to run, >= 1: positions pos0 .. pos0 + n_rows - 1 */
  int pos0;
  const int32_t *next;   /* [n_rows] the token at pos0 + j + 1 (the row's MTP input token) */
  const int32_t *blocks; /* the sequence's KV block table [n_blocks]: holds every row's position and */
  int n_blocks;          /* a chained draft's only while its position is in one of these blocks */
  int src_rows;          /* the sequence's rows in that forward from src_row (0: none past n_rows): padding */
  int k;                 /* drafts wanted (0: only the K/V) */
  int32_t draft[8];      /* out: n_draft drafts, the tokens at pos0 + n_rows + 1 .. */
  int n_draft;
} spec_mtp_seq_t;

typedef struct spec_mtp spec_mtp_t;
/* Buffers for steps of up to max_tokens rows over max_seqs sequences with block tables of
 * max_blocks; NULL on out of memory. */
spec_mtp_t *spec_mtp_create(int max_tokens, int max_seqs, int max_blocks, int n_vocab);
void spec_mtp_free(spec_mtp_t *w);
/* Runs the pass and the drafts for seqs[n] (n <= max_seqs, rows <= max_tokens) on m (its MTP
 * drafter enabled) right after the model forward the src rows refer to. GT_OK or a backend error. */
int spec_mtp_run(spec_mtp_t *w, struct model *m, spec_mtp_seq_t *seqs, int n, int block_tokens, gt_err_t *err);

#endif
