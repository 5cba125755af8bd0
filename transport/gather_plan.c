/*
 * SEND lists from frames in pieces: how the rdma backend cuts frames into
 * chunks of at most a slot and each chunk into scatter-gather entries,
 * without touching a device, so that the rules are tested on every host.
 *
 * A chunk holds bytes of one frame only. A piece at least min_in_place
 * bytes long that lies inside a region the device registered becomes an
 * entry of its own (sent in place); every other byte is copied into the
 * chunk's staging area, where consecutive copies share one entry. An entry
 * in place is added only while one more entry fits, so a copy always has
 * room; when the list is full the chunk ends before the next piece in
 * place and the next chunk starts with it.
 */
#include "link_internal.h"

#include <errno.h>
#include <string.h>

/* The cursor's bytes from here to the end of its piece (past empty
 * pieces), or NULL at the end. */
static const uint8_t *plan_at(struct plan_cursor *c, size_t *avail)
{
	while (c->i < c->n && c->off == c->iov[c->i].iov_len) {
		c->i++;
		c->off = 0;
	}
	if (c->i == c->n)
		return NULL;
	*avail = c->iov[c->i].iov_len - c->off;
	return (const uint8_t *)c->iov[c->i].iov_base + c->off;
}

/* The region key that covers [p, p + len), or 0 with *found false. */
static uint32_t region_key(const struct plan_rules *r, const uint8_t *p, size_t len, bool *found)
{
	for (unsigned i = 0; i < r->nreg; i++) {
		const uint8_t *b = r->reg[i].base;
		if (p >= b && len <= r->reg[i].len && (size_t)(p - b) <= r->reg[i].len - len) {
			*found = true;
			return r->reg[i].key;
		}
	}
	*found = false;
	return 0;
}

void esd_gather_plan_chunk(const struct plan_rules *r, struct plan_cursor *cur, uint8_t *stage,
                           size_t max, struct esd_gather_plan_chunk *c)
{
	size_t avail;
	const uint8_t *p;
	c->n = 0;
	c->len = c->staged = 0;
	c->in_place = 0;
	while (c->len < max && (p = plan_at(cur, &avail))) {
		size_t k = avail < max - c->len ? avail : max - c->len;
		bool ext = false;
		uint32_t key = k >= r->min_in_place ? region_key(r, p, k, &ext) : 0;
		if (ext && c->n + 2 > r->max_entries) {
			if (c->len)
				break; /* the list is full: the next chunk starts here */
			ext = false;
		}
		struct plan_entry *last = c->n ? &c->e[c->n - 1] : NULL;
		if (ext) {
			c->e[c->n++] = (struct plan_entry){
			    .addr = (uintptr_t)p, .len = (uint32_t)k, .key = key, .staged = false};
			c->in_place++;
		} else {
			uint8_t *to = stage + c->staged;
			memcpy(to, p, k);
			if (last && last->staged && last->addr + last->len == (uintptr_t)to)
				last->len += (uint32_t)k;
			else
				c->e[c->n++] = (struct plan_entry){.addr = (uintptr_t)to,
				                                   .len = (uint32_t)k,
				                                   .key = r->stage_key,
				                                   .staged = true};
			c->staged += k;
		}
		c->len += k;
		cur->off += k;
	}
}

int esd_gather_plan_send(const struct plan_rules *r, const struct iovec *iov, int n,
                         const struct plan_ops *ops, void *ctx, size_t *in_place)
{
	struct plan_cursor cur = {.iov = iov, .n = n};
	const uint8_t *p;
	size_t avail, remain = 0;
	int rc;
	*in_place = 0;
	for (int i = 0; i < n; i++)
		remain += iov[i].iov_len;
	while ((p = plan_at(&cur, &avail))) {
		struct esd_frame_hdr h;
		char why[128];
		if (esd_frame_hdr_parse(p, avail, NULL, &h, why, sizeof(why)) ||
		    ESD_FRAME_HDR_SIZE + (size_t)h.length > remain)
			return -EINVAL; /* before any of the frame is sent */
		remain -= ESD_FRAME_HDR_SIZE + (size_t)h.length;
		for (size_t left = ESD_FRAME_HDR_SIZE + (size_t)h.length; left;) {
			uint8_t *stage;
			struct esd_gather_plan_chunk c;
			if ((rc = ops->stage(ctx, &stage)))
				return rc;
			esd_gather_plan_chunk(r, &cur, stage, left < r->chunk_max ? left : r->chunk_max, &c);
			if ((rc = ops->emit(ctx, &c)))
				return rc;
			*in_place += c.in_place;
			left -= c.len;
		}
	}
	return 0;
}
