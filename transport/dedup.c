/*
 * Exactly-once filter for pushes (esd/dedup.h): per worker, the current
 * iteration and a growable bitmap of the push sequences seen in it. A
 * re-sent push (after a reconnect) is recognised and acknowledged without
 * being applied a second time.
 */
#include <esd/dedup.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct worker_seen {
	uint64_t iteration;
	int started;
	uint64_t *bits;
	uint32_t nwords;
	int64_t count;
};

struct esd_dedup {
	uint32_t nworkers;
	struct worker_seen w[];
};

int esd_dedup_create(uint32_t nworkers, struct esd_dedup **out)
{
	if (!nworkers || nworkers > (1u << 20))
		return -EINVAL;
	struct esd_dedup *d = calloc(1, sizeof(*d) + nworkers * sizeof(d->w[0]));
	if (!d)
		return -ENOMEM;
	d->nworkers = nworkers;
	*out = d;
	return 0;
}

void esd_dedup_destroy(struct esd_dedup *d)
{
	if (!d)
		return;
	for (uint32_t i = 0; i < d->nworkers; i++)
		free(d->w[i].bits);
	free(d);
}

void esd_dedup_reset(struct esd_dedup *d)
{
	for (uint32_t i = 0; i < d->nworkers; i++) {
		free(d->w[i].bits);
		memset(&d->w[i], 0, sizeof(d->w[i]));
	}
}

int esd_dedup_check(struct esd_dedup *d, uint32_t worker, uint64_t iteration, uint64_t sequence)
{
	if (!d || worker >= d->nworkers)
		return -EINVAL;
	if (sequence >= ESD_DEDUP_MAX_SEQ)
		return -ERANGE;
	struct worker_seen *w = &d->w[worker];
	if (w->started && iteration < w->iteration)
		return 0;
	if (!w->started || iteration > w->iteration) {
		w->started = 1;
		w->iteration = iteration;
		w->count = 0;
		if (w->bits)
			memset(w->bits, 0, w->nwords * sizeof(uint64_t));
	}
	uint32_t word = (uint32_t)(sequence / 64);
	if (word >= w->nwords) {
		uint32_t n = w->nwords ? w->nwords : 4;
		while (n <= word)
			n *= 2;
		uint64_t *b = realloc(w->bits, n * sizeof(uint64_t));
		if (!b)
			return -ENOMEM;
		memset(b + w->nwords, 0, (n - w->nwords) * sizeof(uint64_t));
		w->bits = b;
		w->nwords = n;
	}
	uint64_t bit = 1ull << (sequence % 64);
	if (w->bits[word] & bit)
		return 0;
	w->bits[word] |= bit;
	w->count++;
	return 1;
}

int64_t esd_dedup_count(const struct esd_dedup *d, uint32_t worker, uint64_t iteration)
{
	if (!d || worker >= d->nworkers)
		return -EINVAL;
	const struct worker_seen *w = &d->w[worker];
	return w->started && w->iteration == iteration ? w->count : 0;
}
