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

static __thread int t_rows = 0;  /* kc_pdl_set_rows */
static int g_all_rows = -1;      /* GANTRY_PDL_ALL_ROWS, read once */

KC_API void kc_pdl_set_rows(int rows) { t_rows = rows > 0 ? rows : 0; }

KC_API int kc_pdl_attr(unsigned ctas) {
  const int m = kc_pdl_mode();
  if (g_all_rows < 0) g_all_rows = (int)kc_env_int("GANTRY_PDL_ALL_ROWS", 0, 1 << 20, KC_PDL_ALL_ROWS);
  const int small_prev = t_prev_ctas <= KC_PDL_SMALL_CTAS, small = ctas <= KC_PDL_SMALL_CTAS;
  const int few_rows = t_rows > 0 && t_rows <= g_all_rows;
  const int use = m == 1 || (m == 2 && (small_prev || few_rows)) || (m == 3 && (small_prev || small));
  t_prev_ctas = ctas;
  return use;
}
