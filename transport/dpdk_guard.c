/*
 * Guarded bursts on memif ports: a peer's memory that goes away under a
 * reader is the peer's death, not this process's.
 *
 * DPDK 22.11's memif driver unmaps a connection's shared regions in the
 * EAL's interrupt thread when the peer leaves (memif_disconnect), with no
 * lock against a link thread that is inside rte_eth_rx_burst() or
 * rte_eth_tx_burst() on the same port: a peer killed at that moment made
 * the reader fault (SIGSEGV), and a peer that truncates a region it shared
 * makes it fault too (SIGBUS). Each burst on a memif port runs with a
 * thread-local jump buffer set; the handler of those two signals jumps
 * back out of the burst when the fault comes from inside one, and the
 * link fails as its peer gone. Any other fault goes to the action that was
 * installed before (the default, or a sanitizer's), as if this handler
 * were not there.
 *
 * Leaving a burst this way leaks the mbufs the burst had taken and leaves
 * the queue's bookkeeping as it was; the port is then only taken down.
 * The driver's burst code touches no lock: nothing is left held.
 * ESD_DPDK_GUARD=0 leaves the handler out (to see what it catches).
 */
#include "dpdk_internal.h"

#include <esd/log.h>

#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <rte_ethdev.h>

static struct sigaction old_segv, old_bus;
static pthread_once_t guard_once = PTHREAD_ONCE_INIT;
static bool guard_on;
static __thread sigjmp_buf *burst_jmp; /* set while this thread is in a burst */
static __thread volatile sig_atomic_t burst_fault; /* the signal that ended it */

static void chain(int sig, siginfo_t *si, void *uc)
{
	const struct sigaction *old = sig == SIGBUS ? &old_bus : &old_segv;
	if (old->sa_flags & SA_SIGINFO) {
		old->sa_sigaction(sig, si, uc);
		return;
	}
	if (old->sa_handler != SIG_DFL && old->sa_handler != SIG_IGN) {
		old->sa_handler(sig);
		return;
	}
	/* The default: die of this signal once the faulting access runs again. */
	signal(sig, SIG_DFL);
}

static void on_fault(int sig, siginfo_t *si, void *uc)
{
	sigjmp_buf *jb = burst_jmp;
	if (jb) {
		burst_jmp = NULL;
		burst_fault = sig;
		siglongjmp(*jb, 1);
	}
	chain(sig, si, uc);
}

static void guard_install(void)
{
	const char *env = getenv("ESD_DPDK_GUARD");
	if (env && !strcmp(env, "0"))
		return; /* to see the fault the guard catches (tests) */
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_fault;
	sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGSEGV, &sa, &old_segv) || sigaction(SIGBUS, &sa, &old_bus)) {
		ESD_WARN("transport", "dpdk: no guard on memif bursts (sigaction failed): a peer "
		         "killed while this process reads its ring can crash it");
		return;
	}
	guard_on = true;
}

void esd_dpdk_guard_init(void)
{
	pthread_once(&guard_once, guard_install);
}

/* One burst of op (rx or tx) under the guard; *fault: the signal that
 * ended it early, or 0. noinline: the jump buffer's frame must outlive
 * nothing but this call. */
__attribute__((noinline)) static uint16_t guarded(bool tx, uint16_t port, struct rte_mbuf **ms,
                                                  uint16_t n, int *fault)
{
	sigjmp_buf jb;
	*fault = 0;
	if (!guard_on)
		return tx ? rte_eth_tx_burst(port, 0, ms, n) : rte_eth_rx_burst(port, 0, ms, n);
	if (sigsetjmp(jb, 0)) {
		*fault = burst_fault;
		return 0;
	}
	burst_jmp = &jb;
	uint16_t done = tx ? rte_eth_tx_burst(port, 0, ms, n) : rte_eth_rx_burst(port, 0, ms, n);
	burst_jmp = NULL;
	return done;
}

uint16_t esd_dpdk_guarded_rx(uint16_t port, struct rte_mbuf **ms, uint16_t n, int *fault)
{
	return guarded(false, port, ms, n, fault);
}

uint16_t esd_dpdk_guarded_tx(uint16_t port, struct rte_mbuf **ms, uint16_t n, int *fault)
{
	return guarded(true, port, ms, n, fault);
}
