/*
 * Replicated keys (FAE's static hot set): added to a built key table as
 * unique keys every worker needs (esd_keytab_need sets all n bits for
 * them). Keys of the batch keep their number; the others are appended,
 * growing the per-key arrays and the hash table when they are full.
 */
#include "keytab_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Hash table of 2^bits entries holding the current unique keys. */
static int rehash(struct esd_keytab *kt, uint32_t bits)
{
	const size_t hsize = (size_t)1 << bits;
	if (kt->cap_hash < hsize) {
		uint32_t *h = realloc(kt->hash, hsize * sizeof(uint32_t));
		if (!h)
			return -ENOMEM;
		kt->hash = h;
		kt->cap_hash = hsize;
	}
	memset(kt->hash, 0, hsize * sizeof(uint32_t));
	const uint32_t mask = (uint32_t)hsize - 1;
	for (uint32_t u = 0; u < kt->count; u++) {
		uint32_t h = key_hash(kt->ukeys[u], bits);
		while (kt->hash[h])
			h = (h + 1) & mask;
		kt->hash[h] = u + 1;
	}
	kt->hbits = bits;
	return 0;
}

const uint64_t *esd_keytab_need_masks(const struct esd_keytab *kt)
{
	return kt ? kt->need : NULL;
}

int esd_keytab_replicate(struct esd_keytab *kt, const esd_key_t *keys, uint32_t count)
{
	if (!kt || (count && !keys) || !kt->n)
		return -EINVAL;
	int rc;
	if ((rc = esd_keytab_grow_keys(kt, (size_t)kt->count + count)))
		return rc;
	if (kt->cap_rep < (size_t)kt->nrep + count) {
		uint32_t *r = realloc(kt->rep, ((size_t)kt->nrep + count) * sizeof(uint32_t));
		if (!r)
			return -ENOMEM;
		kt->rep = r;
		kt->cap_rep = (size_t)kt->nrep + count;
	}
	uint32_t bits = kt->hbits;
	while (((uint64_t)1 << bits) < 2 * ((uint64_t)kt->count + count))
		bits++;
	if (bits != kt->hbits && (rc = rehash(kt, bits)))
		return rc;
	const uint32_t mask = (1u << kt->hbits) - 1;
	for (uint32_t i = 0; i < count; i++) {
		const esd_key_t key = keys[i];
		uint32_t h = key_hash(key, kt->hbits), u;
		for (;;) {
			uint32_t e = kt->hash[h];
			if (!e) {
				u = kt->count++;
				kt->ukeys[u] = key;
				kt->key_or |= key;
				kt->key_and &= key;
				kt->st[u] = (struct esd_keystate){0, 0, ESD_NO_WORKER, {0}};
				kt->hash[h] = u + 1;
				break;
			}
			if (kt->ukeys[e - 1] == key) {
				u = e - 1;
				break;
			}
			h = (h + 1) & mask;
		}
		kt->rep[kt->nrep++] = u; /* a duplicate is harmless: need[] is set twice */
	}
	kt->sorted_ok = 0;
	return 0;
}
