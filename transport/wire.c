/*
 * The bottom of a link, shared by every layer above it and the backends:
 * a wire's head from the options, its error text, deadlines. Calls
 * nothing of the layers above (link.c, rel.c, fault.c).
 */
#include "link_internal.h"

#include <esd/clock.h>

#include <stdarg.h>
#include <stdio.h>

#define DEFAULT_TIMEOUT_NS (5 * ESD_NS_PER_S)
#define DEFAULT_BACKLOG    (256u << 20)

int64_t deadline_after(int64_t timeout_ns)
{
	return timeout_ns < 0 ? -1 : esd_now_ns() + timeout_ns;
}

int wire_fail(struct wire *w, int rc, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(w->err, sizeof(w->err), fmt, ap);
	va_end(ap);
	return rc;
}

void wire_init(struct wire *w, const struct wire_ops *ops, const struct esd_link_opts *o)
{
	w->ops = ops;
	w->lim = o->limits;
	if (!w->lim.max_body)
		w->lim.max_body = ESD_PROTO_DEFAULT_MAX_BODY;
	if (!w->lim.max_rows)
		w->lim.max_rows = ESD_PROTO_DEFAULT_MAX_ROWS;
	if (!w->lim.max_dim)
		w->lim.max_dim = ESD_PROTO_DEFAULT_MAX_DIM;
	w->lim.max_body &= ~3u;
	w->timeout_ns = o->timeout_ns > 0 ? o->timeout_ns : DEFAULT_TIMEOUT_NS;
	w->rx_backlog_max = o->rx_backlog_max ? o->rx_backlog_max : DEFAULT_BACKLOG;
	w->err[0] = 0;
	w->peer[0] = 0;
	pthread_mutexattr_t ma;
	pthread_mutexattr_init(&ma);
	pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_RECURSIVE);
	pthread_mutex_init(&w->tx_mu, &ma);
	pthread_mutexattr_destroy(&ma);
	atomic_store(&w->rx_ns, esd_now_ns());
}

void wire_heard(struct wire *w)
{
	atomic_store_explicit(&w->rx_ns, esd_now_ns(), memory_order_relaxed);
}
