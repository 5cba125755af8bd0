/*
 * Private to dispatch/: the solver object and the helpers its files share.
 */
#ifndef ESD_DISPATCH_SOLVER_INTERNAL_H
#define ESD_DISPATCH_SOLVER_INTERNAL_H

#include <esd/types.h>
#include <esd/dispatch_solve.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A growable scratch buffer, kept between solves. */
struct scratch {
	void *p;
	size_t bytes;
};

/* One entry of a pair heap: row 'row' sits at worker a; moving it to b
 * changes the cost by 'key'. Valid while the row's stamp is 'stamp'. */
struct pheap_ent {
	int64_t key;
	uint32_t row;
	uint32_t stamp;
};

struct pheap {
	struct pheap_ent *e;
	uint32_t len, cap;
	int desc; /* opt: ties by row descending */
};

enum {
	SC_LOAD,    /* uint32 per worker */
	SC_REGRET,  /* int64 per row */
	SC_ORDER,   /* uint32 per row */
	SC_ORDER2,  /* uint32 per row (radix sort temp) */
	SC_SUBCOST, /* int64 k x n: hybrid's opt rows */
	SC_SUBASSIGN,
	SC_STAMP, /* uint32 per row */
	SC_TIGHT, /* uint64 per row */
	SC_HUNG,  /* hungarian: u, v, p, way, minv, used */
	SC_SLOTW, /* hungarian: worker of each expanded column */
	SC_SCAN,  /* opt's scans: pair moves n x n, rows by worker n x k, places k */
	SC_MISC,
	SC_HEUSEL, /* uint8 per row: hybrid's Heu rows (kept apart from SC_MISC while opt runs) */
	SC_COUNT
};

struct esd_solver {
	esd_exact_fn exact; /* esd_solver_set_exact */
	esd_exact_submit_fn exact_submit; /* esd_solver_set_exact_split */
	esd_exact_collect_fn exact_collect;
	void *exact_ctx;
	struct scratch sc[SC_COUNT];
	struct pheap *heaps; /* n * n pair heaps (opt and canon) */
	uint32_t heaps_n;
	int64_t warm_pot[ESD_MAX_WORKERS];
	uint32_t warm_n; /* n of warm_pot, 0: none */
	int warm_on;
	struct esd_solve_stats st;
};

void *esd_scratch(struct esd_solver *s, int which, size_t bytes);
int esd_solve_prepare_heaps(struct esd_solver *s, uint32_t n);
int esd_solve_check(const int64_t *cost, uint32_t k, uint32_t n, const uint32_t *cap,
                    const void *assign, uint32_t *capv);

/* Exact solvers on an already-checked problem (capv: capacities, never
 * NULL). Both leave the canonical optimum in assign. */
int esd_opt_ssp(struct esd_solver *s, const int64_t *cost, uint32_t k, uint32_t n,
                const uint32_t *capv, uint32_t *assign);
int esd_opt_hungarian(struct esd_solver *s, const int64_t *cost, uint32_t k, uint32_t n,
                      const uint32_t *capv, uint32_t *assign);
/* Canonical pass given optimal worker potentials pot (NULL: derive them;
 * returns -EINVAL when assign is not optimal). */
int esd_canon_pass(struct esd_solver *s, const int64_t *cost, uint32_t k, uint32_t n,
                   const uint32_t *capv, const int64_t *pot, uint32_t *assign);
/* heu on a checked problem; rows visited in 'order' (NULL: row order). */
void esd_heu_core(const int64_t *cost, uint32_t k, uint32_t n, const uint32_t *capv,
                  const uint32_t *order, uint32_t *load, uint32_t *assign);
/* Sort row indices by regret descending, then index ascending. */
int esd_regret_order(struct esd_solver *s, const int64_t *regret, uint32_t k, uint32_t *order);

/* An unbiased draw below bound (Lemire) from the splitmix64 stream *st
 * (esd_splitmix64_next), for laia and vanilla. */
static inline uint32_t esd_rng_below(uint64_t *st, uint32_t bound)
{
	uint64_t x = esd_splitmix64_next(st) >> 32;
	uint64_t m = x * bound;
	uint32_t l = (uint32_t)m;
	if (l < bound) {
		uint32_t t = (uint32_t)(-bound) % bound;
		while (l < t) {
			x = esd_splitmix64_next(st) >> 32;
			m = x * bound;
			l = (uint32_t)m;
		}
	}
	return (uint32_t)(m >> 32);
}

#endif
