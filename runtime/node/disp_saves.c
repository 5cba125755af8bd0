/*
 * The dispatcher thread's saved boundaries: every snapshot (and the
 * settings that shape the decisions) as of the last SAVED_GENS checkpoint
 * boundaries, for a resume after a shard restarts, and on disk with
 * ps.checkpoint_dir for a whole-job resume.
 */
#include "disp.h"
#include "node.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Generation saved at boundary iter, or -1. */
int node_disp_saved_gen(const struct disp *ds, uint64_t iter)
{
	for (int q = 0; q < SAVED_GENS; q++)
		if (ds->sv.ok[q] && ds->sv.gen[q].iter == iter)
			return q;
	return -1;
}

/* The generation to save boundary iter in: its own if saved before, else
 * an unused one, else the oldest. */
static int gen_for(const struct disp *ds, uint64_t iter)
{
	int g = node_disp_saved_gen(ds, iter);
	for (int q = 0; g < 0 && q < SAVED_GENS; q++)
		if (!ds->sv.ok[q])
			g = q;
	if (g < 0) {
		g = 0;
		for (int q = 1; q < SAVED_GENS; q++)
			if (ds->sv.gen[q].iter < ds->sv.gen[g].iter)
				g = q;
	}
	return g;
}

/* Copy every snapshot into st (HET: and every key's version). */
static int copy_snapshots(struct disp *ds, struct node_state *st)
{
	st->n = ds->nd->job.n;
	for (uint32_t j = 0; j < st->n; j++) {
		const struct esd_cmeta *cm = esd_snapset_view(ds->eng.ss, j);
		if (!cm)
			return -ENOMEM;
		size_t len = esd_cmeta_block_bytes(cm);
		struct esd_cmeta *out;
		if (len > st->cm_cap[j]) {
			void *m = NULL;
			if (posix_memalign(&m, 64, len))
				return -ENOMEM;
			free(st->cm[j]);
			st->cm[j] = m;
			st->cm_cap[j] = len;
		}
		int rc = esd_cmeta_copy(st->cm[j], st->cm_cap[j], cm, &out);
		if (rc)
			return rc;
	}
	st->nvers = 0;
	if (ds->nd->job.het) {
		size_t nv = esd_snapset_versions(ds->eng.ss, NULL, NULL, 0);
		if (nv > st->capvers) {
			esd_key_t *k = realloc(st->vkeys, nv * sizeof(*k));
			if (k)
				st->vkeys = k;
			uint64_t *v = realloc(st->vvals, nv * sizeof(*v));
			if (v)
				st->vvals = v;
			if (!k || !v)
				return -ENOMEM;
			st->capvers = nv;
		}
		st->nvers = esd_snapset_versions(ds->eng.ss, st->vkeys, st->vvals, nv);
	}
	return 0;
}

/* Keep the state as of checkpoint boundary iter; with ps.checkpoint_dir
 * set, write it to disk too (before the boundary's iteration trains: the
 * shards' checkpoint of it comes later). */
int node_disp_save(struct disp *ds, uint64_t iter)
{
	const int g = gen_for(ds, iter);
	struct node_state *st = &ds->sv.gen[g];
	ds->sv.ok[g] = false;
	int rc = copy_snapshots(ds, st);
	if (rc)
		return rc;
	st->method = ds->eng.dc.method;
	st->alpha = ds->eng.dc.hybrid.alpha;
	st->policy = ds->eng.policy;
	memcpy(st->batch, ds->sz.batch, sizeof(ds->sz.batch));
	pthread_mutex_lock(&ds->nd->qmu);
	memcpy(st->rates, ds->nd->job.rate_bps, sizeof(st->rates));
	st->size_model[0] = ds->nd->job.derived.size_fixed_rows;
	st->size_model[1] = ds->nd->job.derived.size_rows_per_sample;
	st->size_model[2] = ds->nd->job.derived.size_compute_ns;
	pthread_mutex_unlock(&ds->nd->qmu);
	st->iter = iter;
	ds->sv.ok[g] = true;
	if (iter > 0 && ds->nd->job.checkpoint_dir[0])
		rc = node_state_write(ds->nd, st, "state");
	return rc;
}
