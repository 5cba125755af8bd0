/*
 * rows.c - using a mapped cache region: row accessors, batched gather and
 * scatter, the iteration protocol between the daemon and its trainer
 * (metadata seqlock, publish, gradient commit) and the per-table
 * counters.
 *
 * Memory ordering (docs/shm-layout.md has the full protocol): every word
 * two processes share is a C11 atomic. The daemon publishes an iteration
 * with a release store after it has written the rows and metadata; the
 * trainer's acquire load of that word makes them visible. The trainer
 * commits its gradients the same way, so a gradient is never used unless
 * the whole iteration's gradients were written before the commit.
 */
#include "region_impl.h"
#include "cmeta_impl.h"

#include <esd/clock.h>
#include <esd/err.h>

#include <sched.h>
#include <string.h>
#include <unistd.h>

float *esd_cache_vec(const struct esd_cache *c, uint32_t slot)
{
	if (!c || slot >= c->rows)
		return NULL;
	return (float *)(c->vec + (uint64_t)slot * c->vec_stride);
}

float *esd_cache_state(const struct esd_cache *c, uint32_t slot)
{
	if (!c || slot >= c->rows || !c->state)
		return NULL;
	return (float *)(c->state + (uint64_t)slot * c->state_stride);
}

void *esd_cache_map(const struct esd_cache *c, size_t *len)
{
	*len = c->len;
	return c->base;
}

float *esd_cache_grad(const struct esd_cache *c, uint32_t slot)
{
	if (!c || slot >= c->rows)
		return NULL;
	return (float *)(c->grad + (uint64_t)slot * c->grad_stride);
}

struct esd_cmeta *esd_cache_meta(struct esd_cache *c)
{
	return c && c->meta_rw ? c->cm : NULL;
}

const struct esd_cmeta *esd_cache_meta_ro(const struct esd_cache *c)
{
	return c ? c->cm : NULL;
}

size_t esd_cache_row_bytes(const struct esd_cache *c, unsigned parts)
{
	size_t v = (size_t)c->dim * sizeof(float);
	return ((parts & ESD_CACHE_VEC) ? v : 0) +
	       ((parts & ESD_CACHE_STATE) ? v * c->state_floats : 0) +
	       ((parts & ESD_CACHE_GRAD) ? v : 0);
}

static int check_slots(const struct esd_cache *c, const uint32_t *slots, size_t n, unsigned parts)
{
	if (!c || (n && !slots) || !parts || (parts & ~7u))
		return -EINVAL;
	for (size_t i = 0; i < n; i++)
		if (slots[i] >= c->rows)
			return -EINVAL;
	return 0;
}

/* How far ahead gather/scatter prefetch: about 4 KiB of rows in flight
 * (8 rows of 64 floats, 2 of 512). Of a long row only the first 512 bytes
 * are prefetched: the hardware's stream prefetcher follows the rest. */
static size_t ahead_rows(size_t row_bytes)
{
	size_t a = 4096 / (row_bytes ? row_bytes : 1);
	return a < 2 ? 2 : a > 16 ? 16 : a;
}

static void prefetch_row(const uint8_t *p, size_t bytes, int rw)
{
	if (bytes > 512)
		bytes = 512;
	for (size_t o = 0; o < bytes; o += 64) {
		if (rw)
			__builtin_prefetch(p + o, 1);
		else
			__builtin_prefetch(p + o, 0);
	}
}

int esd_cache_gather(const struct esd_cache *c, const uint32_t *slots, size_t n, unsigned parts,
                     void *dst)
{
	int rc = check_slots(c, slots, n, parts);
	if (rc)
		return rc;
	if (n && !dst)
		return -EINVAL;
	const size_t v = (size_t)c->dim * sizeof(float), s = v * c->state_floats;
	const size_t ahead = ahead_rows(esd_cache_row_bytes(c, parts));
	uint8_t *out = dst;

	for (size_t i = 0; i < n; i++) {
		if (i + ahead < n) {
			uint64_t a = slots[i + ahead];
			if (parts & ESD_CACHE_VEC)
				prefetch_row(c->vec + a * c->vec_stride, v, 0);
			if ((parts & ESD_CACHE_STATE) && s)
				prefetch_row(c->state + a * c->state_stride, s, 0);
			if (parts & ESD_CACHE_GRAD)
				prefetch_row(c->grad + a * c->grad_stride, v, 0);
		}
		uint64_t slot = slots[i];
		if (parts & ESD_CACHE_VEC) {
			memcpy(out, c->vec + slot * c->vec_stride, v);
			out += v;
		}
		if ((parts & ESD_CACHE_STATE) && s) {
			memcpy(out, c->state + slot * c->state_stride, s);
			out += s;
		}
		if (parts & ESD_CACHE_GRAD) {
			memcpy(out, c->grad + slot * c->grad_stride, v);
			out += v;
		}
	}
	return 0;
}

int esd_cache_scatter(struct esd_cache *c, const uint32_t *slots, size_t n, unsigned parts,
                      const void *src)
{
	int rc = check_slots(c, slots, n, parts);
	if (rc)
		return rc;
	if (n && !src)
		return -EINVAL;
	if (!c->meta_rw && (parts & (ESD_CACHE_VEC | ESD_CACHE_STATE)))
		return -EPERM;
	const size_t v = (size_t)c->dim * sizeof(float), s = v * c->state_floats;
	const size_t ahead = ahead_rows(esd_cache_row_bytes(c, parts));
	const uint8_t *in = src;

	for (size_t i = 0; i < n; i++) {
		if (i + ahead < n) {
			uint64_t a = slots[i + ahead];
			if (parts & ESD_CACHE_VEC)
				prefetch_row(c->vec + a * c->vec_stride, v, 1);
			if (parts & ESD_CACHE_GRAD)
				prefetch_row(c->grad + a * c->grad_stride, v, 1);
		}
		uint64_t slot = slots[i];
		if (parts & ESD_CACHE_VEC) {
			memcpy(c->vec + slot * c->vec_stride, in, v);
			in += v;
		}
		if ((parts & ESD_CACHE_STATE) && s) {
			memcpy(c->state + slot * c->state_stride, in, s);
			in += s;
		}
		if (parts & ESD_CACHE_GRAD) {
			memcpy(c->grad + slot * c->grad_stride, in, v);
			in += v;
		}
	}
	return 0;
}

/* ---- metadata seqlock ------------------------------------------------------- */

void esd_cache_meta_write_begin(struct esd_cache *c)
{
	uint64_t s = atomic_load_explicit(&c->daemon->meta_seq, memory_order_relaxed);
	atomic_store_explicit(&c->daemon->meta_seq, s + 1, memory_order_relaxed);
	/* The odd value is visible before any metadata store. */
	atomic_thread_fence(memory_order_release);
}

void esd_cache_meta_write_end(struct esd_cache *c)
{
	uint64_t s = atomic_load_explicit(&c->daemon->meta_seq, memory_order_relaxed);
	atomic_store_explicit(&c->daemon->meta_seq, s + 1, memory_order_release);
}

uint64_t esd_cache_meta_read_begin(const struct esd_cache *c)
{
	struct region_daemon *d = c->daemon;
	uint64_t s;

	while ((s = atomic_load_explicit(&d->meta_seq, memory_order_acquire)) & 1)
		sched_yield();
	return s;
}

bool esd_cache_meta_read_retry(const struct esd_cache *c, uint64_t seq)
{
	/* Order the reader's metadata loads before the second look. */
	atomic_thread_fence(memory_order_acquire);
	return atomic_load_explicit(&c->daemon->meta_seq, memory_order_relaxed) != seq;
}

/* ---- iteration ---------------------------------------------------------------- */

static struct region_counters *table_row(struct esd_cache *c, esd_key_t key)
{
	uint32_t t = esd_key_table(key);
	return &c->counters[t < c->ntables ? t : c->ntables];
}

static void bump(_Atomic uint64_t *p, uint64_t by)
{
	/* Single writer: a relaxed load + store is enough and no locked op. */
	atomic_store_explicit(p, atomic_load_explicit(p, memory_order_relaxed) + by,
	                      memory_order_relaxed);
}

int esd_cache_begin_iter(struct esd_cache *c, uint64_t iter, const esd_key_t *keys, size_t n,
                         struct esd_cmeta_fill *fill)
{
	if (!c || !fill)
		return -EINVAL;
	if (!c->meta_rw)
		return -EPERM;
	esd_cache_meta_write_begin(c);
	int rc = esd_cmeta_begin_iter(c->cm, iter, keys, n, fill);
	esd_cache_meta_write_end(c);
	if (rc)
		return rc;

	/* Hits per table = needed - misses; keys and pulls are both sorted,
	 * so one merge walk attributes each needed key. */
	size_t p = 0;
	for (size_t i = 0; i < n; i++) {
		struct region_counters *r = table_row(c, keys[i]);
		if (p < fill->n_pulls && fill->pulls[p].key == keys[i]) {
			bump(fill->pulls[p].outdated ? &r->miss_outdated : &r->miss_absent, 1);
			p++;
		} else {
			bump(&r->hits, 1);
		}
	}
	for (size_t i = 0; i < fill->n_evicts; i++) {
		struct region_counters *r = table_row(c, fill->evicts[i].key);
		bump(fill->evicts[i].dirty ? &r->evict_dirty : &r->evict_clean, 1);
	}
	return 0;
}

void esd_cache_publish(struct esd_cache *c, uint64_t iter)
{
	atomic_store_explicit(&c->daemon->published_iter, iter, memory_order_release);
}

uint64_t esd_cache_published(const struct esd_cache *c)
{
	return atomic_load_explicit(&c->daemon->published_iter, memory_order_acquire);
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ volatile("yield" ::: "memory");
#endif
}

int esd_cache_wait_published(const struct esd_cache *c, uint64_t iter, int64_t timeout_ns)
{
	int64_t deadline = timeout_ns < 0 ? INT64_MAX : esd_now_ns() + timeout_ns;
	unsigned spins = 0;

	while (esd_cache_published(c) < iter) {
		if (esd_now_ns() >= deadline)
			return -ETIMEDOUT;
		/* spin briefly (the daemon is usually microseconds away), then
		 * back off so a waiting trainer does not steal the core */
		if (++spins < 1000)
			cpu_relax();
		else if (spins < 2000)
			sched_yield();
		else
			esd_sleep_ns(50 * ESD_NS_PER_US);
	}
	return 0;
}

void esd_cache_trainer_hello(struct esd_cache *c)
{
	atomic_store_explicit(&c->trainer->trainer_pid, (uint64_t)getpid(), memory_order_release);
}

pid_t esd_cache_trainer_pid(const struct esd_cache *c)
{
	return (pid_t)atomic_load_explicit(&c->trainer->trainer_pid, memory_order_acquire);
}

void esd_cache_grad_commit(struct esd_cache *c, uint64_t iter)
{
	atomic_store_explicit(&c->trainer->grad_iter, iter, memory_order_release);
}

uint64_t esd_cache_grad_committed(const struct esd_cache *c)
{
	return atomic_load_explicit(&c->trainer->grad_iter, memory_order_acquire);
}

int esd_cache_grad_zero(struct esd_cache *c, const uint32_t *slots, size_t n)
{
	int rc = check_slots(c, slots, n, ESD_CACHE_GRAD);
	if (rc)
		return rc;
	for (size_t i = 0; i < n; i++)
		memset(c->grad + (uint64_t)slots[i] * c->grad_stride, 0,
		       (size_t)c->dim * sizeof(float));
	return 0;
}

int esd_cache_counters(const struct esd_cache *c, uint32_t table, struct esd_cache_counters *out)
{
	if (!c || !out || table > c->ntables)
		return -EINVAL;
	const struct region_counters *r = &c->counters[table];
	out->hits = atomic_load_explicit(&r->hits, memory_order_relaxed);
	out->miss_absent = atomic_load_explicit(&r->miss_absent, memory_order_relaxed);
	out->miss_outdated = atomic_load_explicit(&r->miss_outdated, memory_order_relaxed);
	out->evict_clean = atomic_load_explicit(&r->evict_clean, memory_order_relaxed);
	out->evict_dirty = atomic_load_explicit(&r->evict_dirty, memory_order_relaxed);
	return 0;
}

void esd_cache_counters_total(const struct esd_cache *c, struct esd_cache_counters *out)
{
	struct esd_cache_counters t;

	memset(out, 0, sizeof(*out));
	for (uint32_t i = 0; i <= c->ntables; i++) {
		esd_cache_counters(c, i, &t);
		out->hits += t.hits;
		out->miss_absent += t.miss_absent;
		out->miss_outdated += t.miss_outdated;
		out->evict_clean += t.evict_clean;
		out->evict_dirty += t.evict_dirty;
	}
}
