/*
 * esd/job_settings.h - the schema of a job's settings.
 *
 * One descriptor per key of the job file (name, type, default, bounds,
 * one line of doc), in the order of runtime/job/settings.def, where they
 * are written once. esd_job_from_config reads the job through it,
 * esd_job_keys lists its names, `esd-info --settings` prints it, and a
 * test holds docs/configuration.md's table to it (every key, every
 * default).
 */
#ifndef ESD_JOB_SETTINGS_H
#define ESD_JOB_SETTINGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct esd_job;

enum esd_setting_type {
	ESD_SETTING_UINT,
	ESD_SETTING_INT,
	ESD_SETTING_DOUBLE,
	ESD_SETTING_BOOL,
	ESD_SETTING_STRING,
	ESD_SETTING_ENUM,
	ESD_SETTING_LIST, /* one value, or one per worker or shard */
};

union esd_setting_value {
	uint64_t u;
	int64_t i;
	double d;
	bool b;
	const char *s;
};

struct esd_setting {
	const char *name; /* "section.key" */
	const char *section, *key;
	enum esd_setting_type type;
	/* the member of struct esd_job it is stored in; size 0: none (the
	 * value is stored by parse, or by code) */
	size_t offset, size;
	union esd_setting_value def; /* by type: u, i, d, b; s for the others */
	union esd_setting_value min, max; /* UINT, INT, DOUBLE */
	/* a default that depends on other keys, in words: the key is read
	 * by code, which computes it; NULL: def is the default */
	const char *def_text;
	const char *expected; /* what a value must be (PARSED and LIST keys) */
	/* store value s into job; 0, or -EINVAL (not one of expected) */
	int (*parse)(const char *s, struct esd_job *job);
	const char *doc; /* one line */
};

/* The settings, in settings.def's order, and their count. */
extern const struct esd_setting esd_job_settings[];
extern const size_t esd_job_nsettings;

/* The setting called name ("cache.ratio"), or NULL. */
const struct esd_setting *esd_job_setting(const char *name);

/* "uint", "int", "double", "bool", "string", "enum" or "list". */
const char *esd_setting_type_name(enum esd_setting_type type);

/* The default as docs/configuration.md writes it ("50", "0.25", "false",
 * "emark", "(none)" for an empty string, def_text for a computed one)
 * into buf (len bytes). */
void esd_setting_default_text(const struct esd_setting *s, char *buf, size_t len);

/* The bounds ("[1, 64]"), or what a value must be, into buf; "" for
 * bool and plain string keys. */
void esd_setting_bounds_text(const struct esd_setting *s, char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif /* ESD_JOB_SETTINGS_H */
