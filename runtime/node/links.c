/* The node's links to the PS shards: connect, HELLO, learn the shards'
 * iteration (a restarted shard reports the checkpoint it resumed from). */
#include "node.h"

#include <esd/clock.h>
#include <esd/err.h>
#include <esd/log.h>
#include <esd/optim.h>

int node_links_open(struct node *nd)
{
	struct esd_buf b;
	int rc = 0;

	esd_buf_init(&b);
	for (uint32_t s = 0; s < nd->job.shards && !rc; s++) {
		struct esd_link_opts lo;
		esd_link_opts_init(&lo);
		lo.backend = nd->job.backend;
		lo.addr = nd->job.addrs[s];
		lo.rate_bps = nd->job.rate_bps[nd->rank];
		lo.memif_id = nd->rank;
		lo.timeout_ns = 30 * ESD_NS_PER_S;
		/* the shard may still be starting: retry for a while */
		int64_t deadline = esd_now_ns() + 30 * ESD_NS_PER_S;
		do {
			rc = esd_link_connect(&lo, &nd->link[s]);
			if (rc == -ECONNREFUSED)
				esd_sleep_ns(100 * ESD_NS_PER_MS);
		} while (rc == -ECONNREFUSED && esd_now_ns() < deadline);
		if (rc) {
			ESD_ERR("node", "cannot reach shard %u at %s (%s): %s", s, nd->job.addrs[s],
				nd->job.backend, esd_strerror(rc));
			break;
		}
		struct esd_hello h = {
			.proto_version = ESD_PROTO_VERSION, .worker = nd->rank,
			.job_token = nd->job.token, .shard = s, .dim = nd->job.dim,
			.state_dim = (uint32_t)esd_optim_state_len(nd->job.optim.opt, nd->job.dim),
			.nworkers = nd->job.n,
		};
		rc = esd_enc_hello(&b, &h, 0);
		if (!rc)
			rc = esd_link_send(nd->link[s], b.data, b.len);
		esd_buf_reset(&b);
		for (int want = 2; !rc && want > 0; want--) { /* HELLO reply, then ACK */
			struct esd_msg m;
			rc = esd_link_recv(nd->link[s], &m, 30 * ESD_NS_PER_S);
			if (rc)
				break;
			if (m.hdr.op == ESD_OP_ERROR) {
				ESD_ERR("node", "shard %u refused us: %.*s", s, (int)m.u.error.len,
					m.u.error.text);
				rc = -ECONNREFUSED;
			} else if (m.hdr.op == ESD_OP_ACK && m.u.ack.op == ESD_OP_HELLO) {
				if (m.u.ack.iteration != 0) {
					ESD_ERR("node", "shard %u is at iteration %llu; this daemon "
						"starts at 0 (resuming a job needs every node restarted "
						"from the same checkpoint)", s,
						(unsigned long long)m.u.ack.iteration);
					rc = -ESTALE;
				}
			} else if (m.hdr.op != ESD_OP_HELLO) {
				rc = -EPROTO;
			}
		}
	}
	esd_buf_free(&b);
	return rc;
}

void node_links_close(struct node *nd)
{
	for (uint32_t s = 0; s < ESD_JOB_MAX_SHARDS; s++) {
		esd_link_close(nd->link[s]);
		nd->link[s] = NULL;
	}
}
