/* engine/backend/gdn_chunked.h — chunked form of the gated delta rule (the form GPU prefill kernels use),
 * checked against the sequential recurrence of the CPU backend (engine/backend/backend_cpu_gdn.c).
 *
 * Recurrence per value head, token i: S = S*exp(g_i); S += k_i ⊗ beta_i (v_i - Sᵀk_i); o_i = Sᵀq_i.
 * Over a chunk of L tokens starting from state S0, with cumulative decays c_i = g_0 + ... + g_i:
 *   (I + A) D = R,  A[i][j] = beta_i exp(c_i - c_j) (k_i·k_j) for j < i (strictly lower),
 *                   R_i = beta_i (v_i - exp(c_i) S0ᵀk_i)        (D_i is the delta written at i)
 *   o_i = exp(c_i) S0ᵀq_i + sum_{j<=i} exp(c_i - c_j) (q_i·k_j) D_j
 *   S_L = exp(c_{L-1}) S0 + sum_j exp(c_{L-1} - c_j) k_j ⊗ D_j
 * The triangular system is solved by forward substitution (the UT transform, T = (I + A)^-1,
 * applied without forming T). Cumulative decays are summed in double so that exp(c_i - c_j)
 * stays accurate in long chunks. All other arithmetic is fp32. */
#ifndef GANTRY_ENGINE_GDN_CHUNKED_H
#define GANTRY_ENGINE_GDN_CHUNKED_H

#include <stddef.h>

#define GDN_CHUNK_MAX 256

/* Floats of workspace gdn_chunked_head needs for chunks of `chunk` tokens. */
size_t gdn_chunked_ws_floats(int chunk, int d_k, int d_v);

/* One value head over n tokens in chunks of `chunk` (1..GDN_CHUNK_MAX) tokens. Token t reads
 * q + t*qk_ld, k + t*qk_ld (d_k floats), v + t*v_ld (d_v), g[t*gb_ld], beta[t*gb_ld]; writes
 * out + t*v_ld (d_v). S [d_k, d_v] is the head's state, updated in place. ws: caller-owned,
 * gdn_chunked_ws_floats(chunk, d_k, d_v) floats. out must not alias q, k or v.
 * Returns 0, or -1 on bad sizes (nothing written). */
int gdn_chunked_head(const float *q, const float *k, const float *v, const float *g, const float *beta,
                     size_t qk_ld, size_t v_ld, size_t gb_ld, float *out, float *S, int n, int d_k, int d_v,
                     int chunk, float *ws);

/* All value heads of one sequence, in gdn_scan's layout: q, k [n, n_k*d_k]; v, out [n, n_v*d_v];
 * g, beta [n, n_v]; S [n_v, d_k, d_v]; value head h uses key head h % n_k. ws as above.
 * Returns 0, or -1 on bad sizes. */
int gdn_chunked_seq(const float *q, const float *k, const float *v, const float *g, const float *beta, float *out,
                    float *S, int n, int n_k, int n_v, int d_k, int d_v, int chunk, float *ws);

#endif
