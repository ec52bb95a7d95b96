/* clients/req.c — turns SSE chunk payloads into one request's measurements. */
#include "clients/req.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void gc_req_free(gc_req_t *r) {
  free(r->chunks);
  free(r->error);
  free(r->body);
  free(r->content);
  free(r->reasoning);
  free(r->ival_ms);
  free(r->ival_w);
  for (int i = 0; i < r->n_tools; i++) {
    free(r->tools[i].id);
    free(r->tools[i].name);
    free(r->tools[i].args);
  }
  int keep = r->keep_text;
  gc_delta_cb cb = r->on_delta;
  void *ud = r->delta_ud;
  memset(r, 0, sizeof *r);
  r->keep_text = keep;
  r->on_delta = cb;
  r->delta_ud = ud;
}

void gc_req_begin(gc_req_t *r, int64_t t_start_ns) {
  gc_req_free(r);
  r->t_start_ns = t_start_ns;
  r->prompt_tokens = r->completion_tokens = r->reasoning_tokens_srv = r->cached_tokens = -1;
  r->ttft_ms = r->ttfc_ms = r->e2e_ms = r->itl_median_ms = r->itl_p99_ms = r->tpot_ms = -1;
}

void gc_req_set_error(gc_req_t *r, const char *fmt, ...) {
  if (r->error) return;
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  r->error = strdup(buf);
}

/* Appends text to a malloc'd string (NULL-safe); returns 0 or -1 on OOM. */
static int append(char **s, size_t *len, const char *t, size_t n) {
  char *ns = realloc(*s, *len + n + 1);
  if (!ns) return -1;
  memcpy(ns + *len, t, n);
  *len += n;
  ns[*len] = 0;
  *s = ns;
  return 0;
}

static void append_str(char **s, const char *t) {
  size_t len = *s ? strlen(*s) : 0;
  append(s, &len, t, strlen(t));
}

static int json_int(json_t *o, const char *k) {
  json_t *v = json_object_get(o, k);
  return json_is_integer(v) ? (int)json_integer_value(v) : -1;
}

/* Non-empty string field, or NULL. */
static const char *str_field(json_t *o, const char *k, size_t *len) {
  json_t *v = json_object_get(o, k);
  if (!json_is_string(v) || json_string_length(v) == 0) return NULL;
  *len = json_string_length(v);
  return json_string_value(v);
}

static void on_text(gc_req_t *r, int kind, const char *t, size_t n) {
  if (r->keep_text) {
    if (kind == GC_CK_CONTENT)
      append(&r->content, &r->content_len, t, n);
    else
      append(&r->reasoning, &r->reasoning_len, t, n);
  }
  if (r->on_delta) r->on_delta(r->delta_ud, kind, t, n);
}

static void on_tool_deltas(gc_req_t *r, json_t *calls) {
  size_t i;
  json_t *c;
  json_array_foreach(calls, i, c) {
    json_t *ji = json_object_get(c, "index");
    int idx = json_is_integer(ji) ? (int)json_integer_value(ji) : (int)i;
    if (idx < 0 || idx >= GC_MAX_TOOLS) continue;
    if (idx >= r->n_tools) r->n_tools = idx + 1;
    gc_tool_call_t *t = &r->tools[idx];
    json_t *id = json_object_get(c, "id");
    if (json_is_string(id) && !t->id) t->id = strdup(json_string_value(id));
    json_t *fn = json_object_get(c, "function");
    json_t *name = json_object_get(fn, "name");
    json_t *args = json_object_get(fn, "arguments");
    if (json_is_string(name)) append_str(&t->name, json_string_value(name));
    if (json_is_string(args)) append_str(&t->args, json_string_value(args));
  }
}

static void error_message(json_t *err, char *out, size_t cap) {
  json_t *m = json_is_object(err) ? json_object_get(err, "message") : err;
  json_t *ty = json_is_object(err) ? json_object_get(err, "type") : NULL;
  const char *msg = json_is_string(m) ? json_string_value(m) : "(no message)";
  if (json_is_string(ty))
    snprintf(out, cap, "%s: %s", json_string_value(ty), msg);
  else
    snprintf(out, cap, "%s", msg);
}

/* An event's new usage (-1: unknown) that no token chunk carried, held for the next one */
static void hold_usage(int *held, int usage_new) {
  if (usage_new > 0) *held += usage_new;
}
/* A token chunk's new usage with what was held added (unknown stays unknown, the held kept) */
static int take_held_usage(int *held, int usage_new) {
  if (usage_new < 0) return usage_new;
  usage_new += *held;
  *held = 0;
  return usage_new;
}

void gc_req_on_event(gc_req_t *r, const char *data, size_t len, int64_t t_ns) {
  r->n_events++;
  if (len == 6 && memcmp(data, "[DONE]", 6) == 0) {
    r->done = 1;
    return;
  }
  json_error_t je;
  json_t *root = json_loadb(data, len, 0, &je);
  if (!json_is_object(root)) {
    gc_req_set_error(r, "bad chunk JSON at event %d: %s", r->n_events, je.text);
    json_decref(root);
    return;
  }
  json_t *err = json_object_get(root, "error");
  if (err && !json_is_null(err)) {
    char msg[400];
    error_message(err, msg, sizeof msg);
    gc_req_set_error(r, "stream error: %s", msg);
  }
  int usage_new = -1, usage_new_r = -1;
  json_t *usage = json_object_get(root, "usage");
  if (json_is_object(usage)) {
    r->usage_chunks++;
    int pt = json_int(usage, "prompt_tokens"), ct = json_int(usage, "completion_tokens");
    if (pt >= 0) r->prompt_tokens = pt;
    int cached = json_int(json_object_get(usage, "prompt_tokens_details"), "cached_tokens");
    if (cached >= 0) r->cached_tokens = cached;
    int rt = json_int(json_object_get(usage, "completion_tokens_details"), "reasoning_tokens");
    if (ct >= 0) {
      usage_new = ct - r->last_usage_completion;
      r->last_usage_completion = ct;
      r->completion_tokens = ct;
    }
    if (rt >= 0) {
      usage_new_r = rt - r->last_usage_reasoning;
      r->last_usage_reasoning = rt;
      r->reasoning_tokens_srv = rt;
    }
  }
  json_t *choices = json_object_get(root, "choices");
  json_t *ch = json_array_get(choices, 0);
  int kinds = 0, has_content = 0;
  if (json_is_object(ch)) {
    json_t *delta = json_object_get(ch, "delta");
    size_t n;
    const char *t;
    if (json_is_object(delta)) {
      if ((t = str_field(delta, "content", &n))) {
        kinds |= GC_CK_CONTENT;
        has_content = 1;
        on_text(r, GC_CK_CONTENT, t, n);
      }
      /* Servers send `reasoning_content` (DeepSeek, older vLLM), `reasoning` (newer vLLM,
       * OpenRouter) or both with the same text: count the piece once. */
      const char *rc = NULL, *rs = NULL;
      size_t nrc = 0, nrs = 0;
      rc = str_field(delta, "reasoning_content", &nrc);
      rs = str_field(delta, "reasoning", &nrs);
      if (rc || rs) {
        kinds |= GC_CK_REASONING;
        on_text(r, GC_CK_REASONING, rc ? rc : rs, rc ? nrc : nrs);
        if (rc && rs && (nrc != nrs || memcmp(rc, rs, nrc) != 0))
          on_text(r, GC_CK_REASONING, rs, nrs); /* different texts: keep both */
      }
      json_t *tc = json_object_get(delta, "tool_calls");
      if (json_is_array(tc) && json_array_size(tc) > 0) {
        kinds |= GC_CK_TOOL;
        if (r->keep_text) on_tool_deltas(r, tc);
      }
    } else if ((t = str_field(ch, "text", &n))) { /* /v1/completions */
      kinds |= GC_CK_CONTENT;
      has_content = 1;
      on_text(r, GC_CK_CONTENT, t, n);
    }
    json_t *fr = json_object_get(ch, "finish_reason");
    if (json_is_string(fr)) snprintf(r->finish_reason, sizeof r->finish_reason, "%s", json_string_value(fr));
  }
  /* A server that holds a token's text back (a partial UTF-8 character, a possible stop string)
   * may still send an event for it with its usage but no text: that token shows up with the
   * next token chunk, whose interval then covers both. */
  if (!kinds) {
    hold_usage(&r->held_usage, usage_new);
    hold_usage(&r->held_usage_reasoning, usage_new_r);
  } else {
    usage_new = take_held_usage(&r->held_usage, usage_new);
    usage_new_r = take_held_usage(&r->held_usage_reasoning, usage_new_r);
    if (r->n_chunks == r->cap_chunks) {
      int cap = r->cap_chunks ? r->cap_chunks * 2 : 64;
      gc_chunk_t *nc = realloc(r->chunks, (size_t)cap * sizeof *nc);
      if (!nc) {
        gc_req_set_error(r, "out of memory recording chunks");
        json_decref(root);
        return;
      }
      r->chunks = nc;
      r->cap_chunks = cap;
    }
    r->chunks[r->n_chunks++] = (gc_chunk_t){t_ns, kinds, usage_new, usage_new_r};
    if (!r->t_first_token_ns) r->t_first_token_ns = t_ns;
    if (has_content && !r->t_first_content_ns) r->t_first_content_ns = t_ns;
    if (kinds & GC_CK_CONTENT) r->content_chunks++;
    if (kinds & GC_CK_REASONING) r->reasoning_chunks++;
    if (kinds & GC_CK_TOOL) r->tool_chunks++;
  }
  json_decref(root);
}

static int cmp_dbl(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

typedef struct { double v, w; } vw_t;
static int cmp_vw(const void *a, const void *b) {
  double x = ((const vw_t *)a)->v, y = ((const vw_t *)b)->v;
  return (x > y) - (x < y);
}

/* A malloc'd copy of (v, w) sorted by value (w NULL = all 1) and its total weight *tot; NULL on
 * OOM. n > 0. */
static vw_t *sorted_vw(const double *v, const double *w, int n, double *tot) {
  vw_t *a = malloc((size_t)n * sizeof *a);
  if (!a) return NULL;
  *tot = 0;
  for (int i = 0; i < n; i++) {
    a[i].v = v[i];
    a[i].w = w ? w[i] : 1.0;
    *tot += a[i].w;
  }
  qsort(a, (size_t)n, sizeof *a, cmp_vw);
  return a;
}

double gc_wmedian(const double *v, const double *w, int n) {
  if (n <= 0) return -1;
  double tot;
  vw_t *a = sorted_vw(v, w, n, &tot);
  if (!a) return -1;
  double half = tot / 2, cum = 0, res = a[n - 1].v;
  for (int i = 0; i < n; i++) {
    cum += a[i].w;
    if (cum >= half - 1e-9 * tot) {
      res = a[i].v;
      if (cum <= half + 1e-9 * tot && i + 1 < n) res = (a[i].v + a[i + 1].v) / 2;
      break;
    }
  }
  free(a);
  return res;
}

double gc_wpercentile(const double *v, const double *w, int n, double p) {
  if (n <= 0) return -1;
  double tot;
  vw_t *a = sorted_vw(v, w, n, &tot);
  if (!a) return -1;
  double want = p / 100.0 * tot, cum = 0, res = a[n - 1].v;
  for (int i = 0; i < n; i++) {
    cum += a[i].w;
    if (cum >= want - 1e-9 * tot && a[i].w > 0) {
      res = a[i].v;
      break;
    }
  }
  free(a);
  return res;
}

double gc_percentile(const double *v, int n, double p) {
  if (n <= 0) return -1;
  double *a = malloc((size_t)n * sizeof *a);
  if (!a) return -1;
  memcpy(a, v, (size_t)n * sizeof *a);
  qsort(a, (size_t)n, sizeof *a, cmp_dbl);
  double pos = p / 100.0 * (n - 1);
  int lo = (int)pos;
  if (lo >= n - 1) lo = n - 1;
  double frac = pos - lo, res = a[lo];
  if (lo + 1 < n) res += frac * (a[lo + 1] - a[lo]);
  free(a);
  return res;
}

static void parse_error_body(gc_req_t *r) {
  char msg[400] = "";
  json_t *root = r->body ? json_loadb(r->body, r->body_len, 0, NULL) : NULL;
  json_t *err = json_object_get(root, "error");
  if (err)
    error_message(err, msg, sizeof msg);
  else if (r->body)
    snprintf(msg, sizeof msg, "%.300s", r->body);
  json_decref(root);
  gc_req_set_error(r, "HTTP %ld: %s", r->http_status, msg[0] ? msg : "(empty body)");
}

void gc_req_finish(gc_req_t *r, int64_t t_end_ns) {
  r->t_end_ns = t_end_ns;
  if (r->http_status >= 300) parse_error_body(r);
  else if (!r->done) gc_req_set_error(r, "stream closed without [DONE] after %d events", r->n_events);
  r->e2e_ms = (double)(t_end_ns - r->t_start_ns) / 1e6;
  r->ttft_ms = r->t_first_token_ns ? (double)(r->t_first_token_ns - r->t_start_ns) / 1e6 : -1;
  r->ttfc_ms = r->t_first_content_ns ? (double)(r->t_first_content_ns - r->t_start_ns) / 1e6 : -1;

  int n = r->n_chunks;
  int continuous = n > 0;
  for (int i = 0; i < n; i++)
    if (r->chunks[i].usage_new < 0) continuous = 0;
  r->tokens_from_usage = r->completion_tokens >= 0;
  r->out_tokens = r->tokens_from_usage ? r->completion_tokens : n;

  /* reasoning / content split */
  int mixed = 0;
  for (int i = 0; i < n; i++)
    if ((r->chunks[i].kinds & GC_CK_REASONING) && (r->chunks[i].kinds & ~GC_CK_REASONING)) mixed = 1;
  if (r->reasoning_tokens_srv >= 0) {
    r->reasoning_tokens = r->reasoning_tokens_srv;
  } else if (r->reasoning_chunks == 0) {
    r->reasoning_tokens = 0;
  } else if (r->reasoning_chunks == n && !mixed) {
    r->reasoning_tokens = r->out_tokens;
  } else if (continuous && !mixed) {
    int s = 0;
    for (int i = 0; i < n; i++)
      if (r->chunks[i].kinds == GC_CK_REASONING) s += r->chunks[i].usage_new;
    r->reasoning_tokens = s;
  } else {
    r->reasoning_tokens = (int)((double)r->out_tokens * r->reasoning_chunks / n + 0.5);
    r->reasoning_estimated = 1;
  }
  if (r->reasoning_tokens > r->out_tokens) r->reasoning_tokens = r->out_tokens;
  r->content_tokens = r->out_tokens - r->reasoning_tokens;

  /* per-token intervals: chunk i (i >= 1) carried k_i tokens over dt_i since the previous
   * timing point; each of its tokens took dt_i / k_i. */
  free(r->ival_ms);
  free(r->ival_w);
  r->ival_ms = r->ival_w = NULL;
  r->n_ival = 0;
  if (n >= 2) {
    r->ival_ms = malloc((size_t)n * sizeof(double));
    r->ival_w = malloc((size_t)n * sizeof(double));
    if (!r->ival_ms || !r->ival_w) return;
    double k_avg = (double)r->out_tokens / n;
    int64_t prev = r->chunks[0].t_ns;
    for (int i = 1; i < n; i++) {
      double k = continuous ? (double)r->chunks[i].usage_new : k_avg;
      if (k <= 0) continue; /* no new token: its time folds into the next chunk's interval */
      r->ival_ms[r->n_ival] = (double)(r->chunks[i].t_ns - prev) / 1e6 / k;
      r->ival_w[r->n_ival] = k;
      r->n_ival++;
      prev = r->chunks[i].t_ns;
    }
    r->itl_median_ms = gc_wmedian(r->ival_ms, r->ival_w, r->n_ival);
    r->itl_p99_ms = gc_wpercentile(r->ival_ms, r->ival_w, r->n_ival, 99);
  }
  /* TPOT (vLLM's definition): the time after the first token over the tokens after it */
  if (r->ttft_ms >= 0 && r->out_tokens >= 2) r->tpot_ms = (r->e2e_ms - r->ttft_ms) / (r->out_tokens - 1);
}
