/*
 * The key directory of a snapshot set (see keydir.h for why).
 */
#include "bigmem.h"
#include "keydir.h"

#include <esd/dispatch.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

static int alloc_table(struct keydir *kd, uint32_t bits)
{
	size_t size = (size_t)1 << bits;
	char *t = esd_big_zalloc(size << kd->shift);
	if (!t)
		return -ENOMEM;
	kd->t = t;
	kd->bits = bits;
	kd->size = size;
	kd->used = 0;
	return 0;
}

int esd_keydir_init(struct keydir *kd, size_t live_hint)
{
	kd->shift = 5;
	uint32_t bits = 10;
	while (((size_t)1 << bits) < 2 * live_hint)
		bits++;
	return alloc_table(kd, bits);
}

void esd_keydir_free(struct keydir *kd)
{
	esd_big_free(kd->t, kd->size << kd->shift);
	kd->t = NULL;
}

void esd_keydir_clear(struct keydir *kd)
{
	memset(kd->t, 0, kd->size << kd->shift);
	kd->used = 0;
	kd->gen++;
}

int esd_keydir_reserve(struct keydir *kd, size_t more)
{
	if ((kd->used + more) * 4 <= kd->size * 3)
		return 0;
	/* rehash the live entries (dropping those cached nowhere), growing
	 * while they would fill more than half of the table */
	size_t live = 0;
	for (size_t i = 0; i < kd->size; i++) {
		const struct keydir_ent *e = keydir_at(kd, i);
		live += e->used && (e->cached || (kd->keep_versions && e->version));
	}
	uint32_t bits = kd->bits;
	while (((size_t)1 << bits) < 2 * (live + more))
		bits++;
	struct keydir old = *kd;
	if (alloc_table(kd, bits)) {
		*kd = old;
		return -ENOMEM;
	}
	kd->gen = old.gen + 1;
	for (size_t i = 0; i < old.size; i++) {
		const struct keydir_ent *e = keydir_at(&old, i);
		if (e->used && (e->cached || (kd->keep_versions && e->version))) {
			uint32_t h = keydir_insert(kd, e->key);
			memcpy(keydir_at(kd, h), e, (size_t)1 << kd->shift);
		}
	}
	esd_big_free(old.t, old.size << old.shift);
	return 0;
}

uint32_t esd_keydir_find(const struct keydir *kd, esd_key_t key)
{
	return keydir_probe(kd, key);
}
