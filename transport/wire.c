/*
 * The bottom of a link, shared by every layer above it and the backends:
 * a wire's head from the options, its error text, deadlines, and the hash
 * a backend takes of a keyed link's frames as it copies them in (gmac.c).
 * Calls nothing of the layers above (link.c, rel.c, fault.c).
 */
#include "link_internal.h"

#include <esd/clock.h>

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define DEFAULT_TIMEOUT_NS (5 * ESD_NS_PER_S)
#define DEFAULT_BACKLOG    (256u << 20)

int64_t esd_deadline_after(int64_t timeout_ns)
{
	return timeout_ns < 0 ? -1 : esd_now_ns() + timeout_ns;
}

int esd_wire_fail(struct wire *w, int rc, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(w->err, sizeof(w->err), fmt, ap);
	va_end(ap);
	return rc;
}

void esd_wire_init(struct wire *w, const struct wire_ops *ops, const struct esd_link_opts *o)
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

void esd_wire_heard(struct wire *w)
{
	atomic_store_explicit(&w->rx_ns, esd_now_ns(), memory_order_relaxed);
}

bool esd_wire_rx_run_start(const struct wire *w, struct gmac_run *r, const uint8_t *hdr,
                           size_t len)
{
	uint8_t canon[ESD_FRAME_HDR_SIZE];
	uint16_t flags;
	memcpy(&flags, hdr + 6, 2);
	if (!w->rx_mac || !(flags & ESD_FLAG_TAGGED) || len < ESD_FRAME_HDR_SIZE + AUTH_TAG_BYTES)
		return false;
	/* as auth.c's tags cover it: the reliable layer's fields zero */
	memcpy(canon, hdr, sizeof(canon));
	flags &= (uint16_t) ~(ESD_FLAG_RELIABLE | ESD_FLAG_RETRANSMIT);
	memcpy(canon + 6, &flags, 2);
	memset(canon + 16, 0, 8);
	esd_gmac_run_start(r);
	esd_gmac_run_add(w->rx_mac, r, canon, sizeof(canon), NULL);
	return true;
}

void esd_wire_rx_hash_start(struct wire *w, struct fbuf *b, const uint8_t *hdr)
{
	b->hashed = esd_wire_rx_run_start(w, &b->run, hdr, b->len);
}

void esd_wire_rx_take(struct wire *w, struct fbuf *b, size_t off, const uint8_t *src, size_t len)
{
	uint8_t *dst = b->data + off;
	size_t end = b->hashed ? b->len - AUTH_TAG_BYTES : 0; /* the tag's offset */
	size_t h = off >= end ? 0 : end - off < len ? end - off : len;
	if (h)
		esd_gmac_run_add(w->rx_mac, &b->run, src, h, src == dst ? NULL : dst);
	if (src != dst)
		memcpy(dst + h, src + h, len - h);
}
