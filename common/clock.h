/* common/clock.h — monotonic time. */
#ifndef GANTRY_COMMON_CLOCK_H
#define GANTRY_COMMON_CLOCK_H
#include <stdint.h>
#include <time.h>

static inline int64_t gt_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}
static inline double gt_now_ms(void) { return (double)gt_now_ns() / 1e6; }
#endif
