/* engine/sched/spec_cost.h — whether speculation pays, measured (engine/SERVE.md "Speculative
 * decoding"). Per number n of decoding sequences in a step (1..max_n), the scheduler records the
 * wall time of its pure decode steps (no prompt rows, no graph capture; without the MTP pass that
 * ran after it, and for a speculative step plus the average pass: the pass is the drafting cost of
 * the step it serves), plain and speculative apart, and the tokens a speculative step gave per
 * sequence; a step of n drafts only while
 *   spec_tok / spec_ms >= (1 + SPEC_COST_MARGIN) / plain_ms
 * (exponential averages, weight SPEC_COST_ALPHA). Before SPEC_COST_WARM samples of each kind it
 * drafts until it has spec samples, then runs plain until it has plain ones; after that a run of
 * SPEC_COST_PROBE_ON steps of one choice (SPEC_COST_PROBE_OFF while drafting does not pay) takes the
 * other once, so both averages follow the content and the batch. Choices never change output. */
#ifndef GANTRY_ENGINE_SPEC_COST_H
#define GANTRY_ENGINE_SPEC_COST_H

#define SPEC_COST_ALPHA 0.2
#define SPEC_COST_MARGIN 0.03
#define SPEC_COST_WARM 3
#define SPEC_COST_PROBE_ON 32
#define SPEC_COST_PROBE_OFF 16

typedef struct {
  double plain_ms, spec_ms, spec_tok; /* averages */
  int n_plain, n_spec;                /* samples so far (saturating) */
  int last, streak;                   /* the last choice and how many steps in a row took it */
} spec_cost_n_t;

typedef struct {
  int max_n;
  spec_cost_n_t *by_n; /* [max_n + 1]; index 0 unused */
} spec_cost_t;

/* 0, or -1 on out of memory. max_n >= 1. */
int spec_cost_init(spec_cost_t *c, int max_n);
void spec_cost_free(spec_cost_t *c);
/* One pure decode step of n decoding sequences that took ms: drafted = whether any of them
 * verified drafts, tok_per_seq = tokens it emitted per sequence. n outside 1..max_n: ignored. */
void spec_cost_record(spec_cost_t *c, int n, int drafted, double ms, double tok_per_seq);
/* Whether the next step of n decoding sequences drafts (1 outside 1..max_n); advances the
 * probe count of n. */
int spec_cost_decide(spec_cost_t *c, int n);
/* Whether speculation pays at n by the averages so far: 1 / 0, -1 before enough samples. */
int spec_cost_pays(const spec_cost_t *c, int n);

#endif
