/* Private to tools/esd-solve: the cost-matrix file format. */
#ifndef ESD_SOLVE_PARSE_H
#define ESD_SOLVE_PARSE_H

#include <stddef.h>
#include <stdint.h>

struct esd_solve_input {
	uint32_t k, n, m;
	int64_t *cost; /* k x n, malloc'd: the caller frees it */
};

/* Parse 'text' (len bytes, NUL-terminated): first line "k n m", then k
 * lines of n non-negative integers (at most ESD_COST_MAX), k = m * n,
 * 1 <= n <= ESD_MAX_WORKERS, k <= ESD_SOLVE_MAX_K; CRLF, blank space and
 * trailing blank lines are accepted. Returns 0, -EINVAL with "LINE: what"
 * in err, or -ENOMEM. */
int esd_solve_parse(const char *text, size_t len, struct esd_solve_input *in, char *err,
                    size_t errlen);

#endif
