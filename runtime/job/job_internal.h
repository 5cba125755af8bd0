/* Private to runtime/job: what job.c and backend.c share. */
#ifndef ESD_RUNTIME_JOB_INTERNAL_H
#define ESD_RUNTIME_JOB_INTERNAL_H

#include <esd/job.h>

/* Split a comma list into at most max items (blanks around each trimmed;
 * "X*N" stands for N copies of X); returns the count, or -EINVAL for an
 * empty, too long or badly repeated item, or too many. */
int job_split(const char *s, char items[][ESD_JOB_ADDR_LEN], int max);

/* ps.backend and the backend's own keys (ps.dpdk_*, ps.rdma_*), each
 * error logged naming key and value. Needs j->n and j->shards. Returns 0
 * or -EINVAL. */
int job_backend_from_config(const struct esd_config *cfg, struct esd_job *j);

#endif /* ESD_RUNTIME_JOB_INTERNAL_H */
