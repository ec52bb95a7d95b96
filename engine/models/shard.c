/* engine/models/shard.c — the tensor-parallel slice of one rank (engine/models/shard.h). */
#include "engine/models/shard.h"

#include <string.h>

#include "engine/models/model.h"

int model_shard_plan(const model_hparams_t *hp, int rank, int n_ranks, model_shard_t *sh, gt_err_t *err) {
  const int N = n_ranks, r = rank, H = hp->n_head, Hk = hp->n_head_kv;
  if (N < 1 || r < 0 || r >= N) return gt_err_set(err, GT_EINVAL, "rank %d of %d", r, N);
  memset(sh, 0, sizeof *sh);
  sh->rank = r;
  sh->n_ranks = N;
  if (H % N)
    return gt_err_set(err, GT_EUNSUPPORTED, "tensor parallelism: %d attention heads cannot be split over %d ranks",
                      H, N);
  sh->n_head = H / N;
  sh->head0 = r * sh->n_head;
  if (Hk >= N) {
    if (Hk % N)
      return gt_err_set(err, GT_EUNSUPPORTED, "tensor parallelism: %d KV heads cannot be split over %d ranks", Hk, N);
    sh->n_head_kv = Hk / N;
    sh->kv_head0 = r * sh->n_head_kv;
  } else {
    /* replicated: the rank's query heads all use one KV head */
    if (N % Hk)
      return gt_err_set(err, GT_EUNSUPPORTED,
                        "tensor parallelism: %d KV heads cannot be replicated over %d ranks (%d must be a multiple)",
                        Hk, N, N);
    sh->n_head_kv = 1;
    sh->kv_head0 = sh->head0 / (H / Hk);
  }
  if (hp->n_ff % N)
    return gt_err_set(err, GT_EUNSUPPORTED, "tensor parallelism: FFN size %d cannot be split over %d ranks", hp->n_ff,
                      N);
  sh->n_ff = hp->n_ff / N;
  sh->ff0 = r * sh->n_ff;
  if (hp->n_gdn_layers > 0) {
    const int nk = hp->gdn_n_k, nv = hp->gdn_n_v;
    if (nk >= N) {
      if (nk % N)
        return gt_err_set(err, GT_EUNSUPPORTED, "tensor parallelism: %d GDN key heads cannot be split over %d ranks",
                          nk, N);
      sh->gdn_n_k = nk / N;
      sh->gdn_k0 = r * sh->gdn_n_k;
      sh->gdn_n_v = sh->gdn_n_k * (nv / nk);
      sh->gdn_m0 = 0;
    } else {
      /* key head r % nk replicated over N / nk ranks, each with its share of that head's v-heads */
      if (N % nk || nv % N)
        return gt_err_set(err, GT_EUNSUPPORTED,
                          "tensor parallelism: GDN heads (%d key, %d value) cannot be split over %d ranks", nk, nv, N);
      sh->gdn_n_k = 1;
      sh->gdn_k0 = r % nk;
      sh->gdn_n_v = nv / N;
      sh->gdn_m0 = (r / nk) * sh->gdn_n_v;
    }
  }
  sh->vocab0 = (int)((int64_t)r * hp->n_vocab / N);
  sh->n_vocab = (int)((int64_t)(r + 1) * hp->n_vocab / N) - sh->vocab0;
  if (sh->n_vocab <= 0)
    return gt_err_set(err, GT_EUNSUPPORTED, "tensor parallelism: vocabulary of %d over %d ranks", hp->n_vocab, N);
  return GT_OK;
}

int model_sel_add(model_sel_t *sel, int64_t start, int64_t len) {
  if (sel->n > 0 && sel->s[sel->n - 1].start + sel->s[sel->n - 1].len == start) {
    sel->s[sel->n - 1].len += len;
    return 0;
  }
  if (sel->n == MODEL_SPANS_MAX) return -1;
  sel->s[sel->n++] = (model_span_t){start, len};
  return 0;
}

int model_shard_gdn_v(const model_shard_t *sh, int n_k, int n_v, int per, int64_t base, model_sel_t *out) {
  (void)n_v;
  for (int j = 0; j < sh->gdn_n_v; j++) {
    const int64_t h = (sh->gdn_k0 + j % sh->gdn_n_k) + (int64_t)(sh->gdn_m0 + j / sh->gdn_n_k) * n_k;
    if (model_sel_add(out, base + h * per, per)) return -1;
  }
  return 0;
}

int model_shard_gdn_qkv(const model_shard_t *sh, int n_k, int d_k, int n_v, int d_v, model_sel_t *out) {
  out->n = 0;
  const int64_t kd = (int64_t)n_k * d_k;
  if (model_sel_add(out, (int64_t)sh->gdn_k0 * d_k, (int64_t)sh->gdn_n_k * d_k) ||
      model_sel_add(out, kd + (int64_t)sh->gdn_k0 * d_k, (int64_t)sh->gdn_n_k * d_k))
    return -1;
  return model_shard_gdn_v(sh, n_k, n_v, d_v, 2 * kd, out);
}
