/* common/fdlimit.h — the process's file-descriptor limit. */
#ifndef GANTRY_COMMON_FDLIMIT_H
#define GANTRY_COMMON_FDLIMIT_H

/* Raises the soft RLIMIT_NOFILE to the hard limit (at most 1<<20) and returns the soft limit
 * now in force (-1 if it cannot be read). Logs one line when it could not be raised. */
long gt_raise_nofile(void);

#endif
