/* engine/chat/chat.c — Qwen3 / Qwen3.5 chat templates rendered natively (see chat.h).
 * The Jinja semantics reproduced here are quoted next to the code that implements them.
 * The other files of the module are listed in chat_internal.h. */
#include "engine/chat/chat.h"

#include <stdlib.h>
#include <string.h>

#include "engine/chat/chat_internal.h"

/* ---------------------------------------------------------------- Python strings */

/* Python str.isspace() for a code point (what Jinja's |trim strips). */
static bool py_isspace(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
         c == 0x202F || c == 0x205F || c == 0x3000;
}

/* A view of bytes (not NUL-terminated). */
typedef struct sv {
  const char *p;
  size_t n;
} sv_t;

static sv_t sv_of(const char *s) {
  sv_t v = {s ? s : "", s ? strlen(s) : 0};
  return v;
}

/* Python s.strip() (all Unicode whitespace); s must be valid UTF-8. */
static sv_t py_strip(sv_t s) {
  const unsigned char *u = (const unsigned char *)s.p;
  size_t a = 0, b = s.n;
  uint32_t cp;
  while (a < b) {
    size_t adv;
    const int k = gt_utf8_next(u + a, b - a, &cp, &adv);
    if (k <= 0 || !py_isspace(cp)) break;
    a += (size_t)k;
  }
  while (b > a) {
    size_t st = b - 1;
    while (st > a && (u[st] & 0xC0) == 0x80) st--;
    size_t adv;
    const int k = gt_utf8_next(u + st, b - st, &cp, &adv);
    if (k <= 0 || (size_t)k != b - st || !py_isspace(cp)) break;
    b = st;
  }
  sv_t r = {s.p + a, b - a};
  return r;
}

static sv_t lstrip_nl(sv_t s) {
  while (s.n && s.p[0] == '\n') { s.p++; s.n--; }
  return s;
}
static sv_t rstrip_nl(sv_t s) {
  while (s.n && s.p[s.n - 1] == '\n') s.n--;
  return s;
}

static const char *sv_find(sv_t s, const char *needle) {
  size_t m = strlen(needle);
  if (m > s.n) return NULL;
  for (size_t i = 0; i + m <= s.n; i++)
    if (memcmp(s.p + i, needle, m) == 0) return s.p + i;
  return NULL;
}
static const char *sv_rfind(sv_t s, const char *needle) {
  size_t m = strlen(needle);
  if (m > s.n) return NULL;
  for (size_t i = s.n - m + 1; i-- > 0;)
    if (memcmp(s.p + i, needle, m) == 0) return s.p + i;
  return NULL;
}
static bool sv_starts(sv_t s, const char *p) {
  size_t m = strlen(p);
  return s.n >= m && memcmp(s.p, p, m) == 0;
}
static bool sv_ends(sv_t s, const char *p) {
  size_t m = strlen(p);
  return s.n >= m && memcmp(s.p + s.n - m, p, m) == 0;
}
static void sb_sv(gt_sb_t *b, sv_t s) { gt_sb_add(b, s.p, s.n); }

/* Python: s.split('</think>')[-1].lstrip('\n') and
 *         s.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') */
static void split_think(sv_t s, sv_t *content, sv_t *reasoning) {
  const char *first = sv_find(s, "</think>");
  const char *last = sv_rfind(s, "</think>");
  sv_t after = {last + 8, (size_t)(s.p + s.n - (last + 8))};
  *content = lstrip_nl(after);
  sv_t before = {s.p, (size_t)(first - s.p)};
  before = rstrip_nl(before);
  const char *open = sv_rfind(before, "<think>");
  if (open) {
    before.n = (size_t)(before.p + before.n - (open + 7));
    before.p = open + 7;
  }
  *reasoning = lstrip_nl(before);
}

/* ---------------------------------------------------------------- validation */

static int check_text(const char *s, size_t idx, const char *field, gt_err_t *err) {
  if (s && !gt_utf8_valid(s, strlen(s)))
    return gt_err_set(err, GT_EINVAL, "messages[%zu].%s is not valid UTF-8", idx, field);
  return GT_OK;
}

static bool bad_name_char(unsigned char c) {
  return c < 0x20 || c == 0x7F || c == '"' || c == '\\' || c == '<' || c == '>';
}

/* Validates every message; parses tool-call arguments into args[] (flattened over messages). */
static int validate(const chat_family_t *fam, const chat_msg_t *m, size_t n, jnode_t **args,
                    gt_err_t *err) {
  if (n == 0) return gt_err_set(err, GT_EINVAL, "no messages");
  size_t a = 0;
  for (size_t i = 0; i < n; i++) {
    const chat_msg_t *x = &m[i];
    if ((unsigned)x->role > CHAT_ROLE_TOOL)
      return gt_err_set(err, GT_EINVAL, "messages[%zu]: unknown role %d", i, (int)x->role);
    int rc;
    if ((rc = check_text(x->content, i, "content", err))) return rc;
    if ((rc = check_text(x->reasoning_content, i, "reasoning_content", err))) return rc;
    if (x->role != CHAT_ROLE_ASSISTANT && (x->n_tool_calls || x->reasoning_content))
      return gt_err_set(err, GT_EINVAL, "messages[%zu]: only assistant messages carry %s", i,
                        x->n_tool_calls ? "tool_calls" : "reasoning_content");
    if (x->n_tool_calls && !x->tool_calls)
      return gt_err_set(err, GT_EINVAL, "messages[%zu]: n_tool_calls set without tool_calls", i);
    if (x->role == CHAT_ROLE_SYSTEM && i != 0 && fam->id == CHAT_FAMILY_QWEN35)
      return gt_err_set(err, GT_EINVAL, "messages[%zu]: system message must be at the beginning", i);
    for (size_t k = 0; k < x->n_tool_calls; k++) {
      const chat_tool_call_t *tc = &x->tool_calls[k];
      if (!tc->name || !*tc->name)
        return gt_err_set(err, GT_EINVAL, "messages[%zu].tool_calls[%zu]: missing function name", i, k);
      if (!gt_utf8_valid(tc->name, strlen(tc->name)))
        return gt_err_set(err, GT_EINVAL, "messages[%zu].tool_calls[%zu]: name is not valid UTF-8", i, k);
      for (const char *p = tc->name; *p; p++)
        if (bad_name_char((unsigned char)*p))
          return gt_err_set(err, GT_EINVAL,
                            "messages[%zu].tool_calls[%zu]: function name '%.64s' contains a "
                            "quote, backslash, angle bracket or control character", i, k, tc->name);
      const char *aj = tc->arguments && *tc->arguments ? tc->arguments : "{}";
      gt_err_t jerr = {0};
      jnode_t *j = NULL;
      if (chat__jparse(aj, strlen(aj), &j, &jerr))
        return gt_err_set(err, GT_EINVAL, "messages[%zu].tool_calls[%zu] (%.64s): arguments: %s",
                          i, k, tc->name, jerr.msg);
      if (j->t != J_OBJ) {
        chat__jfree(j);
        return gt_err_set(err, GT_EINVAL,
                          "messages[%zu].tool_calls[%zu] (%.64s): arguments must be a JSON object",
                          i, k, tc->name);
      }
      if (fam->id == CHAT_FAMILY_QWEN35)
        for (size_t q = 0; q < j->n; q++)
          for (size_t c = 0; c < j->klens[q]; c++)
            if (j->keys[q][c] == '>' || j->keys[q][c] == '<' || (unsigned char)j->keys[q][c] < 0x20) {
              chat__jfree(j);
              return gt_err_set(err, GT_EINVAL,
                                "messages[%zu].tool_calls[%zu] (%.64s): argument name contains "
                                "an angle bracket or control character", i, k, tc->name);
            }
      args[a++] = j;
    }
    if (x->role == CHAT_ROLE_TOOL) {
      /* Walk back over earlier results to the assistant turn that made the calls. */
      size_t prev_results = 0, p = i;
      while (p > 0 && m[p - 1].role == CHAT_ROLE_TOOL) { p--; prev_results++; }
      if (p == 0 || m[p - 1].role != CHAT_ROLE_ASSISTANT || m[p - 1].n_tool_calls == 0)
        return gt_err_set(err, GT_EINVAL,
                          "messages[%zu]: tool result without a preceding assistant tool call", i);
      const chat_msg_t *asst = &m[p - 1];
      if (prev_results >= asst->n_tool_calls)
        return gt_err_set(err, GT_EINVAL,
                          "messages[%zu]: more tool results than the %zu tool call(s) of "
                          "messages[%zu]", i, asst->n_tool_calls, p - 1);
      if (x->tool_call_id && *x->tool_call_id) {
        bool any_id = false, found = false;
        for (size_t k = 0; k < asst->n_tool_calls; k++) {
          const char *id = asst->tool_calls[k].id;
          if (id && *id) {
            any_id = true;
            if (strcmp(id, x->tool_call_id) == 0) found = true;
          }
        }
        if (any_id && !found)
          return gt_err_set(err, GT_EINVAL,
                            "messages[%zu]: tool_call_id '%.64s' matches no tool call of "
                            "messages[%zu]", i, x->tool_call_id, p - 1);
      }
    }
  }
  return GT_OK;
}

/* ---------------------------------------------------------------- renderers */

static sv_t msg_content(const chat_msg_t *m) { return sv_of(m->content); }

static void render_tools(gt_sb_t *b, const jnode_t *tools) {
  for (size_t i = 0; i < tools->n; i++) {
    gt_sb_addc(b, '\n');
    chat__py_dump(b, tools->kids[i]);
  }
}

static void render_qwen3(gt_sb_t *b, const chat_msg_t *m, size_t n, const jnode_t *tools,
                         jnode_t **args, const chat_render_opts_t *o) {
  if (tools) {
    gt_sb_adds(b, "<|im_start|>system\n");
    if (m[0].role == CHAT_ROLE_SYSTEM) {
      sb_sv(b, msg_content(&m[0]));
      gt_sb_adds(b, "\n\n");
    }
    gt_sb_adds(b, chat__q3_tools_head);
    render_tools(b, tools);
    gt_sb_adds(b, chat__q3_tools_tail);
  } else if (m[0].role == CHAT_ROLE_SYSTEM) {
    gt_sb_adds(b, "<|im_start|>system\n");
    sb_sv(b, msg_content(&m[0]));
    gt_sb_adds(b, "<|im_end|>\n");
  }
  /* Last user turn that is not a wrapped tool response; n-1 when there is none. */
  size_t lqi = n - 1;
  for (size_t k = n; k-- > 0;) {
    sv_t c = msg_content(&m[k]);
    if (m[k].role == CHAT_ROLE_USER &&
        !(sv_starts(c, "<tool_response>") && sv_ends(c, "</tool_response>"))) {
      lqi = k;
      break;
    }
  }
  size_t a = 0;
  for (size_t i = 0; i < n; i++) {
    const chat_msg_t *x = &m[i];
    sv_t c = msg_content(x);
    if (x->role == CHAT_ROLE_USER || (x->role == CHAT_ROLE_SYSTEM && i != 0)) {
      gt_sb_adds(b, x->role == CHAT_ROLE_USER ? "<|im_start|>user\n" : "<|im_start|>system\n");
      sb_sv(b, c);
      gt_sb_adds(b, "<|im_end|>\n");
    } else if (x->role == CHAT_ROLE_ASSISTANT) {
      sv_t content = c, reasoning = {"", 0};
      if (x->reasoning_content) reasoning = sv_of(x->reasoning_content);
      else if (sv_find(c, "</think>")) split_think(c, &content, &reasoning);
      bool last = i == n - 1;
      if (i > lqi && (last || reasoning.n)) {
        gt_sb_adds(b, "<|im_start|>assistant\n<think>\n");
        sv_t r = rstrip_nl(lstrip_nl(reasoning));
        sb_sv(b, r);
        gt_sb_adds(b, "\n</think>\n\n");
        sb_sv(b, lstrip_nl(content));
      } else {
        gt_sb_adds(b, "<|im_start|>assistant\n");
        sb_sv(b, content);
      }
      for (size_t k = 0; k < x->n_tool_calls; k++) {
        if (k > 0 || content.n) gt_sb_addc(b, '\n');
        gt_sb_adds(b, "<tool_call>\n{\"name\": \"");
        gt_sb_adds(b, x->tool_calls[k].name);
        gt_sb_adds(b, "\", \"arguments\": ");
        chat__py_dump(b, args[a++]);
        gt_sb_adds(b, "}\n</tool_call>");
      }
      gt_sb_adds(b, "<|im_end|>\n");
    } else if (x->role == CHAT_ROLE_TOOL) {
      if (i == 0 || m[i - 1].role != CHAT_ROLE_TOOL) gt_sb_adds(b, "<|im_start|>user");
      gt_sb_adds(b, "\n<tool_response>\n");
      sb_sv(b, c);
      gt_sb_adds(b, "\n</tool_response>");
      if (i == n - 1 || m[i + 1].role != CHAT_ROLE_TOOL) gt_sb_adds(b, "<|im_end|>\n");
    }
  }
  if (o->add_generation_prompt) {
    gt_sb_adds(b, "<|im_start|>assistant\n");
    if (!o->enable_thinking) gt_sb_adds(b, "<think>\n\n</think>\n\n");
  }
}

static int render_qwen35(gt_sb_t *b, const chat_family_t *fam, const chat_msg_t *m, size_t n,
                         const jnode_t *tools, jnode_t **args, const chat_render_opts_t *o,
                         gt_err_t *err) {
  size_t lqi = n;
  for (size_t k = n; k-- > 0;) {
    sv_t c = py_strip(msg_content(&m[k]));
    if (m[k].role == CHAT_ROLE_USER &&
        !(sv_starts(c, "<tool_response>") && sv_ends(c, "</tool_response>"))) {
      lqi = k;
      break;
    }
  }
  if (lqi == n) return gt_err_set(err, GT_EINVAL, "no user query found in messages");
  if (tools) {
    gt_sb_adds(b, "<|im_start|>system\n");
    gt_sb_adds(b, chat__q35_tools_head);
    render_tools(b, tools);
    gt_sb_adds(b, "\n</tools>");
    gt_sb_adds(b, chat__q35_tools_tail);
    if (m[0].role == CHAT_ROLE_SYSTEM) {
      sv_t c = py_strip(msg_content(&m[0]));
      if (c.n) {
        gt_sb_adds(b, "\n\n");
        sb_sv(b, c);
      }
    }
    gt_sb_adds(b, "<|im_end|>\n");
  } else if (m[0].role == CHAT_ROLE_SYSTEM) {
    gt_sb_adds(b, "<|im_start|>system\n");
    sb_sv(b, py_strip(msg_content(&m[0])));
    gt_sb_adds(b, "<|im_end|>\n");
  }
  size_t a = 0;
  for (size_t i = 0; i < n; i++) {
    const chat_msg_t *x = &m[i];
    sv_t c = py_strip(msg_content(x));
    if (x->role == CHAT_ROLE_USER) {
      gt_sb_adds(b, "<|im_start|>user\n");
      sb_sv(b, c);
      gt_sb_adds(b, "<|im_end|>\n");
    } else if (x->role == CHAT_ROLE_ASSISTANT) {
      sv_t content = c, reasoning = {"", 0};
      if (x->reasoning_content) reasoning = sv_of(x->reasoning_content);
      else if (sv_find(c, "</think>")) split_think(c, &content, &reasoning);
      if (fam->history != CHAT_HIST_ALWAYS) reasoning = py_strip(reasoning);
      bool keep;
      switch (fam->history) {
        case CHAT_HIST_AFTER_QUERY_NONEMPTY: keep = i > lqi && reasoning.n; break;
        case CHAT_HIST_AFTER_QUERY_OR_NONEMPTY: keep = i > lqi || reasoning.n; break;
        case CHAT_HIST_ALWAYS: keep = true; break;
        default: keep = i > lqi; break;
      }
      gt_sb_adds(b, "<|im_start|>assistant\n");
      if (keep) {
        gt_sb_adds(b, "<think>\n");
        sb_sv(b, reasoning);
        gt_sb_adds(b, "\n</think>\n\n");
      }
      sb_sv(b, content);
      for (size_t k = 0; k < x->n_tool_calls; k++) {
        if (k == 0) gt_sb_adds(b, py_strip(content).n ? "\n\n<tool_call>\n<function=" : "<tool_call>\n<function=");
        else gt_sb_adds(b, "\n<tool_call>\n<function=");
        gt_sb_adds(b, x->tool_calls[k].name);
        gt_sb_adds(b, ">\n");
        const jnode_t *j = args[a++];
        for (size_t q = 0; q < j->n; q++) {
          gt_sb_adds(b, "<parameter=");
          gt_sb_add(b, j->keys[q], j->klens[q]);
          gt_sb_adds(b, ">\n");
          chat__py_str(b, j->kids[q]);
          gt_sb_adds(b, "\n</parameter>\n");
        }
        gt_sb_adds(b, "</function>\n</tool_call>");
      }
      gt_sb_adds(b, "<|im_end|>\n");
    } else if (x->role == CHAT_ROLE_TOOL) {
      /* `loop.previtem and ...`: the first message has no previtem (rejected earlier anyway). */
      if (i > 0 && m[i - 1].role != CHAT_ROLE_TOOL) gt_sb_adds(b, "<|im_start|>user");
      gt_sb_adds(b, "\n<tool_response>\n");
      sb_sv(b, c);
      gt_sb_adds(b, "\n</tool_response>");
      if (i == n - 1 || m[i + 1].role != CHAT_ROLE_TOOL) gt_sb_adds(b, "<|im_end|>\n");
    }
  }
  if (o->add_generation_prompt) {
    gt_sb_adds(b, "<|im_start|>assistant\n");
    gt_sb_adds(b, o->enable_thinking ? "<think>\n" : "<think>\n\n</think>\n\n");
  }
  return GT_OK;
}

/* continue_final: b ends right after the final assistant message's content (its last rendering:
 * the text after a </think>, whitespace trimmed as the templates do). */
static int cut_after_final(gt_sb_t *b, const chat_msg_t *msgs, size_t n, gt_err_t *err) {
  const chat_msg_t *m = n ? &msgs[n - 1] : NULL;
  const char *c = m && m->role == CHAT_ROLE_ASSISTANT ? m->content : NULL;
  const char *think = c ? strstr(c, "</think>") : NULL;
  while (think && strstr(think + 1, "</think>")) think = strstr(think + 1, "</think>");
  if (think) c = think + strlen("</think>");
  size_t len = c ? strlen(c) : 0;
  while (len && strchr(" \t\r\n", *c)) c++, len--;
  while (len && strchr(" \t\r\n", c[len - 1])) len--;
  if (!len)
    return gt_err_set_param(err, GT_EINVAL, "chat.messages",
                            "continue_final_message needs a final assistant message with content");
  const char *hit = NULL;
  for (size_t i = 0; i + len <= b->len; i++)
    if (b->p[i] == c[0] && !memcmp(b->p + i, c, len)) hit = b->p + i;
  if (!hit) return gt_err_set(err, GT_EINTERNAL, "continue_final_message: the final message is not in the rendering");
  b->len = (size_t)(hit - b->p) + len;
  b->p[b->len] = '\0';
  return GT_OK;
}

int chat_render(const chat_family_t *fam, const chat_msg_t *msgs, size_t n,
                const chat_render_opts_t *opts, char **out, size_t *out_len, gt_err_t *err) {
  *out = NULL;
  if (out_len) *out_len = 0;
  if (!fam || (fam->id != CHAT_FAMILY_QWEN3 && fam->id != CHAT_FAMILY_QWEN35))
    return gt_err_set(err, GT_EINVAL, "chat_render: no template family");
  chat_render_opts_t def = {NULL, true, true};
  const chat_render_opts_t *o = opts ? opts : &def;
  if (n && !msgs) return gt_err_set(err, GT_EINVAL, "chat_render: NULL messages");
  size_t ncalls = 0;
  for (size_t i = 0; i < n; i++) ncalls += msgs[i].n_tool_calls;
  jnode_t **args = calloc(ncalls ? ncalls : 1, sizeof *args);
  if (!args) return gt_err_set(err, GT_ENOMEM, "out of memory");
  jnode_t *tools = NULL;
  gt_sb_t b = {0};
  int rc = validate(fam, msgs, n, args, err);
  if (rc) goto done;
  if (o->tools_json && *o->tools_json) {
    gt_err_t jerr = {0};
    if (chat__jparse(o->tools_json, strlen(o->tools_json), &tools, &jerr)) {
      rc = gt_err_set(err, GT_EINVAL, "tools: %s", jerr.msg);
      goto done;
    }
    if (tools->t != J_ARR) {
      rc = gt_err_set(err, GT_EINVAL, "tools must be a JSON array");
      goto done;
    }
    for (size_t i = 0; i < tools->n; i++)
      if (tools->kids[i]->t != J_OBJ) {
        rc = gt_err_set(err, GT_EINVAL, "tools[%zu] must be a JSON object", i);
        goto done;
      }
    if (tools->n == 0) { /* `{%- if tools %}`: an empty list is false */
      chat__jfree(tools);
      tools = NULL;
    }
  }
  if (fam->id == CHAT_FAMILY_QWEN3) render_qwen3(&b, msgs, n, tools, args, o);
  else if ((rc = render_qwen35(&b, fam, msgs, n, tools, args, o, err))) goto done;
  if (b.oom) {
    rc = gt_err_set(err, GT_ENOMEM, "out of memory rendering chat");
    goto done;
  }
  if (!b.p) {
    b.p = calloc(1, 1);
    if (!b.p) { rc = gt_err_set(err, GT_ENOMEM, "out of memory"); goto done; }
  }
  if (o->continue_final && (rc = cut_after_final(&b, msgs, n, err))) goto done;
  *out = b.p;
  if (out_len) *out_len = b.len;
  b.p = NULL;
done:
  free(b.p);
  for (size_t i = 0; i < ncalls; i++) chat__jfree(args[i]);
  free(args);
  chat__jfree(tools);
  return rc;
}

bool chat_prompt_opens_reasoning(const chat_family_t *fam, const chat_render_opts_t *opts) {
  return fam && opts && fam->id == CHAT_FAMILY_QWEN35 && opts->add_generation_prompt &&
         opts->enable_thinking;
}
