/* engine/backend/backend.c — backend-independent helpers over be_ops_t. */
#include "engine/backend/backend.h"

#include <stdio.h>
#include <string.h>

int be_weight_upload(be_t *be, be_weight_t *w, gt_type_t t, int64_t rows, int64_t cols, const void *host,
                     gt_err_t *err) {
  size_t rb = dt_row_bytes(t, cols);
  if (!dt_computable(t) || rb == 0 || rows <= 0)
    return gt_err_set(err, GT_EUNSUPPORTED, "weight of type %s with %lld columns", dt_name(t), (long long)cols);
  size_t bytes = rb * (size_t)rows;
  void *p = be->ops->alloc(be, bytes);
  if (!p) return gt_err_set(err, GT_ENOMEM, "weight upload: %zu bytes", bytes);
  int rc = be->ops->upload(be, p, host, bytes);
  if (rc) {
    be->ops->free(be, p);
    return gt_err_set(err, rc, "weight upload failed");
  }
  *w = (be_weight_t){.type = t, .rows = rows, .cols = cols, .row_bytes = rb, .data = p};
  return GT_OK;
}

void be_weight_free(be_t *be, be_weight_t *w) {
  if (w && w->data) be->ops->free(be, w->data);
  if (w) w->data = NULL;
}

int be_kv_set_type(be_t *be, gt_type_t t) {
  if (be->ops->kv_set_type) return be->ops->kv_set_type(be, t);
  return t == GT_TYPE_F32 ? GT_OK : GT_EUNSUPPORTED;
}

gt_type_t be_kv_type(be_t *be) { return be->ops->kv_type ? be->ops->kv_type(be) : GT_TYPE_F32; }

size_t be_kv_token_bytes(be_t *be, int kv_dim) {
  const size_t el = be_kv_type(be) == GT_TYPE_BF16 ? 2 : sizeof(float);
  return 2 * el * (size_t)kv_dim;
}

const char *be_fmt_graph_sizes(const be_sizes_t *set, char *buf, size_t n) {
  size_t len = 0;
  buf[0] = 0;
  for (int i = 0; i <= BE_GRAPH_MAX_SEQS && len < n; i++) {
    if (!be_sizes_has(set, i)) continue;
    int j = i;
    while (j + 1 <= BE_GRAPH_MAX_SEQS && be_sizes_has(set, j + 1)) j++;
    len += (size_t)(j > i ? snprintf(buf + len, n - len, "%s%d-%d", len ? "," : "", i, j)
                          : snprintf(buf + len, n - len, "%s%d", len ? "," : "", i));
    i = j;
  }
  return len ? buf : "none";
}

int be_host_mem_info(be_mem_info_t *out, gt_err_t *err) {
  memset(out, 0, sizeof *out);
  FILE *f = fopen("/proc/meminfo", "r");
  if (!f) return gt_err_set(err, GT_EUNSUPPORTED, "cannot read /proc/meminfo");
  char line[256];
  unsigned long long kb, avail = 0, total = 0;
  while (fgets(line, sizeof line, f)) {
    if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) avail = kb;
    else if (sscanf(line, "MemTotal: %llu kB", &kb) == 1) total = kb;
  }
  fclose(f);
  if (!avail || !total) return gt_err_set(err, GT_EUNSUPPORTED, "/proc/meminfo has no MemAvailable / MemTotal");
  out->free_bytes = (uint64_t)avail * 1024;
  out->total_bytes = (uint64_t)total * 1024;
  snprintf(out->what, sizeof out->what, "host MemAvailable");
  return GT_OK;
}
