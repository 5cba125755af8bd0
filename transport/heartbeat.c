/*
 * Heartbeats and the peer timeout (heartbeat_ns, peer_timeout_ns of the
 * link options).
 *
 * Sending: one thread per process beats on every link that asked for it.
 * A link that put nothing on the wire for heartbeat_ns gets a
 * LINK_HEARTBEAT. The thread waits on nothing of the application's, so a
 * process whose threads are all busy (a shard writing a checkpoint, a
 * daemon in a long solve, a link thread blocked on a lock) still beats:
 * it only tries the wire's send lock (a link whose own thread is sending
 * is not idle), and the backend sends without waiting (a full socket
 * means the peer has plenty unread: it hears from us when it reads). The
 * frame goes in the link's frame order where the wire keeps one (tcp,
 * dpdk memif, rdma's queue pair is not used: see beat_aside), so on a
 * keyed link it takes the next frame counter and a frame held back before
 * it fails the heartbeat's tag; on a link with the reliable layer, whose
 * frames the layer orders, and on rdma, it goes beside them
 * (ESD_BEAT_ASIDE) under a counter of its own.
 *
 * Receiving: a receive waits at most until the peer's silence reaches
 * peer_timeout_ns. Silence is the time since the backend last took a byte
 * from the peer (part of a long frame counts) or the link took a frame; a
 * receive that starts after the link's thread was away from it (busy
 * elsewhere, the peer's frames queued meanwhile) counts at most half a
 * timeout of that absence.
 */
#include "link_internal.h"

#include <esd/clock.h>
#include <esd/err.h>
#include <esd/log.h>

#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>

#define TICK_MAX_NS (100 * ESD_NS_PER_MS)
#define TICK_MIN_NS ESD_NS_PER_MS
#define BEAT_ROOM   (ESD_FRAME_HDR_SIZE + ESD_LINK_HEARTBEAT_BODY + AUTH_TAG_BYTES)

static pthread_mutex_t hb_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t hb_cv;
static pthread_once_t hb_once = PTHREAD_ONCE_INIT;
static struct esd_link *hb_head; /* under hb_mu */
static bool hb_started;          /* under hb_mu */

/* A forked child has no heartbeat thread, and none of its parent's links
 * to beat on. */
static void hb_after_fork(void)
{
	pthread_mutex_init(&hb_mu, NULL);
	hb_head = NULL;
	hb_started = false;
}

static void hb_init(void)
{
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&hb_cv, &ca);
	pthread_condattr_destroy(&ca);
	pthread_atfork(NULL, NULL, hb_after_fork);
}

/* The heartbeat frame for l, tagged on a keyed link, into f; its length,
 * or 0 when none can go now (the key's handshake is not done). */
static size_t beat_frame(struct esd_link *l, bool aside, uint8_t f[BEAT_ROOM])
{
	struct esd_buf b;
	esd_buf_init(&b);
	int rc = esd_enc_link_heartbeat(&b, l->beats + 1, aside ? ESD_BEAT_ASIDE : 0);
	size_t len = b.len;
	if (!rc)
		memcpy(f, b.data, len);
	esd_buf_free(&b);
	if (rc || (l->auth && esd_auth_seal_beat(l, f, &len, BEAT_ROOM, aside, l->beats + 1)))
		return 0;
	return len;
}

/* One link: a heartbeat if it has been idle for its interval and nothing
 * holds its send side. */
static void beat_one(struct esd_link *l, int64_t now)
{
	if (now - atomic_load_explicit(&l->tx_ns, memory_order_relaxed) < l->o.heartbeat_ns ||
	    !l->w->ops->beat)
		return;
	if (pthread_mutex_trylock(&l->w->tx_mu))
		return; /* its thread is sending: not idle */
	uint8_t f[BEAT_ROOM];
	bool aside = l->rel || l->w->ops->beat_aside;
	size_t len = beat_frame(l, aside, f);
	if (len) {
		int rc = l->w->ops->beat(l->w, f, len);
		if (!rc) {
			l->beats++;
			atomic_store_explicit(&l->tx_ns, now, memory_order_relaxed);
			atomic_fetch_add(&l->wire_tx_bytes, len);
		} else if (l->auth && !aside) {
			esd_auth_unseal_beat(l); /* not sent: its counter is the next frame's */
		}
	}
	pthread_mutex_unlock(&l->w->tx_mu);
}

static void *hb_main(void *arg)
{
	(void)arg;
	prctl(PR_SET_NAME, "esd-heartbeat", 0, 0, 0);
	pthread_mutex_lock(&hb_mu);
	for (;;) {
		while (!hb_head)
			pthread_cond_wait(&hb_cv, &hb_mu);
		int64_t now = esd_now_ns(), tick = TICK_MAX_NS;
		for (struct esd_link *l = hb_head; l; l = l->hb_next) {
			beat_one(l, now);
			if (l->o.heartbeat_ns / 4 < tick)
				tick = l->o.heartbeat_ns / 4;
		}
		if (tick < TICK_MIN_NS)
			tick = TICK_MIN_NS;
		struct timespec ts;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		int64_t at = (int64_t)ts.tv_sec * ESD_NS_PER_S + ts.tv_nsec + tick;
		ts.tv_sec = at / ESD_NS_PER_S;
		ts.tv_nsec = at % ESD_NS_PER_S;
		pthread_cond_timedwait(&hb_cv, &hb_mu, &ts);
	}
	return NULL;
}

int esd_hb_add(struct esd_link *l)
{
	if (l->o.heartbeat_ns <= 0)
		return 0;
	pthread_once(&hb_once, hb_init);
	pthread_mutex_lock(&hb_mu);
	int rc = 0;
	if (!hb_started) {
		pthread_t t;
		pthread_attr_t a;
		pthread_attr_init(&a);
		pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
		rc = -pthread_create(&t, &a, hb_main, NULL);
		pthread_attr_destroy(&a);
		hb_started = !rc;
	}
	if (!rc) {
		l->hb_next = hb_head;
		hb_head = l;
		l->hb_on = true;
		pthread_cond_signal(&hb_cv);
	}
	pthread_mutex_unlock(&hb_mu);
	if (rc)
		ESD_ERR("transport", "link %s: no heartbeat thread: %s", l->w->peer,
			esd_strerror(rc));
	return rc;
}

void esd_hb_remove(struct esd_link *l)
{
	if (!l->hb_on)
		return;
	pthread_mutex_lock(&hb_mu);
	for (struct esd_link **p = &hb_head; *p; p = &(*p)->hb_next) {
		if (*p == l) {
			*p = l->hb_next;
			break;
		}
	}
	l->hb_on = false;
	pthread_mutex_unlock(&hb_mu);
}

/* When the peer was last heard from: a frame taken, or bytes below. */
static int64_t last_heard(const struct esd_link *l)
{
	int64_t rx = atomic_load_explicit(&l->w->rx_ns, memory_order_relaxed);
	return rx > l->heard_ns ? rx : l->heard_ns;
}

int64_t esd_hb_recv_deadline(struct esd_link *l, int64_t deadline)
{
	int64_t pto = l->o.peer_timeout_ns;
	if (pto <= 0)
		return deadline;
	int64_t now = esd_now_ns(), away = now - pto / 2;
	if (l->recv_end_ns < away && l->heard_ns < away)
		l->heard_ns = away;
	int64_t end = last_heard(l) + pto;
	return deadline < 0 || end < deadline ? end : deadline;
}

int esd_hb_peer_silent(struct esd_link *l)
{
	int64_t pto = l->o.peer_timeout_ns;
	if (pto <= 0)
		return 0;
	int64_t quiet = esd_now_ns() - last_heard(l);
	if (quiet < pto)
		return 0;
	l->broken = 1;
	snprintf(l->err, sizeof(l->err),
		 "heard nothing from %.64s for %.1f s (peer timeout %lld ms, heartbeats every "
		 "%lld ms): the peer is stopped or hung, its host gone, or the path holds its "
		 "frames back",
		 l->w->peer, (double)quiet / 1e9, (long long)(pto / ESD_NS_PER_MS),
		 (long long)(l->o.heartbeat_ns / ESD_NS_PER_MS));
	ESD_WARN("transport", "link %s (%s): %s", l->w->peer, l->w->ops->name, l->err);
	return -ETIMEDOUT;
}
