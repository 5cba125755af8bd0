/* Private to dispatch/: the key table's layout (conseq.c and snapshot.c
 * read it directly). */
#ifndef ESD_DISPATCH_KEYTAB_INTERNAL_H
#define ESD_DISPATCH_KEYTAB_INTERNAL_H

#include "cpu.h"

#include <esd/dispatch.h>
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>

struct esd_keytab {
	uint32_t n, k, count, nocc;
	uint32_t count_hint; /* unique keys of the previous batch */
	esd_key_t *ukeys;
	struct esd_keystate *st;
	uint32_t *occ;
	uint32_t *hash; /* uid + 1, 0 = empty */
	uint32_t hbits;
	int64_t *vec;             /* count x n: per-key charges (costmat scratch) */
	uint64_t *need;           /* count: S(x) of the last decision */
	int need_ready;           /* need already holds the coming decision's
	                           * (esd_keytab_need_ready): the next
	                           * esd_keytab_need keeps it */
	uint32_t *sorted;         /* count: uids by ascending key (lazy) */
	uint64_t key_or, key_and; /* of the unique keys: the bits that vary */
	uint32_t *tmp;
	int sorted_ok;
	uint64_t gen; /* builds so far: tells a snapshot set which build it filled */
	size_t cap_u, cap_occ, cap_hash;
	uint32_t *rep; /* uids of the replicated keys (esd_keytab_replicate) */
	uint32_t nrep;
	size_t cap_rep;
	/* n <= 8: a key's charges by its latest mask (2^n x n), kept while
	 * the row costs stay those of chT */
	int64_t *chtab;
	int64_t chT[8];
	uint32_t chn;
	/* model.dims (esd_keytab_set_row_bytes): each table's row class
	 * (tcls, ntcls tables; class 0 the full rows), a class's rows cost
	 * cls_num / cls_den of a full row's T (rounded up); ncls 1 without.
	 * clsT: the classes' costs (ncls x n) for the T in clsT_of. */
	uint8_t *tcls;
	uint32_t ntcls, ncls;
	uint64_t cls_num[ESD_ROW_CLASSES], cls_den;
	int64_t *clsT;
	int64_t clsT_of[ESD_MAX_WORKERS];
	uint32_t clsT_n;
};

/* Row class of key (0 without per-table row sizes). */
static inline uint32_t esd_keytab_key_cls(const struct esd_keytab *kt, esd_key_t key)
{
	const uint32_t t = esd_key_table(key);
	return t < kt->ntcls ? kt->tcls[t] : 0;
}

/* The classes' per-row costs for the full-row costs T: ncls x n, class c
 * at c * n (class 0 is T); kt's scratch. NULL on -ENOMEM. */
const int64_t *esd_keytab_class_T(struct esd_keytab *kt, const int64_t *T);

/* Room for want entries of elem bytes in *p (realloc'd, doubling from 1024;
 * *cap in entries). Returns 0 or -ENOMEM (*p and *cap as they were). */
static inline int esd_grow(void **p, size_t *cap, size_t want, size_t elem)
{
	if (*cap >= want && *p)
		return 0;
	size_t nc = *cap ? *cap : 1024;
	while (nc < want)
		nc *= 2;
	void *q = realloc(*p, nc * elem);
	if (!q)
		return -ENOMEM;
	*p = q;
	*cap = nc;
	return 0;
}

static inline uint32_t key_hash(esd_key_t key, uint32_t bits)
{
	return (uint32_t)((key * UINT64_C(0x9E3779B97F4A7C15)) >> (64 - bits));
}

/* Per-key arrays (ukeys, st, need, sorted, tmp, vec) for at least
 * want unique keys, contents kept. Returns 0 or -ENOMEM. */
int esd_keytab_grow_keys(struct esd_keytab *kt, size_t want);

/* Sort the unique keys (ascending) into kt->sorted, once per build. */
int esd_keytab_sort(struct esd_keytab *kt);
/* need[u] = workers that got a sample containing key u (every worker
 * for a replicated key). After esd_keytab_need_ready, once: the masks
 * already there, for the assignment they were made from. */
int esd_keytab_need(struct esd_keytab *kt, const struct esd_batch *b, const uint32_t *assign);

/* need holds the masks of the assignment the caller passes next to
 * esd_keytab_need (the local search wrote them): the replicated keys'
 * are set, and that call keeps them instead of counting again. A new
 * build forgets it. */
void esd_keytab_need_ready(struct esd_keytab *kt);

/* The matrices' common checks: -EINVAL (NULL, a batch that is not the
 * table's, a T outside [0, ESD_COST_MAX]), -EOVERFLOW (a sample whose keys
 * times 2 x max T x scale exceed ESD_COST_MAX), else 0. */
int esd_costmat_check(const struct esd_keytab *kt, const struct esd_batch *b, const int64_t *T,
                      const int64_t *cost, int64_t scale);

/* cost[i * n + j] = the sum over sample i's key occurrences of vec[u * n + j]
 * (per-key charges, count x n): the matrices' common last pass. */
void esd_costmat_sum(const struct esd_batch *b, const uint32_t *occ, const int64_t *vec, uint32_t n,
                     int64_t *cost);

/* vec[u * n + j] = unique key u's ESD Alg. 1 charge on worker j (count x n).
 * kt's charge table is scratch (kept between calls). 0 or -ENOMEM. */
int esd_keytab_charges(struct esd_keytab *kt, const int64_t *T, int64_t *vec);

/* Per-worker lists of needed keys (ascending) and the states the copies
 * take: worker j's are keys[start[j]..start[j] + len[j]). The lists and
 * the consequence's are written in one pass into regions per worker that
 * are sure to hold them (conseq.c); 'pack' is that pass's scratch for the
 * consequence's lists before they are packed. Owned by the caller
 * (realloc'd). */
struct esd_wlists {
	esd_key_t *keys;
	uint8_t *state; /* the state the worker's copy takes (step 6 of
	                 * docs/design.md §3): DIRTY when it trains the key
	                 * alone under on-demand sync, else OUTDATED */
	esd_key_t *pack;
	size_t cap, cap_state, cap_pack; /* entries of keys, state and pack */
	uint32_t start[ESD_MAX_WORKERS], len[ESD_MAX_WORKERS];
};

/* esd_conseq_compute that also fills wl (one pass over the sorted keys). */
int esd_conseq_compute_lists(const struct esd_keytab *kt, const struct esd_batch *b,
                             const uint32_t *assign, const int64_t *T, enum esd_sync sync,
                             struct esd_conseq *cq, struct esd_wlists *wl);

/* Recompute cq's costs from its lists. */
void esd_conseq_costs(struct esd_conseq *cq, const struct esd_keytab *kt, const int64_t *T);

/* qsort's comparison of keys. */
static inline int esd_cmp_key(const void *a, const void *b)
{
	const esd_key_t x = *(const esd_key_t *)a, y = *(const esd_key_t *)b;
	return (x > y) - (x < y);
}

#endif
