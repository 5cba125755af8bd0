/*
 * esd/log.h - leveled logging to stderr.
 *
 * Lines look like
 *     [   12.345678] esdd/cache WARN: huge pages unavailable, using 4 KiB pages
 * with seconds since the process started (monotonic clock), the process
 * tag (esd_log_init), the component and the level. The level comes from
 * esd_log_set_level() or, at first use, the ESD_LOG environment variable
 * (error, warn, info, debug; default info). Thread-safe: a line is written
 * with one write(2).
 */
#ifndef ESD_LOG_H
#define ESD_LOG_H

#include <stdarg.h>

#ifdef __cplusplus
extern "C" {
#endif

enum esd_log_level {
	ESD_LOG_ERROR = 0,
	ESD_LOG_WARN = 1,
	ESD_LOG_INFO = 2,
	ESD_LOG_DEBUG = 3,
};

/* Set the process tag printed on every line (e.g. "esdd0"); copied. */
void esd_log_init(const char *tag);
void esd_log_set_level(enum esd_log_level level);
enum esd_log_level esd_log_get_level(void);
/* Parse "error", "warn", "info", "debug" (or 0..3). Returns 0 or -EINVAL. */
int esd_log_parse_level(const char *s, enum esd_log_level *out);

void esd_log(enum esd_log_level level, const char *component, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
void esd_vlog(enum esd_log_level level, const char *component, const char *fmt, va_list ap);

#define ESD_ERR(comp, ...)  esd_log(ESD_LOG_ERROR, comp, __VA_ARGS__)
#define ESD_WARN(comp, ...) esd_log(ESD_LOG_WARN, comp, __VA_ARGS__)
#define ESD_INFO(comp, ...) esd_log(ESD_LOG_INFO, comp, __VA_ARGS__)
#define ESD_DBG(comp, ...)                                                                         \
	do {                                                                                       \
		if (esd_log_get_level() >= ESD_LOG_DEBUG)                                           \
			esd_log(ESD_LOG_DEBUG, comp, __VA_ARGS__);                                  \
	} while (0)

#ifdef __cplusplus
}
#endif
#endif /* ESD_LOG_H */
