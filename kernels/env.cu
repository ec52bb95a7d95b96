/* kernels/env.cu — kc_env_int (common.cuh): how every kernel switch reads its variable. */
#include <stdlib.h>

#include "kernels/common.cuh"

KC_API long kc_env_int(const char *name, long lo, long hi, long dflt) {
  const char *e = getenv(name);
  if (!e || !*e) return dflt;
  char *end = NULL;
  const long v = strtol(e, &end, 10);
  return *end == '\0' && v >= lo && v <= hi ? v : dflt;
}
