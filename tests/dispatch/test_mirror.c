/*
 * The snapshots kept by key (the mirror, docs/dispatch.md §9) against the
 * snapshots kept by worker (blocks), advanced by the same batches and
 * assignments: after every step the two give the same consequence (every
 * list, key by key) and hold the same rows (per worker: the same keys,
 * each with the same state, last use, use count and Emark mark, the same
 * counts and Emark targets; the blocks made from the mirror pass
 * esd_cmeta_verify and esd_snapset_verify). Random batches with hot and
 * cold keys, small caches (evictions, Emark target moves, ring
 * compactions, directory rehashes), 8 workers, both sync modes. On the
 * way: a restore (a third set loaded from the blocks' set halfway, a
 * mirror again at its first fill), a flush, a policy switch to LFU and
 * back (the mirror hands over to the blocks and takes them back), and
 * lookahead hints (which the mirror does not keep: blocks from then on).
 * A set made under LFU takes the mirror up after a switch to LRU.
 */
#include "testutil.h"

#include <esd/dispatch.h>
#include <esd/dispatch_snap.h>
#include <esd/err.h>
#include <errno.h>
#include <stdlib.h>

enum { N = 8, K = 64, PER = 6, CAP = 60, STEPS = 1200 };

static esd_key_t draw(uint64_t *rng, uint32_t table)
{
	/* a few hot ids and a long cold tail */
	const uint64_t r = esd_test_rand(rng);
	const uint32_t id = r % 4 == 0 ? (uint32_t)(r >> 8) % 2000 : (uint32_t)(r >> 8) % 40;
	return esd_key_make(table, id);
}

/* Unequal caches and links: worker w holds CAP + dcap w rows, its link
 * costs dt (w + 1). */
static void sizes(uint32_t *capc, int64_t *T, uint32_t dcap, int64_t dt)
{
	for (uint32_t w = 0; w < N; w++) {
		capc[w] = CAP + dcap * w;
		T[w] = dt * (int64_t)(w + 1);
	}
}

/* Two sets hold the same rows, worker by worker. */
static void same_rows(struct esd_snapset *a, struct esd_snapset *b)
{
	for (uint32_t w = 0; w < N; w++) {
		const struct esd_cmeta *x = esd_snapset_view(a, w), *y = esd_snapset_view(b, w);
		assert_non_null(x);
		assert_non_null(y);
		assert_int_equal(esd_cmeta_count(x), esd_cmeta_count(y));
		assert_int_equal(esd_snapset_count(a, w), esd_cmeta_count(x));
		assert_int_equal(esd_snapset_count(b, w), esd_cmeta_count(y));
		assert_int_equal(esd_cmeta_emark_target(x), esd_cmeta_emark_target(y));
		assert_int_equal(esd_cmeta_last_iter(x), esd_cmeta_last_iter(y));
		for (uint32_t i = 0; i < esd_cmeta_capacity(x); i++) {
			const struct esd_cmeta_slot *s = esd_cmeta_slot(x, i);
			if (s->state == ESD_ROW_ABSENT)
				continue;
			const uint32_t j = esd_cmeta_find(y, s->key);
			if (j == ESD_SLOT_NONE)
				fail_msg("worker %u: key %#llx only in one set", w,
				         (unsigned long long)s->key);
			const struct esd_cmeta_slot *t = esd_cmeta_slot(y, j);
			if (s->state != t->state || s->last_use != t->last_use ||
			    s->pin_iter != t->pin_iter || s->freq != t->freq || s->mark != t->mark)
				fail_msg("worker %u key %#llx: state %u/%u last use %llu/%llu "
				         "freq %u/%u mark %u/%u",
				         w, (unsigned long long)s->key, s->state, t->state,
				         (unsigned long long)s->last_use,
				         (unsigned long long)t->last_use, s->freq, t->freq, s->mark,
				         t->mark);
		}
	}
}

static void same_consequence(const struct esd_conseq *a, const struct esd_conseq *b)
{
	for (int q = 0; q < ESD_CQ_KINDS; q++) {
		assert_int_equal(a->cost[q], b->cost[q]);
		for (uint32_t w = 0; w < N; w++) {
			const uint32_t c = esd_conseq_count(a, (enum esd_cq_kind)q, w);
			assert_int_equal(c, esd_conseq_count(b, (enum esd_cq_kind)q, w));
			if (c)
				assert_memory_equal(esd_conseq_keys(a, (enum esd_cq_kind)q, w),
				                    esd_conseq_keys(b, (enum esd_cq_kind)q, w),
				                    c * sizeof(esd_key_t));
		}
	}
}

/* One set advanced by a batch (its own key table and consequence). */
struct run {
	struct esd_snapset *ss;
	struct esd_keytab *kt;
	struct esd_conseq *cq;
};

static void run_open(struct run *r, struct esd_snapset *ss)
{
	r->ss = ss;
	assert_int_equal(esd_keytab_create(&r->kt), 0);
	assert_int_equal(esd_conseq_create(&r->cq), 0);
}

static void run_close(struct run *r)
{
	if (!r->ss)
		return;
	esd_conseq_free(r->cq);
	esd_keytab_free(r->kt);
	esd_snapset_free(r->ss);
	r->ss = NULL;
}

static void run_step(struct run *r, const struct esd_batch *b, const uint32_t *assign,
                     const int64_t *T, enum esd_sync sync)
{
	assert_int_equal(esd_keytab_build(r->kt, b, N), 0);
	assert_int_equal(esd_snapset_fill(r->ss, r->kt), 0);
	assert_int_equal(esd_snapset_advance(r->ss, r->kt, b, assign, T, sync, r->cq), 0);
}

static void test_same_as_blocks(void **state)
{
	(void)state;
	for (int full = 0; full <= 1; full++) {
		const enum esd_sync sync = full ? ESD_SYNC_FULL_SET : ESD_SYNC_ON_DEMAND;
		uint32_t capc[N];
		int64_t T[N];
		sizes(capc, T, 7, 100);
		struct esd_snapset *s;
		struct run ref = {0}, km = {0}, km2 = {0};
		assert_int_equal(esd_snapset_create(N, capc, ESD_POLICY_LRU, &s), 0);
		assert_int_equal(esd_snapset_keep_mirror(s, 0), 0);
		assert_int_equal(esd_snapset_mirrored(s), 0);
		run_open(&ref, s);
		assert_int_equal(esd_snapset_create(N, capc, ESD_POLICY_LRU, &s), 0);
		assert_int_equal(esd_snapset_mirrored(s), 1);
		run_open(&km, s);
		uint64_t rng = 77 + (uint64_t)full;
		uint32_t off[K + 1], assign[K];
		esd_key_t keys[K * PER];
		int mirrored_steps = 0;
		for (int step = 1; step <= STEPS; step++) {
			if (step == STEPS / 2) {
				/* a restore: a new set loaded from the blocks' */
				assert_int_equal(esd_snapset_create(N, capc, ESD_POLICY_LRU, &s),
				                 0);
				for (uint32_t w = 0; w < N; w++)
					assert_int_equal(
					    esd_snapset_load(s, w, esd_snapset_view(ref.ss, w)), 0);
				assert_int_equal(esd_snapset_mirrored(s), 0);
				run_open(&km2, s);
				same_rows(km2.ss, ref.ss);
			}
			if (step == 300 || step == 360) {
				/* to LFU and back, on both (the mirror hands over) */
				const enum esd_policy p =
				    step == 300 ? ESD_POLICY_LFU : ESD_POLICY_LRU;
				for (uint32_t w = 0; w < N; w++) {
					assert_int_equal(
					    esd_cmeta_set_policy(esd_snapset_cmeta(ref.ss, w), p),
					    0);
					assert_int_equal(
					    esd_cmeta_set_policy(esd_snapset_cmeta(km.ss, w), p),
					    0);
				}
				assert_int_equal(esd_snapset_mirrored(km.ss), 0);
			}
			if (step == 450) {
				assert_int_equal(esd_snapset_flush(ref.ss), 0);
				assert_int_equal(esd_snapset_flush(km.ss), 0);
			}
			for (uint32_t i = 0; i <= K; i++)
				off[i] = i * PER;
			for (uint32_t i = 0; i < K * PER; i++)
				keys[i] = draw(&rng, i % PER);
			for (uint32_t i = 0; i < K; i++)
				assign[i] = i % N;
			for (uint32_t i = K; i > 1; i--) {
				const uint32_t x = (uint32_t)(esd_test_rand(&rng) % i),
				               t = assign[i - 1];
				assign[i - 1] = assign[x];
				assign[x] = t;
			}
			const struct esd_batch b = {K, off, keys};
			run_step(&ref, &b, assign, T, sync);
			run_step(&km, &b, assign, T, sync);
			mirrored_steps += esd_snapset_mirrored(km.ss);
			/* under LFU by blocks, and by key again after the switch back */
			assert_int_equal(esd_snapset_mirrored(km.ss), step < 300 || step >= 360);
			same_consequence(ref.cq, km.cq);
			if (km2.ss) {
				run_step(&km2, &b, assign, T, sync);
				assert_int_equal(esd_snapset_mirrored(km2.ss), 1);
				same_consequence(ref.cq, km2.cq);
			}
			/* the rows every few steps (reading them makes the blocks),
			 * and every step around the events */
			if (step % 7 == 0 || (step >= 295 && step <= 305) ||
			    (step >= 355 && step <= 365) || (step >= 445 && step <= 455) ||
			    step >= STEPS - 20) {
				same_rows(km.ss, ref.ss);
				if (km2.ss)
					same_rows(km2.ss, ref.ss);
			}
			if (step % 50 == 0) {
				assert_int_equal(esd_snapset_verify(km.ss), 0);
				assert_int_equal(esd_snapset_verify(ref.ss), 0);
			}
		}
		assert_true(mirrored_steps > STEPS * 9 / 10);
		/* lookahead hints: the mirror cannot keep them, so the blocks stay */
		for (uint32_t w = 0; w < N; w++)
			assert_int_equal(
			    esd_cmeta_lookahead(esd_snapset_cmeta(km.ss, w), keys, 3, 9999), 0);
		assert_int_equal(esd_snapset_fill(km.ss, km.kt), 0);
		assert_int_equal(esd_snapset_mirrored(km.ss), 0);
		run_close(&ref);
		run_close(&km);
		run_close(&km2);
	}
}

/* A set made under LFU (a narrow directory, blocks) switched to LRU
 * halfway: its next fill widens the directory in place and makes the
 * mirror from the blocks; it goes on deciding as a set kept by worker. */
static void test_switch_to_lru(void **state)
{
	(void)state;
	uint32_t capc[N];
	int64_t T[N];
	sizes(capc, T, 5, 10);
	struct esd_snapset *s;
	struct run ref = {0}, km = {0};
	assert_int_equal(esd_snapset_create(N, capc, ESD_POLICY_LFU, &s), 0);
	assert_int_equal(esd_snapset_keep_mirror(s, 0), 0);
	run_open(&ref, s);
	assert_int_equal(esd_snapset_create(N, capc, ESD_POLICY_LFU, &s), 0);
	assert_int_equal(esd_snapset_mirrored(s), 0);
	run_open(&km, s);
	uint64_t rng = 99;
	uint32_t off[K + 1], assign[K];
	esd_key_t keys[K * PER];
	for (int step = 1; step <= 400; step++) {
		if (step == 150)
			for (uint32_t w = 0; w < N; w++) {
				assert_int_equal(esd_cmeta_set_policy(esd_snapset_cmeta(ref.ss, w),
				                                      ESD_POLICY_LRU),
				                 0);
				assert_int_equal(esd_cmeta_set_policy(esd_snapset_cmeta(km.ss, w),
				                                      ESD_POLICY_LRU),
				                 0);
			}
		for (uint32_t i = 0; i <= K; i++)
			off[i] = i * PER;
		for (uint32_t i = 0; i < K * PER; i++)
			keys[i] = draw(&rng, i % PER);
		for (uint32_t i = 0; i < K; i++)
			assign[i] = (i * 7 + (uint32_t)step) % N;
		const struct esd_batch b = {K, off, keys};
		run_step(&ref, &b, assign, T, ESD_SYNC_ON_DEMAND);
		run_step(&km, &b, assign, T, ESD_SYNC_ON_DEMAND);
		assert_int_equal(esd_snapset_mirrored(km.ss), step >= 150);
		same_consequence(ref.cq, km.cq);
		if (step % 5 == 0)
			same_rows(km.ss, ref.ss);
	}
	assert_int_equal(esd_snapset_verify(km.ss), 0);
	run_close(&ref);
	run_close(&km);
}

/* The mirror's refusals: a worker needing more rows than it holds fails
 * the step before anything changes, as with blocks; ESD_SNAP_MIRROR=0
 * keeps a set by worker; more than 8 workers never have a mirror. */
static void test_limits(void **state)
{
	(void)state;
	const uint32_t capc[9] = {4, 4, 4, 4, 4, 4, 4, 4, 4};
	struct esd_snapset *ss;
	assert_int_equal(esd_snapset_create(9, capc, ESD_POLICY_LRU, &ss), 0);
	assert_int_equal(esd_snapset_mirrored(ss), 0);
	esd_snapset_free(ss);
	setenv("ESD_SNAP_MIRROR", "0", 1);
	assert_int_equal(esd_snapset_create(2, capc, ESD_POLICY_LRU, &ss), 0);
	unsetenv("ESD_SNAP_MIRROR");
	assert_int_equal(esd_snapset_mirrored(ss), 0);
	esd_snapset_free(ss);

	assert_int_equal(esd_snapset_create(2, capc, ESD_POLICY_LRU, &ss), 0);
	assert_int_equal(esd_snapset_mirrored(ss), 1);
	struct esd_keytab *kt;
	struct esd_conseq *cq;
	assert_int_equal(esd_keytab_create(&kt), 0);
	assert_int_equal(esd_conseq_create(&cq), 0);
	uint32_t off[3] = {0, 5, 6}, assign[2] = {0, 1};
	esd_key_t keys[6] = {1, 2, 3, 4, 5, 6};
	const int64_t T[2] = {1, 1};
	const struct esd_batch b = {2, off, keys};
	assert_int_equal(esd_keytab_build(kt, &b, 2), 0);
	assert_int_equal(esd_snapset_fill(ss, kt), 0);
	assert_int_equal(esd_snapset_advance(ss, kt, &b, assign, T, ESD_SYNC_ON_DEMAND, cq),
	                 -ENOSPC);
	assert_int_equal(esd_snapset_count(ss, 0), 0);
	assert_int_equal(esd_snapset_iter(ss), 0);
	off[1] = 4;
	assert_int_equal(esd_keytab_build(kt, &b, 2), 0);
	assert_int_equal(esd_snapset_fill(ss, kt), 0);
	assert_int_equal(esd_snapset_advance(ss, kt, &b, assign, T, ESD_SYNC_ON_DEMAND, cq), 0);
	assert_int_equal(esd_snapset_count(ss, 0), 4);
	assert_int_equal(esd_snapset_count(ss, 1), 2);
	assert_int_equal(esd_snapset_verify(ss), 0);
	/* a key table filled from another set: its pulls are not the
	 * mirror's, the advance says so (the set is then to be reloaded) */
	struct esd_snapset *other;
	assert_int_equal(esd_snapset_create(2, capc, ESD_POLICY_LRU, &other), 0);
	assert_int_equal(esd_keytab_build(kt, &b, 2), 0);
	assert_int_equal(esd_snapset_fill(other, kt), 0);
	assert_int_equal(esd_snapset_advance(ss, kt, &b, assign, T, ESD_SYNC_ON_DEMAND, cq),
	                 -ESD_EDIVERGED);
	esd_snapset_free(other);
	esd_conseq_free(cq);
	esd_keytab_free(kt);
	esd_snapset_free(ss);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_same_as_blocks),
	    cmocka_unit_test(test_switch_to_lru),
	    cmocka_unit_test(test_limits),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
