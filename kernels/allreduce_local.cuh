/* kernels/allreduce_local.cuh — the all-reduce of N ranks that share one GPU (the device-local
 * communicator, engine/backend/comm_local.c; design in engine/TP.md "Ranks sharing one GPU").
 *
 * One round sums up to `cap` floats: each rank's stream runs
 *   put   (grid)     stage[p][rank][0..n) = x[0..n); the last block to finish bumps arrive[rank]
 *   wait  (1 thread) spins until every arrive[q] has reached this rank's own count
 *   sum   (grid)     x[i] = ((stage[p][0][i] + stage[p][1][i]) + stage[p][2][i]) + ... (rank order)
 * where p is the parity of the rank's round count, read on the device from arrive[rank]. Nothing in
 * the kernels' arguments changes from round to round, so the three launches can be captured into a
 * CUDA graph and replayed: the counters live in device memory and only grow. Every rank computes
 * the same fp32 additions in the same order: bit-identical results on every rank, deterministic.
 * Two stage slots suffice: a rank writes slot p again two rounds later, after its own wait of the
 * round in between, which no peer passes before it has finished reading slot p (its sum precedes
 * its next arrival on its stream). wait stops early when *abort becomes non-zero (host-mapped
 * memory the host sets from any thread), or after timeout_ns (then it sets *abort and *timed_out to
 * 1 + the rank it waited for): a peer that never arrives is an error, never a hang. The result of
 * an aborted round is unspecified. */
#ifndef GANTRY_KERNELS_ALLREDUCE_LOCAL_CUH
#define GANTRY_KERNELS_ALLREDUCE_LOCAL_CUH
#include "kernels/common.cuh"

#define KC_AR_LOCAL_MAX_RANKS 16
#define KC_AR_LOCAL_STRIDE 32 /* words between two ranks' counters (a 128-byte line each) */

typedef struct {
  float *stage;       /* [2][n_ranks][cap] device memory */
  unsigned *arrive;   /* [n_ranks * KC_AR_LOCAL_STRIDE] device memory, zeroed at creation: rounds arrived */
  unsigned *done;     /* [n_ranks * KC_AR_LOCAL_STRIDE] device memory, zeroed: blocks of put finished */
  int *abort;         /* host-mapped (device pointer) */
  int *timed_out;     /* host-mapped (device pointer) */
  int n_ranks;
  size_t cap;         /* floats of one stage slot */
} kc_ar_local_t;

/* The three launches of one round of `rank` on st (n <= a->cap floats at x, device memory of the
 * rank); each returns a cudaError_t value. */
KC_API int kc_ar_local_put(cudaStream_t st, kc_ar_local_t a, int rank, const float *x, size_t n);
KC_API int kc_ar_local_wait(cudaStream_t st, kc_ar_local_t a, int rank, long long timeout_ns);
KC_API int kc_ar_local_sum(cudaStream_t st, kc_ar_local_t a, int rank, float *x, size_t n);
#endif
