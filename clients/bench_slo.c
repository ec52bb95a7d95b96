/* clients/bench_slo.c — SLO parsing and goodput per cell. */
#include "clients/bench_slo.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *names[] = {"ttft_ms", "itl_ms", "tpot_ms", "e2e_ms"};

static double *field(gc_slo_t *slo, int i) {
  double *f[] = {&slo->ttft_ms, &slo->itl_ms, &slo->tpot_ms, &slo->e2e_ms};
  return f[i];
}

int gc_slo_parse(const char *s, gc_slo_t *slo, gt_err_t *err) {
  for (int i = 0; i < 4; i++) *field(slo, i) = -1;
  if (!s || !*s) return gt_err_set(err, GT_EINVAL, "--slo wants KEY=MS[,KEY=MS...] (ttft_ms, itl_ms, tpot_ms, e2e_ms)");
  const char *p = s;
  while (*p) {
    const char *eq = strchr(p, '='), *comma = strchr(p, ',');
    if (!comma) comma = p + strlen(p);
    if (!eq || eq > comma)
      return gt_err_set(err, GT_EINVAL, "--slo: '%.*s' is not KEY=MS", (int)(comma - p), p);
    int k = -1;
    for (int i = 0; i < 4; i++)
      if ((size_t)(eq - p) == strlen(names[i]) && !strncmp(p, names[i], (size_t)(eq - p))) k = i;
    if (k < 0)
      return gt_err_set(err, GT_EINVAL, "--slo: unknown objective '%.*s' (ttft_ms, itl_ms, tpot_ms, e2e_ms)",
                        (int)(eq - p), p);
    char *end;
    double v = strtod(eq + 1, &end);
    if (end == eq + 1 || end != comma || !(v > 0) || v > 1e9)
      return gt_err_set(err, GT_EINVAL, "--slo: %s wants a positive number of ms, got '%.*s'", names[k],
                        (int)(comma - eq - 1), eq + 1);
    if (*field(slo, k) >= 0) return gt_err_set(err, GT_EINVAL, "--slo: %s given twice", names[k]);
    *field(slo, k) = v;
    p = *comma ? comma + 1 : comma;
    if (*comma && !*p) return gt_err_set(err, GT_EINVAL, "--slo: trailing comma");
  }
  return GT_OK;
}

int gc_slo_any(const gc_slo_t *slo) {
  return slo->ttft_ms >= 0 || slo->itl_ms >= 0 || slo->tpot_ms >= 0 || slo->e2e_ms >= 0;
}

int gc_slo_met(const gc_slo_t *slo, const gc_req_t *r) {
  if (r->error) return 0;
  if (slo->ttft_ms >= 0 && !(r->ttft_ms >= 0 && r->ttft_ms <= slo->ttft_ms)) return 0;
  if (slo->itl_ms >= 0 && r->itl_p99_ms > slo->itl_ms) return 0;
  if (slo->tpot_ms >= 0 && r->tpot_ms > slo->tpot_ms) return 0;
  if (slo->e2e_ms >= 0 && r->e2e_ms > slo->e2e_ms) return 0;
  return 1;
}

void gc_slo_format(const gc_slo_t *slo, char *buf, size_t cap) {
  size_t len = 0;
  buf[0] = 0;
  gc_slo_t s = *slo;
  for (int i = 0; i < 4 && len < cap; i++) {
    double v = *field(&s, i);
    if (v < 0) continue;
    int w = snprintf(buf + len, cap - len, "%s%s=%g", len ? "," : "", names[i], v);
    if (w < 0) break;
    len += (size_t)w;
  }
}

void gc_cell_goodput(gc_cell_t *c, const gc_req_t *r, int n, const gc_slo_t *slo) {
  c->slo_set = gc_slo_any(slo);
  c->n_good = 0;
  c->good_pct = c->good_rps = -1;
  if (!c->slo_set) return;
  for (int i = 0; i < n; i++) c->n_good += gc_slo_met(slo, &r[i]);
  c->good_pct = n > 0 ? 100.0 * c->n_good / n : -1;
  c->good_rps = c->wall_s > 0 ? c->n_good / c->wall_s : -1;
}
