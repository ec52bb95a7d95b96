/* common/metrics.h — a small Prometheus registry (counters, gauges, histograms; text format
 * 0.0.4) and a tiny HTTP listener that serves it on GET /metrics. Used by gantry-engine and
 * gantry-router.
 *
 * Threads: every gt_metric_* update and gt_metrics_render may run on any thread (one lock per
 * registry). Metrics live as long as their registry. Series of one metric name with different
 * labels must be registered one after another (they are rendered under one HELP/TYPE). */
#ifndef GANTRY_COMMON_METRICS_H
#define GANTRY_COMMON_METRICS_H

#include <stddef.h>

#include "common/err.h"

typedef struct gt_metrics gt_metrics_t;
typedef struct gt_metric gt_metric_t;

typedef enum { GT_METRIC_COUNTER = 0, GT_METRIC_GAUGE = 1, GT_METRIC_HISTOGRAM = 2 } gt_metric_kind_t;

/* New empty registry; NULL on allocation failure. */
gt_metrics_t *gt_metrics_create(void);
/* Frees the registry and its metrics. NULL is a no-op. */
void gt_metrics_free(gt_metrics_t *m);

/* Registers a series. name and help are copied; labels is the text inside {} (e.g.
 * `reason="stop"`) or NULL. Histograms take n_bounds ascending upper bounds (copied; +Inf is
 * implicit). Returns the metric (owned by the registry) or NULL on allocation failure. */
gt_metric_t *gt_metrics_add(gt_metrics_t *m, gt_metric_kind_t kind, const char *name, const char *help,
                            const char *labels, const double *bounds, int n_bounds);

/* Puts name="value" (value escaped) first on every series of the registry, e.g. the engine's
 * model_name; replaces one set before. GT_OK or GT_ENOMEM. */
int gt_metrics_set_label(gt_metrics_t *m, const char *name, const char *value);

void gt_metric_inc(gt_metric_t *x, double v);     /* counter / gauge: += v */
void gt_metric_set(gt_metric_t *x, double v);     /* gauge (or a counter mirrored from elsewhere) */
void gt_metric_observe(gt_metric_t *x, double v); /* histogram */
double gt_metric_value(gt_metric_t *x);           /* counter / gauge value; histogram: count */
double gt_metric_sum(gt_metric_t *x);             /* histogram sum */

/* Called at the start of every render (outside the registry lock) to refresh gauges. */
typedef void (*gt_metrics_collect_fn)(void *ud);
void gt_metrics_on_collect(gt_metrics_t *m, gt_metrics_collect_fn fn, void *ud);

/* Probe behind GET /health and GET /ready on the listener: returns the HTTP status (200 or 503)
 * and writes a short state word into msg, or 0 for a path it does not answer (404). Runs on the
 * listener thread. gt_metrics_on_probe(m, NULL, NULL) removes it and waits for a call in
 * progress, so the probe's owner may be freed afterwards. */
typedef int (*gt_metrics_probe_fn)(void *ud, const char *path, char *msg, size_t n);
void gt_metrics_on_probe(gt_metrics_t *m, gt_metrics_probe_fn fn, void *ud);

/* The registry in Prometheus text format: *out malloc'd, NUL-terminated (caller frees). */
int gt_metrics_render(gt_metrics_t *m, char **out, size_t *len, gt_err_t *err);

/* HTTP listener on host:port (port 0: any free port, *bound_port receives it) with its own
 * thread: GET /metrics -> the registry, GET /health and /ready -> the probe (if any), anything
 * else -> 404. */
typedef struct gt_metrics_http gt_metrics_http_t;
int gt_metrics_http_start(gt_metrics_t *m, const char *host, int port, int *bound_port, gt_metrics_http_t **out,
                          gt_err_t *err);
/* Stops the listener and joins its thread. NULL is a no-op. */
void gt_metrics_http_stop(gt_metrics_http_t *h);

#endif
