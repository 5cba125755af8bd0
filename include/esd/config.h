/*
 * esd/config.h - configuration from an INI file plus command-line overrides.
 *
 * Model: a flat table of "section.key" -> value, each entry remembering
 * where it came from ("esdd.ini:12" or "command line"). A file is loaded
 * with esd_config_load() (libinih), then overrides "section.key=value"
 * from the command line are applied with esd_config_set(); a later value
 * replaces an earlier one. Typed getters validate and convert; every error
 * is logged naming the key, the value and where it was set, e.g.
 *     config: cache.rows = 'lots' (node.ini:7): not an unsigned integer
 * and returned as -EINVAL (or -ERANGE when out of bounds).
 *
 * esd_config_check_keys() rejects keys the program does not know, so a
 * typo in a file is an error rather than a silently ignored setting.
 *
 * Not thread-safe: configure before starting threads.
 */
#ifndef ESD_CONFIG_H
#define ESD_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct esd_config;

/* Create an empty configuration. Returns 0 or -ENOMEM. Free with
 * esd_config_free(). */
int esd_config_create(struct esd_config **out);
void esd_config_free(struct esd_config *cfg);

/* Load an INI file. Keys outside any section go to section "global".
 * Returns 0, -ENOENT/-EACCES (cannot open; logged with the path) or
 * -EINVAL (syntax error; logged with path and line). On error nothing of
 * the file is kept. */
int esd_config_load(struct esd_config *cfg, const char *path);

/* Apply one override "section.key=value" (the key may also be given as
 * "key" for section "global"). Returns 0, -EINVAL (no '=' or empty key;
 * logged) or -ENOMEM. */
int esd_config_set(struct esd_config *cfg, const char *assignment);

/* Set a value programmatically; 'origin' is shown in errors. */
int esd_config_put(struct esd_config *cfg, const char *section, const char *key,
		   const char *value, const char *origin);

/* True if section.key is set. */
bool esd_config_has(const struct esd_config *cfg, const char *section, const char *key);

/* Where section.key was set ("job.ini:12", "command line"), or NULL when
 * it is unset. Owned by cfg, as the getters' strings. */
const char *esd_config_origin(const struct esd_config *cfg, const char *section,
			      const char *key);

/* Getters: if section.key is unset, *out = def and 0 is returned.
 * Strings are owned by cfg and valid until it is freed or the key is set
 * again. */
int esd_config_get_str(const struct esd_config *cfg, const char *section, const char *key,
		       const char *def, const char **out);
int esd_config_get_i64(const struct esd_config *cfg, const char *section, const char *key,
		       int64_t def, int64_t min, int64_t max, int64_t *out);
int esd_config_get_u64(const struct esd_config *cfg, const char *section, const char *key,
		       uint64_t def, uint64_t min, uint64_t max, uint64_t *out);
int esd_config_get_double(const struct esd_config *cfg, const char *section, const char *key,
			  double def, double min, double max, double *out);
/* Accepts true/false, yes/no, on/off, 1/0. */
int esd_config_get_bool(const struct esd_config *cfg, const char *section, const char *key,
			bool def, bool *out);
/* A byte size with optional suffix K, M, G, T (powers of 1024), e.g. "512M". */
int esd_config_get_size(const struct esd_config *cfg, const char *section, const char *key,
			uint64_t def, uint64_t *out);
/* A bit rate with optional suffix k, M, G (powers of 1000) and optional
 * "bit"/"bps", e.g. "5G", "500Mbit", "0.5Gbit"; 0 means unshaped. */
int esd_config_get_rate(const struct esd_config *cfg, const char *section, const char *key,
			uint64_t def, uint64_t *out);

/* Parsers used by the getters, for command-line tools. Return 0 or -EINVAL. */
int esd_parse_size(const char *s, uint64_t *out);
int esd_parse_rate(const char *s, uint64_t *out);
int esd_parse_u64(const char *s, uint64_t *out);
int esd_parse_i64(const char *s, int64_t *out);
int esd_parse_double(const char *s, double *out);

/* Fail with -EINVAL (logging each offender with where it was set) if a key
 * is not in 'known', a NULL-terminated list of "section.key" strings; a
 * known entry "section.*" accepts every key of that section. */
int esd_config_check_keys(const struct esd_config *cfg, const char *const *known);

/* Call fn for every entry, in insertion order; stops at a non-zero return
 * and returns it. */
int esd_config_foreach(const struct esd_config *cfg,
		       int (*fn)(const char *section, const char *key, const char *value,
				 const char *origin, void *arg),
		       void *arg);

#ifdef __cplusplus
}
#endif
#endif /* ESD_CONFIG_H */
