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
#include <dirent.h>
#include <errno.h>
#include <sys/stat.h>
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

/* The longest chain of increments before a full checkpoint. */
#define CHAIN_MAX 16

/* The file a checkpoint of iteration it is written to: the name its
 * increments find it by (esd/ckpt.h, Increments). */
static void chain_file(const struct ps *ps, bool incr, uint64_t it, char *buf, size_t len)
{
	snprintf(buf, len, "%s/ps-shard%u.ckpt.%s%llu", ps->job.checkpoint_dir, ps->shard,
		 incr ? "inc" : "base", (unsigned long long)it);
}

/* An increment when the chain allows one: a base to build on, fewer than
 * CHAIN_MAX increments, and increments not yet holding more rows than the
 * base (past that, a full checkpoint costs less than the chain it ends). */
static bool want_increment(const struct ps *ps, size_t changed)
{
	const struct ps_ckpt_chain *c = &ps->chain;
	return c->ok && c->len < CHAIN_MAX && c->rows + changed <= c->base_rows;
}

static size_t changed_rows(const struct ps *ps)
{
	size_t n = 0;
	for (size_t i = 0; i < ps_store_count(ps->st); i++)
		n += ps_store_changed(ps->st, i);
	return n;
}

/* Rows (every one, or those changed since the last checkpoint) and the
 * dense table into w. */
static int write_body(struct ps *ps, struct esd_ckpt_writer *w, bool incr,
		      const struct esd_ckpt_meta *meta)
{
	size_t sd = ps_store_state_len(ps->st);
	int rc = 0;
	for (size_t i = 0; i < ps_store_count(ps->st) && !rc; i++) {
		if (incr && !ps_store_changed(ps->st, i))
			continue;
		struct ps_row *r = ps_store_at(ps->st, i);
		if (!r)
			return -EIO; /* the row file failed (logged by the store) */
		const unsigned d = ps_store_key_dim(ps->st, r->key);
		rc = esd_ckpt_write_row_packed(w, r->key, r->clock, r->data, sd ? r->data + d : NULL);
	}
	if (!rc && meta->dense_len)
		rc = esd_ckpt_write_dense(w, ps->dtab.val, sd ? ps->dtab.state : NULL);
	return rc;
}

/* Put the checkpoint file at the job's checkpoint name too (a hard link
 * renamed over it: the name changes from the old cut to the new at once). */
static int link_as_newest(const char *file, const char *path)
{
	char tmp[1110];
	snprintf(tmp, sizeof(tmp), "%s.lnk", path);
	unlink(tmp);
	if (link(file, tmp) || rename(tmp, path)) {
		int rc = -errno;
		unlink(tmp);
		return rc;
	}
	return 0;
}

/* The file checksum of a committed checkpoint (an increment's parent). */
static int file_sum(const char *file, uint64_t *sum)
{
	int rc = esd_ckpt_file_sum(file, sum);
	if (rc)
		ESD_ERR("ps", "reading back the checksum of %s: %s", file, esd_strerror(rc));
	return rc;
}

/* Whether name is one of this shard's chain files. */
static bool is_chain_file(const struct ps *ps, const char *name)
{
	char pre[64];
	int n = snprintf(pre, sizeof(pre), "ps-shard%u.ckpt.", ps->shard);
	const char *t = name + n;
	return !strncmp(name, pre, (size_t)n) &&
	       ((!strncmp(t, "inc", 3) && t[3] >= '0' && t[3] <= '9') ||
		(!strncmp(t, "base", 4) && t[4] >= '0' && t[4] <= '9'));
}

/* Add the files of the chain ending at path to keep[] (their names). */
static size_t chain_names(const char *path, char (*keep)[256], size_t n, size_t max)
{
	char cur[1100], par[1100];
	struct esd_ckpt_error err;
	snprintf(cur, sizeof(cur), "%s", path);
	while (n < max && esd_ckpt_parent(cur, par, sizeof(par), &err) == 1) {
		const char *b = strrchr(par, '/');
		snprintf(keep[n++], 256, "%.255s", b ? b + 1 : par);
		snprintf(cur, sizeof(cur), "%s", par);
	}
	return n;
}

/* Remove the chain files neither the newest nor the previous checkpoint
 * needs (an older base and its increments, once a newer base took over). */
static void remove_stale(const struct ps *ps, const char *newest_file)
{
	char path[1100], prev[1100], keep[2 * ESD_CKPT_MAX_CHAIN + 1][256];
	ps_checkpoint_path(ps, path, sizeof(path));
	ps_checkpoint_prev_path(ps, prev, sizeof(prev));
	const char *b = strrchr(newest_file, '/');
	size_t n = 0;
	snprintf(keep[n++], 256, "%.255s", b ? b + 1 : newest_file);
	n = chain_names(path, keep, n, 2 * ESD_CKPT_MAX_CHAIN + 1);
	n = chain_names(prev, keep, n, 2 * ESD_CKPT_MAX_CHAIN + 1);
	DIR *d = opendir(ps->job.checkpoint_dir);
	if (!d)
		return;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (!is_chain_file(ps, e->d_name))
			continue;
		bool kept = false;
		for (size_t i = 0; i < n && !kept; i++)
			kept = !strcmp(keep[i], e->d_name);
		if (!kept)
			unlinkat(dirfd(d), e->d_name, 0);
	}
	closedir(d);
}

/* Where the next increment builds on: the checkpoint just written or
 * restored (file, of iteration it, holding rows rows). */
static int chain_after(struct ps *ps, const char *file, bool incr, uint64_t it, uint64_t rows)
{
	struct ps_ckpt_chain *c = &ps->chain;
	uint64_t sum;
	int rc = file_sum(file, &sum);
	c->ok = !rc;
	if (rc)
		return rc;
	c->iter = it;
	c->sum = sum;
	if (incr) {
		c->len++;
		c->rows += rows;
	} else {
		c->len = 0;
		c->rows = 0;
		c->base_rows = rows;
	}
	ps_store_clear_changed(ps->st);
	return 0;
}

/*
 * The checkpoint of the boundary just reached: a full one, or an increment
 * of the rows changed since the last checkpoint (want_increment). It is
 * written to its chain file (ps-shardS.ckpt.{base,inc}I), then linked as
 * ps-shardS.ckpt; the one it replaces stays as ps-shardS.prev.ckpt.
 */
int ps_checkpoint_locked(struct ps *ps)
{
	char path[1100], file[1100];
	struct esd_ckpt_writer *w;
	size_t changed = changed_rows(ps);
	/* a checkpoint of the iteration the chain ends at (right after a
	 * restore) is a full one: an increment needs an older parent */
	bool incr = want_increment(ps, changed) && ps->chain.iter != ps->bar.iter_done;
	struct esd_ckpt_meta meta = {
		.seed = ps->job.seed,
		.iteration = ps->bar.iter_done, /* iterations completed (the next 0-based one) */
		.data_cursor = ps_cursor_at(ps, ps->bar.iter_done),
		.dim = ps->job.dim,
		.ntables = ps->job.ntable_dims, /* each row at its table's dim */
		.table_dims = ps->job.table_dims,
		.optimizer = ps->job.optim.opt,
		.shard = ps->shard,
		.nshards = ps->job.shards,
		.dense_len = ps->dtab.val ? ps->dtab.len : 0,
		.dense_clock = ps->dtab.clock,
		.increment = incr,
		.parent_iteration = incr ? ps->chain.iter : 0,
		.parent_sum = incr ? ps->chain.sum : 0,
	};
	int64_t t0 = esd_now_ns();
	uint64_t rows = incr ? changed : ps_store_count(ps->st);

	ps_checkpoint_path(ps, path, sizeof(path));
	chain_file(ps, incr, meta.iteration, file, sizeof(file));
	int rc = esd_ckpt_writer_open(file, &meta, &w);
	if (rc)
		return rc;
	rc = write_body(ps, w, incr, &meta);
	if (rc) {
		esd_ckpt_writer_abort(w);
		return rc;
	}
	rc = esd_ckpt_writer_commit(w);
	if (!rc) {
		keep_previous(ps, path);
		rc = link_as_newest(file, path);
	}
	if (!rc)
		rc = chain_after(ps, file, incr, meta.iteration, rows);
	if (!rc) {
		struct stat sb;
		uint64_t bytes = stat(file, &sb) ? 0 : (uint64_t)sb.st_size;
		remove_stale(ps, file);
		ps->stats.checkpoints++;
		ps->stats.last_ckpt_ns = esd_now_ns();
		ps->stats.ckpt_bytes += bytes;
		ps->stats.last_ckpt_bytes = bytes;
		ESD_INFO("ps", "checkpoint of iteration %llu: %s of %llu rows (%llu bytes) to %s "
			 "in %.1f ms",
			 (unsigned long long)ps->bar.iter_done, incr ? "increment" : "full",
			 (unsigned long long)rows, (unsigned long long)bytes, file,
			 esd_ns_to_ms(esd_now_ns() - t0));
	}
	return rc;
}

/* After a restore from path: the next increment builds on it when it is
 * this job's own checkpoint (a full one; after an increment the next
 * checkpoint is full, its chain's length is not known here). */
static void chain_restored(struct ps *ps, const char *path, const struct esd_ckpt_info *in)
{
	size_t dl = strlen(ps->job.checkpoint_dir);
	bool own = dl && !strncmp(path, ps->job.checkpoint_dir, dl) && path[dl] == '/';
	char file[1100];
	uint64_t fsum;
	ps->chain = (struct ps_ckpt_chain){0};
	chain_file(ps, in->meta.increment, in->meta.iteration, file, sizeof(file));
	/* increments find their parent by its chain file's name */
	if (!own || file_sum(path, &ps->chain.sum) || esd_ckpt_file_sum(file, &fsum) ||
	    fsum != ps->chain.sum)
		return;
	ps->chain.ok = true;
	ps->chain.iter = in->meta.iteration;
	ps->chain.base_rows = in->row_count;
	ps->chain.rows = in->meta.increment ? in->row_count : 0;
	ps_store_clear_changed(ps->st);
}

static int restore_row(void *arg, esd_key_t key, uint64_t clock, const float *value,
		       const float *state)
{
	int rc = ps_store_check_padding(arg, key, value, "checkpoint");
	return rc ? rc : ps_store_put_padded(arg, key, clock, value, state);
}

int ps_check_table_dims(const struct ps *ps, const struct esd_ckpt_meta *m, const char *path)
{
	const uint32_t nt = ps->job.ntable_dims;
	if (!m->ntables)
		return 0;
	if (nt && m->ntables != nt) {
		ESD_ERR("ps", "checkpoint %s has rows of %u tables, model.dims gives %u: it is of "
			      "another job", path, m->ntables, nt);
		return -EINVAL;
	}
	for (uint32_t t = 0; t < m->ntables; t++) {
		if (m->table_dims[t] == esd_job_table_dim(&ps->job, t))
			continue;
		ESD_ERR("ps", "checkpoint %s has table %u at dim %u, this job at dim %u (%s): a "
			      "resume keeps each table's dim",
			path, t, m->table_dims[t], esd_job_table_dim(&ps->job, t),
			nt ? "model.dims" : "model.dim, no model.dims");
		return -EINVAL;
	}
	return 0;
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
	if (ps_check_table_dims(ps, m, path)) {
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
		chain_restored(ps, path, in);
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
	ps->chain = (struct ps_ckpt_chain){0};
	rc = again ? ps_resume_from(ps, ps->job.resume_from) : ps_restore(ps, from);
	if (!rc) {
		reset_progress_locked(ps, c);
		ESD_WARN("ps", "another shard restarted: back to checkpoint %llu (%s)",
			 (unsigned long long)c, again ? ps->job.resume_from : from);
	}
	return rc;
}
