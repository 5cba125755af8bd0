/*
 * The node's part of a checkpoint on disk, for a whole-job resume: per
 * boundary, DIR/node<rank>-<iteration>.state (the dispatcher's state:
 * every worker's snapshot, versions, settings; struct node_state) and
 * DIR/node<rank>-<iteration>.cache (the real cache's metadata, the same
 * layout with one block: the snapshots do not track the rows' clocks), in
 * workers.checkpoint_dir (default: the node directory). Written as the
 * PS's checkpoints are: temporary file, fsync, rename, fsync of the
 * directory. The newest NODE_STATE_KEEP files of each kind are kept: the
 * dispatcher writes boundary c before its iteration trains, up to
 * ORDER_RING iterations ahead of the shards' checkpoint of c, so the
 * boundary the shards resume from is among them.
 *
 * Layout (little-endian, docs/runtime.md):
 *   header  magic "ESDNSTAT" u64, version u32, rank u32, workers u32,
 *           method u32, policy u32, reserved u32, token u64, iteration u64,
 *           alpha f64, versions u64, size model f64[3] (fixed rows, rows
 *           per sample, compute ns per sample: the split's, workers.split)
 *   per worker: batch u32, reserved u32, rate u64, block bytes u64
 *   per worker: the esd_cmeta block (its snapshot), padded to 8
 *   HET versions: keys u64[versions], clocks u64[versions]
 *   trailer xxh64 (seed 0) of everything before it
 */
#include "node.h"

#include <esd/err.h>
#include <esd/log.h>

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#define STATE_MAGIC   UINT64_C(0x5441545344534545) /* "EESDSTAT" */
#define STATE_VERSION 2u

struct state_hdr {
	uint64_t magic;
	uint32_t version, rank, workers, method, policy, reserved;
	uint64_t token, iter;
	double alpha;
	uint64_t nvers;
	double size_model[3];
};

struct state_worker {
	uint32_t batch, reserved;
	uint64_t rate, block_bytes;
};

void node_state_path(const struct node *nd, uint64_t iter, const char *kind, char *buf,
		     size_t len)
{
	const char *dir = nd->job.node_ckpt_dir[0] ? nd->job.node_ckpt_dir : nd->dir;
	snprintf(buf, len, "%s/node%u-%llu.%s", dir, nd->rank, (unsigned long long)iter, kind);
}

static size_t pad8(size_t n)
{
	return (n + 7) & ~(size_t)7;
}

/* The whole file in one buffer: header, workers, blocks, versions. */
static void *serialize(const struct node *nd, const struct node_state *st, size_t *len)
{
	size_t n = sizeof(struct state_hdr) + st->n * sizeof(struct state_worker);
	for (uint32_t w = 0; w < st->n; w++)
		n += pad8(esd_cmeta_block_bytes(st->cm[w]));
	n += st->nvers * 16 + 8;
	uint8_t *buf = calloc(1, n), *p = buf;
	if (!buf)
		return NULL;
	struct state_hdr h = {.magic = STATE_MAGIC, .version = STATE_VERSION, .rank = nd->rank,
			      .workers = st->n, .method = (uint32_t)st->method,
			      .policy = (uint32_t)st->policy, .token = nd->job.derived.token,
			      .iter = st->iter, .alpha = st->alpha, .nvers = st->nvers,
			      .size_model = {st->size_model[0], st->size_model[1],
					     st->size_model[2]}};
	memcpy(p, &h, sizeof(h));
	p += sizeof(h);
	for (uint32_t w = 0; w < st->n; w++, p += sizeof(struct state_worker)) {
		struct state_worker sw = {.batch = st->batch[w], .rate = st->rates[w],
					  .block_bytes = esd_cmeta_block_bytes(st->cm[w])};
		memcpy(p, &sw, sizeof(sw));
	}
	for (uint32_t w = 0; w < st->n; w++) {
		size_t b = esd_cmeta_block_bytes(st->cm[w]);
		memcpy(p, st->cm[w], b);
		p += pad8(b);
	}
	if (st->nvers) { /* HET only */
		memcpy(p, st->vkeys, st->nvers * 8);
		memcpy(p + st->nvers * 8, st->vvals, st->nvers * 8);
	}
	p += st->nvers * 16;
	uint64_t sum = XXH64(buf, (size_t)(p - buf), 0);
	memcpy(p, &sum, 8);
	*len = n;
	return buf;
}

static int write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;
	while (len) {
		ssize_t w = write(fd, p, len);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return esd_neg_errno();
		p += w;
		len -= (size_t)w;
	}
	return 0;
}

/* Remove this node's files of this kind older than the NODE_STATE_KEEP
 * newest. */
static void remove_old(const struct node *nd, const char *dir, const char *kind)
{
	uint64_t keep[NODE_STATE_KEEP] = {0}; /* the newest iterations, descending */
	char prefix[32];
	snprintf(prefix, sizeof(prefix), "node%u-", nd->rank);
	size_t pl = strlen(prefix);
	for (int pass = 0; pass < 2; pass++) {
		DIR *d = opendir(dir);
		if (!d)
			return;
		struct dirent *e;
		while ((e = readdir(d))) {
			unsigned long long it;
			char tail[16];
			if (strncmp(e->d_name, prefix, pl) ||
			    sscanf(e->d_name + pl, "%llu.%15s", &it, tail) != 2 || strcmp(tail, kind))
				continue;
			if (pass == 0) {
				for (int i = 0; i < NODE_STATE_KEEP; i++) {
					if (it > keep[i]) {
						memmove(keep + i + 1, keep + i,
							(NODE_STATE_KEEP - 1 - i) * sizeof(keep[0]));
						keep[i] = it;
						break;
					}
				}
			} else if (it < keep[NODE_STATE_KEEP - 1]) {
				unlinkat(dirfd(d), e->d_name, 0);
			}
		}
		closedir(d);
	}
}

int node_state_write(const struct node *nd, const struct node_state *st, const char *kind)
{
	char path[1100], tmp[1110];
	size_t len;
	node_state_path(nd, st->iter, kind, path, sizeof(path));
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	void *buf = serialize(nd, st, &len);
	if (!buf)
		return -ENOMEM;
	int rc = 0, fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		rc = esd_neg_errno();
	if (!rc)
		rc = write_all(fd, buf, len);
	if (!rc && fsync(fd))
		rc = esd_neg_errno();
	if (fd >= 0 && close(fd) && !rc)
		rc = esd_neg_errno();
	if (!rc && rename(tmp, path))
		rc = esd_neg_errno();
	free(buf);
	char dir[1100];
	snprintf(dir, sizeof(dir), "%s", path);
	*strrchr(dir, '/') = 0;
	if (!rc) {
		int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (dfd >= 0) {
			fsync(dfd);
			close(dfd);
		}
		remove_old(nd, dir, kind);
	} else {
		unlink(tmp);
		ESD_ERR("node", "cannot write the node's part of a checkpoint, %s: %s", path,
			esd_strerror(rc));
	}
	return rc;
}

/* Read the whole file; 0 or -errno. */
static int read_file(const char *path, uint8_t **out, size_t *len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return esd_neg_errno();
	off_t end = lseek(fd, 0, SEEK_END);
	uint8_t *buf = end > 0 ? malloc((size_t)end) : NULL;
	int rc = end <= 0 ? -EPROTO : buf ? 0 : -ENOMEM;
	for (size_t got = 0; !rc && got < (size_t)end;) {
		ssize_t r = pread(fd, buf + got, (size_t)end - got, (off_t)got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			rc = r < 0 ? esd_neg_errno() : -EPROTO;
		else
			got += (size_t)r;
	}
	close(fd);
	if (rc) {
		free(buf);
		return rc;
	}
	*out = buf;
	*len = (size_t)end;
	return 0;
}

/* Check the header against this node and job; the reason into why. */
static int check_header(const struct node *nd, const struct state_hdr *h, uint64_t iter,
			uint32_t nblocks, char *why, size_t wl)
{
	if (h->magic != STATE_MAGIC)
		snprintf(why, wl, "not a node state file (bad magic)");
	else if (h->version != STATE_VERSION)
		snprintf(why, wl, "version %u, this build reads %u", h->version, STATE_VERSION);
	else if (h->token != nd->job.derived.token)
		snprintf(why, wl, "written by another job (token %016llx, this job %016llx)",
			 (unsigned long long)h->token, (unsigned long long)nd->job.derived.token);
	else if (h->rank != nd->rank)
		snprintf(why, wl, "written by worker %u, this is worker %u", h->rank, nd->rank);
	else if (h->workers != nblocks)
		snprintf(why, wl, "%u blocks, expected %u", h->workers, nblocks);
	else if (h->iter != iter)
		snprintf(why, wl, "holds iteration %llu", (unsigned long long)h->iter);
	else
		return 0;
	return -EPROTO;
}

/* Copy the blocks and versions out of a checked buffer into st. */
static int take_blocks(const uint8_t *buf, size_t len, const struct state_hdr *h,
		       struct node_state *st, char *why, size_t wl)
{
	size_t off = sizeof(*h) + h->workers * sizeof(struct state_worker);
	for (uint32_t w = 0; w < h->workers; w++) {
		struct state_worker sw;
		memcpy(&sw, buf + sizeof(*h) + w * sizeof(sw), sizeof(sw));
		st->batch[w] = sw.batch;
		st->rates[w] = sw.rate;
		if (sw.block_bytes > len || off + pad8(sw.block_bytes) + 8 > len) {
			snprintf(why, wl, "worker %u's snapshot (%llu bytes at byte %zu) overruns the "
				 "file", w, (unsigned long long)sw.block_bytes, off);
			return -EPROTO;
		}
		void *m = NULL;
		if (posix_memalign(&m, 64, sw.block_bytes))
			return -ENOMEM;
		memcpy(m, buf + off, sw.block_bytes);
		st->cm[w] = m;
		st->cm_cap[w] = sw.block_bytes;
		struct esd_cmeta *cm;
		int rc = esd_cmeta_attach(m, sw.block_bytes, &cm);
		if (rc) {
			snprintf(why, wl, "worker %u's snapshot at byte %zu: %s", w, off,
				 esd_strerror(rc));
			return rc;
		}
		off += pad8(sw.block_bytes);
	}
	if (h->nvers > len / 16 || off + h->nvers * 16 + 8 != len) {
		snprintf(why, wl, "%llu versions at byte %zu do not end the file",
			 (unsigned long long)h->nvers, off);
		return -EPROTO;
	}
	st->vkeys = malloc(h->nvers * 8 + 8);
	st->vvals = malloc(h->nvers * 8 + 8);
	if (!st->vkeys || !st->vvals)
		return -ENOMEM;
	memcpy(st->vkeys, buf + off, h->nvers * 8);
	memcpy(st->vvals, buf + off + h->nvers * 8, h->nvers * 8);
	st->nvers = st->capvers = h->nvers;
	return 0;
}

int node_state_read(const struct node *nd, uint64_t iter, const char *kind, uint32_t nblocks,
		    struct node_state *st)
{
	char path[1100], why[200] = "";
	uint8_t *buf = NULL;
	size_t len = 0;
	struct state_hdr h;
	node_state_path(nd, iter, kind, path, sizeof(path));
	memset(st, 0, sizeof(*st));
	int rc = read_file(path, &buf, &len);
	if (rc) {
		ESD_ERR("node", "the shards resume at iteration %llu but this node's state of it, "
			"%s, cannot be read: %s", (unsigned long long)iter, path, esd_strerror(rc));
		return rc;
	}
	if (len < sizeof(h) + 8) {
		snprintf(why, sizeof(why), "truncated: %zu bytes", len);
		rc = -EPROTO;
	} else if (XXH64(buf, len - 8, 0) != *(const uint64_t *)(const void *)(buf + len - 8)) {
		snprintf(why, sizeof(why), "checksum mismatch over bytes [0, %zu)", len - 8);
		rc = -ESD_EBADSUM;
	}
	if (!rc) {
		memcpy(&h, buf, sizeof(h));
		rc = check_header(nd, &h, iter, nblocks, why, sizeof(why));
	}
	if (!rc && len < sizeof(h) + h.workers * sizeof(struct state_worker) + 8) {
		snprintf(why, sizeof(why), "truncated: %zu bytes", len);
		rc = -EPROTO;
	}
	if (!rc) {
		st->iter = h.iter;
		st->n = h.workers;
		st->method = (enum esd_method)h.method;
		st->policy = (enum esd_policy)h.policy;
		st->alpha = h.alpha;
		memcpy(st->size_model, h.size_model, sizeof(st->size_model));
		rc = take_blocks(buf, len, &h, st, why, sizeof(why));
	}
	free(buf);
	if (rc) {
		ESD_ERR("node", "refusing the node's part of checkpoint %llu, %s: %s",
			(unsigned long long)iter, path, why[0] ? why : esd_strerror(rc));
		node_state_free(st);
	}
	return rc;
}

bool node_state_is_ours(const struct node *nd, uint64_t iter, const char *kind)
{
	char path[1100];
	struct state_hdr h;
	node_state_path(nd, iter, kind, path, sizeof(path));
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	bool ours = pread(fd, &h, sizeof(h), 0) == (ssize_t)sizeof(h) && h.magic == STATE_MAGIC &&
		    h.token == nd->job.derived.token;
	close(fd);
	return ours;
}

void node_state_free(struct node_state *st)
{
	for (uint32_t w = 0; w < ESD_MAX_WORKERS; w++) {
		free(st->cm[w]);
		st->cm[w] = NULL;
		st->cm_cap[w] = 0;
	}
	free(st->vkeys);
	free(st->vvals);
	st->vkeys = NULL;
	st->vvals = NULL;
	st->nvers = st->capvers = 0;
}

void node_state_remove_temps(const struct node *nd)
{
	const char *dir = nd->job.node_ckpt_dir[0] ? nd->job.node_ckpt_dir : nd->dir;
	char prefix[32];
	snprintf(prefix, sizeof(prefix), "node%u-", nd->rank);
	DIR *d = opendir(dir);
	if (!d)
		return;
	struct dirent *e;
	int n = 0;
	while ((e = readdir(d))) {
		size_t l = strlen(e->d_name);
		if (!strncmp(e->d_name, prefix, strlen(prefix)) && l > 4 &&
		    !strcmp(e->d_name + l - 4, ".tmp") && !unlinkat(dirfd(d), e->d_name, 0))
			n++;
	}
	closedir(d);
	if (n)
		ESD_INFO("node", "removed %d unfinished checkpoint file(s) in %s", n, dir);
}
