/* engine/grammar/gr_regex.c — regex to grammar (temporary: not implemented yet). */
#include "engine/grammar/gr_internal.h"

int gr_regex(gr_builder_t *b, const char *spec, size_t len, int32_t *root, gt_err_t *err) {
  *root = -1;
  return gt_err_set(err, GT_EUNSUPPORTED, "guided_regex: not implemented yet");
}
