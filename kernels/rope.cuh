/* kernels/rope.cuh — NeoX RoPE in place on x[n_tok, n_head, head_dim] over dims [0, n_rot):
 * pairs (i, i + n_rot/2). inv_freq [n_rot/2] (double, device) is the host-made table of the
 * CPU reference: theta^(-2i/n_rot), or, with freq_bf16, the bf16-rounded fp32 inverse
 * frequency (HF bf16 checkpoints). The angle pos * inv_freq and its cos/sin are computed in
 * double like the CPU backend (the fp32 product first when freq_bf16). */
#ifndef GANTRY_KERNELS_ROPE_CUH
#define GANTRY_KERNELS_ROPE_CUH
#include "kernels/common.cuh"

KC_API int kc_rope(cudaStream_t st, kc_batch_t b, float *x, int n_head, int head_dim, int n_rot,
                   const double *inv_freq, int freq_bf16);
#endif
