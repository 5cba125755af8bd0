/*
 * Goodput of a link against its configured rate, per backend.
 *
 * A receiver process (forked, with its own listener and, for dpdk, its own
 * EAL) accepts one link per run and times the frames it receives; the
 * sender sends PUSH_GRAD batches of 64 rows of 512 floats (132 KiB frames)
 * as fast as the link lets it for --seconds, then a BARRIER, and waits for
 * the receiver's ACK. Goodput = frame bytes received after the first frame
 * / (time of the last frame - time of the first), measured at the receiver.
 * Each rate runs --reps times; the table shows medians, the ratio to the
 * set rate, and the ratio to the unshaped run of the same backend in the
 * same invocation. The baseline is "raw": plain blocking send()/recv() of
 * the same bytes between two processes, no library; it runs right after
 * every unshaped run, and /raw is the median of those paired ratios (the
 * host is shared and noisy: pairs see the same load); retx sums the
 * reliable layer's retransmissions over the repetitions. A "raw" entry in
 * --backends also prints the raw runs on their own.
 *
 * Usage: bench_transport [--backends raw,tcp,tcp-poll,dpdk,tcp-key,dpdk-key,dpdk-afp,
 *                                   dpdk-afp-tc]
 *                        [--rates 0.5,5,20,0] [--seconds S] [--reps N]
 * ("-key": with a job key, a tag on every frame; compare with the same
 * backend without, in the same invocation; "tcp-encode" and "tcp-inplace"
 * build every frame as a node does, from rows of a 64 MiB cache-like
 * array taken in turn: copied into the frame (esd_enc_row, esd_link_send)
 * or referenced in place (esd_enc_row_ref, esd_link_sendv: one writev);
 * the others send one frame built once)
 * (rates in Gbit/s; 0 = unshaped). --tags [--reps N] prints instead the
 * frame tag constructions' speeds by frame size (bench_tags.c). Environment: BENCH_MTU (dpdk packet
 * payload bytes), BENCH_EAL_ARGS (EAL arguments instead of the default).
 */
#include "bench_tags.h"

#include <esd/clock.h>
#include <esd/err.h>
#include <esd/log.h>
#include <esd/transport.h>

#include <arpa/inet.h>
#include <stdbool.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define ROWS     64
#define DIM      512
#define MAX_RUNS 24 /* DPDK builds allow 32 ports per process */

struct result {
	double gbps;     /* frame bytes */
	double vs_raw;   /* unshaped runs: goodput / raw socket run right after */
	double row_gbps; /* row payload (floats) only */
	double seconds;
	uint64_t frames;
	uint64_t retx; /* reliable-layer retransmissions by the sender */
};

static int nruns;
/* A "-key" backend (tcp-key, dpdk-key) runs with a job key: the handshake
 * and a tag per frame (esd/auth.h); this fixed key is as good as any. */
static const struct esd_key bench_key = {{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}};

static bool is_dpdk(const char *backend)
{
	return !strncmp(backend, "dpdk", 4);
}

/* "dpdk-afp": net_af_packet over a veth pair (esdbs, the receiver's end;
 * esdbc, the sender's) in a network namespace of the benchmark's own.
 * "dpdk-afp-tc": the same, shaped by the kernel (tc tbf on esdbc, as a
 * deployment's tc rules or the testbed's --netns shape it) instead of the
 * transport's token bucket. tbf counts whole packets (the Ethernet and
 * fragment headers too: 30 bytes in every 8 KiB), so goodput in frame
 * bytes is 0.996 of the set rate when tbf holds it exactly. */
static bool is_afp(const char *backend)
{
	return !strncmp(backend, "dpdk-afp", 8);
}

static bool is_tc(const char *backend)
{
	return !strcmp(backend, "dpdk-afp-tc");
}

/* ---- frames built as a node builds them (tcp-encode, tcp-inplace) ------ */

#define CACHE_ROWS 32768 /* 64 MiB of 512-float rows: well past the caches */

struct encoder {
	float *rows;
	uint32_t next;
	bool in_place;
	struct esd_buf b;
	struct esd_gather g;
};

static bool is_encoding(const char *backend)
{
	return !strcmp(backend, "tcp-encode") || !strcmp(backend, "tcp-inplace");
}

static int encoder_init(struct encoder *x, const char *backend)
{
	memset(x, 0, sizeof(*x));
	x->in_place = !strcmp(backend, "tcp-inplace");
	x->rows = malloc(sizeof(float) * CACHE_ROWS * DIM);
	if (!x->rows)
		return -ENOMEM;
	for (size_t i = 0; i < (size_t)CACHE_ROWS * DIM; i++)
		x->rows[i] = (float)(i % 1000);
	esd_buf_init(&x->b);
	esd_gather_init(&x->g);
	return 0;
}

static void encoder_free(struct encoder *x)
{
	free(x->rows);
	esd_buf_free(&x->b);
	esd_gather_free(&x->g);
}

/* One frame of the next ROWS rows, encoded and sent. */
static int encode_and_send(struct esd_link *l, struct encoder *x)
{
	struct esd_rows_enc e;
	struct esd_rows hr = {.kind = ESD_XFER_UPDATE_PUSH, .dim = DIM};
	esd_buf_reset(&x->b);
	esd_gather_reset(&x->g);
	int rc = esd_enc_rows_begin(&e, &x->b, ESD_OP_PUSH_GRAD, &hr);
	for (int i = 0; i < ROWS && !rc; i++) {
		const float *v = x->rows + (size_t)x->next * DIM;
		x->next = (x->next + 1) % CACHE_ROWS;
		rc = x->in_place ? esd_enc_row_ref(&e, &x->g, (esd_key_t)i, 0, v, NULL)
		                 : esd_enc_row(&e, (esd_key_t)i, 0, v, NULL);
	}
	esd_enc_rows_end(&e);
	if (rc || !x->in_place)
		return rc ? rc : esd_link_send(l, x->b.data, x->b.len);
	void *iov;
	int n;
	if ((rc = esd_gather_iov(&x->g, &x->b, &iov, &n)))
		return rc;
	return esd_link_sendv(l, iov, n);
}

/* tbf at rate (Gbit/s) on esdbc, or none (0): a bucket of 10 ms of the
 * rate (at least 64 KiB), a second of queue. */
static int tc_shape(double rate)
{
	char cmd[256];
	if (rate <= 0)
		return system("tc qdisc del dev esdbc root 2>/dev/null; true");
	uint64_t bps = (uint64_t)(rate * 1e9), burst = bps / 8 / 100;
	snprintf(cmd, sizeof(cmd),
	         "tc qdisc replace dev esdbc root tbf rate %llubit burst %llu latency 1s",
	         (unsigned long long)bps, (unsigned long long)(burst < (64u << 10) ? 64u << 10 : burst));
	return system(cmd);
}

/* The namespace and its veth pair (MTU 9000), once; false if not root. */
static bool afp_setup(void)
{
	static int state; /* 0 not tried, 1 up, -1 failed */
	if (!state)
		state = !unshare(CLONE_NEWNET) &&
		                !system("ip link add esdbs mtu 9000 type veth peer name esdbc mtu 9000 "
		                        "&& ip link set esdbs up && ip link set esdbc up "
		                        "&& ip link set lo up") /* the raw baseline's */
		            ? 1
		            : -1;
	return state > 0;
}

static void set_opts(struct esd_link_opts *o, const char *backend, const char *addr)
{
	esd_link_opts_init(o);
	o->addr = addr;
	if (strstr(backend, "-key"))
		o->key = &bench_key;
	if (is_dpdk(backend)) {
		o->backend = "dpdk";
		o->max_links = (uint32_t)nruns; /* one memif id per run */
		o->window = 512;
		o->dpdk_mtu = getenv("BENCH_MTU") ? (uint32_t)atoi(getenv("BENCH_MTU")) : 0;
		o->dpdk_eal_args = getenv("BENCH_EAL_ARGS");
		if (is_afp(backend))
			o->dpdk_vdev = "af_packet"; /* addr: the interface of the side */
	} else {
		o->backend = "tcp";
		o->tcp_engine = !strcmp(backend, "tcp-poll") ? "poll" : "uring";
	}
}

/* Receiver: one link per run; writes "frames bytes rows seconds" per run. */
static void receiver(const char *backend, const char *addr, int runs, int out)
{
	struct esd_link_opts o;
	struct esd_listener *ls;
	char a[256] = "";
	esd_log_init("bench-rx");
	set_opts(&o, backend, addr);
	int rc = esd_listener_open(&o, &ls);
	if (!rc)
		esd_listener_addr(ls, a, sizeof(a));
	dprintf(out, "%d %s\n", rc, a);
	if (rc)
		_exit(1);
	struct esd_buf b;
	esd_buf_init(&b);
	for (int r = 0; r < runs; r++) {
		struct esd_link *l;
		if (esd_listener_accept(ls, 30 * ESD_NS_PER_S, &l))
			_exit(2);
		uint64_t frames = 0, bytes = 0, rows = 0;
		int64_t t_first = 0, t_last = 0;
		for (;;) {
			struct esd_msg m;
			if (esd_link_recv(l, &m, 30 * ESD_NS_PER_S))
				_exit(3);
			if (m.hdr.op == ESD_OP_BARRIER) {
				struct esd_ack ack = {.op = ESD_OP_BARRIER};
				esd_buf_reset(&b);
				esd_enc_ack(&b, &ack);
				esd_link_send(l, b.data, b.len);
				break;
			}
			int64_t now = esd_now_ns();
			if (frames++ == 0) {
				t_first = now;
			} else {
				bytes += ESD_FRAME_HDR_SIZE + m.hdr.length;
				rows += m.u.rows.count;
			}
			t_last = now;
		}
		/* Wait for the sender to close first (memif shutdown order). */
		struct esd_msg m;
		esd_link_recv(l, &m, 5 * ESD_NS_PER_S);
		esd_link_close(l);
		dprintf(out, "%llu %llu %llu %.9f\n", (unsigned long long)frames,
		        (unsigned long long)bytes, (unsigned long long)rows,
		        esd_ns_to_s(t_last - t_first));
	}
	esd_listener_close(ls);
	_exit(0);
}

/* Baseline: plain blocking send()/recv() of the same bytes over loopback,
 * no framing and no library, to show what this host's loopback carries. */
static double raw_once(double seconds, const uint8_t *frame, size_t len)
{
	int ls = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t sl = sizeof(sa);
	int fds[2];
	if (ls < 0 || bind(ls, (struct sockaddr *)&sa, sizeof(sa)) || listen(ls, 1) ||
	    getsockname(ls, (struct sockaddr *)&sa, &sl) || pipe(fds))
		return 0;
	fflush(NULL);
	pid_t pid = fork();
	if (pid == 0) {
		int c = accept(ls, NULL, NULL);
		static uint8_t buf[1u << 20];
		uint64_t bytes = 0;
		int64_t t0 = 0, t1 = 0;
		ssize_t r;
		while ((r = recv(c, buf, sizeof(buf), 0)) > 0) {
			int64_t now = esd_now_ns();
			if (!t0)
				t0 = now;
			else
				bytes += (uint64_t)r;
			t1 = now;
		}
		double g = t1 > t0 ? (double)bytes * 8 / esd_ns_to_s(t1 - t0) / 1e9 : 0;
		if (write(fds[1], &g, sizeof(g)) != sizeof(g))
			_exit(1);
		_exit(0);
	}
	close(fds[1]);
	int c = socket(AF_INET, SOCK_STREAM, 0);
	double g = 0;
	if (connect(c, (struct sockaddr *)&sa, sizeof(sa))) {
		kill(pid, SIGKILL); /* it waits in accept() for nobody */
	} else {
		int64_t end = esd_now_ns() + (int64_t)(seconds * 1e9);
		while (esd_now_ns() < end)
			for (size_t off = 0; off < len;) {
				ssize_t w = send(c, frame + off, len - off, 0);
				if (w <= 0)
					goto out;
				off += (size_t)w;
			}
	}
out:
	close(c);
	if (read(fds[0], &g, sizeof(g)) != sizeof(g))
		g = 0;
	close(fds[0]);
	close(ls);
	waitpid(pid, NULL, 0);
	return g;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static int run_backend(const char *backend, const double *rates, int nrates, int reps,
                       double seconds)
{
	char sock[128];
	const char *addr = "127.0.0.1:0";
	if (is_afp(backend)) {
		if (!afp_setup()) {
			printf("| %-8s | needs root and the ip tool (a namespace with a veth pair) |\n",
			       backend);
			return -EPERM;
		}
		addr = "esdbs";
	} else if (is_dpdk(backend)) {
		snprintf(sock, sizeof(sock), "/tmp/esd-bench-memif-%d.sock", (int)getpid());
		unlink(sock);
		addr = sock;
	}
	int runs = nrates * reps;
	int fds[2];
	nruns = runs;
	if (pipe(fds))
		return -errno;
	fflush(NULL);
	pid_t pid = fork();
	if (pid == 0) {
		close(fds[0]);
		receiver(backend, addr, runs, fds[1]);
	}
	close(fds[1]);
	FILE *in = fdopen(fds[0], "r");
	int rc;
	char raddr[256] = "";
	if (fscanf(in, "%d %255s", &rc, raddr) < 1 || rc) {
		printf("| %-8s | receiver did not start: %s |\n", backend, esd_strerror(rc));
		fclose(in);
		waitpid(pid, NULL, 0);
		return rc ? rc : -EIO;
	}

	/* One batch frame, built once. */
	struct esd_buf b, ctl;
	esd_buf_init(&b);
	esd_buf_init(&ctl);
	struct esd_rows_enc e;
	struct esd_rows hr = {.kind = ESD_XFER_UPDATE_PUSH, .dim = DIM};
	float v[DIM];
	for (int j = 0; j < DIM; j++)
		v[j] = (float)j;
	esd_enc_rows_begin(&e, &b, ESD_OP_PUSH_GRAD, &hr);
	for (int i = 0; i < ROWS; i++)
		esd_enc_row(&e, (esd_key_t)i, 0, v, NULL);
	esd_enc_rows_end(&e);

	struct encoder enc = {0};
	if (is_encoding(backend) && (rc = encoder_init(&enc, backend))) {
		printf("| %-8s | no memory for the rows |\n", backend);
		return rc;
	}
	static struct result res[MAX_RUNS];
	int order[MAX_RUNS];
	for (int r = 0; r < runs; r++)
		order[r] = r;
	for (int r = 0; r < runs; r++) {
		/* Interleave rates across repetitions (noise hits them alike). */
		int ri = r % nrates;
		struct esd_link_opts o;
		struct esd_link *l;
		set_opts(&o, backend, is_afp(backend) ? "esdbc" : raddr);
		o.memif_id = (uint32_t)r;
		o.rate_bps = is_tc(backend) ? 0 : (uint64_t)(rates[ri] * 1e9);
		if (is_tc(backend) && tc_shape(rates[ri])) {
			printf("| %-8s | tc could not shape esdbc |\n", backend);
			break;
		}
		if ((rc = esd_link_connect(&o, &l))) {
			printf("| %-8s | connect failed: %s |\n", backend, esd_strerror(rc));
			break;
		}
		int64_t end = esd_now_ns() + (int64_t)(seconds * 1e9);
		while (esd_now_ns() < end)
			if ((rc = enc.rows ? encode_and_send(l, &enc) : esd_link_send(l, b.data, b.len)))
				break;
		esd_buf_reset(&ctl);
		esd_enc_barrier(&ctl, &(struct esd_barrier){0});
		if (!rc)
			rc = esd_link_send(l, ctl.data, ctl.len);
		struct esd_msg m;
		if (!rc)
			rc = esd_link_recv(l, &m, 30 * ESD_NS_PER_S);
		struct esd_link_stats st;
		esd_link_stats(l, &st);
		res[r].retx = st.retx_frames;
		esd_link_close(l);
		unsigned long long frames, bytes, rows;
		double secs;
		if (rc || fscanf(in, "%llu %llu %llu %lf", &frames, &bytes, &rows, &secs) != 4) {
			printf("| %-8s | run %d failed: %s |\n", backend, r, esd_strerror(rc));
			break;
		}
		res[r].gbps = secs > 0 ? (double)bytes * 8 / secs / 1e9 : 0;
		res[r].row_gbps = secs > 0 ? (double)rows * DIM * 4 * 8 / secs / 1e9 : 0;
		res[r].seconds = secs;
		res[r].frames = frames;
		res[r].vs_raw = 0;
		if (rates[ri] == 0) {
			/* The baseline, side by side: plain sockets, same bytes. */
			double raw = raw_once(seconds, b.data, b.len);
			res[r].vs_raw = raw > 0 ? res[r].gbps / raw : 0;
		}
	}
	(void)order;
	fclose(in);
	kill(pid, SIGTERM);
	waitpid(pid, NULL, 0);
	if (addr == sock)
		unlink(sock);

	double base = 0;
	for (int ri = 0; ri < nrates; ri++) {
		double g[MAX_RUNS], rg[MAX_RUNS], vr[MAX_RUNS];
		int n = 0;
		for (int r = ri; r < runs; r += nrates) {
			g[n] = res[r].gbps;
			rg[n] = res[r].row_gbps;
			vr[n] = res[r].vs_raw;
			n++;
		}
		uint64_t retx = 0;
		for (int r = ri; r < runs; r += nrates)
			retx += res[r].retx;
		double lo = g[0], hi = g[0];
		for (int k = 0; k < n; k++) {
			lo = g[k] < lo ? g[k] : lo;
			hi = g[k] > hi ? g[k] : hi;
		}
		double med = median(g, n), rmed = median(rg, n);
		if (rates[ri] == 0)
			base = med;
		char set[32], ratio[32], vsraw[32];
		if (rates[ri] > 0) {
			snprintf(set, sizeof(set), "%.2f", rates[ri]);
			snprintf(ratio, sizeof(ratio), "%.4f", med / rates[ri]);
			snprintf(vsraw, sizeof(vsraw), "-");
		} else {
			snprintf(set, sizeof(set), "unshaped");
			snprintf(ratio, sizeof(ratio), "-");
			snprintf(vsraw, sizeof(vsraw), "%.2f", median(vr, n));
		}
		printf("| %-8s | %-8s | %8.3f | %8.3f | %8.3f | %6s | %6s | %8.3f | %5llu |\n",
		       backend, set, med, lo, hi, ratio, vsraw, rmed, (unsigned long long)retx);
	}
	(void)base;
	esd_buf_free(&b);
	esd_buf_free(&ctl);
	encoder_free(&enc);
	return 0;
}

int main(int argc, char **argv)
{
	const char *backends = "raw,tcp,tcp-poll,dpdk";
	double rates[16] = {0.5, 5, 20, 0};
	int nrates = 4, reps = 3;
	double seconds = 1.0;
	bool tags = false;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--tags")) {
			tags = true;
		} else if (!strcmp(argv[i], "--backends") && i + 1 < argc) {
			backends = argv[++i];
		} else if (!strcmp(argv[i], "--rates") && i + 1 < argc) {
			nrates = 0;
			for (char *s = argv[++i], *t; nrates < 16 && (t = strtok(s, ",")); s = NULL)
				rates[nrates++] = atof(t);
		} else if (!strcmp(argv[i], "--seconds") && i + 1 < argc) {
			seconds = atof(argv[++i]);
		} else if (!strcmp(argv[i], "--reps") && i + 1 < argc) {
			reps = atoi(argv[++i]);
		} else {
			fprintf(stderr,
			        "usage: %s [--backends tcp,tcp-poll,dpdk] [--rates 0.5,5,20,0] "
			        "[--seconds S] [--reps N] | --tags [--reps N]\n",
			        argv[0]);
			return 2;
		}
	}
	if (tags)
		return bench_tags(reps) ? 1 : 0;
	if (reps < 1 || nrates * reps > MAX_RUNS) {
		fprintf(stderr, "at most %d runs (rates x reps)\n", MAX_RUNS);
		return 2;
	}
	printf("# %d rows x %d floats per frame (%zu bytes), %.1f s per run, %d reps, median\n",
	       ROWS, DIM, esd_rows_frame_size(ROWS, DIM, 0), seconds, reps);
	printf("| backend  | set Gb/s | goodput  | min      | max      | /set   | /raw   "
	       "| row data | retx  |\n");
	printf("|----------|----------|----------|----------|----------|--------|--------"
	       "|----------|-------|\n");
	if (strstr(backends, "raw")) {
		struct esd_buf b;
		struct esd_rows_enc e;
		struct esd_rows hr = {.kind = ESD_XFER_UPDATE_PUSH, .dim = DIM};
		static float v[DIM];
		double g[MAX_RUNS];
		esd_buf_init(&b);
		esd_enc_rows_begin(&e, &b, ESD_OP_PUSH_GRAD, &hr);
		for (int i = 0; i < ROWS; i++)
			esd_enc_row(&e, (esd_key_t)i, 0, v, NULL);
		esd_enc_rows_end(&e);
		for (int r = 0; r < reps; r++)
			g[r] = raw_once(seconds, b.data, b.len);
		double lo = g[0], hi = g[0];
		for (int r = 0; r < reps; r++) {
			lo = g[r] < lo ? g[r] : lo;
			hi = g[r] > hi ? g[r] : hi;
		}
		printf("| %-8s | %-8s | %8.3f | %8.3f | %8.3f | %6s | %6s | %8s | %5s |\n",
		       "raw-sock", "unshaped", median(g, reps), lo, hi, "-", "1.00", "-", "-");
		esd_buf_free(&b);
	}
	char list[256];
	snprintf(list, sizeof(list), "%s", backends);
	for (char *s = list, *t; (t = strtok(s, ",")); s = NULL) {
		const char *why;
		if (!strcmp(t, "raw"))
			continue;
		const char *bk = is_dpdk(t) ? "dpdk" : "tcp";
		if (esd_transport_backend_check(bk, &why)) {
			printf("| %-8s | %s |\n", t, why);
			continue;
		}
		run_backend(t, rates, nrates, reps, seconds);
	}
	return 0;
}
