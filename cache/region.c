/*
 * region.c - the cache region's life: layout from a configuration,
 * creation in huge pages (memfd + MFD_HUGETLB, falling back to 4 KiB pages
 * with a warning), attaching to an fd received from the daemon with a full
 * header check, and teardown.
 *
 * The layout is a pure function of (rows, dim, optimizer, ntables), so an
 * attacher recomputes it from the header's configuration and refuses a
 * header whose offsets disagree, before it trusts a single offset. Areas
 * written by different processes start on 2 MiB boundaries, which lets a
 * trainer map the daemon's areas read-only even on huge pages.
 */
#include "region_impl.h"
#include "cmeta_impl.h"

#include <esd/err.h>
#include <esd/log.h>

#include <fcntl.h>
#include <linux/magic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#ifndef MFD_HUGE_2MB
#define MFD_HUGE_2MB (21u << 26)
#endif

static uint64_t align_up(uint64_t x, uint64_t a)
{
	return (x + a - 1) / a * a;
}

uint64_t esd_region_checksum(const struct region_hdr *h)
{
	const uint8_t *p = (const uint8_t *)h;
	uint64_t x = UINT64_C(0xcbf29ce484222325);

	for (size_t i = 0; i < offsetof(struct region_hdr, checksum); i++) {
		x ^= p[i];
		x *= UINT64_C(0x100000001b3);
	}
	return x;
}

int esd_region_layout(const struct esd_cache_config *cfg, struct region_hdr *h,
                      struct esd_cache_sizes *sz)
{
	if (!cfg)
		return -EINVAL;
	if (cfg->rows == 0 || cfg->rows > CM_MAX_CAP) {
		ESD_ERR("cache", "config: rows %u out of range 1..%u", cfg->rows, CM_MAX_CAP);
		return -EINVAL;
	}
	if (cfg->dim == 0 || cfg->dim > 65536) {
		ESD_ERR("cache", "config: dim %u out of range 1..65536", cfg->dim);
		return -EINVAL;
	}
	if ((unsigned)cfg->optimizer > ESD_OPT_ADAM) {
		ESD_ERR("cache", "config: unknown optimizer %u", (unsigned)cfg->optimizer);
		return -EINVAL;
	}
	if (cfg->ntables == 0 || cfg->ntables > ESD_MAX_TABLES) {
		ESD_ERR("cache", "config: ntables %u out of range 1..%u", cfg->ntables,
		        ESD_MAX_TABLES);
		return -EINVAL;
	}
	uint64_t rows = cfg->rows;
	uint32_t sf = esd_optimizer_state_floats(cfg->optimizer);
	struct region_hdr l = {0};

	l.magic = REGION_MAGIC;
	l.version = REGION_VERSION;
	l.hdr_bytes = sizeof(struct region_hdr);
	l.rows = cfg->rows;
	l.dim = cfg->dim;
	l.optimizer = cfg->optimizer;
	l.state_floats = sf;
	l.ntables = cfg->ntables;
	l.counters_off = 4096;
	uint64_t off =
	    l.counters_off + ((uint64_t)cfg->ntables + 1) * sizeof(struct region_counters);
	l.cmeta_off = off = align_up(off, 4096);
	l.cmeta_bytes = esd_cmeta_bytes(cfg->rows);
	off += l.cmeta_bytes;

	l.rows_off = align_up(off, REGION_ALIGN);
	l.vec_stride = align_up((uint64_t)cfg->dim * sizeof(float), 64);
	l.vec_off = l.rows_off;
	off = l.vec_off + rows * l.vec_stride;
	l.state_stride = sf ? align_up((uint64_t)cfg->dim * sf * sizeof(float), 64) : 0;
	l.state_off = sf ? align_up(off, 4096) : 0;
	if (sf)
		off = l.state_off + rows * l.state_stride;

	l.grads_off = align_up(off, REGION_ALIGN);
	l.grad_stride = l.vec_stride;
	l.grad_off = l.grads_off + 4096;
	off = l.grad_off + rows * l.grad_stride;
	l.total_bytes = align_up(off, REGION_HUGE);

	if (h)
		*h = l;
	if (sz) {
		sz->total = l.total_bytes;
		sz->meta = l.rows_off;
		sz->cmeta = l.cmeta_bytes;
		sz->rows = l.grads_off - l.rows_off;
		sz->grads = l.total_bytes - l.grads_off;
		sz->vec_stride = l.vec_stride;
		sz->state_stride = l.state_stride;
		sz->grad_stride = l.grad_stride;
	}
	return 0;
}

int esd_cache_size(const struct esd_cache_config *cfg, struct esd_cache_sizes *out)
{
	return esd_region_layout(cfg, NULL, out);
}

/* Fill the process-local view from a validated header. */
static void bind(struct esd_cache *c)
{
	const struct region_hdr *h = (const struct region_hdr *)c->base;

	c->hdr = h;
	c->daemon = (struct region_daemon *)(c->base + REGION_DAEMON_OFF);
	c->counters = (struct region_counters *)(c->base + h->counters_off);
	c->trainer = (struct region_trainer *)(c->base + h->grads_off);
	c->cm = (struct esd_cmeta *)(c->base + h->cmeta_off);
	c->rows = h->rows;
	c->dim = h->dim;
	c->ntables = h->ntables;
	c->state_floats = h->state_floats;
	c->vec_stride = h->vec_stride;
	c->state_stride = h->state_stride;
	c->grad_stride = h->grad_stride;
	c->vec = c->base + h->vec_off;
	c->state = h->state_floats ? c->base + h->state_off : NULL;
	c->grad = c->base + h->grad_off;
}

/* memfd of len bytes in huge pages, mapped; or -errno. */
static int map_memfd(const char *name, size_t len, bool huge, int *fd_out, void **map_out)
{
	int fd = memfd_create(name, MFD_CLOEXEC | (huge ? MFD_HUGETLB | MFD_HUGE_2MB : 0));
	if (fd < 0)
		return esd_neg_errno();
	if (ftruncate(fd, (off_t)len) < 0) {
		int rc = esd_neg_errno();
		close(fd);
		return rc;
	}
	/* hugetlbfs reserves every page here, so a shortage is -ENOMEM now,
	 * not SIGBUS at first touch. */
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		int rc = esd_neg_errno();
		close(fd);
		return rc;
	}
	*fd_out = fd;
	*map_out = p;
	return 0;
}

/* Long: the region's layout, mapping and initialisation in order, each undone on a later
 * failure by the same function's exits. */
int esd_cache_create(const struct esd_cache_config *cfg, struct esd_cache **out)
{
	struct region_hdr h;
	struct esd_cache_sizes sz;
	int rc;

	if (!out)
		return -EINVAL;
	rc = esd_region_layout(cfg, &h, &sz);
	if (rc)
		return rc;
	if ((unsigned)cfg->policy > ESD_POLICY_LOOKAHEAD || (unsigned)cfg->pages > 2) {
		ESD_ERR("cache", "config: unknown policy %u or page mode %u", (unsigned)cfg->policy,
		        (unsigned)cfg->pages);
		return -EINVAL;
	}
	struct esd_cache *c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	const char *name = cfg->name ? cfg->name : "esd-cache";
	ESD_INFO("cache",
	         "region: %llu bytes (%llu MiB = %llu huge pages): %u rows x %u floats, %s, "
	         "%u tables; metadata %llu, rows %llu, gradients %llu",
	         (unsigned long long)sz.total, (unsigned long long)(sz.total >> 20),
	         (unsigned long long)(sz.total / REGION_HUGE), cfg->rows, cfg->dim,
	         cfg->optimizer == ESD_OPT_ADAM      ? "adam"
	         : cfg->optimizer == ESD_OPT_ADAGRAD ? "adagrad"
	                                             : "sgd",
	         cfg->ntables, (unsigned long long)sz.meta, (unsigned long long)sz.rows,
	         (unsigned long long)sz.grads);

	void *p = NULL;
	c->fd = -1;
	rc = -ENOMEM;
	if (cfg->pages != ESD_CACHE_PAGES_SMALL) {
		rc = map_memfd(name, sz.total, true, &c->fd, &p);
		if (rc == 0) {
			c->page_size = REGION_HUGE;
			h.flags |= REGION_F_HUGETLB;
		} else if (cfg->pages == ESD_CACHE_PAGES_HUGE) {
			ESD_ERR("cache",
			        "huge pages required but unavailable (%s): reserve %llu in "
			        "/proc/sys/vm/nr_hugepages",
			        esd_strerror(rc), (unsigned long long)(sz.total / REGION_HUGE));
			goto free_cache;
		} else {
			ESD_WARN("cache",
			         "huge pages unavailable (%s; %llu needed in "
			         "/proc/sys/vm/nr_hugepages): using 4 KiB pages",
			         esd_strerror(rc), (unsigned long long)(sz.total / REGION_HUGE));
		}
	}
	if (rc) {
		rc = map_memfd(name, sz.total, false, &c->fd, &p);
		if (rc) {
			ESD_ERR("cache", "cannot map %llu bytes: %s", (unsigned long long)sz.total,
			        esd_strerror(rc));
			goto free_cache;
		}
		c->page_size = 4096;
	}
	c->base = p;
	c->len = sz.total;
	c->meta_rw = true;

	/* A fresh memfd reads as zeros: counters, rows and gradients start
	 * at zero without touching (and faulting in) every page. */
	h.total_bytes = sz.total;
	h.generation = cfg->generation;
	if (!h.generation) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		h.generation = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
	}
	struct esd_cmeta *cm;
	rc = esd_cmeta_init(c->base + h.cmeta_off, h.cmeta_bytes, cfg->rows, cfg->policy, &cm);
	if (rc)
		goto unmap;
	h.checksum = esd_region_checksum(&h);
	memcpy(c->base, &h, sizeof(h));
	bind(c);
	atomic_store_explicit(&c->daemon->daemon_pid, (uint64_t)getpid(), memory_order_relaxed);
	*out = c;
	return 0;

unmap:
	munmap(p, sz.total);
	close(c->fd);
free_cache:
	free(c);
	return rc;
}

#define BAD_FIELD(name, have, want)                                                                \
	do {                                                                                       \
		ESD_ERR("cache", "region fd %d: header field %s is %llu, expected %llu", fd, name, \
		        (unsigned long long)(have), (unsigned long long)(want));                   \
		return -EINVAL;                                                                    \
	} while (0)

/* Check a header copied out of the region (never the live one: a
 * concurrent writer cannot change it under the checks). */
static int check_header(int fd, const struct region_hdr *h, uint64_t file_size)
{
	if (h->magic != REGION_MAGIC) {
		ESD_ERR("cache", "region fd %d: header field magic is %#llx, expected %#llx", fd,
		        (unsigned long long)h->magic, (unsigned long long)REGION_MAGIC);
		return -ESD_EBADMAGIC;
	}
	if (h->version != REGION_VERSION) {
		ESD_ERR("cache", "region fd %d: header field version is %u, this build speaks %u",
		        fd, h->version, REGION_VERSION);
		return -ESD_EBADVERSION;
	}
	uint64_t sum = esd_region_checksum(h);
	if (h->checksum != sum) {
		ESD_ERR("cache",
		        "region fd %d: header field checksum is %#llx, header hashes to "
		        "%#llx (corrupt header)",
		        fd, (unsigned long long)h->checksum, (unsigned long long)sum);
		return -ESD_EBADSUM;
	}
	if (h->hdr_bytes != sizeof(*h))
		BAD_FIELD("hdr_bytes", h->hdr_bytes, sizeof(*h));
	if (h->total_bytes != file_size)
		BAD_FIELD("total_bytes (vs the fd's size)", h->total_bytes, file_size);

	struct esd_cache_config cfg = {
	    .rows = h->rows,
	    .dim = h->dim,
	    .optimizer = (enum esd_optimizer)h->optimizer,
	    .ntables = h->ntables,
	};
	struct region_hdr l;
	if (esd_region_layout(&cfg, &l, NULL)) {
		ESD_ERR("cache",
		        "region fd %d: header configuration invalid (rows %u, dim %u, "
		        "optimizer %u, ntables %u)",
		        fd, h->rows, h->dim, h->optimizer, h->ntables);
		return -EINVAL;
	}
#define SAME(f)                                                                                    \
	if (h->f != l.f)                                                                           \
	BAD_FIELD(#f, h->f, l.f)
	SAME(state_floats);
	SAME(counters_off);
	SAME(cmeta_off);
	SAME(cmeta_bytes);
	SAME(rows_off);
	SAME(vec_off);
	SAME(vec_stride);
	SAME(state_off);
	SAME(state_stride);
	SAME(grads_off);
	SAME(grad_off);
	SAME(grad_stride);
	SAME(total_bytes);
#undef SAME
	if (h->flags & ~REGION_F_HUGETLB)
		BAD_FIELD("flags", h->flags, h->flags & REGION_F_HUGETLB);
	return 0;
}

int esd_cache_attach_fd(int fd, unsigned flags, struct esd_cache **out)
{
	struct stat st;
	struct statfs sfs;
	struct region_hdr h;
	int rc;

	if (!out || (flags & ~ESD_CACHE_ATTACH_RW))
		return -EINVAL;
	if (fd < 0 || fstat(fd, &st) < 0 || fstatfs(fd, &sfs) < 0)
		return -EBADF;
	if ((uint64_t)st.st_size < REGION_ALIGN) {
		ESD_ERR("cache", "region fd %d: %lld bytes, too small for a cache region", fd,
		        (long long)st.st_size);
		return -EINVAL;
	}
	struct esd_cache *c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	if (c->fd < 0) {
		rc = esd_neg_errno();
		goto free_cache;
	}
	c->len = (size_t)st.st_size;
	c->page_size = (unsigned long)sfs.f_type == HUGETLBFS_MAGIC ? (size_t)sfs.f_bsize : 4096;
	c->meta_rw = flags & ESD_CACHE_ATTACH_RW;
	int prot = PROT_READ | (c->meta_rw ? PROT_WRITE : 0);
	c->base = mmap(NULL, c->len, prot, MAP_SHARED, c->fd, 0);
	if (c->base == MAP_FAILED) {
		rc = esd_neg_errno();
		goto close_fd;
	}
	memcpy(&h, c->base, sizeof(h));
	rc = check_header(fd, &h, (uint64_t)st.st_size);
	if (rc)
		goto unmap;
	if (!c->meta_rw &&
	    mprotect(c->base + h.grads_off, c->len - h.grads_off, PROT_READ | PROT_WRITE) < 0) {
		rc = esd_neg_errno();
		goto unmap;
	}
	struct esd_cmeta *cm;
	rc = esd_cmeta_attach(c->base + h.cmeta_off, h.cmeta_bytes, &cm);
	if (rc) {
		ESD_ERR("cache", "region fd %d: metadata block refused (%s)", fd, esd_strerror(rc));
		goto unmap;
	}
	if (esd_cmeta_capacity(cm) != h.rows) {
		ESD_ERR("cache", "region fd %d: metadata capacity %u, header rows %u", fd,
		        esd_cmeta_capacity(cm), h.rows);
		rc = -EINVAL;
		goto unmap;
	}
	bind(c);
	*out = c;
	return 0;

unmap:
	munmap(c->base, c->len);
close_fd:
	close(c->fd);
free_cache:
	free(c);
	return rc;
}

void esd_cache_close(struct esd_cache *c)
{
	if (!c)
		return;
	munmap(c->base, c->len);
	close(c->fd);
	free(c);
}

int esd_cache_fd(const struct esd_cache *c)
{
	return c ? c->fd : -1;
}

void esd_cache_get_info(const struct esd_cache *c, struct esd_cache_info *out)
{
	*out = (struct esd_cache_info){
	    .rows = c->rows,
	    .dim = c->dim,
	    .ntables = c->ntables,
	    .optimizer = (enum esd_optimizer)c->hdr->optimizer,
	    .generation = c->hdr->generation,
	    .bytes = c->len,
	    .page_size = c->page_size,
	    .meta_writable = c->meta_rw,
	};
}
