/* engine/models/tp.h — a tensor-parallel rank group: one model over N ranks in one process.
 *
 * The group owns N backends (one per rank, each holding its shard of the weights:
 * engine/models/shard.h), N rank models, one worker thread per rank and the communicator the
 * ranks' all_reduce goes through (engine/backend/comm.h). tp_load returns a group model and a
 * group backend that the scheduler drives like any other model: the scheduler plans each step
 * once and model_forward hands that same batch (tokens, positions, block tables, state slots)
 * to every rank's worker, which runs the model code on its slice. The output head is
 * vocab-parallel: under model_forward (logits wanted: logprobs, logit_bias, penalties) the ranks
 * write their columns of the shared host logits (the all-gather); under model_forward_sample a
 * greedy row crosses as one id and one logit per rank (the group takes the largest), and only
 * the other rows are gathered and sampled on the host. Cache operations of the group backend
 * (kv_init through model_cache_init, state_copy, state_zero, kv_block_copy) run on every
 * rank's worker too.
 *
 * Failure: a rank whose step fails aborts the communicator, so no rank waits for it; the step
 * returns that rank's error and the group refuses every later step and cache operation
 * ("tensor-parallel group failed: ...") — the caller must stop (engine/SERVE.md "Tensor
 * parallelism"). */
#ifndef GANTRY_ENGINE_TP_H
#define GANTRY_ENGINE_TP_H

#include "engine/backend/comm.h"
#include "engine/models/model.h"

typedef struct tp_group tp_group_t;

/* Creates rank `rank`'s backend with the group's communicator (not owned by the backend). */
typedef int (*tp_backend_fn)(void *ud, int rank, be_comm_t *comm, be_t **out, gt_err_t *err);

/* A tp_backend_fn for CPU ranks: ud is a const int * with the threads of each rank (NULL: 1). */
int tp_cpu_backend(void *ud, int rank, be_comm_t *comm, be_t **out, gt_err_t *err);

/* The most ranks of one group (--tp N): the size of the group's per-rank arrays. The
 * communicators bound their own ranks apart (BE_COMM_MAX_RANKS for the CPU one, comm_nccl.c's
 * for NCCL); tp_load refuses a communicator of more ranks than this. */
#define TP_MAX_RANKS 16

/* Loads g over comm->n_ranks (1..TP_MAX_RANKS) ranks, each with a backend from mk, scratch for
 * max_tokens tokens. Takes ownership of comm (also on failure). On success *out_model is the
 * group model (m->tp set) and *out_be its group backend (m->be); free with model_free(model)
 * then be_destroy(be). Errors name the rank and, for a shape that cannot be split, the
 * tensor or dimension. */
int tp_load(const gguf_t *g, be_comm_t *comm, tp_backend_fn mk, void *ud, int max_tokens, model_t **out_model,
            be_t **out_be, gt_err_t *err);

int tp_n_ranks(const tp_group_t *g);
/* 1 once a rank failed (every later step and cache operation is refused). Call from the
 * thread that drives the group. */
int tp_failed(const tp_group_t *g);
/* Fault injection for tests: rank's forward number `step` (0: its next one) fails with
 * GT_EINTERNAL "injected failure". */
void tp_fail_rank_at(tp_group_t *g, int rank, long step);
model_t *tp_rank_model(tp_group_t *g, int rank);

/* ---- used by engine/models/model.c for a group model ---- */
size_t tp_kv_bytes_per_token(tp_group_t *g);   /* sum over ranks */
size_t tp_state_bytes_per_slot(tp_group_t *g); /* sum over ranks */
int tp_cache_init(tp_group_t *g, int n_blocks, int block_tokens, int n_slots, gt_err_t *err);

/* all_reduce calls and their nanoseconds (waiting included) of each rank so far (CPU ranks;
 * 0 for backends that do not count). calls, ns: [n_ranks]. */
void tp_comm_stats(tp_group_t *g, uint64_t *calls, uint64_t *ns);

#endif
