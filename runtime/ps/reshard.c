/*
 * Resize on resume (ps.resume_from): a shard of a job with another shard
 * or worker count than the job that wrote a checkpoint starts from it.
 * It reads every shard file of that checkpoint, DIR/ps-shard<i>.ckpt for
 * i below the old shard count (from the files' headers), after checking
 * that the set is complete and of one cut (the same iteration, data
 * cursor, seed, dim, optimizer, shard count and dense clock), and keeps
 * the rows whose keys hash to it now (esd_shard_of over the job's shards)
 * with their optimizer state and clocks; shard 0 takes the dense table.
 * The iteration and the data cursor are the checkpoint's: the next sample
 * is the one after its last, whatever the new global batch.
 */
#include "ps.h"

#include <errno.h>
#include <esd/ckpt.h>
#include <esd/err.h>
#include <esd/log.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The old checkpoint's files, open and validated. */
struct old_set {
	const char *dir;
	uint32_t n; /* old shard count */
	struct esd_ckpt_reader *r[ESD_JOB_MAX_SHARDS];
	char path[ESD_JOB_MAX_SHARDS][1100];
};

static void old_path(const char *dir, uint32_t i, char *buf, size_t len)
{
	snprintf(buf, len, "%s/ps-shard%u.ckpt", dir, i);
}

/* The old shard count, from the header of the first file that opens
 * (ps-shard0.ckpt, else the next): 0 after logging when none does. */
static uint32_t old_count(const char *dir)
{
	for (uint32_t i = 0; i < ESD_JOB_MAX_SHARDS; i++) {
		char p[1100];
		struct esd_ckpt_reader *r;
		struct esd_ckpt_error err;
		old_path(dir, i, p, sizeof(p));
		if (access(p, F_OK))
			continue;
		if (esd_ckpt_open(p, &r, &err)) {
			ESD_ERR("ps", "ps.resume_from: refusing checkpoint file %s", err.msg);
			return 0;
		}
		uint32_t n = esd_ckpt_info(r)->meta.nshards;
		esd_ckpt_close(r);
		if (n > ESD_JOB_MAX_SHARDS) {
			ESD_ERR("ps", "ps.resume_from: %s says %u shards, at most %d are supported", p,
				n, ESD_JOB_MAX_SHARDS);
			return 0;
		}
		return n;
	}
	ESD_ERR("ps", "ps.resume_from: %s holds no shard checkpoint (ps-shard<i>.ckpt)", dir);
	return 0;
}

/* File i against file 0 (one cut) and against its name; -EINVAL after
 * logging what differs, naming both files. */
static int check_member(const struct old_set *o, uint32_t i)
{
	const struct esd_ckpt_meta *a = &esd_ckpt_info(o->r[0])->meta;
	const struct esd_ckpt_meta *b = &esd_ckpt_info(o->r[i])->meta;
	const char *what = b->shard != i				? "shard"
			   : b->nshards != a->nshards		? "shard count"
			   : b->iteration != a->iteration	? "iteration"
			   : b->data_cursor != a->data_cursor ? "data cursor"
			   : b->seed != a->seed			? "seed"
			   : b->dim != a->dim			? "dim"
			   : b->optimizer != a->optimizer	? "optimizer"
							: NULL;
	if (!what)
		return 0;
	ESD_ERR("ps", "ps.resume_from: %s does not belong with %s: its %s differs (shard %u of %u, "
		"iteration %llu, cursor %llu; the other: shard %u of %u, iteration %llu, cursor "
		"%llu)", o->path[i], o->path[0], what, b->shard, b->nshards,
		(unsigned long long)b->iteration, (unsigned long long)b->data_cursor, a->shard,
		a->nshards, (unsigned long long)a->iteration, (unsigned long long)a->data_cursor);
	return -EINVAL;
}

/* Name every missing file of the set; -ENOENT when one is. */
static int check_complete(const struct old_set *o)
{
	int rc = 0;
	for (uint32_t i = 0; i < o->n; i++) {
		if (!access(o->path[i], F_OK))
			continue;
		ESD_ERR("ps", "ps.resume_from: the checkpoint in %s was written by %u shards but %s "
			"is missing", o->dir, o->n, o->path[i]);
		rc = -ENOENT;
	}
	return rc;
}

static void close_set(struct old_set *o)
{
	for (uint32_t i = 0; i < o->n; i++)
		esd_ckpt_close(o->r[i]);
}

/* Open and validate every file of the checkpoint in dir. */
static int open_set(struct old_set *o, const char *dir)
{
	memset(o, 0, sizeof(*o));
	o->dir = dir;
	o->n = old_count(dir);
	if (!o->n)
		return -EINVAL;
	for (uint32_t i = 0; i < o->n; i++)
		old_path(dir, i, o->path[i], sizeof(o->path[i]));
	int rc = check_complete(o);
	for (uint32_t i = 0; i < o->n && !rc; i++) {
		struct esd_ckpt_error err;
		rc = esd_ckpt_open(o->path[i], &o->r[i], &err);
		if (rc)
			ESD_ERR("ps", "ps.resume_from: refusing checkpoint file %s", err.msg);
		else
			rc = check_member(o, i);
	}
	if (rc)
		close_set(o);
	return rc;
}

/* The checkpoint against this job: the model must be the same. */
static int check_job(const struct ps *ps, const struct old_set *o)
{
	const struct esd_ckpt_meta *m = &esd_ckpt_info(o->r[0])->meta;
	if (m->seed == ps->job.seed && m->dim == ps->job.dim && m->optimizer == ps->job.optim.opt) {
		for (uint32_t i = 0; i < o->n; i++)
			if (ps_check_table_dims(ps, &esd_ckpt_info(o->r[i])->meta, o->path[i]))
				return -EINVAL;
		return 0;
	}
	ESD_ERR("ps", "ps.resume_from: %s is of another model (job.seed %llu, model.dim %u, "
		"model.optimizer %s); this job has job.seed %llu, model.dim %u, model.optimizer %s",
		o->path[0], (unsigned long long)m->seed, m->dim, esd_optim_name(m->optimizer),
		(unsigned long long)ps->job.seed, ps->job.dim, esd_optim_name(ps->job.optim.opt));
	return -EINVAL;
}

struct take_ctx {
	struct ps *ps;
	uint64_t kept;
};

static int take_row(void *arg, esd_key_t key, uint64_t clock, const float *value,
		    const float *state)
{
	struct take_ctx *c = arg;
	if (esd_shard_of(key, c->ps->job.shards) != c->ps->shard)
		return 0;
	c->kept++;
	int rc = ps_store_check_padding(c->ps->st, key, value, "ps.resume_from");
	return rc ? rc : ps_store_put_padded(c->ps->st, key, clock, value, state);
}

/* Shard 0: the dense table and its clock from the one old file that has
 * it. */
static int take_dense(struct ps *ps, const struct old_set *o)
{
	for (uint32_t i = 0; i < o->n; i++) {
		const struct esd_ckpt_meta *m = &esd_ckpt_info(o->r[i])->meta;
		if (!m->dense_len)
			continue;
		if (m->dense_len != ps->dtab.len) {
			ESD_ERR("ps", "ps.resume_from: %s has a dense table of %llu floats, this "
				"job's model has %zu (model.hidden, the stream's features)",
				o->path[i], (unsigned long long)m->dense_len, ps->dtab.len);
			return -EINVAL;
		}
		ps->dtab.clock = m->dense_clock;
		return esd_ckpt_read_dense(o->r[i], ps->dtab.val,
					   ps_store_state_len(ps->st) ? ps->dtab.state : NULL);
	}
	ESD_ERR("ps", "ps.resume_from: no file of the checkpoint in %s holds the dense table",
		o->dir);
	return -EINVAL;
}

int ps_resume_from(struct ps *ps, const char *dir)
{
	struct old_set o;
	int rc = open_set(&o, dir);
	if (rc)
		return rc;
	rc = check_job(ps, &o);
	struct take_ctx c = {.ps = ps};
	for (uint32_t i = 0; i < o.n && !rc; i++) {
		rc = esd_ckpt_read_rows(o.r[i], take_row, &c);
		if (rc)
			ESD_ERR("ps", "ps.resume_from: reading %s: %s", o.path[i], esd_strerror(rc));
	}
	if (!rc && ps->dtab.val)
		rc = take_dense(ps, &o);
	if (!rc) {
		const struct esd_ckpt_meta *m = &esd_ckpt_info(o.r[0])->meta;
		ps->bar.iter_done = m->iteration;
		ps->bar.rolled_to = m->iteration;
		ps_set_cursor_base(ps, m->iteration, m->data_cursor);
		ps->resumed_from = m->iteration;
		ESD_INFO("ps", "resumed from %s (iteration %llu, data cursor %llu, %u shards): %llu "
			 "rows rehashed to shard %u of %u", dir, (unsigned long long)m->iteration,
			 (unsigned long long)m->data_cursor, o.n, (unsigned long long)c.kept,
			 ps->shard, ps->job.shards);
	}
	close_set(&o);
	return rc;
}
