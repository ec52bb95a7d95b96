/* kernels/rope.cuh — NeoX RoPE in place on x[n_tok, n_head, head_dim] over dims [0, n_rot):
 * pairs (i, i + n_rot/2), angle pos[t] * theta^(-2i/n_rot) computed in double like the CPU
 * reference; freq_bf16 rounds the inverse frequencies to bf16 (HF bf16 checkpoints). */
#ifndef GANTRY_KERNELS_ROPE_CUH
#define GANTRY_KERNELS_ROPE_CUH
#include "kernels/common.cuh"

KC_API int kc_rope(cudaStream_t st, kc_batch_t b, float *x, int n_head, int head_dim, int n_rot, float theta,
                   int freq_bf16);
#endif
