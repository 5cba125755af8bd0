/* SIGINT and SIGTERM on a thread of their own (esd/signals.h). */
#include <esd/signals.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>

struct sig_thread {
	esd_signal_fn fn;
	void *arg;
	sigset_t set;
};

static void *signal_main(void *p)
{
	prctl(PR_SET_NAME, "esd-signals", 0, 0, 0);
	struct sig_thread *st = p;
	for (unsigned count = 1;; count++) {
		int sig;
		while (sigwait(&st->set, &sig))
			;
		st->fn(sig, count, st->arg);
	}
	return NULL;
}

int esd_signal_thread_start(esd_signal_fn fn, void *arg)
{
	struct sig_thread *st = malloc(sizeof(*st));
	if (!st)
		return -ENOMEM;
	st->fn = fn;
	st->arg = arg;
	sigemptyset(&st->set);
	sigaddset(&st->set, SIGINT);
	sigaddset(&st->set, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &st->set, NULL);
	pthread_t th;
	int rc = -pthread_create(&th, NULL, signal_main, st);
	if (rc) {
		free(st);
		return rc;
	}
	pthread_detach(th);
	return 0;
}
