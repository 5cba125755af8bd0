/*
 * index.c - the key -> slot index of an esd_cmeta block.
 *
 * Open addressing with linear probing over a table of 16-byte entries
 * (key, slot, hash), four to a cache line, load at most 1/2; the home
 * bucket is a multiply-shift of the hash, so the table is 2 x capacity
 * rather than the next power of two.
 * Linear probing keeps a lookup to one or two adjacent cache lines; deletion
 * shifts the following entries back (no tombstones), so a lookup never
 * degrades with churn and the table needs no rebuild. Lookups allocate
 * nothing and take no lock; the batched lookup hashes a window of keys
 * ahead and prefetches their home lines so the DRAM misses overlap.
 */
#include "cmeta_impl.h"

#include <string.h>

static inline uint32_t next(uint32_t i, uint32_t size)
{
	return i + 1 == size ? 0 : i + 1;
}

void esd_cm_index_insert(struct esd_cmeta *cm, uint64_t key, uint32_t slot)
{
	struct cm_ient *t = cm_index(cm);
	uint32_t size = cm->index_size;
	uint32_t h = (uint32_t)cm_hash(key);
	uint32_t i = cm_home(h, size), left = size;

	while (t[i].slot != ESD_SLOT_NONE && --left)
		i = next(i, size);
	if (t[i].slot != ESD_SLOT_NONE)
		return; /* no empty entry: a damaged block's index */
	t[i].key = key;
	t[i].slot = slot;
	t[i].hash = h;
}

void esd_cm_index_remove(struct esd_cmeta *cm, uint64_t key)
{
	struct cm_ient *t = cm_index(cm);
	uint32_t size = cm->index_size;
	uint32_t i = cm_home((uint32_t)cm_hash(key), size), left = size;

	while (t[i].slot != ESD_SLOT_NONE && t[i].key != key && --left)
		i = next(i, size);
	if (t[i].slot == ESD_SLOT_NONE || t[i].key != key)
		return;
	/* Backward shift: move every later entry of the run whose home is not
	 * in (i, j] into the hole, so no probe sequence crosses a gap. */
	uint32_t j = i;
	for (left = size; --left;) {
		j = next(j, size);
		if (t[j].slot == ESD_SLOT_NONE)
			break;
		uint32_t home = cm_home(t[j].hash, size);
		bool stays = i <= j ? (i < home && home <= j) : (i < home || home <= j);
		if (stays)
			continue;
		t[i] = t[j];
		i = j;
	}
	t[i].key = 0;
	t[i].slot = ESD_SLOT_NONE;
	t[i].hash = 0;
}

/* Gives up on the second wrap past the end: only a damaged block's index
 * has no empty entry (and the test sits on the wrap, which is rare). */
static inline uint32_t probe(const struct cm_ient *t, uint32_t size, uint32_t i, uint64_t key)
{
	for (uint32_t wraps = 0;;) {
		uint32_t s = t[i].slot;
		if (s == ESD_SLOT_NONE)
			return ESD_SLOT_NONE;
		if (t[i].key == key)
			return s;
		if (++i == size) {
			if (++wraps == 2)
				return ESD_SLOT_NONE;
			i = 0;
		}
	}
}

/* An index entry naming a slot past the capacity exists only in a damaged
 * block: it reads as "not here" (esd_cmeta_verify names it), so no caller
 * is ever handed a slot outside the block. */
static inline uint32_t in_block(const struct esd_cmeta *cm, uint32_t s)
{
	return s < cm->capacity ? s : ESD_SLOT_NONE;
}

uint32_t esd_cmeta_find(const struct esd_cmeta *cm, esd_key_t key)
{
	if (!cm)
		return ESD_SLOT_NONE;
	return in_block(cm, probe(cm_index(cm), cm->index_size,
	                          cm_home((uint32_t)cm_hash(key), cm->index_size), key));
}

/* Keys hashed and prefetched ahead of the probe. 16 misses in flight is
 * about what one core's line-fill buffers sustain. */
#define WINDOW 16

void esd_cmeta_find_batch(const struct esd_cmeta *cm, const esd_key_t *keys, size_t n,
                          uint32_t *slots)
{
	if (!cm) {
		for (size_t i = 0; i < n; i++)
			slots[i] = ESD_SLOT_NONE;
		return;
	}
	const struct cm_ient *t = cm_index(cm);
	const struct esd_cmeta_slot *sl = cm_slots(cm);
	uint32_t size = cm->index_size;
	const uint32_t cap = cm->capacity;
	uint32_t home[WINDOW];
	size_t pre = n < WINDOW ? n : WINDOW;

	for (size_t i = 0; i < pre; i++) {
		home[i] = cm_home((uint32_t)cm_hash(keys[i]), size);
		__builtin_prefetch(&t[home[i]]);
	}
	/* the caller reads or writes each found slot next (pins, states):
	 * its line is started as soon as the probe knows it */
	size_t i = 0;
	for (; i + WINDOW < n; i++) {
		const uint32_t h = home[i % WINDOW];
		const uint32_t hn = cm_home((uint32_t)cm_hash(keys[i + WINDOW]), size);
		home[i % WINDOW] = hn;
		__builtin_prefetch(&t[hn]);
		const uint32_t s = probe(t, size, h, keys[i]);
		/* slot 0's line for a miss: a harmless prefetch, no branch */
		const bool in = s < cap;
		__builtin_prefetch(&sl[in ? s : 0], 1);
		slots[i] = in ? s : ESD_SLOT_NONE;
	}
	for (; i < n; i++) {
		const uint32_t s = in_block(cm, probe(t, size, home[i % WINDOW], keys[i]));
		if (s != ESD_SLOT_NONE)
			__builtin_prefetch(&sl[s], 1);
		slots[i] = s;
	}
}
