/* engine/backend/backend_cpu_internal.h — state of the CPU backend, shared by its source files
 * (backend_cpu.c: memory, batch, dense and attention ops; backend_cpu_gdn.c: Gated DeltaNet). */
#ifndef GANTRY_ENGINE_BACKEND_CPU_INTERNAL_H
#define GANTRY_ENGINE_BACKEND_CPU_INTERNAL_H

#include <stdlib.h>

#include "engine/backend/backend.h"
#include "engine/backend/comm.h"

typedef struct {
  be_t base;
  int n_threads;
  /* current batch (owned copies of be_batch_t arrays) */
  be_batch_t b;
  int32_t *tok, *pos, *seq_first, *seq_ntok, *block_table, *state_slot, *out_tok;
  int32_t *state_pos_slot; /* [n_seq * BE_POS_SLOTS] or unused (b.state_pos_slot NULL) */
  int32_t *seq_of_tok; /* [n_tok] derived */
  /* paged KV: k[layer], v[layer] of [n_blocks, block_tokens, kv_dim] */
  int kv_layers, kv_blocks, kv_block_tokens, kv_dim;
  float **k, **v;
  int kv_round_bf16; /* kv_set_type(BF16): K and V rounded to bf16 as they are stored */
  /* recurrent state: conv[(layer * n_slots + slot) * conv_dim], ssm likewise with ssm_dim */
  int st_layers, st_slots;
  size_t conv_dim, ssm_dim;
  float *conv, *ssm;
  /* grow-only scratch of the fused ops (cpu_scratch), kept across steps; freed by destroy */
  void *scratch;
  size_t scratch_bytes;
  /* ranks: the group's communicator (NULL: one rank), all_reduce calls and their time */
  be_comm_t *comm;
  uint64_t comm_calls, comm_ns;
} be_cpu_t;

/* c's scratch of at least `bytes`, grown (never shrunk) as needed; NULL when out of memory.
 * One user at a time: the pointer is valid until the next cpu_scratch call. */
static inline void *cpu_scratch(be_cpu_t *c, size_t bytes) {
  if (bytes <= c->scratch_bytes) return c->scratch;
  void *p = realloc(c->scratch, bytes);
  if (!p) return NULL;
  c->scratch = p;
  c->scratch_bytes = bytes;
  return p;
}

static inline float *cpu_conv_state(be_cpu_t *c, int layer, int slot) {
  return c->conv + ((size_t)layer * c->st_slots + slot) * c->conv_dim;
}
static inline float *cpu_ssm_state(be_cpu_t *c, int layer, int slot) {
  return c->ssm + ((size_t)layer * c->st_slots + slot) * c->ssm_dim;
}

/* Gated DeltaNet ops (backend_cpu_gdn.c), signatures as in be_ops_t. */
void cpu_conv1d_silu(be_t *be, int layer, const float *x, float *out, const be_weight_t *w, int C, int K);
void cpu_l2norm(be_t *be, float *x, int rows, int d, float eps, float scale);
void cpu_gdn_conv_qkv(be_t *be, int layer, const float *x, const be_weight_t *w, int K, float *q, float *k, float *v,
                      int n_k, int d_k, int n_v, int d_v, float eps, float q_scale);
void cpu_gdn_gates(be_t *be, const float *alpha, const float *beta_in, const be_weight_t *a,
                   const be_weight_t *dt_bias, float *g, float *beta, int n_v);
void cpu_gdn_scan(be_t *be, int layer, const float *q, const float *k, const float *v,
                  const float *g, const float *beta, float *out, int n_k, int n_v, int d_k, int d_v);
void cpu_rmsnorm_gated(be_t *be, const float *x, const be_weight_t *w, const float *z, float *out,
                       int rows, int d, float eps);

#endif
