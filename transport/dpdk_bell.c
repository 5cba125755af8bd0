/*
 * Doorbells for memif links: an idle receiver sleeps until its peer sends,
 * instead of polling.
 *
 * memif is shared memory between two processes of one host, and DPDK 22.11's
 * memif PMD has no rx interrupt (its receiver masks its own ring's
 * notifications at connect). Polling is right with a core to spare per link;
 * on a host where every core is shared (a node's daemon, its trainers and a
 * shard on a few cores) each idle link's poll or timed sleep takes time
 * from the busy ones. So the listener of a memif address publishes a small
 * shared region, one slot per link id, each with a futex word per side:
 *
 *   receiver, idle:  s = seq; waiting = 1; fence; poll the ring once more;
 *                    futex_wait(&seq, s, timeout); waiting = 0
 *   sender, after a burst is in the ring:
 *                    fence; if (exchange(waiting, 0)) { seq++; futex_wake(&seq) }
 *
 * A packet put in the ring after the receiver's last poll finds waiting set
 * (the fences order the ring's head against the flag), so no wakeup is lost;
 * the timeout bounds the sleep anyway (link checks, timers). The exchange
 * makes one ring per sleep: the first burst of a frame wakes the receiver,
 * the others cost one atomic each.
 *
 * The region is POSIX shared memory named after the memif socket address
 * (/dev/shm/esd-bell-...), made anew by the listener (so a slot's state
 * never outlives its server) and unlinked when the listener closes; each
 * link maps it on its own and keeps the mapping to its end. A listener
 * that was killed cannot unlink its region: each publish sweeps the regions
 * whose owner process is gone. A client that finds no region, or one of
 * another layout, polls as before.
 */
#include "dpdk_internal.h"

#include <esd/log.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define BELL_MAGIC   0x4c4c454244534555ull /* "UESDBELL" */
#define BELL_VERSION 1u

struct bell_hdr {
	uint64_t magic;
	uint32_t version;
	uint32_t nslots;
	int32_t owner; /* the listener's pid: a region whose owner is gone is swept */
	uint8_t pad[44];
};

/* One side's bell: the side that sleeps on it sets waiting; its peer
 * clears waiting and moves seq to wake it. */
struct bell_side {
	_Atomic uint32_t seq;
	_Atomic uint32_t waiting;
	uint8_t pad[56];
};

struct bell_slot {
	struct bell_side side[2]; /* [0] the listener's link, [1] the client's */
};

_Static_assert(sizeof(struct bell_hdr) == 64, "bell header: one cache line");
_Static_assert(sizeof(struct bell_side) == 64, "bell side: one cache line");

struct dpdk_bell {
	void *map;
	size_t maplen;
	struct bell_side *mine, *peer;
	uint32_t armed_seq;
	bool armed;
};

static void bell_name(const char *addr, char *buf, size_t len)
{
	int n = snprintf(buf, len, "/esd-bell-");
	for (const char *p = addr; *p && (size_t)n + 1 < len; p++)
		buf[n++] = (*p == '/' || *p == '@') ? '_' : *p;
	buf[n < (int)len ? n : (int)len - 1] = '\0';
}

static size_t region_len(uint32_t nslots)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	size_t len = sizeof(struct bell_hdr) + (size_t)nslots * sizeof(struct bell_slot);
	return (len + page - 1) / page * page;
}

/* Unlink the regions of listeners that are gone (killed before they
 * could unlink their own). */
static void sweep_dead(void)
{
	DIR *dir = opendir("/dev/shm");
	if (!dir)
		return;
	struct dirent *e;
	while ((e = readdir(dir))) {
		char name[NAME_MAX + 2];
		if (strncmp(e->d_name, "esd-bell-", 9))
			continue;
		snprintf(name, sizeof(name), "/%s", e->d_name);
		int fd = shm_open(name, O_RDONLY, 0);
		if (fd < 0)
			continue;
		struct bell_hdr h;
		ssize_t n = pread(fd, &h, sizeof(h), 0);
		close(fd);
		if (n == (ssize_t)sizeof(h) && h.magic == BELL_MAGIC && h.owner > 0 &&
		    kill(h.owner, 0) && errno == ESRCH)
			shm_unlink(name);
	}
	closedir(dir);
}

int esd_dpdk_bell_publish(const char *addr, uint32_t nslots)
{
	char name[NAME_MAX];
	bell_name(addr, name, sizeof(name));
	sweep_dead();
	shm_unlink(name); /* a slot's state never outlives its server */
	int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
	if (fd < 0)
		return -errno;
	size_t len = region_len(nslots);
	void *m = MAP_FAILED;
	int rc = ftruncate(fd, (off_t)len) ? -errno : 0;
	if (!rc && (m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED)
		rc = -errno;
	close(fd);
	if (rc) {
		shm_unlink(name);
		return rc;
	}
	struct bell_hdr *h = m;
	h->nslots = nslots;
	h->version = BELL_VERSION;
	h->owner = (int32_t)getpid();
	atomic_store_explicit((_Atomic uint64_t *)&h->magic, BELL_MAGIC, memory_order_release);
	munmap(m, len);
	return 0;
}

void esd_dpdk_bell_unpublish(const char *addr)
{
	char name[NAME_MAX];
	bell_name(addr, name, sizeof(name));
	shm_unlink(name);
}

int esd_dpdk_bell_open(const char *addr, uint32_t id, bool server, struct dpdk_bell **out)
{
	char name[NAME_MAX];
	struct stat st;
	*out = NULL;
	bell_name(addr, name, sizeof(name));
	int fd = shm_open(name, O_RDWR, 0);
	if (fd < 0)
		return -errno;
	void *m = MAP_FAILED;
	int rc = fstat(fd, &st) ? -errno : 0;
	if (!rc && (size_t)st.st_size < sizeof(struct bell_hdr))
		rc = -EPROTO;
	if (!rc && (m = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
	                     0)) == MAP_FAILED)
		rc = -errno;
	close(fd);
	if (rc)
		return rc;
	struct bell_hdr *h = m;
	if (atomic_load_explicit((_Atomic uint64_t *)&h->magic, memory_order_acquire) !=
	        BELL_MAGIC ||
	    h->version != BELL_VERSION || id >= h->nslots ||
	    (size_t)st.st_size < region_len(h->nslots)) {
		munmap(m, (size_t)st.st_size);
		return -EPROTO;
	}
	struct dpdk_bell *b = calloc(1, sizeof(*b));
	if (!b) {
		munmap(m, (size_t)st.st_size);
		return -ENOMEM;
	}
	struct bell_slot *s = (struct bell_slot *)((uint8_t *)m + sizeof(*h)) + id;
	b->map = m;
	b->maplen = (size_t)st.st_size;
	b->mine = &s->side[server ? 0 : 1];
	b->peer = &s->side[server ? 1 : 0];
	atomic_store(&b->mine->waiting, 0);
	*out = b;
	return 0;
}

void esd_dpdk_bell_close(struct dpdk_bell *b)
{
	if (!b)
		return;
	atomic_store(&b->mine->waiting, 0);
	munmap(b->map, b->maplen);
	free(b);
}

void esd_dpdk_bell_arm(struct dpdk_bell *b)
{
	if (b->armed)
		return;
	b->armed_seq = atomic_load(&b->mine->seq);
	atomic_store(&b->mine->waiting, 1);
	/* the caller's next poll reads the ring after this store */
	atomic_thread_fence(memory_order_seq_cst);
	b->armed = true;
}

bool esd_dpdk_bell_armed(const struct dpdk_bell *b)
{
	return b->armed;
}

void esd_dpdk_bell_disarm(struct dpdk_bell *b)
{
	if (!b->armed)
		return;
	atomic_store_explicit(&b->mine->waiting, 0, memory_order_relaxed);
	b->armed = false;
}

/* The wait and wake under the doorbells: a sleeper reads *seq, sets
 * *waiting, looks for work once more and waits until *seq moves (or
 * timeout_ns); whoever made work for it calls dpdk_wake(), which clears
 * *waiting and moves *seq if it was set. shared: the words are in memory
 * shared between processes. */
static void dpdk_futex_wait(_Atomic uint32_t *seq, uint32_t seen, int64_t timeout_ns,
                            bool shared)
{
	struct timespec ts = {.tv_sec = timeout_ns / 1000000000,
	                      .tv_nsec = timeout_ns % 1000000000};
	/* EAGAIN: woken already; EINTR, ETIMEDOUT: look again either way */
	syscall(SYS_futex, seq, shared ? FUTEX_WAIT : FUTEX_WAIT_PRIVATE, seen, &ts, NULL, 0);
}

static void dpdk_wake(_Atomic uint32_t *waiting, _Atomic uint32_t *seq, bool shared)
{
	/* the work (a ring's new head) is visible before waiting is read */
	atomic_thread_fence(memory_order_seq_cst);
	if (!atomic_load_explicit(waiting, memory_order_relaxed) || !atomic_exchange(waiting, 0))
		return;
	atomic_fetch_add(seq, 1);
	syscall(SYS_futex, seq, shared ? FUTEX_WAKE : FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

void esd_dpdk_bell_wait(struct dpdk_bell *b, int64_t timeout_ns)
{
	if (!b->armed)
		esd_dpdk_bell_arm(b);
	dpdk_futex_wait(&b->mine->seq, b->armed_seq, timeout_ns, true);
	esd_dpdk_bell_disarm(b);
}

void esd_dpdk_bell_ring(struct dpdk_bell *b)
{
	dpdk_wake(&b->peer->waiting, &b->peer->seq, true);
}
