/* engine/sched/seqout.c — see seqout.h. */
#include "engine/sched/seqout.h"

#include <stdlib.h>
#include <string.h>

#include "common/strbuf.h"
#include "engine/chat/chat_parse.h"
#include "engine/chat/stop.h"

struct seqout {
  const tok_t *tok;
  tok_stream_t ts;
  stop_matcher_t *stop;
  chat_parser_t *parser; /* NULL: all text is content */
  int stopped, finished;
  int include_stop;      /* cfg->include_stop */
  int in_reasoning, reasoning_tokens, tool_calls;
  /* pending delta */
  int32_t *ids; int n_ids, cap_ids;
  gt_sb_t text, reasoning;
  seqout_tool_delta_t *tools; int n_tools, cap_tools;
  gt_sb_t *tool_args;     /* [cap_tools] argument buffers */
  char **tool_strs;     /* tool-call ids / names: [0, n_taken) of the last taken delta (freed at the
                           next take), then those of the pending delta */
  int n_strs, cap_strs, n_taken;
  seqout_logprob_t *lps; int n_lps, cap_lps;
  seqout_delta_t out;
};

static char *dup_str(seqout_t *o, const char *s) {
  if (!s) return NULL;
  if (o->n_strs == o->cap_strs) {
    int cap = o->cap_strs ? o->cap_strs * 2 : 8;
    char **q = realloc(o->tool_strs, sizeof(char *) * (size_t)cap);
    if (!q) return NULL;
    o->tool_strs = q;
    o->cap_strs = cap;
  }
  return o->tool_strs[o->n_strs++] = strdup(s);
}

int seqout_create(const tok_t *tok, const seqout_config_t *cfg, seqout_t **out, gt_err_t *err) {
  seqout_t *o = calloc(1, sizeof *o);
  if (!o) return gt_err_set(err, GT_ENOMEM, "out of memory");
  o->tok = tok;
  tok_stream_init(&o->ts, tok, cfg && cfg->keep_special ? 0 : TOK_SKIP_CONTROL);
  o->include_stop = cfg && cfg->include_stop;
  int rc = stop_matcher_new(cfg ? cfg->stop : NULL, cfg ? (size_t)cfg->n_stop : 0, &o->stop, err);
  if (!rc && cfg && cfg->parse_output) {
    chat_parser_opts_t po = {.starts_in_reasoning = cfg->starts_in_reasoning, .parse_tool_calls = cfg->parse_tool_calls,
                             .id_seed = cfg->id_seed, .tools_json = cfg->tools_json};
    rc = chat_parser_new(&po, &o->parser, err);
    o->in_reasoning = cfg->starts_in_reasoning;
  }
  if (rc) {
    seqout_free(o);
    return rc;
  }
  *out = o;
  return GT_OK;
}

void seqout_free(seqout_t *o) {
  if (!o) return;
  tok_stream_free(&o->ts);
  stop_matcher_free(o->stop);
  chat_parser_free(o->parser);
  free(o->ids);
  free(o->text.p);
  free(o->reasoning.p);
  for (int i = 0; i < o->cap_tools; i++) free(o->tool_args[i].p);
  free(o->tool_args);
  free(o->tools);
  for (int i = 0; i < o->n_strs; i++) free(o->tool_strs[i]);
  free(o->tool_strs);
  free(o->lps);
  free(o);
}

/* Pending tool delta for call `index` (one entry per call per take). */
static seqout_tool_delta_t *tool_delta(seqout_t *o, int index) {
  for (int i = 0; i < o->n_tools; i++)
    if (o->tools[i].index == index) return &o->tools[i];
  if (o->n_tools == o->cap_tools) {
    int cap = o->cap_tools ? o->cap_tools * 2 : 4;
    seqout_tool_delta_t *t = realloc(o->tools, sizeof *t * (size_t)cap);
    gt_sb_t *a = realloc(o->tool_args, sizeof *a * (size_t)cap);
    if (t) o->tools = t;
    if (a) o->tool_args = a;
    if (!t || !a) return NULL;
    for (int i = o->cap_tools; i < cap; i++) o->tool_args[i] = (gt_sb_t){0};
    o->cap_tools = cap;
  }
  seqout_tool_delta_t *d = &o->tools[o->n_tools];
  o->tool_args[o->n_tools].len = 0;
  *d = (seqout_tool_delta_t){.index = index};
  o->n_tools++;
  return d;
}

/* Routes emitted text through the parser (or straight to content); sets *got flags. */
static int route(seqout_t *o, const char *s, size_t n, int final, int *got_content, int *got_reasoning, gt_err_t *err) {
  if (!o->parser) {
    if (n && gt_sb_add(&o->text, s, n)) return gt_err_set(err, GT_ENOMEM, "out of memory");
    *got_content |= n > 0;
    return GT_OK;
  }
  const chat_event_t *evs;
  size_t n_evs;
  int rc = final ? chat_parser_finish(o->parser, &evs, &n_evs, err) : chat_parser_feed(o->parser, s, n, &evs, &n_evs, err);
  if (rc) return rc;
  for (size_t i = 0; i < n_evs; i++) {
    const chat_event_t *e = &evs[i];
    seqout_tool_delta_t *td;
    switch (e->kind) {
      case CHAT_EV_CONTENT:
        if (gt_sb_add(&o->text, e->text, e->len)) return GT_ENOMEM;
        *got_content = 1;
        break;
      case CHAT_EV_REASONING:
        if (gt_sb_add(&o->reasoning, e->text, e->len)) return GT_ENOMEM;
        *got_reasoning = 1;
        break;
      case CHAT_EV_TOOL_CALL_BEGIN:
        if (!(td = tool_delta(o, e->tool_index))) return GT_ENOMEM;
        td->id = dup_str(o, e->id);
        td->name = dup_str(o, e->name);
        o->tool_calls = e->tool_index + 1 > o->tool_calls ? e->tool_index + 1 : o->tool_calls;
        *got_content = 1;
        break;
      case CHAT_EV_TOOL_CALL_ARGS:
        if (!(td = tool_delta(o, e->tool_index))) return GT_ENOMEM;
        if (gt_sb_add(&o->tool_args[td - o->tools], e->text, e->len)) return GT_ENOMEM;
        *got_content = 1;
        break;
      default:
        break;
    }
  }
  return GT_OK;
}

static int add_id(seqout_t *o, int32_t id) {
  if (o->n_ids == o->cap_ids) {
    int cap = o->cap_ids ? o->cap_ids * 2 : 16;
    int32_t *q = realloc(o->ids, sizeof(int32_t) * (size_t)cap);
    if (!q) return -1;
    o->ids = q;
    o->cap_ids = cap;
  }
  o->ids[o->n_ids++] = id;
  return 0;
}

void seqout_push_id(seqout_t *o, int32_t id) { add_id(o, id); }

/* Routes a match's text: what came before the stop string, then (include_stop) the string. */
static int route_stop(seqout_t *o, const stop_result_t *sr, int *got_c, int *got_r, gt_err_t *err) {
  int rc = route(o, sr->emit, sr->emit_len, 0, got_c, got_r, err);
  const char *st = sr->matched && o->include_stop ? stop_matcher_string(o->stop, sr->which) : NULL;
  if (!rc && st) rc = route(o, st, strlen(st), 0, got_c, got_r, err);
  return rc;
}

int seqout_push(seqout_t *o, int32_t id, int check_stop, gt_err_t *err) {
  if (o->finished) return gt_err_set(err, GT_EINVAL, "seqout: push after finish");
  if (add_id(o, id)) return gt_err_set(err, GT_ENOMEM, "out of memory");
  if (o->stopped) return 1;
  const char *t;
  size_t n;
  int rc = tok_stream_push(&o->ts, id, &t, &n, err);
  if (rc) return rc;
  int got_c = 0, got_r = 0;
  stop_result_t sr = {0};
  if (n && !check_stop) { /* before min_tokens: stop strings are not looked for */
    if ((rc = route(o, t, n, 0, &got_c, &got_r, err))) return rc;
  } else if (n) {
    if ((rc = stop_matcher_feed(o->stop, t, n, &sr, err))) return rc;
    if ((rc = route_stop(o, &sr, &got_c, &got_r, err))) return rc;
  }
  if (got_r && !got_c) o->in_reasoning = 1;
  if (got_c) o->in_reasoning = 0;
  if (got_r || (!got_c && o->in_reasoning)) o->reasoning_tokens++;
  if (sr.matched) {
    o->stopped = 1;
    return 1;
  }
  return 0;
}

void seqout_add_logprob(seqout_t *o, const seqout_logprob_t *lp) {
  if (o->n_lps == o->cap_lps) {
    int cap = o->cap_lps ? o->cap_lps * 2 : 8;
    seqout_logprob_t *q = realloc(o->lps, sizeof *q * (size_t)cap);
    if (!q) return;
    o->lps = q;
    o->cap_lps = cap;
  }
  o->lps[o->n_lps++] = *lp;
}

int seqout_finish(seqout_t *o, gt_err_t *err) {
  if (o->finished) return GT_OK;
  o->finished = 1;
  int got_c = 0, got_r = 0, rc;
  const char *t;
  size_t n;
  stop_result_t sr = {0};
  if (!o->stopped) {
    if ((rc = tok_stream_flush(&o->ts, &t, &n, err))) return rc;
    if (n && (rc = stop_matcher_feed(o->stop, t, n, &sr, err))) return rc;
    if (n && (rc = route_stop(o, &sr, &got_c, &got_r, err))) return rc;
    if (!sr.matched) {
      if ((rc = stop_matcher_flush(o->stop, &sr, err))) return rc;
      if ((rc = route(o, sr.emit, sr.emit_len, 0, &got_c, &got_r, err))) return rc;
    }
  }
  if (o->parser) return route(o, NULL, 0, 1, &got_c, &got_r, err);
  return GT_OK;
}

int seqout_delta_empty(const seqout_delta_t *d) {
  return d->n_ids == 0 && d->text_len == 0 && d->reasoning_len == 0 && d->n_tools == 0 && d->n_lps == 0;
}

const seqout_delta_t *seqout_take(seqout_t *o) {
  for (int i = 0; i < o->n_tools; i++) {
    o->tools[i].args = o->tool_args[i].p ? o->tool_args[i].p : "";
    o->tools[i].args_len = o->tool_args[i].len;
  }
  o->out = (seqout_delta_t){.ids = o->ids, .n_ids = o->n_ids, .text = o->text.p ? o->text.p : "",
                            .text_len = o->text.len, .reasoning = o->reasoning.p ? o->reasoning.p : "",
                            .reasoning_len = o->reasoning.len, .tools = o->tools, .n_tools = o->n_tools,
                            .lps = o->lps, .n_lps = o->n_lps};
  /* reset for the next step; buffers stay allocated and valid until the next push */
  o->n_ids = 0;
  o->text.len = 0;
  o->reasoning.len = 0;
  o->n_tools = 0;
  o->n_lps = 0;
  /* the previous delta's ids and names are no longer used; this one's live until the next take */
  if (o->n_taken > 0) {
    for (int i = 0; i < o->n_taken; i++) free(o->tool_strs[i]);
    memmove(o->tool_strs, o->tool_strs + o->n_taken, sizeof(char *) * (size_t)(o->n_strs - o->n_taken));
    o->n_strs -= o->n_taken;
  }
  o->n_taken = o->n_strs;
  return &o->out;
}

int seqout_reasoning_tokens(const seqout_t *o) { return o->reasoning_tokens; }
int seqout_tool_calls(const seqout_t *o) { return o->tool_calls; }
