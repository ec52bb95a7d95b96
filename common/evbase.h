/* common/evbase.h — the one way gantry creates a libevent base.
 *
 * libevent measures timers with CLOCK_MONOTONIC_COARSE unless asked for a precise timer; that
 * clock lags CLOCK_MONOTONIC (gt_now_ns) by up to a jiffy (1-4 ms), so a 300 ms queue timeout
 * could fire a few ms before 300 ms had passed on the precise clock. Every base here asks for
 * the precise timer. Returns NULL on failure (out of memory). */
#ifndef GANTRY_COMMON_EVBASE_H
#define GANTRY_COMMON_EVBASE_H
#include <event2/event.h>

static inline struct event_base *gt_event_base_new(void) {
  struct event_config *cfg = event_config_new();
  if (!cfg) return NULL;
  event_config_set_flag(cfg, EVENT_BASE_FLAG_PRECISE_TIMER);
  struct event_base *b = event_base_new_with_config(cfg);
  event_config_free(cfg);
  return b;
}
#endif
