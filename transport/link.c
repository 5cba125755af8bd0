/*
 * The link API of esd/transport.h: backend lookup by name, the layering
 * (accounting -> reliable -> shaping -> faults -> backend), per-kind
 * counters and the checks on frames handed in by the application. The
 * top layer: it calls the ones below (rel.c, fault.c, the backends), and
 * they call only what is below them (wire.c's helpers, the backends).
 */
#include "link_internal.h"

#include <esd/clock.h>
#include <esd/err.h>
#include <esd/le.h>
#include <esd/log.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_BATCH_IOV      64

struct esd_listener {
	struct wire_listener *wl;
	struct esd_link_opts o;
};

static const struct wire_ops *const backends[] = {&esd_wire_tcp, &esd_wire_dpdk, &esd_wire_rdma};

void esd_link_opts_init(struct esd_link_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->backend = "tcp";
}

static int find_backend(const char *name, const struct wire_ops **out, const char **why)
{
	if (!name)
		name = "tcp";
	for (size_t i = 0; i < sizeof(backends) / sizeof(backends[0]); i++) {
		if (strcmp(backends[i]->name, name))
			continue;
		*out = backends[i];
		if (backends[i]->not_built) {
			if (why)
				*why = backends[i]->not_built;
			return -ENOTSUP;
		}
		if (why)
			*why = "built";
		return 0;
	}
	if (why)
		*why = "no such transport backend (tcp, dpdk, rdma)";
	return -ENOENT;
}

int esd_transport_backend_check(const char *name, const char **why)
{
	const struct wire_ops *ops;
	return find_backend(name, &ops, why);
}

int esd_transport_probe(const struct esd_link_opts *o)
{
	const struct wire_ops *ops;
	const char *why;
	const char *name = o && o->backend ? o->backend : "tcp";
	int rc = find_backend(name, &ops, &why);
	if (rc) {
		ESD_ERR("transport", "backend '%s': %s", name, why);
		return rc;
	}
	return ops->probe ? ops->probe(o) : 0;
}

static int opts_check(const struct esd_link_opts *o, const struct wire_ops **ops)
{
	const char *why;
	if (!o || !o->addr) {
		ESD_ERR("transport", "link options: no address");
		return -EINVAL;
	}
	const struct esd_fault_opts *f = &o->faults;
	if (!(f->drop >= 0 && f->drop < 1 && f->dup >= 0 && f->dup <= 1 && f->reorder >= 0 &&
	      f->reorder <= 1)) {
		ESD_ERR("transport", "link options: fault probabilities out of [0, 1) / [0, 1]");
		return -EINVAL;
	}
	int rc = find_backend(o->backend, ops, &why);
	if (rc)
		ESD_ERR("transport", "backend '%s': %s", o->backend ? o->backend : "tcp", why);
	return rc;
}

/* Keyed links of this process accepted and not through the handshake. */
static _Atomic int pre_auth_links;

/* A keyed link until its handshake is done: its wire takes a handshake's
 * frames only, buffers next to nothing, and the layers that would take
 * the peer's frames before the key check (the reliable layer, faults)
 * wait. On a lossy wire the reliable layer carries the handshake itself
 * (rel.c keeps it to one frame in order). */
static void pre_auth_enter(struct esd_link *l)
{
	struct wire *w = l->w;
	l->open_max_body = w->lim.max_body;
	l->open_backlog = w->rx_backlog_max;
	if (w->lim.max_body > PRE_AUTH_MAX_BODY)
		w->lim.max_body = PRE_AUTH_MAX_BODY;
	if (w->rx_backlog_max > PRE_AUTH_BACKLOG)
		w->rx_backlog_max = PRE_AUTH_BACKLOG;
	l->rel_deferred = !w->lossy && (l->fault.on || l->o.reliable);
	l->faults_deferred = !w->lossy && l->fault.on;
	if (l->faults_deferred)
		l->fault.on = 0;
}

/* The handshake is done (under the send lock): the wire's own limits and
 * the deferred layers. */
static int pre_auth_leave(struct esd_link *l)
{
	l->w->lim.max_body = l->open_max_body;
	l->w->rx_backlog_max = l->open_backlog;
	if (l->pre_auth_counted) {
		atomic_fetch_sub(&pre_auth_links, 1);
		l->pre_auth_counted = false;
	}
	if (l->faults_deferred)
		l->fault.on = 1;
	l->faults_deferred = false;
	if (!l->rel_deferred)
		return 0;
	l->rel_deferred = false;
	return l->rel ? 0 : esd_rel_create(l, &l->rel);
}

static int link_wrap(const struct esd_link_opts *o, struct wire *w, int client,
		     struct esd_link **out)
{
	struct esd_link *l = calloc(1, sizeof(*l));
	int rc;
	if (!l) {
		rc = -ENOMEM;
		goto err_close_wire;
	}
	l->w = w;
	l->o = *o;
	l->o.key = NULL; /* copied into l->auth: the caller's may go */
	l->lim = w->lim;
	if (o->key && (rc = esd_auth_create(l, o->key, client)))
		goto err_free_link;
	esd_shaper_init(&l->shaper, o->rate_bps, o->burst_bytes);
	esd_fault_init(&l->fault, &o->faults);
	esd_buf_init(&l->scratch);
	esd_buf_init(&l->flat);
	if (l->auth)
		pre_auth_enter(l);
	if (!l->rel_deferred && (l->fault.on || o->reliable || w->lossy)) {
		if ((rc = esd_rel_create(l, &l->rel)))
			goto err_free_link;
	}
	int64_t now = esd_now_ns();
	atomic_store(&l->tx_ns, now);
	l->heard_ns = l->recv_end_ns = now;
	/* a client beats once its key handshake is done (esd_link_connect) */
	if (!client && (rc = esd_hb_add(l)))
		goto err_free_link;
	*out = l;
	return 0;

err_free_link:
	esd_rel_destroy(l->rel);
	esd_fault_fini(&l->fault);
	esd_auth_fini(l->auth);
	free(l);
err_close_wire:
	w->ops->close(w, esd_now_ns());
	return rc;
}

int esd_link_connect(const struct esd_link_opts *o, struct esd_link **out)
{
	const struct wire_ops *ops;
	struct wire *w;
	int rc = opts_check(o, &ops);
	if (rc)
		return rc;
	if ((rc = ops->connect(o, &w)))
		return rc;
	if ((rc = link_wrap(o, w, 1, out)))
		return rc;
	if ((*out)->auth && !(rc = esd_auth_client(*out, esd_deadline_after((*out)->w->timeout_ns)))) {
		pthread_mutex_lock(&(*out)->w->tx_mu);
		rc = pre_auth_leave(*out);
		pthread_mutex_unlock(&(*out)->w->tx_mu);
	}
	if (!rc)
		rc = esd_hb_add(*out);
	if (rc) {
		esd_link_close(*out);
		*out = NULL;
	}
	return rc;
}

int esd_listener_open(const struct esd_link_opts *o, struct esd_listener **out)
{
	const struct wire_ops *ops;
	int rc = opts_check(o, &ops);
	if (rc)
		return rc;
	struct esd_listener *l = calloc(1, sizeof(*l));
	if (!l)
		return -ENOMEM;
	l->o = *o;
	if ((rc = ops->listen(o, &l->wl))) {
		free(l);
		return rc;
	}
	*out = l;
	return 0;
}

int esd_listener_addr(const struct esd_listener *l, char *buf, size_t len)
{
	if ((size_t)snprintf(buf, len, "%s", l->wl->addr) >= len)
		return -ENOSPC;
	return 0;
}

/* A keyed link just accepted: counted among those before the handshake,
 * or refused (closed, 0) when the process holds its most of them. */
static bool pre_auth_admit(struct esd_link *l)
{
	if (atomic_fetch_add(&pre_auth_links, 1) >= PRE_AUTH_MAX_LINKS) {
		atomic_fetch_sub(&pre_auth_links, 1);
		ESD_DBG("transport", "%s: %d connections before the job key handshake already: "
			"closed", l->w->peer, PRE_AUTH_MAX_LINKS);
		esd_link_close(l);
		return false;
	}
	l->pre_auth_counted = true;
	return true;
}

int esd_listener_accept(struct esd_listener *l, int64_t timeout_ns, struct esd_link **out)
{
	int64_t deadline = esd_deadline_after(timeout_ns);
	for (;;) {
		struct wire *w;
		int rc = l->wl->ops->accept(l->wl, &l->o, deadline, &w);
		if (rc || (rc = link_wrap(&l->o, w, 0, out)))
			return rc;
		if (!(*out)->auth || pre_auth_admit(*out))
			return 0;
		*out = NULL;
	}
}

void esd_listener_close(struct esd_listener *l)
{
	if (!l)
		return;
	l->wl->ops->listener_close(l->wl);
	free(l);
}

/* Account a len-byte frame whose first avail bytes are at frame. */
static void count_part(struct esd_link *l, const void *frame, size_t avail, size_t len, int rx)
{
	enum esd_xfer_kind kind;
	uint32_t rows;
	esd_proto_classify(frame, avail < len ? avail : len, &kind, &rows);
	atomic_fetch_add_explicit(&l->ks[kind][rx * 3 + 0], len, memory_order_relaxed);
	atomic_fetch_add_explicit(&l->ks[kind][rx * 3 + 1], rows, memory_order_relaxed);
	atomic_fetch_add_explicit(&l->ks[kind][rx * 3 + 2], 1, memory_order_relaxed);
}

static void count(struct esd_link *l, const void *frame, size_t len, int rx)
{
	count_part(l, frame, len, len, rx);
}

int esd_link_send_raw(struct esd_link *l, const struct iovec *iov, int n, int64_t deadline)
{
	return l->rel ? esd_rel_send(l, iov, n, deadline) : esd_lower_send(l, iov, n, deadline);
}

/* A send failed with rc (not 0): the link is broken but for a timeout,
 * and the wire's reason is kept (a refused tag has its own). */
static int send_failed(struct esd_link *l, int rc)
{
	if (rc != -ETIMEDOUT)
		l->broken = 2;
	if (rc != -EACCES)
		snprintf(l->err, sizeof(l->err), "send: %s", l->w->err);
	return rc;
}

/* A batch of whole application frames: tagged when the link has a key. */
static int send_batch(struct esd_link *l, struct iovec *iov, int n, int64_t deadline)
{
	pthread_mutex_lock(&l->w->tx_mu);
	int rc = 0;
	if (l->auth) {
		/* the monotonic clock, not the thread's CPU clock: that one is
		 * a system call, twice a frame; the seal never waits, so the
		 * two differ only where the thread was preempted */
		const int64_t c0 = esd_now_ns();
		rc = esd_auth_seal(l, iov, n);
		atomic_fetch_add_explicit(&l->auth_tx_cpu_ns, (uint64_t)(esd_now_ns() - c0),
					  memory_order_relaxed);
	}
	if (!rc)
		rc = esd_link_send_raw(l, iov, n, deadline);
	pthread_mutex_unlock(&l->w->tx_mu);
	return rc ? send_failed(l, rc) : 0;
}

int esd_link_send(struct esd_link *l, const void *frames, size_t len)
{
	struct iovec iov[MAX_BATCH_IOV];
	const uint8_t *p = frames;
	size_t batch_bytes = 0;
	int n = 0, rc;
	if (!l || (!frames && len))
		return -EINVAL;
	if (l->broken == 2)
		return -EPIPE;
	int64_t deadline = esd_deadline_after(l->w->timeout_ns);
	while (len) {
		struct esd_frame_hdr h;
		char why[160];
		/* Our own frames: checked against the protocol maximum, not
		 * the peer's limits (which only the peer knows). */
		rc = esd_frame_hdr_parse(p, len, NULL, &h, why, sizeof(why));
		if (rc || len < ESD_FRAME_HDR_SIZE + (size_t)h.length) {
			snprintf(l->err, sizeof(l->err), "send: not a whole frame at byte %zu: %s",
			         (size_t)(p - (const uint8_t *)frames), rc ? why : "truncated");
			return -EINVAL;
		}
		size_t fl = ESD_FRAME_HDR_SIZE + h.length;
		count(l, p, fl, 0);
		iov[n].iov_base = (void *)p;
		iov[n].iov_len = fl;
		n++;
		p += fl;
		len -= fl;
		batch_bytes += fl;
		if (n == MAX_BATCH_IOV || !len ||
		    (l->auth && batch_bytes >= AUTH_SEAL_MAX_BYTES)) {
			if ((rc = send_batch(l, iov, n, deadline)))
				return rc;
			n = 0;
			batch_bytes = 0;
		}
	}
	return 0;
}

/* ---- frames tagged in place ---------------------------------------------- */

int esd_link_can_tag_in_place(const struct esd_link *l)
{
	return l && esd_auth_in_place_ok(l);
}

int esd_link_tag_in_place(struct esd_link *l, struct esd_buf *b, size_t start)
{
	if (!esd_link_can_tag_in_place(l))
		return -ENOTSUP;
	if (start >= b->len)
		return -EINVAL;
	if (esd_buf_reserve(b, AUTH_TAG_BYTES))
		return -ENOMEM;
	memset(b->data + b->len, 0, AUTH_TAG_BYTES);
	b->len += AUTH_TAG_BYTES;
	const int64_t c0 = esd_now_ns(); /* as in send_batch */
	int rc = esd_auth_mark_in_place(l, b->data + start, b->len - start);
	atomic_fetch_add_explicit(&l->auth_tx_cpu_ns, (uint64_t)(esd_now_ns() - c0),
				  memory_order_relaxed);
	if (rc)
		b->len -= AUTH_TAG_BYTES;
	return rc;
}

/* The frames of b, each marked by esd_link_tag_in_place, into v (at most
 * max; *n of them); *used: the bytes they take. -EINVAL for a frame not
 * marked. */
static int tagged_frames(struct esd_link *l, const struct esd_buf *b, size_t off,
			 struct iovec *v, int max, int *n, size_t *used)
{
	uint8_t *p = b->data + off;
	size_t len = b->len - off;
	*n = 0;
	*used = 0;
	while (len && *n < max) {
		struct esd_frame_hdr h;
		char why[160];
		uint16_t flags;
		int rc = esd_frame_hdr_parse(p, len, NULL, &h, why, sizeof(why));
		memcpy(&flags, p + 6, 2);
		if (rc || len < ESD_FRAME_HDR_SIZE + (size_t)h.length ||
		    !(flags & ESD_FLAG_TAGGED)) {
			snprintf(l->err, sizeof(l->err),
			         "send: no frame tagged in place at byte %zu: %s",
			         (size_t)(p - b->data), rc ? why : "truncated or not marked");
			return -EINVAL;
		}
		size_t fl = ESD_FRAME_HDR_SIZE + h.length;
		v[(*n)++] = (struct iovec){.iov_base = p, .iov_len = fl};
		*used += fl;
		p += fl;
		len -= fl;
	}
	return 0;
}

/* Frames marked by esd_link_tag_in_place, hashed then: their tags written
 * under the next counter nonces and the frames sent, under one hold of the
 * send lock (counter order is send order). */
static int send_tagged_frames(struct esd_link *l, struct iovec *v, int n, int64_t deadline)
{
	pthread_mutex_lock(&l->w->tx_mu);
	for (int i = 0; i < n; i++) {
		count(l, v[i].iov_base, v[i].iov_len - AUTH_TAG_BYTES, 0);
		esd_auth_finish_in_place(l, v[i].iov_base, v[i].iov_len);
	}
	int rc = esd_link_send_raw(l, v, n, deadline);
	pthread_mutex_unlock(&l->w->tx_mu);
	return rc ? send_failed(l, rc) : 0;
}

int esd_link_send_tagged(struct esd_link *l, struct esd_buf *b)
{
	if (!l || !b)
		return -EINVAL;
	if (l->broken == 2)
		return -EPIPE;
	if (!esd_link_can_tag_in_place(l))
		return -ENOTSUP;
	int64_t deadline = esd_deadline_after(l->w->timeout_ns);
	struct iovec v[16];
	int n;
	size_t used, off = 0;
	/* every frame checked before any is sent */
	for (off = 0; off < b->len; off += used) {
		int rc = tagged_frames(l, b, off, v, 16, &n, &used);
		if (rc)
			return rc;
	}
	for (off = 0; off < b->len; off += used) {
		tagged_frames(l, b, off, v, 16, &n, &used);
		int rc = send_tagged_frames(l, v, n, deadline);
		if (rc)
			return rc;
	}
	return 0;
}

/* ---- frames in pieces (zero copy) ---------------------------------------- */

int esd_link_zero_copy(const struct esd_link *l)
{
	return l && l->w->ops->sendv && !l->auth && !l->rel && !l->fault.on;
}

/* Check that the pieces are whole frames, each header within one piece,
 * and account each frame (where account is set); *frames: how many. */
static int count_pieces(struct esd_link *l, const struct iovec *iov, int n, size_t *total,
			size_t *frames, int account)
{
	size_t left = 0; /* bytes of the current frame still to come */
	*total = 0;
	*frames = 0;
	for (int i = 0; i < n; i++) {
		const uint8_t *p = iov[i].iov_base;
		size_t len = iov[i].iov_len;
		*total += len;
		while (len) {
			if (left) {
				size_t k = left < len ? left : len;
				left -= k;
				p += k;
				len -= k;
				continue;
			}
			struct esd_frame_hdr h;
			char why[160];
			int rc = esd_frame_hdr_parse(p, len, NULL, &h, why, sizeof(why));
			if (rc) {
				snprintf(l->err, sizeof(l->err),
				         "sendv: no whole frame header at piece %d: %s", i,
				         rc == -EAGAIN ? "split across pieces" : why);
				return -EINVAL;
			}
			left = ESD_FRAME_HDR_SIZE + (size_t)h.length;
			(*frames)++;
			if (account)
				count_part(l, p, len, left, 0);
		}
	}
	if (left) {
		snprintf(l->err, sizeof(l->err), "sendv: the pieces end %zu bytes short of a frame",
		         left);
		return -EINVAL;
	}
	return 0;
}

/* The pieces copied into one buffer, sent as esd_link_send() sends. */
static int send_flat(struct esd_link *l, const struct iovec *iov, int n)
{
	esd_buf_reset(&l->flat);
	for (int i = 0; i < n; i++) {
		if (esd_buf_reserve(&l->flat, iov[i].iov_len))
			return -ENOMEM;
		memcpy(l->flat.data + l->flat.len, iov[i].iov_base, iov[i].iov_len);
		l->flat.len += iov[i].iov_len;
	}
	return esd_link_send(l, l->flat.data, l->flat.len);
}

/* The pieces' frames (checked whole: total bytes, frames of them)
 * appended to b, each marked as esd_link_tag_in_place() marks it, hashed
 * a window at a time as it is copied (esd_auth_mark_add). -EINVAL (b as
 * it was) for a frame too short to tag in place. */
static int mark_pieces(struct esd_link *l, struct esd_buf *b, const struct iovec *iov, int n,
		       size_t total, size_t frames)
{
	if (esd_buf_reserve(b, total + frames * AUTH_TAG_BYTES))
		return -ENOMEM;
	const size_t len0 = b->len;
	/* the thread's CPU (one call a send): the copy is the tag's pass */
	const int64_t c0 = esd_thread_cpu_ns();
	int rc = 0;
	struct auth_mark m;
	size_t left = 0; /* bytes of the current frame still to come */
	for (int i = 0; i < n; i++) {
		const uint8_t *p = iov[i].iov_base;
		size_t len = iov[i].iov_len;
		while (len) {
			if (!left) { /* a header, whole in this piece (count_pieces) */
				left = ESD_FRAME_HDR_SIZE + (size_t)esd_get_le32(p + 8);
				if ((rc = esd_auth_mark_begin(l, &m, b->data + b->len, left)))
					goto out;
				b->len += left + AUTH_TAG_BYTES;
			}
			size_t k = left < len ? left : len;
			esd_auth_mark_add(l, &m, p, k);
			p += k;
			len -= k;
			left -= k;
			if (!left && (rc = esd_auth_mark_end(l, &m)))
				goto out;
		}
	}
out:
	if (rc)
		b->len = len0;
	atomic_fetch_add_explicit(&l->auth_tx_cpu_ns, (uint64_t)(esd_thread_cpu_ns() - c0),
				  memory_order_relaxed);
	return rc;
}

/* A keyed link that tags in place: the pieces copied into one buffer and
 * hashed there while the copy is in the CPU's cache, sent as
 * esd_link_send_tagged() sends; frames too short for that go as
 * send_flat() sends them. */
static int send_marked(struct esd_link *l, const struct iovec *iov, int n, size_t total,
		       size_t frames)
{
	esd_buf_reset(&l->flat);
	int rc = mark_pieces(l, &l->flat, iov, n, total, frames);
	if (rc == -EINVAL)
		return send_flat(l, iov, n);
	return rc ? rc : esd_link_send_tagged(l, &l->flat);
}

int esd_link_sendv(struct esd_link *l, const struct iovec *iov, int n)
{
	size_t total, frames;
	if (!l || n < 0 || (n && !iov))
		return -EINVAL;
	if (l->broken == 2)
		return -EPIPE;
	if (!esd_link_zero_copy(l) && esd_link_can_tag_in_place(l) && !l->rel && !l->fault.on) {
		int rc = count_pieces(l, iov, n, &total, &frames, 0);
		return rc ? rc : send_marked(l, iov, n, total, frames);
	}
	if (!esd_link_zero_copy(l))
		return send_flat(l, iov, n);
	int rc = count_pieces(l, iov, n, &total, &frames, 1);
	if (rc)
		return rc;
	esd_link_shape_tx(l, total);
	pthread_mutex_lock(&l->w->tx_mu);
	rc = l->w->ops->sendv(l->w, iov, n, esd_deadline_after(l->w->timeout_ns));
	if (!rc)
		atomic_store_explicit(&l->tx_ns, esd_now_ns(), memory_order_relaxed);
	pthread_mutex_unlock(&l->w->tx_mu);
	if (rc)
		return send_failed(l, rc);
	atomic_fetch_add(&l->in_place_bytes, total);
	return 0;
}

int esd_link_send_error(struct esd_link *l, int code, const char *text)
{
	if (!l)
		return -EINVAL;
	esd_buf_reset(&l->scratch);
	int rc = esd_enc_error(&l->scratch, code, text);
	if (rc)
		return rc;
	return esd_link_send(l, l->scratch.data, l->scratch.len);
}

int esd_link_next_frame(struct esd_link *l, const uint8_t **frame, size_t *len, int64_t deadline)
{
	for (;;) {
		int rc = l->rel ? esd_rel_recv(l, frame, len, deadline) : esd_lower_recv(l, frame, len, deadline);
		if (rc)
			return rc;
		uint16_t flags;
		memcpy(&flags, *frame + 6, 2);
		/* before the handshake the frame goes to its parser alone */
		if (l->rel || !(flags & ESD_FLAG_RELIABLE) || link_pre_auth(l))
			return 0;
		/* The peer runs the reliable layer (faults on its side): run it
		 * here too, starting with this frame (under the send lock: the
		 * heartbeat thread looks at l->rel). */
		pthread_mutex_lock(&l->w->tx_mu);
		rc = esd_rel_create(l, &l->rel);
		pthread_mutex_unlock(&l->w->tx_mu);
		if (rc || (rc = esd_rel_input(l, *frame, *len)))
			return rc;
	}
}

/* A keyless link that hears the handshake or a tag: the peer has a key. */
static int refuse_keyed_peer(struct esd_link *l, const uint8_t *frame)
{
	uint16_t flags;
	memcpy(&flags, frame + 6, 2);
	if (frame[5] != ESD_OP_LINK_AUTH && !(flags & ESD_FLAG_TAGGED))
		return 0;
	snprintf(l->err, sizeof(l->err), "the peer uses a job key and this side has none (job.key)");
	esd_link_send_error(l, -EACCES, "this side has no job key");
	l->broken = 2; /* nothing more to say */
	return -EACCES;
}

/* The receive side failed for good with rc: why, once, in the log. */
static int recv_failed(struct esd_link *l, int rc, int own_text)
{
	if (!l->broken)
		l->broken = 1;
	if (!own_text)
		snprintf(l->err, sizeof(l->err), "%s", l->w->err);
	if (rc != -ECONNRESET && rc != -EPIPE)
		ESD_WARN("transport", "link %s (%s): %s", l->w->peer, l->w->ops->name, l->err);
	return rc;
}

/* The next frame from below until deadline, or until the peer has been
 * silent for its timeout (then the link is broken). */
static int next_frame_heard(struct esd_link *l, const uint8_t **frame, size_t *len,
			    int64_t deadline)
{
	for (;;) {
		if (atomic_load(&l->aborted)) {
			snprintf(l->err, sizeof(l->err), "the link was ended on this side");
			return recv_failed(l, -ECONNABORTED, 1);
		}
		int rc = esd_link_next_frame(l, frame, len, esd_hb_recv_deadline(l, deadline));
		if (!rc) {
			l->heard_ns = esd_now_ns();
			return 0;
		}
		if (rc != -ETIMEDOUT)
			return recv_failed(l, rc, 0);
		if ((rc = esd_hb_peer_silent(l)))
			return rc;
		if (deadline >= 0 && esd_now_ns() >= deadline)
			return -ETIMEDOUT;
	}
}

/* A keyed link's frame: checked, and the tag stripped, in place. During
 * the handshake under the send lock (the heartbeat thread reads whether
 * it is done). */
static int auth_rx_locked(struct esd_link *l, uint8_t *frame, size_t *len)
{
	if (l->auth->state == AUTH_OPEN)
		return esd_auth_rx(l, frame, len);
	pthread_mutex_lock(&l->w->tx_mu);
	int rc = esd_auth_rx(l, frame, len);
	if (rc == 1 && l->auth->state == AUTH_OPEN && (rc = pre_auth_leave(l)) == 0)
		rc = 1;
	pthread_mutex_unlock(&l->w->tx_mu);
	return rc;
}

static int recv_app_frame(struct esd_link *l, struct esd_msg *m, int64_t deadline)
{
	const uint8_t *frame;
	size_t len;
	int rc;
	for (;;) {
		if ((rc = next_frame_heard(l, &frame, &len, deadline)))
			return rc;
		/* a received frame is the link's own buffer: the tag is
		 * checked and stripped in place */
		if (l->auth) {
			const int64_t c0 = esd_now_ns(); /* as in send_batch */
			rc = auth_rx_locked(l, (uint8_t *)frame, &len);
			atomic_fetch_add_explicit(&l->auth_rx_cpu_ns,
						  (uint64_t)(esd_now_ns() - c0),
						  memory_order_relaxed);
		} else {
			rc = refuse_keyed_peer(l, frame);
		}
		if (rc == 1)
			continue; /* a handshake step */
		if (rc)
			return recv_failed(l, rc, 1);
		rc = esd_proto_decode(frame, len, &l->lim, m, l->err, sizeof(l->err));
		if (rc) {
			l->broken = 1;
			ESD_WARN("transport", "link %s (%s): bad frame: %s", l->w->peer,
			         l->w->ops->name, l->err);
			return rc;
		}
		if (m->hdr.op == ESD_OP_LINK_HEARTBEAT)
			continue; /* the peer is alive: nothing for the application */
		if (m->hdr.op == ESD_OP_LINK_ACK || m->hdr.op == ESD_OP_LINK_BYE ||
		    m->hdr.op == ESD_OP_LINK_AUTH)
			continue; /* stray link-internal frame (no reliable layer) */
		count(l, frame, len, 1);
		return 0;
	}
}

int esd_link_recv(struct esd_link *l, struct esd_msg *m, int64_t timeout_ns)
{
	if (!l || !m)
		return -EINVAL;
	if (l->broken)
		return -EPIPE;
	int rc = recv_app_frame(l, m, esd_deadline_after(timeout_ns));
	l->recv_end_ns = esd_now_ns();
	return rc;
}

const char *esd_link_last_error(const struct esd_link *l)
{
	return l ? l->err : "";
}

int esd_link_broken(const struct esd_link *l)
{
	return l && l->broken != 0;
}

int esd_link_proven(const struct esd_link *l)
{
	return l && l->auth && !link_pre_auth(l);
}

void esd_link_abort(struct esd_link *l)
{
	if (!l)
		return;
	atomic_store(&l->aborted, true);
	if (l->w->ops->abort)
		l->w->ops->abort(l->w);
}

const char *esd_link_backend(const struct esd_link *l)
{
	return l->w->ops->name;
}

const char *esd_link_peer(const struct esd_link *l)
{
	return l->w->peer;
}

void esd_link_close(struct esd_link *l)
{
	if (!l)
		return;
	esd_hb_remove(l); /* before anything of it goes */
	if (l->pre_auth_counted)
		atomic_fetch_sub(&pre_auth_links, 1);
	int64_t deadline =
	    esd_now_ns() + (l->w->timeout_ns < ESD_NS_PER_S ? l->w->timeout_ns : ESD_NS_PER_S);
	if (l->rel && !l->broken) {
		esd_fault_flush(l, 1);
		esd_rel_drain(l, deadline);
	}
	esd_rel_destroy(l->rel); /* its blocks go back to the wire's cache */
	l->w->ops->close(l->w, deadline);
	esd_fault_fini(&l->fault);
	esd_auth_fini(l->auth);
	esd_buf_free(&l->scratch);
	esd_buf_free(&l->flat);
	free(l);
}

void esd_link_set_rate(struct esd_link *l, uint64_t rate_bps)
{
	atomic_store(&esd_link_shaper(l)->rate_bps, rate_bps);
}

uint64_t esd_link_get_rate(const struct esd_link *l)
{
	return atomic_load(&esd_link_shaper((struct esd_link *)l)->rate_bps);
}

void esd_link_stats(const struct esd_link *cl, struct esd_link_stats *out)
{
	struct esd_link *l = (struct esd_link *)cl;
	memset(out, 0, sizeof(*out));
	for (int k = 0; k < ESD_XFER_NKINDS; k++) {
		out->kind[k].tx_bytes = atomic_load(&l->ks[k][0]);
		out->kind[k].tx_rows = atomic_load(&l->ks[k][1]);
		out->kind[k].tx_frames = atomic_load(&l->ks[k][2]);
		out->kind[k].rx_bytes = atomic_load(&l->ks[k][3]);
		out->kind[k].rx_rows = atomic_load(&l->ks[k][4]);
		out->kind[k].rx_frames = atomic_load(&l->ks[k][5]);
	}
	out->wire_tx_bytes = atomic_load(&l->wire_tx_bytes);
	out->retx_frames = atomic_load(&l->retx_frames);
	out->dup_rx_frames = atomic_load(&l->dup_rx_frames);
	out->fault_drops = atomic_load(&l->fault_drops);
	out->fault_dups = atomic_load(&l->fault_dups);
	out->fault_reorders = atomic_load(&l->fault_reorders);
	out->shaped_wait_ns = atomic_load(&l->shaped_wait_ns);
	out->in_place_bytes = atomic_load(&l->in_place_bytes);
	out->auth_tx_cpu_ns = atomic_load(&l->auth_tx_cpu_ns);
	out->auth_rx_cpu_ns = atomic_load(&l->auth_rx_cpu_ns);
	out->rate_bps = atomic_load(&esd_link_shaper(l)->rate_bps);
	out->reliable = l->rel != NULL;
}

void esd_link_stats_reset(struct esd_link *l)
{
	for (int k = 0; k < ESD_XFER_NKINDS; k++)
		for (int j = 0; j < 6; j++)
			atomic_store(&l->ks[k][j], 0);
	atomic_store(&l->wire_tx_bytes, 0);
	atomic_store(&l->retx_frames, 0);
	atomic_store(&l->in_place_bytes, 0);
	atomic_store(&l->dup_rx_frames, 0);
	atomic_store(&l->fault_drops, 0);
	atomic_store(&l->fault_dups, 0);
	atomic_store(&l->fault_reorders, 0);
	atomic_store(&l->shaped_wait_ns, 0);
	atomic_store(&l->auth_tx_cpu_ns, 0);
	atomic_store(&l->auth_rx_cpu_ns, 0);
}

void esd_link_stats_entries(const struct esd_link_stats *st,
                            struct esd_stats_entry out[ESD_XFER_NKINDS])
{
	for (int k = 0; k < ESD_XFER_NKINDS; k++)
		out[k] = (struct esd_stats_entry){.kind = (uint32_t)k,
		                                  .tx_bytes = st->kind[k].tx_bytes,
		                                  .tx_rows = st->kind[k].tx_rows,
		                                  .rx_bytes = st->kind[k].rx_bytes,
		                                  .rx_rows = st->kind[k].rx_rows};
}
