/* Constrained decoding at the engine level (engine/sched/constraint.h through the scheduler), on
 * qwen3-tiny and the demo model: every constrained output parses and validates (JSON schema,
 * json_object, choice, regex, a tool call through the chat output parser), the same requests
 * unconstrained do not (the mask is what makes them valid), the backend's logits_mask path gives
 * the host path's tokens, unconstrained rows of a batch are untouched, a reasoning part stays
 * free until </think>, the grammar cache is shared and bounded, bad specs are refused; a dead end
 * and a grammar error each finish with ERROR naming the cause; a grammar's mask cache is shared by
 * its requests, replaced when full, and no sequence fails because others filled it (threads too).
 * Built twice: on the CPU backend (test_sched_constraint) and, with SCHED_CONS_CUDA, on the CUDA
 * backend (test_cuda_sched_constraint; exit 77 = skipped without a GPU). */
#include <inttypes.h>
#include <jansson.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "engine/sched/sched.h"
#include "tests/common/model_fx.h"
#include "tests/common/testutil.h"
#ifdef SCHED_CONS_CUDA
#include "engine/backend/backend_cuda.h"
static int be_new(be_t **be, gt_err_t *err) { return be_cuda_create(0, be, err); }
static int cuda_setup(void **state) { return tu_model_fx_setup_on(state, be_new); }
#else
#define be_new tu_be_cpu2
#endif

#define MAX_IDS 512

typedef struct {
  int32_t ids[MAX_IDS];
  int n;
  char text[4096], reasoning[4096], tool_name[64], tool_args[2048];
  size_t text_len, reasoning_len, args_len;
  int finals, n_tools;
  sched_finish_t finish;
  char error[256];
} out_t;

static void cat(char *dst, size_t *len, size_t cap, const char *s, size_t n) {
  if (*len + n >= cap) n = cap - 1 - *len;
  memcpy(dst + *len, s, n);
  *len += n;
  dst[*len] = 0;
}

static void on_event(void *ud, const sched_event_t *ev) {
  out_t *o = ud;
  if (ev->is_final) {
    o->finals++;
    o->finish = ev->finish;
    if (ev->error) snprintf(o->error, sizeof o->error, "%s", ev->error);
    return;
  }
  const seqout_delta_t *d = ev->delta;
  for (int i = 0; i < d->n_ids && o->n < MAX_IDS; i++) o->ids[o->n++] = d->ids[i];
  cat(o->text, &o->text_len, sizeof o->text, d->text, d->text_len);
  cat(o->reasoning, &o->reasoning_len, sizeof o->reasoning, d->reasoning, d->reasoning_len);
  for (int i = 0; i < d->n_tools; i++) {
    if (d->tools[i].name) {
      snprintf(o->tool_name, sizeof o->tool_name, "%s", d->tools[i].name);
      o->n_tools++;
    }
    cat(o->tool_args, &o->args_len, sizeof o->tool_args, d->tools[i].args, d->tools[i].args_len);
  }
}

typedef struct {
  cons_kind_t kind;
  const char *spec;
  float temperature;
  uint64_t seed;
  int logprobs;           /* >= 0: the host sampling path */
  int starts_in_reasoning;
  int32_t bias_id;        /* >= 0: bias_val (0: +100) on this id */
  float bias_val;
  int32_t bias_id2;       /* > 0: the same bias on this id too */
  const int32_t *allowed; /* allowed_token_ids [n_allowed] */
  int n_allowed;
  int ignore_eos;
  const char *tools_json; /* parse tool calls */
  int max_tokens;         /* 0: 300 */
  int min_tokens;
} req_opts_t;

static const int32_t k_prompt[] = {100, 137, 174, 211, 248, 285, 322, 359, 396, 433, 470, 507};

typedef tu_model_fx_t fx_t;

/* Submits one request (constraint when o->spec) to s; its events go to *out. */
static void submit_req(sched_t *s, const req_opts_t *o, out_t *out) {
  gt_err_t err = {0};
  memset(out, 0, sizeof *out);
  sched_req_t r = {0};
  r.n_prompt = (int)(sizeof k_prompt / sizeof k_prompt[0]);
  r.prompt = malloc(sizeof k_prompt);
  memcpy(r.prompt, k_prompt, sizeof k_prompt);
  r.sampling = sampler_defaults();
  r.sampling.temperature = o->temperature;
  r.sampling.seed = o->seed;
  r.max_tokens = o->max_tokens ? o->max_tokens : 300;
  r.logprobs = o->logprobs;
  r.on_event = on_event;
  r.ud = out;
  const float plus = o->bias_val != 0 ? o->bias_val : 100;
  r.ignore_eos = o->ignore_eos;
  r.min_tokens = o->min_tokens;
  r.allowed_ids = o->allowed;
  r.n_allowed = o->n_allowed;
  const int32_t ids[2] = {o->bias_id, o->bias_id2};
  const float vals[2] = {plus, plus};
  if (o->bias_id >= 0) {
    r.bias_ids = ids;
    r.bias_vals = vals;
    r.n_bias = o->bias_id2 > 0 && o->bias_id2 != o->bias_id ? 2 : 1;
  }
  r.out.parse_output = o->tools_json != NULL; /* else all text is content (reasoning included) */
  r.out.starts_in_reasoning = o->starts_in_reasoning;
  r.out.parse_tool_calls = o->tools_json != NULL;
  r.out.tools_json = o->tools_json;
  if (o->spec && sched_constraint(s, o->kind, o->spec, strlen(o->spec), &r.constraint, &err))
    fail_msg("compile %s: %s", o->spec, err.msg);
  if (sched_submit(s, &r, &err) <= 0) fail_msg("submit: %s", err.msg);
}

/* A scheduler for the tests; max_states: its grammar caches' state limit (0: the default). */
static sched_t *mk_sched_limited(fx_t *f, int max_states) {
  sched_config_t c = {.max_num_seqs = 8, .max_batch_tokens = 64, .n_ctx = 512, .cons_max_states = max_states};
  sched_t *s = NULL;
  gt_err_t err = {0};
  assert_int_equal(sched_create(f->m, f->tok, &c, &s, &err), 0);
  return s;
}

static sched_t *mk_sched(fx_t *f) { return mk_sched_limited(f, 0); }

/* One request on a fresh scheduler, run to completion. */
static void run1(fx_t *f, const req_opts_t *o, out_t *out) {
  sched_t *s = mk_sched(f);
  submit_req(s, o, out);
  tu_sched_run_all(s, NULL);
  sched_free(s);
  assert_int_equal(out->finals, 1);
}

/* ---- validators of the schemas below (the test's own, small) ---- */

#define PERSON                                                                                        \
  "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":6},"               \
  "\"age\":{\"type\":\"integer\"},\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"a\",\"b\"]},"     \
  "\"maxItems\":3},\"pet\":{\"anyOf\":[{\"type\":\"null\"},{\"$ref\":\"#/$defs/pet\"}]}},"             \
  "\"required\":[\"name\",\"age\"],\"$defs\":{\"pet\":{\"type\":\"object\",\"properties\":"            \
  "{\"kind\":{\"const\":\"cat\"},\"legs\":{\"type\":\"number\"}},\"required\":[\"kind\"]}}}"

static int utf8_len(const char *s) {
  int n = 0;
  for (; *s; s++) n += ((unsigned char)*s & 0xc0) != 0x80;
  return n;
}

/* 1 when text is a JSON value valid for PERSON; else 0 with why. */
static int valid_person(const char *text, size_t len, char *why, size_t nwhy) {
  json_error_t je;
  json_t *v = json_loadb(text, len, JSON_DECODE_ANY, &je);
  int ok = 0;
  const char *k;
  json_t *x;
  if (!json_is_object(v)) { snprintf(why, nwhy, "not an object: %.60s", je.text); goto done; }
  json_object_foreach(v, k, x) {
    if (!strcmp(k, "name")) {
      if (!json_is_string(x) || utf8_len(json_string_value(x)) > 6) { snprintf(why, nwhy, "bad name"); goto done; }
    } else if (!strcmp(k, "age")) {
      if (!json_is_integer(x)) { snprintf(why, nwhy, "age not an integer"); goto done; }
    } else if (!strcmp(k, "tags")) {
      size_t i;
      json_t *t;
      if (!json_is_array(x) || json_array_size(x) > 3) { snprintf(why, nwhy, "bad tags"); goto done; }
      json_array_foreach(x, i, t) {
        if (!json_is_string(t) || (strcmp(json_string_value(t), "a") && strcmp(json_string_value(t), "b"))) {
          snprintf(why, nwhy, "bad tag");
          goto done;
        }
      }
    } else if (!strcmp(k, "pet")) {
      if (json_is_null(x)) continue;
      json_t *kind = json_object_get(x, "kind"), *legs = json_object_get(x, "legs");
      if (!json_is_object(x) || !json_is_string(kind) || strcmp(json_string_value(kind), "cat") ||
          json_object_size(x) != 1u + (legs != NULL) || (legs && !json_is_number(legs))) {
        snprintf(why, nwhy, "bad pet");
        goto done;
      }
    } else {
      snprintf(why, nwhy, "extra property %s", k);
      goto done;
    }
  }
  if (!json_object_get(v, "name") || !json_object_get(v, "age")) { snprintf(why, nwhy, "missing required"); goto done; }
  ok = 1;
done:
  json_decref(v);
  return ok;
}

/* [0-9]{3}-[a-z]{2,4} */
static int valid_code(const char *t) {
  size_t n = strlen(t);
  if (n < 6 || n > 8) return 0;
  for (int i = 0; i < 3; i++)
    if (t[i] < '0' || t[i] > '9') return 0;
  if (t[3] != '-') return 0;
  for (size_t i = 4; i < n; i++)
    if (t[i] < 'a' || t[i] > 'z') return 0;
  return 1;
}

/* ---- tests ---- */

static void check_schema_runs(fx_t *f, const char *model) {
  int valid_free = 0;
  for (int k = 0; k < 3; k++) {
    static out_t o;
    req_opts_t ro = {.kind = CONS_JSON_SCHEMA, .spec = PERSON, .temperature = k ? 1.0f : 0.0f, .seed = (uint64_t)k,
                     .logprobs = -1, .bias_id = -1};
    run1(f, &ro, &o);
    char why[128] = "";
    if (!valid_person(o.text, o.text_len, why, sizeof why))
      fail_msg("%s seed %d: %s: %.*s (%s)", model, k, why, (int)o.text_len, o.text, o.error);
    assert_int_equal(o.finish, SCHED_FINISH_STOP); /* ended by the constraint, not max_tokens */
    ro.spec = NULL;
    ro.max_tokens = 40;
    run1(f, &ro, &o);
    valid_free += valid_person(o.text, o.text_len, why, sizeof why);
  }
  print_message("  %s: 3/3 constrained outputs valid, %d/3 unconstrained\n", model, valid_free);
  assert_int_equal(valid_free, 0);
}

static void test_json_schema(void **state) {
  fx_t *f = *state;
  check_schema_runs(f, "qwen3-tiny");
  fx_t demo;
  gt_err_t err = {0};
  if (tu_model_fx_open(&demo, "demo/gantry-demo-code-22m.Q4_K_M.gguf", be_new, &err)) fail_msg("demo: %s", err.msg);
  check_schema_runs(&demo, "demo");
  tu_model_fx_close(&demo);
}

static void test_object_choice(void **state) {
  fx_t *f = *state;
  static out_t o;
  int32_t *q = NULL;
  size_t nq = 0;
  gt_err_t err = {0};
  assert_int_equal(tok_encode(f->tok, "\"", 1, 0, &q, &nq, &err), 0);
  assert_int_equal(nq, 1);
  const int32_t quote = q[0];
  free(q);
  for (int k = 0; k < 3; k++) {
    /* a random model writes endless strings: '"' gets +100 (wherever the grammar allows it), so
     * strings close at once and the object ends when the model picks '}' over ',' */
    req_opts_t ro = {.kind = CONS_JSON_OBJECT, .spec = "", .temperature = 1.0f, .seed = (uint64_t)k, .logprobs = -1,
                     .bias_id = quote};
    run1(f, &ro, &o);
    json_t *v = json_loadb(o.text, o.text_len, 0, NULL);
    if (!json_is_object(v)) fail_msg("json_object seed %d finish %d: %.*s (%s)", k, o.finish, (int)o.text_len, o.text, o.error);
    json_decref(v);
    ro = (req_opts_t){.kind = CONS_CHOICE, .spec = "[\"def main():\", \"yes\", \"no\"]", .temperature = 1.0f,
                      .seed = (uint64_t)k, .logprobs = -1, .bias_id = -1};
    run1(f, &ro, &o);
    if (strcmp(o.text, "def main():") && strcmp(o.text, "yes") && strcmp(o.text, "no")) fail_msg("choice: '%s'", o.text);
    assert_int_equal(o.finish, SCHED_FINISH_STOP);
  }
}

static void test_regex(void **state) {
  fx_t *f = *state;
  static out_t o;
  for (int k = 0; k < 3; k++) {
    req_opts_t ro = {.kind = CONS_REGEX, .spec = "[0-9]{3}-[a-z]{2,4}", .temperature = 1.0f, .seed = (uint64_t)k,
                     .logprobs = -1, .bias_id = -1};
    run1(f, &ro, &o);
    if (!valid_code(o.text)) fail_msg("regex seed %d: '%s' (%s)", k, o.text, o.error);
    assert_true(o.finish == SCHED_FINISH_STOP); /* done after 4 letters, or end-of-sequence */
  }
}

/* The backend's logits_mask + sample path (no logprobs) and the host path (logprobs: the mask on
 * the host) give the same tokens, greedy and seeded. */
static void test_device_path_equals_host(void **state) {
  fx_t *f = *state;
  static out_t dev, host;
  for (int k = 0; k < 2; k++) {
    req_opts_t ro = {.kind = CONS_JSON_SCHEMA, .spec = PERSON, .temperature = k ? 0.8f : 0.0f, .seed = (uint64_t)k,
                     .logprobs = -1, .bias_id = -1};
    run1(f, &ro, &dev);
    ro.logprobs = 0;
    run1(f, &ro, &host);
    assert_int_equal(dev.n, host.n);
    assert_memory_equal(dev.ids, host.ids, sizeof(int32_t) * (size_t)dev.n);
  }
}

/* Constrained and free requests in one batch: each equals its solo run (masks touch only their
 * rows), and the grammar is compiled once for all. */
static void test_batch_mixed(void **state) {
  fx_t *f = *state;
  static out_t solo[4], batch[4];
  req_opts_t ro[4] = {
      {.kind = CONS_JSON_SCHEMA, .spec = PERSON, .temperature = 0.0f, .logprobs = -1, .bias_id = -1},
      {.spec = NULL, .temperature = 0.0f, .logprobs = -1, .bias_id = -1, .max_tokens = 40},
      {.kind = CONS_JSON_SCHEMA, .spec = PERSON, .temperature = 1.0f, .seed = 3, .logprobs = -1, .bias_id = -1},
      {.kind = CONS_CHOICE, .spec = "[\"yes\",\"no\"]", .temperature = 1.0f, .seed = 4, .logprobs = -1, .bias_id = -1},
  };
  for (int i = 0; i < 4; i++) run1(f, &ro[i], &solo[i]);
  sched_t *s = mk_sched(f);
  for (int i = 0; i < 4; i++) submit_req(s, &ro[i], &batch[i]);
  tu_sched_run_all(s, NULL);
  cons_cache_stats_t cs;
  sched_constraint_stats(s, &cs);
  sched_stats_t st;
  sched_stats(s, &st);
  sched_free(s);
  for (int i = 0; i < 4; i++) {
    assert_int_equal(batch[i].n, solo[i].n);
    assert_memory_equal(batch[i].ids, solo[i].ids, sizeof(int32_t) * (size_t)solo[i].n);
  }
  assert_int_equal(cs.compiled, 2); /* PERSON once, the choice once */
  assert_int_equal(cs.hits, 1);
  assert_int_equal(st.constrained_tokens, (uint64_t)(batch[0].n + batch[2].n + batch[3].n));
}

/* starts_in_reasoning: the reasoning part is free until </think> (forced here by a +100 bias,
 * which the mask overrides once the answer is constrained); the answer is valid JSON. */
static void test_reasoning_then_constrained(void **state) {
  fx_t *f = *state;
  static out_t o;
  const int32_t end = tok_find(f->tok, "</think>");
  assert_true(end >= 0);
  req_opts_t ro = {.kind = CONS_JSON_SCHEMA, .spec = PERSON, .temperature = 1.0f, .seed = 9, .logprobs = -1,
                   .starts_in_reasoning = 1, .bias_id = end};
  run1(f, &ro, &o);
  assert_int_equal(o.ids[0], end);
  char why[128] = "";
  if (!valid_person(o.text, o.text_len, why, sizeof why)) fail_msg("%s: %.*s (%s)", why, (int)o.text_len, o.text, o.error);
}

/* CONS_TOOL_CALLS (tool_choice required with parallel calls): after a call the output ends or
 * another call follows. With the end-of-turn ids banned (-100) a call always follows, and each
 * parses; without the bias the sequence ends with one or more calls. */
static void test_tool_calls_several(void **state) {
  fx_t *f = *state;
  static out_t o;
  const char *tools = "[{\"type\":\"function\",\"function\":{\"name\":\"get_time\",\"parameters\":{\"type\":\"object\","
                      "\"properties\":{\"tz\":{\"enum\":[\"utc\",\"cet\"]}},\"required\":[\"tz\"]}}}]";
  req_opts_t ro = {.kind = CONS_TOOL_CALLS, .spec = tools, .temperature = 1.0f, .seed = 1, .logprobs = -1,
                   .bias_id = tok_eos(f->tok), .bias_id2 = tok_eot(f->tok), .bias_val = -100, .tools_json = tools,
                   .max_tokens = 120};
  run1(f, &ro, &o);
  if (o.n_tools < 2) fail_msg("%d calls, finish %d, text '%s' (%s)", o.n_tools, o.finish, o.text, o.error);
  assert_string_equal(o.tool_name, "get_time");
  assert_true(o.finish == SCHED_FINISH_LENGTH || o.finish == SCHED_FINISH_TOOL_CALLS);
  for (int k = 0; k < 3; k++) {
    req_opts_t r2 = {.kind = CONS_TOOL_CALLS, .spec = tools, .temperature = 1.0f, .seed = (uint64_t)k, .logprobs = -1,
                     .bias_id = -1, .tools_json = tools};
    run1(f, &r2, &o);
    if (o.n_tools < 1 || (o.finish != SCHED_FINISH_TOOL_CALLS && o.finish != SCHED_FINISH_LENGTH))
      fail_msg("seed %d: %d calls, finish %d (%s)", k, o.n_tools, o.finish, o.error);
  }
}

/* No escape through <think> (issue 27 item 4): with thinking off (no may_think, not in
 * reasoning) a biased <think> (+8 as in the report, and +100) is masked like any other token the
 * grammar does not allow, </think> too; the output stays valid JSON. */
static void test_think_masked(void **state) {
  fx_t *f = *state;
  static out_t o;
  const int32_t ids[2] = {tok_find(f->tok, "<think>"), tok_find(f->tok, "</think>")};
  assert_true(ids[0] >= 0 && ids[1] >= 0);
  const float bias[2] = {8, 100};
  for (int t = 0; t < 4; t++) {
    req_opts_t ro = {.kind = CONS_JSON_SCHEMA, .spec = PERSON, .temperature = 1.0f, .seed = (uint64_t)t, .logprobs = -1,
                     .bias_id = ids[t / 2], .bias_val = bias[t % 2]};
    run1(f, &ro, &o);
    for (int i = 0; i < o.n; i++) assert_int_not_equal(o.ids[i], ids[t / 2]);
    char why[128] = "";
    if (!valid_person(o.text, o.text_len, why, sizeof why)) fail_msg("%s: %.*s (%s)", why, (int)o.text_len, o.text, o.error);
  }
}

/* A reasoning part that never closes (</think> banned by a -100 bias) ends at its budget (half of
 * max_tokens 400 here): the mask then allows only </think>, exactly at token 200, and the answer
 * after it is constrained: the grammar completes (STOP) within the tokens left. */
static void test_think_budget(void **state) {
  fx_t *f = *state;
  static out_t o;
  const int32_t end = tok_find(f->tok, "</think>");
  req_opts_t ro = {.kind = CONS_JSON_SCHEMA, .spec = PERSON, .temperature = 1.0f, .seed = 3, .logprobs = -1,
                   .starts_in_reasoning = 1, .bias_id = end, .bias_val = -100, .ignore_eos = 1, .max_tokens = 400};
  run1(f, &ro, &o);
  assert_true(o.n > 201);
  for (int i = 0; i < 200; i++) assert_int_not_equal(o.ids[i], end);
  assert_int_equal(o.ids[200], end);
  assert_int_equal(o.finish, SCHED_FINISH_STOP);
}

/* tool_choice: the tool-call format through the chat output parser: one call of a named tool,
 * arguments valid for its parameters, finish TOOL_CALLS. */
static void test_tool_call(void **state) {
  fx_t *f = *state;
  static out_t o;
  const char *tools =
      "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\","
      "\"properties\":{\"city\":{\"type\":\"string\",\"maxLength\":8},\"days\":{\"type\":\"integer\"}},"
      "\"required\":[\"city\",\"days\"]}}},{\"type\":\"function\",\"function\":{\"name\":\"noop\"}}]";
  for (int k = 0; k < 3; k++) {
    req_opts_t ro = {.kind = CONS_TOOL_CALL, .spec = tools, .temperature = 1.0f, .seed = (uint64_t)k, .logprobs = -1,
                     .bias_id = -1, .tools_json = tools};
    run1(f, &ro, &o);
    if (o.finish != SCHED_FINISH_TOOL_CALLS || o.n_tools != 1)
      fail_msg("seed %d: finish %d, %d calls, text '%s' (%s)", k, o.finish, o.n_tools, o.text, o.error);
    json_t *a = json_loadb(o.tool_args, o.args_len, 0, NULL);
    if (!json_is_object(a)) fail_msg("arguments: %s", o.tool_args);
    if (!strcmp(o.tool_name, "get_weather")) {
      assert_true(json_is_string(json_object_get(a, "city")) && json_is_integer(json_object_get(a, "days")));
      assert_int_equal(json_object_size(a), 2);
    } else {
      assert_string_equal(o.tool_name, "noop");
    }
    print_message("  tool call seed %d: %s(%s)\n", k, o.tool_name, o.tool_args);
    json_decref(a);
  }
}

/* ignore_eos under a constraint: the end-of-sequence token the grammar allows once "7" is complete
 * ("7#" is the other choice; -100 bans #) is taken as text, and it completes the grammar: the
 * choice stops there (STOP), it neither runs on unconstrained nor hangs. (logit_bias samples on
 * the host.) */
static void test_ignore_eos(void **state) {
  fx_t *f = *state;
  static out_t o;
  int32_t *b = NULL;
  size_t nb = 0;
  gt_err_t err = {0};
  assert_int_equal(tok_encode(f->tok, "#", 1, 0, &b, &nb, &err), 0);
  assert_int_equal(nb, 1);
  req_opts_t ro = {.kind = CONS_CHOICE, .spec = "[\"7\",\"7#\"]", .temperature = 0, .logprobs = -1, .bias_id = b[0],
                   .bias_val = -100, .ignore_eos = 1};
  free(b);
  run1(f, &ro, &o);
  assert_int_equal(o.finish, SCHED_FINISH_STOP);
  assert_int_equal(o.n, 2); /* "7", then the end-of-sequence token */
  assert_int_equal(o.ids[1], tok_eos(f->tok));
}

/* Unconstrained: min_tokens holds against a +100 logit_bias on end-of-sequence (issue 27 item 6):
 * the first 5 tokens are not EOS, the 6th is, and the output ends there. */
static void test_min_tokens_eos_bias(void **state) {
  fx_t *f = *state;
  static out_t o;
  req_opts_t ro = {.temperature = 1.0f, .seed = 5, .logprobs = -1, .bias_id = tok_eos(f->tok), .min_tokens = 5};
  run1(f, &ro, &o);
  assert_int_equal(o.finish, SCHED_FINISH_STOP);
  assert_int_equal(o.n, 6);
  for (int i = 0; i < 5; i++) assert_int_not_equal(o.ids[i], tok_eos(f->tok));
  assert_int_equal(o.ids[5], tok_eos(f->tok));
}

/* allowed_token_ids: every sampled token is one of them (temperature 1, EOS ignored). */
static void test_allowed_token_ids(void **state) {
  fx_t *f = *state;
  static out_t o;
  static const int32_t allowed[] = {100, 137, 211};
  req_opts_t ro = {.temperature = 1.0f, .seed = 4, .logprobs = -1, .bias_id = -1, .ignore_eos = 1, .max_tokens = 24,
                   .allowed = allowed, .n_allowed = 3};
  run1(f, &ro, &o);
  assert_int_equal(o.n, 24);
  for (int i = 0; i < o.n; i++) assert_true(o.ids[i] == 100 || o.ids[i] == 137 || o.ids[i] == 211);
}

/* Bad specs are refused with the grammar's message; the cache is bounded (LRU). */
static void test_errors_and_cache(void **state) {
  fx_t *f = *state;
  sched_t *s = mk_sched(f);
  gt_err_t err = {0};
  cons_t *k = NULL;
  assert_int_not_equal(sched_constraint(s, CONS_JSON_SCHEMA, "{\"type\":", 8, &k, &err), 0);
  assert_null(k);
  const char *unsup = "{\"type\":\"array\",\"uniqueItems\":true}";
  assert_int_equal(sched_constraint(s, CONS_JSON_SCHEMA, unsup, strlen(unsup), &k, &err), GT_EUNSUPPORTED);
  assert_non_null(strstr(err.msg, "uniqueItems"));
  assert_int_not_equal(sched_constraint(s, CONS_TOOL_CALL, "[]", 2, &k, &err), 0);
  for (int i = 0; i < SCHED_CONS_CACHE + 5; i++) {
    char spec[64];
    snprintf(spec, sizeof spec, "[\"c%d\"]", i);
    assert_int_equal(sched_constraint(s, CONS_CHOICE, spec, strlen(spec), &k, &err), 0);
    cons_unref(k);
  }
  cons_cache_stats_t cs;
  sched_constraint_stats(s, &cs);
  assert_int_equal(cs.entries, SCHED_CONS_CACHE);
  assert_int_equal(cs.evicted, 5);
  sched_free(s);
}


/* A schema no output can satisfy: "a" must be a string of a character from an empty class. The
 * grammar compiles (the start state is alive), the output runs into a dead end after '{"a":' and
 * its bounded whitespace, where no token can continue it. */
#define DEAD_END_SCHEMA                                                                               \
  "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"pattern\":\"[^\\\\s\\\\S]\"}},"   \
  "\"required\":[\"a\"]}"

/* A dead end finishes the choice with ERROR and a message that says so, after the text so far was
 * delivered, on the device-sampled path (logits_mask) and the host-sampled one (logprobs), which
 * agree token for token. */
static void test_dead_end(void **state) {
  fx_t *f = *state;
  static out_t dev, host;
  req_opts_t ro = {.kind = CONS_JSON_SCHEMA, .spec = DEAD_END_SCHEMA, .temperature = 0.0f, .logprobs = -1, .bias_id = -1};
  run1(f, &ro, &dev);
  ro.logprobs = 0;
  run1(f, &ro, &host);
  out_t *both[2] = {&dev, &host};
  for (int i = 0; i < 2; i++) {
    out_t *o = both[i];
    print_message("  dead end (%s path): %d tokens '%s' -> %s\n", i ? "host" : "device", o->n, o->text, o->error);
    assert_int_equal(o->finish, SCHED_FINISH_ERROR);
    assert_non_null(strstr(o->error, "constraint: dead end after"));
    assert_true(o->n > 0); /* mid-output: '{' at least came first */
    /* '{', the key, ':' and whitespace: the value's opening quote is never allowed */
    assert_true(o->text[0] == '{' && strstr(o->text, "\"a\"") && strchr(o->text, ':'));
    const char *after = strrchr(o->text, ':') + 1;
    assert_int_equal(strspn(after, " \t\n"), strlen(after));
  }
  assert_int_equal(dev.n, host.n);
  assert_memory_equal(dev.ids, host.ids, sizeof(int32_t) * (size_t)dev.n);
  assert_string_equal(dev.error, host.error);
}

/* A grammar error (here the state limit, set to 1 so that no mask fits) ends the choice with ERROR
 * and a message naming that cause, not a dead end, on both sampling paths. */
static void test_grammar_error(void **state) {
  fx_t *f = *state;
  static out_t o;
  for (int host = 0; host < 2; host++) {
    sched_t *s = mk_sched_limited(f, 1);
    req_opts_t ro = {.kind = CONS_JSON_SCHEMA, .spec = PERSON, .temperature = 0.0f, .logprobs = host ? 0 : -1,
                     .bias_id = -1};
    submit_req(s, &ro, &o);
    tu_sched_run_all(s, NULL);
    sched_free(s);
    print_message("  grammar error (%s path): %s\n", host ? "host" : "device", o.error);
    assert_int_equal(o.finals, 1);
    assert_int_equal(o.finish, SCHED_FINISH_ERROR);
    assert_non_null(strstr(o.error, "grammar automaton outgrew its limits"));
    assert_null(strstr(o.error, "dead end"));
    assert_int_equal(o.n, 0);
  }
}

/* Runs ro on s to completion; *st: the stats of ro's constraint afterwards. */
static void run_stats(sched_t *s, const req_opts_t *ro, cons_stats_t *st) {
  static out_t o;
  gt_err_t err = {0};
  cons_t *k = NULL;
  submit_req(s, ro, &o);
  tu_sched_run_all(s, NULL);
  assert_int_equal(o.finish, SCHED_FINISH_STOP);
  assert_int_equal(sched_constraint(s, ro->kind, ro->spec, strlen(ro->spec), &k, &err), 0);
  cons_stats(k, st);
  cons_unref(k);
}

/* Requests with the same schema share one mask cache: the same request again computes no mask;
 * another one (sampled) computes fewer than it does on a scheduler of its own; one cache serves
 * them all. */
static void test_mask_cache_shared(void **state) {
  fx_t *f = *state;
  req_opts_t greedy = {.kind = CONS_JSON_SCHEMA, .spec = PERSON, .temperature = 0.0f, .logprobs = -1, .bias_id = -1};
  req_opts_t sampled = greedy;
  sampled.temperature = 1.0f;
  sampled.seed = 5;
  cons_stats_t alone, st[3];
  sched_t *s = mk_sched(f);
  run_stats(s, &sampled, &alone);
  sched_free(s);
  s = mk_sched(f);
  run_stats(s, &greedy, &st[0]);
  run_stats(s, &greedy, &st[1]);
  run_stats(s, &sampled, &st[2]);
  sched_free(s);
  print_message("  masks computed / copied: greedy %" PRIu64 " / %" PRIu64 ", greedy again +%" PRIu64 " / +%" PRIu64
                ", then sampled +%" PRIu64 " / +%" PRIu64 " (alone: %" PRIu64 " / %" PRIu64 ")\n",
                st[0].mask_fills, st[0].mask_hits, st[1].mask_fills - st[0].mask_fills,
                st[1].mask_hits - st[0].mask_hits, st[2].mask_fills - st[1].mask_fills,
                st[2].mask_hits - st[1].mask_hits, alone.mask_fills, alone.mask_hits);
  assert_true(st[0].mask_fills > 0);
  assert_int_equal(st[1].mask_fills, st[0].mask_fills); /* every state of the same walk is cached */
  assert_true(st[1].mask_hits - st[0].mask_hits >= st[0].mask_fills);
  assert_true(st[2].mask_fills - st[1].mask_fills < alone.mask_fills);
  assert_int_equal(st[2].caches, 1);
  assert_int_equal(st[2].moves, 0);
}

/* Feeds ids[0..n) to q, each checked against q's mask first, while the accepts say CONS_MORE.
 * Returns the last accept's result, a negative GT_E* of the mask or the accept, GT_EINTERNAL for
 * a dead end (an empty mask) or GT_EINVAL for a token the mask does not allow; *n_fed: the tokens
 * accepted. No cmocka assertion: the threads of test_mask_cache_threads call it too. */
static int feed_ids(cons_seq_t *q, const int32_t *ids, size_t n, uint32_t *mask, int nv, size_t *n_fed) {
  int rc = CONS_MORE;
  for (*n_fed = 0; *n_fed < n && rc == CONS_MORE; (*n_fed)++) {
    const int32_t id = ids[*n_fed];
    const int allowed = cons_seq_mask(q, mask, nv);
    if (allowed <= 0) return allowed ? allowed : GT_EINTERNAL;
    if (!(mask[id / 32] >> (id % 32) & 1u)) return GT_EINVAL;
    if ((rc = cons_seq_accept(q, id)) < 0) return rc;
  }
  return rc;
}

/* Feeds text's tokens to q (feed_ids; a failure on an error); returns the last accept's result. */
static int feed(const fx_t *f, cons_seq_t *q, const char *text, uint32_t *mask) {
  int32_t *ids = NULL;
  size_t n = 0, fed = 0;
  gt_err_t err = {0};
  assert_int_equal(tok_encode(f->tok, text, strlen(text), 0, &ids, &n, &err), 0);
  const int rc = feed_ids(q, ids, n, mask, (int)tok_n_vocab(f->tok), &fed);
  free(ids);
  if (rc < 0) fail_msg("'%s' token %zu: %d (%s)", text, fed, rc, cons_strerror(rc));
  return rc;
}

/* A grammar that outgrows a cache's state limit (json_object nested ever deeper, 400 states):
 * the sequence that does it fails with GT_ERANGE, after moving once to a cache of its own; a
 * sequence that was running on the full shared cache moves too and completes; a new sequence
 * gets a fresh shared cache and completes. */
static void test_mask_cache_full(void **state) {
  fx_t *f = *state;
  gt_err_t err = {0};
  cons_cache_t *c = NULL;
  cons_t *k = NULL;
  assert_int_equal(cons_cache_create(f->tok, 4, 400, &c, &err), 0);
  assert_int_equal(cons_get(c, CONS_JSON_OBJECT, "", 0, &k, &err), 0);
  uint32_t *mask = malloc(sizeof(uint32_t) * ((tok_n_vocab(f->tok) + 31) / 32));
  assert_non_null(mask);
  cons_seq_t *early = NULL, *deep = NULL, *late = NULL;
  assert_int_equal(cons_seq_create(k, 0, 0, &early, &err), 0);
  assert_int_equal(feed(f, early, "{\"a\":", mask), CONS_MORE);
  assert_int_equal(cons_seq_create(k, 0, 0, &deep, &err), 0);
  int32_t *open = NULL;
  size_t n_open = 0;
  assert_int_equal(tok_encode(f->tok, "{\"b\":[", 6, 0, &open, &n_open, &err), 0);
  int rc = CONS_MORE, depth = 0;
  for (size_t i = 0; i < n_open && rc == CONS_MORE; i++) rc = cons_seq_accept(deep, open[i]);
  const int32_t bracket = open[n_open - 1]; /* '[' alone (checked by the accepts below) */
  free(open);
  while (rc == CONS_MORE && depth < 4000) {
    rc = cons_seq_accept(deep, bracket);
    depth++;
  }
  cons_stats_t st;
  cons_stats(k, &st);
  print_message("  deep nesting: %s at depth %d; moves %" PRIu64 "\n", cons_strerror(rc), depth, st.moves);
  assert_int_equal(rc, GT_ERANGE);
  assert_true(depth < 4000);
  assert_int_equal(st.moves, 1);
  cons_seq_free(deep);
  assert_int_equal(cons_seq_create(k, 0, 0, &late, &err), 0); /* the full cache is replaced */
  assert_int_equal(feed(f, late, "{\"b\": [1, {\"c\": true}]}", mask), CONS_DONE);
  assert_int_equal(feed(f, early, "12}", mask), CONS_DONE);
  cons_stats(k, &st);
  print_message("  after: caches %" PRIu64 ", moves %" PRIu64 "\n", st.caches, st.moves);
  assert_int_equal(st.caches, 2);
  assert_int_equal(st.moves, 2); /* early needed a state the full cache could not take */
  cons_seq_free(late);
  cons_seq_free(early);
  free(mask);
  cons_unref(k);
  cons_cache_free(c);
}

/* Threads that each run sequences of one constraint at once (as the scheduler's submit threads
 * and its parallel mask fill do) on a small state limit: sequence s nests objects and arrays
 * by the bits of s, so together they need far more states than one cache holds while each
 * fits alone; shared caches fill and are replaced, running sequences move, and every sequence
 * completes. */
enum { MT_THREADS = 4, MT_SEQS = 24, MT_DEPTH = 8 };

typedef struct {
  const fx_t *f;
  cons_t *k;
  int t, done, failed;
  char why[512];
} mt_job_t;

static void *mt_run(void *arg) {
  mt_job_t *j = arg;
  const int nv = (int)tok_n_vocab(j->f->tok);
  uint32_t *mask = malloc(sizeof(uint32_t) * (size_t)((nv + 31) / 32));
  for (int i = 0; i < MT_SEQS && mask && !j->failed; i++) {
    const unsigned bits = (unsigned)(j->t * MT_SEQS + i) * 37u;
    char text[256] = "{\"a\":"; /* json_object: an object at the top */
    size_t n = strlen(text);
    for (int l = 0; l < MT_DEPTH; l++) n += (size_t)snprintf(text + n, sizeof text - n, "%s", bits >> l & 1 ? "{\"k\":" : "[");
    n += (size_t)snprintf(text + n, sizeof text - n, "%u", bits % 1000);
    for (int l = MT_DEPTH; l-- > 0;) n += (size_t)snprintf(text + n, sizeof text - n, "%s", bits >> l & 1 ? "}" : "]");
    n += (size_t)snprintf(text + n, sizeof text - n, "}");
    int32_t *ids = NULL;
    size_t n_ids = 0;
    cons_seq_t *q = NULL;
    gt_err_t err = {0};
    int rc = tok_encode(j->f->tok, text, n, 0, &ids, &n_ids, &err);
    size_t fed = 0;
    if (!rc) rc = cons_seq_create(j->k, 0, 0, &q, &err);
    if (!rc && (rc = feed_ids(q, ids, n_ids, mask, nv, &fed)) >= 0)
      rc = rc == CONS_DONE && fed == n_ids ? 0 : GT_EINTERNAL; /* done at the last token, not before */
    if (rc) {
      j->failed = 1;
      snprintf(j->why, sizeof j->why, "%s: %d (%s)", text, rc, rc < 0 ? cons_strerror(rc) : "");
    }
    j->done += !rc;
    cons_seq_free(q);
    free(ids);
  }
  free(mask);
  return NULL;
}

static void test_mask_cache_threads(void **state) {
  fx_t *f = *state;
  gt_err_t err = {0};
  cons_cache_t *c = NULL;
  cons_t *k = NULL;
  assert_int_equal(cons_cache_create(f->tok, 4, 600, &c, &err), 0);
  assert_int_equal(cons_get(c, CONS_JSON_OBJECT, "", 0, &k, &err), 0);
  mt_job_t jobs[MT_THREADS];
  pthread_t th[MT_THREADS];
  for (int t = 0; t < MT_THREADS; t++) {
    jobs[t] = (mt_job_t){.f = f, .k = k, .t = t};
    assert_int_equal(pthread_create(&th[t], NULL, mt_run, &jobs[t]), 0);
  }
  int done = 0;
  for (int t = 0; t < MT_THREADS; t++) {
    pthread_join(th[t], NULL);
    if (jobs[t].failed) fail_msg("thread %d: %s", t, jobs[t].why);
    done += jobs[t].done;
  }
  cons_stats_t st;
  cons_stats(k, &st);
  print_message("  %d threads: %d sequences done; caches %" PRIu64 ", moves %" PRIu64 ", masks computed %" PRIu64
                " / copied %" PRIu64 "\n",
                MT_THREADS, done, st.caches, st.moves, st.mask_fills, st.mask_hits);
  assert_int_equal(done, MT_THREADS * MT_SEQS);
  assert_true(st.caches > 1); /* the limit was reached: the case under test happened */
  cons_unref(k);
  cons_cache_free(c);
}

int main(void) {
#ifdef SCHED_CONS_CUDA
  if (!be_cuda_available()) {
    printf("no CUDA device visible: GPU tests skipped\n");
    return 77;
  }
  /* batch-invariant products: these tests compare batched steps with single ones and the CPU */
  be_cuda_set_activations("fp32");
#endif
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_json_schema),           cmocka_unit_test(test_object_choice), cmocka_unit_test(test_regex),
      cmocka_unit_test(test_device_path_equals_host), cmocka_unit_test(test_batch_mixed),
      cmocka_unit_test(test_reasoning_then_constrained), cmocka_unit_test(test_tool_call),
      cmocka_unit_test(test_think_masked),          cmocka_unit_test(test_think_budget),
      cmocka_unit_test(test_tool_calls_several),
      cmocka_unit_test(test_ignore_eos),            cmocka_unit_test(test_errors_and_cache),
      cmocka_unit_test(test_min_tokens_eos_bias),   cmocka_unit_test(test_allowed_token_ids),
      cmocka_unit_test(test_dead_end),              cmocka_unit_test(test_grammar_error),
      cmocka_unit_test(test_mask_cache_shared),     cmocka_unit_test(test_mask_cache_full),
      cmocka_unit_test(test_mask_cache_threads),
  };
  if (getenv("GANTRY_TEST_FILTER")) cmocka_set_test_filter(getenv("GANTRY_TEST_FILTER")); /* e.g. "test_tool*" */
#ifdef SCHED_CONS_CUDA
  return cmocka_run_group_tests(tests, cuda_setup, tu_model_fx_teardown);
#else
  return cmocka_run_group_tests(tests, tu_model_fx_setup, tu_model_fx_teardown);
#endif
}
