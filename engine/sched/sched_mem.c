/* engine/sched/sched_mem.c — see sched_mem.h. Sizes are computed in double (pools of hundreds of GB
 * times token counts) and the block count is floored. */
#include "engine/sched/sched_mem.h"

#include <stdio.h>
#include <string.h>

#define MAX_BLOCKS (1 << 30) /* kv.c indexes blocks with int32 */

const char *sched_mem_fmt_bytes(double b, char *buf, size_t n) {
  if (b >= 1024.0 * 1024 * 1024) snprintf(buf, n, "%.2fGiB", b / (1024.0 * 1024 * 1024));
  else snprintf(buf, n, "%.1fMiB", b / (1024.0 * 1024));
  return buf;
}

int sched_mem_plan(const sched_mem_in_t *in, sched_mem_plan_t *out, gt_err_t *err) {
  memset(out, 0, sizeof *out);
  if (in->max_num_seqs <= 0 || in->n_ctx <= 0 || in->block_tokens <= 0 || in->kv_bytes_per_token == 0 ||
      in->n_state_slots < 0 || in->kv_fraction < 0 || in->kv_fraction >= 1)
    return gt_err_set(err, GT_EINVAL, "memory plan: bad sizes (max_num_seqs %d, n_ctx %d, block_tokens %d, %zu B/token, "
                      "kv fraction %g)", in->max_num_seqs, in->n_ctx, in->block_tokens, in->kv_bytes_per_token,
                      in->kv_fraction);
  const char *what = in->mem_what[0] ? in->mem_what : "the device";
  const double block_bytes = (double)in->block_tokens * (double)in->kv_bytes_per_token;
  const double state = (double)in->n_state_slots * (double)in->state_bytes_per_slot;
  const double free_b = (double)in->free_bytes;
  const int min_blocks = (in->n_ctx + in->block_tokens - 1) / in->block_tokens; /* one full-context sequence */
  const double want = (double)in->max_num_seqs * min_blocks;
  double blocks;
  if (in->kv_fraction > 0 && in->free_bytes == 0)
    return gt_err_set(err, GT_EUNSUPPORTED, "--kv-memory %g is a fraction of free memory, but the free memory of %s is unknown; "
                      "give bytes (e.g. 8G)", in->kv_fraction, what);
  if (in->kv_bytes > 0 || in->kv_fraction > 0) {
    const double budget = in->kv_bytes > 0 ? (double)in->kv_bytes : in->kv_fraction * free_b;
    blocks = budget > state ? (budget - state) / block_bytes : 0;
    out->rule = "kv-memory";
  } else if (in->free_bytes == 0 || want * block_bytes + state <= in->share * free_b) {
    blocks = want;
    out->rule = "full";
  } else {
    const double cap = in->share * free_b;
    blocks = cap > state ? (cap - state) / block_bytes : 0;
    out->rule = "fit";
  }
  if (blocks > MAX_BLOCKS) blocks = MAX_BLOCKS;
  out->n_blocks = (int)blocks;
  out->n_state_slots = in->n_state_slots;
  out->kv_bytes = (uint64_t)((double)out->n_blocks * block_bytes);
  out->state_bytes = (uint64_t)state;
  out->max_concurrency = (double)out->n_blocks * in->block_tokens / in->n_ctx;
  const double need_min = (double)min_blocks * block_bytes + state;
  if (out->n_blocks < min_blocks || (in->free_bytes && (double)out->kv_bytes + state > free_b)) {
    char a[32], b[32], c[32], d[32];
    return gt_err_set(err, GT_ENOMEM,
                      "not enough memory: a KV pool for one sequence of %d tokens (%d blocks, %d state slots) needs %s; "
                      "%s has %s free of %s after the weights (%s), the %s rule gives %d blocks; lower --max-model-len "
                      "or --max-num-seqs, or change --kv-memory",
                      in->n_ctx, min_blocks, in->n_state_slots, sched_mem_fmt_bytes(need_min, a, sizeof a), what,
                      in->free_bytes ? sched_mem_fmt_bytes(free_b, b, sizeof b) : "unknown",
                      in->total_bytes ? sched_mem_fmt_bytes((double)in->total_bytes, c, sizeof c) : "unknown",
                      sched_mem_fmt_bytes((double)in->weight_bytes, d, sizeof d), out->rule, out->n_blocks);
  }
  return GT_OK;
}

const char *sched_mem_format(const sched_mem_in_t *in, const sched_mem_plan_t *p, char *buf, size_t n) {
  char kv[32], fr[32], tot[32], w[32], used[32];
  const double kv_b = (double)p->kv_bytes + (double)p->state_bytes;
  snprintf(buf, n,
           "kv_pool_tokens=%lld kv_blocks=%d block_tokens=%d max_concurrency_full_context=%.2f max_model_len=%d "
           "max_num_seqs=%d state_slots=%d kv_bytes_per_token=%zu kv_rule=%s kv_sized_from=\"%s\" free=%s total=%s "
           "memory_used=%s weights=%s kv_cache=%s",
           (long long)p->n_blocks * in->block_tokens, p->n_blocks, in->block_tokens, p->max_concurrency, in->n_ctx,
           in->max_num_seqs, p->n_state_slots, in->kv_bytes_per_token, p->rule, in->mem_what[0] ? in->mem_what : "unknown",
           in->free_bytes ? sched_mem_fmt_bytes((double)in->free_bytes, fr, sizeof fr) : "unknown",
           in->total_bytes ? sched_mem_fmt_bytes((double)in->total_bytes, tot, sizeof tot) : "unknown",
           sched_mem_fmt_bytes((double)in->weight_bytes + kv_b, used, sizeof used),
           sched_mem_fmt_bytes((double)in->weight_bytes, w, sizeof w), sched_mem_fmt_bytes(kv_b, kv, sizeof kv));
  return buf;
}

/* be's memory into *mi; 0 when it has none to report (a failed query's sticky error is cleared:
 * the memory is then unknown, not a failed step). */
static int device_mem(be_t *be, be_mem_info_t *mi) {
  if (!be->ops->mem_info) return 0;
  if (be->ops->mem_info(be, mi) == GT_OK) return 1;
  be->ops->sync(be);
  return 0;
}

int sched_mem_check_weights(be_t *be, uint64_t weight_bytes, gt_err_t *err) {
  be_mem_info_t mi;
  if (!device_mem(be, &mi) || weight_bytes <= mi.free_bytes) return GT_OK;
  char a[32], b[32];
  return gt_err_set(err, GT_ENOMEM, "not enough memory: the weights need %s, %s has %s free",
                    sched_mem_fmt_bytes((double)weight_bytes, a, sizeof a), mi.what,
                    sched_mem_fmt_bytes((double)mi.free_bytes, b, sizeof b));
}

void sched_mem_input(model_t *m, sched_mem_in_t *in) {
  be_t *be = m->be;
  in->kv_bytes_per_token = model_kv_bytes_per_token(m);
  in->state_bytes_per_slot = m->hp.n_gdn_layers > 0 ? model_state_bytes_per_slot(m) : 0;
  in->weight_bytes = m->weight_bytes;
  in->share = !strcmp(be->ops->name, "cpu") ? SCHED_MEM_SHARE_HOST : SCHED_MEM_SHARE_DEVICE;
  in->free_bytes = in->total_bytes = 0;
  snprintf(in->mem_what, sizeof in->mem_what, "unknown");
  be_mem_info_t mi;
  if (device_mem(be, &mi)) {
    in->free_bytes = mi.free_bytes;
    in->total_bytes = mi.total_bytes;
    snprintf(in->mem_what, sizeof in->mem_what, "%s", mi.what);
  }
}

int sched_mem_check(model_t *m, int n_blocks, int block_tokens, int n_slots, gt_err_t *err) {
  sched_mem_in_t in = {0};
  sched_mem_input(m, &in);
  if (in.free_bytes == 0) return GT_OK;
  const double need = (double)n_blocks * block_tokens * (double)in.kv_bytes_per_token +
                      (m->hp.n_gdn_layers > 0 ? (double)n_slots * (double)in.state_bytes_per_slot : 0);
  if (need <= (double)in.free_bytes) return GT_OK;
  char a[32], b[32];
  return gt_err_set(err, GT_ENOMEM, "not enough memory: a KV pool of %d tokens needs %s; %s has %s free after the weights",
                    n_blocks * block_tokens, sched_mem_fmt_bytes(need, a, sizeof a), in.mem_what,
                    sched_mem_fmt_bytes((double)in.free_bytes, b, sizeof b));
}
