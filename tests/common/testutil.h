/* tests/common/testutil.h — helpers shared by the cmocka tests.
 * Fixtures are found through $GANTRY_GOLDEN (set by ctest, see CMakeLists.txt), built programs
 * through $GANTRY_BIN. */
#ifndef GANTRY_TESTS_TESTUTIL_H
#define GANTRY_TESTS_TESTUTIL_H

#include <jansson.h>
#include <stddef.h>

/* Path of a fixture: $GANTRY_GOLDEN/rel (static buffer, overwritten by the next call). */
const char *tu_golden(const char *rel);
/* Whole file into a malloc'd buffer (NUL-terminated, *len excludes the NUL); NULL if unreadable. */
void *tu_read_file(const char *path, size_t *len);
/* Parses a JSON fixture (relative to GANTRY_GOLDEN); fails the test if unreadable. */
json_t *tu_json(const char *rel);
/* Max over rows of ||out - ref|| / ||ref||, rows of n floats. */
double tu_max_row_rel_err(const float *out, const float *ref, int rows, int n);
/* Index of the largest of x[0..n-1] (the first on a tie; NaN never wins over x[0]). */
int tu_argmax(const float *x, int n);
/* Runs a shell command, captures stdout (malloc'd) and returns the exit status (-1 on failure). */
int tu_run(const char *cmd, char **out);
/* Path of a built program: $GANTRY_BIN/name (static buffer). */
const char *tu_bin(const char *name);

#endif
