/*
 * The executor's saved boundaries and resumes: the cache metadata kept at
 * each checkpoint boundary (two generations), the resume after a lost
 * shard (the rollback of docs/design.md §8) and the whole-job resume at a
 * boundary.
 */
#include "exec.h"
#include "node.h"

#include <esd/err.h>
#include <esd/log.h>

#include <stdlib.h>

/* The generation saved at boundary iter, or -1. */
static int saved_gen(const struct node *nd, uint64_t iter)
{
	for (int g = 0; g < 2; g++)
		if (nd->rec.saved_ok[g] && nd->rec.saved_iter[g] == iter)
			return g;
	return -1;
}

int node_save_boundary(struct node *nd, uint64_t iter)
{
	/* this boundary's generation, else an unused one, else the older */
	int g = saved_gen(nd, iter);
	if (g < 0)
		g = !nd->rec.saved_ok[0]   ? 0
		    : !nd->rec.saved_ok[1] ? 1
					   : nd->rec.saved_iter[0] > nd->rec.saved_iter[1];
	size_t len = esd_cmeta_block_bytes(nd->cm);
	struct esd_cmeta *out;
	nd->rec.saved_ok[g] = false;
	if (len > nd->rec.saved_cm_len[g]) {
		void *m = NULL;
		if (posix_memalign(&m, 64, len))
			return -ENOMEM;
		free(nd->rec.saved_cm[g]);
		nd->rec.saved_cm[g] = m;
		nd->rec.saved_cm_len[g] = len;
	}
	int rc = esd_cmeta_copy(nd->rec.saved_cm[g], nd->rec.saved_cm_len[g], nd->cm, &out);
	if (!rc) {
		nd->rec.saved_iter[g] = iter;
		nd->rec.saved_ok[g] = true;
	}
	return rc;
}

/* The real cache's metadata at boundary iter (just saved) to disk. */
int node_write_cache_state(struct node *nd, uint64_t iter)
{
	const int g = saved_gen(nd, iter);
	if (g < 0)
		return -ESTALE;
	struct node_state st = {.iter = iter, .n = 1};
	st.cm[0] = nd->rec.saved_cm[g];
	return node_state_write(nd, &st, "cache");
}

/* A shard went away (or another shard's restart sent it back to a
 * checkpoint): what node_recover() resumes from. */
bool node_is_link_failure(int rc)
{
	return rc == -ECONNRESET || rc == -EPIPE || rc == -ETIMEDOUT || rc == -ECONNREFUSED ||
	       rc == -ECONNABORTED || rc == -ESD_EROLLBACK;
}

/* Roll the cache metadata back to a saved block of boundary iter and pull
 * the values of its CLEAN and DIRTY rows again (kind other): the shards'
 * checkpoint of the boundary holds the DIRTY rows' values too (the
 * checkpoint pushes). */
static int restore_cache(struct exec *x, const void *block, uint64_t iter, uint32_t *nclean)
{
	struct node *nd = x->nd;
	struct esd_cmeta *cm;
	esd_cache_meta_write_begin(nd->cache);
	int rc = esd_cmeta_copy(nd->cm, esd_cmeta_block_bytes(nd->cm), block, &cm);
	esd_cache_meta_write_end(nd->cache);
	if (rc)
		return rc;
	nd->cm = cm;
	uint32_t cap = esd_cmeta_capacity(nd->cm);
	for (uint32_t s = 0; s < cap && !rc; s++) {
		const struct esd_cmeta_slot *sl = esd_cmeta_slot(nd->cm, s);
		if (sl->state == ESD_ROW_CLEAN || sl->state == ESD_ROW_DIRTY) {
			rc = node_exec_add_pull(x, sl->key);
			(*nclean)++;
		}
	}
	esd_cache_meta_write_begin(nd->cache);
	if (!rc)
		rc = node_exec_pull(x, iter, ESD_XFER_OTHER, NULL, true);
	esd_cache_meta_write_end(nd->cache);
	return rc;
}

/* Whether a shard whose link broke will come back: something restarts
 * shards (job.restart_shards) and they resume from checkpoints. Else the
 * job fails at once. */
bool node_shards_restart(const struct node *nd)
{
	if (nd->job.restart_shards && !nd->job.checkpoint_dir[0])
		ESD_ERR("node", "job.restart_shards is on but ps.checkpoint_dir is unset: a "
			"restarted shard has nothing to resume from");
	return nd->job.restart_shards && nd->job.checkpoint_dir[0];
}

/* A shard went away: reconnect (it restarts from its last checkpoint), roll
 * the cache metadata and the dispatcher back to that boundary, re-pull the
 * values of every CLEAN row (kind other) and go on from there. */
int node_recover(struct exec *x, uint64_t *resume)
{
	struct node *nd = x->nd;
	uint64_t ps_iter = 0;
	int rc;

	if (nd->job.het && nd->job.staleness > 0) {
		/* stale copies are used as they are, and their values at the
		 * boundary are gone (their slots were reused since): no exact
		 * resume exists */
		ESD_ERR("node", "lost a PS shard; dispatch.sync = het with staleness %u cannot "
			"resume from a checkpoint (the stale copies' values at the boundary are "
			"not kept): restart the job", nd->job.staleness);
		return -ENOTSUP;
	}
	ESD_WARN("node", "lost a PS shard; reconnecting to resume from its checkpoint");
	for (uint32_t s = 0; s < ESD_JOB_MAX_SHARDS; s++) {
		node_exec_reset_shard(&x->sb[s]);
		x->npull[s] = 0;
		/* frames encoded and never sent: their sequences are not used */
		nd->links.push_seq[s] = nd->links.sent_seq[s];
	}
	/* the shards that restarted are at their checkpoints; the others go
	 * back to the same cut */
	uint64_t iter[ESD_JOB_MAX_SHARDS] = {0}, restarted = 0;
	rc = node_links_reconnect(nd, iter, &restarted);
	if (!rc && !restarted) {
		ESD_ERR("node", "no link to a shard broke: nothing to resume from");
		return -ECANCELED;
	}
	if (!rc)
		rc = node_links_rollback(nd, iter, restarted, &ps_iter);
	if (rc)
		return rc;
	const int g = saved_gen(nd, ps_iter);
	if (g < 0) {
		ESD_ERR("node", "the shards resumed at iteration %llu but this node kept the state "
			"of iterations %llu and %llu only: cannot resume",
			(unsigned long long)ps_iter, (unsigned long long)nd->rec.saved_iter[0],
			(unsigned long long)nd->rec.saved_iter[1]);
		return -ESTALE;
	}
	uint32_t nclean = 0;
	rc = restore_cache(x, nd->rec.saved_cm[g], ps_iter, &nclean);
	if (!rc)
		rc = node_dispatcher_restart(nd, ps_iter);
	if (!rc) {
		ESD_INFO("node", "resumed at iteration %llu (%u clean rows re-pulled)",
			 (unsigned long long)ps_iter, nclean);
		*resume = ps_iter;
	}
	return rc;
}

/* A whole-job resume at boundary start: the cache metadata from this
 * node's file of the boundary, the rows' values from the shards. */
int node_resume_job(struct exec *x, uint64_t start)
{
	struct node *nd = x->nd;
	struct node_state st;
	uint32_t nclean = 0;
	int rc = 0;
	if (nd->rec.cold_at) { /* a resize: the cache starts empty */
		rc = node_save_boundary(nd, start);
		if (!rc && nd->job.checkpoint_dir[0]) /* this job's own part of the boundary */
			rc = node_write_cache_state(nd, start);
	} else if (!(rc = node_state_read(nd, start, "cache", 1, &st))) {
		rc = restore_cache(x, st.cm[0], start, &nclean);
		node_state_free(&st);
	}
	if (!rc)
		rc = node_save_boundary(nd, start);
	if (rc)
		return rc;
	pthread_mutex_lock(&nd->qmu);
	nd->stats.iter_done = start;
	pthread_mutex_unlock(&nd->qmu);
	ESD_INFO("node", "the job resumes after iteration %llu (%u clean rows pulled)",
		 (unsigned long long)start, nclean);
	return 0;
}
