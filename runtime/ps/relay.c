/*
 * One decider (docs/design.md §5, One decider): shard 0 relays node 0's
 * ORDER frames, each worker's part of a decision, to that worker. Node 0's
 * link thread keeps each frame for its worker; the worker's own link
 * thread sends what is kept after every frame it handles and whenever its
 * receive times out (a link is written by its own thread only, as every
 * backend wants). The frame is checked by the decoder on the way in and
 * tagged again for its worker's link on the way out.
 */
#include "ps.h"

#include <esd/err.h>
#include <esd/log.h>

#include <stdio.h>
#include <string.h>

void ps_relay_init(struct ps *ps)
{
	pthread_mutex_init(&ps->relay.mu, NULL);
	for (uint32_t w = 0; w < ESD_MAX_WORKERS; w++)
		esd_buf_init(&ps->relay.held[w]);
}

void ps_relay_fini(struct ps *ps)
{
	for (uint32_t w = 0; w < ESD_MAX_WORKERS; w++)
		esd_buf_free(&ps->relay.held[w]);
	pthread_mutex_destroy(&ps->relay.mu);
}

bool ps_relays(const struct ps_link *pl)
{
	return pl->ps->job.derived.one_decider && pl->ps->shard == 0 && pl->worker > 0;
}

int ps_relay_flush(struct ps_link *pl, struct esd_buf *out)
{
	struct ps *ps = pl->ps;
	if (!ps_relays(pl))
		return 0;
	const uint32_t w = (uint32_t)pl->worker;
	pthread_mutex_lock(&ps->relay.mu);
	struct esd_buf t = ps->relay.held[w]; /* swapped, not copied */
	ps->relay.held[w] = *out;
	*out = t;
	pthread_mutex_unlock(&ps->relay.mu);
	if (!out->len)
		return 0;
	int rc = esd_link_send(pl->link, out->data, out->len);
	if (!rc) {
		pthread_mutex_lock(&ps->relay.mu);
		ps->relay.bytes += out->len;
		pthread_mutex_unlock(&ps->relay.mu);
	}
	esd_buf_reset(out);
	return rc;
}

/* Why pl may not send ORDER o here, or NULL. */
static const char *order_problem(const struct ps_link *pl, const struct esd_order_msg *o)
{
	const struct ps *ps = pl->ps;
	if (!ps->job.derived.one_decider)
		return "every node of this job decides itself (dispatch.every_node, or shards "
		       "that restart)";
	if (ps->shard != 0)
		return "only shard 0 relays orders";
	if (pl->worker != 0)
		return "only worker 0 decides";
	if (o->worker == 0 || o->worker >= ps->job.n)
		return "it is for no other worker of the job";
	return NULL;
}

int ps_on_order(struct ps_link *pl, const struct esd_order_msg *o)
{
	struct ps *ps = pl->ps;
	const char *why = order_problem(pl, o);
	if (why) {
		char text[256];
		snprintf(text, sizeof(text), "ORDER for worker %u refused: %s", o->worker, why);
		ESD_ERR("ps", "worker %d: %s", pl->worker, text);
		esd_link_send_error(pl->link, -EPROTO, text);
		return -EPROTO;
	}
	pthread_mutex_lock(&ps->relay.mu);
	int rc = esd_enc_order_copy(&ps->relay.held[o->worker], o);
	if (!rc)
		ps->relay.frames++;
	pthread_mutex_unlock(&ps->relay.mu);
	if (rc)
		ESD_ERR("ps", "keeping an ORDER for worker %u: %s", o->worker, esd_strerror(rc));
	return rc;
}
