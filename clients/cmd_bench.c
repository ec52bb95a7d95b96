/* clients/cmd_bench.c — `gantry bench`: the telemetry matrix (target x context x concurrency x
 * cold/warm), printed as a table and written as results.csv, results.json and SVG plots. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "clients/bench_dataset.h"
#include "clients/bench_out.h"
#include "clients/bench_prompt.h"
#include "clients/bench_run.h"
#include "clients/bench_slo.h"
#include "clients/bench_srvq.h"
#include "clients/bench_stats.h"
#include "clients/cmd.h"
#include "clients/svg.h"
#ifdef GANTRY_HAVE_TOK
#include "clients/tok_local.h"
#endif

#define MAX_LIST 32

typedef struct target {
  char label[64];
  const char *url;
  char model[256];
} target_t;

typedef struct opts {
  target_t targets[16];
  int n_targets;
  int ctx[MAX_LIST], n_ctx;
  int conc[MAX_LIST], n_conc;
  double rate[MAX_LIST];
  int n_rate;
  int rpu, requests, max_tokens, cold, warm, natural, no_cont_usage;
  const char *model, *api_key, *out, *tokenizer, *endpoint;
  uint64_t seed;
  double temperature;
  long timeout_ms;
  gc_slo_t slo;
  const char *dataset; /* --dataset path */
  const char *spec_metrics; /* --spec-metrics URL: where the speculative decoding counters are (default: the target) */
  gc_dataset_t ds;
  int requests_given, contexts_given;
} opts_t;

static void usage(FILE *f) {
  fprintf(f,
          "usage: gantry bench [--target LABEL=URL ...] [--contexts 512,8192,28000]\n"
          "         [--concurrency 1,2,4,8,16,32 | --rate R1,R2 --requests N] [--requests-per-user N]\n"
          "         [--max-tokens M] [--cold] [--warm] [--model NAME] [--api-key K] [--seed S]\n"
          "         [--out DIR] [--natural-length] [--no-continuous-usage] [--temperature T]\n"
          "         [--completions] [--timeout-s S] [--slo ttft_ms=MS,itl_ms=MS,tpot_ms=MS,e2e_ms=MS]\n"
          "         [--dataset F.jsonl [--requests N]] [--spec-metrics URL]"
#ifdef GANTRY_HAVE_TOK
          " [--tokenizer M.gguf]"
#endif
          "\n"
          "Without --target the global --url is the one target. Without --cold/--warm both run.\n"
          "--dataset replays a JSONL file (one {\"prompt\": S | \"input_len\": N, \"output_len\": M} per line)\n"
          "instead of --contexts x cold/warm; each cell sends every entry once, or --requests N of them.\n"
          "acc_len: speculative decoding's mean accepted length (1 + accepted / drafts over the cell) from the\n"
          "/metrics counters of the target (vLLM) or of --spec-metrics URL (a gantry engine's --metrics-port).\n");
}

static int parse_ints(const char *s, int *out, int max) {
  int n = 0;
  char *end;
  while (*s && n < max) {
    long v = strtol(s, &end, 10);
    if (end == s || v <= 0) return -1;
    out[n++] = (int)v;
    s = *end == ',' ? end + 1 : end;
    if (*end && *end != ',') return -1;
  }
  return n;
}

static int parse_dbls(const char *s, double *out, int max) {
  int n = 0;
  char *end;
  while (*s && n < max) {
    double v = strtod(s, &end);
    if (end == s || v <= 0) return -1;
    out[n++] = v;
    s = *end == ',' ? end + 1 : end;
    if (*end && *end != ',') return -1;
  }
  return n;
}

/* ---- progress on stderr ---- */
typedef struct progress {
  int tty, total, done_before, cell_i, n_cells;
  char label[160];
} progress_t;

static void on_progress(void *ud, int done, int total) {
  progress_t *p = ud;
  (void)total;
  if (!p->tty) return;
  int d = p->done_before + done, width = 30;
  int fill = p->total ? d * width / p->total : width;
  char bar[64];
  for (int i = 0; i < width; i++) bar[i] = i < fill ? '#' : '-';
  bar[width] = 0;
  fprintf(stderr, "\r\033[K[%s] %3d%% %d/%d  cell %d/%d %s", bar, p->total ? 100 * d / p->total : 100, d,
          p->total, p->cell_i + 1, p->n_cells, p->label);
  fflush(stderr);
}

/* ---- request bodies ---- */
typedef struct body_ctx {
  const opts_t *o;
  const char *model, *text;
  const gc_dataset_t *ds; /* set: request idx sends entry idx % n as it is */
  int cold, max_tokens;
  char nonce[40];
} body_ctx_t;

static char *make_body(void *ud, int idx) {
  body_ctx_t *b = ud;
  const opts_t *o = b->o;
  const gc_ds_entry_t *de = b->ds ? &b->ds->e[idx % b->ds->n] : NULL;
  const char *text = de ? de->prompt : b->text;
  size_t tl = strlen(text) + 64;
  char *prompt = malloc(tl);
  if (!prompt) return NULL;
  if (de)
    snprintf(prompt, tl, "%s", text);
  else if (b->cold) /* a unique first line: no prefix block can match any other request */
    snprintf(prompt, tl, "[%s-%d]\n%s", b->nonce, idx, b->text);
  else
    snprintf(prompt, tl, "%s", b->text);
  json_t *req = json_object();
  json_object_set_new(req, "model", json_string(b->model));
  if (strcmp(o->endpoint, "/v1/completions") == 0)
    json_object_set_new(req, "prompt", json_string(prompt));
  else
    json_object_set_new(req, "messages", json_pack("[{s:s, s:s}]", "role", "user", "content", prompt));
  free(prompt);
  json_object_set_new(req, "max_tokens", json_integer(de && de->output_len > 0 ? de->output_len : b->max_tokens));
  json_object_set_new(req, "stream", json_true());
  json_t *so = json_pack("{s:b}", "include_usage", 1);
  if (!o->no_cont_usage) json_object_set_new(so, "continuous_usage_stats", json_true());
  json_object_set_new(req, "stream_options", so);
  if (!o->natural) json_object_set_new(req, "ignore_eos", json_true());
  if (o->temperature >= 0) json_object_set_new(req, "temperature", json_real(o->temperature));
  char *s = json_dumps(req, JSON_COMPACT);
  json_decref(req);
  return s;
}

/* ---- one cell ---- */
typedef struct results {
  gc_cell_t *cells;
  int n_cells;
  json_t *requests;
  json_t *prompts; /* per target x context: how the prompt was sized */
} results_t;

static int run_cell(const opts_t *o, const gc_http_t *h, body_ctx_t *b, gc_cell_t *cell, int n_total,
                    progress_t *pg, results_t *res, gt_err_t *err) {
  gc_req_t *reqs = calloc((size_t)n_total, sizeof *reqs);
  if (!reqs) return gt_err_set(err, GT_ENOMEM, "out of memory");
  snprintf(b->nonce, sizeof b->nonce, "%08lx%04x-%d", (unsigned long)time(NULL), (unsigned)getpid() & 0xffff,
           res->n_cells);
  gc_run_opts_t ro = {.http = h, .path = o->endpoint, .concurrency = cell->concurrency, .rate = cell->rate,
                      .seed = o->seed + (uint64_t)res->n_cells, .n_total = n_total, .body = make_body,
                      .body_ud = b, .progress = on_progress, .progress_ud = pg};
  double wall = 0;
  gc_srvq_snap_t q0, q1, s0, s1;
  /* the speculative decoding counters: the target's /metrics, or the engine's (--spec-metrics:
   * gantry's router does not pass on the engine's series) */
  gc_http_t hs = *h;
  if (o->spec_metrics) hs.base_url = o->spec_metrics;
  gc_srvq_scrape(h, &q0); /* the server's queue time: /metrics before and after the cell */
  if (o->spec_metrics) gc_srvq_scrape(&hs, &s0);
  int rc = gc_run(&ro, reqs, &wall, err);
  gc_srvq_scrape(h, &q1);
  if (o->spec_metrics) gc_srvq_scrape(&hs, &s1);
  if (rc == GT_OK) rc = gc_cell_compute(cell, reqs, n_total, wall);
  if (rc == GT_OK) gc_cell_goodput(cell, reqs, n_total, &o->slo);
  if (rc == GT_OK) gc_cell_queue(cell, reqs, n_total, &q0, &q1);
  if (rc == GT_OK) gc_cell_spec(cell, o->spec_metrics ? &s0 : &q0, o->spec_metrics ? &s1 : &q1);
  if (rc == GT_OK)
    for (int i = 0; i < n_total; i++) {
      json_t *j = gc_req_json(&reqs[i], res->n_cells, i);
      if (j && cell->slo_set) json_object_set_new(j, "slo_met", json_boolean(gc_slo_met(&o->slo, &reqs[i])));
      if (j && b->ds) {
        const gc_ds_entry_t *de = &b->ds->e[i % b->ds->n];
        json_object_set_new(j, "dataset_line", json_integer(de->line));
        json_object_set_new(j, "max_tokens", json_integer(de->output_len > 0 ? de->output_len : b->max_tokens));
      }
      json_array_append_new(res->requests, j);
    }
  for (int i = 0; i < n_total; i++) gc_req_free(&reqs[i]);
  free(reqs);
  return rc;
}

/* Sends the prompt once (not measured) so a warm cell finds it in the prefix cache. */
static void warm_up(const opts_t *o, const gc_http_t *h, body_ctx_t *b) {
  body_ctx_t wb = *b;
  wb.cold = 0;
  wb.max_tokens = 1;
  gc_req_t r;
  memset(&r, 0, sizeof r);
  gc_run_opts_t ro = {.http = h, .path = o->endpoint, .concurrency = 1, .n_total = 1, .body = make_body, .body_ud = &wb};
  double wall;
  gt_err_t err = {0};
  if (gc_run(&ro, &r, &wall, &err) || r.error)
    fprintf(stderr, "\ngantry bench: warm-up request failed: %s\n", r.error ? r.error : err.msg);
  gc_req_free(&r);
}

/* ---- outputs ---- */
static FILE *open_out(const char *dir, const char *name, char *path, size_t cap) {
  snprintf(path, cap, "%s/%s", dir, name);
  FILE *f = fopen(path, "w");
  if (!f) fprintf(stderr, "gantry bench: cannot write %s: %s\n", path, strerror(errno));
  return f;
}

static void write_plots(const opts_t *o, const results_t *res) {
  char path[1024];
  gc_series_t *s = calloc(256, sizeof *s);
  if (!s) return;
  int both = o->cold && o->warm;
  /* decode tok/s per user vs concurrency: one line per target, context (and mode) */
  int ns = 0;
  for (int i = 0; i < res->n_cells; i++) {
    const gc_cell_t *c = &res->cells[i];
    if (c->rate > 0) continue;
    char name[96];
    if (c->dataset)
      snprintf(name, sizeof name, "%s dataset", c->target);
    else
      snprintf(name, sizeof name, "%s ctx=%d%s%s", c->target, c->context, both ? " " : "",
               both ? (c->warm ? "warm" : "cold") : "");
    int k = 0;
    while (k < ns && strcmp(s[k].name, name) != 0) k++;
    if (k == ns) {
      if (ns == 256) continue;
      snprintf(s[ns++].name, sizeof s[0].name, "%s", name);
    }
    gc_series_add(&s[k], c->concurrency, c->decode_tps);
  }
  FILE *f;
  if (ns && (f = open_out(o->out, "decode_vs_concurrency.svg", path, sizeof path))) {
    gc_svg_plot(f, "Decode tok/s per user vs concurrency", "concurrent streams", "decode tok/s per user", s,
                ns, 1);
    fclose(f);
  }
  /* TTFT vs context, cold vs warm, at the lowest concurrency */
  memset(s, 0, 256 * sizeof *s);
  ns = 0;
  int cmin = o->n_conc ? o->conc[0] : 0;
  for (int i = 0; i < o->n_conc; i++)
    if (o->conc[i] < cmin) cmin = o->conc[i];
  for (int i = 0; i < res->n_cells; i++) {
    const gc_cell_t *c = &res->cells[i];
    if (c->rate > 0 || c->dataset || c->concurrency != cmin) continue;
    char name[96];
    snprintf(name, sizeof name, "%s %s (c=%d)", c->target, c->warm ? "warm" : "cold", cmin);
    int k = 0;
    while (k < ns && strcmp(s[k].name, name) != 0) k++;
    if (k == ns) {
      if (ns == 256) continue;
      snprintf(s[ns++].name, sizeof s[0].name, "%s", name);
    }
    gc_series_add(&s[k], c->context, c->ttft_p50);
  }
  if (ns && (f = open_out(o->out, "ttft_vs_context.svg", path, sizeof path))) {
    gc_svg_plot(f, "TTFT p50 vs context (cold vs warm)", "prompt tokens", "TTFT p50 (ms)", s, ns, 0);
    fclose(f);
  }
  free(s);
}

static int write_results(const opts_t *o, const gc_cli_t *cli, const results_t *res, const char *started) {
  char path[1024];
  int rc = 0;
  FILE *f = open_out(o->out, "results.csv", path, sizeof path);
  if (f) {
    gc_csv_write(f, res->cells, res->n_cells);
    if (fclose(f)) rc = 1;
  } else {
    rc = 1;
  }
  json_t *root = json_object(), *cells = json_array();
  for (int i = 0; i < res->n_cells; i++) json_array_append_new(cells, gc_cell_json(&res->cells[i]));
  json_t *targets = json_array();
  for (int i = 0; i < o->n_targets; i++)
    json_array_append_new(targets, json_pack("{s:s, s:s, s:s}", "label", o->targets[i].label, "url",
                                             o->targets[i].url, "model", o->targets[i].model));
  json_object_set_new(root, "tool", json_string("gantry bench"));
  json_object_set_new(root, "version", json_string(GANTRY_VERSION));
  json_object_set_new(root, "command_line", json_string(cli->cmdline ? cli->cmdline : ""));
  json_object_set_new(root, "started", json_string(started));
  json_object_set_new(root, "targets", targets);
  json_object_set_new(root, "ignore_eos", json_boolean(!o->natural));
  json_object_set_new(root, "max_tokens", json_integer(o->max_tokens));
  json_object_set_new(root, "seed", json_integer((json_int_t)o->seed));
  char slo[160];
  gc_slo_format(&o->slo, slo, sizeof slo);
  json_object_set_new(root, "slo", slo[0] ? json_string(slo) : json_null());
  json_object_set_new(root, "cells", cells);
  json_object_set_new(root, "prompts", json_incref(res->prompts));
  json_object_set_new(root, "requests", json_incref(res->requests));
  snprintf(path, sizeof path, "%s/results.json", o->out);
  if (json_dump_file(root, path, JSON_INDENT(1)) != 0) {
    fprintf(stderr, "gantry bench: cannot write %s\n", path);
    rc = 1;
  }
  json_decref(root);
  write_plots(o, res);
  return rc;
}

static int parse_args(opts_t *o, gc_cli_t *cli, int argc, char **argv) {
  memset(o, 0, sizeof *o);
  o->rpu = 4;
  o->requests = 16;
  o->max_tokens = 64;
  o->seed = 1;
  o->temperature = -1;
  o->timeout_ms = 600000;
  o->endpoint = "/v1/chat/completions";
  o->n_ctx = parse_ints("512,8192,28000", o->ctx, MAX_LIST);
  o->n_conc = parse_ints("1,2,4,8,16,32", o->conc, MAX_LIST);
  o->slo = (gc_slo_t){-1, -1, -1, -1};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define NEEDV()                                                      \
  do {                                                               \
    if (!v) {                                                        \
      fprintf(stderr, "gantry bench: %s needs a value\n", a);        \
      return -1;                                                     \
    }                                                                \
    i++;                                                             \
  } while (0)
    if (!strcmp(a, "--target")) {
      NEEDV();
      const char *eq = strchr(v, '=');
      if (!eq || eq == v || !eq[1] || o->n_targets == 16) {
        fprintf(stderr, "gantry bench: --target wants LABEL=URL (at most 16)\n");
        return -1;
      }
      target_t *t = &o->targets[o->n_targets++];
      snprintf(t->label, sizeof t->label, "%.*s", (int)(eq - v), v);
      t->url = eq + 1;
    } else if (!strcmp(a, "--contexts")) {
      NEEDV();
      if ((o->n_ctx = parse_ints(v, o->ctx, MAX_LIST)) <= 0) goto bad;
      o->contexts_given = 1;
    } else if (!strcmp(a, "--concurrency")) {
      NEEDV();
      if ((o->n_conc = parse_ints(v, o->conc, MAX_LIST)) <= 0) goto bad;
    } else if (!strcmp(a, "--rate")) {
      NEEDV();
      if ((o->n_rate = parse_dbls(v, o->rate, MAX_LIST)) <= 0) goto bad;
    } else if (!strcmp(a, "--requests")) {
      NEEDV();
      if ((o->requests = atoi(v)) <= 0) goto bad;
      o->requests_given = 1;
    } else if (!strcmp(a, "--requests-per-user")) {
      NEEDV();
      if ((o->rpu = atoi(v)) <= 0) goto bad;
    } else if (!strcmp(a, "--max-tokens")) {
      NEEDV();
      if ((o->max_tokens = atoi(v)) <= 0) goto bad;
    } else if (!strcmp(a, "--model")) {
      NEEDV();
      o->model = v;
    } else if (!strcmp(a, "--api-key")) {
      NEEDV();
      o->api_key = v;
    } else if (!strcmp(a, "--seed")) {
      NEEDV();
      o->seed = strtoull(v, NULL, 10);
    } else if (!strcmp(a, "--out")) {
      NEEDV();
      o->out = v;
    } else if (!strcmp(a, "--temperature")) {
      NEEDV();
      o->temperature = atof(v);
    } else if (!strcmp(a, "--timeout-s")) {
      NEEDV();
      o->timeout_ms = (long)(atof(v) * 1000);
    } else if (!strcmp(a, "--spec-metrics")) {
      NEEDV();
      o->spec_metrics = v;
    } else if (!strcmp(a, "--slo")) {
      NEEDV();
      gt_err_t e = {0};
      if (gc_slo_parse(v, &o->slo, &e)) {
        fprintf(stderr, "gantry bench: %s\n", e.msg);
        return -1;
      }
    } else if (!strcmp(a, "--dataset")) {
      NEEDV();
      o->dataset = v;
    } else if (!strcmp(a, "--tokenizer")) {
      NEEDV();
      o->tokenizer = v;
    } else if (!strcmp(a, "--cold")) {
      o->cold = 1;
    } else if (!strcmp(a, "--warm")) {
      o->warm = 1;
    } else if (!strcmp(a, "--natural-length")) {
      o->natural = 1;
    } else if (!strcmp(a, "--no-continuous-usage")) {
      o->no_cont_usage = 1;
    } else if (!strcmp(a, "--completions")) {
      o->endpoint = "/v1/completions";
    } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage(stdout);
      return 1;
    } else {
      fprintf(stderr, "gantry bench: unknown option %s\n", a);
      usage(stderr);
      return -1;
    }
    continue;
  bad:
    fprintf(stderr, "gantry bench: bad value for %s: %s\n", a, v);
    return -1;
#undef NEEDV
  }
  if (o->dataset && (o->cold || o->warm || o->contexts_given)) {
    fprintf(stderr, "gantry bench: --dataset replays its prompts as they are: --contexts, --cold and --warm do not apply\n");
    return -1;
  }
  if (!o->cold && !o->warm) o->cold = o->warm = 1;
  if (o->n_targets == 0) {
    snprintf(o->targets[0].label, sizeof o->targets[0].label, "default");
    o->targets[0].url = cli->http.base_url;
    o->n_targets = 1;
  }
#ifndef GANTRY_HAVE_TOK
  if (o->tokenizer) {
    fprintf(stderr, "gantry bench: --tokenizer needs gantry built with its tokenizer library\n");
    return -1;
  }
#endif
  return 0;
}

/* Requests in one cell at load index l. */
static int cell_requests(const opts_t *o, int l) {
  if (o->dataset) return o->requests_given ? o->requests : o->ds.n;
  return o->n_rate ? o->requests : o->conc[l] * o->rpu;
}

/* How prompt tokens are counted for a target. */
typedef struct counter {
  gc_count_fn fn;
  void *ud;
  const char *method;
} counter_t;

/* The fallback without /tokenize: 0.75 words per token. */
static int estimate_count(void *ud, const char *text, int *count, gt_err_t *err) {
  (void)ud, (void)err;
  int words = 0, in = 0;
  for (const char *p = text; *p; p++) {
    int sp = *p == ' ' || *p == '\n' || *p == '\t';
    if (!sp && !in) words++;
    in = !sp;
  }
  *count = (words * 4 + 2) / 3;
  return GT_OK;
}

/* Builds the dataset's input_len prompts for target tg and records them in res->prompts.
 * Returns 0, or 1 after printing why it failed. */
static int dataset_prompts(opts_t *o, const target_t *tg, counter_t *cnt, results_t *res) {
  gt_err_t err = {0};
  int rc = gc_dataset_synthesize(&o->ds, cnt->fn, cnt->ud, o->seed, &err);
  if (rc == GT_EUNSUPPORTED) {
    fprintf(stderr, "gantry bench: target %s: %s; estimating dataset input_len at 0.75 words per token\n",
            tg->label, err.msg);
    cnt->fn = estimate_count, cnt->ud = NULL, cnt->method = "estimate (0.75 words per token)";
    rc = gc_dataset_synthesize(&o->ds, cnt->fn, cnt->ud, o->seed, &err);
  }
  if (rc) {
    fprintf(stderr, "gantry bench: target %s: --dataset: %s\n", tg->label, err.msg);
    return 1;
  }
  int n_synth = 0;
  long asked = 0, got = 0;
  for (int i = 0; i < o->ds.n; i++)
    if (o->ds.e[i].synthesized) n_synth++, asked += o->ds.e[i].input_len, got += o->ds.e[i].input_tokens;
  json_array_append_new(res->prompts, json_pack("{s:s, s:s, s:i, s:i, s:I, s:I, s:s}", "target", tg->label, "dataset",
                                                o->dataset, "entries", o->ds.n, "synthesized", n_synth,
                                                "input_len_sum", (json_int_t)asked, "calibrated_tokens_sum",
                                                (json_int_t)got, "method", n_synth ? cnt->method : "as given"));
  return 0;
}

/* Runs one cell per load level (concurrency or rate) with the prompts of b, printing each row. */
static void run_loads(const opts_t *o, const gc_http_t *h, const target_t *tg, body_ctx_t *b, int context,
                      int warm, results_t *res, progress_t *pg, int max_cells, int *printed_header, int *exit_code) {
  int n_loads = o->n_rate ? o->n_rate : o->n_conc;
  const char *mode = o->dataset ? "data" : warm ? "warm" : "cold";
  for (int l = 0; l < n_loads; l++) {
    gt_err_t err = {0};
    gc_cell_t *c = &res->cells[res->n_cells];
    snprintf(c->target, sizeof c->target, "%s", tg->label);
    c->context = context;
    c->warm = warm;
    c->dataset = o->dataset != NULL;
    c->concurrency = o->n_rate ? 0 : o->conc[l];
    c->rate = o->n_rate ? o->rate[l] : 0;
    int n_total = cell_requests(o, l);
    pg->cell_i = res->n_cells;
    char ctx[32] = "";
    if (context > 0) snprintf(ctx, sizeof ctx, " ctx=%d", context);
    if (o->n_rate)
      snprintf(pg->label, sizeof pg->label, "%s%s rate=%g %s", tg->label, ctx, c->rate, mode);
    else
      snprintf(pg->label, sizeof pg->label, "%s%s c=%d %s", tg->label, ctx, c->concurrency, mode);
    if (run_cell(o, h, b, c, n_total, pg, res, &err)) {
      fprintf(stderr, "\ngantry bench: %s: %s\n", pg->label, err.msg);
      *exit_code = 1;
      continue;
    }
    pg->done_before += n_total;
    res->n_cells++;
    if (pg->tty) fprintf(stderr, "\r\033[K");
    else fprintf(stderr, "gantry bench: cell %d/%d done: %s\n", res->n_cells, max_cells, pg->label);
    if (!*printed_header) gc_table_header(stdout), *printed_header = 1;
    gc_table_row(stdout, c);
    fflush(stdout);
    if (c->n_err) *exit_code = *exit_code ? *exit_code : 3;
  }
}

int gc_cmd_bench(gc_cli_t *cli, int argc, char **argv) {
  opts_t o;
  int pr = parse_args(&o, cli, argc, argv);
  if (pr) return pr > 0 ? 0 : 2;
  if (o.dataset) {
    gt_err_t err = {0};
    if (gc_dataset_load(o.dataset, &o.ds, &err)) {
      fprintf(stderr, "gantry bench: %s\n", err.msg);
      return 2;
    }
  }
  char outdir[256], started[64];
  time_t now = time(NULL);
  struct tm tm;
  gmtime_r(&now, &tm);
  strftime(started, sizeof started, "%Y-%m-%dT%H:%M:%SZ", &tm);
  if (!o.out) {
    strftime(outdir, sizeof outdir, "gantry-bench-%Y%m%d-%H%M%S", &tm);
    o.out = outdir;
  }
  if (mkdir(o.out, 0777) != 0 && errno != EEXIST) {
    fprintf(stderr, "gantry bench: cannot create %s: %s\n", o.out, strerror(errno));
    gc_dataset_free(&o.ds);
    return 1;
  }
  void *local_tok = NULL;
#ifdef GANTRY_HAVE_TOK
  if (o.tokenizer) {
    gt_err_t err = {0};
    if (!(local_tok = gc_tok_local_open(o.tokenizer, &err))) {
      fprintf(stderr, "gantry bench: --tokenizer: %s\n", err.msg);
      gc_dataset_free(&o.ds);
      return 1;
    }
  }
#endif
  int n_modes = o.dataset ? 1 : o.cold + o.warm;
  int n_ctx = o.dataset ? 1 : o.n_ctx;
  int n_loads = o.n_rate ? o.n_rate : o.n_conc;
  int max_cells = o.n_targets * n_ctx * n_modes * n_loads;
  results_t res = {calloc((size_t)max_cells, sizeof(gc_cell_t)), 0, json_array(), json_array()};
  progress_t pg = {.tty = isatty(2), .n_cells = max_cells};
  for (int t = 0; t < o.n_targets; t++)
    for (int l = 0; l < n_loads; l++) pg.total += cell_requests(&o, l) * n_ctx * n_modes;
  int exit_code = 0, printed_header = 0;
  for (int t = 0; t < o.n_targets && res.cells; t++) {
    target_t *tg = &o.targets[t];
    gc_http_t h = {.base_url = tg->url, .api_key = o.api_key ? o.api_key : cli->http.api_key,
                   .timeout_ms = o.timeout_ms};
    gt_err_t err = {0};
    if (o.model) {
      snprintf(tg->model, sizeof tg->model, "%s", o.model);
    } else if (gc_first_model(&h, tg->model, sizeof tg->model, NULL, &err)) {
      fprintf(stderr, "gantry bench: target %s: no model (%s); pass --model\n", tg->label, err.msg);
      exit_code = 1;
      continue;
    }
    gc_http_count_t hc = {&h, tg->model};
    counter_t cnt = {gc_http_count, &hc, local_tok ? "local tokenizer" : "server /tokenize"};
#ifdef GANTRY_HAVE_TOK
    if (local_tok) cnt.fn = gc_tok_local_count, cnt.ud = local_tok;
#endif
    if (o.dataset) {
      if (dataset_prompts(&o, tg, &cnt, &res)) {
        exit_code = 1;
        continue;
      }
      body_ctx_t b = {.o = &o, .model = tg->model, .ds = &o.ds, .max_tokens = o.max_tokens};
      run_loads(&o, &h, tg, &b, 0, 0, &res, &pg, max_cells, &printed_header, &exit_code);
      continue;
    }
    for (int ci = 0; ci < o.n_ctx; ci++) {
      char *text = NULL;
      int tokens = 0;
      const char *method = cnt.method;
      int rc = gc_prompt_calibrate(cnt.fn, cnt.ud, o.ctx[ci], o.seed, &text, &tokens, &err);
      if (rc == GT_EUNSUPPORTED) {
        fprintf(stderr, "gantry bench: target %s: %s; estimating %d tokens as %d words\n", tg->label, err.msg,
                o.ctx[ci], o.ctx[ci] * 3 / 4);
        text = gc_prompt_words(o.seed, o.ctx[ci] * 3 / 4);
        rc = text ? GT_OK : GT_ENOMEM;
        method = "estimate (0.75 words per token)";
        tokens = -1;
      }
      if (rc) {
        fprintf(stderr, "gantry bench: target %s: context %d: %s\n", tg->label, o.ctx[ci], err.msg);
        exit_code = 1;
        free(text);
        continue;
      }
      json_array_append_new(res.prompts, json_pack("{s:s, s:i, s:o, s:s}", "target", tg->label, "context", o.ctx[ci],
                                                   "calibrated_tokens", tokens >= 0 ? json_integer(tokens) : json_null(),
                                                   "method", method));
      for (int m = 0; m < 2; m++) {
        int warm = m == 1;
        if ((warm && !o.warm) || (!warm && !o.cold)) continue;
        body_ctx_t b = {.o = &o, .model = tg->model, .text = text, .cold = !warm, .max_tokens = o.max_tokens};
        if (warm) warm_up(&o, &h, &b);
        run_loads(&o, &h, tg, &b, o.ctx[ci], warm, &res, &pg, max_cells, &printed_header, &exit_code);
      }
      free(text);
    }
  }
  if (res.cells && write_results(&o, cli, &res, started)) exit_code = 1;
  if (res.cells) fprintf(stderr, "gantry bench: results in %s/ (results.csv, results.json, *.svg)\n", o.out);
  else fprintf(stderr, "gantry bench: out of memory\n"), exit_code = 1;
  for (int i = 0; i < res.n_cells; i++)
    if (res.cells[i].n_err)
      fprintf(stderr, "gantry bench: %s ctx=%d c=%d %s: %d errors, first: %s\n", res.cells[i].target,
              res.cells[i].context, res.cells[i].concurrency, res.cells[i].warm ? "warm" : "cold",
              res.cells[i].n_err, res.cells[i].first_error);
  free(res.cells);
  json_decref(res.requests);
  json_decref(res.prompts);
  gc_dataset_free(&o.ds);
#ifdef GANTRY_HAVE_TOK
  gc_tok_local_free(local_tok);
#endif
  return exit_code;
}
