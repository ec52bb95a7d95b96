/* router/openai_embed.c — see openai_embed.h. */
#include "router/openai_embed.h"

#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

void oa_embed_req_free(oa_embed_req_t *r) {
  if (r && r->req) protobuf_c_message_free_unpacked(&r->req->base, NULL);
  if (r) r->req = NULL;
}

static const char *const known[] = {"model", "input", "encoding_format", "dimensions", "truncate_prompt_tokens", "user",
                                    "priority"};

/* input as token-id arrays (ints: one input; arrays of ints: one each) into r */
static int parse_tokens(json_t *in, Gantry__V1__EmbedRequest *r, oa_error_t *e) {
  const bool nested = json_is_array(json_array_get(in, 0));
  const size_t n = nested ? json_array_size(in) : 1;
  if (!(r->tokens = calloc(n, sizeof *r->tokens))) return oa_err(e, 500, "server_error", NULL, NULL, "out of memory");
  for (size_t i = 0; i < n; i++) {
    json_t *a = nested ? json_array_get(in, i) : in;
    char name[32];
    snprintf(name, sizeof name, nested ? "input[%zu]" : "input", i);
    if (!json_is_array(a))
      return oa_err(e, 400, "invalid_request_error", "input", "invalid_value", "'%s' must be a non-empty array of token ids",
                    name);
    Gantry__V1__TokenIds *t = malloc(sizeof *t);
    if (!t) return oa_err(e, 500, "server_error", NULL, NULL, "out of memory");
    gantry__v1__token_ids__init(t);
    r->tokens[r->n_tokens++] = t;
    int32_t *ids = NULL;
    size_t k = 0;
    if (oa_token_ids(a, "input", name, &ids, &k, e)) return -1;
    t->ids = ids;
    t->n_ids = k;
  }
  return 0;
}

static int parse_texts(json_t *in, Gantry__V1__EmbedRequest *r, oa_error_t *e) {
  const bool one = json_is_string(in);
  const size_t n = one ? 1 : json_array_size(in);
  if (!(r->texts = calloc(n, sizeof *r->texts))) return oa_err(e, 500, "server_error", NULL, NULL, "out of memory");
  for (size_t i = 0; i < n; i++) {
    json_t *s = one ? in : json_array_get(in, i);
    if (!json_is_string(s))
      return oa_err(e, 400, "invalid_request_error", "input", "invalid_type",
                    "'input[%zu]' must be a string (an input array holds strings or token ids, not both)", i);
    if (!(r->texts[r->n_texts] = strdup(json_string_value(s))))
      return oa_err(e, 500, "server_error", NULL, NULL, "out of memory");
    r->n_texts++;
  }
  return 0;
}

static int parse_obj(json_t *b, oa_embed_req_t *out, oa_error_t *e) {
  const char *k;
  json_t *v;
  json_object_foreach(b, k, v) {
    bool ok = false;
    for (size_t i = 0; i < sizeof known / sizeof *known; i++) ok |= !strcmp(k, known[i]);
    if (!ok) return oa_err(e, 400, "invalid_request_error", k, "unsupported_parameter", "'%s' is not supported by /v1/embeddings", k);
  }
  json_t *m = json_object_get(b, "model");
  if (!json_is_string(m) || !json_string_length(m) || json_string_length(m) >= sizeof out->model)
    return oa_err(e, 400, "invalid_request_error", "model", "invalid_value", "'model' must be a non-empty string");
  snprintf(out->model, sizeof out->model, "%s", json_string_value(m));
  json_t *fmt = json_object_get(b, "encoding_format");
  if (fmt && !json_is_null(fmt)) {
    if (!json_is_string(fmt) || (strcmp(json_string_value(fmt), "float") && strcmp(json_string_value(fmt), "base64")))
      return oa_err(e, 400, "invalid_request_error", "encoding_format", "invalid_value",
                    "'encoding_format' must be \"float\" or \"base64\"");
    out->base64 = !strcmp(json_string_value(fmt), "base64");
  }
  Gantry__V1__EmbedRequest *r = out->req;
  json_t *d = json_object_get(b, "dimensions");
  if (d && !json_is_null(d)) {
    if (!json_is_integer(d) || json_integer_value(d) < 1 || json_integer_value(d) > UINT32_MAX) /* at most 2^20: oa_embed_check */
      return oa_err(e, 400, "invalid_request_error", "dimensions", "invalid_value", "'dimensions' must be an integer >= 1");
    r->dimensions = (uint32_t)json_integer_value(d);
  }
  json_t *t = json_object_get(b, "truncate_prompt_tokens");
  if (t && !json_is_null(t)) {
    if (!json_is_integer(t) || json_integer_value(t) < 1 || json_integer_value(t) > INT32_MAX)
      return oa_err(e, 400, "invalid_request_error", "truncate_prompt_tokens", "invalid_value",
                    "'truncate_prompt_tokens' must be an integer >= 1");
    r->truncate_prompt_tokens = (uint32_t)json_integer_value(t);
  }
  json_t *p = json_object_get(b, "priority");
  if (p && !json_is_null(p)) {
    if (!json_is_integer(p) || json_integer_value(p) < INT32_MIN || json_integer_value(p) > INT32_MAX)
      return oa_err(e, 400, "invalid_request_error", "priority", "invalid_value", "'priority' must be an integer");
    r->priority = (int32_t)json_integer_value(p);
  }
  json_t *u = json_object_get(b, "user");
  if (u && !json_is_null(u) && !json_is_string(u))
    return oa_err(e, 400, "invalid_request_error", "user", "invalid_type", "'user' must be a string");
  json_t *in = json_object_get(b, "input");
  if (!in) return oa_err(e, 400, "invalid_request_error", "input", "missing_required_parameter", "'input' is required");
  /* an empty array: no inputs, which oa_embed_check refuses */
  if (json_is_array(in) && json_array_size(in) == 0) return 0;
  if (json_is_array(in) && json_array_size(in) > OA_EMBED_MAX_INPUTS) /* before copying them */
    return oa_embed_check(&(Gantry__V1__EmbedRequest){.n_texts = json_array_size(in)}, e);
  if (json_is_string(in) || (json_is_array(in) && json_is_string(json_array_get(in, 0)))) return parse_texts(in, r, e);
  if (json_is_array(in) && (json_is_integer(json_array_get(in, 0)) || json_is_array(json_array_get(in, 0))))
    return parse_tokens(in, r, e);
  return oa_err(e, 400, "invalid_request_error", "input", "invalid_type",
                "'input' must be a string, an array of strings, an array of token ids or an array of such arrays");
}

int oa_embed_parse(const char *body, size_t len, oa_embed_req_t *out, oa_error_t *e) {
  memset(out, 0, sizeof *out);
  json_error_t je;
  json_t *b = len ? json_loadb(body, len, 0, &je) : NULL;
  if (!b || !json_is_object(b)) {
    json_decref(b);
    return oa_err(e, 400, "invalid_request_error", NULL, "invalid_json", "body must be a JSON object {\"model\", \"input\"}");
  }
  if (!(out->req = malloc(sizeof *out->req))) {
    json_decref(b);
    return oa_err(e, 500, "server_error", NULL, NULL, "out of memory");
  }
  gantry__v1__embed_request__init(out->req);
  int rc = parse_obj(b, out, e);
  if (!rc) rc = oa_embed_check(out->req, e);
  json_decref(b);
  if (rc) oa_embed_req_free(out);
  return rc;
}

int oa_embed_check(const Gantry__V1__EmbedRequest *r, oa_error_t *e) {
  const size_t n = r->n_texts ? r->n_texts : r->n_tokens;
  if (r->n_texts && r->n_tokens)
    return oa_err(e, 400, "invalid_request_error", "input", "invalid_type",
                  "'input' holds strings or token ids, not both");
  if (n == 0) return oa_err(e, 400, "invalid_request_error", "input", "invalid_value", "'input' must not be empty");
  if (n > OA_EMBED_MAX_INPUTS)
    return oa_err(e, 400, "invalid_request_error", "input", "invalid_value", "'input' holds %zu items; at most %d", n,
                  OA_EMBED_MAX_INPUTS);
  for (size_t i = 0; i < r->n_texts; i++)
    if (!r->texts[i] || !r->texts[i][0])
      return oa_err(e, 400, "invalid_request_error", "input", "invalid_value", "'input[%zu]' must not be empty", i);
  for (size_t i = 0; i < r->n_tokens; i++) {
    if (!r->tokens[i] || r->tokens[i]->n_ids == 0)
      return oa_err(e, 400, "invalid_request_error", "input", "invalid_value",
                    "'input[%zu]' must be a non-empty array of token ids", i);
    for (size_t k = 0; k < r->tokens[i]->n_ids; k++)
      if (r->tokens[i]->ids[k] < 0)
        return oa_err(e, 400, "invalid_request_error", "input", "invalid_value",
                      "'input[%zu][%zu]' must be a token id (an integer >= 0)", i, k);
  }
  if (r->dimensions > 1u << 20)
    return oa_err(e, 400, "invalid_request_error", "dimensions", "invalid_value", "'dimensions' must be at most %u",
                  1u << 20);
  return 0;
}

char *oa_embed_b64(const float *v, size_t n) {
  static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  const size_t nb = n * 4, no = (nb + 2) / 3 * 4;
  uint8_t *b = malloc(nb ? nb : 1);
  char *o = malloc(no + 1);
  if (!b || !o) {
    free(b), free(o);
    return NULL;
  }
  for (size_t i = 0; i < n; i++) { /* little-endian whatever the host order */
    uint32_t u;
    memcpy(&u, &v[i], 4);
    for (int k = 0; k < 4; k++) b[4 * i + k] = (uint8_t)(u >> (8 * k));
  }
  size_t j = 0;
  for (size_t i = 0; i < nb; i += 3) {
    const uint32_t x = (uint32_t)b[i] << 16 | (i + 1 < nb ? (uint32_t)b[i + 1] << 8 : 0) | (i + 2 < nb ? b[i + 2] : 0);
    o[j++] = tab[x >> 18 & 63];
    o[j++] = tab[x >> 12 & 63];
    o[j++] = i + 1 < nb ? tab[x >> 6 & 63] : '=';
    o[j++] = i + 2 < nb ? tab[x & 63] : '=';
  }
  o[j] = 0;
  free(b);
  return o;
}

char *oa_embed_body(const Gantry__V1__EmbedResponse *r, const char *model, bool base64) {
  json_t *data = json_array();
  for (size_t i = 0; data && i < r->n_data; i++) {
    const Gantry__V1__Embedding *em = r->data[i];
    json_t *val;
    if (base64) {
      char *s = oa_embed_b64(em->values, em->n_values);
      val = s ? json_string(s) : NULL;
      free(s);
    } else {
      val = json_array();
      for (size_t k = 0; val && k < em->n_values; k++) json_array_append_new(val, json_real(em->values[k]));
    }
    json_array_append_new(data, json_pack("{s:s,s:I,s:o*}", "object", "embedding", "index", (json_int_t)i, "embedding", val));
  }
  json_t *o = json_pack("{s:s,s:o*,s:s,s:{s:I,s:I}}", "object", "list", "data", data, "model", model, "usage",
                        "prompt_tokens", (json_int_t)r->prompt_tokens, "total_tokens", (json_int_t)r->prompt_tokens);
  char *s = o ? json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(9)) : NULL;
  json_decref(o);
  return s;
}
