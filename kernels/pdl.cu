/* kernels/pdl.cu — when kc_launch (common.cuh) uses programmatic dependent launch. */
#include <stdlib.h>

#include "kernels/common.cuh"

static int g_pdl_force = -1, g_pdl_env = -1;
/* the grid size of the calling thread's previous kc_launch (each rank's worker thread launches
 * its own stream in order; graph capture records in the same order) */
static __thread unsigned t_prev_ctas = 0xffffffffu;

KC_API int kc_pdl_mode(void) {
  if (g_pdl_force >= 0) return g_pdl_force;
  if (g_pdl_env < 0) g_pdl_env = (int)kc_env_int("GANTRY_PDL", 0, 3, 2);
  return g_pdl_env;
}

KC_API void kc_pdl_set_mode(int mode) { g_pdl_force = mode < 0 || mode > 3 ? -1 : mode; }

KC_API int kc_pdl_attr(unsigned ctas) {
  const int m = kc_pdl_mode();
  const int small_prev = t_prev_ctas <= KC_PDL_SMALL_CTAS, small = ctas <= KC_PDL_SMALL_CTAS;
  const int use = m == 1 || (m == 2 && small_prev) || (m == 3 && (small_prev || small));
  t_prev_ctas = ctas;
  return use;
}
