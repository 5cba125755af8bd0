/*
 * cmeta.c - the esd_cmeta block as a whole: its layout, formatting,
 * validation on attach, copying (snapshots), simple accessors and a full
 * consistency check used by tests and debugging tools.
 *
 * The layout is computed from the capacity alone (cmeta_impl.h), so a
 * block's header can be checked against what its capacity implies: a
 * header that does not match is refused before any offset in it is used.
 */
#include "cmeta_impl.h"

#include <esd/err.h>
#include <esd/log.h>

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define ALIGN64(x) (((x) + 63) & ~(uint64_t)63)

struct layout {
	uint32_t index_entries;
	uint32_t free_words[CM_FREE_LEVELS];
	uint64_t off_slots, off_index, off_heap, off_heappos, off_pinned, off_hints;
	uint64_t off_free[CM_FREE_LEVELS];
	uint64_t off_lrustale;
	uint64_t total;
};

static void compute_layout(uint32_t capacity, struct layout *l)
{
	/* Index load at most 1/2, whole cache lines: 1.5 probes per hit
	 * against 2 at 2/3, +40 % batched lookups (bench/results/cache.md)
	 * for 8 more bytes per slot. */
	uint64_t ents = ((uint64_t)capacity * 2 + 1 + 3) & ~(uint64_t)3;
	if (ents < 8)
		ents = 8;
	l->index_entries = (uint32_t)ents;

	uint64_t off = CM_HDR_BYTES;
	l->off_slots = off;
	off = ALIGN64(off + (uint64_t)capacity * sizeof(struct esd_cmeta_slot));
	l->off_index = off;
	off = ALIGN64(off + ents * sizeof(struct cm_ient));
	off = (off + 127) & ~(uint64_t)127; /* sibling groups on 128-byte boundaries */
	l->off_heap = off;
	off = ALIGN64(off + (cm_heap_b_root(capacity) + 1) * sizeof(struct cm_hent));
	l->off_heappos = off;
	off = ALIGN64(off + (uint64_t)capacity * sizeof(uint32_t));
	l->off_pinned = off;
	off = ALIGN64(off + (uint64_t)capacity * sizeof(uint32_t));
	l->off_hints = off;
	off = ALIGN64(off + (uint64_t)capacity * sizeof(uint64_t));
	uint64_t bits = capacity;
	for (int i = 0; i < CM_FREE_LEVELS; i++) {
		uint64_t words = (bits + 63) / 64;
		l->free_words[i] = (uint32_t)words;
		l->off_free[i] = off;
		off = ALIGN64(off + words * sizeof(uint64_t));
		bits = words;
	}
	l->off_lrustale = off;
	off = ALIGN64(off + ((uint64_t)cm_lru_size_of(capacity) + 63) / 64 * sizeof(uint64_t));
	l->total = off;
}

size_t esd_cmeta_bytes(uint32_t capacity)
{
	struct layout l;

	if (capacity == 0 || capacity > CM_MAX_CAP)
		return 0;
	compute_layout(capacity, &l);
	return (size_t)l.total;
}

int esd_cmeta_init(void *mem, size_t len, uint32_t capacity, enum esd_policy policy,
                   struct esd_cmeta **out)
{
	struct layout l;

	if (!mem || !out || capacity == 0 || capacity > CM_MAX_CAP || (uintptr_t)mem % 64 ||
	    (unsigned)policy > ESD_POLICY_LOOKAHEAD)
		return -EINVAL;
	compute_layout(capacity, &l);
	if (len < l.total)
		return -EINVAL;

	struct esd_cmeta *cm = mem;
	memset(mem, 0, l.total);
	cm->magic = CM_MAGIC;
	cm->version = CM_VERSION;
	cm->hdr_bytes = CM_HDR_BYTES;
	cm->total_bytes = l.total;
	cm->capacity = capacity;
	cm->policy = policy;
	cm->index_size = l.index_entries;
	cm->emark_target = 1;
	cm->off_slots = l.off_slots;
	cm->off_index = l.off_index;
	cm->off_heap = l.off_heap;
	cm->off_heappos = l.off_heappos;
	cm->off_pinned = l.off_pinned;
	cm->off_hints = l.off_hints;
	cm->off_lrustale = l.off_lrustale;
	cm->lru_head = cm->lru_tail = 0;
	for (int i = 0; i < CM_FREE_LEVELS; i++) {
		cm->off_free[i] = l.off_free[i];
		cm->free_words[i] = l.free_words[i];
	}
	struct cm_ient *ix = cm_index(cm);
	for (uint32_t i = 0; i < l.index_entries; i++)
		ix[i].slot = ESD_SLOT_NONE;
	struct esd_cmeta_slot *s = cm_slots(cm);
	for (uint32_t i = 0; i < capacity; i++)
		s[i].next_use = ESD_NEXT_USE_NONE;
	/* every slot free: at each level the first 'bits' bits are set (a
	 * word of the level below is non-empty iff its bit here is set) */
	uint64_t bits = capacity;
	for (int lv = 0; lv < CM_FREE_LEVELS; lv++) {
		uint64_t *w = cm_free(cm, lv);
		uint64_t full = bits / 64;
		memset(w, 0xff, full * sizeof(*w));
		if (bits % 64)
			w[full] = (UINT64_C(1) << (bits % 64)) - 1;
		bits = (bits + 63) / 64;
	}
	*out = cm;
	return 0;
}

int esd_cmeta_attach(void *mem, size_t len, struct esd_cmeta **out)
{
	struct esd_cmeta *cm = mem;
	struct layout l;

	if (!mem || !out || (uintptr_t)mem % 64 || len < CM_HDR_BYTES)
		return -EINVAL;
	if (cm->magic != CM_MAGIC) {
		ESD_ERR("cache", "cache metadata: bad magic %#llx (want %#llx)",
		        (unsigned long long)cm->magic, (unsigned long long)CM_MAGIC);
		return -ESD_EBADMAGIC;
	}
	if (cm->version != CM_VERSION) {
		ESD_ERR("cache", "cache metadata: layout version %u, this build speaks %u",
		        cm->version, CM_VERSION);
		return -ESD_EBADVERSION;
	}
	if (cm->hdr_bytes != CM_HDR_BYTES || cm->capacity == 0 || cm->capacity > CM_MAX_CAP) {
		ESD_ERR("cache", "cache metadata: bad header size %u or capacity %u", cm->hdr_bytes,
		        cm->capacity);
		return -EINVAL;
	}
	compute_layout(cm->capacity, &l);
	bool offs_ok = cm->off_slots == l.off_slots && cm->off_index == l.off_index &&
	               cm->off_heap == l.off_heap && cm->off_heappos == l.off_heappos &&
	               cm->off_pinned == l.off_pinned && cm->off_hints == l.off_hints &&
	               cm->off_lrustale == l.off_lrustale;
	for (int i = 0; i < CM_FREE_LEVELS; i++)
		offs_ok = offs_ok && cm->off_free[i] == l.off_free[i] &&
		          cm->free_words[i] == l.free_words[i];
	if (cm->total_bytes != l.total || !offs_ok || cm->index_size != l.index_entries) {
		ESD_ERR("cache", "cache metadata: sizes/offsets do not match capacity %u",
		        cm->capacity);
		return -EINVAL;
	}
	if (len < l.total) {
		ESD_ERR("cache", "cache metadata: %llu bytes needed, %zu mapped",
		        (unsigned long long)l.total, len);
		return -EINVAL;
	}
	if (!cm_counters_ok(cm)) {
		ESD_ERR("cache",
		        "cache metadata: counters out of range (count %u, heap %u, "
		        "pinned %u, hints %u, policy %u, LRU ring [%u, %u))",
		        cm->count, cm->heap_n, cm->npinned, cm->nhints, cm->policy, cm->lru_head,
		        cm->lru_tail);
		return -EINVAL;
	}
	*out = cm;
	return 0;
}

int esd_cmeta_copy(void *dst, size_t len, const struct esd_cmeta *src, struct esd_cmeta **out)
{
	if (!dst || !src || !out || (uintptr_t)dst % 64 || len < src->total_bytes)
		return -EINVAL;
	if (dst != (const void *)src)
		memcpy(dst, src, src->total_bytes);
	*out = dst;
	return 0;
}

uint32_t esd_cmeta_capacity(const struct esd_cmeta *cm)
{
	return cm ? cm->capacity : 0;
}

uint32_t esd_cmeta_count(const struct esd_cmeta *cm)
{
	return cm ? cm->count : 0;
}

enum esd_policy esd_cmeta_policy(const struct esd_cmeta *cm)
{
	return (enum esd_policy)cm->policy;
}

uint64_t esd_cmeta_last_iter(const struct esd_cmeta *cm)
{
	return cm ? cm->last_iter : 0;
}

uint32_t esd_cmeta_emark_target(const struct esd_cmeta *cm)
{
	return cm ? cm->emark_target : 0;
}

size_t esd_cmeta_block_bytes(const struct esd_cmeta *cm)
{
	return cm ? (size_t)cm->total_bytes : 0;
}

const struct esd_cmeta_slot *esd_cmeta_slot(const struct esd_cmeta *cm, uint32_t slot)
{
	if (!cm || slot >= cm->capacity)
		return NULL;
	return &cm_slots(cm)[slot];
}

enum esd_row_state esd_cmeta_state(const struct esd_cmeta *cm, esd_key_t key)
{
	uint32_t s = esd_cmeta_find(cm, key);

	if (s == ESD_SLOT_NONE)
		return ESD_ROW_ABSENT;
	return (enum esd_row_state)cm_slots(cm)[s].state;
}

static const char *const policy_names[] = {"lru", "lfu", "emark", "lookahead"};

int esd_policy_parse(const char *name, enum esd_policy *out)
{
	if (!name || !out)
		return -EINVAL;
	for (unsigned i = 0; i < sizeof(policy_names) / sizeof(policy_names[0]); i++) {
		if (!strcasecmp(name, policy_names[i])) {
			*out = (enum esd_policy)i;
			return 0;
		}
	}
	return -EINVAL;
}

const char *esd_policy_name(enum esd_policy policy)
{
	if ((unsigned)policy >= sizeof(policy_names) / sizeof(policy_names[0]))
		return "unknown";
	return policy_names[policy];
}

#define CHECK(cond, ...)                                                                           \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			ESD_ERR("cache", "cache metadata inconsistent: " __VA_ARGS__);             \
			return -EINVAL;                                                            \
		}                                                                                  \
	} while (0)

/* Long: one invariant after another over the same block, each naming what it found broken;
 * no step is used elsewhere. */
int esd_cmeta_verify(const struct esd_cmeta *cm)
{
	if (!cm)
		return -EINVAL;
	const struct esd_cmeta_slot *s = cm_slots(cm);
	const struct cm_ient *ix = cm_index(cm);
	const struct cm_hent *h = cm_heap(cm);
	const uint32_t *hp = cm_heappos(cm);
	uint32_t occupied = 0, in_heap = 0, at_target = 0, indexed = 0, parked = 0, unlisted = 0;

	for (uint32_t i = 0; i < cm->capacity; i++) {
		bool occ = s[i].state != ESD_ROW_ABSENT;
		CHECK(s[i].state <= ESD_ROW_DIRTY, "slot %u state %u", i, s[i].state);
		CHECK(occ != esd_cm_free_test(cm, i), "slot %u occupied %d but free bit disagrees",
		      i, occ);
		if (!occ) {
			CHECK(hp[i] == 0, "free slot %u in the heap", i);
			CHECK(!s[i].parked, "free slot %u parked", i);
			continue;
		}
		occupied++;
		CHECK(esd_cmeta_find(cm, s[i].key) == i, "slot %u key %#llx not indexed to it", i,
		      (unsigned long long)s[i].key);
		CHECK(s[i].mark <= cm->emark_target, "slot %u mark %u above target %u", i,
		      s[i].mark, cm->emark_target);
		if (s[i].mark == cm->emark_target)
			at_target++;
		/* Unpinned slots are in the heap with their exact order; a
		 * pinned one may be there with a stale entry (pops skip it), and
		 * so may a parked one (Emark's last class) or be out of it. */
		bool pinned = cm_pinned_now(cm, &s[i]);
		unlisted += pinned && !s[i].parked;
		if (s[i].parked) {
			parked++;
			CHECK(cm->policy == ESD_POLICY_EMARK, "slot %u parked outside Emark", i);
			CHECK(pinned || cm_emark_last(cm, &s[i]),
			      "slot %u parked outside Emark's last class", i);
			pinned = true; /* (its entry may be stale or absent) */
		}
		if (cm->policy == ESD_POLICY_LRU) {
			CHECK(hp[i] == 0, "slot %u has a heap position under LRU", i);
			continue;
		}
		CHECK(pinned || hp[i], "unpinned slot %u not in the heap", i);
		if (hp[i]) {
			const bool in_b = hp[i] & CM_HEAPPOS_B;
			uint32_t p = (hp[i] & ~CM_HEAPPOS_B) - 1;
			in_heap++;
			CHECK(p < (in_b ? cm->heap_nb : cm->heap_n) &&
			          cm_heap_entry(cm, hp[i])->slot == i,
			      "slot %u heap position", i);
			struct cm_hent e;
			esd_cm_hent_of(cm, i, &e);
			const struct cm_hent *x = cm_heap_entry(cm, hp[i]);
			CHECK(pinned || (e.a == x->a && e.b == x->b && e.c == x->c &&
			                 in_b == cm_heap_b_holds(cm, &s[i])),
			      "slot %u heap entry stale", i);
		}
	}
	CHECK(occupied == cm->count, "count %u, %u slots occupied", cm->count, occupied);
	CHECK(parked == cm->nparked, "%u slots parked, header says %u", parked, cm->nparked);
	/* every pin not parked is listed for its lapse (once: a pin is
	 * listed at its pin or when it leaves the parked rows) */
	for (uint32_t j = 0; j < cm->npinned && cm->policy != ESD_POLICY_LRU; j++) {
		const uint32_t x = cm_pinned(cm)[j];
		if (x < cm->capacity && s[x].state != ESD_ROW_ABSENT && cm_pinned_now(cm, &s[x]) &&
		    !s[x].parked)
			unlisted--;
	}
	CHECK(cm->policy == ESD_POLICY_LRU || unlisted == 0,
	      "%d pinned slots not parked and not listed for their lapse", (int)unlisted);
	CHECK(at_target == cm->emark_at_target, "%u marks at target, header says %u", at_target,
	      cm->emark_at_target);
	if (cm->policy == ESD_POLICY_LRU) {
		/* the ring: one live entry per occupied slot (pinned ones
		 * included), at the slot's lru_pos, in (last_use, key) order */
		const uint32_t *ring = cm_lru_ring(cm);
		uint32_t live = 0;
		struct cm_hent last = {0}, e;
		CHECK(cm->lru_head <= cm->lru_tail && cm->lru_tail <= cm_lru_size_of(cm->capacity),
		      "LRU ring [%u, %u) out of its %u entries", cm->lru_head, cm->lru_tail,
		      cm_lru_size_of(cm->capacity));
		for (uint32_t p = cm->lru_head; p < cm->lru_tail; p++) {
			if (!cm_lru_live(cm, p))
				continue;
			const uint32_t x = ring[p];
			CHECK(x < cm->capacity && s[x].state != ESD_ROW_ABSENT && s[x].lru_pos == p,
			      "LRU ring entry %u (slot %u) dangles", p, x);
			esd_cm_hent_of(cm, x, &e);
			CHECK(!live || cm_hless(&last, &e), "LRU order broken at ring entry %u", p);
			last = e;
			live++;
		}
		CHECK(live == cm->count && live == cm->heap_n,
		      "LRU ring holds %u slots, count %u, header says %u", live, cm->count,
		      cm->heap_n);
	} else {
		CHECK(in_heap == cm->heap_n + cm->heap_nb,
		      "heaps hold %u + %u, %u slots point into them", cm->heap_n, cm->heap_nb,
		      in_heap);
		CHECK(cm->policy == ESD_POLICY_EMARK || cm->heap_nb == 0, "heap B outside Emark");
		CHECK(cm->lru_head == 0 && cm->lru_tail == 0, "LRU ring outside LRU");
		const struct cm_hent *hb = cm_heap_b(cm);
		for (uint32_t p = 1; p < cm->heap_n; p++)
			CHECK(!cm_hless(&h[p], &h[(p - 1) / 4]), "heap order broken at %u", p);
		for (uint32_t p = 1; p < cm->heap_nb; p++)
			CHECK(!cm_hless(hb - p, hb - (p - 1) / 4), "heap B order broken at %u", p);
	}
	for (uint32_t i = 0; i < cm->index_size; i++) {
		if (ix[i].slot == ESD_SLOT_NONE)
			continue;
		indexed++;
		CHECK(ix[i].slot < cm->capacity && s[ix[i].slot].key == ix[i].key &&
		          s[ix[i].slot].state != ESD_ROW_ABSENT,
		      "index entry %u (key %#llx -> slot %u) dangles", i,
		      (unsigned long long)ix[i].key, ix[i].slot);
	}
	CHECK(indexed == cm->count, "index holds %u keys, %u slots occupied", indexed, cm->count);
	for (uint32_t i = 1; i < cm->nhints; i++)
		CHECK(cm_hints(cm)[i - 1] < cm_hints(cm)[i], "hints not sorted at %u", i);
	return 0;
}

uint32_t esd_cmeta_hinted(const struct esd_cmeta *cm)
{
	return cm ? cm->nhints : 0;
}

size_t esd_cmeta_lru_order(const struct esd_cmeta *cm, uint32_t *slots, size_t cap)
{
	if (!cm || cm->policy != ESD_POLICY_LRU || !cm_counters_ok(cm))
		return 0;
	const uint32_t *ring = cm_lru_ring(cm);
	size_t k = 0;
	for (uint32_t p = cm->lru_head; p < cm->lru_tail && k < cap; p++)
		if (cm_lru_live(cm, p) && ring[p] < cm->capacity)
			slots[k++] = ring[p];
	return k;
}

static int cmp_u64(const void *x, const void *y)
{
	const uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
	return (a > b) - (a < b);
}

int esd_cmeta_from_rows(void *mem, size_t len, uint32_t capacity, enum esd_policy policy,
                        const struct esd_cmeta_row *rows, size_t n, uint64_t iter,
                        uint32_t emark_target, struct esd_cmeta **out)
{
	if (n > capacity || (n && !rows) || emark_target == 0)
		return -EINVAL;
	struct esd_cmeta *cm;
	int rc = esd_cmeta_init(mem, len, capacity, policy, &cm);
	if (rc)
		return rc;
	struct esd_cmeta_slot *sl = cm_slots(cm);
	/* the last iteration's rows are pinned, their slots in key order in
	 * pinned[]: their keys gathered in the hints' area first */
	uint64_t *pk = cm_hints(cm);
	uint32_t np = 0, at = 0;
	for (size_t q = 0; q < n; q++) {
		const struct esd_cmeta_row *r = &rows[q];
		if (r->state < ESD_ROW_OUTDATED || r->state > ESD_ROW_DIRTY || r->last_use == 0 ||
		    r->last_use > iter || r->freq == 0 || r->mark == 0 || r->mark > emark_target ||
		    esd_cmeta_find(cm, r->key) != ESD_SLOT_NONE) {
			ESD_ERR("cache",
			        "row %zu (key %#llx): state %u, last use %llu of %llu, freq %u, "
			        "mark %u of %u, or a key given twice",
			        q, (unsigned long long)r->key, r->state,
			        (unsigned long long)r->last_use, (unsigned long long)iter, r->freq,
			        r->mark, emark_target);
			return -EINVAL;
		}
		struct esd_cmeta_slot *s = &sl[q];
		cm_store64(&s->key, r->key);
		cm_store64(&s->clock, r->clock);
		cm_store8(&s->state, r->state);
		s->last_use = r->last_use;
		s->pin_iter = r->last_use;
		s->next_use = ESD_NEXT_USE_NONE;
		s->freq = r->freq;
		s->mark = r->mark;
		at += r->mark == emark_target;
		esd_cm_free_clear(cm, (uint32_t)q);
		esd_cm_index_insert(cm, r->key, (uint32_t)q);
		if (r->last_use == iter)
			pk[np++] = r->key;
	}
	cm->count = (uint32_t)n;
	cm->last_iter = iter;
	cm->emark_target = emark_target;
	cm->emark_at_target = at;
	qsort(pk, np, sizeof(*pk), cmp_u64);
	uint32_t *pinned = cm_pinned(cm);
	for (uint32_t i = 0; i < np; i++)
		pinned[i] = esd_cmeta_find(cm, pk[i]);
	memset(pk, 0, (size_t)np * sizeof(*pk));
	cm->npinned = np;
	esd_cm_heap_build(cm);
	*out = cm;
	return 0;
}
