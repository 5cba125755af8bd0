/*
 * The whole dispatch step's decisions against a record: seeded
 * Criteo-shaped batches (26 tables, Criteo Kaggle's cardinalities divided
 * by 50, skewed ids) through esd_dispatcher_step under the project's
 * default (opt on the shared-charge matrix, 2048 local-search swaps,
 * unequal sizes, Emark), LAIA with equal sizes, the wide default (laia
 * with 512 swaps) and the paper's hybrid under LRU and LFU, with caches
 * small enough to evict from early on. Every assignment, every step's
 * true cost, the transfers of each kind and the hits are folded into one
 * hash per configuration, which must equal the recorded one: a change
 * meant only to make the step faster (solvers, key table, snapshots, the
 * cache policies' victim structures) must leave every decision, eviction
 * and hit as it was. A change that means to alter decisions records the
 * new hashes (the failure prints them) and says why.
 */
#include "testutil.h"

#include <esd/dispatch_snap.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STEPS 150
#define N     8
#define M     128
#define K     (N * M)
#define KEYS  26

static const uint64_t rows[KEYS] = {1460,  583,  10131227, 2202608, 305,     24,  12517,
                                    633,   3,    93145,    5683,    8351593, 3194, 27,
                                    14992, 5461306, 10,    5652,    2173,    4,   7046547,
                                    18,    15,   286181,   105,     142572};

/* Skewed ids without libm: rank = rows x u^3 (u uniform in [0, 1)). */
static void gen_batch(uint64_t *rng, uint32_t *off, esd_key_t *keys)
{
	off[0] = 0;
	for (uint32_t i = 0; i < K; i++) {
		for (uint32_t t = 0; t < KEYS; t++) {
			const uint64_t r = rows[t] / 50 ? rows[t] / 50 : 1;
			const double u = (double)(esd_splitmix64_next(rng) >> 11) * 0x1.0p-53;
			uint64_t id = (uint64_t)((double)r * u * u * u);
			keys[i * KEYS + t] = esd_key_make(t, id < r ? id : r - 1);
		}
		off[i + 1] = (i + 1) * KEYS;
	}
}

static uint64_t fnv(uint64_t h, uint64_t v)
{
	for (int b = 0; b < 8; b++) {
		h ^= (v >> (8 * b)) & 255;
		h *= UINT64_C(0x100000001b3);
	}
	return h;
}

struct conf {
	const char *name;
	enum esd_method method;
	enum esd_matrix matrix;
	enum esd_policy policy;
	uint64_t ls;
	int sized; /* 230/26 instead of equal sizes */
	uint64_t want;
};

/* The hash of STEPS steps of one configuration. */
static uint64_t run_conf(const struct conf *c)
{
	uint32_t capc[N], cap[N];
	int64_t T[N];
	for (uint32_t j = 0; j < N; j++) {
		capc[j] = 3000;
		T[j] = j < N / 2 ? 3277 : 32768;
		cap[j] = j < N / 2 ? 230 : 26;
	}
	struct esd_snapset *ss;
	assert_int_equal(esd_snapset_create(N, capc, c->policy, &ss), 0);
	struct esd_dispatcher_config cfg = {.n = N,
	                                    .cap = c->sized ? cap : NULL,
	                                    .T = T,
	                                    .method = c->method,
	                                    .hybrid = {0.25, ESD_EXACT_SSP, ESD_HEU_ROW_ORDER},
	                                    .seed = 1,
	                                    .sync = ESD_SYNC_ON_DEMAND,
	                                    .matrix = c->matrix,
	                                    .ls_evals = c->ls};
	struct esd_dispatcher *d;
	assert_int_equal(esd_dispatcher_create(&cfg, ss, &d), 0);
	uint32_t *off = malloc((K + 1) * sizeof(*off)), *assign = malloc(K * sizeof(*assign));
	esd_key_t *keys = malloc((size_t)K * KEYS * sizeof(*keys));
	assert_non_null(off);
	assert_non_null(assign);
	assert_non_null(keys);
	uint64_t rng = 41, h = UINT64_C(0xcbf29ce484222325);
	for (int s = 0; s < STEPS; s++) {
		gen_batch(&rng, off, keys);
		const struct esd_batch b = {K, off, keys};
		assert_int_equal(esd_dispatcher_step(d, &b, assign, NULL), 0);
		for (uint32_t i = 0; i < K; i++)
			h = fnv(h, assign[i]);
		h = fnv(h, (uint64_t)esd_dispatcher_counters(d)->true_cost);
	}
	const struct esd_dispatch_counters *ct = esd_dispatcher_counters(d);
	for (int q = 0; q < ESD_CQ_KINDS; q++)
		h = fnv(h, ct->xfers[q]);
	h = fnv(h, ct->hits);
	/* the caches did evict: the victim order was exercised */
	assert_true(ct->xfers[ESD_CQ_EVICT_PUSH] > 0 || c->policy == ESD_POLICY_LRU ||
	            esd_snapset_count(ss, 0) == capc[0]);
	esd_dispatcher_free(d);
	esd_snapset_free(ss);
	free(off);
	free(assign);
	free(keys);
	return h;
}

static void test_recorded_decisions(void **state)
{
	(void)state;
	static const struct conf confs[] = {
	    {"opt+shared+ls:2048 230/26 emark", ESD_METHOD_OPT, ESD_MATRIX_SHARED,
	     ESD_POLICY_EMARK, 2048, 1, UINT64_C(0x8e7a053a8706b3c8)},
	    {"laia equal emark", ESD_METHOD_LAIA, ESD_MATRIX_PAPER, ESD_POLICY_EMARK, 0, 0,
	     UINT64_C(0x9bedd415884fcd0e)},
	    {"laia+ls:512 230/26 emark", ESD_METHOD_LAIA, ESD_MATRIX_PAPER, ESD_POLICY_EMARK, 512,
	     1, UINT64_C(0x6472a1d09a8c6b25)},
	    {"hybrid:0.25 lru", ESD_METHOD_HYBRID, ESD_MATRIX_PAPER, ESD_POLICY_LRU, 0, 0,
	     UINT64_C(0xc560a45c215d46f9)},
	    {"hybrid:0.25 lfu", ESD_METHOD_HYBRID, ESD_MATRIX_PAPER, ESD_POLICY_LFU, 0, 0,
	     UINT64_C(0xc19a1e033b1231de)},
	};
	int bad = 0;
	for (size_t q = 0; q < sizeof(confs) / sizeof(confs[0]); q++) {
		const uint64_t h = run_conf(&confs[q]);
		if (h != confs[q].want) {
			printf("%s: hash 0x%016llx, recorded 0x%016llx\n", confs[q].name,
			       (unsigned long long)h, (unsigned long long)confs[q].want);
			bad++;
		}
	}
	assert_int_equal(bad, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_recorded_decisions),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
