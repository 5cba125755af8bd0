/*
 * Token bucket of a link, as a virtual clock (GCRA): every byte put on the
 * wire advances a "theoretical arrival time" by 8e9 / rate ns; a sender
 * whose tat runs ahead of the clock sleeps until it conforms. The bucket
 * depth (burst) lets a sender that slept too long catch up, so the long-run
 * rate equals the configured one instead of drifting below it by the sleep
 * overshoot. The depth is 10 ms of the rate, at least 16 KiB: a sender
 * that lags the clock by less has overslept or was busy between frames,
 * and catches up; one that lags by more left the link idle, and starts
 * afresh with no credit, as on a real link (a bucket that refills while
 * idle is a policer whose first bytes go free: a node timing its pulls
 * would measure the credit instead of the link). The rate is an atomic so another thread may change it at run
 * time; the virtual clock is restarted when it does. An uplink is one such
 * bucket shared by several links, taken under a lock: their sends queue
 * for it as they would for one network link.
 */
#include "link_internal.h"

#include <esd/clock.h>

#include <pthread.h>
#include <stdlib.h>

#define MIN_BURST_BYTES (16u << 10)
#define BURST_NS        (10 * ESD_NS_PER_MS)

void esd_shaper_init(struct shaper *s, uint64_t rate_bps, uint64_t burst_bytes)
{
	atomic_store(&s->rate_bps, rate_bps);
	s->burst_bytes = burst_bytes;
	s->seen_rate = 0;
	s->tat_ns = 0;
}

/* Wait until bytes conform to the rate; returns ns waited. */
static int64_t shaper_take(struct shaper *s, size_t bytes)
{
	uint64_t rate = atomic_load_explicit(&s->rate_bps, memory_order_relaxed);
	if (!rate)
		return 0;
	int64_t now = esd_now_ns();
	if (rate != s->seen_rate) {
		s->seen_rate = rate;
		s->tat_ns = now;
	}
	uint64_t burst = s->burst_bytes;
	if (!burst) {
		burst = (uint64_t)((double)rate / 8.0 * (double)BURST_NS / 1e9);
		if (burst < MIN_BURST_BYTES)
			burst = MIN_BURST_BYTES;
	}
	int64_t burst_ns = (int64_t)((double)burst * 8e9 / (double)rate);
	if (s->tat_ns < now - burst_ns) /* idle: the link sat empty, no credit */
		s->tat_ns = now;
	s->tat_ns += (int64_t)((double)bytes * 8e9 / (double)rate);
	if (s->tat_ns <= now)
		return 0;
	esd_sleep_until_ns(s->tat_ns);
	return s->tat_ns - now;
}

struct esd_uplink {
	pthread_mutex_t mu;
	struct shaper s;
};

int esd_uplink_create(uint64_t rate_bps, uint64_t burst_bytes, struct esd_uplink **out)
{
	struct esd_uplink *u = calloc(1, sizeof(*u));
	if (!u)
		return -ENOMEM;
	pthread_mutex_init(&u->mu, NULL);
	esd_shaper_init(&u->s, rate_bps, burst_bytes);
	*out = u;
	return 0;
}

void esd_uplink_set_rate(struct esd_uplink *u, uint64_t rate_bps)
{
	atomic_store(&u->s.rate_bps, rate_bps);
}

void esd_uplink_free(struct esd_uplink *u)
{
	if (!u)
		return;
	pthread_mutex_destroy(&u->mu);
	free(u);
}

struct shaper *esd_link_shaper(struct esd_link *l)
{
	return l->o.uplink ? &l->o.uplink->s : &l->shaper;
}

/* shaper_take on the link's bucket (an uplink's under its lock). */
static int64_t link_shape(struct esd_link *l, size_t bytes)
{
	struct esd_uplink *u = l->o.uplink;
	if (!u)
		return shaper_take(&l->shaper, bytes);
	pthread_mutex_lock(&u->mu);
	int64_t waited = shaper_take(&u->s, bytes);
	pthread_mutex_unlock(&u->mu);
	return waited;
}

void esd_link_shape_tx(struct esd_link *l, size_t bytes)
{
	int64_t waited = link_shape(l, bytes);
	if (waited)
		atomic_fetch_add(&l->shaped_wait_ns, (uint64_t)waited);
	atomic_fetch_add(&l->wire_tx_bytes, bytes);
}
