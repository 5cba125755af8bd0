/*
 * Leveled logging. One write(2) per line so lines of concurrent threads and
 * processes sharing stderr never interleave mid-line.
 */
#include <esd/log.h>
#include <esd/clock.h>

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

static _Atomic int log_level = -1; /* -1: not yet read from ESD_LOG */
static char log_tag[32] = "esd";
static int64_t log_t0;

static const char *const level_names[] = {"ERROR", "WARN", "INFO", "DEBUG"};

int esd_log_parse_level(const char *s, enum esd_log_level *out)
{
	static const char *const names[] = {"error", "warn", "info", "debug"};
	if (!s)
		return -EINVAL;
	for (int i = 0; i < 4; i++) {
		if (!strcasecmp(s, names[i]) || (s[0] == '0' + i && s[1] == '\0')) {
			*out = (enum esd_log_level)i;
			return 0;
		}
	}
	if (!strcasecmp(s, "warning")) {
		*out = ESD_LOG_WARN;
		return 0;
	}
	return -EINVAL;
}

enum esd_log_level esd_log_get_level(void)
{
	int l = atomic_load_explicit(&log_level, memory_order_relaxed);
	if (l < 0) {
		enum esd_log_level e = ESD_LOG_INFO;
		const char *env = getenv("ESD_LOG");
		if (env && esd_log_parse_level(env, &e) < 0)
			e = ESD_LOG_INFO;
		atomic_store(&log_level, (int)e);
		l = (int)e;
	}
	return (enum esd_log_level)l;
}

void esd_log_set_level(enum esd_log_level level)
{
	atomic_store(&log_level, (int)level);
}

void esd_log_init(const char *tag)
{
	if (tag) {
		strncpy(log_tag, tag, sizeof(log_tag) - 1);
		log_tag[sizeof(log_tag) - 1] = '\0';
	}
	log_t0 = esd_now_ns();
}

void esd_vlog(enum esd_log_level level, const char *component, const char *fmt, va_list ap)
{
	char buf[1024];
	int n;

	if ((int)level > (int)esd_log_get_level())
		return;
	if (!log_t0)
		log_t0 = esd_now_ns();
	int64_t t = esd_now_ns() - log_t0;
	n = snprintf(buf, sizeof(buf), "[%5lld.%06lld] %s/%s %s: ", (long long)(t / ESD_NS_PER_S),
		     (long long)(t % ESD_NS_PER_S / 1000), log_tag, component ? component : "-",
		     level_names[level]);
	if (n < 0)
		return;
	if ((size_t)n < sizeof(buf)) {
		int m = vsnprintf(buf + n, sizeof(buf) - (size_t)n, fmt, ap);
		if (m > 0)
			n += m;
	}
	if ((size_t)n >= sizeof(buf) - 1) {
		n = sizeof(buf) - 2;
		memcpy(buf + n - 3, "...", 3);
	}
	buf[n++] = '\n';
	ssize_t w = write(STDERR_FILENO, buf, (size_t)n);
	(void)w;
}

void esd_log(enum esd_log_level level, const char *component, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	esd_vlog(level, component, fmt, ap);
	va_end(ap);
}
