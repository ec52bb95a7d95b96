/* common/fdlimit.c — see fdlimit.h. */
#include <errno.h>
#include <string.h>
#include <sys/resource.h>

#include "common/fdlimit.h"
#include "common/log.h"

#define FDLIMIT_CEIL ((rlim_t)1 << 20)

long gt_raise_nofile(void) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return -1;
  rlim_t want = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > FDLIMIT_CEIL ? FDLIMIT_CEIL : rl.rlim_max;
  if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < want) {
    const rlim_t old = rl.rlim_cur;
    rl.rlim_cur = want;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0) {
      GT_LOG_WARN("cannot raise the open-file limit from %llu to %llu: %s", (unsigned long long)old,
                  (unsigned long long)want, strerror(errno));
      rl.rlim_cur = old;
    }
  }
  return rl.rlim_cur == RLIM_INFINITY ? (long)FDLIMIT_CEIL : (long)rl.rlim_cur;
}
