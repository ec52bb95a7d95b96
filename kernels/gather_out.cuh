/* kernels/gather_out.cuh — out[i, :] = x[out_tok[i], :] for i < n_out (rows of d floats);
 * an index outside the batch raises KC_EFLAG_OUT_TOK. */
#ifndef GANTRY_KERNELS_GATHER_OUT_CUH
#define GANTRY_KERNELS_GATHER_OUT_CUH
#include "kernels/common.cuh"

KC_API int kc_gather_out(cudaStream_t st, kc_batch_t b, const float *x, float *out, int d);
#endif
