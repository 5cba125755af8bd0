/*
 * Cache metadata and policies (esd/policy.h) against a reference model.
 *
 * The reference keeps the same per-slot fields in a plain array and does
 * everything by linear scan: find, lowest free slot, Emark's "all marks at
 * target" check, and the victim as the smallest unpinned occupied slot in
 * the policy's order written straight from the header's table. Random
 * traces drive both with the same calls (begin_iter, the caller's state
 * changes after pulls, mark_outdated, frees, lookahead hints, policy
 * switches); after every call the fills and every slot must be equal.
 */
#include "testutil.h"

#include <esd/err.h>
#include <esd/policy.h>

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* ---- reference model ---------------------------------------------------- */

struct ref {
	uint32_t cap;
	enum esd_policy policy;
	struct esd_cmeta_slot *s;
	uint64_t last_iter;
	uint32_t target;
	uint64_t *hints;
	size_t nhints;
	uint64_t hint_iter;
};

static void ref_init(struct ref *r, uint32_t cap, enum esd_policy policy)
{
	r->cap = cap;
	r->policy = policy;
	r->s = calloc(cap, sizeof(*r->s));
	r->hints = calloc(cap, sizeof(*r->hints));
	assert_non_null(r->s);
	for (uint32_t i = 0; i < cap; i++)
		r->s[i].next_use = ESD_NEXT_USE_NONE;
	r->last_iter = 0;
	r->target = 1;
	r->nhints = 0;
	r->hint_iter = 0;
}

static void ref_free(struct ref *r)
{
	free(r->s);
	free(r->hints);
}

static uint32_t ref_find(const struct ref *r, uint64_t key)
{
	for (uint32_t i = 0; i < r->cap; i++)
		if (r->s[i].state != ESD_ROW_ABSENT && r->s[i].key == key)
			return i;
	return ESD_SLOT_NONE;
}

static int cmp3(uint64_t a0, uint64_t a1, uint64_t b0, uint64_t b1)
{
	if (a0 != b0)
		return a0 < b0 ? -1 : 1;
	if (a1 != b1)
		return a1 < b1 ? -1 : 1;
	return 0;
}

/* Is x before y in the victim order? Written from the header's table. */
static bool ref_before(enum esd_policy p, const struct esd_cmeta_slot *x,
                       const struct esd_cmeta_slot *y)
{
	int c = 0;
	switch (p) {
	case ESD_POLICY_LRU: /* (last_use asc, key asc) */
		c = cmp3(x->last_use, 0, y->last_use, 0);
		break;
	case ESD_POLICY_LFU: /* (freq asc, last_use asc, key asc) */
		c = cmp3(x->freq, x->last_use, y->freq, y->last_use);
		break;
	case ESD_POLICY_EMARK: { /* (OUTDATED first, mark asc, freq asc, key asc) */
		int xo = x->state == ESD_ROW_OUTDATED, yo = y->state == ESD_ROW_OUTDATED;
		if (xo != yo)
			return xo;
		c = cmp3(x->mark, x->freq, y->mark, y->freq);
		break;
	}
	case ESD_POLICY_LOOKAHEAD: /* (next_use desc, last_use asc, key asc) */
		if (x->next_use != y->next_use)
			return x->next_use > y->next_use;
		c = cmp3(x->last_use, 0, y->last_use, 0);
		break;
	}
	if (c)
		return c < 0;
	return x->key < y->key;
}

static bool ref_hinted(const struct ref *r, uint64_t key)
{
	for (size_t i = 0; i < r->nhints; i++)
		if (r->hints[i] == key)
			return true;
	return false;
}

static int ref_begin_iter(struct ref *r, uint64_t iter, const uint64_t *keys, size_t n,
                          struct esd_cmeta_fill *f)
{
	if (iter == 0 || iter <= r->last_iter)
		return -EINVAL;
	if (n > r->cap)
		return -ENOSPC;
	for (size_t i = 1; i < n; i++)
		if (keys[i - 1] >= keys[i])
			return -EINVAL;
	memset(&f->n_pulls, 0, sizeof(*f) - offsetof(struct esd_cmeta_fill, n_pulls));
	for (size_t i = 0; i < n; i++) {
		uint32_t s = ref_find(r, keys[i]);
		if (s != ESD_SLOT_NONE)
			r->s[s].pin_iter = iter;
	}
	r->last_iter = iter;
	/* the present keys are touched first, all at the target as it stands
	 * (their marks count before any insert moves it on) */
	for (size_t i = 0; i < n; i++) {
		uint32_t s = ref_find(r, keys[i]);
		f->slots[i] = s;
		if (s == ESD_SLOT_NONE)
			continue;
		struct esd_cmeta_slot *e = &r->s[s];
		e->last_use = iter;
		e->freq++;
		e->mark = r->target;
		if (e->state == ESD_ROW_OUTDATED)
			f->n_miss_outdated++;
		else
			f->n_hits++;
	}
	/* then, in key order, the pulls of OUTDATED copies and the inserts */
	for (size_t i = 0; i < n; i++) {
		uint32_t s = f->slots[i];
		if (s != ESD_SLOT_NONE) {
			if (r->s[s].state == ESD_ROW_OUTDATED)
				f->pulls[f->n_pulls++] = (struct esd_cmeta_pull){keys[i], s, 1};
			continue;
		}
		for (s = 0; s < r->cap && r->s[s].state != ESD_ROW_ABSENT; s++)
			;
		if (s == r->cap) {
			bool all = true;
			for (uint32_t j = 0; j < r->cap; j++)
				all = all && r->s[j].mark == r->target;
			if (all)
				r->target++;
			uint32_t v = ESD_SLOT_NONE;
			for (uint32_t j = 0; j < r->cap; j++) {
				if (r->s[j].pin_iter == iter)
					continue;
				if (v == ESD_SLOT_NONE || ref_before(r->policy, &r->s[j], &r->s[v]))
					v = j;
			}
			assert_int_not_equal(v, ESD_SLOT_NONE);
			bool dirty = r->s[v].state == ESD_ROW_DIRTY;
			f->evicts[f->n_evicts++] =
			    (struct esd_cmeta_evict){r->s[v].key, r->s[v].clock, v, dirty};
			if (dirty)
				f->n_evict_dirty++;
			else
				f->n_evict_clean++;
			s = v;
		}
		r->s[s] = (struct esd_cmeta_slot){
		    .key = keys[i],
		    .clock = 0,
		    .last_use = iter,
		    .next_use = ref_hinted(r, keys[i]) ? r->hint_iter : ESD_NEXT_USE_NONE,
		    .pin_iter = iter,
		    .freq = 1,
		    .mark = r->target,
		    .state = ESD_ROW_OUTDATED,
		};
		f->slots[i] = s;
		f->pulls[f->n_pulls++] = (struct esd_cmeta_pull){keys[i], s, 0};
		f->n_miss_absent++;
	}
	return 0;
}

static void ref_set_state(struct ref *r, uint32_t s, enum esd_row_state st, uint64_t clock)
{
	if (st == ESD_ROW_ABSENT) {
		r->s[s] = (struct esd_cmeta_slot){.next_use = ESD_NEXT_USE_NONE};
		return;
	}
	r->s[s].state = (uint8_t)st;
	r->s[s].clock = clock;
}

static void ref_lookahead(struct ref *r, const uint64_t *keys, size_t n, uint64_t iter)
{
	r->nhints = 0;
	for (size_t i = 0; i < n; i++)
		if (!ref_hinted(r, keys[i]))
			r->hints[r->nhints++] = keys[i];
	r->hint_iter = iter;
	for (uint32_t j = 0; j < r->cap; j++)
		if (r->s[j].state != ESD_ROW_ABSENT)
			r->s[j].next_use = ref_hinted(r, r->s[j].key) ? iter : ESD_NEXT_USE_NONE;
}

/* ---- helpers -------------------------------------------------------------- */

struct fillbuf {
	struct esd_cmeta_fill f;
	struct esd_cmeta_pull *pulls;
	struct esd_cmeta_evict *evicts;
	uint32_t *slots;
};

static void fill_alloc(struct fillbuf *b, size_t n)
{
	b->pulls = calloc(n + 1, sizeof(*b->pulls));
	b->evicts = calloc(n + 1, sizeof(*b->evicts));
	b->slots = calloc(n + 1, sizeof(*b->slots));
	memset(&b->f, 0, sizeof(b->f));
	b->f.pulls = b->pulls;
	b->f.evicts = b->evicts;
	b->f.slots = b->slots;
}

static void fill_free(struct fillbuf *b)
{
	free(b->pulls);
	free(b->evicts);
	free(b->slots);
}

static struct esd_cmeta *new_cmeta(uint32_t cap, enum esd_policy p, void **mem)
{
	size_t len = esd_cmeta_bytes(cap);
	struct esd_cmeta *cm = NULL;
	assert_true(len > 0);
	*mem = aligned_alloc(64, (len + 63) & ~(size_t)63);
	assert_non_null(*mem);
	memset(*mem, 0xA5, len);
	assert_int_equal(esd_cmeta_init(*mem, len, cap, p, &cm), 0);
	return cm;
}

static void same_slots(const struct esd_cmeta *cm, const struct ref *r)
{
	uint32_t count = 0;
	for (uint32_t i = 0; i < r->cap; i++) {
		const struct esd_cmeta_slot *a = esd_cmeta_slot(cm, i), *b = &r->s[i];
		if (b->state != ESD_ROW_ABSENT)
			count++;
		if (a->state != b->state || a->key != b->key || a->clock != b->clock ||
		    a->last_use != b->last_use || a->next_use != b->next_use ||
		    a->pin_iter != b->pin_iter || a->freq != b->freq || a->mark != b->mark)
			fail_msg("slot %u differs: key %#llx/%#llx state %u/%u last %llu/%llu "
			         "next %llu/%llu pin %llu/%llu freq %u/%u mark %u/%u",
			         i, (unsigned long long)a->key, (unsigned long long)b->key,
			         a->state, b->state, (unsigned long long)a->last_use,
			         (unsigned long long)b->last_use, (unsigned long long)a->next_use,
			         (unsigned long long)b->next_use, (unsigned long long)a->pin_iter,
			         (unsigned long long)b->pin_iter, a->freq, b->freq, a->mark,
			         b->mark);
	}
	assert_int_equal(esd_cmeta_count(cm), count);
	assert_int_equal(esd_cmeta_emark_target(cm), r->target);
}

static void same_fill(const struct esd_cmeta_fill *a, const struct esd_cmeta_fill *b, size_t n)
{
	assert_int_equal(a->n_pulls, b->n_pulls);
	assert_int_equal(a->n_evicts, b->n_evicts);
	assert_int_equal(a->n_hits, b->n_hits);
	assert_int_equal(a->n_miss_absent, b->n_miss_absent);
	assert_int_equal(a->n_miss_outdated, b->n_miss_outdated);
	assert_int_equal(a->n_evict_clean, b->n_evict_clean);
	assert_int_equal(a->n_evict_dirty, b->n_evict_dirty);
	assert_int_equal(a->n_hits + a->n_miss_absent + a->n_miss_outdated, n);
	for (size_t i = 0; i < a->n_pulls; i++) {
		assert_int_equal(a->pulls[i].key, b->pulls[i].key);
		assert_int_equal(a->pulls[i].slot, b->pulls[i].slot);
		assert_int_equal(a->pulls[i].outdated, b->pulls[i].outdated);
		if (i)
			assert_true(a->pulls[i - 1].key < a->pulls[i].key);
	}
	for (size_t i = 0; i < a->n_evicts; i++) {
		assert_int_equal(a->evicts[i].key, b->evicts[i].key);
		assert_int_equal(a->evicts[i].clock, b->evicts[i].clock);
		assert_int_equal(a->evicts[i].slot, b->evicts[i].slot);
		assert_int_equal(a->evicts[i].dirty, b->evicts[i].dirty);
	}
	for (size_t i = 0; i < n; i++)
		assert_int_equal(a->slots[i], b->slots[i]);
}

static int cmp_key(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return (x > y) - (x < y);
}

/* n distinct sorted keys from a skewed universe: half from a hot tenth. */
static size_t draw_keys(uint64_t *rng, uint64_t *keys, size_t n, uint64_t universe)
{
	size_t m = 0;
	for (size_t i = 0; i < n; i++) {
		uint64_t r = esd_test_rand(rng);
		uint64_t id = (r & 1) ? (r >> 8) % (universe / 10 + 1) : (r >> 8) % universe;
		/* spread over tables: exercises the full key width */
		keys[m++] = ((id % 7) << 48) | (id * 0x9E37u);
	}
	qsort(keys, m, sizeof(*keys), cmp_key);
	size_t k = 0;
	for (size_t i = 0; i < m; i++)
		if (!k || keys[k - 1] != keys[i])
			keys[k++] = keys[i];
	return k;
}

/* ---- random traces against the reference ---------------------------------- */

/* A random trace against the reference model: 'universe' keys (0: three
 * times the capacity, so the cache fills and evicts). */
static void run_trace_u(enum esd_policy policy, uint32_t cap, uint64_t seed, int iters,
                        bool switch_policy, uint64_t universe)
{
	struct ref r;
	void *mem;
	struct esd_cmeta *cm = new_cmeta(cap, policy, &mem);
	struct fillbuf fa, fb;
	uint64_t rng = seed;
	if (!universe)
		universe = (uint64_t)cap * 3;
	uint64_t *keys = calloc(cap + 8, sizeof(*keys));
	uint64_t *next = calloc(cap + 8, sizeof(*next));
	size_t nnext = 0;
	uint64_t iter = 0, clock = 1;

	ref_init(&r, cap, policy);
	fill_alloc(&fa, cap + 8);
	fill_alloc(&fb, cap + 8);
	nnext = draw_keys(&rng, next, esd_test_rand(&rng) % (cap + 1), universe);

	for (int it = 0; it < iters; it++) {
		size_t n = nnext;
		memcpy(keys, next, n * sizeof(*keys));
		iter += 1 + esd_test_rand(&rng) % 2;
		nnext = draw_keys(&rng, next, esd_test_rand(&rng) % (cap + 1), universe);

		/* a compaction the caller asks for, now and then, changes no
		 * result (LRU: it only makes room in the ring) */
		const uint32_t room = esd_cmeta_lru_room(cm);
		if (r.policy != ESD_POLICY_LRU)
			assert_int_equal(room, UINT32_MAX);
		if (esd_test_rand(&rng) % 5 == 0) {
			assert_int_equal(esd_cmeta_lru_compact(cm), 0);
			assert_true(esd_cmeta_lru_room(cm) >= room);
			assert_int_equal(esd_cmeta_verify(cm), 0);
		}
		const uint32_t room2 = esd_cmeta_lru_room(cm);
		assert_int_equal(esd_cmeta_begin_iter(cm, iter, keys, n, &fa.f), 0);
		assert_int_equal(ref_begin_iter(&r, iter, keys, n, &fb.f), 0);
		same_fill(&fa.f, &fb.f, n);
		same_slots(cm, &r);
		if (r.policy == ESD_POLICY_LRU && room2 >= n)
			assert_true(esd_cmeta_lru_room(cm) <= room2);
		for (size_t i = 0; i < fa.f.n_evicts; i++) {
			/* pinned (needed now) rows are never victims */
			assert_null(bsearch(&fa.f.evicts[i].key, keys, n, sizeof(*keys), cmp_key));
		}

		/* The caller pulls (CLEAN at a new clock), trains some rows
		 * alone (DIRTY), learns that others trained some (OUTDATED). */
		for (size_t i = 0; i < fa.f.n_pulls; i++) {
			uint32_t s = fa.f.pulls[i].slot;
			assert_int_equal(esd_cmeta_set_state(cm, s, ESD_ROW_CLEAN, clock), 0);
			ref_set_state(&r, s, ESD_ROW_CLEAN, clock);
			clock++;
		}
		for (size_t i = 0; i < n; i++) {
			uint64_t x = esd_test_rand(&rng) % 100;
			uint32_t s = fa.f.slots[i];
			enum esd_row_state st = x < 30   ? ESD_ROW_DIRTY
			                        : x < 40 ? ESD_ROW_OUTDATED
			                        : x < 42 ? ESD_ROW_ABSENT
			                                 : ESD_ROW_CLEAN;
			if (st == ESD_ROW_CLEAN)
				continue;
			assert_int_equal(esd_cmeta_set_state(cm, s, st, clock), 0);
			ref_set_state(&r, s, st, clock);
		}
		for (int k = 0; k < 4; k++) {
			uint64_t key = keys[0];
			if (n)
				key = keys[esd_test_rand(&rng) % n];
			if (esd_test_rand(&rng) % 2) {
				uint64_t tmp[1];
				draw_keys(&rng, tmp, 1, universe);
				key = tmp[0];
			}
			uint32_t s = ref_find(&r, key);
			int was = s != ESD_SLOT_NONE;
			assert_int_equal(esd_cmeta_mark_outdated(cm, key), was);
			if (was)
				r.s[s].state = ESD_ROW_OUTDATED;
		}
		if (esd_test_rand(&rng) % 3 == 0) {
			/* the dispatcher knows the next batch: hint it (unsorted,
			 * with a duplicate) */
			uint64_t *h = calloc(nnext + 1, sizeof(*h));
			for (size_t i = 0; i < nnext; i++)
				h[i] = next[nnext - 1 - i];
			size_t nh = nnext;
			if (nnext && nnext < cap)
				h[nh++] = next[0];
			assert_int_equal(esd_cmeta_lookahead(cm, h, nh, iter + 1), 0);
			ref_lookahead(&r, h, nh, iter + 1);
			free(h);
		}
		if (switch_policy && esd_test_rand(&rng) % 5 == 0) {
			enum esd_policy p = (enum esd_policy)(esd_test_rand(&rng) % 4);
			assert_int_equal(esd_cmeta_set_policy(cm, p), 0);
			r.policy = p;
		}
		same_slots(cm, &r);
		assert_int_equal(esd_cmeta_verify(cm), 0);
		for (size_t i = 0; i < n; i++) {
			uint32_t s = ref_find(&r, keys[i]);
			assert_int_equal(esd_cmeta_find(cm, keys[i]), s);
			assert_int_equal(esd_cmeta_state(cm, keys[i]),
			                 s == ESD_SLOT_NONE ? ESD_ROW_ABSENT : r.s[s].state);
		}
	}
	free(keys);
	free(next);
	fill_free(&fa);
	fill_free(&fb);
	ref_free(&r);
	free(mem);
}

static void run_trace(enum esd_policy policy, uint32_t cap, uint64_t seed, int iters,
                      bool switch_policy)
{
	run_trace_u(policy, cap, seed, iters, switch_policy, 0);
}

static void test_trace_lru(void **state)
{
	(void)state;
	for (uint64_t seed = 1; seed <= 4; seed++)
		run_trace(ESD_POLICY_LRU, seed == 1 ? 1 : (uint32_t)(17 * seed), seed, 300, false);
	/* a cache that never fills: its LRU ring is reclaimed by compaction
	 * alone (no pops), many times over in 600 iterations */
	run_trace_u(ESD_POLICY_LRU, 64, 5, 600, false, 48);
	/* and one that holds nearly every key: few misses, long-lived entries */
	run_trace_u(ESD_POLICY_LRU, 100, 6, 600, false, 110);
}

static void test_trace_lfu(void **state)
{
	(void)state;
	for (uint64_t seed = 11; seed <= 14; seed++)
		run_trace(ESD_POLICY_LFU, (uint32_t)(5 + 19 * (seed - 10)), seed, 300, false);
}

static void test_trace_emark(void **state)
{
	(void)state;
	for (uint64_t seed = 21; seed <= 24; seed++)
		run_trace(ESD_POLICY_EMARK, (uint32_t)(3 + 21 * (seed - 20)), seed, 300, false);
}

static void test_trace_lookahead(void **state)
{
	(void)state;
	for (uint64_t seed = 31; seed <= 34; seed++)
		run_trace(ESD_POLICY_LOOKAHEAD, (uint32_t)(7 + 23 * (seed - 30)), seed, 300, false);
}

static void test_trace_policy_switch(void **state)
{
	(void)state;
	for (uint64_t seed = 41; seed <= 43; seed++)
		run_trace(ESD_POLICY_LRU, 64, seed, 300, true);
}

/* ---- capacity, pinning, errors ---------------------------------------------- */

static void test_capacity_and_errors(void **state)
{
	(void)state;
	void *mem;
	const uint32_t cap = 8;
	struct esd_cmeta *cm = new_cmeta(cap, ESD_POLICY_LRU, &mem);
	size_t len = esd_cmeta_bytes(cap);
	struct fillbuf fb;
	uint64_t keys[16];
	void *before = malloc(len);

	fill_alloc(&fb, 16);
	for (int i = 0; i < 16; i++)
		keys[i] = (uint64_t)i * 3;
	assert_int_equal(esd_cmeta_begin_iter(cm, 1, keys, 5, &fb.f), 0);
	memcpy(before, cm, len);

	/* needed > capacity: -ENOSPC, nothing changes */
	assert_int_equal(esd_cmeta_begin_iter(cm, 2, keys, 9, &fb.f), -ENOSPC);
	assert_memory_equal(before, cm, len);
	/* iteration not increasing */
	assert_int_equal(esd_cmeta_begin_iter(cm, 1, keys, 2, &fb.f), -EINVAL);
	assert_int_equal(esd_cmeta_begin_iter(cm, 0, keys, 2, &fb.f), -EINVAL);
	/* unsorted, duplicate */
	uint64_t bad[3] = {5, 4, 9}, dup[3] = {4, 4, 9};
	assert_int_equal(esd_cmeta_begin_iter(cm, 2, bad, 3, &fb.f), -EINVAL);
	assert_int_equal(esd_cmeta_begin_iter(cm, 2, dup, 3, &fb.f), -EINVAL);
	assert_memory_equal(before, cm, len);
	/* other bad calls */
	assert_int_equal(esd_cmeta_set_state(cm, cap, ESD_ROW_CLEAN, 1), -EINVAL);
	assert_int_equal(esd_cmeta_set_state(cm, 7, ESD_ROW_CLEAN, 1), -EINVAL); /* free slot */
	assert_int_equal(esd_cmeta_set_state(cm, 0, (enum esd_row_state)9, 1), -EINVAL);
	assert_int_equal(esd_cmeta_lookahead(cm, keys, 9, 3), -ENOMEM);
	assert_int_equal(esd_cmeta_set_policy(cm, (enum esd_policy)7), -EINVAL);
	assert_memory_equal(before, cm, len);
	assert_null(esd_cmeta_slot(cm, cap));
	assert_int_equal(esd_cmeta_find(cm, 1), ESD_SLOT_NONE);

	/* exactly capacity needed, all new: every old row goes, none of the
	 * needed ones; the 3 kept (0, 3, 6) stay where they were */
	uint64_t full[8] = {0, 3, 6, 100, 101, 102, 103, 104};
	uint32_t s0 = esd_cmeta_find(cm, 0);
	assert_int_equal(esd_cmeta_begin_iter(cm, 2, full, 8, &fb.f), 0);
	assert_int_equal(fb.f.n_hits, 0); /* inserted OUTDATED, never set CLEAN */
	assert_int_equal(fb.f.n_miss_outdated, 3);
	assert_int_equal(fb.f.n_miss_absent, 5);
	assert_int_equal(fb.f.n_evicts, 2); /* 3 free slots, then 9 and 12 */
	assert_int_equal(fb.f.evicts[0].key, 9);
	assert_int_equal(fb.f.evicts[1].key, 12);
	assert_int_equal(esd_cmeta_find(cm, 0), s0);
	assert_int_equal(esd_cmeta_count(cm), cap);
	/* next iteration needs 8 others: the pins of iteration 2 have lapsed */
	uint64_t other[8] = {200, 201, 202, 203, 204, 205, 206, 207};
	assert_int_equal(esd_cmeta_begin_iter(cm, 3, other, 8, &fb.f), 0);
	assert_int_equal(fb.f.n_evicts, 8);
	assert_int_equal(esd_cmeta_verify(cm), 0);

	fill_free(&fb);
	free(before);
	free(mem);
}

/* DIRTY victims are reported with their key, clock and slot so the daemon
 * can evict-push them before the slot is refilled. */
static void test_dirty_victims(void **state)
{
	(void)state;
	void *mem;
	struct esd_cmeta *cm = new_cmeta(4, ESD_POLICY_LRU, &mem);
	struct fillbuf fb;
	uint64_t a[4] = {1, 2, 3, 4}, b[2] = {5, 6};

	fill_alloc(&fb, 4);
	assert_int_equal(esd_cmeta_begin_iter(cm, 1, a, 4, &fb.f), 0);
	for (int i = 0; i < 4; i++)
		assert_int_equal(esd_cmeta_set_state(cm, fb.f.slots[i],
		                                     i % 2 ? ESD_ROW_DIRTY : ESD_ROW_CLEAN,
		                                     (uint64_t)(10 + i)),
		                 0);
	assert_int_equal(esd_cmeta_begin_iter(cm, 2, b, 2, &fb.f), 0);
	assert_int_equal(fb.f.n_evicts, 2);
	assert_int_equal(fb.f.evicts[0].key, 1);
	assert_int_equal(fb.f.evicts[0].dirty, 0);
	assert_int_equal(fb.f.evicts[1].key, 2);
	assert_int_equal(fb.f.evicts[1].dirty, 1);
	assert_int_equal(fb.f.evicts[1].clock, 11);
	assert_int_equal(fb.f.n_evict_dirty, 1);
	assert_int_equal(fb.f.n_evict_clean, 1);
	assert_int_equal(fb.f.pulls[0].slot, fb.f.evicts[0].slot);
	fill_free(&fb);
	free(mem);
}

/* Emark: outdated first, then mark, then frequency; the target moves on
 * when a full cache has every mark at target. */
static void test_emark_rule(void **state)
{
	(void)state;
	void *mem;
	struct esd_cmeta *cm = new_cmeta(3, ESD_POLICY_EMARK, &mem);
	struct fillbuf fb;
	uint64_t k123[3] = {1, 2, 3}, k12[2] = {1, 2}, k4[1] = {4}, k5[1] = {5};

	fill_alloc(&fb, 3);
	assert_int_equal(esd_cmeta_begin_iter(cm, 1, k123, 3, &fb.f), 0);
	for (int i = 0; i < 3; i++)
		esd_cmeta_set_state(cm, fb.f.slots[i], ESD_ROW_CLEAN, 1);
	assert_int_equal(esd_cmeta_begin_iter(cm, 2, k12, 2, &fb.f), 0);
	/* full, all marks 1 == target: target becomes 2, victim by freq: 3 */
	assert_int_equal(esd_cmeta_begin_iter(cm, 3, k4, 1, &fb.f), 0);
	assert_int_equal(esd_cmeta_emark_target(cm), 2);
	assert_int_equal(fb.f.evicts[0].key, 3);
	esd_cmeta_set_state(cm, fb.f.slots[0], ESD_ROW_CLEAN, 1);
	/* marks: 1 -> 1, 2 -> 1, 4 -> 2; 2 outdated goes first despite freq 2 */
	assert_int_equal(esd_cmeta_mark_outdated(cm, 2), 1);
	assert_int_equal(esd_cmeta_mark_outdated(cm, 77), 0);
	assert_int_equal(esd_cmeta_begin_iter(cm, 4, k5, 1, &fb.f), 0);
	assert_int_equal(esd_cmeta_emark_target(cm), 2);
	assert_int_equal(fb.f.evicts[0].key, 2);
	esd_cmeta_set_state(cm, fb.f.slots[0], ESD_ROW_CLEAN, 1);
	/* marks: 1 -> 1, 4 -> 2, 5 -> 2: lowest mark goes (1, freq 2) */
	uint64_t k6[1] = {6};
	assert_int_equal(esd_cmeta_begin_iter(cm, 5, k6, 1, &fb.f), 0);
	assert_int_equal(fb.f.evicts[0].key, 1);
	assert_int_equal(esd_cmeta_verify(cm), 0);
	fill_free(&fb);
	free(mem);
}

/* Lookahead: rows the next batch needs stay; unknown ones go first. */
static void test_lookahead_rule(void **state)
{
	(void)state;
	void *mem;
	struct esd_cmeta *cm = new_cmeta(3, ESD_POLICY_LOOKAHEAD, &mem);
	struct fillbuf fb;
	uint64_t k123[3] = {1, 2, 3}, k4[1] = {4}, hint[2] = {4, 1};

	fill_alloc(&fb, 3);
	assert_int_equal(esd_cmeta_begin_iter(cm, 1, k123, 3, &fb.f), 0);
	assert_int_equal(esd_cmeta_lookahead(cm, hint, 2, 2), 0);
	assert_int_equal(esd_cmeta_slot(cm, esd_cmeta_find(cm, 1))->next_use, 2);
	assert_int_equal(esd_cmeta_slot(cm, esd_cmeta_find(cm, 2))->next_use, ESD_NEXT_USE_NONE);
	assert_int_equal(esd_cmeta_begin_iter(cm, 2, k4, 1, &fb.f), 0);
	/* 2 and 3 unknown (evict first), tie on last_use, key 2 first */
	assert_int_equal(fb.f.evicts[0].key, 2);
	/* 4 was hinted before it was inserted */
	assert_int_equal(esd_cmeta_slot(cm, fb.f.slots[0])->next_use, 2);
	fill_free(&fb);
	free(mem);
}

/* ---- block properties --------------------------------------------------------- */

static void drive(struct esd_cmeta *cm, uint64_t seed, int iters, uint32_t cap)
{
	struct fillbuf fb;
	uint64_t rng = seed;
	uint64_t *keys = calloc(cap, sizeof(*keys));

	fill_alloc(&fb, cap);
	for (int it = 1; it <= iters; it++) {
		size_t n = draw_keys(&rng, keys, esd_test_rand(&rng) % cap, (uint64_t)cap * 4);
		assert_int_equal(esd_cmeta_begin_iter(cm, (uint64_t)it, keys, n, &fb.f), 0);
		for (size_t i = 0; i < fb.f.n_pulls; i++)
			esd_cmeta_set_state(cm, fb.f.pulls[i].slot,
			                    i % 3 ? ESD_ROW_CLEAN : ESD_ROW_DIRTY, (uint64_t)it);
		if (n)
			esd_cmeta_mark_outdated(cm, keys[n / 2]);
		if (it % 4 == 0)
			esd_cmeta_lookahead(cm, keys, n, (uint64_t)it + 1);
		if (it % 9 == 0 && n)
			esd_cmeta_set_state(cm, fb.f.slots[0], ESD_ROW_ABSENT, 0);
	}
	fill_free(&fb);
	free(keys);
}

/* esd_cmeta_set_states and esd_cmeta_mark_outdated_batch do exactly what
 * the calls one by one do: two blocks, one driven each way, stay
 * byte-identical under every policy. */
static void test_batched_calls(void **state)
{
	(void)state;
	const uint32_t cap = 300;
	for (int p = 0; p <= ESD_POLICY_LOOKAHEAD; p++) {
		void *m1, *m2;
		struct esd_cmeta *a = new_cmeta(cap, (enum esd_policy)p, &m1);
		struct esd_cmeta *b = new_cmeta(cap, (enum esd_policy)p, &m2);
		const size_t len = esd_cmeta_bytes(cap);
		struct fillbuf fa, fb;
		fill_alloc(&fa, cap);
		fill_alloc(&fb, cap);
		uint64_t rng = 7 + (uint64_t)p, *keys = calloc(cap, sizeof(*keys));
		uint32_t *slots = calloc(cap, sizeof(*slots));
		uint8_t *st = calloc(cap, 1);
		assert_non_null(keys);
		assert_non_null(slots);
		assert_non_null(st);
		for (int it = 1; it <= 120; it++) {
			size_t n =
			    draw_keys(&rng, keys, esd_test_rand(&rng) % cap, (uint64_t)cap * 3);
			assert_int_equal(esd_cmeta_begin_iter(a, (uint64_t)it, keys, n, &fa.f), 0);
			assert_int_equal(esd_cmeta_begin_iter(b, (uint64_t)it, keys, n, &fb.f), 0);
			/* pulls CLEAN with one clock, then every needed slot to a
			 * state of its own (now and then freed) */
			for (size_t i = 0; i < fa.f.n_pulls; i++) {
				slots[i] = fb.f.pulls[i].slot;
				assert_int_equal(esd_cmeta_set_state(a, fa.f.pulls[i].slot,
				                                     ESD_ROW_CLEAN, (uint64_t)it),
				                 0);
			}
			assert_int_equal(esd_cmeta_set_states(b, slots, NULL, ESD_ROW_CLEAN,
			                                      (uint64_t)it, fb.f.n_pulls),
			                 0);
			for (size_t i = 0; i < n; i++) {
				uint64_t r = esd_test_rand(&rng) % 16;
				st[i] = r == 0 ? ESD_ROW_ABSENT : (uint8_t)(1 + r % 3);
				assert_int_equal(esd_cmeta_set_state(a, fa.f.slots[i],
				                                     (enum esd_row_state)st[i], 0),
				                 0);
			}
			assert_int_equal(
			    esd_cmeta_set_states(b, fb.f.slots, st, ESD_ROW_ABSENT, 0, n), 0);
			/* some cached keys and some not, outdated (up to 200: the
			 * batch works in groups of 64, reordering one group's rows
			 * while the next one's states are set) */
			size_t m =
			    draw_keys(&rng, keys, esd_test_rand(&rng) % 200, (uint64_t)cap * 3);
			size_t cached = 0;
			for (size_t i = 0; i < m; i++)
				cached += (size_t)esd_cmeta_mark_outdated(a, keys[i]);
			assert_int_equal(esd_cmeta_mark_outdated_batch(b, keys, m), cached);
			assert_memory_equal(a, b, len);
			assert_int_equal(esd_cmeta_verify(b), 0);
		}
		/* a free slot stops the batch where the single call fails */
		uint32_t free_slot = ESD_SLOT_NONE;
		for (uint32_t i = 0; i < cap && free_slot == ESD_SLOT_NONE; i++)
			if (esd_cmeta_slot(b, i)->state == ESD_ROW_ABSENT)
				free_slot = i;
		if (free_slot != ESD_SLOT_NONE) {
			uint32_t bad[1] = {free_slot};
			assert_int_equal(esd_cmeta_set_states(b, bad, NULL, ESD_ROW_CLEAN, 0, 1),
			                 -EINVAL);
		}
		uint32_t out[1] = {cap};
		assert_int_equal(esd_cmeta_set_states(b, out, NULL, ESD_ROW_CLEAN, 0, 1), -EINVAL);
		assert_int_equal(esd_cmeta_set_states(NULL, out, NULL, ESD_ROW_CLEAN, 0, 1),
		                 -EINVAL);
		fill_free(&fa);
		fill_free(&fb);
		free(keys);
		free(slots);
		free(st);
		free(m1);
		free(m2);
	}
}

static void test_determinism_and_copy(void **state)
{
	(void)state;
	const uint32_t cap = 500;
	for (int p = 0; p <= ESD_POLICY_LOOKAHEAD; p++) {
		void *m1, *m2, *m3;
		struct esd_cmeta *a = new_cmeta(cap, (enum esd_policy)p, &m1);
		struct esd_cmeta *b = new_cmeta(cap, (enum esd_policy)p, &m2);
		size_t len = esd_cmeta_bytes(cap);
		assert_int_equal(esd_cmeta_block_bytes(a), len);

		drive(a, 99, 150, cap);
		drive(b, 99, 150, cap);
		assert_memory_equal(a, b, len);

		/* a copy is byte-identical and evolves identically */
		struct esd_cmeta *c = NULL;
		m3 = aligned_alloc(64, (len + 63) & ~(size_t)63);
		assert_int_equal(esd_cmeta_copy(m3, len - 1, a, &c), -EINVAL);
		assert_int_equal(esd_cmeta_copy(m3, len, a, &c), 0);
		assert_memory_equal(c, a, len);
		struct esd_cmeta *att = NULL;
		assert_int_equal(esd_cmeta_attach(m3, len, &att), 0);
		assert_ptr_equal(att, c);
		assert_int_equal(esd_cmeta_verify(c), 0);
		/* continue from iteration 151 on both */
		struct fillbuf fa, fb;
		fill_alloc(&fa, cap);
		fill_alloc(&fb, cap);
		uint64_t keys[40];
		uint64_t rng = 5;
		for (uint64_t it = 151; it < 200; it++) {
			size_t n = draw_keys(&rng, keys, 40, cap * 4);
			assert_int_equal(esd_cmeta_begin_iter(a, it, keys, n, &fa.f), 0);
			assert_int_equal(esd_cmeta_begin_iter(c, it, keys, n, &fb.f), 0);
		}
		assert_memory_equal(a, c, len);
		fill_free(&fa);
		fill_free(&fb);
		free(m1);
		free(m2);
		free(m3);
	}
}

/* begin_iter_states == begin_iter + set_states(slots, states, clock 0):
 * the same fills and slot records under every policy, the same bytes under
 * LRU; a bad state changes nothing. */
static void test_begin_iter_states(void **state)
{
	(void)state;
	const uint32_t cap = 200;
	for (int p = 0; p <= ESD_POLICY_LOOKAHEAD; p++) {
		void *m1, *m2;
		struct esd_cmeta *a = new_cmeta(cap, (enum esd_policy)p, &m1);
		struct esd_cmeta *b = new_cmeta(cap, (enum esd_policy)p, &m2);
		const size_t len = esd_cmeta_bytes(cap);
		struct fillbuf fa, fb;
		fill_alloc(&fa, cap);
		fill_alloc(&fb, cap);
		uint64_t keys[120], rng = 77 + (uint64_t)p;
		uint8_t st[120];
		for (uint64_t it = 1; it <= 300; it++) {
			const size_t n =
			    draw_keys(&rng, keys, 1 + esd_test_rand(&rng) % 120, cap * 2);
			for (size_t i = 0; i < n; i++)
				st[i] = (uint8_t)(ESD_ROW_OUTDATED + esd_test_rand(&rng) % 3);
			assert_int_equal(esd_cmeta_begin_iter(a, it, keys, n, &fa.f), 0);
			assert_int_equal(
			    esd_cmeta_set_states(a, fa.f.slots, st, ESD_ROW_ABSENT, 0, n), 0);
			if (n > 1 && it % 50 == 0) {
				const uint8_t keep = st[n / 2];
				st[n / 2] = ESD_ROW_ABSENT;
				assert_int_equal(
				    esd_cmeta_begin_iter_states(b, it, keys, n, st, &fb.f),
				    -EINVAL);
				st[n / 2] = 7;
				assert_int_equal(
				    esd_cmeta_begin_iter_states(b, it, keys, n, st, &fb.f),
				    -EINVAL);
				st[n / 2] = keep;
			}
			assert_int_equal(esd_cmeta_begin_iter_states(b, it, keys, n, st, &fb.f), 0);
			same_fill(&fa.f, &fb.f, n);
			/* Under LRU the blocks are byte-identical. Under the heap
			 * policies a pinned slot popped and set aside goes back into
			 * the heap with its new state in one case, its old one in
			 * the other (both brought up to date when the pin lapses):
			 * the heaps may be arranged differently, the order is the
			 * same - the fills compared every iteration show it. */
			if (p == ESD_POLICY_LRU)
				assert_memory_equal(a, b, len);
			/* Under Emark a pin is parked when it is pinned clean (b),
			 * not when it turns clean while pinned (a: its lapse parks
			 * it): the flag may differ until then, the order not. */
			for (uint32_t i = 0; i < cap; i++) {
				struct esd_cmeta_slot sa = *esd_cmeta_slot(a, i);
				struct esd_cmeta_slot sb = *esd_cmeta_slot(b, i);
				sa.parked = sb.parked = 0;
				assert_memory_equal(&sa, &sb, sizeof(sa));
			}
			if (it % 37 == 0) {
				/* rows freed between iterations, as a real cache does */
				assert_int_equal(
				    esd_cmeta_set_state(a, fa.f.slots[0], ESD_ROW_ABSENT, 0), 0);
				assert_int_equal(
				    esd_cmeta_set_state(b, fb.f.slots[0], ESD_ROW_ABSENT, 0), 0);
			}
		}
		assert_int_equal(esd_cmeta_verify(a), 0);
		assert_int_equal(esd_cmeta_verify(b), 0);
		assert_int_equal(esd_cmeta_begin_iter_states(b, 301, keys, 1, NULL, &fb.f),
		                 -EINVAL);
		fill_free(&fa);
		fill_free(&fb);
		free(m1);
		free(m2);
	}
}

static int cmp_u64(const void *a, const void *b)
{
	const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return (x > y) - (x < y);
}

/* test_damaged_block: blocks damaged after they were attached, under
 * every policy. Whatever the bytes, no call may index past the block (the
 * ASan build checks it); begin_iter either works or says -EUCLEAN, and
 * verify names the damage.
 *  - how 0: everything past the slot records 0xff while the header still
 *    says "full": no victim anywhere (the ring and heap entries name slots
 *    past the capacity, the index is empty), so -EUCLEAN;
 *  - how 1: the same area random (eight seeds): a few iterations of mixed
 *    hits and misses, state changes and lookups run without touching
 *    anything outside (a full index too: lookups and inserts give up);
 *  - how 2: a header counter out of range: -EUCLEAN before any change.
 * damaged_block: one block of 64 slots under pol, full, then damaged. */
static void damaged_block(enum esd_policy pol, int how, uint64_t seed)
{
	const uint32_t cap = 64;
	const size_t len = esd_cmeta_bytes(cap), past = 256 + (size_t)cap * 64;
	void *mem;
	struct esd_cmeta *cm = new_cmeta(cap, pol, &mem);
	struct fillbuf f;
	fill_alloc(&f, cap);
	uint64_t keys[64];
	for (uint32_t i = 0; i < cap; i++)
		keys[i] = 1000 + i;
	assert_int_equal(esd_cmeta_lookahead(cm, keys, 8, 2), 0);
	assert_int_equal(esd_cmeta_begin_iter(cm, 1, keys, cap, &f.f), 0);
	assert_int_equal(esd_cmeta_count(cm), cap);
	keys[0] = 5;
	if (how == 0) {
		memset((char *)mem + past, 0xff, len - past);
		assert_int_not_equal(esd_cmeta_verify(cm), 0);
		assert_int_equal(esd_cmeta_begin_iter(cm, 2, keys, 1, &f.f), -EUCLEAN);
	} else if (how == 1) {
		uint64_t x = seed;
		for (size_t i = past; i < len; i++) {
			x ^= x << 13, x ^= x >> 7, x ^= x << 17;
			((unsigned char *)mem)[i] = (unsigned char)x;
		}
		assert_int_not_equal(esd_cmeta_verify(cm), 0);
		for (uint64_t it = 2; it < 6; it++) {
			/* half old keys, half new ones, ascending */
			for (uint32_t i = 0; i < 16; i++)
				keys[i] = i % 2 ? 1000 + 4 * i + it : 5000 + 100 * it + i;
			qsort(keys, 16, sizeof(keys[0]), cmp_u64);
			const int rc = esd_cmeta_begin_iter(cm, it, keys, 16, &f.f);
			assert_true(rc == 0 || rc == -EUCLEAN);
			for (uint32_t i = 0; i < 16; i++) {
				const uint32_t s = esd_cmeta_find(cm, keys[i]);
				assert_true(s == ESD_SLOT_NONE || s < cap);
				if (s != ESD_SLOT_NONE)
					(void)esd_cmeta_set_state(cm, s, ESD_ROW_CLEAN, it);
			}
			(void)esd_cmeta_mark_outdated_batch(cm, keys, 16);
		}
	} else {
		/* a counter past its array: refused before any change. npinned
		 * is byte 44 of the header (magic 8, version 4, header size 4,
		 * total 8, capacity, policy, index size, count, heap entries 4
		 * each) */
		uint32_t *npinned = (uint32_t *)((char *)mem + 44);
		assert_int_equal(*npinned, cap);
		*npinned = cap + 1;
		unsigned char before[256];
		memcpy(before, mem, sizeof(before));
		const enum esd_policy other =
		    pol == ESD_POLICY_LRU ? ESD_POLICY_LFU : ESD_POLICY_LRU;
		assert_int_equal(esd_cmeta_begin_iter(cm, 2, keys, 1, &f.f), -EUCLEAN);
		assert_int_equal(esd_cmeta_set_policy(cm, other), -EUCLEAN);
		assert_int_equal(esd_cmeta_lookahead(cm, keys, 1, 3), -EUCLEAN);
		assert_memory_equal(before, mem, sizeof(before));
	}
	fill_free(&f);
	free(mem);
}

/* A switch away from LRU while every cached row is pinned (an empty heap)
 * gave a slot a heap position past the heap, read from the ring's bytes
 * in the shared area; that slot could never be a victim again. */
static void test_switch_with_all_pinned(void **state)
{
	(void)state;
	void *mem;
	struct esd_cmeta *cm = new_cmeta(8, ESD_POLICY_LRU, &mem);
	struct fillbuf fa;
	fill_alloc(&fa, 8);
	const esd_key_t k1[] = {10, 11, 12, 13, 14, 15, 16, 17};
	const esd_key_t k2[] = {20, 21, 22, 23, 24, 25, 26, 27};
	/* eight ring entries: the area's first heap entry is ring bytes */
	assert_int_equal(esd_cmeta_begin_iter(cm, 1, k1, 8, &fa.f), 0);
	for (enum esd_policy p = ESD_POLICY_LFU; p <= ESD_POLICY_LOOKAHEAD; p++) {
		assert_int_equal(esd_cmeta_set_policy(cm, p), 0);
		assert_int_equal(esd_cmeta_verify(cm), 0);
		assert_int_equal(esd_cmeta_set_policy(cm, ESD_POLICY_LRU), 0);
		assert_int_equal(esd_cmeta_verify(cm), 0);
	}
	assert_int_equal(esd_cmeta_set_policy(cm, ESD_POLICY_LFU), 0);
	/* eight new keys: every row of iteration 1 is a victim */
	assert_int_equal(esd_cmeta_begin_iter(cm, 2, k2, 8, &fa.f), 0);
	assert_int_equal(fa.f.n_evicts, 8);
	assert_int_equal(esd_cmeta_verify(cm), 0);
	fill_free(&fa);
	free(mem);
}

static void test_damaged_block(void **state)
{
	(void)state;
	static const enum esd_policy pols[] = {ESD_POLICY_LRU, ESD_POLICY_LFU, ESD_POLICY_EMARK,
	                                       ESD_POLICY_LOOKAHEAD};
	for (uint64_t q = 0; q < sizeof(pols) / sizeof(pols[0]); q++) {
		damaged_block(pols[q], 0, 0);
		for (uint64_t seed = 1; seed <= 8; seed++)
			damaged_block(pols[q], 1, UINT64_C(0x9e3779b97f4a7c15) * (16 * q + seed));
		damaged_block(pols[q], 2, 0);
	}
}

static void test_attach_validation(void **state)
{
	(void)state;
	void *mem;
	struct esd_cmeta *cm = new_cmeta(100, ESD_POLICY_EMARK, &mem), *out = NULL;
	size_t len = esd_cmeta_bytes(100);
	uint8_t *raw = mem;

	assert_int_equal(esd_cmeta_attach(mem, len, &out), 0);
	assert_int_equal(esd_cmeta_attach(mem, len - 1, &out), -EINVAL);
	assert_int_equal(esd_cmeta_attach(raw + 1, len, &out), -EINVAL); /* misaligned */
	raw[0] ^= 1;
	assert_int_equal(esd_cmeta_attach(mem, len, &out), -ESD_EBADMAGIC);
	raw[0] ^= 1;
	raw[8] ^= 1; /* version */
	assert_int_equal(esd_cmeta_attach(mem, len, &out), -ESD_EBADVERSION);
	raw[8] ^= 1;
	raw[24] ^= 4; /* capacity: offsets no longer match */
	assert_int_equal(esd_cmeta_attach(mem, len, &out), -EINVAL);
	raw[24] ^= 4;
	assert_int_equal(esd_cmeta_attach(mem, len, &out), 0);
	assert_ptr_equal(out, cm);

	assert_int_equal(esd_cmeta_bytes(0), 0);
	assert_int_equal(esd_cmeta_init(mem, len, 0, ESD_POLICY_LRU, &out), -EINVAL);
	assert_int_equal(esd_cmeta_init(mem, len - 1, 100, ESD_POLICY_LRU, &out), -EINVAL);
	assert_int_equal(esd_cmeta_init(raw + 8, len, 10, ESD_POLICY_LRU, &out), -EINVAL);
	free(mem);
}

/* ---- a block made from its rows ------------------------------------------ */

/* Per key, a and b hold the same fields (slot numbers aside). */
static void same_rows(const struct esd_cmeta *a, const struct esd_cmeta *b)
{
	assert_int_equal(esd_cmeta_count(a), esd_cmeta_count(b));
	assert_int_equal(esd_cmeta_emark_target(a), esd_cmeta_emark_target(b));
	assert_int_equal(esd_cmeta_last_iter(a), esd_cmeta_last_iter(b));
	for (uint32_t i = 0; i < esd_cmeta_capacity(a); i++) {
		const struct esd_cmeta_slot *x = esd_cmeta_slot(a, i);
		if (x->state == ESD_ROW_ABSENT)
			continue;
		const uint32_t j = esd_cmeta_find(b, x->key);
		assert_int_not_equal(j, ESD_SLOT_NONE);
		const struct esd_cmeta_slot *y = esd_cmeta_slot(b, j);
		assert_int_equal(x->state, y->state);
		assert_int_equal(x->clock, y->clock);
		assert_int_equal(x->last_use, y->last_use);
		assert_int_equal(x->pin_iter, y->pin_iter);
		assert_int_equal(x->freq, y->freq);
		assert_int_equal(x->mark, y->mark);
	}
}

/* One iteration on a block: begin_iter, pulls CLEAN or DIRTY, a row made
 * OUTDATED; returns the fill (keys only matter: slots differ). */
static void step_keys(struct esd_cmeta *cm, uint64_t it, const uint64_t *keys, size_t n,
                      struct fillbuf *fb)
{
	assert_int_equal(esd_cmeta_begin_iter(cm, it, keys, n, &fb->f), 0);
	for (size_t i = 0; i < fb->f.n_pulls; i++)
		esd_cmeta_set_state(cm, fb->f.pulls[i].slot,
		                    fb->f.pulls[i].key % 3 ? ESD_ROW_CLEAN : ESD_ROW_DIRTY, it);
	if (n)
		esd_cmeta_mark_outdated(cm, keys[n / 2]);
}

/* esd_cmeta_from_rows: a block made from another's rows passes
 * esd_cmeta_verify, holds the same rows, and from then on makes the same
 * decisions (pulls and victims by key) under every policy, through a
 * policy switch too. */
static void test_from_rows(void **state)
{
	(void)state;
	const uint32_t cap = 97;
	for (int pol = ESD_POLICY_LRU; pol <= ESD_POLICY_LOOKAHEAD; pol++) {
		void *ma, *mb;
		struct esd_cmeta *a = new_cmeta(cap, (enum esd_policy)pol, &ma), *b;
		const size_t len = esd_cmeta_bytes(cap);
		mb = aligned_alloc(64, (len + 63) & ~(size_t)63);
		assert_non_null(mb);
		struct fillbuf fa, fbb;
		fill_alloc(&fa, cap);
		fill_alloc(&fbb, cap);
		uint64_t *keys = calloc(cap, sizeof(*keys));
		struct esd_cmeta_row *rows = calloc(cap, sizeof(*rows));
		uint64_t rng = 4242 + (uint64_t)pol;
		uint64_t it = 0;
		for (int round = 0; round < 3; round++) {
			for (int q = 0; q < 40; q++) {
				size_t n = draw_keys(&rng, keys, esd_test_rand(&rng) % (cap / 2),
				                     (uint64_t)cap * 4);
				step_keys(a, ++it, keys, n, &fa);
			}
			/* the rows, in reverse slot order (any order will do) */
			size_t nr = 0;
			for (uint32_t i = cap; i-- > 0;) {
				const struct esd_cmeta_slot *x = esd_cmeta_slot(a, i);
				if (x->state == ESD_ROW_ABSENT)
					continue;
				rows[nr++] = (struct esd_cmeta_row){.key = x->key,
				                                    .clock = x->clock,
				                                    .last_use = x->last_use,
				                                    .freq = x->freq,
				                                    .mark = x->mark,
				                                    .state = x->state};
			}
			memset(mb, 0x5A, len);
			assert_int_equal(esd_cmeta_from_rows(mb, len, cap, (enum esd_policy)pol,
			                                     rows, nr, it,
			                                     esd_cmeta_emark_target(a), &b),
			                 0);
			assert_int_equal(esd_cmeta_verify(b), 0);
			same_rows(a, b);
			for (int q = 0; q < 30; q++) {
				if (q == 15 && round == 1) {
					const enum esd_policy np = (enum esd_policy)((pol + 1) % 4);
					assert_int_equal(esd_cmeta_set_policy(a, np), 0);
					assert_int_equal(esd_cmeta_set_policy(b, np), 0);
				}
				size_t n = draw_keys(&rng, keys, esd_test_rand(&rng) % (cap / 2),
				                     (uint64_t)cap * 4);
				it++;
				step_keys(a, it, keys, n, &fa);
				step_keys(b, it, keys, n, &fbb);
				assert_int_equal(fa.f.n_pulls, fbb.f.n_pulls);
				assert_int_equal(fa.f.n_evicts, fbb.f.n_evicts);
				for (size_t i = 0; i < fa.f.n_pulls; i++)
					assert_int_equal(fa.pulls[i].key, fbb.pulls[i].key);
				for (size_t i = 0; i < fa.f.n_evicts; i++) {
					assert_int_equal(fa.evicts[i].key, fbb.evicts[i].key);
					assert_int_equal(fa.evicts[i].dirty, fbb.evicts[i].dirty);
				}
				same_rows(a, b);
			}
			assert_int_equal(esd_cmeta_set_policy(a, (enum esd_policy)pol), 0);
		}
		/* bad rows: a key twice, a mark above the target, a use ahead */
		rows[1] = rows[0];
		assert_int_equal(esd_cmeta_from_rows(mb, len, cap, ESD_POLICY_LRU, rows, 2, it,
		                                     esd_cmeta_emark_target(a), &b),
		                 -EINVAL);
		rows[1] = rows[0];
		rows[1].key++;
		rows[1].mark = esd_cmeta_emark_target(a) + 1;
		assert_int_equal(esd_cmeta_from_rows(mb, len, cap, ESD_POLICY_LRU, rows, 2, it,
		                                     esd_cmeta_emark_target(a), &b),
		                 -EINVAL);
		rows[1].mark = 1;
		rows[1].last_use = it + 1;
		assert_int_equal(esd_cmeta_from_rows(mb, len, cap, ESD_POLICY_LRU, rows, 2, it,
		                                     esd_cmeta_emark_target(a), &b),
		                 -EINVAL);
		assert_int_equal(
		    esd_cmeta_from_rows(mb, len, cap, ESD_POLICY_LRU, rows, cap + 1, it, 1, &b),
		    -EINVAL);
		free(rows);
		free(keys);
		fill_free(&fa);
		fill_free(&fbb);
		free(ma);
		free(mb);
	}
}

static void test_policy_names(void **state)
{
	(void)state;
	enum esd_policy p;
	const char *names[] = {"lru", "lfu", "emark", "lookahead"};
	for (int i = 0; i < 4; i++) {
		assert_int_equal(esd_policy_parse(names[i], &p), 0);
		assert_int_equal(p, i);
		assert_string_equal(esd_policy_name(p), names[i]);
	}
	assert_int_equal(esd_policy_parse("EMark", &p), 0);
	assert_int_equal(esd_policy_parse("fifo", &p), -EINVAL);
	assert_int_equal(esd_policy_parse(NULL, &p), -EINVAL);
	assert_string_equal(esd_policy_name((enum esd_policy)9), "unknown");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_trace_lru),
	    cmocka_unit_test(test_trace_lfu),
	    cmocka_unit_test(test_trace_emark),
	    cmocka_unit_test(test_trace_lookahead),
	    cmocka_unit_test(test_trace_policy_switch),
	    cmocka_unit_test(test_capacity_and_errors),
	    cmocka_unit_test(test_dirty_victims),
	    cmocka_unit_test(test_emark_rule),
	    cmocka_unit_test(test_lookahead_rule),
	    cmocka_unit_test(test_determinism_and_copy),
	    cmocka_unit_test(test_attach_validation),
	    cmocka_unit_test(test_policy_names),
	    cmocka_unit_test(test_batched_calls),
	    cmocka_unit_test(test_begin_iter_states),
	    cmocka_unit_test(test_damaged_block),
	    cmocka_unit_test(test_switch_with_all_pinned),
	    cmocka_unit_test(test_from_rows),
	};
	return cmocka_run_group_tests(tests, NULL, NULL) ? 1 : 0;
}
