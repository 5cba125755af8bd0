/*
 * The reliable message layer: exactly-once, in-order delivery of frames
 * over a backend that may lose, duplicate or reorder them (DPDK packets;
 * any backend while fault injection is on).
 *
 * Sender: every frame gets the next sequence number (header seq, flag
 * RELIABLE) and a copy stays in the window until a cumulative LINK_ACK
 * covers it. One retransmission timer runs while frames are unacknowledged
 * (RFC 6298): it restarts when the oldest is first sent and whenever an
 * acknowledgement covers more, so frames waiting in a queue behind others
 * whose acknowledgements keep coming are not sent twice, however long the
 * queue. When it expires, the oldest frame is sent again, the timeout
 * doubles and the timer restarts. Then an acknowledgement of just that
 * frame which its copy earned (the receiver's LINK_ACK says so with
 * RETRANSMIT: the next one is missing too) has the next one sent at once,
 * so a burst of losses costs a round trip a frame, not a timeout each; one
 * that covers more, or that the first sending earned (the expiry was a
 * late ack, not a loss, as when the peer stalled), ends the recovery.
 * Three acknowledgements in a row that repeat the last one while frames
 * are out (the receiver answers arrivals past a hole) start the same
 * recovery at once, without the timer (fast retransmit; a loss at the tail
 * of a burst still waits for it). Frames that arrived are taken before the
 * timer is looked at. The timeout follows the round trips measured
 * (smoothed round trip plus four deviations, from frames sent once only,
 * Karn's rule), never below the link's rto_ns, where it starts: a frame
 * that takes longer on the wire than rto_ns (a large one over a slow link)
 * is not sent twice. With no progress of acknowledgements for timeout_ns
 * the peer is declared dead (-ETIMEDOUT).
 * Receiver: frames arrive at rx_next (delivered, then any buffered
 * successors), ahead of it within the window (buffered), or behind it
 * (duplicates, dropped). Before a keyed link's handshake is done, frames
 * ahead are dropped too and one frame at a time is taken from below. Every arrival is answered with a cumulative
 * LINK_ACK, sent when the receiver returns to the application or is about
 * to block, so one ack covers a burst.
 */
#include "link_internal.h"

#include <esd/clock.h>
#include <esd/err.h>
#include <esd/log.h>

#include <stdlib.h>
#include <string.h>

#define DEFAULT_RTO_NS (20 * ESD_NS_PER_MS)
#define MAX_RTO_NS     (60 * ESD_NS_PER_S)
#define DEFAULT_WINDOW 256u
#define ACK_EVERY      16u
#define DUPACKS        3u /* repeated acks that say a frame is lost */


struct rel {
	uint32_t window;
	int64_t rto_min_ns; /* the link's rto_ns: the first timeout and the least */
	int64_t rto_ns;     /* the timeout now */
	int64_t srtt_ns, rttvar_ns;
	bool measured; /* srtt_ns and rttvar_ns hold a measure */
	/* sender */
	uint64_t tx_next;  /* next sequence number to assign (from 1) */
	uint64_t tx_acked; /* every seq <= tx_acked is acknowledged */
	struct fbuf **txq; /* window slots, by seq % window */
	int64_t progress_ns; /* the oldest frame's first send, or the last ack progress */
	int64_t timer_ns;    /* the retransmission timer's start */
	uint64_t recover;    /* after an expiry or DUPACKS: the last seq sent then (0: none) */
	uint64_t resent;     /* the last seq sent again since */
	uint32_t dupacks;    /* acks in a row that repeated tx_acked */
	/* receiver */
	uint64_t rx_next;  /* next in-order seq expected */
	struct fbuf **ooo; /* frames ahead of rx_next, by seq % window */
	struct fbuf *dq_head, *dq_tail;
	size_t dq_bytes;
	struct fbuf *cur; /* lent to the application */
	int err;          /* sticky error from below: sends report it at once,
	                   * receives once dq is empty */
	uint32_t ack_pending;
	bool rx_last_retx; /* the frame at rx_next - 1 came as a retransmission */
	struct esd_buf ackbuf;
	struct bufcache *cache; /* the wire's */
};

int esd_rel_create(struct esd_link *l, struct rel **out)
{
	struct rel *r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->window = l->o.window ? l->o.window : DEFAULT_WINDOW;
	r->rto_min_ns = l->o.rto_ns > 0 ? l->o.rto_ns : DEFAULT_RTO_NS;
	r->rto_ns = r->rto_min_ns;
	r->tx_next = 1;
	r->rx_next = 1;
	r->txq = calloc(r->window, sizeof(*r->txq));
	r->ooo = calloc(r->window, sizeof(*r->ooo));
	if (!r->txq || !r->ooo) {
		free(r->txq);
		free(r->ooo);
		free(r);
		return -ENOMEM;
	}
	esd_buf_init(&r->ackbuf);
	r->cache = &l->w->cache;
	*out = r;
	return 0;
}

static void node_free(struct rel *r, struct fbuf *n)
{
	esd_fbuf_put(r->cache, n);
}

static void free_list(struct rel *r, struct fbuf *n)
{
	while (n) {
		struct fbuf *next = n->next;
		node_free(r, n);
		n = next;
	}
}

void esd_rel_destroy(struct rel *r)
{
	if (!r)
		return;
	for (uint32_t i = 0; i < r->window; i++) {
		node_free(r, r->txq[i]);
		node_free(r, r->ooo[i]);
	}
	free(r->txq);
	free(r->ooo);
	free_list(r, r->dq_head);
	node_free(r, r->cur);
	esd_buf_free(&r->ackbuf);
	free(r);
}

static struct bufcache *r_cache(struct esd_link *l)
{
	return &l->w->cache;
}

static struct fbuf *node_copy(struct rel *r, const uint8_t *p, size_t len)
{
	struct fbuf *n = esd_fbuf_get(r->cache, len);
	if (!n)
		return NULL;
	memcpy(n->data, p, len);
	return n;
}

/* Keep a frame received from below: take the wire's block when it has one
 * of its own (no copy), else copy. */
static struct fbuf *node_keep(struct esd_link *l, const uint8_t *p, size_t len)
{
	if (l->w->ops->take) {
		struct fbuf *n = l->w->ops->take(l->w);
		if (n && n->data == p && n->len == len)
			return n;
		esd_fbuf_put(r_cache(l), n);
	}
	return node_copy(l->rel, p, len);
}

static void deliver(struct rel *r, struct fbuf *n)
{
	n->next = NULL;
	if (r->dq_tail)
		r->dq_tail->next = n;
	else
		r->dq_head = n;
	r->dq_tail = n;
	r->dq_bytes += n->len;
}

static int send_node(struct esd_link *l, struct fbuf *n, int64_t deadline)
{
	struct iovec iov = {.iov_base = n->data, .iov_len = n->len};
	int rc = esd_lower_send(l, &iov, 1, deadline);
	n->sent_ns = esd_now_ns(); /* after the shaper let it go */
	return rc;
}

/* Set bits of the flags of the frame header at h (bytes 6-7). */
static void add_flags(uint8_t *h, uint16_t bits)
{
	uint16_t flags;
	memcpy(&flags, h + 6, 2);
	flags |= bits;
	memcpy(h + 6, &flags, 2);
}

static int ack_flush(struct esd_link *l)
{
	struct rel *r = l->rel;
	if (!r->ack_pending)
		return 0;
	r->ack_pending = 0;
	esd_buf_reset(&r->ackbuf);
	int rc = esd_enc_link_ack(&r->ackbuf, r->rx_next - 1);
	if (rc)
		return rc;
	/* tells the sender its copy, not the first sending, filled the gap
	 * (the next one may be missing too) */
	if (r->rx_last_retx)
		add_flags(r->ackbuf.data, ESD_FLAG_RETRANSMIT);
	struct iovec iov = {.iov_base = r->ackbuf.data, .iov_len = r->ackbuf.len};
	return esd_lower_send(l, &iov, 1, esd_deadline_after(l->w->timeout_ns));
}

static bool retransmitted(const struct fbuf *n)
{
	uint16_t flags;
	memcpy(&flags, n->data + 6, 2);
	return (flags & ESD_FLAG_RETRANSMIT) != 0;
}

static int64_t clamp_rto(const struct rel *r, int64_t rto)
{
	return rto < r->rto_min_ns ? r->rto_min_ns : rto > MAX_RTO_NS ? MAX_RTO_NS : rto;
}

/* One round trip measured: RFC 6298's estimator and timeout. */
static void rtt_sample(struct rel *r, int64_t rtt)
{
	if (!r->measured) {
		r->srtt_ns = rtt;
		r->rttvar_ns = rtt / 2;
		r->measured = true;
	} else {
		int64_t err = rtt - r->srtt_ns;
		r->rttvar_ns += ((err < 0 ? -err : err) - r->rttvar_ns) / 4;
		r->srtt_ns += err / 8;
	}
	r->rto_ns = clamp_rto(r, r->srtt_ns + 4 * r->rttvar_ns);
}

/* ack: the peer's cumulative ack; of_copy: the frame at ack reached it as
 * a retransmission (LINK_ACK with RETRANSMIT). */
static void on_ack(struct esd_link *l, uint64_t ack, bool of_copy)
{
	struct rel *r = l->rel;
	if (ack >= r->tx_next)
		return; /* acknowledges what we never sent: ignore */
	int64_t now = esd_now_ns(), rtt = -1;
	bool advanced = r->tx_acked < ack;
	while (r->tx_acked < ack) {
		r->tx_acked++;
		struct fbuf **slot = &r->txq[r->tx_acked % r->window];
		if (*slot && r->tx_acked == ack && !retransmitted(*slot))
			rtt = now - (*slot)->sent_ns; /* the newest, sent once */
		node_free(r, *slot);
		*slot = NULL;
		r->progress_ns = r->timer_ns = now;
	}
	/* After an expiry: an ack of just the frame sent again, filled by the
	 * copy, says the next one is missing too (retransmit() sends it); one
	 * beyond, or filled by the first sending (the expiry was a late ack,
	 * not a loss), ends the recovery. */
	if (r->recover && advanced &&
	    (r->tx_acked >= r->recover || r->tx_acked > r->resent || !of_copy))
		r->recover = 0;
	/* The receiver acks arrivals: the same ack again and again while
	 * frames are out means frames after a hole arrive (fast retransmit:
	 * the recovery starts without waiting for the timer, and without
	 * doubling it). */
	if (advanced || ack != r->tx_acked || r->tx_acked + 1 == r->tx_next)
		r->dupacks = 0;
	else if (++r->dupacks == DUPACKS && !r->recover) {
		r->recover = r->tx_next - 1;
		r->resent = r->tx_acked; /* the oldest is due: retransmit() sends it */
	}
	if (rtt >= 0)
		rtt_sample(r, rtt);
}

/* Take one frame from below (the reliable-layer bookkeeping of it). */
static int on_frame(struct esd_link *l, const uint8_t *p, size_t len)
{
	struct rel *r = l->rel;
	uint8_t op = p[5];
	uint16_t flags;
	uint64_t seq, ack;
	memcpy(&flags, p + 6, 2);
	memcpy(&seq, p + 16, 8);
	if (op == ESD_OP_LINK_ACK) {
		if (len != ESD_FRAME_HDR_SIZE + 8)
			return esd_wire_fail(l->w, -EPROTO, "LINK_ACK of %zu bytes", len);
		memcpy(&ack, p + ESD_FRAME_HDR_SIZE, 8);
		on_ack(l, ack, (flags & ESD_FLAG_RETRANSMIT) != 0);
		return 0;
	}
	if (!(flags & ESD_FLAG_RELIABLE)) {
		struct fbuf *n = node_keep(l, p, len); /* peer without the layer */
		if (!n)
			return -ENOMEM;
		deliver(r, n);
		return 0;
	}
	r->ack_pending++;
	/* before a keyed link's handshake: in order only, nothing held ahead
	 * (the sender sends again what is dropped) */
	if (seq < r->rx_next || seq - r->rx_next >= r->window ||
	    (seq > r->rx_next && (r->ooo[seq % r->window] || link_pre_auth(l)))) {
		atomic_fetch_add(&l->dup_rx_frames, 1);
		return 0;
	}
	if (r->dq_bytes + len > l->w->rx_backlog_max)
		return esd_wire_fail(l->w, -ENOBUFS, "receive backlog above %zu bytes",
		                     l->w->rx_backlog_max);
	struct fbuf *n = node_keep(l, p, len);
	if (!n)
		return -ENOMEM;
	n->seq = seq;
	if (seq > r->rx_next) {
		r->ooo[seq % r->window] = n;
		return 0;
	}
	deliver(r, n);
	r->rx_next++;
	r->rx_last_retx = (flags & ESD_FLAG_RETRANSMIT) != 0;
	struct fbuf **slot;
	while (*(slot = &r->ooo[r->rx_next % r->window])) {
		r->rx_last_retx = retransmitted(*slot);
		deliver(r, *slot);
		*slot = NULL;
		r->rx_next++;
	}
	return 0;
}

int esd_rel_input(struct esd_link *l, const uint8_t *p, size_t len)
{
	return on_frame(l, p, len);
}

static int resend(struct esd_link *l, struct fbuf *n)
{
	add_flags(n->data, ESD_FLAG_RETRANSMIT);
	atomic_fetch_add(&l->retx_frames, 1);
	return send_node(l, n, esd_deadline_after(l->w->timeout_ns));
}

/* Send the oldest frame again if the timer expired (then the timeout
 * doubles) or a partial ack left it the next of the expired flight;
 * returns the instant the timer expires next. */
static int retransmit(struct esd_link *l, int64_t *due)
{
	struct rel *r = l->rel;
	int64_t now = esd_now_ns();
	*due = -1;
	if (r->tx_acked + 1 == r->tx_next)
		return 0;
	if (now - r->progress_ns > l->w->timeout_ns)
		return esd_wire_fail(l->w, -ETIMEDOUT,
		                     "peer %s acknowledged nothing for %.0f ms (seq %llu unacked)",
		                     l->w->peer, esd_ns_to_ms(now - r->progress_ns),
		                     (unsigned long long)(r->tx_acked + 1));
	uint64_t head = r->tx_acked + 1;
	struct fbuf *n = r->txq[head % r->window];
	bool expired = now - r->timer_ns >= r->rto_ns;
	bool partial = r->recover && head > r->resent;
	if (n && (expired || partial)) {
		if (expired) {
			r->rto_ns = clamp_rto(r, 2 * r->rto_ns);
			r->recover = r->tx_next - 1;
		}
		r->resent = head;
		r->timer_ns = now;
		int rc = resend(l, n);
		if (rc)
			return rc;
	}
	*due = r->timer_ns + r->rto_ns;
	return 0;
}

static int64_t min_deadline(int64_t a, int64_t b)
{
	if (a < 0)
		return b;
	if (b < 0)
		return a;
	return a < b ? a : b;
}

/* Take whatever has already arrived, without waiting: the frames taken
 * (up to 16), or an error. */
static int pump_ready(struct esd_link *l)
{
	const uint8_t *p;
	size_t len;
	int i;
	for (i = 0; i < 16; i++) {
		/* before the handshake one frame at a time: the next is read
		 * under the limits the handshake leaves */
		if (link_pre_auth(l) && l->rel->dq_head)
			return i;
		int rc = esd_lower_recv(l, &p, &len, 0);
		if (rc == -ETIMEDOUT)
			return i;
		if (rc)
			return rc;
		if ((rc = on_frame(l, p, len)))
			return rc;
		if (l->rel->ack_pending >= ACK_EVERY && (rc = ack_flush(l)))
			return rc;
	}
	return i;
}

/* One round: take what came, retransmit what is due, wait for one frame
 * until deadline. */
static int pump(struct esd_link *l, int64_t deadline)
{
	const uint8_t *p;
	size_t len;
	int64_t due;
	int rc = pump_ready(l); /* acks that came while this side was away */
	if (rc < 0)
		return rc;
	bool took = rc > 0;
	if ((rc = retransmit(l, &due)))
		return rc;
	if (took)
		return 0; /* the caller looks at what came before waiting */
	if (l->rel->ack_pending && (rc = ack_flush(l)))
		return rc;
	rc = esd_lower_recv(l, &p, &len, min_deadline(deadline, due));
	if (rc == -ETIMEDOUT)
		return esd_now_ns() >= deadline && deadline >= 0 ? -ETIMEDOUT : 0;
	if (rc)
		return rc;
	return on_frame(l, p, len);
}

int esd_rel_send(struct esd_link *l, const struct iovec *iov, int n, int64_t deadline)
{
	struct rel *r = l->rel;
	int rc;
	if (r->err)
		return r->err;
	for (int i = 0; i < n; i++) {
		while (r->tx_next - r->tx_acked > r->window) {
			if ((rc = pump(l, deadline)))
				return rc;
		}
		struct fbuf *nd = node_copy(r, iov[i].iov_base, iov[i].iov_len);
		if (!nd)
			return -ENOMEM;
		nd->seq = r->tx_next++;
		add_flags(nd->data, ESD_FLAG_RELIABLE);
		memcpy(nd->data + 16, &nd->seq, 8);
		nd->first_ns = esd_now_ns();
		bool oldest = r->tx_acked + 1 == nd->seq;
		if (oldest)
			r->progress_ns = nd->first_ns;
		r->txq[nd->seq % r->window] = nd;
		if ((rc = send_node(l, nd, deadline)))
			return rc;
		if (oldest)
			r->timer_ns = nd->sent_ns; /* after the shaper let it go */
	}
	/* The frames are on their way: an error the input shows now (the peer
	 * closed once it had them, say) is the next receive's to report. */
	if ((rc = pump_ready(l)) < 0 && !r->err)
		r->err = rc;
	return 0;
}

int esd_rel_recv(struct esd_link *l, const uint8_t **frame, size_t *len, int64_t deadline)
{
	struct rel *r = l->rel;
	int rc;
	node_free(r, r->cur);
	r->cur = NULL;
	/* Frames that arrived before the peer left are delivered first. */
	if (!r->dq_head && !r->err && (rc = pump_ready(l)) < 0)
		r->err = rc;
	while (!r->dq_head) {
		if (r->err)
			return r->err;
		if ((rc = pump(l, deadline))) {
			if (rc == -ETIMEDOUT)
				return rc;
			r->err = rc;
		}
	}
	struct fbuf *n = r->dq_head;
	r->dq_head = n->next;
	if (!r->dq_head)
		r->dq_tail = NULL;
	r->dq_bytes -= n->len;
	r->cur = n;
	if (r->ack_pending && (rc = ack_flush(l)))
		return rc;
	*frame = n->data;
	*len = n->len;
	return 0;
}

int esd_rel_drain(struct esd_link *l, int64_t deadline)
{
	struct rel *r = l->rel;
	int rc = 0;
	while (r->tx_acked + 1 < r->tx_next && esd_now_ns() < deadline)
		if ((rc = pump(l, deadline)))
			break;
	if (!rc && r->ack_pending)
		rc = ack_flush(l);
	return rc;
}
