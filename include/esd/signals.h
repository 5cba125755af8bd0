/*
 * esd/signals.h - SIGINT and SIGTERM taken by a thread of their own.
 *
 * A daemon blocks both signals in every thread and waits for them in one
 * (sigwait), so no system call of its work is interrupted (no EINTR to
 * handle everywhere) and what a signal does runs as ordinary code, free
 * to take locks and log: esdd and esd-ps turn the first into a graceful
 * stop of the job and a second into abandoning it.
 */
#ifndef ESD_SIGNALS_H
#define ESD_SIGNALS_H

#ifdef __cplusplus
extern "C" {
#endif

/* Called on the signal thread for each SIGINT/SIGTERM; count is 1 for the
 * first one received, 2 for the second, ... */
typedef void (*esd_signal_fn)(int sig, unsigned count, void *arg);

/* Block SIGINT and SIGTERM in the calling thread, and so in every thread
 * it starts afterwards (call it before starting any), and start a
 * detached thread that calls fn for each. Returns 0 or -errno. */
int esd_signal_thread_start(esd_signal_fn fn, void *arg);

#ifdef __cplusplus
}
#endif
#endif /* ESD_SIGNALS_H */
