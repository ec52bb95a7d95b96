/* engine/sched/spec_cost.c — see spec_cost.h. */
#include "engine/sched/spec_cost.h"

#include <stdlib.h>

int spec_cost_init(spec_cost_t *c, int max_n) {
  c->max_n = max_n < 1 ? 1 : max_n;
  c->by_n = calloc((size_t)c->max_n + 1, sizeof *c->by_n);
  if (!c->by_n) return -1;
  for (int n = 0; n <= c->max_n; n++) c->by_n[n].last = 1;
  return 0;
}

void spec_cost_free(spec_cost_t *c) {
  free(c->by_n);
  c->by_n = NULL;
  c->max_n = 0;
}

static void ema(double *avg, int *count, double v) {
  *avg = *count == 0 ? v : *avg + SPEC_COST_ALPHA * (v - *avg);
  if (*count < 1 << 20) (*count)++;
}

void spec_cost_record(spec_cost_t *c, int n, int drafted, double ms, double tok_per_seq) {
  if (!c->by_n || n < 1 || n > c->max_n || !(ms > 0)) return;
  spec_cost_n_t *e = &c->by_n[n];
  if (drafted) {
    int k = e->n_spec;
    ema(&e->spec_ms, &e->n_spec, ms);
    ema(&e->spec_tok, &k, tok_per_seq);
  } else {
    ema(&e->plain_ms, &e->n_plain, ms);
  }
}

int spec_cost_pays(const spec_cost_t *c, int n) {
  if (!c->by_n || n < 1 || n > c->max_n) return 1;
  const spec_cost_n_t *e = &c->by_n[n];
  if (e->n_spec < SPEC_COST_WARM || e->n_plain < SPEC_COST_WARM) return -1;
  return e->spec_tok * e->plain_ms >= (1.0 + SPEC_COST_MARGIN) * e->spec_ms;
}

int spec_cost_decide(spec_cost_t *c, int n) {
  if (!c->by_n || n < 1 || n > c->max_n) return 1;
  spec_cost_n_t *e = &c->by_n[n];
  const int pays = spec_cost_pays(c, n);
  int want = pays >= 0 ? pays : e->n_spec < SPEC_COST_WARM; /* warm-up: spec samples, then plain */
  if (pays >= 0) {
    if (want != e->last) e->streak = 0;
    else if (++e->streak >= (want ? SPEC_COST_PROBE_ON : SPEC_COST_PROBE_OFF)) e->streak = 0, want = !want; /* probe */
  }
  e->last = want;
  return want;
}
