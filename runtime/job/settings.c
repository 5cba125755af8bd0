/*
 * The job's settings as a table (settings.def): the descriptors, the
 * list of known keys, the generic reader and the parsers of the keys
 * whose values are one of a set.
 */
#include "job_internal.h"

#include <esd/dispatch_solve.h>
#include <esd/log.h>

#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* settings.def's default for a key whose default depends on others */
#define COMPUTED(text) 0, .def_text = (text)

#define FIELD(F_)                                                                                  \
	.offset = offsetof(struct esd_job, F_), .size = sizeof(((struct esd_job *)0)->F_)
#define NAME(S_, K_) .name = #S_ "." #K_, .section = #S_, .key = #K_

const struct esd_setting esd_job_settings[] = {
#define ESD_SET_UINT(S_, K_, F_, D_, LO_, HI_, DOC_)                                               \
	{NAME(S_, K_), .type = ESD_SETTING_UINT, FIELD(F_), .def.u = D_, .min.u = LO_,             \
	 .max.u = HI_, .doc = DOC_},
#define ESD_SET_INT(S_, K_, F_, D_, LO_, HI_, DOC_)                                                \
	{NAME(S_, K_), .type = ESD_SETTING_INT, FIELD(F_), .def.i = D_, .min.i = LO_,              \
	 .max.i = HI_, .doc = DOC_},
#define ESD_SET_DOUBLE(S_, K_, F_, D_, LO_, HI_, DOC_)                                             \
	{NAME(S_, K_), .type = ESD_SETTING_DOUBLE, FIELD(F_), .def.d = D_, .min.d = LO_,           \
	 .max.d = HI_, .doc = DOC_},
#define ESD_SET_BOOL(S_, K_, F_, D_, DOC_)                                                         \
	{NAME(S_, K_), .type = ESD_SETTING_BOOL, FIELD(F_), .def.b = D_, .doc = DOC_},
#define ESD_SET_STRING(S_, K_, F_, D_, DOC_)                                                       \
	{NAME(S_, K_), .type = ESD_SETTING_STRING, FIELD(F_), .def.s = D_, .doc = DOC_},
#define ESD_SET_PARSED(S_, K_, T_, FN_, D_, E_, DOC_)                                              \
	{NAME(S_, K_), .type = ESD_SETTING_##T_, .parse = FN_, .def.s = D_, .expected = E_,        \
	 .doc = DOC_},
#define ESD_SET_LIST(S_, K_, D_, E_, DOC_)                                                         \
	{NAME(S_, K_), .type = ESD_SETTING_LIST, .def_text = D_, .expected = E_, .doc = DOC_},
#include "settings.def"
};

const size_t esd_job_nsettings = sizeof(esd_job_settings) / sizeof(esd_job_settings[0]);
_Static_assert(sizeof(esd_job_settings) / sizeof(esd_job_settings[0]) == JOB_NSETTINGS,
	       "job_setting_id follows settings.def");

const char *const esd_job_keys[] = {
#define KEY(S_, K_, ...) #S_ "." #K_,
#define ESD_SET_UINT   KEY
#define ESD_SET_INT    KEY
#define ESD_SET_DOUBLE KEY
#define ESD_SET_BOOL   KEY
#define ESD_SET_STRING KEY
#define ESD_SET_PARSED KEY
#define ESD_SET_LIST   KEY
#include "settings.def"
#undef KEY
	NULL,
};

const struct esd_setting *esd_job_setting(const char *name)
{
	for (size_t i = 0; name && i < esd_job_nsettings; i++)
		if (!strcmp(esd_job_settings[i].name, name))
			return &esd_job_settings[i];
	return NULL;
}

const char *esd_setting_type_name(enum esd_setting_type type)
{
	static const char *const names[] = {"uint", "int", "double", "bool", "string", "enum",
					    "list"};
	return (unsigned)type < sizeof(names) / sizeof(names[0]) ? names[type] : "?";
}

void esd_setting_default_text(const struct esd_setting *s, char *buf, size_t len)
{
	if (s->def_text) {
		snprintf(buf, len, "%s", s->def_text);
		return;
	}
	switch (s->expected ? ESD_SETTING_STRING : s->type) { /* PARSED: def.s */
	case ESD_SETTING_UINT:
		snprintf(buf, len, "%" PRIu64, s->def.u);
		break;
	case ESD_SETTING_INT:
		snprintf(buf, len, "%" PRId64, s->def.i);
		break;
	case ESD_SETTING_DOUBLE:
		snprintf(buf, len, "%g", s->def.d);
		break;
	case ESD_SETTING_BOOL:
		snprintf(buf, len, "%s", s->def.b ? "true" : "false");
		break;
	default:
		snprintf(buf, len, "%s", s->def.s && *s->def.s ? s->def.s : "(none)");
		break;
	}
}

/* v as a decimal, or 2^k, 2^k-1 where that is shorter */
static void u64_text(uint64_t v, char *buf, size_t len)
{
	for (int k = 16; k < 64; k++) {
		if (v == UINT64_C(1) << k) {
			snprintf(buf, len, "2^%d", k);
			return;
		}
		if (v == (UINT64_C(1) << k) - 1 || v == UINT64_MAX >> (63 - k)) {
			snprintf(buf, len, "2^%d-1", v == (UINT64_C(1) << k) - 1 ? k : k + 1);
			return;
		}
	}
	snprintf(buf, len, "%" PRIu64, v);
}

void esd_setting_bounds_text(const struct esd_setting *s, char *buf, size_t len)
{
	char lo[32], hi[32];
	switch (s->type) {
	case ESD_SETTING_UINT:
		if (!s->expected) {
			u64_text(s->min.u, lo, sizeof(lo));
			u64_text(s->max.u, hi, sizeof(hi));
			snprintf(buf, len, "[%s, %s]", lo, hi);
			return;
		}
		break;
	case ESD_SETTING_INT:
		snprintf(buf, len, "[%" PRId64 ", %" PRId64 "]", s->min.i, s->max.i);
		return;
	case ESD_SETTING_DOUBLE:
		snprintf(buf, len, "[%g, %g]", s->min.d, s->max.d);
		return;
	default:
		break;
	}
	snprintf(buf, len, "%s", s->expected ? s->expected : "");
}

int esd_job_setting_bad(const struct esd_config *cfg, const struct esd_setting *s, const char *why)
{
	const char *v, *where = esd_config_origin(cfg, s->section, s->key);
	esd_config_get_str(cfg, s->section, s->key, "", &v);
	ESD_ERR("config", "%s = '%s' (%s): %s", s->name, v, where ? where : "default", why);
	return -EINVAL;
}

static int read_number(const struct esd_config *cfg, const struct esd_setting *s,
		       const union esd_setting_value *def, void *field)
{
	union esd_setting_value v;
	int rc;
	switch (s->type) {
	case ESD_SETTING_UINT:
		rc = esd_config_get_u64(cfg, s->section, s->key, def->u, s->min.u, s->max.u, &v.u);
		if (!rc && s->size == sizeof(uint32_t))
			*(uint32_t *)field = (uint32_t)v.u;
		else if (!rc)
			*(uint64_t *)field = v.u;
		return rc;
	case ESD_SETTING_INT:
		rc = esd_config_get_i64(cfg, s->section, s->key, def->i, s->min.i, s->max.i, &v.i);
		if (!rc && s->size == sizeof(int32_t))
			*(int32_t *)field = (int32_t)v.i;
		else if (!rc)
			*(int64_t *)field = v.i;
		return rc;
	case ESD_SETTING_DOUBLE:
		rc = esd_config_get_double(cfg, s->section, s->key, def->d, s->min.d, s->max.d,
					   &v.d);
		if (!rc && s->size == sizeof(float))
			*(float *)field = (float)v.d;
		else if (!rc)
			*(double *)field = v.d;
		return rc;
	default:
		rc = esd_config_get_bool(cfg, s->section, s->key, def->b, &v.b);
		if (!rc)
			*(bool *)field = v.b;
		return rc;
	}
}

int esd_job_setting_read(const struct esd_config *cfg, const struct esd_setting *s,
		     const union esd_setting_value *def, struct esd_job *j)
{
	void *field = (char *)j + s->offset;
	const char *v;
	if (!def)
		def = &s->def;
	if (s->type != ESD_SETTING_STRING && !s->parse)
		return read_number(cfg, s, def, field) ? -EINVAL : 0;
	esd_config_get_str(cfg, s->section, s->key, def->s, &v);
	if (s->parse) {
		if (!s->parse(v, j))
			return 0;
		char why[256];
		snprintf(why, sizeof(why), "expected %s", s->expected);
		return esd_job_setting_bad(cfg, s, why);
	}
	snprintf(field, s->size, "%s", v);
	return 0;
}

int esd_job_settings_read(const struct esd_config *cfg, struct esd_job *j)
{
	int rc = 0;
	for (size_t i = 0; i < esd_job_nsettings; i++) {
		const struct esd_setting *s = &esd_job_settings[i];
		if (s->def_text || (!s->size && !s->parse))
			continue; /* read by code */
		if (esd_job_setting_read(cfg, s, NULL, j))
			rc = -EINVAL;
	}
	return rc;
}

int esd_job_parse_split(const char *s, struct esd_job *j)
{
	if (!strcasecmp(s, "equal"))
		j->split = ESD_JOB_SPLIT_EQUAL;
	else if (!strcasecmp(s, "link-aware"))
		j->split = ESD_JOB_SPLIT_LINK_AWARE;
	else if (!strcasecmp(s, "fit"))
		j->split = ESD_JOB_SPLIT_FIT;
	else
		return -EINVAL;
	return 0;
}

/* and the optimizer's hyper-parameters' defaults, which model.lr, eps,
 * beta1 and beta2 start from */
int esd_job_parse_optimizer(const char *s, struct esd_job *j)
{
	enum esd_optimizer opt = ESD_OPT_ADAGRAD;
	int rc = esd_optim_parse(s, &opt);
	esd_optim_params_default(&j->optim, rc ? ESD_OPT_ADAGRAD : opt);
	return rc ? -EINVAL : 0;
}

int esd_job_parse_policy(const char *s, struct esd_job *j)
{
	return esd_policy_parse(s, &j->policy) ? -EINVAL : 0;
}

int esd_job_parse_sync(const char *s, struct esd_job *j)
{
	if (!strcasecmp(s, "on-demand")) {
		j->sync = ESD_SYNC_ON_DEMAND;
	} else if (!strcasecmp(s, "full-set") || !strcasecmp(s, "het")) {
		j->sync = ESD_SYNC_FULL_SET;
		j->het = !strcasecmp(s, "het");
	} else {
		return -EINVAL;
	}
	return 0;
}

_Static_assert(ESD_SOLVE_MAX_K == 262144, "settings.def's dispatch.gpu_min_rows bound");

int esd_job_parse_gpu_min_rows(const char *s, struct esd_job *j)
{
	if (!strcmp(s, "measure")) {
		j->gpu_min_rows = ESD_JOB_GPU_MEASURE;
		return 0;
	}
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || end == s || *end || s[0] == '-' || v > ESD_SOLVE_MAX_K)
		return -EINVAL;
	j->gpu_min_rows = v;
	return 0;
}

int esd_job_parse_matrix(const char *s, struct esd_job *j)
{
	return esd_matrix_parse(s, &j->matrix) ? -EINVAL : 0;
}
