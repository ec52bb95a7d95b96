/* kernels/gdn_conv_qkv.cu — see gdn_conv_qkv.cuh. Block (head, sequence, chunk) over the n_k q
 * heads, the n_k k heads and the n_v v heads of the conv channels and the sequence's tokens in
 * chunks of KC_GDN_CONV_QKV_CHUNK; thread i of the block owns channel i of its head and slides
 * that channel's window over the chunk's tokens in order, with conv1d.cu's per-token arithmetic
 * (the window's first K-1 inputs come from x, or from the slot's state for positions before the
 * sequence's first token of this step). Chunk 0 alone reads the state (a chunk is at least K-1
 * tokens long) and writes it back once, after its tokens, from the sequence's last K-1 inputs:
 * no other block touches it; the window after token i also goes to the sequence's position slot i
 * when it has one (be_batch_t.state_pos_slot), from whichever chunk holds i. For q / k heads each token's row goes through shared memory into
 * l2norm.cu's reduction: its thread count (64, or 256 at d_k >= 256) strides over the row, then
 * kc_block_sum; the extra threads of this block add zeros, which leaves every partial sum and the
 * reduction tree unchanged. Before the chunks, a block walked all of a sequence's tokens (an
 * 8,192-token qwen35-9b prefill: 7.6 ms per layer on an H200, 64 blocks). */
#include "kernels/conv1d.cuh"
#include "kernels/gdn_conv_qkv.cuh"

/* l2norm.cu's block size for rows of d */
static __host__ __device__ __forceinline__ int l2norm_threads(int d) { return d >= 256 ? 256 : 64; }

__global__ void __launch_bounds__(KC_GDN_CONV_QKV_MAX_HD)
    gdn_conv_qkv_kernel(kc_batch_t b, float *conv, int n_slots, const float *__restrict__ x,
                        const float *__restrict__ w, int K, float *q, float *k, float *v, int n_k, int d_k, int n_v,
                        int d_v, float eps, float q_scale) {
  kc_pdl_wait();
  kc_pdl_trigger();
  __shared__ float row[KC_GDN_CONV_QKV_MAX_HD]; /* the token's conv output of a q / k head */
  const int s = blockIdx.y, hh = blockIdx.x, kd = n_k * d_k, C = 2 * kd + n_v * d_v;
  const int slot = b.state_slot[s];
  if (slot < 0 || slot >= n_slots) { /* uniform over the block: no barrier is skipped by part of it */
    if (threadIdx.x == 0) atomicOr(b.eflag, KC_EFLAG_STATE);
    return;
  }
  /* head kind: 0 q, 1 k, 2 v; c0 its first channel; out / ld its rows in q, k or v */
  const int kind = hh < n_k ? 0 : hh < 2 * n_k ? 1 : 2;
  const int hd = kind < 2 ? d_k : d_v;
  const int h = kind == 0 ? hh : kind == 1 ? hh - n_k : hh - 2 * n_k;
  const int c0 = kind == 0 ? h * d_k : kind == 1 ? kd + h * d_k : 2 * kd + h * d_v;
  float *out = (kind == 0 ? q : kind == 1 ? k : v) + (size_t)h * hd;
  const size_t ld = kind < 2 ? (size_t)kd : (size_t)n_v * d_v;
  const int i = threadIdx.x, ch = c0 + i;
  const bool own = i < hd;

  const int t0 = b.seq_first[s], n = b.seq_ntok[s], c = blockIdx.z;
  if (c * KC_GDN_CONV_QKV_CHUNK >= n) return; /* uniform: past this sequence's tokens */
  const int tb = t0 + c * KC_GDN_CONV_QKV_CHUNK, te = min(t0 + n, tb + KC_GDN_CONV_QKV_CHUNK);
  float *stt = conv + (size_t)slot * (K - 1) * C;
  const float *wc = w + (size_t)ch * K;
  /* win[r] = the input at position tb - (K-1) + r: x inside the step, else state row
   * (position - t0 + K-1) (chunk 0 only); old = the state as read (chunk 0 writes it back) */
  float win[KC_CONV_MAX_K], old[KC_CONV_MAX_K];
  if (own) {
#pragma unroll
    for (int r = 0; r < KC_CONV_MAX_K; r++)
      if (r < K - 1) {
        const int p = tb - (K - 1) + r;
        if (c == 0) old[r] = stt[(size_t)r * C + ch];
        win[r] = p >= t0 ? x[(size_t)p * C + ch] : old[r]; /* p < t0 only in chunk 0: p - t0 + K-1 = r */
      }
  }
  const int nt = l2norm_threads(d_k);
  const float scale = kind == 0 ? q_scale : 1.0f;
  /* the next token's input is loaded one token ahead, so its latency overlaps the reduction */
  float xn = own ? x[(size_t)tb * C + ch] : 0.0f;
  for (int t = tb; t < te; t++) {
    float y = 0.0f;
    if (own) { /* conv1d.cu's per-token step */
      win[K - 1] = xn;
      if (t + 1 < te) xn = x[(size_t)(t + 1) * C + ch];
      float acc = 0.0f;
      for (int j = 0; j < K; j++) acc += wc[j] * win[j];
      y = kc_silu(acc);
      for (int j = 0; j < K - 1; j++) win[j] = win[j + 1];
      const int ps = kc_pos_slot(b, s, t - t0, n, n_slots); /* the window after this token */
      if (ps >= 0)
        for (int r = 0; r < K - 1; r++) conv[((size_t)ps * (K - 1) + r) * C + ch] = win[r];
    }
    if (kind == 2) { /* v: the conv output as is */
      if (own) out[(size_t)t * ld + i] = y;
      continue;
    }
    /* q / k: l2norm.cu on the row. Every thread has finished the previous token's reads of row:
     * they precede the barriers inside the previous kc_block_sum. */
    if (own) row[i] = y;
    __syncthreads();
    float ss = 0.0f;
    if (i < nt)
      for (int e = i; e < d_k; e += nt) ss += row[e] * row[e];
    ss = kc_block_sum(ss);
    const float f = scale / sqrtf(ss + eps);
    if (own) out[(size_t)t * ld + i] = y * f;
  }
  if (own && c == 0) /* the sequence's last K-1 inputs: x, or the old state when n < K-1 */
    for (int r = 0; r < K - 1; r++) {
      const int p = t0 + n - (K - 1) + r;
      stt[(size_t)r * C + ch] = p >= t0 ? x[(size_t)p * C + ch] : old[p - t0 + K - 1];
    }
}

KC_API int kc_gdn_conv_qkv(cudaStream_t st, kc_batch_t b, float *conv, int n_slots, const float *x, const float *w,
                           int K, float *q, float *k, float *v, int n_k, int d_k, int n_v, int d_v, float eps,
                           float q_scale) {
  if (K < 2 || K > KC_CONV_MAX_K || n_k <= 0 || n_v <= 0 || d_k <= 0 || d_v <= 0 || d_k > KC_GDN_CONV_QKV_MAX_HD ||
      d_v > KC_GDN_CONV_QKV_MAX_HD || b.n_seq > 65535 || K - 1 > KC_GDN_CONV_QKV_CHUNK)
    return (int)cudaErrorInvalidValue;
  if (b.n_seq <= 0) return 0;
  const int hd = d_k > d_v ? d_k : d_v;
  int threads = (hd + 31) / 32 * 32;
  if (threads < l2norm_threads(d_k)) threads = l2norm_threads(d_k);
  /* chunks of the longest sequence, bounded by the step's tokens (blocks past a sequence's end
   * return at once) */
  const int chunks = (b.n_tok + KC_GDN_CONV_QKV_CHUNK - 1) / KC_GDN_CONV_QKV_CHUNK;
  if (chunks > 65535) return (int)cudaErrorInvalidValue;
  const dim3 grid((unsigned)(2 * n_k + n_v), (unsigned)b.n_seq, (unsigned)(chunks > 0 ? chunks : 1));
  kc_launch(gdn_conv_qkv_kernel, grid, threads, 0, st, b, conv, n_slots, x, w, K, q, k, v, n_k, d_k, n_v, d_v, eps, q_scale);
  return (int)cudaGetLastError();
}
