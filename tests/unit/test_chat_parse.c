/* tests/unit/test_chat_parse.c — streaming output parser: scripted Qwen3 / Qwen3.5 outputs,
 * each fed whole, split at every point, byte by byte and in random pieces; the merged events
 * must equal the expected transcript every time (so no partial marker ever leaks). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "engine/chat/chat_parse.h"

/* Transcript of events: adjacent deltas of one kind merged, e.g.
 *   R"think"C"answer"B0(get_weather)A0"{...}"E0E1(malformed)END(1)
 * Tool ids are checked separately (they are the same for one seed). */
typedef struct tx {
  char *s;
  size_t n, cap;
  int last_kind, last_index;
  char ids[8][32];
} tx_t;

static void tx_put(tx_t *t, const char *s, size_t n) {
  if (t->n + n + 1 > t->cap) {
    t->cap = (t->n + n + 1) * 2;
    t->s = realloc(t->s, t->cap);
    assert_non_null(t->s);
  }
  memcpy(t->s + t->n, s, n);
  t->n += n;
  t->s[t->n] = 0;
}
static void tx_puts(tx_t *t, const char *s) { tx_put(t, s, strlen(s)); }

static void tx_events(tx_t *t, const chat_event_t *ev, size_t n) {
  char tmp[300];
  for (size_t i = 0; i < n; i++) {
    const chat_event_t *e = &ev[i];
    bool text = e->kind == CHAT_EV_CONTENT || e->kind == CHAT_EV_REASONING || e->kind == CHAT_EV_TOOL_CALL_ARGS;
    if (text) {
      assert_true(e->len > 0);
      assert_int_equal(strlen(e->text), e->len); /* NUL-terminated, no NUL inside */
      int idx = e->kind == CHAT_EV_TOOL_CALL_ARGS ? e->tool_index : -1;
      if (t->last_kind == (int)e->kind && t->last_index == idx) {
        t->n--; /* reopen the closing quote */
      } else {
        snprintf(tmp, sizeof tmp, "%s", e->kind == CHAT_EV_CONTENT ? "C" : e->kind == CHAT_EV_REASONING ? "R" : "A");
        tx_puts(t, tmp);
        if (idx >= 0) {
          snprintf(tmp, sizeof tmp, "%d", idx);
          tx_puts(t, tmp);
        }
        tx_puts(t, "\"");
      }
      tx_put(t, e->text, e->len);
      tx_puts(t, "\"");
      t->last_kind = (int)e->kind;
      t->last_index = idx;
      continue;
    }
    t->last_kind = 0;
    if (e->kind == CHAT_EV_TOOL_CALL_BEGIN) {
      snprintf(tmp, sizeof tmp, "B%d(%s)", e->tool_index, e->name);
      assert_true(e->tool_index >= 0 && e->tool_index < 8);
      assert_int_equal(strlen(e->id), 29);
      assert_memory_equal(e->id, "call_", 5);
      snprintf(t->ids[e->tool_index], sizeof t->ids[0], "%s", e->id);
    } else if (e->kind == CHAT_EV_TOOL_CALL_END) {
      snprintf(tmp, sizeof tmp, "E%d%s", e->tool_index, e->malformed ? "(malformed)" : "");
    } else if (e->kind == CHAT_EV_END) {
      snprintf(tmp, sizeof tmp, "END(%d)", e->n_tool_calls);
      assert_int_equal(i, n - 1);
    } else {
      fail_msg("unknown event kind %d", e->kind);
    }
    tx_puts(t, tmp);
  }
}

/* Feeds text in pieces ending at cuts[0..ncuts) (ascending), then finishes. */
static tx_t run_cuts(const chat_parser_opts_t *o, const char *text, size_t len, const size_t *cuts,
                     size_t ncuts) {
  tx_t t = {0};
  t.last_index = -2;
  chat_parser_t *p;
  gt_err_t err = {0};
  assert_int_equal(chat_parser_new(o, &p, &err), GT_OK);
  const chat_event_t *ev;
  size_t nev, at = 0;
  for (size_t i = 0; i <= ncuts; i++) {
    size_t end = i < ncuts ? cuts[i] : len;
    assert_int_equal(chat_parser_feed(p, text + at, end - at, &ev, &nev, &err), GT_OK);
    tx_events(&t, ev, nev);
    at = end;
  }
  assert_int_equal(chat_parser_finish(p, &ev, &nev, &err), GT_OK);
  tx_events(&t, ev, nev);
  assert_int_equal(chat_parser_feed(p, "x", 1, &ev, &nev, &err), GT_EINVAL);
  chat_parser_free(p);
  if (!t.s) tx_puts(&t, "");
  return t;
}

/* The script must give `want` fed whole, split at every point, byte by byte and in random
 * pieces. */
static void check_script(const chat_parser_opts_t *o, const char *text, const char *want) {
  size_t len = strlen(text);
  tx_t whole = run_cuts(o, text, len, NULL, 0);
  if (strcmp(whole.s, want) != 0)
    fail_msg("script %s\n got  %s\n want %s", text, whole.s, want);
  for (size_t cut = 0; cut <= len; cut++) {
    tx_t t = run_cuts(o, text, len, &cut, 1);
    if (strcmp(t.s, want) != 0) fail_msg("split at %zu of %s\n got  %s\n want %s", cut, text, t.s, want);
    assert_memory_equal(t.ids, whole.ids, sizeof t.ids);
    free(t.s);
  }
  size_t *cuts = malloc((len + 1) * sizeof *cuts);
  assert_non_null(cuts);
  for (size_t i = 0; i < len; i++) cuts[i] = i + 1;
  tx_t b = run_cuts(o, text, len, cuts, len ? len - 1 : 0);
  if (strcmp(b.s, want) != 0) fail_msg("byte by byte %s\n got  %s\n want %s", text, b.s, want);
  free(b.s);
  uint64_t rng = 0x1234567 + len;
  for (int round = 0; round < 20; round++) {
    size_t nc = 0, at = 0;
    for (;;) {
      rng = rng * 6364136223846793005ull + 1442695040888963407ull;
      at += 1 + (size_t)((rng >> 33) % 7);
      if (at >= len) break;
      cuts[nc++] = at;
    }
    tx_t r = run_cuts(o, text, len, cuts, nc);
    if (strcmp(r.s, want) != 0) fail_msg("random split %s\n got  %s\n want %s", text, r.s, want);
    free(r.s);
  }
  free(cuts);
  free(whole.s);
}

static const chat_parser_opts_t plain = {false, true, 42, NULL};
static const chat_parser_opts_t in_think = {true, true, 42, NULL};

static void test_qwen3_reasoning_then_content(void **state) {
  (void)state;
  check_script(&plain, "<think>\nLet me think.\n\nTwo lines.\n</think>\n\nThe answer is 4.",
               "R\"Let me think.\n\nTwo lines.\"C\"The answer is 4.\"END(0)");
  /* Thinking disabled: the prompt closed the block, the model writes content only. */
  check_script(&plain, "Hello!\nHow can I help?", "C\"Hello!\nHow can I help?\"END(0)");
  /* Leading blanks before <think> are formatting; an unterminated block stays reasoning. */
  check_script(&plain, "\n<think>\ncut short\n", "R\"cut short\"END(0)");
  /* <thinking> is not <think>. */
  check_script(&plain, "<thinking>x</thinking>", "C\"<thinking>x</thinking>\"END(0)");
  check_script(&plain, "", "END(0)");
  check_script(&plain, "<thi", "C\"<thi\"END(0)");
  check_script(&plain, "</think>tail", "C\"</think>tail\"END(0)");
}

static void test_reasoning_with_implied_opening(void **state) {
  (void)state;
  check_script(&in_think, "Hmm, 2+2.\n</think>\n\n4", "R\"Hmm, 2+2.\"C\"4\"END(0)");
  check_script(&in_think, "\nstill thinking </thi", "R\"still thinking </thi\"END(0)");
  check_script(&in_think, "a</think>b</think>c", "R\"a\"C\"b</think>c\"END(0)");
  check_script(&in_think, "</think>\n\n", "END(0)");
}

static void test_qwen3_tool_calls(void **state) {
  (void)state;
  check_script(&plain,
               "<think>\nNeed the weather.\n</think>\n\n<tool_call>\n{\"name\": \"get_weather\", "
               "\"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>",
               "R\"Need the weather.\"B0(get_weather)A0\"{\"city\": \"Oslo\"}\"E0END(1)");
  /* Content before a call; two calls; nested arguments with a marker inside a string. */
  check_script(&plain,
               "Let me check.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {\"q\": \"</tool_call>\", "
               "\"n\": [1, 2.5e3, {\"x\": null}], \"t\": true}}\n</tool_call>\n<tool_call>\n{\"name\": "
               "\"b\", \"arguments\": {}}\n</tool_call>",
               "C\"Let me check.\"B0(a)A0\"{\"q\": \"</tool_call>\", \"n\": [1, 2.5e3, {\"x\": null}], "
               "\"t\": true}\"E0B1(b)A1\"{}\"E1END(2)");
  /* Arguments before the name, other keys, no blanks, text after the call. */
  check_script(&plain,
               "<tool_call>{\"arguments\":{\"x\":-1},\"id\":7,\"name\":\"f\"}</tool_call>\nDone.",
               "B0(f)A0\"{\"x\":-1}\"E0C\"Done.\"END(1)");
  /* UTF-8 inside names and arguments, pieces split inside characters. */
  check_script(&plain,
               "<tool_call>\n{\"name\": \"météo\", \"arguments\": {\"ville\": \"Zürich 🙂\"}}\n</tool_call>",
               "B0(météo)A0\"{\"ville\": \"Zürich 🙂\"}\"E0END(1)");
  /* Closing tag missing at the end of output: the call is complete, not malformed. */
  check_script(&plain, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n",
               "B0(f)A0\"{\"a\": 1}\"E0END(1)");
  /* Tool parsing off (request without tools): plain content. */
  chat_parser_opts_t off = plain;
  off.parse_tool_calls = false;
  check_script(&off, "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>",
               "C\"<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>\"END(0)");
}

static void test_qwen3_malformed(void **state) {
  (void)state;
  /* Not a call (never began): everything is content, including the tag. */
  check_script(&plain, "Hi\n<tool_call>\nnot json\n</tool_call> ok",
               "C\"Hi\n<tool_call>\nnot json\n</tool_call> ok\"END(0)");
  check_script(&plain, "<tool_call>\n{\"name\": \"get_", "C\"<tool_call>\n{\"name\": \"get_\"END(0)");
  check_script(&plain, "<tool_call>{\"name\": \"f\"}</tool_call>",
               "C\"<tool_call>{\"name\": \"f\"}</tool_call>\"END(0)");
  check_script(&plain, "<tool_call>{\"name\": \"f\", \"arguments\": \"{}\"}</tool_call>",
               "C\"<tool_call>{\"name\": \"f\", \"arguments\": \"{}\"}</tool_call>\"END(0)");
  /* A failed call is re-read as content, so a real call after it is still found. */
  check_script(&plain, "<tool_call><tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>",
               "C\"<tool_call>\"B0(f)A0\"{}\"E0END(1)");
  check_script(&plain, "<tool_cal>x", "C\"<tool_cal>x\"END(0)");
  check_script(&plain, "a <too", "C\"a <too\"END(0)");
  /* Began, then broke: ended as malformed; the rest of the call is dropped. */
  check_script(&plain,
               "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": tru}}\n</tool_call>after",
               "B0(f)A0\"{\"a\": tru\"E0(malformed)C\"after\"END(1)");
  check_script(&plain, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": [1, 2",
               "B0(f)A0\"{\"a\": [1, 2\"E0(malformed)END(1)");
  check_script(&plain, "<tool_call>\n{\"name\": \"f\", \"arguments\": {}\n</tool_call>x",
               "B0(f)A0\"{}\"E0(malformed)C\"x\"END(1)");
}

static void test_qwen35_tool_calls(void **state) {
  (void)state;
  check_script(&in_think,
               "The user wants weather.\n</think>\n\nI'll check.\n\n<tool_call>\n<function=get_weather>\n"
               "<parameter=city>\nOslo\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n"
               "</tool_call>",
               "R\"The user wants weather.\"C\"I'll check.\"B0(get_weather)"
               "A0\"{\"city\": \"Oslo\", \"days\": 3}\"E0END(1)");
  /* Values: JSON kept as JSON, anything else a string (streamed, escaped); empty value;
   * a multi-line value keeps its inner newlines; two calls. */
  check_script(&plain,
               "<tool_call>\n<function=write>\n<parameter=code>\ndef f():\n    return \"x\\n\"\n\n"
               "</parameter>\n<parameter=opts>\n{\"a\": [1, 2]}\n</parameter>\n<parameter=flag>\ntrue\n"
               "</parameter>\n<parameter=note>\ntrue story\n</parameter>\n<parameter=zip>\n01234\n"
               "</parameter>\n<parameter=e>\n\n</parameter>\n<parameter=n>\n-2.5e-3\n</parameter>\n"
               "</function>\n</tool_call>\n<tool_call>\n<function=ping>\n</function>\n</tool_call>",
               "B0(write)A0\"{\"code\": \"def f():\\n    return \\\"x\\\\n\\\"\\n\", \"opts\": {\"a\": [1, 2]}, "
               "\"flag\": true, \"note\": \"true story\", \"zip\": \"01234\", \"e\": \"\", "
               "\"n\": -2.5e-3}\"E0B1(ping)A1\"{}\"E1END(2)");
  /* A value containing a partial closing tag, and "<" characters. */
  check_script(&plain,
               "<tool_call>\n<function=f>\n<parameter=html>\n<p>a</para</p>\n</parameter>\n</function>\n</tool_call>",
               "B0(f)A0\"{\"html\": \"<p>a</para</p>\"}\"E0END(1)");
  /* Declared string parameters stay strings. */
  chat_parser_opts_t o = plain;
  o.tools_json = "[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {\"type\": "
                 "\"object\", \"properties\": {\"zip\": {\"type\": \"string\"}, \"n\": {\"type\": "
                 "\"integer\"}}}}}]";
  check_script(&o,
               "<tool_call>\n<function=f>\n<parameter=zip>\n12345\n</parameter>\n<parameter=n>\n12345\n"
               "</parameter>\n</function>\n</tool_call>",
               "B0(f)A0\"{\"zip\": \"12345\", \"n\": 12345}\"E0END(1)");
}

static void test_qwen35_malformed(void **state) {
  (void)state;
  check_script(&plain, "<tool_call>\n<func=x>\n</tool_call>", "C\"<tool_call>\n<func=x>\n</tool_call>\"END(0)");
  check_script(&plain, "<tool_call>\n<function=a b\nc>", "C\"<tool_call>\n<function=a b\nc>\"END(0)");
  check_script(&plain, "<tool_call>\n<function=f>\n<parameter=a>\nhello",
               "B0(f)A0\"{\"a\": \"hello\"E0(malformed)END(1)");
  check_script(&plain, "<tool_call>\n<function=f>\n<oops>\n</tool_call>\nok",
               "B0(f)A0\"{\"E0(malformed)C\"ok\"END(1)");
  check_script(&plain, "<tool_call>\n<function=f>\n</function>\nx</tool_call>y",
               "B0(f)A0\"{}\"E0(malformed)C\"y\"END(1)");
}

static void test_utf8_safety(void **state) {
  (void)state;
  check_script(&plain, "<think>\n思考\n</think>\n\n答案🙂", "R\"思考\"C\"答案🙂\"END(0)");
  /* Invalid bytes become U+FFFD; an incomplete character at the end too. */
  check_script(&plain, "a\xff" "b\xe2\x82", "C\"a\xef\xbf\xbd" "b\xef\xbf\xbd\xef\xbf\xbd\"END(0)");
  check_script(&plain, "\xc3(x", "C\"\xef\xbf\xbd(x\"END(0)");
}

static void test_ids_and_errors(void **state) {
  (void)state;
  const char *s = "<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call><tool_call>{\"name\": \"b\", "
                  "\"arguments\": {}}</tool_call>";
  tx_t a = run_cuts(&plain, s, strlen(s), NULL, 0);
  assert_string_not_equal(a.ids[0], a.ids[1]);
  chat_parser_opts_t o = plain;
  o.id_seed = 43;
  tx_t b = run_cuts(&o, s, strlen(s), NULL, 0);
  assert_string_equal(a.s, b.s);
  assert_string_not_equal(a.ids[0], b.ids[0]);
  free(a.s);
  free(b.s);
  chat_parser_t *p;
  gt_err_t err = {0};
  o.tools_json = "{\"not\": \"an array\"}";
  assert_int_equal(chat_parser_new(&o, &p, &err), GT_EINVAL);
  o.tools_json = "[{";
  assert_int_equal(chat_parser_new(&o, &p, &err), GT_EINVAL);
  assert_int_equal(chat_parser_new(NULL, &p, &err), GT_OK);
  const chat_event_t *ev;
  size_t n;
  assert_int_equal(chat_parser_feed(p, "x", 1, &ev, &n, &err), GT_OK);
  assert_int_equal(chat_parser_finish(p, &ev, &n, &err), GT_OK);
  assert_int_equal(chat_parser_finish(p, &ev, &n, &err), GT_EINVAL);
  chat_parser_free(p);
}

/* Random texts built from markup fragments: whatever they mean, the transcript must not
 * depend on how they are split. */
static void test_random_scripts_split_invariant(void **state) {
  (void)state;
  static const char *const frags[] = {
      "<think>", "</think>", "<tool_call>", "</tool_call>", "<function=f>", "</function>",
      "<parameter=a>", "</parameter>", "{\"name\": \"g\", ", "\"arguments\": ", "{", "}", "[1, ",
      "\"s\"", "true", "12", ".5", "\n", "\n\n", " ", "x", "<", "</", "<too", "é", "🙂", "\xff",
      "\xe2\x82", ",", ":", "\\", "\"", "<th", "</tool_cal", "</para", "null"};
  size_t nf = sizeof frags / sizeof *frags;
  /* Well-formed outputs, mutated below so that most rounds are near misses. */
  static const char *const bases[] = {
      "<think>\nr\n</think>\n\nok\n<tool_call>\n{\"name\": \"g\", \"arguments\": {\"a\": [1, \"x\"]}}\n</tool_call>",
      "r\n</think>\n\n<tool_call>\n<function=f>\n<parameter=a>\nv 1\n</parameter>\n<parameter=b>\n{\"k\": 2}\n"
      "</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=g>\n</function>\n</tool_call>",
      "<tool_call>{\"arguments\": {}, \"name\": \"h\"}</tool_call>text"};
  uint64_t rng = 99;
  char text[512];
  size_t cuts[512];
#define RND() (rng = rng * 6364136223846793005ull + 1442695040888963407ull, (size_t)(rng >> 33))
  for (int round = 0; round < 400; round++) {
    size_t len = 0;
    if (round % 4 == 0) { /* random fragments */
      int nfr = 1 + (int)(round % 24);
      for (int k = 0; k < nfr; k++) {
        const char *f = frags[RND() % nf];
        size_t fl = strlen(f);
        if (len + fl >= sizeof text) break;
        memcpy(text + len, f, fl);
        len += fl;
      }
    } else { /* a base with 0-2 mutations: delete a range, insert a fragment, truncate */
      const char *b = bases[RND() % 3];
      len = strlen(b);
      memcpy(text, b, len);
      int nmut = (int)(RND() % 3);
      for (int k = 0; k < nmut && len > 0; k++) {
        size_t at = RND() % len, kind = RND() % 3;
        if (kind == 0) {
          size_t d = 1 + RND() % 4;
          if (at + d > len) d = len - at;
          memmove(text + at, text + at + d, len - at - d);
          len -= d;
        } else if (kind == 1) {
          const char *f = frags[RND() % nf];
          size_t fl = strlen(f);
          if (len + fl >= sizeof text) continue;
          memmove(text + at + fl, text + at, len - at);
          memcpy(text + at, f, fl);
          len += fl;
        } else {
          len = at;
        }
      }
    }
    text[len] = 0;
    const chat_parser_opts_t *o = round % 2 ? &plain : &in_think;
    tx_t whole = run_cuts(o, text, len, NULL, 0);
    for (size_t i = 0; i + 1 < len; i++) cuts[i] = i + 1;
    tx_t bytes = run_cuts(o, text, len, cuts, len ? len - 1 : 0);
    if (strcmp(whole.s, bytes.s) != 0) fail_msg("text %s\n whole %s\n bytes %s", text, whole.s, bytes.s);
    for (size_t cut = 0; cut <= len; cut++) {
      tx_t t = run_cuts(o, text, len, &cut, 1);
      if (strcmp(whole.s, t.s) != 0) fail_msg("text %s cut %zu\n whole %s\n split %s", text, cut, whole.s, t.s);
      free(t.s);
    }
    free(whole.s);
    free(bytes.s);
  }
#undef RND
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_qwen3_reasoning_then_content),
      cmocka_unit_test(test_reasoning_with_implied_opening),
      cmocka_unit_test(test_qwen3_tool_calls),
      cmocka_unit_test(test_qwen3_malformed),
      cmocka_unit_test(test_qwen35_tool_calls),
      cmocka_unit_test(test_qwen35_malformed),
      cmocka_unit_test(test_utf8_safety),
      cmocka_unit_test(test_ids_and_errors),
      cmocka_unit_test(test_random_scripts_split_invariant),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
