/* engine/grammar/gr_compile.c — gr_compile: every kind into one byte-level grammar. */
#include "engine/grammar/gr_internal.h"

int gr_compile(gr_kind_t kind, const char *spec, size_t len, gr_grammar_t **out, gt_err_t *err) {
  *out = NULL;
  gr_builder_t b;
  gr_b_init(&b);
  int32_t root = -1;
  int rc;
  switch (kind) {
  case GR_JSON_SCHEMA: rc = gr_json_schema(&b, spec, len, &root, err); break;
  case GR_JSON_OBJECT: rc = gr_json_object(&b, &root, err); break;
  case GR_CHOICE: rc = gr_choice(&b, spec, len, &root, err); break;
  case GR_REGEX: rc = gr_regex(&b, spec, len, &root, err); break;
  default: rc = gt_err_set(err, GT_EINVAL, "grammar: unknown kind %d", (int)kind); break;
  }
  if (rc != GT_OK) {
    gr_b_free(&b);
    return rc;
  }
  return gr_b_finish(&b, root, out, err);
}
