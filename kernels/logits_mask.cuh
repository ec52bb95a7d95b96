/* kernels/logits_mask.cuh — constrained decoding: x[r, v] = -inf where bit v % 32 of
 * mask[rmap[r] * words + v / 32] is clear (words = ceil(n_vocab / 32)); rows whose rmap is
 * 0xffffffff are untouched. x [rows, n_vocab]; mask [n_slots, words]; rmap [rows]. */
#ifndef GANTRY_KERNELS_LOGITS_MASK_CUH
#define GANTRY_KERNELS_LOGITS_MASK_CUH
#include <stdint.h>

#include "kernels/common.cuh"
KC_API int kc_logits_mask(cudaStream_t st, float *x, const uint32_t *mask, const uint32_t *rmap, int rows, int n_vocab);
#endif
