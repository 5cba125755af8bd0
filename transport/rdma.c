/*
 * The rdma backend: libibverbs reliable-connected queue pairs.
 *
 * Opening a link first looks for an RDMA device; on hosts without one
 * (every test host of this project) connect and listen fail at once with
 * -ENODEV and the log line "no RDMA device: ...", which
 * tests/transport/test_rdma_nodev.c checks.
 *
 * With a device: a TCP connection to addr bootstraps the link (the two
 * sides swap QP number, PSN, LID and GID, then keep the socket open to
 * notice a peer that dies). Each link owns a protection domain, one
 * completion queue, an RC queue pair and one registered region, in 2 MiB
 * huge pages when the host has them (4 KiB pages otherwise, logged), cut
 * into SLOTS send slots and SLOTS receive slots of SLOT_SIZE bytes. A frame
 * goes as one or more SENDs, chunks of at most SLOT_SIZE bytes (RC keeps
 * them reliable and in order), each a scatter-gather list: pieces that lie
 * in memory the application registered (esd_transport_register_memory: the
 * node's cache rows) and are at least GATHER_MIN bytes are sent in place
 * through the link's registration of that memory, made once; the rest
 * (headers, small rows, memory not registered) is copied into the send
 * slot. A chunk ends early when its list is full. A send that used the
 * caller's memory returns once its SENDs completed. The receiver hands a
 * frame that came in one chunk up in place and reassembles others into a
 * buffer allocated only after the first chunk's header passed the limits.
 * Receives are posted ahead; a sender that outruns them is held by RNR
 * retries (rnr_retry = 7).
 *
 * This data path needs an RDMA device (or soft-RoCE) to run; none exists on
 * the project's hosts, so the tests cover the no-device path and, over tcp,
 * the frames in pieces (esd_link_sendv) this backend sends.
 */
#include "link_internal.h"

#include <esd/clock.h>
#include <esd/err.h>
#include <esd/log.h>

#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#define SLOTS      32u
#define SLOT_SIZE  (256u << 10)
#define HUGE_2M    (2u << 20)
#define TAG_RECV   (1ull << 32)
#define GATHER_MIN 256u /* smaller pieces are copied: cheaper than an entry */

/* What the two sides swap over the bootstrap socket. */
struct qp_info {
	uint32_t qpn;
	uint32_t psn;
	uint16_t lid;
	uint8_t gid[16];
	uint8_t mtu; /* enum ibv_mtu */
	uint8_t pad;
} __attribute__((packed));

struct rdma_wire {
	struct wire w;
	int sock; /* bootstrap TCP socket, kept to notice a dead peer */
	struct ibv_context *ctx;
	uint8_t port;
	int gid_index; /* -1: routed by LID */
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	uint8_t *region;
	size_t region_len;
	/* send slots: a slot is free when its bit in busy is clear */
	uint64_t send_busy;
	unsigned next_send;
	/* receive side: chunks completed but not consumed, in order */
	uint32_t rx_slot[SLOTS], rx_len[SLOTS];
	unsigned rx_head, rx_count;
	int lent_slot; /* slot handed up in place, reposted at the next recv */
	uint8_t *asm_buf;
	size_t asm_cap, asm_got, asm_total;
	struct bufcache cache;
	/* the application's memory, registered with this link's device */
	int max_sge;
	unsigned n_ext;
	struct ibv_mr *ext_mr[ESD_TRANSPORT_MAX_REGIONS];
	struct plan_region ext[ESD_TRANSPORT_MAX_REGIONS]; /* ext_mr's, for the planner */
	uint64_t ext_gen;
};

struct rdma_listener {
	struct wire_listener wl;
	int fd;
};

/* ---- device ------------------------------------------------------------- */

/* The device, port and GID of a link's options, found and checked the way
 * rdma-core's rc_pingpong does (device by name, else the first; port from
 * 1; a LID where the port routes by LID; the GID at the index asked for). */
struct rdma_where {
	struct ibv_context *ctx;
	uint8_t port;
	int gid_index; /* -1: none */
	struct ibv_port_attr pa;
	union ibv_gid gid; /* zero without a GID index */
};

static const char *dev_want(const struct esd_link_opts *o)
{
	return o->rdma_device && o->rdma_device[0] ? o->rdma_device : NULL;
}

/* "mlx5_0, mlx5_1" of the list (or "none"). */
static void dev_names(struct ibv_device **list, int n, char *buf, size_t len)
{
	size_t at = 0;
	snprintf(buf, len, "none");
	for (int i = 0; i < n && at < len; i++)
		at += (size_t)snprintf(buf + at, len - at, "%s%s", i ? ", " : "",
		                       ibv_get_device_name(list[i]));
}

static int open_device(const struct esd_link_opts *o, const char *what, struct ibv_context **out)
{
	int n = 0;
	const char *want = dev_want(o);
	struct ibv_device **list = ibv_get_device_list(&n);
	*out = NULL;
	if (!list) {
		int rc = esd_neg_errno();
		ESD_ERR("transport",
		        "rdma %s: no RDMA device%s%s: ibv_get_device_list() failed (%s)", what,
		        want ? " " : "", want ? want : "", esd_strerror(rc));
		return -ENODEV;
	}
	if (n == 0) {
		ibv_free_device_list(list);
		ESD_ERR(
		    "transport",
		    "rdma %s: no RDMA device%s%s: ibv_get_device_list() found none (no "
		    "/dev/infiniband/uverbs*; load an RDMA driver or use the tcp or dpdk backend)",
		    what, want ? " " : "", want ? want : "");
		return -ENODEV;
	}
	int i = 0;
	while (want && i < n && strcmp(ibv_get_device_name(list[i]), want))
		i++;
	if (i == n) {
		char names[256];
		dev_names(list, n, names, sizeof(names));
		ESD_ERR("transport",
		        "rdma %s: no RDMA device %s on this host (rdma_device; there "
		        "are: %s)",
		        what, want, names);
		ibv_free_device_list(list);
		return -ENODEV;
	}
	*out = ibv_open_device(list[i]);
	if (!*out)
		ESD_ERR("transport", "rdma %s: RDMA device %s does not open: %s", what,
		        ibv_get_device_name(list[i]), esd_strerror(esd_neg_errno()));
	ibv_free_device_list(list);
	return *out ? 0 : -ENODEV;
}

/* Port and GID: the port exists and is ACTIVE; a LID-routed port (not
 * Ethernet) has a LID; the GID index is in the table and holds a GID. */
static int check_port(struct rdma_where *at, const struct esd_link_opts *o, const char *what)
{
	const char *dev = ibv_get_device_name(at->ctx->device);
	struct ibv_device_attr da;
	at->port = (uint8_t)(o->rdma_port ? o->rdma_port : 1);
	at->gid_index = o->rdma_gid_index < 0 ? -1 : o->rdma_gid_index;
	memset(&at->gid, 0, sizeof(at->gid));
	int rc = ibv_query_device(at->ctx, &da);
	if (!rc && (o->rdma_port > 255 || at->port > da.phys_port_cnt)) {
		ESD_ERR("transport",
		        "rdma %s: RDMA device %s has no port %u (rdma_port; it has "
		        "1 to %u)",
		        what, dev, o->rdma_port, da.phys_port_cnt);
		return -ENODEV;
	}
	if (rc || (rc = ibv_query_port(at->ctx, at->port, &at->pa))) {
		ESD_ERR("transport", "rdma %s: RDMA device %s port %u cannot be queried: %s", what,
		        dev, at->port, strerror(rc));
		return -ENODEV;
	}
	if (at->pa.state != IBV_PORT_ACTIVE) {
		ESD_ERR("transport",
		        "rdma %s: RDMA device %s port %u is %s, not ACTIVE (link down, "
		        "or no subnet manager)",
		        what, dev, at->port, ibv_port_state_str(at->pa.state));
		return -ENODEV;
	}
	int eth = at->pa.link_layer == IBV_LINK_LAYER_ETHERNET;
	if (at->gid_index < 0) {
		if (eth || !at->pa.lid) {
			ESD_ERR("transport",
			        "rdma %s: RDMA device %s port %u %s: give a GID index "
			        "(rdma_gid_index)",
			        what, dev, at->port,
			        eth ? "is RoCE (Ethernet), which routes by GID only"
			            : "has no LID");
			return -EINVAL;
		}
		return 0;
	}
	static const uint8_t zero[16];
	if (at->gid_index >= at->pa.gid_tbl_len ||
	    ibv_query_gid(at->ctx, at->port, at->gid_index, &at->gid) ||
	    !memcmp(at->gid.raw, zero, 16)) {
		ESD_ERR("transport",
		        "rdma %s: RDMA device %s port %u has no GID at index %d "
		        "(rdma_gid_index; the table has %d entries: show_gids lists them)",
		        what, dev, at->port, at->gid_index, at->pa.gid_tbl_len);
		return -EINVAL;
	}
	return 0;
}

/* Open and check what the options name; *at holds the open device. */
static int find_device(const struct esd_link_opts *o, const char *what, struct rdma_where *at)
{
	int rc = open_device(o, what, &at->ctx);
	if (!rc && (rc = check_port(at, o, what))) {
		ibv_close_device(at->ctx);
		at->ctx = NULL;
	}
	return rc;
}

static int rdma_probe(const struct esd_link_opts *o)
{
	struct rdma_where at;
	int rc = find_device(o, o->addr ? o->addr : "device check", &at);
	if (!rc)
		ibv_close_device(at.ctx);
	return rc;
}

/* ---- bootstrap socket --------------------------------------------------- */

static int split_addr(const char *addr, int passive, struct addrinfo **res)
{
	char host[256];
	const char *colon = addr ? strrchr(addr, ':') : NULL;
	if (!colon || colon == addr || (size_t)(colon - addr) >= sizeof(host))
		return -EINVAL;
	memcpy(host, addr, (size_t)(colon - addr));
	host[colon - addr] = 0;
	struct addrinfo hints = {.ai_family = AF_UNSPEC,
	                         .ai_socktype = SOCK_STREAM,
	                         .ai_flags = passive ? AI_PASSIVE : 0};
	return getaddrinfo(host, colon + 1, &hints, res) ? -EINVAL : 0;
}

static int io_all(int fd, void *buf, size_t len, int wr, int64_t deadline)
{
	uint8_t *p = buf;
	while (len) {
		struct pollfd pfd = {.fd = fd, .events = wr ? POLLOUT : POLLIN};
		int64_t left = deadline - esd_now_ns();
		if (left <= 0)
			return -ETIMEDOUT;
		if (poll(&pfd, 1, (int)(left / ESD_NS_PER_MS) + 1) < 0 && errno != EINTR)
			return esd_neg_errno();
		ssize_t r = wr ? send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT)
		               : recv(fd, p, len, MSG_DONTWAIT);
		if (r == 0)
			return -ECONNRESET;
		if (r < 0) {
			if (errno == EAGAIN || errno == EINTR)
				continue;
			return esd_neg_errno();
		}
		p += r;
		len -= (size_t)r;
	}
	return 0;
}

/* ---- queue pair --------------------------------------------------------- */

static int post_recv(struct rdma_wire *r, uint32_t slot)
{
	struct ibv_sge sge = {.addr = (uintptr_t)(r->region + (size_t)(SLOTS + slot) * SLOT_SIZE),
	                      .length = SLOT_SIZE,
	                      .lkey = r->mr->lkey};
	struct ibv_recv_wr wr = {.wr_id = TAG_RECV | slot, .sg_list = &sge, .num_sge = 1}, *bad;
	int rc = ibv_post_recv(r->qp, &wr, &bad);
	return rc ? -rc : 0; /* verbs return a positive errno */
}

/* Scatter-gather entries a SEND may have: 1 to PLAN_MAX_ENTRIES. */
static int clamp_sge(int n)
{
	return n < 1 ? 1 : n < PLAN_MAX_ENTRIES ? n : PLAN_MAX_ENTRIES;
}

static int setup_verbs(struct rdma_wire *r, const struct esd_link_opts *o, const char *what,
                       struct qp_info *mine)
{
	struct rdma_where at;
	int rc = find_device(o, what, &at);
	if (rc)
		return rc;
	r->ctx = at.ctx;
	r->port = at.port;
	r->gid_index = at.gid_index;
	r->region_len = 2ull * SLOTS * SLOT_SIZE;
	r->region = mmap(NULL, r->region_len, PROT_READ | PROT_WRITE,
	                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
	if (r->region == MAP_FAILED) {
		ESD_WARN("transport",
		         "rdma: no huge pages for the %zu-byte buffer region; using "
		         "4 KiB pages",
		         r->region_len);
		r->region = mmap(NULL, r->region_len, PROT_READ | PROT_WRITE,
		                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (r->region == MAP_FAILED) {
			r->region = NULL;
			return -ENOMEM;
		}
	}
	if (!(r->pd = ibv_alloc_pd(r->ctx)) ||
	    !(r->cq = ibv_create_cq(r->ctx, 2 * SLOTS + 8, NULL, NULL, 0)))
		return esd_wire_fail(&r->w, -ENOMEM, "rdma: no protection domain / completion queue");
	r->mr = ibv_reg_mr(r->pd, r->region, r->region_len, IBV_ACCESS_LOCAL_WRITE);
	if (!r->mr)
		return esd_wire_fail(&r->w, esd_neg_errno(), "rdma: registering %zu bytes failed",
		                     r->region_len);
	struct ibv_device_attr da;
	int sge = ibv_query_device(r->ctx, &da) ? 1 : clamp_sge(da.max_sge);
	struct ibv_qp_init_attr qa = {
	    .send_cq = r->cq,
	    .recv_cq = r->cq,
	    .qp_type = IBV_QPT_RC,
	    .cap = {.max_send_wr = SLOTS,
	            .max_recv_wr = SLOTS,
	            .max_send_sge = (uint32_t)sge,
	            .max_recv_sge = 1}};
	if (!(r->qp = ibv_create_qp(r->pd, &qa)))
		return esd_wire_fail(&r->w, esd_neg_errno(), "rdma: no RC queue pair");
	r->max_sge = clamp_sge((int)qa.cap.max_send_sge); /* what the QP got */
	struct ibv_qp_attr ia = {.qp_state = IBV_QPS_INIT,
	                         .pkey_index = 0,
	                         .port_num = r->port,
	                         .qp_access_flags = IBV_ACCESS_LOCAL_WRITE};
	if ((rc = ibv_modify_qp(
	         r->qp, &ia, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)))
		return esd_wire_fail(&r->w, -rc, "rdma: queue pair to INIT: %s", strerror(rc));
	for (uint32_t sl = 0; sl < SLOTS; sl++)
		if ((rc = post_recv(r, sl)))
			return esd_wire_fail(&r->w, rc, "rdma: posting receives: %s", esd_strerror(rc));
	memset(mine, 0, sizeof(*mine));
	mine->qpn = r->qp->qp_num;
	mine->psn = (uint32_t)(esd_now_ns() & 0xffffff);
	mine->lid = at.pa.lid;
	memcpy(mine->gid, at.gid.raw, 16);
	mine->mtu = (uint8_t)at.pa.active_mtu;
	r->lent_slot = -1;
	return 0;
}

static int connect_qp(struct rdma_wire *r, const struct qp_info *mine, const struct qp_info *peer)
{
	int rc;
	static const uint8_t zero[16];
	struct ibv_qp_attr at = {
	    .qp_state = IBV_QPS_RTR,
	    .path_mtu = (enum ibv_mtu)(peer->mtu < mine->mtu ? peer->mtu : mine->mtu),
	    .dest_qp_num = peer->qpn,
	    .rq_psn = peer->psn,
	    .max_dest_rd_atomic = 1,
	    .min_rnr_timer = 12,
	    .ah_attr = {.dlid = peer->lid, .sl = 0, .src_path_bits = 0, .port_num = r->port},
	};
	if (memcmp(peer->gid, zero, 16)) { /* routed by GID (RoCE; IB with a GID index) */
		if (r->gid_index < 0)
			return esd_wire_fail(&r->w, -EPROTO,
			                     "rdma: the peer routes by GID, this side "
			                     "by LID (rdma_gid_index -1): set the same on both");
		at.ah_attr.is_global = 1;
		memcpy(at.ah_attr.grh.dgid.raw, peer->gid, 16);
		at.ah_attr.grh.sgid_index = (uint8_t)r->gid_index;
		at.ah_attr.grh.hop_limit = 1;
	}
	if ((rc = ibv_modify_qp(r->qp, &at,
	                        IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
	                            IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
	                            IBV_QP_MIN_RNR_TIMER)))
		return esd_wire_fail(&r->w, -rc, "rdma: queue pair to RTR: %s", strerror(rc));
	memset(&at, 0, sizeof(at));
	at.qp_state = IBV_QPS_RTS;
	at.timeout = 14;
	at.retry_cnt = 7;
	at.rnr_retry = 7; /* retry forever while the receiver has no buffer posted */
	at.sq_psn = mine->psn;
	at.max_rd_atomic = 1;
	if ((rc = ibv_modify_qp(r->qp, &at,
	                        IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
	                            IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC)))
		return esd_wire_fail(&r->w, -rc, "rdma: queue pair to RTS: %s", strerror(rc));
	return 0;
}

static void drop_regions(struct rdma_wire *r)
{
	for (unsigned i = 0; i < r->n_ext; i++)
		ibv_dereg_mr(r->ext_mr[i]);
	r->n_ext = 0;
}

static void rdma_free(struct rdma_wire *r)
{
	if (r->qp)
		ibv_destroy_qp(r->qp);
	drop_regions(r);
	if (r->mr)
		ibv_dereg_mr(r->mr);
	if (r->cq)
		ibv_destroy_cq(r->cq);
	if (r->pd)
		ibv_dealloc_pd(r->pd);
	if (r->ctx)
		ibv_close_device(r->ctx);
	if (r->region)
		munmap(r->region, r->region_len);
	if (r->sock >= 0)
		close(r->sock);
	esd_bufcache_put(&r->cache, r->asm_buf, r->asm_cap);
	esd_bufcache_fini(&r->cache);
	free(r);
}

/* Swap QP info on the bootstrap socket in rc_pingpong's order, plus a
 * last byte: the server moves its QP to RTR before it answers, the client
 * moves its own before it sends the byte, and the server returns only
 * after that byte. So neither side sends to a QP that cannot receive yet. */
static int exchange(struct rdma_wire *r, int client, const struct qp_info *mine,
                    struct qp_info *peer, int64_t deadline)
{
	uint8_t ready = 1;
	int rc;
	if (client) {
		if ((rc = io_all(r->sock, (void *)mine, sizeof(*mine), 1, deadline)) ||
		    (rc = io_all(r->sock, peer, sizeof(*peer), 0, deadline)) ||
		    (rc = connect_qp(r, mine, peer)))
			return rc;
		return io_all(r->sock, &ready, 1, 1, deadline);
	}
	if ((rc = io_all(r->sock, peer, sizeof(*peer), 0, deadline)) ||
	    (rc = connect_qp(r, mine, peer)) ||
	    (rc = io_all(r->sock, (void *)mine, sizeof(*mine), 1, deadline)))
		return rc;
	return io_all(r->sock, &ready, 1, 0, deadline);
}

/* Set up verbs on an open bootstrap socket and connect the QPs. */
static int finish_link(const struct esd_link_opts *o, int sock, int client, struct wire **out)
{
	struct rdma_wire *r = calloc(1, sizeof(*r));
	if (!r) {
		close(sock);
		return -ENOMEM;
	}
	esd_wire_init(&r->w, &esd_wire_rdma, o);
	r->sock = sock;
	snprintf(r->w.peer, sizeof(r->w.peer), "%s", o->addr);
	struct qp_info mine, peer;
	int64_t deadline = esd_now_ns() + r->w.timeout_ns;
	int rc = setup_verbs(r, o, o->addr, &mine);
	if (!rc)
		rc = exchange(r, client, &mine, &peer, deadline);
	if (rc) {
		if (r->w.err[0])
			ESD_ERR("transport", "rdma %s: %s", o->addr, r->w.err);
		rdma_free(r);
		return rc;
	}
	*out = &r->w;
	return 0;
}

static int rdma_connect(const struct esd_link_opts *o, struct wire **out)
{
	int rc = rdma_probe(o); /* fail fast, before any socket */
	if (rc)
		return rc;
	struct addrinfo *res;
	if ((rc = split_addr(o->addr, 0, &res))) {
		ESD_ERR("transport", "rdma address '%s': expected host:port", o->addr);
		return rc;
	}
	int fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || connect(fd, res->ai_addr, res->ai_addrlen)) {
		rc = esd_neg_errno();
		if (fd >= 0)
			close(fd);
		freeaddrinfo(res);
		ESD_ERR("transport", "rdma bootstrap connect to %s: %s", o->addr, esd_strerror(rc));
		return rc;
	}
	freeaddrinfo(res);
	return finish_link(o, fd, 1, out);
}

static int rdma_listen(const struct esd_link_opts *o, struct wire_listener **out)
{
	int rc = rdma_probe(o);
	if (rc)
		return rc;
	struct addrinfo *res;
	if ((rc = split_addr(o->addr, 1, &res))) {
		ESD_ERR("transport", "rdma address '%s': expected host:port", o->addr);
		return rc;
	}
	struct rdma_listener *l = calloc(1, sizeof(*l));
	int one = 1;
	if (!l) {
		freeaddrinfo(res);
		return -ENOMEM;
	}
	l->wl.ops = &esd_wire_rdma;
	l->fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (l->fd < 0 || setsockopt(l->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
	    bind(l->fd, res->ai_addr, res->ai_addrlen) || listen(l->fd, 64)) {
		rc = esd_neg_errno();
		if (l->fd >= 0)
			close(l->fd);
		free(l);
		freeaddrinfo(res);
		ESD_ERR("transport", "rdma bootstrap listen on %s: %s", o->addr, esd_strerror(rc));
		return rc;
	}
	freeaddrinfo(res);
	snprintf(l->wl.addr, sizeof(l->wl.addr), "%s", o->addr);
	*out = &l->wl;
	return 0;
}

static int rdma_accept(struct wire_listener *wl, const struct esd_link_opts *o, int64_t deadline,
                       struct wire **out)
{
	struct rdma_listener *l = (struct rdma_listener *)wl;
	struct pollfd pfd = {.fd = l->fd, .events = POLLIN};
	int64_t left = deadline < 0 ? -1 : deadline - esd_now_ns();
	if (deadline >= 0 && left <= 0)
		return -ETIMEDOUT;
	int pr = poll(&pfd, 1, left < 0 ? -1 : (int)(left / ESD_NS_PER_MS) + 1);
	if (pr == 0)
		return -ETIMEDOUT;
	int fd = accept4(l->fd, NULL, NULL, SOCK_CLOEXEC);
	if (fd < 0)
		return esd_neg_errno();
	return finish_link(o, fd, 0, out);
}

static void rdma_listener_close(struct wire_listener *wl)
{
	struct rdma_listener *l = (struct rdma_listener *)wl;
	close(l->fd);
	free(l);
}

/* ---- data path ---------------------------------------------------------- */

/* Reap completions: free send slots, queue received chunks. */
static int reap(struct rdma_wire *r)
{
	struct ibv_wc wc[16];
	int n = ibv_poll_cq(r->cq, 16, wc);
	if (n < 0)
		return esd_wire_fail(&r->w, -EIO, "rdma: polling the completion queue failed");
	for (int i = 0; i < n; i++) {
		if (wc[i].status != IBV_WC_SUCCESS)
			return esd_wire_fail(&r->w, -ECONNRESET, "rdma: peer %s: %s", r->w.peer,
			                     ibv_wc_status_str(wc[i].status));
		if (wc[i].wr_id & TAG_RECV) {
			esd_wire_heard(&r->w);
			unsigned at = (r->rx_head + r->rx_count) % SLOTS;
			r->rx_slot[at] = (uint32_t)(wc[i].wr_id & 0xffffffffu);
			r->rx_len[at] = wc[i].byte_len;
			r->rx_count++;
		} else {
			r->send_busy &= ~(1ull << wc[i].wr_id);
		}
	}
	return n;
}

/* The bootstrap socket says whether the peer is still there: closed, or
 * its heartbeats (rdma_beat), which prove it alive and are dropped. */
static int peer_alive(struct rdma_wire *r)
{
	char buf[512];
	for (;;) {
		ssize_t n = recv(r->sock, buf, sizeof(buf), MSG_DONTWAIT);
		if (n > 0) {
			esd_wire_heard(&r->w);
			continue;
		}
		if (n == 0 || (errno != EAGAIN && errno != EINTR))
			return esd_wire_fail(&r->w, -ECONNRESET, "rdma: peer %s closed the link",
			                     r->w.peer);
		return 0;
	}
}

/* A heartbeat over the bootstrap socket, beside the queue pair (whose
 * receive slots are the application's: a busy peer that takes none would
 * run out of them). Bytes there only prove the sender alive. */
static int rdma_beat(struct wire *w, const uint8_t *frame, size_t len)
{
	struct rdma_wire *r = (struct rdma_wire *)w;
	ssize_t n = send(r->sock, frame, len, MSG_DONTWAIT | MSG_NOSIGNAL);
	if (n >= 0)
		return 0;
	return errno == EAGAIN || errno == EINTR ? -EAGAIN : esd_neg_errno();
}

/* Register the application's regions with this link's protection domain
 * when the table changed since the last look (no send of this link is in
 * flight from them then: a send that used them waited for completion). */
static void sync_regions(struct rdma_wire *r)
{
	if (esd_memreg_generation() == r->ext_gen)
		return;
	struct memreg_region reg[ESD_TRANSPORT_MAX_REGIONS];
	drop_regions(r);
	unsigned n = esd_memreg_snapshot(reg, &r->ext_gen);
	for (unsigned i = 0; i < n; i++) {
		/* local read, all a SEND's source needs, comes with every MR */
		struct ibv_mr *mr = ibv_reg_mr(r->pd, (void *)reg[i].base, reg[i].len, 0);
		if (!mr) {
			ESD_WARN("transport",
			         "rdma link to %s: registering %zu bytes at %p to send from "
			         "failed (%s; RLIMIT_MEMLOCK?): rows there are copied",
			         r->w.peer, reg[i].len, reg[i].base, esd_strerror(esd_neg_errno()));
			continue;
		}
		r->ext_mr[r->n_ext] = mr;
		r->ext[r->n_ext++] =
		    (struct plan_region){.base = reg[i].base, .len = reg[i].len, .key = mr->lkey};
	}
}

/* Reap completions until the send slots in mask are free. */
static int reap_until(struct rdma_wire *r, uint64_t mask, int64_t deadline)
{
	while (r->send_busy & mask) {
		int rc = reap(r);
		if (rc < 0)
			return rc;
		if (rc == 0 && deadline >= 0 && esd_now_ns() > deadline)
			return esd_wire_fail(&r->w, -ETIMEDOUT, "rdma: sends to %s do not complete",
			                     r->w.peer);
	}
	return 0;
}

/* esd_gather_plan_send's ops: the next send slot as the staging area, a chunk posted
 * as one SEND from that slot. */
struct send_ctx {
	struct rdma_wire *r;
	int64_t deadline;
};

static int stage_slot(void *arg, uint8_t **stage)
{
	struct send_ctx *c = arg;
	unsigned s = c->r->next_send;
	int rc = reap_until(c->r, 1ull << s, c->deadline);
	*stage = c->r->region + (size_t)s * SLOT_SIZE;
	return rc;
}

static int post_chunk(void *arg, struct esd_gather_plan_chunk *c)
{
	struct rdma_wire *r = ((struct send_ctx *)arg)->r;
	unsigned s = r->next_send;
	struct ibv_sge sge[PLAN_MAX_ENTRIES];
	for (int i = 0; i < c->n; i++)
		sge[i] = (struct ibv_sge){.addr = c->e[i].addr, .length = c->e[i].len, .lkey = c->e[i].key};
	struct ibv_send_wr wr = {.wr_id = s,
	                         .sg_list = sge,
	                         .num_sge = c->n,
	                         .opcode = IBV_WR_SEND,
	                         .send_flags = IBV_SEND_SIGNALED},
	                   *bad;
	int rc = ibv_post_send(r->qp, &wr, &bad);
	if (rc)
		return esd_wire_fail(&r->w, -rc, "rdma: post send: %s", strerror(rc));
	r->send_busy |= 1ull << s;
	r->next_send = (s + 1) % SLOTS;
	return 0;
}

/* Frames (send) or pieces of frames (sendv), chunk by chunk (gather_plan.c):
 * rows in registered memory in place, the rest through the send slots. */
static int rdma_sendv(struct wire *w, const struct iovec *iov, int n, int64_t deadline)
{
	static const struct plan_ops ops = {.stage = stage_slot, .emit = post_chunk};
	struct rdma_wire *r = (struct rdma_wire *)w;
	sync_regions(r);
	struct plan_rules rules = {.reg = r->ext,
	                           .nreg = r->n_ext,
	                           .max_entries = r->max_sge,
	                           .min_in_place = GATHER_MIN,
	                           .chunk_max = SLOT_SIZE,
	                           .stage_key = r->mr->lkey};
	struct send_ctx ctx = {.r = r, .deadline = deadline};
	size_t in_place;
	int rc = esd_gather_plan_send(&rules, iov, n, &ops, &ctx, &in_place);
	if (rc == -EINVAL)
		return esd_wire_fail(w, rc, "rdma: the pieces are not whole frames");
	if (rc)
		return rc;
	/* the caller may change its memory once this returns */
	return in_place ? reap_until(r, ~0ull, deadline) : 0;
}

static int rdma_recv(struct wire *w, const uint8_t **frame, size_t *len, int64_t deadline)
{
	struct rdma_wire *r = (struct rdma_wire *)w;
	int rc;
	if (r->lent_slot >= 0) {
		if ((rc = post_recv(r, (uint32_t)r->lent_slot)))
			return esd_wire_fail(w, rc, "rdma: reposting a receive: %s", esd_strerror(rc));
		r->lent_slot = -1;
	}
	uint64_t idle = 0;
	for (;;) {
		while (r->rx_count) {
			uint32_t s = r->rx_slot[r->rx_head], blen = r->rx_len[r->rx_head];
			uint8_t *p = r->region + (size_t)(SLOTS + s) * SLOT_SIZE;
			r->rx_head = (r->rx_head + 1) % SLOTS;
			r->rx_count--;
			if (!r->asm_total) {
				struct esd_frame_hdr h;
				if ((rc = esd_frame_hdr_parse(p, blen, &w->lim, &h, w->err,
				                              sizeof(w->err))))
					return rc == -EAGAIN
					           ? esd_wire_fail(w, -EPROTO, "rdma: runt chunk")
					           : rc;
				size_t total = ESD_FRAME_HDR_SIZE + (size_t)h.length;
				if (blen == total) { /* whole frame in one slot: in place */
					r->lent_slot = (int)s;
					*frame = p;
					*len = total;
					return 0;
				}
				if (blen > total) /* a chunk may end early: its list was full */
					return esd_wire_fail(w, -EPROTO,
					                     "rdma: chunk of %u bytes for a "
					                     "%zu-byte frame",
					                     blen, total);
				esd_bufcache_put(&r->cache, r->asm_buf, r->asm_cap);
				r->asm_buf = esd_bufcache_get(&r->cache, total, &r->asm_cap);
				if (!r->asm_buf)
					return -ENOMEM;
				r->asm_total = total;
				r->asm_got = 0;
			}
			if (blen > r->asm_total - r->asm_got)
				return esd_wire_fail(w, -EPROTO, "rdma: frame overrun");
			memcpy(r->asm_buf + r->asm_got, p, blen);
			r->asm_got += blen;
			if ((rc = post_recv(r, s)))
				return esd_wire_fail(w, rc, "rdma: reposting a receive: %s",
				                     esd_strerror(rc));
			if (r->asm_got == r->asm_total) {
				*frame = r->asm_buf;
				*len = r->asm_total;
				r->asm_total = 0; /* the buffer stays until the next frame */
				return 0;
			}
		}
		rc = reap(r);
		if (rc < 0)
			return rc;
		if (rc > 0)
			continue;
		if ((++idle & 1023) == 0) {
			if ((rc = peer_alive(r)))
				return rc;
			if (deadline >= 0 && esd_now_ns() >= deadline)
				return -ETIMEDOUT;
			if (idle > 65536)
				esd_sleep_ns(20 * ESD_NS_PER_US);
		}
		if (deadline == 0)
			return -ETIMEDOUT;
	}
}

static void rdma_close(struct wire *w, int64_t deadline)
{
	struct rdma_wire *r = (struct rdma_wire *)w;
	/* Let posted sends finish before the queue pair goes. */
	while (r->send_busy && esd_now_ns() < deadline && reap(r) >= 0)
		;
	shutdown(r->sock, SHUT_RDWR);
	rdma_free(r);
}

const struct wire_ops esd_wire_rdma = {
    .name = "rdma",
    .not_built = NULL,
    .connect = rdma_connect,
    .listen = rdma_listen,
    .accept = rdma_accept,
    .listener_close = rdma_listener_close,
    .send = rdma_sendv,
    .sendv = rdma_sendv,
    .recv = rdma_recv,
    .close = rdma_close,
    .probe = rdma_probe,
    .beat = rdma_beat,
    .beat_aside = true,
};
