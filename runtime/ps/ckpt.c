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
#include <stdlib.h>
#include <string.h>

int ps_checkpoint_locked(struct ps *ps)
{
	char path[1100];
	struct esd_ckpt_writer *w;
	struct esd_ckpt_meta meta = {
		.seed = ps->job.seed,
		.iteration = ps->bar.iter_done, /* iterations completed (the next 0-based one) */
		.data_cursor = ps->bar.iter_done * ps->job.global_batch,
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
		ps->bar.cursor = m->data_cursor;
		ESD_INFO("ps", "restored %llu rows of iteration %llu from %s",
			 (unsigned long long)in->row_count, (unsigned long long)ps->bar.iter_done, path);
	}
	esd_ckpt_close(r);
	return rc;
}
