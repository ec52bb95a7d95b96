/* engine/chat/chat_parse.c — streaming parser of Qwen model output (see chat_parse.h).
 *
 * Input goes through a UTF-8 sanitiser into a byte queue; one state machine consumes the
 * queue a byte at a time. Every decision depends only on the bytes seen, never on where the
 * pieces were split, and whatever might still turn out to be markup is held in the state
 * (a partial marker, pending newlines, an unbegun tool call) until it is resolved. */
#include "engine/chat/chat_parse.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/strbuf.h"
#include "common/utf8.h"
#include "engine/chat/chat.h"

#define TC_MAX_UNBEGUN (64 * 1024) /* an unbegun tool call longer than this is content */
#define TC_MAX_NAME 256
#define JV_MAX_DEPTH 64

static const char TC_OPEN[] = "<tool_call>";
static const char TC_CLOSE[] = "</tool_call>";
static const char THINK_OPEN[] = "<think>";
static const char THINK_CLOSE[] = "</think>";
static const char FN_OPEN[] = "<function=";
static const char FN_CLOSE[] = "</function>";
static const char PARAM_OPEN[] = "<parameter=";
static const char PARAM_CLOSE[] = "</parameter>";

/* ---------------------------------------------------------------- JSON prefix validator */

enum {
  JV_VALUE, JV_STR, JV_ESC, JV_U, JV_NUM_MINUS, JV_NUM_ZERO, JV_NUM_INT, JV_NUM_DOT,
  JV_NUM_FRAC, JV_NUM_E, JV_NUM_ESIGN, JV_NUM_EXP, JV_LIT, JV_AFTER, JV_KEY, JV_COLON,
  JV_ARR0, JV_OBJ0, JV_END
};
enum { JV_OK, JV_DONE, JV_DONE_NOCONSUME, JV_ERR };

typedef struct jv {
  char stack[JV_MAX_DEPTH];
  int depth, st, ucount, lit_i;
  const char *lit;
  bool in_key;
} jv_t;

static void jv_init(jv_t *v) { memset(v, 0, sizeof *v); v->st = JV_VALUE; }
static bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
static bool is_digit(char c) { return c >= '0' && c <= '9'; }
static bool is_hex(char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

static int jv_value_end(jv_t *v) {
  if (v->depth == 0) {
    v->st = JV_END;
    return JV_DONE;
  }
  v->st = JV_AFTER;
  return JV_OK;
}

static bool jv_num_can_end(int st) {
  return st == JV_NUM_ZERO || st == JV_NUM_INT || st == JV_NUM_FRAC || st == JV_NUM_EXP;
}

/* True when the bytes fed so far form one complete JSON value (plus trailing blanks). */
static bool jv_complete(const jv_t *v) {
  return v->st == JV_END || (v->depth == 0 && jv_num_can_end(v->st));
}

static int jv_feed(jv_t *v, char c) {
  switch (v->st) {
    case JV_VALUE:
      if (is_ws(c)) return JV_OK;
      if (c == '{' || c == '[') {
        if (v->depth >= JV_MAX_DEPTH) return JV_ERR;
        v->stack[v->depth++] = c;
        v->st = c == '{' ? JV_OBJ0 : JV_ARR0;
        return JV_OK;
      }
      if (c == '"') { v->st = JV_STR; v->in_key = false; return JV_OK; }
      if (c == '-') { v->st = JV_NUM_MINUS; return JV_OK; }
      if (c == '0') { v->st = JV_NUM_ZERO; return JV_OK; }
      if (c >= '1' && c <= '9') { v->st = JV_NUM_INT; return JV_OK; }
      if (c == 't' || c == 'f' || c == 'n') {
        v->lit = c == 't' ? "true" : c == 'f' ? "false" : "null";
        v->lit_i = 1;
        v->st = JV_LIT;
        return JV_OK;
      }
      return JV_ERR;
    case JV_STR:
      if (c == '"') {
        if (v->in_key) { v->in_key = false; v->st = JV_COLON; return JV_OK; }
        return jv_value_end(v);
      }
      if (c == '\\') { v->st = JV_ESC; return JV_OK; }
      if ((unsigned char)c < 0x20) return JV_ERR;
      return JV_OK;
    case JV_ESC:
      if (c == 'u') { v->st = JV_U; v->ucount = 0; return JV_OK; }
      if (strchr("\"\\/bfnrt", c) && c) { v->st = JV_STR; return JV_OK; }
      return JV_ERR;
    case JV_U:
      if (!is_hex(c)) return JV_ERR;
      if (++v->ucount == 4) v->st = JV_STR;
      return JV_OK;
    case JV_NUM_MINUS:
      if (c == '0') { v->st = JV_NUM_ZERO; return JV_OK; }
      if (c >= '1' && c <= '9') { v->st = JV_NUM_INT; return JV_OK; }
      return JV_ERR;
    case JV_NUM_ZERO:
    case JV_NUM_INT:
    case JV_NUM_FRAC:
    case JV_NUM_EXP:
      if (is_digit(c) && v->st != JV_NUM_ZERO) return JV_OK;
      if (c == '.' && (v->st == JV_NUM_ZERO || v->st == JV_NUM_INT)) { v->st = JV_NUM_DOT; return JV_OK; }
      if ((c == 'e' || c == 'E') && v->st != JV_NUM_EXP) { v->st = JV_NUM_E; return JV_OK; }
      /* The number ended before c. */
      if (v->depth == 0) {
        v->st = JV_END;
        return JV_DONE_NOCONSUME;
      }
      v->st = JV_AFTER;
      return jv_feed(v, c);
    case JV_NUM_DOT:
      if (is_digit(c)) { v->st = JV_NUM_FRAC; return JV_OK; }
      return JV_ERR;
    case JV_NUM_E:
      if (c == '+' || c == '-') { v->st = JV_NUM_ESIGN; return JV_OK; }
      if (is_digit(c)) { v->st = JV_NUM_EXP; return JV_OK; }
      return JV_ERR;
    case JV_NUM_ESIGN:
      if (is_digit(c)) { v->st = JV_NUM_EXP; return JV_OK; }
      return JV_ERR;
    case JV_LIT:
      if (c != v->lit[v->lit_i]) return JV_ERR;
      if (v->lit[++v->lit_i] == 0) return jv_value_end(v);
      return JV_OK;
    case JV_AFTER:
      if (is_ws(c)) return JV_OK;
      if (c == ',') { v->st = v->stack[v->depth - 1] == '{' ? JV_KEY : JV_VALUE; return JV_OK; }
      if ((c == '}' && v->stack[v->depth - 1] == '{') || (c == ']' && v->stack[v->depth - 1] == '[')) {
        v->depth--;
        return jv_value_end(v);
      }
      return JV_ERR;
    case JV_KEY:
      if (is_ws(c)) return JV_OK;
      if (c == '"') { v->st = JV_STR; v->in_key = true; return JV_OK; }
      return JV_ERR;
    case JV_OBJ0:
      if (is_ws(c)) return JV_OK;
      if (c == '"') { v->st = JV_STR; v->in_key = true; return JV_OK; }
      if (c == '}') { v->depth--; return jv_value_end(v); }
      return JV_ERR;
    case JV_ARR0:
      if (is_ws(c)) return JV_OK;
      if (c == ']') { v->depth--; return jv_value_end(v); }
      v->st = JV_VALUE;
      return jv_feed(v, c);
    case JV_COLON:
      if (is_ws(c)) return JV_OK;
      if (c == ':') { v->st = JV_VALUE; return JV_OK; }
      return JV_ERR;
    case JV_END:
      return is_ws(c) ? JV_OK : JV_ERR;
  }
  return JV_ERR;
}

/* ---------------------------------------------------------------- parser state */

typedef enum {
  M_START,   /* deciding whether the output opens with <think> */
  M_REASON,
  M_CONTENT,
  M_TC_DETECT, /* after <tool_call>: which format? */
  M_TC_JSON,
  M_TC_XML,
  M_SKIP,    /* after a malformed begun call: drop through </tool_call> */
  M_DONE,
} mode_t_;

typedef enum { // Qwen3 JSON body
  J_OBJ_OPEN, J_KEY_OR_END, J_KEY_NEXT, J_KEY, J_KEY_ESC, J_COLON, J_VAL, J_NAME, J_ARGS,
  J_OTHER, J_AFTER_VAL, J_AFTER_OBJ
} jstate_t;

typedef enum { // Qwen3.5 XML body
  X_OPEN, X_FNAME, X_BETWEEN, X_TAG, X_PNAME, X_PVAL, X_AFTER_FN
} xstate_t;

typedef struct ev_rec {
  chat_event_kind_t kind;
  size_t off, len;      /* text in arena */
  size_t id_off, name_off;
  int tool_index;
  bool malformed;
  int n_tool_calls;
} ev_rec_t;

struct chat_parser {
  chat_parser_opts_t o;
  json_t *tools;

  gt_sb_t in;       /* sanitized input queue */
  size_t in_pos;
  char utf8_hold[4];
  size_t utf8_n;

  mode_t_ mode;
  size_t mk;      /* bytes of the current marker matched (held) */
  gt_sb_t start_held; /* M_START: held leading blanks */
  int r_nl;       /* reasoning: pending newlines */
  bool r_skip_nl;
  int c_nl;       /* content: pending newlines */
  bool c_skip_nl;

  /* current tool call */
  gt_sb_t tc_raw;   /* body bytes since <tool_call> (for the unbegun fallback) */
  int tc_saved_nl;
  bool tc_begun;
  int n_calls;
  jstate_t js;
  gt_sb_t key, name, args_pending, tag, pname, vbuf;
  bool name_done, args_started, args_done;
  jv_t jv;
  xstate_t xs;
  bool first_param, v_started, v_nl, v_str;

  /* output of the current call */
  gt_sb_t arena;
  ev_rec_t *recs;
  size_t n_recs, cap_recs;
  chat_event_t *evs;
  size_t cap_evs;
  bool oom;
};

static void set_oom(chat_parser_t *p) { p->oom = true; }

/* ---------------------------------------------------------------- event output */

static ev_rec_t *new_rec(chat_parser_t *p, chat_event_kind_t kind) {
  if (p->n_recs == p->cap_recs) {
    size_t cap = p->cap_recs ? p->cap_recs * 2 : 16;
    ev_rec_t *r = realloc(p->recs, cap * sizeof *r);
    if (!r) { set_oom(p); return NULL; }
    p->recs = r;
    p->cap_recs = cap;
  }
  ev_rec_t *r = &p->recs[p->n_recs++];
  memset(r, 0, sizeof *r);
  r->kind = kind;
  r->off = p->arena.len;
  r->tool_index = p->n_calls - 1;
  return r;
}

static void emit_text(chat_parser_t *p, chat_event_kind_t kind, const char *s, size_t n) {
  if (n == 0 || p->oom) return;
  ev_rec_t *last = p->n_recs ? &p->recs[p->n_recs - 1] : NULL;
  bool extend = last && last->kind == kind && last->off + last->len == p->arena.len &&
                (kind != CHAT_EV_TOOL_CALL_ARGS || last->tool_index == p->n_calls - 1);
  if (!extend) {
    /* Each text starts after a NUL so that it can be handed out NUL-terminated. */
    if (p->arena.len && gt_sb_add(&p->arena, "", 1)) { set_oom(p); return; }
    last = new_rec(p, kind);
    if (!last) return;
  }
  if (gt_sb_add(&p->arena, s, n)) { set_oom(p); return; }
  last->len += n;
}

static void emit_c(chat_parser_t *p, chat_event_kind_t kind, char c) { emit_text(p, kind, &c, 1); }

static void emit_args(chat_parser_t *p, const char *s, size_t n) {
  emit_text(p, CHAT_EV_TOOL_CALL_ARGS, s, n);
}

/* JSON string body escaping (Python json.dumps style, ensure_ascii=False). */
static void emit_args_escaped(chat_parser_t *p, const char *s, size_t n) {
  size_t run = 0;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    const char *esc = NULL;
    char tmp[8];
    switch (c) {
      case '"': esc = "\\\""; break;
      case '\\': esc = "\\\\"; break;
      case '\n': esc = "\\n"; break;
      case '\r': esc = "\\r"; break;
      case '\t': esc = "\\t"; break;
      case '\b': esc = "\\b"; break;
      case '\f': esc = "\\f"; break;
      default:
        if (c < 0x20) { snprintf(tmp, sizeof tmp, "\\u%04x", c); esc = tmp; }
    }
    if (esc) {
      emit_args(p, s + i - run, run);
      run = 0;
      emit_args(p, esc, strlen(esc));
    } else {
      run++;
    }
  }
  emit_args(p, s + n - run, run);
}

static uint64_t splitmix64(uint64_t *x) {
  uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static void emit_begin(chat_parser_t *p, const char *name, size_t name_len) {
  p->n_calls++;
  static const char alpha[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  char id[5 + 24 + 1] = "call_";
  uint64_t s = p->o.id_seed ^ (0xD1B54A32D192ED03ull * (uint64_t)p->n_calls);
  uint64_t r = 0;
  for (int i = 0; i < 24; i++) {
    if (i % 8 == 0) r = splitmix64(&s);
    id[5 + i] = alpha[r % 62];
    r /= 62;
  }
  id[29] = 0;
  if (p->arena.len && gt_sb_add(&p->arena, "", 1)) { set_oom(p); return; }
  ev_rec_t *rec = new_rec(p, CHAT_EV_TOOL_CALL_BEGIN);
  if (!rec) return;
  rec->id_off = p->arena.len;
  if (gt_sb_add(&p->arena, id, 30)) { set_oom(p); return; }
  rec->name_off = p->arena.len;
  if (gt_sb_add(&p->arena, name, name_len) || gt_sb_add(&p->arena, "", 1)) set_oom(p);
}

static void emit_end_call(chat_parser_t *p, bool malformed) {
  ev_rec_t *r = new_rec(p, CHAT_EV_TOOL_CALL_END);
  if (r) r->malformed = malformed;
}

/* ---------------------------------------------------------------- input queue */

/* Puts s[0..n) in front of the unprocessed input. */
static void requeue(chat_parser_t *p, const char *s, size_t n) {
  if (n == 0) return;
  size_t rest = p->in.len - p->in_pos;
  gt_sb_t nb = {0};
  if (gt_sb_add(&nb, s, n) || gt_sb_add(&nb, p->in.p + p->in_pos, rest)) {
    free(nb.p);
    set_oom(p);
    return;
  }
  free(p->in.p);
  p->in = nb;
  p->in_pos = 0;
}

/* Appends sanitized bytes (complete UTF-8; invalid bytes become U+FFFD). With final, an
 * incomplete trailing sequence is replaced too. */
static void sanitize_in(chat_parser_t *p, const char *text, size_t n, bool final) {
  gt_sb_t t = {0};
  if (gt_sb_add(&t, p->utf8_hold, p->utf8_n) || gt_sb_add(&t, text, n)) {
    free(t.p);
    set_oom(p);
    return;
  }
  p->utf8_n = 0;
  size_t done = final ? t.len : gt_utf8_complete_len(t.p, t.len);
  size_t i = 0;
  while (i < done) {
    size_t j = i;
    while (j < done && gt_utf8_valid(t.p + j, 1)) j++; /* ASCII run */
    if (j > i && gt_sb_add(&p->in, t.p + i, j - i)) { set_oom(p); break; }
    i = j;
    if (i >= done) break;
    size_t k;
    for (k = 2; k <= 4 && i + k <= done; k++)
      if (gt_utf8_valid(t.p + i, k)) break;
    if (k <= 4 && i + k <= done) {
      if (gt_sb_add(&p->in, t.p + i, k)) { set_oom(p); break; }
      i += k;
    } else {
      if (gt_sb_add(&p->in, "\xEF\xBF\xBD", 3)) { set_oom(p); break; }
      i++;
    }
  }
  memcpy(p->utf8_hold, t.p + done, t.len - done);
  p->utf8_n = t.len - done;
  free(t.p);
}

/* ---------------------------------------------------------------- marker matching */

/* 1: c extends the match, 2: marker complete, 0: mismatch (c not consumed). */
static int match_step(const char *lit, size_t *k, char c) {
  if (lit[*k] != c) return 0;
  (*k)++;
  return lit[*k] == 0 ? 2 : 1;
}

/* ---------------------------------------------------------------- content / reasoning */

static void content_char(chat_parser_t *p, char c) {
  if (c == '\n') {
    if (!p->c_skip_nl) p->c_nl++;
    return;
  }
  p->c_skip_nl = false;
  for (; p->c_nl > 0; p->c_nl--) emit_c(p, CHAT_EV_CONTENT, '\n');
  emit_c(p, CHAT_EV_CONTENT, c);
}

static void reason_char(chat_parser_t *p, char c) {
  if (c == '\n') {
    if (!p->r_skip_nl) p->r_nl++;
    return;
  }
  p->r_skip_nl = false;
  for (; p->r_nl > 0; p->r_nl--) emit_c(p, CHAT_EV_REASONING, '\n');
  emit_c(p, CHAT_EV_REASONING, c);
}

/* Gives back the p->mk bytes of lit held as a partial match, as plain characters through emit. */
static void release_held(chat_parser_t *p, const char *lit, void (*emit)(chat_parser_t *, char)) {
  size_t k = p->mk;
  p->mk = 0;
  for (size_t i = 0; i < k; i++) emit(p, lit[i]);
}

static void tc_start(chat_parser_t *p) {
  p->mode = M_TC_DETECT;
  p->tc_raw.len = 0;
  p->tc_saved_nl = p->c_nl;
  p->c_nl = 0;
  p->tc_begun = false;
  p->mk = 0;
}

static void byte_content(chat_parser_t *p, char c) {
  if (p->o.parse_tool_calls) {
    int r = match_step(TC_OPEN, &p->mk, c);
    if (r == 1) return;
    if (r == 2) {
      tc_start(p);
      return;
    }
    if (p->mk) { /* held "<tool_..." was text after all; c may start a new marker */
      release_held(p, TC_OPEN, content_char);
      byte_content(p, c);
      return;
    }
  }
  content_char(p, c);
}

static void byte_reason(chat_parser_t *p, char c) {
  int r = match_step(THINK_CLOSE, &p->mk, c);
  if (r == 1) return;
  if (r == 2) {
    p->mk = 0;
    p->r_nl = 0;
    p->mode = M_CONTENT;
    p->c_skip_nl = true;
    return;
  }
  if (p->mk) {
    release_held(p, THINK_CLOSE, reason_char);
    byte_reason(p, c);
    return;
  }
  reason_char(p, c);
}

static void byte_start(chat_parser_t *p, char c) {
  if (p->mk == 0 && is_ws(c)) {
    if (gt_sb_add(&p->start_held, &c, 1)) set_oom(p);
    return;
  }
  int r = match_step(THINK_OPEN, &p->mk, c);
  if (r == 1) return;
  if (r == 2) {
    p->mk = 0;
    p->start_held.len = 0;
    p->mode = M_REASON;
    p->r_skip_nl = true;
    return;
  }
  /* Not a <think> opening: everything held so far, and c, is content. */
  gt_sb_t t = {0};
  if (gt_sb_add(&t, p->start_held.p ? p->start_held.p : "", p->start_held.len) ||
      gt_sb_add(&t, THINK_OPEN, p->mk) || gt_sb_add(&t, &c, 1)) {
    free(t.p);
    set_oom(p);
    return;
  }
  p->start_held.len = 0;
  p->mk = 0;
  p->mode = M_CONTENT;
  requeue(p, t.p, t.len);
  free(t.p);
}

/* ---------------------------------------------------------------- tool calls */

/* The call has not begun: "<tool_call>" and its body are content after all. */
static void tc_fallback(chat_parser_t *p) {
  p->mode = M_CONTENT;
  p->mk = 0;
  p->c_nl = p->tc_saved_nl;
  for (const char *s = TC_OPEN; *s; s++) content_char(p, *s);
  requeue(p, p->tc_raw.p ? p->tc_raw.p : "", p->tc_raw.len);
  p->tc_raw.len = 0;
}

/* Begun call broke: end it as malformed, drop the rest through </tool_call>. */
static void tc_malformed(chat_parser_t *p) {
  emit_end_call(p, true);
  p->mode = M_SKIP;
  p->mk = 0;
}

static void tc_fail(chat_parser_t *p, char c) {
  if (!p->tc_begun) {
    tc_fallback(p);
  } else {
    tc_malformed(p);
    /* c may open </tool_call> (e.g. a missing closing brace). */
    int r = match_step(TC_CLOSE, &p->mk, c);
    (void)r;
  }
}

static void tc_done(chat_parser_t *p) {
  emit_end_call(p, false);
  p->mode = M_CONTENT;
  p->c_skip_nl = true;
  p->mk = 0;
}

static void tc_begin(chat_parser_t *p, const char *name, size_t n) {
  p->tc_begun = true;
  p->tc_saved_nl = 0; /* newlines before <tool_call> were formatting */
  emit_begin(p, name, n);
}

static void json_try_begin(chat_parser_t *p) {
  if (p->tc_begun || !p->name_done || !p->args_started) return;
  tc_begin(p, p->name.p, p->name.len);
  emit_args(p, p->args_pending.p, p->args_pending.len);
  p->args_pending.len = 0;
}

static bool key_is(const gt_sb_t *k, const char *s) {
  return k->len == strlen(s) && memcmp(k->p, s, k->len) == 0;
}

static void byte_json(chat_parser_t *p, char c) {
  switch (p->js) {
    case J_OBJ_OPEN:
      if (c == '{') p->js = J_KEY_OR_END;
      else if (!is_ws(c)) tc_fail(p, c);
      return;
    case J_KEY_OR_END:
    case J_KEY_NEXT:
      if (is_ws(c)) return;
      if (c == '"') {
        p->key.len = 0;
        p->js = J_KEY;
      } else if (c == '}' && p->js == J_KEY_OR_END) {
        tc_fail(p, c); /* {} has neither name nor arguments */
      } else {
        tc_fail(p, c);
      }
      return;
    case J_KEY:
      if (c == '"') { p->js = J_COLON; return; }
      if ((unsigned char)c < 0x20) { tc_fail(p, c); return; }
      if (c == '\\') p->js = J_KEY_ESC;
      if (p->key.len < 64 && gt_sb_add(&p->key, &c, 1)) set_oom(p);
      return;
    case J_KEY_ESC:
      p->js = J_KEY;
      if (p->key.len < 64 && gt_sb_add(&p->key, &c, 1)) set_oom(p);
      return;
    case J_COLON:
      if (c == ':') p->js = J_VAL;
      else if (!is_ws(c)) tc_fail(p, c);
      return;
    case J_VAL:
      if (is_ws(c)) return;
      if (key_is(&p->key, "name")) {
        if (c != '"' || p->name_done) { tc_fail(p, c); return; }
        p->name.len = 0;
        p->js = J_NAME;
      } else if (key_is(&p->key, "arguments")) {
        if (c != '{' || p->args_started) { tc_fail(p, c); return; }
        jv_init(&p->jv);
        jv_feed(&p->jv, c);
        p->args_started = true;
        p->js = J_ARGS;
        if (gt_sb_add(&p->args_pending, &c, 1)) set_oom(p);
        json_try_begin(p);
      } else {
        jv_init(&p->jv);
        int r = jv_feed(&p->jv, c);
        if (r == JV_ERR) tc_fail(p, c);
        else p->js = r == JV_DONE ? J_AFTER_VAL : J_OTHER;
      }
      return;
    case J_NAME:
      if (c == '"') {
        if (p->name.len == 0) { tc_fail(p, c); return; }
        p->name_done = true;
        p->js = J_AFTER_VAL;
        json_try_begin(p);
        return;
      }
      if (c == '\\' || (unsigned char)c < 0x20 || p->name.len >= TC_MAX_NAME) { tc_fail(p, c); return; }
      if (gt_sb_add(&p->name, &c, 1)) set_oom(p);
      return;
    case J_ARGS: {
      int r = jv_feed(&p->jv, c);
      if (r == JV_ERR) { tc_fail(p, c); return; }
      if (p->tc_begun) emit_args(p, &c, 1);
      else if (gt_sb_add(&p->args_pending, &c, 1)) set_oom(p);
      if (r == JV_DONE) {
        p->args_done = true;
        p->js = J_AFTER_VAL;
      }
      return;
    }
    case J_OTHER: {
      int r = jv_feed(&p->jv, c);
      if (r == JV_ERR) tc_fail(p, c);
      else if (r == JV_DONE) p->js = J_AFTER_VAL;
      else if (r == JV_DONE_NOCONSUME) {
        p->js = J_AFTER_VAL;
        byte_json(p, c);
      }
      return;
    }
    case J_AFTER_VAL:
      if (is_ws(c)) return;
      if (c == ',') p->js = J_KEY_NEXT;
      else if (c == '}' && p->tc_begun && p->args_done) { p->js = J_AFTER_OBJ; p->mk = 0; }
      else tc_fail(p, c);
      return;
    case J_AFTER_OBJ: {
      if (p->mk == 0 && is_ws(c)) return;
      int r = match_step(TC_CLOSE, &p->mk, c);
      if (r == 2) tc_done(p);
      else if (r == 0) tc_fail(p, c);
      return;
    }
  }
}

/* Does opts.tools_json declare parameter `param` of function `fn` as "type": "string"? */
static bool param_is_string(chat_parser_t *p, const gt_sb_t *fn, const gt_sb_t *param) {
  if (!p->tools) return false;
  size_t i;
  json_t *t;
  json_array_foreach(p->tools, i, t) {
    json_t *f = json_object_get(t, "function");
    if (!f) f = t;
    json_t *nm = json_object_get(f, "name");
    if (!json_is_string(nm) || json_string_length(nm) != fn->len ||
        memcmp(json_string_value(nm), fn->p, fn->len) != 0)
      continue;
    json_t *props = json_object_get(json_object_get(f, "parameters"), "properties");
    char key[TC_MAX_NAME + 1];
    memcpy(key, param->p, param->len);
    key[param->len] = 0;
    json_t *ty = json_object_get(json_object_get(props, key), "type");
    return json_is_string(ty) && strcmp(json_string_value(ty), "string") == 0;
  }
  return false;
}

/* A byte of a parameter value (after marker handling). */
static void value_emit(chat_parser_t *p, char c) {
  if (p->v_str) {
    emit_args_escaped(p, &c, 1);
    return;
  }
  if (gt_sb_add(&p->vbuf, &c, 1)) { set_oom(p); return; }
  int r = jv_feed(&p->jv, c);
  if (r == JV_DONE_NOCONSUME) r = jv_feed(&p->jv, c);
  if (r == JV_ERR) { /* not JSON: it is a string, stream it from here on */
    p->v_str = true;
    emit_args(p, "\"", 1);
    emit_args_escaped(p, p->vbuf.p, p->vbuf.len);
    p->vbuf.len = 0;
  }
}

static void value_char(chat_parser_t *p, char c) {
  if (!p->v_started) {
    p->v_started = true;
    if (c == '\n') return; /* one leading newline is formatting */
  }
  if (p->v_nl) {
    p->v_nl = false;
    value_emit(p, '\n');
  }
  if (c == '\n') {
    p->v_nl = true; /* held: one trailing newline is formatting */
    return;
  }
  value_emit(p, c);
}

static void value_close(chat_parser_t *p) {
  p->v_nl = false;
  if (p->v_str) {
    emit_args(p, "\"", 1);
  } else {
    size_t a = 0, b = p->vbuf.len;
    while (a < b && is_ws(p->vbuf.p[a])) a++;
    while (b > a && is_ws(p->vbuf.p[b - 1])) b--;
    if (b > a && jv_complete(&p->jv)) {
      emit_args(p, p->vbuf.p + a, b - a);
    } else {
      emit_args(p, "\"", 1);
      emit_args_escaped(p, p->vbuf.p ? p->vbuf.p : "", p->vbuf.len);
      emit_args(p, "\"", 1);
    }
  }
  p->vbuf.len = 0;
  p->first_param = false;
}

static bool name_char_ok(char c) { return c != '\n' && c != '<' && (unsigned char)c >= 0x20; }

static void byte_xml(chat_parser_t *p, char c) {
  switch (p->xs) {
    case X_OPEN: {
      int r = match_step(FN_OPEN, &p->mk, c);
      if (r == 0) tc_fail(p, c);
      else if (r == 2) { p->mk = 0; p->name.len = 0; p->xs = X_FNAME; }
      return;
    }
    case X_FNAME:
      if (c == '>') {
        if (p->name.len == 0) { tc_fail(p, c); return; }
        tc_begin(p, p->name.p, p->name.len);
        emit_args(p, "{", 1);
        p->first_param = true;
        p->xs = X_BETWEEN;
        return;
      }
      if (!name_char_ok(c) || p->name.len >= TC_MAX_NAME) { tc_fail(p, c); return; }
      if (gt_sb_add(&p->name, &c, 1)) set_oom(p);
      return;
    case X_BETWEEN:
      if (is_ws(c)) return;
      if (c != '<') { tc_fail(p, c); return; }
      p->tag.len = 0;
      p->xs = X_TAG;
      /* fall through */
    case X_TAG: {
      if (gt_sb_add(&p->tag, &c, 1)) { set_oom(p); return; }
      size_t n = p->tag.len;
      bool pre_p = n <= strlen(PARAM_OPEN) && memcmp(PARAM_OPEN, p->tag.p, n) == 0;
      bool pre_f = n <= strlen(FN_CLOSE) && memcmp(FN_CLOSE, p->tag.p, n) == 0;
      if (pre_p && n == strlen(PARAM_OPEN)) {
        p->pname.len = 0;
        p->xs = X_PNAME;
      } else if (pre_f && n == strlen(FN_CLOSE)) {
        emit_args(p, "}", 1);
        p->xs = X_AFTER_FN;
        p->mk = 0;
      } else if (!pre_p && !pre_f) {
        tc_fail(p, c);
      }
      return;
    }
    case X_PNAME:
      if (c == '>') {
        if (p->pname.len == 0) { tc_fail(p, c); return; }
        if (!p->first_param) emit_args(p, ", ", 2);
        emit_args(p, "\"", 1);
        emit_args_escaped(p, p->pname.p, p->pname.len);
        emit_args(p, "\": ", 3);
        p->v_str = param_is_string(p, &p->name, &p->pname);
        if (p->v_str) emit_args(p, "\"", 1);
        p->v_started = false;
        p->v_nl = false;
        p->vbuf.len = 0;
        jv_init(&p->jv);
        p->mk = 0;
        p->xs = X_PVAL;
        return;
      }
      if (!name_char_ok(c) || c == '>' || p->pname.len >= TC_MAX_NAME) { tc_fail(p, c); return; }
      if (gt_sb_add(&p->pname, &c, 1)) set_oom(p);
      return;
    case X_PVAL: {
      int r = match_step(PARAM_CLOSE, &p->mk, c);
      if (r == 1) return;
      if (r == 2) {
        p->mk = 0;
        value_close(p);
        p->xs = X_BETWEEN;
        return;
      }
      if (p->mk) {
        release_held(p, PARAM_CLOSE, value_char);
        byte_xml(p, c);
        return;
      }
      value_char(p, c);
      return;
    }
    case X_AFTER_FN: {
      if (p->mk == 0 && is_ws(c)) return;
      int r = match_step(TC_CLOSE, &p->mk, c);
      if (r == 2) tc_done(p);
      else if (r == 0) tc_fail(p, c);
      return;
    }
  }
}

static void byte_tool(chat_parser_t *p, char c) {
  if (!p->tc_begun) {
    if (gt_sb_add(&p->tc_raw, &c, 1)) { set_oom(p); return; }
    if (p->tc_raw.len > TC_MAX_UNBEGUN) {
      tc_fallback(p);
      return;
    }
  }
  if (p->mode == M_TC_DETECT) {
    if (is_ws(c)) return;
    p->name.len = p->key.len = p->args_pending.len = 0;
    p->name_done = p->args_started = p->args_done = false;
    p->mk = 0;
    if (c == '{') {
      p->mode = M_TC_JSON;
      p->js = J_OBJ_OPEN;
    } else if (c == '<') {
      p->mode = M_TC_XML;
      p->xs = X_OPEN;
    } else {
      tc_fallback(p);
      return;
    }
  }
  if (p->mode == M_TC_JSON) byte_json(p, c);
  else byte_xml(p, c);
}

static void byte_skip(chat_parser_t *p, char c) {
  int r = match_step(TC_CLOSE, &p->mk, c);
  if (r == 2) {
    p->mk = 0;
    p->mode = M_CONTENT;
    p->c_skip_nl = true;
  } else if (r == 0) {
    p->mk = 0;
    if (c == '<') p->mk = 1;
  }
}

static void process(chat_parser_t *p) {
  while (p->in_pos < p->in.len && !p->oom) {
    char c = p->in.p[p->in_pos++];
    switch (p->mode) {
      case M_START: byte_start(p, c); break;
      case M_REASON: byte_reason(p, c); break;
      case M_CONTENT: byte_content(p, c); break;
      case M_TC_DETECT:
      case M_TC_JSON:
      case M_TC_XML: byte_tool(p, c); break;
      case M_SKIP: byte_skip(p, c); break;
      case M_DONE: break;
    }
  }
  if (p->in_pos == p->in.len) p->in.len = p->in_pos = 0;
}

/* ---------------------------------------------------------------- public API */

int chat_parser_new(const chat_parser_opts_t *opts, chat_parser_t **out, gt_err_t *err) {
  *out = NULL;
  chat_parser_t *p = calloc(1, sizeof *p);
  if (!p) return gt_err_set(err, GT_ENOMEM, "out of memory");
  if (opts) p->o = *opts;
  p->o.tools_json = NULL;
  if (opts && opts->tools_json && *opts->tools_json) {
    json_error_t je;
    p->tools = json_loads(opts->tools_json, 0, &je);
    if (!p->tools) {
      chat_parser_free(p);
      return gt_err_set(err, GT_EINVAL, "chat parser: tools JSON: %s", je.text);
    }
    if (!json_is_array(p->tools)) {
      chat_parser_free(p);
      return gt_err_set(err, GT_EINVAL, "chat parser: tools must be a JSON array");
    }
  }
  p->mode = p->o.starts_in_reasoning ? M_REASON : M_START;
  p->r_skip_nl = p->o.starts_in_reasoning;
  *out = p;
  return GT_OK;
}

void chat_parser_free(chat_parser_t *p) {
  if (!p) return;
  json_decref(p->tools);
  gt_sb_t *bufs[] = {&p->in, &p->start_held, &p->tc_raw, &p->key, &p->name, &p->args_pending,
                   &p->tag, &p->pname, &p->vbuf, &p->arena};
  for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) free(bufs[i]->p);
  free(p->recs);
  free(p->evs);
  free(p);
}

int chat_parser_tool_calls(const chat_parser_t *p) { return p->n_calls; }

static void begin_call(chat_parser_t *p) {
  p->arena.len = 0;
  p->n_recs = 0;
}

/* Turns the records of this call into events with pointers into the arena. */
static int finish_call(chat_parser_t *p, const chat_event_t **evs, size_t *n_evs, gt_err_t *err) {
  *evs = NULL;
  *n_evs = 0;
  if (p->oom) {
    p->mode = M_DONE;
    return gt_err_set(err, GT_ENOMEM, "chat parser: out of memory");
  }
  if (p->n_recs > p->cap_evs) {
    chat_event_t *e = realloc(p->evs, p->n_recs * sizeof *e);
    if (!e) return gt_err_set(err, GT_ENOMEM, "chat parser: out of memory");
    p->evs = e;
    p->cap_evs = p->n_recs;
  }
  for (size_t i = 0; i < p->n_recs; i++) {
    const ev_rec_t *r = &p->recs[i];
    chat_event_t *e = &p->evs[i];
    memset(e, 0, sizeof *e);
    e->kind = r->kind;
    e->tool_index = r->tool_index;
    e->malformed = r->malformed;
    e->n_tool_calls = r->n_tool_calls;
    if (r->kind == CHAT_EV_CONTENT || r->kind == CHAT_EV_REASONING || r->kind == CHAT_EV_TOOL_CALL_ARGS) {
      e->text = p->arena.p + r->off;
      e->len = r->len;
    }
    if (r->kind == CHAT_EV_TOOL_CALL_BEGIN) {
      e->id = p->arena.p + r->id_off;
      e->name = p->arena.p + r->name_off;
    }
  }
  /* Terminate each text (a NUL sits after every record's text in the arena, or at its end). */
  if (gt_sb_add(&p->arena, "", 0)) return gt_err_set(err, GT_ENOMEM, "chat parser: out of memory");
  for (size_t i = 0; i < p->n_recs; i++)
    if (p->evs[i].text) ((char *)p->evs[i].text)[p->evs[i].len] = 0;
  *evs = p->evs;
  *n_evs = p->n_recs;
  return GT_OK;
}

int chat_parser_feed(chat_parser_t *p, const char *text, size_t n, const chat_event_t **evs,
                     size_t *n_evs, gt_err_t *err) {
  *evs = NULL;
  *n_evs = 0;
  if (p->mode == M_DONE) return gt_err_set(err, GT_EINVAL, "chat parser fed after finish");
  if (n && !text) return gt_err_set(err, GT_EINVAL, "chat parser: NULL text");
  begin_call(p);
  sanitize_in(p, text, n, false);
  process(p);
  return finish_call(p, evs, n_evs, err);
}

int chat_parser_finish(chat_parser_t *p, const chat_event_t **evs, size_t *n_evs, gt_err_t *err) {
  *evs = NULL;
  *n_evs = 0;
  if (p->mode == M_DONE) return gt_err_set(err, GT_EINVAL, "chat parser finished twice");
  begin_call(p);
  sanitize_in(p, NULL, 0, true);
  process(p);
  /* Resolve what is held, mode by mode, until nothing is left. */
  for (int guard = 0; guard < 1 << 20 && !p->oom; guard++) {
    if (p->mode == M_START) {
      gt_sb_t t = {0};
      if (gt_sb_add(&t, p->start_held.p ? p->start_held.p : "", p->start_held.len) ||
          gt_sb_add(&t, THINK_OPEN, p->mk)) {
        free(t.p);
        set_oom(p);
        break;
      }
      p->start_held.len = 0;
      p->mk = 0;
      p->mode = M_CONTENT;
      requeue(p, t.p, t.len);
      free(t.p);
      process(p);
      continue;
    }
    if (p->mode == M_TC_DETECT || p->mode == M_TC_JSON || p->mode == M_TC_XML) {
      if (!p->tc_begun) {
        tc_fallback(p);
        process(p);
        continue;
      }
      bool complete = (p->mode == M_TC_JSON && p->js == J_AFTER_OBJ) ||
                      (p->mode == M_TC_XML && p->xs == X_AFTER_FN);
      emit_end_call(p, !complete);
      p->mode = M_CONTENT;
      p->mk = 0;
      p->c_nl = 0;
      break;
    }
    break;
  }
  if (p->mode == M_REASON) {
    release_held(p, THINK_CLOSE, reason_char);
  } else if (p->mode == M_CONTENT) {
    release_held(p, TC_OPEN, content_char);
    if (p->n_calls == 0)
      for (; p->c_nl > 0; p->c_nl--) emit_c(p, CHAT_EV_CONTENT, '\n');
  }
  ev_rec_t *r = new_rec(p, CHAT_EV_END);
  if (r) r->n_tool_calls = p->n_calls;
  p->mode = M_DONE;
  return finish_call(p, evs, n_evs, err);
}
