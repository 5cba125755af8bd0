/*
 * Checkpoint and restore of a PS shard at an iteration boundary (the
 * consistent cut of docs/runtime.md: the daemons flushed every DIRTY row
 * before the barrier that writes it). The file format and its atomic
 * replacement are esd/ckpt.h's.
 */
#include "ps.h"

#include <esd/ckpt.h>
#include <esd/clock.h>
#include <esd/err.h>
#include <esd/log.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The checkpoint about to be replaced stays as the previous one: when a
 * shard that died restarts from the checkpoint before the newest the
 * others wrote, they go back to it too. A hard link, so the newest file
 * stays in place until its successor is renamed over it. */
static void keep_previous(const struct ps *ps, const char *path)
{
	char prev[1100], tmp[1110];
	ps_checkpoint_prev_path(ps, prev, sizeof(prev));
	snprintf(tmp, sizeof(tmp), "%s.tmp", prev);
	unlink(tmp);
	if (link(path, tmp) == 0 && rename(tmp, prev))
		unlink(tmp);
}

int ps_checkpoint_locked(struct ps *ps)
{
	char path[1100];
	struct esd_ckpt_writer *w;
	struct esd_ckpt_meta meta = {
		.seed = ps->job.seed,
		.iteration = ps->bar.iter_done, /* iterations completed (the next 0-based one) */
		.data_cursor = ps_cursor_at(ps, ps->bar.iter_done),
		.dim = ps->job.dim,
		.optimizer = ps->job.optim.opt,
		.shard = ps->shard,
		.nshards = ps->job.shards,
		.dense_len = ps->dtab.val ? ps->dtab.len : 0,
		.dense_clock = ps->dtab.clock,
	};
	int64_t t0 = esd_now_ns();
	size_t sd = ps_store_state_len(ps->st);

	ps_checkpoint_path(ps, path, sizeof(path));
	keep_previous(ps, path);
	int rc = esd_ckpt_writer_open(path, &meta, &w);
	if (rc)
		return rc;
	for (size_t i = 0; i < ps_store_count(ps->st) && !rc; i++) {
		struct ps_row *r = ps_store_at(ps->st, i);
		rc = esd_ckpt_write_row(w, r->key, r->clock, r->data, sd ? r->data + ps->job.dim : NULL);
	}
	if (!rc && meta.dense_len)
		rc = esd_ckpt_write_dense(w, ps->dtab.val, sd ? ps->dtab.state : NULL);
	if (rc) {
		esd_ckpt_writer_abort(w);
		return rc;
	}
	rc = esd_ckpt_writer_commit(w);
	if (!rc) {
		ps->stats.checkpoints++;
		ps->stats.last_ckpt_ns = esd_now_ns();
		ESD_INFO("ps", "checkpoint of iteration %llu: %zu rows to %s in %.1f ms",
			 (unsigned long long)ps->bar.iter_done, ps_store_count(ps->st), path,
			 esd_ns_to_ms(esd_now_ns() - t0));
	}
	return rc;
}

static int restore_row(void *arg, esd_key_t key, uint64_t clock, const float *value,
		       const float *state)
{
	return ps_store_put_value(arg, key, clock, value, state);
}

int ps_restore(struct ps *ps, const char *path)
{
	struct esd_ckpt_reader *r;
	struct esd_ckpt_error err = {0};
	int rc = esd_ckpt_open(path, &r, &err);

	if (rc) {
		ESD_ERR("ps", "refusing checkpoint: %s", err.msg); /* names file and byte */
		return rc;
	}
	const struct esd_ckpt_info *in = esd_ckpt_info(r);
	const struct esd_ckpt_meta *m = &in->meta;
	if (m->seed != ps->job.seed || m->dim != ps->job.dim ||
	    m->optimizer != ps->job.optim.opt || m->shard != ps->shard ||
	    m->nshards != ps->job.shards ||
	    (ps->dtab.val && m->dense_len != ps->dtab.len)) {
		ESD_ERR("ps", "checkpoint %s is of another job (seed %llu dim %u shard %u/%u)", path,
			(unsigned long long)m->seed, m->dim, m->shard, m->nshards);
		esd_ckpt_close(r);
		return -EINVAL;
	}
	rc = esd_ckpt_read_rows(r, restore_row, ps->st);
	if (!rc && m->dense_len && ps->dtab.val)
		rc = esd_ckpt_read_dense(r, ps->dtab.val,
					 ps_store_state_len(ps->st) ? ps->dtab.state : NULL);
	if (!rc) {
		ps->dtab.clock = m->dense_clock;
		ps->bar.iter_done = m->iteration;
		ps_set_cursor_base(ps, m->iteration, m->data_cursor);
		ps->bar.rolled_to = m->iteration; /* a rollback to it has nothing to do */
		ESD_INFO("ps", "restored %llu rows of iteration %llu from %s",
			 (unsigned long long)in->row_count, (unsigned long long)ps->bar.iter_done, path);
	}
	esd_ckpt_close(r);
	return rc;
}

/* The iteration of a checkpoint file, or 0 when there is none (or it is
 * refused). */
static uint64_t checkpoint_iteration(const char *path)
{
	struct esd_ckpt_reader *r;
	struct esd_ckpt_error err = {0};
	if (access(path, F_OK) || esd_ckpt_open(path, &r, &err))
		return 0;
	uint64_t it = esd_ckpt_info(r)->meta.iteration;
	esd_ckpt_close(r);
	return it;
}

/* The barrier and every pending request back to a state of boundary c. */
static void reset_progress_locked(struct ps *ps, uint64_t c)
{
	ps->bar.iter_done = c;
	ps->bar.cursor = ps_cursor_at(ps, c);
	ps->bar.arrived = ps->bar.final = 0;
	ps->bar.arrived_mask = 0;
	ps->bar.rolled_to = ps->bar.last_rollback = c;
	ps->bar.epoch++;
	ps->ckpt.flagged = 0;
	ps->ckpt.at = 0;
	ps->ckpt.requested = false;
	ps->live.pending = false;
	ps->live.at = 0;
	ps->live.rate_req_mask = 0;
	memset(ps->fit.end, 0, sizeof(ps->fit.end)); /* windows of the undone iterations */
	if (ps->dtab.stage)
		memset(ps->dtab.stage, 0, ps->dtab.len * ps->job.n * sizeof(float));
	ps->dtab.staged = false;
}

int ps_rollback_locked(struct ps *ps, uint64_t c, uint64_t *newest)
{
	char path[1100], prev[1100];
	ps_checkpoint_path(ps, path, sizeof(path));
	ps_checkpoint_prev_path(ps, prev, sizeof(prev));
	uint64_t it = checkpoint_iteration(path), ip = checkpoint_iteration(prev);
	*newest = it;
	const char *from = it == c ? path : ip == c ? prev : NULL;
	bool again = !from && c && c == ps->resumed_from;
	if (!from && !again) {
		ESD_WARN("ps", "asked to go back to checkpoint %llu: this shard has %llu and %llu",
			 (unsigned long long)c, (unsigned long long)it, (unsigned long long)ip);
		return -ESTALE;
	}
	struct ps_store *fresh;
	int rc = ps_store_create_job(&ps->job, ps->shard, &fresh);
	if (rc)
		return rc;
	ps_store_free(ps->st);
	ps->st = fresh;
	rc = again ? ps_resume_from(ps, ps->job.resume_from) : ps_restore(ps, from);
	if (!rc) {
		reset_progress_locked(ps, c);
		ESD_WARN("ps", "another shard restarted: back to checkpoint %llu (%s)",
			 (unsigned long long)c, again ? ps->job.resume_from : from);
	}
	return rc;
}
