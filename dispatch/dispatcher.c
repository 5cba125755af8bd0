/*
 * The whole dispatch step of one iteration, as the node daemon's
 * dispatcher thread runs it: key table, states from the snapshots, the
 * method's matrix, the decision, and the snapshot advance with the full
 * consequence. Each phase is timed; with 'compare' the step also solves
 * heu and opt on the same matrix to record the heu-vs-opt gap.
 */
#include "keytab_internal.h"
#include "solver_internal.h"

#include <esd/clock.h>
#include <esd/dispatch_snap.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct esd_dispatcher {
	struct esd_dispatcher_config cfg;
	uint32_t cap[ESD_MAX_WORKERS];
	int64_t T[ESD_MAX_WORKERS];
	uint64_t tables[ESD_TABLE_MASK_WORDS];
	int has_tables, has_cap;
	uint64_t rng;
	struct esd_snapset *ss;
	struct esd_keytab *kt;
	struct esd_solver *solver, *aux;
	struct esd_conseq *cq;
	struct esd_doi *doi;
	struct esd_ls_work *ls; /* the local search's arrays, kept */
	int64_t *cost;
	int32_t *score;
	uint32_t *tmp;
	esd_key_t *rep; /* cfg.replicated, copied */
	size_t cap_k;
	int cost_valid;
	struct esd_dispatch_counters ct;
};

int esd_dispatcher_create(const struct esd_dispatcher_config *cfg, struct esd_snapset *ss,
                          struct esd_dispatcher **out)
{
	if (!cfg || !ss || !out || !cfg->T || cfg->n == 0 || cfg->n != esd_snapset_workers(ss))
		return -EINVAL;
	if (cfg->method > ESD_METHOD_VANILLA || cfg->sync > ESD_SYNC_FULL_SET ||
	    cfg->matrix > ESD_MATRIX_SHARED)
		return -EINVAL;
	if (cfg->method == ESD_METHOD_HYBRID &&
	    !(cfg->hybrid.alpha >= 0.0 && cfg->hybrid.alpha <= 1.0))
		return -EINVAL;
	struct esd_dispatcher *d = calloc(1, sizeof(*d));
	if (!d)
		return -ENOMEM;
	int rc = -ENOMEM;
	d->cfg = *cfg;
	for (uint32_t j = 0; j < cfg->n; j++) {
		if (cfg->T[j] < 0 || cfg->T[j] > ESD_COST_MAX) {
			rc = -EINVAL;
			goto fail;
		}
		d->T[j] = cfg->T[j];
		d->cap[j] = cfg->cap ? cfg->cap[j] : 0;
	}
	d->has_cap = cfg->cap != NULL;
	if (cfg->laia_tables) {
		memcpy(d->tables, cfg->laia_tables, sizeof(d->tables));
		d->has_tables = 1;
	}
	d->cfg.cap = NULL;
	d->cfg.T = NULL;
	d->cfg.laia_tables = NULL;
	d->cfg.replicated = NULL;
	if (cfg->nreplicated) {
		if (!cfg->replicated) {
			rc = -EINVAL;
			goto fail;
		}
		if (!(d->rep = malloc(cfg->nreplicated * sizeof(esd_key_t))))
			goto fail;
		memcpy(d->rep, cfg->replicated, cfg->nreplicated * sizeof(esd_key_t));
	}
	d->rng = cfg->seed;
	d->ss = ss;
	if (esd_keytab_create(&d->kt) || esd_solver_create(&d->solver) ||
	    esd_solver_create(&d->aux) || esd_conseq_create(&d->cq) ||
	    (cfg->ls_evals && esd_ls_work_create(&d->ls)))
		goto fail;
	if (cfg->ntables && (rc = esd_keytab_set_row_bytes(d->kt, cfg->row_bytes, cfg->ntables,
							   cfg->row_bytes_full)))
		goto fail;
	d->cfg.row_bytes = NULL;
	if (cfg->exact_submit && cfg->exact_collect)
		esd_solver_set_exact_split(d->solver, cfg->exact_submit, cfg->exact_collect,
		                           cfg->exact_ctx);
	else
		esd_solver_set_exact(d->solver, cfg->exact, cfg->exact_ctx);
	if (cfg->method == ESD_METHOD_LAIA && cfg->laia_top && esd_doi_create(cfg->n, &d->doi))
		goto fail;
	if (!d->cfg.laia_refresh)
		d->cfg.laia_refresh = 16;
	*out = d;
	return 0;
fail:
	esd_dispatcher_free(d);
	return rc;
}

void esd_dispatcher_free(struct esd_dispatcher *d)
{
	if (!d)
		return;
	esd_keytab_free(d->kt);
	esd_solver_free(d->solver);
	esd_solver_free(d->aux);
	esd_conseq_free(d->cq);
	esd_doi_free(d->doi);
	esd_ls_work_free(d->ls);
	free(d->cost);
	free(d->score);
	free(d->tmp);
	free(d->rep);
	free(d);
}

const struct esd_dispatch_counters *esd_dispatcher_counters(const struct esd_dispatcher *d)
{
	return d ? &d->ct : NULL;
}

struct esd_keytab *esd_dispatcher_keytab(struct esd_dispatcher *d)
{
	return d ? d->kt : NULL;
}

const int64_t *esd_dispatcher_costmat(const struct esd_dispatcher *d)
{
	return d && d->cost_valid ? d->cost : NULL;
}

static void add_phase(struct esd_dispatch_phase *s, const struct esd_dispatch_phase *p)
{
	s->keytab += p->keytab;
	s->fill += p->fill;
	s->matrix += p->matrix;
	s->solve += p->solve;
	s->advance += p->advance;
	s->total += p->total;
	s->profile += p->profile;
}

/* The step's local-search swaps: ls_evals, scaled down on a batch whose
 * samples carry more than ls_ref_keys keys each (a swap's evaluation
 * grows with its samples' keys). */
static uint64_t ls_budget(const struct esd_dispatcher_config *c, const struct esd_batch *b)
{
	uint64_t occ = b->k ? b->off[b->k] : 0, ref = (uint64_t)c->ls_ref_keys * b->k;
	if (!c->ls_ref_keys || occ <= ref)
		return c->ls_evals;
	uint64_t e = c->ls_evals * ref / occ;
	return e ? e : 1;
}

/* The step's buffers (cost and score matrices, scratch) for k samples. */
static int grow_buffers(struct esd_dispatcher *d, uint32_t k)
{
	if (d->cap_k >= k && d->cost)
		return 0;
	const uint32_t n = d->cfg.n;
	size_t nc = k ? k : 1;
	int64_t *c = realloc(d->cost, nc * n * sizeof(int64_t));
	if (!c)
		return -ENOMEM;
	d->cost = c;
	int32_t *s = realloc(d->score, nc * n * sizeof(int32_t));
	if (!s)
		return -ENOMEM;
	d->score = s;
	uint32_t *t = realloc(d->tmp, nc * sizeof(uint32_t));
	if (!t)
		return -ENOMEM;
	d->tmp = t;
	d->cap_k = nc;
	return 0;
}

/* laia's DoI profile: the batch added, the top tables refreshed every
 * laia_refresh steps. Its time goes to ph->profile, not the matrix's. */
static int profile_batch(struct esd_dispatcher *d, const struct esd_batch *b,
                         struct esd_dispatch_phase *ph, int64_t *t)
{
	if (!d->doi)
		return 0;
	int64_t tp = esd_now_ns();
	int rc = esd_doi_add_batch(d->doi, b);
	if (rc)
		return rc;
	if (d->ct.steps % d->cfg.laia_refresh == 0) {
		if ((rc = esd_doi_top_tables(d->doi, d->cfg.laia_top, d->tables)) < 0)
			return rc;
		d->has_tables = 1;
	}
	ph->profile = esd_now_ns() - tp;
	*t += ph->profile;
	return 0;
}

/* The method's matrix: laia's scores, or the cost matrix (paper or
 * shared) for the cost-based methods and for compare mode. */
static int build_matrix(struct esd_dispatcher *d, const struct esd_batch *b)
{
	int rc = 0;
	if (d->cfg.method == ESD_METHOD_LAIA) {
		rc = esd_scoremat_build(d->kt, b, d->has_tables ? d->tables : NULL, d->score);
	} else if (d->cfg.method != ESD_METHOD_VANILLA || d->cfg.compare) {
		rc = d->cfg.matrix == ESD_MATRIX_SHARED
		             ? esd_costmat_build_shared(d->kt, b, d->T, d->cost)
		             : esd_costmat_build(d->kt, b, d->T, d->cost);
		d->cost_valid = !rc;
	}
	return rc;
}

/* The configured method's answer into assign, then the local search on
 * the true cost when it is on. seed: this iteration's. */
static int solve(struct esd_dispatcher *d, const struct esd_batch *b, const uint32_t *cap,
                 uint64_t seed, uint32_t *assign)
{
	const uint32_t n = d->cfg.n, k = b->k;
	int rc = 0;
	switch (d->cfg.method) {
	case ESD_METHOD_HEU:
		rc = esd_solve_heu(d->solver, d->cost, k, n, cap, d->cfg.hybrid.heu_order, assign);
		break;
	case ESD_METHOD_OPT:
		rc = esd_solve_opt(d->solver, d->cost, k, n, cap, assign);
		break;
	case ESD_METHOD_HUNGARIAN:
		rc = esd_solve_hungarian(d->solver, d->cost, k, n, cap, assign);
		break;
	case ESD_METHOD_HYBRID:
		rc = esd_solve_hybrid(d->solver, d->cost, k, n, cap, &d->cfg.hybrid, assign);
		break;
	case ESD_METHOD_LAIA:
		rc = esd_solve_laia(d->solver, d->score, k, n, cap, seed, assign);
		break;
	case ESD_METHOD_VANILLA:
		memset(&d->solver->st, 0, sizeof(d->solver->st));
		rc = esd_solve_vanilla(k, n, cap, seed, assign);
		break;
	}
	if (!rc && d->cfg.ls_evals) {
		/* quality: local search on the true cost, seeded per iteration */
		struct esd_ls_params lp = {.max_evals = ls_budget(&d->cfg, b),
		                           .seed = seed ^ 0x15,
		                           .work = d->ls,
		                           .need = d->kt->need};
		rc = esd_local_search(d->kt, b, d->T, d->cfg.sync, &lp, assign, &d->ct.ls);
		/* the search's masks are the advance's: it need not count them */
		if (!rc)
			esd_keytab_need_ready(d->kt);
	}
	return rc;
}

/* Compare mode: heu and opt also solve the same matrix (the heu-vs-opt
 * gap of esdctl dispatch), outside the timed phases. */
static int compare_solvers(struct esd_dispatcher *d, uint32_t k, const uint32_t *cap, int64_t *t)
{
	if (!d->cfg.compare || !d->cost_valid)
		return 0;
	const uint32_t n = d->cfg.n;
	int64_t tc = esd_now_ns();
	int rc;
	if ((rc = esd_solve_heu(d->aux, d->cost, k, n, cap, d->cfg.hybrid.heu_order, d->tmp)))
		return rc;
	d->ct.heu_cost = esd_assign_cost(d->cost, k, n, d->tmp);
	if ((rc = esd_solve_opt(d->aux, d->cost, k, n, cap, d->tmp)))
		return rc;
	d->ct.opt_cost = esd_assign_cost(d->cost, k, n, d->tmp);
	d->ct.sum_heu_cost += d->ct.heu_cost;
	d->ct.sum_opt_cost += d->ct.opt_cost;
	*t += esd_now_ns() - tc;
	return 0;
}

/* The step's counters: its phases, costs, transfers and hits. */
static void count_step(struct esd_dispatcher *d, struct esd_dispatch_phase *ph, uint32_t k,
                       const uint32_t *assign, const struct esd_conseq *cq)
{
	const uint32_t n = d->cfg.n;
	ph->total = ph->keytab + ph->fill + ph->matrix + ph->solve + ph->advance;
	d->ct.last = *ph;
	add_phase(&d->ct.sum, ph);
	d->ct.steps++;
	d->ct.unique_keys = esd_keytab_count(d->kt);
	d->ct.est_cost = d->cost_valid ? esd_assign_cost(d->cost, k, n, assign) : 0;
	d->ct.true_cost = cq->total_cost;
	d->ct.sum_est_cost += d->ct.est_cost;
	d->ct.sum_true_cost += cq->total_cost;
	for (int q = 0; q < ESD_CQ_KINDS; q++)
		d->ct.xfers[q] += cq->off[q][n];
	d->ct.hits += cq->hits;
}

/* The step's phases one after another, each timed into ph: key table
 * (replicated rows added), fill from the snapshots, the matrix, the
 * solve, the snapshots advanced by the decision. */
int esd_dispatcher_step(struct esd_dispatcher *d, const struct esd_batch *b, uint32_t *assign,
                        struct esd_conseq *cq)
{
	if (!d || !b || !assign)
		return -EINVAL;
	const uint32_t *cap = d->has_cap ? d->cap : NULL;
	struct esd_dispatch_phase ph = {0};
	int rc;
	if (!cq)
		cq = d->cq;
	if ((rc = grow_buffers(d, b->k)))
		return rc;
	d->cost_valid = 0;
	int64_t t = esd_now_ns();
	if ((rc = esd_keytab_build(d->kt, b, d->cfg.n)) ||
	    (d->cfg.nreplicated && (rc = esd_keytab_replicate(d->kt, d->rep, d->cfg.nreplicated))))
		return rc;
	ph.keytab = esd_lap_ns(&t);
	if ((rc = esd_snapset_fill(d->ss, d->kt)))
		return rc;
	ph.fill = esd_lap_ns(&t);
	if ((rc = profile_batch(d, b, &ph, &t)) || (rc = build_matrix(d, b)))
		return rc;
	ph.matrix = esd_lap_ns(&t);
	/* a fresh seed per iteration from the configured one: reproducible runs,
	 * also when a dispatcher restarts from snapshots saved at a checkpoint
	 * (the snapshots know their iteration) */
	uint64_t seed = d->rng + esd_snapset_iter(d->ss) * ESD_SPLITMIX64_GAMMA;
	if ((rc = solve(d, b, cap, seed, assign)))
		return rc;
	ph.solve = esd_lap_ns(&t);
	d->ct.solve = *esd_solver_stats(d->solver);
	if ((rc = compare_solvers(d, b->k, cap, &t)))
		return rc;
	if ((rc = esd_snapset_advance(d->ss, d->kt, b, assign, d->T, d->cfg.sync, cq)))
		return rc;
	ph.advance = esd_lap_ns(&t);
	count_step(d, &ph, b->k, assign, cq);
	return 0;
}
