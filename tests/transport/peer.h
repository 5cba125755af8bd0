/*
 * A test peer for the transport tests: a real server process built from
 * the listener API with a tiny in-memory row store. It is not the PS: it
 * answers HELLO, PULL (rows), PUSH_VALUE (stores), PUSH_GRAD (adds, applied
 * exactly once through esd/dedup.h), BARRIER (ACK), STATS (its link's
 * counters); a frame it cannot decode gets an ERROR reply and a close.
 *
 * Row values start at peer_init_value(key, i); a PUSH_GRAD adds its
 * gradient to the value.
 */
#ifndef ESD_TEST_TRANSPORT_PEER_H
#define ESD_TEST_TRANSPORT_PEER_H

#include <esd/transport.h>
#include <sys/types.h>

#define PEER_DIM 16u

struct peer {
	pid_t pid;
	char addr[256];
};

static inline float peer_init_value(uint64_t key, uint32_t i)
{
	return (float)(key % 1000u) + 0.001f * (float)i;
}

/* Fork a peer serving links on o (o->addr: "127.0.0.1:0" picks a port, or
 * a memif socket path). Returns 0 with p filled, or -errno; 77-style skip
 * is reported as -ENODEV (the backend cannot start here). */
int peer_start(struct peer *p, const struct esd_link_opts *o);
/* Defaults for a dpdk af_packet link on iface, packets of 1400 frame bytes
 * (a veth's 1500-byte MTU). */
void peer_af_packet_opts(struct esd_link_opts *o, const char *iface);
/* SIGKILL and reap the peer. */
void peer_kill(struct peer *p);
/* SIGTERM, wait up to 2 s, then SIGKILL. */
void peer_stop(struct peer *p);

/* Client helpers: send a buffer, receive one message of op (or fail). */
int peer_send_buf(struct esd_link *l, struct esd_buf *b);
int peer_expect(struct esd_link *l, struct esd_msg *m, unsigned op, int64_t timeout_ns);
/* Receive on l for ns with nothing coming (-ETIMEDOUT, else -EPROTO):
 * how many times this thread went to sleep meanwhile (voluntary context
 * switches), printed with its CPU time. A link that sleeps until its peer
 * sends wakes only for its link checks; one that polls between short
 * sleeps wakes at every sleep. */
long peer_idle_sleeps(struct esd_link *l, int64_t ns);

#endif
