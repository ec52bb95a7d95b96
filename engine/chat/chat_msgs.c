/* engine/chat/chat_msgs.c — OpenAI-style chat messages from JSON (jansson) into chat_msg_t. */
#include <stdlib.h>
#include <string.h>

#include "engine/chat/chat_internal.h"

/* ---------------------------------------------------------------- messages from JSON */

int chat_role_parse(const char *s, chat_role_t *out, gt_err_t *err) {
  static const char *const names[] = {"system", "user", "assistant", "tool"};
  for (int i = 0; i < 4; i++)
    if (s && strcmp(s, names[i]) == 0) {
      *out = (chat_role_t)i;
      return GT_OK;
    }
  return gt_err_set(err, GT_EINVAL, "unknown message role '%.64s' (expected system, user, "
                    "assistant or tool)", s ? s : "(null)");
}

typedef struct owned {
  void **p;
  size_t n, cap;
} owned_t;

static void *own(owned_t *o, void *ptr) {
  if (!ptr) return NULL;
  if (o->n == o->cap) {
    size_t cap = o->cap ? o->cap * 2 : 16;
    void **p = realloc(o->p, cap * sizeof *p);
    if (!p) { free(ptr); return NULL; }
    o->p = p;
    o->cap = cap;
  }
  o->p[o->n++] = ptr;
  return ptr;
}

static char *own_str(owned_t *o, const char *s, size_t n) {
  char *c = malloc(n + 1);
  if (!c) return NULL;
  memcpy(c, s, n);
  c[n] = 0;
  return own(o, c);
}

void chat_msgs_free(chat_msgs_t *m) {
  if (!m) return;
  owned_t *o = m->owned_;
  if (o) {
    for (size_t i = 0; i < o->n; i++) free(o->p[i]);
    free(o->p);
    free(o);
  }
  memset(m, 0, sizeof *m);
}

/* Optional string field: absent or null -> *out = NULL. */
static int opt_str(owned_t *o, const json_t *obj, const char *key, const char **out, size_t i,
                   gt_err_t *err) {
  *out = NULL;
  const json_t *v = json_object_get(obj, key);
  if (!v || json_is_null(v)) return GT_OK;
  if (!json_is_string(v)) return gt_err_set(err, GT_EINVAL, "messages[%zu].%s must be a string", i, key);
  *out = own_str(o, json_string_value(v), json_string_length(v));
  return *out ? GT_OK : gt_err_set(err, GT_ENOMEM, "out of memory");
}

static int parse_content(owned_t *o, const json_t *v, const char **out, size_t i, gt_err_t *err) {
  *out = NULL;
  if (!v || json_is_null(v)) return GT_OK;
  if (json_is_string(v)) {
    *out = own_str(o, json_string_value(v), json_string_length(v));
    return *out ? GT_OK : gt_err_set(err, GT_ENOMEM, "out of memory");
  }
  if (!json_is_array(v))
    return gt_err_set(err, GT_EINVAL, "messages[%zu].content must be a string, null or an array of parts", i);
  gt_sb_t b = {0};
  size_t k;
  json_t *part;
  json_array_foreach(v, k, part) {
    const char *type = json_string_value(json_object_get(part, "type"));
    const json_t *text = json_object_get(part, "text");
    if (!json_is_object(part) || !type) {
      free(b.p);
      return gt_err_set(err, GT_EINVAL, "messages[%zu].content[%zu]: part without a type", i, k);
    }
    if (strcmp(type, "text") != 0) {
      free(b.p);
      return gt_err_set(err, GT_EUNSUPPORTED, "messages[%zu].content[%zu]: '%.32s' parts are not "
                        "supported (text only)", i, k, type);
    }
    if (!json_is_string(text)) {
      free(b.p);
      return gt_err_set(err, GT_EINVAL, "messages[%zu].content[%zu]: text part without text", i, k);
    }
    if (k) gt_sb_addc(&b, '\n');
    gt_sb_add(&b, json_string_value(text), json_string_length(text));
  }
  if (b.oom) { free(b.p); return gt_err_set(err, GT_ENOMEM, "out of memory"); }
  *out = own(o, b.p ? b.p : calloc(1, 1));
  return *out ? GT_OK : gt_err_set(err, GT_ENOMEM, "out of memory");
}

static int parse_tool_calls(owned_t *o, const json_t *v, chat_msg_t *m, size_t i, gt_err_t *err) {
  if (!v || json_is_null(v)) return GT_OK;
  if (!json_is_array(v)) return gt_err_set(err, GT_EINVAL, "messages[%zu].tool_calls must be an array", i);
  size_t n = json_array_size(v);
  if (n == 0) return GT_OK;
  chat_tool_call_t *tc = own(o, calloc(n, sizeof *tc));
  if (!tc) return gt_err_set(err, GT_ENOMEM, "out of memory");
  for (size_t k = 0; k < n; k++) {
    const json_t *c = json_array_get(v, k);
    if (!json_is_object(c))
      return gt_err_set(err, GT_EINVAL, "messages[%zu].tool_calls[%zu] must be an object", i, k);
    const json_t *f = json_object_get(c, "function");
    if (!f) f = c; /* HF style: {name, arguments} without the "function" wrapper */
    if (!json_is_object(f))
      return gt_err_set(err, GT_EINVAL, "messages[%zu].tool_calls[%zu].function must be an object", i, k);
    const json_t *id = json_object_get(c, "id");
    if (id && json_is_string(id)) tc[k].id = own_str(o, json_string_value(id), json_string_length(id));
    const json_t *name = json_object_get(f, "name");
    if (!json_is_string(name))
      return gt_err_set(err, GT_EINVAL, "messages[%zu].tool_calls[%zu]: function name missing", i, k);
    tc[k].name = own_str(o, json_string_value(name), json_string_length(name));
    const json_t *args = json_object_get(f, "arguments");
    if (json_is_string(args)) {
      tc[k].arguments = own_str(o, json_string_value(args), json_string_length(args));
    } else if (json_is_object(args)) {
      char *s = json_dumps(args, JSON_COMPACT | JSON_REAL_PRECISION(17));
      tc[k].arguments = own(o, s);
    } else if (args && !json_is_null(args)) {
      return gt_err_set(err, GT_EINVAL,
                        "messages[%zu].tool_calls[%zu].arguments must be a JSON string or object", i, k);
    }
    if (!tc[k].name || (args && !json_is_null(args) && !tc[k].arguments) ||
        (id && json_is_string(id) && !tc[k].id))
      return gt_err_set(err, GT_ENOMEM, "out of memory");
  }
  m->tool_calls = tc;
  m->n_tool_calls = n;
  return GT_OK;
}

int chat_msgs_from_json(const json_t *messages, chat_msgs_t *out, gt_err_t *err) {
  memset(out, 0, sizeof *out);
  if (!json_is_array(messages)) return gt_err_set(err, GT_EINVAL, "messages must be a JSON array");
  owned_t *o = calloc(1, sizeof *o);
  size_t n = json_array_size(messages);
  chat_msg_t *m = o ? calloc(n ? n : 1, sizeof *m) : NULL;
  if (!o || !m) {
    free(o);
    free(m);
    return gt_err_set(err, GT_ENOMEM, "out of memory");
  }
  chat_msgs_t res = {m, n, o};
  if (!own(o, m)) {
    chat_msgs_free(&res);
    return gt_err_set(err, GT_ENOMEM, "out of memory");
  }
  int rc = GT_OK;
  for (size_t i = 0; i < n && rc == GT_OK; i++) {
    const json_t *x = json_array_get(messages, i);
    if (!json_is_object(x)) {
      rc = gt_err_set(err, GT_EINVAL, "messages[%zu] must be an object", i);
      break;
    }
    const char *role = json_string_value(json_object_get(x, "role"));
    if (!role) {
      rc = gt_err_set(err, GT_EINVAL, "messages[%zu]: missing role", i);
      break;
    }
    if ((rc = chat_role_parse(role, &m[i].role, err))) {
      gt_err_wrap(err, "messages[%zu]", i);
      break;
    }
    if ((rc = parse_content(o, json_object_get(x, "content"), &m[i].content, i, err))) break;
    if ((rc = opt_str(o, x, "reasoning_content", &m[i].reasoning_content, i, err))) break;
    if (!m[i].reasoning_content && (rc = opt_str(o, x, "reasoning", &m[i].reasoning_content, i, err))) break;
    if ((rc = parse_tool_calls(o, json_object_get(x, "tool_calls"), &m[i], i, err))) break;
    if ((rc = opt_str(o, x, "tool_call_id", &m[i].tool_call_id, i, err))) break;
  }
  if (rc) {
    chat_msgs_free(&res);
    return rc;
  }
  *out = res;
  return GT_OK;
}
