/* Private to runtime/job: what job.c, backend.c and settings.c share. */
#ifndef ESD_RUNTIME_JOB_INTERNAL_H
#define ESD_RUNTIME_JOB_INTERNAL_H

#include <esd/job.h>
#include <esd/job_settings.h>

/* The settings' places in esd_job_settings: JOB_SET_ps_shards, ... */
enum job_setting_id {
#define ESD_SET_UINT(S_, K_, ...)   JOB_SET_##S_##_##K_,
#define ESD_SET_INT(S_, K_, ...)    JOB_SET_##S_##_##K_,
#define ESD_SET_DOUBLE(S_, K_, ...) JOB_SET_##S_##_##K_,
#define ESD_SET_BOOL(S_, K_, ...)   JOB_SET_##S_##_##K_,
#define ESD_SET_STRING(S_, K_, ...) JOB_SET_##S_##_##K_,
#define ESD_SET_PARSED(S_, K_, ...) JOB_SET_##S_##_##K_,
#define ESD_SET_LIST(S_, K_, ...)   JOB_SET_##S_##_##K_,
#include "settings.def"
	JOB_NSETTINGS
};
#define JOB_SETTING(S_, K_) (&esd_job_settings[JOB_SET_##S_##_##K_])

/* Read every setting whose default is one value (def_text NULL) and that
 * has a field or a parser, in the table's order, each error logged
 * naming the key, the value, where it was set and the bounds or what a
 * value must be. Returns 0 or -EINVAL (after reading them all). */
int esd_job_settings_read(const struct esd_config *cfg, struct esd_job *j);

/* Read one setting with the default def (NULL: the table's) into its
 * field or through its parser, as esd_job_settings_read does. For the keys
 * code reads (a computed default). Returns 0 or -EINVAL. */
int esd_job_setting_read(const struct esd_config *cfg, const struct esd_setting *s,
		     const union esd_setting_value *def, struct esd_job *j);

/* Log "section.key = 'value' (where): why" for a value set in cfg;
 * returns -EINVAL. */
int esd_job_setting_bad(const struct esd_config *cfg, const struct esd_setting *s, const char *why);

/* Split a comma list into at most max items (blanks around each trimmed;
 * "X*N" stands for N copies of X); returns the count, or -EINVAL for an
 * empty, too long or badly repeated item, or too many. */
int esd_job_split(const char *s, char items[][ESD_JOB_ADDR_LEN], int max);

/* ps.dpdk_port, ps.dpdk_eal, the MAC lists and the checks of the
 * backend's own keys beyond their bounds, each error logged naming key
 * and value. Needs j->n and j->shards. Returns 0 or -EINVAL. */
int esd_job_backend_from_config(const struct esd_config *cfg, struct esd_job *j);

/* The parsers settings.def names (PARSED keys): 0 or -EINVAL. */
int esd_job_parse_split(const char *s, struct esd_job *j);
int esd_job_parse_optimizer(const char *s, struct esd_job *j);
int esd_job_parse_policy(const char *s, struct esd_job *j);
int esd_job_parse_sync(const char *s, struct esd_job *j);
int esd_job_parse_gpu_min_rows(const char *s, struct esd_job *j);
int esd_job_parse_matrix(const char *s, struct esd_job *j);
int esd_job_parse_backend(const char *s, struct esd_job *j);
int esd_job_parse_zero_copy(const char *s, struct esd_job *j);
int esd_job_parse_rdma_device(const char *s, struct esd_job *j);

#endif /* ESD_RUNTIME_JOB_INTERNAL_H */
