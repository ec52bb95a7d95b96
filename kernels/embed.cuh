/* kernels/embed.cuh — out[n_tok, cols] = dequant(W)[tok[t]] (W [rows, cols] in its GGUF type,
 * cols % 8 == 0); ids outside [0, rows) raise KC_EFLAG_TOKEN and leave their row unwritten. */
#ifndef GANTRY_KERNELS_EMBED_CUH
#define GANTRY_KERNELS_EMBED_CUH
#include "kernels/common.cuh"

KC_API int kc_embed(cudaStream_t st, kc_batch_t b, int type, const void *w, int64_t rows, int64_t cols,
                    size_t row_bytes, float *out);
#endif
