/* clients/bench_out.c — table, CSV and JSON writers. */
#include "clients/bench_out.h"

#include <string.h>

static const char *mode_name(const gc_cell_t *c) { return c->dataset ? "data" : c->warm ? "warm" : "cold"; }

#define ROW_FMT "%-14.14s %7s %5s %-4s %5s %4s %9s %9s %9s %10s %8s %8s %8s %9s %6s %7s %6s %8s %6s %7s %s\n"

void gc_table_header(FILE *f) {
  fprintf(f, ROW_FMT, "target", "ctx", "conc", "mode", "reqs", "err", "ttft_p50", "ttft_p90", "ttft_p99",
          "dec_tok/s", "itl_p99", "tpot_p50", "tpot_p99", "tot_tok/s", "chk", "prefix%", "think%", "prompt",
          "good%", "acc_len", "note");
}

static void num(char *b, size_t n, double v, int prec) {
  if (v < 0)
    snprintf(b, n, "-");
  else
    snprintf(b, n, "%.*f", prec, v);
}

void gc_table_row(FILE *f, const gc_cell_t *c) {
  char t50[32], t90[32], t99[32], dec[32], i99[32], p50[32], p99[32], tot[32], chk[32], hit[32], th[32], pr[32];
  char gd[32], acc[32], ctx[32], conc[32], reqs[32], err[32], note[64] = "";
  num(t50, sizeof t50, c->ttft_p50, 1);
  num(t90, sizeof t90, c->ttft_p90, 1);
  num(t99, sizeof t99, c->ttft_p99, 1);
  num(dec, sizeof dec, c->decode_tps, 1);
  num(i99, sizeof i99, c->itl_p99, 2);
  num(p50, sizeof p50, c->tpot_p50, 2);
  num(p99, sizeof p99, c->tpot_p99, 2);
  num(tot, sizeof tot, c->total_tps, 1);
  num(chk, sizeof chk, c->chk, 2);
  num(hit, sizeof hit, c->prefix_hit_pct, 1);
  num(th, sizeof th, c->think_pct, 1);
  num(pr, sizeof pr, c->prompt_tokens_mean, 0);
  num(gd, sizeof gd, c->good_pct, 1);
  num(acc, sizeof acc, c->spec_accept_len, 2);
  if (c->implausible && c->decode_tps < 0 && c->itl_p50 >= 0) snprintf(dec, sizeof dec, "inf"); /* itl 0 */
  if (c->implausible) snprintf(dec + strlen(dec), sizeof dec - strlen(dec), "!");
  if (c->context > 0) snprintf(ctx, sizeof ctx, "%d", c->context);
  else snprintf(ctx, sizeof ctx, "-");
  if (c->rate > 0)
    snprintf(conc, sizeof conc, "%gr/s", c->rate);
  else
    snprintf(conc, sizeof conc, "%d", c->concurrency);
  snprintf(reqs, sizeof reqs, "%d", c->n);
  snprintf(err, sizeof err, "%d", c->n_err);
  if (c->implausible) snprintf(note, sizeof note, "IMPLAUSIBLE");
  if (c->cap_limited) snprintf(note + strlen(note), sizeof note - strlen(note), "%sQUEUED", note[0] ? "," : "");
  fprintf(f, ROW_FMT, c->target, ctx, conc, mode_name(c), reqs, err, t50, t90, t99, dec, i99, p50, p99, tot, chk,
          hit, th, pr, gd, acc, note[0] ? note : "-");
  if (c->implausible) fprintf(f, "  ! %s\n", c->note_implausible);
  if (c->cap_limited) fprintf(f, "  ! %s\n", c->note_cap);
}

static void csv_num(FILE *f, double v, int prec) {
  if (v >= 0) fprintf(f, "%.*f", prec, v);
  fputc(',', f);
}

static void csv_str(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    if (*s == '"') fputc('"', f);
    fputc(*s == '\n' ? ' ' : *s, f);
  }
  fputc('"', f);
}

void gc_csv_write(FILE *f, const gc_cell_t *cells, int n) {
  fprintf(f,
          "target,context,concurrency,rate,mode,requests,ok,errors,ttft_p50_ms,ttft_p90_ms,ttft_p99_ms,"
          "ttfc_p50_ms,e2e_p50_ms,itl_p50_ms,itl_p90_ms,itl_p99_ms,tpot_p50_ms,tpot_p90_ms,tpot_p99_ms,"
          "decode_tps_per_user,total_tps,chk,prefix_hit_pct,think_pct,prompt_tokens,cached_tokens,out_tokens,"
          "reasoning_tokens,prompt_tokens_mean,wall_s,good_requests,goodput_pct,goodput_rps,burst_pct,"
          "itl_min_ms,implausible,srv_queue_ms,srv_queue_source,client_inflight,server_inflight,cap_limited,"
          "spec_accept_len,note,first_error\n");
  for (int i = 0; i < n; i++) {
    const gc_cell_t *c = &cells[i];
    csv_str(f, c->target);
    fprintf(f, ",%d,%d,%g,%s,%d,%d,%d,", c->context, c->concurrency, c->rate, mode_name(c), c->n, c->n_ok,
            c->n_err);
    csv_num(f, c->ttft_p50, 3);
    csv_num(f, c->ttft_p90, 3);
    csv_num(f, c->ttft_p99, 3);
    csv_num(f, c->ttfc_p50, 3);
    csv_num(f, c->e2e_p50, 3);
    csv_num(f, c->itl_p50, 3);
    csv_num(f, c->itl_p90, 3);
    csv_num(f, c->itl_p99, 3);
    csv_num(f, c->tpot_p50, 3);
    csv_num(f, c->tpot_p90, 3);
    csv_num(f, c->tpot_p99, 3);
    csv_num(f, c->decode_tps, 3);
    csv_num(f, c->total_tps, 3);
    csv_num(f, c->chk, 3);
    csv_num(f, c->prefix_hit_pct, 2);
    csv_num(f, c->think_pct, 2);
    fprintf(f, "%ld,%ld,%ld,%ld,", c->prompt_tokens, c->cached_tokens, c->out_tokens, c->reasoning_tokens);
    csv_num(f, c->prompt_tokens_mean, 1);
    fprintf(f, "%.3f,", c->wall_s);
    if (c->slo_set) fprintf(f, "%d", c->n_good);
    fputc(',', f);
    csv_num(f, c->good_pct, 2);
    csv_num(f, c->good_rps, 3);
    csv_num(f, c->burst_pct, 2);
    csv_num(f, c->itl_min_ms, 4);
    fprintf(f, "%d,", c->implausible);
    csv_num(f, c->srv_queue_ms, 3);
    csv_str(f, c->srv_queue_src);
    fputc(',', f);
    csv_num(f, c->cli_inflight, 2);
    csv_num(f, c->srv_inflight, 2);
    fprintf(f, "%d,", c->cap_limited);
    csv_num(f, c->spec_accept_len, 3);
    char note[768];
    snprintf(note, sizeof note, "%s%s%s", c->note_implausible, c->note_implausible[0] && c->note_cap[0] ? "; " : "",
             c->note_cap);
    csv_str(f, note);
    fputc(',', f);
    csv_str(f, c->first_error);
    fputc('\n', f);
  }
}

static json_t *jnum(double v) { return v < 0 ? json_null() : json_real(v); }
static json_t *jint(long v) { return v < 0 ? json_null() : json_integer(v); }

json_t *gc_cell_json(const gc_cell_t *c) {
  json_t *o = json_object();
  if (!o) return NULL;
  json_object_set_new(o, "target", json_string(c->target));
  json_object_set_new(o, "context", json_integer(c->context));
  json_object_set_new(o, "concurrency", json_integer(c->concurrency));
  json_object_set_new(o, "rate", json_real(c->rate));
  json_object_set_new(o, "mode", json_string(mode_name(c)));
  json_object_set_new(o, "requests", json_integer(c->n));
  json_object_set_new(o, "ok", json_integer(c->n_ok));
  json_object_set_new(o, "errors", json_integer(c->n_err));
  json_object_set_new(o, "first_error", c->first_error[0] ? json_string(c->first_error) : json_null());
  json_object_set_new(o, "wall_s", json_real(c->wall_s));
  json_object_set_new(o, "ttft_p50_ms", jnum(c->ttft_p50));
  json_object_set_new(o, "ttft_p90_ms", jnum(c->ttft_p90));
  json_object_set_new(o, "ttft_p99_ms", jnum(c->ttft_p99));
  json_object_set_new(o, "ttfc_p50_ms", jnum(c->ttfc_p50));
  json_object_set_new(o, "e2e_p50_ms", jnum(c->e2e_p50));
  json_object_set_new(o, "itl_p50_ms", jnum(c->itl_p50));
  json_object_set_new(o, "itl_p90_ms", jnum(c->itl_p90));
  json_object_set_new(o, "itl_p99_ms", jnum(c->itl_p99));
  json_object_set_new(o, "tpot_p50_ms", jnum(c->tpot_p50));
  json_object_set_new(o, "tpot_p90_ms", jnum(c->tpot_p90));
  json_object_set_new(o, "tpot_p99_ms", jnum(c->tpot_p99));
  json_object_set_new(o, "decode_tps_per_user", jnum(c->decode_tps));
  json_object_set_new(o, "total_tps", jnum(c->total_tps));
  json_object_set_new(o, "chk", jnum(c->chk));
  json_object_set_new(o, "prefix_hit_pct", jnum(c->prefix_hit_pct));
  json_object_set_new(o, "think_pct", jnum(c->think_pct));
  json_object_set_new(o, "prompt_tokens", json_integer(c->prompt_tokens));
  json_object_set_new(o, "cached_tokens", json_integer(c->cached_tokens));
  json_object_set_new(o, "out_tokens", json_integer(c->out_tokens));
  json_object_set_new(o, "reasoning_tokens", json_integer(c->reasoning_tokens));
  json_object_set_new(o, "prompt_tokens_mean", jnum(c->prompt_tokens_mean));
  json_object_set_new(o, "good_requests", c->slo_set ? json_integer(c->n_good) : json_null());
  json_object_set_new(o, "goodput_pct", jnum(c->good_pct));
  json_object_set_new(o, "goodput_rps", jnum(c->good_rps));
  json_object_set_new(o, "burst_pct", jnum(c->burst_pct));
  json_object_set_new(o, "itl_min_ms", jnum(c->itl_min_ms));
  json_object_set_new(o, "implausible", json_boolean(c->implausible));
  json_object_set_new(o, "implausible_reason", c->implausible ? json_string(c->note_implausible) : json_null());
  json_object_set_new(o, "srv_queue_ms", jnum(c->srv_queue_ms));
  json_object_set_new(o, "srv_queue_source", c->srv_queue_src[0] ? json_string(c->srv_queue_src) : json_null());
  json_object_set_new(o, "client_inflight", jnum(c->cli_inflight));
  json_object_set_new(o, "server_inflight", jnum(c->srv_inflight));
  json_object_set_new(o, "cap_limited", json_boolean(c->cap_limited));
  json_object_set_new(o, "spec_accept_len", jnum(c->spec_accept_len));
  json_object_set_new(o, "cap_note", c->cap_limited ? json_string(c->note_cap) : json_null());
  return o;
}

json_t *gc_req_json(const gc_req_t *r, int cell_index, int req_index) {
  json_t *o = json_object(), *ch = json_array();
  if (!o || !ch) {
    json_decref(o);
    json_decref(ch);
    return NULL;
  }
  for (int i = 0; i < r->n_chunks; i++)
    json_array_append_new(ch, json_real((double)((r->chunks[i].t_ns - r->t_start_ns) / 1000) / 1000.0));
  json_object_set_new(o, "cell", json_integer(cell_index));
  json_object_set_new(o, "index", json_integer(req_index));
  json_object_set_new(o, "http_status", json_integer(r->http_status));
  json_object_set_new(o, "error", r->error ? json_string(r->error) : json_null());
  json_object_set_new(o, "ttft_ms", jnum(r->ttft_ms));
  json_object_set_new(o, "ttfc_ms", jnum(r->ttfc_ms));
  json_object_set_new(o, "e2e_ms", jnum(r->e2e_ms));
  json_object_set_new(o, "itl_median_ms", jnum(r->itl_median_ms));
  json_object_set_new(o, "itl_p99_ms", jnum(r->itl_p99_ms));
  json_object_set_new(o, "tpot_ms", jnum(r->tpot_ms));
  json_object_set_new(o, "prompt_tokens", jint(r->prompt_tokens));
  json_object_set_new(o, "cached_tokens", jint(r->cached_tokens));
  json_object_set_new(o, "completion_tokens", json_integer(r->out_tokens));
  json_object_set_new(o, "reasoning_tokens", json_integer(r->reasoning_tokens));
  json_object_set_new(o, "content_tokens", json_integer(r->content_tokens));
  json_object_set_new(o, "tokens_from_usage", json_boolean(r->tokens_from_usage));
  json_object_set_new(o, "reasoning_estimated", json_boolean(r->reasoning_estimated));
  json_object_set_new(o, "token_chunks", json_integer(r->n_chunks));
  json_object_set_new(o, "content_chunks", json_integer(r->content_chunks));
  json_object_set_new(o, "reasoning_chunks", json_integer(r->reasoning_chunks));
  json_object_set_new(o, "tool_chunks", json_integer(r->tool_chunks));
  json_object_set_new(o, "usage_chunks", json_integer(r->usage_chunks));
  json_object_set_new(o, "finish_reason", r->finish_reason[0] ? json_string(r->finish_reason) : json_null());
  json_object_set_new(o, "chunk_ms", ch);
  return o;
}
