/*
 * esd/clock.h - monotonic clock helpers.
 *
 * All durations in the runtime are int64 nanoseconds of CLOCK_MONOTONIC
 * (never wall time: it jumps). Header-only.
 */
#ifndef ESD_CLOCK_H
#define ESD_CLOCK_H

#include <stdint.h>
#include <time.h>
#include <errno.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ESD_NS_PER_US 1000LL
#define ESD_NS_PER_MS 1000000LL
#define ESD_NS_PER_S  1000000000LL

/* Nanoseconds of CLOCK_MONOTONIC. */
static inline int64_t esd_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * ESD_NS_PER_S + ts.tv_nsec;
}

static inline struct timespec esd_ns_to_timespec(int64_t ns)
{
	struct timespec ts;
	ts.tv_sec = ns / ESD_NS_PER_S;
	ts.tv_nsec = ns % ESD_NS_PER_S;
	return ts;
}

static inline double esd_ns_to_ms(int64_t ns)
{
	return (double)ns / 1e6;
}

static inline double esd_ns_to_s(int64_t ns)
{
	return (double)ns / 1e9;
}

/* Nanoseconds of CPU the calling thread has used (CLOCK_THREAD_CPUTIME_ID):
 * what the runtime's per-phase CPU counters are made of. */
static inline int64_t esd_thread_cpu_ns(void)
{
	struct timespec ts;
	if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts))
		return 0;
	return (int64_t)ts.tv_sec * ESD_NS_PER_S + ts.tv_nsec;
}

/* Sleep until the monotonic instant deadline_ns; restarts after signals. */
static inline void esd_sleep_until_ns(int64_t deadline_ns)
{
	struct timespec ts = esd_ns_to_timespec(deadline_ns);
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
		;
}

/* Sleep for ns nanoseconds (no-op for ns <= 0). */
static inline void esd_sleep_ns(int64_t ns)
{
	if (ns > 0)
		esd_sleep_until_ns(esd_now_ns() + ns);
}

/* Time stamp counter-free elapsed helper: ns since *start, then *start = now. */
static inline int64_t esd_lap_ns(int64_t *start)
{
	int64_t now = esd_now_ns();
	int64_t d = now - *start;
	*start = now;
	return d;
}

#ifdef __cplusplus
}
#endif
#endif /* ESD_CLOCK_H */
