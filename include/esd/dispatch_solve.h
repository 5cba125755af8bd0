/*
 * esd/dispatch_solve.h - the decision solvers of ESD: given a k x n cost
 * matrix, give every worker j exactly cap[j] rows (samples) so that the
 * total cost is small (heu, hybrid) or minimal (opt, hungarian); plus the
 * cache-affinity baselines (laia, vanilla). No I/O, no threads, no global
 * state: a struct esd_solver holds scratch memory, the warm start of opt
 * and the counters of the last solve.
 *
 * Model
 * -----
 * cost is row-major: cost[i * n + j] is the cost of training sample i on
 * worker j (ESD Alg. 1, see esd/dispatch.h). Costs are integers in
 * [0, ESD_COST_MAX]; with k <= ESD_SOLVE_MAX_K the total and every
 * intermediate of the solvers fit in int64 (ESD_COST_MAX * k < 2^62).
 * cap[j] is the capacity of worker j (m_j, the samples it trains); the
 * cap[j] must sum to k. cap == NULL means equal capacities k / n (k must
 * then be a multiple of n). A result is assign[i] in 0..n-1 for each row.
 *
 * Methods
 * -------
 *   heu        ESD Alg. 2 lines 9-18: rows in order, each to its cheapest
 *              worker that still has room (ties: lowest worker index).
 *              The order is the row order (ESD_HEU_ROW_ORDER), or
 *              descending regret (ESD_HEU_REGRET_ORDER, ties by row index)
 *              as Alg. 2 line 3 sorts the rows it hands to Heu.
 *              Theorem 1: the row at position p of the order pays at most
 *              the (floor(p / m) + 1)-th smallest cost of its row.
 *   opt        exact minimum-cost assignment on the k x n matrix, solved as
 *              the transportation problem it is (n sinks of capacity
 *              cap[j]): every row starts at its cheapest worker under
 *              worker potentials, then successive shortest paths over the
 *              n worker nodes move the overload to the underloaded workers
 *              (Dijkstra with potentials; per ordered worker pair a heap of
 *              the rows at the first worker keyed by the cost of moving
 *              them to the second). The potentials of the previous solve
 *              with the same n are the warm start (a price vector that
 *              already balances similar batches). Always optimal.
 *   hungarian  the classic O(k^3) Hungarian method (shortest augmenting
 *              paths with potentials) on the k x k matrix that repeats
 *              column j cap[j] times, as in the ESD paper; the reference
 *              that reproduces the paper's Table 2. Optimal.
 *   hybrid     ESD's HybridDis(alpha): regret = second-smallest - smallest
 *              cost of a row; with s_j = floor(alpha * cap[j]) the
 *              sum(s_j) rows of largest regret (ties: lower row index
 *              first) go to the opt backend with s_j slots on worker j,
 *              the others to heu with cap[j] - s_j slots. hybrid(1) is
 *              opt, hybrid(0) is heu (same heu order).
 *   laia       Herald Alg. 1: score[i][j] = keys of sample i latest in
 *              worker j's cache; rows in order, each to the highest score
 *              among the workers with room, ties broken uniformly at
 *              random by a seeded generator (reproducible for a seed).
 *   vanilla    a seeded uniformly random assignment meeting the capacities.
 *
 * Tie-break of the exact methods (the canonical optimum)
 * ------------------------------------------------------
 * opt, hungarian and the opt part of hybrid return the same assignment:
 * among all assignments of minimum total cost that meet the capacities,
 * the lexicographically smallest vector (assign[0], assign[1], ...,
 * assign[k-1]) (for hybrid: of the rows handed to opt, in increasing row
 * index). It is unique, so a CPU and a GPU solver agree bit for bit when
 * both return it: any exact solver gets it by passing its optimum to
 * esd_canonicalize(). How: with optimal worker potentials p (a row at
 * worker a has c[r][a] - p[a] = min_b c[r][b] - p[b]), the optimal
 * assignments are exactly the capacity-feasible ones that use only tight
 * pairs (c[r][b] - p[b] equal to that minimum; complementary slackness
 * holds for every optimal pair of primal and dual). Rows are fixed in
 * increasing index, each at its lowest tight worker j for which the rows
 * after it can still be rearranged on tight pairs, which is exactly when a
 * path j -> ... -> assign[i] exists in the graph "a -> b if a later row
 * sits at a and is tight at b" (flow decomposition); the path's rows move
 * one step each.
 *
 * Errors common to every solver: -EINVAL for n == 0, n > ESD_MAX_WORKERS,
 * k > ESD_SOLVE_MAX_K, a NULL array, capacities not summing to k (or k not
 * a multiple of n with cap == NULL), a cost outside [0, ESD_COST_MAX];
 * -ENOMEM. On error assign is unspecified.
 */
#ifndef ESD_DISPATCH_SOLVE_H
#define ESD_DISPATCH_SOLVE_H

#include <stddef.h>
#include <stdint.h>
#include <esd/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Largest cost a solver accepts (2^44 - 1; ESD Alg. 1 costs stay below 2^31
 * for 64 keys and T_j <= 2^24) and largest k (2^18): their product < 2^62. */
#define ESD_COST_MAX    ((INT64_C(1) << 44) - 1)
#define ESD_SOLVE_MAX_K (1u << 18)

enum esd_method {
	ESD_METHOD_HEU = 0,
	ESD_METHOD_OPT = 1,
	ESD_METHOD_HUNGARIAN = 2,
	ESD_METHOD_HYBRID = 3,
	ESD_METHOD_LAIA = 4,
	ESD_METHOD_VANILLA = 5,
};

/* "heu", "opt", "hungarian", "hybrid", "laia", "vanilla". 0 or -EINVAL. */
int esd_method_parse(const char *name, enum esd_method *out);
const char *esd_method_name(enum esd_method m);

enum esd_heu_order {
	ESD_HEU_ROW_ORDER = 0,    /* rows 0, 1, ..., k-1 (default) */
	ESD_HEU_REGRET_ORDER = 1, /* regret descending, then row index */
};

/* The exact solver behind opt and hybrid. */
enum esd_exact_backend {
	ESD_EXACT_SSP = 0,       /* transportation solver on k x n (default) */
	ESD_EXACT_HUNGARIAN = 1, /* dense Hungarian on the expanded matrix */
};

/* Counters of the last solve (times in ns of CLOCK_MONOTONIC). */
struct esd_solve_stats {
	int64_t total_ns;
	int64_t regret_ns; /* hybrid: regrets and the split */
	int64_t opt_ns;    /* exact part, canonical pass included */
	int64_t canon_ns;  /* of which the canonical pass */
	int64_t heu_ns;
	uint32_t opt_rows, heu_rows;
	uint64_t augmentations; /* opt: rows moved to a free worker; hungarian: rows */
	uint64_t dijkstras;     /* opt: shortest-path searches */
	uint64_t canon_moves;   /* rows moved by the canonical pass */
	/* regret statistics over all rows (hybrid and heu in regret order) */
	int64_t regret_min, regret_max, regret_median;
	double regret_mean;
	int64_t regret_cut;   /* smallest regret handed to opt (-1: none) */
	uint32_t regret_zero; /* rows with regret 0 */
	int64_t cost;         /* total cost of the result */
};

struct esd_solver;

/* Make a solver. Scratch memory grows on demand and is kept for the next
 * call. Returns 0 or -ENOMEM; free with esd_solver_free(). Not thread-safe:
 * one solver per thread. */
int esd_solver_create(struct esd_solver **out);
void esd_solver_free(struct esd_solver *s);

/* An exact solver the caller provides (the GPU solver of esd/gpu.h:
 * esd_gpu_solve). It gets the checked input with the capacities made
 * explicit (never NULL) and must return the canonical optimum, as
 * esd_solve_opt does, so that decisions do not depend on which node
 * offloads. Returns 0 or a negative errno. */
typedef int (*esd_exact_fn)(void *ctx, const int64_t *cost, uint32_t k, uint32_t n,
                            const uint32_t *cap, uint32_t *assign);
/* From now on esd_solve_opt and the exact part of esd_solve_hybrid (any
 * backend) call fn(ctx, ...) instead of solving here; NULL restores the
 * solver's own. */
void esd_solver_set_exact(struct esd_solver *s, esd_exact_fn fn, void *ctx);
/* The same exact solver in two halves, so that esd_solve_hybrid runs Heu
 * on the other rows while it solves (the GPU solver: esd_gpu_submit and
 * esd_gpu_collect). submit gets what fn gets, but no assignment, and
 * starts the solve; cost and cap stay valid until collect, which returns
 * the canonical optimum into assign. Set both, or NULL for both to go back
 * to the one-call hook (or the solver's own). The result is the same bits
 * either way: Heu's rows and slots do not depend on the exact part. */
typedef int (*esd_exact_submit_fn)(void *ctx, const int64_t *cost, uint32_t k, uint32_t n,
                                   const uint32_t *cap);
typedef int (*esd_exact_collect_fn)(void *ctx, uint32_t *assign);
void esd_solver_set_exact_split(struct esd_solver *s, esd_exact_submit_fn submit,
                                esd_exact_collect_fn collect, void *ctx);
/* Counters of the last successful solve (owned by the solver). */
const struct esd_solve_stats *esd_solver_stats(const struct esd_solver *s);
/* Forget opt's warm start (worker potentials of the previous solve). The
 * result of opt never depends on it, only its speed. */
void esd_solver_reset_warm(struct esd_solver *s);
/* Turn the warm start on (default) or off. */
void esd_solver_set_warm(struct esd_solver *s, int on);

/* heu (see the overview). */
int esd_solve_heu(struct esd_solver *s, const int64_t *cost, uint32_t k, uint32_t n,
                  const uint32_t *cap, enum esd_heu_order order, uint32_t *assign);

/* opt: the canonical optimum (see the overview). */
int esd_solve_opt(struct esd_solver *s, const int64_t *cost, uint32_t k, uint32_t n,
                  const uint32_t *cap, uint32_t *assign);

/* hungarian: the same canonical optimum, O(k^3) on the expanded matrix
 * (k = 8192 takes hours: the paper's reference, not a production path). */
int esd_solve_hungarian(struct esd_solver *s, const int64_t *cost, uint32_t k, uint32_t n,
                        const uint32_t *cap, uint32_t *assign);

struct esd_hybrid_params {
	double alpha;                 /* in [0, 1] */
	enum esd_exact_backend backend; /* exact part */
	enum esd_heu_order heu_order; /* order of the heu part */
};

/* hybrid(alpha). Also -EINVAL for alpha outside [0, 1] or NaN. */
int esd_solve_hybrid(struct esd_solver *s, const int64_t *cost, uint32_t k, uint32_t n,
                     const uint32_t *cap, const struct esd_hybrid_params *p, uint32_t *assign);

/* laia on a k x n score matrix (score[i * n + j] >= 0, larger is better).
 * Same capacity rules; -EINVAL for a negative score. */
int esd_solve_laia(struct esd_solver *s, const int32_t *score, uint32_t k, uint32_t n,
                   const uint32_t *cap, uint64_t seed, uint32_t *assign);

/* vanilla: seeded random assignment meeting the capacities. */
int esd_solve_vanilla(uint32_t k, uint32_t n, const uint32_t *cap, uint64_t seed, uint32_t *assign);

/* Replace an optimal assignment by the canonical optimum (same cost).
 * Returns 0, -EINVAL (the common checks, assign[i] >= n, loads differing
 * from the capacities, or an assignment that is not optimal: a cheaper one
 * exists), -ENOMEM. */
int esd_canonicalize(struct esd_solver *s, const int64_t *cost, uint32_t k, uint32_t n,
                     const uint32_t *cap, uint32_t *assign);
/* esd_canonicalize() for a caller that also has optimal worker potentials
 * of assign (pot[n]: c[r][assign[r]] - pot[assign[r]] is row r's least
 * c[r][b] - pot[b]), e.g. an offloaded solver: it skips deriving them.
 * The costs must be in range (as esd_solve_* check) and are not checked
 * again; potentials that are not optimal for assign give -EINVAL, as a
 * non-optimal assignment does. */
int esd_canonicalize_duals(struct esd_solver *s, const int64_t *cost, uint32_t k, uint32_t n,
                           const uint32_t *cap, const int64_t *pot, uint32_t *assign);
/* The same from the tight sets alone: tight[r] bit b set when worker b
 * gives row r its least reduced cost under some optimal potentials (its
 * own worker included), e.g. computed where the costs are (the GPU).
 * Trusts them: only the assignment's feasibility is checked (-EINVAL). */
int esd_canonicalize_tight(struct esd_solver *s, uint32_t k, uint32_t n, const uint32_t *cap,
                           const uint64_t *tight, uint32_t *assign);

/* Total cost of an assignment (no checks beyond assign[i] < n, which the
 * caller guarantees). */
int64_t esd_assign_cost(const int64_t *cost, uint32_t k, uint32_t n, const uint32_t *assign);

/* Check an assignment: every assign[i] < n and worker j gets exactly
 * cap[j] rows (cap NULL: k / n each). Returns 0 or -EINVAL. */
int esd_assign_check(uint32_t k, uint32_t n, const uint32_t *cap, const uint32_t *assign);

/* Regret of each row (second-smallest minus smallest cost; 0 when n == 1)
 * into regret[k]. */
void esd_regrets(const int64_t *cost, uint32_t k, uint32_t n, int64_t *regret);

#ifdef __cplusplus
}
#endif
#endif /* ESD_DISPATCH_SOLVE_H */
