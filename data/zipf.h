/*
 * zipf.h - a seeded PRNG (xoshiro256**) and a bounded Zipf sampler by
 * rejection-inversion (W. Hörmann, G. Derflinger, "Rejection-inversion to
 * generate variates from monotone discrete distributions", 1996): O(1)
 * memory and expected time per draw for any number of rows and any
 * exponent s > 0, so a 10M-row table costs no tables. Private to esd_data.
 */
#ifndef ESD_DATA_ZIPF_H
#define ESD_DATA_ZIPF_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include <esd/types.h>

struct rng {
	uint64_t s[4];
};

static inline void rng_seed(struct rng *r, uint64_t seed)
{
	for (int i = 0; i < 4; i++)
		r->s[i] = esd_splitmix64_next(&seed);
}

static inline uint64_t rotl64(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

static inline uint64_t rng_next(struct rng *r)
{
	uint64_t *s = r->s;
	uint64_t out = rotl64(s[1] * 5, 7) * 9;
	uint64_t t = s[1] << 17;
	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = rotl64(s[3], 45);
	return out;
}

/* Uniform in [0, 1). */
static inline double rng_unit(struct rng *r)
{
	return (double)(rng_next(r) >> 11) * 0x1.0p-53;
}

/*
 * Zipf(s) over ranks 1..n: P(k) proportional to k^-s. The head (the first
 * ZIPF_HEAD ranks) is drawn from an alias table (one random word per
 * draw); the tail, when the alias table picks it, by rejection-inversion
 * over ranks ZIPF_HEAD+1..n.
 */
#define ZIPF_HEAD 4096

struct zipf {
	double s;
	double n;
	double m;    /* first rank of the rejection-inversion range */
	double h_x1; /* H(m + 0.5) - h(m) */
	double h_n;  /* H(n + 0.5) */
	double sv;   /* squeeze bound (m = 1 only) */
	uint64_t rows;
	uint32_t nhead;  /* alias buckets: head ranks + 1 tail bucket (0: no alias) */
	uint32_t *thr;   /* alias: keep bucket i when the coin < thr[i] (of 2^32) */
	uint32_t *alias; /* alias: else take alias[i] */
};

/* Returns 0 or -ENOMEM. */
int esd_zipf_init(struct zipf *z, uint64_t rows, double s);
void esd_zipf_free(struct zipf *z);
/* A rank in 0..rows-1 (0 is the most popular). */
uint64_t esd_zipf_draw(const struct zipf *z, struct rng *r);

#endif /* ESD_DATA_ZIPF_H */
