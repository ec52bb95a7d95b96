/* router/openai_embed.h — POST /v1/embeddings: OpenAI request JSON -> gantry.v1.EmbedRequest,
 * EmbedResponse -> the OpenAI list object. Pure functions (unit-tested without a network). */
#ifndef GANTRY_ROUTER_OPENAI_EMBED_H
#define GANTRY_ROUTER_OPENAI_EMBED_H
#include <stdbool.h>
#include <stddef.h>
#include "gantry/v1/engine.pb-c.h"
#include "router/openai.h"

#define OA_EMBED_MAX_INPUTS 2048

typedef struct {
  char model[256];
  bool base64;                  /* encoding_format "base64": little-endian float32, base64 */
  Gantry__V1__EmbedRequest *req; /* owned (protobuf_c_message_free_unpacked) */
} oa_embed_req_t;

/* Parses body: model (string), input (a string, an array of strings, an array of token ids or
 * an array of such arrays; nothing empty; at most OA_EMBED_MAX_INPUTS), encoding_format
 * ("float" | "base64"), dimensions (>= 1), truncate_prompt_tokens (vLLM, >= 1), user (an
 * end-user id: logged by OpenAI, accepted and unused), priority (vLLM). Any other key, or a bad
 * value: -1 with a 400 naming the parameter. */
int oa_embed_parse(const char *body, size_t len, oa_embed_req_t *out, oa_error_t *e);

/* The limits on an EmbedRequest, shared by /v1/embeddings (oa_embed_parse runs it) and the gRPC
 * front's Router.Embed: texts or tokens (not both), 1..OA_EMBED_MAX_INPUTS inputs, no empty text
 * or token list, token ids >= 0, dimensions at most 2^20. 0, or -1 with a 400 naming the
 * parameter ("input", "dimensions"). */
int oa_embed_check(const Gantry__V1__EmbedRequest *r, oa_error_t *e);
void oa_embed_req_free(oa_embed_req_t *r);

/* The response body (malloc'd JSON text, NULL when out of memory):
 * {"object":"list","data":[{"object":"embedding","index":i,"embedding":[..] | "base64"}],
 *  "model":model,"usage":{"prompt_tokens":n,"total_tokens":n}} */
char *oa_embed_body(const Gantry__V1__EmbedResponse *r, const char *model, bool base64);

/* base64 (RFC 4648, padded) of n float32 values in little-endian byte order (malloc'd, NUL-
 * terminated; NULL when out of memory): what OpenAI's encoding_format "base64" carries. */
char *oa_embed_b64(const float *v, size_t n);
#endif
