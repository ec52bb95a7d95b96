/* engine/backend/backend_cuda.c — the CUDA backend: creation and destruction, memory, the KV and recurrent
 * state caches, the batch, sync / download / sample and the ops table. The ops are launched by
 * backend_cuda_ops.c and recorded into CUDA graphs by backend_cuda_graph.c; the state and the
 * error contract are in backend_cuda_internal.h. */
#include "engine/backend/backend_cuda_internal.h"

#include "engine/backend/comm.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CU_BLAS_WS_BYTES ((size_t)32 << 20)

/* ---- memory ---- */

static void *cu_alloc(be_t *be, size_t bytes) {
  void *p = NULL;
  cu__flush_eager(be);
  if (cudaMalloc(&p, bytes ? bytes : 256) != cudaSuccess) {
    (void)cudaGetLastError();
    return NULL;
  }
  if (KC_CUDA(CU_ERR(be), cudaMemsetAsync(p, 0, bytes ? bytes : 256, CU_BE(be)->stream)) ||
      KC_CUDA(CU_ERR(be), cudaStreamSynchronize(CU_BE(be)->stream))) {
    cudaFree(p);
    return NULL;
  }
  return p;
}

static void cu_free(be_t *be, void *p) {
  if (!p) return;
  cu__flush_eager(be);
  cudaStreamSynchronize(CU_BE(be)->stream);
  KC_CUDA(CU_ERR(be), cudaFree(p));
}

static int cu_upload(be_t *be, void *dst, const void *src, size_t bytes) {
  be_cuda_t *c = CU_BE(be);
  cu__flush_eager(be);
  if (KC_CUDA(CU_ERR(be), cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, c->stream)) ||
      KC_CUDA(CU_ERR(be), cudaStreamSynchronize(c->stream)))
    return GT_EINTERNAL;
  return GT_OK;
}

/* Waits for the stream, turns device error flags into be->err; returns and clears the code. */
static int cu_sync(be_t *be) {
  be_cuda_t *c = CU_BE(be);
  cu__finish_step(be);
  KC_CUDA(CU_ERR(be), cudaStreamSynchronize(c->stream));
  KC_CUDA(CU_ERR(be), cudaGetLastError());
  cu__prof_collect_graph(be);
  if (c->comm && c->comm->ops->check) { /* a failure only the device saw (a peer that never arrived) */
    const int crc = c->comm->ops->check(c->comm, be->rank);
    if (crc) cu_fail(be, crc, "all_reduce", c->comm->ops->error(c->comm, be->rank));
  }
  int flags = 0;
  if (c->d_eflag && cudaMemcpyAsync(&flags, c->d_eflag, sizeof flags, cudaMemcpyDeviceToHost, c->stream) == cudaSuccess &&
      cudaStreamSynchronize(c->stream) == cudaSuccess && flags) {
    const char *what = (flags & KC_EFLAG_TOKEN)      ? "embed: token id out of vocabulary"
                       : (flags & KC_EFLAG_OUT_TOK)  ? "gather_out: token index out of batch"
                       : (flags & KC_EFLAG_KV_SLOT)  ? "kv_store/attention: position outside the sequence's blocks"
                                                     : "gdn: state slot out of range";
    cu_fail(be, GT_EINVAL, "kernel", what);
    cudaMemsetAsync(c->d_eflag, 0, sizeof(int), c->stream);
  }
  int code = be->err.code;
  be->err.code = GT_OK; /* the message stays readable in be->err.msg */
  return code;
}

static int cu_download(be_t *be, void *dst, const void *src, size_t bytes) {
  cu__finish_step(be);
  KC_CUDA(CU_ERR(be), cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, CU_BE(be)->stream));
  return cu_sync(be);
}

_Static_assert(KC_POS_SLOTS == BE_POS_SLOTS, "kc_batch_t.state_pos_slot rows as be_batch_t");
_Static_assert(sizeof(kc_sample_row_t) == sizeof(be_sample_row_t) &&
                   offsetof(kc_sample_row_t, top_k) == offsetof(be_sample_row_t, top_k) &&
                   offsetof(kc_sample_row_t, top_p) == offsetof(be_sample_row_t, top_p) &&
                   offsetof(kc_sample_row_t, min_p) == offsetof(be_sample_row_t, min_p) &&
                   offsetof(kc_sample_row_t, u) == offsetof(be_sample_row_t, u),
               "kc_sample_row_t must mirror be_sample_row_t");

/* Grows the sampling buffers to n_rows rows of n_vocab (after the stream drains); GT_OK or an
 * error recorded in be->err. */
static int sample_bufs(be_t *be, int n_rows, int n_vocab) {
  be_cuda_t *c = CU_BE(be);
  const size_t nf = kc_sample_scratch_floats(n_rows, n_vocab);
  if (n_rows <= c->smp_cap && nf <= c->smp_prob_cap) return GT_OK;
  if (KC_CUDA(CU_ERR(be), cudaStreamSynchronize(c->stream))) return GT_EINTERNAL;
  if (n_rows > c->smp_cap) {
    cudaFreeHost(c->h_smp_rows);
    cudaFreeHost(c->h_smp_ids);
    cudaFree(c->d_smp_rows);
    cudaFree(c->d_smp_ids);
    c->h_smp_rows = c->d_smp_rows = NULL;
    c->h_smp_ids = c->d_smp_ids = NULL;
    c->smp_cap = 0;
    if (KC_CUDA(CU_ERR(be), cudaMallocHost((void **)&c->h_smp_rows, sizeof(kc_sample_row_t) * (size_t)n_rows)) ||
        KC_CUDA(CU_ERR(be), cudaMallocHost((void **)&c->h_smp_ids, sizeof(int32_t) * (size_t)n_rows)) ||
        KC_CUDA(CU_ERR(be), cudaMalloc((void **)&c->d_smp_rows, sizeof(kc_sample_row_t) * (size_t)n_rows)) ||
        KC_CUDA(CU_ERR(be), cudaMalloc((void **)&c->d_smp_ids, sizeof(int32_t) * (size_t)n_rows)))
      return GT_EINTERNAL;
    c->smp_cap = n_rows;
  }
  if (nf > c->smp_prob_cap) {
    cudaFree(c->d_smp_prob);
    c->d_smp_prob = NULL;
    c->smp_prob_cap = 0;
    if (KC_CUDA(CU_ERR(be), cudaMalloc((void **)&c->d_smp_prob, sizeof(float) * nf))) return GT_EINTERNAL;
    c->smp_prob_cap = nf;
  }
  return GT_OK;
}

/* Ends the step (its graph runs first, as for download), samples eagerly on the stream and
 * copies back only the ids. */
static int cu_sample(be_t *be, const float *logits, int n_rows, int n_vocab, const be_sample_row_t *rows,
                     int32_t *ids) {
  be_cuda_t *c = CU_BE(be);
  cu__finish_step(be);
  if (n_rows > 0 && !cu_failed(be) && sample_bufs(be, n_rows, n_vocab) == GT_OK) {
    memcpy(c->h_smp_rows, rows, sizeof(kc_sample_row_t) * (size_t)n_rows);
    (void)(KC_CUDA(CU_ERR(be), cudaMemcpyAsync(c->d_smp_rows, c->h_smp_rows, sizeof(kc_sample_row_t) * (size_t)n_rows,
                                            cudaMemcpyHostToDevice, c->stream)) ||
           KC_CUDA(CU_ERR(be), kc_sample(c->stream, logits, n_rows, n_vocab, c->d_smp_rows, c->d_smp_prob, c->d_smp_ids)) ||
           KC_CUDA(CU_ERR(be), cudaMemcpyAsync(c->h_smp_ids, c->d_smp_ids, sizeof(int32_t) * (size_t)n_rows,
                                            cudaMemcpyDeviceToHost, c->stream)));
  }
  int rc = cu_sync(be);
  if (rc == GT_OK && n_rows > 0) memcpy(ids, c->h_smp_ids, sizeof(int32_t) * (size_t)n_rows);
  return rc;
}

/* The greedy rows of cu_sample, but the ids stay in device memory dev_ids and nothing waits: the
 * step's graph, then the kernel, queued on the stream. The rows are a device buffer of zeroed rows
 * (temperature 0: greedy) set up once per size, so no host staging buffer is reused while a copy
 * from it may still be pending. */
static int cu_argmax_dev(be_t *be, const float *logits, int n_rows, int n_vocab, int32_t *dev_ids) {
  be_cuda_t *c = CU_BE(be);
  cu__finish_step(be);
  if (n_rows <= 0 || cu_failed(be) || sample_bufs(be, n_rows, n_vocab) != GT_OK) return be->err.code;
  if (n_rows > c->greedy_cap) {
    if (KC_CUDA(CU_ERR(be), cudaStreamSynchronize(c->stream))) return be->err.code;
    cudaFree(c->d_greedy);
    c->d_greedy = NULL;
    c->greedy_cap = 0;
    const size_t nb = sizeof(kc_sample_row_t) * (size_t)n_rows;
    if (KC_CUDA(CU_ERR(be), cudaMalloc((void **)&c->d_greedy, nb)) || KC_CUDA(CU_ERR(be), cudaMemset(c->d_greedy, 0, nb)))
      return be->err.code;
    c->greedy_cap = n_rows;
  }
  (void)KC_CUDA(CU_ERR(be), kc_sample(c->stream, logits, n_rows, n_vocab, c->d_greedy, c->d_smp_prob, dev_ids));
  return be->err.code;
}

/* ---- caches ---- */

static int cu_kv_init(be_t *be, int n_layers, int n_blocks, int block_tokens, int kv_dim) {
  be_cuda_t *c = CU_BE(be);
  if (n_layers < 0 || n_blocks <= 0 || block_tokens <= 0 || kv_dim <= 0)
    return gt_err_set(CU_ERR(be), GT_EINVAL, "cuda kv_init: bad sizes");
  cu__flush_eager(be);
  c->buf_gen++;
  cu_free(be, c->kv_pool);
  c->kv_pool = NULL;
  c->kv_layers = 0;
  const size_t el = c->kv_bf16_next ? 2 : sizeof(float);
  size_t n = (size_t)n_layers * 2 * n_blocks * block_tokens * kv_dim;
  c->kv_pool = cu_alloc(be, n * el);
  if (!c->kv_pool) return gt_err_set(CU_ERR(be), GT_ENOMEM, "cuda kv_init: %zu bytes of KV pool", n * el);
  c->kv_bf16 = c->kv_bf16_next;
  c->kv_layers = n_layers;
  c->kv_blocks = n_blocks;
  c->kv_block_tokens = block_tokens;
  c->kv_dim = kv_dim;
  return GT_OK;
}

static int cu_kv_set_type(be_t *be, gt_type_t t) {
  if (t != GT_TYPE_F32 && t != GT_TYPE_BF16) return GT_EUNSUPPORTED;
  CU_BE(be)->kv_bf16_next = t == GT_TYPE_BF16;
  return GT_OK;
}
/* the pools' type once kv_init ran, the type the next kv_init uses before */
static gt_type_t cu_kv_type(be_t *be) {
  const be_cuda_t *c = CU_BE(be);
  return (c->kv_pool ? c->kv_bf16 : c->kv_bf16_next) ? GT_TYPE_BF16 : GT_TYPE_F32;
}

static int cu_state_init(be_t *be, int n_layers, int n_slots, size_t conv_dim, size_t ssm_dim) {
  be_cuda_t *c = CU_BE(be);
  cu__flush_eager(be);
  c->buf_gen++;
  cu_free(be, c->conv);
  cu_free(be, c->ssm);
  c->conv = c->ssm = NULL;
  c->st_layers = c->st_slots = 0;
  c->conv = cu_alloc(be, ((size_t)n_layers * n_slots * conv_dim + 1) * sizeof(float));
  c->ssm = cu_alloc(be, ((size_t)n_layers * n_slots * ssm_dim + 1) * sizeof(float));
  if (!c->conv || !c->ssm) return gt_err_set(CU_ERR(be), GT_ENOMEM, "cuda state_init: recurrent state");
  c->st_layers = n_layers;
  c->st_slots = n_slots;
  c->conv_dim = conv_dim;
  c->ssm_dim = ssm_dim;
  return GT_OK;
}

/* rows of `width` bytes `pitch` apart from base (row l: layer l): copied to / zeroed at the same
 * rows from src_base (NULL: memset 0), in one 2-D call when the pitch is within the device's
 * limit (cudaDevAttrMaxPitch: 2^31 - 1 bytes on current GPUs), else one call per row. */
static int state_rows(be_t *be, char *base, const char *src_base, size_t width, size_t pitch, int rows) {
  cudaStream_t st = CU_BE(be)->stream;
  if (!width || rows <= 0) return GT_OK;
  if (pitch <= (size_t)INT_MAX) {
    const cudaError_t e = src_base ? cudaMemcpy2DAsync(base, pitch, src_base, pitch, width, rows, cudaMemcpyDeviceToDevice, st)
                                   : cudaMemset2DAsync(base, pitch, 0, width, rows, st);
    return KC_CUDA(CU_ERR(be), e) ? GT_EINTERNAL : GT_OK;
  }
  for (int l = 0; l < rows; l++) {
    const cudaError_t e = src_base ? cudaMemcpyAsync(base + l * pitch, src_base + l * pitch, width, cudaMemcpyDeviceToDevice, st)
                                   : cudaMemsetAsync(base + l * pitch, 0, width, st);
    if (KC_CUDA(CU_ERR(be), e)) return GT_EINTERNAL;
  }
  return GT_OK;
}

static int cu_state_copy(be_t *be, int dst, int src) {
  be_cuda_t *c = CU_BE(be);
  if (dst < 0 || src < 0 || dst >= c->st_slots || src >= c->st_slots)
    return gt_err_set(CU_ERR(be), GT_EINVAL, "cuda state_copy %d <- %d of %d slots", dst, src, c->st_slots);
  cu__flush_eager(be);
  if (c->st_layers == 0 || dst == src) return GT_OK;
  /* a slot's state of every layer, st_slots slots apart: one 2-D copy per state (a hybrid
   * speculating sequence copies its state before every verify step: 2 calls, not 2 per layer) */
  const size_t cb = c->conv_dim * sizeof(float), sb = c->ssm_dim * sizeof(float);
  if (state_rows(be, (char *)conv_state(c, 0, dst), (const char *)conv_state(c, 0, src), cb, cb * c->st_slots,
                 c->st_layers) ||
      state_rows(be, (char *)ssm_state(c, 0, dst), (const char *)ssm_state(c, 0, src), sb, sb * c->st_slots, c->st_layers))
    return GT_EINTERNAL;
  return GT_OK;
}

static int cu_kv_block_copy(be_t *be, int dst, int src) {
  be_cuda_t *c = CU_BE(be);
  if (dst < 0 || src < 0 || dst >= c->kv_blocks || src >= c->kv_blocks)
    return gt_err_set(CU_ERR(be), GT_EINVAL, "cuda kv_block_copy %d <- %d of %d blocks", dst, src, c->kv_blocks);
  cu__flush_eager(be);
  const size_t per = (size_t)c->kv_block_tokens * c->kv_dim * (c->kv_bf16 ? 2 : sizeof(float)); /* bytes of one block */
  for (int l = 0; l < c->kv_layers; l++) {
    kc_kv_t kv = kv_of(c, l);
    if (KC_CUDA(CU_ERR(be), cudaMemcpyAsync((char *)kv.k + (size_t)dst * per, (char *)kv.k + (size_t)src * per, per,
                                         cudaMemcpyDeviceToDevice, c->stream)) ||
        KC_CUDA(CU_ERR(be), cudaMemcpyAsync((char *)kv.v + (size_t)dst * per, (char *)kv.v + (size_t)src * per, per,
                                         cudaMemcpyDeviceToDevice, c->stream)))
      return GT_EINTERNAL;
  }
  return GT_OK;
}

static int cu_state_zero(be_t *be, int slot) {
  be_cuda_t *c = CU_BE(be);
  if (slot < 0 || slot >= c->st_slots)
    return gt_err_set(CU_ERR(be), GT_EINVAL, "cuda state_zero %d of %d slots", slot, c->st_slots);
  cu__flush_eager(be);
  if (c->st_layers == 0) return GT_OK;
  /* every layer's rows of the slot in one 2-D memset per state (as cu_state_copy) */
  const size_t cb = c->conv_dim * sizeof(float), sb = c->ssm_dim * sizeof(float);
  if (state_rows(be, (char *)conv_state(c, 0, slot), NULL, cb, cb * c->st_slots, c->st_layers) ||
      state_rows(be, (char *)ssm_state(c, 0, slot), NULL, sb, sb * c->st_slots, c->st_layers))
    return GT_EINTERNAL;
  return GT_OK;
}

/* ---- batch ---- */

static int cu_set_batch(be_t *be, const be_batch_t *b) {
  be_cuda_t *c = CU_BE(be);
  cu__flush_eager(be); /* a step that ended without download / sync */
  c->graph_batch = 0;
  c->step_kind = -1;
  cu__t_decode_batch = 0;
  if (b->n_tok < 0 || b->n_seq < 0 || b->n_out < 0 || b->max_blocks < 0)
    return gt_err_set(CU_ERR(be), GT_EINVAL, "cuda backend: negative batch sizes");
  const int nt = b->n_tok, ns = b->n_seq, no = b->n_out;
  const size_t n_bt = (size_t)ns * b->max_blocks;
  const size_t n_ps = b->state_pos_slot ? (size_t)ns * BE_POS_SLOTS : 0;
  const size_t need = 3 * (size_t)nt + 3 * (size_t)ns + n_bt + (size_t)no + n_ps + 1;
  if (need > c->h_cap) {
    int32_t *p = realloc(c->h_ints, need * sizeof(int32_t));
    if (!p) return gt_err_set(CU_ERR(be), GT_ENOMEM, "cuda backend: batch of %d tokens", nt);
    c->h_ints = p;
    c->h_cap = need;
  }
  int32_t *tok = c->h_ints, *pos = tok + nt, *sot = pos + nt, *sf = sot + nt, *sn = sf + ns, *ss = sn + ns,
          *bt = ss + ns, *ot = bt + n_bt, *ps = ot + no;
  if (nt) {
    memcpy(tok, b->tok, sizeof(int32_t) * nt);
    memcpy(pos, b->pos, sizeof(int32_t) * nt);
    memset(sot, 0, sizeof(int32_t) * nt);
  }
  if (ns) {
    memcpy(sf, b->seq_first, sizeof(int32_t) * ns);
    memcpy(sn, b->seq_ntok, sizeof(int32_t) * ns);
    if (b->state_slot) memcpy(ss, b->state_slot, sizeof(int32_t) * ns);
    else memset(ss, 0, sizeof(int32_t) * ns);
  }
  if (n_bt) memcpy(bt, b->block_table, sizeof(int32_t) * n_bt);
  if (no) memcpy(ot, b->out_tok, sizeof(int32_t) * no);
  if (n_ps) memcpy(ps, b->state_pos_slot, sizeof(int32_t) * n_ps);
  for (int s = 0; s < ns; s++) {
    if (sf[s] < 0 || sn[s] < 0 || sf[s] + sn[s] > nt)
      return gt_err_set(CU_ERR(be), GT_EINVAL, "cuda backend: sequence %d spans tokens [%d, %d) of %d", s, sf[s],
                        sf[s] + sn[s], nt);
    for (int t = 0; t < sn[s]; t++) sot[sf[s] + t] = s;
  }
  c->max_ctx = 0;
  for (int t = 0; t < nt; t++)
    if (pos[t] + 1 > c->max_ctx) c->max_ctx = pos[t] + 1;
  if (need > c->d_cap) {
    KC_CUDA(CU_ERR(be), cudaStreamSynchronize(c->stream));
    cudaFree(c->d_ints);
    c->buf_gen++;
    c->d_ints = NULL;
    c->d_cap = 0;
    size_t want = need * 2;
    if (KC_CUDA(CU_ERR(be), cudaMalloc((void **)&c->d_ints, want * sizeof(int32_t)))) return GT_ENOMEM;
    c->d_cap = want;
  }
  /* pageable source: the call returns once the bytes are staged, so h_ints may be reused */
  if (KC_CUDA(CU_ERR(be), cudaMemcpyAsync(c->d_ints, c->h_ints, need * sizeof(int32_t), cudaMemcpyHostToDevice, c->stream)))
    return GT_EINTERNAL;
  /* tokens already on the device (be_batch_t.tok_src): copied over the uploaded ones, on the stream
   * after the upload, one copy per run of consecutive source indices */
  for (int t = 0; b->tok_src && t < nt;) {
    if (b->tok_src[t] < 0) {
      t++;
      continue;
    }
    int n = 1;
    while (t + n < nt && b->tok_src[t + n] == b->tok_src[t] + n) n++;
    if (KC_CUDA(CU_ERR(be), cudaMemcpyAsync(c->d_ints + t, b->tok_dev + b->tok_src[t], sizeof(int32_t) * (size_t)n,
                                            cudaMemcpyDeviceToDevice, c->stream)))
      return GT_EINTERNAL;
    t += n;
  }
  const int32_t *d = c->d_ints;
  c->kb = (kc_batch_t){.n_tok = nt, .n_seq = ns, .n_out = no, .max_blocks = b->max_blocks,
                       .tok = d, .pos = d + nt, .seq_of_tok = d + 2 * nt, .seq_first = d + 3 * nt,
                       .seq_ntok = d + 3 * nt + ns, .state_slot = d + 3 * nt + 2 * ns,
                       .block_table = d + 3 * nt + 3 * ns, .out_tok = d + 3 * nt + 3 * ns + n_bt,
                       .state_pos_slot = n_ps ? d + 3 * nt + 3 * ns + n_bt + no : NULL,
                       .eflag = c->d_eflag};
  c->b = *b;
  c->b.state_slot = b->state_slot ? ss : NULL;
  c->b.state_pos_slot = n_ps ? ps : NULL;
  c->b.seq_first = sf; /* host copies, valid until the next set_batch (cu__gdn_scan reads sn) */
  c->b.seq_ntok = sn;

  /* a sequence starting at position 0 starts from zero recurrent state */
  if (b->state_slot && c->st_slots > 0) {
    for (int s = 0; s < ns; s++) {
      if (ss[s] < 0 || ss[s] >= c->st_slots)
        return gt_err_set(CU_ERR(be), GT_EINVAL, "cuda backend: state slot %d out of [0, %d)", ss[s], c->st_slots);
      if (sn[s] > 0 && pos[sf[s]] == 0) {
        int rc = cu_state_zero(be, ss[s]);
        if (rc) return rc;
      }
    }
  }
  if (n_ps) { /* be_batch_t.state_pos_slot: hybrid, sequences of <= BE_GRAPH_MAX_Q tokens, slots in range */
    if (!b->state_slot) return gt_err_set(CU_ERR(be), GT_EINVAL, "cuda backend: state_pos_slot without state_slot");
    for (int s = 0; s < ns; s++)
      for (int j = 0; j + 1 < sn[s] && j < BE_POS_SLOTS; j++) {
        const int p = ps[s * BE_POS_SLOTS + j];
        if (p < 0) continue;
        if (sn[s] > BE_GRAPH_MAX_Q)
          return gt_err_set(CU_ERR(be), GT_EINVAL, "cuda backend: sequence %d of %d tokens (> %d) has position slots", s,
                            sn[s], BE_GRAPH_MAX_Q);
        if (p >= c->st_slots)
          return gt_err_set(CU_ERR(be), GT_EINVAL, "cuda backend: position slot %d out of [0, %d)", p, c->st_slots);
      }
  }
  /* the step's kind and shape: q tokens for every sequence (0: they differ). A graph shape is
   * recorded for the graph of its batch size (decode) or of its shape (verify, drafter: kept
   * apart by the drafter tag); a step of a counted kind that is not recorded runs eagerly and
   * counts as such */
  int q = ns > 0 ? sn[0] : 0;
  for (int s = 1; s < ns && q; s++)
    if (sn[s] != q) q = 0;
  if (nt != ns * q) q = 0; /* tokens outside every sequence */
  const int one_each = nt > 0 && q == 1 && no <= nt;
  c->step_kind = b->drafter ? BE_CUDA_STEP_DRAFTER : one_each ? BE_CUDA_STEP_DECODE : no > ns ? BE_CUDA_STEP_VERIFY : -1;
  c->graph_batch = c->step_kind >= 0 && q >= 1 && q <= BE_GRAPH_MAX_Q && nt <= BE_GRAPH_MAX_SEQS && no <= nt;
  c->shape = (cu_shape_t){.n_seq = ns, .q = q, .n_out = no, .drafter = b->drafter != 0};
  cu__t_decode_batch = one_each;
  /* an armed profile records any step (a prefill too); only graph shapes become graphs */
  if ((c->graph_batch && c->graphs_on) || c->prof_state == CU_PROF_ARMED) {
    c->recording = 1;
    c->n_rec = 0;
  } else {
    cu_count_eager(c);
  }
  return GT_OK;
}

void be_cuda_get_stats(be_t *be, be_cuda_stats_t *st) {
  be_cuda_t *c = CU_BE(be);
  *st = (be_cuda_stats_t){.graph_steps = c->graph_steps, .eager_steps = c->eager_steps, .captures = c->captures,
                          .captured_sizes = c->captured, .profiled_steps = c->prof_steps, .shape_graphs = c->n_sgraphs};
  for (int k = 0; k < BE_CUDA_STEP_KINDS; k++) {
    st->kind_graph[k] = c->kind_graph[k];
    st->kind_eager[k] = c->kind_eager[k];
    st->kind_captures[k] = c->kind_captures[k];
  }
}

static void cu_graph_sizes(be_t *be, be_sizes_t *out) { *out = CU_BE(be)->captured; }

/* ---- ranks ---- */

/* be_ops_t.all_reduce: recorded (a decode step: captured into its graph) or queued at once on the
 * stream through the communicator; a backend without one (be_cuda_create: one rank) does
 * nothing, so `--tp 1` runs exactly the ops it ran before ranks existed. */
static void cu_rank_all_reduce(be_t *be, float *x, size_t n) {
  if (CU_BE(be)->comm) cu_all_reduce(be, x, n);
}

static void cu_destroy(be_t *be) {
  be_cuda_t *c = CU_BE(be);
  if (!c) return;
  cudaStreamSynchronize(c->stream);
  for (int i = 0; i <= BE_GRAPH_MAX_SEQS; i++) {
    if (c->graphs[i].exec) cudaGraphExecDestroy(c->graphs[i].exec);
    free(c->graphs[i].rec);
  }
  for (int i = 0; i < c->n_sgraphs; i++) {
    if (c->sgraphs[i].exec) cudaGraphExecDestroy(c->sgraphs[i].exec);
    free(c->sgraphs[i].rec);
  }
  free(c->rec);
  free(c->prof_rows);
  for (int i = 0; i < 2; i++)
    if (c->prof_gev[i]) cudaEventDestroy(c->prof_gev[i]);
  for (int i = 0; i < CU_ROPE_TABLES; i++) cudaFree(c->rope_tab[i].d);
  cudaFree(c->blas_ws);
  cudaFreeHost(c->h_smp_rows);
  cudaFreeHost(c->h_smp_ids);
  cudaFree(c->d_smp_rows);
  cudaFree(c->d_smp_ids);
  cudaFree(c->d_smp_prob);
  cudaFree(c->d_greedy);
  cudaFree(c->kv_pool);
  cudaFree(c->conv);
  cudaFree(c->ssm);
  cudaFree(c->scratch);
  cudaFree(c->d_ints);
  cudaFree(c->d_eflag);
  if (c->blas) cublasDestroy(c->blas);
  if (c->stream) cudaStreamDestroy(c->stream);
  free(c->h_ints);
  free(c);
}

static long cu_eager_steps(be_t *be) { return CU_BE(be)->eager_steps; }
static long cu_graph_captures(be_t *be) { return CU_BE(be)->captures; }

/* Free and total memory of this backend's GPU (cudaMemGetInfo). */
static int cu_mem_info(be_t *be, be_mem_info_t *out) {
  size_t f = 0, t = 0;
  memset(out, 0, sizeof *out);
  cu__flush_eager(be);
  if (KC_CUDA(CU_ERR(be), cudaSetDevice(CU_BE(be)->device)) || KC_CUDA(CU_ERR(be), cudaMemGetInfo(&f, &t)))
    return GT_EINTERNAL;
  *out = (be_mem_info_t){.free_bytes = f, .total_bytes = t};
  snprintf(out->what, sizeof out->what, "cuda:%d", CU_BE(be)->device);
  return GT_OK;
}


static const be_ops_t cuda_ops = {
    .name = "cuda",
    .destroy = cu_destroy,
    .alloc = cu_alloc,
    .free = cu_free,
    .upload = cu_upload,
    .download = cu_download,
    .sync = cu_sync,
    .kv_init = cu_kv_init,
    .state_init = cu_state_init,
    .state_copy = cu_state_copy,
    .kv_block_copy = cu_kv_block_copy,
    .state_zero = cu_state_zero,
    .set_batch = cu_set_batch,
#define CU_OP(name) .name = cu_##name,
    BE_OPS(CU_OP)
#undef CU_OP
    .all_reduce = cu_rank_all_reduce,
    .eager_steps = cu_eager_steps,
    .graph_captures = cu_graph_captures,
    .sample = cu_sample,
    .argmax_dev = cu_argmax_dev,
    .graph_sizes = cu_graph_sizes,
    .mem_info = cu_mem_info,
    .kv_set_type = cu_kv_set_type,
    .kv_type = cu_kv_type,
};

int be_cuda_device_count(void) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

int be_cuda_available(void) { return be_cuda_device_count() > 0; }

int be_cuda_create(int device, be_t **out, gt_err_t *err) {
  *out = NULL;
  int n = 0;
  cudaError_t ce = cudaGetDeviceCount(&n);
  if (ce != cudaSuccess || device < 0 || device >= n) {
    (void)cudaGetLastError();
    return gt_err_set(err, GT_EUNSUPPORTED, "cuda backend: device %d not present (%d devices%s%s)", device, n,
                      ce != cudaSuccess ? ": " : "", ce != cudaSuccess ? cudaGetErrorString(ce) : "");
  }
  be_cuda_t *c = calloc(1, sizeof *c);
  if (!c) return gt_err_set(err, GT_ENOMEM, "cuda backend: out of memory");
  c->base.ops = &cuda_ops;
  c->base.rank = 0;
  c->base.n_ranks = 1;
  c->device = device;
  c->graphs_on = kc_env_int("GANTRY_CUDA_GRAPHS", 0, 0, 1) != 0; /* off only for "0" */
  c->kv_bf16_next = 1; /* BF16 KV pools unless kv_set_type(F32) */
  /* prefill attention on tensor cores for sequences of >= 16 tokens in the batch */
  c->fa_min = (int)kc_env_int("GANTRY_ATTN_FLASH_MIN", 0, INT_MAX, 16);
  /* Chunked GDN prefill scan: off by default. On the H200 (qwen35-9b head sizes, 512-token prompt,
   * bench_gdn_scan) it took 439 us per layer against 315 us for the sequential kernel. */
  c->gdn_chunk_min = (int)kc_env_int("GANTRY_GDN_CHUNK_MIN", 1, INT_MAX, INT_MAX);
  if (KC_CUDA(err, cudaSetDevice(device)) || KC_CUDA(err, cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking)) ||
      KC_CUDA(err, cudaMalloc((void **)&c->d_eflag, sizeof(int))) || KC_CUDA(err, cudaMemset(c->d_eflag, 0, sizeof(int))) ||
      KC_CUDA(err, cudaDeviceSynchronize()) ||
      KC_CUBLAS(err, cublasCreate(&c->blas)) || KC_CUBLAS(err, cublasSetStream(c->blas, c->stream)) ||
      KC_CUBLAS(err, cublasSetMathMode(c->blas, CUBLAS_DEFAULT_MATH)) || /* SGEMM stays fp32: no TF32 */
      KC_CUDA(err, cudaMalloc(&c->blas_ws, CU_BLAS_WS_BYTES)) ||
      KC_CUBLAS(err, cublasSetWorkspace(c->blas, c->blas_ws, CU_BLAS_WS_BYTES))) {
    cu_destroy(&c->base);
    return GT_EINTERNAL;
  }
  c->kb.eflag = c->d_eflag;
  *out = &c->base;
  return GT_OK;
}

int be_cuda_create_rank(int device, int rank, be_comm_t *comm, be_t **out, gt_err_t *err) {
  *out = NULL;
  const int n_ranks = comm ? comm->n_ranks : 1;
  if (rank < 0 || rank >= n_ranks) return gt_err_set(err, GT_EINVAL, "cuda backend: rank %d of %d", rank, n_ranks);
  if (comm && !comm->ops->bind_stream)
    return gt_err_set(err, GT_EINVAL, "cuda backend: the %s communicator cannot run on a CUDA stream", comm->ops->name);
  int rc = be_cuda_create(device, out, err);
  if (rc) return rc;
  be_cuda_t *c = CU_BE(*out);
  c->base.rank = rank;
  c->base.n_ranks = n_ranks;
  c->comm = comm;
  if (comm && (rc = comm->ops->bind_stream(comm, rank, device, (void *)c->stream, err))) {
    cu_destroy(*out);
    *out = NULL;
    return rc;
  }
  return GT_OK;
}
