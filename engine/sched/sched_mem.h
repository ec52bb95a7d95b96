/* engine/sched/sched_mem.h — the scheduler's memory planning: how many KV blocks (and recurrent-state
 * slots of hybrid models) the pool gets, from the memory the model's backend reports
 * (be_ops_t.mem_info) once the weights and the model's buffers are allocated.
 *
 * The rule (sched_mem_plan; engine/SERVE.md "KV pool size"):
 * - `--kv-memory B` (bytes): the pool, blocks plus state slots, takes B. A fraction f in (0, 1)
 *   takes f x the free memory of the device the pool lives on: on CUDA the GPU's free memory
 *   after the weights, on the CPU backend the host's MemAvailable after the weights.
 * - Default: max_num_seqs sequences of the full context n_ctx plus the state slots, when that
 *   fits in `share` of the free memory (SCHED_MEM_SHARE_DEVICE of a GPU, which the engine has
 *   to itself; SCHED_MEM_SHARE_HOST of host memory, which the OS, other processes and in CI
 *   several engines share); otherwise as many blocks as fit in that share.
 * - The pool must hold one sequence of n_ctx tokens (plus the state slots) and fit in the free
 *   memory; otherwise GT_ENOMEM with "not enough memory: ..." and the numbers.
 * Pure: sched_mem_plan and sched_mem_format touch no backend (tests/unit/test_sched_mem.c). */
#ifndef GANTRY_ENGINE_SCHED_MEM_H
#define GANTRY_ENGINE_SCHED_MEM_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "engine/models/model.h"

#define SCHED_MEM_SHARE_DEVICE 0.90
#define SCHED_MEM_SHARE_HOST 0.25

typedef struct {
  uint64_t free_bytes, total_bytes; /* the device's memory now (after the weights); 0: unknown */
  char mem_what[48];                /* which memory, for the log ("cuda:0", "host MemAvailable") */
  double share;                     /* default rule: fraction of free_bytes the pool may take */
  double kv_fraction;               /* --kv-memory as a fraction of free_bytes, in (0, 1); 0: not given */
  uint64_t kv_bytes;                /* --kv-memory in bytes; 0: not given */
  int max_num_seqs, n_ctx, block_tokens;
  size_t kv_bytes_per_token;        /* all attention layers, K and V (model_kv_bytes_per_token) */
  size_t state_bytes_per_slot;      /* hybrid models (model_state_bytes_per_slot); 0 for dense ones */
  int n_state_slots;                /* running + snapshot + speculation spare slots (spec_max_seqs x spec_k); 0 for dense models */
  uint64_t weight_bytes;            /* for the log line only */
} sched_mem_in_t;

typedef struct {
  int n_blocks;
  int n_state_slots;
  uint64_t kv_bytes;      /* n_blocks * block_tokens * kv_bytes_per_token */
  uint64_t state_bytes;   /* n_state_slots * state_bytes_per_slot */
  double max_concurrency; /* sequences of n_ctx tokens the pool holds at once */
  const char *rule;       /* "full" (max_num_seqs x n_ctx fit the share), "fit" (shrunk to the
                           * share), "kv-memory" (the option), "blocks" (a block count was given) */
} sched_mem_plan_t;

/* Plans the pool for in; GT_OK and *out, GT_ENOMEM ("not enough memory: ...") when not even one
 * full-context sequence fits, GT_EUNSUPPORTED for a fraction of an unknown memory, GT_EINVAL for
 * bad sizes. */
int sched_mem_plan(const sched_mem_in_t *in, sched_mem_plan_t *out, gt_err_t *err);

/* The start-up log line of a plan (key=value): the pool in tokens and blocks, the maximum
 * concurrency at full context, the rule, the memory it was sized from (which, free, total), the
 * KV and weight bytes. Returns buf. */
const char *sched_mem_format(const sched_mem_in_t *in, const sched_mem_plan_t *p, char *buf, size_t n);

/* Fills *in from m and its backend: per-token and per-slot bytes, the backend's mem_info (left
 * unknown when it has none or fails) and the share for its kind (host memory for the CPU
 * backend, a device of its own otherwise). The caller sets the sequence / option fields. */
void sched_mem_input(model_t *m, sched_mem_in_t *in);

/* Before loading: GT_ENOMEM ("not enough memory: the weights need ...") when weight_bytes exceed
 * the free memory be reports; GT_OK when they fit or the memory is unknown. */
int sched_mem_check_weights(be_t *be, uint64_t weight_bytes, gt_err_t *err);

/* Checks that a pool of n_blocks of block_tokens and n_slots state slots fits in the free memory
 * of m's device (pools sized by need: generate, bench); GT_ENOMEM naming the memory otherwise.
 * GT_OK when the memory is unknown. */
int sched_mem_check(model_t *m, int n_blocks, int block_tokens, int n_slots, gt_err_t *err);

/* "1.50GiB" / "12.0MiB" into buf[n]; returns buf. */
const char *sched_mem_fmt_bytes(double bytes, char *buf, size_t n);

#endif
