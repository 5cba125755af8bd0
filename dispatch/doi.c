/*
 * The table profiler of Herald's adaptive LAIA (§4.3): counts how often
 * every key appears, and rates each table by its degree of infrequency
 * (DoI), the share of its keys that are infrequent. Tables with a high DoI
 * are where placing samples by cache content pays (their rows can stay on
 * one worker); the adaptive LAIA scores only the top tables to bound the
 * scoring time. A key is infrequent while it has appeared in fewer samples
 * than one worker has trained so far (samples seen / n), Herald's
 * definition with "the epoch" read as "so far".
 */
#include <esd/dispatch.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct doi_ent {
	uint64_t key;
	uint32_t count;
	uint32_t used;
};

struct esd_doi {
	uint32_t n;
	uint64_t samples;
	struct doi_ent *t;
	uint32_t bits;
	size_t size, used;
};

static inline uint32_t doi_hash(uint64_t key, uint32_t bits)
{
	return (uint32_t)((key * UINT64_C(0x9E3779B97F4A7C15)) >> (64 - bits));
}

int esd_doi_create(uint32_t n, struct esd_doi **out)
{
	if (!out || n == 0 || n > ESD_MAX_WORKERS)
		return -EINVAL;
	struct esd_doi *d = calloc(1, sizeof(*d));
	if (!d)
		return -ENOMEM;
	d->n = n;
	d->bits = 12;
	d->size = (size_t)1 << d->bits;
	d->t = calloc(d->size, sizeof(*d->t));
	if (!d->t) {
		free(d);
		return -ENOMEM;
	}
	*out = d;
	return 0;
}

void esd_doi_free(struct esd_doi *d)
{
	if (!d)
		return;
	free(d->t);
	free(d);
}

static struct doi_ent *slot_of(struct doi_ent *t, uint32_t bits, uint64_t key)
{
	const size_t mask = ((size_t)1 << bits) - 1;
	for (size_t h = doi_hash(key, bits);; h = (h + 1) & mask)
		if (!t[h].used || t[h].key == key)
			return &t[h];
}

static int grow(struct esd_doi *d)
{
	uint32_t bits = d->bits + 1;
	size_t size = (size_t)1 << bits;
	struct doi_ent *t = calloc(size, sizeof(*t));
	if (!t)
		return -ENOMEM;
	for (size_t i = 0; i < d->size; i++)
		if (d->t[i].used)
			*slot_of(t, bits, d->t[i].key) = d->t[i];
	free(d->t);
	d->t = t;
	d->bits = bits;
	d->size = size;
	return 0;
}

int esd_doi_add_batch(struct esd_doi *d, const struct esd_batch *b)
{
	if (!d || !b || (b->k && (!b->off || !b->keys)))
		return -EINVAL;
	const uint32_t nocc = b->k ? b->off[b->k] : 0;
	for (uint32_t p = 0; p < nocc; p++) {
		if ((d->used + 1) * 10 > d->size * 7 && grow(d))
			return -ENOMEM;
		struct doi_ent *e = slot_of(d->t, d->bits, b->keys[p]);
		if (!e->used) {
			e->used = 1;
			e->key = b->keys[p];
			d->used++;
		}
		if (e->count < UINT32_MAX)
			e->count++;
	}
	d->samples += b->k;
	return 0;
}

/* distinct[t] and infrequent[t] for every table (arrays of ESD_MAX_TABLES). */
static void tally(const struct esd_doi *d, uint32_t *distinct, uint32_t *infrequent)
{
	const uint64_t threshold = d->samples / d->n;
	for (size_t i = 0; i < d->size; i++) {
		const struct doi_ent *e = &d->t[i];
		if (!e->used)
			continue;
		uint32_t t = esd_key_table(e->key);
		distinct[t]++;
		infrequent[t] += e->count < threshold;
	}
}

double esd_doi_table(const struct esd_doi *d, uint32_t table)
{
	if (!d || table >= ESD_MAX_TABLES)
		return 0;
	const uint64_t threshold = d->samples / d->n;
	uint64_t dist = 0, inf = 0;
	for (size_t i = 0; i < d->size; i++) {
		const struct doi_ent *e = &d->t[i];
		if (e->used && esd_key_table(e->key) == table) {
			dist++;
			inf += e->count < threshold;
		}
	}
	return dist ? (double)inf / (double)dist : 0;
}

int esd_doi_top_tables(const struct esd_doi *d, uint32_t top, uint64_t *mask)
{
	if (!d || !mask)
		return -EINVAL;
	uint32_t *distinct = calloc(ESD_MAX_TABLES, sizeof(uint32_t));
	uint32_t *infrequent = calloc(ESD_MAX_TABLES, sizeof(uint32_t));
	if (!distinct || !infrequent) {
		free(distinct);
		free(infrequent);
		return -ENOMEM;
	}
	tally(d, distinct, infrequent);
	memset(mask, 0, ESD_TABLE_MASK_WORDS * sizeof(uint64_t));
	int set = 0;
	/* repeated selection of the best remaining table: top is small */
	for (uint32_t q = 0; q < top; q++) {
		int64_t best = -1;
		for (uint32_t t = 0; t < ESD_MAX_TABLES; t++) {
			if (!distinct[t] || ((mask[t / 64] >> (t % 64)) & 1))
				continue;
			/* compare infrequent/distinct exactly: a/b > c/d <=> ad > cb */
			if (best < 0 || (uint64_t)infrequent[t] * distinct[best] >
			                    (uint64_t)infrequent[best] * distinct[t])
				best = t;
		}
		if (best < 0)
			break;
		mask[best / 64] |= UINT64_C(1) << (best % 64);
		set++;
	}
	free(distinct);
	free(infrequent);
	return set;
}
