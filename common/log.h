/* common/log.h — one line per event, key=value fields, level checked before formatting.
 *   GT_LOG_INFO("engine ready model=%s kv_tokens=%d", name, n);
 * Output goes to stderr as: 2026-11-30T02:04:51.123Z INFO engine ready model=... */
#ifndef GANTRY_COMMON_LOG_H
#define GANTRY_COMMON_LOG_H

typedef enum { GT_LEVEL_DEBUG = 0, GT_LEVEL_INFO, GT_LEVEL_WARN, GT_LEVEL_ERROR, GT_LEVEL_OFF } gt_level_t;

extern gt_level_t gt_log_level; /* default INFO; GANTRY_LOG=debug|info|warn|error|off sets it */

void gt_log_init_from_env(void);
void gt_log_write(gt_level_t lvl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define GT_LOG(lvl, ...)                                   \
  do {                                                     \
    if ((lvl) >= gt_log_level) gt_log_write((lvl), __VA_ARGS__); \
  } while (0)
#define GT_LOG_DEBUG(...) GT_LOG(GT_LEVEL_DEBUG, __VA_ARGS__)
#define GT_LOG_INFO(...) GT_LOG(GT_LEVEL_INFO, __VA_ARGS__)
#define GT_LOG_WARN(...) GT_LOG(GT_LEVEL_WARN, __VA_ARGS__)
#define GT_LOG_ERROR(...) GT_LOG(GT_LEVEL_ERROR, __VA_ARGS__)

#endif
